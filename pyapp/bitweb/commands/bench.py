"""`bitweb bench kernels|decode|load|tokenizer|grammar|constrained|stop|speculative|floor [MODEL] [--json]`:
the benchmarks of bitweb.bench (grammar, stop, speculative, floor: bitweb.commands.bench_<name>, each a
run(args) and a describe(result) that report() serves; constrained: bitweb.grammar.bench.bench_engine)."""
from __future__ import annotations

import asyncio
import importlib
import inspect
import json

from bitweb.bench import (HEADER, QUICK_SHAPES, SHAPES, BenchError, bench_decode, bench_kernels, bench_load,
                          bench_tokenizer, describe_decode, parse_shapes, timing)


def main(args) -> int:
    if args.what in ("floor", "grammar", "speculative", "stop"):          # each in its own commands/bench_*.py
        mod = importlib.import_module(f"bitweb.commands.bench_{args.what}")
        return report(args, mod.run, mod.describe, needs_model=args.what != "grammar")
    if args.what == "tokenizer":
        from bitweb.authoring.vocab import llama3_vocab
        r = bench_tokenizer(llama3_vocab())
        print(json.dumps(r) if args.json else "\n".join(f"{k}: {v}" for k, v in r.items()))
        return 0
    if args.what in ("decode", "load", "constrained") and not args.model:
        raise BenchError(f"bench {args.what} needs a MODEL.gguf")
    return asyncio.run(_main(args))


def report(args, run, describe, needs_model: bool = True) -> int:
    """A benchmark's CLI: MODEL checked (where it needs one), run(args) (a coroutine: run to its end),
    the result printed as JSON (--json) or as describe(result)."""
    if needs_model and not args.model:
        raise BenchError(f"bench {args.what} needs a MODEL.gguf")
    r = run(args)
    if inspect.iscoroutine(r):
        r = asyncio.run(r)
    print(json.dumps(r) if args.json else describe(r))
    return 0


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
    elif args.what == "constrained":
        from bitweb.engine import Engine
        from bitweb.gguf import FileSource, open_gguf
        from bitweb.grammar.bench import bench_engine, describe_engine
        with FileSource(args.model) as src:
            eng = await Engine.load(dev, open_gguf(args.model), src, activations=args.activations, kv_cache=args.kv_cache)
        try:
            r = await bench_engine(eng, tokens=args.tokens if args.tokens != 32 else 48, trials=args.trials)
        finally:
            eng.close()
        print(json.dumps(r) if args.json else describe_engine(r))
    else:
        r = await bench_load(dev, args.model, activations=args.activations, lm_head=lm_head, kv_cache=args.kv_cache)
        print(json.dumps(r) if args.json else "\n".join(f"{k}: {v}" for k, v in r.items()))
    return 0
