"""Speculative decoding (bitweb.speculative): prompt lookup and draft-model drafts verified in one
multi-row pass. Greedy output equals plain decoding token for token (every format x architecture of
tests/test_engine.py); the sampling rule gives the target's distribution (chi-square on a small
vocabulary); KV rows of rejected drafts never leak into later tokens; stops, the context's end and
grammars behave as without drafting."""
from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from bitweb import speculative as spec
from bitweb.engine import Engine, EngineError
from bitweb.gguf import FileSource, open_gguf
from bitweb.grammar import Grammar, Vocabulary
from bitweb.sampling import SamplingParams, kept
from tests.conftest import run
from tests.test_engine import CASES, FLOAT

PROMPT = "one two three, one two three, one two three; the cat sat on the mat, the cat sat on the mat. "
N = 48

# chi-square quantiles at 0.999 by degrees of freedom (a correct sampler fails 1 run in 1000: the
# seeds are fixed, so a run is either always right or always wrong)
CHI2_999 = {1: 10.83, 2: 13.82, 3: 16.27, 4: 18.47, 5: 20.52, 6: 22.46, 7: 24.32, 8: 26.12}


# ---------------------------------------------------------------- host parts (no GPU)
def test_lookup_drafts_the_continuation_of_the_latest_longest_match():
    lk = spec.Lookup()
    ctx = [1, 2, 3, 4, 5, 9, 2, 3, 4, 6, 7, 2, 3, 4]
    # the last 3 tokens (2 3 4) last occurred ending at position 8: continue with 6 7 2 ...
    assert run(lk.propose(ctx, 3)) == [6, 7, 2]
    assert run(lk.propose(ctx + [6], 2)) == [7, 2]          # 3 4 6 at 7..9; incremental index
    # (a Lookup follows one growing context: a new one for each below)
    assert run(spec.Lookup().propose([5, 6, 7, 8], 4)) == []                 # no repeat, no draft
    assert run(spec.Lookup().propose([8, 9, 1, 8, 9], 4)) == []              # a 2-token repeat is below NGRAM_MIN
    assert run(spec.Lookup().propose([1, 2, 3, 9, 1, 2, 3], 5)) == [9, 1, 2, 3]   # up to the end of the context


def test_verification_tiles_have_no_more_rows_than_the_pass():
    """blocks.fit_rows: a pass of M rows gets ceil(M / 4) row quads where the device's tile has more
    (no row computed and thrown away); a pass the full tile needs keeps the device's tile."""
    from bitweb import formats
    from bitweb.blocks import fit_rows
    from bitweb.kernels import bitlinear_tiled
    for a8, fmt in ((False, formats.Q4_1), (False, formats.Q8_0), (True, formats.I2_S)):
        full = bitlinear_tiled.choose(None, a8, False, 576, 1536, fmt).rq
        assert full == 4, full                      # lavapipe's tile (no device): 16 rows
        assert [fit_rows(None, m, a8, False, 576, 1536, fmt) for m in (1, 2, 4, 5, 8, 12, 16, 64)] == \
            [{"rq": 1}] * 3 + [{"rq": 2}] * 2 + [{"rq": 3}] + [{}] * 2
        st = bitlinear_tiled.matmul(fmt, 512, 1536, 8, a8=a8, **fit_rows(None, 8, a8, False, 512, 1536, fmt))
        assert st.constants["RQ"] == 2 and st.workgroups[1] == 1


def test_drafter_backs_off_after_failures_and_resets_on_success():
    class Always:
        mode = "test"

        async def propose(self, ctx, k):
            return [7] * k
    d = spec.Drafter(Always(), 4)
    assert run(d.propose([], 2)) == [7, 7]
    pauses = []
    for _ in range(5):
        d.update(2, 0)
        n = 0
        while not run(d.propose([], 3)):
            n += 1
        pauses.append(n)
    assert pauses == [3, 15, 63, 63, 63]                     # 4^f - 1, at most BACKOFF_MAX
    d.update(3, 1)
    assert run(d.propose([], 3)) == [7, 7, 7] and d.drafted == 13 and d.accepted == 1


def chi2(counts: dict, p: list, n: int) -> float:
    return sum((counts.get(t, 0) - n * pr) ** 2 / (n * pr) for t, pr in p) + \
        sum(1e9 for t in counts if t not in dict(p))         # a token outside p's support: fail


