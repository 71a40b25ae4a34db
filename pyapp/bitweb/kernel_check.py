"""Run a kernel test case on any Device and compare with expected bytes (stdlib only).

The same cases run natively (pytest, wgpu-py) and in the browser (web/dev/kernels.html,
Pyodide), so both backends are proven on the same WGSL. Cases are built in
CPython from the numpy mirrors (bitweb.ref, build_cases) and serialised as a
JSON manifest plus one binary blob.

A case:
    {"name": str,
     "buffers": [{"name": str, "size": int,               # bytes
                  "data": [offset, length] | None,        # initial contents from the blob
                  "expect": [offset, length] | None,      # expected contents after the steps
                  "dtype": "f32" | "f16" | "i32" | "u32", # how to compare (f16: IEEE halves)
                  "atol": float, "rtol": float}],         # |got-exp| <= atol + rtol*|exp|
     "steps": [{"shader": str, "entry": str, "constants": {}, "defines": {},
                "bind": [buffer index, ...],             # binding i -> buffers[bind[i]]
                "workgroups": [x, y, z]}]}
Integer dtypes are compared exactly (atol/rtol ignored).
"""
from __future__ import annotations

import array
import json
import struct


class CaseBuilder:
    """Collects cases and their bytes into (manifest, blob)."""

    def __init__(self):
        self.cases: list = []
        self.blob = bytearray()

    def _put(self, data: bytes) -> list:
        while len(self.blob) % 16:
            self.blob.append(0)
        off = len(self.blob)
        self.blob += data
        return [off, len(data)]

    def add(self, name: str, buffers: list, steps: list) -> dict:
        """buffers: dicts with name, and data (bytes) or size, optional expect (bytes), dtype, atol, rtol."""
        out = []
        for b in buffers:
            data = b.get("data")
            exp = b.get("expect")
            size = b.get("size") or len(data if data is not None else exp)
            out.append({"name": b["name"], "size": size,
                        "data": self._put(bytes(data)) if data is not None else None,
                        "expect": self._put(bytes(exp)) if exp is not None else None,
                        "dtype": b.get("dtype", "f32"), "atol": float(b.get("atol", 0.0)),
                        "rtol": float(b.get("rtol", 0.0))})
        case = {"name": name, "buffers": out,
                "steps": [{"shader": s["shader"], "entry": s.get("entry", "main"),
                           "constants": s.get("constants", {}), "defines": s.get("defines", {}),
                           "bind": list(s["bind"]), "workgroups": list(s["workgroups"]) + [1] * (3 - len(s["workgroups"]))}
                          for s in steps]}
        self.cases.append(case)
        return case

    def manifest(self) -> str:
        return json.dumps({"version": 1, "cases": self.cases})


SIZES = {"f32": 4, "f16": 2, "i32": 4, "u32": 4}


def _values(dtype: str, data: bytes):
    if dtype == "f16":                       # array has no half type; struct does
        return struct.unpack(f"<{len(data) // 2}e", data)
    a = array.array({"f32": "f", "i32": "i", "u32": "I"}[dtype])
    a.frombytes(data)
    return a


def compare(dtype: str, got: bytes, exp: bytes, atol: float, rtol: float):
    """(ok, worst_abs_err, index_of_worst, count_bad)."""
    g, e = _values(dtype, bytes(got)), _values(dtype, bytes(exp))
    if len(g) != len(e):
        return False, float("inf"), -1, abs(len(g) - len(e))
    worst, where, bad = 0.0, -1, 0
    exact = dtype not in ("f32", "f16")
    for i in range(len(e)):
        a, b = g[i], e[i]
        if exact:
            if a != b:
                bad += 1
                if where < 0:
                    where, worst = i, abs(a - b)
            continue
        d = abs(a - b)
        if d != d:                           # NaN never passes
            d = float("inf")
        if d > worst:
            worst, where = d, i
        if not d <= atol + rtol * abs(b):
            bad += 1
    return bad == 0, worst, where, bad


async def run_case(dev, case: dict, blob) -> dict:
    """Create the buffers, run the steps, read back and compare every expected buffer."""
    mv = memoryview(blob)
    bufs = []
    for b in case["buffers"]:
        buf = dev.create_buffer(b["size"], label=b["name"])
        if b["data"] is not None:
            off, n = b["data"]
            dev.write_buffer(buf, 0, mv[off:off + n])
        bufs.append(buf)
    work = []
    for s in case["steps"]:
        p = await dev.pipeline(s["shader"], s["entry"], s["constants"], s["defines"])
        bg = dev.bind_group(p, [bufs[i] for i in s["bind"]])
        work.append((p, bg, tuple(s["workgroups"])))
    dev.run(dev.plan(work))
    result = {"name": case["name"], "ok": True, "checks": []}
    for b, buf in zip(case["buffers"], bufs):
        if b["expect"] is None:
            continue
        off, n = b["expect"]
        got = await dev.read(buf, 0, n)
        ok, worst, where, bad = compare(b["dtype"], got, mv[off:off + n], b["atol"], b["rtol"])
        result["checks"].append({"buffer": b["name"], "ok": ok, "max_abs_err": worst, "worst_index": where,
                                 "n_bad": bad, "n": n // SIZES[b["dtype"]]})
        result["ok"] = result["ok"] and ok
    for buf in bufs:
        buf.destroy()
    return result
