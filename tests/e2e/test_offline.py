"""The app offline after its first visit (web/sw.js, web/offline.mjs), served by a plain static
server: Python's http.server with only the headers README ("Serving it yourself") asks of a host,
not tools/serve.mjs (no COOP / COEP, no gzip). The static tree is a copy of the layout README names
(web/, build/web/, node_modules/pyodide/, markdown-it's browser build), with its own
build/web/precache.js (tools/build_web.py write_precache).

One browser profile, in order: a first visit loads the default model and chats; the server stops;
a reload boots from the service worker's cache, loads the cached model and gives the same reply.
Then a new version appears on the server: the next online visit runs it and the service worker
installs it, while the page still open from the old cache keeps getting the old files (versions
never mix); once that page is gone the old cache is deleted, and with the server stopped again a
reload runs the new version offline (and loads the cached model).
"""
from __future__ import annotations

import functools
import http.server
import os
import pathlib
import shutil
import threading

from tests.conftest import ROOT
from tests.e2e.conftest import new_page

READY_MS = 240_000          # Pyodide boot + model load on SwiftShader (2 shared cores)
PROMPT = "Hello!"
MARK = "/* offline test: version 2 */"
# What README "Serving it yourself" asks of a static host, and nothing else.
HOST_TYPES = {".mjs": "text/javascript", ".wasm": "application/wasm"}


def build_web():
    import importlib.util
    spec = importlib.util.spec_from_file_location("build_web", ROOT / "tools" / "build_web.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def static_tree(root: pathlib.Path) -> pathlib.Path:
    """The files a static host needs (README), under root: web/ copied (the test edits it), the
    rest linked; build/web/precache.js written for this tree."""
    shutil.copytree(ROOT / "web", root / "web")
    (root / "build" / "web").mkdir(parents=True)
    for name in ("bitweb.zip", "options.json", "boot-snapshot.json", "boot-snapshot.bin"):
        os.symlink(ROOT / "build" / "web" / name, root / "build" / "web" / name)
    (root / "node_modules" / "markdown-it" / "dist").mkdir(parents=True)
    os.symlink(ROOT / "node_modules" / "pyodide", root / "node_modules" / "pyodide")
    os.symlink(ROOT / "node_modules" / "markdown-it" / "dist" / "browser", root / "node_modules" / "markdown-it" / "dist" / "browser")
    (root / "node_modules" / "hash-wasm").mkdir(parents=True)
    os.symlink(ROOT / "node_modules" / "hash-wasm" / "dist", root / "node_modules" / "hash-wasm" / "dist")
    build_web().write_precache(root)
    return root


class Handler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, **HOST_TYPES}

    def end_headers(self):
        self.send_header("Cache-Control", "no-cache")
        super().end_headers()

    def log_message(self, *args):
        pass


class Host:
    """http.server over a directory on one port: stop() closes the port (connections are refused,
    as with the server gone), start() opens it again."""

    def __init__(self, root: pathlib.Path):
        self.root, self.port, self.httpd = root, 0, None

    def start(self):
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", self.port),
                                                     functools.partial(Handler, directory=str(self.root)))
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}/web/"


# ---------------------------------------------------------------- the page

def wait_ready(page):
    page.wait_for_function("(() => { const s = window.bitwebApp?.state;"
                           "  return !document.getElementById('error').hidden || document.body.dataset.state === 'failed'"
                           "    || (document.body.dataset.state === 'ready' && s?.engine); })()", timeout=READY_MS)
    err = page.evaluate("document.getElementById('error').hidden ? '' : document.getElementById('error').innerText")
    assert page.evaluate("document.body.dataset.state") == "ready", f"{err}; console: {page.errors[-5:]}"
    return page.evaluate("({...window.bitwebApp.state.engine.info})")


def chat(page) -> str:
    """A new chat, PROMPT, the finished reply's text (greedy, 16 tokens at most)."""
    page.click("#new-chat")
    page.fill("#s-temperature", "0")
    page.fill("#s-max_tokens", "16")
    page.fill("#input", PROMPT)
    page.press("#input", "Enter")
    page.wait_for_function("(document.querySelectorAll('.msg.assistant[data-done]').length >= 1"
                           "  && document.body.dataset.state === 'ready') || !document.getElementById('error').hidden",
                           timeout=READY_MS)
    err = page.evaluate("document.getElementById('error').hidden ? '' : document.getElementById('error').innerText")
    assert not err, err
    return page.locator(".msg.assistant").last.evaluate("e => e.raw")


