"""Timing and checking compiled kernels on generated inputs (TileLang's ``kernel.get_profiler()``).

The kernel is timed by the runtime's profiler: on a GPU with events around each launch and L2
flushed before each timed run, on the CPU with the host clock; the median is reported.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

from ._native import Expr


def _is_gpu(device: str) -> bool:
    return device.startswith(("cuda", "hip"))


def _torch_dtype(torch, name: str):
    return getattr(torch, {"float8_e4m3": "float8_e4m3fn", "bool": "bool"}.get(name, name))


def _numpy_dtype(np, name: str):
    if name in ("bfloat16", "float8_e4m3", "float8_e5m2"):
        try:
            import ml_dtypes
        except ImportError:
            raise TypeError(
                f"numpy has no {name}: install ml_dtypes, or run on a GPU with torch"
            ) from None
        return {"bfloat16": ml_dtypes.bfloat16, "float8_e4m3": ml_dtypes.float8_e4m3fn,
                "float8_e5m2": ml_dtypes.float8_e5m2}[name]
    return np.dtype(name)


class Profiler:
    """Generates inputs for a :class:`~tilelang_rs.JITKernel`, runs, checks and times it."""

    def __init__(self, kernel, supply: Any = None, dims: dict | None = None, seed: int = 0):
        self.kernel = kernel
        self.supply = str(supply or "randn").lower().split(".")[-1]
        self.dims = dict(dims or {})
        self.seed = seed
        self.device = kernel.device

    # -- inputs --

    def _shape(self, shape: Sequence) -> tuple:
        out = []
        for s in shape:
            if isinstance(s, Expr):
                name = s.name
                if name is None or name not in self.dims:
                    raise ValueError(
                        f"the profiler needs a value for the symbolic size `{s}`: "
                        f"kernel.get_profiler(dims={{'{name or s}': ...}})"
                    )
                out.append(int(self.dims[name]))
            else:
                out.append(int(s))
        return tuple(out)

    def make_inputs(self) -> list:
        """Random arguments for every parameter except the outputs (torch tensors on a GPU,
        numpy arrays on the CPU)."""
        ins = []
        gpu = _is_gpu(self.device)
        if gpu:
            import torch

            g = torch.Generator(device="cuda").manual_seed(self.seed)
        else:
            import numpy as np

            rng = np.random.default_rng(self.seed)
        for i, p in enumerate(self.kernel.params):
            if i in self.kernel.out_idx:
                continue
            if p.kind == "scalar":
                ins.append(1 if "int" in p.dtype else 1.0)
                continue
            shape = self._shape(p.shape)
            if gpu:
                dt = _torch_dtype(torch, p.dtype)
                dev = self.device.replace("hip", "cuda")
                if self.supply in ("zeros", "zero"):
                    t = torch.zeros(shape, dtype=dt, device=dev)
                elif self.supply in ("ones", "one"):
                    t = torch.ones(shape, dtype=dt, device=dev)
                elif "int" in p.dtype or self.supply == "integer":
                    t = torch.randint(-4, 5, shape, generator=g, device=dev).to(dt)
                elif self.supply in ("rand", "uniform"):
                    t = torch.rand(shape, generator=g, device=dev).to(dt)
                else:
                    t = torch.randn(shape, generator=g, device=dev).to(dt)
            else:
                dt = _numpy_dtype(np, p.dtype)
                if self.supply in ("zeros", "zero"):
                    t = np.zeros(shape, dtype=dt)
                elif self.supply in ("ones", "one"):
                    t = np.ones(shape, dtype=dt)
                elif "int" in p.dtype or self.supply == "integer":
                    t = rng.integers(-4, 5, size=shape).astype(dt)
                elif self.supply in ("rand", "uniform"):
                    t = rng.random(shape, dtype=np.float32).astype(dt)
                else:
                    t = rng.standard_normal(shape, dtype=np.float32).astype(dt)
            ins.append(t)
        return ins

    def _all_args(self, ins: list) -> tuple[list, list]:
        """Every argument in parameter order (outputs allocated by one run), and the outputs."""
        outs = self.kernel(*ins)
        if not self.kernel.out_idx:
            return list(ins), []
        outs = [outs] if len(self.kernel.out_idx) == 1 else list(outs)
        args, it_in, it_out = [], iter(ins), iter(outs)
        for i in range(len(self.kernel.params)):
            args.append(next(it_out) if i in self.kernel.out_idx else next(it_in))
        return args, outs

    # -- running and checking --

    def run_once(self, func: Callable | None = None) -> Any:
        ins = self.make_inputs()
        return (func or self.kernel)(*ins)

    def assert_allclose(self, reference_program: Callable, rtol: float = 1e-2,
                        atol: float = 1e-2, max_mismatched_ratio: float = 0.01) -> None:
        """Run the kernel and ``reference_program`` on the same inputs and compare every
        output (more than ``max_mismatched_ratio`` of elements outside ``atol + rtol·|ref|``
        fails, naming the worst)."""
        import numpy as np

        ins = self.make_inputs()
        _, outs = self._all_args(ins)
        ref = reference_program(*ins)
        refs = list(ref) if isinstance(ref, (tuple, list)) else [ref]
        if len(refs) != len(outs):
            raise AssertionError(
                f"the reference returned {len(refs)} values for {len(outs)} outputs"
            )
        for k, (o, r) in enumerate(zip(outs, refs)):
            o64 = _to_numpy(o).astype(np.float64)
            r64 = _to_numpy(r).astype(np.float64)
            if o64.shape != r64.shape:
                raise AssertionError(f"output {k}: shape {o64.shape}, reference {r64.shape}")
            bad = ~(np.abs(o64 - r64) <= atol + rtol * np.abs(r64))
            ratio = float(bad.mean()) if bad.size else 0.0
            if ratio > max_mismatched_ratio:
                i = np.unravel_index(int(np.argmax(np.abs(o64 - r64))), o64.shape)
                raise AssertionError(
                    f"output {k}: {ratio:.2%} of elements differ (allowed "
                    f"{max_mismatched_ratio:.2%}); worst at {tuple(int(x) for x in i)}: "
                    f"{o64[i]} vs reference {r64[i]}"
                )

    def do_bench(self, func: Callable | None = None, warmup: int = 25, rep: int = 100,
                 n_warmup: int | None = None, n_repeat: int | None = None,
                 input_tensors: list | None = None, return_mode: str = "median",
                 back_to_back: int = 1, **_ignored: Any) -> float:
        """Median milliseconds of the kernel (``func=None``) or of ``func`` on the same
        inputs. ``warmup``/``rep`` are time budgets in ms (as in TileLang), ``n_warmup``/
        ``n_repeat`` counts. ``back_to_back`` calls go in each timed window (the cache
        flushed once before it) and the time is per call: 1 times a cold call, more a call
        in a stream of calls, as a model's layers run."""
        if back_to_back < 1:
            raise ValueError(f"back_to_back must be at least 1, not {back_to_back}")
        ins = list(input_tensors) if input_tensors is not None else self.make_inputs()
        if func is None or func is self.kernel:
            args, _ = self._all_args(ins)
            one = self.kernel.executable.bench(tuple(args), 1, 3, False)["median_ms"]
            nw = n_warmup if n_warmup is not None else _count(warmup, one)
            nr = n_repeat if n_repeat is not None else _count(rep, one)
            r = self.kernel.executable.bench(tuple(args), nw, nr, True, back_to_back)
            return float(r[return_mode + "_ms"] if return_mode + "_ms" in r else r["median_ms"])
        return _bench_callable(func, ins, self.device, warmup, rep, n_warmup, n_repeat,
                               back_to_back)


