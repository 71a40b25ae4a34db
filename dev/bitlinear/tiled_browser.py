"""tiled_bench.py's comparison in headless Chromium (SwiftShader): the shaders/ tiled kernel, numbered
versions and the decode GEMV per row, wall time (onSubmittedWorkDone) of `reps` dispatches in one
submission, best of --trials, interleaved. Outputs are compared with the shaders/ kernel's in the page.

    python dev/bitlinear/tiled_browser.py [--shape 2560x2560] [--m 64] [--v PATH:K=V,... (as tiled_bench)]
"""
import argparse, base64, os, sys, types

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from chromium import page                                    # noqa: E402

from bitweb import formats, shaders                          # noqa: E402
from bitweb.gpu import Caps                                  # noqa: E402
from bitweb.kernels import bitlinear, bitlinear_tiled        # noqa: E402

JS = """
async ([vars, data, m, reps, trials]) => {
  const ad = await navigator.gpu.requestAdapter();
  const feats = [...ad.features].filter(f => ['subgroups', 'timestamp-query'].includes(f));
  const dev = await ad.requestDevice({requiredFeatures: feats, requiredLimits: {maxStorageBufferBindingSize: ad.limits.maxStorageBufferBindingSize,
                                      maxStorageBuffersPerShaderStage: ad.limits.maxStorageBuffersPerShaderStage}});
  const B = {};
  for (const [k, b64] of Object.entries(data)) {
    const bytes = Uint8Array.from(atob(b64), c => c.charCodeAt(0));
    if (k === 'qtex') {
      const nin = bytes.length / m;
      const t = dev.createTexture({size: [nin / 16, m, 1], format: 'rgba32uint', usage: GPUTextureUsage.TEXTURE_BINDING | GPUTextureUsage.COPY_DST});
      dev.queue.writeTexture({texture: t}, bytes, {bytesPerRow: nin, rowsPerImage: m}, [nin / 16, m, 1]);
      B[k] = t.createView();
      continue;
    }
    const buf = dev.createBuffer({size: Math.ceil(bytes.length / 16) * 16, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC});
    dev.queue.writeBuffer(buf, 0, bytes, 0, Math.ceil(bytes.length / 4) * 4);
    B[k] = buf; B[k + '_bytes'] = bytes;
  }
  const rd = dev.createBuffer({size: B.y.size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST});
  const P = [];
  for (const v of vars) {
    const mod = dev.createShaderModule({code: v.code});
    const info = await mod.getCompilationInfo();
    for (const msg of info.messages) if (msg.type === 'error') return {error: v.name + ': ' + msg.message + ' line ' + msg.lineNum};
    const p = await dev.createComputePipelineAsync({layout: 'auto', compute: {module: mod, entryPoint: v.entry, constants: v.constants}});
    const bg = dev.createBindGroup({layout: p.getBindGroupLayout(0), entries: v.binds.map((n, i) => ({binding: i, resource: n === 'qtex' ? B[n] : {buffer: B[n]}}))});
    P.push({v, p, bg});
  }
  const run = (x, n) => { const enc = dev.createCommandEncoder(); const cp = enc.beginComputePass();
    for (let i = 0; i < n; i++) { cp.setPipeline(x.p); cp.setBindGroup(0, x.bg); cp.dispatchWorkgroups(...x.v.groups); } cp.end(); return enc; };
  const out = {adapter: (ad.info && ad.info.description) || '', checks: [], times: {}};
  let ref = null;
  for (const x of P) {
    if (x.v.gemv) continue;
    dev.queue.writeBuffer(B.y, 0, B.y_bytes);
    const enc = run(x, 1); enc.copyBufferToBuffer(B.y, 0, rd, 0, B.y.size); dev.queue.submit([enc.finish()]);
    await rd.mapAsync(GPUMapMode.READ); const got = new Float32Array(rd.getMappedRange().slice(0)); rd.unmap();
    if (!ref) { ref = got; continue; }
    let same = 0, err = 0, mx = 0;
    for (let i = 0; i < got.length; i++) { if (got[i] === ref[i]) same++; err = Math.max(err, Math.abs(got[i] - ref[i])); mx = Math.max(mx, Math.abs(ref[i])); }
    out.checks.push([x.v.name, same / got.length, err / mx]);
  }
  window.runV = async (i, n) => {
    const enc = run(P[i], n); const t0 = performance.now(); dev.queue.submit([enc.finish()]); await dev.queue.onSubmittedWorkDone();
    return (performance.now() - t0) / n;
  };
  await window.runV(0, 1);
  return out;
}
"""


def _is_gpu(pid):
    """A Chromium GPU process started (through Playwright's driver) by this Python process."""
    try:
        if b"--type=gpu-process" not in open(f"/proc/{pid}/cmdline", "rb").read():
            return False
        p = pid
        for _ in range(6):
            p = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1]
            if int(p) == os.getpid():
                return True
            if p in ("0", "1"):
                return False
    except OSError:
        pass
    return False


