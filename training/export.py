"""Export a training checkpoint to GGUF (architecture `bitnet-b1.58`, as the published 2B4T file).

    .venv/bin/python training/export.py                          # I2_S -> web/models/bitweb-chat-i2_s.gguf
    .venv/bin/python training/export.py --format tq2_0 --out /tmp/m.gguf   (tq1_0, f16 too)

Tensors (GGUF shapes, ne0 first; a linear weight (n_out, n_in) has shape [n_in, n_out]):
    token_embd.weight           F16  [dim, n_vocab]   (also the LM head: tied)
    blk.N.attn_norm.weight      F32  [dim]
    blk.N.attn_q/k/v.weight     ternary  [dim, n_head*head_dim] / [dim, n_kv*head_dim]
    blk.N.attn_sub_norm.weight  F32  [n_head*head_dim]
    blk.N.attn_output.weight    ternary  [n_head*head_dim, dim]
    blk.N.ffn_norm.weight       F32  [dim]
    blk.N.ffn_gate/up.weight    ternary  [dim, ffn]
    blk.N.ffn_sub_norm.weight   F32  [ffn]
    blk.N.ffn_down.weight       ternary  [ffn, dim]
    output_norm.weight          F32  [dim]
Ternary weights: t = clamp(round(W / m), -1, 1) with m = mean|W| (the training forward's
quantization). I2_S stores t and m as its one f32 tensor scale (exact); TQ2_0 / TQ1_0 store
t with d = m as f16 in every 256-block; F16 stores t * m rounded to f16. So only I2_S gives
bit-for-bit the trained weights; the others round the scale to f16 (relative error < 2^-11).
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "pyapp"))

from bitweb.authoring import gguf_writer as gw  # noqa: E402
from bitweb.formats import by_name  # noqa: E402
from data import BOS, CHAT_TEMPLATE, EOS, EOT  # noqa: E402
from model import BitNet, Config, ternary  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

ARCH = "bitnet-b1.58"
# llama_ftype values (llama.h; I2_S from bitnet.cpp)
FILE_TYPE = {"i2_s": 40, "tq1_0": 36, "tq2_0": 37, "f16": 1}
DEFAULT_OUT = os.path.join(HERE, "..", "web", "models", "bitweb-chat-i2_s.gguf")
DEFAULT_CKPT = os.path.join(HERE, "runs", "ft-dashed", "final.pt")   # the shipped run's last stage


def tokenizer_metadata(tok: Tokenizer) -> list:
    """tokenizer.ggml.* for a byte-level BPE (gpt2 model, Llama 3 pre-tokenizer)."""
    import json
    j = json.loads(tok.to_str())
    vocab = j["model"]["vocab"]
    n = tok.get_vocab_size()
    tokens = [None] * n
    for t, i in vocab.items():
        tokens[i] = t
    special = {a["id"]: a["content"] for a in j["added_tokens"]}
    for i, t in special.items():
        tokens[i] = t
    if any(t is None for t in tokens):
        raise ValueError("tokenizer ids are not contiguous")
    merges = [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]
    types = [3 if i in special else 1 for i in range(n)]     # 1 normal, 3 control
    return [
        ("tokenizer.ggml.model", "gpt2"),
        ("tokenizer.ggml.pre", "llama-bpe"),
        ("tokenizer.ggml.tokens", gw.array(gw.STRING, tokens)),
        ("tokenizer.ggml.token_type", gw.array(gw.INT32, types)),
        ("tokenizer.ggml.merges", gw.array(gw.STRING, merges)),
        ("tokenizer.ggml.bos_token_id", gw.u32(tok.token_to_id(BOS))),
        ("tokenizer.ggml.eos_token_id", gw.u32(tok.token_to_id(EOS))),
        ("tokenizer.ggml.eot_token_id", gw.u32(tok.token_to_id(EOT))),
        ("tokenizer.ggml.padding_token_id", gw.u32(tok.token_to_id(EOS))),
        ("tokenizer.ggml.add_bos_token", True),
        ("tokenizer.ggml.add_eos_token", False),
        ("tokenizer.chat_template", CHAT_TEMPLATE),
    ]


def model_metadata(c: Config, fmt: str) -> list:
    p = ARCH + "."
    return [
        ("general.architecture", ARCH),
        ("general.name", "bitweb-chat"),
        ("general.description", "Small BitNet b1.58 chat model trained by bitweb training/train.py "
                                "on bitweb.tasks (arithmetic, comparison, letters, weekdays)"),
        ("general.file_type", gw.u32(FILE_TYPE[fmt])),
        ("general.quantization_version", gw.u32(2)),
        (p + "vocab_size", gw.u32(c.n_vocab)),
        (p + "context_length", gw.u32(c.n_ctx)),
        (p + "embedding_length", gw.u32(c.dim)),
        (p + "block_count", gw.u32(c.n_layer)),
        (p + "feed_forward_length", gw.u32(c.ffn)),
        (p + "attention.head_count", gw.u32(c.n_head)),
        (p + "attention.head_count_kv", gw.u32(c.n_kv_head)),
        (p + "attention.key_length", gw.u32(c.head_dim)),
        (p + "attention.value_length", gw.u32(c.head_dim)),
        (p + "attention.layer_norm_rms_epsilon", gw.f32(c.eps)),
        (p + "rope.freq_base", gw.f32(c.rope_base)),
        (p + "rope.dimension_count", gw.u32(c.head_dim)),
    ]


def pack_linear(w: torch.Tensor, fmt: str):
    """(GGUF type name, bytes) for one linear weight (n_out, n_in)."""
    t, m = ternary(w)
    t = t.numpy()
    if fmt == "i2_s":
        return "I2_S", by_name("I2_S").pack(t, np.float32(m))
    if fmt in ("tq2_0", "tq1_0"):
        f = by_name(fmt.upper())
        return f.name, f.pack(t, np.full(t.size // 256, m, dtype=np.float32))
    if fmt == "f16":
        return "F16", (t.astype(np.float32) * np.float32(m)).astype("<f2").tobytes()
    raise ValueError(f"unknown format {fmt!r}; choose i2_s, tq2_0, tq1_0 or f16")


def tensors(model: BitNet, fmt: str) -> list:
    """[(name, GGUF shape, type, bytes)] in file order."""
    c = model.c
    f32 = lambda p: p.detach().float().numpy().astype("<f4").tobytes()  # noqa: E731
    out = [("token_embd.weight", (c.dim, c.n_vocab), "F16",
            model.token_embd.weight.detach().numpy().astype("<f2").tobytes())]
    for i, b in enumerate(model.blk):
        for name in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_sub_norm", "attn_output",
                     "ffn_norm", "ffn_gate", "ffn_up", "ffn_sub_norm", "ffn_down"):
            mod = getattr(b, name)
            w = mod.weight
            if w.dim() == 1:
                out.append((f"blk.{i}.{name}.weight", (w.shape[0],), "F32", f32(w)))
            else:
                ty, data = pack_linear(w, fmt)
                out.append((f"blk.{i}.{name}.weight", (w.shape[1], w.shape[0]), ty, data))
    out.append(("output_norm.weight", (c.dim,), "F32", f32(model.output_norm.weight)))
    return out


def export(ckpt_path: str, out: str, fmt: str = "i2_s") -> str:
    ck = torch.load(ckpt_path, weights_only=False, map_location="cpu")
    c = Config(**ck["config"])
    model = BitNet(c)
    model.load_state_dict(ck["model"])
    tok = Tokenizer.from_str(ck["tokenizer"])
    if c.dim % 256 or c.ffn % 256 or (c.n_head * c.head_dim) % 256:
        if fmt in ("tq2_0", "tq1_0"):
            raise ValueError(f"{fmt}: every linear input size must be a multiple of 256")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    gw.write_gguf(out, model_metadata(c, fmt) + tokenizer_metadata(tok), tensors(model, fmt))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", default=DEFAULT_CKPT)
    ap.add_argument("--format", default="i2_s", choices=list(FILE_TYPE))
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    out = a.out or (DEFAULT_OUT if a.format == "i2_s" else
                    os.path.join(HERE, "..", "models", f"bitweb-chat-{a.format}.gguf"))
    export(a.ckpt, out, a.format)
    print(f"{out}: {os.path.getsize(out)} bytes")


if __name__ == "__main__":
    main()
