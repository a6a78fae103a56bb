//! The AMD GPU backend: device memory, code objects, launches and event timing through ROCm's
//! HIP runtime (`libamdhip64.so`), loaded at run time.
//!
//! **Untested on hardware.** No machine this backend was written on has ROCm or an AMD GPU:
//! it follows the documented HIP C API (`hip_runtime_api.h` of ROCm 6.x/7.x; the exact
//! signatures assumed are in [`ffi`]) and is exercised in CI only against a mock runtime
//! (`tests/hip_mock.rs`), which checks the plumbing — what is called, with which arguments and
//! kernel-parameter bytes — but not that real ROCm agrees. Device names and HIP errors say so.
//!
//! Finding the library: `TILELANG_HIP_LIB` (a path to `libamdhip64.so`) when set, else
//! `$ROCM_PATH/lib`, `/opt/rocm/lib`, then the dynamic loader's path. Without it every HIP
//! entry point returns [`RuntimeError::DeviceUnavailable`] saying so; nothing panics.
//!
//! Ordering: everything goes to the null stream of the device, so copies, memsets and launches
//! on one device run in the order they were issued; the host waits where it reads results
//! (downloads, timing). HIP's current device is per host thread, so every call sets it first.
//! Code objects come from clang (`tl_amdgpu::compile`), cached on disk as `<key>.hsaco`, with
//! what the compiler reported about the kernel's resources (registers, spills, scratch, LDS:
//! [`HipCode::usage`]) beside it as `<key>.usage`, so [`crate::Executable::resource_usage`]
//! answers on a cache hit too; all LDS is static, so launches pass no dynamic shared memory.

mod ffi;
mod memory;
mod module;

use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use tl_target::Target;

use crate::cache::Cache;
use crate::cuda::ResourceUsage;
use crate::error::{Result, RuntimeError};
use crate::exec::{Arg, Signature};

pub(crate) use memory::HipBuf;
pub use module::HipKernel;

/// The environment variable naming the `libamdhip64.so` to load.
pub const LIB_ENV: &str = ffi::LIB_ENV;

/// The AMD architectures tilelang compiles for.
pub const SUPPORTED_ARCHS: &str = "gfx942 (MI300X/MI325X) and gfx950 (MI350X/MI355X)";

/// The largest tensor (in bytes) a HIP kernel may take: direct-to-LDS buffer loads address
/// through a resource descriptor whose range is clamped to 2^31 - 1 bytes and use 32-bit
/// offsets (`tl_codegen::hip`, `resource_descriptors`), so bytes past it would read as zeros.
pub const MAX_BUFFER_BYTES: usize = i32::MAX as usize;

/// What the runtime reads off a HIP device once (from `hipGetDevicePropertiesR0600`).
#[derive(Clone, Debug)]
pub struct HipProps {
    /// The marketing name, e.g. `AMD Instinct MI300X`.
    pub name: String,
    /// The full architecture name with its target features, e.g. `gfx942:sramecc+:xnack-`.
    pub gcn_arch_name: String,
    /// Compute units (`multiProcessorCount`).
    pub compute_units: u32,
    /// L2 bytes as the runtime reports them (one XCD's L2 on MI300; the Infinity Cache is not
    /// included).
    pub l2_bytes: usize,
    pub total_memory: usize,
    /// LDS a workgroup may use, in bytes.
    pub lds_per_block: usize,
    pub max_threads_per_block: u32,
    pub max_grid: [u32; 3],
    pub wave_size: u32,
    /// `hipRuntimeGetVersion` (e.g. 60443484 for ROCm 6.4), 0 when unknown.
    pub runtime_version: i32,
}

impl HipProps {
    /// The architecture without target features: `gfx942`.
    pub fn arch(&self) -> &str {
        base_arch(&self.gcn_arch_name)
    }

    /// The compile target, or an error naming the architecture when tilelang does not
    /// compile for it.
    pub fn target(&self) -> std::result::Result<Target, String> {
        parse_arch(&self.gcn_arch_name)
    }
}

fn base_arch(gcn: &str) -> &str {
    gcn.split(':').next().unwrap_or(gcn).trim()
}

