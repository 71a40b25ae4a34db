// dev/bitlinear/v0.wgsl: EXPERIMENT (the first M=1 kernel), kept as the baseline of dev/bitlinear/README.md;
// the engine runs shaders/bitlinear.wgsl. Same bindings, constants and outputs as that file.
// bitlinear.wgsl: M=1 ternary/binary GEMV over packed GGUF weights, with the fusions of one
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
//                     p[r] = S[r] * (ws_t * rinv * mult[t])           (ws_t: I2_S tensor scale; d = 1)
//   A8 (W1.58A8):     amax = max_j |m[j]|;  a = amax * rinv (NORM) or amax   (= max|n| of n = m * rinv)
//                     q[j] = clamp(round(m[j] * sq), -128, 127),  sq = 127 / amax  if a >= 1e-5
//                                                                  sq = 127e5 * rinv (NORM) / 127e5 otherwise
//                     (= round(n * s) with s = 127 / max(max|n|, 1e-5): rinv cancels in exact arithmetic)
//                     S[r] = sum_b d[b] * I[r,b],  I[r,b] = sum_{j in b} w[r,j] * q[j]   (exact int32)
//                     p[r] = S[r] * (ws_t * inv_s * mult[t]),  inv_s = max(a, 1e-5) * (1/127) (= 1/s)
//   RESIDUAL: y[r] = y[r] + p[r] (y holds the residual stream on entry; in place)
// round() is round-half-to-even (as numpy and torch). Terms missing from a format read as 1
// (ws for block formats, d for I2_S, rinv without NORM).
//
// Weights: each part's binding is the raw bytes of one GGUF tensor (ne = [N_IN, ROWSt]), read as
// array<u32> (little endian). Code c in {0,1,2} means w = c - 1 (I2_S, TQ2_0); Q1_0 bit b means
// w = 2b - 1. Rows start at r * N_IN / BLK * BBYTES bytes.
//   I2_S   128 values / 32 bytes: byte k holds k (bits 7:6), 32+k (5:4), 64+k (3:2), 96+k (1:0);
//          one f32 scale per tensor at byte ROWS * N_IN / 4.
//   TQ2_0  256 values / 66 bytes: qs[64], f16 d. qs[32h + m] holds 128h + 32l + m at bits 2l.
//   TQ1_0  256 values / 54 bytes: qs[48], qh[4], f16 d. Trit k of byte q is ((q * 3^k) % 256 * 3) >> 8;
//          qs[m] (m < 32): 32k + m;  qs[32 + m]: 160 + 16k + m;  qh[m]: 240 + 4k + m (k < 4).
//   Q1_0   128 values / 18 bytes: f16 d, then 16 bytes of signs (bit j % 8 of byte j / 8).
// TQ2_0/TQ1_0/Q1_0 blocks are not multiples of 4 bytes: every block starts 2-byte aligned, and words
// at a 2-mod-4 byte offset are put together from two u32 (ldb).
//
// The work unit of one lane is one u32 of packed weights (I2_S, TQ2_0: 16 values = 4 groups of 4
// consecutive values, one per 2-bit plane; TQ1_0: 20 values, 5 trits of 4 bytes; Q1_0: 32 values).
// A8 turns a group of 4 codes into packed int8 and takes dot4I8Packed against 4 packed activations
// (plain-integer fallback without DOT4). I2_S A8 uses the codes directly: sum (c-1) q = sum c q - sum q.
//
// Buffers (binding i = i-th of these that exists):
//   x     f32[N_IN]             input (the residual stream, or the attention / FFN output)
//   nw    f32[N_IN]             norm weight                                      (NORM)
//   mult  f32[PARTS] / f32[2]   output multipliers per part (gate, up); 1.0 when the model has none
//   y     f32[sum ROWSt]        output (read first with RESIDUAL); must not alias x
//   w0, w1, w2                  weight tensors (w1 with PARTS2 (gate_up: up), w2 with PARTS3)
//
// Threads: a workgroup of WG computes RPW consecutive output rows (every workgroup recomputes the
// norm / quantisation of x, so RPW amortises it). It is split into lane groups of LN lanes: one
// subgroup (SUBGROUPS: LN = min(subgroup_size, WG), reduction by subgroupAdd; the subgroups of a
// workgroup are taken to be consecutive local indices) or LANES threads (shared-memory tree
// reduction). A lane group computes RB rows at once (the activation loads are shared by those
// rows); its lanes stride over the weight words of the rows (consecutive lanes, consecutive words).
// Activations sit in workgroup memory: packed int8 (A8), f32 m (XSHARED), or are read from x.
// Defines: V0_I2S | V0_TQ2 | V0_TQ1 | V0_Q1 (its own format switch, set by bench.py --src), A8, NORM, RESIDUAL, PARTS2, PARTS3, GATE_UP,
// ACT_SILU, XSHARED, SUBGROUPS, DOT4 (see bitweb/kernels/bitlinear.py).

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
override RED_N: u32 = WG * max(2u, 2u * RB);        // derived: reduction scratch

