//! The compiler driver: tile IR → passes → source → native compiler → executable, with the
//! disk cache keyed by the normalized IR, the target, the flags and the crate version.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Instant;

use tl_ir::{DiagKind, Diagnostic, Diagnostics, Span};
use tl_runtime::{Cache, CompileStats, Device, Executable, ResourceUsage, RuntimeError, Signature};
use tl_target::Target;

use crate::dsl::KernelBuilder;
use crate::link::{link_key, Link};

/// A kernel built with the DSL: its tile IR and any problems found while tracing it.
#[derive(Clone)]
pub struct Kernel {
    ir: tl_ir::Kernel,
    build_errors: Vec<Diagnostic>,
}

/// Why compiling or running failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kernel is ill-formed or cannot be lowered for the target; the diagnostics name
    /// the line to change.
    #[error("{0}")]
    Compile(Diagnostics),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// clang could not be found or failed on an AMD kernel.
    #[error(transparent)]
    Amd(#[from] tl_amdgpu::ToolchainError),
}

impl From<Diagnostics> for Error {
    fn from(d: Diagnostics) -> Error {
        Error::Compile(d)
    }
}

/// Options for [`Kernel::compile_with`].
#[derive(Clone, Debug, Default)]
pub struct CompileOptions {
    /// Write the IR after every pass and the generated source here (also set by the
    /// `TILELANG_DUMP_IR` environment variable).
    pub dump_ir: Option<PathBuf>,
    /// The kernel cache (default: `TILELANG_CACHE_DIR` or the user cache directory).
    pub cache_dir: Option<PathBuf>,
}

fn valid_ident(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(ch) if ch.is_ascii_alphabetic() || ch == '_')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

fn cc_version() -> Result<&'static str, RuntimeError> {
    static V: OnceLock<Result<String, String>> = OnceLock::new();
    match V.get_or_init(|| tl_runtime::cpu::compiler_version().map_err(|e| e.to_string())) {
        Ok(v) => Ok(v.as_str()),
        Err(e) => Err(RuntimeError::NoCompiler {
            cc: tl_runtime::cpu::c_compiler(),
            reason: e.clone(),
        }),
    }
}

fn host_id() -> &'static str {
    static V: OnceLock<String> = OnceLock::new();
    V.get_or_init(tl_runtime::cpu::host_cpu_id)
}

impl Kernel {
    /// Trace `f` into a kernel. Problems found while tracing are kept and reported by
    /// [`verify`](Self::verify) and [`compile`](Self::compile).
    #[track_caller]
    pub fn build(name: &str, f: impl FnOnce(&mut KernelBuilder)) -> Kernel {
        let span = Span::caller();
        let mut b = Kernel::builder(name, span);
        f(&mut b);
        Kernel::from_builder(b)
    }

    /// An empty builder for a kernel called `name` (declared at `span`), for front ends that
    /// build imperatively (open and close scopes) instead of through closures; finish it with
    /// [`from_builder`](Self::from_builder). [`build`](Self::build) is this with a closure.
    pub fn builder(name: &str, span: Span) -> KernelBuilder {
        KernelBuilder::new(name, span)
    }

    /// The kernel a builder made, with the problems found while building it.
    pub fn from_builder(b: KernelBuilder) -> Kernel {
        let span = b.span;
        let (ir, mut build_errors) = b.finish();
        if !valid_ident(&ir.name) {
            build_errors.insert(
                0,
                Diagnostic::new(
                    DiagKind::InvalidArgument,
                    span,
                    format!("kernel name `{}` is not an identifier", ir.name),
                )
                .help("use letters, digits and underscores, starting with a letter"),
            );
        }
        Kernel { ir, build_errors }
    }

    /// Wrap tile IR made some other way.
    pub fn from_ir(ir: tl_ir::Kernel) -> Kernel {
        Kernel {
            ir,
            build_errors: vec![],
        }
    }

    pub fn ir(&self) -> &tl_ir::Kernel {
        &self.ir
    }

    /// This multi-rank kernel addressing its peers through tables instead of the flat heap
    /// (the builder's [`peer_tables`](crate::dsl::KernelBuilder::peer_tables), after the
    /// fact): every symmetric tensor `X` gains a parameter `X_peers` (`[NR]` i64, every rank's
    /// address of its `X`; `NR` must equal `num_ranks`), after the other parameters and before
    /// `rank`, `num_ranks`, `heap_stride` (then unused). For symmetric memory whose ranks'
    /// copies are not one stride apart: a heap mapped by legacy CUDA IPC
    /// (`TILELANG_DIST_IPC=legacy`, `tl_dist::SymmetricHeap::peer_table`) or one another
    /// library mapped (torch's). The body is the same; a kernel that has tables already,
    /// reaches its peers through NVSHMEM (`with_nvshmem`), or has no symmetric buffer, is
    /// returned as it is.
    pub fn with_peer_tables(mut self) -> Kernel {
        crate::dsl::add_peer_tables(&mut self.ir);
        self
    }

