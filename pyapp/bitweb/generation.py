"""Generation bookkeeping shared by the GPU engine (bitweb.engine) and the numpy model
(bitweb.numpy_model): prompt checks, stop rules, streaming text, timing, the result, and
ChatSession (multi-turn over either). Stdlib only; runs in Pyodide.

Context length: the KV cache holds `n_ctx` positions: `max_context` when given (at most the
file's context length), else the default of fit_context(): the file's context length unless the
KV cache (K and V of every layer, f16 by default: KV_CACHE; "f32" on request) would pass
KV_BUDGET bytes or one layer's K buffer a binding limit, then the largest multiple of 256
positions that fits (Bonsai's 32768 .. 65536 positions would need 3.75 .. 9.5 GB in f16). A prompt must leave room for one generated token
(len(prompt) <= n_ctx - 1), else ContextError before any GPU work. Generation stops
with stop_reason "context" once prompt + generated tokens == n_ctx (the last token
then sits at position n_ctx - 1 and is never fed back). Nothing ever writes past the cache.

KV cache. Per layer a K and a V buffer of n_head_kv x n_ctx x head_dim values (K roped), "f16"
(KV_CACHE, the default) or "f32". f16 values are `array<f16>` where the device has shader-f16 and
the same bytes in `array<u32>` (pack2x16float) elsewhere: named variants (`kernels.ops.kv_variant`)
chosen once in Engine.__init__ and logged with the cache's size (Engine.kv_bytes).
`shaders/common_kv.wgsl` is the one place that stores (clamp to +-65504, round to f16) and loads;
attention computes in f32. The numpy model stores `bitweb.ref.ops.kv_round` of its rows (nearest
even after the same clamp); kernel cases give f16 caches one f16 ulp of latitude (WGSL lets a
conversion pick either neighbour; lavapipe rounds to nearest even, bit for bit the mirror's).
Where the GPU's and numpy's f32 K differ in the last bit they can round to neighbouring halves
(logits ~1e-3 apart on the test models), so comparisons meant to be exact (the transformers
oracle, sampling draws, perplexity) pin kv_cache="f32".

Default contexts with the f16 cache: Bonsai-1.7B 32768 -> 9216 (112 KiB per position), 4B / 8B ->
7168 (144 KiB); f32 4608 and 3584; 2B4T keeps 4096 (0.31 GB f16). The library's default also fits
its `gpuMemory` budget (upload.fit_model: the KV cache gets what upload.estimate_bytes leaves). An
explicit context a layer's buffer cannot hold is a LimitsError naming the limit, the shortfall and
the most positions that fit. ChatSession raises ContextError when the conversation no longer fits.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from bitweb.chat import ChatFormat
from bitweb.kernels.ops import KV_TYPES, kv_cache_bytes
from bitweb.options import DEFAULT_KV_CACHE
from bitweb.sampling import Sampler, SamplingParams


class ContextError(ValueError):
    """A prompt that does not fit the context (or is empty / has ids outside the vocabulary)."""


KV_BUDGET = 1 << 30        # bytes the default context lets the KV cache take (max_context may ask for more)
CONTEXT_STEP = 256         # a default context below the file's is a multiple of this
KV_CACHE = DEFAULT_KV_CACHE   # the KV cache's value type unless asked otherwise (KV_TYPES: "f16", "f32")


def check_kv(kv: str, error=ValueError) -> str:
    """The one check of a KV cache value type (the engine raises its EngineError, the numpy model and
    the context sizes ValueError)."""
    if kv not in KV_TYPES:
        raise error(f"KV cache type {kv!r}: must be one of {', '.join(KV_TYPES)}")
    return kv


def kv_bytes(cfg, n_ctx: int, kv: str = KV_CACHE, per_buffer: bool = False) -> int:
    """Bytes of the KV cache at n_ctx positions: K and V rows of n_head_kv * head_dim values of
    type kv (kernels.ops.KV_BYTES: f16 2, f32 4) per layer; per_buffer: one layer's K (or V)
    buffer, which one binding must hold. The one KV-size function of the engine, the numpy model,
    the library's memory estimate and the benchmarks."""
    return (1 if per_buffer else 2 * cfg.n_layer) * kv_cache_bytes(cfg.n_head_kv, cfg.head_dim, n_ctx, check_kv(kv))