const MAXRB: u32 = 4u;
const M3: u32 = 0x03030303u;

#if V0_I2S
const BLK: u32 = 128u;     // values per block
const BBYTES: u32 = 32u;   // bytes per block
const UPB: u32 = 8u;       // units (u32 words) per block
#elif V0_TQ2
const BLK: u32 = 256u;
const BBYTES: u32 = 66u;
const UPB: u32 = 16u;
#elif V0_TQ1
const BLK: u32 = 256u;
const BBYTES: u32 = 54u;
const UPB: u32 = 13u;
#elif V0_Q1
const BLK: u32 = 128u;
const BBYTES: u32 = 18u;
const UPB: u32 = 4u;
#endif

@group(0) @binding(0) var<storage, read> x: array<vec4<f32>>;
#if NORM
@group(0) @binding(1) var<storage, read> nw: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> mult: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read> w0: array<u32>;
#if PARTS2
@group(0) @binding(5) var<storage, read> w1: array<u32>;
#endif
#if PARTS3
@group(0) @binding(6) var<storage, read> w2: array<u32>;
#endif
#else
@group(0) @binding(1) var<storage, read> mult: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read> w0: array<u32>;
#if PARTS2
@group(0) @binding(4) var<storage, read> w1: array<u32>;
#endif
#if PARTS3
@group(0) @binding(5) var<storage, read> w2: array<u32>;
#endif
#endif

#if A8
var<workgroup> qa: array<u32, N4>;      // q as packed int8, value j in byte j % 4 of word j / 4
var<workgroup> qsum: atomic<i32>;               // sum_j q[j]
#elif XSHARED
var<workgroup> xs: array<vec4<f32>, N4>; // m
#endif
var<workgroup> red: array<f32, RED_N>;
var<workgroup> stat: vec2<f32>;                 // (f32: rinv, A8: inv_s), A8: sq

// ---- weights ------------------------------------------------------------------------------------
fn wl(t: u32, i: u32) -> u32 {
#if PARTS3
    if (t == 2u) { return w2[i]; }
#endif
#if PARTS2
    if (t == 1u) { return w1[i]; }
#endif
    return w0[i];
}

// The u32 at a 2-byte aligned byte offset.
fn ldb(t: u32, b: u32) -> u32 {
    let lo = wl(t, b >> 2u);
    if ((b & 2u) == 0u) { return lo; }
    return (lo >> 16u) | (wl(t, (b >> 2u) + 1u) << 16u);
}

// The f16 at a 2-byte aligned byte offset, as f32.
fn ldh(t: u32, b: u32) -> f32 {
    return unpack2x16float(wl(t, b >> 2u) >> ((b & 2u) * 8u)).x;
}

fn part_rows(t: u32) -> u32 {
    if (t == 0u) { return ROWS0; }
    if (t == 1u) { return ROWS1; }
    return ROWS2;
}

// Scale factor of part t: ws_t * (rinv or inv_s) * mult[t].
fn part_scale(t: u32) -> f32 {
#if V0_I2S
    let ws = bitcast<f32>(wl(t, part_rows(t) * (N_IN / 16u)));
#else
    let ws = 1.0;
#endif
    return ws * stat.x * mult[t];
}

