"""GEMM NT (C = A · Bᵀ, B stored [N, K] as weights usually are) with L2 rasterization
(``T.use_swizzle``) and symbolic M, N, K: one compiled kernel serves every size. With
``gemm_nt(128, 256, 64, 3, 256, 16, "bfloat16")``, a producer warpgroup and persistent blocks
(``pass_configs={"tl.disable_warp_specialized": False, "tl.persistent": 0}``) it is the Rust
library's Hopper default (``GemmConfig::hopper``), which ``python/bench/same_kernels.py``
times beside it.

    python python/examples/gemm_nt_swizzle.py [--target cpu|sim|cuda]
"""

import argparse

import numpy as np

import tilelang_rs as tilelang
from tilelang_rs import language as T


def gemm_nt(block_M=128, block_N=128, block_K=32, num_stages=3, threads=128, panel=8,
            dtype="float16", accum_dtype="float", overlap=False):
    M, N, K = T.symbolic("M"), T.symbolic("N"), T.symbolic("K")

    @T.prim_func
    def gemm_nt(
        A: T.Tensor((M, K), dtype),
        B: T.Tensor((N, K), dtype),
        C: T.Tensor((M, N), dtype),
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_N, block_K), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.use_swizzle(panel_size=panel)
            T.clear(C_local)
            for ko in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, ko * block_K], A_shared)
                T.copy(B[bx * block_N, ko * block_K], B_shared)
                T.gemm(A_shared, B_shared, C_local, transpose_B=True, overlap=overlap)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return gemm_nt


def reference(a, b):
    return (a.astype(np.float32) @ b.astype(np.float32).T).astype(a.dtype)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--target", default="auto")
    p.add_argument("--m", type=int, default=1000)
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--k", type=int, default=1000)
    a = p.parse_args()
    kernel = tilelang.compile(gemm_nt(), out_idx=[-1], target=a.target)
    if kernel.device.startswith("cuda"):
        import torch

        x = torch.randn(a.m, a.k, device="cuda", dtype=torch.float16)
        w = torch.randn(a.n, a.k, device="cuda", dtype=torch.float16)
        torch.testing.assert_close(kernel(x, w), x @ w.T, rtol=1e-2, atol=1e-2)
    else:
        x = np.random.randn(a.m, a.k).astype(np.float16)
        w = np.random.randn(a.n, a.k).astype(np.float16)
        np.testing.assert_allclose(kernel(x, w).astype(np.float32),
                                   reference(x, w).astype(np.float32), rtol=1e-2, atol=5e-2)
    print(f"gemm_nt {a.m}x{a.n}x{a.k} on {kernel.device}: ok")


if __name__ == "__main__":
    main()
