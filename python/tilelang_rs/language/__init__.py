"""The kernel language, TileLang's ``T.*``: ``from tilelang_rs import language as T``.

Kernels are Python functions decorated with :func:`prim_func`; their bodies are traced (see
``tilelang_rs._trace``) into the tilelang compiler's tile IR. The functions here are what the
body calls: each records one tile operation at the caller's line, or folds at trace time when
its arguments are plain Python numbers (``T.ceildiv(1024, 128)`` is ``8``).
"""

from __future__ import annotations

import builtins as _b
import inspect
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence, Union

from .. import _native, _trace
from .._native import Buffer as TileBuffer, Expr, Region, TileLangError
from .._trace import KernelSpec, LoopSpec

__all__ = [
    # types
    "Tensor", "Buffer", "StridedTensor", "TileBuffer", "Expr", "Region", "DType", "PrimFunc",
    "prim_func", "macro", "symbolic", "dynamic", "dyn",
    # dtypes
    "float16", "bfloat16", "float32", "float64", "float8_e4m3", "float8_e4m3fn", "float8_e5m2",
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "boolean",
    # launch, memory, ops
    "Kernel", "alloc_shared", "alloc_fragment", "alloc_local", "alloc_var", "print",
    "copy", "gemm", "wait_wgmma", "GemmWarpPolicy", "clear", "fill", "reduce_max", "reduce_sum",
    "reduce_min", "reduce_abssum", "reduce_absmax", "atomic_add", "atomic_max", "atomic_min", "cumsum",
    # loops
    "Pipelined", "Parallel", "serial", "unroll", "grid",
    # math
    "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "tanh", "sigmoid", "abs", "floor", "ceil",
    "erf", "sin", "cos", "max", "min", "pow", "if_then_else", "select", "infinity", "ceildiv",
    "floordiv", "floormod", "truncdiv", "truncmod", "cast", "Cast", "max_value", "min_value",
    # annotations
    "use_swizzle", "annotate_layout",
    # thread-level escape hatches
    "get_thread_binding", "shfl_xor", "shfl_down", "shfl_up", "shfl_sync", "call_extern",
]

Number = Union[int, float, bool]
Value = Union[Expr, int, float, bool]
Shape = Sequence[Union[int, Expr]]


# ----- dtypes -----


class DType(str):
    """A dtype name that is also a cast: ``T.float32(x)``."""

    def __call__(self, value: Value = 0) -> Value:
        if isinstance(value, Expr):
            return _native.cast(value, self)
        return _native.constant(_b.float(value), self)


float16 = DType("float16")
bfloat16 = DType("bfloat16")
float32 = DType("float32")
float64 = DType("float64")
float8_e4m3 = DType("float8_e4m3")
float8_e4m3fn = DType("float8_e4m3")
float8_e5m2 = DType("float8_e5m2")
int8 = DType("int8")
int16 = DType("int16")
int32 = DType("int32")
int64 = DType("int64")
uint8 = DType("uint8")
uint16 = DType("uint16")
uint32 = DType("uint32")
uint64 = DType("uint64")
boolean = DType("bool")
# TileLang spells these too.
float = float32  # noqa: A001  (T.float is float32, as in TileLang)
half = float16
bool = boolean  # noqa: A001


def _dtype(d: Any) -> str:
    s = str(d)
    _native.canonical_dtype(s)  # a TypeError naming the known dtypes, for unknown ones
    return s


# ----- parameters and symbolic sizes -----


@dataclass(frozen=True)
class TensorSpec:
    """A parameter annotation: a global tensor of ``shape`` and ``dtype`` (row-major,
    contiguous)."""

    shape: tuple
    dtype: str
    symmetric: bool = False


def _shape(shape: Any) -> tuple:
    if isinstance(shape, (int, Expr)):
        return (shape,)
    return tuple(shape)


class _TensorType:
    """``T.Tensor((M, K), dtype)`` or ``T.Tensor[(M, K), dtype]``."""

    def __call__(self, shape: Any, dtype: Any = "float32") -> TensorSpec:
        return TensorSpec(_shape(shape), _dtype(dtype))

    def __getitem__(self, key: Any) -> TensorSpec:
        if isinstance(key, tuple) and len(key) == 2 and not isinstance(key[1], (int, Expr)):
            return self(key[0], key[1])
        return self(key)


