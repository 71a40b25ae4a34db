"""Benchmarks: `python -m bitweb bench kernels|decode|load|tokenizer [MODEL] [--json]` (stdlib only,
so the same code runs in the browser through Pyodide: web/dev/bench.html).

Every ratio comes from one run on one adapter: a kernel is compared with a plain streaming read
(shaders/stream.wgsl) of the same number of bytes measured in the same run, never with a figure
from elsewhere.

Timing: `dev.time_plan(plan, repeats)`: GPU timestamp queries (timestampWrites around each run's
compute pass) where the adapter has `timestamp-query`, else wall clock over a batch of runs in one
submission followed by a sync; the median over the repeats (see bitweb.gpu.Device.time_plan).

kernels  `bench_kernels(dev, shapes=SHAPES, quick=False)` -> {"bench", "device", "timing", "results"}
    one result per (kernel, variant, shape):
      kernel      "<format> f32" | "<format> a8" | "<format> q8" (bitlinear gemv, norm fused, as the engine runs a linear:
                  every linear format in f32, the Format.a8 ones (ternary, binary) in A8 and the Format.vec_dot ones (q8) too; not over
                  maxStorageBufferBindingSize) | "lmhead F16" | "lmhead Q8_0" (blocks.head_gemv's LM
                  head: lmhead.wgsl for n_in <= 4096, else F16 by dense gemv) | "stream"
      variant     what runs (bitlinear / lmhead.variant(); dense: its reduction; stream: workgroups)
      shape       "n_in x rows" (weight rows = outputs); stream: the byte count it was run over
      median_ms   median time of one dispatch (sharded dense weights: all shards of the shape)
      bytes       weight bytes read (the GGUF tensor bytes; activations are not counted)
      gbps        bytes / median time (1e9 bytes per second)
      stream_gbps the best plain streaming read of `bytes` bytes on this adapter, this run
      p1_vs_stream  gbps / stream_gbps (P1: 1.0 = reads its weights as fast as a plain read)
      p2_vs_f16   median_ms of "F16 f32" of the same shape (the engine's F16 linear) / median_ms (P2
                  speed-up; None where F16 did not run)
    Shapes (n_in x rows) are the 2B4T linears: 2560x2560 (q, o), 2560x640 (k, v), 2560x6912 (gate,
    up), 6912x2560 (down), and 2560x16384, an LM-head shard (128256 rows of F16 are 8 such shards
    at most; 2560 x 16384 F16 is 80 MiB). Weights are random but valid (finite scales).
decode   `bench_decode(dev, gf, src, tokens=32, prompt_tokens=32, activations="a8", lm_head=None,
    overlap=True)` after a warm-up generate (pipelines built on first use), with an empty KV cache
    (overlap=False: Engine.overlap off, one step at a time, for a before/after in one run):
    prefill tokens/s, decode ms/token and tokens/s (greedy, ignore EOS), dispatches per layer and
    per token, host calls per token, the median step wall time (between on_token calls), GPU ms
    per step (time_plan of the decode plan, median; measured separately, so on a shared CPU
    adapter it can differ from the step time by the load of the moment), host ms per step =
    median time from a step's token read returning to the next plan submitted (Python, params
    writes, encoding, submit: HostClock) + the bridge's round trip (a 1-workgroup dispatch + a
    4-byte read, minus its GPU time), host share = host ms / median step, host busy ms = median
    Python time per step outside the token read's wait (from a read returning to the next read
    call; with overlap the part after the submit runs while the GPU computes the next step, so it
    costs step time only where it exceeds the GPU's), bytes read per token (weights + LM head +
    one embedding row + the KV cache at the mean decode position), the streaming bandwidth over
    that many bytes (this run) and step time / roofline time (roofline = bytes per token /
    streaming bandwidth).
load     `bench_load(dev, path)`: Engine.load(wait_prefill=False) time (upload, the decode kernels'
    compile), ready_s (load + the first token of a 7-token prompt: the app's first reply; ready_cpu_s:
    the process's CPU time, all threads, for the same span: steadier than wall time on a shared CPU),
    prefill_kernels_s (from the start until the prefill kernels are compiled: on lavapipe by a
    second device, Device.warm), the distinct pipelines and the load's stages (ms), file bytes/s,
    peak extra memory: tracemalloc peak of the Python heap during the load, and the growth of the
    process's peak resident set (ru_maxrss, CPython on Linux/macOS). On CPU adapters (lavapipe) GPU
    buffers live in process memory, so the RSS growth includes the model itself.
tokenizer  `bench_tokenizer(md)`: pure-Python BPE speed (`bench_encode`: load, cold / warm encode, decode
    tokens/s), and the same vocabulary under the qwen2 pre-tokenizer against llama-bpe.
"""
from __future__ import annotations

