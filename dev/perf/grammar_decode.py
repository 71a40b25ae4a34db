"""Decode with and without a grammar, natively (wgpu-py) and in headless Chromium (SwiftShader):
bitweb.grammar.bench.bench_engine on the default model (889 tokens) and on random-weight models
with SmolLM2-135M-Instruct's vocabulary (49,152 tokens) and llama.cpp's Qwen2 vocabulary (151,936),
both at the tiny preset's width (the LM head is most of such a step).

    .venv/bin/python dev/perf/grammar_decode.py [--where native,browser] [--models default,49k,152k]
                                                [--tokens 48] [--trials 3] [--json OUT.json]

The vocabularies come from build/assets (tools/setup.sh --test). Models are written to
build/web/bench/ (served to the page). Prints each run's table (PERFORMANCE.md, "Structured output").
"""
from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
VOCABS = {"49k": ROOT / "build" / "assets" / "SmolLM2-135M-Instruct.Q4_1.gguf",
          "152k": ROOT / "build" / "assets" / "llama.cpp" / "models" / "ggml-vocab-qwen2.gguf"}


def model_path(name: str) -> pathlib.Path:
    if name == "default":
        return ROOT / "web" / "models" / "bitweb-chat-i2_s.gguf"
    from bitweb.authoring.makemodel import PRESETS, ModelSpec, write_model
    from bitweb.commands.bench_grammar import gguf_metadata
    out = ROOT / "build" / "web" / "bench" / f"grammar-{name}.gguf"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        voc = {k: v for k, v in gguf_metadata(VOCABS[name]).items() if k.startswith("tokenizer.")}
        voc.pop("tokenizer.chat_template", None)
        write_model(ModelSpec(arch="bitnet-b1.58", fmt="i2_s", preset="tiny", seed=1, scale_tensors=False,
                              **PRESETS["tiny"]), voc, out)
    return out


async def native(path, tokens, trials):
    from bitweb import gpu
    from bitweb.engine import Engine
    from bitweb.gguf import FileSource, open_gguf
    from bitweb.grammar.bench import bench_engine
    dev = await gpu.request_device("native")
    with FileSource(path) as src:
        eng = await Engine.load(dev, open_gguf(path), src)
    try:
        return await bench_engine(eng, tokens=tokens, trials=trials)
    finally:
        eng.close()


def browser(paths, tokens, trials):
    import subprocess
    from chromium import page
    subprocess.run([sys.executable, str(ROOT / "tools" / "build_web.py")], check=True, capture_output=True)
    out = {}
    with page() as (pg, url):
        for name, path in paths.items():
            rel = path.relative_to(ROOT)
            rel = rel.relative_to("web") if rel.parts[0] == "web" else rel     # (tools/serve.mjs serves web/ at /)
            pg.goto(f"{url}dev/bench.html?grammar=1&model=/{rel}&tokens={tokens}&trials={trials}")
            pg.wait_for_function("window.benchResults !== undefined", timeout=3_600_000)
            res = pg.evaluate("window.benchResults")
            if "error" in res:
                raise SystemExit(f"{name}: {res['error']}")
            out[name] = res["grammar"]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--where", default="native,browser")
    ap.add_argument("--models", default="default,49k,152k")
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT / "dev"))
    from bitweb.grammar.bench import describe_engine
    paths = {m: model_path(m) for m in a.models.split(",")}
    results = {}
    for where in a.where.split(","):
        if where == "native":
            got = {m: asyncio.run(native(p, a.tokens, a.trials)) for m, p in paths.items()}
        else:
            got = browser(paths, a.tokens, a.trials)
        for m, r in got.items():
            print(f"## {where}, {m}\n{describe_engine(r)}\n", flush=True)
        results[where] = got
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
