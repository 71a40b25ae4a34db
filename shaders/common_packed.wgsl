// common_packed.wgsl (#include common_packed): the M = 1 product of one code word of a packed-format
// row with the activations, shared by bitlinear.wgsl (block linears) and lmhead.wgsl (a packed LM
// head). The format comes from its include (the packed-format interface of common_ternary.wgsl).
//
//   PV                       an activation word: u32 of 4 packed int8 q (A8), vec4<f32> m (f32)
//   unit_acts(u)             the QG activation words under unit u (code word u % QW of block
//                            u / QW of a row; zero for a group that holds nothing)
//   unit_dot(t, bi, k, a)    d * sum over the QG groups of code word k of block bi of tensor t of
//                            w . a[g]: A8 as exact int32 dot4 of packed int8 c - 1 (f32(S) * d),
//                            f32 as vec4 dots of c - 1 (d * S)
// Needs from the including shader: fn act4(i: u32) -> PV, activation word i of the input row.

#if A8
alias PV = u32;
#else
alias PV = vec4<f32>;
#endif

fn unit_acts(u: u32) -> array<PV, QG> {
    var a: array<PV, QG>;
    let blk = u / QW;
    let k = u % QW;
    for (var g = 0u; g < QG; g++) {
        a[g] = select(PV(), act4(blk * (BLK / 4u) + fmt_pos(k, g)), fmt_has(k, g));
    }
    return a;
}

fn unit_dot(t: u32, bi: u32, k: u32, a: array<PV, QG>) -> f32 {
    let cs = fmt_codes(fmt_word(t, bi, k));
    let d = fmt_d(t, bi);
#if A8
    var s = 0;
    for (var g = 0u; g < QG; g++) { s += dot4(tern8(cs[g]), a[g]); }
    return f32(s) * d;
#else
    var s = 0.0;
    for (var g = 0u; g < QG; g++) { s += dot(tern4(cs[g]), a[g]); }
    return d * s;
#endif
}
