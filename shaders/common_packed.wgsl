// common_packed.wgsl (#include common_packed): the M = 1 product of one lane unit (UW code words) of a packed-format
// row with the activations, shared by bitlinear.wgsl (block linears) and lmhead.wgsl (a packed LM
// head). The format comes from its include (the packed-format interface of common_ternary.wgsl).
//
//   PV                       an activation word: u32 of 4 packed int8 q (A8), vec4<f32> m (f32)
//   UPK                      lane units per block: QW / UW (a unit is UW code words, fmt_words)
//   UN                       activation words per unit: UW QG
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
const UN: u32 = UW * QG;

fn unit_acts(u: u32) -> array<PV, UN> {
    var a: array<PV, UN>;
    let blk = u / UPK;
    for (var c = 0u; c < UW; c++) {
        let k = UW * (u % UPK) + c;
        for (var g = 0u; g < QG; g++) {
            a[QG * c + g] = select(PV(), act4(blk * (BLK / 4u) + fmt_pos(k, g)), fmt_has(k, g));
        }
    }
    return a;
}

fn unit_dot(t: u32, bi: u32, j: u32, a: array<PV, UN>) -> f32 {
    let ws = fmt_words(t, bi, j);
#if A8
    var s = 0;
    for (var c = 0u; c < UW; c++) {
        let cs = fmt_codes(ws[c]);
        for (var g = 0u; g < QG; g++) { s += dot4(tern8(cs[g]), a[QG * c + g]); }
    }
    return f32(s) * fmt_d(t, bi);
#else
    var s = 0.0;
    for (var c = 0u; c < UW; c++) {
        let cs = fmt_codes(ws[c]);
        for (var g = 0u; g < QG; g++) { s += dot(tern4(cs[g]), a[QG * c + g]); }
    }
    return fmt_d(t, bi) * s;
#endif
}
