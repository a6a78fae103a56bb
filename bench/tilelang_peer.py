#!/usr/bin/env python3
"""TileLang (the PyPI package `tilelang`, e.g. 0.1.15) as a peer of our GEMM, timed like
`torch_peers.py` (triton.testing.do_bench: CUDA events, L2 flushed, median) in the same device
call as ours and cuBLAS, so issue 14's "ahead of TileLang on every row" can be read off one run.

    python3 bench/tilelang_peer.py gemm M N K [--layout nt|nn] [--configs BMxBNxBK:STAGES:THREADS:PANEL,...]

The kernel is TileLang's own README GEMM in its usual Hopper form: a pipelined k loop of tile
copies and `T.gemm` (TileLang picks TMA, wgmma and warp specialization on sm_90a itself), the
f32 accumulators staged through shared memory to a bf16 C, blocks rasterized in panels
(`T.use_swizzle`). Every config is compiled and timed; the line reports the fastest, the others
go to stderr. Each line reports the output's relative error against a float32 reference (for
the reader to compare with ours and cuBLAS's; nothing fails on it).

TileLang is not installed on the GPU machine: `bash bench/gpu-run.sh tilelang` unpacks it from
the tarball `bench/tilelang-tarball.sh` builds, carried along as `.tl`.
"""
import argparse
import sys

import torch
from triton.testing import do_bench

BENCH = dict(warmup=25, rep=200, return_mode="median")
# 128x256x64 in 3 stages with two consumer warpgroups is what TileLang's Hopper examples use
# for large bf16 GEMMs; 128x128x64 in 4 stages is the other common choice.
DEFAULT_CONFIGS = "128x256x64:3:256:10,128x128x64:4:256:10"


def gemm_kernel(M, N, K, bm, bn, bk, stages, threads, panel, nt):
    import tilelang.language as T

    dt, acc = "bfloat16", "float"
    b_shape = (N, K) if nt else (K, N)
    b_tile = (bn, bk) if nt else (bk, bn)

    if nt:

        @T.prim_func
        def main(A: T.Tensor((M, K), dt), B: T.Tensor(b_shape, dt), C: T.Tensor((M, N), dt)):
            with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
                A_s = T.alloc_shared((bm, bk), dt)
                B_s = T.alloc_shared(b_tile, dt)
                C_l = T.alloc_fragment((bm, bn), acc)
                C_s = T.alloc_shared((bm, bn), dt)
                T.use_swizzle(panel_size=panel)
                T.clear(C_l)
                for ko in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                    T.copy(A[by * bm, ko * bk], A_s)
                    T.copy(B[bx * bn, ko * bk], B_s)
                    T.gemm(A_s, B_s, C_l, transpose_B=True)
                T.copy(C_l, C_s)
                T.copy(C_s, C[by * bm, bx * bn])

    else:

        @T.prim_func
        def main(A: T.Tensor((M, K), dt), B: T.Tensor(b_shape, dt), C: T.Tensor((M, N), dt)):
            with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
                A_s = T.alloc_shared((bm, bk), dt)
                B_s = T.alloc_shared(b_tile, dt)
                C_l = T.alloc_fragment((bm, bn), acc)
                C_s = T.alloc_shared((bm, bn), dt)
                T.use_swizzle(panel_size=panel)
                T.clear(C_l)
                for ko in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                    T.copy(A[by * bm, ko * bk], A_s)
                    T.copy(B[ko * bk, bx * bn], B_s)
                    T.gemm(A_s, B_s, C_l)
                T.copy(C_l, C_s)
                T.copy(C_s, C[by * bm, bx * bn])

    return main


def parse_config(spec):
    dims, stages, threads, panel = spec.split(":")
    bm, bn, bk = (int(v) for v in dims.split("x"))
    return bm, bn, bk, int(stages), int(threads), int(panel)


def gemm(a):
    import time

    import tilelang

    M, N, K, nt = a.M, a.N, a.K, a.layout == "nt"
    x = torch.randn(M, K, device="cuda")
    w = torch.randn(N, K, device="cuda") if nt else torch.randn(K, N, device="cuda")
    ref = x @ (w.t() if nt else w)
    xq, wq = x.to(torch.bfloat16), w.to(torch.bfloat16)
    best = None
    for spec in a.configs.split(","):
        bm, bn, bk, stages, threads, panel = parse_config(spec)
        t0 = time.perf_counter()
        try:
            # C passed in, as ours and cuBLAS's are timed without allocating.
            kern = tilelang.compile(gemm_kernel(M, N, K, bm, bn, bk, stages, threads, panel, nt), target="cuda")
            out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
            kern(xq, wq, out)
        except Exception as e:  # a config TileLang cannot build (shared memory, layout)
            print(f"tilelang {spec}: failed: {str(e).splitlines()[0][:200]}", file=sys.stderr, flush=True)
            continue
        compile_s = time.perf_counter() - t0
        err = ((out.float() - ref).norm() / ref.norm()).item()
        ms = do_bench(lambda: kern(xq, wq, out), **BENCH)
        tflops = 2 * M * N * K / ms / 1e9
        print(f"tilelang {spec}: {tflops:.1f} TFLOP/s, err {err:.1e}, compile {compile_s:.1f} s",
              file=sys.stderr, flush=True)
        if best is None or tflops > best[0]:
            best = (tflops, ms, err, spec)
    if best is None:
        print(f"gemm bf16 {a.layout} {M}x{N}x{K}  TileLang: every config failed", flush=True)
        return
    tflops, ms, err, spec = best
    work = f"gemm bf16 {a.layout} {M}x{N}x{K}"
    print(f"{work:36s} {'TileLang ' + tilelang.__version__:14s} {tflops:9.1f} TFLOP/s  {ms * 1e3:10.1f} us"
          f"  err {err:.1e}  ({spec})", flush=True)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gemm")
    g.add_argument("M", type=int)
    g.add_argument("N", type=int)
    g.add_argument("K", type=int)
    g.add_argument("--layout", choices=["nt", "nn"], default="nt")
    g.add_argument("--configs", default=DEFAULT_CONFIGS)
    a = p.parse_args()
    if a.cmd == "gemm":
        gemm(a)


if __name__ == "__main__":
    main()
