"""One command for a real GPU (`npm run gpu-check`, tools/gpu_check.sh): what the adapters are, whether
every kernel case passes on them (natively and in headless Chromium), and how fast decode is.

Steps, each a subprocess with its own time limit (a hang is killed, with its whole process group,
and reported as one failure line; the steps after it still run):
  setup            tools/setup.sh --test (installs what is missing: .venv, node_modules, chromium, lavapipe)
  native-adapters  every adapter wgpu-py enumerates (info, features, limits) and the one bitweb picks
  browser-adapters the adapter headless Chromium gives under each flag set (FLAG_SETS), probed in turn
  native-kernels   the kernel cases (bitweb.ref.build_cases: every case on a hardware adapter, the
                   browser scope on a CPU one) on bitweb's native device, each compared with its
                   numpy mirror's expected bytes
  browser-kernels  web/dev/kernels.html (the browser-scope cases through Pyodide) under the best flag set
  make-models      generated models (make-model --preset P --format F; the Llama 3 vocabulary for 2b4t)
  bench-kernels    `bitweb bench kernels --quick --json`
  bench-decode     `bitweb bench decode MODEL --json` on each generated model and the real file (GPU time /
                   streaming read, prefill / decode)
  bench-load       `bitweb bench load MODEL --json` on each: ready (load + the first token), pipelines
  bench-floor      `bitweb bench floor MODEL --json` on each: wall per token against its GPU time, the
                   empty token's cost per dispatch
The summary goes to OUT/summary.json and OUT/summary.md (default OUT: test-results/gpu-check).
Exit status: 1 when a kernel case failed or a kernel step did not finish, 2 when another step
failed, else 0. The driver itself is stdlib only (it may run before .venv exists); the steps run in
.venv's Python (`--worker STEP`, a JSON file out).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import re
import signal
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))       # (tools/serving.py)
VENV_PY = ROOT / ".venv" / "bin" / "python"
REAL_FILE = ROOT / "build" / "assets" / "SmolLM2-135M-Instruct.Q4_1.gguf"     # bench decode on it when present
CHROMIUM = os.environ.get("BITWEB_CHROMIUM", "/usr/bin/chromium")
BASE_FLAGS = ["--enable-unsafe-webgpu", "--no-sandbox", "--disable-background-networking",
              "--disable-component-update"]
# Tried in this order; the first whose adapter is hardware runs the browser kernels, else "e2e".
FLAG_SETS = {
    "vulkan": BASE_FLAGS + ["--enable-features=Vulkan", "--use-angle=vulkan", "--use-vulkan=native"],
    "e2e": BASE_FLAGS + ["--disable-sync", "--no-first-run", "--disable-quic"],   # tests/e2e (SwiftShader here)
}
SOFTWARE = re.compile(r"swiftshader|llvmpipe|lavapipe|software|basic render|warp\b", re.I)
KERNEL_STEPS = ("native-kernels", "browser-kernels")
# what summary.md shows of an adapter (summary.json has every feature and limit)
KEY_FEATURES = re.compile(r"f16|subgroup|timestamp|matrix|cooperative|dot4|packed", re.I)
KEY_LIMITS = ("maxStorageBufferBindingSize", "maxBufferSize", "maxComputeWorkgroupStorageSize",
              "maxComputeInvocationsPerWorkgroup", "maxStorageBuffersPerShaderStage")
# name -> (time limit in seconds, what it does)
STEPS = {
    "setup": (900, "tools/setup.sh --test: .venv, node_modules, chromium + lavapipe (as root)"),
    "native-adapters": (90, "wgpu-py: every adapter, and bitweb's device"),
    "browser-adapters": (150, "headless Chromium: the adapter under each flag set"),
    "native-kernels": (300, "kernel cases on the native device vs the numpy mirrors"),
    "browser-kernels": (300, "web/dev/kernels.html in headless Chromium"),
    "make-models": (300, "generated models for bench decode"),
    "bench-kernels": (240, "bitweb bench kernels --quick"),
    "bench-decode": (240, "bitweb bench decode, per model"),
    "bench-load": (300, "bitweb bench load, per model (ready)"),
    "bench-floor": (240, "bitweb bench floor, per model (the per-token floor)"),
}
MODEL_BENCHES = {"bench-decode": "decode", "bench-load": "load", "bench-floor": "floor"}   # step -> bench


# ---------------------------------------------------------------------------- driver
def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="gpu_check", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "test-results" / "gpu-check"), help="summary folder")
    ap.add_argument("--scope", choices=("auto", "browser", "full"), default="auto",
                    help="native kernel cases: the quick browser scope or every case (auto: every case when "
                         "the native adapter is hardware, else the browser scope)")
    ap.add_argument("--presets", default="auto",
                    help="make-model presets for bench decode, comma-separated (tiny, small, 2b4t); "
                         "auto: small, plus 2b4t when the native adapter is hardware")
    ap.add_argument("--formats", default="i2_s,tq2_0", help="weight formats for bench decode")
    ap.add_argument("--tokens", type=int, default=16, help="bench decode: tokens to generate")
    ap.add_argument("--prompt-tokens", type=int, default=64, help="bench decode: prompt length")
    ap.add_argument("--skip", action="append", default=[], choices=list(STEPS), help="leave a step out")
    ap.add_argument("--time-scale", type=float, default=1.0, help="multiply every step's time limit")
    ap.add_argument("--dry-run", action="store_true", help="list the steps and their limits; run nothing")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", help=argparse.SUPPRESS)
    ap.add_argument("--worker-arg", default="{}", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.tokens < 1 or a.prompt_tokens < 1 or a.time_scale <= 0:
        ap.error("--tokens and --prompt-tokens must be >= 1, --time-scale > 0")
    return a


def plan(args) -> list[tuple[str, int, str]]:
    """[(step, time limit s, what)] in run order, without the skipped ones."""
    return [(name, int(limit * args.time_scale), what) for name, (limit, what) in STEPS.items()
            if name not in args.skip]


def say(msg: str) -> None:
    print(f"[gpu-check] {msg}", file=sys.stderr, flush=True)


def run_step(name: str, cmd: list, limit: float, env=None) -> dict:
    """Run cmd in its own process group; kill the group at `limit` s.
    Returns {ok, seconds, failure (when not ok), tail (of stderr + stdout), stdout}."""
    env = env or dict(os.environ, XDG_RUNTIME_DIR=os.environ.get("XDG_RUNTIME_DIR", "/tmp"), PYTHONUNBUFFERED="1")
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         errors="replace", start_new_session=True)
    try:
        out, err = p.communicate(timeout=limit)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        timed_out = True
    text = (err or "") + (out or "")
    r = {"ok": p.returncode == 0 and not timed_out, "seconds": round(time.monotonic() - t0, 1),
         "tail": text[-2000:], "stdout": out or ""}
    if timed_out:
        r["failure"] = f"{name}: timed out after {limit:g} s (killed); last output: {_last_line(text)}"
    elif p.returncode != 0:
        r["failure"] = f"{name}: exit status {p.returncode}; last output: {_last_line(err or out)}"
    return r


def _last_line(text) -> str:
    lines = [ln for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "(none)"


def worker(name: str, out: pathlib.Path, limit: float, arg: dict | None = None) -> dict:
    """Run one worker step in .venv's Python; its JSON (when it wrote one) under "result"."""
    out.unlink(missing_ok=True)
    r = run_step(name, [str(VENV_PY), str(pathlib.Path(__file__).resolve()), "--worker", name,
                        "--worker-out", str(out), "--worker-arg", json.dumps(arg or {})], limit)
    if out.exists():
        r["result"] = json.loads(out.read_text())
    elif r["ok"]:
        r["ok"] = False
        r["failure"] = f"{name}: wrote no result; last output: {_last_line(r['tail'])}"
    return r


