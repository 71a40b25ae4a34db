// bitlinear.wgsl: M=1 GEMV over packed GGUF weights (the packed formats), with the fusions of one
// decoder step (launch specs: pyapp/bitweb/kernels/bitlinear.py; numpy mirror: bitweb/ref/bitlinear.py).
//
// Entry points (one per pipeline, chosen by define):
//   gemv     (GATE_UP off)  y[r] (+)= p[r]                                   r over PARTS tensors
//   gate_up  (GATE_UP on)   y[r]  = act(p_gate[r]) * p_up[r]                act: relu(.)^2, or silu with ACT_SILU
//
// Maths, for output row r of part t (weights W_t, rows concatenated part after part into y):
//   m[j]  = x[j] * nw[j]                     (NORM)      or  x[j]
//   rinv  = inverseSqrt(sum_j x[j]^2 / N_IN + EPS)                (NORM; rmsnorm(x) = m * rinv)
//   f32 activations:  S[r] = sum_b d[b] * sum_{j in b} w[r,j] * m[j]                f32 accumulation
//                     p[r] = S[r] * (ws_t * rinv * mult[t])           (ws_t: a tensor scale, I2_S's; d = 1)
//   A8 (W1.58A8):     amax = max_j |m[j]|;  a = amax * rinv (NORM) or amax   (= max|n| of n = m * rinv)
//                     q[j] = clamp(round(m[j] * sq), -128, 127),  sq = 127 / amax  if a >= 1e-5
//                                                                  sq = 127e5 * rinv (NORM) / 127e5 otherwise
//                     (= round(n * s) with s = 127 / max(max|n|, 1e-5): rinv cancels in exact arithmetic)
//                     S[r] = sum_b d[b] * I[r,b],  I[r,b] = sum_{j in b} w[r,j] * q[j]   (exact int32)
//                     p[r] = S[r] * (ws_t * inv_s * mult[t]),  inv_s = max(a, 1e-5) * (1/127) (= 1/s)
//   Q8B (A8 on ggml's 32-value block types: Format.vec_dot; ggml-cpu's quantize_row_q8_0 / q8_1
//   and vec_dot_*_q8_0 / q8_1, x86):
//                     rinv = 1 / sqrt(sum_j x[j]^2 / N_IN + EPS)  (NORM; sqrt and division, not inverseSqrt)
//                     n[j] = (x[j] * rinv) * nw[j]  (NORM)  or  x[j]          (ggml: rms_norm, then mul)
//                     per block c of 32: amax = max |n|, d = amax / 127, id = 127 / amax (0 if amax = 0)
//                     q[j] = clamp(round(n[j] * id), -128, 127),  dx = f16(d),  sx = f16(d * f32(sum q))
//                     T[r,c] = (dw * dx) * f32(I[r,c])  (+ mw * sx: an offset format; q8_1's s)
//                     p[r] = (sum_c T[r,c]) * (ws * 1 * mult[t])      f32 sum over c (lane order)
//                     f16(v): round to nearest even f16 as f32 (f16r: exact, subnormals too)
//   RESIDUAL: y[r] = y[r] + p[r] (y holds the residual stream on entry; in place)
// round() is round-half-to-even (as numpy and torch). Terms missing from a format read as 1
// (ws for block formats, d for I2_S, rinv without NORM). A format with offsets adds m sum_{j in u}
// m[j] (A8: q[j]) per unit u to S (value = q d + m).
//
// Weights: each part's binding is the raw bytes of one GGUF tensor (ne = [N_IN, ROWSt]), bound as
// the format's array<WT> (little endian: u32 words; I2_S vec4<u32>). The format's layout and decode
// come from its include (`#include format`: shaders/fmt_<name>.wgsl, the packed-format interface in
// shaders/common_codes.wgsl): blocks of BLK values, UPK lane units per block, tensor scale ws
// (fmt_ws), and fmt_unit: a unit's sum of w . a with its scales (and offsets) applied.
//
// The work unit of one lane is UW code words of one block (TQ2_0, Q2_0 and I2_S 4 words, 64 values,
// one 16-byte read and one block scale; TQ1_0 4 words, 80 values, plus its share of the block's 13th
// word; Q1_0 one word, 32). A8 activations sit in workgroup memory as vec4<u32> (16 int8); where a
// unit's groups are whole vec4s (the format's UACT) a unit reads QG (or 4) vec4s, not UN single
// words (common_packed.wgsl's unit_acts otherwise). A8 turns each group's codes into packed int8
// c - ZP and takes dot4I8Packed against 4 packed activations (plain-integer fallback without DOT4);
// f32 turns them into vec4<f32> c - ZP. I2_S's A8 unit sums the codes directly, sum (c-1) q =
// sum c q - sum q: the row's sum q, times the format's ZROW, is subtracted once (finish).
//
// Buffers (in binding order, the loader numbers those that exist):
//   x     f32[N_IN]             input (the residual stream, or the attention / FFN output)
//   nw    f32[N_IN]             norm weight                                      (NORM)
//   mult  f32[PARTS] / f32[2]   output multipliers per part (gate, up); 1.0 when the model has none
//   y     f32[sum ROWSt]        output (read first with RESIDUAL); must not alias x
//   w0, w1, w2                  weight tensors (w1 with PARTS2 (gate_up: up), w2 with PARTS3)
//   shape u32[7]                (SHAPE) n_in, rows of parts 0..2, rows per workgroup, y index of
//                               row 0, residual (0 / 1); N_IN is then the largest n_in of the
//                               linears sharing the pipeline
//
// Threads: a workgroup of WG computes RPW consecutive output rows (every workgroup recomputes the
// norm / quantisation of x, so RPW amortises it). It is split into lane groups of LN lanes: one
// subgroup (SUBGROUPS: LN = min(subgroup_size, WG), reduction by subgroupAdd; the subgroups of a
// workgroup are taken to be consecutive local indices) or LANES threads (shared-memory tree
// reduction). A lane group computes RB rows at once (the activation loads are shared by those
// rows); its lanes stride over the weight words of the rows (consecutive lanes, consecutive words).
// Activations sit in workgroup memory: packed int8 (A8), f32 m (XSHARED), or are read from x.
// The norm statistics: sum x^2 by a shared-memory tree in a fixed order (the prefill rmsnorm
// kernel's, so A8 rows match), in q's words with SUBGROUPS (all read before q is written); max|m|
// by atomicMax of its bits (exact in any order).
// Defines: FORMAT (the bitweb.formats Format: its include), A8, Q8B (with A8), NORM, RESIDUAL, PARTS2, PARTS3,
// GATE_UP, ACT_SILU, XSHARED, SUBGROUPS, DOT4, SHAPE (see bitweb/kernels/bitlinear.py).

