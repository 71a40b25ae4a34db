"""Launch specs for shaders/bitlinear_tiled.wgsl: M>1 (prefill) matmul of the packed formats (stdlib only).

    step = matmul(fmt, n_in, n_out, m_max, a8=True, dev=dev)      # Y[M, n_out] = X[M, n_in] . W^T
    step = matmul(fmt, n_in, n_out, m_max, a8=True, residual=True)      # Y += ...
    step = gate_up(fmt, n_in, n_ff, m_max, a8=True, act="relu2")        # Y = act(X.Wg^T) * (X.Wu^T)

API
    matmul(fmt, n_in, n_out, m_max, *, a8, residual=False, dev=None, rq=None, nq=None, wg=None,
           subgroups=None, y_stride=0, y_col0=0, pairs=None, octets=None, q8=False, dot4=None) -> Step
        bind ("params", "x", "mult", "y", "w", "shape")        f32 activations
             ("params", "q", "scale", "mult", "y", "w", "shape")   a8
        n_out is read at run time (Step.data "shape": shape_bytes(n_out)), so the matmuls of a
        model that differ only in n_out (q and k / v) share one pipeline (n_in, the block loop's
        bound, stays an override constant: at run time it measured up to 10 % slower on lavapipe)
    gate_up(fmt, n_in, n_out, m_max, *, a8, act="relu2"|"silu", dev=None, rq=None, nq=None, wg=None,
            subgroups=None, pairs=None, octets=None, q8=False, dot4=None) -> Step
        bind as matmul with "gate", "up" in place of "w", no "shape" (n_out: an override constant)
    shape_bytes(n_out) -> bytes             matmul's run-time shape (u32[4]: n_out, 0, 0, 0)
    q8=True (with a8=True; a Format.vec_dot format: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0): ggml's q8 rows as
        bitlinear.q8_rows writes them, "scale" vec2<f32>[M][n_in / 32] (f16 dx, f16 sx) per row and
        block; per block the integer sums I = sum (c - ZP) q, then (dw dx) I (+ mw sx), ggml's vec_dot.
        dot4 (q8 only): the sums by dot4I8Packed (True) or in f32 arithmetic (False, the fallback);
        None: q8_dot4(dev), once per device (CPU rasterisers: f32; no device: the DOT4 define)
    q8_dot4(dev) -> bool | None      that choice
    choose(dev, a8, gate_up=False, n_in=0, n_out=0, fmt=None) -> Tile   the tile for this device and shape
    lanes(dev) -> int        a CPU rasteriser's SIMD lanes from its device string (lavapipe), 0 unknown
    The tile: an invocation computes 4 rq rows (rq 1..4) x 4 nq outputs (nq 1..4); wg invocations per
    workgroup take consecutive outputs. Workgroups (ceil(n_out / (4 nq wg)), ceil(m_max / (4 rq))).
    subgroups: None = the device decides (A8 only: quads share the activation loads); False = off.
    pairs (a tensor_scale format: I2_S; A8, rq 2 or 4): two rows per f32 multiply-add, split exactly per plane.
    octets (a format of 4 planes: I2_S, TQ2_0, Q2_0 ...; A8, rq 4, wg a multiple of 8, subgroups of a multiple of 8 lanes): 8 lanes
    share the activation loads. None = choose() decides (lavapipe's wide tiles).
    The dispatch covers m_max rows; the rows of one call, M <= m_max, are word 0 of `params`
    (the ops params block, bitweb.kernels.ops.params(m=M)).

Buffers
    params  u32[8]           word 0 = M
    x       f32[M][n_in]     rows already normed (f32 mode)
    q       u32[M][n_in/4]   A8 rows as written by ops.rmsnorm(a8=True): int8 x4 little endian per word
    scale   f32[M]           their inv_s = max(max|x|, 1e-5) / 127 (x ~= q * inv_s); A8: P = S * (ws * inv_s * mult),
                             the decode kernel's (bitlinear.wgsl) formula and order
    mult    f32[1] (gate_up: f32[2])   output multiplier(s); 1.0 when the model has none
    y       f32[M][n_out]    output; residual=True: holds the residual on entry, y += P
    w, gate, up              raw GGUF tensor bytes (zero-padded to a multiple of 4; I2_S: of 16)
Formats: FORMATS, the packed formats (n_in a multiple of their block).

Tiles per device (measured with dev/bitlinear/tiled_bench.py, tile_tune.py and tiled_browser.py, see
the README there): lavapipe, weights of at least WIDE values: 16 rows x 16 outputs, 16 invocations,
with octets (I2_S, TQ2_0, Q2_0: gate_up the same x 2 tensors) and pairs (I2_S), else 16 x 16 / gate_up
16 x 8 in 32; smaller: 16 x 8, 16 (gate_up 16 x 4, 64); q8 rows at any size the wide tiles, matmul
16 x 12 where it idles fewer lanes (dev/perf/q8_tile.py); f32 rows 16 x 16, 16; SwiftShader 16
rows x 8 outputs, 64 invocations (gate_up: 16 x 4), f32 rows 16 x 8, 16; GPUs (untested) 8 rows x 4
outputs.
"""
from __future__ import annotations

