// common_codes.wgsl (#include common_codes): the packed-format interface, and the integer code
// arithmetic its formats share. Every packed format's include (shaders/fmt_<name>.wgsl) includes
// this file and declares the interface below; the packed kernels (bitlinear.wgsl, lmhead.wgsl
// PACKED through common_packed.wgsl, bitlinear_tiled.wgsl) call nothing else of a format, and
// embedding.wgsl calls fmt_value of a table format.
//
// Words: a block of BLK values is BBYTES bytes; its codes are read as QW code words (u32, 4 bytes);
// a code word holds QG groups of 4 values; a group's codes come one per byte (fmt_codes), the value
// is (code - ZP) d (+ m with offsets). Activations come as "activation words" of 4 values (A8: 4
// packed int8; f32: a vec4<f32>), numbered within the block (value 4p .. 4p + 3 is word p).
//
// Declared by the loader from bitweb.formats (Format.wgsl_constants): BLK, BBYTES, NP.
// Declared by the format's include (those marked * have a default below, used by a format whose
// include does not declare its own: the loader defines OWN_<name> for what it declares):
//   WT, WPT, fmt_wt(v, k)  how the kernels bind its tensors: array<WT>, WPT u32 words per element,
//                         fmt_wt = word k of an element (u32 words; I2_S, Q4_K, Q5_K 16-byte vec4<u32>)
//   QW, QG                code words per block; groups of 4 values per code word
//   ZP                    the zero code: value = (code - ZP) d (+ m)   (ternary: 1, w = c - 1)
//   fmt_word(t, bi, k)    code word k (< QW) of block bi of tensor t (blocks numbered over the
//                         whole tensor: bi = row * (N_IN / BLK) + block of the row)
//   fmt_codes(w)          the QG groups of code word w as codes, one per byte (byte i: value 4p + i)
//   fmt_group(w, g)       fmt_codes(w)[g] for any g < QG (no array: g need not be a constant)
//   fmt_pos(k, g)         p: group g of code word k holds values 4p .. 4p + 3 of its block (< BLK / 4,
//                         also for a group that holds nothing)
// * fmt_has(k, g)         false for a group that holds no values (TQ1_0's last word, group 4)
// * fmt_ws(t, nb)         the tensor scale of a tensor of nb blocks (1.0 without one)
//   PDM, fmt_dm(t, bi, u, p)   scale d and offset m (vec2) of plane p of quad u of block bi; PDM
//                         false: one d per block (fmt_dm(t, bi, 0, 0)), no offset: kernels load it once
//                         per block; PDM true: per plane, with its offset (sub-block scales)
//  The M = 1 unit (bitlinear gemv / gate_up, lmhead PACKED; the kernel gathers the activations,
//  common_packed.wgsl):
//   UW, fmt_words(t, bi, j)    a unit is UW code words (4: one 16-byte read), unit j of block bi
//                         (fmt_words: only common_unit.wgsl's fmt_unit calls it)
//   UACT                  how a unit's A8 activation words may be read (bitlinear.wgsl): 1 group g of
//                         the UW = 4 words is one aligned vec4 of activation words; 2 the 4 groups
//                         of word c are; 3 (QG = 1, UW a multiple of 4, at most 16) words 4i .. 4i + 3
//                         are; 0 one activation word at a time
// * XA, fmt_xpos(j, i), fmt_xhas(j, i)   XA extra activation words of unit j past its UW QG (word
//                         fmt_xpos of the block; zero where fmt_xhas is false): TQ1_0's 13th word
//   fmt_unit(t, bi, j, a) the unit's sum of w . a, scales (and offsets) applied, as f32: a (UActs)
//                         holds its UN = UW QG + XA activation words, group g of word c at slot(c, g),
//                         extra word i at UW QG + i (read with uact)
// * ZROW                  A8: a zero code the kernel subtracts once per row, ZROW sum_j q_j (I2_S:
//                         its fmt_unit sums raw codes c q, no block scale); 0.0 otherwise
//  The M > 1 quad (bitlinear_tiled.wgsl):
//   fmt_quad(t, bi, u)    code words 4u .. 4u + 3 of block bi (a quad: one 16-byte read), u < QW / 4
//   fmt_pslot(p, e)       the quad's NP planes of 16 consecutive values: word e of plane p (values
//                         4e .. 4e + 3) is group .y of the quad's word .x; plane p is activation
//                         vec4 (16 values) fmt_pos(4u + s.x, s.y) / 4 with s = fmt_pslot(p, 0)
//                         (QW % 4 words after the last quad are one plane each: their 4 groups)
//  A table format (role "table") also: fmt_value(t, e), value e of the tensor as f32.
// So w[value 4 fmt_pos(k, g) + i of block bi] = (byte i of fmt_group(fmt_word(t, bi, k), g) - ZP)
// d (+ m) * fmt_ws(t, nb).
// Needs from the including shader: fn wv(t: u32, i: u32) -> WT and fn wl(t: u32, i: u32) -> u32,
// element / u32 word i of weight tensor t (wl(t, i) = fmt_wt(wv(t, i / WPT), i % WPT)).
//
// Code arithmetic here (integer maths exact):
//   dot4(a, b)   sum of the 4 products of the int8 bytes of a and b (dot4I8Packed with DOT4, else
//                extractBits)
//   code8(c)     four codes (one per byte, each < 128) -> packed int8 c - ZP
//   code4(c)     four codes (one per byte) -> vec4<f32> of c - ZP
//   i8x4(v)      packed int8 -> vec4<f32>
//   M3           0x03030303: the low two bits of every byte
//   PV, WSUM     an activation word (A8: u32 of 4 packed int8 q; f32: vec4<f32>) and a group sum's
//                type (A8: exact i32; f32: f32)
//   gdot(c, a)   a group's codes c against activation word a: A8 dot4(code8(c), a), f32 dot(code4(c), a)
//   asum(a)      the sum of an activation word's 4 values (for offsets: m sum a)
//   UActs, slot(c, g), uact(a, s), uset(&a, s, v)   a unit's activation words (A8: in vec4<u32>s,
//                          4 words each, plane-major where UACT = 1 so that one load fills one; f32: a
//                          vec4<f32> each): the slot of group g of word c, read / write slot s
//   word_dot(w, a, c)      the QG groups of code word w against word c's activations (common_unit.wgsl:
//                          the usual fmt_unit, the sum over a unit's words times the block's d)
//   gsum(a, s0, n)         the values of the n activation words at slots s0 .. s0 + n - 1 summed (asum
//                          each; for offsets: m sum a); unit_asum(a) = gsum(a, 0, UN)
//   UN, UPK      activation words per unit (UW QG + XA); units per block (QW / UW)

