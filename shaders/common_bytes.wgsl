// common_bytes.wgsl (#include common_bytes): unaligned reads from GGUF block data bound as u32 words.
// Blocks of 66, 54, 34 or 18 bytes (TQ2_0, TQ1_0, Q8_0, Q1_0) start 2-byte aligned, so a 32-bit
// word of their data may straddle two u32: it is put together with a 16-bit funnel shift.
//
//   ldb(t, b)   the u32 at 2-byte aligned byte offset b of tensor t (little endian)
//   ldh(t, b)   the f16 at 2-byte aligned byte offset b of tensor t, as f32 (a block scale d)
//   ld8(t, b)   the byte at byte offset b of tensor t
//   ld16(t, b)  the 16 bytes at 2-byte aligned byte offset b of tensor t as 4 words (4 or 5 loads)
// Needs from the including shader: fn wl(t: u32, i: u32) -> u32, u32 word i of tensor t.

fn ldb(t: u32, b: u32) -> u32 {
    let lo = wl(t, b >> 2u);
    if ((b & 2u) == 0u) { return lo; }
    return (lo >> 16u) | (wl(t, (b >> 2u) + 1u) << 16u);
}

fn ldh(t: u32, b: u32) -> f32 {
    return unpack2x16float(wl(t, b >> 2u) >> ((b & 2u) * 8u)).x;
}

fn ld8(t: u32, b: u32) -> u32 {
    return (wl(t, b >> 2u) >> ((b & 3u) * 8u)) & 0xFFu;
}

fn ld16(t: u32, b: u32) -> vec4<u32> {
    let i = b >> 2u;
    let v = vec4<u32>(wl(t, i), wl(t, i + 1u), wl(t, i + 2u), wl(t, i + 3u));
    if ((b & 2u) == 0u) { return v; }
    let n = vec4<u32>(v.yzw, wl(t, i + 4u));
    return (v >> vec4<u32>(16u)) | (n << vec4<u32>(16u));
}
