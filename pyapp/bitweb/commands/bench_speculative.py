"""`bitweb bench speculative MODEL [--draft FILE.gguf] [--tokens N] [--trials 3] [--json]`: speculative
decoding's benchmark (bitweb.speculative_bench, which the browser's web/dev/bench.html runs too) on
the native GPU engine; --draft: a draft model's runs beside prompt lookup."""
from __future__ import annotations

from bitweb.speculative_bench import TASKS, bench_speculative, describe  # noqa: F401 (describe: commands/bench.py)


async def run(args) -> dict:
    """The CLI's run (commands/bench.py report: the model checked, the result printed)."""
    from bitweb import gpu
    from bitweb.engine import Engine
    from bitweb.gguf import FileSource, open_gguf
    dev = await gpu.request_device(args.backend)
    with FileSource(args.model) as src:
        eng = await Engine.load(dev, open_gguf(args.model), src, activations=args.activations,
                                kv_cache=args.kv_cache, max_context=2048)
    draft = None
    if args.draft:
        with FileSource(args.draft) as src:
            draft = await Engine.load(dev, open_gguf(args.draft), src, activations=args.activations,
                                      kv_cache=args.kv_cache, max_context=eng.n_ctx)
    try:
        tokens = args.tokens if args.tokens != 32 else 128          # 32: bench's decode default
        r = await bench_speculative(eng, draft, tokens=tokens, trials=args.trials)
    finally:
        eng.close()
        if draft is not None:
            draft.close()
    r.update(model=args.model.rsplit("/", 1)[-1], draft=args.draft and args.draft.rsplit("/", 1)[-1],
             device=dev.describe(), activations=args.activations)
    return r
