"""bitweb.gpu's device layer: pipelines compiled all at once (every compile in flight together on a
device whose compiles take time), each distinct one once, natively (wgpu-py; lavapipe in CI) too;
failures that name the kernel and leave nothing cached; the engine compiling every kernel it
needs at load, while it uploads; software-adapter detection."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from bitweb import engine as engine_mod
from bitweb import gpu as gpu_mod
from bitweb.engine import Engine
from bitweb.gguf import FileSource, open_gguf
from bitweb.kernels import ops
from bitweb.sampling import SamplingParams
from bitweb.upload import compile_keys
from tests.conftest import run


def _key(n, eps):
    st = ops.rmsnorm(n, 1, eps=eps)
    return (st.shader, st.entry, st.constants, st.defines)


def test_pipelines_compiles_each_distinct_key_once(gpu):
    keys = [_key(256, 0.125), _key(512, 0.125), _key(256, 0.125), _key(256, 0.25)]
    n0 = gpu.counters["pipelines"]
    done = []
    pipes = run(gpu.pipelines(keys, on_done=lambda d, t: done.append((d, t))))
    assert gpu.counters["pipelines"] - n0 == 3
    assert [p.key for p in pipes] == [gpu.pipeline_key(*k) for k in keys]
    assert pipes[0] is pipes[2] and pipes[0] is not pipes[3]
    assert done == [(1, 3), (2, 3), (3, 3)]
    # cached: the same objects, nothing compiled again (progress says so once)
    done.clear()
    again = run(gpu.pipelines(keys[::-1], on_done=lambda d, t: done.append((d, t))))
    assert done == [(3, 3)]
    assert again == pipes[::-1] and gpu.counters["pipelines"] - n0 == 3
    assert run(gpu.pipeline(*keys[1])) is pipes[1]


def test_concurrent_requests_for_one_key_compile_it_once(gpu):
    key = _key(256, 0.375)
    n0 = gpu.counters["pipelines"]

    async def both():
        return await asyncio.gather(gpu.pipeline(*key), gpu.pipeline(*key), gpu.pipelines([key, key]))
    a, b, c = run(both())
    assert a is b is c[0] is c[1]
    assert gpu.counters["pipelines"] - n0 == 1


def test_a_failed_compile_names_the_kernel_and_is_not_cached(gpu):
    good = _key(256, 0.625)
    bad = ("rmsnorm", "no_such_entry", {"N": 256}, {})
    n0 = gpu.counters["pipelines"]
    with pytest.raises(gpu_mod.ShaderError, match="rmsnorm.*no_such_entry"):
        run(gpu.pipelines([bad, good]))
    assert gpu.counters["pipelines"] - n0 == 1            # the good one settled and is cached
    assert gpu.pipeline_key(*bad) not in gpu._pipelines
    with pytest.raises(gpu_mod.ShaderError, match="no_such_entry"):
        run(gpu.pipeline(*bad))                            # tried again, fails again
    assert run(gpu.pipeline(*good)) is run(gpu.pipelines([good]))[0]


def test_warm_compiles_off_the_queue_where_the_driver_compiles_at_dispatch(gpu):
    """Device.warm: on lavapipe (compiles at the first dispatch) each distinct pipeline is run once
    by a second device (Mesa's shader cache hands its code over); elsewhere nothing to do. A step
    that does not compile fails as pipeline() does, before any thread."""
    from bitweb.kernels import glue
    steps = [glue.add(96), glue.add(96), glue.act_mul(96, "silu")]
    want = 2 if gpu.compiles_at_dispatch else 0
    assert run(gpu.warm(steps)) == want
    assert run(gpu.warm([])) == 0
    if want:
        import dataclasses
        bad = dataclasses.replace(glue.add(96), entry="no_such_entry")
        with pytest.raises(gpu_mod.ShaderError, match="glue.*no_such_entry"):
            run(gpu.warm([bad]))


class SlowCompiles(gpu_mod.Device):
    """A device whose compiles take a while, as createComputePipelineAsync does: counts how many
    are in flight at once; `fail` names entries whose compile fails."""

    def __init__(self, fail=()):
        super().__init__(backend="test")
        self.in_flight = self.most = 0
        self.fail = set(fail)

    async def _pipeline(self, code, entry, constants, label):
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await asyncio.sleep(0.02)
            if entry in self.fail:
                raise RuntimeError(f"no entry point {entry}")
            return object()
        finally:
            self.in_flight -= 1


def test_pipelines_are_all_in_flight_at_once():
    dev = SlowCompiles()
    keys = [_key(256 * (i + 1), 0.5) for i in range(12)]
    pipes = run(dev.pipelines(keys + keys[:3]))
    assert dev.most == 12 and dev.counters["pipelines"] == 12
    assert pipes[12] is pipes[0] and len({id(p) for p in pipes}) == 12


def test_a_waiter_compiles_it_when_the_compile_it_waited_for_is_cancelled():
    dev = SlowCompiles()
    key = _key(256, 0.75)

    async def go():
        first = asyncio.ensure_future(dev.pipeline(*key))
        await asyncio.sleep(0)                       # first is in flight
        second = asyncio.ensure_future(dev.pipeline(*key))
        await asyncio.sleep(0)
        first.cancel()
        return await second, first
    p, first = run(go())
    assert first.cancelled() and isinstance(p, gpu_mod.Pipeline)
    assert dev.counters["pipelines"] == 1 and dev._pipelines[dev.pipeline_key(*key)] is p


def test_a_failed_compile_among_many_settles_the_others_first():
    dev = SlowCompiles(fail={"rmsnorm_bad"})
    keys = [_key(256, 0.5), ("rmsnorm", "rmsnorm_bad", {"N": 256}, {}), _key(512, 0.5)]
    done = []
    with pytest.raises(gpu_mod.ShaderError, match="rmsnorm_bad"):
        run(dev.pipelines(keys, on_done=lambda d, t: done.append((d, t))))
    assert done == [(1, 3), (2, 3), (3, 3)] and dev.counters["pipelines"] == 2
    assert all(isinstance(p, gpu_mod.Pipeline) for p in dev._pipelines.values())


def test_engine_compiles_every_kernel_at_load(gpu, tiny_model):
    """Engine.load compiles the decode, prefill and top-k kernels in one batch (upload.compile_pipelines):
    a prompt through the prefill plan and sampled tokens after it compile nothing more."""
    path = tiny_model(arch="bitnet", fmt="tq2_0", seed=3)
    seen = []
    n0 = gpu.counters["pipelines"]                   # (the session's device may have some cached)
    with FileSource(path) as src:
        eng = run(Engine.load(gpu, open_gguf(path), src, progress=lambda *a: seen.append(a)))
    compiled = gpu.counters["pipelines"] - n0
    assert eng.n_pipelines >= 10
    comp = [(d, t) for s, d, t in seen if s == "compile"]
    # one event per pipeline compiled here, plus one per batch (decode, prefill) that was all cached
    assert compiled <= len(comp) <= compiled + 2 and comp[-1] == (eng.n_pipelines, eng.n_pipelines)
    assert all(t == eng.n_pipelines for _, t in comp) and [d for d, _ in comp] == sorted(d for d, _ in comp)
    first, later = compile_keys(eng._compile_steps())
    assert eng.n_pipelines == len({gpu.pipeline_key(*k) for k in first + later}) and later
    # greedy decode first; the sampler's top-k (the app's default is greedy) with the prefill kernels
    assert {k[1] for k in first if k[0] == "sampling"} == {"argmax"} and later[0][1] == "topk"
    st = eng.stage_ms                                # [start, end] ms from the start of load()
    assert set(st) == {"upload", "compile", "compile_prefill", "plans"}
    assert all(0 <= a <= b <= eng.load_ms + 0.1 for a, b in st.values())     # (rounded to 0.1 ms)
    assert st["compile_prefill"][0] >= st["compile"][1]                        # decode kernels first
    assert st["plans"][0] >= max(st["upload"][1], st["compile_prefill"][1])   # the plans need them all
    n0 = gpu.counters["pipelines"]
    ids = eng.tokenizer.encode("a prompt of a few tokens for the prefill plan")
    assert len(ids) > 4
    res = run(eng.generate(ids, SamplingParams(temperature=0.8, top_k=40, seed=1), 6, ignore_eos=True))
    assert len(res.ids) == 6
    assert gpu.counters["pipelines"] == n0
    eng.close()


def test_engine_ready_before_its_prefill_kernels_answers_the_same(gpu, tiny_model, monkeypatch):
    """load(wait_prefill=False) returns once the decode kernels are compiled. While the prefill
    kernels are still compiling (forced here: the race is the adapter's), a prompt goes token by
    token through the decode plan, no prefill plan made or waited for; the tokens (greedy, and
    sampled with a repetition penalty) are those of a load that waited and prefilled in one plan
    run; kernels compiled during a prompt take the rest of it (one window token by token, then one
    prefill plan run: the same tokens); once the kernels are compiled, prompts take the prefill plan.
    Where compiles run in the background (the browser), the prefill kernels start with the decode
    kernels rather than after them: the same tokens."""
    from bitweb.engine import SWITCH_WINDOW
    path = tiny_model(arch="bitnet", fmt="tq2_0", seed=5)
    ids = list(range(3, 40))
    cases = [SamplingParams(), SamplingParams(temperature=0.8, top_k=40, repeat_penalty=1.3, seed=1)]

    async def gen(eng, params):
        eng.reset()
        r0 = gpu.counters["plan_runs"]
        res = await eng.generate(ids, params, 6, ignore_eos=True)
        return res.ids, gpu.counters["plan_runs"] - r0 - res.counters["plan_runs"]     # the prompt's runs

    async def go(wait):
        with FileSource(path) as src:
            eng = await Engine.load(gpu, open_gguf(path), src, wait_prefill=wait)
        try:
            assert (eng.prefill_compiled is None) == wait and eng.prefill_rows >= len(ids)
            assert ((eng.prefill_rows, 0) in eng._plans) == wait          # no prefill plan yet
            if wait:
                return [await gen(eng, p) for p in cases]
            compiling = eng.prefill_compiled
            eng.prefill_compiled = asyncio.get_running_loop().create_future()      # "still compiling"
            assert not eng.prefill_ready
            out = [await gen(eng, p) for p in cases]
            assert not [k for k in eng._plans if isinstance(k, tuple)]    # no prefill plan made
            for p in cases:                       # "compiled" once the prompt's first window has run
                r0 = gpu.counters["plan_runs"]
                eng.prefill_compiled = SimpleNamespace(done=lambda r0=r0: gpu.counters["plan_runs"] - r0 >= SWITCH_WINDOW)
                out.append(await gen(eng, p))
                assert eng.prefill_path == "decode+prefill"
            eng.prefill_compiled = compiling
            await compiling
            assert eng.prefill_ready and "compile_prefill" in eng.stage_ms
            return out + [await gen(eng, cases[0])]
        finally:
            eng.close()
    events = []                                   # ("decode" | "prefill", "start" | "end") per batch

    async def spy(dev, keys, *a, **kw):
        which = "prefill" if keys[0][1] == "topk" else "decode"
        events.append((which, "start"))
        await asyncio.sleep(0)                    # as a compile in the background: the loop runs on
        await real(dev, keys, *a, **kw)
        events.append((which, "end"))
    real = engine_mod.compile_pipelines
    monkeypatch.setattr(engine_mod, "compile_pipelines", spy)
    waited = run(go(True))
    events.clear()
    early = run(go(False))

    def decode_batches_in_flight():                # when the prefill batch starts
        n = 0
        for which, what in events:
            if which == "prefill":
                return n
            n += 1 if what == "start" else -1
    after = decode_batches_in_flight() == 0
    events.clear()
    monkeypatch.setattr(gpu, "compiles_in_background", True)
    assert run(go(False)) == early
    assert after and decode_batches_in_flight() > 0, events
    assert [n for _, n in waited] == [1, 1]                   # one prefill plan run per prompt
    w = SWITCH_WINDOW + 1
    assert [n for _, n in early] == [len(ids), len(ids), w, w, 1]   # token by token, switched, the prefill plan
    assert [t for t, _ in early] == [t for t, _ in waited] * 2 + [waited[0][0]]


def test_engine_load_failure_leaves_no_compile_running(gpu, tiny_model):
    path = tiny_model(seed=4)

    class Broken:
        def read(self, off, n):
            raise OSError("disk gone")
    with pytest.raises(OSError, match="disk gone"):
        run(Engine.load(gpu, open_gguf(path), Broken()))
    assert not [p for p in gpu._pipelines.values() if not isinstance(p, gpu_mod.Pipeline)]


@pytest.mark.parametrize("info, fallback, want", [
    ({"vendor": "google", "device": "", "description": "SwiftShader Device (Subzero)"}, False, "SwiftShader"),
    ({"vendor": "google", "architecture": "swiftshader"}, False, "SwiftShader"),
    ({"vendor": "llvmpipe", "device": "llvmpipe (LLVM 15.0.6, 256 bits)"}, False, "llvmpipe"),
    ({"vendor": "mesa", "description": "lavapipe"}, False, "lavapipe"),
    ({"vendor": "nvidia", "architecture": "hopper"}, True, "fallback adapter"),
    ({"vendor": "x", "adapter_type": "CPU"}, False, "CPU adapter"),
    ({"vendor": "nvidia", "architecture": "hopper", "description": "NVIDIA H200", "adapter_type": "DiscreteGPU"},
     False, None),
    ({}, False, None),
])
def test_software_adapter_detection(info, fallback, want):
    assert gpu_mod.software_reason(info, fallback) == want


def test_native_device_says_whether_it_is_software(gpu):
    assert gpu.software == gpu_mod.software_reason(gpu.info, gpu.fallback)
    if gpu.software:
        assert f"(software: {gpu.software})" in gpu.describe()


@pytest.mark.parametrize("info, rb", [({"architecture": "swiftshader", "description": ""}, 1),
                                      ({"device": "llvmpipe (LLVM 15.0.7, 256 bits)"}, 4)])
def test_bitlinear_rows_per_lane_group_on_cpu_adapters(info, rb):
    """SwiftShader gets one row per lane group (2-4x faster to compile, no slower there:
    dev/perf/compile_times.py --bitlinear-speed) and its shape at run time (SHAPE: rpw in the
    step's shape buffer, one pipeline for several linears); lavapipe keeps 4 (its measured best)."""
    import struct

    from bitweb.kernels import bitlinear
    dev = gpu_mod.Device(backend="browser", info=info)
    st = bitlinear.gemv("TQ2_0", 512, 256, a8=True, norm=True, dev=dev)
    shape = bool(st.defines.get("SHAPE"))
    assert shape == (rb == 1)
    rpw = struct.unpack("<8I", st.data["shape"])[4] if shape else st.constants["RPW"]
    assert st.constants["RB"] == rb and rpw == 64 and st.constants["WG"] == 64


# ---------------------------------------------------------------- error scopes and device loss

class ScopedDevice(gpu_mod.Device):
    """A backend that records the scopes it is asked for and says an error for each popped one
    (as a browser whose allocation failed would)."""

    def __init__(self):
        super().__init__(backend="test")
        self.pushed, self.destroyed = [], 0

    def _push_error_scope(self, filter):
        self.pushed.append(filter)

    async def _pop_error_scope(self):
        return f"{self.pushed.pop()}: 1 GiB buffer"

    def _destroy(self):
        self.destroyed += 1              # (the browser's device.lost resolves later)


def test_error_scopes_nest_and_name_a_bad_filter():
    dev = ScopedDevice()
    dev.push_error_scope("out-of-memory")
    dev.push_error_scope("validation")
    assert run(dev.pop_error_scope()) == "validation: 1 GiB buffer"
    assert run(dev.pop_error_scope()) == "out-of-memory: 1 GiB buffer"
    with pytest.raises(gpu_mod.GPUError, match="no error scope is open"):
        run(dev.pop_error_scope())
    with pytest.raises(gpu_mod.GPUError, match="'oom' is not an error filter"):
        dev.push_error_scope("oom")
    assert dev.pushed == []


def test_on_lost_callbacks_run_once_when_the_backend_says_so():
    dev = ScopedDevice()
    seen = []
    dev.on_lost(lambda reason, message: seen.append(("first", reason, message)))
    dev.destroy()
    assert dev.destroyed == 1 and dev.lost is None and seen == []      # lost only once the backend says so
    dev._set_lost("destroyed", "Device was destroyed.")
    dev._set_lost("unknown", "again")                                   # (a second report changes nothing)
    dev.on_lost(lambda reason, message: seen.append(("late", reason, message)))   # already lost: at once
    assert seen == [("first", "destroyed", "Device was destroyed."), ("late", "destroyed", "Device was destroyed.")]
    assert dev.lost == "destroyed: Device was destroyed."
    dev.destroy()
    assert dev.destroyed == 1                                           # a lost device is not destroyed again
    with pytest.raises(gpu_mod.DeviceLostError, match="destroyed"):
        dev.create_buffer(16)


def test_native_device_scopes_and_destroy():
    """Natively (wgpu-py raises each error at its call) a scope captures nothing; destroy() loses
    the device at once, with WebGPU's reason."""
    from bitweb.gpu import GPUError, request_device
    try:
        dev = run(request_device("native"))
    except GPUError as e:
        from tests.conftest import need
        need(False, f"no native WebGPU adapter: {e}")
    buf = dev.create_buffer(64, label="x")
    dev.push_error_scope("out-of-memory")
    dev.write_buffer(buf, 0, bytes(range(64)))
    assert run(dev.pop_error_scope()) is None
    assert run(dev.read(buf, 0, 8)) == bytes(range(8))
    seen = []
    dev.on_lost(lambda reason, message: seen.append(reason))
    dev.destroy()
    assert seen == ["destroyed"] and dev.lost.startswith("destroyed")
    with pytest.raises(gpu_mod.DeviceLostError):
        dev.write_buffer(buf, 0, bytes(4))