/// The compile target of a `gcnArchName` (`gfx950:sramecc+:xnack-` is gfx950), or why there is
/// none. The target features (`sramecc`, `xnack`) do not change the code tilelang generates.
pub fn parse_arch(gcn_arch_name: &str) -> std::result::Result<Target, String> {
    match base_arch(gcn_arch_name) {
        "gfx942" => Ok(Target::GFX942),
        "gfx950" => Ok(Target::GFX950),
        "" => Err("the HIP runtime reports an empty architecture name".into()),
        other => Err(format!(
            "the GPU is {other} (`{gcn_arch_name}`); tilelang compiles for {SUPPORTED_ARCHS} only"
        )),
    }
}

/// Bytes written to evict the caches before a timed run: twice the larger of L2 and the
/// Infinity Cache (MALL, 256 MiB on MI300X and MI355X, which `l2_bytes` does not include).
pub fn flush_bytes(props: &HipProps) -> usize {
    let mall: usize = match props.arch() {
        "gfx942" | "gfx950" => 256 << 20,
        _ => 0,
    };
    (2 * props.l2_bytes).max(2 * mall).max(1 << 20)
}

/// A HIP device in use by this process: its properties, and the state the runtime keeps for
/// it. Created once per ordinal and never freed.
pub struct HipDevice {
    ordinal: usize,
    props: HipProps,
    hip: &'static ffi::Hip,
    /// The last kernel launched, to name it when an asynchronous error surfaces later.
    last_kernel: Mutex<Option<String>>,
    /// A buffer of [`flush_bytes`], written between timed runs to evict the caches.
    flush: Mutex<Option<HipBuf>>,
}

/// The note every HIP error carries.
const UNTESTED: &str = "tilelang's HIP backend has not been tested on AMD hardware";

/// Turn a failed HIP call into a runtime error naming the operation.
pub(crate) fn hip_err(hip: &ffi::Hip, what: impl Into<String>, code: ffi::Code) -> RuntimeError {
    let mut error = hip.describe(code);
    match code.0 {
        // hipErrorIllegalAddress, hipErrorAssert, hipErrorLaunchFailure
        700 | 710 | 719 => error.push_str(
            " (a fault inside a kernel leaves the device unusable for this process; run with \
             TILELANG_HIP_SYNC=1 to find the kernel)",
        ),
        // hipErrorInvalidImage, hipErrorNoBinaryForGpu, hipErrorInvalidKernelFile
        200 | 209 | 218 => {
            error.push_str(" (was the code object compiled for this GPU's architecture?)")
        }
        _ => {}
    }
    RuntimeError::Hip {
        what: what.into(),
        error: format!("{error}; note: {UNTESTED}"),
    }
}

/// The loaded runtime, or `DeviceUnavailable` for `hip:ordinal` saying why there is none.
fn runtime(ordinal: usize) -> Result<&'static ffi::Hip> {
    ffi::get()
        .as_ref()
        .map_err(|reason| RuntimeError::DeviceUnavailable {
            device: format!("hip:{ordinal}"),
            reason: reason.clone(),
        })
}

/// Usable HIP devices; 0 without ROCm or an AMD GPU.
pub fn device_count() -> usize {
    ffi::get().as_ref().map(|h| h.device_count).unwrap_or(0)
}

/// Why there is no HIP device, when there is none (for SKIPPED messages).
pub fn unavailable_reason() -> Option<String> {
    ffi::get().as_ref().err().cloned()
}

/// Where the HIP runtime was loaded from and its version (`hipRuntimeGetVersion`).
pub fn runtime_info() -> Result<(String, i32)> {
    let h = runtime(0)?;
    Ok((h.path.clone(), h.runtime_version))
}

/// The error for `hip:N` when it is not usable, or Ok when it is.
pub fn check(ordinal: usize) -> Result<()> {
    let h = runtime(ordinal)?;
    if ordinal < h.device_count {
        return Ok(());
    }
    Err(RuntimeError::DeviceUnavailable {
        device: format!("hip:{ordinal}"),
        reason: format!(
            "only {} HIP device{} present",
            h.device_count,
            if h.device_count == 1 { " is" } else { "s are" }
        ),
    })
}

