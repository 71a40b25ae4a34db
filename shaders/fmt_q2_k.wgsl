// fmt_q2_k.wgsl (#include format: Q2_K): ggml's Q2_K, in the packed-format interface of
// common_codes.wgsl, and fmt_value(t, e) (the table role).
//
// 256 values per 84-byte block (4-byte aligned): scales[16], qs[64], f16 d, f16 dmin. Value
// 128h + 32l + m (h < 2, l < 4, m < 32) has the 2-bit code (qs[32h + m] >> 2l) & 3; sub-block u =
// value / 16 has scales[u] = sc | mn << 4; w = (d sc) q - dmin mn.
// Code word k (qs bytes 4k .. 4k + 3) holds in group g (shift 2g) the values 128 (k / 8) + 32g +
// 4 (k % 8) .. + 3 (TQ2_0's layout). A unit (M = 1) and a quad (M > 1) are 4 words, one 16-byte
// read (64 values); its planes are the bit-planes (plane p, word e: group p of word e), each one
// sub-block: quad u's plane p is sub-block 8 (u / 2) + 2p + u % 2. fmt_unit scales each plane's
// sum by its own d sc and subtracts dmin mn times the plane's activations' sum.

#include common_bytes
#include common_u32
#include common_codes
#include common_kquant

const QW: u32 = 16u;
const QG: u32 = 4u;
const ZP: u32 = 0u;
const PDM: bool = true;
const UACT: u32 = 1u;
const UW: u32 = 4u;

fn fmt_word(t: u32, bi: u32, k: u32) -> u32 { return wl(t, kq_w(bi) + 4u + k); }
fn fmt_quad(t: u32, bi: u32, u: u32) -> vec4<u32> {
    return kq_v4(t, kq_w(bi) + 4u + 4u * u);
}
fn fmt_group(w: u32, g: u32) -> u32 { return (w >> (2u * g)) & M3; }
fn fmt_codes(w: u32) -> array<u32, QG> {
    return array<u32, QG>(w & M3, (w >> 2u) & M3, (w >> 4u) & M3, (w >> 6u) & M3);
}
fn fmt_pos(k: u32, g: u32) -> u32 { return 32u * (k / 8u) + 8u * g + k % 8u; }
fn fmt_pslot(p: u32, e: u32) -> vec2<u32> { return vec2<u32>(e, p); }

// (d sc, -(dmin mn)) of sub-block u from its scales byte and the block's (d, dmin)
fn q2k_scale(sc: u32, dd: vec2<f32>) -> vec2<f32> { return vec2<f32>(dd.x * f32(sc & 15u), -(dd.y * f32(sc >> 4u))); }
fn q2k_dd(t: u32, bi: u32) -> vec2<f32> { return unpack2x16float(wl(t, kq_w(bi) + 20u)); }
fn fmt_dm(t: u32, bi: u32, u: u32, p: u32) -> vec2<f32> {
    return q2k_scale(ld8(t, bi * BBYTES + 8u * (u / 2u) + 2u * p + u % 2u), q2k_dd(t, bi));
}

// plane p of the unit's 4 words against its activations (group p of words 0..3), and the plane's
// activations summed
fn plane_dot(ws: vec4<u32>, a: UActs, p: u32) -> WSUM {
    return gdot(fmt_group(ws.x, p), uact(a, slot(0u, p))) + gdot(fmt_group(ws.y, p), uact(a, slot(1u, p)))
         + gdot(fmt_group(ws.z, p), uact(a, slot(2u, p))) + gdot(fmt_group(ws.w, p), uact(a, slot(3u, p)));
}
fn plane_sum(a: UActs, p: u32) -> WSUM {
    return asum(uact(a, slot(0u, p))) + asum(uact(a, slot(1u, p))) + asum(uact(a, slot(2u, p)))
         + asum(uact(a, slot(3u, p)));
}

fn fmt_unit(t: u32, bi: u32, j: u32, a: UActs) -> f32 {
    let ws = fmt_quad(t, bi, j);
    let dd = q2k_dd(t, bi);
    let sw = wl(t, kq_w(bi) + 2u * (j / 2u));          // scales bytes 8 (j / 2) ..: sub-block 2p + j % 2
    let sx = wl(t, kq_w(bi) + 2u * (j / 2u) + 1u);
    let o = 8u * (j % 2u);
    let s0 = q2k_scale((sw >> o) & 0xFFu, dd);
    let s1 = q2k_scale((sw >> (16u + o)) & 0xFFu, dd);
    let s2 = q2k_scale((sx >> o) & 0xFFu, dd);
    let s3 = q2k_scale((sx >> (16u + o)) & 0xFFu, dd);
    return f32(plane_dot(ws, a, 0u)) * s0.x + f32(plane_sum(a, 0u)) * s0.y
         + f32(plane_dot(ws, a, 1u)) * s1.x + f32(plane_sum(a, 1u)) * s1.y
         + f32(plane_dot(ws, a, 2u)) * s2.x + f32(plane_sum(a, 2u)) * s2.y
         + f32(plane_dot(ws, a, 3u)) * s3.x + f32(plane_sum(a, 3u)) * s3.y;
}

fn fmt_value(t: u32, e: u32) -> f32 {
    let bi = e / 256u;
    let v = e % 256u;
    let q = (ld8(t, bi * BBYTES + 16u + 32u * (v / 128u) + v % 32u) >> (2u * ((v / 32u) % 4u))) & 3u;
    let s = q2k_scale(ld8(t, bi * BBYTES + v / 16u), q2k_dd(t, bi));
    return f32(q) * s.x + s.y;
}