    /// This multi-rank kernel reaching its peers through NVSHMEM's device library (the route
    /// to ranks on other hosts, whose memory no load or store reaches): each peer access of
    /// the body becomes an NVSHMEM call (docs/distributed.md, "NVSHMEM"). Its symmetric
    /// arguments must be buffers of a heap NVSHMEM allocated (`TILELANG_DIST_IPC=nvshmem`);
    /// `heap_stride` stays, unused. It compiles to PTX only (linked with NVSHMEM's device
    /// archive by nvJitLink, which needs `TILELANG_NVSHMEM_HOME` or NVSHMEM's wheel).
    /// A kernel with peer tables, or not distributed, is an error.
    pub fn with_nvshmem(mut self) -> Result<Kernel, Error> {
        let refuse = |why: &str| {
            Error::Compile(Diagnostics::from(
                Diagnostic::new(DiagKind::InvalidArgument, Span::UNKNOWN, why.to_string())
                    .help("call `with_nvshmem` on the multi-rank kernel as built (flat heap)"),
            ))
        };
        let Some(d) = self.ir.attrs.dist.as_mut() else {
            return Err(refuse(&format!(
                "`{}` is not a multi-rank kernel: it has no peers to reach through NVSHMEM",
                self.ir.name
            )));
        };
        if !d.peer_tables.is_empty() {
            return Err(refuse(&format!(
                "`{}` addresses its peers through tables: NVSHMEM reaches them by symmetric address and rank instead",
                self.ir.name
            )));
        }
        d.nvshmem = true;
        Ok(self)
    }
    pub fn name(&self) -> &str {
        &self.ir.name
    }

    /// Check the kernel; every problem comes with the user's line.
    pub fn verify(&self) -> Result<(), Diagnostics> {
        if !self.build_errors.is_empty() {
            return Err(Diagnostics(self.build_errors.clone()));
        }
        tl_ir::verify::verify(&self.ir)
    }

    /// Run the target's pass pipeline; the thread-level IR that codegen prints.
    pub fn lower(&self, target: Target) -> Result<tl_ir::Kernel, Diagnostics> {
        self.lower_dump(target, None)
    }

    fn lower_dump(
        &self,
        target: Target,
        dump: Option<&std::path::Path>,
    ) -> Result<tl_ir::Kernel, Diagnostics> {
        self.verify()?;
        let ir = with_persistent_blocks(&self.ir, || {
            Ok::<_, Diagnostics>(typical_multiprocessors(target))
        })?;
        tl_passes::run_pipeline(&ir, &target, dump)
    }

    /// The generated source for a target, without compiling it (no GPU or compiler needed).
    /// For GPU targets this is the variant specialized for aligned sizes (what launches with
    /// such sizes run); [`emit_general`](Self::emit_general) gives the fallback.
    pub fn emit(&self, target: Target) -> Result<String, Error> {
        let aligned = self.alignment_dims();
        if target.is_gpu() && !aligned.is_empty() {
            let mut special = self.clone();
            special.ir.attrs.dim_multiples = aligned
                .iter()
                .map(|&(i, m)| (self.ir.dims[i].clone(), m))
                .collect();
            return special.emit_general(target);
        }
        self.emit_general(target)
    }

    /// The PTX the PTX printer makes for a CUDA target (the aligned-size variant, as
    /// [`emit`](Self::emit)); an `unsupported` error names what it does not cover.
    pub fn emit_ptx(&self, target: Target) -> Result<String, Error> {
        let low = self.lower_aligned(target)?;
        Ok(tl_codegen::ptx::generate(&low, target)?.code)
    }

    /// The kernel compiled for an AMD target by clang (the variant for aligned sizes, as
    /// [`emit`](Self::emit)): the code object and the assembly it was made from, for the ISA
    /// report. Needs clang (LLVM 20 or newer), not a GPU.
    pub fn compile_amd(&self, target: Target) -> Result<tl_amdgpu::CodeObject, Error> {
        if !target.is_hip() {
            return Err(Error::Compile(Diagnostics::from(
                Diagnostic::new(
                    DiagKind::InvalidArgument,
                    Span::UNKNOWN,
                    format!("compile_amd needs an AMD target, not {target}"),
                )
                .help("use gfx942 or gfx950"),
            )));
        }
        let src = self.emit(target)?;
        Ok(tl_amdgpu::compile(&src, &target.arch())?)
    }

    /// The thread-level IR of the variant specialized for aligned sizes (what GPU launches
    /// with such sizes run; [`lower`](Self::lower) gives the variant for any sizes).
    pub fn lower_aligned(&self, target: Target) -> Result<tl_ir::Kernel, Diagnostics> {
        let mut special = self.clone();
        special.ir.attrs.dim_multiples = self
            .alignment_dims()
            .iter()
            .map(|&(i, m)| (self.ir.dims[i].clone(), m))
            .collect();
        special.lower(target)
    }

    /// The generated source of the variant that handles any sizes.
    pub fn emit_general(&self, target: Target) -> Result<String, Error> {
        let low = self.lower(target)?;
        match target {
            Target::Cpu => Ok(tl_codegen::c::generate(&low)?.code),
            Target::Cuda { .. } => Ok(tl_codegen::cuda::generate(&low, target)?.code),
            Target::Hip { .. } => Ok(tl_codegen::hip::generate(&low, target)?.code),
        }
    }

    pub fn compile(&self, dev: &Device) -> Result<Executable, Error> {
        self.compile_with(dev, &CompileOptions::default())
    }

