"""Resumable, verified downloads, one download across tabs, and the catalogue's fit verdicts (issue 24),
in headless Chromium against a local server that imitates a model hub (tests/e2e/hub.py: a resolve
route answering 302 to a second origin that serves the bytes with CORS, Range, ETag).

Each fault ends with a byte-identical file in the cache (its SHA-256 read back from OPFS equals the
served file's) or a clear error and no file: a connection dropped mid-file (resumed with Range /
If-Range), 503 then success, a stall (timed out, resumed), an ETag that changes between tries
(started again), a wrong SHA-256 (deleted, error), a server without ranges (started again, said
so), a reload mid-download (resumed on the next visit), a tab closed mid-download (the other tab
resumes its part), two tabs loading one model at once (one download, both chat), a quota too small
(refused before any byte), a CDN without CORS behind the redirect (a cors error). Verdicts come from
the results (what the hub logged, what the cache holds), never from timing: the stall timeout is
made short by the download option stallMs, the retry waits by retryDelayMs.
"""
from __future__ import annotations

import hashlib
import json
import os

import pytest

from tests.e2e.conftest import new_page, settle
from tests.e2e.hub import Hub

MiB = 1 << 20
READY_MS = 240_000
FAST = {"retryDelayMs": 10, "stallMs": 1500}          # the download options of the fault tests
PAGE = "downloads-test.html"                          # a blank page of the app's origin (a route)


def blob(n: int, seed: int) -> bytes:
    import random
    return random.Random(seed).randbytes(n)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def hub():
    h = Hub()
    yield h
    h.close()


def blank_page(ctx, server):
    ctx.route(server + PAGE, lambda r: r.fulfill(status=200, content_type="text/html",
                                                 body="<!doctype html><title>bitweb downloads</title>"))
    pg = new_page(ctx)
    pg.goto(server + PAGE)
    pg.evaluate("import('/bitweb.mjs').then((m) => { window.bitweb = m; })")
    pg.wait_for_function("!!window.bitweb")
    return pg


@pytest.fixture(scope="module")
def ctx(browser):
    c = browser.new_context()
    yield c
    c.close()


@pytest.fixture(scope="module")
def page(ctx, server):
    return blank_page(ctx, server)


DOWNLOAD_JS = """async ([url, opts]) => {
  window.__notes = [];
  try {
    const r = await window.bitweb.cache.download(opts.source ? { url, ...opts.source } : url,
      { download: opts.download, onProgress: (p) => { if (p.note) window.__notes.push(p.note); } });
    return { ok: r, notes: window.__notes };
  } catch (e) {
    return { error: { kind: e.kind, message: e.message, reason: e.reason ?? null, cls: e.constructor.name }, notes: window.__notes };
  }
}"""

# The SHA-256 of a download's bytes as they are in OPFS (its part), and the cache's files.
OPFS_JS = """async (name) => {
  const d = await (await navigator.storage.getDirectory()).getDirectoryHandle('models', { create: true });
  const files = [];
  for await (const f of d.keys()) files.push(f);
  let digest = null, size = null;
  for (const f of files.filter((f) => f.startsWith(name + '.') && f.endsWith('.part.json'))) {
    const rec = JSON.parse(await (await (await d.getFileHandle(f)).getFile()).text());
    if (rec.name !== name) continue;
    const data = await (await (await d.getFileHandle(rec.file)).getFile()).arrayBuffer();
    size = data.byteLength;
    digest = [...new Uint8Array(await crypto.subtle.digest('SHA-256', data))].map((b) => b.toString(16).padStart(2, '0')).join('');
  }
  return { files, digest, size };
}"""


def download(page, url, **opts):
    return settle(page, DOWNLOAD_JS, [url, opts], what=f"the download of {url}")


BACKGROUND_JS = """([url, opts]) => { window.__dl = null; window.__bg = (async () => {
  const r = await (0, eval)('(' + %s + ')')([url, opts]); window.__dl = r; return r; })(); }""" % json.dumps(DOWNLOAD_JS)
