//! What every example shares: device selection, `--emit`, `--isa`, timing, and the summary line.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use tilelang::prelude::*;
use tilelang::runtime::profile::{bench_with, reps_for, BenchConfig};

/// Every target `--emit` writes source for, with the file extension.
const EMIT_TARGETS: &[(Target, &str)] = &[
    (Target::Cpu, "c"),
    (Target::SM80, "cu"),
    (Target::SM90, "cu"),
    (Target::GFX942, "hip"),
    (Target::GFX950, "hip"),
];

/// `--isa` given without an architecture: take the device's.
const ISA_FROM_DEVICE: &str = "device";

#[derive(clap::Args, Debug, Clone)]
pub struct CommonArgs {
    /// Where to run: cpu, cuda[:N], hip[:N], sim, sim:gfx942, sim:gfx950 (default: the best
    /// available)
    #[arg(long)]
    pub device: Option<String>,
    /// Write the generated source for every target into DIR and exit without running
    #[arg(long, value_name = "DIR")]
    pub emit: Option<PathBuf>,
    /// Compile the kernel for the AMD architecture ARCH (gfx942 or gfx950) with clang and print
    /// its ISA report (registers, spills, LDS, occupancy, the main loop's instruction mix), then
    /// exit without running: no AMD GPU needed, only clang 20 or newer. Without ARCH, the
    /// architecture of --device (hip[:N] on an AMD GPU, or sim:gfx942 / sim:gfx950). The kernel
    /// is the one a run would use: the tiles ARCH gets by default, with this command line's
    /// overrides (--tune is not run)
    #[arg(long, value_name = "ARCH", num_args = 0..=1, default_missing_value = ISA_FROM_DEVICE)]
    pub isa: Option<String>,
    /// Seed for the random inputs
    #[arg(long, default_value_t = 0, value_parser = size::<u64>)]
    pub seed: u64,
    /// Timed repetitions (0: choose from the run time)
    #[arg(long, default_value_t = 0, value_parser = size::<usize>)]
    pub reps: usize,
    /// Launches timed back to back in each timed repetition, the L2 flushed once before them;
    /// the time reported is per launch (1: each launch alone, as a cold call)
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub back_to_back: u32,
}

impl CommonArgs {
    pub fn device(&self) -> anyhow::Result<Device> {
        match &self.device {
            None => Ok(Device::best()),
            Some(s) => Ok(Device::parse(s)?),
        }
    }

    /// With `--emit DIR`, write the source of the kernels `kernels` builds for each target
    /// (the tiles that target gets by default, with the command line's overrides) and return
    /// true. A target that cannot take a kernel (too much shared memory for sm_80, say) does
    /// not stop the others; its error is reported at the end.
    pub fn emit(&self, kernels: &dyn Fn(Target) -> Vec<Kernel>) -> anyhow::Result<bool> {
        let Some(dir) = &self.emit else {
            return Ok(false);
        };
        std::fs::create_dir_all(dir)?;
        let mut failed = vec![];
        for &(target, ext) in EMIT_TARGETS {
            for k in &kernels(target) {
                match k.emit(target) {
                    Ok(src) => {
                        let path = dir.join(format!("{}.{}.{ext}", k.name(), target));
                        std::fs::write(&path, src)?;
                        println!("wrote {}", path.display());
                    }
                    Err(e) => failed.push(format!("{} for {target}: {e}", k.name())),
                }
                // The PTX printer's output beside the CUDA C++, where it covers the kernel.
                if let (Target::Cuda { .. }, Ok(ptx)) = (target, k.emit_ptx(target)) {
                    let path = dir.join(format!("{}.{}.ptx", k.name(), target));
                    std::fs::write(&path, ptx)?;
                    println!("wrote {}", path.display());
                }
                // The AMD assembly beside the HIP, where clang is installed.
                if target.is_hip() && tilelang::amdgpu::Clang::find().is_ok() {
                    match k.compile_amd(target) {
                        Ok(co) => {
                            let path = dir.join(format!("{}.{}.s", k.name(), target));
                            std::fs::write(&path, &co.asm)?;
                            println!("wrote {}", path.display());
                        }
                        Err(e) => failed.push(format!("{} for {target} (clang): {e}", k.name())),
                    }
                }
            }
        }
        if !failed.is_empty() {
            anyhow::bail!("{}", failed.join("\n"));
        }
        Ok(true)
    }

