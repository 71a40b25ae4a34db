"""A weaker GPU on request, without a browser: `?cap=` parsing (web/cap.mjs, run by Node), the
library's maskFeatures check (web/bitweb.mjs), and bitweb.gpu.request_device(mask_features=,
cap_limits=) on the native device (lavapipe): the features are gone, the limits lowered, the
shader variants the fallbacks. The browser side: tests/e2e/test_weak_gpu.py."""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from bitweb import formats, gpu, shaders
from tests.conftest import ROOT, need, run

PARSE_JS = """
import { parseCap, WEBGPU_MINIMUM } from './web/cap.mjs';
import * as bitweb from './web/bitweb.mjs';
const out = { minimum: WEBGPU_MINIMUM, features: bitweb.FEATURES, limits: bitweb.LIMITS, parsed: {}, load: {} };
for (const text of JSON.parse(process.argv[1])) out.parsed[text] = parseCap(text);
for (const mask of [['subgroups'], ['fp64'], 'subgroups']) {
  try { await bitweb.load('x.gguf', { maskFeatures: mask, signal: AbortSignal.abort() }); out.load[JSON.stringify(mask)] = 'loaded?'; }
  catch (e) { out.load[JSON.stringify(mask)] = [e.kind, e.field ?? null, e.message]; }
}
console.log(JSON.stringify(out));
"""

CAPS = ["mobile", "-subgroups,maxBufferSize:1000", "mobile,maxStorageBufferBindingSize:65536,memory:5",
        "-subgroups,-shader-f16,-subgroups", "-fp64", "maxFoo:5", "maxBufferSize:abc", "mobile,,", ""]


