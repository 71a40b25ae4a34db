"""make-model's Bonsai presets: the published Qwen3-1.7B / 4B / 8B shapes, Q1_0 linears and tables
and the qwen vocabulary by default, and tensor bytes that add up to the published files' sizes (the
plan and the metadata only: no 250 MB written here)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from bitweb.authoring.makemodel import (PRESET_DEFAULTS, build_metadata, complete_vocab, load_vocab, pad_vocab,
                                        plan_tensors, spec_from_args, vocab_name)
from bitweb import formats
from bitweb.chat import ChatFormat

# preset: (n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_ctx, tied, published file bytes)
BONSAI = {"bonsai-1.7b": (28, 2048, 16, 8, 128, 6144, 32768, True, 248e6),
          "bonsai-4b": (36, 2560, 32, 8, 128, 9728, 32768, True, 572e6),
          "bonsai-8b": (36, 4096, 32, 8, 128, 12288, 65536, False, 1.16e9)}
V = 151936


def spec(preset, **kw):
    return spec_from_args(args(preset, **kw))


def args(preset, **kw):
    """make-model's namespace with every option left to the preset (None), as argparse gives it."""
    return SimpleNamespace(**dict(dict(preset=preset, arch=None, format=None, embd_format=None, output_format=None,
                                       vocab=None, layers=None, seed=0, scale_tensors="auto"), **kw))


@pytest.mark.parametrize("preset", list(BONSAI))
def test_bonsai_preset_shapes_and_defaults(preset):
    L, e, nh, nkv, hd, ff, ctx, tied, size = BONSAI[preset]
    d = PRESET_DEFAULTS[preset]
    assert (d["arch"], d["format"], d["embd_format"], d["vocab"]) == ("qwen3", "q1_0", "q1_0", "qwen")
    assert d.get("output_format") == (None if tied else "q1_0")
    s = spec(preset)
    assert (s.arch, s.fmt, s.linear_type, s.tied, s.n_ctx) == ("qwen3", "q1_0", formats.Q1_0, tied, ctx)
    assert (s.embd_fmt, s.output_fmt) == ("q1_0", "q1_0")
    plan = {t.name: t for t in plan_tensors(s, V)}
    q, kv = nh * hd, nkv * hd
    want = {"attn_norm": (e,), "attn_q": (e, q), "attn_k": (e, kv), "attn_v": (e, kv), "attn_q_norm": (hd,),
            "attn_k_norm": (hd,), "attn_output": (q, e), "ffn_norm": (e,), "ffn_gate": (e, ff), "ffn_up": (e, ff),
            "ffn_down": (ff, e)}
    for i in (0, L - 1):
        for n, shape in want.items():
            t = plan[f"blk.{i}.{n}.weight"]
            assert t.shape == shape and t.format is (formats.F32 if len(shape) == 1 else formats.Q1_0), (n, t)
    assert f"blk.{L}.attn_q.weight" not in plan
    assert not any("sub_norm" in n or n.endswith(".scale") for n in plan)          # qwen3: no sub-norms
    tables = [plan["token_embd.weight"]] + ([] if tied else [plan["output.weight"]])
    assert all(t.shape == (e, V) and t.format is formats.Q1_0 for t in tables), tables
    assert ("output.weight" in plan) == (not tied)
    assert len(plan) == 2 + 11 * L + (not tied)
    # tensor bytes: the published file less its header (the Qwen tokenizer's 151k tokens and
    # merges: 5.6 MB on 1.7B / 4B, 7 MB on 8B as planned here)
    nbytes = sum(t.nbytes for t in plan.values())
    assert size - 8e6 < nbytes < size, nbytes


@pytest.mark.parametrize("kw,want", [(dict(embd_format="f16"), ("F16", None)),
                                     (dict(preset="bonsai-8b", output_format="q2_0"), ("Q1_0", "Q2_0")),
                                     (dict(arch="llama", format="tq2_0"), ("Q1_0", None))])
def test_bonsai_options_override_the_preset(kw, want):
    """An option given beats the preset's default; the others keep it."""
    s = spec(kw.pop("preset", "bonsai-1.7b"), **kw)
    plan = {t.name: t for t in plan_tensors(s, V)}
    assert (plan["token_embd.weight"].format.name,
            plan["output.weight"].format.name if "output.weight" in plan else None) == want
    assert s.arch == kw.get("arch", "qwen3") and s.fmt == kw.get("format", "q1_0")


def test_bonsai_default_vocab_is_qwen_padded_to_the_rows():
    """--vocab defaults to qwen for the bonsai presets: pre-tokenizer qwen2, ChatML, the Qwen3 template
    with its thinking switch, padded with UNUSED [PADi] tokens to the 151936 rows of the head."""
    a = args("bonsai-1.7b")
    assert vocab_name(a) == "qwen" and vocab_name(args("tiny")) == "bytes"
    md = dict((k, v.value) for k, v in build_metadata(spec_from_args(a),
                                                       complete_vocab(pad_vocab(load_vocab(vocab_name(a)), V))))
    assert md["general.architecture"] == "qwen3" and md["qwen3.vocab_size"] == V
    assert md["tokenizer.ggml.pre"] == "qwen2" and len(md["tokenizer.ggml.tokens"]) == V
    assert md["tokenizer.ggml.tokens"][-1] == f"[PAD{V - 1}]" and md["tokenizer.ggml.token_type"][-1] == 5
    fmt = ChatFormat.from_metadata(md)
    assert fmt.kind == "template" and fmt.has_thinking
    tok = fmt.tokenizer
    ids = tok.encode("Hello, Bonsai")
    assert ids and max(ids) < 1100 and tok.decode(ids) == "Hello, Bonsai"     # real tokens, not the padding
    prompt = fmt.ids([{"role": "user", "content": "Hi"}], enable_thinking=False)
    assert tok.token_to_id["<|im_start|>"] in prompt and tok.decode(prompt).endswith("<think>\n\n</think>\n\n")
