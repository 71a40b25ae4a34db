"""numpy mirror of shaders/requant.wgsl (float rows -> Q8_0 blocks) and its kernel cases.

The mirror is bitweb.formats' Q8_0 quantize (ggml quantize_row_q8_0_ref: d = max|x| / 127,
q = roundf(x / d), d stored as f16), tested bit for bit against gguf-py in tests/test_formats.py.

Cases are exact by construction: every block holds integers n (|n| <= 127, one |n| = 127) times
2^-k, so d = 2^-k, 1 / d and x * (1 / d) are exact whatever f32 division the GPU uses (WGSL
allows 2.5 ULP), q = n, and the output bytes are compared exactly (u32). Random data vs gguf-py,
where a near-tie may round either way on a GPU, is tests/test_requant.py.
"""
from __future__ import annotations

import numpy as np

from bitweb import formats
from bitweb.kernels import requant


def q8_0(x: np.ndarray) -> bytes:
    """Q8_0 blocks of float32 values x (n % 32 == 0), zero-padded to a multiple of 4 bytes."""
    b = formats.quantize("Q8_0", np.asarray(x, np.float32).reshape(-1))
    return b + bytes(-len(b) % 4)


def exact_values(rng, rows: int, n_in: int, kmax: int = 12) -> np.ndarray:
    """rows x n_in float32 values n * 2^-k per 32-block (k random in 0..kmax), one |n| = 127 per
    block; every 7th block all zero (d = 0)."""
    n = rng.integers(-127, 128, size=(rows * n_in // 32, 32))
    n[np.arange(len(n)), rng.integers(0, 32, len(n))] = rng.choice([-127, 127], len(n))
    n[::7] = 0
    k = rng.integers(0, kmax + 1, size=(len(n), 1))
    return (n * np.exp2(-k.astype(np.float64))).astype(np.float32).reshape(rows, n_in)


def encode(wtype, x: np.ndarray) -> bytes:
    """GGUF bytes of x in wtype (the values are exact in every type here: BF16 keeps their at most
    8 significant bits)."""
    b = formats.get(wtype).quantize(x)
    return b + bytes(-len(b) % 4)


def case(b, rng, name: str, wtype: str, n_in: int, rows: int, wg: int = 64):
    x = exact_values(rng, rows, n_in)
    step = requant.q8_0(wtype, n_in, rows, wg=wg)
    want = q8_0(x)
    assert len(want) == requant.q8_0_bytes(n_in, rows)
    idx = {"src": 0, "dst": 1}
    b.add(name, [{"name": "src", "data": encode(wtype, x)},
                 {"name": "dst", "size": len(want), "expect": want, "dtype": "u32"}],
          [step.as_case_step(idx)])


def cases(b, scope: str = "full"):
    rng = np.random.default_rng(808)
    if scope == "browser":
        case(b, rng, "requant.q8_0.F16", "F16", 256, 33)
        case(b, rng, "requant.q8_0.F16.oddblocks", "F16", 32, 5)
        return
    for wtype in requant.SRC_TYPES:
        case(b, rng, f"requant.q8_0.{wtype.name}", wtype, 256, 67)
    case(b, rng, "requant.q8_0.F16.oddblocks", "F16", 96, 7)            # 21 blocks: last pair half
    case(b, rng, "requant.q8_0.BF16.wg1", "BF16", 64, 9, wg=1)
    case(b, rng, "requant.q8_0.F16.dispatch2d", "F16", 32, 131075, wg=1)   # 65538 workgroups: 2-D grid
