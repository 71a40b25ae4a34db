"""Tiled (prefill) kernel experiments: shaders/bitlinear_tiled.wgsl against numbered versions, and
the decode GEMV (shaders/bitlinear.wgsl) per row, interleaved, GPU timestamps, best of --trials.

    python dev/bitlinear/tiled_bench.py [--fmt I2_S] [--shape 2560x2560] [--m 64] [--f32]
        [--v FILE.wgsl:RQ=4,NQ=2,tc=8 ...] [--tune rq=4,nq=2,wg=64 ...] [--trials 3]

--v PATH:K=V,...  a version: UPPER keys are override constants (with N_IN / N_OUT / Y_*), lower keys
                  are dispatch hints: workgroups = (ceil(N_OUT / (WG * tc)), ceil(M / (4 RQ))), tc (outputs per invocation) default 4;
                  defines: +NAME (e.g. +RESIDUAL). Its output is compared with the shaders/ kernel's
                  (exact for I2_S A8: both are exact integer sums times the same scale).
Prints ms per call, ms per row, and "x decode" = GEMV time per row / tiled time per row.
"""
import argparse, asyncio, os, sys, time

import numpy as np

from bitweb import formats, shaders
from bitweb import kernels as bitweb_kernels
from bitweb.gpu import Pipeline, request_device
from bitweb.kernels import bitlinear, bitlinear_tiled