    pub fn compile_with(&self, dev: &Device, opts: &CompileOptions) -> Result<Executable, Error> {
        self.verify()?;
        // On GPUs, compile for the common case first: sizes that are the contiguous extent of
        // a tensor are taken to be multiples of a 16-byte vector, so copies need no run-time
        // alignment branches; launches with other sizes use a general variant, built when
        // first needed (Triton specializes on divisibility the same way).
        let aligned = self.alignment_dims();
        if dev.is_cpu() || aligned.is_empty() {
            return self.compile_variant(&self.ir, dev, opts);
        }
        let mut special = self.ir.clone();
        special.attrs.dim_multiples = aligned
            .iter()
            .map(|&(i, m)| (self.ir.dims[i].clone(), m))
            .collect();
        let exe = self
            .compile_variant(&special, dev, opts)?
            .with_variant_note(format!(
                "aligned({})",
                describe_multiples(&self.ir, &aligned)
            ));
        let general = self.clone();
        let (dev2, opts2) = (*dev, opts.clone());
        Ok(exe.with_fallback(aligned, move |class: &[(usize, i64)]| {
            let mut ir = general.ir.clone();
            ir.attrs.dim_multiples = class
                .iter()
                .filter(|&&(_, m)| m > 1)
                .map(|&(i, m)| (general.ir.dims[i].clone(), m))
                .collect();
            // Hopper: where some size is only element-aligned (an odd K), read-only inputs
            // load by TMA from pitched copies the runtime stages (4095³ bf16: 23 -> 424
            // TFLOP/s); rows of 4 or 8 bytes keep cp.async of that width, which measured
            // faster than staging (4096x4096x4100: 405 against 260-316).
            ir.attrs.tma_pitched_inputs = class.iter().any(|&(_, m)| m == 1);
            let mut note = format!("class({})", describe_multiples(&general.ir, class));
            if ir.attrs.tma_pitched_inputs
                && target_has_tma(&dev2)
                && stages_an_input(&general.ir, class)
            {
                note.push_str("+pitched-tma");
                // With `TILELANG_STAGE_IN_KERNEL=1`, a persistent warp-specialized kernel
                // copies those rows itself while it runs (`tl_passes::gpu::stage_rows`).
                if stage_in_kernel_wanted() {
                    ir.attrs.stage_rows_in_kernel = odd_row_inputs(&general.ir, class)
                        .filter(|b| b.rank() == 2)
                        .map(|b| b.id())
                        .collect();
                }
            }
            general
                .compile_variant(&ir, &dev2, &opts2)
                .map(|e| {
                    if !e.signature().abi.staged.is_empty() {
                        note.push_str("+in-kernel");
                    }
                    e.with_variant_note(note)
                })
                .map_err(|e| RuntimeError::Launch(e.to_string()))
        }))
    }

    /// Dims that are the last (contiguous) extent of some tensor, with the number of elements
    /// of that tensor's type in 16 bytes (the largest over the tensors that use the dim).
    fn alignment_dims(&self) -> Vec<(usize, i64)> {
        let mut out: Vec<(usize, i64)> = vec![];
        for (b, _) in self.ir.tensors() {
            let Some(last) = b.shape().last() else {
                continue;
            };
            if let Some(v) = last.as_var() {
                if let Some(i) = self.ir.dims.iter().position(|d| d == v) {
                    let m = (16 / b.dtype().bytes().max(1)) as i64;
                    match out.iter_mut().find(|(j, _)| *j == i) {
                        Some(e) => e.1 = e.1.max(m),
                        None => out.push((i, m)),
                    }
                }
            }
        }
        out
    }

