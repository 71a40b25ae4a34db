// fmt_tq1_0.wgsl (#include format with FMT_TQ1): llama.cpp's TQ1_0, in the packed-format
// interface of common_ternary.wgsl.
//
// 256 values per 54-byte block: qs[48], qh[4], then f16 d. Base 3, five trits per byte: trit j of
// byte q is ((q * 3^j) % 256 * 3) >> 8; code c -> w = (c - 1) d. qs[m] (m < 32) holds values
// 32j + m, qs[32 + m] (m < 16) 160 + 16j + m, qh[m] (m < 4) 240 + 4j + m (j < 4; its trit 4
// holds nothing). Code word k holds in group (trit) g: k < 8 values 4k + 32g .. + 3; k < 12
// 4k + 128 + 16g; k = 12 240 + 4g. Every word holds values of both halves of the block.
// trits(w): the 5 trit planes of the 4 bytes of w as code bytes, two bytes at a time in 16-bit lanes.
// Lane unit of the M = 1 kernel: words 4j .. 4j + 3 (j < 3, 16 bytes at byte 16j; group g of the 4
// words is activation vec4 fmt_pos(4j, g) / 4); the 13th word (fmt_tail) is shared out among the 3
// units by common_packed.wgsl.

#include common_bytes
#include common_ternary

const BLK: u32 = 256u;
const BBYTES: u32 = 54u;
const QW: u32 = 13u;
const QG: u32 = 5u;
const CW: u32 = 13u;
const UACT: u32 = 1u;
const UW: u32 = 4u;

fn fmt_word(t: u32, bi: u32, k: u32) -> u32 { return ldb(t, bi * BBYTES + 4u * k); }

fn trits(w: u32) -> array<u32, 5> {
    // written out (no loop, no indexed array: CPU compilers keep it in registers)
    let l0 = w & 0x00FF00FFu;
    let h0 = (w >> 8u) & 0x00FF00FFu;
    let l1 = l0 * 3u;
    let h1 = h0 * 3u;
    let l2 = (l1 & 0x00FF00FFu) * 3u;
    let h2 = (h1 & 0x00FF00FFu) * 3u;
    let l3 = (l2 & 0x00FF00FFu) * 3u;
    let h3 = (h2 & 0x00FF00FFu) * 3u;
    let l4 = (l3 & 0x00FF00FFu) * 3u;
    let h4 = (h3 & 0x00FF00FFu) * 3u;
    let l5 = (l4 & 0x00FF00FFu) * 3u;
    let h5 = (h4 & 0x00FF00FFu) * 3u;
    return array<u32, 5>(((l1 >> 8u) & 0x00030003u) | (h1 & 0x03000300u), ((l2 >> 8u) & 0x00030003u) | (h2 & 0x03000300u),
                         ((l3 >> 8u) & 0x00030003u) | (h3 & 0x03000300u), ((l4 >> 8u) & 0x00030003u) | (h4 & 0x03000300u),
                         ((l5 >> 8u) & 0x00030003u) | (h5 & 0x03000300u));
}

fn fmt_codes(w: u32) -> array<u32, QG> { return trits(w); }
// trit g alone: byte q times 3^g (mod 256), times 3, >> 8, in the same 16-bit lanes as trits()
// unit j < 3: words 4j .. 4j + 3 (16 bytes); the 13th word goes with them in common_packed (fmt_tail)
fn fmt_words(t: u32, bi: u32, j: u32) -> array<u32, UW> {
    let v = ld16(t, bi * BBYTES + 16u * j);
    return array<u32, UW>(v.x, v.y, v.z, v.w);
}
fn fmt_tail(t: u32, bi: u32) -> u32 { return fmt_word(t, bi, QW - 1u); }
fn fmt_group(w: u32, g: u32) -> u32 {
    let p3 = select(select(1u, 3u, g == 1u), select(select(9u, 27u, g == 3u), 81u, g == 4u), g >= 2u);
    let lo = ((w & 0x00FF00FFu) * p3) & 0x00FF00FFu;
    let hi = (((w >> 8u) & 0x00FF00FFu) * p3) & 0x00FF00FFu;
    return (((lo * 3u) >> 8u) & 0x00030003u) | ((hi * 3u) & 0x03000300u);
}
fn fmt_pos(k: u32, g: u32) -> u32 {
    if (k < 8u) { return k + 8u * g; }
    if (k < 12u) { return k + 32u + 4u * g; }
    return 60u + min(g, 3u);
}
fn fmt_has(k: u32, g: u32) -> bool { return k < 12u || g < 4u; }
fn fmt_cword(h: u32, i: u32) -> u32 { return i; }
fn fmt_d(t: u32, bi: u32) -> f32 { return ldh(t, bi * BBYTES + 52u); }
fn fmt_ws(t: u32, nb: u32) -> f32 { return 1.0; }
