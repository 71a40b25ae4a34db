"""numpy mirror of shaders/glue.wgsl (residual add, FFN gate act * up for float-weight blocks) and
its kernel cases.

add: y + a * mult[0]; with mult a power of two both operations are single f32 roundings, so the
result is exact (compared with atol = rtol = 0). act_mul: relu^2 is a product of f32 roundings
(rtol 4 ulp); silu uses the GPU's exp and division (WGSL: 3 + 2|x| ulp and 2.5 ulp), so its
tolerance grows with |a|, as in bitweb.ref.bitlinear.tolerance.
"""
from __future__ import annotations

import numpy as np

from bitweb.kernels import glue
from bitweb.ref.bitlinear import U, add_case, f32b, ffn_act

F32 = np.float32


def add(y, a, mult):
    return (np.asarray(y, F32) + np.asarray(a, F32) * F32(mult[0])).astype(F32)


def act_mul(a, u, mult, kind: str):
    return (ffn_act(np.asarray(a, F32) * F32(mult[0]), kind) * (np.asarray(u, F32) * F32(mult[1]))).astype(F32)


def add_cases(b, rng, name, n):
    y, a = rng.standard_normal(n).astype(F32), rng.standard_normal(n).astype(F32)
    mult = np.array([0.5, 1.0, 1.0, 1.0], F32)
    add_case(b, name, glue.add(n), {"y": dict(data=f32b(y), expect=f32b(add(y, a, mult))),
                                    "a": dict(data=f32b(a)), "mult": dict(data=f32b(mult))})


def act_mul_case(b, rng, name, n, kind):
    a, u = (2 * rng.standard_normal(n)).astype(F32), rng.standard_normal(n).astype(F32)
    mult = np.array([0.25, 2.0, 1.0, 1.0], F32)
    want = act_mul(a, u, mult, kind)
    bound = float(np.max(np.abs(a * mult[0])))
    rtol = 4 * U if kind == "relu2" else (2 * (1 + bound) + 2 * bound + 16) * U
    add_case(b, name, glue.act_mul(n, kind), {
        "y": dict(size=4 * n, expect=f32b(want), atol=1e-30, rtol=rtol),
        "a": dict(data=f32b(a)), "mult": dict(data=f32b(mult)), "u": dict(data=f32b(u))})


def cases(b, scope: str = "full"):
    rng = np.random.default_rng(4242)
    if scope == "browser":
        act_mul_case(b, rng, "glue.act_mul.silu", 200, "silu")
        return
    add_cases(b, rng, "glue.add", 1000)                  # not a multiple of WG: the bounds check
    add_cases(b, rng, "glue.add.one", 1)
    for kind in glue.ACTS:
        act_mul_case(b, rng, f"glue.act_mul.{kind}", 1000, kind)