def tensor(rng, fmt, rows, n_in):
    n = rows * n_in
    f = formats.by_name(fmt)
    t = f.random_values(rng, n)                 # ternary values, or signs for a binary format
    b = f.pack(t, 1.0 if f.tensor_scale else rng.uniform(0.25, 2, n // f.block_size))
    return b + bytes(-len(b) % 16)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fmt", default="I2_S")
    ap.add_argument("--shape", default="2560x2560")
    ap.add_argument("--m", type=int, default=64)
    ap.add_argument("--v", action="append", default=[])
    ap.add_argument("--tune", action="append", default=[])
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--reps", type=int, default=2)
    a = ap.parse_args()
    fake = types.SimpleNamespace(caps=Caps(subgroups=True, shader_f16=False, dot4=True, timestamps=True), backend="browser",
                                 info={"description": "swiftshader"}, limits={})
    rng = np.random.default_rng(0)
    n_in, n_out = map(int, a.shape.split("x"))
    m = a.m
    w = tensor(rng, a.fmt, n_out, n_in)
    q = rng.integers(-128, 128, m * n_in).astype(np.int8).tobytes()
    data = {"params": np.array([m, 0, 0, 0, 0, 0, 0, 0], np.uint32).tobytes(), "q": q, "qtex": q,
            "scale": rng.uniform(0.005, 0.05, m).astype(np.float32).tobytes(), "mult": np.ones(4, np.float32).tobytes(),
            "y": rng.standard_normal(m * n_out).astype(np.float32).tobytes(), "w": w,
            "x1": rng.standard_normal(n_in).astype(np.float32).tobytes(), "norm": np.ones(n_in, np.float32).tobytes(),
            "y1": bytes(n_out * 4)}
    variants = []
    gemv = bitlinear.gemv(a.fmt, n_in, n_out, a8=True, norm=True, dev=fake)
    names = {"x": "x1", "nw": "norm", "norm": "norm", "mult": "mult", "y": "y1", "w0": "w"}
    variants.append(dict(name="gemv", gemv=True, entry=gemv.entry, constants=dict(gemv.constants),
                         code=shaders.specialise(shaders.source(gemv.shader), fake, dict(gemv.defines), gemv.shader),
                         binds=[names[n] for n in gemv.bind], groups=list(gemv.workgroups) + [1] * (3 - len(gemv.workgroups))))
    for t in a.tune or [""]:
        kw = {k: int(v) for k, v in (x.split("=") for x in filter(None, t.split(",")))}
        st = bitlinear_tiled.matmul(a.fmt, n_in, n_out, m, a8=True, **kw)
        variants.append(dict(name=f"shaders/ TM{st.constants['TM']} WG{st.constants['WG']}", entry=st.entry,
                             constants=dict(st.constants), binds=list(st.bind), groups=list(st.workgroups),
                             code=shaders.specialise(shaders.source(st.shader), fake, dict(st.defines), st.shader)))
    ref = bitlinear_tiled.matmul(a.fmt, n_in, n_out, m, a8=True)
    for spec in a.v:
        path, _, kv = spec.partition(":")
        consts, hints, defs = {}, {}, {}
        for item in filter(None, kv.split(",")):
            if item.startswith("+"):
                defs[item[1:]] = True
                continue
            k, v = item.split("=")
            (consts if k.isupper() else hints)[k] = int(v)
        c = dict(ref.constants)
        c.pop("TM")
        c.update(consts)
        groups = [-(-n_out // (c.get("WG", 64) * hints.get("tc", 4))), -(-m // (4 * c["RQ"] if "RQ" in c else c.get("TR", 4))), 1]
        binds = [("qtex" if n == "q" and hints.get("tex") else n) for n in ref.bind]
        variants.append(dict(name=spec, entry=ref.entry, constants=c, binds=binds, groups=groups,
                             code=shaders.specialise(open(path).read(), fake, dict(ref.defines, **defs), path)))
    b64 = {k: base64.b64encode(v).decode() for k, v in data.items()}
    with page() as (pg, url):
        pg.goto(url)
        r = pg.evaluate(JS, [variants, b64, m, a.reps, a.trials])
        if "error" in r:
            sys.exit(r["error"])
        gpu_pids = [int(p) for p in os.listdir("/proc") if p.isdigit() and _is_gpu(p)]

        def ticks():
            t = 0
            for p in gpu_pids:
                try:
                    f = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
                    t += int(f[11]) + int(f[12])
                except OSError:
                    pass
            return t / os.sysconf("SC_CLK_TCK")
        r["times"], r["cpu"] = {}, {}
        for _ in range(a.trials):
            for i, v in enumerate(variants):
                n = a.reps * (4 if v.get("gemv") else 1)
                c0 = ticks()
                ms = pg.evaluate("([i, n]) => window.runV(i, n)", [i, n])
                c = (ticks() - c0) / n * 1e3
                r["times"][v["name"]] = min(r["times"].get(v["name"], 1e9), ms)
                r["cpu"][v["name"]] = min(r["cpu"].get(v["name"], 1e9), c)
    print(r["adapter"], f"{a.fmt} A8 {a.shape} M={m} load {os.getloadavg()[0]:.1f}")
    for name, same, err in r["checks"]:
        print(f"  {name}: {same:.1%} bit-identical to shaders/, max rel diff {err:.1e}" + ("  WRONG" if err > 1e-5 else ""))
    g, gc = r["times"]["gemv"], r["cpu"]["gemv"]
    print(f"  decode gemv {g:.3f} ms/row, GPU-process CPU {gc:.3f} ms")
    for name, t in r["times"].items():
        if name != "gemv":
            c = r["cpu"][name]
            print(f"  {t:9.2f} ms  {t / m:7.3f} ms/row  {g * m / t:5.2f}x decode   CPU {c / m:7.3f} ms/row {gc * m / c:5.2f}x decode  {name}")


main()
