"""Load a training checkpoint as the shipped model computes it, and chat with it greedily.

The token embedding (and tied LM head) is rounded to float16 on load, as it is
stored in the GGUF file; the linear weights are quantized on the fly exactly as in
training (absmean ternary), activations per-token int8: the W1.58A8 forward.

    .venv/bin/python training/infer.py "What is 37 + 45?" "How many r's are in strawberry?"
"""
from __future__ import annotations

import argparse
import os
import sys

import torch
from tokenizers import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from data import EOS, EOT, format_chat  # noqa: E402
from model import BitLinear, BitNet, Config, greedy  # noqa: E402

DEFAULT = os.path.join(HERE, "runs", "ft-dashed", "final.pt")   # the shipped run's last stage


class Loaded:
    def __init__(self, model: BitNet, tok: Tokenizer):
        self.model, self.tok = model, tok
        self.stop = {tok.token_to_id(EOT), tok.token_to_id(EOS)}

    def encode(self, text: str) -> list:
        return self.tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=False)

    def generate_batch(self, prompts: list, max_tokens: int, chunk: int = 128) -> list:
        out = []
        for i in range(0, len(prompts), chunk):
            out += greedy(self.model, prompts[i: i + chunk], max_tokens, self.stop)
        return out

    def generate(self, prompt_ids, max_tokens: int) -> list:
        return self.generate_batch([list(prompt_ids)], max_tokens)[0]

    def chat(self, messages: list, max_tokens: int = 64) -> str:
        return self.decode(self.generate(self.encode(format_chat(messages)), max_tokens))


def load(path: str = DEFAULT, f16_embedding: bool = True) -> Loaded:
    ck = torch.load(path, weights_only=False, map_location="cpu")
    model = BitNet(Config(**ck["config"]))
    model.load_state_dict(ck["model"])
    if f16_embedding:
        with torch.no_grad():
            model.token_embd.weight.copy_(model.token_embd.weight.half().float())
    model.eval()
    return Loaded(model, Tokenizer.from_str(ck["tokenizer"]))


def load_gguf(path: str) -> BitNet:
    """The PyTorch model computing the W1.58A8 forward of a GGUF file's weights (no
    re-quantization). For I2_S the linear weight is t / (1/m) with m the file's f32 scale:
    bit for bit the training forward's weight_quant (export stores m = mean|W| exactly).
    Other types use their dequantized values. The embedding is the file's F16 table."""
    import numpy as np
    from bitweb.gguf import open_gguf
    from bitweb.model import Config as FileConfig

    with open_gguf(path) as gf:
        fc = FileConfig.from_gguf(gf)
        if fc.arch != "bitnet-b1.58" or not fc.tied:
            raise ValueError(f"{path}: {fc.arch} (tied head {fc.tied}); the torch model is bitnet-b1.58, tied")
        c = Config(n_vocab=fc.n_vocab, dim=fc.n_embd, n_layer=fc.n_layer, n_head=fc.n_head,
                   n_kv_head=fc.n_head_kv, head_dim=fc.head_dim, ffn=fc.n_ff, rope_base=fc.rope_base,
                   eps=fc.eps, n_ctx=fc.n_ctx)
        model = BitNet(c)

        def arr(name):
            ti = gf.tensors[name]
            f = ti.format
            data = gf.tensor_data(name)
            shape = tuple(reversed(ti.shape))
            if f.tensor_scale:                      # I2_S: codes and one tensor scale
                t, m, _ = f.unpack(data, ti.n_elements)
                inv = 1.0 / torch.tensor(m[0], dtype=torch.float32)
                return torch.from_numpy(t.astype(np.float32).reshape(shape)) / inv
            return torch.from_numpy(f.dequantize(data, ti.n_elements).reshape(shape).copy())

        with torch.no_grad():
            model.token_embd.weight.copy_(arr("token_embd.weight"))
            model.output_norm.weight.copy_(arr("output_norm.weight"))
            for i, b in enumerate(model.blk):
                for name, mod in b.named_children():
                    w = arr(f"blk.{i}.{name}.weight")
                    if isinstance(mod, BitLinear):
                        mod.freeze(w)
                    else:
                        mod.weight.copy_(w)
    model.eval()
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("prompts", nargs="+")
    ap.add_argument("--ckpt", default=DEFAULT)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    m = load(a.ckpt)
    for p in a.prompts:
        print(f"User: {p}\nAssistant: {m.chat([{'role': 'user', 'content': p}])}\n")


if __name__ == "__main__":
    main()
