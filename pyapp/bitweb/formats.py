"""GGML weight formats: one class per type, registered by type id in TYPES.

Module import is stdlib only (it runs in Pyodide): the specs (name, type_id,
block_size, type_size, nbytes) need nothing else. numpy is imported lazily
inside the CPython-only methods: dequantize, quantize, pack_*, unpack_ternary.

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
         packed bytes: one f32 scale for the whole tensor, then 28 zero bytes
         (n/4 + 32 bytes in all);                             y = scale * (code - 1)
  Q1_0   128 values in 18 bytes: f16 d, then 16 bytes of signs: bit (j % 8) of
         byte j / 8 set -> +d, clear -> -d.

Codes 3 (I2_S, TQ2_0) are never written by the packers; on decode they give +2,
as ggml / bitnet.cpp arithmetic (code - 1) does.
"""
from __future__ import annotations


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


def _ternary_codes(t):
    """int array in {-1, 0, 1} -> flat uint8 codes {0, 1, 2}."""
    np = _np()
    t = np.asarray(t)
    if t.dtype.kind not in "iu":
        raise FormatError(f"ternary values must be an integer array, got dtype {t.dtype}")
    flat = t.reshape(-1).astype(np.int16)
    if flat.size and (flat.min() < -1 or flat.max() > 1):
        raise FormatError(f"ternary values must be in {{-1, 0, 1}}, got range [{flat.min()}, {flat.max()}]")
    return (flat + 1).astype(np.uint8)


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


class Format:
    """A GGML tensor type. nbytes(n) is the bytes for a tensor of n values.

    The registry facts every other list of formats is derived from (see names()):
      kind     "float": decoded to f32 by the dense, lmhead, embedding and requant kernels;
               "ternary" / "binary": packed codes (w = c - 1 / w = 2b - 1 times a scale) run by the
               bitlinear kernels (M = 1 and tiled), f32 or int8 (A8) activations
      roles    where a model may use it: "linear" (the block linears), "table" (token_embd, and the
               LM head: output or the tied token_embd), "norm" (norm weights)
      define   the WGSL #if switch that selects it in every kernel that reads it
      include  shaders/<include>.wgsl: its decode functions (`#include format` in a kernel pulls in
               the include of the format whose define is set; see bitweb.shaders)
    """
    name: str
    type_id: int
    block_size: int
    type_size: int
    kind: str
    roles: tuple
    define: str
    include: str

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
        """Packed bytes of n values -> flat float32 numpy array (CPython only)."""
        raise NotImplementedError

    def quantize(self, x) -> bytes:
        """Floats (any shape, GGUF element order when flattened) -> packed bytes."""
        raise NotImplementedError

    def __repr__(self):
        return f"<format {self.name} id={self.type_id} block={self.block_size} bytes={self.type_size}>"


class F32(Format):
    name, type_id, block_size, type_size = "F32", 0, 1, 4
    kind, roles, define, include = "float", ("linear", "table", "norm"), "FMT_F32", "fmt_f32"

    def dequantize(self, data, n):
        return self._blocks(data, n).reshape(-1).view("<f4").astype(_np().float32)

    def quantize(self, x):
        return self._flat(x).astype("<f4").tobytes()


class F16(Format):
    name, type_id, block_size, type_size = "F16", 1, 1, 2
    kind, roles, define, include = "float", ("linear", "table"), "FMT_F16", "fmt_f16"

    def dequantize(self, data, n):
        return self._blocks(data, n).reshape(-1).view("<f2").astype(_np().float32)

    def quantize(self, x):
        return self._flat(x).astype("<f2").tobytes()


class BF16(Format):
    name, type_id, block_size, type_size = "BF16", 30, 1, 2
    kind, roles, define, include = "float", ("linear", "table"), "FMT_BF16", "fmt_bf16"

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


class Q8_0(Format):
    name, type_id, block_size, type_size = "Q8_0", 8, 32, 34
    kind, roles, define, include = "float", ("linear", "table"), "FMT_Q8_0", "fmt_q8_0"

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


