"""Allowed-token masks (bitweb.grammar.masks, Constraint): the cached per-frame masks against a
token-by-token check of the automaton, on SmolLM2's real 49k vocabulary; masks never empty in any
state a grammar can reach; stop tokens exactly when the grammar accepts; tokens that span several
grammar symbols; the u32 word layout; the token budget; GBNF token elements."""
import random
from collections import deque

import pytest

from bitweb.grammar import Grammar, GrammarError, Vocabulary
from bitweb.grammar.automaton import DEAD
from bitweb.grammar.masks import bits, ids_of
from tests.conftest import ROOT
from tests.grammar_assets import random_model, smollm2_vocab

GRAMMARS = ROOT / "build" / "assets" / "llama.cpp" / "grammars"
SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    "kind": {"enum": ["cat", "dog"]}, "score": {"type": ["number", "null"]}}, "required": ["name", "age"]}


def brute_force(gr: Grammar, V: Vocabulary, state: int, stop_ids) -> set:
    """The tokens allowed in `state`, found by stepping every token's bytes through the automaton."""
    A = gr.automaton
    out = {t for t in range(V.n_vocab) if V.token_bytes[t] and A.step_bytes(state, V.token_bytes[t]) != DEAD}
    return out | (set(stop_ids) if A.S_accept[state] else set())


@pytest.mark.parametrize("source", ["schema", "json", "arithmetic", "chess"])
def test_masks_equal_a_token_by_token_check(source):
    V = smollm2_vocab()
    gr = Grammar.from_json_schema(SCHEMA) if source == "schema" else \
        Grammar((GRAMMARS / f"{source}.gbnf").read_text(encoding="utf-8"))
    rng = random.Random(1)
    checked = 0
    for walk in range(3):
        c = gr.constraint(V)
        for step in range(40):
            ids = c.ids()
            if step % 8 == 0 or c.accepts():
                assert set(ids) == brute_force(gr, V, c.state, c.stop_ids), (source, walk, step)
                checked += 1
            # favour short tokens so walks go deep into the grammar
            choice = min(rng.sample(ids, min(len(ids), 3)), key=lambda t: len(V.token_bytes[t]))
            if choice in c.stop_ids:
                break
            c.advance(choice)
    assert checked >= 6


def explore(gr: Grammar, V: Vocabulary, limit: int, out: list):
    """Breadth-first over the states tokens reach from the start, up to `limit` of them: appends
    (state, mask ids) to out; True when every reachable state was visited."""
    A = gr.automaton
    c = gr.constraint(V)
    seen, todo = {A.start}, deque([A.start])
    while todo and len(out) < limit:
        c.state = todo.popleft()
        ids = c.ids()
        out.append((c.state, ids))
        for t in ids:
            if t not in c.stop_ids:
                nxt = c._m.advance(c.state, t)
                assert nxt != DEAD, (t, V.token_bytes[t])      # every offered token leads somewhere
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
    return not todo


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"n": {"type": "integer", "minimum": -12, "maximum": 340},
                                      "b": {"type": "boolean"}, "e": {"enum": ["x", "yz", 3, None]}},
     "required": ["n"]},
    {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "minItems": 1, "maxItems": 3},
    {"type": "string", "pattern": "^[a-c]{1,3}-[0-9]$"},
    {"type": "array", "items": {"type": "string", "minLength": 2, "maxLength": 7}, "minItems": 2, "maxItems": 2},
])
def test_every_reachable_state_offers_a_token(schema):
    """Finite grammars: every state tokens can reach (all of them) has a non-empty mask, offers the
    stop tokens exactly when the text so far is complete, and ends only in complete texts."""
    _, V = random_model("bytes")
    gr = Grammar.from_json_schema(schema)
    A = gr.automaton
    states = []
    assert explore(gr, V, 5000, states)          # every reachable state
    for state, ids in states:
        assert ids, state
        assert set(ids) == brute_force(gr, V, state, V.stop_ids)
        stops = set(ids) & V.stop_ids
        assert bool(stops) == A.S_accept[state]
        assert stops in (set(), set(V.stop_ids))
        if A.done(state):
            assert set(ids) == V.stop_ids
    assert len(states) > 20