override WG: u32 = 64u;        // threads per workgroup (power of two)
override N_IN: u32 = 256u;     // input length, a multiple of the format's block
override ROWS0: u32 = 1u;      // rows of part 0 (gate_up: of each of gate and up)
override ROWS1: u32 = 0u;      // rows of part 1 (PARTS2)
override ROWS2: u32 = 0u;      // rows of part 2 (PARTS3)
override RPW: u32 = 8u;        // rows per workgroup
override RB: u32 = 1u;         // rows per lane group at once, 1..4
override LANES: u32 = 16u;     // lanes per row without subgroups (power of two, divides WG)
override EPS: f32 = 1e-5;      // rmsnorm epsilon
override N4: u32 = N_IN / 4u;                       // derived: words of packed int8 / vec4s of x
#if SUBGROUPS
override RED_N: u32 = WG;                           // derived: reduction scratch (the norm's sum)
#else
override RED_N: u32 = WG * max(1u, 2u * RB);        // derived: reduction scratch (2 sums per row)
#endif

const MAXRB: u32 = 4u;

#include format

@group(0) @binding(auto) var<storage, read> x: array<vec4<f32>>;
#if NORM
@group(0) @binding(auto) var<storage, read> nw: array<vec4<f32>>;
#endif
@group(0) @binding(auto) var<storage, read> mult: array<f32>;
@group(0) @binding(auto) var<storage, read_write> y: array<f32>;
@group(0) @binding(auto) var<storage, read> w0: array<WT>;
#if PARTS2
@group(0) @binding(auto) var<storage, read> w1: array<WT>;
#endif
#if PARTS3
@group(0) @binding(auto) var<storage, read> w2: array<WT>;
#endif
#if SHAPE
@group(0) @binding(auto) var<storage, read> shape: Shape;
#endif

