"""Run the FULL dense + ops case set in headless Chromium (SwiftShader) through web/kernels.html.

Dev check only (the suite runs the "browser" scope). Writes full vectors into build/web/, runs the
page, prints failures and timings, then restores the browser vectors (tools/build_web.py).
usage: .venv/bin/python dev/ops/browser_full.py [only-substring] [--skip-big]
"""
import json, os, re, subprocess, sys, time
from playwright.sync_api import sync_playwright
from bitweb.kernel_check import CaseBuilder
from bitweb.ref import dense, ops

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARGS = ["--enable-unsafe-webgpu", "--no-sandbox", "--disable-background-networking", "--disable-component-update"]
only = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("--") else ""
b = CaseBuilder()
dense.cases(b, "full")
ops.cases(b, "full")
if "--skip-big" in sys.argv:
    b.cases = [c for c in b.cases if "2b4t_lm_head" not in c["name"]]
out = os.path.join(ROOT, "build", "web")
open(os.path.join(out, "kernel_vectors.bin"), "wb").write(bytes(b.blob))
open(os.path.join(out, "kernel_vectors.json"), "w").write(b.manifest())
proc = subprocess.Popen(["node", os.path.join(ROOT, "tools", "serve.mjs")], cwd=ROOT, env=dict(os.environ, PORT="0"),
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
url = re.search(r"http://[\d.]+:\d+/", proc.stdout.readline()).group(0)
try:
    with sync_playwright() as p:
        br = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS, headless=True)
        pg = br.new_page()
        t = time.time()
        pg.goto(url + "kernels.html?only=" + only)
        pg.wait_for_function("window.kernelResults !== undefined", timeout=1200_000)
        res = pg.evaluate("window.kernelResults")
        print(res.get("adapter"), res.get("text"), f"{time.time() - t:.0f}s")
        for r in res["results"]:
            if not r["ok"]:
                print("FAIL", json.dumps(r)[:1500])
finally:
    proc.kill()
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "build_web.py")], check=True, capture_output=True)
