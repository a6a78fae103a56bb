"""RMS norm as in TileLang's example (``examples/norm/rms_norm.py``): one block per
``blk_m`` rows of constant width N, the row held on chip; M symbolic.

    python python/examples/rmsnorm.py [--target cpu|sim|cuda]
"""

import argparse

import numpy as np

import tilelang_rs as tilelang
from tilelang_rs import language as T


def rms_norm(N, blk_m=1, threads=128, dtype="float32", eps=1e-12):
    M = T.symbolic("M")

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, blk_m), threads=threads) as bx:
            A_shared = T.alloc_shared((blk_m, N), dtype)
            A_pow_local = T.alloc_fragment((blk_m, N), dtype)
            A_local = T.alloc_fragment((blk_m, N), dtype)
            A_powsum = T.alloc_fragment((blk_m,), dtype)

            T.copy(A[bx * blk_m:(bx + 1) * blk_m, :], A_shared)
            T.copy(A_shared, A_local)
            for i, j in T.Parallel(blk_m, N):
                A_pow_local[i, j] = A_local[i, j] * A_local[i, j]
            T.reduce_sum(A_pow_local, A_powsum, dim=1)
            for i in T.Parallel(blk_m):
                A_powsum[i] = T.rsqrt(A_powsum[i] / N + eps)
            for i, j in T.Parallel(blk_m, N):
                A_local[i, j] *= A_powsum[i]
            T.copy(A_local, B[bx * blk_m:(bx + 1) * blk_m, :])

    return main


def reference(x, eps=1e-12):
    x64 = x.astype(np.float64)
    return (x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + eps)).astype(x.dtype)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="auto")
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--cols", type=int, default=1024)
    a = ap.parse_args()
    kernel = tilelang.compile(rms_norm(a.cols), out_idx=[1], target=a.target)
    if kernel.device.startswith("cuda"):
        import torch

        x = torch.randn(a.rows, a.cols, device="cuda")
        ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-12)
        torch.testing.assert_close(kernel(x), ref, rtol=1e-4, atol=1e-4)
    else:
        x = np.random.randn(a.rows, a.cols).astype(np.float32)
        np.testing.assert_allclose(kernel(x), reference(x), rtol=1e-4, atol=1e-5)
    print(f"rmsnorm {a.rows}x{a.cols} on {kernel.device}: ok")


if __name__ == "__main__":
    main()
