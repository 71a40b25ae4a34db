"""Where should Qwen2's Q / K / V biases be added at decode? (native device; run from the repository
root: `.venv/bin/python dev/archs/bench_qkvbias.py [n_layer] [pos] [repeats] [rounds]`)

Per decode step a qwen2 block adds a bias to each of q, k and v before RoPE and the cache write.
Three plans over n_layer blocks of Qwen2.5-0.5B's attention shape (14 q heads, 2 kv heads, head_dim
64), KV cache filled to `pos`, timed in one run (wall clock, the best of `rounds` interleaved rounds
of `repeats` runs each: on a shared CPU the rounds vary by +-50 %, so take many; compare ratios):
  plain    attention: decode                                  (no biases: llama / BitNet)
  folded   attention: decode with QKV_BIAS                    (what the engine does)
  separate a glue: add dispatch qkv += bias over the (14 + 2 * 2) * 64 values, then attention: decode
           (the cheapest separate kernel: one thread per value)
"""
from __future__ import annotations

import asyncio

import numpy as np

from bitweb import gpu
from bitweb.kernels import glue, ops

NH, NKV, HD, CTX = 14, 2, 64, 4096


async def main(n_layer: int = 24, pos: int = 256, repeats: int = 20, rounds: int = 8):
    dev = await gpu.request_device("native")
    rng = np.random.default_rng(0)

    def buf(nbytes, data=None):
        b = dev.create_buffer(nbytes)
        if data is not None:
            dev.write_buffer(b, 0, np.ascontiguousarray(data, np.float32).tobytes())
        return b
    width = (NH + 2 * NKV) * HD
    kv = ops.kv_cache_bytes(NKV, HD, CTX)
    common = {"qkv": buf(4 * width, rng.normal(size=width)), "o": buf(4 * NH * HD), "params": buf(ops.PARAMS_BYTES),
              "freqs": buf(4 * HD // 2), "qkv_bias": buf(4 * width, rng.normal(size=width)),
              "mult": buf(16, np.ones(4))}
    dev.write_buffer(common["params"], 0, ops.params(pos=pos))
    dev.write_buffer(common["freqs"], 0, ops.rope_freqs(HD, 1e6))
    caches = [{"k_cache": buf(kv, rng.normal(size=kv // 4)), "v_cache": buf(kv, rng.normal(size=kv // 4))}
              for _ in range(n_layer)]
    plain = ops.attention_decode(NH, NKV, HD, CTX)[0]
    folded = ops.attention_decode(NH, NKV, HD, CTX, qkv_bias=True)[0]
    add = glue.add(width)
    plans = {}
    for name, steps in (("plain", [plain]), ("folded", [folded]), ("separate", [add, plain])):
        items = []
        for c in caches:
            for st in steps:
                items.append(await st.instantiate(dev, dict(common, y=common["qkv"], a=common["qkv_bias"], **c)))
        plans[name] = dev.plan(items)
    t = {}
    for _ in range(rounds):                     # interleaved rounds: load changes between them
        for name, plan in plans.items():
            t.setdefault(name, []).append(await dev.time_plan(plan, repeats, wall=True))
    t = {k: min(v) for k, v in t.items()}
    print(f"device: {dev.info.get('description') or dev.backend}; {n_layer} blocks, pos {pos}")
    for name in plans:
        print(f"  {name:9s} {1e6 * t[name] / n_layer:8.1f} us per block   ({t[name] / t['plain']:.3f} x plain)")
    print(f"  biases folded cost {1e6 * (t['folded'] - t['plain']) / n_layer:.1f} us per block, "
          f"a separate dispatch {1e6 * (t['separate'] - t['plain']) / n_layer:.1f} us")


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n_layer", type=int, nargs="?", default=24)
    ap.add_argument("pos", type=int, nargs="?", default=256, help="KV cache rows filled")
    ap.add_argument("repeats", type=int, nargs="?", default=20)
    ap.add_argument("rounds", type=int, nargs="?", default=8)
    a = ap.parse_args()
    asyncio.run(main(a.n_layer, a.pos, a.repeats, a.rounds))
