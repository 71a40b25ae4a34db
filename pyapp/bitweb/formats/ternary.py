"""The ternary and binary formats (values -1, 0, +1 or -1, +1 times a scale): I2_S, TQ2_0, TQ1_0,
Q1_0, Q2_0, Q2_0_G128, read by the packed kernels in either activation mode. Layouts: bitweb.formats."""
from __future__ import annotations

import struct

from bitweb.formats.base import (_CODES2, _CODES3, Format, FormatError, _as_u8, _block_f16, _np, _pick, _rand_d,
                                 _round_away)


class _Packed(Format):
    """Formats whose values are small integer codes times a scale (ternary and binary kinds).
    Subclasses define _unpack(data, n) -> (q int8, d float32) and _pack(q int8 flat, d) -> bytes."""
    q_range = (-1, 1)

    def unpack(self, data, n):
        q, d = self._unpack(data, n)
        return q, d, None

    def pack(self, q, d, m=None):
        if m is not None:
            raise FormatError(f"{self.name} has no offsets (m)")
        return self._pack(self._values(q), d)

    def _values(self, q):
        """Check int values of the kind (-1, 0, 1; binary: -1 or +1) and whole blocks -> flat int8."""
        np = _np()
        q = np.asarray(q)
        if q.dtype.kind not in "iu":
            raise FormatError(f"{self.name} values must be an integer array, got dtype {q.dtype}")
        flat = q.reshape(-1).astype(np.int16)
        if self.kind == "binary":
            if flat.size and not np.all((flat == 1) | (flat == -1)):
                raise FormatError(f"{self.name} values (signs) must all be -1 or +1")
        elif flat.size and (flat.min() < -1 or flat.max() > 1):
            raise FormatError(f"ternary values must be in {{-1, 0, 1}}, got range [{flat.min()}, {flat.max()}]")
        self.check_length(flat.size)
        return flat.astype(np.int8)

    def dequantize(self, data, n):
        np = _np()
        t, s = self._unpack(data, n)
        per = t.size // s.size
        return (t.reshape(s.size, per).astype(np.float32) * s.reshape(-1, 1)).reshape(-1)


class _TQ(_Packed):
    """llama.cpp's TQ2_0 / TQ1_0: 256-value blocks of ternary codes (t + 1) and one f16 d per block.
    Subclasses define _pack_codes((n_blocks, 256) codes) -> (n_blocks, type_size - 2) bytes."""

    def _pack(self, t, d):
        """t: ternary ints (n % 256 == 0); d: one scale per 256 values (stored as f16)."""
        np = _np()
        codes = (t + 1).astype(np.uint8)
        nb = codes.size // 256
        return np.concatenate([self._pack_codes(codes.reshape(nb, 256)), _block_f16(d, nb, self.name)], axis=1).tobytes()

    def quantize(self, x):
        """d = max|x| per block, t = round(x / d) (ggml quantize_row_tq2_0_ref / _tq1_0_ref)."""
        np = _np()
        blocks = self._flat(x).reshape(-1, 256)
        d = np.abs(blocks).max(axis=1, keepdims=True)
        with np.errstate(divide="ignore"):
            inv = np.where(d == 0, 0, 1 / d)
        codes = (_round_away(blocks * inv).astype(np.int8) + np.int8(1)).astype(np.uint8)
        return np.concatenate([self._pack_codes(codes), d.astype("<f2").view(np.uint8)], axis=1).tobytes()


class TQ2_0(_TQ):
    name, type_id, block_size, type_size = "TQ2_0", 35, 256, 66
    kind, roles, include, file_type = "ternary", ("linear",), "fmt_tq2_0", 37
    planes = 4

    @staticmethod
    def _pack_codes(codes):
        """(n_blocks, 256) codes -> (n_blocks, 64) qs."""
        np = _np()
        c = codes.reshape(-1, 2, 4, 32) << np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
        return (c[:, :, 0] | c[:, :, 1] | c[:, :, 2] | c[:, :, 3]).reshape(-1, 64)

    def _unpack(self, data, n):
        np = _np()
        b = self._blocks(data, n)
        d = b[:, 64:].copy().view("<f2").astype(np.float32).reshape(-1)
        qs = b[:, :64].reshape(-1, 2, 1, 32) >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
        return ((qs & 3).astype(np.int8) - 1).reshape(-1), d

    def random_block(self, rng):
        d = _rand_d(rng)
        return _pick(rng, _CODES2, 64) + d


