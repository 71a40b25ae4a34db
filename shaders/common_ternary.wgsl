// common_ternary.wgsl (#include common_ternary): reading packed ternary / binary GGUF weights and
// int8 dot products, shared by bitlinear.wgsl (M = 1) and bitlinear_tiled.wgsl (M > 1).
// Formats and layouts: see bitlinear.wgsl. Integer maths only (exact).
//
//   ldb(t, b)   the u32 at 2-byte aligned byte offset b of tensor t (TQ2_0 / TQ1_0 / Q1_0 blocks
//               are 66 / 54 / 18 bytes, so a word may straddle two u32: 16-bit funnel shift)
//   ldh(t, b)   the f16 at 2-byte aligned byte offset b of tensor t, as f32 (block scale d)
//   dot4(a, b)  sum of the 4 products of the int8 bytes of a and b (dot4I8Packed with DOT4,
//               else extractBits)
//   tern8(c)    four codes 0..2 (one per byte) -> packed int8 c - 1  (I2_S / TQ2_0 / TQ1_0: w = c - 1)
//   sign8(n)    the low 4 bits of n -> packed int8 2b - 1, bit i in byte i  (Q1_0: w = 2b - 1)
//   trits(w)    TQ1_0: the 5 trit planes of the 4 bytes of w as code bytes (plane k, byte i = trit k
//               of byte i of w: ((q * 3^k) % 256 * 3) >> 8), two bytes at a time in 16-bit lanes
// Needs from the including shader: fn wl(t: u32, i: u32) -> u32, u32 word i of weight tensor t.

fn ldb(t: u32, b: u32) -> u32 {
    let lo = wl(t, b >> 2u);
    if ((b & 2u) == 0u) { return lo; }
    return (lo >> 16u) | (wl(t, (b >> 2u) + 1u) << 16u);
}

fn ldh(t: u32, b: u32) -> f32 {
    return unpack2x16float(wl(t, b >> 2u) >> ((b & 2u) * 8u)).x;
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

fn tern8(c: u32) -> u32 {
    return ((c | 0x80808080u) - 0x01010101u) ^ 0x80808080u;
}

fn sign8(n: u32) -> u32 {
    let b01 = ((n & 0xFu) * 0x00204081u) & 0x01010101u;     // bit i -> byte i (0 / 1)
    return 0xFFFFFFFFu ^ (b01 * 0xFEu);                      // 0 -> 0xFF (-1), 1 -> 0x01
}

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
