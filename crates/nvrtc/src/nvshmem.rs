//! NVSHMEM's device side, for kernels whose peer accesses the PTX printer lowered to NVSHMEM
//! calls (`DistAttrs::nvshmem`): their PTX declares the `tl_shmem_*` functions of our shim
//! (`nvshmem_shim.cu`), which NVRTC compiles here against NVSHMEM's headers as relocatable PTX
//! (once per arch and NVSHMEM version: its headers take seconds, so the PTX is kept on disk),
//! and nvJitLink links kernel, shim and NVSHMEM's `libnvshmem_device.a` into one cubin. The
//! process must then initialise the loaded module with `nvshmemx_cumodule_init` (`tl_dist`
//! does, through the runtime's module hook).
//!
//! Where NVSHMEM is: `TILELANG_NVSHMEM_HOME` (a folder with `include/nvshmem.h` and
//! `lib/libnvshmem_device.a`), else the `nvidia-nvshmem-cu13` wheel in the installer's tools
//! dirs, else the one `python3` imports (torch installs it). The shim also needs CUDA's runtime
//! headers and libcu++ (`cuda_runtime.h`, `cuda/std`): `TILELANG_CUDA_INCLUDE` (folders,
//! colon-separated), `$CUDA_HOME/include`, `/usr/local/cuda/include`, or the
//! `nvidia-cuda-runtime` and `nvidia-cuda-cccl` wheels.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use crate::jitlink::LinkInput;
use crate::{Compiled, JitLink, Nvrtc, NvrtcError};

/// The shim: one `extern "C"` device function per operation the PTX printer calls.
pub const SHIM_SOURCE: &str = include_str!("nvshmem_shim.cu");

/// Whether `ptx` calls the NVSHMEM shim (and so must be linked by [`link`]).
pub fn uses_nvshmem(ptx: &str) -> bool {
    ptx.contains(".extern .func") && ptx.contains(" tl_shmem_")
}

/// An NVSHMEM installation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NvshmemHome {
    /// Holds `include/` and `lib/`.
    pub root: PathBuf,
    /// `3.4.5`, from `include/non_abi/nvshmem_version.h`.
    pub version: String,
}

impl NvshmemHome {
    pub fn include(&self) -> PathBuf {
        self.root.join("include")
    }
    pub fn lib(&self) -> PathBuf {
        self.root.join("lib")
    }
    /// NVSHMEM's device archive.
    pub fn device_archive(&self) -> PathBuf {
        self.lib().join("libnvshmem_device.a")
    }
    /// NVSHMEM's host library (what a process initialises NVSHMEM with).
    pub fn host_library(&self) -> PathBuf {
        self.lib().join("libnvshmem_host.so.3")
    }

    fn at(root: &Path) -> Option<NvshmemHome> {
        let root = root.to_path_buf();
        if !root.join("include/nvshmem.h").is_file()
            || !root.join("lib/libnvshmem_device.a").is_file()
        {
            return None;
        }
        let header = std::fs::read_to_string(root.join("include/non_abi/nvshmem_version.h"))
            .unwrap_or_default();
        let part = |name: &str| {
            header
                .lines()
                .find_map(|l| l.trim().strip_prefix(&format!("#define {name} ")))
                .map(|v| v.trim().to_string())
                .unwrap_or_else(|| "?".into())
        };
        let version = format!(
            "{}.{}.{}",
            part("NVSHMEM_VENDOR_MAJOR_VERSION"),
            part("NVSHMEM_VENDOR_MINOR_VERSION"),
            part("NVSHMEM_VENDOR_PATCH_VERSION")
        );
        Some(NvshmemHome { root, version })
    }
}

/// The folder of a Python package (`nvidia.nvshmem`) as `python3` imports it, if it does.
fn python_package_dir(package: &str) -> Option<PathBuf> {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            &format!("import {package} as m; print(list(m.__path__)[0])"),
        ])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let s = String::from_utf8(out.stdout).ok()?;
    let p = PathBuf::from(s.trim());
    (out.status.success() && p.is_dir()).then_some(p)
}

