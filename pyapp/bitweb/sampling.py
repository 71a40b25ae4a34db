"""Token sampling (stdlib only; the same code for the GPU engine and the numpy model).

For one step, with logits l over the vocabulary and the recent context ids:

 1. repetition penalty r (llama.cpp / CTRL): for each distinct id among the last
    `repeat_last_n` context ids (prompt + generated): l > 0 -> l / r, else l * r.
 2. temperature T == 0: greedy, the argmax (lowest id on ties). Nothing is drawn.
 3. otherwise z = l / T, tokens sorted by (z descending, id ascending), and
    top-k:  keep the first k (k = 0: all);
    top-p:  keep the shortest prefix whose probability (softmax over the kept tokens)
            sums to >= top_p (top_p = 1: all);
    min-p:  keep tokens with p >= min_p * p_max (min_p = 0: all);
    draw:   u = rng.random() (one draw per token, random.Random(seed)); the first
            kept token whose cumulative weight exceeds u * (kept weight).
    Weights are exp(z - z_max) in double precision.

The GPU reads back only the top candidates and softmax stats (z_max, sum exp(z - z_max)
over the vocabulary); `sample()` decides from those whenever the kept set and the draw
fall inside the candidates, and otherwise asks for the full logits (`full()`), so the
result is always exact. The numpy model calls the same function. Same seed, same
logits -> same tokens, on every platform (Python's Mersenne Twister).

A grammar constraint (bitweb.grammar.Constraint) restricts the step to its allowed ids: after the
penalty, the tokens outside them are dropped before step 2, so greedy takes the best allowed token
and a draw is over the allowed tokens only (`sample_logits(..., allowed=ids)`).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

from bitweb.options import SAMPLER


class SamplingError(ValueError):
    """An invalid sampling parameter (names it)."""


def _want(b) -> str:
    """The range of a bounded parameter (bitweb.options.Bound) as the errors say it: ">= 0", "in (0, 1]"."""
    if b.hi is None:
        return f"{'>' if b.lo_open else '>='} {b.lo:g}"
    return f"in {'(' if b.lo_open else '['}{b.lo:g}, {b.hi:g}]"


@dataclass(frozen=True)
class SamplingParams:
    """Defaults and ranges: bitweb.options SAMPLER (a parameter without a lower bound, the seed,
    takes any value)."""
    temperature: float = SAMPLER["temperature"].default
    top_k: int = SAMPLER["top_k"].default
    top_p: float = SAMPLER["top_p"].default
    min_p: float = SAMPLER["min_p"].default
    repeat_penalty: float = SAMPLER["repeat_penalty"].default
    repeat_last_n: int = SAMPLER["repeat_last_n"].default
    seed: int = SAMPLER["seed"].default

    def __post_init__(self):
        for name, b in SAMPLER.items():
            if b.lo is None:
                continue
            v = getattr(self, name)
            ok = (not isinstance(v, bool) and isinstance(v, (int, float)) and v == v
                  and (v > b.lo if b.lo_open else v >= b.lo) and (b.hi is None or v <= b.hi))
            if not ok:
                raise SamplingError(f"sampling parameter {name} = {v!r} must be {_want(b)}")
            if b.integer and isinstance(v, float) and not v.is_integer():
                raise SamplingError(f"sampling parameter {name} = {v!r} must be an integer")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def penalized(self) -> bool:
        return self.repeat_penalty != 1.0 and self.repeat_last_n > 0


def penalty_ids(params: SamplingParams, context: list) -> list:
    """Distinct ids of the last repeat_last_n context tokens (sorted), or [] when no penalty applies."""
    if not params.penalized:
        return []
    return sorted(set(context[-params.repeat_last_n:]))


def apply_penalty(logits: list, params: SamplingParams, context: list) -> list:
    """Step 1 on a full list of logits (a new list)."""
    out = list(logits)
    r = params.repeat_penalty
    for i in penalty_ids(params, context):
        out[i] = out[i] / r if out[i] > 0 else out[i] * r
    return out


def argmax(logits) -> int:
    """Largest value, lowest index on ties."""
    best, bi = None, 0
    for i, v in enumerate(logits):
        if best is None or v > best:
            best, bi = v, i
    return bi


def top_candidates(logits: list, k: int) -> list:
    """[(logit, id)] of the k largest, sorted by (logit descending, id ascending)."""
    order = sorted(range(len(logits)), key=lambda i: (-logits[i], i))[:k]
    return [(logits[i], i) for i in order]


class Sampler:
    """One generation's sampler: holds the seeded generator."""

    def __init__(self, params: SamplingParams):
        self.params = params
        self.rng = random.Random(params.seed)
        self.full_fallbacks = 0          # steps that needed the full logits

    def sample(self, cands: list, stats=None, full=None) -> int:
        """cands: [(logit, id)] after the penalty, sorted (logit desc, id asc): the top candidates,
        or every token when stats is None. stats: (z_max, sum exp(z - z_max)) over the whole
        vocabulary for z = logit / T. full(): every (logit, id), sorted the same way, when the
        candidates cannot decide (counted in full_fallbacks)."""
        p = self.params
        if p.greedy:
            return cands[0][1]
        u = self.rng.random()
        got = choose(p, cands, stats, u)
        if got is None:
            if full is None:
                raise SamplingError("the top candidates cannot decide this draw and no full logits were given")
            self.full_fallbacks += 1
            got = choose(p, full(), None, u)
        return got

    def sample_logits(self, logits: list, context: list, allowed=None) -> int:
        """Host path: full logits (any sequence of floats) and the context ids. allowed: the token
        ids a grammar allows (ascending), or None for all."""
        lg = apply_penalty([float(x) for x in logits], self.params, context)
        if allowed is not None:
            return self.sample_allowed(lg, allowed)
        if self.params.greedy:
            return argmax(lg)
        return self.sample(top_candidates(lg, len(lg)))

    def sample_allowed(self, lg, allowed) -> int:
        """Steps 2-3 over the allowed ids only (lg: logits after the penalty, indexable by id)."""
        if not allowed:
            raise SamplingError("no token is allowed at this step")
        if self.params.greedy:
            return max(allowed, key=lambda i: (lg[i], -i))
        return self.sample(sorted(((float(lg[i]), i) for i in allowed), key=lambda c: (-c[0], c[1])))


