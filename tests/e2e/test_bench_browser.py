"""The benchmarks in headless Chromium (SwiftShader) through Pyodide: web/bench.html.

By default (the test suite) the --quick kernel shapes and a short decode of a tiny generated
model, checked for well-formed JSON like the native ones (tests/test_bench.py); no timed
assertions. `npm run bench` sets BITWEB_BENCH=full: the 2B4T kernel shapes and a decode of the
generated `small` model (BITWEB_BENCH_MODEL=preset or path to change it), and prints the JSON.
"""
import json
import os
import shutil

from bitweb import bench
from bitweb.authoring.makemodel import PRESETS, ModelSpec, load_vocab, write_model
from tests.conftest import ROOT
from tests.test_bench import KERNEL_FIELDS, check_kernel_results

FULL = os.environ.get("BITWEB_BENCH", "") == "full"


def bench_model() -> str:
    """URL path (under /build/web/bench/) of the model the decode benchmark runs."""
    d = ROOT / "build" / "web" / "bench"
    d.mkdir(parents=True, exist_ok=True)
    want = os.environ.get("BITWEB_BENCH_MODEL", "small" if FULL else "tiny")
    if want in PRESETS:
        path = d / f"{want}-i2_s.gguf"
        if not path.exists():
            write_model(ModelSpec(arch="bitnet-b1.58", fmt="i2_s", preset=want, seed=0, scale_tensors=False,
                                  **PRESETS[want]), load_vocab("bytes" if want != "2b4t" else "llama3"), path)
    else:
        path = d / os.path.basename(want)
        if not path.exists():
            shutil.copyfile(want, path)
    return "build/web/bench/" + path.name


def test_bench_in_browser(server, page):
    model = bench_model()
    query = f"model=/{model}" + ("" if FULL else "&quick=1&tokens=5&prompt=8&repeats=1")
    page.goto(server + "bench.html?" + query)
    long = FULL or os.environ.get("BITWEB_BENCH_MODEL")
    page.wait_for_function("window.benchResults !== undefined", timeout=(3_600_000 if long else 600_000))
    res = page.evaluate("window.benchResults")
    assert "error" not in res, res.get("error")
    k, d = res["kernels"], res["decode"]
    assert k["device"].startswith("browser"), k["device"]
    assert all(set(r) == KERNEL_FIELDS for r in k["results"])
    check_kernel_results(k, bench.SHAPES if FULL else bench.QUICK_SHAPES)
    assert d["bench"] == "decode" and d["decoded_tokens"] == (31 if FULL else 4)
    assert d["dispatches_per_layer"] > 0 and d["host_calls_per_token"] > 0
    assert 0 <= d["host_share"] <= 1 and d["bytes_per_token"] > 0 and d["roofline_ms"] > 0
    assert page.errors == []
    if FULL or os.environ.get("BITWEB_BENCH_PRINT"):
        print(json.dumps({"kernels": k, "decode": d}, indent=1))