class _Ternary(Format):
    """Formats whose values are codes {0,1,2} -> {-1,0,+1} times a scale."""

    def unpack_ternary(self, data, n):
        """-> (int8 values in {-1, 0, 1} (2 for a stray code 3), float32 scales)."""
        raise NotImplementedError

    def pack_ternary(self, t, scales) -> bytes:
        raise NotImplementedError

    def dequantize(self, data, n):
        np = _np()
        t, s = self.unpack_ternary(data, n)
        per = t.size // s.size
        return (t.reshape(s.size, per).astype(np.float32) * s.reshape(-1, 1)).reshape(-1)


class _TQ(_Ternary):
    """llama.cpp's TQ2_0 / TQ1_0: 256-value blocks of ternary codes (t + 1) and one f16 d per block.
    Subclasses define _pack_codes((n_blocks, 256) codes) -> (n_blocks, type_size - 2) bytes."""

    def pack_ternary(self, t, d):
        """t: ternary ints (any shape, n % 256 == 0); d: one scale per 256 values (stored as f16)."""
        np = _np()
        codes = _ternary_codes(t)
        self.check_length(codes.size)
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
    kind, roles, define, include = "ternary", ("linear",), "FMT_TQ2", "fmt_tq2_0"

    @staticmethod
    def _pack_codes(codes):
        """(n_blocks, 256) codes -> (n_blocks, 64) qs."""
        np = _np()
        c = codes.reshape(-1, 2, 4, 32) << np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
        return (c[:, :, 0] | c[:, :, 1] | c[:, :, 2] | c[:, :, 3]).reshape(-1, 64)

    def unpack_ternary(self, data, n):
        np = _np()
        b = self._blocks(data, n)
        d = b[:, 64:].copy().view("<f2").astype(np.float32).reshape(-1)
        qs = b[:, :64].reshape(-1, 2, 1, 32) >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
        return ((qs & 3).astype(np.int8) - 1).reshape(-1), d


class TQ1_0(_TQ):
    name, type_id, block_size, type_size = "TQ1_0", 34, 256, 54
    kind, roles, define, include = "ternary", ("linear",), "FMT_TQ1", "fmt_tq1_0"

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

    def unpack_ternary(self, data, n):
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


