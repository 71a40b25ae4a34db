// fmt_q4.wgsl (#include format: Q4_0 or Q4_1): ggml's 4-bit legacy blocks, in the packed-format
// interface of common_codes.wgsl, and fmt_value(t, e) (value e of the tensor: the table role).
//
// 32 values per block. Q4_0: 18 bytes, f16 d, then qs[16]; w = (q - 8) d. Q4_1: 20 bytes, f16 d,
// f16 m, then qs[16]; w = q d + m. Value j < 16 is the low nibble of qs[j], value 16 + j the high
// nibble. From the format (wgsl_constants): QS, the byte of qs in a block (2 or 4), and OFFS (1: m
// follows d; Q4_1's 20-byte blocks are 4-byte aligned, Q4_0's 18-byte ones 2-byte aligned).
// Code word k (qs bytes 4k .. 4k + 3) holds in group 0 the low nibbles (values 4k .. 4k + 3) and in
// group 1 the high ones (values 16 + 4k ..). A unit (M = 1) and a quad (M > 1) are the block's 4
// words, one 16-byte read: group g of the 4 words is activation vec4 g of the block (UACT 1); the
// quad's 2 planes are the low and the high nibbles (plane p, word e: group p of word e). Q4_1's
// fmt_unit adds m times the sum of the block's 32 activations (PDM: the tile's planes get d and m).

#include common_bytes
#include common_u32
#include common_codes

const QW: u32 = 4u;
const QG: u32 = 2u;
const ZP: u32 = 8u - 8u * OFFS;
const PDM: bool = OFFS == 1u;
const UACT: u32 = 1u;
const UW: u32 = 4u;
const M4: u32 = 0x0F0F0F0Fu;

// d and m of block bi (m = 0 without OFFS)
fn q4_dm(t: u32, bi: u32) -> vec2<f32> {
    if (OFFS == 1u) { return unpack2x16float(wl(t, (bi * BBYTES) >> 2u)); }
    return vec2<f32>(ldh(t, bi * BBYTES), 0.0);
}

fn fmt_word(t: u32, bi: u32, k: u32) -> u32 { return ldb(t, bi * BBYTES + QS + 4u * k); }
fn fmt_quad(t: u32, bi: u32, u: u32) -> vec4<u32> {
    let b = bi * BBYTES + QS;
    if (OFFS == 1u) {                         // 4-byte aligned: 4 loads
        let i = b >> 2u;
        return vec4<u32>(wl(t, i), wl(t, i + 1u), wl(t, i + 2u), wl(t, i + 3u));
    }
    return ld16(t, b);
}
fn fmt_words(t: u32, bi: u32, j: u32) -> array<u32, UW> {
    let v = fmt_quad(t, bi, j);
    return array<u32, UW>(v.x, v.y, v.z, v.w);
}
fn fmt_group(w: u32, g: u32) -> u32 { return (w >> (4u * g)) & M4; }
fn fmt_codes(w: u32) -> array<u32, QG> { return array<u32, QG>(w & M4, (w >> 4u) & M4); }
fn fmt_pos(k: u32, g: u32) -> u32 { return 4u * g + k; }
fn fmt_pslot(p: u32, e: u32) -> vec2<u32> { return vec2<u32>(e, p); }
fn fmt_dm(t: u32, bi: u32, u: u32, p: u32) -> vec2<f32> { return q4_dm(t, bi); }

// The block's d, m and 4 code words: Q4_1 5 aligned loads; Q4_0 the 5 u32 words that hold its 18
// bytes (block bi starts at the low half of its first word for even bi, the high half for odd bi):
// 5 loads, not ld16's 5 and ldh's 1
struct Q4 { dm: vec2<f32>, c: vec4<u32> }
fn q4_block(t: u32, bi: u32) -> Q4 {
    if (OFFS == 1u) { return Q4(q4_dm(t, bi), fmt_quad(t, bi, 0u)); }
    let i = (bi * BBYTES) >> 2u;
    let v = vec4<u32>(wl(t, i), wl(t, i + 1u), wl(t, i + 2u), wl(t, i + 3u));
    let w4 = wl(t, i + 4u);
    if ((bi & 1u) == 1u) { return Q4(vec2<f32>(unpack2x16float(v.x).y, 0.0), vec4<u32>(v.yzw, w4)); }
    return Q4(vec2<f32>(unpack2x16float(v.x).x, 0.0), (v >> vec4<u32>(16u)) | (vec4<u32>(v.yzw, w4) << vec4<u32>(16u)));
}

// d sum (q - ZP) a over the block's 4 words (+ m sum a with OFFS)
fn fmt_unit(t: u32, bi: u32, j: u32, a: UActs) -> f32 {
    let b = q4_block(t, bi);
    let s = word_dot(b.c.x, a, 0u) + word_dot(b.c.y, a, 1u) + word_dot(b.c.z, a, 2u) + word_dot(b.c.w, a, 3u);
    let dm = b.dm;
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
    let q = (ld8(t, bi * BBYTES + QS + j % 16u) >> (4u * (j / 16u))) & 15u;
    let dm = q4_dm(t, bi);
    if (OFFS == 1u) { return f32(q) * dm.x + dm.y; }
    return (f32(q) - 8.0) * dm.x;
}
