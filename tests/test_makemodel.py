"""`bitweb make-model`: the published 2B4T layout, every format, determinism, plausible scales.

The expected layout below is written out from the published file's llama.cpp loader dump
(microsoft/bitnet-b1.58-2B-4T-gguf ggml-model-i2_s.gguf: 24 key/values, 332 tensors =
121 F32 + 1 F16 + 210 I2_S), not taken from bitweb.authoring.makemodel.
"""
from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import gguf as ggufpy
import numpy as np
import pytest

from bitweb import commands as cli, formats
from bitweb.authoring import makemodel, vocab
from bitweb.authoring.gguf_writer import ARRAY, BOOL, FLOAT32, INT32, STRING, UINT32
from bitweb.gguf import open_gguf
from bitweb.model import Model

A = "bitnet-b1.58"
PUBLISHED_KEYS = [  # (key, value type, array element type), in the file's order
    ("general.architecture", STRING, None), ("general.name", STRING, None),
    (f"{A}.vocab_size", UINT32, None), (f"{A}.context_length", UINT32, None),
    (f"{A}.embedding_length", UINT32, None), (f"{A}.block_count", UINT32, None),
    (f"{A}.feed_forward_length", UINT32, None), (f"{A}.rope.dimension_count", UINT32, None),
    (f"{A}.attention.head_count", UINT32, None), (f"{A}.attention.head_count_kv", UINT32, None),
    ("tokenizer.ggml.add_bos_token", BOOL, None), (f"{A}.attention.layer_norm_rms_epsilon", FLOAT32, None),
    (f"{A}.rope.freq_base", FLOAT32, None), ("general.file_type", UINT32, None),
    ("tokenizer.ggml.model", STRING, None), ("tokenizer.ggml.tokens", ARRAY, STRING),
    ("tokenizer.ggml.scores", ARRAY, FLOAT32), ("tokenizer.ggml.token_type", ARRAY, INT32),
    ("tokenizer.ggml.merges", ARRAY, STRING), ("tokenizer.ggml.bos_token_id", UINT32, None),
    ("tokenizer.ggml.eos_token_id", UINT32, None), ("tokenizer.ggml.padding_token_id", UINT32, None),
    ("tokenizer.chat_template", STRING, None), ("general.quantization_version", UINT32, None),
]
PUBLISHED_VALUES = {
    f"{A}.context_length": 4096, f"{A}.embedding_length": 2560, f"{A}.feed_forward_length": 6912,
    f"{A}.rope.dimension_count": 128, f"{A}.attention.head_count": 20, f"{A}.attention.head_count_kv": 5,
    "tokenizer.ggml.add_bos_token": True, f"{A}.attention.layer_norm_rms_epsilon": float(np.float32(1e-5)),
    f"{A}.rope.freq_base": 500000.0, "general.file_type": 40, "tokenizer.ggml.model": "gpt2",
    "general.quantization_version": 2,
}
LLAMA3_VALUES = {f"{A}.vocab_size": 128256, "tokenizer.ggml.bos_token_id": 128000,
                 "tokenizer.ggml.eos_token_id": 128001, "tokenizer.ggml.padding_token_id": 128001}
# per block: name -> (type, GGUF shape, nbytes); I2_S nbytes = n/4 + 32
PUBLISHED_BLOCK = {
    "attn_norm": ("F32", (2560,), 10240),
    "attn_q": ("I2_S", (2560, 2560), 1638432),
    "attn_k": ("I2_S", (2560, 640), 409632),
    "attn_v": ("I2_S", (2560, 640), 409632),
    "attn_sub_norm": ("F32", (2560,), 10240),
    "attn_output": ("I2_S", (2560, 2560), 1638432),
    "ffn_norm": ("F32", (2560,), 10240),
    "ffn_gate": ("I2_S", (2560, 6912), 4423712),
    "ffn_up": ("I2_S", (2560, 6912), 4423712),
    "ffn_sub_norm": ("F32", (6912,), 27648),
    "ffn_down": ("I2_S", (6912, 2560), 4423712),
}
PUBLISHED_TEMPLATE_START = "{% for message in messages %}{% if lo"   # what the loader dump shows
LINEARS = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]


