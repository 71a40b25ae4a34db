// fmt_f16.wgsl (#include format: F16): F16 weights, IEEE half, decoded with unpack2x16float (no
// shader-f16 needed). The float-format interface (see fmt_f32.wgsl) through common_x2.wgsl; its
// dense.wgsl section reads native f16 (vec4<f16>, 4 values) where the device has shader-f16 (F16),
// else u32 pairs.

fn fmt_x2(v: u32) -> vec2<f32> { return unpack2x16float(v); }

#include common_x2

#if SHADER_DENSE
#if F16
alias DW = vec4<f16>;
fn dense_wl(i: u32) -> u32 { let v = w[i >> 1u]; return pack2x16float(vec2<f32>(select(v.xy, v.zw, (i & 1u) == 1u))); }
fn dense4(e4: u32) -> vec4<f32> { return vec4<f32>(w[e4]); }
#else
alias DW = vec2<u32>;
fn dense_wl(i: u32) -> u32 { return w[i >> 1u][i & 1u]; }
fn dense4(e4: u32) -> vec4<f32> { return fmt_x4(0u, e4); }
#endif
#endif
