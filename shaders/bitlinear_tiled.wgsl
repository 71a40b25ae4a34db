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
//                     P = S * (ws * s[m] * mult)      (s[m] = inv_s, evaluated left to right)
//   RESIDUAL: Y = Y + P (in place). Missing terms read as 1 (ws for block formats, d for I2_S).
// A8 input (written by ops.rmsnorm(a8=True)): q u32[M][N_IN / 4], element 4j + b of a row in byte b
// of word j (two's complement int8); s f32[M], the row's inv_s = max(max|x|, 1e-5) * (1 / 127)
// (x ~= q * s). q, s and P are the decode kernel's (bitlinear.wgsl: p = S * (ws * inv_s * mult)).
//
// Weights: the raw GGUF tensor bytes as array<u32>; layouts as in bitlinear.wgsl (I2_S 128 / 32
// bytes + f32 scale at byte N_OUT * N_IN / 4; TQ2_0 256 / 66; TQ1_0 256 / 54; Q1_0 128 / 18, blocks
// 2-byte aligned).
//
// Buffers (binding i = i-th that exists):
//   params  u32[8]              word 0: M (the ops params block)
//   x       f32[M][N_IN]        (f32 mode)   or   q u32[M][N_IN / 4], s f32[M] (inv_s)   (A8)
//   mult    f32[1] / f32[2]     output multiplier(s) (gate_up: gate, up)
//   y       f32[M][N_OUT]       output; with RESIDUAL it holds the residual on entry
//                               (Y_STRIDE / Y_COL0: y[m * Y_STRIDE + Y_COL0 + n], a column slice)
//   w / gate, up                weights
//
// Threads: a workgroup of WG threads computes a tile of TM rows x WG outputs; thread i owns output
// n = WG * wid.x + i and TM accumulators. K advances 128 values at a time (a chunk: an I2_S / Q1_0
// block, half a TQ2_0 / TQ1_0 block). Per chunk the workgroup stages the TM x 128 activations and
// the WG x 128 weights, decoded once to packed int8 (wt[k][n]: thread n reads a column, no bank
// conflicts), in workgroup memory; each decoded weight word serves TM rows. gate_up stages and
// uses gate, then up, per chunk.

override WG: u32 = 64u;        // outputs per workgroup (threads)
override TM: u32 = 8u;         // rows per workgroup, <= 16
override N_IN: u32 = 256u;
override N_OUT: u32 = 64u;
override Y_STRIDE: u32 = 0u;   // row stride of y in floats (0: N_OUT); the engine writes q | k | v
override Y_COL0: u32 = 0u;     // column of y where output n = 0 goes    into one [M][q+2kv] buffer

const MAXTM: u32 = 16u;
const M3: u32 = 0x03030303u;
const KW: u32 = 32u;           // packed words per chunk (128 values)

#if FMT_I2S
const BLK: u32 = 128u;
const BBYTES: u32 = 32u;
const NSRC: u32 = 2u;          // decode pieces per row and chunk (I2_S, TQ2_0: 16 bytes; TQ1_0, Q1_0: 4)
#elif FMT_TQ2
const BLK: u32 = 256u;
const BBYTES: u32 = 66u;
const NSRC: u32 = 2u;
#elif FMT_TQ1
const BLK: u32 = 256u;
const BBYTES: u32 = 54u;
const NSRC: u32 = 13u;
#elif FMT_Q1
const BLK: u32 = 128u;
const BBYTES: u32 = 18u;
const NSRC: u32 = 4u;
#endif

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
alias XV = vec4<u32>;           // 16 int8 values
const XW: u32 = KW / 4u;        // xt entries per row and chunk
#else
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> mult: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read> w0: array<u32>;
#if GATE_UP
@group(0) @binding(5) var<storage, read> w1: array<u32>;
#endif
alias XV = vec4<f32>;           // 4 f32 values
const XW: u32 = KW;
#endif
var<workgroup> xt: array<XV, TM * XW>;         // [m * XW + k]: row m0 + m
var<workgroup> wt: array<vec4<u32>, KW / 4u * WG>;   // [k4 * WG + n]: 16 int8 weights of output n
var<workgroup> wd: array<f32, WG>;             // block scale of output n for this chunk

