"""numpy mirror of shaders/bitlinear_tiled.wgsl (M>1 matmul of the packed formats) and its cases.

Maths (as the shader header):
    f32: S[m, n] = sum_b d[n, b] * sum_{j in b} w[n, j] x[m, j];   P = S * (ws * mult)
         (a format with offsets o, value = w d + o: + sum_b o[n, b] sum_{j in b} x[m, j]; so for A8)
    A8:  S[m, n] = sum_b d[n, b] * sum_{j in b} w[n, j] q[m, j];   P = S * ((ws * s[m]) * mult)
         (s = the rows' inv_s from ops.rmsnorm(a8=True); the decode kernel's formula and order)
    Y = P, or Y = residual + P; gate_up: Y = act(P_gate) * P_up (relu(.)^2 or silu).

(The kernel sums the products (w d) q over j in f32, 16 values at a time: the same S in exact
arithmetic; for I2_S A8 every partial sum is an integer below 2^24, so S is exact on any data; the
pairs path packs rows r and r + 4 as q[r] + 4100 q[r + 4] and splits each 16-value sum back exactly,
for weights -1..1: the same S.)
Tolerances: as in bitweb.ref.bitlinear, the case data make every f32 sum exact in any order
(dyadic x and block scales, integer q; checked per case by `exact_terms`), so only the final
products round: f = ws * mult (1 rounding; A8: (ws * s[m]) * mult, 2), S * f (1)
-> |P_gpu - P| <= C u |P|, C = 4, u = 2^-24; Y adds 2u |Y| for the residual sum;
gate_up: relu2 rtol (3C + 4) u, silu ((C + 2)(1 + B) + 2B + 12 + C) u with B = max|P_gate|.
"""
from __future__ import annotations

import struct

import numpy as np

from bitweb import formats
from bitweb.kernels import bitlinear_tiled as spec
from bitweb.kernels.bitlinear_tiled import FORMATS
from bitweb.ref.bitlinear import (F32, U, add_case, browser_formats, exact_terms, f32b, ffn_act, lsb, q8_err, q8_sums,
                                  rand_tensor, rand_x, unpack)


UNTOUCHED = F32(-777.0)


def sums(w, d, act, o=None):
    """S[m, n] = sum_b d[n, b] sum_{j in b} w[n, j] act[m, j] (+ o[n, b] sum_{j in b} act[m, j])
    (f32 from exact float64), act (M, n_in). One float64 product of act with w * d: every term is
    a multiple of one unit and exact_terms bounds their sum, so every order of the sums is exact."""
    n_out, n_in = w.shape
    nb = d.shape[1]
    blk = n_in // nb
    a = act.astype(np.float64).reshape(-1, n_in)                                 # (M, n_in)
    wd = (w.reshape(n_out, nb, blk) * d.astype(np.float64)[:, :, None]).reshape(n_out, n_in)
    s = a @ wd.T
    mag = np.abs(a) @ np.abs(wd).T
    if o is not None:
        oo = o.astype(np.float64)
        s += a.reshape(-1, nb, blk).sum(axis=2) @ oo.T
        mag += np.abs(a).reshape(-1, nb, blk).sum(axis=2) @ np.abs(oo).T
    exact_terms(mag, lsb(a) * lsb(d if o is None else np.concatenate([d, o], axis=1)))
    return s.astype(F32)


def products(fmt, data, n_out, n_in, act, scale, mult):
    w, d, ws, o = unpack(fmt, data, n_out, n_in)
    if scale is None:
        return sums(w, d, act, o) * F32(ws * F32(mult))
    f = (F32(ws) * np.asarray(scale, F32) * F32(mult)).astype(F32)       # per row, left to right in f32
    return (sums(w, d, act, o) * f[:, None]).astype(F32)


def matmul(fmt, data, n_out, n_in, act, *, scale=None, mult=1.0, residual=None):
    """act: x f32 (M, n_in), or q int (M, n_in) with scale inv_s f32[M] (A8). -> (Y, P)."""
    p = products(fmt, data, n_out, n_in, act, scale, mult)
    return (p if residual is None else (np.asarray(residual, F32) + p).astype(F32)), p


