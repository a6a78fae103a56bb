"""Multi-rank kernels in T.* (TileScale's names), run on simulated ranks: an all-gather with
signals and waits, a deadlock that names the flag, and a scope too narrow for its waiter."""

import numpy as np
import pytest

import tilelang_rs as tilelang
from tilelang_rs import TileLangError
from tilelang_rs import language as T

R, N = T.symbolic("R"), T.symbolic("N")


def gather(counted):
    """An all-gather whose flags hold the epoch (``counted=False``: set, then ``wait_ge``) or
    count arrivals (``counted=True``: add 1, then ``wait_counter``, wrap-safe)."""

    @T.prim_func
    def kernel(X: T.Tensor((N,), "float32"), OUT: T.SymmTensor((R, N), "float32"),
               FLAGS: T.SymmTensor((R,), "int32"), epoch: T.int32):
        with T.Kernel(T.get_num_ranks(), threads=64) as p:
            rank = T.get_rank()
            T.put_block(X[0], OUT[rank, 0], N, p)
            T.sync_threads()
            if T.get_thread_binding() == 0:
                if counted:
                    T.signal(FLAGS[rank], 1, p, op="add")
                    T.wait_counter(FLAGS[p], epoch)
                else:
                    T.signal(FLAGS[rank], epoch, p)
                    T.wait_ge(FLAGS[p], epoch)
            T.sync_threads()

    return kernel


all_gather = gather(counted=False)
counted_gather = gather(counted=True)


def args(r, ranks, n, epoch=1):
    x = (np.arange(n, dtype=np.float32) + 1000 * r) * 0.5
    return [x, np.full((ranks, n), np.nan, np.float32), np.zeros(ranks, np.int32), epoch]


@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_all_gather_on_simulated_ranks(ranks):
    n = 37
    per_rank = [args(r, ranks, n) for r in range(ranks)]
    assert tilelang.sim_ranks(all_gather, per_rank)
    want = np.stack([a[0] for a in per_rank])
    for a in per_rank:
        np.testing.assert_array_equal(a[1], want)
        np.testing.assert_array_equal(a[2], np.ones(ranks, np.int32))


def test_a_wait_nothing_satisfies_is_a_deadlock_error():
    per_rank = [args(0, 2, 8, epoch=2), args(1, 2, 8, epoch=1)]
    with pytest.raises(ValueError, match=r"deadlock.*`FLAGS`\[1\] on rank 0 >= 2 \(it is 1\)"):
        tilelang.sim_ranks(all_gather, per_rank)


def test_the_cpu_backend_refuses_a_multi_rank_kernel():
    with pytest.raises(TileLangError, match="multi-rank"):
        tilelang.compile(all_gather, target="cpu")


def test_a_gpu_scope_release_to_a_peer_is_reported():
    @T.prim_func
    def narrow(D: T.SymmTensor((4,), "float32"), F: T.SymmTensor((1,), "int32")):
        with T.Kernel(1, threads=32) as bx:
            other = 1 - T.get_rank()
            if T.get_thread_binding() == 0:
                T.st(D[0], 5.0, scope="sys", dst_pe=other)
                T.st(F[0], 1, scope="gpu", sem="release", dst_pe=other)
                T.wait_eq(F[0], 1)

    per_rank = [[np.zeros(4, np.float32), np.zeros(1, np.int32)] for _ in range(2)]
    with pytest.raises(ValueError, match=r"both need \.sys scope"):
        tilelang.sim_ranks(narrow, per_rank)


def test_a_peer_of_a_plain_tensor_is_refused_at_trace_time():
    with pytest.raises(TileLangError, match="not a symmetric buffer"):
        @T.prim_func
        def bad(A: T.Tensor((4,), "int32"), F: T.SymmTensor((1,), "int32")):
            with T.Kernel(1, threads=32) as bx:
                T.st(A[0], 1, dst_pe=0)


@T.prim_func
def peer_table_gather(X: T.Tensor((N,), "float32"), OUT: T.SymmTensor((R, N), "float32"),
                      FLAGS: T.SymmTensor((R,), "int32"), epoch: T.int32):
    T.use_peer_tables()
    with T.Kernel(T.get_num_ranks(), threads=64) as p:
        rank = T.get_rank()
        T.put_block(X[0], OUT[rank, 0], N, p)
        T.sync_threads()
        if T.get_thread_binding() == 0:
            T.signal(FLAGS[rank], epoch, p)
            T.wait_ge(FLAGS[p], epoch)


