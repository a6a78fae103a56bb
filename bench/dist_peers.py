"""Peers of the multi-rank kernels, timed in one torchrun job: NCCL through torch.distributed
(all_gather_into_tensor then matmul; matmul then reduce_scatter_tensor; all_to_all_single;
all_reduce; send/recv to every peer) and PyTorch's symmetric-memory fused ops where the installed torch has them
(fused_all_gather_matmul, fused_matmul_reduce_scatter, one_shot_all_reduce).

    torchrun --nproc_per_node N bench/dist_peers.py --op ag-gemm --shape 1024,3584,8192

Shapes per rank, as the Rust example `distributed` takes them: ag-gemm gathers A [m, k] from
every rank and multiplies by B [n, k]^T; gemm-rs multiplies A [R*m, k] by B [n, k]^T and
reduce-scatters rows; all-to-all sends m rows of k elements to each rank; all-reduce sums n
floats. Rank 0 prints one line per implementation: time (median of CUDA-event timings), TFLOP/s
per rank, bus bandwidth (nccl-tests' factors) and the relative error against a float32
reference. NCCL needs one GPU per rank; on a single GPU run it with one process.
NVLink multicast stays off (TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NCCL_NVLS_ENABLE=0).
"""

import argparse
import os
import statistics

os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def timed(fn, warmup=3, reps=20):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        dist.barrier()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    # The job's time is the slowest rank's.
    t = torch.tensor([statistics.median(times)], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def rel_err(got, want):
    got, want = got.float(), want.float()
    return ((got - want).norm() / want.norm().clamp_min(1e-30)).item()


def report(args, impl, ms, flops=0.0, bus_bytes=0.0, err=float("nan")):
    if dist.get_rank() != 0:
        return
    tflops = f" tflops_per_rank={flops / (ms * 1e-3) / 1e12:.1f}" if flops else ""
    busbw = f" busbw_gbs={bus_bytes / (ms * 1e-3) / 1e9:.1f}" if bus_bytes else ""
    print(
        f"dist_peers op={args.op} impl={impl} ranks={dist.get_world_size()} m={args.m} "
        f"n={args.n} k={args.k} ms={ms:.4f}{tflops}{busbw} err={err:.2e}",
        flush=True,
    )


def symm_mem_group():
    """torch's symmetric memory for the default group, or None where it is unavailable."""
    try:
        import torch.distributed._symmetric_memory as symm_mem

        name = dist.group.WORLD.group_name
        symm_mem.enable_symm_mem_for_group(name)
        return name
    except Exception as e:  # an older torch, or no symmetric memory on this machine
        if dist.get_rank() == 0:
            print(f"dist_peers: torch symmetric memory unavailable: {e}", flush=True)
        return None


def all_reduce_once(args, n, world, r, g, name):
    x = torch.randn(n, device="cuda", dtype=torch.float32, generator=g)
    y = x.clone()
    bus = 2 * (world - 1) / world * n * 4
    report(args, "nccl", timed(lambda: dist.all_reduce(y), reps=args.reps), 0.0, bus)
    if name is not None and hasattr(torch.ops.symm_mem, "one_shot_all_reduce"):
        try:
            import torch.distributed._symmetric_memory as symm_mem

            buf = symm_mem.empty(n, device="cuda", dtype=torch.float32)
            symm_mem.rendezvous(buf, name)
            buf.copy_(x)
            ms = timed(lambda: torch.ops.symm_mem.one_shot_all_reduce(buf, "sum", name), reps=args.reps)
            report(args, "torch-symm-mem-one-shot", ms, 0.0, bus)
        except Exception as e:
            if r == 0:
                print(f"dist_peers: one_shot_all_reduce failed: {e}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--op", choices=["ag-gemm", "gemm-rs", "all-to-all", "all-reduce", "all-gather",
                                    "sendrecv"],
                   default="ag-gemm")
    p.add_argument("--sweep", default="",
                   help="comma-separated n values for all-gather/all-reduce, each timed in turn")
    # One option for the sizes: torchrun's own parser takes `--m`, `--n`, `--k` for
    # abbreviations of its options (ambiguous prefixes), even after the script's name.
    p.add_argument("--shape", default="1024,3584,8192", help="M,N,K")
    p.add_argument("--reps", type=int, default=20)
    args = p.parse_args()
    args.m, args.n, args.k = (int(v) for v in args.shape.split(","))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local % torch.cuda.device_count())
    dist.init_process_group("nccl")
    r, world = dist.get_rank(), dist.get_world_size()
    g = torch.Generator(device="cuda").manual_seed(1234 + r)
    m, n, k = args.m, args.n, args.k
    bf = torch.bfloat16
    name = symm_mem_group()

    if args.op == "ag-gemm":
        a = torch.randn(m, k, device="cuda", dtype=bf, generator=g)
        b = torch.randn(n, k, device="cuda", dtype=bf, generator=g)
        full = torch.empty(world * m, k, device="cuda", dtype=bf)
        dist.all_gather_into_tensor(full, a)
        want = full.float() @ b.float().t()
        flops = 2.0 * world * m * n * k
        bus = (world - 1) * m * k * 2  # bytes each rank receives

        def nccl():
            dist.all_gather_into_tensor(full, a)
            return full @ b.t()

        ms = timed(nccl, reps=args.reps)
        report(args, "nccl+cublas", ms, flops, bus, rel_err(nccl(), want))
        comm = timed(lambda: dist.all_gather_into_tensor(full, a), reps=args.reps)
        report(args, "nccl-all-gather-only", comm, 0.0, bus)
        mm = timed(lambda: full @ b.t(), reps=args.reps)
        report(args, "cublas-only", mm, flops)
        if name is not None and hasattr(torch.ops.symm_mem, "fused_all_gather_matmul"):
            def fused():
                return torch.ops.symm_mem.fused_all_gather_matmul(a, [b.t()], gather_dim=0, group_name=name)[1][0]

            try:
                err = rel_err(fused(), want)
                report(args, "torch-symm-mem-fused", timed(fused, reps=args.reps), flops, bus, err)
            except Exception as e:
                if r == 0:
                    print(f"dist_peers: fused_all_gather_matmul failed: {e}", flush=True)
    elif args.op == "gemm-rs":
        a = torch.randn(world * m, k, device="cuda", dtype=bf, generator=g)
        b = torch.randn(n, k, device="cuda", dtype=bf, generator=g)
        out = torch.empty(m, n, device="cuda", dtype=bf)
        part = (a.float() @ b.float().t())
        parts = [torch.empty_like(part) for _ in range(world)]
        dist.all_gather(parts, part)
        want = sum(parts)[r * m:(r + 1) * m]
        flops = 2.0 * world * m * n * k
        bus = (world - 1) * m * n * 2

        def nccl():
            dist.reduce_scatter_tensor(out, a @ b.t())
            return out

        report(args, "cublas+nccl", timed(nccl, reps=args.reps), flops, bus, rel_err(nccl(), want))
        if name is not None and hasattr(torch.ops.symm_mem, "fused_matmul_reduce_scatter"):
            def fused():
                return torch.ops.symm_mem.fused_matmul_reduce_scatter(a, b.t(), "sum", scatter_dim=0, group_name=name)

            try:
                err = rel_err(fused(), want)
                report(args, "torch-symm-mem-fused", timed(fused, reps=args.reps), flops, bus, err)
            except Exception as e:
                if r == 0:
                    print(f"dist_peers: fused_matmul_reduce_scatter failed: {e}", flush=True)
    elif args.op == "all-to-all":
        x = torch.randn(world * m, k, device="cuda", dtype=bf, generator=g)
        y = torch.empty_like(x)
        bus = (world - 1) * m * k * 2
        report(args, "nccl", timed(lambda: dist.all_to_all_single(y, x), reps=args.reps), 0.0, bus)
    elif args.op == "all-gather":
        # n floats per rank; bus bytes as nccl-tests count them (what each rank receives).
        for n in [int(v) for v in args.sweep.split(",") if v] or [n]:
            args.n = n
            x = torch.randn(n, device="cuda", dtype=torch.float32, generator=g)
            out = torch.empty(world * n, device="cuda", dtype=torch.float32)
            bus = (world - 1) * n * 4
            report(args, "nccl", timed(lambda: dist.all_gather_into_tensor(out, x), reps=args.reps), 0.0, bus)
    elif args.op == "sendrecv":
        # Every rank sends its n floats to every peer and receives theirs, by NCCL's send/recv
        # (one batch per call): on 2 ranks, the pair exchange in both directions at once. The
        # same bytes as the all-gather, counted the same way.
        if world == 1:
            if r == 0:
                print("dist_peers: sendrecv needs 2 or more ranks", flush=True)
            dist.destroy_process_group()
            return
        for n in [int(v) for v in args.sweep.split(",") if v] or [n]:
            args.n = n
            x = torch.randn(n, device="cuda", dtype=torch.float32, generator=g)
            out = torch.empty(world, n, device="cuda", dtype=torch.float32)
            peers = [p for p in range(world) if p != r]

            def exchange():
                ops = [dist.P2POp(dist.isend, x, p) for p in peers]
                ops += [dist.P2POp(dist.irecv, out[p], p) for p in peers]
                for w in dist.batch_isend_irecv(ops):
                    w.wait()

            bus = (world - 1) * n * 4
            report(args, "nccl-send-recv", timed(exchange, reps=args.reps), 0.0, bus)
    else:
        for n in [int(v) for v in args.sweep.split(",") if v] or [n]:
            args.n = n
            all_reduce_once(args, n, world, r, g, name)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