import random
import struct
import sys
import time

from bitweb import formats
from bitweb.generation import kv_bytes
from bitweb.kernels import bitlinear, dense, lmhead
from bitweb.tokenizer import Tokenizer

SHAPES = ((2560, 2560), (2560, 640), (2560, 6912), (6912, 2560), (2560, 16384))
QUICK_SHAPES = ((256, 256), (512, 128))
LINEARS = (formats.F16,) + tuple(f for f in bitlinear.FORMATS if f is not formats.F16)  # F16 first: P2's base
LMHEAD = (formats.F16, formats.Q8_0)          # the LM head: lmhead.wgsl (n_in <= 4096), else F16 by dense gemv
STREAM_WG = 256
STREAM_GRIDS = (16, 64, 256, 1024, 4096)      # workgroup counts tried for the streaming read
CHUNK = 1 << 20                               # upload chunk (bytes) for generated weights


class BenchError(ValueError):
    pass


def parse_shapes(text: str) -> tuple:
    """"2560x2560,2560x640" -> ((2560, 2560), (2560, 640)): kernel shapes as n_in x rows."""
    out = []
    for part in text.split(","):
        n_in, x, rows = part.strip().lower().partition("x")
        if not (x and n_in.isdigit() and rows.isdigit() and int(n_in) > 0 and int(rows) > 0):
            raise BenchError(f"shape {part.strip()!r}: expected N_INxROWS, e.g. 2560x640")
        if int(n_in) % 256:
            raise BenchError(f"shape {part.strip()!r}: n_in must be a multiple of 256 (a TQ block)")
        out.append((int(n_in), int(rows)))
    return tuple(out)


