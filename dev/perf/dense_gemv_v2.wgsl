// dev/perf/dense_gemv_v2.wgsl: EXPERIMENT, kept for the measurement in dev/perf/README.md (its v1, the
// prototype of shaders/lmhead.wgsl, is in git history at 83db9d1).
// dense_gemv_v2.wgsl (experiment; v1 + int8 unpacked by shifts instead of unpack4xI8): M = 1 GEMV over F16 / Q8_0 rows with the output norm fused,
// shaped for CPU rasterisers (lavapipe, SwiftShader) and still sound on GPUs.
//
// Maths (as shaders/dense.wgsl gemv with NORM):
//   y[ROW0 + r] = inv * sum_k W[r, k] * (x[k] * g[k]),  inv = 1 / sqrt(sum_k x[k]^2 / K + EPS)
// Differences from dense.wgsl:
//   - a workgroup computes RPW rows (not 4): m = x * g is staged once per workgroup in workgroup
//     memory (K <= 4 * XS_MAX) and the sum of squares reduced once, so per-row overhead is small;
//   - a lane group (one subgroup; subgroups are taken to be consecutive local indices) computes
//     RB rows at a time, its lanes striding over the row in 16-byte weight loads (F16: 8 values,
//     one vec4<u32>; Q8_0: one 68-byte block pair per lane, 17 words, 64 values, when K % 64 == 0);
//   - one subgroupAdd per row, no workgroup reduction array.
// Bindings: 0 w, 1 x f32[K], 2 y, 3 g f32[K].
// Switch: W_F16 (F16 rows; else Q8_0 rows), set by bench_dense.py --src.

override K: u32 = 2560u;
override N_ROWS: u32 = 1u;
override ROW0: u32 = 0u;
override WG: u32 = 64u;
override RPW: u32 = 32u;
override RB: u32 = 2u;           // 1, 2 or 4
override EPS: f32 = 1e-5;

const XS_MAX: u32 = 1024u;       // vec4 of m in workgroup memory (K <= 4096)

#if W_F16
@group(0) @binding(0) var<storage, read> w: array<vec4<u32>>;     // 8 halves per element
#else
@group(0) @binding(0) var<storage, read> w: array<u32>;
#endif
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read> g: array<vec4<f32>>;

var<workgroup> xs: array<vec4<f32>, XS_MAX>;
var<workgroup> ss: array<f32, 64>;          // per-subgroup partial sums of x^2 (<= 64 subgroups)

#if W_F16
// dot of the 8 values of row word i (vec4<u32>, 8 halves) with m[8 j .. 8 j + 7]
fn dot8(v: vec4<u32>, j: u32) -> f32 {
    let a = xs[2u * j];
    let b = xs[2u * j + 1u];
    return dot(vec4<f32>(unpack2x16float(v.x), unpack2x16float(v.y)), a)
         + dot(vec4<f32>(unpack2x16float(v.z), unpack2x16float(v.w)), b);
}
#else
fn i8x4(v: u32) -> vec4<f32> {
    let s = bitcast<vec4<i32>>(vec4<u32>(v << 24u, v << 16u, v << 8u, v));
    return vec4<f32>(s >> vec4<u32>(24u));
}
// dot of the Q8_0 block pair p of row r (68 bytes = 17 words, 4-byte aligned since 68 % 4 == 0)
fn dotq(r: u32, p: u32) -> f32 {
    let o = (r * (K / 64u) + p) * 17u;
    let j = p * 16u;                                      // vec4 index of the pair's first value
    let w0 = w[o];
    let d0 = unpack2x16float(w0).x;
    var s0 = 0.0;
    var prev = w0 >> 16u;                                 // q bytes 0, 1 in the low half
    for (var i = 1u; i < 9u; i++) {
        let wi = w[o + i];
        let word = prev | (wi << 16u);                    // q bytes 4(i-1) .. 4(i-1)+3
        prev = wi >> 16u;
        s0 += dot(i8x4(word), xs[j + i - 1u]);
    }
    // word 8: low half = q0[30..31] (already in the last `word`), high half = d1
    let d1 = unpack2x16float(w[o + 8u] >> 16u).x;
    var s1 = 0.0;
    for (var i = 0u; i < 8u; i++) {
        s1 += dot(i8x4(w[o + 9u + i]), xs[j + 8u + i]);
    }
    return d0 * s0 + d1 * s1;
}
#endif

@compute @workgroup_size(WG)
fn gemv(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32, @builtin(subgroup_invocation_id) sgi: u32,
        @builtin(subgroup_size) sgs: u32) {
    let k4n = K / 4u;
    // stage m = x * g, sum of squares
    var sq = 0.0;
    for (var k = lid; k < k4n; k += WG) {
        let xv = x[k];
        sq += dot(xv, xv);
        xs[k] = xv * g[k];
    }
    sq = subgroupAdd(sq);
    let sg = lid / sgs;
    let nsg = WG / sgs;
    if (sgi == 0u) { ss[sg] = sq; }
    workgroupBarrier();
    var tot = 0.0;
    for (var i = 0u; i < nsg; i++) { tot += ss[i]; }
    let inv = 1.0 / sqrt(tot / f32(K) + EPS);

    let r0 = (wid.x + wid.y * nwg.x) * RPW;
#if W_F16
    let n = K / 8u;                    // 16-byte words per row
#else
    let n = K / 64u;                   // block pairs per row
#endif
    for (var rr = sg * RB; rr < RPW; rr += nsg * RB) {
        var acc = vec4<f32>(0.0);
        for (var i = sgi; i < n; i += sgs) {
            for (var b = 0u; b < RB; b++) {
                let r = min(r0 + rr + b, N_ROWS - 1u);
#if W_F16
                acc[b] += dot8(w[r * n + i], i);
#else
                acc[b] += dotq(r, i);
#endif
            }
        }
        for (var b = 0u; b < RB; b++) {
            let t = subgroupAdd(acc[b]);
            let r = r0 + rr + b;
            if (sgi == 0u && r < N_ROWS) { y[ROW0 + r] = t * inv; }
        }
    }
}
