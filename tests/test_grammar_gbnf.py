"""GBNF (bitweb.grammar.gbnf) and the byte automaton (bitweb.grammar.automaton): llama.cpp's syntax and
its errors with line and column, llama.cpp's own grammars (build/assets/llama.cpp/grammars, fetched
by `tools/setup.sh --test`) accepting strings written for them and rejecting others, UTF-8 classes
exact against Python's encoder."""
import random

import pytest

from bitweb.grammar import Grammar, GrammarError
from bitweb.grammar.automaton import DEAD, utf8_sequences
from bitweb.grammar.gbnf import parse
from tests.conftest import ROOT

GRAMMARS = ROOT / "build" / "assets" / "llama.cpp" / "grammars"


def g(text: str) -> Grammar:
    return Grammar(text)


# ---------------------------------------------------------------- syntax
@pytest.mark.parametrize("text, yes, no", [
    ('root ::= "ab" | "c"', ["ab", "c"], ["", "a", "abc", "cc"]),
    ('root ::= [a-c]+ "!"', ["a!", "abcba!"], ["!", "d!", "a"]),
    ('root ::= [^a-c\\n]*', ["", "xyz", "é😀"], ["a", "x\n"]),
    ('root ::= ("x" | "y")? "z"', ["z", "xz", "yz"], ["xyz", "x"]),
    ('root ::= "a"{3}', ["aaa"], ["aa", "aaaa"]),
    ('root ::= "a"{2,}', ["aa", "aaaaaaa"], ["a"]),
    ('root ::= "a"{1,3} "b"{0,1}', ["a", "aaab", "ab"], ["aaaab", "b", "abb"]),
    ('root ::= "a"{ 0 , 2 }', ["", "aa"], ["aaa"]),
    ('root ::= . .', ["ab", "é😀", "\n\t"], ["a", "abc"]),
    ('root ::= "\\x41\\u00e9\\U0001F600\\t\\r\\n\\\\\\"\\[\\]\\-"', ['Aé😀\t\r\n\\"[]-'], ["A"]),
    ('root ::= [\\[\\]\\-\\\\]', ["[", "]", "-", "\\"], ["a"]),
    ('root ::= [a-]', ["a", "-"], ["b"]),                     # "-" before "]" is literal
    ('root ::= [ぁ-ゟ]+', ["ひらがな"], ["カ", "a"]),
    ('root ::= x y\nx ::= "a" # comment\ny ::= ( "b"\n  | "c" ) # more', ["ab", "ac"], ["a", "abc"]),
    ('root ::= "a" |\n  "b"', ["a", "b"], ["ab"]),             # a newline after | continues the rule
    ('root ::= "a" sp\nsp ::= | " "', ["a", "a "], ["a  "]),   # an empty alternative
    ('root ::= item+\nitem ::= [0-9] ","', ["1,", "1,2,3,"], ["1", ""]),
    ('root ::= "x"\nroot ::= "y"', ["y"], ["x"]),               # a later definition replaces (llama.cpp)
    ('root ::= a\na ::= "(" a ")" | ""', ["", "()", "((()))"], ["(()", ")("]),    # recursion, not left
    ('root ::= [z-a] | "q"', ["q"], ["z", "a"]),                # an empty range matches nothing
])
def test_gbnf_language(text, yes, no):
    gr = g(text)
    for s in yes:
        assert gr.matches(s), (text, s)
    for s in no:
        assert not gr.matches(s), (text, s)