Tensor = _TensorType()
Buffer = Tensor  # TileLang's older name for the same annotation


class _SymmTensorType(_TensorType):
    """``T.SymmTensor((R, N), dtype)``: a tensor in the symmetric heap of a multi-rank kernel.
    Every rank has one, allocated alike; peers read and write it by rank (``T.put_block``,
    ``T.st(..., dst_pe=p)``, ``T.signal``)."""

    def __call__(self, shape: Any, dtype: Any = "float32") -> TensorSpec:
        return TensorSpec(_shape(shape), _dtype(dtype), symmetric=True)


SymmTensor = _SymmTensorType()


def StridedTensor(shape: Any, strides: Any, dtype: Any = "float32") -> TensorSpec:
    """``T.StridedTensor(shape, strides, dtype)``: accepted when the strides are the
    row-major contiguous ones (kernels here take contiguous tensors)."""
    shape = _shape(shape)
    strides = _shape(strides)
    want, acc = [], 1
    for d in reversed(shape):
        want.append(acc)
        acc = acc * d
    want.reverse()
    if len(strides) != len(shape) or any(
            not (isinstance(s, int) and isinstance(w, int) and s == w)
            and str(s) != str(w) for s, w in zip(strides, want)):
        raise TypeError(
            f"T.StridedTensor with strides {strides} for shape {shape}: only row-major "
            f"contiguous strides ({tuple(want)}) are supported; pass contiguous tensors")
    return TensorSpec(shape, _dtype(dtype))


def symbolic(name: str, dtype: str = "int32") -> Expr:
    """A symbolic size: its value comes from the shapes of the arguments at each call, with
    no recompile."""
    return _native.var(name, _dtype(dtype))


dynamic = symbolic


class _Dyn:
    """``T.dyn["m"]``: a symbolic size (as ``T.symbolic("m")``)."""

    def __getitem__(self, name: str) -> Expr:
        return symbolic(name)


dyn = _Dyn()


# ----- kernels -----


class PrimFunc:
    """A traced kernel: the native tile IR of the decorated function, and its parameters."""

    def __init__(self, fn: Callable, outer: dict | None = None):
        self.fn = fn
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self.kernel, self.params = _trace.trace(fn, outer)

    def script(self) -> str:
        """The tile IR, printed."""
        return str(self.kernel)

    def __str__(self) -> str:
        return self.script()

    def __repr__(self) -> str:
        return f"<PrimFunc {self.__name__}({', '.join(p.name for p in self.params)})>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            f"`{self.__name__}` is a kernel definition: compile it first, "
            "`kernel = tilelang.compile(func, out_idx=[...])`, then call the kernel"
        )


def prim_func(fn: Callable) -> PrimFunc:
    """Trace a kernel function (parameters annotated with ``T.Tensor(shape, dtype)`` or a
    dtype for scalars; the body opens one ``with T.Kernel(...)``). Errors are raised here, as
    :class:`TileLangError` naming the line."""
    return PrimFunc(fn, _caller_locals())


def _caller_locals() -> dict:
    """The locals of the function that applied a decorator (a snapshot), as TileLang's
    parser reads them: names a kernel uses only in annotations are not in its closure."""
    f = inspect.currentframe()
    try:
        caller = f.f_back.f_back if f is not None and f.f_back is not None else None
        return dict(caller.f_locals) if caller is not None else {}
    finally:
        del f


class _Macro:
    def __init__(self, fn: Callable, scope: dict | None = None):
        self.scope = scope
        self.fn = fn
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not _trace.tracing():
            raise TileLangError(
                f"error[invalid-argument]: macro `{self.__name__}` is called outside a kernel\n"
                "  help: call macros from a @T.prim_func body"
            )
        return _trace.run_macro(self.fn, args, kwargs, self.scope)


def macro(fn: Callable) -> _Macro:
    """A helper whose body is traced inline where it is called from a kernel (so it may hold
    T.* loops and ``if``s on symbolic values, like the kernel's own body)."""
    return _Macro(fn, _caller_locals())