def sw_status(page, until: str = "true"):
    """web/offline.mjs status() once `until` (JS over `s`, the status) holds (polled)."""
    page.wait_for_function(
        "([until]) => { import(new URL('offline.mjs', location.href).href).then((m) => m.status()).then((s) => { window.__sw = s; });"
        "  const s = window.__sw; return !!s && (0, eval)('(s) => ' + until)(s); }",
        arg=[until], timeout=120_000, polling=250)
    return page.evaluate("window.__sw")


def boot_snapshot_saved(page):
    """Wait until this page's worker has stored its boot snapshot (web/py.mjs), or booted from one."""
    page.wait_for_function("window.bitwebApp.bitweb.stats().then((s) => { window.__boot = s.boot; })"
                           " && window.__boot && (window.__boot.from === 'snapshot' || window.__boot.snapshotSaved > 0)",
                           timeout=240_000, polling=250)


def text_of(page, path: str) -> str:
    return page.evaluate("(p) => fetch(new URL(p, location.href)).then((r) => r.text())", path)


# Failed requests Chromium reports while the server is down: the model's freshness check (HEAD)
# and the service worker's navigation fetch, both answered from the caches.
OFFLINE_NOISE = ("net::ERR_CONNECTION_REFUSED",)


def errors(page):
    return [e for e in page.errors if not any(n in e for n in OFFLINE_NOISE)]


# ---------------------------------------------------------------- the test

def test_offline_after_the_first_visit_and_a_new_version_replaces_the_old(browser, server, tmp_path):
    # (`server`: the session's build of build/web, which the static tree links to)
    root = static_tree(tmp_path / "site")
    v1 = build_web().precache(root)["version"]
    host = Host(root)
    host.start()
    ctx = browser.new_context()
    try:
        # 1. the first visit: the default model loads and answers; the offline copy is made
        page = new_page(ctx)
        page.goto(host.url)
        info = wait_ready(page)
        assert info["name"] == "bitweb-chat-i2_s.gguf"
        online = chat(page)
        assert online.strip(), "no reply online"
        st = sw_status(page, f"s.version === '{v1}' && s.complete")
        assert st["caches"] == [f"bitweb-app-{v1}"], st
        boot_snapshot_saved(page)

        # 2. the server is gone: a reload boots from the caches, loads the cached model, chats
        host.stop()
        page.reload()
        info = wait_ready(page)
        assert info["name"] == "bitweb-chat-i2_s.gguf"
        assert info["load"]["boot"]["from"] == "snapshot", info["load"]["boot"]
        assert sw_status(page)["pin"] == v1                       # served from the cache, not the network
        assert chat(page) == online
        assert MARK not in text_of(page, "style.css")
        assert errors(page) == [], errors(page)

        # 3. a new version on the server: the next online visit runs it, and the service worker
        # installs it; the page still open from the old cache keeps the old files
        css = root / "web" / "style.css"
        css.write_text(css.read_text(encoding="utf-8") + "\n" + MARK + "\n", encoding="utf-8")
        v2 = build_web().write_precache(root)["version"]
        assert v2 != v1
        host.start()
        page2 = new_page(ctx)
        page2.goto(host.url)
        wait_ready(page2)
        assert MARK in text_of(page2, "style.css")                # the new version, at once
        st = sw_status(page2, f"s.version === '{v2}' && s.complete")
        assert st["pin"] == "network", st
        assert sorted(st["caches"]) == sorted([f"bitweb-app-{v1}", f"bitweb-app-{v2}"]), st   # v1: the old page's
        assert MARK not in text_of(page, "style.css")             # the old page: still version 1 (server up)
        assert sw_status(page)["pin"] == v1
        assert errors(page) == [] and page2.errors == [], (errors(page), page2.errors)

        # 4. the old page closes: its version's cache goes
        page.close()
        st = sw_status(page2, f"s.caches.length === 1")
        assert st["caches"] == [f"bitweb-app-{v2}"], st

        # 5. offline again: the new version runs from the cache
        boot_snapshot_saved(page2)
        host.stop()
        page2.reload()
        info = wait_ready(page2)
        assert info["name"] == "bitweb-chat-i2_s.gguf"
        assert sw_status(page2)["pin"] == v2
        assert MARK in text_of(page2, "style.css")
        assert errors(page2) == [], errors(page2)
    finally:
        ctx.close()
        try:
            host.stop()
        except Exception:
            pass

