// lmhead.wgsl: the LM head GEMV, y = W rmsnorm(x) for one token (M = 1), float, Q8_0 or packed
// (Q1_0, Q2_0 ...) rows (launch spec: pyapp/bitweb/kernels/lmhead.py; numpy mirror: bitweb/ref/lmhead.py).
//
// Maths (one shard = rows [row0, row0 + n_rows) of the head, in its own buffer):
//   m[k] = x[k] * g[k],  inv = 1 / sqrt(sum_k x[k]^2 / K + EPS)           (output_norm fused)
//   y[row0 + r] = inv * sum_k W[r, k] m[k]                                  f32 accumulation
// PACKED (a packed table format) follows shaders/bitlinear.wgsl gemv NORM instead, so a
// packed head computes what a block linear does (numpy mirror: bitweb.ref.bitlinear.gemv):
//   rinv = inverseSqrt(sum_k x[k]^2 / K + EPS)
//   f32:  y = S * rinv,   S = sum_b d[b] sum_{k in b} w[r, k] m[k]
//   A8:   amax = max|m|, a = amax * rinv, sq = 127 / amax (a >= 1e-5, else 127e5 * rinv),
//         q = clamp(round(m * sq), -128, 127) (packed int8 in workgroup memory, in place of m),
//         y = S * inv_s,  S = sum_b d[b] I_b (exact int32 I_b),  inv_s = max(a, 1e-5) / 127
// Same maths as shaders/dense.wgsl `gemv` with NORM; the thread mapping is what differs: dense
// gives a workgroup 4 rows, so on CPU rasterisers (lavapipe, SwiftShader) the per-workgroup work
// (norm, reduction, barriers) costs more than the rows. Here a workgroup computes RPW rows:
//   1. its WG threads stage m in workgroup memory (K / 4 vec4s) and reduce sum x^2 once;
//   2. lane groups of LN lanes (one subgroup with SUBGROUPS, the subgroups taken to be consecutive
//      local indices; else LANES threads) take RB rows at a time, the lanes striding over the
//      row in units: one 16-byte load (F32: 4 values, F16 / BF16: 8 values, vec4<u32>) or, for
//      Q8_0, one 68-byte pair of blocks (17 words, 64 values; K % 64 == 0), consecutive lanes on
//      consecutive units;
//   3. subgroupAdd (or a shared-memory tree over LANES) per row; lane 0 writes y.
// The row loop count is the same for every thread (rows past the shard redo its last row, results
// dropped), so subgroup operations and barriers stay in uniform control flow.
//
// Weights: the GGUF bytes of the rows unchanged, row-major, decoded by the format's include
// (`#include format`: shaders/fmt_<name>.wgsl):
//   float    its lmhead.wgsl section: w bound as array<HW> (F32 vec4<f32>, F16 / BF16 vec4<u32>: 4 or
//            8 values per 16-byte load; Q8_0 u32 words, a unit is a pair of 34-byte blocks), UNIT
//            values per unit, head_unit(r, u) (XDIRECT: unit_m, unit_x)
//   PACKED   the packed-format interface (common_codes.wgsl): w bound as array<WT>, a unit is UW
//            code words (BLK / UPK values), read through common_packed.wgsl as bitlinear.wgsl does.
// LASTROW: x is f32[m][K] and row params.m - 1 is used (the last prompt row of a prefill), with
// params the 32-byte block of bitweb.kernels.ops (only m is read).
// Shard: n_rows and row0 are read at run time from `shard` (kernels/lmhead.py shard_bytes), so
// the shards of a head, and heads of any row count, share one pipeline (neither bounds an inner
// loop: the unit loop runs to K, the row loop to RPW).
// Bindings: 0 w (shard), 1 x f32[K] (LASTROW: [m][K]), 2 y f32[>= row0 + n_rows], 3 g f32[K]
// (output_norm), 4 shard u32[4] (n_rows, row0, 0, 0), 5 params (LASTROW).

