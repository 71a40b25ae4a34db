// dense.wgsl: one generic matmul over the float weight types (F32, F16, BF16), fp32 accumulation.
//
// Maths (one shard = rows [ROW0, ROW0 + N_ROWS) of the full weight, stored as its own buffer):
//   gemv    y[ROW0 + r]              = sum_k W[r, k] * x[k]                r < N_ROWS
//   NORM:   y[ROW0 + r]              = inv * sum_k W[r, k] * (x[k] * g[k]),
//           inv = 1 / sqrt(sum_k x[k]^2 / K + EPS)        (rmsnorm of x fused: the output_norm)
//   LASTROW: x is an [m][K] buffer and row params.m - 1 is used (the last prefill row)
//   matmul  y[i * Y_STRIDE + ROW0 + r] = sum_k W[r, k] * x[i * K + k]    i < params.m
//
// Weight bytes are the GGUF tensor bytes unchanged (rows of K elements, row-major), decoded by the
// format's include (`#include format`: shaders/fmt_<name>.wgsl, its dense.wgsl section): w is
// bound as array<DW> (F32 vec4<f32>; F16 vec4<f16> where the device has shader-f16 (F16), else
// u32 pairs decoded with unpack2x16float, the guaranteed path: SwiftShader has no f16; BF16 u32
// pairs, element 2j the low half of word j), dense4(e4) its values 4 e4 .. + 3 as f32.
// K % 4 == 0; products and sums in f32.
//
// gemv thread mapping: workgroup g (g = wid.x + wid.y * nwg.x, 2-D when > 65535) owns ROWS rows
// r0 = g * ROWS ..; thread t walks k4 = t, t + WG, ... over the K/4 vec4 columns, loads x once
// and accumulates ROWS dot products (x reused across rows). Reduction of the ROWS (+1 for the
// NORM sum of squares) partials across the workgroup:
//   SUBGROUPS  subgroupAdd; each subgroup's first lane stores the sum in its own slot (others 0),
//              then one thread per value adds the WG slots in order (any subgroup size or layout,
//              deterministic)
//   else       shared-memory tree (WG a power of two)
// matmul thread mapping: 16 x 16 threads, output tile 16 rows of x by 16 weight rows, k in steps
// of 16 through workgroup memory; workgroups (ceil(N_ROWS / 16), ceil(m / 16)).
//
// Bindings: gemv   0 w, 1 x, 2 y, [3 g if NORM], [next: params if LASTROW]
//           matmul 0 w, 1 x, 2 y, 3 params
// params (see bitweb/kernels/ops.py): u32 m (rows of x), the rest unused here.

override K: u32 = 256u;          // row length (elements)
override N_ROWS: u32 = 1u;       // rows of W in this shard
override ROW0: u32 = 0u;         // y index of the shard's first row
override Y_STRIDE: u32 = 1u;     // matmul: row stride of y (total output rows of all shards)
override WG: u32 = 64u;          // gemv threads per workgroup (power of two, <= 256)
override ROWS: u32 = 4u;         // gemv rows per workgroup (<= 8)
override EPS: f32 = 1e-5;

#include common_params

// ---- weights: wload(row, k4) = W[row, 4 k4 .. 4 k4 + 3] as f32 -------------------------------
// decoded by the format's include (`#include format`: shaders/fmt_<name>.wgsl, its dense section:
// DW, dense_wl, dense4)
#include format
@group(0) @binding(auto) var<storage, read> w: array<DW>;
fn wl(t: u32, i: u32) -> u32 { return dense_wl(i); }
fn wload(row: u32, k4: u32) -> vec4<f32> { return dense4(row * (K / 4u) + k4); }

@group(0) @binding(auto) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(auto) var<storage, read_write> y: array<f32>;
#if NORM
@group(0) @binding(auto) var<storage, read> g: array<vec4<f32>>;
#endif
#if LASTROW
@group(0) @binding(auto) var<storage, read> params: Params;
#endif
@group(0) @binding(3) var<storage, read> mparams: Params;   // matmul's own 4th (after w, x, y)

