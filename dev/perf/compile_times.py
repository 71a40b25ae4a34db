"""How long each kernel takes to compile in headless Chromium (SwiftShader), and why.

    .venv/bin/python dev/perf/compile_times.py [--model PATH] [--trials 2] [--variants]

Opens a blank page on a local server (WebGPU needs a secure context), asks for a device with the
features bitweb asks for, builds a stand-in `bitweb.gpu.Device` with the same caps and limits, and
lists the pipeline keys the engine compiles for the model (upload.compile_keys of
Engine._compile_steps: the decode plans' kernels, then the prefill plan's). For each key, the WGSL the browser device would send
(shaders.specialise) and its constants go to the page, which times `createShaderModule` +
`createComputePipelineAsync` one at a time (each awaited; a unique comment per trial keeps Dawn's
pipeline cache out of it). Printed per kernel: WGSL bytes, compile ms (best of the trials), the
CPU time Chromium's GPU process spent on it (best of the trials; /proc, 10 ms ticks: the
figure that matters when compiles share the cores with Pyodide's boot, and less noisy than the
wall time on a loaded machine), the key. --variants also times LM-head variants (lmhead.gemv tunes) of the model's head.
"""
from __future__ import annotations

import argparse
import functools
import http.server
import os
import pathlib
import sys
import threading

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "pyapp"))
sys.path.insert(0, str(ROOT))

from bitweb import shaders  # noqa: E402
from bitweb.engine import Engine  # noqa: E402
from bitweb.gguf import open_gguf  # noqa: E402
from bitweb.gpu import WANTED_FEATURES, WANTED_LIMITS, Caps, Device  # noqa: E402
from bitweb.kernels import lmhead  # noqa: E402
from bitweb.model import Model  # noqa: E402
from bitweb.upload import compile_keys  # noqa: E402

DEVICE_JS = """async ([features, limits]) => {
  const a = await navigator.gpu.requestAdapter({ powerPreference: 'high-performance' });
  const want = features.filter(f => a.features.has(f));
  const req = {};
  for (const n of limits) if (a.limits[n] !== undefined) req[n] = a.limits[n];
  window.dev = await a.requestDevice({ requiredFeatures: want, requiredLimits: req });
  const lim = {};
  for (const n of limits.concat(['minStorageBufferOffsetAlignment'])) lim[n] = window.dev.limits[n];
  const i = a.info;
  return { want, limits: lim, dot4: navigator.gpu.wgslLanguageFeatures.has('packed_4x8_integer_dot_product'),
           info: { vendor: i.vendor, architecture: i.architecture, device: i.device, description: i.description } };
}"""

# one pipeline, timed: [module ms, pipeline ms]
COMPILE_JS = """async ([code, entry, constants]) => {
  const t0 = performance.now();
  const m = window.dev.createShaderModule({ code });
  const t1 = performance.now();
  const desc = { layout: 'auto', compute: { module: m, entryPoint: entry } };
  if (Object.keys(constants).length) desc.compute.constants = constants;
  try { await window.dev.createComputePipelineAsync(desc); }
  catch (e) { const info = await m.getCompilationInfo(); return { error: String(e) + info.messages.map(x => x.message).join('; ') }; }
  return { module: t1 - t0, pipeline: performance.now() - t1 };
}"""


# every pipeline of a list at once (all in flight, as the engine's load does): wall ms
TOGETHER_JS = """async (items) => {
  const t0 = performance.now();
  await Promise.all(items.map(([code, entry, constants]) => {
    const desc = { layout: 'auto', compute: { module: window.dev.createShaderModule({ code }), entryPoint: entry } };
    if (Object.keys(constants).length) desc.compute.constants = constants;
    return window.dev.createComputePipelineAsync(desc);
  }));
  return performance.now() - t0;
}"""


