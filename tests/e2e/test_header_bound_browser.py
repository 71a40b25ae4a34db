"""A hostile header through the page's file input: a valid model file with a 192 MiB metadata
string (sparse on disk). The header reader (webapp.parse_header + gguf's 64 MiB bound) refuses it
after the first 256 KiB prefix: a format error naming the field and the bound, and the worker's
wasm heap (which never shrinks) grows by less than 4 MiB. Before the bound the same file grew it
from 30 to 699 MiB for good. A legitimate 8 MiB string still loads, the heap growing by a stated
multiple of it (the prefix, the parser's copy of the string, the decoded str): measured 0 and
21.9 MiB.

Selectors: `#file-input` (the page's model file input), `[data-kind=format]` (the error element's
kind), `body[data-state=ready]`; the worker's `bitwebWasmBytes()` (web/worker.mjs)."""
from __future__ import annotations

import struct

from tests.e2e.app_driver import READY_MS, App, make_model

MiB = 1 << 20


def with_string(model: bytes, out, key: str, length: int):
    """`model` with one more metadata kv (first): `key` = a string of `length` NUL bytes (valid
    UTF-8), written sparse. The kv takes a multiple of 32 bytes, so the tensor data stays aligned."""
    assert model[:4] == b"GGUF" and struct.unpack_from("<I", model, 4)[0] == 3
    n_kv = struct.unpack_from("<Q", model, 16)[0]
    kv = struct.pack("<Q", len(key)) + key.encode() + struct.pack("<IQ", 8, length)
    assert (len(kv) + length) % 32 == 0, "pick a length that keeps the data aligned"
    with open(out, "wb") as f:
        f.write(model[:16] + struct.pack("<Q", n_kv + 1) + kv)
        f.seek(length, 1)                                   # the string: a hole of zeros
        f.write(model[24:])
    return out


def wasm(page) -> int:
    worker = next(w for w in page.workers if "worker" in w.url)
    return worker.evaluate("self.bitwebWasmBytes()")


def test_huge_header_string_is_refused_without_growing_the_heap(browser, server, tmp_path):
    tiny = make_model(tmp_path / "tiny.gguf", seed=1)
    model = tiny.read_bytes()
    key = "x.big"
    pad = -(8 + len(key) + 12) % 32
    huge = with_string(model, tmp_path / "huge-string.gguf", key, 192 * MiB + pad)
    legit = with_string(model, tmp_path / "legit-string.gguf", key, 8 * MiB + pad)
    ctx = browser.new_context()
    try:
        page = ctx.new_page()
        page.errors = []
        page.on("pageerror", lambda e: page.errors.append(str(e)))
        app = App(page, server, {"tiny": tiny})
        app.serve_models(ctx)
        app.open()                                          # Python booted, the tiny model loaded
        before = wasm(page)
        page.set_input_files("#file-input", str(huge))
        page.wait_for_selector("[data-kind=format]", timeout=READY_MS)
        text = page.inner_text("[data-kind=format]")
        assert "64 MiB" in text and "x.big" in text and f"string length {192 * MiB + pad}" in text, text
        grown = wasm(page) - before
        assert grown < 4 * MiB, f"the wasm heap grew by {grown} bytes for a refused header"
        print(f"wasm heap growth: refused 192 MiB header string {grown / MiB:.1f} MiB")
        page.wait_for_function("document.body.dataset.state === 'ready'", timeout=READY_MS)

        page.set_input_files("#file-input", str(legit))    # under the bound: loads
        info = app.wait_ready("legit-string.gguf")
        assert info["headerBytes"] > 8 * MiB
        grown = wasm(page) - before
        # prefix (8 MiB) + the parser's copy of the string + the decoded str: measured 21.9 MiB
        assert grown < 4 * 8 * MiB, f"the wasm heap grew by {grown} bytes for an 8 MiB header string"
        print(f"wasm heap growth: 8 MiB header string {grown / MiB:.1f} MiB")
        assert page.errors == []
    finally:
        ctx.close()
