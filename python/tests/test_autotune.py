"""@tilelang.autotune over the Rust autotuner, on the CPU backend."""

import numpy as np
import pytest

import tilelang_rs as tilelang
from tilelang_rs import language as T


def make_factory(calls):
    @tilelang.autotune(configs=[{"block": 16, "threads": 32}, {"block": 64, "threads": 64},
                                {"block": 32, "threads": 32}],
                       ref_prog=lambda a: a * 2.0, warmup=1, rep=3, force=True, progress=False)
    @tilelang.jit(out_idx=[-1], target="cpu")
    def double(n, block=16, threads=32):
        calls.append(block)

        @T.prim_func
        def double(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
            with T.Kernel(T.ceildiv(n, block), threads=threads) as bx:
                for i in T.Parallel(block):
                    if bx * block + i < n:
                        B[bx * block + i] = A[bx * block + i] * 2.0

        return double

    return double


def test_autotune_picks_a_checked_config(rng):
    calls = []
    double = make_factory(calls)
    k = double(1000)
    assert sorted(calls) == [16, 32, 64]
    assert k.config in [{"block": 16, "threads": 32}, {"block": 64, "threads": 64},
                        {"block": 32, "threads": 32}]
    # Every candidate was timed (the table lists each with a time).
    assert k.tune_table.count(" ms") == 3, k.tune_table
    a = rng.standard_normal(1000).astype(np.float32)
    np.testing.assert_allclose(k(a), a * 2)
    assert double(1000) is k  # memoized per arguments


def test_autotune_rejects_wrong_candidates():
    @tilelang.autotune(configs=[{"bad": True}, {"bad": False}], ref_prog=lambda a: a * 2.0,
                       warmup=1, rep=2, force=True, progress=False)
    @tilelang.jit(out_idx=[-1], target="cpu")
    def maybe(n, bad=False):
        factor = 3.0 if bad else 2.0

        @T.prim_func
        def maybe(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(n):
                    B[i] = A[i] * factor

        return maybe

    k = maybe(64)
    assert k.config == {"bad": False}
    assert "wrong result" in k.tune_table
