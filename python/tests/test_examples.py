"""Every ported program against a numpy reference, on the CPU backend and in the GPU
simulator (small, odd shapes: tails and partial tiles everywhere)."""

import numpy as np
import pytest

import tilelang_rs as tilelang

import elementwise
import flash_attention as fa
import flash_attention_hopper as fah
import fp8_gemm
import gemm
import gemm_nt_swizzle
import gemm_splitk
import rmsnorm
import softmax

TARGETS = ["cpu", "sim"]


def close(out, ref, tol):
    out64 = np.asarray(out).astype(np.float64)
    ref64 = np.asarray(ref).astype(np.float64)
    assert out64.shape == ref64.shape
    assert np.all(np.isfinite(out64))
    err = np.abs(out64 - ref64).max()
    assert err <= tol, f"max error {err} > {tol}"


@pytest.mark.parametrize("target", TARGETS)
def test_readme_gemm(target, rng):
    m, n, k = 70, 50, 40  # none a multiple of the 64x64x32 tiles
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    kernel = tilelang.compile(gemm.matmul(m, n, k, 64, 64, 32), out_idx=[2], target=target)
    close(kernel(a, b), gemm.reference(a, b), 0.06)


@pytest.mark.parametrize("target", TARGETS)
def test_split_k_gemm_adds_every_share(target, rng):
    # 7 k tiles of 32 over 3 shares (3, 3, 1), then 2 over 4 (1, 1 and two empty shares);
    # tails in M and N. Each share is added into C, which starts at zero.
    for m, n, k, split in [(70, 50, 200, 3), (70, 50, 40, 4)]:
        a = rng.standard_normal((m, k)).astype(np.float16)
        b = rng.standard_normal((k, n)).astype(np.float16)
        c = np.zeros((m, n), np.float32)
        func = gemm_splitk.matmul_splitk(m, n, k, 64, 64, 32, split)
        tilelang.compile(func, target=target)(a, b, c)
        close(c, gemm_splitk.reference(a, b), 0.02)


@pytest.mark.parametrize("target", TARGETS)
def test_readme_gemm_annotated(target, rng):
    # The README's annotated kernel copies B element by element with no bounds check (TileLang
    # guards such accesses in a pass; this compiler does not), so it is exact only for sizes
    # that are multiples of its tiles: odd sizes are tested with the basic GEMM above.
    m, n, k = 64, 128, 96
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    func = gemm.matmul_annotated(m, n, k, 64, 64, 32)
    src = func.script()
    assert "annotate_layout" in src or "layout" in src
    kernel = tilelang.compile(func, out_idx=[2], target=target)
    close(kernel(a, b), gemm.reference(a, b), 0.06)


def test_readme_gemm_annotated_oob_is_reported_in_the_simulator(rng):
    # At odd sizes the README's element-wise copy of B reads past B's edge: the simulator
    # says so, naming the Python line of that read.
    func = gemm.matmul_annotated(70, 50, 40, 64, 64, 32)
    kernel = tilelang.compile(func, out_idx=[2], target="sim")
    a = rng.standard_normal((70, 40)).astype(np.float16)
    b = rng.standard_normal((40, 50)).astype(np.float16)
    with pytest.raises(RuntimeError, match=r"outside its extent.*gemm\.py:\d+"):
        kernel(a, b)


@pytest.mark.parametrize("target", TARGETS)
def test_gemm_nt_swizzle_symbolic_sizes(target, rng):
    kernel = tilelang.compile(gemm_nt_swizzle.gemm_nt(64, 64, 32, 2, 128, 4), out_idx=[-1],
                              target=target)
    # One compiled kernel, several shapes: the sizes come from the arguments.
    for m, n, k in [(70, 50, 40), (33, 129, 17)]:
        a = rng.standard_normal((m, k)).astype(np.float16)
        w = rng.standard_normal((n, k)).astype(np.float16)
        close(kernel(a, w), gemm_nt_swizzle.reference(a, w), 0.06)
    assert "swizzle" in kernel.get_ir() or "panel" in kernel.get_ir()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention(target, causal, rng):
    b, s, h, d = 1, 37, 2, 32
    q, k, v = (rng.standard_normal((b, s, h, d)).astype(np.float16) for _ in range(3))
    func = fa.flashattn(b, h, s, d, causal, block_M=64, block_N=32, num_stages=1, threads=128)
    kernel = tilelang.compile(func, out_idx=[3], target=target)
    close(kernel(q, k, v), fa.reference(q, k, v, causal), 4e-3)


@pytest.mark.parametrize("target", ["cpu", "sim:sm_90a"])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_hopper(target, causal, rng):
    # The Rust library's Hopper default, written in T.*: a producer warpgroup, wgmma left
    # pending (wg_wait=-1) under the softmax, T.wait_wgmma; in the simulator on sm_90a (TMA,
    # mbarriers, setmaxnreg), with a sequence tail and one query block of a single key tile.
    b, h, s, d = 1, 2, 150, 64
    q, k, v = (rng.standard_normal((b, h, s, d)).astype(np.float16) for _ in range(3))
    func = fah.flash_attention(d, causal, dtype="float16")
    kernel = tilelang.compile(func, out_idx=[3, 4], target=target,
                              pass_configs=fah.PASS_CONFIGS)
    if target.startswith("sim"):
        src = kernel.get_kernel_source()
        assert "setmaxnreg" in src and "wgmma_wait<1>" in src
        # The wait for P·V stays below the softmax where it is pinned (not causal).
        assert ("wgmma_wait_pinned<0>" in src) == (not causal)
    o, lse = kernel(q, k, v)
    want_o, want_lse = fah.reference(q, k, v, causal)
    close(o, want_o, 4e-3)
    close(lse, want_lse, 1e-3)


