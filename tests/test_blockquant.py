"""bitweb.formats' ggml block-quantized types (Q4_0 ... Q6_K, and Q8_0) against gguf-py and ggml, bit for bit.

Oracles: gguf-py's gguf.quants (dequantize for every type here; quantize for Q4_0, Q4_1, Q5_0, Q5_1,
Q8_0: gguf-py has no K-quant encoder); ggml's own quantize_row_*_ref bytes for 45 rows of 15 input
families, saved with their inputs in tests/data/blockquant_ggml.npz by dev/formats/ggml_check.py
(libggml-base of llama-cpp-python 0.3.36, which the suite cannot build); the real
SmolLM2-135M-Instruct Q4_1 file that tools/setup.sh --test fetches.
"""

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGUFReader
from gguf import GGMLQuantizationType as Q
from gguf import quants as gq

from bitweb import formats as F
from bitweb.formats import FormatError
from tests.conftest import ROOT, need

INTEGER = [f.name for f in F.TYPES.values() if f.kind == "integer"]   # Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K .. Q6_K
NAMES = INTEGER
LEGACY = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"]


def f16_at(c):
    return c.f16_at
VECTORS = ROOT / "tests" / "data" / "blockquant_ggml.npz"
SMOLLM2 = ROOT / "build" / "assets" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def bits(a):
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def families(rng, rows):
    """float32 [rows, 256], one kind per row in turn: normal at scales 1e-6..1e4, one sign only, zeros,
    constants (whole row / per 16), sparse, an outlier, ties on a 0.5 grid, heavy tails, -0.0 mixed in."""
    kinds = [
        lambda: rng.standard_normal(256) * 10.0 ** rng.uniform(-6, 4),
        lambda: -np.abs(rng.standard_normal(256)),
        lambda: np.abs(rng.standard_normal(256)) + 3,
        lambda: np.zeros(256),
        lambda: np.full(256, rng.choice([-1, 1]) * rng.uniform(0.01, 100)),
        lambda: np.repeat(rng.standard_normal(16), 16),
        lambda: rng.standard_normal(256) * (rng.random(256) < 0.1),
        lambda: rng.standard_normal(256) + np.eye(256)[rng.integers(256)] * 100,
        lambda: rng.integers(-8, 9, 256) * 0.5,
        lambda: rng.standard_t(2, 256),
        lambda: np.where(rng.random(256) < 0.3, -0.0, rng.standard_normal(256)),
    ]
    return np.stack([kinds[i % len(kinds)]() for i in range(rows)]).astype(np.float32)


def zero_sign_free(c, raw):
    """[n, type_size] blocks with every -0.0 fp16 field made +0.0 (see test_quantize_matches_ggml)."""
    out = np.frombuffer(raw, np.uint8).reshape(-1, c.type_size).copy()
    for at in f16_at(c):
        out[(out[:, at] == 0) & (out[:, at + 1] == 0x80), at + 1] = 0
    return out


# ---- registry -------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_ids_and_sizes_match_gguf_py(name):
    c = F.by_name(name)
    assert c.type_id == int(getattr(Q, name))
    assert (c.block_size, c.type_size) == GGML_QUANT_SIZES[getattr(Q, name)]
    assert F.get(c.type_id) is c and F.get(name.lower()) is c and F.TYPES[c.type_id] is c
    assert c.nbytes(3 * c.block_size) == 3 * c.type_size
    if c.kind == "integer":
        assert c.block_size % c.scale_block == 0 and c.packed and not c.a8


def test_unknown_type_and_bad_lengths_raise():
    with pytest.raises(FormatError, match="unknown GGML type id 99"):
        F.get(99)
    with pytest.raises(FormatError, match="Q4_K: 100 values is not a whole number of 256-value blocks"):
        F.quantize("Q4_K", np.zeros(100, np.float32))
    with pytest.raises(FormatError, match="Q5_1: 64 values need 48 bytes, got 33"):
        F.dequantize("Q5_1", bytes(33), 64)
    with pytest.raises(FormatError, match="Q6_K: 512 values need 420 bytes, got 210"):
        F.dequantize("Q6_K", bytes(210), 512)


