"""Decode GPU time per token against a streaming read of the bytes the token reads, per weight
format and activation mode, all in one run (issue 34 item 3; PERFORMANCE.md "Decode per format").

    python dev/perf/formats_decode.py [--preset small] [--arch llama] [--layers 16]
        [--formats q4_0,q4_1,...] [--activations f32,q8] [--rounds 3] [--pos 32] [--split]
    python dev/perf/formats_decode.py --model FILE.gguf --activations f32,q8     (a real file)
    python dev/perf/formats_decode.py --before DIR ...   (DIR: another checkout's shaders/, e.g.
        `git archive REV shaders | tar -x -C /tmp/old`, then --before /tmp/old/shaders)

Writes one `make-model` file per format (same preset and seed; every linear and the tied LM head
in that format: --embd-format is the format where the LM head can take it, else f16), loads all
of them on one device with every requested activation mode, and per round, the (format, mode)
pairs interleaved: times the engine's greedy decode plan (`dev.time_plan`, GPU timestamps: kernels
only, no host) and right after it a plain streaming read (shaders/stream.wgsl, bench.Stream) of
the bytes one token reads (bench.bytes_per_token: weights, LM head, one embedding row, the KV cache
at --pos). Prints per row the median plan ms, the best stream ms (bench.Stream's best read, here
over the rounds too: other work on a shared CPU slows a read, never speeds it), their ratio (the issue's
"GPU time / streaming read"; 1.0 = bandwidth-bound), and with --split the share of the plan in the
block linears (bitlinear.wgsl dispatches timed alone) and their own ratio to a stream of their
bytes: what bounds the row. A mode the format does not take (q8 on a K-quant) runs f32 and is
dropped as a duplicate. --before DIR: every row also runs with the kernels of DIR (a second device,
its pipelines built from DIR's sources), interleaved with this tree's in the same rounds: a
before/after under the same load. Beside the GPU times, the process CPU time of each timing
(lavapipe's threads run in this process: steadier than the timestamps when other work shares the
CPU; both lavapipe threads count). Files go to --dir (default: a temporary directory, removed afterwards).
"""
import argparse, asyncio, os, statistics, subprocess, sys, tempfile, time

from bitweb import bench, shaders
from bitweb.engine import Engine
from bitweb.gguf import FileSource, open_gguf
from bitweb.gpu import request_device
from bitweb.kernels import ops

GGML = "q4_0,q4_1,q5_0,q5_1,q8_0,q2_k,q3_k,q4_k,q5_k,q6_k,tq1_0,tq2_0,i2_s,q1_0,q2_0"
TABLE = {"q1_0", "q2_0", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k"}


async def load(dev, path, act, pos):
    gf = open_gguf(path)
    with FileSource(path) as src:
        eng = await Engine.load(dev, gf, src, activations=act, prefill_rows=1, max_context=max(64, pos + 1))
    dev.write_buffer(eng.buf["params"], 0, ops.params(m=1, pos=pos))
    return eng


async def linears(dev, eng, repeats):
    """(seconds, bytes) of the plan's bitlinear dispatches, each timed alone, and the bytes they read."""
    t = 0.0
    for item in eng.plan_greedy.items:
        if item[0].key[0] == "bitlinear":
            t += await dev.time_plan(dev.plan([item]), repeats)
    return t, sum(ti.nbytes for ti in eng.model.tensors() if ti.name.startswith("blk.") and ti.format.packed)


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", help="a GGUF file to measure instead of make-model files")
    ap.add_argument("--preset", default="small")
    ap.add_argument("--arch", default="llama")
    ap.add_argument("--layers", type=int, default=16, help="blocks (16: ~100 MB a token in 4 bits, past a 32 MiB L3)")
    ap.add_argument("--formats", default=GGML)
    ap.add_argument("--activations", default="f32,q8")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3, help="plan runs per timing")
    ap.add_argument("--pos", type=int, default=32, help="KV cache position of the timed step")
    ap.add_argument("--split", action="store_true", help="also time the block linears alone")
    ap.add_argument("--dir")
    ap.add_argument("--before", help="a shaders/ directory of another checkout: its kernels too, interleaved")
    a = ap.parse_args()
    tmp = None if (a.dir or a.model) else tempfile.TemporaryDirectory()
    d = a.dir or (tmp.name if tmp else "")
    files = {}
    if a.model:
        files[os.path.basename(a.model)] = a.model
    else:
        for f in a.formats.split(","):
            path = os.path.join(d, f"{a.preset}-{a.arch}-{a.layers}-{f}.gguf")
            if not os.path.exists(path):
                subprocess.run([sys.executable, "-m", "bitweb", "make-model", "--preset", a.preset, "--arch", a.arch,
                                "--layers", str(a.layers), "--format", f, "--embd-format", f if f in TABLE else "f16",
                                "--out", path], check=True, stdout=subprocess.DEVNULL)
            files[f] = path
    dev = await request_device("native")
    devs = {"": dev}
    if a.before:                     # the other checkout's kernels: its sources, a device of their own
        here = list(shaders.SEARCH)
        shaders.SEARCH[:] = [os.path.abspath(a.before)]
        shaders._cache.clear()
        devs = {"before": await request_device("native"), "": dev}
    rows = {}
    for tag, d in devs.items():
        if not tag and a.before:
            shaders.SEARCH[:] = here
            shaders._cache.clear()
        for f, path in files.items():
            for act in a.activations.split(","):
                eng = await load(d, path, act, a.pos)
                mode = act if eng.a8 else "f32"
                if (f, mode, tag) in rows:
                    eng.close()
                    continue
                rows[(f, mode, tag)] = {"eng": eng, "dev": d, "bpt": bench.bytes_per_token(eng, a.pos),
                                        "plan": [], "stream": [], "pcpu": []}
                print(f"{f} {mode} {tag}: {eng.cfg.summary()}", flush=True)
    for r in range(a.rounds):
        stream = bench.Stream(dev, a.repeats)          # a fresh stream each round, beside the plans
        for row in rows.values():
            c = time.process_time()
            row["plan"].append(await row["dev"].time_plan(row["eng"].plan_greedy, a.repeats))
            row["pcpu"].append((time.process_time() - c) / a.repeats)
            stream.best.clear()
            row["stream"].append((await stream.seconds(row["bpt"]["total"]))[0])
        print(f"round {r + 1} done (load {os.getloadavg()[0]:.1f})", flush=True)
    print(f"{dev.describe()}; pos {a.pos}; load {os.getloadavg()[0]:.1f}")
    print(f"{'format':10} {'mode':4} {'kernels':7} {'MB/token':>8} {'plan ms':>8} {'stream ms':>9} {'ratio':>6} "
          f"{'plan cpu':>8}" + (f" {'linears':>7} {'lin ratio':>9}" if a.split else ""))
    for (f, mode, tag), row in sorted(rows.items()):
        p, s = statistics.median(row["plan"]), min(row["stream"])     # the best read: its bandwidth
        cp = statistics.median(row["pcpu"])
        line = (f"{f:10} {mode:4} {tag or 'this':7} {row['bpt']['total'] / 1e6:8.2f} {p * 1e3:8.2f} {s * 1e3:9.2f} "
                f"{p / s:6.2f} {cp * 1e3:8.2f}")
        if a.split:
            lt, lb = await linears(row["dev"], row["eng"], a.repeats)
            ls, _ = await bench.Stream(dev, a.repeats).seconds(lb)
            line += f" {lt / p:7.0%} {lt / ls:9.2f}"
        print(line, flush=True)
    for row in rows.values():
        row["eng"].close()
    if tmp:
        tmp.cleanup()


asyncio.run(main())
