//! Intrinsics: operations below the tile level. The tile IR uses only `Extern` (the escape hatch
//! to a raw device function); lowering to thread-level IR introduces the rest.

use std::fmt;

/// An operation that is not arithmetic: a thread index, a barrier, a shuffle, an async copy, a
/// raw device function. Those with side effects appear as `Stmt::Eval(Call(..))`.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum Intrinsic {
    /// `threadIdx.x` (blocks are one-dimensional). i32.
    ThreadIdx,
    /// Escape hatch: a call of a device function by name, emitted verbatim. `pure` says it has
    /// no side effects (so it may be moved or removed).
    Extern { name: String, pure: bool },
    /// The address of the element a `Load` argument names (for async copies and atomics).
    AddressOf,
    /// `__syncthreads()`.
    SyncThreads,
    /// `__syncwarp()`.
    SyncWarp,
    /// `bar.sync id, threads`: a barrier among `threads` threads (whole warps) of the block,
    /// the ones that name barrier `id` (1 to 15; 0 is `__syncthreads`'). Warp-specialized
    /// kernels sync their consumer warps with it while the producer warps run on.
    NamedBarrier { id: u32, threads: u32 },
    /// `bar.arrive id, threads`: counts the calling warps into barrier `id`'s current phase
    /// without waiting; the phase completes once `threads` threads have synced or arrived.
    /// Warp-specialized consumers take turns issuing their tensor-core work with it (the
    /// `warp_specialize` stage's ping-pong). It orders no memory for the simulator.
    NamedBarrierArrive { id: u32, threads: u32 },
    /// `setmaxnreg.{inc,dec}.sync.aligned.u32 regs`: the calling warpgroup's registers per
    /// thread become `regs` (a multiple of 8, 24 to 256), so a warp-specialized kernel's
    /// producer warps hand registers to its consumer warps. Every thread of the warpgroup
    /// executes it.
    SetMaxNReg { inc: bool, regs: u32 },
    /// Marks the producer branch of a warp-specialized pipeline in tile IR (bool): the
    /// `warp_specialize` stage replaces the `if` it conditions with the producer and consumer
    /// warps' halves of the kernel. Never reaches code generation.
    ProducerWarps,
    /// `__shfl_xor_sync(full, value, lane_mask, width)`; args: value, lane_mask.
    ShflXor { width: u32 },
    /// `__shfl_down_sync(full, value, delta, width)`; args: value, delta.
    ShflDown { width: u32 },
    /// `__shfl_sync(full, value, src_lane, width)`; args: value, src_lane.
    ShflIdx { width: u32 },
    /// `cp.async.cg/ca.shared.global` of `bytes` bytes; args: dst address (shared), src address
    /// (global), predicate (false: the destination is zero-filled and nothing is read).
    CpAsync { bytes: u32 },
    /// `cp.async.commit_group`.
    CpAsyncCommit,
    /// `cp.async.wait_group n`.
    CpAsyncWait { n: u32 },
    /// Copy `lanes` consecutive elements (16 bytes at most) with one vector access; args: dst
    /// address, src address, and optionally a predicate (false: the destination is
    /// zero-filled and the source is not read). Both must be aligned to the vector size. The
    /// predicate form keeps a guarded copy branch-free around its addresses, which NVVM
    /// then shares between the unrolled copies of a tile.
    VecCopy { lanes: u32 },
    /// The 32 bytes from `a & !15` on, `a` the address of element `offset` of a global
    /// tensor of `count` elements, into eight 32-bit registers of a per-thread array: two
    /// 16-byte loads, or where those 32 bytes leave the tensor, its elements among them one
    /// by one (the rest zero). args: the window (the first of 8 `u32` of a local buffer), the
    /// tensor's first element, `offset`, `count` (both i64 elements). With
    /// [`Intrinsic::StoreShifted`] it copies 16 bytes from any element to an aligned
    /// destination in three vector accesses: how a kernel stages rows TMA cannot read (rows
    /// that are not whole 16-byte units) without an instruction per element.
    LoadWindow,
    /// The 16 bytes at byte `a & 15` of a window [`Intrinsic::LoadWindow`] loaded (`a` as
    /// there), stored as one vector: four funnel shifts of the window's words. args: the
    /// destination (a 16-byte-aligned global element), the window, the tensor's first
    /// element and `offset` (the `LoadWindow` ones, which say where the 16 bytes start).
    StoreShifted,
    /// Eight 2-byte elements from any element of a shared buffer (2-byte aligned) to a
    /// 16-byte-aligned shared destination: four 32-bit loads from the word holding the first
    /// element (a fifth where it starts mid-word, which reads the element after the eight),
    /// four funnel shifts, one 16-byte store. args: destination, source. How a kernel moves
    /// rows that landed at a run-time shift (`kernels::gemm_realign`) into place without an
    /// instruction per element.
    ShiftedVecCopy,
    /// `prefetch.global.L2` of the line holding a global element; args: its address. Writes
    /// no register, so a warp that issues wgmma does not wait for it (ptxas makes the next
    /// `WARPGROUP.ARRIVE` wait for every load still writing a register). A hint: the element
    /// need not be inside its tensor.
    PrefetchL2,
    /// `atomicAdd(addr, value)`; args: address, value. Returns nothing usable here.
    AtomicAdd,
    /// `*addr = max(*addr, value)` atomically; args as for `AtomicAdd`. Floats compare as
    /// IEEE values (NaN aside): backends without a float atomic max use the integer one on the
    /// bits (signed max for a non-negative value, unsigned min for a negative one).
    AtomicMax,
    /// `*addr = min(*addr, value)` atomically, as [`Intrinsic::AtomicMax`].
    AtomicMin,
    /// Debug output: every thread that runs it prints `msg`, its one argument's value and
    /// (on GPUs) its block and thread. A statement (`Eval`); CPU and CUDA (printf), the
    /// simulator (stdout).
    Print { msg: String },
    /// `ldmatrix.sync.aligned.m8n8.x{num}[.trans].shared.b16`: args: the shared address of
    /// this lane's 16-byte row (lanes 8j..8j+7 address the rows of matrix j; lanes past
    /// 8·num pass any valid address), and the address of the first of `2·num` consecutive
    /// 16-bit elements of a local buffer that receive this lane's `num` registers.
    Ldmatrix { num: u32, trans: bool },
    /// `mma.sync.aligned.m16n8k16.row.col.f32.{bf16|f16}.{bf16|f16}.f32`: D = A·B + C.
    /// args: addresses (in local buffers) of D (4 f32), A (8 elements of `ab`), B (4
    /// elements of `ab`), C (4 f32). D may alias C. Fragment layouts are PTX's (see
    /// shared/design/layout-algebra.md).
    MmaSync { ab: crate::dtype::DType },
    /// `wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ab}.{ab}` (fp8: `k32.f32.{ab}.{b}`, the
    /// slices 32 elements deep, K-major, A in shared memory) for the warpgroup of the
    /// calling warp (all 128 threads issue it): D = A·B (+ D when `scale_d` is 1), issued
    /// asynchronously — D (and A, when it is in registers) is not to be touched before
    /// `WgmmaWait`. args: address of D (`n/2` f32 in a local buffer, the mma.sync accumulator
    /// layout of 16 rows per warp); A: with `a_regs`, the address of this thread's 8 elements
    /// (the mma.sync A fragment of its warp's 16 rows), else the shared address of the first
    /// element of the warpgroup's 64 × 16 slice, K-major or, with `a_mn_major`, MN-major (16
    /// rows of k × 64 m, one 64-column block); B: the shared address of the first
    /// element of the slice, K-major (n rows × 16 k) or, with `b_mn_major`, MN-major (16 rows
    /// of k × n, in 64-column blocks `b_lbo` bytes apart); `scale_d` (i32, 0 or 1); `b_lbo`
    /// (i32 bytes, read only for MN-major B). Operand tiles have 64-element (128-byte) rows
    /// under the 128-byte swizzle. With `steps` > 1, the later steps' A and B addresses follow
    /// as further (A, B) argument pairs; they always accumulate.
    Wgmma(WgmmaOp),
    /// `wgmma.fence.sync.aligned`: orders register accesses before the next wgmma. args: the
    /// addresses of the register arrays the wgmmas will use (the accumulator, then A when it is
    /// in registers), kept in place across the fence.
    WgmmaFence,
    /// `wgmma.commit_group.sync.aligned`.
    WgmmaCommit,
    /// `wgmma.wait_group.sync.aligned n`: all but the newest `n` groups are complete. args: the
    /// addresses of the register arrays the wgmmas used (as for `WgmmaFence`): the accumulator
    /// is readable after the wait, and A's registers stay live until it. `pinned`: the work
    /// the program put before the wait is meant to run beside the pending groups, so code
    /// generation keeps the assembler from raising the wait above it (see the PTX printer).
    WgmmaWait { n: u32, pinned: bool },
    /// `fence.proxy.async.shared::cta`: this thread's shared-memory writes become visible to
    /// the async proxy (which wgmma reads through).
    FenceProxyAsync,
    /// `fence.proxy.async.global`: global memory this thread is ordered after (its own
    /// writes, and what it acquired: a peer's puts) becomes visible to its later async-proxy
    /// reads (TMA loads). Generic-proxy ordering alone (a release/acquire pair) does not order
    /// the async proxy.
    FenceProxyAsyncGlobal,
    /// `griddepcontrol.launch_dependents`: the kernel launched after this one in the stream
    /// (with programmatic stream serialization) may start its blocks once every block of
    /// this grid has executed it or exited. It orders no memory: the dependent still waits
    /// (`GridDependencyWait`) for this grid to complete before touching memory.
    LaunchDependents,
    /// `griddepcontrol.wait`: waits until the grids this one depends on (the kernel before it
    /// in the stream, when launched with programmatic stream serialization) have completed
    /// and their memory is visible; at once otherwise. No global memory may be touched before
    /// it: the kernel before may still be writing or reading it.
    GridDependencyWait,
    /// `mbarrier.init.shared::cta.b64 [bar], count`: a barrier in shared memory (a `u64`
    /// element) at phase 0, whose phases complete when `count` arrivals have been made and
    /// every expected transaction byte has landed. args: the barrier's address.
    MbarrierInit { count: u32 },
    /// `fence.mbarrier_init.release.cluster`: barrier initializations become visible to the
    /// async proxy (TMA) before a block barrier hands them to the other threads.
    FenceMbarrierInit,
    /// `mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], bytes`: one arrival, and `bytes`
    /// more transaction bytes the current phase waits for. args: the barrier's address, the
    /// byte count (i32).
    MbarrierArriveExpectTx,
    /// `mbarrier.arrive.shared::cta.b64 _, [bar]`: one arrival. args: the barrier's address.
    MbarrierArrive,
    /// `mbarrier.try_wait.parity` in a loop: waits until the phase of the barrier with parity
    /// `parity` has completed (its data is then visible to the waiting thread). args: the
    /// barrier's address, the parity (i32, 0 or 1).
    MbarrierWait,
    /// `cp.async.bulk.tensor.{rank}d.shared::cluster.global.mbarrier::complete_tx::bytes`: the
    /// tensor-memory accelerator copies a box of `box_dims` elements (one extent per tensor
    /// dim, outermost first) of a global tensor, starting at the given coordinates, into
    /// shared memory, asynchronously; elements outside the tensor land as zeros. The box lands
    /// row-major (innermost dim contiguous) at the destination, with the `swizzle` (0, 32, 64
    /// or 128 bytes: the 16-byte chunks of each `swizzle`-byte row XOR-ed with the row index
    /// modulo `swizzle / 16`, on absolute shared addresses — the destination is aligned to
    /// 128·`swizzle`/16 bytes), and its bytes (the whole box, zeros included) complete
    /// transactions on the barrier. The tensor's descriptor (a `CUtensorMap` kernel parameter)
    /// is built at launch from the tensor argument. args: the destination's shared address,
    /// the address of the tensor's first element, the barrier's address, then one coordinate
    /// per tensor dim (i32, outermost first). With `multicast`
    /// (`.multicast::cluster`), the box lands at the same shared offset in every block of the
    /// cluster named by a trailing mask argument (i32, bit `r` for the block of cluster rank
    /// `r`), and completes transactions on each one's barrier at the barrier's offset.
    TmaLoad {
        box_dims: Vec<u32>,
        swizzle: u32,
        multicast: bool,
    },
    /// `%cluster_ctarank`: this block's rank in its cluster (i32).
    ClusterCtaRank,
    /// `barrier.cluster.arrive.release` then `barrier.cluster.wait.acquire`: every thread of
    /// every block of the cluster arrives before any goes on (exited threads count as
    /// arrived); what each wrote to shared memory before is visible to all after. A cluster
    /// kernel syncs so after initializing its barriers (before any block signals a peer's) and
    /// before it exits (no peer may still write into its shared memory).
    ClusterSync,
    /// `mapa` + `mbarrier.arrive.shared::cluster.b64` (release at CTA scope): one arrival on
    /// the barrier at the same shared offset in the cluster's block of rank `rank`. For
    /// releasing what the arriving threads read through the async proxy and have waited for
    /// (a pipeline stage wgmma read). args: the barrier's (local) address, the rank (i32).
    MbarrierArriveCluster,
    /// `cp.async.bulk.tensor.{rank}d.global.shared::cta.bulk_group`: the tensor-memory
    /// accelerator copies a box of `box_dims` elements from shared memory (laid out as
    /// `TmaLoad` lands one, with the `swizzle`) into a global tensor at the given
    /// coordinates, asynchronously; elements outside the tensor are not written. The copy
    /// joins the calling thread's open bulk group (`BulkCommit` closes it); the shared bytes
    /// may be overwritten only after a `BulkWait` with `read` retires the group. The writes
    /// are visible to other kernels once the kernel ends (codegen waits before it exits).
    /// Shared-memory writes the copy reads must be fenced for the async proxy
    /// (`FenceProxyAsync`) before a barrier that precedes it. args: the source's shared
    /// address, the address of the tensor's first element, then one coordinate per tensor
    /// dim (i32, outermost first).
    TmaStore { box_dims: Vec<u32>, swizzle: u32 },
    /// `cp.async.bulk.global.shared::cta.bulk_group`: the bulk-copy engine copies `bytes`
    /// contiguous bytes of shared memory to global memory, asynchronously; both addresses
    /// 16-byte aligned, `bytes` a multiple of 16. Joins the calling thread's bulk group and
    /// is waited for as a `TmaStore` is (the shared bytes stay read until a `BulkWait` with
    /// `read`; shared writes it reads fenced for the async proxy). For rows that no tensor map
    /// can address (not whole 16-byte units): one copy a row, from the row's first aligned
    /// element. args: the global destination's address, the shared source's address, the
    /// byte count (i32).
    BulkStore,
    /// `cp.async.bulk.commit_group`: closes the calling thread's bulk group.
    BulkCommit,
    /// `cp.async.bulk.wait_group{.read} n`: waits until at most `n` of the calling thread's
    /// bulk groups are pending — with `read`, until their sources have been read (the shared
    /// bytes may be reused), else until their writes are done.
    BulkWait { n: u32, read: bool },
    /// The index of the calling thread's wave (warp) in its block, `thread_idx / warp size`,
    /// known to the compiler to be the same for the whole wave (AMD: kept in a scalar
    /// register). i32.
    WaveIdx,
    /// AMD `v_mfma_f32_{m}x{n}x{k}_{ab}` for the calling wave (all 64 lanes issue it): D =
    /// A·B + C. args: the addresses (in local buffers) of D (`m·n/64` f32), A (`m·k/64`
    /// elements of `ab`), B (`n·k/64`), C (as D; may alias D). Lane `l`'s elements (`v` the
    /// element index): 16×16×K: A[i][k] with i = l % 16, k = (K/4)·(l / 16) + v; B[k][j] with
    /// j = l % 16, k likewise; D[i][j] with j = l % 16, i = 4·(l / 16) + v. 32×32×K: A: i =
    /// l % 32, k = (K/2)·(l / 32) + v; B likewise; D: j = l % 32, i = 8·(v / 4) + 4·(l / 32)
    /// + v % 4.
    Mfma(MfmaOp),
    /// AMD `buffer_load_{dword,dwordx2,dwordx4} … lds` for the calling wave (all 64 lanes issue
    /// it): lane `l` reads `bytes` from `tensor + voffset + soffset` (byte offsets) and they land
    /// in shared memory at `base + l·bytes`. args: `base` (the shared address of lane 0's slot,
    /// the same in every lane), `tensor` (the address of a global tensor's first element),
    /// `voffset` (i32, this lane's bytes), `soffset` (i32 bytes, the same in every lane), `pred`
    /// (false: the lane's bytes land as zeros and nothing is read). A read past the tensor's
    /// end also lands as zeros. Asynchronous: the bytes are only guaranteed in shared memory
    /// after this thread's `WaitVmcnt` that retires the load; other threads see them after a
    /// barrier that follows that wait.
    BufferLoadLds { bytes: u32 },
    /// AMD `buffer_load_{dword,dwordx2,dwordx4}` into this thread's registers: `bytes` from
    /// `tensor + voffset + soffset` (byte offsets) into the local array at `dst`. args: `dst`
    /// (a local address), `tensor` (the address of a global tensor's first element),
    /// `voffset` (i32, this thread's bytes), `soffset` (i32 bytes, the same across the wave),
    /// `pred` (false: zeros, nothing read). Each dword past the tensor's end also reads as
    /// zero, so a predicate need not test what the range check covers — and no branch is
    /// needed around the load. Synchronous for the program (the compiler waits before the
    /// registers are used).
    BufferLoad { bytes: u32 },
    /// AMD `ds_read_b64_tr_b16` (gfx950) for the calling wave (all 64 lanes issue it): each
    /// lane names 8 bytes of shared memory (four 16-bit elements, 8-byte aligned), and within
    /// each group of 16 lanes `g·16 ..` the block is transposed: lane `l`'s element `n` is
    /// element `l % 4` of the 8 bytes lane `g·16 + (l / 4) % 4 + 4·n` names. args: `dst` (a
    /// local address, 4 elements of a 16-bit type), `src` (this lane's shared address).
    LdsReadTr16,
    /// AMD `s_waitcnt vmcnt(n)`: all but the newest `n` of this thread's buffer loads have
    /// landed.
    WaitVmcnt { n: u32 },
    /// AMD `s_waitcnt lgkmcnt(0); s_barrier`: a block barrier for shared memory (LDS). It does
    /// not wait for outstanding buffer loads (direct-to-LDS copies land at their `WaitVmcnt`)
    /// and does not order global memory.
    BarrierLds,
    /// AMD `__builtin_amdgcn_sched_barrier(mask)`: the compiler's instruction scheduler moves
    /// nothing across it (mask 0). No effect on what the program computes.
    SchedBarrier { mask: u32 },
    /// AMD `s_setprio prio`: the wave's issue priority. args: addresses of register arrays the
    /// instruction is pinned to (the compiler moves no access of them across it). No effect on
    /// what the program computes.
    SetPrio { prio: u32 },
    /// `ld.{sem}.{scope}.global` of one element of a global buffer (the memory-model load that
    /// signals and flags need). args: the element (a `Load`), and optionally the rank whose
    /// copy of a symmetric buffer to read (i32; absent: this rank's own). The value.
    MemLoad { sem: MemSem, scope: MemScope },
    /// `st.{sem}.{scope}.global` of one element. args: the element (a `Load`), the value, and
    /// optionally the rank whose copy of a symmetric buffer to write.
    MemStore { sem: MemSem, scope: MemScope },
    /// `red.{sem}.{scope}.global.add` on one element (an integer or f32). args: the element,
    /// the value to add, and optionally the rank whose copy to update.
    MemRedAdd { sem: MemSem, scope: MemScope },
    /// `atom.{sem}.{scope}.global.add` on one integer element: as `MemRedAdd`, and the value
    /// is the element's old value. args: the element, the value to add, and optionally the
    /// rank whose copy to update.
    MemAtomAdd { sem: MemSem, scope: MemScope },
    /// `fence.acq_rel.{scope}` (with `sc`: `fence.sc.{scope}`): orders this thread's memory
    /// accesses before the fence against those after it, as seen at `scope`.
    Fence { scope: MemScope, sc: bool },
    /// Spin until `element cmp value` holds, reading the element with `ld.acquire.{scope}`
    /// (what the thread reads after the wait is ordered after the store that satisfied it).
    /// args: the element (a `Load` of an integer global buffer), the value, and optionally the
    /// rank whose copy of a symmetric buffer to watch. With `wrapping`, the comparison is of
    /// `element − value` (in the element's width, as a signed number) with zero — serial-number
    /// arithmetic, so a counter that wraps around past 2^31 keeps comparing right as long as
    /// it stays within 2^(bits−1) of the value.
    WaitUntil {
        cmp: crate::expr::CmpOp,
        scope: MemScope,
        wrapping: bool,
    },
    /// Copy `lanes` consecutive elements (16 bytes at most, aligned to the vector) between
    /// global buffers, one side on a peer: with `put`, from this rank's source into the
    /// peer's copy of the destination (a symmetric buffer); else from the peer's copy of the
    /// source (symmetric) into this rank's destination. args: the destination element, the
    /// source element, the peer's rank (i32), and an offset (i64 elements, row-major) added to
    /// both elements — a copy loop passes its start elements unchanged and only the offset
    /// varies, so no index is re-derived per access.
    ///
    /// With `unroll` U > 1 it copies U such chunks, `stride` elements apart (a fifth
    /// argument, i64), of which the first `valid` (a sixth, i32, 1..=U) are copied: every load
    /// is issued before any store, so U loads are in flight at once — a pull from a peer
    /// waits a round trip over NVLink per load, and one load in flight per thread leaves the
    /// link mostly idle.
    PeerCopy { lanes: u32, put: bool, unroll: u32 },
    /// The calling warp copies `count` elements (i64) between global buffers, one side on a
    /// peer as in `PeerCopy`: NVSHMEM's `nvshmemx_{put,get}mem_warp`, one call for the warp's
    /// whole run (over a network one message, not one per 16 bytes). Every lane calls it with
    /// the same arguments. A block copy is split into one run per warp (NVSHMEM's block calls
    /// would take the launch's whole block, which a warp-specialized kernel's consumers are
    /// not). args: the destination element, the source element, the peer's rank (i32), an
    /// offset (i64 elements added to both), the count. Only in kernels that reach peers
    /// through NVSHMEM (see `ViaNvshmem`).
    PeerCopyWarp { put: bool },
    /// Whether the kernel reaches its peers through NVSHMEM (`DistAttrs::nvshmem`): a bool the
    /// first pass replaces by that constant, so a block copy written as
    /// `if via_nvshmem { PeerCopyWarp } else { the SM copy loop }` keeps one form.
    ViaNvshmem,
}

