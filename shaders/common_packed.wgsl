// common_packed.wgsl (#include common_packed): the M = 1 product of one lane unit (UW code words) of a packed-format
// row with the activations, shared by bitlinear.wgsl (block linears) and lmhead.wgsl (a packed LM
// head). The format comes from its include (the packed-format interface of common_ternary.wgsl).
//
//   PV                       an activation word: u32 of 4 packed int8 q (A8), vec4<f32> m (f32)
//   UPK                      lane units per block: QW / UW (a unit is UW code words, fmt_words;
//                            TQ1_0: 3 units of 4 words, the 13th word shared out, see XA)
//   UN                       activation words per unit: UW QG + XA
//   unit_acts(u)             the UN activation words under unit u (unit u % UPK of block u / UPK of a
//                            row; [QG c + g]: group g of its word c; zero for a group that holds nothing)
//   unit_dot(t, bi, j, a)    d * sum over the UW code words of unit j of block bi of tensor t and
//                            their QG groups of w . a: A8 as exact int32 dot4 of packed int8 c - 1
//                            (f32(S) * d), f32 as vec4 dots of c - 1 (d * S); one d per unit
// Needs from the including shader: fn act4(i: u32) -> PV, activation word i of the input row.

#if A8
alias PV = u32;
#else
alias PV = vec4<f32>;
#endif

const UPK: u32 = QW / UW;
#if FMT_TQ1
// TQ1_0: 13 code words per block, units of 4: its 13th word (fmt_tail; 4 groups, activation words
// fmt_pos(12, g)) is spread over the block's 3 units: unit j takes its group j, unit 2 also group 3
// (the other units multiply group 3 by zero activations: no branch).
const XA: u32 = 2u;
#else
const XA: u32 = 0u;
#endif
const UN: u32 = UW * QG + XA;

fn unit_acts(u: u32) -> array<PV, UN> {
    var a: array<PV, UN>;
    let blk = u / UPK;
    for (var c = 0u; c < UW; c++) {
        let k = UW * (u % UPK) + c;
        for (var g = 0u; g < QG; g++) {
            a[QG * c + g] = select(PV(), act4(blk * (BLK / 4u) + fmt_pos(k, g)), fmt_has(k, g));
        }
    }
    for (var i = 0u; i < XA; i++) { a[UW * QG + i] = tail_act(u, i); }
    return a;
}

// Activation i (< XA) of unit u's share of its block's tail word (TQ1_0: group j = u % UPK, then
// group 3 in the last unit only; zero elsewhere).
fn tail_act(u: u32, i: u32) -> PV {
#if FMT_TQ1
    let j = u % UPK;
    let g = select(j, 3u, i == 1u);
    return select(PV(), act4((u / UPK) * (BLK / 4u) + fmt_pos(QW - 1u, g)), i == 0u || j == UPK - 1u);
#else
    return PV();
#endif
}

// The QG groups of code word w against activations a[o + g] (A8: exact int32 of w = c - 1).
// unit_dot calls it once per word with constant o, and the groups are written out (QG is 4, 5 or
// 8; `if (QG > g)` folds away; f32 sums in the order g = 0, 1, ...): CPU compilers keep a and
// the codes in registers only when every index is a constant (SwiftShader unrolls no loop, and
// compiles a dynamically indexed array as memory: slower to compile and to run).
#if A8
alias WSUM = i32;
fn gdot(c: u32, a: PV) -> i32 { return dot4(tern8(c), a); }
#else
alias WSUM = f32;
fn gdot(c: u32, a: PV) -> f32 { return dot(tern4(c), a); }
#endif

fn word_dot(w: u32, a: array<PV, UN>, o: u32) -> WSUM {
    let cs = fmt_codes(w);
    var s = WSUM(0);
    s += gdot(cs[0u], a[o + 0u]);
    s += gdot(cs[1u], a[o + 1u]);
    s += gdot(cs[2u], a[o + 2u]);
    s += gdot(cs[3u], a[o + 3u]);
    if (QG > 4u) { s += gdot(cs[min(4u, QG - 1u)], a[o + 4u]); }
    if (QG > 5u) { s += gdot(cs[min(5u, QG - 1u)], a[o + 5u]); }
    if (QG > 6u) { s += gdot(cs[min(6u, QG - 1u)], a[o + 6u]); }
    if (QG > 7u) { s += gdot(cs[min(7u, QG - 1u)], a[o + 7u]); }
    return s;
}

fn unit_dot(t: u32, bi: u32, j: u32, a: array<PV, UN>) -> f32 {
    let ws = fmt_words(t, bi, j);
    var s = word_dot(ws[0], a, 0u);
    if (UW > 1u) {          // UW is 1 or 4 (min(): the indices stay in range when UW = 1)
        s += word_dot(ws[min(1u, UW - 1u)], a, QG) + word_dot(ws[min(2u, UW - 1u)], a, 2u * QG)
           + word_dot(ws[min(3u, UW - 1u)], a, 3u * QG);
    }
#if FMT_TQ1
    let wt = fmt_tail(t, bi);
#if A8
    s += dot4(tern8(fmt_group(wt, j)), a[UW * QG]) + dot4(tern8(fmt_group(wt, 3u)), a[UW * QG + 1u]);
#else
    s += dot(tern4(fmt_group(wt, j)), a[UW * QG]) + dot(tern4(fmt_group(wt, 3u)), a[UW * QG + 1u]);
#endif
#endif
#if A8
    return f32(s) * fmt_d(t, bi);
#else
    return fmt_d(t, bi) * s;
#endif
}
