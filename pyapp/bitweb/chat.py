"""The BitNet b1.58 2B4T chat format (stdlib only; runs in Pyodide).

The model's template (microsoft/bitnet-b1.58-2B-4T tokenizer_config.json,
`bitweb.authoring.vocab.TEMPLATE_2B4T`) renders each message as

    Role: content<|eot_id|>          Role = role.capitalize(), content = content.strip()

and, for a generation prompt, ends with "Assistant: ". BOS comes from the
tokenizer (add_bos_token), so the full prompt is

    <|begin_of_text|>System: ...<|eot_id|>User: ...<|eot_id|>Assistant: ...<|eot_id|>User: ...<|eot_id|>Assistant: 

with no newlines anywhere. Generation stops on <|eot_id|> or EOS
(Tokenizer.is_stop).

Other templates seen for this model, not followed: the GGUF upload
(ggml-model-i2_s.gguf) embeds a placeholder template from Microsoft's
converter ("Human: ...\\n\\nBITNETAssistant: " + eos), which is not the
trained format; ik_llama.cpp's "bitnet" renderer writes "System: " + content
without <|eot_id|> and assistant content without "Assistant: "/<|eot_id|>.
`detect_template` treats both the model's template and that placeholder as
"bitnet" (use this formatter); anything else is "unknown" - running arbitrary
Jinja templates is out of scope, callers decide what to do with those.

Multi-turn: special tokens split the text before BPE, so the ids of a
conversation are a prefix of the ids of the same conversation with more
messages (up to the last <|eot_id|>). The generated reply after "Assistant: "
may tokenize differently from its re-encoding, so an engine reusing a KV
cache should keep `bitweb.generation.common_prefix(cached_ids, new_ids)` tokens.
"""
from __future__ import annotations

BOS, EOT = "<|begin_of_text|>", "<|eot_id|>"
ROLES = ("system", "user", "assistant")
GENERATION_PROMPT = "Assistant: "


class ChatError(ValueError):
    """A malformed message list; the message names the message index and field."""


def _checked(messages) -> list[tuple[str, str]]:
    if not isinstance(messages, (list, tuple)):
        raise ChatError(f"messages must be a list of {{role, content}} dicts, got {type(messages).__name__}")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise ChatError(f"messages[{i}] must be a dict with 'role' and 'content', got {type(m).__name__}")
        role, content = m.get("role"), m.get("content")
        if role not in ROLES:
            raise ChatError(f"messages[{i}].role is {role!r}; expected one of {', '.join(ROLES)}")
        if not isinstance(content, str):
            raise ChatError(f"messages[{i}].content must be a str, got {type(content).__name__}")
        out.append((role.capitalize() + ": ", content.strip()))
    return out


def format_chat(messages, add_generation_prompt: bool = True) -> str:
    """The prompt text, starting with <|begin_of_text|> (encode it with add_bos=False,
    parse_special=True; or use chat_ids, which cannot be fooled by special-token text
    inside a message)."""
    text = BOS + "".join(head + body + EOT for head, body in _checked(messages))
    return text + GENERATION_PROMPT if add_generation_prompt else text


def chat_ids(tokenizer, messages, add_generation_prompt: bool = True) -> list[int]:
    """Token ids of format_chat(messages): BOS and <|eot_id|> as their ids, message text
    tokenized as plain text (a "<|eot_id|>" typed by a user stays text)."""
    if tokenizer.bos_id is None or EOT not in tokenizer.token_to_id:
        raise ChatError("the vocabulary lacks <|begin_of_text|> (bos) or <|eot_id|>, "
                        "which the BitNet chat format needs")
    eot = tokenizer.token_to_id[EOT]
    ids = [tokenizer.bos_id]
    for head, body in _checked(messages):
        ids += tokenizer.encode(head + body, add_bos=False, parse_special=False)
        ids.append(eot)
    if add_generation_prompt:
        ids += tokenizer.encode(GENERATION_PROMPT, add_bos=False, parse_special=False)
    return ids


def detect_template(template) -> str:
    """'bitnet' when the file's tokenizer.chat_template is absent, the 2B4T template, or
    the placeholder embedded in the published GGUF; 'unknown' otherwise."""
    if not template:
        return "bitnet"
    t = "".join(str(template).split())                 # compare without whitespace
    if "capitalize+':'" in t and "<|eot_id|>" in t and "'Assistant:'" in t:
        return "bitnet"
    if "BITNETAssistant" in t:
        return "bitnet"
    return "unknown"
