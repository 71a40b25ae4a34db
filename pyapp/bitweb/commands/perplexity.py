"""`bitweb perplexity MODEL (--text T | --text-file F | --ids "1 2 3") [--backend native|numpy]
[--activations a8|f32] [--ctx N] [--logits-out X.npy] [--json]`: teacher-forced log-likelihood.

The ids (the text encoded with the file's add_bos, or --ids as given) are cut into chunks of
--ctx consecutive ids (the last one may be shorter); each chunk runs from an empty KV cache, and
every id of a chunk but its first is scored against the logits after the ids before it in the
chunk. n_tokens = the ids scored, nll = their mean negative log-probability (natural log, the
log-softmax taken in float64 from the float32 logits), ppl = exp(nll).
--logits-out writes float32 (n_ids, n_vocab): row i = the logits after ids[chunk start .. i].

llama.cpp's `llama-perplexity` cuts the same way but scores only the second half of each chunk
(every scored token then has at least ctx/2 tokens before it), puts BOS first in every chunk and
drops a partial last chunk; the logits rows are the same, so --logits-out compares runtimes.
"""
from __future__ import annotations

import asyncio
import json
import math
import sys

import numpy as np


class PerplexityError(ValueError):
    """Bad input to the perplexity command (names it)."""


def parse_ids(s: str) -> list[int]:
    try:
        return [int(x) for x in s.replace(",", " ").split()]
    except ValueError:
        raise PerplexityError(f"--ids expects integers separated by commas or spaces, got {s!r}") from None


def read_text(path: str) -> str:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise PerplexityError(f"--text-file {path}: {e.strerror or e}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PerplexityError(f"--text-file {path}: not UTF-8 text (byte {e.start})") from None


def chunks(n: int, ctx: int) -> list[tuple[int, int]]:
    """[start, end) of each chunk of ctx ids (the last may be shorter)."""
    return [(a, min(a + ctx, n)) for a in range(0, n, ctx)]


def score(logits: np.ndarray, ids, spans) -> tuple[int, float]:
    """(n scored, sum of -log p) of every id but each chunk's first, from logits (n_ids, V)."""
    total, n = 0.0, 0
    for a, b in spans:
        if b - a < 2:
            continue
        lg = logits[a:b - 1].astype(np.float64)                              # rows that predict a+1 .. b-1
        mx = lg.max(axis=1, keepdims=True)
        lse = mx[:, 0] + np.log(np.exp(lg - mx).sum(axis=1))
        tgt = lg[np.arange(b - 1 - a), np.asarray(ids[a + 1:b])]
        total += float((lse - tgt).sum())
        n += b - 1 - a
    return n, total


def check_ids(ids, n_vocab: int) -> None:
    if len(ids) < 2:
        raise PerplexityError(f"{len(ids)} token(s): at least 2 are needed to score one")
    for i, t in enumerate(ids):
        if not 0 <= t < n_vocab:
            raise PerplexityError(f"token {i} is {t}, outside the vocabulary (0 .. {n_vocab - 1})")


def main(args) -> int:
    from bitweb.generation import fit_context
    from bitweb.gguf import open_gguf
    from bitweb.model import Model
    gf = open_gguf(args.model)
    model = Model.from_gguf(gf)
    cfg = model.cfg
    if args.ids is not None:
        ids = parse_ids(args.ids)
    else:
        text = args.text if args.text is not None else read_text(args.text_file)
        if not text:
            raise PerplexityError("the text is empty")
        ids = model.tokenizer.encode(text)
    check_ids(ids, cfg.n_vocab)
    if args.ctx is None:
        ctx, note = fit_context(cfg, kv=args.kv_cache)
        if note and len(ids) > ctx:
            print(f"bitweb perplexity: {note} (--ctx)", file=sys.stderr)
    else:
        ctx = args.ctx
    if ctx < 2:
        raise PerplexityError(f"--ctx {ctx}: a chunk must hold at least 2 tokens")
    if ctx > cfg.n_ctx:
        raise PerplexityError(f"--ctx {ctx} is past the model's context length {cfg.n_ctx}")
    ctx = min(ctx, len(ids))
    spans = chunks(len(ids), ctx)
    if args.backend == "numpy":
        from bitweb.numpy_model import NumpyModel
        ref = NumpyModel(model, activations=args.activations, max_context=ctx, kv_cache=args.kv_cache)
        logits = np.concatenate([ref.logits(ids[a:b]) for a, b in spans]).astype(np.float32)
    else:
        logits = asyncio.run(_native(args, gf, ids, spans, ctx))
    n, total = score(logits, ids, spans)
    if n == 0:
        raise PerplexityError(f"--ctx {ctx}: no chunk holds 2 tokens, nothing to score")
    nll = total / n
    out = {"n_tokens": n, "nll": nll, "ppl": math.exp(nll), "n_ids": len(ids), "ctx": ctx,
           "n_chunks": len(spans), "backend": args.backend, "activations": args.activations,
           "kv_cache": args.kv_cache}
    if args.logits_out:
        np.save(args.logits_out, logits)
        out["logits_out"] = args.logits_out
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{args.model}: {args.backend} backend, {args.activations} activations; {len(ids)} ids in "
              f"{len(spans)} chunk(s) of at most {ctx}")
        print(f"n_tokens {n}  nll {nll:.6f}  ppl {math.exp(nll):.4f}")
    return 0


async def _native(args, gf, ids, spans, ctx) -> np.ndarray:
    from bitweb import gpu
    from bitweb.engine import Engine
    from bitweb.gguf import FileSource
    dev = await gpu.request_device("native")
    with FileSource(args.model) as src:
        eng = await Engine.load(dev, gf, src, activations=args.activations, max_context=ctx, kv_cache=args.kv_cache)
    try:
        rows = []
        for a, b in spans:
            rows += await eng.forward_logits(ids[a:b], raw=True)
            if sys.stderr.isatty():
                print(f"\r[{b}/{len(ids)}]", end="", file=sys.stderr, flush=True)
        if sys.stderr.isatty():
            print(file=sys.stderr)
        return np.frombuffer(b"".join(rows), dtype="<f4").reshape(len(ids), -1).copy()
    finally:
        eng.close()
