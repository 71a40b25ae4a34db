"""The int8 prefill tile (bitlinear_tiled Q8T: ggml's q8 rows) at one block's shapes, variants taking
turns: the dot4I8Packed sibling against the f32-sum fallback, and tile sizes (process CPU time:
lavapipe's threads run in this process; best of --trials).

    python dev/perf/q8_tile.py [--fmt Q4_1] [--m 128] [--trials 4] [--embd 576 --ff 1536 --kv 192]
        [--v dot4=1] [--v dot4=0] [--v dot4=1,rq=4,nq=2,wg=32] [--steps q,k,v,o,gate_up,down]

--v k=v,...: a variant (dot4 0/1, sg 0 (no subgroup sharing), rq, nq, wg; gate_up takes gu_rq / gu_nq / gu_wg; +NAME / -NAME a define on / off; NAME=v an override constant); the first is the
reference: every other variant's outputs must equal its outputs bit for bit (the block sums are exact
integers either way) or the script says DIFFERENT. Defaults: SmolLM2-135M's shapes, 128 rows.
"""
import argparse, asyncio, os, time
from dataclasses import replace

import numpy as np

from bitweb import formats
from bitweb.gpu import request_device
from bitweb.kernels import bitlinear_tiled


def tensor(rng, fmt, rows, n_in):
    b = formats.by_name(fmt).quantize(rng.standard_normal(rows * n_in).astype(np.float32))
    return b + bytes(-len(b) % 16)


def variant(s):
    defs = {i[1:]: i[0] == "+" for i in s.split(",") if i[:1] in "+-" and i}
    kv = {k: int(v) for k, v in (i.split("=") for i in s.split(",") if i and i[0] not in "+-")}
    defs.update({k: v for k, v in kv.items() if k.isupper()})      # UPPER=v: an override constant
    mm = {k: kv[k] for k in ("rq", "nq", "wg") if k in kv}
    gu = {k[3:]: kv[k] for k in ("gu_rq", "gu_nq", "gu_wg") if k in kv}
    d = {"dot4": bool(kv["dot4"])} if "dot4" in kv else {}
    if "sg" in kv:
        d["subgroups"] = None if kv["sg"] else False
    return dict(mm, **d), dict(gu, **d), defs


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fmt", default="Q4_1")
    ap.add_argument("--m", type=int, default=128)
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--v", action="append", default=[])
    ap.add_argument("--steps", default="q,k,v,o,gate_up,down")
    ap.add_argument("--embd", type=int, default=576)
    ap.add_argument("--ff", type=int, default=1536)
    ap.add_argument("--kv", type=int, default=192)
    a = ap.parse_args()
    vs = a.v or ["dot4=1", "dot4=0"]
    dev = await request_device("native")
    print(dev.describe(), f"load {os.getloadavg()[0]:.2f}", flush=True)
    rng = np.random.default_rng(0)
    m, e, ff = a.m, a.embd, a.ff
    shapes = {"q": (e, e, False), "k": (e, a.kv, False), "v": (e, a.kv, False), "o": (e, e, True),
              "gate_up": (e, ff, None), "down": (ff, e, True)}
    shapes = {k: v for k, v in shapes.items() if k in a.steps.split(",")}
    plans = {v: {} for v in vs}
    probes = {}
    for name, (n_in, n_out, res) in shapes.items():
        nb = n_in // 32
        q = rng.integers(-128, 128, m * n_in).astype(np.int8)
        dx = rng.uniform(1 / 512, 1 / 16, (m, nb)).astype(np.float32)
        sx = dx * q.reshape(m, nb, 32).sum(axis=2).astype(np.float32)
        b = {"params": dev.create_buffer(32), "q": dev.create_buffer(m * n_in), "scale": dev.create_buffer(m * nb * 8),
             "mult": dev.create_buffer(16), "y": dev.create_buffer(m * n_out * 4)}
        dev.write_buffer(b["params"], 0, np.array([m, 0, 0, 0, 0, 0, 0, 0], np.uint32))
        dev.write_buffer(b["q"], 0, q)
        dev.write_buffer(b["scale"], 0, np.stack([dx, sx], -1).astype(np.float32))
        dev.write_buffer(b["mult"], 0, np.ones(4, np.float32))
        for t in ("w", "gate", "up") if res is None else ("w",):
            w = tensor(rng, a.fmt, n_out, n_in)
            b[t] = dev.create_buffer(len(w))
            dev.write_buffer(b[t], 0, w)
        probes[name] = b["y"]
        ref = None
        for v in vs:
            mm, gu, defs = variant(v)
            if res is None:
                st = bitlinear_tiled.gate_up(a.fmt, n_in, n_out, m, a8=True, q8=True, act="silu", dev=dev, **gu)
            else:
                st = bitlinear_tiled.matmul(a.fmt, n_in, n_out, m, a8=True, q8=True, residual=res, dev=dev, **mm)
            st = replace(st, defines=dict(st.defines, **{k: v for k, v in defs.items() if isinstance(v, bool)}),
                         constants=dict(st.constants, **{k: v for k, v in defs.items() if not isinstance(v, bool)}))
            c0 = time.perf_counter()
            plans[v][name] = dev.plan([await st.instantiate(dev, b)])
            dev.write_buffer(b["y"], 0, bytes(b["y"].size))
            dev.run(plans[v][name])
            out = np.frombuffer(await dev.read(b["y"]), np.float32).copy()
            same = "reference" if ref is None else ("identical" if np.array_equal(out, ref) else "DIFFERENT")
            ref = out if ref is None else ref
            print(f"  {name} {n_in}x{n_out} [{v}] {dict((k, st.constants[k]) for k in ('RQ', 'NQ', 'WG'))} "
                  f"DOT4={st.defines.get('DOT4', dev.caps.dot4)}: {same}; first run {time.perf_counter() - c0:.1f} s",
                  flush=True)
    best = {(v, n): 1e9 for v in vs for n in shapes}
    for tr in range(a.trials):
        for v in (vs if tr % 2 == 0 else vs[::-1]):
            for name, plan in plans[v].items():
                c0 = time.process_time()
                dev.run(plan)
                await dev.read(probes[name], 0, 4)
                best[v, name] = min(best[v, name], time.process_time() - c0)
    print(f"{a.fmt} M={m} (load {os.getloadavg()[0]:.2f}), best of {a.trials}, CPU ms per row:")
    tot0 = sum(best[vs[0], n] for n in shapes)
    for v in vs:
        tot = sum(best[v, n] for n in shapes)
        print(f"  [{v}] " + "  ".join(f"{n} {best[v, n] / m * 1e3:.3f}" for n in shapes)
              + f"  block {tot / m * 1e3:.3f} ({tot / tot0:.3f}x)", flush=True)


asyncio.run(main())
