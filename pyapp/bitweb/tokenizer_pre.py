"""Pre-tokenizers of byte-level BPE (`gpt2`) vocabularies, pure Python + stdlib (runs in Pyodide).

A pre-tokenizer cuts text into pieces before BPE; `tokenizer.ggml.pre` names it. Each one here is
llama.cpp's (src/llama-vocab.cpp, llm_tokenizer_bpe): a list of regexes applied in order, each
one cutting every piece the previous ones left into its matches and the text between them (HF
`tokenizers`' Split(behavior="isolated") steps do the same). The regexes are llama.cpp's, as
written there, except the contractions: HF's `(?i:'s|...)` folds U+017F (long s) to "s", so the
splits that come from a `(?i:...)` regex (llama3, qwen2, qwen35) take "'ſ" as a contraction too.
`PRE_TOKENIZERS` maps each name llama.cpp knows for one of these splits to its behaviour (the
split, `ignore_merges`, the add_bos_token default, NFC first). A missing key means `llama-bpe` (the
published 2B4T file has none); any other name, `default` included, is a TokenizerError naming it.
NFC first only where noted (HF's Qwen2Tokenizer; llama.cpp skips it; Qwen3.5's vectors show none).
The splits, in short (the exact regexes: SPLITS):

    llama3          (?i) contractions; letters with one leading non-letter; digits in threes;
                    punctuation runs with trailing newlines; newlines; spaces.
                    llama-bpe llama3 llama-v3 falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano
                    (ignore_merges, add_bos true); dbrx smaug-bpe
    qwen2           llama3's, digits one at a time. qwen2 deepseek-r1-qwen (NFC); stablelm2 hunyuan
                    megrez solar-open grok-2 kormo f2llmv2
    qwen35          qwen2's with marks (\\p{M}) joining letters. qwen35
    gpt2            GPT-2's: contractions; ` ?` letter / digit / other runs; spaces. gpt-2 phi-2 mpt
                    olmo jais trillion granite-docling exaone4 gigachat a.x-4.0 mellum jina-es jina-de
    starcoder       each digit alone, then gpt2. starcoder refact command-r smollm codeshell exaone
                    minerva-7b mellum2
    falcon          punctuation runs, then gpt2, then ASCII digits in threes. falcon
    deepseek-llm    newlines; DeepSeek's cased-letter runs; ASCII / CJK punctuation runs; trailing
                    spaces; CJK runs; digit runs. deepseek-llm
    deepseek-coder  newlines; letter runs; punctuation runs; CJK runs; each digit alone. deepseek-coder
    deepseek-v3     digits in threes; CJK / kana runs; ASCII punctuation + letters, letters and
                    marks, punctuation and symbols, newlines, spaces. deepseek-v3 hunyuan-dense
                    joyai-llm hy_v4
    bloom           runs up to a space or one of .,!?…。，、।۔،. bloom poro-chat gpt3-finnish;
                    viking (then each digit alone)

Python's `re` has no \\p{L}, so the text is first "collapsed" as llama.cpp collapses it: ASCII
characters stay themselves and every other character becomes one code for its class (letter,
number, mark, punctuation, symbol, whitespace, other); a regex over \\p{..} and \\s is rewritten
over that alphabet (`_compile`) and runs on the collapsed text, whose match spans cut the
original. Regexes with literal non-ASCII ranges (DeepSeek's, BLOOM's) run on the text itself
with \\s spelled out. Class meanings follow Oniguruma (HF `tokenizers`): \\p{L} = categories L*,
\\p{N} = N*, \\p{M} = M*, \\p{P} = P*, \\p{S} = S*, \\s = White_Space (U+0009..U+000D, U+0020,
U+0085 and categories Zs / Zl / Zp); everything else (C*) is "other".

Unicode version: 16.0, as HF's tables and Pyodide's Python 3.14. An older Python's database
(CPython 3.11 has 14.0) calls the characters added since unassigned (Cn); `_U16` lists their
classes (taken from Python 3.14's unicodedata), so both runtimes give every code point the
same class. No other category changed between 14.0 and 16.0 at the level of these classes
(U+1171E went from Mn to Mc: a mark either way).
"""
from __future__ import annotations

import bisect
import re
import unicodedata

