"""Compile every dense.wgsl launch variant (float formats x subgroups, gemv / norm+last_row / matmul)
with Chromium's Tint (SwiftShader adapter) and print problems.   usage: .venv/bin/python dev/ops/tint_dense.py"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    from tint_probe import probe_steps
    from bitweb.kernels import dense as d
    steps = []
    for wt in d.WTYPES:
        for sg in (True, False):
            steps += d.gemv(wt, 256, 10, subgroups=sg)[:1] + d.gemv(wt, 256, 10, subgroups=sg, norm=True, last_row=True)[:1]
        steps += d.matmul(wt, 256, 10, 3)
    probe_steps(steps)


if __name__ == "__main__":
    main()
