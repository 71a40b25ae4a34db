// fmt_q8_0.wgsl (#include format: Q8_0): Q8_0 weights, blocks of 32 values in 34 bytes: f16 d,
// then int8 q[32]; w = d * q. Blocks start 2-byte aligned (common_bytes).
// The float-format interface (see fmt_f32.wgsl; K % 32 == 0); the kernels bind u32 words. Its
// lmhead.wgsl unit is a pair of blocks (68 bytes = 17 whole words, 64 values; K % 64 == 0):
// word 0 = d0 | q0[0..1], words 1..7 = q0[2..29], word 8 = q0[30..31] | d1, 9..16 = q1.

#include common_bytes
#include common_u32

fn fmt_value(t: u32, e: u32) -> f32 {
    let b = (e / 32u) * 34u;                          // block start (bytes, even)
    let qb = b + 2u + e % 32u;                        // byte of q
    return ldh(t, b) * f32(extractBits(bitcast<i32>(wl(t, qb >> 2u)), (qb & 3u) * 8u, 8u));
}
fn fmt_x4(t: u32, e4: u32) -> vec4<f32> {
    let b = (e4 / 8u) * 34u;
    return ldh(t, b) * vec4<f32>(unpack4xI8(ldb(t, b + 2u + (e4 % 8u) * 4u)));
}

#if SHADER_DENSE
alias DW = u32;
fn dense_wl(i: u32) -> u32 { return w[i]; }
fn dense4(e4: u32) -> vec4<f32> { return fmt_x4(0u, e4); }
#endif

#if SHADER_LMHEAD
alias HW = u32;
const UNIT: u32 = 64u;
fn head_wl(i: u32) -> u32 { return w[i]; }
fn head_unit(r: u32, u: u32) -> f32 {
    let o = (r * (K / 64u) + u) * 17u;
    let j = u * 16u;                          // first vec4 of m under this pair
    let w0 = w[o];
    var prev = w0 >> 16u;
    var s0 = 0.0;
    for (var i = 1u; i < 9u; i++) {
        let wi = w[o + i];
        s0 += dot(vec4<f32>(unpack4xI8(prev | (wi << 16u))), xs[j + i - 1u]);
        prev = wi >> 16u;
    }
    var s1 = 0.0;
    for (var i = 0u; i < 8u; i++) {
        s1 += dot(vec4<f32>(unpack4xI8(w[o + 9u + i])), xs[j + 8u + i]);
    }
    return unpack2x16float(w0).x * s0 + unpack2x16float(w[o + 8u] >> 16u).x * s1;
}
#endif
