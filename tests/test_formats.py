"""bitweb.formats against gguf-py's numpy quantizers (bit for bit) and hand-built layouts.

Oracles: gguf.quants for F16/BF16/TQ1_0/TQ2_0 (quantize and dequantize; Q8_0 and the other
integer formats: tests/test_blockquant.py);
for I2_S and Q1_0 (which gguf-py cannot quantize) expected bytes are built by
hand in this file from the layouts in bitweb/formats.py's docstring, bit by bit, with
plain Python loops that share no code with bitweb.formats.
"""
import struct
import subprocess
import sys

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as Q
from gguf import quants as gq

from bitweb import formats as F

GGUFPY = ["F16", "BF16", "TQ1_0", "TQ2_0"]


def bits_equal(a, b):
    """Bit-for-bit equality of two float32 arrays (NaN payloads included)."""
    assert a.dtype == np.float32 and b.dtype == np.float32
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def random_floats(rng, rows, cols):
    """Normal data at several scales, with all-zero blocks, a zero row and exact ties."""
    x = (rng.standard_normal((rows, cols)) * rng.choice([1e-3, 1.0, 300.0], (rows, 1))).astype(np.float32)
    x[0, :256] = 0.0            # an all-zero block for every block size up to 256
    x[1, :] = 0.0               # an all-zero row
    x[2, :8] = [0.5, -0.5, 1.5, -2.5, 127.5, 3e38, -3e38, 1e-40]   # ties, huge, subnormal
    return x


@pytest.mark.parametrize("name", GGUFPY)
def test_quantize_and_dequantize_match_gguf_py(name):
    rng = np.random.default_rng(GGUFPY.index(name))
    f, q = F.by_name(name), getattr(Q, name)
    x = random_floats(rng, 16, 512)
    with np.errstate(over="ignore", invalid="ignore"):     # +-3e38 overflows f16 scales to inf, as in ggml
        ref = gq.quantize(x, q)
        mine = f.quantize(x)
        assert isinstance(mine, bytes) and len(mine) == f.nbytes(x.size)
        assert mine == ref.tobytes()
        assert bits_equal(f.dequantize(mine, x.size), gq.dequantize(ref, q).reshape(-1))


@pytest.mark.parametrize("name", GGUFPY)
def test_dequantize_random_bytes_matches_gguf_py(name):
    """Arbitrary bytes, including inf/NaN scales and TQ1_0 bytes >= 243 and TQ2_0 code 3."""
    rng = np.random.default_rng(100 + GGUFPY.index(name))
    f, q = F.by_name(name), getattr(Q, name)
    n = 4 * 512
    raw = rng.integers(0, 256, f.nbytes(n), dtype=np.uint8)
    raw[: f.type_size] = 0                                  # an all-zero block
    with np.errstate(invalid="ignore"):
        ref = gq.dequantize(raw.reshape(4, -1), q).reshape(-1)
        mine = f.dequantize(raw.tobytes(), n)
    assert bits_equal(mine, ref)


def test_bf16_special_values_match_gguf_py():
    u = np.array([0x7F800000, 0xFF800000, 0x7FC00001, 0x7F800001, 0xFFFFFFFF, 0x00000001,
                  0x3F808000, 0x3F818000, 0x3F807FFF, 0x7F7FFFFF, 0x80000000, 0], dtype=np.uint32)
    x = u.view(np.float32)
    assert F.by_name("BF16").quantize(x) == gq.quantize(x, Q.BF16).tobytes()


@pytest.mark.parametrize("name", ["F32", "F16", "BF16", "Q8_0", "TQ1_0", "TQ2_0", "Q1_0"])
def test_sizes_match_gguf_py_table(name):
    f = F.by_name(name)
    assert (f.block_size, f.type_size) == GGML_QUANT_SIZES[getattr(Q, name)]
    assert f.type_id == int(getattr(Q, name))
    assert F.TYPES[f.type_id] is f and F.by_name(name.lower()) is f
    assert f.nbytes(f.block_size * 7) == 7 * f.type_size


def test_i2_s_size_and_registry():
    f = F.TYPES[36]
    assert f.name == "I2_S" and F.by_name("i2_s") is f
    assert f.nbytes(2560 * 6912) == 2560 * 6912 // 4 + 32
    assert F.nbytes("I2_S", 128) == 64
    with pytest.raises(F.FormatError, match="128"):
        f.nbytes(100)


