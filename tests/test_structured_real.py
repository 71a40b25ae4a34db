"""Structured output and a tool-call round trip on the real SmolLM2-135M-Instruct file
(build/assets/SmolLM2-135M-Instruct.Q4_1.gguf, fetched by tools/setup.sh --test: Q4_1 linears,
Q8_0 embeddings), through the library's Python side (webapp.WebApp) on the GPU engine natively.
A trained model, its own vocabulary and chat template: every JSON reply parses and validates against
its schema (jsonschema, Draft 2020-12), a tool call's arguments against the tool's parameters, and
the tool's result goes back through the template. Lean: a few schemas, short replies. The file must
be readable and runnable (Q4_1 in bitweb.formats and the kernels): a missing file or format fails
here, it does not skip."""
from __future__ import annotations

import json

import pytest

from bitweb import structured, webapp
from tests.conftest import run
from tests.test_grammar_schema import SCHEMAS, validate
from tests.test_structured import SMOLLM2, WEATHER, ask, valid_call

NAMES = ["person", "scalars", "enum-const"]


@pytest.fixture(scope="module")
def app(gpu):
    from bitweb.engine import Engine
    from bitweb.gguf import FileSource, open_gguf
    assert SMOLLM2.exists(), f"missing {SMOLLM2}: run tools/setup.sh --test"
    posted = []
    a = webapp.WebApp(lambda m: posted.append(json.loads(m)))
    a.posted = posted
    with FileSource(SMOLLM2) as src:
        eng = run(Engine.load(gpu, open_gguf(SMOLLM2), src, max_context=512))
    a.engines[1] = webapp.Slot(eng, {}, webapp.chat_format(eng))
    yield a
    eng.close()


@pytest.mark.parametrize("name", NAMES)
def test_json_replies_of_the_real_model_validate(app, name):
    """Greedy and sampled at a high temperature: the reply is JSON of the schema, whole (finish stop)."""
    fmt = {"type": "json_schema", "json_schema": {"name": name.replace("-", "_"), "schema": SCHEMAS[name]}}
    for temp, seed in ((0.0, 0), (1.3, 5)):
        out, posted = ask(app, 1, messages=[{"role": "user", "content": "Describe a person as JSON."}],
                          response_format=fmt, temperature=temp, seed=seed, max_tokens=40)
        assert out["finish_reason"] == "stop", out
        validate(SCHEMAS[name], out["text"])
        assert "".join(m["text"] for m in posted if m["type"] == "text") == out["text"]


def test_json_object_of_the_real_model(app):
    out, _ = ask(app, 1, messages=[{"role": "user", "content": "Give me a JSON object about Paris."}],
                 response_format={"type": "json_object"}, temperature=0.8, seed=2, max_tokens=40)
    assert out["finish_reason"] == "stop", out
    assert isinstance(json.loads(out["text"]), dict)


def test_tool_call_round_trip_on_the_real_model(app):
    """SmolLM2's template has no tools section: the generic format. The call validates, its result
    goes back as a <tool_response>, and the answer after it is text."""
    assert structured.dialect(app.engines[1].fmt) == "generic"
    user = [{"role": "user", "content": "What is the weather in Paris?"}]
    out, _ = ask(app, 1, messages=user, tools=[WEATHER], tool_choice="required", temperature=0.0, max_tokens=40)
    assert out["finish_reason"] == "tool_calls" and out["text"] == "", out
    assert [valid_call(c) for c in out["tool_calls"]] == ["get_weather"] * len(out["tool_calls"])
    convo = user + [{"role": "assistant", "content": None, "tool_calls": out["tool_calls"]}] + [
        {"role": "tool", "tool_call_id": c["id"], "content": '{"celsius": 21}'} for c in out["tool_calls"]]
    prompt = app.engines[1].eng.tokenizer.decode(json.loads(app.tokenize(1, json.dumps(
        {"messages": convo, "tools": [WEATHER]})))["ids"])
    assert '<tool_response>\n{"celsius": 21}\n</tool_response>' in prompt
    answer, posted = ask(app, 1, messages=convo, tools=[WEATHER], tool_choice="none", temperature=0.0,
                         max_tokens=16)
    assert "tool_calls" not in answer and answer["finish_reason"] in ("stop", "length")
    assert answer["text"] and not answer["text"].startswith("<tool_call>")
    assert "".join(m["text"] for m in posted if m["type"] == "text") == answer["text"]