    fn compile_variant(
        &self,
        ir: &tl_ir::Kernel,
        dev: &Device,
        opts: &CompileOptions,
    ) -> Result<Executable, Error> {
        let t0 = Instant::now();
        let dump = opts
            .dump_ir
            .clone()
            .or_else(|| std::env::var_os("TILELANG_DUMP_IR").map(PathBuf::from));
        let cache = match &opts.cache_dir {
            Some(d) => Cache::at(d),
            None => Cache::from_env(),
        };
        let target = dev.target()?;
        let ir = with_persistent_blocks(ir, || persistent_blocks_for(dev))?;
        // A link from this tile IR to its compiled code skips lowering and codegen on a hit.
        let pre = link_key_for(&ir, dev, target, dump.is_some())?;
        if let Some(pre) = &pre {
            if let Some(mut exe) = from_link(&cache, pre, &ir, dev) {
                exe.stats_mut().total = t0.elapsed();
                return Ok(exe);
            }
        }
        let t = Instant::now();
        let low = tl_passes::run_pipeline(&ir, &target, dump.as_deref())?;
        // The lowered kernel's grid: a persistent kernel launches fewer blocks than its
        // logical grid has.
        let sig = Signature::of(&low);
        let lower_time = t.elapsed();
        let mut exe = match dev {
            Device::Sim(t) => tl_runtime::build_sim(sig, low, *t),
            Device::Cpu => {
                let t = Instant::now();
                let src = tl_codegen::c::generate(&low)?;
                let codegen_time = t.elapsed();
                if let Some(dir) = &dump {
                    let _ = std::fs::write(dir.join(format!("{}.c", self.ir.name)), &src.code);
                }
                // The key covers the generated source (so any change to lowering or codegen
                // is a new entry), the compiler and its flags, the host CPU (code is built
                // for it) and the crate version.
                let flags = tl_runtime::cpu::CFLAGS.join(" ");
                let key = Cache::key(&[
                    "cpu",
                    &src.code,
                    env!("CARGO_PKG_VERSION"),
                    &flags,
                    cc_version()?,
                    host_id(),
                ]);
                let mut exe = tl_runtime::build_cpu(sig, &cache, &key, &src.entry, src.code)?;
                exe.stats_mut().codegen = codegen_time;
                exe
            }
            Device::Cuda(_) => {
                let t = Instant::now();
                let (src, fallback) = nvidia_source_explained(&low, target)?;
                let codegen_time = t.elapsed();
                let dump_source = |src: &tl_codegen::CudaSource| {
                    if let Some(dir) = &dump {
                        let ext = match src.language {
                            tl_codegen::Language::Ptx => "ptx",
                            tl_codegen::Language::CudaCpp => "cu",
                        };
                        let _ = std::fs::write(
                            dir.join(format!("{}.{}.{ext}", self.ir.name, src.arch)),
                            &src.code,
                        );
                    }
                };
                dump_source(&src);
                let build = |src: &tl_codegen::CudaSource,
                             sig: Signature|
                 -> Result<(String, Executable), Error> {
                    let key = cuda_key(src)?;
                    let exe = tl_runtime::build_cuda(
                        dev,
                        sig,
                        &cache,
                        &key,
                        src.code.clone(),
                        &src.entry,
                        &src.arch,
                        src.dynamic_smem_bytes,
                    )?;
                    Ok((key, exe))
                };
                let backend = Backend::requested()?;
                let (mut key, mut exe) = build(&src, sig.clone())?;
                let mut chosen = src;
                let mut fallback = fallback;
                // PTX that spills under its register bound where NVRTC's code from the CUDA
                // C++ does not: take the CUDA C++ build. Only when no backend was asked for by
                // name. (Until the printer deferred its writes to register-held elements, d64
                // attention's PTX spilled 36 bytes here and ran 428 against 482 TFLOP/s; a
                // second compile, after the first, is the price where that still happens.)
                let spilled = spill_bytes(&exe).filter(|&n| n > 0);
                if let (Some(spilled), tl_codegen::Language::Ptx, None) =
                    (spilled, chosen.language, backend)
                {
                    let spill_free =
                        tl_codegen::cuda::generate(&low, target)
                            .ok()
                            .and_then(|alt| {
                                let (k, e) = build(&alt, sig.clone()).ok()?;
                                (spill_bytes(&e) == Some(0)).then_some((alt, k, e))
                            });
                    if let Some((alt, k, e)) = spill_free {
                        dump_source(&alt);
                        fallback = Some(format!(
                            "the PTX spilled {spilled} bytes per thread under its register bound; NVRTC's build of the CUDA C++ spills none"
                        ));
                        (chosen, key, exe) = (alt, k, e);
                    }
                }
                if let Some(pre) = &pre {
                    let link = Link {
                        key,
                        entry: chosen.entry.clone(),
                        arch: chosen.arch.clone(),
                        dynamic_smem_bytes: chosen.dynamic_smem_bytes,
                        language: match chosen.language {
                            tl_codegen::Language::Ptx => "ptx".into(),
                            tl_codegen::Language::CudaCpp => "cuda".into(),
                        },
                        fallback: fallback.clone(),
                        source: chosen.code.clone(),
                        tmaps: sig.abi.tmaps.clone(),
                        staged: sig.abi.staged.clone(),
                        threads: sig.threads,
                    };
                    link.write(&cache, pre);
                }
                exe.stats_mut().codegen = codegen_time;
                exe.stats_mut().fallback = fallback;
                exe
            }
            Device::Hip(_) => {
                // The HIP backend is untested on AMD hardware (see `tl_runtime::hip`).
                let t = Instant::now();
                let src = tl_codegen::hip::generate(&low, target)?;
                let codegen_time = t.elapsed();
                if let Some(dir) = &dump {
                    let _ = std::fs::write(
                        dir.join(format!("{}.{}.hip", self.ir.name, src.arch)),
                        &src.code,
                    );
                }
                // clang runs only on a cache miss; the key still names its version. The
                // registers and spills clang's assembly reports are cached beside the code
                // object, so `resource_usage` has them on a hit too.
                let key = hip_key(&src)?;
                let arch = src.arch.clone();
                let link = pre.as_ref().map(|_| Link {
                    key: key.clone(),
                    entry: src.entry.clone(),
                    arch: arch.clone(),
                    dynamic_smem_bytes: 0,
                    language: "hip".into(),
                    fallback: None,
                    source: src.code.clone(),
                    tmaps: vec![],
                    staged: vec![],
                    threads: sig.threads,
                });
                let mut exe = tl_runtime::build_hip(
                    dev,
                    sig,
                    &cache,
                    &key,
                    src.code,
                    &src.entry,
                    |code: &str| clang_hip(code, &arch),
                )?;
                if let (Some(pre), Some(link)) = (&pre, link) {
                    link.write(&cache, pre);
                }
                exe.stats_mut().codegen = codegen_time;
                exe
            }
        };
        let st = exe.stats_mut();
        st.lower = lower_time;
        st.total = t0.elapsed();
        Ok(exe)
    }
}

/// The link key of a kernel about to be compiled for `dev` (see [`crate::link`]), or `None`
/// where there is no link: the CPU and the simulator (their builds are cheap or in memory),
/// persistent kernels whose launched grid the tile IR does not settle (clustered ones:
/// `persistent::launch_grid`), and IR dumps (which want the lowering).
fn link_key_for(
    ir: &tl_ir::Kernel,
    dev: &Device,
    target: Target,
    dumping: bool,
) -> Result<Option<String>, Error> {
    if !matches!(dev, Device::Cuda(_) | Device::Hip(_)) {
        return Ok(None);
    }
    link_key_for_target(ir, target, dumping)
}