/// A TMA copy's operands (`TmaLoad`, `TmaStore`), split from its argument list in one place
/// for every backend: the shared end, the tensor, the barrier (loads), one coordinate per
/// box dim (outermost first), then the cluster mask (multicast loads).
#[derive(Clone, Copy, Debug)]
pub struct TmaOperands<'a> {
    /// The destination of a load, the source of a store (a shared address).
    pub shared: &'a crate::expr::Expr,
    /// The address of the tensor's first element.
    pub tensor: &'a crate::expr::Expr,
    /// The barrier a load completes its transactions on; `None` for a store.
    pub barrier: Option<&'a crate::expr::Expr>,
    pub coords: &'a [crate::expr::Expr],
    /// The mask of a multicast load's blocks.
    pub mask: Option<&'a crate::expr::Expr>,
}

impl Intrinsic {
    /// `wgmma.wait_group 0`, unpinned: the wait that drains every group (after a pipeline).
    pub const WGMMA_WAIT_ALL: Intrinsic = Intrinsic::WgmmaWait {
        n: 0,
        pinned: false,
    };

    /// How many arguments a TMA copy takes (`None` for other intrinsics).
    pub fn tma_arg_count(&self) -> Option<usize> {
        match self {
            Intrinsic::TmaLoad {
                box_dims,
                multicast,
                ..
            } => Some(3 + box_dims.len() + usize::from(*multicast)),
            Intrinsic::TmaStore { box_dims, .. } => Some(2 + box_dims.len()),
            _ => None,
        }
    }

