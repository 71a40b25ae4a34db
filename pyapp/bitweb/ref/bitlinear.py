"""numpy mirror of shaders/bitlinear.wgsl (M=1 GEMV, fused norm / residual / parts / gate+up) and its cases.

Maths (the shader header has the same, with the thread mapping):
    m = x * nw (NORM) or x                      f32
    rinv = 1 / sqrt(sum(x^2) / n + eps)         (NORM)
    f32 activations: S[r] = sum_b d[r,b] * sum_{j in b} w[r,j] m[j];        p = S * (ws * rinv * mult[t])
                     (a format with offsets: + sum_b o[r,b] sum_{j in b} m[j], value = w d + o)
    A8: amax = max|m|, a = amax * rinv, sq = 127 / amax (a >= 1e-5), q = clamp(round(m * sq), -128, 127)
        S[r] = sum_b d[r,b] * sum_{j in b} w[r,j] q[j] (int32) (+ sum_b o[r,b] sum_{j in b} q[j]);
        p = S * (ws * inv_s * mult[t]),
        inv_s = max(a, 1e-5) * f32(1/127)
    Q8B (A8 on a format with Format.vec_dot, ggml's q8_0 / q8_1; q8_blocks): n = (x * rinv) * nw with
        rinv = 1 / sqrt(f32(sum x^2) / n + eps) (f32 sqrt and division), per block c of 32 values
        d = amax / 127, q = clip(rint(n * (127 / amax)), -128, 127), dx = f16(d), sx = f16(d * sum q);
        T[r,c] = (d[r,c] * dx[c]) * f32(I[r,c]) (+ o[r,c] * sx[c]),  p = (sum_c T) * ((ws * 1) * mult)
    y = p, or y = residual + p; gate_up: y = relu(p_gate)^2 * p_up, or silu(p_gate) * p_up.
Weights come from the format's unpack (bitweb.formats: the shared layout spec).

Tolerances (why they are tight). The GPU sums S in an order of its own (lanes, subgroups, trees).
The case data make every such sum exact in f32: x, nw and the block scales d are small dyadic
numbers (x = i/16, |i| <= 15; nw = i/4, 1 <= |i| <= 7; d = i/64, 1 <= i <= 31, fewer for codes
wider than ternary, and offsets o likewise: rand_tensor), so each term
d * w * m (or d * w * q) is a multiple of a common unit and the sum of their magnitudes is below
2^24 units: every partial sum, in any order, is exact. `exact_terms` checks this for every row of
every case (a case that breaks it is refused, not loosened). A8 quantisation is made tie-free: no
127 * m / amax lies within 1e-3 of a .5 boundary (ties are nudged at build time), so the GPU's
127 / amax (WGSL division: 2.5 ulp) rounds every q as numpy does. What remains is the rounding of
the few scalar products after the sum:
    f = ws * stat * mult (2 roundings), p = S * f (1), and with NORM the GPU's rinv:
    ss / n (2.5 ulp) + eps (0.5) under inverseSqrt (2 ulp) -> <= 4 ulp (+1 for amax * rinv in A8).
    So |p_gpu - p| <= C u |p| with u = 2^-24, C = 4 (no NORM) or 12 (NORM).
    gemv:  |y_gpu - y| <= C u max|p| + 2u |y|   (residual add: its own rounding; FMA contraction)
    relu2: rtol = (3C + 4) u (square and product of two such factors)
    silu:  rtol = (C + 2)(1 + B) + 2B + 12) u with B = max|p_gate| (WGSL exp: 3 + 2|x| ulp, division
           2.5 ulp; relative error of silu grows with |x| times that of its argument).
Q8B: the integer sums I and the quantized activations (q, dx, sx) are exact and the same on both
sides (IEEE f32 products, quotients and sqrt, round half to even); the terms T are not exact in f32,
so the sum over the nb blocks of a row is rounded in the GPU's order: |S_gpu - S| <= (nb + 4) u
sum_c |T| (q8_err: 2-3 roundings per term, nb - 1 additions, the final f32); an integer sum off by
one moves S by |d dx w|, far above that bound.
Zero input (A8, all x = 0) exercises the `a < 1e-5` branch: q = 0, y = residual exactly.
"""
from __future__ import annotations

import numpy as np

from bitweb import formats
from bitweb.kernels import bitlinear as spec

U = 2.0 ** -24
F32 = np.float32


