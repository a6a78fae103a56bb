//! A GPU simulator for thread-level IR (docs/design/thread-ir.md): runs blocks of a kernel on
//! the CPU, every thread of a block in lockstep, and turns the bugs a GPU hides into errors.
//!
//! CI has no GPU; the simulator is how lowered GPU kernels are checked against the CPU backend.
//! It models what the contract specifies exactly — per-thread registers and local memory, one
//! shared memory per block laid out as codegen lays it out, warp shuffles with their widths,
//! `ldmatrix` and `mma.sync.m16n8k16` with PTX's fragment layouts, `cp.async` copies that land
//! only at their group's wait; and for AMD kernels (64-lane waves, `KernelAttrs::warp_size`)
//! MFMA with its lane layouts, direct-to-LDS buffer loads that land at their `vmcnt` wait, LDS
//! barriers that do not order global memory, and the XCD block remap — and checks what a GPU
//! does not:
//!
//! * shared-memory data races between barriers ([`SimError::DataRace`], naming both threads,
//!   both operations and both source lines), and global bytes two threads of a block write (or
//!   one reads after another wrote) without a barrier between,
//! * reads of shared memory nothing wrote ([`SimError::UninitializedSharedRead`]),
//! * reads of shared bytes an in-flight `cp.async`, buffer load or TMA copy will overwrite
//!   ([`SimError::StaleAsyncRead`]: a missing or too-weak wait; a TMA copy lands when its
//!   mbarrier phase completes and is visible to the threads that waited for that phase),
//! * mbarrier protocol errors ([`SimError::Mbarrier`]: use before init, more arrivals than the
//!   count, TMA copies delivering more bytes than `expect_tx` announced) and waits nothing can
//!   satisfy ([`SimError::MbarrierDeadlock`]: missing arrivals, fewer bytes than announced, a
//!   wrong parity),
//! * register splits that cannot be met: each thread holds its launch's registers until a
//!   `setmaxnreg` changes them, and `.inc` waits (a warp at a time) for the block's pool, so a
//!   split over what the launch allocated deadlocks as on a GPU
//!   ([`SimError::RegisterDeadlock`]); counts the PTX ISA does not allow
//!   ([`SimError::SetMaxNReg`]),
//! * wave-uniform operands (a buffer load's LDS base, its `soffset`) that differ between lanes
//!   ([`SimError::NonUniformOperand`]),
//! * out-of-bounds and misaligned accesses, barriers or warp collectives not reached by every
//!   thread, division by zero, runaway loops.
//!
//! ```ignore
//! // `kernel`: thread-level IR with params (A: [M, K] bf16, C: [M, N] f32).
//! let mut args = vec![
//!     SimArg::tensor(DType::BF16, &[m, k], &a_values),
//!     SimArg::zeros(DType::F32, &[m, n]),
//! ];
//! let report = tl_sim::run(&kernel, &mut args, &SimOptions::default())?;
//! let c: Vec<f64> = args[1].to_f64(DType::F32);
//! ```
//!
//! [`tensor_core`] also exposes the PTX fragment layouts and a reference `mma`, and the MFMA
//! lane layouts and a reference `mfma`, for tests elsewhere that need them.
//!
//! Blocks run one after another (no races across blocks are looked for).

mod bind;
mod bytecode;
mod compile;
mod cp_async;
mod elem;
mod error;
mod exec;
mod mbarrier;
mod memory;
mod order;
mod race;
mod sched;
pub mod tensor_core;
mod tma_box;
mod tma_store;
mod warp;

pub use error::{Access, AccessKind, AsyncCopy, MbarrierState, SimError};

use tl_ir::verify::{verify_level, Level};
use tl_ir::{DType, Kernel};

use crate::exec::{Interp, Stats};
use crate::memory::Mem;
use crate::race::{GlobalWrites, Shadow};

/// One launch argument, in `Kernel::params` order.
#[derive(Clone, Debug, PartialEq)]
pub enum SimArg {
    /// A global tensor: its row-major storage (narrow floats as bit patterns, little-endian)
    /// and shape. The simulator reads and writes `bytes` in place.
    Tensor {
        bytes: Vec<u8>,
        shape: Vec<usize>,
    },
    Int(i64),
    Float(f64),
}

