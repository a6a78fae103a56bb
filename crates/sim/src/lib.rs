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
mod race;
mod sched;
pub mod tensor_core;
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
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            blocks: None,
            max_steps: 1 << 30,
            check_races: true,
            check_uninit: true,
            verify: true,
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
}

/// Run `kernel` on `args` (in `Kernel::params` order); tensor arguments receive the results.
pub fn run(kernel: &Kernel, args: &mut [SimArg], opts: &SimOptions) -> Result<SimReport, SimError> {
    if opts.verify {
        verify_level(kernel, Level::Thread).map_err(|d| SimError::InvalidIr(d.to_string()))?;
    }
    if kernel.threads == 0 || kernel.threads > 1024 {
        return Err(SimError::InvalidIr(format!(
            "kernel `{}` has {} threads per block (1 to 1024)",
            kernel.name, kernel.threads
        )));
    }
    let bound = bind::bind(kernel, args)?;
    let prog = compile::compile(kernel, &bound)?;
    let blocks = bind::blocks(bound.grid, opts.blocks.as_deref())?;
    let globals: Vec<Option<&mut [u8]>> = args
        .iter_mut()
        .map(|a| match a {
            SimArg::Tensor { bytes, .. } => Some(bytes.as_mut_slice()),
            _ => None,
        })
        .collect();
    let mut it = Interp {
        prog: &prog,
        mem: Mem {
            prog: &prog,
            globals,
            shared: vec![],
            shadow: Shadow::new(0, false, false),
            global_writes: GlobalWrites::new(opts.check_races).warp_size(prog.warp_size),
            block: [0; 3],
            epoch: 1,
            global_epoch: 1,
            warp_epochs: vec![],
            proxy_fences: vec![],
            wgmma_reads: Default::default(),
            mbars: Default::default(),
        },
        stats: Stats::default(),
        max_steps: opts.max_steps,
    };
    for &b in &blocks {
        let vars = bind::block_var_values(
            b,
            bound.grid,
            kernel.grid.len(),
            kernel.attrs.swizzle_panel,
            kernel.attrs.xcd_remap,
        );
        sched::run_block(
            &mut it,
            kernel.threads,
            b,
            vars,
            (opts.check_races, opts.check_uninit),
        )?;
    }
    Ok(SimReport {
        blocks: blocks.len() as u64,
        threads_per_block: kernel.threads,
        instructions: it.stats.instructions,
        barriers: it.stats.barriers,
        warp_syncs: it.stats.warp_syncs,
        warp_collectives: it.stats.collectives,
        cp_async_copies: it.stats.cp_async,
        cp_async_unwaited: it.stats.cp_async_unwaited,
        tma_copies: it.stats.tma_copies,
        tma_unlanded: it.stats.tma_unlanded,
        shared_bytes: prog.shared_bytes,
        local_bytes_per_thread: prog.local_bytes,
        registers_per_thread: prog.nregs,
    })
}