# ---- the maths --------------------------------------------------------------------------------
def unpack(fmt, data: bytes, rows: int, n_in: int):
    """-> (w int8 (rows, n_in), d float32 (rows, n_scales) scales per scale_block (1.0 per block for a
    tensor_scale format, I2_S), ws float32 (its tensor scale, else 1.0), o float32 (rows, n_scales)
    offsets of a format with offsets, else None): value = w d + o, times ws."""
    fmt = formats.get(fmt)
    n = rows * n_in
    if not fmt.packed:               # a float format: its values (exact dyadic case data), d = 1 per lane unit
        w = fmt.dequantize(bytes(data[:fmt.nbytes(n)]), n).reshape(rows, n_in)
        return w, np.ones((rows, n_in // spec.block(fmt)), F32), F32(1.0), None
    t, s, m = fmt.unpack(bytes(data[:fmt.nbytes(n)]), n)
    w = t.reshape(rows, n_in)
    if fmt.tensor_scale:
        return w, np.ones((rows, n_in // fmt.block_size), F32), F32(s[0]), None
    o = None if m is None else m.reshape(rows, -1).astype(F32)
    return w, s.reshape(rows, -1).astype(F32), F32(1.0), o


def q8_blocks(x, nw, eps: float, blk: int = 32):
    """ggml-cpu's quantize_row_q8_0 / q8_1 (x86) of n = (x * rinv) * nw (or x) as bitlinear.wgsl
    (Q8B) computes it -> dict: q int32[n_in], dx f32[n_in / 32] (f16(d)), sx f32 (f16(d * sum q)), stat 1."""
    x = np.asarray(x, F32)
    n = x
    if nw is not None:
        ss = F32(np.sum(x.astype(np.float64) ** 2))           # exact for the case data
        rinv = F32(1.0) / np.sqrt(F32(ss / F32(x.size)) + F32(eps))
        n = (x * rinv) * np.asarray(nw, F32)
    nb = n.reshape(-1, blk)
    amax = np.abs(nb).max(axis=1)
    d = amax / F32(127.0)
    with np.errstate(divide="ignore"):
        iv = np.where(amax != 0, F32(127.0) / amax, F32(0.0)).astype(F32)
    q = np.clip(np.rint(nb * iv[:, None]), -128, 127).astype(np.int32)
    sx = (d * q.sum(axis=1).astype(F32)).astype(np.float16).astype(F32)
    return {"m": None, "stat": F32(1.0), "q": q.reshape(-1), "dx": d.astype(np.float16).astype(F32), "sx": sx}


def activations(x, nw, a8: bool, eps: float, fmt=None):
    """-> dict: m (f32), stat (rinv | inv_s, f32), q (int32 or None); with a8 on a format of
    Format.vec_dot (ggml's integer path): q8_blocks's."""
    if a8 and fmt is not None and formats.get(fmt).vec_dot:
        return q8_blocks(x, nw, eps)
    x = np.asarray(x, F32)
    m = x * np.asarray(nw, F32) if nw is not None else x
    rinv = F32(1.0)
    if nw is not None:
        ss = F32(np.sum(x.astype(np.float64) ** 2))           # exact for the case data
        rinv = F32(1.0) / np.sqrt(ss / F32(x.size) + F32(eps))
    if not a8:
        return {"m": m, "stat": rinv, "q": None}
    amax = F32(np.max(np.abs(m)))
    a = F32(amax * rinv)
    sq = F32(127.0) / amax if a >= F32(1e-5) else F32(127e5) * rinv
    q = np.clip(np.round(m * sq), -128, 127).astype(np.int32)
    inv_s = F32(max(a, F32(1e-5)) * F32(1.0 / 127.0))
    return {"m": m, "stat": inv_s, "q": q, "sq": sq}


def row_sums(w, d, act, o=None):
    """S[r] = sum_b d[r,b] sum_{j in b} w[r,j] act[j] (+ o[r,b] sum_{j in b} act[j]) as f32, from
    exact float64 sums (see exact_terms)."""
    rows, n_in = w.shape
    nb = d.shape[1]
    a = act.astype(np.float64).reshape(nb, n_in // nb)
    s = np.empty(rows)
    mag = np.empty(rows)
    for r0 in range(0, rows, 256):
        wb = w[r0:r0 + 256].reshape(-1, nb, n_in // nb).astype(np.float64)
        dd = d[r0:r0 + 256].astype(np.float64)
        s[r0:r0 + 256] = ((wb * a).sum(axis=2) * dd).sum(axis=1)
        mag[r0:r0 + 256] = ((np.abs(wb) * np.abs(a)).sum(axis=2) * dd).sum(axis=1)
        if o is not None:
            oo = o[r0:r0 + 256].astype(np.float64)
            s[r0:r0 + 256] += (a.sum(axis=1) * oo).sum(axis=1)
            mag[r0:r0 + 256] += (np.abs(a).sum(axis=1) * np.abs(oo)).sum(axis=1)
    exact_terms(mag, lsb(a) * lsb(w) * lsb(d if o is None else np.concatenate([d, o], axis=1)))
    return s.astype(F32)


def lsb(v) -> float:
    """The largest power of two that divides every value of v (v dyadic)."""
    v = np.asarray(v)
    if v.dtype.kind in "iu":         # integers (codes): the lowest bit set in any of them (x, -x share it)
        acc = int(np.bitwise_or.reduce(v, axis=None)) if v.size else 0
        return float(acc & -acc) if acc else 1.0
    nz = np.asarray(v, np.float64)
    nz = nz[nz != 0]
    if nz.size == 0:
        return 1.0
    mant, ex = np.frexp(nz)
    mi = (np.abs(mant) * 2.0 ** 53).astype(np.int64)
    tz = np.log2((mi & -mi).astype(np.float64)).astype(np.int64)
    return 2.0 ** float(np.min(ex - 53 + tz))


def exact_terms(mag, unit: float):
    """Refuse case data whose f32 sums could round: each row's terms d * w * act are multiples of
    `unit` (= lsb(act) * lsb(w) * lsb(d): w integer codes, or a float format's dyadic values); with
    sum |terms| < 2^24 units every order of f32 additions is exact."""
    worst = float(np.max(mag, initial=0.0))
    if worst / unit >= 2.0 ** 24:
        raise ValueError(f"case data not exact in f32: sum|terms| = {worst / unit:.3g} units of {unit:g} >= 2^24")


def q8_sums(w, d, o, act):
    """Q8B: (S f32[rows], sum_c |T| float64[rows]) of T[r,c] = (d dx) f32(I) (+ o sx), I exact."""
    rows, n_in = w.shape
    q = act["q"].reshape(-1, 32).astype(np.int64)
    s, mag = np.empty(rows), np.empty(rows)
    for r0 in range(0, rows, 256):
        isum = (w[r0:r0 + 256].reshape(-1, q.shape[0], 32).astype(np.int64) * q).sum(axis=2)
        t = (d[r0:r0 + 256] * act["dx"]) * isum.astype(F32)
        if o is not None:
            t = t + o[r0:r0 + 256] * act["sx"]
        s[r0:r0 + 256] = t.astype(np.float64).sum(axis=1)
        mag[r0:r0 + 256] = np.abs(t.astype(np.float64)).sum(axis=1)
    return s.astype(F32), mag


def part_products(fmt, data, rows, n_in, act, stat, mult, err=None):
    """p for one weight tensor: S * ((ws * stat) * mult). err (Q8B): a list that gets each row's
    bound on |p_gpu - p| (q8_err)."""
    w, d, ws, o = unpack(fmt, data, rows, n_in)
    f = F32(F32(ws * stat) * F32(mult))
    if "dx" in act:
        s, mag = q8_sums(w, d, o, act)
        if err is not None:
            err.append(q8_err(mag, d.shape[1]) * abs(float(f)) + U * np.abs(s * f))
        return s * f
    a = act["q"] if act["q"] is not None else act["m"]
    s = row_sums(w, d, a, o)
    return s * f


def q8_err(mag, nb: int):
    """Q8B: the bound on the GPU's rounding of a row's block sum (module docstring)."""
    return (nb + 4) * U * mag


def gemv(fmt, parts, n_in, x, *, a8, nw=None, mult=None, residual=None, eps=1e-5, err=None, vec_dot=True):
    """parts: [(tensor bytes, rows)]. -> (y, p) f32. err (Q8B): a list, gets the per-row bound of p.
    vec_dot=False: a8 is per-token int8 on every format (the LM head's A8: lmhead.wgsl has no Q8B)."""
    act = activations(x, nw, a8, eps, fmt if vec_dot else None)
    mult = np.ones(len(parts), F32) if mult is None else np.asarray(mult, F32)
    p = np.concatenate([part_products(fmt, data, rows, n_in, act, act["stat"], mult[i], err)
                        for i, (data, rows) in enumerate(parts)])
    y = p if residual is None else (np.asarray(residual, F32) + p).astype(F32)
    return y, p


def gate_up(fmt, gate, up, rows, n_in, x, *, a8, nw=None, mult=None, act="relu2", eps=1e-5, err=None):
    """-> (y, p_gate) f32. err (Q8B): a list, gets one bound on |y_gpu - y| (the products' error
    propagated: |act'(pg)| |pu| e_g + |act(pg)| e_u, act' <= 2 relu(pg) or 1.1 for silu)."""
    a = activations(x, nw, a8, eps, fmt)
    mult = np.ones(2, F32) if mult is None else np.asarray(mult, F32)
    e = []
    pg = part_products(fmt, gate, rows, n_in, a, a["stat"], mult[0], e)
    pu = part_products(fmt, up, rows, n_in, a, a["stat"], mult[1], e)
    y = (ffn_act(pg, act) * pu).astype(F32)
    if e and err is not None:
        eg, eu = e
        slope = 2 * np.maximum(np.abs(pg) + eg, 0) if act == "relu2" else 1.1
        err.append(float(np.max(slope * (np.abs(pu) + eu) * eg + (np.abs(ffn_act(pg, act)) + 1.1 * eg) * eu,
                                initial=0.0)))
    return y, pg


def ffn_act(g, kind: str):
    """The FFN gate activation in f32 (shaders/common_act.wgsl; every mirror's): relu(g)^2 ("relu2") or
    silu(g) = g sigmoid(g) ("silu", sigmoid from exp(-|g|) so that it never overflows)."""
    g = np.asarray(g, F32)
    if kind == "silu":
        e = np.exp(-np.abs(g))
        return (g * np.where(g >= 0, F32(1.0) / (F32(1.0) + e), e / (F32(1.0) + e))).astype(F32)
    r = np.maximum(g, F32(0.0))
    return r * r


# ---- case data ----------------------------------------------------------------------------------
def rand_x(rng, n):
    return (rng.integers(-15, 16, n) / 16.0).astype(F32)


def rand_norm(rng, n):
    return (rng.integers(1, 8, n) * rng.choice([-1, 1], n) / 4.0).astype(F32)


def rand_tensor(rng, fmt, rows, n_in) -> bytes:
    """Random weights in fmt (its random_codes: ternary, signs, or every code of an integer format; a
    float format stores ternary values times i / 64 per row)
    with dyadic scales i / 64 per scale_block (a tensor scale: uniform) and dyadic offsets -j / 64 for
    a format with them (non-positive, as ggml's mins), zero-padded to a multiple of 4 bytes (as
    uploaded). 1 <= i < hi and 0 <= j < hi, hi = max(2, 64 / (max|code| + 1)): i < 32 for ternary /
    binary values, codes up to 15 take i < 4, 5- and 6-bit codes i = 1, so the sums stay exact
    (exact_terms), and a K-quant's super-block stores them exactly (integer multiples of one scale)."""
    n = rows * n_in
    t = fmt.random_codes(rng, n)
    hi = max(2, 64 // (int(np.abs(t.astype(np.int32)).max(initial=1)) + 1))
    if not fmt.packed:             # a float format: ternary values times i / 64 per row, exact in F16 / BF16
        d = rng.integers(1, hi, rows) / 64.0
        data = fmt.quantize((t.reshape(rows, n_in) * d[:, None]).astype(F32))
    elif fmt.tensor_scale:
        data = fmt.pack(t, F32(rng.uniform(0.5, 3.0)))
    elif fmt.offsets:
        d = rng.integers(1, hi, n // fmt.scale_block) / 64.0
        data = fmt.pack(t, d, -rng.integers(0, hi, n // fmt.scale_block) / 64.0)
    else:
        data = fmt.pack(t, rng.integers(1, hi, n // fmt.scale_block) / 64.0)
    return data + bytes(-len(data) % 4)


def untie(x, nw):
    """Nudge x until no 127 * m / amax is within 1e-3 of a rounding boundary (see the docstring)."""
    x = np.array(x, F32)
    for _ in range(100):
        m = (x * nw if nw is not None else x).astype(np.float64)
        amax = np.max(np.abs(m))
        if amax == 0:
            return x
        v = 127.0 * m / amax
        bad = np.abs(np.abs(v - np.floor(v)) - 0.5) < 1e-3
        if not bad.any():
            return x
        x[bad] -= np.sign(x[bad]) / F32(16.0)
    raise ValueError("could not untie the A8 case input")


def tolerance(p, y, norm: bool, act: str | None = None, pg=None):
    """(atol, rtol) as derived in the module docstring."""
    c = 12 if norm else 4
    if act is None:
        return c * U * float(np.max(np.abs(p), initial=0.0)), 2 * U
    if act == "relu2":
        return 0.0, (3 * c + 4) * U
    b = float(np.max(np.abs(pg), initial=0.0))
    return 0.0, ((c + 2) * (1 + b) + 2 * b + 12 + c) * U


def q8_atol(tol, err):
    """(atol, rtol) of a case, widened by the Q8B bound on its block sums (err from gemv / gate_up;
    empty otherwise)."""
    atol, rtol = tol
    if err:
        atol = max(atol, float(max(np.max(e, initial=0.0) for e in err)))
    return atol, rtol


def f32b(a) -> bytes:
    return np.asarray(a, "<f4").tobytes()


def add_case(builder, name, step, buffers):
    """buffers: {name: dict(data=..., expect=..., atol, rtol)} in any order; bound by step.bind
    (a name bound twice gets one buffer; the step's data buffers are added)."""
    buffers = dict({n: dict(data=b) for n, b in step.data.items()}, **buffers)
    order = list(dict.fromkeys(step.bind))
    index = {n: i for i, n in enumerate(order)}
    bufs = [dict(name=n, **buffers[n]) for n in order]
    return builder.add(name, bufs, [step.as_case_step(index)])


def gemv_case(builder, rng, fmt, n_in, rows, *, a8, norm=False, residual=False, mult=None,
              zero=False, label="", **tune):
    fmt = formats.get(fmt)
    rows = (rows,) if isinstance(rows, int) else tuple(rows)
    step = spec.gemv(fmt, n_in, rows, a8=a8, norm=norm, residual=residual, **tune)
    nw = rand_norm(rng, n_in) if norm else None
    x = np.zeros(n_in, F32) if zero else rand_x(rng, n_in)
    if a8:
        x = untie(x, nw)
    ws = [rand_tensor(rng, fmt, r, n_in) for r in rows]
    mult = np.ones(len(rows), F32) if mult is None else np.asarray(mult, F32)
    res = rand_x(rng, sum(rows)) * F32(4.0) if residual else None
    err = []
    y, p = gemv(fmt, list(zip(ws, rows)), n_in, x, a8=a8, nw=nw, mult=mult, residual=res, err=err)
    atol, rtol = q8_atol(tolerance(p, y, norm), err)
    bufs = {"x": dict(data=f32b(x)), "mult": dict(data=f32b(mult)),
            "y": dict(data=f32b(res) if residual else f32b(np.full(sum(rows), np.nan)), expect=f32b(y),
                      atol=atol, rtol=rtol)}
    if norm:
        bufs["norm"] = dict(data=f32b(nw))
    for i, w in enumerate(ws):
        bufs[f"w{i}"] = dict(data=w)
    name = (f"bitlinear.gemv {fmt.name} {'a8' if a8 else 'f32'} {n_in}x{'+'.join(map(str, rows))}"
            f"{' norm' if norm else ''}{' res' if residual else ''}{' zero' if zero else ''} {_tname(tune)}{label}")
    return add_case(builder, name.strip(), step, bufs)


def gate_up_case(builder, rng, fmt, n_in, rows, *, a8, act="relu2", norm=True, mult=None, label="", **tune):
    fmt = formats.get(fmt)
    step = spec.gate_up(fmt, n_in, rows, a8=a8, act=act, norm=norm, **tune)
    nw = rand_norm(rng, n_in) if norm else None
    x = rand_x(rng, n_in)
    if a8:
        x = untie(x, nw)
    wg, wu = rand_tensor(rng, fmt, rows, n_in), rand_tensor(rng, fmt, rows, n_in)
    mult = np.ones(2, F32) if mult is None else np.asarray(mult, F32)
    err = []
    y, pg = gate_up(fmt, wg, wu, rows, n_in, x, a8=a8, nw=nw, mult=mult, act=act, err=err)
    atol, rtol = q8_atol(tolerance(None, y, norm, act, pg), err)
    bufs = {"x": dict(data=f32b(x)), "mult": dict(data=f32b(mult)), "gate": dict(data=wg), "up": dict(data=wu),
            "y": dict(data=f32b(np.full(rows, np.nan)), expect=f32b(y), atol=atol, rtol=rtol)}
    if norm:
        bufs["norm"] = dict(data=f32b(nw))
    name = f"bitlinear.gate_up {fmt.name} {'a8' if a8 else 'f32'} {act} {n_in}x{rows}{'' if norm else ' nonorm'} {_tname(tune)}{label}"
    return add_case(builder, name.strip(), step, bufs)


def part_case(builder, rng, fmt, n_in, rows, y0, *, a8, residual, **tune):
    """The run-time shape variant writing one part of a wider y (q, k or v of qkv): rows y0 ..
    y0 + rows - 1 get p (residual: y + p); the words around them keep their values."""
    fmt = formats.get(fmt)
    step = spec.gemv(fmt, n_in, rows, a8=a8, norm=True, residual=residual, y0=y0, **dict(tune, shape=True))
    nw = rand_norm(rng, n_in)
    x = rand_x(rng, n_in)
    if a8:
        x = untie(x, nw)
    w = rand_tensor(rng, fmt, rows, n_in)
    y_in = rand_x(rng, y0 + rows + 5) * F32(4.0)
    mult = np.asarray([1.25], F32)
    err = []
    part, p = gemv(fmt, [(w, rows)], n_in, x, a8=a8, nw=nw, mult=mult,
                   residual=y_in[y0:y0 + rows] if residual else None, err=err)
    y = y_in.copy()
    y[y0:y0 + rows] = part
    atol, rtol = q8_atol(tolerance(p, part, True), err)
    bufs = {"x": dict(data=f32b(x)), "norm": dict(data=f32b(nw)), "mult": dict(data=f32b(mult)), "w0": dict(data=w),
            "y": dict(data=f32b(y_in), expect=f32b(y), atol=atol, rtol=rtol)}
    name = f"bitlinear.gemv {fmt.name} {'a8' if a8 else 'f32'} {n_in}x{rows} y0={y0}{' res' if residual else ''} {_tname(tune)}"
    return add_case(builder, name, step, bufs)


def shape_cases(builder, rng, fmt, i, few=False):
    """The run-time shape variant (shape=True: n_in, rows, rpw, y0 and the residual add from a
    buffer, n_cap above n_in). Every format: one part into a wider y (the engine's q / k / v, the
    residual add on odd i); the fusions (PARTS3, gate_up, a residual at n_in = n_cap) on two
    formats, modes, reductions and RB rotating with i. few: the browser's scope, 1 case each."""
    blk = spec.block(fmt)
    n = blk * 3
    t = dict(shape=True, n_cap=n + blk, rb=(1, 3, 4, 2)[i % 4], wg=64, **({"subgroups": False} if i % 2 else {}))
    a8 = i % 2 == 0 and fmt.packed
    if few:
        if i % 2 == 0:
            part_case(builder, rng, fmt, n, 11, 13 + i, a8=a8, residual=i % 4 == 2, rpw=4, **t)
        else:
            gate_up_case(builder, rng, fmt, n, 21, a8=True, act="silu", mult=[1.0, 0.5], rpw=16, **t)
        return
    part_case(builder, rng, fmt, n, 11, 13 + i, a8=a8, residual=i % 2 == 1, rpw=4, **t)
    if i < 2:
        gemv_case(builder, rng, fmt, n, (13, 7, 9), a8=a8, norm=True, mult=[0.75, 1.25, 2.0], rpw=8, **t)
        gate_up_case(builder, rng, fmt, n, 21, a8=not a8, act="silu" if i % 2 else "relu2", mult=[1.0, 0.5], rpw=16, **t)
        gemv_case(builder, rng, fmt, n + blk, 29, a8=not a8, norm=True, residual=True, mult=[1.5], rpw=8, **t)


def _tname(tune):
    return " ".join(f"{k}={v}" for k, v in sorted(tune.items()))


SHAPES_2B4T = ((2560, 2560), (2560, 640), (2560, 6912), (6912, 2560))   # (n_in, rows)


def browser_formats() -> list:
    """One format per WGSL include (Q2_0_G128 shares Q2_0's) of the ternary and binary kinds, whose
    browser cases run every fusion: the browser cases stay few. (The integer and float kinds:
    integer_browser.)"""
    return list({f.include: f for f in reversed([f for f in spec.FORMATS if f.a8])}.values())[::-1]


def integer_browser(builder, rng):
    """Every integer format (ggml's block types) and float format in the browser: what SwiftShader's
    engine runs (f32 activations: they take no A8), the run-time shape gemv of one part into a wider
    y (q, k, v, the residual linears) and gate_up; A8 on one of the two in turn for an integer format
    (the kernels run it). SwiftShader's rows per lane group (choose): 1 for A8, 2 for f32."""
    for i, fmt in enumerate(f for f in spec.FORMATS if f.kind in ("integer", "float")):
        blk = spec.block(fmt)
        n = blk * 2
        t = dict(shape=True, n_cap=n + blk, wg=64)
        a8 = fmt.a8 or bool(fmt.vec_dot)
        pa8, ga8 = i % 2 == 1 and a8, i % 2 == 0 and a8
        part_case(builder, rng, fmt, n, 11, 5 + i, a8=pa8, residual=i % 2 == 0, rpw=4, rb=1 if pa8 else 2, **t)
        gate_up_case(builder, rng, fmt, n, 9, a8=ga8, act="silu", mult=[0.5, 1.0], rpw=16, rb=1 if ga8 else 2, **t)


def q8_rows(x, nw, eps: float = 1e-5):
    """spec.q8_rows's output for the rows of x (M, n): (q int8 (M, n), xs f32 (M, n / 32, 2) = (dx, sx)),
    q8_blocks's per row."""
    qs, xs = [], []
    for r in np.asarray(x, F32):
        a = q8_blocks(r, nw, eps)
        qs.append(a["q"].astype(np.int8))
        xs.append(np.stack([a["dx"], a["sx"]], axis=-1))
    return np.stack(qs), np.stack(xs).astype(F32)


def q8_rows_case(builder, rng, n, rows, *, norm=True, wg=64, zero_row=None):
    """The prefill q8 rows (shaders/quant_act.wgsl): bit for bit (exact) the mirror's, which is
    the decode kernel's quantization (q8_blocks). The rows are the cases' dyadic x times 2^k
    (k = -10 .. 6 per row: f16-subnormal d without a norm); zero_row: a row of zeros (d = 0)."""
    x = rand_x(rng, rows * n).reshape(rows, n) * np.exp2(rng.integers(-10, 7, (rows, 1))).astype(F32)
    if zero_row is not None:
        x[zero_row] = 0
    nw = rand_norm(rng, n) if norm else None
    q, xs = q8_rows(x, nw)
    step = spec.q8_rows(n, rows, wg=wg, norm=norm)
    bufs = {"x": dict(data=f32b(x)),
            "q": dict(data=bytes(rows * n), expect=q.tobytes(), dtype="u32"),
            "scale": dict(data=f32b(np.full(rows * n // 16, np.nan)), expect=f32b(xs), atol=0.0, rtol=0.0)}
    if norm:
        bufs["norm"] = dict(data=f32b(nw))
    return add_case(builder, f"bitlinear.q8_rows {rows}x{n}{' norm' if norm else ''} wg={wg}", step, bufs)


def cases(builder, scope: str = "full"):
    rng = np.random.default_rng(1234)
    fmts = list(spec.FORMATS)
    q8_rows_case(builder, np.random.default_rng(7), 96, 5, zero_row=2)
    if scope != "browser":
        q8_rows_case(builder, np.random.default_rng(8), 576, 3, norm=False, wg=32)
    if scope == "browser":
        integer_browser(builder, np.random.default_rng(1235))
        for i, fmt in enumerate(browser_formats()):
            n = fmt.block_size * 3
            gemv_case(builder, rng, fmt, n, (5, 3, 6), a8=i % 2 == 0, norm=True)
            gemv_case(builder, rng, fmt, n, 11, a8=i % 2 == 1, norm=True, residual=True, subgroups=False)
            if i % 2 == 1:
                gemv_case(builder, rng, fmt, n, 4, a8=True, dot4=False)
            gate_up_case(builder, rng, fmt, n, 9, a8=True, act="relu2" if i % 2 else "silu", mult=[0.125, 1.0])
            shape_cases(builder, rng, fmt, i, few=True)
        return
    for fmt in fmts:
        blk = spec.block(fmt)
        n = blk * 3                                  # a multiple of the block, not of 256 for I2_S/Q1_0
        # A8 activations only where the engine takes them (model.a8_linears: Format.a8, the ternary and
        # binary formats); ggml's block types and floats run f32 in either mode
        modes = (False, True) if fmt.a8 else (False,)
        for a8 in modes:
            for sg in (None, False):
                kw = {} if sg is None else {"subgroups": False}
                gemv_case(builder, rng, fmt, n, 37, a8=a8, rpw=8, rb=3, **kw)
                gemv_case(builder, rng, fmt, n, 29, a8=a8, norm=True, residual=True, mult=[1.5], rpw=16, rb=2, **kw)
                gemv_case(builder, rng, fmt, n, (13, 7, 9), a8=a8, norm=True, mult=[0.75, 1.25, 2.0], rpw=6, rb=4, **kw)
                gate_up_case(builder, rng, fmt, n, 21, a8=a8, act="relu2", mult=[1.0, 0.5], rpw=8, rb=1, **kw)
                gate_up_case(builder, rng, fmt, n, 10, a8=a8, act="silu", mult=[0.125, 1.0], rpw=4, rb=2, lanes=8, **kw)
        gemv_case(builder, rng, fmt, n, 12, a8=False, norm=True, xshared=True, rpw=4)
        gemv_case(builder, rng, fmt, blk, 1, a8=False, residual=True, subgroups=False)
        gate_up_case(builder, rng, fmt, n, 7, a8=False, norm=False, subgroups=False, lanes=4, wg=16, rpw=5)
        if fmt.a8:
            gemv_case(builder, rng, fmt, n, 12, a8=True, zero=True, norm=True, residual=True)
            gemv_case(builder, rng, fmt, n, 9, a8=True, wg=32, lanes=32, rpw=3, rb=1)
            gemv_case(builder, rng, fmt, n, 17, a8=True, norm=True, dot4=False, rb=2, rpw=8)
            gemv_case(builder, rng, fmt, blk, (1, 2, 1), a8=True, norm=True, rb=4, rpw=3)
            gate_up_case(builder, rng, fmt, n, 6, a8=True, dot4=False, subgroups=False)
        else:
            gemv_case(builder, rng, fmt, blk, (1, 2, 1), a8=False, norm=True, rb=4, rpw=3)
        if fmt.vec_dot:     # ggml's integer path (Q8B): the variants rotate over the five formats
            k = fmts.index(fmt)
            kw = [{}, {"subgroups": False}, {"dot4": False}, {"subgroups": False, "dot4": False}][k % 4]
            gemv_case(builder, rng, fmt, n, 29, a8=True, norm=True, residual=True, mult=[1.5], rpw=16, rb=2, **kw)
            gemv_case(builder, rng, fmt, n, (13, 7, 9), a8=True, norm=True, mult=[0.75, 1.25, 2.0], rpw=6, rb=4)
            gate_up_case(builder, rng, fmt, n, 21, a8=True, act=("relu2", "silu")[k % 2], mult=[1.0, 0.5], rpw=8,
                         rb=1, **kw)
            gemv_case(builder, rng, fmt, n, 12, a8=True, zero=True, norm=True, residual=True)
    for i, fmt in enumerate(fmts):
        shape_cases(builder, rng, fmt, i)
    # the 2B4T shapes, each once per format (variants and modes rotate); an integer format (ggml's block
    # types, 4-7 times the bytes of a ternary one) takes one of them, in turn, a float one the smallest
    for i, fmt in enumerate(fmts):
        for j, (n_in, rows) in enumerate(SHAPES_2B4T):
            if fmt.kind == "integer" and j != i % len(SHAPES_2B4T) or fmt.kind == "float" and j != 1:
                continue
            a8 = (i + j) % 2 == 0 and (fmt.a8 or bool(fmt.vec_dot))
            kw = {"subgroups": False} if (i + j) % 4 == 3 else {}
            if j % 2:
                kw.update(wg=64, rpw=320, rb=4)        # the CPU-adapter tuning of choose()
            if (n_in, rows) == (2560, 6912) and i % 2 == 0:
                gate_up_case(builder, rng, fmt, n_in, rows, a8=a8, **kw)
            else:
                gemv_case(builder, rng, fmt, n_in, rows, a8=a8, norm=True, residual=j % 2 == 1, **kw)
