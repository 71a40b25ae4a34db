// dev/bitlinear/tiled_v3.wgsl: EXPERIMENT. v2 with TC = 4 * NQ outputs per invocation (NQ vec4
// accumulators per row) and CODES: weights as codes c (0..2), S = sum c q - sum q (row sums).
override WG: u32 = 64u;
override TR: u32 = 4u;
override NQ: u32 = 1u;          // output quads per invocation (1 or 2)
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

fn i8f(v: u32, b: u32) -> f32 {
    return f32(extractBits(bitcast<i32>(v), 8u * b, 8u));
}

fn wdec(v: vec4<u32>) -> vec4<f32> {
#if CODES
    return vec4<f32>(v & vec4<u32>(3u));
#else
    return vec4<f32>(v & vec4<u32>(3u)) - 1.0;
#endif
}

@compute @workgroup_size(WG)
fn matmul(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let mrows = params[0];
    let m0 = wid.y * TR;
    let n0 = (wid.x * WG + li) * 4u * NQ;
    var acc: array<vec4<f32>, 16>;           // [NQ * r + j]
    for (var i = 0u; i < 16u; i++) { acc[i] = vec4<f32>(0.0); }
    var rs: array<f32, 8>;
    for (var i = 0u; i < 8u; i++) { rs[i] = 0.0; }
    let wrow = N_IN / 64u;
    var nb: array<u32, 8>;
    for (var c = 0u; c < 4u * NQ; c++) { nb[c] = min(n0 + c, N_OUT - 1u) * wrow; }
    let last = max(mrows, 1u) - 1u;
    for (var u = 0u; u < N_IN / 64u; u++) {
        var wq: array<vec4<u32>, 8>;
        for (var c = 0u; c < 4u * NQ; c++) { wq[c] = w0[nb[c] + u]; }
        let ab = (u / 2u) * 8u + (u % 2u);
        for (var p = 0u; p < 4u; p++) {
            let sh = 6u - 2u * p;
            var ar: array<vec4<u32>, 8>;
            for (var r = 0u; r < TR; r++) { ar[r] = q[min(m0 + r, last) * (N_IN / 16u) + ab + 2u * p]; }
            for (var e = 0u; e < 4u; e++) {
                for (var j = 0u; j < NQ; j++) {
                    let wv = vec4<u32>(wq[4u * j][e], wq[4u * j + 1u][e], wq[4u * j + 2u][e], wq[4u * j + 3u][e]) >> vec4<u32>(sh);
                    let f0 = wdec(wv);
                    let f1 = wdec(wv >> vec4<u32>(8u));
                    let f2 = wdec(wv >> vec4<u32>(16u));
                    let f3 = wdec(wv >> vec4<u32>(24u));
                    for (var r = 0u; r < TR; r++) {
                        let av = ar[r][e];
                        let a0 = i8f(av, 0u);
                        let a1 = i8f(av, 1u);
                        let a2 = i8f(av, 2u);
                        let a3 = i8f(av, 3u);
                        acc[NQ * r + j] += f0 * a0 + f1 * a1 + f2 * a2 + f3 * a3;
#if CODES
                        if (j == 0u) { rs[r] += (a0 + a1) + (a2 + a3); }
#endif
                    }
                }
            }
        }
    }
    let ws = bitcast<f32>(w0[N_OUT * wrow].x);
    let stride = select(Y_STRIDE, N_OUT, Y_STRIDE == 0u);
    for (var r = 0u; r < TR; r++) {
        let m = m0 + r;
        if (m < mrows) {
            let f = ws * s[m] * mult[0];
            for (var c = 0u; c < 4u * NQ; c++) {
                if (n0 + c < N_OUT) {
                    let o = m * stride + Y_COL0 + n0 + c;
                    var v = acc[NQ * r + c / 4u][c % 4u];
#if CODES
                    v -= rs[r];
#endif
#if RESIDUAL
                    y[o] = y[o] + v * f;
#else
                    y[o] = v * f;
#endif
                }
            }
        }
    }
}
