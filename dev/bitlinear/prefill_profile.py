"""Where a prefill plan's time goes: every dispatch of the engine's M-row prefill plan timed alone
(dev.time_plan, GPU timestamps), summed per kernel, next to the decode plan of one token.

    python dev/bitlinear/prefill_profile.py MODEL.gguf [--rows 64] [--repeats 3] [--whole]

Prints per kernel (shader:entry + the format / switches): ms per plan run, share, ms per row; and
the decode plan's ms per token, so the ratio `decode ms * rows / prefill ms` (the prefill speed-up
per token, kernels only: no host) comes from the same run. --whole: only the whole plans (minutes
faster; with PYTHONPATH=OLD/pyapp it times an older tree the same way). --cpu: the whole plans also
by the process's CPU time (lavapipe's threads run in it; best of --repeats): steadier than wall time
on a loaded machine.
"""
import argparse, asyncio, collections, os, time

from bitweb.engine import Engine
from bitweb.gguf import FileSource, open_gguf
from bitweb.gpu import request_device


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--activations", default="a8")
    ap.add_argument("--whole", action="store_true", help="time the whole plans only, not every dispatch")
    ap.add_argument("--cpu", action="store_true", help="also the whole plans' process CPU time")
    a = ap.parse_args()
    dev = await request_device("native")
    gf = open_gguf(a.model)
    with FileSource(a.model) as src:
        eng = await Engine.load(dev, gf, src, activations=a.activations, prefill_rows=a.rows)
    M = eng.prefill_rows
    dev.write_buffer(eng.buf["p.ids"], 0, bytes(4 * M))
    from bitweb.kernels import ops
    dev.write_buffer(eng.buf["params"], 0, ops.params(m=M, pos=0))
    plan = await eng._prefill_plan(M, 0)
    per = collections.defaultdict(float)
    t0 = time.perf_counter()
    for p, bg, w in [] if a.whole else plan.items:
        t = await dev.time_plan(dev.plan([(p, bg, w)]), a.repeats)
        per[p.key[0] + ":" + p.key[1] + " " + " ".join(f"{k}" for k, v in sorted(dict(p.key[3]).items()) if v is True)] += t
    total = sum(per.values()) or 1.0
    whole = await dev.time_plan(plan, a.repeats)
    dev.write_buffer(eng.buf["params"], 0, ops.params(m=1, pos=M))
    dec = await dev.time_plan(eng.plan_greedy, max(a.repeats, 5))

    async def cpu(p, m, n):
        best = 1e9
        for _ in range(n):
            dev.write_buffer(eng.buf["params"], 0, ops.params(m=m, pos=0 if m > 1 else M))
            c = time.process_time()
            dev.run(p)
            await dev.sync()
            best = min(best, time.process_time() - c)
        return best
    if a.cpu:
        cw, cd = await cpu(plan, M, a.repeats), await cpu(eng.plan_greedy, 1, max(a.repeats, 5))
    print(f"{eng.cfg.summary()}\n{dev.describe()}  load {os.getloadavg()[0]:.2f}")
    for k, v in sorted(per.items(), key=lambda kv: -kv[1]):
        print(f"  {v * 1e3:9.2f} ms {v / total:6.1%}  {v / M * 1e3:8.3f} ms/row  {k}")
    print(f"prefill plan {M} rows: {whole * 1e3:.1f} ms ({total * 1e3:.1f} summed) = {whole / M * 1e3:.2f} ms/row; "
          f"decode plan {dec * 1e3:.2f} ms/token; decode / prefill per token = {dec * M / whole:.2f}x "
          f"({time.perf_counter() - t0:.0f} s)")
    if a.cpu:
        print(f"CPU time: prefill plan {cw * 1e3:.1f} ms = {cw / M * 1e3:.2f} ms/row; decode plan {cd * 1e3:.2f} ms/token; "
              f"decode / prefill per token = {cd * M / cw:.2f}x")
    eng.close()


asyncio.run(main())
