// rmsnorm.wgsl: RMSNorm of M rows (prefill), optionally quantised to int8 for the A8 kernels.
//
//   inv[m]  = 1 / sqrt(sum_i x[m, i]^2 / N + EPS)
//   y[m, i] = (x[m, i] * inv[m]) * w[i]                       (f32, in this order)
// A8 (per-token absmax int8, as bitnet.cpp / transformers' bitnet integration), in exactly the
// operations and order of bitlinear.wgsl's NORM + A8 prologue (the decode kernels), so a prompt
// gives the same int8 rows whether it is prefilled or decoded token by token:
//   mm[i]   = x[m, i] * w[i]                                   (y = mm * rinv; y is not formed)
//   rinv    = inverseSqrt(sum_i x[m, i]^2 / N + EPS)
//   amax    = max_i |mm[i]|,  a = amax * rinv                  (= max|y|)
//   sq      = 127 / amax  if a >= 1e-5,  else 127e5 * rinv
//   q[m, i] = clamp(round(mm[i] * sq), -128, 127)             (round half to even)
//   s[m]    = max(a, 1e-5) * (1 / 127)                         (inv_s: y ~= q * s, the A8 scale)
// q does not depend on the order of the sum of squares (rinv only picks the branch and scales s).
// With WG equal to the decode kernel's, the sum of squares (per-thread vec4 stride, then the same
// tree) and so s are bit for bit those of bitlinear.wgsl.
// A8 + NO_NORM: the same quantisation of rows that no norm precedes (the input of Wo and Wd in
// blocks without sub-norms), as bitlinear.wgsl A8 without NORM: mm = x, rinv = 1 (no sum of
// squares), a = amax, sq = 127 / amax if amax >= 1e-5 else 127e5, s = max(a, 1e-5) * (1/127).
//   A8 row format: q packed 4 per u32, little endian: q[m, 4j + b] is byte b (bits 8b..8b+7,
//   two's complement) of word m * N/4 + j (pack4xI8); s: one f32 per row.
//
// Bindings: 0 x f32[M][N], 1 w f32[N], 2 y f32[M][N]    |  A8: 2 q u32[M][N/4], 3 s f32[M]
//           A8 + NO_NORM: 0 x, 1 q, 2 s
// Thread mapping: one workgroup per row (workgroup id x + y * nx, M = rows dispatched); thread t
// handles vec4 columns j = t, t + WG, ...; sums of squares and the absmax are reduced with a
// shared-memory tree (WG a power of two). N % 4 == 0.

override N: u32 = 256u;
override WG: u32 = 64u;
override EPS: f32 = 1e-5;

@group(0) @binding(auto) var<storage, read> x: array<vec4<f32>>;
#if !NO_NORM
@group(0) @binding(auto) var<storage, read> w: array<vec4<f32>>;
#endif
#if A8
@group(0) @binding(auto) var<storage, read_write> q: array<u32>;
@group(0) @binding(auto) var<storage, read_write> s: array<f32>;
#else
@group(0) @binding(auto) var<storage, read_write> y: array<vec4<f32>>;
#endif

var<workgroup> red: array<f32, WG>;

#include common_reduce

@compute @workgroup_size(WG)
fn rmsnorm(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let m = wid.x + wid.y * nwg.x;
    let n4 = N / 4u;
    let base = m * n4;
#if NO_NORM
    var am = 0.0;
    for (var j = lid; j < n4; j += WG) {
        let a = abs(x[base + j]);
        am = max(am, max(max(a.x, a.y), max(a.z, a.w)));
    }
    let a = tree_max(lid, am);
    let sq = select(127e5, 127.0 / a, a >= 1e-5);
    for (var j = lid; j < n4; j += WG) {
        q[base + j] = pack4xI8(vec4<i32>(clamp(round(x[base + j] * sq), vec4<f32>(-128.0), vec4<f32>(127.0))));
    }
    if (lid == 0u) { s[m] = max(a, 1e-5) * (1.0 / 127.0); }
#elif A8
    var ss = 0.0;
    var am = 0.0;
    for (var j = lid; j < n4; j += WG) {
        let v = x[base + j];
        ss += dot(v, v);
        let a = abs(v * w[j]);
        am = max(am, max(max(a.x, a.y), max(a.z, a.w)));
    }
    let rinv = inverseSqrt(tree_sum(lid, ss) / f32(N) + EPS);
    let amax = tree_max(lid, am);
    let a = amax * rinv;
    let sq = select(127e5 * rinv, 127.0 / amax, a >= 1e-5);
    for (var j = lid; j < n4; j += WG) {
        let v = x[base + j] * w[j];
        q[base + j] = pack4xI8(vec4<i32>(clamp(round(v * sq), vec4<f32>(-128.0), vec4<f32>(127.0))));
    }
    if (lid == 0u) { s[m] = max(a, 1e-5) * (1.0 / 127.0); }
#else
    var ss = 0.0;
    for (var j = lid; j < n4; j += WG) {
        let v = x[base + j];
        ss += dot(v, v);
    }
    let inv = 1.0 / sqrt(tree_sum(lid, ss) / f32(N) + EPS);
    for (var j = lid; j < n4; j += WG) {
        y[base + j] = (x[base + j] * inv) * w[j];
    }
#endif
}
