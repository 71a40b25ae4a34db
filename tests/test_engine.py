"""The GPU engine (native wgpu-py; lavapipe in CI) against the numpy model, token for token.

Tiny generated models (2 blocks, n_embd 256, vocab 291). Greedy runs use --ignore-eos
semantics so every run is 64 tokens long."""
from __future__ import annotations

import pytest

from bitweb import gpu as gpu_mod
from bitweb.engine import Engine, EngineError
from bitweb.generation import ChatSession, ContextError
from bitweb.gguf import BytesSource, FileSource, open_gguf
from bitweb.numpy_model import NumpyModel
from bitweb.sampling import SamplingParams
from tests.conftest import run

N = 64
PROMPT = "The engine and the reference agree"


@pytest.fixture(scope="module")
def models(tiny_model):
    def get(arch="bitnet-b1.58", fmt="i2_s", seed=1, scale=None, embd="f16", output=None, vocab="bytes"):
        extra = {} if embd == "f16" else {"embd_fmt": embd}          # token_embd's type (make-model --embd-format)
        if output is not None:                                       # an untied head (make-model --output-format)
            extra.update(output_fmt=output, tied=False)
        if vocab != "bytes":
            extra["vocab"] = vocab
        return tiny_model(arch=arch, fmt=fmt, seed=seed, scale_tensors=scale, **extra)
    return get


def load(dev, path, act="a8", **kw):
    with FileSource(path) as src:
        return run(Engine.load(dev, open_gguf(path), src, activations=act, **kw))


def gen(eng, ids, params=SamplingParams(), n=N, **kw):
    return run(eng.generate(ids, params, n, ignore_eos=True, **kw))


# W1.58A8 makes each activation an integer: round(m * 127 / max|m|). The GPU and numpy compute m
# with float results that differ in the last bits, so a value within float error of a .5 tie can
# round one way here and the other way there. One such flip moves the tiny model's logits by
# 0.05..0.2 (measured; e.g. 63.5 -> 64 in numpy, 63 on the GPU, and rounding that one value the
# GPU's way makes numpy match the GPU to 5e-6 again). A flip changes a greedy token only when two
# logits are that close. So in a8 mode equal tokens are checked as: identical, or the runs agree up
# to a step where the two candidates are within FLIP of each other (in numpy and on the GPU), and
# teacher-forced logits agree within FLIP on every step. (f32 mode has no such discontinuity:
# tokens must be identical.) A real error (RoPE, scales, cache, norms) moves logits by >> FLIP on
# nearly every step.
# Measured on lavapipe (the prefill A8 rows now quantised in the decode kernel's order, and the
# numpy model's output factor in the kernels' order): the runs of this file are identical, and 2 of
# 51 runs over other seeds (PROMPT, 64 tokens; the long prompt, 16) diverge, both at the A8
# quantisation of an attention output within 1 ulp of a .5 tie, where numpy's attention computed on
# the GPU's own q, k, v rounds the other way: the GPU's online softmax (lavapipe exp up to 5 ulp
# from correctly rounded, vec4-sequential score dots, sum e*v / l) against numpy's (BLAS dots,
# numpy exp, p / sum p then p @ V). Teacher-forced, 0..17 of 85 positions carry such a flip.
FLIP = 0.5


def assert_same_greedy(eng, ref, ids, act, n=N):
    """The engine's greedy tokens equal the numpy model's (see FLIP); returns "exact" or "tie"."""
    want = ref.generate(ids, SamplingParams(), n, ignore_eos=True)
    got = gen(eng, ids, n=n)
    return check_same_greedy(ref, ids, want, got.ids, got.text, act, lambda seq: run(eng.forward_logits(seq)))


def check_same_greedy(ref, ids, want, got_ids, got_text, act, gpu_logits):
    """assert_same_greedy's check on results from anywhere (the browser: tests/e2e/test_engine_browser.py).
    want: the numpy model's GenerateResult; gpu_logits(ids + want.ids): the GPU's teacher-forced
    logits (one row per id), asked for only when the tokens differ."""
    import numpy as np
    n = len(want.ids)
    assert len(got_ids) == n
    if act == "f32" or got_ids == want.ids:
        assert got_ids == want.ids and got_text == want.text
        return "exact"
    seq = ids + want.ids
    lg = np.array(gpu_logits(seq), np.float32)[len(ids) - 1:-1]    # predicting want.ids[k]
    ln = ref.logits(seq)[len(ids) - 1:-1]
    diff = np.abs(lg - ln).max(axis=1)
    assert diff.max() <= FLIP, diff
    k = next(i for i in range(n) if got_ids[i] != want.ids[i])
    a, b = want.ids[k], got_ids[k]
    assert abs(ln[k][a] - ln[k][b]) <= FLIP and abs(lg[k][a] - lg[k][b]) <= FLIP, (k, ln[k][[a, b]], lg[k][[a, b]])
    return "tie"


