// bitlinear_tiled.wgsl: M>1 (prefill) matmul over packed GGUF weights (the packed formats)
// (launch specs: pyapp/bitweb/kernels/bitlinear_tiled.py; numpy mirror: bitweb/ref/bitlinear_tiled.py).
//
// Entry points (one per pipeline, chosen by define):
//   matmul   (GATE_UP off)  Y[m, n] (+)= P[m, n]
//   gate_up  (GATE_UP on)   Y[m, n]  = act(Pg[m, n]) * Pu[m, n]       act: relu(.)^2, or silu (ACT_SILU)
// for rows m < M = params[0] (varies per call; the dispatch covers up to M_max rows) and n < N_OUT.
//
// Maths (inputs already normed; W: N_OUT rows of N_IN, w[n, j] = c - ZP from the code c, blocks b of
// the format with scales d[n, b]; a format with per-plane scales (PDM) scales each plane of 16 values
// by its own d and adds its offset m: w d + m):
//   A8:   S[m, n] = sum_j w[n, j] q[m, j]                          I2_S (no block scale): exact
//         S[m, n] = sum_j (w[n, j] d[n, b(j)]) q[m, j]             block formats
//         P = S * (ws * s[m] * mult)      (s[m] = inv_s; evaluated left to right, as bitlinear.wgsl)
//   f32:  S[m, n] = sum_j (w[n, j] d[n, b(j)]) x[m, j];  P = S * (ws * mult)
//   RESIDUAL: Y = Y + P (in place). Missing terms read as 1 (ws for block formats, d for I2_S).
// Every product is exact (|w d| has the 11 significant bits of an f16 d, q 8 bits); the sums run in
// f32 over j in blocks of 16 values. I2_S A8 sums integers below 2^24, so S is the exact int32 dot
// of the decode kernel and P equals bitlinear.wgsl's bit for bit. Block formats round the sum (the
// decode kernel rounds too, in another order): prefill and decode agree to float error there.
//   Q8T (A8 rows on ggml's Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0: llama.cpp's q8_0 / q8_1 blocks of 32)
//         per block b: I[m, n, b] = sum_{j in b} (c[n, j] - ZP) q[m, j]   (integers: exact in f32)
//         S[m, n] = sum_b (dw[n, b] dx[m, b]) I (+ mw[n, b] sx[m, b]);  P = S * (ws * mult)
//         each block term as bitlinear.wgsl Q8B (ggml's vec_dot), the blocks summed in another order.
//         s: vec2<f32>[M][N_IN / 32] (dx, sx) per row and block (bitlinear.q8_rows, quant_act.wgsl).
//         Two siblings compute I (the same integers): with DOT4, dot4I8Packed per 4 values of a row and
//         an output (iplane; raw int8 rows); without, f32 multiply-adds on the decoded bytes (the tile
//         below). The launch spec picks one per device (kernels/bitlinear_tiled.py q8_dot4).
// A8 input (written by ops.rmsnorm(a8=True)): q u32[M][N_IN / 4], element 4j + b of a row in byte b
// of word j (two's complement int8); s f32[M], the row's inv_s = max(max|x|, 1e-5) * (1 / 127).
//
// Weights: the raw GGUF tensor bytes (bound as the format's array<WT>: I2_S vec4<u32>, other formats
// u32), decoded through the format's include (`#include format`: shaders/fmt_<name>.wgsl, the
// packed-format interface of shaders/common_codes.wgsl: fmt_quad, fmt_pslot, fmt_group, fmt_pos,
// fmt_word, ZP, fmt_dm, fmt_ws).
// The tile walks a block in units of 4 code words (a quad: 16 bytes, one read, fmt_quad; 64 values
// for 2-bit codes). A unit holds NP planes of 16 consecutive values (fmt_pslot: I2_S, TQ2_0 the 4
// bit-planes; TQ1_0 the 5 trits; Q1_0 two nibble-quads per word; Q2_0 / Q2_0_G128 a word each):
// word e of plane p holds values 4e .. 4e + 3 of the plane, which is activation vec4 upos(u, p) of
// the block (16 int8, or 4 vec4 in f32 mode). Code words past the last quad (QW % 4: TQ1_0's 13th
// word, 4 groups of its last 16 values) are one extra plane each, after the last unit; with
// SUBGROUPS its activations come in the spare second load of quad lane 1 (5 planes use 2 loads).
//
// Buffers (in binding order, the loader numbers those that exist):
//   params  u32[8]              word 0: M (the ops params block)
//   x       f32[M][N_IN]        (f32 mode)   or   q u32[M][N_IN / 4], s f32[M] (inv_s)   (A8)
//   mult    f32[1] / f32[2]     output multiplier(s) (gate_up: gate, up)
//   y       f32[M][N_OUT]       output; with RESIDUAL it holds the residual on entry
//                               (Y_STRIDE / Y_COL0: y[m * Y_STRIDE + Y_COL0 + n], a column slice)
//   w / gate, up                weights
//
// Threads: a register tile, no workgroup memory, no barriers (CPU rasterisers run a workgroup as
// SIMD across invocations: every storage load costs a per-lane loop, arithmetic is cheap). An
// invocation computes 4 RQ rows x 4 NQ outputs (RQ, NQ 1..4; gate_up: that tile for gate and for
// up), as RQ x NQ accumulators of 4 rows x 4 outputs (mat4x4, column = output); per activation
// word it adds X (4 rows x 4 values) . W (4 values x 4 outputs) with fma. Each weight unit is
// loaded and decoded once and serves the 4 RQ rows; each activation word is decoded once and
// serves the 4 NQ outputs; the block scales are loaded once per block (scales). The workgroup's WG invocations
// take consecutive outputs (output n0 = 4 NQ (WG wid.x + i)) and share the rows (4 RQ wid.y ..).
// SUBGROUPS (A8 only): the 4 lanes of a quad (subgroup invocations 4k .. 4k + 3, same rows) each
// load one plane of a row and pass it round with subgroupShuffle, so a unit costs one activation
// load per row and lane instead of NP. QUADS2 (Q8T on a format of 2 planes, Q4_0 / Q4_1, RQ > 2):
// lane l of the quad loads plane l % 2 of 8 of the 16 rows (half a load per row and lane; SmolLM2
// Q4_1's prefill matmuls 0.82x the CPU time, dev/perf/q8_tile.py). OCTETS (with SUBGROUPS; NP = 4, RQ = 4, subgroups of a
// multiple of 8 lanes: lavapipe's wide tiles): the 8 lanes of a group share them, lane l loading plane
// l % 4 of 8 of the 16 rows (one load per 2 rows and lane). PAIRS (I2_S A8, RQ 2 or 4): two rows in
// one f32, x[r] + PB x[r + 4], so one multiply-add serves both (lavapipe has no fused fma); the sums
// of a plane are split back exactly into the two rows (see PB). The tile is written out (RQ, NQ are
// override constants that fold the `if (RQ > i)` blocks): CPU compilers keep a tile in registers only
// when every index is a constant; the word loop stays a loop (written out 2 or 4 words at a time,
// LLVM spills more and it runs 1.5x slower). Integers become floats by the exponent trick
// (bitcast(MAG | n) - 2^23), no conversions.

override WG: u32 = 64u;        // invocations per workgroup
override RQ: u32 = 4u;         // row quads per invocation, 1..4 (4 RQ rows)
override NQ: u32 = 2u;         // output quads per invocation, 1..4 (4 NQ outputs)
override N_IN: u32 = 256u;
#if GATE_UP
override N_OUT: u32 = 64u;
#endif
override Y_STRIDE: u32 = 0u;   // row stride of y in floats (0: N_OUT); the engine writes q | k | v
override Y_COL0: u32 = 0u;     // column of y where output n = 0 goes    into one [M][q+2kv] buffer

#include format

@group(0) @binding(auto) var<storage, read> params: array<u32>;
#if A8
@group(0) @binding(auto) var<storage, read> q: array<vec4<u32>>;
#if Q8T
@group(0) @binding(auto) var<storage, read> s: array<vec2<f32>>;   // per row and block: (dx, sx)
#else
@group(0) @binding(auto) var<storage, read> s: array<f32>;
#endif
#else
@group(0) @binding(auto) var<storage, read> x: array<vec4<f32>>;
#endif
@group(0) @binding(auto) var<storage, read> mult: array<f32>;
@group(0) @binding(auto) var<storage, read_write> y: array<f32>;
@group(0) @binding(auto) var<storage, read> w0: array<WT>;
#if GATE_UP
@group(0) @binding(auto) var<storage, read> w1: array<WT>;
fn n_out() -> u32 { return N_OUT; }
#else
// matmul: n_out at run time (kernels/bitlinear_tiled.py shape_bytes), so linears that differ only
// in their output count (q and k / v) share one pipeline; it bounds no loop (N_IN, which bounds the
// block loop, stays a constant: at run time it measured up to 10 % slower on lavapipe)
@group(0) @binding(auto) var<storage, read> shape: array<u32, 4>;
fn n_out() -> u32 { return shape[0]; }
#endif

fn wv(t: u32, i: u32) -> WT {
#if GATE_UP
    if (t == 1u) { return w1[i]; }
#endif
    return w0[i];
}

