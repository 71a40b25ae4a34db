// rope.wgsl: NEOX RoPE for prefill rows, and the K/V cache write.
//
// Input: M rows of the fused projection, row m = token at position p = params.pos + m:
//   qkv[m] = q (NH heads) | k (NKV heads) | v (NKV heads), each head HD floats, unroped.
// For every q and k head, pair (i, i + HD/2), i < HD/2 (NEOX rotation):
//   a = p_f32 * freqs[i]                    (one f32 multiply; freqs[i] = f32(base^(-2i/HD)) from
//                                            the host, bitweb.kernels.ops.rope_freqs)
//   x'[i]        = x[i] cos a - x[i + HD/2] sin a
//   x'[i + HD/2] = x[i] sin a + x[i + HD/2] cos a
// (cos a, sin a): sincos4 of common_sincos.wgsl, the same function as attention.wgsl's decode.
// Outputs: q heads roped in place in qkv; k heads roped into the cache, v copied into the cache.
// KV cache layout (one buffer per layer for K, one for V): [NKV][MAX_CTX][HD] f32, i.e.
//   K[g, p, d] at ((g * MAX_CTX + p) * HD + d).
// Rows with p >= MAX_CTX are not written (the engine keeps p0 + M <= MAX_CTX).
//
// Bindings: 0 qkv f32[M][(NH + 2 NKV) HD] (read_write), 1 freqs f32[HD/2], 2 k cache, 3 v cache,
//           4 params (m = M rows, pos = p0 of row 0).
// Thread mapping: one workgroup per row; thread t handles the vec4 pair groups it, it + WG, ...
// of the (NH + NKV) * HD/8 groups, then the NKV * HD/4 vec4 of v. HD % 8 == 0.

override HD: u32 = 128u;
override NH: u32 = 4u;
override NKV: u32 = 1u;
override MAX_CTX: u32 = 256u;
override WG: u32 = 64u;

#include common_params

@group(0) @binding(0) var<storage, read_write> qkv: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> freqs: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> kc: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> vc: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> params: Params;

#include common_sincos

@compute @workgroup_size(WG)
fn rope(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let m = wid.x + wid.y * nwg.x;
    let p = params.pos + m;
    if (m >= params.m || p >= MAX_CTX) { return; }
    let h4 = HD / 4u;
    let h8 = HD / 8u;
    let row = m * (NH + 2u * NKV) * h4;
    let fp = f32(p);
    for (var it = lid; it < (NH + NKV) * h8; it += WG) {
        let h = it / h8;
        let i = it % h8;
        let sc = sincos4(fp * freqs[i]);
        let a = qkv[row + h * h4 + i];
        let b = qkv[row + h * h4 + h8 + i];
        let ra = a * sc[1] - b * sc[0];
        let rb = a * sc[0] + b * sc[1];
        if (h < NH) {
            qkv[row + h * h4 + i] = ra;
            qkv[row + h * h4 + h8 + i] = rb;
        } else {
            let kb = ((h - NH) * MAX_CTX + p) * h4;
            kc[kb + i] = ra;
            kc[kb + h8 + i] = rb;
        }
    }
    for (var it = lid; it < NKV * h4; it += WG) {
        vc[((it / h4) * MAX_CTX + p) * h4 + it % h4] = qkv[row + (NH + NKV) * h4 + it];
    }
}
