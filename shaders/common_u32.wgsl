// common_u32.wgsl (#include common_u32): the binding of a format whose tensors the kernels read as
// u32 words (every format but I2_S, Q4_K and Q5_K, whose blocks are 16-byte aligned and bound as
// vec4<u32>): WT = u32, one word per element (the interface of common_codes.wgsl; float formats
// declare it too, for the kernels that bind array<WT>).

alias WT = u32;
const WPT: u32 = 1u;
fn fmt_wt(v: WT, k: u32) -> u32 { return v; }