    /// The operands of a TMA copy called with `args` (`None` for other intrinsics, or when
    /// the count is not [`tma_arg_count`](Self::tma_arg_count)).
    pub fn tma_operands<'a>(&self, args: &'a [crate::expr::Expr]) -> Option<TmaOperands<'a>> {
        if Some(args.len()) != self.tma_arg_count() {
            return None;
        }
        let (load, rank, multicast) = match self {
            Intrinsic::TmaLoad {
                box_dims,
                multicast,
                ..
            } => (true, box_dims.len(), *multicast),
            Intrinsic::TmaStore { box_dims, .. } => (false, box_dims.len(), false),
            _ => return None,
        };
        let fixed = if load { 3 } else { 2 };
        Some(TmaOperands {
            shared: &args[0],
            tensor: &args[1],
            barrier: load.then(|| &args[2]),
            coords: &args[fixed..fixed + rank],
            mask: multicast.then(|| &args[fixed + rank]),
        })
    }
}

/// The ordering a memory-model load, store or reduction asks for (PTX's `.sem`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum MemSem {
    /// A plain access (no ordering; may be cached or merged).
    Weak,
    /// `.volatile`: not cached or merged, but no ordering either.
    Volatile,
    /// `.relaxed`: a single-copy atomic access, no ordering.
    Relaxed,
    /// `.acquire` (loads): later accesses of this thread stay after it.
    Acquire,
    /// `.release` (stores, reductions): earlier accesses of this thread stay before it.
    Release,
    /// `.acq_rel` (reductions).
    AcqRel,
}