    /// The AMD target `--isa` asks for, or `None` without `--isa`.
    pub fn isa_target(&self) -> anyhow::Result<Option<Target>> {
        let Some(arch) = &self.isa else {
            return Ok(None);
        };
        let target = if arch == ISA_FROM_DEVICE {
            let dev = self.device()?;
            dev.target().map_err(|e| {
                anyhow::anyhow!(
                    "--isa without an architecture takes the device's, but {e}; name one: --isa gfx950"
                )
            })?
        } else {
            Target::parse(arch)?
        };
        if !target.is_hip() {
            anyhow::bail!(
                "--isa reports on AMD code, but the target is {target}; use --isa gfx942 or --isa gfx950 (or --device hip, sim:gfx942, sim:gfx950)"
            );
        }
        Ok(Some(target))
    }

    /// With `--isa [ARCH]`, compile the kernels `kernels` builds for that AMD target with clang,
    /// print each one's ISA report and return true. Needs clang (LLVM 20 or newer), not a GPU.
    pub fn isa(&self, kernels: &dyn Fn(Target) -> Vec<Kernel>) -> anyhow::Result<bool> {
        let Some(target) = self.isa_target()? else {
            return Ok(false);
        };
        let clang = tilelang::amdgpu::Clang::find()?;
        for k in &kernels(target) {
            let co = k
                .compile_amd(target)
                .map_err(|e| anyhow::anyhow!("{} for {target}: {e}", k.name()))?;
            let report = tilelang::amdgpu::isa::report(&co.asm)
                .map_err(|e| anyhow::anyhow!("{} for {target}: {e}", k.name()))?;
            println!(
                "{} for {target} (the variant for aligned sizes; {}, compiled in {:.0} ms, linked in {:.0} ms, code object {} bytes)",
                k.name(),
                clang.version,
                co.compile_time.as_secs_f64() * 1e3,
                co.link_time.as_secs_f64() * 1e3,
                co.elf.len()
            );
            println!("{}", report.table());
        }
        Ok(true)
    }

    /// The modes that write or print compiled code and exit without running: `--emit DIR`
    /// ([`emit`](Self::emit)) and `--isa [ARCH]` ([`isa`](Self::isa)), both when both are
    /// given. True when one ran.
    pub fn emit_only(&self, kernels: &dyn Fn(Target) -> Vec<Kernel>) -> anyhow::Result<bool> {
        let emitted = self.emit(kernels)?;
        let reported = self.isa(kernels)?;
        Ok(emitted || reported)
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
        } else if matches!(exe.device(), Device::Sim(_)) {
            1
        } else {
            reps_for(one, Duration::from_millis(1500)).min(200)
        };
        let warmup = if matches!(exe.device(), Device::Sim(_)) {
            0
        } else {
            3
        };
        let cfg = BenchConfig {
            warmup,
            reps,
            flush_l2: true,
            back_to_back: self.back_to_back_noted(),
        };
        Ok(bench_with(exe, args, &cfg)?.median_ms)
    }

    /// `--back-to-back`, said on stderr when it is more than 1 (the summary's times are then
    /// per launch of a stream of launches, not of a cold call).
    fn back_to_back_noted(&self) -> usize {
        if self.back_to_back > 1 {
            eprintln!(
                "timing: {} launches back to back in each timed window (on a GPU the L2 flushed once before them); times are per launch",
                self.back_to_back
            );
        }
        self.back_to_back as usize
    }

    /// [`CommonArgs::time_ms`] of a sequence of launches timed as one (a kernel and the one
    /// that finishes its work, such as a split-K GEMM's sum).
    pub fn time_sequence_ms(&self, steps: &[(&Executable, &[Arg])]) -> anyhow::Result<f64> {
        let Some((first, _)) = steps.first() else {
            return Ok(0.0);
        };
        let t = std::time::Instant::now();
        for (exe, args) in steps {
            exe.run_args(args)?;
        }
        first.synchronize()?;
        let one = t.elapsed();
        let sim = matches!(first.device(), Device::Sim(_));
        let reps = if self.reps > 0 {
            self.reps
        } else if sim {
            1
        } else {
            reps_for(one, Duration::from_millis(1500)).min(200)
        };
        let cfg = BenchConfig {
            warmup: if sim { 0 } else { 3 },
            reps,
            flush_l2: true,
            back_to_back: self.back_to_back_noted(),
        };
        Ok(tilelang::runtime::profile::bench_sequence(steps, &cfg)?.median_ms)
    }
}

/// Multiprocessors to fit a kernel's launch to: the device's count on a CUDA GPU, else a
/// typical part's for `target` (as `--emit` assumes).
pub fn multiprocessors(dev: &Device, target: Target) -> u32 {
    match dev {
        Device::Cuda(_) => dev.cuda_props().map_or_else(
            |_| tilelang::typical_multiprocessors(target),
            |p| p.multiprocessors,
        ),
        _ => tilelang::typical_multiprocessors(target),
    }
}

/// The second kernel of a split-K GEMM (`gemm::split_k_sum`), compiled, and the f32
/// workspace `W[splits, m, n]` the GEMM writes its shares to.
pub struct SplitSum {
    pub exe: Executable,
    pub w: Tensor,
}

