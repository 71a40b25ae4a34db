"""`bitweb make-model --out FILE [--arch --format --embd-format --output-format --preset --layers --vocab
--seed --scale-tensors]`: a GGUF file with random ternary / binary weights (bitweb.authoring.makemodel)."""
from __future__ import annotations

import os
import sys
import time

from bitweb.authoring.makemodel import load_vocab, spec_from_args, vocab_name, write_model


def main(args) -> int:
    spec = spec_from_args(args)
    out = os.fspath(args.out)
    t0 = time.time()
    voc = load_vocab(vocab_name(args))
    tty = sys.stderr.isatty()

    def progress(i, n, name):
        if tty:
            print(f"\r[{i + 1}/{n}] {name:40s}", end="", file=sys.stderr, flush=True)
    plan = write_model(spec, voc, out, progress)
    if tty:
        print(file=sys.stderr)
    size = os.path.getsize(out)
    print(f"wrote {out}: {spec.arch} {spec.preset} {spec.linear_type.name} (token_embd {spec.embd_fmt.upper()}"
          f"{'' if spec.tied else ', output ' + spec.output_fmt.upper()}), {spec.n_layer} blocks, "
          f"{len(plan)} tensors, {size} bytes in {time.time() - t0:.1f} s")
    return 0