impl MemSem {
    pub fn name(self) -> &'static str {
        match self {
            MemSem::Weak => "weak",
            MemSem::Volatile => "volatile",
            MemSem::Relaxed => "relaxed",
            MemSem::Acquire => "acquire",
            MemSem::Release => "release",
            MemSem::AcqRel => "acq_rel",
        }
    }
    pub fn acquires(self) -> bool {
        matches!(self, MemSem::Acquire | MemSem::AcqRel)
    }
    pub fn releases(self) -> bool {
        matches!(self, MemSem::Release | MemSem::AcqRel)
    }
}

/// The set of threads a memory-model operation orders against (PTX's `.scope`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum MemScope {
    /// The threads of this block.
    Cta,
    /// The threads of this GPU.
    Gpu,
    /// Every thread of the system: other GPUs (peers' copies of symmetric buffers) and the
    /// host.
    Sys,
}

impl MemScope {
    pub fn name(self) -> &'static str {
        match self {
            MemScope::Cta => "cta",
            MemScope::Gpu => "gpu",
            MemScope::Sys => "sys",
        }
    }
}

/// The variant of an AMD MFMA instruction: its shape and operand type (f32 accumulate).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct MfmaOp {
    pub m: u32,
    pub n: u32,
    pub k: u32,
    pub ab: crate::dtype::DType,
}