def make(tmp_path, name="m.gguf", **kw):
    """Run the real CLI path; returns the file path."""
    out = tmp_path / name
    argv = ["make-model", "--out", str(out)]
    for k, v in kw.items():
        argv += [f"--{k.replace('_', '-')}", str(v)]
    assert cli.main(argv) == 0
    return out


def dequant(g, name):
    t = g.tensors[name]
    return formats.TYPES[t.type_id].dequantize(g.tensor_data(name), t.n_elements).reshape(t.np_shape)


def test_2b4t_one_block_has_the_published_layout(tmp_path):
    p = make(tmp_path, preset="2b4t", layers=1)
    g = open_gguf(p)
    assert g.version == 3 and g.alignment == 32
    assert [(k, *g.metadata_types[k]) for k in g.metadata] == [(k, t, s) for k, t, s in PUBLISHED_KEYS]
    for k, v in PUBLISHED_VALUES.items():
        assert g.metadata[k] == v, k
    assert g.metadata[f"{A}.block_count"] == 1
    n_vocab = len(g.metadata["tokenizer.ggml.tokens"])
    assert g.metadata[f"{A}.vocab_size"] == n_vocab
    assert g.metadata["tokenizer.chat_template"].startswith(PUBLISHED_TEMPLATE_START)
    assert "BITNETAssistant: " in g.metadata["tokenizer.chat_template"]

    table = {n: (t.format.name, t.shape, t.nbytes) for n, t in g.tensors.items()}
    want = {"token_embd.weight": ("F16", (2560, n_vocab), 2560 * n_vocab * 2),
            "output_norm.weight": ("F32", (2560,), 10240)}
    want.update({f"blk.0.{k}.weight": v for k, v in PUBLISHED_BLOCK.items()})
    assert table == want
    assert "output.weight" not in g.tensors          # tied LM head

    for lin in LINEARS:                                # I2_S tail: f32 scale, then 28 zero bytes
        t = g.tensors[f"blk.0.{lin}.weight"]
        raw = g.tensor_data(t.name)
        n4 = t.n_elements // 4
        scale = np.frombuffer(raw[n4:n4 + 4], dtype="<f4")[0]
        assert raw[n4 + 4:] == bytes(28)
        assert 0 < scale < 1 and np.isfinite(scale)
        codes = np.unpackbits(np.frombuffer(raw[:n4], dtype=np.uint8)).reshape(-1, 2)
        assert not np.any(codes.all(axis=1))          # code 3 never written
        assert set(np.unique(dequant(g, t.name))) == {-scale, 0, scale}


def test_2b4t_plan_with_the_llama3_vocab_is_the_published_table():
    """Full 30 blocks and the real vocabulary, through the functions write_model uses
    (the 1.2 GB file itself is checked by hand, see the report)."""
    args = SimpleNamespace(arch=A, format="i2_s", preset="2b4t", layers=None, seed=0, scale_tensors="auto")
    spec = makemodel.spec_from_args(args)
    meta = makemodel.build_metadata(spec, makemodel.complete_vocab(vocab.llama3_vocab()))
    assert [(k, v.vtype, v.subtype) for k, v in meta] == [(k, t, s) for k, t, s in PUBLISHED_KEYS]
    values = {k: v.value for k, v in meta}
    for k, v in {**PUBLISHED_VALUES, **LLAMA3_VALUES, f"{A}.block_count": 30}.items():
        assert values[k] == pytest.approx(v, rel=1e-7) if isinstance(v, float) else values[k] == v, k
    assert len(values["tokenizer.ggml.tokens"]) == 128256
    assert len(values["tokenizer.ggml.merges"]) == 280147
    assert len(values["tokenizer.ggml.scores"]) == len(values["tokenizer.ggml.token_type"]) == 128256

    plan = makemodel.plan_tensors(spec, values[f"{A}.vocab_size"])
    assert len(plan) == 332
    counts = {}
    for tp in plan:
        counts[tp.format.name] = counts.get(tp.format.name, 0) + 1
    assert counts == {"F32": 121, "F16": 1, "I2_S": 210}
    table = {tp.name: (tp.format.name, tp.shape, tp.nbytes) for tp in plan}
    want = {"token_embd.weight": ("F16", (2560, 128256), 656670720),
            "output_norm.weight": ("F32", (2560,), 10240)}
    for i in range(30):
        want.update({f"blk.{i}.{k}.weight": v for k, v in PUBLISHED_BLOCK.items()})
    assert table == want
    assert 1.1e9 < sum(tp.nbytes for tp in plan) < 1.25e9


