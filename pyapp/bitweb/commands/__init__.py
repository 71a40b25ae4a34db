"""Command line: one argparse table; each subcommand runs `bitweb.commands.<name>:main(args)`.

The handler modules are imported lazily so `--help` is instant and a missing
optional dependency only affects its own subcommand.
"""
from __future__ import annotations

import argparse
import importlib
import sys

FORMATS = ["i2_s", "tq2_0", "tq1_0", "q1_0", "f16", "bf16", "f32"]


def _gen_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="GGUF file")
    p.add_argument("--backend", choices=["native", "numpy"], default="native")
    p.add_argument("--activations", choices=["a8", "f32"], default="a8",
                   help="a8: W1.58A8 per-token int8 activations (as trained); f32: float activations")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="bitweb", description="BitNet b1.58 on WebGPU from Python")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def cmd(name, target, help):
        p = sub.add_parser(name, help=help, description=help)
        p.set_defaults(_target=target)
        return p

    p = cmd("inspect", "bitweb.commands.inspect:main", "print a GGUF file's metadata and tensor table")
    p.add_argument("model")
    p.add_argument("--json", action="store_true")

    p = cmd("dequant", "bitweb.commands.dequant:main", "write one tensor as float32 .npy (shape = GGUF dims reversed)")
    p.add_argument("model")
    p.add_argument("tensor")
    p.add_argument("--out", required=True)

    p = cmd("make-model", "bitweb.commands.make_model:main", "write a BitNet GGUF file with random ternary weights")
    p.add_argument("--arch", choices=["bitnet-b1.58", "bitnet"], default="bitnet-b1.58")
    p.add_argument("--format", choices=FORMATS, default="i2_s", help="type of the linear weights")
    p.add_argument("--preset", choices=["tiny", "small", "2b4t"], default="tiny")
    p.add_argument("--layers", type=int, default=None, help="override the preset's block count")
    p.add_argument("--vocab", choices=["llama3", "bytes"], default="bytes")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--scale-tensors", choices=["auto", "on", "off"], default="auto",
                   help="--arch bitnet: write blk.N.<linear>.scale tensors (auto: for tq1_0/tq2_0)")
    p.add_argument("--out", required=True)

    p = cmd("tokenize", "bitweb.commands.tokenize:main", "encode text (or decode ids) with a GGUF file's tokenizer")
    p.add_argument("model")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--text")
    g.add_argument("--decode", metavar="IDS", help="comma or space separated token ids")
    p.add_argument("--json", action="store_true")

    p = cmd("generate", "bitweb.commands.generate:main", "generate text (streams to stdout)")
    _gen_args(p)
    p.add_argument("--prompt", required=True)
    p.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat format")
    p.add_argument("--system", default=None)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--min-p", type=float, default=0.0)
    p.add_argument("--repeat-penalty", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ignore-eos", action="store_true", help="do not stop on EOS / <|eot_id|>")
    p.add_argument("--max-context", type=int, default=None,
                   help="KV cache positions (default: the model's context length)")
    p.add_argument("--stats", action="store_true")
    p.add_argument("--json", action="store_true")
    p.add_argument("--lm-head", choices=["q8_0"], default=None,
                   help="re-quantize the LM head on load (GPU engine; default: as in the file)")

    p = cmd("eval", "bitweb.commands.eval:main", "held-out exact-match accuracy per task")
    _gen_args(p)
    p.add_argument("--json", action="store_true")
    p.add_argument("--limit", type=int, default=None, help="prompts per task (default: all held-out)")

    p = cmd("bench", "bitweb.commands.bench:main", "benchmarks: kernels, decode, load, tokenizer (ratios from one run)")
    p.add_argument("what", choices=["kernels", "decode", "load", "tokenizer"])
    p.add_argument("model", nargs="?")
    p.add_argument("--backend", choices=["native"], default="native")
    p.add_argument("--tokens", type=int, default=32, help="decode: tokens to generate")
    p.add_argument("--prompt-tokens", type=int, default=32, help="decode: prompt length")
    p.add_argument("--activations", choices=["a8", "f32"], default="a8")
    p.add_argument("--lm-head", choices=["q8_0"], default=None,
                   help="decode/load: re-quantize the LM head on load (default: as in the file)")
    p.add_argument("--no-overlap", action="store_true",
                   help="decode: one step at a time (Engine.overlap off), for a before/after")
    p.add_argument("--quick", action="store_true", help="kernels: two small shapes, default variants")
    p.add_argument("--repeats", type=int, default=None, help="timed runs per kernel (default: by time budget)")
    p.add_argument("--json", action="store_true")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    mod, fn = args._target.split(":")
    try:
        handler = getattr(importlib.import_module(mod), fn)
    except (ImportError, AttributeError) as e:
        print(f"bitweb {args.command}: not available: {e}", file=sys.stderr)
        return 2
    try:
        return int(handler(args) or 0)
    except BrokenPipeError:
        return 0
    except Exception as e:  # a clear one-line error for users; BITWEB_DEBUG=1 for the traceback
        import os
        if os.environ.get("BITWEB_DEBUG"):
            raise
        print(f"bitweb {args.command}: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
