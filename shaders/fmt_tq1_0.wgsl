// fmt_tq1_0.wgsl (#include format: TQ1_0): llama.cpp's TQ1_0, in the packed-format interface of
// common_codes.wgsl.
//
// 256 values per 54-byte block: qs[48], qh[4], then f16 d. Base 3, five trits per byte: trit j of
// byte q is ((q * 3^j) % 256 * 3) >> 8; code c -> w = (c - 1) d. qs[m] (m < 32) holds values
// 32j + m, qs[32 + m] (m < 16) 160 + 16j + m, qh[m] (m < 4) 240 + 4j + m (j < 4; its trit 4
// holds nothing). Code word k holds in group (trit) g: k < 8 values 4k + 32g .. + 3; k < 12
// 4k + 128 + 16g; k = 12 240 + 4g. Every word holds values of both halves of the block.
// trits(w): the 5 trit planes of the 4 bytes of w as code bytes, two bytes at a time in 16-bit lanes.
// A unit (M = 1) is words 4j .. 4j + 3 (j < 3, 16 bytes at byte 16j; group g of the 4 words is
// activation vec4 fmt_pos(4j, g) / 4); the 13th word is shared out among the 3 units: unit j takes
// its group j, unit 2 also group 3 (XA = 2 extra activation words; the other units multiply group 3
// by zero activations: no branch). A quad (M > 1) is a unit; its 5 planes the trits (plane p, word
// e: group p of word e); the 13th word is one more plane after the last quad (QW % 4 = 1).

#include common_bytes
#include common_u32
#include common_codes

const QW: u32 = 13u;
const QG: u32 = 5u;
const ZP: u32 = 1u;
const PDM: bool = false;
const UACT: u32 = 1u;
const UW: u32 = 4u;
const XA: u32 = 2u;

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
fn fmt_quad(t: u32, bi: u32, u: u32) -> vec4<u32> { return ld16(t, bi * BBYTES + 16u * u); }
fn fmt_words(t: u32, bi: u32, j: u32) -> array<u32, UW> {
    let v = fmt_quad(t, bi, j);
    return array<u32, UW>(v.x, v.y, v.z, v.w);
}
// trit g alone: byte q times 3^g (mod 256), times 3, >> 8, in the same 16-bit lanes as trits()
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
// extra activation word i of unit j: group j of the 13th word (i = 0), group 3 (i = 1, last unit only)
fn fmt_xpos(j: u32, i: u32) -> u32 { return fmt_pos(QW - 1u, select(j, 3u, i == 1u)); }
fn fmt_xhas(j: u32, i: u32) -> bool { return i == 0u || j == UPK - 1u; }
fn fmt_pslot(p: u32, e: u32) -> vec2<u32> { return vec2<u32>(e, p); }
fn fmt_dm(t: u32, bi: u32, u: u32, p: u32) -> vec2<f32> { return vec2<f32>(ldh(t, bi * BBYTES + 52u), 0.0); }
// common_unit.wgsl's sum over the unit's 4 words, plus its share of the 13th word (fmt_xpos)
fn fmt_unit(t: u32, bi: u32, j: u32, a: UActs) -> f32 {
    let ws = fmt_words(t, bi, j);
    var s = word_dot(ws[0], a, 0u);
    s += word_dot(ws[1], a, 1u) + word_dot(ws[2], a, 2u) + word_dot(ws[3], a, 3u);
    let wt = fmt_word(t, bi, QW - 1u);
    s += gdot(fmt_group(wt, j), uact(a, UW * QG)) + gdot(fmt_group(wt, 3u), uact(a, UW * QG + 1u));
    return f32(s) * fmt_dm(t, bi, j, 0u).x;
}
