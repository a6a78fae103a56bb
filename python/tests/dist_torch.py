"""An all-gather written in T.* (TileScale's names) on torch's symmetric memory: torch makes
the rendezvous and maps the peers' buffers, our kernel addresses them through peer tables
(``T.use_peer_tables``), which ``tilelang.on_torch_symm`` builds from torch's handles.
Checked against ``dist.all_gather_into_tensor`` and timed beside it.
Needs torch with CUDA and one GPU per rank (NCCL), multicast off:

    TORCH_SYMM_MEM_DISABLE_MULTICAST=1 torchrun --nproc_per_node 2 python/tests/dist_torch.py

"""

import os
import statistics

os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed._symmetric_memory as symm_mem  # noqa: E402

import tilelang_rs as tilelang  # noqa: E402
from tilelang_rs import language as T  # noqa: E402

R, N = T.symbolic("R"), T.symbolic("N")


# Blocks per peer: one block cannot fill an NVLink port (the Rust all-gather uses the same).
G = 16


@T.prim_func
def all_gather(X: T.Tensor((N,), "float32"), OUT: T.SymmTensor((R, N), "float32"),
               FLAGS: T.SymmTensor((R,), "int32"), epoch: T.int32):
    T.use_peer_tables()
    with T.Kernel(G, T.get_num_ranks(), threads=256) as (g, p):
        rank = T.get_rank()
        # Part g of the shard, in whole 16-byte units so every part stays aligned.
        share = (N + 8 * G - 1) // (8 * G) * 8
        lo = T.min(g * share, N)
        hi = T.min(lo + share, N)
        T.put_block(X[lo], OUT[rank, lo], hi - lo, p)
        T.sync_threads()
        if T.get_thread_binding() == 0:
            T.signal(FLAGS[rank], 1, p, op="add")
            T.wait_counter(FLAGS[p], epoch * G)
        T.sync_threads()


def main():
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    n = int(os.environ.get("N", str(1 << 22)))
    out = symm_mem.empty((world, n), dtype=torch.float32, device="cuda")
    flags = symm_mem.empty((world,), dtype=torch.int32, device="cuda")
    flags.zero_()
    torch.cuda.synchronize()
    dist.barrier()
    # The peer tables and rank scalars come from torch's handles (made at first use).
    gather = tilelang.on_torch_symm(tilelang.compile(all_gather, target=f"cuda:{local}"))
    x = torch.randn(n, device="cuda", generator=torch.Generator("cuda").manual_seed(rank))
    epoch = 0

    def ours():
        nonlocal epoch
        epoch += 1
        gather(x, out, flags, epoch)

    ours()
    torch.cuda.synchronize()
    want = torch.empty(world * n, device="cuda")
    dist.all_gather_into_tensor(want, x)
    err = (out.flatten() - want).abs().max().item()

    def timed(fn, reps=20):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(reps):
            dist.barrier()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            ts.append(a.elapsed_time(b))
        t = torch.tensor([statistics.median(ts)], device="cuda")
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.item()

    ms_ours = timed(ours)
    ms_nccl = timed(lambda: dist.all_gather_into_tensor(want, x))
    bus = (world - 1) * n * 4
    if rank == 0:
        print(f"dist_torch all_gather ranks={world} n={n} err={err:.1e} "
              f"ours_ms={ms_ours:.4f} ours_busbw_gbs={bus / ms_ours / 1e6:.1f} "
              f"nccl_ms={ms_nccl:.4f} nccl_busbw_gbs={bus / ms_nccl / 1e6:.1f} "
              f"{'PASS' if err == 0 else 'FAIL'}", flush=True)
    dist.destroy_process_group()
    if err != 0:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