impl MfmaOp {
    /// `mfma_f32_{m}x{n}x{k}_{ab}`.
    pub fn name(&self) -> String {
        format!("mfma_f32_{}x{}x{}_{}", self.m, self.n, self.k, self.ab)
    }
    /// Operand elements per lane (A and B).
    pub fn operand_elems(&self) -> u32 {
        self.m * self.k / 64
    }
    /// Accumulator values per lane.
    pub fn acc_elems(&self) -> u32 {
        self.m * self.n / 64
    }
}

/// The variant of a `wgmma.mma_async` the `Wgmma` intrinsic issues: its shape, operand types,
/// where its operands live, and how many k steps go out back to back. A step reads 32 bytes
/// of K: k16 for 16-bit operands, k32 for fp8 (whose A and B types may differ, e4m3 × e5m2).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct WgmmaOp {
    pub n: u32,
    /// A's element type (and B's, for 16-bit operands).
    pub ab: crate::dtype::DType,
    /// B's element type: `ab`, except for an fp8 A with the other fp8 format.
    pub b: crate::dtype::DType,
    /// A is this thread's register fragment, not a shared slice.
    pub a_regs: bool,
    /// A (in shared memory) is stored [K, M] (`imm-trans-a`).
    pub a_mn_major: bool,
    /// B is stored [K, N] (`imm-trans-b`), in 64-column blocks `b_lbo` bytes apart.
    pub b_mn_major: bool,
    /// Consecutive k16 steps issued back to back on the same accumulator.
    pub steps: u32,
}

