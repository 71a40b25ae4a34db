// stream.wgsl: the plain streaming read the benchmarks measure every kernel against (bitweb.bench).
//
// Maths: acc = XOR of every 16-byte word of src; out[0] = acc only when it equals a constant
// nobody expects (so the result is used and no read can be optimised away, and nothing is written
// in practice). Bytes read = 16 * arrayLength(&src); bytes written ~ 0.
//
// Layout: src is any buffer of N bytes (N % 16 == 0) read as array<vec4<u32>>; out u32[>= 1].
//
// Thread mapping: grid-stride loop. Invocation g (global id x; the grid is (workgroups, 1, 1))
// reads words g, g + G, g + 2G, ... with G = WG * num_workgroups, so the invocations of a
// workgroup (and of a subgroup) read adjacent words in every step (coalesced on GPUs; one
// contiguous 16 * WG-byte run per workgroup per step on CPU rasterisers). The benchmark picks the
// fastest of a few workgroup counts: the best plain read this adapter does.
//
// Bindings: 0 src (read), 1 out (read_write).

override WG: u32 = 256u;          // threads per workgroup

@group(0) @binding(auto) var<storage, read> src: array<vec4<u32>>;
@group(0) @binding(auto) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let n = arrayLength(&src);
    let stride = nwg.x * WG;
    var acc = vec4<u32>(0u);
    for (var i = gid.x; i < n; i += stride) {
        acc ^= src[i];
    }
    let r = acc.x ^ acc.y ^ acc.z ^ acc.w;
    if (r == 0x9E3779B9u) {
        out[0] = r;
    }
}
