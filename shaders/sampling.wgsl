// sampling.wgsl: token selection on the GPU, so only a token id (or k candidates) is read back.
//
// Every entry runs as ONE workgroup of WG threads (WG a power of two, <= 256) over V logits.
// Repetition penalty (argmax, topk; llama.cpp semantics), applied in place to the logits first:
//   for each distinct id t in pids[0 .. params.n_ids) with t < V:
//     logits[t] = logits[t] > 0 ? logits[t] / r : logits[t] * r,     r = params.penalty (1 = off)
//   then a storageBarrier, so the rest of the workgroup reads the penalised logits.
// argmax:  out[0] = the lowest index of the largest logit (numpy argmax; NaN never wins;
//          0xffffffff if every logit is NaN). The decode loop feeds out[0] to embedding.wgsl.
// topk:    exact top K (K <= min(V, 256)) sorted by logit descending, ties by lower id, and the
//          softmax statistics over the whole vocabulary for exact probabilities on the host:
//            top_ids[i] = id, top_vals[i] = logits[id] (penalised), i < K
//            top_vals[K] = max_t l_t,  top_vals[K + 1] = sum_t exp((l_t - max) * params.inv_temp)
//          Selection: radix select on order-preserving u32 keys (4 passes of 8 bits, workgroup
//          atomics histogram) finds the K-th largest key T; elements with key > T and the first
//          (lowest-id) elements equal to T are gathered in id order, then bitonic-sorted.
// softmax: rows of N_ROW values (one workgroup per row): y = exp(x - max) / sum exp(x - max).
// Reductions are shared-memory trees in a fixed order.
// MASK (argmax, topk: a grammar's allowed tokens, bitweb.grammar): mask u32[ceil(V / 32)], token t
//          allowed iff (mask[t >> 5] >> (t & 31)) & 1. After the penalty, a token left out counts as
//          a NaN logit does: argmax never picks it, the softmax statistics skip it, and topk ranks
//          it last (key 0), so when fewer than K tokens are allowed the list ends with tokens left
//          out (their top_vals are their logits: the host drops them by the same mask).
//
// Bindings: argmax  0 logits f32[V] (read_write), 1 out u32[1], 2 pids u32[>= 1], 3 params
//                   (MASK: 4 mask)
//           topk    0 logits, 1 top_ids u32[K], 2 pids, 3 params, 4 top_vals f32[K + 2] (MASK: 5 mask)
//           softmax 0 x f32[M][N_ROW], 1 y f32[M][N_ROW]

override V: u32 = 1000u;
override K: u32 = 40u;
override N_ROW: u32 = 1000u;
override WG: u32 = 256u;

#include common_params

@group(0) @binding(auto) var<storage, read_write> logits: array<f32>;
@group(0) @binding(auto) var<storage, read_write> out: array<u32>;
@group(0) @binding(auto) var<storage, read> pids: array<u32>;
@group(0) @binding(auto) var<storage, read> params: Params;
@group(0) @binding(auto) var<storage, read_write> top_vals: array<f32>;

const NONE: u32 = 0xffffffffu;

#if MASK
@group(0) @binding(top_vals) var<storage, read> amask: array<u32>;    // argmax's (top_vals' slot is topk's)
@group(0) @binding(auto) var<storage, read> tmask: array<u32>;    // topk's
#endif

// token i is allowed (argmax's mask; always without MASK)
fn allowed_a(i: u32) -> bool {
#if MASK
    return ((amask[i >> 5u] >> (i & 31u)) & 1u) != 0u;
#else
    return true;
#endif
}

// token i is allowed (topk's mask)
fn allowed_t(i: u32) -> bool {
#if MASK
    return ((tmask[i >> 5u] >> (i & 31u)) & 1u) != 0u;
#else
    return true;
#endif
}

var<workgroup> red: array<f32, WG>;    // tree_sum / tree_max scratch

fn penalize(lid: u32) {
    let r = params.penalty;
    if (r != 1.0) {
        for (var i = lid; i < params.n_ids; i += WG) {
            let t = pids[i];
            var first = t < V;
            for (var j = 0u; j < i && first; j++) { first = pids[j] != t; }
            if (first) {
                let l = logits[t];
                logits[t] = select(l * r, l / r, l > 0.0);
            }
        }
    }
    storageBarrier();
}

