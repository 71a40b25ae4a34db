"""Accuracy cost of the LM head re-quantized to Q8_0 on load (Engine.load(lm_head="q8_0")).

    .venv/bin/python dev/perf/lm_head_q8.py MODEL.gguf [--tokens 48] [--gen 64] [--eval [--limit N]]

Loads the model twice on the native device (head as in the file, and Q8_0) and reports:
  logits    over the decode plan for a fixed text (Engine.forward_logits, all positions):
            max |dlogit|, mean |dlogit| / std(logits), top-1 agreement, mean KL(p_file || p_q8)
  greedy    identical greedy tokens over --gen tokens from 4 prompts (first divergence)
  --eval    `bitweb eval`'s held-out exact-match accuracy per task with each head (the trained
            default model; on a random model the accuracy is meaningless)
"""
import argparse, asyncio, json, math

from bitweb import gpu
from bitweb.engine import Engine
from bitweb.gguf import FileSource, open_gguf
from bitweb.sampling import SamplingParams
from bitweb.bench import bench_text

PROMPTS = ["The capital of France is", "def fibonacci(n):", "1 + 2 + 3 =", "Once upon a time"]


async def load(dev, path, head):
    with FileSource(path) as src:
        return await Engine.load(dev, open_gguf(path), src, lm_head=head, max_context=512)


def softmax(v):
    m = max(v)
    e = [math.exp(x - m) for x in v]
    s = sum(e)
    return [x / s for x in e]


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--eval", action="store_true")
    ap.add_argument("--limit", type=int, default=None)
    a = ap.parse_args()
    dev = await gpu.request_device("native")
    engs = {h: await load(dev, a.model, h) for h in (None, "q8_0")}
    ref, q8 = engs[None], engs["q8_0"]
    ids = ref.tokenizer.encode(bench_text())[:a.tokens]
    la, lb = await ref.forward_logits(ids), await q8.forward_logits(ids)
    dmax = dsum = n = top1 = kl = 0.0
    for x, y in zip(la, lb):
        mu = sum(x) / len(x)
        sd = math.sqrt(sum((v - mu) ** 2 for v in x) / len(x))
        d = [abs(u - v) for u, v in zip(x, y)]
        dmax = max(dmax, max(d))
        dsum += sum(d) / len(d) / sd
        top1 += max(range(len(x)), key=x.__getitem__) == max(range(len(y)), key=y.__getitem__)
        p, q = softmax(x), softmax(y)
        kl += sum(pi * math.log(pi / qi) for pi, qi in zip(p, q) if pi > 0)
        n += 1
    out = {"model": ref.cfg.summary(), "head": ref.model.lm_head.format.name, "positions": int(n),
           "max_abs_dlogit": dmax, "mean_abs_dlogit_over_std": dsum / n, "top1_agreement": top1 / n,
           "mean_kl": kl / n}
    same = total = 0
    first = []
    for text in PROMPTS:
        p = ref.tokenizer.encode(text)
        ga = (await ref.generate(p, SamplingParams(), a.gen, ignore_eos=True)).ids
        gb = (await q8.generate(p, SamplingParams(), a.gen, ignore_eos=True)).ids
        k = next((i for i, (u, v) in enumerate(zip(ga, gb)) if u != v), min(len(ga), len(gb)))
        first.append(k)
        same += sum(u == v for u, v in zip(ga, gb))
        total += max(len(ga), len(gb))
    out["greedy_identical_fraction"] = same / total
    out["greedy_first_divergence"] = first
    for e in engs.values():
        e.close()
    return a, out


def head_eval(a):
    """bitweb eval's native report with the file's head and with the Q8_0 head (outside main's
    event loop: native_report runs its own)."""
    from bitweb.authoring import evaluate
    orig = Engine.load.__func__
    acc, reports = {}, {}
    for head in (None, "q8_0"):
        Engine.load = classmethod(lambda cls, *x, _h=head, **k: orig(cls, *x, lm_head=_h, **k))
        r = reports[head or "file"] = evaluate.native_report(a.model, open_gguf(a.model), limit=a.limit)
        acc[head or "file"] = {"overall": r["overall"], **{t: x["accuracy"] for t, x in r["tasks"].items()}}
    Engine.load = classmethod(orig)
    s = evaluate.agreement(reports["file"], reports["q8_0"])
    acc["identical_greedy_answers"] = f"{s['same']}/{s['n']}"
    return acc


a, out = asyncio.run(main())
if a.eval:
    out["eval"] = head_eval(a)
print(json.dumps(out, indent=1))
