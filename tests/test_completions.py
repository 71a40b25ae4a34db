"""bitweb.completions, the chat-completion semantics the worker and the CLI share, in plain Python:
a reply streamed token by token with stop strings held back and cut, tool calls apart, the think
block a prompt opened, the finish reasons, the usage; the request's budget; the load options'
one Python check as the worker applies it (before any GPU work)."""
from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

from bitweb import completions, structured, webapp
from tests.test_webapp import drive


def result(ids, stop_reason, prefill_ms=3.0):
    return SimpleNamespace(ids=ids, stop_reason=stop_reason, prefill_ms=prefill_ms, decode_ms_per_token=2.0,
                           dispatches_per_token=13, host_calls_per_token=4)


def stream(pieces, **kw):
    """Feed `pieces` (one token each) to a Completion; (texts passed to on_text, the Completion)."""
    sent = []
    c = completions.Completion(on_text=sent.append, **kw)
    for i, p in enumerate(pieces):
        if c.stopped():
            break
        c.on_token(i, p)
    return sent, c


def test_text_streams_as_decoded_without_stops():
    sent, c = stream(["Hel", "lo", " there"])
    assert sent == ["Hel", "lo", " there"] and c.tokens == 3 and not c.stopped()
    out = c.result(result([1, 2, 3], "eos"), prompt_tokens=5, context=64)
    assert out == {"text": "Hello there", "finish_reason": "stop", "context": 64,
                   "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}}
    assert list(out) == ["text", "finish_reason", "context", "usage"]        # (the order the page got before)


def test_a_stop_string_is_held_back_then_cut():
    """Text that may start a stop string waits; once the stop string is whole the reply ends before
    it, and none of it was ever sent."""
    sent, c = stream(["The answer", " is 4.", "\n\n", "Next", " question"], stops=["\n\nNext"])
    assert c.stopped() and "".join(sent) == "The answer is 4." and c.tokens == 4
    assert sent == ["The answer", " is 4."]                # "\n\n" held back: it could start the stop string
    out = c.result(result([0] * 4, "stopped"), prompt_tokens=2)
    assert out["text"] == "The answer is 4." and out["finish_reason"] == "stop"


def test_held_text_that_is_not_a_stop_string_goes_out():
    sent, c = stream(["a\n", "\nb"], stops=["\n\nX"])
    assert sent == ["a", "\n\nb"]                        # "\n" may start "\n\nX"; "\nb" shows it does not
    out = c.result(result([1, 2], "max_tokens"), prompt_tokens=1)
    assert "".join(sent) == out["text"] == "a\n\nb" and out["finish_reason"] == "length"


@pytest.mark.parametrize("reason,finish", [("eos", "stop"), ("eot", "stop"), ("max_tokens", "length"),
                                           ("context", "length"), ("stopped", "abort")])
def test_finish_reasons(reason, finish):
    _, c = stream(["x"])
    assert c.result(result([1], reason), prompt_tokens=1)["finish_reason"] == finish


def test_a_complete_constrained_reply_cut_by_its_budget_is_stop():
    done = SimpleNamespace(accepts=lambda: True)
    _, c = stream(['{"a": 1}'], constraint=done)
    assert c.result(result([1], "max_tokens"), prompt_tokens=1)["finish_reason"] == "stop"
    _, c = stream(['{"a": '], constraint=SimpleNamespace(accepts=lambda: False))
    assert c.result(result([1], "max_tokens"), prompt_tokens=1)["finish_reason"] == "length"


def test_the_think_block_the_prompt_opened_comes_first():
    sent, c = stream(["hmm", "\n</think>\n\nYes"], opens_thinking=True)
    assert sent[0] == completions.THINK_OPEN
    assert c.result(result([1, 2], "eos"), prompt_tokens=1)["text"] == "<think>\nhmm\n</think>\n\nYes"


def test_tool_calls_stream_apart_from_content():
    spec = structured.Spec(tools=structured.check_tools([{"type": "function", "function": {"name": "f"}}]),
                           choice="required")
    events = []
    sent, c = stream(['<tool_call>\n{"name": "f", ', '"arguments": {"x": 1}}\n</tool_call>'],
                     reply=structured.Reply(spec, "hermes"), on_tool_call=events.append)
    out = c.result(result([1, 2], "eos"), prompt_tokens=1)
    assert sent == [] and out["finish_reason"] == "tool_calls"
    assert out["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"x": 1}'}
    assert events[0]["name"] == "f" and "".join(e.get("arguments", "") for e in events) == '{"x": 1}'


def test_timing_from_the_result():
    _, c = stream(["a", "b", "c"])
    c.result(result([1, 2, 3], "eos", prefill_ms=500.0), prompt_tokens=10)
    t = c.timing(result([1, 2, 3], "eos", prefill_ms=500.0), 10, 4, "prefill", tokens_after_stop=1)
    assert (t["prefill_tokens"], t["cached_tokens"], t["prefill_tok_s"], t["tokens_after_stop"]) == (6, 4, 12.0, 1)
    assert t["prefill_plan"] == "prefill" and t["stop_reason"] == "eos" and t["ttft_ms"] is not None


def test_the_budget_is_what_the_context_leaves():
    req = completions.Request([], None, None, [], structured.Spec(), None)
    assert req.budget([1] * 10, 16) == 6
    req.max_tokens = 3
    assert req.budget([1] * 10, 16) == 3
    with pytest.raises(completions.AppError) as e:
        req.budget([1] * 16, 16)
    assert e.value.kind == "context" and e.value.extra == {"prompt_tokens": 16, "context": 16}


def test_thinking_is_off_for_a_constrained_reply():
    fmt = SimpleNamespace(has_thinking=True)
    assert completions.thinking_for(fmt, True, constrained=True) is False
    assert completions.thinking_for(fmt, None, constrained=False) is None
    assert completions.thinking_for(SimpleNamespace(has_thinking=False), True, constrained=True) is True


@pytest.mark.parametrize("opts,field", [({"kvCache": "f8"}, "kvCache"), ({"context": 1}, "context"),
                                        ({"capLimits": {"maxFoo": 1}}, "capLimits.maxFoo"),
                                        ({"kv_cache": "f16"}, "kv_cache")])
def test_the_worker_checks_load_options_by_the_table(opts, field):
    """WebApp.load refuses a bad option (by the library's names; a Python name is not one) with a
    settings error naming it, before the header or the device is asked for."""
    app = webapp.WebApp(lambda m: None)
    err = json.loads(drive(app.load(1, None, "m.gguf", json.dumps(opts))))["error"]
    assert err["kind"] == "settings" and err["field"] == field and field in err["message"], err


# ---------------------------------------------------------------- speculative decoding (create()'s speculative)
def test_speculative_is_checked_by_field():
    assert completions.checked_speculative(None) is None
    assert completions.checked_speculative({"mode": "lookup"}) == "lookup"
    assert completions.checked_speculative({"mode": "draft"}) == "draft"
    for bad, field, words in [("lookup", "speculative", 'must be {mode: "lookup" or "draft"} or null (got "lookup")'),
                              ([{"mode": "lookup"}], "speculative", "must be {mode"),
                              ({}, "speculative.mode", 'must be "lookup" or "draft" (got null)'),
                              ({"mode": "fast"}, "speculative.mode", 'must be "lookup" or "draft" (got "fast")'),
                              ({"mode": "lookup", "k": 4}, "speculative.k", "not a speculative option")]:
        with pytest.raises(completions.AppError) as e:
            completions.checked_speculative(bad)
        assert e.value.kind == "settings" and e.value.extra == {"field": field}, bad
        assert str(e.value).startswith(field + ": ") and words in str(e.value), str(e.value)


def test_the_request_carries_the_speculative_mode():
    fmt = SimpleNamespace(has_thinking=False)
    msgs = [{"role": "user", "content": "hi"}]
    assert completions.Request.parse({"messages": msgs}, fmt).speculative is None
    assert completions.Request.parse({"messages": msgs, "speculative": {"mode": "lookup"}}, fmt).speculative == "lookup"
    with pytest.raises(completions.AppError, match="speculative.mode"):
        completions.Request.parse({"messages": msgs, "speculative": {"mode": "fast"}}, fmt)


def test_the_usage_reports_what_was_drafted():
    _, c = stream(["a", "b"])
    plain = c.result(result([1, 2], "eos"), prompt_tokens=3)
    assert "speculative" not in plain["usage"]
    res = SimpleNamespace(**vars(result([1, 2, 3], "eos")), speculative="lookup", drafted=7, accepted=5)
    _, c = stream(["a", "b", "c"])
    assert c.result(res, prompt_tokens=3)["usage"] == {
        "prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6,
        "speculative": {"mode": "lookup", "drafted": 7, "accepted": 5}}


class FakeEngine:
    """What WebApp.generate uses of an Engine; generate() records its keyword arguments and whether
    the prefill kernels were compiled when it was called."""

    def __init__(self, compiled=None):
        self.n_ctx, self.cached_ids, self.prefill_path, self.calls = 64, [], "prefill", []
        self.prefill_compiled = compiled

    @property
    def prefill_ready(self):
        return self.prefill_compiled is None or self.prefill_compiled.done()

    async def generate(self, ids, params, max_tokens, on_token=None, stop_ids=None, should_stop=None, **kw):
        self.calls.append((kw, self.prefill_ready))
        on_token(5, "hi")
        mode = kw.get("speculative")
        drafting = {"speculative": mode if isinstance(mode, str) else "draft", "drafted": 4, "accepted": 3} if mode else {}
        return SimpleNamespace(**vars(result([5], "eos")), **drafting)


FMT = SimpleNamespace(kind="bitnet", has_thinking=False, stop_ids={0}, ids=lambda msgs, enable_thinking=None, tools=None: [1, 2, 3],
                      prompt_opens_thinking=lambda thinking: False)


async def generate_with(eng, request: dict, app=None, eid=1) -> dict:
    """WebApp.generate of a chat of one message and `request`'s other fields, on `eng` (a new
    WebApp's engine 1), or on engine eid of `app`."""
    if app is None:
        app = webapp.WebApp(lambda m: None)
        app.engines[eid] = webapp.Slot(eng, {"name": "fake"}, FMT)
    body = {"messages": [{"role": "user", "content": "hi"}], **request}
    return json.loads(await app.generate(7, eid, json.dumps(body)))


def test_the_worker_drafts_when_asked_after_the_prefill_kernels():
    """A speculative request reaches Engine.generate as speculative="lookup" once the prefill kernels
    (left compiling by the load) are done; its usage says what was drafted; a plain one drafts nothing
    and waits for nothing; a bad one is a settings error before the engine is asked."""
    async def compiling():
        return None

    async def main():
        plain, lookup, bad = FakeEngine(), FakeEngine(asyncio.ensure_future(compiling())), FakeEngine()
        assert not lookup.prefill_ready                 # (the task has not run yet)
        got = [await generate_with(plain, {}),
               await generate_with(lookup, {"speculative": {"mode": "lookup"}}),
               await generate_with(bad, {"speculative": {"mode": "fast"}})]
        return (plain, lookup, bad), got
    (plain, lookup, bad), (p, s, err) = asyncio.run(main())
    assert plain.calls == [({}, True)] and "speculative" not in p["usage"] and p["text"] == "hi"
    assert lookup.calls == [({"speculative": "lookup"}, True)], lookup.calls
    assert s["usage"]["speculative"] == {"mode": "lookup", "drafted": 4, "accepted": 3} and s["text"] == "hi"
    assert err["error"]["kind"] == "settings" and err["error"]["field"] == "speculative.mode" and bad.calls == []


def test_a_draft_model_drafts_for_the_engine_it_was_attached_to():
    """WebApp.set_draft (the library's load(source, {draft})) attaches an engine of the same device and
    vocabulary as another's draft model, else a settings error naming `draft`; speculative "draft"
    then hands that Engine to Engine.generate; without one (never attached, or unloaded since) it is a
    settings error naming speculative.mode."""
    dev, words = SimpleNamespace(lost=None), ["a", "b", "c"]
    target, draft, alien, elsewhere = FakeEngine(), FakeEngine(), FakeEngine(), FakeEngine()
    for e, toks, d in ((target, words, dev), (draft, words, dev), (alien, ["a", "b", "x"], dev), (elsewhere, words, object())):
        e.dev, e.cfg, e.tokenizer = d, SimpleNamespace(n_vocab=3), SimpleNamespace(tokens=toks)
        e.close = lambda: None
    app = webapp.WebApp(lambda m: None)
    for eid, e in enumerate((target, draft, alien, elsewhere), 1):
        app.engines[eid] = webapp.Slot(e, {"name": f"m{eid}"}, FMT)
    ask = {"speculative": {"mode": "draft"}}

    async def main():
        out = {"before": await generate_with(None, ask, app)}
        out["refused"] = [json.loads(app.set_draft(1, other)) for other in (3, 4, 1)]
        out["set"] = json.loads(app.set_draft(1, 2))
        out["drafted"] = await generate_with(None, ask, app)
        app.unload(2)
        out["after"] = await generate_with(None, ask, app)
        return out
    out = asyncio.run(main())
    for key in ("before", "after"):
        err = out[key]["error"]
        assert err["kind"] == "settings" and err["field"] == "speculative.mode" and "draft model" in err["message"], err
    for err, words_ in zip(out["refused"], ("vocabulary", "GPU device", "itself")):
        assert err["error"]["kind"] == "settings" and err["error"]["field"] == "draft", err
        assert err["error"]["message"].startswith("draft: ") and words_ in err["error"]["message"], err
    assert out["set"] is None
    assert len(target.calls) == 1 and target.calls[0][0]["speculative"] is draft
    assert out["drafted"]["usage"]["speculative"] == {"mode": "draft", "drafted": 4, "accepted": 3}
