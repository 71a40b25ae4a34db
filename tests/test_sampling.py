"""Sampling: semantics against a direct numpy computation of the distribution, the
candidate path against the full path, seeds, parameter errors."""
from __future__ import annotations

import numpy as np
import pytest

from bitweb.sampling import (Sampler, SamplingError, SamplingParams, apply_penalty, argmax, penalty_ids,
                             top_candidates)


def direct(logits, p: SamplingParams, context):
    """(ids in draw order, probabilities) computed straight from the definition (float64)."""
    lg = np.asarray(logits, dtype=np.float64).copy()
    if p.repeat_penalty != 1.0 and p.repeat_last_n:
        for i in set(context[-p.repeat_last_n:]):
            lg[i] = lg[i] / p.repeat_penalty if lg[i] > 0 else lg[i] * p.repeat_penalty
    order = np.lexsort((np.arange(lg.size), -lg))            # logit desc, id asc
    z = lg[order] / p.temperature
    if p.top_k:
        order, z = order[:p.top_k], z[:p.top_k]
    pr = np.exp(z - z.max())
    pr /= pr.sum()
    keep = len(pr)
    if p.top_p < 1:
        keep = int(np.argmax(np.cumsum(pr) >= p.top_p * (1 - 1e-12))) + 1
    if p.min_p > 0:
        keep = min(keep, int(np.sum(pr >= p.min_p * pr[0])))
    pr = pr[:keep] / pr[:keep].sum()
    return order[:keep], pr


class FixedU:
    def __init__(self, u):
        self.u = u

    def random(self):
        return self.u


PARAMS = [SamplingParams(temperature=1.0), SamplingParams(temperature=0.7, top_k=5),
          SamplingParams(temperature=1.3, top_p=0.8), SamplingParams(temperature=0.9, min_p=0.05),
          SamplingParams(temperature=1.0, top_k=40, top_p=0.9, min_p=0.02, repeat_penalty=1.3),
          SamplingParams(temperature=2.0, top_p=0.5, repeat_penalty=0.8, repeat_last_n=3)]


@pytest.mark.parametrize("p", PARAMS, ids=str)
def test_draw_matches_direct_inverse_cdf(p):
    rng = np.random.default_rng(0)
    checked = 0
    for trial in range(40):
        logits = (rng.standard_normal(200) * 2.5).astype(np.float32).tolist()
        context = rng.integers(0, 200, size=12).tolist()
        order, pr = direct(logits, p, context)
        cum = np.cumsum(pr)
        for u in rng.random(5):
            if np.min(np.abs(cum - u)) < 1e-9:
                continue                                   # on a boundary: float order decides
            want = int(order[np.searchsorted(cum, u, side="right")])
            s = Sampler(p)
            s.rng = FixedU(u)
            assert s.sample_logits(logits, context) == want
            # the candidate path (top 16 + softmax stats, full logits on demand) gives the same
            lg = apply_penalty(logits, p, context)
            z = np.asarray(lg, dtype=np.float64) / p.temperature
            stats = (z.max(), np.exp(z - z.max()).sum())
            s2 = Sampler(p)
            s2.rng = FixedU(u)
            assert s2.sample(top_candidates(lg, 16), stats, lambda: top_candidates(lg, len(lg))) == want
            checked += 1
    assert checked > 150


def test_candidates_decide_without_full_logits_when_they_can():
    lg = [10.0, 9.0, 8.0] + [-20.0] * 500             # the tail has ~1e-12 of the mass
    z = np.asarray(lg)
    stats = (z.max(), np.exp(z - z.max()).sum())
    for p in (SamplingParams(temperature=1.0, top_p=0.95), SamplingParams(temperature=1.0, top_k=3),
              SamplingParams(temperature=1.0, min_p=0.1), SamplingParams(temperature=1.0)):
        s = Sampler(p)
        for _ in range(50):
            assert s.sample(top_candidates(lg, 8), stats, None) in (0, 1, 2)
        assert s.full_fallbacks == 0
    # a flat distribution: the draw lands in the tail -> full logits asked for (exact result)
    flat = [0.0] * 300
    s = Sampler(SamplingParams(temperature=1.0, seed=1))
    got = [s.sample(top_candidates(flat, 8), (0.0, 300.0), lambda: top_candidates(flat, 300)) for _ in range(20)]
    assert s.full_fallbacks > 10 and max(got) >= 8
    with pytest.raises(SamplingError, match="cannot decide"):
        Sampler(SamplingParams(temperature=1.0, seed=1)).sample(top_candidates(flat, 8), (0.0, 300.0), None)


def test_same_seed_same_tokens_other_seed_differs():
    rng = np.random.default_rng(3)
    seq = [(rng.standard_normal(100)).tolist() for _ in range(30)]

    def run(seed):
        s = Sampler(SamplingParams(temperature=1.0, seed=seed))
        return [s.sample_logits(lg, []) for lg in seq]
    assert run(7) == run(7)
    assert run(7) != run(8)


def test_greedy_penalty_and_ties():
    assert argmax([1.0, 3.0, 3.0, 2.0]) == 1
    s = Sampler(SamplingParams())
    assert s.sample_logits([1.0, 3.0, 3.0, 2.0], []) == 1
    # penalty: positive logits divided, negative multiplied, only the last n context ids
    p = SamplingParams(repeat_penalty=2.0, repeat_last_n=2)
    assert apply_penalty([4.0, -1.0, 3.0, 1.0], p, [0, 1, 2]) == [4.0, -2.0, 1.5, 1.0]
    assert penalty_ids(p, [3, 0, 1, 1]) == [1]
    assert Sampler(p).sample_logits([4.0, -1.0, 3.9, 1.0], [0, 0]) == 2    # 4/2 = 2 < 3.9
    assert penalty_ids(SamplingParams(repeat_penalty=1.0), [1, 2]) == []


@pytest.mark.parametrize("kw,name", [({"temperature": -1}, "temperature"), ({"top_p": 0}, "top_p"),
                                     ({"top_p": 1.5}, "top_p"), ({"min_p": -0.1}, "min_p"),
                                     ({"top_k": -2}, "top_k"), ({"repeat_penalty": 0}, "repeat_penalty"),
                                     ({"temperature": float("nan")}, "temperature")])
def test_bad_parameters_name_themselves(kw, name):
    with pytest.raises(SamplingError, match=name):
        SamplingParams(**kw)
