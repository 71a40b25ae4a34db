"""Run the bitlinear kernel cases natively, filtered by substring; prints failures (dev helper).
usage: python dev/bitlinear/run.py [full|browser] [substring ...]"""
import asyncio, sys, time
from bitweb import kernel_check
from bitweb.gpu import request_device
from bitweb.ref import build_cases

async def main():
    scope = sys.argv[1] if len(sys.argv) > 1 else "full"
    subs = sys.argv[2:]
    t = time.time()
    b = build_cases(scope, only=("bitlinear", "bitlinear_tiled"))
    print(f"built {len(b.cases)} cases in {time.time() - t:.1f}s", flush=True)
    dev = await request_device("native")
    blob = bytes(b.blob)
    n = bad = 0
    for c in b.cases:
        if subs and not all(s in c["name"] for s in subs):
            continue
        t = time.time()
        try:
            r = await kernel_check.run_case(dev, c, blob)
        except Exception as e:
            r = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        n += 1
        if not r["ok"]:
            bad += 1
            print("FAIL", c["name"], r.get("error") or r["checks"], flush=True)
        else:
            print(f"ok {time.time() - t:5.2f}s {c['name']}", flush=True)
    print(f"{n - bad}/{n} passed")
asyncio.run(main())
