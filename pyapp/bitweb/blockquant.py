"""ggml's standard block-quantized types in numpy (CPython only): decode, encode, unit decomposition.

One codec per type, registered by type id in CODECS (get(id or name) finds one). Each has
  dequantize(data, n=None) -> flat float32   bit for bit gguf-py's gguf.quants.dequantize and ggml's
                                             dequantize_row_* (NaN scales of corrupt bytes included)
  quantize(x) -> bytes                       legacy types: bit for bit gguf-py's quantizers, which are
                                             ggml's quantize_row_*_ref but for a zero scale's sign
                                             when a block holds -0.0 (numpy's min / argmax pick
                                             another zero than C's scan; values decode the same);
                                             K-quants: bitweb.kquant_encode, a port of ggml's
                                             quantize_row_q{2..6}_K_ref (gguf-py has none)
  units(data) -> (q int8 [n_units, U], s float32 [n_units], o float32 [n_units])
                                             w = s*q + o over units of U consecutive values: each code
                                             q a small integer in q_range, one scale and offset per unit
The kernels decode these units. s*q + o is bit for bit dequantize when s*q is rounded to float32
before the add (no fused multiply-add) and the value is not NaN. Symmetric types have o = -0.0
(x + -0.0 == x for every x, zeros' signs included); types with a min have o = -min (x + -min ==
x - min but for the sign of a NaN). dev/formats/ggml_check.py checks all of it against ggml's C.

Element order is GGUF order (the flat tensor, ne0 contiguous); blocks never span rows. Little endian;
fp16 is IEEE half; "nib(qs)" is the 32 codes of 16 bytes, low nibbles first (weights 0-15), then
high nibbles (16-31); K-quants are super-blocks of 256 weights.

type  id values bytes  layout (byte offsets)                                   unit U  q        s, o
Q4_0   2   32    18   d@0, qs[16]@2                                            32  nib-8 [-8,7]  d, -0
Q4_1   3   32    20   d@0, m@2, qs[16]@4                                       32  nib [0,15]    d, m
Q5_0   6   32    22   d@0, qh u32@2, qs[16]@6; q = nib | bit j of qh << 4      32  q-16 [-16,15] d, -0
Q5_1   7   32    24   d@0, m@2, qh u32@4, qs[16]@8                             32  q [0,31]      d, m
Q8_0   8   32    34   d@0, int8 q[32]@2                                        32  q [-128,127]  d, -0
Q2_K  10  256    84   scales[16]@0, qs[64]@16, d@80, dmin@82                   16  [0,3]   d*(sc&15), -(dmin*(sc>>4))
Q3_K  11  256   110   hmask[32]@0, qs[64]@32, scales[12]@96, d@108             16  [-4,3]  d*(sc6-32), -0
Q4_K  12  256   144   d@0, dmin@2, scales[12]@4, qs[128]@16                    32  [0,15]  d*sc6, -(dmin*m6)
Q5_K  13  256   176   d@0, dmin@2, scales[12]@4, qh[32]@16, qs[128]@48         32  [0,31]  d*sc6, -(dmin*m6)
Q6_K  14  256   210   ql[128]@0, qh[64]@128, int8 scales[16]@192, d@208        16  [-32,31] d*sc, -0

K-quant codes (weight w of a super-block, unit u = w // U):
  2-bit codes (Q2_K, and Q3_K's low bits): w = 128h + 32l + m (h 0..1, l 0..3, m 0..31) is bits 2l+1:2l
    of qs[32h + m].
  Q3_K: q = low2 - 4 if bit (w // 32) of hmask[w % 32] is clear, low2 if set. sc6 (unit u 0..15) is
    the 4 bits scales[u] & 15 (u < 8) or scales[u-8] >> 4 (u >= 8), with bits 5:4 from
    scales[8 + u % 4] >> 2(u // 4) & 3.
  Q4_K: w = 64c + 32k + m (c 0..3, k 0..1): qs[32c + m] low nibble (k 0) or high nibble (k 1), unit
    u = 2c + k. Q5_K: the same 4 bits plus bit u of qh[m] as bit 4.
  Q4_K / Q5_K 6-bit sc6, m6 of unit u: u < 4: scales[u] & 63, scales[u+4] & 63; u >= 4:
    (scales[u+4] & 15) | (scales[u-4] >> 6) << 4, (scales[u+4] >> 4) | (scales[u] >> 6) << 4.
  Q6_K: w = 128h + 32k + m (k 0..3): 4 low bits from ql[64h + m + 32(k & 1)], low nibble for k < 2,
    high for k >= 2; 2 high bits (qh[32h + m] >> 2k) & 3; q = that - 32; unit u = w // 16, sc =
    scales[u] (int8).

Scales computed as float32 in the order shown (d*sc first, then *q), as ggml's dequantize_row_*.
"""
from __future__ import annotations

