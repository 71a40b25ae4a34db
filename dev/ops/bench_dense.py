"""Rough timing of dense GEMV variants on the native device (dev tool, not a test).

usage: .venv/bin/python dev/ops/bench_dense.py [rows] [n_in]
Prints ms per dispatch (median of a few submits of 5 dispatches) and GB/s of weight bytes.
"""
import argparse, asyncio, time

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("rows", type=int, nargs="?", default=16384)
ap.add_argument("n_in", type=int, nargs="?", default=2560)
args = ap.parse_args()
rows, n_in = args.rows, args.n_in

import numpy as np  # noqa: E402
from bitweb.gpu import request_device  # noqa: E402
from bitweb.kernels import dense  # noqa: E402


async def main():
    dev = await request_device("native")
    print(dev.describe())
    rng = np.random.default_rng(0)
    w = rng.uniform(-1, 1, size=(rows, n_in)).astype(np.float16)
    bufs = {"w0": dev.create_buffer(w.nbytes), "x": dev.create_buffer(4 * n_in), "y": dev.create_buffer(4 * rows),
            "norm": dev.create_buffer(4 * n_in)}
    dev.write_buffer(bufs["w0"], 0, w.tobytes())
    dev.write_buffer(bufs["x"], 0, rng.normal(size=n_in).astype(np.float32).tobytes())
    dev.write_buffer(bufs["norm"], 0, np.ones(n_in, np.float32).tobytes())
    for sg in (True, False):
        for f16 in (None, False):
            for wg, r in ((64, 4), (128, 4), (256, 1), (64, 8), (32, 8)):
                st = dense.gemv("F16", n_in, rows, subgroups=sg, f16=f16, wg=wg, rows=r, norm=True)[0]
                item = await st.instantiate(dev, bufs)
                plan = dev.plan([item] * 5)
                dev.run(plan)
                await dev.read(bufs["y"], 0, 4)
                ts = []
                for _ in range(3):
                    t = time.perf_counter()
                    dev.run(plan)
                    await dev.read(bufs["y"], 0, 4)
                    ts.append((time.perf_counter() - t) / 5)
                ms = sorted(ts)[1] * 1e3
                print(f"sg={sg!s:5} f16={'native' if f16 is None else 'emul':6} wg={wg:3} rows={r}  {ms:8.2f} ms  {w.nbytes / ms / 1e6:6.2f} GB/s")

asyncio.run(main())
