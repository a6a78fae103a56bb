"""Does a blocking stream of ours make every launch on the legacy default stream dearer?

    python python/bench/stream_cost.py [before|after]

``before``: torch alone, no tilelang_rs imported: host microseconds per call of
``torch.cuda._sleep(0)`` (a bare launch) and ``torch.add(a, b, out=c)`` on the current
(default) stream. ``after``: the same after compiling a CUDA kernel with tilelang_rs (its
runtime opens the device and creates its stream; ``TILELANG_CUDA_STREAM=nonblocking`` makes
that stream non-blocking), then ours beside them. Each in batches of 64, drained outside the
timing, the median of 21 rounds. Run each mode in its own process.
"""

import os
import statistics
import sys
import time

import torch


def batch_us(fn, calls=2048):
    spent = 0.0
    done = 0
    while done < calls:
        t0 = time.perf_counter()
        for _ in range(64):
            fn()
        spent += time.perf_counter() - t0
        torch.cuda.synchronize()
        done += 64
    return spent / done * 1e6


def median_us(fn):
    for _ in range(300):
        fn()
    torch.cuda.synchronize()
    return statistics.median(batch_us(fn) for _ in range(21))


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "before"
    a, b, c = (torch.randn(32, 32, device="cuda") for _ in range(3))
    rows = [("torch.cuda._sleep(0)", lambda: torch.cuda._sleep(0)),
            ("torch.add(a, b, out=c)", lambda: torch.add(a, b, out=c))]
    if mode == "after":
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path.insert(0, os.path.join(here, "..", "examples"))
        import elementwise

        import tilelang_rs as tilelang

        k = tilelang.compile(elementwise.elementwise_add(), target="cuda")
        k(a, b, c)
        rows.append(("ours kernel(a, b, c)", lambda: k(a, b, c)))
    stream = os.environ.get("TILELANG_CUDA_STREAM", "default")
    for name, fn in rows:
        print(f"{mode:6} (our stream {stream:11}) {name:24} {median_us(fn):6.2f} us", flush=True)


if __name__ == "__main__":
    main()
