"""ggml's K-quant encoders in numpy: quantize_row_q{2,3,4,5,6}_K_ref, ported operation by operation.

Every float operation is float32 in ggml's order (a group's sums run value by value, as the C loops
do; products are rounded before they are added, as a build without FMA contraction computes them),
so the bytes equal ggml's: dev/formats/ggml_check.py compares them through ctypes with libggml-base,
and tests/test_blockquant.py against vectors it saved. Vectorized across groups: the Python loops run
over the 16 or 32 values of a group and over the search steps, each operation on every group at once.

The searches (names as in ggml-quants.c):
  make_qkx2_quants (Q2_K, Q4_K, Q5_K)  codes 0..nmax, w = scale*l - min: weighted least squares scale
      and min at nstep + 1 trial inverse scales (rmin + rdelta*is + nmax) / (max - min), min being the
      best trial's so far; keeps the one with the least weighted error (|error| for Q2_K, error^2 for Q4_K / Q5_K)
  make_q3_quants (Q3_K)  codes -nmax..nmax-1 at scale -nmax / max, then up to 5 passes of one-value
      changes that raise (sum w x l)^2 / (sum w l^2), w = x^2
  make_qx_quants (Q6_K, rmse_type 1)  codes -nmax..nmax-1: the best of 19 trial scales
      -(nmax + 0.1 is) / max, is = -9..9, by (sum w x l)^2 / (sum w l^2), w = x^2
Then each super-block's group scales (and mins) are quantized (4 bits in Q2_K, 6 in Q3_K / Q4_K /
Q5_K, int8 in Q6_K) against one fp16 d (and dmin), and every code is recomputed from its group's
quantized scale. Inputs are [n_blocks, 256] float32, finite (IntegerFormat.quantize checks); outputs are
[n_blocks, type_size] uint8.
"""
from __future__ import annotations

from bitweb.formats.base import _np

GROUP_MAX_EPS = 1e-15           # ggml: a group whose largest |x| is below this quantizes to zeros


def nearest_int(v):
    """ggml's nearest_int: add 1.5 * 2^23 in float32, read the mantissa (round half to even for
    |v| < 2^22; outside it the same bits as ggml, which asserts only in debug builds)."""
    np = _np()
    t = (np.asarray(v, dtype=np.float32) + np.float32(12582912.0)).view(np.int32)
    return (t & 0x007FFFFF) - 0x00400000


def to_f16(v):
    """float32 [n] -> uint8 [n, 2], little-endian IEEE half, round to nearest even (GGML_FP32_TO_FP16)."""
    np = _np()
    return np.asarray(v, dtype=np.float32).reshape(-1).astype("<f2").view(np.uint8).reshape(-1, 2)


def _f16_value(v):
    """What ggml reads back from a stored fp16 (GGML_FP16_TO_FP32(GGML_FP32_TO_FP16(v)))."""
    np = _np()
    return np.asarray(v, dtype=np.float32).astype(np.float16).astype(np.float32)


def _int8(v):
    """int -> int8 as a C store does (two's complement wrap)."""
    np = _np()
    return ((np.asarray(v, dtype=np.int64) + 128) & 0xFF).astype(np.int16) - 128


def _first_absmax(x):
    """The value of largest |x| per row, the first one on ties (ggml's `if (ax > amax)` scan)."""
    np = _np()
    return np.take_along_axis(x, np.abs(x).argmax(axis=1)[:, None], axis=1)[:, 0]


def _max_positive(v):
    """max(0, v...) per row as ggml's `if (v > m) m = v` from m = 0 (+0.0 when none is positive)."""
    np = _np()
    return np.where(v > 0, v, np.float32(0)).max(axis=1)


# ---- the searches ---------------------------------------------------------------------------------

def _weighted_error(scale, lo, L, x, w, use_mad):
    """sum_i w_i * e_i, e = |scale*L + min - x| (use_mad) or its square, summed value by value."""
    np = _np()
    err = np.zeros(x.shape[0], np.float32)
    for i in range(x.shape[1]):
        diff = (scale * L[:, i].astype(np.float32) + lo) - x[:, i]
        err = err + w[:, i] * (np.abs(diff) if use_mad else diff * diff)
    return err


