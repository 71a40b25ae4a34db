// fmt_bf16.wgsl (#include format: BF16): BF16 weights, the upper 16 bits of an f32.
// The float-format interface (see fmt_f32.wgsl) through common_x2.wgsl; dense.wgsl binds u32 pairs.

fn fmt_x2(v: u32) -> vec2<f32> { return vec2<f32>(bitcast<f32>(v << 16u), bitcast<f32>(v & 0xffff0000u)); }

#include common_x2

#if SHADER_DENSE
alias DW = vec2<u32>;
fn dense_wl(i: u32) -> u32 { return w[i >> 1u][i & 1u]; }
fn dense4(e4: u32) -> vec4<f32> { return fmt_x4(0u, e4); }
#endif
