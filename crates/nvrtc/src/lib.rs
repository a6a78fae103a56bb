//! The CUDA toolchain, reached at run time: NVRTC compiles generated CUDA C++ to a cubin for an
//! exact architecture (`sm_80`, `sm_90a`), ptxas's verbose log gives each kernel's registers,
//! spills and stack, and `cuobjdump` (when installed) lists the SASS so tests can check that a
//! kernel uses the instructions it was meant to (HMMA, HGMMA, LDGSTS, LDSM).
//!
//! Nothing here links against CUDA: NVRTC is loaded with `dlopen` from the place the installer
//! (`scripts/install-cuda-tools.sh`) unpacked the PyPI wheels, from `$TILELANG_NVRTC`, or from
//! a system CUDA. Without it, every call returns [`NvrtcError::NotFound`] saying where it looked
//! and how to install it, so machines without CUDA still build and test the rest.
//!
//! ```no_run
//! let src = r#"extern "C" __global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }"#;
//! let report = tl_nvrtc::check(src, "sm_90a")?;
//! println!("{report}");
//! # Ok::<(), tl_nvrtc::NvrtcError>(())
//! ```

mod error;
mod jitlink;
mod library;
pub mod nvshmem;
mod ptxas;
mod sass;
pub mod testing;
mod usage;

use std::ffi::{c_char, c_int, CString};
use std::fmt;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub use error::{NvrtcError, INSTALL_HINT};
pub use jitlink::{discover_jitlink, is_ptx, needs_whole_program, JitLink, LinkInput};
pub use library::{discover, find_tool, tools_dirs, Library as Nvrtc};
pub use ptxas::{Assembled, Ptxas};
pub use sass::{cuobjdump, has_instruction, sass, sass_opcodes};
pub use usage::{parse_ptxas_log, FunctionUsage, ResourceUsage};

static GLOBAL: OnceLock<Result<Nvrtc, NvrtcError>> = OnceLock::new();

