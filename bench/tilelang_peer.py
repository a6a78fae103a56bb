#!/usr/bin/env python3
"""TileLang (the PyPI package `tilelang`, e.g. 0.1.15) as a peer of our GEMM, timed like
`torch_peers.py` (triton.testing.do_bench: CUDA events, L2 flushed, median) in the same device
call as ours and cuBLAS, so issue 14's "ahead of TileLang on every row" can be read off one run.

    python3 bench/tilelang_peer.py gemm M N K [--layout nt|nn] [--configs BMxBNxBK:STAGES:THREADS:PANEL,...]
    python3 bench/tilelang_peer.py attn B H S D [--causal] [--package tilelang|tilelang_rs]
        [--configs BMxBN:STAGES:THREADS,...]

`attn` runs one program through either compiler: our Python example
python/examples/flash_attention.py (FlashAttention forward in TileLang's example style, BSHD),
with its `import tilelang_rs as tilelang` line swapped for `--package` — TileLang itself, or our
Python package — which is the "paste it in with one changed import line" claim, measured.

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


def load_flashattn(path, package):
    """`flashattn` from the example at `path`, with `tilelang_rs` swapped for `package`."""
    src = open(path).read()
    for ours, theirs in [("import tilelang_rs as tilelang", f"import {package} as tilelang"),
                         ("from tilelang_rs import language as T", f"from {package} import language as T")]:
        if ours not in src:
            raise SystemExit(f"{path}: no line `{ours}` to swap")
        src = src.replace(ours, theirs)
    ns = {"__name__": "flash_attention_example"}
    exec(compile(src, path, "exec"), ns)
    return ns["flashattn"]


def attn(a):
    import importlib
    import time

    pkg = importlib.import_module(a.package)
    flashattn = load_flashattn(a.source, a.package)
    B, H, S, D, causal = a.B, a.H, a.S, a.D, a.causal
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(
        *(x.float().transpose(1, 2) for x in (q, k, v)), is_causal=causal).transpose(1, 2)
    flops = 4 * B * H * S * S * D * (0.5 if causal else 1.0)
    name = {"tilelang": "TileLang " + getattr(pkg, "__version__", "?"), "tilelang_rs": "ours (Python)"}.get(
        a.package, a.package)
    best = None
    for spec in a.configs.split(","):
        dims, stages, threads = spec.split(":")
        bm, bn = (int(x) for x in dims.split("x"))
        t0 = time.perf_counter()
        try:
            func = flashattn(B, H, S, D, causal, block_M=bm, block_N=bn, num_stages=int(stages),
                             threads=int(threads), dtype="bfloat16")
            kern = pkg.compile(func, out_idx=[3], target="cuda")
            o = kern(q, k, v)
        except Exception as e:  # a config the compiler cannot build
            print(f"{name} {spec}: failed: {str(e).splitlines()[0][:200]}", file=sys.stderr, flush=True)
            continue
        compile_s = time.perf_counter() - t0
        err = ((o.float() - ref).norm() / ref.norm()).item()
        # The output is allocated by each call (out_idx), as a user of either package calls it.
        ms = do_bench(lambda: kern(q, k, v), **BENCH)
        tflops = flops / ms / 1e9
        print(f"{name} {spec}: {tflops:.1f} TFLOP/s, err {err:.1e}, compile {compile_s:.2f} s",
              file=sys.stderr, flush=True)
        if best is None or tflops > best[0]:
            best = (tflops, ms, err, spec, compile_s)
    work = f"attn fwd B{B} H{H} S{S} D{D} c{int(causal)} (example, BSHD)"
    if best is None:
        print(f"{work}  {name}: every config failed", flush=True)
        return
    tflops, ms, err, spec, compile_s = best
    print(f"{work:44s} {name:16s} {tflops:9.1f} TFLOP/s  {ms * 1e3:10.1f} us  err {err:.1e}"
          f"  ({spec}, compile {compile_s:.2f} s)", flush=True)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gemm")
    g.add_argument("M", type=int)
    g.add_argument("N", type=int)
    g.add_argument("K", type=int)
    g.add_argument("--layout", choices=["nt", "nn"], default="nt")
    g.add_argument("--configs", default=DEFAULT_CONFIGS)
    t = sub.add_parser("attn")
    for d in ("B", "H", "S", "D"):
        t.add_argument(d, type=int)
    t.add_argument("--causal", action="store_true")
    t.add_argument("--package", default="tilelang", choices=["tilelang", "tilelang_rs"])
    t.add_argument("--source", default="python/examples/flash_attention.py")
    t.add_argument("--configs", default="128x128:2:256,128x64:2:256")
    a = p.parse_args()
    if a.cmd == "gemm":
        gemm(a)
    else:
        attn(a)


if __name__ == "__main__":
    main()