/// Columns per block, and threads, of the kernel that sums split-K shares.
const SUM_BLOCK: i64 = 1024;
const SUM_THREADS: u32 = 128;

impl SplitSum {
    /// The sum and workspace for a config that splits K over `splits` > 1 blocks, else none.
    pub fn for_splits(
        out: DType,
        splits: u32,
        m: usize,
        n: usize,
        dev: &Device,
    ) -> anyhow::Result<Option<Self>> {
        if splits <= 1 {
            return Ok(None);
        }
        Ok(Some(SplitSum {
            exe: compile(&Self::kernel(out, splits), dev)?,
            w: Tensor::zeros(&[splits as usize, m, n], DType::F32, dev)?,
        }))
    }

    /// The kernel, for `--emit`.
    pub fn kernel(out: DType, splits: u32) -> Kernel {
        tilelang::kernels::gemm::split_k_sum(out, splits, SUM_BLOCK, SUM_THREADS)
    }

    /// What the GEMM writes: the workspace where K is split, else C itself.
    pub fn target<'a>(split: &'a Option<SplitSum>, c: &'a Tensor) -> &'a Tensor {
        split.as_ref().map_or(c, |s| &s.w)
    }

    /// Run the GEMM on `args` (its last tensor [`SplitSum::target`]), then, where K is split,
    /// the sum into `c`.
    pub fn run(
        split: &Option<SplitSum>,
        gemm: &Executable,
        args: &[&Tensor],
        c: &Tensor,
    ) -> anyhow::Result<()> {
        gemm.run(args)?;
        if let Some(s) = split {
            s.exe.run(&[&s.w, c])?;
        }
        Ok(())
    }

    /// [`CommonArgs::time_ms`] of the GEMM on `args`, with the sum into `c` timed with it
    /// where K is split.
    pub fn time_ms(
        split: &Option<SplitSum>,
        common: &CommonArgs,
        gemm: &Executable,
        args: &[Arg],
        c: &Tensor,
    ) -> anyhow::Result<f64> {
        match split {
            Some(s) => {
                let sum_args = [Arg::Tensor(&s.w), Arg::Tensor(c)];
                common.time_sequence_ms(&[(gemm, args), (&s.exe, &sum_args)])
            }
            None => common.time_ms(gemm, args),
        }
    }

    /// ` split_k=S` for the summary line where K is split.
    pub fn note(split: &Option<SplitSum>) -> String {
        split
            .as_ref()
            .map_or_else(String::new, |s| format!(" split_k={}", s.w.shape()[0]))
    }
}

/// An example's `main`: a failed check exits 1 (the summary line says why), any other error 2.
pub fn exit_code(result: anyhow::Result<ExitCode>) -> ExitCode {
    result.unwrap_or_else(|e| {
        eprintln!("error: {e}");
        ExitCode::from(2)
    })
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

/// A size or count from the command line (`--m 1000`, `--bm 64`): a non-negative integer of
/// type `T`. The examples' commands allow negative numbers as values (otherwise clap takes
/// `-5` for an option and prints bare usage), so that `--m -5` reaches this parser and is
/// answered with what is wrong.
pub fn size<T: std::str::FromStr>(s: &str) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    let t = s.trim();
    if let Some(digits) = t.strip_prefix('-') {
        if !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()) {
            return Err(format!("sizes must be ≥ 0, not {t}"));
        }
    }
    t.parse::<T>()
        .map_err(|e| format!("`{t}` is not a size ({e}); sizes are integers ≥ 0"))
}

pub fn parse_dtype(s: &str) -> anyhow::Result<DType> {
    DType::from_name(s).ok_or_else(|| anyhow::anyhow!("unknown dtype `{s}`: use f32, bf16 or f16"))
}

