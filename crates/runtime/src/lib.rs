//! The runtime: devices, tensors, compiling generated source (with a disk cache), checked
//! launches and timing. It knows a kernel only by its signature.

pub mod cache;
pub mod cpu;
pub mod cuda;
pub mod cuda_probe;
pub mod device;
pub mod dtype_io;
pub mod error;
pub mod exec;
pub mod external;
pub mod hip;
pub mod nvrtc;
pub mod pitched;
pub mod profile;
pub mod rng;
pub mod selftest;
pub mod tensor;
pub mod tensor_map;
mod whole_program;

pub use cache::Cache;
pub use cuda::{DeviceProps, ResourceUsage};
pub use device::Device;
pub use error::{Result, RuntimeError};
pub use exec::{Arg, CompileStats, Executable, Signature};
pub use external::{ExternalTensor, Stream};
pub use hip::{HipCode, HipProps};
pub use profile::Timing;
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

/// Compile CUDA source into the disk cache without loading it (no GPU context needed): lets
/// an autotuner compile candidates on many threads, then load them one by one. Returns whether
/// the cubin was already cached. PTX the driver must compile as a whole program
/// ([`tl_nvrtc::needs_whole_program`]) is compiled when loaded, not here.
pub fn precompile_cuda(
    cache: &Cache,
    key: &str,
    kernel: &str,
    source: &str,
    arch: &str,
) -> Result<bool> {
    Ok(cuda::compile_cached(cache, key, kernel, source, arch)?.cache_hit)
}

/// Bind thread-level IR to the simulator: each launch runs it in `tl_sim` on the tensors'
/// host memory (outputs are written back), reporting races and missing waits as errors.
pub fn build_sim(sig: Signature, lowered: tl_ir::Kernel, target: tl_target::Target) -> Executable {
    // The "source" of a simulated kernel is its thread-level IR, as printed.
    let text = lowered.to_string();
    Executable::new(
        sig,
        Device::Sim(target),
        exec::Module::Sim(Box::new(lowered)),
        CompileStats::default(),
        Some(text),
    )
}

/// The NVRTC version string (`nvrtc 13.0`).
pub fn nvrtc_version() -> Result<String> {
    Ok(nvrtc::version()?)
}

/// What identifies the CUDA toolchain for `arch` in a cache key: NVRTC's version and the full
/// option list [`build_cuda`] compiles with.
pub fn cuda_toolchain_id(arch: &str) -> Result<String> {
    Ok(nvrtc::toolchain_id(arch)?)
}

/// What identifies the PTX assembler for `arch` (nvJitLink's version and options) in a cache
/// key for generated PTX.
pub fn ptx_toolchain_id(arch: &str) -> Result<String> {
    Ok(nvrtc::jitlink_id(arch)?)
}

/// Compile generated CUDA source for `device` (or take the cubin from the cache) and load it.
///
/// On a cache miss the source is compiled by NVRTC for exactly `arch` (e.g. `sm_90a`) with
/// [`nvrtc::options`] and stored as `<key>.cubin` (with the NVRTC log as `<key>.log`); on a hit
/// the cubin is loaded without NVRTC. `key` is the caller's: it must cover the source, the
/// arch, [`cuda_toolchain_id`] and the crate version. `entry` is the
/// `extern "C" __global__` function; `dynamic_smem_bytes` is the dynamic shared memory every
/// launch gets (the function's limit is raised when it is over 48 KiB). A cached cubin that
/// fails to load is recompiled once.
#[allow(clippy::too_many_arguments)] // mirrors build_cpu plus the GPU-only inputs
pub fn build_cuda(
    device: &Device,
    sig: Signature,
    cache: &Cache,
    key: &str,
    source: String,
    entry: &str,
    arch: &str,
    dynamic_smem_bytes: u32,
) -> Result<Executable> {
    let t0 = Instant::now();
    let ordinal = match device {
        Device::Cuda(i) => *i,
        Device::Cpu | Device::Sim(_) | Device::Hip(_) => {
            return Err(RuntimeError::DeviceUnavailable {
                device: device.to_string(),
                reason: "build_cuda needs a CUDA device; use build_cpu for the CPU and build_hip for an AMD GPU".into(),
            })
        }
    };
    let dev = cuda::device(ordinal)?;
    let mut art = cuda::compile_cached(cache, key, &sig.name, &source, arch)?;
    let t_load = Instant::now();
    let mut kernel = match cuda::CudaKernel::load(dev, &art, entry, &sig.name, dynamic_smem_bytes) {
        Ok(k) => k,
        // A module NVSHMEM could not initialise is no damaged entry: keep it.
        Err(e) if art.cache_hit && !art.jit && !matches!(e, RuntimeError::NvshmemModule(_)) => {
            // A stale or damaged cache entry: compile afresh and overwrite it.
            let _ = e;
            let p = cache.path(key, "cubin");
            let _ = std::fs::remove_file(&p);
            art = cuda::compile_cached(cache, key, &sig.name, &source, arch)?;
            cuda::CudaKernel::load(dev, &art, entry, &sig.name, dynamic_smem_bytes)?
        }
        Err(e) => return Err(e),
    };
    kernel.grid_dependent = cuda::waits_for_prior_grid(&source);
    if let Some(took) = kernel.jit_time {
        // The driver compiled it (or found it in its own cache): on a miss of ours that was
        // the compile; the first load's report is the one later builds show.
        if !art.cache_hit {
            art.compile_time = took;
        }
        if art.log.is_empty() {
            let _ = cache.put_bytes(key, "jitlog", kernel.usage().log.as_bytes());
        }
    }
    let stats = CompileStats {
        cache_hit: art.cache_hit,
        compile: art.compile_time,
        load: t_load
            .elapsed()
            .saturating_sub(kernel.jit_time.unwrap_or_default()),
        total: t0.elapsed(),
        driver_jit: kernel.jit_time.is_some(),
        ..Default::default()
    };
    Ok(Executable::new(
        sig,
        *device,
        exec::Module::Cuda(kernel),
        stats,
        Some(source),
    ))
}

