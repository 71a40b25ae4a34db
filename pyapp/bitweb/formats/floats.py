"""The float formats: F32, F16, BF16 (one value per element), decoded to f32 by the float kernels
(dense, lmhead, embedding, requant) and read by bitlinear.wgsl's M = 1 kernels as units of 16 values
(f32 activations). Layouts: bitweb.formats."""
from __future__ import annotations

import struct

from bitweb.formats.base import Format, _np, _rand_d


class _Float(Format):
    """One value per element. WGSL: BLK = 16, the M = 1 unit of bitlinear.wgsl (common_float_unit)."""
    kind = "float"
    UNIT = 16

    def wgsl_constants(self):
        return {"BLK": self.UNIT, "BBYTES": self.UNIT * self.type_size}


class F32(_Float):
    name, type_id, block_size, type_size = "F32", 0, 1, 4
    kind, roles, include, file_type = "float", ("linear", "table", "norm"), "fmt_f32", 0

    def dequantize(self, data, n):
        return self._blocks(data, n).reshape(-1).view("<f4").astype(_np().float32)

    def quantize(self, x):
        return self._flat(x).astype("<f4").tobytes()

    def random_block(self, rng):
        _rand_d(rng)
        return struct.pack("<f", rng.uniform(-1, 1))


class F16(_Float):
    name, type_id, block_size, type_size = "F16", 1, 1, 2
    kind, roles, include, file_type = "float", ("linear", "table"), "fmt_f16", 1

    def dequantize(self, data, n):
        return self._blocks(data, n).reshape(-1).view("<f2").astype(_np().float32)

    def quantize(self, x):
        return self._flat(x).astype("<f2").tobytes()

    def random_block(self, rng):
        _rand_d(rng)
        return struct.pack("<e", rng.uniform(-1, 1))


class BF16(_Float):
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
