"""Compiling traced kernels and calling them: :func:`compile`, :func:`jit`, :class:`JITKernel`."""

from __future__ import annotations

import functools
import operator
import os
import warnings
from typing import Any, Callable, Sequence

from . import _native
from .language import PrimFunc

#: Pass configurations of TileLang that have no counterpart here: accepted and ignored (with
#: a warning naming them), so TileLang programs run unchanged.
_TILELANG_PASS_CONFIGS = {
    "tl.disable_tma_lower",
    "tl.disable_dynamic_tail_split",
    "tl.dynamic_alignment",
    "tl.disable_safe_memory_legalize",
    "tl.enable_fast_math",
    "tl.disable_fast_math",
    "tl.config_index_bitwidth",
    "tl.disable_vectorize_256",
    "tl.enable_aggressive_shared_memory_merge",
    "tir.disable_vectorize",
    "tir.disable_storage_rewrite",
}

_TARGETS = {
    "auto": "auto",
    "cuda": "cuda",
    "nvidia": "cuda",
    "hip": "hip",
    "rocm": "hip",
    "amd": "hip",
    "cpu": "cpu",
    "c": "cpu",
    "llvm": "cpu",
    "sim": "sim",
}


def _device(target: str) -> str:
    t = str(target).strip().lower()
    if t in _TARGETS:
        return _TARGETS[t]
    if t.startswith(("cuda:", "hip:", "sim:", "rocm:", "amd:")):
        return t
    raise ValueError(
        f"unknown target {target!r}; use 'auto', 'cuda' ('cuda:N'), 'hip' ('hip:N'), 'cpu' or "
        "'sim' ('sim:gfx950', 'sim:sm_90a')"
    )


def _warp_specialize(pass_configs: dict | None) -> bool | None:
    """``tl.disable_warp_specialized``: True keeps every warp loading and computing, False
    asks for a producer warpgroup on sm_90a (where the kernel can take one); absent, the
    compiler's default (not specialized unless ``TILELANG_WS=1``)."""
    v = (pass_configs or {}).get("tl.disable_warp_specialized")
    return None if v is None else not bool(v)


_UNSET = object()


def _persistent(pass_configs: dict | None) -> Any:
    """``tl.persistent`` (this compiler's own): an int asks for a persistent kernel on GPUs,
    that many blocks (0: one per multiprocessor) each looping over the grid's tiles (the
    producer warpgroup of a warp-specialized kernel then loads the next tile while the
    consumers finish this one); None, one block per tile. Absent: the kernel's own choice."""
    v = (pass_configs or {}).get("tl.persistent", _UNSET)
    if v is _UNSET or v is None:
        return v
    try:
        n = None if isinstance(v, bool) else operator.index(v)  # numpy ints too
    except TypeError:
        n = None
    if n is None or not 0 <= n < 2**32:
        raise ValueError(f"tl.persistent takes a block count from 0 (one per multiprocessor) "
                         f"to 2**32 - 1, or None, not {v!r}")
    return n


def _configure(kernel: Any, pass_configs: dict | None) -> Any:
    """The kernel with the pass configs' warp specialization and persistence applied."""
    ws = _warp_specialize(pass_configs)
    if ws is not None:
        kernel = kernel.with_warp_specialize(ws)
    blocks = _persistent(pass_configs)
    if blocks is not _UNSET:
        kernel = kernel.with_persistent(blocks)
    return kernel


def _options(pass_configs: dict | None) -> tuple[str | None, str | None]:
    dump, cache = None, None
    ignored = []
    for k, v in (pass_configs or {}).items():
        if k in ("dump_ir", "tl.dump_ir"):
            dump = str(v)
        elif k in ("cache_dir", "tl.cache_dir"):
            cache = str(v)
        elif k in ("tl.disable_warp_specialized", "tl.persistent"):
            pass
        elif k in _TILELANG_PASS_CONFIGS:
            ignored.append(k)
        else:
            raise ValueError(
                f"unknown pass config {k!r}; this compiler takes 'dump_ir' (a directory for the "
                "IR after every pass), 'cache_dir', 'tl.disable_warp_specialized' and "
                "'tl.persistent'"
            )
    if ignored:
        warnings.warn(
            "pass configs without effect in tilelang-rs (its passes decide these): "
            + ", ".join(sorted(ignored)),
            stacklevel=3,
        )
    return dump, cache


def _normalize_out_idx(out_idx: Any, n: int) -> list[int]:
    if out_idx is None:
        return []
    if isinstance(out_idx, int):
        out_idx = [out_idx]
    out = []
    for i in out_idx:
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise ValueError(f"out_idx {i} is out of range for a kernel of {n} parameters")
        out.append(j)
    return sorted(set(out))