CASES = [("bitnet-b1.58", f) for f in ("i2_s", "tq2_0", "tq1_0", "q1_0", "f16")] + \
        [("bitnet", "tq2_0"), ("bitnet", "q1_0"), ("bitnet", "f16")] + \
        [("qwen3", "q1_0"), ("qwen3", "f16"), ("llama", "tq1_0"), ("llama", "bf16")] + \
        [("qwen2", "i2_s"), ("qwen2", "q8_0")]   # bitnet f16: silu gate_up on float rows; qwen3 / llama: QK-norm, NORM RoPE, no sub-norms; qwen2: Q / K / V biases


# Only ternary / binary linears take int8 activations (the engine's a8 switch picks bitlinear's A8
# kernels and, for a packed head, lmhead's; numpy_model likewise): a float model (F16, BF16) runs the
# same kernels and the same numpy maths in both modes. So float models run in f32 (the exact check)
# and once in a8, the app's default mode, on bitnet-b1.58 F16; the arch does not enter the a8 switch.
FLOAT = ("f16", "bf16", "q8_0")
GREEDY = [(arch, fmt, act) for arch, fmt in CASES for act in ("a8", "f32")
          if act == "f32" or fmt not in FLOAT or (arch, fmt) == ("bitnet-b1.58", "f16")]


@pytest.mark.parametrize("arch,fmt,act", GREEDY)
def test_greedy_equals_numpy(gpu, models, arch, fmt, act):
    path = models(arch, fmt)
    eng = load(gpu, path, act)
    ref = NumpyModel.from_gguf(open_gguf(path), act)
    assert_same_greedy(eng, ref, eng.tokenizer.encode(PROMPT), act)
    assert eng.dispatches_per_layer <= 6        # the recorded plan (tests/test_dispatches.py: every format)
    if arch == "bitnet" and fmt == "tq2_0":
        assert any(k.startswith("mult.") for k in eng.buf)          # .scale tensors were bound
    if arch == "qwen2":     # the biases ride in the attention / rope kernels: no dispatch of their own
        assert "qkvb.1" in eng.buf and eng.dispatches_per_layer == 5
    eng.close()


# The f16 KV cache (the default) against the f32 one. K and V rounded to f16 (relative error
# <= 2^-11) move the tiny models' logits by at most 0.012-0.020 (logit std 3; measured teacher-forced
# over prompt + 64 tokens on six test models, f32 activations), and greedy tokens stay identical for
# 64 steps on every one; KV16_TOL allows 2.5x that on the last step's logits. A broken cache (a
# wrong half, row or clamp) moves them by far more than 1. With A8 activations the rounding also
# flips .5 ties of the A8 quantisation of attention outputs (see FLIP), so the f16 and f32 caches'
# tokens part after 5-20 steps there (0.27-0.65 logit moves); the f16 path in A8 mode is checked
# against numpy's f16 mirror instead (test_greedy_equals_numpy: both default to f16).
KV16_TOL = 0.05


