"""The float formats: F32, F16, BF16 (one value per element) and Q8_0 (int8 times an f16 scale per
32 values), decoded to f32 by the float kernels (dense, lmhead, embedding, requant). Layouts:
bitweb.formats."""
from __future__ import annotations

import struct

from bitweb.formats.base import Format, _np, _rand_d, _round_away


class F32(Format):
    name, type_id, block_size, type_size = "F32", 0, 1, 4
    kind, roles, include, file_type = "float", ("linear", "table", "norm"), "fmt_f32", 0

    def dequantize(self, data, n):
        return self._blocks(data, n).reshape(-1).view("<f4").astype(_np().float32)

    def quantize(self, x):
        return self._flat(x).astype("<f4").tobytes()

    def random_block(self, rng):
        _rand_d(rng)
        return struct.pack("<f", rng.uniform(-1, 1))


class F16(Format):
    name, type_id, block_size, type_size = "F16", 1, 1, 2
    kind, roles, include, file_type = "float", ("linear", "table"), "fmt_f16", 1

    def dequantize(self, data, n):
        return self._blocks(data, n).reshape(-1).view("<f2").astype(_np().float32)

    def quantize(self, x):
        return self._flat(x).astype("<f2").tobytes()

    def random_block(self, rng):
        _rand_d(rng)
        return struct.pack("<e", rng.uniform(-1, 1))


class BF16(Format):
    name, type_id, block_size, type_size = "BF16", 30, 1, 2
    kind, roles, include, file_type = "float", ("linear", "table"), "fmt_bf16", 32

    def dequantize(self, data, n):
        np = _np()
        h = self._blocks(data, n).reshape(-1).view("<u2").astype(np.uint32)
        return (h << 16).view(np.float32)

    def quantize(self, x):
        """Round to nearest even; NaN forced quiet (ggml_compute_fp32_to_bf16)."""
        np = _np()
        u = self._flat(x).view(np.uint32)
        u = np.where((u & 0x7FFFFFFF) > 0x7F800000, (u & np.uint32(0xFFFF0000)) | np.uint32(64 << 16), u)
        u = (u.astype(np.uint64) + (0x7FFF + ((u >> 16) & 1))) >> 16
        return u.astype("<u2").tobytes()

    def random_block(self, rng):
        _rand_d(rng)
        return struct.pack("<f", rng.uniform(-1, 1))[2:]


class Q8_0(Format):
    name, type_id, block_size, type_size = "Q8_0", 8, 32, 34
    kind, roles, include, file_type = "float", ("linear", "table"), "fmt_q8_0", 7

    def dequantize(self, data, n):
        np = _np()
        b = self._blocks(data, n)
        d = b[:, :2].copy().view("<f2").astype(np.float32)
        q = b[:, 2:].view(np.int8).astype(np.float32)
        return (q * d).reshape(-1)

    def quantize(self, x):
        """d = max|x| / 127, q = round(x / d) (ggml quantize_row_q8_0_ref)."""
        np = _np()
        blocks = self._flat(x).reshape(-1, 32)
        d = np.abs(blocks).max(axis=1, keepdims=True) / 127
        with np.errstate(divide="ignore"):
            inv = np.where(d == 0, 0, 1 / d)
        q = _round_away(blocks * inv).astype(np.int8).view(np.uint8)
        return np.concatenate([d.astype("<f2").view(np.uint8), q], axis=1).tobytes()

    def random_block(self, rng):
        return _rand_d(rng) + rng.randbytes(32)
