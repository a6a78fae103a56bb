//! What can go wrong in a simulated launch. Every error that comes from running the kernel names
//! the block, the thread and the user's source line, because the point of the simulator is to
//! turn a silent GPU bug (a race, a missing wait, a wrong layout) into a message a person can act
//! on.

use std::fmt;

use tl_ir::Span;

/// How an access touched memory.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AccessKind {
    Read,
    Write,
    /// An `AtomicAdd`: atomics do not race with each other, only with plain accesses.
    Atomic,
    /// The shared-memory write of a `cp.async`, which lands at some point between the copy's
    /// issue and the issuing thread's matching wait.
    AsyncWrite,
}

impl fmt::Display for AccessKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AccessKind::Read => "read",
            AccessKind::Write => "write",
            AccessKind::Atomic => "atomic add",
            AccessKind::AsyncWrite => "async write",
        })
    }
}

/// One side of a conflict: who touched the byte, with what, and where in the user's source.
#[derive(Clone, PartialEq, Debug)]
pub struct Access {
    pub thread: u32,
    /// The operation: `store`, `load`, `cp_async<16>`, `ldmatrix_x4`, `vec_copy<8>`, ...
    pub op: String,
    pub kind: AccessKind,
    pub span: Span,
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} by thread {} ({}) at {}",
            self.kind, self.thread, self.op, self.span
        )
    }
}

/// The asynchronous copy a stale read raced with.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AsyncCopy {
    /// A `cp.async` (retired by `cp_async_wait`).
    CpAsync,
    /// An AMD `buffer_load … lds` of this many bytes per lane (retired by `wait_vmcnt`).
    BufferLoad { bytes: u32 },
    /// A TMA copy (`tma_load`), which lands when its mbarrier's phase completes and is
    /// visible to threads that waited for that phase (`mbarrier_wait`).
    Tma,
}

impl AsyncCopy {
    fn what(self) -> String {
        match self {
            AsyncCopy::CpAsync => "cp.async".into(),
            AsyncCopy::BufferLoad { bytes } => format!("buffer load (buffer_load_lds<{bytes}>)"),
            AsyncCopy::Tma => "TMA copy (tma_load)".into(),
        }
    }

    fn fix(self) -> &'static str {
        match self {
            AsyncCopy::CpAsync => "wait for it (cp_async_wait) and sync_threads first",
            AsyncCopy::BufferLoad { .. } => {
                "wait for it (wait_vmcnt) and put a barrier (barrier_lds) after the wait first"
            }
            AsyncCopy::Tma => {
                "wait for the phase of its mbarrier that it completes (mbarrier_wait with that phase's parity) first"
            }
        }
    }
}

/// An mbarrier's current phase, as a deadlock report gives it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct MbarrierState {
    /// Phases completed so far (the current phase's parity is `phase % 2`).
    pub phase: u32,
    /// Arrivals the current phase still needs, of `count`.
    pub pending: u32,
    pub count: u32,
    /// Transaction bytes `expect_tx` announced for the current phase, and the bytes of the TMA
    /// copies issued on it.
    pub tx_expected: i64,
    pub tx_delivered: i64,
    /// What the phase lacks, in words.
    pub detail: String,
}

fn fmt_block(b: &[i64; 3]) -> String {
    format!("({}, {}, {})", b[0], b[1], b[2])
}

#[derive(Clone, PartialEq, Debug, thiserror::Error)]
pub enum SimError {
    /// Two threads touched the same shared byte between two block barriers (and, for lanes of
    /// one warp, with no `SyncWarp` between), at least one of them writing.
    #[error("data race on shared `{buffer}` byte {offset} in block {}: {first}, then {second}; put a barrier (sync_threads) between them", fmt_block(.block))]
    DataRace {
        buffer: String,
        /// Byte offset inside the buffer.
        offset: usize,
        block: [i64; 3],
        /// The earlier access (in simulation order; the two are unordered on a GPU).
        first: Box<Access>,
        second: Box<Access>,
    },

    /// A read of shared memory that nothing has written since the block started.
    #[error("thread {thread} of block {} reads uninitialized shared `{buffer}` byte {offset} at {span}", fmt_block(.block))]
    UninitializedSharedRead {
        buffer: String,
        offset: usize,
        block: [i64; 3],
        thread: u32,
        span: Span,
    },

