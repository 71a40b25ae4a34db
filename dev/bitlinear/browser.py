"""Run web/kernels.html?only=<filter> in headless Chromium (SwiftShader) and print the results (dev helper).
usage: python dev/bitlinear/browser.py [filter]"""
import json, os, re, subprocess, sys
from playwright.sync_api import sync_playwright
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
only = sys.argv[1] if len(sys.argv) > 1 else "bitlinear"
subprocess.run([sys.executable, os.path.join(ROOT, "tools", "build_web.py")], check=True, capture_output=True)
proc = subprocess.Popen(["node", os.path.join(ROOT, "tools", "serve.mjs")], cwd=ROOT, env=dict(os.environ, PORT="0"),
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
base = re.search(r"http://[\d.]+:\d+/", proc.stdout.readline()).group(0)
try:
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=[
            "--enable-unsafe-webgpu", "--no-sandbox", "--disable-background-networking", "--disable-component-update"])
        pg = b.new_page()
        pg.on("console", lambda m: print("console:", m.text[:500]) if m.type == "error" else None)
        pg.goto(base + "kernels.html?only=" + only)
        pg.wait_for_function("window.kernelResults !== undefined", timeout=900_000)
        res = pg.evaluate("window.kernelResults")
        print(res.get("adapter"), res.get("text"), res.get("error", ""))
        for r in res["results"]:
            print("ok  " if r["ok"] else "FAIL", r["name"], "" if r["ok"] else json.dumps(r)[:1500])
        b.close()
finally:
    proc.kill()