HAVE_JS = """async ([name, n]) => (await window.bitweb.cache.downloads()).some((d) => d.name === name && d.have >= n)"""


def wait_have(page, name, n, timeout_s=60):
    """Wait until the page's cache lists a download of `name` with at least `n` bytes on disk (its
    record), asking every 100 ms (a state, not a time: the deadline only ends a test that hangs)."""
    import time
    deadline = time.monotonic() + timeout_s
    while not page.evaluate(HAVE_JS, [name, n]):
        assert time.monotonic() < deadline, f"no download of {name} with {n} bytes: {page.evaluate('window.bitweb.cache.downloads()')}"
        page.wait_for_timeout(100)


def download_dropped(page, hub, url, name, keep=2 * MiB, **opts):
    """Download `url` whose answer is held after some bytes (a drop@N fault); once the page's
    record says `keep` bytes are on disk, the hub drops the connection. The download's result."""
    page.evaluate(BACKGROUND_JS, [url, opts])
    wait_have(page, name, keep)
    hub.go.set()
    return page.evaluate("window.__bg")


def opfs(page, name):
    return page.evaluate(OPFS_JS, name)


def forget(page, name):
    page.evaluate("(n) => window.bitweb.cache.delete(n)", name)
    assert not [f for f in opfs(page, name)["files"] if f.startswith(name + ".")]


def ranges(hub, name):
    """The Range of each GET of `name` at the CDN, with its answer: [(range, status)]."""
    return [(r, st) for r, _, st in hub.gets(name)]


# ---------------------------------------------------------------- faults, each ending in the right file or a clear error

def test_dropped_connection_resumes_with_range_and_the_file_is_identical(page, hub):
    data = blob(4 * MiB + 123, 1)
    url = hub.put("drop.gguf", data)
    hub.plan("drop.gguf", f"drop@{3 * MiB + 777}")
    got = download_dropped(page, hub, url, "drop.gguf", source={"sha256": sha(data)}, download=FAST)
    assert "ok" in got, got
    assert got["ok"]["size"] == len(data) and got["ok"]["retries"] == 1, got
    first, second = hub.gets("drop.gguf")
    assert first == (None, None, 200)
    start = int(second[0].removeprefix("bytes=").rstrip("-"))
    assert 2 * MiB <= start <= 3 * MiB + 777 and second[1] == hub.files["drop.gguf"].etag and second[2] == 206, second
    assert any("resuming drop.gguf" in n for n in got["notes"]), got["notes"]
    assert opfs(page, "drop.gguf")["digest"] == sha(data)
    # through the hub's 302: the resolve route on one origin, the bytes on another
    assert [st for (o, m, n, _, _, st) in hub.log if o == "hub" and m == "GET" and n == "drop.gguf"] == [302, 302]
    forget(page, "drop.gguf")


def test_503_then_success(page, hub):
    data = blob(MiB + 5, 2)
    url = hub.put("busy.gguf", data)
    hub.plan("busy.gguf", "503")
    got = download(page, url, download=FAST)
    assert "ok" in got and got["ok"]["retries"] == 1, got
    assert ranges(hub, "busy.gguf") == [(None, 503), (None, 200)]
    assert opfs(page, "busy.gguf")["digest"] == sha(data)
    forget(page, "busy.gguf")


def test_a_stall_times_out_and_resumes(page, hub):
    data = blob(3 * MiB + 9, 3)
    url = hub.put("stall.gguf", data)
    hub.plan("stall.gguf", f"stall@{2 * MiB + 100}")
    got = download(page, url, source={"sha256": sha(data)}, download={**FAST, "stallMs": 4000})
    assert "ok" in got, got
    (r1, s1), (r2, s2) = ranges(hub, "stall.gguf")
    assert (r1, s1) == (None, 200) and s2 == 206 and r2.startswith("bytes=") and r2 != "bytes=0-", (r2, s2)
    assert any("no data for 4 s" in n for n in got["notes"]), got["notes"]
    assert opfs(page, "stall.gguf")["digest"] == sha(data)
    forget(page, "stall.gguf")


