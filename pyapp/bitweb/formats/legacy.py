"""ggml's legacy block-quantized types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (32 values per block, fp16 scales;
layouts in bitweb.formats). Decoding is bit for bit gguf-py's and ggml's; encoding is gguf-py's
quantizers, which are ggml's quantize_row_*_ref but for a zero scale's sign when a block holds -0.0
(numpy's min / argmax pick another zero than C's scan; the values decode the same).
"""
from __future__ import annotations

from bitweb.formats.base import IntegerFormat, _f16, _np, _round_away
from bitweb.formats.kquant_encode import to_f16

NEG0 = -0.0     # the offset of a symmetric type: s*q + -0.0 == s*q bit for bit


def _nibbles(qs):
    """[n, 16] bytes -> [n, 32] codes: low nibbles (values 0-15), then high nibbles (16-31)."""
    np = _np()
    return np.concatenate([qs & 15, qs >> 4], axis=1)


def _pack_nibbles(c):
    """[n, 32] codes 0..15 -> [n, 16] bytes (value j low nibble of byte j, value 16 + j the high)."""
    return (c[:, :16] & 15) | (c[:, 16:] << 4)


def _bits32(qh):
    """[n, 4] bytes (a little-endian u32) -> [n, 32] bits, bit j for value j."""
    np = _np()
    return np.unpackbits(qh, axis=1, bitorder="little")


def _pack5(c):
    """[n, 32] codes 0..31 -> the fifth bits (a little-endian u32), then the nibbles: Q5_0 / Q5_1's qh, qs."""
    np = _np()
    return [np.packbits(c >> 4, axis=1, bitorder="little"), _pack_nibbles(c)]


def _symmetric(x, nmax: int):
    """ggml's quantize_row_q{4,5}_0_ref: d = (the value of largest |x|) / -nmax, code = min(2 nmax - 1,
    trunc(x / d + nmax + 0.5)) -> (d [n, 1], codes uint8 [n, 32])."""
    np = _np()
    mx = np.take_along_axis(x, np.abs(x).argmax(axis=1)[:, None], axis=1)
    d = mx / np.float32(-nmax)
    inv = np.where(d == 0, np.float32(0), np.float32(1) / d)
    return d, np.trunc(x * inv + np.float32(nmax + 0.5)).astype(np.uint8).clip(0, 2 * nmax - 1)


def _asymmetric(x, top: int):
    """ggml's quantize_row_q{4,5}_1_ref: d = (max - min) / top, m = min, code = min(top, trunc((x - min)
    / d + 0.5)) -> (d [n, 1], m [n, 1], codes uint8 [n, 32])."""
    np = _np()
    lo, hi = x.min(axis=1, keepdims=True), x.max(axis=1, keepdims=True)
    d = (hi - lo) / np.float32(top)
    inv = np.where(d == 0, np.float32(0), np.float32(1) / d)
    return d, lo, np.trunc((x - lo) * inv + np.float32(0.5)).astype(np.uint8).clip(0, top)


class _Legacy(IntegerFormat):
    """32 values per block, one fp16 d (and fp16 m with offsets) per block. The WGSL include is shared
    by the 4-bit pair (fmt_q4) and the 5-bit pair (fmt_q5): QS (byte of the nibbles), QH (byte of the
    fifth bits) and OFFS (1: an fp16 m follows d) come with the format."""
    block_size = 32

    @property
    def vec_dot(self):
        return "q8_1" if self.offsets else "q8_0"    # ggml-cpu's type_traits_cpu vec_dot_type

    def wgsl_constants(self):
        c = super().wgsl_constants()
        c.update(QS=self.type_size - 16, OFFS=int(self.offsets))
        return c


class Q4_0(_Legacy):
    name, type_id, type_size, include, file_type = "Q4_0", 2, 18, "fmt_q4", 2
    q_range, f16_at, planes = (-8, 7), (0,), 2

    def _units(self, b):
        np = _np()
        d = _f16(b, 0)
        return _nibbles(b[:, 2:]).astype(np.int8) - np.int8(8), d[:, None], np.full_like(d, NEG0)[:, None]

    def _pack(self, q, d, m):
        np = _np()
        return np.concatenate([to_f16(d), _pack_nibbles((q + 8).astype(np.uint8))], axis=1)

    def _quantize(self, x):
        np = _np()
        d, q = _symmetric(x, 8)
        return np.concatenate([to_f16(d), _pack_nibbles(q)], axis=1)