def emitted(p, q, n, seed, rule=spec.speculative_choice):
    """The first token emitted after a draft drawn from q, n times: counts by token."""
    rng, counts = random.Random(seed), {}
    qs = sorted(q.items())
    for _ in range(n):
        u, acc, d = rng.random(), 0.0, qs[-1][0]
        for t, pr in qs:
            acc += pr
            if u < acc:
                d = t
                break
        _, t = rule(p, q, d, rng)
        counts[t] = counts.get(t, 0) + 1
    return counts


@pytest.mark.parametrize("params", [SamplingParams(temperature=0.9, seed=0),
                                    SamplingParams(temperature=1.3, top_k=5, top_p=0.95, min_p=0.02, seed=0),
                                    SamplingParams(temperature=0.7, top_p=0.8, seed=0)])
def test_sampling_rule_gives_the_target_distribution(params):
    """Against the exact distribution of the sampler's kept set (bitweb.sampling.kept) over a small
    vocabulary: a point-mass draft (prompt lookup), a draft on a token outside the kept set, and a
    draft model's distribution q; 20000 draws each, chi-square under its 0.999 quantile. The bound
    catches a wrong rule: accepting every draft (the draft's distribution) fails it."""
    logits = [2.0, 1.5, 1.4, 0.3, -0.5, 0.9, -2.0, 1.45]
    cands = sorted(((v, i) for i, v in enumerate(logits)), key=lambda c: (-c[0], c[1]))
    p = spec.target_dist(params, cands, None)
    keep, w, mass, open_end = kept(params, cands, None)
    assert not open_end and [t for t, _ in p] == [c[1] for c in cands[:keep]]
    assert abs(sum(pr for _, pr in p) - 1) < 1e-12
    crit = CHI2_999[len(p) - 1]
    n = 20000
    drafts = [{p[1][0]: 1.0}, {6: 1.0}, {0: 0.1, 1: 0.2, 2: 0.4, 3: 0.2, 6: 0.1}]
    for i, q in enumerate(drafts):
        assert chi2(emitted(p, q, n, seed=10 + i), p, n) < crit, q

    def accept_all(p, q, d, rng):
        return True, d
    assert chi2(emitted(p, drafts[2], n, seed=99, rule=accept_all), p, n) > 10 * crit


# ---------------------------------------------------------------- the engine (native GPU)
def load(dev, path, act, **kw):
    with FileSource(path) as src:
        return run(Engine.load(dev, open_gguf(path), src, activations=act, **kw))


def gen(eng, ids, n=N, params=SamplingParams(), **kw):
    kw.setdefault("ignore_eos", True)
    return run(eng.generate(ids, params, n, **kw))


class Oracle:
    """Drafts the plain run's own continuation with every fourth position wrong: passes that accept
    some drafts and reject one, on any model."""
    mode = "oracle"

    def __init__(self, prompt, ids):
        self.seq, self.n = list(prompt) + list(ids), len(prompt)

    async def propose(self, ctx, k):
        j = len(ctx)
        out = self.seq[j:j + k]
        return [(t + 1) % 200 if (j + i) % 4 == 0 else t for i, t in enumerate(out)]


@pytest.mark.parametrize("arch,fmt", CASES)
def test_greedy_equals_plain_decoding(gpu, tiny_model, arch, fmt):
    """Drafts the target accepts and rejects (Oracle), prompt lookup, a draft model that is the same
    file loaded again (its drafts are the target's own tokens: accepted) and one of another seed
    (mostly rejected): the same tokens as plain decoding, every one."""
    path = tiny_model(arch=arch, fmt=fmt, seed=1)
    act = "f32" if fmt in FLOAT else "a8"
    eng, same = load(gpu, path, act), load(gpu, path, act)
    other = load(gpu, tiny_model(arch=arch, fmt=fmt, seed=2), act)
    try:
        ids = eng.tokenizer.encode(PROMPT)
        want = gen(eng, ids)
        assert want.speculative == "" and "drafted" not in want.to_json()
        oracle = Oracle(ids, want.ids)
        for how in (oracle, "lookup", same, other):
            got = gen(eng, ids, speculative=how)
            assert got.ids == want.ids and got.text == want.text, (arch, fmt, how)
            assert got.stop_reason == "max_tokens" and 0 <= got.accepted <= got.drafted
            js = got.to_json()
            assert js["drafted"] == got.drafted and js["accepted"] == got.accepted
            if not isinstance(how, str):     # (lookup drafts only where the text repeats its context)
                assert got.drafted > 0
        assert got.speculative == "draft"
        mine = gen(eng, ids, speculative=same)
        assert mine.accepted >= mine.drafted * 3 // 4, (mine.drafted, mine.accepted)
        told = gen(eng, ids, speculative=oracle)
        assert 0 < told.accepted < told.drafted, (told.drafted, told.accepted)
    finally:
        for e in (eng, same, other):
            e.close()


