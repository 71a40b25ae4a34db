"""numpy mirror of shaders/lmhead.wgsl (the LM head GEMV, output norm fused) and its cases.

Packed formats (Q1_0, Q2_0 ...) compute bitlinear.wgsl's gemv NORM maths (f32 or A8), so their
mirror, case data (dyadic x, norm and block scales: every f32 sum exact) and tolerance are
bitweb.ref.bitlinear's (packed_case below). The float formats:

The maths is dense.wgsl's gemv with NORM, so the reference is bitweb.ref.dense.gemv (weights
dequantized exactly, float64 dots). Tolerance, by the same argument as bitweb/ref/dense.py: a lane
adds ceil(units / 4) unit sums (lane groups have >= 4 lanes: WebGPU's minimum subgroup size; the
shared fallback uses LANES >= 4 here), a unit is a chain of at most DEPTH roundings (F32 one vec4
dot: 4; F16 / BF16 two dots and an add: 9), the group reduction adds at most 127 (a subgroup of <= 128 lanes summed in any order):
D = ceil(units / 4) (DEPTH + 1) + 128 + 4, atol = (1.5 (D + 1) + 9) u max_r inv S_r.
"""
from __future__ import annotations

import math

import numpy as np

from bitweb import formats
from bitweb.kernels import dense as dense_spec
from bitweb.kernels import lmhead as spec
from bitweb.kernels import ops as ops_spec
from bitweb.ref import bitlinear as bl
from bitweb.ref.dense import U, add_case, encode, f32b, gemv, shard_buffers

DEPTH = {formats.F32: 4, formats.F16: 9, formats.BF16: 9}     # see the docstring


def atol(wtype, n_in: int, s_max: float) -> float:
    wtype = formats.get(wtype)
    d = math.ceil(n_in / spec.unit(wtype) / 4) * (DEPTH[wtype] + 1) + 128 + 4
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


def packed_case(b, rng, name, wtype, n_in, n_out, *, a8, max_binding=None, last_row=0, **tune):
    """A packed head: bitlinear's maths on bitlinear's exact case data (see bitweb.ref.bitlinear)."""
    wtype = formats.get(wtype)
    data = bl.rand_tensor(rng, wtype, n_out, n_in)
    rb = wtype.nbytes(n_in)
    shards = dense_spec.shard_rows(n_out, rb, max_binding) if max_binding else None
    g = bl.rand_norm(rng, n_in)
    xs = np.stack([bl.rand_x(rng, n_in) for _ in range(max(1, last_row))])
    if a8:
        xs[-1] = bl.untie(xs[-1], g)
    y, p = bl.gemv(wtype, [(data, n_out)], n_in, xs[-1], a8=a8, nw=g, vec_dot=False)
    atol, rtol = bl.tolerance(p, y, norm=True)
    if tune.get("subgroups") is False:
        tune.setdefault("lanes", 4)
    steps = spec.gemv(wtype, n_in, n_out, a8=a8, shards=shards, last_row=bool(last_row), **tune)
    bufs = shard_buffers(data[:n_out * rb], rb, shards or [(0, n_out)])
    bufs += [{"name": "x", "data": f32b(xs)}, {"name": "norm", "data": f32b(g)},
             {"name": "y", "size": 4 * n_out, "expect": f32b(y), "atol": atol, "rtol": rtol}]
    if last_row:
        bufs.append({"name": "params", "data": ops_spec.params(m=last_row)})
    add_case(b, name, steps, bufs)