const M3: u32 = 0x03030303u;
const UN: u32 = UW * QG + XA;
const UPK: u32 = QW / UW;

// ---- defaults: what a format's include does not declare itself (the loader's OWN_<name>) --------
#if !OWN_XA
const XA: u32 = 0u;                                         // no extra activation words
#endif
#if !OWN_ZROW
const ZROW: f32 = 0.0;                                      // no zero code to subtract per row
#endif
#if !OWN_fmt_has
fn fmt_has(k: u32, g: u32) -> bool { return true; }         // every group holds values
#endif
#if !OWN_fmt_xpos
fn fmt_xpos(j: u32, i: u32) -> u32 { return 0u; }
#endif
#if !OWN_fmt_xhas
fn fmt_xhas(j: u32, i: u32) -> bool { return false; }
#endif
#if !OWN_fmt_ws
fn fmt_ws(t: u32, nb: u32) -> f32 { return 1.0; }           // no tensor scale
#endif

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

fn code8(c: u32) -> u32 {
    return (c + (0x80u - ZP) * 0x01010101u) ^ 0x80808080u;   // byte c + 128 - ZP (no carry: c < 128 + ZP), then - 128
}

fn code4(c: u32) -> vec4<f32> {
    return vec4<f32>(unpack4xU8(c)) - f32(ZP);
}

fn i8x4(v: u32) -> vec4<f32> {
    let i = bitcast<i32>(v);
    return vec4<f32>(f32(extractBits(i, 0u, 8u)), f32(extractBits(i, 8u, 8u)),
                     f32(extractBits(i, 16u, 8u)), f32(extractBits(i, 24u, 8u)));
}