def make_qkx2_quants(x, w, nmax, rmin, rdelta, nstep, use_mad):
    """x, w: [groups, n] float32 -> (scale [groups], the_min [groups] (>= 0), L [groups, n] int32 in
    0..nmax); x ~ scale * L - the_min."""
    np = _np()
    f = np.float32
    n = x.shape[1]
    lo, hi = x[:, 0].copy(), x[:, 0].copy()
    sum_w = w[:, 0].copy()
    sum_x = sum_w * x[:, 0]
    for i in range(1, n):
        xi, wi = x[:, i], w[:, i]
        lo = np.where(xi < lo, xi, lo)
        hi = np.where(xi > hi, xi, hi)
        sum_w = sum_w + wi
        sum_x = sum_x + wi * xi
    lo = np.where(lo > 0, f(0), lo)
    flat = hi == lo
    iscale = f(nmax) / np.where(flat, f(1), hi - lo)
    scale = f(1) / iscale
    L = np.clip(nearest_int(iscale[:, None] * (x - lo[:, None])), 0, nmax)
    best = _weighted_error(scale, lo, L, x, w, use_mad)
    zero = np.zeros(x.shape[0], f)
    for step in range(nstep + 1):          # each trial starts from the min of the best one so far
        span = np.where(flat, f(1), hi - lo)
        iscale = ((f(rmin) + f(rdelta) * f(step)) + f(nmax)) / span
        laux = np.clip(nearest_int(iscale[:, None] * (x - lo[:, None])), 0, nmax)
        lf = laux.astype(f)
        sum_l, sum_l2, sum_xl = zero, zero, zero
        for i in range(n):
            wl = w[:, i] * lf[:, i]
            sum_l = sum_l + wl
            sum_l2 = sum_l2 + wl * lf[:, i]
            sum_xl = sum_xl + wl * x[:, i]
        D = sum_w * sum_l2 - sum_l * sum_l
        this_scale = (sum_w * sum_xl - sum_x * sum_l) / D
        this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D
        pos = this_min > 0
        this_min = np.where(pos, f(0), this_min)
        this_scale = np.where(pos, sum_xl / sum_l2, this_scale)
        cur = _weighted_error(this_scale, this_min, laux, x, w, use_mad)
        better = (D > 0) & (cur < best)
        L = np.where(better[:, None], laux, L)
        best = np.where(better, cur, best)
        scale = np.where(better, this_scale, scale)
        lo = np.where(better, this_min, lo)
    return np.where(flat, f(0), scale), -lo, np.where(flat[:, None], 0, L)


def make_q3_quants(x, nmax):
    """x: [groups, n] -> (scale [groups], L [groups, n] in 0..2 nmax - 1 (code + nmax; all 0 for a
    zero group)); ggml's make_q3_quants with do_rmse."""
    np = _np()
    f = np.float32
    n = x.shape[1]
    mx = _first_absmax(x)
    zero = np.abs(mx) < f(GROUP_MAX_EPS)
    iscale = f(-nmax) / np.where(zero, f(1), mx)
    L = np.clip(nearest_int(iscale[:, None] * x), -nmax, nmax - 1)
    w = x * x
    wx = w * x
    sumlx = suml2 = np.zeros(x.shape[0], f)
    for i in range(n):
        lf = L[:, i].astype(f)
        sumlx = sumlx + wx[:, i] * lf
        suml2 = suml2 + (w[:, i] * lf) * lf
    for _ in range(5):
        changed = False
        for i in range(n):
            li = L[:, i].astype(f)
            slx = sumlx - wx[:, i] * li
            sl2 = suml2 - (w[:, i] * li) * li
            new = np.clip(nearest_int((x[:, i] * sl2) / slx), -nmax, nmax - 1)
            nf = new.astype(f)
            slx2 = slx + wx[:, i] * nf
            sl22 = sl2 + (w[:, i] * nf) * nf
            take = (slx > 0) & (new != L[:, i]) & (sl22 > 0) & ((slx2 * slx2) * suml2 > (sumlx * sumlx) * sl22)
            L[:, i] = np.where(take, new, L[:, i])
            sumlx = np.where(take, slx2, sumlx)
            suml2 = np.where(take, sl22, suml2)
            changed = changed or bool(take.any())
        if not changed:         # a pass that changes nothing would change nothing again
            break
    scale = np.where(suml2 > 0, sumlx / suml2, f(0))
    return np.where(zero, f(0), scale), np.where(zero[:, None], 0, L + nmax)


