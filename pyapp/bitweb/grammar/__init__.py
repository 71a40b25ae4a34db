"""Structured output: GBNF grammars and JSON Schemas as masks over a model's vocabulary (stdlib
only; runs in Pyodide).

    vocab = Vocabulary(tokenizer)                 # once per model: the token trie (shared)
    grammar = Grammar.from_json_schema(schema)    # or Grammar(gbnf_text); keep it: masks are cached on it
    c = grammar.constraint(vocab)                 # one generation's cursor
    loop:
        words = c.mask(remaining)                 # array('I'): n_vocab bits, token t allowed iff
                                                  #   words[t >> 5] >> (t & 31) & 1; upload when c.key changes
        t = sample(logits with the disallowed tokens removed)
        if t in stop ids: break                   # only offered when c.accepts()
        c.advance(t)

Modules: gbnf (the GBNF parser, llama.cpp's syntax), schema (JSON Schema -> GBNF), regex (a JSON
Schema `pattern` -> GBNF), automaton (the byte-level pushdown automaton), masks (the vocabulary trie
and the mask caches); bench measures their costs (`python -m bitweb bench grammar`, PERFORMANCE.md).

Grammars: GBNF as llama.cpp parses it (rules, `|`, groups, `*` `+` `?` `{m,n}`, classes with ranges
and `^`, `.`, escapes, comments, `<[id]>` / `<text>` / `!` token elements); errors carry line and
column. A JSON Schema becomes GBNF first (llama.cpp's rule shapes and whitespace): type (lists:
nullable), properties / required / additionalProperties, enum / const, items / prefixItems /
minItems / maxItems, anyOf, oneOf (branches that provably exclude each other), allOf of one, local
`$ref` (recursion too), minLength / maxLength, `pattern` (ECMA regex without lookaround or
backreferences), format date / time / date-time / uuid, integer bounds; any other keyword is a
SchemaError naming it and its location.

Automaton: each rule is an NFA over bytes (classes compiled to UTF-8 byte sequences, surrogates
excluded, so only valid UTF-8 passes); rules with a finite language are inlined, the rest are call
frames. A state is a set of stacks of local states (determinized on demand); `step(state, byte)` is
memoized. Left recursion and grammars that match nothing fail at compile time; unproductive paths
are pruned, so every reachable state can be completed. `X{m,n}` with n >= 6 is not unrolled: a
count element under X's frame holds the iterations done, so `char{1,100}` costs one walk.

Masks: tokens consumed inside the top frame depend on its local state alone and are cached per
local state; tokens that end the frame part way (`",` `"}`) are trie nodes whose subtrees are
walked against what follows, cached per (node, state); a state's mask and the state after a token
are cached too, so a state reached again costs dict lookups. Masks are kept by the fewest bytes
that complete the grammar after the token, so `remaining` keeps only tokens after which the output
can still finish in time (each byte is at worst one token): constrained output ends complete at
max_tokens. Stop tokens are allowed exactly when the grammar accepts; control / unused /
user-defined tokens never match text. Keep one Grammar per schema (its caches are the speed) and
one Vocabulary per model: a frame first seen walks the trie under it (0.1-0.3 s on 49k-152k tokens).
"""
from __future__ import annotations

from array import array

from bitweb.grammar.automaton import DEAD, Automaton
from bitweb.grammar.gbnf import GrammarError, parse
from bitweb.grammar.masks import Masks, Vocabulary, ids_of
from bitweb.grammar.schema import SchemaError, schema_to_gbnf

__all__ = ["Constraint", "Grammar", "GrammarError", "SchemaError", "Vocabulary", "schema_to_gbnf"]


