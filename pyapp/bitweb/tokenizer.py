"""Tokenizers from GGUF metadata, pure Python + stdlib (runs unchanged in Pyodide).

Two vocabulary kinds, chosen by `tokenizer.ggml.model`, each as llama.cpp runs it
(src/llama-vocab.cpp), whose test vectors (`models/ggml-vocab-*.gguf.inp / .out`, HF
`tokenizers`' output) it passes:

* `gpt2`: byte-level BPE. Text -> pieces by the pre-tokenizer that `tokenizer.ggml.pre` names
  (bitweb.tokenizer_pre: llama-bpe, qwen2, qwen35, gpt-2, starcoder / smollm / command-r,
  falcon, deepseek-llm, deepseek-coder and the other names llama.cpp maps onto those splits;
  a missing key means llama-bpe, as in the published BitNet 2B4T file) -> NFC first where the
  pre-tokenizer says so (Qwen's, as HF's Qwen2Tokenizer; llama.cpp skips it) -> each piece's
  UTF-8 bytes mapped to printable characters (GPT-2's bytes_to_unicode table) -> a piece that
  is itself a token is that token where the pre-tokenizer has `ignore_merges` (Llama 3) ->
  BPE: start from single bytes and repeatedly merge the adjacent pair with the lowest merge
  rank (leftmost on ties) until no pair is in `tokenizer.ggml.merges`. add_bos_token defaults
  to the pre-tokenizer's (true for llama-bpe, false for the others, as llama.cpp).

* `llama`: SentencePiece-style BPE by scores (llama.cpp `llm_tokenizer_spm`):
  spaces become U+2581 "▁", a "▁" is prefixed when `add_space_prefix`
  (default true), the text starts as single characters, and the adjacent
  pair whose concatenation is a normal token with the highest score is merged
  (leftmost on ties) until none is left; a character that is not a token is
  emitted as its UTF-8 bytes via the `<0xXX>` byte tokens.

Other vocabulary types are refused with a TokenizerError that names them (`REFUSED`: bert =
WPM, t5 = UGM, gemma4, rwkv, plamo2 ...), as is an unknown `tokenizer.ggml.pre`.

Special tokens: tokens of type CONTROL (3) and UNKNOWN (2) are matched in the text only with
`parse_special=True`; USER_DEFINED (4) tokens always (as llama.cpp does). Longest match wins
(leftmost first, as HF's added tokens). Decoding maps tokens back to bytes by their type, as
llama.cpp's token_to_piece does (`Tokenizer.token_to_bytes`: CONTROL / UNKNOWN text only when
specials are rendered, UNUSED padding rows never), and decodes UTF-8 (invalid bytes -> U+FFFD);
`StreamDecoder` emits only complete characters. Generated text renders no specials.
Generation stops on `stop_ids`: the file's EOS, EOT and EOM ids (EOT / EOM
found by name when the keys are absent, as llama.cpp does).
"""
from __future__ import annotations

import codecs
import heapq
import itertools
import re
import unicodedata

from bitweb.tokenizer_pre import PRE_TOKENIZERS, split_llama3, split_qwen2  # noqa: F401 (re-exported)

# GGUF tokenizer.ggml.token_type values (llama.cpp llama_token_type)
UNDEFINED, NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 0, 1, 2, 3, 4, 5, 6

SPM_SPACE = "\u2581"          # "▁"
_CACHE_LIMIT = 200_000        # BPE results memoized per piece, cleared when full
_EOT_NAMES = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>")
_EOM_NAMES = ("<|eom_id|>",)


# tokenizer.ggml.model values bitweb does not run -> what they are (llama.cpp's vocabulary types)
REFUSED = {"bert": "WPM: WordPiece, BERT-style embedding models", "t5": "UGM: SentencePiece unigram",
           "gemma4": "Gemma 4's SentencePiece-style BPE over raw UTF-8", "rwkv": "RWKV's greedy byte trie",
           "plamo2": "PLaMo-2's Aho-Corasick vocabulary", "no_vocab": "no vocabulary", "none": "no vocabulary",
           "hybriddna": "BPE with DNA k-mers", "whitespace": "whitespace-split BPE"}


