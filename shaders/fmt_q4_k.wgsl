// fmt_q4_k.wgsl (#include format: Q4_K): ggml's Q4_K, in the packed-format interface of
// common_codes.wgsl, and fmt_value(t, e) (the table role).
//
// 256 values per 144-byte block (16-byte aligned): f16 d, f16 dmin, scales[12], qs[128]. Value
// 64c + 32k + m (c < 4, k < 2, m < 32) is the low (k 0) or high (k 1) nibble of qs[32c + m]; its
// sub-block u = 2c + k has a 6-bit scale sc and min mn (kq_scm: ggml's get_scale_min_k4), w =
// (d sc) q - dmin mn. The first 16 bytes (d, dmin, scales) are one aligned 16-byte read (kq_head).
// Code word k (qs bytes 4k .. 4k + 3) holds in group 0 the low nibbles (values 64 (k / 8) +
// 4 (k % 8) ..) and in group 1 the high ones (+ 32). A unit (M = 1) and a quad (M > 1) are 4 words,
// one 16-byte read (32 values); the quad's 2 planes are the low and the high nibbles (plane p,
// word e: group p of word e), quad u's plane p is sub-block 2 (u / 2) + p.

#include common_bytes
// Bound as vec4<u32> (blocks of 144 bytes are 16-byte aligned): kq_v4 is one 16-byte load
// (lavapipe gathers a lane's scalar words one by one: 4 loads and their bounds checks).
alias WT = vec4<u32>;
const WPT: u32 = 4u;
fn fmt_wt(v: WT, k: u32) -> u32 { return v[k]; }
#include common_codes
#include common_kquant

fn kq_v4(t: u32, i: u32) -> vec4<u32> { return wv(t, i >> 2u); }   // words i .. i + 3, i % 4 = 0

const QW: u32 = 32u;
const QG: u32 = 2u;
const ZP: u32 = 0u;
const PDM: bool = true;
const UACT: u32 = 1u;
const UW: u32 = 4u;
const M4: u32 = 0x0F0F0F0Fu;

fn fmt_word(t: u32, bi: u32, k: u32) -> u32 { return wl(t, kq_w(bi) + 4u + k); }
fn fmt_quad(t: u32, bi: u32, u: u32) -> vec4<u32> { return kq_v4(t, kq_w(bi) + 4u + 4u * u); }
fn fmt_group(w: u32, g: u32) -> u32 { return (w >> (4u * g)) & M4; }
fn fmt_codes(w: u32) -> array<u32, QG> { return array<u32, QG>(w & M4, (w >> 4u) & M4); }
fn fmt_pos(k: u32, g: u32) -> u32 { return 16u * (k / 8u) + 8u * g + k % 8u; }
fn fmt_pslot(p: u32, e: u32) -> vec2<u32> { return vec2<u32>(e, p); }
fn fmt_dm(t: u32, bi: u32, u: u32, p: u32) -> vec2<f32> { return kq_scm(kq_head(t, bi), 2u * (u / 2u) + p); }

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
    let h = kq_head(t, bi);
    let s0 = kq_scm(h, 2u * (j / 2u));
    let s1 = kq_scm(h, 2u * (j / 2u) + 1u);
    return f32(plane_dot(ws, a, 0u)) * s0.x + f32(plane_sum(a, 0u)) * s0.y
         + f32(plane_dot(ws, a, 1u)) * s1.x + f32(plane_sum(a, 1u)) * s1.y;
}

fn fmt_value(t: u32, e: u32) -> f32 {
    let bi = e / 256u;
    let v = e % 256u;
    let q = (ld8(t, bi * BBYTES + 16u + 32u * (v / 64u) + v % 32u) >> (4u * ((v / 32u) % 2u))) & 15u;
    let s = kq_scm(kq_head(t, bi), v / 32u);
    return f32(q) * s.x + s.y;
}
