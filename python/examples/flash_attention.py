"""FlashAttention forward in TileLang's example style (``examples/flash_attention``): macros
for the two gemms and the online softmax, ``T.Parallel`` masks, ``T.reduce_max(...,
clear=False)``, ``T.gemm`` with a warp policy. Tensors are [batch, seq, heads, dim] (BSHD);
sequences of any length (the tail and, when causal, the future are masked).

    python python/examples/flash_attention.py [--target cpu|sim|cuda] [--causal]
"""

import argparse

import numpy as np

import tilelang_rs as tilelang
from tilelang_rs import language as T


def flashattn(batch, heads, seq_len, dim, is_causal, block_M=64, block_N=64, num_stages=1,
              threads=128, dtype="float16"):
    scale = (1.0 / dim) ** 0.5 * 1.44269504  # log2(e)
    shape = [batch, seq_len, heads, dim]
    accum_dtype = "float"

    @T.macro
    def MMA0(K, Q_shared, K_shared, acc_s, k, bx, by, bz):
        T.copy(K[bz, k * block_N:(k + 1) * block_N, by, :], K_shared)
        if is_causal:
            for i, j in T.Parallel(block_M, block_N):
                acc_s[i, j] = T.if_then_else(
                    (bx * block_M + i >= k * block_N + j) & (k * block_N + j < seq_len),
                    0, -T.infinity(acc_s.dtype))
        else:
            for i, j in T.Parallel(block_M, block_N):
                acc_s[i, j] = T.if_then_else(k * block_N + j < seq_len, 0,
                                             -T.infinity(acc_s.dtype))
        T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)

    @T.macro
    def MMA1(V, V_shared, acc_s_cast, acc_o, k, by, bz):
        T.copy(V[bz, k * block_N:(k + 1) * block_N, by, :], V_shared)
        T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)

    @T.macro
    def Softmax(acc_s, acc_s_cast, scores_max, scores_max_prev, scores_scale, scores_sum,
                logsum):
        T.copy(scores_max, scores_max_prev)
        # clear=False: the running max of the row so far, so scores_scale <= 1 (every row
        # sees a key in its first tile, so the max is finite from then on).
        T.reduce_max(acc_s, scores_max, dim=1, clear=False)
        for i in T.Parallel(block_M):
            scores_scale[i] = T.exp2(scores_max_prev[i] * scale - scores_max[i] * scale)
        for i, j in T.Parallel(block_M, block_N):
            acc_s[i, j] = T.exp2(acc_s[i, j] * scale - scores_max[i] * scale)
        T.reduce_sum(acc_s, scores_sum, dim=1)
        for i in T.Parallel(block_M):
            logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
        T.copy(acc_s, acc_s_cast)

    @T.macro
    def Rescale(acc_o, scores_scale):
        for i, j in T.Parallel(block_M, dim):
            acc_o[i, j] *= scores_scale[i]

    @T.prim_func
    def main(
        Q: T.Tensor(shape, dtype),
        K: T.Tensor(shape, dtype),
        V: T.Tensor(shape, dtype),
        Output: T.Tensor(shape, dtype),
    ):
        with T.Kernel(T.ceildiv(seq_len, block_M), heads, batch, threads=threads) as (bx, by, bz):
            Q_shared = T.alloc_shared([block_M, dim], dtype)
            K_shared = T.alloc_shared([block_N, dim], dtype)
            V_shared = T.alloc_shared([block_N, dim], dtype)
            acc_s = T.alloc_fragment([block_M, block_N], accum_dtype)
            acc_s_cast = T.alloc_fragment([block_M, block_N], dtype)
            acc_o = T.alloc_fragment([block_M, dim], accum_dtype)
            scores_max = T.alloc_fragment([block_M], accum_dtype)
            scores_max_prev = T.alloc_fragment([block_M], accum_dtype)
            scores_scale = T.alloc_fragment([block_M], accum_dtype)
            scores_sum = T.alloc_fragment([block_M], accum_dtype)
            logsum = T.alloc_fragment([block_M], accum_dtype)

            T.copy(Q[bz, bx * block_M:(bx + 1) * block_M, by, :], Q_shared)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(scores_max, -T.infinity(accum_dtype))

            loop_range = (
                T.min(T.ceildiv(seq_len, block_N), T.ceildiv((bx + 1) * block_M, block_N))
                if is_causal else T.ceildiv(seq_len, block_N))

            for k in T.Pipelined(loop_range, num_stages=num_stages):
                MMA0(K, Q_shared, K_shared, acc_s, k, bx, by, bz)
                Softmax(acc_s, acc_s_cast, scores_max, scores_max_prev, scores_scale,
                        scores_sum, logsum)
                Rescale(acc_o, scores_scale)
                MMA1(V, V_shared, acc_s_cast, acc_o, k, by, bz)
            for i, j in T.Parallel(block_M, dim):
                acc_o[i, j] /= logsum[i]
            T.copy(acc_o, Output[bz, bx * block_M:(bx + 1) * block_M, by, :])

    return main


def reference(q, k, v, is_causal):
    """Attention in float64, BSHD."""
    q64, k64, v64 = (x.astype(np.float64) for x in (q, k, v))
    d = q.shape[-1]
    s = np.einsum("bqhd,bkhd->bhqk", q64, k64) / np.sqrt(d)
    if is_causal:
        n = q.shape[1]
        s = np.where(np.tril(np.ones((n, n), dtype=bool)), s, -np.inf)
    s = s - s.max(-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(-1, keepdims=True)
    return np.einsum("bhqk,bkhd->bqhd", p, v64).astype(q.dtype)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="auto")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=500)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--causal", action="store_true")
    a = ap.parse_args()
    func = flashattn(a.batch, a.heads, a.seq, a.dim, a.causal)
    kernel = tilelang.compile(func, out_idx=[3], target=a.target)
    shape = (a.batch, a.seq, a.heads, a.dim)
    if kernel.device.startswith("cuda"):
        import torch

        q, k, v = (torch.randn(shape, device="cuda", dtype=torch.float16) for _ in range(3))
        o = kernel(q, k, v)
        ref = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=a.causal
        ).transpose(1, 2)
        torch.testing.assert_close(o, ref, rtol=1e-2, atol=1e-2)
    else:
        q, k, v = (np.random.randn(*shape).astype(np.float16) for _ in range(3))
        o = kernel(q, k, v)
        np.testing.assert_allclose(o.astype(np.float32),
                                   reference(q, k, v, a.causal).astype(np.float32),
                                   rtol=1e-2, atol=1e-2)
    print(f"flash attention {shape} causal={a.causal} on {kernel.device}: ok")


if __name__ == "__main__":
    main()
