"""Decode attention: one workgroup per kv head (splits 1) vs split-K (splits S + combine), 2B4T dims.

    .venv/bin/python dev/perf/attn_splitk.py [--pos 128,1024,4000] [--splits 1,2,4,8,16] [--trials 3]

For each position P the KV cache holds random rows 0..P; the plan is the engine's decode attention
(ops.attention_decode: rope q/k, write row P, attend over 0..P; with S > 1 also `combine`).
Time = dev.time_plan (GPU timestamps), median of 5 runs; trials interleave the variants (the
machine is shared) and the best trial is printed. Output: ms per variant and the speed-up of
each split count over splits = 1.
"""
import argparse, asyncio, random, struct

from bitweb.gpu import request_device
from bitweb.kernels import ops

NH, NKV, HD, CTX = 20, 5, 128, 4096


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pos", default="128,1024,4000")
    ap.add_argument("--splits", default="1,2,4,8,16")
    ap.add_argument("--trials", type=int, default=3)
    a = ap.parse_args()
    dev = await request_device("native")
    print(dev.describe())
    rng = random.Random(0)
    kv = ops.kv_cache_bytes(NKV, HD, CTX)
    pat = struct.pack("<4096f", *(rng.uniform(-1, 1) for _ in range(4096)))
    k, v = dev.create_buffer(kv), dev.create_buffer(kv)
    for b in (k, v):
        for off in range(0, kv, len(pat)):
            dev.write_buffer(b, off, pat[:min(len(pat), kv - off)])
    qkv = dev.create_buffer(4 * (NH + 2 * NKV) * HD)
    dev.write_buffer(qkv, 0, pat[:4 * (NH + 2 * NKV) * HD])
    o = dev.create_buffer(4 * NH * HD)
    params = dev.create_buffer(ops.PARAMS_BYTES)
    freqs = dev.create_buffer(4 * HD // 2)
    dev.write_buffer(freqs, 0, ops.rope_freqs(HD, 500000.0))
    splits = [int(s) for s in a.splits.split(",")]
    plans = {}
    for s in splits:
        steps = ops.attention_decode(NH, NKV, HD, CTX, splits=s)
        part = dev.create_buffer(ops.attn_part_bytes(NH, HD, s)) if s > 1 else None
        bufs = {"k_cache": k, "v_cache": v, "qkv": qkv, "o": o, "params": params, "freqs": freqs, "attn_part": part}
        plans[s] = dev.plan([await st.instantiate(dev, bufs) for st in steps])
    for pos in (int(p) for p in a.pos.split(",")):
        dev.write_buffer(params, 0, ops.params(pos=pos))
        best = {s: 1e9 for s in splits}
        for _ in range(a.trials):
            for s in splits:
                best[s] = min(best[s], await dev.time_plan(plans[s], 5))
        base = best[splits[0]]
        print(f"pos {pos:5}: " + "  ".join(f"S{s} {best[s] * 1e3:7.3f} ms (x{base / best[s]:4.2f})" for s in splits), flush=True)

asyncio.run(main())
