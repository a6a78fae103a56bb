//! The runtime: devices, tensors, compiling generated source (with a disk cache), checked
//! launches and timing. It knows a kernel only by its signature.

pub mod cache;
pub mod cpu;
mod cuda_probe;
pub mod device;
pub mod dtype_io;
pub mod error;
pub mod exec;
pub mod profile;
pub mod tensor;

pub use cache::Cache;
pub use device::Device;
pub use error::{Result, RuntimeError};
pub use exec::{Arg, CompileStats, Executable, Signature};
pub use tensor::{rel_err, Tensor};

use std::time::Instant;

/// Compile C source for the CPU (or take it from the cache) and bind it to the CPU device.
/// `key` identifies the kernel, its lowering and the compiler; `source` is only called on a
/// cache miss.
pub fn build_cpu(
    sig: Signature,
    cache: &Cache,
    key: &str,
    entry: &str,
    source: impl FnOnce() -> std::result::Result<String, String>,
) -> std::result::Result<Executable, BuildError> {
    let t0 = Instant::now();
    let mut stats = CompileStats::default();
    if let Some(p) = cache.get(key, "so") {
        if let Ok(m) = cpu::load(&p, entry) {
            stats.cache_hit = true;
            stats.load = t0.elapsed();
            stats.total = stats.load;
            return Ok(Executable::new(
                sig,
                Device::Cpu,
                exec::Module::Cpu(m),
                stats,
                None,
            ));
        }
    }
    let src = source().map_err(BuildError::Lowering)?;
    let t1 = Instant::now();
    let (m, hit) = cpu::build(cache, key, &sig.name, &src, entry)?;
    stats.cache_hit = hit;
    stats.compile = t1.elapsed();
    stats.total = t0.elapsed();
    Ok(Executable::new(
        sig,
        Device::Cpu,
        exec::Module::Cpu(m),
        stats,
        Some(src),
    ))
}

/// Why a build failed: before the native compiler (diagnostics) or in/after it.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("{0}")]
    Lowering(String),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}
