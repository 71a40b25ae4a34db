"""The GPU layer's live-buffer count (dev.live_buffers / dev.live_bytes): buffers created and not
destroyed. An engine load + generate + close returns both to where they were; a destroyed buffer
leaves the count once (a second destroy changes nothing)."""
from __future__ import annotations

from bitweb.engine import Engine
from bitweb.gguf import FileSource, open_gguf
from bitweb.authoring.makemodel import PRESETS, ModelSpec, load_vocab, write_model
from bitweb.sampling import SamplingParams
from tests.conftest import run


def test_create_and_destroy_are_counted(gpu):
    run(gpu.sync())                        # the backend's own sync buffer exists from here on
    n0, b0 = gpu.live_buffers, gpu.live_bytes
    a = gpu.create_buffer(1000, label="a")
    b = gpu.create_buffer(10, label="b")
    assert (gpu.live_buffers, gpu.live_bytes) == (n0 + 2, b0 + 1000 + 12)     # sizes round up to 4
    assert gpu.live() == {"live_buffers": n0 + 2, "live_bytes": b0 + 1012}
    a.destroy()
    a.destroy()                            # idempotent: counted once
    assert (gpu.live_buffers, gpu.live_bytes) == (n0 + 1, b0 + 12)
    b.destroy()
    assert (gpu.live_buffers, gpu.live_bytes) == (n0, b0)


def test_engine_load_generate_close_returns_to_the_start(gpu, tmp_path):
    path = tmp_path / "tiny.gguf"
    write_model(ModelSpec(arch="bitnet-b1.58", fmt="i2_s", preset="tiny", seed=1, scale_tensors=False,
                          **PRESETS["tiny"]),
                load_vocab("bytes"), path)
    run(gpu.sync())
    n0, b0 = gpu.live_buffers, gpu.live_bytes
    for lm_head in (None, "q8_0"):         # q8_0: the F16 head is converted and its upload destroyed
        with FileSource(path) as src:
            eng = run(Engine.load(gpu, open_gguf(path), src, activations="a8", lm_head=lm_head))
        run(eng.generate([1, 2, 3], SamplingParams(temperature=0.8, top_k=5, seed=1), 4, ignore_eos=True))
        run(eng.generate([1, 2, 3, 4], SamplingParams(), 4, ignore_eos=True))
        assert gpu.live_buffers > n0 + 10, gpu.live()
        assert gpu.live_bytes - b0 >= eng.gpu_bytes > 0, (gpu.live(), eng.gpu_bytes)
        eng.close()
        assert (gpu.live_buffers, gpu.live_bytes) == (n0, b0), (lm_head, gpu.live(), n0, b0)


def test_timing_buffers_are_freed(gpu):
    """time_plan's timestamp buffer (timestamp-query) is counted while it lives, then freed."""
    assert gpu.caps.timestamps, "lavapipe has timestamp-query: the path this test checks"
    run(gpu.sync())
    n0 = gpu.live_buffers
    seen = []
    create = gpu._create_buffer
    gpu._create_buffer = lambda size, usage, label: (seen.append((label, gpu.live_buffers)), create(size, usage, label))[1]
    try:
        run(gpu.time_plan(gpu.plan([]), repeats=3))
    finally:
        del gpu._create_buffer
    assert seen == [("timestamps", n0)]
    assert gpu.live_buffers == n0
