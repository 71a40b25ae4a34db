"""The forward pass as GPU steps (stdlib only; runs in Pyodide): the block recipe, written once
(`block`), how each of its steps runs at decode (`DecodeOps`, one row) and over prompt rows
(`PrefillOps`, M rows), and the whole pass: embedding, the blocks, the LM head, argmax
(`decode_steps`, `prefill_steps`).

A step is (kernels.Step, {bind name: buffer}). Everything here reads a `GPUModel`, the narrow
handle: the modes the kernels are chosen by and the buffers by name, never the Engine.
bitweb.engine binds the steps and records them as plans; bitweb.upload makes the buffers and
lists the kernels (compile_steps) on a GPUModel whose buffers are stand-in names.

A new value of a block feature (a model.Arch flag) changes the one op method here that meets it,
and its twin in bitweb.numpy_model (ARCHITECTURE.md, "An architecture").

The block, per row: qkv = [Wq|Wk|Wv] . rmsnorm(x, attn_norm) (`linear`); RoPE, the K/V cache
write and causal GQA (`attention`); x += Wo . rmsnorm(o, attn_sub_norm) (`linear`, residual);
g = act(Wg . n) * (Wu . n), n = rmsnorm(x, ffn_norm) (`ffn`); x += Wd . rmsnorm(g, ffn_sub_norm)
(`linear`, residual). `linear` hides packed vs float weights and the fused norm, output
multipliers and residual (decode: one `bitlinear: gemv` per group; prefill: an rmsnorm step, A8
quantizing the rows, and a matmul per weight chosen in one place, PrefillOps.mm). Norms are looked
up by name, so a norm a row lacks is None in one place (GPUModel.weight); qkv_bias, qk_norm and
rope belong to `attention` (qk_buffers: what the rope / attention kernels bind besides q, k, v),
`ffn` to `ffn`, `scales` to the output multipliers (MULTIPLIERS, GPUModel.mult).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from bitweb import formats
from bitweb.kernels import bitlinear, bitlinear_tiled, dense, glue, lmhead, ops
from bitweb.model import Model


class EngineError(ValueError):
    """A model / option combination the GPU engine does not run (names it)."""


# ============================================================================ the block, once
# Linear groups: one GPU dispatch each where the weights are packed (outputs side by side in y).
GROUPS = {"qkv": ("attn_q", "attn_k", "attn_v"), "o": ("attn_output",), "gu": ("ffn_gate", "ffn_up"),
          "down": ("ffn_down",)}
# Output multipliers (.scale tensors, 1.0 where a linear has none): one f32 per linear, side by side
# in one buffer per tuple of linears that a kernel binds: each group's, and q, k, v alone (the
# prefill matmul and SwiftShader's one-part gemv run them one at a time). GPUModel.mult looks them up.
MULTIPLIERS = tuple(GROUPS.values()) + tuple((n,) for n in GROUPS["qkv"])
BINDING_ALIGN = 256   # a storage binding's offset: the largest minStorageBufferOffsetAlignment WebGPU allows


@dataclass
class GPUModel:
    """A model on one device as the steps see it: the narrow handle the block recipe, its ops and
    the step lists read (never the Engine). The modes the kernels are chosen by, and the buffers by
    name: the file's tensors (`w`, the tables in `shards`), the state and activations (`buf`: x,
    qkv, ..., k.<i> / v.<i> (KV cache), qkn.<i> (QK-norm weights), qkvb.<i> (Q / K / V biases, one
    qkv row), mult.<i>.<linears> (MULTIPLIERS), ones). compile_steps lists the kernels on a copy
    whose buffers are stand-in names."""
    dev: object
    model: Model
    a8: bool                  # A8 activations in the block linears (model.a8_linears: ternary / binary ones)
    packed: bool              # block linears of a packed format (prefill: bitlinear_tiled), else float (dense)
    n_ctx: int                # KV cache positions
    kv_cache: str             # the KV cache's value type: "f16" | "f32"
    kv_f16: bool | None       # an f16 cache as array<f16> (True) or u32 pairs (False); None: f32
    lm_head: formats.Format | None = None               # the format the LM head is re-quantized to on load
    w: dict = field(default_factory=dict)               # GGUF tensor name -> Buffer
    shards: dict = field(default_factory=dict)          # table tensor name -> [(r0, r1, Buffer)]
    table_types: dict = field(default_factory=dict)     # table tensor name -> its Format on the GPU when not the file's
    buf: dict = field(default_factory=dict)             # state / activation buffers by name

    @property
    def cfg(self):
        return self.model.cfg

    def weight(self, i: int, name: str):
        """The buffer of blk[i].<name>, or None when the architecture has no such tensor."""
        ti = getattr(self.model.blk[i], name)
        return None if ti is None else self.w[ti.name]

    def mult(self, i: int, names: tuple):
        """The output multipliers of block i's linears `names` (a MULTIPLIERS entry): f32 each."""
        return self.buf.get(f"mult.{i}.{'|'.join(names)}", self.buf["ones"])

    def table_type(self, ti) -> formats.Format:
        """The GGML type of a table (token_embd / output) as it is on the GPU."""
        return self.table_types.get(ti.name, ti.format)


