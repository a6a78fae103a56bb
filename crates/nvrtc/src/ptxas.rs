//! ptxas, the CUDA toolkit's assembler (or the `nvidia-cuda-nvcc` wheel's), for PTX that must
//! be assembled as a whole program ([`crate::needs_whole_program`]: it moves registers between
//! warpgroups with `setmaxnreg`). nvJitLink and the driver's linker (`cuLink*`) assemble PTX
//! as relocatable code and drop `setmaxnreg` (the d128 attention then spilled 264 bytes,
//! gpu-notes run 31d), so without ptxas such PTX is left to the driver's JIT at load time —
//! whose result only the driver's own cache keeps. With ptxas the cubin is ours to cache.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

use crate::{find_tool, NvrtcError};

/// A ptxas binary, and a tag that changes when the binary does (its path, size and
/// modification time), for cache entries of what it assembled.
#[derive(Clone, Debug)]
pub struct Ptxas {
    pub path: PathBuf,
    pub tag: String,
    version: OnceLock<(i32, i32)>,
}

/// What ptxas made of a program: the cubin and its verbose report.
#[derive(Clone, Debug)]
pub struct Assembled {
    pub cubin: Vec<u8>,
    pub log: String,
    pub time: std::time::Duration,
}

static GLOBAL: OnceLock<Option<Ptxas>> = OnceLock::new();
static COUNTER: AtomicU64 = AtomicU64::new(0);

impl Ptxas {
    /// The process's ptxas: `$TILELANG_PTXAS` (when it names a file), the installer's wheels,
    /// `$CUDA_PATH` / `$CUDA_HOME`, /usr/local/cuda, `$PATH` ([`find_tool`]); `None` where
    /// there is none, or with `TILELANG_PTXAS=0`. Looked up once (a cache hit must not pay for
    /// a search).
    pub fn global() -> Option<&'static Ptxas> {
        GLOBAL
            .get_or_init(|| {
                if std::env::var("TILELANG_PTXAS").as_deref() == Ok("0") {
                    return None;
                }
                find_tool("ptxas", "TILELANG_PTXAS").ok().map(Ptxas::at)
            })
            .as_ref()
    }

    /// The ptxas at `path`.
    pub fn at(path: PathBuf) -> Ptxas {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        path.hash(&mut h);
        if let Ok(m) = std::fs::metadata(&path) {
            m.len().hash(&mut h);
            if let Ok(t) = m.modified() {
                t.hash(&mut h);
            }
        }
        Ptxas {
            tag: format!("ptxas-{:016x}", h.finish()),
            path,
            version: OnceLock::new(),
        }
    }

    /// (major, minor) from `ptxas --version` ("… release 13.0, V13.0.88"); (0, 0) where it
    /// cannot be read. Asked once, and only for reports (cache entries use the tag).
    pub fn version(&self) -> (i32, i32) {
        *self.version.get_or_init(|| {
            let out = Command::new(&self.path).arg("--version").output();
            let text = out
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            parse_release(&text).unwrap_or((0, 0))
        })
    }

    /// Assemble `ptx` for `arch` (`sm_90a`) as a whole program, with the verbose report.
    pub fn assemble(&self, ptx: &str, arch: &str) -> Result<Assembled, NvrtcError> {
        let stem = std::env::temp_dir().join(format!(
            "tilelang-ptxas-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let (input, output) = (stem.with_extension("ptx"), stem.with_extension("cubin"));
        let fail = |message: String| NvrtcError::Tool {
            tool: "ptxas",
            message,
        };
        std::fs::write(&input, ptx).map_err(|e| fail(format!("{}: {e}", input.display())))?;
        let t = Instant::now();
        let run = Command::new(&self.path)
            .arg(format!("-arch={arch}"))
            .arg("-v")
            .arg("-o")
            .arg(&output)
            .arg(&input)
            .output();
        let time = t.elapsed();
        let _ = std::fs::remove_file(&input);
        let run = run.map_err(|e| fail(format!("{}: {e}", self.path.display())))?;
        let mut log = String::from_utf8_lossy(&run.stdout).into_owned();
        log.push_str(&String::from_utf8_lossy(&run.stderr));
        if !run.status.success() {
            let _ = std::fs::remove_file(&output);
            return Err(fail(format!(
                "{} -arch={arch} ({}): {}",
                self.path.display(),
                run.status,
                log.trim()
            )));
        }
        let cubin = std::fs::read(&output);
        let _ = std::fs::remove_file(&output);
        let cubin = cubin.map_err(|e| fail(format!("{}: {e}", output.display())))?;
        Ok(Assembled { cubin, log, time })
    }
}

/// "release 13.0," in ptxas's banner → (13, 0).
fn parse_release(banner: &str) -> Option<(i32, i32)> {
    let rest = &banner[banner.find("release ")? + "release ".len()..];
    let number = rest.split([',', ' ', '\n']).next()?;
    let (major, minor) = number.split_once('.')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_is_read_from_the_banner() {
        let banner = "ptxas: NVIDIA (R) Ptx optimizing assembler\nCuda compilation tools, release 13.0, V13.0.88\nBuild cuda_13.0.r13.0/compiler.36424714_0\n";
        assert_eq!(parse_release(banner), Some((13, 0)));
        assert_eq!(parse_release("no banner"), None);
    }
}