def fit_context(cfg, max_context: int | None = None, max_binding: int | None = None,
                budget: int | None = None, kv: str = KV_CACHE) -> tuple[int, str]:
    """(n_ctx, note). max_context given: min(max_context, the file's context length), note "" (the
    caller checks it fits: upload.check_limits). Else the file's context length, or, when the KV
    cache (values of type kv) would pass `budget` bytes (default KV_BUDGET) or one layer's K buffer
    `max_binding` bytes, the largest multiple of CONTEXT_STEP that fits (any smaller size that fits
    below that), with a note that says why. ContextError when not even 2 positions fit."""
    if max_context:
        return min(int(max_context), cfg.n_ctx), ""
    budget = KV_BUDGET if budget is None else budget
    per_pos = kv_bytes(cfg, 1, kv)
    caps = [(budget // per_pos, f"the KV cache ({kv} K and V, {per_pos} bytes per position) is held "
                                f"to {budget / 2**20:.0f} MiB by default")]
    if max_binding:
        caps.append((max_binding // kv_bytes(cfg, 1, kv, per_buffer=True),
                     f"one layer's K buffer must fit this GPU's maxStorageBufferBindingSize ({max_binding} bytes)"))
    n, why = min(caps)
    if n >= cfg.n_ctx:
        return cfg.n_ctx, ""
    if n >= CONTEXT_STEP:
        n -= n % CONTEXT_STEP
    if n < 2:
        raise ContextError(f"not even 2 positions of context fit: {why}")
    return n, (f"context {n} of the model's {cfg.n_ctx} positions ({kv_bytes(cfg, n, kv) / 2**20:.0f} MiB "
               f"of KV cache): {why}; ask for more with a larger context setting")


STOP_REASONS = ("eos", "eot", "max_tokens", "context", "stopped")


@dataclass
class GenerateResult:
    prompt_ids: list
    ids: list                       # generated ids, without the stop token
    text: str                       # decoded `ids`
    stop_reason: str                # one of STOP_REASONS
    prefill_ms: float               # prompt forward pass + first token
    decode_ms_per_token: float      # mean over the following tokens (0 when there were none)
    dispatches_per_token: float     # GPU dispatches per decoded token (0 for numpy)
    host_calls_per_token: float     # calls from Python into the GPU backend per decoded token
    counters: dict = field(default_factory=dict)
    stop_id: int | None = None      # the EOS / EOT id that ended generation
    speculative: str = ""           # the drafting (bitweb.speculative: "lookup", "draft") or "" without
    drafted: int = 0                # tokens drafted and verified (speculative decoding)
    accepted: int = 0               # of those, the ones the target model agreed with (emitted or not)

    JSON_KEYS = ("prompt_ids", "ids", "text", "stop_reason", "prefill_ms", "decode_ms_per_token",
                 "dispatches_per_token", "host_calls_per_token")

    def to_json(self) -> dict:
        out = {k: getattr(self, k) for k in self.JSON_KEYS}
        if self.speculative:
            out.update(speculative=self.speculative, drafted=self.drafted, accepted=self.accepted)
        return out


def now_ms() -> float:
    return time.perf_counter() * 1000.0


def check_prompt(prompt_ids, n_ctx: int, n_vocab: int) -> list:
    ids = list(prompt_ids)
    if not ids:
        raise ContextError("empty prompt: at least one token is needed (add_bos gives one)")
    for i, t in enumerate(ids):
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < n_vocab:
            raise ContextError(f"prompt token {i} is {t!r}, not a token id (vocabulary has {n_vocab})")
    if len(ids) > n_ctx - 1:
        raise ContextError(f"prompt has {len(ids)} tokens but the context holds {n_ctx}: at most {n_ctx - 1} "
                           f"prompt tokens leave room for one generated token (shorten the prompt "
                           f"or load with a larger max_context)")
    return ids


class GenerationRun:
    """Bookkeeping shared by the GPU engine and the numpy model: stop rules, streaming
    text, timing. The caller computes tokens; accept(tok) says whether to go on."""

    def __init__(self, tokenizer, n_ctx, prompt_ids, max_tokens, on_token=None, should_stop=None,
                 ignore_eos=False, stop_ids=None):
        self.tok = tokenizer
        self.ignore_eos = ignore_eos
        self.stop_ids = tokenizer.stop_ids if stop_ids is None else frozenset(stop_ids)
        self.n_ctx = n_ctx
        self.prompt_ids = list(prompt_ids)
        self.max_tokens = int(max_tokens)
        self.on_token = on_token
        self.should_stop = should_stop
        self.ids, self.pieces = [], []
        self.stop_reason, self.stop_id = None, None
        self.stream = tokenizer.stream(skip_special=True)      # specials not rendered, as llama.cpp prints text
        self.t0 = now_ms()
        self.t_prefill = None
        self.n_decode = 0

    def prefill_done(self):
        self.t_prefill = now_ms()

    def check_constraint(self, constraint) -> None:
        """A grammar constraint (bitweb.grammar.Constraint) must be built with this run's stop ids
        and cannot go with ignore_eos (it ends on a stop token)."""
        if constraint is None:
            return
        if self.ignore_eos:
            raise ValueError("ignore_eos cannot be used with a grammar constraint: it ends on a stop token")
        if constraint.stop_ids != self.stop_ids:
            raise ValueError(f"the constraint's stop ids {sorted(constraint.stop_ids)} differ from generation's "
                             f"{sorted(self.stop_ids)}: build it with stop_ids={sorted(self.stop_ids)}")

    def is_stop_token(self, t: int) -> bool:
        return not self.ignore_eos and t in self.stop_ids

    def accept(self, t: int) -> bool:
        """Take one sampled token; False when generation ends (stop_reason set)."""
        if self.is_stop_token(t):
            self.stop_id = t
            self.stop_reason = "eos" if t == self.tok.eos_id else "eot"
            return False
        self.ids.append(t)
        piece = self.stream.push(t)
        self.pieces.append(piece)
        if self.on_token:
            self.on_token(t, piece)
        if len(self.ids) >= self.max_tokens:
            self.stop_reason = "max_tokens"
        elif len(self.prompt_ids) + len(self.ids) >= self.n_ctx:
            self.stop_reason = "context"
        elif self.should_stop is not None and self.should_stop():
            self.stop_reason = "stopped"
        return self.stop_reason is None

    def result(self, counters: dict | None = None, dispatches: int = 0, host_calls: int = 0) -> GenerateResult:
        """counters: backend counter deltas over the decode steps (after prefill)."""
        t_end = now_ms()
        tail = self.stream.flush()
        if tail:
            self.pieces.append(tail)
            if self.on_token:
                self.on_token(None, tail)
        n = max(self.n_decode, 1)
        t_pre = self.t_prefill if self.t_prefill is not None else t_end
        return GenerateResult(
            prompt_ids=self.prompt_ids, ids=list(self.ids), text="".join(self.pieces),
            stop_reason=self.stop_reason or "max_tokens", prefill_ms=round(t_pre - self.t0, 3),
            decode_ms_per_token=round((t_end - t_pre) / n, 3) if self.n_decode else 0.0,
            dispatches_per_token=round(dispatches / n, 3) if self.n_decode else 0.0,
            host_calls_per_token=round(host_calls / n, 3) if self.n_decode else 0.0,
            counters=dict(counters or {}), stop_id=self.stop_id)


