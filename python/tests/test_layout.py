"""The layout algebra from Python, and layouts given to T.annotate_layout."""

import numpy as np
import pytest

import tilelang_rs as tilelang
from tilelang_rs import language as T
from tilelang_rs.layout import ComposedLayout, Layout, Swizzle, smem_swizzle_layout


def test_layouts_are_functions():
    L = Layout((4, 8), (8, 1))  # row-major 4x8
    assert str(L) == "(4,8):(8,1)"
    assert L.size == 32 and L.cosize == 32
    # Column-major linear coordinates: i = m + 4 n.
    assert [L(i) for i in range(5)] == [0, 8, 16, 24, 1]
    assert L((1, 2)) == 10
    assert Layout(8).stride == "1"  # col-major default


def test_algebra_matches_cute():
    # CuTe's composition example: (6,2):(8,2) o (4,3):(3,1) = ((2,2),3):((24,2),8)
    a = Layout((6, 2), (8, 2))
    b = Layout((4, 3), (3, 1))
    c = a.compose(b)
    for i in range(c.size):
        assert c(i) == a(b(i))
    # complement of 4:2 up to 24 fills the holes: (2,3):(1,8)
    comp = Layout(4, 2).complement(24)
    assert str(comp) == "(2,3):(1,8)"
    # logical divide of 16:1 by 4:1 -> (4,4):(1,4)
    assert str(Layout(16, 1).divide(Layout(4, 1))) == "(4,4):(1,4)"
    assert str(Layout(16, 1).divide("4:1", "zipped")) == "(4,4):(1,4)"
    # blocked product of 2x2 by 3x1 covers 6x2 with unique offsets
    p = Layout((2, 2), (1, 2)).product(Layout((3, 1), (1, 3)), "blocked")
    assert sorted(p(i) for i in range(p.size)) == list(range(12))
    assert str(Layout((2, 4), (1, 2)).coalesce()) == "8:1"
    assert str(Layout((2, 4), (4, 1)).coalesce()) == "(2,4):(4,1)"
    r = Layout((4, 8), (8, 1)).right_inverse()
    L = Layout((4, 8), (8, 1))
    assert all(L(r(i)) == i for i in range(32))
    with pytest.raises(ValueError):
        Layout((2, 2), (1,))


def test_swizzles_and_pictures():
    s = Swizzle(3, 3, 3)
    assert str(s) == "Sw<3,3,3>"
    assert s(0) == 0 and s(8 * 8) == 64 + 8
    c = ComposedLayout(s, Layout((8, 64), (64, 1)))
    assert c.size == 512
    assert len({c(i) for i in range(512)}) == 512
    assert "Sw<3,3,3>" in str(c)
    pic = Layout((4, 4), (4, 1)).show()
    assert "15" in pic and pic.count("\n") >= 4
    assert Layout((2, 2), (1, 2)).svg().lstrip().startswith("<svg")
    sm = smem_swizzle_layout(64, 64, 2)
    assert sm.size == 64 * 64
    assert "Sw<" in str(sm)
    # The thread-value layout of mma.sync's A operand: 32 threads x 8 values.
    tv = Layout.parse(tilelang.layout.atom("mma_m16n8k16_a").strip())
    assert tv.size == 256


@pytest.mark.parametrize("target", ["cpu", "sim"])
def test_annotated_layouts_compile_and_run(target, rng):
    @T.prim_func
    def k(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared((64, 64), "float16")
            T.annotate_layout({s: ComposedLayout(Swizzle(3, 3, 3), Layout((64, 64), (64, 1)))})
            T.copy(A, s)
            T.copy(s, B)

    kernel = tilelang.compile(k, out_idx=[1], target=target)
    a = rng.standard_normal((64, 64)).astype(np.float16)
    np.testing.assert_array_equal(kernel(a), a)


def test_bad_layout_annotation_is_a_diagnostic():
    def make():
        @T.prim_func
        def k(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16")):
            with T.Kernel(1, threads=128) as bx:
                s = T.alloc_shared((64, 64), "float16")
                T.annotate_layout({s: Layout((32, 64), (64, 1))})
                T.copy(A, s)
                T.copy(s, B)

        return k

    func = make()
    with pytest.raises(tilelang.TileLangError, match="layout annotation of `s`"):
        tilelang.compile(func, out_idx=[1], target="sim")