class TQ1_0(_TQ):
    name, type_id, block_size, type_size = "TQ1_0", 34, 256, 54
    kind, roles, include, file_type = "ternary", ("linear",), "fmt_tq1_0", 36
    planes = 5

    @staticmethod
    def _pack_codes(codes):
        """(n_blocks, 256) codes -> (n_blocks, 52) = qs[48] + qh[4]."""
        np = _np()
        nb = codes.shape[0]
        p5 = np.array([81, 27, 9, 3, 1], dtype=np.uint16)
        c = codes.astype(np.uint16)
        qs0 = (c[:, :160].reshape(nb, 5, 32) * p5.reshape(1, 5, 1)).sum(axis=1)
        qs1 = (c[:, 160:240].reshape(nb, 5, 16) * p5.reshape(1, 5, 1)).sum(axis=1)
        qh = (c[:, 240:].reshape(nb, 4, 4) * p5[:4].reshape(1, 4, 1)).sum(axis=1)
        v = np.concatenate([qs0, qs1, qh], axis=1)
        return ((v * 256 + 242) // 243).astype(np.uint8)

    def _unpack(self, data, n):
        np = _np()
        b = self._blocks(data, n)
        nb = b.shape[0]
        d = b[:, 52:].copy().view("<f2").astype(np.float32).reshape(-1)
        p = np.array([1, 3, 9, 27, 81], dtype=np.uint8)
        q0 = b[:, :32].reshape(nb, 1, 32) * p.reshape(1, 5, 1)        # uint8: mod 256
        q1 = b[:, 32:48].reshape(nb, 1, 16) * p.reshape(1, 5, 1)
        qh = b[:, 48:52].reshape(nb, 1, 4) * p[:4].reshape(1, 4, 1)
        q = np.concatenate([q0.reshape(nb, -1), q1.reshape(nb, -1), qh.reshape(nb, -1)], axis=1)
        t = ((q.astype(np.uint16) * 3) >> 8).astype(np.int8) - 1
        return t.reshape(-1), d

    def random_block(self, rng):
        d = _rand_d(rng)
        return _pick(rng, _CODES3, 52) + d


class I2_S(_Packed):
    """bitnet.cpp I2_S: the block geometry is 128 values / 32 bytes, plus a 32-byte tail per tensor."""
    name, type_id, block_size, type_size = "I2_S", 36, 128, 32
    kind, roles, include, file_type = "ternary", ("linear",), "fmt_i2_s", 40
    planes = 4
    tensor_scale = True

    def nbytes(self, n_elements):
        self.check_length(n_elements)
        return n_elements // 4 + 32

    def _split(self, data, n):
        raw = _as_u8(data)
        want = self.nbytes(n)
        if raw.size != want:
            raise FormatError(f"{self.name}: {n} values need {want} bytes (n/4 + 32), got {raw.size}")
        return raw[: n // 4].reshape(-1, 32), raw[n // 4: n // 4 + 4]

    def _unpack(self, data, n):
        """-> (int8 values, float32 array of the one tensor scale, shape (1,))."""
        np = _np()
        codes, scale = self._split(data, n)
        shifts = np.array([6, 4, 2, 0], dtype=np.uint8).reshape(1, 4, 1)
        t = ((codes.reshape(-1, 1, 32) >> shifts) & 3).astype(np.int8) - 1
        return t.reshape(-1), scale.copy().view("<f4").astype(np.float32)

    def _pack(self, t, scale):
        """t: ternary ints (n % 128 == 0); scale: the one f32 scale of the tensor."""
        np = _np()
        c = (t + 1).astype(np.uint8).reshape(-1, 4, 32)
        codes = (c[:, 0] << 6) | (c[:, 1] << 4) | (c[:, 2] << 2) | c[:, 3]
        s = np.asarray(scale, dtype="<f4").reshape(-1)
        if s.size != 1:
            raise FormatError(f"I2_S: one scale per tensor, got {s.size}")
        return codes.tobytes() + self.tail(s[0])

    def tail(self, scale=1.0):
        return struct.pack("<f", scale) + bytes(28)

    def quantize(self, x):
        """As bitnet.cpp quantize_i2_s: scale = max|x|; |x| < 1e-6 -> 0, else sign(x)."""
        np = _np()
        x = self._flat(x)
        scale = np.float32(np.abs(x).max()) if x.size else np.float32(0)
        t = np.where(np.abs(x) < 1e-6, 0, np.where(x > 0, 1, -1)).astype(np.int8)
        return self.pack(t, scale)

    def random_block(self, rng):
        _rand_d(rng)
        return _pick(rng, _CODES2, 32)


class Q1_0(_Packed):
    """ggml's Q1_0: f16 d, then 128 sign bits (values are signs: pack takes -1 / +1)."""
    name, type_id, block_size, type_size = "Q1_0", 41, 128, 18
    kind, roles, include, file_type = "binary", ("linear", "table"), "fmt_q1_0", 40
    planes = 8

    def _unpack(self, data, n):
        """-> (int8 signs in {-1, +1}, float32 per-block scales)."""
        np = _np()
        b = self._blocks(data, n)
        d = b[:, :2].copy().view("<f2").astype(np.float32).reshape(-1)
        bits = np.unpackbits(b[:, 2:], axis=1, bitorder="little")
        return (bits.astype(np.int8) * 2 - 1).reshape(-1), d

    def _pack(self, s, d):
        """s: signs -1 / +1 (n % 128 == 0); d: one scale per 128 values (stored as f16)."""
        np = _np()
        nb = s.size // 128
        bits = np.packbits((s > 0).reshape(nb, 128), axis=1, bitorder="little")
        return np.concatenate([_block_f16(d, nb, self.name), bits], axis=1).tobytes()

    def quantize(self, x):
        """As ggml quantize_row_q1_0_ref: d = mean|x| (float32, summed in order), bit = x >= 0."""
        np = _np()
        blocks = self._flat(x).reshape(-1, 128)
        d = np.add.accumulate(np.abs(blocks), axis=1, dtype=np.float32)[:, -1] / np.float32(128)
        s = np.where(blocks >= 0, 1, -1).astype(np.int8)
        return self.pack(s, d)

    def random_block(self, rng):
        return _rand_d(rng) + rng.randbytes(16)


class _Q2(_Packed):
    """ggml's Q2_0 layout: f16 d, then 2-bit codes (t + 1), value j of a block at bits 2 (j % 4)
    of byte j / 4 of the codes."""

    def _codes(self, codes, d):
        np = _np()
        nb = codes.size // self.block_size
        c = codes.reshape(nb, -1, 4) << np.array([0, 2, 4, 6], dtype=np.uint8)
        qs = c[..., 0] | c[..., 1] | c[..., 2] | c[..., 3]
        return np.concatenate([_block_f16(d, nb, self.name), qs], axis=1).tobytes()

    def _unpack(self, data, n):
        """-> (int8 values code - 1 (2 for a stray code 3), float32 per-block scales)."""
        np = _np()
        b = self._blocks(data, n)
        d = b[:, :2].copy().view("<f2").astype(np.float32).reshape(-1)
        codes = (b[:, 2:, None] >> np.array([0, 2, 4, 6], dtype=np.uint8)) & 3
        return (codes.astype(np.int8) - 1).reshape(-1), d

    def _pack(self, t, d):
        """t: ternary ints (n a multiple of the block); d: one scale per block (stored as f16)."""
        return self._codes((t + 1).astype("u1"), d)

    def quantize(self, x):
        """As ggml quantize_row_q2_0_ref: d = max|x| per block, code = clamp(roundf(x / d) + 1, 0, 3)."""
        np = _np()
        blocks = self._flat(x).reshape(-1, self.block_size)
        d = np.abs(blocks).max(axis=1, keepdims=True)
        with np.errstate(divide="ignore"):
            inv = np.where(d > 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
        codes = np.clip(_round_away(blocks * inv) + 1, 0, 3).astype(np.uint8)
        return self._codes(codes, d)

    def random_block(self, rng):
        return _rand_d(rng) + _pick(rng, _CODES2, self.block_size // 4)


class Q2_0(_Q2):
    name, type_id, block_size, type_size = "Q2_0", 42, 64, 18
    kind, roles, include, file_type = "ternary", ("linear", "table"), "fmt_q2_0", 41
    planes = 4


class Q2_0_G128(_Q2):
    name, type_id, block_size, type_size = "Q2_0_G128", 142, 128, 34
    kind, roles, include, file_type = "ternary", ("linear", "table"), "fmt_q2_0", 141
    planes = 4