#if A8
alias PV = u32;
alias WSUM = i32;
fn gdot(c: u32, a: PV) -> i32 { return dot4(code8(c), a); }
fn asum(a: PV) -> i32 { return dot4(a, 0x01010101u); }
#else
alias PV = vec4<f32>;
alias WSUM = f32;
fn gdot(c: u32, a: PV) -> f32 { return dot(code4(c), a); }
fn asum(a: PV) -> f32 { return dot(a, vec4<f32>(1.0)); }
#endif

// The activation words of one M = 1 unit. A8: 4 packed words per vec4<u32>; where UACT = 1 the
// slots are plane-major (group g of words 0..3 is element g: one aligned vec4 of the kernel's
// activations), else word-major (QG c + g: UACT = 2, the 4 groups of word c, is element c).
#if A8
const NAV: u32 = (UN + 3u) / 4u;
alias UActs = array<vec4<u32>, NAV>;
fn slot(c: u32, g: u32) -> u32 { return select(QG * c + g, 4u * g + c, UACT == 1u); }
fn uact(a: UActs, s: u32) -> PV { return a[s >> 2u][s & 3u]; }
fn uset(a: ptr<function, UActs>, s: u32, v: PV) { (*a)[s >> 2u][s & 3u] = v; }
#else
alias UActs = array<vec4<f32>, UN>;
fn slot(c: u32, g: u32) -> u32 { return QG * c + g; }
fn uact(a: UActs, s: u32) -> PV { return a[s]; }
fn uset(a: ptr<function, UActs>, s: u32, v: PV) { (*a)[s] = v; }
#endif

// The QG groups of code word w against word c's activations (A8: exact int32 of w = c - ZP).
// Called once per word with constant c, and the groups are written out (`if (QG > g)` folds away;
// f32 sums in the order g = 0, 1, ...): CPU compilers keep a and the codes in registers only when
// every index is a constant (SwiftShader unrolls no loop, and compiles a dynamically indexed array
// as memory: slower to compile and to run).
fn word_dot(w: u32, a: UActs, c: u32) -> WSUM {
    let cs = fmt_codes(w);
    var s = WSUM(0);
    s += gdot(cs[0u], uact(a, slot(c, 0u)));
    if (QG > 1u) { s += gdot(cs[min(1u, QG - 1u)], uact(a, slot(c, 1u))); }
    if (QG > 2u) { s += gdot(cs[min(2u, QG - 1u)], uact(a, slot(c, 2u))); }
    if (QG > 3u) { s += gdot(cs[min(3u, QG - 1u)], uact(a, slot(c, 3u))); }
    if (QG > 4u) { s += gdot(cs[min(4u, QG - 1u)], uact(a, slot(c, 4u))); }
    if (QG > 5u) { s += gdot(cs[min(5u, QG - 1u)], uact(a, slot(c, 5u))); }
    if (QG > 6u) { s += gdot(cs[min(6u, QG - 1u)], uact(a, slot(c, 6u))); }
    if (QG > 7u) { s += gdot(cs[min(7u, QG - 1u)], uact(a, slot(c, 7u))); }
    return s;
}

// The values of the activation words at slots s0 .. s0 + n - 1 of a unit, summed (A8: exact int32), in
// order; n <= 16 with constant arguments keeps every index constant (a format's offsets: m sum a).
fn gsum(a: UActs, s0: u32, n: u32) -> WSUM {
    var s = asum(uact(a, s0));
    if (n > 1u) { s += asum(uact(a, s0 + 1u)); }
    if (n > 2u) { s += asum(uact(a, s0 + 2u)); }
    if (n > 3u) { s += asum(uact(a, s0 + 3u)); }
    if (n > 4u) { s += asum(uact(a, s0 + 4u)); }
    if (n > 5u) { s += asum(uact(a, s0 + 5u)); }
    if (n > 6u) { s += asum(uact(a, s0 + 6u)); }
    if (n > 7u) { s += asum(uact(a, s0 + 7u)); }
    for (var i = 8u; i < n; i++) { s += asum(uact(a, s0 + i)); }
    return s;
}

fn unit_asum(a: UActs) -> WSUM { return gsum(a, 0u, UN); }
