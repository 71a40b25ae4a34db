"""Model binding (Config, tensors by GGUF name, clear errors) and the numpy model's own
invariants: KV-cache decode == full prefill, prefix reuse, context handling, .scale tensors.
(Agreement with transformers: test_transformers_oracle.py.)"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from bitweb.authoring.gguf_writer import ARRAY, GGUFWriter, Value
from bitweb.generation import ContextError
from bitweb.gguf import GGUFError, open_gguf
from bitweb.model import Config, Model, ModelError
from bitweb.numpy_model import NumpyModel
from bitweb.sampling import SamplingParams
from tests.conftest import write_tiny


def make(path, **kw):
    return open_gguf(write_tiny(path, **kw))


def rewrite(gf, path, meta=None, drop=(), retype=None):
    return open_gguf(write_copy(gf, path, meta, drop, retype))


def write_copy(gf, path, meta=None, drop=(), retype=None):
    """Copy a GGUF file with metadata overrides, dropped tensors, or one tensor retyped:
    retype = (name, type (name or id), data bytes)."""
    with GGUFWriter(path) as w:
        for k, v in gf.metadata.items():
            if k == "general.alignment":
                continue
            vt, sub = gf.metadata_types[k]
            v = (meta or {}).get(k, v)
            if v is None:
                continue                                  # meta={key: None} drops the key
            w.add(k, Value(vt, v, sub) if vt == ARRAY else Value(vt, v))
        names = [n for n in gf.tensors if n not in drop]
        for n in names:
            ti = gf.tensors[n]
            if retype and n == retype[0]:
                w.add_tensor(n, ti.shape, retype[1], nbytes=len(retype[2]))
            else:
                w.add_tensor(n, ti.shape, ti.type_id)
        for n in names:
            w.write_tensor(n, retype[2] if retype and n == retype[0] else gf.tensor_data(n))
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make(tmp_path_factory.mktemp("ref") / "tiny.gguf")


def test_config_and_binding(tiny, tmp_path):
    m = Model.from_gguf(tiny)
    c = m.cfg
    assert (c.arch, c.ffn, c.n_layer, c.n_embd, c.n_head, c.n_head_kv, c.head_dim, c.n_ff) == \
        ("bitnet-b1.58", "relu2", 2, 256, 4, 2, 64, 512)
    assert c.tied and m.output is None and m.lm_head is m.token_embd
    assert m.blk[1].attn_q.name == "blk.1.attn_q.weight" and m.blk[1].attn_q_scale is None
    assert m.blk[0].ffn_down.shape == (512, 256) and c.rope_base == 500000.0 and c.eps == pytest.approx(1e-5)
    b = Model.from_gguf(make(tmp_path / "b.gguf", arch="bitnet", fmt="tq2_0"))
    assert b.cfg.ffn == "silu" and b.blk[0].ffn_up_scale.name == "blk.0.ffn_up.scale"


def test_architecture_table_flags_and_optional_tensors(tiny, tmp_path, monkeypatch):
    from bitweb import model as M
    from bitweb.engine import Engine, EngineError
    from bitweb.upload import check_support
    c = Model.from_gguf(tiny).cfg
    assert (c.ffn, c.sub_norms, c.qk_norm, c.rope, c.scales, c.qkv_bias) == ("relu2", True, False, "neox", False, False)
    assert M.ARCHS["bitnet-25"] == M.ARCHS["bitnet-b1.58"]
    assert M.ARCHS["bitnet"] == M.Arch(ffn="silu", sub_norms=True, qk_norm=False, rope="neox", scales=True)
    assert M.ARCHS["qwen3"] == M.Arch(ffn="silu", sub_norms=False, qk_norm=True, rope="neox", scales=False)
    assert M.ARCHS["llama"] == M.Arch(ffn="silu", sub_norms=False, qk_norm=False, rope="norm", scales=False)
    assert M.ARCHS["qwen2"] == M.Arch(ffn="silu", sub_norms=False, qk_norm=False, rope="neox", scales=False,
                                      qkv_bias=True)
    # a row without sub-norms: the file's sub-norms are then unexpected; a file without them binds None
    row = M.ARCHS["bitnet-b1.58"]
    monkeypatch.setitem(M.ARCHS, "bitnet-b1.58", replace(row, sub_norms=False))
    with pytest.raises(ModelError, match="unexpected tensor 'blk.0.attn_sub_norm.weight'"):
        Model.from_gguf(tiny)
    subs = [n for n in tiny.tensors if "_sub_norm" in n]
    m = Model.from_gguf(rewrite(tiny, tmp_path / "nosub.gguf", drop=subs))
    assert not m.cfg.sub_norms and m.blk[1].attn_sub_norm is None and m.blk[1].ffn_sub_norm is None
    assert m.blk[0].attn_q_norm is None and len(m.tensors()) == len(tiny.tensors) - len(subs)
    check_support(Engine(None, m, "a8", 16).gpu_model)  # the GPU engine runs blocks without sub-norms
    # QK-norm: each block needs attn_q_norm / attn_k_norm [head_dim]
    monkeypatch.setitem(M.ARCHS, "bitnet-b1.58", replace(row, qk_norm=True))
    with pytest.raises(ModelError, match="missing tensor 'blk.0.attn_q_norm.weight'"):
        Model.from_gguf(tiny)
    # Q / K / V biases: each block needs attn_q.bias [q], attn_k.bias / attn_v.bias [kv] (F32)
    monkeypatch.setitem(M.ARCHS, "bitnet-b1.58", replace(row, qkv_bias=True))
    with pytest.raises(ModelError, match="missing tensor 'blk.0.attn_q.bias'"):
        Model.from_gguf(tiny)
    # the flags change the numpy forward pass (each is tested against transformers and the GPU elsewhere)
    ids = [5, 77, 130, 9]
    monkeypatch.setitem(M.ARCHS, "bitnet-b1.58", row)
    base = NumpyModel(Model.from_gguf(tiny), "f32").logits(ids)
    monkeypatch.setitem(M.ARCHS, "bitnet-b1.58", replace(row, rope="norm"))
    assert np.abs(NumpyModel(Model.from_gguf(tiny), "f32").logits(ids) - base).max() > 1e-2


def test_unsupported_architecture(tiny, tmp_path):
    gf = rewrite(tiny, tmp_path / "gemma.gguf", meta={"general.architecture": "gemma"})
    with pytest.raises(ModelError, match="unsupported architecture 'gemma'"):
        Model.from_gguf(gf)



def test_unsupported_tensor_types(tiny, tmp_path):
    # a known GGML type where the engine does not run it: a norm in F16
    norm = np.frombuffer(tiny.tensor_data("blk.1.ffn_norm.weight"), "<f4").astype("<f2").tobytes()
    gf = rewrite(tiny, tmp_path / "f16norm.gguf", retype=("blk.1.ffn_norm.weight", "F16", norm))
    with pytest.raises(ModelError, match=r"'blk.1.ffn_norm.weight' has type F16.*supported: F32"):
        Model.from_gguf(gf)
    # a GGML type nobody here implements (IQ4_XS = 23): the reader names it
    ti = tiny.tensors["blk.0.attn_k.weight"]
    path = write_copy(tiny, tmp_path / "iq4xs.gguf", retype=(ti.name, 23, bytes(ti.n_elements // 256 * 136)))
    with pytest.raises(GGUFError, match="'blk.0.attn_k.weight': unknown GGML type id 23"):
        open_gguf(path)


def test_missing_and_misshapen_tensors(tiny, tmp_path):
    with pytest.raises(ModelError, match="missing tensor 'blk.1.attn_v.weight'"):
        Model.from_gguf(rewrite(tiny, tmp_path / "m.gguf", drop=("blk.1.attn_v.weight",)))
    gf = rewrite(tiny, tmp_path / "s.gguf", meta={"bitnet-b1.58.feed_forward_length": 768})
    with pytest.raises(ModelError, match=r"'blk.0.ffn_sub_norm.weight' has shape \[512\], expected \[768\]"):
        Model.from_gguf(gf)
    with pytest.raises(ModelError, match="missing metadata key 'bitnet-b1.58.block_count'"):
        Config.from_gguf(rewrite(tiny, tmp_path / "k.gguf", meta={"bitnet-b1.58.block_count": None}))


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    """A qwen3 file whose head_dim (32) is not n_embd / n_head (64): q is 128 wide, n_embd 256."""
    return make(tmp_path_factory.mktemp("ref") / "qwen3.gguf", arch="qwen3", fmt="q1_0", head_dim=32)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return make(tmp_path_factory.mktemp("ref") / "llama.gguf", arch="llama", fmt="tq2_0", seed=3)


def test_qwen3_and_llama_binding(qwen3, llama, tmp_path):
    q = Model.from_gguf(qwen3)
    assert (q.cfg.qk_norm, q.cfg.sub_norms, q.cfg.rope, q.cfg.head_dim, q.cfg.q_dim) == (True, False, "neox", 32, 128)
    assert q.blk[1].attn_q_norm.shape == (32,) and q.blk[1].attn_sub_norm is None and q.blk[0].attn_output.shape == (128, 256)
    assert q.cfg.eps == pytest.approx(1e-6) and q.cfg.rope_base == 1e6
    lm = Model.from_gguf(llama)
    assert (lm.cfg.qk_norm, lm.cfg.sub_norms, lm.cfg.rope) == (False, False, "norm")
    assert lm.blk[0].attn_q_norm is None and lm.blk[0].ffn_sub_norm is None
    # what the engine does not implement is refused, never ignored
    rf = ("rope_freqs.weight", (16,), np.ones(16, np.float32).tobytes())
    with pytest.raises(ModelError, match="'rope_freqs.weight'.*not supported"):
        Model.from_gguf(_extend(llama, tmp_path / "rf.gguf", tensor=rf))
    with pytest.raises(ModelError, match="llama.expert_count 8: mixture-of-experts"):
        Model.from_gguf(_extend(llama, tmp_path / "moe.gguf", key=("llama.expert_count", 8)))
    with pytest.raises(ModelError, match=r"tensor 'blk.0.attn_q_norm.weight' has shape \[32\], expected \[48\]"):
        Model.from_gguf(rewrite(qwen3, tmp_path / "kl.gguf", meta={"qwen3.attention.key_length": 48,
                                                                   "qwen3.attention.value_length": 48}))


def _extend(gf, path, key=None, tensor=None):
    """A copy of gf with one more u32 metadata key (name, value) or F32 tensor (name, shape, bytes)."""
    from bitweb.authoring.gguf_writer import UINT32
    with GGUFWriter(path) as w:
        for k, v in gf.metadata.items():
            if k != "general.alignment":
                vt, sub = gf.metadata_types[k]
                w.add(k, Value(vt, v, sub) if vt == ARRAY else Value(vt, v))
        if key:
            w.add(key[0], Value(UINT32, key[1]))
        for n, ti in gf.tensors.items():
            w.add_tensor(n, ti.shape, ti.type_id)
        if tensor:
            w.add_tensor(tensor[0], tensor[1], "F32")
        for n in gf.tensors:
            w.write_tensor(n, gf.tensor_data(n))
        if tensor:
            w.write_tensor(tensor[0], tensor[2])
    return open_gguf(path)


# (a8 on the Q1_0 / no-sub-norm files: numpy's batched and one-row attention differ in the last
# bits, and an A8 rounding flip of Wo's input moves logits by ~0.1; see tests/test_engine.py FLIP.
# An f32 KV cache: with f16 such last-bit differences of K / V can round to neighbouring halves.)
@pytest.mark.parametrize("which,act", [("tiny", "a8"), ("tiny", "f32"), ("qwen3", "f32"), ("llama", "f32")])
def test_cached_decode_equals_full_prefill(which, act, request):
    tiny = request.getfixturevalue(which)
    ref = NumpyModel.from_gguf(tiny, act, kv_cache="f32")

    ids = ref.tokenizer.encode("incremental decoding must match one pass")
    full = ref.logits(ids)
    ref.reset()
    step = np.concatenate([ref.forward(ids[:5], 0)] + [ref.forward([t], 5 + i) for i, t in enumerate(ids[5:])])
    assert np.abs(full - step).max() <= 1e-4


def test_scale_tensors_multiply_outputs(tmp_path):
    gf = make(tmp_path / "s.gguf", arch="bitnet", fmt="tq2_0")
    ref = NumpyModel.from_gguf(gf, "f32")
    lin = ref.blk[0]["attn_q"]
    x = np.random.default_rng(0).standard_normal((3, 256)).astype(np.float32)
    scale = np.frombuffer(gf.tensor_data("blk.0.attn_q.scale"), "<f4")[0]
    nw = np.ones(256, np.float32)
    want = (x / np.sqrt(np.mean(x * x, axis=1, keepdims=True) + 1e-5)) @ lin.w.T * scale
    assert scale != 1.0 and np.allclose(lin(x, nw, 1e-5, False), want, rtol=1e-5, atol=1e-6)
    # and the model is not the same without them
    ones = rewrite(gf, tmp_path / "ones.gguf", retype=("blk.0.attn_q.scale", "F32", np.float32(1).tobytes()))
    ids = [1, 2, 3]
    assert np.abs(NumpyModel.from_gguf(ones, "f32").logits(ids) - ref.logits(ids)).max() > 1e-3


def test_context_limits(tiny):
    ref = NumpyModel.from_gguf(tiny, "f32", max_context=20)
    with pytest.raises(ContextError, match="prompt has 20 tokens but the context holds 20"):
        ref.generate(list(range(20)), SamplingParams(), 5)
    with pytest.raises(ContextError, match="empty prompt"):
        ref.generate([], SamplingParams(), 5)
    with pytest.raises(ContextError, match="prompt token 1 is 9999"):
        ref.generate([1, 9999], SamplingParams(), 5)
    res = ref.generate(list(range(15)), SamplingParams(), 100, ignore_eos=True)
    assert res.stop_reason == "context" and len(res.ids) == 5
    res = ref.generate(list(range(19)), SamplingParams(), 100, ignore_eos=True)
    assert res.stop_reason == "context" and len(res.ids) == 1
    res = ref.generate(list(range(10)), SamplingParams(), 3, ignore_eos=True)
    assert res.stop_reason == "max_tokens" and len(res.ids) == 3
    # the tokens before the limit are the ones an unlimited context gives
    big = NumpyModel.from_gguf(tiny, "f32").generate(list(range(15)), SamplingParams(), 5, ignore_eos=True)
    assert big.ids == ref.generate(list(range(15)), SamplingParams(), 100, ignore_eos=True).ids


def test_prefix_reuse_equals_fresh_run(tiny):
    ref = NumpyModel.from_gguf(tiny, "a8")
    a = ref.tokenizer.encode("first turn")
    r1 = ref.generate(a, SamplingParams(), 12, ignore_eos=True)
    b = a + r1.ids + ref.tokenizer.encode(" and more", add_bos=False)
    r2 = ref.generate(b, SamplingParams(), 12, ignore_eos=True)       # reuses len(a) + 11 positions
    fresh = NumpyModel.from_gguf(tiny, "a8").generate(b, SamplingParams(), 12, ignore_eos=True)
    assert r2.ids == fresh.ids and len(r2.ids) == 12


def test_stop_tokens_and_streaming(tiny):
    ref = NumpyModel.from_gguf(tiny, "f32")
    tok = ref.tokenizer
    pieces = []
    res = ref.generate(tok.encode("stream"), SamplingParams(temperature=1.0, seed=11), 40,
                       on_token=lambda i, p: pieces.append((i, p)))
    assert "".join(p for _, p in pieces) == res.text == tok.decode(res.ids, skip_special=True)
    assert [i for i, _ in pieces if i is not None] == res.ids
    assert res.stop_reason in ("eos", "eot", "max_tokens")
    if res.stop_reason in ("eos", "eot"):
        assert tok.is_stop(res.stop_id) and res.stop_id not in res.ids
    stopped = ref.generate(tok.encode("stop me"), SamplingParams(), 40, ignore_eos=True,
                           should_stop=lambda: True)
    assert stopped.stop_reason == "stopped" and len(stopped.ids) == 1


def test_qwen2_biases_are_bound_checked_and_used(tmp_path, monkeypatch):
    """qwen2 binds blk.N.attn_q / attn_k / attn_v.bias (F32, [q] / [kv] / [kv]); a bias in a file of
    another architecture, a bias of the wrong shape or type, or a missing one is a ModelError; the
    numpy model adds them (the logits move when they are zeroed)."""
    gf = make(tmp_path / "q2.gguf", arch="qwen2", fmt="tq2_0", seed=4)
    m = Model.from_gguf(gf)
    c = m.cfg
    assert c.qkv_bias and not c.qk_norm and c.rope == "neox" and not c.sub_norms
    b = m.blk[1]
    assert (b.attn_q_bias.name, b.attn_q_bias.shape, b.attn_k_bias.shape, b.attn_v_bias.shape) == \
        ("blk.1.attn_q.bias", (c.q_dim,), (c.kv_dim,), (c.kv_dim,))
    assert b.attn_v_bias in m.tensors() and m.blk[0].attn_q_norm is None
    with pytest.raises(ModelError, match="missing tensor 'blk.1.attn_v.bias'"):
        Model.from_gguf(rewrite(gf, tmp_path / "nob.gguf", drop=("blk.1.attn_v.bias",)))
    bias = gf.tensor_data("blk.0.attn_k.bias")
    with pytest.raises(ModelError, match=r"'blk.0.attn_k.bias' has type F16.*supported: F32"):
        f16 = np.frombuffer(bias, "<f4").astype("<f2").tobytes()
        Model.from_gguf(rewrite(gf, tmp_path / "f16b.gguf", retype=("blk.0.attn_k.bias", "F16", f16)))
    from bitweb import model as M
    monkeypatch.setitem(M.ARCHS, "qwen2", replace(M.ARCHS["qwen2"], qkv_bias=False))
    with pytest.raises(ModelError, match="unexpected tensor 'blk.0.attn_q.bias': qwen2 blocks have no Q / K / V"):
        Model.from_gguf(gf)
    monkeypatch.undo()
    ids = [5, 77, 130, 9]
    ref = NumpyModel(m, "f32")
    want = ref.logits(ids)
    for L in ref.blk:
        for n in ("attn_q_bias", "attn_k_bias", "attn_v_bias"):
            L[n] = np.zeros_like(L[n])
    assert np.abs(ref.logits(ids) - want).max() > 0.1
