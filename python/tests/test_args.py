"""Calling compiled kernels: zero-copy arguments, allocated outputs, and clear errors for
wrong arguments (never a crash)."""

import numpy as np
import pytest

import tilelang_rs as tilelang
from tilelang_rs import language as T


@pytest.fixture(scope="module")
def axpy():
    import row_kernels

    return tilelang.compile(row_kernels.axpy, target="cpu")


def test_zero_copy_in_place(axpy, rng):
    x = rng.standard_normal((37, 4)).astype(np.float32)
    y = rng.standard_normal((37, 4)).astype(np.float32)
    y0 = y.copy()
    assert axpy(x, y, 2.0) is None
    np.testing.assert_allclose(y, y0 + 2 * x, rtol=1e-6)  # written in place: no copy
    # A view with unit strides that is a slice of a bigger array is fine too.
    big = rng.standard_normal((50, 4)).astype(np.float32)
    view = big[5:20]
    v0 = view.copy()
    axpy(x[:15], view, 1.0)
    np.testing.assert_allclose(big[5:20], v0 + x[:15], rtol=1e-6)


def test_wrong_arguments_raise(axpy, rng):
    x = rng.standard_normal((8, 4)).astype(np.float32)
    y = np.zeros((8, 4), np.float32)
    with pytest.raises(TypeError, match="takes 3 arguments"):
        axpy(x, y)
    with pytest.raises(TypeError, match="expected f32 elements, got f64"):
        axpy(x.astype(np.float64), y, 1.0)
    with pytest.raises(ValueError, match="not contiguous"):
        axpy(np.asfortranarray(rng.standard_normal((8, 4)).astype(np.float32)), y, 1.0)
    with pytest.raises(ValueError, match="not contiguous"):
        axpy(np.zeros((4, 8), np.float32).T, y, 1.0)
    with pytest.raises(ValueError, match=r"`N` is 8 from an earlier argument"):
        axpy(x, np.zeros((9, 4), np.float32), 1.0)
    with pytest.raises(ValueError, match=r"dimension 1 is 5, but the kernel expects"):
        axpy(np.zeros((8, 5), np.float32), y, 1.0)
    with pytest.raises(TypeError, match="expected a tensor"):
        axpy(1.0, y, 1.0)
    with pytest.raises(TypeError, match="expected a numpy array, a torch tensor or a number"):
        axpy(x, y, "two")
    ro = np.zeros((8, 4), np.float32)
    ro.setflags(write=False)
    with pytest.raises(ValueError, match="read-only"):
        axpy(x, ro, 1.0)


def test_outputs_are_allocated_with_symbolic_shapes(rng):
    M, N = T.symbolic("M"), T.symbolic("N")

    @T.prim_func
    def transpose_add(A: T.Tensor((M, N), "float32"), B: T.Tensor((N, M), "float32"),
                      C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, 8), T.ceildiv(N, 8), threads=64) as (bx, by):
            for i, j in T.Parallel(8, 8):
                if (bx * 8 + i < M) and (by * 8 + j < N):
                    C[bx * 8 + i, by * 8 + j] = A[bx * 8 + i, by * 8 + j] + B[by * 8 + j, bx * 8 + i]

    kernel = tilelang.compile(transpose_add, out_idx=[-1], target="cpu")
    for m, n in [(5, 7), (17, 3)]:
        a = rng.standard_normal((m, n)).astype(np.float32)
        b = rng.standard_normal((n, m)).astype(np.float32)
        c = kernel(a, b)
        assert c.shape == (m, n) and c.dtype == np.float32
        np.testing.assert_allclose(c, a + b.T, rtol=1e-6)
    with pytest.raises(TypeError, match=r"takes 2 arguments \(A, B\).*outputs \(C\)"):
        kernel(a)


def test_out_idx_is_checked():
    @T.prim_func
    def k(A: T.Tensor((4,), "float32"), s: T.int32):
        with T.Kernel(1, threads=32) as bx:
            T.clear(A)

    with pytest.raises(ValueError, match="out of range"):
        tilelang.compile(k, out_idx=[5], target="cpu")
    with pytest.raises(ValueError, match="scalar"):
        tilelang.compile(k, out_idx=[1], target="cpu")


