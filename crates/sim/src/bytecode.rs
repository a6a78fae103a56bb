//! The simulator's program form: a flat list of instructions with jumps, one per kernel launch.
//!
//! A flat program lets every thread keep just a program counter, so a thread can stop at a
//! barrier or a warp collective and resume there later; a tree walker would need a stack of
//! loop states per thread. Expressions stay trees ([`E`]) with variables resolved to register
//! numbers and buffers to indices in [`Program::bufs`], so evaluating one does no lookups.

use tl_ir::eval::Value;
use tl_ir::{BinOp, CmpOp, DType, Scope, Span, UnOp};

/// A compiled expression. Every variable is a register of the executing thread; symbolic sizes
/// and scalar parameters are constants by the time the program exists.
#[derive(Clone, Debug)]
pub enum E {
    Const(Value),
    Reg(u32),
    ThreadIdx,
    /// `thread_idx / warp_size`.
    WaveIdx,
    /// This block's rank in its cluster (`%cluster_ctarank`: the block's x index modulo the
    /// cluster's size; 0 without clusters).
    ClusterCtaRank,
    /// `op` computed in `dt` (narrow floats compute in f32, see `compile::compute_dtype`).
    Bin(BinOp, DType, Box<(E, E)>),
    /// A comparison of operands of dtype `dt`.
    Cmp(CmpOp, DType, Box<(E, E)>),
    And(Box<(E, E)>),
    Or(Box<(E, E)>),
    Un(UnOp, DType, Box<E>),
    /// Both arms evaluated.
    Select(Box<(E, E, E)>),
    /// Only the taken arm evaluated.
    IfThenElse(Box<(E, E, E)>),
    Cast(DType, Box<E>),
    Load(Box<MemRef>),
    /// A memory-model load (`ld.{sem}.{scope}`) of an element, on the rank `peer` evaluates to
    /// (this rank's copy when absent).
    MemLoad(Box<MemRef>, Option<Box<E>>, tl_ir::MemSem, tl_ir::MemScope),
    /// An atomic add of `value` (the second) to an element on rank `peer`; the old value.
    MemAtomAdd(Box<(MemRef, E, Option<E>)>, tl_ir::MemSem, tl_ir::MemScope),
    /// A known pure device function (`Extern { pure: true }`).
    Pure(PureFn, DType, Vec<E>),
}

/// The device functions the simulator knows how to evaluate.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PureFn {
    Unary(UnOp),
    Min,
    Max,
    Div,
}

/// An element of a buffer: `bufs[buf]` at `idx` (one index: a flat element offset; else one
/// index per dimension).
#[derive(Clone, Debug)]
pub struct MemRef {
    pub buf: u32,
    pub idx: Vec<E>,
}

/// Which shuffle.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ShflKind {
    Xor,
    Down,
    Idx,
}

