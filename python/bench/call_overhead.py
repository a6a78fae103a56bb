"""Host time of a cached kernel's call from Python, without torch and without a GPU.

torch is not installed on the development machine, so the torch path is measured with a
stand-in: a module registered as ``torch`` in ``sys.modules`` whose ``Tensor`` exposes what
the native argument conversion reads of a torch tensor (``data_ptr()``, ``shape``,
``stride()``, ``dtype``, ``is_cuda``, ``is_cpu``, ``get_device()``, ``device``), backed by
numpy memory (CPU). Its attributes are slots and its methods Python functions, so each read
costs about what torch's C getters cost (a little more for the methods).

    python python/bench/call_overhead.py [--n 20000]

Prints microseconds per call (best of 7 runs) of the elementwise add (32x32 fp32, symbolic
M, N) on the CPU backend: numpy arrays and stand-in torch tensors, in place and allocating
the output, beside ``numpy.add(a, b, out=c)``.
"""

import argparse
import os
import sys
import time
import types

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))


def fake_torch() -> types.ModuleType:
    torch = types.ModuleType("torch")

    class dtype:  # noqa: N801 (torch's name)
        def __init__(self, name):
            self.name = name

        def __repr__(self):
            return f"torch.{self.name}"

    class device:  # noqa: N801
        def __init__(self, kind, index=None):
            self.type, self.index = kind, index

        def __repr__(self):
            return f"device(type='{self.type}')"

    names = {"float16": np.float16, "float32": np.float32, "float64": np.float64,
             "int32": np.int32, "int64": np.int64}
    np_of = {}
    for n, npt in names.items():
        d = dtype(n)
        setattr(torch, n, d)
        np_of[d] = npt
    cpu = device("cpu")

    class Tensor:
        __slots__ = ("_a", "shape", "dtype", "is_cuda", "is_cpu", "device", "_ptr", "_strides")

        def __init__(self, a, dt):
            self._a = a
            self.shape = tuple(a.shape)
            self.dtype = dt
            self.is_cuda = False
            self.is_cpu = True
            self.device = cpu
            self._ptr = a.ctypes.data
            self._strides = tuple(s // a.itemsize for s in a.strides)

        def data_ptr(self):
            return self._ptr

        def stride(self):
            return self._strides

        def get_device(self):
            return -1

        def new_empty(self, shape, dtype=None):
            dt = self.dtype if dtype is None else dtype
            return Tensor(np.empty(shape, np_of[dt]), dt)

    torch.Tensor = Tensor
    torch.device = device
    torch.from_numpy = lambda a: Tensor(a, {v: k for k, v in np_of.items()}[a.dtype.type])
    return torch


def per_call_us(fn, n):
    for _ in range(200):
        fn()
    best = float("inf")
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000)
    a = ap.parse_args()
    torch = fake_torch()
    sys.modules["torch"] = torch

    import elementwise

    import tilelang_rs as tilelang

    inplace = tilelang.compile(elementwise.elementwise_add(), target="cpu")
    alloc = tilelang.compile(elementwise.elementwise_add(), out_idx=[2], target="cpu")
    x, y, z = (np.random.rand(32, 32).astype(np.float32) for _ in range(3))
    tx, ty, tz = (torch.from_numpy(v) for v in (x, y, z))
    inplace(tx, ty, tz)
    np.testing.assert_allclose(z, x + y)
    rows = [
        ("numpy.add(a, b, out=c)", lambda: np.add(x, y, out=z)),
        ("ours, numpy, in place", lambda: inplace(x, y, z)),
        ("ours, numpy, allocating", lambda: alloc(x, y)),
        ("ours, stand-in torch, in place", lambda: inplace(tx, ty, tz)),
        ("ours, stand-in torch, allocating", lambda: alloc(tx, ty)),
    ]
    for name, fn in rows:
        print(f"{name:34} {per_call_us(fn, a.n):6.2f} us", flush=True)


if __name__ == "__main__":
    main()