/// [`link_key_for`] by target (GPU targets only).
fn link_key_for_target(
    ir: &tl_ir::Kernel,
    target: Target,
    dumping: bool,
) -> Result<Option<String>, Error> {
    let unlinkable_persistent = ir.attrs.persistent_blocks.is_some()
        && tl_passes::gpu::persistent::launch_grid(ir).is_none();
    if dumping || unlinkable_persistent || !crate::link::names_are_unique(ir) {
        return Ok(None);
    }
    let arch = target.arch();
    let toolchain = match target {
        Target::Cuda { .. } => {
            // The PTX path falls back to CUDA C++ when nvJitLink is missing: its absence is
            // part of the identity too.
            let ptx = match Backend::from_env()? {
                Backend::Ptx => tl_runtime::ptx_toolchain_id(&arch).unwrap_or_default(),
                Backend::CudaCpp => String::new(),
            };
            format!("{}|{ptx}", tl_runtime::cuda_toolchain_id(&arch)?)
        }
        Target::Hip { .. } => tl_amdgpu::Clang::find()?.version,
        Target::Cpu => return Ok(None),
    };
    Ok(Some(link_key(ir, &arch, &toolchain)))
}

/// The executable a link leads to, loaded without lowering (`None` when there is no usable
/// link: the caller then compiles the full way, which also repairs the link).
fn from_link(cache: &Cache, pre: &str, ir: &tl_ir::Kernel, dev: &Device) -> Option<Executable> {
    let link = Link::read(cache, pre)?;
    let mut sig = Signature::of(ir);
    // A persistent kernel launches the blocks its rounds need, not its logical grid.
    if let Some(grid) = tl_passes::gpu::persistent::launch_grid(ir) {
        sig.grid = grid;
    }
    sig.abi.tmaps = link.tmaps.clone();
    sig.abi.staged = link.staged.clone();
    sig.threads = link.threads;
    match (dev, link.language.as_str()) {
        (Device::Cuda(_), "ptx" | "cuda") => {
            let mut exe = tl_runtime::build_cuda(
                dev,
                sig,
                cache,
                &link.key,
                link.source,
                &link.entry,
                &link.arch,
                link.dynamic_smem_bytes,
            )
            .ok()?;
            exe.stats_mut().fallback = link.fallback;
            Some(exe)
        }
        (Device::Hip(_), "hip") => {
            let arch = link.arch.clone();
            tl_runtime::build_hip(
                dev,
                sig,
                cache,
                &link.key,
                link.source,
                &link.entry,
                |code: &str| clang_hip(code, &arch),
            )
            .ok()
        }
        _ => None,
    }
}

/// The kernel with a persistent request for "one block per multiprocessor" (0) replaced by
/// `count()`; other kernels as they are.
fn with_persistent_blocks<E>(
    ir: &tl_ir::Kernel,
    count: impl FnOnce() -> Result<u32, E>,
) -> Result<std::borrow::Cow<'_, tl_ir::Kernel>, E> {
    if ir.attrs.persistent_blocks != Some(0) {
        return Ok(std::borrow::Cow::Borrowed(ir));
    }
    let mut k = ir.clone();
    k.attrs.persistent_blocks = Some(count()?.max(1));
    Ok(std::borrow::Cow::Owned(k))
}

/// Blocks of a persistent kernel that asked for one per multiprocessor: the device's count on
/// a GPU (compute units on an AMD GPU); three in the simulator, so that blocks take several
/// rounds even on small tests.
fn persistent_blocks_for(dev: &Device) -> Result<u32, Error> {
    Ok(match dev {
        Device::Cuda(_) => dev.cuda_props()?.multiprocessors,
        Device::Hip(_) => dev.hip_props()?.compute_units,
        _ => 3,
    })
}

/// Multiprocessors assumed when source is emitted with no device at hand: an H100 SXM's 132
/// for sm_90, an A100's 108 for other CUDA targets, the flagship AMD part's compute units for
/// an AMD target (MI300X: 304 for gfx942, MI355X: 256 for gfx950; the CPU ignores
/// persistence).
pub fn typical_multiprocessors(target: Target) -> u32 {
    match target {
        Target::Cuda { sm } if sm >= 90 => 132,
        Target::Hip { .. } => target.amd().map_or(304, |a| a.compute_units),
        _ => 108,
    }
}

/// Compile HIP source with clang for `arch`: the code object, and the registers, spills,
/// scratch and LDS its assembly reports ([`amd_usage`]).
fn clang_hip(code: &str, arch: &str) -> Result<tl_runtime::HipCode, Error> {
    let co = tl_amdgpu::compile(code, arch)?;
    Ok(tl_runtime::HipCode {
        usage: amd_usage(&co.asm),
        code: co.elf,
    })
}

