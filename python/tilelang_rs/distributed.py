"""Multi-rank kernels without GPUs: run a kernel written with ``T.SymmTensor``, ``T.put_block``,
``T.signal``, ``T.wait_*`` … on several simulated devices in this process (the simulator runs
the kernel lowered for a GPU target, with its deadlock, memory-order and scope checks).

    import numpy as np, tilelang_rs as tilelang
    tilelang.sim_ranks(all_gather, [[x0, out0, flags0, 1], [x1, out1, flags1, 1]])

Each rank's arguments are its kernel arguments in parameter order, without the trailing
``rank``, ``num_ranks`` and ``heap_stride`` (filled in here); numpy arrays are updated in
place. On GPUs, multi-rank kernels run one process per rank from Rust (``crates/dist``); a
Python runtime for them is not there yet.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .language import PrimFunc


def sim_ranks(func: PrimFunc, ranks: list[list[Any]], target: str = "sm_90a") -> bool:
    """Run ``func`` on ``len(ranks)`` simulated ranks; returns whether the memory order of its
    symmetric tensors was checked. A deadlock, an unordered access or a too-narrow scope
    raises ``ValueError`` saying which threads, ranks and lines."""
    if not isinstance(func, PrimFunc):
        raise TypeError(f"sim_ranks takes a @T.prim_func, got {func!r}")
    world = len(ranks)
    if world < 1:
        raise ValueError("sim_ranks needs at least one rank")
    packed = []
    for r, args in enumerate(ranks):
        row: list[Any] = []
        for a in args:
            if isinstance(a, np.ndarray):
                row.append((np.ascontiguousarray(a).tobytes(), list(a.shape)))
            elif isinstance(a, (bool, int, np.integer)):
                row.append(int(a))
            elif isinstance(a, (float, np.floating)):
                row.append(float(a))
            else:
                raise TypeError(f"rank {r}: argument {a!r} is not a numpy array or a scalar")
        row += [r, world, 0]
        packed.append(row)
    out, checked = func.kernel.sim_ranks(target, packed)
    for args, outs in zip(ranks, out):
        for a, b in zip(args, outs):
            if isinstance(a, np.ndarray) and b is not None:
                a[...] = np.frombuffer(b, dtype=a.dtype).reshape(a.shape)
    return checked