impl SimArg {
    /// A tensor of `dtype` holding `values` (converted and rounded as a store would).
    pub fn tensor(dtype: DType, shape: &[usize], values: &[f64]) -> SimArg {
        let mut bytes = vec![0u8; values.len() * dtype.bytes()];
        for (chunk, &v) in bytes.chunks_mut(dtype.bytes()).zip(values) {
            let val = if dtype.is_float() {
                tl_ir::eval::Value::Float(v)
            } else if dtype.is_bool() {
                tl_ir::eval::Value::Bool(v != 0.0)
            } else {
                tl_ir::eval::Value::Int(v as i64)
            };
            elem::encode(val, dtype, chunk);
        }
        SimArg::Tensor {
            bytes,
            shape: shape.to_vec(),
        }
    }

    /// A zero-filled tensor.
    pub fn zeros(dtype: DType, shape: &[usize]) -> SimArg {
        SimArg::Tensor {
            bytes: vec![0; shape.iter().product::<usize>() * dtype.bytes()],
            shape: shape.to_vec(),
        }
    }

    /// The elements of a tensor argument as f64 (empty for scalars).
    pub fn to_f64(&self, dtype: DType) -> Vec<f64> {
        match self {
            SimArg::Tensor { bytes, .. } => bytes
                .chunks_exact(dtype.bytes())
                .map(|c| elem::decode(c, dtype).as_f64())
                .collect(),
            _ => vec![],
        }
    }
}

/// How to run.
#[derive(Clone, Debug)]
pub struct SimOptions {
    /// The hardware block indices `[x, y, z]` to run; `None` runs the whole grid.
    pub blocks: Option<Vec<[i64; 3]>>,
    /// Stop with [`SimError::StepLimit`] after this many instructions (all threads together).
    pub max_steps: u64,
    /// Report shared-memory races (including reads of in-flight `cp.async` destinations), and
    /// global bytes that two threads of a block write, or that one reads after another wrote,
    /// with no barrier between.
    pub check_races: bool,
    /// Report reads of shared memory nothing has written.
    pub check_uninit: bool,
    /// Check the kernel with `verify_level(Level::Thread)` first.
    pub verify: bool,
    /// Kernels whose blocks wait for each other: at most this many blocks of each rank run at
    /// once, started in launch order as earlier ones finish (a GPU holds only so many); `None`
    /// runs every block at once. A grid that deadlocks only when not all of it is resident
    /// (consumers spinning in every slot while their producers wait to start) is reported.
    pub resident_blocks: Option<usize>,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            blocks: None,
            max_steps: 1 << 30,
            check_races: true,
            check_uninit: true,
            verify: true,
            resident_blocks: None,
        }
    }
}

/// What a launch did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimReport {
    pub blocks: u64,
    pub threads_per_block: u32,
    /// Instructions executed, summed over threads.
    pub instructions: u64,
    /// Block barriers passed (per block, summed).
    pub barriers: u64,
    /// `sync_warp`s passed (per warp).
    pub warp_syncs: u64,
    /// Shuffles, ldmatrix, mma, mfma and buffer loads executed (per warp).
    pub warp_collectives: u64,
    /// `cp.async` copies issued (per thread), and AMD buffer loads (per lane).
    pub cp_async_copies: u64,
    /// `cp.async` copies still in flight when their thread exited (issued but never waited
    /// for: harmless only if nothing was meant to read them).
    pub cp_async_unwaited: u64,
    /// TMA copies (`tma_load`) issued.
    pub tma_copies: u64,
    /// TMA copies whose mbarrier phase never completed (they never landed) when the block
    /// ended.
    pub tma_unlanded: u64,
    /// The dynamic shared memory one block uses, laid out as codegen does.
    pub shared_bytes: usize,
    /// Bytes of local (register-array) memory per thread.
    pub local_bytes_per_thread: usize,
    /// Scalar registers per thread (variables, `Var` buffers, temporaries).
    pub registers_per_thread: usize,
    /// A multi-rank run checked the memory order of its symmetric buffers (reads ordered
    /// after the writes they see); false when race checks are off or when there are more
    /// threads in all than the check keeps clocks for.
    pub order_checked: bool,
}