@pytest.mark.parametrize("arch,fmt", [("bitnet-b1.58", "i2_s"), ("qwen3", "q1_0")])
def test_f16_kv_cache_equals_f32(gpu, models, arch, fmt):
    """Greedy tokens with the f16 cache (array<f16> where the device has shader-f16, pack2x16float
    pairs in u32 elsewhere: forced for the first model by hiding the feature) equal the f32
    cache's for 64 steps (prompt prefilled by the multi-row kernels, then decode); half the bytes."""
    import numpy as np
    path = models(arch, fmt)
    variants = [("f32", True), ("f16", True)] + ([("f16", False)] if fmt == "i2_s" else [])
    runs = []
    saved = gpu.caps.shader_f16
    for kv, f16 in variants:
        gpu.caps.shader_f16 = saved and f16          # as on a device without shader-f16
        try:
            eng = load(gpu, path, "f32", kv_cache=kv)
        finally:
            gpu.caps.shader_f16 = saved
        assert eng.kv_variant == {"f32": "f32", "f16": "f16" if saved and f16 else "f16 pack2x16float"}[kv]
        cfg = eng.cfg
        assert eng.buf["k.0"].size == eng.buf["v.1"].size == {"f32": 4, "f16": 2}[kv] * cfg.kv_dim * eng.n_ctx
        assert eng.kv_bytes == 2 * cfg.n_layer * eng.buf["k.0"].size
        res = gen(eng, eng.tokenizer.encode(PROMPT))
        runs.append((eng.kv_variant, res.ids, np.frombuffer(run(gpu.read(eng.buf["logits"])), "<f4").copy(), eng.kv_bytes))
        eng.close()
    (_, want, l32, b32), *rest = runs
    for kv, got, lg, nb in rest:
        k = next((i for i in range(N) if got[i] != want[i]), None)
        assert k is None, f"{kv} cache: tokens part from the f32 cache's at step {k}"
        assert np.abs(lg - l32).max() <= KV16_TOL, (kv, np.abs(lg - l32).max())
        assert 2 * nb == b32


# Packed linears and packed tables (token_embd = the tied LM head): Bonsai's Q1_0 everywhere,
# Ternary Bonsai's Q2_0 (both block sizes). The packed head runs lmhead.wgsl PACKED in the
# engine's activation mode, the numpy model's head a block linear. The qwen3 rows are what
# `make-model --arch qwen3 --format q2_0 / q2_0_g128 --vocab qwen` writes (qwen2 pre-tokenizer,
# 1029 tokens), one with an untied Q1_0 output.weight as Bonsai-8B has. ggml's integer types (f32
# activations in either mode) as linears, tables and heads: Q4_1 linears with a tied Q8_0 table (the
# SmolLM2 Q4_1 file's layout), K-quant linears with an untied head of another type.
@pytest.mark.parametrize("act", ["a8", "f32"])
@pytest.mark.parametrize("arch,fmt,embd,output", [("bitnet-b1.58", "q1_0", "q1_0", None),
                                                  ("bitnet-b1.58", "q2_0", "q2_0", None),
                                                  ("bitnet", "q2_0_g128", "q1_0", None),
                                                  ("qwen3", "q2_0", "q1_0", "q1_0"),
                                                  ("qwen3", "q2_0_g128", "q2_0_g128", None),
                                                  ("llama", "q4_1", "q8_0", None),        # SmolLM2's layout
                                                  ("qwen3", "q5_k", "q6_k", "q4_0")])
def test_packed_tables_greedy_equals_numpy(gpu, models, arch, fmt, embd, output, act):
    path = models(arch, fmt, embd=embd, output=output, vocab="qwen" if arch == "qwen3" else "bytes")
    eng = load(gpu, path, act)
    assert eng.table_type(eng.model.token_embd).name == embd.upper()
    head = eng.model.token_embd if output is None else eng.model.output
    assert eng.table_type(head).name == (output or embd).upper()
    ref = NumpyModel.from_gguf(open_gguf(path), act)
    assert ref.head is not None
    assert_same_greedy(eng, ref, eng.tokenizer.encode(PROMPT), act)
    eng.close()


@pytest.mark.parametrize("arch,fmt", [("llama", "q4_1"), ("qwen3", "q8_0")])
def test_q8_greedy_equals_numpy(gpu, models, arch, fmt):
    """activations "q8": ggml's Q4_1 / Q8_0 linears take llama.cpp's q8_1 / q8_0 blocks (decode:
    bitlinear.wgsl Q8B; prefill: its q8 rows in the int8 tile, Q8T), the numpy model likewise (Linear.q8);
    greedy tokens equal in the a8 sense (FLIP: q and f16 d round at cliffs)."""
    path = models(arch, fmt)
    eng = load(gpu, path, "q8")
    ref = NumpyModel.from_gguf(open_gguf(path), "q8")
    assert eng.a8 and ref.a8 and not load_numpy_a8(path)
    assert_same_greedy(eng, ref, eng.tokenizer.encode(PROMPT), "a8")
    eng.close()


def prefilled_and_decoded(gpu, path, activations):
    """PROMPT's greedy tokens and final logits with the prompt prefilled in one chunk (64 rows), then
    fed token by token through the decode plan (1 row): [(ids, logits), (ids, logits)]."""
    import numpy as np
    runs = []
    for rows in (64, 1):
        eng = load(gpu, path, activations, prefill_rows=rows)
        ids = eng.tokenizer.encode(PROMPT)
        assert eng.prefill_rows == rows and len(ids) <= 64
        res = gen(eng, ids)
        runs.append((res.ids, np.frombuffer(run(gpu.read(eng.buf["logits"])), "<f4").copy()))
        eng.close()
    return runs


