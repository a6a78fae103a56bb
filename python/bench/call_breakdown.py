"""Where the host time of a cached kernel's call goes, on a CUDA GPU with torch (issue 13:
a call must cost no more host time than a torch eager op on the same tensors).

    python python/bench/call_breakdown.py [--n 20000]

First ours beside torch's in alternation (the medians of 21 rounds each and of the per-round
ratios: hosts of one machine kind vary by 40% between calls and drift within one), then,
in microseconds per call (best of 5 rounds of ``n`` calls), two ways: the host's own
time (calls in batches of 64, the queue drained between batches outside the timing) and back
to back (drained once: the host's time or the GPU's, whichever is longer), the 32x32 fp32
elementwise add (symbolic M, N) beside ``torch.add(a, b, out=c)``, peeling the call one layer
at a time:

- the whole call (``JITKernel`` subclasses the native launcher: no Python frame), the native
  ``Executable.run`` with the stream given (no query of torch's current stream);
- the native stages alone (``Executable.host_stages``): converting the three tensors,
  asking torch for its current stream, and launching converted arguments (bind, pack,
  ``cuLaunchKernel``);
- what torch itself charges for the reads the conversion makes (``data_ptr()``, ``shape``,
  ``stride()``, ``dtype``, ``is_cuda``, ``get_device()`` of three tensors) and for
  ``torch._C._cuda_getCurrentRawStream``.
"""

import argparse
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

import elementwise  # noqa: E402

import tilelang_rs as tilelang  # noqa: E402


def batch_us(fn, calls):
    """Host microseconds per call of ``calls`` calls in batches of 64, the queue drained
    between batches outside the timing."""
    spent = 0.0
    done = 0
    while done < calls:
        batch = min(64, calls - done)
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        spent += time.perf_counter() - t0
        torch.cuda.synchronize()
        done += batch
    return spent / calls * 1e6


def back_to_back_us(fn, calls):
    """Microseconds per call of ``calls`` calls back to back, drained once at the end (the
    host or the GPU, whichever is slower: a full launch queue makes the host wait)."""
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def per_call_us(fn, n, host_only):
    """Microseconds per call, best of 5 rounds of ``n`` calls: :func:`batch_us` (what the host
    spends) when ``host_only``, else :func:`back_to_back_us`."""
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    timed = batch_us if host_only else back_to_back_us
    return min(timed(fn, n) for _ in range(5))


def interleaved(pairs, rounds=21, calls=2048):
    """Each (ours, torch's) pair timed in alternation, ``rounds`` times: a busy or slowing
    host then weighs on both sides alike. Returns, per pair, the medians of ours and of
    torch's, and the median of the per-round ratios."""
    out = []
    for ours, theirs in pairs:
        for fn in (ours, theirs):
            for _ in range(200):
                fn()
        torch.cuda.synchronize()
        a, b = [], []
        for _ in range(rounds):
            a.append(batch_us(ours, calls))
            b.append(batch_us(theirs, calls))
        ratios = sorted(x / y for x, y in zip(a, b))
        out.append((statistics.median(a), statistics.median(b), ratios[len(ratios) // 2]))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000)
    n = ap.parse_args().n
    k = tilelang.compile(elementwise.elementwise_add(), target="cuda")
    alloc = tilelang.compile(elementwise.elementwise_add(), out_idx=[2], target="cuda")
    a, b, c = (torch.randn(32, 32, device="cuda") for _ in range(3))
    k(a, b, c)
    torch.cuda.synchronize()
    torch.testing.assert_close(c, a + b)
    exe = k.executable
    args = (a, b, c)
    stream = torch.cuda.current_stream().cuda_stream
    raw_stream = torch._C._cuda_getCurrentRawStream

    def reads():
        for t in args:
            t.data_ptr()
            t.shape
            t.stride()
            t.dtype
            t.is_cuda
            t.get_device()

    to_dlpack = torch._C._to_dlpack
    sleep = torch.cuda._sleep

    def dlpacks():
        for t in args:
            to_dlpack(t)

    def one_read(name, call):
        if call:
            return lambda: getattr(a, name)()
        return lambda: getattr(a, name)

    rows = [
        ("torch.add(a, b, out=c)", lambda: torch.add(a, b, out=c)),
        ("torch: a bare launch (cuda._sleep(0))", lambda: sleep(0)),
        ("torch.add(a, b) (allocating)", lambda: torch.add(a, b)),
        ("ours: kernel(a, b, c)", lambda: k(a, b, c)),
        ("ours: allocating kernel(a, b)", lambda: alloc(a, b)),
        ("ours: Executable.run, stream given", lambda: exe.run(args, stream)),
        ("torch: 6 reads x 3 tensors", reads),
        ("torch: current raw stream", lambda: raw_stream(0)),
        ("torch: _to_dlpack x 3 tensors", dlpacks),
        ("torch: a.data_ptr()", one_read("data_ptr", True)),
        ("torch: a.shape", one_read("shape", False)),
        ("torch: a.stride()", one_read("stride", True)),
        ("torch: a.dtype", one_read("dtype", False)),
        ("torch: a.is_cuda", one_read("is_cuda", False)),
        ("torch: a.get_device()", one_read("get_device", True)),
        ("torch: a.device", one_read("device", False)),
        ("torch.empty(shape, dtype=, device=)",
         lambda: torch.empty((32, 32), dtype=torch.float32, device=a.device)),
        ("torch: a.new_empty(shape)", lambda: a.new_empty((32, 32))),
        ("torch: a.new_empty(shape, dtype=)", lambda: a.new_empty((32, 32), dtype=torch.float32)),
        ("python: empty call", lambda: None),
    ]
    print("interleaved (21 rounds of 2048 calls each side, medians):")
    for name, (o, t, r) in zip(
            ("in place: ours kernel(a, b, c) / torch.add(a, b, out=c)",
             "allocating: ours kernel(a, b) / torch.add(a, b)"),
            interleaved([(lambda: k(a, b, c), lambda: torch.add(a, b, out=c)),
                         (lambda: alloc(a, b), lambda: torch.add(a, b))])):
        print(f"  {name}: {o:.2f} / {t:.2f} us, ratio {r:.2f}", flush=True)
    print(f"{'':38} {'host':>9} {'back to back':>14}")
    for name, fn in rows:
        print(f"{name:38} {per_call_us(fn, n, True):6.2f} us {per_call_us(fn, n, False):11.2f} us",
              flush=True)
    best = None
    for _ in range(5):
        s = exe.host_stages(args, n)
        torch.cuda.synchronize()
        if best is None:
            best = dict(s)
        else:
            best = {key: min(best[key], s[key]) for key in best}
    for key in ("convert_us", "stream_us", "launch_us", "bind_us", "pack_us", "driver_us"):
        label = ("native stage: " if key in ("convert_us", "stream_us", "launch_us")
                 else "  of the launch: ") + key[:-3]
        print(f"{label:38} {best[key]:6.2f} us", flush=True)


if __name__ == "__main__":
    main()