fn wl(t: u32, i: u32) -> u32 {
    return fmt_wt(wv(t, i / WPT), i % WPT);
}

#include common_act

#if Q8T
const Q8ROWS: bool = true;            // ggml's q8 blocks (A8 rows, a scale per row and block)
#if DOT4
const Q8DOT: bool = true;             // their integer sums by dot4I8Packed (Q8T's sibling: iplane)
#else
const Q8DOT: bool = false;
#endif
#else
const Q8ROWS: bool = false;
const Q8DOT: bool = false;
#endif
const MAG: u32 = 0x4B000000u;      // f32 2^23: bitcast<f32>(MAG | n) = 2^23 + n for n < 2^23
const BIAS: u32 = 0x80808080u;     // int8 bytes ^ 0x80 = the byte + 128

// ---- units -----------------------------------------------------------------------------------
// (NP, the planes of a unit, comes with the format: bitweb.formats Format.planes)
const NU: u32 = QW / 4u;       // units (quads) per block
const XW: u32 = QW - 4u * NU;  // code words after the last unit, one extra plane each (TQ1_0: 1)
override NB: u32 = N_IN / BLK; // derived: blocks per row
#if SUBGROUPS
// the extra plane rides lane 1's spare second load (4 < NP < 8)
const_assert XW == 0u || (XW == 1u && NP > 4u && NP < 8u);
#else
const_assert XW <= 1u;
#endif

// The 4 code words of unit u of block bi (tensor t): one 16-byte read.
fn unit(t: u32, bi: u32, u: u32) -> vec4<u32> {
    return fmt_quad(t, bi, u);
}

// Activation vec4 (16 values) of plane p of unit u, within its block.
fn upos(u: u32, p: u32) -> u32 {
    let s = fmt_pslot(p, 0u);
    return fmt_pos(4u * u + s.x, s.y) / 4u;
}

// The codes of word e of plane p (4 values, one code per byte).
fn ucodes(w: vec4<u32>, p: u32, e: u32) -> u32 {
    let s = fmt_pslot(p, e);
    return fmt_group(w[s.x], s.y);
}

// ---- the 4 x 4 x 4 step ------------------------------------------------------------------------
// byte i of four words as f32, minus off - 2^23 (exact: off = 2^23 + 128 turns a biased int8 into
// its value, off = 2^23 + ZP a code c into c - ZP)
fn byte4(v: vec4<u32>, i: u32, off: f32) -> vec4<f32> {
    return bitcast<vec4<f32>>(((v >> vec4<u32>(8u * i)) & vec4<u32>(0xFFu)) | vec4<u32>(MAG)) - off;
}

// Weights of 4 outputs (vector over outputs) for values i = 0..3: codes c of word e -> (c - ZP) d
// (PDM: (c - ZP) d + m).
struct W4 { w0: vec4<f32>, w1: vec4<f32>, w2: vec4<f32>, w3: vec4<f32> }

fn wdec(c: vec4<u32>, d: vec4<f32>, m: vec4<f32>) -> W4 {
    let k = 8388608.0 + f32(ZP);
    if (Q8ROWS) {                    // the integer codes c - ZP: the block's scales come in bflush
        return W4(byte4(c, 0u, k), byte4(c, 1u, k), byte4(c, 2u, k), byte4(c, 3u, k));
    }
    if (PDM) {
        return W4(fma(byte4(c, 0u, k), d, m), fma(byte4(c, 1u, k), d, m), fma(byte4(c, 2u, k), d, m),
                  fma(byte4(c, 3u, k), d, m));
    }
    return W4(byte4(c, 0u, k) * d, byte4(c, 1u, k) * d, byte4(c, 2u, k) * d, byte4(c, 3u, k) * d);
}

// Activations of 4 rows (vector over rows) for values i = 0..3.
struct X4 { x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32> }

// a + X W: column c of a is output c over the 4 rows.
fn mac(a: mat4x4<f32>, x: X4, w: W4) -> mat4x4<f32> {
    return mat4x4<f32>(
        fma(x.x3, vec4<f32>(w.w3.x), fma(x.x2, vec4<f32>(w.w2.x), fma(x.x1, vec4<f32>(w.w1.x), fma(x.x0, vec4<f32>(w.w0.x), a[0])))),
        fma(x.x3, vec4<f32>(w.w3.y), fma(x.x2, vec4<f32>(w.w2.y), fma(x.x1, vec4<f32>(w.w1.y), fma(x.x0, vec4<f32>(w.w0.y), a[1])))),
        fma(x.x3, vec4<f32>(w.w3.z), fma(x.x2, vec4<f32>(w.w2.z), fma(x.x1, vec4<f32>(w.w1.z), fma(x.x0, vec4<f32>(w.w0.z), a[2])))),
        fma(x.x3, vec4<f32>(w.w3.w), fma(x.x2, vec4<f32>(w.w2.w), fma(x.x1, vec4<f32>(w.w1.w), fma(x.x0, vec4<f32>(w.w0.w), a[3])))));
}

// The accumulators: a<row quad><output quad>, and the up projection's (gate_up) up<..>.
struct Tile {
    a00: mat4x4<f32>, a01: mat4x4<f32>, a02: mat4x4<f32>, a03: mat4x4<f32>,
    a10: mat4x4<f32>, a11: mat4x4<f32>, a12: mat4x4<f32>, a13: mat4x4<f32>,
    a20: mat4x4<f32>, a21: mat4x4<f32>, a22: mat4x4<f32>, a23: mat4x4<f32>,
    a30: mat4x4<f32>, a31: mat4x4<f32>, a32: mat4x4<f32>, a33: mat4x4<f32>,
#if GATE_UP
    up00: mat4x4<f32>, up01: mat4x4<f32>, up02: mat4x4<f32>, up03: mat4x4<f32>,
    up10: mat4x4<f32>, up11: mat4x4<f32>, up12: mat4x4<f32>, up13: mat4x4<f32>,
    up20: mat4x4<f32>, up21: mat4x4<f32>, up22: mat4x4<f32>, up23: mat4x4<f32>,
    up30: mat4x4<f32>, up31: mat4x4<f32>, up32: mat4x4<f32>, up33: mat4x4<f32>,
#endif
#if PAIRS
    // one plane's sums of row pairs (r, r + 4) as S[r] + PB S[r + 4]: p<row octet><output quad>
    p00: mat4x4<f32>, p01: mat4x4<f32>, p02: mat4x4<f32>, p03: mat4x4<f32>,
    p10: mat4x4<f32>, p11: mat4x4<f32>, p12: mat4x4<f32>, p13: mat4x4<f32>,
#if GATE_UP
    pu00: mat4x4<f32>, pu01: mat4x4<f32>, pu02: mat4x4<f32>, pu03: mat4x4<f32>,
    pu10: mat4x4<f32>, pu11: mat4x4<f32>, pu12: mat4x4<f32>, pu13: mat4x4<f32>,
#endif
#endif
}

// The weight units of the invocation's 4 NQ outputs (tensor 0 = gate / w, 1 = up) and their block
// scales (PDM: the plane's scales and offsets, gm / um).
struct Wts {
    g0: vec4<u32>, g1: vec4<u32>, g2: vec4<u32>, g3: vec4<u32>, g4: vec4<u32>, g5: vec4<u32>, g6: vec4<u32>, g7: vec4<u32>,
    g8: vec4<u32>, g9: vec4<u32>, g10: vec4<u32>, g11: vec4<u32>, g12: vec4<u32>, g13: vec4<u32>, g14: vec4<u32>, g15: vec4<u32>,
    gd0: vec4<f32>, gd1: vec4<f32>, gd2: vec4<f32>, gd3: vec4<f32>,
    gm0: vec4<f32>, gm1: vec4<f32>, gm2: vec4<f32>, gm3: vec4<f32>,
#if GATE_UP
    u0: vec4<u32>, u1: vec4<u32>, u2: vec4<u32>, u3: vec4<u32>, u4: vec4<u32>, u5: vec4<u32>, u6: vec4<u32>, u7: vec4<u32>,
    u8: vec4<u32>, u9: vec4<u32>, u10: vec4<u32>, u11: vec4<u32>, u12: vec4<u32>, u13: vec4<u32>, u14: vec4<u32>, u15: vec4<u32>,
    ud0: vec4<f32>, ud1: vec4<f32>, ud2: vec4<f32>, ud3: vec4<f32>,
    um0: vec4<f32>, um1: vec4<f32>, um2: vec4<f32>, um3: vec4<f32>,
#endif
}

// One activation plane of the tile's rows: A8 16 int8 (biased) per row, f32 4 vec4 per row (.. fN).
#if A8
alias AV = vec4<u32>;
#else
alias AV = mat4x4<f32>;          // column e: values 4e .. 4e + 3
#endif
struct Rows {
    r0: AV, r1: AV, r2: AV, r3: AV, r4: AV, r5: AV, r6: AV, r7: AV,
    r8: AV, r9: AV, r10: AV, r11: AV, r12: AV, r13: AV, r14: AV, r15: AV,
}

