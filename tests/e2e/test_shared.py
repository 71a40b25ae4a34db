"""One engine for every page of the origin: bitweb.load(source, {share: true}) runs the engine in a
SharedWorker (web/shared.mjs). Two pages of one browser context: the second attaches without a
download or an upload (sharedBy 2) and both get the CLI's reply; generations are taken round-robin
from the pages' queues (checked by the order the shared host started them, never by timing); Stop
in one page leaves the other's reply whole; a page closed mid-reply frees its request; the engine
is unloaded when its last page goes. Without SharedWorker (an init script deletes it) the library
falls back to a dedicated worker and says so in engine.info, and the app in its model panel. The
app shares by default (?share=0: a tab's own engine). The tests of the module run in order."""
from __future__ import annotations

import pytest

from tests.conftest import ROOT
from tests.e2e.conftest import new_page, settle
from tests.e2e.app_driver import App, cli

MODEL = ROOT / "web" / "models" / "bitweb-chat-i2_s.gguf"
QUESTION = "What is 37 + 45?"
BLANK = "shared-test.html"          # a blank page of the server's origin (a route)

LOAD = """async (share) => {
  const bitweb = await import('/bitweb.mjs');
  window.bitweb = bitweb;
  const stages = new Set();
  window.engine = await bitweb.load(bitweb.DEFAULT_MODEL, { share, onProgress: (p) => stages.add(p.stage) });
  const i = window.engine.info;
  return { shared: i.shared, sharedBy: i.sharedBy, sharedNote: i.sharedNote, attached: !!i.load.attached, stages: [...stages] };
}"""

RUN = """async (js) => {
  const bitweb = window.bitweb, engine = window.engine;
  const user = (content) => ({ role: 'user', content });
  return await (new Function('bitweb', 'engine', 'user', `return (async () => { ${js} })()`))(bitweb, engine, user);
}"""

# Waits (bounded by settle's time limit) until the shared host's stats satisfy `until` (a JS expression of s).
WAIT_STATS = """
  for (;;) {{ const s = (await bitweb.stats()).shared; if ({until}) return s; await new Promise((r) => setTimeout(r, 50)); }}"""


def run(page, js, what="the library call"):
    return settle(page, RUN, js, what=what)


def wait_stats(page, until):
    return run(page, WAIT_STATS.format(until=until), what=f"the shared host's stats to show {until}")


@pytest.fixture(scope="module")
def want():
    return cli(MODEL, prompt=QUESTION, max_tokens=200)


def blank_context(browser, server, init=None):
    ctx = browser.new_context()
    ctx.route(server + BLANK, lambda r: r.fulfill(body="<!doctype html><title>shared</title>", content_type="text/html"))
    if init:
        ctx.add_init_script(init)
    return ctx


def open_page(ctx, server):
    pg = new_page(ctx)
    pg.goto(server + BLANK)
    return pg


@pytest.fixture(scope="module")
def ctx(browser, server):
    c = blank_context(browser, server)
    yield c
    c.close()


@pytest.fixture(scope="module")
def pages(ctx, server):
    return {"a": open_page(ctx, server), "b": open_page(ctx, server)}


def ask(page, stream=False):
    if not stream:
        return run(page, f"return (await engine.chat.completions.create({{ messages: [user({QUESTION!r})] }})).choices[0].message.content;")
    return run(page, f"""
      let text = '';
      for await (const c of await engine.chat.completions.create({{ messages: [user({QUESTION!r})], stream: true }}))
        text += c.choices[0].delta.content ?? '';
      return text;""")


def test_the_second_page_attaches_to_the_first_pages_engine(pages, want):
    a, b = pages["a"], pages["b"]
    first = settle(a, LOAD, True, what="the first page's load")
    assert first["shared"] is True and first["sharedNote"] == "" and first["sharedBy"] == 1 and not first["attached"]
    assert {"download", "upload"} <= set(first["stages"]), first          # (a fresh profile: downloaded, uploaded)
    second = settle(b, LOAD, True, what="the second page's load")
    assert second["shared"] is True and second["sharedBy"] == 2 and second["attached"], second
    assert second["stages"] == [], second                                # nothing downloaded, uploaded or compiled
    s = wait_stats(a, "s.pages === 2 && Object.values(s.engines).join() === '2'")
    assert s["page"] != run(b, "return (await bitweb.stats()).shared.page;")
    assert run(a, "return engine.info.sharedBy;") == 2                  # (the host told the first page)
    assert ask(a) == want["text"]
    assert ask(b, stream=True) == want["text"]
    assert run(a, "return (await bitweb.stats()).engines;") == 1        # one engine in the worker, for both pages
    assert a.errors == [] and b.errors == []


