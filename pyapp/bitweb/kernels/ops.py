"""Launch specs for rmsnorm / rope / embedding / attention / sampling (stdlib only).

Every function returns Steps (bitweb.kernels.Step); bind names below are the keys of the buffer
dict given to `step.instantiate(dev, buffers)`. Row counts and positions that change per call
live in one 32-byte `params` buffer; shapes fixed per model are override constants.

params block (little endian, 8 words), written with `params(...)`:
    word 0  m         u32  rows in this call (prefill tokens M; dense last_row reads row m - 1)
    word 1  pos       u32  decode: position of the current token; prefill: position of row 0
    word 2  n_ids     u32  number of token ids in `penalty_ids`
    word 3  penalty   f32  repetition penalty r (1.0 = off)
    word 4  inv_temp  f32  1 / temperature for the topk softmax statistics (1.0 = plain softmax)
    words 5..7        reserved, 0

Buffers and layouts
    KV cache   per layer one K and one V buffer of [n_kv_head][max_ctx][head_dim] values:
               K[g, p, d] is value (g * max_ctx + p) * head_dim + d  (kv_cache_bytes()).
               K rows are stored roped. kv="f32": f32 values; kv="f16": f16 values (2 bytes:
               half the memory), as array<f16> where the device has shader-f16, else the same
               bytes as pack2x16float pairs in u32 (value 2j low half of word j); written
               clamped to +-65504 and rounded to f16, read back exactly and used in f32
               (shaders/common_kv.wgsl). f16=None: the device picks (kv_variant() names it);
               f16=False forces the u32 pairs (tests run both on an adapter with shader-f16).
    qkv        f32[(n_head + 2 n_kv_head) * head_dim] per token: q heads | k heads | v heads,
               unroped (prefill: M such rows; rope() ropes q in place).
    freqs      f32[head_dim / 2] = rope_freqs(head_dim, base): f32(base ** (-2 i / head_dim)),
               computed in float64 on the host and rounded once; angle = f32(pos) * freqs[i]
               in f32 (one rounding) on the GPU and in bitweb.ref.ops.
    A8 rows    (rmsnorm(a8=True), input of the prefill W1.58A8 packed kernels)
               q: u32[M][n / 4], 4 int8 per word little endian: element 4j + b of a row is byte b
                  (bits 8b..8b+7, two's complement) of word j (WGSL pack4xI8 / unpack4xI8);
               scale: f32[M], inv_s = max(max_i |y_i|, 1e-5) * (1 / 127), so y ~= q * inv_s
                  (transformers' bitnet activation quantisation). Computed as the decode kernel
                  (bitlinear.wgsl NORM + A8) does, in its order: m = x * norm, rinv = inverseSqrt(
                  sum x^2 / n + eps), amax = max|m|, a = amax * rinv, sq = 127 / amax if a >= 1e-5
                  else 127e5 * rinv, q = clamp(round_half_even(m * sq), -128, 127), inv_s = max(a,
                  1e-5) * (1/127): q never depends on the float order of the sum of squares, and
                  with wg = the decode kernel's wg (bitlinear.choose) inv_s is bit for bit its.
                  bitlinear_tiled multiplies: P = S * (ws * inv_s * mult), as the decode kernel.

Rows: rope, attention_prefill and dense.matmul / gemv(last_row) read M from params.m and skip
dispatched rows >= M, so one prefill plan built for m_max rows serves any M <= m_max. rmsnorm,
embedding and softmax process every dispatched row (rows >= M compute harmless values into
their own rows of the m_max-sized buffers).
Split-K (attention_decode splits): a decode plan is fixed, so splits is too; each kv head gets
`splits` workgroups over chunks of ceil((pos+1)/splits) positions. splits = 1 is one dispatch;
on GPUs with long contexts 8..32 splits keep the machine busy (n_kv_head workgroups alone do not).

API (rows = M; workgroup counts are in the Steps)
    params(m=1, pos=0, n_ids=0, penalty=1.0, inv_temp=1.0) -> bytes (PARAMS_BYTES)
    rope_freqs(head_dim, base, factors=None) -> bytes
    KV_TYPES = ("f16", "f32"), KV_BYTES {type: bytes per value}
    kv_cache_bytes(n_kv_head, head_dim, max_ctx, kv="f32") -> int (one of K or V, one layer)
    kv_variant(kv, shader_f16) -> "f32" | "f16" (array<f16>) | "f16 pack2x16float" (u32 pairs)
    rmsnorm(n, rows, *, eps=1e-5, a8=False, wg=64, norm=True) -> Step
        bind ("x", "norm", "y") or with a8 ("x", "norm", "q", "scale"); x, y f32[rows][n]
        (a8: pass the decode kernel's wg so the prefill A8 rows equal the decode ones bit for bit)
        norm=False (a8 only): the A8 rows of x as is (no norm before the linear): ("x", "q", "scale")
    rope(n_head, n_kv_head, head_dim, max_ctx, rows, *, mode="neox", qk_norm=False, eps=1e-6,
         qkv_bias=False, kv="f32", f16=None) -> Step
        bind ("qkv", "freqs", "k_cache", "v_cache", "params") (+ "qkn" with qk_norm, + "qkv_bias"
        with qkv_bias)
        params: m = rows, pos = p0. mode "neox" pairs (i, i + hd/2), "norm" adjacent pairs
        (2i, 2i + 1); qkv_bias: qkv_bias (f32[(n_head + 2 n_kv_head) * head_dim]: attn_q.bias |
        attn_k.bias | attn_v.bias, a qkv row) added to every row first (q, k and v: the cache gets
        the biased v); qk_norm: each q / k head RMS-normalised (eps) and multiplied by qkn
        (f32[2][head_dim]: attn_q_norm | attn_k_norm) before the rotation.
    attention_decode(n_head, n_kv_head, head_dim, max_ctx, *, splits=1, wg=None, mode="neox",
                     qk_norm=False, eps=1e-6, qkv_bias=False, kv="f32", f16=None) -> [Step] (1 or 2)
        decode: bind ("k_cache", "v_cache", "qkv", "o", "params", "freqs")       splits == 1
                bind ("k_cache", "v_cache", "qkv", "attn_part", "params", "freqs") splits > 1
                (+ "qkn" with qk_norm, + "qkv_bias" with qkv_bias), then combine: bind ("attn_part", "o")
                attn_part: attn_part_bytes(...)
        reads params.pos; adds the biases, ropes q and k itself (mode, qk_norm, qkv_bias as rope())
        and writes cache row pos.
        o: f32[n_head * head_dim].
    attention_prefill(n_head, n_kv_head, head_dim, max_ctx, rows, *, wg=None, kv="f32", f16=None) -> Step
        bind ("k_cache", "v_cache", "qkv", "o", "params")  after rope(); o f32[rows][n_head*head_dim]
    embedding(wtype, n_embd, n_vocab, rows=1, *, shards=None, max_shard_bindings=8) -> [Step]
        bind ("ids", "x", "w0", "w1", ...): ids u32[rows], x f32[rows][n_embd]; shards are
        dense.shard_rows() of the table (the same buffers as a tied LM head). One Step binds up to
        max_shard_bindings shards (WebGPU default limit of 8 storage buffers per stage -> pass 6);
        more shards give more Steps. Out-of-range ids give NaN rows.
    argmax(n_vocab, *, wg=256, mask=False) -> Step
        bind ("logits", "token", "penalty_ids", "params"): token u32[1] (feed it to embedding as
        "ids"); penalty_ids u32[>= 1] (params.n_ids used); logits are penalised in place.
    topk(n_vocab, k, *, wg=256, mask=False) -> Step
        bind ("logits", "top_ids", "penalty_ids", "params", "top_vals"): top_ids u32[k],
        top_vals f32[k + 2] = k logits sorted descending (ties: lower id), max logit,
        sum exp((l - max) * inv_temp) over the vocabulary.
    mask=True (define MASK; bind "mask" last: u32[mask_words(n_vocab)], a grammar's allowed
        tokens, token t iff bit t & 31 of word t >> 5): after the penalty, a token the mask leaves
        out is treated as a NaN logit: never the argmax, not in the statistics, ranked last by topk
        (so with fewer than k allowed tokens the list ends with left-out ones, which the host drops).
    softmax(n, rows, *, wg=256) -> Step     bind ("x", "y"), f32[rows][n]
"""
from __future__ import annotations