class TokenizerError(ValueError):
    """Bad tokenizer metadata or input; the message names the key, index or value."""


# ---------------------------------------------------------------- byte level

def _bytes_to_unicode() -> list[str]:
    """GPT-2's table: byte b -> a printable character (printable Latin-1 bytes map to
    themselves, the other 68 bytes to U+0100 onwards in byte order)."""
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    out, n = [""] * 256, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + n)
            n += 1
    return out


BYTE_TO_CHAR = _bytes_to_unicode()
_TO_BYTE_LEVEL = {b: c for b, c in enumerate(BYTE_TO_CHAR)}        # latin-1 char -> byte-level char
_FROM_BYTE_LEVEL = {ord(c): b for b, c in enumerate(BYTE_TO_CHAR)}  # byte-level char -> latin-1 char


def to_byte_level(text: str) -> str:
    """UTF-8 bytes of `text`, each shown as its GPT-2 byte-level character."""
    try:
        return text.encode("utf-8").decode("latin-1").translate(_TO_BYTE_LEVEL)
    except UnicodeEncodeError as e:
        raise TokenizerError(f"text is not valid Unicode: {e.reason} at character {e.start}") from None


# ------------------------------------------------------------------ the model

def _as_str(v, what: str) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, (bytes, bytearray)):
        try:
            return bytes(v).decode("utf-8")
        except UnicodeDecodeError as e:
            raise TokenizerError(f"{what} is not valid UTF-8 ({e.reason})") from None
    raise TokenizerError(f"{what} must be a string, got {type(v).__name__}")


def _str_list(values, what: str) -> list:
    if not isinstance(values, (list, tuple)):
        raise TokenizerError(f"{what} must be an array of strings, got {type(values).__name__}")
    if set(map(type, values)) <= {str}:        # the usual case: checked in one C loop
        return values if isinstance(values, list) else list(values)
    return [_as_str(v, f"{what}[{i}]") for i, v in enumerate(values)]