fn registry() -> &'static [OnceLock<std::result::Result<&'static HipDevice, String>>] {
    static R: OnceLock<Vec<OnceLock<std::result::Result<&'static HipDevice, String>>>> =
        OnceLock::new();
    R.get_or_init(|| (0..device_count()).map(|_| OnceLock::new()).collect())
}

/// The device `hip:ordinal`, opened on first use.
pub fn device(ordinal: usize) -> Result<&'static HipDevice> {
    check(ordinal)?;
    let slot = registry()
        .get(ordinal)
        .ok_or_else(|| RuntimeError::DeviceUnavailable {
            device: format!("hip:{ordinal}"),
            reason: "no such device".into(),
        })?;
    slot.get_or_init(|| open(ordinal).map(|d| &*Box::leak(Box::new(d))))
        .as_ref()
        .copied()
        .map_err(|reason| RuntimeError::DeviceUnavailable {
            device: format!("hip:{ordinal}"),
            reason: reason.clone(),
        })
}

fn open(ordinal: usize) -> std::result::Result<HipDevice, String> {
    let hip = runtime(ordinal).map_err(|e| e.to_string())?;
    let p = hip.properties(ordinal).map_err(|c| {
        hip_err(
            hip,
            format!("hipGetDevicePropertiesR0600 on hip:{ordinal}"),
            c,
        )
        .to_string()
    })?;
    let dim = |v: i32| v.max(0) as u32;
    let props = HipProps {
        name: p.name_str(),
        gcn_arch_name: p.gcn_arch_name_str(),
        compute_units: dim(p.multi_processor_count),
        l2_bytes: p.l2_cache_size.max(0) as usize,
        total_memory: p.total_global_mem,
        lds_per_block: p.shared_mem_per_block,
        max_threads_per_block: dim(p.max_threads_per_block),
        max_grid: [
            dim(p.max_grid_size[0]),
            dim(p.max_grid_size[1]),
            dim(p.max_grid_size[2]),
        ],
        wave_size: dim(p.warp_size),
        runtime_version: hip.runtime_version,
    };
    Ok(HipDevice {
        ordinal,
        props,
        hip,
        last_kernel: Mutex::new(None),
        flush: Mutex::new(None),
    })
}

/// `TILELANG_HIP_SYNC=1` waits after every launch, so a fault is reported against the kernel
/// that caused it.
pub(crate) fn sync_launches() -> bool {
    static S: OnceLock<bool> = OnceLock::new();
    *S.get_or_init(|| {
        std::env::var("TILELANG_HIP_SYNC")
            .map(|v| !v.is_empty() && v != "0")
            .unwrap_or(false)
    })
}