class I2_S(_Ternary):
    """bitnet.cpp I2_S: the block geometry is 128 values / 32 bytes, plus a 32-byte tail per tensor."""
    name, type_id, block_size, type_size = "I2_S", 36, 128, 32
    kind, roles, define, include = "ternary", ("linear",), "FMT_I2S", "fmt_i2_s"

    def nbytes(self, n_elements):
        self.check_length(n_elements)
        return n_elements // 4 + 32

    def _split(self, data, n):
        raw = _as_u8(data)
        want = self.nbytes(n)
        if raw.size != want:
            raise FormatError(f"{self.name}: {n} values need {want} bytes (n/4 + 32), got {raw.size}")
        return raw[: n // 4].reshape(-1, 32), raw[n // 4: n // 4 + 4]

    def unpack_ternary(self, data, n):
        """-> (int8 values, float32 array of the one tensor scale, shape (1,))."""
        np = _np()
        packed, scale = self._split(data, n)
        shifts = np.array([6, 4, 2, 0], dtype=np.uint8).reshape(1, 4, 1)
        t = ((packed.reshape(-1, 1, 32) >> shifts) & 3).astype(np.int8) - 1
        return t.reshape(-1), scale.copy().view("<f4").astype(np.float32)

    def pack_ternary(self, t, scale):
        """t: ternary ints (n % 128 == 0); scale: the one f32 scale of the tensor."""
        np = _np()
        codes = _ternary_codes(t)
        self.check_length(codes.size)
        c = codes.reshape(-1, 4, 32)
        packed = (c[:, 0] << 6) | (c[:, 1] << 4) | (c[:, 2] << 2) | c[:, 3]
        s = np.asarray(scale, dtype="<f4").reshape(-1)
        if s.size != 1:
            raise FormatError(f"I2_S: one scale per tensor, got {s.size}")
        return packed.tobytes() + s.tobytes() + bytes(28)

    def quantize(self, x):
        """As bitnet.cpp quantize_i2_s: scale = max|x|; |x| < 1e-6 -> 0, else sign(x)."""
        np = _np()
        x = self._flat(x)
        scale = np.float32(np.abs(x).max()) if x.size else np.float32(0)
        t = np.where(np.abs(x) < 1e-6, 0, np.where(x > 0, 1, -1)).astype(np.int8)
        return self.pack_ternary(t, scale)


class Q1_0(_Ternary):
    name, type_id, block_size, type_size = "Q1_0", 41, 128, 18
    kind, roles, define, include = "binary", ("linear",), "FMT_Q1", "fmt_q1_0"

    def unpack_ternary(self, data, n):
        """-> (int8 signs in {-1, +1}, float32 per-block scales)."""
        np = _np()
        b = self._blocks(data, n)
        d = b[:, :2].copy().view("<f2").astype(np.float32).reshape(-1)
        bits = np.unpackbits(b[:, 2:], axis=1, bitorder="little")
        return (bits.astype(np.int8) * 2 - 1).reshape(-1), d

    def pack_signs(self, s, d):
        """s: ints in {-1, +1} (n % 128 == 0); d: one scale per 128 values (stored as f16)."""
        np = _np()
        s = np.asarray(s)
        if s.dtype.kind not in "iu":
            raise FormatError(f"Q1_0 signs must be an integer array, got dtype {s.dtype}")
        flat = s.reshape(-1)
        if flat.size and not np.all((flat == 1) | (flat == -1)):
            raise FormatError("Q1_0 signs must all be -1 or +1")
        self.check_length(flat.size)
        nb = flat.size // 128
        bits = np.packbits((flat > 0).reshape(nb, 128), axis=1, bitorder="little")
        return np.concatenate([_block_f16(d, nb, self.name), bits], axis=1).tobytes()

    pack_ternary = None  # signs only: use pack_signs

    def quantize(self, x):
        """As ggml quantize_row_q1_0_ref: d = mean|x| (float32, summed in order), bit = x >= 0."""
        np = _np()
        blocks = self._flat(x).reshape(-1, 128)
        d = np.add.accumulate(np.abs(blocks), axis=1, dtype=np.float32)[:, -1] / np.float32(128)
        s = np.where(blocks >= 0, 1, -1).astype(np.int8)
        return self.pack_signs(s, d)


# Registry order is the order of every derived list (packed formats first, then floats).
TYPES: dict[int, Format] = {f.type_id: f for f in (I2_S(), TQ2_0(), TQ1_0(), Q1_0(), F32(), F16(), BF16(), Q8_0())}
_BY_NAME = {f.name: f for f in TYPES.values()}


def names(role: str | None = None, kind=None) -> tuple:
    """Names of the registered formats that may fill `role` and are of `kind` (a kind or a tuple
    of kinds), in registry order. names("linear"): the block linear types; names("table"):
    token_embd / LM head; names(kind=("ternary", "binary")): what the bitlinear kernels run."""
    if role is not None and role not in ROLES:
        raise FormatError(f"unknown role {role!r}; roles: {', '.join(ROLES)}")
    kinds = (kind,) if isinstance(kind, str) else kind
    for k in kinds or ():
        if k not in KINDS:
            raise FormatError(f"unknown kind {k!r}; kinds: {', '.join(KINDS)}")
    return tuple(f.name for f in TYPES.values()
                 if (role is None or role in f.roles) and (kinds is None or f.kind in kinds))


def by_name(name: str) -> Format:
    """'I2_S' or 'i2_s' -> the Format."""
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


def pack_ternary(fmt, t, scales) -> bytes:
    f = get(fmt)
    if not getattr(f, "pack_ternary", None):
        raise FormatError(f"{f.name} has no ternary packing" + (" (use pack_signs)" if f.name == "Q1_0" else ""))
    return f.pack_ternary(t, scales)


def pack_signs(s, d) -> bytes:
    return TYPES[41].pack_signs(s, d)


def unpack_ternary(fmt, data, n: int):
    f = get(fmt)
    if not isinstance(f, _Ternary):
        raise FormatError(f"{f.name} is not a ternary/binary format")
    return f.unpack_ternary(data, n)