def tensor(rng, fmt, rows, n_in):
    n = rows * n_in
    f = formats.by_name(fmt)
    if not f.a8:                                # ggml's block formats: quantized normal values
        b = f.quantize(rng.standard_normal(n).astype(np.float32))
        return b + bytes(-len(b) % 16)
    t = f.random_values(rng, n)                 # ternary values, or signs for a binary format
    b = f.pack(t, 1.0 if f.tensor_scale else rng.uniform(0.25, 2, n // f.block_size))
    return b + bytes(-len(b) % 16)


def parse_v(spec):
    path, _, kv = spec.partition(":")
    consts, hints, defs = {}, {}, {}
    for item in filter(None, kv.split(",")):
        if item.startswith("+"):
            defs[item[1:]] = True
            continue
        k, v = item.split("=")
        (consts if k.isupper() else hints)[k] = int(v)
    return path, consts, hints, defs


async def version(dev, path, step, consts, hints, defs, bufs, m):
    c = dict(step.constants)
    c.pop("RQ", None); c.pop("NQ", None)
    d = dict(step.defines, **defs)
    code = shaders.specialise(open(path).read(), dev, d, path)
    if "shape" in step.data:      # matmul's run-time n_out: a constant where a version declares it
        n_out = int(np.frombuffer(step.data["shape"], np.uint32)[0])
        c.update({"N_OUT": n_out} if "override N_OUT" in code else {})
        bufs.setdefault("shape", bitweb_kernels.data_buffer(dev, step.data["shape"]))
    c.update(consts)
    mod = dev.device.create_shader_module(code=code)
    raw = dev.device.create_compute_pipeline(layout="auto", compute={"module": mod, "entry_point": step.entry,
                                                                      "constants": c})
    layout = raw.get_bind_group_layout(0)
    ents = []
    for i, n in enumerate(n for n in step.bind if n != "shape" or "var<storage, read> shape" in code):
        if n == "q" and hints.get("tex"):
            ents.append({"binding": i, "resource": bufs["qtex"]})
        else:
            ents.append({"binding": i, "resource": {"buffer": bufs[n].raw, "offset": 0, "size": bufs[n].size}})
    bg = dev.device.create_bind_group(layout=layout, entries=ents)
    wg = c.get("WG", 64) * hints.get("tc", 4)
    n_out = c.get("N_OUT") or int(np.frombuffer(step.data["shape"], np.uint32)[0])
    groups = (-(-n_out // wg), -(-m // (c["RQ"] * 4 if "RQ" in c else c.get("TR", 4))), 1)
    return dev.plan([(Pipeline(raw, (path,)), bg, groups)])


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fmt", default="I2_S")
    ap.add_argument("--shape", action="append")
    ap.add_argument("--m", type=int, default=64)
    ap.add_argument("--f32", action="store_true")
    ap.add_argument("--residual", action="store_true")
    ap.add_argument("--v", action="append", default=[])
    ap.add_argument("--tune", action="append", default=[], help="shaders/ kernel k=v,k=v (rq, nq, wg)")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-ref", action="store_true", help="skip timing the shaders/ kernel (still checked)")
    a = ap.parse_args()
    dev = await request_device("native")
    print(dev.describe(), f"load {os.getloadavg()[0]:.2f}", flush=True)
    rng = np.random.default_rng(0)
    m = a.m
    for shape in a.shape or ["2560x2560"]:
        n_in, n_out = map(int, shape.split("x"))
        w = tensor(rng, a.fmt, n_out, n_in)
        bufs = {"params": dev.create_buffer(32), "x": dev.create_buffer(m * n_in * 4), "q": dev.create_buffer(m * n_in),
                "scale": dev.create_buffer(m * 4), "mult": dev.create_buffer(16), "y": dev.create_buffer(m * n_out * 4),
                "w": dev.create_buffer(len(w)), "x1": dev.create_buffer(n_in * 4), "norm": dev.create_buffer(n_in * 4),
                "y1": dev.create_buffer(n_out * 4)}
        dev.write_buffer(bufs["params"], 0, np.array([m, 0, 0, 0, 0, 0, 0, 0], np.uint32))
        dev.write_buffer(bufs["x"], 0, rng.standard_normal(m * n_in).astype(np.float32))
        qv = rng.integers(-128, 128, m * n_in).astype(np.int8)
        dev.write_buffer(bufs["q"], 0, qv)
        import wgpu
        tex = dev.device.create_texture(size=(n_in // 16, m, 1), format=wgpu.TextureFormat.rgba32uint,
                                        usage=wgpu.TextureUsage.TEXTURE_BINDING | wgpu.TextureUsage.COPY_DST)
        dev.queue.write_texture({"texture": tex}, qv.tobytes(), {"bytes_per_row": n_in, "rows_per_image": m}, (n_in // 16, m, 1))
        bufs["qtex"] = tex.create_view()
        dev.write_buffer(bufs["scale"], 0, rng.uniform(0.005, 0.05, m).astype(np.float32))
        dev.write_buffer(bufs["mult"], 0, np.ones(4, np.float32))
        dev.write_buffer(bufs["w"], 0, w)
        dev.write_buffer(bufs["x1"], 0, rng.standard_normal(n_in).astype(np.float32))
        dev.write_buffer(bufs["norm"], 0, np.ones(n_in, np.float32))
        y0 = rng.standard_normal(m * n_out).astype(np.float32)
        gemv = bitlinear.gemv(a.fmt, n_in, n_out, a8=not a.f32, norm=True, dev=dev)
        gplan = dev.plan([await gemv.instantiate(dev, {"x": bufs["x1"], "nw": bufs["norm"], "norm": bufs["norm"],
                                                       "mult": bufs["mult"], "y": bufs["y1"], "w": bufs["w"],
                                                       "w0": bufs["w"]})])
        plans = []
        for t in a.tune or [""]:
            kw = {k: int(v) for k, v in (x.split("=") for x in filter(None, t.split(",")))}
            st = bitlinear_tiled.matmul(a.fmt, n_in, n_out, m, a8=not a.f32, residual=a.residual, dev=dev, **kw)
            plans.append((f"shaders/ RQ{st.constants['RQ']} NQ{st.constants['NQ']} WG{st.constants['WG']}",
                          dev.plan([await st.instantiate(dev, bufs)])))
        ref_step = bitlinear_tiled.matmul(a.fmt, n_in, n_out, m, a8=not a.f32, residual=a.residual)
        for spec in a.v:
            path, consts, hints, defs = parse_v(spec)
            plans.append((spec, await version(dev, path, ref_step, consts, hints, defs, bufs, m)))
        ref = None
        for name, plan in plans:
            dev.write_buffer(bufs["y"], 0, y0)
            dev.run(plan)
            got = np.frombuffer(await dev.read(bufs["y"]), np.float32).copy()
            if ref is None:
                ref = got
                continue
            same = np.mean(got == ref)
            err = np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30)
            print(f"  {name}: {same:.1%} bit-identical to shaders/, max rel diff {err:.1e}"
                  + ("  WRONG" if err > 1e-5 else ""), flush=True)
        best, cpu = {}, {}
        for _ in range(a.trials):
            for i, (name, plan) in enumerate([("gemv", gplan)] + plans):
                if i == 1 and a.no_ref and len(plans) > 1:
                    continue
                n = a.reps * (8 if name == "gemv" else 1)
                t = await dev.time_plan(plan, n)
                best[name] = min(best.get(name, 1e9), t)
                c0 = time.process_time()
                for _ in range(n):
                    dev.run(plan)
                await dev.sync()
                cpu[name] = min(cpu.get(name, 1e9), (time.process_time() - c0) / n)
        print(f"{a.fmt} {'f32' if a.f32 else 'A8'} {n_in}x{n_out} M={m}: decode gemv {best['gemv'] * 1e3:.3f} ms/row, "
              f"CPU {cpu['gemv'] * 1e3:.3f} ms (load {os.getloadavg()[0]:.2f})")
        for name, _ in plans:
            if name in best:
                t, c = best[name], cpu[name]
                print(f"  {t * 1e3:9.2f} ms  {t / m * 1e3:7.3f} ms/row  {best['gemv'] * m / t:5.2f}x decode   "
                      f"CPU {c / m * 1e3:7.3f} ms/row {cpu['gemv'] * m / c:5.2f}x decode  {name}", flush=True)


asyncio.run(main())
