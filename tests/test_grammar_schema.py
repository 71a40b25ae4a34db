"""JSON Schema -> grammar (bitweb.grammar.schema, .regex): texts each schema's grammar accepts and
rejects; integer ranges and patterns against Python's own checks; unsupported keywords named; and
constrained generation with random-weight models (the adversarial case: only the constraint makes
the output JSON), many schemas x seeds x temperatures, every output parsed and validated with the
jsonschema package (Draft 2020-12)."""
import json
import random
import re

import jsonschema
import pytest

from bitweb.grammar import Grammar, SchemaError, schema_to_gbnf
from bitweb.grammar.schema import int_range
from bitweb.sampling import SamplingParams
from tests.grammar_assets import random_model

PERSON = {"type": "object", "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 12},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 150}},
          "required": ["name", "age"], "additionalProperties": False}

SCHEMAS = {
    "person": PERSON,
    "people": {"type": "array", "items": PERSON, "minItems": 1, "maxItems": 2},
    "scalars": {"type": "object", "properties": {"n": {"type": "number"}, "i": {"type": "integer"},
                                                 "b": {"type": "boolean"}, "z": {"type": "null"}},
                "required": ["n", "i", "b", "z"]},
    "optional": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"},
                                                  "c": {"enum": ["x", "y"]}}},
    "enum-const": {"type": "object", "properties": {"kind": {"enum": ["cat", "dog", 3, None, True]},
                                                    "v": {"const": {"k": [1, "two"]}}},
                   "required": ["kind", "v"]},
    "nested": {"type": "object", "properties": {"outer": {"type": "object", "properties": {
        "inner": {"type": "array", "items": {"type": "integer", "minimum": -5, "maximum": 5}, "maxItems": 4}},
        "required": ["inner"]}}, "required": ["outer"]},
    "any-of": {"type": "array", "items": {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 3},
                                                    {"type": "null"}]}, "maxItems": 3},
    "one-of": {"oneOf": [{"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}},
                          "required": ["kind", "x"]},
                         {"type": "object", "properties": {"kind": {"const": "b"}, "y": {"type": "boolean"}},
                          "required": ["kind", "y"]}]},
    "pattern": {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"},
                                                 "tag": {"type": "string", "pattern": "x+y"}},
                "required": ["code", "tag"]},
    "nullable": {"type": "object", "properties": {"s": {"type": ["string", "null"], "maxLength": 4},
                                                  "n": {"type": ["integer", "null"]}}, "required": ["s", "n"]},
    "extra-keys": {"type": "object", "properties": {"id": {"type": "integer", "maximum": 9}},
                   "required": ["id"], "additionalProperties": {"type": "boolean"}},
    "recursive": {"$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "integer", "minimum": 0, "maximum": 9},
        "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}}, "required": ["v", "next"]}},
        "$ref": "#/$defs/node"},
    "tuple": {"type": "array", "prefixItems": [{"type": "string", "format": "date"}, {"type": "boolean"}],
              "items": False, "minItems": 2},
    "free": {},
}


def validate(schema, text):
    value = json.loads(text)
    jsonschema.Draft202012Validator(schema).validate(value)
    return value


# ---------------------------------------------------------------- generation with random weights
@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_random_weights_generate_valid_json(name):
    model, V = random_model("bytes")
    schema = SCHEMAS[name]
    gr = Grammar.from_json_schema(schema)              # one Grammar: the runs share its mask caches
    prompt = model.tokenizer.encode("JSON:")
    runs = [(0.0, 0)] + [(t, s) for t in (0.8, 2.0) for s in (1, 2)]
    for temperature, seed in runs:
        r = model.generate(prompt, SamplingParams(temperature=temperature, seed=seed), max_tokens=160,
                           constraint=gr.constraint(V))
        assert r.stop_reason in ("eos", "eot", "max_tokens"), r.stop_reason
        validate(schema, r.text)


@pytest.mark.parametrize("name", ["person", "scalars", "one-of"])
def test_random_weights_on_smollm2_vocabulary(name):
    """The same with SmolLM2's real 49k vocabulary: tokens of many bytes that cross JSON syntax."""
    model, V = random_model("smollm2")
    schema = SCHEMAS[name]
    gr = Grammar.from_json_schema(schema)
    prompt = model.tokenizer.encode("JSON:")
    for temperature, seed in ((0.0, 0), (1.0, 3), (2.0, 4)):
        c = gr.constraint(V)
        params = SamplingParams(temperature=temperature, seed=seed, top_k=64)      # top-k: the host draw is slow
        r = model.generate(prompt, params, max_tokens=48, constraint=c)
        validate(schema, r.text)
        assert c.accepts()


