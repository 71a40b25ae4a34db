// common_x2.wgsl (#include common_x2): the float-format interface (see fmt_f32.wgsl) of a 16-bit
// format from its fmt_x2(v) (the two values of u32 v, element 2j in the low half): F16, BF16.
// Its lmhead.wgsl section: a unit is one 16-byte element (vec4<u32>), 8 values; its bitlinear.wgsl
// section common_float_unit's fmt_v16, two such elements. (Their dense.wgsl sections differ: F16
// reads native f16 where the device has shader-f16.)

#if SHADER_BITLINEAR
#include common_float_unit
// the 16 values of unit bi: two elements of 8
fn fmt_v16(t: u32, bi: u32) -> array<vec4<f32>, 4> {
    let a = wv(t, 2u * bi);
    let b = wv(t, 2u * bi + 1u);
    return array<vec4<f32>, 4>(vec4<f32>(fmt_x2(a.x), fmt_x2(a.y)), vec4<f32>(fmt_x2(a.z), fmt_x2(a.w)),
                               vec4<f32>(fmt_x2(b.x), fmt_x2(b.y)), vec4<f32>(fmt_x2(b.z), fmt_x2(b.w)));
}
#else
#include common_u32
#endif

fn fmt_value(t: u32, e: u32) -> f32 { return fmt_x2(wl(t, e >> 1u))[e & 1u]; }
fn fmt_x4(t: u32, e4: u32) -> vec4<f32> { return vec4<f32>(fmt_x2(wl(t, 2u * e4)), fmt_x2(wl(t, 2u * e4 + 1u))); }

#if SHADER_LMHEAD
alias HW = vec4<u32>;
const UNIT: u32 = 8u;
fn head_wl(i: u32) -> u32 { return w[i >> 2u][i & 3u]; }
#if XDIRECT
// the m under unit u (8 values), read once for the RB rows
fn unit_m(xb: u32, u: u32) -> array<vec4<f32>, 2> { return array<vec4<f32>, 2>(m4(xb, 2u * u), m4(xb, 2u * u + 1u)); }
fn unit_x(r: u32, u: u32, m: array<vec4<f32>, 2>) -> f32 {
    let v = w[r * (K / 8u) + u];
    return dot(vec4<f32>(fmt_x2(v.x), fmt_x2(v.y)), m[0]) + dot(vec4<f32>(fmt_x2(v.z), fmt_x2(v.w)), m[1]);
}
#else
fn head_unit(r: u32, u: u32) -> f32 {
    let v = w[r * (K / 8u) + u];                // 8 values, two per word (fmt_x2)
    return dot(vec4<f32>(fmt_x2(v.x), fmt_x2(v.y)), xs[2u * u]) + dot(vec4<f32>(fmt_x2(v.z), fmt_x2(v.w)), xs[2u * u + 1u]);
}
#endif
#endif
