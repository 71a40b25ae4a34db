"""GGML weight formats: one class per type, registered by type id in TYPES.

Module import is stdlib only (it runs in Pyodide): the facts (name, type_id, geometry, kind,
roles, file_type, WGSL include), nbytes, random_block and tail need nothing else. numpy is
imported lazily inside the CPython-only methods: dequantize, quantize, pack, unpack,
random_values, random_bytes, random_codes. One module per family: base (Format, IntegerFormat),
floats, ternary, legacy (Q4_0 ... Q5_1), kquants (Q2_K ... Q6_K; kquant_encode: ggml's K-quant
encoders ported to numpy).

Words: a *packed* format is one the packed kernels read as small integer codes times scales
(bitlinear gemv / gate_up, bitlinear_tiled, a packed LM head in lmhead.wgsl), in either
activation mode: the ternary kind (values -1, 0, +1: I2_S, TQ2_0, TQ1_0, Q2_0, Q2_0_G128), the
binary kind (values -1, +1: Q1_0) and the integer kind (ggml's block-quantized types, codes of
2 to 8 bits times per-block or per-sub-block scales, with an offset where the type stores a min:
Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K). A *float* format (F32, F16, BF16)
is decoded to f32 by the float kernels (dense, lmhead, embedding, requant); bitlinear.wgsl's M = 1
kernels read it too, 16 values a lane unit, in f32.

The Format object travels from the file to the kernel: TensorInfo.format -> Config.linear_type ->
GPUModel.packed and the block ops (a table's: GPUModel.table_type) -> a launch spec's `fmt` -> the
Step's define FORMAT (a kernel case stores its type id) -> bitweb.shaders, which asks it for its
include and its constants. Nothing outside this package and the WGSL includes compares a format's
name. Every list of formats is select(role, packed): model.LINEAR_TYPES, bitlinear.FORMATS,
bitlinear_tiled.FORMATS, dense.WTYPES, ops.TABLE_TYPES, lmhead.TYPES, requant.SRC_TYPES,
make-model's --format / --embd-format, the worker's advice; every per-format choice asks a fact
(tensor_scale: the prefill tile's pairs; planes == 4: its octets; lmhead.unit; file_type; a8).
A float format is read by bitlinear.wgsl's M = 1 kernels as 16-value lane units
(shaders/common_float_unit.wgsl), f32 activations only; its prefill is dense: matmul + glue.
Q8_0's codes are its bytes xor 0x80 with ZP 128. A format with a scale and an offset per sub-block
(value = q d + m, llama.cpp's vec_dot shape d S + m sum a) fits the packed interface as is: codes
with ZP 0, PDM true, and a fmt_unit that adds m sum a per sub-block.
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

  Q4_0   32 values in 18 bytes: f16 d, qs[16]: value j < 16 is the low nibble of qs[j], value
         16 + j the high nibble;                                  y = d * (q - 8)
  Q4_1   32 values in 20 bytes: f16 d, f16 m, qs[16] (as Q4_0);   y = d * q + m
  Q5_0   32 values in 22 bytes: f16 d, u32 qh, qs[16]: q = nibble (as Q4_0) | (bit j of qh) << 4
         for value j;                                             y = d * (q - 16)
  Q5_1   32 values in 24 bytes: f16 d, f16 m, u32 qh, qs[16];    y = d * q + m
  K-quants: super-blocks of 256 values in sub-blocks (units) of 16 or 32, each with its integer
  scale (and min) times the fp16 d (and dmin). 2-bit codes (Q2_K, Q3_K's low bits): value
  128h + 32l + m (h 0..1, l 0..3, m 0..31) is bits 2l+1:2l of qs[32h + m].
  Q2_K   84 bytes: scales[16] (sub-block u = value / 16: scale sc & 15, min sc >> 4), qs[64],
         f16 d, f16 dmin;                                          y = d sc q - dmin min, q 0..3
  Q3_K   110 bytes: hmask[32], qs[64] (low 2 bits), scales[12], f16 d. q = low2 - 4 when bit
         (value / 32) of hmask[value % 32] is clear, else low2 (q in -4..3). Sub-block u's 6-bit
         scale: low 4 bits scales[u] & 15 (u < 8) or scales[u - 8] >> 4, bits 5:4 from
         scales[8 + u % 4] >> 2 (u / 4);                          y = d (sc6 - 32) q
  Q4_K   144 bytes: f16 d, f16 dmin, scales[12], qs[128]: value 64c + 32k + m (c 0..3, k 0..1)
         is the low (k 0) or high (k 1) nibble of qs[32c + m]; sub-block u = 2c + k (32 values)
         has 6-bit sc, mn: u < 4 scales[u] & 63, scales[u + 4] & 63; u >= 4 (scales[u + 4] & 15) |
         (scales[u - 4] >> 6) << 4, (scales[u + 4] >> 4) | (scales[u] >> 6) << 4;
                                                                   y = d sc q - dmin mn, q 0..15
  Q5_K   176 bytes: Q4_K's d, dmin, scales[12], then qh[32], qs[128]: q = Q4_K's nibble | (bit u
         of qh[m]) << 4;                                           y = d sc q - dmin mn, q 0..31
  Q6_K   210 bytes: ql[128], qh[64], int8 scales[16], f16 d: value 128h + 32k + m (k 0..3) has
         low 4 bits in ql[64h + m + 32 (k & 1)] (low nibble k < 2, high k >= 2), high 2 bits
         (qh[32h + m] >> 2k) & 3; q = that - 32; sub-block u = value / 16;   y = d scales[u] q
  Scales are computed in float32 in ggml's order (d * sc first, then * q; + m, or - dmin * mn).

Codes 3 (I2_S, TQ2_0, Q2_0) are never written by the packers; on decode they give
+2, as ggml / bitnet.cpp arithmetic (code - 1) does.
"""
from __future__ import annotations

from bitweb.formats import floats, kquants, legacy, ternary
from bitweb.formats.base import KINDS, ROLES, Format, FormatError, IntegerFormat

__all__ = ["TYPES", "KINDS", "ROLES", "Format", "FormatError", "IntegerFormat", "select", "by_name", "get",
           "nbytes", "dequantize", "quantize"]


# Registry order is the order of every derived list (packed formats first, then floats).
TYPES: dict[int, Format] = {f.type_id: f for f in (
    ternary.I2_S(), ternary.TQ2_0(), ternary.TQ1_0(), ternary.Q1_0(), ternary.Q2_0(), ternary.Q2_0_G128(),
    legacy.Q4_0(), legacy.Q4_1(), legacy.Q5_0(), legacy.Q5_1(), legacy.Q8_0(),
    kquants.Q2_K(), kquants.Q3_K(), kquants.Q4_K(), kquants.Q5_K(), kquants.Q6_K(),
    floats.F32(), floats.F16(), floats.BF16())}
_BY_NAME = {f.name: f for f in TYPES.values()}
# the format objects by name: formats.I2_S, formats.Q8_0 ... (the classes stay reachable as type(f))
I2_S, TQ2_0, TQ1_0, Q1_0, Q2_0, Q2_0_G128 = (_BY_NAME[n] for n in ("I2_S", "TQ2_0", "TQ1_0", "Q1_0", "Q2_0", "Q2_0_G128"))
Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 = (_BY_NAME[n] for n in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"))
Q2_K, Q3_K, Q4_K, Q5_K, Q6_K = (_BY_NAME[n] for n in ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"))
F32, F16, BF16 = (_BY_NAME[n] for n in ("F32", "F16", "BF16"))


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
