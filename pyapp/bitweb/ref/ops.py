"""numpy mirrors of rmsnorm / rope / embedding / attention / sampling (CPython only) and their cases
(sampling's: bitweb.ref.ops_sampling).

The references compute in float64 from the exact f32 inputs (and the exact dequantized table
rows), with the two rounding points the kernels share on purpose:
  - RoPE angle a = f32(pos) * freqs[i], one f32 multiply, freqs = kernels.ops.rope_freqs (f32);
    cos/sin are then taken of that f32 value (the engine's numpy forward pass should do the same);
  - A8 (the decode kernel's form, bitlinear.wgsl NORM + A8): m = f32(x * w) (one rounding, as the
    kernel), amax = max|m|, a = amax * rinv, q = clamp(round_half_even(m * 127 / amax), -128, 127)
    when a >= 1e-5, else round(m * 127e5 * rinv); scale inv_s = max(a, 1e-5) / 127 (y ~= q * inv_s).
So the only errors are the kernels' f32 roundings, bounded below (u = 2^-24; WGSL: + - * exact
rounding, / 2.5 ulp, exp (3 + 2|x|) ulp, sqrt ~3 ulp):
  rmsnorm   y = (x inv) w: sum of squares of depth D = ceil(N / 4WG) + 4 + log2 WG (fixed tree),
            so inv has relative error <= (D/2 + 7) u; y: rtol = (D/2 + 10) u. A8 q: exact. The
            inputs are nudged until every m*sq is >= 1e-3 away from a rounding tie (and the
            kernel's m*sq differs from the float64 value by < 1e-4: 127/amax is one division;
            the small-amax branch's 127e5 * rinv carries inv's error, <= 127 (D/2 + 8) u), so the
            integer outputs are determined by the maths, not by rounding luck; scale inv_s =
            (amax * inv) * f32(1/127): rtol as y.
  rope      |err| <= 8 u (|x_i| + |x_{i+HD/2}|): sincos ~2 ulp after an exact Cody-Waite
            reduction, two products and a sum; atol = 8 u max(|x_i| + |x_{i+HD/2}|).
  biases    (QKV_BIAS) x + b is one correctly rounded f32 add in the kernels: the mirror adds in
            f32 (biased(), exact), and the bounds above are taken on the biased values.
  attention score error e_t <= (HD/4 + 28) u scale sum_i (|q_i|+|q_i'|)(|k_ti|+|k_ti'|)
            (dot depth + RoPE of q and k), exp adds (3 + 2|s_t - max|) u relative; since
            d o / d s_t = p_t (v_t - o) / L, to first order
            |do_d| <= sum_t p_t (e_t + exp_t) |v_td - o_d| / L + (n + 8 + 4 splits) u sum_t p_t |v_td| / L
            (the last term: accumulation chains over n positions and the split combine);
            atol = 2 x the largest such bound of the case (the factor covers second-order terms).
  sampling  ids exact. top_vals/softmax: S = sum exp(x_t), x_t = (l_t - max) inv_temp: each term
            has relative error e_t = (3 + 4|x_t| + 3 |l_t| inv_temp) u (exp, the subtraction and
            scaling, the penalty division), the tree sum adds D u S: bound_S = sum e_t p_t + D u S
            evaluated on the case's data; softmax y: rtol = max e_t + bound_S / S + 3 u.
  embedding exact (rows are exact dequantized values; compared as u32 bits, NaN rows included).
  KV cache  kv="f16" (common_kv.wgsl): the mirror stores kv_round(x) = f16(clip(x, +-65504)),
            rounded to nearest even (numpy's astype; lavapipe and SwiftShader do the same). WGSL
            lets a conversion pick either neighbour, so a row the kernel writes is compared as f16
            with one f16 ulp more (rtol 2^-10, atol 2^-24 for subnormals) on top of the f32 bound,
            and the attention bound adds, for those rows, that ulp of each K value to the score
            error (2^-10 scale sum_i |q_i k_ti|) and of each V value to the output (2^-10 p_t |v_t| / L).
            Rows the case gives (older positions) are f16 values, exact.
"""
from __future__ import annotations

import math

import numpy as np

from bitweb import formats
from bitweb.kernels import dense as dense_spec
from bitweb.kernels import ops as spec
from bitweb.ref.dense import add_case, encode, f32b, pad4
from bitweb.ref.ops_sampling import _log2, sampling_cases, u32b

U = 2.0 ** -24
H = 2.0 ** -10            # one f16 ulp, relative (the neighbour WGSL's f32 -> f16 conversion may pick)
F16_MAX = 65504.0