def packed_cases(b, scope: str):
    """Every packed table format, both activation modes; a 151,936-row head's shape sharded."""
    rng = np.random.default_rng(4343)
    packed = [f for f in spec.TYPES if f.packed]
    if scope == "browser":
        packed_case(b, rng, "lmhead.Q1_0.a8", "Q1_0", 256, 77, a8=True)
        packed_case(b, rng, "lmhead.Q2_0.f32.shared.sharded.lastrow", "Q2_0", 192, 45, a8=False,
                    subgroups=False, rpw=8, rb=3, max_binding=18 * 3 * 10, last_row=3)
        # the heads of ggml's usual mixes (Q4_K_M: Q6_K; older files: Q4_0 / Q5_1), f32 as the engine runs them
        packed_case(b, rng, "lmhead.Q6_K.f32", "Q6_K", 512, 33, a8=False, rpw=16, rb=4)
        packed_case(b, rng, "lmhead.Q4_0.f32.lastrow", "Q4_0", 96, 41, a8=False, last_row=2)
        packed_case(b, rng, "lmhead.Q5_1.f32.shared", "Q5_1", 64, 23, a8=False, subgroups=False, rb=2)
        return
    for wtype in packed:
        blk = wtype.block_size
        for a8 in (True, False):
            mode = "a8" if a8 else "f32"
            for sg in (True, False):
                packed_case(b, rng, f"lmhead.{wtype.name}.{mode}.{'subgroup' if sg else 'shared'}", wtype, 3 * blk, 67,
                            a8=a8, subgroups=sg)
            rb = wtype.nbytes(2 * blk)
            packed_case(b, rng, f"lmhead.{wtype.name}.{mode}.sharded.lastrow.rb3", wtype, 2 * blk, 301, a8=a8, rb=3,
                        rpw=10, max_binding=rb * 40, last_row=4)
        packed_case(b, rng, f"lmhead.{wtype.name}.a8.one_block.wg32", wtype, blk, 9, a8=True, rpw=4, rb=1, wg=32)
    # the Bonsai-1.7B head row (2048 values) and one of its 128 MiB shards' row counts, cut to 4096 rows
    packed_case(b, rng, "lmhead.Q1_0.a8.bonsai_rows", "Q1_0", 2048, 4096, a8=True, rpw=128, rb=4)
    packed_case(b, rng, "lmhead.Q1_0.f32.bonsai8b_rows", "Q1_0", 4096, 1000, a8=False, max_binding=576 * 300)


def cases(b, scope: str = "full"):
    packed_cases(b, scope)
    rng = np.random.default_rng(4242)
    if scope == "browser":
        case(b, rng, "lmhead.F16", "F16", 256, 77)
        packed_case(b, rng, "lmhead.Q8_0.f32.shared", "Q8_0", 128, 45, a8=False, subgroups=False, rpw=8, rb=3)
        case(b, rng, "lmhead.F16.lastrow", "F16", 256, 33, last_row=4)
        case(b, rng, "lmhead.F16.xdirect", "F16", 256, 77, xdirect=True, rpw=128, rb=4)
        return
    for wtype in (f for f in spec.TYPES if not f.packed):
        for sg in (True, False):
            case(b, rng, f"lmhead.{wtype.name}.{'subgroup' if sg else 'shared'}", wtype, 512, 67, subgroups=sg)
    case(b, rng, "lmhead.F16.cpu_tune", "F16", 2560, 301, rpw=128, rb=4)
    case(b, rng, "lmhead.F16.gpu_tune.sharded", "F16", 256, 1000, rpw=16, rb=2, max_binding=256 * 2 * 128)
    packed_case(b, rng, "lmhead.Q8_0.f32.rb3.sharded.odd", "Q8_0", 96, 301, a8=False, rb=3, rpw=10, max_binding=102 * 40)
    case(b, rng, "lmhead.BF16.rb1.wg32", "BF16", 4096, 33, rb=1, rpw=5, wg=32)
    case(b, rng, "lmhead.F32.dispatch2d", "F32", 8, 65540, rpw=1, rb=1, wg=4, lanes=4)   # > 65535 workgroups
    case(b, rng, "lmhead.F16.2b4t_shard", "F16", 2560, 16384)
    for sg in (True, False):
        case(b, rng, f"lmhead.F16.lastrow.{'subgroup' if sg else 'shared'}", "F16", 320, 41, last_row=5, subgroups=sg)
    packed_case(b, rng, "lmhead.Q8_0.f32.lastrow.sharded", "Q8_0", 576, 90, a8=False, last_row=3, max_binding=612 * 20)
    for i, wtype in enumerate(("F32", "F16", "BF16")):      # xdirect (SwiftShader's choice), each with its own twist
        kw = [dict(subgroups=False, rb=3), dict(last_row=3, rb=4, rpw=128), dict(rb=2, rpw=7, max_binding=512 * 2 * 20)][i]
        case(b, rng, f"lmhead.{wtype}.xdirect", wtype, 512, 67, xdirect=True, **kw)