class Q4_1(_Legacy):
    name, type_id, type_size, include, file_type = "Q4_1", 3, 20, "fmt_q4", 3
    q_range, f16_at, offsets, planes = (0, 15), (0, 2), True, 2

    def _units(self, b):
        np = _np()
        return _nibbles(b[:, 4:]).astype(np.int8), _f16(b, 0)[:, None], _f16(b, 2)[:, None]

    def _pack(self, q, d, m):
        np = _np()
        return np.concatenate([to_f16(d), to_f16(m), _pack_nibbles(q.astype(np.uint8))], axis=1)

    def _quantize(self, x):
        np = _np()
        d, lo, q = _asymmetric(x, 15)
        return np.concatenate([to_f16(d), to_f16(lo), _pack_nibbles(q)], axis=1)


class Q5_0(_Legacy):
    name, type_id, type_size, include, file_type = "Q5_0", 6, 22, "fmt_q5", 8
    q_range, f16_at, planes = (-16, 15), (0,), 1

    def wgsl_constants(self):
        return dict(super().wgsl_constants(), QH=2)

    def _units(self, b):
        np = _np()
        q = _nibbles(b[:, 6:]) | (_bits32(b[:, 2:6]) << 4)
        d = _f16(b, 0)
        return q.astype(np.int8) - np.int8(16), d[:, None], np.full_like(d, NEG0)[:, None]

    def _pack(self, q, d, m):
        np = _np()
        return np.concatenate([to_f16(d)] + _pack5((q + 16).astype(np.uint8)), axis=1)

    def _quantize(self, x):
        np = _np()
        d, q = _symmetric(x, 16)
        return np.concatenate([to_f16(d)] + _pack5(q), axis=1)


class Q5_1(_Legacy):
    name, type_id, type_size, include, file_type = "Q5_1", 7, 24, "fmt_q5", 9
    q_range, f16_at, offsets, planes = (0, 31), (0, 2), True, 1

    def wgsl_constants(self):
        return dict(super().wgsl_constants(), QH=4)

    def _units(self, b):
        np = _np()
        q = _nibbles(b[:, 8:]) | (_bits32(b[:, 4:8]) << 4)
        return q.astype(np.int8), _f16(b, 0)[:, None], _f16(b, 2)[:, None]

    def _pack(self, q, d, m):
        np = _np()
        return np.concatenate([to_f16(d), to_f16(m)] + _pack5(q.astype(np.uint8)), axis=1)

    def _quantize(self, x):
        np = _np()
        d, lo, q = _asymmetric(x, 31)
        return np.concatenate([to_f16(d), to_f16(lo)] + _pack5(q), axis=1)


class Q8_0(_Legacy):
    """f16 d, int8 q[32]. Codes in WGSL: the bytes ^ 0x80 (ZP 128), one code a byte."""
    name, type_id, type_size, include, file_type = "Q8_0", 8, 34, "fmt_q8_0", 7
    q_range, f16_at, planes = (-128, 127), (0,), 1

    def wgsl_constants(self):
        return IntegerFormat.wgsl_constants(self)

    def _units(self, b):
        np = _np()
        d = _f16(b, 0)
        return b[:, 2:].view(np.int8), d[:, None], np.full_like(d, NEG0)[:, None]

    def _pack(self, q, d, m):
        np = _np()
        return np.concatenate([to_f16(d), q.astype(np.int8).view(np.uint8)], axis=1)

    def _quantize(self, x):
        """quantize_row_q8_0_ref: d = max|x| / 127, q = roundf(x / d) (half away from zero)."""
        np = _np()
        d = np.abs(x).max(axis=1) / np.float32(127)
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d)
        q = _round_away(x * inv[:, None]).astype(np.int8).view(np.uint8)
        return np.concatenate([to_f16(d), q], axis=1)