# compile one pipeline, then time `runs` submits of `reps` dispatches each over zero-filled buffers
# (binding i: sizes[i] bytes; inits: {binding: u32 values} written first, e.g. a run-time shape; the
# timing does not depend on the other values): [compile ms, ms per dispatch]
SPEED_JS = """async ([code, entry, constants, sizes, inits, wg, reps, runs]) => {
  const d = window.dev, U = GPUBufferUsage;
  const t0 = performance.now();
  const p = await d.createComputePipelineAsync({ layout: 'auto', compute: { module: d.createShaderModule({ code }), entryPoint: entry, constants } });
  const compile = performance.now() - t0;
  const bufs = sizes.map(n => d.createBuffer({ size: Math.max(16, Math.ceil(n / 16) * 16), usage: U.STORAGE | U.COPY_DST }));
  for (const [i, v] of Object.entries(inits)) d.queue.writeBuffer(bufs[+i], 0, new Uint32Array(v));
  const bg = d.createBindGroup({ layout: p.getBindGroupLayout(0), entries: bufs.map((b, i) => ({ binding: i, resource: { buffer: b } })) });
  const run = async () => {
    const e = d.createCommandEncoder(), pass = e.beginComputePass();
    pass.setPipeline(p); pass.setBindGroup(0, bg);
    for (let i = 0; i < reps; i++) pass.dispatchWorkgroups(wg[0], wg[1], wg[2]);
    pass.end(); d.queue.submit([e.finish()]); await d.queue.onSubmittedWorkDone();
  };
  await run();
  const ts = [];
  for (let r = 0; r < runs; r++) { const a = performance.now(); await run(); ts.push((performance.now() - a) / reps); }
  ts.sort((a, b) => a - b);
  bufs.forEach(b => b.destroy());
  return [compile, ts[Math.floor(ts.length / 2)]];
}"""


def bitlinear_speed(page, dev, fmt: str, linears, tunes, trials: int):
    """Compile time and ms per dispatch of bitlinear (A8, norm) for each linear (kind, n_in, rows,
    residual) and each tune, the tunes taking turns in every trial (medians of 5 runs of 20
    dispatches; best trial). A step's data buffers (the run-time shape) are written first."""
    import struct
    from bitweb import formats
    from bitweb.kernels import bitlinear
    f = formats.by_name(fmt)
    out = {}
    for t in range(trials):
        for li, (kind, n_in, rows, residual) in enumerate(linears):
            for ti, tune in enumerate(tunes):
                if kind == "gate_up":
                    st = bitlinear.gate_up(fmt, n_in, rows[0], a8=True, dev=dev, **tune)
                else:
                    st = bitlinear.gemv(fmt, n_in, rows, a8=True, norm=True, residual=residual, dev=dev, **tune)
                parts = list(rows) * (2 if kind == "gate_up" else 1)
                wbytes = [r * n_in // f.block_size * f.type_size for r in parts]
                sizes = {"x": 4 * n_in, "norm": 4 * n_in, "mult": 16, "y": 4 * sum(rows), "shape": 32}
                sizes.update({n: wbytes[min(i, len(wbytes) - 1)] for i, n in enumerate(("w0", "w1", "w2"))})
                sizes.update(gate=wbytes[0], up=wbytes[-1])
                inits = {str(i): list(struct.unpack(f"<{len(st.data[n]) // 4}I", st.data[n]))
                         for i, n in enumerate(st.bind) if n in st.data}
                code = shaders.specialise(shaders.source(st.shader), dev, dict(st.defines), st.shader)
                c, ms = page.evaluate(SPEED_JS, [code + f"\n// trial {t}", st.entry, st.constants,
                                                 [sizes[b] for b in st.bind], inits, list(st.workgroups), 20, 5])
                k = (li, ti)
                out[k] = (min(out.get(k, (c, ms))[0], c), min(out.get(k, (c, ms))[1], ms))
    print(f"| {fmt} A8 norm | tune | compile ms | ms per dispatch |")
    print("|---|---|---:|---:|")
    for (li, ti), (c, ms) in out.items():
        kind, n_in, rows, residual = linears[li]
        name = f"{kind} {n_in}x{'+'.join(map(str, rows))}{' res' if residual else ''}"
        print(f"| {name} | {tunes[ti]} | {c:.0f} | {ms:.3f} |")
    for ti, tune in enumerate(tunes):
        print(f"{tune}: {sum(ms for (_, t), (c, ms) in out.items() if t == ti):.3f} ms per pass over the linears")


def model_linears(path: str) -> list:
    """The decode linears of a model as (kind, n_in, rows, residual): qkv, o, gate_up, down."""
    cfg = Model.from_gguf(open_gguf(path)).cfg
    return [("gemv", cfg.n_embd, (cfg.q_dim, cfg.kv_dim, cfg.kv_dim), False), ("gemv", cfg.q_dim, (cfg.n_embd,), True),
            ("gate_up", cfg.n_embd, (cfg.n_ff,), False), ("gemv", cfg.n_ff, (cfg.n_embd,), True)]


def _children() -> dict:
    kids = {}
    for d in pathlib.Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d.name))
    return kids


