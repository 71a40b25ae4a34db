"""Command line: one argparse table; each subcommand runs `bitweb.commands.<name>:main(args)`.

The handler modules are imported lazily so `--help` is instant and a missing
optional dependency only affects its own subcommand.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from bitweb import formats
from bitweb.options import (ACTIVATIONS, DEFAULT_ACTIVATIONS, DEFAULT_KV_CACHE, KV_CACHES, LM_HEADS,
                            SAMPLER, SPECULATIVE)

FORMATS = [f.name.lower() for f in formats.select("linear")]      # make-model --format: the block linear types
EMBD_FORMATS = [f.name.lower() for f in formats.select("table")]  # make-model --embd-format: token_embd's type


def _gen_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="GGUF file")
    p.add_argument("--backend", choices=["native", "numpy"], default="native")
    p.add_argument("--activations", choices=ACTIVATIONS, default=DEFAULT_ACTIVATIONS,
                   help="a8: W1.58A8 per-token int8 activations (as trained; ggml's types: f32); f32: float "
                        "activations; q8: a8, and llama.cpp's int8 blocks on Q4_0/Q4_1/Q5_0/Q5_1/Q8_0")
    _kv_arg(p)


def _kv_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kv-cache", choices=KV_CACHES, default=DEFAULT_KV_CACHE,
                   help="KV cache values: f16 (default, half the memory; attention still computes in f32) or f32")


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

    from bitweb.authoring.makemodel import ARCHS, PRESETS, VOCABS
    p = cmd("make-model", "bitweb.commands.make_model:main",
            "write a GGUF file with random ternary / binary weights (BitNet, Qwen3 / Bonsai, Llama shapes)")
    p.add_argument("--arch", choices=ARCHS, default=None,
                   help="architecture (default: bitnet-b1.58; qwen3 for the bonsai presets)")
    p.add_argument("--format", choices=FORMATS, default=None,
                   help="type of the linear weights (default: i2_s; q1_0 for the bonsai presets)")
    p.add_argument("--embd-format", choices=EMBD_FORMATS, default=None,
                   help="type of token_embd, the tied LM head (default: f16; q1_0 for the bonsai presets)")
    p.add_argument("--output-format", choices=EMBD_FORMATS, default=None,
                   help="write an untied LM head (output.weight) of this type (default: tied; bonsai-8b: q1_0)")
    p.add_argument("--preset", choices=list(PRESETS), default="tiny")
    p.add_argument("--layers", type=int, default=None, help="override the preset's block count")
    p.add_argument("--vocab", choices=VOCABS, default=None,
                   help="tokenizer (default: bytes; qwen for the bonsai presets)")

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
    p.add_argument("--thinking", choices=["on", "off"], default=None,
                   help="chat templates with a thinking switch (Qwen3): think first or not (implies --chat)")
    p.add_argument("--system", default=None)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=SAMPLER["temperature"].default)
    p.add_argument("--top-k", type=int, default=SAMPLER["top_k"].default)
    p.add_argument("--top-p", type=float, default=SAMPLER["top_p"].default)
    p.add_argument("--min-p", type=float, default=SAMPLER["min_p"].default)
    p.add_argument("--repeat-penalty", type=float, default=SAMPLER["repeat_penalty"].default)
    p.add_argument("--seed", type=int, default=SAMPLER["seed"].default)
    p.add_argument("--ignore-eos", action="store_true", help="do not stop on EOS / <|eot_id|>")
    p.add_argument("--max-context", "--ctx", type=int, default=None,
                   help="KV cache positions (default: the model's context length, or the largest that fits "
                        "the GPU's limits and a 1 GiB KV cache of --kv-cache values; a note on stderr says so)")
    p.add_argument("--stats", action="store_true")
    p.add_argument("--json", action="store_true")
    p.add_argument("--lm-head", choices=LM_HEADS, default=None,
                   help="re-quantize the LM head on load (GPU engine; default: as in the file)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--json-schema", metavar="FILE",
                   help="the output is JSON that validates against this JSON Schema (a .json file)")
    g.add_argument("--grammar", metavar="FILE.gbnf", help="the output follows this GBNF grammar (llama.cpp's syntax)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--speculative", choices=[m for m in SPECULATIVE if m != "draft"], default=None,   # (--draft FILE)
                   help="speculative decoding with prompt-lookup drafts (GPU engine; the same tokens when greedy)")
    g.add_argument("--draft", metavar="FILE.gguf", default=None,
                   help="speculative decoding with this draft model (the same vocabulary; GPU engine)")

    p = cmd("eval", "bitweb.commands.eval:main", "held-out exact-match accuracy per task")
    _gen_args(p)
    p.add_argument("--json", action="store_true")
    p.add_argument("--limit", type=int, default=None, help="prompts per task (default: all held-out)")

    p = cmd("perplexity", "bitweb.commands.perplexity:main",
            "teacher-forced log-likelihood of a text: n_tokens, nll, ppl (chunks of --ctx)")
    _gen_args(p)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--text")
    g.add_argument("--text-file", metavar="FILE", help="UTF-8 text file")
    g.add_argument("--ids", help="token ids, comma or space separated (used as given: no BOS added)")
    p.add_argument("--ctx", type=int, default=None,
                   help="tokens per chunk, each from an empty KV cache (default: all ids, up to the "
                        "default context: the model's, or what fits a 1 GiB KV cache)")
    p.add_argument("--logits-out", metavar="X.npy", default=None,
                   help="write float32 logits (n_ids, n_vocab): row i = the logits after ids[chunk start..i]")
    p.add_argument("--json", action="store_true")

    p = cmd("bench", "bitweb.commands.bench:main",
            "benchmarks: kernels, decode, load, tokenizer, grammar, constrained, stop, speculative, floor (ratios from one run)")
    p.add_argument("what", choices=["kernels", "decode", "load", "tokenizer", "grammar", "constrained", "stop",
                                    "speculative", "floor"],
                   help="constrained: decode with and without a grammar on the GPU engine (MODEL); "
                        "floor: a decode token's wall time against its dispatches' GPU time (MODEL)")
    p.add_argument("model", nargs="?")
    p.add_argument("--backend", choices=["native"], default="native")
    p.add_argument("--tokens", type=int, default=32,
                   help="decode: tokens to generate (grammar: default 200; constrained: default 48)")
    p.add_argument("--trials", type=int, default=3, help="constrained: interleaved trials (medians reported)")
    p.add_argument("--prompt-tokens", type=int, default=None, help="decode: prompt length (default 32; stop: 2000)")
    p.add_argument("--stop-at", type=float, default=2.5,
                   help="stop: when the Stop comes, in chunk times after the prefill starts")
    p.add_argument("--before", action="store_true",
                   help="stop: also run the prefill with every chunk submitted at once (as before the bound)")
    p.add_argument("--activations", choices=ACTIVATIONS, default=DEFAULT_ACTIVATIONS)
    p.add_argument("--lm-head", choices=LM_HEADS, default=None,
                   help="decode/load: re-quantize the LM head on load (default: as in the file)")
    _kv_arg(p)
    p.add_argument("--no-overlap", action="store_true",
                   help="decode: one step at a time (Engine.overlap off), for a before/after")
    p.add_argument("--quick", action="store_true", help="kernels: two small shapes, default variants")
    p.add_argument("--shapes", help="kernels: N_INxROWS[,...] instead of the default shapes (n_in: a multiple of 256)")
    p.add_argument("--repeats", type=int, default=None, help="timed runs per kernel (default: by time budget)")
    p.add_argument("--seed", type=int, default=0, help="grammar: the seed of the random token choices")
    p.add_argument("--draft", metavar="FILE.gguf", default=None,
                   help="speculative: also time this draft model (the same vocabulary) besides prompt lookup")
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
