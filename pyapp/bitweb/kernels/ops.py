"""Launch specs for rmsnorm / rope / embedding / attention / sampling (stdlib only). WIP."""
from __future__ import annotations

import struct

from bitweb.kernels import Step

PARAMS_BYTES = 32


def params(m: int = 1, pos: int = 0, n_ids: int = 0, penalty: float = 1.0, inv_temp: float = 1.0) -> bytes:
    return struct.pack("<3I2f3I", m, pos, n_ids, penalty, inv_temp, 0, 0, 0)
