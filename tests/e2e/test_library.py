"""The JavaScript library (web/bitweb.mjs) from a page of its own: web/examples/minimal.html, which
imports only the public module, streams the default model's answer, and the same page then drives
the API directly (a second engine from the cache next to the first, abort, stop strings, usage,
KV-prefix reuse, speculative decoding with prompt lookup, tokenize, settings errors by field,
unload), checked against the CLI; then
structured output: README's tool-call example (web/examples/tools.html) as written, a tool call
streamed as OpenAI streams it, JSON responses validated against their schemas."""
from __future__ import annotations

import pytest

from bitweb.completions import FINISH
from tests.conftest import ROOT
from tests.e2e.conftest import new_page, settle
from tests.e2e.app_driver import cli, clis

MODEL = ROOT / "web" / "models" / "bitweb-chat-i2_s.gguf"
QUESTION = "What is 37 + 45?"
READY_MS = 240_000


@pytest.fixture(scope="module")
def want():
    return cli(MODEL, prompt=QUESTION, max_tokens=200)


@pytest.fixture(scope="module")
def page(browser, server):
    ctx = browser.new_context()
    yield new_page(ctx)
    ctx.close()


def test_minimal_page_streams_the_cli_answer(page, server, want):
    src = (ROOT / "web" / "examples" / "minimal.html").read_text()
    assert "from '../bitweb.mjs'" in src and src.count("import ") == 1    # the public module only
    assert len(src.splitlines()) <= 16
    page.goto(server + "examples/minimal.html")
    page.wait_for_function("document.getElementById('out').dataset.done === 'yes'", timeout=READY_MS)
    assert page.inner_text("#out") == want["text"]
    assert want["stop_reason"] == "eot" and want["text"].endswith("82.")
    assert page.errors == []


API = """async (js) => {
  const bitweb = await import('/bitweb.mjs');
  window.engine ??= await bitweb.load(bitweb.DEFAULT_MODEL);     // from the cache: a second engine
  const engine = window.engine;
  const user = (content) => ({ role: 'user', content });
  return await (new Function('bitweb', 'engine', 'user', `return (async () => { ${js} })()`))(bitweb, engine, user);
}"""


def api(page, js):
    return settle(page, API, js, what="the library call")


def test_abort_a_stream_mid_way_then_complete_one(page, want):
    got = api(page, f"""
      const ctl = new AbortController();
      const chunks = [];
      const stream = await engine.chat.completions.create({{ messages: [user({QUESTION!r})], stream: true, signal: ctl.signal }});
      for await (const c of stream) {{ chunks.push(c); if (chunks.length === 3) ctl.abort(); }}
      const full = await engine.chat.completions.create({{ messages: [user({QUESTION!r})] }});
      return {{ chunks, full }};""")
    chunks, full = got["chunks"], got["full"]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    last = chunks[-1]
    assert last["choices"][0]["finish_reason"] == "abort"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert 0 < len(text) < len(want["text"]) and want["text"].startswith(text)   # stopped part way
    assert last["usage"]["completion_tokens"] < len(want["ids"])
    assert full["object"] == "chat.completion"
    assert full["choices"][0]["message"] == {"role": "assistant", "content": want["text"]}
    assert full["choices"][0]["finish_reason"] == "stop"
    assert full["usage"] == {"prompt_tokens": len(want["prompt_ids"]), "completion_tokens": len(want["ids"]),
                             "total_tokens": len(want["prompt_ids"]) + len(want["ids"]),
                             "prompt_tokens_details": {"cached_tokens": full["timing"]["cached_tokens"]}}
    assert full["timing"]["ttft_ms"] > 0
    # right after the load the prefill kernels are still compiling on SwiftShader (the prompt goes
    # token by token through the decode plan) or done (the prefill plan): the same reply either way
    assert full["timing"]["prefill_plan"] in ("prefill", "decode", "decode+prefill")
    assert page.errors == []


