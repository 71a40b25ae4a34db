// dev/bitlinear/tiled_v4.wgsl: EXPERIMENT. Register tile as 4x4 matrices: acc[rq][nq] (4 rows x 4
// outputs) += X (4 rows x 4 positions, int8 activations) * W (4 positions x 4 outputs), fma per
// column; rows = RQ quads, outputs = NQ quads; int8 -> f32 by exponent tricks; with QUAD the 4 lanes
// of a quad each load one plane's 16 activations per row and share them (subgroupShuffle).
// LOOPS: tile loops over rq / nq with array accumulators; else written out (if (RQ > 1u) ...).
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

fn comp(v: vec4<u32>, e: u32) -> u32 { return v[e]; }

@compute @workgroup_size(WG)
fn matmul(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wid: vec3<u32>,
          @builtin(subgroup_invocation_id) sid: u32) {
    let mrows = params[0];
    let m0 = wid.y * (4u * RQ);
    let n0 = (wid.x * WG + li) * (4u * NQ);
    let wrow = N_IN / 64u;
    let last = max(mrows, 1u) - 1u;
    let ql = sid & 3u;
    var acc: array<mat4x4<f32>, 8>;                 // [rq * NQ + nq]
    for (var i = 0u; i < 8u; i++) { acc[i] = mat4x4<f32>(); }
    var rb: array<u32, 16>;                         // act vec4 index of row 4 rq + r
    for (var r = 0u; r < 16u; r++) { rb[r] = min(m0 + r, last) * (N_IN / 16u); }
    var nb: array<u32, 8>;
    for (var c = 0u; c < 8u; c++) { nb[c] = min(n0 + c, N_OUT - 1u) * wrow; }
    for (var u = 0u; u < N_IN / 64u; u++) {
        var wt: array<vec4<u32>, 8>;
        for (var c = 0u; c < 4u * NQ; c++) { wt[c] = w0[nb[c] + u]; }
        let ab = (u / 2u) * 8u + (u % 2u);
        var la: array<vec4<u32>, 16>;              // this lane's plane, row r
#if QUAD
        for (var r = 0u; r < 4u * RQ; r++) { la[r] = q[rb[r] + ab + 2u * ql] ^ vec4<u32>(0x80808080u); }
#endif
        for (var p = 0u; p < 4u; p++) {
            let sh = 6u - 2u * p;
            var xa: array<vec4<u32>, 16>;
            for (var r = 0u; r < 4u * RQ; r++) {
#if QUAD
                xa[r] = subgroupShuffle(la[r], (sid & ~3u) | p);
#else
                xa[r] = q[rb[r] + ab + 2u * p] ^ vec4<u32>(0x80808080u);
#endif
            }
            for (var e = 0u; e < 4u; e++) {
                for (var j = 0u; j < NQ; j++) {
                    let wv = vec4<u32>(tern8((wt[4u * j][e] >> sh) & M3), tern8((wt[4u * j + 1u][e] >> sh) & M3),
                                       tern8((wt[4u * j + 2u][e] >> sh) & M3), tern8((wt[4u * j + 3u][e] >> sh) & M3)) ^ vec4<u32>(0x80808080u);
                    for (var i = 0u; i < RQ; i++) {
                        let xv = vec4<u32>(xa[4u * i][e], xa[4u * i + 1u][e], xa[4u * i + 2u][e], xa[4u * i + 3u][e]);
                        acc[i * NQ + j] = mac(acc[i * NQ + j], xv, wv);
                    }
                }
            }
        }
    }
    let ws = bitcast<f32>(w0[N_OUT * wrow].x);
    let stride = select(Y_STRIDE, N_OUT, Y_STRIDE == 0u);
    for (var i = 0u; i < RQ; i++) {
        for (var r = 0u; r < 4u; r++) {
            let m = m0 + 4u * i + r;
            if (m < mrows) {
                let f = ws * s[m] * mult[0];
                for (var j = 0u; j < NQ; j++) {
                    for (var c = 0u; c < 4u; c++) {
                        let n = n0 + 4u * j + c;
                        if (n < N_OUT) {
                            let o = m * stride + Y_COL0 + n;
#if RESIDUAL
                            y[o] = y[o] + acc[i * NQ + j][c][r] * f;
#else
                            y[o] = acc[i * NQ + j][c][r] * f;
#endif
                        }
                    }
                }
            }
        }
    }
}
