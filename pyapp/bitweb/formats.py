"""GGML weight formats: one class per type, registered by type id in TYPES.

Module import is stdlib only (it runs in Pyodide): the facts (name, type_id, geometry, kind,
roles, file_type, WGSL include), nbytes, random_block and tail need nothing else. numpy is
imported lazily inside the CPython-only methods: dequantize, quantize, pack, unpack,
random_values, random_bytes.

Words: a *packed* format is one the packed kernels read as small integer codes times scales
(bitlinear gemv / gate_up, bitlinear_tiled, a packed LM head in lmhead.wgsl), in either
activation mode; today the ternary kind (values -1, 0, +1: I2_S, TQ2_0, TQ1_0, Q2_0, Q2_0_G128)
and the binary kind (values -1, +1: Q1_0). A *float* format (F32, F16, BF16, Q8_0) is decoded
to f32 by the float kernels (dense, lmhead, embedding, requant).

Element order is GGUF order: the flat tensor with ne0 contiguous, i.e. a numpy
array with the GGUF dims reversed, flattened in C order. Blocks run over that
flat order (a block never spans two rows because ne0 % block_size == 0).

Layouts (little endian; ARCHITECTURE.md, "Weight formats", has the table and why id 36 is I2_S):
  F32    4 bytes per value.
  F16    IEEE half.
  BF16   the upper 16 bits of an f32.
  Q8_0   32 values in 34 bytes: f16 d, int8 q[32];          y = d * q
  TQ2_0  256 values in 66 bytes: qs[64], f16 d. For half h in {0,1}, shift
         l in 0..3, m in 0..31: value h*128 + l*32 + m has code
         (qs[h*32 + m] >> 2l) & 3;                           y = d * (code - 1)
  TQ1_0  256 values in 54 bytes: qs[48], qh[4], f16 d. Base 3, 5 trits per
         byte, stored as q = ceil(v * 256 / 243) for v = sum c_k 3^(4-k);
         trit k is ((q * 3^k mod 256) * 3) >> 8. qs[0:32] hold values
         k*32 + m (k 0..4), qs[32:48] values 160 + k*16 + m, qh[0:4] (4 trits
         each) values 240 + k*4 + m;                          y = d * (trit - 1)
  I2_S   (bitnet.cpp, x86 layout of the published file) 128 values per 32
         bytes: byte b of a block holds value b in bits 7:6, 32+b in 5:4,
         64+b in 3:2, 96+b in 1:0; code 0 -> -1, 1 -> 0, 2 -> +1. After the n/4
         code bytes: one f32 scale for the whole tensor, then 28 zero bytes
         (n/4 + 32 bytes in all);                             y = scale * (code - 1)
  Q1_0   128 values in 18 bytes: f16 d, then 16 bytes of signs: bit (j % 8) of
         byte j / 8 set -> +d, clear -> -d.
  Q2_0   64 values in 18 bytes: f16 d, then 16 bytes of 2-bit codes: value j has
         code (qs[j / 4] >> 2 (j % 4)) & 3;                    y = d * (code - 1)
  Q2_0_G128  (PrismML's fork, type 142) the same codes in 128-value blocks of 34
         bytes. PrismML's first Ternary Bonsai files store this layout under type
         42: bitweb.gguf tells the two apart by the tensor's byte span.

Codes 3 (I2_S, TQ2_0, Q2_0) are never written by the packers; on decode they give
+2, as ggml / bitnet.cpp arithmetic (code - 1) does.
"""
from __future__ import annotations

import struct


class FormatError(ValueError):
    """Bad input to a format method: wrong byte count, length not a whole number of blocks, bad codes."""


def _np():
    import numpy as np
    return np


def _as_u8(data):
    """bytes / bytearray / memoryview / uint8 array -> flat uint8 numpy array (no copy where possible)."""
    np = _np()
    if isinstance(data, np.ndarray):
        return data.reshape(-1).view(np.uint8)
    return np.frombuffer(data, dtype=np.uint8)


def _round_away(x):
    """Round half away from zero, computed exactly as gguf-py's np_roundf (ggml's roundf)."""
    np = _np()
    a = np.abs(x)
    floored = np.floor(a)
    return np.sign(x) * (floored + np.floor(2 * (a - floored)))


