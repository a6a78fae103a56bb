"""The Python front end on a CUDA GPU beside torch, in one run:
  - the README GEMM (fp16, 128x128x32 tiles, 3 stages) against torch.matmul (cuBLAS),
  - FlashAttention forward (TileLang's example, fp16, bm 128, bn 64, 2 stages, 256 threads)
    against torch's scaled_dot_product_attention, causal and not,
  timed with ``kernel.get_profiler().do_bench()`` (CUDA events, L2 flushed; torch's side with
  the same profiler), printed as TFLOP/s and the ratio ours / torch;
  - host overhead of a cached kernel's call on small tensors beside ``torch.add(a, b, out=c)``
    (TileLang 0.1.15 on an H100: torch 9.6 us, its kernel 11.9 us, 13.8 us allocating);
  - compile times (trace + compile into a fresh cache, then a cache hit).

    python python/bench/gpu_bench.py [--quick]
"""

import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

import torch  # noqa: E402

import tilelang_rs as tilelang  # noqa: E402

import elementwise  # noqa: E402
import flash_attention  # noqa: E402
import gemm  # noqa: E402


def line(name, ours_ms, ref_ms, flops, ref_name):
    t = flops / ours_ms / 1e9
    r = flops / ref_ms / 1e9
    print(f"{name:40} ours {ours_ms:8.3f} ms {t:7.1f} TFLOP/s | {ref_name} {ref_ms:8.3f} ms "
          f"{r:7.1f} TFLOP/s | ratio {t / r:5.2f}", flush=True)


def bench_gemm(sizes):
    for n in sizes:
        k = tilelang.compile(gemm.matmul(n, n, n, 128, 128, 32), out_idx=[2], target="cuda")
        prof = k.get_profiler()
        prof.assert_allclose(lambda a, b: a @ b)
        ours = prof.do_bench()
        ref = prof.do_bench(lambda a, b: a @ b)
        line(f"gemm fp16 {n}^3 (README)", ours, ref, 2 * n ** 3, "torch.matmul")


def bench_attention(shapes):
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for b, h, s, d in shapes:
        for causal in (False, True):
            func = flash_attention.flashattn(b, h, s, d, causal, 128, 64, 2, 256)
            k = tilelang.compile(func, out_idx=[3], target="cuda")
            prof = k.get_profiler()
            q, kk, v = prof.make_inputs()
            ref = sdpa(q.transpose(1, 2), kk.transpose(1, 2), v.transpose(1, 2),
                       is_causal=causal).transpose(1, 2)
            torch.testing.assert_close(k(q, kk, v), ref, rtol=1e-2, atol=1e-2)
            ours = prof.do_bench(input_tensors=[q, kk, v])
            # torch on BHSD tensors made contiguous beforehand (its fastest layout).
            qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, kk, v))
            torch_ms = prof.do_bench(lambda *_: sdpa(qt, kt, vt, is_causal=causal),
                                     input_tensors=[q, kk, v])
            flops = 4 * b * h * s * s * d * (0.5 if causal else 1.0)
            line(f"attention B{b} H{h} S{s} D{d}{' causal' if causal else ''}", ours, torch_ms,
                 flops, "SDPA")


def per_call_us(fn, n=2000):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best


def bench_host_overhead():
    alloc = tilelang.compile(elementwise.elementwise_add(), out_idx=[2], target="cuda")
    inplace = tilelang.compile(elementwise.elementwise_add(), target="cuda")
    a, b, c = (torch.randn(32, 32, device="cuda") for _ in range(3))
    t_torch = per_call_us(lambda: torch.add(a, b, out=c))
    t_ours = per_call_us(lambda: inplace(a, b, c))
    t_alloc = per_call_us(lambda: alloc(a, b))
    t_torch_alloc = per_call_us(lambda: torch.add(a, b))
    print(f"host time per call, 32x32 fp32 add: torch.add(out=c) {t_torch:.1f} us, "
          f"ours {t_ours:.1f} us | allocating: torch.add {t_torch_alloc:.1f} us, "
          f"ours {t_alloc:.1f} us", flush=True)


def bench_compile():
    programs = {
        "gemm 4096 (README)": lambda: gemm.matmul(4096, 4096, 4096, 128, 128, 32),
        "flash attention d128": lambda: flash_attention.flashattn(4, 16, 4096, 128, False, 128,
                                                                  64, 2, 256),
        "elementwise add": lambda: elementwise.elementwise_add(),
    }
    for name, make in programs.items():
        with tempfile.TemporaryDirectory() as cache:
            t0 = time.perf_counter()
            func = make()
            t1 = time.perf_counter()
            k = tilelang.compile(func, target="cuda", pass_configs={"cache_dir": cache})
            t2 = time.perf_counter()
            tilelang.compile(make(), target="cuda", pass_configs={"cache_dir": cache})
            t3 = time.perf_counter()
            st = k.compile_stats()
            print(f"compile {name:22} trace {1e3 * (t1 - t0):6.1f} ms, cold {1e3 * (t2 - t1):7.1f}"
                  f" ms (NVRTC {st['compile_ms']:.1f}), cache hit incl. trace "
                  f"{1e3 * (t3 - t2):6.1f} ms", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="one size each")
    a = ap.parse_args()
    print("torch", torch.__version__, torch.cuda.get_device_name(), flush=True)
    # A first kernel in the process pays for loading NVRTC and the context: not a compile time.
    tilelang.compile(elementwise.elementwise_add(), target="cuda")
    bench_compile()
    bench_host_overhead()
    bench_gemm([4096] if a.quick else [4096, 8192])
    bench_attention([(4, 16, 4096, 128)] if a.quick else [(4, 16, 4096, 128), (8, 16, 2048, 64)])


if __name__ == "__main__":
    main()