// ---- the shape: override constants, or (SHAPE) read at run time ---------------------------------
// SHAPE: linears that differ only in their shape share one pipeline (one compile instead of one
// per shape; SwiftShader's compiles are the browser's ready time): n_in, the rows, rows per
// workgroup, where y starts and whether to add to it come from a small buffer (kernels/bitlinear.py
// shape_bytes) and N_IN is the largest n_in (it sizes the activations' workgroup memory). The
// fusions that touch every unit (parts, GATE_UP) stay defines: a CPU rasteriser runs both sides of
// a branch (lanes masked), so a run-time switch between them would cost every dispatch the work
// of all of them; the residual add is once per row.
struct Shape {
    n_in: u32,
    rows0: u32,
    rows1: u32,
    rows2: u32,
    rpw: u32,
    y0: u32,        // y index of row 0 (one part of a wider output: q, k or v of qkv)
    residual: u32,  // 1: y += p (RESIDUAL's maths); 0: y = p
}
#if SHAPE
// sh: the shape, copied once at entry (compilers keep it in registers); the row loop's bound is
// read from the buffer itself (read-only storage is uniform: barriers and subgroupAdd may follow)
var<private> sh: Shape;
fn n_in() -> u32 { return sh.n_in; }
fn rows0() -> u32 { return sh.rows0; }
fn rows1() -> u32 { return sh.rows1; }
fn rows2() -> u32 { return sh.rows2; }
fn rpw() -> u32 { return sh.rpw; }
#else
fn n_in() -> u32 { return N_IN; }
fn rows0() -> u32 { return ROWS0; }
fn rows1() -> u32 { return ROWS1; }
fn rows2() -> u32 { return ROWS2; }
fn rpw() -> u32 { return RPW; }
#endif

#if A8
var<workgroup> qsum: atomic<i32>;               // sum_j q[j]
var<workgroup> amax_u: atomic<u32>;             // max_j |m[j]| as f32 bits (>= 0: ordered as u32)
#if SUBGROUPS
// q as packed int8 (value j in byte j % 4 of word j / 4); before q is written, the norm's sum tree
// (f32 bits, red_at) in the same words: SwiftShader's compile time grows with workgroup memory
override QV: u32 = max(N4, WG) / 4u;
var<workgroup> qa4: array<vec4<u32>, QV>;
fn red_at(i: u32) -> f32 { return bitcast<f32>(qa4[i >> 2u][i & 3u]); }
fn red_put(i: u32, v: f32) { qa4[i >> 2u][i & 3u] = bitcast<u32>(v); }
#else
var<workgroup> qa4: array<vec4<u32>, N4 / 4u>; // q as packed int8, value j in byte j % 4 of word j / 4
#endif
#elif XSHARED
var<workgroup> xs: array<vec4<f32>, N4>; // m
#endif
#if A8
#if !SUBGROUPS
var<workgroup> red: array<f32, RED_N>;
fn red_at(i: u32) -> f32 { return red[i]; }
fn red_put(i: u32, v: f32) { red[i] = v; }
#endif
#else
var<workgroup> red: array<f32, RED_N>;
fn red_at(i: u32) -> f32 { return red[i]; }
fn red_put(i: u32, v: f32) { red[i] = v; }
#endif
var<workgroup> stat: vec2<f32>;                 // (f32: rinv, A8: inv_s, Q8B: 1), A8: sq
#if Q8B
const_assert UPK == 1u;                        // a unit is a whole 32-value block (its dx, sx)
var<workgroup> xds: array<vec2<f32>, N_IN / 32u>;   // per 32-value block of q: (dx, sx) (ggml's d, s)
// the scales of the activation block of the unit being summed (body sets xs_cur once per unit, shared
// by the RB rows; the formats' fmt_unit calls xscale under Q8B, whose units are whole blocks)
var<private> xs_cur: vec2<f32>;
fn xscale(bi: u32) -> vec2<f32> { return xs_cur; }