def test_budget_is_what_completes_the_output():
    """Without the token budget, random weights run out of tokens mid-value (the mask alone does not
    end a string); with it (generate passes the tokens left) the same run ends complete."""
    model, V = random_model("smollm2")
    gr = Grammar.from_json_schema({"type": "object", "properties": {"s": {"type": "string"}}, "required": ["s"]})
    prompt = model.tokenizer.encode("JSON:")
    c = gr.constraint(V)
    c.ids = lambda remaining=None, _ids=c.ids: _ids(None)          # ignore the budget
    params = SamplingParams(temperature=1.0, seed=5, top_k=64)
    r = model.generate(prompt, params, max_tokens=24, constraint=c)
    assert r.stop_reason == "max_tokens" and not c.accepts()
    with pytest.raises(ValueError):
        json.loads(r.text)
    r = model.generate(prompt, params, max_tokens=24, constraint=gr.constraint(V))
    validate({"type": "object", "properties": {"s": {"type": "string"}}, "required": ["s"]}, r.text)


def test_generate_checks_its_arguments():
    model, V = random_model("bytes")
    gr = Grammar.from_json_schema({"type": "boolean"})
    with pytest.raises(ValueError, match="ignore_eos"):
        model.generate([1], max_tokens=4, ignore_eos=True, constraint=gr.constraint(V))
    with pytest.raises(ValueError, match="stop ids"):
        model.generate([1], max_tokens=4, stop_ids=[5], constraint=gr.constraint(V))


def test_sampler_host_path_keeps_to_allowed_ids():
    from bitweb.sampling import Sampler
    logits = [5.0, 1.0, 3.0, 3.0, -2.0]
    assert Sampler(SamplingParams()).sample_logits(logits, [], allowed=[2, 3, 4]) == 2      # lowest id on ties
    s = Sampler(SamplingParams(temperature=5.0, seed=1))
    assert {s.sample_logits(logits, [], allowed=[1, 4]) for _ in range(200)} == {1, 4}


# ---------------------------------------------------------------- what the grammars accept
ACCEPT = {
    "person": (['{"name": "Al", "age": 0}', '{ "name" : "é😀", "age" : 150 }\n', '{"name":"\\"x\\\\","age":7}'],
               ['{"name": "", "age": 1}', '{"name": "a", "age": 151}', '{"age": 1, "name": "a"}',
                '{"name": "a", "age": 1, "x": 1}', '{"name": "a"}', '{"name": "a", "age": 01}',
                '{"name": "aaaaaaaaaaaaa", "age": 1}', '{"name": "\\ud800", "age": 1}']),
    "optional": (["{}", '{"b": true}', '{"a": 1, "c": "y"}', '{"a": -3, "b": false, "c": "x"}'],
                 ['{"b": true, "a": 1}', '{"c": "z"}', '{,}', '{"a": 1,}']),
    "extra-keys": (['{"id": 1}', '{"id": 1, "x": true, "i": false, "idx": true, "": false}'],
                   ['{"id": 1, "id": true}', '{"id": 1, "x": 1}', '{"x": true}']),
    "tuple": (['["2024-02-29", true]'], ['["2024-13-01", true]', '["2024-02-29"]', '["2024-02-29", true, 1]']),
    "free": (['{"a": [1, {"b": null}]}', '"x"', "3.5e-7", "[]", "null"], ["{", "'a'", "NaN"]),
}


@pytest.mark.parametrize("name", sorted(ACCEPT))
def test_schema_grammar_accepts_and_rejects(name):
    gr = Grammar.from_json_schema(SCHEMAS[name])
    yes, no = ACCEPT[name]
    for text in yes:
        assert gr.matches(text), text
        validate(SCHEMAS[name], text)
    for text in no:
        assert not gr.matches(text), text


@pytest.mark.parametrize("lo, hi", [(0, 150), (-12, 340), (7, 7), (-1000, -999), (None, 42), (-37, None),
                                    (None, None), (1, 99999), (-5, 0), (10, 19), (123, 4567)])
def test_integer_ranges(lo, hi):
    gr = Grammar(f"root ::= {int_range(lo, hi)}")
    rng = random.Random(0)
    a = -2000 if lo is None else lo
    b = 2000 if hi is None else hi
    probes = set(range(a - 30, a + 30)) | set(range(b - 30, b + 30)) | {rng.randrange(a - 99, b + 99) for _ in range(300)}
    probes |= {10 ** 15, -10 ** 15, 10 ** 16}
    for v in probes:
        want = (lo is None or v >= lo) and (hi is None or v <= hi) and abs(v) < 10 ** 16
        assert gr.matches(str(v)) == want, (lo, hi, v)
    assert not gr.matches("-0") and not gr.matches("007")