def gpu_process() -> int | None:
    """The pid of the GPU process of the Chromium this script started (a descendant of it)."""
    kids, todo = _children(), [os.getpid()]
    while todo:
        pid = todo.pop()
        try:
            if b"--type=gpu-process" in pathlib.Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except OSError:
            pass
        todo += kids.get(pid, [])
    return None


def cpu_ms(pid) -> float:
    """User + system CPU time of a process so far (all its threads), ms."""
    if pid is None:
        return float("nan")
    f = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def serve() -> str:
    d = ROOT / "build" / "compile_times"
    d.mkdir(parents=True, exist_ok=True)
    (d / "index.html").write_text("<!doctype html><title>compile times</title>")
    h = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(d))
    h.log_message = lambda *a: None
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), h)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{srv.server_port}/index.html"


def stand_in(d: dict) -> Device:
    """A Device with the page's caps, limits and info (only for keys and WGSL: it runs nothing)."""
    caps = Caps(subgroups="subgroups" in d["want"], shader_f16="shader-f16" in d["want"], dot4=d["dot4"])
    return Device(backend="browser", info=d["info"], limits={k: int(v) for k, v in d["limits"].items()}, caps=caps)


def engine_keys(dev: Device, path: str) -> tuple:
    gf = open_gguf(path)
    model = Model.from_gguf(gf)
    eng = Engine(dev, model, "a8", 4096)
    eng.prefill_rows = 64
    return eng, compile_keys(eng._compile_steps())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=str(ROOT / "build" / "web" / "bench" / "bitweb-chat-tq2_0-bitnet.gguf"),
                    help="default: the ready-time benchmark's file (tests/e2e/test_bench_browser.py writes it)")
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--prefill", action="store_true", help="time the prefill plan's kernels too")
    ap.add_argument("--variants", action="store_true", help="time LM-head variants of the model's head")
    ap.add_argument("--together", action="store_true",
                    help="also time the decode kernels all in flight at once against one at a time, taking turns")
    ap.add_argument("--only", default="", help="only keys whose shader name contains this")
    ap.add_argument("--before", default="", metavar="DIR",
                    help="also time the decode kernels of another checkout (its own code lists them and "
                         "writes their WGSL), taking turns with this tree's in every trial")
    ap.add_argument("--src", action="append", default=[], metavar="NAME=PATH",
                    help="also time the keys of shader NAME with this WGSL file instead (repeatable)")
    ap.add_argument("--set", action="append", default=[], metavar="NAME:C=V[,C=V]",
                    help="also time the keys of shader NAME with these constants changed (repeatable)")
    ap.add_argument("--bitlinear-speed", default="", metavar="N_IN:ROWS,...|model",
                    help="instead: compile time and dispatch time of bitlinear gemv at these shapes (model: the "
                         "model's decode linears) for each --tune")
    ap.add_argument("--tune", action="append", default=[], metavar="K=V[,K=V]",
                    help="with --bitlinear-speed: a bitlinear tune (repeatable; default rb=4, rb=2, rb=1)")
    a = ap.parse_args()
    from playwright.sync_api import sync_playwright
    sys.path.insert(0, str(ROOT / "tests"))
    from tests.e2e.conftest import CHROME_ARGS, CHROMIUM
    with sync_playwright() as p:
        br = p.chromium.launch(executable_path=CHROMIUM, args=CHROME_ARGS, headless=True)
        page = br.new_page()
        page.goto(serve())
        d = page.evaluate(DEVICE_JS, [list(WANTED_FEATURES), list(WANTED_LIMITS)])
        dev = stand_in(d)
        print(f"adapter: {d['info']}; features {d['want']}; dot4 {d['dot4']}")
        if a.bitlinear_speed:
            if a.bitlinear_speed == "model":
                linears = model_linears(a.model)
            else:
                linears = [("gemv", int(n), (int(r),), False) for n, r in (sh.split(":") for sh in a.bitlinear_speed.split(","))]
            tunes = [{k: int(v) for k, v in (kv.split("=") for kv in t.split(","))} for t in a.tune] or \
                [{"rb": 4}, {"rb": 2}, {"rb": 1}]
            bitlinear_speed(page, dev, "TQ2_0", linears, tunes, a.trials)
            br.close()
            return
        eng, (first, later) = engine_keys(dev, a.model)
        keys = [("decode", k) for k in dict.fromkeys(dev.pipeline_key(*k) for k in first)]
        if a.prefill:
            keys += [("prefill", k) for k in dict.fromkeys(dev.pipeline_key(*k) for k in later)]
        if a.variants:
            keys += [("variant", k) for k in head_variants(eng, dev)]
        keys = [(w, k, None) for w, k in keys if a.only in k[0]]
        if a.before:
            keys += [("before", k, code) for k, code in other_tree_keys(a.before, d, a.model) if a.only in k[0]]
        for spec in a.set:
            name, _, kv = spec.partition(":")
            upd = {k: float(v) if "." in v else int(v) for k, v in (p.split("=") for p in kv.split(","))}
            keys += [(f"set {kv}", (k[0], k[1], tuple(sorted(dict(k[2], **upd).items())), k[3]), None)
                     for w, k, _ in list(keys) if k[0] == name and w == "decode"]
        for spec in a.src:
            name, path = spec.split("=", 1)
            keys += [(path, k, pathlib.Path(path).read_text()) for w, k, _ in list(keys) if k[0] == name and w != "variant"]
        rows = []
        gpu = gpu_process()
        if a.together:
            together(page, gpu, dev, [k for w, k, _ in keys if w == "decode"], a.trials)
        load0 = os.getloadavg()[0]
        for trial in range(a.trials):
            for i, (where, (shader, entry, consts, defs), text) in enumerate(keys):
                code = text if where == "before" else shaders.specialise(text or shaders.source(shader), dev, dict(defs), shader)
                c0 = cpu_ms(gpu)
                r = page.evaluate(COMPILE_JS, [code + f"\n// trial {trial} {where}", entry, dict(consts)])
                cpu = cpu_ms(gpu) - c0
                if "error" in r:
                    raise SystemExit(f"{shader}:{entry} {dict(defs)}: {r['error']}")
                if trial == 0:
                    rows.append([where, shader, entry, len(code), r["module"], r["pipeline"], cpu, consts, defs])
                else:
                    rows[i][4:7] = min(rows[i][4], r["module"]), min(rows[i][5], r["pipeline"]), min(rows[i][6], cpu)
        br.close()
    print(f"load average {load0:.1f} before, {os.getloadavg()[0]:.1f} after; best of {a.trials} trials, one at a time")
    print("| plan | kernel | WGSL bytes | module ms | pipeline ms | GPU process CPU ms | constants | defines |")
    print("|---|---|---:|---:|---:|---:|---|---|")
    for where, shader, entry, n, m, pl, cpu, consts, defs in rows:
        on = ",".join(k for k, v in defs if v)
        print(f"| {where} | {shader}:{entry} | {n} | {m:.0f} | {pl:.0f} | {cpu:.0f} | {dict(consts)} | {on} |")
    for where in dict.fromkeys(r[0] for r in rows):
        print(f"{where}: {sum(r[5] for r in rows if r[0] == where):.0f} ms in all, "
              f"{sum(r[6] for r in rows if r[0] == where):.0f} ms of CPU")