// v rounded to the nearest f16 (ties to even), as f32: scale the f16 ulp of v's binade to 1 (exact:
// a power of two), round, scale back. Exact for |v| < 65520, f16 subnormals included (ulp 2^-24).
fn f16r(v: f32) -> f32 {
    let e = frexp(v).exp;                       // |v| in [2^(e-1), 2^e)
    let ue = max(e - 11, -24);
    return ldexp(round(ldexp(v, -ue)), ue);
}

// n of activation word i (4 values): (x rinv) nw, or x
fn n4(i: u32, rinv: f32) -> vec4<f32> {
#if NORM
    return (x[i] * rinv) * nw[i];
#else
    return x[i];
#endif
}

// ggml's quantize_row_q8_0 / q8_1 of the n row (one block of 32 per thread at a time)
fn quant_q8(li: u32, rinv: f32) {
    for (var c = li; c < n_in() / 32u; c += WG) {
        var v: array<vec4<f32>, 8>;
        var am = vec4<f32>(0.0);
        for (var k = 0u; k < 8u; k++) { v[k] = n4(8u * c + k, rinv); am = max(am, abs(v[k])); }
        let amax = max(max(am.x, am.y), max(am.z, am.w));
        let d = amax / 127.0;
        let id = select(0.0, 127.0 / amax, amax != 0.0);
        var qs = 0;
        for (var k = 0u; k < 8u; k++) {
            let q = pack_q(v[k], id);
            let i = 8u * c + k;
            qa4[i >> 2u][i & 3u] = (u32(q.x) & 0xFFu) | ((u32(q.y) & 0xFFu) << 8u) | ((u32(q.z) & 0xFFu) << 16u) | (u32(q.w) << 24u);
            qs += q.x + q.y + q.z + q.w;
        }
        xds[c] = vec2<f32>(f16r(d), f16r(d * f32(qs)));
    }
}
#endif

// ---- weights ------------------------------------------------------------------------------------
// (select, not branches: every part's word is read, an index past a smaller part's end reads a
// clamped word that is not used; SwiftShader compiles this ~10% faster and runs both sides of a
// branch anyway)
fn wv(t: u32, i: u32) -> WT {
#if PARTS3
    return select(select(w0[i], w1[i], t == 1u), w2[i], t == 2u);
#elif PARTS2
    return select(w0[i], w1[i], t == 1u);
#else
    return w0[i];
#endif
}

// u32 word i of tensor t.
fn wl(t: u32, i: u32) -> u32 {
    return fmt_wt(wv(t, i / WPT), i % WPT);
}

fn part_rows(t: u32) -> u32 {
    if (t == 0u) { return rows0(); }
    if (t == 1u) { return rows1(); }
    return rows2();
}

#include common_act
#if !SUBGROUPS
#include common_reduce
#endif
#include common_packed

// ---- activations ---------------------------------------------------------------------------------
fn act4(i: u32) -> PV {                   // activation word i (common_packed)
#if A8
    return qa4[i >> 2u][i & 3u];
#else
    return m4(i);
#endif
}

fn m4(i: u32) -> vec4<f32> {
#if XSHARED
    return xs[i];
#elif NORM
    return x[i] * nw[i];
#else
    return x[i];
#endif
}