/// The rows `rows` of a row-major matrix `values` whose rows are `width` long, one after
/// another: the operand rows a sampled reference check multiplies.
pub fn gather_rows(values: &[f64], rows: &[usize], width: usize) -> Vec<f64> {
    rows.iter()
        .flat_map(|&r| values[r * width..(r + 1) * width].iter().copied())
        .collect()
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

/// ` tiles=BMxBNxBK stages=S[ overlap]` for a GEMM's summary line: the tiles the run used,
/// which the defaults' refit (`GemmConfig::fit_to_gpu`, `Fp8Gemm::fit_to_gpu`) chose by the
/// problem's size, and whether each k step's wgmma is left running into the next.
pub fn tiles_note(cfg: &tilelang::kernels::gemm::GemmConfig) -> String {
    format!(
        " tiles={}x{}x{} stages={}{}",
        cfg.bm,
        cfg.bn,
        cfg.bk,
        cfg.stages,
        if cfg.overlap { " overlap" } else { "" }
    )
}

/// `compile_ms=<total> cached=<hit> code=<ptx|ptx-ptxas|ptx-jit|cuda|c|hip|thread-ir>`: what
/// building the executable cost, and what the device code was generated as (`ptx-ptxas` for
/// PTX assembled as a whole program by ptxas, `ptx-jit` for such PTX the CUDA driver
/// compiled when loading it — no ptxas found —, `cuda` for CUDA C++, `hip` for HIP C++ compiled by
/// clang to an AMD code object, `thread-ir` for the simulator); on NVIDIA GPUs also the
/// registers per thread at launch and the local memory (spills) per thread.
pub fn compile_note(exe: &Executable) -> String {
    let st = exe.compile_stats();
    let code = match (exe.device(), exe.source()) {
        // PTX that moves registers between warpgroups: ptxas or the driver assembles it whole.
        (Device::Cuda(_), Some(src)) if tl_nvrtc::needs_whole_program(src) => {
            if st.driver_jit {
                "ptx-jit"
            } else {
                "ptx-ptxas"
            }
        }
        (Device::Cuda(_), Some(src)) if tl_nvrtc::is_ptx(src) => "ptx",
        (Device::Cuda(_), _) => "cuda",
        (Device::Cpu, _) => "c",
        (Device::Hip(_), _) => "hip",
        (Device::Sim(_), _) => "thread-ir",
    };
    let usage = match exe.resource_usage() {
        Some(u) if matches!(exe.device(), Device::Cuda(_)) => {
            format!(" regs={} local_bytes={}", u.registers, u.local_bytes)
        }
        _ => String::new(),
    };
    format!(
        "compile_ms={:.1} cached={} code={code}{usage}",
        st.total.as_secs_f64() * 1e3,
        st.cache_hit
    )
}

/// `variant=…`: which variant of the kernel ran these tensors and why (see
/// `Executable::variant`: `aligned(K%8,N%8)`, `class(K%1,N%8)+pitched-tma`, `general`).
pub fn variant_note(exe: &Executable, tensors: &[&Tensor]) -> String {
    let args: Vec<tilelang::runtime::Arg> = tensors
        .iter()
        .map(|t| tilelang::runtime::Arg::Tensor(t))
        .collect();
    match exe.variant(&args) {
        Ok(v) => format!("variant={v}"),
        Err(e) => format!("variant=? ({e})"),
    }
}

/// The options of the row-wise examples (softmax, rmsnorm).
#[derive(clap::Args, Debug, Clone)]
pub struct RowArgs {
    #[arg(long, default_value_t = 1000, value_parser = size::<usize>)]
    pub rows: usize,
    #[arg(long, default_value_t = 3000, value_parser = size::<usize>)]
    pub cols: usize,
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// Columns per chunk (forces the chunked kernel, which takes any width)
    #[arg(long, value_parser = size::<i64>)]
    pub chunk: Option<i64>,
    /// Rows per block of the chunked kernel
    #[arg(long, value_parser = size::<i64>)]
    pub block_rows: Option<i64>,
    #[command(flatten)]
    pub common: CommonArgs,
}

/// The two kernels of a row-wise operation and its f64 reference.
pub struct RowOp {
    pub name: &'static str,
    /// One block per row, the row held on chip: `(dtype, cols, threads)`.
    pub row: fn(DType, i64, u32) -> Kernel,
    /// Any width, streamed in chunks.
    pub chunked: fn(DType, tilelang::kernels::softmax::RowConfig) -> Kernel,
    pub reference: fn(&[f64], usize, usize) -> Vec<f64>,
}

/// The one-kernel form of a row-wise operation for `target`: a row up to 16384 wide fits on
/// chip (registers on a GPU: one read and one write per element), wider ones are streamed in
/// chunks.
fn row_kernel(op: &RowOp, args: &RowArgs, target: Target) -> anyhow::Result<Kernel> {
    use tilelang::kernels::softmax::{row_threads_for, RowConfig};
    let dt = parse_dtype(&args.dtype)?;
    let mut cfg = RowConfig::cpu();
    cfg.cols = args.chunk.unwrap_or(cfg.cols);
    cfg.rows = args.block_rows.unwrap_or(cfg.rows);
    Ok(if args.chunk.is_none() && args.cols <= 16384 {
        (op.row)(
            dt,
            args.cols as i64,
            row_threads_for(&target, args.cols as i64),
        )
    } else {
        (op.chunked)(dt, cfg)
    })
}

/// Run a row-wise example: pick the kernel, check it against the reference, time it, and
/// print the summary line with the achieved bandwidth (one read and one write per element).
pub fn run_row_example(op: &RowOp, args: &RowArgs) -> anyhow::Result<ExitCode> {
    let dt = parse_dtype(&args.dtype)?;
    let dev = args.common.device()?;
    let kernel_for = |target: Target| row_kernel(op, args, target);
    kernel_for(Target::Cpu)?;
    if args
        .common
        .emit_only(&|t| kernel_for(t).into_iter().collect())?
    {
        return Ok(ExitCode::SUCCESS);
    }
    let kernel = kernel_for(dev.target()?)?;
    let exe = compile(&kernel, &dev)?;
    let (r, c) = (args.rows, args.cols);
    let x = Tensor::randn(&[r, c], dt, args.common.seed, &dev)?;
    let y = Tensor::zeros(&[r, c], dt, &dev)?;
    y.fill(f64::NAN)?;
    exe.run(&[&x, &y])?;
    let want = (op.reference)(&x.to_f64_vec()?, r, c);
    let err = y.rel_err(&want)?;
    let ms = args
        .common
        .time_ms(&exe, &[Arg::Tensor(&x), Arg::Tensor(&y)])?;
    Ok(finish_row(
        op.name,
        (r, c, dt),
        err,
        ms,
        &format!("device={dev} {}", compile_note(&exe)),
    ))
}

/// The summary line of a row-wise example, with the bandwidth of one read and one write per
/// element.
fn finish_row(
    name: &str,
    (r, c, dt): (usize, usize, DType),
    err: f64,
    ms: f64,
    note: &str,
) -> ExitCode {
    let gbs = 2.0 * (r * c * dt.bytes()) as f64 / (ms * 1e-3) / 1e9;
    finish(
        name,
        &format!("{r}x{c} {dt}"),
        err,
        ms,
        tolerance(dt),
        &format!("gbps={gbs:.1} {note}"),
    )
}

/// Tile options of the tensor-core examples: fixed tiles, or `--tune` to search for them.
#[derive(clap::Args, Debug, Clone)]
pub struct TileArgs {
    /// Rows of the output tile per block
    #[arg(long, value_parser = size::<i64>)]
    pub bm: Option<i64>,
    /// Columns (gemm) or keys (attention) per tile
    #[arg(long, value_parser = size::<i64>)]
    pub bn: Option<i64>,
    /// Pipeline stages
    #[arg(long, value_parser = size::<u32>)]
    pub stages: Option<u32>,
    /// Threads per block
    #[arg(long, value_parser = size::<u32>)]
    pub threads: Option<u32>,
    /// Autotune the tile configuration for this problem (cached per shape and device)
    #[arg(long)]
    pub tune: bool,
}

/// The persistence options of the GEMM examples: `--persistent [N]` asks for it, and
/// `--no-persistent` takes it away from a default that has it.
#[derive(clap::Args, Debug, Clone)]
pub struct PersistentArgs {
    /// Persistent kernel: one block per multiprocessor (or N blocks), each looping over
    /// output tiles
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "0", value_parser = size::<u32>, conflicts_with = "no_persistent")]
    pub persistent: Option<u32>,
    /// One block per output tile, where the default would be persistent
    #[arg(long)]
    pub no_persistent: bool,
}

