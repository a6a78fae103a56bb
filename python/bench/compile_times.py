"""How long Python -> compiled kernel takes: trace (the @T.prim_func decoration), then compile,
for the README GEMM, FlashAttention and a one-line kernel (elementwise add), cold (a fresh
disk cache) and again (a cache hit), in one process.

    python python/bench/compile_times.py [--targets cpu,sm_90a,cuda] [--reps 3]

trace1 is the first trace of the program in the process (its source parsed), trace a later one
(as a factory called again or autotuning does). `cpu` compiles and loads the C library; `sm_90a`/`sm_80`/`gfx942` precompile for that GPU
without one (lower, codegen, NVRTC or clang into the cache: everything but loading the
binary); `cuda` compiles and loads on the GPU. TileLang's figures for the same programs:
3-6 s for a GEMM or attention kernel, 1.9 s for a one-line kernel.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

import tilelang_rs as tilelang  # noqa: E402

import elementwise  # noqa: E402
import flash_attention  # noqa: E402
import gemm  # noqa: E402

PROGRAMS = {
    "gemm 4096 (README)": lambda: gemm.matmul(4096, 4096, 4096, 128, 128, 32),
    "flash attention d128": lambda: flash_attention.flashattn(4, 16, 4096, 128, False, 128, 64,
                                                              2, 256),
    "elementwise add": lambda: elementwise.elementwise_add(),
}


def ms(t0):
    return (time.perf_counter() - t0) * 1e3


def one(make, target, cache):
    t0 = time.perf_counter()
    func = make()
    trace = ms(t0)
    t1 = time.perf_counter()
    if target in ("cpu", "cuda", "hip", "sim") or target.startswith(("cuda:", "hip:")):
        k = tilelang.compile(func, target=target, pass_configs={"cache_dir": cache})
        stats = k.compile_stats()
    else:
        stats = tilelang.precompile(func, target=target, pass_configs={"cache_dir": cache})
    return trace, ms(t1), stats


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--targets", default="cpu,sm_90a")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    print(f"{'program':24} {'target':7} {'trace1':>7} {'trace':>6} {'cold':>8} {'(lower':>7} "
          f"{'codegen':>8} {'compile)':>9} {'again':>6}   ms; trace1: the first trace in the "
          f"process, the rest medians of {a.reps}")
    first_trace = {}
    for target in a.targets.split(","):
        for name, make in PROGRAMS.items():
            rows = []
            for _ in range(a.reps):
                with tempfile.TemporaryDirectory() as cache:
                    trace, cold, st = one(make, target, cache)
                    _, again, st2 = one(make, target, cache)
                    assert st2["cache_hit"] or target == "cpu", st2
                    rows.append((trace, cold, st["lower_ms"], st["codegen_ms"],
                                 st["compile_ms"], again))
            first = first_trace.setdefault(name, rows[0][0])
            med = [statistics.median(c) for c in zip(*rows)]
            print(f"{name:24} {target:7} {first:7.1f} {med[0]:6.1f} {med[1]:8.1f} {med[2]:7.1f} "
                  f"{med[3]:8.1f} {med[4]:9.1f} {med[5]:6.1f}")


if __name__ == "__main__":
    main()
