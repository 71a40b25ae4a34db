"""Train the default chat model: BitNet b1.58 2B4T architecture, W1.58A8 QAT, on bitweb.authoring.tasks.

    nice -n 10 .venv/bin/python training/train.py --run default            # from scratch
    nice -n 10 .venv/bin/python training/train.py --run default --resume   # continue

Seeded and resumable: the batch of step k is generated from seed (seed, k), so a
resumed run sees the same data as an uninterrupted one. Checkpoints go to
training/runs/<run>/ckpt.pt every --ckpt-every steps (and final.pt at the end);
the log (loss, lr, speed, held-out accuracy per task) to training/logs/<run>.log.

Recipe (after BitNet b1.58 2B4T, scaled down): AdamW (0.9, 0.95), linear warm-up,
cosine decay to 5% of the peak, weight decay 0.1 on the linear weights in the first
half and 0 in the second half (the 2B4T two-stage schedule); norms and the
embedding get no weight decay. Loss: cross-entropy on the assistant answer and its
<|eot_id|> only.
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import random
import time

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

from data import EOS, EOT, encode_example, format_chat, tasks
from model import BitLinear, BitNet, Config, greedy
from bitweb.authoring import evaluate as ev

HERE = os.path.dirname(os.path.abspath(__file__))


POOL = 1   # batches per length-sorted pool; 1 = plain random batches (sorting made batches
#            single-task and learning much slower: logs/run2-length-sorted-batches.log)


def make_batch(tok, seed: int, step: int, batch: int, pool_size: int = POOL):
    """(ids, targets) for one step; targets are -100 outside the answers.
    Step k takes chunk k % POOL of pool k // POOL (POOL * batch examples from seed
    (seed, pool), sorted by length, chunks in a seeded order): deterministic per step."""
    pool = step // pool_size
    exs = itertools.islice(tasks.generate(seed * 1_000_003 + pool), pool_size * batch)
    seqs = sorted((encode_example(tok, ex) for ex in exs), key=lambda s: len(s[0]))
    order = list(range(pool_size))
    random.Random(seed * 7_919 + pool).shuffle(order)
    c = order[step % pool_size]
    seqs = seqs[c * batch: (c + 1) * batch]
    T = max(len(s) for s, _ in seqs) - 1
    pad = tok.token_to_id(EOS)
    ids = torch.full((batch, T), pad, dtype=torch.long)
    tgt = torch.full((batch, T), -100, dtype=torch.long)
    for i, (s, n) in enumerate(seqs):
        ids[i, : len(s) - 1] = torch.tensor(s[:-1])
        tgt[i, n - 1: len(s) - 1] = torch.tensor(s[n:])
    return ids, tgt


def init_from_gguf(model: BitNet, path: str) -> None:
    """Load a file's weights (same config) as training weights whose forward is the file's:
    a ternary weight w = t * m (scale m) becomes the latent W = w / p, p the share of nonzero
    t, so mean|W| = m and weight_quant(W) = clamp(round(t / p), -1, 1) * m = t * m (p <= 1).
    The latent weights the file was exported from are not in it; these sit at the ternary
    points instead of near rounding edges, so the first updates flip few weights."""
    from infer import load_gguf
    src = load_gguf(path)
    a, b = src.c.to_dict(), model.c.to_dict()
    if a.keys() != b.keys() or not all(math.isclose(a[k], b[k], rel_tol=1e-6) for k in a):   # eps: f32 in the file
        raise SystemExit(f"--init-gguf: {path} has config {src.c.to_dict()}, the run {model.c.to_dict()}")
    with torch.no_grad():
        for (name, dst), (_, s) in zip(model.named_modules(), src.named_modules()):
            if isinstance(dst, BitLinear):
                w = s.frozen
                dst.weight.copy_(w / (w != 0).float().mean().clamp(min=1e-6))
            elif hasattr(dst, "weight") and not list(dst.children()):
                dst.weight.copy_(s.weight)


def lr_at(step: int, a) -> float:
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    p = (step - a.warmup) / max(1, a.steps - a.warmup)
    return a.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * p)))


def heldout_eval(model, tok, limit: int) -> dict:
    stop = {tok.token_to_id(EOT), tok.token_to_id(EOS)}
    model.eval()

    def gen_batch(prompts, max_tokens):
        out = []
        for i in range(0, len(prompts), 128):
            out += greedy(model, prompts[i: i + 128], max_tokens, stop)
        return out
    r = ev.evaluate(lambda msgs: tok.encode(format_chat(msgs), add_special_tokens=False).ids,
                    tok.decode, generate_batch=gen_batch, limit=limit)
    model.train()
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", default="default")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ckpt-every", type=int, default=250)
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--eval-limit", type=int, default=30, help="held-out prompts per task during training")
    ap.add_argument("--final-limit", type=int, default=None, help="held-out prompts per task at the end")
    ap.add_argument("--pool", type=int, default=POOL, help="batches per length-sorted pool (1: no sorting)")
    ap.add_argument("--float", action="store_true", help="experiment only: no quantization (float linears)")
    ap.add_argument("--tokenizer", default=os.path.join(HERE, "tokenizer.json"))
    ap.add_argument("--out-dir", default=HERE, help="root of runs/<run>/ and logs/<run>.log")
    ap.add_argument("--stop-after", type=int, default=None,
                    help="save a checkpoint and exit at this step (continue later with --resume)")
    ap.add_argument("--mix", default="", help="task sampling weights to override, e.g. compare=30,count=20 "
                    "(bitweb.authoring.tasks.WEIGHTS; recorded in the log's args line)")
    ap.add_argument("--compare-answer", choices=("steps", "short"), default="steps",
                    help="compare answers: '412 > 398, so 412 is larger.' (steps) or '412 is larger.' (short)")
    ap.add_argument("--count-answer", choices=("steps", "short"), default="steps",
                    help="count answers: 's-t-r1-a-w-b-e-r2-r3-y has 3 r's.' (steps) or without the running counts (short)")
    ap.add_argument("--init-gguf", default=None,
                    help="start (step 0, fresh optimizer) from a GGUF file's weights instead of random ones")
    ap.add_argument("--pseudo-words", type=float, default=tasks.PSEUDO_WORDS,
                    help="share of training count/reverse examples on random letter strings")
    for k, v in Config().to_dict().items():
        if k != "n_vocab":
            ap.add_argument("--" + k.replace("_", "-"), type=type(v), default=v)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    tasks.COMPARE_STEPS = a.compare_answer == "steps"
    tasks.COUNT_STEPS = a.count_answer == "steps"
    tasks.PSEUDO_WORDS = a.pseudo_words
    for kv in filter(None, a.mix.split(",")):
        k, v = kv.split("=")
        if k not in tasks.WEIGHTS:
            raise SystemExit(f"--mix: unknown task {k!r} (tasks: {', '.join(tasks.WEIGHTS)})")
        tasks.WEIGHTS[k] = int(v)
    run_dir = os.path.join(a.out_dir, "runs", a.run)
    os.makedirs(run_dir, exist_ok=True)
    os.makedirs(os.path.join(a.out_dir, "logs"), exist_ok=True)
    log_path = os.path.join(a.out_dir, "logs", f"{a.run}.log")
    ckpt_path = os.path.join(run_dir, "ckpt.pt")

    tok_json = open(a.tokenizer).read()
    tok = Tokenizer.from_str(tok_json)
    cfg = Config(**{k: getattr(a, k) for k in Config().to_dict() if k != "n_vocab"},
                 n_vocab=tok.get_vocab_size())
    torch.manual_seed(a.seed)
    random.seed(a.seed)
    model = BitNet(cfg)
    if a.float:
        for _, lin in model.linears():
            lin.forward = lambda x, lin=lin: torch.nn.functional.linear(x, lin.weight)
    lin = [p for n, p in model.named_parameters() if p.dim() == 2 and "token_embd" not in n]
    rest = [p for n, p in model.named_parameters() if not (p.dim() == 2 and "token_embd" not in n)]
    opt = torch.optim.AdamW([{"params": lin, "weight_decay": a.wd}, {"params": rest, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    step, elapsed = 0, 0.0
    if a.resume and os.path.exists(ckpt_path):
        ck = torch.load(ckpt_path, weights_only=False)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step, elapsed = ck["step"], ck["elapsed"]
        torch.set_rng_state(ck["torch_rng"])
    elif a.resume:
        raise SystemExit(f"--resume: no checkpoint at {ckpt_path}")
    elif a.init_gguf:
        init_from_gguf(model, a.init_gguf)
    log = open(log_path, "a")

    def say(msg):
        print(msg, flush=True)
        log.write(msg + "\n")
        log.flush()

    def save(path):
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                    "elapsed": elapsed, "config": cfg.to_dict(), "args": vars(a),
                    "tokenizer": tok_json, "torch_rng": torch.get_rng_state()}, path + ".tmp")
        os.replace(path + ".tmp", path)

    n_params = sum(p.numel() for p in model.parameters())
    n_lin = sum(p.numel() for p in lin)
    say(f"# run {a.run} {'resumed at step ' + str(step) if step else 'start'}: "
        f"{json.dumps(cfg.to_dict())} params {n_params} (ternary {n_lin}) args {json.dumps(vars(a))}")
    model.train()
    t0, tokens, loss_acc = time.time(), 0, 0.0
    while step < a.steps:
        lr = lr_at(step, a)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.param_groups[0]["weight_decay"] = a.wd if step < a.steps // 2 else 0.0
        ids, tgt = make_batch(tok, a.seed, step, a.batch, a.pool)
        logits = model(ids)
        loss = F.cross_entropy(logits.reshape(-1, cfg.n_vocab), tgt.reshape(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens += ids.numel()
        loss_acc += loss.item()
        if step % 50 == 0:
            dt = time.time() - t0
            elapsed += dt
            say(f"step {step} loss {loss_acc / 50:.4f} lr {lr:.2e} tok/s {tokens / dt:.0f} "
                f"elapsed {elapsed / 60:.1f} min")
            t0, tokens, loss_acc = time.time(), 0, 0.0
        if step % a.ckpt_every == 0 or step == a.steps:
            save(ckpt_path)
        if step % a.eval_every == 0 or step == a.steps:
            te = time.time()
            limit = a.final_limit if step == a.steps else a.eval_limit
            r = heldout_eval(model, tok, limit)
            accs = " ".join(f"{t} {100 * x['accuracy']:.1f}" for t, x in r["tasks"].items())
            say(f"eval step {step} held-out exact match (%): {accs} | overall {100 * r['overall']:.1f} "
                f"({time.time() - te:.0f} s)")
            t0 = time.time()
        if a.stop_after is not None and step == a.stop_after and step < a.steps:
            save(ckpt_path)
            say(f"# stopped at step {step} (--stop-after); continue with --resume")
            return
    save(os.path.join(run_dir, "final.pt"))
    say(f"# done: {step} steps, {elapsed / 60:.1f} min of training")


if __name__ == "__main__":
    main()
