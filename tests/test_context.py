"""The default context that fits (generation.fit_context): the KV cache budget and the binding
limit cut a file's context to a multiple of 256 and say why; an explicit context is taken as asked
and a GPU that cannot hold it gets an error naming the most that fits."""
from __future__ import annotations

from dataclasses import asdict

import pytest

from bitweb import commands as cli
from bitweb import generation
from bitweb.generation import KV_BUDGET, ContextError, fit_context, kv_bytes
from bitweb.gguf import open_gguf
from bitweb.model import ARCHS, Config
from tests.conftest import run


def config(arch, n_layer, n_head_kv, head_dim, n_ctx):
    return Config(arch=arch, **asdict(ARCHS[arch]), n_vocab=1000, n_ctx=n_ctx, n_embd=head_dim * 16, n_layer=n_layer,
                  n_ff=4096, n_head=16, n_head_kv=n_head_kv, head_dim=head_dim, eps=1e-6, rope_base=1e6, tied=True,
                  linear_type="Q1_0")


def test_real_shapes():
    b17 = config("qwen3", 28, 8, 128, 32768)           # Bonsai-1.7B: 224 KiB of K and V per position
    assert kv_bytes(b17, 1) == 2 * 28 * 4 * 8 * 128 and kv_bytes(b17, 32768) > 7e9
    n, note = fit_context(b17)
    assert n == 4608 and kv_bytes(b17, n) <= KV_BUDGET < kv_bytes(b17, n + 256)
    assert "context 4608 of the model's 32768" in note and "1024 MiB" in note
    assert fit_context(config("qwen3", 36, 8, 128, 65536))[0] == 3584           # Bonsai-8B (and 4B)
    assert fit_context(config("bitnet-b1.58", 30, 5, 128, 4096)) == (4096, "")  # 2B4T: its own 4096 fits
    # one layer's K buffer past the binding limit: 1 MiB / (4 * 8 * 128) = 256 positions
    n, note = fit_context(b17, max_binding=1 << 20)
    assert n == 256 and "maxStorageBufferBindingSize (1048576 bytes)" in note
    assert fit_context(b17, max_binding=100_000)[0] == 24                       # below 256: as it comes
    assert fit_context(b17, max_context=32768) == (32768, "")                    # asked for: as asked
    assert fit_context(b17, max_context=99999) == (32768, "")                    # never past the file's
    with pytest.raises(ContextError, match="not even 2 positions"):
        fit_context(b17, budget=300_000)


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
            # tiny: 2 KV heads x 64 x 4 bytes = 512 per position and layer: 128 of the file's 1024
            assert eng.n_ctx == 128 and "context 128 of the model's 1024" in eng.context_note
            res = run(eng.generate([1, 72, 105], SamplingParams(), 200, ignore_eos=True))
            assert res.stop_reason == "context" and len(res.ids) == 128 - 3
        finally:
            eng.close()
        with FileSource(path) as src, pytest.raises(LimitsError, match="maxStorageBufferBindingSize = 65536 .short by 458752 bytes.: at most 128 positions of context fit"):
            run(Engine.load(gpu, open_gguf(path), src, max_context=1024))
    finally:
        gpu.limits = saved


def test_cli_says_what_it_chose(tiny_model, capsys, monkeypatch):
    path = tiny_model()
    monkeypatch.setattr(generation, "KV_BUDGET", 64 * 1024)            # tiny: 2048 bytes per position: 32
    rc = cli.main(["generate", path, "--backend", "numpy", "--prompt", "x" * 40])
    err = capsys.readouterr().err
    assert rc == 1 and "context 32 of the model's 1024 positions" in err and "context holds 32" in err
    rc = cli.main(["generate", path, "--backend", "numpy", "--prompt", "x" * 40, "--ctx", "64", "--max-tokens", "2",
                   "--json"])
    out = capsys.readouterr()
    assert rc == 0 and "context" not in out.err
    rc = cli.main(["perplexity", path, "--backend", "numpy", "--ids", " ".join(["65"] * 40), "--json"])
    out = capsys.readouterr()
    assert rc == 0 and "context 32 of the model's 1024" in out.err and '"ctx": 32' in out.out and '"n_chunks": 2' in out.out