def Kernel(*grid: Value, threads: Union[int, Sequence[int]] = 128, prelude: Any = None,
           is_cpu: Any = False) -> KernelSpec:
    """``with T.Kernel(gx, gy, threads=128) as (bx, by):`` — the launch: 1 to 3 grid extents
    (x first) and the threads of a block."""
    if isinstance(threads, (list, tuple)):
        n = 1
        for t in threads:
            n *= int(t)
        threads = n
    if isinstance(threads, Expr) or not isinstance(threads, int) or threads <= 0:
        raise TypeError(f"threads must be a positive Python int, got {threads!r}")
    if prelude is not None:
        raise TypeError("T.Kernel(prelude=...) is not supported: there is no raw CUDA prelude")
    return KernelSpec(grid=list(grid), threads=threads)


# ----- memory -----


def _alloc(scope: str, shape: Any, dtype: Any) -> TileBuffer:
    t = _trace.current()
    return t.b.alloc(scope, list(_shape(shape)), _dtype(dtype), t.take_name())


def alloc_shared(shape: Shape, dtype: Any, scope: str = "shared.dyn") -> TileBuffer:
    """A tile in shared memory, visible to the block's threads."""
    return _alloc("shared", shape, dtype)


def alloc_fragment(shape: Shape, dtype: Any, scope: str = "local.fragment") -> TileBuffer:
    """A tile held in registers, spread over the block's threads."""
    return _alloc("fragment", shape, dtype)


def alloc_local(shape: Shape, dtype: Any, scope: str = "local") -> TileBuffer:
    """A per-thread array."""
    return _alloc("local", shape, dtype)


def alloc_var(dtype: Any, init: Any = None) -> TileBuffer:
    """A per-thread scalar: read and write it as ``x[0]``."""
    t = _trace.current()
    b = t.b.alloc("var", [1], _dtype(dtype), t.take_name())
    if init is not None:
        t.b.store(b, [0], init)
    return b


# ----- tile operations -----

TileArg = Union[TileBuffer, Region, Expr]


def copy(src: TileArg, dst: TileArg, coalesced_width: Any = None, disable_tma: bool = False,
         **_ignored: Any) -> None:
    """Copy a tile between any two memories (``A[by * bm, k * bk]`` is a tile start whose
    extents come from the other operand); element types are converted, tails past a tensor's
    edge are predicated."""
    _trace.current().b.copy(src, dst)


class GemmWarpPolicy:
    """How a gemm's output tile is split over warps."""

    Square = "square"
    FullRow = "full_row"
    FullCol = "full_col"
    Auto = "auto"


def gemm(A: TileArg, B: TileArg, C: TileArg, transpose_A: bool = False,
         transpose_B: bool = False, policy: str | None = None, clear_accum: bool = False,
         k_pack: int = 1, wg_wait: int = 0, overlap: bool = False, **_ignored: Any) -> None:
    """``C += A · B`` on tiles (A is ``[M, K]``, ``[K, M]`` with ``transpose_A``; B is
    ``[K, N]``, ``[N, K]`` with ``transpose_B``). ``policy`` fixes the warp partition
    (default: the compiler's choice). ``k_pack`` is accepted for TileLang compatibility and
    has no effect (the AMD lowering chooses its own K interleaving). ``wg_wait`` (Hopper's
    wgmma): leave that many asynchronous groups pending at the end (``-1``: do not wait);
    ``T.wait_wgmma(n)`` retires them before C is read. Elsewhere gemms are synchronous.
    ``overlap`` (an extension of ours, the Rust ``GemmHandle::overlap``): where this gemm is
    the only consumer of a pipelined loop of 3 or more stages on wgmma, each iteration's wgmma
    keeps running while the next one waits for its tiles."""
    if not isinstance(k_pack, int) or k_pack < 1:
        raise TypeError(f"k_pack must be a positive int, got {k_pack!r}")
    if not isinstance(wg_wait, int) or isinstance(wg_wait, _b.bool):
        raise TypeError(f"wg_wait must be an int, got {wg_wait!r}")
    _trace.current().b.gemm(A, B, C, _b.bool(transpose_A), _b.bool(transpose_B),
                            policy or GemmWarpPolicy.Auto, _b.bool(clear_accum), wg_wait,
                            _b.bool(overlap))