import struct

from bitweb import formats
from bitweb.kernels import Step, bound, format_arg, format_defines
from bitweb.kernels.dense import workgroups_1d

TABLE_TYPES = formats.select("table")      # token_embd types (bitweb.formats); decode: fmt_value of their include

PARAMS_BYTES = 32


class OpsSpecError(ValueError):
    pass


def params(m: int = 1, pos: int = 0, n_ids: int = 0, penalty: float = 1.0, inv_temp: float = 1.0) -> bytes:
    return struct.pack("<3I2f3I", m, pos, n_ids, penalty, inv_temp, 0, 0, 0)


def rope_freqs(head_dim: int, base: float, factors=None) -> bytes:
    """f32[head_dim/2]: base^(-2i/head_dim) in float64, divided by factors[i] if given, rounded to f32."""
    half = head_dim // 2
    f = [base ** (-2.0 * i / head_dim) for i in range(half)]
    if factors is not None:
        f = [a / float(b) for a, b in zip(f, factors)]
    return struct.pack(f"<{half}f", *f)


KV_BYTES = {"f16": 2, "f32": 4}           # bytes per cached value
KV_TYPES = tuple(KV_BYTES)


def _kv(kv: str) -> None:
    if kv not in KV_BYTES:
        raise OpsSpecError(f"KV cache type {kv!r}: must be one of {KV_TYPES}")


