"""Loading a model onto the GPU (stdlib only; runs in Pyodide): what Engine.load does before it
records the plans, on a blocks.GPUModel.

    fit_model, estimate_bytes        before any GPU work: the context (generation.fit_context on this
                                     device's limits, within a GPU memory budget when there is one)
                                     and the bytes the load will take (the library's worker fits
                                     once, checks its budget, and hands the Fit to Engine.load)
    check_support, check_limits      EngineError / gpu.LimitsError naming what does not fit, before
                                     any buffer is made
    upload_tensors                   every tensor of the file in its own buffer, bytes unchanged:
                                     tables in shards of whole rows under the binding limit, QK-norm
                                     weights paired and Q / K / V biases side by side per block
                                     (PACKED), output multipliers per MULTIPLIERS;
                                     GPUModel.lm_head (formats.Q8_0 for lm_head="q8_0"): the head
                                     re-quantized on the GPU (requant_q8_0)
    state_buffers                    activations, params, token, RoPE freqs, the KV cache, prefill rows
    compile_steps, compile_pipelines every kernel the plans use, listed before any buffer exists and
                                     compiled while the weights upload (compile_keys: their keys)
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, replace

from bitweb import formats, gpu
from bitweb.blocks import MULTIPLIERS, EngineError, GPUModel, decode_steps, prefill_steps
from bitweb.generation import KV_BUDGET, KV_CACHE, check_kv, fit_context, kv_bytes
from bitweb.kernels import bitlinear, dense, lmhead, ops, requant
from bitweb.model import LINEARS, Model

PREFILL_ROWS = 64            # prompt rows per multi-row (prefill) plan run
MAX_PENALTY_IDS = 4096        # repeat_last_n cap (size of the penalty_ids buffer)
NEED_STORAGE_BUFFERS = 7      # the fused QKV gemv binds x, norm, mult, y and three weights
# Small per-block tensors a kernel binds as one buffer, side by side in this order: GPUModel.buf
# name prefix (+ ".<block>") -> Block attributes. QK-norm weights: f32[2][head_dim]; the Q / K / V
# biases: one f32 row laid out as a qkv row (q | k | v), so the kernels index it as they index qkv.
PACKED = {"qkn": ("attn_q_norm", "attn_k_norm"), "qkvb": ("attn_q_bias", "attn_k_bias", "attn_v_bias")}


def widest_row(cfg) -> int:
    """Values in the widest activation row (x, qkv or g): what one prefill row of a buffer holds."""
    return max(cfg.n_embd, cfg.q_dim + 2 * cfg.kv_dim, cfg.n_ff)


def estimate_bytes(model: Model, n_ctx: int, kv_cache: str = KV_CACHE) -> int:
    """GPU bytes a load of `model` makes, roughly: the file's tensors, the KV cache at n_ctx
    positions (generation.kv_bytes) and the activation buffers (PREFILL_ROWS f32 rows of the widest
    layer, four buffers of them, and the logits twice)."""
    cfg = model.cfg
    weights = sum(t.nbytes for t in model.gguf.tensors.values())
    return weights + kv_bytes(cfg, n_ctx, kv_cache) + 4 * (PREFILL_ROWS * 4 * widest_row(cfg) + 2 * cfg.n_vocab)


@dataclass(frozen=True)
class Fit:
    """What a load will make of a model on one device, decided before any GPU work (fit_model)."""
    model: Model
    n_ctx: int                # KV cache positions
    note: str                 # why n_ctx is below the file's context length ("" when it is not)
    kv_cache: str             # the KV cache's value type
    gpu_bytes: int            # estimate_bytes at n_ctx
    max_context: int | None   # the context asked for (None: the default that fits)


def fit_model(dev, model: Model, max_context: int | None = None, kv_cache: str = KV_CACHE,
              gpu_memory: int | None = None) -> Fit:
    """The context and size of a load: max_context (at most the file's context length), else the
    default of generation.fit_context on this device (one layer's K buffer within
    maxStorageBufferBindingSize and maxBufferSize, the whole cache within KV_BUDGET and, given
    gpu_memory, within what the rest of the model leaves of it). EngineError for an unknown
    kv_cache; ContextError when not even 2 positions fit."""
    kv = check_kv(kv_cache, EngineError)
    budget = None
    if gpu_memory:
        budget = max(0, min(KV_BUDGET, gpu_memory - estimate_bytes(model, 0, kv)))
    n_ctx, note = fit_context(model.cfg, max_context, min(dev.max_binding, dev.max_buffer), budget, kv=kv)
    return Fit(model, n_ctx, note, kv, estimate_bytes(model, n_ctx, kv), max_context)


class _Names(dict):
    """Stand-in buffers for listing a model's steps before any buffer exists (compile_keys):
    every name maps to itself."""

    def __missing__(self, key):
        return key

    def get(self, key, default=None):
        return key


def check_support(h: GPUModel):
    """EngineError naming what the GPU engine does not run in this model (a table or head type,
    .scale tensors on float linears); Model.from_gguf has checked everything else."""
    m, cfg = h.model, h.cfg
    if not h.packed:
        scaled = [getattr(b, n + "_scale").name for b in m.blk for n in LINEARS if getattr(b, n + "_scale")]
        if scaled:
            raise EngineError(f"tensor {scaled[0]!r}: .scale tensors with float ({cfg.linear_type.name}) "
                              f"linears are not supported by the GPU engine")
    blk = bitlinear.block(cfg.linear_type)
    for name, shape in cfg.tensor_shapes().items():
        n_in = shape[0]
        if name in LINEARS and n_in % blk:
            raise EngineError(f"{name}: rows of {n_in} values; the GPU's {cfg.linear_type.name} linears read "
                              f"them {blk} values a lane (a multiple of {blk} is needed)")
    for ti in (m.token_embd, m.lm_head):
        if ti.format not in ops.TABLE_TYPES:
            raise EngineError(f"tensor {ti.name!r} type {ti.format.name}: the GPU engine runs tables of "
                              f"{', '.join(f.name for f in ops.TABLE_TYPES)}")
    if h.lm_head is not None and m.lm_head.format is not h.lm_head and m.lm_head.format not in requant.SRC_TYPES:
        raise EngineError(f"lm_head {h.lm_head.name.lower()}: {m.lm_head.name} is {m.lm_head.format.name}; "
                          f"re-quantization reads {', '.join(f.name for f in requant.SRC_TYPES)}")
    heads = [(m.lm_head.format, "")]
    if h.lm_head is not None:
        heads.append((h.lm_head, f" re-quantized (lm_head={h.lm_head.name.lower()!r})"))
    for head, what in heads:
        if not lmhead.supported(head, cfg.n_embd) and head not in dense.WTYPES:
            raise EngineError(f"LM head {m.lm_head.name!r} ({head.name}{what}, rows of {cfg.n_embd}): a packed head "
                              f"runs in kernels/lmhead.py, rows of at most {lmhead.MAX_K} values")


def table_shards(h: GPUModel, ti):
    """([(r0, r1)] row ranges of table ti, each within one binding, bytes per row)."""
    rb = dense.row_bytes(ti.format, ti.shape[0])
    try:
        return [(r0, r1) for r0, r1 in dense.shard_rows(ti.shape[1], rb, h.dev.max_binding)], rb
    except dense.DenseSpecError as e:
        raise gpu.LimitsError(f"{ti.name}: {e}") from e


def check_limits(h: GPUModel):
    """Raise gpu.LimitsError naming the limit when this model (at n_ctx) cannot run on dev."""
    dev, cfg, m = h.dev, h.cfg, h.model
    n_sb = dev.max_storage_buffers
    if n_sb < NEED_STORAGE_BUFFERS:
        raise gpu.LimitsError(f"the fused QKV kernel binds {NEED_STORAGE_BUFFERS} storage buffers; this GPU allows "
                              f"maxStorageBuffersPerShaderStage = {n_sb}")
    kv = kv_bytes(cfg, h.n_ctx, h.kv_cache, per_buffer=True)
    lim, limit = min((dev.max_binding, "maxStorageBufferBindingSize"), (dev.max_buffer, "maxBufferSize"))
    if kv > lim:
        raise gpu.LimitsError(f"KV cache of one layer ({h.n_ctx} positions, {h.kv_cache}) needs a buffer of "
                              f"{kv} bytes; this GPU allows {limit} = {lim} (short by {kv - lim} bytes): at most "
                              f"{lim // kv_bytes(cfg, 1, h.kv_cache, per_buffer=True)} positions of context fit")
    tables = {m.token_embd.name, m.lm_head.name}
    items = [(ti.nbytes, ti.name) for ti in m.tensors() if ti.name not in tables]
    items += [(4 * cfg.n_vocab, "logits"), (4 * cfg.n_ff, "FFN activations")]
    for name in tables:
        ti = m.gguf.tensors[name]
        shards, rb = table_shards(h, ti)
        items.append((max(r1 - r0 for r0, r1 in shards) * rb, f"{name} shard"))
    need, what = max(items)
    gpu.check_fits(dev, need, need, what=what)


async def upload_tensors(h: GPUModel, src, progress):
    """Every tensor of the file into its own buffer, bytes unchanged (tables in shards of whole
    rows, the PACKED groups of a block side by side in one buffer, output multipliers per
    MULTIPLIERS entry)."""
    dev, m = h.dev, h.model
    tables = [m.token_embd] + ([m.output] if m.output is not None else [])
    packed = [(f"{key}.{b.index}", [getattr(b, n) for n in names]) for b in m.blk for key, names in PACKED.items()
              if getattr(b, names[0]) is not None]
    grouped = {ti.name for _, parts in packed for ti in parts}
    plain = [ti for ti in m.tensors() if ti not in tables and not ti.name.endswith(".scale")
             and ti.name not in grouped]
    total = sum(ti.nbytes for ti in tables + plain) + sum(ti.nbytes for _, parts in packed for ti in parts)
    done = [0]

    def on_bytes(n):
        done[0] += n
        if progress:
            progress("upload", done[0], total)
    items = []                               # (buffer, offset, file offset, bytes): one upload_many
    for ti in tables:
        shards, rb = table_shards(h, ti)
        h.shards[ti.name] = []
        requant = ti is m.lm_head and h.lm_head is not None and ti.format is not h.lm_head
        for i, (r0, r1) in enumerate(shards):
            b = dev.create_buffer((r1 - r0) * rb, label=f"{ti.name}[{r0}:{r1}]")
            if requant:                      # (one shard at a time: its float rows are freed at once)
                await dev.upload(b, 0, src, ti.abs_offset + r0 * rb, (r1 - r0) * rb, on_bytes=on_bytes)
                b = await requant_q8_0(h, ti, r0, r1, b)
            else:
                items.append((b, 0, ti.abs_offset + r0 * rb, (r1 - r0) * rb))
            h.shards[ti.name].append((r0, r1, b))
    for ti in plain:
        b = dev.create_buffer(ti.nbytes, label=ti.name)
        items.append((b, 0, ti.abs_offset, ti.nbytes))
        h.w[ti.name] = b
    for key, parts in packed:                # QK-norm weights, Q / K / V biases: one buffer per block
        b = dev.create_buffer(sum(ti.nbytes for ti in parts), label="|".join(ti.name for ti in parts))
        off = 0
        for ti in parts:
            items.append((b, off, ti.abs_offset, ti.nbytes))
            off += ti.nbytes
        h.buf[key] = b
    await dev.upload_many(items, src, on_bytes=on_bytes)

    # output multipliers per linear (bitnet .scale tensors, else 1.0), uploaded straight from the file
    ones = struct.pack("<4f", 1.0, 1.0, 1.0, 1.0)
    h.buf["ones"] = dev.create_buffer(16, label="ones")
    dev.write_buffer(h.buf["ones"], 0, ones)
    for b in m.blk:
        for names in MULTIPLIERS:
            scales = [getattr(b, n + "_scale") for n in names]
            if not any(scales):
                continue
            mb = dev.create_buffer(16, label=f"blk.{b.index}.{'|'.join(names)}.mult")
            dev.write_buffer(mb, 0, ones)
            for j, s in enumerate(scales):
                if s is not None:
                    await dev.upload(mb, 4 * j, src, s.abs_offset, 4)
            h.buf[f"mult.{b.index}.{'|'.join(names)}"] = mb


async def requant_q8_0(h: GPUModel, ti, r0: int, r1: int, b):
    """Rows [r0, r1) of table ti (in buffer b) as Q8_0 blocks in a new buffer; b is freed."""
    if ti.format not in requant.SRC_TYPES:
        raise EngineError(f"lm_head q8_0: {ti.name} is {ti.format.name}; re-quantization reads "
                          f"{', '.join(f.name for f in requant.SRC_TYPES)}")
    dev = h.dev
    q = dev.create_buffer(requant.q8_0_bytes(ti.shape[0], r1 - r0), label=f"{ti.name}[{r0}:{r1}] q8_0")
    dev.run([await requant.q8_0(ti.format, ti.shape[0], r1 - r0).instantiate(dev, {"src": b, "dst": q})])
    await dev.sync()
    b.destroy()
    h.table_types[ti.name] = formats.Q8_0
    return q


def state_buffers(h: GPUModel, prefill_rows: int):
    """Activations, params, token, penalty ids, RoPE freqs, the KV cache (and the prefill rows)."""
    dev, cfg = h.dev, h.cfg
    B = h.buf
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
    if prefill_rows > 1:
        prefill_buffers(h, prefill_rows)
    kv = kv_bytes(cfg, h.n_ctx, h.kv_cache, per_buffer=True)
    for i in range(cfg.n_layer):
        B[f"k.{i}"] = dev.create_buffer(kv, label=f"k_cache.{i}")
        B[f"v.{i}"] = dev.create_buffer(kv, label=f"v_cache.{i}")


def prefill_buffers(h: GPUModel, C: int):
    """The prefill plans' rows (C of each): p.ids, p.x, p.qkv, p.o, p.g, the matmuls' input rows."""
    cfg, B, dev = h.cfg, h.buf, h.dev
    f4 = 4
    nmax = max(cfg.n_embd, cfg.q_dim, cfg.n_ff)
    B["p.ids"] = dev.create_buffer(4 * C, label="prefill ids")
    B["p.x"] = dev.create_buffer(C * cfg.n_embd * f4, label="prefill x")
    B["p.qkv"] = dev.create_buffer(C * (cfg.q_dim + 2 * cfg.kv_dim) * f4, label="prefill qkv")
    B["p.o"] = dev.create_buffer(C * cfg.q_dim * f4, label="prefill o")
    B["p.g"] = dev.create_buffer(C * cfg.n_ff * f4, label="prefill g")
    q8 = h.a8 and h.packed and bool(h.cfg.linear_type.vec_dot)     # ggml's q8 rows: (dx, sx) per 32 values
    if h.a8 and h.packed:
        B["p.q"] = dev.create_buffer(C * nmax, label="prefill a8 rows")
        B["p.s"] = dev.create_buffer(C * (nmax // 4 if q8 else f4), label="prefill a8 scales")
    if q8 or not (h.a8 and h.packed):
        B["p.n"] = dev.create_buffer(C * nmax * f4, label="prefill normed rows")
    if not h.packed:
        B["p.tmp"] = dev.create_buffer(C * cfg.n_embd * f4, label="prefill tmp")
        B["p.gate"] = dev.create_buffer(C * cfg.n_ff * f4, label="prefill gate")
        B["p.up"] = dev.create_buffer(C * cfg.n_ff * f4, label="prefill up")


def stand_in(h: GPUModel) -> GPUModel:
    """A copy of the handle whose buffers are stand-ins (their names): the steps of its plans can be
    listed (decode_steps, prefill_steps) before any buffer exists, for their kernels or their count."""
    m = h.model
    return replace(h, w=_Names(), buf=_Names(),
                   shards={ti.name: [(r0, r1, ti.name) for r0, r1 in table_shards(h, ti)[0]]
                           for ti in (m.token_embd, m.lm_head)})


def compile_keys(steps: tuple) -> tuple:
    """The pipeline keys (shader, entry, constants, defines) of compile_steps' (first, later)."""
    return tuple([_key(st) for st in part] for part in steps)


def _key(st) -> tuple:
    return (st.shader, st.entry, st.constants, st.defines)


def compile_steps(h: GPUModel, prefill_rows: int, topk: int) -> tuple:
    """Every step the plans use (kernels.Step: their bindings too, for Device.warm), one per distinct
    pipeline, as (first, later): first the greedy decode plans' and the LM head's re-quantization;
    later the sampler's top-k of `topk` candidates (the app's default is greedy: a sampled reply
    before it is compiled waits for it) and the prefill plan's (prefill_rows rows) that are not
    among the first. Listed before any buffer exists, on a copy of the handle whose buffers are
    stand-ins (their names): only the kernels matter. compile_keys: their pipeline keys."""
    cfg, m = h.cfg, h.model
    dry = stand_in(h)
    requant_head = h.lm_head is not None and m.lm_head.format is not h.lm_head
    if requant_head:
        dry.table_types = dict(h.table_types, **{m.lm_head.name: h.lm_head})
    steps = [st for part in decode_steps(dry).values() for st, _ in part]
    if requant_head and m.lm_head.format in requant.SRC_TYPES:
        rows = {r1 - r0 for r0, r1, _ in dry.shards[m.lm_head.name]}
        steps += [requant.q8_0(m.lm_head.format, m.lm_head.shape[0], n) for n in sorted(rows)]
    prefill = [ops.topk(cfg.n_vocab, topk)]
    if prefill_rows > 1:
        prefill += [st for st, _ in prefill_steps(dry, prefill_rows, True)]
    key = h.dev.pipeline_key
    first, later = {}, {}
    for st in steps:
        first.setdefault(key(*_key(st)), st)
    for st in prefill:
        if key(*_key(st)) not in first:
            later.setdefault(key(*_key(st)), st)
    return list(first.values()), list(later.values())


async def compile_pipelines(dev, keys, progress=None, base: int = 0, total: int = 0):
    """Compile `keys` with one dev.pipelines() call (all in flight at once; those compiled or in
    flight already are waited for); progress("compile", base + done, total) per distinct one."""

    def on_done(done, n):
        if progress:
            progress("compile", base + done, total or n)
    if keys:
        await dev.pipelines(keys, on_done)
