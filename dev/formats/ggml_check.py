"""bitweb.formats' block-quantized types against ggml's own C code, bit for bit, through ctypes (issue 26 item 1).

    python dev/formats/ggml_check.py --lib PATH/libggml-base.so [--rows 2048] [--seed 0]
                                     [--gguf build/assets/SmolLM2-135M-Instruct.Q4_1.gguf]
                                     [--write tests/data/blockquant_ggml.npz]

libggml-base.so comes with llama-cpp-python (`pip install llama-cpp-python==0.3.36` builds llama.cpp;
the library is in site-packages/llama_cpp/lib/). It exports quantize_row_<t>_ref and
dequantize_row_<t> for every type here. ggml-base is built without -march flags (no FMA, software
fp16), so its float32 arithmetic is the plain order of ggml-quants.c, which the numpy port follows.

For every type: the bytes of quantize_row_<t>_ref against Format.quantize on the same floats
(rows of 256 values from the families in `inputs`, and rows of a real model's weights with --gguf),
and dequantize_row_<t> against Format.dequantize and gguf-py on ggml's bytes and on random bytes
(NaN / inf scales included). Prints one line per type, the first differing blocks, and exits 1 on
any difference but one: the legacy quantizers follow gguf-py's, which differ from ggml's only in the
sign of a zero scale or min when a block holds -0.0 (numpy's min / argmax pick another zero than C's
scan), counted apart. --write saves a small set of inputs and ggml's bytes for tests/test_blockquant.py,
which runs where llama.cpp is not built.
"""
import argparse
import ctypes
import sys

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import quants as gq

from bitweb import formats as F

# the types checked: ggml's block-quantized ones (the integer kind) and Q8_0
CODECS = [f for f in F.TYPES.values() if f.kind == "integer"] + [F.Q8_0]
F16_AT = {"Q8_0": (0,)}


def inputs(rng, rows):
    """float32 [rows, 256]: one family per row, in turn: normal at scales 1e-7..1e4, uniform, one sign
    only, zeros, constants, sparse, outliers, exact ties on a grid, heavy tails, tiny (below ggml's
    1e-15 group threshold and fp16's range), -0.0 mixed in."""
    fam = [
        lambda: rng.standard_normal(256),
        lambda: rng.standard_normal(256) * 10.0 ** rng.uniform(-7, 4),
        lambda: rng.uniform(-1, 1, 256),
        lambda: -np.abs(rng.standard_normal(256)) * rng.uniform(0.1, 10),
        lambda: np.abs(rng.standard_normal(256)) * rng.uniform(0.1, 10),
        lambda: np.zeros(256),
        lambda: np.full(256, rng.choice([-1, 1]) * rng.uniform(1e-3, 100)),
        lambda: np.repeat(rng.standard_normal(16), 16),
        lambda: rng.standard_normal(256) * (rng.random(256) < 0.1),
        lambda: rng.standard_normal(256) + np.eye(256)[rng.integers(256)] * rng.choice([-100, 100]),
        lambda: rng.integers(-8, 9, 256) * 0.5,
        lambda: rng.integers(-2, 3, 256) * rng.choice([1.0, 0.25, 3.0]),
        lambda: rng.standard_t(2, 256),
        lambda: rng.standard_normal(256) * 1e-17,
        lambda: np.where(rng.random(256) < 0.3, -0.0, rng.standard_normal(256) * 0.01),
    ]
    return np.stack([fam[i % len(fam)]() for i in range(rows)]).astype(np.float32)