class JITKernel(_native.Launcher):
    """A compiled kernel. Call it on numpy arrays (CPU kernels) or torch tensors (CPU or CUDA):
    arguments are passed by address, the parameters in ``out_idx`` are allocated with the
    inputs' library and returned, CUDA launches go to torch's current stream, and symbolic
    sizes take their values from the arguments.

    ``kernel(*args, stream=None)`` is the native launcher's own call (this class subclasses
    it): argument conversion, output allocation, the launch and the return value happen in
    one native call, with no Python frame in between."""

    def __new__(cls, func: PrimFunc, out_idx: Any = None, target: str = "auto",
                pass_configs: dict | None = None) -> "JITKernel":
        if not isinstance(func, PrimFunc):
            raise TypeError(f"expected a @T.prim_func, got {type(func).__name__}")
        outs = _normalize_out_idx(out_idx, len(func.params))
        for i in outs:
            if func.params[i].kind != "tensor":
                raise ValueError(f"out_idx names `{func.params[i].name}`, a scalar parameter")
        device = _native.resolve_device(_device(target))
        dump, cache = _options(pass_configs)
        kernel = _configure(func.kernel, pass_configs)
        exe = kernel.compile(device, cache, dump)
        self = super().__new__(cls, exe, outs)
        self.prim_func = func
        self.params = func.params
        self.out_idx = outs
        self.device = device
        self.kernel = kernel
        self._exe = exe
        self.target = device
        return self

    @property
    def executable(self) -> "_native.Executable":
        return self._exe

    def get_kernel_source(self, ptx: bool = False) -> str:
        """The generated source (C for the CPU, CUDA C++ or PTX, HIP C++)."""
        if not ptx and self._exe.source is not None:
            return self._exe.source
        target = _source_target(self.device)
        return self.kernel.source(target, ptx)

    def get_host_source(self) -> str:
        return self.get_kernel_source()

    def get_ir(self) -> str:
        """The tile IR."""
        return str(self.kernel)

    def compile_stats(self) -> dict:
        """Where compile time went (ms) and whether the binary came from the disk cache."""
        return self._exe.stats()

    def get_profiler(self, tensor_supply_type: Any = None, dims: dict | None = None):
        """A :class:`~tilelang_rs.profiler.Profiler` on generated inputs."""
        from .profiler import Profiler

        return Profiler(self, supply=tensor_supply_type, dims=dims)

    def __repr__(self) -> str:
        return f"<JITKernel {self.kernel.name} on {self.device}>"


def _source_target(device: str) -> str:
    if device.startswith("sim:"):
        return device[4:]
    if device == "sim":
        return "sm_80"
    if device.startswith("cuda"):
        return "sm_90a"
    if device.startswith("hip"):
        return "gfx942"
    return "cpu"


def compile(func: PrimFunc, out_idx: Any = None, target: str = "auto",
            target_host: Any = None, execution_backend: Any = None, verbose: bool = False,
            pass_configs: dict | None = None) -> JITKernel:
    """Compile a traced kernel for ``target`` (``auto``: a CUDA GPU when there is one, else an
    AMD GPU, else the CPU; ``cuda``, ``hip``, ``cpu``, or ``sim`` for the GPU simulator).
    ``out_idx`` lists the parameters (negative from the end) the call allocates and returns.
    Compiled binaries are cached on disk (``TILELANG_CACHE_DIR``)."""
    return JITKernel(func, out_idx=out_idx, target=target, pass_configs=pass_configs)


def precompile(func: PrimFunc, target: str = "sm_90a", pass_configs: dict | None = None) -> dict:
    """Compile ``func`` for a GPU architecture (``sm_80``, ``sm_90a``, ``gfx942``, ``gfx950``)
    without a GPU, into the disk cache that a later :func:`compile` on such a device finds
    (CUDA needs only NVRTC, AMD only clang). Returns where the time went in milliseconds
    (``lower_ms``, ``codegen_ms``, ``compile_ms``, ``total_ms``) and ``cache_hit``."""
    if not isinstance(func, PrimFunc):
        raise TypeError(f"expected a @T.prim_func, got {type(func).__name__}")
    _, cache = _options(pass_configs)
    kernel = _configure(func.kernel, pass_configs)
    return kernel.precompile(str(target), cache)


class _JitFactory:
    def __init__(self, fn: Callable, out_idx, target, pass_configs):
        self.fn = fn
        self.out_idx = out_idx
        self.target = target
        self.pass_configs = pass_configs
        self.cache: dict = {}
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> JITKernel:
        key = (args, tuple(sorted(kwargs.items())))
        try:
            hit = self.cache.get(key)
        except TypeError:  # unhashable arguments: no memo
            key, hit = None, None
        if hit is not None:
            return hit
        func = self.fn(*args, **kwargs)
        k = compile(func, out_idx=self.out_idx, target=self.target,
                    pass_configs=self.pass_configs)
        if key is not None:
            self.cache[key] = k
        return k

    def get_tir(self, *args: Any, **kwargs: Any) -> PrimFunc:
        return self.fn(*args, **kwargs)


def jit(func: Callable | PrimFunc | None = None, *, out_idx: Any = None,
        target: str = "auto", pass_configs: dict | None = None, **_unused: Any) -> Any:
    """``@tilelang.jit(out_idx=[-1])`` on a function returning a ``@T.prim_func``: calling it
    traces and compiles once per distinct arguments and returns the :class:`JITKernel`.
    On a ``PrimFunc`` itself, compiles it at once."""

    def wrap(f):
        if isinstance(f, PrimFunc):
            return compile(f, out_idx=out_idx, target=target, pass_configs=pass_configs)
        return _JitFactory(f, out_idx, target, pass_configs)

    if func is None:
        return wrap
    return wrap(func)


def cache_dir() -> str:
    """Where compiled kernels are cached."""
    return os.environ.get("TILELANG_CACHE_DIR", "(the user cache directory)/tilelang")