def test_generations_are_taken_round_robin_across_pages(pages, want):
    a, b = pages["a"], pages["b"]
    na = run(a, "return (await bitweb.stats()).shared.page;")
    nb = run(b, "return (await bitweb.stats()).shared.page;")
    run(a, f"""
      await bitweb.debug.hold(true);          // (the host starts nothing until every request is queued)
      const q = {{ messages: [user({QUESTION!r})], max_tokens: 4 }};
      window.replies = [engine.chat.completions.create(q), engine.chat.completions.create(q)];""")
    run(b, f"window.replies = [engine.chat.completions.create({{ messages: [user({QUESTION!r})], max_tokens: 4 }})];")
    s = wait_stats(a, "s.queued.length === 3")
    assert sorted(p for p, _ in s["queued"]) == sorted([na, na, nb]) and s["running"] is None
    before = len(s["served"])
    run(a, "await bitweb.debug.hold(false);")
    texts = [run(p, "return (await Promise.all(window.replies)).map((r) => r.choices[0].message.content);") for p in (a, b)]
    served = run(a, "return (await bitweb.stats()).shared.served;")[before:]
    assert [p for p, _ in served] == [na, nb, na], served               # a, b, a: not a, a, b
    ids = [t for ts in texts for t in ts]
    assert len(ids) == 3 and len(set(ids)) == 1 and want["text"].startswith(ids[0]) and ids[0]
    assert a.errors == [] and b.errors == []


def test_stop_in_one_page_leaves_the_other_pages_reply_whole(pages, want):
    a, b = pages["a"], pages["b"]
    run(a, f"""
      const ctl = new AbortController();
      window.stopped = (async () => {{
        const chunks = [];
        for await (const c of await engine.chat.completions.create({{ messages: [user({QUESTION!r})], stream: true, signal: ctl.signal }})) {{
          chunks.push(c);
          if (chunks.length === 3) ctl.abort();
        }}
        return chunks;
      }})();""")
    run(b, f"window.whole = engine.chat.completions.create({{ messages: [user({QUESTION!r})] }});")
    chunks = run(a, "return await window.stopped;")
    whole = run(b, "return await window.whole;")
    assert chunks[-1]["choices"][0]["finish_reason"] == "abort"
    assert whole["choices"][0]["message"]["content"] == want["text"] and whole["choices"][0]["finish_reason"] == "stop"
    # a request still queued leaves its queue at once when stopped, and the other page's goes on
    got = run(b, f"""
      await bitweb.debug.hold(true);
      const ctl = new AbortController();
      const queued = engine.chat.completions.create({{ messages: [user({QUESTION!r})], signal: ctl.signal }});
      for (;;) {{ if ((await bitweb.stats()).shared.queued.length === 1) break; await new Promise((r) => setTimeout(r, 50)); }}
      ctl.abort();
      const err = await queued.then(() => null, (e) => e.kind);
      const left = (await bitweb.stats()).shared.queued.length;
      await bitweb.debug.hold(false);
      return {{ err, left }};""")
    assert got == {"err": "aborted", "left": 0}
    assert ask(a) == want["text"]
    assert a.errors == [] and b.errors == []


