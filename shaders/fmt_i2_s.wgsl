// fmt_i2_s.wgsl (#include format with FMT_I2S): bitnet.cpp's I2_S (x86 layout of the published
// 2B4T file), in the packed-format interface of common_ternary.wgsl.
//
// 128 values per 32-byte block: byte b holds value b in bits 7:6, 32 + b in 5:4, 64 + b in 3:2,
// 96 + b in 1:0; code c -> w = c - 1 (0 -> -1, 1 -> 0, 2 -> +1; 3, never written, -> +2). No block
// scale: one f32 scale for the whole tensor after the blocks (byte n / 4), then 28 zero bytes.
// Code word k (bytes 4k .. 4k + 3) holds in plane g (shift 6 - 2g) the values 32g + 4k .. + 3.
// (bitlinear.wgsl's I2_S path uses the codes directly: sum (c - 1) q = sum c q - sum q.)

#include common_bytes
#include common_ternary

const BLK: u32 = 128u;
const BBYTES: u32 = 32u;
const QW: u32 = 8u;
const QG: u32 = 4u;
const CW: u32 = 8u;

fn fmt_word(t: u32, bi: u32, k: u32) -> u32 { return wl(t, bi * 8u + k); }
fn fmt_group(w: u32, g: u32) -> u32 { return (w >> (6u - 2u * g)) & M3; }
fn fmt_codes(w: u32) -> array<u32, QG> {
    return array<u32, QG>((w >> 6u) & M3, (w >> 4u) & M3, (w >> 2u) & M3, w & M3);
}
fn fmt_pos(k: u32, g: u32) -> u32 { return 8u * g + k; }
fn fmt_has(k: u32, g: u32) -> bool { return true; }
fn fmt_cword(h: u32, i: u32) -> u32 { return i; }
fn fmt_d(t: u32, bi: u32) -> f32 { return 1.0; }
fn fmt_ws(t: u32, nb: u32) -> f32 { return bitcast<f32>(wl(t, nb * 8u)); }
