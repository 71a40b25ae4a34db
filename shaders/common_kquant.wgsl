// common_kquant.wgsl (#include common_kquant): what the K-quants with 4-byte aligned blocks (Q2_K,
// Q4_K, Q5_K, read as u32 words: common_u32) share, and the 6-bit scales and mins of Q4_K / Q5_K.
//   kq_w(bi)        the first u32 word of block bi
//   kq_v4(t, i)     u32 words i .. i + 3 of tensor t (a format bound as vec4<u32>, Q4_K / Q5_K,
//                   declares its own: one 16-byte load; i is then a multiple of 4)
//   kq_head(t, bi)  the block's first 16 bytes (Q4_K / Q5_K: h.x = d | dmin << 16, h.y = scales[0..3],
//                   h.z = scales[4..7], h.w = scales[8..11]): one aligned 16-byte read
//   kq_scm(h, u)    (d sc, -(dmin mn)) of sub-block u (< 8) from the head h, sc and mn its 6-bit
//                   scale and min (ggml's get_scale_min_k4: sub-blocks 0-3 in the low 6 bits of
//                   scales[u], [u + 4]; 4-7 a nibble of scales[u + 4] and the top 2 bits of
//                   scales[u - 4], [u])
// Needs from the including shader: fn wl(t: u32, i: u32) -> u32 (word i of weight tensor t).

fn kq_w(bi: u32) -> u32 { return bi * (BBYTES / 4u); }
#if !OWN_kq_v4
fn kq_v4(t: u32, i: u32) -> vec4<u32> { return vec4<u32>(wl(t, i), wl(t, i + 1u), wl(t, i + 2u), wl(t, i + 3u)); }
#endif
fn kq_head(t: u32, bi: u32) -> vec4<u32> { return kq_v4(t, kq_w(bi)); }

fn kq_scm(h: vec4<u32>, u: u32) -> vec2<f32> {
    let dd = unpack2x16float(h.x);
    let i = 8u * (u % 4u);
    var sc = (h.y >> i) & 63u;
    var mn = (h.z >> i) & 63u;
    if (u >= 4u) {
        sc = ((h.w >> i) & 15u) | ((((h.y >> i) >> 6u) & 3u) << 4u);
        mn = (((h.w >> i) >> 4u) & 15u) | ((((h.z >> i) >> 6u) & 3u) << 4u);
    }
    return vec2<f32>(dd.x * f32(sc), -(dd.y * f32(mn)));
}
