"""Structured output on the GPU engine (native wgpu-py; lavapipe in CI): the grammar's mask applied
by the sampler on the GPU (sampling.wgsl MASK), against the numpy model's host path under the same
constraint, token for token; every output parses and validates against its schema (jsonschema,
Draft 2020-12), on random-weight models, where only the constraint makes the output JSON."""
from __future__ import annotations

import json

import jsonschema
import pytest

from bitweb.engine import Engine
from bitweb.gguf import FileSource, open_gguf
from bitweb.grammar import Grammar, Vocabulary
from bitweb.numpy_model import NumpyModel
from bitweb.sampling import SamplingParams
from tests.conftest import run
from tests.test_grammar_schema import SCHEMAS

NAMES = ["person", "people", "scalars", "enum-const", "any-of", "one-of", "pattern", "recursive", "free"]
RUNS = [SamplingParams(), SamplingParams(temperature=0.8, seed=1), SamplingParams(temperature=2.0, top_k=40, seed=2),
        SamplingParams(temperature=1.0, top_p=0.9, repeat_penalty=1.3, seed=3)]


@pytest.fixture(scope="module")
def pair(gpu, tiny_model):
    """(GPU engine, numpy model, Vocabulary) of one tiny random-weight model, both in f32 (no A8 or
    f16-cache rounding ties between them: tokens must be identical)."""
    path = tiny_model(arch="bitnet", fmt="tq2_0", seed=5)
    with FileSource(path) as src:
        eng = run(Engine.load(gpu, open_gguf(path), src, activations="f32", kv_cache="f32"))
    ref = NumpyModel.from_gguf(open_gguf(path), "f32", kv_cache="f32")
    yield eng, ref, Vocabulary(eng.tokenizer)
    eng.close()


def validate(schema, text):
    value = json.loads(text)
    jsonschema.Draft202012Validator(schema).validate(value)
    return value


@pytest.mark.parametrize("name", NAMES)
def test_gpu_constrained_output_validates_and_equals_numpy(pair, name):
    eng, ref, V = pair
    schema = SCHEMAS[name]
    gr = Grammar.from_json_schema(schema)
    prompt = eng.tokenizer.encode("JSON:")
    for p in RUNS:
        got = run(eng.generate(prompt, p, 120, constraint=gr.constraint(V)))
        want = ref.generate(prompt, p, 120, constraint=gr.constraint(V))
        assert got.ids == want.ids, (name, p)
        assert got.stop_reason in ("eos", "eot", "max_tokens"), got.stop_reason
        validate(schema, got.text)


def test_greedy_reads_four_bytes_and_uploads_the_mask_when_it_changes(pair):
    """Greedy under a grammar: one 4-byte read per token (the mask is applied before the argmax on
    the GPU); the mask is written only when the constraint's key changes."""
    eng, ref, V = pair
    schema = {"type": "object", "properties": {"s": {"type": "string"}}, "required": ["s"]}
    gr = Grammar.from_json_schema(schema)
    c = gr.constraint(V)
    keys = []
    write = eng._write_mask

    def spy(remaining):
        write(remaining)
        keys.append(eng._mask_key)
    eng._write_mask = spy
    try:
        res = run(eng.generate(eng.tokenizer.encode("JSON:"), SamplingParams(), 120, constraint=c))
    finally:
        del eng._write_mask
    validate(schema, res.text)
    n = res.counters["reads"]
    assert n == len(res.ids) - 1 + (res.stop_reason in ("eos", "eot")) and res.counters["read_bytes"] == 4 * n
    changes = sum(1 for a, b in zip(keys, keys[1:]) if a != b)     # keys[0]: before the prefill
    mask_bytes = 4 * ((eng.cfg.n_vocab + 31) // 32)
    params_bytes = res.counters["writes"] - changes
    assert 0 < changes < len(keys) - 1                    # a string's inside repeats its mask
    assert res.counters["write_bytes"] == changes * mask_bytes + params_bytes * 32


def test_llama_cpp_json_grammar_on_the_gpu(pair):
    """llama.cpp's json.gbnf constrains the GPU sampler (greedy and sampled); the prompt one token
    long goes through the decode plan's sampler, a longer one through the prefill plan's."""
    from tests.test_grammar_gbnf import GRAMMARS
    eng, ref, V = pair
    gr = Grammar((GRAMMARS / "json.gbnf").read_text(encoding="utf-8"))
    for prompt in ([eng.tokenizer.bos_id or 1], eng.tokenizer.encode("A JSON object:")):
        for p in RUNS[:2]:
            c = gr.constraint(V)
            got = run(eng.generate(prompt, p, 90, constraint=c))
            assert got.ids == ref.generate(prompt, p, 90, constraint=gr.constraint(V)).ids
            assert c.accepts() and gr.matches(got.text) and isinstance(json.loads(got.text), dict), got.text


def test_constraint_arguments_are_checked(pair):
    eng, _, V = pair
    gr = Grammar.from_json_schema(SCHEMAS["person"])
    ids = eng.tokenizer.encode("x")
    with pytest.raises(ValueError, match="ignore_eos"):
        run(eng.generate(ids, SamplingParams(), 8, ignore_eos=True, constraint=gr.constraint(V)))
    with pytest.raises(ValueError, match="stop ids"):
        run(eng.generate(ids, SamplingParams(), 8, constraint=gr.constraint(V, stop_ids=[5])))
    # the engine is unchanged afterwards: an unconstrained greedy run equals the numpy model's
    assert run(eng.generate(ids, SamplingParams(), 16, ignore_eos=True)).ids == \
        pair[1].generate(ids, SamplingParams(), 16, ignore_eos=True).ids
