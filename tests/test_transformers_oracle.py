"""The numpy model against transformers' BitNetForCausalLM (torch CPU) with the same weights.

A tiny random BitNet config is built in transformers, its weights are made ternary
(t in {-1,0,1}, one scale s per linear, s exact in f16 so every format stores it exactly),
and `hf_to_gguf` writes them to GGUF through bitweb's writer and packers, laid out like a
real file (metadata as makemodel writes it, F16 token_embd, F32 norms, packed linears).

What transformers computes (read from transformers 5.24):
- models/bitnet/modeling_bitnet.py: plain nn.Linear layers (no activation quantization
  in the model itself); RMSNorm x * rsqrt(mean(x^2) + eps) * w; RoPE by rotate_half, i.e.
  NEOX pairs (i, i + head_dim/2), inv_freq = base^(-2i/d); attn_sub_norm before o_proj,
  ffn_sub_norm before down_proj; ACT2FN["relu2"] = relu(x)^2 (2B4T), "silu" for `bitnet`.
  -> compared with our activations="f32" mode (weights = s * t as floats).
- integrations/bitnet.py BitLinear (what a checkpoint with quantization_config
  {quant_method: bitnet, linear_class: bitlinear} loads, the published 2B4T): weights
  packed 2-bit (pack_weights), activations quantized per token in forward:
  scale = 127 / clamp(max|x|, 1e-5), xq = clamp(round(x * scale), -128, 127) (torch.round:
  half to even), y = F.linear(xq, t) / (weight_scale * scale) with weight_scale = 1 / s;
  lm_head is not converted. -> compared with activations="a8" (replace_with_bitnet_linear
  on the same model, buffers filled with pack_weights(t) and 1 / s).

Tolerance: max |logit difference| <= 1e-4 over every position of the prompt (logits have
std ~3; measured: f32 <= 4e-5, a8 <= 6e-6, float32 rounding in a different summation
order). In a8 mode the dots are exact integers on both sides; a float difference that moved
one activation across a rounding boundary would change logits by ~1e-3 and fail the bound
(the inputs are fixed, so this would be reproducible, not flaky).
Greedy: 64 generated tokens equal (numpy with its KV cache vs transformers' DynamicCache).
"""
from __future__ import annotations

import os

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")   # BitLinear's @torch.compile: run eagerly on CPU

import numpy as np
import pytest
import torch

from bitweb import formats
from bitweb.authoring.gguf_writer import GGUFWriter
from bitweb.authoring.makemodel import ModelSpec, build_metadata, complete_vocab
from bitweb.authoring.vocab import bytes_vocab
from bitweb.gguf import open_gguf
from bitweb.numpy_model import NumpyModel
from bitweb.sampling import SamplingParams

torch._dynamo.config.disable = True

DIMS = dict(n_embd=256, n_layer=2, n_head=4, n_head_kv=2, n_ff=512, n_ctx=1024)
HF_LINEARS = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
              "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
              "mlp.down_proj": "ffn_down"}
HF_NORMS = {"input_layernorm": "attn_norm", "self_attn.attn_sub_norm": "attn_sub_norm",
            "post_attention_layernorm": "ffn_norm", "mlp.ffn_sub_norm": "ffn_sub_norm"}