def test_llama3_vocab_is_written_as_converted(tmp_path):
    p = make(tmp_path, vocab="llama3")
    g = open_gguf(p)
    v = vocab.llama3_vocab()
    md = g.metadata
    assert [k for k in md] == [k for k, _, _ in PUBLISHED_KEYS]
    assert md["tokenizer.ggml.tokens"] == v["tokenizer.ggml.tokens"]
    assert md["tokenizer.ggml.merges"] == v["tokenizer.ggml.merges"]
    assert md["tokenizer.ggml.token_type"] == v["tokenizer.ggml.token_type"]
    # scores as bitnet.cpp's converter: 0.0, and -1000.0 for CONTROL (added special) tokens
    assert md["tokenizer.ggml.scores"] == [-1000.0 if t == 3 else 0.0 for t in v["tokenizer.ggml.token_type"]]
    for k, val in LLAMA3_VALUES.items():
        assert md[k] == val, k
    assert md["tokenizer.ggml.tokens"][128009] == "<|eot_id|>"
    assert g.tensors["token_embd.weight"].shape == (256, 128256)


@pytest.mark.parametrize("arch", [A, "bitnet"])
@pytest.mark.parametrize("fmt", ["tq2_0", "tq1_0", "q1_0", "f16", "bf16", "f32", "q8_0"])
def test_every_non_i2s_format_reads_back_with_gguf_py(tmp_path, arch, fmt):
    p = make(tmp_path, arch=arch, format=fmt, seed=3)
    g = open_gguf(p)
    r = ggufpy.GGUFReader(p)
    fields = {k: f for k, f in r.fields.items() if not k.startswith("GGUF.")}
    assert list(fields) == list(g.metadata)
    for k, f in fields.items():
        vt, sub = g.metadata_types[k]
        assert f.types[0] == vt and (sub is None or f.types[1] == sub), k
        assert f.contents() == g.metadata[k], k
    assert [t.name for t in r.tensors] == list(g.tensors)
    for t in r.tensors:
        mine = g.tensors[t.name]
        assert t.tensor_type.name == mine.format.name and t.shape.tolist() == list(mine.shape), t.name
        assert t.n_bytes == mine.nbytes and t.data_offset == mine.abs_offset, t.name
        assert t.data.tobytes() == g.tensor_data(t.name), t.name
    lin = makemodel.LINEAR_TYPE[fmt].name
    assert g.tensors["blk.1.ffn_down.weight"].format.name == lin
    assert g.metadata["general.file_type"] == {"tq2_0": 37, "tq1_0": 36, "q1_0": 40, "f16": 1,
                                               "bf16": 32, "f32": 0, "q8_0": 7}[fmt]


@pytest.mark.parametrize("fmt", ["i2_s", "tq2_0", "tq1_0", "q1_0", "q2_0", "q2_0_g128", "f16", "bf16", "f32"])
def test_weights_are_ternary_and_scaled_to_keep_activations_order_one(tmp_path, fmt):
    p = make(tmp_path, format=fmt, seed=5)
    g = open_gguf(p)
    n_embd = g.get("embedding_length")
    rng = np.random.default_rng(0)
    for i in range(g.get("block_count")):
        for lin in LINEARS:
            name = f"blk.{i}.{lin}.weight"
            t = g.tensors[name]
            w = dequant(g, name)
            block = formats.TYPES[t.type_id].block_size if fmt in ("tq2_0", "tq1_0", "q1_0", "q2_0", "q2_0_g128") else w.size
            blocks = w.reshape(-1, block)
            d = np.abs(blocks).max(axis=1, keepdims=True)
            unit = blocks / d                          # one scale per block (per tensor for I2_S / floats)
            allowed = {-1.0, 1.0} if fmt == "q1_0" else {-1.0, 0.0, 1.0}
            assert set(np.unique(unit)) == allowed, name
            nz = np.mean(unit != 0)
            assert (nz == 1.0) if fmt == "q1_0" else (0.6 < nz < 0.73), name
            x = rng.standard_normal((t.shape[0], 16))  # rms-1 inputs
            y_rms = np.sqrt(np.mean((w @ x) ** 2))
            assert 0.5 < y_rms < 4.5, (name, y_rms)
    for name, t in g.tensors.items():
        if t.format is formats.F32 and name.endswith("norm.weight"):
            x = dequant(g, name)
            assert abs(x.mean() - 1) < 0.02 and 0.02 < x.std() < 0.08, name
    e = dequant(g, "token_embd.weight")
    assert e.shape == (len(g.metadata["tokenizer.ggml.tokens"]), n_embd)
    assert abs(e.std() * math.sqrt(n_embd) - 3) < 0.15      # tied logits of an rms-1 state: std ~ 3