impl Nvrtc {
    /// The process-wide NVRTC, discovered once ([`discover`] says where it looks).
    pub fn global() -> Result<&'static Nvrtc, NvrtcError> {
        GLOBAL
            .get_or_init(library::discover)
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Compile `source` for `arch` (`sm_80`, `sm_86`, `sm_89`, `sm_90a`, ...) to a cubin.
    pub fn compile(
        &self,
        source: &str,
        arch: &str,
        opts: &CompileOptions,
    ) -> Result<Compiled, NvrtcError> {
        let sm = parse_arch(arch)?;
        let supported = self.supported_archs()?;
        if !supported.contains(&sm) {
            return Err(NvrtcError::InvalidArch {
                arch: arch.into(),
                reason: format!(
                    "NVRTC {}.{} compiles for sm_{{{}}}",
                    self.version().0,
                    self.version().1,
                    supported
                        .iter()
                        .map(|s| s.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                ),
            });
        }
        let mut flags = opts.flags(arch);
        // NVRTC 12.9+ keeps its own cache of compiled programs, and a hit there returns no
        // ptxas report: the spill check would pass blind and a "cold" compile would be timed
        // as a lookup. Callers cache cubins themselves (with the log), so NVRTC's is skipped.
        if self.version() >= (12, 9) {
            flags.push("--no-cache".into());
        }
        // The generated code uses no textures, surfaces, device-side launches or cudadevrt:
        // `--minimal` (NVRTC 12.4+) leaves their declarations out of the front end's input,
        // about a third of an empty program's front-end time.
        if self.version() >= (12, 4) {
            flags.push("--minimal".into());
        }
        self.compile_with_flags(source, arch, &opts.name, flags)
    }

    /// Compile `source` (named `name` in diagnostics) with exactly `flags` (`arch` only
    /// labels the result): for programs the generated-code defaults do not fit, such as
    /// NVSHMEM's shim (relocatable, with headers and device runtime declarations).
    pub fn compile_with_flags(
        &self,
        source: &str,
        arch: &str,
        name: &str,
        flags: Vec<String>,
    ) -> Result<Compiled, NvrtcError> {
        let src = CString::new(source)
            .map_err(|_| NvrtcError::InvalidSource("the source contains a NUL byte".into()))?;
        let cname = CString::new(name.replace('\0', ""))
            .map_err(|_| NvrtcError::InvalidSource("bad program name".into()))?;
        let cflags = c_options(&flags)?;
        let ptrs: Vec<*const c_char> = cflags.iter().map(|c| c.as_ptr()).collect();

        let api = self.api;
        let mut prog = Program {
            raw: std::ptr::null_mut(),
            lib: self,
        };
        // SAFETY: valid C strings; no headers are passed (the generated code includes none).
        self.check("nvrtcCreateProgram", unsafe {
            (api.create_program)(
                &mut prog.raw,
                src.as_ptr(),
                cname.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        })?;
        let start = Instant::now();
        // SAFETY: `ptrs` holds `ptrs.len()` valid C strings that outlive the call.
        let code = unsafe { (api.compile_program)(prog.raw, ptrs.len() as c_int, ptrs.as_ptr()) };
        let compile_time = start.elapsed();
        let log = prog.bytes(
            "nvrtcGetProgramLog",
            api.get_program_log_size,
            api.get_program_log,
        )?;
        let log = String::from_utf8_lossy(trim_nul(&log)).into_owned();
        if code != 0 {
            let mut log = if log.trim().is_empty() {
                self.error_string(code)
            } else {
                log
            };
            log.push_str(&source_excerpt(&log, source, name));
            return Err(NvrtcError::Compile {
                arch: arch.into(),
                log,
            });
        }
        let ptx = prog.bytes("nvrtcGetPTX", api.get_ptx_size, api.get_ptx)?;
        let cubin = prog.bytes("nvrtcGetCUBIN", api.get_cubin_size, api.get_cubin)?;
        let functions = parse_ptxas_log(&log);
        Ok(Compiled {
            arch: arch.into(),
            cubin,
            ptx: String::from_utf8_lossy(trim_nul(&ptx)).into_owned(),
            log,
            functions,
            compile_time,
            nvrtc_version: self.version(),
            assembler: "NVRTC",
            flags,
        })
    }
}

/// An NVRTC program, destroyed on drop.
struct Program<'a> {
    raw: library::Program,
    lib: &'a Nvrtc,
}

impl Program<'_> {
    fn bytes(
        &self,
        call: &'static str,
        size: unsafe extern "C" fn(library::Program, *mut usize) -> c_int,
        get: unsafe extern "C" fn(library::Program, *mut c_char) -> c_int,
    ) -> Result<Vec<u8>, NvrtcError> {
        let mut n = 0usize;
        // SAFETY: a live program and a valid out-pointer.
        self.lib.check(call, unsafe { size(self.raw, &mut n) })?;
        let mut v = vec![0u8; n];
        if n > 0 {
            // SAFETY: `v` has the `n` bytes NVRTC reported.
            self.lib.check(call, unsafe {
                get(self.raw, v.as_mut_ptr() as *mut c_char)
            })?;
        }
        Ok(v)
    }
}

impl Drop for Program<'_> {
    fn drop(&mut self) {
        if !self.raw.is_null() {
            // SAFETY: a program created by nvrtcCreateProgram and not yet destroyed.
            unsafe {
                (self.lib.api.destroy_program)(&mut self.raw);
            }
        }
    }
}

fn trim_nul(b: &[u8]) -> &[u8] {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    &b[..end]
}

/// Compiler options as C strings (NVRTC and nvJitLink take `const char**`).
fn c_options(flags: &[String]) -> Result<Vec<CString>, NvrtcError> {
    flags
        .iter()
        .map(|f| CString::new(f.as_str()))
        .collect::<Result<_, _>>()
        .map_err(|_| NvrtcError::InvalidSource("an option contains a NUL byte".into()))
}

/// `sm_80` → 80, `sm_90a` → 90. Anything else is refused before it can reach NVRTC's
/// option parser.
fn parse_arch(arch: &str) -> Result<u32, NvrtcError> {
    let bad = |reason: &str| NvrtcError::InvalidArch {
        arch: arch.into(),
        reason: reason.into(),
    };
    let rest = arch
        .strip_prefix("sm_")
        .ok_or_else(|| bad("expected sm_<number>[a|f], such as sm_80 or sm_90a"))?;
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let suffix = &rest[digits.len()..];
    if digits.is_empty() || !matches!(suffix, "" | "a" | "f") {
        return Err(bad("expected sm_<number>[a|f], such as sm_80 or sm_90a"));
    }
    digits
        .parse()
        .map_err(|_| bad("the SM number is out of range"))
}

