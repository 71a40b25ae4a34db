// dev/bitlinear/tiled_v5.wgsl: EXPERIMENT, I2_S A8 only (the register tile written out,
// no loops over planes or words; tiled_bench.py runs it with --v). Register tile as 4x4 matrices: acc[rq][nq] (4 rows x 4
// outputs) += X (4 rows x 4 positions, int8 activations) * W (4 positions x 4 outputs), fma per
// column; rows = RQ quads, outputs = NQ quads; int8 -> f32 by exponent tricks; the 4 lanes
// of a quad each load one plane's 16 activations per row and share them (subgroupShuffle).
// RQ / NQ fold the written-out `if (RQ > 1u) ...` blocks.
override WG: u32 = 64u;
override RQ: u32 = 1u;          // row quads per invocation (1, 2, 4)
override NQ: u32 = 1u;          // output quads per invocation (1, 2)
override N_IN: u32 = 256u;
override N_OUT: u32 = 64u;
override Y_STRIDE: u32 = 0u;
override Y_COL0: u32 = 0u;

@group(0) @binding(0) var<storage, read> params: array<u32>;
@group(0) @binding(1) var<storage, read> q: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> s: array<f32>;
@group(0) @binding(3) var<storage, read> mult: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<storage, read> w0: array<vec4<u32>>;

const MAG: u32 = 0x4B000000u;      // f32 2^23: bitcast(MAG | n) = 2^23 + n for n < 2^23
const M3: u32 = 0x03030303u;

fn tern8(c: u32) -> u32 { return ((c | 0x80808080u) - 0x01010101u) ^ 0x80808080u; }

// byte i of each of the four words (int8, biased by ^ 0x80) -> f32: vector over the four words
fn b8(v: vec4<u32>, i: u32) -> vec4<f32> {
    return bitcast<vec4<f32>>(((v >> vec4<u32>(8u * i)) & vec4<u32>(0xFFu)) | vec4<u32>(MAG)) - 8388736.0;
}

// a + X W: x[r] = act word of row r (positions 0..3 in bytes), w[c] = weight word of output c
// (packed int8 of positions 0..3), both biased (^ 0x80808080). Column c of a: output c over rows.
fn mac(a: mat4x4<f32>, x: vec4<u32>, w: vec4<u32>) -> mat4x4<f32> {
    let x0 = b8(x, 0u); let x1 = b8(x, 1u); let x2 = b8(x, 2u); let x3 = b8(x, 3u);
    let w0 = b8(w, 0u); let w1 = b8(w, 1u); let w2 = b8(w, 2u); let w3 = b8(w, 3u);
    return mat4x4<f32>(
        fma(x3, vec4<f32>(w3.x), fma(x2, vec4<f32>(w2.x), fma(x1, vec4<f32>(w1.x), fma(x0, vec4<f32>(w0.x), a[0])))),
        fma(x3, vec4<f32>(w3.y), fma(x2, vec4<f32>(w2.y), fma(x1, vec4<f32>(w1.y), fma(x0, vec4<f32>(w0.y), a[1])))),
        fma(x3, vec4<f32>(w3.z), fma(x2, vec4<f32>(w2.z), fma(x1, vec4<f32>(w1.z), fma(x0, vec4<f32>(w0.z), a[2])))),
        fma(x3, vec4<f32>(w3.w), fma(x2, vec4<f32>(w2.w), fma(x1, vec4<f32>(w1.w), fma(x0, vec4<f32>(w0.w), a[3])))));
}

// the weight words of 4 outputs at word e, plane shift sh: packed int8 (biased)
fn wq(a: vec4<u32>, b: vec4<u32>, c: vec4<u32>, d: vec4<u32>, e: u32, sh: u32) -> vec4<u32> {
    return vec4<u32>(tern8((a[e] >> sh) & M3), tern8((b[e] >> sh) & M3), tern8((c[e] >> sh) & M3),
                     tern8((d[e] >> sh) & M3)) ^ vec4<u32>(0x80808080u);
}
fn xq(a: vec4<u32>, b: vec4<u32>, c: vec4<u32>, d: vec4<u32>, e: u32) -> vec4<u32> {
    return vec4<u32>(a[e], b[e], c[e], d[e]);
}