override K: u32 = 256u;          // row length
override WG: u32 = 64u;          // threads per workgroup (power of two)
override RPW: u32 = 64u;         // rows per workgroup
override RB: u32 = 4u;           // rows per lane group at once (1..4)
override LANES: u32 = 16u;       // lanes per group without subgroups (power of two, divides WG)
override EPS: f32 = 1e-5;

// m (or its int8 q) lives in workgroup memory sized by K (K / 4 vec4s: K <= 4096 keeps it within
// 16 KiB). Sized by K, not by the largest K: SwiftShader's compile time grows with the size of a
// workgroup array (an LM head with K = 256 compiled in 3.6 s with 1024 vec4s, 0.2 s with 64).

#include format
#if PACKED
@group(0) @binding(auto) var<storage, read> w: array<WT>;
fn wv(t: u32, i: u32) -> WT { return w[i]; }
fn wl(t: u32, i: u32) -> u32 { return fmt_wt(w[i / WPT], i % WPT); }
const UNIT: u32 = BLK / UPK;     // values per unit: UW code words (common_packed)
const_assert ZROW == 0.0;        // (a format whose A8 rows subtract a zero code, I2_S, is no table)
#else
@group(0) @binding(auto) var<storage, read> w: array<HW>;
fn wl(t: u32, i: u32) -> u32 { return head_wl(i); }
#endif
@group(0) @binding(auto) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(auto) var<storage, read_write> y: array<f32>;
@group(0) @binding(auto) var<storage, read> g: array<vec4<f32>>;
struct Shard { n_rows: u32, row0: u32, r0: u32, r1: u32 }   // rows in this shard, y index of its first row
@group(0) @binding(auto) var<storage, read> shard: Shard;

#include common_params
#if LASTROW
@group(0) @binding(auto) var<storage, read> params: Params;
#endif

#if A8
var<workgroup> qa: array<u32, K / 4u>;                 // q as packed int8 (PACKED A8): value 4k + i in byte i of qa[k]
var<workgroup> pmax: array<f32, WG>;                 // max |m| partials
#elif !XDIRECT
var<workgroup> xs: array<vec4<f32>, K / 4u>;
#endif
var<workgroup> part: array<f32, WG>;                 // sum of squares partials; !SUBGROUPS: row sums
#if !SUBGROUPS
var<workgroup> red: array<f32, WG * 4u>;
#include common_reduce
#endif


#if PACKED
#include common_packed
fn act4(i: u32) -> PV {                   // activation word i (common_packed)
#if A8
    return qa[i];
#else
    return xs[i];
#endif
}
#endif

// vec4 k of m (XDIRECT: x * g read where it is used, not staged: no workgroup array, which
// SwiftShader compiles in time that grows with its size; float formats only)
fn m4(xb: u32, k: u32) -> vec4<f32> {
#if XDIRECT
    return x[xb + k] * g[k];
#elif A8
    return vec4<f32>();
#else
    return xs[k];
#endif
}

#if !XDIRECT
// sum over the UNIT values of unit u of row r of W[r, k] m[k] (float formats: the include's head_unit)
fn unit(r: u32, u: u32) -> f32 {
#if PACKED
    return fmt_unit(0u, r * (K / BLK) + u / UPK, u % UPK, unit_acts(u));
#else
    return head_unit(r, u);
#endif
}
#endif

