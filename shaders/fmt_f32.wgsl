// fmt_f32.wgsl (#include format: F32): F32 weights, one little-endian f32 per value.
//
// The float-format interface (every fmt_*.wgsl of a float format has it; e is the flat index of a
// value in the tensor, rows of K values one after the other; wl(t, i): u32 word i of tensor t,
// from the including shader):
//   fmt_value(t, e)   value e of tensor t as f32 (embedding.wgsl, requant.wgsl)
//   fmt_x4(t, e4)     values 4 e4 .. 4 e4 + 3 of tensor t (K % 4 == 0)
//   WT, WPT, fmt_wt   u32 words (common_u32.wgsl: the kernels that bind array<WT>)
// and a section per float kernel that binds the weights its own way (SHADER_<NAME>: bitweb.shaders):
//   bitlinear.wgsl  the M = 1 unit of common_float_unit.wgsl (vec4<u32> elements): fmt_v16(t, bi),
//                 the 16 values of unit bi (f32 activations only)
//   dense.wgsl    DW (it binds w: array<DW>), dense_wl(i) (word i), dense4(e4) (fmt_x4 from w)
//   lmhead.wgsl   HW (it binds w: array<HW>), head_wl(i), UNIT (values one lane reads at once);
//                 head_unit(r, u) = sum over unit u of row r of W m (m staged: xs); XDIRECT (one
//                 value per element): unit_m(xb, u), the m under unit u, and unit_x(r, u, m)
// 16-bit formats also: fmt_x2(v), the two values packed in the u32 v (element 2j is the low half).

#if SHADER_BITLINEAR
#include common_float_unit
fn fmt_v16(t: u32, bi: u32) -> array<vec4<f32>, 4> {
    return array<vec4<f32>, 4>(bitcast<vec4<f32>>(wv(t, 4u * bi)), bitcast<vec4<f32>>(wv(t, 4u * bi + 1u)),
                               bitcast<vec4<f32>>(wv(t, 4u * bi + 2u)), bitcast<vec4<f32>>(wv(t, 4u * bi + 3u)));
}
#else
#include common_u32
#endif

fn fmt_value(t: u32, e: u32) -> f32 { return bitcast<f32>(wl(t, e)); }
fn fmt_x4(t: u32, e4: u32) -> vec4<f32> {
    let i = 4u * e4;
    return vec4<f32>(bitcast<f32>(wl(t, i)), bitcast<f32>(wl(t, i + 1u)), bitcast<f32>(wl(t, i + 2u)),
                     bitcast<f32>(wl(t, i + 3u)));
}

#if SHADER_DENSE
alias DW = vec4<f32>;
fn dense_wl(i: u32) -> u32 { return bitcast<u32>(w[i >> 2u][i & 3u]); }
fn dense4(e4: u32) -> vec4<f32> { return w[e4]; }
#endif

#if SHADER_LMHEAD
// a unit is one 16-byte element: 4 values
alias HW = vec4<f32>;
const UNIT: u32 = 4u;
fn head_wl(i: u32) -> u32 { return bitcast<u32>(w[i >> 2u][i & 3u]); }
#if XDIRECT
fn unit_m(xb: u32, u: u32) -> array<vec4<f32>, 2> { return array<vec4<f32>, 2>(m4(xb, u), vec4<f32>()); }
fn unit_x(r: u32, u: u32, m: array<vec4<f32>, 2>) -> f32 { return dot(w[r * (K / 4u) + u], m[0]); }
#else
fn head_unit(r: u32, u: u32) -> f32 { return dot(w[r * (K / 4u) + u], xs[u]); }
#endif
#endif
