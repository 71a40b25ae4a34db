"""Speculative decoding for the GPU engine (stdlib only; runs in Pyodide): cheap drafts of the next
tokens, verified by the target model in one multi-row pass, so that a run of drafts the model agrees
with costs one pass instead of one decode step each. Engine.generate(speculative=...) runs it:

    "lookup"        prompt lookup (Lookup): the tokens that followed the latest earlier occurrence
                    of the context's last NGRAM_MAX .. NGRAM_MIN tokens (prompt and text so far)
    an Engine       a draft model (DraftModel): any loaded model of the same vocabulary on the same
                    device proposes its greedy continuation (its own KV cache follows the text)

Under a grammar (generate(constraint=)) a draft is cut at its first token the grammar forbids, and
where the grammar allows one token only that token is drafted for free (grammar_drafts).

Verification (Verifier): the last accepted token t and drafts d_0 .. d_{k-1} go through the prefill
plan as k + 1 rows at positions P .. P + k (their K / V rows written as a prompt's), then for every row
r the LM head on row r (lmhead LASTROW with params.m = r + 1) into its own logits row, and the
sampler: greedy, the argmax into token slot r (the repetition penalty of the context up to d_{r-1},
the grammar's mask after d_{r-1}: both written before row r's submission, ordered with it);
sampling, the top-k candidates of row r. One read brings every row's result back. Greedy: the drafts
are accepted while they equal the argmax of the row before, then the argmax after the last accepted
one is the next token: exactly the tokens of plain decoding. Sampling: the standard rule (Leviathan
et al., Chen et al.): draft d with draft probability q(d) is accepted with probability
min(1, p(d) / q(d)), p the target's distribution after penalty, temperature, top-k / top-p / min-p
and the grammar; on rejection the token is drawn from the normalised residual max(p - q, 0). Both
drafters propose one token per position (q a point mass: accept with probability p(d), else draw from
p without d), so the output has the target's distribution. All rows accepted: the last row samples
the token after them as a plain step would.

Rejected drafts leave K / V rows past the accepted ones; nothing reads a row past the position being
decoded, and the next pass writes them again before any step reads them (no copy). cached_ids holds
exactly the accepted tokens that were fed. A draft never passes the context (row P + k <= n_ctx - 2,
as a plain step's position) or max_tokens (k + 1 tokens at most); stop tokens, should_stop, and
max_tokens end the run at the same token as without drafting (each emitted token goes through
GenerationRun.accept in order; the tokens verified past it are dropped).

Adaptive (Drafter): after a pass that accepts nothing, drafting pauses for 3, 15, then BACKOFF_MAX
positions (decode steps as without drafting), so text that does not repeat its context pays for few
verifications; a pass that accepts anything resets the pause. With no draft a position is one decode
step of the plain plan (not the overlapped greedy one of bitweb.decoding.ahead).
"""
from __future__ import annotations

import copy
import struct

from bitweb.blocks import EngineError, fit_rows, head_steps
from bitweb.grammar.gbnf import GrammarError
from bitweb.kernels import bitlinear_tiled, dense, ops
from bitweb.sampling import SamplingParams, choose, kept

DRAFT_MAX = 7                 # drafted tokens per pass at most: k + 1 = 8 rows, one prefill bucket
NGRAM_MAX, NGRAM_MIN = 4, 3   # prompt lookup matches the context's last 4, else 3 tokens
BACKOFF_MAX = 63              # positions without drafting at most after passes that accepted nothing
ALIGN = 256                   # storage binding offsets (minStorageBufferOffsetAlignment's largest allowed value)
MODES = ("lookup", "draft")


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


# ============================================================================ drafters
class Lookup:
    """Prompt lookup: n-grams of the context (prompt + text) indexed by their latest end position."""
    mode = "lookup"

    def __init__(self):
        self.index = {}           # n-gram (tuple) -> the position of its last token (latest occurrence)
        self.done = 0             # n-grams ending before this position are indexed

    async def propose(self, ctx: list, k: int) -> list:
        end = len(ctx) - 1        # the n-grams ending at the last token are the query, not indexed yet
        for j in range(self.done, end):
            for n in range(NGRAM_MIN, min(NGRAM_MAX, j + 1) + 1):
                self.index[tuple(ctx[j + 1 - n:j + 1])] = j
        self.done = max(self.done, end)
        for n in range(min(NGRAM_MAX, len(ctx) - 1), NGRAM_MIN - 1, -1):
            j = self.index.get(tuple(ctx[-n:]))
            if j is not None:
                return ctx[j + 1:j + 1 + k]
        return []


