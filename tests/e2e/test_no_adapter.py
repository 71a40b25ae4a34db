"""Chromium on Linux without WebGPU flags: navigator.gpu exists but requestAdapter() resolves to
null (JS null reaches Python as pyodide's `jsnull`, not None). The app must say WebGPU is not
available and how to enable it (error kind `no-webgpu`), not show a Python traceback.

Selectors: the error element carries `data-kind="<kind>"` (any element: `[data-kind=no-webgpu]`,
`[data-kind=internal]`, visible = no `hidden` attribute); its text is checked for the advice and
the Python message, the page's text for traces of a traceback. The browser is a second Chromium
launched from the session's Playwright, with the usual flags minus --enable-unsafe-webgpu."""
from __future__ import annotations

import pytest

from tests.e2e.conftest import CHROME_ARGS, CHROMIUM

BOOT_MS = 240_000          # Pyodide boot on 2 shared cores


@pytest.fixture
def plain_browser(browser):
    args = [a for a in CHROME_ARGS if a != "--enable-unsafe-webgpu"]
    b = browser.browser_type.launch(executable_path=CHROMIUM, args=args, headless=True)
    yield b
    b.close()


def test_no_adapter_says_how_to_enable_webgpu(plain_browser, server):
    page = plain_browser.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(server)
    # the precondition this test is about: WebGPU exposed, but no adapter
    assert page.evaluate("async () => navigator.gpu ? String(await navigator.gpu.requestAdapter()) : 'no navigator.gpu'") == "null"
    page.wait_for_selector("[data-kind=no-webgpu]:not([hidden]), [data-kind=internal]:not([hidden])", timeout=BOOT_MS)
    kinds = page.evaluate("[...document.querySelectorAll('[data-kind]')].filter(e => !e.hidden).map(e => e.dataset.kind)")
    body = page.inner_text("body")
    assert "no-webgpu" in kinds and "internal" not in kinds, (kinds, body[-2000:])
    text = page.inner_text("[data-kind=no-webgpu]")
    assert "no WebGPU adapter was found" in text, text          # the worker's message (requestAdapter: null)
    assert "--enable-unsafe-webgpu" in text, text               # the advice on how to enable it
    for bad in ("Traceback", "AttributeError", "JsNull", "JsProxy"):
        assert bad not in body, body[-2000:]
    assert errors == []