def build_hf(arch: str, seed: int, tied: bool = True):
    """A random BitNetForCausalLM with ternary linears; returns (model, {hf linear name: (t, s)})."""
    from transformers import BitNetConfig, BitNetForCausalLM
    voc = complete_vocab(bytes_vocab())
    cfg = BitNetConfig(vocab_size=len(voc["tokenizer.ggml.tokens"]), hidden_size=DIMS["n_embd"],
                       intermediate_size=DIMS["n_ff"], num_hidden_layers=DIMS["n_layer"],
                       num_attention_heads=DIMS["n_head"], num_key_value_heads=DIMS["n_head_kv"],
                       hidden_act="relu2" if arch == "bitnet-b1.58" else "silu",
                       max_position_embeddings=DIMS["n_ctx"], rms_norm_eps=1e-5,
                       rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
                       tie_word_embeddings=tied, bos_token_id=voc["tokenizer.ggml.bos_token_id"],
                       eos_token_id=voc["tokenizer.ggml.eos_token_id"])
    torch.manual_seed(seed)
    model = BitNetForCausalLM(cfg).float().eval()
    rng = np.random.default_rng(seed)
    tern = {}
    with torch.no_grad():
        for name, mod in model.named_modules():
            if name.startswith("model.layers.") and isinstance(mod, torch.nn.Linear):
                n_out, n_in = mod.weight.shape
                t = rng.integers(-1, 2, size=(n_out, n_in), dtype=np.int8)
                s = np.float32(np.float16(rng.uniform(1.2, 2.5) / np.sqrt(2 / 3 * n_in)))   # exact in f16
                mod.weight.copy_(torch.from_numpy(t.astype(np.float32) * s))
                tern[name] = (t, s)
            elif isinstance(mod, torch.nn.Module) and hasattr(mod, "variance_epsilon"):
                mod.weight.copy_(torch.from_numpy(1 + 0.05 * rng.standard_normal(mod.weight.shape[0]).astype(np.float32)))
        e = model.model.embed_tokens.weight
        e.copy_(torch.from_numpy((rng.standard_normal(e.shape) * 3 / np.sqrt(e.shape[1])).astype(np.float16).astype(np.float32)))
        if not tied:
            h = model.lm_head.weight
            h.copy_(torch.from_numpy((rng.standard_normal(h.shape) * 3 / np.sqrt(h.shape[1])).astype(np.float16).astype(np.float32)))
    return model, tern


def hf_to_gguf(model, tern: dict, path, arch: str, fmt: str = "I2_S") -> None:
    """Write a BitNetForCausalLM with ternary linears to GGUF (the converter)."""
    cfg = model.config
    spec = ModelSpec(arch=arch, fmt=fmt.lower(), preset="hf", n_embd=cfg.hidden_size,
                     n_layer=cfg.num_hidden_layers, n_head=cfg.num_attention_heads,
                     n_head_kv=cfg.num_key_value_heads, n_ff=cfg.intermediate_size,
                     n_ctx=cfg.max_position_embeddings, seed=0, scale_tensors=False)
    meta = build_metadata(spec, complete_vocab(bytes_vocab()))
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    f = formats.by_name(fmt)
    tensors = [("token_embd.weight", "F16", sd["model.embed_tokens.weight"].astype("<f2"))]
    for i in range(cfg.num_hidden_layers):
        for hf, gg in HF_NORMS.items():
            tensors.append((f"blk.{i}.{gg}.weight", "F32", sd[f"model.layers.{i}.{hf}.weight"].astype("<f4")))
        for hf, gg in HF_LINEARS.items():
            t, s = tern[f"model.layers.{i}.{hf}"]
            data = (f.pack(t, s) if f.packed
                    else f.quantize(t.astype(np.float32) * s))
            tensors.append((f"blk.{i}.{gg}.weight", fmt, np.frombuffer(data, np.uint8), t.shape[::-1]))
    tensors.append(("output_norm.weight", "F32", sd["model.norm.weight"].astype("<f4")))
    if not cfg.tie_word_embeddings:
        tensors.append(("output.weight", "F16", sd["lm_head.weight"].astype("<f2")))
    with GGUFWriter(path) as w:
        w.add_many(meta)
        for name, ty, data, *shape in tensors:
            w.add_tensor(name, shape[0] if shape else data.shape[::-1], ty)
        for name, ty, data, *_ in tensors:
            w.write_tensor(name, data.tobytes())


