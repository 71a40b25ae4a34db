"""bitweb.webapp's plain-Python parts in CPython: error kinds, settings, header parsing from a
Blob-like object in growing prefixes (the browser path, with a fake Blob)."""
import argparse
import json
import pathlib

import pytest

from bitweb import blob as blob_mod, completions, gguf, webapp
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
def model(tiny_model):
    return pathlib.Path(tiny_model(seed=0)).read_bytes()


def test_header_parsed_from_growing_prefixes(model, monkeypatch):
    monkeypatch.setattr(blob_mod, "HEADER_FIRST", 1024)      # force several NeedMoreBytes rounds
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


def test_header_larger_than_the_bound_is_refused_before_it_is_read(model, monkeypatch):
    """A header that needs more than gguf.MAX_HEADER_BYTES is a format error that states the
    bound, raised after reading no more than the bound (here lowered to 64 KiB)."""
    import struct
    big = 1 << 20
    # a valid start of a header whose first key is a string of `big` bytes (the file stays small:
    # the parser asks for the bytes before it has them)
    data = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 4) + b"name" + struct.pack("<IQ", 8, big)
    blob = FakeBlob(data + bytes(16))
    blob.size = big + 4096                       # as if the file went on
    monkeypatch.setattr(blob_mod, "HEADER_FIRST", 1024)
    monkeypatch.setattr(gguf, "MAX_HEADER_BYTES", 64 << 10)
    with pytest.raises(gguf.GGUFError) as e:
        drive(webapp.parse_header(blob))
    assert "bitweb refuses GGUF headers over" in str(e.value) and "(65536 bytes)" in str(e.value), e.value
    assert webapp.classify(e.value)[0] == "format"
    assert max(b for _, b in blob.reads) <= 64 << 10


def test_advice_names_every_architecture_and_format_from_the_registries():
    from bitweb import formats, model
    for kind in ("format", "unsupported"):
        archs, line = webapp.advice(kind)
        assert all(f" {a}," in archs or f" {a}." in archs for a in model.ARCHS) and "qwen2" in archs, archs
        assert all(f.name in line for f in formats.select("linear") + formats.select("table")), line
    assert webapp.advice("context") == []
    err = json.loads(webapp.error_json(gguf.GGUFError("bad magic")))["error"]    # what the worker sends
    assert err["kind"] == "format" and err["advice"] == webapp.advice("format")
    assert "advice" not in json.loads(webapp.error_json(webapp.AppError("context", "too long")))["error"]


def test_error_kinds():
    assert webapp.classify(NoAdapterError("x"))[0] == "no-webgpu"
    assert webapp.classify(LimitsError("binding too big"))[0] == "limits"
    assert webapp.classify(DeviceLostError("gone"))[0] == "device-lost"
    assert webapp.classify(webapp.OutOfMemory("oom"))[0] == "out-of-memory"
    assert webapp.classify(GPUError("bad"))[0] == "gpu"
    assert webapp.classify(webapp.AppError("no-room", "full"))[0] == "no-room"
    assert webapp.classify(webapp.Aborted("stop"))[0] == "aborted"
    from bitweb.model import ModelError
    assert webapp.classify(ModelError("arch 'llama'")) == ("unsupported", "arch 'llama'")
    kind, msg = webapp.classify(KeyError("boom"))
    assert kind == "internal" and msg.startswith("KeyError")
    err = json.loads(webapp.error_json(webapp.AppError("settings", "bad", field="top_p")))["error"]
    assert err == {"kind": "settings", "message": "bad", "field": "top_p"}


def test_settings_to_sampling_params():
    p, n, stops = completions.params_from({"temperature": 0.7, "top_k": 40.0, "top_p": 0.9, "min_p": 0.05,
                                      "repetition_penalty": 1.1, "seed": 7, "max_tokens": 33, "stop": "\n\n"})
    assert (p.temperature, p.top_k, p.top_p, p.min_p, p.repeat_penalty, p.seed, n) == (0.7, 40, 0.9, 0.05, 1.1, 7, 33)
    assert isinstance(p.top_k, int) and isinstance(p.seed, int) and stops == ["\n\n"]
    p, n, stops = completions.params_from({"temperature": None})
    assert p.temperature == 0.0 and n is None and stops == []


@pytest.mark.parametrize("field,value", [
    ("max_tokens", ""), ("max_tokens", 0), ("max_tokens", 2.5), ("max_tokens", True),
    ("temperature", -1), ("temperature", float("nan")), ("temperature", "0.5"), ("top_p", 0), ("top_p", 1.5),
    ("min_p", -0.1), ("top_k", -1), ("seed", -3), ("repetition_penalty", 0), ("stop", 5), ("stop", [""]),
    ("stop", ["a", "b", "c", "d", "e"]),
])
def test_a_bad_setting_names_its_field(field, value):
    """No value reaches the engine unchecked: each bad one is a settings error naming the field."""
    with pytest.raises(webapp.AppError) as e:
        completions.params_from({field: value})
    assert e.value.kind == "settings" and e.value.extra["field"] == field
    assert field in str(e.value)


def test_messages_are_checked():
    assert webapp.checked_messages([{"role": "user", "content": "hi", "extra": 1}]) == [{"role": "user", "content": "hi"}]
    for bad in ([], "hi", [{"role": "robot", "content": "x"}], [{"role": "user", "content": None}]):
        with pytest.raises(webapp.AppError) as e:
            webapp.checked_messages(bad)
        assert e.value.extra["field"] == "messages"


def test_stop_string_overlap():
    assert completions.overlap("hello wor", "world") == 3
    assert completions.overlap("hello", "world") == 0
    assert completions.overlap("abc", "c") == 0            # a one-character stop is found, never held
