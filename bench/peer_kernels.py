#!/usr/bin/env python3
"""Which kernels torch's cuBLAS / cuBLASLt run for a GEMM, with their launch shapes.

    python3 bench/peer_kernels.py bf16 M N K [M N K ...]   # x @ w.t(), bf16 NT
    python3 bench/peer_kernels.py fp8 M N K [M N K ...]    # torch._scaled_mm, per-tensor

For each shape: every GPU kernel of one call (after warm-up) under torch.profiler, with its
grid, block, cluster where the trace has it, shared memory, registers and duration. The names
say the tile, split-K or stream-K scheme and cluster shape that the library picked, which is
what our own refit (`GemmConfig::fit_to_gpu`) is measured against.
"""
import json
import sys
import tempfile

import torch
from torch.profiler import ProfilerActivity, profile

E4M3 = torch.float8_e4m3fn


def call_for(kind, M, N, K):
    if kind == "bf16":
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
        return lambda: a @ w.t()
    a = torch.randn(M, K, device="cuda").to(E4M3)
    b = torch.randn(N, K, device="cuda").to(E4M3)
    sa = torch.tensor(0.7, device="cuda")
    sb = torch.tensor(1.3, device="cuda")
    return lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)


def kernels(f):
    for _ in range(5):
        f()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            f()
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
        prof.export_chrome_trace(tmp.name)
        trace = json.load(open(tmp.name))
    out = [e for e in trace.get("traceEvents", []) if e.get("cat") == "kernel"]
    return out[len(out) // 3 * 2:] if len(out) % 3 == 0 else out


def main():
    kind = sys.argv[1]
    dims = [int(x) for x in sys.argv[2:]]
    for i in range(0, len(dims) - 2, 3):
        M, N, K = dims[i:i + 3]
        ks = kernels(call_for(kind, M, N, K))
        total = sum(e.get("dur", 0) for e in ks)
        print(f"{kind} {M}x{N}x{K}: {len(ks)} kernel(s), {total:.1f} us in all "
              f"({2 * M * N * K / max(total, 1e-9) / 1e6:.1f} TFLOP/s by the trace)", flush=True)
        for e in ks:
            a = e.get("args", {})
            print(f"  {e.get('dur', 0):8.1f} us  grid {a.get('grid')} block {a.get('block')} "
                  f"cluster {a.get('cluster', '-')} smem {a.get('shared memory')} "
                  f"regs {a.get('registers per thread')}  {e.get('name')}", flush=True)


if __name__ == "__main__":
    main()
