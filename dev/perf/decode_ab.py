"""Browser decode speed of this tree against another checkout (`--before DIR`), taking turns in one
headless Chromium (SwiftShader): web/dev/bench.html's decode bench (no kernel table, one 256x256 shape)
of the same file, the trees alternating in every round, a fresh page each time.

    git archive main | tar -x -C /tmp/before && ln -s $PWD/node_modules /tmp/before/
    .venv/bin/python dev/perf/decode_ab.py --before /tmp/before --rounds 3

Builds both web trees (tools/build_web.py), serves both (tools/serve.mjs). The file is the
ready-time benchmark's (the default model as `bitnet` TQ2_0, tests/e2e/test_bench_browser.py) unless
--model. Prints each run and the medians of decode tok/s (and ms/token) and prefill tok/s per tree,
and the ratio after / before.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import statistics
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tests.e2e.conftest import CHROME_ARGS  # noqa: E402
from tests.e2e.test_bench_browser import tq2_0_twin  # noqa: E402
sys.path.insert(0, str(ROOT / "tools"))
from serving import dev_page, served  # noqa: E402  (tools/serving.py)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=pathlib.Path, required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--model", default="", help="a .gguf (default: the ready-time benchmark's file)")
    ap.add_argument("--prompt", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=24)
    a = ap.parse_args()
    from playwright.sync_api import sync_playwright
    for tree in (ROOT, a.before.resolve()):
        subprocess.run([sys.executable, str(tree / "tools" / "build_web.py")], cwd=tree, check=True, capture_output=True)
    if a.model:
        model = "build/web/bench/" + os.path.basename(a.model)
        (ROOT / model).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(a.model, ROOT / model)
    else:
        model = tq2_0_twin()
    (a.before / model).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / model, a.before / model)
    runs = {"before": [], "after": []}
    with served(ROOT) as after, served(a.before.resolve()) as before:
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=os.environ.get("BITWEB_CHROMIUM", "/usr/bin/chromium"), args=CHROME_ARGS)
            load0 = os.getloadavg()
            order = [("before", before, a.before), ("after", after, ROOT)]
            for r in range(a.rounds):
                for name, base, tree in (order if r % 2 == 0 else order[::-1]):
                    pg = b.new_page()
                    pg.goto(base + dev_page(tree, "bench.html") + f"?model=/{model}&quick=1&shapes=256x256&prompt={a.prompt}"
                            f"&tokens={a.tokens}&repeats=1")
                    pg.wait_for_function("window.benchResults !== undefined", timeout=1_800_000)
                    res = pg.evaluate("window.benchResults")
                    pg.close()
                    if "error" in res:
                        raise SystemExit(f"{name}: {res['error']}")
                    d = res["decode"]
                    runs[name].append(d)
                    print(f"{name}: decode {d['decode_tok_s']:.2f} tok/s, prefill {d['prefill_tok_s']:.2f} tok/s "
                          f"(load {os.getloadavg()[0]:.1f})", flush=True)
            load1 = os.getloadavg()
            b.close()
    med = {n: (statistics.median(d["decode_tok_s"] for d in rs), statistics.median(d["prefill_tok_s"] for d in rs))
           for n, rs in runs.items()}
    print(f"\nload average {load0[0]:.1f} before, {load1[0]:.1f} after; {a.rounds} rounds; {model}")
    print("| tree | decode tok/s | ms/token | prefill tok/s |")
    print("|---|---:|---:|---:|")
    for n, (dec, pre) in med.items():
        print(f"| {n} | {dec:.2f} | {1000 / dec:.1f} | {pre:.2f} |")
    print(f"after / before: decode x{med['after'][0] / med['before'][0]:.3f}, prefill x{med['after'][1] / med['before'][1]:.3f}")


if __name__ == "__main__":
    main()