class DraftModel:
    """A draft model: another Engine of the same vocabulary on the same device; proposes its greedy
    continuation (its generate() keeps its KV cache for the common prefix: one pass feeds what the
    target accepted since, then k - 1 decode steps)."""
    mode = "draft"

    def __init__(self, target, draft):
        if draft is target:
            raise EngineError("the draft model is the target model itself: load a second, smaller model")
        if draft.dev is not target.dev:
            raise EngineError("the draft model must be loaded on the target's GPU device")
        if draft.cfg.n_vocab != target.cfg.n_vocab or draft.tokenizer.tokens != target.tokenizer.tokens:
            raise EngineError(f"the draft model's vocabulary ({draft.cfg.n_vocab} tokens) is not the target's "
                              f"({target.cfg.n_vocab}): a draft model must share it token for token")
        self.eng = draft

    async def propose(self, ctx: list, k: int) -> list:
        k = min(k, self.eng.n_ctx - 1 - len(ctx))
        if k <= 0:
            return []
        res = await self.eng.generate(ctx, SamplingParams(), k, ignore_eos=True)
        return res.ids


class Drafter:
    """One generation's drafting: the source, how many tokens a pass may draft (k_max: the prefill
    rows allow k_max + 1), the back-off, and the counts the result reports."""

    def __init__(self, source, k_max: int):
        self.source, self.mode, self.k_max = source, source.mode, k_max
        self.pause = self.fails = 0
        self.drafted = self.accepted = 0

    @property
    def usable(self) -> bool:
        return self.k_max >= 1

    async def propose(self, ctx: list, room: int) -> list:
        if self.pause:
            self.pause -= 1
            return []
        return (await self.source.propose(ctx, min(self.k_max, room)))[:room] if room > 0 else []

    def update(self, drafted: int, accepted: int):
        self.drafted += drafted
        self.accepted += accepted
        if accepted:
            self.fails = 0
        else:
            self.fails += 1
            self.pause = min((1 << 2 * self.fails) - 1, BACKOFF_MAX)


def drafter(eng, speculative) -> Drafter | None:
    """The Drafter of generate(speculative=...): None, "lookup", a draft Engine (checked here) or a
    source of one's own (a `mode` name and async propose(ctx, k) -> at most k token ids)."""
    if speculative is None:
        return None
    if isinstance(speculative, str):
        if speculative != "lookup":
            raise EngineError(f"speculative {speculative!r}: must be 'lookup' or a loaded draft model")
        source = Lookup()
    elif hasattr(speculative, "generate") and hasattr(speculative, "cfg"):
        source = DraftModel(eng, speculative)
    elif callable(getattr(speculative, "propose", None)) and isinstance(getattr(speculative, "mode", None), str):
        source = speculative          # a drafter of one's own: async propose(ctx, k) -> up to k ids
    else:
        raise EngineError(f"speculative {speculative!r}: must be 'lookup' or a loaded draft model")
    rows = eng.prefill_rows if eng.prefill_ready else 1
    return Drafter(source, min(DRAFT_MAX, rows - 1))


def grammar_drafts(c, drafts: list, room: int, remaining: int) -> tuple:
    """(drafts, masks) under the constraint c (not changed): the drafts up to the first one the
    grammar forbids, then the tokens it forces (the only one allowed, not a stop token), up to room
    in all, none after a stop token; masks[r]: the allowed tokens' words for row r (after
    drafts[:r]), one more than the drafts. A state whose mask cannot be made (the grammar cannot
    finish in the tokens left) is not drafted into."""
    walk, src = copy.copy(c), list(drafts)
    out, masks = [], [walk.mask(remaining)]
    while len(out) < room and not walk.stopped:
        words = masks[-1]
        d = src[len(out)] if len(out) < len(src) else None
        if d is None or not (words[d >> 5] >> (d & 31)) & 1:     # past the drafts, or forbidden: forced only
            m = walk.allowed(remaining - len(out))
            if not m or m & (m - 1) or m.bit_length() - 1 in c.stop_ids:
                break
            d, src = m.bit_length() - 1, []      # after a forced token the drafts no longer line up
        walk.advance(d)
        try:
            masks.append(walk.mask(remaining - len(out) - 1))
        except GrammarError:
            break
        out.append(d)
    return out, masks