PATTERNS = {
    "^[A-Z]{2}-\\d{3}$": ["AB-123", "ab-123", "AB-12", "AB-1234", "xAB-123"],
    "x+y": ["xy", "axxyb", "yx", "", "x\ny"],
    "^(cat|dog)s?$": ["cat", "dogs", "cats!", "bird"],
    "^[^a-c\\d]*$": ["xyz", "", "a", "x9", "٣"],          # with \\d inside, [^...] keeps to ASCII
    "^\\w+@\\w+\\.(com|org)$": ["a@b.com", "a@b.net", "@b.com"],
    '^"[\\\\\\n]+$': ['"\\', '"\n\\', "x"],
    "^a.c$": ["abc", "a\nc", "a😀c", "ac"],
    "^(?:ab){2,3}(z)?$": ["abab", "ababab", "ababz", "ab", "abababab"],
    "^\\s\\S$": [" x", "\tx", "x ", "  "],
}


@pytest.mark.parametrize("pattern", sorted(PATTERNS))
def test_patterns_agree_with_python_re(pattern):
    gr = Grammar.from_json_schema({"type": "string", "pattern": pattern})
    for s in PATTERNS[pattern]:
        want = re.search(pattern, s) is not None
        text = json.dumps(s, ensure_ascii=False)
        if want:
            assert gr.matches(text) or not text.isascii() and gr.matches(json.dumps(s)), (pattern, s)
        else:
            assert not gr.matches(text), (pattern, s)
    model, V = random_model("bytes")                  # and what a random model writes matches
    for seed in range(3):
        r = model.generate([1], SamplingParams(temperature=1.5, seed=seed), max_tokens=40,
                           constraint=gr.constraint(V))
        assert re.search(pattern, json.loads(r.text)), (pattern, r.text)


# ---------------------------------------------------------------- errors
@pytest.mark.parametrize("schema, names", [
    ({"type": "object", "not": {}, "properties": {"a": {"type": "array", "uniqueItems": True}}},
     ["'not' (at /not)", "'uniqueItems' (at /properties/a/uniqueItems)"]),
    ({"if": {}, "then": {}, "patternProperties": {}}, ["'if'", "'then'", "'patternProperties'"]),
    ({"type": "number", "minimum": 0}, ["'minimum' with type number is not supported"]),
    ({"type": "string", "format": "email"}, ["format 'email' is not supported"]),
    ({"type": "string", "pattern": "(?=a)b"}, ["lookaround"]),
    ({"type": "string", "pattern": "(a)\\1"}, ["the escape \\1"]),
    ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, ["oneOf branches 0 and 1 may both match"]),
    ({"$ref": "https://example.com/s.json"}, ["only local references"]),
    ({"$ref": "#/$defs/missing"}, ["points at nothing"]),
    ({"type": "object", "properties": {"a": {}}, "required": ["b"], "additionalProperties": False},
     ["'b' is required but not in properties"]),
    ({"type": "array", "maxItems": 5000}, ["maxItems 5000 is more than"]),
    ({"type": "string", "pattern": "^a$", "maxLength": 3}, ["pattern together with minLength / maxLength"]),
    ({"anyOf": [{"type": "string"}], "type": "string"}, ["anyOf together with type"]),
    (False, ["allows no value"]),
    ({"type": "integer", "minimum": 5, "maximum": 2}, ["no integer lies between"]),
    ({"nullable": True, "type": "string"}, ["'nullable'"]),
])
def test_unsupported_keywords_name_themselves(schema, names):
    with pytest.raises(SchemaError) as e:
        schema_to_gbnf(schema)
    for n in names:
        assert n in str(e.value), str(e.value)


def test_one_of_accepts_provably_disjoint_branches():
    for branches in ([{"type": "string"}, {"type": "integer"}], [{"enum": [1, 2]}, {"enum": [3]}],
                     [SCHEMAS["one-of"]["oneOf"][0], SCHEMAS["one-of"]["oneOf"][1]],
                     [{"type": "object", "properties": {"a": {}}, "required": ["a"]},
                      {"type": "object", "properties": {"b": {}}, "required": ["b"]}]):
        schema_to_gbnf({"oneOf": branches})


def test_schemas_without_a_type():
    for schema in ({"description": "anything"}, {"title": "t", "$defs": {"x": {"type": "integer"}}}, True):
        gr = Grammar.from_json_schema(schema)
        assert all(gr.matches(t) for t in ('{"a": [1]}', '"s"', "null", "-2.5"))
    gr = Grammar.from_json_schema({"properties": {"a": {"type": "integer"}}, "required": ["a"]})   # an object
    assert gr.matches('{"a": 1}') and not gr.matches('"x"')
    gr = Grammar.from_json_schema({"maxLength": 2})                                               # a string
    assert gr.matches('"ab"') and not gr.matches('"abc"')


def test_readme_example_compiles_quickly_and_reads_like_llama_cpp():
    gbnf = schema_to_gbnf({"type": "array", "items": PERSON, "minItems": 10, "maxItems": 100})
    assert 'root ::= "[" space root-item ("," space root-item){9,99} "]" space' in gbnf
    assert "space ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}" in gbnf
    Grammar(gbnf)
