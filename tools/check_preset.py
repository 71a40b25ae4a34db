"""Check that a model with real published shapes loads and decodes on this GPU.

    .venv/bin/python tools/check_preset.py [--preset 2b4t|bonsai-1.7b|bonsai-4b|bonsai-8b|qwen2.5-0.5b|qwen2.5-1.5b]
                                           [--model FILE]
                                           [--tokens 4] [--max-context 256] [--keep] [--json]

Without --model it writes `make-model --preset PRESET` (2b4t: `--vocab llama3`, random ternary
I2_S weights, F16 token_embd of 2560 x 128256 = 657 MB, 1.2 GB in all; bonsai-*: qwen3, Q1_0
linears and Q1_0 table(s), the 151936-row qwen vocabulary, 248 MB / 572 MB / 1.16 GB; qwen2.5-*:
qwen2 with Q / K / V biases, Q8_0 linears, an F16 table, the same vocabulary, 0.65 GB / 1.86 GB) to a
temporary file and deletes it afterwards (unless --keep). Then: load through the engine (every
tensor its own buffer; a table larger than maxStorageBufferBindingSize split in shards), prefill
a chat prompt (the file's own template, or the built-in 2B4T format), decode --tokens greedy
tokens twice (cold and warm: the same tokens), and print the figures (JSON with --json): load
time, shards, decode dispatches (per layer), host calls per token, prefill ms, decode ms/token,
GPU buffer bytes and the process's peak RSS growth (on a CPU adapter the GPU buffers are process
memory). Not part of the test suite (minutes on lavapipe); figures in PERFORMANCE.md.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time


async def run(path, args):
    import resource
    from bitweb import gpu
    from bitweb.chat import ChatFormat
    from bitweb.engine import Engine
    from bitweb.gguf import FileSource, open_gguf
    from bitweb.sampling import SamplingParams

    dev = await gpu.request_device("native")
    gf = open_gguf(path)
    last = [0.0]

    def progress(stage, done, total):
        if stage == "upload" and time.time() - last[0] > 5:
            last[0] = time.time()
            print(f"  upload {done / 2**20:.0f} / {total / 2**20:.0f} MiB", file=sys.stderr)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t0 = time.time()
    with FileSource(path) as src:
        eng = await Engine.load(dev, gf, src, activations=args.activations, max_context=args.max_context,
                                progress=progress)
    load_s = time.time() - t0
    ids = ChatFormat.from_tokenizer(eng.tokenizer).ids([{"role": "user", "content": "Say something about the sea."}])
    res = await eng.generate(ids, SamplingParams(), args.tokens, ignore_eos=True)
    eng.reset()                            # again, warm: the same prompt prefilled from scratch
    warm = await eng.generate(ids, SamplingParams(), args.tokens, ignore_eos=True)
    assert warm.ids == res.ids, (warm.ids, res.ids)
    out = {
        "device": dev.describe(), "model": eng.cfg.summary(), "file_bytes": os.path.getsize(path),
        "max_binding": dev.max_binding, "lm_head_shards": len(eng.shards[eng.model.lm_head.name]),
        "load_s": round(load_s, 1), "load_MB_per_s": round(os.path.getsize(path) / 1e6 / load_s, 1),
        "prompt_tokens": len(ids), "prefill_ms": res.prefill_ms, "prefill_ms_warm": warm.prefill_ms,
        "tokens": res.ids, "text": res.text, "decode_ms_per_token": res.decode_ms_per_token,
        "decode_ms_per_token_warm": warm.decode_ms_per_token,
        "tokens_per_s": round(1000 / warm.decode_ms_per_token, 3) if warm.decode_ms_per_token else None,
        "dispatches_per_token": res.dispatches_per_token, "dispatches_per_layer": eng.dispatches_per_layer,
        "host_calls_per_token": res.host_calls_per_token, "activations": args.activations,
        "context": eng.n_ctx, "gpu_bytes": eng.gpu_bytes, "weight_bytes": eng.weight_bytes,
        "rss_peak_growth_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss0,
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    eng.close()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="2b4t", choices=["2b4t", "bonsai-1.7b", "bonsai-4b", "bonsai-8b", "qwen2.5-0.5b",
                                                       "qwen2.5-1.5b"])
    ap.add_argument("--model")
    ap.add_argument("--tokens", type=int, default=4)
    ap.add_argument("--max-context", type=int, default=256)
    ap.add_argument("--activations", choices=["a8", "f32"], default="a8")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    path, made = args.model, False
    if path is None:
        import subprocess
        path = os.path.join(tempfile.gettempdir(), f"bitweb-{args.preset}.gguf")
        t = time.time()
        vocab = ["--vocab", "llama3"] if args.preset == "2b4t" else []
        subprocess.run([sys.executable, "-m", "bitweb", "make-model", "--preset", args.preset, *vocab, "--out", path],
                       check=True, stdout=sys.stderr)
        made = True
        print(f"wrote {path} ({os.path.getsize(path) / 1e9:.2f} GB) in {time.time() - t:.0f} s", file=sys.stderr)
    try:
        out = asyncio.run(run(path, args))
    finally:
        if made and not args.keep:
            os.remove(path)
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:22s} {v}")


if __name__ == "__main__":
    main()
