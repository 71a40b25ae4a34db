"""numpy mirrors of the WGSL kernels (CPython only), one module per shader family,
and the kernel test cases built from them.

Each module has the mirror functions (same maths, same rounding points as the
kernel: f32 accumulation, int32 for A8 dots) and `cases(builder, scope)` that adds
kernel_check cases (scope "full" for the native suite, "browser" for the
smaller set run in headless Chromium / web/dev/kernels.html). FAMILIES names every module
here and every launch-spec module of bitweb.kernels (tests/test_kernels.py checks both); PARTS
names the modules that hold part of a family's mirrors and cases ({module: family}: the family's
module adds their cases).
"""
from __future__ import annotations

FAMILIES = ("bitlinear", "bitlinear_tiled", "dense", "ops", "requant", "lmhead", "glue")
PARTS = {"ops_sampling": "ops"}


def build_cases(scope: str = "full", only: tuple = FAMILIES):
    """A kernel_check.CaseBuilder holding every case of the families `only` for `scope`;
    builder.by_family: {family: number of cases it added}."""
    import importlib
    from bitweb.kernel_check import CaseBuilder
    b = CaseBuilder()
    b.by_family = {}
    for fam in only:
        n = len(b.cases)
        importlib.import_module(f"bitweb.ref.{fam}").cases(b, scope)
        b.by_family[fam] = len(b.cases) - n
    return b
