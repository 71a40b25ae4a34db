"""Bonsai-1.7B shapes in the browser: load and decode through the library, in headless Chromium.

    .venv/bin/python dev/archs/bonsai_browser.py [--preset bonsai-1.7b] [--tokens 4] [--keep] [--json OUT]

Writes `make-model --preset PRESET` (real shapes, random weights; bonsai-1.7b: 248 MB, qwen3,
Q1_0 linears and tied Q1_0 table, the 151936-row padded qwen vocabulary) to
build/web/bench/PRESET.gguf unless it is there, serves the repository with tools/serve.mjs and, in
headless Chromium (the tests' flags: SwiftShader WebGPU), on a blank page of that origin:
  1. bitweb.load(URL): boot Pyodide, download into the browser cache (OPFS), parse, upload, compile;
  2. one greedy chat completion ("Hello!", --tokens tokens, streamed); unload;
  3. a new page (a new worker) and bitweb.load({cached: name}): what a returning visitor waits for;
  4. the same completion again (must give the same text).
Prints and (--json) writes what the library reports: the load figures (engine.info.load: load
ms, GPU and weight bytes, context chosen), the wall time of each bitweb.load() call ("ready": from
the call to a usable engine), the progress stages' first times, and each completion's timing
(time to first token, prefill and decode tokens/s). Deletes the model file afterwards unless
--keep. Not part of the test suite (minutes on SwiftShader)."""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from chromium import page                          # noqa: E402  (dev/chromium.py)

ROOT = pathlib.Path(__file__).resolve().parents[2]
BLANK = "bonsai-bench.html"

RUN_JS = """async ([source, tokens]) => {
  const bitweb = await import('/bitweb.mjs');
  const t0 = performance.now(), stages = {};
  const engine = await bitweb.load(source, { onProgress: (p) => { stages[p.stage] ??= Math.round(performance.now() - t0); } });
  const i = engine.info;
  const load = { source: typeof source === 'string' ? 'url' : 'cache', ready_ms: Math.round(performance.now() - t0),
                 stages, load: i.load, context: i.context, contextMax: i.contextMax, contextNote: i.contextNote,
                 tensorTypes: i.tensorTypes, adapter: i.adapter.info, features: i.features };
  const t1 = performance.now();
  let text = '', last = null;
  const stream = await engine.chat.completions.create({ messages: [{ role: 'user', content: 'Hello!' }],
    stream: true, temperature: 0, max_tokens: tokens });
  for await (const chunk of stream) { text += chunk.choices[0].delta.content ?? ''; last = chunk; }
  const reply = { text, wall_ms: Math.round(performance.now() - t1), usage: last.usage, timing: last.timing,
                  finish_reason: last.choices[0].finish_reason };
  await engine.unload();
  return { load, reply, cache: await bitweb.cache.list() };
}"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="bonsai-1.7b")
    ap.add_argument("--tokens", type=int, default=4)
    ap.add_argument("--keep", action="store_true", help="keep the model file")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds for the browser part")
    a = ap.parse_args(argv)

    path = ROOT / "build" / "web" / "bench" / f"{a.preset}.gguf"
    made = False
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        t = time.time()
        subprocess.run([sys.executable, "-m", "bitweb", "make-model", "--preset", a.preset, "--out", str(path)],
                       check=True, cwd=ROOT)
        made = True
        print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB) in {time.time() - t:.0f} s", flush=True)
    size = path.stat().st_size
    try:
        with page(build=True) as (pg, base):
            pg.context.route(base + BLANK, lambda r: r.fulfill(status=200, content_type="text/html",
                                                               body="<!doctype html><title>bonsai bench</title>"))
            errors = []
            pg.on("pageerror", lambda e: errors.append(str(e)))
            pg.set_default_timeout(a.timeout * 1000)
            t, load0 = time.time(), os.getloadavg()
            res = {"loads": [], "replies": []}
            # a first visit (download into the cache), then a returning one: a new page (a new
            # worker: Pyodide boots and the kernels compile again) loading from the cache
            for source in (f"{base}build/web/bench/{path.name}", {"cached": path.name}):
                pg.goto(base + BLANK)
                r = pg.evaluate(RUN_JS, [source, a.tokens])
                res["loads"].append(r["load"])
                res["replies"].append(r["reply"])
                res["cache"] = r["cache"]
            res["wall_s"], res["load_average_before"] = round(time.time() - t, 1), load0
            res["page_errors"] = errors
    finally:
        if made and not a.keep:
            path.unlink()
    res.update(preset=a.preset, file_bytes=size, load_average_after=os.getloadavg())
    for ld in res["loads"]:
        L = ld["load"]
        print(f"load from {ld['source']}: ready {ld['ready_ms'] / 1e3:.1f} s (stages at ms: {ld['stages']}); "
              f"engine load {L['ms'] / 1e3:.1f} s; GPU buffers {L.get('gpu_bytes', 0) / 2**20:.0f} MiB "
              f"(weights {L.get('weight_bytes', 0) / 2**20:.0f} MiB); context {ld['context']} of {ld['contextMax']}")
    for r in res["replies"]:
        tm = r["timing"]
        print(f"reply {r['text']!r} ({r['usage']}): ttft {tm.get('ttft_ms')} ms, prefill {tm.get('prefill_tok_s')} tok/s "
              f"({tm.get('prefill_tokens')} tokens), decode {tm.get('decode_tok_s')} tok/s, "
              f"{tm.get('decode_ms_per_token')} ms/token")
    print(f"load average now {os.getloadavg()}")
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(res, indent=1))
    same = res["replies"][0]["text"] == res["replies"][1]["text"]
    if not same or errors:
        print(f"FAILED: replies differ ({same=}) or page errors {errors}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
