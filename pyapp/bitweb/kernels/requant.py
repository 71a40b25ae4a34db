"""Launch spec for shaders/requant.wgsl: float weight rows -> Q8_0 blocks on the GPU (stdlib only).

Used by the engine's `lm_head="q8_0"` option: each F16 (or BF16 / F32) shard of the LM head is
converted into a new buffer of Q8_0 blocks (34 bytes per 32 values: f16 d, int8 q[32]) that
dense.gemv / ops.embedding read as "Q8_0"; the float shard is then freed. No bytes go through the
host, so it works in the browser without numpy. The maths is ggml's quantize_row_q8_0_ref (see
the shader header for the rounding).

    q8_0(wtype, n_in, rows, wg=64) -> Step      bind ("src", "dst"); wtype: a Format of SRC_TYPES
    q8_0_bytes(n_in, rows) -> int               size of dst (NB * 34 rounded up to 4)
"""
from __future__ import annotations

from bitweb import formats
from bitweb.kernels import Step, bound, check_q8_launch, format_arg, format_defines
from bitweb.kernels.dense import workgroups_1d

# float formats of one value per element (bitweb.formats): fmt_value of their include decodes them
SRC_TYPES = tuple(f for f in formats.select(packed=False) if f.block_size == 1)


class RequantError(ValueError):
    pass


def q8_0_bytes(n_in: int, rows: int) -> int:
    return -(-(rows * n_in // 32 * 34) // 4) * 4


def q8_0(wtype, n_in: int, rows: int, *, wg: int = 64) -> Step:
    """dst = Q8_0 blocks of the rows x n_in float weight in src (GGUF bytes of wtype)."""
    f = format_arg(wtype, SRC_TYPES, "requant: source type", RequantError)
    check_q8_launch("requant", "n_in", n_in, rows, wg, "Q8_0", RequantError)
    pairs = -(-(rows * n_in // 32) // 2)
    d = format_defines(f)
    return Step("requant", "q8_0", bound("requant", d, ("src", "dst")), workgroups_1d(-(-pairs // wg)),
                {"K": n_in, "N_ROWS": rows, "WG": wg}, d)
