// fmt_f16.wgsl (#include format with FMT_F16): F16 weights, IEEE half, decoded with
// unpack2x16float (no shader-f16 needed). The float-format interface (see fmt_f32.wgsl).

fn fmt_x2(v: u32) -> vec2<f32> { return unpack2x16float(v); }
fn fmt_value(t: u32, e: u32) -> f32 { return fmt_x2(wl(t, e >> 1u))[e & 1u]; }
fn fmt_x4(t: u32, e4: u32) -> vec4<f32> { return vec4<f32>(fmt_x2(wl(t, 2u * e4)), fmt_x2(wl(t, 2u * e4 + 1u))); }
