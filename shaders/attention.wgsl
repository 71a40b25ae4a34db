// attention.wgsl: causal GQA attention over the KV cache (decode and prefill), computed in f32.
//
// Maths, for q head h (kv head g = h / G, G = NH / NKV) of the token at position P:
//   s[t] = (q_h . K[g, t]) / sqrt(HD),  t = 0..P            (causal: positions <= P)
//   o_h  = sum_t exp(s[t] - max s) V[g, t] / sum_t exp(s[t] - max s)
// computed online over tiles of WG positions (running max m, running sum l, rescale by
// exp(m_old - m_new)), the max subtracted in f32 before every exp.
// KV cache (one K and one V buffer per layer): [NKV][MAX_CTX][HD] values, K[g, p, d] is value
//   (g * MAX_CTX + p) * HD + d, stored as common_kv.wgsl says (f32; KV_F16: f16, as array<f16> with
//   shader-f16, else pack2x16float pairs in u32). Values are loaded as f32 (kv_load, kv1_at) and
//   everything after is f32; decode stores its K / V row with kv_store (the rounding rope.wgsl does).
// RoPE (decode entry only) is rope.wgsl's rotation (NEOX, or adjacent pairs with ROPE_NORM) with
//   the same angle a = f32(P) * freqs[i] and the same functions (common_sincos.wgsl); with
//   QK_NORM each q and k head is first RMS-normalised and multiplied by its norm weight (qkn), and
//   with QKV_BIAS q, k and v first get their biases (qkvb, read through qkv_at), as rope.wgsl does,
//   so decode and prefill write the same K and V bits.
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
//   written by rope.wgsl); out = o f32[M][NH][HD]. Workgroup (h, rows WG wid.y ..), one row per
//   invocation (see the entry); HD % 16 == 0, HD <= 256.
// prefill_wg: the same for any HD (the fallback): workgroup (g, m), the decode tiles (attend).
//
// Bindings, in order: decode  k cache, v cache, qkv, out, params, freqs f32[HD/2],
//                   qkn f32[2][HD] (QK_NORM: attn_q_norm | attn_k_norm),
//                   qkvb f32[(NH + 2 NKV) HD] (QKV_BIAS: q | k | v biases)
//           prefill k cache, v cache, qkv f32[M][(NH + 2 NKV) HD], o, params (vcv, outv: the
//                   same bindings as vc, out)
//           combine partials, o (a set of its own from 0)
// Thread mapping (decode): in a tile, thread t computes the G scores of position t0 + t (one K row read
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

@group(0) @binding(auto) var<storage, read_write> kc: array<KV4>;
@group(0) @binding(auto) var<storage, read_write> vc: array<KV1>;     // decode's scalar view of the v cache
@group(0) @binding(auto) var<storage, read> qkv: array<vec4<f32>>;
@group(0) @binding(auto) var<storage, read_write> out: array<f32>;
@group(0) @binding(auto) var<storage, read> params: Params;
@group(0) @binding(auto) var<storage, read> freqs: array<vec4<f32>>;
#if QK_NORM
@group(0) @binding(auto) var<storage, read> qkn: array<vec4<f32>>;
#endif
#if QKV_BIAS
@group(0) @binding(auto) var<storage, read> qkvb: array<vec4<f32>>;
#endif

const FMIN: f32 = -3.4028234e38;

var<workgroup> qs: array<vec4<f32>, NH / NKV * HD / 4u>;   // G roped, scaled q heads
var<workgroup> sc: array<f32, NH / NKV * WG>;               // scores / probabilities of a tile
var<workgroup> wm: array<f32, NH / NKV>;                    // running max per head
var<workgroup> wl: array<f32, NH / NKV>;                    // running sum per head
var<workgroup> wc: array<f32, NH / NKV>;                    // rescale factor of the current tile
#if QK_NORM
var<workgroup> hr: array<f32, NH / NKV + 1u>;               // rinv of the G q heads, then of the k head
#endif
// Workgroup arrays sized by G, and per-thread arrays by GMAX >= G (defines GMAX2 / GMAX4 from the
// launch spec; else 8): SwiftShader's compile time grows with both (a word of workgroup memory
// ~0.25 ms; the attention kernel 260 -> 210 ms at G = 2).
#if GMAX2
const GMAX: u32 = 2u;
#elif GMAX4
const GMAX: u32 = 4u;
#else
const GMAX: u32 = 8u;
#endif

