"""Every kernel case (bitweb.ref.*.cases, scope "full") on the native device (wgpu-py, lavapipe here).

Each case runs the real WGSL and compares with the numpy reference: exact for
integer outputs, float tolerances stated by each case (see bitweb/ref/*.py).
"""
import pytest

from bitweb import kernel_check
from bitweb.ref import FAMILIES, build_cases
from tests.conftest import run

_builder = build_cases("full")
CASES = _builder.cases


def test_every_family_has_cases():
    names = {c["steps"][0]["shader"] for c in CASES}
    assert len(CASES) > 0 and names, "no kernel cases were built"


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_kernel_case(gpu, case):
    r = run(kernel_check.run_case(gpu, case, bytes(_builder.blob)))
    assert r["ok"], r
