"""ggml's K-quants: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (super-blocks of 256 values with packed sub-block
scales; layouts in bitweb.formats). Decoding is bit for bit gguf-py's and ggml's; encoding is
bitweb.formats.kquant_encode, a port of ggml's quantize_row_q{2..6}_K_ref (gguf-py has none).

unpack gives one (d, m) per sub-block (scale_block values): d = the super-block's fp16 d times the
sub-block's integer scale, m = -(dmin times its integer min) where the format stores mins. pack takes
the same and stores them exactly when every sub-block scale of a super-block is an integer multiple,
within the format's range, of one fp16 scale (so for mins), else raises FormatError.
"""
from __future__ import annotations

from bitweb.formats.base import FormatError, IntegerFormat, _f16, _np
from bitweb.formats.kquant_encode import (_bitplane, _nibble_pairs, _pack_crumbs, _pack_nibble_pairs,
                                          _pack_q3k_scales, _pack_scale_min_k4, _unbitplane, quantize_q2_k, quantize_q3_k, quantize_q4_k, quantize_q5_k,
                                          quantize_q6_k, to_f16)

QK_K = 256
NEG0 = -0.0


def _crumbs(qs):
    """[n, 64] bytes -> [n, 256] 2-bit codes: value 128h + 32l + m = (qs[32h + m] >> 2l) & 3."""
    np = _np()
    q = qs.reshape(-1, 2, 1, 32) >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
    return (q & 3).reshape(-1, QK_K)


def _scale_min_k4(sb):
    """Q4_K / Q5_K 12 packed bytes [n, 12] -> (sc6 [n, 8], m6 [n, 8]) (ggml get_scale_min_k4)."""
    np = _np()
    lo, hi, mix = sb[:, 0:4], sb[:, 4:8], sb[:, 8:12]
    sc = np.concatenate([lo & 63, (mix & 15) | ((lo >> 6) << 4)], axis=1)
    m = np.concatenate([hi & 63, (mix >> 4) | ((hi >> 6) << 4)], axis=1)
    return sc, m


def _q3k_scales(sb):
    """Q3_K 12 packed bytes [n, 12] -> 16 signed scales sc6 - 32 [n, 16] (int8)."""
    np = _np()
    low = np.concatenate([sb[:, :8] & 15, sb[:, :8] >> 4], axis=1)                 # units 0-7, 8-15
    high = (sb[:, 8:12].reshape(-1, 1, 4) >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 4, 1)) & 3
    return (low | (high.reshape(-1, 16) << 4)).astype(np.int8) - np.int8(32)


def _super_scales(v, lo: int, hi: int, fmt: str, what: str):
    """v float32 [nb, units] -> (D float32 [nb] (fp16-exact), s int32 [nb, units] in lo..hi) with
    D * s == v exactly; FormatError naming the first super-block where no such pair exists. D is the
    greatest common factor of the block's values that is a power of two times an integer (so s is
    the smallest such), with the sign that fits the range."""
    np = _np()
    v = np.asarray(v, np.float32)
    bad = ~np.isfinite(v).all(axis=1)
    if bad.any():
        raise FormatError(f"{fmt}: super-block {int(np.argmax(bad))} has a non-finite {what}")
    a = np.abs(v.astype(np.float64))
    mant, ex = np.frexp(a)
    mi = (mant * 2.0 ** 24).astype(np.int64)
    tz = np.log2(np.maximum(mi & -mi, 1).astype(np.float64)).astype(np.int64)
    e = np.where(a > 0, ex - 24 + tz, 1 << 20).min(axis=1)              # log2 of the lowest bit of the row
    e = np.where(e == 1 << 20, 0, e)
    k = np.round(v / np.ldexp(1.0, e)[:, None]).astype(np.int64)          # exact integers
    g = np.maximum(np.gcd.reduce(np.abs(k), axis=1), 1)
    k //= g[:, None]
    unit = np.ldexp(g.astype(np.float64), e)
    ok_pos = (k.min(axis=1) >= lo) & (k.max(axis=1) <= hi)
    ok_neg = (-k.max(axis=1) >= lo) & (-k.min(axis=1) <= hi)
    sign = np.where(ok_pos, 1, -1)
    D = (sign * unit).astype(np.float32)
    s = (sign[:, None] * k).astype(np.int32)
    exact = (D.astype(np.float16).astype(np.float32) == D) & (D[:, None] * s.astype(np.float32) == v).all(axis=1)
    good = (ok_pos | ok_neg) & exact
    if not good.all():
        i = int(np.argmin(good))
        raise FormatError(f"{fmt}: the {what} of super-block {i} are not integer multiples in [{lo}, {hi}] "
                          f"of one fp16 value (e.g. {v[i, :4].tolist()})")
    return D, s


