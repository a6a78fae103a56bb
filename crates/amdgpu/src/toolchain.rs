//! Finding clang (LLVM ≥ 20) and compiling generated HIP C++ with it: device code only, to the
//! assembly (kept, for the ISA report) and from that assembly to a code object.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The oldest LLVM whose AMDGPU backend knows gfx950.
pub const MIN_LLVM: u32 = 20;

/// Why compiling for AMD failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ToolchainError {
    #[error("no clang with an AMDGPU backend (LLVM {MIN_LLVM} or newer) was found (looked for {searched}); install Debian's `clang-22` and `lld-22` packages (`scripts/test.sh` does, as root), or set TILELANG_CLANG to a clang++ binary")]
    NoClang { searched: String },
    #[error("{path} is LLVM {major}; gfx950 needs LLVM {MIN_LLVM} or newer (install `clang-22` and `lld-22`, or point TILELANG_CLANG at a newer clang++)")]
    TooOld { path: String, major: u32 },
    #[error("{arch} is not an AMD target this toolchain compiles for (gfx942 or gfx950)")]
    BadArch { arch: String },
    #[error("clang failed to compile the kernel for {arch}:\n{log}")]
    Compile { arch: String, log: String },
    #[error("assembling or linking the {arch} code object failed (is lld installed? Debian's `lld-22`):\n{log}")]
    Link { arch: String, log: String },
    #[error("{what}: {err}")]
    Io { what: String, err: String },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ToolchainError {
    let what = what.into();
    move |e| ToolchainError::Io {
        what,
        err: e.to_string(),
    }
}

/// A clang driver binary and its LLVM major version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clang {
    pub path: PathBuf,
    pub major: u32,
    /// `clang --version`'s first line (part of cache keys).
    pub version: String,
}

/// The major version in `clang --version`'s output ("... clang version 22.1.8 ...").
pub fn parse_version(text: &str) -> Option<(u32, String)> {
    let line = text.lines().next()?.trim().to_string();
    let at = line.find("clang version ")? + "clang version ".len();
    let major = line[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    Some((major, line))
}

fn probe(path: &Path) -> Option<Clang> {
    let out = Command::new(path).arg("--version").output().ok()?;
    if !out.status.success() {
        return None;
    }
    let (major, version) = parse_version(&String::from_utf8_lossy(&out.stdout))?;
    Some(Clang {
        path: path.to_path_buf(),
        major,
        version,
    })
}

/// Directories on `PATH`, then LLVM's own install directories (Debian puts `clang++` of
/// version N in `/usr/lib/llvm-N/bin`).
fn candidates() -> Vec<PathBuf> {
    let mut names: Vec<String> = (MIN_LLVM..=30)
        .rev()
        .flat_map(|v| [format!("clang++-{v}"), format!("clang-{v}")])
        .collect();
    names.extend(["clang++".to_string(), "clang".to_string()]);
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    for v in (MIN_LLVM..=30).rev() {
        dirs.push(PathBuf::from(format!("/usr/lib/llvm-{v}/bin")));
    }
    let mut out = vec![];
    for n in &names {
        for d in &dirs {
            let p = d.join(n);
            if p.is_file() {
                out.push(p);
            }
        }
    }
    out
}

impl Clang {
    /// `TILELANG_CLANG` if set (it must be new enough), else the newest clang found; cached for
    /// the process.
    pub fn find() -> Result<Clang, ToolchainError> {
        static FOUND: OnceLock<Result<Clang, ToolchainError>> = OnceLock::new();
        FOUND.get_or_init(Self::search).clone()
    }

    fn search() -> Result<Clang, ToolchainError> {
        if let Some(p) = std::env::var_os("TILELANG_CLANG") {
            let p = PathBuf::from(p);
            let c = probe(&p).ok_or_else(|| ToolchainError::NoClang {
                searched: format!("TILELANG_CLANG={}", p.display()),
            })?;
            if c.major < MIN_LLVM {
                return Err(ToolchainError::TooOld {
                    path: p.display().to_string(),
                    major: c.major,
                });
            }
            return Ok(c);
        }
        let mut too_old = None;
        for p in candidates() {
            if let Some(c) = probe(&p) {
                if c.major >= MIN_LLVM {
                    return Ok(c);
                }
                too_old.get_or_insert(c);
            }
        }
        match too_old {
            Some(c) => Err(ToolchainError::TooOld {
                path: c.path.display().to_string(),
                major: c.major,
            }),
            None => Err(ToolchainError::NoClang {
                searched: "clang++-N and clang-N on PATH and in /usr/lib/llvm-N/bin, N >= 20"
                    .into(),
            }),
        }
    }
}

/// A compiled kernel: the code object the runtime loads and the assembly it was made from.
#[derive(Debug, Clone)]
pub struct CodeObject {
    /// The linked ELF (`hipModuleLoadData`'s input).
    pub elf: Vec<u8>,
    /// The assembly clang printed (verbose, with its resource comments and metadata).
    pub asm: String,
    /// Wall time of the compile (HIP → assembly) and of assembling and linking.
    pub compile_time: Duration,
    pub link_time: Duration,
}

/// The options every kernel is compiled with.
pub fn hip_flags(arch: &str) -> Vec<String> {
    [
        "-x",
        "hip",
        "-std=c++17",
        "--cuda-device-only",
        "-nogpulib",
        "-nogpuinc",
        "-O3",
        "-fno-slp-vectorize",
        "-S",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!("--offload-arch={arch}")])
    .collect()
}

