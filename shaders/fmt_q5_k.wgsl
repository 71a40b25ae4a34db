// fmt_q5_k.wgsl (#include format: Q5_K): ggml's Q5_K, in the packed-format interface of
// common_codes.wgsl, and fmt_value(t, e) (the table role).
//
// 256 values per 176-byte block (16-byte aligned): f16 d, f16 dmin, scales[12] (Q4_K's), qh[32],
// qs[128]. Value 64c + 32k + m (c < 4, k < 2, m < 32) has q = (the low (k 0) or high (k 1) nibble of
// qs[32c + m]) | (bit 2c + k of qh[m]) << 4; sub-block u = 2c + k: w = (d sc) q - dmin mn.
// Five bits do not fit two groups in a word, so a code word is made, not read: code word k holds
// values 4k .. 4k + 3, one code per byte (one group). A quad (M > 1) is words 4u .. 4u + 3 (16 values,
// one plane: 16 qs and 16 qh bytes, both aligned 16-byte reads), quad u is in sub-block u / 2. The
// M = 1 unit is 16 words, the 64 values of a chunk c (both nibbles of 32 qs bytes, qh's 32 bytes: 4
// aligned 16-byte reads and the 16-byte head), its activations 4 aligned vec4s (UACT 3).

#include common_bytes
// Bound as vec4<u32> (blocks of 176 bytes are 16-byte aligned): kq_v4 is one 16-byte load
// (lavapipe gathers a lane's scalar words one by one: 4 loads and their bounds checks).
alias WT = vec4<u32>;
const WPT: u32 = 4u;
fn fmt_wt(v: WT, k: u32) -> u32 { return v[k]; }
#include common_codes
#include common_kquant

fn kq_v4(t: u32, i: u32) -> vec4<u32> { return wv(t, i >> 2u); }   // words i .. i + 3, i % 4 = 0

const QW: u32 = 64u;
const QG: u32 = 1u;
const ZP: u32 = 0u;
const PDM: bool = true;
const UACT: u32 = 3u;
const UW: u32 = 16u;
const M4: u32 = 0x0F0F0F0Fu;
const M1: u32 = 0x01010101u;

// codes of 4 values from a qs word (nibble k) and a qh word (bit b = 2c + k)
fn q5k_code(qs: u32, qh: u32, k: u32, b: u32) -> u32 { return ((qs >> (4u * k)) & M4) | (((qh >> b) & M1) << 4u); }

// quad u (values 16u ..): c = u / 4, k = (u / 2) % 2, qs / qh words 4 (u % 2) ..
fn fmt_quad(t: u32, bi: u32, u: u32) -> vec4<u32> {
    let c = u / 4u;
    let k = (u / 2u) % 2u;
    let qs = kq_v4(t, kq_w(bi) + 12u + 8u * c + 4u * (u % 2u));
    let qh = kq_v4(t, kq_w(bi) + 4u + 4u * (u % 2u));
    let b = 2u * c + k;
    return vec4<u32>(q5k_code(qs.x, qh.x, k, b), q5k_code(qs.y, qh.y, k, b), q5k_code(qs.z, qh.z, k, b),
                     q5k_code(qs.w, qh.w, k, b));
}
fn fmt_word(t: u32, bi: u32, k: u32) -> u32 { return fmt_quad(t, bi, k / 4u)[k % 4u]; }
fn fmt_group(w: u32, g: u32) -> u32 { return w; }
fn fmt_codes(w: u32) -> array<u32, QG> { return array<u32, QG>(w); }
fn fmt_pos(k: u32, g: u32) -> u32 { return k; }
fn fmt_pslot(p: u32, e: u32) -> vec2<u32> { return vec2<u32>(e, 0u); }
fn fmt_dm(t: u32, bi: u32, u: u32, p: u32) -> vec2<f32> { return kq_scm(kq_head(t, bi), u / 2u); }

// 4 code words (values 4w0 .. of the unit's 64) against activation slots s .. s + 3
fn q5k_dot4(q: vec4<u32>, h: vec4<u32>, k: u32, b: u32, a: UActs, s: u32) -> WSUM {
    return gdot(q5k_code(q.x, h.x, k, b), uact(a, s)) + gdot(q5k_code(q.y, h.y, k, b), uact(a, s + 1u))
         + gdot(q5k_code(q.z, h.z, k, b), uact(a, s + 2u)) + gdot(q5k_code(q.w, h.w, k, b), uact(a, s + 3u));
}

// unit j = chunk c: sub-blocks 2c (words 0..7, low nibbles) and 2c + 1 (words 8..15, high nibbles)
fn fmt_unit(t: u32, bi: u32, j: u32, a: UActs) -> f32 {
    let w = kq_w(bi);
    let q0 = kq_v4(t, w + 12u + 8u * j);
    let q1 = kq_v4(t, w + 16u + 8u * j);
    let h0 = kq_v4(t, w + 4u);
    let h1 = kq_v4(t, w + 8u);
    let hd = kq_head(t, bi);
    let s0 = kq_scm(hd, 2u * j);
    let s1 = kq_scm(hd, 2u * j + 1u);
    let lo = q5k_dot4(q0, h0, 0u, 2u * j, a, 0u) + q5k_dot4(q1, h1, 0u, 2u * j, a, 4u);
    let hi = q5k_dot4(q0, h0, 1u, 2u * j + 1u, a, 8u) + q5k_dot4(q1, h1, 1u, 2u * j + 1u, a, 12u);
    return f32(lo) * s0.x + f32(gsum(a, 0u, 8u)) * s0.y + f32(hi) * s1.x + f32(gsum(a, 8u, 8u)) * s1.y;
}

fn fmt_value(t: u32, e: u32) -> f32 {
    let bi = e / 256u;
    let v = e % 256u;
    let u = v / 32u;
    let m = v % 32u;
    let q = ((ld8(t, bi * BBYTES + 48u + 32u * (v / 64u) + m) >> (4u * (u % 2u))) & 15u)
          | (((ld8(t, bi * BBYTES + 16u + m) >> u) & 1u) << 4u);
    let s = kq_scm(kq_head(t, bi), u);
    return f32(q) * s.x + s.y;
}