def block(do, i: int) -> list:
    """Block i as [(Step, {bind name: buffer})]; `do` says how each step runs: DecodeOps (one row)
    or PrefillOps (M rows). Widths per row: e = n_embd, q = n_head * head_dim, kv = n_head_kv *
    head_dim, f = n_ff. A norm the architecture lacks (model.Arch) is None, and the linear then
    reads its input as is (check_support says which such blocks the GPU runs)."""
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


def qk_buffers(h: GPUModel, i: int) -> dict:
    """What block i's RoPE step (attention decode, prefill rope) binds besides q, k, v and the cache:
    the QK-norm weights (qkn, Config.qk_norm) and the Q / K / V bias row (qkv_bias, Config.qkv_bias)."""
    out = {}
    if h.cfg.qk_norm:
        out["qkn"] = h.buf[f"qkn.{i}"]
    if h.cfg.qkv_bias:
        out["qkv_bias"] = h.buf[f"qkvb.{i}"]
    return out


class _Ops:
    """What DecodeOps and PrefillOps share: the model's tensors and shapes, the activations'
    buffers (decode: B[name], prefill: B["p." + name])."""
    prefix = ""

    def __init__(self, h):
        self.h, self.cfg, self.B = h, h.cfg, h.buf
        self.fmt, self.eps, self.shapes = h.cfg.linear_type, h.cfg.eps, h.cfg.tensor_shapes()

    def w(self, i: int, name: str):
        """The buffer of blk[i].<name>, or None when the architecture has no such tensor."""
        return self.h.weight(i, name)

    def buf(self, name: str):
        return self.B[self.prefix + name]


class DecodeOps(_Ops):
    """The block at decode (one row). Every linear, packed or float (F32 / F16 / BF16: f32
    activations), is one bitlinear gemv per group with its norm, output multipliers and residual
    add fused, gate and up one gate_up (5 dispatches per block). Where bitlinear.split_parts
    (SwiftShader) q, k and v are one gemv each (7 dispatches per block), so that every one-part
    linear shares bitlinear's run-time shape pipeline; n_cap: the largest n_in of the linears (it
    sizes that pipeline)."""

    def __init__(self, h):
        super().__init__(h)
        self.n_cap = max(self.cfg.n_embd, self.cfg.q_dim, self.cfg.n_ff)

    def linear(self, i, group, x, y, norm, residual=False):
        names, nw = GROUPS[group], self.w(i, norm)
        n_in = self.shapes[names[0]][0]
        outs = [self.shapes[n][1] for n in names]
        if len(names) > 1 and bitlinear.split_parts(self.h.dev):
            steps, col = [], 0                    # one gemv per part, into its columns of y
            for n, n_out in zip(names, outs):
                st = bitlinear.gemv(self.fmt, n_in, n_out, a8=self.h.a8, norm=nw is not None, eps=self.eps,
                                    dev=self.h.dev, n_cap=self.n_cap, shape=True, y0=col)
                bufs = {"x": self.buf(x), "mult": self.h.mult(i, (n,)), "y": self.buf(y), "w0": self.w(i, n)}
                steps.append((st, bufs if nw is None else dict(bufs, norm=nw)))
                col += n_out
            return steps
        st = bitlinear.gemv(self.fmt, n_in, tuple(outs) if len(outs) > 1 else outs[0], a8=self.h.a8,
                            norm=nw is not None, residual=residual, eps=self.eps, dev=self.h.dev, n_cap=self.n_cap)
        bufs = {"x": self.buf(x), "mult": self.h.mult(i, names), "y": self.buf(y)}
        bufs.update({f"w{j}": self.w(i, n) for j, n in enumerate(names)})
        return [(st, bufs if nw is None else dict(bufs, norm=nw))]

    def attention(self, i, qkv, o):
        cfg, B = self.cfg, self.B
        attn = ops.attention_decode(cfg.n_head, cfg.n_head_kv, cfg.head_dim, self.h.n_ctx, mode=cfg.rope,
                                    qk_norm=cfg.qk_norm, eps=cfg.eps, qkv_bias=cfg.qkv_bias, kv=self.h.kv_cache,
                                    f16=self.h.kv_f16)
        if len(attn) != 1:
            raise EngineError("attention with splits > 1 is not wired")
        kv = {"k_cache": B[f"k.{i}"], "v_cache": B[f"v.{i}"], "params": B["params"], "freqs": B["freqs"]}
        return [(attn[0], dict(kv, qkv=self.buf(qkv), o=self.buf(o), **qk_buffers(self.h, i)))]

    def ffn(self, i, x, g, norm):
        cfg, nw = self.cfg, self.w(i, norm)
        st = bitlinear.gate_up(self.fmt, cfg.n_embd, cfg.n_ff, a8=self.h.a8, act=cfg.ffn, norm=nw is not None,
                               eps=self.eps, dev=self.h.dev, n_cap=self.n_cap)
        bufs = {"x": self.buf(x), "mult": self.h.mult(i, GROUPS["gu"]), "y": self.buf(g),
                "gate": self.w(i, "ffn_gate"), "up": self.w(i, "ffn_up")}
        return [(st, bufs if nw is None else dict(bufs, norm=nw))]


