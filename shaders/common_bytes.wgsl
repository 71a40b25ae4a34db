// common_bytes.wgsl (#include common_bytes): unaligned reads from GGUF block data bound as u32 words.
// Blocks of 66, 54, 34 or 18 bytes (TQ2_0, TQ1_0, Q8_0, Q1_0) start 2-byte aligned, so a 32-bit
// word of their data may straddle two u32: it is put together with a 16-bit funnel shift.
//
//   ldb(t, b)   the u32 at 2-byte aligned byte offset b of tensor t (little endian)
//   ldh(t, b)   the f16 at 2-byte aligned byte offset b of tensor t, as f32 (a block scale d)
// Needs from the including shader: fn wl(t: u32, i: u32) -> u32, u32 word i of tensor t.

fn ldb(t: u32, b: u32) -> u32 {
    let lo = wl(t, b >> 2u);
    if ((b & 2u) == 0u) { return lo; }
    return (lo >> 16u) | (wl(t, (b >> 2u) + 1u) << 16u);
}

fn ldh(t: u32, b: u32) -> f32 {
    return unpack2x16float(wl(t, b >> 2u) >> ((b & 2u) * 8u)).x;
}