impl HipDevice {
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }
    pub fn props(&self) -> &HipProps {
        &self.props
    }

    /// The name for cache keys and tuning records: the marketing name and architecture, with
    /// the reminder that this backend is untested.
    pub fn display_name(&self) -> String {
        format!(
            "{} ({}; tilelang HIP backend, untested on hardware)",
            self.props.name, self.props.gcn_arch_name
        )
    }

    pub(crate) fn hip(&self) -> &'static ffi::Hip {
        self.hip
    }

    pub(crate) fn err(&self, what: impl Into<String>, code: ffi::Code) -> RuntimeError {
        hip_err(self.hip, what, code)
    }

    /// Make this device current on the calling thread (HIP calls act on the current device).
    pub(crate) fn bind(&self) -> Result<()> {
        self.hip
            .set_device(self.ordinal)
            .map_err(|c| self.err(format!("hipSetDevice({})", self.ordinal), c))
    }

    pub(crate) fn note_launch(&self, kernel: &str) {
        if let Ok(mut g) = self.last_kernel.lock() {
            if g.as_deref() != Some(kernel) {
                *g = Some(kernel.to_string());
            }
        }
    }

    /// Wait for all work queued on this device. An error raised by an earlier asynchronous
    /// launch surfaces here; the message names the last kernel launched.
    pub fn synchronize(&self) -> Result<()> {
        self.bind()?;
        self.hip.device_synchronize().map_err(|c| {
            let last = self
                .last_kernel
                .lock()
                .ok()
                .and_then(|g| g.clone())
                .map(|k| format!(" (the last kernel launched was `{k}`)"))
                .unwrap_or_default();
            self.err(format!("synchronizing hip:{}{last}", self.ordinal), c)
        })
    }

    /// Free and total device memory in bytes.
    pub fn memory_info(&self) -> Result<(usize, usize)> {
        self.bind()?;
        self.hip
            .mem_get_info()
            .map_err(|c| self.err("hipMemGetInfo", c))
    }

    /// Evict L2 and the Infinity Cache by writing [`flush_bytes`] of memory (queued on the
    /// null stream, so it completes before the next launch starts).
    pub(crate) fn flush_caches(&'static self) -> Result<()> {
        let mut g = self.flush.lock().map_err(|_| {
            RuntimeError::Launch("the cache flush buffer's lock is poisoned".into())
        })?;
        if g.is_none() {
            *g = Some(HipBuf::alloc(self, flush_bytes(&self.props))?);
        }
        if let Some(b) = g.as_ref() {
            b.memset_d32(0x5A5A_5A5A, b.len() / 4)?;
        }
        Ok(())
    }
}

/// Refuse a launch whose tensors a buffer load could not address completely: any tensor of
/// [`MAX_BUFFER_BYTES`] + 1 bytes (2 GiB) or more. Every tensor of every HIP launch is checked
/// (not only those a direct-to-LDS load reads), which is sound and costs one comparison each.
/// `args` have been checked against `sig` already.
pub fn check_buffer_ranges(sig: &Signature, args: &[Arg]) -> Result<()> {
    for (p, a) in sig.params.iter().zip(args) {
        match a {
            Arg::Tensor(t) => check_buffer_range(&sig.name, p.name(), t.nbytes())?,
            Arg::External(t) => check_buffer_range(&sig.name, p.name(), t.nbytes())?,
            Arg::Int(_) | Arg::Float(_) => {}
        }
    }
    Ok(())
}

/// [`check_buffer_ranges`] for one tensor of `bytes` bytes.
pub fn check_buffer_range(kernel: &str, tensor: &str, bytes: usize) -> Result<()> {
    if bytes > MAX_BUFFER_BYTES {
        return Err(RuntimeError::BufferRange {
            kernel: kernel.to_string(),
            tensor: tensor.to_string(),
            bytes,
            limit: MAX_BUFFER_BYTES,
        });
    }
    Ok(())
}

/// What compiling HIP source gives: the code object, and what the compiler reported about the
/// kernel's resources when it reported anything (the driver reads clang's assembly with
/// `tl_amdgpu::isa`). A plain code object converts into one without usage.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HipCode {
    /// The AMDGPU ELF (`hipModuleLoadData`'s input).
    pub code: Vec<u8>,
    /// Registers, spills, scratch and LDS (see [`ResourceUsage`]'s AMD notes).
    pub usage: Option<ResourceUsage>,
}

impl From<Vec<u8>> for HipCode {
    fn from(code: Vec<u8>) -> HipCode {
        HipCode { code, usage: None }
    }
}

/// A code object from the cache or a fresh compile.
pub(crate) struct Artifact {
    pub code: Vec<u8>,
    pub usage: Option<ResourceUsage>,
    pub cache_hit: bool,
    pub compile_time: Duration,
}

/// The first line of a `<key>.usage` file (a new format gets a new version).
const USAGE_MAGIC: &str = "tilelang-hip-usage 1";