@compute @workgroup_size(WG)
fn matmul(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wid: vec3<u32>,
          @builtin(subgroup_invocation_id) sid: u32) {
    let mrows = params[0];
    let m0 = wid.y * (4u * RQ);
    let n0 = (wid.x * WG + li) * (4u * NQ);
    let wrow = N_IN / 64u;
    let last = max(mrows, 1u) - 1u;
    let ql = sid & 3u;
    let R = N_IN / 16u;
    let r0 = min(m0, last) * R; let r1 = min(m0 + 1u, last) * R; let r2 = min(m0 + 2u, last) * R; let r3 = min(m0 + 3u, last) * R;
    let r4 = min(m0 + 4u, last) * R; let r5 = min(m0 + 5u, last) * R; let r6 = min(m0 + 6u, last) * R; let r7 = min(m0 + 7u, last) * R;
    let r8 = min(m0 + 8u, last) * R; let r9 = min(m0 + 9u, last) * R; let r10 = min(m0 + 10u, last) * R; let r11 = min(m0 + 11u, last) * R;
    let r12 = min(m0 + 12u, last) * R; let r13 = min(m0 + 13u, last) * R; let r14 = min(m0 + 14u, last) * R; let r15 = min(m0 + 15u, last) * R;
    let o0 = min(n0, N_OUT - 1u) * wrow; let o1 = min(n0 + 1u, N_OUT - 1u) * wrow;
    let o2 = min(n0 + 2u, N_OUT - 1u) * wrow; let o3 = min(n0 + 3u, N_OUT - 1u) * wrow;
    let o4 = min(n0 + 4u, N_OUT - 1u) * wrow; let o5 = min(n0 + 5u, N_OUT - 1u) * wrow;
    let o6 = min(n0 + 6u, N_OUT - 1u) * wrow; let o7 = min(n0 + 7u, N_OUT - 1u) * wrow;
    var a00 = mat4x4<f32>(); var a01 = mat4x4<f32>(); var a10 = mat4x4<f32>(); var a11 = mat4x4<f32>();
    var a20 = mat4x4<f32>(); var a21 = mat4x4<f32>(); var a30 = mat4x4<f32>(); var a31 = mat4x4<f32>();
    let B = vec4<u32>(0x80808080u);
    for (var u = 0u; u < N_IN / 64u; u++) {
        let w0v = w0[o0 + u]; let w1v = w0[o1 + u]; let w2v = w0[o2 + u]; let w3v = w0[o3 + u];
        var w4v = vec4<u32>(); var w5v = vec4<u32>(); var w6v = vec4<u32>(); var w7v = vec4<u32>();
        if (NQ > 1u) { w4v = w0[o4 + u]; w5v = w0[o5 + u]; w6v = w0[o6 + u]; w7v = w0[o7 + u]; }
        let ab = (u / 2u) * 8u + (u % 2u) + 2u * ql;
        let l0 = q[r0 + ab] ^ B; let l1 = q[r1 + ab] ^ B; let l2 = q[r2 + ab] ^ B; let l3 = q[r3 + ab] ^ B;
        var l4 = B; var l5 = B; var l6 = B; var l7 = B; var l8 = B; var l9 = B; var l10 = B; var l11 = B;
        var l12 = B; var l13 = B; var l14 = B; var l15 = B;
        if (RQ > 1u) { l4 = q[r4 + ab] ^ B; l5 = q[r5 + ab] ^ B; l6 = q[r6 + ab] ^ B; l7 = q[r7 + ab] ^ B; }
        if (RQ > 2u) { l8 = q[r8 + ab] ^ B; l9 = q[r9 + ab] ^ B; l10 = q[r10 + ab] ^ B; l11 = q[r11 + ab] ^ B; }
        if (RQ > 3u) { l12 = q[r12 + ab] ^ B; l13 = q[r13 + ab] ^ B; l14 = q[r14 + ab] ^ B; l15 = q[r15 + ab] ^ B; }
        for (var p = 0u; p < 4u; p++) {
            let sh = 6u - 2u * p;
            let src = (sid & ~3u) | p;
            let x0 = subgroupShuffle(l0, src); let x1 = subgroupShuffle(l1, src);
            let x2 = subgroupShuffle(l2, src); let x3 = subgroupShuffle(l3, src);
            var x4 = B; var x5 = B; var x6 = B; var x7 = B; var x8 = B; var x9 = B; var x10 = B; var x11 = B;
            var x12 = B; var x13 = B; var x14 = B; var x15 = B;
            if (RQ > 1u) { x4 = subgroupShuffle(l4, src); x5 = subgroupShuffle(l5, src); x6 = subgroupShuffle(l6, src); x7 = subgroupShuffle(l7, src); }
            if (RQ > 2u) { x8 = subgroupShuffle(l8, src); x9 = subgroupShuffle(l9, src); x10 = subgroupShuffle(l10, src); x11 = subgroupShuffle(l11, src); }
            if (RQ > 3u) { x12 = subgroupShuffle(l12, src); x13 = subgroupShuffle(l13, src); x14 = subgroupShuffle(l14, src); x15 = subgroupShuffle(l15, src); }
            for (var e = 0u; e < 4u; e++) {
                let v0 = wq(w0v, w1v, w2v, w3v, e, sh);
                let v1 = wq(w4v, w5v, w6v, w7v, e, sh);
                let q0 = xq(x0, x1, x2, x3, e);
                a00 = mac(a00, q0, v0);
                if (NQ > 1u) { a01 = mac(a01, q0, v1); }
                if (RQ > 1u) { let q1 = xq(x4, x5, x6, x7, e); a10 = mac(a10, q1, v0); if (NQ > 1u) { a11 = mac(a11, q1, v1); } }
                if (RQ > 2u) { let q2 = xq(x8, x9, x10, x11, e); a20 = mac(a20, q2, v0); if (NQ > 1u) { a21 = mac(a21, q2, v1); } }
                if (RQ > 3u) { let q3 = xq(x12, x13, x14, x15, e); a30 = mac(a30, q3, v0); if (NQ > 1u) { a31 = mac(a31, q3, v1); } }
            }
        }
    }
    let ws = bitcast<f32>(w0[N_OUT * wrow].x);
    store(m0, n0, a00, ws, mrows);
    if (NQ > 1u) { store(m0, n0 + 4u, a01, ws, mrows); }
    if (RQ > 1u) { store(m0 + 4u, n0, a10, ws, mrows); if (NQ > 1u) { store(m0 + 4u, n0 + 4u, a11, ws, mrows); } }
    if (RQ > 2u) { store(m0 + 8u, n0, a20, ws, mrows); if (NQ > 1u) { store(m0 + 8u, n0 + 4u, a21, ws, mrows); } }
    if (RQ > 3u) { store(m0 + 12u, n0, a30, ws, mrows); if (NQ > 1u) { store(m0 + 12u, n0 + 4u, a31, ws, mrows); } }
}

fn store(m0: u32, n0: u32, a: mat4x4<f32>, ws: f32, mrows: u32) {
    let stride = select(Y_STRIDE, N_OUT, Y_STRIDE == 0u);
    for (var r = 0u; r < 4u; r++) {
        let m = m0 + r;
        if (m < mrows) {
            let f = ws * s[m] * mult[0];
            for (var c = 0u; c < 4u; c++) {
                let n = n0 + c;
                if (n < N_OUT) {
                    let o = m * stride + Y_COL0 + n;
#if RESIDUAL
                    y[o] = y[o] + a[c][r] * f;
#else
                    y[o] = a[c][r] * f;
#endif
                }
            }
        }
    }
}
