"""`bitweb eval MODEL.gguf [--backend native|numpy] [--json] [--limit N]`: held-out exact-match accuracy
per task (bitweb.authoring.evaluate), and the share of identical greedy tokens against PyTorch when
torch and the repository's training/ code are there."""
from __future__ import annotations

import json

from bitweb.authoring.evaluate import agreement, native_report, numpy_report, table, torch_report
from bitweb.gguf import open_gguf


def main(args) -> int:
    gf = open_gguf(args.model)
    if args.backend == "numpy":
        eng = numpy_report(gf, args.activations, args.limit, kv_cache=args.kv_cache)
    else:
        eng = native_report(args.model, gf, args.activations, args.limit, kv_cache=args.kv_cache)
    ref = torch_report(args.model, gf, args.limit)
    out = {"model": args.model, "backend": args.backend, "activations": args.activations,
           args.backend: eng}
    if ref is not None:
        out["torch"] = ref
        out["same_tokens"] = agreement(eng, ref)
    if args.json:
        print(json.dumps({k: ({kk: vv for kk, vv in v.items() if kk != "answers"} if isinstance(v, dict) else v)
                          for k, v in out.items()}, indent=1))
        return 0
    print(table(eng, f"{args.model}: {args.backend} backend, {args.activations} activations"))
    if ref is None:
        print("PyTorch figures: not available (needs torch and the repository's training/ code)")
        return 0
    print(table(ref, "PyTorch W1.58A8 forward of the same weights"))
    s = out["same_tokens"]
    print(f"identical greedy tokens {args.backend} vs PyTorch: {s['same']}/{s['n']} ({100 * s['fraction']:.1f}%)")
    for d in s["differ"][:10]:
        print(f"  differs: [{d['task']}] {d['question']!r}: {args.backend} {d['a']!r} / torch {d['b']!r}")
    return 0
