"""Launch specs for shaders/bitlinear_tiled.wgsl: M>1 (prefill) ternary/binary matmul (stdlib only).

    step = matmul(fmt, n_in, n_out, m_max, a8=True)          # Y[M, n_out] = X[M, n_in] . W^T
    step = matmul(fmt, n_in, n_out, m_max, a8=True, residual=True)      # Y += ...
    step = gate_up(fmt, n_in, n_ff, m_max, a8=True, act="relu2")        # Y = act(X.Wg^T) * (X.Wu^T)

API
    matmul(fmt, n_in, n_out, m_max, *, a8, residual=False, tm=None, wg=64, dot4=None, y_stride=0, y_col0=0) -> Step
        bind ("params", "x", "mult", "y", "w")                 f32 activations
             ("params", "q", "scale", "mult", "y", "w")        a8
    gate_up(fmt, n_in, n_out, m_max, *, a8, act="relu2"|"silu", tm=None, wg=64, dot4=None) -> Step
    tm (rows per workgroup, <= 16): default 16 with a8, 8 with f32 (workgroup memory: storage_bytes()).
    dot4=False forces the plain-integer A8 dot product (None: dot4I8Packed where the device has it).
        bind as matmul with "gate", "up" in place of "w"
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
    w, gate, up              raw GGUF tensor bytes (zero-padded to a multiple of 4)
Formats: those of bitlinear.FORMATS (n_in a multiple of their block).
"""
from __future__ import annotations

from bitweb.kernels import Step
from bitweb.kernels.bitlinear import BLOCK, FORMATS, BitLinearError


MAX_WG_STORAGE = 16384      # WebGPU's guaranteed maxComputeWorkgroupStorageSize


def storage_bytes(a8: bool, tm: int, wg: int) -> int:
    """Workgroup memory of one pipeline: decoded weights wg x 128 int8, tm x 128 activations, wg scales."""
    return wg * 128 + tm * (128 if a8 else 512) + wg * 4


def _step(entry, fmt, n_in, n_out, m_max, a8, tm, wg, defines, weights, dot4=None, y_stride=0, y_col0=0):
    if fmt not in FORMATS:
        raise BitLinearError(f"bitlinear_tiled: format {fmt!r} not supported (one of {', '.join(FORMATS)})")
    if n_in <= 0 or n_in % BLOCK[fmt]:
        raise BitLinearError(f"bitlinear_tiled: n_in = {n_in} is not a positive multiple of the {fmt} block ({BLOCK[fmt]})")
    if n_out <= 0 or m_max <= 0:
        raise BitLinearError(f"bitlinear_tiled: n_out = {n_out} and m_max = {m_max} must be positive")
    if not 1 <= tm <= 16:
        raise BitLinearError(f"bitlinear_tiled: tm = {tm} must be 1..16")
    if wg & (wg - 1) or not 1 <= wg <= 1024:
        raise BitLinearError(f"bitlinear_tiled: wg = {wg} must be a power of two <= 1024")
    if storage_bytes(a8, tm, wg) > MAX_WG_STORAGE:
        raise BitLinearError(f"bitlinear_tiled: tm = {tm}, wg = {wg} need {storage_bytes(a8, tm, wg)} bytes of "
                             f"workgroup memory, over the {MAX_WG_STORAGE} every WebGPU device has")
    bind = ["params"] + (["q", "scale"] if a8 else ["x"]) + ["mult", "y"] + weights
    d = {FORMATS[fmt]: True, "A8": bool(a8)}
    d.update(defines)
    if dot4 is not None:
        d["DOT4"] = bool(dot4)
    if y_stride and y_col0 + n_out > y_stride:
        raise BitLinearError(f"bitlinear_tiled: columns {y_col0}..{y_col0 + n_out} exceed y_stride {y_stride}")
    consts = {"WG": wg, "TM": tm, "N_IN": n_in, "N_OUT": n_out}
    if y_stride:
        consts.update(Y_STRIDE=y_stride, Y_COL0=y_col0)
    return Step("bitlinear_tiled", entry, tuple(bind), (-(-n_out // wg), -(-m_max // tm), 1), consts, d)


def matmul(fmt: str, n_in: int, n_out: int, m_max: int, *, a8: bool, residual: bool = False,
           tm: int | None = None, wg: int = 64, dot4: bool | None = None, y_stride: int = 0, y_col0: int = 0) -> Step:
    """y_stride / y_col0: write y[m * y_stride + y_col0 + n] (a column slice of a wider y, e.g. the
    engine's q | k | v rows); default y[m * n_out + n]."""
    tm = tm or (16 if a8 else 8)
    return _step("matmul", fmt, n_in, n_out, m_max, a8, tm, wg, {"RESIDUAL": bool(residual)}, ["w"], dot4,
                 y_stride, y_col0)


def gate_up(fmt: str, n_in: int, n_out: int, m_max: int, *, a8: bool, act: str = "relu2",
            tm: int | None = None, wg: int = 64, dot4: bool | None = None) -> Step:
    tm = tm or (16 if a8 else 8)
    if act not in ("relu2", "silu"):
        raise BitLinearError(f"bitlinear_tiled.gate_up: act must be 'relu2' or 'silu', got {act!r}")
    return _step("gate_up", fmt, n_in, n_out, m_max, a8, tm, wg, {"GATE_UP": True, "ACT_SILU": act == "silu"},
                 ["gate", "up"], dot4)