#include common_reduce

// candidate (v, i) beats (bv, bi): a number, and larger, or equal with a lower index
fn better(v: f32, i: u32, bv: f32, bi: u32) -> bool {
    return i != NONE && v == v && (bi == NONE || v > bv || (v == bv && i < bi));
}

// Each thread keeps the lowest index of its largest logit; then the largest of those (as an
// order-preserving key, -0 as +0 so that they tie as numbers do) by atomicMax, and the lowest
// index holding it by atomicMin: two workgroup words, where a shared-memory tree needs 2 WG
// (SwiftShader compiles in time that grows with the workgroup memory: 192 -> 20 ms here).
var<workgroup> best_key: atomic<u32>;      // 0: no number (every key of a number is > 0)
var<workgroup> best_id: atomic<u32>;

@compute @workgroup_size(WG)
fn argmax(@builtin(local_invocation_index) lid: u32) {
    penalize(lid);
    var bv = 0.0;
    var bi = NONE;
    for (var i = lid; i < V; i += WG) {
        let v = logits[i];
        if (better(v, i, bv, bi) && allowed_a(i)) { bv = v; bi = i; }
    }
    if (lid == 0u) { atomicStore(&best_key, 0u); atomicStore(&best_id, NONE); }
    workgroupBarrier();                    // (workgroup memory is not zeroed on every backend)
    let kb = select(0u, key(select(bv, 0.0, bv == 0.0)), bi != NONE);
    atomicMax(&best_key, kb);
    workgroupBarrier();
    if (bi != NONE && kb == atomicLoad(&best_key)) { atomicMin(&best_id, bi); }
    workgroupBarrier();
    if (lid == 0u) { out[0] = atomicLoad(&best_id); }
}

// ---- topk ---------------------------------------------------------------------------------
var<workgroup> hist: array<atomic<u32>, 256>;
var<workgroup> sel: array<u32, 3>;          // key prefix, prefix mask, how many equal to T to take
var<workgroup> ck: array<u32, 256>;         // candidate keys
var<workgroup> cid: array<u32, 256>;        // candidate ids
var<workgroup> cnt: array<u32, WG * 2u>;    // per-thread counts (> T, == T), then offsets

// order-preserving key: a > b as floats <=> key(a) > key(b); NaN -> 0 (last)
fn key(v: f32) -> u32 {
    let u = bitcast<u32>(v);
    if (v != v) { return 0u; }
    return select(u | 0x80000000u, ~u, (u & 0x80000000u) != 0u);
}

// topk's key of token i: 0 (last, as NaN) when the mask leaves it out
fn tkey(i: u32) -> u32 {
    return select(0u, key(logits[i]), allowed_t(i));
}

// candidate a goes before candidate b
fn before(ka: u32, ia: u32, kb: u32, ib: u32) -> bool {
    return ka > kb || (ka == kb && ia < ib);
}

