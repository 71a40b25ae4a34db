"""Run kernel cases in headless Chromium (SwiftShader) through web/dev/kernels.html (dev check, not a test).

usage: .venv/bin/python dev/ops/browser.py [only-substring] [--full FAMILY ...] [--skip-big]

Without --full: the "browser" cases tools/build_web.py writes (what tests/e2e/test_kernels_browser.py
runs), filtered by name. With --full: the "full" cases of the named families (bitweb.ref.FAMILIES:
bitlinear, bitlinear_tiled, dense, ops, requant, lmhead) are written to build/web first and the
browser vectors are restored afterwards. --skip-big drops the 2B4T LM-head cases. Prints the
adapter, the pass count, the time and every failure.
"""
import argparse, json, os, subprocess, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from chromium import ROOT, page  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("only", nargs="?", default="", help="run the cases whose name contains this")
ap.add_argument("--full", nargs="+", default=[], metavar="FAMILY", help="the native cases of these families")
ap.add_argument("--skip-big", action="store_true", help="with --full: without the 2B4T LM-head cases")
args = ap.parse_args()
only, full = args.only, args.full
build = [sys.executable, os.path.join(ROOT, "tools", "build_web.py")]
subprocess.run(build, check=True, capture_output=True)
if full:
    from bitweb.ref import build_cases
    b = build_cases("full", tuple(full))
    if args.skip_big:
        b.cases = [c for c in b.cases if "2b4t_lm_head" not in c["name"]]
    out = os.path.join(ROOT, "build", "web")
    open(os.path.join(out, "kernel_vectors.bin"), "wb").write(bytes(b.blob))
    open(os.path.join(out, "kernel_vectors.json"), "w").write(b.manifest())
    print(f"wrote {len(b.cases)} full cases of {full}", flush=True)
try:
    with page() as (pg, url):
        pg.on("console", lambda m: print("console:", m.text[:500]) if m.type == "error" else None)
        t = time.time()
        pg.goto(url + "dev/kernels.html?only=" + only)
        pg.wait_for_function("window.kernelResults !== undefined", timeout=1200_000)
        res = pg.evaluate("window.kernelResults")
        print(res.get("adapter"), res.get("text"), f"{time.time() - t:.0f}s", res.get("error", ""))
        for r in res["results"]:
            if not r["ok"]:
                print("FAIL", json.dumps(r)[:1500])
finally:
    if full:
        subprocess.run(build, check=True, capture_output=True)