def models_wanted(args, native: dict | None) -> list[tuple[str, str]]:
    presets = args.presets.split(",")
    if presets == ["auto"]:
        hw = bool(native) and not native.get("software", True)
        presets = ["small", "2b4t"] if hw else ["small"]
    return [(p, f) for p in presets for f in args.formats.split(",")]


def pick_flag_set(browser_adapters: dict) -> str:
    """The flag set for the browser kernels: the first with a hardware adapter, else "e2e", else the
    first that gave any adapter."""
    ok = [k for k, v in browser_adapters.items() if v.get("adapter")]
    hw = [k for k in ok if not v_software(browser_adapters[k]["adapter"])]
    if hw:
        return hw[0]
    if "e2e" in ok:
        return "e2e"
    return ok[0] if ok else "e2e"


def v_software(adapter: dict) -> bool:
    info = adapter.get("info", {})
    text = " ".join(str(info.get(k, "")) for k in ("vendor", "architecture", "device", "description"))
    return bool(adapter.get("isFallbackAdapter")) or bool(SOFTWARE.search(text))


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        return run_worker(args.worker, pathlib.Path(args.worker_out), json.loads(args.worker_arg))
    steps = plan(args)
    if args.dry_run:
        for name, limit, what in steps:
            print(f"{name:17} {limit:5d} s  {what}")
        print(f"{'(total limit)':17} {sum(s[1] for s in steps):5d} s  summary -> {args.out}/summary.json, summary.md")
        return 0
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    s = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "host": host_info(), "args": {
        k: v for k, v in vars(args).items() if not k.startswith("worker")}, "steps": {}}
    for name, limit, what in steps:
        say(f"{name} (limit {limit} s): {what}")
        if name == "setup":
            r = run_step(name, ["bash", "tools/setup.sh", "--test"], limit)
        elif name == "browser-kernels":
            chosen = pick_flag_set(s.get("browser_adapters", {}))
            r = worker(name, out / f"{name}.json", limit, {"flag_set": chosen})
            r["flag_set"] = chosen
        elif name == "make-models":
            native = s["steps"].get("native-adapters", {}).get("result", {}).get("bitweb")
            wanted = models_wanted(args, native)
            r = worker(name, out / f"{name}.json", limit, {"models": wanted, "dir": str(out / "models")})
        elif name in MODEL_BENCHES:
            models = list(s["steps"].get("make-models", {}).get("result", {}).get("models", []))
            if REAL_FILE.exists():           # the real file (tools/setup.sh --test): issue 26's bandwidth check
                models.append({"name": REAL_FILE.name, "path": str(REAL_FILE)})
            r = bench_models(name, models, limit, args)
        elif name == "bench-kernels":
            r = run_step(name, [str(VENV_PY), "-m", "bitweb", "bench", "kernels", "--quick", "--json"], limit)
            r["result"] = _json_tail(r["stdout"])
            if r["ok"] and r["result"] is None:
                r.update(ok=False, failure="bench-kernels: printed no JSON")
        elif name == "native-kernels":
            scope = args.scope
            if scope == "auto":
                native = s["steps"].get("native-adapters", {}).get("result", {}).get("bitweb")
                scope = "full" if native and not native.get("software", True) else "browser"
            r = worker(name, out / f"{name}.json", limit, {"scope": scope})
            r["scope"] = scope
        else:
            r = worker(name, out / f"{name}.json", limit)
        if name == "browser-adapters" and "result" in r:
            s["browser_adapters"] = r["result"]["sets"]
        r.pop("stdout", None)
        if r.get("ok"):
            r.pop("tail", None)
        s["steps"][name] = r
        say(f"{name}: {'ok' if r['ok'] else 'FAILED'} in {r['seconds']} s" + ("" if r["ok"] else f" -- {r['failure']}"))
    s["wall_s"] = round(time.monotonic() - t0, 1)
    code = write_summary(s, out)
    print((out / "summary.md").read_text(), flush=True)
    say(f"done in {s['wall_s']} s; summary: {out / 'summary.json'}, {out / 'summary.md'}; exit {code}")
    return code


