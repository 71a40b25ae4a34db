// glue.wgsl: the element-wise steps that float-weight linears (F32/F16/BF16/Q8_0 blocks, run by
// dense.wgsl, which has no residual / gating fusions) need around them in a decoder block.
// Blocks of packed linears never use this file: bitlinear.wgsl fuses these steps.
//
//   add:      y[i] = y[i] + a[i] * mult[0]                              i < N   (residual add)
//   act_mul:  y[i] = act(a[i] * mult[0]) * (u[i] * mult[1])             i < N   (FFN gate * up)
//             act = relu(.)^2, or silu with ACT_SILU (common_act.wgsl, as bitlinear.wgsl)
// f32 throughout. Bindings: add 0 y, 1 a, 2 mult | act_mul 0 y, 1 a (gate), 2 mult, 3 u (up).
// Thread mapping: one thread per element, workgroups (ceil(N / WG), 1, 1).

override N: u32 = 256u;
override WG: u32 = 64u;

@group(0) @binding(auto) var<storage, read_write> y: array<f32>;
@group(0) @binding(auto) var<storage, read> a: array<f32>;
@group(0) @binding(auto) var<storage, read> mult: array<f32>;
#if ACT_MUL
@group(0) @binding(auto) var<storage, read> u: array<f32>;
#endif

#include common_act

#if !ACT_MUL
@compute @workgroup_size(WG)
fn add(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i < N) {
        y[i] = y[i] + a[i] * mult[0];
    }
}
#endif

#if ACT_MUL
@compute @workgroup_size(WG)
fn act_mul(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i < N) {
        y[i] = act(a[i] * mult[0]) * (u[i] * mult[1]);
    }
}
#endif