// word e of a plane for 4 rows
fn xq(a: AV, b: AV, c: AV, d: AV, e: u32) -> X4 {
#if A8
    let v = vec4<u32>(a[e], b[e], c[e], d[e]);
    let k = 8388736.0;
    return X4(byte4(v, 0u, k), byte4(v, 1u, k), byte4(v, 2u, k), byte4(v, 3u, k));
#else
    let t = transpose(mat4x4<f32>(a[e], b[e], c[e], d[e]));
    return X4(t[0], t[1], t[2], t[3]);
#endif
}

fn wq(a: vec4<u32>, b: vec4<u32>, c: vec4<u32>, d: vec4<u32>, p: u32, e: u32, dd: vec4<f32>, mm: vec4<f32>) -> W4 {
    let cw = vec4<u32>(ucodes(a, p, e), ucodes(b, p, e), ucodes(c, p, e), ucodes(d, p, e));
#if PAIRS
    // code 3 -> 2 (per byte: c - (c >> 1 & c & 1))
    return wdec(cw - ((cw >> vec4<u32>(1u)) & cw & vec4<u32>(0x01010101u)), dd, mm);
#else
    return wdec(cw, dd, mm);
#endif
}

// Plane p (rows in r): the tile += X W over its 4 words.
// (the siblings' paths are #if'd, not branched on constants: a dead path still costs compile time)
fn plane(t: ptr<function, Tile>, r: Rows, w: Wts, p: u32) {
#if Q8T
#if DOT4
    iplane(t, r, w, p);
#else
    for (var e = 0u; e < 4u; e++) { word(t, r, w, p, e); }
#endif
#elif PAIRS
    pzero(t);
    for (var e = 0u; e < 4u; e++) { word(t, r, w, p, e); }
    pflush(t);
#else
    for (var e = 0u; e < 4u; e++) { word(t, r, w, p, e); }
#endif
}

#if PAIRS
// ---- PAIRS (I2_S A8): two rows per f32 ---------------------------------------------------------
// X = x[r] + PB x[r + 4] (r = 0..3 of a row octet) times w sums both rows in one multiply-add
// (lavapipe has no fused fma: a multiply and an add per value and row, halved). Over one plane (16
// values), with |x| <= 128 and w in {-1, 0, 1}: P = S[r] + PB S[r + 4] with |S[r]| <= 2048 < PB / 2,
// every partial sum an integer of magnitude <= 2048 (PB + 1) < 2^24 (exact), so after the plane
// h = round(P / PB) is S[r + 4] (|P / PB - h| <= 2048 / PB + 2^-23 * 2049 < 1 / 2) and P - PB h is
// S[r], both exact: the tile's sums are the integers of the plain path (bit-identical).
// Codes are clamped to 0..2 here (code 3, +2, is never written: it would break the bound).
const PB: f32 = 4100.0;

fn pzero(t: ptr<function, Tile>) {
    let z = mat4x4<f32>();
    (*t).p00 = z; (*t).p01 = z; (*t).p02 = z; (*t).p03 = z;
    (*t).p10 = z; (*t).p11 = z; (*t).p12 = z; (*t).p13 = z;
#if GATE_UP
    (*t).pu00 = z; (*t).pu01 = z; (*t).pu02 = z; (*t).pu03 = z;
    (*t).pu10 = z; (*t).pu11 = z; (*t).pu12 = z; (*t).pu13 = z;
#endif
}

// h = S[r + 4] of each element of a plane's P
fn phi(p: mat4x4<f32>) -> mat4x4<f32> {
    let k = 1.0 / PB;
    return mat4x4<f32>(round(p[0] * k), round(p[1] * k), round(p[2] * k), round(p[3] * k));
}

// The plane's P into the accumulators: rows r (a<2 i><n>) and r + 4 (a<2 i + 1><n>) of octet i.
fn pflush(t: ptr<function, Tile>) {
    { let h = phi((*t).p00); (*t).a00 += (*t).p00 - h * PB; (*t).a10 += h; }
    if (NQ > 1u) { let h = phi((*t).p01); (*t).a01 += (*t).p01 - h * PB; (*t).a11 += h; }
    if (NQ > 2u) { let h = phi((*t).p02); (*t).a02 += (*t).p02 - h * PB; (*t).a12 += h; }
    if (NQ > 3u) { let h = phi((*t).p03); (*t).a03 += (*t).p03 - h * PB; (*t).a13 += h; }
    if (RQ > 2u) {
        { let h = phi((*t).p10); (*t).a20 += (*t).p10 - h * PB; (*t).a30 += h; }
        if (NQ > 1u) { let h = phi((*t).p11); (*t).a21 += (*t).p11 - h * PB; (*t).a31 += h; }
        if (NQ > 2u) { let h = phi((*t).p12); (*t).a22 += (*t).p12 - h * PB; (*t).a32 += h; }
        if (NQ > 3u) { let h = phi((*t).p13); (*t).a23 += (*t).p13 - h * PB; (*t).a33 += h; }
    }
#if GATE_UP
    { let h = phi((*t).pu00); (*t).up00 += (*t).pu00 - h * PB; (*t).up10 += h; }
    if (NQ > 1u) { let h = phi((*t).pu01); (*t).up01 += (*t).pu01 - h * PB; (*t).up11 += h; }
    if (NQ > 2u) { let h = phi((*t).pu02); (*t).up02 += (*t).pu02 - h * PB; (*t).up12 += h; }
    if (NQ > 3u) { let h = phi((*t).pu03); (*t).up03 += (*t).pu03 - h * PB; (*t).up13 += h; }
    if (RQ > 2u) {
        { let h = phi((*t).pu10); (*t).up20 += (*t).pu10 - h * PB; (*t).up30 += h; }
        if (NQ > 1u) { let h = phi((*t).pu11); (*t).up21 += (*t).pu11 - h * PB; (*t).up31 += h; }
        if (NQ > 2u) { let h = phi((*t).pu12); (*t).up22 += (*t).pu12 - h * PB; (*t).up32 += h; }
        if (NQ > 3u) { let h = phi((*t).pu13); (*t).up23 += (*t).pu13 - h * PB; (*t).up33 += h; }
    }
#endif
}

// word e of a plane for a row octet: rows a..d plus PB x rows a2..d2
fn xq2(a: AV, b: AV, c: AV, d: AV, a2: AV, b2: AV, c2: AV, d2: AV, e: u32) -> X4 {
    let lo = xq(a, b, c, d, e);
    let hi = xq(a2, b2, c2, d2, e);
    return X4(fma(hi.x0, vec4<f32>(PB), lo.x0), fma(hi.x1, vec4<f32>(PB), lo.x1),
              fma(hi.x2, vec4<f32>(PB), lo.x2), fma(hi.x3, vec4<f32>(PB), lo.x3));
}
#endif

fn word(t: ptr<function, Tile>, r: Rows, w: Wts, p: u32, e: u32) {
    var q: WQ;
    q.v0 = wq(w.g0, w.g1, w.g2, w.g3, p, e, w.gd0, w.gm0);
    if (NQ > 1u) { q.v1 = wq(w.g4, w.g5, w.g6, w.g7, p, e, w.gd1, w.gm1); }
    if (NQ > 2u) { q.v2 = wq(w.g8, w.g9, w.g10, w.g11, p, e, w.gd2, w.gm2); }
    if (NQ > 3u) { q.v3 = wq(w.g12, w.g13, w.g14, w.g15, p, e, w.gd3, w.gm3); }
#if GATE_UP
    q.z0 = wq(w.u0, w.u1, w.u2, w.u3, p, e, w.ud0, w.um0);
    if (NQ > 1u) { q.z1 = wq(w.u4, w.u5, w.u6, w.u7, p, e, w.ud1, w.um1); }
    if (NQ > 2u) { q.z2 = wq(w.u8, w.u9, w.u10, w.u11, p, e, w.ud2, w.um2); }
    if (NQ > 3u) { q.z3 = wq(w.u12, w.u13, w.u14, w.u15, p, e, w.ud3, w.um3); }
#endif
    macs(t, r, q, e);
}

// The decoded weights of one word for the invocation's output quads (and the up projection's).
struct WQ {
    v0: W4, v1: W4, v2: W4, v3: W4,
#if GATE_UP
    z0: W4, z1: W4, z2: W4, z3: W4,
#endif
}

