//! Autotuning kernels built with the DSL: candidates are configurations of a kernel builder;
//! compiling happens on worker threads, timing on the device (see `tl_tune`).

use std::fmt::Debug;

use tl_runtime::{Arg, Device};
pub use tl_tune::{
    disabled, tune, Candidate, Outcome, Space, TuneError, TuneKey, TuneOptions, TuneResult,
};

use crate::{CompileOptions, Kernel};

struct KernelCandidate {
    label: String,
    kernel: Kernel,
    dev: Device,
    opts: CompileOptions,
}

impl tl_tune::Candidate for KernelCandidate {
    fn label(&self) -> String {
        self.label.clone()
    }
    fn prepare(&self) -> Result<(), String> {
        self.kernel
            .precompile(&self.dev, &self.opts)
            .map_err(|e| e.to_string())
    }
    fn build(&self) -> Result<tl_runtime::Executable, String> {
        self.kernel
            .compile_with(&self.dev, &self.opts)
            .map_err(|e| e.to_string())
    }
    /// A kernel that spills registers never wins: local-memory (AMD: scratch) traffic makes
    /// its speed depend on what else is in the caches, and the project's kernels promise none.
    fn accept(&self, exe: &tl_runtime::Executable) -> Result<(), String> {
        spill_check(exe.resource_usage())
    }
}

/// Why a candidate with this resource usage is rejected (it spills registers), or Ok: NVIDIA
/// usage says how many bytes ptxas's spills store and load, AMD usage how many VGPRs and SGPRs
/// clang spilled (from the assembly, `tilelang::amd_usage`). No usage (the CPU, the simulator)
/// is accepted.
pub fn spill_check(usage: Option<&tl_runtime::ResourceUsage>) -> Result<(), String> {
    match usage {
        Some(u) if u.spills() && (u.vgpr_spills.is_some() || u.sgpr_spills.is_some()) => {
            Err(format!(
                "spills registers ({} VGPRs and {} SGPRs spilled, {} bytes of scratch per lane, {} VGPRs allocated)",
                u.vgpr_spills.unwrap_or(0),
                u.sgpr_spills.unwrap_or(0),
                u.local_bytes,
                u.registers
            ))
        }
        Some(u) if u.spills() => Err(format!(
            "spills registers ({} bytes stored, {} loaded, {} registers)",
            u.spill_stores.unwrap_or(0),
            u.spill_loads.unwrap_or(0),
            u.registers
        )),
        _ => Ok(()),
    }
}

/// Pick the fastest configuration in `space` for these arguments on `dev`: every candidate is
/// built with `build`, compiled (in parallel), run once and checked with `check` (which reads
/// the outputs among `args`), then timed. The winner is cached per (kernel, argument shapes,
/// device, crate version); `TILELANG_AUTOTUNE=0` returns the first configuration untried.
pub fn autotune<C: Clone + Debug>(
    kernel_name: &str,
    space: &Space<C>,
    build: impl Fn(&C) -> Kernel,
    dev: &Device,
    args: &[Arg],
    check: &dyn Fn() -> Result<(), String>,
    opts: &TuneOptions,
) -> Result<(C, TuneResult), TuneError> {
    let shapes: Vec<String> = args
        .iter()
        .map(|a| match a {
            Arg::Tensor(t) => format!("{:?}{}", t.shape(), t.dtype()),
            Arg::External(t) => format!("{:?}{}", t.shape(), t.dtype()),
            Arg::Int(i) => i.to_string(),
            Arg::Float(f) => f.to_string(),
        })
        .collect();
    let key = TuneKey {
        kernel: kernel_name.to_string(),
        shapes: shapes.join(" "),
        device: dev.name().unwrap_or_else(|_| dev.to_string()),
    };
    let copts = CompileOptions {
        cache_dir: opts.cache_dir.clone(),
        ..Default::default()
    };
    let candidates: Vec<Box<dyn tl_tune::Candidate>> = space
        .configs()
        .iter()
        .map(|c| {
            Box::new(KernelCandidate {
                label: format!("{c:?}"),
                kernel: build(c),
                dev: *dev,
                opts: copts.clone(),
            }) as Box<dyn tl_tune::Candidate>
        })
        .collect();
    let r = tl_tune::tune(&key, &candidates, args, check, opts)?;
    Ok((space.configs()[r.best].clone(), r))
}