def test_unknown_target_and_pass_config():
    @T.prim_func
    def k(A: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            T.clear(A)

    with pytest.raises(ValueError, match="unknown target"):
        tilelang.compile(k, target="tpu")
    with pytest.raises(ValueError, match="unknown pass config"):
        tilelang.compile(k, target="cpu", pass_configs={"no.such": 1})
    with pytest.warns(UserWarning, match="tl.disable_tma_lower"):
        tilelang.compile(k, target="cpu", pass_configs={"tl.disable_tma_lower": True})


def test_profiler_checks_and_times(rng):
    import elementwise

    kernel = tilelang.compile(elementwise.elementwise_add(32, 32, 128), out_idx=[2],
                              target="cpu")
    prof = kernel.get_profiler(dims={"M": 64, "N": 96})
    prof.assert_allclose(lambda a, b: a + b, rtol=1e-6, atol=1e-6)
    with pytest.raises(AssertionError, match="differ"):
        prof.assert_allclose(lambda a, b: a - b)
    ms = prof.do_bench(n_warmup=2, n_repeat=5)
    assert 0 < ms < 1000
    ref_ms = prof.do_bench(lambda a, b: a + b, n_warmup=2, n_repeat=5)
    assert 0 < ref_ms < 1000
    with pytest.raises(ValueError, match="symbolic size"):
        kernel.get_profiler().make_inputs()


def test_back_to_back_windows_count_their_calls():
    """``back_to_back`` calls go in each timed window: a kernel that adds 1 to its tensor
    counts its own runs (warm-up + reps x back_to_back), through the executable; a callable
    timed by the profiler counts its calls the same way (one more to size the run)."""

    @T.prim_func
    def inc(A: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                A[i] = A[i] + 1.0

    kernel = tilelang.compile(inc, target="cpu")
    a = np.zeros(64, np.float32)
    r = kernel.executable.bench((a,), 2, 3, False, 4)
    assert r["reps"] == 3
    np.testing.assert_array_equal(a, np.full(64, 2 + 3 * 4, np.float32))
    with pytest.raises(ValueError, match="back_to_back"):
        kernel.executable.bench((a,), 0, 1, False, 0)
    prof = kernel.get_profiler()
    calls = []
    ms = prof.do_bench(lambda x: calls.append(1), n_warmup=1, n_repeat=2, back_to_back=3)
    assert len(calls) == 1 + 1 + 2 * 3 and ms >= 0
    assert prof.do_bench(n_warmup=1, n_repeat=2, back_to_back=3) > 0
    with pytest.raises(ValueError, match="back_to_back"):
        prof.do_bench(back_to_back=0)


def test_host_stages_time_a_call_in_pieces(rng):
    """``Executable.host_stages``, the diagnostic behind python/bench/call_breakdown.py: each
    stage's host time per call; the launch's split (bind, pack, driver) only on CUDA."""
    import elementwise

    kernel = tilelang.compile(elementwise.elementwise_add(32, 32, 128), target="cpu")
    a, b, c = (rng.standard_normal((32, 32)).astype(np.float32) for _ in range(3))
    stages = kernel.executable.host_stages((a, b, c), 20)
    assert set(stages) == {"convert_us", "stream_us", "launch_us"}
    assert all(v >= 0 for v in stages.values())
    assert stages["launch_us"] > 0  # the kernel ran: c = a + b
    np.testing.assert_allclose(c, a + b, rtol=1e-6)


def test_numpy_dtypes_and_byte_order():
    """numpy arrays are read from their struct (dtype by type number, strides, flags); what
    that cannot describe (big-endian) takes the array-interface path and its error."""
    N = T.symbolic("N")

    @T.prim_func
    def inc(X: T.Tensor((N,), "int64"), Y: T.Tensor((N,), "int64")):
        with T.Kernel(T.ceildiv(N, 32), threads=32) as bx:
            for i in T.Parallel(32):
                if bx * 32 + i < N:
                    Y[bx * 32 + i] = X[bx * 32 + i] + 1

    k = tilelang.compile(inc, out_idx=[1], target="cpu")
    x = np.arange(100, dtype=np.int64)
    np.testing.assert_array_equal(k(x), x + 1)
    np.testing.assert_array_equal(k(x.astype(np.longlong)), x + 1)
    with pytest.raises(TypeError, match="expected i64 elements, got i32"):
        k(x.astype(np.int32))
    with pytest.raises(ValueError, match="big-endian"):
        k(x.astype(">i8"))
    with pytest.raises(ValueError, match="not contiguous"):
        k(np.arange(200, dtype=np.int64)[::2])


# A stand-in for torch (none in CI): `torch._C._to_dlpack` is numpy's `__dlpack__`, so the
# conversion reads a real DLPack capsule. In mode "dlpack" every attribute read but `dtype`
# raises, so a result proves the capsule was read; in mode "attrs" `_to_dlpack` raises and
# the attributes must be read instead. Run in a subprocess: the package keeps the torch it
# found for the life of the process.
_STANDIN_TORCH = r'''
import sys, types
import numpy as np
mode = sys.argv[1]
torch = types.ModuleType("torch")
C = types.ModuleType("torch._C")

class dtype:
    def __init__(self, name):
        self.name = name

torch.float32 = dtype("float32")

def attr(value):
    def read(self):
        if mode == "dlpack":
            raise AssertionError("read through DLPack, not attributes")
        return value(self)
    return property(read)

class Tensor:
    def __init__(self, a):
        self._a = a
    dtype = torch.float32
    shape = attr(lambda t: tuple(t._a.shape))
    is_cpu = attr(lambda t: True)
    is_cuda = attr(lambda t: False)
    data_ptr = attr(lambda t: lambda: t._a.ctypes.data)
    stride = attr(lambda t: lambda: tuple(s // 4 for s in t._a.strides))

    def new_empty(self, shape, dtype=None):
        return Tensor(np.empty(shape, np.float32))

def to_dlpack(t):
    if mode != "dlpack":
        raise RuntimeError("no DLPack here")
    return t._a.__dlpack__()

C._to_dlpack = to_dlpack
torch._C = C
torch.Tensor = Tensor
sys.modules["torch"] = torch

sys.path.insert(0, sys.argv[2])  # the tests' folder
import tilelang_rs as tilelang
from row_kernels import add, axpy

k = tilelang.compile(axpy, target="cpu")
rng = np.random.default_rng(0)
big = rng.standard_normal((40, 4)).astype(np.float32)
x = rng.standard_normal((37, 4)).astype(np.float32)
y0 = big[2:39].copy()
k(Tensor(x), Tensor(big[2:39]), 2.0)  # a view at an offset: the capsule's address is the view's
np.testing.assert_allclose(big[2:39], y0 + 2 * x, rtol=1e-6)
try:
    k(Tensor(x), Tensor(np.zeros((37, 8), np.float32)[:, ::2]), 1.0)
except ValueError as e:
    assert "contiguous" in str(e), e
else:
    raise AssertionError("a strided view was taken")
c = tilelang.compile(add, out_idx=[2], target="cpu")(Tensor(x), Tensor(x))  # new_empty
assert isinstance(c, Tensor) and c._a.shape == (37, 4)
np.testing.assert_allclose(c._a, 2 * x, rtol=1e-6)
print("ok")
'''


@pytest.mark.parametrize("mode", ["dlpack", "attrs"])
def test_torch_tensors_are_read_through_dlpack(mode, tmp_path):
    """torch tensors are described by one `_to_dlpack` capsule (address at a view's offset,
    shape, strides, device) where torch offers it; attributes otherwise."""
    import os
    import subprocess
    import sys

    if not hasattr(np.empty(1), "__dlpack__"):
        pytest.skip("numpy without __dlpack__")
    script = tmp_path / "standin_torch.py"  # the tracer reads kernels from their file
    script.write_text(_STANDIN_TORCH)
    here = os.path.dirname(os.path.abspath(__file__))
    r = subprocess.run([sys.executable, str(script), mode, here], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