# ---- dequantize -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_dequantize_random_bytes_matches_gguf_py(name):
    """Arbitrary bytes, NaN / inf / subnormal fp16 scales included: the same float32 bits."""
    c = F.by_name(name)
    rng = np.random.default_rng(NAMES.index(name))
    raw = rng.integers(0, 256, (64, c.type_size), dtype=np.uint8)
    raw[0] = 0
    with np.errstate(all="ignore"):
        ref = gq.dequantize(raw, getattr(Q, name)).reshape(-1)
        mine = c.dequantize(raw.tobytes(), 64 * c.block_size)
    assert mine.dtype == np.float32 and np.array_equal(bits(mine), bits(ref))


@pytest.mark.parametrize("name", INTEGER)
def test_units_reproduce_dequantize(name):
    """w = s*q + o over units of scale_block consecutive values, q int8 within q_range: equal to
    gguf-py's dequantize bit for bit wherever the value is not NaN (random bytes: NaN scales give NaN
    either way, the NaN's sign may differ), and every code of q_range occurs. unpack is the same
    (q, s, o), o None for a format without offsets."""
    c = F.by_name(name)
    rng = np.random.default_rng(50 + NAMES.index(name))
    raw = rng.integers(0, 256, (256, c.type_size), dtype=np.uint8)
    q, s, o = c.units(raw.tobytes(), 256 * c.block_size)
    n_units = 256 * c.block_size // c.scale_block
    q = q.reshape(n_units, c.scale_block)
    with np.errstate(all="ignore"):
        uq, us, uo = c.unpack(raw.tobytes(), 256 * c.block_size)
    assert np.array_equal(uq, q.reshape(-1)) and np.array_equal(us, s, equal_nan=True)
    assert (uo is None) == (not c.offsets) and (uo is None or np.array_equal(uo, o, equal_nan=True))
    assert s.dtype == o.dtype == np.float32 and s.shape == o.shape == (n_units,)
    assert (q.min(), q.max()) == c.q_range
    with np.errstate(all="ignore"):
        w = (s[:, None] * q.astype(np.float32) + o[:, None]).reshape(-1)
        ref = gq.dequantize(raw, getattr(Q, name)).reshape(-1)
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(w), nan)
    assert np.array_equal(bits(w)[~nan], bits(ref)[~nan])
    # finite scales (what a quantizer writes): exact everywhere
    x = rng.standard_normal(4 * c.block_size).astype(np.float32)
    b = c.quantize(x)
    q, s, o = c.units(b, x.size)
    q = q.reshape(s.size, -1)
    assert np.array_equal(bits((s[:, None] * q.astype(np.float32) + o[:, None]).reshape(-1)),
                          bits(gq.dequantize(np.frombuffer(b, np.uint8), getattr(Q, name))))


# ---- quantize -------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", LEGACY)
def test_legacy_quantize_matches_gguf_py(name):
    c = F.by_name(name)
    x = families(np.random.default_rng(10 + LEGACY.index(name)), 44)
    mine = c.quantize(x)
    assert isinstance(mine, bytes) and mine == gq.quantize(x, getattr(Q, name)).tobytes()


def test_vectors_cover_the_families():
    v = np.load(VECTORS)
    x = v["x"]
    assert x.shape == (45, 256) and x.dtype == np.float32
    assert (x == 0).all(axis=1).any() and (x < 0).all(axis=1).any() and np.signbit(x[x == 0]).any()
    assert set(v.files) == {"x", *NAMES}


@pytest.mark.parametrize("name", NAMES)
def test_quantize_matches_ggml(name):
    """ggml's saved bytes. K-quants: equal. Legacy types follow gguf-py, which differs from ggml only
    in a zero fp16 scale's sign (-0.0 in ggml) when a block holds -0.0; equal once those are +0.0."""
    v = np.load(VECTORS)
    c = F.by_name(name)
    mine = c.quantize(v["x"])
    ref = v[name].tobytes()
    assert len(mine) == len(ref) == c.nbytes(v["x"].size)
    if name in LEGACY:
        assert np.array_equal(zero_sign_free(c, mine), zero_sign_free(c, ref))
        assert mine == gq.quantize(v["x"], getattr(Q, name)).tobytes()
    else:
        assert mine == ref


