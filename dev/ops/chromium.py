"""Headless Chromium (WebGPU on SwiftShader) on a page served by tools/serve.mjs, for the dev tools here.

    with page() as (pg, url):      # url: the server's root, e.g. http://127.0.0.1:40613/
        pg.goto(url + "kernels.html")
"""
import contextlib, os, re, subprocess
from playwright.sync_api import sync_playwright

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARGS = ["--enable-unsafe-webgpu", "--no-sandbox", "--disable-background-networking", "--disable-component-update"]


@contextlib.contextmanager
def page():
    proc = subprocess.Popen(["node", os.path.join(ROOT, "tools", "serve.mjs")], cwd=ROOT,
                            env=dict(os.environ, PORT="0"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = re.search(r"http://[\d.]+:\d+/", proc.stdout.readline()).group(0)
        with sync_playwright() as p:
            br = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS, headless=True)
            try:
                yield br.new_page(), url
            finally:
                br.close()
    finally:
        proc.kill()