# q8: the int8 prefill tile (bitlinear_tiled Q8T) takes the decode kernel's q8 rows and block terms
# (dw dx) I (+ mw sx) bit for bit, and sums the blocks in another f32 order; a row that ends within
# that error of a q8 rounding tie can still quantize the other way in a later layer (as FLIP).
# Measured on lavapipe (these models, PROMPT): final logits within Q8_PREFILL of each other.
Q8_PREFILL = 1e-3


@pytest.mark.parametrize("arch,fmt", [("llama", "q4_1"), ("qwen3", "q8_0")])
def test_q8_prefill_equals_decode(gpu, models, arch, fmt):
    """q8: the prompt prefilled in one chunk (q8 rows, the int8 tile) gives the greedy tokens of the
    prompt fed token by token through the decode plan (bitlinear.wgsl Q8B), and its logits at the
    end within Q8_PREFILL."""
    import numpy as np
    (a, la), (b, lb) = prefilled_and_decoded(gpu, models(arch, fmt), "q8")
    print(f"q8 prefill vs decode: max |logit diff| {np.abs(la - lb).max():.3g}")
    assert a == b, f"prefilled and decoded prompts diverge: {a} vs {b}"
    assert np.abs(la - lb).max() <= Q8_PREFILL, np.abs(la - lb).max()


def load_numpy_a8(path) -> bool:
    """Whether the default mode ("a8") quantizes this file's linears (ggml's types: no, f32)."""
    return NumpyModel.from_gguf(open_gguf(path), "a8").a8


# Models on which the prefill A8 rows (then quantised as round(((x * rinv) * w) * s)) once gave
# other tokens than decode (round(x * w * 127 / amax)): greedy tokens differed from step 28 / 13 / 44.
@pytest.mark.parametrize("arch,fmt,seed", [("bitnet", "tq2_0", 1), ("bitnet-b1.58", "q1_0", 3), ("bitnet", "q1_0", 3),
                                           ("qwen3", "q1_0", 1), ("llama", "tq2_0", 2)])
def test_a8_prefill_equals_decode(gpu, models, arch, fmt, seed):
    """A8: the prompt prefilled in one chunk (multi-row kernels, ops.rmsnorm A8 rows) gives the same
    greedy tokens as the prompt fed token by token through the decode plan (bitlinear's own A8
    quantisation), and the same logits at the end (a flip in the prompt would move them by ~0.05)."""
    import numpy as np
    (a, la), (b, lb) = prefilled_and_decoded(gpu, models(arch, fmt, seed), "a8")
    k = next((i for i in range(N) if a[i] != b[i]), None)
    assert k is None, f"prefilled and decoded prompts diverge at step {k}: {a[k:k + 4]} vs {b[k:k + 4]}"
    assert np.abs(la - lb).max() <= 1e-4, np.abs(la - lb).max()


# One model per prefill path: the tiled ternary kernels (I2_S, TQ1_0, TQ2_0), the packed Q1_0 one
# with QK-norm (qwen3), the dense float one (F16); each arch once (llama: no sub-norms, NORM RoPE).
@pytest.mark.parametrize("arch,fmt", [("bitnet-b1.58", "i2_s"), ("bitnet", "tq1_0"), ("bitnet-b1.58", "f16"),
                                      ("qwen3", "q1_0"), ("llama", "tq2_0")])
def test_long_prompt_prefill_in_chunks(gpu, models, arch, fmt):
    """A 150-token prompt: chunks of 64, 64 and 22 rows (bucket 32) through the multi-row kernels,
    the same as numpy (f32: identical tokens; A8 too, see FLIP) and, in A8, the same as one token
    at a time through the decode plan (the decode plan itself equals numpy in every greedy test)."""
    path = models(arch, fmt)

    ref = NumpyModel.from_gguf(open_gguf(path), "f32")
    ids = ref.tokenizer.encode(" ".join(["a longer prompt about engines and references"] * 6))[:150]
    assert len(ids) == 150
    want = ref.generate(ids, SamplingParams(), 16, ignore_eos=True).ids
    tiled = load(gpu, path, "f32")
    runs = gpu.counters["plan_runs"]
    assert gen(tiled, ids, n=16).ids == want
    assert gpu.counters["plan_runs"] - runs == 3 + 15
    a8 = load(gpu, path, "a8")
    assert_same_greedy(a8, NumpyModel.from_gguf(open_gguf(path), "a8"), ids, "a8", n=16)
    a8_one = load(gpu, path, "a8", prefill_rows=1)
    assert gen(a8_one, ids, n=16).ids == gen(a8, ids, n=16).ids
    for e in (tiled, a8, a8_one):
        e.close()