impl WgmmaOp {
    /// The K one instruction covers: 32 bytes of A's element type.
    pub fn k(&self) -> u32 {
        32 / self.ab.bytes().max(1) as u32
    }

    /// fp8 operands (k32, both K-major, A from shared memory, no transpose immediates).
    pub fn is_fp8(&self) -> bool {
        self.ab.is_fp8()
    }

    /// `wgmma_m64n{n}k{k}_{ab}` (`_{b}` after it when B's type differs) with `_rs` (A in
    /// registers), `_ta` / `_tb` (MN-major A / B) and `_x{steps}` when several steps go out
    /// together.
    pub fn name(&self) -> String {
        format!(
            "wgmma_m64n{}k{}_{}{}{}{}{}{}",
            self.n,
            self.k(),
            self.ab,
            if self.b != self.ab {
                format!("_{}", self.b)
            } else {
                String::new()
            },
            if self.a_regs { "_rs" } else { "" },
            if self.a_mn_major { "_ta" } else { "" },
            if self.b_mn_major { "_tb" } else { "" },
            if self.steps > 1 {
                format!("_x{}", self.steps)
            } else {
                String::new()
            }
        )
    }

    /// The same instruction, one step at a time.
    pub fn single(self) -> WgmmaOp {
        WgmmaOp { steps: 1, ..self }
    }
}