@pytest.mark.parametrize("name", INTEGER)
def test_roundtrip_is_gguf_py_dequantize_and_nearest(name):
    """dequantize(quantize(x)) is gguf-py's dequantize of the same bytes, finite, and every value's
    code is the nearest one at its unit's stored scale, or the end code with x beyond that end.
    Tolerance: |x - w| <= |s|/2 (1 + 2^-20) + 2^-21 (|x| + |o| + |s q|) (float32 rounding); legacy
    types pick codes with the unrounded scale and min, so also + |q| (2^-10 |s| + 2^-24) + 2^-10 |o|
    (fp16 rounding of the scale, subnormal ones included, and of the min)."""
    c = F.by_name(name)
    x = families(np.random.default_rng(30 + NAMES.index(name)), 88)
    b = c.quantize(x)
    w = c.dequantize(b, x.size)
    assert np.array_equal(bits(w), bits(gq.dequantize(np.frombuffer(b, np.uint8), getattr(Q, name))))
    assert np.isfinite(w).all()
    q, s, o = c.units(b, x.size)
    q = q.reshape(s.size, -1)
    xu, wu, qf = x.reshape(-1, c.scale_block), w.reshape(-1, c.scale_block), q.astype(np.float32)
    s2, o2 = s[:, None], o[:, None]
    tol = np.abs(s2) / 2 * (1 + 2.0 ** -20) + 2.0 ** -21 * (np.abs(xu) + np.abs(o2) + np.abs(s2 * qf))
    if name in LEGACY:
        tol = tol + np.abs(qf) * (2.0 ** -10 * np.abs(s2) + 2.0 ** -24) + 2.0 ** -10 * np.abs(o2)
    ends = np.stack([s2 * np.float32(c.q_range[0]) + o2, s2 * np.float32(c.q_range[1]) + o2])
    lo, hi = ends.min(axis=0), ends.max(axis=0)
    beyond = ((wu == lo) & (xu <= lo)) | ((wu == hi) & (xu >= hi))
    ok = (np.abs(xu - wu) <= tol) | beyond | (s2 == 0)
    assert ok.all(), f"{(~ok).sum()} values off their nearest code, first at {np.argwhere(~ok)[0]}"


# RMS error on N(0, 1) values (seeds 0-2 measured 0.086 0.078 0.043 0.038 0.0054 0.29 0.15 0.071 0.036
# 0.0177): bounds 10% above; the K-quants beat the legacy types of as many bits.
RMSE = {"Q4_0": 0.095, "Q4_1": 0.086, "Q5_0": 0.047, "Q5_1": 0.042, "Q8_0": 0.006,
        "Q2_K": 0.325, "Q3_K": 0.167, "Q4_K": 0.079, "Q5_K": 0.040, "Q6_K": 0.0195}


@pytest.mark.parametrize("name", NAMES)
def test_roundtrip_error_on_normal_values(name):
    x = np.random.default_rng(7).standard_normal((32, 256)).astype(np.float32)
    c = F.by_name(name)
    rmse = float(np.sqrt(np.mean((c.dequantize(c.quantize(x), x.size) - x.reshape(-1)) ** 2)))
    assert rmse <= RMSE[name]
    if name in ("Q4_K", "Q5_K"):
        legacy = F.by_name(name[:2] + "_1")
        assert rmse < float(np.sqrt(np.mean((legacy.dequantize(legacy.quantize(x), x.size) - x.reshape(-1)) ** 2)))


