#!/usr/bin/env python3
"""cuBLAS's bf16 NT GEMM timed in our examples' window (an L2 flush, a CUDA event, the call,
an event; median of 30) with the flush made two ways: torch's `zero_` kernel (what
peers30.py does) and the driver's `cuMemsetD32Async` (what our runtime does). Shows whether
the flush's kind moves a short kernel's window (gpu-notes run 36i: it does not, within 2%).

    python3 bench/cublas_flush_window.py M N K
"""
import ctypes
import sys
import time

import torch

M, N, K = map(int, sys.argv[1:4])
a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
cu = ctypes.CDLL("libcuda.so.1")
cu.cuMemsetD32Async.argtypes = [ctypes.c_uint64, ctypes.c_uint, ctypes.c_size_t, ctypes.c_void_p]
def memset():
    r = cu.cuMemsetD32Async(flush.data_ptr(), 0x5A5A5A5A, flush.numel() // 4, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
    assert r == 0, r
def window(fn, fl):
    for _ in range(3): fn()
    torch.cuda.synchronize(); time.sleep(0.5)
    pairs = []
    for _ in range(30):
        fl()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); pairs.append((s, e))
    torch.cuda.synchronize()
    v = sorted(s.elapsed_time(e) * 1e3 for s, e in pairs)
    return v[len(v) // 2]
mm = lambda: a @ b.t()
for _ in range(2):
    z, m = window(mm, flush.zero_), window(mm, memset)
    f = 2 * M * N * K
    print(f"cuBLAS {M}x{N}x{K} window us: after zero_ kernel {z:.2f} ({f / z / 1e6:.1f} TFLOP/s) | after driver memset {m:.2f} ({f / m / 1e6:.1f} TFLOP/s)")
