// common_sincos.wgsl (#include common_sincos): sin and cos of RoPE angles, shared by rope.wgsl and
// attention.wgsl (decode ropes q and k itself), so both rotate by bit for bit the same values.
//
//   sincos4(a) = (sin a, cos a) per component, a >= 0 (RoPE angles p * freqs[i]).
// Cody-Waite reduction by pi/2 in three parts, j = round(a * 2/pi), r = a - j pi/2 in [-pi/4, pi/4],
// then the cephes minimax polynomials for sin r and cos r, and the quadrant j % 4 picks and signs
// them (about 1 ulp for |a| < 8192). The WGSL builtins give no accuracy guarantee outside
// [-pi, pi], so they are not used. bitweb.ref.ops checks it against float64 cos/sin of the same
// f32 angle.
// Needs nothing from the including shader.

fn sincos4(a: vec4<f32>) -> array<vec4<f32>, 2> {
    let j = round(a * 0.63661977236758134);
    let r = ((a - j * 1.5703125) - j * 4.837512969970703125e-4) - j * 7.54978995489188216e-8;
    let z = r * r;
    let s = ((-1.9515295891e-4 * z + 8.3321608736e-3) * z - 1.6666654611e-1) * z * r + r;
    let c = ((2.443315711809948e-5 * z - 1.388731625493765e-3) * z + 4.166664568298827e-2) * z * z - 0.5 * z + 1.0;
    let q = vec4<u32>(j) & vec4<u32>(3u);
    let swap = (q & vec4<u32>(1u)) == vec4<u32>(1u);
    let sn = select(s, c, swap);
    let cs = select(c, s, swap);
    let sneg = (q == vec4<u32>(2u)) | (q == vec4<u32>(3u));
    let cneg = (q == vec4<u32>(1u)) | (q == vec4<u32>(2u));
    return array<vec4<f32>, 2>(select(sn, -sn, sneg), select(cs, -cs, cneg));
}
