"""The T.* language: what traces, what folds at trace time, and where errors point."""

import inspect

import numpy as np
import pytest

import tilelang_rs as tilelang
from tilelang_rs import TileLangError
from tilelang_rs import language as T


def line_of(fn, text):
    """The line number in this file of the first line of `fn`'s source containing `text`."""
    lines, first = inspect.getsourcelines(fn)
    for i, l in enumerate(lines):
        if text in l:
            return first + i
    raise AssertionError(text)


def test_gemm_shape_mismatch_names_the_python_line():
    def make():
        @T.prim_func
        def bad(A: T.Tensor((64, 32), "float16"), C: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128) as bx:
                A_s = T.alloc_shared((64, 32), "float16")
                B_s = T.alloc_shared((64, 64), "float16")
                C_l = T.alloc_fragment((64, 64), "float32")
                T.copy(A[0, 0], A_s)
                T.gemm(A_s, B_s, C_l)  # K disagrees
                T.copy(C_l, C[0, 0])

        return bad

    with pytest.raises(TileLangError) as e:
        make()
    msg = str(e.value)
    assert "error[shape-mismatch]: gemm shapes do not agree" in msg
    assert f"{__file__}:{line_of(make, 'T.gemm(A_s')}:" in msg
    # The same help text as the Rust DSL.
    assert "help: A is [M, K]" in msg