/// What clang's assembly of an AMD kernel says about its resources, as a [`ResourceUsage`]:
/// VGPRs allocated per lane (architectural and accumulation together) as `registers`, scratch
/// per lane as `local_bytes`, LDS as `static_smem_bytes`, the workgroup size, the gfx number
/// as `binary_version`, the spilled VGPRs and SGPRs, and the ISA report as the log. `None`
/// when the assembly cannot be reported on (`tl_amdgpu::isa::report` fails), which clang's
/// output for our kernels never is.
pub fn amd_usage(asm: &str) -> Option<ResourceUsage> {
    let r = tl_amdgpu::isa::report(asm).ok()?;
    let k = &r.kernel;
    Some(ResourceUsage {
        registers: k.alloc_vgprs,
        local_bytes: k.scratch_bytes,
        static_smem_bytes: k.lds_bytes,
        max_threads_per_block: k.workgroup_size,
        binary_version: k.arch.trim_start_matches("gfx").parse().unwrap_or(0),
        vgpr_spills: Some(k.vgpr_spills),
        sgpr_spills: Some(k.sgpr_spills),
        log: r.table(),
        ..Default::default()
    })
}

/// The cache key of generated HIP source: the source, the arch, clang's version (`clang
/// --version`'s first line; finding clang does not compile anything) and our version.
fn hip_key(src: &tl_codegen::hip::HipSource) -> Result<String, Error> {
    let clang = tl_amdgpu::Clang::find()?;
    Ok(Cache::key(&[
        "hip",
        &src.code,
        &src.arch,
        &clang.version,
        env!("CARGO_PKG_VERSION"),
    ]))
}

/// How NVIDIA device code is made, from `TILELANG_BACKEND`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// CUDA C++ through NVRTC (NVVM, then ptxas).
    CudaCpp,
    /// PTX printed directly and assembled by nvJitLink (ptxas only), falling back to CUDA C++
    /// for kernels the PTX printer does not cover.
    Ptx,
}

impl Backend {
    /// The backend `TILELANG_BACKEND` asks for (`cuda` or `ptx`), or `None` when it is unset.
    pub fn requested() -> Result<Option<Backend>, Error> {
        match std::env::var("TILELANG_BACKEND").ok().as_deref() {
            None | Some("") => Ok(None),
            Some("cuda") => Ok(Some(Backend::CudaCpp)),
            Some("ptx") => Ok(Some(Backend::Ptx)),
            Some(other) => Err(Error::Compile(Diagnostics::from(
                Diagnostic::new(
                    DiagKind::InvalidArgument,
                    Span::UNKNOWN,
                    format!("TILELANG_BACKEND={other} is not a backend"),
                )
                .help("set TILELANG_BACKEND to `ptx` or `cuda`, or leave it unset"),
            ))),
        }
    }

    /// `TILELANG_BACKEND`, or [`Backend::DEFAULT`] when it is unset.
    pub fn from_env() -> Result<Backend, Error> {
        Ok(Backend::requested()?.unwrap_or(Backend::DEFAULT))
    }

    /// PTX: cold compiles take a third to a half of NVRTC's (under 0.3 s for every example
    /// kernel on an H100 machine). The kernels run within 1–6% of the CUDA C++ path's, faster
    /// for causal attention and the mma.sync kernels (run 9g in docs/gpu-notes.md).
    /// `TILELANG_BACKEND=cuda` chooses CUDA C++.
    pub const DEFAULT: Backend = Backend::Ptx;
}

/// Spill stores per thread in ptxas's report of a CUDA build (`None` without a report).
fn spill_bytes(exe: &Executable) -> Option<u32> {
    exe.resource_usage().and_then(|u| u.spill_stores)
}

/// The device code for a CUDA target from the backend `TILELANG_BACKEND` selects: with PTX, a
/// kernel the PTX printer does not cover falls back to CUDA C++ (the source's `language` says
/// which it is). With the variable unset, PTX also falls back to CUDA C++ when nvJitLink cannot
/// be loaded; asked for by name, it does not, and the compile names the missing library.
pub fn nvidia_source(low: &tl_ir::Kernel, target: Target) -> Result<tl_codegen::CudaSource, Error> {
    Ok(nvidia_source_explained(low, target)?.0)
}

/// [`nvidia_source`], with the reason when the source is CUDA C++ although PTX was wanted.
pub fn nvidia_source_explained(
    low: &tl_ir::Kernel,
    target: Target,
) -> Result<(tl_codegen::CudaSource, Option<String>), Error> {
    let cuda = |low| -> Result<tl_codegen::CudaSource, Error> {
        Ok(tl_codegen::cuda::generate(low, target)?)
    };
    let missing_assembler = match Backend::requested()? {
        Some(Backend::CudaCpp) => return Ok((cuda(low)?, None)),
        Some(Backend::Ptx) => None,
        None if Backend::DEFAULT == Backend::CudaCpp => return Ok((cuda(low)?, None)),
        None => tl_nvrtc::JitLink::global().err().map(|e| {
            format!(
                "nvJitLink cannot be loaded ({e}); set TILELANG_NVJITLINK to libnvJitLink.so, \
                 or install the `nvidia-nvjitlink` wheel"
            )
        }),
    };
    let why = match missing_assembler {
        Some(why) => why,
        None => match tl_codegen::ptx::generate(low, target) {
            Ok(src) => return Ok((src, None)),
            // No CUDA C++ for NVSHMEM kernels: the PTX printer's reason is the one to give.
            Err(d) if low.attrs.dist.as_ref().is_some_and(|d| d.nvshmem) => return Err(d.into()),
            Err(d) => format!("the PTX printer does not cover this kernel: {d}"),
        },
    };
    Ok((cuda(low)?, Some(why)))
}