/// One instruction. `pc` of an instruction doubles as its diagnostic site: [`Program::sites`]
/// holds its span and name.
#[derive(Clone, Debug)]
pub enum Instr {
    /// `regs[reg] = value` (a `Let`, or a store to a `Var` buffer).
    Set {
        reg: u32,
        value: E,
    },
    /// A store into global, shared or local memory (rounded to the element type).
    Store {
        dst: MemRef,
        value: E,
    },
    /// Evaluate for side effects only (bounds checks of loads, pure calls).
    Eval(E),
    Jump(u32),
    /// Jump to `target` when `cond` is false.
    BranchIfNot {
        cond: E,
        target: u32,
    },
    /// `var = min; end = min + extent`.
    ForInit {
        var: u32,
        end: u32,
        min: E,
        extent: E,
    },
    /// Leave the loop (jump to `exit`) once `var >= end`.
    ForTest {
        var: u32,
        end: u32,
        exit: u32,
    },
    /// `var += 1` (wrapped to `dtype`), then jump to the loop's test at `test`.
    ForStep {
        var: u32,
        dtype: DType,
        test: u32,
    },
    SyncThreads,
    /// AMD `s_barrier` for LDS: a block barrier that orders shared memory only (the block's
    /// shared epoch advances, the global one does not).
    BarrierLds,
    SyncWarp,
    /// `bar.sync id, threads`: waits until `threads` threads of the block wait at barrier `id`.
    NamedBarrier {
        id: u32,
        threads: u32,
    },
    /// `bar.arrive id, threads`: counts the thread into barrier `id`'s current phase and goes
    /// on.
    NamedArrive {
        id: u32,
        threads: u32,
    },
    /// Warp collective: `regs[dst] = shfl(value, arg)` over the warp's lanes.
    Shfl {
        kind: ShflKind,
        width: u32,
        dst: u32,
        value: E,
        arg: E,
    },
    /// Warp collective `ldmatrix.x{num}[.trans]`.
    Ldmatrix {
        num: u32,
        trans: bool,
        src: MemRef,
        dst: MemRef,
    },
    /// Wave collective AMD `ds_read_b64_tr_b16`: `src` is this lane's 8 shared bytes, `dst`
    /// receives 4 elements of the 16-lane group's transposed 4 × 16 block.
    LdsReadTr16 {
        src: MemRef,
        dst: MemRef,
    },
    /// Warp collective `mma.sync.m16n8k16`, D = A·B + C.
    Mma {
        ab: DType,
        d: MemRef,
        a: MemRef,
        b: MemRef,
        c: MemRef,
    },
    /// Warp part of a warpgroup `wgmma.m64n{n}k16`: this warp's 16 rows of D, held back until
    /// the thread's `WgmmaWait` retires the group.
    Wgmma {
        /// One step (a multi-step issue compiles to several of these in a row).
        op: tl_ir::WgmmaOp,
        d: MemRef,
        a: MemRef,
        b: MemRef,
        scale: E,
        b_lbo: E,
    },
    WgmmaCommit,
    WgmmaWait(u32),
    /// Wave collective AMD `v_mfma_f32_{m}x{n}x{k}`, D = A·B + C over the 64 lanes.
    Mfma {
        op: tl_ir::MfmaOp,
        d: MemRef,
        a: MemRef,
        b: MemRef,
        c: MemRef,
    },
    /// Wave collective AMD `buffer_load … lds`: lane `l`'s `bytes` from `tensor` at byte
    /// `voffset + soffset` land at `base + l·bytes`, each lane's load an asynchronous copy of
    /// its own (one commit group each), retired by `WaitVmcnt` (a `CpWait`).
    BufferLoadLds {
        bytes: u32,
        base: MemRef,
        tensor: MemRef,
        voffset: E,
        soffset: E,
        pred: E,
    },
    /// AMD `buffer_load` into this thread's registers: `bytes` from `tensor` at byte offset
    /// `voffset + soffset` into `dst`, zeros where `pred` is false and for each dword past
    /// the tensor's end.
    BufferLoad {
        bytes: u32,
        dst: MemRef,
        tensor: MemRef,
        voffset: E,
        soffset: E,
        pred: E,
    },
    /// `fence.proxy.async`: this thread's shared writes so far become visible to wgmma reads
    /// ordered after it by a barrier.
    FenceProxyAsync,
    /// Debug output of `value` after `msg`, with the block and thread (stdout).
    Print {
        msg: String,
        value: E,
    },
    /// `fence.proxy.async.global`: what this thread is ordered after in global memory becomes
    /// visible to its later TMA loads (the order checker's view).
    FenceProxyAsyncGlobal,
    /// `griddepcontrol.launch_dependents`: nothing to model (the simulator runs launches one
    /// after another).
    LaunchDependents,
    /// `griddepcontrol.wait`: from here on the thread may touch global memory (see
    /// [`Program::grid_dependent`]).
    GridDependencyWait,
    CpAsync {
        bytes: u32,
        dst: MemRef,
        src: MemRef,
        pred: E,
    },
    CpCommit,
    CpWait(u32),
    /// With `pred` false the destination is zero-filled and the source is not read.
    VecCopy {
        lanes: u32,
        dst: MemRef,
        src: MemRef,
        pred: Option<E>,
    },
    /// `Intrinsic::LoadWindow`: the 32 aligned bytes around element `off` of `tensor` (its
    /// first element) into `window`, zero outside the tensor's `count` elements.
    LoadWindow {
        window: MemRef,
        tensor: MemRef,
        off: E,
        count: E,
    },
    /// `Intrinsic::ShiftedVecCopy`: 16 bytes from any 2-byte shared element to an aligned one.
    ShiftedVecCopy {
        dst: MemRef,
        src: MemRef,
    },
    /// `Intrinsic::StoreShifted`: 16 bytes of `window` from element `off`'s byte within its
    /// 16-byte unit, stored at `dst`.
    StoreShifted {
        dst: MemRef,
        window: MemRef,
        tensor: MemRef,
        off: E,
    },
    /// An atomic read-modify-write (add, max or min) of `value` into `addr`.
    AtomicAdd {
        addr: MemRef,
        value: E,
        kind: tl_ir::AtomicKind,
    },
    /// `st.{sem}.{scope}` (or, with `add`, `red.{sem}.{scope}.add`) of `value` into `addr` on
    /// rank `peer` (this rank when absent).
    MemStore {
        addr: MemRef,
        value: E,
        peer: Option<E>,
        add: bool,
        sem: tl_ir::MemSem,
        scope: tl_ir::MemScope,
    },
    /// `fence.{acq_rel|sc}.{scope}`.
    Fence,
    /// Spin until `addr cmp value` (an acquire load each time) on rank `peer`; with
    /// `wrapping`, until `(addr − value) cmp 0` in the flag's width.
    WaitUntil {
        addr: MemRef,
        cmp: CmpOp,
        value: E,
        peer: Option<E>,
        scope: tl_ir::MemScope,
        wrapping: bool,
    },
    /// Copy `lanes` elements from `src` to `dst`, the destination (`put`) or the source on
    /// rank `peer`, the other side on this rank.
    PeerCopy {
        lanes: u32,
        put: bool,
        dst: MemRef,
        src: MemRef,
        peer: E,
        /// Elements added to both addresses.
        offset: E,
        /// `(U, stride, valid)` of an unrolled copy: the first `valid` of U chunks, `stride`
        /// elements apart.
        batch: Option<(u32, E, E)>,
    },
    /// A warp's copy of `count` elements from `offset` on (NVSHMEM's `putmem_warp`),
    /// modelled as each lane copying every `warp`-th element from its lane on.
    PeerCopyWarp {
        put: bool,
        warp: u32,
        dst: MemRef,
        src: MemRef,
        peer: E,
        offset: E,
        count: E,
    },
    /// `mbarrier.init` of the barrier at `bar` (a `u64` element of a shared buffer).
    MbarInit {
        bar: MemRef,
        count: u32,
    },
    /// `mbarrier.arrive` (with `tx`: `mbarrier.arrive.expect_tx`, `tx` more transaction bytes
    /// for the current phase first).
    MbarArrive {
        bar: MemRef,
        tx: Option<E>,
    },
    /// `mbarrier.try_wait.parity` in a loop: blocks the thread until the phase of `bar` with
    /// parity `parity` has completed.
    MbarWait {
        bar: MemRef,
        parity: E,
    },
    /// `cp.async.bulk.tensor` (TMA): a box of `tensor` at `coords` into shared memory at
    /// `dst`, swizzled, completing its bytes on `bar`.
    TmaLoad {
        box_dims: Vec<u32>,
        swizzle: u32,
        /// The runtime stages the tensor into a pitched copy when its rows are not whole
        /// 16-byte units (`KernelAttrs::tma_pitched_inputs`): no stride rule then.
        pitched: bool,
        dst: MemRef,
        tensor: MemRef,
        bar: MemRef,
        coords: Vec<E>,
        /// Multicast: the box lands in every block of the cluster this mask names (bit `r`
        /// for rank `r`), at the same shared offset, completing on each one's barrier.
        mask: Option<E>,
        /// The row length (elements) of a tensor the kernel stages itself, whose `tensor` is
        /// its scratch: the map bounds boxes by it, not by the scratch's padded rows.
        width: Option<E>,
    },
    /// An arrival on the barrier at `bar`'s shared offset in the cluster's block of rank
    /// `rank` (delivered when that block next runs).
    MbarArriveCluster {
        bar: MemRef,
        rank: E,
    },
    /// Every thread of every block of the cluster arrives before any goes on.
    ClusterSync,
    /// `setmaxnreg.{inc,dec}`: the thread's registers become `regs`; `.inc` waits until the
    /// block's pool (what its launch allocated) has them free.
    SetMaxNReg {
        inc: bool,
        regs: u32,
    },
    /// `cp.async.bulk.tensor` store (TMA): a box of shared memory at `src` (swizzled) into
    /// `tensor` at `coords`, elements outside the tensor not written; `src` stays read until
    /// the thread's bulk group is waited for.
    TmaStore {
        box_dims: Vec<u32>,
        swizzle: u32,
        src: MemRef,
        tensor: MemRef,
        coords: Vec<E>,
    },
    /// `cp.async.bulk` shared → global of `bytes` contiguous bytes (both ends 16-byte
    /// aligned, a multiple of 16): written at issue, `src` read until the thread's bulk group
    /// is waited for, the global bytes in flight until its full wait (as `TmaStore`).
    BulkStore {
        dst: MemRef,
        src: MemRef,
        bytes: E,
    },
    /// `cp.async.bulk.commit_group`.
    BulkCommit,
    /// `cp.async.bulk.wait_group{.read} n`.
    /// `cp.async.bulk.wait_group[.read] n`: with `read`, only the sources are free after it;
    /// without, the stores' global writes are complete too.
    BulkWait {
        n: u32,
        read: bool,
    },
    /// End of the kernel body.
    Exit,
}

