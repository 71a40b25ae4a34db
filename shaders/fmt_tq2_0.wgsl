// fmt_tq2_0.wgsl (#include format: TQ2_0): llama.cpp's TQ2_0, in the packed-format interface of
// common_codes.wgsl.
//
// 256 values per 66-byte block: qs[64], then f16 d. qs[32h + m] holds value 128h + 32l + m in
// bits 2l (l < 4); code c -> w = (c - 1) d. Code word k (qs bytes 4k .. 4k + 3) holds in plane g
// (shift 2g) the values 128 (k / 8) + 32g + 4 (k % 8) .. + 3: words 0..7 the first 128 values,
// words 8..15 the second. A unit (M = 1) and a quad (M > 1) are 4 words, one 16-byte read; a
// quad's planes are the 4 bit-planes (plane p, word e: group p of word e).

#include common_bytes
#include common_u32
#include common_codes
#include common_unit

const QW: u32 = 16u;
const QG: u32 = 4u;
const ZP: u32 = 1u;
const PDM: bool = false;
const UACT: u32 = 1u;
const UW: u32 = 4u;

fn fmt_word(t: u32, bi: u32, k: u32) -> u32 { return ldb(t, bi * BBYTES + 4u * k); }
fn fmt_quad(t: u32, bi: u32, u: u32) -> vec4<u32> { return ld16(t, bi * BBYTES + 16u * u); }
fn fmt_words(t: u32, bi: u32, j: u32) -> array<u32, UW> {
    let v = fmt_quad(t, bi, j);
    return array<u32, UW>(v.x, v.y, v.z, v.w);
}
fn fmt_group(w: u32, g: u32) -> u32 { return (w >> (2u * g)) & M3; }
fn fmt_codes(w: u32) -> array<u32, QG> {
    return array<u32, QG>(w & M3, (w >> 2u) & M3, (w >> 4u) & M3, (w >> 6u) & M3);
}
fn fmt_pos(k: u32, g: u32) -> u32 { return 32u * (k / 8u) + 8u * g + k % 8u; }
fn fmt_pslot(p: u32, e: u32) -> vec2<u32> { return vec2<u32>(e, p); }
fn fmt_dm(t: u32, bi: u32, u: u32, p: u32) -> vec2<f32> { return vec2<f32>(ldh(t, bi * BBYTES + 64u), 0.0); }
