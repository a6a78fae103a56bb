"""Multi-rank kernels without GPUs: run a kernel written with ``T.SymmTensor``, ``T.put_block``,
``T.signal``, ``T.wait_*`` … on several simulated devices in this process (the simulator runs
the kernel lowered for a GPU target, with its deadlock, memory-order and scope checks).

    import numpy as np, tilelang_rs as tilelang
    tilelang.sim_ranks(all_gather, [[x0, out0, flags0, 1], [x1, out1, flags1, 1]])

Each rank's arguments are its kernel arguments in parameter order, without the trailing
``rank``, ``num_ranks`` and ``heap_stride`` (filled in here); numpy arrays are updated in
place.

On GPUs, a kernel written with ``T.use_peer_tables()`` runs on torch's symmetric memory
(one process per GPU, ``torchrun``): :func:`on_torch_symm` wraps it so that each call takes
only the kernel's own parameters, the peer tables, ``rank``, ``num_ranks`` and
``heap_stride`` filled in from torch's handles::

    out = symm_mem.empty((world, n), dtype=torch.float32, device="cuda")
    flags = symm_mem.empty((world,), dtype=torch.int32, device="cuda").zero_()
    gather = tilelang.distributed.on_torch_symm(tilelang.compile(all_gather))
    gather(x, out, flags, epoch)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .language import PrimFunc

# The scalars every multi-rank kernel ends with (the native signature's last three).
_RANK_SCALARS = ("rank", "num_ranks", "heap_stride")


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


class TorchSymmLauncher:
    """A compiled multi-rank kernel called on torch's symmetric-memory tensors: see
    :func:`on_torch_symm`."""

    def __init__(self, kernel: Any, group: Any = None):
        declared = list(kernel.params)
        self._symm = [i for i, p in enumerate(declared) if p.symmetric]
        self._names = [declared[i].name for i in self._symm]
        want = ([p.name for p in declared] + [f"{n}_peers" for n in self._names]
                + list(_RANK_SCALARS))
        got = list(kernel.executable.param_names)
        if got != want:
            raise TypeError(
                f"kernel `{kernel.kernel.name}` does not take peer tables (its parameters are "
                f"{', '.join(got)}); call T.use_peer_tables() in the kernel, so that every "
                "T.SymmTensor gets the table of its peers' addresses torch's symmetric memory "
                "gives")
        if not self._symm:
            raise TypeError(f"kernel `{kernel.kernel.name}` has no T.SymmTensor parameter")
        import torch.distributed as dist

        if not dist.is_initialized():
            raise RuntimeError("torch.distributed is not initialized: call "
                               "dist.init_process_group(\"nccl\") first (one process per GPU)")
        self.kernel = kernel
        self.group = group if group is not None else dist.group.WORLD
        self.group_name = self.group.group_name
        self.rank = dist.get_rank(self.group)
        self.world = dist.get_world_size(self.group)
        self._n = len(declared)
        # A tensor's table, by (address, size): made once, by a collective rendezvous. The
        # entry holds the tensor, so no other allocation can take its address while the table
        # (its peers' addresses) is kept.
        self._tables: dict = {}

    def table(self, tensor: Any, name: str = "tensor") -> Any:
        """The ``[num_ranks]`` int64 CUDA tensor of every rank's address of ``tensor`` (made
        at its first use, by ``symm_mem.rendezvous``: every rank must make that call, in the
        same order, as SPMD code does)."""
        import torch
        import torch.distributed._symmetric_memory as symm_mem

        if not isinstance(tensor, torch.Tensor) or not tensor.is_cuda:
            raise TypeError(f"`{name}` must be a CUDA tensor from symm_mem.empty, got "
                            f"{type(tensor).__name__}")
        key = (tensor.data_ptr(), tensor.untyped_storage().nbytes())
        hit = self._tables.get(key)
        if hit is not None:
            return hit[1]
        try:
            handle = symm_mem.rendezvous(tensor, self.group_name)
        except Exception as e:  # torch's own message, with ours around it
            raise ValueError(
                f"`{name}` is not in torch's symmetric memory ({type(e).__name__}: {e}); "
                "allocate it with torch.distributed._symmetric_memory.empty") from e
        ptrs = list(handle.buffer_ptrs)
        # A view starts past its allocation's base by the same offset on every rank.
        offset = tensor.data_ptr() - ptrs[self.rank]
        table = torch.tensor([p + offset for p in ptrs], dtype=torch.int64,
                             device=tensor.device)
        self._tables[key] = (handle, table, tensor)
        return table

    def __call__(self, *args: Any, stream: int | None = None) -> Any:
        if len(args) != self._n:
            raise TypeError(f"kernel `{self.kernel.kernel.name}` takes {self._n} arguments "
                            f"(its own parameters), {len(args)} given")
        tables = [self.table(args[i], n) for i, n in zip(self._symm, self._names)]
        return self.kernel(*args, *tables, self.rank, self.world, 0, stream=stream)


def on_torch_symm(kernel: Any, group: Any = None) -> TorchSymmLauncher:
    """Call ``kernel`` (compiled from a ``@T.prim_func`` that calls ``T.use_peer_tables()``)
    with only its own parameters, its ``T.SymmTensor`` arguments being tensors of torch's
    symmetric memory (``torch.distributed._symmetric_memory.empty``): the peer tables come
    from ``symm_mem.rendezvous`` on ``group`` (the default group when None), made at a
    tensor's first use and kept with the tensor (which the launcher then holds), and ``rank``/``num_ranks`` from the group. Launches go to
    torch's current stream. Needs one process per GPU with torch.distributed initialized."""
    return TorchSymmLauncher(kernel, group)