import re
import struct

from dataclasses import dataclass, replace

from bitweb import formats
from bitweb.kernels import Step, bound, format_arg, format_defines, rasteriser
from bitweb.kernels.bitlinear import BitLinearError

FORMATS = formats.select(packed=True)      # the packed formats (float linears' prefill: dense.matmul)


@dataclass(frozen=True)
class Tile:
    rq: int = 2              # row quads per invocation (1..4)
    nq: int = 1              # output quads per invocation (1..4)
    wg: int = 64             # invocations per workgroup (power of two, >= 4)
    pairs: bool = False      # I2_S A8: two rows per f32 multiply-add (rq 2 or 4)
    octets: bool = False     # A8, 4 planes a unit, rq 4: 8 subgroup lanes share the activation loads


def pairs_fit(fmt) -> bool:
    """pairs need a format without block scales (a tensor scale: I2_S): the row-pair sums stay integers."""
    return fmt.tensor_scale


def octets_fit(fmt) -> bool:
    """octets need 4 planes per unit (NP = 4: the 2-bit formats)."""
    return fmt.planes == 4


WIDE = 4 << 20       # n_in * n_out from which lavapipe takes the wide tile (2B4T: all but k / v)


def lanes(dev) -> int:
    """SIMD lanes of a CPU rasteriser (its subgroup size): lavapipe names its vector width in the
    device string ("llvmpipe (LLVM 15.0.6, 256 bits)" -> 8); 0 when unknown."""
    info = getattr(dev, "info", None) or {}
    m = re.search(r"(\d+) bits", " ".join(str(v) for v in info.values()))
    return int(m.group(1)) // 32 if m else 0