fn pack_q(v: vec4<f32>, sq: f32) -> vec4<i32> {
    return vec4<i32>(clamp(round(v * sq), vec4<f32>(-128.0), vec4<f32>(127.0)));
}

// Norm statistics and activation staging, by the whole workgroup.
fn prologue(li: u32) {
#if A8
    if (li == 0u) { atomicStore(&qsum, 0); atomicStore(&amax_u, 0u); }
    workgroupBarrier();
#endif
    var ss = 0.0;
    var am = 0.0;
    for (var i = li; i < n_in() / 4u; i += WG) {
        let v = x[i];
#if NORM
        ss += dot(v, v);
        let m = v * nw[i];
#else
        let m = v;
#endif
#if A8
        let a = abs(m);
        am = max(am, max(max(a.x, a.y), max(a.z, a.w)));
#elif XSHARED
        xs[i] = m;
#endif
    }
    red_put(li, ss);
#if A8
    atomicMax(&amax_u, bitcast<u32>(am));   // max is exact in any order
#endif
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (li < s) { red_put(li, red_at(li) + red_at(li + s)); }
        workgroupBarrier();
    }
#if NORM
#if Q8B
    let rinv = 1.0 / sqrt(red_at(0u) / f32(n_in()) + EPS);
#else
    let rinv = inverseSqrt(red_at(0u) / f32(n_in()) + EPS);
#endif
#else
    let rinv = 1.0;
#endif
#if Q8B
    workgroupBarrier();                       // every thread has read the sum: q may overwrite it
    quant_q8(li, rinv);
    if (li == 0u) { stat = vec2<f32>(1.0, 0.0); }
#elif A8
    let amax = bitcast<f32>(atomicLoad(&amax_u));
#if NORM
    let a = amax * rinv;
    let sq = select(127e5 * rinv, 127.0 / amax, a >= 1e-5);
#else
    let a = amax;
    let sq = select(127e5, 127.0 / amax, a >= 1e-5);
#endif
    workgroupBarrier();                       // every thread has read the sum: q may overwrite it
    var qs = 0;
    for (var i = li; i < n_in() / 4u; i += WG) {
        let q = pack_q(m4(i), sq);
        let pk = (u32(q.x) & 0xFFu) | ((u32(q.y) & 0xFFu) << 8u) | ((u32(q.z) & 0xFFu) << 16u) | (u32(q.w) << 24u);
        qa4[i >> 2u][i & 3u] = pk;
        qs += q.x + q.y + q.z + q.w;
    }
    atomicAdd(&qsum, qs);
    if (li == 0u) { stat = vec2<f32>(max(a, 1e-5) * (1.0 / 127.0), sq); }
#else
    if (li == 0u) { stat = vec2<f32>(rinv, 0.0); }
#endif
    workgroupBarrier();
}

// ---- one unit of one row ---------------------------------------------------------------------------
struct Row {
    t: u32,       // part (gemv); gate_up: 0 (gate in w0, up in w1)
    lr: u32,      // row within the part
    b0: u32,      // its first block: lr * (n_in / BLK)
}

fn total_rows() -> u32 {
#if GATE_UP
    return rows0();
#else
    return rows0() + rows1() + rows2();
#endif
}

fn row_of(gr: u32) -> Row {
    var t = 0u;
    var lr = gr;
#if !GATE_UP
    if (gr >= rows0() + rows1()) { t = 2u; lr = gr - rows0() - rows1(); }
    else if (gr >= rows0()) { t = 1u; lr = gr - rows0(); }
#endif
    return Row(t, lr, lr * (n_in() / BLK));
}

// Per-lane sums: .x this row of tensor t (gate for gate_up), .y the up row.
alias ACC = vec2<f32>;

