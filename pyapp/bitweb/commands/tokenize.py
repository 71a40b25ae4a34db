"""`bitweb tokenize MODEL.gguf --text TEXT [--json]` / `--decode IDS`."""
from __future__ import annotations

import json

from bitweb.gguf import open_gguf
from bitweb.tokenizer import Tokenizer, TokenizerError

def main(args) -> int:
    """`python -m bitweb tokenize MODEL.gguf --text TEXT [--json]` / `--decode IDS`.
    Text is encoded with the file's add_bos setting and special tokens parsed."""
    with open_gguf(args.model, tensors=False) as gf:      # the metadata is all it needs
        tok = Tokenizer.from_metadata(gf.metadata)
    if args.decode is not None:
        try:
            ids = [int(x) for x in args.decode.replace(",", " ").split()]
        except ValueError:
            raise TokenizerError(f"--decode expects integers separated by commas or spaces, got {args.decode!r}")
        text = tok.decode(ids)
        print(json.dumps({"ids": ids, "text": text}, ensure_ascii=False) if args.json else text)
        return 0
    ids = tok.encode(args.text, parse_special=True)
    if args.json:
        print(json.dumps({"ids": ids, "pieces": [tok.piece(i) for i in ids], "n_tokens": len(ids)},
                         ensure_ascii=False))
    else:
        print(" ".join(map(str, ids)))
    return 0
