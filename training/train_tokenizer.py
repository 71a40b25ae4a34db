"""Train the byte-level BPE tokenizer (GGUF model gpt2, Llama 3 pre-tokenizer).

Pre-tokenizer: HF `Split` with the Llama 3 regex (isolated) then `ByteLevel`
(no prefix space, no regex) -- the Llama 3 tokenizer.json pipeline. Merges are
learned with HF tokenizers' BpeTrainer on chat text from bitweb.authoring.tasks, with two
deliberate holes in the training text:
  * every digit is removed, so no merge involves a digit: numbers are one token
    per digit (the model learns arithmetic digit by digit);
  * the task words (and their reversals) are removed, so words to count letters
    in or to reverse split into short pieces learned from the templates' words
    (the model can learn the spelling of a few hundred pieces, not of every word).
Special tokens get the last ids: <|begin_of_text|>, <|end_of_text|>, <|eot_id|>.

    python training/train_tokenizer.py [--vocab 1024] [--out training/tokenizer.json]
"""
from __future__ import annotations

import argparse
import itertools
import os
import re

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from data import SPECIALS, format_chat, tasks

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
HERE = os.path.dirname(os.path.abspath(__file__))


def corpus(n: int, seed: int = 7):
    holes = set(tasks.WORDS) | {w[::-1] for w in tasks.WORDS}
    word_rx = re.compile(r"\b(" + "|".join(sorted(holes, key=len, reverse=True)) + r")\b")
    for ex in itertools.islice(tasks.generate(seed), n):
        # the whole chat, plus the answer alone (at inference it starts a fresh pre-token)
        text = format_chat(ex.messages(), add_generation_prompt=False) + "\n" + ex.answer
        for s in SPECIALS:
            text = text.replace(s, "\n")
        yield word_rx.sub("", re.sub(r"\d", "", text))


def build(vocab: int, n: int = 50000) -> Tokenizer:
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab - len(SPECIALS), min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus(n), trainer)
    tok.add_special_tokens(list(SPECIALS))
    return tok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--out", default=os.path.join(HERE, "tokenizer.json"))
    a = ap.parse_args()
    tok = build(a.vocab)
    tok.save(a.out)
    print(f"vocab {tok.get_vocab_size()} -> {a.out}")


if __name__ == "__main__":
    main()
