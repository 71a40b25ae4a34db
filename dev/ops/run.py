"""Run kernel cases by name substring on the native device and print results (dev tool).

usage: .venv/bin/python dev/ops/run.py FAMILY [substring] [--scope browser]   (FAMILY: bitweb.ref.FAMILIES)
"""
import argparse, asyncio, importlib, time

from bitweb.ref import FAMILIES

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("family", choices=FAMILIES)
ap.add_argument("only", nargs="?", default="", help="run the cases whose name contains this")
ap.add_argument("--scope", choices=["full", "browser"], default="full")
args = ap.parse_args()
fam, only, scope = args.family, args.only, args.scope

from bitweb.gpu import request_device  # noqa: E402
from bitweb.kernel_check import CaseBuilder, run_case  # noqa: E402

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