/// Run `kernel` on `args` (in `Kernel::params` order); tensor arguments receive the results.
///
/// A multi-rank kernel (one with `KernelAttrs::dist`) runs here as rank 0 of 1; see
/// [`run_ranks`] for several.
pub fn run(kernel: &Kernel, args: &mut [SimArg], opts: &SimOptions) -> Result<SimReport, SimError> {
    // Moved out and back, not copied: the tensors may be large.
    let owned = args
        .iter_mut()
        .map(|a| std::mem::replace(a, SimArg::Int(0)))
        .collect();
    let mut ranks = vec![owned];
    let r = run_ranks(kernel, &mut ranks, opts);
    for (a, b) in args.iter_mut().zip(ranks.remove(0)) {
        *a = b;
    }
    r
}

/// Run a multi-rank kernel on `ranks.len()` simulated devices in one process: `ranks[r]` are
/// rank `r`'s arguments (its `rank` argument must be `r`, its `num_ranks` the number of ranks),
/// and every rank's tensors receive its results. A symmetric buffer's copies are the
/// same-named tensors of the ranks; a peer access reads or writes the named rank's copy.
///
/// Blocks of a kernel that waits on flags run concurrently — every block of every rank in
/// turn, each until it finishes or waits — so that signals between blocks and ranks are
/// delivered; when no thread anywhere can go on, the run fails with
/// [`SimError::SignalDeadlock`], naming each waiting thread, its flag and the flag's value.
pub fn run_ranks(
    kernel: &Kernel,
    ranks: &mut [Vec<SimArg>],
    opts: &SimOptions,
) -> Result<SimReport, SimError> {
    run_ranks_calls(kernel, ranks, &[vec![]], opts)
}