@pytest.fixture(scope="module")
def parsed():
    need(shutil.which("node") is not None, "node is not installed")
    p = subprocess.run(["node", "--input-type=module", "-e", PARSE_JS, json.dumps(CAPS)], capture_output=True, text=True,
                       cwd=ROOT, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_cap_tables_match_bitweb_gpu(parsed):
    assert parsed["minimum"] == gpu.WEBGPU_MINIMUM
    assert tuple(parsed["features"]) == gpu.MASKABLE
    assert tuple(parsed["limits"]) == gpu.WANTED_LIMITS


def test_cap_parses_presets_masks_limits_and_refuses_what_is_not_one(parsed):
    p = parsed["parsed"]
    assert p["mobile"] == {"capLimits": gpu.WEBGPU_MINIMUM, "maskFeatures": ["shader-f16", "subgroups"],
                           "gpuMemory": None, "problem": None}
    assert p["-subgroups,maxBufferSize:1000"] == {"capLimits": {"maxBufferSize": 1000}, "maskFeatures": ["subgroups"],
                                                  "gpuMemory": None, "problem": None}
    later = p["mobile,maxStorageBufferBindingSize:65536,memory:5"]     # later entries win
    assert later["capLimits"] == {**gpu.WEBGPU_MINIMUM, "maxStorageBufferBindingSize": 65536} and later["gpuMemory"] == 5
    assert p["-subgroups,-shader-f16,-subgroups"]["maskFeatures"] == ["shader-f16", "subgroups"]   # once each, in FEATURES order
    assert p["mobile,,"]["problem"] is None and p[""] == {"capLimits": None, "maskFeatures": None, "gpuMemory": None, "problem": None}
    for bad, says in (("-fp64", "masks a feature, one of shader-f16"), ("maxFoo:5", "maxFoo is not a limit bitweb uses"),
                      ("maxBufferSize:abc", "limitName:positive-integer")):
        assert p[bad]["problem"] and f"cap={bad}" in p[bad]["problem"] and says in p[bad]["problem"], p[bad]


def test_library_checks_mask_features(parsed):
    """load() refuses an unknown feature or a non-array with a settings error naming maskFeatures
    (before anything starts); a known one passes the check (this load then stops: aborted)."""
    ok, unknown, text = (parsed["load"][k] for k in ('["subgroups"]', '["fp64"]', '"subgroups"'))
    assert ok[0] == "aborted", ok
    assert unknown[:2] == ["settings", "maskFeatures"] and '"fp64" is not a feature' in unknown[2], unknown
    assert text[:2] == ["settings", "maskFeatures"] and "must be an array" in text[2], text


def test_check_weaker_names_what_is_wrong():
    assert gpu.check_weaker(["subgroups", "shader-f16", "subgroups"], {"maxBufferSize": 5}) == \
        (("shader-f16", "subgroups"), {"maxBufferSize": 5})
    for mask, caps, says in ((["fp64"], None, "'fp64' is not a feature"), ((), {"maxFoo": 1}, "'maxFoo' is not a limit"),
                             ((), {"maxBufferSize": 0}, "must be a positive integer"),
                             ((), {"maxBufferSize": True}, "must be a positive integer")):
        with pytest.raises(gpu.GPUError, match=says):
            gpu.check_weaker(mask, caps)


@pytest.fixture(scope="module")
def devices():
    try:
        full = run(gpu.request_device("native"))
        weak = run(gpu.request_device("native", mask_features=list(gpu.MASKABLE), cap_limits=gpu.WEBGPU_MINIMUM))
    except gpu.NoAdapterError as e:
        need(False, f"no native adapter: {e}")
    return full, weak


def test_native_device_without_features_takes_the_fallbacks(devices):
    full, weak = devices
    need(full.caps.subgroups and full.caps.shader_f16 and full.caps.dot4, f"this adapter lacks a feature: {full.describe()}")
    assert (weak.caps.subgroups, weak.caps.shader_f16, weak.caps.dot4, weak.caps.timestamps) == (False,) * 4
    assert weak.features == frozenset()
    assert all(weak.limits[k] == min(v, full.limits[k]) for k, v in gpu.WEBGPU_MINIMUM.items()), weak.limits
    assert "acting as a weaker GPU: no packed_4x8_integer_dot_product" in weak.describe()
    assert "maxComputeWorkgroupStorageSize <= 16384" in weak.weaker and full.weaker == ""
    # the variants follow the device: bitlinear's subgroup reduction and dot4, lmhead's f16 reads
    src = shaders.source("bitlinear")
    a8 = {"FORMAT": formats.I2_S, "A8": True, "PACKED": True}
    assert "subgroupAdd" in shaders.specialise(src, full, a8, "bitlinear")
    masked = shaders.specialise(src, weak, a8, "bitlinear")
    code = "\n".join(ln.split("//")[0] for ln in masked.splitlines())
    assert "subgroup" not in code and "dot4I8Packed" not in code and "enable" not in code


# ---------------------------------------------------------------- workgroup memory and size

class Fake:
    """A device as shaders.specialise sees it: caps and backend."""
    def __init__(self, **caps):
        self.caps, self.backend = gpu.Caps(**caps), "browser"


LMHEAD = {"K": 3776, "WG": 64, "RPW": 16, "RB": 2, "LANES": 16}


def test_workgroup_use_counts_what_the_entry_point_uses():
    """WebGPU's count: roundUp(16, SizeOf(T)) of each workgroup variable the entry point (or a
    function it calls) uses; the sizes from the pipeline's override constants (tests/e2e/test_weak_gpu.py
    checks the same pipeline against the browser's own limit)."""
    code = shaders.specialise(shaders.source("lmhead"), Fake(), {"FORMAT": formats.F16}, "lmhead")
    use = shaders.workgroup_use(code, "gemv", LMHEAD)
    assert use == {"storage": 16384, "vars": {"xs": 4 * 3776, "part": 256, "red": 1024}, "size": (64, 1, 1)}
    with_sg = shaders.specialise(shaders.source("lmhead"), Fake(subgroups=True), {"FORMAT": formats.F16}, "lmhead")
    assert shaders.workgroup_use(with_sg, "gemv", LMHEAD)["vars"] == {"xs": 4 * 3776, "part": 256}   # no tree scratch
    samp = shaders.specialise(shaders.source("sampling"), Fake(), {}, "sampling")
    arg, top = (shaders.workgroup_use(samp, e, {"WG": 256}) for e in ("argmax", "topk"))
    assert set(arg["vars"]) == {"best_key", "best_id"} and arg["storage"] == 32           # not topk's arrays
    assert top["vars"]["cnt"] == 256 * 2 * 4 and "best_key" not in top["vars"]
    toy = ("override WG: u32 = 64u;\nconst N: u32 = max(WG, 0x10u) / 2u;\n"
           "var<workgroup> a: array<vec3<f32>, N>;\nvar<workgroup> b: atomic<u32>;\nvar<workgroup> c: array<u32, 99>;\n"
           "fn helper() { atomicAdd(&b, 1u); }\n@compute @workgroup_size(WG, 2)\nfn main() { a[0] = vec3<f32>(); helper(); }\n")
    assert shaders.workgroup_use(toy, "main", {"WG": 100}) == {"storage": 50 * 16 + 16, "vars": {"a": 800, "b": 16},
                                                              "size": (100, 2, 1)}
    with pytest.raises(shaders.WGSLValueError, match="no function 'nope'"):
        shaders.workgroup_use(toy, "nope")


def test_a_kernel_over_the_limits_is_refused_by_name_before_anything_is_uploaded(devices, tiny_model):
    """(devices: a native adapter is there.)"""
    from bitweb.engine import Engine
    from bitweb.gguf import FileSource, open_gguf
    over = ("lmhead", "gemv", dict(LMHEAD, K=3784), {"FORMAT": formats.F16})
    small = run(gpu.request_device("native", mask_features=["subgroups"], cap_limits={"maxComputeWorkgroupStorageSize": 16384}))
    small.check_pipelines([("lmhead", "gemv", LMHEAD, {"FORMAT": formats.F16})])             # fits exactly
    with pytest.raises(gpu.LimitsError, match=r"kernel lmhead:gemv .* needs 16416 bytes of workgroup memory; "
                                              r"this GPU allows maxComputeWorkgroupStorageSize = 16384 \(short by 32 bytes\)"):
        small.check_pipelines([over])
    with pytest.raises(gpu.LimitsError, match="maxComputeWorkgroupStorageSize"):
        run(small.pipeline(*over))                                                   # and never compiled
    # a model whose kernels need more than a (very) small GPU has: refused at load, before any upload
    path = tiny_model(fmt="f32")
    tight = run(gpu.request_device("native", cap_limits={"maxComputeWorkgroupStorageSize": 1024}))
    before = tight.live()
    with FileSource(path) as src, pytest.raises(gpu.LimitsError, match="maxComputeWorkgroupStorageSize = 1024"):
        run(Engine.load(tight, open_gguf(path), src, activations="f32"))
    assert tight.live() == before and tight.counters["writes"] == 0 and tight.counters["pipelines"] == 0
    narrow = run(gpu.request_device("native", cap_limits={"maxComputeInvocationsPerWorkgroup": 32}))
    with FileSource(path) as src, pytest.raises(gpu.LimitsError, match="maxComputeInvocationsPerWorkgroup = 32"):
        run(Engine.load(narrow, open_gguf(path), src, activations="f32"))
