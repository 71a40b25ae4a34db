// common_float_unit.wgsl (#include common_float_unit): a float format (F32, F16, BF16) in
// bitlinear.wgsl's M = 1 kernels (gemv, gate_up with their fusions), f32 activations only: the part
// of the packed-format interface (common_codes.wgsl) those kernels call. A "block" is the lane's
// unit of 16 values (BLK 16 from bitweb.formats, BBYTES its bytes), one code word per 4 values
// (QW 4, QG 1, UW 4, UPK 1), the weights bound as vec4<u32> (16 bytes a load; a row of a multiple
// of 16 values is whole elements); fmt_unit = sum of the 16 values times the unit's activations.
// The prefill tile and the A8 mode never take a float format (bitweb.kernels refuses them), so the
// code-word functions are stubs. Needs from the format's include: fmt_v16(t, bi), the 16 values of
// block bi as 4 vec4<f32> (its words from wv(t, i), element i of tensor t).

#include common_codes

alias WT = vec4<u32>;
const WPT: u32 = 4u;
fn fmt_wt(v: WT, k: u32) -> u32 { return v[k]; }

const QW: u32 = 4u;
const QG: u32 = 1u;
const ZP: u32 = 0u;
const PDM: bool = false;
const UACT: u32 = 0u;
const UW: u32 = 4u;

fn fmt_word(t: u32, bi: u32, k: u32) -> u32 { return 0u; }
fn fmt_quad(t: u32, bi: u32, u: u32) -> vec4<u32> { return vec4<u32>(); }
fn fmt_group(w: u32, g: u32) -> u32 { return w; }
fn fmt_codes(w: u32) -> array<u32, QG> { return array<u32, QG>(w); }
fn fmt_pslot(p: u32, e: u32) -> vec2<u32> { return vec2<u32>(e, 0u); }
fn fmt_dm(t: u32, bi: u32, u: u32, p: u32) -> vec2<f32> { return vec2<f32>(1.0, 0.0); }
fn fmt_pos(k: u32, g: u32) -> u32 { return k; }

fn fmt_unit(t: u32, bi: u32, j: u32, a: UActs) -> f32 {
    let w = fmt_v16(t, bi);
    return dot(w[0], uact(a, 0u)) + dot(w[1], uact(a, 1u)) + dot(w[2], uact(a, 2u)) + dot(w[3], uact(a, 3u));
}