def model_rows(path, rows, rng):
    """Rows of 256 real weights: blocks of the file's Q4_1 / Q8_0 tensors dequantized with gguf-py."""
    from gguf import GGUFReader
    r = GGUFReader(path)
    ts = [t for t in r.tensors if t.tensor_type in (Q.Q4_1, Q.Q8_0) and t.n_elements % 256 == 0]
    out = []
    for t in rng.choice(len(ts), rows, replace=True):
        t = ts[t]
        raw = np.asarray(t.data).reshape(-1).view(np.uint8)
        bsz, tsz = F.get(int(t.tensor_type)).block_size, F.get(int(t.tensor_type)).type_size
        k = rng.integers(0, t.n_elements // 256)
        out.append(gq.dequantize(raw[k * 256 // bsz * tsz:(k + 1) * 256 // bsz * tsz], t.tensor_type))
    return np.stack(out).astype(np.float32)


class Ggml:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)

    def quantize(self, name, x):
        c = F.by_name(name)
        x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
        out = np.zeros(c.nbytes(x.size), np.uint8)
        fn = getattr(self.lib, f"quantize_row_{name.lower().replace('_k', '_K')}_ref")
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        fn(x.ctypes.data, out.ctypes.data, x.size)
        return out.tobytes()

    def dequantize(self, name, data):
        c = F.by_name(name)
        raw = np.frombuffer(data, np.uint8)
        n = raw.size // c.type_size * c.block_size
        out = np.zeros(n, np.float32)
        fn = getattr(self.lib, f"dequantize_row_{name.lower().replace('_k', '_K')}")
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        fn(np.ascontiguousarray(raw).ctypes.data, out.ctypes.data, n)
        return out


def same_bits(a, b):
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def unsigned_zeros(c, blocks):
    """A copy of [n, type_size] blocks with -0.0 fp16 scales (0x8000) made +0.0."""
    out = blocks.copy()
    for at in F16_AT.get(c.name) or c.f16_at:
        neg0 = (out[:, at] == 0) & (out[:, at + 1] == 0x80)
        out[neg0, at + 1] = 0
    return out


def check(ggml, x, rng, show=3):
    """Compare every codec on x [rows, 256]; returns the number of failing checks."""
    bad = 0
    for c in CODECS:
        ref = ggml.quantize(c.name, x)
        mine = c.quantize(x)
        a = np.frombuffer(ref, np.uint8).reshape(-1, c.type_size)
        b = np.frombuffer(mine, np.uint8).reshape(-1, c.type_size)
        diff = np.flatnonzero((a != b).any(axis=1))
        zsign = np.flatnonzero((unsigned_zeros(c, a) != unsigned_zeros(c, b)).any(axis=1))
        deq = ggml.dequantize(c.name, ref)
        raw = rng.integers(0, 256, c.type_size * 512, dtype=np.uint8).tobytes()
        with np.errstate(all="ignore"):
            ok_deq = same_bits(c.dequantize(ref, deq.size), deq) and same_bits(
                gq.dequantize(a, getattr(Q, c.name)).reshape(-1), deq)
            ok_raw = same_bits(c.dequantize(raw, len(raw) // c.type_size * c.block_size), ggml.dequantize(c.name, raw))
        print(f"{c.name:5} blocks {a.shape[0]:6}  quantize: {a.shape[0] - diff.size} equal, "
              f"{diff.size - zsign.size} differ in a zero's sign only, {zsign.size} differ;"
              f"  dequantize: {'equal' if ok_deq else 'DIFFERS'}; random bytes: {'equal' if ok_raw else 'DIFFERS'}")
        for i in zsign[:show]:
            row = i * c.block_size // 256
            print(f"      block {i} (row {row}): ggml {a[i].tobytes().hex()}\n"
                  f"      {'':{len(str(i)) + 13}}mine {b[i].tobytes().hex()}")
        bad += (zsign.size > 0) + (not ok_deq) + (not ok_raw)
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", required=True, help="path to libggml-base.so")
    ap.add_argument("--rows", type=int, default=2048, help="rows of 256 values per family sweep")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gguf", help="also check rows of this file's Q4_1 / Q8_0 weights")
    ap.add_argument("--write", help="save test vectors (inputs and ggml's bytes) to this .npz")
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    ggml = Ggml(a.lib)
    print(f"synthetic rows: {a.rows}")
    bad = check(ggml, inputs(rng, a.rows), rng)
    if a.gguf:
        print(f"rows of {a.gguf}: {a.rows}")
        bad += check(ggml, model_rows(a.gguf, a.rows, rng), rng)
    if a.write:
        x = inputs(np.random.default_rng(12345), 45)        # three rows of each family
        np.savez_compressed(a.write, x=x, **{c.name: np.frombuffer(ggml.quantize(c.name, x), np.uint8)
                                            for c in CODECS})
        print(f"wrote {a.write}: {x.shape[0]} rows x 256 and ggml's bytes for {', '.join(c.name for c in CODECS)}")
    print("all equal" if not bad else f"{bad} checks differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