def test_a_file_that_changes_between_tries_starts_again(page, hub):
    old, new = blob(3 * MiB, 4), blob(3 * MiB + 1000, 5)
    url = hub.put("moved.gguf", old, etag='"v1"')
    hub.files["moved.gguf"].then = (new, '"v2"')
    hub.plan("moved.gguf", f"drop@{2 * MiB + 500}")
    got = download_dropped(page, hub, url, "moved.gguf", download=FAST)
    assert "ok" in got and got["ok"]["size"] == len(new), got
    (r1, s1), (r2, s2) = ranges(hub, "moved.gguf")
    assert s1 == 200 and r2.startswith("bytes=") and s2 == 200              # If-Range "v1" no longer matches
    assert hub.gets("moved.gguf")[1][1] == '"v1"'
    assert any("moved.gguf changed on the server" in n for n in got["notes"]), got["notes"]
    assert opfs(page, "moved.gguf")["digest"] == sha(new)
    forget(page, "moved.gguf")


def test_a_wrong_sha256_deletes_the_file_with_a_clear_error(page, hub):
    data = blob(MiB + 3, 6)
    url = hub.put("wrong.gguf", data)
    want = sha(b"another file")
    got = download(page, url, source={"sha256": want}, download=FAST)
    assert got.get("error", {}).get("kind") == "download" and got["error"]["reason"] == "sha256", got
    msg = got["error"]["message"]
    assert f"its SHA-256 is {sha(data)}" in msg and f"{want} was expected" in msg and "was deleted" in msg, msg
    assert not [f for f in opfs(page, "wrong.gguf")["files"] if f.startswith("wrong.gguf.")]
    assert page.evaluate("window.bitweb.cache.downloads()") == []


def nothing_cached(page, name):
    assert not [f for f in opfs(page, name)["files"] if f.startswith(name + ".")], opfs(page, name)
    assert [d for d in page.evaluate("window.bitweb.cache.downloads()") if d["name"] == name] == []
    assert [m for m in page.evaluate("window.bitweb.cache.list()") if m["name"] == name] == []


@pytest.mark.parametrize("status", [401, 403])
def test_a_gated_file_says_its_host_requires_signing_in(page, hub, status):
    name = f"gated{status}.gguf"
    url = hub.put(name, blob(MiB, 12), status=status)
    got = download(page, url, source={"sha256": sha(b"x")}, download=FAST)
    err = got.get("error", {})
    assert err.get("kind") == "download" and err["reason"] == "sign-in" and err["cls"] == "DownloadError", got
    assert err["message"].startswith("this model's host requires signing in: ") and f"HTTP {status}" in err["message"], err
    assert url in err["message"] and "Nothing was cached" in err["message"], err
    assert hub.gets(name, "hub") == [(None, None, status)] and hub.gets(name) == []     # asked once: no retry
    nothing_cached(page, name)


def test_a_missing_file_says_it_is_gone(page, hub):
    url = hub.url("nowhere.gguf")                                    # the hub has no such file: 404
    got = download(page, url, download=FAST)
    err = got.get("error", {})
    assert err.get("kind") == "download" and err["reason"] == "gone", got
    assert err["message"].startswith("the file is gone: ") and "HTTP 404" in err["message"] and url in err["message"], err
    assert hub.gets("nowhere.gguf", "hub") == [(None, None, 404)]
    nothing_cached(page, "nowhere.gguf")


def test_a_file_gone_while_resuming_leaves_nothing_cached(page, hub):
    """A part on disk whose file is then gone (404 at the resume) is deleted with the error."""
    data = blob(3 * MiB + 5, 13)
    url = hub.put("vanished.gguf", data)
    hub.plan("vanished.gguf", f"drop@{2 * MiB + 300}", "404")
    got = download_dropped(page, hub, url, "vanished.gguf", download=FAST)
    assert got.get("error", {}).get("reason") == "gone", got
    assert [st for _, st in ranges(hub, "vanished.gguf")] == [200, 404]
    nothing_cached(page, "vanished.gguf")