// The tile += X W for word e: X of each row quad (rows in r) times the output quads' weights q.
fn macs(t: ptr<function, Tile>, r: Rows, q: WQ, e: u32) {
#if PAIRS
    {
        let x0 = xq2(r.r0, r.r1, r.r2, r.r3, r.r4, r.r5, r.r6, r.r7, e);
        (*t).p00 = mac((*t).p00, x0, q.v0);
        if (NQ > 1u) { (*t).p01 = mac((*t).p01, x0, q.v1); }
        if (NQ > 2u) { (*t).p02 = mac((*t).p02, x0, q.v2); }
        if (NQ > 3u) { (*t).p03 = mac((*t).p03, x0, q.v3); }
#if GATE_UP
        (*t).pu00 = mac((*t).pu00, x0, q.z0);
        if (NQ > 1u) { (*t).pu01 = mac((*t).pu01, x0, q.z1); }
        if (NQ > 2u) { (*t).pu02 = mac((*t).pu02, x0, q.z2); }
        if (NQ > 3u) { (*t).pu03 = mac((*t).pu03, x0, q.z3); }
#endif
        if (RQ > 2u) {
            let x1 = xq2(r.r8, r.r9, r.r10, r.r11, r.r12, r.r13, r.r14, r.r15, e);
            (*t).p10 = mac((*t).p10, x1, q.v0);
            if (NQ > 1u) { (*t).p11 = mac((*t).p11, x1, q.v1); }
            if (NQ > 2u) { (*t).p12 = mac((*t).p12, x1, q.v2); }
            if (NQ > 3u) { (*t).p13 = mac((*t).p13, x1, q.v3); }
#if GATE_UP
            (*t).pu10 = mac((*t).pu10, x1, q.z0);
            if (NQ > 1u) { (*t).pu11 = mac((*t).pu11, x1, q.z1); }
            if (NQ > 2u) { (*t).pu12 = mac((*t).pu12, x1, q.z2); }
            if (NQ > 3u) { (*t).pu13 = mac((*t).pu13, x1, q.z3); }
#endif
        }
    }
#else
    {
        let v0 = q.v0;
        let v1 = q.v1;
        let v2 = q.v2;
        let v3 = q.v3;
#if GATE_UP
        let z0 = q.z0;
        let z1 = q.z1;
        let z2 = q.z2;
        let z3 = q.z3;
#endif
        let x0 = xq(r.r0, r.r1, r.r2, r.r3, e);
        (*t).a00 = mac((*t).a00, x0, v0);
        if (NQ > 1u) { (*t).a01 = mac((*t).a01, x0, v1); }
        if (NQ > 2u) { (*t).a02 = mac((*t).a02, x0, v2); }
        if (NQ > 3u) { (*t).a03 = mac((*t).a03, x0, v3); }
#if GATE_UP
        (*t).up00 = mac((*t).up00, x0, z0);
        if (NQ > 1u) { (*t).up01 = mac((*t).up01, x0, z1); }
        if (NQ > 2u) { (*t).up02 = mac((*t).up02, x0, z2); }
        if (NQ > 3u) { (*t).up03 = mac((*t).up03, x0, z3); }
#endif
        if (RQ > 1u) {
            let x1 = xq(r.r4, r.r5, r.r6, r.r7, e);
            (*t).a10 = mac((*t).a10, x1, v0);
            if (NQ > 1u) { (*t).a11 = mac((*t).a11, x1, v1); }
            if (NQ > 2u) { (*t).a12 = mac((*t).a12, x1, v2); }
            if (NQ > 3u) { (*t).a13 = mac((*t).a13, x1, v3); }
#if GATE_UP
            (*t).up10 = mac((*t).up10, x1, z0);
            if (NQ > 1u) { (*t).up11 = mac((*t).up11, x1, z1); }
            if (NQ > 2u) { (*t).up12 = mac((*t).up12, x1, z2); }
            if (NQ > 3u) { (*t).up13 = mac((*t).up13, x1, z3); }
#endif
        }
        if (RQ > 2u) {
            let x2 = xq(r.r8, r.r9, r.r10, r.r11, e);
            (*t).a20 = mac((*t).a20, x2, v0);
            if (NQ > 1u) { (*t).a21 = mac((*t).a21, x2, v1); }
            if (NQ > 2u) { (*t).a22 = mac((*t).a22, x2, v2); }
            if (NQ > 3u) { (*t).a23 = mac((*t).a23, x2, v3); }
#if GATE_UP
            (*t).up20 = mac((*t).up20, x2, z0);
            if (NQ > 1u) { (*t).up21 = mac((*t).up21, x2, z1); }
            if (NQ > 2u) { (*t).up22 = mac((*t).up22, x2, z2); }
            if (NQ > 3u) { (*t).up23 = mac((*t).up23, x2, z3); }
#endif
        }
        if (RQ > 3u) {
            let x3 = xq(r.r12, r.r13, r.r14, r.r15, e);
            (*t).a30 = mac((*t).a30, x3, v0);
            if (NQ > 1u) { (*t).a31 = mac((*t).a31, x3, v1); }
            if (NQ > 2u) { (*t).a32 = mac((*t).a32, x3, v2); }
            if (NQ > 3u) { (*t).a33 = mac((*t).a33, x3, v3); }
#if GATE_UP
            (*t).up30 = mac((*t).up30, x3, z0);
            if (NQ > 1u) { (*t).up31 = mac((*t).up31, x3, z1); }
            if (NQ > 2u) { (*t).up32 = mac((*t).up32, x3, z2); }
            if (NQ > 3u) { (*t).up33 = mac((*t).up33, x3, z3); }
#endif
        }
    }
#endif
}

// ---- activations ---------------------------------------------------------------------------------
// The row offsets (activation vec4 index of the row start) of the tile's 16 rows (rows past M
// repeat the last row; their results are dropped).
struct RowIx { i: array<u32, 16> }

// plane at activation vec4 index v (within the row) of row offset o
fn ld(o: u32, v: u32) -> AV {
#if A8
    if (Q8DOT) { return q[o + v]; }          // two's complement int8, as dot4I8Packed takes them
    return q[o + v] ^ vec4<u32>(BIAS);
#else
    let b = 4u * (o + v);
    return mat4x4<f32>(x[b], x[b + 1u], x[b + 2u], x[b + 3u]);
#endif
}

fn rows(ri: RowIx, v: u32) -> Rows {
    var r: Rows;
    r.r0 = ld(ri.i[0], v); r.r1 = ld(ri.i[1], v); r.r2 = ld(ri.i[2], v); r.r3 = ld(ri.i[3], v);
    if (RQ > 1u) { r.r4 = ld(ri.i[4], v); r.r5 = ld(ri.i[5], v); r.r6 = ld(ri.i[6], v); r.r7 = ld(ri.i[7], v); }
    if (RQ > 2u) { r.r8 = ld(ri.i[8], v); r.r9 = ld(ri.i[9], v); r.r10 = ld(ri.i[10], v); r.r11 = ld(ri.i[11], v); }
    if (RQ > 3u) { r.r12 = ld(ri.i[12], v); r.r13 = ld(ri.i[13], v); r.r14 = ld(ri.i[14], v); r.r15 = ld(ri.i[15], v); }
    return r;
}

#if SUBGROUPS
// (OCTETS, and Q8T's quads of 2 planes, QUADS2)
// lane l of an 8-lane group loads plane l % 4 of rows 8 h .. 8 h + 7, h = l / 4 % 2 (into r0 .. r7)
fn rows8(ri: RowIx, v: u32, h: u32) -> Rows {
    var r: Rows;
    let s = h == 1u;
    r.r0 = ld(select(ri.i[0], ri.i[8], s), v); r.r1 = ld(select(ri.i[1], ri.i[9], s), v);
    r.r2 = ld(select(ri.i[2], ri.i[10], s), v); r.r3 = ld(select(ri.i[3], ri.i[11], s), v);
    r.r4 = ld(select(ri.i[4], ri.i[12], s), v); r.r5 = ld(select(ri.i[5], ri.i[13], s), v);
    r.r6 = ld(select(ri.i[6], ri.i[14], s), v); r.r7 = ld(select(ri.i[7], ri.i[15], s), v);
    return r;
}

// a plane of the 16 rows: rows 0 .. 7 from lane a, 8 .. 15 from lane b
fn shuf8(m: Rows, a: u32, b: u32) -> Rows {
    var r: Rows;
    r.r0 = subgroupShuffle(m.r0, a); r.r1 = subgroupShuffle(m.r1, a); r.r2 = subgroupShuffle(m.r2, a); r.r3 = subgroupShuffle(m.r3, a);
    r.r4 = subgroupShuffle(m.r4, a); r.r5 = subgroupShuffle(m.r5, a); r.r6 = subgroupShuffle(m.r6, a); r.r7 = subgroupShuffle(m.r7, a);
    r.r8 = subgroupShuffle(m.r0, b); r.r9 = subgroupShuffle(m.r1, b); r.r10 = subgroupShuffle(m.r2, b); r.r11 = subgroupShuffle(m.r3, b);
    r.r12 = subgroupShuffle(m.r4, b); r.r13 = subgroupShuffle(m.r5, b); r.r14 = subgroupShuffle(m.r6, b); r.r15 = subgroupShuffle(m.r7, b);
    return r;
}
#endif

#if SUBGROUPS
fn shuf(a: Rows, src: u32) -> Rows {
    var r: Rows;
    r.r0 = subgroupShuffle(a.r0, src); r.r1 = subgroupShuffle(a.r1, src); r.r2 = subgroupShuffle(a.r2, src); r.r3 = subgroupShuffle(a.r3, src);
    if (RQ > 1u) { r.r4 = subgroupShuffle(a.r4, src); r.r5 = subgroupShuffle(a.r5, src); r.r6 = subgroupShuffle(a.r6, src); r.r7 = subgroupShuffle(a.r7, src); }
    if (RQ > 2u) { r.r8 = subgroupShuffle(a.r8, src); r.r9 = subgroupShuffle(a.r9, src); r.r10 = subgroupShuffle(a.r10, src); r.r11 = subgroupShuffle(a.r11, src); }
    if (RQ > 3u) { r.r12 = subgroupShuffle(a.r12, src); r.r13 = subgroupShuffle(a.r13, src); r.r14 = subgroupShuffle(a.r14, src); r.r15 = subgroupShuffle(a.r15, src); }
    return r;
}
#endif