def kv_cache_bytes(n_kv_head: int, head_dim: int, max_ctx: int, kv: str = "f32") -> int:
    _kv(kv)
    return KV_BYTES[kv] * n_kv_head * max_ctx * head_dim


def kv_variant(kv: str, shader_f16: bool) -> str:
    """How a cache of type kv is stored on a device with (or without) shader-f16."""
    _kv(kv)
    return "f32" if kv == "f32" else ("f16" if shader_f16 else "f16 pack2x16float")


def _kv_defines(kv: str, f16) -> dict:
    """The defines of a KV cache type (common_kv.wgsl); f16 None: the device's F16."""
    _kv(kv)
    if kv == "f32":
        return {}
    return {"KV_F16": True} if f16 is None else {"KV_F16": True, "F16": bool(f16)}


def attn_part_bytes(n_head: int, head_dim: int, splits: int) -> int:
    return 4 * n_head * splits * (head_dim + 2)


def _heads(n_head, n_kv_head, head_dim):
    if n_kv_head < 1 or n_head % n_kv_head or not 1 <= n_head // n_kv_head <= 8:
        raise OpsSpecError(f"attention: n_head = {n_head} must be 1..8 times n_kv_head = {n_kv_head}")
    if head_dim % 8 or not 8 <= head_dim <= 256:
        raise OpsSpecError(f"attention: head_dim = {head_dim} must be a multiple of 8 in 8..256")


def _gmax(g: int) -> dict:
    """The per-thread head arrays' size (attention.wgsl GMAX: 2, 4 or 8 >= g q heads per kv head)."""
    return {"GMAX2": True} if g <= 2 else {"GMAX4": True} if g <= 4 else {}


def _consts(n_head, n_kv_head, head_dim, max_ctx):
    return {"HD": head_dim, "NH": n_head, "NKV": n_kv_head, "MAX_CTX": max_ctx}


def _attn_wg(head_dim, wg):
    if wg is None:
        wg = 64
        while wg < head_dim:
            wg *= 2
    if not head_dim <= wg <= 256:
        raise OpsSpecError(f"attention: wg = {wg} must be in head_dim ({head_dim})..256")
    return wg


def rmsnorm(n: int, rows: int, *, eps: float = 1e-5, a8: bool = False, wg: int = 64, norm: bool = True) -> Step:
    if n % 4 or n <= 0:
        raise OpsSpecError(f"rmsnorm: n = {n} must be a positive multiple of 4")
    if wg & (wg - 1) or not 1 <= wg <= 256:
        raise OpsSpecError(f"rmsnorm: wg = {wg} must be a power of two <= 256")
    if not norm:
        if not a8:
            raise OpsSpecError("rmsnorm: norm=False is the A8 quantisation of rows without a norm: needs a8=True")
        d = {"A8": True, "NO_NORM": True}
        return Step("rmsnorm", "rmsnorm", _rmsnorm_bind(d), workgroups_1d(rows), {"N": n, "WG": wg}, d)
    d = {"A8": True} if a8 else {}
    return Step("rmsnorm", "rmsnorm", _rmsnorm_bind(d), workgroups_1d(rows), {"N": n, "WG": wg, "EPS": float(eps)}, d)


