"""Stop during a long prefill: the time from Stop to the GPU being idle (`bitweb bench stop`) on
two shapes, natively (wgpu-py; lavapipe here). Writes the model files it needs to --dir (kept,
so a second run reuses them):

  2b4t.gguf     `make-model --preset 2b4t --vocab llama3` (BitNet b1.58 2B4T's shapes, I2_S, 1.19 GB)
  smollm2.gguf  SmolLM2-135M-Instruct's shapes (llama, n_embd 576, 30 blocks, n_ff 1536, 9 / 3
                heads, tied 49152-row table) with Q8_0 linears and table, made here so the script
                needs no download (the real file is Q4_1); the Stop bound depends on the shapes,
                not the format.

    .venv/bin/python dev/perf/stop_to_idle.py [--dir build/perf] [--prompt-tokens 2000] [--before smollm2]

--before NAME[,NAME]: also run the prefill of those models the old way (every chunk at once; a full
prompt's prefill: minutes for 2b4t on lavapipe); the others print an estimate.
"""
from __future__ import annotations

import argparse
import asyncio
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "pyapp"))

SMOLLM2 = dict(arch="llama", fmt="q8_0", embd_fmt="q8_0", output_fmt="q8_0", preset="smollm2-135m-shapes",
               n_embd=576, n_layer=30, n_head=9, n_head_kv=3, n_ff=1536, n_ctx=8192, n_vocab=49152)


def make(path: pathlib.Path, which: str):
    from bitweb.authoring.makemodel import PRESETS, ModelSpec, load_vocab, write_model
    if path.exists():
        return
    print(f"writing {path} ...", file=sys.stderr, flush=True)
    if which == "2b4t":
        spec = ModelSpec(arch="bitnet-b1.58", fmt="i2_s", preset="2b4t", seed=0, scale_tensors=False, **PRESETS["2b4t"])
        voc = load_vocab("llama3")
    else:
        spec = ModelSpec(seed=0, scale_tensors=False, **SMOLLM2)
        voc = load_vocab("bytes")                        # (write_model pads it to n_vocab rows)
    tmp = path.with_suffix(".tmp")
    write_model(spec, voc, tmp)
    tmp.replace(path)


async def main(args):
    from bitweb import gpu
    from bitweb.commands.bench_stop import bench_stop, describe
    from bitweb.gguf import FileSource, open_gguf
    d = pathlib.Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    dev = await gpu.request_device("native")
    for name in args.models.split(","):
        path = d / f"{name}.gguf"
        make(path, name)
        gf = open_gguf(str(path))
        with FileSource(str(path)) as src:
            r = await bench_stop(dev, gf, src, prompt_tokens=args.prompt_tokens, stop_at=args.stop_at,
                                 before=name in args.before.split(","))
        print(f"## {name}\n{describe(r)}\n", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=str(ROOT / "build" / "perf"))
    ap.add_argument("--models", default="smollm2,2b4t")
    ap.add_argument("--prompt-tokens", type=int, default=2000)
    ap.add_argument("--stop-at", type=float, default=2.5)
    ap.add_argument("--before", default="smollm2")
    asyncio.run(main(ap.parse_args()))
