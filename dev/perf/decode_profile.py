"""Where a decode step's time goes: every dispatch of the engine's greedy decode plan timed alone
(dev.time_plan, GPU timestamps), summed per kernel, beside the whole plan and a streaming read of
the bytes a token reads (bench.bytes_per_token, shaders/stream.wgsl), all in one run.

    python dev/perf/decode_profile.py MODEL.gguf [--activations a8|f32] [--repeats 3] [--force-a8]

Prints per kernel (shader:entry, the format, the switches): ms per token, share, and the whole
plan's ms per token against the roofline (bytes / stream). --force-a8: int8 activations on linears
of any packed format (the engine gives them only to the ternary and binary kinds: model.a8_linears),
to measure what A8 would cost or gain on ggml's block types. `bitweb bench floor MODEL` (bitweb.floor)
splits the same plan by kernel family beside the wall time per token and an empty token's cost,
natively and in Chromium.
"""
import argparse
import asyncio
import collections
import os
import time

from bitweb import bench, engine as engine_mod, model as model_mod
from bitweb.engine import Engine
from bitweb.gguf import FileSource, open_gguf
from bitweb.gpu import request_device
from bitweb.kernels import ops


def label(p) -> str:
    shader, entry, _, defines = p.key[0], p.key[1], p.key[2], dict(p.key[3])
    fmt = defines.get("FORMAT")
    name = f"{shader}:{entry}"
    if fmt is not None:
        from bitweb import formats
        name += f" {formats.get(fmt).name}"
    return name + " " + " ".join(k for k, v in sorted(defines.items()) if v is True and k not in ("SUBGROUPS", "DOT4", "F16"))


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--activations", default="a8")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--force-a8", action="store_true", help="A8 on linears of every packed format")
    ap.add_argument("--pos", type=int, default=32, help="the decode position (KV rows read)")
    a = ap.parse_args()
    if a.force_a8:
        def forced(cfg, activations):
            return activations == "a8" and cfg.linear_type is not None and cfg.linear_type.packed
        engine_mod.a8_linears = model_mod.a8_linears = forced
    dev = await request_device("native")
    gf = open_gguf(a.model)
    with FileSource(a.model) as src:
        eng = await Engine.load(dev, gf, src, activations=a.activations, prefill_rows=1, max_context=a.pos + 64)
    dev.write_buffer(eng.buf["params"], 0, ops.params(m=1, pos=a.pos))
    plan = eng.plan_greedy
    t0 = time.perf_counter()
    per = collections.defaultdict(float)
    count = collections.Counter()
    for item in plan.items:
        t = await dev.time_plan(dev.plan([item]), a.repeats)
        per[label(item[0])] += t
        count[label(item[0])] += 1
    whole = await dev.time_plan(plan, max(a.repeats, 5))
    bpt = bench.bytes_per_token(eng, a.pos)
    ts, _ = await bench.Stream(dev, a.repeats).seconds(bpt["total"])
    roof = bpt["total"] / ((bpt["total"] // 16 * 16) / ts)
    total = sum(per.values()) or 1.0
    print(f"{eng.cfg.summary()}; {'a8' if eng.a8 else 'f32'} linears\n{dev.describe()}  load {os.getloadavg()[0]:.2f}")
    for k, v in sorted(per.items(), key=lambda kv: -kv[1]):
        print(f"  {v * 1e3:9.2f} ms {v / total:6.1%}  x{count[k]:<3} {k}")
    print(f"decode plan {whole * 1e3:.1f} ms per token ({total * 1e3:.1f} summed), {plan.n_dispatches} dispatches; "
          f"{bpt['total'] / 1e6:.1f} MB per token, stream {bpt['total'] / roof / 1e9:.2f} GB/s -> roofline "
          f"{roof * 1e3:.1f} ms; plan / roofline {whole / roof:.2f} ({time.perf_counter() - t0:.0f} s)")
    eng.close()


asyncio.run(main())
