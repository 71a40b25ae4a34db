"""bitweb.formats against gguf-py's numpy quantizers (bit for bit) and hand-built layouts.

Oracles: gguf.quants for F16/BF16/Q8_0/TQ1_0/TQ2_0 (quantize and dequantize);
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

GGUFPY = ["F16", "BF16", "Q8_0", "TQ1_0", "TQ2_0"]


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
        0: "F32", 1: "F16", 30: "BF16", 8: "Q8_0", 34: "TQ1_0", 35: "TQ2_0", 36: "I2_S", 41: "Q1_0"}
    with pytest.raises(F.FormatError, match="Q4_K"):
        F.by_name("Q4_K")


def test_registry_facts():
    assert F.names() == tuple(f.name for f in F.TYPES.values())
    for f in F.TYPES.values():
        assert f.kind in F.KINDS and f.roles and set(f.roles) <= set(F.ROLES), f
        assert f.define.startswith("FMT_") and f.include.startswith("fmt_"), f
    assert len({f.define for f in F.TYPES.values()}) == len(F.TYPES)
    assert F.names("norm") == ("F32",)
    assert F.names(kind="float") == ("F32", "F16", "BF16", "Q8_0")
    assert F.names("linear", ("ternary", "binary")) == ("I2_S", "TQ2_0", "TQ1_0", "Q1_0")
    assert [f.kind for f in F.TYPES.values() if f.kind != "float"] == ["ternary", "ternary", "ternary", "binary"]
    with pytest.raises(F.FormatError, match="role"):
        F.names("lm_head")
    with pytest.raises(F.FormatError, match="kind"):
        F.names(kind="int")


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


def test_i2_s_literal_block():
    # value 0 = +1 (code 2), value 32 = -1 (code 0), value 97 = +1, all else 0 (code 1)
    t = np.zeros((1, 128), np.int8)
    t[0, 0], t[0, 32], t[0, 97] = 1, -1, 1
    expect = bytes([0b10_00_01_01, 0b01_01_01_10]) + bytes([0x55] * 30) + struct.pack("<f", 0.75) + bytes(28)
    assert F.TYPES[36].pack_ternary(t, 0.75) == expect
    y = F.TYPES[36].dequantize(expect, 128)
    assert y[0] == 0.75 and y[32] == -0.75 and y[97] == 0.75 and np.count_nonzero(y) == 3


def test_i2_s_against_hand_layout_and_round_trip():
    rng = np.random.default_rng(5)
    t = rng.integers(-1, 2, (6, 256), dtype=np.int8)
    scale = np.float32(0.0123)
    packed = F.pack_ternary("I2_S", t, scale)
    assert packed == hand_i2_s(t, scale)
    codes, scales = F.unpack_ternary("I2_S", packed, t.size)
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
    assert F.pack_signs(s, 0.5) == expect
    y = F.dequantize("Q1_0", expect, 128)
    assert y[0] == 0.5 and y[9] == 0.5 and y[127] == 0.5 and y[1] == -0.5 and (y == -0.5).sum() == 125


def test_q1_0_against_hand_layout_and_round_trip():
    rng = np.random.default_rng(6)
    s = rng.choice(np.array([-1, 1], np.int8), (4, 384))
    ds = rng.random(s.size // 128).astype(np.float16).astype(np.float32)
    packed = F.pack_signs(s, ds)
    assert packed == hand_q1_0(s, ds)
    codes, scales = F.unpack_ternary("Q1_0", packed, s.size)
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
    packed = F.pack_ternary("TQ2_0", t, ds)
    assert packed == hand_tq2_0(t, ds)
    x = (t.reshape(-1, 256).astype(np.float32) * ds.reshape(-1, 1)).reshape(t.shape)
    assert packed == gq.quantize(x, Q.TQ2_0).tobytes()
    codes, scales = F.unpack_ternary("TQ2_0", packed, t.size)
    assert np.array_equal(codes, t.reshape(-1)) and np.array_equal(scales, ds)


def test_tq1_0_pack_matches_gguf_py_and_round_trips():
    rng = np.random.default_rng(9)
    t = rng.integers(-1, 2, (3, 768), dtype=np.int8)
    t[:, ::256] = -1
    ds = (rng.random(t.size // 256) + 0.1).astype(np.float16).astype(np.float32)
    packed = F.pack_ternary("TQ1_0", t, ds)
    x = (t.reshape(-1, 256).astype(np.float32) * ds.reshape(-1, 1)).reshape(t.shape)
    assert packed == gq.quantize(x, Q.TQ1_0).tobytes()
    codes, scales = F.unpack_ternary("TQ1_0", packed, t.size)
    assert np.array_equal(codes, t.reshape(-1)) and np.array_equal(scales, ds)
    # every base-3 byte value decodes to the trits it encodes (all 3^5 patterns)
    pats = np.array(np.meshgrid(*[[-1, 0, 1]] * 5, indexing="ij")).reshape(5, -1).T   # (243, 5)
    t2 = np.zeros((243, 256), np.int8)
    t2[:, 0:160:32] = pats                               # trits k of qs[0] are values 0, 32, 64, 96, 128
    codes, _ = F.unpack_ternary("TQ1_0", F.pack_ternary("TQ1_0", t2, 1.0), t2.size)
    assert np.array_equal(codes.reshape(243, 256), t2)


def test_scalar_scale_broadcasts():
    t = np.ones((2, 256), np.int8)
    assert F.pack_ternary("TQ2_0", t, 0.5) == F.pack_ternary("TQ2_0", t, [0.5, 0.5])


@pytest.mark.parametrize("name", ["I2_S", "TQ1_0", "TQ2_0"])
def test_pack_rejects_bad_input(name):
    f = F.by_name(name)
    with pytest.raises(F.FormatError, match="-1, 0, 1"):
        f.pack_ternary(np.full((1, 256), 2, np.int8), 1.0)
    with pytest.raises(F.FormatError, match="integer"):
        f.pack_ternary(np.zeros((1, 256), np.float32), 1.0)
    with pytest.raises(F.FormatError, match="block"):
        f.pack_ternary(np.zeros((1, 100), np.int8), 1.0)
    with pytest.raises(F.FormatError, match="bytes"):
        f.dequantize(bytes(f.nbytes(256) - 1), 256)


def test_q1_0_rejects_zero_signs_and_wrong_scale_count():
    with pytest.raises(F.FormatError, match="-1 or \\+1"):
        F.pack_signs(np.zeros(128, np.int8), 1.0)
    with pytest.raises(F.FormatError, match="scales"):
        F.pack_signs(np.ones(256, np.int8), [1.0, 2.0, 3.0])
    with pytest.raises(F.FormatError, match="pack_signs"):
        F.pack_ternary("Q1_0", np.ones(128, np.int8), 1.0)


def test_module_imports_and_sizes_without_numpy():
    code = ("import sys; sys.modules['numpy'] = None\n"
            "import bitweb.formats as F, bitweb.gguf as G\n"
            "print(F.nbytes('I2_S', 256), F.TYPES[34].nbytes(512), 'numpy' in sys.modules and sys.modules['numpy'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["96", "108", "None"]