def _rmsnorm_bind(d):
    return bound("rmsnorm", d, {"x": "x", "w": "norm", "q": "q", "s": "scale", "y": "y"})


ROPE_MODES = ("neox", "norm")


# the buffer of each WGSL variable of rope.wgsl and attention.wgsl (bound(): the loader numbers them)
_KV_NAMES = {"kc": "k_cache", "vc": "v_cache", "qkv": "qkv", "params": "params",
             "freqs": "freqs", "qkn": "qkn", "qkvb": "qkv_bias"}


def _rope_switches(mode: str, qk_norm: bool, eps: float, qkv_bias: bool) -> tuple:
    """(constants, defines) of a RoPE mode and the QK-norm and Q / K / V bias switches."""
    if mode not in ROPE_MODES:
        raise OpsSpecError(f"rope: mode {mode!r} must be one of {ROPE_MODES}")
    defines = {"ROPE_NORM": True} if mode == "norm" else {}
    if qk_norm:
        defines["QK_NORM"] = True
    if qkv_bias:
        defines["QKV_BIAS"] = True
    return ({"EPS": float(eps)} if qk_norm else {}), defines


def rope(n_head: int, n_kv_head: int, head_dim: int, max_ctx: int, rows: int, *, wg: int = 64,
         mode: str = "neox", qk_norm: bool = False, eps: float = 1e-6, qkv_bias: bool = False, kv: str = "f32",
         f16=None) -> Step:
    _heads(n_head, n_kv_head, head_dim)
    c, d = _rope_switches(mode, qk_norm, eps, qkv_bias)
    d.update(_kv_defines(kv, f16))
    return Step("rope", "rope", bound("rope", d, _KV_NAMES), workgroups_1d(rows),
                dict(_consts(n_head, n_kv_head, head_dim, max_ctx), WG=wg, **c), d)