/// For a failed compile: the source lines NVRTC's errors point at (`name(LINE): error`).
fn source_excerpt(log: &str, source: &str, name: &str) -> String {
    let lines: Vec<&str> = source.lines().collect();
    let mut out = String::new();
    let mut shown = std::collections::BTreeSet::new();
    let pat = format!("{name}(");
    for l in log.lines() {
        let Some(rest) = l.strip_prefix(&pat) else {
            continue;
        };
        let Some(n) = rest.split(')').next().and_then(|n| n.parse::<usize>().ok()) else {
            continue;
        };
        if n >= 1 && n <= lines.len() && shown.insert(n) && shown.len() <= 10 {
            out.push_str(&format!("\n  {name}:{n}: {}", lines[n - 1].trim_end()));
        }
    }
    if out.is_empty() {
        out
    } else {
        format!("\nsource lines:{out}\n")
    }
}

/// How to compile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompileOptions {
    /// The program's file name in diagnostics.
    pub name: String,
    /// Ask ptxas for its resource report (`-Xptxas -v`); on by default, since spill checks and
    /// register counts depend on it.
    pub resource_usage: bool,
    /// `--use_fast_math` (approximate division, sqrt and transcendentals, flush to zero).
    pub fast_math: bool,
    /// `-lineinfo`, for profilers.
    pub line_info: bool,
    /// `--maxrregcount`.
    pub max_registers: Option<u32>,
    /// More NVRTC options, passed last.
    pub extra: Vec<String>,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            name: "tilelang.cu".into(),
            resource_usage: true,
            fast_math: false,
            line_info: false,
            max_registers: None,
            extra: vec![],
        }
    }
}

impl CompileOptions {
    /// The NVRTC command line for `arch`.
    pub fn flags(&self, arch: &str) -> Vec<String> {
        let mut f = vec![format!("--gpu-architecture={arch}"), "--std=c++17".into()];
        if self.resource_usage {
            f.push("--ptxas-options=-v".into());
        }
        if self.fast_math {
            f.push("--use_fast_math".into());
        }
        if self.line_info {
            f.push("-lineinfo".into());
        }
        if let Some(n) = self.max_registers {
            f.push(format!("--maxrregcount={n}"));
        }
        f.extend(self.extra.iter().cloned());
        f
    }
}

/// A compiled program.
#[derive(Clone, Debug)]
pub struct Compiled {
    pub arch: String,
    /// The cubin (ELF) for exactly `arch`, loadable with `cuModuleLoadData`.
    pub cubin: Vec<u8>,
    ptx: String,
    /// NVRTC's log: warnings and ptxas's resource report.
    pub log: String,
    /// Per-function resource usage parsed from the log (empty without `resource_usage`).
    pub functions: Vec<FunctionUsage>,
    pub compile_time: Duration,
    /// (major, minor) of the NVRTC (or nvJitLink, or ptxas: [`Compiled::assembler`]) that
    /// compiled it; part of any cache key.
    pub nvrtc_version: (i32, i32),
    /// What made the cubin: NVRTC, nvJitLink (PTX) or ptxas (whole-program PTX).
    pub assembler: &'static str,
    /// The options NVRTC was given.
    pub flags: Vec<String>,
}

impl Compiled {
    /// The PTX NVRTC produced on the way to the cubin.
    pub fn ptx(&self) -> &str {
        &self.ptx
    }
    /// The resource usage of one function, by name.
    pub fn usage(&self, function: &str) -> Option<&ResourceUsage> {
        self.functions
            .iter()
            .find(|f| f.name == function)
            .map(|f| &f.usage)
    }
    /// Warning lines of the log (ptxas and front end), and ptxas's "Potential Performance
    /// Loss" notes, which it prints as info but which say an instruction was dropped or
    /// serialized (`setmaxnreg` ignored, wgmma serialized).
    pub fn warnings(&self) -> Vec<&str> {
        self.log
            .lines()
            .filter(|l| l.contains("warning") || l.contains("Potential Performance Loss"))
            .collect()
    }
}

/// Compile with the process-wide NVRTC, or — for PTX ([`is_ptx`]) — assemble with the
/// process-wide nvJitLink (which always reports resource usage; `opts` is for NVRTC).
pub fn compile(source: &str, arch: &str, opts: &CompileOptions) -> Result<Compiled, NvrtcError> {
    if is_ptx(source) {
        if nvshmem::uses_nvshmem(source) {
            return nvshmem::link(source, arch);
        }
        return JitLink::global()?.assemble(source, arch);
    }
    // A diagnostic path: NVRTC's PTX assembled by nvJitLink instead of NVRTC's own ptxas, to
    // tell the PTX printer's effect on a kernel from the assembler's.
    if std::env::var_os("TILELANG_NVRTC_PTX_VIA_JITLINK").is_some() {
        let c = Nvrtc::global()?.compile(source, arch, opts)?;
        return JitLink::global()?.assemble(c.ptx(), arch);
    }
    Nvrtc::global()?.compile(source, arch, opts)
}