def kept(p: SamplingParams, cands: list, stats):
    """Step 3's kept set from the candidates: (keep, w, mass, open_end), the first `keep` candidates
    with weights w[i] = exp(z_i - z_max) and mass the weight a draw is over (open_end: the kept set
    also holds the unseen tail, mass then the whole vocabulary's from stats); None when the
    candidates (a prefix of the sorted vocabulary, stats given) cannot tell."""
    complete = stats is None
    t = p.temperature
    z0 = cands[0][0] / t
    w = [math.exp(lg / t - z0) for lg, _ in cands]
    n = len(w)
    if p.top_k:
        if p.top_k <= n:
            n, complete = p.top_k, True          # the kept set is exactly the first top_k candidates
        elif not complete:
            return None
    total = sum(w[:n]) if complete else stats[1] * math.exp(stats[0] - z0)
    # top-p and min-p each keep a prefix of the sorted tokens; the kept set is the shorter one.
    keep, open_end, unknown = n, not complete, False   # open_end: the kept set includes the unseen tail
    if p.top_p < 1.0:
        acc = 0.0
        for i in range(n):
            acc += w[i]
            if acc >= p.top_p * total:
                keep, open_end = i + 1, False
                break
        else:
            unknown = open_end                   # the nucleus reaches past the candidates
    if p.min_p > 0.0:
        below = next((i for i in range(keep) if w[i] < p.min_p), None)   # p_i / p_max = w_i
        if below is not None:
            keep, open_end, unknown = below, False, False
        elif open_end:
            unknown = True                       # the min-p set reaches into the tail
    if unknown:
        return None
    return keep, w, (total if open_end else sum(w[:keep])), open_end


def choose(p: SamplingParams, cands: list, stats, u: float):
    """Steps 3 for one uniform draw u in [0, 1): the chosen id, or None when the candidates
    (a prefix of the sorted vocabulary, stats given) cannot decide. Sampler.sample draws u."""
    k = kept(p, cands, stats)
    if k is None:
        return None
    keep, w, mass, open_end = k
    target = u * mass
    acc = 0.0
    for i in range(keep):
        acc += w[i]
        if acc > target:
            return cands[i][1]
    return None if open_end else cands[keep - 1][1]   # closed set: float rounding at the very end
