"""numpy mirror of shaders/dense.wgsl (CPython only) and its kernel cases.

Reference maths: the weights are dequantized exactly (bitweb.formats: f16, bf16 and Q8_0's d * q
are exact in f32) and every dot product is computed in float64, so the only error in a case is
the kernel's own f32 rounding.

Tolerances (stated per case as atol, rtol = 0). A sum of products evaluated in f32 by any
evaluation tree whose longest chain of roundings is D satisfies
    |fl(s) - s| <= D u sum_k |w_k x_k|,   u = 2^-24   (first order; D u << 1).
  gemv:   each thread adds L = ceil(n_in / (4 WG)) vec4 dots (a dot is <= 4 roundings) and the
          workgroup reduction adds at most WG - 1 more (tree: log2 WG; subgroups + slots: at most
          the subgroup chain plus one add per subgroup): D = L + 4 + WG, plus 1 for the final
          rounding, atol = (D + 1) u max_r S_r with S_r = sum_k |W[r,k] x[k]|.
  NORM:   y = inv * T. T as above (D + 1 for the x*g product); inv = 1/sqrt(ss/K + eps) has
          relative error <= (D/2 + 8) u (sum of squares of depth D, then div 2.5 ulp, sqrt
          ~3 ulp, add 0.5 ulp), so atol = (1.5 (D + 1) + 9) u max_r inv S_r with S_r over x*g.
  matmul: one chain of n_in/4 vec4 dots per output: D = n_in/4 + 4, atol = (D + 1) u max S.
These are bounds, not fits: with random data the observed errors are 10-100x smaller.
"""
from __future__ import annotations

import math

import numpy as np

from bitweb import formats
from bitweb.kernels import dense as spec
from bitweb.kernels import ops as ops_spec

U = 2.0 ** -24


def encode(wtype, w: np.ndarray) -> tuple:
    """float weights (n_out, n_in) -> (GGUF bytes, the exact f32 values the kernel sees)."""
    f = formats.get(wtype)
    data = f.quantize(np.ascontiguousarray(w, dtype=np.float32))
    return data, f.dequantize(data, w.size).reshape(w.shape)


def gemv(w: np.ndarray, x: np.ndarray, norm: np.ndarray | None = None, eps: float = 1e-5):
    """(y f32, bound S per row). norm: y = W (x*norm) / sqrt(mean(x^2) + eps) (S scaled by inv)."""
    w64 = w.astype(np.float64)
    x64 = x.astype(np.float64)
    inv = 1.0
    if norm is not None:
        inv = 1.0 / math.sqrt(float(np.dot(x64, x64)) / x.size + eps)
        x64 = x64 * norm.astype(np.float64)
    y = (w64 @ x64) * inv
    s = (np.abs(w64) @ np.abs(x64)) * inv
    return y.astype(np.float32), s


def matmul(w: np.ndarray, x: np.ndarray):
    """(Y = X W^T f32 of shape (m, n_out), bound S)."""
    w64 = w.astype(np.float64)
    x64 = x.astype(np.float64)
    return (x64 @ w64.T).astype(np.float32), np.abs(x64) @ np.abs(w64).T


def gemv_atol(n_in: int, wg: int, s_max: float, norm: bool) -> float:
    d = math.ceil(n_in / (4 * wg)) + 4 + wg
    if norm:
        return (1.5 * (d + 1) + 9) * U * s_max
    return (d + 1) * U * s_max


def matmul_atol(n_in: int, s_max: float) -> float:
    return (n_in / 4 + 5) * U * s_max


# ---- cases -----------------------------------------------------------------------------------
def add_case(builder, name: str, steps: list, buffers: list):
    """buffers: kernel_check buffer dicts; steps: bitweb.kernels.Step list bound by buffer name (the
    steps' data buffers, e.g. lmhead's shard rows, are added)."""
    named = {b["name"] for b in buffers}
    buffers = list(buffers) + [{"name": n, "data": d} for s in steps for n, d in s.data.items() if n not in named]
    index = {b["name"]: i for i, b in enumerate(buffers)}
    return builder.add(name, buffers, [s.as_case_step(index) for s in steps])


def f32b(a) -> bytes:
    return np.ascontiguousarray(a, dtype="<f4").tobytes()


def pad4(data: bytes) -> bytes:
    """Zero-pad to whole words, as Device.upload does for a final partial word."""
    return bytes(data) + bytes(-len(data) % 4)


def shard_buffers(data: bytes, rbytes: int, shards: list) -> list:
    return [{"name": f"w{i}", "data": pad4(data[r0 * rbytes:r1 * rbytes])} for i, (r0, r1) in enumerate(shards)]


def _weights(rng, wtype, n_out, n_in):
    w = rng.uniform(-1, 1, size=(n_out, n_in)).astype(np.float32)
    return encode(wtype, w)


