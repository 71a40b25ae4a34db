"""The chat app end to end: web/index.html + web/app/ (page) on the public library web/bitweb.mjs
(worker.mjs + bitweb.webapp in Pyodide) in headless Chromium on SwiftShader, checked against the
CLI (`python -m bitweb generate`, native).

Models are generated into a temp dir (tiny, bytes vocabulary: fast on SwiftShader) and served to
the page by Playwright routes under /test-models/; the default-model test uses the shipped
web/models/bitweb-chat-i2_s.gguf. One browser context (one OPFS, one IndexedDB) is shared by the
tests of this module, in order: load -> chat -> stop -> new chat -> file input -> malformed ->
Markdown and raw HTML in a reply -> regenerate / edit -> export / import -> reload keeps the
chat -> offline reload from the cache -> device lost -> context -> screenshots -> axe scans.
The page driver (App) and the CLI oracle are in tests/e2e/app_driver.py.
"""
from __future__ import annotations

import argparse
import json
from urllib.parse import urlparse

import pytest

from bitweb import gguf, webapp
from tests.conftest import ROOT
from tests.e2e.app_driver import (PROMPT, READY_MS, REPLY_MS, app, axe, boot_snapshot_saved,  # noqa: F401 (app: the page fixture)
                                  check_stages, cli, clis, make_first_token_models, make_model, native_chat,
                                  new_app_context, no_errors)

XSS = '<img src=x onerror="window.__xss=1">'
MARKDOWN = "- one\n- two\n\n```js\nlet x = 1;\n```\n\n"     # a list and a code block
THINK = "<think>\nI add the ones.\n</think>\n\n"             # a reasoning block before the answer
FINISH = {"eos": "stop", "eot": "stop", "max_tokens": "length", "context": "length"}   # CLI -> API


# ---------------------------------------------------------------- models and the CLI oracle