def bench_models(name: str, models: list, limit: float, args) -> dict:
    """`bitweb bench <MODEL_BENCHES[name]> MODEL --json` on each model, each with its own time limit:
    {ok, seconds, runs: [{model, ok, seconds, result (the JSON), failure?}], failure?}."""
    if not models:
        return {"ok": False, "seconds": 0, "failure": f"{name}: no generated models (make-models failed or skipped)"}
    what = MODEL_BENCHES[name]
    extra = {"decode": ["--tokens", str(args.tokens), "--prompt-tokens", str(args.prompt_tokens)],
             "floor": ["--tokens", str(max(2, args.tokens))]}.get(what, [])
    r = {"ok": True, "seconds": 0, "runs": []}
    for m in models:
        one = run_step(f"{name} {m['name']}", [str(VENV_PY), "-m", "bitweb", "bench", what, m["path"], "--json"] + extra, limit)
        one["model"] = m["name"]
        one["result"] = _json_tail(one.pop("stdout"))
        if one["ok"]:
            one.pop("tail")
        if one["ok"] and one["result"] is None:
            one.update(ok=False, failure=f"{name} {m['name']}: printed no JSON")
        r["runs"].append(one)
        r["seconds"] = round(r["seconds"] + one["seconds"], 1)
        r["ok"] = r["ok"] and one["ok"]
    bad = [x["failure"] for x in r["runs"] if not x["ok"]]
    if bad:
        r["failure"] = "; ".join(bad)
    return r