def test_a_server_without_ranges_starts_again_and_says_so(page, hub):
    data = blob(3 * MiB + 77, 7)
    url = hub.put("norange.gguf", data, ranges=False)
    hub.plan("norange.gguf", f"drop@{2 * MiB + 500}")
    got = download_dropped(page, hub, url, "norange.gguf", source={"sha256": sha(data)}, download=FAST)
    assert "ok" in got, got
    (r1, s1), (r2, s2) = ranges(hub, "norange.gguf")
    assert (r1, s1) == (None, 200) and r2.startswith("bytes=") and s2 == 200
    assert any("does not support resuming" in n for n in got["notes"]), got["notes"]
    assert opfs(page, "norange.gguf")["digest"] == sha(data)
    forget(page, "norange.gguf")


def small_quota(page, quota: int):
    """Make the library's worker see `quota` bytes of storage for this site (navigator.storage.estimate(),
    what the browser reports and the download checks); quota None restores the browser's figures."""
    page.evaluate("window.bitweb.cache.downloads()")                  # (the worker is up)
    worker = next(w for w in page.workers if w.url.endswith("/worker.mjs"))
    worker.evaluate("""(q) => {
      const sm = Object.getPrototypeOf(navigator.storage);
      if (q == null) { delete navigator.storage.estimate; return; }
      navigator.storage.estimate = async () => ({ ...(await sm.estimate.call(navigator.storage)), quota: q });
    }""", quota)


def test_too_little_storage_is_refused_before_any_byte(page, hub):
    data = blob(3 * MiB, 8)
    url = hub.put("big.gguf", data)
    small_quota(page, 2 * MiB)
    try:
        got = download(page, url, source={"size": len(data)}, download=FAST)
    finally:
        small_quota(page, None)
    assert got.get("error", {}).get("kind") == "storage", got
    msg = got["error"]["message"]
    assert "not enough browser storage to download big.gguf: it needs 3.0 MiB more" in msg and "Nothing was downloaded" in msg, msg
    assert hub.gets("big.gguf") == [] and hub.gets("big.gguf", "hub") == []
    assert not [f for f in opfs(page, "big.gguf")["files"] if f.startswith("big.gguf.")]


def test_a_cdn_without_cors_behind_the_redirect_is_a_cors_error(page, hub):
    url = hub.put("nocors.gguf", blob(1000, 9), cors=False)
    got = download(page, url, download=FAST)
    assert got.get("error", {}).get("kind") == "cors", got
    assert "Access-Control-Allow-Origin" in got["error"]["message"] and "redirects to" in got["error"]["message"]
    assert page.evaluate("window.bitweb.cache.downloads()") == []


# ---------------------------------------------------------------- a reload, a closed tab

START_JS = """([url, opts]) => { window.__dl = window.bitweb.cache.download(url, { download: opts })
  .then((r) => ({ ok: r }), (e) => ({ error: { kind: e.kind, message: e.message } })); }"""


def test_a_reload_mid_download_resumes_on_the_next_visit(ctx, server, hub):
    data = blob(5 * MiB + 11, 10)
    url = hub.put("reload.gguf", data)
    hub.plan("reload.gguf", f"stall@{3 * MiB}")
    pg = blank_page(ctx, server)
    try:
        pg.evaluate(START_JS, [url, {"retryDelayMs": 10}])          # the default stall timeout: it waits
        wait_have(pg, "reload.gguf", 2 * MiB)
        pg.reload()
        pg.evaluate("import('/bitweb.mjs').then((m) => { window.bitweb = m; })")
        pg.wait_for_function("!!window.bitweb")
        left = pg.evaluate("window.bitweb.cache.downloads()")
        assert [(d["name"], d["size"], d["complete"]) for d in left] == [("reload.gguf", len(data), False)], left
        have = left[0]["have"]
        assert 2 * MiB <= have <= 3 * MiB
        got = download(pg, url, download=FAST)
        assert "ok" in got and got["ok"]["resumedFrom"] == have, got
        assert ranges(hub, "reload.gguf")[-1] == (f"bytes={have}-", 206)
        assert opfs(pg, "reload.gguf")["digest"] == sha(data)
        forget(pg, "reload.gguf")
    finally:
        pg.close()