def test_registry_is_exactly_the_supported_types():
    assert {i: f.name for i, f in F.TYPES.items()} == {
        0: "F32", 1: "F16", 30: "BF16", 8: "Q8_0", 34: "TQ1_0", 35: "TQ2_0", 36: "I2_S", 41: "Q1_0",
        42: "Q2_0", 142: "Q2_0_G128", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 10: "Q2_K", 11: "Q3_K",
        12: "Q4_K", 13: "Q5_K", 14: "Q6_K"}
    with pytest.raises(F.FormatError, match="IQ4_XS"):
        F.by_name("IQ4_XS")


def test_registry_facts():
    assert F.select() == tuple(F.TYPES.values())
    for f in F.TYPES.values():
        assert f.kind in F.KINDS and f.roles and set(f.roles) <= set(F.ROLES), f
        assert f.include.startswith("fmt_") and f.packed == (f.kind != "float"), f
        assert getattr(F, f.name) is f and F.get(f) is f and F.get(f.type_id) is f, f
        blk = f.block_size if f.packed else 16          # a float format: bitlinear.wgsl's lane unit of 16 values
        assert f.wgsl_constants()["BLK"] == blk and f.wgsl_constants()["BBYTES"] == blk // f.block_size * f.type_size
        assert (f.planes is not None) == f.packed and (f.scale_block is None) == (f.tensor_scale or not f.packed)
    assert F.select("norm") == (F.F32,)
    assert F.select(packed=False) == (F.F32, F.F16, F.BF16)
    integer = (F.Q4_0, F.Q4_1, F.Q5_0, F.Q5_1, F.Q8_0, F.Q2_K, F.Q3_K, F.Q4_K, F.Q5_K, F.Q6_K)
    assert F.select("linear", packed=True) == (F.I2_S, F.TQ2_0, F.TQ1_0, F.Q1_0, F.Q2_0, F.Q2_0_G128) + integer
    assert F.select("table", packed=True) == (F.Q1_0, F.Q2_0, F.Q2_0_G128) + integer
    assert [f.kind for f in F.select(packed=True)] == ["ternary"] * 3 + ["binary"] + ["ternary"] * 2 + ["integer"] * 10
    assert [f for f in F.TYPES.values() if f.a8] == [F.I2_S, F.TQ2_0, F.TQ1_0, F.Q1_0, F.Q2_0, F.Q2_0_G128]
    assert [f for f in F.TYPES.values() if f.tensor_scale] == [F.I2_S]
    assert [f for f in F.TYPES.values() if f.offsets] == [F.Q4_1, F.Q5_1, F.Q2_K, F.Q4_K, F.Q5_K]
    assert {f.name: (f.scale_block, f.q_range, f.planes) for f in integer} == {
        "Q4_0": (32, (-8, 7), 2), "Q4_1": (32, (0, 15), 2), "Q5_0": (32, (-16, 15), 1), "Q5_1": (32, (0, 31), 1),
        "Q8_0": (32, (-128, 127), 1), "Q2_K": (16, (0, 3), 4), "Q3_K": (16, (-4, 3), 1), "Q4_K": (32, (0, 15), 2),
        "Q5_K": (32, (0, 31), 1), "Q6_K": (16, (-32, 31), 1)}
    # general.file_type (llama_ftype): llama.cpp's values; 40 is also bitnet.cpp's MOSTLY_I2_S, 141
    # PrismML's MOSTLY_PQ2_0 (its 128-value Q2_0)
    # (a model of one K-quant everywhere is llama.cpp's "_S" mix: MOSTLY_Q3_K_S 11, Q4_K_S 14, Q5_K_S 16)
    assert {f.name: f.file_type for f in F.TYPES.values()} == {
        "I2_S": 40, "TQ2_0": 37, "TQ1_0": 36, "Q1_0": 40, "Q2_0": 41, "Q2_0_G128": 141, "F32": 0, "F16": 1,
        "BF16": 32, "Q8_0": 7, "Q4_0": 2, "Q4_1": 3, "Q5_0": 8, "Q5_1": 9, "Q2_K": 10, "Q3_K": 11, "Q4_K": 14,
        "Q5_K": 16, "Q6_K": 18}
    with pytest.raises(F.FormatError, match="role"):
        F.select("lm_head")
    with pytest.raises(F.FormatError, match="not a packed format"):
        F.F16.pack(np.ones(4, np.int8), 1.0)
    with pytest.raises(F.FormatError, match="not a packed format"):
        F.BF16.unpack(bytes(64), 32)


