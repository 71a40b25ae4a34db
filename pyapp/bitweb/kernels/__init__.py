"""Launch specs for the WGSL kernels (stdlib only): one module per shader family.

A kernel launch is described by plain data, a `Step`, so the engine, the kernel
tests (bitweb.kernel_check, native and in the browser) and the benchmarks all
run a kernel the same way:

    step = bitlinear.gemv(fmt="I2_S", n_in=2560, n_out=2560, ...)   # -> Step
    pipe, bg, wg = await step.instantiate(dev, {"w": wbuf, "x": xbuf, "y": ybuf, ...})

Shapes that are fixed for a model are `override` constants (pipelines are cached
per (shader, entry, constants, defines)); values that change per call
(position, number of rows) live in a small `params` buffer.

| module | shader | kernels |
|---|---|---|
| bitlinear.py | shaders/bitlinear.wgsl | M=1 ternary/binary GEMV (I2_S, TQ2_0, TQ1_0, Q1_0; f32 or A8) + fused variants |
| bitlinear_tiled.py | shaders/bitlinear_tiled.wgsl | M>1 (prefill) ternary/binary matmul |
| dense.py | shaders/dense.wgsl | F32/F16/BF16 matmul (LM head, float weights), sharded |
| lmhead.py | shaders/lmhead.wgsl | LM head GEMV (M=1, output norm fused) |
| requant.py | shaders/requant.wgsl | float rows -> Q8_0 (LM head option) |
| glue.py | shaders/glue.wgsl | residual add, gate act * up (float-weight blocks) |
| ops.py | shaders/{rmsnorm,rope,embedding,attention,sampling}.wgsl | the rest |
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class Step:
    shader: str                     # shaders/<shader>.wgsl
    entry: str                      # entry point
    bind: tuple                     # buffer names, binding i = bind[i]
    workgroups: tuple               # (x, y, z)
    constants: dict = field(default_factory=dict, hash=False)   # override constants
    defines: dict = field(default_factory=dict, hash=False)     # #if switches (see bitweb.shaders)

    def with_constants(self, **constants) -> "Step":
        """The same launch with some override constants set (e.g. dense ROW0 / Y_STRIDE: where y goes)."""
        return replace(self, constants=dict(self.constants, **constants), defines=dict(self.defines))

    async def pipeline(self, dev):
        return await dev.pipeline(self.shader, self.entry, self.constants, self.defines)

    async def instantiate(self, dev, buffers: dict):
        """(pipeline, bind_group, workgroups) with binding i -> buffers[bind[i]] (a Buffer or (Buffer, off, size))."""
        p = await self.pipeline(dev)
        missing = [n for n in self.bind if n not in buffers]
        if missing:
            raise KeyError(f"{self.shader}:{self.entry} needs buffers {missing}")
        return p, dev.bind_group(p, [buffers[n] for n in self.bind]), tuple(self.workgroups) + (1,) * (3 - len(self.workgroups))

    def as_case_step(self, index_of: dict) -> dict:
        """The kernel_check form: bindings as indices into a case's buffer list."""
        return {"shader": self.shader, "entry": self.entry, "constants": dict(self.constants),
                "defines": dict(self.defines), "bind": [index_of[n] for n in self.bind],
                "workgroups": list(self.workgroups)}


# Words in an adapter's info that mark a CPU rasteriser, for the kernels' default tunes.
CPU_ADAPTER_WORDS = ("swiftshader", "llvmpipe", "lavapipe", "cpu")


def rasteriser(dev) -> str | None:
    """The CPU rasteriser this device runs on, as the kernels' default tunes tell it: the first of
    CPU_ADAPTER_WORDS in any of its info values ("swiftshader", "llvmpipe", ...), None for a GPU
    (or no device). (bitweb.gpu.software_reason is what the app says to the user.)"""
    info = getattr(dev, "info", None) or {}
    kind = " ".join(str(v) for v in info.values()).lower()
    return next((w for w in CPU_ADAPTER_WORDS if w in kind), None)