# Code points that Unicode 15.0-16.0 assigned (a 14.0 database says Cn), by class.
_U16 = {
    "L": ((0x1C89, 0x1C8A), (0xA7CB, 0xA7CD), (0xA7DA, 0xA7DC), (0x105C0, 0x105F3), (0x10D4A, 0x10D65),
          (0x10D6F, 0x10D85), (0x10EC2, 0x10EC4), (0x1123F, 0x11240), (0x11380, 0x11389), (0x1138B, 0x1138B),
          (0x1138E, 0x1138E), (0x11390, 0x113B5), (0x113B7, 0x113B7), (0x113D1, 0x113D1), (0x113D3, 0x113D3),
          (0x11BC0, 0x11BE0), (0x11F02, 0x11F02), (0x11F04, 0x11F10), (0x11F12, 0x11F33), (0x1342F, 0x1342F),
          (0x13441, 0x13446), (0x13460, 0x143FA), (0x16100, 0x1611D), (0x16D40, 0x16D6C), (0x18CFF, 0x18CFF),
          (0x1B132, 0x1B132), (0x1B155, 0x1B155), (0x1DF25, 0x1DF2A), (0x1E030, 0x1E06D), (0x1E4D0, 0x1E4EB),
          (0x1E5D0, 0x1E5ED), (0x1E5F0, 0x1E5F0), (0x2B739, 0x2B739), (0x2EBF0, 0x2EE5D), (0x31350, 0x323AF)),
    "N": ((0x10D40, 0x10D49), (0x116D0, 0x116E3), (0x11BF0, 0x11BF9), (0x11F50, 0x11F59), (0x16130, 0x16139),
          (0x16D70, 0x16D79), (0x1CCF0, 0x1CCF9), (0x1D2C0, 0x1D2D3), (0x1E4F0, 0x1E4F9), (0x1E5F1, 0x1E5FA)),
    "M": ((0x897, 0x897), (0xCF3, 0xCF3), (0xECE, 0xECE), (0x10D69, 0x10D6D), (0x10EFC, 0x10EFF),
          (0x11241, 0x11241), (0x113B8, 0x113C0), (0x113C2, 0x113C2), (0x113C5, 0x113C5), (0x113C7, 0x113CA),
          (0x113CC, 0x113D0), (0x113D2, 0x113D2), (0x113E1, 0x113E2), (0x11F00, 0x11F01), (0x11F03, 0x11F03),
          (0x11F34, 0x11F3A), (0x11F3E, 0x11F42), (0x11F5A, 0x11F5A), (0x13440, 0x13440), (0x13447, 0x13455),
          (0x1611E, 0x1612F), (0x1E08F, 0x1E08F), (0x1E4EC, 0x1E4EF), (0x1E5EE, 0x1E5EF)),
    "P": ((0x1B4E, 0x1B4F), (0x1B7F, 0x1B7F), (0x10D6E, 0x10D6E), (0x113D4, 0x113D5), (0x113D7, 0x113D8),
          (0x11B00, 0x11B09), (0x11BE1, 0x11BE1), (0x11F43, 0x11F4F), (0x16D6D, 0x16D6F), (0x1E5FF, 0x1E5FF)),
    "S": ((0x2427, 0x2429), (0x2FFC, 0x2FFF), (0x31E4, 0x31E5), (0x31EF, 0x31EF), (0x10D8E, 0x10D8F),
          (0x1CC00, 0x1CCEF), (0x1CD00, 0x1CEB3), (0x1F6DC, 0x1F6DC), (0x1F774, 0x1F776), (0x1F77B, 0x1F77F),
          (0x1F7D9, 0x1F7D9), (0x1F8B2, 0x1F8BB), (0x1F8C0, 0x1F8C1), (0x1FA75, 0x1FA77), (0x1FA87, 0x1FA89),
          (0x1FA8F, 0x1FA8F), (0x1FAAD, 0x1FAAF), (0x1FABB, 0x1FABF), (0x1FAC6, 0x1FAC6), (0x1FACE, 0x1FACF),
          (0x1FADA, 0x1FADC), (0x1FADF, 0x1FADF), (0x1FAE8, 0x1FAE9), (0x1FAF7, 0x1FAF8), (0x1FBCB, 0x1FBEF)),
}
_U16_RANGES = sorted((a, b, k) for k, rs in _U16.items() for a, b in rs)
_U16_STARTS = [a for a, _, _ in _U16_RANGES]


def char_class(c: str) -> str:
    """The class of one character: L, N, M, P, S, "s" (whitespace) or C (other), Unicode 16.0."""
    cp = ord(c)
    if 0x09 <= cp <= 0x0D or cp == 0x85:
        return "s"
    cat = unicodedata.category(c)
    if cat == "Cn":
        k = bisect.bisect_right(_U16_STARTS, cp) - 1
        if k >= 0 and cp <= _U16_RANGES[k][1]:
            return _U16_RANGES[k][2]
        return "C"
    if cat[0] == "Z":
        return "s"
    return cat[0]