/// Find NVSHMEM (see the module's documentation for where it looks).
pub fn discover_home() -> Result<NvshmemHome, NvrtcError> {
    static HOME: OnceLock<Result<NvshmemHome, NvrtcError>> = OnceLock::new();
    HOME.get_or_init(|| {
        let mut searched = vec![];
        if let Some(d) = std::env::var_os("TILELANG_NVSHMEM_HOME") {
            let d = PathBuf::from(d);
            return NvshmemHome::at(&d).ok_or_else(|| NvrtcError::ToolNotFound {
                tool: "NVSHMEM",
                searched: vec![format!(
                    "TILELANG_NVSHMEM_HOME={} (needs include/nvshmem.h and lib/libnvshmem_device.a)",
                    d.display()
                )],
            });
        }
        let mut candidates: Vec<PathBuf> = crate::tools_dirs()
            .into_iter()
            .map(|t| t.join("nvidia/nvshmem"))
            .collect();
        candidates.extend(python_package_dir("nvidia.nvshmem"));
        for c in candidates {
            if let Some(h) = NvshmemHome::at(&c) {
                return Ok(h);
            }
            searched.push(c.display().to_string());
        }
        searched.push("python3's `nvidia.nvshmem` (pip install nvidia-nvshmem-cu13)".into());
        Err(NvrtcError::ToolNotFound {
            tool: "NVSHMEM (set TILELANG_NVSHMEM_HOME to a folder with include/ and lib/, or `eval \"$(bash scripts/install-cuda-tools.sh)\"`, which unpacks NVSHMEM's wheel)",
            searched,
        })
    })
    .clone()
}

/// The include folders that hold `cuda_runtime.h` and `cuda/std/type_traits`.
fn cuda_includes() -> Result<Vec<PathBuf>, NvrtcError> {
    let mut bases: Vec<PathBuf> = std::env::var("TILELANG_CUDA_INCLUDE")
        .map(|v| {
            v.split(':')
                .filter(|s| !s.is_empty())
                .map(PathBuf::from)
                .collect()
        })
        .unwrap_or_default();
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(d) = std::env::var_os(var) {
            bases.push(PathBuf::from(d).join("include"));
        }
    }
    bases.push("/usr/local/cuda/include".into());
    for t in crate::tools_dirs() {
        bases.push(t.join("nvidia/cu13/include"));
    }
    bases.extend(python_package_dir("nvidia.cu13").map(|d| d.join("include")));
    let runtime = bases.iter().find(|b| b.join("cuda_runtime.h").is_file());
    let libcu = bases
        .iter()
        .flat_map(|b| [b.clone(), b.join("cccl")])
        .find(|b| b.join("cuda/std/type_traits").is_file());
    match (runtime, libcu) {
        (Some(r), Some(l)) => Ok(if r == &l { vec![r.clone()] } else { vec![r.clone(), l] }),
        _ => Err(NvrtcError::ToolNotFound {
            tool: "CUDA's runtime headers and libcu++ (cuda_runtime.h, cuda/std/type_traits) for NVSHMEM's shim: set TILELANG_CUDA_INCLUDE, or `eval \"$(bash scripts/install-cuda-tools.sh)\"`",
            searched: bases.iter().map(|b| b.display().to_string()).collect(),
        }),
    }
}

/// What identifies the NVSHMEM link of a kernel in a cache key: the shim, NVSHMEM's version
/// and where it is.
pub fn toolchain_id() -> Result<String, NvrtcError> {
    let home = discover_home()?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    SHIM_SOURCE.hash(&mut h);
    Ok(format!(
        "nvshmem {} {} shim {:016x}",
        home.version,
        home.root.display(),
        h.finish()
    ))
}

/// `compute_90a` for `sm_90a`.
fn virtual_arch(arch: &str) -> String {
    arch.replacen("sm_", "compute_", 1)
}

