"""torch tensors: CPU tensors on the CPU backend (run wherever torch is installed), CUDA
tensors on torch's current stream, allocated outputs, errors, and the torch.library op inside
torch.compile (marked `gpu`: run with `python -m pytest python/tests -m gpu` on a GPU
machine)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tilelang_rs as tilelang  # noqa: E402
from tilelang_rs import language as T  # noqa: E402

import elementwise  # noqa: E402
import flash_attention as fa  # noqa: E402
import gemm  # noqa: E402
import gemm_nt_swizzle  # noqa: E402
import rmsnorm  # noqa: E402
import softmax  # noqa: E402


def test_cpu_tensors_on_the_cpu_backend():
    k = tilelang.compile(elementwise.elementwise_add(32, 32, 128), out_idx=[2], target="cpu")
    a, b = torch.randn(37, 45), torch.randn(37, 45)
    c = k(a, b)
    assert isinstance(c, torch.Tensor) and c.shape == (37, 45)
    torch.testing.assert_close(c, a + b)
    with pytest.raises(ValueError, match="not contiguous"):
        k(a.t().contiguous().t()[:, :45], b)
    with pytest.raises(TypeError, match="expected f32 elements"):
        k(a.double(), b)


def test_torch_op_on_cpu():
    from tilelang_rs import torch_op

    k = tilelang.compile(elementwise.elementwise_add(32, 32, 128), out_idx=[2], target="cpu")
    op = torch_op.register(k, "tilelang_rs_test::add_cpu")
    a, b = torch.randn(20, 30), torch.randn(20, 30)
    torch.testing.assert_close(op(a, b), a + b)
    f = torch.compile(lambda x, y: op(x, y) * 2, backend="eager", fullgraph=True)
    torch.testing.assert_close(f(a, b), (a + b) * 2)


def cuda():
    return torch.device("cuda")


@pytest.mark.gpu
def test_gpu_examples_against_torch():
    # References in float32 (torch's fp16 matmul may reduce in fp16), rounded to the output's
    # type; fp16 outputs of K-long dot products of randn (|x| up to ~100) get 2 ulps.
    def mm(a, b):
        return (a.float() @ b.float()).half()

    for make, args, ref, out_idx, atol in [
        (lambda: gemm.matmul(1024, 1024, 1024, 128, 128, 32),
         [torch.randn(1024, 1024, device="cuda", dtype=torch.float16),
          torch.randn(1024, 1024, device="cuda", dtype=torch.float16)],
         mm, [2], 0.125),
        (lambda: gemm.matmul_annotated(1024, 1024, 1024, 128, 128, 32),
         [torch.randn(1024, 1024, device="cuda", dtype=torch.float16),
          torch.randn(1024, 1024, device="cuda", dtype=torch.float16)],
         mm, [2], 0.125),
        (lambda: gemm_nt_swizzle.gemm_nt(),
         [torch.randn(1000, 777, device="cuda", dtype=torch.float16),
          torch.randn(999, 777, device="cuda", dtype=torch.float16)],
         lambda a, b: mm(a, b.T), [2], 0.125),
        (lambda: softmax.softmax(),
         [torch.randn(333, 3000, device="cuda", dtype=torch.float16)],
         lambda x: torch.softmax(x.float(), -1).half(), [1], 1e-2),
        (lambda: rmsnorm.rms_norm(1024),
         [torch.randn(333, 1024, device="cuda")],
         lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-12), [1], 1e-2),
        (lambda: elementwise.elementwise_add(),
         [torch.randn(1000, 999, device="cuda"), torch.randn(1000, 999, device="cuda")],
         lambda a, b: a + b, [2], 1e-2),
    ]:
        k = tilelang.compile(make(), out_idx=out_idx, target="cuda")
        out = k(*args)
        torch.testing.assert_close(out, ref(*args), rtol=1e-2, atol=atol)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_flash_attention(causal):
    b, s, h, d = 2, 1000, 8, 64
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.float16) for _ in range(3))
    kern = tilelang.compile(fa.flashattn(b, h, s, d, causal, 128, 64, 2, 256), out_idx=[3],
                            target="cuda")
    o = kern(q, k, v)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal
    ).transpose(1, 2)
    torch.testing.assert_close(o, ref, rtol=1e-2, atol=1e-2)


@pytest.mark.gpu
def test_gpu_current_stream_and_errors():
    k = tilelang.compile(elementwise.elementwise_add(), out_idx=[2], target="cuda")
    s = torch.cuda.Stream()
    a, b = torch.randn(4096, 4096, device="cuda"), torch.randn(4096, 4096, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        # Produced and consumed on the side stream: correct only if the kernel joins it.
        x = a * 2
        c = k(x, b)
        d = c + 1
    s.synchronize()
    torch.testing.assert_close(d, a * 2 + b + 1)
    with pytest.raises(ValueError, match="on cpu, the kernel on cuda"):
        k(a.cpu(), b.cpu())
    with pytest.raises(ValueError, match="not contiguous"):
        k(a.t(), b)
    with pytest.raises(TypeError, match="expected f32 elements"):
        k(a.half(), b)
    with pytest.raises(TypeError, match="takes 2 arguments"):
        k(a)


@pytest.mark.gpu
def test_gpu_symbolic_sizes_without_recompiling():
    k = tilelang.compile(gemm_nt_swizzle.gemm_nt(), out_idx=[2], target="cuda")
    for m, n, kk in [(128, 256, 64), (1000, 333, 777), (1, 8, 8)]:
        a = torch.randn(m, kk, device="cuda", dtype=torch.float16)
        w = torch.randn(n, kk, device="cuda", dtype=torch.float16)
        torch.testing.assert_close(k(a, w), a @ w.T, rtol=1e-2, atol=1e-2)


@pytest.mark.gpu
def test_gpu_torch_op_in_torch_compile():
    from tilelang_rs import torch_op

    k = tilelang.compile(gemm_nt_swizzle.gemm_nt(), out_idx=[2], target="cuda")
    op = torch_op.register(k, "tilelang_rs_test::gemm_nt")

    class Mlp(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(512, 256, device="cuda",
                                                    dtype=torch.float16) * 0.05)

        def forward(self, x):
            return torch.relu(op(x, self.w.detach()))

    m = Mlp()
    x = torch.randn(300, 256, device="cuda", dtype=torch.float16)
    compiled = torch.compile(m, fullgraph=True)
    torch.testing.assert_close(compiled(x), torch.relu(x @ m.w.detach().T), rtol=1e-2,
                               atol=1e-2)


@pytest.mark.gpu
def test_gpu_profiler():
    k = tilelang.compile(gemm.matmul(2048, 2048, 2048, 128, 128, 32), out_idx=[2],
                         target="cuda")
    prof = k.get_profiler()
    prof.assert_allclose(lambda a, b: a @ b)
    ms = prof.do_bench()
    ref = prof.do_bench(lambda a, b: a @ b)
    assert 0 < ms < 100 and 0 < ref < 100