@pytest.mark.parametrize("target", TARGETS)
def test_softmax(target, rng):
    kernel = tilelang.compile(softmax.softmax(1, 256, 128), out_idx=[1], target=target)
    for m, n in [(3, 300), (2, 77)]:
        x = rng.standard_normal((m, n)).astype(np.float16)
        close(kernel(x), softmax.reference(x), 2e-3)


@pytest.mark.parametrize("target", TARGETS)
def test_rmsnorm(target, rng):
    kernel = tilelang.compile(rmsnorm.rms_norm(100, 1, 128), out_idx=[1], target=target)
    x = rng.standard_normal((5, 100)).astype(np.float32)
    close(kernel(x), rmsnorm.reference(x), 1e-5)


@pytest.mark.parametrize("target", TARGETS)
def test_elementwise(target, rng):
    kernel = tilelang.compile(elementwise.elementwise_add(32, 32, 128), out_idx=[2],
                              target=target)
    a, b = (rng.standard_normal((37, 45)).astype(np.float32) for _ in range(2))
    close(kernel(a, b), a + b, 0)


@pytest.mark.parametrize("target", TARGETS + ["sim:sm_90a"])
def test_fp8_gemm_blockwise(target, rng):
    """DeepSeek-style block-scaled fp8 GEMM against the definition; in the simulator for sm_90a
    on fp8 wgmma with TMA loads."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    m, n, k = 130, 200, 300  # tails in every dim, three scale blocks along K
    # The simulator takes the small tiles (64 rows per 128 threads); the CPU the defaults.
    tiles = dict(block_M=64, threads=128, num_stages=3) if target.startswith("sim") else {}
    func = fp8_gemm.fp8_gemm_blockwise(m, n, k, out_dtype="float32", **tiles)
    kernel = tilelang.compile(func, out_idx=[4], target=target)
    a, b, sa, sb = fp8_gemm.inputs(m, n, k, rng, ml_dtypes.float8_e4m3fn)
    got = np.asarray(kernel(a, b, sa, sb)).astype(np.float64)
    want = fp8_gemm.reference(a, b, sa, sb)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-5
    assert "k32.f32.e4m3.e4m3" in func.kernel.source("sm_90a")



@pytest.mark.parametrize("disable", [False, True])
def test_gemm_warp_specialized_in_sim(disable, rng):
    """TileLang's ``tl.disable_warp_specialized``: False asks for a producer warpgroup on
    sm_90a (the loads by TMA, C out by TMA store), True for none; both agree with numpy in the
    simulator, tails included."""
    # Rows of 16-byte multiples (TMA), tails in M and N.
    func = gemm.matmul(130, 144, 200, 64, 64, 64)
    configs = {"tl.disable_warp_specialized": disable}
    kernel = tilelang.compile(func, out_idx=[2], target="sim:sm_90a", pass_configs=configs)
    a = rng.standard_normal((130, 200)).astype(np.float16)
    b = rng.standard_normal((200, 144)).astype(np.float16)
    close(kernel(a, b), (a.astype(np.float32) @ b.astype(np.float32)), 0.06)
    source = func.kernel.with_warp_specialize(not disable).source("sm_90a")
    assert ("bar.sync 1, 128" in source) == (not disable)
    assert ("tl_tma_store_2d(&" in source) == (not disable)


def test_gemm_persistent_in_sim(rng):
    """``tl.persistent`` (this compiler's own pass config): blocks that loop over the tiles,
    here with a producer warpgroup as the Rust library's Hopper GEMM has; it agrees with numpy
    in the simulator (tails in M and N), and a bad value is refused."""
    func = gemm.matmul(130, 144, 200, 64, 64, 64)
    configs = {"tl.disable_warp_specialized": False, "tl.persistent": np.int64(2)}
    kernel = tilelang.compile(func, out_idx=[2], target="sim:sm_90a", pass_configs=configs)
    a = rng.standard_normal((130, 200)).astype(np.float16)
    b = rng.standard_normal((200, 144)).astype(np.float16)
    close(kernel(a, b), (a.astype(np.float32) @ b.astype(np.float32)), 0.06)
    one_per_tile = func.kernel.with_warp_specialize(True).source("sm_90a")
    looping = func.kernel.with_warp_specialize(True).with_persistent(0).source("sm_90a")
    assert "pblock" in looping and "pblock" not in one_per_tile
    for bad in (-1, True, "all", 2**32):
        with pytest.raises(ValueError, match="tl.persistent"):
            tilelang.compile(func, target="cpu", pass_configs={"tl.persistent": bad})