def test_decode_plan_is_replayed_with_o1_host_calls(gpu, models):
    eng = load(gpu, models())
    L = eng.cfg.n_layer
    res = gen(eng, eng.tokenizer.encode(PROMPT), n=16)
    c = res.counters
    per_layer = eng.dispatches_per_layer
    assert per_layer == 5 and per_layer <= 8
    # embedding + 5 per block + LM head shard(s) + argmax, all replayed from the recorded plan
    assert res.dispatches_per_token == eng.plan_greedy.n_dispatches == 1 + 5 * L + len(eng.shards["token_embd.weight"]) + 1
    assert c["direct_dispatches"] == 0 and c["plan_dispatches"] == c["dispatches"] == 15 * eng.plan_greedy.n_dispatches
    # greedy runs a step ahead (engine docstring): write params, encode the plan (native), submit it,
    # read the token id; one step at a time: write params, run the plan, read
    assert res.host_calls_per_token == 4
    eng.overlap = False
    assert gen(eng, eng.tokenizer.encode(PROMPT), n=16).host_calls_per_token == 3
    cmd = gpu.encode(eng.plan_greedy)              # an encoded run is submitted once
    gpu.run(cmd)
    with pytest.raises(gpu_mod.GPUError, match="submitted once"):
        gpu.run(cmd)
    assert c["reads"] == 15 and c["pipelines"] == 0
    eng.close()


def test_sampling_on_gpu_equals_numpy_and_repeats_with_seed(gpu, models):
    path = models("bitnet", "tq2_0")
    # f32 activations: no A8 rounding ties (see FLIP); an f32 KV cache: no f16 rounding ties either
    # (where the GPU's and numpy's f32 K differ in the last bit, f16 can round them to neighbouring
    # halves: logits then differ by up to ~4e-3 instead of ~3e-5, enough to move a flat T = 4 draw)
    eng = load(gpu, path, "f32", kv_cache="f32")
    ref = NumpyModel.from_gguf(open_gguf(path), "f32", kv_cache="f32")
    ids = eng.tokenizer.encode(PROMPT)
    for p in (SamplingParams(temperature=0.8, top_k=20, top_p=0.9, repeat_penalty=1.2, seed=3),
              SamplingParams(temperature=1.0, min_p=0.05, seed=4),
              SamplingParams(temperature=4.0, seed=5),                 # flat: draws land past the top 64
              SamplingParams(repeat_penalty=1.5, repeat_last_n=16)):   # greedy with the GPU penalty
        a = gen(eng, ids, p, n=32)
        b = gen(eng, ids, p, n=32)
        w = ref.generate(ids, p, 32, ignore_eos=True)
        assert a.ids == b.ids == w.ids, p
        if p.temperature == 4.0:
            assert a.counters["full_fallbacks"] > 0 and a.counters["reads"] > 32
    assert gen(eng, ids, SamplingParams(temperature=1.0, seed=1), 32).ids != \
        gen(eng, ids, SamplingParams(temperature=1.0, seed=2), 32).ids
    eng.close()