def make_qx_quants(x, nmax):
    """x: [groups, n] -> (scale [groups], L [groups, n] in 0..2 nmax - 1 (code + nmax; all 0 for a
    zero group)); ggml's make_qx_quants with rmse_type 1 and no importance weights."""
    np = _np()
    f = np.float32
    mx = _first_absmax(x)
    zero = np.abs(mx) < f(GROUP_MAX_EPS)
    mx = np.where(zero, f(1), mx)
    w = x * x
    wx = w * x

    def trial(iscale):
        L = np.clip(nearest_int(iscale[:, None] * x), -nmax, nmax - 1)
        sumlx = suml2 = np.zeros(x.shape[0], f)
        for i in range(x.shape[1]):
            lf = L[:, i].astype(f)
            sumlx = sumlx + wx[:, i] * lf
            suml2 = suml2 + (w[:, i] * lf) * lf
        return L, sumlx, suml2

    L, sumlx, suml2 = trial(f(-nmax) / mx)
    scale = np.where(suml2 != 0, sumlx / suml2, f(0))
    best = scale * sumlx
    for step in range(-9, 10):
        if step == 0:
            continue
        Lt, sumlx, suml2 = trial(-(f(nmax) + f(0.1) * f(step)) / mx)
        take = (suml2 > 0) & (sumlx * sumlx > best * suml2)
        L = np.where(take[:, None], Lt, L)
        scale = np.where(take, sumlx / suml2, scale)
        best = np.where(take, scale * sumlx, best)
    return np.where(zero, f(0), scale), np.where(zero[:, None], 0, L + nmax)


# ---- packing --------------------------------------------------------------------------------------

def _pack_crumbs(L):
    """[n, 256] codes 0..3 -> [n, 64] bytes: value 128h + 32l + m in bits 2l+1:2l of byte 32h + m."""
    np = _np()
    L = L.astype(np.uint8).reshape(-1, 2, 4, 32)
    return (L[:, :, 0] | (L[:, :, 1] << 2) | (L[:, :, 2] << 4) | (L[:, :, 3] << 6)).reshape(-1, 64)


def _pack_scale_min_k4(ls, lm):
    """6-bit scales and mins [n, 8] -> the 12 bytes Q4_K / Q5_K store them in."""
    np = _np()
    ls, lm = ls.astype(np.uint8), lm.astype(np.uint8)
    lo = ls[:, :4] | ((ls[:, 4:] >> 4) << 6)
    hi = lm[:, :4] | ((lm[:, 4:] >> 4) << 6)
    mix = (ls[:, 4:] & 15) | ((lm[:, 4:] & 15) << 4)
    return np.concatenate([lo, hi, mix], axis=1)


def _pack_q3k_scales(l6):
    """Q3_K's 16 scales + 32 (0..63) [n, 16] -> 12 bytes: low 4 bits of unit u in scales[u % 8]
    (low nibble for u < 8), bits 5:4 in scales[8 + u % 4] at bit 2 (u // 4)."""
    np = _np()
    l6 = l6.astype(np.uint8)
    low = (l6[:, :8] & 15) | ((l6[:, 8:] & 15) << 4)
    high = (l6 >> 4).reshape(-1, 4, 4) << np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 4, 1)
    return np.concatenate([low, np.bitwise_or.reduce(high, axis=1)], axis=1)


def _bitplane(bits):
    """[n, n_bits, 32] booleans -> [n, 32] bytes, bit j of byte m = bits[:, j, m]."""
    np = _np()
    return np.packbits(bits.transpose(0, 2, 1).astype(np.uint8), axis=2, bitorder="little").reshape(-1, 32)


def _unbitplane(b):
    """[n, 32] bytes -> [n, 8, 32] bits (0 / 1 uint8), [:, j, m] = bit j of byte m (_bitplane's inverse)."""
    np = _np()
    return np.unpackbits(b, axis=1, bitorder="little").reshape(-1, 32, 8).transpose(0, 2, 1)


def _nibble_pairs(b):
    """bytes [..., m] -> [..., 2, m]: the low nibbles, then the high ones."""
    np = _np()
    return np.stack([b & 15, b >> 4], axis=-2)


def _pack_nibble_pairs(c):
    """codes 0..15 [..., 2, m] -> bytes [..., m] (_nibble_pairs' inverse)."""
    return c[..., 0, :] | (c[..., 1, :] << 4)