fn wl(t: u32, i: u32) -> u32 {
#if GATE_UP
    if (t == 1u) { return w1[i]; }
#endif
    return w0[i];
}

fn i8x4(v: u32) -> vec4<f32> {
    let i = bitcast<i32>(v);
    return vec4<f32>(f32(extractBits(i, 0u, 8u)), f32(extractBits(i, 8u, 8u)),
                     f32(extractBits(i, 16u, 8u)), f32(extractBits(i, 24u, 8u)));
}

#include common_ternary
#include common_act

// Decode piece k (< NSRC) of chunk c of row n (tensor t) into wt column j (and wd[j] for k = 0).
fn decode(t: u32, n: u32, c: u32, k: u32, j: u32) {
#if FMT_I2S
    // block c, words 4k .. 4k+3 (one 16-byte load): word 4k + e holds values 32 i + 4 (4k + e) .. +3
    // at shift 6 - 2i, i.e. packed words 8i + 4k + e
    let i0 = n * (N_IN / 16u) + c * 8u + 4u * k;
    let w = vec4<u32>(wl(t, i0), wl(t, i0 + 1u), wl(t, i0 + 2u), wl(t, i0 + 3u));
    for (var i = 0u; i < 4u; i++) {
        let sh = 6u - 2u * i;
        wt[(2u * i + k) * WG + j] = vec4<u32>(tern8((w.x >> sh) & M3), tern8((w.y >> sh) & M3),
                                              tern8((w.z >> sh) & M3), tern8((w.w >> sh) & M3));
    }
    if (k == 0u) { wd[j] = 1.0; }
#elif FMT_TQ2
    // half c % 2 of block c / 2, qs words 4k .. 4k+3: word 4k + e holds values 32 l + 4 (4k + e) of the
    // half at shift 2l, i.e. packed words 8l + 4k + e
    let bb = (n * (N_IN / BLK) + c / 2u) * BBYTES;
    let b0 = bb + 32u * (c % 2u) + 16u * k;
    let w = vec4<u32>(ldb(t, b0), ldb(t, b0 + 4u), ldb(t, b0 + 8u), ldb(t, b0 + 12u));
    for (var l = 0u; l < 4u; l++) {
        let sh = 2u * l;
        wt[(2u * l + k) * WG + j] = vec4<u32>(tern8((w.x >> sh) & M3), tern8((w.y >> sh) & M3),
                                              tern8((w.z >> sh) & M3), tern8((w.w >> sh) & M3));
    }
    if (k == 0u) { wd[j] = ldh(t, bb + 64u); }
#elif FMT_TQ1
    // block c / 2, word k: trit i holds values e = base + stride * i (k < 8: 4k + 32i; k < 12:
    // 4k + 128 + 16i; k = 12: 240 + 4i, i < 4); keep those in half c % 2
    let bb = (n * (N_IN / BLK) + c / 2u) * BBYTES;
    let w = ldb(t, bb + 4u * k);
    var base = 4u * k;
    var stride = 32u;
    if (k >= 12u) { base = 240u; stride = 4u; } else if (k >= 8u) { base = 4u * k + 128u; stride = 16u; }
    let tr = trits(w);
    for (var i = 0u; i < 5u; i++) {
        let e = base + stride * i;
        if (e / 128u == c % 2u && !(k == 12u && i == 4u)) {
            let pw = (e % 128u) / 4u;
            wt[(pw / 4u) * WG + j][pw % 4u] = tern8(tr[i]);
        }
    }
    if (k == 0u) { wd[j] = ldh(t, bb + 52u); }
#elif FMT_Q1
    // block c, sign word k: values 32k + 4i .. +3 in nibble i, i.e. packed words 8k + i
    let bb = (n * (N_IN / BLK) + c) * BBYTES;
    let w = ldb(t, bb + 2u + 4u * k);
    var v: array<u32, 8>;
    for (var i = 0u; i < 8u; i++) { v[i] = sign8(w >> (4u * i)); }
    wt[(2u * k) * WG + j] = vec4<u32>(v[0], v[1], v[2], v[3]);
    wt[(2u * k + 1u) * WG + j] = vec4<u32>(v[4], v[5], v[6], v[7]);
    if (k == 0u) { wd[j] = ldh(t, bb); }
#endif
}

#if GATE_UP
const NACC: u32 = 2u;
#else
const NACC: u32 = 1u;
#endif

