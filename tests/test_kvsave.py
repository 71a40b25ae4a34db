"""Saving and restoring the KV cache (Engine.export_kv / restore_kv; the browser keeps the bytes in
OPFS: web/kvstore.mjs, tests/e2e/test_kvsave.py): a restored prefix then a greedy reply equals the
reply computed from scratch, token for token, and only the tokens after the prefix are run."""
from __future__ import annotations

import json

import pytest

from bitweb.engine import Engine, EngineError
from bitweb.generation import ContextError, common_prefix
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


class Store:
    """web/kvstore.mjs's hooks as bitweb.webapp calls them, in memory: entries [(ids, data)]."""

    def __init__(self):
        self.entries, self.dropped, self.asked = [], [], []

    async def find(self, eid, ids_json, have):
        from types import SimpleNamespace
        ids = json.loads(ids_json)
        self.asked.append((len(ids), have))
        best = max(((common_prefix(s, ids), s, d) for s, d in self.entries), default=(0, None, None), key=lambda t: t[0])
        if best[0] <= have:
            return None
        return SimpleNamespace(n=best[0], rows=len(best[1]), data=best[2], name=f"entry{len(best[1])}")

    async def save(self, eid, ids_json, data, prompt):
        self.entries.append((json.loads(ids_json), bytes(data)))
        return f"entry{len(self.entries[-1][0])}"

    async def drop(self, name):
        self.dropped.append(name)


def test_the_worker_restores_a_saved_prefix_and_saves_after_each_reply(gpu, tiny_model):
    """bitweb.webapp with the store's hooks (save_kv after each reply, as the worker calls it): a new WebApp and engine (a reloaded page) restores the
    conversation's saved cache (cached_tokens) and replies as the page that kept it on the GPU; a
    saved block the engine refuses is dropped and the reply is the same."""
    from bitweb.completions import chat_format
    from bitweb.webapp import Slot, WebApp
    path = tiny_model(arch="bitnet", fmt="tq2_0", seed=3)

    def eng_of(app):
        return app.engines[1].eng

    def page(store):
        app = WebApp(lambda m: None)
        app.set_kv_store(store)
        eng = load(gpu, path)
        app.engines[1] = Slot(eng, {"name": "tiny"}, chat_format(eng))
        return app, eng

    def ask(app, messages):
        n = len(app.kv_store.entries)
        out = json.loads(run(app.generate(7, 1, json.dumps({"messages": messages, "max_tokens": 6}))))
        assert "error" not in out, out
        assert len(app.kv_store.entries) == n            # the reply comes first; the worker then saves
        saved = json.loads(run(app.save_kv(1)))
        assert saved["saved"] == f"entry{len(eng_of(app).cached_ids)}" and len(app.kv_store.entries) == n + 1, saved
        assert json.loads(run(app.save_kv(1)))["saved"] is None          # once
        ask.restored = out["timing"]["restored_tokens"]
        return out["text"], out["usage"]["prompt_tokens"], out["timing"]["cached_tokens"]

    first = [{"role": "user", "content": "Hello there"}]
    store = Store()
    app, eng = page(store)
    a1 = ask(app, first)
    assert len(store.entries) == 1 and store.entries[0][0] == eng.cached_ids
    turn2 = first + [{"role": "assistant", "content": a1[0]}, {"role": "user", "content": "And again?"}]
    kept = ask(app, turn2)                          # the page kept the cache on the GPU: nothing longer saved
    assert ask.restored == 0 and kept[2] > 0 and store.asked == [(a1[1] - 1, 0), (kept[1] - 1, kept[2])] and len(store.entries) == 2
    eng.close()

    reloaded, eng2 = page(Store())
    reloaded.kv_store.entries = store.entries[:1]
    assert ask(reloaded, turn2) == kept            # restored: the same reply, the same cached_tokens
    assert ask.restored == kept[2]
    eng2.close()

    bad = Store()
    bad.entries = [(store.entries[0][0], store.entries[0][1][:-4])]      # a block one word short
    broken, eng3 = page(bad)
    text, prompt, cached = ask(broken, turn2)
    assert (text, prompt, cached) == (kept[0], kept[1], 0) and bad.dropped == [f"entry{len(store.entries[0][0])}"]
    eng3.close()
