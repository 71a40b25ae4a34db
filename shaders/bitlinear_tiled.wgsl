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
// Weights: the raw GGUF tensor bytes as array<u32>, decoded through the format's include
// (`#include format`: shaders/fmt_<name>.wgsl, the packed-format interface in
// shaders/common_ternary.wgsl): code words fmt_word, their groups of codes fmt_codes at block
// positions fmt_pos, block scale fmt_d, tensor scale fmt_ws.
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
// n = WG * wid.x + i and TM accumulators. K advances CHUNK = min(BLK, 128) values at a time (a
// block, or half a 256-value block). Per chunk the workgroup stages the TM x CHUNK activations and
// the WG x CHUNK weights, decoded once to packed int8 (wt[k][n]: thread n reads a column, no bank
// conflicts; the CW code words of the chunk, fmt_cword), in workgroup memory; each decoded weight
// word serves TM rows. gate_up stages and uses gate, then up, per chunk.

override WG: u32 = 64u;        // outputs per workgroup (threads)
override TM: u32 = 8u;         // rows per workgroup, <= 16
override N_IN: u32 = 256u;
override N_OUT: u32 = 64u;
override Y_STRIDE: u32 = 0u;   // row stride of y in floats (0: N_OUT); the engine writes q | k | v
override Y_COL0: u32 = 0u;     // column of y where output n = 0 goes    into one [M][q+2kv] buffer

const MAXTM: u32 = 16u;

#include format
const CHUNK: u32 = min(BLK, 128u);   // values per K step
const KW: u32 = CHUNK / 4u;          // packed int8 words per row and chunk
const NSRC: u32 = CW;                // code words decoded per row and chunk

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

#include common_act

// Decode code word i (< NSRC) of chunk c of row n (tensor t) into wt column j (and wd[j] for i = 0).
fn decode(t: u32, n: u32, c: u32, i: u32, j: u32) {
    let bi = n * (N_IN / BLK) + c / (BLK / CHUNK);     // the block holding chunk c
    let h = c % (BLK / CHUNK);                          // which chunk of that block
    let k = fmt_cword(h, i);
    let cs = fmt_codes(fmt_word(t, bi, k));
    for (var g = 0u; g < QG; g++) {
        let p = fmt_pos(k, g);
        if (fmt_has(k, g) && p / KW == h) {
            let pw = p % KW;
            wt[(pw / 4u) * WG + j][pw % 4u] = tern8(cs[g]);
        }
    }
    if (i == 0u) { wd[j] = fmt_d(t, bi); }
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
    for (var c = 0u; c < N_IN / CHUNK; c++) {
        // stage the TM x CHUNK activations of this chunk
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
            // stage the WG x CHUNK weights of tensor a, decoded (rows past N_OUT: the last row, unused)
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
    let ws0 = fmt_ws(0u, N_OUT * (N_IN / BLK));
#if GATE_UP
    let ws1 = fmt_ws(1u, N_OUT * (N_IN / BLK));
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