# ============================================================================ the sampling rule
def speculative_choice(p: list, q: dict, d: int, rng) -> tuple:
    """The speculative sampling rule for one drafted token d: p [(id, probability)] the target's
    distribution (its order fixes the draw's), q {id: probability} the draft's (q[d] > 0).
    (True, d) with probability min(1, p(d) / q(d)); else (False, a token drawn from the normalised
    residual max(p - q, 0)). Two draws of rng at most."""
    pd = next((pr for t, pr in p if t == d), 0.0)
    if rng.random() * q[d] < pd:
        return True, d
    res = [(t, pr - q.get(t, 0.0)) for t, pr in p if pr > q.get(t, 0.0)]
    total = sum(r for _, r in res)
    if not res or total <= 0.0:      # p <= q everywhere: p == q up to rounding, and d was kept
        return True, d
    target, acc = rng.random() * total, 0.0
    for t, r in res:
        acc += r
        if acc > target:
            return False, t
    return False, res[-1][0]


def target_dist(params: SamplingParams, cands: list, stats):
    """The sampler's distribution [(id, probability)] over its kept tokens (bitweb.sampling.kept) when
    the candidates (and stats) decide it as a closed set, else None (then: all logits, stats None)."""
    k = kept(params, cands, stats) if cands else None
    if k is None or k[3]:
        return None
    keep, w, mass, _ = k
    return [(cands[i][1], w[i] / mass) for i in range(keep)]


