"""Split-K GEMM in TileLang's style: a third grid dim splits K, and every block adds its share
of the product into a float32 C with ``T.atomic_add`` (C must start at zero). For problems
whose output tiles are too few to fill the GPU (a 1024x1024 C of 128x128 tiles has 64 for
132 SMs): each tile's K is spread over ``split_k`` blocks.

    python python/examples/gemm_splitk.py [--target cpu|sim|cuda] [--split-k 4]

(The Rust examples' split-K keeps each share apart and sums them in a second kernel instead,
so the result does not depend on the order the blocks add in: `gemm --split-k N`.)
"""

import argparse

import numpy as np

import tilelang_rs as tilelang
from tilelang_rs import language as T


def matmul_splitk(M, N, K, block_M, block_N, block_K, split_k, dtype="float16",
                  accum_dtype="float"):
    # K in `split_k` shares of whole k tiles; the last shares may be shorter, or empty.
    k_tiles = T.ceildiv(K, block_K)
    per_split = T.ceildiv(k_tiles, split_k)

    @T.prim_func
    def main(
        A: T.Buffer((M, K), dtype),
        B: T.Buffer((K, N), dtype),
        C: T.Buffer((M, N), accum_dtype),
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), split_k,
                      threads=128) as (bx, by, bz):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)

            T.clear(C_local)
            first = bz * per_split
            count = T.max(T.min(per_split, k_tiles - first), 0)
            for s in T.Pipelined(count, num_stages=3):
                k = first + s
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[k * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)

            # This block's share, added into C.
            T.atomic_add(C[by * block_M, bx * block_N], C_local)

    return main


def reference(a, b):
    return a.astype(np.float32) @ b.astype(np.float32)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--target", default="auto")
    p.add_argument("--m", type=int, default=1024)
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--k", type=int, default=8192)
    p.add_argument("--split-k", type=int, default=4)
    a = p.parse_args()
    func = matmul_splitk(a.m, a.n, a.k, 128, 128, 32, a.split_k)
    kernel = tilelang.compile(func, target=a.target)
    x = np.random.randn(a.m, a.k).astype(np.float16)
    y = np.random.randn(a.k, a.n).astype(np.float16)
    c = np.zeros((a.m, a.n), dtype=np.float32)
    if kernel.device.startswith("cuda"):
        import torch

        xt, yt = torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()
        ct = torch.zeros(a.m, a.n, device="cuda", dtype=torch.float32)
        kernel(xt, yt, ct)
        torch.testing.assert_close(ct, xt.float() @ yt.float(), rtol=1e-2, atol=1e-1)
    else:
        kernel(x, y, c)
        np.testing.assert_allclose(c, reference(x, y), rtol=1e-2, atol=1e-1)
    print(f"gemm split-K {a.m}x{a.n}x{a.k} ({a.split_k} shares) on {kernel.device}: ok")


if __name__ == "__main__":
    main()