@pytest.mark.parametrize("text, message, line, col", [
    ('root ::= "abc', "unterminated literal", 1, 10),
    ("root ::= [abc", "unterminated character class", 1, 10),
    ('root ::= "a"\nfoo ::= ( "b" ', "expected ) to close the group", 2, 15),
    ('root ::= "\\q"', "unknown escape \\q", 1, 11),
    ('root ::= "\\x4"', "expected 2 hex digits after \\x", 1, 11),
    ('root ::= "a"\n\nx := "b"', "expected ::= after the rule name 'x'", 3, 3),
    ('root ::= * "a"', "* needs a preceding item", 1, 10),
    ('root ::= "a"{2,1}', "the maximum is below the minimum", 1, 13),
    ('root ::= "a"{2001}', "more than 2000 repetitions", 1, 13),
    ('root ::= "a"{x}', "expected an integer", 1, 14),
    ('root ::= "a" )', "expected a newline or the end of the grammar, found ')'", 1, 14),
    ('root ::= "a"\n| "b"', "expected a rule name", 2, 1),   # no continuation after a newline (llama.cpp)
    ('root ::= foo\nbar ::= "b"', "undefined rule 'foo'", 1, 10),
    ('root ::= <think', "unterminated token", 1, 10),
])
def test_gbnf_errors_name_what_and_where(text, message, line, col):
    with pytest.raises(GrammarError) as e:
        g(text)
    assert message in str(e.value), str(e.value)
    assert (e.value.line, e.value.col) == (line, col), str(e.value)
    assert f"(line {line}, column {col})" in str(e.value)


@pytest.mark.parametrize("text, message", [
    ('foo ::= "a"', "no 'root' rule"),
    ("", "no rules"),
    ('root ::= root "a" | "b"', "left recursion: rule 'root'"),
    ('root ::= a\na ::= b "x"\nb ::= c? a | "y"\nc ::= "c"', "left recursion"),
    ('root ::= [^\\x00-\\U0010FFFF]', "matches no string"),
    ('root ::= "a" r\nr ::= "b" r', "matches no string"),     # never ends
])
def test_grammar_errors(text, message):
    with pytest.raises(GrammarError) as e:
        g(text)
    assert message in str(e.value), str(e.value)


def test_hostile_grammars_get_errors():
    with pytest.raises(GrammarError, match="nests too deeply"):
        g("root ::= " + "(" * 5000 + '"a"' + ")" * 5000)
    with pytest.raises(GrammarError, match="too large"):
        g('root ::= ' + "(" * 9 + '"a"' + "){5}" * 9)
    deep = {"type": "array", "items": {}}
    for _ in range(3000):
        deep = {"type": "array", "items": deep}
    from bitweb.grammar import SchemaError
    with pytest.raises(SchemaError, match="nests too deeply"):
        Grammar.from_json_schema(deep)


def test_repetition_past_the_limit_has_no_maximum_as_in_llama_cpp():
    assert g('root ::= "a"{0,5000}').matches("a" * 2500)


def test_parse_gives_expressions():
    rules = parse('root ::= "a" [b-c]* ref\nref ::= "d"?')
    assert set(rules) == {"root", "ref"}
    assert rules["root"][0] == "seq" and rules["root"][1][2] == ("ref", "ref", (1, 21))


# ---------------------------------------------------------------- UTF-8
def test_utf8_sequences_match_python_encoder():
    rng = random.Random(0)
    cases = [((0, 0x10FFFF),), ((0x7F, 0x80),), ((0x7FF, 0x800),), ((0xFFFF, 0x10000),), ((0xD000, 0xE100),),
             ((0x41, 0x5A), (0x3040, 0x309F))]
    cases += [((a, a + rng.randrange(1, 5000)),) for a in (rng.randrange(0x10FFFF - 5000) for _ in range(20))]
    for ranges in cases:
        seqs = utf8_sequences(ranges)

        def hit(b: bytes) -> bool:
            return any(len(s) == len(b) and all(lo <= x <= hi for (lo, hi), x in zip(s, b)) for s in seqs)
        probes = set()
        for lo, hi in ranges:
            probes |= {lo, hi, lo - 1, hi + 1, *(rng.randrange(lo, hi + 1) for _ in range(200))}
        for cp in probes:
            if 0 <= cp <= 0x10FFFF and not 0xD800 <= cp <= 0xDFFF:
                want = any(lo <= cp <= hi for lo, hi in ranges)
                assert hit(chr(cp).encode("utf-8")) == want, (ranges, hex(cp))
        assert not hit(b"\xed\xa0\x80") and not hit(b"\xc0\x80")     # a surrogate, an overlong form


