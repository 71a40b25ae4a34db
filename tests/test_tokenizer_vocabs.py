"""llama.cpp's own tokenizer test set, and the pre-tokenizers against HF `tokenizers`.

llama.cpp ships `models/ggml-vocab-<name>.gguf` (a vocabulary, no weights) with `.inp` / `.out`
test vectors: inputs joined by "\\n__ggml_vocab_test__\\n", one line of ids per input, made by HF
`tokenizers` (`AutoTokenizer(...).encode(text, add_special_tokens=False)`) and checked by
llama.cpp's tests/test-tokenizer-0.cpp (add_special=false, parse_special=false). Set-up fetches
them from the llama-cpp-python source package on PyPI, hash-pinned (tools/fetch_test_assets.py
-> build/assets/llama.cpp/models/). Every BPE and SentencePiece vocabulary must pass every case;
the vocabulary types bitweb does not run are refused with an error naming them; the files
without vectors load or are refused by name.

Beyond the vectors: each vocabulary's tokenizer equals an HF tokenizer built from the same GGUF
metadata with the model's own HF pipeline (Digits, ByteLevel, Punctuation, Split) on a
multilingual corpus and random text; each split equals HF's Split steps on random text; the
Unicode classes equal Oniguruma's (HF's) on every code point. tests/e2e/test_tokenizer_browser.py
runs the same vectors in Pyodide.
"""
from __future__ import annotations

import functools
import json
import pathlib
import random
import re

import pytest
import tokenizers

from bitweb.gguf import open_gguf
from bitweb.tokenizer import Tokenizer, TokenizerError
from bitweb.tokenizer_pre import _DEEPSEEK_CJK, _DEEPSEEK_LETTERS, PRE_TOKENIZERS, SPLITS, char_class
from tests.conftest import ROOT, need

MODELS = ROOT / "build" / "assets" / "llama.cpp" / "models"
SMOLLM2 = ROOT / "build" / "assets" / "SmolLM2-135M-Instruct.Q4_1.gguf"
SEP = "\n__ggml_vocab_test__\n"
# the vocabularies with vectors bitweb runs, and their tokenizer.ggml.model / .pre
RUNS = {"llama-spm": ("llama", "default"), "phi-3": ("llama", "default"), "llama-bpe": ("gpt2", "llama-bpe"),
        "qwen2": ("gpt2", "qwen2"), "qwen35": ("gpt2", "qwen35"), "gpt-2": ("gpt2", "gpt-2"),
        "mpt": ("gpt2", "mpt"), "starcoder": ("gpt2", "starcoder"), "refact": ("gpt2", "refact"),
        "command-r": ("gpt2", "command-r"), "falcon": ("gpt2", "falcon"),
        "deepseek-llm": ("gpt2", "deepseek-llm"), "deepseek-coder": ("gpt2", "deepseek-coder")}
# vocabulary types bitweb does not run: the error names the type
REFUSED = {"bert-bge": r"tokenizer.ggml.model 'bert' \(WPM", "gemma-4": r"tokenizer.ggml.model 'gemma4' \(Gemma 4",
           "nomic-bert-moe": r"tokenizer.ggml.model 't5' \(UGM"}
# files without vectors: None = loads (and round-trips text), else the refusal
NO_VECTORS = {"aquila": None, "baichuan": None, "gpt-neox": None, "nomic-bert-moe": REFUSED["nomic-bert-moe"]}


def have_models():
    need(MODELS.is_dir() and any(MODELS.glob("ggml-vocab-*.gguf.inp")),
         f"llama.cpp's vocabulary tests are not in {MODELS} (run tools/setup.sh --test)")


def read_cases(name: str) -> list[tuple[str, list[int]]]:
    """(input, ids) of ggml-vocab-<name>.gguf.inp / .out, split exactly as test-tokenizer-0 does."""
    raw = (MODELS / f"ggml-vocab-{name}.gguf.inp").read_bytes().decode("utf-8")
    inputs, pos = [], 0
    while pos < len(raw):
        nxt = raw.find(SEP, pos)
        if nxt < 0:
            inputs.append(raw[pos:])
            break
        inputs.append(raw[pos:nxt])
        pos = nxt + len(SEP)
    lines = (MODELS / f"ggml-vocab-{name}.gguf.out").read_text(encoding="utf-8").split("\n")
    if lines[-1] == "":
        lines.pop()
    assert len(inputs) == len(lines), (name, len(inputs), len(lines))
    return [(s, [int(x) for x in o.split()]) for s, o in zip(inputs, lines)]


