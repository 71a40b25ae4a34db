"""LM-head GEMV experiments (dev/perf/dense_gemv_v*.wgsl) vs shaders/dense.wgsl and shaders/lmhead.wgsl.

    .venv/bin/python dev/perf/bench_dense.py [--fmt F16|Q8_0|BF16|F32] [--rows 16384] [--k 2560]
        [--src dev/perf/dense_gemv_v1.wgsl] [--tune rpw=32,rb=2 ...] [--lmtune rpw=64,rb=4 ...] [--trials 3]

shaders/dense.wgsl takes the float formats only (F16, BF16, F32); Q8_0 runs lmhead.wgsl and the
experiments. Every variant is checked against numpy first (max relative error of y printed), then timed with
dev.time_plan (GPU timestamps, median of 5) in interleaved trials (the machine is shared); the
best trial and the streaming read of the same bytes (shaders/stream.wgsl, bitweb.bench.Stream)
are printed: P1 = stream time / kernel time.
"""
import argparse, asyncio, pathlib

import numpy as np

from bitweb import formats, shaders
from bitweb.bench import Stream
from bitweb.gpu import Pipeline, request_device
from bitweb.kernels import dense, lmhead

HERE = pathlib.Path(__file__).parent


async def custom(dev, path, fmt, k, rows, tune, bufs):
    defines = {"W_F16": formats.by_name(fmt) is formats.F16}      # the experiment's own switch (else Q8_0)
    code = shaders.specialise(open(path).read(), dev, defines, str(path))
    mod = dev.device.create_shader_module(code=code)
    consts = {"K": k, "N_ROWS": rows, "ROW0": 0, "WG": tune.get("wg", 64), "RPW": tune.get("rpw", 32),
              "RB": tune.get("rb", 2)}
    raw = dev.device.create_compute_pipeline(layout="auto", compute={"module": mod, "entry_point": "gemv",
                                                                      "constants": consts})
    bg = dev._bind_group(raw, [(bufs[n].raw, 0, bufs[n].size) for n in ("w0", "x", "y", "norm")])
    return Pipeline(raw, (str(path),)), bg, dense.workgroups_1d(-(-rows // consts["RPW"]))


async def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fmt", default="F16", choices=["F16", "Q8_0", "BF16", "F32"])
    ap.add_argument("--rows", type=int, default=16384)
    ap.add_argument("--k", type=int, default=2560)
    ap.add_argument("--src", action="append", default=[])
    ap.add_argument("--tune", action="append", default=[])
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--lmtune", action="append", default=[], help="shaders/lmhead.wgsl tunes: rpw=..,rb=..,wg=..")
    a = ap.parse_args()
    dev = await request_device("native")
    print(dev.describe())
    rng = np.random.default_rng(0)
    w = rng.uniform(-1, 1, (a.rows, a.k)).astype(np.float32)
    wb = formats.quantize(a.fmt, w)
    wf = formats.dequantize(a.fmt, wb, w.size).reshape(w.shape)
    x = rng.standard_normal(a.k).astype(np.float32)
    g = rng.uniform(0.5, 1.5, a.k).astype(np.float32)
    want = (wf.astype(np.float64) @ (x * g)) / np.sqrt(np.mean(x.astype(np.float64) ** 2) + 1e-5)
    bufs = {"w0": dev.create_buffer(len(wb)), "x": dev.create_buffer(4 * a.k), "y": dev.create_buffer(4 * a.rows),
            "norm": dev.create_buffer(4 * a.k)}
    dev.write_buffer(bufs["w0"], 0, wb + bytes(-len(wb) % 4))
    dev.write_buffer(bufs["x"], 0, x)
    dev.write_buffer(bufs["norm"], 0, g)
    variants = []
    if formats.by_name(a.fmt) in dense.WTYPES:       # dense.wgsl: the float formats only (Q8_0 reads are lmhead's)
        variants.append(("shaders/dense.wgsl", [await dense.gemv(a.fmt, a.k, a.rows, norm=True)[0].instantiate(dev, bufs)]))
    for t in [{}] + [dict((kv.split("=")[0], int(kv.split("=")[1])) for kv in t.split(",")) for t in a.lmtune]:
        st = lmhead.gemv(a.fmt, a.k, a.rows, dev=dev, **t)[0]
        variants.append((f"shaders/lmhead.wgsl {lmhead.variant(st, dev)}", [await st.instantiate(dev, bufs)]))
    tunes = [dict((kv.split("=")[0], int(kv.split("=")[1])) for kv in t.split(",")) for t in a.tune] or [{}]
    for src in a.src:
        for t in tunes:
            variants.append((f"{pathlib.Path(src).name} {t}", [await custom(dev, src, a.fmt, a.k, a.rows, t, bufs)]))
    best = {}
    for name, items in variants:
        dev.write_buffer(bufs["y"], 0, np.zeros(a.rows, np.float32))
        dev.run(items)
        got = np.frombuffer(await dev.read(bufs["y"]), np.float32)
        err = np.abs(got - want).max() / np.abs(want).max()
        print(f"{name}: max error / max |y| = {err:.2e}" + ("   WRONG" if err > 1e-4 else ""), flush=True)
    stream = Stream(dev)
    ts, _ = await stream.seconds(len(wb))
    for _ in range(a.trials):
        for name, items in variants:
            t = await dev.time_plan(dev.plan(items), 5)
            best[name] = min(best.get(name, 1e9), t)
    for name, t in best.items():
        print(f"{a.fmt} {a.k}x{a.rows} {len(wb) / 1e6:6.1f} MB  {t * 1e3:8.2f} ms  {len(wb) / t / 1e9:5.2f} GB/s  "
              f"P1 {ts / t:4.2f}  [{name}]", flush=True)
    print(f"stream {ts * 1e3:.2f} ms {len(wb) / ts / 1e9:.2f} GB/s")

asyncio.run(main())
