"""Attention prefill (shaders/attention.wgsl `prefill`: a row per invocation, K / V rows shared by
quads) against the fallback entry `prefill_wg` (a workgroup per (kv head, row), the decode tiles) in
the same run: M rows at position p0, one head layout, GPU timestamps and process CPU time, best of
--trials, outputs checked against the first plan; --src compares another version of attention.wgsl
under the same launch spec.

    python dev/perf/attn_prefill.py [--heads 8,2,128] [--rows 64] [--p0 0] [--wg 8] [--src FILE:WG=8]
"""
import argparse, asyncio, os, time

import numpy as np

from bitweb import shaders
from bitweb.gpu import Pipeline, request_device
from bitweb.kernels import Step, ops


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--heads", default="8,2,128")
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--p0", type=int, default=0)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--wg", type=int, action="append", default=[])
    ap.add_argument("--src", action="append", default=[], help="FILE:K=V,... another attention.wgsl")
    ap.add_argument("--trials", type=int, default=3)
    a = ap.parse_args()
    nh, nkv, hd = map(int, a.heads.split(","))
    dev = await request_device("native")
    rng = np.random.default_rng(0)
    m, p0, ctx = a.rows, a.p0, a.ctx
    bufs = {"k_cache": dev.create_buffer(nkv * ctx * hd * 4), "v_cache": dev.create_buffer(nkv * ctx * hd * 4),
            "qkv": dev.create_buffer(m * (nh + 2 * nkv) * hd * 4), "o": dev.create_buffer(m * nh * hd * 4),
            "params": dev.create_buffer(ops.PARAMS_BYTES)}
    for k in ("k_cache", "v_cache", "qkv"):
        dev.write_buffer(bufs[k], 0, rng.standard_normal(bufs[k].size // 4).astype(np.float32))
    dev.write_buffer(bufs["params"], 0, ops.params(m=m, pos=p0))
    plans = []
    for wg in a.wg or [None]:
        st = ops.attention_prefill(nh, nkv, hd, ctx, m, wg=wg)
        plans.append((f"shaders/ WG{st.constants['WG']}", dev.plan([await st.instantiate(dev, bufs)])))
    fb = ops.attention_prefill(nh, nkv, hd, ctx, m, wg=None)
    fb = Step("attention", "prefill_wg", fb.bind, (nkv, m, 1), dict(fb.constants, WG=ops._attn_wg(hd, None)))
    plans.append(("shaders/ prefill_wg (fallback)", dev.plan([await fb.instantiate(dev, bufs)])))
    for spec in a.src:
        path, _, kv = spec.partition(":")
        c = dict(ops.attention_prefill(nh, nkv, hd, ctx, m).constants)
        c.update({k: int(v) for k, v in (x.split("=") for x in filter(None, kv.split(",")))})
        code = shaders.specialise(open(path).read(), dev, {}, path)
        raw = dev.device.create_compute_pipeline(layout="auto", compute={
            "module": dev.device.create_shader_module(code=code), "entry_point": "prefill", "constants": c})
        groups = (nkv, m, 1) if "old" in path else (nh, -(-m // c["WG"]), 1)
        bg = dev._bind_group(raw, [(bufs[n].raw, 0, bufs[n].size) for n in ("k_cache", "v_cache", "qkv", "o", "params")])
        plans.append((spec, dev.plan([(Pipeline(raw, (path,)), bg, groups)])))
    ref = None
    for name, plan in plans:
        dev.write_buffer(bufs["o"], 0, bytes(bufs["o"].size))
        dev.run(plan)
        got = np.frombuffer(await dev.read(bufs["o"]), np.float32).copy()
        if ref is None:
            ref = got
        else:
            print(f"  {name}: max |o - o_ref| {np.abs(got - ref).max():.2e}")
    best, cpu = {}, {}
    for _ in range(a.trials):
        for name, plan in plans:
            best[name] = min(best.get(name, 1e9), await dev.time_plan(plan, 2))
            c0 = time.process_time()
            dev.run(plan)
            await dev.sync()
            cpu[name] = min(cpu.get(name, 1e9), time.process_time() - c0)
    print(f"heads {nh}/{nkv} x {hd}, {m} rows at {p0} (load {os.getloadavg()[0]:.1f})")
    for name, _ in plans:
        print(f"  {best[name] * 1e3:9.2f} ms  CPU {cpu[name] * 1e3:9.2f} ms  {name}")


asyncio.run(main())