// ---- the K loop ------------------------------------------------------------------------------------
fn dblk(t: u32, bi: u32) -> f32 { return fmt_dm(t, bi, 0u, 0u).x; }

// The block scales of the invocation's outputs (the d fields of Wts), once per block (PDM: per
// plane instead, plane_dm).
fn scales(o: array<u32, 16>, bi: u32) -> Wts {
    var w: Wts;
    if (PDM || Q8ROWS) { return w; }
    w.gd0 = vec4<f32>(dblk(0u, o[0] + bi), dblk(0u, o[1] + bi), dblk(0u, o[2] + bi), dblk(0u, o[3] + bi));
    if (NQ > 1u) {
        w.gd1 = vec4<f32>(dblk(0u, o[4] + bi), dblk(0u, o[5] + bi), dblk(0u, o[6] + bi), dblk(0u, o[7] + bi));
    }
    if (NQ > 2u) {
        w.gd2 = vec4<f32>(dblk(0u, o[8] + bi), dblk(0u, o[9] + bi), dblk(0u, o[10] + bi), dblk(0u, o[11] + bi));
    }
    if (NQ > 3u) {
        w.gd3 = vec4<f32>(dblk(0u, o[12] + bi), dblk(0u, o[13] + bi), dblk(0u, o[14] + bi), dblk(0u, o[15] + bi));
    }
#if GATE_UP
    w.ud0 = vec4<f32>(dblk(1u, o[0] + bi), dblk(1u, o[1] + bi), dblk(1u, o[2] + bi), dblk(1u, o[3] + bi));
    if (NQ > 1u) {
        w.ud1 = vec4<f32>(dblk(1u, o[4] + bi), dblk(1u, o[5] + bi), dblk(1u, o[6] + bi), dblk(1u, o[7] + bi));
    }
    if (NQ > 2u) {
        w.ud2 = vec4<f32>(dblk(1u, o[8] + bi), dblk(1u, o[9] + bi), dblk(1u, o[10] + bi), dblk(1u, o[11] + bi));
    }
    if (NQ > 3u) {
        w.ud3 = vec4<f32>(dblk(1u, o[12] + bi), dblk(1u, o[13] + bi), dblk(1u, o[14] + bi), dblk(1u, o[15] + bi));
    }
#endif
    return w;
}

// scales [0] and offsets [1] of plane p of unit u for 4 outputs (blocks a, b, c, d of tensor t)
fn dm4(t: u32, a: u32, b: u32, c: u32, d: u32, u: u32, p: u32) -> array<vec4<f32>, 2> {
    let x = fmt_dm(t, a, u, p);
    let y = fmt_dm(t, b, u, p);
    let z = fmt_dm(t, c, u, p);
    let v = fmt_dm(t, d, u, p);
    return array<vec4<f32>, 2>(vec4<f32>(x.x, y.x, z.x, v.x), vec4<f32>(x.y, y.y, z.y, v.y));
}

// PDM: w with plane p of unit u's scales and offsets (fmt_dm) in its d / m fields; else w as it is
// (the block's scales).
fn plane_dm(o: array<u32, 16>, bi: u32, u: u32, p: u32, w: Wts) -> Wts {
    if (!PDM || Q8ROWS) { return w; }
    var v = w;
    var q = dm4(0u, o[0] + bi, o[1] + bi, o[2] + bi, o[3] + bi, u, p);
    v.gd0 = q[0]; v.gm0 = q[1];
    if (NQ > 1u) { q = dm4(0u, o[4] + bi, o[5] + bi, o[6] + bi, o[7] + bi, u, p); v.gd1 = q[0]; v.gm1 = q[1]; }
    if (NQ > 2u) { q = dm4(0u, o[8] + bi, o[9] + bi, o[10] + bi, o[11] + bi, u, p); v.gd2 = q[0]; v.gm2 = q[1]; }
    if (NQ > 3u) { q = dm4(0u, o[12] + bi, o[13] + bi, o[14] + bi, o[15] + bi, u, p); v.gd3 = q[0]; v.gm3 = q[1]; }
#if GATE_UP
    q = dm4(1u, o[0] + bi, o[1] + bi, o[2] + bi, o[3] + bi, u, p);
    v.ud0 = q[0]; v.um0 = q[1];
    if (NQ > 1u) { q = dm4(1u, o[4] + bi, o[5] + bi, o[6] + bi, o[7] + bi, u, p); v.ud1 = q[0]; v.um1 = q[1]; }
    if (NQ > 2u) { q = dm4(1u, o[8] + bi, o[9] + bi, o[10] + bi, o[11] + bi, u, p); v.ud2 = q[0]; v.um2 = q[1]; }
    if (NQ > 3u) { q = dm4(1u, o[12] + bi, o[13] + bi, o[14] + bi, o[15] + bi, u, p); v.ud3 = q[0]; v.um3 = q[1]; }
#endif
    return v;
}

// The weight units u of block bi of the invocation's outputs, with the block's scales sc.
fn wts(o: array<u32, 16>, bi: u32, u: u32, sc: Wts) -> Wts {
    var w: Wts;
    w.g0 = unit(0u, o[0] + bi, u); w.g1 = unit(0u, o[1] + bi, u); w.g2 = unit(0u, o[2] + bi, u); w.g3 = unit(0u, o[3] + bi, u);
    w.gd0 = sc.gd0;
    if (NQ > 1u) {
        w.g4 = unit(0u, o[4] + bi, u); w.g5 = unit(0u, o[5] + bi, u); w.g6 = unit(0u, o[6] + bi, u); w.g7 = unit(0u, o[7] + bi, u);
        w.gd1 = sc.gd1;
    }
    if (NQ > 2u) {
        w.g8 = unit(0u, o[8] + bi, u); w.g9 = unit(0u, o[9] + bi, u); w.g10 = unit(0u, o[10] + bi, u); w.g11 = unit(0u, o[11] + bi, u);
        w.gd2 = sc.gd2;
    }
    if (NQ > 3u) {
        w.g12 = unit(0u, o[12] + bi, u); w.g13 = unit(0u, o[13] + bi, u); w.g14 = unit(0u, o[14] + bi, u); w.g15 = unit(0u, o[15] + bi, u);
        w.gd3 = sc.gd3;
    }
#if GATE_UP
    w.u0 = unit(1u, o[0] + bi, u); w.u1 = unit(1u, o[1] + bi, u); w.u2 = unit(1u, o[2] + bi, u); w.u3 = unit(1u, o[3] + bi, u);
    w.ud0 = sc.ud0;
    if (NQ > 1u) {
        w.u4 = unit(1u, o[4] + bi, u); w.u5 = unit(1u, o[5] + bi, u); w.u6 = unit(1u, o[6] + bi, u); w.u7 = unit(1u, o[7] + bi, u);
        w.ud1 = sc.ud1;
    }
    if (NQ > 2u) {
        w.u8 = unit(1u, o[8] + bi, u); w.u9 = unit(1u, o[9] + bi, u); w.u10 = unit(1u, o[10] + bi, u); w.u11 = unit(1u, o[11] + bi, u);
        w.ud2 = sc.ud2;
    }
    if (NQ > 3u) {
        w.u12 = unit(1u, o[12] + bi, u); w.u13 = unit(1u, o[13] + bi, u); w.u14 = unit(1u, o[14] + bi, u); w.u15 = unit(1u, o[15] + bi, u);
        w.ud3 = sc.ud3;
    }
#endif
    return w;
}

// Unit u of block b (of the row): its NP planes (and, after the last unit, the XW extra one).
fn do_unit(t: ptr<function, Tile>, ri: RowIx, o: array<u32, 16>, w: Wts, b: u32, u: u32, lane: u32) {
    let vb = b * (BLK / 16u);
#if SUBGROUPS
#if OCTETS
    // (NP = 4, RQ = 4, subgroups of a multiple of 8 lanes) the 8 lanes of a group share the loads:
    // lane l loads plane l % 4 of 8 rows; plane p of rows 0 .. 7 comes from lane p, of 8 .. 15 from 4 + p
    let m8 = rows8(ri, vb + upos(u, lane & 3u), (lane >> 2u) & 1u);
    let g = lane & ~7u;
    for (var p = 0u; p < NP; p++) { plane(t, shuf8(m8, g | p, g | 4u | p), plane_dm(o, b, u, p, w), p); }
#else
#if QUADS2
    // (q8 rows, 2 planes, RQ > 2: the launch spec's define) lane l of the quad loads plane l % 2 of 8
    // of the 16 rows, 8 h .. 8 h + 7 with h = l / 2 % 2: plane p of rows 0 .. 7 comes from lane p,
    // of 8 .. 15 from 2 + p
    let m8 = rows8(ri, vb + upos(u, lane & 1u), (lane >> 1u) & 1u);
    let g = lane & ~3u;
    for (var p = 0u; p < NP; p++) { plane(t, shuf8(m8, g | p, g | 2u | p), plane_dm(o, b, u, p, w), p); }
#else
    // lane l of the quad loads planes l and l + 4 (NP <= 8) of every row; plane p comes from lane p % 4
    let mine0 = rows(ri, vb + upos(u, min(lane & 3u, NP - 1u)));
    var mine1 = mine0;
    var v1 = vb + upos(u, min((lane & 3u) + 4u, NP - 1u));
    // the extra plane (TQ1_0, NP = 5: word 12, vec4 15) is lane 1's second load in the last unit
    if (XW > 0u && u == NU - 1u && (lane & 3u) == 1u) { v1 = vb + fmt_pos(4u * NU, 0u) / 4u; }
    if (NP > 4u) { mine1 = rows(ri, v1); }
    for (var p = 0u; p < NP; p++) {
        var mine = mine0;
        if (p >= 4u) { mine = mine1; }
        plane(t, shuf(mine, (lane & ~3u) | (p & 3u)), plane_dm(o, b, u, p, w), p);
    }
    if (XW > 0u && u == NU - 1u) { xplane(t, shuf(mine1, (lane & ~3u) | 1u), o, b, w); }
#endif
#endif
#else
    for (var p = 0u; p < NP; p++) { plane(t, rows(ri, vb + upos(u, p)), plane_dm(o, b, u, p, w), p); }
    if (XW > 0u && u == NU - 1u) { xplane(t, rows(ri, vb + fmt_pos(4u * NU, 0u) / 4u), o, b, w); }
#endif
}

