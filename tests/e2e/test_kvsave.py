"""Saved KV caches (web/kvstore.mjs) through the library, on the default (tiny) model: after a
reload the next reply restores the conversation's saved cache (usage's cached_tokens) and equals a
fresh profile's reply (and after another conversation in between, going back restores it again);
a corrupted saved cache, one that claims another model and one that claims
another KV type are each ignored and deleted, the replies unchanged; the least recently saved are
evicted at the bound. The app: a reload returns to the open conversation, whose next reply restores
its saved cache (the reply's stats say how many prompt tokens came from it) and equals a fresh
profile's; the storage line counts the saved caches and clears them. Each browser context is a
profile of its own (its own OPFS)."""
from __future__ import annotations

import pytest

from tests.e2e.app_driver import PROMPT, make_model, new_app_context, no_errors
from tests.e2e.conftest import new_page, settle

PAGE = "kv-test.html"         # a blank page of the server's origin (a route)
Q1, Q2 = "Tell me about the sea.", "And the sky?"

CALL = """async ([js, opts]) => {
  const bitweb = await import('/bitweb.mjs');
  window.engine ??= await bitweb.load(bitweb.DEFAULT_MODEL, opts);
  const engine = window.engine;
  const turn = async (messages, max_tokens = 16) => {
    const r = await engine.chat.completions.create({ messages, max_tokens });
    return { text: r.choices[0].message.content, cached: r.usage.prompt_tokens_details.cached_tokens,
             prompt: r.usage.prompt_tokens };
  };
  const kvdir = async () => (await navigator.storage.getDirectory()).getDirectoryHandle('bitweb-kv', { create: true });
  const saved = async () => {
    await bitweb.cache.conversations();             // (once the saves after the replies are done)
    const out = {};
    for await (const [name, h] of (await kvdir()).entries()) if (name.endsWith('.kv')) out[name] = (await h.getFile()).size;
    return out;
  };
  // rewrite a saved file: edit(header, data) changes them in place (the file keeps its name)
  const rewrite = async (name, edit) => {
    const fh = await (await kvdir()).getFileHandle(name);
    const buf = new Uint8Array(await (await fh.getFile()).arrayBuffer());
    const len = new DataView(buf.buffer).getUint32(8, true);
    const header = JSON.parse(new TextDecoder().decode(buf.subarray(12, 12 + len)));
    const data = buf.slice(12 + len);
    edit(header, data);
    const json = new TextEncoder().encode(JSON.stringify(header));
    const head = new DataView(new ArrayBuffer(12));
    head.setUint32(0, new DataView(buf.buffer).getUint32(0, true), true);
    head.setUint32(4, new DataView(buf.buffer).getUint32(4, true), true);
    head.setUint32(8, json.byteLength, true);
    const w = await fh.createWritable();
    await w.write(head.buffer); await w.write(json); await w.write(data); await w.close();
  };
  // the store's index (web/kvstore.mjs index.json): index() reads it, index(text) overwrites it
  const index = async (text) => {
    const d = await kvdir();
    if (text === undefined) return JSON.parse(await (await (await d.getFileHandle('index.json')).getFile()).text());
    const w = await (await d.getFileHandle('index.json', { create: true })).createWritable();
    await w.write(text); await w.close();
  };
  const user = (content) => ({ role: 'user', content });
  const bot = (content) => ({ role: 'assistant', content });
  return await (new Function('engine', 'turn', 'saved', 'rewrite', 'index', 'user', 'bot',
    `return (async () => { ${js} })()`))(engine, turn, saved, rewrite, index, user, bot);
}"""


class Profile:
    """A browser context (its own OPFS) with one page on the blank test page."""

    def __init__(self, browser, server):
        self.ctx = browser.new_context()
        self.ctx.route(server + PAGE, lambda route: route.fulfill(
            status=200, content_type="text/html", body="<!doctype html><title>bitweb kv</title>"))
        self.page = new_page(self.ctx)
        self.url = server + PAGE
        self.page.goto(self.url)

    def run(self, js: str, **load):
        return settle(self.page, CALL, [js, load], what="the library call")

    def reload(self):
        self.page.reload()

    def close(self):
        assert self.page.errors == []
        self.ctx.close()


def two_turns(first: str, a1: str) -> str:
    return f"[user({first!r}), bot({a1!r}), user({Q2!r})]"


def three_turns(a1: str, a2: str) -> str:
    return f"[user({Q1!r}), bot({a1!r}), user({Q2!r}), bot({a2!r}), user('And the land?')]"


SWITCH = "const other = await turn([user('Say hello.')]); return {{ other, back: await turn({turn3}) }};"


def test_reload_then_the_next_reply_restores_the_saved_cache(browser, server):
    ref = Profile(browser, server)                   # a fresh profile: both turns in one page
    r1 = ref.run(f"return await turn([user({Q1!r})]);")
    r2 = ref.run(f"return await turn({two_turns(Q1, r1['text'])});")
    assert r1["cached"] == 0 and r2["cached"] > r1["prompt"] // 2     # (the page's own prefix reuse)
    r3 = ref.run(SWITCH.format(turn3=three_turns(r1["text"], r2["text"])))
    ref.close()

    p = Profile(browser, server)                     # the engine in a SharedWorker: the same store
    a1 = p.run(f"return await turn([user({Q1!r})]);", share=True)
    assert a1 == r1
    assert p.run("return [engine.info.shared, engine.info.sharedNote];") == [True, ""]
    assert len(p.run("return await saved();")) == 1
    assert p.run("return Object.keys(await index());") == list(p.run("return await saved();"))   # indexed
    p.run("await index('{\"not json');")           # a corrupt index: rebuilt from the files, not trusted
    p.reload()
    a2 = p.run(f"return await turn({two_turns(Q1, a1['text'])});", share=True)
    assert a2 == r2                                  # the same rows restored, the same reply
    assert len(p.run("return await saved();")) == 1  # the longer conversation replaced its ancestor
    assert p.run("return Object.keys(await index());") == list(p.run("return await saved();"))
    # another conversation in between, then back: its saved cache is restored, not re-read
    a3 = p.run(SWITCH.format(turn3=three_turns(a1["text"], a2["text"])), share=True)
    assert a3 == r3 and a3["back"]["cached"] >= a2["prompt"] - 1     # (its last token: merged with the reply's first)
    p.close()


