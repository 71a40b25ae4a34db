"""numpy mirror of shaders/lmhead.wgsl (the LM head GEMV, output norm fused) and its cases.

The maths is dense.wgsl's gemv with NORM, so the reference is bitweb.ref.dense.gemv (weights
dequantized exactly, float64 dots). Tolerance, by the same argument as bitweb/ref/dense.py: a lane
adds ceil(units / 4) unit sums (lane groups have >= 4 lanes: WebGPU's minimum subgroup size; the
shared fallback uses LANES >= 4 here), a unit is a chain of at most DEPTH roundings (F32 one vec4
dot: 4; F16 / BF16 two dots and an add: 9; Q8_0 two chains of 8 dots (<= 5 each) scaled and added:
43), the group reduction adds at most 127 (a subgroup of <= 128 lanes summed in any order):
D = ceil(units / 4) (DEPTH + 1) + 128 + 4, atol = (1.5 (D + 1) + 9) u max_r inv S_r.
"""
from __future__ import annotations

import math

import numpy as np

from bitweb.kernels import dense as dense_spec
from bitweb.kernels import lmhead as spec
from bitweb.kernels import ops as ops_spec
from bitweb.ref.dense import U, add_case, encode, f32b, gemv, shard_buffers

DEPTH = {"F32": 4, "F16": 9, "BF16": 9, "Q8_0": 43}


def atol(wtype: str, n_in: int, s_max: float) -> float:
    d = math.ceil(n_in / spec.UNIT[wtype] / 4) * (DEPTH[wtype] + 1) + 128 + 4
    return (1.5 * (d + 1) + 9) * U * s_max


def case(b, rng, name, wtype, n_in, n_out, *, max_binding=None, last_row=0, **tune):
    w = rng.uniform(-1, 1, size=(n_out, n_in)).astype(np.float32)
    data, wq = encode(wtype, w)
    rb = dense_spec.row_bytes(wtype, n_in)
    shards = dense_spec.shard_rows(n_out, rb, max_binding) if max_binding else None
    xs = rng.normal(size=(max(1, last_row), n_in)).astype(np.float32)
    g = rng.uniform(0.5, 1.5, size=n_in).astype(np.float32)
    y, s = gemv(wq, xs[-1], g)
    if tune.get("subgroups") is False:
        tune.setdefault("lanes", 4)
    steps = spec.gemv(wtype, n_in, n_out, shards=shards, last_row=bool(last_row), **tune)
    bufs = shard_buffers(data, rb, shards or [(0, n_out)])
    bufs += [{"name": "x", "data": f32b(xs)}, {"name": "norm", "data": f32b(g)},
             {"name": "y", "size": 4 * n_out, "expect": f32b(y), "atol": atol(wtype, n_in, float(s.max()))}]
    if last_row:
        bufs.append({"name": "params", "data": ops_spec.params(m=last_row)})
    add_case(b, name, steps, bufs)


def cases(b, scope: str = "full"):
    rng = np.random.default_rng(4242)
    if scope == "browser":
        case(b, rng, "lmhead.F16", "F16", 256, 77)
        case(b, rng, "lmhead.Q8_0.shared", "Q8_0", 128, 45, subgroups=False, rpw=8, rb=3)
        case(b, rng, "lmhead.F16.lastrow", "F16", 256, 33, last_row=4)
        return
    for wtype in spec.UNIT:
        for sg in (True, False):
            case(b, rng, f"lmhead.{wtype}.{'subgroup' if sg else 'shared'}", wtype, 512, 67, subgroups=sg)
    case(b, rng, "lmhead.F16.cpu_tune", "F16", 2560, 301, rpw=128, rb=4)
    case(b, rng, "lmhead.F16.gpu_tune.sharded", "F16", 256, 1000, rpw=16, rb=2, max_binding=256 * 2 * 128)
    case(b, rng, "lmhead.Q8_0.rb3.sharded", "Q8_0", 192, 301, rb=3, rpw=10, max_binding=204 * 40)
    case(b, rng, "lmhead.BF16.rb1.wg32", "BF16", 4096, 33, rb=1, rpw=5, wg=32)
    case(b, rng, "lmhead.F32.dispatch2d", "F32", 8, 65540, rpw=1, rb=1, wg=4, lanes=4)   # > 65535 workgroups
    case(b, rng, "lmhead.F16.2b4t_shard", "F16", 2560, 16384)
    for sg in (True, False):
        case(b, rng, f"lmhead.F16.lastrow.{'subgroup' if sg else 'shared'}", "F16", 320, 41, last_row=5, subgroups=sg)
    case(b, rng, "lmhead.Q8_0.lastrow.sharded", "Q8_0", 128, 90, last_row=3, max_binding=68 * 2 * 20)
