"""Ready time of this tree against another checkout (`--before DIR`, built: build/web/bitweb.zip)
and wllama, in one headless Chromium (SwiftShader), taking turns: each round opens
web/dev/bench-ready.html twice in a fresh browser context per engine
(first visit: nothing cached; second: the engine's own caches), the engines in alternating order.
Each visit ends with bench-ready's replies (4 tokens): bitweb's last one waits for its prefill
kernels, so no compile of one visit is still running in the GPU process during the next.

    git archive main | tar -x -C /tmp/before && ln -s $PWD/node_modules /tmp/before/ \\
      && (cd /tmp/before && $PWD/.venv/bin/python tools/build_web.py)
    .venv/bin/python dev/perf/ready_ab.py --before /tmp/before --rounds 2

bench-ready.html waits (after its figures) for bitweb's worker to have stored its boot snapshot
(web/py.mjs), as a person would read the page before coming back. Prints one line per
visit and a table of medians: ready and first reply ms (page start -> the first reply's first
token) with their ratio to wllama's, bitweb's stages (engine.info.load.stages, ms) and the CPU
time Chromium's processes spent from page start to ready (/proc; the GPU process compiles the
kernels, the renderer runs the worker), then the boot's steps.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import re
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

def _tree() -> dict:
    """{pid: (process type, CPU ms so far)} of every process this script started (Chromium's:
    browser, gpu-process, renderer, utility ...; node's servers as "node")."""
    kids = {}
    for d in pathlib.Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                kids.setdefault(int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]), []).append(int(d.name))
            except (OSError, IndexError, ValueError):
                continue
    out, todo = {}, list(kids.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        todo += kids.get(pid, [])
        try:
            cmd = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
            f = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        m = re.search(rb"--type=([\w-]+)", cmd)
        kind = m.group(1).decode() if m else ("node" if b"node" in cmd.split(b"\0")[0] else "browser")
        out[pid] = (kind, (int(f[11]) + int(f[12])) * 1000 / CLK)
        if kind in ("renderer", "gpu-process"):   # and per thread, by name (CrRendererMain, DedicatedWorker ...)
            for t in pathlib.Path(f"/proc/{pid}/task").glob("*"):
                try:
                    ft = (t / "stat").read_text()
                except OSError:
                    continue
                name = ft[ft.index("(") + 1:ft.rindex(")")]
                ft = ft.rsplit(")", 1)[1].split()
                out[(pid, int(t.name))] = (f"{kind}/{name}", (int(ft[11]) + int(ft[12])) * 1000 / CLK)
    return out


CLK = os.sysconf("SC_CLK_TCK")


def cpu_since(t0: dict) -> dict:
    """CPU ms per process type since the snapshot t0 (_tree()), the servers left out."""
    out = {}
    for pid, (kind, ms) in _tree().items():
        if kind != "node":
            out[kind] = out.get(kind, 0) + ms - t0.get(pid, (kind, 0))[1]
    return {k: round(v) for k, v in sorted(out.items()) if v >= 20 or "/" not in k}


def visits(browser, base, engine, model, n=2, page_path="dev/bench-ready.html"):
    ctx = browser.new_context()
    out = []
    try:
        page = ctx.new_page()
        for v in range(n):
            t0 = _tree()
            page.goto(base + page_path + f"?engine={engine}&model=/{model}&max_tokens=4")
            page.wait_for_function("window.readyHead !== undefined || window.readyResult !== undefined",
                                   timeout=600_000, polling=20)
            cpu = cpu_since(t0)                  # (page start -> ready, within 20 ms)
            page.wait_for_function("window.readyResult !== undefined", timeout=600_000)
            r = page.evaluate("window.readyResult")
            assert "error" not in r, r
            r["visit"] = "first" if v == 0 else "cached"
            r["cpu"] = cpu
            if r.get("ttft_ms") is not None:
                r["first_reply_ms"] = r["ready_ms"] + r["ttft_ms"]
            out.append(r)
    finally:
        ctx.close()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=pathlib.Path, required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--variants", default="before,after,wllama", help="which of before, after, wllama to run")
    a = ap.parse_args()
    from playwright.sync_api import sync_playwright
    subprocess.run([sys.executable, str(ROOT / "tools" / "build_web.py")], check=True, capture_output=True)
    model = tq2_0_twin()
    (a.before / model).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / model, a.before / model)
    rows = []
    with served(ROOT) as after, served(a.before.resolve()) as before, sync_playwright() as p:
        b = p.chromium.launch(executable_path=os.environ.get("BITWEB_CHROMIUM", "/usr/bin/chromium"), args=CHROME_ARGS)
        load0 = os.getloadavg()
        runs = [("before", before, "bitweb"), ("after", after, "bitweb"), ("wllama", after, "wllama")]
        pages = {before: dev_page(a.before, "bench-ready.html"), after: dev_page(ROOT, "bench-ready.html")}
        runs = [r for r in runs if r[0] in a.variants.split(",")]
        for r in range(a.rounds):
            for name, base, engine in (runs if r % 2 == 0 else runs[::-1]):
                for res in visits(b, base, engine, model, page_path=pages[base]):
                    res["variant"] = name
                    rows.append(res)
                    st = {k: round(v[1] - v[0]) for k, v in (res.get("stages") or {}).items()}
                    print(name, res["visit"], round(res["ready_ms"]), "first reply", res.get("first_reply_ms"), st,
                          res.get("boot"), res.get("prepared"), "cpu", res["cpu"], f"load {os.getloadavg()[0]:.1f}",
                          flush=True)
        load1 = os.getloadavg()
        b.close()
    print(f"\nload average {load0[0]:.1f} before, {load1[0]:.1f} after; {a.rounds} rounds; {model}")
    print("| variant | visit | ready ms | / wllama | first reply ms | / wllama | boot | header | device | upload | compile "
          "| plans | CPU to ready: gpu | renderer | browser |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")

    def med(rs, f):
        v = [f(x) for x in rs]
        v = [x for x in v if x is not None]
        return statistics.median(v) if v else None
    for visit in ("first", "cached"):
        w = [x for x in rows if x["variant"] == "wllama" and x["visit"] == visit]
        for name in ("before", "after", "wllama"):
            rs = [x for x in rows if x["variant"] == name and x["visit"] == visit]
            if not rs:
                continue
            cols = []
            for f in ("ready_ms", "first_reply_ms"):
                v, wv = med(rs, lambda x: x.get(f)), med(w, lambda x: x.get(f))
                cols += [f"{v:.0f}" if v is not None else "", f"{v / wv:.2f}x" if v and wv and name != "wllama" else ""]
            for k in ("boot", "header", "device", "upload", "compile", "plans"):
                v = med(rs, lambda x: x["stages"][k][1] - x["stages"][k][0] if x.get("stages") and k in x["stages"] else None)
                cols.append(f"{v:.0f}" if v is not None else "")
            for k in ("gpu-process", "renderer", "browser"):
                v = med(rs, lambda x: x["cpu"].get(k))
                cols.append(f"{v:.0f}" if v is not None else "")
            print(f"| {name} | {visit} | " + " | ".join(cols) + " |")
    for name in ("before", "after"):
        for visit in ("first", "cached"):
            rs = [x for x in rows if x["variant"] == name and x["visit"] == visit and x.get("boot")]
            ks = dict.fromkeys(k for x in rs for k in x["boot"].get("ms", {}))
            if ks:
                print(f"{name} {visit} boot steps (medians, ms): " + ", ".join(
                    f"{k} {statistics.median(x['boot']['ms'][k] for x in rs if k in x['boot']['ms']):.0f}" for k in ks))


if __name__ == "__main__":
    main()
