"""The GPU engine: a BitNet model on one WebGPU device, its decode and prefill plans, generate()
(stdlib only; runs in Pyodide). The forward pass as steps (the block recipe, its ops) is
bitweb.blocks; the load's checks, uploads and kernel list bitweb.upload; generation bookkeeping
shared with the numpy model (stop rules, streaming text, context checks, ChatSession)
bitweb.generation. The decode loops (greedy one step ahead of the host, under a grammar) are
bitweb.decoding's, speculative decoding (drafts verified in one multi-row pass) bitweb.speculative's.

Prefill. Prompt rows go through the prefill plan (plans cached per power-of-two row bucket) in
chunks of `prefill_rows` (64); `_bounded` keeps at most PREFILL_IN_FLIGHT = 2 chunks unfinished:
after chunk i is submitted it awaits `dev.fence()` of chunk i - 1 (in the browser
`queue.onSubmittedWorkDone()`, asked right after that chunk's submit, so the GPU never waits for
the host; natively a sync), and asks `should_stop()` before every chunk after the first. So a
Stop, New chat or model switch during a long prompt leaves at most the running chunk and one
queued, and the worker's event loop runs between chunks (an abort message is handled
mid-prefill). A stop in the prefill gives stop_reason "stopped", no token, and `cached_ids` ends
with the rows written. Token-by-token prefill (prefill kernels still compiling) goes in windows of
SWITCH_WINDOW tokens the same way, the rest of the prompt through the prefill plan once its kernels
are compiled. The last chunk ends with the LM head on its last row (`lmhead: gemv` LASTROW, or
`dense: gemv` LASTROW) and the sampler, so the first token comes out of the prefill plan.
`bitweb bench stop MODEL` measures Stop -> GPU idle (PERFORMANCE.md).

Host calls per token: greedy one step at a time 3 (write params {pos, penalty, 1/T}, run the
plan, read 4 bytes), +1 with a repetition penalty (its ids), sampling 4 (read the top-k block,
write the chosen id back to `token`); one step ahead natively 4 (the encode is a call), in the
browser 3 (JS `replay` encodes and submits). Counters: plan_dispatches vs direct_dispatches
(`generate --stats`)."""
from __future__ import annotations

import asyncio
import struct

from bitweb import decoding, formats
from bitweb import speculative as spec
from bitweb.blocks import EngineError, GPUModel, decode_steps, prefill_steps
from bitweb.generation import (KV_CACHE, ContextError, GenerateResult, check_kv, check_prompt,
                               kv_bytes, now_ms, start)
from bitweb.kernels import ops
from bitweb.model import Model, a8_linears
from bitweb.options import ACTIVATIONS, LM_HEADS    # lm_head= options: re-quantize the LM head on load (None: as in the file)
from bitweb.sampling import Sampler, SamplingError, SamplingParams, choose, penalty_ids
from bitweb.upload import (MAX_PENALTY_IDS, PREFILL_ROWS, Fit, check_limits, check_support,
                           compile_keys, compile_pipelines, compile_steps, fit_model, state_buffers,
                           upload_tensors, widest_row)

TOPK_MIN = 64                 # candidates read back for temperature sampling (more when top_k asks)
SWITCH_WINDOW = 4             # prompt tokens read token by token between two looks at prefill_ready
PREFILL_IN_FLIGHT = 2         # prefill chunks unfinished on the GPU queue at once (Engine._bounded)


