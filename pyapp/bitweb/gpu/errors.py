"""The GPU errors bitweb raises (stdlib only): each with a message a person can act on; the
library's worker gives each its kind (bitweb.webapp.classify)."""
from __future__ import annotations

class GPUError(RuntimeError):
    """Any GPU failure with a message a person can act on."""


class NoAdapterError(GPUError):
    pass


class LimitsError(GPUError):
    pass


class DeviceLostError(GPUError):
    pass


class ShaderError(GPUError):
    pass
