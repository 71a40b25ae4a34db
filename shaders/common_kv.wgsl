// common_kv.wgsl (#include common_kv): the KV cache's storage, shared by rope.wgsl (prefill rows)
// and attention.wgsl (decode writes its row; decode and prefill read), so every path writes and
// reads the same bits. Attention computes in f32 from the values loaded ("at full width").
//
// Three variants of one layout (the including shader says where value e of K[g, p, d] lies):
//   f32 (default)        KV4 = vec4<f32>: 16 bytes per 4 values
//   KV_F16 with F16      KV4 = vec4<f16> (shader-f16): 8 bytes per 4 values
//   KV_F16 without F16   KV4 = vec2<u32>, written with pack2x16float and read with unpack2x16float:
//                        value 4j + c is half c % 2 (low half first) of word c / 2 of vec2 j,
//                        the same bytes as vec4<f16>, so the two f16 variants are interchangeable
//                        (the guaranteed path: SwiftShader has no shader-f16)
//   kv_store(v: vec4<f32>) -> KV4     4 values as stored: f16 variants clamp to +-65504 (the
//                                     largest finite f16) first, so both store the same finite
//                                     values (WGSL leaves an out-of-range conversion undefined),
//                                     then round to f16 (WGSL allows either neighbour; lavapipe
//                                     and SwiftShader round to nearest even, as bitweb.ref.ops)
//   kv_load(w: KV4) -> vec4<f32>      the stored values, exactly
// Scalar view (decode's V, one value per thread): KV1 = f32 | f16 | u32 (two values per word);
//   kv1_word(e) the index of the KV1 word that holds value e, kv1_at(w, e) value e from that word;
//   KV_W = KV1 words per KV4 (4, 4, 2): kv_store(v)[c], c < KV_W, is word kv1_word(e) + c when
//   value e is the first of the 4 (e % 4 == 0).
// Needs nothing from the including shader (KV_F16 and the device's F16 are defines).

#if KV_F16
const KV_MAX: f32 = 65504.0;
#if F16
alias KV4 = vec4<f16>;
alias KV1 = f16;
const KV_W: u32 = 4u;

fn kv_store(v: vec4<f32>) -> KV4 {
    return vec4<f16>(clamp(v, vec4<f32>(-KV_MAX), vec4<f32>(KV_MAX)));
}

fn kv_load(w: KV4) -> vec4<f32> {
    return vec4<f32>(w);
}

fn kv1_word(e: u32) -> u32 {
    return e;
}

fn kv1_at(w: KV1, e: u32) -> f32 {
    return f32(w);
}
#else
alias KV4 = vec2<u32>;
alias KV1 = u32;
const KV_W: u32 = 2u;

fn kv_store(v: vec4<f32>) -> KV4 {
    let c = clamp(v, vec4<f32>(-KV_MAX), vec4<f32>(KV_MAX));
    return vec2<u32>(pack2x16float(c.xy), pack2x16float(c.zw));
}

fn kv_load(w: KV4) -> vec4<f32> {
    return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y));
}

fn kv1_word(e: u32) -> u32 {
    return e >> 1u;
}

fn kv1_at(w: KV1, e: u32) -> f32 {
    return unpack2x16float(w)[e & 1u];
}
#endif
#else
alias KV4 = vec4<f32>;
alias KV1 = f32;
const KV_W: u32 = 4u;

fn kv_store(v: vec4<f32>) -> KV4 {
    return v;
}

fn kv_load(w: KV4) -> vec4<f32> {
    return w;
}

fn kv1_word(e: u32) -> u32 {
    return e;
}

fn kv1_at(w: KV1, e: u32) -> f32 {
    return w;
}
#endif
