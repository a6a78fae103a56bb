"""The GEMM of TileLang's README, basic and annotated, unchanged but for the import lines.

    python python/examples/gemm.py [--target cpu|sim|cuda] [--annotated]
"""

import argparse

import numpy as np

import tilelang_rs as tilelang
from tilelang_rs import language as T
from tilelang_rs.intrinsics import make_mma_swizzle_layout as make_swizzle_layout


def matmul(M, N, K, block_M, block_N, block_K, dtype="float16", accum_dtype="float"):
    @T.prim_func
    def main(
        A: T.Buffer((M, K), dtype),
        B: T.Buffer((K, N), dtype),
        C: T.Buffer((M, N), dtype),
    ):
        # Define a GPU kernel launch configuration:
        #   - Grid dimension: (ceildiv(N, block_N), ceildiv(M, block_M))
        #   - Threads per block: 128
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):

            # Allocate on-chip memory (shared and fragment buffers)
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)

            # Initialize the accumulation buffer
            T.clear(C_local)

            # Primary compute loop, with pipelining across chunks of size block_K
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
                # Copy a tile of A into shared memory
                T.copy(A[by * block_M, k * block_K], A_shared)
                # Copy a tile of B into shared memory
                T.copy(B[k * block_K, bx * block_N], B_shared)

                # Perform a tile-level GEMM on the shared buffers into C_local
                T.gemm(A_shared, B_shared, C_local)

            # Write the accumulated result from local memory back to global memory
            T.copy(C_local, C[by * block_M, bx * block_N])

    return main


def matmul_annotated(M, N, K, block_M, block_N, block_K, dtype="float16", accum_dtype="float"):
    @T.prim_func
    def main(
        A: T.Buffer((M, K), dtype),
        B: T.Buffer((K, N), dtype),
        C: T.Buffer((M, N), dtype),
    ):
        # Kernel configuration
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)

            # Apply layout optimizations or define your own layout
            T.annotate_layout({
                A_shared: make_swizzle_layout(A_shared),
                B_shared: make_swizzle_layout(B_shared),
            })

            # Enable swizzle (rasterization) for better L2 cache locality
            T.use_swizzle(panel_size=10, enable=True)

            # Clear local accumulation
            T.clear(C_local)

            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
                # Copy tile of A
                T.copy(A[by * block_M, k * block_K], A_shared)

                # Demonstrate parallelized copy from global to shared for B
                for ko, j in T.Parallel(block_K, block_N):
                    B_shared[ko, j] = B[k * block_K + ko, bx * block_N + j]

                # Perform a tile-level GEMM on the shared buffers
                T.gemm(A_shared, B_shared, C_local)

            # Copy result back to global memory
            T.copy(C_local, C[by * block_M, bx * block_N])

    return main


def reference(a, b):
    return (a.astype(np.float32) @ b.astype(np.float32)).astype(a.dtype)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--target", default="auto")
    p.add_argument("--m", type=int, default=1024)
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--k", type=int, default=1024)
    p.add_argument("--annotated", action="store_true")
    a = p.parse_args()
    make = matmul_annotated if a.annotated else matmul
    func = make(a.m, a.n, a.k, 128, 128, 32)
    kernel = tilelang.compile(func, out_idx=[2], target=a.target)
    if kernel.device.startswith("cuda"):
        import torch

        x = torch.randn(a.m, a.k, device="cuda", dtype=torch.float16)
        y = torch.randn(a.k, a.n, device="cuda", dtype=torch.float16)
        c = kernel(x, y)
        torch.testing.assert_close(c, x @ y, rtol=1e-2, atol=1e-2)
    else:
        x = np.random.randn(a.m, a.k).astype(np.float16)
        y = np.random.randn(a.k, a.n).astype(np.float16)
        c = kernel(x, y)
        np.testing.assert_allclose(c.astype(np.float32), reference(x, y).astype(np.float32),
                                   rtol=1e-2, atol=5e-2)
    ms = kernel.get_profiler().do_bench()
    print(f"gemm {a.m}x{a.n}x{a.k} on {kernel.device}: ok, {ms:.3f} ms")


if __name__ == "__main__":
    main()
