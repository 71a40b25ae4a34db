"""numpy mirrors of sampling.wgsl (argmax, topk, softmax; the repetition penalty and the grammar
mask) and their kernel cases: part of the ops family (bitweb.ref.ops adds them; its docstring has
the error bounds: "sampling").
"""
from __future__ import annotations

import math

import numpy as np

from bitweb.kernels import ops as spec
from bitweb.ref.dense import add_case, f32b

U = 2.0 ** -24


def u32b(a) -> bytes:
    return np.ascontiguousarray(a, dtype="<u4").tobytes()


def _log2(n):
    return int(math.log2(n))


def penalize(logits: np.ndarray, ids, r: float) -> np.ndarray:
    """llama.cpp repetition penalty on each distinct id < V: l > 0 ? l / r : l * r (f32)."""
    out = logits.copy()
    if r != 1.0:
        for t in sorted(set(int(i) for i in ids if 0 <= int(i) < logits.size)):
            out[t] = np.float32(out[t] / np.float32(r)) if out[t] > 0 else np.float32(out[t] * np.float32(r))
    return out


def topk(logits: np.ndarray, k: int) -> np.ndarray:
    """ids of the k largest logits, descending, ties by lower id."""
    order = np.lexsort((np.arange(logits.size), -logits.astype(np.float64)))
    return order[:k]