# ============================================================================ verification
class Verifier:
    """An engine's plans for passes of up to `rows` rows (made on first use, kept on Engine.verifier):
    the LM head and the sampler per row, into logits rows, token slots and top-k slots of their own.

    The head: in A8 mode (and for a table no multi-row kernel reads) the decode head once per row,
    its input bound at row r of the prefill rows (or, where a row's offset is not a multiple of 256
    bytes, lmhead LASTROW with params.m = r + 1), so a row's logits are bit for bit a decode step's; with f32
    activations, whose prefill rows already differ from decode's by float rounding, one multi-row
    matmul over every row (rmsnorm with output_norm, then dense.matmul for a float table,
    bitlinear_tiled for a block-quant one: the table read once per pass, not once per row). The
    sampler: per row, after that row's params (penalty ids) and grammar mask are written; without a
    penalty or a grammar every row's head and sampler in one plan."""

    def __init__(self, eng, rows: int):
        self.eng, self.rows = eng, rows
        V, dev = eng.cfg.n_vocab, eng.dev
        self.lstride = _align(4 * V)
        self.logits = dev.create_buffer(rows * self.lstride, label="spec.logits")
        self.tokens = dev.create_buffer(rows * ALIGN, label="spec.tokens")
        self.tops = {}            # k -> (buffer, row stride, value offset)
        self.plans = {}           # (what, ...) -> Plan
        fmt = eng.table_type(eng.model.lm_head)
        self.multi = not eng.a8 and (fmt in dense.WTYPES or fmt in bitlinear_tiled.FORMATS)
        self.row_bytes = 4 * eng.cfg.n_embd
        self.offsets = self.row_bytes % ALIGN == 0      # row r of p.x bound at its offset

    def buffers(self) -> list:
        return [self.logits, self.tokens] + [b for b, *_ in self.tops.values()]

    def _row(self, r: int):
        return (self.logits, r * self.lstride, 4 * self.eng.cfg.n_vocab)

    def _head_rows(self, M: int) -> list:
        """Steps of the multi-row head over M prefill rows into the logits rows."""
        eng = self.eng
        h, B, cfg = eng.gpu_model, eng.buf, eng.cfg
        ti = h.model.lm_head
        fmt, shards, stride = eng.table_type(ti), h.shards[ti.name], self.lstride // 4
        steps = [(ops.rmsnorm(cfg.n_embd, M, eps=cfg.eps), {"x": B["p.x"], "y": B["p.n"],
                                                             "norm": h.w[h.model.output_norm.name]})]
        if fmt in dense.WTYPES:
            mm = dense.matmul(fmt, cfg.n_embd, cfg.n_vocab, M, shards=[(a, b) for a, b, _ in shards])
            return steps + [(st.with_constants(Y_STRIDE=stride), {f"w{i}": buf, "x": B["p.n"], "y": self.logits,
                                                                   "params": B["params"]})
                            for i, (st, (_, _, buf)) in enumerate(zip(mm, shards))]
        return steps + [(bitlinear_tiled.matmul(fmt, cfg.n_embd, r1 - r0, M, a8=False, y_stride=stride, y_col0=r0,
                                                dev=eng.dev, **fit_rows(eng.dev, M, False, False, cfg.n_embd, r1 - r0, fmt)),
                         {"x": B["p.n"], "params": B["params"], "mult": B["ones"], "y": self.logits, "w": buf})
                        for r0, r1, buf in shards]

    async def _sampler(self, r: int, key) -> tuple:
        """(Step, bindings) of row r's sampler of key (as Engine._k)."""
        eng, V = self.eng, self.eng.cfg.n_vocab
        B, masked = eng.buf, isinstance(key, tuple)
        k = key[1] if masked else key
        bufs = {"logits": self._row(r), "penalty_ids": B["pids"], "params": B["params"]}
        if masked:
            await eng._sampler_item(key)                  # makes buf["mask"]
            bufs["mask"] = B["mask"]
        if k == 0:
            return ops.argmax(V, mask=masked), dict(bufs, token=(self.tokens, r * ALIGN, 4))
        if k not in self.tops:
            off = _align(4 * k)
            stride = _align(off + 4 * (k + 2))
            self.tops[k] = (eng.dev.create_buffer(self.rows * stride, label=f"spec.top{k}"), stride, off)
        top, stride, off = self.tops[k]
        return ops.topk(V, k, mask=masked), dict(bufs, top_ids=(top, r * stride, 4 * k),
                                                 top_vals=(top, r * stride + off, 4 * (k + 2)))

    def _head_row(self, r: int) -> list:
        """The decode head on prefill row r into logits row r (not multi)."""
        eng = self.eng
        x = (eng.buf["p.x"], r * self.row_bytes, self.row_bytes) if self.offsets else eng.buf["p.x"]
        return [(s, dict(b, y=self._row(r))) for s, b in head_steps(eng.gpu_model, x, last_row=not self.offsets)]

    async def plan(self, what: tuple):
        """("head", M): the multi-row head; ("row", r, key): row r's head (unless multi) and
        sampler; ("all", m, key): those of rows 0 .. m - 1 (no per-row writes between them)."""
        if what not in self.plans:
            eng = self.eng
            if what[0] == "head":
                steps = self._head_rows(what[1])
            else:
                rows = [what[1]] if what[0] == "row" else range(what[1])
                steps = []
                for r in rows:
                    steps += ([] if self.multi else self._head_row(r)) + [await self._sampler(r, what[2])]
            self.plans[what] = eng.dev.plan(await eng._instantiate(steps))
        return self.plans[what]

    async def run(self, fed: list, pos: int, params: SamplingParams, context: list, masks) -> list:
        """Submit the pass over fed (t, d_0 .. d_{k-1}) at positions pos..; returns per row the
        argmax (greedy) or the raw top-k bytes (sampling). context: the ids before d_0 (t included)."""
        eng, dev, m = self.eng, self.eng.dev, len(fed)
        dev.write_buffer(eng.buf["p.ids"], 0, struct.pack(f"<{m}I", *fed))
        eng._write_params(m, pos, params, context)
        bucket = min(eng.prefill_rows, 1 << (m - 1).bit_length())
        dev.run(await eng._prefill_plan(bucket, None))
        key = eng._k(params)
        if self.multi:
            dev.run(await self.plan(("head", bucket)))
        if masks is None and not params.penalized and (self.multi or self.offsets):
            dev.run(await self.plan(("all", m, key)))
        else:
            for r in range(m):
                if masks is not None and (masks[r] is not eng._mask_words or eng._mask_key is None):
                    dev.write_buffer(eng.buf["mask"], 0, masks[r])
                    eng._mask_words, eng._mask_key = masks[r], ("spec", r)
                eng._write_params(r + 1, pos + r, params, context + fed[1:r + 1])
                dev.run(await self.plan(("row", r, key)))
        k = key[1] if isinstance(key, tuple) else key
        if k == 0:
            raw = await dev.read(self.tokens, 0, (m - 1) * ALIGN + 4)
            out = [struct.unpack_from("<I", raw, r * ALIGN)[0] for r in range(m)]
            if any(t >= eng.cfg.n_vocab for t in out):
                raise EngineError("the GPU argmax of a verified row is past the vocabulary: every logit is NaN")
            return out
        top, stride, _ = self.tops[k]
        raw = await dev.read(top, 0, m * stride)
        return [raw[r * stride:(r + 1) * stride] for r in range(m)]


