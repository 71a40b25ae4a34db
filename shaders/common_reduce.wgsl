// common_reduce.wgsl (#include common_reduce): shared-memory tree reductions in a fixed order
// (deterministic; the same order wherever they are used), for adapters without subgroups or where
// the order must not depend on the subgroup size.
//
//   tree_add(li, lane, width, n)
//       Threads form groups of `width` consecutive local indices (lane = li % width; width a power
//       of two dividing WG). Each thread has stored its value i at red[i * WG + li], i < n. On
//       return red[i * WG + li - lane] holds the sum over its group: in place, red[j] += red[j + s]
//       for s = width/2, width/4, ..., 1 (lanes < s), a workgroupBarrier before and after each step.
//   tree_sum(lid, v), tree_max(lid, v)
//       The sum / max of v over the whole workgroup (width WG), returned to every thread.
// Needs from the including shader: override WG (a power of two) and
// var<workgroup> red: array<f32, N> with N >= n * WG. Call from uniform control flow (barriers).

fn tree_add(li: u32, lane: u32, width: u32, n: u32) {
    workgroupBarrier();
    for (var s = width / 2u; s > 0u; s >>= 1u) {
        if (lane < s) {
            for (var i = 0u; i < n; i++) { red[i * WG + li] += red[i * WG + li + s]; }
        }
        workgroupBarrier();
    }
}

fn tree_sum(lid: u32, v: f32) -> f32 {
    red[lid] = v;
    tree_add(lid, lid, WG, 1u);
    let t = red[0];
    workgroupBarrier();
    return t;
}

fn tree_max(lid: u32, v: f32) -> f32 {
    red[lid] = v;
    workgroupBarrier();
    for (var h = WG / 2u; h > 0u; h >>= 1u) {
        if (lid < h) { red[lid] = max(red[lid], red[lid + h]); }
        workgroupBarrier();
    }
    let t = red[0];
    workgroupBarrier();
    return t;
}