from bitweb import kquant_encode
from bitweb.kquant_encode import to_f16
from bitweb.formats import FormatError

QK_K = 256
GROUP_MAX_EPS = 1e-15           # ggml: a group whose max |x| is below this is all zeros


def _np():
    import numpy as np
    return np


# ---- shared helpers -------------------------------------------------------------------------------

def _f16(b, at):
    """Little-endian f16 field at byte `at` of each block row -> float32 [n_blocks]."""
    np = _np()
    return np.ascontiguousarray(b[:, at:at + 2]).view("<f2").astype(np.float32).reshape(-1)



def _nibbles(qs):
    """[n, 16] bytes -> [n, 32] codes: low nibbles (values 0-15), then high nibbles (16-31)."""
    np = _np()
    return np.concatenate([qs & 15, qs >> 4], axis=1)


def _bits32(qh):
    """[n, 4] bytes (a little-endian u32) -> [n, 32] bits, bit j for value j."""
    np = _np()
    return np.unpackbits(qh, axis=1, bitorder="little")


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




def _roundf(x):
    """C roundf (half away from zero) of float32, exactly as gguf-py's np_roundf."""
    np = _np()
    a = np.abs(x)
    f = np.floor(a)
    return np.sign(x) * (f + np.floor(2 * (a - f)))


# ---- the codecs -----------------------------------------------------------------------------------

