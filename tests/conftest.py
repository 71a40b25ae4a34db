"""Shared test helpers.

`need(ok, why)`: a test that cannot run here (no GPU adapter, no browser) fails
when CI=true and is skipped with the reason elsewhere. It never passes silently.
`write_tiny(path, ...)` / the `tiny_model` fixture: the one factory of small random-weight models;
`make_last_token_first(path, first)`: such a model's greedy reply starts with its last token.
"""
from __future__ import annotations

import asyncio
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
# lavapipe (Mesa's CPU Vulkan driver: the native tests' adapter) compiles each pipeline with LLVM at
# its first dispatch, and on a fresh machine (no Mesa shader cache) those compiles were most of the
# suite's time. Without LLVM's optimisation passes they take about half as long, and the tests'
# shapes run no slower (tests/test_engine.py's long prompt: 83 -> 31 s; the real SmolLM2's 64 GPU
# tokens: 151 -> 102 s). Mesa's NIR passes still run; an explicit GALLIVM_PERF wins. Set before wgpu
# loads the driver; subprocesses (the CLI tests) inherit it.
os.environ.setdefault("GALLIVM_PERF", "nopt")


def need(ok: bool, why: str) -> None:
    if ok:
        return
    if IN_CI:
        pytest.fail(f"required in CI but missing: {why}")
    pytest.skip(why)


def run(coro):
    return asyncio.run(coro)


def write_tiny(path, arch="bitnet-b1.58", fmt="i2_s", seed=0, scale_tensors=None, preset="tiny", vocab="bytes",
               **dims) -> str:
    """Write a random-weight model (bitweb.authoring.makemodel) to path and return str(path).
    dims override the preset's (n_layer=3 ...); scale_tensors None: as `make-model
    --scale-tensors auto` (.scale tensors for arch bitnet with tq1_0 / tq2_0)."""
    from bitweb.authoring.makemodel import PRESETS, ModelSpec, load_vocab, write_model
    from bitweb.model import ARCHS
    scale = scale_tensors if scale_tensors is not None else (ARCHS[arch].scales and fmt in ("tq1_0", "tq2_0"))
    write_model(ModelSpec(arch=arch, fmt=fmt, preset=preset, seed=seed, scale_tensors=scale,
                          **dict(PRESETS[preset], **dims)), load_vocab(vocab), path)
    return str(path)


def make_last_token_first(path, first: int) -> int:
    """Make the greedy first token of the model at path (an F16 tied token_embd / LM head) its last
    vocabulary entry, whose text the caller chose: its row becomes exactly 2x the row of `first`, the
    token greedy decoding picked first, so its logit doubles (exact in F16 and in every float sum)
    and wins whenever that logit is > 0; the prompt never has it, so the prefill is unchanged.
    Returns the new first token's id."""
    import numpy as np
    from bitweb import formats, gguf
    gf = gguf.open_gguf(path)
    new_id = len(gf.metadata["tokenizer.ggml.tokens"]) - 1
    emb = gf.tensors["token_embd.weight"]
    gf.close()
    assert emb.format is formats.F16 and emb.shape[1] == new_id + 1, emb
    assert first != new_id
    n = emb.shape[0]
    with open(path, "r+b") as f:
        f.seek(emb.abs_offset + first * n * 2)
        row = np.frombuffer(f.read(n * 2), dtype="<f2")
        f.seek(emb.abs_offset + new_id * n * 2)
        f.write((row * np.float16(2)).astype("<f2").tobytes())
    return new_id


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """tiny_model(**kw) -> path of the model write_tiny(**kw) writes, written once per session."""
    d, cache = tmp_path_factory.mktemp("models"), {}

    def get(**kw):
        key = tuple(sorted(kw.items()))
        if key not in cache:
            cache[key] = write_tiny(d / f"model{len(cache)}.gguf", **kw)
        return cache[key]
    return get


_dev = None


@pytest.fixture(scope="session")
def gpu():
    """The native wgpu-py device (lavapipe here), shared by the session."""
    global _dev
    if _dev is None:
        from bitweb.gpu import GPUError, request_device
        try:
            _dev = run(request_device("native"))
        except GPUError as e:
            need(False, f"no native WebGPU adapter: {e}")
    return _dev


# Every test has a time limit (pytest-timeout, pinned in pyapp's [test] extras): a test that hangs
# (a promise that never settles, a stuck GPU process) fails after TEST_TIMEOUT_S seconds with every
# thread's stack printed, and the run goes on, instead of holding its lane until CI's own limit.
# Generous for a loaded 2-core machine (the slowest test takes a few minutes there, its module's
# fixtures included); `--timeout N` or PYTEST_TIMEOUT override it, a test may set its own
# (@pytest.mark.timeout). The signal method fails just that test; tests/e2e/conftest.py restarts
# the limit for a browser test's one retry.
TEST_TIMEOUT_S = 900


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    if not config.pluginmanager.hasplugin("timeout"):
        if IN_CI:
            raise pytest.UsageError("pytest-timeout is not installed (tools/setup.sh --test installs it): "
                                    "every test needs its time limit in CI")
        return
    if config.getoption("timeout", None) is None and not os.environ.get("PYTEST_TIMEOUT"):
        config.option.timeout = TEST_TIMEOUT_S
    if config.getoption("timeout_method", None) is None and not os.environ.get("PYTEST_TIMEOUT_METHOD"):
        config.option.timeout_method = "signal"


def pytest_collection_modifyitems(items):
    """Browser tests (tests/e2e) run last: the sync Playwright API leaves an event loop running in
    this thread until the session ends, after which asyncio.run() (`run` above) would fail."""
    items.sort(key=lambda item: item.path.parent.name == "e2e")