/// The cache key of generated CUDA or PTX: the source, the arch, NVRTC and its options (and
/// nvJitLink for PTX), our version.
fn cuda_key(src: &tl_codegen::cuda::CudaSource) -> Result<String, Error> {
    // PTX is assembled by nvJitLink, so its version and options change those cubins (and only
    // those).
    let assembler = match src.language {
        tl_codegen::Language::Ptx => tl_runtime::ptx_toolchain_id(&src.arch)?,
        tl_codegen::Language::CudaCpp => String::new(),
    };
    // NVSHMEM's shim and archive are linked in: their version changes the cubin.
    let linked = if tl_nvrtc::nvshmem::uses_nvshmem(&src.code) {
        tl_nvrtc::nvshmem::toolchain_id().map_err(tl_runtime::RuntimeError::from)?
    } else {
        String::new()
    };
    Ok(Cache::key(&[
        "cuda",
        &src.code,
        &src.arch,
        &tl_runtime::cuda_toolchain_id(&src.arch)?,
        &assembler,
        &linked,
        env!("CARGO_PKG_VERSION"),
    ]))
}

/// What [`Kernel::precompile_for`] did: the disk-cache entry of the kernel for a GPU target
/// and whether it was already there.
#[derive(Clone, Debug)]
pub struct Precompiled {
    pub target: Target,
    /// The cache key: the one [`Kernel::compile`] looks up on a device of this architecture.
    pub key: String,
    /// The binary came from the disk cache (no NVRTC or clang ran).
    pub cache_hit: bool,
    /// AMD: registers, spills, scratch and LDS from clang's assembly (from the cache on a hit),
    /// what [`Executable::resource_usage`] gives the loaded kernel. `None` for CUDA, whose
    /// numbers come from the driver when the cubin is loaded.
    pub usage: Option<ResourceUsage>,
    /// Where the time went: `lower` (verification and passes), `codegen` (source and cache
    /// key), `compile` (NVRTC or clang on a miss, else zero), `load` (the cache lookup on a
    /// hit: reading the binary and the usage), `total`.
    pub stats: CompileStats,
}

impl Kernel {
    /// Do the expensive, thread-safe part of compiling for `dev` — lowering, code generation
    /// and NVRTC (CUDA) or clang (HIP) into the disk cache — without loading anything, so
    /// candidates can be prepared on many threads; a later [`compile`](Self::compile) is then a
    /// cache hit. A no-op on the CPU and the simulator.
    pub fn precompile(&self, dev: &Device, opts: &CompileOptions) -> Result<(), Error> {
        self.verify()?;
        if !dev.is_cuda() && !dev.is_hip() {
            return Ok(());
        }
        let target = dev.target()?;
        self.precompile_target(target, || persistent_blocks_for(dev), opts)?;
        Ok(())
    }

    /// [`precompile`](Self::precompile) by target rather than device: lower, generate the
    /// source of the variant for aligned sizes (what [`compile`](Self::compile) builds first),
    /// compute its cache key and look it up in the disk cache, running NVRTC (CUDA) or clang
    /// (AMD) only on a miss. No GPU is needed, only the target's compiler. A later `compile`
    /// on a device of this architecture finds the entry; for a persistent kernel of one block
    /// per multiprocessor, only when the device has the multiprocessor count assumed for the
    /// target without one (the flagship part's: 304 CUs for gfx942, 256 for gfx950; 132 SMs
    /// for sm_90a, 108 for other CUDA targets). The CPU is not a target here (its compile loads
    /// the library it builds).
    pub fn precompile_for(
        &self,
        target: Target,
        opts: &CompileOptions,
    ) -> Result<Precompiled, Error> {
        self.verify()?;
        if !target.is_gpu() {
            return Err(Error::Compile(Diagnostics::from(
                Diagnostic::new(
                    DiagKind::InvalidArgument,
                    Span::UNKNOWN,
                    format!("precompile_for compiles GPU code, and {target} is not a GPU target"),
                )
                .help("use an NVIDIA (sm_80, sm_90a) or AMD (gfx942, gfx950) target; on the CPU, Kernel::compile builds and caches the library"),
            )));
        }
        self.precompile_target(
            target,
            || Ok::<_, Error>(typical_multiprocessors(target)),
            opts,
        )
    }

