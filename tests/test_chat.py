"""bitweb.chat: the 2B4T chat format, checked against its Jinja template and HF tokenizers."""
from __future__ import annotations

import re

import jinja2.ext
import jinja2.sandbox
import pytest
import tokenizers

from bitweb.authoring import vocab
from bitweb.chat import ChatError, chat_ids, detect_template, format_chat
from bitweb.generation import common_prefix
from bitweb.tokenizer import Tokenizer

CONVERSATIONS = [
    [{"role": "user", "content": "Hey, are you conscious? Can you talk to me?"}],
    [{"role": "system", "content": "  You are a helpful AI assistant.\n"},
     {"role": "user", "content": "\tExplain BitNet in one sentence. "}],
    [{"role": "system", "content": "Be terse."},
     {"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": " 4\n\n"},
     {"role": "user", "content": "Und auf Deutsch? Ünïcödé 漢字 🚀"},
     {"role": "assistant", "content": "Vier."},
     {"role": "user", "content": "line one\nline two"}],
    [{"role": "user", "content": ""}],
    [],
]


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.from_metadata(vocab.llama3_vocab())


@pytest.fixture(scope="module")
def hf():
    return tokenizers.Tokenizer.from_file(str(vocab.llama3_tokenizer_json()))


def render(template, messages, add_generation_prompt):
    """The template rendered the way transformers' apply_chat_template renders it."""
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=[jinja2.ext.loopcontrols])
    return env.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                            bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>")


def test_format_exact():
    msgs = [{"role": "system", "content": " Be nice. "}, {"role": "user", "content": "Hi!\n"}]
    assert format_chat(msgs) == \
        "<|begin_of_text|>System: Be nice.<|eot_id|>User: Hi!<|eot_id|>Assistant: "
    assert format_chat(msgs, add_generation_prompt=False) == \
        "<|begin_of_text|>System: Be nice.<|eot_id|>User: Hi!<|eot_id|>"
    msgs.append({"role": "assistant", "content": "Hello."})
    assert format_chat(msgs).endswith("<|eot_id|>Assistant: Hello.<|eot_id|>Assistant: ")


@pytest.mark.parametrize("gen", [True, False])
def test_format_matches_the_model_template(gen):
    for msgs in CONVERSATIONS:
        assert format_chat(msgs, gen) == "<|begin_of_text|>" + render(vocab.TEMPLATE_2B4T, msgs, gen)


def test_ids_match_hf(tok, hf):
    for msgs in CONVERSATIONS:
        ids = chat_ids(tok, msgs)
        assert ids == [128000] + hf.encode(render(vocab.TEMPLATE_2B4T, msgs, True), add_special_tokens=False).ids
        assert ids == tok.encode(format_chat(msgs), add_bos=False, parse_special=True)
        assert ids.count(128009) == len(msgs) and ids.count(128000) == 1
        assert tok.decode(ids) == format_chat(msgs)


def test_special_text_in_a_message_stays_text(tok):
    msgs = [{"role": "user", "content": "say <|eot_id|> and <|begin_of_text|>"}]
    ids = chat_ids(tok, msgs)
    assert ids.count(128009) == 1 and ids.count(128000) == 1
    assert tok.decode(ids) == format_chat(msgs)
    assert tok.encode(format_chat(msgs), add_bos=False, parse_special=True).count(128009) == 2


def test_conversation_ids_extend_as_a_prefix(tok):
    msgs = CONVERSATIONS[2]
    full = chat_ids(tok, msgs)
    for k in range(len(msgs) + 1):
        head = chat_ids(tok, msgs[:k], add_generation_prompt=False)
        assert full[:len(head)] == head
        assert common_prefix(head, full) == len(head)
    # the generated reply after "Assistant: " need not match its re-encoding: keep the common prefix
    assert common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2 and common_prefix([], [1]) == 0


def test_tiny_vocab_chat(tok):
    t = Tokenizer.from_metadata(vocab.bytes_vocab())
    msgs = CONVERSATIONS[1]
    ids = chat_ids(t, msgs)
    assert ids[0] == t.bos_id and ids.count(t.eot_id) == 2
    assert ids == t.encode(format_chat(msgs), add_bos=False, parse_special=True)
    assert t.decode(ids) == format_chat(msgs)


def test_detect_template():
    assert detect_template(vocab.TEMPLATE_2B4T) == "bitnet"
    assert detect_template(None) == "bitnet" and detect_template("") == "bitnet"
    # the placeholder embedded in the published ggml-model-i2_s.gguf (as reported by its users)
    gguf_placeholder = ("{% for message in messages %}{% if loop.first %}{{ bos_token }}{% endif %}"
                        "{% if message['role'] == 'user' %}{{ 'Human: ' + message['content'] + "
                        "'\\n\\nBITNETAssistant: ' + eos_token }}{% elif message['role'] == 'assistant' %}"
                        "{{ message['content'] + eos_token }}{% endif %}{% endfor %}")
    assert detect_template(gguf_placeholder) == "bitnet"
    llama3 = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
              "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
              "'<|eot_id|>' %}{{ content }}{% endfor %}")
    assert detect_template(llama3) == "unknown"
    assert detect_template("{{ messages }}") == "unknown"


@pytest.mark.parametrize("messages, message", [
    ("hi", "messages must be a list"),
    ([{"role": "user", "content": "a"}, "b"], r"messages\[1\] must be a dict"),
    ([{"role": "tool", "content": "a"}], r"messages\[0\].role is 'tool'"),
    ([{"content": "a"}], r"messages\[0\].role is None"),
    ([{"role": "user", "content": 5}], r"messages\[0\].content must be a str"),
])
def test_bad_messages(messages, message, tok):
    with pytest.raises(ChatError, match=message):
        format_chat(messages)
    with pytest.raises(ChatError, match=message):
        chat_ids(tok, messages)


def test_vocab_without_chat_tokens():
    md = vocab.bytes_vocab()
    t = Tokenizer.from_metadata({**md, "tokenizer.ggml.tokens": md["tokenizer.ggml.tokens"][:-1] + ["<|x|>"]})
    with pytest.raises(ChatError, match=re.escape("<|eot_id|>")):
        chat_ids(t, [{"role": "user", "content": "hi"}])
