"""What a speculative verification pass costs in decode steps: the engine's greedy decode plan
against the pass of k + 1 rows (the prefill plan of its row bucket, then the verifier's multi-row
LM head where the table is block-quant or float), GPU timestamps (dev.time_plan), interleaved,
best of --trials. Each pass is timed with the tile fitted to its rows (blocks.fit_rows, what the
engine does) and with the device's full tile (fit_rows off: what it did before), so the two
compare on one machine at one load.

    python dev/perf/verify_cost.py MODEL.gguf [--rows 2,4,8] [--trials 3] [--reps 3]
"""
import argparse
import asyncio
import os

from bitweb import blocks, gpu, speculative
from bitweb.engine import Engine
from bitweb.gguf import FileSource, open_gguf


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--rows", default="2,4,8")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    dev = await gpu.request_device("native")
    with FileSource(a.model) as src:
        eng = await Engine.load(dev, open_gguf(a.model), src, max_context=512)
    print(f"# {dev.describe()}\n# {eng.cfg.summary()}; a8={eng.a8}; load {os.getloadavg()[0]:.1f}", flush=True)
    fitted = blocks.fit_rows
    plans = {}
    for fit in (True, False):
        blocks.fit_rows = speculative.fit_rows = fitted if fit else (lambda *x, **k: {})
        eng._plans = {k: v for k, v in eng._plans.items() if not isinstance(k, tuple)}   # keep the decode plans
        ver = speculative.Verifier(eng, 8)
        for m in map(int, a.rows.split(",")):
            pre = await eng._prefill_plan(m, None)
            head = await ver.plan(("head", m)) if ver.multi else None
            plans[fit, m] = (pre, head)
    blocks.fit_rows = speculative.fit_rows = fitted
    best = {}
    for _ in range(a.trials):
        t = await dev.time_plan(eng.plan_greedy, a.reps)
        best["decode"] = min(best.get("decode", 1e9), t)
        for key, (pre, head) in plans.items():
            t = await dev.time_plan(pre, a.reps) + (await dev.time_plan(head, a.reps) if head else 0.0)
            best[key] = min(best.get(key, 1e9), t)
    d = best["decode"]
    print(f"decode step {d * 1e3:.1f} ms (load {os.getloadavg()[0]:.1f})")
    print("| rows | full tile: ms | decode steps | fitted tile: ms | decode steps | fitted / full |")
    print("|---:|---:|---:|---:|---:|---:|")
    for m in map(int, a.rows.split(",")):
        full, fit = best[False, m], best[True, m]
        print(f"| {m} | {full * 1e3:.1f} | {full / d:.2f} | {fit * 1e3:.1f} | {fit / d:.2f} | {fit / full:.2f} |")
    eng.close()


asyncio.run(main())