@pytest.fixture(scope="module")
def pair(gpu, tiny_model):
    """A target and its self-draft (the same file), prefill_rows 4: passes of 4 rows, prompts in
    chunks of 4; f32 so the grammar's numpy twin is exact."""
    path = tiny_model(arch="bitnet", fmt="tq2_0", seed=5)
    eng, draft = load(gpu, path, "f32", prefill_rows=4, kv_cache="f32"), load(gpu, path, "f32", kv_cache="f32")
    eng.path = path
    yield eng, draft
    eng.close()
    draft.close()


def test_kv_rollback_across_chunks_and_cache_reuse(pair):
    """Rejected drafts write K / V rows past the accepted ones: later tokens never see them. A
    prompt of several 4-row chunks, then a follow-up that reuses the cache (a prefix of the output)
    equals a fresh run of it; cached_ids is the prompt plus the fed tokens."""
    eng, draft = pair
    ids = eng.tokenizer.encode(PROMPT)
    eng.reset()
    want = gen(eng, ids, 40)
    for how in ("lookup", draft):
        eng.reset()
        got = gen(eng, ids, 40, speculative=how)
        assert got.ids == want.ids and got.drafted > 0
        assert eng.cached_ids == ids + got.ids[:-1]
        follow = ids + got.ids[:17] + eng.tokenizer.encode(" and then")
        again = gen(eng, follow, 24, speculative=how)             # reuses the cache up to there
        eng.reset()
        fresh = gen(eng, follow, 24)
        assert again.ids == fresh.ids


def test_stops_max_tokens_and_context_end_as_plain(pair):
    eng, draft = pair
    ids = eng.tokenizer.encode(PROMPT)
    eng.reset()
    ref = gen(eng, ids, 40)
    for how in ("lookup", draft):
        for n in (1, 2, 5):                                     # max_tokens inside a pass
            assert gen(eng, ids, n, speculative=how).ids == ref.ids[:n]
        stop = ref.ids[9]                                       # a stop token the drafts run into
        first = ref.ids.index(stop)
        got = gen(eng, ids, 40, speculative=how, stop_ids=[stop], ignore_eos=False)
        assert got.ids == ref.ids[:first] and got.stop_reason == "eot" and got.stop_id == stop
        seen = []

        def should_stop():
            return len(seen) >= 7
        got = gen(eng, ids, 40, speculative=how, on_token=lambda t, piece: seen.append(t), should_stop=should_stop)
        assert got.ids == ref.ids[:7] and got.stop_reason == "stopped"
    small = load(eng.dev, eng.path, "f32", max_context=len(ids) + 12, kv_cache="f32")
    try:
        plain = gen(small, ids, 40)
        assert plain.stop_reason == "context" and len(plain.ids) == 12
        for how in ("lookup", draft):
            got = gen(small, ids, 40, speculative=how)
            assert got.ids == plain.ids and got.stop_reason == "context"
    finally:
        small.close()


def test_sampling_with_top_k_1_is_greedy_and_sampling_runs(pair):
    """top_k = 1 makes every row's distribution a point mass: the rule must give greedy's tokens;
    a real temperature gives valid tokens, drafted and accepted counted, the same with the same seed."""
    eng, draft = pair
    ids = eng.tokenizer.encode(PROMPT)
    ref = gen(eng, ids, 32)
    for how in ("lookup", draft):
        got = gen(eng, ids, 32, SamplingParams(temperature=0.8, top_k=1, seed=4), speculative=how)
        assert got.ids == ref.ids and got.drafted > 0
        p = SamplingParams(temperature=0.7, top_p=0.9, seed=4)
        a = gen(eng, ids, 32, p, speculative=how)
        b = gen(eng, ids, 32, p, speculative=how)
        assert a.ids == b.ids and len(a.ids) == 32 and a.drafted > 0 and 0 <= a.accepted <= a.drafted
        assert all(0 <= t < eng.cfg.n_vocab for t in a.ids)


