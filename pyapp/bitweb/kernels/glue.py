"""Launch specs for shaders/glue.wgsl (stdlib only): the element-wise steps the prefill of a block
with float (F32/F16/BF16) linears needs around dense.wgsl's matmul, which has no residual or gating
fusion. Decode never uses them (bitlinear.wgsl fuses both for every linear format).

    add(n) -> Step              y[i] += a[i] * mult[0]                     bind ("y", "a", "mult")
    act_mul(n, act) -> Step     y[i] = act(a[i] * mult[0]) * (u[i] * mult[1])   bind ("y", "a", "mult", "u")
                                act: "relu2" | "silu" (common_act.wgsl, as bitlinear's gate_up)
One thread per element, workgroups (ceil(n / WG), 1, 1).
"""
from __future__ import annotations

from bitweb.kernels import Step, bound

WG = 64
ACTS = ("relu2", "silu")


class GlueSpecError(ValueError):
    pass


def _n(n: int) -> int:
    if n <= 0:
        raise GlueSpecError(f"glue: n = {n} must be positive")
    return n


def add(n: int) -> Step:
    """Residual add: y += a * mult[0] over n floats."""
    return Step("glue", "add", bound("glue", {}, ("y", "a", "mult")), (-(-_n(n) // WG), 1, 1), {"N": n, "WG": WG}, {})


def act_mul(n: int, act: str) -> Step:
    """FFN gate: y = act(a * mult[0]) * (u * mult[1]) over n floats."""
    if act not in ACTS:
        raise GlueSpecError(f"glue: act {act!r} must be one of {ACTS}")
    d = {"ACT_MUL": True, "ACT_SILU": act == "silu"}
    return Step("glue", "act_mul", bound("glue", d, ("y", "a", "mult", "u")), (-(-_n(n) // WG), 1, 1),
                {"N": n, "WG": WG}, d)
