// fmt_tq2_0.wgsl (#include format with FMT_TQ2): llama.cpp's TQ2_0, in the packed-format
// interface of common_ternary.wgsl.
//
// 256 values per 66-byte block: qs[64], then f16 d. qs[32h + m] holds value 128h + 32l + m in
// bits 2l (l < 4); code c -> w = (c - 1) d. Code word k (qs bytes 4k .. 4k + 3) holds in plane g
// (shift 2g) the values 128 (k / 8) + 32g + 4 (k % 8) .. + 3: words 0..7 the first 128 values,
// words 8..15 the second.

#include common_bytes
#include common_ternary

const BLK: u32 = 256u;
const BBYTES: u32 = 66u;
const QW: u32 = 16u;
const QG: u32 = 4u;
const CW: u32 = 8u;
const UACT: u32 = 1u;
const UW: u32 = 4u;

fn fmt_word(t: u32, bi: u32, k: u32) -> u32 { return ldb(t, bi * BBYTES + 4u * k); }
fn fmt_words(t: u32, bi: u32, j: u32) -> array<u32, UW> {
    let v = ld16(t, bi * BBYTES + 16u * j);
    return array<u32, UW>(v.x, v.y, v.z, v.w);
}
fn fmt_group(w: u32, g: u32) -> u32 { return (w >> (2u * g)) & M3; }
fn fmt_codes(w: u32) -> array<u32, QG> {
    return array<u32, QG>(w & M3, (w >> 2u) & M3, (w >> 4u) & M3, (w >> 6u) & M3);
}
fn fmt_pos(k: u32, g: u32) -> u32 { return 32u * (k / 8u) + 8u * g + k % 8u; }
fn fmt_has(k: u32, g: u32) -> bool { return true; }
fn fmt_cword(h: u32, i: u32) -> u32 { return 8u * h + i; }
fn fmt_d(t: u32, bi: u32) -> f32 { return ldh(t, bi * BBYTES + 64u); }
fn fmt_ws(t: u32, nb: u32) -> f32 { return 1.0; }
