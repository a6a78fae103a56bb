"""FlashAttention forward written as the Rust library's Hopper default is
(``tilelang::kernels::flash_attention`` with ``AttnConfig::hopper_for(128, ..)``): BHSD,
symbolic batch, heads and sequence, 128 query rows per block over two warpgroups, 128-key
tiles, a producer warpgroup (``tl.disable_warp_specialized: False``), and FlashAttention-3's
overlap inside a warpgroup — step j issues Q·Kⱼᵀ and then P·V of step j − 1 without waiting
(``wg_wait=-1``), computes the softmax while P·V runs, then waits (``T.wait_wgmma``) and
rescales O. Step 0 multiplies a cleared P; V's last tile is multiplied after the loop. Causal
blocks run the longest rows first. The log-sum-exp of every row is saved.

    python python/examples/flash_attention_hopper.py [--target cpu|sim|cuda] [--causal]
"""

import argparse
import math

import numpy as np

import tilelang_rs as tilelang
from tilelang_rs import language as T

# A producer warpgroup on sm_90a (elsewhere the kernel compiles without one).
PASS_CONFIGS = {"tl.disable_warp_specialized": False}


def flash_attention(dim, is_causal, block_M=128, block_N=128, num_stages=2, threads=256,
                    dtype="bfloat16"):
    B, H, S = T.symbolic("B"), T.symbolic("H"), T.symbolic("S")
    sm_scale = 1.0 / math.sqrt(dim)
    scale = sm_scale * 1.4426950408889634  # log2(e)
    accum = "float"

    @T.prim_func
    def flash_attn_fwd(
        Q: T.Tensor((B, H, S, dim), dtype),
        K: T.Tensor((B, H, S, dim), dtype),
        V: T.Tensor((B, H, S, dim), dtype),
        O: T.Tensor((B, H, S, dim), dtype),
        LSE: T.Tensor((B, H, S), accum),
    ):
        with T.Kernel(T.ceildiv(S, block_M), H, B, threads=threads) as (bx_launch, hy, bz_launch):
            q_tiles = T.ceildiv(S, block_M)
            if is_causal:
                # The query blocks near the end see the most keys, so they launch first, dealt
                # over a group of heads at a time (about 128 tiles): the grid then ends on the
                # lightest tiles, not on the last head's heaviest.
                linear = bx_launch + q_tiles * (hy + H * bz_launch)
                group = T.max(128 // q_tiles, 1)
                first = linear // (q_tiles * group) * group
                in_group = T.min(H * B - first, group)
                w = linear % (q_tiles * group)
                head = first + w % in_group
                bx, by, bz = q_tiles - 1 - w // in_group, head % H, head // H
            else:
                bx, by, bz = bx_launch, hy, bz_launch
            Q_s = T.alloc_shared((block_M, dim), dtype)
            K_s = T.alloc_shared((block_N, dim), dtype)
            V_s = T.alloc_shared((block_N, dim), dtype)
            V_last = T.alloc_shared((block_N, dim), dtype)
            scores = T.alloc_fragment((block_M, block_N), accum)
            probs = T.alloc_fragment((block_M, block_N), dtype)
            acc_o = T.alloc_fragment((block_M, dim), accum)
            m_i = T.alloc_fragment((block_M,), accum)
            m_prev = T.alloc_fragment((block_M,), accum)
            rescale = T.alloc_fragment((block_M,), accum)
            row_sum = T.alloc_fragment((block_M,), accum)
            l_i = T.alloc_fragment((block_M,), accum)
            m_scaled = T.alloc_fragment((block_M,), accum)

            T.copy(Q[bz, by, bx * block_M, 0], Q_s)
            T.clear(acc_o)
            T.clear(l_i)
            T.fill(m_i, -T.infinity(accum))
            T.clear(probs)
            kv_tiles = (T.min(T.ceildiv(S, block_N), T.ceildiv((bx + 1) * block_M, block_N))
                        if is_causal else T.ceildiv(S, block_N))
            for j in T.Pipelined(kv_tiles, num_stages=num_stages):
                T.copy(K[bz, by, j * block_N, 0], K_s)
                # V tile j - 1 (tile 0 at j = 0, where P is still zero).
                T.copy(V[bz, by, T.max(j - 1, 0) * block_N, 0], V_s)
                # Q·Kⱼᵀ into cleared scores (the first wgmma does not add: no zeroing).
                T.gemm(Q_s, K_s, scores, transpose_B=True, clear_accum=True, wg_wait=-1)
                T.gemm(probs, V_s, acc_o, wg_wait=-1)
                # Q·Kⱼᵀ is in once at most one group (P·V) is pending.
                T.wait_wgmma(1)
                # -inf where a key is masked; only tiles crossing the sequence end or the
                # diagonal need the mask.
                tile_end = j * block_N + block_N
                if is_causal:
                    needs_mask = (tile_end > S) | (tile_end > bx * block_M + 1)
                else:
                    needs_mask = tile_end > S
                if needs_mask:
                    for i, jj in T.Parallel(block_M, block_N):
                        end = T.min(S, bx * block_M + i + 1) if is_causal else S
                        scores[i, jj] = T.if_then_else(j * block_N + jj < end, scores[i, jj],
                                                       -T.infinity(accum))
                T.copy(m_i, m_prev)
                T.reduce_max(scores, m_i, dim=1, clear=False)
                for i in T.Parallel(block_M):
                    rescale[i] = T.exp2((m_prev[i] - m_i[i]) * scale)
                    m_scaled[i] = m_i[i] * scale
                for i, jj in T.Parallel(block_M, block_N):
                    scores[i, jj] = T.exp2(scores[i, jj] * scale - m_scaled[i])
                T.reduce_sum(scores, row_sum, dim=1)
                for i in T.Parallel(block_M):
                    l_i[i] = l_i[i] * rescale[i] + row_sum[i]
                # Pinned below the softmax, which then runs beside P·V (not causal: measured
                # faster there only; docs/performance.md, session 33).
                T.wait_wgmma(0, pinned=not is_causal)
                for i, jj in T.Parallel(block_M, dim):
                    acc_o[i, jj] = acc_o[i, jj] * rescale[i]
                T.copy(scores, probs)
            T.copy(V[bz, by, (kv_tiles - 1) * block_N, 0], V_last)
            T.gemm(probs, V_last, acc_o)
            for i in T.Parallel(block_M):
                rescale[i] = 1.0 / l_i[i]
            for i, jj in T.Parallel(block_M, dim):
                acc_o[i, jj] = acc_o[i, jj] * rescale[i]
            T.copy(acc_o, O[bz, by, bx * block_M, 0])
            # Natural-log LSE of the scaled scores: m·sm_scale + ln(l).
            for i in T.Parallel(block_M):
                m_prev[i] = m_i[i] * sm_scale + T.log(l_i[i])
            T.copy(m_prev, LSE[bz, by, bx * block_M])

    return flash_attn_fwd


def reference(q, k, v, is_causal):
    """(O, LSE) in float64, BHSD."""
    q64, k64, v64 = (x.astype(np.float64) for x in (q, k, v))
    s = np.einsum("bhqd,bhkd->bhqk", q64, k64) / np.sqrt(q.shape[-1])
    if is_causal:
        n = q.shape[2]
        s = np.where(np.tril(np.ones((n, n), dtype=bool)), s, -np.inf)
    m = s.max(-1, keepdims=True)
    p = np.exp(s - m)
    lse = (m + np.log(p.sum(-1, keepdims=True)))[..., 0]
    o = np.einsum("bhqk,bhkd->bhqd", p / p.sum(-1, keepdims=True), v64)
    return o, lse


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="auto")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--seq", type=int, default=300)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--causal", action="store_true")
    a = ap.parse_args()
    dtype = "float16"
    func = flash_attention(a.dim, a.causal, dtype=dtype)
    kernel = tilelang.compile(func, out_idx=[3, 4], target=a.target, pass_configs=PASS_CONFIGS)
    shape = (a.batch, a.heads, a.seq, a.dim)
    if kernel.device.startswith("cuda"):
        import torch

        q, k, v = (torch.randn(shape, device="cuda", dtype=torch.float16) for _ in range(3))
        o, lse = kernel(q, k, v)
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=a.causal)
        torch.testing.assert_close(o, ref, rtol=1e-2, atol=1e-2)
    else:
        rng = np.random.default_rng(0)
        q, k, v = (rng.standard_normal(shape).astype(np.float16) for _ in range(3))
        o, lse = kernel(q, k, v)
        want_o, want_lse = reference(q, k, v, a.causal)
        np.testing.assert_allclose(o.astype(np.float64), want_o, rtol=2e-2, atol=2e-2)
        np.testing.assert_allclose(lse, want_lse, rtol=1e-3, atol=1e-3)
    print(f"flash attention (Hopper default) {shape} causal={a.causal} on {kernel.device}: ok")


if __name__ == "__main__":
    main()
