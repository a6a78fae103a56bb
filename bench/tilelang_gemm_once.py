#!/usr/bin/env python3
"""TileLang 0.1.15's NT GEMM as bench/tilelang_peer.py builds it (128x256x64 tiles, 3 stages,
256 threads, swizzle 10, C staged through shared memory), run three times on random bf16
inputs, for a profiler to catch (bench/ncu-gemm.sh, bench/ncu-source.sh). Needs TileLang on
PYTHONPATH (the tarball of bench/tilelang-tarball.sh, unpacked).

    python3 bench/tilelang_gemm_once.py M N K [--source FILE]   # FILE: its CUDA source
"""
import argparse
import os
import sys

import tilelang
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tilelang_peer as peer  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("m", type=int)
    ap.add_argument("n", type=int)
    ap.add_argument("k", type=int)
    ap.add_argument("--source", help="write the kernel's CUDA source here")
    a = ap.parse_args()
    kernel = tilelang.compile(peer.gemm_kernel(a.m, a.n, a.k, 128, 256, 64, 3, 256, 10, True),
                              target="cuda")
    x = torch.randn(a.m, a.k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(a.n, a.k, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(a.m, a.n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        kernel(x, w, c)
    torch.cuda.synchronize()
    if a.source:
        with open(a.source, "w") as f:
            f.write(kernel.get_kernel_source())


if __name__ == "__main__":
    main()