def _align(n: int, a: int = 256) -> int:
    return -(-n // a) * a


class Engine:
    """A BitNet model on one GPU device. Create with `await Engine.load(...)`.

    Buffers: every GGUF tensor in its own buffer, bytes unchanged (token_embd / output split in
    shards of whole rows when larger than maxStorageBufferBindingSize); the KV cache (per layer a
    K and a V buffer of [n_head_kv][n_ctx][head_dim] values, `kv_cache` "f16" (stored as the
    device allows: `kv_variant`, kernels/ops.py) or "f32"); activations x (residual stream), qkv, o,
    g (FFN), logits; `params` (ops.params: pos, penalty ...), `token` (the sampled id, fed to the
    next step's embedding on the GPU), `top` (top-k ids | values + softmax stats).

    Decode is recorded once as dev.plan([...]) (ARCHITECTURE.md, "Decode and prefill plans")
    and replayed per token: write params, run the plan, read the token (greedy) or the top-k
    block (sampling; the host then writes the chosen id back to `token`). Greedy decode without
    a repetition penalty runs one step ahead of the host (bitweb.decoding; `overlap = False`
    turns that off: the same tokens, one step at a time).
    """

    def __init__(self, dev, model: Model, activations: str, n_ctx: int, log=None, kv_cache: str = KV_CACHE):
        if activations not in ACTIVATIONS:
            raise EngineError(f"activations {activations!r}: must be one of {ACTIVATIONS}")
        self.kv_cache = check_kv(kv_cache, EngineError)      # the KV cache's value type
        # f16 values as array<f16> (shader-f16) or pack2x16float pairs in u32: chosen once, here
        f16 = bool(dev is not None and dev.caps.shader_f16)
        self.kv_f16 = f16 if kv_cache == "f16" else None
        self.kv_variant = ops.kv_variant(kv_cache, f16)        # its name (logged at load)
        self.dev, self.model, self.cfg = dev, model, model.cfg
        self.activations, self.a8 = activations, a8_linears(model.cfg, activations)   # (f32 for non-ternary linears)
        self.n_ctx, self.log = n_ctx, log
        self.overlap = True           # greedy decode one step ahead of the host (bitweb.decoding)
        self.packed = self.cfg.linear_type.packed
        # what the steps see (the block recipe's narrow handle); w, shards, table_types and buf are its dicts
        self.gpu_model = h = GPUModel(dev, model, self.a8, self.packed, n_ctx, kv_cache, self.kv_f16)
        self.w = h.w                  # GGUF tensor name -> Buffer
        self.shards = h.shards        # table tensor name -> [(r0, r1, Buffer)]
        self.table_types = h.table_types    # table tensor name -> its Format on the GPU when not the file's
        self.buf = h.buf              # activation / state buffers
        self.cached_ids = []          # tokens whose K/V rows are in the cache
        self._topk = {}               # k -> (top-k plan item, top buffer, value offset)
        self._plans = {}              # decode: k -> Plan; prefill: (rows, k or None) -> Plan; ("S", "mask", k):
                                      # the masked sampler alone (S_i of the grammar's steps)
        self.prefill_rows = 1
        self.context_note = ""        # why the default context is below the file's (generation.fit_context)
        self.load_ms = 0.0
        self.weight_bytes = self.gpu_bytes = 0      # file tensor bytes; bytes of every GPU buffer made at load
        self.n_pipelines = 0          # distinct pipelines the model's plans use (compiled at load: compile_pipelines)
        self.stage_ms = {}            # load stage -> [start, end] ms since load() began (upload, compile, plans)
        self.prefill_compiled = None  # load(wait_prefill=False): the task compiling the prefill kernels
        self.prefill_path = ""        # the last prompt's plan: "prefill" (multi-row) or "decode" (token by token)
        self._mask = None             # generate(constraint=): the Constraint the sampler follows, else None
        self._mask_key = None         # key of the mask in buf["mask"] (bitweb.grammar Constraint.key)
        self._mask_words = None       # that mask's words (the host's copy, for top-k candidates)
        self.verifier = None          # speculative decoding's per-row plans (bitweb.speculative.Verifier)

    # ------------------------------------------------------------------ loading
    @classmethod
    async def load(cls, dev, gf, src, activations: str = "a8", max_context: int | None = None,
                   progress=None, log=None, prefill_rows: int = PREFILL_ROWS,
                   lm_head: str | None = None, kv_cache: str = KV_CACHE,
                   wait_prefill: bool = True, fit: Fit | None = None) -> "Engine":
        """Pick the context (max_context, else the default that fits: upload.fit_model, its note in
        `context_note`; `fit`: what fit_model made of this file already, whose context and KV cache type
        then stand for max_context and kv_cache), check limits, upload every tensor from `src`
        (FileSource / BytesSource natively, a JS Blob or File in the browser), compile the kernels and
        record the decode plans. The kernels compile while the weights upload (compile_pipelines: in the
        browser every createComputePipelineAsync of a batch is in flight together in the GPU process):
        first the greedy decode plans', then the sampler's top-k and the prefill plan's (with
        wait_prefill=False where compiles run in the background: right behind them). wait_prefill=False:
        the engine is returned once the decode kernels are ready, the prefill kernels go on compiling
        (`prefill_compiled`); until they are done prompts are prefilled token by token through the
        decode plan (the same tokens: `prefill_ready`), so neither ready nor a first reply waits for
        them (seconds per kernel on a CPU rasteriser). Where the driver compiles at the first dispatch
        (lavapipe) they are compiled off the queue too (Device.warm: a second device in a thread) before
        `prefill_compiled` is done, so the first prompt after that does not stall on them.
        progress(stage, done, total): stage "upload" (bytes), "compile" (distinct pipelines
        compiled; the decode kernels' when wait_prefill is False), "ready". stage_ms: [start, end]
        of "upload", "compile" and "plans" ([start, end] ms from the start of load()); the
        prefill kernels' "compile_prefill" is added when they are done.
        lm_head="q8_0": the LM head's float rows are converted to Q8_0 on the GPU after upload
        (kernels/requant.py: 34 bytes per 32 values instead of 64 for F16); a tied head is also the
        embedding table, which then reads the Q8_0 rows too.
        kv_cache: "f16" (default: half the memory; array<f16> with shader-f16, else pack2x16float
        pairs in u32, chosen here once from the device's features and logged) or "f32"."""
        t0 = now_ms()
        if fit is None:
            fit = fit_model(dev, Model.from_gguf(gf), max_context, kv_cache)
        model, cfg, n_ctx, note = fit.model, fit.model.cfg, fit.n_ctx, fit.note
        if n_ctx < 2:
            raise ContextError(f"max_context {fit.max_context}: the context must hold at least 2 positions")
        eng = cls(dev, model, activations, n_ctx, log, fit.kv_cache)
        eng.context_note = note
        if lm_head is not None and lm_head not in LM_HEADS:
            raise EngineError(f"lm_head {lm_head!r}: must be one of {LM_HEADS} (or None: as in the file)")
        eng.gpu_model.lm_head = None if lm_head is None else formats.by_name(lm_head)   # "q8_0": formats.Q8_0
        row = 4 * widest_row(cfg)                                           # widest prefill row
        eng.prefill_rows = max(1, min(int(prefill_rows), n_ctx, dev.max_binding // row))
        check_support(eng.gpu_model)
        check_limits(eng.gpu_model)

        def span(name, start):
            eng.stage_ms[name] = [round(start - t0, 1), round(now_ms() - t0, 1)]

        steps = eng._compile_steps()
        first, later = compile_keys(steps)
        dev.check_pipelines(first + later)      # workgroup memory / size: refused here, before any upload
        warm = [] if wait_prefill else steps[1]   # (lavapipe: compiled off the queue, dev.warm)
        n_first = len({dev.pipeline_key(*k) for k in first})
        eng.n_pipelines = n_first + len({dev.pipeline_key(*k) for k in later})
        total = eng.n_pipelines if wait_prefill else n_first
        together = not wait_prefill and dev.compiles_in_background   # prefill kernels beside the decode ones

        async def decode_kernels():
            c0 = now_ms()
            await compile_pipelines(dev, first, progress, 0, total)
            span("compile", c0)

        async def prefill_kernels(after):  # after: the decode kernels' task (None: beside it)
            if after is not None:
                await after
            c1 = now_ms()
            await compile_pipelines(dev, later, progress if wait_prefill else None, n_first, total)
            await dev.warm(warm)
            span("compile_prefill", c1)
        decoding = asyncio.ensure_future(decode_kernels())        # while the weights upload
        compiling = asyncio.ensure_future(prefill_kernels(None if together else decoding))
        try:
            u0 = now_ms()
            await upload_tensors(eng.gpu_model, src, progress)
            span("upload", u0)
            if wait_prefill:
                await compiling
            else:                          # ready with the decode kernels; the prefill kernels go on
                await decoding
                eng.prefill_compiled = compiling
                compiling.add_done_callback(lambda t: t.cancelled() or t.exception())   # retrieved
            p0 = now_ms()
            await eng._build()             # bind groups and decode plans (their pipelines are compiled)
            if eng.prefill_rows > 1 and wait_prefill:      # the prefill plan now, not at the first prompt
                await eng._prefill_plan(eng.prefill_rows, 0)
            await dev.sync()               # the uploads have landed: load time is real
            span("plans", p0)
        except BaseException:
            for t in (decoding, compiling):
                t.cancel()
            await asyncio.gather(decoding, compiling, return_exceptions=True)     # nothing left running
            raise
        eng.load_ms = now_ms() - t0
        eng.weight_bytes = sum(ti.nbytes for ti in model.tensors())
        eng.gpu_bytes = sum(b.size for b in eng._all_buffers())
        if progress: progress("ready", 1, 1)
        if log and note:
            log(f"engine: {note}")
        if log:
            mode = activations if eng.a8 else ("f32" if activations == "f32" else f"f32 ({cfg.linear_type.name} linears take no {activations})")
            log(f"engine: {cfg.summary()}; {mode} activations; context {n_ctx}; KV cache {eng.kv_variant} "
                f"({eng.kv_bytes / 2**20:.1f} MiB); loaded in {eng.load_ms:.0f} ms; decode plan "
                f"{eng.plan_greedy.n_dispatches} dispatches ({eng.dispatches_per_layer} per layer)")
        return eng

    @property
    def tokenizer(self):
        return self.model.tokenizer

    @property
    def kv_bytes(self) -> int:
        """Bytes of the KV cache (K and V of every layer at n_ctx positions)."""
        return kv_bytes(self.cfg, self.n_ctx, self.kv_cache)

    @property
    def prefill_ready(self) -> bool:
        """Whether prompts go through the prefill plan: its kernels are compiled (always after
        load(wait_prefill=True); with wait_prefill=False once `prefill_compiled` is done)."""
        return self.prefill_compiled is None or self.prefill_compiled.done()

    def table_type(self, ti) -> formats.Format:
        """The GGML type of a table (token_embd / output) as it is on the GPU."""
        return self.gpu_model.table_type(ti)

    def _compile_steps(self) -> tuple:
        """(first, later) steps of the plans' pipelines (compile_steps; the top-k of TOPK_MIN among the later)."""
        return compile_steps(self.gpu_model, self.prefill_rows, min(TOPK_MIN, self.cfg.n_vocab))

    async def _build(self):
        """Create the state buffers, bind the decode steps and record the decode plans."""
        dev, cfg = self.dev, self.cfg
        state_buffers(self.gpu_model, self.prefill_rows)
        d = decode_steps(self.gpu_model)
        self.items_layers = items = await self._instantiate(d["embed"] + d["blocks"])
        self.items_head = await self._instantiate(d["head"])
        self.items_argmax = await self._instantiate(d["argmax"])
        self.plan_layers = dev.plan(items)
        self.plan_greedy = self._plans[0] = dev.plan(items + self.items_head + self.items_argmax)
        # overlapped greedy decode: even steps token -> token2, odd steps token2 -> token
        blocks = items[len(d["embed"]):]
        to2 = await self._instantiate(d["argmax2"])
        self.plans_ahead = (dev.plan(items + self.items_head + to2),
                            dev.plan(await self._instantiate(d["embed2"]) + blocks + self.items_head
                                     + self.items_argmax))
        self.plan_forward = dev.plan(items + self.items_head)     # a step without its sampler (grammars)
        self.dispatches_per_layer = len(blocks) / cfg.n_layer

    async def _instantiate(self, steps):
        return [await step.instantiate(self.dev, bufs, self.buf) for step, bufs in steps]

    async def _sampler_item(self, k):
        """(plan item, top buffer, offset of the values) of the top-k selection (k = 0: argmax);
        k = ("mask", k): the same under the grammar's mask (buf["mask"], made on first use)."""
        if k == 0:
            return self.items_argmax[0], None, 0
        if k not in self._topk:
            cfg, B, dev = self.cfg, self.buf, self.dev
            masked = isinstance(k, tuple)
            n = k[1] if masked else k
            bufs = {"logits": B["logits"], "penalty_ids": B["pids"], "params": B["params"]}
            if masked:
                if "mask" not in B:
                    B["mask"] = dev.create_buffer(4 * ops.mask_words(cfg.n_vocab), label="mask")
                bufs["mask"] = B["mask"]
            if n == 0:
                item = await ops.argmax(cfg.n_vocab, mask=True).instantiate(dev, dict(bufs, token=B["token"]))
                self._topk[k] = (item, None, 0)
            else:
                off = _align(4 * n)
                top = dev.create_buffer(off + 4 * (n + 2), label=f"top{n}")
                item = await ops.topk(cfg.n_vocab, n, mask=masked).instantiate(dev, dict(
                    bufs, top_ids=(top, 0, 4 * n), top_vals=(top, off, 4 * (n + 2))))
                self._topk[k] = (item, top, off)
        return self._topk[k]

    async def _decode_plan(self, k: int):
        """The per-token plan: embedding, blocks, LM head, argmax (k = 0) or top-k."""
        if k not in self._plans:
            item, *_ = await self._sampler_item(k)
            self._plans[k] = self.dev.plan(self.items_layers + self.items_head + [item])
        return self._plans[k]

    # ------------------------------------------------------------------ prefill (M > 1 rows)
    async def _prefill_plan(self, M: int, k):
        """Plan over M rows: _prefill_steps, then (k not None) argmax (k = 0) / top-k."""
        key = (M, k)
        if key not in self._plans:
            items = await self._instantiate(prefill_steps(self.gpu_model, M, k is not None))
            if k is not None:
                items.append((await self._sampler_item(k))[0])
            self._plans[key] = self.dev.plan(items)
        return self._plans[key]

    # ------------------------------------------------------------------ running
    def _write_params(self, m: int, pos: int, params: SamplingParams, context: list):
        pids = penalty_ids(params, context)
        if pids:
            self.dev.write_buffer(self.buf["pids"], 0, struct.pack(f"<{len(pids)}I", *pids))
        inv_t = 1.0 / params.temperature if params.temperature > 0 else 1.0
        self.dev.write_buffer(self.buf["params"], 0, ops.params(m=m, pos=pos, n_ids=len(pids),
                                                                 penalty=params.repeat_penalty, inv_temp=inv_t))

    def _feed(self, token: int):
        self.dev.write_buffer(self.buf["token"], 0, struct.pack("<I", token))

    def _k(self, params: SamplingParams):
        """0: greedy (GPU argmax); else the number of top candidates read back. Under a grammar
        (generate(constraint=)): ("mask", that number), the sampler that reads buf["mask"]."""
        k = 0 if params.greedy else min(max(TOPK_MIN, params.top_k), 256, self.cfg.n_vocab)
        return k if self._mask is None else ("mask", k)

    async def _finish(self, params: SamplingParams, sampler: Sampler) -> int:
        """After a plan ending in argmax / top-k: the next token (left in `token` for the next step)."""
        dev, key = self.dev, self._k(params)
        k = key[1] if isinstance(key, tuple) else key
        if k == 0:
            return await self._read_token(self.buf["token"])
        _, top, off = await self._sampler_item(key)
        raw = await dev.read(top, 0, off + 4 * (k + 2))
        u = sampler.rng.random()
        ok = self._allowed_by_mask()
        cands, stats = self._candidates(raw, k, off, params, ok)
        t = choose(params, cands, stats, u)
        if t is None:                    # the draw fell past the candidates: exact, from all logits
            sampler.full_fallbacks += 1
            t = choose(params, await self._all_candidates(self.buf["logits"], 0, ok), None, u)
        self._feed(t)
        return t

    def _candidates(self, raw, k: int, off: int, params: SamplingParams, ok) -> tuple:
        """(cands, stats) for bitweb.sampling.choose from a top-k block (ids, then values and the
        softmax stats at off); ok: the grammar's allowed(id) or None. Under a grammar the live
        allowed tokens come first; the rest is dropped."""
        ids = struct.unpack_from(f"<{k}I", raw, 0)
        vals = struct.unpack_from(f"<{k + 2}f", raw, off)
        cands = list(zip(vals[:k], ids))
        if ok is not None:
            cands = [(v, i) for v, i in cands if ok(i) and v == v]
            if not cands:
                raise EngineError("no token the grammar allows has a number for its logit (NaN logits)")
        complete = len(cands) < k or k == self.cfg.n_vocab               # every (allowed) token is a candidate
        return cands, (None if complete else (vals[k] * (1.0 / params.temperature), vals[k + 1]))

    async def _all_candidates(self, buf, offset: int, ok) -> list:
        """Every (logit, id) of the logits at buf[offset..] (allowed by ok when given), sorted as
        bitweb.sampling sorts candidates."""
        V = self.cfg.n_vocab
        lg = struct.unpack(f"<{V}f", await self.dev.read(buf, offset, 4 * V))
        keep = range(V) if ok is None else [i for i in range(V) if ok(i) and lg[i] == lg[i]]
        return [(lg[i], i) for i in sorted(keep, key=lambda i: (-lg[i], i))]

    def _allowed_by_mask(self):
        """Under a grammar: token id -> whether the current mask allows it; else None."""
        if self._mask is None:
            return None
        w, n = self._mask_words, len(self._mask_words)
        return lambda t: (t >> 5) < n and (w[t >> 5] >> (t & 31)) & 1 == 1

    def _write_mask(self, remaining: int):
        """The grammar's mask for the next token (bitweb.grammar Constraint.mask) into buf["mask"],
        when it differs from the one there (Constraint.key)."""
        c = self._mask
        words = c.mask(remaining)
        if c.key != self._mask_key:
            self.dev.write_buffer(self.buf["mask"], 0, words)
            self._mask_key = c.key
        self._mask_words = words

    async def _read_token(self, buf, then=None) -> int:
        t = struct.unpack("<I", await self.dev.read(buf, 0, 4, then=then))[0]
        if t >= self.cfg.n_vocab:
            what = "every logit the grammar allows" if self._mask is not None else "every logit"
            raise EngineError(f"the GPU argmax returned {t}: {what} is NaN (a broken model or kernel)")
        return t

    async def _step(self, pos: int, params: SamplingParams, sampler: Sampler, context: list) -> int:
        """Decode: run the token already in `token` at position pos; return the next token."""
        self._write_params(1, pos, params, context)
        self.dev.run(await self._decode_plan(self._k(params)))
        return await self._finish(params, sampler)

    async def _prefill(self, tokens: list, pos0: int, params: SamplingParams, sampler: Sampler,
                       context: list, should_stop=None) -> int | None:
        """Run tokens at positions pos0.. and return the token after the last one, or None when
        should_stop() said so between two chunks (self.cached_ids then ends with the rows written).
        Chunks of prefill_rows rows through the multi-row kernels (one plan run each); a single
        token (or prefill_rows = 1), or any prompt while the prefill kernels are still compiling
        (wait_prefill=False: in windows of SWITCH_WINDOW, the rest by the prefill plan once its kernels
        are compiled, prefill_path "decode+prefill") goes token by token through the decode plan: the
        same tokens (A8 rows are quantised alike), slower per token. At most PREFILL_IN_FLIGHT chunks
        are on the GPU queue at once (_bounded): a Stop takes effect within a chunk or two."""
        by_rows = len(tokens) > 1 and self.prefill_rows > 1 and self.prefill_ready
        waiting = len(tokens) > 1 and self.prefill_rows > 1 and not by_rows   # (on the prefill kernels)
        self.prefill_path = "prefill" if by_rows else "decode"
        C = max(1, self.prefill_rows)
        W = SWITCH_WINDOW if waiting else C                 # tokens between two looks at prefill_ready
        head = tokens[:-1] if not by_rows else tokens       # the decode path's last token is a _step
        starts = range(0, len(head), W)
        switched = False                                    # halted because the prefill kernels are there
        def halt():                                         # asked between two windows
            nonlocal switched
            if should_stop is not None and should_stop():
                return True
            switched = waiting and self.prefill_ready
            return switched

        async def chunk(c0: int):
            part = head[c0:c0 + W]
            if not by_rows:                                   # token by token through the decode plan
                zero = SamplingParams()
                for j, t in enumerate(part):
                    self._feed(t)
                    self._write_params(1, pos0 + c0 + j, zero, [])
                    self.dev.run(self.plan_layers)
                return
            last = c0 + C >= len(tokens)
            m = len(part)
            self.dev.write_buffer(self.buf["p.ids"], 0, struct.pack(f"<{m}I", *part))
            self._write_params(m, pos0 + c0, params if last else SamplingParams(), context if last else [])
            bucket = min(C, 1 << (m - 1).bit_length())
            self.dev.run(await self._prefill_plan(bucket, self._k(params) if last else None))
        done = await self._bounded([lambda c0=c0: chunk(c0) for c0 in starts], halt)
        if done < len(starts):                                # the rows queued are written
            k = min(len(head), done * W)
            self.cached_ids = self.cached_ids + tokens[:k]
            if not switched:                                  # stopped
                return None
            t = await self._prefill(tokens[k:], pos0 + k, params, sampler, context, should_stop)
            self.prefill_path = "decode+prefill"
            return t
        if not by_rows:
            self._feed(tokens[-1])
            return await self._step(pos0 + len(tokens) - 1, params, sampler, context)
        return await self._finish(params, sampler)

    async def _bounded(self, units, halt) -> int:
        """Queue units of GPU work (async callables that each submit one chunk) with at most
        PREFILL_IN_FLIGHT of them unfinished on the queue: after unit i is submitted, wait for unit
        i - PREFILL_IN_FLIGHT + 1 (dev.fence: the browser's onSubmittedWorkDone, so the GPU never
        waits for the host; natively a sync). halt() is asked before each unit after the first;
        returns the number of units queued. The waits let the browser worker's event loop run, so
        an abort message is seen (and a compile's end) during a long prefill."""
        fences = []
        for i, unit in enumerate(units):
            if i and halt():
                return i
            await unit()
            if i + 1 < len(units):                            # (the last one: its result is read next)
                fences.append(self.dev.fence())
                if len(fences) >= PREFILL_IN_FLIGHT:
                    await fences.pop(0)
        return len(units)

    async def generate(self, prompt_ids, params: SamplingParams | None = None, max_tokens: int = 128,
                       on_token=None, should_stop=None, ignore_eos: bool = False, stop_ids=None,
                       constraint=None, speculative=None) -> GenerateResult:
        """Generate after prompt_ids (see GenerateResult). Reuses the KV cache for the longest
        common prefix with the tokens already in it (ChatSession relies on this). stop_ids:
        the tokens that end generation (default the tokenizer's; ChatFormat.stop_ids).
        constraint: a bitweb.grammar.Constraint (fresh, built with the same stop ids): every token
        is sampled among the ones it allows (the mask on the GPU, bitweb.decoding), told how many
        tokens are left so the output is complete by max_tokens / the context's end.
        speculative: None, "lookup" (prompt lookup drafts) or a loaded Engine of the same vocabulary
        on the same device (a draft model): bitweb.speculative; the same tokens when greedy, the
        same distribution when sampling, counted in the result's drafted / accepted."""
        params = params or SamplingParams()
        if params.repeat_last_n > MAX_PENALTY_IDS:
            raise SamplingError(f"repeat_last_n = {params.repeat_last_n}: the GPU engine supports at most {MAX_PENALTY_IDS}")
        self.dev.check_alive()
        st = start(self, prompt_ids, params, max_tokens, on_token, should_stop, ignore_eos, stop_ids, constraint)
        drafter = spec.drafter(self, speculative)
        run, sampler, budget, keep, prompt = st.run, st.sampler, st.budget, st.keep, st.prompt
        if max_tokens <= 0:
            return run.result()
        self.cached_ids = self.cached_ids[:keep]
        context = list(prompt)
        self._mask, self._mask_key = constraint, None
        try:
            if constraint is not None:
                await self._sampler_item(self._k(params))     # (the masked sampler and buf["mask"])
                self._write_mask(budget)
            t = await self._prefill(prompt[keep:], keep, params, sampler, context, run.should_stop)
            if t is None:                # stopped during the prefill: no token (cached_ids: the rows written)
                run.stop_reason = "stopped"
                return run.result()
            self.cached_ids = list(prompt)
            run.prefill_done()
            c0 = dict(self.dev.counters)
            f0 = sampler.full_fallbacks
            discarded = 0
            if drafter is not None and drafter.usable:
                await spec.decode(self, run, t, params, sampler, context, budget, drafter)
            elif constraint is not None:
                discarded = await decoding.constrained(self, run, t, params, sampler, context, budget)
            elif self.overlap and params.greedy and not params.penalized:
                discarded = await decoding.ahead(self, run, t, params)
            else:
                while run.accept(t):
                    context.append(t)
                    nxt = await self._step(len(self.cached_ids), params, sampler, context)
                    self.cached_ids.append(t)
                    t = nxt
                    run.n_decode += 1
        finally:
            self._mask = self._mask_words = None
        c = {k: v - c0.get(k, 0) for k, v in self.dev.counters.items()}
        c["full_fallbacks"] = sampler.full_fallbacks - f0
        c["discarded_steps"] = discarded
        res = run.result(c, c["dispatches"], c["host_calls"])
        if drafter is not None:
            res.speculative, res.drafted, res.accepted = drafter.mode, drafter.drafted, drafter.accepted
        return res

    async def forward_logits(self, ids, raw: bool = False) -> list:
        """Logits (n_vocab floats; raw: the float32 bytes) after every token of ids, run one token
        at a time through the decode plan from position 0. For tests, diagnostics and `bitweb
        perplexity` (reads all logits per token)."""
        ids = list(ids)
        if not 0 < len(ids) <= self.n_ctx:
            raise ContextError(f"forward_logits: {len(ids)} tokens for a context of {self.n_ctx}")
        check_prompt(ids[:1], 2, self.cfg.n_vocab)
        V, out = self.cfg.n_vocab, []
        self.cached_ids = []
        for pos, t in enumerate(ids):
            check_prompt([t], 2, V)
            self._feed(t)
            self._write_params(1, pos, SamplingParams(), [])
            self.dev.run(self.plan_greedy)
            row = bytes(await self.dev.read(self.buf["logits"], 0, 4 * V))
            out.append(row if raw else list(struct.unpack(f"<{V}f", row)))
        self.cached_ids = ids
        return out

    def kv_ranges(self, n: int) -> list:
        """The KV cache of positions [0, n) as (buffer, offset, size) ranges, in the order of
        export_kv's bytes: per layer K then V, per KV head the n rows of head_dim values (each
        buffer is [n_head_kv][n_ctx][head_dim]: a head's rows are contiguous, the heads are not)."""
        if not 0 < n <= self.n_ctx:
            raise ContextError(f"KV cache positions [0, {n}) for a context of {self.n_ctx}")
        row = self.cfg.head_dim * ops.KV_BYTES[self.kv_cache]
        if (n * row) % 4:
            raise EngineError(f"a KV head of {self.cfg.head_dim} {self.kv_cache} values is not whole words")
        return [(self.buf[f"{kv}.{i}"], h * self.n_ctx * row, n * row)
                for i in range(self.cfg.n_layer) for kv in ("k", "v") for h in range(self.cfg.n_head_kv)]

    def kv_export_bytes(self, n: int) -> int:
        """Bytes export_kv(n) gives: kv_bytes at n positions."""
        return kv_bytes(self.cfg, n, self.kv_cache)

    async def export_kv(self, n: int | None = None):
        """The KV cache of the first n cached tokens (default all of cached_ids) as one block of
        bytes (kv_ranges' order): natively bytes, in the browser a JS Uint8Array that never enters
        the wasm heap (dev.read_ranges). restore_kv takes it back."""
        n = len(self.cached_ids) if n is None else n
        if n > len(self.cached_ids):
            raise ContextError(f"export_kv: {n} positions asked, {len(self.cached_ids)} are cached")
        return await self.dev.read_ranges(self.kv_ranges(n))

    def restore_kv(self, ids, data, rows: int | None = None):
        """Write the KV cache of positions [0, len(ids)) from `data`, an export_kv block of `rows`
        positions (default len(ids); rows >= len(ids): its first positions are taken), made by
        this model with this KV type; cached_ids becomes ids (the next generate prefills only what
        follows them). data: bytes, or in the browser a JS ArrayBuffer / Uint8Array (zero copy)."""
        ids = list(ids)
        n, rows = len(ids), len(ids) if rows is None else rows
        if n > rows:
            raise ContextError(f"restore_kv: {n} tokens for a saved block of {rows} positions")
        size = len(data) if isinstance(data, (bytes, bytearray, memoryview)) else int(data.byteLength)
        if size != self.kv_export_bytes(rows):
            raise EngineError(f"restore_kv: {size} bytes for {rows} positions; this model's KV cache "
                              f"({self.kv_cache}) takes {self.kv_export_bytes(rows)}")
        check_prompt(ids, self.n_ctx + 1, self.cfg.n_vocab)
        self.cached_ids = []                       # (a failure below leaves nothing claimed)
        stride = rows * self.cfg.head_dim * ops.KV_BYTES[self.kv_cache]
        for j, (buf, offset, length) in enumerate(self.kv_ranges(n)):
            self.dev.write_buffer(buf, offset, data, j * stride, length)
        self.cached_ids = ids

    def reset(self):
        """Forget the cached tokens (the next generate prefills everything)."""
        self.cached_ids = []

    def _all_buffers(self):
        tops = [top for _, top, _ in self._topk.values() if top is not None]
        tops += self.verifier.buffers() if self.verifier is not None else []
        return list(self.w.values()) + list(self.buf.values()) + [b for s in self.shards.values() for *_, b in s] + tops

    def close(self):
        if self.prefill_compiled is not None and not self.prefill_compiled.done():
            self.prefill_compiled.cancel()      # (Device.warm's thread stops after its pipeline)
        for b in self._all_buffers():
            b.destroy()
        for d in (self.w, self.buf, self.shards):
            d.clear()