def _json_tail(text: str):
    """The last line of text that parses as JSON (the bench commands print one JSON line), or None."""
    for ln in reversed((text or "").splitlines()):
        ln = ln.strip()
        if ln[:1] in "[{":
            try:
                return json.loads(ln)
            except ValueError:
                continue
    return None


def host_info() -> dict:
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    return {"platform": platform.platform(), "cpus": os.cpu_count(), "loadavg": load, "python": sys.version.split()[0]}


# ---------------------------------------------------------------------------- summary
def kernel_counts(step: dict) -> dict:
    res = (step or {}).get("result") or {}
    cases = res.get("results", [])
    bad = [c for c in cases if not c.get("ok")]
    return {"passed": len(cases) - len(bad), "failed": len(bad), "expected": res.get("expected", len(cases)),
            "failing": [{"name": c["name"], "why": c.get("error") or _worst(c)} for c in bad][:50],
            "adapter": res.get("adapter", "")}


def _worst(case: dict) -> str:
    return ", ".join(f"{c['buffer']}: {c['n_bad']}/{c['n']} bad, max abs err {c['max_abs_err']:.3g}"
                     for c in case.get("checks", []) if not c.get("ok"))


def write_summary(s: dict, out: pathlib.Path) -> int:
    """summary.json + summary.md from the run's record; returns the exit status."""
    st = s["steps"]
    s["kernels"] = {k.split("-")[0]: kernel_counts(st[k]) for k in KERNEL_STEPS if k in st}
    kern_bad = any(v["failed"] or v["passed"] < v["expected"] for v in s["kernels"].values()) or \
        any(not st[k]["ok"] for k in KERNEL_STEPS if k in st)
    other_bad = any(not r["ok"] for k, r in st.items() if k not in KERNEL_STEPS)
    s["exit_status"] = 1 if kern_bad else 2 if other_bad else 0
    s["failures"] = [r["failure"] for r in st.values() if not r["ok"] and r.get("failure")]
    s["failures"] += [f"{k} kernel case failed: {c['name']} ({c['why']})" for k, v in s["kernels"].items()
                      for c in v["failing"]]
    (out / "summary.json").write_text(json.dumps(s, indent=1, default=str) + "\n")
    (out / "summary.md").write_text(summary_md(s))
    return s["exit_status"]


