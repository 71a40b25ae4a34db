// requant.wgsl: re-quantize float weight rows to Q8_0 on the GPU (the LM head option, bitweb.engine).
//
// Maths, per block of 32 consecutive values x[0..31] of a row (ggml quantize_row_q8_0_ref):
//   amax = max_j |x[j]|,  d = amax / 127,  id = (d != 0) ? 1 / d : 0
//   q[j] = roundf(x[j] * id)        roundf: half away from zero, computed exactly as
//                                   t = trunc(v); t + sign(v) when |v - t| >= 0.5
//   stored d = f16(d) (pack2x16float), q as int8 (|q| <= 127; clamped for safety).
// f32 division may be off by a few ULP on some GPUs (WGSL allows 2.5 ULP), so q can differ from
// ggml by 1 where x * id is within a few ULP of a .5 tie; values that are exact multiples of
// d = 2^-k (the kernel test cases) come out exactly.
//
// Layouts (little endian):
//   src  the GGUF bytes of N_ROWS rows of K values, row-major (K % 32 == 0), as u32 words,
//        decoded by the format's include (`#include format`: fmt_value; F16, BF16, F32)
//   dst  Q8_0 blocks of 34 bytes: f16 d, then int8 q[32]; block b (= row * K/32 + column block)
//        at byte 34 b. Size: NB * 34 bytes rounded up to 4 (NB = N_ROWS * K / 32).
//
// Thread mapping: thread j = (wid.x + wid.y * nwg.x) * WG + local index writes the 68-byte pair
// of blocks 2j, 2j + 1 as 17 whole words (34 b is 2 mod 4 for odd b, so a block alone would
// share a word with its neighbour). An odd last block writes 9 words, the upper half of the last
// one zero (past the end of the blocks). Workgroups (x, y) from dense.workgroups_1d.
//
// Bindings: 0 src (read), 1 dst (read_write).

override K: u32 = 32u;          // values per row
override N_ROWS: u32 = 1u;      // rows
override WG: u32 = 64u;         // threads per workgroup

@group(0) @binding(auto) var<storage, read> src: array<WT>;
@group(0) @binding(auto) var<storage, read_write> dst: array<u32>;

fn wv(t: u32, i: u32) -> WT { return src[i]; }
fn wl(t: u32, i: u32) -> u32 { return fmt_wt(src[i / WPT], i % WPT); }
#include format

// value e (flat index over the rows) as f32
fn val(e: u32) -> f32 { return fmt_value(0u, e); }

fn roundf(v: f32) -> f32 {
    let t = trunc(v);
    return select(t, t + sign(v), abs(v - t) >= 0.5);
}

// block b -> (f16 bits of d in the low half, q bytes packed 4 per word in qw)
var<private> qw: array<u32, 8>;
fn quant_block(b: u32) -> u32 {
    let e0 = b * 32u;
    var amax = 0.0;
    for (var j = 0u; j < 32u; j++) {
        amax = max(amax, abs(val(e0 + j)));
    }
    let d = amax / 127.0;
    let id = select(0.0, 1.0 / d, d != 0.0);
    for (var w = 0u; w < 8u; w++) {
        var packed = 0u;
        for (var k = 0u; k < 4u; k++) {
            let q = i32(clamp(roundf(val(e0 + 4u * w + k) * id), -127.0, 127.0));
            packed |= (u32(q) & 0xffu) << (8u * k);
        }
        qw[w] = packed;
    }
    return pack2x16float(vec2<f32>(d, 0.0)) & 0xffffu;
}

@compute @workgroup_size(WG)
fn q8_0(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let nb = N_ROWS * (K / 32u);
    let j = (wid.x + wid.y * nwg.x) * WG + lid;
    let b0 = 2u * j;
    if (b0 >= nb) {
        return;
    }
    let o = 17u * j;
    // block 2j: bytes 0..33 = d0 (2) | q0 (32)
    let d0 = quant_block(b0);
    var q0 = qw;
    dst[o] = d0 | (q0[0] << 16u);
    for (var w = 1u; w < 8u; w++) {
        dst[o + w] = (q0[w - 1u] >> 16u) | (q0[w] << 16u);
    }
    let tail = q0[7] >> 16u;                 // q0[30], q0[31] in the low half of word 8
    if (b0 + 1u >= nb) {
        dst[o + 8u] = tail;
        return;
    }
    // block 2j + 1: bytes 34..67 = d1 (2) | q1 (32), word-aligned from byte 36
    let d1 = quant_block(b0 + 1u);
    dst[o + 8u] = tail | (d1 << 16u);
    for (var w = 0u; w < 8u; w++) {
        dst[o + 9u + w] = qw[w];
    }
}