/// (major, minor) of the process-wide NVRTC.
pub fn version() -> Result<(i32, i32), NvrtcError> {
    Ok(Nvrtc::global()?.version())
}

/// Whether a check lists SASS.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SassMode {
    /// Never run cuobjdump.
    Skip,
    /// List SASS when cuobjdump is installed; no SASS (and no instruction checks) otherwise.
    #[default]
    IfAvailable,
    /// Fail when cuobjdump is missing.
    Required,
}

/// What [`check_with`] demands of a program.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct CheckOptions {
    pub compile: CompileOptions,
    /// Accept register spills (by default any spill store or load fails the check).
    pub allow_spills: bool,
    pub sass: SassMode,
    /// SASS opcode prefixes that must appear (`HMMA`, `HGMMA`, `LDGSTS`, `LDSM`); checked when
    /// SASS was listed.
    pub require_instructions: Vec<String>,
    /// The kernel the report is about; by default the first entry point.
    pub entry: Option<String>,
}

/// What a check found.
#[derive(Clone, Debug)]
pub struct Report {
    pub arch: String,
    pub entry: String,
    /// The entry's resource usage.
    pub usage: ResourceUsage,
    pub functions: Vec<FunctionUsage>,
    pub log: String,
    pub warnings: Vec<String>,
    /// cuobjdump's listing, when it ran.
    pub sass: Option<String>,
    pub cubin_bytes: usize,
    pub compile_time: Duration,
    pub nvrtc_version: (i32, i32),
    /// What made the cubin ([`Compiled::assembler`]).
    pub assembler: &'static str,
}

impl Report {
    /// Opcode counts of the SASS (empty when no SASS was listed).
    pub fn opcodes(&self) -> std::collections::BTreeMap<String, usize> {
        self.sass.as_deref().map(sass_opcodes).unwrap_or_default()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {} ({} {}.{}, {:.0} ms, {} byte cubin{})",
            self.arch,
            self.entry,
            self.usage,
            self.assembler,
            self.nvrtc_version.0,
            self.nvrtc_version.1,
            self.compile_time.as_secs_f64() * 1e3,
            self.cubin_bytes,
            if self.sass.is_some() { ", SASS" } else { "" }
        )
    }
}