    /// A read of shared bytes that an issued but not yet waited-for `cp.async` (or AMD buffer
    /// load) will overwrite: the value read is whatever was there before (a missing or too-weak
    /// `cp_async_wait` / `wait_vmcnt`).
    #[error("thread {thread} of block {} reads shared `{buffer}` byte {offset} at {span} while thread {issuer}'s {} into it (issued at {issued_at}) is still in flight; {}", fmt_block(.block), .copy.what(), .copy.fix())]
    StaleAsyncRead {
        buffer: String,
        offset: usize,
        block: [i64; 3],
        thread: u32,
        span: Span,
        issuer: u32,
        issued_at: Span,
        /// The kind of copy.
        copy: AsyncCopy,
    },

    /// A wgmma (which reads shared memory through the async proxy) reads a byte whose writer
    /// did not execute `fence.proxy.async` between its write and the barrier before the read.
    #[error("thread {thread} of block {} issues a wgmma at {span} reading shared `{buffer}` byte {offset}, which {writer} wrote without a fence.proxy.async before the barrier; fence after writing (and after cp_async_wait) and before sync_threads", fmt_block(.block))]
    MissingProxyFence {
        buffer: String,
        offset: usize,
        block: [i64; 3],
        thread: u32,
        span: Span,
        writer: Box<Access>,
    },

    /// A shared byte written (by a store or a cp.async) while a wgmma issued earlier may still
    /// be reading it: no `wgmma.wait_group` has retired that wgmma yet. On the GPU the wgmma
    /// can read the new bytes.
    #[error("thread {thread} of block {} writes shared `{buffer}` byte {offset} at {span} while the wgmma warp {warp} issued at {read_at} may still be reading it; retire that wgmma (wgmma_wait) and put a barrier between, or write another pipeline stage", fmt_block(.block))]
    WriteDuringWgmmaRead {
        buffer: String,
        offset: usize,
        block: [i64; 3],
        thread: u32,
        span: Span,
        warp: u32,
        read_at: Span,
    },

    /// A write to shared bytes a TMA store still reads: its issuing thread has not waited for
    /// the store's bulk group (`bulk_wait_read`) yet.
    #[error("thread {thread} of block {} writes shared `{buffer}` byte {offset} at {span} while the TMA store thread {issuer} issued at {read_at} may still be reading it; that thread must retire the store (bulk_wait_read) before a barrier that precedes this write", fmt_block(.block))]
    WriteDuringTmaStore {
        buffer: String,
        offset: usize,
        block: [i64; 3],
        thread: u32,
        span: Span,
        issuer: u32,
        read_at: Span,
    },

    /// A read of global bytes a TMA store wrote before its issuing thread waited for the store
    /// to land (`cp.async.bulk.wait_group 0` without `.read`): on a GPU the read may see the
    /// old bytes.
    #[error("{reader} reads global `{buffer}` byte {offset}, which the TMA store {writer} issued may not have written yet; the issuing thread must wait for the store to land (cp.async.bulk.wait_group 0, not .read) before a barrier or signal that orders this read — or store that tensor without TMA")]
    TmaStoreInFlight {
        buffer: String,
        offset: usize,
        /// "thread T of block [x, y, z] at FILE:LINE", of the read and of the store.
        reader: String,
        writer: String,
    },

    /// A global access before the thread's `griddepcontrol.wait` in a kernel that has one: a
    /// kernel launched with programmatic stream serialization may start while the kernel
    /// before it still runs, and only the wait orders it after that kernel.
    #[error("thread {thread} of block {} accesses global `{buffer}` at {span} before its griddepcontrol.wait: launched early (programmatic dependent launch), the kernel may meet memory the kernel before it is still writing; wait first", fmt_block(.block))]
    BeforeGridDependencyWait {
        buffer: String,
        block: [i64; 3],
        thread: u32,
        span: Span,
    },

    /// An index past a buffer's extent (per dimension for n-d indices, else the flat size).
    #[error("thread {thread} of block {} accesses `{buffer}` at index {index:?}, outside its extent {extent:?}, at {span}", fmt_block(.block))]
    OutOfBounds {
        buffer: String,
        index: Vec<i64>,
        extent: Vec<i64>,
        block: [i64; 3],
        thread: u32,
        span: Span,
    },

    /// A vector access, async copy or ldmatrix row whose address is not aligned to its size.
    #[error("thread {thread} of block {} accesses `{buffer}` byte {offset} with {op}, which needs {align}-byte alignment, at {span}", fmt_block(.block))]
    Misaligned {
        buffer: String,
        offset: usize,
        align: usize,
        op: String,
        block: [i64; 3],
        thread: u32,
        span: Span,
    },

