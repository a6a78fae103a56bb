//! Who assembles whole-program PTX ([`tl_nvrtc::needs_whole_program`]: kernels that move
//! registers between warpgroups): ptxas ahead of time, whose cubin our cache keeps, or the
//! CUDA driver's JIT when the module is loaded, whose result only the driver's own cache keeps.
//!
//! On an H200 host (gpu-notes run 31f) the driver's JIT assembled the d128 attention cold in
//! 256–309 ms and ptxas in 355–382 ms; with the driver's cache working a later process loads
//! the JIT's result in about a millisecond, but with it off every process paid 235–400 ms
//! again, where ptxas's cached cubin loads in 6–8 ms. So ptxas is taken where the driver
//! cannot cache: `CUDA_CACHE_DISABLE=1`, or a cache directory that cannot be written (a
//! read-only home, say); and whenever `TILELANG_PTXAS` asks for it (`1`, or a path), never
//! with `TILELANG_PTXAS=0`.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The assembler for this process's whole-program PTX: `Some(ptxas)`, or `None` for the
/// driver's JIT. Decided once.
pub(crate) fn ptxas() -> Option<&'static tl_nvrtc::Ptxas> {
    static USE_PTXAS: OnceLock<bool> = OnceLock::new();
    let wanted = *USE_PTXAS.get_or_init(|| {
        prefer_ptxas(
            std::env::var("TILELANG_PTXAS").ok().as_deref(),
            std::env::var("CUDA_CACHE_DISABLE").ok().as_deref(),
            || driver_cache_dir().is_some_and(|d| writable(&d)),
        )
    });
    if wanted {
        tl_nvrtc::Ptxas::global()
    } else {
        None
    }
}

/// The policy above, from `TILELANG_PTXAS`, `CUDA_CACHE_DISABLE` and whether the driver's
/// cache directory can be written (asked only when it matters).
fn prefer_ptxas(
    ptxas_var: Option<&str>,
    cache_disable: Option<&str>,
    driver_cache_writable: impl FnOnce() -> bool,
) -> bool {
    match ptxas_var.map(str::trim) {
        Some("0") => false,
        Some(v) if !v.is_empty() => true,
        _ => cache_disable.map(str::trim) == Some("1") || !driver_cache_writable(),
    }
}

/// Where the driver keeps JIT results: `$CUDA_CACHE_PATH`, else `~/.nv/ComputeCache`.
fn driver_cache_dir() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CUDA_CACHE_PATH").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty())?;
    Some(Path::new(&home).join(".nv").join("ComputeCache"))
}

/// Whether files can be created in `dir` (made if missing, as the driver would): a probe
/// file is written and removed.
fn writable(dir: &Path) -> bool {
    if std::fs::create_dir_all(dir).is_err() {
        return false;
    }
    let probe = dir.join(format!(".tilelang-probe-{}", std::process::id()));
    let ok = std::fs::write(&probe, b"").is_ok();
    let _ = std::fs::remove_file(&probe);
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptxas_only_where_the_driver_cannot_cache_or_when_asked() {
        let never = || panic!("the cache directory need not be checked");
        // Asked for, or refused, whatever the driver's cache.
        assert!(prefer_ptxas(Some("1"), None, never));
        assert!(prefer_ptxas(Some("/opt/cuda/bin/ptxas"), None, never));
        assert!(!prefer_ptxas(Some("0"), Some("1"), never));
        // Unset: the driver's JIT while its cache works.
        assert!(!prefer_ptxas(None, None, || true));
        assert!(!prefer_ptxas(Some(""), Some("0"), || true));
        assert!(prefer_ptxas(None, Some("1"), never));
        assert!(prefer_ptxas(None, None, || false));
    }

    #[test]
    fn a_directory_that_cannot_be_made_is_not_writable() {
        let base = std::env::temp_dir().join(format!("tl-wp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        assert!(writable(&base.join("a").join("b")), "made and written");
        // A file where the directory would be.
        std::fs::write(base.join("file"), b"x").expect("file");
        assert!(!writable(&base.join("file").join("ComputeCache")));
        let _ = std::fs::remove_dir_all(&base);
    }
}