def _block_f16(d, n_blocks, what):
    """Per-block scales (scalar or n_blocks values) -> (n_blocks, 2) uint8 of little-endian f16."""
    np = _np()
    d = np.asarray(d, dtype=np.float32).reshape(-1)
    if d.size == 1:
        d = np.repeat(d, n_blocks)
    if d.size != n_blocks:
        raise FormatError(f"{what}: need 1 or {n_blocks} scales (one per block), got {d.size}")
    return d.astype("<f2").view(np.uint8).reshape(n_blocks, 2)


ROLES = ("linear", "table", "norm")
KINDS = ("float", "ternary", "binary")


def _pick(rng, table: bytes, n: int) -> bytes:
    return bytes(rng.choice(table) for _ in range(n))


def _rand_d(rng) -> bytes:
    """A random block scale as f16 bytes (drawn first for every block: random_block)."""
    return struct.pack("<e", rng.uniform(0.001, 0.01))


# Bytes that are valid codes: four 2-bit codes in 0..2 (I2_S, TQ2_0, Q2_0), five base-3 trits
# (TQ1_0: q = ceil(v * 256 / 243) for v in 0..242).
_CODES2 = bytes(a | b << 2 | c << 4 | d << 6 for a in range(3) for b in range(3) for c in range(3) for d in range(3))
_CODES3 = bytes(-(-v * 256 // 243) for v in range(243))


class Format:
    """A GGML tensor type: one instance per type id in TYPES (module attributes of the same name:
    formats.I2_S ...). Every list of formats and every kernel choice asks these facts:

      name, type_id           GGML's
      block_size, type_size   values and bytes per block; nbytes(n) for a tensor of n values
      kind                    "ternary" (-1, 0, +1), "binary" (-1, +1) or "float"
      packed                  read by the packed kernels as codes times scales (kind != "float");
                              float formats are decoded to f32 by the float kernels
      roles                   where a model may use it: "linear" (the block linears), "table"
                              (token_embd, and the LM head: output or the tied token_embd), "norm"
      tensor_scale            one f32 scale for the whole tensor after the blocks (I2_S), no block scale
      scale_block             values per scale d (and offset m) of a packed format (None: tensor scale)
      offsets                 the packed values are q d + m (an offset m per scale_block), not q d
      planes                  (packed) 16-value planes in each 16 bytes of codes: how the prefill
                              kernel (bitlinear_tiled.wgsl) walks them (NP of its include)
      file_type               general.file_type (llama_ftype) of a model whose linears have it
      include                 shaders/<include>.wgsl, its decode (`#include format`, bitweb.shaders);
                              wgsl_constants(): the geometry the loader declares beside it
    """
    name: str
    type_id: int
    block_size: int
    type_size: int
    kind: str
    roles: tuple
    include: str
    file_type: int
    tensor_scale: bool = False
    offsets: bool = False
    planes: int | None = None

    @property
    def packed(self) -> bool:
        return self.kind != "float"

    @property
    def scale_block(self):
        return None if self.tensor_scale or not self.packed else self.block_size

    def wgsl_constants(self) -> dict:
        """WGSL constants declared with the format's include: BLK values and BBYTES bytes per block,
    and NP (planes) for a packed format."""
        c = {"BLK": self.block_size, "BBYTES": self.type_size}
        if self.planes:
            c["NP"] = self.planes
        return c

    def check_length(self, n: int) -> None:
        if n < 0 or n % self.block_size:
            raise FormatError(f"{self.name}: {n} values is not a whole number of {self.block_size}-value blocks")

    def nbytes(self, n_elements: int) -> int:
        self.check_length(n_elements)
        return n_elements // self.block_size * self.type_size

    def _blocks(self, data, n):
        """Check the byte count, return (n_blocks, type_size) uint8."""
        raw = _as_u8(data)
        want = self.nbytes(n)
        if raw.size != want:
            raise FormatError(f"{self.name}: {n} values need {want} bytes, got {raw.size}")
        return raw.reshape(n // self.block_size, self.type_size)

    def _flat(self, x):
        np = _np()
        x = np.asarray(x, dtype=np.float32).reshape(-1)
        self.check_length(x.size)
        return x

    def dequantize(self, data, n: int):
        """The format's bytes of n values -> flat float32 numpy array (CPython only)."""
        raise NotImplementedError

    def quantize(self, x) -> bytes:
        """Floats (any shape, GGUF element order when flattened) -> the format's bytes."""
        raise NotImplementedError

    def unpack(self, data, n: int):
        """Packed formats: bytes of n values -> (q int8 (n,), d float32, m float32 or None): value
        i is q[i] d[i // scale_block] (+ m[...] with offsets); a tensor_scale format gives its one
        scale as d (shape (1,))."""
        raise FormatError(f"{self.name} is not a packed format (ternary or binary)")

    def pack(self, q, d, m=None) -> bytes:
        """Packed formats: int values q of the kind (any shape, n a multiple of the block) and
        their scales d (one per scale_block, a scalar for all, or the one tensor scale) -> bytes."""
        raise FormatError(f"{self.name} is not a packed format (ternary or binary)")

    def tail(self, scale: float = 1.0) -> bytes:
        """The bytes after the blocks (I2_S: its f32 tensor scale and 28 zero bytes; others none)."""
        return b""

    def random_block(self, rng) -> bytes:
        """One block of valid random bytes (stdlib random.Random; bitweb.bench tiles them): finite
        scales, codes in range."""
        raise NotImplementedError

    def random_values(self, rng, shape):
        """Random int8 values for the generator's weights (numpy Generator): uniform ternary, or
        signs for a binary format (a float format stores ternary values times a scale too)."""
        np = _np()
        if self.kind == "binary":
            return rng.integers(0, 2, size=shape, dtype=np.int8) * np.int8(2) - np.int8(1)
        return rng.integers(-1, 2, size=shape, dtype=np.int8)

    def random_bytes(self, rng, values, scale: float) -> bytes:
        """The generator's weight of values (random_values) times scale: a block format stores one
        d per block, scale times uniform [0.9, 1.1) from rng; a tensor_scale format the scale once;
        a float format quantizes values * scale."""
        np = _np()
        if not self.packed:
            return self.quantize(values.astype(np.float32) * np.float32(scale))
        if self.tensor_scale:
            return self.pack(values, np.float32(scale))
        return self.pack(values, scale * rng.uniform(0.9, 1.1, size=values.size // self.block_size))

    def __repr__(self):
        return f"<format {self.name} id={self.type_id} block={self.block_size} bytes={self.type_size}>"


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


class _Packed(Format):
    """Formats whose values are small integer codes times a scale (ternary and binary kinds).
    Subclasses define _unpack(data, n) -> (q int8, d float32) and _pack(q int8 flat, d) -> bytes."""

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


# Registry order is the order of every derived list (packed formats first, then floats).
TYPES: dict[int, Format] = {f.type_id: f for f in (I2_S(), TQ2_0(), TQ1_0(), Q1_0(), Q2_0(), Q2_0_G128(),
                                                    F32(), F16(), BF16(), Q8_0())}
_BY_NAME = {f.name: f for f in TYPES.values()}
# the format objects by name: formats.I2_S, formats.Q8_0 ... (the classes stay reachable as type(f))
I2_S, TQ2_0, TQ1_0, Q1_0, Q2_0, Q2_0_G128 = (_BY_NAME[n] for n in ("I2_S", "TQ2_0", "TQ1_0", "Q1_0", "Q2_0", "Q2_0_G128"))
F32, F16, BF16, Q8_0 = (_BY_NAME[n] for n in ("F32", "F16", "BF16", "Q8_0"))


def select(role: str | None = None, packed: bool | None = None) -> tuple:
    """The registered formats that may fill `role` (None: any) and are packed or not (None: both),
    in registry order: select("linear") the block linear types, select("table") token_embd / LM
    head, select(packed=True) what the packed kernels run."""
    if role is not None and role not in ROLES:
        raise FormatError(f"unknown role {role!r}; roles: {', '.join(ROLES)}")
    return tuple(f for f in TYPES.values()
                 if (role is None or role in f.roles) and (packed is None or f.packed == packed))


def by_name(name: str) -> Format:
    """'I2_S' or 'i2_s' -> the Format (for names a user or a file gives)."""
    f = _BY_NAME.get(str(name).upper())
    if f is None:
        raise FormatError(f"unknown GGML type {name!r}; known: {', '.join(_BY_NAME)}")
    return f


def get(fmt) -> Format:
    """A Format, a type id or a type name -> the Format."""
    if isinstance(fmt, Format):
        return fmt
    if isinstance(fmt, int):
        if fmt not in TYPES:
            raise FormatError(f"unknown GGML type id {fmt}; known: {sorted(TYPES)}")
        return TYPES[fmt]
    return by_name(fmt)


# Module-level conveniences: fmt may be a Format, a type id or a name.
def nbytes(fmt, n_elements: int) -> int:
    return get(fmt).nbytes(n_elements)


def dequantize(fmt, data, n: int):
    return get(fmt).dequantize(data, n)


def quantize(fmt, x) -> bytes:
    return get(fmt).quantize(x)