# ---- the encoders ---------------------------------------------------------------------------------

def quantize_q2_k(x):
    """quantize_row_q2_K_ref: 16 groups of 16, make_qkx2_quants(nmax 3, weights |x|, rmin -0.5,
    rdelta 0.1, 15 steps, |error|); 4-bit scales and mins against fp16 d = max scale / 15, dmin =
    max min / 15. Bytes: scales[16] (scale | min << 4), qs[64], d, dmin."""
    np = _np()
    f = np.float32
    nb = x.shape[0]
    xs = x.reshape(-1, 16)
    scales, mins, L = make_qkx2_quants(xs, np.abs(xs), 3, -0.5, 0.1, 15, True)
    scales, mins, L = scales.reshape(nb, 16), mins.reshape(nb, 16), L.reshape(nb, 256)
    max_scale, max_min = _max_positive(scales), _max_positive(mins)
    has_s, has_m = max_scale > 0, max_min > 0
    ls = nearest_int((f(15) / np.where(has_s, max_scale, f(1)))[:, None] * scales) & 0xFF
    sc = np.where(has_s[:, None], ls, 0)
    lm = nearest_int((f(15) / np.where(has_m, max_min, f(1)))[:, None] * mins)
    sc = np.where(has_m[:, None], (sc | (lm << 4)) & 0xFF, sc)
    d = np.where(has_s, max_scale / f(15), f(0))
    dmin = np.where(has_m, max_min / f(15), f(0))
    dq = (_f16_value(d)[:, None] * (sc & 15).astype(f))[:, :, None]
    dm = (_f16_value(dmin)[:, None] * (sc >> 4).astype(f))[:, :, None]
    new = np.clip(nearest_int((x.reshape(nb, 16, 16) + dm) / dq), 0, 3)
    L = np.where(dq != 0, new, L.reshape(nb, 16, 16))
    return np.concatenate([sc.astype(np.uint8), _pack_crumbs(L), to_f16(d), to_f16(dmin)], axis=1)


def quantize_q3_k(x):
    """quantize_row_q3_K_ref: 16 groups of 16, make_q3_quants(nmax 4); signed 6-bit scales against
    fp16 d = -(max-|scale| scale) / 32. Bytes: hmask[32], qs[64] (low 2 bits), scales[12], d."""
    np = _np()
    f = np.float32
    nb = x.shape[0]
    scales, L = make_q3_quants(x.reshape(-1, 16), 4)
    scales, L = scales.reshape(nb, 16), L.reshape(nb, 16, 16)
    max_scale = _first_absmax(scales)
    has = max_scale != 0
    iscale = f(-32) / np.where(has, max_scale, f(1))
    l6 = np.where(has[:, None], np.clip(_int8(nearest_int(iscale[:, None] * scales)), -32, 31) + 32, 0)
    d = np.where(has, f(1) / iscale, f(0))
    dq = (_f16_value(d)[:, None] * (l6 - 32).astype(f))[:, :, None]
    new = np.clip(nearest_int(x.reshape(nb, 16, 16) / dq), -4, 3) + 4
    L = np.where(dq != 0, new, L).reshape(nb, 256)
    high = L > 3
    hmask = _bitplane(high.reshape(nb, 8, 32))
    return np.concatenate([hmask, _pack_crumbs(np.where(high, L - 4, L)), _pack_q3k_scales(l6), to_f16(d)], axis=1)


