"""The per-token floor: `python -m bitweb bench floor MODEL [--json]` (stdlib only: the same code runs
in Chromium through Pyodide, web/dev/bench.html?floor=1). Where a decode token's wall time goes, from
one run on one adapter:

    wall        median step of greedy decode, one step ahead of the host (as the app decodes) and
                one step at a time (Engine.overlap off: GPU, host and read-back in series), two
                runs of each, alternated
    gpu         the decode plan's GPU time, one compute pass (time_plan: timestamps where the
                adapter has them, else wall clock over batches); `gpu_summed`: each dispatch timed
                alone (its own pass) and summed, split per kernel family (shader:entry)
    overhead    wall - gpu: encoding, submission, the token's read-back, Python
    floor       an empty token: as many 1-workgroup dispatches of a shader that reads 16 bytes
                (stream.wgsl) as the plan has, run as a decode step is (a params write, encode,
                submit, a 4-byte read, one step at a time): its wall time is what a token costs with
                no arithmetic; the same with one dispatch gives the fixed part (write, submit,
                read-back), and with 4x the plan's dispatches the slope: the cost of one more
                dispatch (host and device)

So a step's wall time ~ floor + the plan's arithmetic; fusing k dispatches saves ~ k x per-dispatch
cost. Everything is measured at the mean decode position of the run (params.pos).
"""
from __future__ import annotations

import time

from bitweb.bench import BenchError, median, prompt_for, sig, timed, timing

FAMILY_NOTES = {"embedding": "embedding row", "lmhead": "LM head", "sampling": "argmax"}


def family(p) -> str:
    """A dispatch's kernel family: shader:entry (e.g. bitlinear:main, attention:scores)."""
    return f"{p.key[0]}:{p.key[1]}"


async def _empty_steps(dev, counts, steps: int) -> dict:
    """Empty tokens of each count of dispatches, run as a decode step is and alternated (so a
    change of load meets all): {count: (median wall ms, GPU ms)}."""
    src = dev.create_buffer(16, label="floor src")
    out = dev.create_buffer(16, label="floor out")
    params = dev.create_buffer(16, label="floor params")
    try:
        p = await dev.pipeline("stream", "main", {"WG": 64})
        bg = dev.bind_group(p, [src, out])
        plans = {k: dev.plan([(p, bg, (1, 1, 1))] * k) for k in counts}
        ts = {k: [] for k in plans}
        for i in range(steps + 1):
            for k, plan in plans.items():
                t0 = time.perf_counter()
                dev.write_buffer(params, 0, bytes(16))
                dev.run(dev.encode(plan))
                await dev.read(out, 0, 4)
                if i:                             # the first: warm-up
                    ts[k].append(time.perf_counter() - t0)
        return {k: (median(ts[k]) * 1e3, await timed(dev, plans[k], 5) * 1e3) for k in plans}
    finally:
        for b in (src, out, params):
            b.destroy()


async def _wall_steps(eng, ids, tokens: int, rounds: int = 2) -> tuple[dict, object]:
    """Median decode step (ms) one step ahead (True) and one step at a time (False): `rounds` runs of
    each, alternated (so a change of load meets both), their steps pooled."""
    from bitweb.sampling import SamplingParams
    steps, res = {True: [], False: []}, None
    for r in range(rounds):
        for overlap in (True, False) if r % 2 == 0 else (False, True):
            eng.reset()
            eng.overlap = overlap
            stamps = []
            res = await eng.generate(ids, SamplingParams(), tokens, ignore_eos=True,
                                     on_token=lambda *_: stamps.append(time.perf_counter()))
            steps[overlap] += [b - a for a, b in zip(stamps, stamps[1:])]
    eng.overlap = True
    return {k: median(v) * 1e3 if v else res.decode_ms_per_token for k, v in steps.items()}, res


