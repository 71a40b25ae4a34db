"""Compile every dense.wgsl launch variant (formats x subgroups, gemv / norm+last_row / matmul) with
Chromium's Tint (SwiftShader adapter) and print problems.   usage: .venv/bin/python dev/ops/tint_dense.py"""
import os, sys; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tint_probe import probe_steps
from bitweb.kernels import dense as d
steps = []
for wt in ("F32", "F16", "BF16", "Q8_0"):
    for sg in (True, False):
        steps += d.gemv(wt, 256, 10, subgroups=sg)[:1] + d.gemv(wt, 256, 10, subgroups=sg, norm=True, last_row=True)[:1]
    steps += d.matmul(wt, 256, 10, 3)
probe_steps(steps)
