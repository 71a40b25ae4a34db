// fmt_q1_0.wgsl (#include format: Q1_0): ggml's Q1_0 (binary), in the packed-format interface of
// common_codes.wgsl, and fmt_value(t, e) (value e of the tensor: the table role, embedding.wgsl).
//
// 128 values per 18-byte block: f16 d, then 16 bytes of signs: bit j % 8 of byte j / 8 set -> +d,
// clear -> -d (w = 2b - 1, i.e. code c = 2b and w = c - 1). Code word k (sign bytes 4k .. 4k + 3)
// holds in nibble g the values 32k + 4g .. + 3 (bit i: value 32k + 4g + i). A unit (M = 1) is one
// word (32 values); a quad (M > 1) is the block's 16 sign bytes, its 8 planes the nibble-quads
// (plane p, word e: nibble 4 (p % 2) + e of word p / 2).

#include common_bytes
#include common_u32
#include common_codes
#include common_unit

const QW: u32 = 4u;
const QG: u32 = 8u;
const ZP: u32 = 1u;
const PDM: bool = false;
const UACT: u32 = 0u;
const UW: u32 = 1u;

fn fmt_word(t: u32, bi: u32, k: u32) -> u32 { return ldb(t, bi * BBYTES + 2u + 4u * k); }
fn fmt_quad(t: u32, bi: u32, u: u32) -> vec4<u32> { return ld16(t, bi * BBYTES + 2u); }   // u = 0: one quad
fn fmt_words(t: u32, bi: u32, j: u32) -> array<u32, UW> { return array<u32, UW>(fmt_word(t, bi, j)); }
fn fmt_group(w: u32, g: u32) -> u32 {
    return ((((w >> (4u * g)) & 0xFu) * 0x00204081u) & 0x01010101u) << 1u;     // bit i -> byte i, 2b
}
fn fmt_codes(w: u32) -> array<u32, QG> {
    var c: array<u32, QG>;
    for (var g = 0u; g < QG; g++) {
        c[g] = ((((w >> (4u * g)) & 0xFu) * 0x00204081u) & 0x01010101u) << 1u;   // bit i -> byte i, 2b
    }
    return c;
}
fn fmt_pos(k: u32, g: u32) -> u32 { return 8u * k + g; }
fn fmt_pslot(p: u32, e: u32) -> vec2<u32> { return vec2<u32>(p / 2u, 4u * (p % 2u) + e); }
fn fmt_dm(t: u32, bi: u32, u: u32, p: u32) -> vec2<f32> { return vec2<f32>(ldh(t, bi * BBYTES), 0.0); }

fn fmt_value(t: u32, e: u32) -> f32 {
    let bb = (e / BLK) * BBYTES;
    let j = e % BLK;
    let d = ldh(t, bb);
    return select(-d, d, ((ld8(t, bb + 2u + j / 8u) >> (j % 8u)) & 1u) == 1u);
}