class BlockCodec:
    """A block-quantized GGML type: name, type_id, block_size (values), type_size (bytes), unit (values
    per unit), q_range (smallest, largest code), f16_at (byte offsets of the fp16 scale fields),
    subtracts_min (w = s*q - min with o = -min: Q2_K, Q4_K, Q5_K)."""
    name: str
    type_id: int
    block_size: int
    type_size: int
    unit: int
    q_range: tuple
    f16_at: tuple
    subtracts_min = False

    def check_length(self, n: int) -> None:
        if n < 0 or n % self.block_size:
            raise FormatError(f"{self.name}: {n} values is not a whole number of {self.block_size}-value blocks")

    def nbytes(self, n: int) -> int:
        self.check_length(n)
        return n // self.block_size * self.type_size

    def blocks(self, data, n=None):
        """bytes / memoryview / uint8 array -> uint8 [n_blocks, type_size]; n (values), when given,
        must match the byte count."""
        np = _np()
        raw = data.reshape(-1).view(np.uint8) if isinstance(data, np.ndarray) else np.frombuffer(data, np.uint8)
        if n is not None and raw.size != self.nbytes(n):
            raise FormatError(f"{self.name}: {n} values need {self.nbytes(n)} bytes, got {raw.size}")
        if raw.size % self.type_size:
            raise FormatError(f"{self.name}: {raw.size} bytes is not a whole number of "
                              f"{self.type_size}-byte blocks")
        return raw.reshape(-1, self.type_size)

    def units(self, data, n=None):
        """Packed bytes -> (q int8 [n_units, unit], s float32 [n_units], o float32 [n_units])."""
        b = self.blocks(data, n)
        with _np().errstate(invalid="ignore", over="ignore"):      # inf * 0 of a corrupt scale: NaN, as in ggml
            q, s, o = self._units(b)
        return q.reshape(-1, self.unit), s.reshape(-1), o.reshape(-1)

    def dequantize(self, data, n=None):
        """Packed bytes -> flat float32 [n_values]: s*q + o per unit, bit for bit gguf-py and ggml.
        Types that store a min compute s*q - min as ggml does (o = -min): the same value, and the same
        NaN bits when a corrupt scale is NaN (x + -NaN and x - NaN differ in the NaN's sign)."""
        np = _np()
        q, s, o = self.units(data, n)
        with np.errstate(invalid="ignore", over="ignore"):
            sq = s[:, None] * q.astype(np.float32)
            return (sq - (-o[:, None]) if self.subtracts_min else sq + o[:, None]).reshape(-1)

    def quantize(self, x) -> bytes:
        """Floats (any shape, GGUF order when flattened; finite) -> packed bytes. Raises FormatError for
        a length that is not whole blocks, for NaN / inf, for |x| > MAX_ABS and for a block whose fp16
        scales overflow."""
        np = _np()
        x = np.asarray(x, dtype=np.float32).reshape(-1)
        self.check_length(x.size)
        bad = np.flatnonzero(~np.isfinite(x))
        if bad.size:
            raise FormatError(f"{self.name}: cannot quantize non-finite value {x[bad[0]]} at index {bad[0]}")
        big = np.flatnonzero(np.abs(x) > MAX_ABS)
        if big.size:
            raise FormatError(f"{self.name}: value {x[big[0]]:g} at index {big[0]} is beyond what fp16 scales "
                              f"can represent (|x| <= {MAX_ABS:g} at most, less in most types)")
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            b = self._quantize(x.reshape(-1, self.block_size))
        assert b.dtype == np.uint8 and b.shape[1] == self.type_size
        for at in self.f16_at:
            over = np.flatnonzero(~np.isfinite(_f16(b, at)))
            if over.size:
                i = int(over[0])
                big = float(np.abs(x[i * self.block_size:(i + 1) * self.block_size]).max())
                raise FormatError(f"{self.name}: block {i} (max |x| = {big:g}) needs a scale beyond fp16's range")
        return b.tobytes()

    def __repr__(self):
        return f"<block codec {self.name} id={self.type_id} block={self.block_size} bytes={self.type_size}>"


# No type here represents |w| above 65504 * 128 * 32 (Q6_K's largest d * scale * code) < 2^28; larger
# inputs are refused before the searches (whose sums of x^3 * code overflow float32 from ~2e12).
MAX_ABS = float(2 ** 30)
NEG0 = -0.0     # the offset of symmetric types: s*q + -0.0 == s*q bit for bit


class Q4_0(BlockCodec):
    name, type_id, block_size, type_size, unit, q_range, f16_at = "Q4_0", 2, 32, 18, 32, (-8, 7), (0,)

    def _units(self, b):
        np = _np()
        d = _f16(b, 0)
        return _nibbles(b[:, 2:]).astype(np.int8) - np.int8(8), d, np.full_like(d, NEG0)

    def _quantize(self, x):
        """quantize_row_q4_0_ref: d = (the value of largest |x|) / -8, q = min(15, trunc(x/d + 8.5))."""
        np = _np()
        mx = np.take_along_axis(x, np.abs(x).argmax(axis=1)[:, None], axis=1)
        d = mx / np.float32(-8)
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d)
        q = np.trunc(x * inv + np.float32(8.5)).astype(np.uint8).clip(0, 15)
        return np.concatenate([to_f16(d), q[:, :16] | (q[:, 16:] << 4)], axis=1)


class Q4_1(BlockCodec):
    name, type_id, block_size, type_size, unit, q_range, f16_at = "Q4_1", 3, 32, 20, 32, (0, 15), (0, 2)

    def _units(self, b):
        np = _np()
        return _nibbles(b[:, 4:]).astype(np.int8), _f16(b, 0), _f16(b, 2)

    def _quantize(self, x):
        """quantize_row_q4_1_ref: d = (max - min) / 15, m = min, q = min(15, trunc((x - min)/d + 0.5))."""
        np = _np()
        lo, hi = x.min(axis=1, keepdims=True), x.max(axis=1, keepdims=True)
        d = (hi - lo) / np.float32(15)
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d)
        q = np.trunc((x - lo) * inv + np.float32(0.5)).astype(np.uint8).clip(0, 15)
        return np.concatenate([to_f16(d), to_f16(lo), q[:, :16] | (q[:, 16:] << 4)], axis=1)


