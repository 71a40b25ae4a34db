"""The boot snapshot shipped with the app (build/web/boot-snapshot.*, tools/boot_snapshot.py) in
headless Chromium: one that is not for this build, or whose bytes do not restore, is passed over
and Python boots fresh, with no error shown (web/py.mjs). Each boot runs web/py.mjs in a new module
worker of one page, as the app's worker does; the page's Cache API stays empty (nothing is saved).
The app's own first visit (from the shipped snapshot) and a missing one (404, then a chat) are in
tests/e2e/test_app.py."""
from __future__ import annotations

import hashlib
import json

import pytest

from tests.conftest import ROOT, need
from tests.e2e.conftest import new_page, settle

META = ROOT / "build" / "web" / "boot-snapshot.json"
PAGE = "boot-snapshot-test.html"
BOOT_JS = """async () => {
  const src = `import { bootPython } from '${location.origin}/py.mjs';
    bootPython().then((py) => {
      const b = py.bitwebBoot;
      postMessage({ from: b.from, shipped: b.shipped ?? null, snapshotError: b.snapshotError ?? null, stages: Object.keys(b.stages),
                    works: py.runPython('import bitweb.webapp, bitweb.gguf; bitweb.webapp.__name__') });
    }, (e) => postMessage({ error: String(e) }));`;
  const w = new Worker(URL.createObjectURL(new Blob([src], { type: 'text/javascript' })), { type: 'module' });
  try {
    return await new Promise((ok, bad) => { w.onmessage = (e) => ok(e.data); w.onerror = (e) => bad(new Error(e.message)); });
  } finally {
    w.terminate();
  }
}"""


@pytest.fixture(scope="module")
def origin(browser, server):
    """A page of the server's origin (a blank route) whose context has no boot snapshot of its own."""
    ctx = browser.new_context()
    ctx.route(server + PAGE, lambda route: route.fulfill(status=200, content_type="text/html",
                                                         body="<!doctype html><title>boot snapshot</title>"))
    pg = new_page(ctx)
    pg.goto(server + PAGE)
    pg.requests = []
    ctx.on("request", lambda r: pg.requests.append(r.url) if "boot-snapshot." in r.url else None)
    yield pg
    ctx.close()


def boot(pg, meta: dict | None, body: bytes | None):
    """Boot Python in a new worker with the shipped snapshot's JSON and bytes served as given."""
    ctx = pg.context
    ctx.route("**/build/web/boot-snapshot.json", lambda r: r.fulfill(status=200, content_type="application/json",
                                                                     body=json.dumps(meta)))
    ctx.route("**/build/web/boot-snapshot.bin", lambda r: r.fulfill(status=200, content_type="application/octet-stream",
                                                                    body=body))
    pg.requests.clear()
    try:
        res = settle(pg, BOOT_JS, what="Python's boot in a new worker")
    finally:
        ctx.unroute("**/build/web/boot-snapshot.json")
        ctx.unroute("**/build/web/boot-snapshot.bin")
    assert "error" not in res, res
    assert res["works"] == "bitweb.webapp", res                # a working Python either way
    assert pg.errors == [], pg.errors                          # no error shown (a warning at most)
    return res


def shipped_meta() -> dict:
    need(META.exists(), "no shipped boot snapshot (tools/boot_snapshot.py needs Playwright and Chromium)")
    return json.loads(META.read_text())


def test_snapshot_of_another_build_is_not_even_fetched(origin):
    """A key naming another archive (an older build's snapshot left behind): a fresh boot, and the
    stale bytes are never downloaded."""
    meta = {**shipped_meta(), "zip_sha256": "0" * 64}
    res = boot(origin, meta, b"never asked for")
    assert res["from"] == "fresh" and res["shipped"] == "stale", res
    assert "import" in res["stages"] and "shipped-read" not in res["stages"], res
    assert not any(u.endswith(".bin") for u in origin.requests), origin.requests


def test_snapshot_that_does_not_restore_gives_a_fresh_boot(origin):
    """Garbage bytes under a key that names this build and exactly those bytes: the restore itself
    fails, and the boot starts over without the snapshot."""
    garbage = hashlib.sha256(b"seed").digest() * (1 << 15)          # 1 MiB, not a snapshot
    meta = {**shipped_meta(), "bytes": len(garbage), "sha256": hashlib.sha256(garbage).hexdigest()}
    res = boot(origin, meta, garbage)
    assert res["from"] == "fresh" and res["shipped"].startswith("spoiled: "), res
    assert any(u.endswith("boot-snapshot.bin") for u in origin.requests), origin.requests


def test_snapshot_whose_bytes_differ_from_its_key_is_not_restored(origin):
    """Bytes of the length the key names but not its SHA-256: refused before any restore."""
    meta = shipped_meta()
    res = boot(origin, {**meta, "bytes": 4096, "sha256": "f" * 64}, bytes(4096))
    assert res["from"] == "fresh" and res["shipped"] == "spoiled: its SHA-256 is not the one its key names", res
