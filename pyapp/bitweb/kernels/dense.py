"""Launch specs for shaders/dense.wgsl: the generic float-weight matmul (stdlib only).

One WGSL source for F32 / F16 / BF16 weights with fp32 accumulation (an LM head wider than
lmhead.MAX_K, the prefill matmuls of float linears). Weights are the GGUF bytes unchanged.

    wtype: a Format of WTYPES (or its type id or name)
    row_bytes(wtype, n_in) -> int                       bytes of one weight row (any table format too)
    shard_rows(n_rows, row_bytes, max_binding) -> [(r0, r1), ...]
        whole rows per shard, every shard but the last has the same number of rows
        (rows_per_shard = max_binding // row_bytes); one buffer per shard.
    gemv(wtype, n_in, n_out, *, shards=None, norm=False, eps=1e-5, last_row=False,
         subgroups=None, f16=None, wg=64, rows=4) -> [Step, ...]     one Step per shard
    matmul(wtype, n_in, n_out, *, shards=None, f16=None) -> [Step, ...]   M > 1 (m in params)

Bindings (names in Step.bind):
    "w0" .. "w{S-1}"  shard i: a buffer holding rows [r0, r1) of the weight (GGUF bytes of those rows)
    "x"       gemv: f32[n_in] (last_row: f32[m][n_in], row m-1 is used); matmul: f32[m][n_in]
    "y"       gemv: f32[n_out]; matmul: f32[m][n_out]. Each shard's Step writes its own rows.
    "norm"    (gemv, norm=True) f32[n_in]: y = W (x * norm) / sqrt(mean(x^2) + eps)  (output_norm fused)
    "params"  (gemv last_row, matmul) the 32-byte params block of bitweb.kernels.ops
              (ops.params(m=...)): only `m` (number of rows of x) is read here.

Switches: `subgroups` None = as the device has them (define SUBGROUPS), False = shared-memory tree,
True = subgroupAdd (device must have subgroups). `f16` None = native f16 reads when the device has
shader-f16, False = the u32 + unpack2x16float fallback. `shards` is a list of (r0, r1) from
shard_rows (default: one shard of all rows). n_in % 4 == 0.
"""
from __future__ import annotations

from bitweb import formats
from bitweb.kernels import Step, bound, format_arg, format_defines

WTYPES = formats.select(packed=False)      # the float formats (bitweb.formats); their decode: shaders/fmt_*.wgsl
MAX_WORKGROUPS = 65535


class DenseSpecError(ValueError):
    pass


def row_bytes(wtype: str, n_in: int) -> int:
    """Bytes of one row of n_in elements (a whole number of the format's blocks: Q4_K n_in % 256 == 0)
    of a float format or a table format (the packed LM heads and embeddings are sharded alike)."""
    f = format_arg(wtype, tuple(dict.fromkeys(WTYPES + formats.select("table"))), "dense", DenseSpecError)
    blk = f.block_size
    if n_in <= 0 or n_in % blk:
        raise DenseSpecError(f"row of {n_in} elements: must be positive"
                             + (f" (a multiple of {blk} for {f.name})" if blk > 1 else ""))
    return f.nbytes(n_in)


def shard_rows(n_rows: int, row_bytes: int, max_binding: int) -> list:
    """[(r0, r1)] covering n_rows with at most max_binding bytes of whole rows per shard."""
    if row_bytes <= 0 or n_rows <= 0:
        raise DenseSpecError(f"shard_rows: n_rows ({n_rows}) and row_bytes ({row_bytes}) must be positive")
    per = max_binding // row_bytes
    if per < 1:
        raise DenseSpecError(f"one weight row is {row_bytes} bytes, over maxStorageBufferBindingSize = {max_binding}")
    return [(r, min(r + per, n_rows)) for r in range(0, n_rows, per)]


def _check(wtype, n_in) -> formats.Format:
    f = format_arg(wtype, WTYPES, "dense kernel", DenseSpecError)
    q = max(4, f.block_size)
    if n_in <= 0 or n_in % q:
        raise DenseSpecError(f"dense kernel: n_in = {n_in} must be a positive multiple of {q} for {f.name}")
    return f


def _defines(f, subgroups, f16):
    d = format_defines(f)
    if subgroups is not None:
        d["SUBGROUPS"] = bool(subgroups)
    if f16 is not None:
        d["F16"] = bool(f16)
    return d


def _shards(n_out, shards):
    shards = [(0, n_out)] if shards is None else [tuple(s) for s in shards]
    if not shards or shards[0][0] != 0 or shards[-1][1] != n_out or any(
            a[1] != b[0] for a, b in zip(shards, shards[1:])) or any(r1 <= r0 for r0, r1 in shards):
        raise DenseSpecError(f"shards {shards} do not cover rows 0..{n_out} in order")
    return shards


def workgroups_1d(n: int) -> tuple:
    """n workgroups as (x, y, 1) within maxComputeWorkgroupsPerDimension (kernels use x + y * nx)."""
    if n <= MAX_WORKGROUPS:
        return (n, 1, 1)
    ny = -(-n // MAX_WORKGROUPS)
    return (-(-n // ny), ny, 1)


def gemv(wtype, n_in: int, n_out: int, *, shards=None, norm: bool = False, eps: float = 1e-5,
         last_row: bool = False, subgroups=None, f16=None, wg: int = 64, rows: int = 4) -> list:
    """y = W x (M = 1), one Step per shard."""
    f = _check(wtype, n_in)
    if wg & (wg - 1) or not 1 <= wg <= 256:
        raise DenseSpecError(f"gemv: wg = {wg} must be a power of two <= 256")
    if not 1 <= rows <= 8:
        raise DenseSpecError(f"gemv: rows = {rows} must be in 1..8")
    defines = _defines(f, subgroups, f16)
    if norm:
        defines["NORM"] = True
    if last_row:
        defines["LASTROW"] = True
    steps = []
    for i, (r0, r1) in enumerate(_shards(n_out, shards)):
        bind = bound("dense", defines, {"w": f"w{i}", "x": "x", "y": "y", "g": "norm", "params": "params"})
        steps.append(Step("dense", "gemv", bind, workgroups_1d(-(-(r1 - r0) // rows)),
                          {"K": n_in, "N_ROWS": r1 - r0, "ROW0": r0, "WG": wg, "ROWS": rows, "EPS": float(eps)},
                          dict(defines)))
    return steps


def matmul(wtype, n_in: int, n_out: int, m: int, *, shards=None, f16=None) -> list:
    """Y[m][n_out] = X[m][n_in] W^T, one Step per shard (m is also written to params.m)."""
    f = _check(wtype, n_in)
    if m < 1 or -(-m // 16) > MAX_WORKGROUPS:
        raise DenseSpecError(f"matmul: m = {m} rows out of range 1..{16 * MAX_WORKGROUPS}")
    defines = _defines(f, None, f16)
    steps = []
    for i, (r0, r1) in enumerate(_shards(n_out, shards)):
        nx = -(-(r1 - r0) // 16)
        if nx > MAX_WORKGROUPS:
            raise DenseSpecError(f"matmul: shard of {r1 - r0} rows needs {nx} workgroups > {MAX_WORKGROUPS}; use smaller shards")
        bind = bound("dense", defines, {"w": f"w{i}", "x": "x", "y": "y", "mparams": "params"})
        steps.append(Step("dense", "matmul", bind, (nx, -(-m // 16), 1),
                          {"K": n_in, "N_ROWS": r1 - r0, "ROW0": r0, "Y_STRIDE": n_out}, dict(defines)))
    return steps
