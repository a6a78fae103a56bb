#!/usr/bin/env python3
"""cuBLAS's bf16 NT GEMM (torch's `x @ w.t()`) in the sustained loop of
bench/sustained_loop.py: the median as TFLOP/s (bench/sustained-gemm.sh).

    python3 bench/cublas_gemm_loop.py N REPS
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sustained_loop import median_ms  # noqa: E402


def main():
    n, reps = int(sys.argv[1]), int(sys.argv[2])
    x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    ms = median_ms(lambda: torch.matmul(x, w.t(), out=c), reps)
    print(f"cublas gemm nt {n}^3 tflops={2 * n**3 / ms / 1e9:.1f} ms={ms:.3f} (median of {reps})")


if __name__ == "__main__":
    main()
