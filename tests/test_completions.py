"""bitweb.completions, the chat-completion semantics the worker and the CLI share, in plain Python:
a reply streamed token by token with stop strings held back and cut, tool calls apart, the think
block a prompt opened, the finish reasons, the usage; the request's budget; the load options'
one Python check as the worker applies it (before any GPU work)."""
from __future__ import annotations

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