/// A buffer the program touches, with everything resolved for this launch.
#[derive(Clone, Debug)]
pub struct BufInfo {
    pub name: String,
    pub dtype: DType,
    pub scope: Scope,
    /// Extents (global: from the arguments; others: constant).
    pub shape: Vec<i64>,
    pub numel: i64,
    /// Global: the argument index. Shared: the byte offset in the block's shared memory.
    /// Local: the byte offset in each thread's local memory. Var: the register.
    pub base: usize,
}

impl BufInfo {
    pub fn bytes(&self) -> usize {
        self.numel as usize * self.dtype.bytes()
    }
}

/// Where an instruction came from.
#[derive(Clone, Debug)]
pub struct Site {
    pub span: Span,
    pub name: String,
}

/// A compiled kernel for one launch.
#[derive(Clone, Debug)]
pub struct Program {
    pub code: Vec<Instr>,
    pub sites: Vec<Site>,
    pub bufs: Vec<BufInfo>,
    /// Registers per thread (block indices first, then lets, loop variables, `Var` buffers,
    /// loop ends and temporaries).
    pub nregs: usize,
    /// The initial value of every register (poison for `Var` buffers).
    pub reg_init: Vec<Value>,
    /// Registers holding `block_vars[d]`.
    pub block_regs: Vec<u32>,
    pub local_bytes: usize,
    pub shared_bytes: usize,
    /// Threads per warp (wave): `KernelAttrs::warp_size`, 32 when unset.
    pub warp_size: u32,
    /// The program waits on flags other blocks (or ranks) set: its blocks must run
    /// concurrently.
    pub waits: bool,
    /// Global buffers (by index in `bufs`) in the symmetric heap: the ones a peer may be
    /// named for.
    pub symmetric: Vec<u32>,
    /// Blocks per cluster (clusters run along the grid's x): they run concurrently and reach
    /// each other's shared memory and barriers.
    pub cluster: Option<u32>,
    /// Global buffers (by index in `bufs`) the kernel may write: a store, or any intrinsic
    /// whose first argument is the address of one of their elements (a conservative superset).
    /// Only these can race, so only these are tracked by the order checker.
    pub written: Vec<u32>,
    /// The kernel waits for the grid before it (`griddepcontrol.wait`), so it may be
    /// launched while that grid still runs: every global access of a thread must come after
    /// the thread's wait, or it may meet memory the earlier kernel is still writing.
    pub grid_dependent: bool,
}

impl Program {
    pub fn span(&self, pc: usize) -> Span {
        self.sites.get(pc).map(|s| s.span).unwrap_or(Span::UNKNOWN)
    }
    pub fn name(&self, pc: usize) -> &str {
        self.sites.get(pc).map(|s| s.name.as_str()).unwrap_or("?")
    }
}
