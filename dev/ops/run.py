"""Run kernel cases by name substring on the native device and print results (dev tool).

usage: .venv/bin/python dev/ops/run.py dense|ops [substring] [--scope browser]
"""
import asyncio, importlib, sys, time
from bitweb.gpu import request_device
from bitweb.kernel_check import CaseBuilder, run_case

fam = sys.argv[1]
only = sys.argv[2] if len(sys.argv) > 2 and not sys.argv[2].startswith("--") else ""
scope = "browser" if "--scope" in sys.argv and sys.argv[sys.argv.index("--scope") + 1] == "browser" else "full"
b = CaseBuilder()
t = time.time()
importlib.import_module(f"bitweb.ref.{fam}").cases(b, scope)
print(f"built {len(b.cases)} cases, {len(b.blob) >> 20} MiB in {time.time() - t:.1f}s")


async def main():
    dev = await request_device("native")
    blob = bytes(b.blob)
    for c in b.cases:
        if only not in c["name"]:
            continue
        t = time.time()
        try:
            r = await run_case(dev, c, blob)
        except Exception as e:
            r = {"ok": False, "error": str(e)[:2000]}
        atol = {x["name"]: x["atol"] for x in c["buffers"]}
        det = [(ch["buffer"], ch["n_bad"], f"{ch['max_abs_err']:.3g}/{atol[ch['buffer']]:.3g}", ch["worst_index"]) for ch in r.get("checks", [])]
        print(f"{'ok ' if r['ok'] else 'BAD'} {time.time() - t:6.2f}s {c['name']} {det} {r.get('error', '')}")

asyncio.run(main())
