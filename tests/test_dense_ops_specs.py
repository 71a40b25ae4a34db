"""Launch specs of dense.wgsl and the ops shaders (bitweb.kernels.dense / .ops): shapes, shard
plans, params layout, clear errors; and that the kernel cases cover every entry and variant."""
import re
import struct

import pytest

from bitweb import formats, shaders
from bitweb.kernels import dense, ops
from bitweb.ref import build_cases

MINE = ("dense", "rmsnorm", "rope", "attention", "embedding", "sampling")


def test_shard_rows_whole_rows_within_binding():
    rb = dense.row_bytes("F16", 2560)
    assert rb == 5120
    plan = dense.shard_rows(128256, rb, 128 << 20)
    assert plan[0] == (0, 26214) and plan[-1][1] == 128256
    assert all(a[1] == b[0] for a, b in zip(plan, plan[1:]))
    assert all((r1 - r0) * rb <= 128 << 20 for r0, r1 in plan)
    assert len({r1 - r0 for r0, r1 in plan[:-1]}) == 1
    assert dense.shard_rows(10, 8, 1 << 30) == [(0, 10)]
    assert dense.row_bytes("Q8_0", 64) == 68 and dense.row_bytes("BF16", 6) == 12


def test_shard_rows_row_over_limit_names_it():
    with pytest.raises(dense.DenseSpecError, match="5120 bytes, over maxStorageBufferBindingSize = 4096"):
        dense.shard_rows(100, 5120, 4096)


def test_gemv_one_step_per_shard_and_2d_grid():
    plan = dense.shard_rows(1000, 128, 128 * 300)
    steps = dense.gemv("F16", 64, 1000, shards=plan, norm=True)
    assert [s.constants["ROW0"] for s in steps] == [0, 300, 600, 900]
    assert [s.constants["N_ROWS"] for s in steps] == [300, 300, 300, 100]
    assert [s.bind[0] for s in steps] == ["w0", "w1", "w2", "w3"] and steps[0].bind[1:] == ("x", "y", "norm")
    big = dense.gemv("F32", 8, 300000, rows=1)[0]
    x, y, _ = big.workgroups
    assert y > 1 and x <= 65535 and x * y >= 300000
    assert dense.gemv("F32", 8, 10, subgroups=False, f16=False)[0].defines == {"FORMAT": formats.F32, "SUBGROUPS": False,
                                                                               "F16": False}


@pytest.mark.parametrize("call, msg", [
    (lambda: dense.gemv("F16", 66, 4), "n_in = 66 must be a positive multiple of 4"),
    (lambda: dense.gemv("Q8_0", 64, 4), "format 'Q8_0' not supported"),        # an integer format: bitlinear reads it
    (lambda: dense.gemv("Q4_K", 64, 4), "'Q4_K' not supported"),
    (lambda: dense.gemv("F32", 64, 4, wg=48), "wg = 48 must be a power of two"),
    (lambda: dense.gemv("F32", 64, 10, shards=[(0, 4), (5, 10)]), "do not cover rows 0..10"),
    (lambda: ops.topk(1000, 257), "k = 257"),
    (lambda: ops.attention_decode(6, 4, 64, 16), "n_head = 6 must be 1..8 times n_kv_head = 4"),
    (lambda: ops.attention_decode(4, 1, 300, 16), "head_dim = 300"),
    (lambda: ops.embedding("F16", 64, 100, shards=[(0, 30), (30, 50), (50, 100)]), "equal runs of rows"),
    (lambda: ops.rmsnorm(66, 2), "n = 66 must be a positive multiple of 4"),
])
def test_spec_errors_name_the_problem(call, msg):
    with pytest.raises(ValueError, match=re.escape(msg)):
        call()


def test_params_layout():
    b = ops.params(m=7, pos=4093, n_ids=3, penalty=1.25, inv_temp=0.5)
    assert len(b) == ops.PARAMS_BYTES == 32
    assert struct.unpack("<3I2f3I", b) == (7, 4093, 3, 1.25, 0.5, 0, 0, 0)


def test_rope_freqs_are_f64_rounded_once():
    f = struct.unpack("<64f", ops.rope_freqs(128, 500000.0))
    want = [struct.unpack("<f", struct.pack("<f", 500000.0 ** (-2 * i / 128)))[0] for i in range(64)]
    assert list(f) == want and f[0] == 1.0


def test_embedding_splits_shards_over_steps():
    plan = dense.shard_rows(1000, 128, 128 * 100)          # 10 shards
    steps = ops.embedding("F16", 64, 1000, 3, shards=plan, max_shard_bindings=6)
    assert [s.constants["ROW0"] for s in steps] == [0, 600]
    assert steps[0].bind == ("ids", "x", "w0", "w1", "w2", "w3", "w4", "w5")
    assert steps[1].bind == ("ids", "x", "w6", "w7", "w8", "w9")
    assert steps[1].defines == {"FORMAT": formats.F16, "NS1": True, "NS2": True, "NS3": True}


def test_attention_decode_split_adds_combine():
    one = ops.attention_decode(20, 5, 128, 4096)
    assert len(one) == 1 and one[0].bind[3] == "o" and one[0].workgroups == (5, 1, 1)
    two = ops.attention_decode(20, 5, 128, 4096, splits=8)
    assert [s.entry for s in two] == ["decode", "combine"] and two[0].bind[3] == "attn_part"
    assert two[0].workgroups == (5, 8, 1) and two[1].bind == ("attn_part", "o")
    assert ops.attn_part_bytes(20, 128, 8) == 4 * 20 * 8 * 130


def _entries(shader):
    return set(re.findall(r"@compute[^\n]*\n\s*fn (\w+)", shaders.source(shader)))


def test_full_cases_cover_every_entry_and_variant():
    cases = build_cases("full", ("dense", "ops")).cases
    steps = [s for c in cases for s in c["steps"]]
    for sh in MINE:
        want = _entries(sh)
        assert want, sh
        got = {s["entry"] for s in steps if s["shader"] == sh}
        assert got == want, (sh, want - got)
    gemv = [s["defines"] for s in steps if s["entry"] == "gemv"]        # (a case stores the format's type id)
    for fmt in formats.select(packed=False):
        for sg in (True, False):
            assert any(d.get("FORMAT") == fmt.type_id and d.get("SUBGROUPS") is sg for d in gemv), (fmt, sg)
    f16 = formats.F16.type_id
    assert any(d.get("FORMAT") == f16 and d.get("F16") is False for d in gemv)
    assert any(d.get("FORMAT") == f16 and "F16" not in d for d in gemv)   # native f16 where the device has it
    assert any(d.get("NORM") and d.get("LASTROW") for d in gemv)
    assert any(len([b for b in s["bind"]]) > 5 for s in steps if s["entry"] == "embed")


def test_browser_cases_cover_every_family():
    shaders_used = {s["shader"] for c in build_cases("browser", ("dense", "ops")).cases for s in c["steps"]}
    assert shaders_used == set(MINE)