class _KQuant(IntegerFormat):
    block_size = 256


class Q2_K(_KQuant):
    """scales[16] (sub-block scale | min << 4), qs[64] 2-bit codes, d, dmin; 16 sub-blocks of 16."""
    name, type_id, type_size, include, file_type = "Q2_K", 10, 84, "fmt_q2_k", 10
    q_range, f16_at, offsets, subtracts_min, scale_block, planes = (0, 3), (80, 82), True, True, 16, 4

    def _units(self, b):
        np = _np()
        sc, d, dmin = b[:, :16], _f16(b, 80), _f16(b, 82)
        s = d[:, None] * (sc & 15).astype(np.float32)
        o = -(dmin[:, None] * (sc >> 4).astype(np.float32))
        return _crumbs(b[:, 16:80]).astype(np.int8), s, o

    def _pack(self, q, d, m):
        np = _np()
        D, sc = _super_scales(d, 0, 15, self.name, "scales")
        Dm, mn = _super_scales(-m, 0, 15, self.name, "mins")
        return np.concatenate([(sc | (mn << 4)).astype(np.uint8), _pack_crumbs(q), to_f16(D), to_f16(Dm)], axis=1)

    def _quantize(self, x):
        return quantize_q2_k(x)


class Q3_K(_KQuant):
    """hmask[32] (third bits), qs[64] (low 2 bits), scales[12] (16 6-bit sub-block scales + 32), d;
    q = low2 + 4 hbit - 4 in -4..3."""
    name, type_id, type_size, include, file_type = "Q3_K", 11, 110, "fmt_q3_k", 11
    q_range, f16_at, scale_block, planes = (-4, 3), (108,), 16, 1

    def _units(self, b):
        np = _np()
        high = _unbitplane(b[:, :32])
        q = _crumbs(b[:, 32:96]).astype(np.int8) - (np.int8(4) * (1 - high.reshape(-1, QK_K)).astype(np.int8))
        d = _f16(b, 108)
        s = d[:, None] * _q3k_scales(b[:, 96:108]).astype(np.float32)
        return q, s, np.full_like(s, NEG0)

    def _pack(self, q, d, m):
        np = _np()
        D, sc = _super_scales(d, -32, 31, self.name, "scales")
        c = (q + 4).astype(np.uint8)
        high = c > 3
        return np.concatenate([_bitplane(high.reshape(-1, 8, 32)), _pack_crumbs(c & 3), _pack_q3k_scales(sc + 32),
                               to_f16(D)], axis=1)

    def _quantize(self, x):
        return quantize_q3_k(x)


class _K4(_KQuant):
    """Q4_K / Q5_K: d, dmin, 12 bytes of 8 6-bit scales and mins; sub-blocks of 32."""
    offsets, subtracts_min, scale_block, f16_at = True, True, 32, (0, 2)

    def _scales(self, b):
        np = _np()
        d, dmin = _f16(b, 0), _f16(b, 2)
        sc, m = _scale_min_k4(b[:, 4:16])
        return d[:, None] * sc.astype(np.float32), -(dmin[:, None] * m.astype(np.float32))

    def _head(self, d, m):
        np = _np()
        D, sc = _super_scales(d, 0, 63, self.name, "scales")
        Dm, mn = _super_scales(-m, 0, 63, self.name, "mins")
        return np.concatenate([to_f16(D), to_f16(Dm), _pack_scale_min_k4(sc, mn)], axis=1)


