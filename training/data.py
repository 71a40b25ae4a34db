"""Training data: chat text (the 2B4T chat format, bitweb.chat) and token ids for the task examples.

Chat format (the 2B4T template):
    <|begin_of_text|> + for each message: "System: " / "User: " / "Assistant: "
    + content.strip() + "<|eot_id|>", and the prompt ends with "Assistant: ".
A training sequence is tokenize(prompt text) + tokenize(answer) + [eot]: the prompt
is encoded as a whole (earlier turns included), exactly as the engine encodes a
chat prompt, and the answer is encoded on its own, because at inference the model
generates it after the prompt's final " " token. The loss covers the answer and
its <|eot_id|> only.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pyapp"))

from bitweb.authoring import tasks  # noqa: E402
from bitweb.chat import format_chat  # noqa: E402,F401  (the engine's chat format)
from bitweb.authoring.vocab import TEMPLATE_2B4T  # noqa: E402

BOS, EOS, EOT = "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"
SPECIALS = (BOS, EOS, EOT)

# tokenizer.chat_template: the published 2B4T template (BOS comes from add_bos_token);
# BOS + its rendering is format_chat's text.
CHAT_TEMPLATE = TEMPLATE_2B4T


def prompt_text(ex) -> str:
    return format_chat(ex.messages(with_answer=False))


def answer_ids(tok, ex) -> list:
    """The answer's token ids. The reversed word that ends a `reverse` answer is written one
    letter per token (a space token, then the letters): the same text as its BPE encoding,
    but the model copies single letters from the spelled-out steps instead of having to know
    how BPE merges an unseen string."""
    a = ex.answer.strip()
    if ex.task != "reverse":
        return tok.encode(a, add_special_tokens=False).ids
    head, word = a[:-1].rsplit(" ", 1)
    assert a.endswith(".") and word.isalpha(), a
    letters = [tok.token_to_id(c) for c in "\u0120" + word]       # \u0120: byte-level space
    return tok.encode(head, add_special_tokens=False).ids + letters + tok.encode(".").ids


def encode_example(tok, ex):
    """(ids, n_prompt): ids = prompt + answer + eot; the loss covers ids[n_prompt:]."""
    p = tok.encode(prompt_text(ex), add_special_tokens=False).ids
    return p + answer_ids(tok, ex) + [tok.token_to_id(EOT)], len(p)
