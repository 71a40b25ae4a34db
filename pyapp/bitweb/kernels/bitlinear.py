"""Launch specs for shaders/bitlinear.wgsl: M=1 GEMV of the packed formats and its fusions (stdlib only).

One decoded token per layer (x: residual stream f32[dim]):

    qkv = gemv(fmt, dim, (n_q, n_k, n_v), a8=a8, norm=True)                    # y = [Wq|Wk|Wv] . rmsnorm(x)
    out = gemv(fmt, dim, dim, a8=a8, norm=True, residual=True)                   # x += Wo . rmsnorm(o)
    ffn = gate_up(fmt, dim, n_ff, a8=a8, act="relu2")                             # g = relu(Wg.n)^2 * (Wu.n)
    dwn = gemv(fmt, n_ff, dim, a8=a8, norm=True, residual=True)                  # x += Wd . rmsnorm(g)
    pipe, bg, wg = await step.instantiate(dev, {"x": ..., "norm": ..., "mult": ..., "y": ..., "w0": ...})

API
    gemv(fmt, n_in, rows, *, a8, norm=False, residual=False, eps=1e-5, dev=None, y0=0, **tune) -> Step
        rows: int, or a tuple of 1..3 ints (one per weight tensor; outputs concatenated in y)
        bind: ("x", ["norm"], "mult", "y", "w0", ["w1"], ["w2"])
    gate_up(fmt, n_in, rows, *, a8, act="relu2"|"silu", norm=True, eps=1e-5, dev=None, **tune) -> Step
        bind: ("x", ["norm"], "mult", "y", "gate", "up")
    choose(dev=None, n_in=0, a8=True, rows=0) -> Tune   the tuning used when none is given
    q8_rows(n, rows, *, eps=1e-5, wg=64, norm=True) -> Step   prefill rows of ggml's integer path
        (shaders/quant_act.wgsl): normed, quantized per 32 values as the Q8B prologue does, written
        as packed int8 q and per-block (dx, sx) for the int8 prefill tile (bitlinear_tiled q8=True);
        bind ("x", ["norm"], "q", "scale"); wg: the gemv's
    split_parts(dev=None) -> bool    run q | k | v as one one-part gemv each (y0 = its first column)
    shape_bytes(n_in, rows, rpw, y0=0, residual=False) -> bytes   the run-time shape (Step.data "shape")
    variant(step, dev) -> str     which variant runs, e.g. "gemv I2_S A8 dot4 subgroup WG64 RPW320 RB4"
    FORMATS                       the linear formats (bitweb.formats Format objects); fmt is one of them
                                  (or its type id or name); a float one (F32, F16, BF16) f32 only
    block(fmt) -> int             values per block as the kernel walks a row (a float format: 16)

Buffers (all storage; binding i = bind[i]):
    x     f32[n_in]        input; read only. Must not alias y.
    norm  f32[n_in]        rmsnorm weight (norm=True)
    mult  f32[parts]       output multiplier per weight tensor (gemv: one per part; gate_up: gate, up).
                           llama.cpp arch `bitnet` has optional `blk.N.<name>.scale`; write 1.0 otherwise.
    y     f32[sum(rows)]   output; with residual=True it holds the residual on entry and y += W.n
    w0..w2, gate, up       each the whole raw GGUF tensor, unchanged (uploaded zero-padded to a multiple of
                           4 bytes); I2_S: n/4 + 32 bytes with the scale at byte n/4 (bound as vec4<u32>)
Workgroups: (ceil(total rows / rpw), 1, 1) in step.workgroups. One dispatch per call; no params buffer.

Variants (which runs: variant()): the reduction over a row's lanes is subgroupAdd when the device
has subgroups (any subgroup size), else a shared-memory tree (lanes threads per row); A8 dot
products use dot4I8Packed when the device has it, else plain integer maths; f32 activations are
staged in workgroup memory (xshared) when n_in * 4 bytes fit. Every combination is in the tests.

tune (keyword overrides, see Tune): wg, rpw, rb, lanes, subgroups (None: the device decides; False:
shared-memory reduction forced), xshared (f32 activations staged in workgroup memory), dot4 (None:
the device decides; False: plain-integer A8 dot products forced).
Formats: every linear format of bitweb.formats (n_in a multiple of block(fmt)); the float ones
(F32, F16, BF16) with f32 activations only.
Activations: a8=True is W1.58A8 (per-token absmax int8, dot4I8Packed where the device has it, else
plain integer maths) on the ternary / binary formats, and ggml's integer path on a format with a
Format.vec_dot (Q4_0, Q5_0, Q8_0: q8_0 blocks; Q4_1, Q5_1: q8_1, with the block sums): the input
quantized per 32 values as ggml-cpu's quantize_row_q8_0 / q8_1 do, integer dot products per block,
its scale maths (define Q8B); a8=False keeps f32 activations. The maths is in the shader header.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, replace

from bitweb import formats
from bitweb.kernels import Step, bound, check_q8_launch, format_arg, format_defines, rasteriser

# every linear format: the packed ones in both activation modes, the float ones (F32, F16, BF16: lanes
# of 16 values, common_float_unit.wgsl) with f32 activations; and the packed table formats (lmhead)
FORMATS = formats.select("linear")
MIN_WG_STORAGE = 16384          # WebGPU's guaranteed maxComputeWorkgroupStorageSize


def block(fmt) -> int:
    """Values per block as the kernel walks a row: the format's block (a float format: its lane unit
    of 16 values, the BLK its include declares); n_in must be a multiple."""
    return formats.get(fmt).wgsl_constants()["BLK"]


class BitLinearError(ValueError):
    pass


@dataclass(frozen=True)
class Tune:
    wg: int = 128           # threads per workgroup (power of two)
    rpw: int = 16           # output rows per workgroup (the norm / quantisation is redone per workgroup)
    rb: int = 2             # rows a lane group computes at once (1..4)
    lanes: int = 16         # lanes per row without subgroups (power of two <= wg)
    subgroups: bool | None = None   # None: device decides; False: force the shared-memory variant
    xshared: bool = False   # f32 mode: m = x * norm staged in workgroup memory
    dot4: bool | None = None        # None: device decides; False: force the plain-integer A8 dot
    shape: bool | None = None  # n_in, the rows and rpw read at run time from a small buffer (Step.data
                            # "shape"): linears of the same fusions share one pipeline
    n_cap: int = 0          # with shape: the largest n_in of the linears sharing that pipeline (0: n_in)


def _limits(dev) -> dict:
    return dict(getattr(dev, "limits", None) or {})


def choose(dev=None, n_in: int = 0, a8: bool = True, rows: int = 0) -> Tune:
    """Defaults per device (measured with dev/bitlinear/bench.py on lavapipe; GPU values untested).

    CPU adapters (lavapipe, SwiftShader): the per-workgroup prologue (norm + quantisation of x) is
    a large share, so few big workgroups: about 8 per dispatch (rpw >= 64), 4 rows per lane group
    (SwiftShader: 1 for A8, which compiles 2-4x faster and ran as fast or faster in Chromium:
    dev/perf/compile_times.py --bitlinear-speed, PERFORMANCE.md "Ready time"; 2 for f32 rows, which
    decoded SmolLM2 Q4_1 12-15 % faster for 0.44 s more compile).
    SwiftShader also reads the shape at run time (shape=True) and splits q | k | v into one gemv
    each (split_parts): q, k, v, attention output and FFN down share one pipeline.
    GPUs: many workgroups for memory parallelism: 128 threads, 16 rows each, 2 rows per lane group.
    """
    cpu = rasteriser(dev)
    if cpu:
        t = Tune(wg=64, rpw=max(64, -(-rows // 8)), rb=(1 if a8 else 2) if cpu == "swiftshader" else 4)
    else:
        t = Tune(wg=128, rpw=16, rb=2)
    storage = int(_limits(dev).get("maxComputeWorkgroupStorageSize", MIN_WG_STORAGE))
    if not a8 and n_in * 4 + 8 * t.wg * 4 + 64 <= storage:
        t = replace(t, xshared=True)
    return t


def split_parts(dev=None) -> bool:
    """Whether a linear of several parts (q | k | v) runs as one gemv per part (y0: its columns)
    rather than one PARTS3 gemv: on SwiftShader, where the one-part gemvs (q, k, v, attention
    output, FFN down) then share one run-time shape pipeline: 2 bitlinear compiles instead of 4
    (with gate_up). Its compiles are the browser's ready-time floor; lavapipe's are tens of ms."""
    return rasteriser(dev) == "swiftshader"


def _check(fmt, n_in, rows, tune: Tune):
    if n_in <= 0 or n_in % block(fmt):
        raise BitLinearError(f"bitlinear: n_in = {n_in} is not a positive multiple of the {fmt.name} block "
                             f"({block(fmt)})")
    if not rows or any(r <= 0 for r in rows) or len(rows) > 3:
        raise BitLinearError(f"bitlinear: rows per part must be 1..3 positive counts, got {rows}")
    wg = tune.wg
    if wg & (wg - 1) or not 4 <= wg <= 1024:
        raise BitLinearError(f"bitlinear: wg = {wg} must be a power of two in 4..1024")
    if tune.lanes & (tune.lanes - 1) or not 1 <= tune.lanes <= wg:
        raise BitLinearError(f"bitlinear: lanes = {tune.lanes} must be a power of two <= wg ({wg})")
    if tune.shape and tune.n_cap and (tune.n_cap < n_in or tune.n_cap % block(fmt)):
        raise BitLinearError(f"bitlinear: n_cap = {tune.n_cap} must be a multiple of the {fmt.name} block >= n_in ({n_in})")
    if not 1 <= tune.rb <= 4:
        raise BitLinearError(f"bitlinear: rb = {tune.rb} must be 1..4")
    if tune.rpw < 1:
        raise BitLinearError(f"bitlinear: rpw = {tune.rpw} must be >= 1")


def _tune(dev, n_in, a8, rows, kw) -> Tune:
    t = choose(dev, n_in, a8, rows)
    t = replace(t, **kw)
    if a8 and t.xshared:
        t = replace(t, xshared=False)
    return t


def shape_bytes(n_in: int, rows, rpw: int, y0: int = 0, residual: bool = False) -> bytes:
    """The run-time shape of a linear (struct Shape of shaders/bitlinear.wgsl; 32 bytes)."""
    rows = tuple(rows) + (0,) * (3 - len(rows))
    return struct.pack("<8I", n_in, *rows, rpw, y0, int(bool(residual)), 0)


def _step(entry, fmt, n_in, rows, a8, norm, residual, eps, tune: Tune, extra: dict, weights, y0: int = 0):
    fmt = format_arg(fmt, FORMATS, "bitlinear", BitLinearError)
    if a8 and not fmt.packed:
        raise BitLinearError(f"bitlinear: a8 needs a packed format; {fmt.name} runs with f32 activations")
    _check(fmt, n_in, rows, tune)
    if y0 and not tune.shape:
        raise BitLinearError(f"bitlinear: y0 = {y0} needs the run-time shape variant (shape=True)")
    rows = tuple(rows) + (0,) * (3 - len(rows))
    defines = dict(format_defines(fmt), A8=bool(a8), Q8B=bool(a8 and fmt.vec_dot), NORM=bool(norm), RESIDUAL=bool(residual),
                   XSHARED=bool(tune.xshared and not a8))
    defines.update(extra)
    if tune.subgroups is not None:
        defines["SUBGROUPS"] = bool(tune.subgroups)
    if tune.dot4 is not None:
        defines["DOT4"] = bool(tune.dot4)
    constants = {"WG": tune.wg, "N_IN": n_in, "ROWS0": rows[0], "ROWS1": rows[1], "ROWS2": rows[2],
                 "RPW": tune.rpw, "RB": tune.rb, "LANES": tune.lanes, "EPS": float(eps)}
    total = rows[0] if entry == "gate_up" else sum(rows)
    data = {}
    if tune.shape:              # the shape at run time: constants that do not depend on it
        defines.update(SHAPE=True, RESIDUAL=False)
        constants = {"WG": tune.wg, "N_IN": tune.n_cap or n_in, "RB": tune.rb, "LANES": tune.lanes, "EPS": float(eps)}
        data = {"shape": shape_bytes(n_in, rows, tune.rpw, y0, residual)}
    names = dict({"x": "x", "nw": "norm", "mult": "mult", "y": "y", "shape": "shape"},
                 **{f"w{i}": w for i, w in enumerate(weights)})
    return Step("bitlinear", entry, bound("bitlinear", defines, names), (-(-total // tune.rpw), 1, 1), constants,
                defines, data)


def gemv(fmt, n_in: int, rows, *, a8: bool, norm: bool = False, residual: bool = False,
         eps: float = 1e-5, dev=None, y0: int = 0, **tune) -> Step:
    """y (+)= [W0|W1|W2] . (rmsnorm(x) if norm else x); one dispatch over all parts' rows.
    y0 (the run-time shape variant only): y index of row 0 (one part of a wider output)."""
    rows = (rows,) if isinstance(rows, int) else tuple(rows)
    t = _tune(dev, n_in, a8, sum(rows), tune)
    parts = len(rows)
    if t.shape is None:         # SwiftShader: the one-part linears share one pipeline (split_parts)
        t = replace(t, shape=split_parts(dev) and parts == 1)
    extra = {"PARTS2": parts >= 2, "PARTS3": parts >= 3}
    return _step("gemv", fmt, n_in, rows, a8, norm, residual, eps, t, extra, [f"w{i}" for i in range(parts)], y0)


def gate_up(fmt, n_in: int, rows: int, *, a8: bool, act: str = "relu2", norm: bool = True,
            eps: float = 1e-5, dev=None, **tune) -> Step:
    """y = act(Wg . n) * (Wu . n), n = rmsnorm(x) (or x); act relu2 = relu(.)^2 (bitnet-b1.58), silu (bitnet)."""
    if act not in ("relu2", "silu"):
        raise BitLinearError(f"bitlinear.gate_up: act must be 'relu2' or 'silu', got {act!r}")
    t = _tune(dev, n_in, a8, rows, tune)
    if t.shape is None:
        t = replace(t, shape=False)
    extra = {"GATE_UP": True, "PARTS2": True, "ACT_SILU": act == "silu"}
    return _step("gate_up", fmt, n_in, (rows,), a8, norm, False, eps, t, extra, ["gate", "up"])


def q8_rows(n: int, rows: int, *, eps: float = 1e-5, wg: int = 64, norm: bool = True) -> Step:
    """The rows of x as ggml's q8 blocks (Q8B's quantization): q u32[rows][n / 4] (packed int8),
    scale vec2<f32>[rows][n / 32] (f16(d), f16(d sum q)), the int8 prefill tile's input
    (bitlinear_tiled q8=True). With wg equal to the decode gemv's (choose().wg), q, d and s are bit
    for bit the decode kernel's."""
    from bitweb.kernels.dense import workgroups_1d
    check_q8_launch("bitlinear.q8_rows", "n", n, rows, wg, "q8", BitLinearError)
    d = {"NORM": bool(norm)}
    return Step("quant_act", "quant_act", bound("quant_act", d, {"x": "x", "w": "norm", "q": "q", "xs": "scale"}),
                workgroups_1d(rows), {"N": n, "WG": wg, "EPS": float(eps)}, d)


def variant(step: Step, dev=None) -> str:
    """Human-readable name of what runs for this step on dev."""
    d, c = step.defines, step.constants
    sg = d.get("SUBGROUPS", bool(dev is not None and dev.caps.subgroups))
    dot4 = d.get("DOT4", bool(dev is not None and dev.caps.dot4))
    a8 = step.format.vec_dot.upper() if d.get("Q8B") else "A8"
    act = (a8 + " " + ("dot4" if dot4 else "int")) if d.get("A8") else ("f32 xshared" if d.get("XSHARED") else "f32")
    fmt = step.format.name
    red = "subgroup" if sg else f"shared(lanes {c['LANES']})"
    if d.get("SHAPE"):
        rpw = struct.unpack("<8I", step.data["shape"])[4]
        return f"{step.entry} {fmt} {act} {red} WG{c['WG']} RPW{rpw} RB{c['RB']} shape(n_cap {c['N_IN']})"
    return f"{step.entry} {fmt} {act} {red} WG{c['WG']} RPW{c['RPW']} RB{c['RB']}"
