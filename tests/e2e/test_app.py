"""The chat app end to end: web/index.html + app.mjs (page) + worker.mjs + bitweb.webapp (Pyodide)
in headless Chromium on SwiftShader, checked against the CLI (`python -m bitweb generate`, native).

Models are generated into a temp dir (tiny, bytes vocabulary: fast on SwiftShader) and served to
the page by Playwright routes under /test-models/; the default-model test uses the shipped
web/models/bitweb-chat-i2_s.gguf. One browser context (one OPFS) is shared by the tests of this
module, in order: load -> chat -> stop -> new chat -> file input -> malformed -> HTML-looking
output -> offline reload from the cache -> device lost -> screenshots.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
from urllib.parse import urlparse

import numpy as np
import pytest

from bitweb import gguf
from tests.conftest import ROOT

PROMPT = "Hello there, who are you?"
XSS = '<img src=x onerror="window.__xss=1">'
READY_MS = 240_000          # Pyodide boot + model load on SwiftShader (2 shared cores)
REPLY_MS = 240_000


# ---------------------------------------------------------------- models and the CLI oracle

def make_model(out: pathlib.Path, seed: int, vocab_extra: list[str] | None = None) -> pathlib.Path:
    """A tiny random bitnet-b1.58 I2_S model with the bytes vocabulary (+ extra NORMAL tokens)."""
    from bitweb.authoring import makemodel, vocab
    args = argparse.Namespace(arch="bitnet-b1.58", format="i2_s", preset="tiny", layers=None,
                              vocab="bytes", seed=seed, scale_tensors="auto")
    voc = vocab.bytes_vocab()
    if vocab_extra:
        voc["tokenizer.ggml.tokens"] = list(voc["tokenizer.ggml.tokens"]) + vocab_extra
        voc["tokenizer.ggml.token_type"] = list(voc["tokenizer.ggml.token_type"]) + [1] * len(vocab_extra)
    makemodel.write_model(makemodel.spec_from_args(args), voc, out)
    return out


def cli(model, prompt=PROMPT, max_tokens=12, system=None, activations="a8") -> dict:
    """`python -m bitweb generate MODEL --chat --temperature 0 --json` (native backend)."""
    cmd = [sys.executable, "-m", "bitweb", "generate", str(model), "--chat", "--prompt", prompt,
           "--temperature", "0", "--max-tokens", str(max_tokens), "--json", "--backend", "native",
           "--activations", activations]
    if system:
        cmd += ["--system", system]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    return json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("{")][-1])


def byte_level(text: str) -> str:
    """GPT-2 byte-level token text for `text` (what tokenizer.ggml.tokens holds)."""
    from bitweb.authoring.vocab import BYTE_TO_CHAR
    return "".join(BYTE_TO_CHAR[b] for b in text.encode())


def make_html_model(tmp: pathlib.Path) -> pathlib.Path:
    """A model whose greedy reply to PROMPT starts with the text XSS.

    The vocabulary gets one more NORMAL token whose text is XSS. Its row of token_embd (also the
    tied LM head, F16) is then set to exactly 2x the row of the token greedy decoding picks first
    (found with the CLI), so that token's logit doubles: logit_new = 2 * logit_first, the argmax
    whenever logit_first > 0 (scaling by 2 is exact in F16 and in every float sum). The prompt
    never contains the new token, so the prefill is unchanged. The CLI confirms the result."""
    path = make_model(tmp / "html.gguf", seed=3, vocab_extra=[byte_level(XSS)])
    gf = gguf.open_gguf(path)
    new_id = len(gf.metadata["tokenizer.ggml.tokens"]) - 1
    emb = gf.tensors["token_embd.weight"]
    assert emb.type_name == "F16" and emb.shape[1] == new_id + 1, emb
    gf.close()
    first = cli(path, max_tokens=1)["ids"][0]
    assert first != new_id
    n_embd = emb.shape[0]
    with open(path, "r+b") as f:
        f.seek(emb.abs_offset + first * n_embd * 2)
        row = np.frombuffer(f.read(n_embd * 2), dtype="<f2")
        f.seek(emb.abs_offset + new_id * n_embd * 2)
        f.write((row * np.float16(2)).astype("<f2").tobytes())
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("app-models")
    m = {"tiny": make_model(tmp / "tiny.gguf", seed=1), "other": make_model(tmp / "other.gguf", seed=2)}
    m["html"] = make_html_model(tmp)
    bad = bytearray(m["tiny"].read_bytes()[:4096])
    bad[16:24] = (10 ** 9).to_bytes(8, "little")           # kv_count far too large for the file
    (tmp / "broken.gguf").write_bytes(bytes(bad))
    m["broken"] = tmp / "broken.gguf"
    return m


@pytest.fixture(scope="module")
def oracle(models):
    """CLI results, computed once."""
    return {"tiny": cli(models["tiny"]), "other": cli(models["other"]), "html": cli(models["html"], max_tokens=4)}


# ---------------------------------------------------------------- the page

class App:
    """The app page and what the tests do with it."""

    def __init__(self, page, server, models):
        self.page, self.server, self.models = page, server, models
        self.served = []

    def serve_models(self, context):
        def fulfil(route):
            name = route.request.url.split("/test-models/")[1].split("?")[0]
            self.served.append((route.request.method, name))
            route.fulfill(path=str(self.models[name.removesuffix(".gguf")]),
                          headers={"content-type": "application/octet-stream",
                                   "last-modified": "Wed, 01 Jan 2025 00:00:00 GMT"})
        self.matcher = lambda url: urlparse(url).path.startswith("/test-models/")
        context.route(self.matcher, fulfil)

    def unserve_models(self, context):
        context.unroute(self.matcher)

    def open(self, query="?model=test-models/tiny.gguf"):
        self.page.goto(self.server + query)
        return self.wait_ready()

    def wait_ready(self, name=None):
        """Wait until a model is loaded (`name`: that model) or an error shows; the 'ready' message."""
        self.page.wait_for_function(
            "([name]) => { const s = window.bitweb?.state; const m = s?.model?.model;"
            "  return !document.getElementById('error').hidden || document.body.dataset.state === 'failed'"
            "    || (document.body.dataset.state === 'ready' && m && (!name || m.name === name)); }",
            arg=[name], timeout=READY_MS)
        state = self.page.evaluate("document.body.dataset.state")
        assert state == "ready", (f"state {state}: {self.error_text()}; progress seen: "
                                  f"{self.page.evaluate('window.bitweb?.state?.seen')}; console errors: {self.page.errors[-5:]}")
        info = self.page.evaluate("window.bitweb.state.model")
        assert name is None or info["model"]["name"] == name, (name, info["model"])
        return info

    def error_text(self):
        return self.page.evaluate("document.getElementById('error').hidden ? '' : document.getElementById('error').innerText")

    def set(self, **settings):
        for k, v in settings.items():
            self.page.fill(f"#settings input[name={k}]", str(v))

    def record(self):
        """Record the last assistant message's text at every DOM change (window.__snaps)."""
        self.page.evaluate("""() => {
          window.__snaps = [];
          const chat = document.getElementById('chat');
          window.__obs?.disconnect();
          window.__obs = new MutationObserver(() => {
            const all = chat.querySelectorAll('.msg.assistant');
            const last = all[all.length - 1];
            if (!last) return;
            const t = last.querySelector('.text').textContent, s = window.__snaps;
            if (!s.length || s[s.length - 1].t !== t || s[s.length - 1].done !== !!last.dataset.done)
              s.push({ t, done: !!last.dataset.done });
          });
          window.__obs.observe(chat, { subtree: true, childList: true, characterData: true, attributes: true });
        }""")

    def say(self, text):
        self.page.wait_for_function("document.body.dataset.state === 'ready'", timeout=READY_MS)
        n = self.page.locator(".msg.assistant").count()
        self.page.fill("#input", text)
        self.page.press("#input", "Enter")
        return n + 1

    def reply(self, n):
        """Wait for the n-th assistant message to finish; its text, stop reason and the stats."""
        self.page.wait_for_function(
            f"document.querySelectorAll('.msg.assistant[data-done]').length >= {n} || !document.getElementById('error').hidden",
            timeout=REPLY_MS)
        assert not self.error_text(), self.error_text()
        el = self.page.locator(".msg.assistant").nth(n - 1)
        return {"text": el.locator(".text").text_content(), "stop_reason": el.get_attribute("data-stop-reason"),
                "stats": self.page.evaluate("Object.fromEntries([...document.querySelectorAll('#stats dd')].map(d => [d.dataset.stat, d.textContent]))")}