fn body(li: u32, wid: vec3<u32>) {
    let mrows = params[0];
    let m0 = wid.y * TM;
    let n0 = wid.x * WG;
    let n = n0 + li;
    let mt = min(TM, max(mrows, m0) - m0);
    var acc: array<f32, 32>;         // [MAXTM * a + m]
    for (var i = 0u; i < 32u; i++) { acc[i] = 0.0; }
    for (var c = 0u; c < N_IN / 128u; c++) {
        // stage the TM x 128 activations of this chunk
        for (var i = li; i < TM * XW; i += WG) {
            let m = i / XW;
#if A8
            let src = (m0 + m) * (N_IN / 4u) + c * KW + 4u * (i % XW);
            xt[i] = select(vec4<u32>(0u), vec4<u32>(q[src], q[src + 1u], q[src + 2u], q[src + 3u]), m < mt);
#else
            xt[i] = select(vec4<f32>(0.0), x[(m0 + m) * (N_IN / 4u) + c * KW + i % XW], m < mt);
#endif
        }
        for (var a = 0u; a < NACC; a++) {
            // stage the WG x 128 weights of tensor a, decoded (rows past N_OUT: the last row, unused)
            for (var i = li; i < WG * NSRC; i += WG) {
                let j = i / NSRC;
                decode(a, min(n0 + j, N_OUT - 1u), c, i % NSRC, j);
            }
            workgroupBarrier();
#if A8
            var part: array<i32, MAXTM>;
            for (var m = 0u; m < MAXTM; m++) { part[m] = 0; }
            for (var k4 = 0u; k4 < KW / 4u; k4++) {
                let wk = wt[k4 * WG + li];
                for (var m = 0u; m < TM; m++) {
                    let xk = xt[m * XW + k4];
                    part[m] += dot4(wk.x, xk.x) + dot4(wk.y, xk.y) + dot4(wk.z, xk.z) + dot4(wk.w, xk.w);
                }
            }
            let d = wd[li];
            for (var m = 0u; m < TM; m++) { acc[MAXTM * a + m] += f32(part[m]) * d; }
#else
            var part: array<f32, MAXTM>;
            for (var m = 0u; m < MAXTM; m++) { part[m] = 0.0; }
            for (var k4 = 0u; k4 < KW / 4u; k4++) {
                let wk = wt[k4 * WG + li];
                let w0 = i8x4(wk.x);
                let w1 = i8x4(wk.y);
                let w2 = i8x4(wk.z);
                let w3 = i8x4(wk.w);
                for (var m = 0u; m < TM; m++) {
                    let b = m * KW + 4u * k4;
                    part[m] += dot(w0, xt[b]) + dot(w1, xt[b + 1u]) + dot(w2, xt[b + 2u]) + dot(w3, xt[b + 3u]);
                }
            }
            let d = wd[li];
            for (var m = 0u; m < TM; m++) { acc[MAXTM * a + m] += part[m] * d; }
#endif
            workgroupBarrier();
        }
    }
    if (n >= N_OUT) { return; }
#if FMT_I2S
    let ws0 = bitcast<f32>(wl(0u, N_OUT * (N_IN / 16u)));
#if GATE_UP
    let ws1 = bitcast<f32>(wl(1u, N_OUT * (N_IN / 16u)));
#endif
#else
    let ws0 = 1.0;
#if GATE_UP
    let ws1 = 1.0;
#endif
#endif
    let f0 = ws0 * mult[0];
#if GATE_UP
    let f1 = ws1 * mult[1];
#endif
    for (var m = 0u; m < mt; m++) {
        let o = (m0 + m) * select(Y_STRIDE, N_OUT, Y_STRIDE == 0u) + Y_COL0 + n;
#if A8
        let sm = s[m0 + m];
#if GATE_UP
        let pg = acc[m] * (ws0 * sm * mult[0]);
        let pu = acc[MAXTM + m] * (ws1 * sm * mult[1]);
#else
        let p = acc[m] * (ws0 * sm * mult[0]);
#endif
#else
#if GATE_UP
        let pg = acc[m] * f0;
        let pu = acc[MAXTM + m] * f1;
#else
        let p = acc[m] * f0;
#endif
#endif
#if GATE_UP
        y[o] = act(pg) * pu;
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