# ------------------------------------------------------------------ collapsed text

# Non-ASCII characters collapse to one code per class (C1 code points: each stands for a class
# only; a real U+0080..U+0086 in the text collapses like any other non-ASCII character).
_CODE = {"L": "\x80", "N": "\x81", "M": "\x82", "P": "\x83", "S": "\x84", "s": "\x85", "C": "\x86"}
# What a class means inside a rewritten regex's [...]: its ASCII members and its code.
_MEMBERS = {
    "L": "A-Za-z\x80", "N": "0-9\x81", "M": "\x82",
    "P": "!-#%-*,-/:;?@\\[-\\]_{}\x83", "S": "$+<->^`|~\x84",
    "s": "\t-\r \x85",
}
# \s where a regex runs on the text itself: White_Space
_WHITE_SPACE = "\t-\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"


class _Collapse(dict):
    """code point -> its collapsed character; filled lazily, ASCII precomputed. fold_long_s:
    U+017F collapses to "s" (HF's case-insensitive contractions fold it to s; it is a letter)."""

    def __init__(self, fold_long_s: bool):
        super().__init__((cp, chr(cp)) for cp in range(128))
        if fold_long_s:
            self[0x17F] = "s"

    def __missing__(self, cp: int) -> str:
        code = _CODE[char_class(chr(cp))]
        if len(self) < 65536:            # bounded: hostile text cannot grow it without end
            self[cp] = code
        return code


_COLLAPSE = _Collapse(fold_long_s=False)
_COLLAPSE_FOLD = _Collapse(fold_long_s=True)


def _compile(pattern: str, raw: bool = False) -> re.Pattern:
    """A llama.cpp / HF pre-tokenizer regex rewritten for Python's `re`: over the collapsed text
    (\\p{X} -> its members, \\s / \\S -> whitespace / not), or with raw=True over the text itself
    (\\s -> White_Space; no \\p{X}). `$` (end of the piece in llama.cpp's std::regex) -> \\Z."""
    out, inside, i = [], False, 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            nxt = pattern[i + 1]
            if nxt == "p":
                end = pattern.index("}", i)
                if raw:
                    raise ValueError(f"{pattern!r}: \\p{{..}} in a regex over the raw text")
                members = _MEMBERS[pattern[i + 3:end]]
                out.append(members if inside else f"[{members}]")
                i = end + 1
                continue
            if nxt in "sS":
                members = _WHITE_SPACE if raw else _MEMBERS["s"]
                if inside and nxt == "S":
                    raise ValueError(f"{pattern!r}: \\S inside [...]")
                out.append(members if inside else f"[{'^' if nxt == 'S' else ''}{members}]")
                i += 2
                continue
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if not raw and ord(ch) > 127:
            raise ValueError(f"{pattern!r}: a non-ASCII character in a regex over the collapsed text")
        if ch == "[" and not inside:
            inside = True
        elif ch == "]" and inside:
            inside = False
        elif ch == "$" and not inside:
            ch = r"\Z"
        out.append(ch)
        i += 1
    return re.compile("".join(out))


# ------------------------------------------------------------------ the splits

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"   # HF: (?i:'s|'t|...)
_BLOOM = " ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+"
_DEEPSEEK_CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
# DeepSeek LLM's letters: the cased letters of its tokenizer.json's regex, code point ranges
_DEEPSEEK_LETTERS = (
    "A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373"
    "\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481"
    "\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b"
    "\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b"
    "\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb"
    "\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128"
    "\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4"
    "\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf"
    "\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3"
    "\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943")

