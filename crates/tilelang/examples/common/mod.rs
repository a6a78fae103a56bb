//! What every example shares: device selection, `--emit`, timing, and the summary line.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use tilelang::prelude::*;
use tilelang::runtime::profile::{bench, reps_for};

/// Every target `--emit` writes source for, with the file extension.
const EMIT_TARGETS: &[(Target, &str)] = &[
    (Target::Cpu, "c"),
    (Target::SM80, "cu"),
    (Target::SM90, "cu"),
];

#[derive(clap::Args, Debug, Clone)]
pub struct CommonArgs {
    /// Where to run: cpu, cuda[:N], sim (default: the best available)
    #[arg(long)]
    pub device: Option<String>,
    /// Write the generated source for every target into DIR and exit without running
    #[arg(long, value_name = "DIR")]
    pub emit: Option<PathBuf>,
    /// Seed for the random inputs
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Timed repetitions (0: choose from the run time)
    #[arg(long, default_value_t = 0)]
    pub reps: usize,
}

impl CommonArgs {
    pub fn device(&self) -> anyhow::Result<Device> {
        match &self.device {
            None => Ok(Device::best()),
            Some(s) => Ok(Device::parse(s)?),
        }
    }

    /// With `--emit DIR`, write each kernel's source for every target and return true.
    pub fn emit(&self, kernels: &[&Kernel]) -> anyhow::Result<bool> {
        let Some(dir) = &self.emit else {
            return Ok(false);
        };
        std::fs::create_dir_all(dir)?;
        for k in kernels {
            for &(target, ext) in EMIT_TARGETS {
                let src = k.emit(target).map_err(|e| anyhow::anyhow!("{e}"))?;
                let path = dir.join(format!("{}.{}.{ext}", k.name(), target));
                std::fs::write(&path, src)?;
                println!("wrote {}", path.display());
            }
        }
        Ok(true)
    }

    /// Median time of a launch in milliseconds: CUDA events with an L2 flush on a GPU, the host
    /// clock elsewhere (the simulator is timed once: it is for correctness, not speed).
    pub fn time_ms(&self, exe: &Executable, args: &[Arg]) -> anyhow::Result<f64> {
        let t = std::time::Instant::now();
        exe.run_args(args)?;
        exe.synchronize()?;
        let one = t.elapsed();
        let reps = if self.reps > 0 {
            self.reps
        } else if exe.device() == Device::Sim {
            1
        } else {
            reps_for(one, Duration::from_millis(1500)).min(200)
        };
        let warmup = if exe.device() == Device::Sim { 0 } else { 3 };
        Ok(bench(exe, args, warmup, reps)?.median_ms)
    }
}

/// Compile, printing a clear message instead of a panic on failure.
pub fn compile(k: &Kernel, dev: &Device) -> anyhow::Result<Executable> {
    k.compile(dev).map_err(|e| anyhow::anyhow!("{e}"))
}

/// Print the summary line (always last) and turn the check into an exit code.
pub fn finish(name: &str, shape: &str, err: f64, ms: f64, tol: f64, extra: &str) -> ExitCode {
    let ok = err.is_finite() && err < tol;
    if !ok {
        eprintln!("check FAILED: relative error {err:.3e} is not under {tol:.0e}");
    }
    let extra = if extra.is_empty() {
        String::new()
    } else {
        format!(" {extra}")
    };
    println!("{name} {shape} err={err:.3e} ms={ms:.3}{extra}");
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The tolerance a dtype's inputs allow against an f64 reference.
pub fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F32 | DType::F64 => 1e-5,
        _ => 1e-2,
    }
}

pub fn parse_dtype(s: &str) -> anyhow::Result<DType> {
    DType::from_name(s).ok_or_else(|| anyhow::anyhow!("unknown dtype `{s}`: use f32, bf16 or f16"))
}

/// Rows of a large problem to check against the f64 reference (all rows of a small one): the
/// reference costs a full problem's work on the host, so big GPU runs sample rows instead.
pub fn check_rows(rows: usize, work_per_row: f64, seed: u64) -> Vec<usize> {
    let budget = 2e9;
    if rows as f64 * work_per_row <= budget {
        return (0..rows).collect();
    }
    let n = ((budget / work_per_row) as usize).clamp(16, rows);
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut picked: Vec<usize> = (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((x >> 33) as usize) % rows
        })
        .collect();
    // Always include the edges, where tails live.
    picked.push(0);
    picked.push(rows - 1);
    picked.sort();
    picked.dedup();
    picked
}

/// `compile_ms=<total> cached=<hit>`: what building the executable cost.
pub fn compile_note(exe: &Executable) -> String {
    let st = exe.compile_stats();
    format!(
        "compile_ms={:.1} cached={}",
        st.total.as_secs_f64() * 1e3,
        st.cache_hit
    )
}
