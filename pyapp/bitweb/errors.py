"""The library's error kinds (stdlib only): what the page is told of a failure, {"error": {"kind",
"message", "advice"?, ...}} (README, "Errors"; web/bitweb.mjs ERROR_KINDS), for every exception the
engine, the GPU layer, the GGUF reader or a request check raises (`classify`)."""
from __future__ import annotations

import json

from bitweb import formats, gguf
from bitweb.gpu.errors import DeviceLostError, GPUError, LimitsError, NoAdapterError


class AppError(Exception):
    """An error with a kind chosen here; `extra` (plain values) goes to the page with it."""

    def __init__(self, kind: str, message: str, **extra):
        super().__init__(message)
        self.kind = kind
        self.extra = extra


class OutOfMemory(GPUError):
    """A GPU allocation failed (WebGPU out-of-memory error scope), or the model cannot fit."""


class Aborted(Exception):
    """The caller aborted this request (its AbortSignal)."""


def classify(e: BaseException) -> tuple[str, str]:
    """(kind, message) for the page. Kinds: no-webgpu, limits, format, unsupported, context,
    device-lost, out-of-memory, no-room, settings, aborted, unloaded, gpu, internal."""
    name = type(e).__name__
    msg = str(e) or name
    if isinstance(e, AppError):
        return e.kind, msg
    if isinstance(e, Aborted):
        return "aborted", msg or "aborted"
    if isinstance(e, NoAdapterError):
        return "no-webgpu", msg
    if isinstance(e, LimitsError):
        return "limits", msg
    if isinstance(e, DeviceLostError):
        return "device-lost", msg
    if isinstance(e, OutOfMemory):
        return "out-of-memory", msg
    if isinstance(e, gguf.GGUFError):
        return "format", msg
    if name in ("ModelError", "TokenizerError", "EngineError", "TemplateError"):
        return "unsupported", msg
    if name == "ContextError":
        return "context", msg
    if name in ("SamplingError", "ChatError"):
        return "settings", msg
    if isinstance(e, MemoryError):
        return "out-of-memory", "out of memory in the Python heap: " + msg
    if isinstance(e, GPUError):
        return "gpu", msg
    return "internal", f"{name}: {msg}"


def error_json(e: BaseException) -> str:
    kind, msg = classify(e)
    if kind == "internal":
        import traceback
        print(traceback.format_exc())
    err = {"kind": kind, "message": msg}
    if advice(kind):
        err["advice"] = advice(kind)
    err.update(getattr(e, "extra", None) or {})
    return json.dumps({"error": err})


def advice(kind: str) -> list:
    """Lines the page adds to its own advice for an error kind: the architectures (bitweb.model.ARCHS)
    and weight formats (bitweb.formats) for a file it cannot read or run."""
    if kind not in ("format", "unsupported"):
        return []
    from bitweb.model import ARCHS
    return [f"Architectures bitweb runs (general.architecture): {', '.join(ARCHS)}.",
            f"Weight formats bitweb runs: block linears {', '.join(f.name for f in formats.select('linear'))}; "
            f"token embedding and LM head {', '.join(f.name for f in formats.select('table'))}."]