def gate_up(fmt, gate, up, n_out, n_in, act, *, scale=None, mult=(1.0, 1.0), act_fn="relu2"):
    pg = products(fmt, gate, n_out, n_in, act, scale, mult[0])
    pu = products(fmt, up, n_out, n_in, act, scale, mult[1])
    return (ffn_act(pg, act_fn) * pu).astype(F32), pg


def _params(m):
    return struct.pack("<8I", m, 0, 0, 0, 0, 0, 0, 0)


def _inputs(rng, m_max, m, n_in, a8, extreme=False):
    """Buffers for the activations (sized for m_max rows, the first m used) and the act array.
    extreme: A8 rows at the pairs path's bound (with extreme_tensor): rows 8 i .. 8 i + 3 all -128
    (plane sums +-2048), rows 8 i + 4 .. 8 i + 7 (their pair partners) -128 but -127 at every 16th
    value (odd plane sums +-2047: a split of P at PB = 4096 would round half to even, wrongly)."""
    if a8:
        q = rng.integers(-128, 128, (m_max, n_in)).astype(np.int8)
        if extreme:
            q[:] = -128
            hi = (np.arange(m_max) // 4) % 2 == 1
            q[np.ix_(hi, np.arange(0, n_in, 16))] = -127
        s = rng.uniform(1 / 200, 1 / 20, m_max).astype(F32)                  # inv_s
        return {"q": dict(data=q.tobytes()), "scale": dict(data=f32b(s))}, q[:m].astype(np.int32), s[:m]
    x = rand_x(rng, m_max * n_in).reshape(m_max, n_in)
    return {"x": dict(data=f32b(x))}, x[:m], None


def _tol(p, act=None, pg=None):
    c = 4
    if act is None:
        return c * U * float(np.max(np.abs(p), initial=0.0)), 2 * U
    if act == "relu2":
        return 0.0, (3 * c + 4) * U
    b = float(np.max(np.abs(pg), initial=0.0))
    return 0.0, ((c + 2) * (1 + b) + 2 * b + 12 + c) * U


def extreme_tensor(fmt, rows, n_in):
    """I2_S weights that make every plane sum of an extreme row reach +-2048: output rows alternately
    all -1 and all +1 (and one all 0)."""
    t = np.ones((rows, n_in), np.int8)
    t[::2] = -1
    t[-1] = 0
    data = fmt.pack(t.ravel(), F32(1.25))
    return data + bytes(-len(data) % 4)


def matmul_case(builder, rng, fmt, n_in, n_out, m, m_max, *, a8, residual=False, mult=1.0, extreme=False, **tune):
    """tune may hold y_stride / y_col0: y is then (m_max, y_stride) and only columns y_col0 .. +n_out change.
    extreme: A8 rows and I2_S weights at the pairs path's bound (extreme_tensor)."""
    fmt = formats.get(fmt)
    step = spec.matmul(fmt, n_in, n_out, m_max, a8=a8, residual=residual, **tune)
    stride, col0 = tune.get("y_stride") or n_out, tune.get("y_col0", 0)
    bufs, act, scale = _inputs(rng, m_max, m, n_in, a8, extreme)
    w = extreme_tensor(fmt, n_out, n_in) if extreme else rand_tensor(rng, fmt, n_out, n_in)
    res = (rand_x(rng, m_max * stride) * F32(4.0)).reshape(m_max, stride) if residual else None
    cols = slice(col0, col0 + n_out)
    y, p = matmul(fmt, w, n_out, n_in, act, scale=scale, mult=mult, residual=None if res is None else res[:m, cols])
    atol, rtol = _tol(p)
    # rows m..m_max of y are past M and columns outside the slice: they must be left untouched
    # (a finite marker: NaN never compares equal)
    init = res if residual else np.full((m_max, stride), UNTOUCHED, F32)
    exp = np.array(init, F32)
    exp[:m, cols] = y
    bufs.update({"params": dict(data=_params(m)), "mult": dict(data=f32b([mult])), "w": dict(data=w),
                 "y": dict(data=f32b(init), expect=f32b(exp), atol=atol, rtol=rtol)})
    name = (f"bitlinear_tiled.matmul {fmt.name} {'a8' if a8 else 'f32'} {n_in}x{n_out} M={m}/{m_max}"
            f"{' res' if residual else ''}{' extreme' if extreme else ''} " + " ".join(f"{k}={v}" for k, v in sorted(tune.items())))
    return add_case(builder, name.strip(), step, bufs)


def _gate_up_buffers(bufs, m, m_max, y, pg, act, mult, wg, wu):
    """A gate_up case's weights, multipliers and y: the expected first m rows (within _tol of the
    activation's roundings), the rows past M left untouched."""
    atol, rtol = _tol(None, act, pg)
    init = np.full((m_max, y.shape[1]), UNTOUCHED, F32)
    exp = np.array(init)
    exp[:m] = y
    bufs.update({"params": dict(data=_params(m)), "mult": dict(data=f32b(mult)), "gate": dict(data=wg),
                 "up": dict(data=wu), "y": dict(data=f32b(init), expect=f32b(exp), atol=atol, rtol=rtol)})


def gate_up_case(builder, rng, fmt, n_in, n_out, m, m_max, *, a8, act="relu2", mult=(1.0, 1.0), **tune):
    fmt = formats.get(fmt)
    step = spec.gate_up(fmt, n_in, n_out, m_max, a8=a8, act=act, **tune)
    bufs, a, scale = _inputs(rng, m_max, m, n_in, a8)
    wg, wu = rand_tensor(rng, fmt, n_out, n_in), rand_tensor(rng, fmt, n_out, n_in)
    y, pg = gate_up(fmt, wg, wu, n_out, n_in, a, scale=scale, mult=mult, act_fn=act)
    _gate_up_buffers(bufs, m, m_max, y, pg, act, mult, wg, wu)
    name = (f"bitlinear_tiled.gate_up {fmt.name} {'a8' if a8 else 'f32'} {act} {n_in}x{n_out} M={m}/{m_max} "
            + " ".join(f"{k}={v}" for k, v in sorted(tune.items())))
    return add_case(builder, name.strip(), step, bufs)


# ---- q8 (Q8B): ggml's q8 rows on a Format.vec_dot format --------------------------------------------
def q8_inputs(rng, m_max, m, n_in):
    """Random q8 rows as bitlinear.q8_rows writes them: q int8, dx an f16 per block, sx = f16(dx sum q)
    -> (buffers, the first m rows as q8_blocks dicts)."""
    nb = n_in // 32
    q = rng.integers(-128, 128, (m_max, n_in)).astype(np.int8)
    dx = rng.uniform(1 / 512, 1 / 16, (m_max, nb)).astype(np.float16).astype(F32)
    sx = (dx * q.reshape(m_max, nb, 32).sum(axis=2).astype(F32)).astype(np.float16).astype(F32)
    bufs = {"q": dict(data=q.tobytes()), "scale": dict(data=f32b(np.stack([dx, sx], axis=-1)))}
    return bufs, [{"q": q[r].astype(np.int32), "dx": dx[r], "sx": sx[r]} for r in range(m)]


def q8_products(fmt, data, n_out, n_in, acts, mult):
    """P (M, n_out) = S * (ws * mult), S the sum over blocks of (dw dx) I (+ mw sx) with I the exact
    integer sums (q8_sums); and its bound (M, n_out) on |P_gpu - P| (the blocks summed in f32 in
    another order: q8_err; one block: 0, P is bit for bit)."""
    w, d, ws, o = unpack(fmt, data, n_out, n_in)
    f = F32(F32(ws) * F32(mult))
    p, err = [], []
    for a in acts:
        sm, mag = q8_sums(w, d, o, a)
        p.append((sm * f).astype(F32))
        err.append(0.0 * mag if d.shape[1] == 1 else q8_err(mag, d.shape[1]) * abs(float(f)) + U * np.abs(sm * f))
    return np.stack(p), np.stack(err)


def q8_matmul_case(builder, rng, fmt, n_in, n_out, m, m_max, *, residual=False, mult=1.0, **tune):
    """Q8B matmul: one block (n_in 32) bit for bit, more blocks within q8_err."""
    fmt = formats.get(fmt)
    step = spec.matmul(fmt, n_in, n_out, m_max, a8=True, q8=True, residual=residual, **tune)
    bufs, acts = q8_inputs(rng, m_max, m, n_in)
    w = rand_tensor(rng, fmt, n_out, n_in)
    p, err = q8_products(fmt, w, n_out, n_in, acts, mult)
    init = (rand_x(rng, m_max * n_out) * F32(4.0)).reshape(m_max, n_out) if residual else np.full((m_max, n_out), UNTOUCHED, F32)
    exp = np.array(init, F32)
    exp[:m] = (init[:m] + p).astype(F32) if residual else p
    # (residual: y + P rounds as the mirror does when P is bit for bit; else one more rounding)
    atol = float(np.max(err + (2 * U * np.abs(exp[:m]) if residual and n_in > 32 else 0.0), initial=0.0))
    bufs.update({"params": dict(data=_params(m)), "mult": dict(data=f32b([mult])), "w": dict(data=w),
                 "y": dict(data=f32b(init), expect=f32b(exp), atol=atol, rtol=0.0)})
    name = (f"bitlinear_tiled.matmul {fmt.name} q8 {n_in}x{n_out} M={m}/{m_max}{' res' if residual else ''} "
            + " ".join(f"{k}={v}" for k, v in sorted(tune.items())))
    return add_case(builder, name.strip(), step, bufs)


def q8_gate_up_case(builder, rng, fmt, n_in, n_out, m, m_max, *, act="silu", mult=(1.0, 1.0), **tune):
    """Q8B gate_up on one block (n_in 32: P bit for bit), so only the activation rounds (_tol)."""
    fmt = formats.get(fmt)
    assert n_in == 32, "one block: the products are exact"
    step = spec.gate_up(fmt, n_in, n_out, m_max, a8=True, q8=True, act=act, **tune)
    bufs, acts = q8_inputs(rng, m_max, m, n_in)
    wg, wu = rand_tensor(rng, fmt, n_out, n_in), rand_tensor(rng, fmt, n_out, n_in)
    pg, _ = q8_products(fmt, wg, n_out, n_in, acts, mult[0])
    pu, _ = q8_products(fmt, wu, n_out, n_in, acts, mult[1])
    _gate_up_buffers(bufs, m, m_max, (ffn_act(pg, act) * pu).astype(F32), pg, act, mult, wg, wu)
    name = (f"bitlinear_tiled.gate_up {fmt.name} q8 {act} {n_in}x{n_out} M={m}/{m_max} "
            + " ".join(f"{k}={v}" for k, v in sorted(tune.items())))
    return add_case(builder, name.strip(), step, bufs)


def q8_cases(builder, scope):
    """The int8 tile (Q8B) on ggml's integer formats: few distinct pipelines (each costs a compile)."""
    rng = np.random.default_rng(4323)
    q8_matmul_case(builder, rng, formats.Q4_1, 32, 19, 5, 8, residual=True, rq=2, nq=2, wg=4)   # bit for bit
    if scope == "browser":
        return
    # dot4=False: the f32-sum sibling (the device's choice on CPU rasterisers); the others take the
    # device's DOT4 define (dot4I8Packed where it has it)
    q8_matmul_case(builder, rng, formats.Q4_1, 96, 70, 11, 16, mult=1.5, rq=4, nq=2, wg=8, dot4=False)
    q8_gate_up_case(builder, rng, formats.Q4_1, 32, 20, 9, 12, act="silu", mult=(0.5, 2.0), rq=4, nq=1, wg=4)
    q8_matmul_case(builder, rng, formats.Q4_0, 64, 33, 3, 3, residual=True, rq=1, nq=1, wg=16, subgroups=False,
                   dot4=False)
    for fmt in (formats.Q5_0, formats.Q5_1, formats.Q8_0):
        q8_matmul_case(builder, rng, fmt, 64, 24, 7, 8, rq=2, nq=2, wg=4)


def cases(builder, scope: str = "full"):
    rng = np.random.default_rng(4321)
    fmts = list(FORMATS)
    if scope == "browser":
        for i, fmt in enumerate(browser_formats()):
            n = fmt.block_size * 2
            matmul_case(builder, rng, fmt, n, 37, 5, 8, a8=i % 2 == 0, residual=True, rq=1, nq=4 if i == 0 else 2, wg=8)
        # every integer format (ggml's block types: f32 rows, the engine's mode for them), SwiftShader's tile
        irng = np.random.default_rng(4322)
        for i, fmt in enumerate(f for f in fmts if f.kind == "integer"):
            matmul_case(builder, irng, fmt, fmt.block_size * 2, 19, 5, 8, a8=False, residual=i % 2 == 0, rq=4, nq=2, wg=4)
        gate_up_case(builder, rng, formats.I2_S, 256, 19, 3, 4, a8=True, act="relu2", rq=1, nq=1, wg=4)
        matmul_case(builder, rng, formats.I2_S, 256, 23, 10, 16, a8=True, residual=True, rq=4, nq=2, wg=8, pairs=True)
        matmul_case(builder, rng, formats.TQ1_0, 256, 21, 6, 8, a8=True, rq=2, nq=2, wg=4, subgroups=False)
        q8_cases(builder, scope)
        return
    for fmt in fmts:
        n = fmt.block_size * 3
        for a8 in (False, True) if fmt.a8 else (False,):     # (A8: model.a8_linears' formats only)
            matmul_case(builder, rng, fmt, n, 70, 11, 16, a8=a8, rq=2, nq=4 if a8 and fmt is formats.TQ1_0 else 2, wg=8)  # M tile past M
            matmul_case(builder, rng, fmt, n, 33, 3, 3, a8=a8, residual=True, mult=1.5, rq=1, nq=1, wg=16)
            gate_up_case(builder, rng, fmt, n, 45, 9, 12, a8=a8, act="relu2", mult=(0.5, 2.0), rq=4 if a8 else 2,
                         nq=2, wg=4)
            gate_up_case(builder, rng, fmt, n, 20, 2, 2, a8=a8, act="silu", mult=(0.125, 1.0), rq=1, nq=1, wg=4)
    for i, fmt in enumerate(fmts):                 # 2B4T-sized rows, a few tokens
        n_in, n_out = ((2560, 640), (6912, 2560), (2560, 2560), (2560, 6912))[i % 4]
        matmul_case(builder, rng, fmt, n_in, n_out, 7, 8, a8=i % 2 == 0 and fmt.a8, residual=i % 2 == 1)
        matmul_case(builder, rng, fmt, fmt.block_size, 9, 13, 16, a8=fmt.a8, rq=4, nq=2, wg=4, subgroups=False)
        matmul_case(builder, rng, fmt, fmt.block_size, 1, 1, 2, a8=False, rq=1, nq=1, wg=4)
        matmul_case(builder, rng, fmt, fmt.block_size * 2, 24, 5, 6, a8=fmt.a8, residual=True, rq=3, nq=1, wg=4,
                    y_stride=60, y_col0=19)
    # lavapipe's wide-tile paths (bitlinear_tiled.choose): pairs (I2_S: two rows per f32) and octets
    # (8 subgroup lanes share the activation loads: these cases need subgroups of a multiple of 8
    # lanes, as lavapipe's and GPUs'; SwiftShader's 4-lane subgroups never take them, nor the browser cases)
    octets = True
    for fmt in (f for f in fmts if spec.octets_fit(f) and f.a8):
        matmul_case(builder, rng, fmt, fmt.block_size * 3, 70, 11, 16, a8=True, rq=4, nq=4, wg=16, octets=True,
                    pairs=spec.pairs_fit(fmt))
    matmul_case(builder, rng, formats.I2_S, 384, 40, 14, 16, a8=True, residual=True, mult=1.5, rq=4, nq=4, wg=16,
                pairs=True, octets=octets, y_stride=50, y_col0=7)
    matmul_case(builder, rng, formats.I2_S, 256, 9, 5, 8, a8=True, rq=2, nq=1, wg=4, pairs=True)
    matmul_case(builder, rng, formats.I2_S, 512, 21, 16, 16, a8=True, rq=4, nq=4, wg=8, pairs=True, extreme=True)
    matmul_case(builder, rng, formats.I2_S, 256, 18, 7, 8, a8=True, rq=4, nq=3, wg=4, pairs=True, subgroups=False)
    gate_up_case(builder, rng, formats.I2_S, 384, 45, 9, 16, a8=True, act="relu2", mult=(0.5, 2.0), rq=4, nq=4, wg=16,
                 pairs=True, octets=octets)
    q8_cases(builder, scope)
