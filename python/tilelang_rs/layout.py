"""The layout algebra (CuTe semantics): ``Layout`` (shape:stride), ``Swizzle``,
``ComposedLayout`` (a swizzle after a layout), their algebra and pictures.

>>> from tilelang_rs.layout import Layout
>>> L = Layout((4, 8), (8, 1))
>>> str(L.compose(Layout(8, 4)))
...
Any of them (or its text) can be given to ``T.annotate_layout``.
"""

from ._native import ComposedLayout, Layout, Swizzle, atom, smem_swizzle_layout


def compose(a: Layout, b) -> Layout:
    """``a ∘ b``."""
    return a.compose(b)


def logical_divide(a: Layout, tiler) -> Layout:
    return a.divide(tiler, "logical")


def zipped_divide(a: Layout, tiler) -> Layout:
    return a.divide(tiler, "zipped")


def tiled_divide(a: Layout, tiler) -> Layout:
    return a.divide(tiler, "tiled")


def logical_product(a: Layout, b) -> Layout:
    return a.product(b, "logical")


def blocked_product(a: Layout, b) -> Layout:
    return a.product(b, "blocked")


def raked_product(a: Layout, b) -> Layout:
    return a.product(b, "raked")


def complement(a: Layout, cotarget: int) -> Layout:
    return a.complement(cotarget)


def coalesce(a: Layout) -> Layout:
    return a.coalesce()


__all__ = [
    "Layout", "Swizzle", "ComposedLayout", "atom", "smem_swizzle_layout", "compose",
    "logical_divide", "zipped_divide", "tiled_divide", "logical_product", "blocked_product",
    "raked_product", "complement", "coalesce",
]
