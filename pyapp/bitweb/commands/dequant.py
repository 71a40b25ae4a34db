"""`bitweb dequant MODEL TENSOR --out X.npy`: one tensor as float32 (numpy shape = GGUF dims reversed)."""
from __future__ import annotations

import numpy as np

from bitweb.formats import TYPES
from bitweb.gguf import open_gguf


def main(args) -> int:
    """`bitweb dequant MODEL TENSOR --out X.npy`: float32, numpy shape = GGUF dims reversed."""
    gf = open_gguf(args.model)
    try:
        ti = gf.tensors.get(args.tensor)
        if ti is None:
            names = list(gf.tensors)
            raise KeyError(f"no tensor {args.tensor!r} in {args.model} ({len(names)} tensors: "
                           f"{', '.join(names[:8])}{' ...' if len(names) > 8 else ''})")
        x = TYPES[ti.type_id].dequantize(gf.tensor_data(ti.name), ti.n_elements)
    finally:
        gf.close()
    np.save(args.out, x.reshape(ti.np_shape))
    return 0
