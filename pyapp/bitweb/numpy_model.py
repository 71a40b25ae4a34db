"""The numpy forward pass of a BitNet GGUF model (CPython only): the oracle for the GPU engine.

One plain loop over the blocks; every value is float32 (as in the kernels) except the
int32 dot products of A8 mode. Shapes: n = tokens in this call, e = n_embd,
q = n_head * head_dim, kv = n_head_kv * head_dim, f = n_ff, V = n_vocab, T = positions so far.

A block linear is preceded by an RMSNorm (or by none: Wo and Wd of blocks without sub-norms,
Config.sub_norms, then m = x and rinv = 1); the pair is computed as the GPU kernels do
(bitweb.ref.bitlinear.activations, the kernels' own numpy mirror, row by row):
  m = x * nw,  rinv = 1 / sqrt(mean(x^2) + eps)            (rmsnorm(x) = m * rinv)
Activation modes (`activations=`):
  "f32": y = (W m) * rinv with W dequantized to float32 (scale * code value).
  "a8":  W1.58A8 as trained (transformers.integrations.bitnet BitLinear): per token
             q = clamp(round_half_even(m * 127 / max|m|), -128, 127)
         (= round(n * s), s = 127 / max(max|n|, 1e-5) on n = rmsnorm(x): rinv cancels), the
         product is an exact integer dot per weight block, and
             y[o] = S[o] * (ws * inv_s * scale),  S[o] = sum_blocks d_block * (q . t[o, block]),
             inv_s = max(max|n|, 1e-5) / 127
         (one block = the whole row for I2_S, d = 1 and ws its tensor scale; 256 values for
         TQ2_0/TQ1_0, 128 for Q1_0 / Q2_0_G128, 64 for Q2_0, ws = 1; scale: the `.scale`
         tensor or 1), with the scalar factor in the kernels' order ((ws * inv_s) * scale), bitweb.ref.bitlinear.part_products.
         Quantizing m rather than n makes exact .5 ties (they occur: embeddings are f16) round
         the same way here and on the GPU.
         ggml's Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 linears take llama.cpp's q8_0 / q8_1 blocks of
         32 instead (Linear.q8, bitweb.ref.bitlinear.q8_blocks); the K-quants f32.
         Only packed weights take int8 activations: float weights (F16/BF16/F32
         linears, a float LM head) always compute y = W x in f32, as llama.cpp does for float
         tensors, and as the GPU engine's dense kernel does. A packed LM head (Q1_0 / Q2_0
         tables) is a block linear here, as in lmhead.wgsl.
`bitnet` models with `.scale` tensors multiply each linear's output by that scale.
Attention (Config flags): Q / K / V biases (qwen2: q += attn_q_bias, k += attn_k_bias, v +=
attn_v_bias, one f32 add each, first), QK-norm (qwen3: each q / k head RMS-normalised and times
attn_q_norm / attn_k_norm, f32, before RoPE), RoPE pairs NEOX (i, i + head_dim/2) or NORM (2i, 2i + 1,
llama).
KV cache (`kv_cache=`, the engine's option): "f16" (default) keeps the roped K and the V rows as
the GPU's f16 cache stores them (bitweb.ref.ops.kv_round: clamped to +-65504, rounded to nearest
even), "f32" as computed; attention then runs on those values in float.
"""
from __future__ import annotations

import numpy as np

from bitweb.generation import KV_CACHE, check_kv, fit_context, start
from bitweb.model import BIASES, LINEARS, NORMS, Model, ModelError, a8_linears
from bitweb.options import ACTIVATIONS
from bitweb.ref.bitlinear import activations, q8_blocks
from bitweb.ref.ops import kv_round
from bitweb.sampling import Sampler, SamplingParams, apply_penalty, top_candidates

F32 = np.float32


def rmsnorm(x, w, eps):
    """x (n, d) * w (d,) / sqrt(mean(x^2) + eps), per row."""
    return x * (F32(1) / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + F32(eps))) * w


