"""FP8 GEMM with DeepSeek-V3's block scales, written as a TileLang user writes it: e4m3 A and B
(K-major), A scaled per row and 128 of K, B per 128x128 block, each k tile's product promoted
into an f32 accumulator with its scales (two-level accumulation), bf16 out. On sm_90a the gemm
runs on fp8 wgmma.

    python python/examples/fp8_gemm.py [--target cpu|sim|cuda] [--m M --n N --k K]

numpy has no fp8 type: on the CPU the arrays come from ml_dtypes (`pip install ml_dtypes`).
"""

import argparse

import numpy as np

import tilelang_rs as tilelang
from tilelang_rs import language as T

GROUP = 128  # the scale block along K (and N for B)


def fp8_gemm_blockwise(M, N, K, block_M=128, block_N=128, block_K=128, num_stages=4,
                       threads=256, out_dtype="bfloat16"):
    assert block_K == GROUP and block_N <= GROUP, "one scale block per k tile and column tile"
    kb, nb = T.ceildiv(K, GROUP), T.ceildiv(N, GROUP)

    @T.prim_func
    def main(
        A: T.Tensor((M, K), "float8_e4m3"),
        B: T.Tensor((N, K), "float8_e4m3"),
        scales_a: T.Tensor((kb, M), "float32"),  # K-block-major: a tile's row scales are contiguous
        scales_b: T.Tensor((nb, kb), "float32"),
        C: T.Tensor((M, N), out_dtype),
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), "float8_e4m3")
            B_shared = T.alloc_shared((block_N, block_K), "float8_e4m3")
            Scale_A = T.alloc_shared((1, block_M), "float32")
            C_part = T.alloc_fragment((block_M, block_N), "float")
            C_acc = T.alloc_fragment((block_M, block_N), "float")
            T.clear(C_acc)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[bx * block_N, k * block_K], B_shared)
                T.copy(scales_a[k, by * block_M], Scale_A)
                T.gemm(A_shared, B_shared, C_part, transpose_B=True, clear_accum=True)
                for i, j in T.Parallel(block_M, block_N):
                    C_acc[i, j] = C_acc[i, j] + C_part[i, j] * Scale_A[0, i] * scales_b[
                        bx * block_N // GROUP, k]
            T.copy(C_acc, C[by * block_M, bx * block_N])

    return main


def reference(a, b, sa, sb):
    """The definition in float64: per 128-wide k block, the product scaled by both scales."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    M, K = a64.shape
    N = b64.shape[0]
    out = np.zeros((M, N))
    for q in range(sa.shape[0]):
        k0, k1 = q * GROUP, min((q + 1) * GROUP, K)
        part = a64[:, k0:k1] @ b64[:, k0:k1].T
        col_scale = np.repeat(sb[:, q], GROUP)[:N]
        out += part * sa[q][:, None] * col_scale[None, :]
    return out


def inputs(M, N, K, rng, fp8):
    a = rng.standard_normal((M, K)).astype(fp8)
    b = rng.standard_normal((N, K)).astype(fp8)
    kb, nb = -(-K // GROUP), -(-N // GROUP)
    sa = (2.0 ** rng.uniform(-2, 2, (kb, M))).astype(np.float32)
    sb = (2.0 ** rng.uniform(-2, 2, (nb, kb))).astype(np.float32)
    return a, b, sa, sb


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--target", default="auto")
    p.add_argument("--m", type=int, default=1024)
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--k", type=int, default=1024)
    a = p.parse_args()
    func = fp8_gemm_blockwise(a.m, a.n, a.k)
    kernel = tilelang.compile(func, out_idx=[4], target=a.target)
    rng = np.random.default_rng(0)
    if kernel.device.startswith("cuda"):
        import torch

        x = torch.randn(a.m, a.k, device="cuda").to(torch.float8_e4m3fn)
        w = torch.randn(a.n, a.k, device="cuda").to(torch.float8_e4m3fn)
        kb, nb = -(-a.k // GROUP), -(-a.n // GROUP)
        sa = torch.rand(kb, a.m, device="cuda") + 0.5
        sb = torch.rand(nb, kb, device="cuda") + 0.5
        c = kernel(x, w, sa, sb)
        want = reference(x.cpu().float().numpy(), w.cpu().float().numpy(), sa.cpu().numpy(),
                         sb.cpu().numpy())
        got = c.float().cpu().numpy()
    else:
        import ml_dtypes

        x, w, sa, sb = inputs(a.m, a.n, a.k, rng, ml_dtypes.float8_e4m3fn)
        got = np.asarray(kernel(x, w, sa, sb)).astype(np.float64)
        want = reference(x, w, sa, sb)
    err = np.linalg.norm(got - want) / np.linalg.norm(want)
    print(f"fp8 blockwise gemm {a.m}x{a.n}x{a.k} on {kernel.device}: relative error {err:.2e}")
    assert err < 1e-2


if __name__ == "__main__":
    main()