def test_a_tab_closed_mid_download_hands_its_part_over(ctx, server, hub):
    data = blob(5 * MiB + 13, 11)
    url = hub.put("handover.gguf", data)
    hub.plan("handover.gguf", f"stall@{3 * MiB}")
    first, second = blank_page(ctx, server), blank_page(ctx, server)
    try:
        first.evaluate(START_JS, [url, {"retryDelayMs": 10}])
        wait_have(first, "handover.gguf", 2 * MiB)
        second.evaluate("""(url) => { window.__labels = []; window.__dl = window.bitweb.cache.download(url,
            { download: { retryDelayMs: 10 }, onProgress: (p) => window.__labels.push(p.label) })
            .then((r) => ({ ok: r }), (e) => ({ error: { kind: e.kind, message: e.message } })); }""", url)
        second.wait_for_function("window.__labels.some((l) => /another tab/i.test(l || ''))", timeout=60_000)
        assert len(hub.gets("handover.gguf")) == 1             # the second tab waits: no request of its own
        first.close()                                          # the lock goes with the tab; its part stays
        got = second.evaluate("window.__dl")
        assert "ok" in got and got["ok"]["resumedFrom"] >= 2 * MiB, got
        assert ranges(hub, "handover.gguf")[-1] == (f"bytes={got['ok']['resumedFrom']}-", 206)
        assert opfs(second, "handover.gguf")["digest"] == sha(data)
        forget(second, "handover.gguf")
    finally:
        second.close()


# ---------------------------------------------------------------- whole loads: two tabs, the app's catalogue, hf: addresses

@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from tests.e2e.test_app import make_model
    return make_model(tmp_path_factory.mktemp("downloads") / "tiny.gguf", seed=1).read_bytes()


CHAT_JS = """async (url) => {
  window.__labels = [];
  const engine = await window.bitweb.load(url, { onProgress: (p) => window.__labels.push(p.label || '') });
  const r = await engine.chat.completions.create({ messages: [{ role: 'user', content: 'Hello there' }], max_tokens: 8, temperature: 0 });
  return { text: r.choices[0].message.content, tokens: r.usage.completion_tokens, name: engine.info.name,
           waited: window.__labels.some((l) => /another tab/i.test(l)) };
}"""


def test_two_tabs_loading_one_model_share_one_download_and_both_chat(browser, server, hub, tiny):
    url = hub.put("shared.gguf", tiny)
    ctx = browser.new_context()
    try:
        a, b = blank_page(ctx, server), blank_page(ctx, server)
        a.evaluate("(url) => { window.__r = null; window.__p = (" + CHAT_JS + ")(url).then((r) => { window.__r = r; return r; }); }", url)
        got_b = settle(b, CHAT_JS, url, what="tab b's download and reply")   # at once, in the other tab
        got_a = settle(a, "() => window.__p", what="tab a's download and reply")
        assert [g for _, g in ranges(hub, "shared.gguf")] == [200], hub.gets("shared.gguf")   # one download
        assert sorted([got_a["waited"], got_b["waited"]]) == [False, True], (got_a, got_b)     # the other tab waited
        assert got_a["name"] == got_b["name"] == "shared.gguf"
        assert got_a["tokens"] == got_b["tokens"] >= 1 and got_a["text"] == got_b["text"], (got_a, got_b)   # (greedy)
        assert a.evaluate("window.bitweb.cache.list().then((l) => l.map((m) => m.name))") == ["shared.gguf"]
        assert a.errors == [] and b.errors == []
    finally:
        ctx.close()