/// Compile generated HIP source for the AMD GPU `device` (or take the code object from the
/// cache) and load it. **Untested on hardware** (see [`hip`]).
///
/// `compile` turns the source into a code object (an AMDGPU ELF; the driver passes
/// `tl_amdgpu::compile`, i.e. clang), with what the compiler reported about its resources
/// ([`HipCode`]; a plain `Vec<u8>` code object has none), and runs only on a cache miss, so a
/// hit costs no clang run; its error type is the caller's (anything a [`RuntimeError`]
/// converts into), so clang's diagnostics reach the caller unchanged. The code object is
/// stored as `<key>.hsaco` and the usage as `<key>.usage`, which
/// [`Executable::resource_usage`] returns, on a hit too. `key` is the caller's: it must cover
/// the source, the arch, the compiler and the crate version.
/// `entry` is the `extern "C" __global__` function. A cached code object that fails to load is
/// recompiled once. Launches use the signature's grid, blocks of `(sig.threads, 1, 1)` and no
/// dynamic LDS (generated kernels declare all LDS statically), and refuse tensors of 2 GiB or
/// more ([`hip::check_buffer_ranges`]).
pub fn build_hip<E: From<RuntimeError>, C: Into<HipCode>>(
    device: &Device,
    sig: Signature,
    cache: &Cache,
    key: &str,
    source: String,
    entry: &str,
    compile: impl FnOnce(&str) -> std::result::Result<C, E>,
) -> std::result::Result<Executable, E> {
    let t0 = Instant::now();
    let ordinal = match device {
        Device::Hip(i) => *i,
        Device::Cpu | Device::Sim(_) | Device::Cuda(_) => {
            return Err(RuntimeError::DeviceUnavailable {
                device: device.to_string(),
                reason: "build_hip needs a HIP (AMD) device; use build_cuda for NVIDIA GPUs and build_cpu for the CPU".into(),
            }
            .into())
        }
    };
    // The device first: without ROCm there is no point in running clang.
    let dev = hip::device(ordinal)?;
    let mut compile = Some(compile);
    let mut compile_once = |src: &str| match compile.take() {
        Some(f) => f(src).map(Into::into),
        None => Err(RuntimeError::Launch(format!(
            "kernel `{}`: the HIP compile callback was needed twice",
            sig.name
        ))
        .into()),
    };
    let mut art = hip::compile_cached(cache, key, &source, &mut compile_once)?;
    let t_load = Instant::now();
    let kernel = match hip::HipKernel::load(dev, &art.code, entry, &sig.name) {
        Ok(k) => k,
        Err(_) if art.cache_hit => {
            // A stale or damaged cache entry: compile afresh and overwrite it.
            let _ = std::fs::remove_file(cache.path(key, "hsaco"));
            art = hip::compile_cached(cache, key, &source, &mut compile_once)?;
            hip::HipKernel::load(dev, &art.code, entry, &sig.name)?
        }
        Err(e) => return Err(e.into()),
    }
    .with_usage(art.usage.take());
    let stats = CompileStats {
        cache_hit: art.cache_hit,
        compile: art.compile_time,
        load: t_load.elapsed(),
        total: t0.elapsed(),
        ..Default::default()
    };
    Ok(Executable::new(
        sig,
        *device,
        exec::Module::Hip(kernel),
        stats,
        Some(source),
    ))
}

/// Compile HIP source into the disk cache (`<key>.hsaco` and `<key>.usage`) without loading
/// it, so an autotuner can run clang for many candidates on many threads; `compile` runs only
/// on a miss. Needs no GPU. Returns whether the code object was already cached.
pub fn precompile_hip<E: From<RuntimeError>, C: Into<HipCode>>(
    cache: &Cache,
    key: &str,
    source: &str,
    compile: impl FnOnce(&str) -> std::result::Result<C, E>,
) -> std::result::Result<bool, E> {
    Ok(lookup_or_compile_hip(cache, key, source, compile)?.0)
}

/// [`precompile_hip`], also returning the usage stored with (or compiled into) the entry:
/// `(cache hit, usage, time in compile)`.
pub fn lookup_or_compile_hip<E: From<RuntimeError>, C: Into<HipCode>>(
    cache: &Cache,
    key: &str,
    source: &str,
    compile: impl FnOnce(&str) -> std::result::Result<C, E>,
) -> std::result::Result<(bool, Option<ResourceUsage>, std::time::Duration), E> {
    let mut compile = Some(compile);
    let mut compile_once = |src: &str| match compile.take() {
        Some(f) => f(src).map(Into::into),
        None => {
            Err(RuntimeError::Launch("the HIP compile callback was needed twice".into()).into())
        }
    };
    let art = hip::compile_cached(cache, key, source, &mut compile_once)?;
    Ok((art.cache_hit, art.usage, art.compile_time))
}
