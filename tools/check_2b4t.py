"""Check that a model with the real BitNet b1.58 2B4T shapes loads and decodes on this GPU.

    .venv/bin/python tools/check_2b4t.py [--model FILE] [--tokens 4] [--max-context 256] [--keep]

Without --model it writes `make-model --preset 2b4t --vocab llama3` (random ternary I2_S weights,
F16 token_embd of 2560 x 128256 = 657 MB, 1.2 GB in all) to a temporary file and deletes it
afterwards (unless --keep). Then: load through the engine (every tensor its own buffer; the tied
LM head / embedding split in shards under maxStorageBufferBindingSize), prefill a chat prompt,
decode --tokens greedy tokens, and print the figures (JSON with --json): load time, shards, decode
dispatches (per layer), host calls per token, prefill ms, decode ms/token.
Not part of the test suite (minutes on lavapipe); see ARCHITECTURE.md "Engine checks".
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
    from bitweb import gpu
    from bitweb.chat import chat_ids
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
    t0 = time.time()
    with FileSource(path) as src:
        eng = await Engine.load(dev, gf, src, activations=args.activations, max_context=args.max_context,
                                progress=progress)
    load_s = time.time() - t0
    ids = chat_ids(eng.tokenizer, [{"role": "user", "content": "Say something about the sea."}])
    res = await eng.generate(ids, SamplingParams(), args.tokens, ignore_eos=True)
    eng.reset()                            # again, warm: the same prompt prefilled from scratch
    warm = await eng.generate(ids, SamplingParams(), args.tokens, ignore_eos=True)
    assert warm.ids == res.ids, (warm.ids, res.ids)
    out = {
        "device": dev.describe(), "model": eng.cfg.summary(), "file_bytes": os.path.getsize(path),
        "max_binding": dev.max_binding, "lm_head_shards": len(eng.shards[eng.model.lm_head.name]),
        "load_s": round(load_s, 1), "load_MB_per_s": round(os.path.getsize(path) / 1e6 / load_s, 1),
        "prompt_tokens": len(ids), "prefill_ms": res.prefill_ms, "prefill_ms_warm": warm.prefill_ms,
        "tokens": res.ids, "decode_ms_per_token": res.decode_ms_per_token,
        "decode_ms_per_token_warm": warm.decode_ms_per_token,
        "tokens_per_s": round(1000 / warm.decode_ms_per_token, 3) if warm.decode_ms_per_token else None,
        "dispatches_per_token": res.dispatches_per_token, "dispatches_per_layer": eng.dispatches_per_layer,
        "host_calls_per_token": res.host_calls_per_token, "activations": args.activations,
        "context": eng.n_ctx,
    }
    eng.close()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model")
    ap.add_argument("--tokens", type=int, default=4)
    ap.add_argument("--max-context", type=int, default=256)
    ap.add_argument("--activations", choices=["a8", "f32"], default="a8")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    path, made = args.model, False
    if path is None:
        from bitweb.authoring.makemodel import PRESETS, ModelSpec, load_vocab, write_model
        path = os.path.join(tempfile.gettempdir(), "bitweb-2b4t-i2_s.gguf")
        t = time.time()
        write_model(ModelSpec(arch="bitnet-b1.58", fmt="i2_s", preset="2b4t", seed=0, scale_tensors=False,
                              **PRESETS["2b4t"]), load_vocab("llama3"), path)
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