# split name -> its regexes in order ("raw:" = over the text itself, not the collapsed text)
SPLITS = {
    "llama3": [_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
               r"|\s+(?!\S)|\s+"],
    "qwen2": [_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "qwen35": [_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "gpt2": [_GPT2],
    "starcoder": [r"\p{N}", _GPT2],
    "falcon": [r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, "[0-9][0-9][0-9]"],
    "deepseek-llm": ["raw:[\r\n]", "raw:\\s?[" + _DEEPSEEK_LETTERS + "]+",
                     "raw:\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
                     "raw:\\s+$", "raw:" + _DEEPSEEK_CJK, r"\p{N}+"],
    "deepseek-coder": ["raw:[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", "raw:" + _DEEPSEEK_CJK, r"\p{N}"],
    "deepseek-v3": [r"\p{N}{1,3}", "raw:[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
                    r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
                    r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "bloom": ["raw:" + _BLOOM],
    "viking": ["raw:" + _BLOOM, r"\p{N}"],
}
_FOLDS = {"llama3", "qwen2", "qwen35"}      # splits from a (?i:...) regex: U+017F counts as s


class PreTokenizer:
    """One `tokenizer.ggml.pre` behaviour: `split` (a SPLITS name), `ignore_merges` (a piece that
    is a token is that token), `add_bos` (the add_bos_token default), `nfc` (NFC first)."""

    def __init__(self, name: str, split: str, *, ignore_merges=False, add_bos=False, nfc=False):
        self.name, self.split_name = name, split
        self.ignore_merges, self.add_bos, self.nfc = ignore_merges, add_bos, nfc
        self._collapse = _COLLAPSE_FOLD if split in _FOLDS else _COLLAPSE
        self._steps = None                   # compiled on first use

    @property
    def steps(self) -> list:
        """[(compiled regex, runs on the raw text), ...] in order."""
        if self._steps is None:
            self._steps = [(_compiled(p), p.startswith("raw:")) for p in SPLITS[self.split_name]]
        return self._steps

    def split(self, text: str) -> list[str]:
        """The pieces of `text` (no NFC here), in order; together they are exactly `text`."""
        codes = text.translate(self._collapse)
        steps = self.steps
        if len(steps) == 1 and not steps[0][1]:     # one regex that covers the text (llama3, qwen2, gpt2 ...)
            pieces = [text[m.start():m.end()] for m in steps[0][0].finditer(codes)]
            if sum(map(len, pieces)) == len(text):
                return pieces
        spans = [(0, len(text))]
        for regex, raw in steps:
            s, out = (text if raw else codes), []
            for a, b in spans:
                pos = a
                for m in regex.finditer(s, a, b):
                    i, j = m.span()
                    if i == j:
                        continue
                    if i > pos:
                        out.append((pos, i))
                    out.append((i, j))
                    pos = j
                if pos < b:
                    out.append((pos, b))
            spans = out
        return [text[a:b] for a, b in spans]


_COMPILED = {}


def _compiled(p: str) -> re.Pattern:
    if p not in _COMPILED:
        _COMPILED[p] = _compile(p[4:], raw=True) if p.startswith("raw:") else _compile(p)
    return _COMPILED[p]


# (split, ignore_merges, add_bos default, nfc): names, as llama.cpp's llama_vocab::impl::load maps them
_ROWS = [
    (("llama3", True, True, False), "llama-bpe llama3 llama-v3 falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano"),
    (("llama3", False, False, False), "dbrx smaug-bpe"),
    (("qwen2", False, False, True), "qwen2 deepseek-r1-qwen"),
    (("qwen2", False, False, False), "stablelm2 hunyuan megrez solar-open grok-2 kormo f2llmv2"),
    (("qwen35", False, False, False), "qwen35"),        # no NFC: its vectors keep "e\u0301" apart
    (("gpt2", False, False, False), "gpt-2 phi-2 mpt olmo jais trillion granite-docling exaone4 gigachat a.x-4.0 "
                                    "mellum jina-es jina-de"),
    (("starcoder", False, False, False), "starcoder refact command-r smollm codeshell exaone minerva-7b mellum2"),
    (("falcon", False, False, False), "falcon"),
    (("deepseek-llm", False, False, False), "deepseek-llm"),
    (("deepseek-coder", False, False, False), "deepseek-coder"),
    (("deepseek-v3", False, False, False), "deepseek-v3 hunyuan-dense joyai-llm hy_v4"),
    (("bloom", False, False, False), "bloom poro-chat gpt3-finnish"),
    (("viking", False, False, False), "viking"),
]
PRE_TOKENIZERS = {name: PreTokenizer(name, split, ignore_merges=ig, add_bos=bos, nfc=nfc)
                  for (split, ig, bos, nfc), names in _ROWS for name in names.split()}


def split_llama3(text: str) -> list[str]:
    """Pieces of `text` exactly as the Llama 3 pre-tokenizer regex splits it."""
    return PRE_TOKENIZERS["llama-bpe"].split(text)


def split_qwen2(text: str) -> list[str]:
    """Pieces of `text` exactly as the Qwen2 pre-tokenizer regex splits it (no NFC here)."""
    return PRE_TOKENIZERS["qwen2"].split(text)
