"""Quick timing of the M=1 bitlinear GEMV vs a plain streaming read of the same bytes (dev helper).

    python dev/bitlinear/bench.py [--fmt I2_S] [--shape 2560x6912] [--reps 30] [--tune rpw=64,rb=2 ...]

Both kernels run `reps` dispatches in one submission (one compute pass); time = wall time / reps
after a warm-up (lavapipe runs on the CPU, so wall time is the device time), best of --trials.
The machine is shared, so the CPU time the process spent (lavapipe's threads run in it) is printed
too: its ratio is steadier under load than the wall-time ratio. The streaming kernel
XORs the same number of bytes as array<vec4<u32>> with a grid-stride loop. Ratio = stream time /
GEMV time (1.0 = the GEMV reads its weights as fast as a plain read).
Every --src / --tsrc variant first runs once and its output is compared with the shaders/ kernel's
(the reference) on the same inputs; the relative difference is printed after its timing.
"""
import argparse, asyncio, time

import numpy as np

from bitweb import formats
from bitweb.gpu import request_device
from bitweb.kernels import bitlinear, bitlinear_tiled

STREAM = """
override WG: u32 = 256u;
@group(0) @binding(0) var<storage, read> src: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) g: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    var acc = vec4<u32>(0u);
    for (var i = g.x; i < arrayLength(&src); i += nw.x * WG) { acc ^= src[i]; }
    let r = acc.x ^ acc.y ^ acc.z ^ acc.w;
    if (r == 0x9E3779B9u) { out[0] = r; }
}
"""