def summary_md(s: dict) -> str:
    st = s["steps"]
    h = s["host"]
    lines = [f"# gpu-check {s['started']}", "",
             f"{h['platform']}, {h['cpus']} CPUs, load average {_load(h.get('loadavg'))}; wall time {s.get('wall_s')} s; "
             f"exit status {s['exit_status']}", "", "| step | result | s |", "|---|---|---:|"]
    for k, r in st.items():
        lines.append(f"| {k} | {'ok' if r['ok'] else 'FAILED: ' + _md(r.get('failure', ''))} | {r['seconds']} |")
    lines += ["", "## Adapters", "", "(features: those that matter here; summary.json has all, and every limit)", "",
              "| where | adapter | software | features | limits |", "|---|---|---|---|---|"]
    nat = (st.get("native-adapters") or {}).get("result") or {}
    for a in nat.get("adapters", []):
        lines.append(f"| wgpu-py | {_md(_name(a))} | {a.get('software')} | {_features(a)} | {_limits(a)} |")
    if nat.get("bitweb"):
        b = nat["bitweb"]
        lines.append(f"| bitweb native device | {_md(b.get('describe', ''))} | {b.get('software')} | {_features(b)} | |")
    for flags, v in (s.get("browser_adapters") or {}).items():
        a = v.get("adapter")
        if a:
            lines.append(f"| Chromium `{flags}` | {_md(_name(a))} | {v_software(a)} | {_features(a)} | {_limits(a)} |")
        else:
            lines.append(f"| Chromium `{flags}` | none: {_md(v.get('error', '?'))} | | | |")
    lines += ["", "## Kernel cases", "", "| where | passed | failed | adapter |", "|---|---:|---:|---|"]
    for k, v in s["kernels"].items():
        lines.append(f"| {k} | {v['passed']}/{v['expected']} | {v['failed']} | {_md(v['adapter'])} |")
    for k, v in s["kernels"].items():
        for c in v["failing"]:
            lines.append(f"- {k} FAILED {c['name']}: {_md(c['why'])}")
    runs = (st.get("bench-decode") or {}).get("runs", [])
    if runs:
        lines += ["", "## bench decode", "", "GPU / roofline: the decode plan's GPU time over a streaming read of the "
                  "bytes a token reads (1.0 = bandwidth-bound).", "",
                  "| model | prompt | prefill tok/s | decode ms/token | decode tok/s | prefill / decode | GPU / roofline |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for r in runs:
            d = r.get("result") or {}
            pod = d.get("prefill_over_decode")
            if pod is None and d.get("prefill_tok_s") and d.get("decode_tok_s"):
                pod = round(d["prefill_tok_s"] / d["decode_tok_s"], 2)
            lines.append(f"| {r['model']} | {d.get('prompt_tokens', '-')} | {d.get('prefill_tok_s', '-')} | "
                         f"{d.get('decode_ms_per_token', '-')} | {d.get('decode_tok_s', '-')} | {pod if pod is not None else '-'} | "
                         f"{d.get('gpu_vs_roofline', '-')} |")
    runs = (st.get("bench-load") or {}).get("runs", [])
    if runs:
        lines += ["", "## bench load (ready)", "", "ready: from Engine.load to the first token of a 7-token prompt.", "",
                  "| model | ready s | load s | upload s | compile s | pipelines | prefill kernels s |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for r in runs:
            d = r.get("result") or {}
            lines.append(f"| {r['model']} | " + " | ".join(str(d.get(k, "-")) for k in (
                "ready_s", "load_s", "upload_s", "compile_s", "pipelines", "prefill_kernels_s")) + " |")
    runs = (st.get("bench-floor") or {}).get("runs", [])
    if runs:
        lines += ["", "## bench floor (per-token floor)", "", "wall: median decode step (one step ahead / one at a time); "
                  "GPU: the decode plan in one pass; overhead share: (wall - GPU) / wall; empty token: as many 1-workgroup "
                  "dispatches, run as a step is.", "",
                  "| model | dispatches | wall ms | serial ms | GPU ms | overhead share | empty token ms | us per dispatch |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in runs:
            d = r.get("result") or {}
            lines.append(f"| {r['model']} | " + " | ".join(str(d.get(k, "-")) for k in (
                "dispatches_per_token", "wall_ms", "wall_serial_ms", "gpu_ms", "overhead_share", "floor_ms",
                "per_dispatch_us")) + " |")
    bk = (st.get("bench-kernels") or {}).get("result")
    rows = bk if isinstance(bk, list) else (bk or {}).get("results", []) if isinstance(bk, dict) else []
    if rows:
        lines += ["", "## bench kernels --quick", "", "| kernel | shape | ms | GB/s | P1 | variant |", "|---|---|---:|---:|---:|---|"]
        for x in rows:
            lines.append(f"| {x.get('kernel')} | {x.get('shape')} | {x.get('median_ms')} | {x.get('gbps', '-')} | "
                         f"{x.get('p1_vs_stream', '-')} | {_md(str(x.get('variant', '')))} |")
    if s["failures"]:
        lines += ["", "## Failures", ""] + [f"- {_md(f)}" for f in s["failures"]]
    return "\n".join(lines) + "\n"


def _features(a: dict) -> str:
    return _md(", ".join(f for f in a.get("features", []) if KEY_FEATURES.search(f)))


def _limits(a: dict) -> str:
    lim = {k.replace("_", "-"): v for k, v in (a.get("limits") or {}).items()}
    got = []
    for k in KEY_LIMITS:
        v = lim.get(k, lim.get(re.sub(r"([A-Z])", lambda m: "-" + m.group(1).lower(), k)))
        if v is not None:
            got.append(f"{k} {v}")
    return _md(", ".join(got))


def _name(a: dict) -> str:
    i = a.get("info", {})
    parts = [i.get("vendor"), i.get("device") or i.get("description") or i.get("architecture"),
             i.get("backend_type"), i.get("adapter_type")]
    return " ".join(str(p) for p in parts if p) or "?"


def _load(la) -> str:
    return " ".join(f"{x:.2f}" for x in la) if la else "?"


def _md(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


# ---------------------------------------------------------------------------- workers (.venv)
def run_worker(name: str, out: pathlib.Path, arg: dict) -> int:
    import asyncio
    fn = {"native-adapters": w_native_adapters, "browser-adapters": w_browser_adapters,
          "native-kernels": w_native_kernels, "browser-kernels": w_browser_kernels,
          "make-models": w_make_models}[name]
    r = fn(arg)
    if asyncio.iscoroutine(r):
        r = asyncio.run(r)
    out.write_text(json.dumps(r, default=str))
    return 0 if r.get("ok", True) else 1


def _plain(v):
    return v if isinstance(v, (int, float, str, bool)) or v is None else str(v)


async def w_native_adapters(arg) -> dict:
    import wgpu
    from bitweb import gpu
    adapters = []
    for a in wgpu.gpu.enumerate_adapters_sync():
        info = {k: _plain(v) for k, v in dict(a.info).items()}
        ad = {"info": info, "features": sorted(str(f) for f in a.features),
              "limits": {k: _plain(v) for k, v in dict(a.limits).items()}}
        ad["software"] = v_software(ad) or info.get("adapter_type", "").lower() == "cpu"
        adapters.append(ad)
        print("wgpu-py adapter:", _name(ad), file=sys.stderr)
    dev = await gpu.request_device("native")
    b = {"describe": dev.describe(), "info": dict(dev.info), "features": sorted(dev.features),
         "caps": dev.caps.summary(), "limits": dict(dev.limits)}
    b["software"] = v_software(b) or str(dev.info.get("adapter_type", "")).lower() == "cpu"
    print("bitweb native device:", b["describe"], file=sys.stderr)
    return {"ok": True, "adapters": adapters, "bitweb": b}


PROBE_JS = """async () => {
  if (!navigator.gpu) return { error: 'navigator.gpu is missing' };
  const a = await navigator.gpu.requestAdapter({ powerPreference: 'high-performance' });
  if (!a) return { error: 'requestAdapter() returned null' };
  const info = {};
  for (const k of ['vendor', 'architecture', 'device', 'description', 'subgroupMinSize', 'subgroupMaxSize', 'isFallbackAdapter'])
    if (a.info && a.info[k] !== undefined) info[k] = a.info[k];
  const limits = {};
  for (const k in a.limits) limits[k] = a.limits[k];
  let device = 'ok';
  try { const d = await a.requestDevice(); d.destroy(); } catch (e) { device = 'requestDevice failed: ' + e; }
  return { adapter: { info, features: [...a.features].sort(), limits,
                      isFallbackAdapter: !!(a.isFallbackAdapter || info.isFallbackAdapter), device } };
}"""
PROBE_URL = "http://127.0.0.1:9/__bitweb_gpu_check"     # answered by a route: a secure context, no server


def _launch(pw, flags, log: pathlib.Path):
    return pw.chromium.launch(executable_path=CHROMIUM, headless=True, timeout=60_000,
                              args=flags + ["--enable-logging", f"--log-file={log}", "--log-level=1"])


def w_browser_adapters(arg) -> dict:
    from playwright.sync_api import sync_playwright
    res = {}
    logs = ROOT / "test-results" / "gpu-check" / "chromium"
    logs.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        for name, flags in FLAG_SETS.items():
            t0 = time.monotonic()
            entry = {"flags": flags}
            try:
                b = _launch(pw, flags, logs / f"adapters-{name}.log")
                try:
                    ctx = b.new_context()
                    ctx.route(PROBE_URL, lambda r: r.fulfill(body="<!doctype html><title>probe</title>", content_type="text/html"))
                    pg = ctx.new_page()
                    pg.goto(PROBE_URL, timeout=30_000)
                    entry.update(pg.evaluate(PROBE_JS))
                    entry["chromium"] = b.version
                finally:
                    b.close()
            except Exception as e:
                entry["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
            entry["seconds"] = round(time.monotonic() - t0, 1)
            a = entry.get("adapter")
            print(f"chromium {name}: " + (f"{_name(a)} (fallback: {v_software(a)})" if a else entry.get("error", "?")),
                  file=sys.stderr)
            res[name] = entry
    return {"ok": any(v.get("adapter") for v in res.values()), "sets": res}


async def w_native_kernels(arg) -> dict:
    from bitweb import gpu, kernel_check
    from bitweb.ref import build_cases
    b = build_cases(arg.get("scope", "browser"))
    blob = bytes(b.blob)
    dev = await gpu.request_device("native")
    results = []
    for case in b.cases:
        try:
            r = await kernel_check.run_case(dev, case, blob)
        except Exception as e:
            r = {"name": case["name"], "ok": False, "error": f"{type(e).__name__}: {e}"}
        results.append(r)
        if not r["ok"]:
            print("FAILED", case["name"], r.get("error", ""), file=sys.stderr)
    n_ok = sum(r["ok"] for r in results)
    print(f"native kernels: {n_ok}/{len(results)} passed on {dev.describe()}", file=sys.stderr)
    return {"ok": n_ok == len(results), "adapter": dev.describe(), "expected": len(b.cases), "results": results}


def w_browser_kernels(arg) -> dict:
    from playwright.sync_api import sync_playwright
    from bitweb.ref import build_cases
    expected = len(build_cases("browser").cases)
    flags = FLAG_SETS[arg["flag_set"]]
    from serving import ServerError, served
    errors = []
    logs = ROOT / "test-results" / "gpu-check" / "chromium"
    logs.mkdir(parents=True, exist_ok=True)
    try:
        with served() as url, sync_playwright() as pw:
            b = _launch(pw, flags, logs / "kernels.log")
            try:
                pg = b.new_page()
                pg.on("pageerror", lambda e: errors.append(str(e)))
                pg.goto(url + "dev/kernels.html")
                pg.wait_for_function("window.kernelResults !== undefined", timeout=0)
                res = pg.evaluate("window.kernelResults")
            finally:
                b.close()
    except ServerError as e:
        return {"ok": False, "error": str(e), "expected": expected, "results": []}
    results = res.get("results", [])
    n_ok = sum(r["ok"] for r in results)
    print(f"browser kernels ({arg['flag_set']}): {n_ok}/{len(results)} passed on {res.get('adapter')}", file=sys.stderr)
    out = {"ok": not res.get("error") and n_ok == expected, "adapter": res.get("adapter", ""), "expected": expected,
           "results": results, "page_errors": errors}
    if res.get("error"):
        out["error"] = res["error"]
    return out


def w_make_models(arg) -> dict:
    d = pathlib.Path(arg["dir"])
    d.mkdir(parents=True, exist_ok=True)
    made = []
    for preset, fmt in arg["models"]:
        path = d / f"{preset}-{fmt}.gguf"
        if not path.exists():          # generated with a fixed seed: the same bytes every time
            t0 = time.monotonic()
            subprocess.run([sys.executable, "-m", "bitweb", "make-model", "--preset", preset, "--format", fmt,
                            "--vocab", "llama3" if preset == "2b4t" else "bytes", "--seed", "0", "--out", str(path) + ".tmp"], check=True, cwd=ROOT)
            os.replace(str(path) + ".tmp", path)
            print(f"made {path.name} in {time.monotonic() - t0:.1f} s", file=sys.stderr)
        made.append({"name": f"{preset} {fmt}", "path": str(path), "bytes": path.stat().st_size})
    return {"ok": True, "models": made}


if __name__ == "__main__":
    sys.exit(main())
