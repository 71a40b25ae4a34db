// common_sincos.wgsl (#include common_sincos): RoPE, shared by rope.wgsl and attention.wgsl (decode
// ropes q and k itself), so both rotate by bit for bit the same values: the sin / cos of the angles,
// which elements form a pair (NEOX or NORM), the optional Q / K / V biases and per-head RMSNorm of q
// and k before it.
//
//   sincos4(a) = (sin a, cos a) per component, a >= 0 (RoPE angles p * freqs[i]).
// Cody-Waite reduction by pi/2 in three parts, j = round(a * 2/pi), r = a - j pi/2 in [-pi/4, pi/4],
// then the cephes minimax polynomials for sin r and cos r, and the quadrant j % 4 picks and signs
// them (about 1 ulp for |a| < 8192). The WGSL builtins give no accuracy guarantee outside
// [-pi, pi], so they are not used. bitweb.ref.ops checks it against float64 cos/sin of the same
// f32 angle.
//
// Pairs. vec4 i of freqs (frequencies 4i..4i+3) rotates two vec4 of a head, at the vec4 offsets
// rope_at(i) within the head, i < HD/8:
//   NEOX (default):  (i, i + HD/8): x[4i + c] pairs with x[4i + c + HD/2], angle freqs[4i + c]
//   ROPE_NORM:       (2i, 2i + 1):  ggml mode 0, adjacent pairs (x[2k], x[2k + 1]) with angle freqs[k]
// rope2(a, b, r) returns the rotated (a, b), r = sincos4(p * freqs[i]):
//   x' = x cos - x_pair sin,  x_pair' = x sin + x_pair cos      (per pair, in f32)
// qkv_at(row, i): vec4 i of the fused projection row that starts at vec4 `row`, as the block uses
// it: with QKV_BIAS (Qwen2) plus vec4 i of the bias row qkvb (attn_q.bias | attn_k.bias |
// attn_v.bias, laid out as a qkv row), one f32 add per value; else qkv[row + i] as is. Every read
// of q, k or v below and in rope.wgsl / attention.wgsl goes through it, so the bias comes first.
// QK_NORM: qk_rinv(row, b) = inverseSqrt(sum_d x[b + d]^2 / HD + EPS) over the HD/4 vec4 x =
// qkv_at(row, .) of the head starting at vec4 b, summed serially per vec4 (dot), so rope.wgsl and
// attention.wgsl get the same bits; the head's values are then (x * rinv) * w before the rotation
// (Qwen3's q_norm / k_norm).
// Needs from the including shader: override HD (RoPE / QK_NORM), `qkv: array<vec4<f32>>` (the
// fused projection rows), for QKV_BIAS `qkvb: array<vec4<f32>>`, for QK_NORM override EPS.

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

fn rope_at(i: u32) -> vec2<u32> {
#if ROPE_NORM
    return vec2<u32>(2u * i, 2u * i + 1u);
#else
    return vec2<u32>(i, i + HD / 8u);
#endif
}

fn rope2(a: vec4<f32>, b: vec4<f32>, r: array<vec4<f32>, 2>) -> array<vec4<f32>, 2> {
#if ROPE_NORM
    let s0 = r[0].xxyy;
    let c0 = r[1].xxyy;
    let s1 = r[0].zzww;
    let c1 = r[1].zzww;
    return array<vec4<f32>, 2>(a * c0 + vec4<f32>(-a.y, a.x, -a.w, a.z) * s0,
                               b * c1 + vec4<f32>(-b.y, b.x, -b.w, b.z) * s1);
#else
    return array<vec4<f32>, 2>(a * r[1] - b * r[0], a * r[0] + b * r[1]);
#endif
}

fn qkv_at(row: u32, i: u32) -> vec4<f32> {
#if QKV_BIAS
    return qkv[row + i] + qkvb[i];
#else
    return qkv[row + i];
#endif
}

#if QK_NORM
fn qk_rinv(row: u32, b: u32) -> f32 {
    var ss = 0.0;
    for (var d = 0u; d < HD / 4u; d++) {
        let v = qkv_at(row, b + d);
        ss += dot(v, v);
    }
    return inverseSqrt(ss / f32(HD) + EPS);
}
#endif