impl PersistentArgs {
    /// The block count these options leave of the configuration's `default`.
    pub fn apply(&self, default: Option<u32>) -> Option<u32> {
        if self.no_persistent {
            None
        } else {
            self.persistent.or(default)
        }
    }
}

/// The split-row form of a row-wise operation (few long rows): a kernel writing `stats`
/// per-span f32 statistics `[rows, spans]`, and one combining them and writing the output.
pub struct SplitOp {
    pub stats: fn(DType, tilelang::kernels::softmax::SplitConfig) -> Kernel,
    pub apply: fn(DType, tilelang::kernels::softmax::SplitConfig) -> Kernel,
    pub outputs: usize,
    /// The one-kernel form on GPUs with thread-block clusters: `(dtype, cols, config)`, with
    /// the same `outputs` statistics tensors, `[rows, blocks]`.
    pub cluster: fn(DType, i64, tilelang::kernels::softmax::ClusterConfig) -> Kernel,
    /// The cluster kernel's default configuration for `(cols, dtype)`; `None` where the row is
    /// too wide for one cluster.
    pub cluster_config: fn(i64, DType) -> Option<tilelang::kernels::softmax::ClusterConfig>,
}

/// The options of a row-wise example that can split rows over blocks.
#[derive(clap::Args, Debug, Clone)]
pub struct SplitArgs {
    /// Split each row over blocks, whatever the shape
    #[arg(long, conflicts_with = "no_split")]
    pub split: bool,
    /// Never split rows over blocks
    #[arg(long)]
    pub no_split: bool,
    /// Split rows over the blocks of a thread-block cluster in one kernel (sm_90; the default
    /// there for rows of up to 262144 columns), whatever the shape
    #[arg(long, conflicts_with_all = ["no_split", "no_cluster"])]
    pub cluster: bool,
    /// Split rows in two kernels (statistics, then the output) even where one kernel over a
    /// cluster could do it
    #[arg(long)]
    pub no_cluster: bool,
    /// With the cluster kernel: blocks per row (the cluster's size, 2 to 8; default 8)
    #[arg(long, value_parser = size::<u32>, conflicts_with_all = ["no_cluster", "no_split", "span"])]
    pub cluster_blocks: Option<u32>,
    /// With the cluster kernel: threads per block (a power of two, 32 to 1024; default: the
    /// fewest that hold at most 32 columns each)
    #[arg(long, value_parser = size::<u32>, conflicts_with_all = ["no_cluster", "no_split", "span"])]
    pub cluster_threads: Option<u32>,
    /// With the cluster kernel: resident blocks per multiprocessor to compile for (caps the
    /// registers)
    #[arg(long, value_parser = size::<u32>, conflicts_with_all = ["no_cluster", "no_split", "span"])]
    pub cluster_occupancy: Option<u32>,
    /// With the two-kernel split (given, it takes that split): columns per block (a multiple
    /// of 2048; default: about eight blocks per multiprocessor)
    #[arg(long, value_parser = size::<i64>, conflicts_with = "cluster")]
    pub span: Option<i64>,
    #[command(flatten)]
    pub row: RowArgs,
}