/// `<key>.usage`: the magic line, then `none`, or `name value` lines for the numbers and a
/// `log` line after which the rest of the file is the log (the ISA report).
pub fn usage_to_text(usage: Option<&ResourceUsage>) -> String {
    let Some(u) = usage else {
        return format!("{USAGE_MAGIC}\nnone\n");
    };
    let opt = |v: Option<u32>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
    format!(
        "{USAGE_MAGIC}\nregisters {}\nlocal_bytes {}\nstatic_smem_bytes {}\ndynamic_smem_bytes {}\nconst_bytes {}\nmax_threads_per_block {}\nbinary_version {}\nspill_stores {}\nspill_loads {}\nstack_frame {}\nvgpr_spills {}\nsgpr_spills {}\nlog\n{}",
        u.registers,
        u.local_bytes,
        u.static_smem_bytes,
        u.dynamic_smem_bytes,
        u.const_bytes,
        u.max_threads_per_block,
        u.binary_version,
        opt(u.spill_stores),
        opt(u.spill_loads),
        opt(u.stack_frame),
        opt(u.vgpr_spills),
        opt(u.sgpr_spills),
        u.log
    )
}

/// Read what [`usage_to_text`] wrote: `Some(None)` for `none`, `None` when the text is not a
/// usage file of this version (a damaged or older entry).
pub fn usage_from_text(text: &str) -> Option<Option<ResourceUsage>> {
    let rest = text.strip_prefix(USAGE_MAGIC)?.strip_prefix('\n')?;
    if rest.trim_end() == "none" {
        return Some(None);
    }
    let (numbers, log) = match rest.split_once("\nlog\n") {
        Some((n, l)) => (n, l),
        None => (rest.strip_suffix("\nlog")?, ""),
    };
    let mut u = ResourceUsage {
        log: log.to_string(),
        ..Default::default()
    };
    let mut seen = 0;
    for line in numbers.lines() {
        let (name, value) = line.split_once(' ')?;
        let opt = || -> Option<Option<u32>> {
            match value {
                "-" => Some(None),
                v => v.parse().ok().map(Some),
            }
        };
        let num = || value.parse::<u32>().ok();
        match name {
            "registers" => u.registers = num()?,
            "local_bytes" => u.local_bytes = num()?,
            "static_smem_bytes" => u.static_smem_bytes = num()?,
            "dynamic_smem_bytes" => u.dynamic_smem_bytes = num()?,
            "const_bytes" => u.const_bytes = num()?,
            "max_threads_per_block" => u.max_threads_per_block = num()?,
            "binary_version" => u.binary_version = num()?,
            "spill_stores" => u.spill_stores = opt()?,
            "spill_loads" => u.spill_loads = opt()?,
            "stack_frame" => u.stack_frame = opt()?,
            "vgpr_spills" => u.vgpr_spills = opt()?,
            "sgpr_spills" => u.sgpr_spills = opt()?,
            _ => return None,
        }
        seen += 1;
    }
    (seen == 12).then_some(Some(u))
}

/// The cached code object and its usage for `key`, when both are there and readable.
fn cached(cache: &Cache, key: &str) -> Option<(Vec<u8>, Option<ResourceUsage>)> {
    let code = cache.read(key, "hsaco")?;
    if code.is_empty() {
        return None;
    }
    let usage = usage_from_text(&cache.read_string(key, "usage")?)?;
    Some((code, usage))
}

