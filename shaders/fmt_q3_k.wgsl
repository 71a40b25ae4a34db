// fmt_q3_k.wgsl (#include format: Q3_K): ggml's Q3_K, in the packed-format interface of
// common_codes.wgsl, and fmt_value(t, e) (the table role).
//
// 256 values per 110-byte block (2-byte aligned: common_bytes): hmask[32], qs[64], scales[12], f16 d.
// Value 128h + 32l + m (h < 2, l < 4, m < 32) has low bits (qs[32h + m] >> 2l) & 3 and third bit
// (hmask[m] >> (4h + l)) & 1; code c = low | third << 2, w = (d (sc6 - 32)) (c - 4), sc6 the 6-bit
// scale of sub-block value / 16 (q3k_sc: low 4 bits in scales[u % 8] (the high nibble for u >= 8),
// bits 5:4 in scales[8 + u % 4] >> 2 (u / 4)).
// Three bits do not fit a word's groups, so a code word is made, not read, one code per byte: code
// word k holds values 128h + 32l + 16s + 4e .. + 3 with h = k / 32, s = (k / 16) % 2, l = (k / 4) % 4,
// e = k % 4: the 16 words of an M = 1 unit (h, s) are its 4 planes l of 16 values, which share 16 qs
// and 16 hmask bytes (activations: 4 aligned vec4s, UACT 3). A quad (M > 1) is one such plane, quad
// u's sub-block 8h + 2l + s.

#include common_bytes
#include common_u32
#include common_codes

const QW: u32 = 64u;
const QG: u32 = 1u;
const ZP: u32 = 4u;
const PDM: bool = true;
const UACT: u32 = 3u;
const UW: u32 = 16u;
const M1: u32 = 0x01010101u;

// codes of 4 values from a qs word and an hmask word, for (h, l)
fn q3k_code(qs: u32, hm: u32, h: u32, l: u32) -> u32 { return ((qs >> (2u * l)) & M3) | (((hm >> (4u * h + l)) & M1) << 2u); }
// d (sc6 - 32) of sub-block u
fn q3k_scale(t: u32, bi: u32, u: u32) -> f32 {
    let b = bi * BBYTES;
    let low = (ld8(t, b + 96u + u % 8u) >> (4u * (u / 8u))) & 15u;
    let high = (ld8(t, b + 104u + u % 4u) >> (2u * (u / 4u))) & 3u;
    return ldh(t, b + 108u) * f32(i32(low | (high << 4u)) - 32);
}

// q3k_scale of sub-blocks u0, u0 + 2, u0 + 4, u0 + 6 (u0 = 8h + s: unit 2h + s) from one 16-byte
// read of the block's bytes 94 .. 109 (scales[12] at 96, d at 108; the same values, 5 loads, not 12)
fn q3k_byte(v: vec4<u32>, k: u32) -> u32 { return (v[k / 4u] >> (8u * (k % 4u))) & 0xFFu; }
fn q3k_scales(t: u32, bi: u32, h: u32, s: u32) -> vec4<f32> {
    let v = ld16(t, bi * BBYTES + 94u);
    let d = unpack2x16float(v.w).y;
    var r: array<f32, 4>;
    for (var i = 0u; i < 4u; i++) {
        let u = 8u * h + s + 2u * i;
        let low = (q3k_byte(v, 2u + u % 8u) >> (4u * (u / 8u))) & 15u;
        let high = (q3k_byte(v, 10u + u % 4u) >> (2u * (u / 4u))) & 3u;
        r[i] = d * f32(i32(low | (high << 4u)) - 32);
    }
    return vec4<f32>(r[0], r[1], r[2], r[3]);
}

fn fmt_quad(t: u32, bi: u32, u: u32) -> vec4<u32> {
    let h = u / 8u;
    let s = (u / 4u) % 2u;
    let l = u % 4u;
    let qs = ld16(t, bi * BBYTES + 32u + 32u * h + 16u * s);
    let hm = ld16(t, bi * BBYTES + 16u * s);
    return vec4<u32>(q3k_code(qs.x, hm.x, h, l), q3k_code(qs.y, hm.y, h, l), q3k_code(qs.z, hm.z, h, l),
                     q3k_code(qs.w, hm.w, h, l));
}
fn fmt_word(t: u32, bi: u32, k: u32) -> u32 { return fmt_quad(t, bi, k / 4u)[k % 4u]; }
fn fmt_group(w: u32, g: u32) -> u32 { return w; }
fn fmt_codes(w: u32) -> array<u32, QG> { return array<u32, QG>(w); }
fn fmt_pos(k: u32, g: u32) -> u32 { return 32u * (k / 32u) + 8u * ((k / 4u) % 4u) + 4u * ((k / 16u) % 2u) + k % 4u; }
fn fmt_pslot(p: u32, e: u32) -> vec2<u32> { return vec2<u32>(e, 0u); }
fn fmt_dm(t: u32, bi: u32, u: u32, p: u32) -> vec2<f32> {
    return vec2<f32>(q3k_scale(t, bi, 8u * (u / 8u) + 2u * (u % 4u) + (u / 4u) % 2u), 0.0);
}

// plane l (4 code words) against activation slots 4l .. 4l + 3
fn q3k_dot4(q: vec4<u32>, m: vec4<u32>, h: u32, l: u32, a: UActs) -> WSUM {
    return gdot(q3k_code(q.x, m.x, h, l), uact(a, 4u * l)) + gdot(q3k_code(q.y, m.y, h, l), uact(a, 4u * l + 1u))
         + gdot(q3k_code(q.z, m.z, h, l), uact(a, 4u * l + 2u)) + gdot(q3k_code(q.w, m.w, h, l), uact(a, 4u * l + 3u));
}

// unit j: h = j / 2, s = j % 2; its planes l = 0..3 are sub-blocks 8h + 2l + s
fn fmt_unit(t: u32, bi: u32, j: u32, a: UActs) -> f32 {
    let h = j / 2u;
    let s = j % 2u;
    let qs = ld16(t, bi * BBYTES + 32u + 32u * h + 16u * s);
    let hm = ld16(t, bi * BBYTES + 16u * s);
    let sc = q3k_scales(t, bi, h, s);
    return f32(q3k_dot4(qs, hm, h, 0u, a)) * sc.x + f32(q3k_dot4(qs, hm, h, 1u, a)) * sc.y
         + f32(q3k_dot4(qs, hm, h, 2u, a)) * sc.z + f32(q3k_dot4(qs, hm, h, 3u, a)) * sc.w;
}

fn fmt_value(t: u32, e: u32) -> f32 {
    let bi = e / 256u;
    let v = e % 256u;
    let h = v / 128u;
    let l = (v / 32u) % 4u;
    let m = v % 32u;
    let c = ((ld8(t, bi * BBYTES + 32u + 32u * h + m) >> (2u * l)) & 3u) | (((ld8(t, bi * BBYTES + m) >> (4u * h + l)) & 1u) << 2u);
    return q3k_scale(t, bi, v / 16u) * (f32(c) - 4.0);
}