@pytest.fixture(scope="module")
def app(browser, server, tiny, tmp_path_factory):
    from tests.e2e.test_app import new_app_context
    path = tmp_path_factory.mktemp("downloads-app") / "tiny.gguf"
    path.write_bytes(tiny)
    a = new_app_context(browser, server, {"tiny": path})
    yield a
    a.context.close()


ROWS_JS = """() => [...document.querySelectorAll('#catalogue-list li')].map((li) => ({ id: li.dataset.id,
  verdict: li.dataset.verdict, text: li.querySelector('.fit').textContent, button: !!li.querySelector('button:not(.danger)') }))"""
LIMITS_JS = """async () => { const a = await navigator.gpu.requestAdapter(); return { maxBufferSize: a.limits.maxBufferSize,
  maxStorageBufferBindingSize: a.limits.maxStorageBufferBindingSize, maxStorageBuffersPerShaderStage: a.limits.maxStorageBuffersPerShaderStage }; }"""


def catalogue_rows(app, n):
    app.page.wait_for_function(f"document.querySelectorAll('#catalogue-list li[data-verdict]').length === {n}", timeout=READY_MS)
    return {r["id"]: r for r in app.page.evaluate(ROWS_JS)}


@pytest.mark.parametrize("cap", ["maxStorageBufferBindingSize:4194304", "memory:1610612736",
                                 "maxBufferSize:33554432,maxStorageBufferBindingSize:134217728"])
def test_the_catalogue_shows_the_engines_verdict_for_each_cap(app, hub, cap):
    from tests.test_catalogue import MODELS, engine_verdict
    app.page.goto(app.server + f"?model={hub.url('absent.gguf')}&cap={cap}", timeout=READY_MS)   # (no model to load)
    rows = catalogue_rows(app, len(MODELS))
    limits = app.page.evaluate(LIMITS_JS)
    memory = None
    for part in cap.split(","):
        k, v = part.split(":")
        if k == "memory":
            memory = int(v)
        else:
            limits[k] = min(limits[k], int(v))
    verdicts = set()
    for m in MODELS:
        want, row = engine_verdict(m, limits, memory), rows[m["id"]]
        assert row["verdict"] == want["verdict"], (cap, m["id"], want, row)
        if want["verdict"] == "no":
            assert row["text"].startswith(f"will not fit: {want['limit']}, ") and "short by" in row["text"], (cap, row)
            assert not row["button"], row                   # no download of a model that cannot fit
        elif want["verdict"] == "smaller":
            assert f"fits with a smaller context ({want['context']} of " in row["text"], (cap, row)
        else:
            assert f"fits (context {want['context']}," in row["text"], (cap, row)
        verdicts.add(want["verdict"])
    assert len(verdicts) >= 2, (cap, verdicts)                # each case tells models apart
    # beside the download button: what rests on one public source or none, as text
    notes = dict(app.page.evaluate("""() => [...document.querySelectorAll('#catalogue-list li')].map((li) =>
      [li.dataset.id, li.querySelector('.note.sources')?.textContent ?? null])"""))
    names = {"size": "its size", "sha256": "its SHA-256", "revision": "its revision", "shape": "its shapes"}
    for m in MODELS:
        weak = [f for f in names if m["sources"][f]["agree"] < 2]
        if not weak:
            assert notes[m["id"]] is None, (m["id"], notes[m["id"]])
        for f in weak:
            n = m["sources"][f]["agree"]
            assert f"{names[f]} rests on {['no', 'one'][n]} public source" in notes[m["id"]], (m["id"], notes[m["id"]])


