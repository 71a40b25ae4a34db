// dev/bitlinear/tiled_v0.wgsl: EXPERIMENT (the first M>1 kernel: weights decoded per thread), kept for the
// measurement in dev/bitlinear/README.md; the engine runs shaders/bitlinear_tiled.wgsl. A8 output uses the
// old scale convention (P = S * ws * mult / s; now S * (ws * inv_s * mult)): equal outputs only at s = 1.
// bitlinear_tiled.wgsl: M>1 (prefill) ternary/binary matmul over packed GGUF weights
// (launch specs: pyapp/bitweb/kernels/bitlinear_tiled.py; numpy mirror: bitweb/ref/bitlinear_tiled.py).
//
// Entry points (one per pipeline, chosen by define):
//   matmul   (GATE_UP off)  Y[m, n] (+)= P[m, n]
//   gate_up  (GATE_UP on)   Y[m, n]  = act(Pg[m, n]) * Pu[m, n]       act: relu(.)^2, or silu (ACT_SILU)
// for rows m < M = params[0] (varies per call; the dispatch covers up to M_max rows) and n < N_OUT.
//
// Maths (inputs already normed; W: N_OUT rows of N_IN, blocks b of the format, d[n, b] block scales):
//   f32 activations:  S[m, n] = sum_b d[n, b] * sum_{j in b} w[n, j] * x[m, j]       f32 accumulation
//                     P = S * (ws * mult)                                   (ws: I2_S tensor scale)
//   A8:               S[m, n] = sum_b d[n, b] * I[m, n, b],  I = sum_{j in b} w[n, j] * q[m, j]  (int32)
//                     P = S * (ws * mult) / s[m]
//   RESIDUAL: Y = Y + P (in place). Missing terms read as 1 (ws for block formats, d for I2_S).
// A8 input (written by ops.rmsnorm(a8=True)): q u32[M][N_IN / 4], element 4j + b of a row in byte b
// of word j (two's complement int8); s f32[M] with q = clamp(round(x * s), -128, 127), x ~= q / s.
//
// Weights: the raw GGUF tensor bytes as array<u32>; layouts as in bitlinear.wgsl (I2_S 128 / 32
// bytes + f32 scale at byte N_OUT * N_IN / 4; TQ2_0 256 / 66; TQ1_0 256 / 54; Q1_0 128 / 18, blocks
// 2-byte aligned).
//
// Buffers (binding i = i-th that exists):
//   params  u32[8]              word 0: M (the ops params block)
//   x       f32[M][N_IN]        (f32 mode)   or   q u32[M][N_IN / 4], s f32[M]   (A8)
//   mult    f32[1] / f32[2]     output multiplier(s) (gate_up: gate, up)
//   y       f32[M][N_OUT]       output; with RESIDUAL it holds the residual on entry
//                               (Y_STRIDE / Y_COL0: y[m * Y_STRIDE + Y_COL0 + n], a column slice)
//   w / gate, up                weights
//
// Threads: a workgroup of WG threads computes a tile of TM rows x WG outputs; thread i owns output
// n = WG * wid.x + i and TM accumulators. K advances one chunk of KS values at a time (I2_S, Q1_0:
// a 128 block; TQ2_0: a 128 half block, self-contained; TQ1_0: a 256 block): the workgroup stages
// the TM x KS activations in workgroup memory, each thread decodes its row's chunk once into
// packed int8 words (registers) and reuses it for the TM rows (the weight read is shared by TM rows).

override WG: u32 = 64u;        // outputs per workgroup (threads)
override TM: u32 = 8u;         // rows per workgroup, <= 16
override N_IN: u32 = 256u;
override N_OUT: u32 = 64u;
override Y_STRIDE: u32 = 0u;   // row stride of y in floats (0: N_OUT); the engine writes q | k | v
override Y_COL0: u32 = 0u;     // column of y where output n = 0 goes    into one [M][q+2kv] buffer

const MAXTM: u32 = 16u;
const M3: u32 = 0x03030303u;

#if FMT_I2S
const BLK: u32 = 128u;
const BBYTES: u32 = 32u;
const KS: u32 = 128u;
#elif FMT_TQ2
const BLK: u32 = 256u;
const BBYTES: u32 = 66u;
const KS: u32 = 128u;
#elif FMT_TQ1
const BLK: u32 = 256u;
const BBYTES: u32 = 54u;
const KS: u32 = 256u;
#elif FMT_Q1
const BLK: u32 = 128u;
const BBYTES: u32 = 18u;
const KS: u32 = 128u;
#endif
const KW: u32 = KS / 4u;       // packed words per chunk row

