"""The chat app's page driver and the CLI oracle, for the app's browser tests (tests/e2e/test_app.py,
test_app_reliability.py, test_app_memory.py; check_stages also for test_bench_browser.py).

The CLI side: tiny generated models (make_model, make_first_token_models) and the replies of
`python -m bitweb generate ... --chat --json` on the native backend (cli, clis; native_chat for a
multi-turn chat). The page side: App drives web/index.html (window.bitwebApp: the app's state, the
library, the conversation store) and serves a test module's `models` under /test-models/; the `app`
fixture is one such page per test module (its own browser context).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
from urllib.parse import urlparse

import pytest

from tests.conftest import ROOT, make_last_token_first
from tests.e2e.conftest import new_page

PROMPT = "Hello there, who are you?"
READY_MS = 240_000          # Pyodide boot + model load on SwiftShader (2 shared cores)
REPLY_MS = 240_000

# ---------------------------------------------------------------- models and the CLI oracle

def make_model(out: pathlib.Path, seed: int, vocab_extra: list[str] | None = None, **meta) -> pathlib.Path:
    """A tiny random bitnet-b1.58 I2_S model with the bytes vocabulary (+ extra NORMAL tokens)."""
    from bitweb.authoring import makemodel, vocab
    args = argparse.Namespace(arch="bitnet-b1.58", format="i2_s", preset="tiny", layers=None,
                              vocab="bytes", seed=seed, scale_tensors="auto")
    voc = vocab.bytes_vocab()
    if vocab_extra:
        voc["tokenizer.ggml.tokens"] = list(voc["tokenizer.ggml.tokens"]) + vocab_extra
        voc["tokenizer.ggml.token_type"] = list(voc["tokenizer.ggml.token_type"]) + [1] * len(vocab_extra)
    voc.update(meta)
    makemodel.write_model(makemodel.spec_from_args(args), voc, out)
    return out


def cli_args(model, prompt=PROMPT, max_tokens=12, system=None, activations="a8", thinking=None,
             speculative=None) -> list[str]:
    """The arguments of `python -m bitweb generate MODEL --chat --temperature 0 --json` (native
    backend; thinking: "on" / "off", the template's thinking switch; speculative: "lookup")."""
    argv = ["generate", str(model), "--chat", "--prompt", prompt, "--temperature", "0", "--max-tokens", str(max_tokens),
            "--json", "--backend", "native", "--activations", activations]
    if system:
        argv += ["--system", system]
    if thinking:
        argv += ["--thinking", thinking]
    if speculative:
        argv += ["--speculative", speculative]
    return argv


# Runs each argv through the CLI's entry point (bitweb.commands.main, what `python -m bitweb` calls)
# in one Python process, one generate after another, each with its own engine as a separate run
# has; the native device (lavapipe) is made once and handed to every run, so its kernels compile
# once (a new device per run costs ~2 s of CPU each on lavapipe). Prints each run's JSON line, prefixed.
CLI_MANY = """
import contextlib, io, json, sys
from bitweb import commands, gpu
made = gpu.request_device
dev = []
async def one_device(*a, **k):
    if not dev:
        dev.append(await made(*a, **k))
    return dev[0]
gpu.request_device = one_device
for argv in json.loads(sys.argv[1]):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = commands.main(argv)
    if rc != 0:
        sys.exit(f"{argv}: exit {rc}")
    print("CLI_JSON " + [ln for ln in out.getvalue().splitlines() if ln.startswith("{")][-1], flush=True)
"""


def clis(*calls: dict) -> list[dict]:
    """cli(**call) for each call (same results), in one process (CLI_MANY): Python, the wgpu
    bindings and the device start once, not once per call (~5 s of CPU each on 2 cores)."""
    p = subprocess.run([sys.executable, "-c", CLI_MANY, json.dumps([cli_args(**c) for c in calls])],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    got = [json.loads(ln.removeprefix("CLI_JSON ")) for ln in p.stdout.splitlines() if ln.startswith("CLI_JSON ")]
    assert len(got) == len(calls), p.stdout
    return got


def cli(model, **kw) -> dict:
    """`python -m bitweb generate MODEL --chat --temperature 0 --json --backend native` (cli_args)."""
    p = subprocess.run([sys.executable, "-m", "bitweb", *cli_args(model, **kw)], capture_output=True, text=True,
                       timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    return json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("{")][-1])


def byte_level(text: str) -> str:
    """GPT-2 byte-level token text for `text` (what tokenizer.ggml.tokens holds)."""
    from bitweb.authoring.vocab import BYTE_TO_CHAR
    return "".join(BYTE_TO_CHAR[b] for b in text.encode())


def make_first_token_models(paths: dict, seed: int = 3) -> dict:
    """{path: text}: models whose greedy reply to PROMPT starts with `text`: the vocabulary gets one
    more NORMAL token whose text is `text`, made the first token (tests.conftest.make_last_token_first)
    of the reply the CLI gives. The CLI confirms the result (the oracle below)."""
    for path, text in paths.items():
        make_model(path, seed=seed, vocab_extra=[byte_level(text)])
    firsts = clis(*[dict(model=path, max_tokens=1) for path in paths])
    for path, res in zip(paths, firsts):
        make_last_token_first(path, res["ids"][0])
    return paths



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
        """Wait until a model is loaded (`name`: that model) or an error shows; the engine's info."""
        self.page.wait_for_function(
            "([name]) => { const s = window.bitwebApp?.state; const e = s?.engine;"
            "  return !document.getElementById('error').hidden || document.body.dataset.state === 'failed'"
            "    || (document.body.dataset.state === 'ready' && e && (!name || e.info.name === name)); }",
            arg=[name], timeout=READY_MS)
        state = self.page.evaluate("document.body.dataset.state")
        assert state == "ready", (f"state {state}: {self.error_text()}; progress seen: "
                                  f"{self.page.evaluate('window.bitwebApp?.state?.seen')}; console errors: {self.page.errors[-5:]}")
        info = self.info()
        assert name is None or info["name"] == name, (f"{name} did not load ({info['name']} is loaded): "
                                                      f"{self.error_text()}; progress seen: "
                                                      f"{self.page.evaluate('window.bitwebApp?.state?.seen')}")
        return info

    def wait_for(self, js, arg=None, timeout=READY_MS):
        """page.wait_for_function(js, arg); on a timeout, fail with what the app was doing: its state,
        progress and error, the Web Locks held or waited for, and the last console lines."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout
        try:
            self.page.wait_for_function(js, arg=arg, timeout=timeout)
        except PlaywrightTimeout:
            doing = self.page.evaluate("""async () => {
              const s = window.bitwebApp?.state, q = await navigator.locks?.query?.().catch(() => null);
              return { state: document.body.dataset.state, loading: s?.loading ? String(s.loading.name) : null,
                progress: document.getElementById('progress').hidden ? null : document.getElementById('progress-label').textContent,
                seen: s?.seen, error: document.getElementById('error').hidden ? null : document.getElementById('error-text').textContent,
                locks: q && { held: q.held.map((l) => l.name), pending: q.pending.map((l) => l.name) } }; }""")
            raise AssertionError(f"{js} still false after {timeout / 1000:.0f} s; the app: {doing}; "
                                 f"console: {list(getattr(self.page, 'console', []))}") from None

    def info(self):
        return self.page.evaluate("(() => { const e = window.bitwebApp?.state?.engine; return e ? {...e.info} : null; })()")

    def error_text(self):
        return self.page.evaluate("document.getElementById('error').hidden ? '' : document.getElementById('error').innerText")

    def set(self, **settings):
        for k, v in settings.items():
            k = {"repeat_penalty": "repetition_penalty"}.get(k, k)
            self.page.fill(f"#settings input[name={k}]", str(v))

    def record(self):
        """Record the chunks of the next replies' streams as the app takes them from the library's
        iterator (window.__chunks: [{content, finish}]), whatever the page painted of them: the
        loaded engine's chat.completions.create is wrapped."""
        self.page.evaluate("""() => {
          window.__chunks = [];
          const c = window.bitwebApp.state.engine.chat.completions;
          if (c.__recorded) return;
          const create = c.create;
          c.create = async (req) => {
            const s = await create(req);
            if (!req.stream) return s;
            const next = s.next.bind(s);
            s.next = async () => {
              const r = await next();
              if (!r.done) window.__chunks.push({ content: r.value.choices[0].delta.content ?? '',
                                                  finish: r.value.choices[0].finish_reason });
              return r;
            };
            return s;
          };
          c.__recorded = true;
        }""")

    def say(self, text):
        self.page.wait_for_function("document.body.dataset.state === 'ready'", timeout=READY_MS)
        n = self.page.locator(".msg.assistant").count()
        self.page.fill("#input", text)
        self.page.press("#input", "Enter")
        return n + 1

    def mark(self):
        """Mark the messages shown now as stale: reply() then waits for a message rendered after."""
        self.page.evaluate("document.querySelectorAll('.msg').forEach(e => { e.dataset.stale = '1'; })")

    def _settled(self, n):
        """Wait until the n-th assistant message (not one marked stale) is done, an error shows or
        the context-full card does; no error."""
        self.page.wait_for_function(
            f"(document.querySelectorAll('.msg.assistant[data-done]:not([data-stale])').length >= {n}"
            "  && document.body.dataset.state !== 'generating')"
            " || !document.getElementById('error').hidden || !!document.querySelector('.context-full')", timeout=REPLY_MS)
        assert not self.error_text(), self.error_text()

    def reply(self, n):
        """Wait for the n-th assistant message to finish (not one marked stale); its raw text,
        finish reason and the stats."""
        self._settled(n)
        el = self.page.locator(".msg.assistant").nth(n - 1)
        return {"text": el.evaluate("e => e.raw"), "finish": el.get_attribute("data-finish"),
                "stats": self.page.evaluate("Object.fromEntries([...document.querySelectorAll('#stats dd')].map(d => [d.dataset.stat, d.textContent]))")}

    def ask(self, text):
        """Send `text` and wait for its reply; when the context is full (the app's card), go on
        without the oldest turns. The reply and whether the context overflowed."""
        n = self.say(text)
        self._settled(n)
        full = self.page.locator(".context-full").count() > 0
        if full:
            assert self.page.locator(".msg.assistant").count() == n - 1          # no empty bubble
            self.page.click(".context-full button:text('Continue without the oldest turns')")
        return self.reply(n), full

    def set_context(self, value, context):
        """Set the app's context field (value "": the model's default) and wait until the model has
        reloaded with `context` positions; the engine's info."""
        self.page.fill("#max-context", str(value))
        self.page.dispatch_event("#max-context", "change")
        self.page.wait_for_function(f"window.bitwebApp.state.engine?.info.context === {int(context)}"
                                    " && document.body.dataset.state === 'ready'", timeout=READY_MS)
        return self.info()

    def last_reply(self):
        return self.page.evaluate("window.bitwebApp.state.lastReply")

    def messages(self):
        """The open conversation in the OpenAI shape (what Export writes)."""
        return self.page.evaluate("window.bitwebApp.store.exported(window.bitwebApp.state.conv).messages")

    def cached(self):
        return self.page.evaluate("window.bitwebApp.bitweb.cache.list().then(l => l.map(m => m.name))")


def new_app_context(browser, server, models, **kw):
    ctx = browser.new_context(viewport={"width": 1280, "height": 800}, **kw)
    # the app shares one engine across tabs (a SharedWorker, web/shared.mjs) where the browser has
    # SharedWorker; Playwright's routes and response events do not see a shared worker's fetches,
    # which these tests serve and watch, so here the app runs as on a browser without one (its own
    # worker: the fallback). tests/e2e/test_shared.py tests the app's shared engine.
    ctx.add_init_script("delete window.SharedWorker;")
    a = App(new_page(ctx), server, models)
    a.context = ctx
    a.serve_models(ctx)
    return a


@pytest.fixture(scope="module")
def app(browser, server, models):
    a = new_app_context(browser, server, models)
    yield a
    a.context.close()


def no_errors(app):
    """No console error and no uncaught exception, in the page or its worker, so far."""
    assert app.page.errors == [], app.page.errors


def axe(page, what):
    """axe-core (node_modules/axe-core, injected here) finds no violation on the page as it is."""
    page.add_script_tag(path=str(ROOT / "node_modules" / "axe-core" / "axe.min.js"))
    res = page.evaluate("axe.run(document, {resultTypes: ['violations']})")
    found = [(v["id"], v["impact"], [n["target"] for n in v["nodes"]][:3]) for v in res["violations"]]
    assert found == [], f"{what}: {found}"


def boot_snapshot_saved(page, timeout: float = READY_MS) -> int:
    """Bytes of the boot snapshot this page's worker stored (waits for it, `timeout` ms) or 0 when
    the worker booted from one (web/py.mjs)."""
    page.wait_for_function("window.bitwebApp.bitweb.stats().then((s) => { window.__boot = s.boot; })"
                           " && window.__boot && (window.__boot.from === 'snapshot' || window.__boot.snapshotSaved !== undefined)",
                           timeout=timeout, polling=200)
    boot = page.evaluate("window.__boot")
    assert boot["from"] == "snapshot" or boot["snapshotSaved"] > 0, boot
    return boot.get("snapshotSaved", 0)


def check_stages(st: dict, download: bool):
    """A load's stage times (engine.info.load.stages: [start, end] in page ms): each stage that must
    run is there, inside the whole load ("ready"), in the order the data needs: Python is up before
    the header is read, the header before the upload, the kernels and the upload before the plans.
    (Not timed: speed is for the benchmarks.)"""
    want = {"boot", "header", "device", "upload", "compile", "plans", "ready"} | ({"download"} if download else set())
    assert want <= set(st), st
    r0, r1 = st["ready"]
    assert all(r0 - 1 <= a <= b <= r1 + 1 for a, b in st.values()), st        # (times rounded to 0.1 ms)
    assert st["boot"][1] <= st["header"][0] + 1 and st["header"][1] <= st["upload"][0] + 1, st
    assert max(st["upload"][1], st["compile"][1]) <= st["plans"][0] + 1, st
    assert st["compile"][0] < st["upload"][1], st                              # compiling while uploading
    if download:
        assert st["download"][0] <= st["header"][0], st
    return st



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


# ---------------------------------------------------------------- memory

class WorkerHeap:
    """The used JS heap of the page's worker after a full GC, through the DevTools protocol."""

    def __init__(self, page):
        self.page = page
        self.events = []
        self.cdp = page.context.new_cdp_session(page)
        self.cdp.on("Target.attachedToTarget", lambda e: self.events.append(e))
        self.cdp.on("Target.receivedMessageFromTarget", lambda e: self.events.append(e))
        self.cdp.send("Target.setAutoAttach", {"autoAttach": True, "waitForDebuggerOnStart": False, "flatten": False})
        for _ in range(100):
            sid = [e["sessionId"] for e in self.events if e.get("targetInfo", {}).get("type") == "worker"]
            if sid:
                break
            page.wait_for_timeout(50)
        assert sid, "no worker to measure"
        self.sid, self.n = sid[0], 1000

    def call(self, method):
        self.n += 1
        self.cdp.send("Target.sendMessageToTarget",
                      {"sessionId": self.sid, "message": json.dumps({"id": self.n, "method": method})})
        for _ in range(600):
            for e in self.events:
                msg = json.loads(e.get("message", "{}"))
                if e.get("sessionId") == self.sid and msg.get("id") == self.n:
                    return msg["result"]
            self.page.wait_for_timeout(50)
        raise AssertionError(f"no answer to {method}")

    def used(self):
        self.call("HeapProfiler.collectGarbage")
        return self.call("Runtime.getHeapUsage")["usedSize"]


def page_heap(page) -> int:
    """The used JS heap of the page itself (not its worker) after a full GC, through the DevTools protocol."""
    cdp = page.context.new_cdp_session(page)
    try:
        cdp.send("HeapProfiler.collectGarbage")
        return cdp.send("Runtime.getHeapUsage")["usedSize"]
    finally:
        cdp.detach()
