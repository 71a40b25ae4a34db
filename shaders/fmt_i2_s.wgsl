// fmt_i2_s.wgsl (#include format: I2_S): bitnet.cpp's I2_S (x86 layout of the published 2B4T
// file), in the packed-format interface of common_codes.wgsl.
//
// 128 values per 32-byte block: byte b holds value b in bits 7:6, 32 + b in 5:4, 64 + b in 3:2,
// 96 + b in 1:0; code c -> w = c - 1 (0 -> -1, 1 -> 0, 2 -> +1; 3, never written, -> +2). No block
// scale: one f32 scale for the whole tensor after the blocks (byte n / 4), then 28 zero bytes.
// Code word k (bytes 4k .. 4k + 3) holds in plane g (shift 6 - 2g) the values 32g + 4k .. + 3.
// Bound as vec4<u32> (blocks are 16-byte aligned): a unit (M = 1) and a quad (M > 1) are one
// element, 4 words, 64 values; a quad's planes are the 4 bit-planes (plane p, word e: group p of
// word e). A8 sums the codes directly, sum (c - 1) q = sum c q - sum q: fmt_unit returns sum c q,
// the kernel subtracts the row's sum q once (ZROW = 1).

#include common_codes

alias WT = vec4<u32>;
const WPT: u32 = 4u;
fn fmt_wt(v: WT, k: u32) -> u32 { return v[k]; }

const QW: u32 = 8u;
const QG: u32 = 4u;
const ZP: u32 = 1u;
const PDM: bool = false;
const UACT: u32 = 1u;
const UW: u32 = 4u;
#if A8
const ZROW: f32 = 1.0;
#else
const ZROW: f32 = 0.0;
#endif

fn fmt_word(t: u32, bi: u32, k: u32) -> u32 { return wl(t, bi * 8u + k); }
fn fmt_quad(t: u32, bi: u32, u: u32) -> vec4<u32> { return wv(t, bi * 2u + u); }    // one 16-byte load
fn fmt_words(t: u32, bi: u32, j: u32) -> array<u32, UW> {
    let v = fmt_quad(t, bi, j);
    return array<u32, UW>(v.x, v.y, v.z, v.w);
}
fn fmt_group(w: u32, g: u32) -> u32 { return (w >> (6u - 2u * g)) & M3; }
fn fmt_codes(w: u32) -> array<u32, QG> {
    return array<u32, QG>((w >> 6u) & M3, (w >> 4u) & M3, (w >> 2u) & M3, w & M3);
}
fn fmt_pos(k: u32, g: u32) -> u32 { return 8u * g + k; }
fn fmt_pslot(p: u32, e: u32) -> vec2<u32> { return vec2<u32>(e, p); }
fn fmt_dm(t: u32, bi: u32, u: u32, p: u32) -> vec2<f32> { return vec2<f32>(1.0, 0.0); }
fn fmt_ws(t: u32, nb: u32) -> f32 { return bitcast<f32>(wl(t, nb * 8u)); }

// A8: sum over the 4 words c and planes g of dot4(codes, activations) as an exact integer (raw codes:
// ZROW; a[g] is plane g of the 4 words, UACT = 1); f32: sum over c of the 4 planes' dot(c - 1, a),
// word by word.
fn fmt_unit(t: u32, bi: u32, j: u32, a: UActs) -> f32 {
    let w = fmt_quad(t, bi, j);
#if A8
    let a0 = a[0];
    let a1 = a[1];
    let a2 = a[2];
    let a3 = a[3];
    var s = 0;
    for (var c = 0u; c < 4u; c++) {
        let cs = fmt_codes(w[c]);
        s += dot4(cs[0], a0[c]) + dot4(cs[1], a1[c]) + dot4(cs[2], a2[c]) + dot4(cs[3], a3[c]);
    }
    return f32(s);
#else
    var s = 0.0;
    for (var c = 0u; c < 4u; c++) {
        let cs = fmt_codes(w[c]);
        s += dot(code4(cs[0]), a[4u * c]) + dot(code4(cs[1]), a[4u * c + 1u])
           + dot(code4(cs[2]), a[4u * c + 2u]) + dot(code4(cs[3]), a[4u * c + 3u]);
    }
    return s;
#endif
}