def test_too_little_storage_shows_in_the_catalogue_and_load_refuses_before_downloading(app, hub):
    from tests.test_catalogue import MODELS
    hf = []
    app.context.route("https://huggingface.co/**", lambda r: (hf.append(r.request.url), r.abort()))
    try:
        app.page.goto(app.server + f"?model={hub.url('absent.gguf')}", timeout=READY_MS)
        app.page.evaluate("window.bitwebApp.bitweb.cache.downloads()")
        worker = next(w for w in app.page.workers if w.url.endswith("/worker.mjs"))
        worker.evaluate("""() => { const sm = Object.getPrototypeOf(navigator.storage);
          navigator.storage.estimate = async () => ({ ...(await sm.estimate.call(navigator.storage)), quota: 600 * 2 ** 20 }); }""")
        app.page.evaluate("window.bitwebApp.catalogue.refresh()")
        rows = catalogue_rows(app, len(MODELS))
        small = [m for m in MODELS if m["fileSize"] < 600 * MiB - 50 * MiB]
        big = [m for m in MODELS if m["fileSize"] > 600 * MiB]
        for m in big:
            assert rows[m["id"]]["text"].startswith("will not fit: browser storage, "), rows[m["id"]]
            assert not rows[m["id"]]["button"]
        assert any(rows[m["id"]]["verdict"] != "no" for m in small)
        entry = next(m for m in MODELS if m["id"] == "bitnet-b1.58-2b-4t")
        err = app.page.evaluate("""(url) => window.bitwebApp.bitweb.load(url).then(() => null, (e) => ({ kind: e.kind, message: e.message }))""",
                                entry["url"])
        assert err["kind"] == "storage" and "will not fit: browser storage" in err["message"], err
        assert hf == []                                           # not one request to the hub
    finally:
        app.context.unroute("https://huggingface.co/**")


def test_an_hf_address_loads_through_its_resolve_url(app, tiny):
    seen = []

    def serve(route):
        seen.append(route.request.url)
        route.fulfill(status=200, body=tiny, headers={"content-type": "application/octet-stream",
                                                      "access-control-allow-origin": "*"})
    app.context.route("https://huggingface.co/**", serve)
    try:
        app.page.goto(app.server + "?model=hf:someone/tiny-gguf/tiny-hf.gguf", timeout=READY_MS)
        info = app.wait_ready("tiny-hf.gguf")
        assert info["name"] == "tiny-hf.gguf"
        assert seen and set(seen) == {"https://huggingface.co/someone/tiny-gguf/resolve/main/tiny-hf.gguf"}, seen
        assert app.page.errors == []
    finally:
        app.context.unroute("https://huggingface.co/**")


# ---------------------------------------------------------------- the app: a host that refuses, a wrong file, a header that differs

SMOL = "smollm2-135m-instruct"


def catalogue_entry(i):
    from tests.test_catalogue import MODELS
    return next(m for m in MODELS if m["id"] == i)


def click_download(app, entry_id):
    from tests.test_catalogue import MODELS
    catalogue_rows(app, len(MODELS))
    app.page.click(f'#catalogue-list li[data-id="{entry_id}"] .row button:not(.danger)')


