"""Launch specs for the WGSL kernels (stdlib only): one module per shader family.

A kernel launch is described by plain data, a `Step`, so the engine, the kernel
tests (bitweb.kernel_check, native and in the browser) and the benchmarks all
run a kernel the same way:

    step = bitlinear.gemv(formats.I2_S, n_in=2560, rows=2560, ...)  # -> Step
    pipe, bg, wg = await step.instantiate(dev, {"w": wbuf, "x": xbuf, "y": ybuf, ...})

A Step's `bind` is its buffer names in binding order, from bound(): a launch spec names the buffer
of each WGSL variable its entry point uses, and the numbers are the shader loader's (bitweb.shaders:
`@binding(auto)`, in order of declaration under the step's defines), never kept by hand here.

Shapes that are fixed for a model are `override` constants (pipelines are cached
per (shader, entry, constants, defines)); the weight format travels as the Format object itself,
define "FORMAT" (bitweb.shaders asks it for its include; a kernel case stores its type id); values
that change per call
(position, number of rows) live in a small `params` buffer. A launch may bring
small constant buffers of its own (`Step.data`: bitlinear's run-time shape, the LM
head's shard rows, bitlinear_tiled matmul's n_out, so that one pipeline serves
several shapes where no unrolled loop depends on them): instantiate() creates them (once per
contents in `store`: the engine's buffers, else the device's) unless the caller
binds that name itself.

| module | shader | kernels |
|---|---|---|
| bitlinear.py | shaders/bitlinear.wgsl | M=1 GEMV of the packed formats (f32 or A8) + fused variants |
| bitlinear_tiled.py | shaders/bitlinear_tiled.wgsl | M>1 (prefill) matmul of the packed formats |
| dense.py | shaders/dense.wgsl | F32/F16/BF16 matmul (LM head, float weights), sharded |
| lmhead.py | shaders/lmhead.wgsl | LM head GEMV (M=1, output norm fused) |
| requant.py | shaders/requant.wgsl | float rows -> Q8_0 (LM head option) |
| glue.py | shaders/glue.wgsl | residual add, gate act * up (float-weight blocks) |
| ops.py | shaders/{rmsnorm,rope,embedding,attention,sampling}.wgsl | the rest |

Switches (defines) per shader, besides the device's SUBGROUPS / F16 / DOT4 / BROWSER / NATIVE:
  bitlinear        gemv, gate_up: FORMAT (every linear format), A8, NORM, RESIDUAL, PARTS2, PARTS3,
                   GATE_UP, ACT_SILU, XSHARED, SHAPE (n_in, rows, y's first index and the residual
                   from the step's `shape` buffer: SwiftShader's one pipeline for q, k, v, o, down)
  bitlinear_tiled  matmul, gate_up: FORMAT (packed), A8, RESIDUAL, GATE_UP, ACT_SILU (tile constants
                   RQ / NQ / WG; lavapipe's wide tiles from WIDE values on, PAIRS for I2_S A8)
  dense            gemv, matmul: FORMAT (float), NORM, LASTROW
  lmhead           gemv: FORMAT (a table format), PACKED, A8, LASTROW, XDIRECT
  requant          q8_0: FORMAT (F16 / BF16 / F32)
  rmsnorm          A8, NO_NORM;   rope: ROPE_NORM, QK_NORM, QKV_BIAS, KV_F16
  attention        decode, prefill, prefill_wg, combine: ROPE_NORM, QK_NORM, QKV_BIAS, KV_F16, GMAX2 / GMAX4
  embedding        FORMAT, NS1..NS7;   sampling: argmax, topk, softmax, MASK;   glue: ACT_MUL, ACT_SILU
A8 cases are made only for the formats the engine runs in A8 (Format.a8).

Where SwiftShader is the adapter (its compile time grows with workgroup arrays, about 0.25 ms per
4-byte word; it unrolls no loop and runs both sides of every branch): workgroup arrays sized by the
shape (lmhead XDIRECT reads m from x and g; attention's head arrays by G / GMAX; argmax by two
atomics), small fixed loops written out, and pipelines shared only between linears that differ in
shape alone (bitlinear SHAPE); the per-unit fusions stay defines (dev/perf/compile_times.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from bitweb import formats
from bitweb.gpu import software_reason


@dataclass(frozen=True)
class Step:
    shader: str                     # shaders/<shader>.wgsl
    entry: str                      # entry point
    bind: tuple                     # buffer names, binding i = bind[i] (bound(): the loader's numbers)
    workgroups: tuple               # (x, y, z)
    constants: dict = field(default_factory=dict, hash=False)   # override constants
    defines: dict = field(default_factory=dict, hash=False)     # #if switches (see bitweb.shaders)
    data: dict = field(default_factory=dict, hash=False)        # bind name -> bytes of a constant buffer

    def with_constants(self, **constants) -> "Step":
        """The same launch with some override constants set (e.g. dense ROW0 / Y_STRIDE: where y goes)."""
        return replace(self, constants=dict(self.constants, **constants), defines=dict(self.defines),
                       data=dict(self.data))

    async def pipeline(self, dev):
        return await dev.pipeline(self.shader, self.entry, self.constants, self.defines)

    async def instantiate(self, dev, buffers: dict, store: dict | None = None):
        """(pipeline, bind_group, workgroups) with binding i -> buffers[bind[i]] (a Buffer or (Buffer, off, size));
        the step's data buffers not in `buffers` come from `store` (created there when missing; default:
        a cache that lives as long as the device)."""
        p = await self.pipeline(dev)
        buffers = dict({n: data_buffer(dev, b, store) for n, b in self.data.items() if n not in buffers}, **buffers)
        missing = [n for n in self.bind if n not in buffers]
        if missing:
            raise KeyError(f"{self.shader}:{self.entry} needs buffers {missing}")
        return p, dev.bind_group(p, [buffers[n] for n in self.bind]), tuple(self.workgroups) + (1,) * (3 - len(self.workgroups))

    def as_case_step(self, index_of: dict) -> dict:
        """The kernel_check form (JSON): bindings as indices into a case's buffer list, the format
        as its type id (bitweb.shaders takes either)."""
        defines = {k: v.type_id if isinstance(v, formats.Format) else v for k, v in self.defines.items()}
        return {"shader": self.shader, "entry": self.entry, "constants": dict(self.constants),
                "defines": defines, "bind": [index_of[n] for n in self.bind],
                "workgroups": list(self.workgroups)}

    @property
    def format(self):
        """The weight format this launch reads (None for kernels that read none)."""
        f = self.defines.get("FORMAT")
        return None if f is None else formats.get(f)


def bound(shader: str, defines: dict, names) -> tuple:
    """The buffers of a launch in binding order: names maps each WGSL variable the entry point uses
    to its buffer name (or is a list of variables named as their buffers); the variables shaders/<shader>.wgsl
    does not declare under `defines` are left out. A name the shader never declares, two buffers
    in one binding or a gap in the numbers is a ValueError."""
    from bitweb import shaders
    names = dict(names) if isinstance(names, dict) else {n: n for n in names}
    unknown = sorted(set(names) - shaders.binding_names(shader))
    if unknown:
        raise ValueError(f"{shader}.wgsl declares no binding {unknown}")
    slots: dict = {}
    for var, n in shaders.bindings(shader, defines).items():
        if var in names:
            slots.setdefault(n, set()).add(names[var])
    if sorted(slots) != list(range(len(slots))) or any(len(b) > 1 for b in slots.values()):
        raise ValueError(f"{shader}.wgsl: the variables {sorted(names)} take bindings "
                         f"{ {n: sorted(b) for n, b in sorted(slots.items())} }: not one buffer each of 0..n-1")
    return tuple(slots[n].pop() for n in range(len(slots)))


def format_arg(fmt, allowed, what: str, error) -> formats.Format:
    """A launch spec's format argument (a Format, or a type id or name) -> the Format, one of allowed;
    else error(message) naming what was given and what is supported."""
    try:
        f = formats.get(fmt)
    except formats.FormatError:
        f = None
    if f not in allowed:
        raise error(f"{what}: format {f.name if f else fmt!r} not supported "
                    f"(one of {', '.join(a.name for a in allowed)})")
    return f


def check_q8_launch(where: str, k: str, n: int, rows: int, wg: int, blocks: str, error) -> None:
    """The launch checks of a kernel writing 32-value q8 blocks of rows x n values (requant,
    bitlinear.q8_rows): raises error naming `where` and the argument `k` that is wrong."""
    if n <= 0 or n % 32:
        raise error(f"{where}: {k} = {n} must be a positive multiple of 32 ({blocks} blocks)")
    if rows <= 0:
        raise error(f"{where}: rows = {rows} must be positive")
    if wg & (wg - 1) or not 1 <= wg <= 256:
        raise error(f"{where}: wg = {wg} must be a power of two <= 256")


def format_defines(fmt) -> dict:
    """The defines that select fmt's decode in a kernel (bitweb.shaders: `#include format`)."""
    return {"FORMAT": fmt}


def data_buffer(dev, data: bytes, store: dict | None = None):
    """A buffer holding `data` (a Step's constant buffer), one per contents in store (default: the device's)."""
    store = dev.__dict__.setdefault("_step_data", {}) if store is None else store
    key = ("step data", bytes(data))
    if key not in store:
        buf = dev.create_buffer(max(16, -(-len(data) // 16) * 16), label="step data")
        dev.write_buffer(buf, 0, key[1])
        store[key] = buf
    return store[key]


def rasteriser(dev) -> str | None:
    """The CPU rasteriser this device runs on, for the kernels' default tunes: the one test of a
    software adapter, bitweb.gpu.software_reason (what dev.software and the app say), in lower
    case ("swiftshader", "llvmpipe", ... "cpu adapter"); None for a GPU (or no device)."""
    why = software_reason(getattr(dev, "info", None) or {}, bool(getattr(dev, "fallback", False)))
    return why.lower() if why else None
