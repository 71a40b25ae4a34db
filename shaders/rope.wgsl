// rope.wgsl: RoPE for prefill rows (NEOX or NORM pairs, optional biases and QK-norm first), and the K/V
// cache write.
//
// Input: M rows of the fused projection, row m = token at position p = params.pos + m:
//   qkv[m] = q (NH heads) | k (NKV heads) | v (NKV heads), each head HD floats, unroped.
// QKV_BIAS (Qwen2): every value first gets its bias, x <- x + qkvb[j] (qkvb: one row laid out as
//   qkv's, attn_q.bias | attn_k.bias | attn_v.bias; qkv_at, common_sincos.wgsl), q, k and v alike.
// QK_NORM (Qwen3): every q and k head is first RMS-normalised over its HD values and multiplied by
//   the norm weight (qkn: attn_q_norm for q heads, attn_k_norm for k heads):
//   x <- (x * rinv) * w,  rinv = inverseSqrt(sum x^2 / HD + EPS)   (qk_rinv, common_sincos.wgsl)
// Then for every q and k head, pair (x_j, x_j') with frequency index i < HD/2:
//   NEOX (default): j = i, j' = i + HD/2;   ROPE_NORM (ggml mode 0, llama): j = 2i, j' = 2i + 1
//   a = p_f32 * freqs[i]                    (one f32 multiply; freqs[i] = f32(base^(-2i/HD)) from
//                                            the host, bitweb.kernels.ops.rope_freqs)
//   x'[j]  = x[j] cos a - x[j'] sin a
//   x'[j'] = x[j] sin a + x[j'] cos a
// (cos a, sin a): sincos4, pairs: rope_at / rope2, all in common_sincos.wgsl, the same functions as
// attention.wgsl's decode, so a prompt's K rows are the same bits prefilled or decoded.
// Outputs: q heads (biased) roped in place in qkv; k heads roped into the cache, v (biased) copied
// into the cache: attention.wgsl's prefill then reads q and the cache only.
// KV cache layout (one buffer per layer for K, one for V): [NKV][MAX_CTX][HD] values, i.e.
//   K[g, p, d] is value ((g * MAX_CTX + p) * HD + d), stored as common_kv.wgsl says: f32, or with
//   KV_F16 f16 (array<f16> with shader-f16, else pack2x16float pairs in u32): kv_store rounds.
// Rows with p >= MAX_CTX are not written (the engine keeps p0 + M <= MAX_CTX).
//
// Bindings, in order: qkv f32[M][(NH + 2 NKV) HD] (read_write), freqs f32[HD/2], k cache, v cache
//           (KV4), params (m = M rows, pos = p0 of row 0), qkn f32[2][HD] (QK_NORM: q weight | k
//           weight), qkvb f32[(NH + 2 NKV) HD] (QKV_BIAS).
// Thread mapping: one workgroup per row; QK_NORM: thread t first sums the squares of heads t,
// t + WG, ... (serially, into workgroup memory); then thread t handles the vec4 pair groups it,
// it + WG, ... of the (NH + NKV) * HD/8 groups, then the NKV * HD/4 vec4 of v. HD % 8 == 0.

override HD: u32 = 128u;
override NH: u32 = 4u;
override NKV: u32 = 1u;
override MAX_CTX: u32 = 256u;
override WG: u32 = 64u;
override EPS: f32 = 1e-6;      // QK_NORM epsilon (the model's RMS norm epsilon)

#include common_params

@group(0) @binding(auto) var<storage, read_write> qkv: array<vec4<f32>>;
@group(0) @binding(auto) var<storage, read> freqs: array<vec4<f32>>;
@group(0) @binding(auto) var<storage, read_write> kc: array<KV4>;
@group(0) @binding(auto) var<storage, read_write> vc: array<KV4>;
@group(0) @binding(auto) var<storage, read> params: Params;
#if QK_NORM
@group(0) @binding(auto) var<storage, read> qkn: array<vec4<f32>>;

var<workgroup> hr: array<f32, NH + NKV>;                  // rinv of each q and k head of the row
#endif
#if QKV_BIAS
@group(0) @binding(auto) var<storage, read> qkvb: array<vec4<f32>>;
#endif

#include common_sincos
#include common_kv

@compute @workgroup_size(WG)
fn rope(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let m = wid.x + wid.y * nwg.x;
    let p = params.pos + m;
    if (m >= params.m || p >= MAX_CTX) { return; }
    let h4 = HD / 4u;
    let h8 = HD / 8u;
    let row = m * (NH + 2u * NKV) * h4;
    let fp = f32(p);
#if QK_NORM
    for (var h = lid; h < NH + NKV; h += WG) { hr[h] = qk_rinv(row, h * h4); }
    workgroupBarrier();
#endif
    for (var it = lid; it < (NH + NKV) * h8; it += WG) {
        let h = it / h8;
        let i = it % h8;
        let o = rope_at(i);
        var a = qkv_at(row, h * h4 + o.x);
        var b = qkv_at(row, h * h4 + o.y);
#if QK_NORM
        let wb = select(h4, 0u, h < NH);                   // q heads: attn_q_norm, k heads: attn_k_norm
        a = (a * hr[h]) * qkn[wb + o.x];
        b = (b * hr[h]) * qkn[wb + o.y];
#endif
        let r = rope2(a, b, sincos4(fp * freqs[i]));
        if (h < NH) {
            qkv[row + h * h4 + o.x] = r[0];
            qkv[row + h * h4 + o.y] = r[1];
        } else {
            let kb = ((h - NH) * MAX_CTX + p) * h4;
            kc[kb + o.x] = kv_store(r[0]);
            kc[kb + o.y] = kv_store(r[1]);
        }
    }
    for (var it = lid; it < NKV * h4; it += WG) {
        vc[((it / h4) * MAX_CTX + p) * h4 + it % h4] = kv_store(qkv_at(row, (NH + NKV) * h4 + it));
    }
}
