"""M = 1 GEMV (and optionally the M-row tile) of several formats on the same shapes, interleaved.

    python dev/bitlinear/formats_bench.py [--fmt I2_S,TQ2_0,TQ1_0] [--shape 2560x6912 ...] [--tiled 64]
                                          [--reps 10] [--trials 5]

For each shape every format's kernel runs `reps` dispatches per timing, the formats taking turns
within each trial (the machine is shared: ratios come from one run); per format the best wall time
and the best process CPU time (lavapipe's threads run in this process) over the trials, and both
as a ratio to the first format. With --tiled M, the same for bitlinear_tiled.matmul over M rows,
printed per row and as decode time / prefill time per row (the kernel's share of prefill_over_decode).
Weights: random codes (ternary, or signs for Q1_0) of the same shape in each format.
"""
import argparse, asyncio, os, sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import custom, tensor, timed            # noqa: E402  (dev/bitlinear/bench.py)
from bitweb.gpu import request_device      # noqa: E402
from bitweb.kernels import bitlinear, bitlinear_tiled   # noqa: E402


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fmt", default="I2_S,TQ2_0,TQ1_0")
    ap.add_argument("--shape", action="append", help="n_in x rows (default: 2560x6912 and 6912x2560)")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--tiled", type=int, default=0, metavar="M")
    ap.add_argument("--tsrc", help="with --tiled: also an experimental copy of bitlinear_tiled.wgsl (same includes)")
    ap.add_argument("--no-gemv", action="store_true", help="with --tiled: the tile only")
    a = ap.parse_args()
    fmts = a.fmt.split(",")
    dev = await request_device("native")
    print(dev.describe(), flush=True)
    rng = np.random.default_rng(0)
    shapes = [tuple(map(int, s.split("x"))) for s in (a.shape or ["2560x6912", "6912x2560"])]
    for n_in, rows in shapes:
        x = rng.standard_normal(n_in).astype(np.float32)
        work = {}
        for f in fmts:
            w = tensor(rng, f, rows, n_in)
            b = {"x": dev.create_buffer(n_in * 4), "norm": dev.create_buffer(n_in * 4), "mult": dev.create_buffer(16),
                 "y": dev.create_buffer(rows * 4), "w0": dev.create_buffer(len(w))}
            dev.write_buffer(b["x"], 0, x)
            dev.write_buffer(b["norm"], 0, np.ones(n_in, np.float32))
            dev.write_buffer(b["mult"], 0, np.ones(4, np.float32))
            dev.write_buffer(b["w0"], 0, w)
            step = bitlinear.gemv(f, n_in, rows, a8=True, norm=True, dev=dev)
            work[f, 1] = ([await step.instantiate(dev, b)], b["y"], len(w))
            if a.tiled:
                m = a.tiled
                st = bitlinear_tiled.matmul(f, n_in, rows, m, a8=True, dev=dev)
                tb = {"params": dev.create_buffer(32), "q": dev.create_buffer(m * n_in), "scale": dev.create_buffer(m * 4),
                      "mult": b["mult"], "y": dev.create_buffer(m * rows * 4), "w": b["w0"]}
                dev.write_buffer(tb["params"], 0, np.array([m, 0, 0, 0, 0, 0, 0, 0], np.uint32))
                dev.write_buffer(tb["q"], 0, rng.integers(-127, 128, m * n_in).astype(np.int8))
                dev.write_buffer(tb["scale"], 0, np.ones(m, np.float32))
                work[f, m] = ([await st.instantiate(dev, tb)], tb["y"], len(w))
                if a.tsrc:
                    work[f, "src"] = ([await custom(dev, a.tsrc, st, tb)], tb["y"], len(w))
        best = {k: (1e9, 1e9) for k in work}
        for _ in range(a.trials):
            for k, (wk, probe, _) in work.items():
                if a.no_gemv and k[1] == 1:
                    continue
                t, c = await timed(dev, wk, a.reps if k[1] == 1 else max(1, a.reps // 4), probe)
                best[k] = (min(best[k][0], t), min(best[k][1], c))
        print(f"{n_in}x{rows} (load {os.getloadavg()[0]:.1f}):")
        t0, c0 = best[fmts[0], 1]
        for f in fmts:
            t, c = best[f, 1]
            line = (f"  {f:7s} {work[f, 1][2] / 1e6:6.2f} MB  gemv {t * 1e3:7.2f} ms (cpu {c * 1e3:7.2f})  "
                    f"x{t / t0:.2f} (cpu x{c / c0:.2f}) vs {fmts[0]}")
            if a.tiled:
                tt, ct = best[f, a.tiled]
                line += (f"   tile M={a.tiled}: {tt / a.tiled * 1e3:6.2f} ms/row (cpu {ct / a.tiled * 1e3:6.2f})"
                         f"  gemv/row-of-tile {t * a.tiled / tt:5.2f} (cpu {c * a.tiled / ct:5.2f})")
                if a.tsrc:
                    ts, cs = best[f, "src"]
                    line += f"   --tsrc: {ts / a.tiled * 1e3:6.2f} ms/row (cpu {cs / a.tiled * 1e3:6.2f})"
            print(line, flush=True)


asyncio.run(main())