@group(0) @binding(0) var<storage, read> params: array<u32>;
#if A8
@group(0) @binding(1) var<storage, read> q: array<u32>;
@group(0) @binding(2) var<storage, read> s: array<f32>;
@group(0) @binding(3) var<storage, read> mult: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<storage, read> w0: array<u32>;
#if GATE_UP
@group(0) @binding(6) var<storage, read> w1: array<u32>;
#endif
var<workgroup> xt: array<u32, TM * KW>;
#else
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> mult: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read> w0: array<u32>;
#if GATE_UP
@group(0) @binding(5) var<storage, read> w1: array<u32>;
#endif
var<workgroup> xt: array<vec4<f32>, TM * KW>;
#endif

fn wl(t: u32, i: u32) -> u32 {
#if GATE_UP
    if (t == 1u) { return w1[i]; }
#endif
    return w0[i];
}

fn ldb(t: u32, b: u32) -> u32 {
    let lo = wl(t, b >> 2u);
    if ((b & 2u) == 0u) { return lo; }
    return (lo >> 16u) | (wl(t, (b >> 2u) + 1u) << 16u);
}

fn ldh(t: u32, b: u32) -> f32 {
    return unpack2x16float(wl(t, b >> 2u) >> ((b & 2u) * 8u)).x;
}

fn dot4(a: u32, b: u32) -> i32 {
#if DOT4
    return dot4I8Packed(a, b);
#else
    let ia = bitcast<i32>(a);
    let ib = bitcast<i32>(b);
    return extractBits(ia, 0u, 8u) * extractBits(ib, 0u, 8u) + extractBits(ia, 8u, 8u) * extractBits(ib, 8u, 8u)
         + extractBits(ia, 16u, 8u) * extractBits(ib, 16u, 8u) + extractBits(ia, 24u, 8u) * extractBits(ib, 24u, 8u);
#endif
}

fn i8x4(v: u32) -> vec4<f32> {
    let i = bitcast<i32>(v);
    return vec4<f32>(f32(extractBits(i, 0u, 8u)), f32(extractBits(i, 8u, 8u)),
                     f32(extractBits(i, 16u, 8u)), f32(extractBits(i, 24u, 8u)));
}

fn tern8(c: u32) -> u32 {
    return ((c | 0x80808080u) - 0x01010101u) ^ 0x80808080u;
}

struct Chunk {
    w: array<u32, KW>,   // packed int8 weights of the chunk, value 4i + b in byte b of w[i]
    d: f32,              // its block scale
}

// Decode chunk c of row n of tensor t.
fn decode(t: u32, n: u32, c: u32) -> Chunk {
    var ch: Chunk;
#if FMT_I2S
    let base = n * (N_IN / 16u) + c * 8u;
    for (var k = 0u; k < 8u; k++) {
        let w = wl(t, base + k);
        for (var i = 0u; i < 4u; i++) { ch.w[8u * i + k] = tern8((w >> (6u - 2u * i)) & M3); }
    }
    ch.d = 1.0;
#elif FMT_TQ2
    let bb = (n * (N_IN / BLK) + c / 2u) * BBYTES;
    for (var k = 0u; k < 8u; k++) {
        let w = ldb(t, bb + 32u * (c % 2u) + 4u * k);
        for (var l = 0u; l < 4u; l++) { ch.w[8u * l + k] = tern8((w >> (2u * l)) & M3); }
    }
    ch.d = ldh(t, bb + 64u);
#elif FMT_TQ1
    let bb = (n * (N_IN / BLK) + c) * BBYTES;
    for (var k = 0u; k < 13u; k++) {
        let w = ldb(t, bb + 4u * k);
        var lo = w & 0x00FF00FFu;
        var hi = (w >> 8u) & 0x00FF00FFu;
        for (var j = 0u; j < 5u; j++) {
            let l3 = lo * 3u;
            let h3 = hi * 3u;
            let tr = tern8(((l3 >> 8u) & 0x00030003u) | (h3 & 0x03000300u));
            lo = l3 & 0x00FF00FFu;
            hi = h3 & 0x00FF00FFu;
            if (k < 8u) { ch.w[k + 8u * j] = tr; }
            else if (k < 12u) { ch.w[32u + k + 4u * j] = tr; }     // (160 + 16j + 4(k-8)) / 4
            else if (j < 4u) { ch.w[60u + j] = tr; }
        }
    }
    ch.d = ldh(t, bb + 52u);
#elif FMT_Q1
    let bb = (n * (N_IN / BLK) + c) * BBYTES;
    for (var k = 0u; k < 4u; k++) {
        let w = ldb(t, bb + 2u + 4u * k);
        for (var i = 0u; i < 8u; i++) {
            let b01 = (((w >> (4u * i)) & 0xFu) * 0x00204081u) & 0x01010101u;
            ch.w[8u * k + i] = 0xFFFFFFFFu ^ (b01 * 0xFEu);
        }
    }
    ch.d = ldh(t, bb);
#endif
    return ch;
}