@pytest.fixture(scope="module")
def app(browser, server, models):
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    page = ctx.new_page()
    page.errors = []
    page.on("console", lambda m: page.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    a = App(page, server, models)
    a.context = ctx
    a.serve_models(ctx)
    yield a
    ctx.close()


def no_errors(app):
    """No console error and no uncaught exception, in the page or its worker, so far."""
    assert app.page.errors == [], app.page.errors


# ---------------------------------------------------------------- tests (in order)

def test_boot_and_load(app):
    info = app.open()
    assert info["model"]["name"] == "tiny.gguf"
    assert info["model"]["arch"] == "bitnet-b1.58" and info["model"]["n_layer"] == 2
    assert info["adapter"]["backend"] == "browser"
    assert ("GET", "tiny.gguf") in app.served                    # downloaded once into the cache
    seen = app.page.evaluate("window.bitweb.state.seen")
    for stage in ("pyodide", "download", "upload", "compile"):
        assert stage in seen, f"no {stage} progress: {seen}"
    up = seen["upload"]
    assert up["done"] == up["total"] > 0
    # the page shows the model and the adapter
    assert "tiny.gguf" in app.page.inner_text("#model-info")
    assert "maxStorageBufferBindingSize" in app.page.inner_text("#adapter")
    assert "tiny.gguf" in app.page.inner_text("#cache-list")
    no_errors(app)


def test_message_streams_and_matches_cli(app, oracle):
    app.set(temperature=0, max_tokens=12, repeat_penalty=1)
    app.page.fill("#input", "line one")                        # Shift+Enter adds a line, sends nothing
    app.page.press("#input", "Shift+Enter")
    app.page.keyboard.type("line two")
    assert app.page.input_value("#input") == "line one\nline two"
    assert app.page.locator(".msg").count() == 0
    app.record()
    n = app.say(PROMPT)
    r = app.reply(n)
    want = oracle["tiny"]
    assert r["text"] == want["text"], (r, want)
    assert r["stop_reason"] == want["stop_reason"]
    snaps = app.page.evaluate("window.__snaps")
    streaming = [s["t"] for s in snaps if not s["done"] and s["t"]]
    assert len(set(streaming)) >= 3, f"reply did not arrive in steps: {snaps}"
    for a, b in zip(streaming, streaming[1:]):
        assert b.startswith(a), (a, b)                          # it only ever grew
    assert streaming[-1] == want["text"] or len(streaming[-1]) < len(want["text"])
    assert snaps[-1]["done"] and snaps[-1]["t"] == want["text"]
    for k in ("Time to first token", "Tokens/s (decode)", "Prefill tokens/s"):
        assert r["stats"][k] not in ("", "–"), r["stats"]
    no_errors(app)


def test_stop_then_chat_on(app):
    app.set(max_tokens=400)
    n = app.say("Tell me a long story.")
    app.page.wait_for_function(f"(document.querySelectorAll('.msg.assistant')[{n - 1}]?.querySelector('.text').textContent.length || 0) >= 3",
                               timeout=REPLY_MS)
    assert app.page.is_visible("#stop") and app.page.is_hidden("#send")
    app.page.click("#stop")
    r = app.reply(n)
    assert app.page.is_hidden("#stop") and app.page.is_visible("#send")
    assert r["stop_reason"] == "stopped"
    done = app.page.evaluate("window.bitweb.state.lastDone")
    assert done["stats"]["tokens_after_stop"] <= 1, done["stats"]      # stopped within one token
    stopped = done["stats"]["tokens"]
    assert 1 <= stopped < 400
    # chat on
    app.set(max_tokens=10)
    r2 = app.reply(app.say("And then?"))
    assert r2["stop_reason"] != "stopped"
    # consistent: a new chat with the same turns, the story cut at the same token by max_tokens
    # instead of Stop, gives the same replies (stop leaves the conversation as a shorter reply would)
    app.page.click("#new-chat")
    replay = []
    for text, max_tokens in ((PROMPT, 12), ("Tell me a long story.", stopped), ("And then?", 10)):
        app.set(max_tokens=max_tokens)
        replay.append(app.reply(app.say(text)))
    assert replay[1]["text"] == r["text"] and replay[1]["stop_reason"] == "max_tokens"
    assert replay[2]["text"] == r2["text"]
    no_errors(app)


def test_new_chat_starts_over(app, oracle):
    app.set(max_tokens=400)                                     # New chat in the middle of a reply
    n = app.say("Tell me a long story.")
    app.page.wait_for_function(f"(document.querySelectorAll('.msg.assistant')[{n - 1}]?.querySelector('.text').textContent.length || 0) >= 3",
                               timeout=REPLY_MS)
    app.page.click("#new-chat")
    assert app.page.locator(".msg").count() == 0
    app.page.wait_for_function("document.body.dataset.state === 'ready'", timeout=REPLY_MS)
    assert app.page.evaluate("window.bitweb.state.lastDone.stop_reason") == "stopped"
    assert app.page.locator(".msg").count() == 0                # nothing of the old reply came back
    app.set(max_tokens=12)
    r = app.reply(app.say(PROMPT))
    assert r["text"] == oracle["tiny"]["text"]                   # same as a fresh CLI chat
    no_errors(app)


def test_load_model_from_file_input(app, models, oracle):
    app.page.set_input_files("#file-input", str(models["other"]))
    info = app.wait_ready("other.gguf")
    assert info["model"]["name"] == "other.gguf"
    assert not any(name == "other.gguf" for _, name in app.served)    # not fetched: read from the file
    app.set(max_tokens=12)
    r = app.reply(app.say(PROMPT))
    assert r["text"] == oracle["other"]["text"]
    assert "other.gguf" in app.page.inner_text("#cache-list")         # kept in the browser cache
    no_errors(app)


def test_drop_a_file_on_the_page(app, oracle):
    app.page.evaluate("""async () => {
        const blob = await (await fetch('/test-models/tiny.gguf')).blob();
        const dt = new DataTransfer();
        dt.items.add(new File([blob], 'dropped.gguf'));
        window.dispatchEvent(new DragEvent('dragenter', { dataTransfer: dt }));
        window.dispatchEvent(new DragEvent('drop', { dataTransfer: dt, cancelable: true }));
    }""")
    app.wait_ready("dropped.gguf")
    assert app.page.is_hidden("#drop")
    app.set(max_tokens=12)
    r = app.reply(app.say(PROMPT))
    assert r["text"] == oracle["tiny"]["text"]                   # the same bytes as tiny.gguf
    no_errors(app)


def test_malformed_file_shows_parser_error(app, models):
    with pytest.raises(gguf.GGUFError) as want:
        gguf.read_gguf(gguf.BytesSource(models["broken"].read_bytes()))
    app.page.set_input_files("#file-input", str(models["broken"]))
    app.page.wait_for_selector("#error[data-kind=format]", timeout=READY_MS)
    assert str(want.value) in app.page.inner_text("#error-text")
    assert app.page.is_hidden("#progress")
    app.page.wait_for_function("document.body.dataset.state === 'ready'")     # the model before it stays
    assert app.page.is_enabled("#send")
    assert "kv_count" in str(want.value)
    assert "broken.gguf" not in app.page.inner_text("#cache-list")    # a bad file is not cached
    app.page.click("#error-actions button:text('Dismiss')")
    assert app.page.is_hidden("#error")
    no_errors(app)


def test_bad_url_says_the_download_failed(app):
    app.page.fill("#url-input", app.server + "no/such/model.gguf")
    app.page.click("#url-form button")
    app.page.wait_for_selector("#error[data-kind=network]", timeout=READY_MS)
    assert "HTTP 404" in app.page.inner_text("#error-text")
    app.page.wait_for_function("document.body.dataset.state === 'ready'")     # the model before it stays
    assert "model.gguf" not in app.page.inner_text("#cache-list")
    no_errors(app)


def test_model_output_is_text_not_html(app, models, oracle):
    assert oracle["html"]["text"].startswith(XSS), oracle["html"]         # the crafted model works natively
    app.page.set_input_files("#file-input", str(models["html"]))
    app.wait_ready("html.gguf")
    app.set(max_tokens=4)
    r = app.reply(app.say(PROMPT))
    assert r["text"] == oracle["html"]["text"]
    assert app.page.locator("#chat img").count() == 0
    assert app.page.evaluate("window.__xss") is None
    no_errors(app)


def test_cached_model_loads_with_network_blocked(app, oracle):
    blocked = []

    def abort(route):
        blocked.append(route.request.url)
        route.abort()
    def is_model(url):             # any fetch of a .gguf file (not the page, whose query names one)
        return urlparse(url).path.endswith(".gguf")
    app.unserve_models(app.context)
    app.context.route(is_model, abort)
    try:
        # the default source (?model=) with no network: its cached copy; then a cached model by name
        info = app.open()
        assert info["model"]["name"] == "tiny.gguf"
        assert blocked, "the app did not even try the network"       # the block was in force
        assert all(".gguf" in u for u in blocked)
        app.set(max_tokens=12)
        r = app.reply(app.say(PROMPT))
        assert r["text"] == oracle["tiny"]["text"]
        n_blocked = len(blocked)
        app.page.click("#cache-list li:has-text('other.gguf') button:text('Load')")
        app.wait_ready("other.gguf")
        assert len(blocked) == n_blocked                              # {cached: name}: no request at all
        r = app.reply(app.say(PROMPT))
        assert r["text"] == oracle["other"]["text"]
    finally:
        app.context.unroute(is_model)
        app.serve_models(app.context)
    no_errors(app)


def test_device_lost_offers_reload(app, oracle):
    app.page.evaluate("window.bitweb.worker.postMessage({type: 'debug-lose-device'})")
    app.page.wait_for_selector("#error[data-kind=device-lost]", timeout=60_000)
    assert "lost" in app.page.inner_text("#error-text")
    assert app.page.is_disabled("#send")
    app.page.click("#error-actions button:text('Reload model')")
    app.wait_ready("other.gguf")
    app.set(max_tokens=12)
    r = app.reply(app.say(PROMPT))
    assert r["text"] == oracle["other"]["text"]
    no_errors(app)


def test_smaller_context_and_a_full_conversation(app, oracle):
    app.page.fill("#max-context", "48")
    app.page.dispatch_event("#max-context", "change")            # reloads the model
    app.page.wait_for_function("window.bitweb.state.model?.load.n_ctx === 48", timeout=READY_MS)
    assert "48 of 1024" in app.page.inner_text("#model-info")
    app.set(max_tokens=12)
    app.reply(app.say(PROMPT))                                   # 32 prompt tokens + 12
    app.say(PROMPT)                                              # the second turn cannot fit in 48
    app.page.wait_for_selector("#error[data-kind=context]", timeout=REPLY_MS)
    assert "context holds 48" in app.page.inner_text("#error-text")
    app.page.wait_for_function("document.body.dataset.state === 'ready'")
    app.page.click("#new-chat")                                  # a new chat fits again
    app.page.click("#error-actions button:text('Dismiss')")
    r = app.reply(app.say(PROMPT))
    assert r["text"] == app.page.evaluate("window.bitweb.state.lastDone.text")
    app.page.fill("#max-context", "")
    app.page.dispatch_event("#max-context", "change")
    app.page.wait_for_function("window.bitweb.state.model?.load.n_ctx === 1024", timeout=READY_MS)
    r = app.reply(app.say(PROMPT))                              # the whole context again
    assert r["text"] == oracle["other"]["text"]
    no_errors(app)


def test_screenshots_laptop_phone_light_dark(app):
    out = ROOT / "test-results"
    out.mkdir(exist_ok=True)
    page = app.page
    assert page.locator(".msg.assistant[data-done]").count() >= 1
    page.evaluate("document.getElementById('side').scrollTop = 0")
    page.screenshot(path=str(out / "chat.png"))
    light = page.evaluate("getComputedStyle(document.body).backgroundColor")
    page.emulate_media(color_scheme="dark")
    dark = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert light != dark
    page.screenshot(path=str(out / "chat-dark.png"))
    page.set_viewport_size({"width": 390, "height": 844})
    page.emulate_media(color_scheme="light")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390    # nothing wider than a phone
    assert page.is_visible("#composer") and page.is_visible("#menu") and page.is_hidden("#side")
    box = page.locator("#composer").bounding_box()
    assert box["y"] + box["height"] <= 844
    page.screenshot(path=str(out / "chat-phone.png"))
    page.click("#menu")
    assert page.is_visible("#side")
    page.click("#menu")
    page.set_viewport_size({"width": 1280, "height": 800})
    no_errors(app)


def test_no_webgpu_says_how_to_enable(browser, server):
    ctx = browser.new_context()
    ctx.add_init_script("delete Navigator.prototype.gpu")
    page = ctx.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(server)
    page.wait_for_selector("#error[data-kind=no-webgpu]", timeout=30_000)
    text = page.inner_text("#error")
    assert "WebGPU is not available" in text and "--enable-unsafe-webgpu" in text
    assert page.evaluate("window.bitweb.worker") is None                # nothing else started
    assert errors == []
    ctx.close()


def native_chat(model, turns, max_tokens):
    """Replies of one multi-turn greedy chat with the engine on the native backend."""
    code = f"""
import asyncio, json
from bitweb import engine, generation, gguf, gpu, sampling
async def main():
    dev = await gpu.request_device("native")
    gf = gguf.open_gguf({str(model)!r})
    chat = generation.ChatSession(await engine.Engine.load(dev, gf, gf.source, activations="a8"))
    out = []
    for text in {list(turns)!r}:
        out.append((await chat.send(text, sampling.SamplingParams(), {max_tokens})).text)
    print(json.dumps(out))
asyncio.run(main())
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.splitlines()[-1])


def test_default_model_loads_and_matches_cli(browser, server):
    """The shipped model, with no ?model=: what `npm start` opens. A three-turn chat: the first
    reply equals the CLI's, all of them the native engine's ChatSession. Screenshot of the chat."""
    path = ROOT / "web" / "models" / "bitweb-chat-i2_s.gguf"
    assert path.exists(), f"{path} is missing: the default model is part of the app (issue 5)"
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    page = ctx.new_page()
    page.errors = []
    page.on("console", lambda m: page.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    app = App(page, server, {})
    info = app.open(query="")
    assert info["model"]["name"] == "bitweb-chat-i2_s.gguf"
    questions = ["Hello!", "What is 37 + 45?", "Which is larger, 412 or 398?"]
    app.set(temperature=0, max_tokens=48)
    texts = [app.reply(app.say(q))["text"] for q in questions]
    assert texts[0] == cli(path, prompt=questions[0], max_tokens=48)["text"]
    assert texts == native_chat(path, questions, 48)
    out = ROOT / "test-results"
    out.mkdir(exist_ok=True)
    page.evaluate("document.getElementById('side').scrollTop = 0")
    page.screenshot(path=str(out / "chat-default.png"))
    no_errors(app)
    ctx.close()


def test_page_reopens_the_last_model_from_the_cache(app, oracle):
    """A plain reload (no ?model=) opens the model used last, from OPFS, with no model request."""
    requests = []
    app.page.on("request", lambda r: requests.append(r.url) if ".gguf" in urlparse(r.url).path else None)
    app.page.goto(app.server)
    app.wait_ready("other.gguf")
    assert requests == []
    app.set(max_tokens=12)
    assert app.reply(app.say(PROMPT))["text"] == oracle["other"]["text"]
    no_errors(app)


def test_llama3_vocabulary_model_from_a_url(app, tmp_path):
    """The official model's tokenizer: the Llama 3 vocabulary (128256 tokens, 280147 merges, a
    ~7 MB header read in growing prefixes) on a tiny model, downloaded from a URL of the app's own
    server, answering as the CLI does."""
    import os
    import shutil
    from bitweb.authoring import makemodel
    served = ROOT / "build" / "web" / f"test-{os.getpid()}"
    served.mkdir(parents=True, exist_ok=True)
    path = served / "llama3-tiny.gguf"
    args = argparse.Namespace(arch="bitnet-b1.58", format="i2_s", preset="tiny", layers=None,
                              vocab="llama3", seed=4, scale_tensors="auto")
    try:
        makemodel.write_model(makemodel.spec_from_args(args), makemodel.load_vocab("llama3"), path)
        prompt = "What is 37 + 45?"
        want = cli(path, prompt=prompt, max_tokens=3)
        app.page.fill("#url-input", app.server + f"build/web/{served.name}/llama3-tiny.gguf")
        app.page.click("#url-form button")
        info = app.wait_ready("llama3-tiny.gguf")
    finally:
        shutil.rmtree(served)
    assert info["model"]["n_vocab"] == 128256
    assert info["load"]["header_read"] > 4 << 20                 # several NeedMoreBytes rounds
    app.set(max_tokens=3)
    r = app.reply(app.say(prompt))
    assert r["text"] == want["text"]
    assert app.page.evaluate("window.bitweb.state.lastDone.stats.prompt_tokens") == len(want["prompt_ids"])
    no_errors(app)


def test_limits_too_small_says_which_and_by_how_much(app):
    """?cap= makes the app treat the GPU as one with smaller limits: the engine's check names the
    limit and the shortfall (KV cache of one layer: 1024 positions x 2 KV heads x 64 x 4 bytes)."""
    app.page.goto(app.server + "?model=test-models/tiny.gguf&cap=maxStorageBufferBindingSize:65536")
    app.page.wait_for_selector("#error[data-kind=limits]", timeout=READY_MS)
    text = app.page.inner_text("#error")
    assert "limits are too small" in text
    need = 1024 * 2 * 64 * 4
    assert "maxStorageBufferBindingSize = 65536" in text and f"short by {need - 65536} bytes" in text, text
    app.page.wait_for_function("document.body.dataset.state === 'failed'")
    assert app.page.is_disabled("#send")
    no_errors(app)
