"""Speculative decoding's benchmark (bitweb.speculative), natively (`bitweb bench speculative MODEL`:
commands/bench_speculative.py) and in the browser (web/dev/bench.html?speculative=1): greedy decode
speed with and without drafting on the GPU engine, for five tasks in the model's chat format: copying
a passage, answering a question asked again (the model's own first answer is in the context:
"recall"), extracting fields into JSON under a schema (the grammar's forced tokens are drafted too),
editing code, and free prose. Per task: decode tokens/s (1000 / decode_ms_per_token: decode time per
generated token, prefill excluded) without drafting, with prompt lookup and (a draft Engine) with the
draft model, each drafting run's ratio to the plain one and its acceptance (accepted / drafted); the
runs of a trial are interleaved, the figures are the medians over the trials after one warm-up run of
each (plans recorded). Every drafting run's tokens are checked equal to the plain run's ("same")."""
from __future__ import annotations

import statistics

PASSAGE = ("The lighthouse keeper climbed the stairs at dusk, lit the lamp, and wrote the weather in the log: "
           "wind from the north-west, light rain, visibility four miles. At midnight he climbed again, trimmed "
           "the wick, and wrote that the rain had stopped.")
CODE = ("def total(items):\n    s = 0\n    for x in items:\n        s = s + x.price * x.count\n    return s\n\n"
        "def average(items):\n    s = total(items)\n    return s / len(items)\n")
PERSON = "Maria Lopez, 34, works as a nurse in Porto and has two cats; her email is maria.lopez@example.org."
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                           "job": {"type": "string"}, "city": {"type": "string"},
                                           "email": {"type": "string"}},
          "required": ["name", "age", "job", "city", "email"]}
QUESTION = "What is 37 + 45?"
TASKS = {   # name -> (user message, schema or None); "recall": the question asked again after the model's answer
    "copy": (f"Repeat this text exactly, word for word:\n\n{PASSAGE}", None),
    "recall": (QUESTION, None),
    "extract": (f"Extract the person's name, age, job, city and email as JSON:\n\n{PERSON}", SCHEMA),
    "code": (f"Rename the variable s to subtotal in this Python code and print the whole code:\n\n{CODE}", None),
    "prose": ("Write a short story about a fox who finds a lost key in the snow.", None),
}


async def bench_speculative(eng, draft=None, tokens: int = 128, trials: int = 3, tasks=TASKS) -> dict:
    from bitweb.chat import ChatFormat
    from bitweb.grammar import Grammar, Vocabulary
    from bitweb.sampling import SamplingParams
    fmt = ChatFormat.from_tokenizer(eng.tokenizer)
    vocab = None
    modes = [("plain", None), ("lookup", "lookup")] + ([("draft", draft)] if draft is not None else [])
    out = {"tokens": tokens, "trials": trials, "tasks": {}}
    think = False if fmt.has_thinking else None
    for name, (user, schema) in tasks.items():
        msgs = [{"role": "user", "content": user}]
        if name == "recall":                              # the model's own answer, then the same question
            eng.reset()
            first = await eng.generate(fmt.ids(msgs, enable_thinking=think), SamplingParams(), tokens,
                                       stop_ids=fmt.stop_ids)
            msgs += [{"role": "assistant", "content": first.text}, {"role": "user", "content": user}]
        ids = fmt.ids(msgs, enable_thinking=think)
        if schema is not None and vocab is None:
            vocab = Vocabulary(eng.tokenizer)
        grammar = Grammar.from_json_schema(schema) if schema is not None else None

        async def once(spec):
            eng.reset()
            c = grammar.constraint(vocab, stop_ids=fmt.stop_ids) if grammar is not None else None
            return await eng.generate(ids, SamplingParams(), tokens, stop_ids=fmt.stop_ids, constraint=c,
                                      speculative=spec)
        runs = {m: [] for m, _ in modes}
        for trial in range(trials + 1):                   # trial 0: warm-up (plans recorded), not counted
            for m, spec in modes:
                res = await once(spec)
                if trial:
                    runs[m].append(res)
        plain = runs["plain"][0]
        row = {"prompt_tokens": len(ids), "generated": len(plain.ids), "stop": plain.stop_reason,
               "text": plain.text[:80]}
        tps = {}
        for m, _ in modes:
            ms = statistics.median(r.decode_ms_per_token for r in runs[m])
            tps[m] = 1000.0 / ms if ms else 0.0
            row[f"{m}_tps"] = round(tps[m], 2)
            if m != "plain":
                r0 = runs[m][0]
                row[f"{m}_ratio"] = round(tps[m] / tps["plain"], 3) if tps["plain"] else 0.0
                row[f"{m}_drafted"], row[f"{m}_accepted"] = r0.drafted, r0.accepted
                row[f"{m}_same"] = all(r.ids == plain.ids for r in runs[m])
        out["tasks"][name] = row
    return out


def describe(r: dict) -> str:
    modes = ["lookup"] + (["draft"] if r.get("draft") else [])
    head = (f"bench speculative: {r.get('model')}" + (f" (draft {r['draft']})" if r.get("draft") else "")
            + f", greedy, {r['tokens']} tokens at most, median of {r['trials']} trials; {r.get('device', '')}")
    lines = [head, f"{'task':8} {'tokens':>6} {'plain tok/s':>11}" + "".join(
        f" {m + ' tok/s':>13} {'ratio':>6} {'accepted':>14} {'same':>5}" for m in modes)]
    for name, t in r["tasks"].items():
        line = f"{name:8} {t['generated']:>6} {t['plain_tps']:>11.1f}"
        for m in modes:
            acc = f"{t[m + '_accepted']}/{t[m + '_drafted']}"
            line += f" {t[m + '_tps']:>13.1f} {t[m + '_ratio']:>5.2f}x {acc:>14} {str(t[m + '_same']):>5}"
        lines.append(line)
    return "\n".join(lines)