@functools.lru_cache(maxsize=None)
def metadata(name: str) -> dict:
    with open_gguf(MODELS / f"ggml-vocab-{name}.gguf") as gf:
        return gf.metadata


@functools.lru_cache(maxsize=4)
def tokenizer(name: str) -> Tokenizer:
    return Tokenizer.from_metadata(metadata(name))


def test_the_test_set_is_what_this_file_knows():
    """A new vocabulary in a later llama-cpp-python is noticed, not silently left out."""
    have_models()
    with_vectors = {p.name[len("ggml-vocab-"):-len(".gguf.inp")] for p in MODELS.glob("ggml-vocab-*.gguf.inp")}
    files = {p.name[len("ggml-vocab-"):-len(".gguf")] for p in MODELS.glob("ggml-vocab-*.gguf")}
    assert with_vectors == set(RUNS) | {"bert-bge", "gemma-4"}
    assert files == with_vectors | set(NO_VECTORS)


@pytest.mark.parametrize("name", RUNS)
def test_llama_cpp_vectors(name):
    """Every case of the vocabulary's vectors, tokenized as test-tokenizer-0 does (no BOS, special
    tokens as text); the ids decode back to the input (NFC for qwen2, whose inputs are NFC)."""
    have_models()
    md = metadata(name)
    assert (md["tokenizer.ggml.model"], md.get("tokenizer.ggml.pre")) == RUNS[name]
    tok = tokenizer(name)
    cases = read_cases(name)
    assert len(cases) >= 46
    bad = [(text, want, got) for text, want in cases if (got := tok.encode(text, add_bos=False)) != want]
    assert not bad, f"{name}: {len(bad)} of {len(cases)} cases differ: " + "; ".join(
        f"{text[:40]!r} want {want[:12]} got {got[:12]}" for text, want, got in bad[:5])
    undecoded = [text for text, want in cases if tok.decode(want) != text]
    assert not undecoded, undecoded[:3]


@pytest.mark.parametrize("name", sorted(set(REFUSED) - set(NO_VECTORS)))
def test_other_vocabulary_types_are_refused_by_name(name):
    have_models()
    with pytest.raises(TokenizerError, match=REFUSED[name]):
        Tokenizer.from_metadata(metadata(name))


@pytest.mark.parametrize("name", NO_VECTORS)
def test_vocabularies_without_vectors_load_or_are_refused(name):
    """aquila and gpt-neox (gpt2, no pre key: llama-bpe as bitweb reads a missing key) and baichuan
    (SPM) load and round-trip text; nomic-bert-moe (t5, UGM) is refused by name."""
    have_models()
    md = metadata(name)
    if NO_VECTORS[name] is not None:
        with pytest.raises(TokenizerError, match=NO_VECTORS[name]):
            Tokenizer.from_metadata(md)
        return
    tok = Tokenizer.from_metadata(md)
    for text in ["Hello world, 12345!", "нещо на Български 🚀 我想在apple工作", "  two\n\nlines\t"]:
        ids = tok.encode(text, add_bos=False)
        assert ids and tok.decode(ids) == text


# ------------------------------------------------------------- against HF tokenizers

def corpus() -> list[str]:
    data = ROOT / "tests" / "data" / "tokenizer"
    texts = [*json.loads((data / "multilingual.json").read_text(encoding="utf-8")),
             *json.loads((data / "heldout.json").read_text(encoding="utf-8"))]
    return [*texts, "\n".join(texts), *random_texts(texts, seed=41, n=150)]


def random_texts(texts, seed, n, max_len=60) -> list[str]:
    """Strings mixing the corpus' characters with ones the splits tell apart."""
    rng = random.Random(seed)
    pool = sorted(set("".join(texts))) + list("'sStTrReEvVmMlLdD \n\r\t\xa0\u3000\u2028 0123456789½²Ⅻ٣") + \
        list("\u017f$+<=>^`|~…。，、！（）「」\u0301\u0903\u20dd🚀👩\u200d💻") + ["'ll", "'RE", "123456", "  ", "\r\n"]
    return ["".join(rng.choice(pool) for _ in range(rng.randrange(max_len))) for _ in range(n)]


def hf_from_metadata(md: dict, pre_tokenizer: dict, ignore_merges: bool) -> tokenizers.Tokenizer:
    """An HF byte-level BPE with the GGUF's vocabulary and merges and the given pre-tokenizer;
    its non-normal tokens are added tokens (CONTROL / UNKNOWN special)."""
    toks, types = md["tokenizer.ggml.tokens"], md["tokenizer.ggml.token_type"]
    spec = {"version": "1.0", "truncation": None, "padding": None, "normalizer": None,
            "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                              "normalized": False, "special": types[i] in (2, 3)}
                             for i, t in enumerate(toks) if types[i] in (2, 3, 4)],
            "pre_tokenizer": pre_tokenizer, "post_processor": None, "decoder": None,
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": ignore_merges, "vocab": {t: i for i, t in enumerate(toks)},
                      "merges": [m.split(" ", 1) for m in md["tokenizer.ggml.merges"]]}}
    h = tokenizers.Tokenizer.from_str(json.dumps(spec))
    h.encode_special_tokens = True       # special-token text stays text (parse_special=False)
    return h


BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
BYTES_ONLY = {**BYTE_LEVEL, "use_regex": False}


def hf_split(regex: str) -> dict:
    return {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False}


def hf_seq(*steps) -> dict:
    return {"type": "Sequence", "pretokenizers": list(steps)}


DIGITS_1 = {"type": "Digits", "individual_digits": True}
DIGITS_N = {"type": "Digits", "individual_digits": False}
# each model's pre-tokenizer as its HF tokenizer.json writes it (HF's own Digits / ByteLevel /
# Punctuation, not bitweb's regexes, where the model uses them)
HF_PIPELINES = {
    "gpt-2": BYTE_LEVEL, "mpt": BYTE_LEVEL,
    "starcoder": hf_seq(DIGITS_1, BYTE_LEVEL), "refact": hf_seq(DIGITS_1, BYTE_LEVEL),
    "command-r": hf_seq(DIGITS_1, BYTE_LEVEL),
    "falcon": hf_seq({"type": "Punctuation", "behavior": "Contiguous"}, BYTE_LEVEL, DIGITS_N,
                     hf_split("[0-9][0-9][0-9]")),
    "deepseek-llm": hf_seq(hf_split("[\r\n]"), hf_split(r"\s?[" + _DEEPSEEK_LETTERS + "]+"),
                           hf_split("\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+"),
                           hf_split(r"\s+$"), hf_split(_DEEPSEEK_CJK), DIGITS_N, BYTES_ONLY),
    "deepseek-coder": hf_seq(hf_split("[\r\n]"), hf_split(r"\s?\p{L}+"), hf_split(r"\s?\p{P}+"),
                             hf_split(_DEEPSEEK_CJK), DIGITS_1, BYTES_ONLY),
    "qwen35": hf_seq(hf_split(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
                              r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"), BYTES_ONLY),
}


def check_against_hf(tok: Tokenizer, h: tokenizers.Tokenizer, texts) -> int:
    bad = [t for t in texts if tok.encode(t, add_bos=False) != h.encode(t, add_special_tokens=False).ids]
    assert not bad, f"{len(bad)} of {len(texts)} texts differ from HF, e.g. {bad[:3]!r}"
    return len(texts)


@pytest.mark.parametrize("name", HF_PIPELINES)
def test_vocabulary_equals_hf_pipeline(name):
    have_models()
    tok = tokenizer(name)
    h = hf_from_metadata(metadata(name), HF_PIPELINES[name], tok._pre.ignore_merges)
    assert check_against_hf(tok, h, corpus()) > 150


def test_smollm2_equals_hf():
    """SmolLM2-135M-Instruct (a real trained model; its GGUF weights are Q4_1): pre-tokenizer
    `smollm` (llama.cpp runs it as starcoder's split: digits one at a time, then GPT-2's regex),
    against HF's Digits + ByteLevel on the file's own vocabulary; `bitweb tokenize` reads it."""
    need(SMOLLM2.is_file(), f"{SMOLLM2} is missing (run tools/setup.sh --test)")
    with open_gguf(SMOLLM2, tensors=False) as gf:      # the metadata only (the model: tests/test_smollm2.py)
        md = gf.metadata
        assert (gf.tensors, gf.data_offset) == ({}, None)
    assert (md["tokenizer.ggml.model"], md["tokenizer.ggml.pre"], len(md["tokenizer.ggml.tokens"])) == \
        ("gpt2", "smollm", 49152)
    tok = Tokenizer.from_metadata(md)
    assert (tok.add_bos, tok.tokens[tok.eos_id], tok.stop_ids) == (False, "<|im_end|>", {2})
    check_against_hf(tok, hf_from_metadata(md, hf_seq(DIGITS_1, BYTE_LEVEL), False), corpus())
    assert [tok.tokens[i] for i in tok.encode("Hi 2024!")] == ["Hi", "Ġ", "2", "0", "2", "4", "!"]


def test_tokenize_cli_on_the_vocab_files(capsys):
    """`bitweb tokenize` on the vocabulary files and the SmolLM2 model: the ids encode() gives
    (file's add_bos, special tokens parsed), and the refusal's message for the others."""
    from bitweb.commands import main
    have_models()
    text = "Hello, y'all! 1314151 <|endoftext|>"
    for path in [*(MODELS / f"ggml-vocab-{n}.gguf" for n in ("gpt-2", "starcoder", "deepseek-coder", "llama-spm")),
                 *([SMOLLM2] if SMOLLM2.is_file() else [])]:
        with open_gguf(path, tensors=False) as gf:
            want = Tokenizer.from_metadata(gf.metadata).encode(text, parse_special=True)
        assert main(["tokenize", str(path), "--text", text]) == 0
        assert capsys.readouterr().out.split() == [str(i) for i in want], path.name
    assert main(["tokenize", str(MODELS / "ggml-vocab-bert-bge.gguf"), "--text", text]) == 1
    assert "tokenizer.ggml.model 'bert' (WPM" in capsys.readouterr().err


# ------------------------------------------------------------- the splits and classes

# each split's regexes as HF runs them: llama.cpp's list with HF's (?i:...) contractions
_CONTRACTIONS = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"


def hf_steps(split: str):
    """The split's regexes as HF Split steps (HF's (?i:...) form of the contractions)."""
    return tokenizers.pre_tokenizers.Sequence([
        tokenizers.pre_tokenizers.Split(tokenizers.Regex(
            r.removeprefix("raw:").replace(_CONTRACTIONS, "(?i:'s|'t|'re|'ve|'m|'ll|'d)")), behavior="isolated")
        for r in SPLITS[split]])


@pytest.mark.parametrize("split", SPLITS)
def test_split_equals_hf(split):
    """Every split (the collapsed-text rewrite, the classes, the regexes in sequence) against HF's
    Split steps on the same regexes, on the corpus and random text."""
    pre = next(p for p in PRE_TOKENIZERS.values() if p.split_name == split)
    h = hf_steps(split)
    texts = corpus()
    for text in texts:
        assert pre.split(text) == [p for p, _ in h.pre_tokenize_str(text)], repr(text[:60])
    assert sum(len(pre.split(t)) for t in texts) > 2000


def test_unicode_classes_equal_hf():
    """char_class (this Python's unicodedata + the Unicode 16.0 table) against Oniguruma's \\p{..}
    and \\s in HF tokenizers, on every code point of planes 0-3 (all of Unicode 16.0's assigned
    ones but plane 14's tags and variation selectors, also taken) but the surrogates, and every
    97th of the rest (unassigned or private use): a class's members are what HF's
    Split(regex, "removed") removes."""
    cps = [cp for cp in range(0x110000) if not 0xD800 <= cp < 0xE000 and
           (cp < 0x40000 or 0xE0000 <= cp < 0xE0200 or cp % 97 == 0)]
    text = "".join(map(chr, cps))
    classes = "".join(char_class(c) for c in text)
    for cls, regex in [("L", r"\p{L}"), ("N", r"\p{N}"), ("M", r"\p{M}"), ("P", r"\p{P}"), ("S", r"\p{S}"),
                       ("s", r"\s")]:
        hf = [span for _, span in tokenizers.pre_tokenizers.Split(tokenizers.Regex(regex), behavior="removed")
              .pre_tokenize_str(text)]
        ours = [m.span() for m in re.finditer(f"[^{cls}]+", classes)]
        assert ours == hf, cls
    assert len(set(classes)) == 7


def test_pre_tokenizer_table():
    """The names llama.cpp maps onto each split, with its flags (llama-vocab.cpp, llama_vocab::impl::load)."""
    t = PRE_TOKENIZERS
    assert {n for n, p in t.items() if p.split_name == "starcoder"} >= {"starcoder", "refact", "command-r", "smollm"}
    assert all(t[n].ignore_merges and t[n].add_bos for n in ("llama-bpe", "llama3", "falcon3", "pixtral"))
    assert not any(p.ignore_merges or p.add_bos for n, p in t.items() if p.split_name != "llama3")
    assert {n for n, p in t.items() if p.nfc} == {"qwen2", "deepseek-r1-qwen"}
    for name, p in t.items():
        assert p.split(" Hello 123 world!\n") and "".join(p.split("a b")) == "a b", name


def test_the_vectors_exercise_every_class():
    """The vectors' texts hold letters, digits, marks (qwen35's decomposed "e\u0301"), punctuation,
    symbols (emoji) and whitespace runs: every class the splits tell apart."""
    have_models()
    text = "".join(t for t, _ in read_cases("qwen35"))
    assert {char_class(c) for c in text} == {"L", "N", "M", "P", "S", "s", "C"}
