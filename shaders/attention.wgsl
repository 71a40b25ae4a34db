// attention.wgsl: causal GQA attention over the KV cache (decode and prefill), f32 throughout.
//
// Maths, for q head h (kv head g = h / G, G = NH / NKV) of the token at position P:
//   s[t] = (q_h . K[g, t]) / sqrt(HD),  t = 0..P            (causal: positions <= P)
//   o_h  = sum_t exp(s[t] - max s) V[g, t] / sum_t exp(s[t] - max s)
// computed online over tiles of WG positions (running max m, running sum l, rescale by
// exp(m_old - m_new)), the max subtracted in f32 before every exp.
// KV cache (one K and one V buffer per layer): [NKV][MAX_CTX][HD] f32, K[g, p, d] at
//   (g * MAX_CTX + p) * HD + d.
// RoPE (decode entry only) is rope.wgsl's rotation (NEOX, or adjacent pairs with ROPE_NORM) with
//   the same angle a = f32(P) * freqs[i] and the same functions (common_sincos.wgsl); with
//   QK_NORM each q and k head is first RMS-normalised and multiplied by its norm weight (qkn),
//   as rope.wgsl does, so decode and prefill write the same K bits.
//
// decode: one token. qkv = q (NH heads) | k (NKV) | v (NKV), unroped; P = params.pos.
//   Workgroup (g, s), s < SPLITS, handles kv head g and its G q heads over the position chunk
//   [s C, min((s+1) C, P+1)), C = ceil((P+1) / SPLITS) (split-K for long contexts).
//   The workgroup whose chunk holds P (exactly one per kv head) ropes k, writes k and v to the
//   cache row P, then a storageBarrier makes the row visible to its own invocations.
//   SPLITS == 1: out = o f32[NH][HD].
//   SPLITS > 1:  out = partials f32[NH][SPLITS][HD + 2]: unnormalised o, then m, then l
//                (an empty chunk leaves m = -FLT_MAX, l = 0, o = 0); `combine` then writes
//                o_h = sum_s e^(m_s - M) o_s / sum_s e^(m_s - M) l_s, M = max_s m_s.
// prefill: M rows of qkv at positions P = params.pos + m (q already roped in place and K/V rows
//   written by rope.wgsl); out = o f32[M][NH][HD]. Workgroup (g, m).
//
// Bindings: decode  0 k cache, 1 v cache, 2 qkv, 3 out, 4 params, 5 freqs f32[HD/2],
//                   6 qkn f32[2][HD] (QK_NORM: attn_q_norm | attn_k_norm)
//           prefill 0 k cache, 1 v cache, 2 qkv f32[M][(NH + 2 NKV) HD], 3 o, 4 params
//           combine 0 partials, 1 o
// Thread mapping: in a tile, thread t computes the G scores of position t0 + t (one K row read
// serves G heads); threads d < HD then accumulate o[j][d] for the G heads (one V row read serves
// G heads). Decode with QK_NORM: threads j <= G first sum the squares of q head j (j < G) or of the
// k head (j = G). WG >= HD, WG <= 256, G <= 8, HD % 8 == 0.

override HD: u32 = 128u;
override NH: u32 = 4u;
override NKV: u32 = 1u;
override MAX_CTX: u32 = 256u;
override WG: u32 = 128u;
override SPLITS: u32 = 1u;
override EPS: f32 = 1e-6;      // QK_NORM epsilon (the model's RMS norm epsilon)

#include common_params

@group(0) @binding(0) var<storage, read_write> kc: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> vc: array<f32>;
@group(0) @binding(2) var<storage, read> qkv: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<storage, read> params: Params;
@group(0) @binding(5) var<storage, read> freqs: array<vec4<f32>>;
#if QK_NORM
@group(0) @binding(6) var<storage, read> qkn: array<vec4<f32>>;
#endif

const FMIN: f32 = -3.4028234e38;

var<workgroup> qs: array<vec4<f32>, NH / NKV * HD / 4u>;   // G roped, scaled q heads
var<workgroup> sc: array<f32, NH / NKV * WG>;               // scores / probabilities of a tile
var<workgroup> wm: array<f32, 8>;                           // running max per head
var<workgroup> wl: array<f32, 8>;                           // running sum per head
var<workgroup> wc: array<f32, 8>;                           // rescale factor of the current tile
#if QK_NORM
var<workgroup> hr: array<f32, 9>;                           // rinv of the G q heads, then of the k head
#endif

#include common_sincos

// Online softmax over positions [pb, pe) of kv head g with the q heads in qs.
// Returns o[j] (unnormalised) for this thread's dimension d = lid (lid < HD); wm/wl hold m, l.
fn attend(g: u32, pb: u32, pe: u32, lid: u32) -> array<f32, 8> {
    let G = NH / NKV;
    let h4 = HD / 4u;
    var o = array<f32, 8>();
    if (lid < G) { wm[lid] = FMIN; wl[lid] = 0.0; }
    workgroupBarrier();
    for (var t0 = pb; t0 < pe; t0 += WG) {
        let tv = min(WG, pe - t0);
        if (lid < tv) {
            let kb = (g * MAX_CTX + t0 + lid) * h4;
            var acc = array<f32, 8>();     // explicit: naga 0.32 does not re-zero loop-local vars (wgpu#9489)
            for (var d = 0u; d < h4; d++) {
                let k = kc[kb + d];
                for (var j = 0u; j < G; j++) { acc[j] += dot(qs[j * h4 + d], k); }
            }
            for (var j = 0u; j < G; j++) { sc[j * WG + lid] = acc[j]; }
        }
        workgroupBarrier();
        if (lid < G) {
            var mt = wm[lid];
            for (var t = 0u; t < tv; t++) { mt = max(mt, sc[lid * WG + t]); }
            wc[lid] = exp(wm[lid] - mt);
            wm[lid] = mt;
        }
        workgroupBarrier();
        if (lid < tv) {
            for (var j = 0u; j < G; j++) { sc[j * WG + lid] = exp(sc[j * WG + lid] - wm[j]); }
        }
        workgroupBarrier();
        if (lid < G) {
            var l = wl[lid] * wc[lid];
            for (var t = 0u; t < tv; t++) { l += sc[lid * WG + t]; }
            wl[lid] = l;
        }
        if (lid < HD) {
            let vb = (g * MAX_CTX + t0) * HD + lid;
            for (var j = 0u; j < G; j++) {
                var a = o[j] * wc[j];
                for (var t = 0u; t < tv; t++) { a += sc[j * WG + t] * vc[vb + t * HD]; }
                o[j] = a;
            }
        }
        workgroupBarrier();
    }
    return o;
}