class Q5_0(BlockCodec):
    name, type_id, block_size, type_size, unit, q_range, f16_at = "Q5_0", 6, 32, 22, 32, (-16, 15), (0,)

    def _units(self, b):
        np = _np()
        q = _nibbles(b[:, 6:]) | (_bits32(b[:, 2:6]) << 4)
        d = _f16(b, 0)
        return q.astype(np.int8) - np.int8(16), d, np.full_like(d, NEG0)

    def _quantize(self, x):
        """quantize_row_q5_0_ref: d = (the value of largest |x|) / -16, q = min(31, trunc(x/d + 16.5))."""
        np = _np()
        mx = np.take_along_axis(x, np.abs(x).argmax(axis=1)[:, None], axis=1)
        d = mx / np.float32(-16)
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d)
        q = np.trunc(x * inv + np.float32(16.5)).astype(np.uint8).clip(0, 31)
        qh = np.packbits(q >> 4, axis=1, bitorder="little")
        return np.concatenate([to_f16(d), qh, (q[:, :16] & 15) | (q[:, 16:] << 4)], axis=1)


class Q5_1(BlockCodec):
    name, type_id, block_size, type_size, unit, q_range, f16_at = "Q5_1", 7, 32, 24, 32, (0, 31), (0, 2)

    def _units(self, b):
        np = _np()
        q = _nibbles(b[:, 8:]) | (_bits32(b[:, 4:8]) << 4)
        return q.astype(np.int8), _f16(b, 0), _f16(b, 2)

    def _quantize(self, x):
        """quantize_row_q5_1_ref: d = (max - min) / 31, m = min, q = trunc((x - min)/d + 0.5)."""
        np = _np()
        lo, hi = x.min(axis=1, keepdims=True), x.max(axis=1, keepdims=True)
        d = (hi - lo) / np.float32(31)
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d)
        q = np.trunc((x - lo) * inv + np.float32(0.5)).astype(np.uint8).clip(0, 31)
        qh = np.packbits(q >> 4, axis=1, bitorder="little")
        return np.concatenate([to_f16(d), to_f16(lo), qh, (q[:, :16] & 15) | (q[:, 16:] << 4)], axis=1)


class Q8_0(BlockCodec):
    name, type_id, block_size, type_size, unit, q_range, f16_at = "Q8_0", 8, 32, 34, 32, (-128, 127), (0,)

    def _units(self, b):
        d = _f16(b, 0)
        return b[:, 2:].view(_np().int8), d, _np().full_like(d, NEG0)

    def _quantize(self, x):
        """quantize_row_q8_0_ref: d = max|x| / 127, q = roundf(x / d)."""
        np = _np()
        d = np.abs(x).max(axis=1) / np.float32(127)
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d)
        q = _roundf(x * inv[:, None]).astype(np.int8).view(np.uint8)
        return np.concatenate([to_f16(d), q], axis=1)


class Q2_K(BlockCodec):
    name, type_id, block_size, type_size, unit, q_range, f16_at = "Q2_K", 10, 256, 84, 16, (0, 3), (80, 82)
    subtracts_min = True

    def _units(self, b):
        np = _np()
        sc, d, dmin = b[:, :16], _f16(b, 80), _f16(b, 82)
        s = d[:, None] * (sc & 15).astype(np.float32)
        o = -(dmin[:, None] * (sc >> 4).astype(np.float32))
        return _crumbs(b[:, 16:80]).astype(np.int8), s, o

    def _quantize(self, x):
        return kquant_encode.quantize_q2_k(x)


