"""Held-out exact-match accuracy per task (bitweb.authoring.tasks); the `eval` command is
bitweb.commands.eval.

The held-out prompts are `tasks.heldout(task)` (distinct canonical questions never
trained on, one paraphrase each, single turn), rendered with the chat format
(`bitweb.chat.chat_ids` and the file's tokenizer), decoded greedily until <|eot_id|> /
EOS (at most 64 tokens), and scored with `tasks.check`.

The core takes callables, so any backend plugs in:
    evaluate(prompt_ids, decode, generate=None, generate_batch=None, limit=None) -> report
    prompt_ids(messages) -> ids;  decode(ids) -> str
    generate(prompt_ids, max_tokens) -> new ids without the stop token
    (or generate_batch(list of prompt ids, max_tokens) -> list of new ids)

Backends: numpy_report (the numpy model), native_report (the GPU engine through wgpu-py) and
torch_report (when torch is installed and the repository's training/ code is present: the
PyTorch W1.58A8 forward of the same file's weights, training/infer.py load_gguf); agreement()
gives the share of prompts with identical greedy tokens.
"""
from __future__ import annotations

import os
import sys

from bitweb.authoring import tasks
from bitweb.generation import KV_CACHE

MAX_TOKENS = 64


def items(limit: int | None = None) -> list:
    """[(task, Example)] for every task's held-out set (limit: at most that many per task)."""
    out = []
    for t in tasks.TASKS:
        out += [(t, ex) for ex in tasks.heldout(t, limit)]
    return out


def evaluate(prompt_ids, decode, generate=None, generate_batch=None, limit=None,
             max_tokens: int = MAX_TOKENS) -> dict:
    """Run the held-out set. Returns {"tasks": {task: {"n", "correct", "accuracy"}},
    "overall": accuracy, "answers": [{"task", "question", "answer", "ids", "ok"}]}."""
    its = items(limit)
    prompts = [prompt_ids(ex.messages(with_answer=False)) for _, ex in its]
    if generate_batch is not None:
        outs = generate_batch(prompts, max_tokens)
    else:
        outs = [generate(p, max_tokens) for p in prompts]
    res, answers = {}, []
    for (t, ex), ids in zip(its, outs):
        text = decode(list(ids))
        ok = tasks.check(t, ex.question, text)
        r = res.setdefault(t, {"n": 0, "correct": 0})
        r["n"] += 1
        r["correct"] += int(ok)
        answers.append({"task": t, "question": ex.question, "answer": text, "ids": list(ids), "ok": ok})
    for r in res.values():
        r["accuracy"] = r["correct"] / r["n"]
    total = sum(r["n"] for r in res.values())
    return {"tasks": res, "overall": sum(r["correct"] for r in res.values()) / max(total, 1),
            "answers": answers}


def agreement(a: dict, b: dict) -> dict:
    """Share of prompts where two reports' greedy tokens are identical, and the differences."""
    x, y = a["answers"], b["answers"]
    same = sum(p["ids"] == q["ids"] for p, q in zip(x, y))
    return {"n": len(x), "same": same, "fraction": same / max(len(x), 1),
            "differ": [{"task": p["task"], "question": p["question"], "a": p["answer"], "b": q["answer"]}
                       for p, q in zip(x, y) if p["ids"] != q["ids"]]}


def table(report: dict, title: str) -> str:
    lines = [title]
    for t, r in report["tasks"].items():
        lines.append(f"  {t:<8} {r['correct']:>4}/{r['n']:<4} {100 * r['accuracy']:6.1f}%")
    lines.append(f"  overall  {100 * report['overall']:6.1f}%")
    return "\n".join(lines)


# ----------------------------------------------------------------------------
# Backends.

def _tokenizer(gf):
    from bitweb.tokenizer import Tokenizer
    return Tokenizer.from_metadata(gf.metadata)


def _prompt_fn(tok):
    from bitweb.chat import chat_ids
    return lambda messages: chat_ids(tok, messages)


def numpy_report(gf, activations="a8", limit=None, kv_cache=KV_CACHE) -> dict:
    from bitweb.numpy_model import NumpyModel
    from bitweb.sampling import SamplingParams
    ref = NumpyModel.from_gguf(gf, activations=activations, kv_cache=kv_cache)
    tok = ref.tokenizer
    return evaluate(_prompt_fn(tok), tok.decode, limit=limit,
                    generate=lambda ids, n: ref.generate(ids, SamplingParams(), n).ids)


def native_report(path, gf, activations="a8", limit=None, kv_cache=KV_CACHE) -> dict:
    import asyncio

    async def run():
        from bitweb import gpu
        from bitweb.engine import Engine
        from bitweb.gguf import FileSource
        from bitweb.sampling import SamplingParams
        dev = await gpu.request_device("native")
        with FileSource(path) as src:
            eng = await Engine.load(dev, gf, src, activations=activations, kv_cache=kv_cache)
        tok = eng.tokenizer
        its = items(limit)
        prompts = [_prompt_fn(tok)(ex.messages(with_answer=False)) for _, ex in its]
        outs = [(await eng.generate(p, SamplingParams(), MAX_TOKENS)).ids for p in prompts]
        eng.close()
        done = iter(outs)
        return evaluate(_prompt_fn(tok), tok.decode, limit=limit,
                        generate_batch=lambda ps, n: [next(done) for _ in ps])
    return asyncio.run(run())


def torch_report(path, gf, limit=None) -> dict | None:
    """The PyTorch W1.58A8 forward of the file's weights, or None without torch / training/."""
    train_dir = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "training"))
    if not os.path.exists(os.path.join(train_dir, "infer.py")):
        return None
    try:
        import torch  # noqa: F401
    except ImportError:
        return None
    if train_dir not in sys.path:
        sys.path.insert(0, train_dir)
    import infer
    from model import greedy
    model = infer.load_gguf(path)
    tok = _tokenizer(gf)
    stop = set(tok.stop_ids)

    def gen_batch(prompts, n):
        out = []
        for i in range(0, len(prompts), 128):
            out += greedy(model, prompts[i: i + 128], n, stop)
        return out
    return evaluate(_prompt_fn(tok), tok.decode, generate_batch=gen_batch, limit=limit)