/// Run a row-wise example, splitting rows over blocks where a GPU would otherwise be mostly
/// idle (fewer rows than multiprocessors, each wider than 16384) or where `--split` or
/// `--cluster` asks: in one kernel over a thread-block cluster where the device has clusters
/// and the row fits one (`SplitOp::cluster_config`), else in two kernels, whose time is their
/// sum, each timed alone with L2 flushed.
pub fn run_split_example(
    op: &RowOp,
    split: &SplitOp,
    args: &SplitArgs,
) -> anyhow::Result<ExitCode> {
    let a = &args.row;
    if args.cluster && a.common.isa.is_some() {
        anyhow::bail!(
            "--isa reports the AMD kernel, and AMD GPUs have no thread-block clusters: drop \
             --cluster"
        );
    }
    if args.cluster && a.common.emit.is_some() {
        // The cluster kernel for targets that have clusters; elsewhere what a run without
        // --cluster would emit.
        let dt = parse_dtype(&a.dtype)?;
        let cols = a.cols as i64;
        let Some(cfg) = cluster_config(split, args)? else {
            return Err(too_wide_for_a_cluster(a.cols));
        };
        let kernels = |t: Target| {
            if t.has_clusters() {
                Ok(vec![(split.cluster)(dt, cols, cfg)])
            } else {
                row_kernel(op, a, t).map(|k| vec![k])
            }
        };
        // A bad option is reported once, not per target.
        kernels(Target::Cpu)?;
        a.common.emit_only(&|t| kernels(t).unwrap_or_default())?;
        return Ok(ExitCode::SUCCESS);
    }
    if a.common.emit.is_some() && a.common.isa.is_none() && !args.no_split {
        return emit_split_defaults(op, split, args);
    }
    if a.common.emit.is_some() || a.common.isa.is_some() || args.no_split {
        return run_row_example(op, a);
    }
    let dev = a.common.device()?;
    let sms = dev.cuda_props().map(|p| p.multiprocessors).ok();
    let clusters = dev.target().is_ok_and(|t| t.has_clusters());
    let cfg = match plan_rows(split, args, clusters, sms)? {
        RowPlan::OneBlockARow => return run_row_example(op, a),
        RowPlan::Cluster(cfg) => return run_cluster_example(op, split, a, &dev, cfg),
        RowPlan::Split(cfg) => cfg,
    };
    let dt = parse_dtype(&a.dtype)?;
    let (r, c) = (a.rows, a.cols);
    let spans = cfg.spans(c);
    let stats = compile(&(split.stats)(dt, cfg), &dev)?;
    let apply = compile(&(split.apply)(dt, cfg), &dev)?;
    let x = Tensor::randn(&[r, c], dt, a.common.seed, &dev)?;
    let y = Tensor::zeros(&[r, c], dt, &dev)?;
    let parts: Vec<Tensor> = (0..split.outputs)
        .map(|_| Tensor::zeros(&[r, spans], DType::F32, &dev))
        .collect::<Result<_, _>>()?;
    y.fill(f64::NAN)?;
    let mut stats_args = vec![&x];
    stats_args.extend(parts.iter());
    stats.run(&stats_args)?;
    let mut apply_args = stats_args.clone();
    apply_args.push(&y);
    apply.run(&apply_args)?;
    let want = (op.reference)(&x.to_f64_vec()?, r, c);
    let err = y.rel_err(&want)?;
    let stats_launch: Vec<Arg> = stats_args.iter().map(|t| Arg::Tensor(t)).collect();
    let apply_launch: Vec<Arg> = apply_args.iter().map(|t| Arg::Tensor(t)).collect();
    let ms = a.common.time_ms(&stats, &stats_launch)? + a.common.time_ms(&apply, &apply_launch)?;
    Ok(finish_row(
        op.name,
        (r, c, dt),
        err,
        ms,
        &format!(
            "device={dev} split={spans}x{} {}",
            cfg.span_cols(),
            compile_note(&apply)
        ),
    ))
}

