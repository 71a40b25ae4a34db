// dev/bitlinear/tiled_v1.wgsl: EXPERIMENT. Register-blocked M>1 matmul, I2_S A8 matmul only.
// Invocation = TR rows x 4 outputs (vec4 accumulators), no workgroup memory, no barriers;
// weights decoded to f32 once per invocation and reused over its TR rows; int8 activations
// decoded to f32 once and reused over the 4 outputs; f32 FMA (exact: integer sums < 2^24).
override WG: u32 = 64u;
override TR: u32 = 4u;
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

@compute @workgroup_size(WG)
fn matmul(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let mrows = params[0];
    let m0 = wid.y * TR;
    let n0 = (wid.x * WG + li) * 4u;
    var acc: array<vec4<f32>, 8>;
    for (var r = 0u; r < 8u; r++) { acc[r] = vec4<f32>(0.0); }
    let wrow = N_IN / 64u;
    let n_a = min(n0, N_OUT - 1u) * wrow;
    let n_b = min(n0 + 1u, N_OUT - 1u) * wrow;
    let n_c = min(n0 + 2u, N_OUT - 1u) * wrow;
    let n_d = min(n0 + 3u, N_OUT - 1u) * wrow;
    let last = max(mrows, 1u) - 1u;
    for (var u = 0u; u < N_IN / 64u; u++) {
        let wa = w0[n_a + u];
        let wb = w0[n_b + u];
        let wc = w0[n_c + u];
        let wd = w0[n_d + u];
        let ab = (u / 2u) * 8u + (u % 2u);         // act vec4 index of plane 0 within the row
        for (var p = 0u; p < 4u; p++) {
            let sh = 6u - 2u * p;
            for (var e = 0u; e < 4u; e++) {
                let wv = vec4<u32>(wa[e], wb[e], wc[e], wd[e]) >> vec4<u32>(sh);
                let f0 = vec4<f32>(wv & vec4<u32>(3u)) - 1.0;
                let f1 = vec4<f32>((wv >> vec4<u32>(8u)) & vec4<u32>(3u)) - 1.0;
                let f2 = vec4<f32>((wv >> vec4<u32>(16u)) & vec4<u32>(3u)) - 1.0;
                let f3 = vec4<f32>((wv >> vec4<u32>(24u)) & vec4<u32>(3u)) - 1.0;
                for (var r = 0u; r < TR; r++) {
                    let m = min(m0 + r, last);
                    let av = q[m * (N_IN / 16u) + ab + 2u * p][e];
                    acc[r] += f0 * i8f(av, 0u) + f1 * i8f(av, 1u) + f2 * i8f(av, 2u) + f3 * i8f(av, 3u);
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
            for (var c = 0u; c < 4u; c++) {
                if (n0 + c < N_OUT) {
                    let o = m * stride + Y_COL0 + n0 + c;
#if RESIDUAL
                    y[o] = y[o] + acc[r][c] * f;
#else
                    y[o] = acc[r][c] * f;
#endif
                }
            }
        }
    }
}