def mask_of(allowed: np.ndarray) -> np.ndarray:
    """u32 words of a token mask (bitweb.grammar's layout): token t iff bit t & 31 of word t >> 5."""
    bits = np.zeros(-(-allowed.size // 32) * 32, dtype=np.uint64)
    bits[:allowed.size] = allowed
    return (bits.reshape(-1, 32) << np.arange(32, dtype=np.uint64)).sum(axis=1).astype(np.uint32)


def topk_masked(logits: np.ndarray, allowed: np.ndarray, k: int) -> np.ndarray:
    """sampling.wgsl topk MASK: ids of the k largest allowed logits, descending, ties by lower id;
    then the tokens left out (and NaN logits) in id order."""
    live = allowed & ~np.isnan(logits)
    first = sorted(np.flatnonzero(live).tolist(), key=lambda t: (-float(logits[t]), t))
    return np.array((first + np.flatnonzero(~live).tolist())[:k], dtype=np.int64)


def softmax_stats(logits: np.ndarray, inv_temp: float = 1.0):
    """(max, S = sum exp((l - max) inv_temp), bound on |error of S| as computed by the kernel)."""
    l64 = logits.astype(np.float64)
    mx = l64.max()
    x = (l64 - mx) * inv_temp
    p = np.exp(x)
    s = p.sum()
    e = (3 + 4 * np.abs(x) + 3 * np.abs(l64) * inv_temp) * U
    return mx, s, float((e * p).sum()), float(e.max())


# ---- cases ----------------------------------------------------------------------------------
def _pen_ids(rng, nv, hot, avoid=()):
    """A penalty list with duplicates, an out-of-range id and the given hot ids (none in avoid)."""
    rand = [int(i) for i in rng.integers(0, nv, size=20) if int(i) not in avoid]
    return np.array(list(hot) + rand + [hot[0], nv + 5, hot[-1]], dtype=np.uint32)


def argmax_cases(b, rng, scope):
    # (n_vocab, penalty, wg, kind)
    shapes = [(1001, 1.3, 256, "tie"), (513, 1.0, 64, "signed_zeros")] if scope == "browser" else \
        [(128256, 1.3, 256, "tie"), (128256, 1.0, 256, "tie"), (1001, 1.1, 64, "penalised_max"),
         (999, 1.0, 256, "equal"), (5, 1.0, 256, "tie"), (777, 1.0, 64, "nan"), (300, 1.0, 256, "all_nan"),
         (513, 1.0, 64, "signed_zeros"), (70, 1.2, 256, "negative")]
    for nv, r, wg, kind in shapes:
        logits = (rng.normal(size=nv) * 3).astype(np.float32)
        top = float(logits.max())
        hot = [int(rng.integers(0, nv))]
        avoid = ()
        if kind == "tie":                # two equal maxima: the lower id wins
            a, c = sorted(rng.choice(nv, size=2, replace=False))
            logits[a] = logits[c] = top + 1
            hot, avoid = [int(np.argmin(logits))], (a, c)
        elif kind == "penalised_max":    # the max is penalised below the runner-up
            order = np.argsort(-logits)
            logits[order[0]] = top + 2
            logits[order[1]] = top + 1
            hot = [int(order[0]), int(np.argmin(logits))]
        elif kind == "equal":
            logits[:] = 0.5
        elif kind == "nan":              # NaN never wins, not even before the max
            logits[rng.choice(nv, size=9, replace=False)] = np.nan
            logits[0] = np.nan
        elif kind == "all_nan":          # no number: 0xffffffff
            logits[:] = np.nan
        elif kind == "signed_zeros":     # -0 and +0 tie as numbers: the lower id wins
            logits = -np.abs(logits) - 1
            a, c = sorted(rng.choice(nv, size=2, replace=False))
            logits[a], logits[c] = -0.0, 0.0
        elif kind == "negative":
            logits = -np.abs(logits) - 0.5
        pids = _pen_ids(rng, nv, hot, avoid)
        pen = penalize(logits, pids, r)
        num = ~np.isnan(pen)
        tok = int(np.flatnonzero(num & (pen == pen[num].max()))[0]) if num.any() else 0xFFFFFFFF
        step = spec.argmax(nv, wg=wg)
        bufs = [{"name": "logits", "data": f32b(logits), "expect": None if (~num).any() else f32b(pen), "rtol": 3 * U},
                {"name": "token", "size": 4, "expect": u32b([tok]), "dtype": "u32"},
                {"name": "penalty_ids", "data": u32b(pids)},
                {"name": "params", "data": spec.params(n_ids=pids.size, penalty=r)}]
        add_case(b, f"ops.sampling.argmax.v{nv}.{kind}.r{r}.wg{wg}", [step], bufs)


def topk_cases(b, rng, scope):
    # (n_vocab, k, penalty, inv_temp, integer-valued logits (many ties)); with integer logits the
    # penalties are chosen so that no l / r is an integer (no ties created by a division that
    # WGSL only promises to 2.5 ulp)
    shapes = [(1000, 10, 1.3, 1.0, True)] if scope == "browser" else \
        [(128256, 40, 1.3, 1 / 0.7, False), (128256, 256, 1.0, 1.0, False), (999, 5, 1.1, 1.0, True),
         (1000, 256, 1.0, 2.0, True), (300, 1, 1.0, 1.0, False), (257, 37, 1.7, 0.5, True)]
    for nv, k, r, it, ints in shapes:
        if ints:
            logits = rng.integers(-6, 7, size=nv).astype(np.float32)
        else:
            logits = (rng.normal(size=nv) * 3).astype(np.float32)
        hot = [int(np.argmax(logits)), int(np.argmin(logits))]
        pids = _pen_ids(rng, nv, hot)
        pen = penalize(logits, pids, r)
        ids = topk(pen, k)
        mx, s, bound, _ = softmax_stats(pen, it)
        vals = np.concatenate([pen[ids], [mx, s]]).astype(np.float32)
        step = spec.topk(nv, k)
        bufs = [{"name": "logits", "data": f32b(logits), "expect": f32b(pen), "rtol": 3 * U},
                {"name": "top_ids", "size": 4 * k, "expect": u32b(ids), "dtype": "u32"},
                {"name": "penalty_ids", "data": u32b(pids)},
                {"name": "params", "data": spec.params(n_ids=pids.size, penalty=r, inv_temp=it)},
                {"name": "top_vals", "size": 4 * (k + 2), "expect": f32b(vals),
                 "rtol": max(3 * U, (bound + (nv / 256 + 9) * U * s) / s)}]
        add_case(b, f"ops.sampling.topk.v{nv}.k{k}.r{r}{'.ties' if ints else ''}", [step], bufs)


def masked_sampling_cases(b, rng, scope):
    """argmax / topk MASK: a grammar's allowed tokens (the max often left out, a mask that leaves a
    single token, fewer allowed tokens than k, the penalty and NaN logits beside the mask)."""
    # (n_vocab, penalty, fraction allowed, kind), argmax then topk (k)
    am = [(1001, 1.3, 0.3, "max_out")] if scope == "browser" else \
        [(49152, 1.0, 0.2, "max_out"), (1001, 1.3, 0.3, "max_out"), (777, 1.0, 0.0, "one"),
         (513, 1.1, 0.5, "nan"), (70, 1.0, 1.0, "all")]
    for nv, r, frac, kind in am:
        logits = (rng.normal(size=nv) * 3).astype(np.float32)
        allowed = rng.random(nv) < frac
        if kind == "max_out":
            allowed[int(np.argmax(logits))] = False
        elif kind == "one":
            allowed[:] = False
            allowed[int(rng.integers(0, nv))] = True
        elif kind == "nan":
            logits[rng.choice(nv, size=20, replace=False)] = np.nan
        pids = _pen_ids(rng, nv, [int(np.argmax(np.nan_to_num(logits, nan=-9)))])
        pen = penalize(logits, pids, r)
        live = allowed & ~np.isnan(pen)
        tok = int(np.flatnonzero(live & (pen == pen[live].max()))[0])
        bufs = [{"name": "logits", "data": f32b(logits)},
                {"name": "token", "size": 4, "expect": u32b([tok]), "dtype": "u32"},
                {"name": "penalty_ids", "data": u32b(pids)},
                {"name": "params", "data": spec.params(n_ids=pids.size, penalty=r)},
                {"name": "mask", "data": u32b(mask_of(allowed))}]
        add_case(b, f"ops.sampling.argmax_mask.v{nv}.{kind}.r{r}", [spec.argmax(nv, mask=True)], bufs)
    tk = [(1000, 16, 1.3, 0.01)] if scope == "browser" else \
        [(49152, 64, 1.0, 0.1), (1000, 16, 1.3, 0.01), (999, 40, 1.1, 0.5), (300, 256, 1.0, 0.3)]
    for nv, k, r, frac in tk:
        logits = (rng.normal(size=nv) * 3).astype(np.float32)
        allowed = rng.random(nv) < frac
        allowed[int(np.argmax(logits))] = False
        allowed[int(rng.integers(0, nv))] = True
        pids = _pen_ids(rng, nv, [int(np.argmin(logits))])
        pen = penalize(logits, pids, r)
        ids = topk_masked(pen, allowed, k)
        it = 1 / 0.7
        mx, s, bound, _ = softmax_stats(pen[allowed], it)
        vals = np.concatenate([pen[ids], [mx, s]]).astype(np.float32)
        bufs = [{"name": "logits", "data": f32b(logits), "expect": f32b(pen), "rtol": 3 * U},
                {"name": "top_ids", "size": 4 * k, "expect": u32b(ids), "dtype": "u32"},
                {"name": "penalty_ids", "data": u32b(pids)},
                {"name": "params", "data": spec.params(n_ids=pids.size, penalty=r, inv_temp=it)},
                {"name": "top_vals", "size": 4 * (k + 2), "expect": f32b(vals),
                 "rtol": max(3 * U, (bound + (nv / 256 + 9) * U * s) / s)},
                {"name": "mask", "data": u32b(mask_of(allowed))}]
        add_case(b, f"ops.sampling.topk_mask.v{nv}.k{k}.r{r}.allowed{int(allowed.sum())}",
                 [spec.topk(nv, k, mask=True)], bufs)


def softmax_cases(b, rng, scope):
    shapes = [(2, 100, 64)] if scope == "browser" else [(3, 1000, 256), (4, 129, 64), (1, 128256, 256)]
    for m, n, wg in shapes:
        x = (rng.normal(size=(m, n)) * 4).astype(np.float32)
        y = np.empty((m, n))
        rtol = 0.0
        for i in range(m):
            mx, s, bound, emax = softmax_stats(x[i])
            y[i] = np.exp(x[i].astype(np.float64) - mx) / s
            rtol = max(rtol, emax + (bound + (n / wg + _log2(wg) + 1) * U * s) / s + 3 * U)
        step = spec.softmax(n, m, wg=wg)
        bufs = [{"name": "x", "data": f32b(x)},
                {"name": "y", "size": x.nbytes, "expect": f32b(y), "rtol": rtol, "atol": 1e-37}]
        add_case(b, f"ops.sampling.softmax.m{m}.n{n}", [step], bufs)


def sampling_cases(b, rng, scope):
    argmax_cases(b, rng, scope)
    topk_cases(b, rng, scope)
    masked_sampling_cases(b, rng, scope)
    softmax_cases(b, rng, scope)