@pytest.mark.parametrize("text", [
    'root ::= "<" [a-z]{2,9} ">" ("," ("ab" | "c"){3,8})?',
    'root ::= ("[" [0-9]{1,7} "]"){0,12} "."',                     # a counted repetition inside another
    'root ::= (x){6,10}\nx ::= "a" | "bc" | "b" x?',              # a counted rule that calls a frame
])
def test_counted_repetitions_against_a_token_by_token_check(text):
    """X{m,n} with n >= 6 is one frame with a count, not n unrolled copies: every state's mask,
    for every count reached, equals the check of each token through the automaton."""
    _, V = random_model("bytes")
    gr = Grammar(text)
    assert gr.automaton.counted
    states = []
    explore(gr, V, 3000, states)
    for state, ids in states:
        assert set(ids) == brute_force(gr, V, state, V.stop_ids), state
    assert len(states) > 20
    V2 = smollm2_vocab()                                        # long tokens across the count
    rng = random.Random(3)
    for _ in range(3):
        c = gr.constraint(V2)
        for step in range(30):
            ids = c.ids()
            assert set(ids) == brute_force(gr, V2, c.state, c.stop_ids)
            t = rng.choice(ids)
            if t in c.stop_ids:
                break
            c.advance(t)


def test_recursive_grammar_states_offer_a_token():
    _, V = random_model("bytes")
    gr = Grammar((GRAMMARS / "json.gbnf").read_text(encoding="utf-8"))
    states = []
    explore(gr, V, 1500, states)
    assert len(states) == 1500 and all(ids for _, ids in states)


def test_stop_tokens_only_when_complete():
    V = smollm2_vocab()
    gr = Grammar('root ::= "ok" ("!")?')
    c = gr.constraint(V)
    (eos,) = V.stop_ids
    assert eos not in c.ids()
    with pytest.raises(GrammarError, match="before the grammar is complete"):
        c.advance(eos)
    c.advance(V.tokenizer.token_to_id["ok"])
    assert c.accepts() and not c.done and eos in c.ids()
    c.advance(V.tokenizer.token_to_id["!"])
    assert c.done and c.ids() == [eos]
    c.advance(eos)
    assert c.done and c.ids() == []
    with pytest.raises(GrammarError, match="after the stop token"):
        c.advance(eos)
    with pytest.raises(GrammarError, match="not a token id"):
        gr.constraint(V).advance(V.n_vocab)


def test_special_tokens_never_match_text():
    V = smollm2_vocab()
    tok = V.tokenizer
    specials = [i for i in range(V.n_vocab) if tok.token_types[i] not in (1, 6)]
    assert specials
    c = Grammar("root ::= .*").constraint(V)
    allowed = set(c.ids())
    assert not (set(specials) - V.stop_ids) & allowed
    assert len(allowed) > V.n_vocab - len(specials) - 100     # nearly every text token (valid UTF-8 starts)


def test_tokens_span_several_grammar_symbols():
    """One token may close a string, end a key, pass a colon and open a value: the mask finds it."""
    V = smollm2_vocab()
    tok = V.tokenizer
    gr = Grammar.from_json_schema({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
                                   "required": ["a", "b"]})
    c = gr.constraint(V)
    spans = {}
    for text in ('{"', '":', '",', '"}', "},", ":[", '":"'):
        tid = tok.token_to_id.get(text.replace(" ", "Ġ"))
        if tid is not None:
            spans[text] = tid
    assert {'{"', '":', '",'} <= set(spans), spans
    assert spans['{"'] in c.ids()
    for t in tok.encode('{"a', add_bos=False):
        c.advance(t)
    assert spans['":'] in c.ids()                # ends the key, passes the colon
    if '":"' in spans:
        assert spans['":"'] in c.ids()           # ... and opens the string value
    c.advance(spans['":'])
    for t in tok.encode(' "x', add_bos=False):
        c.advance(t)
    assert spans['",'] in c.ids()                # closes the string value (a frame) and goes on
    assert spans['"}'] not in c.ids()            # "b" is required


