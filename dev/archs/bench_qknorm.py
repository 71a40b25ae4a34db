"""Does folding Qwen3's QK-norm into the decode attention kernel pay? (native device; run from the
repository root: `.venv/bin/python dev/archs/bench_qknorm.py [n_layer] [pos]`)

Per decode step a qwen3 block needs q / k heads RMS-normalised before RoPE. Three plans over
n_layer blocks of Bonsai-1.7B's attention shape (16 q heads, 8 kv heads, head_dim 128), KV cache
filled to `pos`, timed in one run (wall clock: 3 batches, median; compare ratios, not absolutes):
  plain    attention: decode                                  (what BitNet needs: no QK-norm)
  folded   attention: decode with QK_NORM                     (what the engine does)
  separate an rmsnorm dispatch over the 24 head rows of 128, then attention: decode
           (the cheapest separate kernel: one dispatch of the same per-row work)
"""
from __future__ import annotations

import asyncio
import struct

import numpy as np

from bitweb import gpu
from bitweb.kernels import ops

NH, NKV, HD, CTX = 16, 8, 128, 4096


async def main(n_layer: int = 28, pos: int = 256, repeats: int = 30):
    dev = await gpu.request_device("native")
    rng = np.random.default_rng(0)

    def buf(nbytes, data=None):
        b = dev.create_buffer(nbytes)
        if data is not None:
            dev.write_buffer(b, 0, np.ascontiguousarray(data, np.float32).tobytes())
        return b
    kv = ops.kv_cache_bytes(NKV, HD, CTX)
    common = {"qkv": buf(4 * (NH + 2 * NKV) * HD, rng.normal(size=(NH + 2 * NKV) * HD)),
              "o": buf(4 * NH * HD), "params": buf(ops.PARAMS_BYTES), "freqs": buf(4 * HD // 2),
              "qkn": buf(8 * HD, rng.uniform(0.5, 1.5, 2 * HD)), "norm": buf(4 * HD, np.ones(HD)),
              "y": buf(4 * (NH + NKV) * HD)}
    dev.write_buffer(common["params"], 0, ops.params(pos=pos))
    dev.write_buffer(common["freqs"], 0, ops.rope_freqs(HD, 1e6))
    caches = [{"k_cache": buf(kv, rng.normal(size=kv // 4)), "v_cache": buf(kv, rng.normal(size=kv // 4))}
              for _ in range(n_layer)]
    plain = ops.attention_decode(NH, NKV, HD, CTX)[0]
    folded = ops.attention_decode(NH, NKV, HD, CTX, qk_norm=True, eps=1e-6)[0]
    norm = ops.rmsnorm(HD, NH + NKV, eps=1e-6)
    plans = {}
    for name, steps in (("plain", [plain]), ("folded", [folded]), ("separate", [norm, plain])):
        items = []
        for c in caches:
            for st in steps:
                items.append(await st.instantiate(dev, dict(common, x=common["qkv"], **c)))
        plans[name] = dev.plan(items)
    t = {}
    for _ in range(2):                          # interleaved rounds: load changes between them
        for name, plan in plans.items():
            t.setdefault(name, []).append(await dev.time_plan(plan, repeats, wall=True))
    t = {k: min(v) for k, v in t.items()}
    print(f"device: {dev.info.get('description') or dev.backend}; {n_layer} blocks, pos {pos}")
    for name in plans:
        print(f"  {name:9s} {1e6 * t[name] / n_layer:8.1f} us per block   ({t[name] / t['plain']:.3f} x plain)")
    print(f"  QK-norm folded costs {1e6 * (t['folded'] - t['plain']) / n_layer:.1f} us per block, "
          f"a separate dispatch {1e6 * (t['separate'] - t['plain']) / n_layer:.1f} us")


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n_layer", type=int, nargs="?", default=28)
    ap.add_argument("pos", type=int, nargs="?", default=256, help="KV cache rows filled")
    ap.add_argument("repeats", type=int, nargs="?", default=30)
    a = ap.parse_args()
    asyncio.run(main(a.n_layer, a.pos, a.repeats))