# ---------------------------------------------------------------------------- weights
def pattern(fmt, seed: int = 0, target: int = 1 << 16) -> bytes:
    """About `target` bytes of whole random blocks of fmt (Format.random_block: valid codes, finite
    scales), a multiple of 4 bytes, tiled to fill a tensor."""
    fmt = formats.get(fmt)
    rng = random.Random(f"{fmt.name}:{seed}")
    one = fmt.random_block(rng)
    n = max(1, target // len(one))
    while (n * len(one)) % 4:
        n += 1
    return b"".join([one] + [fmt.random_block(rng) for _ in range(n - 1)])


def tensor_bytes(fmt, n_in: int, rows: int) -> int:
    fmt = formats.get(fmt)
    if fmt in dense.WTYPES:
        return rows * dense.row_bytes(fmt, n_in)
    return fmt.nbytes(n_in * rows)


def _fill(dev, buf, pat: bytes, nbytes: int) -> None:
    """Write nbytes of the tiled pattern into buf (chunks of ~CHUNK bytes, zero-padded to 4)."""
    chunk = pat * max(1, CHUNK // len(pat))
    for pos in range(0, nbytes, len(chunk)):
        part = chunk[:min(len(chunk), nbytes - pos)]
        if len(part) % 4:
            part += bytes(4 - len(part) % 4)
        dev.write_buffer(buf, pos, part)


def upload_weight(dev, fmt, n_in: int, rows: int, seed: int = 0, head: bool = False) -> list:
    """A random valid weight of `rows` x `n_in` in fmt (a Format): [(r0, r1, Buffer)] (an LM head,
    head=True, sharded by whole rows to fit maxStorageBufferBindingSize; a linear in one buffer)."""
    fmt = formats.get(fmt)
    pat = pattern(fmt, seed)
    if head:
        rb = dense.row_bytes(fmt, n_in)
        out = []
        for r0, r1 in dense.shard_rows(rows, rb, dev.max_binding):
            b = dev.create_buffer((r1 - r0) * rb, label=f"bench {fmt.name} [{r0}:{r1}]")
            _fill(dev, b, pat, (r1 - r0) * rb)
            out.append((r0, r1, b))
        return out
    nbytes = tensor_bytes(fmt, n_in, rows)
    b = dev.create_buffer(nbytes, label=f"bench {fmt.name}")
    tail = fmt.tail(0.01)  # after the blocks (I2_S: the f32 tensor scale and 28 zero bytes)
    _fill(dev, b, pat, nbytes - len(tail))
    if tail:
        dev.write_buffer(b, nbytes - len(tail), tail)
    return [(0, rows, b)]


def _f32s(values) -> bytes:
    values = list(values)
    return struct.pack(f"<{len(values)}f", *values)


# ---------------------------------------------------------------------------- timing helpers
def sig(x: float, n: int = 4) -> float:
    """x rounded to n significant digits (JSON figures)."""
    return float(f"{x:.{n}g}")


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


async def timed(dev, plan, repeats: int | None, budget_s: float = 0.25) -> float:
    """Median seconds per run; repeats None: as many as fit budget_s (3..30) after a probe."""
    if repeats is None:
        probe = await dev.time_plan(plan, 1)
        repeats = int(max(3, min(30, budget_s / max(probe, 1e-6))))
    t = await dev.time_plan(plan, repeats)
    if not t > 0:
        raise BenchError(f"a timed run took {t} s: the GPU work failed (out of GPU memory?); "
                         f"{plan.n_dispatches} dispatches")
    return t


STREAM_MAX = 256 << 20       # larger reads are timed over this many bytes (far beyond any cache)
STREAM_PART = 128 << 20      # bytes per buffer / dispatch


class Stream:
    """The best plain streaming read (shaders/stream.wgsl) of n bytes, cached per byte count.
    Above STREAM_MAX bytes the read is timed over STREAM_MAX bytes and scaled (the rate does not
    depend on the size once it is far beyond the caches; the 2B4T decode needs 1.18 GB, which
    next to the model itself would not fit a browser's GPU process)."""

    def __init__(self, dev, repeats=None):
        self.dev, self.repeats = dev, repeats
        self.best: dict = {}       # n -> (seconds, grid)
        self._out = None

    async def seconds(self, nbytes: int):
        n = max(16, nbytes // 16 * 16)
        if n > STREAM_MAX:
            t, grid = await self.seconds(STREAM_MAX)
            return t * n / STREAM_MAX, grid
        if n in self.best:
            return self.best[n]
        dev = self.dev
        if self._out is None:
            self._out = dev.create_buffer(16, label="stream out")
        per = min(dev.max_binding, STREAM_PART) // 16 * 16     # several buffers, one dispatch each
        parts = [(dev.create_buffer(min(per, n - o), label="stream src"), min(per, n - o)) for o in range(0, n, per)]
        p = await dev.pipeline("stream", "main", {"WG": STREAM_WG})
        pat = pattern("F32", 7)
        for b, size in parts:
            _fill(dev, b, pat, size)     # touched pages: never-written memory can read as free
        groups = [dev.bind_group(p, [b, self._out]) for b, _ in parts]
        words = min(per, n) // 16
        grids = [g for g in STREAM_GRIDS if (g - 1) * STREAM_WG < words] or [1]
        best = None
        for g in grids:
            t = await timed(self.dev, dev.plan([(p, bg, (g, 1, 1)) for bg in groups]), self.repeats)
            if best is None or t < best[0]:
                best = (t, g)
        for b, _ in parts:
            b.destroy()
        self.best[n] = best
        return best


# ---------------------------------------------------------------------------- kernels
def linear_variants(dev, fmt, n_in: int, rows: int, a8: bool, quick: bool) -> list:
    """[(variant, Step)]: the device's default, and what else this device can run."""
    opts = [{}]
    if not quick:
        if dev.caps.subgroups:
            opts.append({"subgroups": False})
        if a8 and dev.caps.dot4:
            opts.append({"dot4": False})
    out, seen = [], set()
    for kw in opts:
        step = bitlinear.gemv(fmt, n_in, rows, a8=a8, norm=True, dev=dev, **kw)
        v = bitlinear.variant(step, dev)
        if v not in seen:
            seen.add(v)
            out.append((v, step))
    return out


def head_steps(dev, wtype, n_in: int, rows: int, shards: list):
    """(variant, Steps) of the engine's decode LM head (bitweb.blocks.head_gemv), or None where the
    engine has none for this type and shape."""
    if lmhead.supported(wtype, n_in):
        steps = lmhead.gemv(wtype, n_in, rows, shards=shards, dev=dev)
        return lmhead.variant(steps[0], dev), steps
    if wtype in dense.WTYPES:
        return f"dense gemv {'subgroup' if dev.caps.subgroups else 'shared'}", dense.gemv(
            wtype, n_in, rows, shards=shards, norm=True)
    return None


async def bench_kernels(dev, shapes=SHAPES, quick: bool = False, repeats: int | None = None,
                        linears=LINEARS, log=None) -> dict:
    """The GEMV families at each shape; see the module docstring for the fields. linears: the linear
    formats to run (Formats, or their names; F16 is always run first, P2's base)."""
    linears = [formats.F16] + [f for f in map(formats.get, linears) if f is not formats.F16]
    stream = Stream(dev, repeats)
    results = []

    def say(r):
        results.append(r)
        if log:
            log(row_text(r))

    for n_in, rows in shapes:
        shape = f"{n_in}x{rows}"
        x = dev.create_buffer(4 * n_in, label="x")
        dev.write_buffer(x, 0, _f32s(((i * 37) % 101 - 50) / 25.0 for i in range(n_in)))
        norm = dev.create_buffer(4 * n_in, label="norm")
        dev.write_buffer(norm, 0, _f32s([1.0] * n_in))
        mult = dev.create_buffer(16, label="mult")
        dev.write_buffer(mult, 0, _f32s([1.0] * 4))
        y = dev.create_buffer(4 * rows, label="y")
        f16_ms = None

        async def record(kernel, variant, items, nbytes):
            nonlocal f16_ms
            t = await timed(dev, dev.plan(items), repeats)
            ts, grid = await stream.seconds(nbytes)
            ms = t * 1e3
            if kernel == "F16 f32" and f16_ms is None:        # the engine's F16 linear: P2's base
                f16_ms = ms
            say({"kernel": kernel, "variant": variant, "shape": shape, "median_ms": sig(ms),
                 "bytes": nbytes, "gbps": sig(nbytes / t / 1e9), "stream_gbps": sig(nbytes / ts / 1e9),
                 "p1_vs_stream": sig(ts / t, 3), "p2_vs_f16": sig(f16_ms / ms, 3) if f16_ms else None})

        for fmt in linears:
            if tensor_bytes(fmt, n_in, rows) > dev.max_binding:
                continue                    # a linear the engine could not bind either
            (_, _, w), = upload_weight(dev, fmt, n_in, rows)
            bufs = {"x": x, "norm": norm, "mult": mult, "y": y, "w0": w}
            for a8 in (False, True) if fmt.a8 or fmt.vec_dot else (False,):
                for variant, step in linear_variants(dev, fmt, n_in, rows, a8, quick):
                    mode = ("q8" if fmt.vec_dot else "a8") if a8 else "f32"    # q8: ggml's q8_0 / q8_1 blocks
                    await record(f"{fmt.name} {mode}", variant, [await step.instantiate(dev, bufs)],
                                 w.size)
            w.destroy()
        for wtype in LMHEAD:
            shards = upload_weight(dev, wtype, n_in, rows, head=True)
            head = head_steps(dev, wtype, n_in, rows, [(a, b) for a, b, _ in shards])
            if head:
                bufs = {"x": x, "y": y, "norm": norm}
                bufs.update({f"w{i}": b for i, (_, _, b) in enumerate(shards)})
                await record(f"lmhead {wtype.name}", head[0], [await s.instantiate(dev, bufs) for s in head[1]],
                             tensor_bytes(wtype, n_in, rows))
            for *_, b in shards:
                b.destroy()
        for b in (x, norm, mult, y):
            b.destroy()
    for n, (t, grid) in sorted(stream.best.items()):
        say({"kernel": "stream", "variant": f"stream WG{STREAM_WG} x {grid} workgroups", "shape": f"{n} bytes",
             "median_ms": sig(t * 1e3), "bytes": n, "gbps": sig(n / t / 1e9), "stream_gbps": sig(n / t / 1e9),
             "p1_vs_stream": 1.0, "p2_vs_f16": None})
    return {"bench": "kernels", "device": dev.describe(), "timing": timing(dev), "results": results}


def timing(dev) -> str:
    return "timestamp-query" if dev.caps.timestamps else "wall clock (one submission per batch + sync)"


# ---------------------------------------------------------------------------- decode
def bytes_per_token(eng, pos: float) -> dict:
    """Bytes a decode step reads at position pos: weights (every block tensor, output_norm),
    the LM head as loaded, one embedding row, K and V rows 0..pos of every layer (of the cache's
    value type)."""
    m, cfg = eng.model, eng.cfg
    blocks = sum(ti.nbytes for ti in m.tensors() if ti.name.startswith("blk."))
    head = sum(b.size for *_, b in eng.shards[m.lm_head.name])
    table_type = getattr(eng, "table_types", {}).get(m.token_embd.name, m.token_embd.format)
    embd = dense.row_bytes(table_type, cfg.n_embd)
    kv = kv_bytes(cfg, pos + 1, eng.kv_cache)
    total = blocks + m.output_norm.nbytes + head + embd + kv
    return {"total": int(total), "blocks": blocks, "lm_head": head, "embedding_row": embd, "kv_cache": int(kv),
            "lm_head_share": round(head / total, 4)}


class HostClock:
    """Records, per decode step, the host time during which the GPU has nothing to run: from the
    return of one step's token read to the return of the next dev.run() (Python bookkeeping,
    params writes, plan encoding and submission): `gaps`; and the host's whole time per step
    outside the read's wait, from a read returning to the next read call: `busy`. Wraps dev.run /
    dev.read while active."""

    def __init__(self, dev):
        self.dev, self.gaps, self.busy, self._t, self._r = dev, [], [], None, None

    def __enter__(self):
        run, read = self.dev.run, self.dev.read

        def timed_run(work):
            run(work)
            if self._t is not None:
                self.gaps.append(time.perf_counter() - self._t)
                self._t = None

        async def timed_read(*a, **k):
            if self._r is not None:
                self.busy.append(time.perf_counter() - self._r)
            out = await read(*a, **k)
            self._t = self._r = time.perf_counter()
            return out
        self.dev.run, self.dev.read = timed_run, timed_read
        return self

    def __exit__(self, *exc):
        del self.dev.run, self.dev.read      # back to the class methods


async def round_trip_ms(dev, n: int = 15) -> float:
    """Median wall time of submitting a 1-workgroup dispatch and reading 4 bytes back, minus its
    GPU time: the bridge's fixed cost per step (submit, wake-up, map, copy)."""
    src, out = dev.create_buffer(16, label="round trip src"), dev.create_buffer(16, label="round trip")
    p = await dev.pipeline("stream", "main", {"WG": STREAM_WG})
    plan = dev.plan([(p, dev.bind_group(p, [src, out]), (1, 1, 1))])
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        dev.run(plan)
        await dev.read(out, 0, 4)
        ts.append(time.perf_counter() - t0)
    gpu_s = await dev.time_plan(plan, 5)
    src.destroy()
    out.destroy()
    return max(0.0, median(ts) - gpu_s) * 1e3


def prompt_for(tokenizer, n: int) -> list:
    ids = tokenizer.encode(bench_text())
    while len(ids) < n:
        ids += ids
    return ids[:n]


async def bench_decode(dev, gf, src, tokens: int = 32, prompt_tokens: int = 32, activations: str = "a8",
                       lm_head: str | None = None, repeats: int | None = None, log=None,
                       overlap: bool = True, kv_cache: str | None = None) -> dict:
    from bitweb.engine import Engine
    from bitweb.sampling import SamplingParams
    kw = {"lm_head": lm_head} if lm_head else {}
    if kv_cache:
        kw["kv_cache"] = kv_cache
    eng = await Engine.load(dev, gf, src, activations=activations, **kw)
    eng.overlap = overlap
    try:
        cfg = eng.cfg
        if prompt_tokens + tokens > eng.n_ctx:
            raise BenchError(f"--prompt-tokens {prompt_tokens} + --tokens {tokens} > the context ({eng.n_ctx})")
        ids = prompt_for(eng.tokenizer, prompt_tokens)
        await eng.generate(ids, SamplingParams(), 2, ignore_eos=True)     # warm-up: pipelines built on first use
        eng.reset()
        stamps = []
        with HostClock(dev) as clock:
            res = await eng.generate(ids, SamplingParams(), tokens, ignore_eos=True,
                                     on_token=lambda *_: stamps.append(time.perf_counter()))
        n_dec = max(1, len(res.ids) - 1)
        steps = [b - a for a, b in zip(stamps, stamps[1:])]
        step_ms = median(steps) * 1e3 if steps else res.decode_ms_per_token
        bridge_ms = await round_trip_ms(dev)
        host_ms = median(clock.gaps[-n_dec:]) * 1e3 + bridge_ms if clock.gaps else 0.0
        busy_ms = median(clock.busy[-n_dec:]) * 1e3 if clock.busy else 0.0
        gpu_ms = await timed(dev, eng.plan_greedy, repeats, budget_s=1.0) * 1e3
        bpt = bytes_per_token(eng, len(ids) + n_dec / 2)
        ts, _ = await Stream(dev, repeats).seconds(bpt["total"])
        stream_bps = (bpt["total"] // 16 * 16) / ts
        roof_ms = bpt["total"] / stream_bps * 1e3
        out = {
            "bench": "decode", "device": dev.describe(), "timing": timing(dev),
            "model": cfg.summary(), "activations": activations, "overlap": bool(overlap),
            "lm_head": lm_head or eng.model.lm_head.format.name,
            # the KV cache: value type, how it is stored here, bytes allocated (K and V, every layer, n_ctx)
            "kv_cache": eng.kv_cache, "kv_variant": eng.kv_variant, "n_ctx": eng.n_ctx,
            "kv_cache_bytes": eng.kv_bytes,
            "prompt_tokens": len(ids), "decoded_tokens": n_dec,
            "prefill_ms": res.prefill_ms, "prefill_tok_s": sig(len(ids) / res.prefill_ms * 1e3),
            "decode_ms_per_token": res.decode_ms_per_token,
            "decode_tok_s": sig(1e3 / res.decode_ms_per_token) if res.decode_ms_per_token else None,
            # prefill tokens/s over decode tokens/s, both from this one generate() call
            "prefill_over_decode": (sig(len(ids) / res.prefill_ms * res.decode_ms_per_token)
                                    if res.decode_ms_per_token and res.prefill_ms else None),
            "step_ms_median": sig(step_ms),
            "dispatches_per_layer": eng.dispatches_per_layer, "dispatches_per_token": res.dispatches_per_token,
            "host_calls_per_token": res.host_calls_per_token,
            "gpu_ms_per_token": sig(gpu_ms),
            "host_ms_per_token": sig(host_ms), "bridge_ms": sig(bridge_ms), "host_busy_ms": sig(busy_ms),
            "host_share": sig(min(1.0, host_ms / step_ms), 3) if step_ms else None,
            "bytes_per_token": bpt["total"], "bytes": bpt,
            "stream_gbps": sig(stream_bps / 1e9), "roofline_ms": sig(roof_ms),
            "step_vs_roofline": sig(step_ms / roof_ms) if roof_ms else None,
            "gpu_vs_roofline": sig(gpu_ms / roof_ms) if roof_ms else None,
        }
        if log:
            log(describe_decode(out))
        return out
    finally:
        eng.close()


def describe_decode(r: dict) -> str:
    return (f"{r['model']}\n  {r['activations']} activations, LM head {r['lm_head']}; KV cache {r['kv_variant']}, "
            f"{r['kv_cache_bytes'] / 2**20:.1f} MiB at {r['n_ctx']} positions; prompt {r['prompt_tokens']} tokens: "
            f"prefill {r['prefill_tok_s']} tok/s; decode {r['decode_ms_per_token']} ms/token ({r['decode_tok_s']} tok/s); "
            f"prefill / decode {r['prefill_over_decode']}\n"
            f"  {r['dispatches_per_layer']:g} dispatches per layer, {r['dispatches_per_token']:g} per token, "
            f"{r['host_calls_per_token']:g} host calls per token; "
            f"{'greedy one step ahead of the host' if r['overlap'] else 'one step at a time'}\n"
            f"  median step {r['step_ms_median']} ms; host {r['host_ms_per_token']} ms (bridge {r['bridge_ms']} ms; "
            f"Python per step {r['host_busy_ms']} ms): "
            f"host share {r['host_share']}; GPU time of the plan (measured apart) {r['gpu_ms_per_token']} ms\n"
            f"  {r['bytes_per_token'] / 1e6:.2f} MB per token (LM head {r['bytes']['lm_head_share']:.0%}); stream "
            f"{r['stream_gbps']} GB/s -> roofline {r['roofline_ms']} ms; step / roofline {r['step_vs_roofline']}, "
            f"GPU / roofline {r['gpu_vs_roofline']}")


# ---------------------------------------------------------------------------- load
async def bench_load(dev, path: str, activations: str = "a8", lm_head: str | None = None,
                     kv_cache: str | None = None) -> dict:
    import os
    import tracemalloc
    from bitweb.engine import Engine
    from bitweb.gguf import FileSource, open_gguf
    try:
        import resource
        rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)  # noqa: E731
    except ImportError:          # Pyodide
        rss = lambda: None        # noqa: E731
    size, marks, rss0 = os.path.getsize(path), {}, rss()
    tracemalloc.start()
    t0, c0 = time.perf_counter(), time.process_time()
    kw = dict({"lm_head": lm_head} if lm_head else {}, **({"kv_cache": kv_cache} if kv_cache else {}))
    with FileSource(path) as src:
        eng = await Engine.load(dev, open_gguf(path), src, activations=activations, wait_prefill=False,
                                progress=lambda stage, *_: marks.setdefault(stage, time.perf_counter()), **kw)
    t1 = time.perf_counter()
    (_, peak), _, rss1 = tracemalloc.get_traced_memory(), tracemalloc.stop(), rss()
    from bitweb.sampling import SamplingParams
    ids = eng.tokenizer.encode("What is the capital of France?")
    await eng.generate(ids, SamplingParams(), 1, ignore_eos=True)
    t2, c2, path_ = time.perf_counter(), time.process_time(), eng.prefill_path
    await eng.prefill_compiled
    t_compile = marks.get("compile", t1)
    out = {"bench": "load", "device": dev.describe(), "model": eng.cfg.summary(), "file_bytes": size,
           "kv_cache": eng.kv_variant, "n_ctx": eng.n_ctx, "kv_cache_bytes": eng.kv_bytes,
           "load_s": round(t1 - t0, 3), "upload_s": round(t_compile - t0, 3), "compile_s": round(t1 - t_compile, 3),
           "ready_s": round(t2 - t0, 3), "ready_cpu_s": round(c2 - c0, 3), "first_reply_prompt": f"{len(ids)} tokens, {path_}",
           "prefill_kernels_s": round(time.perf_counter() - t0, 3), "pipelines": eng.n_pipelines,
           "stages_ms": eng.stage_ms,
           "bytes_per_s": round(size / (t1 - t0)), "upload_bytes_per_s": round(size / max(t_compile - t0, 1e-9)),
           "python_heap_peak_bytes": peak, "rss_peak_growth_bytes": (rss1 - rss0) if rss0 is not None else None,
           "gpu_write_bytes": dev.counters["write_bytes"],
           "note": "tracemalloc was on during the load; ru_maxrss growth includes GPU buffers on CPU adapters"}
    eng.close()
    return out


# ---------------------------------------------------------------------------- text rows
HEADER = f"{'kernel':10} {'shape':>13} {'ms':>9} {'GB/s':>7} {'P1':>5} {'P2':>5}  variant"


def row_text(x: dict) -> str:
    p2 = f"{x['p2_vs_f16']:.2f}" if x["p2_vs_f16"] is not None else "-"
    return (f"{x['kernel']:10} {x['shape']:>13} {x['median_ms']:9.3f} {x['gbps']:7.2f} {x['p1_vs_stream']:5.2f} "
            f"{p2:>5}  {x['variant']}")


# ---------------------------------------------------------------------------- tokenizer

BENCH_TEXT = (
    "The quick brown fox jumps over the lazy dog. It's 2024, and we'll test 1234567 numbers, "
    "URLs like https://example.com/path?q=1, and code: def f(x): return x**2 + 1  # comment\n"
    "Ça va? Größe, naïve café — ¿Qué tal? Привет, как дела? 你好，世界！今天天气很好。"
    "こんにちは、世界。안녕하세요 세계. مرحبا بالعالم. नमस्ते दुनिया। 🚀 👩‍👩‍👧‍👦 ✅\n\n"
)


def bench_text(n_words: int = 8000, seed: int = 0) -> str:
    """Deterministic benchmark text: BENCH_TEXT paragraphs between runs of made-up words
    (random syllables, digits, punctuation), so most pieces are new to the BPE cache."""
    rng = random.Random(seed)
    syl = ["ka", "ri", "mo", "the", "ban", "sto", "ex", "qu", "ing", "tion", "pre", "ly", "zu", "ver"]
    words = []
    for i in range(n_words):
        w = "".join(rng.choice(syl) for _ in range(rng.randint(1, 4)))
        words.append(w.capitalize() if rng.random() < 0.1 else w)
        if rng.random() < 0.08:
            words.append(rng.choice([",", ".", "!", "?", ";", str(rng.randint(0, 99999))]))
        if i % 400 == 399:
            words.append("\n" + BENCH_TEXT)
    return " ".join(words)


def bench_encode(md: dict, text: str | None = None, repeats: int = 3) -> dict:
    """Encoding speed. md: GGUF tokenizer metadata (`bench tokenizer`: the Llama 3 vocabulary of
    bitweb.authoring.vocab); text: what to encode (default: bench_text()). Returns the
    load time (Tokenizer.from_metadata), cold tokens/s (first encode, empty BPE cache),
    warm tokens/s (same text again: cached pieces) and decode tokens/s."""
    if text is None:
        text = bench_text()
    t0 = time.perf_counter()
    tok = Tokenizer.from_metadata(md)
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    ids = tok.encode(text, add_bos=False)
    cold_s = time.perf_counter() - t0
    warm_s = float("inf")
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        tok.encode(text, add_bos=False)
        warm_s = min(warm_s, time.perf_counter() - t0)
    t0 = time.perf_counter()
    tok.decode(ids)
    dec_s = time.perf_counter() - t0
    return {"n_vocab": tok.n_vocab, "load_s": round(load_s, 4), "chars": len(text), "tokens": len(ids),
            "cold_tokens_per_s": round(len(ids) / cold_s), "warm_tokens_per_s": round(len(ids) / warm_s),
            "decode_tokens_per_s": round(len(ids) / dec_s)}


def bench_tokenizer(md: dict, text: str | None = None, repeats: int = 10) -> dict:
    """`bench tokenizer`: bench_encode(md) (the Llama 3 vocabulary as the 2B4T file has it), then
    md under the qwen2 pre-tokenizer (single digits, NFC, no ignore_merges) against llama-bpe:
    both encoded in alternation `repeats` times, cold (empty BPE cache) and warm, best CPU time
    (process_time: steadier than wall time on a busy machine) of each, and the qwen2 / llama-bpe
    speed ratios."""
    text = bench_text() if text is None else text
    out = bench_encode(md, text, 1)
    toks = {pre: Tokenizer.from_metadata({**md, "tokenizer.ggml.pre": pre}) for pre in ("llama-bpe", "qwen2")}
    best = {(pre, kind): float("inf") for pre in toks for kind in ("cold", "warm")}
    n = {}
    for _ in range(max(1, repeats)):
        for pre, tok in toks.items():
            tok._cache.clear()
            for kind in ("cold", "warm"):
                t0 = time.process_time()
                n[pre] = len(tok.encode(text, add_bos=False))
                best[pre, kind] = min(best[pre, kind], time.process_time() - t0)
    for kind in ("cold", "warm"):
        rate = {pre: n[pre] / best[pre, kind] for pre in toks}
        out[f"qwen2_{kind}_tokens_per_s"] = round(rate["qwen2"])
        out[f"qwen2_vs_llama_bpe_{kind}"] = round(rate["qwen2"] / rate["llama-bpe"], 3)
    out["qwen2_tokens"] = n["qwen2"]
    return out