@pytest.mark.parametrize("fmt,ftype", [("q2_0", 41), ("q2_0_g128", 141)])
def test_q2_0_files(tmp_path, fmt, ftype):
    """Q2_0 (type 42) and PrismML's Q2_0_G128 (type 142) linears; gguf-py reads the file's
    metadata (it knows neither type, so its tensor table is checked by bitweb.gguf only)."""
    p = make(tmp_path, format=fmt, seed=4)
    g = open_gguf(p)
    want = makemodel.LINEAR_TYPE[fmt].name
    ti = g.tensors["blk.0.ffn_down.weight"]
    assert ti.format.name == want and ti.type_id == formats.by_name(want).type_id and ti.stored_type_id is None
    assert g.metadata["general.file_type"] == ftype
    assert ti.nbytes == formats.nbytes(want, ti.n_elements)


@pytest.mark.parametrize("embd", ["f32", "q8_0", "q1_0", "q2_0"])
def test_embd_format(tmp_path, embd):
    """--embd-format: token_embd stored as that type, the values the F16 file's rows quantized
    as ggml does (same generator rows); gguf-py reads it back where it knows the type."""
    ref = open_gguf(make(tmp_path, "f16.gguf", seed=2, format="tq2_0"))        # linears gguf-py reads
    g = open_gguf(make(tmp_path, embd + ".gguf", seed=2, format="tq2_0", embd_format=embd))
    ti = g.tensors["token_embd.weight"]
    f = makemodel.EMBD_TYPE[embd]
    assert ti.format.name == f.name and ti.shape == ref.tensors["token_embd.weight"].shape
    n_embd, n_vocab = ti.shape
    spec = makemodel.spec_from_args(cli.build_parser().parse_args(
        ["make-model", "--out", "x", "--seed", "2", "--format", "tq2_0", "--embd-format", embd]))
    plan = makemodel.TensorPlan("token_embd.weight", ti.shape, formats.F32, "embd")  # the generator's f32 rows
    rows32 = np.frombuffer(b"".join(bytes(c) for c in makemodel.tensor_chunks(spec, plan)), "<f4")
    assert ref.tensor_data("token_embd.weight") == rows32.astype("<f2").tobytes()     # the F16 file: the same rows
    rows = f.quantize(rows32)
    assert g.tensor_data("token_embd.weight") == rows
    x = dequant(g, "token_embd.weight")
    assert x.shape == (n_vocab, n_embd) and np.isfinite(x).all()
    if embd != "q2_0":                                         # gguf-py knows the other types
        r = ggufpy.GGUFReader(str(tmp_path / (embd + ".gguf")))
        t = next(t for t in r.tensors if t.name == "token_embd.weight")
        assert t.tensor_type.name == f.name and t.data.tobytes() == rows
    for name, t in ref.tensors.items():                        # everything else is the same file
        if name != "token_embd.weight":
            assert g.tensor_data(name) == ref.tensor_data(name), name


def test_seed_determinism_and_layer_prefix(tmp_path):
    a = make(tmp_path, "a.gguf", seed=7)
    b = make(tmp_path, "b.gguf", seed=7)
    c = make(tmp_path, "c.gguf", seed=8)
    one = make(tmp_path, "one.gguf", seed=7, layers=1)
    assert a.read_bytes() == b.read_bytes()
    ga, gc, g1 = open_gguf(a), open_gguf(c), open_gguf(one)
    for name in ga.tensors:
        assert ga.tensor_data(name) != gc.tensor_data(name), name
    assert len(g1.tensors) == 13 and g1.metadata[f"{A}.block_count"] == 1
    for name in g1.tensors:                            # a tensor does not depend on --layers
        assert g1.tensor_data(name) == ga.tensor_data(name), name


