"""Every kernel case (bitweb.ref.*.cases, scope "full"; see SCOPE) on the native device (wgpu-py, lavapipe here).

Each case runs the real WGSL and compares with its numpy mirror: exact for
integer outputs, float tolerances stated by each case (see bitweb/ref/*.py).
"""
import os
import pathlib

import pytest

from bitweb import kernel_check, shaders
from bitweb.ref import FAMILIES, PARTS, build_cases
from tests.conftest import run
from tests.test_weak_gpu import Fake

# `npm run test:quick` (BITWEB_TEST_LANE=quick) runs a few cases per family (tests/conftest.py
# QUICK_KERNELS) of the small "browser" scope: building every "full" case's data takes ~50 s of CPU.
SCOPE = "browser" if os.environ.get("BITWEB_TEST_LANE") == "quick" else "full"
_builder = build_cases(SCOPE)
CASES = _builder.cases
BLOB = bytes(_builder.blob)          # once: every case reads its slices (a copy per case was 300 MiB)


def test_every_family_has_cases():
    """Every family (a bitweb/ref module and a bitweb/kernels launch-spec module of the same name)
    adds cases to both scopes; nothing is skipped."""
    pkg = pathlib.Path(kernel_check.__file__).parent
    mirrors = {p.stem for p in (pkg / "ref").glob("*.py")} - {"__init__"} - set(PARTS)
    assert set(PARTS.values()) <= set(FAMILIES) and all((pkg / "ref" / f"{m}.py").exists() for m in PARTS)
    specs = {p.stem for p in (pkg / "kernels").glob("*.py")} - {"__init__"}
    assert mirrors == set(FAMILIES) and specs == set(FAMILIES), (mirrors, specs)
    assert list(_builder.by_family) == list(FAMILIES)
    assert all(n > 0 for n in _builder.by_family.values()), _builder.by_family
    browser = build_cases("browser").by_family
    assert all(n > 0 for n in browser.values()) and list(browser) == list(FAMILIES), browser


def test_every_kernel_case_pipeline_is_counted():
    """Every pipeline of every kernel case (this scope, with and without features) is evaluable:
    check_pipelines never skips one of bitweb's own kernels."""
    for dev in (Fake(subgroups=True, shader_f16=True, dot4=True), Fake()):
        for case in CASES:
            for s in case["steps"]:
                code = shaders.specialise(shaders.source(s["shader"]), dev, s["defines"], s["shader"])
                use = shaders.workgroup_use(code, s["entry"], s["constants"])
                assert use["storage"] >= 0 and use["size"][0] >= 1, (case["name"], use)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_kernel_case(gpu, case):
    r = run(kernel_check.run_case(gpu, case, BLOB))
    assert r["ok"], r


def test_q8_tile_sibling_and_tiles_per_device():
    """The q8 tile's sibling is chosen once per device (bitlinear_tiled.q8_dot4): dot4I8Packed on a
    GPU that has it, the f32 sums on lavapipe (measured faster there) and without dot4; no device
    leaves the DOT4 define to the device. lavapipe's q8 matmuls take 12 outputs an invocation where
    16 would idle lanes of the last workgroup (576, 192 outputs), 16 where none idle (1536)."""
    from types import SimpleNamespace

    from bitweb import formats
    from bitweb.kernels import bitlinear_tiled as spec

    def dev(name, dot4=True):
        return SimpleNamespace(info={"device": name}, fallback=False,
                               caps=SimpleNamespace(dot4=dot4, subgroups=True))
    lp, gpu = dev("llvmpipe (LLVM 15.0.6, 256 bits)"), dev("NVIDIA H100")
    assert (spec.q8_dot4(lp), spec.q8_dot4(gpu), spec.q8_dot4(dev("NVIDIA H100", False)), spec.q8_dot4(None)) \
        == (False, True, False, None)
    for d, want in ((lp, False), (gpu, True)):
        st = spec.matmul(formats.Q4_1, 576, 576, 128, a8=True, q8=True, dev=d)
        assert st.defines["DOT4"] is want and st.defines["Q8T"]
        assert spec.gate_up(formats.Q4_1, 576, 1536, 128, a8=True, q8=True, act="silu", dev=d).defines["DOT4"] is want
    assert "DOT4" not in spec.matmul(formats.Q4_1, 576, 576, 128, a8=True, q8=True).defines
    assert "DOT4" not in spec.matmul(formats.I2_S, 256, 64, 16, a8=True, dev=gpu).defines   # q8 only
    nq = {n: spec.matmul(formats.Q4_1, 576, n, 128, a8=True, q8=True, dev=lp).constants["NQ"] for n in (576, 192, 1536)}
    assert nq == {576: 3, 192: 3, 1536: 4}, nq