def gemv_case(b, rng, name, wtype, n_in, n_out, *, norm=False, last_row=0, max_binding=None, **kw):
    data, w = _weights(rng, wtype, n_out, n_in)
    rb = spec.row_bytes(wtype, n_in)
    shards = spec.shard_rows(n_out, rb, max_binding) if max_binding else None
    m = max(1, last_row)
    xs = rng.normal(size=(m, n_in)).astype(np.float32)
    g = rng.uniform(0.5, 1.5, size=n_in).astype(np.float32) if norm else None
    y, s = gemv(w, xs[-1], g)
    wg = kw.get("wg", 64)
    steps = spec.gemv(wtype, n_in, n_out, shards=shards, norm=norm, last_row=bool(last_row), **kw)
    bufs = shard_buffers(data, rb, shards or [(0, n_out)])
    bufs += [{"name": "x", "data": f32b(xs)},
             {"name": "y", "size": 4 * n_out, "expect": f32b(y), "atol": gemv_atol(n_in, wg, float(s.max()), norm)}]
    if norm:
        bufs.append({"name": "norm", "data": f32b(g)})
    if last_row:
        bufs.append({"name": "params", "data": ops_spec.params(m=m)})
    add_case(b, name, steps, bufs)


def matmul_case(b, rng, name, wtype, n_in, n_out, m, *, max_binding=None, **kw):
    data, w = _weights(rng, wtype, n_out, n_in)
    rb = spec.row_bytes(wtype, n_in)
    shards = spec.shard_rows(n_out, rb, max_binding) if max_binding else None
    xs = rng.normal(size=(m, n_in)).astype(np.float32)
    y, s = matmul(w, xs)
    steps = spec.matmul(wtype, n_in, n_out, m, shards=shards, **kw)
    bufs = shard_buffers(data, rb, shards or [(0, n_out)])
    bufs += [{"name": "x", "data": f32b(xs)},
             {"name": "y", "size": 4 * m * n_out, "expect": f32b(y), "atol": matmul_atol(n_in, float(s.max()))},
             {"name": "params", "data": ops_spec.params(m=m)}]
    add_case(b, name, steps, bufs)


def cases(b, scope: str = "full"):
    rng = np.random.default_rng(1234)
    if scope == "browser":
        gemv_case(b, rng, "dense.gemv.F16.norm", "F16", 256, 45, norm=True)
        gemv_case(b, rng, "dense.gemv.BF16.shared.sharded", "BF16", 96, 50, subgroups=False, max_binding=1024)
        matmul_case(b, rng, "dense.matmul.BF16", "BF16", 64, 20, 5)
        return
    for wtype in spec.WTYPES:
        for sg in (True, False):
            for f16 in ((None, False) if wtype is formats.F16 else (None,)):
                tag = f"{wtype.name}.{'subgroup' if sg else 'shared'}" + (".f16emul" if f16 is False else "")
                gemv_case(b, rng, f"dense.gemv.{tag}", wtype, 256, 67, subgroups=sg, f16=f16)
    gemv_case(b, rng, "dense.gemv.F16.wg256.rows1", "F16", 1024, 9, wg=256, rows=1)
    gemv_case(b, rng, "dense.gemv.F32.rows8", "F32", 100, 29, rows=8, subgroups=False)
    gemv_case(b, rng, "dense.gemv.F32.dispatch2d", "F32", 8, 65540, rows=1, wg=4, subgroups=False)  # > 65535 workgroups: 2-D grid
    for sg in (True, False):
        gemv_case(b, rng, f"dense.gemv.F16.norm.lastrow.{'subgroup' if sg else 'shared'}", "F16", 320, 41,
                  norm=True, last_row=3, subgroups=sg)
    gemv_case(b, rng, "dense.gemv.F16.norm.f16emul", "F16", 320, 41, norm=True, f16=False)
    gemv_case(b, rng, "dense.gemv.BF16.norm", "BF16", 320, 41, norm=True)
    # sharded: small forced binding size -> 8 shards, the last one short
    gemv_case(b, rng, "dense.gemv.F16.sharded.norm", "F16", 64, 1000, norm=True, max_binding=128 * 128)
    gemv_case(b, rng, "dense.gemv.F32.sharded", "F32", 64, 301, max_binding=256 * 40)
    # 2B4T LM head shard: 16384 rows of 2560 F16 (84 MB), output_norm fused
    gemv_case(b, rng, "dense.gemv.F16.2b4t_lm_head_shard", "F16", 2560, 16384, norm=True)
    for wtype in spec.WTYPES:
        matmul_case(b, rng, f"dense.matmul.{wtype.name}", wtype, 96, 37, 19)
    matmul_case(b, rng, "dense.matmul.F16.f16emul.sharded", "F16", 64, 70, 5, max_binding=128 * 16, f16=False)
    matmul_case(b, rng, "dense.matmul.F32.m1", "F32", 36, 16, 1)
