"""One block's prefill matmuls at real shapes: shaders/bitlinear_tiled.wgsl with the device's tiles
(choose()) against an older copy of the kernel with other tiles, interleaved, process CPU time.

    python dev/bitlinear/tile_tune.py [--fmt I2_S,TQ2_0,TQ1_0,Q1_0] [--m 64] [--trials 6]
        [--old FILE.wgsl] [--old-tile rq=4,nq=2,wg=64] [--old-gate-up rq=4,nq=1,wg=64]
        [--tile rq=4,nq=4,wg=16] [--gate-up rq=4,nq=2,wg=32] [--embd 2560] [--ff 6912] [--kv 640]

The steps of one bitnet block's prefill (2B4T shapes by default): q (embd x embd), k and v (embd x
kv), o and down (RESIDUAL; embd x embd, ff x embd) and gate_up (embd x ff), M rows of random A8
activations, random weights of the format. Each trial runs every step of one side (new / old),
taking turns (which side goes first alternates), and takes the process CPU time (lavapipe's
threads run in this process: steadier than wall time on a shared machine) and the wall time; per
step and for the whole block, the best of the trials and new / old. The outputs of the two sides
are compared first (identical unless the summation order differs). --old: default this tree's
kernel (then only the tiles differ); `git show main:shaders/bitlinear_tiled.wgsl > OLD.wgsl` for
the kernel as it was.
"""
import argparse, asyncio, os, sys, time
from dataclasses import replace

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import custom, tensor                  # noqa: E402  (dev/bitlinear/bench.py)
from bitweb.gpu import request_device            # noqa: E402
from bitweb.kernels import bitlinear_tiled        # noqa: E402


def kv(s):
    return {k: int(v) for k, v in (i.split("=") for i in s.split(","))} if s else {}


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fmt", default="I2_S,TQ2_0,TQ1_0,Q1_0")
    ap.add_argument("--m", type=int, default=64)
    ap.add_argument("--trials", type=int, default=6)
    ap.add_argument("--old")
    ap.add_argument("--old-define", action="append", default=[], help="NAME=0|1 for --old's source")
    ap.add_argument("--old-tile", default="rq=4,nq=2,wg=64")
    ap.add_argument("--old-gate-up", default="rq=4,nq=1,wg=64")
    ap.add_argument("--tile", default="")
    ap.add_argument("--gate-up", default="")
    ap.add_argument("--steps", default="q,k,v,o,gate_up,down", help="the steps to run")
    ap.add_argument("--embd", type=int, default=2560)
    ap.add_argument("--ff", type=int, default=6912)
    ap.add_argument("--kv", type=int, default=640)
    a = ap.parse_args()
    dev = await request_device("native")
    print(dev.describe(), f"load {os.getloadavg()[0]:.1f}", flush=True)
    rng = np.random.default_rng(0)
    m, e, ff = a.m, a.embd, a.ff
    shapes = {"q": (e, e, False), "k": (e, a.kv, False), "v": (e, a.kv, False), "o": (e, e, True),
              "gate_up": (e, ff, None), "down": (ff, e, True)}
    shapes = {k: v for k, v in shapes.items() if k in a.steps.split(",")}
    for fmt in a.fmt.split(","):
        sides = {"new": {}, "old": {}}
        probes = {}
        for name, (n_in, n_out, res) in shapes.items():
            b = {"params": dev.create_buffer(32), "q": dev.create_buffer(m * n_in), "scale": dev.create_buffer(m * 4),
                 "mult": dev.create_buffer(16), "y": dev.create_buffer(m * n_out * 4)}
            dev.write_buffer(b["params"], 0, np.array([m, 0, 0, 0, 0, 0, 0, 0], np.uint32))
            dev.write_buffer(b["q"], 0, rng.integers(-127, 128, m * n_in).astype(np.int8))
            dev.write_buffer(b["scale"], 0, rng.uniform(0.01, 0.02, m).astype(np.float32))
            dev.write_buffer(b["mult"], 0, np.ones(4, np.float32))
            for t in ("w", "gate", "up") if res is None else ("w",):
                w = tensor(rng, fmt, n_out, n_in)
                b[t] = dev.create_buffer(len(w))
                dev.write_buffer(b[t], 0, w)
            if res is None:
                new = bitlinear_tiled.gate_up(fmt, n_in, n_out, m, a8=True, dev=dev, **kv(a.gate_up))
                old = bitlinear_tiled.gate_up(fmt, n_in, n_out, m, a8=True, dev=dev, **kv(a.old_gate_up))
            else:
                new = bitlinear_tiled.matmul(fmt, n_in, n_out, m, a8=True, residual=res, dev=dev, **kv(a.tile))
                old = bitlinear_tiled.matmul(fmt, n_in, n_out, m, a8=True, residual=res, dev=dev, **kv(a.old_tile))
            c0 = time.process_time()
            sides["new"][name] = dev.plan([await new.instantiate(dev, b)])
            c1 = time.process_time()
            if a.old_define:
                old = replace(old, defines=dict(old.defines, **{k: bool(int(v)) for k, v in (d.split("=") for d in a.old_define)}))
            sides["old"][name] = dev.plan([await custom(dev, a.old, old, b)] if a.old else [await old.instantiate(dev, b)])
            c2 = time.process_time()
            probes[name] = b["y"]
            outs = []
            for side in ("new", "old"):
                dev.write_buffer(b["y"], 0, bytes(b["y"].size))
                dev.run(sides[side][name])
                outs.append(np.frombuffer(await dev.read(b["y"]), np.float32).copy())
            same = "identical" if np.array_equal(*outs) else \
                f"max rel diff {np.abs(outs[0] - outs[1]).max() / np.abs(outs[1]).max():.1e}"
            print(f"  {fmt} {name} {n_in}x{n_out}: new {dict((k, new.constants[k]) for k in ('RQ', 'NQ', 'WG'))} "
                  f"old {dict((k, old.constants[k]) for k in ('RQ', 'NQ', 'WG'))}: {same}; "
                  f"compile cpu new {c1 - c0:.2f} s old {c2 - c1:.2f} s", flush=True)
        best = {(s, n): (1e9, 1e9) for s in sides for n in shapes}
        for tr in range(a.trials):
            for side in (("new", "old") if tr % 2 == 0 else ("old", "new")):
                for name, plan in sides[side].items():
                    c0, t0 = time.process_time(), time.perf_counter()
                    dev.run(plan)
                    await dev.read(probes[name], 0, 4)
                    c, t = time.process_time() - c0, time.perf_counter() - t0
                    best[side, name] = (min(best[side, name][0], c), min(best[side, name][1], t))
        print(f"{fmt} M={m} (load {os.getloadavg()[0]:.1f}), best of {a.trials}, ms per row (cpu / wall):")
        for name in shapes:
            (cn, tn), (co, to) = best["new", name], best["old", name]
            print(f"  {name:8s} new {cn / m * 1e3:7.3f} / {tn / m * 1e3:7.3f}  old {co / m * 1e3:7.3f} / {to / m * 1e3:7.3f}"
                  f"  new/old cpu {cn / co:.3f} wall {tn / to:.3f}")
        cn, co = (sum(best[s, n][0] for n in shapes) for s in ("new", "old"))
        tn, to = (sum(best[s, n][1] for n in shapes) for s in ("new", "old"))
        print(f"  block    new {cn / m * 1e3:7.3f} / {tn / m * 1e3:7.3f}  old {co / m * 1e3:7.3f} / {to / m * 1e3:7.3f}"
              f"  new/old cpu {cn / co:.3f} wall {tn / to:.3f}", flush=True)


asyncio.run(main())