class Q4_K(_K4):
    """d, dmin, scales[12], qs[128]: qs[32c + m] holds value 64c + m (low nibble), 64c + 32 + m (high)."""
    name, type_id, type_size, include, file_type = "Q4_K", 12, 144, "fmt_q4_k", 14
    q_range, planes = (0, 15), 2

    def _units(self, b):
        np = _np()
        qs = b[:, 16:].reshape(-1, 4, 32)
        s, o = self._scales(b)
        return _nibble_pairs(qs).astype(np.int8), s, o

    def _pack(self, q, d, m):
        np = _np()
        c = q.astype(np.uint8).reshape(-1, 4, 2, 32)
        return np.concatenate([self._head(d, m), _pack_nibble_pairs(c).reshape(-1, 128)], axis=1)

    def _quantize(self, x):
        return quantize_q4_k(x)


class Q5_K(_K4):
    """Q4_K's fields plus qh[32] (bit u of qh[m]: bit 4 of value 32u + m) before qs[128]."""
    name, type_id, type_size, include, file_type = "Q5_K", 13, 176, "fmt_q5_k", 16
    q_range, planes = (0, 31), 1

    def _units(self, b):
        np = _np()
        qs = b[:, 48:].reshape(-1, 4, 32)
        low = _nibble_pairs(qs).reshape(-1, 8, 32)                           # sub-block u = 2c + k
        high = _unbitplane(b[:, 16:48])
        s, o = self._scales(b)
        return (low | (high << 4)).astype(np.int8), s, o

    def _pack(self, q, d, m):
        np = _np()
        c = q.astype(np.uint8).reshape(-1, 8, 32)
        low = (c & 15).reshape(-1, 4, 2, 32)
        return np.concatenate([self._head(d, m), _bitplane(c > 15), _pack_nibble_pairs(low).reshape(-1, 128)], axis=1)

    def _quantize(self, x):
        return quantize_q5_k(x)


class Q6_K(_KQuant):
    """ql[128] (low 4 bits), qh[64] (high 2 bits), int8 scales[16], d; q = code - 32 in -32..31."""
    name, type_id, type_size, include, file_type = "Q6_K", 14, 210, "fmt_q6_k", 18
    q_range, f16_at, scale_block, planes = (-32, 31), (208,), 16, 1

    def _units(self, b):
        np = _np()
        ql = b[:, :128].reshape(-1, 2, 2, 32)                                # [n, h, k & 1, m]
        low = np.stack([ql & 15, ql >> 4], axis=2).reshape(-1, 2, 4, 32)      # k = 2*(nibble) + (k & 1)
        qh = b[:, 128:192].reshape(-1, 2, 1, 32) >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
        q = (low | ((qh & 3) << 4)).astype(np.int8) - np.int8(32)
        d = _f16(b, 208)
        s = d[:, None] * b[:, 192:208].view(np.int8).astype(np.float32)
        return q, s, np.full_like(s, NEG0)

    def _pack(self, q, d, m):
        np = _np()
        D, sc = _super_scales(d, -128, 127, self.name, "scales")
        c = (q + 32).astype(np.uint8).reshape(-1, 2, 4, 32)                 # [n, h, k, m]
        ql = np.concatenate([(c[:, :, 0] & 15) | ((c[:, :, 2] & 15) << 4),
                             (c[:, :, 1] & 15) | ((c[:, :, 3] & 15) << 4)], axis=2).reshape(-1, 128)
        hi = c >> 4
        qh = (hi[:, :, 0] | (hi[:, :, 1] << 2) | (hi[:, :, 2] << 4) | (hi[:, :, 3] << 6)).reshape(-1, 64)
        return np.concatenate([ql, qh, sc.astype(np.int8).view(np.uint8), to_f16(D)], axis=1)

    def _quantize(self, x):
        return quantize_q6_k(x)
