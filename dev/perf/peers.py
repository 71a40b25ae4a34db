"""bitweb side by side with its peers on the same generated files, interleaved:
llama.cpp (llama-cpp-python, on the CPU) and oxbitnet (0xBitNet's Python binding: Rust + wgpu).

    .venv/bin/python dev/perf/peers.py [--preset small] [--rounds 3] [--tokens 16] [--prompt-tokens 64]
                                       [--oxbitnet-python PY] [--llama-python PY] [--threads N] [--json]
                                       [--activations f32,q8]

Files (make-model, seed 0, in --dir): `bitnet` TQ2_0 (llama.cpp knows arch `bitnet`, not
`bitnet-b1.58`, and TQ2_0, not I2_S) for bitweb and llama.cpp; `bitnet-b1.58` I2_S for bitweb and
oxbitnet. Each measurement is its own process (load, a 1-token warm-up, then the timed run); the
engines take turns within a round, and each figure is the median over the rounds. Printed: load
time (the load call), ready time (load + the warm-up: both bitweb and oxbitnet build pipelines on
first use; bitweb then reads the whole prompt once, untimed, so that lavapipe has compiled the code
of its prefill tiles, which it does at their first dispatch), prefill tokens/s, decode ms/token, and each peer's ratio to bitweb on the same file
(> 1: the peer is that many times faster). --activations: bitweb once per mode (rows "bitweb:MODE",
the first one the peers' base; default: the engine's default mode), each bitweb row also printed
as its prefill tok/s over llama.cpp's.

How each is timed: bitweb from its own generate() split (prefill_ms covers the prompt and the
first token; decode_ms_per_token the mean over the rest). The peers, which take a prompt and
return tokens, by two runs from an empty cache: 1 token (prefill), then tokens + 1 (decode per
token = the difference / tokens). Greedy everywhere, EOS banned where the API allows.

A peer that is not importable is reported with how to install it:
  llama.cpp: `.venv/bin/pip install llama-cpp-python` (no wheel on PyPI for Linux: it builds
             llama.cpp from source, ~10 minutes on 2 cores)
  oxbitnet:  wheels for CPython 3.12 only (glibc 2.38): a 3.12 venv, e.g.
             python3.12 -m venv .venv-oxbitnet && .venv-oxbitnet/bin/pip install oxbitnet
             (on an older glibc: install the wheel renamed to the `linux_x86_64` tag and point its
             bundled libssl / libcrypto at the system's OpenSSL 3); then --oxbitnet-python
             .venv-oxbitnet/bin/python (the default when that file exists)
The workers for the peers import only the standard library and the peer.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
INSTALL = {
    "llama.cpp": "not importable by {py}: `{py} -m pip install llama-cpp-python` (builds llama.cpp from source, "
                 "~10 min on 2 cores; no Linux wheel on PyPI)",
    "oxbitnet": "not importable by {py}: its wheels need CPython 3.12 and glibc 2.38; make a 3.12 venv "
                "(`python3.12 -m venv .venv-oxbitnet && .venv-oxbitnet/bin/pip install oxbitnet`) and pass "
                "--oxbitnet-python .venv-oxbitnet/bin/python",
}
IMPORT = {"llama.cpp": "llama_cpp", "oxbitnet": "oxbitnet"}


# ---------------------------------------------------------------------------- workers (one per process)
def w_bitweb(a: dict) -> dict:
    import asyncio

    async def go():
        from bitweb import bench, gpu
        from bitweb.engine import Engine
        from bitweb.gguf import FileSource, open_gguf
        from bitweb.sampling import SamplingParams
        dev = await gpu.request_device("native")
        t0 = time.perf_counter()
        gf = open_gguf(a["model"])
        with FileSource(a["model"]) as src:
            eng = await Engine.load(dev, gf, src, **({"activations": a["activations"]} if a.get("activations") else {}))
        load_s = time.perf_counter() - t0
        try:
            t0 = time.perf_counter()
            await eng.generate(a["ids"][:8], SamplingParams(), 1, ignore_eos=True)        # warm-up
            warm_s = time.perf_counter() - t0
            eng.reset()
            await eng.generate(a["ids"], SamplingParams(), 1, ignore_eos=True)              # the prefill tiles' first dispatch
            eng.reset()
            res = await eng.generate(a["ids"], SamplingParams(), a["tokens"] + 1, ignore_eos=True)
            # the hardware bound: GPU time of one decode step (the recorded plan, GPU timestamps) over a
            # streaming read of the bytes that step reads (bench.bytes_per_token), this run
            gpu_s = await bench.timed(dev, eng.plan_greedy, None, budget_s=1.0)
            bpt = bench.bytes_per_token(eng, len(a["ids"]) + a["tokens"] / 2)
            ts, _ = await bench.Stream(dev, None).seconds(bpt["total"])
            roof_s = bpt["total"] / ((bpt["total"] // 16 * 16) / ts)
        finally:
            eng.close()
        prefill = len(a["ids"]) / res.prefill_ms * 1e3
        return {"load_s": load_s, "warm_s": warm_s, "prompt_tokens": len(a["ids"]), "decoded": len(res.ids) - 1,
                "prefill_tok_s": prefill, "decode_ms_per_token": res.decode_ms_per_token,
                "prefill_over_decode": prefill * res.decode_ms_per_token / 1e3,
                "gpu_ms_per_token": gpu_s * 1e3, "roofline_ms": roof_s * 1e3, "gpu_vs_roofline": gpu_s / roof_s,
                "bytes_per_token": bpt["total"], "dispatches_per_layer": eng.dispatches_per_layer,
                "device": dev.describe()}
    return asyncio.run(go())


def _two_runs(run_n, tokens: int) -> tuple[float, float, int]:
    """(prefill s, decode s per token, tokens decoded) from run_n(n) -> tokens produced, from an empty cache."""
    t0 = time.perf_counter()
    run_n(1)
    t_pre = time.perf_counter() - t0
    t0 = time.perf_counter()
    got = run_n(tokens + 1)
    t_all = time.perf_counter() - t0
    n_dec = max(1, got - 1)
    return t_pre, max(0.0, t_all - t_pre) / n_dec, n_dec


def w_llama_cpp(a: dict) -> dict:
    import llama_cpp
    t0 = time.perf_counter()
    llm = llama_cpp.Llama(model_path=a["model"], n_ctx=len(a["ids"]) + a["tokens"] + 8, n_batch=512,
                          n_threads=a["threads"], n_threads_batch=a["threads"], verbose=False)
    load_s = time.perf_counter() - t0
    ban = {llm.token_eos(): -1e9}

    def run_n(n, ids=a["ids"]):
        llm.reset()
        out = llm.create_completion(prompt=list(ids), max_tokens=n, temperature=0.0, top_k=1, logit_bias=ban)
        return out["usage"]["completion_tokens"]
    t0 = time.perf_counter()
    run_n(1, a["ids"][:8])                                                              # warm-up
    warm_s = time.perf_counter() - t0
    t_pre, dec, n_dec = _two_runs(run_n, a["tokens"])
    return {"load_s": load_s, "warm_s": warm_s, "prompt_tokens": len(a["ids"]), "decoded": n_dec,
            "prefill_tok_s": len(a["ids"]) / t_pre, "decode_ms_per_token": dec * 1e3,
            "device": f"llama.cpp {getattr(llama_cpp, '__version__', '?')} CPU, {a['threads']} threads"}


def w_oxbitnet(a: dict) -> dict:
    os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
    from oxbitnet import BitNet
    t0 = time.perf_counter()
    m = BitNet.load_sync(a["model"])
    load_s = time.perf_counter() - t0

    def run_n(n, text=a["text"]):           # greedy: top_k 1 (temperature 0 divides by zero there)
        return len(m.generate_tokens_sync(text, max_tokens=n, temperature=1.0, top_k=1))
    try:
        t0 = time.perf_counter()
        run_n(1, a["text"][:16])                                                        # warm-up
        warm_s = time.perf_counter() - t0
        t_pre, dec, n_dec = _two_runs(run_n, a["tokens"])
    finally:
        m.dispose()
    return {"load_s": load_s, "warm_s": warm_s, "prompt_tokens": len(a["ids"]), "decoded": n_dec,
            "prefill_tok_s": len(a["ids"]) / t_pre, "decode_ms_per_token": dec * 1e3,
            "device": "oxbitnet (wgpu, its default adapter)", "note": "prompt given as text (~prompt_tokens tokens)"}


WORKERS = {"bitweb": w_bitweb, "llama.cpp": w_llama_cpp, "oxbitnet": w_oxbitnet}


# ---------------------------------------------------------------------------- driver
def importable(py: str, module: str) -> bool:
    try:
        return subprocess.run([py, "-c", f"import {module}"], capture_output=True, timeout=120,
                              env=dict(os.environ, XDG_RUNTIME_DIR=os.environ.get("XDG_RUNTIME_DIR", "/tmp"))).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def measure(py: str, engine: str, arg: dict, limit: float) -> dict:
    try:
        p = subprocess.run([py, str(pathlib.Path(__file__).resolve()), "--worker", engine, "--worker-arg", json.dumps(arg)],
                           capture_output=True, text=True, timeout=limit, cwd=ROOT,
                           env=dict(os.environ, XDG_RUNTIME_DIR=os.environ.get("XDG_RUNTIME_DIR", "/tmp")))
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {limit:g} s"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        tail = (p.stderr or p.stdout).strip().splitlines()
        why = next((ln for ln in tail if "panicked" in ln or "Error" in ln), tail[-1] if tail else "(no output)")
        return {"error": f"exit {p.returncode}: {why[:300]}"}
    return json.loads(lines[-1])


def make_files(d: pathlib.Path, preset: str) -> dict:
    d.mkdir(parents=True, exist_ok=True)
    out = {}
    for key, arch, fmt in (("tq2_0", "bitnet", "tq2_0"), ("i2_s", "bitnet-b1.58", "i2_s")):
        path = d / f"peers-{preset}-{arch}-{fmt}.gguf"
        if not path.exists():
            subprocess.run([sys.executable, "-m", "bitweb", "make-model", "--preset", preset, "--arch", arch,
                            "--format", fmt, "--vocab", "llama3" if preset == "2b4t" else "bytes", "--seed", "0",
                            "--out", str(path)], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        out[key] = {"path": str(path), "arch": arch, "format": fmt.upper(), "bytes": path.stat().st_size}
    return out


def real_file(path: str) -> dict:
    from bitweb.gguf import open_gguf
    from bitweb.model import Model
    cfg = Model.from_gguf(open_gguf(path)).cfg
    return {"path": str(pathlib.Path(path).resolve()), "arch": cfg.arch, "format": cfg.linear_type.name,
            "bytes": pathlib.Path(path).stat().st_size}


def prompt(path: str, n: int) -> tuple[list, str]:
    from bitweb.bench import prompt_for
    from bitweb.gguf import open_gguf
    from bitweb.tokenizer import Tokenizer
    tok = Tokenizer.from_metadata(open_gguf(path).metadata)
    ids = prompt_for(tok, n)
    return ids, tok.decode(ids, skip_special=True)


def med(xs):
    return statistics.median(xs) if xs else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="bitweb vs llama.cpp and oxbitnet on the same generated files")
    ap.add_argument("--preset", default="small", choices=("tiny", "small", "2b4t"))
    ap.add_argument("--model", help="a GGUF file both bitweb and llama.cpp read (e.g. "
                                    "build/assets/SmolLM2-135M-Instruct.Q4_1.gguf) instead of the generated ones")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="llama.cpp threads")
    ap.add_argument("--dir", default=str(ROOT / "build" / "peers"), help="where the generated files go")
    ven = ROOT / ".venv-oxbitnet" / "bin" / "python"
    ap.add_argument("--oxbitnet-python", default=str(ven) if ven.exists() else sys.executable)
    ap.add_argument("--llama-python", default=sys.executable)
    ap.add_argument("--limit", type=float, default=900, help="seconds per measurement")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--activations", default="", help="bitweb's activation modes, comma-separated (e.g. f32,q8)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--worker-arg", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        print(json.dumps(WORKERS[a.worker](json.loads(a.worker_arg))))
        return 0
    say = (lambda m: print(m, file=sys.stderr, flush=True)) if a.json else (lambda m: print(m, flush=True))
    pys = {"bitweb": sys.executable, "llama.cpp": a.llama_python, "oxbitnet": a.oxbitnet_python}
    if a.model:                    # one file: bitweb and llama.cpp
        files = {"file": real_file(a.model)}
        pairs = [("bitweb", "file"), ("llama.cpp", "file")]
        if a.activations:
            pairs = [(f"bitweb:{m}", "file") for m in a.activations.split(",")] + [("llama.cpp", "file")]
    else:
        files = make_files(pathlib.Path(a.dir), a.preset)
        # (engine, file key): bitweb on both files, each peer on the file it reads
        pairs = [("bitweb", "tq2_0"), ("llama.cpp", "tq2_0"), ("bitweb", "i2_s"), ("oxbitnet", "i2_s")]
    missing = {e: INSTALL[e].format(py=pys[e]) for e in ("llama.cpp", "oxbitnet") if not importable(pys[e], IMPORT[e])}
    for e, why in missing.items():
        say(f"# {e}: {why}")
    pairs = [p for p in pairs if p[0] not in missing]
    kind = lambda e: e.split(":")[0]  # noqa: E731   ("bitweb:q8" -> "bitweb")
    args = {}
    for key, f in files.items():
        ids, text = prompt(f["path"], a.prompt_tokens)
        args[key] = {"model": f["path"], "ids": ids, "text": text, "tokens": a.tokens, "threads": a.threads}
    runs = {p: [] for p in pairs}
    load0 = os.getloadavg()
    for rnd in range(a.rounds):
        for p in pairs:
            mode = p[0].partition(":")[2]
            r = measure(pys[kind(p[0])], kind(p[0]), dict(args[p[1]], activations=mode), a.limit)
            runs[p].append(r)
            say(f"round {rnd + 1} {p[0]:9} {p[1]:6} " + (f"ERROR {r['error']}" if "error" in r else
                f"load {r['load_s']:.2f} s, prefill {r['prefill_tok_s']:.1f} tok/s, decode {r['decode_ms_per_token']:.1f} ms/token"))
    load1 = os.getloadavg()
    rows = []
    for (eng, key), rs in runs.items():
        ok = [r for r in rs if "error" not in r]
        row = {"engine": eng, "file": f"{files[key]['arch']} {files[key]['format']}", "key": key, "runs": len(ok),
               "errors": [r["error"] for r in rs if "error" in r],
               "load_s": med([r["load_s"] for r in ok]), "ready_s": med([r["load_s"] + r["warm_s"] for r in ok]),
               "prefill_tok_s": med([r["prefill_tok_s"] for r in ok]),
               "decode_ms_per_token": med([r["decode_ms_per_token"] for r in ok]),
               "device": ok[0]["device"] if ok else None}
        for k in ("prefill_over_decode", "gpu_ms_per_token", "roofline_ms", "gpu_vs_roofline", "dispatches_per_layer"):
            if ok and k in ok[0]:
                row[k] = med([r[k] for r in ok])
        rows.append(row)
    base = {}
    for r in rows:
        if kind(r["engine"]) == "bitweb":
            base.setdefault(r["key"], r)
    for r in rows:
        b = base.get(r["key"])
        if kind(r["engine"]) != "bitweb" and b and r["decode_ms_per_token"] and b["decode_ms_per_token"]:
            r["decode_vs_bitweb"] = b["decode_ms_per_token"] / r["decode_ms_per_token"]
            r["prefill_vs_bitweb"] = r["prefill_tok_s"] / b["prefill_tok_s"]
            r["ready_vs_bitweb"] = b["ready_s"] / r["ready_s"]
    out = {"preset": a.preset, "rounds": a.rounds, "tokens": a.tokens, "prompt_tokens": a.prompt_tokens,
           "loadavg_before": load0, "loadavg_after": load1, "files": files, "missing": missing, "rows": rows}
    if a.json:
        print(json.dumps(out))
        return 0
    print(f"\n{a.model or (a.preset + ' preset')}, prompt {a.prompt_tokens} tokens, {a.tokens} decoded, median of {a.rounds} interleaved rounds; "
          f"load average {load0[0]:.1f} before, {load1[0]:.1f} after")
    print(f"{'engine':10} {'file':20} {'load s':>7} {'ready s':>8} {'prefill tok/s':>14} {'decode ms/tok':>14}  "
          f"peer vs bitweb (decode, prefill, ready)")
    for r in rows:
        f = lambda v, d=2: "-" if v is None else f"{v:.{d}f}"  # noqa: E731
        ratio = "" if "decode_vs_bitweb" not in r else \
            f"  x{r['decode_vs_bitweb']:.2f}, x{r['prefill_vs_bitweb']:.2f}, x{r['ready_vs_bitweb']:.2f}"
        print(f"{r['engine']:10} {r['file']:20} {f(r['load_s']):>7} {f(r['ready_s']):>8} {f(r['prefill_tok_s'], 1):>14} "
              f"{f(r['decode_ms_per_token'], 1):>14}{ratio}" + (f"  errors: {r['errors']}" if r["errors"] else ""))
    for r in rows:
        if "gpu_vs_roofline" in r:
            print(f"{r['engine']} {r['file']}: GPU {r['gpu_ms_per_token']:.1f} ms per decoded token, a streaming read of its "
                  f"bytes {r['roofline_ms']:.1f} ms: x{r['gpu_vs_roofline']:.2f} (target <= 1.5); prefill / decode "
                  f"tokens/s x{r['prefill_over_decode']:.2f} (target >= 6); {r['dispatches_per_layer']:g} dispatches per layer")
    peer = {r["key"]: r for r in rows if r["engine"] == "llama.cpp" and r["prefill_tok_s"]}
    for r in rows:
        if kind(r["engine"]) == "bitweb" and r["key"] in peer and r["prefill_tok_s"]:
            print(f"{r['engine']} {r['file']}: prefill {r['prefill_tok_s']:.1f} tok/s = x{r['prefill_tok_s'] / peer[r['key']]['prefill_tok_s']:.2f} "
                  f"llama.cpp's ({peer[r['key']]['prefill_tok_s']:.1f})")
    for e, why in missing.items():
        print(f"{e}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
