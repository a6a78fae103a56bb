#!/usr/bin/env python3
"""cuDNN's attention forward (torch SDPA, cuDNN backend), bf16, launched REPS times back to
back, each after a 256 MiB cache flush (`zero_`, as triton's do_bench does) and timed by CUDA
events around the call alone: the median as TFLOP/s. The loop of bench/cublas_gemm_loop.py, so
that a run lasts long enough to reach the power-capped clock (bench/sustained-attn.sh).

    python3 bench/cudnn_attn_loop.py B H S D CAUSAL REPS
"""
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def main():
    b, h, s, d, causal, reps = (int(v) for v in sys.argv[1:7])
    q = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")
    flops = 4 * b * h * s * s * d / (2 if causal else 1)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        for _ in range(3):
            F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
        torch.cuda.synchronize()
        time.sleep(1)
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(reps):
            flush.zero_()
            e0.record()
            F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
            e1.record()
            e1.synchronize()
            times.append(e0.elapsed_time(e1))
    times.sort()
    ms = times[len(times) // 2]
    print(f"cudnn attn B{b} H{h} S{s} D{d} c{causal} tflops={flops / ms / 1e9:.1f} ms={ms:.3f} (median of {reps})")


if __name__ == "__main__":
    main()