def _count(budget_ms: float, one_ms: float) -> int:
    return max(3, min(1000, int(budget_ms / max(one_ms, 1e-4))))


def _to_numpy(x: Any):
    import numpy as np

    if hasattr(x, "detach"):  # torch
        return x.detach().float().cpu().numpy()
    a = np.asarray(x)
    if a.dtype.kind == "V" or a.dtype.name in ("bfloat16",) or "float8" in a.dtype.name:
        return a.astype(np.float32)
    return a


def _bench_callable(func, ins, device, warmup, rep, n_warmup, n_repeat, back_to_back=1) -> float:
    if _is_gpu(device):
        import torch

        flush = torch.empty(int(256e6) // 4, dtype=torch.int32, device="cuda")
        func(*ins)
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        func(*ins)
        e.record()
        torch.cuda.synchronize()
        one = s.elapsed_time(e)
        nw = n_warmup if n_warmup is not None else _count(warmup, one)
        nr = n_repeat if n_repeat is not None else _count(rep, one)
        for _ in range(nw):
            func(*ins)
        times = []
        for _ in range(nr):
            flush.zero_()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(back_to_back):
                func(*ins)
            e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e) / back_to_back)
        times.sort()
        return times[len(times) // 2]
    t0 = time.perf_counter()
    func(*ins)
    one = (time.perf_counter() - t0) * 1e3
    nw = n_warmup if n_warmup is not None else _count(warmup, one)
    nr = n_repeat if n_repeat is not None else _count(rep, one)
    for _ in range(nw):
        func(*ins)
    times = []
    for _ in range(nr):
        t0 = time.perf_counter()
        for _ in range(back_to_back):
            func(*ins)
        times.append((time.perf_counter() - t0) * 1e3 / back_to_back)
    times.sort()
    return times[len(times) // 2]
