"""BitNet b1.58 2B4T architecture at a small size, with W1.58A8 quantization-aware training.

One block (the block recipe of pyapp/bitweb/blocks.py; same as transformers' BitNetDecoderLayer):
    a = rmsnorm(x, attn_norm); q, k, v = linear(a); rope(q, k)  (NEOX: pairs i, i + head_dim/2)
    o = attention(q, k, v)  (causal, GQA: query head h uses kv head h // (n_head / n_kv), scale 1/sqrt(head_dim))
    x = x + attn_output(rmsnorm(o, attn_sub_norm))
    f = rmsnorm(x, ffn_norm); g = relu(ffn_gate(f))^2 * ffn_up(f)
    x = x + ffn_down(rmsnorm(g, ffn_sub_norm))
logits = token_embd . rmsnorm(x, output_norm)     (tied head; the embedding stays float)

rmsnorm(x, w) = w * x / sqrt(mean(x^2) + eps).

Every linear is a BitLinear computing exactly what transformers.integrations.bitnet's
AutoBitLinear does in "online" mode (WeightQuant + ActQuant, straight-through gradients):
    weights:     m = max(mean|W|, 1e-5); W_q = clamp(round(W / m), -1, 1) * m     (per tensor)
    activations: s = 127 / max(max_i |x_i|, 1e-5) per token; x_q = clamp(round(x * s), -128, 127) / s
    y = x_q . W_q^T
so y[o] = (sum_i t[o, i] * q[i]) * m / s with t ternary and q int8: the exported file
stores t (packed) and m (the I2_S per-tensor scale).

Module names are the GGUF tensor names (blk[i].attn_q, token_embd, ...).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    n_vocab: int = 853
    dim: int = 256
    n_layer: int = 4
    n_head: int = 4
    n_kv_head: int = 2
    head_dim: int = 64
    ffn: int = 512
    rope_base: float = 10000.0
    eps: float = 1e-5
    n_ctx: int = 512

    def to_dict(self):
        return asdict(self)


def weight_quant(w: torch.Tensor) -> torch.Tensor:
    """Absmean ternary, as transformers' WeightQuant: W_q = clamp(round(W * (1/m)), -1, 1) / (1/m)."""
    s = 1.0 / w.abs().mean().clamp(min=1e-5)
    return (w * s).round().clamp(-1, 1) / s


def act_quant(x: torch.Tensor) -> torch.Tensor:
    """Per-token absmax int8, as transformers' ActQuant."""
    s = 127 / torch.linalg.vector_norm(x, ord=float("inf"), dim=-1, keepdim=True).clamp(min=1e-5)
    return (x * s).round_().clamp_(-128, 127).div_(s)


def ternary(w: torch.Tensor):
    """(t int8 in {-1, 0, 1}, m float): the exported form of a linear weight; t * m == weight_quant(w)
    up to the rounding of 1/(1/m)."""
    m = w.detach().float().abs().mean().clamp(min=1e-5)
    t = (w.detach().float() * (1.0 / m)).round().clamp(-1, 1).to(torch.int8)
    return t, float(m)


class _STE(torch.autograd.Function):
    """Straight-through estimator: forward f(x), backward the identity (as transformers'
    WeightQuant / ActQuant)."""

    @staticmethod
    def forward(ctx, x, f):
        return f(x)

    @staticmethod
    def backward(ctx, g):
        return g, None


class BitLinear(nn.Linear):
    """nn.Linear (no bias) with W1.58A8 fake quantization and straight-through gradients."""

    def __init__(self, n_in: int, n_out: int):
        super().__init__(n_in, n_out, bias=False)
        self.frozen = None     # inference from a file: the quantized weight itself (see freeze)

    def freeze(self, wq: torch.Tensor):
        """Use wq as the quantized weight (no re-quantization): the forward of exported weights."""
        self.frozen = wq.float()

    def forward(self, x):
        if self.frozen is not None:
            return F.linear(act_quant(x), self.frozen)
        return F.linear(_STE.apply(x, act_quant), _STE.apply(self.weight, weight_quant))