// The activations of one unit (shared by the RB rows of a lane group): common_codes.wgsl's UActs.
alias Acts = UActs;
const_assert UACT == 0u || (UACT == 3u && QG == 1u && XA == 0u && UW % 4u == 0u && UW <= 16u)
              || (UW == 4u && QG <= 5u && (UACT == 1u || QG == 4u));   // what acts() reads

fn acts(u: u32) -> Acts {
#if A8
    // UACT 1: group g of the unit's 4 words is one aligned vec4 of activation words (element g); UACT 2:
    // the 4 groups of word c are (element c); UACT 3 (one group a word): words 4i .. 4i + 3 are
    // (element i): one vec4 load each instead of 4 scalar loads from workgroup memory
    if (UACT == 3u) {                         // (clamped indices: naga checks them where the branch folds away)
        var a: Acts;
        let base = (u / UPK) * (BLK / 4u);
        let k = UW * (u % UPK);
        a[0] = qa4[(base + fmt_pos(k, 0u)) >> 2u];
        if (NAV > 1u) { a[min(1u, NAV - 1u)] = qa4[(base + fmt_pos(k + 4u, 0u)) >> 2u]; }
        if (NAV > 2u) { a[min(2u, NAV - 1u)] = qa4[(base + fmt_pos(k + 8u, 0u)) >> 2u]; }
        if (NAV > 3u) { a[min(3u, NAV - 1u)] = qa4[(base + fmt_pos(k + 12u, 0u)) >> 2u]; }
        return a;
    }
    if (UACT != 0u) {
        var a: Acts;
        let base = (u / UPK) * (BLK / 4u);
        let k = UW * (u % UPK);
        if (UACT == 1u) {                     // the groups written out (`if (QG > g)` folds): constant indices
            // (clamped: naga checks them also where UACT != 1 and the branch folds away)
            a[0] = qa4[(base + fmt_pos(k, 0u)) >> 2u];
            if (QG > 1u) { a[min(1u, NAV - 1u)] = qa4[(base + fmt_pos(k, 1u)) >> 2u]; }
            if (QG > 2u) { a[min(2u, NAV - 1u)] = qa4[(base + fmt_pos(k, 2u)) >> 2u]; }
            if (QG > 3u) { a[min(3u, NAV - 1u)] = qa4[(base + fmt_pos(k, 3u)) >> 2u]; }
            if (QG > 4u) { a[min(4u, NAV - 1u)] = qa4[(base + fmt_pos(k, 4u)) >> 2u]; }
        } else {
            for (var c = 0u; c < 4u; c++) { a[c] = qa4[(base + fmt_pos(k + c, 0u)) >> 2u]; }
        }
        for (var i = 0u; i < XA; i++) { uset(&a, UW * QG + i, xact(u, i)); }
        return a;
    }
#endif
    return unit_acts(u);                      // unit u % UPK of block u / UPK (common_packed)
}

// sum over unit u of the row of tensor t that starts at block b0 of d * w * act (the format's fmt_unit).
fn one(t: u32, b0: u32, u: u32, a: Acts) -> f32 {
    return fmt_unit(t, b0 + u / UPK, u % UPK, a);
}

fn unit(r: Row, u: u32, a: Acts) -> ACC {
#if GATE_UP
    return ACC(one(r.t, r.b0, u, a), one(r.t + 1u, r.b0, u, a));
#else
    return ACC(one(r.t, r.b0, u, a), 0.0);
#endif
}

// ---- rows of a workgroup -----------------------------------------------------------------------------
// p for global row gr from its lane-group sum v (.x, .y as in ACC), then the write.
fn finish(gr: u32, v: vec2<f32>) {
    let r = row_of(gr);
    var v2 = v;
#if A8
    if (ZROW != 0.0) { v2 = v - ZROW * f32(atomicLoad(&qsum)); }   // I2_S: sum (c - 1) q = sum c q - sum q
#endif
    let ws = fmt_ws(r.t, part_rows(r.t) * (n_in() / BLK));
#if GATE_UP
    let wu = fmt_ws(1u, rows0() * (n_in() / BLK));
    let pg = v2.x * (ws * stat.x * mult[0]);
    let pu = v2.y * (wu * stat.x * mult[1]);
    y[gr] = act(pg) * pu;
#else
    let p = v2.x * (ws * stat.x * mult[r.t]);
#if SHAPE
    let yi = sh.y0 + gr;                      // (once per row: a run-time switch costs nothing here)
    y[yi] = select(p, y[yi] + p, sh.residual != 0u);
#elif RESIDUAL
    y[gr] = y[gr] + p;
#else
    y[gr] = p;
#endif
#endif
}