    /// `setmaxnreg.inc` waits for registers the block's pool (what its launch allocated) can
    /// never free: every other thread is blocked or has exited. On a GPU every block hangs (a
    /// producer of 96 beside 208-register consumers did: gpu-notes run 27b).
    #[error("deadlock in block {}: thread {thread} (and {} other thread(s)) waits at {span} for setmaxnreg.inc to {regs} registers; the launch of {threads} threads holds {pool}, its threads hold {held} and those waiting ask {asked} more, which nothing can free: lower the counts so that the threads' sum to at most {pool}", fmt_block(.block), .waiting.saturating_sub(1))]
    RegisterDeadlock {
        block: [i64; 3],
        thread: u32,
        waiting: u32,
        span: Span,
        regs: u32,
        threads: u32,
        pool: u64,
        held: u64,
        asked: u64,
    },

    /// A `setmaxnreg` the PTX ISA does not allow: a count outside 24–256 or not a multiple of
    /// 8, an `.inc` below the thread's current count or a `.dec` above it.
    #[error("setmaxnreg at {span} (thread {thread} of block {}): {detail}", fmt_block(.block))]
    SetMaxNReg {
        block: [i64; 3],
        thread: u32,
        span: Span,
        detail: String,
    },

    /// Not every thread of the block reached the same barrier: some wait at one while others
    /// finished or wait at a different one (a deadlock or undefined behaviour on a GPU).
    #[error("barrier divergence in block {}: thread {waiting} waits at the barrier at {barrier}, but thread {other} {other_state}", fmt_block(.block))]
    BarrierDivergence {
        block: [i64; 3],
        waiting: u32,
        barrier: Span,
        other: u32,
        /// `has exited`, `waits at the barrier at file:line`, ...
        other_state: String,
    },

    /// A named barrier (`bar.sync id, threads`) that cannot complete: fewer threads wait at it
    /// than it counts, and no other thread can arrive; or more arrived than it counts.
    #[error("named barrier {id} in block {}: it counts {threads} threads, {arrived} arrived (first: thread {waiting} at {barrier}); {detail}", fmt_block(.block))]
    NamedBarrier {
        block: [i64; 3],
        id: u32,
        threads: u32,
        arrived: u32,
        waiting: u32,
        barrier: Span,
        detail: String,
    },

    /// Not every lane of a warp reached a warp-collective operation (shuffle, ldmatrix, mma,
    /// mfma, buffer load, sync_warp, setmaxnreg) together.
    #[error("warp divergence in block {}, warp {warp}: lane {waiting} is at {op} ({span}), but lane {other} {other_state}", fmt_block(.block))]
    WarpDivergence {
        block: [i64; 3],
        warp: u32,
        op: String,
        span: Span,
        waiting: u32,
        other: u32,
        other_state: String,
    },

    /// An operand a wave-level instruction takes from a scalar register (AMD: a buffer load's
    /// LDS base, its `soffset`) differs between lanes of the wave.
    #[error("{op} at {span} in block {}, wave {wave}: {what} differs between lane {} ({}) and lane {} ({}); it must be the same in every lane of the wave", fmt_block(.block), .lanes[0], .values[0], .lanes[1], .values[1])]
    NonUniformOperand {
        block: [i64; 3],
        wave: u32,
        /// The instruction.
        op: String,
        span: Span,
        /// Which operand.
        what: &'static str,
        /// Two lanes (in the wave) that pass different values, and the values.
        lanes: [u32; 2],
        values: Box<[String; 2]>,
    },

    /// An mbarrier or TMA operation used against the protocol: a barrier used before
    /// `mbarrier_init`, more arrivals in a phase than its count, TMA copies delivering more
    /// bytes to a phase than `expect_tx` announced, a barrier re-initialized with copies in
    /// flight, a parity other than 0 or 1.
    #[error("{op} at {span} (thread {thread} of block {}) on mbarrier {barrier}: {detail}", fmt_block(.block))]
    Mbarrier {
        /// The instruction (`mbarrier_arrive`, `tma_load<64, 64; 128>`, ...).
        op: String,
        /// The barrier: its buffer and element (`k_bar[1]`).
        barrier: String,
        block: [i64; 3],
        thread: u32,
        span: Span,
        detail: String,
    },

