"""The GPU engine's decode loops after the prefill (stdlib only; runs in Pyodide): functions of an
Engine (`self`: they drive its plans, buffers and host state) that bitweb.engine's generate() picks:
`ahead` (greedy, no repetition penalty: one step ahead of the host) and `constrained` (under a
grammar). The plain loop (one step at a time) is in generate(); drafting is bitweb.speculative.

Greedy decode runs one step ahead of the host (Engine.overlap, default True; used when the next
token never needs the host: temperature 0 and no repetition penalty, whose ids the host writes
each step). Step i feeds generated token t_i at position len(prompt) + i and writes t_{i+1}.
Two recorded plans alternate: even steps read the token from buffer `token` and write the next
into `token2`, odd steps the reverse (t_i lies in `token` for even i). Per token, in queue order:

    read t_i          queued after step i (which reads it), before step i + 1 (which overwrites it)
    submit step i + 1 encoded earlier: all the GPU waits for once the read returns
    host work on t_i  stop rules, streaming text, on_token, should_stop: while step i + 1 runs
    prepare i + 2     params write (its pos; writeBuffer is ordered with submits, so step i + 1
                      keeps its own) and dev.encode (natively ~10 us of FFI calls per dispatch)

Host calls per token: write params, encode (native only), submit, read. A step is prepared only
when it can matter (step i: i + 1 < max_tokens and its position len(prompt) + i < n_ctx - 1, the
context limits of bitweb.generation) and submitted only when the latest token read is not a stop token. So a step runs
whose result is not used only when t_{i+1} is a stop token (1 step: it fed the stop token) or
should_stop() ends the run (2 steps). Such a step writes K/V rows past `cached_ids` (which never
includes them: it is exactly what the one-step-at-a-time loop leaves), and the scratch buffers
(x, logits, ...), which nothing reads across generate() calls; the next prefill rewrites those
cache rows before any step reads them. counters["discarded_steps"] counts such steps.

Under a grammar (generate(constraint=...), bitweb.grammar) the sampler reads the allowed tokens
from `mask` (n_vocab bits, sampling.wgsl MASK), written before the sampler runs and only when it
changed (Constraint.key). Greedy decoding then reads 4 bytes per token as before; sampling drops
the left-out candidates by the same mask. Mask i (for t_{i+1}) needs t_i on the host, but the
forward pass of t_i does not: each step is two submissions, the forward pass F_i (embedding,
blocks, LM head: `plan_forward`) and the masked sampler S_i. Per token, in queue order:

    S_i, read t_{i+1}   the masked sampler writes t_{i+1} into `token`; its read is queued
    F_{i+1}             (greedy) submitted with the read, before its result is back: it reads
                        t_{i+1} from `token` on the GPU (dev.read(then=): in the browser it runs
                        while the read returns; natively right after)
    host work on t_{i+1}  advance the constraint, stop rules, text, on_token, mask i + 1 and its
                        upload: while F_{i+1} runs
    S_{i+1} ...

F_{i+1} runs whose result is not used only when t_{i+1} is a stop token or should_stop ends the
run (1 step, counted in discarded_steps). Sampling (top-k) submits F_{i+1} once the host has
chosen and written t_{i+1}, before its own work on it. Engine.overlap = False: F_i and S_i in one
plan after the host's work on t_i (the same tokens; a before / after for `bitweb bench constrained`).
"""
from __future__ import annotations

from bitweb.generation import GenerationRun
from bitweb.sampling import Sampler, SamplingParams


async def ahead(self, run: GenerationRun, t: int, params: SamplingParams) -> int:
    """Greedy decode one step ahead of the host (module docstring). t = t_0, read by the
    prefill, lies in `token`. Returns the number of steps run whose result was not used."""
    dev, n0, tokens = self.dev, len(self.cached_ids), (self.buf["token"], self.buf["token2"])
    submitted, ready = 0, None          # steps 0 .. submitted - 1 are on the queue; ready: the next

    def prepare(i: int):
        """Params and command buffer of step i (feeding t_i), when it can matter. Called after
        step i - 1 is submitted, so the params write lands after it on the queue."""
        nonlocal ready
        if i + 1 < run.max_tokens and n0 + i + 1 < self.n_ctx:
            self._write_params(1, n0 + i, params, [])
            ready = dev.encode(self.plans_ahead[i % 2])

    def submit(last: int):
        """Submit the prepared step unless the latest token read (t_0 for steps 0 and 1, else
        the one before the step's own) is a stop token."""
        nonlocal ready, submitted
        if ready is not None and not run.is_stop_token(last):
            dev.run(ready)
            submitted += 1
        ready = None
    prepare(0)
    submit(t)
    prepare(1)
    submit(t)
    i = 0
    while run.accept(t):                 # step i was submitted (accept implies it could matter)
        self.cached_ids.append(t)
        run.n_decode += 1
        prepare(i + 2)                   # while the GPU runs step i + 1
        i += 1
        t = await self._read_token(tokens[i % 2])   # t_i, by step i - 1; queued after step i
        submit(t)                        # step i + 1: all the GPU waits for after the read
    return submitted - run.n_decode

async def constrained(self, run: GenerationRun, t: int, params: SamplingParams, sampler: Sampler,
                      context: list, budget: int) -> int:
    """Decode under the grammar self._mask (module docstring: F_i, then S_i). t = t_0, read by
    the prefill. Returns the number of forward passes run whose result was not used."""
    dev, c, n0 = self.dev, self._mask, len(self.cached_ids)
    if not self.overlap:             # one step at a time (F_i and S_i together after the host's work)
        while True:
            c.advance(t)
            if not run.accept(t):
                return 0
            context.append(t)
            self._write_mask(budget - len(run.ids))
            nxt = await self._step(len(self.cached_ids), params, sampler, context)
            self.cached_ids.append(t)
            t = nxt
            run.n_decode += 1
    key = self._k(params)
    if ("S",) + key not in self._plans:
        self._plans[("S",) + key] = dev.plan([(await self._sampler_item(key))[0]])
    sample, greedy = self._plans[("S",) + key], params.greedy

    def can(i):                      # F_i (feeding t_i) matters: t_i accepted leaves a step to take
        return i + 1 < run.max_tokens and n0 + i + 1 < self.n_ctx

    def forward(i, ctx):
        self._write_params(1, n0 + i, params, ctx)
        dev.run(self.plan_forward)

    pending = can(0) and not run.is_stop_token(t)
    if pending:
        forward(0, context + [t])
    i = 0
    while True:
        c.advance(t)                 # the last token too: the constraint ends where the text does
        if not run.accept(t):
            return int(pending)
        context.append(t)
        self.cached_ids.append(t)    # (F_i has written its K / V rows)
        self._write_mask(budget - len(run.ids))
        dev.run(sample)              # S_i -> t_{i+1}
        i += 1
        run.n_decode += 1
        if greedy and can(i):
            self._write_params(1, n0 + i, params, context)     # F_i's position (S_{i-1} has its params)
            t = await self._read_token(self.buf["token"], then=self.plan_forward)
            pending = True
            if params.penalized:     # S_i's penalty ids include t_i
                self._write_params(1, n0 + i, params, context + [t])
        else:
            t = await self._finish(params, sampler)
            pending = can(i) and not run.is_stop_token(t)
            if pending:
                forward(i, context + [t])