fn body(li: u32, wid: u32, lane: u32, ln: u32) {
#if SHAPE
    sh = shape;
    let rpw_u = shape.rpw;
#else
    let rpw_u = RPW;
#endif
    prologue(li);
    let ng = WG / ln;                         // lane groups
    let grp = li / ln;
    let units = n_in() / BLK * UPK;
    let r_end = min((wid + 1u) * rpw_u, total_rows());
    let last = r_end - 1u;
    let steps = (rpw_u + ng * RB - 1u) / (ng * RB);
    for (var it = 0u; it < steps; it++) {
        let g0 = wid * rpw_u + (it * ng + grp) * RB;
        // rows g0 .. g0 + RB - 1; rows past the end redo the last row (results dropped): no branches
        let r0 = row_of(min(g0, last));
        let r1 = row_of(min(g0 + 1u, last));
        let r2 = row_of(min(g0 + 2u, last));
        let r3 = row_of(min(g0 + 3u, last));
        var c0 = ACC(0.0, 0.0);               // explicit zeros: naga does not re-zero loop-local vars
        var c1 = c0;
        var c2 = c0;
        var c3 = c0;
        for (var u = lane; u < units; u += ln) {
            let a = acts(u);
#if Q8B
            xs_cur = xds[u / UPK];
#endif
            c0 += unit(r0, u, a);
            if (RB > 1u) { c1 += unit(r1, u, a); }
            if (RB > 2u) { c2 += unit(r2, u, a); }
            if (RB > 3u) { c3 += unit(r3, u, a); }
        }
        var v = array<vec2<f32>, 4>(c0, c1, c2, c3);   // I2_S A8: sums of integers < 2^24, exact
        // reduce over the lanes of the group, then lane 0 writes its rows
#if SUBGROUPS
        for (var i = 0u; i < RB; i++) { v[i] = subgroupAdd(v[i]); }
#else
        for (var i = 0u; i < RB; i++) { red[(2u * i) * WG + li] = v[i].x; red[(2u * i + 1u) * WG + li] = v[i].y; }
        tree_add(li, lane, LANES, 2u * RB);
        for (var i = 0u; i < RB; i++) { v[i] = vec2<f32>(red[(2u * i) * WG + li], red[(2u * i + 1u) * WG + li]); }
        workgroupBarrier();
#endif
        if (lane == 0u) {
            for (var i = 0u; i < RB; i++) {
                if (g0 + i < r_end) { finish(g0 + i, v[i]); }
            }
        }
    }
}

#if SUBGROUPS
#if GATE_UP
@compute @workgroup_size(WG)
fn gate_up(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wid: vec3<u32>,
           @builtin(subgroup_invocation_id) sl: u32, @builtin(subgroup_size) sg: u32) {
    body(li, wid.x, sl, min(sg, WG));
}
#else
@compute @workgroup_size(WG)
fn gemv(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(subgroup_invocation_id) sl: u32, @builtin(subgroup_size) sg: u32) {
    body(li, wid.x, sl, min(sg, WG));
}
#endif
#else
#if GATE_UP
@compute @workgroup_size(WG)
fn gate_up(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    body(li, wid.x, li % LANES, LANES);
}
#else
@compute @workgroup_size(WG)
fn gemv(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    body(li, wid.x, li % LANES, LANES);
}
#endif
#endif
