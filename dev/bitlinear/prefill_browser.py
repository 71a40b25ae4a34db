"""prefill_over_decode in the browser (SwiftShader through Pyodide): web/dev/bench.html's decode bench of
one model, no kernel table (one 256x256 kernel shape), in headless Chromium.

    python dev/bitlinear/prefill_browser.py [--preset small | --model FILE.gguf] [--prompt 64] [--tokens 32]

Builds the web tree (tools/build_web.py), serves it (tools/serve.mjs), writes the `make-model
--preset` file under build/web/bench/ when missing (or copies --model there), opens
dev/bench.html?model=...&quick=1&shapes=256x256&prompt=P&tokens=T&repeats=1 and prints the decode JSON's
prefill tok/s, decode tok/s and prefill_over_decode (the same fields as `bench decode --json`).
"""
import argparse, json, os, shutil, subprocess, sys, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from chromium import ROOT, page                      # noqa: E402  (dev/chromium.py)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="small")
    ap.add_argument("--model")
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=32)
    a = ap.parse_args()
    d = Path(ROOT) / "build" / "web" / "bench"
    d.mkdir(parents=True, exist_ok=True)
    if a.model:
        path = d / os.path.basename(a.model)
        if not path.exists():
            shutil.copyfile(a.model, path)
    else:
        path = d / f"{a.preset}-i2_s.gguf"
        if not path.exists():
            subprocess.run([sys.executable, "-m", "bitweb", "make-model", "--preset", a.preset, "--out", str(path)],
                           check=True)
    with page(build=True) as (pg, base):
        t0 = time.time()
        pg.goto(base + f"dev/bench.html?model=/build/web/bench/{path.name}&quick=1&shapes=256x256"
                f"&prompt={a.prompt}&tokens={a.tokens}&repeats=1")
        pg.wait_for_function("window.benchResults !== undefined", timeout=3_600_000)
        res = pg.evaluate("window.benchResults")
    if "error" in res:
        raise SystemExit(res["error"])
    dec = res["decode"]
    print(json.dumps(dec))
    print(f"{path.name}: {dec['device']}\n  prompt {dec['prompt_tokens']}: prefill {dec['prefill_tok_s']:.2f} tok/s, "
          f"decode {dec['decode_tok_s']:.2f} tok/s, prefill_over_decode {dec['prefill_over_decode']:.2f} "
          f"({time.time() - t0:.0f} s, load {os.getloadavg()[0]:.1f})")

main()
