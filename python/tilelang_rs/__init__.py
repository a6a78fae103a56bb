"""tilelang-rs: TileLang-style tile kernels compiled by the tilelang Rust compiler.

Swap it in for TileLang with one import line::

    import tilelang_rs as tilelang
    from tilelang_rs import language as T

Kernels are ``@T.prim_func`` functions (traced into tile IR when decorated);
:func:`compile` (or ``@tilelang.jit``) builds them for a CUDA GPU, an AMD GPU, the CPU or the
GPU simulator, and the result is called on numpy arrays or torch tensors.
"""

from . import _native
from ._native import TileLangError
from . import language
from .jit import JITKernel, compile, jit, precompile
from .profiler import Profiler
from .autotuner import autotune
from . import layout
from .distributed import on_torch_symm, sim_ranks

__version__ = _native.__version__

__all__ = [
    "TileLangError",
    "language",
    "compile",
    "jit",
    "precompile",
    "JITKernel",
    "Profiler",
    "autotune",
    "layout",
    "on_torch_symm",
    "sim_ranks",
    "__version__",
]
