"""What the grammar engine costs (stdlib only, so the same code can run in Pyodide): per schema the
compile time, the first mask, and the per-token overhead (mask as GPU words + advance) over a
constrained generation, cold (fresh caches) and in the steady state (the same Grammar again, as a
server sees the second request with a schema).

The tokens are drawn uniformly from the allowed ones, under the token budget (`remaining`): the
adversarial case for the caches (a model's own choices repeat states more). The model's forward
pass is not part of it: the figures are the constraint's overhead per token.
"""
from __future__ import annotations

import gc
import random
import time

from bitweb.grammar import Grammar, Vocabulary

TOOL_CALL = {"type": "object", "properties": {
    "name": {"enum": ["get_weather", "search", "send_email"]},
    "arguments": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 14},
        "units": {"enum": ["metric", "imperial"]}}, "required": ["city"]}},
    "required": ["name", "arguments"], "additionalProperties": False}
README = {"type": "array", "items": {"type": "object", "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 100},
    "age": {"type": "integer", "minimum": 0, "maximum": 150}},
    "required": ["name", "age"], "additionalProperties": False}, "minItems": 10, "maxItems": 100}
FREE_JSON = {}
SCHEMAS = {"readme (llama.cpp's name/age array)": README, "tool call": TOOL_CALL, "any JSON value": FREE_JSON}


def ms(t0: float) -> float:
    return (time.process_time() - t0) * 1000.0


def run(grammar: Grammar, vocab: Vocabulary, tokens: int, seed: int) -> list:
    """Per-token ms of what the GPU path pays, mask() (the u32 words) + advance(), over one generation
    of at most `tokens` tokens. The random pick among the allowed ids is not timed (a model samples
    on the GPU)."""
    rng = random.Random(seed)
    c = grammar.constraint(vocab)
    out = []
    for k in range(tokens):
        t0 = time.process_time()
        c.mask(tokens - k)
        dt = time.process_time() - t0
        ids = c.ids(tokens - k)
        t = ids[rng.randrange(len(ids))]
        if t in c.stop_ids:
            out.append(dt * 1000.0)
            break
        t0 = time.process_time()
        c.advance(t)
        out.append((dt + time.process_time() - t0) * 1000.0)
    return out


def summary(xs: list) -> dict:
    s = sorted(xs)
    return {"mean": round(sum(s) / len(s), 3), "p50": round(s[len(s) // 2], 3), "max": round(s[-1], 3), "n": len(s)}


def bench_grammar(tokenizer, schemas: dict = SCHEMAS, tokens: int = 200, seed: int = 0) -> dict:
    t0 = time.process_time()
    vocab = Vocabulary(tokenizer)
    out = {"n_vocab": vocab.n_vocab, "trie_nodes": vocab.n_nodes, "vocab_ms": round(ms(t0), 1), "schemas": {}}
    for name, schema in schemas.items():
        gc.collect()                         # a collection the vocabulary's garbage triggers is not the schema's
        t0 = time.process_time()
        g = Grammar.from_json_schema(schema)
        compile_ms = ms(t0)
        t0 = time.process_time()
        g.constraint(vocab).mask(tokens)
        first = ms(t0)
        cold = run(g, vocab, tokens, seed)
        steady = run(g, vocab, tokens, seed + 1)
        m = g.masks(vocab)
        out["schemas"][name] = {"compile_ms": round(compile_ms, 1), "first_mask_ms": round(first, 1),
                                "cold": summary(cold), "steady": summary(steady),
                                "states": len(g.automaton.S_stacks), "frame_walks": m.frame_walks,
                                "subtree_walks": m.subtree_walks, "nodes_walked": m.nodes_walked}
    return out


def describe(r: dict) -> str:
    lines = [f"# {r.get('vocab_file', '')}: {r['n_vocab']} tokens, trie {r['trie_nodes']} nodes, "
             f"built in {r['vocab_ms']:.0f} ms",
             f"{'schema':36s} {'compile':>8s} {'1st mask':>9s} {'cold mean':>10s} {'cold max':>9s} "
             f"{'steady mean':>12s} {'p50':>7s} {'max':>8s}  (CPU ms; per token: mask + advance)"]
    for name, s in r["schemas"].items():
        lines.append(f"{name:36s} {s['compile_ms']:8.1f} {s['first_mask_ms']:9.1f} {s['cold']['mean']:10.3f} "
                     f"{s['cold']['max']:9.1f} "
                     f"{s['steady']['mean']:12.3f} {s['steady']['p50']:7.3f} {s['steady']['max']:8.2f}  "
                     f"[{s['states']} states, {s['frame_walks']} frame + {s['subtree_walks']} subtree walks, "
                     f"{s['nodes_walked']} nodes]")
    return "\n".join(lines)