#if GATE_UP
const NACC: u32 = 2u;
#else
const NACC: u32 = 1u;
#endif

fn body(li: u32, wid: vec3<u32>) {
    let mrows = params[0];
    let m0 = wid.y * TM;
    let n = wid.x * WG + li;
    let nok = n < N_OUT;
    let nr = n % N_OUT;              // a valid row to decode for threads past N_OUT (result unused)
    let mt = min(TM, max(mrows, m0) - m0);
    var acc: array<f32, 32>;         // [NACC * m + a]
    for (var i = 0u; i < 32u; i++) { acc[i] = 0.0; }
    for (var c = 0u; c < N_IN / KS; c++) {
        // stage the TM x KS activations of this chunk
        for (var i = li; i < TM * KW; i += WG) {
            let m = i / KW;
            let src = (m0 + m) * (N_IN / 4u) + c * KW + i % KW;
#if A8
            xt[i] = select(0u, q[src], m < mt);
#else
            xt[i] = select(vec4<f32>(0.0), x[src], m < mt);
#endif
        }
        workgroupBarrier();
        for (var a = 0u; a < NACC; a++) {
            let ch = decode(a, nr, c);
            for (var m = 0u; m < mt; m++) {
#if A8
                var is = 0;
                for (var k = 0u; k < KW; k++) { is += dot4(ch.w[k], xt[m * KW + k]); }
                acc[NACC * m + a] += f32(is) * ch.d;
#else
                var fs = 0.0;
                for (var k = 0u; k < KW; k++) { fs += dot(i8x4(ch.w[k]), xt[m * KW + k]); }
                acc[NACC * m + a] += fs * ch.d;
#endif
            }
        }
        workgroupBarrier();
    }
    if (!nok) { return; }
#if FMT_I2S
    let f0 = bitcast<f32>(wl(0u, N_OUT * (N_IN / 16u))) * mult[0];
#if GATE_UP
    let f1 = bitcast<f32>(wl(1u, N_OUT * (N_IN / 16u))) * mult[1];
#endif
#else
    let f0 = mult[0];
#if GATE_UP
    let f1 = mult[1];
#endif
#endif
    for (var m = 0u; m < mt; m++) {
        let o = (m0 + m) * select(Y_STRIDE, N_OUT, Y_STRIDE == 0u) + Y_COL0 + n;
#if A8
        let sm = s[m0 + m];
#if GATE_UP
        let pg = acc[2u * m] * f0 / sm;
        let pu = acc[2u * m + 1u] * f1 / sm;
#else
        let p = acc[m] * f0 / sm;
#endif
#else
#if GATE_UP
        let pg = acc[2u * m] * f0;
        let pu = acc[2u * m + 1u] * f1;
#else
        let p = acc[m] * f0;
#endif
#endif
#if GATE_UP
#if ACT_SILU
        let e = exp(-abs(pg));
        let ag = pg * select(e / (1.0 + e), 1.0 / (1.0 + e), pg >= 0.0);
#else
        let rg = max(pg, 0.0);
        let ag = rg * rg;
#endif
        y[o] = ag * pu;
#elif RESIDUAL
        y[o] = y[o] + p;
#else
        y[o] = p;
#endif
    }
}

#if GATE_UP
@compute @workgroup_size(WG)
fn gate_up(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    body(li, wid);
}
#else
@compute @workgroup_size(WG)
fn matmul(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    body(li, wid);
}
#endif
