"""The capital question on a ggml-type file (SmolLM2 Q4_1) with the prompt prefilled in q8 (the
int8 tile, bitlinear_tiled Q8T) and the reply decoded in f32: does a "q8 prefill, f32 decode" split
keep the f32 reply? An experiment, not an engine mode: it patches the prefill ops in this process.

    .venv/bin/python dev/perf/q8_prefill_answer.py MODEL [--mode split|f32|q8] [--tokens 32]

split: activations f32 (decode), the prefill's linears on q8 rows; f32 / q8: the engine's modes.
Prints the reply and whether it names Paris.
"""
import argparse
import contextlib
import io
import json
import sys

from bitweb import blocks, upload
from bitweb import commands as cli

QUESTION = "What is the capital of France?"


def patch_split():
    init, bufs = blocks.PrefillOps.__init__, upload.prefill_buffers

    def pinit(self, h, M):
        init(self, h, M)
        if h.packed and h.cfg.linear_type.vec_dot:
            self.q8, self.a8 = True, False
            self.normed = {"q": self.B["p.q"], "scale": self.B["p.s"]}

    def pbufs(h, C):
        bufs(h, C)
        if h.packed and h.cfg.linear_type.vec_dot and "p.q" not in h.buf:
            nmax = max(h.cfg.n_embd, h.cfg.q_dim, h.cfg.n_ff)
            h.buf["p.q"] = h.dev.create_buffer(C * nmax, label="prefill q8 rows")
            h.buf["p.s"] = h.dev.create_buffer(C * nmax // 4, label="prefill q8 scales")
    blocks.PrefillOps.__init__, upload.prefill_buffers = pinit, pbufs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--mode", default="split", choices=("split", "f32", "q8"))
    ap.add_argument("--tokens", type=int, default=32)
    a = ap.parse_args()
    if a.mode == "split":
        patch_split()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = cli.main(["generate", a.model, "--backend", "native", "--activations", "q8" if a.mode == "q8" else "f32",
                       "--chat", "--prompt", QUESTION, "--temperature", "0", "--max-tokens", str(a.tokens),
                       "--max-context", "128", "--json"])
    got = json.loads(out.getvalue())
    print(f"{a.mode}: {got['text']!r} ({'names Paris' if 'Paris' in got['text'] else 'no Paris'}; {len(got['ids'])} tokens)")
    return rc


if __name__ == "__main__":
    sys.exit(main())