/// Which kernels a row-wise example launches for its shape and options.
enum RowPlan {
    OneBlockARow,
    /// One kernel over a thread-block cluster a row.
    Cluster(tilelang::kernels::softmax::ClusterConfig),
    /// Two kernels: statistics per span, then the output.
    Split(tilelang::kernels::softmax::SplitConfig),
}

/// The choice a run makes and `--emit` reports, on a GPU of `multiprocessors` (`None`: not a
/// CUDA device) that has thread-block clusters or not: rows are split over blocks where they
/// are fewer than the multiprocessors and wider than 16384 columns (or `--split` / `--cluster`
/// asks), over a cluster where the device has clusters and the row fits one (or `--cluster`
/// asks: then a row too wide is an error), else in two kernels.
fn plan_rows(
    split: &SplitOp,
    args: &SplitArgs,
    has_clusters: bool,
    multiprocessors: Option<u32>,
) -> anyhow::Result<RowPlan> {
    let a = &args.row;
    let few_long = multiprocessors.is_some_and(|s| a.rows < s as usize && a.cols > 16384);
    if !(args.split || args.cluster || few_long) {
        return Ok(RowPlan::OneBlockARow);
    }
    if args.cluster || (has_clusters && !args.no_cluster && args.span.is_none()) {
        if let Some(cfg) = cluster_config(split, args)? {
            return Ok(RowPlan::Cluster(cfg));
        }
        if args.cluster {
            return Err(too_wide_for_a_cluster(a.cols));
        }
    }
    Ok(RowPlan::Split(split_config(
        args,
        multiprocessors.unwrap_or(8),
    )?))
}

/// The two-kernel split for `multiprocessors`, with `--span` where given (a positive multiple
/// of the chunk).
fn split_config(
    args: &SplitArgs,
    multiprocessors: u32,
) -> anyhow::Result<tilelang::kernels::softmax::SplitConfig> {
    let a = &args.row;
    let mut cfg =
        tilelang::kernels::softmax::SplitConfig::for_shape(a.rows, a.cols, multiprocessors);
    if let Some(span) = args.span {
        if span <= 0 || span % cfg.chunk != 0 {
            anyhow::bail!(
                "--span must be a positive multiple of {} (got {span})",
                cfg.chunk
            );
        }
        cfg.span = span;
    }
    Ok(cfg)
}

/// The multiprocessors of the GPU a target's emitted kernels are chosen for: an H100 (132) for
/// sm_90a, an A100 (108) for sm_80; `None` where a run never splits rows by the device's size
/// (the CPU, and AMD, whose devices report no CUDA properties).
fn nominal_multiprocessors(target: Target) -> Option<u32> {
    match target {
        Target::Cuda { sm } if sm >= 90 => Some(132),
        Target::Cuda { .. } => Some(108),
        _ => None,
    }
}

/// `--emit DIR` of a row-wise example: for each target, the kernels a run there would launch
/// with this command line (on the GPU [`nominal_multiprocessors`] names): the cluster kernel
/// for few long rows on sm_90a, the statistics and output kernels of the two-kernel split on
/// sm_80, one block a row otherwise.
fn emit_split_defaults(op: &RowOp, split: &SplitOp, args: &SplitArgs) -> anyhow::Result<ExitCode> {
    let a = &args.row;
    let dt = parse_dtype(&a.dtype)?;
    let cols = a.cols as i64;
    let kernels = |t: Target| -> anyhow::Result<Vec<Kernel>> {
        Ok(
            match plan_rows(split, args, t.has_clusters(), nominal_multiprocessors(t))? {
                RowPlan::OneBlockARow => vec![row_kernel(op, a, t)?],
                RowPlan::Cluster(cfg) => vec![(split.cluster)(dt, cols, cfg)],
                RowPlan::Split(cfg) => vec![(split.stats)(dt, cfg), (split.apply)(dt, cfg)],
            },
        )
    };
    // A bad option is reported once, not per target.
    for (t, _) in EMIT_TARGETS {
        kernels(*t)?;
    }
    a.common.emit_only(&|t| kernels(t).unwrap_or_default())?;
    Ok(ExitCode::SUCCESS)
}