/// Back-to-back launches of `kernel` on every rank, as one stream per rank runs them: call
/// `c` sets the scalar arguments `calls[c]` names (an `epoch`, say) and otherwise takes
/// `ranks[r]`, whose tensors every call shares. Rank `r`'s call `c + 1` starts when all of
/// `r`'s blocks of call `c` have finished — not the other ranks' — so a rank may run a call
/// ahead of a peer, as on GPUs. That is where a kernel that writes into a peer's buffers
/// before the peer has finished reading them in the previous call goes wrong; the memory-order
/// check reports it (a kernel boundary orders a rank's launches, nothing orders them against
/// a peer's). The scalars are left as the last call set them.
pub fn run_ranks_calls(
    kernel: &Kernel,
    ranks: &mut [Vec<SimArg>],
    calls: &[Vec<(&str, i64)>],
    opts: &SimOptions,
) -> Result<SimReport, SimError> {
    if opts.verify {
        verify_level(kernel, Level::Thread).map_err(|d| SimError::InvalidIr(d.to_string()))?;
    }
    if kernel.threads == 0 || kernel.threads > 1024 {
        return Err(SimError::InvalidIr(format!(
            "kernel `{}` has {} threads per block (1 to 1024)",
            kernel.name, kernel.threads
        )));
    }
    if ranks.is_empty() {
        return Err(SimError::BadArgs("no ranks to run".into()));
    }
    if calls.is_empty() {
        return Err(SimError::BadArgs("no calls to run".into()));
    }
    let n = ranks.len();
    if n > 1 && kernel.attrs.dist.is_none() {
        return Err(SimError::BadArgs(format!(
            "kernel `{}` is not distributed but was given {n} ranks",
            kernel.name
        )));
    }
    // Each (call, rank)'s program: scalar arguments (the rank, the epoch) are constants in it.
    let mut bounds = vec![];
    let mut progs = vec![];
    for sets in calls {
        for args in ranks.iter_mut() {
            set_scalars(kernel, args, sets)?;
        }
        for (r, args) in ranks.iter().enumerate() {
            if let Some(d) = &kernel.attrs.dist {
                check_rank_args(kernel, d, args, r, n)?;
            }
            let bound = bind::bind(kernel, args)?;
            if let Some(d) = &kernel.attrs.dist {
                let value_of = |v: &tl_ir::Var| bound.env.get(&v.id()).map(|x| x.as_i64());
                if let Some((v, g)) = d.rank_dim_mismatch(n as i64, value_of) {
                    return Err(SimError::BadArgs(format!(
                        "rank {r} of {n}: the tensors size `{}` (the number of ranks) as {g}, not {n}",
                        v.name()
                    )));
                }
            }
            progs.push(compile::compile(kernel, &bound)?);
            bounds.push(bound);
        }
    }
    let prog0 = &progs[0];
    for &b in &prog0.symmetric {
        let first = prog0.bufs[b as usize].bytes();
        for (r, p) in progs.iter().enumerate().take(n).skip(1) {
            let bytes = p.bufs[b as usize].bytes();
            if bytes != first {
                return Err(SimError::SymmetricMismatch {
                    buffer: p.bufs[b as usize].name.clone(),
                    rank: r,
                    bytes,
                    first,
                });
            }
        }
    }
    // (call, rank, block, block variables), call-major: a rank's launches in stream order.
    let mut launch_blocks = vec![];
    for (i, bound) in bounds.iter().enumerate() {
        for b in bind::blocks(bound.grid, opts.blocks.as_deref())? {
            let vars = bind::block_var_values(
                b,
                bound.grid,
                kernel.grid.len(),
                kernel.attrs.swizzle_panel,
                kernel.attrs.xcd_remap,
            );
            launch_blocks.push((i / n, i % n, b, vars));
        }
    }
    // The scratch and flags of the tensors the kernel stages itself, zeroed, per rank: what
    // the runtime passes after the parameters (as `compile` numbers them).
    let mut staged: Vec<Vec<Vec<u8>>> = (0..n)
        .map(|r| {
            let p = &progs[r];
            (0..2 * kernel.attrs.staged_rows.len())
                .map(|j| {
                    p.bufs
                        .iter()
                        .find(|b| {
                            b.scope == tl_ir::Scope::Global && b.base == kernel.params.len() + j
                        })
                        .map_or(0, |b| b.bytes())
                })
                .map(|bytes| vec![0u8; bytes])
                .collect()
        })
        .collect();
    let mut tensors = ranks
        .iter_mut()
        .zip(staged.iter_mut())
        .map(|(args, extra)| {
            args.iter_mut()
                .map(|a| match a {
                    SimArg::Tensor { bytes, .. } => Some(bytes.as_mut_slice()),
                    _ => None,
                })
                .chain(extra.iter_mut().map(|b| Some(b.as_mut_slice())))
                .collect::<Vec<_>>()
        });
    let globals = tensors.next().unwrap_or_default();
    let mut peers: Vec<Vec<Option<&mut [u8]>>> = vec![vec![]];
    peers.extend(tensors);
    let mut it = Interp {
        prog: &progs[0],
        mem: Mem {
            prog: &progs[0],
            globals,
            rank: 0,
            peers,
            shared: vec![],
            shadow: Shadow::new(0, false, false),
            global_writes: GlobalWrites::new(opts.check_races).warp_size(prog0.warp_size),
            block: [0; 3],
            epoch: 1,
            global_epoch: 1,
            warp_epochs: vec![],
            proxy_fences: vec![],
            grid_waited: vec![],
            wgmma_reads: Default::default(),
            mbars: Default::default(),
            named_arrivals: Default::default(),
            tma_writes: Default::default(),
            order: None,
            outbox: vec![],
            cluster_gen: 0,
        },
        stats: Stats::default(),
        max_steps: opts.max_steps,
        yield_on_signal: false,
        signalled: false,
    };
    let checks = (opts.check_races, opts.check_uninit);
    let agents = launch_blocks.len() * kernel.threads as usize;
    // A kernel that stages rows itself has its blocks wait for each other too.
    let cross_block = kernel.attrs.dist.is_some() || !kernel.attrs.staged_rows.is_empty();
    if cross_block && opts.check_races && agents <= order::MAX_AGENTS {
        let info = launch_blocks
            .iter()
            .flat_map(|&(call, rank, block, _)| {
                (0..kernel.threads).map(move |thread| order::AgentInfo {
                    rank,
                    block,
                    thread,
                    call,
                })
            })
            .collect();
        it.mem.order = Some(order::Order::new(info));
    }
    let order_checked = it.mem.order.is_some();
    // Multi-rank kernels always run concurrently: each block has its own threads in the
    // order checker.
    // So do a cluster's blocks, which reach each other's shared memory and barriers.
    if progs.iter().any(|p| p.waits || p.cluster.is_some())
        || n > 1
        || kernel.attrs.dist.is_some()
        || calls.len() > 1
    {
        let ctxs = launch_blocks
            .iter()
            .enumerate()
            .map(|(i, &(call, r, b, vars))| {
                let base = (i * kernel.threads as usize) as u32;
                let prog = call * n + r;
                sched::BlockCtx::new(
                    &progs[prog],
                    (r, call, prog),
                    kernel.threads,
                    b,
                    vars,
                    checks,
                    base,
                )
            })
            .collect();
        sched::run_concurrent(&mut it, &progs, ctxs, opts.resident_blocks)?;
    } else {
        for &(_, _, b, vars) in &launch_blocks {
            sched::run_block(&mut it, kernel.threads, b, vars, checks)?;
        }
    }
    Ok(SimReport {
        blocks: launch_blocks.len() as u64,
        threads_per_block: kernel.threads,
        instructions: it.stats.instructions,
        barriers: it.stats.barriers,
        warp_syncs: it.stats.warp_syncs,
        warp_collectives: it.stats.collectives,
        cp_async_copies: it.stats.cp_async,
        cp_async_unwaited: it.stats.cp_async_unwaited,
        tma_copies: it.stats.tma_copies,
        tma_unlanded: it.stats.tma_unlanded,
        shared_bytes: prog0.shared_bytes,
        local_bytes_per_thread: prog0.local_bytes,
        registers_per_thread: prog0.nregs,
        order_checked,
    })
}