// The code word after the last unit (XW = 1: TQ1_0's 13th): groups g = 0..3 hold values
// 4 fmt_pos(k, g) .. + 3 = activation vec4 fmt_pos(k, 0) / 4 (TQ1_0: 15), word g: a plane whose word
// e is group e of the one code word (PDM: the scales of plane 0 of "unit" NU).
fn xplane(t: ptr<function, Tile>, r: Rows, o: array<u32, 16>, bi: u32, sc0: Wts) {
    var w: Wts;
    let k = 4u * NU;
    let sc = plane_dm(o, bi, NU, 0u, sc0);
    w.g0 = vec4<u32>(fmt_word(0u, o[0] + bi, k)); w.g1 = vec4<u32>(fmt_word(0u, o[1] + bi, k));
    w.g2 = vec4<u32>(fmt_word(0u, o[2] + bi, k)); w.g3 = vec4<u32>(fmt_word(0u, o[3] + bi, k));
    w.gd0 = sc.gd0;
    if (NQ > 1u) {
        w.g4 = vec4<u32>(fmt_word(0u, o[4] + bi, k)); w.g5 = vec4<u32>(fmt_word(0u, o[5] + bi, k));
        w.g6 = vec4<u32>(fmt_word(0u, o[6] + bi, k)); w.g7 = vec4<u32>(fmt_word(0u, o[7] + bi, k));
        w.gd1 = sc.gd1;
    }
    if (NQ > 2u) {
        w.g8 = vec4<u32>(fmt_word(0u, o[8] + bi, k)); w.g9 = vec4<u32>(fmt_word(0u, o[9] + bi, k)); w.g10 = vec4<u32>(fmt_word(0u, o[10] + bi, k)); w.g11 = vec4<u32>(fmt_word(0u, o[11] + bi, k));
        w.gd2 = sc.gd2;
    }
    if (NQ > 3u) {
        w.g12 = vec4<u32>(fmt_word(0u, o[12] + bi, k)); w.g13 = vec4<u32>(fmt_word(0u, o[13] + bi, k)); w.g14 = vec4<u32>(fmt_word(0u, o[14] + bi, k)); w.g15 = vec4<u32>(fmt_word(0u, o[15] + bi, k));
        w.gd3 = sc.gd3;
    }
    w.gm0 = sc.gm0; w.gm1 = sc.gm1; w.gm2 = sc.gm2; w.gm3 = sc.gm3;
#if GATE_UP
    w.u0 = vec4<u32>(fmt_word(1u, o[0] + bi, k)); w.u1 = vec4<u32>(fmt_word(1u, o[1] + bi, k));
    w.u2 = vec4<u32>(fmt_word(1u, o[2] + bi, k)); w.u3 = vec4<u32>(fmt_word(1u, o[3] + bi, k));
    w.ud0 = sc.ud0;
    if (NQ > 1u) {
        w.u4 = vec4<u32>(fmt_word(1u, o[4] + bi, k)); w.u5 = vec4<u32>(fmt_word(1u, o[5] + bi, k));
        w.u6 = vec4<u32>(fmt_word(1u, o[6] + bi, k)); w.u7 = vec4<u32>(fmt_word(1u, o[7] + bi, k));
        w.ud1 = sc.ud1;
    }
    if (NQ > 2u) {
        w.u8 = vec4<u32>(fmt_word(1u, o[8] + bi, k)); w.u9 = vec4<u32>(fmt_word(1u, o[9] + bi, k)); w.u10 = vec4<u32>(fmt_word(1u, o[10] + bi, k)); w.u11 = vec4<u32>(fmt_word(1u, o[11] + bi, k));
        w.ud2 = sc.ud2;
    }
    if (NQ > 3u) {
        w.u12 = vec4<u32>(fmt_word(1u, o[12] + bi, k)); w.u13 = vec4<u32>(fmt_word(1u, o[13] + bi, k)); w.u14 = vec4<u32>(fmt_word(1u, o[14] + bi, k)); w.u15 = vec4<u32>(fmt_word(1u, o[15] + bi, k));
        w.ud3 = sc.ud3;
    }
    w.um0 = sc.um0; w.um1 = sc.um1; w.um2 = sc.um2; w.um3 = sc.um3;
#endif
    tail_plane(t, r, w);
}

fn tail_plane(t: ptr<function, Tile>, r: Rows, w: Wts) {
    for (var e = 0u; e < 4u; e++) { tail_word(t, r, w, e); }
}

// group e of a code word
fn grp(w: u32, e: u32) -> u32 { return fmt_group(w, e); }

// word e of the tail plane: group e of the code word
fn tail_word(t: ptr<function, Tile>, r: Rows, w: Wts, e: u32) {
    var q: WQ;
    q.v0 = wdec(vec4<u32>(grp(w.g0.x, e), grp(w.g1.x, e), grp(w.g2.x, e), grp(w.g3.x, e)), w.gd0, w.gm0);
    q.v1 = wdec(vec4<u32>(grp(w.g4.x, e), grp(w.g5.x, e), grp(w.g6.x, e), grp(w.g7.x, e)), w.gd1, w.gm1);
    q.v2 = wdec(vec4<u32>(grp(w.g8.x, e), grp(w.g9.x, e), grp(w.g10.x, e), grp(w.g11.x, e)), w.gd2, w.gm2);
    q.v3 = wdec(vec4<u32>(grp(w.g12.x, e), grp(w.g13.x, e), grp(w.g14.x, e), grp(w.g15.x, e)), w.gd3, w.gm3);
#if GATE_UP
    q.z0 = wdec(vec4<u32>(grp(w.u0.x, e), grp(w.u1.x, e), grp(w.u2.x, e), grp(w.u3.x, e)), w.ud0, w.um0);
    q.z1 = wdec(vec4<u32>(grp(w.u4.x, e), grp(w.u5.x, e), grp(w.u6.x, e), grp(w.u7.x, e)), w.ud1, w.um1);
    q.z2 = wdec(vec4<u32>(grp(w.u8.x, e), grp(w.u9.x, e), grp(w.u10.x, e), grp(w.u11.x, e)), w.ud2, w.um2);
    q.z3 = wdec(vec4<u32>(grp(w.u12.x, e), grp(w.u13.x, e), grp(w.u14.x, e), grp(w.u15.x, e)), w.ud3, w.um3);
#endif
    macs(t, r, q, e);
}

#if Q8T
// ---- Q8T: ggml's vec_dot per block -------------------------------------------------------------
// The tile t holds block b's sums I[m, n] = sum (c - ZP) q, integers (|I| <= 32 * 128 * 128 < 2^24:
// every partial sum exact); acc[m, n] += (dw[n] dx[m]) I (+ mw[n] sx[m]): bitlinear.wgsl's Q8B
// block term (fmt_unit) bit for bit, summed over the blocks in another order than the decode kernel.

// (dx, sx) of row quad i (rows 4 i .. 4 i + 3) at block b: [0] dx, [1] sx, vectors over the rows
fn rxs(xi: array<u32, 16>, i: u32, b: u32) -> array<vec4<f32>, 2> {
    let a = s[xi[4u * i] + b];
    let c = s[xi[4u * i + 1u] + b];
    let e = s[xi[4u * i + 2u] + b];
    let g = s[xi[4u * i + 3u] + b];
    return array<vec4<f32>, 2>(vec4<f32>(a.x, c.x, e.x, g.x), vec4<f32>(a.y, c.y, e.y, g.y));
}

// the block term of one output (column of 4 rows): (dw dx) I (+ mw sx)
fn bterm(i: vec4<f32>, x: array<vec4<f32>, 2>, dw: f32, mw: f32) -> vec4<f32> {
    if (PDM) { return (dw * x[0]) * i + mw * x[1]; }
    return (dw * x[0]) * i;
}

