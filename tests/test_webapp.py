"""bitweb.webapp's plain-Python parts in CPython: error kinds, settings, header parsing from a
Blob-like object in growing prefixes (the browser path, with a fake Blob)."""
import argparse

import pytest

from bitweb import gguf, webapp
from bitweb.gpu import DeviceLostError, GPUError, LimitsError, NoAdapterError


def drive(coro):
    """Run a coroutine that never really suspends (FakeBlob answers at once), without an event loop."""
    try:
        coro.send(None)
    except StopIteration as e:
        return e.value
    raise AssertionError("the coroutine waited for something")


class FakeBlob:
    """The bits of a JS Blob that webapp uses: size, slice(a, b).arrayBuffer() -> .to_bytes()."""

    def __init__(self, data):
        self.data, self.size, self.reads = data, len(data), []

    def slice(self, a, b):
        blob = self

        class Part:
            async def arrayBuffer(self):
                blob.reads.append((a, b))

                class AB:
                    def to_bytes(self):
                        return blob.data[a:b]
                return AB()
        return Part()


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from bitweb.authoring import makemodel
    out = tmp_path_factory.mktemp("webapp") / "tiny.gguf"
    args = argparse.Namespace(arch="bitnet-b1.58", format="i2_s", preset="tiny", layers=None,
                              vocab="bytes", seed=0, scale_tensors="auto")
    makemodel.write_model(makemodel.spec_from_args(args), makemodel.load_vocab("bytes"), out)
    return out.read_bytes()


def test_header_parsed_from_growing_prefixes(model, monkeypatch):
    monkeypatch.setattr(webapp, "HEADER_FIRST", 1024)      # force several NeedMoreBytes rounds
    blob = FakeBlob(model)
    gf = drive(webapp.parse_header(blob))
    want = gguf.read_gguf(gguf.BytesSource(model))
    assert gf.metadata == want.metadata
    assert list(gf.tensors.values()) == list(want.tensors.values())
    assert gf.data_offset == want.data_offset
    # prefixes only, each at least twice the last, and never far past the header
    assert all(a == 0 for a, _ in blob.reads) and len(blob.reads) >= 3
    ends = [b for _, b in blob.reads]
    assert all(b2 >= 2 * b1 or b2 == len(model) for b1, b2 in zip(ends, ends[1:]))
    assert ends[-1] < 2 * want.data_offset + 1024
    assert gf.header_read == ends[-1]


def test_malformed_header_is_a_format_error(model):
    bad = bytearray(model[:2000])
    bad[16:24] = (10 ** 9).to_bytes(8, "little")
    with pytest.raises(gguf.GGUFError) as e:
        drive(webapp.parse_header(FakeBlob(bytes(bad))))
    assert webapp.classify(e.value) == ("format", str(e.value))
    assert "kv_count" in str(e.value)


def test_error_kinds():
    assert webapp.classify(NoAdapterError("x"))[0] == "no-webgpu"
    assert webapp.classify(LimitsError("binding too big"))[0] == "limits"
    assert webapp.classify(DeviceLostError("gone"))[0] == "device-lost"
    assert webapp.classify(webapp.OutOfMemory("oom"))[0] == "oom"
    assert webapp.classify(GPUError("bad"))[0] == "gpu"
    assert webapp.classify(webapp.AppError("no-model", "no model"))[0] == "no-model"
    from bitweb.model import ModelError
    assert webapp.classify(ModelError("arch 'llama'")) == ("unsupported", "arch 'llama'")
    kind, msg = webapp.classify(KeyError("boom"))
    assert kind == "internal" and msg.startswith("KeyError")


def test_settings_to_sampling_params():
    p, n = webapp.params_from({"temperature": 0.7, "top_k": 40.0, "top_p": 0.9, "min_p": 0.05,
                               "repeat_penalty": 1.1, "seed": 7, "max_tokens": 33})
    assert (p.temperature, p.top_k, p.top_p, p.min_p, p.repeat_penalty, p.seed, n) == (0.7, 40, 0.9, 0.05, 1.1, 7, 33)
    assert isinstance(p.top_k, int) and isinstance(p.seed, int)
    p, n = webapp.params_from({"temperature": None, "max_tokens": 5})
    assert p.temperature == 0.0 and n == 5
    with pytest.raises(webapp.AppError):
        webapp.params_from({"max_tokens": 0})
    from bitweb.sampling import SamplingError
    with pytest.raises(SamplingError) as e:
        webapp.params_from({"top_p": 0})
    assert webapp.classify(e.value)[0] == "settings"
