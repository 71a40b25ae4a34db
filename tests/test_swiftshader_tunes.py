"""The decode kernels' SwiftShader choices (kernels pick them by the adapter's name; natively the
adapter is lavapipe, so the name is patched): bitlinear's run-time shape (q, k, v as one gemv each,
the attention output and FFN down: one pipeline, their shapes in buffers the engine owns) and the
LM head's XDIRECT. Same products as lavapipe's choices, so the same greedy tokens; close() frees the shape
buffers with the rest."""
from __future__ import annotations

from bitweb.engine import Engine
from bitweb.gguf import FileSource, open_gguf
from bitweb.kernels import bitlinear, lmhead
from bitweb.sampling import SamplingParams
from bitweb.upload import compile_keys
from tests.conftest import run


def _greedy(gpu, path) -> tuple:
    with FileSource(path) as src:
        eng = run(Engine.load(gpu, open_gguf(path), src, activations="a8"))
    toks = run(eng.generate([1, 2, 3, 4, 5], SamplingParams(), 8, ignore_eos=True)).ids
    return eng, toks


def test_swiftshader_choices_same_tokens(gpu, tiny_model, monkeypatch):
    path = tiny_model(arch="bitnet", fmt="tq2_0")      # gate_up silu, .scale multipliers
    eng, want = _greedy(gpu, path)
    eng.close()
    run(gpu.sync())
    n0 = gpu.live_buffers
    for mod in (bitlinear, lmhead):
        monkeypatch.setattr(mod, "rasteriser", lambda dev: "swiftshader")
    eng, got = _greedy(gpu, path)
    first, _ = compile_keys(eng._compile_steps())
    keys = {gpu.pipeline_key(*k) for k in first}
    shaped = [k for k in keys if k[0] == "bitlinear" and dict(k[3]).get("SHAPE")]
    assert len(shaped) == 1, shaped                                  # q, k, v, o, down: one pipeline
    assert len([k for k in keys if k[0] == "bitlinear"]) == 2, keys    # + gate_up
    assert eng.dispatches_per_layer == 7                               # q, k, v apart
    assert any(k[0] == "lmhead" and dict(k[3]).get("XDIRECT") for k in keys), keys
    assert got == want
    eng.close()
    assert gpu.live_buffers == n0, gpu.live()