def wait_wgmma(n: int = 0, pinned: bool = False) -> None:
    """Wait until at most ``n`` asynchronous wgmma groups are pending (``wgmma.wait_group``):
    the accumulators of gemms issued with ``wg_wait`` before the newest ``n`` are readable
    after it. Does nothing where gemms are synchronous.

    ``pinned=True`` (not in TileLang) keeps the wait where it is written, below work meant to
    run while the groups are on the tensor cores (attention's softmax of step j beside P·V of
    step j − 1); otherwise ptxas may raise the wait above that work."""
    if not isinstance(n, int) or isinstance(n, _b.bool) or n < 0:
        raise TypeError(f"wait_wgmma takes a count ≥ 0, got {n!r}")
    if not isinstance(pinned, _b.bool):
        raise TypeError(f"wait_wgmma's pinned is True or False, got {pinned!r}")
    _trace.current().b.wait_wgmma(n, pinned)


def clear(buffer: TileArg) -> None:
    """Set every element of a tile to zero."""
    _trace.current().b.clear(buffer)


def fill(buffer: TileArg, value: Value) -> None:
    """Set every element of a tile to ``value``."""
    _trace.current().b.fill(buffer, value)


def _reduce(kind: str, buffer: TileArg, out: TileArg, dim: int, clear: bool) -> None:
    _trace.current().b.reduce(kind, buffer, out, int(dim), _b.bool(clear))


def reduce_max(buffer: TileArg, out: TileArg, dim: int = -1, clear: bool = True) -> None:
    """``out = max(buffer, dim)``; ``clear=False`` combines with out's current values."""
    _reduce("max", buffer, out, dim, clear)


def reduce_min(buffer: TileArg, out: TileArg, dim: int = -1, clear: bool = True) -> None:
    _reduce("min", buffer, out, dim, clear)


def reduce_sum(buffer: TileArg, out: TileArg, dim: int = -1, clear: bool = True) -> None:
    _reduce("sum", buffer, out, dim, clear)


def reduce_abssum(buffer: TileArg, out: TileArg, dim: int = -1, clear: bool = True) -> None:
    _reduce("abssum", buffer, out, dim, clear)


def reduce_absmax(buffer: TileArg, out: TileArg, dim: int = -1, clear: bool = True) -> None:
    _reduce("absmax", buffer, out, dim, clear)


def _atomic(kind: str, dst: TileArg, value: Any) -> None:
    b = _trace.current().b
    is_tile = isinstance(value, (TileBuffer, Region))
    if isinstance(dst, Expr) and dst.as_load() is not None and not is_tile:
        # One element, e.g. ``T.atomic_add(C[i, j], acc[i, j])`` in a parallel loop.
        b.atomic_at(kind, dst, value)
        return
    if not is_tile and not (isinstance(value, Expr) and value.as_load() is not None):
        raise TypeError(f"T.atomic_{kind} takes a tile (a buffer or a region) into a tile, or a "
                        "value into one element (`C[i, j]`)")
    b.atomic(kind, dst, value)


def print(obj: Any, msg: str = "") -> None:  # noqa: A001
    """Debug output: every thread that runs it prints ``msg`` and the value (on GPUs with its
    block and thread) — inside ``T.Parallel``, once per element. Values and buffer elements
    only: print a buffer element by element in a loop. CPU backend, simulator and NVIDIA
    GPUs; AMD targets refuse it."""
    if isinstance(obj, (TileBuffer, Region)):
        raise TypeError("T.print prints a value (an expression or one element such as A[i, j]); "
                        "print a buffer's elements in a T.serial or T.Parallel loop")
    _trace.current().b.print_value(str(msg), obj)


def atomic_add(dst: TileArg, value: Any) -> None:
    """``dst += value`` atomically: a tile into a tile (element-wise; dst in global or shared
    memory), or a value into one element (``T.atomic_add(C[i, j], v)``)."""
    _atomic("add", dst, value)


def atomic_max(dst: TileArg, value: Any) -> None:
    """``dst = max(dst, value)`` atomically, tile-wise or on one element (int32, uint32 or
    float32), e.g. an absolute maximum gathered from every block."""
    _atomic("max", dst, value)


def atomic_min(dst: TileArg, value: Any) -> None:
    """``dst = min(dst, value)`` atomically (as :func:`atomic_max`)."""
    _atomic("min", dst, value)