/// `ptx` with its `.maxnreg` raised to the largest `setmaxnreg.inc` value in it: what the
/// warpgroups that take registers may use once they have them. Other PTX is returned as is.
pub fn consumer_budget_model(ptx: &str) -> String {
    let most = ptx
        .lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix("setmaxnreg.inc.sync.aligned.u32")?
                .trim()
                .trim_end_matches(';')
                .trim()
                .parse::<u32>()
                .ok()
        })
        .max();
    let Some(most) = most else {
        return ptx.to_string();
    };
    ptx.lines()
        .map(|l| {
            if l.trim_start().starts_with(".maxnreg ") {
                format!(".maxnreg {most}")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// Compile for `arch` and fail on any register spill; list SASS when cuobjdump is installed.
/// The reusable gate for "this generated kernel builds cleanly on this architecture".
pub fn check(source: &str, arch: &str) -> Result<Report, NvrtcError> {
    check_with(source, arch, &CheckOptions::default())
}

/// [`check`] with options.
///
/// PTX that must be compiled as a whole program ([`needs_whole_program`]: it moves registers
/// between warpgroups with `setmaxnreg`) is assembled by ptxas where one is found ([`Ptxas`]:
/// the cubin, registers and SASS a GPU runs); without ptxas, by nvJitLink under the budget of
/// its largest `setmaxnreg.inc` ([`consumer_budget_model`]): nvJitLink drops `setmaxnreg`,
/// and the kernel's even share would report spills the whole-program compile does not make.
/// That report is then the consumers' code's.
pub fn check_with(source: &str, arch: &str, opts: &CheckOptions) -> Result<Report, NvrtcError> {
    let modeled;
    let c = match (needs_whole_program(source), Ptxas::global()) {
        (true, Some(ptxas)) => {
            let made = ptxas.assemble(source, arch)?;
            Compiled {
                arch: arch.into(),
                functions: parse_ptxas_log(&made.log),
                cubin: made.cubin,
                ptx: source.into(),
                log: made.log,
                compile_time: made.time,
                nvrtc_version: ptxas.version(),
                assembler: "ptxas",
                flags: vec![format!("ptxas -arch={arch}")],
            }
        }
        (true, None) => {
            modeled = consumer_budget_model(source);
            compile(&modeled, arch, &opts.compile)?
        }
        (false, _) => compile(source, arch, &opts.compile)?,
    };
    if !opts.allow_spills {
        if let Some(f) = c.functions.iter().find(|f| f.usage.spills()) {
            return Err(NvrtcError::Spills {
                arch: arch.into(),
                function: f.name.clone(),
                usage: f.usage,
            });
        }
    }
    let entry = match &opts.entry {
        Some(e) => e.clone(),
        None => c
            .functions
            .iter()
            .find(|f| f.entry)
            .map(|f| f.name.clone())
            .unwrap_or_default(),
    };
    let usage = c.usage(&entry).copied().unwrap_or_default();
    let listing = match opts.sass {
        SassMode::Skip => None,
        SassMode::IfAvailable => match sass(&c.cubin) {
            Ok(s) => Some(s),
            Err(NvrtcError::ToolNotFound { .. }) => None,
            Err(e) => return Err(e),
        },
        SassMode::Required => Some(sass(&c.cubin)?),
    };
    if let Some(s) = &listing {
        for want in &opts.require_instructions {
            if !has_instruction(s, want) {
                let ops = sass_opcodes(s);
                let found = ops
                    .iter()
                    .map(|(k, v)| format!("{k}×{v}"))
                    .collect::<Vec<_>>()
                    .join(" ");
                return Err(NvrtcError::MissingInstruction {
                    arch: arch.into(),
                    instruction: want.clone(),
                    found,
                });
            }
        }
    }
    Ok(Report {
        arch: arch.into(),
        entry,
        usage,
        warnings: c.warnings().into_iter().map(String::from).collect(),
        functions: c.functions,
        log: c.log,
        sass: listing,
        cubin_bytes: c.cubin.len(),
        compile_time: c.compile_time,
        nvrtc_version: c.nvrtc_version,
        assembler: c.assembler,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_program_ptx_is_checked_under_the_consumers_budget() {
        let ptx = ".version 8.0\n.target sm_90a\n.visible .entry k()\n.maxntid 384, 1, 1\n.maxnreg 168\n{\n  setmaxnreg.dec.sync.aligned.u32 40;\n  setmaxnreg.inc.sync.aligned.u32 232;\n  ret;\n}\n";
        assert!(needs_whole_program(ptx));
        let m = consumer_budget_model(ptx);
        assert!(
            m.contains(".maxnreg 232\n") && !m.contains(".maxnreg 168"),
            "{m}"
        );
        assert!(m.contains("setmaxnreg.dec.sync.aligned.u32 40;"), "{m}");
        // No register moves: neither whole-program nor changed.
        let plain =
            ".version 8.0\n.target sm_90a\n.visible .entry k()\n.maxnreg 168\n{\n  ret;\n}\n";
        assert!(!needs_whole_program(plain));
        assert_eq!(consumer_budget_model(plain), plain);
        // CUDA C++ that spells the instruction is not PTX.
        assert!(!needs_whole_program(
            "asm volatile(\"setmaxnreg.inc.sync.aligned.u32 240;\");"
        ));
    }

    #[test]
    fn arch_names() {
        assert_eq!(parse_arch("sm_80").ok(), Some(80));
        assert_eq!(parse_arch("sm_90a").ok(), Some(90));
        assert_eq!(parse_arch("sm_100f").ok(), Some(100));
        for bad in ["sm80", "sm_", "sm_90b", "compute_90", "sm_90 -G", ""] {
            assert!(parse_arch(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn flags() {
        let o = CompileOptions {
            max_registers: Some(128),
            fast_math: true,
            ..Default::default()
        };
        assert_eq!(
            o.flags("sm_90a"),
            vec![
                "--gpu-architecture=sm_90a",
                "--std=c++17",
                "--ptxas-options=-v",
                "--use_fast_math",
                "--maxrregcount=128"
            ]
        );
    }

    #[test]
    fn excerpt_points_at_lines() {
        let src = "a\nb bad\nc\n";
        let log = "k.cu(2): error: identifier \"bad\" is undefined\n";
        let e = source_excerpt(log, src, "k.cu");
        assert!(e.contains("k.cu:2: b bad"), "{e}");
        assert_eq!(source_excerpt("no errors", src, "k.cu"), "");
    }
}
