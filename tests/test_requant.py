"""shaders/requant.wgsl on random weights vs gguf-py's Q8_0 quantizer (the exact-by-construction
cases are in bitweb/ref/requant.py and run with every other kernel case).

Random F16 rows: the scale d (f16 bits) must equal gguf-py's in every block, and every q must
equal gguf-py's except where x / d lies within 1e-5 (relative) of a .5 tie, where a GPU's f32
division (WGSL allows 2.5 ULP) may round the other way: there |q - q_ref| <= 1.
"""
import numpy as np
from gguf import GGMLQuantizationType, quants

from bitweb.kernels import requant
from tests.conftest import run


def test_random_f16_rows_match_gguf_py(gpu):
    rng = np.random.default_rng(5)
    rows, n_in = 301, 2560
    x = (rng.standard_normal((rows, n_in)) * rng.uniform(0.01, 3, (rows, 1))).astype(np.float16)
    x[7, :64] = 0                                              # two all-zero blocks: d = 0, q = 0
    ref = np.frombuffer(quants.quantize(x.astype(np.float32), GGMLQuantizationType.Q8_0), np.uint8).reshape(-1, 34)

    src = gpu.create_buffer(x.nbytes)
    gpu.write_buffer(src, 0, x.tobytes())
    dst = gpu.create_buffer(requant.q8_0_bytes(n_in, rows))
    step = requant.q8_0("F16", n_in, rows)
    gpu.run([run(step.instantiate(gpu, {"src": src, "dst": dst}))])
    got = np.frombuffer(run(gpu.read(dst, 0, ref.size)), np.uint8).reshape(-1, 34)

    assert np.array_equal(got[:, :2], ref[:, :2]), "f16 scales differ"
    q, qr = got[:, 2:].view(np.int8).astype(int), ref[:, 2:].view(np.int8).astype(int)
    blocks = x.astype(np.float32).reshape(-1, 32)
    d = np.abs(blocks).max(1, keepdims=True) / np.float32(127)
    v = np.abs(blocks / np.where(d == 0, 1, d))
    near_tie = np.abs(v - np.floor(v) - 0.5) <= 1e-5 * np.maximum(v, 1)
    diff = q != qr
    assert not (diff & ~near_tie).any(), f"{int((diff & ~near_tie).sum())} q values differ away from a tie"
    assert (np.abs(q - qr) <= 1).all()
    assert diff.sum() <= near_tie.sum()