class Q3_K(BlockCodec):
    name, type_id, block_size, type_size, unit, q_range, f16_at = "Q3_K", 11, 256, 110, 16, (-4, 3), (108,)

    def _units(self, b):
        np = _np()
        high = np.unpackbits(b[:, :32], axis=1, bitorder="little").reshape(-1, 32, 8).transpose(0, 2, 1)
        q = _crumbs(b[:, 32:96]).astype(np.int8) - (np.int8(4) * (1 - high.reshape(-1, QK_K)).astype(np.int8))
        d = _f16(b, 108)
        s = d[:, None] * _q3k_scales(b[:, 96:108]).astype(np.float32)
        return q, s, np.full_like(s, NEG0)

    def _quantize(self, x):
        return kquant_encode.quantize_q3_k(x)


class Q4_K(BlockCodec):
    name, type_id, block_size, type_size, unit, q_range, f16_at = "Q4_K", 12, 256, 144, 32, (0, 15), (0, 2)
    subtracts_min = True

    def _units(self, b):
        np = _np()
        d, dmin = _f16(b, 0), _f16(b, 2)
        sc, m = _scale_min_k4(b[:, 4:16])
        qs = b[:, 16:].reshape(-1, 4, 32)
        q = np.stack([qs & 15, qs >> 4], axis=2).astype(np.int8)           # [n, chunk, k, 32]
        return q, d[:, None] * sc.astype(np.float32), -(dmin[:, None] * m.astype(np.float32))

    def _quantize(self, x):
        return kquant_encode.quantize_q4_k(x)


class Q5_K(BlockCodec):
    name, type_id, block_size, type_size, unit, q_range, f16_at = "Q5_K", 13, 256, 176, 32, (0, 31), (0, 2)
    subtracts_min = True

    def _units(self, b):
        np = _np()
        d, dmin = _f16(b, 0), _f16(b, 2)
        sc, m = _scale_min_k4(b[:, 4:16])
        qs = b[:, 48:].reshape(-1, 4, 32)
        low = np.stack([qs & 15, qs >> 4], axis=2).reshape(-1, 8, 32)        # unit u = 2c + k
        high = np.unpackbits(b[:, 16:48], axis=1, bitorder="little").reshape(-1, 32, 8).transpose(0, 2, 1)
        q = (low | (high << 4)).astype(np.int8)
        return q, d[:, None] * sc.astype(np.float32), -(dmin[:, None] * m.astype(np.float32))

    def _quantize(self, x):
        return kquant_encode.quantize_q5_k(x)


class Q6_K(BlockCodec):
    name, type_id, block_size, type_size, unit, q_range, f16_at = "Q6_K", 14, 256, 210, 16, (-32, 31), (208,)

    def _units(self, b):
        np = _np()
        ql = b[:, :128].reshape(-1, 2, 2, 32)                                # [n, h, k & 1, m]
        low = np.stack([ql & 15, ql >> 4], axis=2).reshape(-1, 2, 4, 32)      # k = 2*(nibble) + (k & 1)
        qh = b[:, 128:192].reshape(-1, 2, 1, 32) >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
        q = (low | ((qh & 3) << 4)).astype(np.int8) - np.int8(32)
        d = _f16(b, 208)
        s = d[:, None] * b[:, 192:208].view(np.int8).astype(np.float32)
        return q, s, np.full_like(s, NEG0)

    def _quantize(self, x):
        return kquant_encode.quantize_q6_k(x)


CODECS: dict[int, BlockCodec] = {c.type_id: c for c in (Q4_0(), Q4_1(), Q5_0(), Q5_1(), Q8_0(),
                                                         Q2_K(), Q3_K(), Q4_K(), Q5_K(), Q6_K())}
_BY_NAME = {c.name: c for c in CODECS.values()}


def get(t) -> BlockCodec:
    """A codec by type id, name (any case) or the codec itself; FormatError for anything else."""
    if isinstance(t, BlockCodec):
        return t
    c = CODECS.get(t) if isinstance(t, int) else _BY_NAME.get(str(t).upper())
    if c is None:
        raise FormatError(f"no block codec for GGML type {t!r}; known: "
                          + ", ".join(f"{c.name}={i}" for i, c in CODECS.items()))
    return c


def dequantize(t, data, n=None):
    return get(t).dequantize(data, n)


def quantize(t, x) -> bytes:
    return get(t).quantize(x)


def units(t, data, n=None):
    return get(t).units(data, n)