// a + the block terms of I (4 rows x 4 outputs; w: the outputs' [0] d, [1] m)
fn bsum(a: mat4x4<f32>, i: mat4x4<f32>, x: array<vec4<f32>, 2>, w: array<vec4<f32>, 2>) -> mat4x4<f32> {
    return mat4x4<f32>(a[0] + bterm(i[0], x, w[0].x, w[1].x), a[1] + bterm(i[1], x, w[0].y, w[1].y),
                       a[2] + bterm(i[2], x, w[0].z, w[1].z), a[3] + bterm(i[3], x, w[0].w, w[1].w));
}

fn bflush(acc: ptr<function, Tile>, t: ptr<function, Tile>, o: array<u32, 16>, xi: array<u32, 16>, b: u32) {
    let g0 = dm4(0u, o[0] + b, o[1] + b, o[2] + b, o[3] + b, 0u, 0u);
    var g1 = g0;
    var g2 = g0;
    var g3 = g0;
    if (NQ > 1u) { g1 = dm4(0u, o[4] + b, o[5] + b, o[6] + b, o[7] + b, 0u, 0u); }
    if (NQ > 2u) { g2 = dm4(0u, o[8] + b, o[9] + b, o[10] + b, o[11] + b, 0u, 0u); }
    if (NQ > 3u) { g3 = dm4(0u, o[12] + b, o[13] + b, o[14] + b, o[15] + b, 0u, 0u); }
#if GATE_UP
    let u0 = dm4(1u, o[0] + b, o[1] + b, o[2] + b, o[3] + b, 0u, 0u);
    var u1 = u0;
    var u2 = u0;
    var u3 = u0;
    if (NQ > 1u) { u1 = dm4(1u, o[4] + b, o[5] + b, o[6] + b, o[7] + b, 0u, 0u); }
    if (NQ > 2u) { u2 = dm4(1u, o[8] + b, o[9] + b, o[10] + b, o[11] + b, 0u, 0u); }
    if (NQ > 3u) { u3 = dm4(1u, o[12] + b, o[13] + b, o[14] + b, o[15] + b, 0u, 0u); }
#endif
    {
        let x = rxs(xi, 0u, b);
        (*acc).a00 = bsum((*acc).a00, (*t).a00, x, g0);
        if (NQ > 1u) { (*acc).a01 = bsum((*acc).a01, (*t).a01, x, g1); }
        if (NQ > 2u) { (*acc).a02 = bsum((*acc).a02, (*t).a02, x, g2); }
        if (NQ > 3u) { (*acc).a03 = bsum((*acc).a03, (*t).a03, x, g3); }
#if GATE_UP
        (*acc).up00 = bsum((*acc).up00, (*t).up00, x, u0);
        if (NQ > 1u) { (*acc).up01 = bsum((*acc).up01, (*t).up01, x, u1); }
        if (NQ > 2u) { (*acc).up02 = bsum((*acc).up02, (*t).up02, x, u2); }
        if (NQ > 3u) { (*acc).up03 = bsum((*acc).up03, (*t).up03, x, u3); }
#endif
    }
    if (RQ > 1u) {
        let x = rxs(xi, 1u, b);
        (*acc).a10 = bsum((*acc).a10, (*t).a10, x, g0);
        if (NQ > 1u) { (*acc).a11 = bsum((*acc).a11, (*t).a11, x, g1); }
        if (NQ > 2u) { (*acc).a12 = bsum((*acc).a12, (*t).a12, x, g2); }
        if (NQ > 3u) { (*acc).a13 = bsum((*acc).a13, (*t).a13, x, g3); }
#if GATE_UP
        (*acc).up10 = bsum((*acc).up10, (*t).up10, x, u0);
        if (NQ > 1u) { (*acc).up11 = bsum((*acc).up11, (*t).up11, x, u1); }
        if (NQ > 2u) { (*acc).up12 = bsum((*acc).up12, (*t).up12, x, u2); }
        if (NQ > 3u) { (*acc).up13 = bsum((*acc).up13, (*t).up13, x, u3); }
#endif
    }
    if (RQ > 2u) {
        let x = rxs(xi, 2u, b);
        (*acc).a20 = bsum((*acc).a20, (*t).a20, x, g0);
        if (NQ > 1u) { (*acc).a21 = bsum((*acc).a21, (*t).a21, x, g1); }
        if (NQ > 2u) { (*acc).a22 = bsum((*acc).a22, (*t).a22, x, g2); }
        if (NQ > 3u) { (*acc).a23 = bsum((*acc).a23, (*t).a23, x, g3); }
#if GATE_UP
        (*acc).up20 = bsum((*acc).up20, (*t).up20, x, u0);
        if (NQ > 1u) { (*acc).up21 = bsum((*acc).up21, (*t).up21, x, u1); }
        if (NQ > 2u) { (*acc).up22 = bsum((*acc).up22, (*t).up22, x, u2); }
        if (NQ > 3u) { (*acc).up23 = bsum((*acc).up23, (*t).up23, x, u3); }
#endif
    }
    if (RQ > 3u) {
        let x = rxs(xi, 3u, b);
        (*acc).a30 = bsum((*acc).a30, (*t).a30, x, g0);
        if (NQ > 1u) { (*acc).a31 = bsum((*acc).a31, (*t).a31, x, g1); }
        if (NQ > 2u) { (*acc).a32 = bsum((*acc).a32, (*t).a32, x, g2); }
        if (NQ > 3u) { (*acc).a33 = bsum((*acc).a33, (*t).a33, x, g3); }
#if GATE_UP
        (*acc).up30 = bsum((*acc).up30, (*t).up30, x, u0);
        if (NQ > 1u) { (*acc).up31 = bsum((*acc).up31, (*t).up31, x, u1); }
        if (NQ > 2u) { (*acc).up32 = bsum((*acc).up32, (*t).up32, x, u2); }
        if (NQ > 3u) { (*acc).up33 = bsum((*acc).up33, (*t).up33, x, u3); }
#endif
    }
}
#endif

#if Q8T
#if DOT4
// ---- Q8T with DOT4: the block's integer sums by dot4I8Packed ---------------------------------------
// One plane (16 values: 4 code words of each output, 4 activation words of each row): per row r
// and output n, sum_e dot4(code8 of word e of n, word e of r): the tile's integer sums I of the
// f32 path, exactly (|I| < 2^24), with a dot4 per 4 multiply-adds and no byte decoding to f32.

// the 4 packed int8 code words (c - ZP) of plane p of an output's unit
fn kplane(g: vec4<u32>, p: u32) -> vec4<u32> {
    return vec4<u32>(code8(ucodes(g, p, 0u)), code8(ucodes(g, p, 1u)), code8(ucodes(g, p, 2u)), code8(ucodes(g, p, 3u)));
}

// one row's plane x against one output's k
fn idot(x: vec4<u32>, k: vec4<u32>) -> i32 {
    return dot4(x.x, k.x) + dot4(x.y, k.y) + dot4(x.z, k.z) + dot4(x.w, k.w);
}

// a + the sums of rows a..d (column c: output c of k0..k3)
fn imac(t: mat4x4<f32>, a: vec4<u32>, b: vec4<u32>, c: vec4<u32>, d: vec4<u32>,
        k0: vec4<u32>, k1: vec4<u32>, k2: vec4<u32>, k3: vec4<u32>) -> mat4x4<f32> {
    return mat4x4<f32>(
        t[0] + vec4<f32>(vec4<i32>(idot(a, k0), idot(b, k0), idot(c, k0), idot(d, k0))),
        t[1] + vec4<f32>(vec4<i32>(idot(a, k1), idot(b, k1), idot(c, k1), idot(d, k1))),
        t[2] + vec4<f32>(vec4<i32>(idot(a, k2), idot(b, k2), idot(c, k2), idot(d, k2))),
        t[3] + vec4<f32>(vec4<i32>(idot(a, k3), idot(b, k3), idot(c, k3), idot(d, k3))));
}

// a plane of a row quad (a..d) against the NQ output quads (the gate's; GATE_UP: and the up's)
fn irq(t0: mat4x4<f32>, t1: mat4x4<f32>, t2: mat4x4<f32>, t3: mat4x4<f32>, a: vec4<u32>, b: vec4<u32>,
       c: vec4<u32>, d: vec4<u32>, k: array<vec4<u32>, 16>) -> array<mat4x4<f32>, 4> {
    var o = array<mat4x4<f32>, 4>(imac(t0, a, b, c, d, k[0], k[1], k[2], k[3]), t1, t2, t3);
    if (NQ > 1u) { o[1] = imac(t1, a, b, c, d, k[4], k[5], k[6], k[7]); }
    if (NQ > 2u) { o[2] = imac(t2, a, b, c, d, k[8], k[9], k[10], k[11]); }
    if (NQ > 3u) { o[3] = imac(t3, a, b, c, d, k[12], k[13], k[14], k[15]); }
    return o;
}