@compute @workgroup_size(WG)
fn decode(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let G = NH / NKV;
    let h4 = HD / 4u;
    let h8 = HD / 8u;
    let g = wid.x;
    let s = wid.y;
    let pos = params.pos;
    let chunk = (pos + SPLITS) / SPLITS;            // ceil((pos + 1) / SPLITS)
    let pb = min(s * chunk, pos + 1u);
    let pe = min(pb + chunk, pos + 1u);
    let fp = f32(pos);
#if QK_NORM
    if (lid <= G) { hr[lid] = qk_rinv(select((NH + g) * h4, (g * G + lid) * h4, lid < G)); }
    workgroupBarrier();
#endif
    if (pb <= pos && pos < pe) {                     // this workgroup writes the cache row
        let kq = (NH + g) * h4;
        let kb = (g * MAX_CTX + pos) * h4;
        for (var i = lid; i < h8; i += WG) {
            let ix = rope_at(i);
            var a = qkv[kq + ix.x];
            var b = qkv[kq + ix.y];
#if QK_NORM
            a = (a * hr[G]) * qkn[h4 + ix.x];
            b = (b * hr[G]) * qkn[h4 + ix.y];
#endif
            let r = rope2(a, b, sincos4(fp * freqs[i]));
            kc[kb + ix.x] = r[0];
            kc[kb + ix.y] = r[1];
        }
        let vq = (NH + NKV + g) * h4;
        for (var d = lid; d < h4; d += WG) {
            let v = qkv[vq + d];
            let vb = (g * MAX_CTX + pos) * HD + 4u * d;
            vc[vb] = v.x;
            vc[vb + 1u] = v.y;
            vc[vb + 2u] = v.z;
            vc[vb + 3u] = v.w;
        }
        storageBarrier();
    }
    let scale = 1.0 / sqrt(f32(HD));
    for (var it = lid; it < G * h8; it += WG) {
        let j = it / h8;
        let i = it % h8;
        let ix = rope_at(i);
        let qb = (g * G + j) * h4;
        var a = qkv[qb + ix.x];
        var b = qkv[qb + ix.y];
#if QK_NORM
        a = (a * hr[j]) * qkn[ix.x];
        b = (b * hr[j]) * qkn[ix.y];
#endif
        let r = rope2(a, b, sincos4(fp * freqs[i]));
        qs[j * h4 + ix.x] = r[0] * scale;
        qs[j * h4 + ix.y] = r[1] * scale;
    }
    workgroupBarrier();
    let o = attend(g, pb, pe, lid);
    if (lid < HD) {
        for (var j = 0u; j < G; j++) {
            let h = g * G + j;
            if (SPLITS == 1u) {
                out[h * HD + lid] = o[j] / wl[j];
            } else {
                let b = (h * SPLITS + s) * (HD + 2u);
                out[b + lid] = o[j];
                if (lid == 0u) { out[b + HD] = wm[j]; out[b + HD + 1u] = wl[j]; }
            }
        }
    }
}

@compute @workgroup_size(WG)
fn prefill(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let G = NH / NKV;
    let h4 = HD / 4u;
    let g = wid.x;
    let m = wid.y;
    if (m >= params.m) { return; }
    let pos = params.pos + m;
    let scale = 1.0 / sqrt(f32(HD));
    let qb = m * (NH + 2u * NKV) * h4 + g * G * h4;
    for (var it = lid; it < G * h4; it += WG) { qs[it] = qkv[qb + it] * scale; }
    workgroupBarrier();
    let o = attend(g, 0u, pos + 1u, lid);
    if (lid < HD) {
        for (var j = 0u; j < G; j++) { out[(m * NH + g * G + j) * HD + lid] = o[j] / wl[j]; }
    }
}

@group(0) @binding(0) var<storage, read> part: array<f32>;
@group(0) @binding(1) var<storage, read_write> co: array<f32>;

@compute @workgroup_size(WG)
fn combine(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = wid.x;
    if (lid >= HD) { return; }
    let b = h * SPLITS * (HD + 2u);
    var mx = FMIN;
    for (var s = 0u; s < SPLITS; s++) { mx = max(mx, part[b + s * (HD + 2u) + HD]); }
    var num = 0.0;
    var den = 0.0;
    for (var s = 0u; s < SPLITS; s++) {
        let ps = b + s * (HD + 2u);
        let e = exp(part[ps + HD] - mx);
        num += e * part[ps + lid];
        den += e * part[ps + HD + 1u];
    }
    co[h * HD + lid] = num / den;
}