def to_bitlinear(model, tern: dict):
    """transformers' W1.58A8 path: every block linear -> integrations.bitnet.BitLinear."""
    from transformers.integrations.bitnet import BitLinear, pack_weights, replace_with_bitnet_linear
    from transformers.utils.quantization_config import BitNetQuantConfig
    replace_with_bitnet_linear(model, modules_to_not_convert=["lm_head"], quantization_config=BitNetQuantConfig())
    n = 0
    with torch.no_grad():
        for name, mod in model.named_modules():
            if isinstance(mod, BitLinear):
                t, s = tern[name]
                mod.weight = pack_weights(torch.from_numpy(t.astype(np.int64)))
                mod.weight_scale = torch.tensor([1.0 / s], dtype=torch.float32)
                n += 1
    assert n == len(tern), "every ternary linear must have become a BitLinear"
    return model


def hf_greedy(model, ids, steps):
    """transformers' own incremental decode (its DynamicCache), argmax each step."""
    ids = list(ids)
    with torch.no_grad():
        out = model(torch.tensor([ids]), use_cache=True)
        for _ in range(steps):
            ids.append(int(torch.argmax(out.logits[0, -1])))
            out = model(torch.tensor([ids[-1:]]), cache=out.cache, use_cache=True)
    return ids


CASES = [("bitnet-b1.58", "I2_S", True, 1), ("bitnet", "TQ2_0", True, 2), ("bitnet-b1.58", "TQ1_0", False, 3)]


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Tiny matrices: torch's threads only add overhead (10x slower on a busy 2-core CI box)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c[0]}-{c[1]}-{'tied' if c[2] else 'output'}")
def pair(request, tmp_path_factory):
    arch, fmt, tied, seed = request.param
    model, tern = build_hf(arch, seed, tied)
    path = tmp_path_factory.mktemp("oracle") / f"{arch}-{fmt}.gguf"
    hf_to_gguf(model, tern, path, arch, fmt)
    return model, tern, open_gguf(path)


PROMPT = "The quick brown fox jumps over the lazy dog."


def _prompt(ref):
    ids = ref.tokenizer.encode(PROMPT)
    assert 10 <= len(ids) <= 40
    return ids


def test_file_is_like_a_real_one(pair):
    _, _, gf = pair
    ref = NumpyModel.from_gguf(gf, "f32")
    assert ref.cfg.ffn == ("relu2" if gf.arch == "bitnet-b1.58" else "silu")
    assert gf.tensors["blk.0.attn_q.weight"].format in (formats.I2_S, formats.TQ2_0, formats.TQ1_0)
    assert gf.tensors["token_embd.weight"].format is formats.F16


def test_f32_logits_and_greedy(pair):
    model, _, gf = pair
    ref = NumpyModel.from_gguf(gf, "f32", kv_cache="f32")       # transformers keeps an f32 KV cache
    ids = _prompt(ref)
    with torch.no_grad():
        want = model(torch.tensor([ids])).logits[0].numpy()
    got = ref.logits(ids)
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-4, np.abs(got - want).max()
    assert want.std() > 1.0                     # not a degenerate model: differences would hide
    res = ref.generate(ids, SamplingParams(), 64, ignore_eos=True)
    assert ids + res.ids == hf_greedy(model, ids, 64)


def test_a8_logits_and_greedy(pair):
    model, tern, gf = pair
    hf = to_bitlinear(model, tern)
    ref = NumpyModel.from_gguf(gf, "a8", kv_cache="f32")
    ids = _prompt(ref)
    with torch.no_grad():
        want = hf(torch.tensor([ids])).logits[0].numpy()
    got = ref.logits(ids)
    assert np.abs(got - want).max() <= 1e-4, np.abs(got - want).max(axis=-1)
    # a8 really differs from f32 (the activation quantization is exercised)
    f32 = NumpyModel.from_gguf(gf, "f32", kv_cache="f32").logits(ids)
    assert np.abs(f32 - got).max() > 1e-3
    res = ref.generate(ids, SamplingParams(), 64, ignore_eos=True)
    assert ids + res.ids == hf_greedy(hf, ids, 64)
