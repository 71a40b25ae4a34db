"""Ready time of this tree against another checkout (`--before DIR`, built: build/web/bitweb.zip)
and wllama, in one headless Chromium (SwiftShader), taking turns: each round opens
web/bench-ready.html twice in a fresh browser context per engine
(first visit: nothing cached; second: the engine's own caches), the engines in alternating order.
Each visit ends with bench-ready's replies (4 tokens): bitweb's last one waits for its prefill
kernels, so no compile of one visit is still running in the GPU process during the next.

    git archive main | tar -x -C /tmp/before && ln -s $PWD/node_modules /tmp/before/ \\
      && (cd /tmp/before && $PWD/.venv/bin/python tools/build_web.py)
    .venv/bin/python dev/perf/ready_ab.py --before /tmp/before --rounds 2

bench-ready.html waits (after its figures) for bitweb's worker to have stored its boot snapshot
(web/py.mjs), as a person would read the page before coming back. Prints one line per
visit and a table of medians: ready ms and bitweb's stages (engine.info.load.stages, ms).
"""
from __future__ import annotations

import argparse
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tests.e2e.conftest import CHROME_ARGS  # noqa: E402
from tests.e2e.test_bench_browser import tq2_0_twin  # noqa: E402

def serve(root: pathlib.Path):
    p = subprocess.Popen(["node", str(root / "tools" / "serve.mjs")], cwd=root, env=dict(os.environ, PORT="0"),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p, re.search(r"http://[\d.]+:\d+/", p.stdout.readline()).group(0)


def visits(browser, base, engine, model, n=2):
    ctx = browser.new_context()
    out = []
    try:
        page = ctx.new_page()
        for v in range(n):
            page.goto(base + f"bench-ready.html?engine={engine}&model=/{model}&max_tokens=4")
            page.wait_for_function("window.readyResult !== undefined", timeout=600_000)
            r = page.evaluate("window.readyResult")
            assert "error" not in r, r
            r["visit"] = "first" if v == 0 else "cached"
            out.append(r)
    finally:
        ctx.close()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=pathlib.Path, required=True)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    from playwright.sync_api import sync_playwright
    subprocess.run([sys.executable, str(ROOT / "tools" / "build_web.py")], check=True, capture_output=True)
    model = tq2_0_twin()
    (a.before / model).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / model, a.before / model)
    (s_after, after), (s_before, before) = serve(ROOT), serve(a.before.resolve())
    rows = []
    try:
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=os.environ.get("BITWEB_CHROMIUM", "/usr/bin/chromium"), args=CHROME_ARGS)
            load0 = os.getloadavg()
            runs = [("before", before, "bitweb"), ("after", after, "bitweb"), ("wllama", after, "wllama")]
            for r in range(a.rounds):
                for name, base, engine in (runs if r % 2 == 0 else runs[::-1]):
                    for res in visits(b, base, engine, model):
                        res["variant"] = name
                        rows.append(res)
                        st = {k: round(v[1] - v[0]) for k, v in (res.get("stages") or {}).items()}
                        print(name, res["visit"], round(res["ready_ms"]), st, res.get("boot"), res.get("prepared"),
                              flush=True)
            load1 = os.getloadavg()
            b.close()
    finally:
        s_after.kill()
        s_before.kill()
    print(f"\nload average {load0[0]:.1f} before, {load1[0]:.1f} after; {a.rounds} rounds; {model}")
    print("| variant | visit | ready ms | boot | header | device | upload | compile | plans |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in ("before", "after", "wllama"):
        for visit in ("first", "cached"):
            rs = [x for x in rows if x["variant"] == name and x["visit"] == visit]
            if not rs:
                continue
            med = lambda f: statistics.median(f(x) for x in rs)  # noqa: E731
            cols = [f"{med(lambda x: x['ready_ms']):.0f}"]
            for k in ("boot", "header", "device", "upload", "compile", "plans"):
                have = [x for x in rs if x.get("stages") and k in x["stages"]]
                cols.append(f"{statistics.median(x['stages'][k][1] - x['stages'][k][0] for x in have):.0f}" if have else "")
            print(f"| {name} | {visit} | " + " | ".join(cols) + " |")


if __name__ == "__main__":
    main()