def cumsum(src: TileArg, dst: TileArg | None = None, dim: int = 0, reverse: bool = False) -> None:
    """Inclusive prefix sum along ``dim`` (in place when ``dst`` is None)."""
    _trace.current().b.cumsum(src, src if dst is None else dst, int(dim), _b.bool(reverse))


# ----- loops -----


def Parallel(*extents: Value, coalesced_width: Any = None) -> LoopSpec:
    """``for i, j in T.Parallel(m, n)``: independent iterations, spread over the block's
    threads (and vector lanes) by the compiler."""
    return LoopSpec(kind="parallel", extents=list(extents))


def Pipelined(start: Value, stop: Value | None = None, num_stages: int = 0,
              order: Sequence[int] | None = None, stage: Sequence[int] | None = None,
              sync: Any = None, group: Any = None) -> LoopSpec:
    """``for k in T.Pipelined(n, num_stages=3)``: a software-pipelined loop (global→shared
    copies issued ``num_stages - 1`` iterations ahead)."""
    if stop is None:
        start, stop = 0, start
    return LoopSpec(kind="pipelined", start=start, stop=stop, stages=max(int(num_stages), 1),
                    order=list(order) if order is not None else None,
                    stage=list(stage) if stage is not None else None)


def serial(start: Value, stop: Value | None = None, step: int | None = None) -> LoopSpec:
    """``for i in T.serial(n)`` (or ``T.serial(lo, hi, step)``): a sequential loop."""
    return _trace._serial_spec("serial", start, stop, step)


def unroll(start: Value, stop: Value | None = None, step: int | None = None) -> LoopSpec:
    """A loop the compiler unrolls (constant extent)."""
    return _trace._serial_spec("unroll", start, stop, step)


def grid(*extents: Value) -> LoopSpec:
    """``for i, j in T.grid(m, n)``: nested sequential loops."""
    return LoopSpec(kind="grid", extents=list(extents))


# ----- math (folded on Python numbers) -----


def _num(*xs: Any) -> bool:
    return all(isinstance(x, (int, _b.float)) and not isinstance(x, Expr) for x in xs)


def _unary(op: str, py: Callable[[Any], Any]) -> Callable[[Value], Value]:
    def f(x: Value) -> Value:
        if _num(x):
            return py(x)
        return _native.unary(op, x)

    f.__name__ = op
    f.__doc__ = f"``{op}(x)``, elementwise."
    return f


exp = _unary("exp", math.exp)
exp2 = _unary("exp2", lambda x: 2.0**x)
log = _unary("log", math.log)
log2 = _unary("log2", math.log2)
sqrt = _unary("sqrt", math.sqrt)
rsqrt = _unary("rsqrt", lambda x: 1.0 / math.sqrt(x))
tanh = _unary("tanh", math.tanh)
sigmoid = _unary("sigmoid", lambda x: 1.0 / (1.0 + math.exp(-x)))
abs = _unary("abs", lambda x: x if x >= 0 else -x)  # noqa: A001
floor = _unary("floor", math.floor)
ceil = _unary("ceil", math.ceil)
erf = _unary("erf", math.erf)
sin = _unary("sin", math.sin)
cos = _unary("cos", math.cos)


def max(a: Value, b: Value) -> Value:  # noqa: A001
    if _num(a, b):
        return a if a >= b else b
    return _native.binary("max", a, b)


def min(a: Value, b: Value) -> Value:  # noqa: A001
    if _num(a, b):
        return a if a <= b else b
    return _native.binary("min", a, b)


def pow(a: Value, b: Value) -> Value:  # noqa: A001
    if _num(a, b):
        return a**b
    return _native.binary("pow", a, b)