@pytest.mark.parametrize("case", ["401", "404", "sha256"])
def test_the_app_says_sign_in_gone_or_wrong_file_and_caches_nothing(app, hub, tiny, case):
    """A catalogue model's Download button against a host that wants signing in, has lost the file,
    or sends other bytes than the catalogue's SHA-256: the error says which, and nothing is cached."""
    m = catalogue_entry(SMOL)
    seen = []

    def serve(route):
        seen.append(route.request.url)
        cors = {"access-control-allow-origin": "*"}
        if case == "sha256":
            route.fulfill(status=200, body=tiny, headers={**cors, "content-type": "application/octet-stream"})
        else:
            route.fulfill(status=int(case), body="", headers=cors)
    app.context.route("https://huggingface.co/**", serve)
    try:
        app.page.goto(app.server + f"?model={hub.url('absent.gguf')}", timeout=READY_MS)   # (no model to load)
        want = {"401": "this model's host requires signing in: ", "404": "the file is gone: ",
                "sha256": f"its SHA-256 is {sha(tiny)}, {m['sha256']} was expected"}[case]
        app.wait_for("document.getElementById('error-text').textContent.includes('the file is gone')")  # the start's own error first
        click_download(app, SMOL)
        app.wait_for("([w, url]) => { const t = document.getElementById('error-text').textContent;"
                     " return t.includes(w) && t.includes(url); }", [want, m["url"]])
        assert app.page.evaluate("document.getElementById('error').dataset.kind") == "download"
        text = app.page.evaluate("document.getElementById('error-text').textContent")
        assert ("was deleted" if case == "sha256" else "Nothing was cached") in text, text
        assert seen and set(seen) == {m["url"]}, seen                                  # the pinned revision's URL
        assert app.page.evaluate("window.bitwebApp.bitweb.cache.downloads()") == []
        assert m["file"] not in app.cached()
    finally:
        app.context.unroute("https://huggingface.co/**")


def test_a_catalogue_model_loads_by_its_header_and_the_difference_is_logged(app, hub, tiny):
    """The catalogue's shapes for a URL are not the file's (its bytes given with their own SHA-256):
    the model loads as its header says (tiny: 2 layers, 256 wide), the console logs the difference
    and the model panel shows it."""
    m = catalogue_entry(SMOL)
    warned = []
    app.page.on("console", lambda msg: warned.append(msg.text) if msg.type == "warning" else None)
    app.context.route("https://huggingface.co/**", lambda r: r.fulfill(status=200, body=tiny, headers={
        "access-control-allow-origin": "*", "content-type": "application/octet-stream"}))
    try:
        app.page.goto(app.server + f"?model={hub.url('absent.gguf')}", timeout=READY_MS)   # (no model to load)
        app.wait_for("document.getElementById('error-text').textContent.includes('the file is gone')")
        app.page.evaluate("([url, sha256]) => { window.bitwebApp.catalogue.load({ url, sha256 }); }", [m["url"], sha(tiny)])
        info = app.wait_ready(m["file"])
        assert (info["layers"], info["width"]) == (2, 256), info
        diff = {d["fact"]: (d["catalogue"], d["header"]) for d in info["load"]["catalogueDiff"]}
        s = m["shape"]
        assert diff["n_layer"] == (s["n_layer"], 2) and diff["n_embd"] == (s["n_embd"], 256), diff
        assert diff["architecture"] == ("llama", "bitnet-b1.58") and diff["weights"] == ("Q8_0", "I2_S"), diff
        assert diff["n_vocab"] == (s["n_vocab"], info["vocabulary"]), diff
        assert any("loaded by its header, which differs from the catalogue" in w for w in warned), warned
        panel = app.page.evaluate("document.getElementById('model-info').textContent")
        assert "Not as the catalogue says" in panel and f"n_layer 2 (catalogue: {s['n_layer']})" in panel, panel
        # cached whole, it is not refused by the catalogue's verdict: its header decides (tiny fits 512 KiB bindings)
        cap = {"maxStorageBufferBindingSize": 512 << 10}
        verdict = app.page.evaluate("""([id, cap]) => { const b = window.bitwebApp.bitweb;
            return b.checkFit(b.models.find((e) => e.id === id), { capLimits: cap }); }""", [SMOL, cap])
        assert verdict["verdict"] == "no" and verdict["cached"] is True, verdict
        layers = settle(app.page, """async ([url, sha256, cap]) => {
            const e = await window.bitwebApp.bitweb.load({ url, sha256 }, { capLimits: cap, replace: 'always' });
            const n = e.info.layers; await e.unload(); return n; }""", [m["url"], sha(tiny), cap], what="loading the cached model")
        assert layers == 2
    finally:
        app.context.unroute("https://huggingface.co/**")
        app.page.evaluate("(n) => window.bitwebApp.bitweb.cache.delete(n)", m["file"])
