// common_ternary.wgsl (#include common_ternary): packed int8 arithmetic for the ternary / binary
// weight formats (included by every packed shaders/fmt_*.wgsl) and the interface those formats share.
// Integer maths only (exact).
//
//   dot4(a, b)  sum of the 4 products of the int8 bytes of a and b (dot4I8Packed with DOT4,
//               else extractBits)
//   tern8(c)    four codes 0..3 (one per byte) -> packed int8 c - 1  (w = c - 1; code 3 -> +2)
//   tern4(c)    four codes 0..3 (one per byte) -> vec4<f32> of c - 1
//   i8x4(v)     packed int8 -> vec4<f32>
//   M3          0x03030303: the low two bits of every byte
//
// The packed-format interface: each shaders/fmt_<name>.wgsl of a ternary / binary format declares
// (blocks bi are numbered over the whole tensor: bi = row * (N_IN / BLK) + block of the row)
//   BLK, BBYTES          values and bytes per block
//   QW, QG               code words (u32) per block; groups of 4 values per code word
//   CW                   code words holding the values of one chunk of min(BLK, 128) values
//   fmt_word(t, bi, k)   code word k (< QW) of block bi of tensor t
//   UW                   code words per lane unit of the M = 1 kernels (common_packed.wgsl): 4 where a
//                        block's code bytes come as 16-byte chunks (one block scale load per 64+
//                        values), else 1; QW is a multiple of UW
//   fmt_words(t, bi, j)  code words UW j .. UW j + UW - 1 of block bi (unit j of the block)
//   UACT                 how the M = 1 kernel reads a unit's activations (A8): 1 group g of the UW = 4
//                        words is 4 consecutive activation words from a multiple of 4 (one vec4 load);
//                        2 the 4 groups of word c are; 0 one activation word at a time
//   fmt_codes(w)         the QG groups of a code word as codes c, one per byte (byte i: value 4p + i),
//                        w = c - 1 (a binary format gives c = 2b: 0 or 2)
//   fmt_pos(k, g)        p: group g of code word k holds values 4p .. 4p + 3 of its block (always
//                        < BLK / 4, also for a group that holds nothing)
//   fmt_group(w, g)      fmt_codes(w)[g] for any g < QG (no array: g need not be a constant)
//   fmt_has(k, g)        false for a group that holds no values (TQ1_0's last word, group 4)
//   fmt_cword(h, i)      the i-th (i < CW) code word holding values of chunk h of a block
//   fmt_d(t, bi)         the block scale d as f32 (1.0 for a format without block scales)
//   fmt_ws(t, nb)        the tensor scale of a tensor of nb blocks (1.0 for a format without one)
// so w[value 4 fmt_pos(k, g) + i of block bi] = (byte i of fmt_codes(fmt_word(t, bi, k))[g] - 1)
// * fmt_d(t, bi) * fmt_ws(t, nb). bitlinear.wgsl (M = 1) and bitlinear_tiled.wgsl (M > 1) use nothing else.
// Needs from the including shader: fn wl(t: u32, i: u32) -> u32, u32 word i of weight tensor t.

const M3: u32 = 0x03030303u;

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
    return (c + 0x7F7F7F7Fu) ^ 0x80808080u;       // byte c + 127 (no carry: <= 130), then - 128
}

fn tern4(c: u32) -> vec4<f32> {
    return vec4<f32>(unpack4xU8(c)) - 1.0;
}

fn i8x4(v: u32) -> vec4<f32> {
    let i = bitcast<i32>(v);
    return vec4<f32>(f32(extractBits(i, 0u, 8u)), f32(extractBits(i, 8u, 8u)),
                     f32(extractBits(i, 16u, 8u)), f32(extractBits(i, 24u, 8u)));
}