def test_stop_during_a_long_prompt_ends_its_prefill(page, want):
    """A Stop sent right after a long prompt (7+ prefill chunks of 64) is seen between its chunks
    (Engine._bounded): the reply ends with no token at all (before the bound the whole prompt ran
    and one token came), and the same question then gets the CLI's answer from the cache rows the
    stopped prefill wrote (the prompts share the chat template and the question)."""
    got = api(page, f"""
      const ctl = new AbortController();
      const long = {QUESTION!r} + ' Explain every step of the sum in words.'.repeat(35);
      const stream = await engine.chat.completions.create({{ messages: [user(long)], stream: true, signal: ctl.signal }});
      ctl.abort();                          // (the worker has the abort before the first chunk is done)
      const chunks = [];
      for await (const c of stream) chunks.push(c);
      const ids = await engine.tokenize([user(long)]);
      const full = await engine.chat.completions.create({{ messages: [user({QUESTION!r})] }});
      return {{ chunks, n: ids.length, full }};""")
    chunks, full = got["chunks"], got["full"]
    assert 6 * 64 < got["n"] < 512, got["n"]                    # (the model's context: 512)
    last = chunks[-1]
    assert last["choices"][0]["finish_reason"] == "abort", chunks
    assert last["usage"]["completion_tokens"] == 0 and last["timing"]["stop_reason"] == "stopped", last
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == ""
    assert full["choices"][0]["message"]["content"] == want["text"]
    assert full["timing"]["cached_tokens"] > 0, full["timing"]
    assert page.errors == []


def test_stop_strings_length_and_kv_reuse(page, want):
    cut = want["text"].index("=")
    got = api(page, f"""
      const q = [user({QUESTION!r})];
      const parts = [];
      for await (const c of await engine.chat.completions.create({{ messages: q, stream: true, stop: ['='] }}))
        parts.push(c.choices[0].delta.content ?? '');
      const last = await engine.chat.completions.create({{ messages: q, stop: ['=', 'so'] }});
      const short = await engine.chat.completions.create({{ messages: q, max_tokens: 3 }});
      const a = await engine.chat.completions.create({{ messages: q }});
      const again = await engine.chat.completions.create({{ messages: [...q, a.choices[0].message, user('What is 20 - 45?')] }});
      const ids = await engine.tokenize(q);
      return {{ parts, last, short, again, ids, info: engine.info }};""")
    assert "".join(got["parts"]) == want["text"][:cut]            # nothing of the stop string streamed
    assert got["last"]["choices"][0]["message"]["content"] == want["text"][:cut]
    assert got["last"]["choices"][0]["finish_reason"] == "stop"
    assert got["short"]["choices"][0]["finish_reason"] == "length" and got["short"]["usage"]["completion_tokens"] == 3
    t = got["again"]["timing"]                                      # the second turn reused the first's KV cache
    assert t["cached_tokens"] >= len(want["prompt_ids"]) and t["prefill_tokens"] < got["again"]["usage"]["prompt_tokens"]
    assert got["again"]["usage"]["prompt_tokens_details"] == {"cached_tokens": t["cached_tokens"]}   # (OpenAI's field)
    assert got["ids"] == want["prompt_ids"]                          # tokenize(messages) = the prompt the CLI runs
    info = got["info"]
    assert info["name"] == "bitweb-chat-i2_s.gguf" and info["architecture"] == "bitnet-b1.58"
    assert info["context"] == info["contextMax"] and info["adapter"]["backend"] == "browser"
    assert page.errors == []


# a reply that repeats its prompt ("... so 37 + 45 = 82."): prompt lookup drafts it (the tokens are the
# CLI's either way)
COPY = QUESTION
COPY_TOKENS = 40


@pytest.fixture(scope="module")
def copy_want():
    """The CLI's greedy reply to COPY without drafting and with prompt lookup: the same ids, and what
    the lookup drafted and accepted."""
    plain, lookup = clis(dict(model=MODEL, prompt=COPY, max_tokens=COPY_TOKENS),
                         dict(model=MODEL, prompt=COPY, max_tokens=COPY_TOKENS, speculative="lookup"))
    assert lookup["ids"] == plain["ids"] and lookup["text"] == plain["text"] and lookup["speculative"] == "lookup"
    assert 0 < lookup["accepted"] <= lookup["drafted"], lookup          # (COPY is a reply lookup drafts)
    return lookup