// ---- activations ---------------------------------------------------------------------------------
fn m4(i: u32) -> vec4<f32> {
#if XSHARED
    return xs[i];
#elif NORM
    return x[i] * nw[i];
#else
    return x[i];
#endif
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

// Four codes 0..2 in the bytes of c -> packed int8 c - 1.
fn tern8(c: u32) -> u32 {
    return ((c | 0x80808080u) - 0x01010101u) ^ 0x80808080u;
}

// Four codes 0..2 (bytes of w >> s) -> vec4 of c - 1.
fn tern4(w: u32, s: u32) -> vec4<f32> {
    return vec4<f32>((vec4<u32>(w) >> vec4<u32>(s, s + 8u, s + 16u, s + 24u)) & vec4<u32>(3u)) - 1.0;
}

// TQ1_0: the 5 trit planes of the 4 bytes of w as code bytes: trit k of byte q = ((q*3^k)%256*3)>>8.
fn trits(w: u32) -> array<u32, 5> {
    var lo = w & 0x00FF00FFu;
    var hi = (w >> 8u) & 0x00FF00FFu;
    var t: array<u32, 5>;
    for (var k = 0u; k < 5u; k++) {
        let l3 = lo * 3u;
        let h3 = hi * 3u;
        t[k] = ((l3 >> 8u) & 0x00030003u) | (h3 & 0x03000300u);
        lo = l3 & 0x00FF00FFu;
        hi = h3 & 0x00FF00FFu;
    }
    return t;
}

fn pack_q(v: vec4<f32>, sq: f32) -> vec4<i32> {
    return vec4<i32>(clamp(round(v * sq), vec4<f32>(-128.0), vec4<f32>(127.0)));
}

// Norm statistics and activation staging, by the whole workgroup.
fn prologue(li: u32) {
    var ss = 0.0;
    var am = 0.0;
    for (var i = li; i < N_IN / 4u; i += WG) {
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
    red[li] = ss;
    red[WG + li] = am;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (li < s) {
            red[li] += red[li + s];
            red[WG + li] = max(red[WG + li], red[WG + li + s]);
        }
        workgroupBarrier();
    }
#if NORM
    let rinv = inverseSqrt(red[0] / f32(N_IN) + EPS);
#else
    let rinv = 1.0;
#endif
#if A8
    let amax = red[WG];
#if NORM
    let a = amax * rinv;
    let sq = select(127e5 * rinv, 127.0 / amax, a >= 1e-5);
#else
    let a = amax;
    let sq = select(127e5, 127.0 / amax, a >= 1e-5);
#endif
    if (li == 0u) { atomicStore(&qsum, 0); }
    workgroupBarrier();
    var qs = 0;
    for (var i = li; i < N_IN / 4u; i += WG) {
        let q = pack_q(m4(i), sq);
        qa[i] = (u32(q.x) & 0xFFu) | ((u32(q.y) & 0xFFu) << 8u) | ((u32(q.z) & 0xFFu) << 16u) | (u32(q.w) << 24u);
        qs += q.x + q.y + q.z + q.w;
    }
    atomicAdd(&qsum, qs);
    if (li == 0u) { stat = vec2<f32>(max(a, 1e-5) * (1.0 / 127.0), sq); }
#else
    if (li == 0u) { stat = vec2<f32>(rinv, 0.0); }
#endif
    workgroupBarrier();
}

// ---- one step: all rows of a lane group --------------------------------------------------------
#if GATE_UP
const NACC: u32 = 2u;
#else
const NACC: u32 = 1u;
#endif

fn total_rows() -> u32 {
#if GATE_UP
    return ROWS0;
#else
    return ROWS0 + ROWS1 + ROWS2;
#endif
}

struct Row {
    ok: bool,
    t: u32,       // part (gemv) / 0 (gate_up: gate in w0, up in w1)
    lr: u32,      // row within the part
}

fn row_of(gr: u32) -> Row {
    var r: Row;
    r.ok = gr < total_rows();
    r.t = 0u;
    r.lr = gr;
#if !GATE_UP
    if (gr >= ROWS0 + ROWS1) { r.t = 2u; r.lr = gr - ROWS0 - ROWS1; }
    else if (gr >= ROWS0) { r.t = 1u; r.lr = gr - ROWS0; }
#endif
    return r;
}

fn body(li: u32, wid: u32, lane: u32, ln: u32) {
    prologue(li);
    let ng = WG / ln;
    let grp = li / ln;
    let units = N_IN / BLK * UPB;
    let r_end = min((wid + 1u) * RPW, total_rows());
    let steps = (RPW + ng * RB - 1u) / (ng * RB);
#if A8
    let qsm = atomicLoad(&qsum);
#endif
    for (var it = 0u; it < steps; it++) {
        let g0 = wid * RPW + (it * ng + grp) * RB;
        var rows: array<Row, MAXRB>;
        var acc: array<f32, 8>;       // [NACC * i + a]
#if A8
        var iacc: array<i32, 8>;     // I2_S: sum c q
#endif
        for (var i = 0u; i < 8u; i++) {     // explicit: naga does not re-zero loop-local vars
            acc[i] = 0.0;
#if A8
            iacc[i] = 0;
#endif
        }
        for (var i = 0u; i < RB; i++) {
            rows[i] = row_of(g0 + i);
            rows[i].ok = rows[i].ok && g0 + i < r_end;
        }
        for (var u = lane; u < units; u += ln) {
            let blk = u / UPB;
            let k = u % UPB;
#if V0_I2S
            // word k of block blk: values blk*128 + 32i + 4k .. +3 at shift 6 - 2i
            let e = blk * 32u + k;
#if A8
            let a0 = qa[e]; let a1 = qa[e + 8u]; let a2 = qa[e + 16u]; let a3 = qa[e + 24u];
#else
            let a0 = m4(e); let a1 = m4(e + 8u); let a2 = m4(e + 16u); let a3 = m4(e + 24u);
#endif
            for (var i = 0u; i < RB; i++) {
                if (!rows[i].ok) { continue; }
                for (var a = 0u; a < NACC; a++) {
                    let w = wl(rows[i].t + a, rows[i].lr * (N_IN / 16u) + u);
#if A8
                    iacc[NACC * i + a] += dot4((w >> 6u) & M3, a0) + dot4((w >> 4u) & M3, a1)
                                        + dot4((w >> 2u) & M3, a2) + dot4(w & M3, a3);
#else
                    acc[NACC * i + a] += dot(tern4(w, 6u), a0) + dot(tern4(w, 4u), a1)
                                       + dot(tern4(w, 2u), a2) + dot(tern4(w, 0u), a3);
#endif
                }
            }
#elif V0_TQ2
            // qs word k: values 128 (k / 8) + 32 l + 4 (k % 8) .. +3 at shift 2l
            let e = blk * 64u + (k / 8u) * 32u + (k % 8u);
#if A8
            let a0 = qa[e]; let a1 = qa[e + 8u]; let a2 = qa[e + 16u]; let a3 = qa[e + 24u];
#else
            let a0 = m4(e); let a1 = m4(e + 8u); let a2 = m4(e + 16u); let a3 = m4(e + 24u);
#endif
            for (var i = 0u; i < RB; i++) {
                if (!rows[i].ok) { continue; }
                let bb = (rows[i].lr * (N_IN / BLK) + blk) * BBYTES;
                for (var a = 0u; a < NACC; a++) {
                    let t = rows[i].t + a;
                    let w = ldb(t, bb + 4u * k);
                    let d = ldh(t, bb + 64u);
#if A8
                    let s = dot4(tern8(w & M3), a0) + dot4(tern8((w >> 2u) & M3), a1)
                          + dot4(tern8((w >> 4u) & M3), a2) + dot4(tern8((w >> 6u) & M3), a3);
                    acc[NACC * i + a] += f32(s) * d;
#else
                    acc[NACC * i + a] += d * (dot(tern4(w, 0u), a0) + dot(tern4(w, 2u), a1)
                                            + dot(tern4(w, 4u), a2) + dot(tern4(w, 6u), a3));
#endif
                }
            }
#elif V0_TQ1
            // word k < 8: values 4k + 32j; k < 12: 4k + 128 + 16j; k = 12: 240 + 4j (j < 4), trit j
            var base = 4u * k;
            var stride = 32u;
            if (k >= 12u) { base = 240u; stride = 4u; } else if (k >= 8u) { base = 4u * k + 128u; stride = 16u; }
            let e = blk * 64u + base / 4u;
            let st = stride / 4u;
#if A8
            var av: array<u32, 5>;
            for (var j = 0u; j < 4u; j++) { av[j] = qa[e + j * st]; }
            av[4] = select(qa[min(e + 4u * st, N_IN / 4u - 1u)], 0u, k == 12u);
#else
            var av: array<vec4<f32>, 5>;
            for (var j = 0u; j < 4u; j++) { av[j] = m4(e + j * st); }
            av[4] = select(m4(min(e + 4u * st, N_IN / 4u - 1u)), vec4<f32>(0.0), k == 12u);
#endif
            for (var i = 0u; i < RB; i++) {
                if (!rows[i].ok) { continue; }
                let bb = (rows[i].lr * (N_IN / BLK) + blk) * BBYTES;
                for (var a = 0u; a < NACC; a++) {
                    let t = rows[i].t + a;
                    let tr = trits(ldb(t, bb + 4u * k));
                    let d = ldh(t, bb + 52u);
#if A8
                    var s = 0;
                    for (var j = 0u; j < 5u; j++) { s += dot4(tern8(tr[j]), av[j]); }
                    acc[NACC * i + a] += f32(s) * d;
#else
                    var s = 0.0;
                    for (var j = 0u; j < 5u; j++) { s += dot(tern4(tr[j], 0u), av[j]); }
                    acc[NACC * i + a] += d * s;
#endif
                }
            }
#elif V0_Q1
            // sign word k: values 32k .. 32k + 31, bit n
            let e = blk * 32u + k * 8u;
#if A8
            var av: array<u32, 8>;
#else
            var av: array<vec4<f32>, 8>;
#endif
            for (var n = 0u; n < 8u; n++) {
#if A8
                av[n] = qa[e + n];
#else
                av[n] = m4(e + n);
#endif
            }
            for (var i = 0u; i < RB; i++) {
                if (!rows[i].ok) { continue; }
                let bb = (rows[i].lr * (N_IN / BLK) + blk) * BBYTES;
                for (var a = 0u; a < NACC; a++) {
                    let t = rows[i].t + a;
                    let w = ldb(t, bb + 2u + 4u * k);
                    let d = ldh(t, bb);
#if A8
                    var s = 0;
                    for (var n = 0u; n < 8u; n++) {
                        // nibble -> bytes 0/1 -> int8 -1/+1
                        let b01 = (((w >> (4u * n)) & 0xFu) * 0x00204081u) & 0x01010101u;
                        s += dot4(0xFFFFFFFFu ^ (b01 * 0xFEu), av[n]);
                    }
                    acc[NACC * i + a] += f32(s) * d;
#else
                    var s = 0.0;
                    for (var n = 0u; n < 8u; n++) {
                        let nb = w >> (4u * n);
                        let sg = vec4<f32>((vec4<u32>(nb) >> vec4<u32>(0u, 1u, 2u, 3u)) & vec4<u32>(1u)) * 2.0 - 1.0;
                        s += dot(sg, av[n]);
                    }
                    acc[NACC * i + a] += d * s;
#endif
                }
            }
#endif
        }
#if V0_I2S
#if A8
        for (var i = 0u; i < NACC * RB; i++) { acc[i] = f32(iacc[i]); }   // exact below 2^24
#endif
#endif
        // reduce over the lanes of the group, then lane 0 writes its rows
        for (var i = 0u; i < RB; i++) {
            for (var a = 0u; a < NACC; a++) {
#if SUBGROUPS
                acc[NACC * i + a] = subgroupAdd(acc[NACC * i + a]);
#else
                red[(NACC * i + a) * WG + li] = acc[NACC * i + a];
#endif
            }
        }
#if !SUBGROUPS
        workgroupBarrier();
        for (var s = LANES / 2u; s > 0u; s >>= 1u) {
            if (lane < s) {
                for (var i = 0u; i < NACC * RB; i++) { red[i * WG + li] += red[i * WG + li + s]; }
            }
            workgroupBarrier();
        }
        for (var i = 0u; i < NACC * RB; i++) { acc[i] = red[i * WG + li]; }
        workgroupBarrier();
#endif
        if (lane == 0u) {
            for (var i = 0u; i < RB; i++) {
                if (!rows[i].ok) { continue; }
                let gr = g0 + i;
                var sub = 0.0;      // I2_S A8: sum (c - 1) q = sum c q - sum q
#if V0_I2S
#if A8
                sub = f32(qsm);
#endif
#endif
#if GATE_UP
                let pg = (acc[2u * i] - sub) * part_scale_gu(0u);
                let pu = (acc[2u * i + 1u] - sub) * part_scale_gu(1u);
#if ACT_SILU
                let e = exp(-abs(pg));
                let ag = pg * select(e / (1.0 + e), 1.0 / (1.0 + e), pg >= 0.0);
#else
                let rg = max(pg, 0.0);
                let ag = rg * rg;
#endif
                y[gr] = ag * pu;
#else
                let p = (acc[i] - sub) * part_scale(rows[i].t);
#if RESIDUAL
                y[gr] = y[gr] + p;
#else
                y[gr] = p;
#endif
#endif
            }
        }
    }
}

// gate_up: gate is w0 with mult[0], up is w1 with mult[1], both ROWS0 rows.
fn part_scale_gu(a: u32) -> f32 {
#if V0_I2S
    let ws = bitcast<f32>(wl(a, ROWS0 * (N_IN / 16u)));
#else
    let ws = 1.0;
#endif
    return ws * stat.x * mult[a];
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