def test_grammar_forced_tokens_are_drafted_and_output_equals_plain(pair):
    """Under a grammar the forced tokens are drafted for free (and always accepted) and drafts the
    grammar forbids are cut: the same tokens as without drafting, greedy and sampled top_k = 1."""
    eng, draft = pair
    V = Vocabulary(eng.tokenizer)
    gr = Grammar('root ::= "{\\"name\\": \\"" [a-z]+ "\\", \\"kind\\": \\"" ("cat" | "dog") "\\"}"')
    ids = eng.tokenizer.encode("JSON:")
    want = gen(eng, ids, 60, constraint=gr.constraint(V), ignore_eos=False)
    for how in ("lookup", draft):
        for p in (SamplingParams(), SamplingParams(temperature=0.9, top_k=1, seed=1)):
            got = gen(eng, ids, 60, p, constraint=gr.constraint(V), ignore_eos=False, speculative=how)
            assert got.ids == want.ids and got.stop_reason == want.stop_reason, (how, p)
            assert got.drafted >= len('{"name": "') - 1 and got.accepted > 0


def test_bad_speculative_arguments_are_refused(pair):
    eng, draft = pair
    ids = eng.tokenizer.encode("x")
    with pytest.raises(EngineError, match="speculative 'ngram'"):
        gen(eng, ids, speculative="ngram")
    with pytest.raises(EngineError, match="the target model itself"):
        gen(eng, ids, speculative=eng)
    elsewhere = SimpleNamespace(generate=draft.generate, cfg=draft.cfg, dev=object(), tokenizer=draft.tokenizer)
    with pytest.raises(EngineError, match="the target's GPU device"):
        gen(eng, ids, speculative=elsewhere)
    tokens = list(draft.tokenizer.tokens)
    tokens[5], tokens[6] = tokens[6], tokens[5]
    swapped = SimpleNamespace(generate=draft.generate, cfg=draft.cfg, dev=eng.dev, tokenizer=SimpleNamespace(tokens=tokens))
    with pytest.raises(EngineError, match="share it token for token"):
        gen(eng, ids, speculative=swapped)


def test_cli_speculative_and_draft(gpu, tiny_model, capsys):
    """generate --speculative lookup / --draft FILE: the plain run's tokens; --json adds speculative,
    drafted and accepted; --stats says the acceptance; the numpy backend refuses both."""
    import json

    from bitweb import commands as cli
    path = tiny_model(arch="bitnet", fmt="tq2_0", seed=5)
    base = [path, "--prompt", PROMPT, "--max-tokens", "24", "--ignore-eos", "--activations", "f32"]

    def cli_run(*extra):
        rc = cli.main(["generate", *base, *extra])
        out = capsys.readouterr()
        return rc, out.out, out.err
    rc, out, _ = cli_run("--json")
    plain = json.loads(out)
    assert rc == 0 and "drafted" not in plain
    for extra in (["--speculative", "lookup"], ["--draft", path]):
        rc, out, _ = cli_run("--json", *extra)
        got = json.loads(out)
        assert rc == 0 and got["ids"] == plain["ids"] and got["text"] == plain["text"]
        assert got["speculative"] == ("lookup" if extra[0] == "--speculative" else "draft")
        assert 0 <= got["accepted"] <= got["drafted"] and got["decode_ms_per_token"] > 0
    assert got["drafted"] > 0 and got["accepted"] > 0              # the draft is the same model: accepted
    rc, _, err = cli_run("--stats", "--draft", path)
    assert rc == 0 and "[speculative draft: " in err and " accepted (" in err, err
    rc, _, err = cli_run("--backend", "numpy", "--speculative", "lookup")
    assert rc == 1 and "--speculative / --draft" in err


def test_bench_speculative_reports_each_task(pair):
    """bitweb bench speculative's figures on the tiny model: a row per task, drafting runs' tokens
    the plain run's ("same"), ratios the quotient of the tokens/s they derive from, describe() a line
    per task."""
    from bitweb.speculative_bench import TASKS, bench_speculative, describe
    eng, draft = pair
    tasks = {k: TASKS[k] for k in ("recall", "extract")}
    r = run(bench_speculative(eng, draft, tokens=12, trials=1, tasks=tasks))
    assert list(r["tasks"]) == ["recall", "extract"]
    for t in r["tasks"].values():
        for m in ("lookup", "draft"):
            assert t[f"{m}_same"] is True and 0 <= t[f"{m}_accepted"] <= t[f"{m}_drafted"]
            assert abs(t[f"{m}_ratio"] - t[f"{m}_tps"] / t["plain_tps"]) < 0.01 * t[f"{m}_ratio"] + 0.06
    assert r["tasks"]["extract"]["lookup_drafted"] > 0             # the schema's forced tokens
    r.update(model="tiny", draft="tiny")
    assert len(describe(r).splitlines()) == 2 + len(tasks)
