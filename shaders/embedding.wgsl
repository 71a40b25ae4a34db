// embedding.wgsl: x[m] = row ids[m] of token_embd, as f32.
//
// Table: N_VOCAB rows of N elements, the GGUF bytes unchanged, possibly split in shards of whole
// rows (the same shard buffers as the tied LM head, bitweb.kernels.dense.shard_rows): binding
// w<s> holds rows [ROW0 + s RPS, ROW0 + (s+1) RPS). NS1..NS7 (defines) declare w1..w7.
// Values are decoded by the format's include (`#include format`: fmt_value of shaders/fmt_<name>.wgsl;
// the shards bound as its array<WT>;
// F16 with unpack2x16float: one row per token, so the bandwidth of native f16 does not matter here).
// Element e of the bound rows is read from 32-bit words, so any N works (Q8_0: N % 32 == 0).
// Token ids come from a GPU buffer: the host's prompt ids (prefill) or the sampler's output
// (decode: sampling.wgsl writes the chosen id to word 0, so no host round trip).
// A token outside [0, N_VOCAB) gives a row of NaN (never a silent wrong row); a token outside
// the rows bound to this dispatch (one Step per shard when the shards do not all fit in one
// bind group) is left to the dispatch that has it.
//
// Bindings: 0 ids u32[M], 1 x f32[M][N], 2.. w0, w1, ... (one per bound shard).
// Thread mapping: one workgroup per token row m (workgroup id x + y * nx); threads over elements.

override N: u32 = 256u;          // row length
override N_VOCAB: u32 = 1u;      // rows of the whole table
override RPS: u32 = 1u;          // rows per shard binding (every bound shard but the last is full)
override NSB: u32 = 1u;          // shards bound here
override ROW0: u32 = 0u;         // first row of w0
override WG: u32 = 64u;

@group(0) @binding(auto) var<storage, read> ids: array<u32>;
@group(0) @binding(auto) var<storage, read_write> x: array<u32>;   // f32 bits (NaN rows written as bits)
@group(0) @binding(auto) var<storage, read> w0: array<WT>;
#if NS1
@group(0) @binding(auto) var<storage, read> w1: array<WT>;
#endif
#if NS2
@group(0) @binding(auto) var<storage, read> w2: array<WT>;
#endif
#if NS3
@group(0) @binding(auto) var<storage, read> w3: array<WT>;
#endif
#if NS4
@group(0) @binding(auto) var<storage, read> w4: array<WT>;
#endif
#if NS5
@group(0) @binding(auto) var<storage, read> w5: array<WT>;
#endif
#if NS6
@group(0) @binding(auto) var<storage, read> w6: array<WT>;
#endif
#if NS7
@group(0) @binding(auto) var<storage, read> w7: array<WT>;
#endif

// element i of shard s (bound as the format's WT), and its u32 word i
fn wl(s: u32, i: u32) -> u32 { return fmt_wt(wv(s, i / WPT), i % WPT); }
fn wv(s: u32, i: u32) -> WT {
    switch s {
#if NS1
        case 1u: { return w1[i]; }
#endif
#if NS2
        case 2u: { return w2[i]; }
#endif
#if NS3
        case 3u: { return w3[i]; }
#endif
#if NS4
        case 4u: { return w4[i]; }
#endif
#if NS5
        case 5u: { return w5[i]; }
#endif
#if NS6
        case 6u: { return w6[i]; }
#endif
#if NS7
        case 7u: { return w7[i]; }
#endif
        default: { return w0[i]; }
    }
}

#include format

@compute @workgroup_size(WG)
fn embed(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
    let m = wid.x + wid.y * nwg.x;
    let tok = ids[m];
    if (tok >= N_VOCAB) {
        if (ROW0 == 0u) {
            for (var i = lid; i < N; i += WG) { x[m * N + i] = 0x7fc00000u; }
        }
        return;
    }
    if (tok < ROW0 || tok - ROW0 >= NSB * RPS) { return; }
    let s = (tok - ROW0) / RPS;
    let r = tok - ROW0 - s * RPS;
    for (var i = lid; i < N; i += WG) { x[m * N + i] = bitcast<u32>(fmt_value(s, r * N + i)); }
}
