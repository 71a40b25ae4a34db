// common_unit.wgsl (#include common_unit): the usual fmt_unit of the packed-format interface
// (common_codes.wgsl), for a format whose M = 1 unit is UW code words of one block with the block's
// scale d and no offset (TQ2_0, Q1_0, Q2_0): d sum over the words c of word_dot(word c, a, c),
// word 0, then (word 1 + word 2) + word 3 (UW is 1 or 4; min(): the indices stay in range when UW = 1).
// A format of another shape writes its own fmt_unit instead of including this file.

fn fmt_unit(t: u32, bi: u32, j: u32, a: UActs) -> f32 {
    let ws = fmt_words(t, bi, j);
    var s = word_dot(ws[0], a, 0u);
    if (UW > 1u) {
        s += word_dot(ws[min(1u, UW - 1u)], a, 1u) + word_dot(ws[min(2u, UW - 1u)], a, 2u)
           + word_dot(ws[min(3u, UW - 1u)], a, 3u);
    }
    return f32(s) * fmt_dm(t, bi, j, 0u).x;
}
