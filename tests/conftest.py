"""Shared test helpers.

`need(ok, why)`: a test that cannot run here (no GPU adapter, no browser) fails
when CI=true and is skipped with the reason elsewhere. It never passes silently.
`write_tiny(path, ...)` / the `tiny_model` fixture: the one factory of small random-weight models;
`make_last_token_first(path, first)`: such a model's greedy reply starts with its last token.
Lanes: the `quick` marker (`npm run test:quick`: QUICK_FILES, QUICK_TESTS, QUICK_KERNELS), `--part K/N`
(tools/test.sh deals SPLIT's tests over its lanes), native pipeline compiles counted per test file.
"""
from __future__ import annotations

import asyncio
import os
import pathlib
import re

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
    config.addinivalue_line("markers", "quick: in `npm run test:quick` (tests/conftest.py QUICK_*)")
    _count_compiles()
    if not config.pluginmanager.hasplugin("timeout"):
        if IN_CI:
            raise pytest.UsageError("pytest-timeout is not installed (tools/setup.sh --test installs it): "
                                    "every test needs its time limit in CI")
        return
    if config.getoption("timeout", None) is None and not os.environ.get("PYTEST_TIMEOUT"):
        config.option.timeout = TEST_TIMEOUT_S
    if config.getoption("timeout_method", None) is None and not os.environ.get("PYTEST_TIMEOUT_METHOD"):
        config.option.timeout_method = "signal"


# ---- lanes ---------------------------------------------------------------------------------------
# `npm run test:quick` (tools/test.sh --quick) runs the tests marked `quick`: the files of QUICK_FILES
# whole, the tests QUICK_TESTS names, and QUICK_KERNELS kernel cases of each kernel family
# (tests/test_kernels.py). Every other test, a new test file's included, runs only in the full run
# (`npm test`). The full run's three lanes split SPLIT's files by test (`--part K/N`, below).
QUICK_FILES = {
    "tests/test_blockquant.py", "tests/test_boot_snapshot.py", "tests/test_dense_ops_specs.py",
    "tests/test_docs.py", "tests/test_download_watch.py", "tests/test_gguf_writer.py",
    "tests/test_grammar_gbnf.py", "tests/test_grammar_masks.py", "tests/test_grammar_schema.py",
    "tests/test_presets.py", "tests/test_sampling.py", "tests/test_shaders.py", "tests/test_tasks.py",
    "tests/test_tokenizer_vocabs.py", "tests/test_web_layout.py",
}
QUICK_TESTS = {
    # native GPU: the engine against the numpy model (one ternary model, A8), its decode plan
    "tests/test_engine.py": ("test_greedy_equals_numpy[bitnet-b1.58-i2_s-a8]",
                             "test_decode_plan_is_replayed_with_o1_host_calls"),
    # one WebGPU smoke in Chromium: the library's minimal page streams the CLI's answer
    "tests/e2e/test_library.py": ("test_minimal_page_streams_the_cli_answer",),
}
QUICK_KERNELS = 3
# shapes a quick kernel case avoids (2B4T / vocabulary-sized cases: seconds each on lavapipe)
QUICK_KERNELS_TOO_BIG = re.compile(r"2560|6912|128256|49152|2b4t|bonsai")
# Files whose tests the full run's lanes share (`--part K/N`: the K-th of N parts of about equal cost).
# SPLIT: file -> the cost of a test SPLIT_COST does not name. SPLIT_COST: a test's cost by its name
# (with parameters), else by its function's name; the unit is about one test_engine greedy run (~50 s
# on the loaded 2-core machine: a cold model's compiles, 64 tokens on lavapipe and in numpy).
SPLIT = {"tests/test_engine.py": 1.0, "tests/test_structured.py": 0.01}
SPLIT_COST = {
    "test_f16_kv_cache_equals_f32": 2, "test_a8_prefill_equals_decode": 2, "test_long_prompt_prefill_in_chunks": 3,
    "test_sampling_on_gpu_equals_numpy_and_repeats_with_seed": 2, "test_chat_reuses_the_cache_and_equals_a_fresh_run": 3,
    "test_overlapped_greedy_equals_one_step_at_a_time": 3, "test_stop_token_and_should_stop": 2,
    # test_structured.py's GPU tests (the SmolLM2 vocabulary's grammar masks): measured
    "test_json_responses_validate_on_the_smollm2_vocabulary[scalars]": 3.2,
    "test_named_function_and_one_call": 2.2,
    "test_json_responses_validate_on_the_smollm2_vocabulary[enum-const]": 1.8,
    "test_json_responses_validate_on_the_smollm2_vocabulary[person]": 1.4,
    "test_tool_call_round_trip[2-hermes]": 1.3,
    "test_json_responses_validate_on_the_smollm2_vocabulary[one-of]": 1.1,
    "test_tool_call_round_trip[3-generic]": 1.0, "test_tool_call_round_trip[1-generic]": 0.6,
    "test_json_responses_validate_on_the_smollm2_vocabulary[nullable]": 0.3, "test_grammar_field_and_errors_by_field": 0.2,
}


def _cost(it) -> float:
    return SPLIT_COST.get(it.name, SPLIT_COST.get(it.originalname, SPLIT[it.nodeid.split("::")[0]]))


