#!/usr/bin/env python3
"""TileLang 0.1.15's NT GEMM (as bench/tilelang_peer.py builds it: 128x256x64, 3 stages, 256
threads, panels of 10) in the sustained loop of bench/sustained_loop.py: the median as TFLOP/s
(bench/sustained-gemm.sh).

    python3 bench/tilelang_gemm_loop.py N REPS
"""
import os
import sys

import tilelang
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tilelang_peer as peer  # noqa: E402
from sustained_loop import median_ms  # noqa: E402


def main():
    n, reps = int(sys.argv[1]), int(sys.argv[2])
    kernel = tilelang.compile(peer.gemm_kernel(n, n, n, 128, 256, 64, 3, 256, 10, True), target="cuda")
    x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    ms = median_ms(lambda: kernel(x, w, c), reps)
    print(f"tilelang gemm nt {n}^3 tflops={2 * n**3 / ms / 1e9:.1f} ms={ms:.3f} (median of {reps})")


if __name__ == "__main__":
    main()
