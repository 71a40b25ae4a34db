"""Headless Chromium (WebGPU on SwiftShader) on the repository served by tools/serve.mjs, for the
dev scripts (dev/*/): one place for the server, the browser and the flags the tests use.

    sys.path.insert(0, <this directory>); from chromium import ROOT, page
    with page(build=True) as (pg, url):      # url: the server's root, e.g. http://127.0.0.1:40613/
        pg.goto(url + "dev/kernels.html")

build: run tools/build_web.py first (the pages load build/web/bitweb.zip). The browser is
$BITWEB_CHROMIUM or /usr/bin/chromium; pg.context is a fresh browser context (routes, storage).
"""
import contextlib, os, subprocess, sys
from playwright.sync_api import sync_playwright

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
from serving import served  # noqa: E402  (tools/serving.py)
ARGS = ["--enable-unsafe-webgpu", "--no-sandbox", "--disable-background-networking", "--disable-component-update"]


@contextlib.contextmanager
def page(build: bool = False):
    if build:
        subprocess.run([sys.executable, os.path.join(ROOT, "tools", "build_web.py")], check=True, capture_output=True)
    with served() as url, sync_playwright() as p:
        br = p.chromium.launch(executable_path=os.environ.get("BITWEB_CHROMIUM", "/usr/bin/chromium"),
                               args=ARGS, headless=True)
        try:
            yield br.new_page(), url
        finally:
            br.close()
