"""`python -m bitweb generate`: JSON shape, streaming, chat format, errors, and the
native (GPU) backend giving the numpy backend's tokens at the CLI level."""
from __future__ import annotations

import json

import pytest

from bitweb import commands as cli
from bitweb.chat import chat_ids
from bitweb.gguf import open_gguf
from bitweb.numpy_model import NumpyModel
from bitweb.sampling import SamplingParams
from tests.conftest import run

KEYS = ["prompt_ids", "ids", "text", "stop_reason", "prefill_ms", "decode_ms_per_token",
        "dispatches_per_token", "host_calls_per_token"]


@pytest.fixture(scope="module")
def model(tiny_model):
    return tiny_model(seed=4)


def gen(capsys, *argv):
    rc = cli.main(["generate", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_json_output_is_exactly_the_contract(model, capsys):
    rc, out, _ = gen(capsys, model, "--backend", "numpy", "--prompt", "Hello", "--max-tokens", "10",
                     "--ignore-eos", "--json")
    assert rc == 0
    obj = json.loads(out)
    assert list(obj) == KEYS
    ref = NumpyModel.from_gguf(open_gguf(model), "a8")
    want = ref.generate(ref.tokenizer.encode("Hello"), SamplingParams(), 10, ignore_eos=True)
    assert obj["prompt_ids"] == want.prompt_ids and obj["ids"] == want.ids and len(obj["ids"]) == 10
    assert obj["text"] == ref.tokenizer.decode(want.ids, skip_special=True) and obj["stop_reason"] == "max_tokens"


def test_streams_text_and_stats(model, capsys):
    rc, out, err = gen(capsys, model, "--backend", "numpy", "--activations", "f32", "--prompt", "Hi",
                       "--max-tokens", "12", "--temperature", "0.8", "--top-k", "30", "--seed", "5", "--stats")
    assert rc == 0 and "decode" in err and "tokens/s" in err, err
    rc2, out2, _ = gen(capsys, model, "--backend", "numpy", "--activations", "f32", "--prompt", "Hi",
                       "--max-tokens", "12", "--temperature", "0.8", "--top-k", "30", "--seed", "5", "--json")
    assert out == json.loads(out2)["text"] + "\n"           # streamed text == the final text


def test_chat_prompt_uses_the_chat_format(model, capsys):
    rc, out, _ = gen(capsys, model, "--backend", "numpy", "--prompt", "What is 2+2?", "--chat",
                     "--system", "Be brief.", "--max-tokens", "4", "--json")
    ref = NumpyModel.from_gguf(open_gguf(model), "a8")
    want = chat_ids(ref.tokenizer, [{"role": "system", "content": "Be brief."},
                                    {"role": "user", "content": "What is 2+2?"}])
    assert rc == 0 and json.loads(out)["prompt_ids"] == want


def test_errors_are_one_clear_line(model, capsys, tmp_path):
    rc, _, err = gen(capsys, str(tmp_path / "nope.gguf"), "--backend", "numpy", "--prompt", "x")
    assert rc == 1 and "nope.gguf" in err
    rc, _, err = gen(capsys, model, "--backend", "numpy", "--prompt", "x" * 40, "--max-context", "16")
    assert rc == 1 and "ContextError" in err and "context holds 16" in err
    rc, _, err = gen(capsys, model, "--backend", "numpy", "--prompt", "x", "--top-p", "0")
    assert rc == 1 and "top_p" in err


@pytest.mark.parametrize("act", ["a8", "f32"])
def test_native_equals_numpy_64_tokens(model, capsys, gpu, act):
    args = [model, "--prompt", "The engine and the reference", "--max-tokens", "64", "--ignore-eos",
            "--temperature", "0", "--activations", act, "--json"]
    rc, out, err = gen(capsys, *args, "--backend", "numpy")
    assert rc == 0, err
    rc2, out2, err2 = gen(capsys, *args, "--backend", "native")
    assert rc2 == 0, err2
    a, b = json.loads(out), json.loads(out2)
    # greedy native decode one step ahead: write params, encode, submit, read (engine docstring)
    assert len(a["ids"]) == 64 and b["dispatches_per_token"] > 0 and b["host_calls_per_token"] == 4
    assert list(b) == KEYS + ["load"] and b["load"]["pipelines"] >= 10 and b["load"]["ms"] > 0
    assert {"upload", "compile", "compile_prefill", "plans"} == set(b["load"]["stages_ms"])
    if act == "a8" and a["ids"] != b["ids"]:          # only an A8 rounding tie may explain this
        from tests.test_engine import assert_same_greedy
        from bitweb.engine import Engine
        from bitweb.gguf import FileSource
        with FileSource(model) as src:
            eng = run(Engine.load(gpu, open_gguf(model), src, activations=act))
        assert_same_greedy(eng, NumpyModel.from_gguf(open_gguf(model), act), a["prompt_ids"], act)
    else:
        assert a["ids"] == b["ids"] and a["text"] == b["text"]


def test_native_stats_show_replayed_dispatches(model, capsys, gpu):
    import re
    rc, out, err = gen(capsys, model, "--backend", "native", "--prompt", "Hi", "--max-tokens", "8",
                       "--ignore-eos", "--stats")
    assert rc == 0, err
    replayed = int(re.search(r"replayed \(plan\) dispatches (\d+)", err).group(1))
    reencoded = int(re.search(r"re-encoded dispatches (\d+)", err).group(1))
    per_token = float(re.search(r"per decoded token: ([\d.]+) dispatches", err).group(1))
    assert reencoded == 0 and replayed == 7 * per_token and per_token == 13      # 1 + 5 x 2 blocks + 1 + 1
    assert "host calls" in err and out.strip()


# ---------------------------------------------------------------- --json-schema / --grammar
@pytest.mark.parametrize("backend", ["numpy", "native"])
def test_json_schema_output_always_parses(model, capsys, tmp_path, backend):
    """--json-schema on random weights (only the constraint makes it JSON): greedy and sampled, a few
    schemas; the printed text (streamed and --json) validates against the schema."""
    import jsonschema
    from tests.test_grammar_schema import SCHEMAS
    for name in ("person", "nested", "one-of") if backend == "numpy" else ("nested",):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(SCHEMAS[name]))
        for extra in ([], ["--temperature", "1.2", "--seed", "7"]):
            rc, out, err = gen(capsys, model, "--backend", backend, "--prompt", "JSON:", "--max-tokens", "90",
                               "--json-schema", str(path), *extra)
            assert rc == 0, (name, extra, out, err)
            jsonschema.Draft202012Validator(SCHEMAS[name]).validate(json.loads(out))
    (tmp_path / "person.json").write_text(json.dumps(SCHEMAS["person"]))
    rc, out, _ = gen(capsys, model, "--backend", backend, "--prompt", "x", "--chat", "--max-tokens", "60",
                     "--json-schema", str(tmp_path / "person.json"), "--json")
    assert rc == 0 and json.loads(out)["stop_reason"] in ("eos", "eot", "max_tokens")
    jsonschema.Draft202012Validator(SCHEMAS["person"]).validate(json.loads(json.loads(out)["text"]))


def test_gbnf_grammar_and_constraint_errors(model, capsys, tmp_path):
    from bitweb.grammar import Grammar
    from tests.test_grammar_gbnf import GRAMMARS
    g = GRAMMARS / "arithmetic.gbnf"
    rc, out, _ = gen(capsys, model, "--backend", "numpy", "--prompt", "1", "--max-tokens", "40", "--grammar", str(g),
                     "--temperature", "1", "--json")
    assert rc == 0 and Grammar(g.read_text()).matches(json.loads(out)["text"])
    bad = tmp_path / "bad.json"
    bad.write_text('{"type": "string", "format": "email"}')
    rc, _, err = gen(capsys, model, "--backend", "numpy", "--prompt", "x", "--json-schema", str(bad))
    assert rc == 1 and "bad.json" in err and "format" in err
    with pytest.raises(SystemExit):
        gen(capsys, model, "--backend", "numpy", "--prompt", "x", "--json-schema", str(bad), "--grammar", str(g))
    assert "not allowed with" in capsys.readouterr().err
    rc, _, err = gen(capsys, model, "--backend", "numpy", "--prompt", "x", "--grammar", str(g), "--ignore-eos")
    assert rc == 1 and "--ignore-eos" in err
    # too few tokens for any complete output: what there is, a line on stderr, status 1
    person = tmp_path / "p.json"
    person.write_text('{"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}')
    rc, out, err = gen(capsys, model, "--backend", "numpy", "--prompt", "x", "--max-tokens", "3",
                       "--json-schema", str(person))
    assert rc == 1 and "not complete" in err and out.startswith("{")