def quick_paths(browser: bool) -> list:
    """The files holding quick tests: the browser ones (tests/e2e) or the others (tools/test.sh --quick
    runs them side by side, with -m quick)."""
    files = sorted(QUICK_FILES | set(QUICK_TESTS) | {"tests/test_kernels.py"})
    return [f for f in files if f.startswith("tests/e2e/") == browser]


def pytest_addoption(parser):
    parser.addoption("--part", default=None, metavar="K/N",
                     help="run only the K-th of N balanced parts of the tests of the files in tests/conftest.py "
                          "SPLIT (K: 1..N, or several as 1,3/4); other files' tests all run")


def _quick_kernels(items) -> set:
    """QUICK_KERNELS cases per kernel family, spread over its kinds (bitlinear.gemv, ops.rope...)."""
    kinds: dict = {}
    for it in items:
        name = it.name[it.name.find("[") + 1:-1]
        if QUICK_KERNELS_TOO_BIG.search(name) or "[" not in it.name:
            continue
        head = name.split(" ")[0].split(".")
        kinds.setdefault(head[0], {}).setdefault(".".join(head[:2]), []).append(it)
    picked = set()
    for fam in kinds.values():
        lists = list(fam.values())
        for i in range(QUICK_KERNELS):
            lst = lists[i % len(lists)]
            if i // len(lists) < len(lst):
                picked.add(lst[i // len(lists)].nodeid)
    return picked


def _parts(items, spec: str):
    """The items of --part K/N: SPLIT's tests dealt into N parts of about equal cost (the costliest
    first, each to the part with the least so far); other files' tests are all kept."""
    try:
        ks, n = spec.split("/")
        n, ks = int(n), {int(k) for k in ks.split(",")}
        assert n >= 1 and ks and all(1 <= k <= n for k in ks)
    except (ValueError, AssertionError):
        raise pytest.UsageError(f"--part {spec!r}: give K/N with 1 <= K <= N (K may be a list: 1,3/4)") from None
    split = [it for it in items if it.nodeid.split("::")[0] in SPLIT]
    load, part = [0.0] * n, {}
    for it in sorted(split, key=lambda it: -_cost(it)):
        j = min(range(n), key=lambda j: load[j])
        load[j] += _cost(it)
        part[it.nodeid] = j + 1
    return [it for it in items if part.get(it.nodeid, next(iter(ks))) in ks]


def pytest_collection_modifyitems(config, items):
    """Mark the quick tests; keep --part's share of SPLIT's tests. Browser tests (tests/e2e) run last:
    the sync Playwright API leaves an event loop running in this thread until the session ends,
    after which asyncio.run() (`run` above) would fail."""
    kernels = _quick_kernels([it for it in items if it.nodeid.startswith("tests/test_kernels.py::test_kernel_case")])
    for it in items:
        f = it.nodeid.split("::")[0]
        if f in QUICK_FILES or it.nodeid in kernels or it.name in QUICK_TESTS.get(f, ()) \
                or it.originalname in QUICK_TESTS.get(f, ()):
            it.add_marker(pytest.mark.quick)
    spec = config.getoption("--part", None)
    if spec:
        keep = _parts(items, spec)
        gone = [it for it in items if it not in set(keep)]
        if gone:
            config.hook.pytest_deselected(items=gone)
        items[:] = keep
    items.sort(key=lambda item: item.path.parent.name == "e2e")


# ---- native pipeline compiles per test file ------------------------------------------------------
# lavapipe compiles each pipeline (bitweb.gpu Device._compile: one per distinct (shader, entry,
# constants, defines) and device) with LLVM, and on a machine with a cold Mesa shader cache those
# compiles are most of a native GPU test's time. Counted here per test file (the file whose test
# asked first: the session's `gpu` device caches them) and printed at the end of the run;
# BITWEB_PIPELINES_JSON names a file that gets the keys per test file ({pid}: this process's id).
PIPELINES: dict = {}            # test file -> [pipeline keys compiled while its tests ran]
_current_file = ["(collection)"]


def _count_compiles():
    try:
        from bitweb.gpu import Device
    except ImportError:
        return
    compile_ = getattr(Device, "_compile", None)
    if compile_ is None or getattr(compile_, "counted", False):
        return

    async def counted(self, key):
        p = await compile_(self, key)
        PIPELINES.setdefault(_current_file[0], []).append(key)
        return p
    counted.counted = True
    Device._compile = counted


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _current_file[0] = item.nodeid.split("::")[0]
    yield


def pytest_terminal_summary(terminalreporter):
    if not PIPELINES:
        return
    tr = terminalreporter
    keys = {k for ks in PIPELINES.values() for k in ks}
    tr.section("native pipelines compiled (lavapipe)")
    for f, ks in sorted(PIPELINES.items(), key=lambda kv: -len(kv[1])):
        tr.write_line(f"{len(ks):5d} compiles, {len(set(ks)):4d} distinct  {f}")
    tr.write_line(f"{sum(map(len, PIPELINES.values())):5d} compiles, {len(keys):4d} distinct  in all")
    out = os.environ.get("BITWEB_PIPELINES_JSON", "").replace("{pid}", str(os.getpid()))
    if out:
        import json
        pathlib.Path(out).parent.mkdir(parents=True, exist_ok=True)
        with open(out, "w") as f:
            json.dump({f: [repr(k) for k in ks] for f, ks in PIPELINES.items()}, f, indent=0)