@compute @workgroup_size(WG)
fn topk(@builtin(local_invocation_index) lid: u32) {
    penalize(lid);
    // softmax statistics
    var mx = -3.4028234e38;
    for (var i = lid; i < V; i += WG) {
        let v = logits[i];
        if (v == v && allowed_t(i)) { mx = max(mx, v); }
    }
    let gmax = tree_max(lid, mx);
    var se = 0.0;
    for (var i = lid; i < V; i += WG) {
        let v = logits[i];
        if (v == v && allowed_t(i)) { se += exp((v - gmax) * params.inv_temp); }
    }
    let gsum = tree_sum(lid, se);

    // radix select of the K-th largest key
    if (lid == 0u) { sel[0] = 0u; sel[1] = 0u; sel[2] = K; }
    for (var round_ = 0u; round_ < 4u; round_++) {
        let shift = 24u - 8u * round_;
        for (var d = lid; d < 256u; d += WG) { atomicStore(&hist[d], 0u); }
        workgroupBarrier();
        let prefix = sel[0];
        let mask = sel[1];
        for (var i = lid; i < V; i += WG) {
            let k = tkey(i);
            if ((k & mask) == prefix) { atomicAdd(&hist[(k >> shift) & 255u], 1u); }
        }
        workgroupBarrier();
        if (lid == 0u) {
            let need = sel[2];
            var above = 0u;
            for (var d = 255i; d >= 0i; d--) {
                let c = atomicLoad(&hist[u32(d)]);
                if (above + c >= need) {
                    sel[0] = prefix | (u32(d) << shift);
                    sel[1] = mask | (255u << shift);
                    sel[2] = need - above;
                    break;
                }
                above += c;
            }
        }
        workgroupBarrier();
    }
    let T = sel[0];
    let take_eq = sel[2];
    let n_gt = K - take_eq;

    // gather in id order: thread t owns ids [t C, (t+1) C)
    let C = (V + WG - 1u) / WG;
    let i0 = lid * C;
    let i1 = min(V, i0 + C);
    var ng = 0u;
    var ne = 0u;
    for (var i = i0; i < i1; i++) {
        let k = tkey(i);
        if (k > T) { ng++; } else if (k == T) { ne++; }
    }
    cnt[2u * lid] = ng;
    cnt[2u * lid + 1u] = ne;
    workgroupBarrier();
    if (lid == 0u) {
        var sg = 0u;
        var sq = 0u;
        for (var t = 0u; t < WG; t++) {
            let a = cnt[2u * t];
            let b = cnt[2u * t + 1u];
            cnt[2u * t] = sg;
            cnt[2u * t + 1u] = sq;
            sg += a;
            sq += b;
        }
    }
    workgroupBarrier();
    var og = cnt[2u * lid];
    var oe = cnt[2u * lid + 1u];
    for (var i = i0; i < i1; i++) {
        let k = tkey(i);
        if (k > T) {
            ck[og] = k;
            cid[og] = i;
            og++;
        } else if (k == T) {
            if (oe < take_eq) {
                ck[n_gt + oe] = k;
                cid[n_gt + oe] = i;
            }
            oe++;
        }
    }
    // pad to a power of two and bitonic sort
    var P = 1u;
    while (P < K) { P <<= 1u; }
    for (var i = K + lid; i < P; i += WG) { ck[i] = 0u; cid[i] = NONE; }
    workgroupBarrier();
    for (var size = 2u; size <= P; size <<= 1u) {
        for (var stride = size / 2u; stride > 0u; stride >>= 1u) {
            for (var i = lid; i < P; i += WG) {
                let j = i ^ stride;
                if (j > i) {
                    let first = (i & size) == 0u;
                    let ki = ck[i];
                    let kj = ck[j];
                    let ii = cid[i];
                    let ij = cid[j];
                    if (before(kj, ij, ki, ii) == first) {
                        ck[i] = kj;
                        cid[i] = ij;
                        ck[j] = ki;
                        cid[j] = ii;
                    }
                }
            }
            workgroupBarrier();
        }
    }
    for (var i = lid; i < K; i += WG) {
        out[i] = cid[i];
        top_vals[i] = logits[cid[i]];
    }
    if (lid == 0u) {
        top_vals[K] = gmax;
        top_vals[K + 1u] = gsum;
    }
}

// ---- softmax ------------------------------------------------------------------------------
@group(0) @binding(0) var<storage, read> sx: array<f32>;
@group(0) @binding(auto) var<storage, read_write> sy: array<f32>;

@compute @workgroup_size(WG)
fn softmax(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let b = (wid.x + wid.y * nwg.x) * N_ROW;
    var mx = -3.4028234e38;
    for (var i = lid; i < N_ROW; i += WG) { mx = max(mx, sx[b + i]); }
    let m = tree_max(lid, mx);
    var se = 0.0;
    for (var i = lid; i < N_ROW; i += WG) { se += exp(sx[b + i] - m); }
    let s = tree_sum(lid, se);
    for (var i = lid; i < N_ROW; i += WG) { sy[b + i] = exp(sx[b + i] - m) / s; }
}
