"""The numpy model of the qwen3, llama and qwen2 families against transformers' Qwen3ForCausalLM /
LlamaForCausalLM / Qwen2ForCausalLM built on the same (dequantized) weights.

A tiny random model is written by make-model (every linear format, tied and untied heads), the
numpy model reads it, and transformers gets every tensor dequantized to float32 (bitweb.formats:
the same values the numpy model multiplies with in f32 mode). What transformers 5.24 computes
(models/qwen3/modeling_qwen3.py, models/llama/modeling_llama.py): RMSNorm x * rsqrt(mean(x^2) +
eps) * w; q_norm / k_norm (Qwen3RMSNorm over head_dim) on each head before RoPE; RoPE by
rotate_half, i.e. pairs (i, i + head_dim/2), inv_freq = base^(-2i/d); silu(gate) * up; no sub-norms.
Qwen2 (models/qwen2/modeling_qwen2.py) is llama's block with NEOX RoPE and q_proj / k_proj / v_proj
of bias=True (always: Qwen2Config has no switch), o_proj without: the file's attn_q / attn_k /
attn_v.bias tensors.

llama's GGUF stores q / k rows permuted so that ggml's NORM RoPE (adjacent pairs) equals HF's
rotate_half (llama.cpp convert_hf_to_gguf.py LlamaModel.permute: per head, rows (a, b) -> (b, a)
for a in {0, 1} halves, b < head_dim/2); the oracle un-permutes attn_q / attn_k (`unpermute`) to
get the HF weights. Without that, scores differ at every position but 0 (a check below).

Tolerance: max |logit difference| <= 1e-4 over every prompt position (logits have std ~3;
float32 in a different summation order); greedy: 64 generated tokens equal (numpy's KV cache vs
transformers' own). Compared in f32 activations only: transformers' W1.58A8 BitLinear holds one
weight scale per tensor, which the block formats (TQ*, Q1_0, Q2_0) do not have.
"""
from __future__ import annotations

import os

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

import numpy as np
import pytest
import torch

from bitweb import formats
from bitweb.gguf import open_gguf
from bitweb.model import Model, tensor_name
from bitweb.numpy_model import NumpyModel
from bitweb.sampling import SamplingParams
from tests.test_transformers_oracle import HF_LINEARS, PROMPT, hf_greedy

torch._dynamo.config.disable = True

HF_NORMS = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
            "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm"}
HF_BIASES = {"self_attn.q_proj.bias": "attn_q_bias", "self_attn.k_proj.bias": "attn_k_bias",
             "self_attn.v_proj.bias": "attn_v_bias"}
HF_CLASSES = {"qwen3": ("Qwen3ForCausalLM", "Qwen3Config"), "llama": ("LlamaForCausalLM", "LlamaConfig"),
              "qwen2": ("Qwen2ForCausalLM", "Qwen2Config")}

# (arch, --format, tied head, seed, other make-model options): every linear format of each family
# once, tied and untied; Ternary Bonsai's Q2_0 (both block sizes) with packed tables and the qwen vocabulary
CASES = [("qwen3", f, i % 3 != 2, i + 1, {}) for i, f in enumerate(("q1_0", "tq2_0", "i2_s", "tq1_0", "f16", "bf16"))] + \
        [("llama", f, i % 3 != 1, i + 11, {}) for i, f in enumerate(("i2_s", "tq1_0", "q1_0", "tq2_0", "f32", "bf16"))] + \
        [("qwen3", "q2_0", False, 21, dict(embd_fmt="q1_0", output_fmt="q1_0", vocab="qwen")),
         ("qwen3", "q2_0_g128", True, 22, dict(embd_fmt="q2_0_g128", vocab="qwen"))] + \
        [("qwen2", "q8_0", True, 31, dict(vocab="qwen")), ("qwen2", "i2_s", False, 32, {}),
         ("qwen2", "tq2_0", True, 33, dict(embd_fmt="q8_0")), ("qwen2", "f16", False, 34, {})]


def unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """HF rows of a GGUF llama q / k weight (n_head * hd, n_in): the inverse of LlamaModel.permute."""
    hd = w.shape[0] // n_head
    return w.reshape(n_head, hd // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def dequant(gf, name) -> np.ndarray:
    ti = gf.tensors[name]
    return formats.TYPES[ti.type_id].dequantize(gf.tensor_data(name), ti.n_elements).reshape(ti.np_shape)


def hf_model(gf, permute: bool = True):
    """Qwen3ForCausalLM / LlamaForCausalLM / Qwen2ForCausalLM with the file's weights (float32)."""
    import transformers
    cfg = Model.from_gguf(gf).cfg
    kw = dict(vocab_size=cfg.n_vocab, hidden_size=cfg.n_embd, intermediate_size=cfg.n_ff,
              num_hidden_layers=cfg.n_layer, num_attention_heads=cfg.n_head, num_key_value_heads=cfg.n_head_kv,
              head_dim=cfg.head_dim, hidden_act="silu", max_position_embeddings=cfg.n_ctx, rms_norm_eps=cfg.eps,
              rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_base},
              tie_word_embeddings=cfg.tied)
    if cfg.arch != "qwen2":               # Qwen2's q / k / v biases are always on
        kw.update(attention_bias=False)
    if cfg.arch == "llama":
        kw.update(mlp_bias=False)
    cls, conf = HF_CLASSES[cfg.arch]
    model = getattr(transformers, cls)(getattr(transformers, conf)(**kw)).float().eval()
    sd = {"model.embed_tokens.weight": dequant(gf, "token_embd.weight"),
          "model.norm.weight": dequant(gf, "output_norm.weight")}
    if not cfg.tied:
        sd["lm_head.weight"] = dequant(gf, "output.weight")
    for i in range(cfg.n_layer):
        for hf, gg in list(HF_LINEARS.items()) + list(HF_NORMS.items()) + list(HF_BIASES.items()):
            name = tensor_name(i, gg)
            if name not in gf.tensors:
                continue
            w = dequant(gf, name)
            if cfg.rope == "norm" and permute and gg in ("attn_q", "attn_k"):
                w = unpermute(w, cfg.n_head if gg == "attn_q" else cfg.n_head_kv)
            sd[f"model.layers.{i}.{hf}" + ("" if hf.endswith(".bias") else ".weight")] = w
    state = model.state_dict()
    missing = [k for k in state if k not in sd and not (cfg.tied and k == "lm_head.weight")]
    assert not missing, missing
    with torch.no_grad():
        for k, v in sd.items():
            assert state[k].shape == v.shape, (k, state[k].shape, v.shape)
            state[k].copy_(torch.from_numpy(np.ascontiguousarray(v, np.float32)))
    if cfg.tied:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    return model


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c[0]}-{c[1]}-{'tied' if c[2] else 'output'}")
def pair(request, tiny_model):
    arch, fmt, tied, seed, extra = request.param
    kw = dict(extra) if tied else dict(extra, tied=False)
    gf = open_gguf(tiny_model(arch=arch, fmt=fmt, seed=seed, **kw))
    return hf_model(gf), gf


def test_f32_logits_and_greedy(pair):
    model, gf = pair
    ref = NumpyModel.from_gguf(gf, "f32", kv_cache="f32")       # transformers' cache is f32
    assert gf.tensors["blk.0.attn_q.weight"].format is ref.cfg.linear_type
    assert ("output.weight" in gf.tensors) != ref.cfg.tied
    ids = ref.tokenizer.encode(PROMPT)
    with torch.no_grad():
        want = model(torch.tensor([ids])).logits[0].numpy()
    got = ref.logits(ids)
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-4, np.abs(got - want).max()
    assert want.std() > 1.0
    res = ref.generate(ids, SamplingParams(), 64, ignore_eos=True)
    hf = hf_greedy(model, ids, 64)
    assert ids + res.ids == hf
    assert len(set(res.ids)) >= 16                    # a varied continuation, not one token repeated


def test_llama_rows_are_permuted_for_norm_rope(tiny_model):
    """Without un-permuting q / k, transformers disagrees (the permutation is real and needed)."""
    gf = open_gguf(tiny_model(arch="llama", fmt="q1_0", seed=11))
    ids = NumpyModel.from_gguf(gf, "f32").tokenizer.encode(PROMPT)
    with torch.no_grad():
        right = hf_model(gf)(torch.tensor([ids])).logits[0].numpy()
        wrong = hf_model(gf, permute=False)(torch.tensor([ids])).logits[0].numpy()
    assert np.abs(right[0] - wrong[0]).max() <= 1e-5        # position 0: RoPE is the identity
    assert np.abs(right[1:] - wrong[1:]).max() > 0.1


def test_qwen2_biases_change_the_logits(tiny_model):
    """transformers without the file's Q / K / V biases disagrees (the oracle cases above check them)."""
    gf = open_gguf(tiny_model(arch="qwen2", fmt="q8_0", seed=31, vocab="qwen"))
    ids = NumpyModel.from_gguf(gf, "f32").tokenizer.encode(PROMPT)
    model = hf_model(gf)
    with torch.no_grad():
        right = model(torch.tensor([ids])).logits[0].numpy()
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.zero_()
        wrong = model(torch.tensor([ids])).logits[0].numpy()
    assert np.abs(right - wrong).max() > 0.5