impl Intrinsic {
    pub fn name(&self) -> String {
        match self {
            Intrinsic::ThreadIdx => "thread_idx".into(),
            Intrinsic::Extern { name, .. } => name.clone(),
            Intrinsic::AddressOf => "address_of".into(),
            Intrinsic::SyncThreads => "sync_threads".into(),
            Intrinsic::SyncWarp => "sync_warp".into(),
            Intrinsic::NamedBarrier { id, threads } => format!("named_barrier<{id}, {threads}>"),
            Intrinsic::NamedBarrierArrive { id, threads } => {
                format!("named_barrier_arrive<{id}, {threads}>")
            }
            Intrinsic::SetMaxNReg { inc, regs } => {
                format!("setmaxnreg_{}<{regs}>", if *inc { "inc" } else { "dec" })
            }
            Intrinsic::ProducerWarps => "producer_warps".into(),
            Intrinsic::ShflXor { width } => format!("shfl_xor<{width}>"),
            Intrinsic::ShflDown { width } => format!("shfl_down<{width}>"),
            Intrinsic::ShflIdx { width } => format!("shfl_idx<{width}>"),
            Intrinsic::CpAsync { bytes } => format!("cp_async<{bytes}>"),
            Intrinsic::CpAsyncCommit => "cp_async_commit".into(),
            Intrinsic::CpAsyncWait { n } => format!("cp_async_wait<{n}>"),
            Intrinsic::VecCopy { lanes } => format!("vec_copy<{lanes}>"),
            Intrinsic::LoadWindow => "load_window".into(),
            Intrinsic::StoreShifted => "store_shifted".into(),
            Intrinsic::ShiftedVecCopy => "shifted_vec_copy".into(),
            Intrinsic::PrefetchL2 => "prefetch_l2".into(),
            Intrinsic::AtomicAdd => "atomic_add".into(),
            Intrinsic::AtomicMax => "atomic_max".into(),
            Intrinsic::AtomicMin => "atomic_min".into(),
            Intrinsic::Print { .. } => "print".into(),
            Intrinsic::Ldmatrix { num, trans } => {
                format!("ldmatrix_x{num}{}", if *trans { "_trans" } else { "" })
            }
            Intrinsic::MmaSync { ab } => format!("mma_m16n8k16_{ab}"),
            Intrinsic::Wgmma(w) => w.name(),
            Intrinsic::WgmmaFence => "wgmma_fence".into(),
            Intrinsic::WgmmaCommit => "wgmma_commit".into(),
            Intrinsic::WgmmaWait { n, pinned: false } => format!("wgmma_wait<{n}>"),
            Intrinsic::WgmmaWait { n, pinned: true } => format!("wgmma_wait_pinned<{n}>"),
            Intrinsic::FenceProxyAsync => "fence_proxy_async".into(),
            Intrinsic::FenceProxyAsyncGlobal => "fence_proxy_async_global".into(),
            Intrinsic::LaunchDependents => "launch_dependents".into(),
            Intrinsic::GridDependencyWait => "grid_dependency_wait".into(),
            Intrinsic::MbarrierInit { count } => format!("mbarrier_init<{count}>"),
            Intrinsic::FenceMbarrierInit => "fence_mbarrier_init".into(),
            Intrinsic::MbarrierArriveExpectTx => "mbarrier_arrive_expect_tx".into(),
            Intrinsic::MbarrierArrive => "mbarrier_arrive".into(),
            Intrinsic::MbarrierWait => "mbarrier_wait".into(),
            Intrinsic::TmaLoad {
                box_dims,
                swizzle,
                multicast,
            } => {
                let b: Vec<String> = box_dims.iter().map(|d| d.to_string()).collect();
                let mc = if *multicast { ", multicast" } else { "" };
                format!("tma_load<[{}], sw{swizzle}{mc}>", b.join(", "))
            }
            Intrinsic::ClusterCtaRank => "cluster_ctarank".into(),
            Intrinsic::ClusterSync => "cluster_sync".into(),
            Intrinsic::MbarrierArriveCluster => "mbarrier_arrive_cluster".into(),
            Intrinsic::TmaStore { box_dims, swizzle } => {
                let b: Vec<String> = box_dims.iter().map(|d| d.to_string()).collect();
                format!("tma_store<[{}], sw{swizzle}>", b.join(", "))
            }
            Intrinsic::BulkStore => "bulk_store".into(),
            Intrinsic::BulkCommit => "bulk_commit".into(),
            Intrinsic::BulkWait { n, read } => {
                format!("bulk_wait{}<{n}>", if *read { "_read" } else { "" })
            }
            Intrinsic::WaveIdx => "wave_idx".into(),
            Intrinsic::Mfma(m) => m.name(),
            Intrinsic::BufferLoadLds { bytes } => format!("buffer_load_lds<{bytes}>"),
            Intrinsic::BufferLoad { bytes } => format!("buffer_load<{bytes}>"),
            Intrinsic::LdsReadTr16 => "ds_read_tr16_b64".into(),
            Intrinsic::WaitVmcnt { n } => format!("wait_vmcnt<{n}>"),
            Intrinsic::BarrierLds => "barrier_lds".into(),
            Intrinsic::SchedBarrier { mask } => format!("sched_barrier<{mask}>"),
            Intrinsic::SetPrio { prio } => format!("set_prio<{prio}>"),
            Intrinsic::MemLoad { sem, scope } => format!("ld_{}_{}", sem.name(), scope.name()),
            Intrinsic::MemStore { sem, scope } => format!("st_{}_{}", sem.name(), scope.name()),
            Intrinsic::MemRedAdd { sem, scope } => {
                format!("red_add_{}_{}", sem.name(), scope.name())
            }
            Intrinsic::MemAtomAdd { sem, scope } => {
                format!("atom_add_{}_{}", sem.name(), scope.name())
            }
            Intrinsic::Fence { scope, sc } => {
                format!(
                    "fence_{}_{}",
                    if *sc { "sc" } else { "acq_rel" },
                    scope.name()
                )
            }
            Intrinsic::WaitUntil {
                cmp,
                scope,
                wrapping,
            } => {
                let kind = if *wrapping { "counter" } else { "until" };
                format!("wait_{kind}_{}_{}", cmp.name(), scope.name())
            }
            Intrinsic::PeerCopy { lanes, put, unroll } => {
                let x = if *unroll > 1 {
                    format!("x{unroll}")
                } else {
                    String::new()
                };
                format!("{}<{lanes}>{x}", if *put { "peer_put" } else { "peer_get" })
            }
            Intrinsic::PeerCopyWarp { put } => {
                format!("peer_{}_warp", if *put { "put" } else { "get" })
            }
            Intrinsic::ViaNvshmem => "via_nvshmem".into(),
        }
    }

