"""Playwright fixtures: the app's own server (tools/serve.mjs) and headless Debian
Chromium with WebGPU (SwiftShader). Missing browser -> fail in CI, skip elsewhere."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT, need

CHROMIUM = os.environ.get("BITWEB_CHROMIUM", "/usr/bin/chromium")
CHROME_ARGS = ["--enable-unsafe-webgpu", "--no-sandbox", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]


@pytest.fixture(scope="session")
def server():
    """Base URL of tools/serve.mjs on a free port."""
    need(shutil.which("node") is not None, "node is not installed")
    subprocess.run([sys.executable, str(ROOT / "tools" / "build_web.py")], check=True, capture_output=True)
    env = dict(os.environ, PORT="0")
    proc = subprocess.Popen(["node", str(ROOT / "tools" / "serve.mjs")], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = proc.stdout.readline()
    m = re.search(r"http://[\d.]+:\d+/", line)
    if not m:
        proc.kill()
        pytest.fail(f"server did not start: {line!r}")
    yield m.group(0)
    proc.kill()
    proc.wait()


@pytest.fixture(scope="session")
def browser():
    need(os.path.exists(CHROMIUM), f"{CHROMIUM} not found (Debian: apt-get install chromium)")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROME_ARGS, headless=True)
        yield b
        b.close()


def new_page(ctx):
    """A page of context ctx; console errors and uncaught exceptions are collected in page.errors."""
    pg = ctx.new_page()
    pg.errors = []
    pg.on("console", lambda m: pg.errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    return pg


@pytest.fixture
def page(browser):
    """A fresh page in a fresh context (see new_page)."""
    ctx = browser.new_context()
    yield new_page(ctx)
    ctx.close()
