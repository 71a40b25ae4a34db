"""What the grammar engine costs (stdlib only, so the same code can run in Pyodide): per schema the
compile time, the first mask, and the per-token overhead (mask as GPU words + advance) over a
constrained generation, cold (fresh caches) and in the steady state (the same Grammar again, as a
server sees the second request with a schema). `bench_engine`: the same on a loaded GPU engine,
decode ms per token with and without a grammar (`bitweb bench constrained MODEL`, and in the
browser web/dev/bench.html?grammar=1).

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


# ---------------------------------------------------------------------------- on the GPU engine
ENGINE_SCHEMAS = {"tool call": TOOL_CALL, "readme (llama.cpp's name/age array)": README}
RUNS = ("cold", "steady", "serial")      # a new Grammar; the same one again; again one step at a time


def median(xs: list) -> float:
    s = sorted(xs)
    n = len(s)
    return (s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2) if s else 0.0


class HostTimer:
    """Wall time the constraint takes per token inside Engine.generate: Constraint.mask (the allowed
    set as GPU words, cached per state), the upload when the mask changed (Engine._write_mask) and
    Constraint.advance; instance attributes shadow the methods while it is active."""

    def __init__(self, eng, c):
        self.eng, self.c, self.ms, self.uploads = eng, c, [], 0

    def __enter__(self):
        write, advance = self.eng._write_mask, self.c.advance

        def timed_write(remaining):
            key = self.eng._mask_key
            t0 = time.perf_counter()
            write(remaining)
            self.ms.append((time.perf_counter() - t0) * 1e3)
            self.uploads += self.eng._mask_key != key

        def timed_advance(t):
            t0 = time.perf_counter()
            advance(t)
            if self.ms:
                self.ms[-1] += (time.perf_counter() - t0) * 1e3
        self.eng._write_mask, self.c.advance = timed_write, timed_advance
        return self

    def __exit__(self, *exc):
        del self.eng._write_mask, self.c.advance


async def bench_engine(eng, schemas: dict = ENGINE_SCHEMAS, tokens: int = 48, prompt_tokens: int = 16,
                       trials: int = 3, log=None) -> dict:
    """Greedy decode on one loaded engine without a grammar (its fastest path: one step ahead of the
    host; and one step at a time: plain_serial) and under each schema: the first reply under a new
    Grammar (cold: its frames walked as the tokens come), later ones (steady: the same Grammar) and
    the same one step at a time (serial: Engine.overlap off, each forward pass waits for the host's
    mask). Trials interleave the runs, the medians are reported; the figures are wall ms per token as generate() times them (prefill_ms:
    the first token, which under a grammar includes its first mask). Also the Vocabulary's build
    (once per model), the schema's compile, and the constraint's own host ms per decoded token
    (HostTimer) with the share of tokens that uploaded a new mask."""
    from bitweb.sampling import SamplingParams
    p = SamplingParams()
    ids = eng.tokenizer.encode("Please write the data as JSON. " * 8, add_bos=False)[:prompt_tokens]
    t0 = time.perf_counter()
    vocab = Vocabulary(eng.tokenizer)
    out = {"n_vocab": vocab.n_vocab, "model": eng.cfg.summary(), "vocab_ms": round((time.perf_counter() - t0) * 1e3, 1),
           "tokens": tokens, "prompt_tokens": len(ids), "trials": trials, "schemas": {}}
    await eng.generate(ids, p, 2, ignore_eos=True)          # warm-up: pipelines built on first use
    plain, serial = {"first": [], "decode": []}, {"first": [], "decode": []}
    overlap = eng.overlap
    for name, schema in schemas.items():
        t0 = time.perf_counter()
        Grammar.from_json_schema(schema)
        compile_ms = (time.perf_counter() - t0) * 1e3
        runs = {kind: {"first": [], "decode": [], "host": [], "uploads": []} for kind in RUNS}
        for _ in range(trials):
            for ahead, row in ((True, plain), (False, serial)):
                eng.reset()
                eng.overlap = ahead
                r = await eng.generate(ids, p, tokens, ignore_eos=True)
                row["first"].append(r.prefill_ms)
                row["decode"].append(r.decode_ms_per_token)
            g = Grammar.from_json_schema(schema)
            for kind in RUNS:
                eng.reset()
                eng.overlap = kind != "serial"
                c = g.constraint(vocab)
                with HostTimer(eng, c) as h:
                    r = await eng.generate(ids, p, tokens, constraint=c)
                n = max(1, len(r.ids) - 1)
                k = runs[kind]
                k["first"].append(r.prefill_ms)
                k["decode"].append(r.decode_ms_per_token)
                k["host"].append(sum(h.ms[1:]) / n)                 # ms[0]: the first mask, before the prefill
                k["uploads"].append((h.uploads - 1) / n)
        s = {"compile_ms": round(compile_ms, 2)}
        for kind, k in runs.items():
            s[kind] = {"first_token_ms": round(median(k["first"]), 2), "decode_ms_per_token": round(median(k["decode"]), 3),
                       "decode_ms_per_token_min": round(min(k["decode"]), 3),
                       "host_ms_per_token": round(median(k["host"]), 3), "uploads_per_token": round(median(k["uploads"]), 2)}
        out["schemas"][name] = s
    eng.overlap = overlap
    # GPU time of one step (timestamps where the adapter has them): the plain greedy plan against the
    # same dispatches with the masked argmax (the mask holds the last run's)
    masked = eng.dev.plan(eng.items_layers + eng.items_head + [(await eng._sampler_item(("mask", 0)))[0]])
    gpu = {"plain": [], "masked": []}
    for _ in range(trials):
        gpu["plain"].append(await eng.dev.time_plan(eng.plan_greedy, 10))
        gpu["masked"].append(await eng.dev.time_plan(masked, 10))
    out["gpu_ms_per_step"] = {k: round(median(v) * 1e3, 3) for k, v in gpu.items()}
    base = round(median(plain["decode"]), 3)
    out["plain"] = {"first_token_ms": round(median(plain["first"]), 2), "decode_ms_per_token": base,
                    "decode_ms_per_token_min": round(min(plain["decode"]), 3)}
    out["plain_serial"] = {"first_token_ms": round(median(serial["first"]), 2),
                           "decode_ms_per_token": round(median(serial["decode"]), 3)}
    for s in out["schemas"].values():
        for kind in RUNS:
            d = s[kind]["decode_ms_per_token"] - base
            s[kind]["overhead_ms_per_token"] = round(d, 3)
            s[kind]["overhead_share"] = round(d / base, 3) if base else None
            b = out["plain"]["decode_ms_per_token_min"]             # the least disturbed run of each
            s[kind]["overhead_share_min"] = round((s[kind]["decode_ms_per_token_min"] - b) / b, 3) if b else None
    if log:
        log(describe_engine(out))
    return out


def describe_engine(r: dict) -> str:
    pl, ps = r["plain"], r["plain_serial"]
    lines = [f"# {r['model']}; {r['n_vocab']} tokens (Vocabulary {r['vocab_ms']:.0f} ms); greedy, prompt "
             f"{r['prompt_tokens']}, {r['tokens']} tokens, median of {r['trials']}",
             f"no grammar: first token {pl['first_token_ms']} ms, decode {pl['decode_ms_per_token']} ms/token "
             f"(best {pl['decode_ms_per_token_min']}; one step at a time: {ps['decode_ms_per_token']} ms/token)",
             f"{'schema':36s} {'compile':>8s} {'run':>6s} {'1st tok':>8s} {'ms/tok':>8s} {'overhead':>9s} "
             f"{'share':>6s} {'best':>8s} {'share':>6s} {'host ms':>8s} {'uploads':>8s}"]
    g = r.get("gpu_ms_per_step")
    if g:
        lines.insert(2, f"GPU time of a step: {g['plain']} ms greedy, {g['masked']} ms with the masked argmax")
    for name, s in r["schemas"].items():
        for kind in RUNS:
            k = s[kind]
            lines.append(f"{name if kind == 'cold' else '':36s} {s['compile_ms'] if kind == 'cold' else '':>8} {kind:>6s} "
                         f"{k['first_token_ms']:8.1f} {k['decode_ms_per_token']:8.3f} {k['overhead_ms_per_token']:9.3f} "
                         f"{k['overhead_share'] if k['overhead_share'] is not None else '-':>6} "
                         f"{k['decode_ms_per_token_min']:8.3f} "
                         f"{k['overhead_share_min'] if k['overhead_share_min'] is not None else '-':>6} "
                         f"{k['host_ms_per_token']:8.3f} {k['uploads_per_token']:8.2f}")
    return "\n".join(lines)
