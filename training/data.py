"""Training data: chat text (DESIGN.md section 4) and token ids for the task examples.

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

from bitweb import tasks  # noqa: E402
from bitweb.chat import format_chat  # noqa: E402,F401  (the engine's chat format)
from bitweb.vocab import TEMPLATE_2B4T  # noqa: E402

BOS, EOS, EOT = "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"
SPECIALS = (BOS, EOS, EOT)

# tokenizer.chat_template: the published 2B4T template (BOS comes from add_bos_token);
# BOS + its rendering is format_chat's text.
CHAT_TEMPLATE = TEMPLATE_2B4T


def prompt_text(ex) -> str:
    return format_chat(ex.messages(with_answer=False))


def encode_example(tok, ex):
    """(ids, n_prompt): ids = prompt + answer + eot; the loss covers ids[n_prompt:]."""
    p = tok.encode(prompt_text(ex), add_special_tokens=False).ids
    a = tok.encode(ex.answer.strip(), add_special_tokens=False).ids
    return p + a + [tok.token_to_id(EOT)], len(p)