/// The shim's relocatable PTX for `arch`, compiled once per process and kept on disk
/// (`$TILELANG_CACHE_DIR`, else `~/.cache/tilelang`) under a key of everything that makes it.
pub fn shim_ptx(arch: &str) -> Result<String, NvrtcError> {
    static MEMO: OnceLock<Mutex<HashMap<String, String>>> = OnceLock::new();
    let memo = MEMO.get_or_init(Default::default);
    if let Some(p) = memo.lock().ok().and_then(|m| m.get(arch).cloned()) {
        return Ok(p);
    }
    let home = discover_home()?;
    let nvrtc = Nvrtc::global()?;
    let mut flags = vec![
        format!("--gpu-architecture={}", virtual_arch(arch)),
        "-rdc=true".into(),
        "--std=c++17".into(),
        "-default-device".into(),
        format!("-I{}", home.include().display()),
    ];
    flags.extend(
        cuda_includes()?
            .iter()
            .map(|d| format!("-I{}", d.display())),
    );
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (SHIM_SOURCE, &flags, nvrtc.version(), &home.version).hash(&mut h);
    let file = cache_dir().map(|d| d.join(format!("nvshmem-shim-{arch}-{:016x}.ptx", h.finish())));
    let cached = file.as_ref().and_then(|f| std::fs::read_to_string(f).ok());
    let ptx = match cached {
        Some(p) if p.contains(".visible .func tl_shmem_put") => p,
        _ => {
            let c = nvrtc.compile_with_flags(SHIM_SOURCE, arch, "nvshmem_shim.cu", flags)?;
            if let Some(f) = &file {
                // Written whole, then renamed: a concurrent reader never sees half a file.
                let tmp = f.with_extension(format!("tmp{}", std::process::id()));
                if std::fs::create_dir_all(f.parent().unwrap_or(Path::new("."))).is_ok()
                    && std::fs::write(&tmp, c.ptx()).is_ok()
                {
                    let _ = std::fs::rename(&tmp, f);
                }
            }
            c.ptx().to_string()
        }
    };
    if let Ok(mut m) = memo.lock() {
        m.insert(arch.to_string(), ptx.clone());
    }
    Ok(ptx)
}

fn cache_dir() -> Option<PathBuf> {
    std::env::var_os("TILELANG_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("tilelang")))
        .or_else(|| std::env::var_os("HOME").map(|d| PathBuf::from(d).join(".cache/tilelang")))
}

/// Assemble a kernel's `ptx` and link it with the shim and NVSHMEM's device archive.
pub fn link(ptx: &str, arch: &str) -> Result<Compiled, NvrtcError> {
    let home = discover_home()?;
    let shim = shim_ptx(arch)?;
    let archive = home.device_archive();
    let bytes = std::fs::read(&archive).map_err(|e| NvrtcError::Tool {
        tool: "NVSHMEM",
        message: format!("reading {}: {e}", archive.display()),
    })?;
    let mut c = JitLink::global()?.link(
        ptx,
        &[
            LinkInput::Ptx {
                name: "nvshmem_shim.ptx".into(),
                text: shim,
            },
            LinkInput::Library {
                name: "libnvshmem_device.a".into(),
                bytes,
            },
        ],
        arch,
    )?;
    c.flags.push(format!("+ nvshmem {}", home.version));
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shim_defines_every_function_it_is_named_for() {
        assert!(uses_nvshmem(
            ".extern .func tl_shmem_quiet();\n call tl_shmem_quiet, ();"
        ));
        assert!(!uses_nvshmem(".visible .entry k()\n{ ret; }"));
        for f in [
            "tl_shmem_put",
            "tl_shmem_get",
            "tl_shmem_quiet",
            "tl_shmem_fetch32",
        ] {
            assert!(SHIM_SOURCE.contains(&format!(" {f}(")), "{f}");
        }
        assert_eq!(virtual_arch("sm_90a"), "compute_90a");
    }

    #[test]
    fn a_wrong_home_is_named() {
        assert!(NvshmemHome::at(Path::new("/nonexistent")).is_none());
    }
}
