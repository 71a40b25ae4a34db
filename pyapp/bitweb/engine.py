"""The GPU engine: a BitNet model on one WebGPU device, its decode and prefill plans, generate()
(stdlib only; runs in Pyodide). Generation bookkeeping shared with the numpy model (stop rules,
streaming text, context checks, ChatSession) is bitweb.generation.

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
"""
from __future__ import annotations

import asyncio
import copy
import struct

from bitweb import formats, gpu
from bitweb.generation import (KV_CACHE, ContextError, GenerateResult, GenerationRun, check_prompt,
                               common_prefix, fit_context, now_ms)
from bitweb.kernels import bitlinear, bitlinear_tiled, dense, glue, lmhead, ops, requant
from bitweb.model import LINEARS, TERNARY_TYPES, Model
from bitweb.sampling import Sampler, SamplingError, SamplingParams, choose, penalty_ids

ACTIVATIONS = ("a8", "f32")
LM_HEADS = ("q8_0",)          # lm_head= options: re-quantize the LM head on load (None: as in the file)
PREFILL_ROWS = 64            # prompt rows per multi-row (prefill) plan run
TOPK_MIN = 64                 # candidates read back for temperature sampling (more when top_k asks)
MAX_PENALTY_IDS = 4096        # repeat_last_n cap (size of the penalty_ids buffer)
NEED_STORAGE_BUFFERS = 7      # the fused QKV gemv binds x, norm, mult, y and three weights


class EngineError(ValueError):
    """A model / option combination the GPU engine does not run (names it)."""


class _Names(dict):
    """Stand-in buffers for listing a model's steps before any buffer exists (Engine._compile_keys):
    every name maps to itself."""

    def __missing__(self, key):
        return key

    def get(self, key, default=None):
        return key


def _check_kv(kv_cache: str) -> str:
    if kv_cache not in ops.KV_TYPES:
        raise EngineError(f"kv_cache {kv_cache!r}: must be one of {', '.join(ops.KV_TYPES)}")
    return kv_cache


