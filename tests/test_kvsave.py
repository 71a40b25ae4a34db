"""Saving and restoring the KV cache (Engine.export_kv / restore_kv; the browser keeps the bytes in
OPFS: web/kvstore.mjs, tests/e2e/test_kvsave.py): a restored prefix then a greedy reply equals the
reply computed from scratch, token for token, and only the tokens after the prefix are run."""
from __future__ import annotations

import pytest

from bitweb.engine import Engine, EngineError
from bitweb.generation import ContextError
from bitweb.gguf import FileSource, open_gguf
from bitweb.sampling import SamplingParams
from tests.conftest import run


def load(dev, path, **kw):
    with FileSource(path) as src:
        return run(Engine.load(dev, open_gguf(path), src, **kw))


@pytest.mark.parametrize("kv", ["f16", "f32"])
def test_restored_prefix_then_greedy_equals_the_reply_without_it(gpu, tiny_model, kv):
    path = tiny_model(arch="bitnet", fmt="tq2_0", seed=3)
    a = load(gpu, path, kv_cache=kv)
    tok = a.tokenizer
    first = tok.encode("Once upon a time there was a tiny model", add_bos=True)
    run(a.generate(first, SamplingParams(), 10, ignore_eos=True))
    saved_ids = list(a.cached_ids)                    # the prompt and the reply's rows
    assert len(saved_ids) == len(first) + 9
    data = run(a.export_kv())
    assert len(data) == a.kv_export_bytes(len(saved_ids)) > 0
    a.close()

    later = saved_ids + tok.encode(" and then it said", add_bos=False)
    b = load(gpu, path, kv_cache=kv)
    run(b.generate(tok.encode("something else entirely, to fill the cache", add_bos=True),
                   SamplingParams(), 4, ignore_eos=True))       # rows that the restore must replace
    n = len(saved_ids) - 2                                       # a prefix of the saved block
    b.restore_kv(saved_ids[:n], data, rows=len(saved_ids))
    assert b.cached_ids == saved_ids[:n]
    r0 = gpu.counters["plan_runs"]
    got = run(b.generate(later, SamplingParams(), 12, ignore_eos=True))
    runs = gpu.counters["plan_runs"] - r0
    assert runs == -(-(len(later) - n) // b.prefill_rows) + 11 + got.counters["discarded_steps"]

    fresh = load(gpu, path, kv_cache=kv)
    want = run(fresh.generate(later, SamplingParams(), 12, ignore_eos=True))
    assert got.ids == want.ids and got.text == want.text
    for e in (b, fresh):
        e.close()


def test_restore_refuses_what_does_not_fit(gpu, tiny_model):
    path = tiny_model(arch="bitnet", fmt="tq2_0", seed=3)
    eng = load(gpu, path, kv_cache="f16")
    ids = eng.tokenizer.encode("Hello there", add_bos=True)
    run(eng.generate(ids, SamplingParams(), 3, ignore_eos=True))
    data = run(eng.export_kv())
    rows = len(eng.cached_ids)
    with pytest.raises(EngineError, match="bytes for"):
        eng.restore_kv(eng.cached_ids, data[:-4])                 # short by one word
    with pytest.raises(ContextError, match="saved block"):
        eng.restore_kv(eng.cached_ids + [1], data, rows=rows)     # more tokens than positions saved
    with pytest.raises(ContextError, match="positions asked"):
        run(eng.export_kv(rows + 1))
    f32 = load(gpu, path, kv_cache="f32")
    with pytest.raises(EngineError, match=r"\(f32\) takes"):      # another KV type's bytes
        f32.restore_kv(ids, data, rows=rows)
    assert f32.cached_ids == []
    for e in (eng, f32):
        e.close()