def tensor(rng, fmt, rows, n_in):
    n = rows * n_in
    f = formats.by_name(fmt)
    if not (f.a8 or f.tensor_scale):         # ggml's block types: tiled random valid blocks (bench.pattern)
        from bitweb import bench
        pat = bench.pattern(f)
        nb = f.nbytes(n)
        b = (pat * (nb // len(pat) + 1))[:nb]
        return b + bytes(-len(b) % 4)
    t = f.random_values(rng, n)                 # ternary values, or signs for a binary format
    b = f.pack(t, 1.0 if f.tensor_scale else np.full(n // f.block_size, 0.5))
    return b + bytes(-len(b) % 4)


async def timed(dev, work, reps, probe):
    """probe: a small buffer read back to wait for the queue (a 4-byte read after the work)."""
    dev.run(work)
    await dev.read(probe, 0, 4)
    t, c = time.perf_counter(), time.process_time()
    dev.run(work * reps)
    await dev.read(probe, 0, 4)
    return (time.perf_counter() - t) / reps, (time.process_time() - c) / reps


async def stream_time(dev, nbytes, reps, wgs):
    from bitweb.gpu import Pipeline
    src = dev.create_buffer(nbytes)
    out = dev.create_buffer(16)
    m = dev.device.create_shader_module(code=STREAM)
    raw = dev.device.create_compute_pipeline(layout="auto", compute={"module": m, "entry_point": "main"})
    p = Pipeline(raw, ("stream",))
    bg = dev._bind_group(raw, [(src.raw, 0, src.size), (out.raw, 0, 16)])
    return await timed(dev, [(p, bg, (wgs, 1, 1))], reps, out)


async def custom(dev, path, step, bufs):
    """The step's pipeline built from another source file (same constants, defines, bindings)."""
    from bitweb import shaders
    from bitweb.gpu import Pipeline
    defines = dict(step.defines)
    code = shaders.specialise(open(path).read(), dev, defines, path)
    m = dev.device.create_shader_module(code=code)
    raw = dev.device.create_compute_pipeline(layout="auto", compute={"module": m, "entry_point": step.entry,
                                                                      "constants": dict(step.constants)})
    bg = dev._bind_group(raw, [(bufs[n].raw, 0, bufs[n].size) for n in step.bind])
    return Pipeline(raw, (path,)), bg, step.workgroups


async def same_output(dev, work, y, ref):
    """Run work once from y = 0 and compare y with ref (the shaders/ kernel's y; None: this is it)."""
    dev.write_buffer(y, 0, bytes(y.size))
    dev.run(work)
    got = np.frombuffer(await dev.read(y), np.float32)
    if ref is None:
        return got, ""
    err = np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30)
    return ref, f"  max |y - y_shaders| / max |y| = {err:.1e}" + ("  DIFFERENT" if err > 1e-5 else "")


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fmt", default="I2_S")
    ap.add_argument("--shape", action="append", help="n_in x rows (default: the 2B4T shapes)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--f32", action="store_true", help="f32 activations (default A8)")
    ap.add_argument("--tune", action="append", default=[], help="k=v,k=v (several: compared)")
    ap.add_argument("--src", action="append", default=[], help="an experimental copy of bitlinear.wgsl to compare")
    ap.add_argument("--trials", type=int, default=3, help="best of this many timings (the machine is shared)")
    ap.add_argument("--tiled", type=int, default=0, metavar="M", help="also time bitlinear_tiled.matmul for M rows")
    ap.add_argument("--ttune", action="append", default=[], help="tiled k=v,k=v: rq, nq, wg (several: compared)")
    ap.add_argument("--tsrc", default=None, help="an experimental copy of bitlinear_tiled.wgsl")
    a = ap.parse_args()
    dev = await request_device("native")
    print(dev.describe())
    rng = np.random.default_rng(0)
    shapes = [tuple(map(int, s.split("x"))) for s in (a.shape or ["2560x2560", "2560x640", "2560x6912", "6912x2560"])]
    tunes = [dict((kv.split("=")[0], int(kv.split("=")[1])) for kv in t.split(",")) for t in a.tune] or [{}]
    for n_in, rows in shapes:
        w = tensor(rng, a.fmt, rows, n_in)
        bufs = {"x": dev.create_buffer(n_in * 4), "norm": dev.create_buffer(n_in * 4), "mult": dev.create_buffer(16),
                "y": dev.create_buffer(rows * 4), "w0": dev.create_buffer(len(w))}
        dev.write_buffer(bufs["x"], 0, rng.standard_normal(n_in).astype(np.float32))
        dev.write_buffer(bufs["norm"], 0, np.ones(n_in, np.float32))
        dev.write_buffer(bufs["mult"], 0, np.ones(4, np.float32))
        dev.write_buffer(bufs["w0"], 0, w)
        for tune in tunes:
            step = bitlinear.gemv(a.fmt, n_in, rows, a8=not a.f32, norm=True, dev=dev, **tune)
            ref = None
            for src in [None] + a.src:
                if src is None:
                    work = [await step.instantiate(dev, bufs)]
                else:
                    work = [await custom(dev, src, step, bufs)]
                ref, check = await same_output(dev, work, bufs["y"], ref)
                ts = tg = cs = cg = 1e9
                for _ in range(a.trials):      # interleaved, best of: other processes share the CPU
                    t, c = await stream_time(dev, len(w), a.reps, 64)
                    ts, cs = min(ts, t), min(cs, c)
                    t, c = await timed(dev, work, a.reps, bufs["y"])
                    tg, cg = min(tg, t), min(cg, c)
                print(f"{a.fmt} {'f32' if a.f32 else 'A8'} {n_in}x{rows} {len(w) / 1e6:.2f} MB  stream {ts * 1e3:6.3f} ms "
                      f"({len(w) / ts / 1e9:5.2f} GB/s)  gemv {tg * 1e3:6.3f} ms ({len(w) / tg / 1e9:5.2f} GB/s)  "
                      f"ratio {ts / tg:4.2f}  cpu-time ratio {cs / cg:4.2f} ({cs * 1e3:.2f} / {cg * 1e3:.2f} ms)  "
                      f"[{bitlinear.variant(step, dev)}{' ' + src if src else ''}]{check}", flush=True)
                if src is None:
                    tg_ref = tg
        if a.tiled:
            m = a.tiled
            for tt_kw in [dict((kv.split("=")[0], int(kv.split("=")[1])) for kv in t.split(",")) for t in a.ttune] or [{}]:
                st = bitlinear_tiled.matmul(a.fmt, n_in, rows, m, a8=not a.f32, dev=dev, **tt_kw)
                tb = {"params": dev.create_buffer(32), "x": dev.create_buffer(m * n_in * 4), "q": dev.create_buffer(m * n_in),
                      "scale": dev.create_buffer(m * 4), "mult": bufs["mult"], "y": dev.create_buffer(m * rows * 4), "w": bufs["w0"]}
                dev.write_buffer(tb["params"], 0, np.array([m, 0, 0, 0, 0, 0, 0, 0], np.uint32))
                dev.write_buffer(tb["x"], 0, rng.standard_normal(m * n_in).astype(np.float32))
                dev.write_buffer(tb["q"], 0, rng.integers(-127, 128, m * n_in).astype(np.int8))
                dev.write_buffer(tb["scale"], 0, np.ones(m, np.float32))   # s = 1: old and new A8 scale conventions agree
                ref = None
                for src in [None] + ([a.tsrc] if a.tsrc else []):
                    work = [await (custom(dev, src, st, tb) if src else st.instantiate(dev, tb))]
                    ref, check = await same_output(dev, work, tb["y"], ref)
                    tt = min([(await timed(dev, work, a.reps, tb["y"]))[0] for _ in range(a.trials)])
                    print(f"  tiled M={m}: {tt * 1e3:.3f} ms = {tt / m * 1e3:.3f} ms per row "
                          f"(shaders/ gemv {tg_ref * 1e3:.3f} ms per row: {tg_ref * m / tt:.2f}x) [RQ{st.constants['RQ']} NQ{st.constants['NQ']} WG{st.constants['WG']}"
                          f"{' ' + src if src else ''}]{check}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