def rope(x, pos, n_heads, head_dim, base, mode="neox"):
    """Rotate pair i of each head by pos * base^(-2i/head_dim); mode "neox": pairs (i, i + head_dim/2)
    (transformers' rotate_half), "norm": adjacent pairs (2i, 2i + 1) (ggml mode 0, llama).
    x (n, n_heads*head_dim)."""
    half = head_dim // 2
    inv = base ** (-2.0 * np.arange(half, dtype=np.float64) / head_dim)
    ang = np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]          # (n, half)
    cos, sin = np.cos(ang).astype(F32)[:, None, :], np.sin(ang).astype(F32)[:, None, :]
    h = x.reshape(len(pos), n_heads, head_dim)
    if mode == "norm":
        a, b = h[..., 0::2], h[..., 1::2]
        out = np.empty_like(h)
        out[..., 0::2], out[..., 1::2] = a * cos - b * sin, a * sin + b * cos
        return out.reshape(x.shape)
    a, b = h[..., :half], h[..., half:]
    return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1).reshape(x.shape)


def head_norm(x, w, n_heads, head_dim, eps):
    """RMSNorm of each head of x (n, n_heads*head_dim) over its head_dim values, times w (head_dim,)."""
    return rmsnorm(x.reshape(len(x), n_heads, head_dim), w, eps).reshape(x.shape)