@pytest.mark.parametrize("name", INTEGER)
def test_edge_blocks(name):
    """All zeros -> exact zeros; constants (either sign) -> within fp16's rounding; one sign only stays
    on that side (up to a half step); large and tiny magnitudes stay finite."""
    c = F.by_name(name)
    n = c.block_size * 2 if c.block_size == 256 else 256
    zeros = np.zeros(n, np.float32)
    assert not np.any(c.dequantize(c.quantize(zeros), n))
    for v in (1.0, -1.0, 0.37, -1234.5):
        w = c.dequantize(c.quantize(np.full(n, v, np.float32)), n)
        assert np.abs(w - v).max() <= abs(v) * 2.0 ** -8, (v, w[:4])
    rng = np.random.default_rng(3)
    neg = -np.abs(rng.standard_normal(n)).astype(np.float32) - 0.5
    b = c.quantize(neg)
    q, s, o = c.units(b, n)
    assert (c.dequantize(b, n) <= (np.abs(s) / 2).repeat(c.scale_block) * 1.001).all()
    for scale in (1e4, 1e-6, 1e-20):            # 1e4: |x| up to ~4e4, under Q4_1 / Q5_1's fp16 min
        x = (rng.standard_normal(n) * scale).astype(np.float32)
        w = c.dequantize(c.quantize(x), n)
        assert np.isfinite(w).all() and np.abs(w - x).max() <= np.abs(x).max() * 0.75 + 2.0 ** -14


@pytest.mark.parametrize("name", INTEGER)
def test_bad_input_raises(name):
    c = F.by_name(name)
    x = np.zeros(c.block_size * 2, np.float32)
    x[c.block_size + 5] = np.nan
    with pytest.raises(FormatError, match=f"{name}: cannot quantize non-finite value nan at index {c.block_size + 5}"):
        c.quantize(x)
    x[c.block_size + 5] = -1e30
    with pytest.raises(FormatError, match=f"{name}: value -1e\\+30 at index {c.block_size + 5} is beyond what fp16"):
        c.quantize(x)
    x[c.block_size + 5] = 2.0 ** 29              # beyond every type's range: a scale overflows fp16
    with pytest.raises(FormatError, match=f"{name}: block 1 \\(max \\|x\\| = 5.36871e\\+08\\) needs a scale beyond"):
        c.quantize(x)


# ---- the real file --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def smollm2():
    """(gguf-py's GGUFReader, bitweb.gguf's GGUFFile) of the real file."""
    need(SMOLLM2.exists(), f"{SMOLLM2.relative_to(ROOT)} is missing: run tools/setup.sh --test")
    from bitweb import gguf
    bw = gguf.open_gguf(str(SMOLLM2))
    yield GGUFReader(str(SMOLLM2)), bw
    bw.close()


def test_real_file_tables_agree(smollm2):
    reader, bw = smollm2
    kinds = {}
    assert list(bw.tensors) == [t.name for t in reader.tensors]
    for t in reader.tensors:
        info = bw.tensors[t.name]
        assert (info.type_id, info.shape, info.abs_offset, info.nbytes, info.n_elements) == \
            (int(t.tensor_type), tuple(int(d) for d in t.shape), t.data_offset, t.n_bytes, t.n_elements)
        kinds[t.tensor_type.name] = kinds.get(t.tensor_type.name, 0) + 1
    assert kinds == {"Q4_1": 210, "Q8_0": 1, "F32": 61}


def info_format(bw, name):
    return bw.tensors[name].format


FULL = ["blk.0.attn_q.weight", "blk.0.ffn_down.weight", "blk.29.ffn_up.weight", "output_norm.weight",
        "blk.7.attn_norm.weight"]


