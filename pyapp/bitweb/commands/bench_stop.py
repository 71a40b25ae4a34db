"""`bitweb bench stop MODEL [--prompt-tokens 2000] [--stop-at 2.5] [--before] [--json]`: how long
the GPU stays busy after a Stop that comes during a long prompt's prefill.

The prompt (--prompt-tokens, default 2000) is prefilled in chunks of the engine's prefill rows
(64); a Stop is asked for --stop-at chunk times after the prefill starts (default 2.5: half way
through the third chunk; one chunk's time is measured first, warm). generate() sees it at its
next check between chunks (Engine._bounded: at most PREFILL_IN_FLIGHT chunks on the queue) and
returns; the figure is the time from the Stop to the GPU being idle (dev.sync() after generate
returns), in ms and in chunk times. --before also runs the prefill as it was before the bound (every
chunk submitted at once, no check between them) on the same engine: the GPU then runs every chunk
still queued. Without --before that figure is estimated as (chunks after the Stop) x chunk time.
Natively the bound's wait is a sync (the queue is empty at each check); in the browser it is
queue.onSubmittedWorkDone, one chunk still running at a check, so there the bound is 2 chunks."""
from __future__ import annotations

import time

from bitweb.bench import BenchError, prompt_for, sig


async def run(args) -> dict:
    """The CLI's run (commands/bench.py report: the model checked, the result printed)."""
    from bitweb import gpu
    from bitweb.gguf import FileSource, open_gguf
    dev = await gpu.request_device(args.backend)
    gf = open_gguf(args.model)
    with FileSource(args.model) as src:
        return await bench_stop(dev, gf, src, prompt_tokens=args.prompt_tokens or 2000, stop_at=args.stop_at,
                                before=args.before, activations=args.activations)


async def bench_stop(dev, gf, src, prompt_tokens: int = 2000, stop_at: float = 2.5, before: bool = False,
                     activations: str = "a8") -> dict:
    from bitweb.engine import PREFILL_IN_FLIGHT, Engine
    from bitweb.sampling import SamplingParams
    eng = await Engine.load(dev, gf, src, activations=activations, max_context=prompt_tokens + 8)
    try:
        if eng.n_ctx < prompt_tokens + 1:
            raise BenchError(f"--prompt-tokens {prompt_tokens}: the model's context is {eng.n_ctx}")
        C = eng.prefill_rows
        ids = prompt_for(eng.tokenizer, prompt_tokens)
        n_chunks = -(-len(ids) // C)
        chunk_ms = []
        for _ in range(1):                  # one chunk of C rows and its first token (the plans exist: warm)
            eng.reset()
            t0 = time.perf_counter()
            await eng.generate(ids[:C], SamplingParams(), 1, ignore_eos=True)
            await dev.sync()
            chunk_ms.append((time.perf_counter() - t0) * 1e3)
        t_chunk = chunk_ms[-1]

        async def stopped_run():
            eng.reset()
            runs0 = dev.counters["plan_runs"]
            t0 = time.perf_counter()
            t_stop = t0 + stop_at * t_chunk / 1e3
            res = await eng.generate(ids, SamplingParams(), 1, ignore_eos=True,
                                     should_stop=lambda: time.perf_counter() >= t_stop)
            t_ret = time.perf_counter()
            await dev.sync()
            t_idle = time.perf_counter()
            late = max(0.0, t_idle - t_stop) * 1e3
            return {"stop_reason": res.stop_reason, "chunks_run": dev.counters["plan_runs"] - runs0,
                    "stop_to_return_ms": sig(max(0.0, t_ret - t_stop) * 1e3), "stop_to_idle_ms": sig(late),
                    "stop_to_idle_chunks": sig(late / t_chunk, 3)}
        after = await stopped_run()
        out = {"bench": "stop", "device": dev.describe(), "model": eng.cfg.summary(), "activations": activations,
               "prompt_tokens": len(ids), "prefill_rows": C, "chunks": n_chunks, "in_flight": PREFILL_IN_FLIGHT,
               "chunk_ms": sig(t_chunk), "stop_at_chunks": stop_at, "bounded": after}
        out["unbounded_estimate_ms"] = sig((n_chunks - stop_at) * t_chunk)
        out["unbounded_estimate_chunks_after_stop"] = sig(n_chunks - stop_at, 3)
        if before:
            async def all_at_once(units, should_stop=None):     # the prefill before the bound
                for unit in units:
                    await unit()
                return len(units)
            eng._bounded = all_at_once
            try:
                out["unbounded"] = await stopped_run()
            finally:
                del eng._bounded
        return out
    finally:
        eng.close()


def describe(r: dict) -> str:
    b = r["bounded"]
    lines = [f"# {r['device']}", f"# {r['model']}; {r['activations']} activations",
             f"prompt {r['prompt_tokens']} tokens = {r['chunks']} chunks of {r['prefill_rows']} rows; "
             f"one chunk {r['chunk_ms']} ms; Stop at {r['stop_at_chunks']} chunk times",
             f"bounded ({r['in_flight']} in flight): {b['chunks_run']} chunks run; Stop -> generate returns "
             f"{b['stop_to_return_ms']} ms; Stop -> GPU idle {b['stop_to_idle_ms']} ms "
             f"({b['stop_to_idle_chunks']} chunk times)"]
    u = r.get("unbounded")
    if u:
        lines.append(f"all chunks at once (before): {u['chunks_run']} chunks run; Stop -> GPU idle "
                     f"{u['stop_to_idle_ms']} ms ({u['stop_to_idle_chunks']} chunk times)")
    else:
        lines.append(f"all chunks at once (before), estimated: Stop -> GPU idle ~{r['unbounded_estimate_ms']} ms "
                     f"({r['unbounded_estimate_chunks_after_stop']} chunk times)")
    return "\n".join(lines)