def ceildiv(a: Value, b: Value) -> Value:
    """⌈a / b⌉ of integers."""
    if _num(a, b):
        return -(-a // b)
    return _native.binary("ceildiv", a, b)


def floordiv(a: Value, b: Value) -> Value:
    if _num(a, b):
        return a // b
    return _native.binary("floordiv", a, b)


def floormod(a: Value, b: Value) -> Value:
    if _num(a, b):
        return a % b
    return _native.binary("floormod", a, b)


def truncdiv(a: Value, b: Value) -> Value:
    if _num(a, b):
        return int(a / b)
    return _native.binary("truncdiv", a, b)


def truncmod(a: Value, b: Value) -> Value:
    if _num(a, b):
        return int(math.fmod(a, b))
    return _native.binary("truncmod", a, b)


def if_then_else(cond: Value, a: Value, b: Value) -> Value:
    """``a`` where ``cond`` holds, else ``b``; only the taken arm is evaluated."""
    if _num(cond):
        return a if cond else b
    return _native.if_then_else(cond, a, b)


def select(cond: Value, a: Value, b: Value) -> Value:
    """``a`` where ``cond`` holds, else ``b``; both arms are evaluated."""
    if _num(cond):
        return a if cond else b
    return _native.select(cond, a, b)


def infinity(dtype: Any) -> Expr:
    """+∞ of a float dtype (``-T.infinity(dtype)`` for −∞)."""
    return _native.constant(math.inf, _dtype(dtype))


def max_value(dtype: Any) -> Expr:
    d = _native.canonical_dtype(_dtype(dtype))
    return _native.constant(_LIMITS[d][1], d)


def min_value(dtype: Any) -> Expr:
    d = _native.canonical_dtype(_dtype(dtype))
    return _native.constant(_LIMITS[d][0], d)


_LIMITS = {
    "float16": (-65504.0, 65504.0),
    "bfloat16": (-3.3895313892515355e38, 3.3895313892515355e38),
    "float32": (-3.4028234663852886e38, 3.4028234663852886e38),
    "float64": (-1.7976931348623157e308, 1.7976931348623157e308),
    "float8_e4m3": (-448.0, 448.0),
    "float8_e5m2": (-57344.0, 57344.0),
    "int8": (-128, 127), "int16": (-32768, 32767), "int32": (-2**31, 2**31 - 1),
    "int64": (-2**63, 2**63 - 1), "uint8": (0, 255), "uint16": (0, 65535),
    "uint32": (0, 2**32 - 1), "uint64": (0, 2**64 - 1), "bool": (0, 1),
}


def cast(x: Value, dtype: Any) -> Expr:
    """``x`` converted to ``dtype``."""
    return _native.cast(x, _dtype(dtype))


def Cast(dtype: Any, x: Value) -> Expr:
    """TileLang's spelling of :func:`cast` (dtype first)."""
    return cast(x, dtype)


# ----- annotations -----


def use_swizzle(panel_size: int = 10, order: str = "row", enable: bool = True) -> None:
    """Rasterize blocks in panels of ``panel_size`` block-rows, so that blocks running at once
    share operand tiles in L2."""
    if order != "row":
        raise TypeError("T.use_swizzle(order=...) supports the row order only")
    if enable:
        _trace.current().b.use_swizzle(int(panel_size))


def annotate_layout(layouts: dict) -> None:
    """Give shared or fragment buffers layouts (``{A_shared: layout}``): a Layout or
    ComposedLayout of ``tilelang_rs.layout``, or CuTe notation text."""
    t = _trace.current()
    for buf, layout in layouts.items():
        if not isinstance(buf, TileBuffer):
            raise TypeError(f"annotate_layout keys are buffers, got {buf!r}")
        t.b.annotate_layout(buf, str(layout))


# ----- warp shuffles and device functions (escape hatches) -----
#
# Thread-level code: each call runs on every thread that reaches it. A shuffle is collective:
# every lane of the warp must reach it together (keep it out of branches that split a warp).
# GPU targets and the simulator only: the CPU backend runs a block as one thread.


def shfl_xor(value: Value, offset: Value) -> Expr:
    """``value`` as the lane ``lane ^ offset`` of this warp holds it (``__shfl_xor_sync``)."""
    return _trace.current().b.shfl("xor", value, offset)


def shfl_down(value: Value, offset: Value) -> Expr:
    """``value`` from the lane ``offset`` above; lanes within ``offset`` of the warp's end keep
    their own (``__shfl_down_sync``)."""
    return _trace.current().b.shfl("down", value, offset)


def shfl_up(value: Value, offset: Value) -> Expr:
    """``value`` from the lane ``offset`` below; the lowest ``offset`` lanes keep their own
    (``__shfl_up_sync``)."""
    b = _trace.current().b
    lane = b.thread_idx() % 32
    # The shuffle runs on every lane (bound before the choice), then each lane picks.
    got = b.let_("shfl_up", b.shfl("idx", value, max(lane - offset, 0)))
    return select(lane >= offset, got, value)


def shfl_sync(value: Value, src_lane: Value) -> Expr:
    """``value`` as lane ``src_lane`` of this warp holds it (``__shfl_sync``)."""
    return _trace.current().b.shfl("idx", value, src_lane)


def call_extern(dtype: Any, func_name: str, *args: Value) -> Expr | None:
    """Call the device function ``func_name`` on ``args`` (TileLang's ``T.call_extern``).

    With a value type (``"float32"``, ``T.int32``…) the call is an expression of that type and
    must not have side effects the compiler has to keep; with ``"void"``/``"handle"``/``None``
    it is a statement, run for its effect. The name is printed as written into the C, CUDA
    C++ or HIP source (the PTX path hands such kernels to CUDA C++); the simulator runs only the
    math functions it knows (``expf``, ``fmaxf``…) and names any other.
    """
    if not isinstance(func_name, str):
        raise TypeError(f"T.call_extern(dtype, func_name, *args): func_name must be a str, got {func_name!r}")
    b = _trace.current().b
    if dtype is None or str(dtype) in ("void", "handle"):
        b.call_extern(func_name, list(args), None)
        return None
    return b.call_extern(func_name, list(args), _dtype(dtype))


# ----- multi-rank kernels (the TileScale model; docs/distributed.md) -----
#
# Each call runs on every thread that reaches it (guard with ``if T.get_thread_binding() ==
# 0``-style conditions where one thread should signal), except put_block, get_block (the whole
# block runs them), put_warp, get_warp (each warp runs its own) and the
# barriers (the whole block).


def get_thread_binding(dim: int = 0) -> Expr:
    """This thread's index in the block (``threadIdx.x``; blocks are one-dimensional)."""
    if dim != 0:
        raise TypeError("T.get_thread_binding: blocks are one-dimensional here (dim=0)")
    return _trace.current().b.thread_idx()


def use_peer_tables() -> None:
    """Address peers through tables instead of the flat symmetric heap: every
    ``T.SymmTensor`` parameter ``X`` gets a companion ``X_peers`` (``[NR]`` int64, every rank's
    address of its ``X``), after the kernel's own parameters and before ``rank``,
    ``num_ranks``, ``heap_stride``. This is how memory that torch's symmetric memory mapped is
    passed: ``torch.tensor(handle.buffer_ptrs, dtype=torch.int64, device="cuda")``."""
    _trace.current().b.peer_tables()


def get_rank() -> Expr:
    """This rank (i32). Makes the kernel distributed: its last three arguments are then
    ``rank``, ``num_ranks`` and ``heap_stride``."""
    return _trace.current().b.ranks()[0]


def get_num_ranks() -> Expr:
    """The number of ranks (i32)."""
    return _trace.current().b.ranks()[1]


def _pe(pe: Any) -> Any:
    return None if pe is None or (isinstance(pe, int) and pe < 0) else pe


def ld(src: Expr, scope: str = "gpu", sem: str = "weak", src_pe: Any = None) -> Expr:
    """A memory-model load of the element ``src`` (of rank ``src_pe``'s copy of a symmetric
    tensor when given)."""
    return _trace.current().b.mem_ld(src, sem, scope, _pe(src_pe))


def st(dst: Expr, value: Value, scope: str = "gpu", sem: str = "weak", dst_pe: Any = None) -> None:
    """A memory-model store into the element ``dst`` (of rank ``dst_pe``'s copy)."""
    _trace.current().b.mem_st(dst, value, sem, scope, _pe(dst_pe))


def red_add(dst: Expr, value: Value, scope: str = "gpu", sem: str = "relaxed", dst_pe: Any = None) -> None:
    """``red.add`` on the element ``dst`` (no value returned)."""
    _trace.current().b.mem_st(dst, value, sem, scope, _pe(dst_pe), True)


def atom_add(target: Expr, value: Value, scope: str = "gpu", sem: str = "relaxed", dst_pe: Any = None) -> Expr:
    """An atomic add on an integer element; the old value."""
    return _trace.current().b.mem_atom_add(target, value, sem, scope, _pe(dst_pe))


def fence_cta() -> None:
    _trace.current().b.fence("cta")


def fence_gpu() -> None:
    _trace.current().b.fence("gpu")


def fence_sys() -> None:
    _trace.current().b.fence("sys")


def signal(flag: Expr, value: Value, dst_pe: Value, op: str = "set") -> None:
    """A release at system scope: store (``set``) or add (``add``) ``value`` into rank
    ``dst_pe``'s copy of ``flag``, after everything this thread wrote (and what its block wrote
    before a ``T.sync_threads``)."""
    _trace.current().b.signal(flag, dst_pe, value, op)


def _wait(cmp: str) -> Callable[..., None]:
    def wait(value: Expr, expected: Value, peer: Any = None) -> None:
        if _pe(peer) is not None:
            raise TypeError(f"T.wait_{cmp}(..., peer=...): waits are on this rank's own flag; "
                            "have the peer signal it (T.signal)")
        _trace.current().b.wait(value, cmp, expected)

    wait.__name__ = f"wait_{cmp}"
    wait.__doc__ = (f"Spin until the flag element compares {cmp} to ``expected`` (an acquire at "
                    "system scope: what the signaller wrote before is visible after).")
    return wait


wait_eq = _wait("eq")
wait_ne = _wait("ne")
wait_lt = _wait("lt")
wait_le = _wait("le")
wait_gt = _wait("gt")
wait_ge = _wait("ge")


def wait_counter(counter: Expr, target: Value) -> None:
    """Spin until the counter element has reached ``target``: ``counter - target``, taken
    modulo 2**bits and read as signed, is ≥ 0 (an acquire at system scope). Unlike
    ``T.wait_ge`` it keeps working when a counter of arrivals wraps past 2**31, as long as it
    stays within 2**(bits-1) of the target."""
    _trace.current().b.wait_counter(counter, target)


def put_block(src: Expr, dst: Expr, size: Value, dst_pe: Value) -> None:
    """The whole block copies ``size`` consecutive elements from ``src`` (this rank) to rank
    ``dst_pe``'s copy of the symmetric tensor of ``dst`` (elements, e.g. ``A[i, 0]``)."""
    _trace.current().b.block_copy(src, dst, size, dst_pe, True)


def get_block(src: Expr, dst: Expr, size: Value, src_pe: Value) -> None:
    """The whole block copies ``size`` consecutive elements from rank ``src_pe``'s copy of the
    symmetric tensor of ``src`` into ``dst`` on this rank."""
    _trace.current().b.block_copy(src, dst, size, src_pe, False)


def put_warp(src: Expr, dst: Expr, size: Value, dst_pe: Value) -> None:
    """One warp copies ``size`` consecutive elements to rank ``dst_pe`` (as
    :func:`put_block`; each warp its own run, e.g. chosen by ``T.get_thread_binding() // 32``).
    Follow with :func:`sync_warp` before a lane signals the peer."""
    _trace.current().b.block_copy(src, dst, size, dst_pe, True, True)


def get_warp(src: Expr, dst: Expr, size: Value, src_pe: Value) -> None:
    """One warp copies ``size`` consecutive elements from rank ``src_pe`` (as
    :func:`get_block`)."""
    _trace.current().b.block_copy(src, dst, size, src_pe, False, True)


def sync_threads() -> None:
    _trace.current().b.sync_threads()


def sync_warp() -> None:
    """``__syncwarp()``: this warp's lanes meet; what each wrote before is visible to the
    others after."""
    _trace.current().b.sync_warp()


def barrier_blocks(counter: Expr, num_blocks: Value) -> None:
    """All ``num_blocks`` blocks of this launch meet (``counter``: an int32 element, zero
    before the first launch; it counts rounds, no reset). All blocks must be resident."""
    _trace.current().b.barrier_blocks(counter, num_blocks)


def barrier_ranks(bar: TileBuffer, row: Value = 0) -> None:
    """This block meets the blocks passing the same ``row`` on every rank (``bar``: a
    ``T.SymmTensor((rows, R), "int32")``, zero before the first use; no reset)."""
    _trace.current().b.barrier_ranks(bar, row)
