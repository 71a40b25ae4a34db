// quant_act.wgsl: the prefill rows of ggml's integer path (q8 on a format with Format.vec_dot):
// each row normed and quantized to q8 blocks exactly as bitlinear.wgsl's Q8B prologue does for
// one token (decode), written as packed int8 rows and per-block scales for the int8 prefill tile
// (bitlinear_tiled.wgsl Q8B) (launch spec: pyapp/bitweb/kernels/bitlinear.py q8_rows; numpy mirror:
// bitweb/ref/bitlinear.py q8_blocks).
//
//   rinv     = 1 / sqrt(sum_i x[m, i]^2 / N + EPS)                 (NORM; sqrt and division)
//   n[i]     = (x[m, i] * rinv) * w[i]   (NORM)   or   x[m, i]
//   per block c of 32: amax = max |n|, d = amax / 127, id = 127 / amax (0 if amax = 0),
//   q[i]     = clamp(round(n[i] * id), -128, 127)       (round half to even: ggml-cpu x86)
//   xs[m, c] = (f16(d), f16(d * f32(sum q)))           (ggml's q8_0 / q8_1 d and s)
// With WG equal to the decode kernel's, the sum of squares (per-thread vec4 stride, then the same
// tree) and so q, d and s are bit for bit those of bitlinear.wgsl Q8B.
//
// Bindings: x f32[M][N], w f32[N] (NORM), q u32[M][N / 4] (value 4j + b of a row in byte b of word
// j, two's complement), xs vec2<f32>[M][N / 32]. One workgroup per row (workgroup id x + y * nx);
// thread t takes vec4 columns t, t + WG, ... for the sum and blocks t, t + WG, ... for the
// quantization. N % 32 == 0.

override N: u32 = 256u;
override WG: u32 = 64u;
override EPS: f32 = 1e-5;

@group(0) @binding(auto) var<storage, read> x: array<vec4<f32>>;
#if NORM
@group(0) @binding(auto) var<storage, read> w: array<vec4<f32>>;
#endif
@group(0) @binding(auto) var<storage, read_write> q: array<u32>;
@group(0) @binding(auto) var<storage, read_write> xs: array<vec2<f32>>;

var<workgroup> red: array<f32, WG>;

// v rounded to the nearest f16 (ties to even) as f32 (bitlinear.wgsl's f16r)
fn f16r(v: f32) -> f32 {
    let e = frexp(v).exp;
    let ue = max(e - 11, -24);
    return ldexp(round(ldexp(v, -ue)), ue);
}

@compute @workgroup_size(WG)
fn quant_act(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) li: u32) {
    let base = (wid.x + wid.y * nwg.x) * (N / 4u);
#if NORM
    var ss = 0.0;
    for (var i = li; i < N / 4u; i += WG) {
        let v = x[base + i];
        ss += dot(v, v);
    }
    red[li] = ss;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (li < s) { red[li] = red[li] + red[li + s]; }
        workgroupBarrier();
    }
    let rinv = 1.0 / sqrt(red[0] / f32(N) + EPS);
#endif
    for (var c = li; c < N / 32u; c += WG) {
        var v: array<vec4<f32>, 8>;
        var am = vec4<f32>(0.0);
        for (var k = 0u; k < 8u; k++) {
#if NORM
            v[k] = (x[base + 8u * c + k] * rinv) * w[8u * c + k];
#else
            v[k] = x[base + 8u * c + k];
#endif
            am = max(am, abs(v[k]));
        }
        let amax = max(max(am.x, am.y), max(am.z, am.w));
        let d = amax / 127.0;
        let id = select(0.0, 127.0 / amax, amax != 0.0);
        var qs = 0;
        for (var k = 0u; k < 8u; k++) {
            let v4 = vec4<i32>(clamp(round(v[k] * id), vec4<f32>(-128.0), vec4<f32>(127.0)));
            q[base + 8u * c + k] = (u32(v4.x) & 0xFFu) | ((u32(v4.y) & 0xFFu) << 8u) | ((u32(v4.z) & 0xFFu) << 16u)
                                   | (u32(v4.w) << 24u);
            qs += v4.x + v4.y + v4.z + v4.w;
        }
        xs[(base >> 3u) + c] = vec2<f32>(f16r(d), f16r(d * f32(qs)));
    }
}