def test_only_valid_utf8_is_accepted():
    gr = g("root ::= .*")
    assert gr.matches("aé€😀")
    for bad in (b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xe0\x80\x80", b"\xf4\x90\x80\x80", b"\x80"):
        assert not gr.matches(bad), bad
    A = gr.automaton
    assert A.step_bytes(A.start, b"\xf0\x9f") != DEAD            # a character's first bytes: alive


# ---------------------------------------------------------------- llama.cpp's grammars
CASES = {
    "arithmetic": (["1+2=3\n", "a*(b +c)= 4\n2/x=y\n", "(x)=1\n"], ["1+2=3", "1+=3\n", "=3\n", "A=1\n"]),
    "c": (["int main(){return 0;}", "int f(int x){x = x+1;}float g(){}", "int h(){while(a<b){a = a+1;}}",
           "char c(){// note\n}", "int m(){/* a * b */}"],
          ["int main(){return 0}", "main(){}", "int f(){x == 1;}", "int m(){/* open }"]),
    "chess": (["1. e4 e5\n2. Nf3 Nc6\n", "1. d4 d5\n2. c4 dxc4\n3. Qa4+ Bd7\n", "1. e4 c5\n12. O-O O-O-O\n"],
              ["1. e4 e5\n", "1. e9 e5\n2. a3 a6\n", "1. e4 e5 \n2. a3 a6\n"]),
    "english": (["Hello, world!", "line one\nline two", "a"], ["", "café", "two  spaces"]),
    "japanese": (["こんにちは", "カタカナ 漢字", "はい、そうです。"], ["", "hello", "こんにちは  二"]),
    "json": (['{"a": [1, 2.5e-3, "x\\n\\u00e9"], "b": {"c": null, "d": true}}', "{}", '{"k":"v"}\n'],
             ["[1]", '{"a":}', '{"a": 01}', "{'a': 1}", '{"a": "\x01"}', '{"a": 1,}']),
    "json_arr": (['[\n{"a": 1},\n"x"]', "[\n]", '[\n1,\n2]'], ['{"a": 1}', "[1]", '[\n1, 2]']),
    "list": (["- one\n", "- one\n- two three\n"], ["one\n", "- \n", "- a", "- a\u2028b\n"]),
}


def test_every_llama_cpp_grammar_is_covered():
    files = sorted(p.stem for p in GRAMMARS.glob("*.gbnf"))
    assert files, f"no grammars in {GRAMMARS}: run tools/setup.sh --test"
    assert sorted(CASES) == files


@pytest.mark.parametrize("name", sorted(CASES))
def test_llama_cpp_grammar(name):
    gr = Grammar((GRAMMARS / f"{name}.gbnf").read_text(encoding="utf-8"))
    yes, no = CASES[name]
    for s in yes:
        assert gr.matches(s), (name, s)
    for s in no:
        assert not gr.matches(s), (name, s)


@pytest.mark.parametrize("name", sorted(CASES))
def test_llama_cpp_grammar_constrains_generation(name):
    """A random-weight model under each of llama.cpp's grammars writes text the grammar accepts (the
    token budget makes it finish within max_tokens; multi-byte characters come a byte at a time)."""
    from bitweb.sampling import SamplingParams
    from tests.grammar_assets import random_model
    model, V = random_model("bytes")
    gr = Grammar((GRAMMARS / f"{name}.gbnf").read_text(encoding="utf-8"))
    for seed in (1, 2):
        c = gr.constraint(V)
        r = model.generate([1], SamplingParams(temperature=1.0, seed=seed), max_tokens=80, constraint=c)
        assert c.accepts() and gr.matches(r.text), (name, r.text)
