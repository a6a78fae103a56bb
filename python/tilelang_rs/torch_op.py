"""Compiled kernels as torch operators, usable inside ``torch.compile``d models.

    op = tilelang_rs.torch_op.register(kernel, "mylib::gemm")
    y = op(a, b)                       # eager: launches the kernel on torch's current stream
    f = torch.compile(lambda a, b: op(a, b).relu())
    f(a, b)                            # traced by Dynamo as one opaque op with a fake kernel

torch is imported only when this is used: the package itself works without it.
"""

from __future__ import annotations

from typing import Any

from ._native import Expr

_SCALARS = {"float16": "float", "bfloat16": "float", "float32": "float", "float64": "float",
            "bool": "bool"}


def _torch_dtype(torch, name: str):
    return getattr(torch, {"float8_e4m3": "float8_e4m3fn"}.get(name, name))


def register(kernel, name: str, *, mutates_args: Any = None):
    """Register ``kernel`` (a :class:`~tilelang_rs.JITKernel`) as the torch operator ``name``
    (``"namespace::op"``), with a fake (meta) implementation for tracing: outputs in
    ``out_idx`` are returned; a kernel without outputs writes its tensor arguments in place
    (name them in ``mutates_args``; by default every tensor the kernel writes)."""
    import torch

    if "::" not in name:
        raise ValueError(f"a torch operator name is 'namespace::name', got {name!r}")
    params = kernel.params
    out_idx = list(kernel.out_idx)
    ins = [(i, p) for i, p in enumerate(params) if i not in out_idx]
    outs = [params[i] for i in out_idx]
    roles = {row[0]: row[4] for row in kernel.kernel.params()}
    if mutates_args is None:
        mutates_args = () if outs else tuple(
            p.name for _, p in ins if p.kind == "tensor" and roles.get(p.name) != "in")
    mutates_args = tuple(mutates_args)

    def ann(p) -> str:
        if p.kind == "tensor":
            return "torch.Tensor"
        return _SCALARS.get(p.dtype, "int")

    arglist = ", ".join(f"{p.name}: {ann(p)}" for _, p in ins)
    names = ", ".join(p.name for _, p in ins)
    if not outs:
        ret, body = "None", f"    _k({names})\n"
    elif len(outs) == 1:
        ret, body = "torch.Tensor", f"    return _k({names})\n"
    else:
        ret = "tuple[" + ", ".join("torch.Tensor" for _ in outs) + "]"
        body = f"    return tuple(_k({names}))\n"
    ns: dict = {"torch": torch, "_k": kernel}
    exec(f"def _op({arglist}) -> {ret}:\n{body}", ns)  # a typed signature for torch's schema
    fn = ns["_op"]
    fn.__name__ = name.split("::")[1]
    op = torch.library.custom_op(name, mutates_args=mutates_args)(fn)

    # Where each symbolic size can be read from the inputs: (input position, dimension).
    where: dict = {}
    for pos, (_, p) in enumerate(ins):
        for d, s in enumerate(p.shape):
            if isinstance(s, Expr) and s.name is not None:
                where.setdefault(s.name, (pos, d))

    def fake(*args):
        made = []
        for p in outs:
            shape = []
            for s in p.shape:
                if isinstance(s, Expr):
                    if s.name is None or s.name not in where:
                        raise NotImplementedError(
                            f"the fake kernel of {name} cannot size output `{p.name}` ({s}): "
                            "only sizes that are an input's dimension are supported")
                    pos, d = where[s.name]
                    shape.append(args[pos].shape[d])
                else:
                    shape.append(int(s))
            dev = next((a.device for a in args if isinstance(a, torch.Tensor)), None)
            made.append(torch.empty(shape, dtype=_torch_dtype(torch, p.dtype), device=dev))
        if not outs:
            return None
        return made[0] if len(made) == 1 else tuple(made)

    op.register_fake(fake)
    return op
