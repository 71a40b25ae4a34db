"""The default context that fits (generation.fit_context): the KV cache budget and the binding
limit cut a file's context to a multiple of 256 and say why; an explicit context is taken as asked
and a GPU that cannot hold it gets an error naming the most that fits."""
from __future__ import annotations

from dataclasses import asdict

import pytest

from bitweb import commands as cli
from bitweb import formats, generation
from bitweb.generation import KV_BUDGET, ContextError, fit_context, kv_bytes
from bitweb.gguf import open_gguf
from bitweb.model import ARCHS, Config
from tests.conftest import run


def config(arch, n_layer, n_head_kv, head_dim, n_ctx):
    return Config(arch=arch, **asdict(ARCHS[arch]), n_vocab=1000, n_ctx=n_ctx, n_embd=head_dim * 16, n_layer=n_layer,
                  n_ff=4096, n_head=16, n_head_kv=n_head_kv, head_dim=head_dim, eps=1e-6, rope_base=1e6, tied=True,
                  linear_type=formats.Q1_0)


def test_real_shapes():
    b17 = config("qwen3", 28, 8, 128, 32768)           # Bonsai-1.7B: 112 KiB of f16 K and V per position
    assert kv_bytes(b17, 1) == 2 * 28 * 2 * 8 * 128 == kv_bytes(b17, 1, "f32") // 2
    assert kv_bytes(b17, 32768) > 3.7e9 and kv_bytes(b17, 32768, "f32") > 7.5e9
    n, note = fit_context(b17)                          # the default cache: f16
    assert n == 9216 and kv_bytes(b17, n) <= KV_BUDGET < kv_bytes(b17, n + 256)
    assert "context 9216 of the model's 32768" in note and "1024 MiB" in note and "f16 K and V" in note
    n, note = fit_context(b17, kv="f32")                # an f32 cache: half the positions
    assert n == 4608 and kv_bytes(b17, n, "f32") <= KV_BUDGET < kv_bytes(b17, n + 256, "f32")
    assert "context 4608 of the model's 32768" in note and "f32 K and V" in note
    b8 = config("qwen3", 36, 8, 128, 65536)             # Bonsai-8B (and 4B)
    assert fit_context(b8)[0] == 7168 and fit_context(b8, kv="f32")[0] == 3584
    b2 = config("bitnet-b1.58", 30, 5, 128, 4096)       # 2B4T: its own 4096 fits
    assert fit_context(b2) == fit_context(b2, kv="f32") == (4096, "")
    assert kv_bytes(b2, 4096) == 314_572_800 and kv_bytes(b2, 4096, "f32") == 629_145_600
    # one layer's K buffer past the binding limit: 1 MiB / (2 * 8 * 128) = 512 positions (f32: 256)
    n, note = fit_context(b17, max_binding=1 << 20)
    assert n == 512 and "maxStorageBufferBindingSize (1048576 bytes)" in note
    assert fit_context(b17, max_binding=1 << 20, kv="f32")[0] == 256
    assert fit_context(b17, max_binding=100_000)[0] == 48                       # below 256: as it comes
    assert fit_context(b17, max_context=32768) == (32768, "")                    # asked for: as asked
    assert fit_context(b17, max_context=99999) == (32768, "")                    # never past the file's
    with pytest.raises(ContextError, match="not even 2 positions"):
        fit_context(b17, budget=200_000)
    with pytest.raises(ValueError, match="KV cache type 'f8'"):
        fit_context(b17, kv="f8")


def test_engine_default_context_fits_the_binding_limit(tiny_model, gpu):
    from bitweb.engine import Engine
    from bitweb.gguf import FileSource
    from bitweb.gpu import LimitsError
    from bitweb.sampling import SamplingParams
    path = tiny_model()
    saved = gpu.limits
    gpu.limits = dict(saved, maxStorageBufferBindingSize=65536)     # act as a GPU with a 64 KiB binding
    try:
        with FileSource(path) as src:
            eng = run(Engine.load(gpu, open_gguf(path), src, activations="f32"))
        try:
            # tiny: 2 KV heads x 64 x 2 bytes (f16) = 256 per position and layer: 256 of the file's 1024
            assert eng.n_ctx == 256 and "context 256 of the model's 1024" in eng.context_note
            res = run(eng.generate([1, 72, 105], SamplingParams(), 300, ignore_eos=True))
            assert res.stop_reason == "context" and len(res.ids) == 256 - 3
        finally:
            eng.close()
        with FileSource(path) as src, pytest.raises(LimitsError, match="maxStorageBufferBindingSize = 65536 .short by 196608 bytes.: at most 256 positions of context fit"):
            run(Engine.load(gpu, open_gguf(path), src, max_context=1024))
        with FileSource(path) as src, pytest.raises(LimitsError, match=r"1024 positions, f32.*short by 458752 bytes.: at most 128 positions"):
            run(Engine.load(gpu, open_gguf(path), src, max_context=1024, kv_cache="f32"))
    finally:
        gpu.limits = saved


def test_cli_says_what_it_chose(tiny_model, capsys, monkeypatch):
    path = tiny_model()
    monkeypatch.setattr(generation, "KV_BUDGET", 64 * 1024)    # tiny: 1024 bytes (f16) per position: 64
    rc = cli.main(["generate", path, "--backend", "numpy", "--prompt", "x" * 40, "--kv-cache", "f32"])
    err = capsys.readouterr().err                             # f32: 2048 bytes per position: 32
    assert rc == 1 and "context 32 of the model's 1024 positions" in err and "context holds 32" in err
    rc = cli.main(["generate", path, "--backend", "numpy", "--prompt", "x" * 80])
    err = capsys.readouterr().err
    assert rc == 1 and "context 64 of the model's 1024 positions" in err and "context holds 64" in err
    rc = cli.main(["generate", path, "--backend", "numpy", "--prompt", "x" * 40, "--ctx", "64", "--max-tokens", "2",
                   "--json"])
    out = capsys.readouterr()
    assert rc == 0 and "context" not in out.err
    rc = cli.main(["perplexity", path, "--backend", "numpy", "--ids", " ".join(["65"] * 80), "--json"])
    out = capsys.readouterr()
    assert rc == 0 and "context 64 of the model's 1024" in out.err and '"ctx": 64' in out.out and '"n_chunks": 2' in out.out
