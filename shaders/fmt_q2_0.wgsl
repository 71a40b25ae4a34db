// fmt_q2_0.wgsl (#include format: Q2_0 or Q2_0_G128): ggml's Q2_0 (64-value blocks) and PrismML's
// Q2_0_G128 (the same codes in 128-value blocks), in the packed-format interface of
// common_codes.wgsl, and fmt_value(t, e) (value e of the tensor: the table role, embedding.wgsl).
// BLK and BBYTES come from the format (64 / 18 or 128 / 34).
//
// A block: f16 d, then BLK / 4 bytes of 2-bit codes; value j has code (qs[j / 4] >> 2 (j % 4)) & 3,
// w = (code - 1) d (0 -> -1, 1 -> 0, 2 -> +1; 3, never written, -> +2). Code word k (code bytes
// 4k .. 4k + 3) holds in byte g the values 16k + 4g .. + 3 (crumb i: value 16k + 4g + i); a
// group's codes are its byte's 4 crumbs spread one per byte. A unit (M = 1) and a quad (M > 1)
// are 4 words (one 16-byte read, 64 values); a quad's planes are its words (plane p, word e:
// group e of word p: 16 consecutive values).

#include common_bytes
#include common_u32
#include common_codes
#include common_unit

const QW: u32 = BLK / 16u;
const QG: u32 = 4u;
const ZP: u32 = 1u;
const PDM: bool = false;
const UACT: u32 = 2u;
const UW: u32 = 4u;

fn fmt_word(t: u32, bi: u32, k: u32) -> u32 { return ldb(t, bi * BBYTES + 2u + 4u * k); }
fn fmt_quad(t: u32, bi: u32, u: u32) -> vec4<u32> { return ld16(t, bi * BBYTES + 2u + 16u * u); }
fn fmt_words(t: u32, bi: u32, j: u32) -> array<u32, UW> {
    let v = fmt_quad(t, bi, j);
    return array<u32, UW>(v.x, v.y, v.z, v.w);
}
fn fmt_group(w: u32, g: u32) -> u32 {
    let b = (w >> (8u * g)) & 0xFFu;
    return (b | (b << 6u) | (b << 12u) | (b << 18u)) & M3;           // crumb i -> byte i
}
fn fmt_codes(w: u32) -> array<u32, QG> {
    return array<u32, QG>(fmt_group(w, 0u), fmt_group(w, 1u), fmt_group(w, 2u), fmt_group(w, 3u));
}
fn fmt_pos(k: u32, g: u32) -> u32 { return 4u * k + g; }
fn fmt_pslot(p: u32, e: u32) -> vec2<u32> { return vec2<u32>(p, e); }
fn fmt_dm(t: u32, bi: u32, u: u32, p: u32) -> vec2<f32> { return vec2<f32>(ldh(t, bi * BBYTES), 0.0); }

fn fmt_value(t: u32, e: u32) -> f32 {
    let bb = (e / BLK) * BBYTES;
    let j = e % BLK;
    return (f32((ld8(t, bb + 2u + j / 4u) >> (2u * (j % 4u))) & 3u) - 1.0) * ldh(t, bb);
}
