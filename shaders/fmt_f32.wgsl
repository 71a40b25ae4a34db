// fmt_f32.wgsl (#include format with FMT_F32): F32 weights, one little-endian f32 per value.
//
// The float-format interface (every fmt_*.wgsl of a float format has it; e is the flat index of a
// value in the tensor, rows of K values one after the other):
//   fmt_value(t, e)   value e of tensor t as f32 (embedding.wgsl, requant.wgsl)
//   fmt_x4(t, e4)     values 4 e4 .. 4 e4 + 3 of tensor t (dense.wgsl; K % 4 == 0)
// 16-bit formats also: fmt_x2(v), the two values packed in the u32 v (element 2j is the low half).
// Needs from the including shader: fn wl(t: u32, i: u32) -> u32, u32 word i of tensor t.

fn fmt_value(t: u32, e: u32) -> f32 { return bitcast<f32>(wl(t, e)); }
fn fmt_x4(t: u32, e4: u32) -> vec4<f32> {
    let i = 4u * e4;
    return vec4<f32>(bitcast<f32>(wl(t, i)), bitcast<f32>(wl(t, i + 1u)), bitcast<f32>(wl(t, i + 2u)),
                     bitcast<f32>(wl(t, i + 3u)));
}