def choose(dev=None, a8: bool = True, gate_up: bool = False, n_in: int = 0, n_out: int = 0, fmt=None) -> Tile:
    """CPU rasterisers: every storage load costs a per-lane loop, arithmetic is cheap, so big tiles
    (each weight load serves 16 rows, each activation load 8-16 outputs): 16 rows x 8 outputs
    (gate_up 16 x 4, it holds two tiles). lavapipe (and no device), A8, from WIDE weights on: 16 x 16
    (gate_up 16 x 8; ~0.8-0.9x the CPU time at 2B4T shapes, twice the compile time, so not for small
    models); matmul workgroups of 16 (2B4T's 640-row k / v: 5 workgroups per 16 rows, not 2 with
    37 % of their outputs thrown away). SwiftShader keeps 64 invocations for A8 (tuned in Chromium).
    f32 activations (4 values a load, no quad sharing) on lavapipe: 16 x 16 in workgroups of 16,
    gate_up too: the activation loads per multiply-add decide there. SwiftShader: 16 x 8 in
    workgroups of 16 (SmolLM2 Q4_1, 32 rows, dev/bitlinear/prefill_browser.py: prefill / decode
    6.6x, 16 x 16 6.9x, 16 x 4 in workgroups of 16 or 64 3.5-4.6x; compile 8.2 s of GPU-process
    CPU for the four tiles, 14.2 s for 16 x 16, 3.4 s for 16 x 4: dev/perf/compile_times.py).
    lavapipe's wide tiles also share each activation load among 8 lanes (octets, when its subgroups
    are a multiple of 8 lanes) and, for I2_S, sum two rows per multiply-add (pairs): 0.8x the CPU
    time of the 16 x 16 tile at 2B4T shapes; gate_up then takes 16 x 16 (x 2) in workgroups of 16."""
    cpu = rasteriser(dev) or ("llvmpipe" if dev is None else None)
    if cpu and not a8:           # f32 rows: 4 values a load, none shared; 16 outputs share each (Q4_1 576 x
        return Tile(rq=4, nq=2 if cpu == "swiftshader" else 4, wg=16)   # 1536, 64 rows, lavapipe: 0.35x the CPU
                                                                        # time of 16 x 4; SwiftShader: above)
    if cpu == "swiftshader":
        return Tile(rq=4, nq=1 if gate_up else 2, wg=64)
    if cpu:
        # q8 rows (ggml's types, Q8T) take the wide tiles at any size (SmolLM2 Q4_1, 64 rows,
        # prefill_profile on a noisy host: 16 x 8 gate_up and 16 x 16 within the noise of each other)
        wide = n_in * n_out >= WIDE or bool(fmt is not None and fmt.vec_dot)
        if wide and cpu == "llvmpipe" and dev is not None:
            n = lanes(dev)
            octets = fmt is not None and octets_fit(fmt) and n > 0 and n % 8 == 0 and getattr(dev.caps, "subgroups", False)
            pairs = fmt is not None and pairs_fit(fmt)
            if octets or pairs:
                return Tile(rq=4, nq=4, wg=16, pairs=pairs, octets=octets)
        if gate_up:
            return Tile(rq=4, nq=2, wg=32) if wide else Tile(rq=4, nq=1, wg=64)
        if fmt is not None and fmt.vec_dot and n_out:
            # q8 rows: 12 outputs an invocation where 16 would leave more of the last workgroup idle
            # (SmolLM2's 576 and 192 outputs: 3 and 1 workgroups of 192, none wasted; its prefill
            # matmuls 0.84x the CPU time of 16 x 16, dev/perf/q8_tile.py)
            return Tile(rq=4, nq=min((4, 3), key=lambda q: -(-n_out // (64 * q)) * 64 * q), wg=16)
        return Tile(rq=4, nq=4 if wide else 2, wg=16)
    return Tile(rq=2, nq=1, wg=64)


def q8_dot4(dev) -> bool | None:
    """Which sibling of the q8 tile (Q8T) a device runs, chosen once per device: the block's integer
    sums by dot4I8Packed (DOT4) where it has it, except on CPU rasterisers, which take the f32 sums
    (lavapipe lowers dot4I8Packed per lane: 1.2x the CPU time of the f32 sums at SmolLM2's shapes,
    dev/perf/q8_tile.py); None (no device): the device define decides."""
    if dev is None:
        return None
    return bool(dev.caps.dot4) and not rasteriser(dev)


def _step(entry, fmt, n_in, n_out, m_max, a8, tile: Tile, subgroups, defines, weights, y_stride=0, y_col0=0,
          q8=False, dot4=None):
    if q8 and not fmt.vec_dot:
        raise BitLinearError(f"bitlinear_tiled: q8 rows need a format of ggml's integer path "
                             f"({'/'.join(f.name for f in FORMATS if f.vec_dot)}), got {fmt.name}")
    if q8 and not a8:
        raise BitLinearError("bitlinear_tiled: q8 rows are int8 rows: q8=True needs a8=True")
    if n_in <= 0 or n_in % fmt.block_size:
        raise BitLinearError(f"bitlinear_tiled: n_in = {n_in} is not a positive multiple of the {fmt.name} block "
                             f"({fmt.block_size})")
    if n_out <= 0 or m_max <= 0:
        raise BitLinearError(f"bitlinear_tiled: n_out = {n_out} and m_max = {m_max} must be positive")
    if not 1 <= tile.rq <= 4 or not 1 <= tile.nq <= 4:
        raise BitLinearError(f"bitlinear_tiled: rq = {tile.rq} must be 1..4 and nq = {tile.nq} 1..4")
    if tile.wg & (tile.wg - 1) or not 4 <= tile.wg <= 1024:
        raise BitLinearError(f"bitlinear_tiled: wg = {tile.wg} must be a power of two in 4..1024")
    if tile.pairs and (not pairs_fit(fmt) or not a8 or tile.rq not in (2, 4)):
        raise BitLinearError(f"bitlinear_tiled: pairs need a format without block scales "
                             f"({'/'.join(f.name for f in FORMATS if pairs_fit(f))}), A8 rows and rq 2 or 4 "
                             f"(got {fmt.name}, a8={a8}, rq={tile.rq})")
    if tile.octets and (not octets_fit(fmt) or not a8 or tile.rq != 4 or tile.wg % 8 or subgroups is False):
        raise BitLinearError(f"bitlinear_tiled: octets need a format of 4 planes "
                             f"({', '.join(f.name for f in FORMATS if octets_fit(f))}), A8 rows, rq 4, "
                             f"wg a multiple of 8 and subgroups (got {fmt.name}, a8={a8}, rq={tile.rq}, wg={tile.wg}, "
                             f"subgroups={subgroups})")
    if y_stride and y_col0 + n_out > y_stride:
        raise BitLinearError(f"bitlinear_tiled: columns {y_col0}..{y_col0 + n_out} exceed y_stride {y_stride}")
    d = dict(format_defines(fmt), A8=bool(a8))
    if q8:
        d["Q8T"] = True            # (Q8B would switch the formats' decode-kernel units)
        d["QUADS2"] = fmt.planes == 2 and tile.rq > 2     # the quad's lanes split the row loads
    d.update({k: True for k, on in (("PAIRS", tile.pairs), ("OCTETS", tile.octets)) if on})
    d.update(defines)
    if not a8 or subgroups is False:
        d["SUBGROUPS"] = False          # the quad sharing is for A8 rows only
    if q8 and dot4 is not None:
        d["DOT4"] = bool(dot4)          # False: Q8T's f32-sum fallback where the device has dot4
    consts = {"WG": tile.wg, "RQ": tile.rq, "NQ": tile.nq, "N_IN": n_in}
    data = {}
    if entry == "gate_up":
        consts["N_OUT"] = n_out
    else:
        data["shape"] = shape_bytes(n_out)
    if y_stride:
        consts.update(Y_STRIDE=y_stride, Y_COL0=y_col0)
    groups = (-(-n_out // (4 * tile.nq * tile.wg)), -(-m_max // (4 * tile.rq)), 1)
    names = dict({"params": "params", "q": "q", "s": "scale", "x": "x", "mult": "mult", "y": "y", "shape": "shape"},
                 **{f"w{i}": w for i, w in enumerate(weights)})
    return Step("bitlinear_tiled", entry, bound("bitlinear_tiled", d, names), groups, consts, d, data)


def shape_bytes(n_out: int) -> bytes:
    """matmul's run-time shape (the `shape` buffer of shaders/bitlinear_tiled.wgsl): n_out."""
    return struct.pack("<4I", n_out, 0, 0, 0)


def _tile(dev, a8, gate_up, rq, nq, wg, n_in, n_out, fmt, pairs, octets, subgroups) -> Tile:
    """choose()'s tile with the caller's overrides; pairs / octets the caller did not ask for are
    dropped where its rq / wg / subgroups rule them out."""
    t = choose(dev, a8, gate_up, n_in, n_out, fmt)
    kw = {k: v for k, v in (("rq", rq), ("nq", nq), ("wg", wg), ("pairs", pairs), ("octets", octets)) if v is not None}
    t = replace(t, **kw)
    if pairs is None and t.rq not in (2, 4):
        t = replace(t, pairs=False)
    if octets is None and (t.rq != 4 or t.wg % 8 or subgroups is False):
        t = replace(t, octets=False)
    return t


def matmul(fmt, n_in: int, n_out: int, m_max: int, *, a8: bool, residual: bool = False, dev=None,
           rq: int | None = None, nq: int | None = None, wg: int | None = None, subgroups: bool | None = None,
           y_stride: int = 0, y_col0: int = 0, pairs: bool | None = None, octets: bool | None = None,
           q8: bool = False, dot4: bool | None = None) -> Step:
    """y_stride / y_col0: write y[m * y_stride + y_col0 + n] (a column slice of a wider y, e.g. the
    engine's q | k | v rows); default y[m * n_out + n]. q8 (with a8): ggml's q8 rows (Q8B)."""
    fmt = format_arg(fmt, FORMATS, "bitlinear_tiled", BitLinearError)
    return _step("matmul", fmt, n_in, n_out, m_max, a8, _tile(dev, a8, False, rq, nq, wg, n_in, n_out, fmt, pairs, octets, subgroups),
                 subgroups,
                 {"RESIDUAL": bool(residual)}, ["w"], y_stride, y_col0, q8, q8_dot4(dev) if dot4 is None else dot4)


def gate_up(fmt, n_in: int, n_out: int, m_max: int, *, a8: bool, act: str = "relu2", dev=None,
            rq: int | None = None, nq: int | None = None, wg: int | None = None,
            subgroups: bool | None = None, pairs: bool | None = None, octets: bool | None = None,
            q8: bool = False, dot4: bool | None = None) -> Step:
    if act not in ("relu2", "silu"):
        raise BitLinearError(f"bitlinear_tiled.gate_up: act must be 'relu2' or 'silu', got {act!r}")
    fmt = format_arg(fmt, FORMATS, "bitlinear_tiled", BitLinearError)
    return _step("gate_up", fmt, n_in, n_out, m_max, a8, _tile(dev, a8, True, rq, nq, wg, n_in, n_out, fmt, pairs, octets, subgroups),
                 subgroups,
                 {"GATE_UP": True, "ACT_SILU": act == "silu"}, ["gate", "up"], q8=q8,
                 dot4=q8_dot4(dev) if dot4 is None else dot4)
