// fmt_bf16.wgsl (#include format with FMT_BF16): BF16 weights, the upper 16 bits of an f32.
// The float-format interface (see fmt_f32.wgsl).

fn fmt_x2(v: u32) -> vec2<f32> { return vec2<f32>(bitcast<f32>(v << 16u), bitcast<f32>(v & 0xffff0000u)); }
fn fmt_value(t: u32, e: u32) -> f32 { return fmt_x2(wl(t, e >> 1u))[e & 1u]; }
fn fmt_x4(t: u32, e4: u32) -> vec4<f32> { return vec4<f32>(fmt_x2(wl(t, 2u * e4)), fmt_x2(wl(t, 2u * e4 + 1u))); }
