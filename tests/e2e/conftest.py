"""Playwright fixtures: the app's own server (tools/serve.mjs) and headless Debian
Chromium with WebGPU (SwiftShader). Missing browser -> fail in CI, skip elsewhere.

A dead or hung GPU process is retried once, loudly. SwiftShader's GPU process once stopped
answering mid-suite ("No answer from the worker" after 120 s) and every later test of that
browser failed. So when a browser test fails, a WebGPU liveness probe (a fresh page: adapter,
device, one compute dispatch, a readback; BITWEB_GPU_PROBE_S seconds, default 30) decides:
  - the probe passes and the failure has no hang signature: a real failure, reported as usual;
  - the probe fails (or the failure reads like a hang: HANG_SIGNATURE): the browser's processes
    are killed, every fixture is set up again (a new browser, server and models) and the test
    runs once more. The retry is reported in the run (a line at once), in the warnings, in the
    terminal summary ("e2e retries after a dead or hung GPU process") and in
    test-results/gpu-retries.json (BITWEB_GPU_RETRIES_JSON), with the evidence gathered: the probe's answer, the GPU
    process's state and threads (/proc), and the GPU lines of Chromium's log. A test that fails
    twice fails.
Each browser launch logs to test-results/chromium/chromium-<pid>-<n>.log (warnings and up).
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, need

CHROMIUM = os.environ.get("BITWEB_CHROMIUM", "/usr/bin/chromium")
CHROME_ARGS = ["--enable-unsafe-webgpu", "--no-sandbox", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
PROBE_S = float(os.environ.get("BITWEB_GPU_PROBE_S", "30"))
LOGS = ROOT / "test-results" / "chromium"
RETRIES_JSON = pathlib.Path(os.environ.get("BITWEB_GPU_RETRIES_JSON", ROOT / "test-results" / "gpu-retries.json"))
# failures that read like a dead / hung GPU process or browser, whatever the probe says afterwards
HANG_SIGNATURE = re.compile(r"No answer from the worker|Target crashed|GPU process|"
                            r"Browser has been closed|browser has disconnected|Target page, context or browser has been closed")

# One compute dispatch and a readback: what every app page needs from the GPU process.
PROBE_JS = """async () => {
  if (!navigator.gpu) return 'error: navigator.gpu is missing';
  const a = await navigator.gpu.requestAdapter();
  if (!a) return 'error: requestAdapter() returned null';
  const d = await a.requestDevice();
  const m = d.createShaderModule({ code: '@group(0) @binding(0) var<storage, read_write> v: array<u32>;' +
    '@compute @workgroup_size(4) fn main(@builtin(global_invocation_id) i: vec3u) { v[i.x] = v[i.x] * 2u + 1u; }' });
  const p = await d.createComputePipelineAsync({ layout: 'auto', compute: { module: m, entryPoint: 'main' } });
  const U = GPUBufferUsage;
  const b = d.createBuffer({ size: 16, usage: U.STORAGE | U.COPY_SRC | U.COPY_DST });
  const r = d.createBuffer({ size: 16, usage: U.MAP_READ | U.COPY_DST });
  d.queue.writeBuffer(b, 0, new Uint32Array([1, 2, 3, 4]));
  const e = d.createCommandEncoder();
  const pass = e.beginComputePass();
  pass.setPipeline(p);
  pass.setBindGroup(0, d.createBindGroup({ layout: p.getBindGroupLayout(0), entries: [{ binding: 0, resource: { buffer: b } }] }));
  pass.dispatchWorkgroups(1);
  pass.end();
  e.copyBufferToBuffer(b, 0, r, 0, 16);
  d.queue.submit([e.finish()]);
  await r.mapAsync(GPUMapMode.READ);
  const out = [...new Uint32Array(r.getMappedRange())].join(',');
  r.unmap();
  d.destroy();
  return out === '3,5,7,9' ? 'ok' : 'error: compute gave ' + out;
}"""
PROBE_URL = "http://127.0.0.1:9/__bitweb_gpu_probe"     # answered by a route: a secure context, no server


class Browser:
    """The session's Chromium, restartable. Attribute access goes to the current Playwright
    Browser (new_context, browser_type, new_browser_cdp_session ...)."""

    def __init__(self, playwright):
        self.playwright = playwright
        self.launches = 0
        self.current = None
        self.pids = {}

    def launch(self):
        self.launches += 1
        LOGS.mkdir(parents=True, exist_ok=True)
        self.log = LOGS / f"chromium-{os.getpid()}-{self.launches}.log"
        args = CHROME_ARGS + ["--enable-logging", f"--log-file={self.log}", "--log-level=1"]
        self.current = self.playwright.chromium.launch(executable_path=CHROMIUM, args=args, headless=True)
        self.pids = self.processes()

    def __getattr__(self, name):
        if self.current is None:
            raise AttributeError(name)
        return getattr(self.current, name)

    def processes(self) -> dict:
        """{process type: pid} from the browser (browser, GPU, renderer ...)."""
        s = self.current.new_browser_cdp_session()
        try:
            return {p["type"]: p["id"] for p in s.send("SystemInfo.getProcessInfo")["processInfo"]}
        finally:
            s.detach()

    def probe(self, timeout: float = PROBE_S) -> tuple[bool, str]:
        """WebGPU liveness: (ok, what happened) within `timeout` seconds."""
        t0 = time.monotonic()
        ctx = None
        try:
            ctx = self.current.new_context()
            ctx.route(PROBE_URL, lambda r: r.fulfill(body="<!doctype html><title>gpu probe</title>",
                                                     content_type="text/html"))
            pg = ctx.new_page()
            pg.goto(PROBE_URL, timeout=timeout * 1000)
            pg.evaluate("(f) => { window.__probe = undefined; (0, eval)('(' + f + ')')()"
                        ".then(v => window.__probe = v, e => window.__probe = 'error: ' + e); }", PROBE_JS)
            left = max(1.0, timeout - (time.monotonic() - t0))
            pg.wait_for_function("window.__probe !== undefined", timeout=left * 1000)
            answer = pg.evaluate("window.__probe")
            return answer == "ok", f"{answer} in {time.monotonic() - t0:.1f} s"
        except Exception as e:
            return False, f"no answer in {time.monotonic() - t0:.1f} s ({type(e).__name__}: {str(e).splitlines()[0][:200]})"
        finally:
            if ctx is not None:
                try:
                    ctx.close()
                except Exception:
                    pass

    def evidence(self) -> dict:
        """What the GPU process is doing (for the cause): its state and threads, the log's GPU lines."""
        out = {"launch": self.launches, "pids_at_launch": dict(self.pids), "log": str(self.log)}
        try:
            out["pids_now"] = self.processes()
        except Exception as e:
            out["pids_now"] = f"unavailable: {e}"
        gpu = out["pids_now"].get("GPU") if isinstance(out["pids_now"], dict) else None
        gpu = gpu or self.pids.get("GPU")
        if gpu:
            out["gpu_process"] = proc_info(gpu)
        try:
            lines = self.log.read_text(errors="replace").splitlines()
            out["log_gpu_lines"] = [ln[:300] for ln in lines
                                    if re.search(r"gpu|dawn|swiftshader|vulkan|webgpu|hung|crash|watchdog|lost", ln, re.I)
                                    and "dbus" not in ln][-30:]
        except OSError as e:
            out["log_gpu_lines"] = [f"unreadable: {e}"]
        return out

    def kill(self):
        """SIGKILL the browser and every process under it (a hung GPU process may ignore a close)."""
        root = self.pids.get("browser")
        if root:
            for pid in [*descendants(root), root]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        self.close()

    def close(self):
        b, self.current = self.current, None
        if b is not None:
            try:
                b.close()
            except Exception:
                pass