def together(page, gpu, dev, keys, trials):
    """The decode kernels all in flight at once, then one at a time, taking turns: wall and GPU-process CPU."""
    res = {"together": [], "one at a time": []}
    for t in range(trials):
        for how in res:
            items = [[shaders.specialise(shaders.source(s), dev, dict(d), s) + f"\n// {how} {t}", e, dict(c)]
                     for s, e, c, d in keys]
            c0 = cpu_ms(gpu)
            if how == "together":
                ms = page.evaluate(TOGETHER_JS, items)
            else:
                ms = sum(page.evaluate(TOGETHER_JS, [it]) for it in items)
            res[how].append((ms, cpu_ms(gpu) - c0))
    for how, v in res.items():
        print(f"{how}: {len(keys)} kernels, wall ms {[round(x) for x, _ in v]}, GPU process CPU ms {[round(y) for _, y in v]}")


OTHER_TREE = """
import json, sys
sys.path[:0] = [sys.argv[1] + "/pyapp", sys.argv[1] + "/dev/perf", sys.argv[1]]
import compile_times as ct
from bitweb import shaders
d = json.loads(sys.stdin.read())
dev = ct.stand_in(d)
eng, (first, later) = ct.engine_keys(dev, sys.argv[2])
out = []
for k in dict.fromkeys(dev.pipeline_key(*k) for k in first):
    out.append([[k[0], k[1], list(k[2]), list(k[3])], shaders.specialise(shaders.source(k[0]), dev, dict(k[3]), k[0])])
print(json.dumps(out, default=lambda o: o.type_id))   # a define FORMAT: its type id
"""