#include common_sincos
#include common_kv

// Online softmax over positions [pb, pe) of kv head g with the q heads in qs.
// Returns o[j] (unnormalised) for this thread's dimension d = lid (lid < HD); wm/wl hold m, l.
fn attend(g: u32, pb: u32, pe: u32, lid: u32) -> array<f32, GMAX> {
    let G = NH / NKV;
    let h4 = HD / 4u;
    var o = array<f32, GMAX>();
    if (lid < G) { wm[lid] = FMIN; wl[lid] = 0.0; }
    workgroupBarrier();
    for (var t0 = pb; t0 < pe; t0 += WG) {
        let tv = min(WG, pe - t0);
        if (lid < tv) {
            let kb = (g * MAX_CTX + t0 + lid) * h4;
            var acc = array<f32, GMAX>();     // explicit: naga 0.32 does not re-zero loop-local vars (wgpu#9489)
            for (var d = 0u; d < h4; d++) {
                let k = kv_load(kc[kb + d]);
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
                for (var t = 0u; t < tv; t++) {
                    let e = vb + t * HD;
                    a += sc[j * WG + t] * kv1_at(vc[kv1_word(e)], e);
                }
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
    if (lid <= G) { hr[lid] = qk_rinv(0u, select((NH + g) * h4, (g * G + lid) * h4, lid < G)); }
    workgroupBarrier();
#endif
    if (pb <= pos && pos < pe) {                     // this workgroup writes the cache row
        let kq = (NH + g) * h4;
        let kb = (g * MAX_CTX + pos) * h4;
        for (var i = lid; i < h8; i += WG) {
            let ix = rope_at(i);
            var a = qkv_at(0u, kq + ix.x);
            var b = qkv_at(0u, kq + ix.y);
#if QK_NORM
            a = (a * hr[G]) * qkn[h4 + ix.x];
            b = (b * hr[G]) * qkn[h4 + ix.y];
#endif
            let r = rope2(a, b, sincos4(fp * freqs[i]));
            kc[kb + ix.x] = kv_store(r[0]);
            kc[kb + ix.y] = kv_store(r[1]);
        }
        let vq = (NH + NKV + g) * h4;
        for (var d = lid; d < h4; d += WG) {
            let w = kv_store(qkv_at(0u, vq + d));
            let vb = kv1_word((g * MAX_CTX + pos) * HD + 4u * d);
            for (var c = 0u; c < KV_W; c++) { vc[vb + c] = w[c]; }
        }
        storageBarrier();
    }
    let scale = 1.0 / sqrt(f32(HD));
    for (var it = lid; it < G * h8; it += WG) {
        let j = it / h8;
        let i = it % h8;
        let ix = rope_at(i);
        let qb = (g * G + j) * h4;
        var a = qkv_at(0u, qb + ix.x);
        var b = qkv_at(0u, qb + ix.y);
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

// prefill: invocation = (q head h = wid.x, row m = WG wid.y + i) with q and o of its row in registers
// (HV: HD / 16 chunks of 4 x 4), positions t = 0 .. (the workgroup's last row) in tiles of 4 with an
// online softmax per tile (scores q . K[t] by chunk, the tile's max, rescale by exp(m_old - m_new));
// positions past the row's own are masked. All lanes of a workgroup walk the same t, so with
// SUBGROUPS the 4 lanes of a quad share each K / V row: lane l loads vec4 l of every chunk and the
// others get it by subgroupShuffle (a quarter of the loads; no workgroup memory, no barriers). The
// chunks are written out (HD is an override: `if (HD > ..)` folds away): CPU compilers keep a head
// vector in registers only with constant indices. HD % 16 == 0, HD <= 256.

@group(0) @binding(vc) var<storage, read_write> vcv: array<KV4>;        // prefill's views of v cache and out
@group(0) @binding(out) var<storage, read_write> outv: array<vec4<f32>>;

struct HV { c0: mat4x4<f32>, c1: mat4x4<f32>, c2: mat4x4<f32>, c3: mat4x4<f32>, c4: mat4x4<f32>, c5: mat4x4<f32>, c6: mat4x4<f32>, c7: mat4x4<f32>, c8: mat4x4<f32>, c9: mat4x4<f32>, c10: mat4x4<f32>, c11: mat4x4<f32>, c12: mat4x4<f32>, c13: mat4x4<f32>, c14: mat4x4<f32>, c15: mat4x4<f32> }

// chunk (4 vec4 from vec4 index b) of a K (kv = 0) or V row, shared over the quad
fn chunk(kv: u32, b: u32, lane: u32) -> mat4x4<f32> {
#if SUBGROUPS
    let q0 = lane & ~3u;
    var v: vec4<f32>;
    if (kv == 0u) { v = kv_load(kc[b + (lane & 3u)]); } else { v = kv_load(vcv[b + (lane & 3u)]); }
    return mat4x4<f32>(subgroupShuffle(v, q0), subgroupShuffle(v, q0 | 1u), subgroupShuffle(v, q0 | 2u), subgroupShuffle(v, q0 | 3u));
#else
    if (kv == 0u) { return mat4x4<f32>(kv_load(kc[b]), kv_load(kc[b + 1u]), kv_load(kc[b + 2u]), kv_load(kc[b + 3u])); }
    return mat4x4<f32>(kv_load(vcv[b]), kv_load(vcv[b + 1u]), kv_load(vcv[b + 2u]), kv_load(vcv[b + 3u]));
#endif
}

// row t of kv head g of the K (kv = 0) or V cache
fn kvrow(kv: u32, g: u32, t: u32, lane: u32) -> HV {
    let b = (g * MAX_CTX + t) * (HD / 4u);
    var r: HV;
    r.c0 = chunk(kv, b + 0u * 4u, lane);
    if (HD > 16u) { r.c1 = chunk(kv, b + 1u * 4u, lane); }
    if (HD > 32u) { r.c2 = chunk(kv, b + 2u * 4u, lane); }
    if (HD > 48u) { r.c3 = chunk(kv, b + 3u * 4u, lane); }
    if (HD > 64u) { r.c4 = chunk(kv, b + 4u * 4u, lane); }
    if (HD > 80u) { r.c5 = chunk(kv, b + 5u * 4u, lane); }
    if (HD > 96u) { r.c6 = chunk(kv, b + 6u * 4u, lane); }
    if (HD > 112u) { r.c7 = chunk(kv, b + 7u * 4u, lane); }
    if (HD > 128u) { r.c8 = chunk(kv, b + 8u * 4u, lane); }
    if (HD > 144u) { r.c9 = chunk(kv, b + 9u * 4u, lane); }
    if (HD > 160u) { r.c10 = chunk(kv, b + 10u * 4u, lane); }
    if (HD > 176u) { r.c11 = chunk(kv, b + 11u * 4u, lane); }
    if (HD > 192u) { r.c12 = chunk(kv, b + 12u * 4u, lane); }
    if (HD > 208u) { r.c13 = chunk(kv, b + 13u * 4u, lane); }
    if (HD > 224u) { r.c14 = chunk(kv, b + 14u * 4u, lane); }
    if (HD > 240u) { r.c15 = chunk(kv, b + 15u * 4u, lane); }
    return r;
}

fn dot16(a: mat4x4<f32>, b: mat4x4<f32>) -> f32 {
    return dot(a[0], b[0]) + dot(a[1], b[1]) + dot(a[2], b[2]) + dot(a[3], b[3]);
}

fn hdot(a: HV, b: HV) -> f32 {
    var s = dot16(a.c0, b.c0);
    if (HD > 16u) { s += dot16(a.c1, b.c1); }
    if (HD > 32u) { s += dot16(a.c2, b.c2); }
    if (HD > 48u) { s += dot16(a.c3, b.c3); }
    if (HD > 64u) { s += dot16(a.c4, b.c4); }
    if (HD > 80u) { s += dot16(a.c5, b.c5); }
    if (HD > 96u) { s += dot16(a.c6, b.c6); }
    if (HD > 112u) { s += dot16(a.c7, b.c7); }
    if (HD > 128u) { s += dot16(a.c8, b.c8); }
    if (HD > 144u) { s += dot16(a.c9, b.c9); }
    if (HD > 160u) { s += dot16(a.c10, b.c10); }
    if (HD > 176u) { s += dot16(a.c11, b.c11); }
    if (HD > 192u) { s += dot16(a.c12, b.c12); }
    if (HD > 208u) { s += dot16(a.c13, b.c13); }
    if (HD > 224u) { s += dot16(a.c14, b.c14); }
    if (HD > 240u) { s += dot16(a.c15, b.c15); }
    return s;
}

// o * c + p v
fn hupd(o: HV, c: f32, p: f32, v: HV) -> HV {
    var r: HV;
    r.c0 = o.c0 * c + v.c0 * p;
    if (HD > 16u) { r.c1 = o.c1 * c + v.c1 * p; }
    if (HD > 32u) { r.c2 = o.c2 * c + v.c2 * p; }
    if (HD > 48u) { r.c3 = o.c3 * c + v.c3 * p; }
    if (HD > 64u) { r.c4 = o.c4 * c + v.c4 * p; }
    if (HD > 80u) { r.c5 = o.c5 * c + v.c5 * p; }
    if (HD > 96u) { r.c6 = o.c6 * c + v.c6 * p; }
    if (HD > 112u) { r.c7 = o.c7 * c + v.c7 * p; }
    if (HD > 128u) { r.c8 = o.c8 * c + v.c8 * p; }
    if (HD > 144u) { r.c9 = o.c9 * c + v.c9 * p; }
    if (HD > 160u) { r.c10 = o.c10 * c + v.c10 * p; }
    if (HD > 176u) { r.c11 = o.c11 * c + v.c11 * p; }
    if (HD > 192u) { r.c12 = o.c12 * c + v.c12 * p; }
    if (HD > 208u) { r.c13 = o.c13 * c + v.c13 * p; }
    if (HD > 224u) { r.c14 = o.c14 * c + v.c14 * p; }
    if (HD > 240u) { r.c15 = o.c15 * c + v.c15 * p; }
    return r;
}

fn prefill_body(wid: vec3<u32>, li: u32, lane: u32) {
    let G = NH / NKV;
    let h4 = HD / 4u;
    let h = wid.x;
    let g = h / G;
    let mrows = params.m;
    let m = min(wid.y * WG + li, mrows - 1u);              // rows past M redo the last row (not written)
    let pos = params.pos + m;
    let t_end = params.pos + min(mrows, (wid.y + 1u) * WG); // the workgroup's last row's position + 1
    let scale = 1.0 / sqrt(f32(HD));
    let qb = m * (NH + 2u * NKV) * h4 + h * h4;
    var q: HV;
    q.c0 = mat4x4<f32>(qkv[qb + 0u * 4u], qkv[qb + 0u * 4u + 1u], qkv[qb + 0u * 4u + 2u], qkv[qb + 0u * 4u + 3u]) * scale;
    if (HD > 16u) { q.c1 = mat4x4<f32>(qkv[qb + 1u * 4u], qkv[qb + 1u * 4u + 1u], qkv[qb + 1u * 4u + 2u], qkv[qb + 1u * 4u + 3u]) * scale; }
    if (HD > 32u) { q.c2 = mat4x4<f32>(qkv[qb + 2u * 4u], qkv[qb + 2u * 4u + 1u], qkv[qb + 2u * 4u + 2u], qkv[qb + 2u * 4u + 3u]) * scale; }
    if (HD > 48u) { q.c3 = mat4x4<f32>(qkv[qb + 3u * 4u], qkv[qb + 3u * 4u + 1u], qkv[qb + 3u * 4u + 2u], qkv[qb + 3u * 4u + 3u]) * scale; }
    if (HD > 64u) { q.c4 = mat4x4<f32>(qkv[qb + 4u * 4u], qkv[qb + 4u * 4u + 1u], qkv[qb + 4u * 4u + 2u], qkv[qb + 4u * 4u + 3u]) * scale; }
    if (HD > 80u) { q.c5 = mat4x4<f32>(qkv[qb + 5u * 4u], qkv[qb + 5u * 4u + 1u], qkv[qb + 5u * 4u + 2u], qkv[qb + 5u * 4u + 3u]) * scale; }
    if (HD > 96u) { q.c6 = mat4x4<f32>(qkv[qb + 6u * 4u], qkv[qb + 6u * 4u + 1u], qkv[qb + 6u * 4u + 2u], qkv[qb + 6u * 4u + 3u]) * scale; }
    if (HD > 112u) { q.c7 = mat4x4<f32>(qkv[qb + 7u * 4u], qkv[qb + 7u * 4u + 1u], qkv[qb + 7u * 4u + 2u], qkv[qb + 7u * 4u + 3u]) * scale; }
    if (HD > 128u) { q.c8 = mat4x4<f32>(qkv[qb + 8u * 4u], qkv[qb + 8u * 4u + 1u], qkv[qb + 8u * 4u + 2u], qkv[qb + 8u * 4u + 3u]) * scale; }
    if (HD > 144u) { q.c9 = mat4x4<f32>(qkv[qb + 9u * 4u], qkv[qb + 9u * 4u + 1u], qkv[qb + 9u * 4u + 2u], qkv[qb + 9u * 4u + 3u]) * scale; }
    if (HD > 160u) { q.c10 = mat4x4<f32>(qkv[qb + 10u * 4u], qkv[qb + 10u * 4u + 1u], qkv[qb + 10u * 4u + 2u], qkv[qb + 10u * 4u + 3u]) * scale; }
    if (HD > 176u) { q.c11 = mat4x4<f32>(qkv[qb + 11u * 4u], qkv[qb + 11u * 4u + 1u], qkv[qb + 11u * 4u + 2u], qkv[qb + 11u * 4u + 3u]) * scale; }
    if (HD > 192u) { q.c12 = mat4x4<f32>(qkv[qb + 12u * 4u], qkv[qb + 12u * 4u + 1u], qkv[qb + 12u * 4u + 2u], qkv[qb + 12u * 4u + 3u]) * scale; }
    if (HD > 208u) { q.c13 = mat4x4<f32>(qkv[qb + 13u * 4u], qkv[qb + 13u * 4u + 1u], qkv[qb + 13u * 4u + 2u], qkv[qb + 13u * 4u + 3u]) * scale; }
    if (HD > 224u) { q.c14 = mat4x4<f32>(qkv[qb + 14u * 4u], qkv[qb + 14u * 4u + 1u], qkv[qb + 14u * 4u + 2u], qkv[qb + 14u * 4u + 3u]) * scale; }
    if (HD > 240u) { q.c15 = mat4x4<f32>(qkv[qb + 15u * 4u], qkv[qb + 15u * 4u + 1u], qkv[qb + 15u * 4u + 2u], qkv[qb + 15u * 4u + 3u]) * scale; }
    var o: HV;
    var mx = FMIN;
    var l = 0.0;
    for (var t0 = 0u; t0 < t_end; t0 += 4u) {
        var sc = vec4<f32>(FMIN);
        for (var j = 0u; j < 4u; j++) {
            let t = t0 + j;
            if (t < t_end) { sc[j] = select(FMIN, hdot(q, kvrow(0u, g, t, lane)), t <= pos); }
        }
        let mt = max(mx, max(max(sc.x, sc.y), max(sc.z, sc.w)));
        let c = exp(mx - mt);
        let p = exp(sc - vec4<f32>(mt));
        mx = mt;
        l = l * c + ((p.x + p.y) + (p.z + p.w));
        for (var j = 0u; j < 4u; j++) {
            let t = t0 + j;
            if (t < t_end) { o = hupd(o, select(1.0, c, j == 0u), p[j], kvrow(1u, g, t, lane)); }
        }
    }
    if (wid.y * WG + li < mrows) {
        let ob = (m * NH + h) * h4;
    outv[ob + 0u * 4u] = o.c0[0] / l; outv[ob + 0u * 4u + 1u] = o.c0[1] / l; outv[ob + 0u * 4u + 2u] = o.c0[2] / l; outv[ob + 0u * 4u + 3u] = o.c0[3] / l;
    if (HD > 16u) { outv[ob + 1u * 4u] = o.c1[0] / l; outv[ob + 1u * 4u + 1u] = o.c1[1] / l; outv[ob + 1u * 4u + 2u] = o.c1[2] / l; outv[ob + 1u * 4u + 3u] = o.c1[3] / l; }
    if (HD > 32u) { outv[ob + 2u * 4u] = o.c2[0] / l; outv[ob + 2u * 4u + 1u] = o.c2[1] / l; outv[ob + 2u * 4u + 2u] = o.c2[2] / l; outv[ob + 2u * 4u + 3u] = o.c2[3] / l; }
    if (HD > 48u) { outv[ob + 3u * 4u] = o.c3[0] / l; outv[ob + 3u * 4u + 1u] = o.c3[1] / l; outv[ob + 3u * 4u + 2u] = o.c3[2] / l; outv[ob + 3u * 4u + 3u] = o.c3[3] / l; }
    if (HD > 64u) { outv[ob + 4u * 4u] = o.c4[0] / l; outv[ob + 4u * 4u + 1u] = o.c4[1] / l; outv[ob + 4u * 4u + 2u] = o.c4[2] / l; outv[ob + 4u * 4u + 3u] = o.c4[3] / l; }
    if (HD > 80u) { outv[ob + 5u * 4u] = o.c5[0] / l; outv[ob + 5u * 4u + 1u] = o.c5[1] / l; outv[ob + 5u * 4u + 2u] = o.c5[2] / l; outv[ob + 5u * 4u + 3u] = o.c5[3] / l; }
    if (HD > 96u) { outv[ob + 6u * 4u] = o.c6[0] / l; outv[ob + 6u * 4u + 1u] = o.c6[1] / l; outv[ob + 6u * 4u + 2u] = o.c6[2] / l; outv[ob + 6u * 4u + 3u] = o.c6[3] / l; }
    if (HD > 112u) { outv[ob + 7u * 4u] = o.c7[0] / l; outv[ob + 7u * 4u + 1u] = o.c7[1] / l; outv[ob + 7u * 4u + 2u] = o.c7[2] / l; outv[ob + 7u * 4u + 3u] = o.c7[3] / l; }
    if (HD > 128u) { outv[ob + 8u * 4u] = o.c8[0] / l; outv[ob + 8u * 4u + 1u] = o.c8[1] / l; outv[ob + 8u * 4u + 2u] = o.c8[2] / l; outv[ob + 8u * 4u + 3u] = o.c8[3] / l; }
    if (HD > 144u) { outv[ob + 9u * 4u] = o.c9[0] / l; outv[ob + 9u * 4u + 1u] = o.c9[1] / l; outv[ob + 9u * 4u + 2u] = o.c9[2] / l; outv[ob + 9u * 4u + 3u] = o.c9[3] / l; }
    if (HD > 160u) { outv[ob + 10u * 4u] = o.c10[0] / l; outv[ob + 10u * 4u + 1u] = o.c10[1] / l; outv[ob + 10u * 4u + 2u] = o.c10[2] / l; outv[ob + 10u * 4u + 3u] = o.c10[3] / l; }
    if (HD > 176u) { outv[ob + 11u * 4u] = o.c11[0] / l; outv[ob + 11u * 4u + 1u] = o.c11[1] / l; outv[ob + 11u * 4u + 2u] = o.c11[2] / l; outv[ob + 11u * 4u + 3u] = o.c11[3] / l; }
    if (HD > 192u) { outv[ob + 12u * 4u] = o.c12[0] / l; outv[ob + 12u * 4u + 1u] = o.c12[1] / l; outv[ob + 12u * 4u + 2u] = o.c12[2] / l; outv[ob + 12u * 4u + 3u] = o.c12[3] / l; }
    if (HD > 208u) { outv[ob + 13u * 4u] = o.c13[0] / l; outv[ob + 13u * 4u + 1u] = o.c13[1] / l; outv[ob + 13u * 4u + 2u] = o.c13[2] / l; outv[ob + 13u * 4u + 3u] = o.c13[3] / l; }
    if (HD > 224u) { outv[ob + 14u * 4u] = o.c14[0] / l; outv[ob + 14u * 4u + 1u] = o.c14[1] / l; outv[ob + 14u * 4u + 2u] = o.c14[2] / l; outv[ob + 14u * 4u + 3u] = o.c14[3] / l; }
    if (HD > 240u) { outv[ob + 15u * 4u] = o.c15[0] / l; outv[ob + 15u * 4u + 1u] = o.c15[1] / l; outv[ob + 15u * 4u + 2u] = o.c15[2] / l; outv[ob + 15u * 4u + 3u] = o.c15[3] / l; }
    }
}

#if SUBGROUPS
@compute @workgroup_size(WG)
fn prefill(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
           @builtin(subgroup_invocation_id) sid: u32) {
    prefill_body(wid, lid, sid);
}
#else
@compute @workgroup_size(WG)
fn prefill(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    prefill_body(wid, lid, 0u);
}
#endif

@compute @workgroup_size(WG)
fn prefill_wg(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
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
@group(0) @binding(auto) var<storage, read_write> co: array<f32>;

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