def test_a_page_closed_mid_reply_frees_its_request(ctx, server, pages, want):
    a = pages["a"]
    c = open_page(ctx, server)
    got = settle(c, LOAD, True, what="the third page's load")
    assert got["attached"] and got["sharedBy"] == 3
    run(c, f"""
      await new Promise((resolve) => {{
        (async () => {{ for await (const x of await engine.chat.completions.create({{ messages: [user({QUESTION!r})], stream: true }})) {{ resolve(); }} }})();
      }});""")
    # and one more of its requests waits in the queue (held there: nothing starts until a releases it)
    run(c, f"""
      await bitweb.debug.hold(true);
      window.waiting = engine.chat.completions.create({{ messages: [user({QUESTION!r})] }}).catch(() => null);
      for (;;) {{ if ((await bitweb.stats()).shared.queued.length === 1) break; await new Promise((r) => setTimeout(r, 50)); }}""")
    c.close()                                                          # (mid-reply: its first chunk has come)
    s = wait_stats(a, "s.pages === 2 && s.running === null && s.queued.length === 0 && Object.values(s.engines).join() === '2'")
    assert s["pages"] == 2 and s["hold"] is True                       # its queued request is gone, not started
    run(a, "await bitweb.debug.hold(false);")
    assert run(a, "return engine.info.sharedBy;") == 2
    assert ask(a) == want["text"]
    assert a.errors == []


def test_the_engine_unloads_when_its_last_page_goes(ctx, server, pages):
    d = open_page(ctx, server)
    got = run(d, "window.bitweb = await import('/bitweb.mjs'); return await window.bitweb.connect({ share: true });")
    assert got["shared"] is True and got["pages"] == 3
    loaded = run(d, "return await bitweb.stats();")
    assert loaded["engines"] == 1 and loaded["live_bytes"] > 1 << 20   # the pages' engine, not d's
    pages["a"].close()
    s = wait_stats(d, "s.pages === 2")
    assert list(s["engines"].values()) == [1]                          # b still uses it
    pages["b"].close()
    s = wait_stats(d, "s.pages === 1 && Object.keys(s.engines).length === 0")
    st = run(d, "return await bitweb.stats();")
    # unloaded: its GPU buffers freed (the device keeps a few bytes of its own, engine or not)
    assert st["engines"] == 0 and st["live_bytes"] < loaded["live_bytes"] // 1000, (loaded, st)
    assert d.errors == []


def test_without_shared_worker_the_page_has_its_own_engine(browser, server, want):
    ctx = blank_context(browser, server, init="delete window.SharedWorker;")
    try:
        pg = open_page(ctx, server)
        got = settle(pg, LOAD, True, what="the load without SharedWorker")
        assert got["shared"] is False and got["sharedBy"] == 1 and not got["attached"]
        assert "no SharedWorker" in got["sharedNote"], got
        assert ask(pg) == want["text"]
        assert pg.errors == []
    finally:
        ctx.close()


def test_the_apps_second_tab_shows_the_loaded_model_at_once(browser, server):
    """The app shares its engine by default (bitweb.connect share: true): a second tab of the app
    attaches to the model the first tab loaded, with nothing downloaded or uploaded; a tab opened
    with ?share=0 has an engine of its own."""
    ctx = browser.new_context()
    try:
        first = App(new_page(ctx), server, None)
        one = first.open("")
        assert one["shared"] is True and not one["load"].get("attached")
        second = App(new_page(ctx), server, None)
        two = second.open("")
        assert two["shared"] is True and two["load"]["attached"] is True and two["name"] == one["name"]
        seen = second.page.evaluate("window.bitwebApp.state.seen")
        assert not {"download", "upload", "compile"} & set(seen), seen
        assert "loaded by another tab" in second.page.inner_text("#model-info")
        assert second.page.evaluate("window.bitwebApp.state.engine.info.sharedBy") == 2
        own = App(new_page(ctx), server, None)
        three = own.open("?share=0")
        assert three["shared"] is False and not three["load"].get("attached") and three["sharedNote"] == "", three
        assert "this tab's own" in own.page.inner_text("#model-info")
        assert second.page.evaluate("window.bitwebApp.state.engine.info.sharedBy") == 2    # (not counted)
        assert first.page.errors == [] and second.page.errors == [] and own.page.errors == []
    finally:
        ctx.close()


def test_the_app_without_shared_worker_says_its_tab_has_its_own_engine(browser, server):
    """Where the browser has no SharedWorker (Chrome on Android), the app runs its own worker and
    its model panel says why."""
    ctx = browser.new_context()
    ctx.add_init_script("delete window.SharedWorker;")
    try:
        app = App(new_page(ctx), server, None)
        info = app.open("")
        assert info["shared"] is False and "no SharedWorker" in info["sharedNote"], info
        assert "no SharedWorker" in app.page.inner_text("#model-info")
        assert app.page.errors == []
    finally:
        ctx.close()