def attention(q, K, V, pos0, n_head, n_head_kv, head_dim):
    """Causal GQA. q (n, n_head*hd) at positions pos0.., K/V (T, n_head_kv*hd) -> (n, n_head*hd)."""
    n, T = q.shape[0], K.shape[0]
    group = n_head // n_head_kv
    qh = q.reshape(n, n_head, head_dim).transpose(1, 0, 2)                     # (H, n, hd)
    kh = np.repeat(K.reshape(T, n_head_kv, head_dim).transpose(1, 0, 2), group, axis=0)   # (H, T, hd)
    vh = np.repeat(V.reshape(T, n_head_kv, head_dim).transpose(1, 0, 2), group, axis=0)
    s = (qh @ kh.transpose(0, 2, 1)) * F32(1.0 / np.sqrt(head_dim))              # (H, n, T)
    s = np.where(np.arange(T)[None, :] <= (pos0 + np.arange(n))[:, None], s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p = p / p.sum(axis=-1, keepdims=True)
    return (p @ vh).transpose(1, 0, 2).reshape(n, n_head * head_dim)


class Linear:
    """One weight: float32 W (n_out, n_in); for packed formats also the int8 values t (n_out, n_in),
    scales d (n_out, n_scales) per scale block (a tensor scale folded into d), offsets o likewise
    (a format with offsets: value = t d + o; else None) and ws (the tensor scale of a tensor_scale
    format, I2_S, else None); optional output scale."""

    def __init__(self, gf, ti, scale_ti=None):
        n_in, n_out = ti.shape
        fmt = ti.format
        data = gf.tensor_data(ti.name)
        self.vec_dot = fmt.vec_dot               # a8: ggml's q8 blocks (bitweb.ref.bitlinear.q8_blocks)
        self.scale = None if scale_ti is None else F32(np.frombuffer(gf.tensor_data(scale_ti.name), "<f4")[0])
        if fmt.packed:
            t, d, o = fmt.unpack(data, ti.n_elements)
            self.t = t.reshape(n_out, n_in)
            self.d = (np.repeat(d, n_out) if d.size == 1 else d).reshape(n_out, -1).astype(F32)
            self.ws = F32(d.reshape(-1)[0]) if fmt.tensor_scale else None
            self.o = None if o is None else o.reshape(n_out, -1).astype(F32)
            self.w = (self.t.reshape(n_out, self.d.shape[1], -1) * self.d[:, :, None]).reshape(n_out, n_in)
            if self.o is not None:
                self.w = (self.w.reshape(n_out, self.o.shape[1], -1) + self.o[:, :, None]).reshape(n_out, n_in)
        else:
            self.t = self.o = None
            self.w = fmt.dequantize(data, ti.n_elements).reshape(n_out, n_in)

    def __call__(self, x, nw, eps, a8: bool):
        """W . rmsnorm(x, nw): x (n, n_in) -> (n, n_out), with the norm folded in as the kernels
        do (bitweb.ref.bitlinear.activations, one row at a time): m = x * nw, rinv = 1/rms(x);
        f32: y = (W m) * rinv; a8 (packed weights only): q = int8(m), y = (sum_b d I_b) * ((ws * inv_s) * scale)
        (I2_S: S = the integer dot, ws its tensor scale; others ws = 1; with offsets o: + sum_b o sum_{j in b} q)."""
        if a8 and self.t is not None and self.vec_dot:    # ggml's integer path, as bitlinear.wgsl Q8B
            return self.q8(x, nw, eps)
        rows = [activations(r, nw, a8 and self.t is not None, eps) for r in x]
        if not a8 or self.t is None:
            y = np.stack([r["m"] for r in rows]) @ self.w.T * np.array([[r["stat"]] for r in rows], F32)
            return y if self.scale is None else y * self.scale
        nb = self.d.shape[1]
        xq = np.stack([r["q"] for r in rows]).reshape(x.shape[0], nb, -1)              # (n, nb, bs) int32
        dots = np.einsum("nbk,obk->nob", xq, self.t.astype(np.int32).reshape(self.t.shape[0], nb, -1))
        f = np.array([[r["stat"]] for r in rows], F32)                                  # inv_s per token
        if self.ws is not None:                                                          # I2_S: one block
            s, f = dots[..., 0].astype(F32), self.ws * f
        elif self.o is None:
            s = (dots.astype(F32) * self.d[None]).sum(axis=-1, dtype=F32)
        else:                                                                            # q d + o per scale block
            qsum = xq.sum(axis=-1).astype(F32)                                           # (n, nb)
            s = (dots.astype(F32) * self.d[None] + qsum[:, None, :] * self.o[None]).sum(axis=-1, dtype=F32)
        return s * (f if self.scale is None else f * self.scale)

    def q8(self, x, nw, eps):
        """a8 on a Format.vec_dot linear: per row q8_blocks (ggml's q8_0 / q8_1), then per block
        T = (d dx) isum (+ o sx), summed in f32 (the GPU's order differs: float rounding only)."""
        n_out, nb = self.d.shape
        t = self.t.astype(np.int32).reshape(n_out, nb, -1)
        out = []
        for r in x:
            a = q8_blocks(r, nw, eps)
            isum = np.einsum("bk,obk->ob", a["q"].reshape(nb, -1), t)
            T = (self.d * a["dx"]) * isum.astype(F32)
            if self.o is not None:
                T = T + self.o * a["sx"]
            out.append(T.sum(axis=1, dtype=F32))
        y = np.stack(out).astype(F32)
        return y if self.scale is None else y * self.scale


class NumpyModel:
    """The numpy forward pass with a KV cache, and the same generate() as the engine (sync)."""

    def __init__(self, model: Model, activations: str = "a8", max_context: int | None = None,
                 kv_cache: str = KV_CACHE, linear=None):
        """linear: the class of the packed linears (default Linear; a subclass can change how one
        computes, e.g. dev/archs/llamacpp_logits.py emulates llama.cpp's activation quantization)."""
        linear = linear or Linear
        if activations not in ACTIVATIONS:
            raise ValueError(f"activations {activations!r}: must be one of {ACTIVATIONS}")
        cfg, gf = model.cfg, model.gguf
        self.model, self.cfg, self.activations = model, cfg, activations
        self.a8 = a8_linears(cfg, activations)   # int8 activations: "a8" on ternary / binary linears
        self.kv_cache = check_kv(kv_cache)       # "f16": K / V rows stored rounded as the GPU's f16 cache
        self.n_ctx, self.context_note = fit_context(cfg, max_context, kv=kv_cache)   # the engine's default, less GPU limits

        def vec(ti):
            return ti.format.dequantize(gf.tensor_data(ti.name), ti.n_elements)

        def mat(ti):
            return vec(ti).reshape(ti.np_shape)

        self.token_embd = mat(model.token_embd)                  # (V, e)
        self.lm_head = self.token_embd if model.output is None else mat(model.output)   # (V, e)
        # a packed head (Q1_0 / Q2_0) computes what a block linear does (lmhead.wgsl PACKED), a8 included
        self.head = linear(gf, model.lm_head) if model.lm_head.format.packed else None
        self.output_norm = vec(model.output_norm)
        self.blk = []
        for b in model.blk:                       # a tensor the architecture lacks stays None
            layer = {n: None if getattr(b, n) is None else vec(getattr(b, n)) for n in NORMS + BIASES}
            for n in LINEARS:
                layer[n] = linear(gf, getattr(b, n), getattr(b, n + "_scale"))
            self.blk.append(layer)
        self.reset()

    @classmethod
    def from_gguf(cls, gf, activations: str = "a8", max_context: int | None = None,
                  kv_cache: str = KV_CACHE, linear=None) -> "NumpyModel":
        return cls(Model.from_gguf(gf), activations, max_context, kv_cache, linear)

    @property
    def tokenizer(self):
        return self.model.tokenizer

    def reset(self):
        c = self.cfg
        self.K = np.zeros((c.n_layer, self.n_ctx, c.kv_dim), F32)   # post-RoPE keys, by position
        self.V = np.zeros((c.n_layer, self.n_ctx, c.kv_dim), F32)
        self.cached_ids = []                                        # tokens whose K/V are in the cache

    def forward(self, ids, pos0: int):
        """Run tokens `ids` at positions pos0.. (the cache must hold 0..pos0-1); logits (n, V)."""
        c = self.cfg
        n = len(ids)
        if pos0 + n > self.n_ctx:
            raise ValueError(f"positions {pos0}..{pos0 + n - 1} are past the context {self.n_ctx}")
        pos = np.arange(pos0, pos0 + n)
        x = self.token_embd[np.asarray(ids)]                                          # (n, e)
        for i, L in enumerate(self.blk):
            # q, k, v = Wq | Wk | Wv . rmsnorm(x, attn_norm)                         (n, q) (n, kv) (n, kv)
            q, k, v = (self.linear(L, w, x, "attn_norm") for w in ("attn_q", "attn_k", "attn_v"))
            # RoPE q, k at pos; K, V rows -> cache; causal GQA                         (n, q)
            o = self.attention(i, q, k, v, pos)
            # x += Wo . rmsnorm(o, attn_sub_norm)                                      (n, e)
            x = x + self.linear(L, "attn_output", o, "attn_sub_norm")
            # g = act(Wg . n) * (Wu . n), n = rmsnorm(x, ffn_norm)                     (n, f)
            g = self.ffn(L, x, "ffn_norm")
            # x += Wd . rmsnorm(g, ffn_sub_norm)                                       (n, e)
            x = x + self.linear(L, "ffn_down", g, "ffn_sub_norm")
        # logits = head . rmsnorm(x, output_norm); a packed head as a block linear     (n, V)
        if self.head is not None:
            return self.head(x, self.output_norm, c.eps, self.a8 and self.model.lm_head.format.a8)
        return rmsnorm(x, self.output_norm, c.eps) @ self.lm_head.T

    # the block's vocabulary (as bitweb.blocks.block's): each honours the Config flags it meets
    def linear(self, L, w, x, norm):
        """L[w] . rmsnorm(x, L[norm]) (x as is when the architecture has no such norm): (n, n_out)."""
        return L[w](x, L[norm], self.cfg.eps, self.a8)

    def attention(self, i, q, k, v, pos):
        """Q / K / V biases (Config.qkv_bias: added to q, k, v), QK-norm (Config.qk_norm: each q
        and k head RMS-normalised, times attn_q_norm / attn_k_norm), RoPE q, k at positions pos
        (Config.rope: neox or norm pairs), write K, V rows pos of block i's cache, causal GQA over
        the positions so far: (n, q)."""
        c, L = self.cfg, self.blk[i]
        end = int(pos[-1]) + 1
        if c.qkv_bias:
            q, k, v = q + L["attn_q_bias"], k + L["attn_k_bias"], v + L["attn_v_bias"]
        if c.qk_norm:
            q = head_norm(q, L["attn_q_norm"], c.n_head, c.head_dim, c.eps)
            k = head_norm(k, L["attn_k_norm"], c.n_head_kv, c.head_dim, c.eps)
        q = rope(q, pos, c.n_head, c.head_dim, c.rope_base, c.rope)
        k = rope(k, pos, c.n_head_kv, c.head_dim, c.rope_base, c.rope)                 # roped keys
        self.K[i, pos] = kv_round(k, self.kv_cache)             # as the cache stores them (f16: rounded)
        self.V[i, pos] = kv_round(v, self.kv_cache)
        return attention(q, self.K[i, :end], self.V[i, :end], int(pos[0]), c.n_head, c.n_head_kv, c.head_dim)

    def ffn(self, L, x, norm):
        """act(Wg . n) * (Wu . n), n = rmsnorm(x, L[norm]); act relu^2 or silu (Config.ffn): (n, f)."""
        act = (lambda g: np.maximum(g, 0) ** 2) if self.cfg.ffn == "relu2" else (lambda g: g / (1 + np.exp(-g)))
        return act(self.linear(L, "ffn_gate", x, norm)) * self.linear(L, "ffn_up", x, norm)

    def logits(self, ids):
        """Logits for every position of a fresh sequence (n, V) (resets the cache)."""
        self.reset()
        out = self.forward(list(ids), 0)
        self.cached_ids = list(ids)
        return out

    def _sample(self, sampler: Sampler, logits, context, allowed=None):
        p = sampler.params
        lg = apply_penalty(logits.tolist(), p, context)
        if allowed is not None:                   # Sampler.sample_allowed, sorted by numpy
            if not allowed:
                raise ValueError("the grammar allows no token at this step")
            idx = np.asarray(allowed, dtype=np.int64)
            v = np.asarray(lg, dtype=np.float64)[idx]
            if p.greedy:
                return int(idx[int(np.argmax(v))])            # the first maximum: the lowest id
            order = np.lexsort((idx, -v))
            return sampler.sample(list(zip(v[order].tolist(), idx[order].tolist())))
        if p.greedy:
            return int(np.argmax(np.asarray(lg, dtype=F32)))
        return sampler.sample(top_candidates(lg, len(lg)))

    def generate(self, prompt_ids, params: SamplingParams | None = None, max_tokens: int = 128,
                 on_token=None, should_stop=None, ignore_eos: bool = False, stop_ids=None, constraint=None):
        """Same contract as engine.Engine.generate (synchronous). Reuses the KV cache for the
        longest common prefix with the tokens already in it. constraint: a bitweb.grammar.Constraint
        (fresh, built with the same stop ids): each step samples among the tokens it allows, told
        how many tokens are left so the output is complete by max_tokens / the context's end."""
        st = start(self, prompt_ids, params, max_tokens, on_token, should_stop, ignore_eos, stop_ids, constraint)
        run, sampler, budget, keep, prompt = st.run, st.sampler, st.budget, st.keep, st.prompt
        if max_tokens <= 0:
            return run.result()

        def allowed():
            return None if constraint is None else constraint.ids(budget - len(run.ids))

        logits = self.forward(prompt[keep:], keep)[-1]
        self.cached_ids = list(prompt)
        context = list(prompt)
        t = self._sample(sampler, logits, context, allowed())
        run.prefill_done()
        while True:
            if constraint is not None:
                constraint.advance(t)             # the last token too: the constraint ends where the text does
            if not run.accept(t):
                break
            context.append(t)
            logits = self.forward([t], len(self.cached_ids))[-1]
            self.cached_ids.append(t)
            t = self._sample(sampler, logits, context, allowed())
            run.n_decode += 1
        return run.result()