@dataclass
class Start:
    """What generate() of the GPU engine and of the numpy model begin with (start())."""
    params: SamplingParams
    prompt: list                    # the checked prompt ids
    run: GenerationRun
    sampler: Sampler
    budget: int                     # tokens this run can generate: min(max_tokens, n_ctx - len(prompt))
    keep: int                       # cache rows kept: the common prefix with cached_ids, short of the last prompt token


def start(gen, prompt_ids, params=None, max_tokens: int = 128, on_token=None, should_stop=None,
          ignore_eos: bool = False, stop_ids=None, constraint=None) -> Start:
    """The shared preamble of Engine.generate and NumpyModel.generate (`gen`: either; it has n_ctx,
    cfg, tokenizer and cached_ids): the prompt and the constraint checked (ContextError, ValueError
    naming what is wrong), the run's bookkeeping, its sampler, budget and the KV rows to keep."""
    params = params or SamplingParams()
    prompt = check_prompt(prompt_ids, gen.n_ctx, gen.cfg.n_vocab)
    run = GenerationRun(gen.tokenizer, gen.n_ctx, prompt, max_tokens, on_token, should_stop, ignore_eos, stop_ids)
    run.check_constraint(constraint)
    if constraint is not None and constraint.n_vocab > gen.cfg.n_vocab:
        raise ValueError(f"the constraint's vocabulary has {constraint.n_vocab} tokens, the model {gen.cfg.n_vocab}")
    keep = min(common_prefix(gen.cached_ids, prompt), len(prompt) - 1)
    return Start(params, prompt, run, Sampler(params), min(int(max_tokens), gen.n_ctx - len(prompt)), keep)


def common_prefix(a, b) -> int:
    """Length of the common prefix of two id lists (the KV-cache entries to keep)."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class ChatSession:
    """Multi-turn chat over an Engine (or a NumpyModel): the conversation is re-rendered with
    the file's chat format (bitweb.chat.ChatFormat) each turn and generate() keeps the KV cache
    for the common token prefix, so only the new user turn (and the re-tokenized reply, when it
    differs) is prefilled; generation stops on the format's stop_ids. A conversation that no
    longer fits the context raises ContextError. enable_thinking (True / False / None = the
    template's default) goes to templates with a thinking switch (format.has_thinking);
    replies are kept whole, <think> block included."""

    def __init__(self, eng, system: str | None = None, enable_thinking: bool | None = None):
        self.eng = eng
        self.format = ChatFormat.from_tokenizer(eng.tokenizer)
        self.enable_thinking = enable_thinking
        self.messages = [{"role": "system", "content": system}] if system else []

    async def send(self, user_text: str, params: SamplingParams | None = None, max_tokens: int = 256,
                   on_token=None, should_stop=None) -> GenerateResult:
        msgs = self.messages + [{"role": "user", "content": user_text}]
        ids = self.format.ids(msgs, enable_thinking=self.enable_thinking)
        res = self.eng.generate(ids, params, max_tokens, on_token=on_token, should_stop=should_stop,
                                stop_ids=self.format.stop_ids)
        if hasattr(res, "__await__"):
            res = await res
        self.messages = msgs + [{"role": "assistant", "content": res.text}]
        return res
