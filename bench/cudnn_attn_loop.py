#!/usr/bin/env python3
"""cuDNN's attention forward (torch SDPA, cuDNN backend), bf16, in the sustained loop of
bench/sustained_loop.py: the median as TFLOP/s (bench/sustained-attn.sh).

    python3 bench/cudnn_attn_loop.py B H S D CAUSAL REPS
"""
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sustained_loop import median_ms  # noqa: E402


def main():
    b, h, s, d, causal, reps = (int(v) for v in sys.argv[1:7])
    q = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)
    flops = 4 * b * h * s * s * d / (2 if causal else 1)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal)), reps)
    print(f"cudnn attn B{b} H{h} S{s} D{d} c{causal} tflops={flops / ms / 1e9:.1f} ms={ms:.3f} (median of {reps})")


if __name__ == "__main__":
    main()
