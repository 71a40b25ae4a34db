"""Attention over an f32 vs an f16 KV cache (array<f16>, and pack2x16float pairs in u32), 2B4T heads.

    .venv/bin/python dev/perf/attn_kv16.py [--pos 128,1024,4000] [--rows 64] [--trials 3]

Decode: the engine's `attention: decode` step (rope q / k, write row P, attend over 0..P) at each
position P. Prefill: `rope` + `attention: prefill` over --rows rows ending at P. The caches hold
random values (as each variant stores them). Time = dev.time_plan (GPU timestamps), median of 5
runs; trials interleave the variants and the best trial is printed, with each variant's time over
the f32 cache's. Variants a device cannot run (array<f16> without shader-f16) are skipped.
"""
import argparse
import asyncio
import random
import struct

from bitweb.gpu import request_device
from bitweb.kernels import ops

NH, NKV, HD, CTX = 20, 5, 128, 4096
VARIANTS = {"f32": ("f32", None), "f16": ("f16", True), "f16 pack2x16float": ("f16", False)}


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pos", default="128,1024,4000")
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--trials", type=int, default=3)
    a = ap.parse_args()
    dev = await request_device("native")
    print(dev.describe())
    rng = random.Random(0)
    vals = [rng.uniform(-1, 1) for _ in range(4096)]
    pats = {"f32": struct.pack("<4096f", *vals), "f16": struct.pack("<4096e", *vals)}
    M = a.rows
    qkv = dev.create_buffer(4 * M * (NH + 2 * NKV) * HD)
    row = pats["f32"][:4 * (NH + 2 * NKV) * HD]
    for m in range(M):
        dev.write_buffer(qkv, m * len(row), row)
    o = dev.create_buffer(4 * M * NH * HD)
    params = dev.create_buffer(ops.PARAMS_BYTES)
    freqs = dev.create_buffer(4 * HD // 2)
    dev.write_buffer(freqs, 0, ops.rope_freqs(HD, 500000.0))
    plans = {}
    for name, (kv, f16) in VARIANTS.items():
        if f16 and not dev.caps.shader_f16:
            continue
        n = ops.kv_cache_bytes(NKV, HD, CTX, kv)
        k, v = dev.create_buffer(n), dev.create_buffer(n)
        pat = pats[kv]
        for b in (k, v):
            for off in range(0, n, len(pat)):
                dev.write_buffer(b, off, pat[:min(len(pat), n - off)])
        bufs = {"k_cache": k, "v_cache": v, "qkv": qkv, "o": o, "params": params, "freqs": freqs}
        dec = ops.attention_decode(NH, NKV, HD, CTX, kv=kv, f16=f16)
        pre = [ops.rope(NH, NKV, HD, CTX, M, kv=kv, f16=f16), ops.attention_prefill(NH, NKV, HD, CTX, M, kv=kv, f16=f16)]
        plans[name] = (dev.plan([await st.instantiate(dev, bufs) for st in dec]),
                       dev.plan([await st.instantiate(dev, bufs) for st in pre]))
    for pos in (int(p) for p in a.pos.split(",")):
        best = {(n, w): 1e9 for n in plans for w in (0, 1)}
        for _ in range(a.trials):
            for n in plans:
                dev.write_buffer(params, 0, ops.params(pos=pos))
                best[n, 0] = min(best[n, 0], await dev.time_plan(plans[n][0], 5))
                dev.write_buffer(params, 0, ops.params(m=M, pos=max(0, pos + 1 - M)))
                best[n, 1] = min(best[n, 1], await dev.time_plan(plans[n][1], 5))
        for w, what in ((0, "decode"), (1, f"prefill {M} rows")):
            base = best["f32", w]
            print(f"pos {pos:5} {what:16}: " + "  ".join(
                f"{n} {best[n, w] * 1e3:8.3f} ms (x{best[n, w] / base:4.2f})" for n in plans), flush=True)

asyncio.run(main())