def test_speculative_lookup_gives_the_same_reply_and_counts_the_drafts(page, copy_want):
    """create({speculative: {mode: 'lookup'}}), greedy: the reply without drafting, token for token (the
    same text and token count as the plain request and the CLI), streamed and not; the final usage says
    what was drafted and accepted, the counts of the CLI's --speculative lookup (the same tokens, the
    same drafts); a plain request's usage says nothing of drafting."""
    got = api(page, f"""
      const req = {{ messages: [user({COPY!r})], max_tokens: {COPY_TOKENS} }};
      const plain = await engine.chat.completions.create(req);
      const lookup = await engine.chat.completions.create({{ ...req, speculative: {{ mode: 'lookup' }} }});
      const chunks = [];
      for await (const c of await engine.chat.completions.create({{ ...req, stream: true, speculative: {{ mode: 'lookup' }} }}))
        chunks.push(c);
      return {{ plain, lookup, chunks }};""")
    plain, lookup, chunks = got["plain"], got["lookup"], got["chunks"]
    want = copy_want
    drafting = {"mode": "lookup", "drafted": want["drafted"], "accepted": want["accepted"]}
    for r in (plain, lookup):
        assert r["choices"][0]["message"]["content"] == want["text"], r
        assert r["usage"]["completion_tokens"] == len(want["ids"])
        assert r["choices"][0]["finish_reason"] == FINISH[want["stop_reason"]]
    assert "speculative" not in plain["usage"]
    assert lookup["usage"]["speculative"] == drafting, lookup["usage"]
    last = chunks[-1]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == want["text"]
    assert last["usage"]["completion_tokens"] == len(want["ids"]) and last["usage"]["speculative"] == drafting
    assert page.errors == []


def test_a_draft_model_gives_the_same_reply(page, copy_want):
    """load(source, {draft}) loads the draft model as an engine of its own (engine.draft, with the
    target's context) on the same device, and create({speculative: {mode: 'draft'}}) drafts with it:
    the reply without drafting (the CLI's), the usage counting the drafts. Here the default model
    drafts for itself (a second engine of the file), so it keeps drafts. An engine loaded without a
    draft refuses the mode by field; unloading the target unloads its draft; a draft of another
    vocabulary is refused by field (the worker's check: see tests/test_completions.py)."""
    got = api(page, f"""
      const req = {{ messages: [user({COPY!r})], max_tokens: {COPY_TOKENS}, speculative: {{ mode: 'draft' }} }};
      const out = {{}};
      try {{ await engine.chat.completions.create(req); out.none = 'answered'; }} catch (e) {{ out.none = [e.kind, e.field]; }}
      const paired = await bitweb.load(bitweb.DEFAULT_MODEL, {{ draft: bitweb.DEFAULT_MODEL }});
      out.draft = [paired.draft.info.name, paired.draft.info.context, paired.info.context, paired.draft.state];
      out.reply = await paired.chat.completions.create(req);
      const draft = paired.draft;
      await paired.unload();
      out.states = [paired.state, draft.state];
      return out;""")
    assert got["none"] == ["settings", "speculative.mode"]
    name, draft_ctx, ctx, state = got["draft"]
    assert name == "bitweb-chat-i2_s.gguf" and draft_ctx == ctx and state == "ready"
    r = got["reply"]
    assert r["choices"][0]["message"]["content"] == copy_want["text"]
    assert r["usage"]["completion_tokens"] == len(copy_want["ids"])
    sp = r["usage"]["speculative"]
    assert sp["mode"] == "draft" and 0 < sp["accepted"] <= sp["drafted"], sp
    assert got["states"] == ["unloaded", "unloaded"]
    assert page.errors == []