/// Take `<key>.hsaco` and `<key>.usage` from the cache, or compile `source` with `compile`
/// (clang, in the driver) and store both atomically, the usage first: a code object without
/// a readable usage file beside it (an entry of an older version, or a damaged one) is
/// compiled again. `compile` runs only on a miss.
pub(crate) fn compile_cached<E: From<RuntimeError>>(
    cache: &Cache,
    key: &str,
    source: &str,
    compile: &mut dyn FnMut(&str) -> std::result::Result<HipCode, E>,
) -> std::result::Result<Artifact, E> {
    if let Some((code, usage)) = cached(cache, key) {
        return Ok(Artifact {
            code,
            usage,
            cache_hit: true,
            compile_time: Duration::ZERO,
        });
    }
    // Other processes compiling the same kernel wait here, then find it built.
    let _lock = cache.lock(key, "hsaco");
    if let Some((code, usage)) = cached(cache, key) {
        return Ok(Artifact {
            code,
            usage,
            cache_hit: true,
            compile_time: Duration::ZERO,
        });
    }
    let t = Instant::now();
    let HipCode { code, usage } = compile(source)?;
    let compile_time = t.elapsed();
    if code.is_empty() {
        return Err(RuntimeError::Load {
            path: cache.path(key, "hsaco"),
            reason: "the HIP compiler produced an empty code object".into(),
        }
        .into());
    }
    cache.put_bytes(key, "usage", usage_to_text(usage.as_ref()).as_bytes())?;
    cache.put_bytes(key, "hsaco", &code)?;
    Ok(Artifact {
        code,
        usage,
        cache_hit: false,
        compile_time,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arch_names() {
        assert_eq!(parse_arch("gfx950:sramecc+:xnack-"), Ok(Target::GFX950));
        assert_eq!(parse_arch("gfx942"), Ok(Target::GFX942));
        assert_eq!(parse_arch(" gfx942:xnack+ "), Ok(Target::GFX942));
        let e = parse_arch("gfx90a:sramecc+:xnack-").unwrap_err();
        assert!(
            e.contains("gfx90a") && e.contains("gfx942") && e.contains("gfx950"),
            "{e}"
        );
        assert!(parse_arch("").is_err());
    }

    #[test]
    fn usage_round_trips_through_its_cache_file() {
        let u = ResourceUsage {
            registers: 208,
            local_bytes: 16,
            static_smem_bytes: 131072,
            max_threads_per_block: 512,
            binary_version: 950,
            vgpr_spills: Some(3),
            sgpr_spills: Some(0),
            log: "kernel k (gfx950)\n  registers 208\nlog\n".into(),
            ..Default::default()
        };
        let text = usage_to_text(Some(&u));
        assert_eq!(usage_from_text(&text), Some(Some(u.clone())));
        assert!(u.spills());
        let empty_log = ResourceUsage {
            log: String::new(),
            ..u
        };
        assert_eq!(
            usage_from_text(&usage_to_text(Some(&empty_log))),
            Some(Some(empty_log))
        );
        assert_eq!(usage_from_text(&usage_to_text(None)), Some(None));
        // Anything else is not a usage file: the entry is compiled again.
        for bad in [
            "",
            "tilelang-hip-usage 0\nnone\n",
            "tilelang-hip-usage 1\nregisters x\nlog\n",
            "tilelang-hip-usage 1\nregisters 1\nlog\n",
            &text.replace("vgpr_spills 3", "vgpr_spills"),
            &text.replace("registers", "regs"),
        ] {
            assert_eq!(usage_from_text(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn buffer_range_limit() {
        assert!(check_buffer_range("k", "x", (1 << 31) - 1).is_ok());
        let e = check_buffer_range("k", "x", 1 << 31)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`k`")
                && e.contains("`x`")
                && e.contains("2147483648")
                && e.contains("2147483647"),
            "{e}"
        );
    }

    #[test]
    fn flush_covers_the_infinity_cache() {
        let props = HipProps {
            name: "x".into(),
            gcn_arch_name: "gfx942:sramecc+:xnack-".into(),
            compute_units: 304,
            l2_bytes: 4 << 20,
            total_memory: 0,
            lds_per_block: 65536,
            max_threads_per_block: 1024,
            max_grid: [i32::MAX as u32, 65536, 65536],
            wave_size: 64,
            runtime_version: 0,
        };
        assert_eq!(flush_bytes(&props), 512 << 20);
    }

    /// Executables and tensors on a HIP device can be shared between threads, as CUDA ones.
    #[test]
    fn handles_are_send_and_sync() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<HipKernel>();
        send_sync::<HipDevice>();
        send_sync::<HipBuf>();
        send_sync::<crate::Executable>();
        send_sync::<crate::Tensor>();
    }

    /// Without ROCm (every machine this was written on) the HIP entry points answer with the
    /// reason, never a panic; with ROCm they answer.
    #[test]
    fn no_runtime_is_an_error_not_a_panic() {
        if device_count() == 0 {
            let e = device(0).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.contains("hip:0"), "{e}");
            assert!(unavailable_reason().is_some());
        }
        assert!(check(1 << 20).is_err());
    }
}
