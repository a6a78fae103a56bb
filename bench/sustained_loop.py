"""The timing loop of the sustained benches (bench/sustained-gemm.sh, bench/sustained-attn.sh):
`call` launched `reps` times back to back, each after a 256 MiB cache flush (`zero_`, as
triton's do_bench does) and timed by CUDA events around the call alone. Long enough runs
(about 1.6 s) reach the GPU's power-capped clock, unlike do_bench's 200 ms."""
import time

import torch


def median_ms(call, reps):
    """Three warm-up calls, a second's pause, then the median of `reps` timed calls, in ms."""
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    time.sleep(1)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        flush.zero_()
        e0.record()
        call()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1))
    times.sort()
    return times[len(times) // 2]
