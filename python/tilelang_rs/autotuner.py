"""``@tilelang.autotune(configs=...)``: pick the fastest configuration of a kernel factory, on
the Rust autotuner (candidates compiled in parallel where the target allows, each checked on
its first run, timed on the device; a progress bar while compiling; the winner cached on disk
per kernel, argument shapes and device — ``TILELANG_AUTOTUNE=0`` turns tuning off).

    @tilelang.autotune(configs=[{"block_M": 64}, {"block_M": 128}], ref_prog=torch_ref)
    @tilelang.jit(out_idx=[-1])
    def matmul(M, N, K, block_M=128): ...

    kernel = matmul(1024, 1024, 1024)   # the best configuration's JITKernel
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Iterable

from . import _native
from .jit import JITKernel, _JitFactory, _device, _normalize_out_idx, compile
from .language import PrimFunc
from .profiler import Profiler, _to_numpy


def _label(config: dict) -> str:
    return ", ".join(f"{k}={config[k]!r}" for k in sorted(config))


class _Args:
    """The shape a Profiler needs (params, out_idx, device) for generating inputs."""

    def __init__(self, func: PrimFunc, out_idx: list, device: str):
        self.params = func.params
        self.out_idx = out_idx
        self.device = device


class AutoTuner:
    def __init__(self, factory: _JitFactory, configs: Any, warmup: int, rep: int,
                 ref_prog: Callable | None, rtol: float, atol: float, supply_type: Any,
                 skip_check: bool, force: bool, progress: bool, dims: dict | None):
        self.factory = factory
        self.configs = configs
        self.warmup = warmup
        self.rep = rep
        self.ref_prog = ref_prog
        self.rtol, self.atol = rtol, atol
        self.supply_type = supply_type
        self.skip_check = skip_check
        self.force = force
        self.progress = progress
        self.dims = dims
        self.memo: dict = {}
        functools.update_wrapper(self, factory.fn)

    def _configs(self, args, kwargs) -> list[dict]:
        c = self.configs(*args, **kwargs) if callable(self.configs) else self.configs
        c = list(c)
        if not c:
            raise ValueError("autotune needs at least one configuration")
        return [dict(x) for x in c]

    def __call__(self, *args: Any, **kwargs: Any) -> JITKernel:
        key = (args, tuple(sorted(kwargs.items())))
        try:
            hit = self.memo.get(key)
        except TypeError:
            key, hit = None, None
        if hit is not None:
            return hit
        f = self.factory
        configs = self._configs(args, kwargs)
        funcs = [f.fn(*args, **{**kwargs, **c}) for c in configs]
        device = _native.resolve_device(_device(f.target))
        out_idx = _normalize_out_idx(f.out_idx, len(funcs[0].params))
        gen = Profiler(_Args(funcs[0], out_idx, device), supply=self.supply_type, dims=self.dims)
        ins = gen.make_inputs()
        ref = None
        if self.ref_prog is not None and not self.skip_check:
            r = self.ref_prog(*ins)
            ref = [_to_numpy(x) for x in (r if isinstance(r, (tuple, list)) else [r])]
        # Every parameter in order, outputs allocated once and reused by every candidate.
        first = compile(funcs[0], out_idx=out_idx, target=f.target, pass_configs=f.pass_configs)
        outs = first(*ins)
        outs = [] if not out_idx else ([outs] if len(out_idx) == 1 else list(outs))
        full, it_in, it_out = [], iter(ins), iter(outs)
        for i in range(len(funcs[0].params)):
            full.append(next(it_out) if i in out_idx else next(it_in))

        def check():
            if ref is None:
                return
            import numpy as np

            for k, (o, r) in enumerate(zip(outs, ref)):
                o64 = _to_numpy(o).astype(np.float64)
                bad = ~(np.abs(o64 - r) <= self.atol + self.rtol * np.abs(r))
                if bad.mean() > 0.01:
                    raise AssertionError(f"output {k}: {bad.mean():.2%} of elements differ")

        name = f"{f.fn.__module__}.{f.fn.__qualname__}"
        best, table, cached = _native.tune(
            name, [fn.kernel for fn in funcs], [_label(c) for c in configs], device,
            tuple(full), check, self.warmup, self.rep, self.progress, self.force,
        )
        kernel = compile(funcs[best], out_idx=out_idx, target=f.target,
                         pass_configs=f.pass_configs)
        kernel.config = configs[best]
        kernel.tune_table = table
        kernel.tune_cached = cached
        if key is not None:
            self.memo[key] = kernel
        return kernel


def autotune(configs: Iterable[dict] | Callable[..., Iterable[dict]] | None = None,
             warmup: int = 5, rep: int = 30, timeout: Any = None,
             ref_prog: Callable | None = None, rtol: float = 1e-2, atol: float = 1e-2,
             supply_type: Any = None, skip_check: bool = False, force: bool = False,
             progress: bool = True, dims: dict | None = None, **_unused: Any):
    """Tune a ``@tilelang.jit`` factory over ``configs`` (dicts of keyword arguments, or a
    function of the factory's arguments returning them). ``warmup``/``rep`` are launch
    counts; ``ref_prog`` checks each candidate's outputs; ``dims`` sizes symbolic
    dimensions of the generated inputs."""
    if configs is None:
        raise ValueError("autotune(configs=[...]) needs configurations")

    def wrap(factory):
        if not isinstance(factory, _JitFactory):
            raise TypeError("@autotune goes above @tilelang.jit(...) on a kernel factory")
        return AutoTuner(factory, configs, warmup, rep, ref_prog, rtol, atol, supply_type,
                         skip_check, force, progress, dims)

    return wrap