def test_a_string_frame_is_walked_once_for_every_string():
    V = smollm2_vocab()
    tok = V.tokenizer
    gr = Grammar.from_json_schema({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"},
                                                                     "c": {"type": "string"}},
                                   "required": ["a", "b", "c"]})
    c = gr.constraint(V)
    m = c._m
    inside = []
    for part in ('{"a": "x', 'y", "b": "z', 'w", "c": "q'):
        walks = m.nodes_walked
        for t in tok.encode(part, add_bos=False):
            c.ids()
            c.advance(t)
        c.ids()
        inside.append((c.state, m.nodes_walked - walks))
    states = [s for s, _ in inside]
    assert len(set(states)) == 3                                     # different continuations ...
    tops = {s[-1] for st in states for s in gr.automaton.S_stacks[st] if s}
    assert len(tops) <= 2                                            # ... the same string frame
    assert inside[0][1] > 10 * max(inside[1][1], inside[2][1])       # walked once: later strings are cheap


def test_words_layout():
    V = smollm2_vocab()
    c = Grammar('root ::= [0-9]+').constraint(V)
    w = c.mask()
    assert len(w) == (V.n_vocab + 31) // 32 and w.itemsize == 4
    ids = c.ids()
    assert [t for t in range(V.n_vocab) if w[t >> 5] >> (t & 31) & 1] == ids
    raw = w.tobytes()
    assert [t for t in range(V.n_vocab) if raw[t >> 3] >> (t & 7) & 1] == ids   # the GPU's byte order
    assert ids_of(bits(ids, V.n_vocab)) == ids
    key = c.key
    c.advance(ids[0])
    c.mask()
    assert c.key != key                          # after a digit the stop token is allowed: a new mask


def test_budget_finishes_the_output():
    """With the tokens left, the mask keeps only tokens after which the grammar can still finish:
    even a walk that always takes the token leaving the most to write ends complete."""
    V = smollm2_vocab()
    gr = Grammar.from_json_schema(SCHEMA)
    A = gr.automaton
    for budget in (40, 25):
        c = gr.constraint(V)
        for left in range(budget, 0, -1):
            ids = c.ids(remaining=left)
            worst = max(ids, key=lambda t: (t not in c.stop_ids and A.S_dist[c._m.advance(c.state, t)], -t))
            if worst in c.stop_ids:
                break
            c.advance(worst)
        assert c.accepts(), (budget, V.tokenizer.decode([]))
    for t in c.ids(remaining=1):                 # the last token keeps the text complete
        assert t in c.stop_ids or A.S_accept[c._m.advance(c.state, t)]


def test_token_elements():
    _, V = random_model("bytes")
    tok = V.tokenizer
    bot = tok.token_to_id["<|begin_of_text|>"]
    gr = Grammar('root ::= <|begin_of_text|> "x" !<[120]> <[121]>')
    c = gr.constraint(V)
    assert c.ids() == [bot]
    c.advance(bot)
    c.advance(tok.token_to_id["x"])
    ids = set(c.ids())
    assert 120 not in ids and 121 in ids and bot not in ids and len(ids) > 200
    c.advance(122)
    assert c.ids() == [121]
    with pytest.raises(GrammarError, match="not a single token"):
        Grammar("root ::= <nope>").constraint(V).ids()


def test_bench_grammar_reports_each_schema():
    from bitweb.grammar.bench import bench_grammar, describe
    _, V = random_model("bytes")
    r = bench_grammar(V.tokenizer, {"flag": {"type": "boolean"}, "list": {"type": "array", "maxItems": 3}}, tokens=12)
    assert r["n_vocab"] == V.n_vocab and set(r["schemas"]) == {"flag", "list"}
    for s in r["schemas"].values():
        assert s["cold"]["n"] >= 1 and s["steady"]["n"] >= 1 and s["states"] >= 2
    assert "flag" in describe(r) and "steady mean" in describe(r)


def test_budget_prefers_stopping_to_starting_what_cannot_finish():
    V = smollm2_vocab()
    c = Grammar('root ::= "a" ("bbbbbbbbbbbb")*').constraint(V)
    c.advance(V.tokenizer.token_to_id["a"])
    assert len(c.ids(remaining=20)) > 1                  # room for another 12 b's
    assert c.ids(remaining=5) == sorted(V.stop_ids)      # complete now: only the stop token fits
    c2 = Grammar('root ::= "a" "bbbbbbbbbbbb"').constraint(V)
    c2.advance(V.tokenizer.token_to_id["a"])
    assert c2.ids(remaining=3) and set(c2.ids(remaining=3)) <= set(c2.ids())   # can't finish: least to write