def test_corrupt_or_stale_saved_caches_are_ignored_and_deleted(browser, server):
    questions = ["Name a colour.", "Count to three.", "Say hello."]
    edits = ["data[data.length - 1] ^= 1;",                                  # corrupted bytes
             "header.model = header.model.replace(/^./, (c) => c === 'a' ? 'b' : 'a');",   # another model
             "header.kv = header.kv === 'f32' ? 'f16' : 'f32';"]              # another KV type
    def conversation(prof, **load):
        firsts, names = {}, []
        for q in questions:
            before = set(prof.run("return Object.keys(await saved());", **load))
            firsts[q] = prof.run(f"return await turn([user({q!r})]);", **load)
            names += sorted(set(prof.run("return Object.keys(await saved());", **load)) - before)
        return firsts, names

    ref = Profile(browser, server)                    # a fresh profile that saves nothing (cache: false)
    firsts, names = conversation(ref, cache=False)
    assert names == []
    ref.reload()
    want = [ref.run(f"return await turn([user({q!r}), bot({firsts[q]['text']!r}), user('And then?')]);", cache=False)
            for q in questions]
    ref.close()
    p = Profile(browser, server)
    got, names = conversation(p)
    assert got == firsts and len(names) == 3
    for name, edit in zip(names, edits):
        p.run(f"await rewrite({name!r}, (header, data) => {{ {edit} }});")
    # a stale index: it names a file that is not there
    p.run(f"const i = await index(); i['{'0' * 64}.kv'] = i[{names[0]!r}]; await index(JSON.stringify(i));")
    p.reload()
    again = [p.run(f"return await turn([user({q!r}), bot({got[q]['text']!r}), user('And then?')]);") for q in questions]
    assert again == want                              # cached_tokens too: nothing was restored
    left = p.run("return Object.keys(await saved());")
    assert not set(names) & set(left) and len(left) == 3     # the three deleted; the new replies saved
    p.close()


def test_the_least_recently_saved_are_evicted_at_the_bound(browser, server):
    p = Profile(browser, server)
    p.run("return await turn([user('Name a colour.')], 8);")
    size = list(p.run("return await saved();").values())[0]
    p.run("await engine.unload(); window.engine = null;")
    bound = size * 5 // 2
    order = []
    for q in ("Say hello.", "Count to three.", "Name a fruit.", "Pick a number."):
        before = set(p.run("return Object.keys(await saved());", kvSaveBytes=bound))
        p.run(f"return await turn([user({q!r})], 8);", kvSaveBytes=bound)
        left = p.run("return await saved();")
        order += list(set(left) - before)
        assert sum(left.values()) <= bound and order[-1] in left
    assert len(order) == 4
    left = p.run("return await saved();")
    kept = [n for n in order if n in left]
    assert 2 <= len(kept) < 4 and kept == order[-len(kept):]   # the newest kept, the oldest gone
    p.close()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return {"tiny": make_model(tmp_path_factory.mktemp("kv-models") / "tiny.gguf", seed=1)}


def app_turns(app, reload: bool) -> list:
    app.open()
    app.page.click("#new-chat")
    app.set(max_tokens=12)
    first = app.reply(app.say(PROMPT))
    if reload:
        app.page.wait_for_function("document.getElementById('kv-usage').textContent.includes(': 1,')")
        before = app.messages()
        app.open()                                   # the reload: the open conversation is back
        assert app.messages() == before
    second = app.reply(app.say("And then?"))
    return [first, second, app.page.locator(".msg.assistant").nth(1).inner_text()]


def test_the_app_resumes_a_conversation_after_a_reload_from_its_saved_cache(browser, server, models):
    ref = new_app_context(browser, server, models)   # a fresh profile, no reload
    want = app_turns(ref, reload=False)
    no_errors(ref)
    ref.context.close()
    app = new_app_context(browser, server, models)
    got = app_turns(app, reload=True)
    cached = got[1]["stats"]["Prompt tokens from the cache"]
    assert int(cached) > 0 and cached == want[1]["stats"]["Prompt tokens from the cache"]
    assert [r["text"] for r in got[:2]] == [r["text"] for r in want[:2]]
    assert f"{cached} of " in got[2] and "prompt tokens from the cache" in got[2]   # the reply's own stats
    app.page.wait_for_function("document.getElementById('kv-usage').textContent.includes(': 1,')")
    app.page.click("#kv-clear")
    app.page.wait_for_function("document.getElementById('kv-usage').textContent.includes(': 0,')")
    assert app.page.evaluate("window.bitwebApp.bitweb.cache.conversations()")["entries"] == 0
    no_errors(app)
    app.context.close()
