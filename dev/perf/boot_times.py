"""Time Pyodide's boot in the library's worker set-up (web/py.mjs), with and without the boot
snapshot, in one headless Chromium (SwiftShader), the variants taking turns in fresh workers.

    .venv/bin/python dev/perf/boot_times.py [--rounds 3]

Each boot runs in a new module worker of one page (one browser context: the snapshot the first
snapshot boot stores is read by the later ones). Prints each boot's stages (ms) and the medians.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from chromium import page                          # noqa: E402  (dev/chromium.py)

BOOT_JS = """async ([snapshot]) => {
  const src = `import { bootPython } from '${location.origin}/py.mjs';
    const t0 = performance.now();
    const py = await bootPython(() => {}, { snapshot: ${snapshot} });
    const t1 = performance.now();
    const saved = await py.bitwebBoot.save();
    const st = {};
    for (const [k, [a, b]] of Object.entries(py.bitwebBoot.stages)) st[k] = Math.round(b - a);
    postMessage({ boot_ms: Math.round(t1 - t0), from: py.bitwebBoot.from, stages: st, saved,
                  heap: py._module.HEAP8.length, error: py.bitwebBoot.snapshotError || null,
                  save_ms: Math.round(performance.now() - t1) });`;
  const w = new Worker(URL.createObjectURL(new Blob([src], { type: 'text/javascript' })), { type: 'module' });
  const r = await new Promise((ok, bad) => { w.onmessage = (e) => ok(e.data); w.onerror = (e) => bad(e.message); });
  w.terminate();
  return r;
}"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    with page(build=True) as (pg, base):
        pg.goto(base + "dev/bench-ready.html?engine=none")
        rows = []
        load0 = os.getloadavg()[0]
        for r in range(a.rounds + 1):                 # round 0: the snapshot is made (and stored)
            for snap in ((True, False) if r % 2 == 0 else (False, True)):
                res = pg.evaluate(BOOT_JS, [json.dumps(snap)])
                res["variant"] = "snapshot" if snap else "plain"
                res["round"] = r
                print(json.dumps(res), flush=True)
                rows.append(res)
    print(f"load average {load0:.1f} before, {os.getloadavg()[0]:.1f} after")
    for v in ("plain", "snapshot"):
        rs = [x for x in rows if x["variant"] == v and x["round"] > 0]
        print(v, "boot ms median", statistics.median(x["boot_ms"] for x in rs), [x["from"] for x in rs])


if __name__ == "__main__":
    main()