def other_tree_keys(root: str, page_device: dict, model: str) -> list:
    """The decode plans' pipeline keys of the checkout at root, with their WGSL, as that tree's own code
    lists and specialises them for this page's device (a subprocess: its bitweb is not ours)."""
    import json
    import subprocess
    r = subprocess.run([sys.executable, "-c", OTHER_TREE, str(pathlib.Path(root).resolve()), model],
                       input=json.dumps(page_device), capture_output=True, text=True, check=True)
    return [((s, e, tuple(tuple(kv) for kv in c), tuple(tuple(kv) for kv in d)), code)
            for (s, e, c, d), code in json.loads(r.stdout)]


def head_variants(eng, dev) -> list:
    """The model's LM head with other tunes (rows per workgroup, rows per lane group, lanes,
    subgroups off), one shard."""
    cfg, ti = eng.cfg, eng.model.lm_head
    wtype = ti.format
    a8 = wtype.packed
    out = []
    for tune in ({"rb": 1}, {"rb": 2}, {"rpw": 16, "rb": 2}, {"subgroups": False}, {"subgroups": False, "rb": 1},
                 {"wg": 32}, {"wg": 128}):
        st = lmhead.gemv(wtype, cfg.n_embd, cfg.n_vocab, a8=a8, eps=cfg.eps, dev=dev, **tune)[0]
        out.append(dev.pipeline_key(st.shader, st.entry, st.constants, dict(st.defines, _TUNE=str(tune))))
    return out


if __name__ == "__main__":
    main()
