// fmt_q8_0.wgsl (#include format: Q8_0): ggml's Q8_0, in the packed-format interface of
// common_codes.wgsl, and fmt_value(t, e) (the table role: embedding.wgsl, requant's output).
//
// 32 values per 34-byte block (2-byte aligned): f16 d, int8 q[32]; w = d q. A code is a byte of q
// xor 0x80 (q + 128, ZP 128: code8 gives q back, code4 q as f32). Code word k (k < 8) holds values
// 4k .. 4k + 3, one group. A quad (M > 1) is words 4u .. 4u + 3 (u < 2: 16 values, one plane); the
// M = 1 unit is the whole block, read as the 9 u32 words that hold it (q8_words: the block starts
// at the low or the high half of its first word), its activations 2 aligned vec4s (UACT 3).

#include common_bytes
#include common_u32
#include common_codes

const QW: u32 = 8u;
const QG: u32 = 1u;
const ZP: u32 = 128u;
const PDM: bool = false;
const UACT: u32 = 3u;
const UW: u32 = 8u;
const SIGN: u32 = 0x80808080u;

fn fmt_word(t: u32, bi: u32, k: u32) -> u32 { return ldb(t, bi * BBYTES + 2u + 4u * k) ^ SIGN; }
fn fmt_quad(t: u32, bi: u32, u: u32) -> vec4<u32> { return ld16(t, bi * BBYTES + 2u + 16u * u) ^ vec4<u32>(SIGN); }
fn fmt_group(w: u32, g: u32) -> u32 { return w; }
fn fmt_codes(w: u32) -> array<u32, QG> { return array<u32, QG>(w); }
fn fmt_pos(k: u32, g: u32) -> u32 { return k; }
fn fmt_pslot(p: u32, e: u32) -> vec2<u32> { return vec2<u32>(e, 0u); }
fn fmt_dm(t: u32, bi: u32, u: u32, p: u32) -> vec2<f32> { return vec2<f32>(ldh(t, bi * BBYTES), 0.0); }

// the block's d and its 8 code words from the 9 u32 words that hold it (block bi starts at byte
// 34 bi: the low half of its first word for even bi, the high half for odd bi)
struct Q8 { d: f32, c: array<u32, 8> }
fn q8_words(t: u32, bi: u32) -> Q8 {
    let i = (bi * BBYTES) >> 2u;
    let w0 = wl(t, i);
    let w1 = wl(t, i + 1u);
    let w2 = wl(t, i + 2u);
    let w3 = wl(t, i + 3u);
    let w4 = wl(t, i + 4u);
    let w5 = wl(t, i + 5u);
    let w6 = wl(t, i + 6u);
    let w7 = wl(t, i + 7u);
    let w8 = wl(t, i + 8u);
    if ((bi & 1u) == 1u) {
        return Q8(unpack2x16float(w0).y, array<u32, 8>(w1 ^ SIGN, w2 ^ SIGN, w3 ^ SIGN, w4 ^ SIGN, w5 ^ SIGN,
                                                     w6 ^ SIGN, w7 ^ SIGN, w8 ^ SIGN));
    }
    return Q8(unpack2x16float(w0).x,
              array<u32, 8>(((w0 >> 16u) | (w1 << 16u)) ^ SIGN, ((w1 >> 16u) | (w2 << 16u)) ^ SIGN,
                            ((w2 >> 16u) | (w3 << 16u)) ^ SIGN, ((w3 >> 16u) | (w4 << 16u)) ^ SIGN,
                            ((w4 >> 16u) | (w5 << 16u)) ^ SIGN, ((w5 >> 16u) | (w6 << 16u)) ^ SIGN,
                            ((w6 >> 16u) | (w7 << 16u)) ^ SIGN, ((w7 >> 16u) | (w8 << 16u)) ^ SIGN));
}

fn fmt_unit(t: u32, bi: u32, j: u32, a: UActs) -> f32 {
    let b = q8_words(t, bi);
#if !A8
    // f32: code4(c) = unpack4xU8(q ^ 0x80) - 128 = unpack4xI8(q): the same vec4, without the xor
    // and the subtraction per value (bit for bit: the same products in the same order)
    let s = dot(q8f(b.c[0]), uact(a, 0u)) + dot(q8f(b.c[1]), uact(a, 1u)) + dot(q8f(b.c[2]), uact(a, 2u))
          + dot(q8f(b.c[3]), uact(a, 3u)) + dot(q8f(b.c[4]), uact(a, 4u)) + dot(q8f(b.c[5]), uact(a, 5u))
          + dot(q8f(b.c[6]), uact(a, 6u)) + dot(q8f(b.c[7]), uact(a, 7u));
    return s * b.d;
#else
    let s = word_dot(b.c[0], a, 0u) + word_dot(b.c[1], a, 1u) + word_dot(b.c[2], a, 2u) + word_dot(b.c[3], a, 3u)
          + word_dot(b.c[4], a, 4u) + word_dot(b.c[5], a, 5u) + word_dot(b.c[6], a, 6u) + word_dot(b.c[7], a, 7u);
#if Q8B
    return (b.d * xscale(bi).x) * f32(s);     // ggml's vec_dot_q8_0_q8_0: (dw dx) isum
#else
    return f32(s) * b.d;
#endif
#endif
}
// a code word (q ^ 0x80 per byte) as the 4 signed values q
fn q8f(c: u32) -> vec4<f32> { return vec4<f32>(unpack4xI8(c ^ SIGN)); }

fn fmt_value(t: u32, e: u32) -> f32 {
    let b = (e / 32u) * 34u;                          // block start (bytes, even)
    let qb = b + 2u + e % 32u;                        // byte of q
    return ldh(t, b) * f32(extractBits(bitcast<i32>(wl(t, qb >> 2u)), (qb & 3u) * 8u, 8u));
}
