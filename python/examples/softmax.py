"""Row softmax over rows of any length: the row is read in ``block_N``-wide chunks (two passes
with an online maximum), the tail masked with ``T.if_then_else``. M and N are symbolic.

    python python/examples/softmax.py [--target cpu|sim|cuda]
"""

import argparse

import numpy as np

import tilelang_rs as tilelang
from tilelang_rs import language as T


def softmax(block_M=1, block_N=1024, threads=128, dtype="float16", accum_dtype="float"):
    M, N = T.symbolic("M"), T.symbolic("N")

    @T.prim_func
    def softmax(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
            x = T.alloc_fragment((block_M, block_N), accum_dtype)
            row_max = T.alloc_fragment((block_M,), accum_dtype)
            chunk = T.alloc_fragment((block_M,), accum_dtype)
            row_sum = T.alloc_fragment((block_M,), accum_dtype)
            T.fill(row_max, -T.infinity(accum_dtype))
            T.clear(row_sum)
            for j in T.serial(T.ceildiv(N, block_N)):
                T.copy(X[bx * block_M, j * block_N], x)
                for i, c in T.Parallel(block_M, block_N):
                    x[i, c] = T.if_then_else(j * block_N + c < N, x[i, c],
                                             -T.infinity(accum_dtype))
                T.reduce_max(x, chunk, dim=1)
                for i in T.Parallel(block_M):
                    new_max = T.max(row_max[i], chunk[i])
                    row_sum[i] = row_sum[i] * T.exp(row_max[i] - new_max)
                    row_max[i] = new_max
                for i, c in T.Parallel(block_M, block_N):
                    x[i, c] = T.exp(x[i, c] - row_max[i])
                T.reduce_sum(x, chunk, dim=1)
                for i in T.Parallel(block_M):
                    row_sum[i] += chunk[i]
            for i in T.Parallel(block_M):
                row_sum[i] = 1.0 / row_sum[i]
            for j in T.serial(T.ceildiv(N, block_N)):
                T.copy(X[bx * block_M, j * block_N], x)
                for i, c in T.Parallel(block_M, block_N):
                    x[i, c] = T.exp(x[i, c] - row_max[i]) * row_sum[i]
                T.copy(x, Y[bx * block_M, j * block_N])

    return softmax


def reference(x):
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).astype(x.dtype)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="auto")
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--cols", type=int, default=3000)
    a = ap.parse_args()
    kernel = tilelang.compile(softmax(), out_idx=[1], target=a.target)
    if kernel.device.startswith("cuda"):
        import torch

        x = torch.randn(a.rows, a.cols, device="cuda", dtype=torch.float16)
        torch.testing.assert_close(kernel(x), torch.softmax(x.float(), -1).half(),
                                   rtol=1e-2, atol=1e-3)
    else:
        x = np.random.randn(a.rows, a.cols).astype(np.float16)
        np.testing.assert_allclose(kernel(x).astype(np.float32),
                                   reference(x).astype(np.float32), rtol=1e-2, atol=1e-3)
    print(f"softmax {a.rows}x{a.cols} on {kernel.device}: ok")


if __name__ == "__main__":
    main()