def test_every_list_of_formats_is_derived_from_the_registry():
    """The model's role lists, the kernels' supported types and the CLI's choices come from TYPES."""
    from bitweb import commands as cli, model
    from bitweb.authoring import makemodel
    from bitweb.kernels import bitlinear, dense, lmhead, ops, requant
    assert model.LINEAR_TYPES == F.select("linear")
    assert model.EMBD_TYPES == F.select("table") and model.NORM_TYPES == F.select("norm")
    assert bitlinear.FORMATS == F.select("linear")
    assert dense.WTYPES == F.select(packed=False)
    assert ops.TABLE_TYPES == F.select("table") and lmhead.TYPES == F.select("table")
    assert all(lmhead.supported(f, 4096) for f in F.select("table"))
    assert [lmhead.unit(f) for f in F.select(packed=False)] == [4, 8, 8]
    assert set(requant.SRC_TYPES) == {f for f in F.TYPES.values() if not f.packed and f.block_size == 1}
    assert cli.FORMATS == [f.name.lower() for f in F.select("linear")]
    assert makemodel.LINEAR_TYPE == {f.name.lower(): f for f in F.select("linear")}


def test_random_blocks_and_weights_are_valid():
    """random_block (stdlib random, bitweb.bench) gives whole valid blocks: codes in range, finite
    scales; random_values / random_bytes (the generator) store the kind's values times the scale."""
    import random
    rng = random.Random(7)
    for f in F.TYPES.values():
        raw = b"".join(f.random_block(rng) for _ in range(5))
        assert len(raw) == 5 * f.type_size, f
        n = 5 * f.block_size
        assert np.isfinite(f.dequantize(raw + f.tail(0.5), n)).all(), f
        if f.packed:
            q, d, m = f.unpack(raw + f.tail(0.5), n)
            assert q.min() >= f.q_range[0] and q.max() <= f.q_range[1] and (m is None) == (not f.offsets), f
            assert np.isfinite(d).all() and (m is None or np.isfinite(m).all()), f
    g = np.random.default_rng(3)
    for f in F.select("linear"):
        t = f.random_values(g, (4, 256))
        assert t.dtype == np.int8 and set(np.unique(t)) <= ({-1, 1} if f.kind == "binary" else {-1, 0, 1}), f
        w = f.dequantize(f.random_bytes(g, t, 0.5), t.size).reshape(t.shape)
        s = np.abs(w).max(axis=1)
        assert (s > 0.44).all() and (s < 0.57).all(), f
        if f.kind == "integer":         # quantized values * scale: within a third of the scale (Q2_K's 2 bits)
            assert np.abs(w - np.float32(0.5) * t).max() <= 0.5 / 3 + 1e-4, f
        else:
            assert np.array_equal(np.sign(w), t), f
    # the kernel cases' weights: every value of q_range (random_codes)
    for f in F.select(packed=True):
        c = f.random_codes(g, 4096)
        assert c.dtype == np.int8 and (c.min(), c.max()) == f.q_range or f.kind == "binary", f


# ------------------------------------------------------------ hand-built layouts

