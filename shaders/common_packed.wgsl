// common_packed.wgsl (#include common_packed): the activations of one M = 1 lane unit of a
// packed-format row, shared by bitlinear.wgsl (block linears) and lmhead.wgsl (a packed LM head),
// which then call the format's fmt_unit (common_codes.wgsl: the packed-format interface).
//
//   unit_acts(u)             the UN activation words under unit u (unit u % UPK of block u / UPK of
//                            a row; UActs of common_codes.wgsl: group g of its word c, fmt_pos, at
//                            slot(c, g); then its XA extra words, fmt_xpos; zero where the format says
//                            a slot holds nothing)
// Needs from the including shader: fn act4(i: u32) -> PV, activation word i of the input row.

fn unit_acts(u: u32) -> UActs {
    var a: UActs;
    let blk = u / UPK;
    for (var c = 0u; c < UW; c++) {
        let k = UW * (u % UPK) + c;
        for (var g = 0u; g < QG; g++) {
            uset(&a, slot(c, g), select(PV(), act4(blk * (BLK / 4u) + fmt_pos(k, g)), fmt_has(k, g)));
        }
    }
    for (var i = 0u; i < XA; i++) { uset(&a, UW * QG + i, xact(u, i)); }
    return a;
}

// extra activation word i (< XA) of unit u (the format's fmt_xpos / fmt_xhas; zero elsewhere)
fn xact(u: u32, i: u32) -> PV {
    let j = u % UPK;
    return select(PV(), act4((u / UPK) * (BLK / 4u) + fmt_xpos(j, i)), fmt_xhas(j, i));
}
