#!/usr/bin/env python3
"""TileLang 0.1.15's NT GEMM (as bench/tilelang_peer.py builds it: 128x256x64, 3 stages, 256
threads, panels of 10) launched REPS times back to back, each after a 256 MiB cache flush
(`zero_`, as triton's do_bench does) and timed by CUDA events around the kernel alone: the
median as TFLOP/s. Long enough (2000 launches of a 6144³ GEMM: about 1.6 s) that the GPU
reaches its power-capped clock, unlike do_bench's 200 ms (bench/sustained-gemm.sh).

    python3 bench/tilelang_gemm_loop.py N REPS
"""
import os
import sys
import time

import tilelang
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tilelang_peer as peer  # noqa: E402


def main():
    n, reps = int(sys.argv[1]), int(sys.argv[2])
    kernel = tilelang.compile(peer.gemm_kernel(n, n, n, 128, 256, 64, 3, 256, 10, True), target="cuda")
    x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")
    for _ in range(3):
        kernel(x, w, c)
    torch.cuda.synchronize()
    time.sleep(1)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        flush.zero_()
        e0.record()
        kernel(x, w, c)
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1))
    times.sort()
    ms = times[len(times) // 2]
    print(f"tilelang gemm nt {n}^3 tflops={2 * n**3 / ms / 1e9:.1f} ms={ms:.3f} (median of {reps})")


if __name__ == "__main__":
    main()