def test_peer_tables_add_a_table_per_symmetric_tensor():
    ag = peer_table_gather
    names = [p[0] for p in ag.kernel.params()]
    assert names == ["X", "OUT", "FLAGS", "epoch", "OUT_peers", "FLAGS_peers", "rank",
                     "num_ranks", "heap_stride"], names
    src = ag.kernel.source("sm_90a")
    assert "tl_peer_table(" in src
    per_rank = []
    for r in range(2):
        a = args(r, 2, 16)
        a += [np.zeros(2, np.int64), np.zeros(2, np.int64)]
        per_rank.append(a)
    assert tilelang.sim_ranks(ag, per_rank)
    np.testing.assert_array_equal(per_rank[0][1], np.stack([per_rank[0][0], per_rank[1][0]]))


@T.prim_func
def warp_ring(X: T.Tensor((N,), "float32"), OUT: T.SymmTensor((R, N), "float32"),
              FLAGS: T.SymmTensor((R,), "int32")):
    with T.Kernel(1, threads=128) as bx:
        rank, ranks = T.get_rank(), T.get_num_ranks()
        tid = T.get_thread_binding()
        quarter = T.truncdiv(N + 3, 4)
        lo = T.min(T.truncdiv(tid, 32) * quarter, N)
        hi = T.min(lo + quarter, N)
        nxt = T.if_then_else(rank + 1 < ranks, rank + 1, 0)
        T.put_warp(X[lo], OUT[rank, lo], hi - lo, nxt)
        T.sync_warp()
        if T.truncmod(tid, 32) == 0:
            T.signal(FLAGS[rank], 1, nxt, op="add")


@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_warp_puts_reach_the_next_rank(ranks):
    n = 70
    per_rank = [[(np.arange(n, dtype=np.float32) + 1000 * r), np.full((ranks, n), np.nan, np.float32),
                 np.zeros(ranks, np.int32)] for r in range(ranks)]
    tilelang.sim_ranks(warp_ring, per_rank)
    for r in range(ranks):
        prev = (r + ranks - 1) % ranks
        np.testing.assert_array_equal(per_rank[r][1][prev], per_rank[prev][0])
        assert per_rank[r][2][prev] == 4


def test_a_counter_wait_holds_across_wrap_around():
    # The flags stand one below 2**31 (the most an int32 holds); this call's arrival takes
    # them to -2**31, which T.wait_counter reads as having reached epoch 2**31.
    n, top = 16, 2**31 - 1
    per_rank = []
    for r in range(2):
        a = args(r, 2, n, epoch=-2**31)
        a[2] = np.full(2, top, np.int32)
        per_rank.append(a)
    assert tilelang.sim_ranks(counted_gather, per_rank)
    for a in per_rank:
        np.testing.assert_array_equal(a[2], np.full(2, -2**31, np.int32))
    # Waiting for the next count, which no rank sends, is a deadlock — not a pass.
    stuck = [args(r, 2, n, epoch=-2**31 + 1) for r in range(2)]
    for a in stuck:
        a[2] = np.full(2, top, np.int32)
    with pytest.raises(ValueError, match="deadlock"):
        tilelang.sim_ranks(counted_gather, stuck)


def test_on_torch_symm_needs_a_peer_table_kernel():
    """``on_torch_symm`` wraps kernels whose symmetric tensors have peer tables
    (``T.use_peer_tables()``); another multi-rank kernel is refused with the fix, before
    torch is needed. One that fits goes on to need torch.distributed (initialized)."""

    tables = peer_table_gather
    assert [p.symmetric for p in tables.params] == [False, True, True, False]
    flat = tilelang.compile(all_gather, target="sim")
    with pytest.raises(TypeError, match=r"T\.use_peer_tables\(\)"):
        tilelang.on_torch_symm(flat)
    with pytest.raises((ImportError, RuntimeError)):  # no torch here, or not initialized
        tilelang.on_torch_symm(tilelang.compile(tables, target="sim"))