/// Compile HIP source for `arch` (`gfx942`, `gfx950`) to assembly, then to a code object.
pub fn compile(src: &str, arch: &str) -> Result<CodeObject, ToolchainError> {
    if !matches!(arch, "gfx942" | "gfx950") {
        return Err(ToolchainError::BadArch { arch: arch.into() });
    }
    let clang = Clang::find()?;
    let dir = scratch_dir()?;
    let hip = dir.join("kernel.hip");
    let s = dir.join("kernel.s");
    let o = dir.join("kernel.o");
    let co = dir.join("kernel.co");
    std::fs::write(&hip, src).map_err(io(format!("writing {}", hip.display())))?;
    let t = Instant::now();
    let out = Command::new(&clang.path)
        .args(hip_flags(arch))
        .arg("-o")
        .arg(&s)
        .arg(&hip)
        .output()
        .map_err(io(format!("running {}", clang.path.display())))?;
    let compile_time = t.elapsed();
    if !out.status.success() {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(ToolchainError::Compile {
            arch: arch.into(),
            log: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    let t = Instant::now();
    let target = ["-target", "amdgcn-amd-amdhsa"];
    let mcpu = format!("-mcpu={arch}");
    let steps: [Vec<&std::ffi::OsStr>; 2] = [
        vec![
            "-x".as_ref(),
            "assembler".as_ref(),
            target[0].as_ref(),
            target[1].as_ref(),
            mcpu.as_ref(),
            "-c".as_ref(),
            s.as_os_str(),
            "-o".as_ref(),
            o.as_os_str(),
        ],
        vec![
            target[0].as_ref(),
            target[1].as_ref(),
            mcpu.as_ref(),
            "-nostdlib".as_ref(),
            o.as_os_str(),
            "-o".as_ref(),
            co.as_os_str(),
        ],
    ];
    for args in steps {
        let out = Command::new(&clang.path)
            .args(args)
            .output()
            .map_err(io(format!("running {}", clang.path.display())))?;
        if !out.status.success() {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(ToolchainError::Link {
                arch: arch.into(),
                log: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
        }
    }
    let link_time = t.elapsed();
    let asm = std::fs::read_to_string(&s).map_err(io(format!("reading {}", s.display())))?;
    let elf = std::fs::read(&co).map_err(io(format!("reading {}", co.display())))?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(CodeObject {
        elf,
        asm,
        compile_time,
        link_time,
    })
}

/// A fresh directory for one compile's files (several compiles may run at once).
fn scratch_dir() -> Result<PathBuf, ToolchainError> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let d = std::env::temp_dir().join(format!(
        "tilelang-hip-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&d).map_err(io(format!("creating {}", d.display())))?;
    Ok(d)
}

/// The variable that makes tests needing clang fail instead of skipping when it is missing
/// (`scripts/install-amd-tools.sh` prints it, and `scripts/test.sh` exports it, whenever it
/// finds or installs a suitable clang).
pub const REQUIRE_ENV: &str = "TILELANG_REQUIRE_CLANG";

/// Whether a value of [`REQUIRE_ENV`] asks for clang: set, and neither empty nor `0`.
pub fn require_value(v: Option<&std::ffi::OsStr>) -> bool {
    v.is_some_and(|v| !v.is_empty() && v != "0")
}

/// Whether `TILELANG_REQUIRE_CLANG` asks for clang ([`require_value`]).
pub fn clang_required() -> bool {
    require_value(std::env::var_os(REQUIRE_ENV).as_deref())
}

/// For tests that need clang: the toolchain, or `None` with a note that the test is skipped —
/// unless `TILELANG_REQUIRE_CLANG` is set (to anything but `0`; CI sets it to 1), when a
/// missing toolchain is a failure.
pub fn clang_or_skip(test: &str) -> Option<Clang> {
    match Clang::find() {
        Ok(c) => Some(c),
        Err(e) if clang_required() => {
            panic!("{test}: {REQUIRE_ENV} is set but: {e}")
        }
        Err(e) => {
            eprintln!("SKIPPED {test}: {e}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse() {
        let (m, line) =
            parse_version("Debian clang version 22.1.8 (1~deb12u1)\nTarget: x86_64").expect("v");
        assert_eq!(m, 22);
        assert!(line.starts_with("Debian clang version 22"));
        assert_eq!(parse_version("clang version 19.1.0").map(|x| x.0), Some(19));
        assert!(parse_version("gcc (Debian 12.2.0) 12.2.0").is_none());
    }

    #[test]
    fn require_variable_values() {
        use std::ffi::OsStr;
        assert!(require_value(Some(OsStr::new("1"))));
        assert!(require_value(Some(OsStr::new("yes"))));
        assert!(!require_value(Some(OsStr::new("0"))));
        assert!(!require_value(Some(OsStr::new(""))));
        assert!(!require_value(None));
    }

    #[test]
    fn unknown_arch_is_refused() {
        let e = compile("", "gfx90a").expect_err("gfx90a is not a target");
        assert!(e.to_string().contains("gfx942 or gfx950"), "{e}");
    }

    #[test]
    fn a_kernel_compiles_to_a_code_object() {
        if clang_or_skip("a_kernel_compiles_to_a_code_object").is_none() {
            return;
        }
        let src = "extern \"C\" __attribute__((global)) void k(float* p) { p[__builtin_amdgcn_workitem_id_x()] = 1.0f; }\n";
        for arch in ["gfx942", "gfx950"] {
            let co = compile(src, arch).unwrap_or_else(|e| panic!("{arch}: {e}"));
            assert_eq!(&co.elf[..4], b"\x7fELF", "{arch}: a code object");
            assert!(
                co.asm.contains(&format!("amdgcn-amd-amdhsa--{arch}")),
                "{arch}"
            );
        }
        let e = compile("this is not C++", "gfx950").expect_err("a syntax error");
        assert!(matches!(e, ToolchainError::Compile { .. }), "{e}");
    }
}