def descendants(pid: int) -> list[int]:
    children = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def proc_info(pid: int) -> dict:
    """State, CPU time and per-thread state / name / kernel wait channel of a process."""
    def read(path):
        try:
            with open(path) as f:
                return f.read().strip()
        except OSError:
            return None
    info = {"pid": pid}
    status = read(f"/proc/{pid}/status")
    if status is None:
        info["state"] = "gone"
        return info
    info["state"] = next((ln.split(":", 1)[1].strip() for ln in status.splitlines() if ln.startswith("State:")), "?")
    stat = read(f"/proc/{pid}/stat")
    if stat:
        f = stat.rsplit(")", 1)[1].split()
        info["cpu_s"] = (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    threads = {}
    for tid in sorted(os.listdir(f"/proc/{pid}/task")) if os.path.isdir(f"/proc/{pid}/task") else []:
        t = read(f"/proc/{pid}/task/{tid}/stat")
        if not t:
            continue
        name = t[t.index("(") + 1:t.rindex(")")]
        state = t.rsplit(")", 1)[1].split()[0]
        wchan = read(f"/proc/{pid}/task/{tid}/wchan") or ""
        threads.setdefault(f"{state} {wchan}", []).append(name)
    info["threads"] = {k: sorted(v) for k, v in threads.items()}
    return info


_BROWSER: Browser | None = None
RETRIES: list[dict] = []


@pytest.fixture(scope="session")
def server():
    """Base URL of tools/serve.mjs on a free port."""
    need(shutil.which("node") is not None, "node is not installed")
    subprocess.run([sys.executable, str(ROOT / "tools" / "build_web.py")], check=True, capture_output=True)
    env = dict(os.environ, PORT="0")
    proc = subprocess.Popen(["node", str(ROOT / "tools" / "serve.mjs")], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = proc.stdout.readline()
    m = re.search(r"http://[\d.]+:\d+/", line)
    if not m:
        proc.kill()
        pytest.fail(f"server did not start: {line!r}")
    yield m.group(0)
    proc.kill()
    proc.wait()


@pytest.fixture(scope="session")
def browser():
    """The session's Chromium (a Browser above): launched once, relaunched after a dead GPU process."""
    global _BROWSER
    need(os.path.exists(CHROMIUM), f"{CHROMIUM} not found (Debian: apt-get install chromium)")
    if _BROWSER is None:
        from playwright.sync_api import sync_playwright
        _BROWSER = Browser(sync_playwright().start())
    if _BROWSER.current is None:
        _BROWSER.launch()
    return _BROWSER


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    """After every fixture's teardown (the runner's own sessionfinish): module-scoped fixtures
    close their browser contexts before Playwright stops."""
    global _BROWSER
    if _BROWSER is not None:
        _BROWSER.close()
        try:
            _BROWSER.playwright.stop()
        except Exception:
            pass
        _BROWSER = None


SETTLE_JS = """async ([src, arg, ms, what]) => {
  const f = (0, eval)('(' + src + ')');
  let timer;
  const late = new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(
    `${what}: not settled after ${ms / 1000} s` + (globalThis.__settleNote ? ` (${JSON.stringify(globalThis.__settleNote)})` : ''))), ms); });
  try { return await Promise.race([f(arg), late]); } finally { clearTimeout(timer); }
}"""


def settle(target, fn: str, arg=None, seconds: float = 600, what: str = "the evaluated promise"):
    """target.evaluate(fn, arg) (a page or a worker; fn an async function's source) that fails
    after `seconds` with `what` in the message, and globalThis.__settleNote (what fn last said it
    was doing) when it set one: Playwright's evaluate waits for a promise forever."""
    return target.evaluate(SETTLE_JS, [fn, arg, seconds * 1000, what])


def new_page(ctx):
    """A page of context ctx; console errors and uncaught exceptions are collected in page.errors,
    the last 30 console lines of any type in page.console (said when a wait times out)."""
    import collections
    pg = ctx.new_page()
    pg.errors = []
    pg.console = collections.deque(maxlen=30)

    def on_console(m):
        pg.console.append(f"{m.type}: {m.text}")
        if m.type == "error":
            pg.errors.append(m.text)
    pg.on("console", on_console)
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    return pg


@pytest.fixture
def page(browser):
    """A fresh page in a fresh context (see new_page)."""
    ctx = browser.new_context()
    yield new_page(ctx)
    ctx.close()


PY_PAGE = "py-test.html"      # a blank page of the server's origin (a route), for Python run on the page
PY_RUN_JS = """async ([code, args]) => {
  window.__py ??= import('/py.mjs').then((m) => m.bootPython());
  const py = await window.__py;
  py.globals.set('args_json', args);
  return await py.runPythonAsync(code);
}"""


class PyPage:
    """A page with Pyodide booted from build/web/bitweb.zip on the page itself (web/py.mjs, as the
    app's worker boots it), shared by the session's tests that run bitweb's Python in the browser
    directly (test_chat_browser, test_engine_browser): the boot is paid once. run(code, **args) runs
    code in the page's Python main namespace (its globals stay between runs) with `args_json` =
    json.dumps(args) and returns the value of its last expression."""

    def __init__(self, browser, server):
        self.server = server
        self.context = browser.new_context()
        self.context.route(server + PY_PAGE, lambda route: route.fulfill(
            status=200, content_type="text/html", body="<!doctype html><title>bitweb python</title>"))
        self.page = new_page(self.context)
        self.page.goto(server + PY_PAGE)

    @property
    def errors(self):
        return self.page.errors

    def run(self, code: str, **args):
        return settle(self.page, PY_RUN_JS, [code, json.dumps(args)], seconds=600, what="Python on the page")


@pytest.fixture(scope="session")
def py_page(browser, server):
    """The session's PyPage (above)."""
    p = PyPage(browser, server)
    yield p
    try:
        p.context.close()
    except Exception:               # the browser was killed for a retry
        pass


# ------------------------------------------------------------------ one retry after a dead GPU

def gpu_verdict(report) -> tuple[str | None, dict]:
    """Why this failure looks like a dead / hung GPU process (None: it does not), and the evidence."""
    b = _BROWSER
    if b is None or b.current is None:
        return None, {}
    ok, probe = b.probe()
    sig = HANG_SIGNATURE.search(report.longreprtext or "")
    if ok and not sig:
        return None, {"probe": probe}
    evidence = {"probe": probe, **b.evidence()}
    why = (f"WebGPU liveness probe failed: {probe}" if not ok
           else f"the failure reads like a hung GPU process ({sig.group(0)!r}); probe: {probe}")
    return why, evidence


def _restart(item) -> str | None:
    """Kill the browser and tear down every fixture (the next setup makes a new browser, server
    and models). Errors of finalizers that used the killed browser are returned, not raised."""
    _BROWSER.kill()
    try:
        item.session._setupstate.teardown_exact(None)
    except BaseException as e:
        return f"{type(e).__name__}: {e}"[:500]
    return None


def _restart_time_limit(item):
    """The retry gets the test's whole time limit again (pytest-timeout's timer is set once around
    this hook: it may have fired, or be nearly spent, after the first attempt and the restart)."""
    hook = item.config.pluginmanager.hook
    if not item.config.pluginmanager.hasplugin("timeout"):
        return
    import pytest_timeout
    settings = pytest_timeout._get_item_settings(item)
    if settings.timeout and not settings.func_only:
        hook.pytest_timeout_cancel_timer(item=item)
        hook.pytest_timeout_set_timer(item=item, settings=settings)


def _say(config, text: str):
    tr = config.pluginmanager.get_plugin("terminalreporter")
    if tr is not None:
        tr.write_line(text, yellow=True, bold=True)
    else:                                       # pragma: no cover - always there in a normal run
        print(text, file=sys.stderr)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """Browser tests: run; on a failure with a dead / hung GPU process, restart and run once more."""
    if "browser" not in getattr(item, "fixturenames", ()):
        return None
    from _pytest.runner import runtestprotocol
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    reports = runtestprotocol(item, nextitem=nextitem, log=False)
    failed = next((r for r in reports if r.failed), None)
    if failed is not None:
        why, evidence = gpu_verdict(failed)
        if why is not None:
            record = {"test": item.nodeid, "why": why, "first_failure": (failed.longreprtext or "")[-3000:],
                      "evidence": evidence}
            _say(item.config, f"\nGPU RETRY {item.nodeid}: {why}; restarting the browser and running the test again")
            record["teardown_errors"] = _restart(item)
            _restart_time_limit(item)
            reports = runtestprotocol(item, nextitem=nextitem, log=False)
            again = next((r for r in reports if r.failed), None)
            record["retry"] = "failed again" if again else "passed on retry"
            if again is not None:               # the next test must not start with a dead browser
                still, _ = gpu_verdict(again)
                if still is not None:
                    record["retry"] += "; the browser was restarted again for the next test"
                    _restart(item)
            RETRIES.append(record)
            _say(item.config, f"GPU RETRY {item.nodeid}: {record['retry']}")
            item.user_properties.append(("gpu_retry", f"{why}; {record['retry']}"))
            for r in reports:
                if r.when == "call" or (r.failed and r.when == "setup"):
                    r.sections.append(("gpu retry", f"first attempt failed ({why}); this is the retry\n"
                                                    + json.dumps(evidence, indent=1)[:4000]))
            item.warn(pytest.PytestWarning(f"GPU RETRY: {item.nodeid} {record['retry']} after: {why}"))
            RETRIES_JSON.parent.mkdir(parents=True, exist_ok=True)
            RETRIES_JSON.write_text(json.dumps(RETRIES, indent=1))
    for r in reports:
        item.ihook.pytest_runtest_logreport(report=r)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def pytest_terminal_summary(terminalreporter):
    if not RETRIES:
        return
    tr = terminalreporter
    tr.section("e2e retries after a dead or hung GPU process", sep="=", yellow=True, bold=True)
    for r in RETRIES:
        tr.write_line(f"{r['test']}: {r['retry']}", yellow=True, bold=True)
        tr.write_line(f"  why: {r['why']}")
        ev = r["evidence"]
        if "gpu_process" in ev:
            tr.write_line(f"  GPU process: {json.dumps(ev['gpu_process'])[:1500]}")
        for ln in ev.get("log_gpu_lines", [])[-8:]:
            tr.write_line(f"  log: {ln}")
        lines = r["first_failure"].strip().splitlines()
        first = next((ln for ln in lines if ln.startswith("E ")), lines[-1] if lines else "(no text)")
        tr.write_line(f"  first failure: {first[:300]}")
    tr.write_line(f"details: {RETRIES_JSON}")
