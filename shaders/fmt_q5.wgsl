// fmt_q5.wgsl (#include format: Q5_0 or Q5_1): ggml's 5-bit legacy blocks, in the packed-format
// interface of common_codes.wgsl, and fmt_value(t, e) (the table role).
//
// 32 values per block. Q5_0: 22 bytes, f16 d, u32 qh, qs[16]; w = (q - 16) d. Q5_1: 24 bytes, f16 d,
// f16 m, u32 qh, qs[16]; w = q d + m. Value j's q is its nibble (j < 16: the low nibble of qs[j],
// else the high nibble of qs[j - 16]) | (bit j of qh) << 4. From the format: QH and QS, the bytes of
// qh and qs in a block, and OFFS (1: m follows d; Q5_1's 24-byte blocks are 4-byte aligned, Q5_0's
// 22-byte ones 2-byte aligned).
// Five bits do not fit two groups in a word, so a code word is made, not read: code word k (k < 8)
// holds values 4k .. 4k + 3, one code per byte (one group). A quad (M > 1) is words 4u .. 4u + 3
// (u < 2: the low or the high nibbles of the 16 qs bytes, and 16 bits of qh: one plane of 16
// values); the M = 1 unit is the whole block (UW 8 words: qs and qh read once), its activations 2
// aligned vec4s (UACT 3). Q5_1's fmt_unit adds m times the sum of the block's activations.

#include common_bytes
#include common_u32
#include common_codes

const QW: u32 = 8u;
const QG: u32 = 1u;
const ZP: u32 = 16u - 16u * OFFS;
const PDM: bool = OFFS == 1u;
const UACT: u32 = 3u;
const UW: u32 = 8u;
const M4: u32 = 0x0F0F0F0Fu;

fn q5_dm(t: u32, bi: u32) -> vec2<f32> {
    if (OFFS == 1u) { return unpack2x16float(wl(t, (bi * BBYTES) >> 2u)); }
    return vec2<f32>(ldh(t, bi * BBYTES), 0.0);
}
fn q5_qh(t: u32, bi: u32) -> u32 {
    if (OFFS == 1u) { return wl(t, (bi * BBYTES + QH) >> 2u); }
    return ldb(t, bi * BBYTES + QH);
}
fn q5_qs(t: u32, bi: u32) -> vec4<u32> {
    let b = bi * BBYTES + QS;
    if (OFFS == 1u) {
        let i = b >> 2u;
        return vec4<u32>(wl(t, i), wl(t, i + 1u), wl(t, i + 2u), wl(t, i + 3u));
    }
    return ld16(t, b);
}
// bits 0..3 of h -> bit 4 of bytes 0..3
fn spread4(h: u32) -> u32 { return ((h * 0x00204081u) & 0x01010101u) << 4u; }
// code word e of quad u (values 16u + 4e ..) from the block's qs words and qh
fn q5_word(qs: vec4<u32>, qh: u32, u: u32, e: u32) -> u32 {
    return ((qs[e] >> (4u * u)) & M4) | spread4((qh >> (16u * u + 4u * e)) & 15u);
}

fn fmt_word(t: u32, bi: u32, k: u32) -> u32 { return q5_word(q5_qs(t, bi), q5_qh(t, bi), k / 4u, k % 4u); }
fn fmt_quad(t: u32, bi: u32, u: u32) -> vec4<u32> {
    let qs = q5_qs(t, bi);
    let qh = q5_qh(t, bi);
    return vec4<u32>(q5_word(qs, qh, u, 0u), q5_word(qs, qh, u, 1u), q5_word(qs, qh, u, 2u), q5_word(qs, qh, u, 3u));
}
fn fmt_group(w: u32, g: u32) -> u32 { return w; }
fn fmt_codes(w: u32) -> array<u32, QG> { return array<u32, QG>(w); }
fn fmt_pos(k: u32, g: u32) -> u32 { return k; }
fn fmt_pslot(p: u32, e: u32) -> vec2<u32> { return vec2<u32>(e, 0u); }
fn fmt_dm(t: u32, bi: u32, u: u32, p: u32) -> vec2<f32> { return q5_dm(t, bi); }

// The block's d, m, qh and qs words: Q5_1 6 aligned loads; Q5_0 the 6 u32 words that hold its 22
// bytes (block bi starts at the low half of its first word for even bi, the high half for odd bi):
// 6 loads, not ldh's 1, ldb's 2 and ld16's 5
struct Q5 { dm: vec2<f32>, qh: u32, qs: vec4<u32> }
fn q5_block(t: u32, bi: u32) -> Q5 {
    if (OFFS == 1u) { return Q5(q5_dm(t, bi), q5_qh(t, bi), q5_qs(t, bi)); }
    let i = (bi * BBYTES) >> 2u;
    let w0 = wl(t, i);
    let v = vec4<u32>(wl(t, i + 1u), wl(t, i + 2u), wl(t, i + 3u), wl(t, i + 4u));
    let w5 = wl(t, i + 5u);
    if ((bi & 1u) == 1u) { return Q5(vec2<f32>(unpack2x16float(w0).y, 0.0), v.x, vec4<u32>(v.yzw, w5)); }
    return Q5(vec2<f32>(unpack2x16float(w0).x, 0.0), (w0 >> 16u) | (v.x << 16u),
              (v >> vec4<u32>(16u)) | (vec4<u32>(v.yzw, w5) << vec4<u32>(16u)));
}

// the whole block: d sum (q - ZP) a (+ m sum a with OFFS)
fn fmt_unit(t: u32, bi: u32, j: u32, a: UActs) -> f32 {
    let blk = q5_block(t, bi);
    let qs = blk.qs;
    let qh = blk.qh;
    var s = word_dot(q5_word(qs, qh, 0u, 0u), a, 0u) + word_dot(q5_word(qs, qh, 0u, 1u), a, 1u);
    s += word_dot(q5_word(qs, qh, 0u, 2u), a, 2u) + word_dot(q5_word(qs, qh, 0u, 3u), a, 3u);
    s += word_dot(q5_word(qs, qh, 1u, 0u), a, 4u) + word_dot(q5_word(qs, qh, 1u, 1u), a, 5u);
    s += word_dot(q5_word(qs, qh, 1u, 2u), a, 6u) + word_dot(q5_word(qs, qh, 1u, 3u), a, 7u);
    let dm = blk.dm;
#if Q8B
    let xs = xscale(bi);                      // ggml's vec_dot_*_q8_0 / q8_1: (dw dx) isum (+ mw sx)
    if (OFFS == 1u) { return (dm.x * xs.x) * f32(s) + dm.y * xs.y; }
    return (dm.x * xs.x) * f32(s);
#else
    if (OFFS == 1u) { return f32(s) * dm.x + f32(unit_asum(a)) * dm.y; }
    return f32(s) * dm.x;
#endif
}

fn fmt_value(t: u32, e: u32) -> f32 {
    let bi = e / 32u;
    let j = e % 32u;
    let q = ((ld8(t, bi * BBYTES + QS + j % 16u) >> (4u * (j / 16u))) & 15u) | (((q5_qh(t, bi) >> j) & 1u) << 4u);
    let dm = q5_dm(t, bi);
    if (OFFS == 1u) { return f32(q) * dm.x + dm.y; }
    return (f32(q) - 16.0) * dm.x;
}
