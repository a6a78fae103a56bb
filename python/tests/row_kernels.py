"""Small row-wise kernels the argument tests share (also imported by the stand-in torch
script that ``test_args.py`` runs in a subprocess)."""

from tilelang_rs import language as T

N = T.symbolic("N")


@T.prim_func
def axpy(X: T.Tensor((N, 4), "float32"), Y: T.Tensor((N, 4), "float32"), a: T.float32):
    with T.Kernel(T.ceildiv(N, 16), threads=64) as bx:
        for i, j in T.Parallel(16, 4):
            if bx * 16 + i < N:
                Y[bx * 16 + i, j] = Y[bx * 16 + i, j] + a * X[bx * 16 + i, j]


@T.prim_func
def add(A: T.Tensor((N, 4), "float32"), B: T.Tensor((N, 4), "float32"),
        C: T.Tensor((N, 4), "float32")):
    with T.Kernel(T.ceildiv(N, 16), threads=64) as bx:
        for i, j in T.Parallel(16, 4):
            if bx * 16 + i < N:
                C[bx * 16 + i, j] = A[bx * 16 + i, j] + B[bx * 16 + i, j]