def attention_decode(n_head: int, n_kv_head: int, head_dim: int, max_ctx: int, *, splits: int = 1,
                     wg: int | None = None, mode: str = "neox", qk_norm: bool = False, eps: float = 1e-6,
                     qkv_bias: bool = False, kv: str = "f32", f16=None) -> list:
    _heads(n_head, n_kv_head, head_dim)
    wg = _attn_wg(head_dim, wg)
    if not 1 <= splits <= 65535:
        raise OpsSpecError(f"attention: splits = {splits} out of range")
    rc, rd = _rope_switches(mode, qk_norm, eps, qkv_bias)
    rd.update(_kv_defines(kv, f16))
    rd.update(_gmax(n_head // n_kv_head))
    c = dict(_consts(n_head, n_kv_head, head_dim, max_ctx), WG=wg, SPLITS=splits)
    out = "o" if splits == 1 else "attn_part"
    steps = [Step("attention", "decode", bound("attention", rd, dict(_KV_NAMES, out=out)),
                  (n_kv_head, splits, 1), dict(c, **rc), rd)]

    if splits > 1:
        steps.append(Step("attention", "combine", bound("attention", {}, {"part": "attn_part", "co": "o"}),
                          (n_head, 1, 1), dict(c)))
    return steps


def attention_prefill(n_head: int, n_kv_head: int, head_dim: int, max_ctx: int, rows: int, *,
                      wg: int | None = None, kv: str = "f32", f16=None) -> Step:
    _heads(n_head, n_kv_head, head_dim)
    d = _kv_defines(kv, f16)
    if not 1 <= rows <= 65535:
        raise OpsSpecError(f"attention prefill: rows = {rows} out of range 1..65535")
    bind = bound("attention", d, {"kc": "k_cache", "vcv": "v_cache", "qkv": "qkv", "outv": "o", "params": "params"})
    if head_dim % 16 or head_dim > 256:   # the fallback: a workgroup of >= head_dim threads per (kv head, row)
        c = dict(_consts(n_head, n_kv_head, head_dim, max_ctx), WG=_attn_wg(head_dim, wg))
        return Step("attention", "prefill_wg", bind, (n_kv_head, rows, 1), c, dict(d, **_gmax(n_head // n_kv_head)))
    wg = 8 if wg is None else wg          # rows (invocations) per workgroup, a multiple of 4 (quads)
    if wg % 4 or not 4 <= wg <= 256:
        raise OpsSpecError(f"attention prefill: wg = {wg} rows per workgroup must be a multiple of 4 in 4..256")
    c = dict(_consts(n_head, n_kv_head, head_dim, max_ctx), WG=wg)
    return Step("attention", "prefill", bind, (n_head, -(-rows // wg), 1), c, d)


def embedding(wtype, n_embd: int, n_vocab: int, rows: int = 1, *, shards=None,
              max_shard_bindings: int = 8, wg: int = 64) -> list:
    f = format_arg(wtype, TABLE_TYPES, "embedding: table type", OpsSpecError)
    blk = f.block_size
    if n_embd <= 0 or n_embd % blk:
        raise OpsSpecError(f"embedding: n_embd = {n_embd} must be positive"
                           + (f" (a multiple of {blk} for {f.name})" if blk > 1 else ""))
    shards = [(0, n_vocab)] if shards is None else [tuple(s) for s in shards]
    rps = shards[0][1] - shards[0][0]
    if shards[0][0] != 0 or shards[-1][1] != n_vocab or any(
            (r1 - r0 != rps and i != len(shards) - 1) or r0 != i * rps for i, (r0, r1) in enumerate(shards)):
        raise OpsSpecError(f"embedding: shards {shards} must be equal runs of rows from 0 to {n_vocab} "
                           f"(dense.shard_rows)")
    if not 1 <= max_shard_bindings <= 8:
        raise OpsSpecError(f"embedding: max_shard_bindings = {max_shard_bindings} must be in 1..8")
    steps = []
    for first in range(0, len(shards), max_shard_bindings):
        nsb = min(max_shard_bindings, len(shards) - first)
        defines = format_defines(f)
        defines.update({f"NS{i}": True for i in range(1, nsb)})
        names = dict({"ids": "ids", "x": "x"}, **{f"w{i}": f"w{first + i}" for i in range(8)})
        steps.append(Step("embedding", "embed", bound("embedding", defines, names),
                          workgroups_1d(rows),
                          {"N": n_embd, "N_VOCAB": n_vocab, "RPS": rps, "NSB": nsb, "ROW0": first * rps, "WG": wg},
                          defines))
    return steps


def _one_wg(wg):
    if wg & (wg - 1) or not 1 <= wg <= 256:
        raise OpsSpecError(f"sampling: wg = {wg} must be a power of two <= 256")


def mask_words(n_vocab: int) -> int:
    """u32 words of a token mask over n_vocab tokens (bitweb.grammar's Constraint.mask layout)."""
    return (n_vocab + 31) >> 5


def argmax(n_vocab: int, *, wg: int = 256, mask: bool = False) -> Step:
    _one_wg(wg)
    d = {"MASK": True} if mask else {}
    names = {"logits": "logits", "out": "token", "pids": "penalty_ids", "params": "params", "amask": "mask"}
    return Step("sampling", "argmax", bound("sampling", d, names), (1, 1, 1), {"V": n_vocab, "WG": wg}, d)


def topk(n_vocab: int, k: int, *, wg: int = 256, mask: bool = False) -> Step:
    _one_wg(wg)
    if not 1 <= k <= min(256, n_vocab):
        raise OpsSpecError(f"topk: k = {k} must be in 1..min(256, n_vocab = {n_vocab})")
    d = {"MASK": True} if mask else {}
    names = {"logits": "logits", "out": "top_ids", "pids": "penalty_ids", "params": "params", "top_vals": "top_vals",
             "tmask": "mask"}
    return Step("sampling", "topk", bound("sampling", d, names), (1, 1, 1), {"V": n_vocab, "K": k, "WG": wg}, d)


def softmax(n: int, rows: int, *, wg: int = 256) -> Step:
    _one_wg(wg)
    return Step("sampling", "softmax", bound("sampling", {}, {"sx": "x", "sy": "y"}), workgroups_1d(rows),
                {"N_ROW": n, "WG": wg})
