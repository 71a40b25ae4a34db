"""Decode dispatches per layer for every architecture x linear format x activation mode: at most 6
(issue 26 item 2), counted from the steps the engine records (blocks.decode_steps) on the native
device (lavapipe here) before any upload: upload.stand_in lists them without buffers, as
compile_steps does. test_engine's greedy runs check the recorded plans' own count on the same rule.

What is counted: the block's steps (RMSNorm, the QKV concatenation, output multipliers, the residual
add and gate / up + activation fused into the linears; RoPE + cache write; attention). SwiftShader
runs q, k and v as one gemv each (bitlinear.split_parts: 7 per layer, so that every one-part linear
shares one run-time shape pipeline: its compile time): tests/test_swiftshader_tunes.py checks that.
"""
from __future__ import annotations

import pytest

from bitweb import formats
from bitweb.authoring.makemodel import ARCH_FILES
from bitweb.blocks import decode_steps
from bitweb.engine import Engine
from bitweb.gguf import open_gguf
from bitweb.model import ARCHS, Model
from bitweb.upload import stand_in

MAX_PER_LAYER = 6
LAYERS = 2
# the architectures make-model writes; every other ARCHS row (bitnet-25) has the features of one of them
WRITTEN = tuple(ARCH_FILES)
COMBOS = [(arch, f.name.lower(), act) for arch in WRITTEN for f in formats.select("linear")
          for act in (("a8", "f32") if f.a8 else ("f32",))]


def test_every_architecture_is_counted():
    assert all(any(ARCHS[a] == ARCHS[w] for w in WRITTEN) for a in ARCHS), set(ARCHS) - set(WRITTEN)


@pytest.mark.parametrize("arch,fmt,act", COMBOS)
def test_decode_dispatches_per_layer(gpu, tiny_model, arch, fmt, act):
    path = tiny_model(arch=arch, fmt=fmt, n_layer=LAYERS)
    gf = open_gguf(path)
    try:
        eng = Engine(gpu, Model.from_gguf(gf), act, n_ctx=64)
        assert eng.cfg.linear_type is formats.by_name(fmt) and eng.cfg.n_layer == LAYERS
        steps = decode_steps(stand_in(eng.gpu_model))["blocks"]
    finally:
        gf.close()
    per_layer = len(steps) / LAYERS
    kernels = sorted({f"{st.shader}:{st.entry}" for st, _ in steps})
    assert per_layer <= MAX_PER_LAYER, (per_layer, kernels)
    # every linear's weight is read by a fused bitlinear kernel (never dense / glue at decode)
    assert not any(k.startswith(("dense", "glue")) for k in kernels), kernels
