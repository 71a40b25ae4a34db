"""`bitweb bench kernels|decode|load|tokenizer|grammar|stop [MODEL] [--json]`: the benchmarks of
bitweb.bench (grammar: bitweb.commands.bench_grammar; stop: bitweb.commands.bench_stop)."""
from __future__ import annotations

import asyncio
import json

from bitweb.bench import (HEADER, QUICK_SHAPES, SHAPES, BenchError, bench_decode, bench_kernels, bench_load,
                          bench_tokenizer, describe_decode, parse_shapes, timing)


def main(args) -> int:
    if args.what == "grammar":
        from bitweb.commands.bench_grammar import main as grammar
        return grammar(args)
    if args.what == "stop":
        from bitweb.commands.bench_stop import main as stop
        return stop(args)
    if args.what == "tokenizer":
        from bitweb.authoring.vocab import llama3_vocab
        r = bench_tokenizer(llama3_vocab())
        print(json.dumps(r) if args.json else "\n".join(f"{k}: {v}" for k, v in r.items()))
        return 0
    if args.what in ("decode", "load") and not args.model:
        raise BenchError(f"bench {args.what} needs a MODEL.gguf")
    return asyncio.run(_main(args))


async def _main(args) -> int:
    from bitweb import gpu
    dev = await gpu.request_device(args.backend)
    log = None if args.json else (lambda m: print(m, flush=True))
    lm_head = getattr(args, "lm_head", None)
    if args.what == "kernels":
        shapes = parse_shapes(args.shapes) if args.shapes else QUICK_SHAPES if args.quick else SHAPES
        if log:
            log(f"# {dev.describe()}\n# timing: {timing(dev)}\n{HEADER}")
        r = await bench_kernels(dev, shapes, quick=args.quick, repeats=args.repeats, log=log)
        if args.json:
            print(json.dumps(r))
    elif args.what == "decode":
        from bitweb.gguf import FileSource, open_gguf
        gf = open_gguf(args.model)
        with FileSource(args.model) as src:
            r = await bench_decode(dev, gf, src, tokens=args.tokens, prompt_tokens=args.prompt_tokens or 32,
                                   activations=args.activations, lm_head=lm_head, repeats=args.repeats,
                                   overlap=not getattr(args, "no_overlap", False), kv_cache=args.kv_cache)
        print(json.dumps(r) if args.json else describe_decode(r))
    else:
        r = await bench_load(dev, args.model, activations=args.activations, lm_head=lm_head, kv_cache=args.kv_cache)
        print(json.dumps(r) if args.json else "\n".join(f"{k}: {v}" for k, v in r.items()))
    return 0