async def verifier(eng) -> Verifier:
    if eng.verifier is None:
        eng.verifier = Verifier(eng, min(DRAFT_MAX + 1, eng.prefill_rows))
    return eng.verifier


async def _sampled(ver, rows, drafts, params, sampler, masks) -> list:
    """Sampling: the tokens a pass emits from each row's top-k (the rule of speculative_choice with
    q a point mass on each draft), full logits where the candidates cannot decide."""
    eng = ver.eng
    k = eng._k(params)
    k = k[1] if isinstance(k, tuple) else k
    _, _, off = ver.tops[k]
    out = []
    for r, raw in enumerate(rows):
        words = masks[r] if masks is not None else None

        def ok(i, w=words):
            return (i >> 5) < len(w) and (w[i >> 5] >> (i & 31)) & 1 == 1
        ok = ok if words is not None else None
        cands, stats = eng._candidates(raw, k, off, params, ok)
        cache = []

        async def full(r=r, ok=ok):
            if not cache:
                sampler.full_fallbacks += 1
                cache.append(await eng._all_candidates(ver.logits, r * ver.lstride, ok))
            return cache[0]
        if r == len(drafts):                    # every draft accepted: this row samples the next token
            u = sampler.rng.random()
            t = choose(params, cands, stats, u) if cands else None
            if t is None:
                t = choose(params, await full(), None, u)
            return out + [t]
        p = target_dist(params, cands, stats)
        if p is None:
            p = target_dist(params, await full(), None)
        acc, t = speculative_choice(p, {drafts[r]: 1.0}, drafts[r], sampler.rng)
        out.append(t)
        if not acc:
            return out
    return out


async def decode(eng, run, t: int, params: SamplingParams, sampler, context: list, budget: int, d: Drafter):
    """The decode loop with drafting (module docstring). t: the token after the prompt, not yet
    accepted; eng._mask the constraint or None. Leaves eng.cached_ids as the fed, accepted tokens."""
    c, ver, first = eng._mask, await verifier(eng), True
    while True:
        if c is not None:
            c.advance(t)              # the last token too: the constraint ends where the text does
        if not first:
            run.n_decode += 1         # (t came from a decode step or a pass)
        first = False
        if not run.accept(t):
            return
        context.append(t)
        pos = len(eng.cached_ids)     # where t is fed
        room = min(run.max_tokens - len(run.ids) - 1, eng.n_ctx - 2 - pos, d.k_max)
        remaining = budget - len(run.ids)
        drafts = await d.propose(context, room)
        masks = None
        if c is not None:
            drafts, masks = grammar_drafts(c, drafts, room, remaining)
        if not drafts:                # a plain decode step
            eng._feed(t)
            if c is not None:
                eng._write_mask(remaining)
            nxt = await eng._step(pos, params, sampler, context)
            eng.cached_ids.append(t)
            t = nxt
            continue
        rows = await ver.run([t] + drafts, pos, params, context, masks)
        eng.cached_ids.append(t)
        if params.greedy:
            n = 0
            while n < len(drafts) and drafts[n] == rows[n]:
                n += 1
            outs = drafts[:n] + [rows[n]]
        else:
            outs = await _sampled(ver, rows, drafts, params, sampler, masks)
        d.update(len(drafts), len(outs) - 1)
        for o in outs[:-1]:           # the accepted drafts, fed in this pass
            if c is not None:
                c.advance(o)
            run.n_decode += 1
            if not run.accept(o):
                return
            context.append(o)
            eng.cached_ids.append(o)
        t = outs[-1]
