// common_act.wgsl (#include common_act): the FFN gate activation, shared by bitlinear.wgsl and
// bitlinear_tiled.wgsl (gate_up, fused) and glue.wgsl (act_mul, after a float-weight gate).
//
//   act(g) = relu(g)^2                     (BitNet b1.58; the default)
//   act(g) = silu(g) = g / (1 + exp(-g))   with the define ACT_SILU, computed without overflow as
//            g * 1/(1+e) (g >= 0) or g * e/(1+e) (g < 0), e = exp(-|g|)
// f32. Needs nothing from the including shader.

fn act(g: f32) -> f32 {
#if ACT_SILU
    let e = exp(-abs(g));
    return g * select(e / (1.0 + e), 1.0 / (1.0 + e), g >= 0.0);
#else
    let r = max(g, 0.0);
    return r * r;
#endif
}