def _align(n: int, a: int = 256) -> int:
    return -(-n // a) * a


# ============================================================================ the block, once
# Linear groups: one GPU dispatch each where the weights are ternary / binary (outputs side by side
# in y), and the key of the group's output multipliers (.scale tensors) in Engine.buf.
GROUPS = {"qkv": ("attn_q", "attn_k", "attn_v"), "o": ("attn_output",), "gu": ("ffn_gate", "ffn_up"),
          "down": ("ffn_down",)}


def block(do, i: int) -> list:
    """Block i as [(Step, {bind name: buffer})]; `do` says how each step runs: DecodeOps (one row)
    or PrefillOps (M rows). Widths per row: e = n_embd, q = n_head * head_dim, kv = n_head_kv *
    head_dim, f = n_ff. A norm the architecture lacks (model.Arch) is None, and the linear then
    reads its input as is (Engine._check_support says which such blocks the GPU runs)."""
    steps = []
    # qkv = [Wq | Wk | Wv] . rmsnorm(x, attn_norm)               x [e] -> qkv [q + 2 kv]
    steps += do.linear(i, "qkv", "x", "qkv", norm="attn_norm")
    # RoPE q, k at pos; K, V rows -> cache; causal GQA           qkv -> o [q]
    steps += do.attention(i, "qkv", "o")
    # x += Wo . rmsnorm(o, attn_sub_norm)                        o -> x
    steps += do.linear(i, "o", "o", "x", norm="attn_sub_norm", residual=True)
    # g = act(Wg . n) * (Wu . n), n = rmsnorm(x, ffn_norm)       x -> g [f]
    steps += do.ffn(i, "x", "g", norm="ffn_norm")
    # x += Wd . rmsnorm(g, ffn_sub_norm)                         g -> x
    steps += do.linear(i, "down", "g", "x", norm="ffn_sub_norm", residual=True)
    return steps


class _Ops:
    """What DecodeOps and PrefillOps share: the model's tensors and shapes, the activations'
    buffers (decode: B[name], prefill: B["p." + name])."""
    prefix = ""

    def __init__(self, eng):
        self.eng, self.cfg, self.B = eng, eng.cfg, eng.buf
        self.fmt, self.eps, self.shapes = eng.cfg.linear_type, eng.cfg.eps, eng.cfg.tensor_shapes()

    def w(self, i: int, name: str):
        """The buffer of blk[i].<name>, or None when the architecture has no such tensor."""
        ti = getattr(self.eng.model.blk[i], name)
        return None if ti is None else self.eng.w[ti.name]

    def buf(self, name: str):
        return self.B[self.prefix + name]


class DecodeOps(_Ops):
    """The block at decode (one row). Ternary / binary linears: one bitlinear gemv per group, its
    norm, output multipliers and residual add fused (5 dispatches per block). Float linears
    (F16 / BF16 / F32 / Q8_0): a dense gemv per weight (norm fused), residual add and gate
    activation as glue steps (11 per block). Where bitlinear.split_parts (SwiftShader) q, k and v
    are one gemv each (7 dispatches per block), so that every one-part linear shares bitlinear's
    run-time shape pipeline; n_cap: the largest n_in of the linears (it sizes that pipeline)."""

    def __init__(self, eng):
        super().__init__(eng)
        self.n_cap = max(self.cfg.n_embd, self.cfg.q_dim, self.cfg.n_ff)

    def linear(self, i, group, x, y, norm, residual=False):
        B, names, nw = self.B, GROUPS[group], self.w(i, norm)
        n_in = self.shapes[names[0]][0]
        outs = [self.shapes[n][1] for n in names]
        if self.eng.ternary and len(names) > 1 and bitlinear.split_parts(self.eng.dev):
            steps, col = [], 0                    # one gemv per part, into its columns of y
            for n, n_out in zip(names, outs):
                st = bitlinear.gemv(self.fmt, n_in, n_out, a8=self.eng.a8, norm=nw is not None, eps=self.eps,
                                    dev=self.eng.dev, n_cap=self.n_cap, shape=True, y0=col)
                bufs = {"x": self.buf(x), "mult": self.eng._mult1(i, n), "y": self.buf(y), "w0": self.w(i, n)}
                steps.append((st, bufs if nw is None else dict(bufs, norm=nw)))
                col += n_out
            return steps
        if self.eng.ternary:
            st = bitlinear.gemv(self.fmt, n_in, tuple(outs) if len(outs) > 1 else outs[0], a8=self.eng.a8,
                                norm=nw is not None, residual=residual, eps=self.eps, dev=self.eng.dev,
                                n_cap=self.n_cap)
            bufs = {"x": self.buf(x), "mult": self.eng._mult(i, group), "y": self.buf(y)}
            bufs.update({f"w{j}": self.w(i, n) for j, n in enumerate(names)})
            return [(st, bufs if nw is None else dict(bufs, norm=nw))]
        steps, col = [], 0
        for n, n_out in zip(names, outs):
            st = dense.gemv(self.fmt, n_in, n_out, norm=nw is not None, eps=self.eps)[0]
            if len(names) > 1:                    # the part's columns of y
                st = st.with_constants(ROW0=col)
            bufs = {"w0": self.w(i, n), "x": self.buf(x), "y": B["tmp"] if residual else self.buf(y)}
            steps.append((st, bufs if nw is None else dict(bufs, norm=nw)))
            col += n_out
        if residual:
            steps.append((glue.add(outs[0]), {"y": self.buf(y), "a": B["tmp"], "mult": self.eng._mult(i, group)}))
        return steps

    def attention(self, i, qkv, o):
        cfg, B = self.cfg, self.B
        attn = ops.attention_decode(cfg.n_head, cfg.n_head_kv, cfg.head_dim, self.eng.n_ctx, mode=cfg.rope,
                                    qk_norm=cfg.qk_norm, eps=cfg.eps, kv=self.eng.kv_cache, f16=self.eng.kv_f16)
        if len(attn) != 1:
            raise EngineError("attention with splits > 1 is not wired")
        kv = {"k_cache": B[f"k.{i}"], "v_cache": B[f"v.{i}"], "params": B["params"], "freqs": B["freqs"]}
        if cfg.qk_norm:
            kv["qkn"] = B[f"qkn.{i}"]
        return [(attn[0], dict(kv, qkv=self.buf(qkv), o=self.buf(o)))]

    def ffn(self, i, x, g, norm):
        cfg, B, nw = self.cfg, self.B, self.w(i, norm)
        if self.eng.ternary:
            st = bitlinear.gate_up(self.fmt, cfg.n_embd, cfg.n_ff, a8=self.eng.a8, act=cfg.ffn, norm=nw is not None,
                                   eps=self.eps, dev=self.eng.dev, n_cap=self.n_cap)
            bufs = {"x": self.buf(x), "mult": self.eng._mult(i, "gu"), "y": self.buf(g),
                    "gate": self.w(i, "ffn_gate"), "up": self.w(i, "ffn_up")}
            return [(st, bufs if nw is None else dict(bufs, norm=nw))]
        steps = []
        for n, out in (("ffn_gate", B["gate"]), ("ffn_up", B["up"])):
            bufs = {"w0": self.w(i, n), "x": self.buf(x), "y": out}
            steps.append((dense.gemv(self.fmt, cfg.n_embd, cfg.n_ff, norm=nw is not None, eps=self.eps)[0],
                          bufs if nw is None else dict(bufs, norm=nw)))
        steps.append((glue.act_mul(cfg.n_ff, cfg.ffn), {"y": self.buf(g), "a": B["gate"], "u": B["up"],
                                                        "mult": self.eng._mult(i, "gu")}))
        return steps


class PrefillOps(_Ops):
    """The block over M prompt rows. Before each multi-row matmul an rmsnorm step (A8: it also
    quantizes the rows, with the decode kernel's workgroup size so the int8 rows equal decode's;
    a linear without a norm before it: A8 rows of its input (rmsnorm NO_NORM), or, f32, no step:
    the matmul reads the rows as they are); ternary / binary weights: bitlinear_tiled, float
    weights: dense matmul (+ glue steps). mm() is the one place that picks the matmul kernel."""
    prefix = "p."

    def __init__(self, eng, M: int):
        super().__init__(eng)
        self.M, self.a8 = M, eng.a8 and eng.ternary
        B = self.B
        self.normed = {"q": B["p.q"], "scale": B["p.s"]} if self.a8 else {"x": B["p.n"]}

    def norm(self, n: int, x, w):
        """The matmul input from the M rows of x (width n): (steps, its bindings). rmsnorm into
        A8 rows (p.q, p.s) or f32 rows (p.n); without a norm weight (w None) A8 rows of x as is,
        or, f32, no step and x itself."""
        B, a8 = self.B, self.a8
        if w is None and not a8:
            return [], {"x": x}
        st = ops.rmsnorm(n, self.M, eps=self.eps, a8=a8, wg=bitlinear.choose(self.eng.dev, n, True).wg if a8 else 64,
                         norm=w is not None)
        bufs = {"x": x, "q": B["p.q"], "scale": B["p.s"]} if a8 else {"x": x, "y": B["p.n"]}
        return [(st, bufs if w is None else dict(bufs, norm=w))], self.normed

    def mm(self, n_in, n_out, w, y, mult, residual=False, y_stride=0, y_col0=0, inp=None):
        """y (+)= W . input rows (inp: the bindings norm() returned; default the normed rows)
        (columns y_col0.. of rows y_stride wide when y_stride)."""
        B, M, P = self.B, self.M, self.B["params"]
        inp = self.normed if inp is None else inp
        if self.eng.ternary:
            st = bitlinear_tiled.matmul(self.fmt, n_in, n_out, M, a8=self.a8, residual=residual,
                                        y_stride=y_stride, y_col0=y_col0, dev=self.eng.dev)
            return [(st, dict(inp, params=P, mult=mult, y=y, w=w))]
        st = dense.matmul(self.fmt, n_in, n_out, M)[0].with_constants(ROW0=y_col0, Y_STRIDE=y_stride or n_out)
        if not residual:
            return [(st, {"w0": w, "x": inp["x"], "y": y, "params": P})]
        return [(st, {"w0": w, "x": inp["x"], "y": B["p.tmp"], "params": P}),
                (glue.add(M * n_out), {"y": y, "a": B["p.tmp"], "mult": mult})]

    def linear(self, i, group, x, y, norm, residual=False):
        names = GROUPS[group]
        n_in = self.shapes[names[0]][0]
        outs = [self.shapes[n][1] for n in names]
        steps, inp = self.norm(n_in, self.buf(x), self.w(i, norm))
        if len(names) == 1:
            return steps + self.mm(n_in, outs[0], self.w(i, names[0]), self.buf(y), self.eng._mult(i, group),
                                   residual=residual, inp=inp)
        col = 0                               # parts side by side in rows of sum(outs)
        for n, n_out in zip(names, outs):
            steps += self.mm(n_in, n_out, self.w(i, n), self.buf(y), self.eng._mult1(i, n), y_stride=sum(outs),
                             y_col0=col, inp=inp)
            col += n_out
        return steps

    def attention(self, i, qkv, o):
        cfg, B = self.cfg, self.B
        kv = {"k_cache": B[f"k.{i}"], "v_cache": B[f"v.{i}"], "params": B["params"]}
        rope = {"qkn": B[f"qkn.{i}"]} if cfg.qk_norm else {}
        n_ctx, t = self.eng.n_ctx, {"kv": self.eng.kv_cache, "f16": self.eng.kv_f16}
        return [(ops.rope(cfg.n_head, cfg.n_head_kv, cfg.head_dim, n_ctx, self.M, mode=cfg.rope,
                          qk_norm=cfg.qk_norm, eps=cfg.eps, **t),
                 dict(kv, qkv=self.buf(qkv), freqs=B["freqs"], **rope)),
                (ops.attention_prefill(cfg.n_head, cfg.n_head_kv, cfg.head_dim, n_ctx, self.M, **t),
                 dict(kv, qkv=self.buf(qkv), o=self.buf(o)))]

    def ffn(self, i, x, g, norm):
        cfg, B, M = self.cfg, self.B, self.M
        e, ff = cfg.n_embd, cfg.n_ff
        steps, inp = self.norm(e, self.buf(x), self.w(i, norm))
        if self.eng.ternary:
            return steps + [(bitlinear_tiled.gate_up(self.fmt, e, ff, M, a8=self.a8, act=cfg.ffn, dev=self.eng.dev),
                             dict(inp, params=B["params"], mult=self.eng._mult(i, "gu"), y=self.buf(g),
                                  gate=self.w(i, "ffn_gate"), up=self.w(i, "ffn_up")))]
        steps += self.mm(e, ff, self.w(i, "ffn_gate"), B["p.gate"], None, inp=inp)
        steps += self.mm(e, ff, self.w(i, "ffn_up"), B["p.up"], None, inp=inp)
        return steps + [(glue.act_mul(M * ff, cfg.ffn), {"y": self.buf(g), "a": B["p.gate"], "u": B["p.up"],
                                                         "mult": self.eng._mult(i, "gu")})]


class Engine:
    """A BitNet model on one GPU device. Create with `await Engine.load(...)`.

    Buffers: every GGUF tensor in its own buffer, bytes unchanged (token_embd / output split in
    shards of whole rows when larger than maxStorageBufferBindingSize); the KV cache (per layer a
    K and a V buffer of [n_head_kv][n_ctx][head_dim] values, `kv_cache` "f16" (stored as the
    device allows: `kv_variant`, kernels/ops.py) or "f32"); activations x (residual stream), qkv, o,
    g (FFN), logits; `params` (ops.params: pos, penalty ...), `token` (the sampled id, fed to the
    next step's embedding on the GPU), `top` (top-k ids | values + softmax stats).

    Decode is recorded once as dev.plan([...]) (see ARCHITECTURE.md, "Decode dispatch plan")
    and replayed per token: write params, run the plan, read the token (greedy) or the top-k
    block (sampling; the host then writes the chosen id back to `token`). Greedy decode without
    a repetition penalty runs one step ahead of the host (module docstring; `overlap = False`
    turns that off: the same tokens, one step at a time).
    """

    def __init__(self, dev, model: Model, activations: str, n_ctx: int, log=None, kv_cache: str = KV_CACHE):
        if activations not in ACTIVATIONS:
            raise EngineError(f"activations {activations!r}: must be one of {ACTIVATIONS}")
        self.kv_cache = _check_kv(kv_cache)                  # the KV cache's value type
        # f16 values as array<f16> (shader-f16) or pack2x16float pairs in u32: chosen once, here
        f16 = bool(dev is not None and dev.caps.shader_f16)
        self.kv_f16 = f16 if kv_cache == "f16" else None
        self.kv_variant = ops.kv_variant(kv_cache, f16)        # its name (logged at load)
        self.dev, self.model, self.cfg = dev, model, model.cfg
        self.activations, self.a8 = activations, activations == "a8"
        self.n_ctx = n_ctx
        self.log = log
        self.overlap = True           # greedy decode one step ahead of the host (module docstring)
        self.ternary = self.cfg.linear_type in TERNARY_TYPES
        self.w = {}                   # GGUF tensor name -> Buffer
        self.shards = {}              # table tensor name -> [(r0, r1, Buffer)]
        self.table_types = {}         # table tensor name -> GGML type on the GPU when not the file's
        self.lm_head = None           # "q8_0": the LM head is re-quantized on load
        self.buf = {}                 # activation / state buffers
        self.cached_ids = []          # tokens whose K/V rows are in the cache
        self._topk = {}               # k -> (top-k plan item, top buffer, value offset)
        self._plans = {}              # decode: k -> Plan; prefill: (rows, k or None) -> Plan
        self.prefill_rows = 1
        self.context_note = ""        # why the default context is below the file's (generation.fit_context)
        self.load_ms = 0.0
        self.weight_bytes = self.gpu_bytes = 0      # file tensor bytes; bytes of every GPU buffer made at load
        self.n_pipelines = 0          # distinct pipelines the model's plans use (compiled at load: _compile)
        self.stage_ms = {}            # load stage -> [start, end] ms since load() began (upload, compile, plans)
        self.prefill_compiled = None  # load(wait_prefill=False): the task compiling the prefill kernels
        self.prefill_path = ""        # the last prompt's plan: "prefill" (multi-row) or "decode" (token by token)

    # ------------------------------------------------------------------ loading
    @classmethod
    async def load(cls, dev, gf, src, activations: str = "a8", max_context: int | None = None,
                   progress=None, log=None, prefill_rows: int = PREFILL_ROWS,
                   lm_head: str | None = None, kv_cache: str = KV_CACHE,
                   wait_prefill: bool = True) -> "Engine":
        """Pick the context (max_context, else the default that fits: generation.fit_context, its
        note in `context_note`), check limits, upload every tensor from `src` (FileSource / BytesSource natively, a JS
        Blob or File in the browser), compile the kernels and record the decode plans. The kernels
        compile while the weights upload (_compile: in the browser every createComputePipelineAsync
        of a batch is in flight together in the GPU process): first the greedy decode plans', then
        the sampler's top-k and the prefill plan's. wait_prefill=False: the engine is returned once
        the decode kernels are ready, the prefill kernels go on compiling (`prefill_compiled`);
        until they are done prompts are prefilled token by token through the decode plan (the
        same tokens: `prefill_ready`), so neither ready nor a first reply waits for them (a CPU
        rasteriser takes seconds per kernel).
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
        model = Model.from_gguf(gf)
        cfg = model.cfg
        n_ctx, note = fit_context(cfg, max_context, min(dev.max_binding, dev.max_buffer),
                                  kv=_check_kv(kv_cache))           # (checked here: an EngineError)
        if n_ctx < 2:
            raise ContextError(f"max_context {max_context}: the context must hold at least 2 positions")
        eng = cls(dev, model, activations, n_ctx, log, kv_cache)
        eng.context_note = note
        if lm_head is not None and lm_head not in LM_HEADS:
            raise EngineError(f"lm_head {lm_head!r}: must be one of {LM_HEADS} (or None: as in the file)")
        eng.lm_head = lm_head
        row = 4 * max(cfg.n_embd, cfg.q_dim + 2 * cfg.kv_dim, cfg.n_ff)     # widest prefill row
        eng.prefill_rows = max(1, min(int(prefill_rows), n_ctx, dev.max_binding // row))
        eng._check_support()
        eng.check_limits()

        def span(name, start):
            eng.stage_ms[name] = [round(start - t0, 1), round(now_ms() - t0, 1)]

        first, later = eng._compile_keys()
        dev.check_pipelines(first + later)      # workgroup memory / size: refused here, before any upload
        n_first = len({dev.pipeline_key(*k) for k in first})
        eng.n_pipelines = n_first + len({dev.pipeline_key(*k) for k in later})
        total = eng.n_pipelines if wait_prefill else n_first

        async def compile_all():
            c0 = now_ms()
            await eng._compile(first, progress, 0, total)
            span("compile", c0)
            c1 = now_ms()
            await eng._compile(later, progress if wait_prefill else None, n_first, total)
            span("compile_prefill", c1)
        compiling = asyncio.ensure_future(compile_all())    # while the weights upload
        try:
            u0 = now_ms()
            await eng._upload(src, progress)
            span("upload", u0)
            if wait_prefill:
                await compiling
            else:                          # ready with the decode kernels; the prefill kernels go on
                await eng._compile(first)  # (in flight already: this waits for them)
                eng.prefill_compiled = compiling
                compiling.add_done_callback(lambda t: t.cancelled() or t.exception())   # retrieved
            p0 = now_ms()
            await eng._build()             # bind groups and decode plans (their pipelines are compiled)
            if eng.prefill_rows > 1 and wait_prefill:      # the prefill plan now, not at the first prompt
                await eng._prefill_plan(eng.prefill_rows, 0)
            await dev.sync()               # the uploads have landed: load time is real
            span("plans", p0)
        except BaseException:
            compiling.cancel()
            await asyncio.gather(compiling, return_exceptions=True)     # nothing left running
            raise
        eng.load_ms = now_ms() - t0
        eng.weight_bytes = sum(ti.nbytes for ti in model.tensors())
        eng.gpu_bytes = sum(b.size for b in eng._all_buffers())
        if progress:
            progress("ready", 1, 1)
        if log and note:
            log(f"engine: {note}")
        if log:
            log(f"engine: {cfg.summary()}; {activations} activations; context {n_ctx}; KV cache "
                f"{eng.kv_variant} ({eng.kv_bytes / 2**20:.1f} MiB); "
                f"loaded in {eng.load_ms:.0f} ms; decode plan {eng.plan_greedy.n_dispatches} dispatches "
                f"({eng.dispatches_per_layer} per layer)")
        return eng

    @property
    def tokenizer(self):
        return self.model.tokenizer

    @property
    def kv_bytes(self) -> int:
        """Bytes of the KV cache (K and V of every layer at n_ctx positions)."""
        return 2 * self.cfg.n_layer * ops.kv_cache_bytes(self.cfg.n_head_kv, self.cfg.head_dim, self.n_ctx,
                                                         self.kv_cache)

    @property
    def prefill_ready(self) -> bool:
        """Whether prompts go through the prefill plan: its kernels are compiled (always after
        load(wait_prefill=True); with wait_prefill=False once `prefill_compiled` is done)."""
        return self.prefill_compiled is None or self.prefill_compiled.done()

    def _check_support(self):
        m, cfg = self.model, self.cfg
        if not self.ternary:
            scaled = [getattr(b, n + "_scale").name for b in m.blk for n in LINEARS if getattr(b, n + "_scale")]
            if scaled:
                raise EngineError(f"tensor {scaled[0]!r}: .scale tensors with float ({self.cfg.linear_type}) "
                                  f"linears are not supported by the GPU engine")
        for ti in (m.token_embd, m.lm_head):
            if ti.type_name not in ops.TABLE_TYPES:
                raise EngineError(f"tensor {ti.name!r} type {ti.type_name}: the GPU engine runs tables of "
                                  f"{', '.join(ops.TABLE_TYPES)}")
        head = m.lm_head.type_name
        if not lmhead.supported(head, cfg.n_embd) and head not in dense.WTYPES:
            raise EngineError(f"LM head {m.lm_head.name!r} ({head}, rows of {cfg.n_embd}): a packed head runs in "
                              f"kernels/lmhead.py, rows of at most {lmhead.MAX_K} values")

    def _table_shards(self, ti):
        rb = dense.row_bytes(ti.type_name, ti.shape[0])
        try:
            return [(r0, r1) for r0, r1 in dense.shard_rows(ti.shape[1], rb, self.dev.max_binding)], rb
        except dense.DenseSpecError as e:
            raise gpu.LimitsError(f"{ti.name}: {e}") from e

    def check_limits(self):
        """Raise gpu.LimitsError naming the limit when this model (at n_ctx) cannot run on dev."""
        dev, cfg, m = self.dev, self.cfg, self.model
        n_sb = int(dev.limits.get("maxStorageBuffersPerShaderStage", 8))
        if n_sb < NEED_STORAGE_BUFFERS:
            raise gpu.LimitsError(f"the fused QKV kernel binds {NEED_STORAGE_BUFFERS} storage buffers; this GPU allows "
                                  f"maxStorageBuffersPerShaderStage = {n_sb}")
        kv = ops.kv_cache_bytes(cfg.n_head_kv, cfg.head_dim, self.n_ctx, self.kv_cache)
        lim, limit = min((dev.max_binding, "maxStorageBufferBindingSize"), (dev.max_buffer, "maxBufferSize"))
        if kv > lim:
            raise gpu.LimitsError(f"KV cache of one layer ({self.n_ctx} positions, {self.kv_cache}) needs a buffer of "
                                  f"{kv} bytes; this GPU allows {limit} = {lim} (short by {kv - lim} bytes): at most "
                                  f"{lim // (ops.KV_BYTES[self.kv_cache] * cfg.kv_dim)} positions of context fit")
        tables = {m.token_embd.name, m.lm_head.name}
        items = [(ti.nbytes, ti.name) for ti in m.tensors() if ti.name not in tables]
        items += [(4 * cfg.n_vocab, "logits"), (4 * cfg.n_ff, "FFN activations")]
        for name in tables:
            ti = m.gguf.tensors[name]
            shards, rb = self._table_shards(ti)
            items.append((max(r1 - r0 for r0, r1 in shards) * rb, f"{name} shard"))
        need, what = max(items)
        gpu.check_fits(dev, need, need, what=what)

    async def _upload(self, src, progress):
        dev, m = self.dev, self.model
        tables = [m.token_embd] + ([m.output] if m.output is not None else [])
        qkn = [(b.index, b.attn_q_norm, b.attn_k_norm) for b in m.blk if b.attn_q_norm is not None]
        paired = {ti.name for _, qn, kn in qkn for ti in (qn, kn)}
        plain = [ti for ti in m.tensors() if ti not in tables and not ti.name.endswith(".scale")
                 and ti.name not in paired]
        total = sum(ti.nbytes for ti in tables + plain) + sum(qn.nbytes + kn.nbytes for _, qn, kn in qkn)
        done = [0]

        def on_bytes(n):
            done[0] += n
            if progress:
                progress("upload", done[0], total)
        items = []                               # (buffer, offset, file offset, bytes): one upload_many
        for ti in tables:
            shards, rb = self._table_shards(ti)
            self.shards[ti.name] = []
            requant = ti is m.lm_head and self.lm_head == "q8_0" and ti.type_name != "Q8_0"
            for i, (r0, r1) in enumerate(shards):
                b = dev.create_buffer((r1 - r0) * rb, label=f"{ti.name}[{r0}:{r1}]")
                if requant:                      # (one shard at a time: its float rows are freed at once)
                    await dev.upload(b, 0, src, ti.abs_offset + r0 * rb, (r1 - r0) * rb, on_bytes=on_bytes)
                    b = await self._requant_q8_0(ti, r0, r1, b)
                else:
                    items.append((b, 0, ti.abs_offset + r0 * rb, (r1 - r0) * rb))
                self.shards[ti.name].append((r0, r1, b))
        for ti in plain:
            b = dev.create_buffer(ti.nbytes, label=ti.name)
            items.append((b, 0, ti.abs_offset, ti.nbytes))
            self.w[ti.name] = b
        for i, qn, kn in qkn:                    # QK-norm weights: one f32[2][head_dim] buffer per block
            b = dev.create_buffer(qn.nbytes + kn.nbytes, label=f"blk.{i}.attn_q_norm|attn_k_norm")
            items += [(b, 0, qn.abs_offset, qn.nbytes), (b, qn.nbytes, kn.abs_offset, kn.nbytes)]
            self.buf[f"qkn.{i}"] = b
        await dev.upload_many(items, src, on_bytes=on_bytes)

        # output multipliers per linear (bitnet .scale tensors, else 1.0), uploaded straight from the file
        ones = struct.pack("<4f", 1.0, 1.0, 1.0, 1.0)
        self.buf["ones"] = dev.create_buffer(16, label="ones")
        dev.write_buffer(self.buf["ones"], 0, ones)
        for b in m.blk:
            for group, names in (("qkv", ("attn_q", "attn_k", "attn_v")), ("o", ("attn_output",)),
                                 ("gu", ("ffn_gate", "ffn_up")), ("down", ("ffn_down",))):
                scales = [getattr(b, n + "_scale") for n in names]
                if not any(scales):
                    continue
                mb = dev.create_buffer(16, label=f"blk.{b.index}.{group}.mult")
                dev.write_buffer(mb, 0, ones)
                for j, s in enumerate(scales):
                    if s is not None:
                        await dev.upload(mb, 4 * j, src, s.abs_offset, 4)
                self.buf[f"mult.{b.index}.{group}"] = mb
            for n in ("attn_q", "attn_k", "attn_v"):      # one f32 each for the prefill kernels
                sc = getattr(b, n + "_scale")
                if sc is not None:
                    mb = dev.create_buffer(16, label=f"blk.{b.index}.{n}.mult")
                    dev.write_buffer(mb, 0, ones)
                    await dev.upload(mb, 0, src, sc.abs_offset, 4)
                    self.buf[f"mult1.{b.index}.{n}"] = mb

    async def _requant_q8_0(self, ti, r0: int, r1: int, b):
        """Rows [r0, r1) of table ti (in buffer b) as Q8_0 blocks in a new buffer; b is freed."""
        if ti.type_name not in requant.SRC_TYPES:
            raise EngineError(f"lm_head q8_0: {ti.name} is {ti.type_name}; re-quantization reads "
                              f"{', '.join(requant.SRC_TYPES)}")
        dev = self.dev
        q = dev.create_buffer(requant.q8_0_bytes(ti.shape[0], r1 - r0), label=f"{ti.name}[{r0}:{r1}] q8_0")
        dev.run([await requant.q8_0(ti.type_name, ti.shape[0], r1 - r0).instantiate(dev, {"src": b, "dst": q})])
        await dev.sync()
        b.destroy()
        self.table_types[ti.name] = "Q8_0"
        return q

    def table_type(self, ti) -> str:
        """The GGML type of a table (token_embd / output) as it is on the GPU."""
        return self.table_types.get(ti.name, ti.type_name)

    def _mult(self, i: int, group: str):
        return self.buf.get(f"mult.{i}.{group}", self.buf["ones"])

    def _state_buffers(self):
        """Activations, params, token, penalty ids, RoPE freqs, the KV cache (and the prefill rows)."""
        dev, cfg = self.dev, self.cfg
        B = self.buf
        f4 = 4
        B["x"] = dev.create_buffer(cfg.n_embd * f4, label="x")
        B["qkv"] = dev.create_buffer((cfg.q_dim + 2 * cfg.kv_dim) * f4, label="qkv")
        B["o"] = dev.create_buffer(cfg.q_dim * f4, label="o")
        B["g"] = dev.create_buffer(cfg.n_ff * f4, label="g")
        B["logits"] = dev.create_buffer(cfg.n_vocab * f4, label="logits")
        B["params"] = dev.create_buffer(ops.PARAMS_BYTES, label="params")
        B["token"] = dev.create_buffer(16, label="token")
        B["token2"] = dev.create_buffer(16, label="token (odd overlapped steps)")
        B["pids"] = dev.create_buffer(4 * MAX_PENALTY_IDS, label="penalty_ids")
        B["freqs"] = dev.create_buffer(cfg.head_dim // 2 * f4, label="freqs")
        dev.write_buffer(B["freqs"], 0, ops.rope_freqs(cfg.head_dim, cfg.rope_base))
        if not self.ternary:
            B["tmp"] = dev.create_buffer(cfg.n_embd * f4, label="tmp")
            B["gate"] = dev.create_buffer(cfg.n_ff * f4, label="gate")
            B["up"] = dev.create_buffer(cfg.n_ff * f4, label="up")
        if self.prefill_rows > 1:
            self._prefill_buffers()
        kv = ops.kv_cache_bytes(cfg.n_head_kv, cfg.head_dim, self.n_ctx, self.kv_cache)
        for i in range(cfg.n_layer):
            B[f"k.{i}"] = dev.create_buffer(kv, label=f"k_cache.{i}")
            B[f"v.{i}"] = dev.create_buffer(kv, label=f"v_cache.{i}")

    def _decode_steps(self) -> dict:
        """The decode plans' steps, [(Step, {bind name: buffer})] per part: embed (reads `token`),
        embed2 (reads `token2`), blocks, head, argmax / argmax2 (write `token` / `token2`)."""
        cfg, B = self.cfg, self.buf
        embed = self._embed_steps()
        do = DecodeOps(self)

        def argmax(out):
            return [(ops.argmax(cfg.n_vocab), {"logits": B["logits"], "token": out,
                                               "penalty_ids": B["pids"], "params": B["params"]})]
        return {"embed": embed, "blocks": [s for i in range(cfg.n_layer) for s in block(do, i)],
                "head": self._head_steps(), "argmax": argmax(B["token"]), "argmax2": argmax(B["token2"]),
                "embed2": [(st, dict(bufs, ids=B["token2"])) for st, bufs in embed]}     # the odd steps' input

    def _compile_keys(self) -> tuple:
        """The pipeline keys of every step the plans use, as (first, later): first the greedy decode
        plans' and the LM head's re-quantization; later the sampler's top-k of TOPK_MIN (the app's
        default is greedy: a sampled reply before it is compiled waits for it) and the prefill plan's
        (prefill_rows rows) that are not among the first. Listed before any buffer exists, on a copy of
        the engine whose buffers are stand-ins (their names): only the kernels matter."""
        cfg, m = self.cfg, self.model
        dry = copy.copy(self)
        dry.w, dry.buf = _Names(), _Names()
        dry.shards = {ti.name: [(r0, r1, ti.name) for r0, r1 in self._table_shards(ti)[0]]
                      for ti in (m.token_embd, m.lm_head)}
        requant_head = self.lm_head == "q8_0" and m.lm_head.type_name != "Q8_0"
        if requant_head:
            dry.table_types = dict(self.table_types, **{m.lm_head.name: "Q8_0"})
        steps = [st for part in Engine._decode_steps(dry).values() for st, _ in part]
        if requant_head and m.lm_head.type_name in requant.SRC_TYPES:
            rows = {r1 - r0 for r0, r1, _ in dry.shards[m.lm_head.name]}
            steps += [requant.q8_0(m.lm_head.type_name, m.lm_head.shape[0], n) for n in sorted(rows)]
        prefill = [ops.topk(cfg.n_vocab, min(TOPK_MIN, cfg.n_vocab))]
        if self.prefill_rows > 1:
            prefill += [st for st, _ in Engine._prefill_steps(dry, self.prefill_rows, 0)]
        key = self.dev.pipeline_key
        first = [(st.shader, st.entry, st.constants, st.defines) for st in steps]
        have = {key(*k) for k in first}
        later = [(st.shader, st.entry, st.constants, st.defines) for st in prefill]
        return first, [k for k in later if key(*k) not in have]

    async def _compile(self, keys, progress=None, base: int = 0, total: int = 0):
        """Compile `keys` with one dev.pipelines() call (all in flight at once; those compiled or in
        flight already are waited for); progress("compile", base + done, total) per distinct one."""

        def on_done(done, n):
            if progress:
                progress("compile", base + done, total or n)
        if keys:
            await self.dev.pipelines(keys, on_done)

    async def _build(self):
        """Create the state buffers, bind the decode steps and record the decode plans."""
        dev, cfg = self.dev, self.cfg
        self._state_buffers()
        d = self._decode_steps()
        items = await self._instantiate(d["embed"] + d["blocks"])
        self.items_layers = items
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
        self.dispatches_per_layer = len(blocks) / cfg.n_layer

    async def _instantiate(self, steps):
        return [await step.instantiate(self.dev, bufs, self.buf) for step, bufs in steps]

    def _embed_steps(self):
        cfg, ti = self.cfg, self.model.token_embd
        shards = self.shards[ti.name]
        n_sb = int(self.dev.limits.get("maxStorageBuffersPerShaderStage", 8))
        steps = ops.embedding(self.table_type(ti), cfg.n_embd, cfg.n_vocab, 1, shards=[(a, b) for a, b, _ in shards],
                              max_shard_bindings=max(1, min(8, n_sb - 2)))
        bufs = {"ids": self.buf["token"], "x": self.buf["x"]}
        bufs.update({f"w{i}": b for i, (_, _, b) in enumerate(shards)})
        return [(s, bufs) for s in steps]

    def _head_gemv(self, wtype, rows, last_row=False):
        """LM head steps: kernels/lmhead.py (many rows per workgroup; a packed head, Q1_0 / Q2_0, in the
        engine's activation mode as the block linears), else dense.gemv (float rows over 4096)."""
        cfg = self.cfg
        if lmhead.supported(wtype, cfg.n_embd):
            a8 = self.a8 and formats.by_name(wtype).kind != "float"
            return lmhead.gemv(wtype, cfg.n_embd, cfg.n_vocab, a8=a8, shards=rows, eps=cfg.eps, last_row=last_row,
                               dev=self.dev)
        return dense.gemv(wtype, cfg.n_embd, cfg.n_vocab, shards=rows, norm=True, eps=cfg.eps, last_row=last_row)

    def _head_steps(self):
        cfg, ti = self.cfg, self.model.lm_head
        shards = self.shards[ti.name]
        wtype, rows = self.table_type(ti), [(a, b) for a, b, _ in shards]
        steps = self._head_gemv(wtype, rows)
        bufs = {"x": self.buf["x"], "y": self.buf["logits"], "norm": self.w[self.model.output_norm.name]}
        bufs.update({f"w{i}": b for i, (_, _, b) in enumerate(shards)})
        return [(s, bufs) for s in steps]

    async def _sampler_item(self, k: int):
        """(plan item, top buffer, offset of the values) of the top-k selection (k = 0: argmax)."""
        if k == 0:
            return self.items_argmax[0], None, 0
        if k not in self._topk:
            cfg, B, dev = self.cfg, self.buf, self.dev
            off = _align(4 * k)
            top = dev.create_buffer(off + 4 * (k + 2), label=f"top{k}")
            item = await ops.topk(cfg.n_vocab, k).instantiate(dev, {
                "logits": B["logits"], "top_ids": (top, 0, 4 * k), "penalty_ids": B["pids"],
                "params": B["params"], "top_vals": (top, off, 4 * (k + 2))})
            self._topk[k] = (item, top, off)
        return self._topk[k]

    async def _decode_plan(self, k: int):
        """The per-token plan: embedding, blocks, LM head, argmax (k = 0) or top-k."""
        if k not in self._plans:
            item, *_ = await self._sampler_item(k)
            self._plans[k] = self.dev.plan(self.items_layers + self.items_head + [item])
        return self._plans[k]

    # ------------------------------------------------------------------ prefill (M > 1 rows)
    def _prefill_buffers(self):
        cfg, B, dev = self.cfg, self.buf, self.dev
        C, f4 = self.prefill_rows, 4
        nmax = max(cfg.n_embd, cfg.q_dim, cfg.n_ff)
        B["p.ids"] = dev.create_buffer(4 * C, label="prefill ids")
        B["p.x"] = dev.create_buffer(C * cfg.n_embd * f4, label="prefill x")
        B["p.qkv"] = dev.create_buffer(C * (cfg.q_dim + 2 * cfg.kv_dim) * f4, label="prefill qkv")
        B["p.o"] = dev.create_buffer(C * cfg.q_dim * f4, label="prefill o")
        B["p.g"] = dev.create_buffer(C * cfg.n_ff * f4, label="prefill g")
        if self.a8 and self.ternary:
            B["p.q"] = dev.create_buffer(C * nmax, label="prefill a8 rows")
            B["p.s"] = dev.create_buffer(C * f4, label="prefill a8 scales")
        else:
            B["p.n"] = dev.create_buffer(C * nmax * f4, label="prefill normed rows")
        if not self.ternary:
            B["p.tmp"] = dev.create_buffer(C * cfg.n_embd * f4, label="prefill tmp")
            B["p.gate"] = dev.create_buffer(C * cfg.n_ff * f4, label="prefill gate")
            B["p.up"] = dev.create_buffer(C * cfg.n_ff * f4, label="prefill up")

    def _mult1(self, i: int, name: str):
        """f32[1] multiplier of one linear (the tiled kernel binds one per weight)."""
        return self.buf.get(f"mult1.{i}.{name}", self.buf["ones"])

    def _prefill_steps(self, M: int, k) -> list:
        """Steps over M rows (a bucket: rows past params.m are scratch): embedding, blocks, then
        (k = None) nothing, or the LM head on the last row (_prefill_plan adds the sampler)."""
        cfg, B = self.cfg, self.buf
        ti = self.model.token_embd
        shards = self.shards[ti.name]
        n_sb = int(self.dev.limits.get("maxStorageBuffersPerShaderStage", 8))
        emb = {"ids": B["p.ids"], "x": B["p.x"]}
        emb.update({f"w{j}": b for j, (_, _, b) in enumerate(shards)})
        steps = [(s, emb) for s in ops.embedding(self.table_type(ti), cfg.n_embd, cfg.n_vocab, M,
                                                 shards=[(a, b) for a, b, _ in shards],
                                                 max_shard_bindings=max(1, min(8, n_sb - 2)))]
        do = PrefillOps(self, M)
        for i in range(cfg.n_layer):
            steps += block(do, i)
        if k is not None:
            head = self.model.lm_head
            hs = self.shards[head.name]
            hb = {"x": B["p.x"], "y": B["logits"], "norm": self.w[self.model.output_norm.name], "params": B["params"]}
            hb.update({f"w{j}": b for j, (_, _, b) in enumerate(hs)})
            wtype, rows = self.table_type(head), [(a, b) for a, b, _ in hs]
            steps += [(s, hb) for s in self._head_gemv(wtype, rows, last_row=True)]
        return steps

    async def _prefill_plan(self, M: int, k):
        """Plan over M rows: _prefill_steps, then (k not None) argmax (k = 0) / top-k."""
        key = (M, k)
        if key not in self._plans:
            items = await self._instantiate(self._prefill_steps(M, k))
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

    def _k(self, params: SamplingParams) -> int:
        """0: greedy (GPU argmax); else the number of top candidates read back."""
        return 0 if params.greedy else min(max(TOPK_MIN, params.top_k), 256, self.cfg.n_vocab)

    async def _finish(self, params: SamplingParams, sampler: Sampler) -> int:
        """After a plan ending in argmax / top-k: the next token (left in `token` for the next step)."""
        dev, k = self.dev, self._k(params)
        if k == 0:
            return await self._read_token(self.buf["token"])
        _, top, off = await self._sampler_item(k)
        raw = await dev.read(top, 0, off + 4 * (k + 2))
        ids = struct.unpack_from(f"<{k}I", raw, 0)
        vals = struct.unpack_from(f"<{k + 2}f", raw, off)
        inv_t = 1.0 / params.temperature
        u = sampler.rng.random()
        stats = None if k == self.cfg.n_vocab else (vals[k] * inv_t, vals[k + 1])   # None: all tokens
        t = choose(params, list(zip(vals[:k], ids)), stats, u)
        if t is None:                    # the draw fell past the candidates: exact, from all logits
            sampler.full_fallbacks += 1
            lg = struct.unpack(f"<{self.cfg.n_vocab}f", await dev.read(self.buf["logits"], 0, 4 * self.cfg.n_vocab))
            order = sorted(range(len(lg)), key=lambda i: (-lg[i], i))
            t = choose(params, [(lg[i], i) for i in order], None, u)
        self._feed(t)
        return t

    async def _read_token(self, buf) -> int:
        t = struct.unpack("<I", await self.dev.read(buf, 0, 4))[0]
        if t >= self.cfg.n_vocab:
            raise EngineError(f"the GPU argmax returned {t}: every logit is NaN (a broken model or kernel)")
        return t

    async def _step(self, pos: int, params: SamplingParams, sampler: Sampler, context: list) -> int:
        """Decode: run the token already in `token` at position pos; return the next token."""
        self._write_params(1, pos, params, context)
        self.dev.run(await self._decode_plan(self._k(params)))
        return await self._finish(params, sampler)

    async def _prefill(self, tokens: list, pos0: int, params: SamplingParams, sampler: Sampler,
                       context: list) -> int:
        """Run tokens at positions pos0.. and return the token after the last one. Chunks of
        prefill_rows rows through the multi-row kernels (one plan run each); a single token (or
        prefill_rows = 1), or any prompt while the prefill kernels are still compiling (load with
        wait_prefill=False), goes token by token through the decode plan: the same tokens (A8 rows
        are quantised alike), only slower per token than a prefill plan on a GPU."""
        by_rows = len(tokens) > 1 and self.prefill_rows > 1 and self.prefill_ready
        self.prefill_path = "prefill" if by_rows else "decode"
        if not by_rows:
            zero = SamplingParams()
            for j, t in enumerate(tokens[:-1]):
                self._feed(t)
                self._write_params(1, pos0 + j, zero, [])
                self.dev.run(self.plan_layers)
            self._feed(tokens[-1])
            return await self._step(pos0 + len(tokens) - 1, params, sampler, context)
        C = self.prefill_rows
        for c0 in range(0, len(tokens), C):
            chunk = tokens[c0:c0 + C]
            last = c0 + C >= len(tokens)
            m = len(chunk)
            self.dev.write_buffer(self.buf["p.ids"], 0, struct.pack(f"<{m}I", *chunk))
            self._write_params(m, pos0 + c0, params if last else SamplingParams(), context if last else [])
            bucket = min(C, 1 << (m - 1).bit_length())
            self.dev.run(await self._prefill_plan(bucket, self._k(params) if last else None))
        return await self._finish(params, sampler)

    async def generate(self, prompt_ids, params: SamplingParams | None = None, max_tokens: int = 128,
                       on_token=None, should_stop=None, ignore_eos: bool = False, stop_ids=None) -> GenerateResult:
        """Generate after prompt_ids (see GenerateResult). Reuses the KV cache for the longest
        common prefix with the tokens already in it (ChatSession relies on this). stop_ids:
        the tokens that end generation (default the tokenizer's; ChatFormat.stop_ids)."""
        params = params or SamplingParams()
        if params.repeat_last_n > MAX_PENALTY_IDS:
            raise SamplingError(f"repeat_last_n = {params.repeat_last_n}: the GPU engine supports at most {MAX_PENALTY_IDS}")
        prompt = check_prompt(prompt_ids, self.n_ctx, self.cfg.n_vocab)
        self.dev.check_alive()
        run = GenerationRun(self.tokenizer, self.n_ctx, prompt, max_tokens, on_token, should_stop, ignore_eos,
                            stop_ids)
        if max_tokens <= 0:
            return run.result()
        sampler = Sampler(params)
        keep = min(common_prefix(self.cached_ids, prompt), len(prompt) - 1)
        self.cached_ids = self.cached_ids[:keep]
        context = list(prompt)
        t = await self._prefill(prompt[keep:], keep, params, sampler, context)
        self.cached_ids = list(prompt)
        run.prefill_done()
        c0 = dict(self.dev.counters)
        f0 = sampler.full_fallbacks
        discarded = 0
        if self.overlap and params.greedy and not params.penalized:
            discarded = await self._decode_ahead(run, t, params)
        else:
            while run.accept(t):
                context.append(t)
                nxt = await self._step(len(self.cached_ids), params, sampler, context)
                self.cached_ids.append(t)
                t = nxt
                run.n_decode += 1
        c = {k: v - c0.get(k, 0) for k, v in self.dev.counters.items()}
        c["full_fallbacks"] = sampler.full_fallbacks - f0
        c["discarded_steps"] = discarded
        return run.result(c, c["dispatches"], c["host_calls"])

    async def _decode_ahead(self, run: GenerationRun, t: int, params: SamplingParams) -> int:
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

    def reset(self):
        """Forget the cached tokens (the next generate prefills everything)."""
        self.cached_ids = []

    def _all_buffers(self):
        tops = [top for _, top, _ in self._topk.values()]
        return list(self.w.values()) + list(self.buf.values()) + [b for s in self.shards.values() for *_, b in s] + tops

    def close(self):
        for b in self._all_buffers():
            b.destroy()
        self.w, self.buf, self.shards = {}, {}, {}