def kv_round(x: np.ndarray, kv: str = "f16") -> np.ndarray:
    """The values a KV cache of type kv stores for x, as f32: f16 = round to nearest even of
    x clamped to +-65504 (common_kv.wgsl's kv_store); f32 = x."""
    if kv == "f32":
        return np.asarray(x, np.float32)
    return np.clip(np.asarray(x, np.float32), -F16_MAX, F16_MAX).astype(np.float16).astype(np.float32)


# ---- references ------------------------------------------------------------------------------
def rmsnorm(x: np.ndarray, w: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """float64 y = x / sqrt(mean(x^2) + eps) * w, row-wise."""
    x64 = x.astype(np.float64)
    inv = 1.0 / np.sqrt((x64 * x64).mean(axis=-1, keepdims=True) + eps)
    return x64 * inv * w.astype(np.float64)


def a8_values(x: np.ndarray, w: np.ndarray | None, eps: float = 1e-5):
    """(v float64, inv_s float64 per row): the decode-form A8 quantisation before rounding, row-wise.

    m = f32(x * w), rinv = 1 / sqrt(mean(x^2) + eps), amax = max|m|, a = amax * rinv;
    v = m * 127 / amax if a >= 1e-5 else m * 127e5 * rinv; inv_s = max(a, 1e-5) / 127.
    w None (no norm before the linear, rmsnorm NO_NORM): m = x, rinv = 1."""
    x64 = x.astype(np.float64)
    if w is None:
        m, rinv = x64, np.ones(x.shape[:-1] + (1,))
    else:
        m = (x.astype(np.float32) * w.astype(np.float32)).astype(np.float64)
        rinv = 1.0 / np.sqrt((x64 * x64).mean(axis=-1, keepdims=True) + eps)
    amax = np.abs(m).max(axis=-1, keepdims=True)
    a = amax * rinv
    sq = np.where(a >= 1e-5, 127.0 / np.where(amax > 0, amax, 1.0), 127e5 * rinv)
    return m * sq, np.maximum(a, 1e-5)[..., 0] / 127.0


def quantize_a8(x: np.ndarray, w: np.ndarray, eps: float = 1e-5):
    """(q int8, inv_s f32 per row) as ops.rmsnorm(a8=True) (see a8_values): q = clamp(rint(v), -128, 127)."""
    v, inv_s = a8_values(x, w, eps)
    return np.clip(np.rint(v), -128, 127).astype(np.int8), inv_s.astype(np.float32)


def rope_freqs(head_dim: int, base: float) -> np.ndarray:
    return np.frombuffer(spec.rope_freqs(head_dim, base), dtype="<f4").copy()


def rope_angles(pos, freqs: np.ndarray) -> np.ndarray:
    """f32 angles, one f32 multiply: shape pos.shape + (head_dim/2,)."""
    p = np.asarray(pos, dtype=np.float32)[..., None]
    return p * freqs.astype(np.float32)


def rope(x: np.ndarray, pos, freqs: np.ndarray, mode: str = "neox") -> np.ndarray:
    """RoPE of x (..., heads, head_dim) at positions pos (shape x.shape[:-2]) in float64. mode
    "neox": pair (i, i + head_dim/2), "norm" (ggml mode 0): pair (2i, 2i + 1); angle freqs[i]."""
    half = x.shape[-1] // 2
    a = rope_angles(pos, freqs).astype(np.float64)[..., None, :]
    c, s = np.cos(a), np.sin(a)
    x64 = x.astype(np.float64)
    if mode == "norm":
        x0, x1 = x64[..., 0::2], x64[..., 1::2]
        out = np.empty_like(x64)
        out[..., 0::2], out[..., 1::2] = x0 * c - x1 * s, x0 * s + x1 * c
        return out
    x0, x1 = x64[..., :half], x64[..., half:]
    return np.concatenate([x0 * c - x1 * s, x0 * s + x1 * c], axis=-1)


def pair_of(x: np.ndarray, mode: str = "neox") -> np.ndarray:
    """|x_i| + |x_pair(i)| for every element (the scale of RoPE's rounding error), float64."""
    a = np.abs(x.astype(np.float64))
    if mode == "norm":
        sw = a.copy()
        sw[..., 0::2], sw[..., 1::2] = a[..., 1::2], a[..., 0::2]
        return a + sw
    half = x.shape[-1] // 2
    return a + np.concatenate([a[..., half:], a[..., :half]], axis=-1)


def qk_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """Per-head RMSNorm (Qwen3 q_norm / k_norm): x (..., head_dim) / rms * w, float64."""
    x64 = x.astype(np.float64)
    return x64 / np.sqrt((x64 * x64).mean(axis=-1, keepdims=True) + eps) * w.astype(np.float64)


def qk_norm_ulps(head_dim: int) -> float:
    """Relative error bound (units of u) of the kernels' QK-norm: serial sum of HD/4 dots of 4
    squares ((HD/4 + 3) u on the sum), / HD, + eps and inverseSqrt (5 u) halved by the root, then
    two products."""
    return (head_dim / 4 + 3) / 2 + 9



def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """o (n_head, hd) for roped q (n_head, hd) over k, v (n_kv, n_pos, hd), float64 softmax."""
    nh, hd = q.shape
    g = nh // k.shape[0]
    o = np.empty((nh, hd))
    for h in range(nh):
        s = k[h // g].astype(np.float64) @ q[h].astype(np.float64) / math.sqrt(hd)
        p = np.exp(s - s.max())
        o[h] = p @ v[h // g].astype(np.float64) / p.sum()
    return o


# ---- case helpers ----------------------------------------------------------------------------
def _a8_rows(rng, m, n, w, eps, margin=1e-3):
    """Rows x whose A8 quantisation has no value within `margin` of a rounding tie. Row 0 is all
    zeros and row 1 tiny (max|y| < 1e-5: the 127e5 * rinv branch) when m >= 4 (w None, no norm:
    max|x| < 1e-5, the 127e5 branch)."""
    x = rng.normal(size=(m, n)).astype(np.float32)
    if m >= 4:
        x[0] = 0
        x[1] = np.clip(x[1], -3.9, 3.9) * np.float32(3e-9 if w is not None else 2.5e-6)
    for _ in range(100):
        v = np.abs(a8_values(x, w, eps)[0])
        bad = np.abs(v - np.floor(v) - 0.5) < margin
        if not bad.any():
            return x
        x = np.where(bad, x * np.float32(1.01), x).astype(np.float32)
    raise RuntimeError("could not move the A8 test rows away from rounding ties")


def rmsnorm_cases(b, rng, scope):
    shapes = [(2, 64, 64, True)] if scope == "browser" else \
        [(5, 260, 64, False), (3, 2560, 64, False), (7, 2560, 64, True), (3, 100, 32, True), (2, 6912, 256, True)]
    for m, n, wg, a8 in shapes:
        w = rng.uniform(0.5, 1.5, size=n).astype(np.float32)
        d = math.ceil(n / (4 * wg)) + 4 + _log2(wg)
        rtol = (d / 2 + 10) * U
        step = spec.rmsnorm(n, m, a8=a8, wg=wg)
        if a8:
            x = _a8_rows(rng, m, n, w, 1e-5)
            q, s = quantize_a8(x, w)
            if m >= 4:      # the zero row and the small-amax row took the 127e5 * rinv branch
                assert not q[0].any() and s[0] == s[1] == np.float32(1e-5 / 127) and 20 < np.abs(q[1]).max() < 127
            bufs = [{"name": "x", "data": f32b(x)}, {"name": "norm", "data": f32b(w)},
                    {"name": "q", "size": m * n, "expect": q.tobytes(), "dtype": "u32"},
                    {"name": "scale", "size": 4 * m, "expect": f32b(s), "rtol": rtol}]
        else:
            x = rng.normal(size=(m, n)).astype(np.float32)
            bufs = [{"name": "x", "data": f32b(x)}, {"name": "norm", "data": f32b(w)},
                    {"name": "y", "size": 4 * m * n, "expect": f32b(rmsnorm(x, w)), "rtol": rtol, "atol": 1e-30}]
        add_case(b, f"ops.rmsnorm{'.a8' if a8 else ''}.m{m}.n{n}.wg{wg}", [step], bufs)
    # A8 rows with no norm before the linear (NO_NORM: Wo / Wd inputs of blocks without sub-norms)
    for m, n, wg in [(4, 64, 64)] if scope == "browser" else [(5, 260, 64), (4, 2048, 256), (3, 6144, 128)]:
        x = _a8_rows(rng, m, n, None, 0.0)
        x[-1] *= np.float32(40.0)                 # a large row (v = x 127 / amax is scale-free: still tie-free)
        q, s = quantize_a8(x, None)
        if m >= 4:      # the zero row and the small row took the 127e5 branch
            assert not q[0].any() and s[0] == s[1] == np.float32(1e-5 / 127) and 20 < np.abs(q[1]).max() < 127
        bufs = [{"name": "x", "data": f32b(x)}, {"name": "q", "size": m * n, "expect": q.tobytes(), "dtype": "u32"},
                {"name": "scale", "size": 4 * m, "expect": f32b(s), "rtol": 2 * U}]
        add_case(b, f"ops.rmsnorm.a8.nonorm.m{m}.n{n}.wg{wg}", [spec.rmsnorm(n, m, a8=True, wg=wg, norm=False)], bufs)



def _pairsum(x, mode="neox"):
    """|x_i| + |x_pair(i)| per pair (..., head_dim / 2)."""
    if mode == "norm":
        return np.abs(x[..., 0::2]).astype(np.float64) + np.abs(x[..., 1::2])
    half = x.shape[-1] // 2
    return np.abs(x[..., :half]).astype(np.float64) + np.abs(x[..., half:])


def _cache(rng, nkv, max_ctx, hd, n_filled, kv="f32"):
    """Random roped K and V rows for positions < n_filled, zeros after (as a fresh cache), as a
    cache of type kv stores them."""
    k = np.zeros((nkv, max_ctx, hd), np.float32)
    v = np.zeros((nkv, max_ctx, hd), np.float32)
    k[:, :n_filled] = rng.normal(size=(nkv, n_filled, hd))
    v[:, :n_filled] = rng.normal(size=(nkv, n_filled, hd))
    return kv_round(k, kv), kv_round(v, kv)


def _kv_bytes(x, kv):
    return np.ascontiguousarray(x, dtype="<f2").tobytes() if kv == "f16" else f32b(x)


def _kv_buf(name, init, expect, kv, atol=0.0):
    """A K or V cache buffer of a case: initial rows `init` (None: zeros), the expected rows
    (kv_round'ed), compared as the cache's type with one f16 ulp of latitude (module docstring)."""
    b = {"name": name, "expect": _kv_bytes(expect, kv), "atol": atol}
    if init is None:
        b["size"] = len(b["expect"])
    else:
        b["data"] = _kv_bytes(init, kv)
    if kv == "f16":
        b.update(dtype="f16", rtol=H, atol=atol + U)
    return b


def _attn_atol(qr, k, v, n, splits, mode="neox", extra=0.0, new=()):
    """Bound on |o - o_ref| for roped q (nh, hd) over k, v (nkv, >= n, hd) (module docstring);
    extra: more units of u of relative error in q and k (QK-norm); new: the positions whose K / V
    the kernels rounded to f16 (either neighbour)."""
    nh, hd = qr.shape
    g = nh // k.shape[0]
    worst = 0.0
    for h in range(nh):
        kk, vv = k[h // g, :n].astype(np.float64), v[h // g, :n].astype(np.float64)
        s = kk @ qr[h] / math.sqrt(hd)
        p = np.exp(s - s.max())
        big_l = p.sum()
        o = p @ vv / big_l
        e = (hd / 4 + 28 + extra) * U * (_pairsum(kk, mode) @ _pairsum(qr[h], mode)) / math.sqrt(hd) \
            + (3 + 2 * (s.max() - s)) * U
        fresh = np.zeros(n, bool)
        fresh[[t for t in new if t < n]] = True
        e = e + fresh * H * (np.abs(kk) @ np.abs(qr[h])) / math.sqrt(hd)
        b = (p * e) @ np.abs(vv - o) / big_l + (n + 8 + 4 * splits) * U * (p @ np.abs(vv)) / big_l \
            + H * (p * fresh) @ np.abs(vv) / big_l
        worst = max(worst, float(b.max()))
    return 2 * worst


def _rope_heads(heads, pos, freqs, mode, qkn, nh, eps):
    """Expected roped q heads (m, nh, hd) and k heads (m, nkv, hd) of qkv rows heads (m, nh + 2 nkv, hd)
    in float64, QK-norm first when qkn (f32[2][hd]) is given; and the atol of each (module docstring)."""
    nkv = (heads.shape[1] - nh) // 2
    q, k = heads[:, :nh].astype(np.float64), heads[:, nh:nh + nkv].astype(np.float64)
    ulps = 8.0
    if qkn is not None:
        q, k = qk_norm(q, qkn[0], eps), qk_norm(k, qkn[1], eps)
        ulps += qk_norm_ulps(heads.shape[-1])
    atol = ulps * U * float(max(pair_of(q, mode).max(), pair_of(k, mode).max()))
    return rope(q, pos, freqs, mode), rope(k, pos, freqs, mode), atol, q, k


def _qkn(rng, hd):
    return rng.uniform(0.5, 1.5, size=(2, hd)).astype(np.float32)


def biased(qkv: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """qkv rows (..., width) plus the bias row (width,) (QKV_BIAS): one f32 add, as the kernels do."""
    return qkv if bias is None else (qkv.astype(np.float32) + bias.astype(np.float32)).astype(np.float32)


def _bias(rng, on: bool, width: int):
    """A random Q / K / V bias row (f32[width], values of either sign up to ~2) or None."""
    return rng.normal(scale=0.7, size=width).astype(np.float32) if on else None


def _extras(extra) -> tuple:
    """A case's optional tail: a KV cache variant (KV_VARIANTS; default "f32") and/or "bias"
    (QKV_BIAS): (variant, bias on)."""
    return next((e for e in extra if e in KV_VARIANTS), "f32"), "bias" in extra


def _tag(mode, qkn_on, bias_on, variant):
    return (".norm" if mode == "norm" else "") + (".qknorm" if qkn_on else "") + (".bias" if bias_on else "") \
        + _kv_tag(variant)


# KV cache variants of a case: "f32"; "f16" (the device's choice: array<f16> with shader-f16);
# "f16u32" (pack2x16float pairs in u32 forced, as on a device without shader-f16)
KV_VARIANTS = {"f32": ("f32", None), "f16": ("f16", None), "f16u32": ("f16", False)}


def _kv_tag(variant):
    return "" if variant == "f32" else f".kv{variant}"


def rope_cases(b, rng, scope):
    # (n_head, n_kv, head_dim, max_ctx, p0, rows, base, mode, qk_norm[, KV cache variant][, "bias"])
    shapes = [(4, 1, 32, 16, 3, 4, 10000.0, "norm", True)] if scope == "browser" else \
        [(4, 1, 64, 40, 33, 7, 10000.0, "neox", False), (3, 3, 32, 8, 0, 1, 10000.0, "neox", False),
         (20, 5, 128, 64, 60, 4, 500000.0, "neox", False), (4, 1, 64, 4096, 4093, 3, 10000.0, "neox", False),
         (4, 1, 64, 40, 33, 7, 10000.0, "norm", False), (16, 8, 128, 64, 60, 4, 1e6, "neox", True),
         (8, 2, 256, 40, 30, 3, 1000042.0, "norm", False), (4, 2, 32, 16, 5, 6, 10000.0, "norm", True),
         (40, 8, 64, 16, 9, 2, 1e6, "neox", True),
         (4, 1, 64, 40, 33, 7, 10000.0, "neox", False, "f16"), (4, 2, 32, 16, 5, 6, 10000.0, "norm", True, "f16u32"),
         (14, 2, 64, 40, 30, 5, 1e6, "neox", False, "bias"), (12, 2, 128, 16, 0, 3, 1e6, "neox", False, "bias", "f16"),
         (4, 2, 32, 16, 5, 6, 10000.0, "norm", True, "bias", "f16u32")]
    for nh, nkv, hd, max_ctx, p0, m, base, mode, qkn_on, *extra in shapes:
        variant, bias_on = _extras(extra)
        kv, f16 = KV_VARIANTS[variant]
        freqs = rope_freqs(hd, base)
        width = (nh + 2 * nkv) * hd
        qkv = rng.normal(size=(m, width)).astype(np.float32)
        if qkn_on:
            qkv *= rng.uniform(0.1, 10, size=(m, 1)).astype(np.float32)     # the norm removes the row scale
        if kv == "f16":
            qkv[-1, -hd:] *= np.float32(1e5)       # V values past the f16 range: stored clamped to +-65504
        qkn = _qkn(rng, hd) if qkn_on else None
        bias = _bias(rng, bias_on, width)
        pos = p0 + np.arange(m)
        heads = biased(qkv, bias).reshape(m, nh + 2 * nkv, hd)      # the values the kernel ropes and caches
        exp_qkv = qkv.copy().reshape(m, nh + 2 * nkv, hd)          # k and v rows stay as they were
        qr, kr, atol, _, _ = _rope_heads(heads, pos, freqs, mode, qkn, nh, 1e-6)
        exp_qkv[:, :nh] = qr
        kc, vc = np.zeros((nkv, max_ctx, hd), np.float32), np.zeros((nkv, max_ctx, hd), np.float32)
        kc[:, pos] = kr.transpose(1, 0, 2)
        vc[:, pos] = heads[:, nh + nkv:].transpose(1, 0, 2)
        step = spec.rope(nh, nkv, hd, max_ctx, m, mode=mode, qk_norm=qkn_on, eps=1e-6, qkv_bias=bias_on, kv=kv,
                         f16=f16)
        bufs = [{"name": "qkv", "data": f32b(qkv), "expect": f32b(exp_qkv), "atol": atol},
                {"name": "freqs", "data": f32b(freqs)},
                _kv_buf("k_cache", None, kv_round(kc, kv), kv, atol),
                _kv_buf("v_cache", None, kv_round(vc, kv), kv),
                {"name": "params", "data": spec.params(m=m, pos=p0)}]
        if qkn_on:
            bufs.append({"name": "qkn", "data": f32b(qkn)})
        if bias_on:
            bufs.append({"name": "qkv_bias", "data": f32b(bias)})
        add_case(b, f"ops.rope{_tag(mode, qkn_on, bias_on, variant)}.h{nh}x{nkv}.hd{hd}.p{p0}+{m}", [step], bufs)


def attention_decode_cases(b, rng, scope):
    # (n_head, n_kv, head_dim, max_ctx, pos, splits, wg, mode, qk_norm[, KV cache variant][, "bias"])
    shapes = [(4, 1, 32, 16, 9, 2, None, "neox", False), (4, 2, 64, 16, 7, 1, None, "norm", True),
              (4, 1, 32, 16, 9, 2, None, "neox", False, "f16u32"), (7, 1, 64, 16, 5, 1, None, "neox", False, "bias")] \
        if scope == "browser" else \
        [(8, 2, 64, 40, 0, 1, None, "neox", False), (8, 2, 64, 40, 39, 1, None, "neox", False),
         (8, 2, 64, 40, 39, 4, None, "neox", False), (3, 3, 32, 24, 2, 8, None, "neox", False),
         (4, 4, 64, 400, 300, 1, 64, "neox", False), (4, 1, 64, 400, 300, 3, 128, "neox", False),
         (4, 1, 64, 400, 300, 1, 128, "neox", False), (4, 1, 64, 400, 140, 1, 64, "neox", False),
         (20, 5, 128, 256, 255, 4, None, "neox", False),
         (8, 2, 64, 40, 39, 1, None, "norm", False), (16, 8, 128, 64, 40, 1, None, "neox", True),
         (8, 1, 64, 40, 21, 3, None, "norm", True), (8, 4, 256, 32, 17, 1, None, "norm", False),
         (16, 2, 128, 64, 0, 1, None, "neox", True),
         (4, 1, 64, 400, 300, 3, 128, "neox", False, "f16"), (8, 1, 64, 40, 21, 3, None, "norm", True, "f16u32"),
         (14, 2, 64, 40, 33, 1, None, "neox", False, "bias"), (12, 2, 128, 64, 40, 3, None, "neox", False, "bias"),
         (14, 2, 64, 40, 0, 1, None, "neox", False, "bias", "f16u32"), (8, 2, 64, 40, 21, 1, None, "norm", True, "bias")]
    for nh, nkv, hd, max_ctx, pos, splits, wg, mode, qkn_on, *extra in shapes:
        variant, bias_on = _extras(extra)
        kv, f16 = KV_VARIANTS[variant]
        freqs = rope_freqs(hd, 10000.0)
        qkv = rng.normal(size=(nh + 2 * nkv, hd)).astype(np.float32)
        if qkn_on:
            qkv *= np.float32(rng.uniform(0.1, 10))
        qkn = _qkn(rng, hd) if qkn_on else None
        bias = _bias(rng, bias_on, qkv.size)
        qkv_in, qkv = qkv, biased(qkv, None if bias is None else bias.reshape(qkv.shape))   # the buffer; what it means
        kc, vc = _cache(rng, nkv, max_ctx, hd, pos, kv)
        ekc, evc = kc.copy(), vc.copy()
        qr, kr, k_atol, qn, kn = _rope_heads(qkv[None], np.array([pos]), freqs, mode, qkn, nh, 1e-6)
        qr, kr = qr[0], kr[0]
        ekc[:, pos] = kv_round(kr, kv)
        evc[:, pos] = kv_round(qkv[nh + nkv:], kv)
        o = attention(qr, ekc[:, :pos + 1], evc[:, :pos + 1])
        extra = 2 * qk_norm_ulps(hd) if qkn_on else 0.0
        steps = spec.attention_decode(nh, nkv, hd, max_ctx, splits=splits, wg=wg, mode=mode, qk_norm=qkn_on,
                                      eps=1e-6, qkv_bias=bias_on, kv=kv, f16=f16)
        bufs = [_kv_buf("k_cache", kc, ekc, kv, k_atol), _kv_buf("v_cache", vc, evc, kv),
                {"name": "qkv", "data": f32b(qkv_in)},
                {"name": "o", "size": 4 * nh * hd, "expect": f32b(o),
                 "atol": _attn_atol(qr, ekc, evc, pos + 1, splits, mode, extra, [pos] if kv == "f16" else ())},
                {"name": "params", "data": spec.params(pos=pos)},
                {"name": "freqs", "data": f32b(freqs)}]
        if qkn_on:
            bufs.append({"name": "qkn", "data": f32b(qkn)})
        if bias_on:
            bufs.append({"name": "qkv_bias", "data": f32b(bias)})
        if splits > 1:
            bufs.append({"name": "attn_part", "size": spec.attn_part_bytes(nh, hd, splits)})
        tag = _tag(mode, qkn_on, bias_on, variant)
        add_case(b, f"ops.attention.decode{tag}.h{nh}x{nkv}.hd{hd}.pos{pos}.split{splits}", steps, bufs)


def attention_prefill_cases(b, rng, scope):
    """rope (writes the cache rows) then attention prefill, as the engine runs a prefill chunk."""
    # (n_head, n_kv, head_dim, max_ctx, p0, rows, wg, mode, qk_norm[, KV cache variant][, "bias"]); wg: rows
    # per workgroup of the prefill entry; head_dim 40 (not a multiple of 16) takes the prefill_wg fallback
    shapes = [(4, 2, 32, 16, 2, 5, None, "neox", False), (4, 2, 32, 16, 2, 5, None, "neox", False, "f16u32"),
              (7, 1, 64, 16, 2, 5, None, "neox", False, "bias")] \
        if scope == "browser" else \
        [(8, 2, 64, 48, 0, 13, None, "neox", False), (8, 2, 64, 48, 30, 18, None, "neox", False),
         (2, 2, 32, 16, 3, 5, None, "neox", False), (4, 1, 64, 260, 200, 3, 4, "neox", False),
         (20, 5, 128, 80, 9, 70, 16, "neox", False), (4, 2, 40, 24, 5, 6, None, "neox", False),
         (8, 2, 64, 48, 30, 9, None, "norm", False), (16, 8, 128, 48, 20, 7, None, "neox", True),
         (4, 2, 40, 24, 5, 6, None, "norm", True),
         (8, 2, 64, 48, 30, 18, None, "neox", False, "f16"), (8, 2, 64, 48, 30, 9, None, "norm", True, "f16u32"),
         (4, 2, 40, 24, 5, 6, None, "norm", True, "f16u32"),
         (14, 2, 64, 48, 30, 9, None, "neox", False, "bias"), (12, 2, 128, 48, 0, 13, None, "neox", False, "bias", "f16u32")]
    for nh, nkv, hd, max_ctx, p0, m, wg, mode, qkn_on, *extra in shapes:
        variant, bias_on = _extras(extra)
        kv, f16 = KV_VARIANTS[variant]
        freqs = rope_freqs(hd, 10000.0)
        width = (nh + 2 * nkv) * hd
        qkv = rng.normal(size=(m, width)).astype(np.float32)
        qkn = _qkn(rng, hd) if qkn_on else None
        bias = _bias(rng, bias_on, width)
        heads = biased(qkv, bias).reshape(m, nh + 2 * nkv, hd)
        pos = p0 + np.arange(m)
        kc, vc = _cache(rng, nkv, max_ctx, hd, p0, kv)
        ekc, evc = kc.copy(), vc.copy()
        qr, kr, r_atol, _, _ = _rope_heads(heads, pos, freqs, mode, qkn, nh, 1e-6)
        ekc[:, pos] = kv_round(kr.transpose(1, 0, 2), kv)
        evc[:, pos] = kv_round(heads[:, nh + nkv:].transpose(1, 0, 2), kv)
        exp_qkv = qkv.reshape(heads.shape).astype(np.float64)      # rope writes the q heads only
        exp_qkv[:, :nh] = qr
        o = np.stack([attention(qr[i], ekc[:, :p + 1], evc[:, :p + 1]) for i, p in enumerate(pos)])
        extra = 2 * qk_norm_ulps(hd) if qkn_on else 0.0
        new = list(pos) if kv == "f16" else []
        atol_o = max(_attn_atol(qr[i], ekc, evc, p + 1, 1, mode, extra, new) for i, p in enumerate(pos))
        steps = [spec.rope(nh, nkv, hd, max_ctx, m, mode=mode, qk_norm=qkn_on, eps=1e-6, qkv_bias=bias_on, kv=kv,
                           f16=f16),
                 spec.attention_prefill(nh, nkv, hd, max_ctx, m, wg=wg, kv=kv, f16=f16)]
        bufs = [{"name": "qkv", "data": f32b(qkv), "expect": f32b(exp_qkv), "atol": r_atol},
                {"name": "freqs", "data": f32b(freqs)},
                _kv_buf("k_cache", kc, ekc, kv, r_atol), _kv_buf("v_cache", vc, evc, kv),
                {"name": "params", "data": spec.params(m=m, pos=p0)},
                {"name": "o", "size": 4 * m * nh * hd, "expect": f32b(o), "atol": atol_o}]
        if qkn_on:
            bufs.append({"name": "qkn", "data": f32b(qkn)})
        if bias_on:
            bufs.append({"name": "qkv_bias", "data": f32b(bias)})
        add_case(b, f"ops.attention.prefill{_tag(mode, qkn_on, bias_on, variant)}.h{nh}x{nkv}.hd{hd}.p{p0}+{m}",
                 steps, bufs)


def embedding_cases(b, rng, scope):
    # (wtype, n_embd, n_vocab, max_binding rows per shard or None, max_shard_bindings)
    shapes = [("F16", 64, 100, 30, 8)] if scope == "browser" else \
        [("F32", 60, 50, None, 8), ("F16", 64, 37, None, 8), ("BF16", 66, 41, None, 8), ("Q8_0", 96, 33, None, 8),
         ("F16", 2560, 300, None, 8), ("F16", 64, 1000, 100, 8), ("Q8_0", 64, 1000, 99, 3), ("BF16", 32, 64, 8, 8)]
    embedding_shape_cases(b, rng, shapes)
    # the packed table formats (Q1_0, Q2_0 ...: Bonsai's embeddings), with their own generator; any
    # other packed table format of the registry gets a case of its own
    packed = [("Q1_0", 128, 100, 30, 8), ("Q4_K", 256, 20, 7, 8), ("Q5_0", 64, 33, None, 8)] if scope == "browser" else \
        [("Q1_0", 256, 37, None, 8), ("Q2_0", 128, 41, None, 8), ("Q2_0_G128", 256, 300, 40, 3),
         ("Q1_0", 128, 1000, 99, 3)]
    embedding_shape_cases(b, np.random.default_rng(2121), packed)
    if scope != "browser":
        seen = {formats.get(w) for w, *_ in packed}
        embedding_shape_cases(b, np.random.default_rng(2122), [(f.name, 2 * f.block_size, 53, 20, 8)
                              for f in spec.TABLE_TYPES if f.packed and f not in seen])


def embedding_shape_cases(b, rng, shapes):
    for wtype, n, nv, rps, msb in shapes:
        data, table = encode(wtype, rng.uniform(-2, 2, size=(nv, n)).astype(np.float32))
        rb = dense_spec.row_bytes(wtype, n)
        shards = dense_spec.shard_rows(nv, rb, rps * rb) if rps else [(0, nv)]
        ids = np.array([0, nv - 1, nv // 2, 7 % nv, nv, nv - 2, 2 ** 32 - 1], dtype=np.uint32)
        x = np.full((ids.size, n), np.nan, np.float32)
        ok = ids < nv
        x[ok] = table[ids[ok]]
        xb = x.view(np.uint32).copy()
        xb[~ok] = 0x7FC00000
        steps = spec.embedding(wtype, n, nv, ids.size, shards=shards, max_shard_bindings=msb)
        bufs = [{"name": f"w{i}", "data": pad4(data[r0 * rb:r1 * rb])} for i, (r0, r1) in enumerate(shards)]
        bufs += [{"name": "ids", "data": u32b(ids)},
                 {"name": "x", "size": x.nbytes, "expect": u32b(xb), "dtype": "u32"}]
        add_case(b, f"ops.embedding.{wtype}.n{n}.v{nv}.shards{len(shards)}.steps{len(steps)}", steps, bufs)


def cases(b, scope: str = "full"):
    rng = np.random.default_rng(4321)
    rmsnorm_cases(b, rng, scope)
    rope_cases(b, rng, scope)
    attention_decode_cases(b, rng, scope)
    attention_prefill_cases(b, rng, scope)
    embedding_cases(b, rng, scope)
    sampling_cases(b, rng, scope)
