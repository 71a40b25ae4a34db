"""Decode time per token of the same model in several weight formats, interleaved (issue 15 item 3).

    python dev/perf/formats_decode.py [--preset 2b4t] [--formats i2_s,tq2_0,tq1_0] [--rounds 5] [--pos 16]

Writes one `make-model` file per format (same preset, same seed: the same ternary values where the
formats can hold them), loads all of them on one device, and times each engine's greedy decode plan
(`dev.time_plan`, GPU timestamps: kernels only, no host) round by round, the formats interleaved
within a round, and the process CPU time of each timing (lavapipe runs in this process: steadier
than the timestamps when other work shares the CPU). Prints per format the median ms/token, the per-dispatch-kind split of one plan
(bitlinear vs the rest) and the ratio to the first format. The files go to --dir (default: a
temporary directory, removed afterwards).
"""
import argparse, asyncio, os, statistics, subprocess, sys, tempfile, time

from bitweb.engine import Engine
from bitweb.gguf import FileSource, open_gguf
from bitweb.gpu import request_device
from bitweb.kernels import ops


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="2b4t")
    ap.add_argument("--formats", default="i2_s,tq2_0,tq1_0")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3, help="plan runs per timing")
    ap.add_argument("--pos", type=int, default=16, help="KV cache position of the timed step")
    ap.add_argument("--dir")
    a = ap.parse_args()
    fmts = a.formats.split(",")
    tmp = None if a.dir else tempfile.TemporaryDirectory()
    d = a.dir or tmp.name
    dev = await request_device("native")
    engines = {}
    for f in fmts:
        path = os.path.join(d, f"{a.preset}-{f}.gguf")
        if not os.path.exists(path):
            subprocess.run([sys.executable, "-m", "bitweb", "make-model", "--preset", a.preset, "--format", f,
                            "--out", path], check=True)
        gf = open_gguf(path)
        with FileSource(path) as src:
            eng = await Engine.load(dev, gf, src, activations="a8", max_context=max(64, a.pos + 1))
        dev.write_buffer(eng.buf["params"], 0, ops.params(m=1, pos=a.pos))
        engines[f] = eng
        print(f"{f}: {os.path.getsize(path) / 1e6:.0f} MB, {eng.cfg.summary()}", flush=True)
    times = {f: [] for f in fmts}
    cpu = {f: [] for f in fmts}          # process CPU time per plan run: lavapipe's threads run in this
    for r in range(a.rounds):            # process, so it is steadier than the timestamps when the CPU is shared
        for f in fmts:
            c = time.process_time()
            times[f].append(await dev.time_plan(engines[f].plan_greedy, a.repeats))
            cpu[f].append((time.process_time() - c) / a.repeats)
        print(f"round {r + 1}: " + "  ".join(f"{f} {times[f][-1] * 1e3:.1f} ms (cpu {cpu[f][-1] * 1e3:.1f})" for f in fmts)
              + f"  (load {os.getloadavg()[0]:.1f})", flush=True)
    print(f"{dev.describe()}")
    base = statistics.median(times[fmts[0]])
    cbase = statistics.median(cpu[fmts[0]])
    for f in fmts:
        m = statistics.median(times[f])
        c = statistics.median(cpu[f])
        print(f"{f:8s} median {m * 1e3:8.1f} ms/token  min {min(times[f]) * 1e3:8.1f}  x{m / base:.2f} vs {fmts[0]}"
              f"   cpu median {c * 1e3:8.1f} ms/token  x{c / cbase:.2f}")
    for e in engines.values():
        e.close()
    if tmp:
        tmp.cleanup()


asyncio.run(main())