@pytest.mark.parametrize("act", ["f32", "a8"])
def test_chat_reuses_the_cache_and_equals_a_fresh_run(gpu, models, act):
    """Later turns prefill only the new tokens after the kept cache (written by earlier prefills and
    decode steps); the tokens equal a fresh run that prefills the whole conversation at once."""
    import numpy as np
    path = models() if act == "f32" else models("bitnet", "tq2_0", 1)
    eng = load(gpu, path, act)
    chat = ChatSession(eng, system="You are terse.")
    p = SamplingParams()
    writes = []
    for turn in ("Hello there", "And again?", "Last one"):
        before = list(eng.cached_ids)
        w0 = gpu.counters["plan_runs"]
        res = run(chat.send(turn, p, 12))
        prompt = res.prompt_ids
        keep = min(len(prompt) - 1, next((i for i, (a, b) in enumerate(zip(before, prompt)) if a != b),
                                         min(len(before), len(prompt))))
        # only the new tokens were run: one plan run per prompt token after the kept prefix + decode
        writes.append((keep, gpu.counters["plan_runs"] - w0))
        prefill_runs = -(-(len(prompt) - keep) // eng.prefill_rows)      # multi-row chunks
        assert gpu.counters["plan_runs"] - w0 == prefill_runs + len(res.ids) - (res.stop_reason == "max_tokens") \
            + res.counters["discarded_steps"]       # greedy runs a step ahead: one past a stop token
        assert res.counters["discarded_steps"] == (res.stop_reason in ("eos", "eot") and 0 < len(res.ids) < 11)
        fresh = load(gpu, path, act)
        want = run(fresh.generate(prompt, p, 12))
        assert res.ids == want.ids and res.stop_reason == want.stop_reason
        if act == "a8":      # and no A8 rounding flip between the two (one moves logits by ~0.05)
            lg = [np.frombuffer(run(gpu.read(e.buf["logits"])), "<f4") for e in (eng, fresh)]
            assert np.abs(lg[0] - lg[1]).max() <= 1e-4
        fresh.close()
    assert writes[1][0] > 20 and writes[2][0] > writes[1][0]      # later turns kept the conversation
    if act == "a8":          # numpy in a8: see FLIP (a near tie may legitimately change a token)
        eng.close()
        return
    # the numpy model gives the same conversation
    rchat = ChatSession(NumpyModel.from_gguf(open_gguf(path), "f32"), system="You are terse.")
    for turn, msg in zip(("Hello there", "And again?", "Last one"), chat.messages[2::2]):
        assert run(rchat.send(turn, p, 12)).text == msg["content"]
    eng.close()


def test_context_limit(gpu, models):
    eng = load(gpu, models(), max_context=24)
    before = dict(gpu.counters)
    with pytest.raises(ContextError, match="prompt has 24 tokens but the context holds 24"):
        gen(eng, list(range(24)))
    assert gpu.counters["dispatches"] == before["dispatches"]           # refused before any GPU work
    res = gen(eng, list(range(20)), n=100)
    assert res.stop_reason == "context" and len(res.ids) == 4
    big = load(gpu, models())
    assert gen(big, list(range(20)), n=4).ids == res.ids
    # decoding right up to the last position, twice (the cache is reused, never overrun)
    assert gen(eng, list(range(23)), n=100).ids == gen(big, list(range(23)), n=1).ids
    eng.close()
    big.close()


def test_sharded_lm_head_and_limits(gpu, models):
    path = models()
    ref = NumpyModel.from_gguf(open_gguf(path), "f32")
    saved = dict(gpu.limits)
    try:
        gpu.limits["maxStorageBufferBindingSize"] = 64 << 10      # 291 x 512-byte rows -> 3 shards
        eng = load(gpu, path, "f32", max_context=64)              # KV cache 32 KiB per layer
        assert len(eng.shards["token_embd.weight"]) == 3
        ids = eng.tokenizer.encode(PROMPT)
        assert gen(eng, ids, n=24).ids == ref.generate(ids, SamplingParams(), 24, ignore_eos=True).ids
        eng.close()
        gpu.limits["maxStorageBufferBindingSize"] = 8 << 10       # a linear weight no longer fits
        with pytest.raises(gpu_mod.LimitsError, match=r"blk\.\d\.ffn_\w+\.weight needs a storage binding of 32800 bytes.*maxStorageBufferBindingSize = 8192"):
            load(gpu, path, max_context=8)
        gpu.limits["maxStorageBufferBindingSize"] = saved["maxStorageBufferBindingSize"]
        gpu.limits["maxStorageBuffersPerShaderStage"] = 6
        with pytest.raises(gpu_mod.LimitsError, match="maxStorageBuffersPerShaderStage = 6"):
            load(gpu, path)
    finally:
        gpu.limits.clear()
        gpu.limits.update(saved)


def test_load_from_bytes_with_progress_and_errors(gpu, models, tmp_path):
    path = models()
    data = open(path, "rb").read()
    seen = []
    eng = run(Engine.load(gpu, open_gguf(path), BytesSource(data), activations="f32",
                          progress=lambda *a: seen.append(a)))
    stages = [s for s, *_ in seen]
    up = [(d, t) for s, d, t in seen if s == "upload"]
    assert stages[-1] == "ready" and "compile" in stages and up[-1][0] == up[-1][1] > 200_000
    assert all(a[0] <= b[0] for a, b in zip(up, up[1:]))
    ids = eng.tokenizer.encode(PROMPT)
    assert gen(eng, ids, n=8).ids == NumpyModel.from_gguf(open_gguf(path), "f32").generate(
        ids, SamplingParams(), 8, ignore_eos=True).ids
    eng.close()
    scaled_f16 = models("bitnet", "f16", scale=True)
    with pytest.raises(EngineError, match=r"\.scale tensors with float \(F16\) linears"):
        load(gpu, scaled_f16)
    with pytest.raises(EngineError, match="activations 'int4'"):
        load(gpu, path, "int4")


def test_stop_token_and_should_stop(gpu, models):
    eng = load(gpu, models())
    ids = eng.tokenizer.encode(PROMPT)
    n = [0]

    def stop():
        n[0] += 1
        return n[0] >= 5
    res = run(eng.generate(ids, SamplingParams(), 50, should_stop=stop, ignore_eos=True))
    assert res.stop_reason == "stopped" and len(res.ids) == 5
    # EOS / EOT: sample until a run ends on one (the tiny model emits them at random)
    eos = eng.tokenizer.eos_id
    for seed in range(40):
        r = run(eng.generate(ids, SamplingParams(temperature=1.5, seed=seed), 40))
        if r.stop_reason in ("eos", "eot"):
            assert r.stop_id in (eos, eng.tokenizer.eot_id) and r.stop_id not in r.ids
            break
    else:
        pytest.fail("no run of 40 seeds ended on EOS / EOT")
    eng.close()


@pytest.mark.parametrize("rows", [4, 1])
def test_stop_during_a_long_prefill_stops_the_gpu_within_a_chunk(gpu, models, rows):
    """A 40-token prompt in chunks of `rows` (4: prefill plan runs of 4 rows; 1: token by token
    through the decode plan): at most 2 chunks are unfinished on the queue at any submit
    (PREFILL_IN_FLIGHT; a chunk counts as finished once a fence after it was awaited), and
    should_stop is asked between chunks: when it says stop before the 4th chunk, 3 chunks were
    submitted, the reply is empty ("stopped"), the cache holds exactly their rows, and the next
    generate from that cache answers as a fresh engine."""
    from bitweb.engine import PREFILL_IN_FLIGHT
    path = models()
    eng = load(gpu, path, "a8", prefill_rows=rows)
    ids = (eng.tokenizer.encode(PROMPT + " " + PROMPT) * 2)[:40]
    assert len(ids) == 40 and eng.prefill_rows == rows
    log = []
    run_, fence = gpu.run, gpu.fence

    def run_rec(work):
        log.append("run")
        run_(work)

    class Fence:                                         # logs "done" when awaited to the end
        def __init__(self):
            self.f = fence()

        def __await__(self):
            yield from self.f.__await__()
            log.append("done")

    def fence_rec():
        return Fence()
    gpu.run, gpu.fence = run_rec, fence_rec
    try:
        asked = [0]

        def stop():
            asked[0] += 1
            return asked[0] >= 3
        res = run(eng.generate(ids, SamplingParams(), 8, should_stop=stop, ignore_eos=True))
        assert res.stop_reason == "stopped" and res.ids == [] and asked[0] == 3
        assert log.count("run") == 3 and eng.cached_ids == ids[:3 * rows]
        log.clear()
        whole = gen(eng, ids, n=8)                       # from the stopped prefill's cache
    finally:
        del gpu.run, gpu.fence
    chunks = -(-(40 - 3 * rows - (rows == 1)) // rows)   # (decode path: the last token is the first step)
    runs = [i for i, e in enumerate(log) if e == "run"]
    assert len(runs) >= chunks
    for k, at in enumerate(runs[:chunks]):               # chunk k submitted: chunks < k - 1 finished
        assert k - log[:at].count("done") <= PREFILL_IN_FLIGHT - 1, log
    fresh = load(gpu, path, "a8", prefill_rows=rows)
    assert whole.ids == gen(fresh, ids, n=8).ids
    for e in (eng, fresh):
        e.close()


class Events:
    """Records the order of dev.run / dev.read calls (the token reads of a decode)."""

    def __init__(self, dev):
        self.dev, self.log = dev, []

    def __enter__(self):
        run_, read = self.dev.run, self.dev.read

        def run_rec(work):
            self.log.append("run")
            run_(work)

        async def read_rec(*a, **k):
            self.log.append("read")
            return await read(*a, **k)
        self.dev.run, self.dev.read = run_rec, read_rec
        return self

    def __exit__(self, *exc):
        del self.dev.run, self.dev.read

    def runs_before_reads(self):
        """Decode runs submitted before each token read after the prefill's (its read is the first)."""
        log = self.log[self.log.index("read") + 1:]
        return [log[:j].count("run") for j, e in enumerate(log) if e == "read"]


def test_overlapped_greedy_equals_one_step_at_a_time(gpu, models):
    """Greedy decode one step ahead of the host (Engine.overlap) gives the same tokens, text, stop
    reasons and cached_ids as one step at a time, for every way a run ends, and a chat after a
    stop continues identically. The overlapped runs read token i only after step i is submitted."""
    from bitweb.chat import chat_ids
    path = models()
    eng = {ov: load(gpu, path, max_context=256) for ov in (True, False)}
    eng[False].overlap = False
    ids = eng[True].tokenizer.encode(PROMPT)
    p = SamplingParams()

    def both(fn):
        out = {}
        for ov, e in eng.items():
            with Events(gpu) as ev:
                out[ov] = run(fn(e))
            out[ov].order = ev.runs_before_reads()
        a, b = out[True], out[False]
        assert (a.ids, a.text, a.stop_reason, a.stop_id) == (b.ids, b.text, b.stop_reason, b.stop_id)
        assert eng[True].cached_ids == eng[False].cached_ids
        assert b.counters["discarded_steps"] == 0
        return a, b

    def stop_on(t):           # pretend t is EOT (the tiny model's greedy runs rarely meet the real one)
        for e in eng.values():
            e.tokenizer.stop_ids = frozenset({e.tokenizer.eos_id, t})

    def stop_after(k):
        n = [0]

        def should_stop():
            n[0] += 1
            return n[0] >= k
        return should_stop

    # max_tokens: no step past the last needed one; token i is read with steps 0..i on the queue
    a, b = both(lambda e: e.generate(ids, p, 20, ignore_eos=True))
    assert a.stop_reason == "max_tokens" and len(a.ids) == 20 and a.counters["discarded_steps"] == 0
    assert eng[True].cached_ids == ids + a.ids[:-1]
    assert a.order == [i + 1 for i in range(1, 19)] + [19] and b.order == list(range(1, 20))
    assert a.counters["plan_runs"] == b.counters["plan_runs"] == 19
    assert a.host_calls_per_token == 4 and b.host_calls_per_token == 3      # + encode ahead (native)
    # a stop token mid-run: the step that fed it ran and is discarded
    full = a.ids
    stop_on(full[6])
    a, b = both(lambda e: e.generate(ids, p, 20))
    k = full.index(full[6])
    assert a.stop_reason == "eot" and a.stop_id == full[6] and a.ids == full[:k] and k > 0
    assert eng[True].cached_ids == ids + a.ids and a.counters["discarded_steps"] == 1
    # should_stop after 4 tokens: the two steps already on the queue are discarded
    a, b = both(lambda e: e.generate(ids, p, 20, should_stop=stop_after(4), ignore_eos=True))
    assert a.stop_reason == "stopped" and a.ids == full[:4] and a.counters["discarded_steps"] == 2
    assert eng[True].cached_ids == ids + a.ids[:-1]
    # the context limit (256): a 240-token prompt ends at position 255, never written past
    long = (ids * 32)[:240]
    assert len(long) == 240
    a, b = both(lambda e: e.generate(long, p, 100, ignore_eos=True))
    assert a.stop_reason == "context" and len(a.ids) == 16 and a.counters["discarded_steps"] == 0
    assert eng[True].cached_ids == long + a.ids[:-1]
    # a chat whose first reply ends on a stop token, then two more turns reusing the cache
    system = "You are terse."
    first = chat_ids(eng[True].tokenizer, [{"role": "system", "content": system},
                                           {"role": "user", "content": "Hello there"}])
    stop_on(run(eng[True].generate(first, p, 12, ignore_eos=True)).ids[4])
    chats = {ov: ChatSession(e, system=system) for ov, e in eng.items()}
    reasons = []
    for turn in ("Hello there", "And again?", "Last one"):
        a, b = both(lambda e: chats[e.overlap].send(turn, p, 12))
        reasons.append(a.stop_reason)
    assert reasons[0] == "eot" and chats[True].messages == chats[False].messages
    for e in eng.values():
        e.close()