def hand_i2_s(t, scale):
    """128 values / 32 bytes; byte b holds value b in bits 7:6, 32+b in 5:4,
    64+b in 3:2, 96+b in 1:0; code = t + 1; then f32 scale at n/4, then 28 zero bytes."""
    t = [int(v) for v in np.asarray(t).reshape(-1)]
    out = bytearray()
    for blk in range(len(t) // 128):
        for b in range(32):
            byte = 0
            for k, shift in enumerate((6, 4, 2, 0)):
                byte |= (t[blk * 128 + k * 32 + b] + 1) << shift
            out.append(byte)
    return bytes(out) + struct.pack("<f", scale) + bytes(28)


def hand_q1_0(s, ds):
    """Per 128 values: f16 d, then 16 bytes; bit (j % 8) of byte j / 8 set -> +d."""
    s = [int(v) for v in np.asarray(s).reshape(-1)]
    out = bytearray()
    for blk, d in enumerate(ds):
        out += struct.pack("<e", d)
        for byte_i in range(16):
            byte = 0
            for bit in range(8):
                if s[blk * 128 + byte_i * 8 + bit] > 0:
                    byte |= 1 << bit
            out.append(byte)
    return bytes(out)


def hand_tq2_0(t, ds):
    """qs[64] then f16 d; value j*4 + l*32 + m (j in 0, 32) is bits 2l of qs[j + m]."""
    t = [int(v) for v in np.asarray(t).reshape(-1)]
    out = bytearray()
    for blk, d in enumerate(ds):
        qs = [0] * 64
        for j in (0, 32):
            for l in range(4):
                for m in range(32):
                    qs[j + m] |= (t[blk * 256 + j * 4 + l * 32 + m] + 1) << (2 * l)
        out += bytes(qs) + struct.pack("<e", d)
    return bytes(out)


def hand_q2_0(t, ds, block):
    """ggml block_q2_0 (block 64 upstream, 128 for PrismML's G128): f16 d, then block / 4 bytes;
    value j of a block is code t + 1 at bits 2 (j % 4) of byte j / 4."""
    t = [int(v) for v in np.asarray(t).reshape(-1)]
    out = bytearray()
    for blk, d in enumerate(ds):
        out += struct.pack("<e", d)
        for byte_i in range(block // 4):
            out.append(sum((t[blk * block + 4 * byte_i + i] + 1) << (2 * i) for i in range(4)))
    return bytes(out)


def ggml_dequantize_q2_0(data, block):
    """ggml dequantize_row_q2_0, value by value: d = fp16 -> f32, y = ((int) q - 1) * d in float."""
    out = []
    bb = 2 + block // 4
    for blk in range(len(data) // bb):
        d = np.float32(np.frombuffer(data[blk * bb:blk * bb + 2], "<f2")[0])
        for j in range(block):
            q = (data[blk * bb + 2 + j // 4] >> ((j % 4) * 2)) & 3
            out.append(np.float32(np.float32(q - 1) * d))
    return np.array(out, np.float32)


def ggml_quantize_q2_0(x, block):
    """ggml quantize_row_q2_0_ref, value by value: d = max|x| (f32), id = 1 / d (0 when d = 0),
    q = clamp(roundf(x * id) + 1, 0, 3) with roundf half away from zero; d stored as f16."""
    out = bytearray()
    for blk in range(x.size // block):
        v = x[blk * block:(blk + 1) * block]
        amax = np.float32(0)
        for a in v:
            amax = max(amax, np.float32(abs(a)))
        inv = np.float32(1) / amax if amax > 0 else np.float32(0)
        qs = [0] * (block // 4)
        for j, a in enumerate(v):
            p = float(np.float32(a * inv))
            r = int(np.floor(abs(p) + 0.5)) * (1 if p >= 0 else -1)
            qs[j // 4] |= min(3, max(0, r + 1)) << (2 * (j % 4))
        out += struct.pack("<e", amax) + bytes(qs)
    return bytes(out)


@pytest.mark.parametrize("name,block", [("Q2_0", 64), ("Q2_0_G128", 128)])
def test_q2_0_literal_block(name, block):
    # codes: value 0 -> -1 (00), value 5 -> +1 (10), value block-1 -> 0 (01), everything else 0
    t = np.zeros(block, np.int8)
    t[0], t[5] = -1, 1
    expect = struct.pack("<e", 0.25) + bytes([0b01_01_01_00, 0b01_01_10_01]) + bytes([0x55] * (block // 4 - 2))
    f = F.by_name(name)
    assert f.pack(t, 0.25) == expect and (f.block_size, f.type_size) == (block, 2 + block // 4)
    y = f.dequantize(expect, block)
    assert y[0] == -0.25 and y[5] == 0.25 and np.count_nonzero(y) == 2
    # code 3 (never written) decodes to +2 d, as ggml's (q - 1) * d
    assert f.dequantize(struct.pack("<e", 0.5) + bytes([0xFF] * (block // 4)), block).tolist() == [1.0] * block


@pytest.mark.parametrize("name,block", [("Q2_0", 64), ("Q2_0_G128", 128)])
def test_q2_0_against_ggml_reference(name, block):
    rng = np.random.default_rng(block)
    f = F.by_name(name)
    t = rng.integers(-1, 2, (3, 4 * block), dtype=np.int8)
    ds = rng.random(t.size // block).astype(np.float16).astype(np.float32)
    packed = f.pack(t, ds)
    assert packed == hand_q2_0(t, ds, block)
    codes, scales, _ = f.unpack(packed, t.size)
    assert np.array_equal(codes, t.reshape(-1)) and np.array_equal(scales, ds)
    # arbitrary bytes (code 3, inf / NaN / subnormal scales) decode bit for bit as ggml does
    raw = bytearray(rng.integers(0, 256, f.nbytes(8 * block), dtype=np.uint8).tobytes())
    raw[0:2] = struct.pack("<e", float("inf"))
    raw[f.type_size:f.type_size + 2] = b"\x01\x00"                              # a subnormal d
    with np.errstate(invalid="ignore"):
        assert bits_equal(f.dequantize(bytes(raw), 8 * block), ggml_dequantize_q2_0(bytes(raw), block))
    # quantize: ggml's reference on data with an all-zero block, exact .5 ties and +-amax
    x = rng.standard_normal(6 * block).astype(np.float32)
    x[:block] = 0.0
    x[block:block + 4] = [2.0, 1.0, -1.0, 3.0]                   # amax 3: 2/3 rounds to 1, 1/3 to 0 ...
    x[2 * block:2 * block + 3] = [4.0, 2.0, -2.0]                # x / d = +-0.5: ties away from zero
    x[2 * block + 3:3 * block] = 0.0
    assert f.quantize(x) == ggml_quantize_q2_0(x, block)
    assert f.quantize(x)[2 * f.type_size + 2] == 0b01_00_10_10     # 4, 2, -2, 0 over d = 4: codes 2, 2, 0, 1


def test_i2_s_literal_block():
    # value 0 = +1 (code 2), value 32 = -1 (code 0), value 97 = +1, all else 0 (code 1)
    t = np.zeros((1, 128), np.int8)
    t[0, 0], t[0, 32], t[0, 97] = 1, -1, 1
    expect = bytes([0b10_00_01_01, 0b01_01_01_10]) + bytes([0x55] * 30) + struct.pack("<f", 0.75) + bytes(28)
    assert F.TYPES[36].pack(t, 0.75) == expect
    y = F.TYPES[36].dequantize(expect, 128)
    assert y[0] == 0.75 and y[32] == -0.75 and y[97] == 0.75 and np.count_nonzero(y) == 3


def test_i2_s_against_hand_layout_and_round_trip():
    rng = np.random.default_rng(5)
    t = rng.integers(-1, 2, (6, 256), dtype=np.int8)
    scale = np.float32(0.0123)
    packed = F.I2_S.pack(t, scale)
    assert packed == hand_i2_s(t, scale)
    codes, scales, _ = F.I2_S.unpack(packed, t.size)
    assert codes.dtype == np.int8 and np.array_equal(codes, t.reshape(-1))
    assert scales.dtype == np.float32 and scales.tolist() == [scale]
    assert bits_equal(F.dequantize("I2_S", packed, t.size), t.reshape(-1).astype(np.float32) * scale)


def test_i2_s_quantize_follows_bitnet_cpp():
    # scale = max|x|; |x| < 1e-6 -> 0, else the sign
    x = np.array([0.5, -0.25, 0.0, 5e-7, -5e-7, 2e-6, -2e-6, -1.5] * 16, np.float32)
    t = [1, -1, 0, 0, 0, 1, -1, -1] * 16
    assert F.quantize("I2_S", x) == hand_i2_s(t, np.float32(1.5))


def test_q1_0_literal_block():
    s = -np.ones(128, np.int8)
    s[0], s[9], s[127] = 1, 1, 1
    expect = struct.pack("<e", 0.5) + bytes([0x01, 0x02]) + bytes(13) + bytes([0x80])
    assert F.Q1_0.pack(s, 0.5) == expect
    y = F.dequantize("Q1_0", expect, 128)
    assert y[0] == 0.5 and y[9] == 0.5 and y[127] == 0.5 and y[1] == -0.5 and (y == -0.5).sum() == 125


def test_q1_0_against_hand_layout_and_round_trip():
    rng = np.random.default_rng(6)
    s = rng.choice(np.array([-1, 1], np.int8), (4, 384))
    ds = rng.random(s.size // 128).astype(np.float16).astype(np.float32)
    packed = F.Q1_0.pack(s, ds)
    assert packed == hand_q1_0(s, ds)
    codes, scales, _ = F.Q1_0.unpack(packed, s.size)
    assert np.array_equal(codes, s.reshape(-1)) and np.array_equal(scales, ds)
    expect = (s.reshape(-1, 128).astype(np.float32) * ds.reshape(-1, 1)).reshape(-1)
    assert bits_equal(F.dequantize("Q1_0", packed, s.size), expect)


def test_q1_0_quantize_follows_ggml_reference():
    # ggml quantize_row_q1_0_ref: d = (float32 running sum of |x|) / 128, bit set when x >= 0
    rng = np.random.default_rng(7)
    x = rng.standard_normal(512).astype(np.float32)
    x[:128] = 0.0                                          # zero -> bit set, d = 0
    ds, signs = [], []
    for blk in range(4):
        acc = np.float32(0)
        for v in x[blk * 128:(blk + 1) * 128]:
            acc = np.float32(acc + np.float32(abs(v)))
        ds.append(float(np.float32(acc / np.float32(128))))
        signs += [1 if v >= 0 else -1 for v in x[blk * 128:(blk + 1) * 128]]
    assert F.quantize("Q1_0", x) == hand_q1_0(signs, ds)


def test_tq2_0_against_hand_layout_and_gguf_py():
    rng = np.random.default_rng(8)
    t = rng.integers(-1, 2, (3, 512), dtype=np.int8)
    t[:, ::256] = 1                                        # every block has a +1, so max|t*d| = d
    ds = (rng.random(t.size // 256) + 0.1).astype(np.float16).astype(np.float32)
    packed = F.TQ2_0.pack(t, ds)
    assert packed == hand_tq2_0(t, ds)
    x = (t.reshape(-1, 256).astype(np.float32) * ds.reshape(-1, 1)).reshape(t.shape)
    assert packed == gq.quantize(x, Q.TQ2_0).tobytes()
    codes, scales, _ = F.TQ2_0.unpack(packed, t.size)
    assert np.array_equal(codes, t.reshape(-1)) and np.array_equal(scales, ds)


def test_tq1_0_pack_matches_gguf_py_and_round_trips():
    rng = np.random.default_rng(9)
    t = rng.integers(-1, 2, (3, 768), dtype=np.int8)
    t[:, ::256] = -1
    ds = (rng.random(t.size // 256) + 0.1).astype(np.float16).astype(np.float32)
    packed = F.TQ1_0.pack(t, ds)
    x = (t.reshape(-1, 256).astype(np.float32) * ds.reshape(-1, 1)).reshape(t.shape)
    assert packed == gq.quantize(x, Q.TQ1_0).tobytes()
    codes, scales, _ = F.TQ1_0.unpack(packed, t.size)
    assert np.array_equal(codes, t.reshape(-1)) and np.array_equal(scales, ds)
    # every base-3 byte value decodes to the trits it encodes (all 3^5 patterns)
    pats = np.array(np.meshgrid(*[[-1, 0, 1]] * 5, indexing="ij")).reshape(5, -1).T   # (243, 5)
    t2 = np.zeros((243, 256), np.int8)
    t2[:, 0:160:32] = pats                               # trits k of qs[0] are values 0, 32, 64, 96, 128
    codes, _, _ = F.TQ1_0.unpack(F.TQ1_0.pack(t2, 1.0), t2.size)
    assert np.array_equal(codes.reshape(243, 256), t2)


def test_scalar_scale_broadcasts():
    t = np.ones((2, 256), np.int8)
    assert F.TQ2_0.pack(t, 0.5) == F.TQ2_0.pack(t, [0.5, 0.5])


@pytest.mark.parametrize("name", ["I2_S", "TQ1_0", "TQ2_0", "Q2_0", "Q2_0_G128"])
def test_pack_rejects_bad_input(name):
    f = F.by_name(name)
    with pytest.raises(F.FormatError, match="-1, 0, 1"):
        f.pack(np.full((1, 256), 2, np.int8), 1.0)
    with pytest.raises(F.FormatError, match="integer"):
        f.pack(np.zeros((1, 256), np.float32), 1.0)
    with pytest.raises(F.FormatError, match="block"):
        f.pack(np.zeros((1, 100), np.int8), 1.0)
    with pytest.raises(F.FormatError, match="bytes"):
        f.dequantize(bytes(f.nbytes(256) - 1), 256)


def test_q1_0_rejects_zero_signs_and_wrong_scale_count():
    with pytest.raises(F.FormatError, match="-1 or \\+1"):
        F.Q1_0.pack(np.zeros(128, np.int8), 1.0)
    with pytest.raises(F.FormatError, match="scales"):
        F.Q1_0.pack(np.ones(256, np.int8), [1.0, 2.0, 3.0])
    with pytest.raises(F.FormatError, match="offsets"):
        F.Q1_0.pack(np.ones(128, np.int8), 1.0, 0.5)


def test_module_imports_and_sizes_without_numpy():
    code = ("import sys; sys.modules['numpy'] = None\n"
            "import bitweb.formats as F, bitweb.gguf as G\n"
            "print(F.nbytes('I2_S', 256), F.TYPES[34].nbytes(512), 'numpy' in sys.modules and sys.modules['numpy'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["96", "108", "None"]