@pytest.fixture(scope="module")
def models(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("app-models")
    m = {"tiny": make_model(tmp / "tiny.gguf", seed=1), "other": make_model(tmp / "other.gguf", seed=2)}
    m["html"], m["think"] = make_first_token_models({tmp / "html.gguf": MARKDOWN + XSS, tmp / "think.gguf": THINK})
    bad = bytearray(m["tiny"].read_bytes()[:4096])
    bad[16:24] = (10 ** 9).to_bytes(8, "little")           # kv_count far too large for the file
    (tmp / "broken.gguf").write_bytes(bytes(bad))
    m["broken"] = tmp / "broken.gguf"
    return m


@pytest.fixture(scope="module")
def oracle(models):
    """CLI results, computed once."""
    calls = {"tiny": dict(model=models["tiny"]), "other": dict(model=models["other"]),
             "html": dict(model=models["html"], max_tokens=4), "think": dict(model=models["think"], max_tokens=4),
             "tiny_hi": dict(model=models["tiny"], prompt="Hi!"),
             "tiny_story": dict(model=models["tiny"], prompt="Tell me a long story.", max_tokens=64)}
    return dict(zip(calls, clis(*calls.values())))


# ---------------------------------------------------------------- tests (in order)

def test_boot_and_load(app):
    snapshots = []                                # the shipped boot snapshot's responses (the worker's fetches)
    app.context.on("response", lambda r: snapshots.append(r) if r.url.endswith("/build/web/boot-snapshot.bin") else None)
    info = app.open()
    assert info["name"] == "tiny.gguf"
    assert info["architecture"] == "bitnet-b1.58" and info["layers"] == 2
    assert info["adapter"]["backend"] == "browser"
    assert ("GET", "tiny.gguf") in app.served                    # downloaded once into the cache
    seen = app.page.evaluate("window.bitwebApp.state.seen")
    for stage in ("boot", "download", "upload", "compile"):
        assert stage in seen, f"no {stage} progress: {seen}"
    up = seen["upload"]
    assert up["done"] == up["total"] > 0
    check_stages(app.page.evaluate("window.bitwebApp.state.engine.info.load.stages"), download=True)
    # a new context: Python starts from the boot snapshot shipped with the app (tools/boot_snapshot.py),
    # which comes gzip-compressed
    boot = info["load"]["boot"]
    assert boot["from"] == "shipped" and boot["shipped"] == "used" and "import" not in boot["ms"], boot
    assert [r.header_value("content-encoding") for r in snapshots] == ["gzip"], [(r.status, r.all_headers()) for r in snapshots]
    # the page shows the model and the adapter, and says when the adapter is a CPU rasteriser
    assert "tiny.gguf" in app.page.inner_text("#model-info")
    assert "maxStorageBufferBindingSize" in app.page.inner_text("#adapter")
    assert info["adapter"]["software"] == "SwiftShader", info["adapter"]      # headless Chromium's WebGPU
    assert app.page.is_visible("#software-gpu")
    assert "No hardware GPU: expect a few tokens per second" in app.page.inner_text("#software-gpu")
    assert "no (SwiftShader)" in app.page.inner_text("#adapter")
    app.page.wait_for_function("document.getElementById('cache-list').innerText.includes('tiny.gguf')")
    assert app.page.evaluate("document.activeElement.id") == "input"      # focus to the message box
    assert app.page.is_visible(".intro")                                  # the empty chat's card
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
    assert r["finish"] == FINISH[want["stop_reason"]]
    # streamed: the text came in pieces, one chunk per piece the worker sent (however few of them
    # the page painted), which add up to the reply; the last chunk says why it ended
    chunks = app.page.evaluate("window.__chunks")
    texts = [c["content"] for c in chunks if c["content"]]
    assert len(texts) >= 3, f"reply did not arrive in steps: {chunks}"
    assert "".join(texts) == want["text"], chunks
    assert [c["finish"] for c in chunks][-1] == r["finish"] and all(c["finish"] is None for c in chunks[:-1]), chunks
    for k in ("Time to first token", "Tokens/s (decode)", "Prefill tokens/s"):
        assert r["stats"][k] not in ("", "–"), r["stats"]
    usage = app.last_reply()["usage"]
    assert usage["prompt_tokens"] == len(want["prompt_ids"]) and usage["completion_tokens"] == len(want["ids"])
    assert app.page.inner_text("#context-meter") == f"context {usage['total_tokens']} / 1024 tokens"
    # one announcement for the finished reply (the chat is not a live region)
    app.page.wait_for_function("document.getElementById('announce').textContent.startsWith('Reply')")
    assert app.page.get_attribute("#chat", "aria-live") is None
    no_errors(app)


def test_stop_then_chat_on(app):
    app.set(max_tokens=400)
    n = app.say("Tell me a long story.")
    app.page.wait_for_function(f"(document.querySelectorAll('.msg.assistant')[{n - 1}]?.raw?.length || 0) >= 3",
                               timeout=REPLY_MS)
    assert app.page.is_visible("#stop") and app.page.is_hidden("#send")
    app.page.keyboard.press("Escape")                           # Escape stops a reply, like Stop
    r = app.reply(n)
    assert app.page.is_hidden("#stop") and app.page.is_visible("#send")
    assert r["finish"] == "abort"
    done = app.last_reply()
    assert done["timing"]["tokens_after_stop"] <= 1, done["timing"]      # stopped within one token
    stopped = done["usage"]["completion_tokens"]
    assert 1 <= stopped < 400
    # chat on
    app.set(max_tokens=10)
    r2 = app.reply(app.say("And then?"))
    assert r2["finish"] != "abort"
    # consistent: a new chat with the same turns, the story cut at the same token by max_tokens
    # instead of Stop, gives the same replies (stop leaves the conversation as a shorter reply would)
    app.page.click("#new-chat")
    replay = []
    for text, max_tokens in ((PROMPT, 12), ("Tell me a long story.", stopped), ("And then?", 10)):
        app.set(max_tokens=max_tokens)
        replay.append(app.reply(app.say(text)))
    assert replay[1]["text"] == r["text"] and replay[1]["finish"] == "length"
    assert replay[2]["text"] == r2["text"]
    no_errors(app)


def test_new_chat_starts_over(app, oracle):
    # New chat in the middle of a reply: a reply that runs long (in a new conversation the model's
    # greedy reply to this prompt does not end within 64 tokens; after the earlier tests' turns,
    # which vary with where a reply was stopped, it could end after a few)
    assert oracle["tiny_story"]["stop_reason"] == "max_tokens", oracle["tiny_story"]
    app.page.click("#new-chat")
    app.set(max_tokens=400)
    n = app.say("Tell me a long story.")
    app.page.wait_for_function(f"(document.querySelectorAll('.msg.assistant')[{n - 1}]?.raw?.length || 0) >= 3",
                               timeout=REPLY_MS)
    before = app.page.evaluate("window.bitwebApp.state.conv.id")
    app.page.click("#new-chat")
    app.page.wait_for_function("document.body.dataset.state === 'ready'", timeout=REPLY_MS)
    assert app.page.locator(".msg").count() == 0                # nothing of the old reply came here
    assert app.last_reply()["finish_reason"] == "abort"
    # the old conversation is kept, listed, with its stopped reply
    old = app.page.evaluate(f"window.bitwebApp.store.get({before!r})")
    assert old["messages"][-1]["role"] == "assistant" and old["messages"][-1]["finish"] == "abort"
    app.set(max_tokens=12)
    r = app.reply(app.say(PROMPT))
    assert r["text"] == oracle["tiny"]["text"]                   # same as a fresh CLI chat
    no_errors(app)


def test_load_model_from_file_input(app, models, oracle):
    app.page.set_input_files("#file-input", str(models["other"]))
    info = app.wait_ready("other.gguf")
    assert info["name"] == "other.gguf"
    assert not any(name == "other.gguf" for _, name in app.served)    # not fetched: read from the file
    # the conversation goes on with the other model, labelled
    assert app.page.locator(".divider", has_text="The next reply comes from other.gguf").count() == 1
    app.page.click("#new-chat")
    app.set(max_tokens=12)
    r = app.reply(app.say(PROMPT))
    assert r["text"] == oracle["other"]["text"]
    assert "other.gguf" in app.cached()                               # kept in the browser cache
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
    app.page.click("#new-chat")
    app.set(max_tokens=12)
    r = app.reply(app.say(PROMPT))
    assert r["text"] == oracle["tiny"]["text"]                   # the same bytes as tiny.gguf
    no_errors(app)


def test_malformed_file_shows_parser_error_and_keeps_the_chat(app, models, oracle):
    with pytest.raises(gguf.GGUFError) as want:
        gguf.read_gguf(gguf.BytesSource(models["broken"].read_bytes()))
    chat = app.messages()
    app.page.set_input_files("#file-input", str(models["broken"]))
    app.page.wait_for_selector("#error[data-kind=format]", timeout=READY_MS)
    assert str(want.value) in app.page.inner_text("#error-text")
    assert "kv_count" in str(want.value)
    assert webapp.advice("format")[0] in app.page.inner_text("#error-advice")     # the formats, from the worker
    assert app.page.is_hidden("#progress")
    app.page.wait_for_function("document.body.dataset.state === 'ready'")     # the model before it stays
    assert app.info()["name"] == "dropped.gguf"
    assert app.messages() == chat                                 # a failed load keeps the conversation
    assert "broken.gguf" not in app.cached()                      # a bad file is not cached
    app.page.click("#error-actions button:text('Dismiss')")
    assert app.page.is_hidden("#error")
    r = app.reply(app.say("And then?"))                            # and it still answers
    assert r["finish"] in ("stop", "length")
    no_errors(app)


def test_bad_url_says_the_download_failed(app):
    app.page.fill("#url-input", app.server + "no/such/model.gguf")
    app.page.click("#url-form button")
    app.page.wait_for_selector("#error[data-kind=download]", timeout=READY_MS)
    assert "HTTP 404" in app.page.inner_text("#error-text")
    app.page.wait_for_function("document.body.dataset.state === 'ready'")     # the model before it stays
    assert "model.gguf" not in app.cached()
    no_errors(app)


def test_markdown_renders_and_raw_html_stays_text(app, models, oracle):
    want = oracle["html"]["text"]
    assert want.startswith(MARKDOWN + XSS), oracle["html"]       # the crafted model works natively
    app.page.set_input_files("#file-input", str(models["html"]))
    app.wait_ready("html.gguf")
    app.page.click("#new-chat")
    app.set(max_tokens=4)
    r = app.reply(app.say(PROMPT))
    assert r["text"] == want
    msg = app.page.locator(".msg.assistant").last
    assert msg.locator(".text ul > li").all_inner_texts() == ["one", "two"]        # a list
    assert msg.locator(".text .code pre code").inner_text() == "let x = 1;"        # a code block
    assert msg.locator(".text .code button.copy-code").count() == 1                # with a copy button
    assert XSS in msg.locator(".text").inner_text()                               # the HTML is shown as text
    assert app.page.locator("#chat img").count() == 0
    assert app.page.evaluate("window.__xss") is None
    no_errors(app)


def test_thinking_is_shown_collapsed_not_as_the_answer(app, models, oracle):
    """A reply that opens with <think>...</think> shows that part folded away (a <details>), and
    only the rest as the answer and in the screen-reader announcement."""
    want = oracle["think"]["text"]
    assert want.startswith(THINK), oracle["think"]
    app.page.set_input_files("#file-input", str(models["think"]))
    app.wait_ready("think.gguf")
    assert app.page.is_hidden("#thinking-row")          # its template has no thinking switch
    app.page.click("#new-chat")
    app.set(max_tokens=4)
    r = app.reply(app.say(PROMPT))
    assert r["text"] == want
    msg = app.page.locator(".msg.assistant").last
    details = msg.locator("details.thinking")
    assert details.count() == 1 and details.get_attribute("open") is None
    assert details.locator("div").text_content() == "I add the ones."
    answer = msg.locator(".answer").text_content()
    assert "I add the ones." not in answer and "think>" not in answer
    app.page.wait_for_function("document.getElementById('announce').textContent.startsWith('Reply')")
    assert "I add the ones." not in app.page.text_content("#announce")
    no_errors(app)


@pytest.fixture(scope="module")
def switch_model(tmp_path_factory):
    """A tiny model with the Qwen-style vocabulary and the Qwen3 template changed so that its
    generation prompt opens the <think> block (as some reasoning models' templates do) unless
    enable_thinking is false, which closes it empty. Beside it, switch-off.gguf: the same weights
    with a template that thinks only when enable_thinking is true (its default: off)."""
    from bitweb.authoring.makemodel import PRESETS, ModelSpec, write_model
    from bitweb.authoring.qwen_vocab import QWEN3_CHAT_TEMPLATE, qwen_vocab
    template = QWEN3_CHAT_TEMPLATE.replace("{{- '<|im_start|>assistant\\n' }}",
                                           "{{- '<|im_start|>assistant\\n<think>\\n' }}")
    off = QWEN3_CHAT_TEMPLATE.replace("{%- if enable_thinking is defined and enable_thinking is false %}",
                                      "{%- if not (enable_thinking is defined and enable_thinking) %}")
    assert template != QWEN3_CHAT_TEMPLATE != off
    d = tmp_path_factory.mktemp("switch")
    spec = ModelSpec(arch="bitnet", fmt="tq2_0", preset="tiny", seed=5, scale_tensors=False, **PRESETS["tiny"])
    write_model(spec, {**qwen_vocab(), "tokenizer.chat_template": template}, d / "switch.gguf")
    write_model(spec, {**qwen_vocab(), "tokenizer.chat_template": off}, d / "switch-off.gguf")
    return d / "switch.gguf"


def test_thinking_switch_follows_the_files_template(app, switch_model):
    """A file whose template has a thinking switch shows the Thinking checkbox. On, the prompt
    opens a <think> block and the reply is shown folded away as thinking; off, the template
    closes the block and the reply is the answer. Both are the CLI's --thinking on / off."""
    from bitweb.chat import ChatFormat
    fmt = ChatFormat.from_metadata(gguf.open_gguf(switch_model).metadata)
    assert fmt.kind == "template" and fmt.has_thinking and fmt.prompt_opens_thinking(True)
    want = dict(zip(("on", "off"), clis(*[dict(model=switch_model, max_tokens=4, thinking=t) for t in ("on", "off")])))
    assert want["on"]["prompt_ids"] != want["off"]["prompt_ids"]
    app.page.set_input_files("#file-input", str(switch_model))
    info = app.wait_ready("switch.gguf")
    assert info["thinking"] is True and info["thinkingDefault"] is True
    assert app.page.is_visible("#thinking-row") and app.page.is_checked("#thinking")
    app.set(max_tokens=4)
    for switch in ("on", "off"):
        app.page.set_checked("#thinking", switch == "on")
        app.page.click("#new-chat")
        r = app.reply(app.say(PROMPT))
        usage = app.last_reply()["usage"]
        assert usage["prompt_tokens"] == len(want[switch]["prompt_ids"]), (switch, usage)
        assert usage["completion_tokens"] == len(want[switch]["ids"]), (switch, usage)
        opened = "<think>\n" if switch == "on" else ""      # the prompt's open block starts the reply
        assert r["text"] == opened + want[switch]["text"], (switch, r)
        thinking, answer = fmt.split_reply(want[switch]["text"], switch == "on")
        msg = app.page.locator(".msg.assistant").last
        details = msg.locator("details.thinking")
        if thinking is None:
            assert details.count() == 0, switch
        else:
            assert details.count() == 1 and details.get_attribute("open") is None
            assert details.locator("div").text_content() == thinking.strip()
            if thinking.strip():
                assert thinking.strip() not in msg.locator(".answer").text_content()
    assert switch == "off" and thinking is None                # off: no thinking block at all
    app.page.set_checked("#thinking", True)
    # The switch starts from each model's default, not from another model's setting; a change the
    # user makes sticks to that model (here across loads of other models).
    off_model = switch_model.parent / "switch-off.gguf"
    assert ChatFormat.from_metadata(gguf.open_gguf(off_model).metadata).thinking_default is False
    seen = []
    for path, user in ((off_model, True), (switch_model, None), (off_model, None)):
        app.page.set_input_files("#file-input", str(path))
        info = app.wait_ready(path.name)
        assert info["thinking"] is True and app.page.is_visible("#thinking-row")
        seen.append((path.name, info["thinkingDefault"], app.page.is_checked("#thinking")))
        if user is not None:
            app.page.set_checked("#thinking", user)
    assert seen == [("switch-off.gguf", False, False),        # its default, not switch.gguf's "on"
                    ("switch.gguf", True, True),
                    ("switch-off.gguf", False, True)], seen    # the user's "on" stuck to it
    no_errors(app)


def test_regenerate_and_edit(app, oracle):
    app.page.click("#cache-list li:has-text('tiny.gguf') button:text('Load')")
    app.wait_ready("tiny.gguf")
    app.page.click("#new-chat")
    app.set(max_tokens=12)
    first = app.reply(app.say(PROMPT))
    assert first["text"] == oracle["tiny"]["text"]
    app.mark()
    app.page.click(".msg.assistant >> nth=0 >> button:text('Regenerate')")     # greedy: the same again
    assert app.reply(1)["text"] == oracle["tiny"]["text"]
    assert app.messages() == [{"role": "user", "content": PROMPT}, {"role": "assistant", "content": oracle["tiny"]["text"]}]
    app.page.click(".msg.user >> nth=0 >> button:text('Edit')")
    app.page.fill(".msg.user textarea", "Hi!")
    app.mark()
    app.page.click(".msg.user button:text('Send')")
    r = app.reply(1)
    assert r["text"] == oracle["tiny_hi"]["text"]
    assert app.messages() == [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": oracle["tiny_hi"]["text"]}]
    no_errors(app)


def test_export_then_import_gives_the_same_messages(app, tmp_path):
    app.reply(app.say("And then?"))
    before = app.messages()
    assert len(before) == 4
    with app.page.expect_download() as dl:
        app.page.click("#export")
    path = tmp_path / "chat.json"
    dl.value.save_as(path)
    data = json.loads(path.read_text())
    assert data["messages"] == before                              # the OpenAI messages shape
    n = app.page.locator("#conv-list li").count()
    app.page.set_input_files("#import-input", str(path))
    app.page.wait_for_function(f"document.querySelectorAll('#conv-list li').length === {n + 1}")
    assert app.messages() == before
    assert app.page.locator(".msg").count() == 4
    # a file that is not a conversation says so, and changes nothing
    bad = tmp_path / "bad.json"
    bad.write_text('{"messages": [{"role": "robot", "content": 1}]}')
    app.page.set_input_files("#import-input", str(bad))
    app.page.wait_for_selector("#error[data-kind=import]")
    assert "messages[0]" in app.page.inner_text("#error-text")
    assert app.page.locator("#conv-list li").count() == n + 1
    app.page.click("#error-actions button:text('Dismiss')")
    no_errors(app)


def test_empty_max_tokens_is_a_field_error(app, oracle):
    app.page.click("#new-chat")
    app.page.fill("#s-max_tokens", "")
    err = app.page.locator("#s-max_tokens-error")
    assert err.is_visible() and "enter a value" in err.inner_text()
    assert app.page.get_attribute("#s-max_tokens", "aria-invalid") == "true"
    assert app.page.is_disabled("#send")
    app.page.fill("#input", PROMPT)
    app.page.press("#input", "Enter")                              # nothing is sent
    assert app.page.locator(".msg").count() == 0
    assert "Max tokens" in app.page.inner_text("#send-problem")
    app.page.fill("#s-max_tokens", "0")
    assert "integer from 1" in err.inner_text()
    app.set(max_tokens=12)
    assert err.is_hidden() and app.page.is_enabled("#send")
    app.page.press("#input", "Enter")
    assert app.reply(1)["text"] == oracle["tiny"]["text"]           # nothing broke
    no_errors(app)


def test_json_output_option(app):
    """Settings, JSON output: the schema is checked as typed (a bad one blocks sending and says why);
    with a good one the reply is JSON that validates against it."""
    import jsonschema
    from tests.test_grammar_schema import SCHEMAS
    app.page.click("#new-chat")
    app.page.check("#json-on")
    err = app.page.locator("#json-schema-error")
    app.page.fill("#json-schema", '{"type": "object",')
    assert err.is_visible() and "not JSON" in err.inner_text() and app.page.is_disabled("#send")
    app.page.fill("#json-schema", "[1]")
    assert "must be a JSON Schema" in err.inner_text() and "JSON output" in app.page.inner_text("#send-problem")
    app.page.fill("#json-schema", json.dumps(SCHEMAS["person"]))
    app.set(max_tokens=60)
    assert err.is_hidden() and app.page.is_enabled("#send")
    n = app.say("Who?")
    got = app.reply(n)
    assert got["finish"] == "stop", got
    jsonschema.Draft202012Validator(SCHEMAS["person"]).validate(json.loads(got["text"]))
    app.page.uncheck("#json-on")
    app.set(max_tokens=12)
    no_errors(app)


def test_reload_keeps_the_chat_and_the_cached_model_loads_offline(app, oracle):
    """A reload (here with the network blocked) keeps the open conversation; the model comes from
    the cache, by its URL (a HEAD request that fails: offline) and by name (no request at all)."""
    before = app.messages()
    assert len(before) >= 2
    blocked = []

    def abort(route):
        blocked.append(route.request.url)
        route.abort()
    def is_model(url):             # any fetch of a .gguf file (not the page, whose query names one)
        return urlparse(url).path.endswith(".gguf")
    app.unserve_models(app.context)
    app.context.route(is_model, abort)
    try:
        # the boot snapshot the first load stored (after it: web/py.mjs) starts Python this time
        saved = boot_snapshot_saved(app.page)
        # the default source (?model=) with no network: its cached copy; then a cached model by name
        info = app.open()
        assert info["name"] == "tiny.gguf"
        assert info["load"]["boot"]["from"] == "snapshot" and "import" not in info["load"]["boot"]["ms"], (saved, info["load"]["boot"])
        # and the kernels the first load of this URL compiled were started before Python was up
        prepared = info["load"]["prepared"]
        assert prepared and prepared["taken"] == prepared["offered"] > 0, prepared
        assert app.messages() == before                              # the reload kept the conversation
        assert app.page.locator(".msg").count() == len(before)
        assert blocked, "the app did not even try the network"       # the block was in force
        assert all(".gguf" in u for u in blocked)
        app.page.click("#new-chat")
        app.set(max_tokens=12)
        r = app.reply(app.say(PROMPT))
        assert r["text"] == oracle["tiny"]["text"]
        n_blocked = len(blocked)
        app.page.click("#cache-list li:has-text('other.gguf') button:text('Load')")
        app.wait_ready("other.gguf")
        assert len(blocked) == n_blocked                              # {cached: name}: no request at all
        app.page.click("#new-chat")
        r = app.reply(app.say(PROMPT))
        assert r["text"] == oracle["other"]["text"]
    finally:
        app.context.unroute(is_model)
        app.serve_models(app.context)
    no_errors(app)


def test_device_lost_offers_reload(app, oracle):
    app.page.evaluate("window.bitwebApp.bitweb.debug.loseDevice()")
    app.page.wait_for_selector("#error[data-kind=device-lost]", timeout=60_000)
    assert "lost" in app.page.inner_text("#error-text")
    assert app.page.is_disabled("#send")
    chat = app.messages()
    app.page.click("#error-actions button:text('Reload model')")
    app.wait_ready("other.gguf")
    assert app.messages() == chat                                   # the conversation is still there
    app.page.click("#new-chat")
    app.set(max_tokens=12)
    r = app.reply(app.say(PROMPT))
    assert r["text"] == oracle["other"]["text"]
    no_errors(app)


def test_smaller_context_and_a_full_conversation(app, oracle):
    app.page.fill("#max-context", "1")                             # refused beside the field
    app.page.dispatch_event("#max-context", "change")
    assert "at least 2" in app.page.inner_text("#max-context-error")
    assert app.page.evaluate("document.body.dataset.state") == "ready" and app.info()["context"] == 1024
    app.set_context(48, 48)                                      # reloads the model
    assert app.page.is_hidden("#max-context-error")
    assert "48 of 1024" in app.page.inner_text("#model-info")
    app.page.click("#new-chat")
    app.set(max_tokens=12)
    first = app.reply(app.say(PROMPT))                            # 32 prompt tokens + 12
    app.say(PROMPT)                                              # the second turn cannot fit in 48
    app.page.wait_for_selector(".context-full", timeout=REPLY_MS)
    assert "holds 48" in app.page.inner_text(".context-full")
    assert app.page.locator(".msg.assistant").count() == 1        # no empty bubble
    assert app.page.evaluate("document.body.dataset.state") == "ready"
    app.page.click(".context-full button:text('Continue without the oldest turns')")
    assert app.page.locator(".context-full").count() == 0         # gone with the click, not later
    r = app.reply(2)
    assert r["text"] == first["text"] == oracle["other"]["text"]   # the same turn again, on its own
    assert app.page.locator(".divider", has_text="no longer sent").count() == 1
    assert len(app.messages()) == 4                               # the dropped turn is still shown and saved
    app.set_context("", 1024)
    app.page.click("#new-chat")
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
    small = """() => [...document.querySelectorAll('button, .button, input, select, textarea')]
        .filter(e => e.offsetParent && !e.closest('dialog') && !e.classList.contains('visually-hidden'))
        .map(e => [e.id || e.textContent.trim().slice(0, 20), e.getBoundingClientRect()])
        .filter(([, r]) => r.width < 44 || r.height < 44).map(([n, r]) => `${n} ${r.width}x${r.height}`)"""
    assert page.evaluate(small) == [], "tap targets under 44 px on a phone"
    page.screenshot(path=str(out / "chat-phone.png"))
    page.click("#menu")
    assert page.is_visible("#side")
    assert page.evaluate(small) == [], "tap targets under 44 px in the phone drawer"
    page.keyboard.press("Escape")                                # Escape closes the drawer
    assert page.is_hidden("#side")
    page.set_viewport_size({"width": 1280, "height": 800})
    no_errors(app)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_axe_finds_no_violations(app, scheme):
    """axe-core on a chat, the empty page, the phone layout (drawer closed and open) and the error
    state, in light and dark."""
    page = app.page
    page.emulate_media(color_scheme=scheme)
    try:
        if not page.locator(".msg.assistant[data-done]").count():
            app.set(max_tokens=4)
            app.reply(app.say(PROMPT))
        axe(page, f"a chat ({scheme})")
        page.click("#new-chat")
        axe(page, f"the empty page ({scheme})")
        page.set_viewport_size({"width": 390, "height": 844})
        axe(page, f"the phone layout ({scheme})")
        page.click("#menu")
        axe(page, f"the phone layout, drawer open ({scheme})")
        page.keyboard.press("Escape")
        page.set_viewport_size({"width": 1280, "height": 800})
        page.fill("#url-input", app.server + "no/such/model.gguf")
        page.click("#url-form button")
        page.wait_for_selector("#error[data-kind=download]", timeout=READY_MS)
        page.wait_for_function("document.body.dataset.state === 'ready'")
        axe(page, f"the error state ({scheme})")
        page.click("#error-actions button:text('Dismiss')")
    finally:
        page.emulate_media(color_scheme="light")
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
    assert page.workers == []                                          # nothing else started
    axe(page, "the no-WebGPU page")
    assert errors == []
    ctx.close()


def test_default_model_loads_and_matches_cli(browser, server):
    """The shipped model, with no ?model=: what `npm start` opens. A three-turn chat: every reply
    equals the native engine's ChatSession (the CLI's `generate --chat`; tiny models compare with
    the CLI itself in test_message_streams_and_matches_cli). The intro card's example
    prompts send themselves. Screenshot of the chat (docs/screenshot.png comes from it)."""
    path = ROOT / "web" / "models" / "bitweb-chat-i2_s.gguf"
    assert path.exists(), f"{path} is missing: the default model is part of the app (issue 5)"
    a = new_app_context(browser, server, {})
    page = a.page
    try:
        info = a.open(query="")
        assert info["name"] == "bitweb-chat-i2_s.gguf"
        assert "bitweb-chat" in page.inner_text(".intro")
        a.set(temperature=0, max_tokens=48)
        page.click(".intro button.example:text('What is 37 + 45?')")
        questions = ["What is 37 + 45?", "Hello!", "Which is larger, 412 or 398?"]
        texts = [a.reply(1)["text"]] + [a.reply(a.say(q))["text"] for q in questions[1:]]
        assert texts == native_chat(path, questions, 48)
        out = ROOT / "test-results"
        out.mkdir(exist_ok=True)
        page.evaluate("document.getElementById('side').scrollTop = 0")
        page.screenshot(path=str(out / "chat-default.png"))
        no_errors(a)
    finally:
        a.context.close()


def test_page_reopens_the_last_model_from_the_cache(app, oracle):
    """A plain reload (no ?model=) opens the model used last, from OPFS, with no model request.
    Its boot snapshot is spoiled first and the one shipped with the app is missing (404): Python
    boots fresh (the path with nothing to start from), and stores a new snapshot. Then the
    pipeline manifests are spoiled (of another shape, as an older version could have left) and the
    page reloads again: the load makes its own device and compiles its kernels itself."""
    requests = []
    app.page.on("request", lambda r: requests.append(r.url) if ".gguf" in urlparse(r.url).path else None)
    boot_snapshot_saved(app.page)
    spoiled = app.page.evaluate("""async () => {
      const c = await caches.open('bitweb-boot');
      const keys = await c.keys();
      for (const k of keys) await c.put(k, new Response(new Uint8Array(64), { headers: { 'x-bitweb-bytes': '64' } }));
      return keys.length; }""")
    assert spoiled == 1
    manifests = app.page.evaluate("caches.open('bitweb-pipelines').then((m) => m.keys()).then((k) => k.length)")
    shipped = "**/build/web/boot-snapshot.*"
    app.context.route(shipped, lambda route: route.fulfill(status=404, body="not found"))
    try:
        app.page.goto(app.server)
        info = app.wait_ready("other.gguf")
        assert requests == []
        boot = info["load"]["boot"]
        assert boot["from"] == "fresh" and boot.get("snapshotError") and boot["shipped"] == "missing", boot
        assert "import" in boot["ms"], boot
        assert boot_snapshot_saved(app.page) > 64                        # and a good one replaces it
        app.page.click("#new-chat")
        app.set(max_tokens=12)
        assert app.reply(app.say(PROMPT))["text"] == oracle["other"]["text"]
    finally:
        app.context.unroute(shipped)
    no_errors(app)
    # this load's manifest is stored right after it (long before the reply ends): a new key, or the
    # key of an earlier load of the same model and options in this context, overwritten
    spoiled = app.page.evaluate("""async (n) => {
      const m = await caches.open('bitweb-pipelines');
      for (let i = 0; i < 150; i++) {
        const keys = await m.keys();
        if (keys.length > n || (i >= 15 && keys.length > 0 && keys.length === n)) {
          for (const k of keys) await m.put(k, Response.json({ features: 5, limits: null, pipelines: 7 }));
          return keys.length;
        }
        await new Promise((ok) => setTimeout(ok, 200));
      }
      return 0; }""", manifests)
    assert spoiled >= manifests and spoiled > 0, (spoiled, manifests)
    app.page.goto(app.server)
    info = app.wait_ready("other.gguf")
    assert info["load"]["boot"]["from"] == "snapshot"
    # a manifest was found for this load (prepared is null without one) and none of it was taken
    prepared = info["load"].get("prepared")
    assert prepared is not None and not prepared.get("taken"), prepared
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
    assert info["vocabulary"] == 128256
    assert info["load"]["header_read"] > 4 << 20                 # several NeedMoreBytes rounds
    app.page.click("#new-chat")
    app.set(max_tokens=3)
    r = app.reply(app.say(prompt))
    assert r["text"] == want["text"]
    assert app.last_reply()["usage"]["prompt_tokens"] == len(want["prompt_ids"])
    no_errors(app)


def test_limits_too_small_says_which_and_by_how_much(app):
    """?cap= makes the app treat the GPU as one with smaller limits. With the context left empty the
    app picks the largest that fits (one layer's K buffer, f16 cache: 65536 / (2 KV heads x 64 x 2 bytes)
    = 256 positions) and says why; asked for the file's 1024, the engine's check names the limit, the
    shortfall (1024 x 2 x 64 x 2 bytes) and the most that fits, and the loaded model stays."""
    if app.page.url.startswith(app.server):                         # (run alone, the context is new)
        app.page.evaluate("""() => { const s = JSON.parse(localStorage.getItem('bitweb.settings') || '{}');
            delete s.maxContext; localStorage.setItem('bitweb.settings', JSON.stringify(s)); }""")  # context: empty
    app.page.goto(app.server + "?model=test-models/tiny.gguf&cap=maxStorageBufferBindingSize:65536")
    info = app.wait_ready("tiny.gguf")
    assert info["context"] == 256 and info["contextMax"] == 1024
    shown = app.page.inner_text("#model-info")
    assert "256 of 1024" in shown and "maxStorageBufferBindingSize (65536 bytes)" in shown, shown
    app.page.fill("#max-context", "1024")
    app.page.dispatch_event("#max-context", "change")              # reloads at 1024: does not fit
    app.page.wait_for_selector("#error[data-kind=limits]", timeout=READY_MS)
    text = app.page.inner_text("#error")
    assert "limits are too small" in text
    need = 1024 * 2 * 64 * 2
    assert "maxStorageBufferBindingSize = 65536" in text and f"short by {need - 65536} bytes" in text, text
    assert "at most 256 positions of context fit" in text, text
    app.page.wait_for_function("document.body.dataset.state === 'ready'")
    assert app.info()["context"] == 256                              # the model that fits still answers
    app.page.fill("#max-context", "")                                # (a saved setting: leave it empty)
    app.page.select_option("#kv-cache", "f32")                      # reloads: an f32 cache fits half as many
    app.page.wait_for_function("window.bitwebApp.state.engine?.info.kvCache === 'f32'", timeout=READY_MS)
    info = app.wait_ready("tiny.gguf")
    assert info["context"] == 128 and info["load"]["kv_cache_bytes"] == 2 * 2 * 128 * 2 * 64 * 4, info["load"]
    assert "128 of 1024" in app.page.inner_text("#model-info")
    app.page.select_option("#kv-cache", "f16")                      # (a saved setting: back to the default)
    app.page.wait_for_function("window.bitwebApp.state.engine?.info.kvCache?.startsWith('f16')"
                               " && !window.bitwebApp.state.loading && document.body.dataset.state === 'ready'",
                               timeout=READY_MS)
    assert app.info()["context"] == 256
    no_errors(app)
