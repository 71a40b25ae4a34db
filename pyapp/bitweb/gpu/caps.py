"""What a device can do and what bitweb asks of it (stdlib only): the features and limits requested,
WebGPU's guaranteed minimum, the capabilities decided at start-up (Caps), a weaker GPU on request
(check_weaker, capped: the app's ?cap=, tests), the fit of a model's largest binding and buffer
(check_fits) and the names of CPU rasterisers (software_reason).

A weaker device (tests, the app's `?cap=`, the library's maskFeatures / capLimits): a masked
feature's Caps flag is off, so every launch spec takes the fallback (no subgroups, no dot4, f16 as
unpack2x16float); a capped limit is requested at most at its cap and `dev.limits` is capped in
Python below WebGPU's defaults; dev.masked, dev.capped, dev.weaker say so. check_pipelines
refuses a pipeline whose entry point needs more workgroup memory, invocations or width than the
limits (shaders.workgroup_use: WebGPU's count, roundUp(16, size) per workgroup variable reached;
checked against Chromium's own validation in tests/e2e/test_weak_gpu.py). WEBGPU_MINIMUM is the
`mobile` preset (web/cap.mjs has the same table; tests/test_weak_gpu.py checks).
"""
from __future__ import annotations

from dataclasses import dataclass

from bitweb.gpu.errors import GPUError, LimitsError
from bitweb.options import FEATURES, LIMITS, SOFTWARE_ADAPTERS

# What request_device(mask_features=...) may turn off, to act as a GPU without it (bitweb.options
# FEATURES): the features asked for when the adapter has them (WebGPU names) and WGSL's language
# feature for dot4I8Packed (Caps.dot4).
MASKABLE = FEATURES
DOT4_FEATURE = "packed_4x8_integer_dot_product"
WANTED_FEATURES = tuple(f for f in FEATURES if f != DOT4_FEATURE)
# Limits raised to the adapter's maximum (defaults are small: 128 MiB bindings; bitweb.options LIMITS).
WANTED_LIMITS = LIMITS
# WebGPU's guaranteed minimum of each of them: what every adapter has, and about what a phone's GPU
# offers (the app's ?cap=mobile asks for these; web/cap.mjs has the same table).
WEBGPU_MINIMUM = {"maxBufferSize": 268435456, "maxStorageBufferBindingSize": 134217728,
                  "maxStorageBuffersPerShaderStage": 8, "maxComputeWorkgroupStorageSize": 16384,
                  "maxComputeInvocationsPerWorkgroup": 256, "maxComputeWorkgroupSizeX": 256,
                  "maxComputeWorkgroupsPerDimension": 65535}


@dataclass
class Caps:
    """What the device can do, decided once at start-up and logged."""
    subgroups: bool = False
    shader_f16: bool = False
    dot4: bool = False              # WGSL dot4I8Packed (packed_4x8_integer_dot_product)
    timestamps: bool = False
    subgroup_matrix: bool = False   # reported only: no kernel uses it yet (none could be checked)
    subgroup_min: int = 0           # as reported (may be wrong on wgpu-native 0.32)
    subgroup_max: int = 0

    def summary(self) -> str:
        on = [k for k in ("subgroups", "shader_f16", "dot4", "timestamps", "subgroup_matrix") if getattr(self, k)]
        return ", ".join(on) or "none"


# Adapter names of CPU rasterisers (WebGPU / Vulkan / D3D software implementations) -> the name said.
# The one list (bitweb.options): the kernels' default tunes ask the same test (bitweb.kernels.rasteriser).
SOFTWARE_NAMES = SOFTWARE_ADAPTERS


def software_reason(info: dict, fallback: bool = False) -> str | None:
    """Why an adapter is a software one: a CPU rasteriser's name in its vendor / architecture /
    device / description, the browser's isFallbackAdapter (`fallback`), or wgpu's adapter_type
    "CPU". None: a hardware GPU as far as the adapter tells."""
    text = " ".join(str(info.get(k, "")) for k in ("vendor", "architecture", "device", "description")).lower()
    for key, name in SOFTWARE_NAMES.items():
        if key in text:
            return name
    if fallback:
        return "fallback adapter"
    if str(info.get("adapter_type", "")).lower() == "cpu":
        return "CPU adapter"
    return None


def check_weaker(mask_features=(), cap_limits=None) -> tuple[tuple, dict]:
    """(mask, caps) checked: mask a tuple of MASKABLE names, caps {WANTED_LIMITS name: positive int}.
    GPUError naming the bad entry."""
    mask = tuple(sorted(set(mask_features or ())))
    for f in mask:
        if f not in MASKABLE:
            raise GPUError(f"mask_features: {f!r} is not a feature bitweb uses (one of {', '.join(MASKABLE)})")
    caps = dict(cap_limits or {})
    for k, v in caps.items():
        if k not in WANTED_LIMITS:
            raise GPUError(f"cap_limits: {k!r} is not a limit bitweb uses (one of {', '.join(WANTED_LIMITS)})")
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise GPUError(f"cap_limits: {k} must be a positive integer (got {v!r})")
    return mask, caps


def capped(limits: dict, caps: dict) -> dict:
    """limits with each capped one at most its cap (a limit the device does not report is the cap)."""
    out = dict(limits)
    for k, v in caps.items():
        out[k] = min(int(v), int(out.get(k, v)))
    return out


def check_fits(dev: Device, need_binding: int, need_buffer: int | None = None, what: str = "model") -> None:
    """Raise LimitsError naming the limit and the shortfall when a model cannot run on dev."""
    if need_binding > dev.max_binding:
        raise LimitsError(f"{what} needs a storage binding of {need_binding} bytes; this GPU allows "
                          f"maxStorageBufferBindingSize = {dev.max_binding} (short by {need_binding - dev.max_binding} bytes)")
    if need_buffer is not None and need_buffer > dev.max_buffer:
        raise LimitsError(f"{what} needs a buffer of {need_buffer} bytes; this GPU allows "
                          f"maxBufferSize = {dev.max_buffer} (short by {need_buffer - dev.max_buffer} bytes)")