/// The one-kernel split ([`SplitOp::cluster`]): check against the reference, time the one
/// launch, print the summary line.
fn run_cluster_example(
    op: &RowOp,
    split: &SplitOp,
    a: &RowArgs,
    dev: &Device,
    cfg: tilelang::kernels::softmax::ClusterConfig,
) -> anyhow::Result<ExitCode> {
    let dt = parse_dtype(&a.dtype)?;
    let (r, c) = (a.rows, a.cols);
    let exe = compile(&(split.cluster)(dt, c as i64, cfg), dev)?;
    let x = Tensor::randn(&[r, c], dt, a.common.seed, dev)?;
    let y = Tensor::zeros(&[r, c], dt, dev)?;
    let parts: Vec<Tensor> = (0..split.outputs)
        .map(|_| Tensor::zeros(&[r, cfg.blocks as usize], DType::F32, dev))
        .collect::<Result<_, _>>()?;
    y.fill(f64::NAN)?;
    let mut launch = vec![&x];
    launch.extend(parts.iter());
    launch.push(&y);
    exe.run(&launch)?;
    let want = (op.reference)(&x.to_f64_vec()?, r, c);
    let err = y.rel_err(&want)?;
    let args: Vec<Arg> = launch.iter().map(|t| Arg::Tensor(t)).collect();
    let ms = a.common.time_ms(&exe, &args)?;
    Ok(finish_row(
        op.name,
        (r, c, dt),
        err,
        ms,
        &format!(
            "device={dev} cluster={}x{}x{} {}",
            cfg.blocks,
            cfg.threads,
            cfg.width(c as i64),
            compile_note(&exe)
        ),
    ))
}

/// `--cluster` for a row wider than one cluster holds.
fn too_wide_for_a_cluster(cols: usize) -> anyhow::Error {
    use tilelang::kernels::softmax::ClusterConfig;
    anyhow::anyhow!(
        "--cluster: a row of {cols} columns is wider than one cluster holds ({} blocks of 512 \
         threads, {} columns a thread); drop --cluster to split it in two kernels",
        ClusterConfig::MAX_BLOCKS,
        ClusterConfig::MAX_PER_THREAD_UNCAPPED
    )
}

/// The cluster kernel's configuration for these options: the op's default
/// ([`SplitOp::cluster_config`]) with the command line's overrides; `None` where the row is too
/// wide for one cluster.
fn cluster_config(
    split: &SplitOp,
    args: &SplitArgs,
) -> anyhow::Result<Option<tilelang::kernels::softmax::ClusterConfig>> {
    use tilelang::kernels::softmax::ClusterConfig;
    let cols = args.row.cols as i64;
    let overridden = args.cluster_blocks.is_some() || args.cluster_threads.is_some();
    let mut cfg = match (split.cluster_config)(cols, parse_dtype(&args.row.dtype)?) {
        Some(c) => c,
        None if !overridden => return Ok(None),
        None => ClusterConfig {
            blocks: ClusterConfig::MAX_BLOCKS,
            threads: 512,
            blocks_per_sm: 1,
        },
    };
    if let Some(b) = args.cluster_blocks {
        if !(2..=ClusterConfig::MAX_BLOCKS).contains(&b) {
            anyhow::bail!(
                "--cluster-blocks must be 2 to {} (got {b})",
                ClusterConfig::MAX_BLOCKS
            );
        }
        cfg.blocks = b;
    }
    if let Some(t) = args.cluster_threads {
        if !t.is_power_of_two() || !(32..=1024).contains(&t) {
            anyhow::bail!("--cluster-threads must be a power of two from 32 to 1024 (got {t})");
        }
        cfg.threads = t;
    }
    // The default's register cap was worked out for its own blocks and threads.
    if overridden {
        cfg.blocks_per_sm = 1;
    }
    if let Some(b) = args.cluster_occupancy {
        let most = 2048 / cfg.threads;
        if !(1..=most).contains(&b) {
            anyhow::bail!(
                "--cluster-occupancy must be 1 to {most} for blocks of {} threads (a \
                 multiprocessor runs at most 2048 threads; got {b})",
                cfg.threads
            );
        }
        cfg.blocks_per_sm = b;
    }
    let per_thread = cfg.width(cols) / i64::from(cfg.threads);
    if per_thread > ClusterConfig::MAX_PER_THREAD_UNCAPPED {
        anyhow::bail!(
            "a row of {cols} columns over {} blocks of {} threads is {per_thread} columns a \
             thread, more than the {} a thread holds in registers: give it more blocks or \
             threads, or drop --cluster to split it in two kernels",
            cfg.blocks,
            cfg.threads,
            ClusterConfig::MAX_PER_THREAD_UNCAPPED
        );
    }
    Ok(Some(cfg))
}
