"""make-model's Bonsai presets: the published Qwen3-1.7B / 4B / 8B shapes, Q1_0 by default, and
tensor bytes that add up to the published files' sizes (the plan only: no 250 MB written here)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from bitweb import formats
from bitweb.authoring.makemodel import PRESET_DEFAULTS, plan_tensors, spec_from_args

# preset: (n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_ctx, tied, published file bytes)
BONSAI = {"bonsai-1.7b": (28, 2048, 16, 8, 128, 6144, 32768, True, 248e6),
          "bonsai-4b": (36, 2560, 32, 8, 128, 9728, 32768, True, 572e6),
          "bonsai-8b": (36, 4096, 32, 8, 128, 12288, 65536, False, 1.16e9)}
V = 151936


def spec(preset, **kw):
    args = dict(preset=preset, arch=None, format=None, embd_format=None, output_format=None, layers=None,
                seed=0, scale_tensors="auto")
    return spec_from_args(SimpleNamespace(**dict(args, **kw)))


@pytest.mark.parametrize("preset", list(BONSAI))
def test_bonsai_preset_shapes_and_defaults(preset):
    L, e, nh, nkv, hd, ff, ctx, tied, size = BONSAI[preset]
    d = PRESET_DEFAULTS[preset]
    assert (d["arch"], d["format"], d["embd_format"], d["vocab"]) == ("qwen3", "q1_0", "q1_0", "qwen")
    assert d.get("output_format") == (None if tied else "q1_0")
    # the tables' Q1_0 type comes with the format registry's table roles; the linears' defaults here
    s = spec(preset, embd_format="f16", output_format=None if tied else "f16")
    assert (s.arch, s.fmt, s.linear_type, s.tied, s.n_ctx) == ("qwen3", "q1_0", "Q1_0", tied, ctx)
    plan = {t.name: t for t in plan_tensors(s, V)}
    q, kv = nh * hd, nkv * hd
    want = {"attn_norm": (e,), "attn_q": (e, q), "attn_k": (e, kv), "attn_v": (e, kv), "attn_q_norm": (hd,),
            "attn_k_norm": (hd,), "attn_output": (q, e), "ffn_norm": (e,), "ffn_gate": (e, ff), "ffn_up": (e, ff),
            "ffn_down": (ff, e)}
    for i in (0, L - 1):
        for n, shape in want.items():
            t = plan[f"blk.{i}.{n}.weight"]
            assert t.shape == shape and t.type_name == ("F32" if len(shape) == 1 else "Q1_0"), (n, t)
    assert f"blk.{L}.attn_q.weight" not in plan
    assert not any("sub_norm" in n or n.endswith(".scale") for n in plan)          # qwen3: no sub-norms
    assert plan["token_embd.weight"].shape == (e, V) and ("output.weight" in plan) == (not tied)
    assert len(plan) == 2 + 11 * L + (not tied)
    # tensor bytes with Q1_0 tables: the published file less its header (the Qwen tokenizer's
    # 151k tokens and merges: 5.6 MB on 1.7B / 4B, 7 MB on 8B as planned here)
    q1 = formats.by_name("Q1_0")
    nbytes = sum(q1.nbytes(t.shape[0] * t.shape[1]) if t.kind == "embd" else t.nbytes for t in plan.values())
    assert size - 8e6 < nbytes < size, nbytes
