// fmt_q6_k.wgsl (#include format: Q6_K): ggml's Q6_K, in the packed-format interface of
// common_codes.wgsl, and fmt_value(t, e) (the table role).
//
// 256 values per 210-byte block (2-byte aligned: common_bytes): ql[128], qh[64], int8 scales[16],
// f16 d. Value 128h + 32k + m (h < 2, k < 4, m < 32) has its low 4 bits in ql[64h + 32 (k % 2) + m]
// (the low nibble for k < 2, the high one for k >= 2) and its high 2 bits in (qh[32h + m] >> 2k) & 3;
// code c = that, w = (d scales[value / 16]) (c - 32).
// Six bits do not fit two groups in a word, so a code word is made, not read, one code per byte:
// code word k holds values 128h + 32K + 4j .. + 3 with h = k / 32, j = k % 8 and K = (0, 2, 1, 3)[(k /
// 8) % 4] (q6k_kk): the 16 words of an M = 1 unit are K = 0 and 2 (or 1 and 3), which share their 32
// ql bytes, so a unit reads 32 ql and 32 qh bytes once for 64 values (activations: 4 aligned vec4s,
// UACT 3). A quad (M > 1) is 4 words (16 values of one K: one plane; 16 ql, 16 qh bytes), quad u's
// sub-block is 8h + 2K + u % 2.

#include common_bytes
#include common_u32
#include common_codes

const QW: u32 = 64u;
const QG: u32 = 1u;
const ZP: u32 = 32u;
const PDM: bool = true;
const UACT: u32 = 3u;
const UW: u32 = 16u;
const M4: u32 = 0x0F0F0F0Fu;

fn q6k_kk(i: u32) -> u32 { return select(select(1u, 3u, i == 3u), select(0u, 2u, i == 1u), i < 2u); }
// codes of 4 values from an ql word and a qh word, for K = k
fn q6k_code(ql: u32, qh: u32, k: u32) -> u32 { return ((ql >> (4u * (k / 2u))) & M4) | (((qh >> (2u * k)) & M3) << 4u); }
// d scales[u] (signed) of sub-block u
fn q6k_scale(t: u32, bi: u32, u: u32) -> f32 {
    return ldh(t, bi * BBYTES + 208u) * f32(extractBits(bitcast<i32>(ld8(t, bi * BBYTES + 192u + u)), 0u, 8u));
}

fn fmt_quad(t: u32, bi: u32, u: u32) -> vec4<u32> {
    let h = u / 8u;
    let k = q6k_kk((u / 2u) % 4u);
    let ql = ld16(t, bi * BBYTES + 64u * h + 32u * (k % 2u) + 16u * (u % 2u));
    let qh = ld16(t, bi * BBYTES + 128u + 32u * h + 16u * (u % 2u));
    return vec4<u32>(q6k_code(ql.x, qh.x, k), q6k_code(ql.y, qh.y, k), q6k_code(ql.z, qh.z, k), q6k_code(ql.w, qh.w, k));
}
fn fmt_word(t: u32, bi: u32, k: u32) -> u32 { return fmt_quad(t, bi, k / 4u)[k % 4u]; }
fn fmt_group(w: u32, g: u32) -> u32 { return w; }
fn fmt_codes(w: u32) -> array<u32, QG> { return array<u32, QG>(w); }
fn fmt_pos(k: u32, g: u32) -> u32 { return 32u * (k / 32u) + 8u * q6k_kk((k / 8u) % 4u) + k % 8u; }
fn fmt_pslot(p: u32, e: u32) -> vec2<u32> { return vec2<u32>(e, 0u); }
fn fmt_dm(t: u32, bi: u32, u: u32, p: u32) -> vec2<f32> {
    return vec2<f32>(q6k_scale(t, bi, 8u * (u / 8u) + 2u * q6k_kk((u / 2u) % 4u) + u % 2u), 0.0);
}

// 4 code words against activation slots s .. s + 3
fn q6k_dot4(l: vec4<u32>, h: vec4<u32>, k: u32, a: UActs, s: u32) -> WSUM {
    return gdot(q6k_code(l.x, h.x, k), uact(a, s)) + gdot(q6k_code(l.y, h.y, k), uact(a, s + 1u))
         + gdot(q6k_code(l.z, h.z, k), uact(a, s + 2u)) + gdot(q6k_code(l.w, h.w, k), uact(a, s + 3u));
}

// unit j: h = j / 2, K = j % 2 (words 0..7) and K + 2 (words 8..15); 4 sub-blocks of 4 words
fn fmt_unit(t: u32, bi: u32, j: u32, a: UActs) -> f32 {
    let h = j / 2u;
    let k = j % 2u;
    let b = bi * BBYTES;
    let l0 = ld16(t, b + 64u * h + 32u * k);
    let l1 = ld16(t, b + 64u * h + 32u * k + 16u);
    let h0 = ld16(t, b + 128u + 32u * h);
    let h1 = ld16(t, b + 128u + 32u * h + 16u);
    let u0 = 8u * h + 2u * k;
    return f32(q6k_dot4(l0, h0, k, a, 0u)) * q6k_scale(t, bi, u0) + f32(q6k_dot4(l1, h1, k, a, 4u)) * q6k_scale(t, bi, u0 + 1u)
         + f32(q6k_dot4(l0, h0, k + 2u, a, 8u)) * q6k_scale(t, bi, u0 + 4u)
         + f32(q6k_dot4(l1, h1, k + 2u, a, 12u)) * q6k_scale(t, bi, u0 + 5u);
}

fn fmt_value(t: u32, e: u32) -> f32 {
    let bi = e / 256u;
    let v = e % 256u;
    let h = v / 128u;
    let k = (v / 32u) % 4u;
    let m = v % 32u;
    let lo = (ld8(t, bi * BBYTES + 64u * h + 32u * (k % 2u) + m) >> (4u * (k / 2u))) & 15u;
    let hi = (ld8(t, bi * BBYTES + 128u + 32u * h + m) >> (2u * k)) & 3u;
    return q6k_scale(t, bi, v / 16u) * (f32(lo | (hi << 4u)) - 32.0);
}
