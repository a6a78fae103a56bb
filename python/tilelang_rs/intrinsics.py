"""Layout helpers of TileLang's ``tilelang.intrinsics``."""

from __future__ import annotations

from . import _native
from ._native import Buffer, ComposedLayout

_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int8": 1, "uint8": 1,
          "float8_e4m3": 1, "float8_e5m2": 1, "int16": 2, "int32": 4, "int64": 8}


def make_mma_swizzle_layout(buffer: Buffer, is_smooth: bool = False) -> ComposedLayout:
    """The swizzled shared-memory layout of a 2-D tile that tensor-core operand loads read
    without bank conflicts (the one the compiler picks for gemm operands by itself)."""
    shape = buffer.shape
    if len(shape) != 2 or not all(isinstance(s, int) for s in shape):
        raise TypeError(f"make_mma_swizzle_layout needs a 2-D tile of constant shape, got {buffer!r}")
    if is_smooth:
        return _native.ComposedLayout.parse(
            f"Sw<0,0,0> o 0 o ({shape[0]},{shape[1]}):({shape[1]},1)")
    return _native.smem_swizzle_layout(shape[0], shape[1], _BYTES[buffer.dtype])


make_swizzle_layout = make_mma_swizzle_layout