@pytest.mark.parametrize("request_js,field", [
    ("{ messages: [user('hi')], temperature: -1 }", "temperature"),
    ("{ messages: [user('hi')], max_tokens: 0 }", "max_tokens"),
    ("{ messages: [user('hi')], max_tokens: null, top_p: 2 }", "top_p"),
    ("{ messages: [user('hi')], stop: [''] }", "stop"),
    ("{ messages: [] }", "messages"),
    ("{ messages: [{ role: 'robot', content: 'x' }] }", "messages"),
    ("{ messages: [{ role: 'tool', content: 'x' }] }", "messages"),
    ("{ messages: [user('hi')], response_format: { type: 'yaml' } }", "response_format"),
    ("{ messages: [user('hi')], response_format: { type: 'json_schema', json_schema: { name: 'x', schema: "
     "{ type: 'string', format: 'email' } } } }", "response_format.json_schema.schema"),
    ("{ messages: [user('hi')], tools: [{ type: 'function', function: { name: 'a b' } }] }", "tools[0].function.name"),
    ("{ messages: [user('hi')], tools: [], tool_choice: 'required' }", "tool_choice"),
    ("{ messages: [user('hi')], grammar: 'root ::= nothing' }", "grammar"),
    ("{ messages: [user('hi')], speculative: 'lookup' }", "speculative"),
    ("{ messages: [user('hi')], speculative: { mode: 'fast' } }", "speculative.mode"),
])
def test_a_bad_request_is_a_settings_error_naming_the_field(page, request_js, field):
    got = api(page, f"""
      try {{ await engine.chat.completions.create({request_js}); return null; }}
      catch (e) {{ return {{ kind: e.kind, field: e.field, message: e.message, name: e.name,
                         classes: [e instanceof bitweb.BitwebError, e instanceof bitweb.errors.settings, e instanceof Error] }}; }}""")
    assert got is not None, "the bad request was accepted"
    assert got["kind"] == "settings" and got["field"] == field and field in got["message"]
    assert got["name"] == "SettingsError" and got["classes"] == [True, True, True]


def test_load_options_are_checked_and_unload_ends_an_engine(page):
    got = api(page, """
      const out = {};
      for (const [k, opts] of [['context', { context: 1 }], ['cap', { capLimits: { maxStorageBufferBindingSize: NaN } }],
                               ['limit', { capLimits: { noSuchLimit: 5 } }], ['act', { activations: 'f16' }],
                               ['kv', { kvCache: 'f8' }], ['draft', { draft: 5 }]]) {
        try { await bitweb.load(bitweb.DEFAULT_MODEL, opts); out[k] = 'loaded'; } catch (e) { out[k] = [e.kind, e.field]; }
      }
      const spare = await bitweb.load(bitweb.DEFAULT_MODEL, { context: 64, kvCache: 'f32' });
      out.spareContext = spare.info.context;
      const i = engine.info;
      out.kvCache = [i.kvCache, i.load.kv_cache_bytes, spare.info.kvCache, spare.info.load.kv_cache_bytes,
                     2 * i.layers * i.kvHeads * (i.width / i.heads), i.context];
      await spare.unload();
      try { await spare.chat.completions.create({ messages: [user('hi')] }); out.after = 'answered'; }
      catch (e) { out.after = e.kind; }
      out.cached = (await bitweb.cache.list()).map((m) => m.name);
      out.persist = typeof (await bitweb.cache.persist());
      out.kinds = bitweb.ERROR_KINDS;
      return out;""")
    assert got["context"] == ["settings", "context"]
    assert got["cap"] == ["settings", "capLimits.maxStorageBufferBindingSize"]
    assert got["limit"] == ["settings", "capLimits.noSuchLimit"]
    assert got["act"] == ["settings", "activations"] and got["kv"] == ["settings", "kvCache"]
    assert got["draft"] == ["settings", "draft"]
    # the default f16 cache (SwiftShader has no shader-f16: pack2x16float pairs); f32 on request
    kv16, b16, kv32, b32, per_pos, ctx = got["kvCache"]      # per_pos: K and V values per position
    assert kv16 == "f16 pack2x16float" and b16 == 2 * per_pos * ctx and kv32 == "f32" and b32 == 4 * per_pos * 64
    assert got["spareContext"] == 64 and got["after"] == "unloaded"
    assert got["cached"] == ["bitweb-chat-i2_s.gguf"] and got["persist"] == "boolean"
    readme = (ROOT / "README.md").read_text()
    errors = readme[readme.index("## Errors"):]
    errors = errors[:errors.index("\n## ", 4)]
    for kind in got["kinds"]:                                       # README lists every kind
        assert f"`{kind}`" in errors, f"README's Errors section lacks {kind}"
    assert page.errors == []