fn iplane(t: ptr<function, Tile>, r: Rows, w: Wts, p: u32) {
    var k: array<vec4<u32>, 16>;
    k[0] = kplane(w.g0, p); k[1] = kplane(w.g1, p); k[2] = kplane(w.g2, p); k[3] = kplane(w.g3, p);
    if (NQ > 1u) { k[4] = kplane(w.g4, p); k[5] = kplane(w.g5, p); k[6] = kplane(w.g6, p); k[7] = kplane(w.g7, p); }
    if (NQ > 2u) { k[8] = kplane(w.g8, p); k[9] = kplane(w.g9, p); k[10] = kplane(w.g10, p); k[11] = kplane(w.g11, p); }
    if (NQ > 3u) { k[12] = kplane(w.g12, p); k[13] = kplane(w.g13, p); k[14] = kplane(w.g14, p); k[15] = kplane(w.g15, p); }
    var o = irq((*t).a00, (*t).a01, (*t).a02, (*t).a03, r.r0, r.r1, r.r2, r.r3, k);
    (*t).a00 = o[0]; (*t).a01 = o[1]; (*t).a02 = o[2]; (*t).a03 = o[3];
    if (RQ > 1u) {
        o = irq((*t).a10, (*t).a11, (*t).a12, (*t).a13, r.r4, r.r5, r.r6, r.r7, k);
        (*t).a10 = o[0]; (*t).a11 = o[1]; (*t).a12 = o[2]; (*t).a13 = o[3];
    }
    if (RQ > 2u) {
        o = irq((*t).a20, (*t).a21, (*t).a22, (*t).a23, r.r8, r.r9, r.r10, r.r11, k);
        (*t).a20 = o[0]; (*t).a21 = o[1]; (*t).a22 = o[2]; (*t).a23 = o[3];
    }
    if (RQ > 3u) {
        o = irq((*t).a30, (*t).a31, (*t).a32, (*t).a33, r.r12, r.r13, r.r14, r.r15, k);
        (*t).a30 = o[0]; (*t).a31 = o[1]; (*t).a32 = o[2]; (*t).a33 = o[3];
    }
#if GATE_UP
    k[0] = kplane(w.u0, p); k[1] = kplane(w.u1, p); k[2] = kplane(w.u2, p); k[3] = kplane(w.u3, p);
    if (NQ > 1u) { k[4] = kplane(w.u4, p); k[5] = kplane(w.u5, p); k[6] = kplane(w.u6, p); k[7] = kplane(w.u7, p); }
    if (NQ > 2u) { k[8] = kplane(w.u8, p); k[9] = kplane(w.u9, p); k[10] = kplane(w.u10, p); k[11] = kplane(w.u11, p); }
    if (NQ > 3u) { k[12] = kplane(w.u12, p); k[13] = kplane(w.u13, p); k[14] = kplane(w.u14, p); k[15] = kplane(w.u15, p); }
    o = irq((*t).up00, (*t).up01, (*t).up02, (*t).up03, r.r0, r.r1, r.r2, r.r3, k);
    (*t).up00 = o[0]; (*t).up01 = o[1]; (*t).up02 = o[2]; (*t).up03 = o[3];
    if (RQ > 1u) {
        o = irq((*t).up10, (*t).up11, (*t).up12, (*t).up13, r.r4, r.r5, r.r6, r.r7, k);
        (*t).up10 = o[0]; (*t).up11 = o[1]; (*t).up12 = o[2]; (*t).up13 = o[3];
    }
    if (RQ > 2u) {
        o = irq((*t).up20, (*t).up21, (*t).up22, (*t).up23, r.r8, r.r9, r.r10, r.r11, k);
        (*t).up20 = o[0]; (*t).up21 = o[1]; (*t).up22 = o[2]; (*t).up23 = o[3];
    }
    if (RQ > 3u) {
        o = irq((*t).up30, (*t).up31, (*t).up32, (*t).up33, r.r12, r.r13, r.r14, r.r15, k);
        (*t).up30 = o[0]; (*t).up31 = o[1]; (*t).up32 = o[2]; (*t).up33 = o[3];
    }
#endif
}
#endif
#endif

// ---- output --------------------------------------------------------------------------------------
// Rows m0 .. m0 + 3 x outputs n0 .. n0 + 3 of P (gate_up: act(Pg) * Pu).
fn store(m0: u32, n0: u32, a: mat4x4<f32>, u: mat4x4<f32>) {
    let mrows = params[0];
    let stride = select(Y_STRIDE, n_out(), Y_STRIDE == 0u);
    let ws0 = fmt_ws(0u, n_out() * NB);
#if GATE_UP
    let ws1 = fmt_ws(1u, n_out() * NB);
#endif
    for (var r = 0u; r < 4u; r++) {
        let m = m0 + r;
        if (m >= mrows) { break; }
#if Q8T
        let f0 = ws0 * mult[0];
#if GATE_UP
        let f1 = ws1 * mult[1];
#endif
#elif A8
        let f0 = ws0 * s[m] * mult[0];
#if GATE_UP
        let f1 = ws1 * s[m] * mult[1];
#endif
#else
        let f0 = ws0 * mult[0];
#if GATE_UP
        let f1 = ws1 * mult[1];
#endif
#endif
        for (var c = 0u; c < 4u; c++) {
            let n = n0 + c;
            if (n < n_out()) {
                let o = m * stride + Y_COL0 + n;
#if GATE_UP
                y[o] = act(a[c][r] * f0) * (u[c][r] * f1);
#elif RESIDUAL
                y[o] = y[o] + a[c][r] * f0;
#else
                y[o] = a[c][r] * f0;
#endif
            }
        }
    }
}

// Rows m0 .. m0 + 3 of the NQ output quads from n0 (gate_up: a gate, u up; else u unused).
fn store_rq(m0: u32, n0: u32, a0: mat4x4<f32>, a1: mat4x4<f32>, a2: mat4x4<f32>, a3: mat4x4<f32>,
            u0: mat4x4<f32>, u1: mat4x4<f32>, u2: mat4x4<f32>, u3: mat4x4<f32>) {
    store(m0, n0, a0, u0);
    if (NQ > 1u) { store(m0, n0 + 4u, a1, u1); }
    if (NQ > 2u) { store(m0, n0 + 8u, a2, u2); }
    if (NQ > 3u) { store(m0, n0 + 12u, a3, u3); }
}

fn body(li: u32, wid: vec3<u32>, lane: u32) {
    let last = max(params[0], 1u) - 1u;
    let m0 = wid.y * (4u * RQ);
    let n0 = (wid.x * WG + li) * (4u * NQ);
    var ri: RowIx;
    for (var r = 0u; r < 16u; r++) { ri.i[r] = min(m0 + r, last) * (N_IN / 16u); }
    var o: array<u32, 16>;                         // first block of each output row (past N_OUT: the last)
    for (var c = 0u; c < 16u; c++) { o[c] = min(n0 + c, n_out() - 1u) * NB; }
    var t: Tile;
#if Q8T
    var xi: array<u32, 16>;                        // each row's first (dx, sx)
    for (var r = 0u; r < 16u; r++) { xi[r] = min(m0 + r, last) * NB; }
    var acc: Tile;
    for (var b = 0u; b < NB; b++) {
        t = Tile();                                // the block's integer sums
        let sc = scales(o, b);
        for (var u = 0u; u < NU; u++) {
            do_unit(&t, ri, o, wts(o, b, u, sc), b, u, lane);
        }
        bflush(&acc, &t, o, xi, b);
    }
    t = acc;
#else
    for (var b = 0u; b < NB; b++) {
        let sc = scales(o, b);
        for (var u = 0u; u < NU; u++) {
            do_unit(&t, ri, o, wts(o, b, u, sc), b, u, lane);
        }
    }
#endif
#if GATE_UP
    store_rq(m0, n0, t.a00, t.a01, t.a02, t.a03, t.up00, t.up01, t.up02, t.up03);
    if (RQ > 1u) { store_rq(m0 + 4u, n0, t.a10, t.a11, t.a12, t.a13, t.up10, t.up11, t.up12, t.up13); }
    if (RQ > 2u) { store_rq(m0 + 8u, n0, t.a20, t.a21, t.a22, t.a23, t.up20, t.up21, t.up22, t.up23); }
    if (RQ > 3u) { store_rq(m0 + 12u, n0, t.a30, t.a31, t.a32, t.a33, t.up30, t.up31, t.up32, t.up33); }
#else
    let z = mat4x4<f32>();
    store_rq(m0, n0, t.a00, t.a01, t.a02, t.a03, z, z, z, z);
    if (RQ > 1u) { store_rq(m0 + 4u, n0, t.a10, t.a11, t.a12, t.a13, z, z, z, z); }
    if (RQ > 2u) { store_rq(m0 + 8u, n0, t.a20, t.a21, t.a22, t.a23, z, z, z, z); }
    if (RQ > 3u) { store_rq(m0 + 12u, n0, t.a30, t.a31, t.a32, t.a33, z, z, z, z); }
#endif
}

#if SUBGROUPS
#if GATE_UP
@compute @workgroup_size(WG)
fn gate_up(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wid: vec3<u32>,
           @builtin(subgroup_invocation_id) sid: u32) {
    body(li, wid, sid);
}
#else
@compute @workgroup_size(WG)
fn matmul(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wid: vec3<u32>,
          @builtin(subgroup_invocation_id) sid: u32) {
    body(li, wid, sid);
}
#endif
#else
#if GATE_UP
@compute @workgroup_size(WG)
fn gate_up(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    body(li, wid, 0u);
}
#else
@compute @workgroup_size(WG)
fn matmul(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    body(li, wid, 0u);
}
#endif
#endif