class Grammar:
    """A compiled grammar: GBNF text (`gbnf`) -> automaton. Masks are cached per vocabulary on the
    Grammar, so keep one per schema or grammar and make a Constraint per generation."""

    def __init__(self, gbnf: str, root: str = "root"):
        self.gbnf = gbnf
        self.root = root
        try:
            self.automaton = Automaton(parse(gbnf, root), root)
        except RecursionError:
            raise GrammarError("the grammar nests too deeply (groups or rules inside each other)") from None
        self._masks = {}

    @classmethod
    def from_json_schema(cls, schema) -> "Grammar":
        """SchemaError names every keyword the grammar cannot express (never silently ignored)."""
        try:
            gbnf = schema_to_gbnf(schema)
        except RecursionError:
            raise SchemaError("the schema nests too deeply") from None
        return cls(gbnf)

    def masks(self, vocab: Vocabulary) -> Masks:
        got = self._masks.get(id(vocab))
        if got is None or got.V is not vocab:
            got = self._masks[id(vocab)] = Masks(self.automaton, vocab)
        return got

    def constraint(self, vocab: Vocabulary, stop_ids=None) -> "Constraint":
        return Constraint(self.masks(vocab), stop_ids)

    def matches(self, text) -> bool:
        """Whether the grammar accepts the whole of text (str or bytes)."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        A = self.automaton
        sid = A.step_bytes(A.start, data)
        return sid != DEAD and A.S_accept[sid]


class Constraint:
    """One generation under a grammar: which tokens may come next, and the state after each.

    state / key   the automaton state; key identifies the current mask (the same key, the same mask:
                  re-upload the GPU mask only when it changes)
    mask(remaining=None) -> array('I')   the allowed tokens as n_vocab bits in u32 words (cached and
                                         shared: read it, upload it, don't modify it)
    allowed(remaining=None) -> int       the same as an int bitset (host samplers)
    ids(remaining=None) -> list          the same as ascending token ids
    advance(token)   take a generated token; GrammarError if the grammar does not allow it
    accepts()        the text so far is complete (stop tokens are allowed exactly then)
    done             complete, and nothing but a stop token may follow (or a stop token was taken)

    remaining: tokens left to generate, this one included (max_tokens - generated, or what the
    context leaves). With it the mask keeps only tokens after which the grammar can still finish in
    time, so generation under max_tokens ends with complete output. Without it, any token the
    grammar allows. Stop tokens (stop_ids, default the vocabulary's EOS / EOT / EOM) are allowed
    when accepts(); control and other special tokens never are (unless a GBNF <token> names them).
    """

    def __init__(self, masks: Masks, stop_ids=None):
        self._m = masks
        self.n_vocab = masks.n_vocab
        self.stop_ids = frozenset(masks.V.stop_ids if stop_ids is None else stop_ids)
        self.state = masks.A.start
        self.stopped = False
        self.key = None

    def allowed(self, remaining: int | None = None) -> int:
        if self.stopped:
            self.key = ("stopped",)
            return 0
        key, m = self._m.allowed(self.state, remaining, self.stop_ids)
        if not m:
            if self.accepts():
                raise GrammarError("the grammar is complete and no stop token was given: nothing may follow")
            raise GrammarError("no token of this vocabulary can continue the grammar here (the grammar "
                               "needs bytes no token has)")
        self.key = key
        return m

    def mask(self, remaining: int | None = None) -> array:
        m = self.allowed(remaining)
        return self._m.words(self.key, m) if not self.stopped else array("I", bytes(4 * ((self.n_vocab + 31) >> 5)))

    def ids(self, remaining: int | None = None) -> list:
        m = self.allowed(remaining)
        return self._m.ids(self.key, m) if not self.stopped else []

    def accepts(self) -> bool:
        return self.stopped or self._m.A.S_accept[self.state]

    @property
    def done(self) -> bool:
        return self.stopped or self._m.A.done(self.state)

    def advance(self, token: int) -> None:
        if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < self.n_vocab:
            raise GrammarError(f"token {token!r} is not a token id (the vocabulary has {self.n_vocab})")
        if self.stopped:
            raise GrammarError(f"token {token} after the stop token: generation under this grammar has ended")
        if token in self.stop_ids:
            if not self.accepts():
                raise GrammarError(f"stop token {token} before the grammar is complete")
            self.stopped = True
            return
        nxt = self._m.advance(self.state, token)
        if nxt == DEAD:
            raise GrammarError(f"token {token} ({self._m.V.token_bytes[token]!r}) is not allowed by the grammar here")
        self.state = nxt

    @property
    def stats(self) -> dict:
        """Cache statistics: states, frames walked, trie nodes visited ..."""
        m = self._m
        return {"states": len(m.A.S_stacks), "local_states": len(m.A.D_sets), "frame_walks": m.frame_walks,
                "subtree_walks": m.subtree_walks, "nodes_walked": m.nodes_walked, "masks": len(m._allowed)}