def test_bitnet_arch_keys_and_scale_tensors(tmp_path):
    p = make(tmp_path, arch="bitnet", format="tq2_0", seed=1)
    g = open_gguf(p)
    assert list(g.metadata) == [
        "general.architecture", "general.name", "bitnet.vocab_size", "bitnet.context_length",
        "bitnet.embedding_length", "bitnet.block_count", "bitnet.feed_forward_length",
        "bitnet.rope.dimension_count", "bitnet.attention.head_count", "bitnet.attention.head_count_kv",
        "bitnet.rope.freq_base", "bitnet.attention.layer_norm_rms_epsilon", "bitnet.rope.scaling.type",
        "bitnet.rope.scaling.factor", "general.file_type", "general.quantization_version",
        "tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.scores",
        "tokenizer.ggml.token_type", "tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id", "tokenizer.ggml.add_bos_token",
        "tokenizer.chat_template"]
    assert g.arch == "bitnet" and g.get("rope.scaling.type") == "linear" and g.get("rope.scaling.factor") == 1.0
    assert g.metadata["tokenizer.ggml.pre"] == "llama-bpe"
    assert g.metadata["tokenizer.chat_template"] == vocab.bytes_vocab()["tokenizer.chat_template"]
    plain = open_gguf(make(tmp_path, "plain.gguf", arch="bitnet", format="tq2_0", seed=1, scale_tensors="off"))
    assert not any(n.endswith(".scale") for n in plain.tensors)
    assert len(g.tensors) == len(plain.tensors) + 7 * g.get("block_count")
    for i in range(g.get("block_count")):
        for lin in LINEARS:
            s = g.tensors[f"blk.{i}.{lin}.scale"]
            assert (s.format.name, s.shape) == ("F32", (1,))
            f = dequant(g, s.name)[0]
            assert 0.5 <= f <= 2.0
            # the weight holds W / f: the product is the plain model's W (same seed), to f16 rounding
            w_eff = dequant(g, f"blk.{i}.{lin}.weight") * f
            np.testing.assert_allclose(w_eff, dequant(plain, f"blk.{i}.{lin}.weight"), rtol=2e-3, atol=0)
    # i2_s / f16 files of arch bitnet have no .scale tensors under auto
    assert not any(n.endswith(".scale") for n in open_gguf(make(tmp_path, "i2.gguf", arch="bitnet")).tensors)


@pytest.mark.parametrize("arch", makemodel.ARCHS)
def test_every_arch_reads_back_as_the_config_it_was_written_from(tmp_path, arch):
    """make-model writes an architecture from its row of bitweb.model.ARCHS: the reader binds every
    tensor (Config.tensor_shapes) and gets back the Config the file was written from."""
    args = SimpleNamespace(preset="tiny", layers=1, seed=0, arch=arch, format=None, embd_format=None,
                           output_format=None, vocab=None, scale_tensors="auto")
    spec = makemodel.spec_from_args(args)
    p = make(tmp_path, arch=arch, layers=1)
    m = Model.from_gguf(open_gguf(p))
    want = spec.config(m.cfg.n_vocab)
    assert m.cfg == dataclasses.replace(want, eps=float(np.float32(want.eps)))     # eps is stored as FLOAT32
    assert {n for n in want.tensor_shapes() if getattr(m.blk[0], n) is not None} == set(want.tensor_shapes())


def test_small_preset(tmp_path):
    g = open_gguf(make(tmp_path, preset="small"))
    assert (g.get("embedding_length"), g.get("block_count"), g.get("feed_forward_length")) == (1024, 4, 2816)
    assert g.get("attention.head_count") // g.get("attention.head_count_kv") == 4
    assert 5e6 < g.file_size < 5e7


@pytest.mark.parametrize("argv,msg", [
    (["--layers", "0"], "--layers must be >= 1"),
    (["--seed", "-1"], "--seed must be >= 0"),
    (["--scale-tensors", "on"], "only in --arch bitnet"),
])
def test_bad_options_are_clear_errors(tmp_path, capsys, argv, msg):
    out = tmp_path / "x.gguf"
    assert cli.main(["make-model", "--out", str(out), *argv]) == 1
    assert msg in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "x.gguf.partial").exists()
