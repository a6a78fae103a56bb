#!/usr/bin/env python3
"""FP8 GEMM peers on the GPU machine, timed as bench/../torch_peers.py times its peers.

    python3 bench/fp8_peers.py tensor M N K   # torch._scaled_mm (cuBLASLt), per-tensor scales,
                                              # with and without fast accumulation
    python3 bench/fp8_peers.py blocks M N K   # 1x128 (A) / 128x128 (B) block scales:
                                              # torch._scaled_mm where this torch takes them,
                                              # and a Triton kernel written here

C = A[M,K] · B[N,K]^T, e4m3 inputs, bf16 out. Each line: workload, system, TFLOP/s, median
microseconds, relative error against a float32 reference of the scaled inputs. Timing:
triton.testing.do_bench (CUDA events, L2 flush), median.
"""
import argparse
import sys

import torch
from triton.testing import do_bench

BENCH = dict(warmup=25, rep=200, return_mode="median")
E4M3 = torch.float8_e4m3fn


def rel_err(out, ref):
    out, ref = out.float(), ref.float()
    return ((out - ref).norm() / ref.norm()).item()


def line(workload, system, flop, ms, err=None):
    e = "" if err is None else f"  err {err:.1e}"
    print(f"{workload:36s} {system:24s} {flop / ms / 1e9:9.1f} TFLOP/s {ms * 1e3:10.1f} us{e}", flush=True)


def tensor(M, N, K):
    a = torch.randn(M, K, device="cuda").to(E4M3)
    b = torch.randn(N, K, device="cuda").to(E4M3)
    sa = torch.tensor(0.7, device="cuda")
    sb = torch.tensor(1.3, device="cuda")
    ref = (a.float() @ b.float().t()) * (0.7 * 1.3)
    for fast in (False, True):
        f = lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16,
                                     use_fast_accum=fast)
        out = f()
        ms = do_bench(f, **BENCH)
        name = "cuBLASLt fast-accum" if fast else "cuBLASLt"
        line(f"fp8 tensor {M}x{N}x{K}", name, 2 * M * N * K, ms, rel_err(out, ref))


def block_reference(a, b, sa, sb):
    """sa: [M, K/128], sb: [N/128, K/128] (row-major), a/b fp8."""
    M, K = a.shape
    N = b.shape[0]
    af = a.float().view(M, K // 128, 128) * sa[:, :, None]
    bf = b.float().view(N // 128, 128, K // 128, 128) * sb[:, None, :, None]
    return af.view(M, K) @ bf.view(N, K).t()


def triton_block_gemm():
    import triton
    import triton.language as tl

    configs = [
        triton.Config({"BM": 128, "BN": 128}, num_stages=s, num_warps=w)
        for s in (3, 4) for w in (4, 8)
    ]

    @triton.autotune(configs=configs, key=["M", "N", "K"])
    @triton.jit
    def kernel(a_ptr, b_ptr, sa_ptr, sb_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr):
        BK: tl.constexpr = 128
        pid = tl.program_id(0)
        grid_n = tl.cdiv(N, BN)
        # Grouped order (8 block-rows per group) for L2 reuse.
        group = 8 * grid_n
        first_m = (pid // group) * 8
        rows = tl.minimum(tl.cdiv(M, BM) - first_m, 8)
        pm = first_m + (pid % group) % rows
        pn = (pid % group) // rows
        om = pm * BM + tl.arange(0, BM)
        on = pn * BN + tl.arange(0, BN)
        ok = tl.arange(0, BK)
        kb = tl.cdiv(K, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for q in range(0, kb):
            a = tl.load(a_ptr + om[:, None] * K + (q * BK + ok)[None, :])
            b = tl.load(b_ptr + on[None, :] * K + (q * BK + ok)[:, None])
            s_a = tl.load(sa_ptr + om * kb + q)
            s_b = tl.load(sb_ptr + (pn * BN // 128) * kb + q)
            acc += tl.dot(a, b) * s_a[:, None] * s_b
        c = acc.to(tl.bfloat16)
        tl.store(c_ptr + om[:, None] * N + on[None, :], c)

    def run(a, b, sa, sb, c):
        M, K = a.shape
        N = b.shape[0]
        grid = lambda meta: (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]),)
        kernel[grid](a, b, sa, sb, c, M, N, K)
        return c

    return run


def blocks(M, N, K):
    assert M % 128 == 0 and N % 128 == 0 and K % 128 == 0, "block peers take multiples of 128"
    a = torch.randn(M, K, device="cuda").to(E4M3)
    b = torch.randn(N, K, device="cuda").to(E4M3)
    sa = torch.rand(M, K // 128, device="cuda") + 0.5
    sb = torch.rand(N // 128, K // 128, device="cuda") + 0.5
    ref = block_reference(a, b, sa, sb)
    flop = 2 * M * N * K
    # torch._scaled_mm takes block scales on Hopper in recent versions (1x128 for A, 128x128
    # for B, A's scales "outer-dim-major"); try the layouts it has accepted, say which failed.
    tried = []
    for name, sa_t, sb_t in (
        ("[M,K/128] col-major", sa.t().contiguous().t(), sb),
        ("[M,K/128] row-major", sa, sb),
    ):
        try:
            f = lambda: torch._scaled_mm(a, b.t(), scale_a=sa_t, scale_b=sb_t, out_dtype=torch.bfloat16)
            out = f()
            ms = do_bench(f, **BENCH)
            line(f"fp8 blocks {M}x{N}x{K}", "cuBLASLt blockwise", flop, ms, rel_err(out, ref))
            break
        except Exception as e:  # noqa: BLE001 - report whatever this torch says
            tried.append(f"{name}: {str(e).splitlines()[0][:160]}")
    else:
        print(f"fp8 blocks {M}x{N}x{K}: torch._scaled_mm refused block scales: " + " | ".join(tried),
              flush=True)
    run = triton_block_gemm()
    c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    out = run(a, b, sa, sb, c).clone()
    ms = do_bench(lambda: run(a, b, sa, sb, c), **BENCH)
    line(f"fp8 blocks {M}x{N}x{K}", "Triton (bench/fp8_peers)", flop, ms, rel_err(out, ref))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("op", choices=["tensor", "blocks"])
    p.add_argument("M", type=int)
    p.add_argument("N", type=int)
    p.add_argument("K", type=int)
    a = p.parse_args()
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}", file=sys.stderr)
    {"tensor": tensor, "blocks": blocks}[a.op](a.M, a.N, a.K)


if __name__ == "__main__":
    main()
