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
/// `key` identifies the source, the compiler and its flags.
pub fn build_cpu(
    sig: Signature,
    cache: &Cache,
    key: &str,
    entry: &str,
    source: String,
) -> Result<Executable> {
    let t0 = Instant::now();
    let (m, hit) = cpu::build(cache, key, &sig.name, &source, entry)?;
    let mut stats = CompileStats {
        cache_hit: hit,
        ..Default::default()
    };
    if hit {
        stats.load = t0.elapsed();
    } else {
        stats.compile = t0.elapsed();
    }
    stats.total = t0.elapsed();
    Ok(Executable::new(
        sig,
        Device::Cpu,
        exec::Module::Cpu(m),
        stats,
        Some(source),
    ))
}