# ---------------------------------------------------------------- structured output
WEATHER_PARAMS = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"]}


def test_readme_tool_call_example_works_as_written(page, server):
    """README's "Structured output and tool calls" example is web/examples/tools.html, whole; the page
    calls the tool, sends the result back and gets a reply in words."""
    import json
    import jsonschema
    src = (ROOT / "web" / "examples" / "tools.html").read_text()
    body = src[src.index("<pre"):]
    assert body in (ROOT / "README.md").read_text()
    page.goto(server + "examples/tools.html")
    page.wait_for_function("document.getElementById('out').dataset.done === 'yes'", timeout=READY_MS)
    got = json.loads(page.inner_text("#out"))
    call = got["call"]
    assert got["finish"] == "tool_calls" and call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "get_weather"
    jsonschema.Draft202012Validator(WEATHER_PARAMS).validate(json.loads(call["function"]["arguments"]))
    assert isinstance(got["answer"], str)
    assert page.errors == []


def test_a_tool_call_streams_as_openai_streams_it(page):
    """The same request streamed and not: the stream's first tool-call delta has the id, type and name,
    the rest add up to the arguments; the last chunk says tool_calls. Greedy, so both are one reply."""
    import json
    got = api(page, f"""
      const tools = [{{ type: 'function', function: {{ name: 'get_weather', parameters: {json.dumps(WEATHER_PARAMS)} }} }}];
      const req = {{ messages: [user('Weather in Oslo?')], tools, tool_choice: {{ type: 'function', function: {{ name: 'get_weather' }} }} }};
      const chunks = [];
      for await (const c of await engine.chat.completions.create({{ ...req, stream: true }})) chunks.push(c);
      const whole = await engine.chat.completions.create(req);
      return {{ chunks, whole }};""")
    chunks, whole = got["chunks"], got["whole"]
    msg = whole["choices"][0]["message"]
    assert msg["role"] == "assistant" and msg["content"] is None and len(msg["tool_calls"]) == 1
    call = msg["tool_calls"][0]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0]["role"] == "assistant"
    parts = [d["tool_calls"] for d in deltas if "tool_calls" in d]
    assert all(len(p) == 1 and p[0]["index"] == 0 for p in parts) and not any("content" in d for d in deltas)
    head = parts[0][0]
    assert head["type"] == "function" and head["id"].startswith("call_") and head["function"] == {
        "name": "get_weather", "arguments": ""}
    args = "".join(p[0]["function"]["arguments"] for p in parts[1:])
    assert all(set(p[0]) == {"index", "function"} for p in parts[1:]) and len(parts) > 2
    assert args == call["function"]["arguments"] and call["function"]["name"] == "get_weather"
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls" == whole["choices"][0]["finish_reason"]
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert page.errors == []


def test_json_responses_validate_in_the_browser(page):
    import json
    import jsonschema
    from tests.test_grammar_schema import SCHEMAS
    names = ["person", "enum-const"]
    got = api(page, f"""
      const schemas = {json.dumps({n: SCHEMAS[n] for n in names})};
      const out = {{}};
      for (const [name, schema] of Object.entries(schemas)) {{
        const r = await engine.chat.completions.create({{ messages: [user('JSON, please')], temperature: 1.2, seed: 3,
          max_tokens: 64, response_format: {{ type: 'json_schema', json_schema: {{ name: name.replace('-', '_'), schema }} }} }});
        out[name] = [r.choices[0].message.content, r.choices[0].finish_reason];
      }}
      const obj = await engine.chat.completions.create({{ messages: [user('JSON')], response_format: {{ type: 'json_object' }} }});
      out.object = [obj.choices[0].message.content, obj.choices[0].finish_reason];
      return out;""")
    for name in names:
        text, finish = got[name]
        assert finish == "stop", got[name]
        jsonschema.Draft202012Validator(SCHEMAS[name]).validate(json.loads(text))
    assert isinstance(json.loads(got["object"][0]), dict)
    assert page.errors == []