/// Set the scalar arguments `sets` names (a name that is no scalar parameter is an error).
fn set_scalars(kernel: &Kernel, args: &mut [SimArg], sets: &[(&str, i64)]) -> Result<(), SimError> {
    for &(name, value) in sets {
        let at = kernel
            .params
            .iter()
            .position(|p| matches!(p, tl_ir::Param::Scalar(s) if s.name() == name))
            .ok_or_else(|| {
                SimError::BadArgs(format!(
                    "kernel `{}` has no scalar parameter `{name}` to set for a call",
                    kernel.name
                ))
            })?;
        match args.get_mut(at) {
            Some(a @ SimArg::Int(_)) => *a = SimArg::Int(value),
            other => {
                return Err(SimError::BadArgs(format!(
                    "argument {at} (`{name}`) must be an integer to be set per call, got {other:?}"
                )))
            }
        }
    }
    Ok(())
}

/// A rank's `rank` and `num_ranks` arguments must say which rank it is and how many there are.
fn check_rank_args(
    kernel: &Kernel,
    d: &tl_ir::DistAttrs,
    args: &[SimArg],
    r: usize,
    n: usize,
) -> Result<(), SimError> {
    let arg_of = |v: &tl_ir::Var| {
        kernel
            .params
            .iter()
            .position(|p| matches!(p, tl_ir::Param::Scalar(s) if s == v))
            .and_then(|i| args.get(i))
    };
    for (v, want) in [(&d.rank, r), (&d.num_ranks, n)] {
        match arg_of(v) {
            Some(SimArg::Int(x)) if *x == want as i64 => {}
            other => {
                return Err(SimError::BadArgs(format!(
                    "rank {r} of {n}: its `{}` argument must be {want}, got {other:?}",
                    v.name()
                )))
            }
        }
    }
    Ok(())
}