def _quantize_k_asym(x, nmax, rmin, nstep):
    """Q4_K / Q5_K's shared part: 8 groups of 32, weights sqrt(mean x^2) + |x|, make_qkx2_quants
    (rdelta 0.1, error^2); 6-bit scales and mins against fp16 d = max scale / 63, dmin = max min / 63.
    Returns (L [nb, 256] codes, the 12 scale bytes, d bytes, dmin bytes)."""
    np = _np()
    f = np.float32
    nb = x.shape[0]
    xs = x.reshape(-1, 32)
    sum_x2 = np.zeros(xs.shape[0], f)
    for i in range(32):
        sum_x2 = sum_x2 + xs[:, i] * xs[:, i]
    w = np.sqrt(sum_x2 / f(32))[:, None] + np.abs(xs)
    scales, mins, L = make_qkx2_quants(xs, w, nmax, rmin, 0.1, nstep, False)
    scales, mins, L = scales.reshape(nb, 8), mins.reshape(nb, 8), L.reshape(nb, 8, 32)
    max_scale, max_min = _max_positive(scales), _max_positive(mins)
    inv_scale = np.where(max_scale > 0, f(63) / np.where(max_scale > 0, max_scale, f(1)), f(0))
    inv_min = np.where(max_min > 0, f(63) / np.where(max_min > 0, max_min, f(1)), f(0))
    ls = np.minimum(63, nearest_int(inv_scale[:, None] * scales) & 0xFF)
    lm = np.minimum(63, nearest_int(inv_min[:, None] * mins) & 0xFF)
    d, dmin = max_scale / f(63), max_min / f(63)
    dq = (_f16_value(d)[:, None] * ls.astype(f))[:, :, None]
    dm = (_f16_value(dmin)[:, None] * lm.astype(f))[:, :, None]
    new = np.clip(nearest_int((x.reshape(nb, 8, 32) + dm) / dq), 0, nmax)
    L = np.where(dq != 0, new, L).reshape(nb, 256)
    return L, _pack_scale_min_k4(ls, lm), to_f16(d), to_f16(dmin)


def quantize_q4_k(x):
    """quantize_row_q4_K_ref (nmax 15, rmin -1, 20 steps). Bytes: d, dmin, scales[12], qs[128]:
    qs[32c + m] holds value 64c + m (low nibble) and 64c + 32 + m (high nibble)."""
    L, sb, d, dmin = _quantize_k_asym(x, 15, -1.0, 20)
    L = L.astype(_np().uint8).reshape(-1, 4, 2, 32)
    qs = (L[:, :, 0] | (L[:, :, 1] << 4)).reshape(-1, 128)
    return _np().concatenate([d, dmin, sb, qs], axis=1)


def quantize_q5_k(x):
    """quantize_row_q5_K_ref (nmax 31, rmin -0.5, 15 steps). Bytes: d, dmin, scales[12], qh[32]
    (bit u of qh[m]: bit 4 of value 32u + m), qs[128] (the low 4 bits as in Q4_K)."""
    np = _np()
    L, sb, d, dmin = _quantize_k_asym(x, 31, -0.5, 15)
    L = L.astype(np.uint8).reshape(-1, 8, 32)
    qh = _bitplane(L > 15)
    low = (L & 15).reshape(-1, 4, 2, 32)
    qs = (low[:, :, 0] | (low[:, :, 1] << 4)).reshape(-1, 128)
    return np.concatenate([d, dmin, sb, qh, qs], axis=1)


def quantize_q6_k(x):
    """quantize_row_q6_K_ref: 16 groups of 16, make_qx_quants(nmax 32, rmse_type 1); int8 scales
    against fp16 d = -(max-|scale| scale) / 128; a block whose scales are all below 1e-15 is all zero
    bytes. Bytes: ql[128], qh[64], scales[16], d."""
    np = _np()
    f = np.float32
    nb = x.shape[0]
    scales, L = make_qx_quants(x.reshape(-1, 16), 32)
    scales, L = scales.reshape(nb, 16), L.reshape(nb, 16, 16)
    max_scale = _first_absmax(scales)
    live = np.abs(max_scale) >= f(GROUP_MAX_EPS)
    iscale = f(-128) / np.where(live, max_scale, f(1))
    d = f(1) / iscale
    sc = _int8(np.minimum(127, nearest_int(iscale[:, None] * scales)))
    dq = (_f16_value(d)[:, None] * sc.astype(f))[:, :, None]
    new = np.clip(nearest_int(x.reshape(nb, 16, 16) / dq), -32, 31) + 32
    L = np.where(dq != 0, new, L).astype(np.uint8).reshape(nb, 2, 4, 32)       # [n, h, k, m]
    ql = np.concatenate([(L[:, :, 0] & 15) | ((L[:, :, 2] & 15) << 4),
                         (L[:, :, 1] & 15) | ((L[:, :, 3] & 15) << 4)], axis=2).reshape(nb, 128)
    hi = L >> 4
    qh = (hi[:, :, 0] | (hi[:, :, 1] << 2) | (hi[:, :, 2] << 4) | (hi[:, :, 3] << 6)).reshape(nb, 64)
    out = np.concatenate([ql, qh, sc.astype(np.int8).view(np.uint8), to_f16(d)], axis=1)
    out[~live] = 0
    return out
