"""numpy mirrors of the WGSL kernels (CPython only), one module per shader family,
and the kernel test cases built from them.

Each module has the reference functions (same maths, same rounding points as the
kernel: f32 accumulation, int32 for A8 dots) and `cases(builder, scope)` that adds
kernel_check cases (scope "full" for the native suite, "browser" for the
smaller set run in headless Chromium / web/kernels.html).
"""
from __future__ import annotations

FAMILIES = ("bitlinear", "bitlinear_tiled", "dense", "ops", "requant", "lmhead")


def build_cases(scope: str = "full", only: tuple = FAMILIES):
    import importlib
    from bitweb.kernel_check import CaseBuilder
    b = CaseBuilder()
    for fam in only:
        try:
            mod = importlib.import_module(f"bitweb.ref.{fam}")
        except ModuleNotFoundError as e:
            if e.name == f"bitweb.ref.{fam}":
                continue          # family not written yet
            raise
        mod.cases(b, scope)
    return b
