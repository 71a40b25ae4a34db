// fmt_q8_0.wgsl (#include format with FMT_Q8_0): Q8_0 weights, blocks of 32 values in 34 bytes:
// f16 d, then int8 q[32]; w = d * q. Blocks start 2-byte aligned (common_bytes).
// The float-format interface (see fmt_f32.wgsl; K % 32 == 0).

#include common_bytes

fn fmt_value(t: u32, e: u32) -> f32 {
    let b = (e / 32u) * 34u;                          // block start (bytes, even)
    let qb = b + 2u + e % 32u;                        // byte of q
    return ldh(t, b) * f32(extractBits(bitcast<i32>(wl(t, qb >> 2u)), (qb & 3u) * 8u, 8u));
}
fn fmt_x4(t: u32, e4: u32) -> vec4<f32> {
    let b = (e4 / 8u) * 34u;
    return ldh(t, b) * vec4<f32>(unpack4xI8(ldb(t, b + 2u + (e4 % 8u) * 4u)));
}