async def bench_floor(dev, gf, src, tokens: int = 16, prompt_tokens: int = 16, activations: str = "a8",
                      repeats: int | None = 3, kv_cache: str | None = None, log=None) -> dict:
    """The figures of the module docstring as a dict (describe_floor prints them)."""
    from bitweb.engine import Engine
    from bitweb.kernels import ops
    from bitweb.sampling import SamplingParams
    if tokens < 2 or prompt_tokens < 1:
        raise BenchError("bench floor needs --tokens >= 2 and --prompt-tokens >= 1")
    kw = {"kv_cache": kv_cache} if kv_cache else {}
    eng = await Engine.load(dev, gf, src, activations=activations, **kw)
    try:
        if prompt_tokens + tokens > eng.n_ctx:
            raise BenchError(f"--prompt-tokens {prompt_tokens} + --tokens {tokens} > the context ({eng.n_ctx})")
        ids = prompt_for(eng.tokenizer, prompt_tokens)
        await eng.generate(ids, SamplingParams(), 4, ignore_eos=True)    # warm-up: both overlapped plans built
        walls, res = await _wall_steps(eng, ids, tokens)
        wall_ahead, wall_serial = walls[True], walls[False]
        pos = len(ids) + tokens // 2
        dev.write_buffer(eng.buf["params"], 0, ops.params(m=1, pos=pos))
        plan = eng.plan_greedy
        n = plan.n_dispatches
        gpu_ms = await timed(dev, plan, max(repeats or 5, 5)) * 1e3
        fam_ms, fam_n = {}, {}
        for item in plan.items:
            f = family(item[0])
            fam_ms[f] = fam_ms.get(f, 0.0) + await timed(dev, dev.plan([item]), repeats) * 1e3
            fam_n[f] = fam_n.get(f, 0) + 1
        summed = sum(fam_ms.values())
        enc = []
        for _ in range(9):
            t0 = time.perf_counter()
            dev.encode(plan)                      # (never submitted: a browser's encode is a no-op)
            enc.append(time.perf_counter() - t0)
        big = 4 * n                               # the slope over many dispatches: the fixed part's noise matters less
        empty = await _empty_steps(dev, (n, 1, big), 41)
        (empty_ms, empty_gpu), (one_ms, _), (big_ms, _) = empty[n], empty[1], empty[big]
        per_us = (big_ms - one_ms) / (big - 1) * 1e3
        out = {
            "bench": "floor", "device": dev.describe(), "timing": timing(dev), "model": eng.cfg.summary(),
            "activations": eng.activations, "kv_cache": eng.kv_cache, "prompt_tokens": len(ids),
            "decoded_tokens": max(1, len(res.ids) - 1), "position": pos,
            "dispatches_per_token": n, "dispatches_per_layer": eng.dispatches_per_layer,
            "wall_ms": sig(wall_ahead), "wall_serial_ms": sig(wall_serial),
            "gpu_ms": sig(gpu_ms), "gpu_summed_ms": sig(summed),
            "overhead_ms": sig(wall_ahead - gpu_ms), "overhead_share": sig(max(0.0, wall_ahead - gpu_ms) / wall_ahead, 3),
            "serial_overhead_ms": sig(wall_serial - gpu_ms),
            "encode_ms": sig(median(enc) * 1e3),
            "floor_ms": sig(empty_ms), "floor_gpu_ms": sig(empty_gpu),
            "fixed_ms": sig(one_ms), "slope_dispatches": big, "slope_ms": sig(big_ms), "per_dispatch_us": sig(per_us),
            "floor_share": sig(min(1.0, empty_ms / wall_serial), 3),
            "families": [{"family": f, "dispatches": fam_n[f], "ms": sig(ms), "share": sig(ms / summed, 3) if summed else 0.0}
                         for f, ms in sorted(fam_ms.items(), key=lambda kv: -kv[1])],
        }
        if log:
            log(describe_floor(out))
        return out
    finally:
        eng.close()


def describe_floor(r: dict) -> str:
    lines = [f"{r['model']}; {r['activations']} activations; {r['device']} ({r['timing']})",
             f"  {r['dispatches_per_token']} dispatches per token ({r['dispatches_per_layer']:g} per layer); "
             f"position {r['position']}",
             f"  wall {r['wall_ms']} ms per token one step ahead, {r['wall_serial_ms']} ms one step at a time",
             f"  GPU {r['gpu_ms']} ms (plan in one pass; {r['gpu_summed_ms']} ms summed over dispatches timed alone)",
             f"  overhead (wall - GPU) {r['overhead_ms']} ms ({r['overhead_share']:.0%}); one step at a time "
             f"{r['serial_overhead_ms']} ms; encoding the plan {r['encode_ms']} ms",
             f"  floor: an empty token of {r['dispatches_per_token']} dispatches {r['floor_ms']} ms wall "
             f"(GPU {r['floor_gpu_ms']} ms) = {r['floor_share']:.0%} of a serial step; 1 dispatch {r['fixed_ms']} ms, "
             f"{r['slope_dispatches']} dispatches {r['slope_ms']} ms: {r['per_dispatch_us']} us per extra dispatch",
             "  kernel families (dispatches timed alone):"]
    for f in r["families"]:
        lines.append(f"    {f['ms']:9.3f} ms {f['share']:6.1%}  x{f['dispatches']:<4} {f['family']}")
    return "\n".join(lines)
