"""Launch spec for shaders/lmhead.wgsl: the LM head GEMV with the output norm fused (stdlib only).

    y = W rmsnorm(x) for one token, W = the head (token_embd when tied, else output) in shards of
    whole rows (dense.shard_rows), each shard one Step writing y[r0 .. r1).

    supported(wtype, n_in) -> bool          the table formats of bitweb.formats (TYPES): a float one
                                            (n_in a multiple of its unit: the values of one 16-byte
                                            read, F32 4, F16 / BF16 8), a packed one (Q1_0, Q2_0, Q8_0,
                                            Q4_K ...: n_in a multiple of its block); n_in <= 4096 (m
                                            lives in workgroup memory)
    choose(dev) -> Tune                     CPU adapters: 128 rows per workgroup; GPUs: 16;
                                            SwiftShader: xdirect (float rows: m = x * g read where
                                            it is used, no workgroup array: compiles faster there)
    gemv(wtype, n_in, n_out, *, a8=False, shards=None, eps=1e-5, last_row=False, dev=None, **tune) -> [Step]
        bind ("w{i}", "x", "y", "norm", "shard{i}") as dense.gemv(..., norm=True) plus the shard's
        rows (Step.data "shard{i}": shard_bytes(r0, r1), read at run time, so every shard and every
        row count of a (format, K, tune) share one pipeline): the engine's decode head;
        last_row=True: x is f32[m][n_in], row params.m - 1 is used, bind adds "params" (the
        ops.params block) as dense.gemv(..., last_row=True): the head after a prefill.
        wtype: a Format (or its type id or name).
        a8 (packed formats only): the input quantized per token to int8 as the block linears do
        (bitlinear.gemv(..., a8=True, norm=True)); a packed head computes bitlinear's maths in both modes.
    shard_bytes(r0, r1) -> bytes            the shard's rows (struct Shard of lmhead.wgsl: n_rows, row0)
    variant(step, dev) -> str

Why not dense.gemv: on CPU rasterisers its 4 rows per workgroup spend more time on the norm and
the reduction than on the rows (lavapipe: 0.5 GB/s on a 2560 x 16384 F16 shard vs 2-3 GB/s for a
plain read); see PERFORMANCE.md and dev/perf/bench_dense.py. Same maths, same bindings.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, replace

from bitweb import formats
from bitweb.kernels import Step, bound, format_arg, format_defines, rasteriser
from bitweb.kernels.dense import workgroups_1d

MAX_K = 4096
TYPES = formats.select("table")        # float ones a unit at a time (unit()), packed ones a code word at a time


class LMHeadError(ValueError):
    pass


@dataclass(frozen=True)
class Tune:
    wg: int = 64
    rpw: int = 16
    rb: int = 2
    lanes: int = 16
    subgroups: bool | None = None
    xdirect: bool = False   # float formats: m = x * g read from x and g where used, not staged in workgroup memory


def choose(dev=None) -> Tune:
    """SwiftShader compiles a workgroup array in time that grows with its size (K = 256: 256 words,
    ~60 ms of the head's ~170 ms; 2B4T's K = 2560 would be 2560 words), so there the float rows
    read m from x and g (xdirect; dev/perf/compile_times.py, PERFORMANCE.md "Ready time")."""
    cpu = rasteriser(dev)
    if cpu:
        return Tune(rpw=128, rb=4, xdirect=cpu == "swiftshader")
    return Tune(rpw=16, rb=2)


def unit(f: formats.Format) -> int:
    """n_in must be a multiple of this: a float format's lane unit, the values of one 16-byte read;
    a packed format's block."""
    if f.packed:
        return f.block_size
    return 16 // f.type_size


def supported(wtype, n_in: int) -> bool:
    f = formats.get(wtype)
    return f in TYPES and n_in > 0 and n_in % unit(f) == 0 and n_in <= MAX_K


def shard_bytes(r0: int, r1: int) -> bytes:
    """The run-time rows of a shard: struct Shard of shaders/lmhead.wgsl (n_rows, row0; 16 bytes)."""
    return struct.pack("<4I", r1 - r0, r0, 0, 0)


def gemv(wtype, n_in: int, n_out: int, *, a8: bool = False, shards=None, eps: float = 1e-5,
         last_row: bool = False, dev=None, **tune) -> list:
    f = format_arg(wtype, TYPES, "lmhead", LMHeadError)
    if not supported(f, n_in):
        raise LMHeadError(f"lmhead: {f.name} rows of {n_in} values not supported "
                          f"(n_in a multiple of {unit(f)} and <= {MAX_K})")
    packed = f.packed
    if a8 and not packed:
        raise LMHeadError(f"lmhead: a8 needs a packed format (ternary / binary), not {f.name}")
    t = replace(choose(dev), **tune)
    if t.wg & (t.wg - 1) or not 4 <= t.wg <= 256:
        raise LMHeadError(f"lmhead: wg = {t.wg} must be a power of two in 4..256")
    if t.lanes & (t.lanes - 1) or not 1 <= t.lanes <= t.wg:
        raise LMHeadError(f"lmhead: lanes = {t.lanes} must be a power of two <= wg ({t.wg})")
    if not 1 <= t.rb <= 4 or t.rpw < 1:
        raise LMHeadError(f"lmhead: rb = {t.rb} must be 1..4 and rpw = {t.rpw} >= 1")
    shards = [(0, n_out)] if shards is None else [tuple(s) for s in shards]
    if shards[0][0] != 0 or shards[-1][1] != n_out or any(a[1] != b[0] for a, b in zip(shards, shards[1:])):
        raise LMHeadError(f"lmhead: shards {shards} do not cover rows 0..{n_out} in order")
    defines = format_defines(f)
    if packed:
        defines.update(PACKED=True, A8=bool(a8))
    elif t.xdirect and f.block_size == 1:                    # float rows of one value per element
        defines["XDIRECT"] = True
    if t.subgroups is not None:
        defines["SUBGROUPS"] = bool(t.subgroups)
    if last_row:
        defines["LASTROW"] = True
    names = {"x": "x", "y": "y", "g": "norm", "params": "params"}
    return [Step("lmhead", "gemv", bound("lmhead", defines, dict(names, w=f"w{i}", shard=f"shard{i}")),
                 workgroups_1d(-(-(r1 - r0) // t.rpw)),
                 {"K": n_in, "WG": t.wg, "RPW": t.rpw, "RB": t.rb, "LANES": t.lanes, "EPS": float(eps)},
                 dict(defines), {f"shard{i}": shard_bytes(r0, r1)})
            for i, (r0, r1) in enumerate(shards)]


def variant(step: Step, dev=None) -> str:
    d, c = step.defines, step.constants
    sg = d.get("SUBGROUPS", bool(dev is not None and dev.caps.subgroups))
    fmt = step.format.name
    red = "subgroup" if sg else f"shared(lanes {c['LANES']})"
    act = (" a8" if d.get("A8") else " f32") if d.get("PACKED") else (" xdirect" if d.get("XDIRECT") else "")
    return f"lmhead {fmt}{act} {red} WG{c['WG']} RPW{c['RPW']} RB{c['RB']}"
