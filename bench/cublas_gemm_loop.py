#!/usr/bin/env python3
"""cuBLAS's bf16 NT GEMM (torch's `x @ w.t()`) launched REPS times back to back, each after a
256 MiB cache flush (`zero_`, as triton's do_bench does) and timed by CUDA events around the
GEMM alone: the median as TFLOP/s. The same loop as bench/tilelang_gemm_loop.py, so that all
three run long enough to reach the power-capped clock (bench/sustained-gemm.sh).

    python3 bench/cublas_gemm_loop.py N REPS
"""
import sys
import time

import torch


def main():
    n, reps = int(sys.argv[1]), int(sys.argv[2])
    x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")
    for _ in range(3):
        torch.matmul(x, w.t(), out=c)
    torch.cuda.synchronize()
    time.sleep(1)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        flush.zero_()
        e0.record()
        torch.matmul(x, w.t(), out=c)
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1))
    times.sort()
    ms = times[len(times) // 2]
    print(f"cublas gemm nt {n}^3 tflops={2 * n**3 / ms / 1e9:.1f} ms={ms:.3f} (median of {reps})")


if __name__ == "__main__":
    main()