    /// A thread waits (`mbarrier_wait`) for a phase of an mbarrier that nothing can complete
    /// any more: every other thread is blocked or has exited. `detail` says what the phase
    /// still lacks (arrivals, or transaction bytes: `expect_tx` announced more than the TMA
    /// copies deliver).
    #[error("deadlock in block {}: thread {thread} (and {} other thread(s)) waits at {span} for the phase of mbarrier {barrier} with parity {parity}, which nothing can complete: {}", fmt_block(.block), .waiting.saturating_sub(1), .state.detail)]
    MbarrierDeadlock {
        barrier: String,
        parity: u32,
        block: [i64; 3],
        /// The first waiting thread, and how many threads wait on this barrier.
        thread: u32,
        waiting: u32,
        span: Span,
        state: Box<MbarrierState>,
    },

    /// A peer access named a rank that does not exist.
    #[error("rank {rank} named at {span} by thread {thread} of block {} on rank {on}, but there are {ranks} rank(s) (0 to {})", fmt_block(.block), .ranks.saturating_sub(1))]
    BadRank {
        rank: i64,
        ranks: usize,
        on: usize,
        block: [i64; 3],
        thread: u32,
        span: Span,
    },

    /// Every thread that has not finished waits — for a flag no running thread will set, or
    /// at a barrier behind such a thread — on every rank and block.
    #[error("deadlock: no thread on any rank can go on; {}", .waits.join("; "))]
    SignalDeadlock {
        /// One line per stuck block: where its threads wait and for what.
        waits: Vec<String>,
    },

    /// A plain access of a symmetric buffer that no signal, wait, fence or barrier orders after
    /// an earlier access of the same bytes by another thread, one of them a write: on a GPU a
    /// read may see the old or the new bytes, and of two writes either may land last.
    #[error("unordered access ({kind}) of `{buffer}`[{element}] on rank {rank} by {by}: nothing orders it after the access by {other} (a signal released after the first and acquired before the second — a wait, or a block barrier within a block — is missing)")]
    UnorderedAccess {
        buffer: String,
        rank: usize,
        element: usize,
        kind: &'static str,
        by: String,
        other: String,
    },

    /// A TMA load of global bytes written in the kernel through the generic proxy (a store or
    /// a peer's put) by a thread that did not fence the proxies after the acquire that
    /// ordered the write: the async proxy may still see the old bytes.
    #[error("TMA load of `{buffer}`[{element}] on rank {rank} by {by}: the bytes were written by {other} through the generic proxy, and the loading thread has no fence.proxy.async.global after the acquire that orders that write, so a GPU may load stale bytes (the compiler fences before a pipelined loop's TMA copies of symmetric buffers; a wait inside such a loop needs its own fence)")]
    AsyncProxyUnfenced {
        buffer: String,
        rank: usize,
        element: usize,
        by: String,
        other: String,
    },

    /// A release and an acquire of one flag whose scopes do not reach each other's thread: on
    /// a GPU they do not synchronize.
    #[error("{detail}")]
    ScopeTooNarrow {
        /// The flag buffer.
        flag: String,
        /// Both threads, their scopes and the scope they need.
        detail: String,
    },

    /// Ranks that launch a multi-rank kernel with different sizes for a symmetric buffer.
    #[error("symmetric buffer `{buffer}` has {bytes} bytes on rank {rank} but {first} on rank 0: every rank must allocate the same symmetric buffers alike")]
    SymmetricMismatch {
        buffer: String,
        rank: usize,
        bytes: usize,
        first: usize,
    },

    #[error("division by zero in thread {thread} of block {} at {span}: {detail}", fmt_block(.block))]
    DivisionByZero {
        block: [i64; 3],
        thread: u32,
        span: Span,
        detail: String,
    },

    /// The launch ran more instructions than `SimOptions::max_steps` (an endless loop, or a
    /// launch too large to simulate).
    #[error("step limit of {limit} instructions reached (block {}, thread {thread}, at {span})", fmt_block(.block))]
    StepLimit {
        limit: u64,
        block: [i64; 3],
        thread: u32,
        span: Span,
    },

    /// A construct the simulator does not model.
    #[error("unsupported by the simulator: {0}")]
    Unsupported(String),

    /// The kernel is not well-formed thread-level IR.
    #[error("invalid thread-level IR: {0}")]
    InvalidIr(String),

    /// A block of a cluster reached another's shared memory or barriers when it could not:
    /// before that block initialized its barriers, or after it exited.
    #[error("cluster: {0}")]
    Cluster(String),

    /// The arguments do not fit the kernel's signature.
    #[error("bad arguments: {0}")]
    BadArgs(String),
}