    /// Lower the aligned-size variant for `target` (a persistent kernel of one block per
    /// multiprocessor gets `blocks()`, as `compile_variant` does, so that the key matches),
    /// generate its source and key, and look it up or compile it into the cache.
    fn precompile_target(
        &self,
        target: Target,
        blocks: impl FnOnce() -> Result<u32, Error>,
        opts: &CompileOptions,
    ) -> Result<Precompiled, Error> {
        let t0 = Instant::now();
        let cache = match &opts.cache_dir {
            Some(d) => Cache::at(d),
            None => Cache::from_env(),
        };
        let mut ir = self.ir.clone();
        ir.attrs.dim_multiples = self
            .alignment_dims()
            .iter()
            .map(|&(i, m)| (self.ir.dims[i].clone(), m))
            .collect();
        let ir = with_persistent_blocks(&ir, blocks)?;
        let pre = link_key_for_target(&ir, target, false)?;
        if let Some(link) = pre.as_ref().and_then(|p| Link::read(&cache, p)) {
            let mut stats = CompileStats::default();
            let (hit, usage, compile) = if target.is_hip() {
                let arch = link.arch.clone();
                tl_runtime::lookup_or_compile_hip(&cache, &link.key, &link.source, |code: &str| {
                    clang_hip(code, &arch)
                })?
            } else {
                let t = Instant::now();
                let hit = tl_runtime::precompile_cuda(
                    &cache,
                    &link.key,
                    &self.ir.name,
                    &link.source,
                    &link.arch,
                )?;
                (
                    hit,
                    None,
                    if hit { Default::default() } else { t.elapsed() },
                )
            };
            stats.cache_hit = hit;
            stats.compile = compile;
            stats.total = t0.elapsed();
            if hit {
                stats.load = stats.total;
            }
            return Ok(Precompiled {
                target,
                key: link.key,
                cache_hit: hit,
                usage,
                stats,
            });
        }
        let low = tl_passes::run_pipeline(&ir, &target, None)?;
        let mut stats = CompileStats {
            lower: t0.elapsed(),
            ..Default::default()
        };
        let t = Instant::now();
        let (key, cache_hit, usage, compile) = if target.is_hip() {
            let src = tl_codegen::hip::generate(&low, target)?;
            let key = hip_key(&src)?;
            stats.codegen = t.elapsed();
            let arch = src.arch.clone();
            let (hit, usage, compile) =
                tl_runtime::lookup_or_compile_hip(&cache, &key, &src.code, |code: &str| {
                    clang_hip(code, &arch)
                })?;
            if let Some(pre) = &pre {
                Link {
                    key: key.clone(),
                    entry: src.entry.clone(),
                    arch,
                    dynamic_smem_bytes: 0,
                    language: "hip".into(),
                    fallback: None,
                    source: src.code.clone(),
                    tmaps: vec![],
                    staged: vec![],
                    threads: low.threads,
                }
                .write(&cache, pre);
            }
            (key, hit, usage, compile)
        } else {
            let (src, fallback) = nvidia_source_explained(&low, target)?;
            let key = cuda_key(&src)?;
            stats.codegen = t.elapsed();
            let t = Instant::now();
            let hit =
                tl_runtime::precompile_cuda(&cache, &key, &self.ir.name, &src.code, &src.arch)?;
            if let Some(pre) = &pre {
                Link {
                    key: key.clone(),
                    entry: src.entry.clone(),
                    arch: src.arch.clone(),
                    dynamic_smem_bytes: src.dynamic_smem_bytes,
                    language: match src.language {
                        tl_codegen::Language::Ptx => "ptx".into(),
                        tl_codegen::Language::CudaCpp => "cuda".into(),
                    },
                    fallback,
                    source: src.code.clone(),
                    tmaps: tl_codegen::abi::tma_specs(&low),
                    staged: tl_codegen::abi::staged_params(&low),
                    threads: low.threads,
                }
                .write(&cache, pre);
            }
            (
                key,
                hit,
                None,
                if hit { Default::default() } else { t.elapsed() },
            )
        };
        stats.cache_hit = cache_hit;
        stats.compile = compile;
        stats.total = t0.elapsed();
        if cache_hit {
            stats.load = stats.total.saturating_sub(stats.lower + stats.codegen);
        }
        Ok(Precompiled {
            target,
            key,
            cache_hit,
            usage,
            stats,
        })
    }
}

impl std::fmt::Display for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.ir)
    }
}

/// `K%8,N%8`: the multiples a variant assumes of its kernel's sizes (for `Executable::variant`).
fn describe_multiples(k: &tl_ir::Kernel, pairs: &[(usize, i64)]) -> String {
    pairs
        .iter()
        .map(|&(i, m)| {
            let name = k
                .dims
                .get(i)
                .map(|d| d.name().to_string())
                .unwrap_or_default();
            format!("{name}%{m}")
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Whether the device's target loads by TMA (the pitched staging applies there only).
fn target_has_tma(dev: &Device) -> bool {
    dev.target().is_ok_and(|t| t.has_tma())
}

/// `TILELANG_STAGE_IN_KERNEL=1`: a kernel that can copies its odd rows itself
/// (`tl_passes::gpu::stage_rows`) instead of the runtime staging them before the launch. Off
/// by default: on an H200 it measured 15–55% slower than the runtime's copies
/// (docs/performance.md, session 39).
fn stage_in_kernel_wanted() -> bool {
    std::env::var("TILELANG_STAGE_IN_KERNEL").ok().as_deref() == Some("1")
}

/// The input tensors whose rows run along a size of alignment class 1 (odd, or at an address
/// off 16 bytes): those the runtime stages.
fn odd_row_inputs<'k>(
    k: &'k tl_ir::Kernel,
    class: &[(usize, i64)],
) -> impl Iterator<Item = &'k tl_ir::Buffer> {
    let odd: Vec<&tl_ir::Var> = class
        .iter()
        .filter(|&&(_, m)| m == 1)
        .filter_map(|&(i, _)| k.dims.get(i))
        .collect();
    k.tensors().filter_map(move |(buffer, role)| {
        let row = buffer.shape().last().and_then(|d| d.as_var());
        (role == tl_ir::Role::Input && row.is_some_and(|v| odd.contains(&v))).then_some(buffer)
    })
}

/// Whether an input tensor's rows run along a dim the class leaves element-aligned (what the
/// runtime then stages pitched for TMA).
fn stages_an_input(k: &tl_ir::Kernel, class: &[(usize, i64)]) -> bool {
    odd_row_inputs(k, class).next().is_some()
}
