"""`bitweb bench floor MODEL [--json]`: where a decode token's wall time goes (bitweb.floor)."""
from __future__ import annotations


async def run(args) -> dict:
    from bitweb import gpu
    from bitweb.floor import bench_floor
    from bitweb.gguf import FileSource, open_gguf
    dev = await gpu.request_device(args.backend)
    with FileSource(args.model) as src:
        return await bench_floor(dev, open_gguf(args.model), src, tokens=args.tokens if args.tokens != 32 else 16,
                                 prompt_tokens=args.prompt_tokens or 16, activations=args.activations,
                                 repeats=args.repeats or 3, kv_cache=args.kv_cache)


def describe(r: dict) -> str:
    from bitweb.floor import describe_floor
    return describe_floor(r)