def test_real_file_dequantizes_like_gguf_py(smollm2):
    """Every tensor: bitweb.gguf reads the bytes gguf-py reads; F32 tensors whole, Q4_1 / Q8_0 tensors
    by 34 blocks each (first, last, 32 drawn), the tensors in FULL whole and token_embd's first 1000
    rows: float32 bits equal to gguf-py's dequantize."""
    reader, bw = smollm2
    rng = np.random.default_rng(0)
    for t in reader.tensors:
        raw = bw.tensor_data(t.name)
        ref_raw = np.asarray(t.data).reshape(-1).view(np.uint8)
        assert raw == ref_raw.tobytes(), t.name
        if t.tensor_type == Q.F32:
            assert np.array_equal(bits(F.TYPES[0].dequantize(raw, t.n_elements)), bits(t.data.reshape(-1)))
            continue
        c = F.get(int(t.tensor_type))
        assert info_format(bw, t.name) is c
        blocks = np.frombuffer(raw, np.uint8).reshape(-1, c.type_size)
        if t.name in FULL:
            pick = np.arange(blocks.shape[0])
        elif t.name == "token_embd.weight":
            pick = np.arange(1000 * int(t.shape[0]) // c.block_size)
        else:
            pick = np.unique(np.r_[0, blocks.shape[0] - 1, rng.integers(0, blocks.shape[0], 32)])
        mine = c.dequantize(blocks[pick], pick.size * c.block_size)
        ref = gq.dequantize(ref_raw.reshape(-1, c.type_size)[pick], t.tensor_type).reshape(-1)
        assert np.array_equal(bits(mine), bits(ref)), t.name
    assert {n for n in FULL} <= {t.name for t in reader.tensors}


# ---- pack (the kernel cases' and the generator's encoder of given codes and scales) -----------------

@pytest.mark.parametrize("name", INTEGER)
def test_pack_is_unpack_inverse(name):
    """pack(unpack(b)) gives the values of b: the legacy types the same bytes, the K-quants the same
    (q, d, m) (a super-block's fp16 scale may come out as another factor of the same sub-block scales);
    dyadic scales (the kernel cases') round-trip exactly; and pack is gguf-py's layout: its dequantize of
    packed bytes is q d + m."""
    c = F.by_name(name)
    n = 4 * c.block_size
    x = np.random.default_rng(60 + NAMES.index(name)).standard_normal(n).astype(np.float32)
    b = c.quantize(x)
    q, d, m = c.unpack(b, n)
    again = c.pack(q, d, m)
    if c.block_size == 32:
        assert again == b
    q2, d2, m2 = c.unpack(again, n)
    assert np.array_equal(q2, q) and np.array_equal(bits(d2), bits(d)) and (m is None or np.array_equal(m2, m))
    rng = np.random.default_rng(70 + NAMES.index(name))
    q = c.random_codes(rng, n)
    d = rng.integers(1, 8, n // c.scale_block) / 64.0
    m = -rng.integers(0, 8, n // c.scale_block) / 64.0 if c.offsets else None
    packed = c.pack(q, d, m)
    q2, d2, m2 = c.unpack(packed, n)
    assert np.array_equal(q2, q) and np.array_equal(d2, d) and (m is None or np.array_equal(m2, m))
    want = (q.reshape(-1, c.scale_block) * d[:, None] + (0 if m is None else m[:, None])).reshape(-1)
    assert np.array_equal(gq.dequantize(np.frombuffer(packed, np.uint8), getattr(Q, name)).reshape(-1),
                          want.astype(np.float32))


def test_pack_refuses_what_it_cannot_store():
    with pytest.raises(FormatError, match=r"Q4_K values must be in \[0, 15\]"):
        F.Q4_K.pack(np.full(256, 16), 1.0, -1.0)
    with pytest.raises(FormatError, match="Q4_0 has no offsets"):
        F.Q4_0.pack(np.zeros(32, np.int8), 1.0, 0.5)
    with pytest.raises(FormatError, match="Q2_K: the scales of super-block 1 are not integer multiples in "
                                          r"\[0, 15\] of one fp16 value"):
        F.Q2_K.pack(np.zeros(512, np.int8), np.r_[np.ones(16), np.arange(1, 17)] / 8)
    with pytest.raises(FormatError, match="Q6_K: need 1 or 32 scales"):
        F.Q6_K.pack(np.zeros(512, np.int8), np.ones(3))
    with pytest.raises(FormatError, match="Q4_K: the mins of super-block 0"):
        F.Q4_K.pack(np.zeros(256, np.int8), 1.0, np.r_[np.ones(4), -np.ones(4)])   # mins of both signs
