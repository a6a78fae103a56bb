"""Element-wise add as in TileLang's example (``examples/elementwise``): tiles staged through
shared memory, a ``T.Parallel`` body; M and N symbolic.

    python python/examples/elementwise.py [--target cpu|sim|cuda]
"""

import argparse

import numpy as np

import tilelang_rs as tilelang
from tilelang_rs import language as T


def elementwise_add(block_M=32, block_N=32, threads=128, in_dtype="float32",
                    out_dtype="float32"):
    M, N = T.symbolic("M"), T.symbolic("N")

    @T.prim_func
    def elem_add(A: T.Tensor((M, N), in_dtype), B: T.Tensor((M, N), in_dtype),
                 C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_N), in_dtype)
            B_shared = T.alloc_shared((block_M, block_N), in_dtype)
            C_local = T.alloc_fragment((block_M, block_N), out_dtype)
            C_shared = T.alloc_shared((block_M, block_N), out_dtype)

            T.copy(A[by * block_M, bx * block_N], A_shared)
            T.copy(B[by * block_M, bx * block_N], B_shared)
            for (local_y, local_x) in T.Parallel(block_M, block_N):
                C_local[local_y, local_x] = A_shared[local_y, local_x] + B_shared[local_y, local_x]
            T.copy(C_local, C_shared)
            T.copy(C_shared, C[by * block_M, bx * block_N])

    return elem_add


def reference(a, b):
    return a + b


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="auto")
    ap.add_argument("--m", type=int, default=1000)
    ap.add_argument("--n", type=int, default=1000)
    a = ap.parse_args()
    kernel = tilelang.compile(elementwise_add(), out_idx=[2], target=a.target)
    if kernel.device.startswith("cuda"):
        import torch

        x, y = (torch.randn(a.m, a.n, device="cuda") for _ in range(2))
        torch.testing.assert_close(kernel(x, y), x + y)
    else:
        x, y = (np.random.randn(a.m, a.n).astype(np.float32) for _ in range(2))
        np.testing.assert_allclose(kernel(x, y), reference(x, y))
    print(f"elementwise {a.m}x{a.n} on {kernel.device}: ok")


if __name__ == "__main__":
    main()