class RMSNorm(nn.Module):
    def __init__(self, n: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rope(x: torch.Tensor, pos: torch.Tensor, base: float) -> torch.Tensor:
    """NEOX rotary embedding. x: (B, H, T, D); pos: (B, T) integer positions.
    Pair (i, i + D/2) rotates by angle pos * base^(-2i/D)."""
    d = x.shape[-1]
    inv = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    ang = pos[:, None, :, None].float() * inv            # (B, 1, T, D/2)
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class Block(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        self.attn_norm = RMSNorm(c.dim, c.eps)
        self.attn_q = BitLinear(c.dim, c.n_head * c.head_dim)
        self.attn_k = BitLinear(c.dim, c.n_kv_head * c.head_dim)
        self.attn_v = BitLinear(c.dim, c.n_kv_head * c.head_dim)
        self.attn_sub_norm = RMSNorm(c.n_head * c.head_dim, c.eps)
        self.attn_output = BitLinear(c.n_head * c.head_dim, c.dim)
        self.ffn_norm = RMSNorm(c.dim, c.eps)
        self.ffn_gate = BitLinear(c.dim, c.ffn)
        self.ffn_up = BitLinear(c.dim, c.ffn)
        self.ffn_sub_norm = RMSNorm(c.ffn, c.eps)
        self.ffn_down = BitLinear(c.ffn, c.dim)

    def forward(self, x, pos, mask, cache=None):
        c = self.c
        B, T, _ = x.shape
        a = self.attn_norm(x)
        q = self.attn_q(a).view(B, T, c.n_head, c.head_dim).transpose(1, 2)
        k = self.attn_k(a).view(B, T, c.n_kv_head, c.head_dim).transpose(1, 2)
        v = self.attn_v(a).view(B, T, c.n_kv_head, c.head_dim).transpose(1, 2)
        q, k = rope(q, pos, c.rope_base), rope(k, pos, c.rope_base)
        if cache is not None:                      # cache: dict with "k", "v" (B, Hkv, S, D)
            if "k" in cache:
                k = torch.cat((cache["k"], k), dim=2)
                v = torch.cat((cache["v"], v), dim=2)
            cache["k"], cache["v"] = k, v
        rep = c.n_head // c.n_kv_head
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        if mask is None:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None])
        o = o.transpose(1, 2).reshape(B, T, c.n_head * c.head_dim)
        x = x + self.attn_output(self.attn_sub_norm(o))
        f = self.ffn_norm(x)
        g = F.relu(self.ffn_gate(f)).square() * self.ffn_up(f)
        return x + self.ffn_down(self.ffn_sub_norm(g))


class BitNet(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        self.token_embd = nn.Embedding(c.n_vocab, c.dim)
        self.blk = nn.ModuleList(Block(c) for _ in range(c.n_layer))
        self.output_norm = RMSNorm(c.dim, c.eps)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)
        for b in self.blk:   # scaled init for the residual outputs (GPT-2 style)
            nn.init.normal_(b.attn_output.weight, std=0.02 / math.sqrt(2 * c.n_layer))
            nn.init.normal_(b.ffn_down.weight, std=0.02 / math.sqrt(2 * c.n_layer))

    def forward(self, ids, pos=None, mask=None, caches=None):
        """ids (B, T) -> logits (B, T, n_vocab). pos defaults to 0..T-1; mask (B, T, S) bool
        (True = may attend) defaults to causal; caches: one dict per block for decoding."""
        if pos is None:
            pos = torch.arange(ids.shape[1])[None].expand(ids.shape[0], -1)
        x = self.token_embd(ids)
        for i, b in enumerate(self.blk):
            x = b(x, pos, mask, None if caches is None else caches[i])
        return self.output_norm(x) @ self.token_embd.weight.T

    def linears(self):
        """(gguf name, BitLinear) for every quantized weight, in file order."""
        for i, b in enumerate(self.blk):
            for n in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"):
                yield f"blk.{i}.{n}", getattr(b, n)


@torch.no_grad()
def greedy(model: BitNet, prompts: list, max_new: int, stop: set) -> list:
    """Batched greedy decoding with a KV cache. Prompts are left-padded; each row's positions
    start at 0 at its first real token. Returns the new ids per prompt (stop token excluded)."""
    B = len(prompts)
    L = max(len(p) for p in prompts)
    pad = torch.tensor([L - len(p) for p in prompts])
    ids = torch.tensor([[0] * (L - len(p)) + list(p) for p in prompts])
    j = torch.arange(L)
    pos = (j[None] - pad[:, None]).clamp(min=0)
    # query i may see key j when j <= i and j is real; a padding query sees only itself
    mask = (j[None, None, :] <= j[None, :, None]) & (j[None, None, :] >= pad[:, None, None])
    mask |= torch.eye(L, dtype=torch.bool)[None]
    caches = [{} for _ in model.blk]
    logits = model(ids, pos, mask, caches)[:, -1]
    out = [[] for _ in range(B)]
    done = torch.zeros(B, dtype=torch.bool)
    cur = pos[:, -1]
    keymask = j[None, :] >= pad[:, None]              # (B, S) real keys so far
    for _ in range(max_new):
        nxt = logits.argmax(-1)
        for b in range(B):
            if not done[b]:
                t = int(nxt[b])
                if t in stop:
                    done[b] = True
                else:
                    out[b].append(t)
        if bool(done.all()):
            break
        cur = cur + 1
        keymask = torch.cat((keymask, torch.ones(B, 1, dtype=torch.bool)), dim=1)
        logits = model(nxt[:, None], cur[:, None], keymask[:, None, :], caches)[:, -1]
    return out