def test_python_errors_point_at_the_line():
    def make():
        @T.prim_func
        def bad(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                x = undefined_name + 1  # noqa: F821
                T.fill(A, x)

        return bad

    with pytest.raises(TileLangError) as e:
        make()
    msg = str(e.value)
    assert "NameError" in msg and "undefined_name" in msg
    assert f"{__file__}:{line_of(make, 'undefined_name')}:" in msg


def test_tile_ops_outside_a_launch_are_diagnosed():
    def make():
        @T.prim_func
        def bad(A: T.Tensor((8,), "float32")):
            T.fill(A, 1.0)

        return bad

    with pytest.raises(TileLangError, match=r"inside `with T.Kernel"):
        make()


def test_parallel_index_count_is_checked_like_the_rust_dsl():
    def make():
        @T.prim_func
        def bad(A: T.Tensor((8, 8), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(8, 8):
                    A[i, 0] = 1.0

        return bad

    with pytest.raises(TileLangError) as e:
        make()
    assert "parallel over 2 extents, but the body takes 1 indices" in str(e.value)
    assert f":{line_of(make, 'T.Parallel(8, 8)')}:" in str(e.value)


def test_unknown_dtype_is_a_clear_error():
    # Python evaluates the annotation when the function is defined: a TypeError at that line.
    with pytest.raises(TypeError, match="unknown dtype `floaty`"):
        @T.prim_func
        def bad(A: T.Tensor((8,), "floaty")):
            with T.Kernel(1, threads=32) as bx:
                T.clear(A)


def test_symbolic_condition_on_a_python_bool_is_refused():
    x = T.symbolic("x")
    with pytest.raises(TypeError, match="no truth value"):
        bool(x > 3)


def test_control_flow_traces_and_folds(rng):
    # Python-level `if` folds at trace time; `if` on a symbolic value is a branch; `range` in
    # a kernel is a serial loop; loops over Python lists unroll at trace time; T.grid and
    # T.unroll; `and`/`or`/`not`/ternaries on symbolic values.
    def make(flag):
        N = T.symbolic("N")

        @T.prim_func
        def k(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
            with T.Kernel(T.ceildiv(N, 64), threads=64) as bx:
                a = T.alloc_fragment((64,), "float32")
                T.copy(A[bx * 64], a)
                if flag:
                    for i in T.Parallel(64):
                        a[i] = a[i] * 2.0
                else:
                    for i in T.Parallel(64):
                        a[i] = a[i] * 3.0
                for s in range(2):
                    for i in T.Parallel(64):
                        a[i] = a[i] + 1.0
                for c in [10.0, 100.0]:
                    for i in T.Parallel(64):
                        a[i] = a[i] + c
                for i in T.Parallel(64):
                    a[i] = T.if_then_else((bx * 64 + i < N) and not (i == 3), a[i], -1.0)
                    a[i] = a[i] if i != 5 else 7.0
                if bx == 0:
                    for i in T.Parallel(64):
                        a[i] = a[i] + 1000.0
                else:
                    for u in T.unroll(2):
                        for i in T.Parallel(64):
                            a[i] = a[i] - 1.0
                T.copy(a, B[bx * 64])

        return k

    for flag, mul in [(True, 2.0), (False, 3.0)]:
        func = make(flag)
        assert func.script().count("for s in") == 1  # range: one serial loop
        for target in ["cpu", "sim"]:
            kernel = tilelang.compile(func, out_idx=[1], target=target)
            x = rng.standard_normal(150).astype(np.float32)
            y = kernel(x)
            want = x * mul + 2.0 + 110.0
            idx = np.arange(150)
            want = np.where(idx % 64 == 3, -1.0, want)
            want = np.where(idx % 64 == 5, 7.0, want)
            want = np.where(idx < 64, want + 1000.0, want - 2.0)
            np.testing.assert_allclose(y, want.astype(np.float32), rtol=1e-6)


def test_serial_loop_with_step_and_macro(rng):
    @T.macro
    def add_into(dst, src):
        for i in T.Parallel(32):
            dst[i] += src[i]

    @T.prim_func
    def k(A: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            acc = T.alloc_fragment((32,), "float32")
            x = T.alloc_fragment((32,), "float32")
            T.clear(acc)
            T.copy(A, x)
            for s in T.serial(1, 8, 3):  # s = 1, 4, 7
                for i in T.Parallel(32):
                    x[i] = x[i] + s
                add_into(acc, x)
            T.copy(acc, B)

    kernel = tilelang.compile(k, out_idx=[1], target="cpu")
    a = rng.standard_normal(32).astype(np.float32)
    # x after each step: a+1, a+5, a+12; acc = 3a + 18
    np.testing.assert_allclose(kernel(a), 3 * a + 18, rtol=1e-5)


def test_reductions_cumsum_atomic_and_locals(rng):
    @T.prim_func
    def k(A: T.Tensor((4, 16), "float32"), S: T.Tensor((4,), "float32"),
          MX: T.Tensor((4,), "float32"), MN: T.Tensor((4,), "float32"),
          AS: T.Tensor((4,), "float32"), C: T.Tensor((4, 16), "float32"),
          ACC: T.Tensor((4, 16), "float32")):
        with T.Kernel(1, threads=64) as bx:
            a = T.alloc_fragment((4, 16), "float32")
            r = T.alloc_fragment((4,), "float32")
            sh = T.alloc_shared((4, 16), "float32")
            T.copy(A, a)
            T.reduce_sum(a, r, dim=1)
            T.copy(r, S)
            T.reduce_max(a, r, dim=-1)
            T.copy(r, MX)
            T.fill(r, 0.5)
            T.reduce_min(a, r, dim=1, clear=False)  # min with 0.5
            T.copy(r, MN)
            T.reduce_abssum(a, r, dim=1)
            T.copy(r, AS)
            T.copy(A, sh)
            T.cumsum(sh, dim=1)
            T.copy(sh, C)
            T.atomic_add(ACC, a)

    kernel = tilelang.compile(k, out_idx=[1, 2, 3, 4, 5], target="cpu")
    a = rng.standard_normal((4, 16)).astype(np.float32)
    acc = np.ones((4, 16), np.float32)
    s, mx, mn, asum, c = kernel(a, acc)
    np.testing.assert_allclose(s, a.sum(1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(mx, a.max(1))
    np.testing.assert_allclose(mn, np.minimum(a.min(1), 0.5))
    np.testing.assert_allclose(asum, np.abs(a).sum(1), rtol=1e-5)
    np.testing.assert_allclose(c, np.cumsum(a, 1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(acc, 1 + a, rtol=1e-6)


def test_atomic_max_and_min_fold_blocks_together(rng):
    """Every block folds its rows into one row with atomic max / min (the amax an FP8 scale
    needs), on the CPU backend and in the simulator (the GPU lowering)."""
    M = T.symbolic("M")

    @T.prim_func
    def k(A: T.Tensor((M, 32), "float32"), HI: T.Tensor((1, 32), "float32"),
          LO: T.Tensor((1, 32), "float32")):
        with T.Kernel(T.ceildiv(M, 8), threads=32) as bx:
            a = T.alloc_shared((8, 32), "float32")
            T.copy(A[bx * 8, 0], a)
            for r in T.serial(8):
                if bx * 8 + r < M:
                    T.atomic_max(HI, a[r:r + 1, :])
                    T.atomic_min(LO, a[r:r + 1, :])

    a = rng.standard_normal((29, 32)).astype(np.float32)
    for target in ("cpu", "sim"):
        kernel = tilelang.compile(k, target=target)
        hi = np.full((1, 32), -np.inf, np.float32)
        lo = np.full((1, 32), np.inf, np.float32)
        kernel(a, hi, lo)
        np.testing.assert_array_equal(hi[0], a.max(0), err_msg=target)
        np.testing.assert_array_equal(lo[0], a.min(0), err_msg=target)


def test_element_atomics_in_a_parallel_loop(rng):
    """TileLang's element form, ``T.atomic_add(C[i, j], v)`` inside ``T.Parallel``: a split-K
    style accumulation and a maximum, on the CPU backend and in the simulator."""
    M = T.symbolic("M")

    @T.prim_func
    def k(A: T.Tensor((M, 16), "float32"), S: T.Tensor((16,), "float32"),
          HI: T.Tensor((16,), "int32")):
        with T.Kernel(T.ceildiv(M, 8), threads=64) as bx:
            a = T.alloc_fragment((8, 16), "float32")
            T.copy(A[bx * 8, 0], a)
            for i, j in T.Parallel(8, 16):
                if bx * 8 + i < M:
                    T.atomic_add(S[j], a[i, j])
                    T.atomic_max(HI[j], T.cast(a[i, j] * 4.0, "int32"))

    a = (rng.integers(-40, 40, (21, 16)) * 0.25).astype(np.float32)
    for target in ("cpu", "sim"):
        kernel = tilelang.compile(k, target=target)
        s = np.zeros(16, np.float32)
        hi = np.full(16, -1000, np.int32)
        kernel(a, s, hi)
        np.testing.assert_array_equal(s, a.sum(0), err_msg=target)
        np.testing.assert_array_equal(hi, (a * 4).astype(np.int32).max(0), err_msg=target)


def test_atomic_max_refuses_a_half_precision_destination():
    with pytest.raises(TileLangError, match="atomic max and min take int32, uint32 or float32"):
        @T.prim_func
        def k(A: T.Tensor((32,), "float16"), HI: T.Tensor((32,), "float16")):
            with T.Kernel(1, threads=32) as bx:
                a = T.alloc_shared((32,), "float16")
                T.copy(A, a)
                T.atomic_max(HI, a)

        tilelang.compile(k, target="cpu")


def test_scalars_casts_and_math(rng):
    @T.prim_func
    def k(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float16"), alpha: T.float32,
          shift: T.int32):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                B[i] = T.cast(T.exp2(A[i]) * alpha + T.max(A[i], 0.0) + T.Cast("float32", shift)
                              + T.log(T.abs(A[i]) + 1.0) - T.sqrt(T.abs(A[i])), "float16")

    kernel = tilelang.compile(k, out_idx=[1], target="cpu")
    a = rng.standard_normal(64).astype(np.float32)
    want = (np.exp2(a) * 0.5 + np.maximum(a, 0) + 3 + np.log(np.abs(a) + 1) - np.sqrt(np.abs(a)))
    np.testing.assert_allclose(kernel(a, 0.5, 3).astype(np.float32), want, rtol=2e-3, atol=2e-3)


def test_constants_fold_at_trace_time():
    assert T.ceildiv(1000, 128) == 8
    assert T.max(3, 4) == 4 and T.min(3.5, 2) == 2
    assert T.exp2(3.0) == 8.0
    n = T.symbolic("n")
    e = T.ceildiv(n, 128)
    assert isinstance(e, T.Expr) and "n" in str(e)
    # Arithmetic on constants simplifies back to Python numbers in shapes.
    assert (n * 0 + 4).simplify() == 4


def test_slices_make_regions_and_dyn_sizes(rng):
    M = T.dyn["m"]

    @T.prim_func
    def k(A: T.Tensor((M, 3, 64), "float32"), B: T.Tensor((M, 64), "float32")):
        with T.Kernel(M, threads=64) as bx:
            s = T.alloc_shared((64,), "float32")
            T.copy(A[bx, 1, :], s)
            T.copy(s, B[bx, 0:64])

    kernel = tilelang.compile(k, out_idx=[1], target="cpu")
    for m in (3, 5):
        a = rng.standard_normal((m, 3, 64)).astype(np.float32)
        np.testing.assert_array_equal(kernel(a), a[:, 1, :])


def test_jit_decorator_caches_per_arguments(rng):
    calls = []

    @tilelang.jit(out_idx=[-1], target="cpu")
    def scale(n, factor):
        calls.append((n, factor))

        @T.prim_func
        def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
            with T.Kernel(T.ceildiv(n, 32), threads=32) as bx:
                for i in T.Parallel(32):
                    if bx * 32 + i < n:
                        B[bx * 32 + i] = A[bx * 32 + i] * factor

        return main

    k1 = scale(40, 2.0)
    k2 = scale(40, 2.0)
    assert k1 is k2 and calls == [(40, 2.0)]
    a = rng.standard_normal(40).astype(np.float32)
    np.testing.assert_allclose(k1(a), a * 2)
    assert "for" in k1.get_kernel_source() or "void" in k1.get_kernel_source()


def test_kernel_source_for_gpu_targets_needs_no_gpu():
    import gemm

    func = gemm.matmul(256, 256, 256, 128, 128, 32)
    src = func.kernel.source("sm_80")
    assert "mma" in src
    assert "mfma" in func.kernel.source("gfx942").lower()


def test_precompile_for_a_gpu_needs_no_gpu(tmp_path):
    """NVRTC compiles a GEMM for sm_90a into the disk cache; the second time is a hit."""
    import os

    import gemm

    func = gemm.matmul(256, 256, 256, 128, 128, 32)
    try:
        st = tilelang.precompile(func, "sm_90a", pass_configs={"cache_dir": str(tmp_path)})
    except tilelang.TileLangError as e:
        if "NVRTC" in str(e) and os.environ.get("TILELANG_REQUIRE_NVRTC") != "1":
            pytest.skip(f"no NVRTC here (scripts/install-cuda-tools.sh installs it): {e}")
        raise
    assert not st["cache_hit"] and st["compile_ms"] > 0 and st["target"] == "sm_90a"
    again = tilelang.precompile(gemm.matmul(256, 256, 256, 128, 128, 32), "sm_90a",
                                pass_configs={"cache_dir": str(tmp_path)})
    assert again["cache_hit"] and again["key"] == st["key"]
    with pytest.raises(tilelang.TileLangError, match="not a GPU target"):
        tilelang.precompile(func, "cpu")


def test_strided_tensor_takes_contiguous_strides():
    M = T.symbolic("M")
    spec = T.StridedTensor((M, 64), (64, 1), "float16")
    assert spec.dtype == "float16" and len(spec.shape) == 2
    assert T.StridedTensor((8, 4), (4, 1), T.float32).shape == (8, 4)
    with pytest.raises(TypeError, match="contiguous"):
        T.StridedTensor((8, 4), (1, 8), "float32")


class _Kernels:
    """Kernels defined in a class body and under `if`/`try`: the tracer finds their source."""

    if True:
        @staticmethod
        def make(n):
            try:
                @T.prim_func
                def twice(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
                    with T.Kernel(1, threads=32) as bx:
                        for i in T.Parallel(n):
                            B[i] = A[i] * 2.0 if n > 0 else A[i]
            finally:
                pass
            return twice


def test_kernels_nested_in_statements_and_traced_again():
    for n in (8, 16):  # the same source traced again with other closure values
        k = tilelang.compile(_Kernels.make(n), out_idx=[1], target="cpu")
        a = np.arange(n, dtype=np.float32)
        np.testing.assert_allclose(k(a), a * 2)


def test_print_shows_values_and_refuses_a_buffer(capfd):
    @T.prim_func
    def k(A: T.Tensor((4,), "float32"), B: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            a = T.alloc_fragment((4,), "float32")
            T.copy(A, a)
            for i in T.Parallel(4):
                T.print(a[i] * 2.0, msg="twice: ")
            T.copy(a, B)

    for target in ("cpu", "sim"):
        kernel = tilelang.compile(k, out_idx=[1], target=target)
        kernel(np.arange(4, dtype=np.float32))
        out = capfd.readouterr().out
        for v in ("0.000000", "2.000000", "4.000000", "6.000000"):
            assert f"twice: {v}" in out, (target, out)

    with pytest.raises(TileLangError, match="T.print prints a value"):
        @T.prim_func
        def bad(A: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                T.print(A)


def test_fp8_gemm_runs_on_the_cpu_and_lowers_to_fp8_wgmma(rng):
    """An fp8 GEMM in TileLang's spelling (e4m3 A, e5m2 B, K-major): exact against numpy on the
    CPU backend (ml_dtypes arrays), and fp8 wgmma (k32) in the sm_90a source."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    M, N, K, bm, bn, bk = 130, 200, 300, 128, 128, 128

    @T.prim_func
    def fp8_mm(A: T.Tensor((M, K), "float8_e4m3"), B: T.Tensor((N, K), "float8_e5m2"),
               C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=256) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float8_e4m3")
            B_s = T.alloc_shared((bn, bk), "float8_e5m2")
            acc = T.alloc_fragment((bm, bn), "float")
            T.clear(acc)
            for ko in T.Pipelined(T.ceildiv(K, bk), num_stages=3):
                T.copy(A[by * bm, ko * bk], A_s)
                T.copy(B[bx * bn, ko * bk], B_s)
                T.gemm(A_s, B_s, acc, transpose_B=True)
            T.copy(acc, C[by * bm, bx * bn])

    kernel = tilelang.compile(fp8_mm, out_idx=[2], target="cpu")
    a = rng.standard_normal((M, K)).astype(ml_dtypes.float8_e4m3fn)
    b = rng.standard_normal((N, K)).astype(ml_dtypes.float8_e5m2)
    c = kernel(a, b)
    want = a.astype(np.float64) @ b.astype(np.float64).T
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-4)
    assert "k32.f32.e4m3.e5m2" in fp8_mm.kernel.source("sm_90a")


def test_fnuz_float8_is_refused_not_misread():
    """MI300's fnuz float8 formats have another bias: declaring or passing them is an error."""
    with pytest.raises(TypeError, match="fnuz"):
        T.Tensor((4,), "float8_e4m3fnuz")


def test_wg_wait_and_wait_wgmma(rng):
    """TileLang's asynchronous gemm: ``wg_wait=-1`` then ``T.wait_wgmma(0)``; correct on the
    CPU (synchronous there), lowered to a wait for the wgmma accumulator on sm_90a."""
    M, N, K, bm, bn, bk = 128, 128, 128, 64, 64, 64

    @T.prim_func
    def mm(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"),
           C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bn, bk), "float16")
            acc = T.alloc_fragment((bm, bn), "float")
            T.clear(acc)
            for ko in T.Pipelined(T.ceildiv(K, bk), num_stages=3):
                T.copy(A[by * bm, ko * bk], A_s)
                T.copy(B[bx * bn, ko * bk], B_s)
                T.gemm(A_s, B_s, acc, transpose_B=True, wg_wait=-1)
                T.wait_wgmma(0)
            T.copy(acc, C[by * bm, bx * bn])

    kernel = tilelang.compile(mm, out_idx=[2], target="cpu")
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((N, K)).astype(np.float16)
    np.testing.assert_allclose(kernel(a, b), a.astype(np.float64) @ b.astype(np.float64).T,
                               rtol=1e-4, atol=1e-3)
    src = mm.kernel.source("sm_90a")
    assert "wgmma.wait_group.sync.aligned 0" in src or "tl_wgmma_wait<0>" in src
    with pytest.raises(TypeError, match="wait_wgmma"):
        T.wait_wgmma(-1)
    with pytest.raises(TypeError, match="pinned"):
        T.wait_wgmma(0, pinned=1)


def test_warp_shuffles_in_the_simulator(rng):
    """T.shfl_xor (a butterfly sum), T.shfl_down, T.shfl_up and T.shfl_sync over two warps,
    against numpy: lanes past the warp's end (down) or before its start (up) keep their own."""

    @T.prim_func
    def k(X: T.Tensor((64,), "float32"), S: T.Tensor((64,), "float32"),
          D: T.Tensor((64,), "float32"), U: T.Tensor((64,), "float32"),
          B: T.Tensor((64,), "int32")):
        with T.Kernel(1, threads=64) as bx:
            tx = T.get_thread_binding()
            v = T.alloc_local([1], "float32")
            v[0] = X[tx]
            for off in [16, 8, 4, 2, 1]:
                v[0] = v[0] + T.shfl_xor(v[0], off)
            S[tx] = v[0]
            D[tx] = T.shfl_down(X[tx], 3)
            U[tx] = T.shfl_up(X[tx], 5)
            B[tx] = T.shfl_sync(tx * 10, 7)

    x = rng.integers(-8, 8, 64).astype(np.float32)  # small integers: sums are exact
    kernel = tilelang.compile(k, target="sim")
    s, d, u = (np.full(64, np.nan, np.float32) for _ in range(3))
    b = np.zeros(64, np.int32)
    kernel(x, s, d, u, b)
    lane = np.arange(64) % 32
    warp0 = np.arange(64) - lane
    np.testing.assert_array_equal(s, np.repeat(x.reshape(2, 32).sum(1), 32))
    np.testing.assert_array_equal(d, np.where(lane + 3 < 32, x[np.minimum(np.arange(64) + 3, 63)], x))
    np.testing.assert_array_equal(u, np.where(lane >= 5, x[np.maximum(np.arange(64) - 5, 0)], x))
    np.testing.assert_array_equal(b, (warp0 + 7) * 10)


def test_shuffles_generate_warp_instructions_and_refuse_the_cpu():
    @T.prim_func
    def k(X: T.Tensor((32,), "float32"), Y: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            tx = T.get_thread_binding()
            Y[tx] = T.shfl_xor(X[tx], 1) + T.shfl_up(X[tx], 2)

    cuda = tilelang.compile(k, target="sim").kernel.source("sm_80", False)
    assert "__shfl_xor_sync(0xffffffffu" in cuda and "__shfl_sync(0xffffffffu" in cuda
    with pytest.raises(TileLangError, match="thread_idx"):
        tilelang.compile(k, target="cpu")


def test_call_extern_as_expression_and_statement(rng):
    """A value call runs on the CPU backend (C's fmaxf) and in the simulator (which knows
    fmaxf); a device function the simulator does not know is named, and so is a statement
    call there."""

    @T.prim_func
    def k(X: T.Tensor((64,), "float32"), Y: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                Y[i] = T.call_extern("float32", "fmaxf", X[i], 0.25)

    x = rng.standard_normal(64).astype(np.float32)
    for target in ("cpu", "sim"):
        y = np.full(64, np.nan, np.float32)
        tilelang.compile(k, target=target)(x, y)
        np.testing.assert_array_equal(y, np.maximum(x, np.float32(0.25)), err_msg=target)

    @T.prim_func
    def unknown(X: T.Tensor((64,), "float32"), Y: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                Y[i] = T.call_extern("float32", "my_device_fn", X[i])

    src = tilelang.compile(unknown, target="sim").kernel.source("sm_80", False)
    assert "my_device_fn(" in src
    with pytest.raises(Exception, match="my_device_fn"):
        tilelang.compile(unknown, target="sim")(x, np.zeros(64, np.float32))

    @T.prim_func
    def effect(X: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            T.call_extern("void", "__nanosleep", 100)

    assert "__nanosleep(" in tilelang.compile(effect, target="sim").kernel.source("sm_80", False)
    with pytest.raises(TypeError, match="func_name"):
        T.call_extern("float32", 3)
