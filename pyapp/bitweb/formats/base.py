"""What every weight format shares: the Format base class (the facts every layer asks), its errors,
the byte helpers, and IntegerFormat, the base of ggml's block-quantized types (bitweb.formats has
the registry and the layouts).

Module import is stdlib only (it runs in Pyodide); numpy is imported lazily inside the CPython-only
methods: dequantize, quantize, pack, unpack, random_values, random_bytes, random_codes.
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


def _f16(b, at):
    """Little-endian f16 field at byte `at` of each block row -> float32 [n_blocks]."""
    np = _np()
    return np.ascontiguousarray(b[:, at:at + 2]).view("<f2").astype(np.float32).reshape(-1)


ROLES = ("linear", "table", "norm")
KINDS = ("float", "ternary", "binary", "integer")


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
      kind                    "ternary" (-1, 0, +1), "binary" (-1, +1), "integer" (codes of a wider
                              range: ggml's block-quantized types) or "float"
      packed                  read by the packed kernels as codes times scales (kind != "float");
                              float formats are decoded to f32 by the float kernels
      a8                      its linears take the engine's A8 mode (per-token int8 activations: the
                              ternary and binary kinds, trained W1.58A8); the others run f32
                              activations in either mode (the exact one)
      q_range                 (packed) the smallest and largest value q of unpack
      vec_dot                 ggml's activation blocks for its integer dot products (vec_dot_type:
                              "q8_0", or "q8_1" with the block sums): what its A8 mode computes
                              (bitlinear.wgsl Q8B); None: per-token int8 (a8) or none
      roles                   where a model may use it: "linear" (the block linears), "table"
                              (token_embd, and the LM head: output or the tied token_embd), "norm"
      tensor_scale            one f32 scale for the whole tensor after the blocks (I2_S), no block scale
      scale_block             values per scale d (and offset m) of a packed format (None: tensor scale)
      offsets                 the packed values are q d + m (an offset m per scale_block), not q d
      planes                  (packed) 16-value planes in each quad (16 bytes of codes as the format's
                              include reads them): how the prefill kernel (bitlinear_tiled.wgsl)
                              walks them (NP of its include)
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
    q_range: tuple | None = None
    vec_dot: str | None = None

    @property
    def packed(self) -> bool:
        return self.kind != "float"

    @property
    def a8(self) -> bool:
        return self.kind in ("ternary", "binary")

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
        raise FormatError(f"{self.name} is not a packed format (ternary, binary or integer codes)")

    def pack(self, q, d, m=None) -> bytes:
        """Packed formats: int values q of the kind (any shape, n a multiple of the block) and
        their scales d (one per scale_block, a scalar for all, or the one tensor scale) -> bytes."""
        raise FormatError(f"{self.name} is not a packed format (ternary, binary or integer codes)")

    def tail(self, scale: float = 1.0) -> bytes:
        """The bytes after the blocks (I2_S: its f32 tensor scale and 28 zero bytes; others none)."""
        return b""

    def random_block(self, rng) -> bytes:
        """One block of valid random bytes (stdlib random.Random; bitweb.bench tiles them): finite
        scales, codes in range."""
        raise NotImplementedError

    def random_values(self, rng, shape):
        """Random int8 values for the generator's weights (numpy Generator): uniform ternary, or
        signs for a binary format (a float or integer format stores ternary values times a scale too)."""
        np = _np()
        if self.kind == "binary":
            return rng.integers(0, 2, size=shape, dtype=np.int8) * np.int8(2) - np.int8(1)
        return rng.integers(-1, 2, size=shape, dtype=np.int8)

    def random_codes(self, rng, n: int):
        """n random values q of the format (int8, uniform over what it stores: the kernel cases'
        weights, bitweb.ref); the kind's random_values, or every code of q_range for integer codes."""
        np = _np()
        if self.kind == "integer":
            return rng.integers(self.q_range[0], self.q_range[1] + 1, size=n).astype(np.int8)
        return self.random_values(rng, n)

    def random_bytes(self, rng, values, scale: float) -> bytes:
        """The generator's weight of values (random_values) times scale: a ternary / binary block
        format stores one d per block, scale times uniform [0.9, 1.1) from rng; a tensor_scale format
        the scale once; a float or integer format quantizes values * scale."""
        np = _np()
        if not self.a8:
            return self.quantize(values.astype(np.float32) * np.float32(scale))
        if self.tensor_scale:
            return self.pack(values, np.float32(scale))
        return self.pack(values, scale * rng.uniform(0.9, 1.1, size=values.size // self.block_size))

    def __repr__(self):
        return f"<format {self.name} id={self.type_id} block={self.block_size} bytes={self.type_size}>"


# No integer type represents |w| above 65504 * 128 * 32 (Q6_K's largest d * scale * code) < 2^28;
# larger inputs are refused before the searches (whose sums of x^3 * code overflow float32 from ~2e12).
MAX_ABS = float(2 ** 30)


class IntegerFormat(Format):
    """ggml's block-quantized types (Q4_0 ... Q6_K): codes q in q_range, value = s q + o per unit of
    scale_block values, s and o from the block's fp16 fields (and, in the K-quants, its packed
    sub-block scales). Subclasses define

      _units(b)   uint8 [n_blocks, type_size] -> (q int8 [n_blocks, block], s, o float32
                  [n_blocks, block // scale_block]); o = -0.0 for a format without offsets (x + -0.0
                  == x for every x), -min for one that stores a min (subtracts_min)
      _pack(q, d, m)   q int8 [n_blocks, block], d (and m) float32 [n_blocks, units] -> uint8 blocks
      _quantize(x)     float32 [n_blocks, block] -> uint8 blocks (ggml's quantize_row_*_ref)
      f16_at           byte offsets of the fp16 fields (random_block draws them finite)

    dequantize is bit for bit gguf-py's and ggml's dequantize_row_* (s*q rounded to float32, then + o;
    NaN scales of corrupt bytes included); unpack gives (q, d, m) = (q, s, o) (m None without offsets)."""
    kind = "integer"
    roles = ("linear", "table")
    f16_at: tuple = ()
    subtracts_min = False

    def units(self, data, n: int):
        """Bytes of n values -> (q int8 [n], s float32 [n // scale_block], o float32 [likewise])."""
        np = _np()
        b = self._blocks(data, n)
        with np.errstate(invalid="ignore", over="ignore"):      # inf * 0 of a corrupt scale: NaN, as in ggml
            q, s, o = self._units(b)
        return q.reshape(-1).astype(np.int8), s.reshape(-1).astype(np.float32), o.reshape(-1).astype(np.float32)

    def unpack(self, data, n):
        q, s, o = self.units(data, n)
        return q, s, (o if self.offsets else None)

    def dequantize(self, data, n):
        """s*q + o per unit, bit for bit gguf-py and ggml. Types that store a min compute s*q - min
        as ggml does (o = -min): the same value, and the same NaN bits when a corrupt scale is NaN."""
        np = _np()
        q, s, o = self.units(data, n)
        with np.errstate(invalid="ignore", over="ignore"):
            sq = s[:, None] * q.reshape(s.size, -1).astype(np.float32)
            return (sq - (-o[:, None]) if self.subtracts_min else sq + o[:, None]).reshape(-1)

    def quantize(self, x) -> bytes:
        """Floats (any shape, GGUF order when flattened; finite) -> bytes, as ggml's
        quantize_row_*_ref. FormatError for a length that is not whole blocks, NaN / inf, |x| > MAX_ABS
        and a block whose fp16 scales overflow."""
        np = _np()
        x = self._flat(x)
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

    def pack(self, q, d, m=None) -> bytes:
        """q: int values in q_range (any shape, whole blocks); d: one scale per scale_block (or one for
        all); m: one offset per scale_block (formats with offsets; None: 0). The values are q d + m
        exactly where the format can store d and m (fp16 fields; K-quants: a super-block's scales
        must be integer multiples of one fp16 scale, FormatError otherwise)."""
        np = _np()
        q = np.asarray(q)
        if q.dtype.kind not in "iu":
            raise FormatError(f"{self.name} values must be an integer array, got dtype {q.dtype}")
        flat = q.reshape(-1).astype(np.int32)
        self.check_length(flat.size)
        lo, hi = self.q_range
        if flat.size and (flat.min() < lo or flat.max() > hi):
            raise FormatError(f"{self.name} values must be in [{lo}, {hi}], got range [{flat.min()}, {flat.max()}]")
        if m is not None and not self.offsets:
            raise FormatError(f"{self.name} has no offsets (m)")
        nb, nu = flat.size // self.block_size, flat.size // self.scale_block

        def per_unit(v, what):
            v = np.asarray(v, np.float32).reshape(-1)
            if v.size == 1:
                v = np.repeat(v, nu)
            if v.size != nu:
                raise FormatError(f"{self.name}: need 1 or {nu} {what} (one per {self.scale_block} values), got {v.size}")
            return v.reshape(nb, -1)
        d = per_unit(d, "scales")
        m = per_unit(0.0 if m is None else m, "offsets") if self.offsets else None
        return self._pack(flat.astype(np.int8).reshape(nb, self.block_size), d, m).tobytes()

    def random_block(self, rng) -> bytes:
        """Random bytes (every byte pattern of the codes and packed scales is valid), its fp16 fields
        finite and small."""
        b = bytearray(rng.randbytes(self.type_size))
        for at in self.f16_at:
            b[at:at + 2] = _rand_d(rng)
        return bytes(b)

    def __repr__(self):
        return f"<format {self.name} id={self.type_id} block={self.block_size} bytes={self.type_size}>"