def fit_rows(dev, M: int, a8: bool, gate_up: bool, n_in: int, n_out: int, fmt) -> dict:
    """bitlinear_tiled's tile for a call of at most M rows: the device's tile (choose()) with no more
    row quads than M needs (rq = ceil(M / 4)), so a pass of k + 1 <= 8 rows (speculative decoding's
    verification, a short prompt) computes no rows it throws away. Rows are independent sums: the
    same bits. Measured (dev/bitlinear/tiled_bench.py, lavapipe, Q4_1 f32 at SmolLM2's shapes, M = 8):
    RQ 2 against the 16-row tile 2-8x less time per call (PERFORMANCE.md, "Speculative decoding")."""
    rq = bitlinear_tiled.choose(dev, a8, gate_up, n_in, n_out, fmt).rq
    need = -(-M // 4)
    return {"rq": need} if need < rq else {}


class PrefillOps(_Ops):
    """The block over M prompt rows. Before each multi-row matmul an rmsnorm step (A8: it also
    quantizes the rows, with the decode kernel's workgroup size so the int8 rows equal decode's;
    a linear without a norm before it: A8 rows of its input (rmsnorm NO_NORM), or, f32, no step:
    the matmul reads the rows as they are; A8 on ggml's Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0: the decode
    kernel's q8 blocks, bitlinear.q8_rows, into the int8 tile); packed weights: bitlinear_tiled, float
    weights: dense matmul (+ glue steps). mm() is the one place that picks the matmul kernel."""
    prefix = "p."

    def __init__(self, h, M: int):
        super().__init__(h)
        self.q8 = h.a8 and h.packed and bool(h.cfg.linear_type.vec_dot)   # ggml's q8 rows, the int8 tile
        self.M, self.a8 = M, h.a8 and h.packed and not self.q8
        B = self.B
        self.normed = {"q": B["p.q"], "scale": B["p.s"]} if self.a8 or self.q8 else {"x": B["p.n"]}

    def norm(self, n: int, x, w):
        """The matmul input from the M rows of x (width n): (steps, its bindings). rmsnorm into
        A8 rows (p.q, p.s) or f32 rows (p.n); without a norm weight (w None) A8 rows of x as is,
        or, f32, no step and x itself."""
        B, a8 = self.B, self.a8
        if self.q8:                    # rows as the decode kernel quantizes them (q, dx, sx), int8 tile
            st = bitlinear.q8_rows(n, self.M, eps=self.eps, wg=bitlinear.choose(self.h.dev, n, True).wg,
                                   norm=w is not None)
            bufs = {"x": x, "q": B["p.q"], "scale": B["p.s"]}
            return [(st, bufs if w is None else dict(bufs, norm=w))], self.normed
        if w is None and not a8:
            return [], {"x": x}
        st = ops.rmsnorm(n, self.M, eps=self.eps, a8=a8, wg=bitlinear.choose(self.h.dev, n, True).wg if a8 else 64,
                         norm=w is not None)
        bufs = {"x": x, "q": B["p.q"], "scale": B["p.s"]} if a8 else {"x": x, "y": B["p.n"]}
        return [(st, bufs if w is None else dict(bufs, norm=w))], self.normed

    def mm(self, n_in, n_out, w, y, mult, residual=False, y_stride=0, y_col0=0, inp=None):
        """y (+)= W . input rows (inp: the bindings norm() returned; default the normed rows)
        (columns y_col0.. of rows y_stride wide when y_stride)."""
        B, M, P = self.B, self.M, self.B["params"]
        inp = self.normed if inp is None else inp
        if self.h.packed:
            if y_col0 and (4 * y_col0) % BINDING_ALIGN == 0:     # the column in the binding's offset: k and v
                off = 4 * y_col0                                  # share one pipeline (one compile less)
                y, y_col0 = ((y, off, y.size - off) if hasattr(y, "size") else y), 0
            a8 = self.a8 or self.q8
            st = bitlinear_tiled.matmul(self.fmt, n_in, n_out, M, a8=a8, q8=self.q8, residual=residual,
                                        y_stride=y_stride, y_col0=y_col0, dev=self.h.dev,
                                        **fit_rows(self.h.dev, M, a8, False, n_in, n_out, self.fmt))
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
            return steps + self.mm(n_in, outs[0], self.w(i, names[0]), self.buf(y), self.h.mult(i, names),
                                   residual=residual, inp=inp)
        col = 0                               # parts side by side in rows of sum(outs)
        for n, n_out in zip(names, outs):
            steps += self.mm(n_in, n_out, self.w(i, n), self.buf(y), self.h.mult(i, (n,)), y_stride=sum(outs),
                             y_col0=col, inp=inp)
            col += n_out
        return steps

    def attention(self, i, qkv, o):
        cfg, B = self.cfg, self.B
        kv = {"k_cache": B[f"k.{i}"], "v_cache": B[f"v.{i}"], "params": B["params"]}
        n_ctx, t = self.h.n_ctx, {"kv": self.h.kv_cache, "f16": self.h.kv_f16}
        return [(ops.rope(cfg.n_head, cfg.n_head_kv, cfg.head_dim, n_ctx, self.M, mode=cfg.rope,
                          qk_norm=cfg.qk_norm, eps=cfg.eps, qkv_bias=cfg.qkv_bias, **t),
                 dict(kv, qkv=self.buf(qkv), freqs=B["freqs"], **qk_buffers(self.h, i))),
                (ops.attention_prefill(cfg.n_head, cfg.n_head_kv, cfg.head_dim, n_ctx, self.M, **t),
                 dict(kv, qkv=self.buf(qkv), o=self.buf(o)))]

    def ffn(self, i, x, g, norm):
        cfg, B, M = self.cfg, self.B, self.M
        e, ff = cfg.n_embd, cfg.n_ff
        steps, inp = self.norm(e, self.buf(x), self.w(i, norm))
        if self.h.packed:
            a8 = self.a8 or self.q8
            fit = fit_rows(self.h.dev, M, a8, True, e, ff, self.fmt)
            return steps + [(bitlinear_tiled.gate_up(self.fmt, e, ff, M, a8=a8, q8=self.q8, act=cfg.ffn, dev=self.h.dev,
                                                     **fit),
                             dict(inp, params=B["params"], mult=self.h.mult(i, GROUPS["gu"]), y=self.buf(g),
                                  gate=self.w(i, "ffn_gate"), up=self.w(i, "ffn_up")))]
        steps += self.mm(e, ff, self.w(i, "ffn_gate"), B["p.gate"], None, inp=inp)
        steps += self.mm(e, ff, self.w(i, "ffn_up"), B["p.up"], None, inp=inp)
        return steps + [(glue.act_mul(M * ff, cfg.ffn), {"y": self.buf(g), "a": B["p.gate"], "u": B["p.up"],
                                                         "mult": self.h.mult(i, GROUPS["gu"])})]


# ============================================================================ the forward pass
def decode_steps(h: GPUModel) -> dict:
    """The decode plans' steps by part (Engine._build records them): embed (reads `token`), blocks,
    head, argmax / argmax2 (write `token` / `token2`), embed2 (reads `token2`: the odd steps of the
    overlapped greedy decode)."""
    cfg, B = h.cfg, h.buf
    do = DecodeOps(h)
    return {
        # x = token_embd[token]                                   token -> x [e]
        "embed": embed_steps(h, 1, B["token"], B["x"]),
        # x = block_i(x) for every block                          x -> x
        "blocks": [s for i in range(cfg.n_layer) for s in block(do, i)],
        # logits = head . rmsnorm(x, output_norm)                 x -> logits [n_vocab]
        # (x as the last of params.m = 1 rows: the prefill plan's head pipeline, one compile less)
        "head": head_steps(h, B["x"], last_row=True),
        # token = argmax(logits), repetition penalty first        logits -> token / token2
        "argmax": argmax_steps(h, B["token"]), "argmax2": argmax_steps(h, B["token2"]),
        "embed2": embed_steps(h, 1, B["token2"], B["x"]),
    }


def prefill_steps(h: GPUModel, M: int, head: bool) -> list:
    """Steps over M prompt rows (a bucket: rows past params.m are scratch): embedding, blocks, then
    (head) the LM head on the last row (Engine._prefill_plan adds the sampler)."""
    B = h.buf
    # x = token_embd[ids]                                         p.ids [M] -> p.x [M][e]
    steps = embed_steps(h, M, B["p.ids"], B["p.x"])
    # x = block_i(x) for every block                              p.x -> p.x
    do = PrefillOps(h, M)
    for i in range(h.cfg.n_layer):
        steps += block(do, i)
    # logits = head . rmsnorm(x[m - 1], output_norm)              p.x -> logits [n_vocab]
    if head:
        steps += head_steps(h, B["p.x"], last_row=True)
    return steps


def embed_steps(h: GPUModel, M: int, ids, x) -> list:
    """x[r] = token_embd[ids[r]] for M rows, over the table's shards (a step per few shards)."""
    cfg, ti = h.cfg, h.model.token_embd
    shards = h.shards[ti.name]
    bufs = {"ids": ids, "x": x}
    bufs.update({f"w{j}": b for j, (_, _, b) in enumerate(shards)})
    steps = ops.embedding(h.table_type(ti), cfg.n_embd, cfg.n_vocab, M, shards=[(a, b) for a, b, _ in shards],
                          max_shard_bindings=max(1, min(8, h.dev.max_storage_buffers - 2)))
    return [(s, bufs) for s in steps]


def head_gemv(h: GPUModel, wtype, rows, last_row=False):
    """LM head steps: kernels/lmhead.py (many rows per workgroup; a packed head, Q1_0 / Q2_0, in the
    engine's activation mode as the block linears), else dense.gemv (float rows over 4096)."""
    cfg = h.cfg
    if lmhead.supported(wtype, cfg.n_embd):
        a8 = h.a8 and wtype.a8
        return lmhead.gemv(wtype, cfg.n_embd, cfg.n_vocab, a8=a8, shards=rows, eps=cfg.eps, last_row=last_row,
                           dev=h.dev)
    return dense.gemv(wtype, cfg.n_embd, cfg.n_vocab, shards=rows, norm=True, eps=cfg.eps, last_row=last_row)


def head_steps(h: GPUModel, x, last_row: bool = False) -> list:
    """logits = head . rmsnorm(x, output_norm) over the head's shards; last_row: x's row m - 1."""
    ti = h.model.lm_head
    shards = h.shards[ti.name]
    bufs = {"x": x, "y": h.buf["logits"], "norm": h.w[h.model.output_norm.name]}
    if last_row:
        bufs["params"] = h.buf["params"]
    bufs.update({f"w{j}": b for j, (_, _, b) in enumerate(shards)})
    wtype, rows = h.table_type(ti), [(a, b) for a, b, _ in shards]
    return [(s, bufs) for s in head_gemv(h, wtype, rows, last_row=last_row)]


def argmax_steps(h: GPUModel, out) -> list:
    """out = argmax(logits) after the repetition penalty (params, penalty_ids)."""
    B = h.buf
    return [(ops.argmax(h.cfg.n_vocab), {"logits": B["logits"], "token": out,
                                         "penalty_ids": B["pids"], "params": B["params"]})]