// ---- gemv -------------------------------------------------------------------------------
const NV: u32 = 9u;                                 // ROWS + 1 partial sums at most
var<workgroup> red: array<f32, WG * 9u>;           // red[i * WG + j]: partial j of value i

#include common_reduce

// After return, red[i * WG] holds the workgroup total of v[i] for i < n.
fn reduce(lid: u32, v: array<f32, 9>, n: u32, sgi: u32) {
#if SUBGROUPS
    // one subgroup sum per subgroup, at its first lane's own slot (zeros elsewhere): no
    // assumption on the subgroup size or layout, and a fixed summation order (deterministic)
    for (var i = 0u; i < n; i++) {
        let t = subgroupAdd(v[i]);
        red[i * WG + lid] = select(0.0, t, sgi == 0u);
    }
    workgroupBarrier();
    if (lid < n) {
        var t = 0.0;
        for (var j = 0u; j < WG; j++) { t += red[lid * WG + j]; }
        red[lid * WG] = t;
    }
    workgroupBarrier();
#else
    for (var i = 0u; i < n; i++) { red[i * WG + lid] = v[i]; }
    tree_add(lid, lid, WG, n);
#endif
}

@compute @workgroup_size(WG)
fn gemv(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32
#if SUBGROUPS
        , @builtin(subgroup_invocation_id) sgi: u32
#endif
        ) {
#if !SUBGROUPS
    let sgi = 0u;
#endif
    let r0 = (wid.x + wid.y * nwg.x) * ROWS;
    if (r0 >= N_ROWS) { return; }
    let k4n = K / 4u;
#if LASTROW
    let xb = (params.m - 1u) * k4n;
#else
    let xb = 0u;
#endif
    var acc = array<f32, 9>();
    for (var k = lid; k < k4n; k += WG) {
        var xv = x[xb + k];
#if NORM
        acc[ROWS] += dot(xv, xv);
        xv *= g[k];
#endif
        for (var r = 0u; r < ROWS; r++) {
            acc[r] += dot(wload(min(r0 + r, N_ROWS - 1u), k), xv);
        }
    }
#if NORM
    reduce(lid, acc, ROWS + 1u, sgi);
    let scale = 1.0 / sqrt(red[ROWS * WG] / f32(K) + EPS);
#else
    reduce(lid, acc, ROWS, sgi);
    let scale = 1.0;
#endif
    if (lid < ROWS && r0 + lid < N_ROWS) {
        y[ROW0 + r0 + lid] = red[lid * WG] * scale;
    }
}

// ---- matmul (M > 1) -----------------------------------------------------------------------
var<workgroup> xs: array<vec4<f32>, 64>;   // 16 rows of x   x 16 k
var<workgroup> ws: array<vec4<f32>, 64>;   // 16 rows of W   x 16 k

@compute @workgroup_size(16, 16)
fn matmul(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) li: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let m = mparams.m;
    let k4n = K / 4u;
    let i0 = wid.y * 16u;
    let r0 = wid.x * 16u;
    var acc = 0.0;
    for (var k0 = 0u; k0 < k4n; k0 += 4u) {
        if (lid < 64u) {
            let i = i0 + lid / 4u;
            let k = k0 + lid % 4u;
            var v = vec4<f32>(0.0);
            if (i < m && k < k4n) { v = x[i * k4n + k]; }
            xs[lid] = v;
        } else if (lid < 128u) {
            let j = lid - 64u;
            let k = k0 + j % 4u;
            var v = vec4<f32>(0.0);
            if (k < k4n) { v = wload(min(r0 + j / 4u, N_ROWS - 1u), k); }
            ws[j] = v;
        }
        workgroupBarrier();
        for (var j = 0u; j < 4u; j++) { acc += dot(xs[li.y * 4u + j], ws[li.x * 4u + j]); }
        workgroupBarrier();
    }
    let i = i0 + li.y;
    let r = r0 + li.x;
    if (i < m && r < N_ROWS) { y[i * Y_STRIDE + ROW0 + r] = acc; }
}
