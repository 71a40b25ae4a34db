"""The browser kernel cases (scope "browser") through Pyodide + navigator.gpu in headless
Chromium (SwiftShader): web/dev/kernels.html, the same page a person can open on a real GPU."""
import json

from bitweb.ref import build_cases


def test_kernels_in_browser(server, page):
    expected = [c["name"] for c in build_cases("browser").cases]
    assert expected, "no browser kernel cases"
    page.goto(server + "dev/kernels.html")
    page.wait_for_function("window.kernelResults !== undefined", timeout=600_000)
    res = page.evaluate("window.kernelResults")
    assert "error" not in res, res.get("error")
    assert "browser" in res["adapter"], res["adapter"]
    got = {r["name"]: r for r in res["results"]}
    assert sorted(got) == sorted(expected)
    bad = [r for r in res["results"] if not r["ok"]]
    assert not bad, json.dumps(bad, indent=1)[:4000]
    assert page.errors == []