    /// Free of side effects: may be reordered, duplicated or dropped.
    pub fn is_pure(&self) -> bool {
        match self {
            Intrinsic::ThreadIdx
            | Intrinsic::AddressOf
            | Intrinsic::WaveIdx
            | Intrinsic::ViaNvshmem => true,
            Intrinsic::Extern { pure, .. } => *pure,
            _ => false,
        }
    }
}

impl fmt::Display for Intrinsic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::Expr;

    #[test]
    fn tma_operands_split_loads_stores_and_masks() {
        let args: Vec<Expr> = (0..7).map(Expr::int).collect();
        let load = Intrinsic::TmaLoad {
            box_dims: vec![64, 128],
            swizzle: 128,
            multicast: true,
        };
        assert_eq!(load.tma_arg_count(), Some(6));
        assert!(load.tma_operands(&args).is_none(), "7 arguments for 6");
        let o = load.tma_operands(&args[..6]).expect("six");
        assert_eq!(o.barrier, Some(&args[2]));
        assert_eq!(o.coords, &args[3..5]);
        assert_eq!(o.mask, Some(&args[5]));
        let store = Intrinsic::TmaStore {
            box_dims: vec![64, 128],
            swizzle: 128,
        };
        let o = store.tma_operands(&args[..4]).expect("four");
        assert_eq!((o.shared, o.tensor), (&args[0], &args[1]));
        assert!(o.barrier.is_none() && o.mask.is_none());
        assert_eq!(o.coords, &args[2..4]);
        assert!(Intrinsic::SyncThreads.tma_operands(&[]).is_none());
    }
}