fn body(lid: u32, wg_index: u32, lane: u32, ln: u32) {
    // 1. m = x * g in workgroup memory; sum of squares of x
    let k4n = K / 4u;
#if LASTROW
    let xb = (params.m - 1u) * k4n;
#else
    let xb = 0u;
#endif
    var sq = 0.0;
#if A8
    var am = 0.0;
#endif
    for (var k = lid; k < k4n; k += WG) {
        let xv = x[xb + k];
        sq += dot(xv, xv);
#if A8
        let a = abs(xv * g[k]);
        am = max(am, max(max(a.x, a.y), max(a.z, a.w)));
#elif !XDIRECT
        xs[k] = xv * g[k];
#endif
    }
    part[lid] = sq;
#if A8
    pmax[lid] = am;
#endif
    workgroupBarrier();
    var tot = 0.0;
    for (var i = 0u; i < WG; i++) { tot += part[i]; }      // same order in every thread
#if PACKED
    let rinv = inverseSqrt(tot / f32(K) + EPS);
#if A8
    // 1b. q = round(m * sq) as packed int8 (bitlinear.wgsl's A8 prologue)
    var amax = 0.0;
    for (var i = 0u; i < WG; i++) { amax = max(amax, pmax[i]); }
    let av = amax * rinv;
    let sqs = select(127e5 * rinv, 127.0 / amax, av >= 1e-5);
    for (var k = lid; k < k4n; k += WG) {
        let q = vec4<i32>(clamp(round(x[xb + k] * g[k] * sqs), vec4<f32>(-128.0), vec4<f32>(127.0)));
        qa[k] = (u32(q.x) & 0xFFu) | ((u32(q.y) & 0xFFu) << 8u) | ((u32(q.z) & 0xFFu) << 16u) | (u32(q.w) << 24u);
    }
    workgroupBarrier();
    let inv = max(av, 1e-5) * (1.0 / 127.0);
#else
    let inv = rinv;
#endif
#else
    let inv = 1.0 / sqrt(tot / f32(K) + EPS);
#endif

    // 2. rows
    let ng = WG / ln;
    let grp = lid / ln;
    let units = K / UNIT;
    let first = wg_index * RPW;
    let last = min(first + RPW, shard.n_rows) - 1u;
    let row0 = shard.row0;
    let steps = (RPW + ng * RB - 1u) / (ng * RB);
    for (var it = 0u; it < steps; it++) {
        let g0 = first + (it * ng + grp) * RB;
        let r0 = min(g0, last);
        let r1 = min(g0 + 1u, last);
        let r2 = min(g0 + 2u, last);
        let r3 = min(g0 + 3u, last);
        var a = vec4<f32>(0.0);
        for (var u = lane; u < units; u += ln) {
#if XDIRECT
            let m = unit_m(xb, u);
            a.x += unit_x(r0, u, m);
            if (RB > 1u) { a.y += unit_x(r1, u, m); }
            if (RB > 2u) { a.z += unit_x(r2, u, m); }
            if (RB > 3u) { a.w += unit_x(r3, u, m); }
#else
            a.x += unit(r0, u);
            if (RB > 1u) { a.y += unit(r1, u); }
            if (RB > 2u) { a.z += unit(r2, u); }
            if (RB > 3u) { a.w += unit(r3, u); }
#endif
        }
        // 3. reduce over the lane group
#if SUBGROUPS
        a = subgroupAdd(a);
#else
        for (var i = 0u; i < 4u; i++) { red[i * WG + lid] = a[i]; }
        tree_add(lid, lane, LANES, 4u);
        a = vec4<f32>(red[lid], red[WG + lid], red[2u * WG + lid], red[3u * WG + lid]);
        workgroupBarrier();
#endif
        if (lane == 0u) {
            for (var i = 0u; i < RB; i++) {
                if (g0 + i <= last) { y[row0 + g0 + i] = a[i] * inv; }
            }
        }
    }
}

#if SUBGROUPS
@compute @workgroup_size(WG)
fn gemv(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>, @builtin(subgroup_invocation_id) sl: u32,
        @builtin(subgroup_size) sg: u32) {
    body(lid, wid.x + wid.y * nwg.x, sl, min(sg, WG));
}
#else
@compute @workgroup_size(WG)
fn gemv(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    body(lid, wid.x + wid.y * nwg.x, lid % LANES, LANES);
}
#endif