class Tokenizer:
    """encode / decode for one GGUF vocabulary (see the module docstring).

    Attributes: model ("gpt2" | "llama"), pre, tokens, token_types, n_vocab,
    bos_id, eos_id, eot_id, eom_id, pad_id, unk_id (None when absent), add_bos,
    add_space_prefix (llama), chat_template (str or None), stop_ids.
    """

    def __init__(self, *, model: str, tokens: list, token_types=None, merges=None, scores=None,
                 pre=None, bos_id=None, eos_id=None, eot_id=None, eom_id=None, pad_id=None, unk_id=None,
                 add_bos=None, add_space_prefix=None, chat_template=None):
        if model not in ("gpt2", "llama"):
            what = f" ({REFUSED[model]})" if model in REFUSED else ""
            raise TokenizerError(f"tokenizer.ggml.model {model!r}{what} is not supported "
                                 "(supported: gpt2 = byte-level BPE, llama = SentencePiece BPE)")
        if model == "gpt2":
            if pre is not None:
                pre = _as_str(pre, "tokenizer.ggml.pre")
            self._pre = PRE_TOKENIZERS.get("llama-bpe" if pre is None else pre)
            if self._pre is None:
                raise TokenizerError(f"tokenizer.ggml.pre {pre!r} is not supported for gpt2 vocabularies "
                                     f"(supported: {', '.join(PRE_TOKENIZERS)}; a missing key means llama-bpe)")
        if not isinstance(tokens, (list, tuple)) or not tokens:
            raise TokenizerError("tokenizer.ggml.tokens must be a non-empty array of strings")
        n = len(tokens)
        self.model = model
        self.tokens = _str_list(tokens, "tokenizer.ggml.tokens")
        self.n_vocab = n
        if token_types is None:
            token_types = [NORMAL] * n
        if len(token_types) != n:
            raise TokenizerError(f"tokenizer.ggml.token_type has {len(token_types)} entries, "
                                 f"tokenizer.ggml.tokens has {n}")
        self.token_types = list(token_types)
        if not set(self.token_types) <= set(range(7)):
            i, t = next((i, t) for i, t in enumerate(self.token_types) if t not in range(7))
            raise TokenizerError(f"tokenizer.ggml.token_type[{i}] = {t!r} is not a token type 0..6")
        self.token_to_id = dict(zip(self.tokens, range(n)))   # last id wins, as in llama.cpp

        def tok_id(v, key):
            if v is None:
                return None
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < n:
                raise TokenizerError(f"{key} = {v!r} is not a token id (vocabulary has {n} tokens)")
            return v

        self.bos_id = tok_id(bos_id, "tokenizer.ggml.bos_token_id")
        self.eos_id = tok_id(eos_id, "tokenizer.ggml.eos_token_id")
        self.pad_id = tok_id(pad_id, "tokenizer.ggml.padding_token_id")
        self.unk_id = tok_id(unk_id, "tokenizer.ggml.unknown_token_id")
        self.eot_id = tok_id(eot_id, "tokenizer.ggml.eot_token_id")
        if self.eot_id is None:                        # llama.cpp finds it by name
            self.eot_id = next((self.token_to_id[s] for s in _EOT_NAMES if s in self.token_to_id), None)
        self.eom_id = tok_id(eom_id, "tokenizer.ggml.eom_token_id")
        if self.eom_id is None:
            self.eom_id = next((self.token_to_id[s] for s in _EOM_NAMES if s in self.token_to_id), None)
        self.stop_ids = frozenset(i for i in (self.eos_id, self.eot_id, self.eom_id) if i is not None)
        if chat_template is not None:
            chat_template = _as_str(chat_template, "tokenizer.chat_template")
        self.chat_template = chat_template
        self.pre = pre
        self._bytes = [None] * n                       # token id -> bytes, filled lazily
        self._cache = {}

        # the tokens that are not NORMAL (a short list: found in one C-level pass)
        self._not_normal = list(itertools.compress(range(n), map(NORMAL.__ne__, self.token_types)))
        self._patterns = {}

        add_bos_default = True
        if model == "gpt2":
            add_bos_default = self._pre.add_bos
            if merges is None:
                raise TokenizerError("gpt2 vocabulary needs tokenizer.ggml.merges")
            # rank of merge "a b" (a GGUF merge string is the pair joined by one space)
            merges = _str_list(merges, "tokenizer.ggml.merges")
            self._ranks = dict(zip(merges, range(len(merges))))
        else:
            if scores is None:
                raise TokenizerError("llama (SentencePiece) vocabulary needs tokenizer.ggml.scores")
            if len(scores) != n:
                raise TokenizerError(f"tokenizer.ggml.scores has {len(scores)} entries, "
                                     f"tokenizer.ggml.tokens has {n}")
            self.scores = [float(s) for s in scores]
            self.add_space_prefix = True if add_space_prefix is None else bool(add_space_prefix)
            self._byte_ids = [self.token_to_id.get(f"<0x{b:02X}>") for b in range(256)]
        self.add_bos = bool(add_bos_default if add_bos is None else add_bos)

    # special tokens matched in text: CONTROL and UNKNOWN with parse_special, USER_DEFINED always

    def _alternation(self, types: tuple):
        """A regex matching the text of any token of `types`, longest first (None: no such token);
        compiled on first use (a vocabulary can have a thousand of them)."""
        if types not in self._patterns:
            texts = sorted({self.tokens[i] for i in self._not_normal if self.token_types[i] in types} - {""},
                           key=len, reverse=True)
            self._patterns[types] = re.compile("|".join(map(re.escape, texts))) if texts else None
        return self._patterns[types]

    @property
    def control_re(self):
        """What parse_special=True matches besides USER_DEFINED tokens: CONTROL and UNKNOWN (bitweb.chat)."""
        return self._alternation((CONTROL, UNKNOWN))

    def _specials(self, parse_special: bool):
        return self._alternation((CONTROL, UNKNOWN, USER_DEFINED) if parse_special else (USER_DEFINED,))

    # ----------------------------------------------------------- construction

    @classmethod
    def from_metadata(cls, md: dict) -> "Tokenizer":
        """From GGUF metadata given as plain Python values (GGUFFile.metadata)."""
        k = "tokenizer.ggml."
        if k + "model" not in md:
            raise TokenizerError("missing metadata key 'tokenizer.ggml.model'")
        if k + "tokens" not in md:
            raise TokenizerError("missing metadata key 'tokenizer.ggml.tokens'")
        return cls(model=_as_str(md[k + "model"], "tokenizer.ggml.model"), tokens=md[k + "tokens"],
                   token_types=md.get(k + "token_type"), merges=md.get(k + "merges"),
                   scores=md.get(k + "scores"), pre=md.get(k + "pre"),
                   bos_id=md.get(k + "bos_token_id"), eos_id=md.get(k + "eos_token_id"),
                   eot_id=md.get(k + "eot_token_id"), eom_id=md.get(k + "eom_token_id"),
                   pad_id=md.get(k + "padding_token_id"),
                   unk_id=md.get(k + "unknown_token_id"), add_bos=md.get(k + "add_bos_token"),
                   add_space_prefix=md.get(k + "add_space_prefix"),
                   chat_template=md.get("tokenizer.chat_template"))

    # --------------------------------------------------------------- encoding

    def encode(self, text: str, add_bos: bool | None = None, parse_special: bool = False) -> list[int]:
        """Token ids of `text`. add_bos None -> the file's tokenizer.ggml.add_bos_token
        (true when absent). parse_special: special-token text (e.g. "<|eot_id|>") becomes
        its id; otherwise it is tokenized as plain text."""
        if not isinstance(text, str):
            raise TokenizerError(f"text must be a str, got {type(text).__name__}")
        out = []
        if self.add_bos if add_bos is None else add_bos:
            if self.bos_id is None:
                raise TokenizerError("add_bos requested but the vocabulary has no tokenizer.ggml.bos_token_id")
            out.append(self.bos_id)
        pattern = self._specials(parse_special)
        pos, prev_special = 0, True
        if pattern is not None:
            for m in pattern.finditer(text):
                if m.start() > pos:
                    self._encode_text(text[pos:m.start()], prev_special, out)
                out.append(self.token_to_id[m.group()])
                pos, prev_special = m.end(), True
        if pos < len(text):
            self._encode_text(text[pos:], prev_special, out)
        return out

    def split_special(self, text: str, parse_special: bool = True) -> list:
        """`text` cut at the special tokens encode() would find: a list of str (text to
        tokenize) and int (a special token's id), in order."""
        pattern = self._specials(parse_special)
        out, pos = [], 0
        if pattern is not None:
            for m in pattern.finditer(text):
                if m.start() > pos:
                    out.append(text[pos:m.start()])
                out.append(self.token_to_id[m.group()])
                pos = m.end()
        if pos < len(text):
            out.append(text[pos:])
        return out

    def _encode_text(self, text: str, after_special: bool, out: list) -> None:
        if self.model == "gpt2":
            pre = self._pre
            if pre.nfc and not unicodedata.is_normalized("NFC", text):
                text = unicodedata.normalize("NFC", text)
            for piece in pre.split(text):
                out.extend(self._bpe_piece(piece))
        else:
            if self.add_space_prefix and after_special:   # llama.cpp: prefix at start / after a special
                text = " " + text
            out.extend(self._spm(text.replace(" ", SPM_SPACE)))

    def _bpe_piece(self, piece: str):
        ids = self._cache.get(piece)
        if ids is None:
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            ids = self._cache[piece] = self._bpe(to_byte_level(piece))
        return ids

    def _bpe(self, word: str) -> tuple:
        """Byte-level BPE of one pre-token (already in byte-level characters)."""
        vocab = self.token_to_id
        if self._pre.ignore_merges and word in vocab:
            return (vocab[word],)
        ranks = self._ranks
        sym = list(word)
        n = len(sym)
        nxt = list(range(1, n + 1))
        prv = list(range(-1, n - 1))
        heap = []
        for i in range(n - 1):
            r = ranks.get(sym[i] + " " + sym[i + 1])
            if r is not None:
                heap.append((r, i, sym[i], sym[i + 1]))
        heapq.heapify(heap)
        while heap:
            r, i, a, b = heapq.heappop(heap)
            j = nxt[i]
            if j >= n or sym[i] != a or sym[j] != b:   # stale: a side was merged since
                continue
            sym[i] = a + b
            sym[j] = None
            nxt[i] = nxt[j]
            if nxt[j] < n:
                prv[nxt[j]] = i
            p, q = prv[i], nxt[i]
            if p >= 0:
                r2 = ranks.get(sym[p] + " " + sym[i])
                if r2 is not None:
                    heapq.heappush(heap, (r2, p, sym[p], sym[i]))
            if q < n:
                r2 = ranks.get(sym[i] + " " + sym[q])
                if r2 is not None:
                    heapq.heappush(heap, (r2, i, sym[i], sym[q]))
        out = []
        i = 0
        while i < n:
            s = sym[i]
            t = vocab.get(s)
            if t is not None:
                out.append(t)
            else:       # as llama.cpp (and HF, which drops it): its UTF-8 bytes that are tokens as one-byte text
                out.extend(vocab[c] for c in s.encode("utf-8").decode("latin-1") if c < "\x80" and c in vocab)
            i = nxt[i]
        return tuple(out)

    def _spm(self, text: str) -> list[int]:
        """SentencePiece-style merging by token score (text already uses '▁' for spaces)."""
        vocab, types, scores = self.token_to_id, self.token_types, self.scores
        sym = list(text)
        n = len(sym)
        nxt = list(range(1, n + 1))
        prv = list(range(-1, n - 1))
        heap = []

        def push(i, j):
            t = vocab.get(sym[i] + sym[j])
            if t is not None and types[t] == NORMAL:
                heapq.heappush(heap, (-scores[t], i, sym[i], sym[j]))

        for i in range(n - 1):
            push(i, i + 1)
        while heap:
            _, i, a, b = heapq.heappop(heap)
            j = nxt[i]
            if j >= n or sym[i] != a or sym[j] != b:
                continue
            sym[i] = a + b
            sym[j] = None
            nxt[i] = nxt[j]
            if nxt[j] < n:
                prv[nxt[j]] = i
            if prv[i] >= 0:
                push(prv[i], i)
            if nxt[i] < n:
                push(i, nxt[i])
        out = []
        i = 0
        while i < n:
            t = vocab.get(sym[i])
            if t is not None:
                out.append(t)
            else:                                      # byte fallback
                for b in sym[i].encode("utf-8"):
                    bt = self._byte_ids[b]
                    if bt is None:
                        bt = self.unk_id
                    if bt is None:
                        raise TokenizerError(f"character {sym[i]!r} has no token, no <0x{b:02X}> byte "
                                             "token and no unknown token")
                    out.append(bt)
            i = nxt[i]
        return out

    # --------------------------------------------------------------- decoding

    def token_to_bytes(self, token_id: int, skip_special: bool = False) -> bytes:
        """The bytes one token stands for, by its type, as llama.cpp's token_to_piece gives them
        (llama-vocab.cpp; skip_special=True is its special=false, what llama-cli and llama-server
        print by default, and what generated text uses):
          NORMAL         its text: gpt2 byte-level characters -> their bytes; llama '▁' -> space
          BYTE           "<0xXX>" -> that byte
          USER_DEFINED   its text as it is (Qwen3's <think>), whatever skip_special
          CONTROL, UNKNOWN  its text, or b"" when skip_special
          UNUSED, UNDEFINED (0)  b"" always (the [PADi] rows converters add to fill a model's
                         vocabulary; llama.cpp prints nothing for them, even with special=true)."""
        if isinstance(token_id, bool) or not isinstance(token_id, int) or not 0 <= token_id < self.n_vocab:
            raise TokenizerError(f"token id {token_id!r} is out of range (vocabulary has {self.n_vocab} tokens)")
        ty = self.token_types[token_id]
        if skip_special and ty in (CONTROL, UNKNOWN):
            return b""
        b = self._bytes[token_id]
        if b is None:
            text = self.tokens[token_id]
            if ty in (UNUSED, UNDEFINED):
                b = b""
            elif ty in (CONTROL, USER_DEFINED, UNKNOWN):
                b = text.encode("utf-8")
            elif ty == BYTE and len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
                b = bytes((int(text[3:5], 16),))
            elif self.model == "gpt2":
                b = b"".join(bytes((_FROM_BYTE_LEVEL[ord(c)],)) if ord(c) in _FROM_BYTE_LEVEL
                             else c.encode("utf-8") for c in text)
            else:
                b = text.replace(SPM_SPACE, " ").encode("utf-8")
            self._bytes[token_id] = b
        return b

    def decode_bytes(self, ids, skip_special: bool = False) -> bytes:
        parts = [self.token_to_bytes(i, skip_special) for i in ids]
        if self.model == "llama" and self.add_space_prefix:
            # drop the prefix space: the first non-empty piece, if it is text starting with ' '
            k = next((k for k, p in enumerate(parts) if p), None)
            if k is not None and self.token_types[ids[k]] in (NORMAL, BYTE) and parts[k][:1] == b" ":
                parts[k] = parts[k][1:]
        return b"".join(parts)

    def decode(self, ids, skip_special: bool = False) -> str:
        """Text of `ids`; invalid UTF-8 -> U+FFFD. For `llama` vocabularies the space that
        add_space_prefix put before the first word is removed."""
        return self.decode_bytes(list(ids), skip_special).decode("utf-8", "replace")

    def stream(self, skip_special: bool = False, strip_prefix: bool = False) -> "StreamDecoder":
        return StreamDecoder(self, skip_special, strip_prefix)

    def is_stop(self, token_id: int) -> bool:
        """End of generation: EOS, end-of-turn (<|eot_id|>, <|im_end|> ...) or end-of-message."""
        return token_id in self.stop_ids

    def piece(self, token_id: int) -> str:
        """Printable form of one token (for listings): its bytes with specials rendered, or, for
        a token that decodes to nothing (UNUSED, UNDEFINED), its text ("[PAD151669]")."""
        b = self.token_to_bytes(token_id)
        return b.decode("utf-8", "backslashreplace") if b or not self.tokens[token_id] else self.tokens[token_id]


class StreamDecoder:
    """Incremental decode: push(id) returns the text completed by that token. A
    multi-byte character split across tokens is held back until its last byte
    arrives; flush() returns what is left (an incomplete tail becomes U+FFFD).

    A stream continues text, so by default no space is stripped; with
    strip_prefix=True (text that starts here) the output equals decode(ids)
    exactly, including the removal of a llama vocabulary's prefix space."""

    def __init__(self, tokenizer: Tokenizer, skip_special: bool = False, strip_prefix: bool = False):
        self.tokenizer = tokenizer
        self.skip_special = skip_special
        self._strip = strip_prefix and tokenizer.model == "llama" and tokenizer.add_space_prefix
        self._dec = codecs.getincrementaldecoder("utf-8")("replace")

    def push(self, token_id: int) -> str:
        b = self.tokenizer.token_to_bytes(token_id, self.skip_special)
        if self._strip and b:
            self._strip = False
            if self.tokenizer.token_types[token_id] in (NORMAL, BYTE) and b[:1] == b" ":
                b = b[1:]
        return self._dec.decode(b)

    def flush(self) -> str:
        return self._dec.decode(b"", final=True)
