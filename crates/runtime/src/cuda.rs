//! The CUDA backend: contexts, device memory, modules, launches and event timing, through the
//! driver API (cudarc's thin `result`/`sys` layers, loaded at run time).
//!
//! Nothing here runs unless [`crate::cuda_probe`] found a driver and a device, so a machine
//! without CUDA never reaches cudarc (whose loader panics when `libcuda` is missing).
//!
//! One process-wide [`CudaDevice`] per ordinal holds the primary context and one stream; every
//! copy, memset and launch of the runtime goes to that stream, so work on one device is ordered
//! without events, and the host waits only where it reads results (downloads, timing).
//! The stream is a blocking one (`CU_STREAM_DEFAULT`): work other libraries put on the legacy
//! default stream is ordered with it as well.

use std::ffi::{c_void, CString};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use cudarc::driver::result::{self, DriverError};
use cudarc::driver::{sys, CudaContext};
use tl_target::Target;

use crate::cache::Cache;
use crate::cuda_probe::{self, attr};
use crate::error::{Result, RuntimeError};
use crate::nvrtc;

/// What the runtime reads off a device once.
#[derive(Clone, Debug)]
pub struct DeviceProps {
    pub name: String,
    /// Compute capability as `major * 10 + minor`.
    pub sm: u32,
    pub multiprocessors: u32,
    pub l2_bytes: usize,
    pub total_memory: usize,
    /// Shared memory a block gets without opting in (48 KiB).
    pub smem_per_block: usize,
    /// Shared memory a block may get after raising its limit (227 KiB on Hopper).
    pub smem_per_block_optin: usize,
    pub max_threads_per_block: u32,
    /// The driver's CUDA version (12080 for 12.8).
    pub driver_version: i32,
}

impl DeviceProps {
    pub fn target(&self) -> Target {
        Target::Cuda { sm: self.sm }
    }
}

/// A CUDA device in use by this process: its primary context, the runtime's stream and its
/// properties. Created once per ordinal and never freed (contexts live as long as the process).
pub struct CudaDevice {
    ordinal: usize,
    ctx: Arc<CudaContext>,
    stream: sys::CUstream,
    props: DeviceProps,
    /// The last kernel launched, to name it when an asynchronous error surfaces later.
    last_kernel: Mutex<Option<String>>,
    /// The built-in kernels (random fill), compiled on first use.
    builtin: OnceLock<std::result::Result<CudaKernel, String>>,
    /// The pitched-staging kernel ([`crate::pitched`]), compiled on first use.
    stager: OnceLock<std::result::Result<CudaKernel, String>>,
    /// A buffer of twice the L2 size, written between timed runs to evict the cache.
    flush: Mutex<Option<DeviceBuf>>,
}

// SAFETY: the stream handle is only used through the driver API, which is thread-safe; the
// context is made current on the calling thread before every call (see `bind`).
unsafe impl Send for CudaDevice {}
// SAFETY: as above; mutable state is behind mutexes.
unsafe impl Sync for CudaDevice {}

/// Turn a driver error into a runtime error naming the operation.
pub(crate) fn drv(what: impl Into<String>, e: DriverError) -> RuntimeError {
    let name = e
        .error_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| cuda_probe::error_name(e.0 as i32).to_string());
    let text = e
        .error_string()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut error = if text.is_empty() {
        name.clone()
    } else {
        format!("{name}: {text}")
    };
    if matches!(
        e.0,
        sys::CUresult::CUDA_ERROR_ILLEGAL_ADDRESS
            | sys::CUresult::CUDA_ERROR_ILLEGAL_INSTRUCTION
            | sys::CUresult::CUDA_ERROR_MISALIGNED_ADDRESS
            | sys::CUresult::CUDA_ERROR_LAUNCH_FAILED
            | sys::CUresult::CUDA_ERROR_ASSERT
    ) {
        error.push_str(
            " (a fault inside a kernel is sticky: this process can no longer use the GPU; \
             run with TILELANG_CUDA_SYNC=1 or under compute-sanitizer to find the kernel)",
        );
    }
    RuntimeError::Cuda {
        what: what.into(),
        error,
    }
}

fn registry() -> &'static [OnceLock<std::result::Result<&'static CudaDevice, String>>] {
    static R: OnceLock<Vec<OnceLock<std::result::Result<&'static CudaDevice, String>>>> =
        OnceLock::new();
    R.get_or_init(|| {
        (0..cuda_probe::device_count())
            .map(|_| OnceLock::new())
            .collect()
    })
}

/// The device `cuda:ordinal`, opened on first use.
pub fn device(ordinal: usize) -> Result<&'static CudaDevice> {
    cuda_probe::check(ordinal)?;
    let slot = registry()
        .get(ordinal)
        .ok_or_else(|| RuntimeError::DeviceUnavailable {
            device: format!("cuda:{ordinal}"),
            reason: "no such device".into(),
        })?;
    slot.get_or_init(|| open(ordinal).map(|d| &*Box::leak(Box::new(d))))
        .as_ref()
        .copied()
        .map_err(|reason| RuntimeError::DeviceUnavailable {
            device: format!("cuda:{ordinal}"),
            reason: reason.clone(),
        })
}

fn open(ordinal: usize) -> std::result::Result<CudaDevice, String> {
    let probe = cuda_probe::probe();
    let q = |a: i32| cuda_probe::attribute(ordinal, a).map_err(|e| e.to_string());
    let props = DeviceProps {
        name: cuda_probe::name(ordinal).map_err(|e| e.to_string())?,
        sm: cuda_probe::compute_capability(ordinal).map_err(|e| e.to_string())?,
        multiprocessors: q(attr::MULTIPROCESSOR_COUNT)? as u32,
        l2_bytes: q(attr::L2_CACHE_SIZE)? as usize,
        total_memory: cuda_probe::total_memory(ordinal).map_err(|e| e.to_string())?,
        smem_per_block: q(attr::MAX_SHARED_MEMORY_PER_BLOCK)? as usize,
        smem_per_block_optin: q(attr::MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)? as usize,
        max_threads_per_block: q(attr::MAX_THREADS_PER_BLOCK)? as u32,
        driver_version: probe.driver_version.unwrap_or(0),
    };
    // The probe has shown that the driver loads and is recent enough, so cudarc's loader (which
    // panics on a missing library or symbol) should succeed; a panic here is still turned into
    // an error rather than taking the process down.
    let ctx = std::panic::catch_unwind(|| CudaContext::new(ordinal))
        .map_err(|p| {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            format!("cudarc could not load the CUDA driver: {msg}")
        })?
        .map_err(|e| drv(format!("creating the context of cuda:{ordinal}"), e).to_string())?;
    let stream = result::stream::create(result::stream::StreamKind::Default)
        .map_err(|e| drv(format!("creating a stream on cuda:{ordinal}"), e).to_string())?;
    Ok(CudaDevice {
        ordinal,
        ctx,
        stream,
        props,
        last_kernel: Mutex::new(None),
        builtin: OnceLock::new(),
        stager: OnceLock::new(),
        flush: Mutex::new(None),
    })
}

impl CudaDevice {
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }
    pub fn props(&self) -> &DeviceProps {
        &self.props
    }

    /// Make this device's context current on the calling thread (driver calls act on the
    /// current context).
    pub(crate) fn bind(&self) -> Result<()> {
        self.ctx.bind_to_thread().map_err(|e| {
            drv(
                format!("making the context of cuda:{} current", self.ordinal),
                e,
            )
        })
    }

    /// The stream all of the runtime's work on this device goes to; for interop, e.g. running
    /// a cuBLAS reference in order with the runtime's launches.
    pub fn stream(&self) -> sys::CUstream {
        self.stream
    }

    fn note_launch(&self, kernel: &str) {
        if let Ok(mut g) = self.last_kernel.lock() {
            if g.as_deref() != Some(kernel) {
                *g = Some(kernel.to_string());
            }
        }
    }

    /// Wait for all work the runtime queued on this device. An error raised by an earlier
    /// asynchronous launch surfaces here; the message names the last kernel launched.
    pub fn synchronize(&self) -> Result<()> {
        self.bind()?;
        // SAFETY: the stream was created by `open` and is never destroyed.
        unsafe { result::stream::synchronize(self.stream) }.map_err(|e| {
            let last = self
                .last_kernel
                .lock()
                .ok()
                .and_then(|g| g.clone())
                .map(|k| format!(" (the last kernel launched was `{k}`)"))
                .unwrap_or_default();
            drv(format!("synchronizing cuda:{}{last}", self.ordinal), e)
        })
    }

    /// Wait for the stream at most `limit`: `Ok(true)` once everything queued has finished,
    /// `Ok(false)` while something still runs after `limit`. A kernel that waits on another
    /// process (a multi-rank kernel whose peer died) never finishes; this lets the host notice
    /// and report it instead of hanging in `cuStreamSynchronize`.
    pub fn synchronize_within(&self, limit: std::time::Duration) -> Result<bool> {
        self.bind()?;
        let start = std::time::Instant::now();
        let mut pause = std::time::Duration::from_micros(2);
        loop {
            // SAFETY: the stream was created by `open` and is never destroyed.
            match unsafe { sys::cuStreamQuery(self.stream) } {
                sys::CUresult::CUDA_SUCCESS => return Ok(true),
                sys::CUresult::CUDA_ERROR_NOT_READY => {}
                _ => return self.synchronize().map(|_| true),
            }
            if start.elapsed() >= limit {
                return Ok(false);
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(std::time::Duration::from_millis(1));
        }
    }

    /// Free and total device memory in bytes.
    pub fn memory_info(&self) -> Result<(usize, usize)> {
        self.bind()?;
        result::mem_get_info().map_err(|e| drv("cuMemGetInfo", e))
    }

    /// Evict L2 by writing a buffer of twice its size (queued on the stream).
    pub(crate) fn flush_l2(&'static self) -> Result<()> {
        let mut g = self
            .flush
            .lock()
            .map_err(|_| RuntimeError::Launch("the L2 flush buffer's lock is poisoned".into()))?;
        if g.is_none() {
            let bytes = (2 * self.props.l2_bytes).max(1 << 20);
            *g = Some(DeviceBuf::alloc(self, bytes)?);
        }
        if let Some(b) = g.as_ref() {
            b.memset_d32(0x5A5A_5A5A, b.bytes / 4)?;
        }
        Ok(())
    }

    /// The built-in random kernel, compiled (or taken from the disk cache) on first use.
    fn builtin(&'static self) -> std::result::Result<&'static CudaKernel, String> {
        self.builtin_kernel(&self.builtin, crate::rng::CUDA_SOURCE, "tl_rand")
    }

    /// The pitched-staging kernel, compiled (or taken from the disk cache) on first use.
    pub(crate) fn stager(&'static self) -> std::result::Result<&'static CudaKernel, String> {
        self.builtin_kernel(
            &self.stager,
            crate::pitched::CUDA_SOURCE,
            crate::pitched::ENTRY,
        )
    }

    fn builtin_kernel(
        &'static self,
        cell: &'static OnceLock<std::result::Result<CudaKernel, String>>,
        source: &str,
        entry: &str,
    ) -> std::result::Result<&'static CudaKernel, String> {
        cell.get_or_init(|| {
            let arch = self.props.target().arch();
            let tool = nvrtc::toolchain_id(&arch).map_err(|e| e.to_string())?;
            let cache = Cache::from_env();
            let key = Cache::key(&[
                "cuda-builtin",
                source,
                &arch,
                &tool,
                env!("CARGO_PKG_VERSION"),
            ]);
            let art =
                compile_cached(&cache, &key, entry, source, &arch).map_err(|e| e.to_string())?;
            let mut k = CudaKernel::load(self, &art, entry, entry, 0).map_err(|e| e.to_string())?;
            k.grid_dependent =
                waits_for_prior_grid(source) && self.props.target().has_grid_dependency_control();
            Ok(k)
        })
        .as_ref()
        .map_err(|e| e.clone())
    }
}

/// Device memory from `cuMemAlloc` (never managed memory), freed on drop.
pub(crate) struct DeviceBuf {
    ptr: sys::CUdeviceptr,
    bytes: usize,
    dev: &'static CudaDevice,
}

impl DeviceBuf {
    /// `bytes` of uninitialized device memory (at least one byte is allocated, so even an empty
    /// tensor has a distinct, valid address).
    pub(crate) fn alloc(dev: &'static CudaDevice, bytes: usize) -> Result<DeviceBuf> {
        dev.bind()?;
        // SAFETY: the context is current; the memory is owned by the returned value.
        let ptr = unsafe { result::malloc_sync(bytes.max(1)) }.map_err(|e| {
            let free = result::mem_get_info()
                .map(|(f, t)| format!(" ({} MiB free of {} MiB)", f >> 20, t >> 20))
                .unwrap_or_default();
            drv(
                format!("allocating {bytes} bytes on cuda:{}{free}", dev.ordinal),
                e,
            )
        })?;
        Ok(DeviceBuf { ptr, bytes, dev })
    }

    pub(crate) fn ptr(&self) -> u64 {
        self.ptr
    }
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
    pub(crate) fn device(&self) -> &'static CudaDevice {
        self.dev
    }

    /// Copy `host` (exactly `bytes` long) to the device, ordered on the runtime's stream.
    pub(crate) fn upload(&self, host: &[u8]) -> Result<()> {
        if host.len() != self.bytes {
            return Err(RuntimeError::Tensor(format!(
                "uploading {} bytes into a device buffer of {}",
                host.len(),
                self.bytes
            )));
        }
        if host.is_empty() {
            return Ok(());
        }
        self.dev.bind()?;
        // SAFETY: the destination holds `bytes` bytes; for pageable host memory the driver
        // stages the data before returning, so `host` may be dropped afterwards.
        unsafe { result::memcpy_htod_async(self.ptr, host, self.dev.stream) }.map_err(|e| {
            drv(
                format!("copying {} bytes to cuda:{}", host.len(), self.dev.ordinal),
                e,
            )
        })
    }

    /// Copy the whole buffer to `host`, after the work queued before it (which may fail, and
    /// then the error names the last kernel).
    pub(crate) fn download(&self, host: &mut [u8]) -> Result<()> {
        if host.len() != self.bytes {
            return Err(RuntimeError::Tensor(format!(
                "downloading a device buffer of {} bytes into {}",
                self.bytes,
                host.len()
            )));
        }
        self.dev.synchronize()?;
        if host.is_empty() {
            return Ok(());
        }
        // SAFETY: `host` holds `bytes` bytes; the copy completes before the stream sync below.
        unsafe { result::memcpy_dtoh_async(host, self.ptr, self.dev.stream) }.map_err(|e| {
            drv(
                format!(
                    "copying {} bytes from cuda:{}",
                    host.len(),
                    self.dev.ordinal
                ),
                e,
            )
        })?;
        self.dev.synchronize()
    }

    /// Copy `bytes` from another device buffer on the same device.
    pub(crate) fn copy_from(&self, src: &DeviceBuf) -> Result<()> {
        if src.bytes != self.bytes || src.dev.ordinal != self.dev.ordinal {
            return Err(RuntimeError::Tensor(
                "device copy between buffers of different sizes or devices".into(),
            ));
        }
        if self.bytes == 0 {
            return Ok(());
        }
        self.dev.bind()?;
        // SAFETY: both buffers hold `bytes` bytes on the current device.
        unsafe { result::memcpy_dtod_async(self.ptr, src.ptr, self.bytes, self.dev.stream) }
            .map_err(|e| drv("cuMemcpyDtoDAsync", e))
    }

    fn memset_d32(&self, v: u32, count: usize) -> Result<()> {
        self.dev.bind()?;
        // SAFETY: `count` 32-bit words fit in the buffer (callers pass at most bytes / 4).
        unsafe { sys::cuMemsetD32Async(self.ptr, v, count, self.dev.stream) }
            .result()
            .map_err(|e| drv("cuMemsetD32Async", e))
    }

    /// Set every element of `elem.len()` bytes to the pattern `elem`, on the stream.
    pub(crate) fn fill_pattern(&self, elem: &[u8]) -> Result<()> {
        let n = elem.len();
        if n == 0 || self.bytes == 0 {
            return Ok(());
        }
        let count = self.bytes / n;
        self.dev.bind()?;
        let s = self.dev.stream;
        let what = format!("filling {} bytes on cuda:{}", self.bytes, self.dev.ordinal);
        // SAFETY (all arms): `count` elements of `n` bytes fit in the buffer, which is valid on
        // the current context; the memsets are ordered on the runtime's stream.
        let rc = match n {
            _ if elem.iter().all(|&b| b == elem[0]) => unsafe {
                sys::cuMemsetD8Async(self.ptr, elem[0], self.bytes, s)
            },
            2 => unsafe {
                sys::cuMemsetD16Async(self.ptr, u16::from_le_bytes([elem[0], elem[1]]), count, s)
            },
            4 => unsafe {
                sys::cuMemsetD32Async(
                    self.ptr,
                    u32::from_le_bytes([elem[0], elem[1], elem[2], elem[3]]),
                    count,
                    s,
                )
            },
            8 => {
                let lo = u32::from_le_bytes([elem[0], elem[1], elem[2], elem[3]]);
                let hi = u32::from_le_bytes([elem[4], elem[5], elem[6], elem[7]]);
                if lo == hi {
                    unsafe { sys::cuMemsetD32Async(self.ptr, lo, count * 2, s) }
                } else {
                    // Two strided 2-D memsets (pitch 8 bytes, one word per row) write the low
                    // and the high halves of every 64-bit element.
                    let mut r = unsafe { sys::cuMemsetD2D32Async(self.ptr, 8, lo, 1, count, s) };
                    if r == sys::CUresult::CUDA_SUCCESS {
                        r = unsafe { sys::cuMemsetD2D32Async(self.ptr + 4, 8, hi, 1, count, s) };
                    }
                    if r == sys::CUresult::CUDA_ERROR_INVALID_VALUE {
                        // A driver that refuses the narrow pitch: write the pattern from the host.
                        return self.upload(&elem.repeat(count));
                    }
                    r
                }
            }
            _ => {
                return Err(RuntimeError::Tensor(format!(
                    "no fill for {n}-byte elements"
                )))
            }
        };
        rc.result().map_err(|e| drv(what, e))
    }

    /// Fill with the counter-based random stream of [`crate::rng`], on the device when the
    /// built-in kernel is available and the tensor is large, else on the host.
    pub(crate) fn fill_random(
        &self,
        dtype: tl_ir::DType,
        seed: u64,
        dist: crate::rng::Dist,
    ) -> Result<()> {
        let numel = self.bytes / dtype.bytes().max(1);
        const DEVICE_MIN: usize = 1 << 16;
        if let (Some(code), true) = (crate::rng::device_code(dtype), numel >= DEVICE_MIN) {
            if let Ok(k) = self.dev.builtin() {
                let (mode, a, b) = match dist {
                    crate::rng::Dist::Uniform { lo, hi } => (0i32, lo, hi),
                    crate::rng::Dist::Normal { mean, std } => (1i32, mean, std),
                };
                let mut p = crate::exec::ParamBlock::default();
                p.push_u64(self.ptr);
                p.push_u64(numel as u64);
                p.push_u64(crate::rng::key(seed));
                p.push_i64(mode as i64);
                p.push_f64(a);
                p.push_f64(b);
                p.push_i64(code as i64);
                let threads = 256u32;
                let blocks = (numel as u64)
                    .div_ceil(threads as u64)
                    .min(self.dev.props.multiprocessors as u64 * 32)
                    .max(1);
                return k.launch(&mut p, [blocks as i64, 1, 1], threads);
            }
        }
        let mut host = vec![0u8; self.bytes];
        crate::rng::fill_host(&mut host, dtype, seed, dist);
        self.upload(&host)
    }
}

impl Drop for DeviceBuf {
    fn drop(&mut self) {
        if self.dev.bind().is_ok() {
            // SAFETY: `ptr` came from cuMemAlloc and is freed once, here. cuMemFree waits for
            // queued work that may still use it.
            let _ = unsafe { result::free_sync(self.ptr) };
        }
    }
}

/// What the compiler and the driver report about a compiled kernel: the numbers to look at
/// for register pressure, spills and occupancy. For an AMD (HIP) kernel they come from clang's
/// assembly (`tl_amdgpu::isa`, computed by the driver when it compiles and kept in the disk
/// cache beside the code object), as the field docs say.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResourceUsage {
    /// Registers per thread (AMD: vector registers allocated per lane, architectural and
    /// accumulation VGPRs together).
    pub registers: u32,
    /// Local memory per thread in bytes (stack frame and spills; AMD: scratch per lane).
    pub local_bytes: u32,
    /// Statically declared shared memory in bytes (AMD: LDS per workgroup).
    pub static_smem_bytes: u32,
    /// Dynamic shared memory the kernel is launched with.
    pub dynamic_smem_bytes: u32,
    pub const_bytes: u32,
    /// The most threads a block may have with this register use (AMD: the workgroup size the
    /// kernel was compiled for).
    pub max_threads_per_block: u32,
    /// SASS version (90 for sm_90); AMD: the gfx number (950 for gfx950).
    pub binary_version: u32,
    /// From ptxas's report in the NVRTC log, when the log has one (`None` on AMD).
    pub spill_stores: Option<u32>,
    pub spill_loads: Option<u32>,
    pub stack_frame: Option<u32>,
    /// AMD: vector and scalar registers clang spilled (its `.vgpr_spill_count` and
    /// `.sgpr_spill_count`); `None` on NVIDIA.
    pub vgpr_spills: Option<u32>,
    pub sgpr_spills: Option<u32>,
    /// The NVRTC log (kept in the disk cache next to the cubin, so also on a cache hit); for an
    /// AMD kernel, its ISA report.
    pub log: String,
}

impl ResourceUsage {
    /// Whether the compiler spilled registers (to local memory on NVIDIA; on AMD, VGPRs to
    /// scratch or SGPRs to VGPR lanes or scratch).
    pub fn spills(&self) -> bool {
        [
            self.spill_stores,
            self.spill_loads,
            self.vgpr_spills,
            self.sgpr_spills,
        ]
        .iter()
        .any(|n| n.unwrap_or(0) > 0)
    }
}

/// ptxas's report for `entry` in an NVRTC log: `(stack frame, spill stores, spill loads)`,
/// or `None` when the log has no report for it.
fn ptxas_usage(log: &str, entry: &str) -> Option<(u32, u32, u32)> {
    tl_nvrtc::parse_ptxas_log(log)
        .into_iter()
        .find(|f| f.name == entry)
        .map(|f| {
            (
                f.usage.stack_frame,
                f.usage.spill_stores,
                f.usage.spill_loads,
            )
        })
}

/// A loaded kernel: its module (unloaded on drop) and function.
pub struct CudaKernel {
    dev: &'static CudaDevice,
    module: sys::CUmodule,
    func: sys::CUfunction,
    name: String,
    usage: ResourceUsage,
    /// How long the driver took to compile the module, where it did ([`Artifact::jit`]).
    pub(crate) jit_time: Option<Duration>,
    /// The kernel waits for the grid before it (`griddepcontrol.wait`, see
    /// [`waits_for_prior_grid`]): it is launched with programmatic stream serialization.
    pub(crate) grid_dependent: bool,
    /// Blocks of this kernel one multiprocessor holds at once (for `check_coresident`).
    max_resident: OnceLock<u32>,
}

/// Whether kernel code (CUDA C++ or PTX) waits for the grid before it in the stream
/// (`griddepcontrol.wait`) before touching memory, as the compiler's `grid_dependency` stage
/// makes every sm_90 kernel do: such a kernel may be launched while that grid still runs
/// (programmatic dependent launch), which saves the gap between the two (about 1.3–1.5 µs on
/// an H200, gpu-notes run 34b). A kernel without the wait must not be launched so.
pub(crate) fn waits_for_prior_grid(code: &str) -> bool {
    code.contains("griddepcontrol.wait")
}

/// Programmatic dependent launches are on unless `TILELANG_PDL=0` (for measuring them).
fn pdl_enabled() -> bool {
    static S: OnceLock<bool> = OnceLock::new();
    *S.get_or_init(|| std::env::var("TILELANG_PDL").map_or(true, |v| v != "0"))
}

// SAFETY: module and function handles are used only through the thread-safe driver API, with
// the context made current first.
unsafe impl Send for CudaKernel {}
// SAFETY: as above; launches do not mutate the handle.
unsafe impl Sync for CudaKernel {}

impl Drop for CudaKernel {
    fn drop(&mut self) {
        if self.dev.bind().is_ok() {
            // SAFETY: the module was loaded by `load` and is unloaded once, here.
            let _ = unsafe { result::module::unload(self.module) };
        }
    }
}

/// What initialises a loaded module that holds NVSHMEM's device state
/// (`nvshmemx_cumodule_init`); the error text on failure.
pub type ModuleInit = Box<dyn Fn(sys::CUmodule) -> std::result::Result<(), String> + Send + Sync>;

static NVSHMEM_MODULE_INIT: Mutex<Option<Arc<ModuleInit>>> = Mutex::new(None);

/// Set (or clear) what initialises each module linked with NVSHMEM as it is loaded: the
/// process's NVSHMEM owner (`tl_dist`'s NVSHMEM heap) sets it once NVSHMEM is up.
pub fn set_nvshmem_module_init(init: Option<ModuleInit>) {
    if let Ok(mut g) = NVSHMEM_MODULE_INIT.lock() {
        *g = init.map(Arc::new);
    }
}

/// A module linked with NVSHMEM (it holds `nvshmemi_device_state_d`) is initialised before
/// any launch, or unloaded with an error that says what to set up; others pass untouched.
/// The driver is asked for the symbol only where the image names it: a failed lookup is an
/// API error that compute-sanitizer reports (and fails a run on) for every other kernel.
fn init_nvshmem_module(module: sys::CUmodule, image: &[u8], kernel: &str) -> Result<()> {
    let name = c"nvshmemi_device_state_d";
    let needle = name.to_bytes();
    if !image.windows(needle.len()).any(|w| w == needle) {
        return Ok(());
    }
    let (mut ptr, mut bytes) = (0, 0);
    // SAFETY: a loaded module; valid out-pointers and a NUL-terminated name.
    let found = unsafe { sys::cuModuleGetGlobal_v2(&mut ptr, &mut bytes, module, name.as_ptr()) };
    if found != sys::CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    let init = NVSHMEM_MODULE_INIT.lock().ok().and_then(|g| g.clone());
    let outcome = match init {
        Some(f) => f(module),
        None => Err("NVSHMEM is not initialised in this process: set up the NVSHMEM symmetric heap first (`TILELANG_DIST_IPC=nvshmem`, `tl_dist::SymmetricHeap::new`)".into()),
    };
    outcome.map_err(|why| {
        // SAFETY: the module was just loaded and is not used after this.
        let _ = unsafe { result::module::unload(module) };
        RuntimeError::NvshmemModule(format!(
            "kernel `{kernel}` calls NVSHMEM and its module could not be initialised: {why}"
        ))
    })
}

fn func_attr(
    f: sys::CUfunction,
    a: sys::CUfunction_attribute,
) -> std::result::Result<i32, DriverError> {
    let mut v = 0i32;
    // SAFETY: `f` is a valid function of a loaded module; the out-pointer is valid.
    unsafe { sys::cuFuncGetAttribute(&mut v, a, f) }.result()?;
    Ok(v)
}

impl CudaKernel {
    /// Load `cubin`, find `entry`, and allow `dynamic_smem` bytes of dynamic shared memory.
    pub(crate) fn load(
        dev: &'static CudaDevice,
        art: &Artifact,
        entry: &str,
        kernel: &str,
        dynamic_smem: u32,
    ) -> Result<CudaKernel> {
        dev.bind()?;
        let (module, log, jit_time) = if art.jit {
            let (module, log, took) = jit_load(&art.cubin, kernel, dev.ordinal)?;
            (module, log, Some(took))
        } else {
            match (Self::load_cubin(dev, &art.cubin, kernel), &art.ptx) {
                (Ok(module), _) => (module, art.log.clone(), None),
                // ptxas's cubin, which this driver cannot load: its JIT compiles the PTX.
                (Err(_), Some(ptx)) => {
                    let (module, log, took) = jit_load(ptx, kernel, dev.ordinal)?;
                    (module, log, Some(took))
                }
                (Err(e), None) => return Err(e),
            }
        };
        init_nvshmem_module(module, &art.cubin, kernel)?;
        let mut k = Self::with_module(dev, module, entry, kernel, dynamic_smem, log)?;
        k.jit_time = jit_time;
        Ok(k)
    }

    fn load_cubin(dev: &'static CudaDevice, cubin: &[u8], kernel: &str) -> Result<sys::CUmodule> {
        // The driver parses the image in place; give it an 8-byte-aligned copy, as ELF wants.
        let mut image: Vec<u64> = vec![0; cubin.len().div_ceil(8) + 1];
        // SAFETY: `image` has at least `cubin.len()` bytes; the regions do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(
                cubin.as_ptr(),
                image.as_mut_ptr() as *mut u8,
                cubin.len(),
            )
        };
        // SAFETY: `image` is a complete cubin (ELF) that outlives the call.
        let module = unsafe { result::module::load_data(image.as_ptr() as *const c_void) }
            .map_err(|e| {
                let hint = if e.0 == sys::CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU
                    || e.0 == sys::CUresult::CUDA_ERROR_INVALID_IMAGE
                {
                    format!(
                        " (the device is {} = {}; compile for that architecture)",
                        dev.props.name,
                        dev.props.target().arch()
                    )
                } else {
                    String::new()
                };
                drv(
                    format!(
                        "loading the module of kernel `{kernel}` on cuda:{}{hint}",
                        dev.ordinal
                    ),
                    e,
                )
            })?;
        Ok(module)
    }

    /// Find `entry` in the loaded `module` (unloaded again on any error) and read its resource
    /// usage; `log` is the compile log with ptxas's report.
    fn with_module(
        dev: &'static CudaDevice,
        module: sys::CUmodule,
        entry: &str,
        kernel: &str,
        dynamic_smem: u32,
        log: String,
    ) -> Result<CudaKernel> {
        let unload = |m| {
            // SAFETY: `m` was just loaded and is not used after this.
            let _ = unsafe { result::module::unload(m) };
        };
        let cname = match CString::new(entry) {
            Ok(c) => c,
            Err(_) => {
                unload(module);
                return Err(RuntimeError::Launch(format!(
                    "kernel `{kernel}`: entry name `{entry}` contains a NUL byte"
                )));
            }
        };
        // SAFETY: the module is loaded; the name is NUL-terminated.
        let func = match unsafe { result::module::get_function(module, cname) } {
            Ok(f) => f,
            Err(e) => {
                unload(module);
                return Err(drv(
                    format!("finding `{entry}` in the module of kernel `{kernel}` (is it `extern \"C\" __global__`?)"),
                    e,
                ));
            }
        };
        use sys::CUfunction_attribute as A;
        let get = |a| func_attr(func, a).map(|v| v.max(0) as u32);
        let usage = (|| -> std::result::Result<ResourceUsage, DriverError> {
            let report = ptxas_usage(&log, entry);
            Ok(ResourceUsage {
                registers: get(A::CU_FUNC_ATTRIBUTE_NUM_REGS)?,
                local_bytes: get(A::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)?,
                static_smem_bytes: get(A::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)?,
                dynamic_smem_bytes: dynamic_smem,
                const_bytes: get(A::CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES)?,
                max_threads_per_block: get(A::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
                binary_version: get(A::CU_FUNC_ATTRIBUTE_BINARY_VERSION)?,
                spill_stores: report.map(|r| r.1),
                spill_loads: report.map(|r| r.2),
                stack_frame: report.map(|r| r.0),
                vgpr_spills: None,
                sgpr_spills: None,
                log: log.clone(),
            })
        })();
        let usage = match usage {
            Ok(u) => u,
            Err(e) => {
                unload(module);
                return Err(drv(format!("cuFuncGetAttribute on kernel `{kernel}`"), e));
            }
        };
        let k = CudaKernel {
            dev,
            module,
            func,
            name: kernel.to_string(),
            usage,
            jit_time: None,
            grid_dependent: false,
            max_resident: OnceLock::new(),
        };
        let total_smem = dynamic_smem as usize + k.usage.static_smem_bytes as usize;
        if total_smem > dev.props.smem_per_block_optin {
            return Err(RuntimeError::Launch(format!(
                "kernel `{kernel}` needs {total_smem} bytes of shared memory ({dynamic_smem} dynamic + {} static), but a block on {} may have at most {}; use smaller tiles or fewer pipeline stages",
                k.usage.static_smem_bytes, dev.props.name, dev.props.smem_per_block_optin
            )));
        }
        if dynamic_smem as usize > 48 * 1024 {
            // Past 48 KiB a kernel must opt in to its dynamic shared memory size.
            // SAFETY: `func` is a valid function of the loaded module.
            unsafe {
                result::function::set_function_attribute(
                    func,
                    A::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    dynamic_smem as i32,
                )
            }
            .map_err(|e| {
                drv(
                    format!("raising the dynamic shared memory of kernel `{kernel}` to {dynamic_smem} bytes"),
                    e,
                )
            })?;
        }
        Ok(k)
    }

    pub fn usage(&self) -> &ResourceUsage {
        &self.usage
    }
    pub fn device(&self) -> &'static CudaDevice {
        self.dev
    }

    /// Check the launch shape against what the device and this kernel allow.
    pub(crate) fn check_shape(&self, grid: [i64; 3], threads: u32) -> Result<()> {
        check_launch_shape(&self.name, grid, threads, self.usage.max_threads_per_block)
    }

    /// Queue one launch on the runtime's stream. A zero-size grid is a no-op.
    pub(crate) fn launch(
        &self,
        params: &mut crate::exec::ParamBlock,
        grid: [i64; 3],
        threads: u32,
    ) -> Result<()> {
        self.launch_on(params, grid, threads, crate::external::Stream::Runtime)
    }

    /// Queue one launch on `stream` (the runtime's, or a caller's stream of this device's
    /// primary context, such as torch's current stream). A zero-size grid is a no-op.
    pub(crate) fn launch_on(
        &self,
        params: &mut crate::exec::ParamBlock,
        grid: [i64; 3],
        threads: u32,
        stream: crate::external::Stream,
    ) -> Result<()> {
        let raw = match stream {
            crate::external::Stream::Runtime => self.dev.stream,
            crate::external::Stream::Raw(s) => s as sys::CUstream,
        };
        self.check_shape(grid, threads)?;
        if grid.contains(&0) {
            return Ok(());
        }
        self.dev.bind()?;
        if params.needs_coresident_blocks() {
            self.check_coresident(grid, threads)?;
        }
        for &(ptr, words) in params.zeroings() {
            // SAFETY: a device buffer of at least `words` 32-bit words the executable owns;
            // the memset is ordered on the launch's stream before the kernel.
            unsafe { sys::cuMemsetD32Async(ptr, 0, words, raw) }
                .result()
                .map_err(|e| drv("cuMemsetD32Async (in-kernel staging flags)", e))?;
        }
        for st in params.stagings() {
            self.stage(st, raw)?;
        }
        let mut ptrs = params.pointers();
        self.dev.note_launch(&self.name);
        let launched = if self.grid_dependent && pdl_enabled() {
            self.launch_grid_dependent(grid, threads, raw, &mut ptrs)
        } else {
            // SAFETY: the function belongs to a loaded module on the current context; `ptrs`
            // points at one slot per kernel parameter, in the kernel's order, each holding a
            // value of the parameter's type (see `ParamBlock`), and the slots outlive the call
            // (the driver copies them at launch). Tensor pointers were checked against the
            // signature by `bind`.
            unsafe {
                result::launch_kernel(
                    self.func,
                    (grid[0] as u32, grid[1] as u32, grid[2] as u32),
                    (threads, 1, 1),
                    self.usage.dynamic_smem_bytes,
                    raw,
                    &mut ptrs,
                )
            }
        };
        launched.map_err(|e| {
            drv(
                format!(
                    "launching kernel `{}` on cuda:{} (grid {:?}, {} threads, {} bytes dynamic shared memory)",
                    self.name, self.dev.ordinal, grid, threads, self.usage.dynamic_smem_bytes
                ),
                e,
            )
        })?;
        if sync_launches() {
            self.dev.synchronize()?;
            if raw != self.dev.stream {
                // SAFETY: the caller's stream belongs to this device's current context.
                unsafe { result::stream::synchronize(raw) }
                    .map_err(|e| drv(format!("synchronizing after kernel `{}`", self.name), e))?;
            }
        }
        Ok(())
    }

    /// `cuLaunchKernelEx` with programmatic stream serialization: the kernel may start while
    /// the stream's previous kernel finishes (it waits for it in `griddepcontrol.wait`).
    fn launch_grid_dependent(
        &self,
        grid: [i64; 3],
        threads: u32,
        stream: sys::CUstream,
        ptrs: &mut [*mut c_void],
    ) -> std::result::Result<(), DriverError> {
        // SAFETY: an all-zero attribute is a valid (ignored) one; the id and value are set
        // below.
        let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        let config = sys::CUlaunchConfig {
            gridDimX: grid[0] as u32,
            gridDimY: grid[1] as u32,
            gridDimZ: grid[2] as u32,
            blockDimX: threads,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: self.usage.dynamic_smem_bytes,
            hStream: stream,
            attrs: &mut attr,
            numAttrs: 1,
        };
        // SAFETY: as for `launch_kernel` in `launch_on`: a function of a loaded module on the
        // current context, one parameter slot per kernel parameter, outliving the call; the
        // config and its one attribute outlive the call too.
        unsafe {
            sys::cuLaunchKernelEx(&config, self.func, ptrs.as_mut_ptr(), std::ptr::null_mut())
        }
        .result()
    }

    /// A kernel whose blocks wait for each other (in-kernel staging) must have all of them
    /// resident at once, or the first ones spin forever: refuse the launch where the device
    /// (shared, or partitioned by MPS) cannot hold them.
    fn check_coresident(&self, grid: [i64; 3], threads: u32) -> Result<()> {
        let per_sm = *self.max_resident.get_or_init(|| {
            let mut n = 0i32;
            // SAFETY: a function of a loaded module on the current context.
            let r = unsafe {
                sys::cuOccupancyMaxActiveBlocksPerMultiprocessor(
                    &mut n,
                    self.func,
                    threads as i32,
                    self.usage.dynamic_smem_bytes as usize,
                )
            };
            if r == sys::CUresult::CUDA_SUCCESS {
                n.max(0) as u32
            } else {
                0
            }
        });
        let fit = u64::from(per_sm) * u64::from(self.dev.props.multiprocessors);
        let blocks = grid.iter().product::<i64>().max(0) as u64;
        if blocks > fit {
            return Err(RuntimeError::Launch(format!(
                "kernel `{}` copies its odd-length rows itself and needs all {blocks} of its blocks resident at once, but only {fit} fit on cuda:{} ({per_sm} per multiprocessor); unset TILELANG_STAGE_IN_KERNEL to have the runtime stage them before the launch",
                self.name, self.dev.ordinal
            )));
        }
        Ok(())
    }

    /// Queue a pitched copy (see `exec::Staging`) on the stream, ahead of the launch: by the
    /// built-in kernel ([`crate::pitched`]), or by `cuMemcpy2DAsync` (half its speed) where
    /// NVRTC cannot build it.
    fn stage(&self, st: &crate::exec::Staging, stream: sys::CUstream) -> Result<()> {
        if let Ok(k) = self.dev.stager() {
            let mut p = crate::exec::ParamBlock::default();
            p.push_u64(st.src);
            p.push_u64(st.dst);
            p.push_u64(st.src_pitch as u64);
            p.push_u64(st.dst_pitch as u64);
            p.push_u64(st.width as u64);
            p.push_u64(st.height as u64);
            let blocks = crate::pitched::blocks(st.height);
            let on = crate::external::Stream::Raw(stream as usize);
            return k.launch_on(&mut p, [blocks, 1, 1], crate::pitched::THREADS, on);
        }
        self.memcpy_2d(st, stream)
    }

    /// [`stage`](Self::stage) by the driver's 2-D copy.
    fn memcpy_2d(&self, st: &crate::exec::Staging, stream: sys::CUstream) -> Result<()> {
        let copy = sys::CUDA_MEMCPY2D {
            srcXInBytes: 0,
            srcY: 0,
            srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            srcHost: std::ptr::null(),
            srcDevice: st.src,
            srcArray: std::ptr::null_mut(),
            srcPitch: st.src_pitch,
            dstXInBytes: 0,
            dstY: 0,
            dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            dstHost: std::ptr::null_mut(),
            dstDevice: st.dst,
            dstArray: std::ptr::null_mut(),
            dstPitch: st.dst_pitch,
            WidthInBytes: st.width,
            Height: st.height,
        };
        // SAFETY: both ranges are device memory of at least `height` rows of their pitch (the
        // source a bound tensor argument, the destination the executable's scratch, sized for
        // it); the copy is ordered on the stream before the kernel that reads it.
        unsafe { sys::cuMemcpy2DAsync_v2(&copy, stream) }
            .result()
            .map_err(|e| {
                drv(
                    format!(
                        "staging a pitched copy ({} rows of {} bytes) for kernel `{}`",
                        st.height, st.width, self.name
                    ),
                    e,
                )
            })
    }

    /// One launch between two CUDA events; its time in ms once the stream has drained, or
    /// `None` when it still runs after `limit` (see [`CudaDevice::synchronize_within`]).
    pub(crate) fn launch_timed(
        &self,
        params: &mut crate::exec::ParamBlock,
        grid: [i64; 3],
        threads: u32,
        limit: std::time::Duration,
    ) -> Result<Option<f64>> {
        let (start, end) = (Event::new(self.dev)?, Event::new(self.dev)?);
        start.record()?;
        self.launch(params, grid, threads)?;
        end.record()?;
        if !self.dev.synchronize_within(limit)? {
            // The events stay alive with the process: destroying an event still pending on a
            // stream is allowed (its resources go when the work completes).
            return Ok(None);
        }
        start.elapsed_ms(&end).map(Some)
    }
}

/// One launch of a timed sequence ([`bench_sequence`]): a kernel, its packed parameters, its
/// grid and block size.
pub(crate) struct SequenceStep<'a> {
    pub kernel: &'a CudaKernel,
    pub params: crate::exec::ParamBlock,
    pub grid: [i64; 3],
    pub threads: u32,
}

/// Time a sequence of launches on one device as a single piece of work (a single launch, or a
/// program of several kernels such as a split-K GEMM and its sum, gaps between the launches
/// included): CUDA events around the whole sequence, after `warmup` untimed sequences,
/// optionally writing the L2 flush buffer before each timed one (outside the timed region).
pub(crate) fn bench_sequence(
    steps: &mut [SequenceStep],
    warmup: usize,
    reps: usize,
    flush_l2: bool,
    back_to_back: usize,
) -> Result<Vec<f64>> {
    let Some(dev) = steps.first().map(|s| s.kernel.dev) else {
        return Ok(vec![]);
    };
    if steps.iter().any(|s| !std::ptr::eq(s.kernel.dev, dev)) {
        return Err(RuntimeError::Launch(
            "a timed sequence of launches spans several devices; time each device's launches apart"
                .into(),
        ));
    }
    let launch_all = |steps: &mut [SequenceStep]| -> Result<()> {
        for s in steps.iter_mut() {
            s.kernel.launch(&mut s.params, s.grid, s.threads)?;
        }
        Ok(())
    };
    for _ in 0..warmup {
        launch_all(steps)?;
    }
    dev.synchronize()?;
    let reps = reps.max(1);
    let window = back_to_back.max(1);
    let mut events = Vec::with_capacity(2 * reps);
    for _ in 0..2 * reps {
        events.push(Event::new(dev)?);
    }
    for r in 0..reps {
        if flush_l2 {
            dev.flush_l2()?;
        }
        events[2 * r].record()?;
        for _ in 0..window {
            launch_all(steps)?;
        }
        events[2 * r + 1].record()?;
    }
    dev.synchronize()?;
    (0..reps)
        .map(|r| {
            events[2 * r]
                .elapsed_ms(&events[2 * r + 1])
                .map(|ms| ms / window as f64)
        })
        .collect()
}

/// Grid and block limits every CUDA device has, and the kernel's own thread limit (which its
/// register use lowers).
pub fn check_launch_shape(
    kernel: &str,
    grid: [i64; 3],
    threads: u32,
    max_threads: u32,
) -> Result<()> {
    let limits = [i32::MAX as i64, 65535, 65535];
    for (d, (&g, &lim)) in grid.iter().zip(&limits).enumerate() {
        if g < 0 || g > lim {
            return Err(RuntimeError::Launch(format!(
                "kernel `{kernel}`: grid dimension {} is {g}, outside 0..={lim} (CUDA's limit); launch fewer, larger blocks",
                ["x", "y", "z"][d]
            )));
        }
    }
    if threads == 0 || threads > max_threads.min(1024) {
        return Err(RuntimeError::Launch(format!(
            "kernel `{kernel}`: {threads} threads per block, but this kernel can run at most {} (its register use sets the limit)",
            max_threads.min(1024)
        )));
    }
    Ok(())
}

/// `TILELANG_CUDA_SYNC=1` waits after every launch, so a fault is reported against the kernel
/// that caused it.
fn sync_launches() -> bool {
    static S: OnceLock<bool> = OnceLock::new();
    *S.get_or_init(|| {
        std::env::var("TILELANG_CUDA_SYNC")
            .map(|v| !v.is_empty() && v != "0")
            .unwrap_or(false)
    })
}

/// A timing event on the runtime's stream.
struct Event {
    ev: sys::CUevent,
    dev: &'static CudaDevice,
}

impl Event {
    fn new(dev: &'static CudaDevice) -> Result<Event> {
        dev.bind()?;
        let ev = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
            .map_err(|e| drv("cuEventCreate", e))?;
        Ok(Event { ev, dev })
    }
    fn record(&self) -> Result<()> {
        // SAFETY: a live event and the runtime's stream, both on the current context.
        unsafe { result::event::record(self.ev, self.dev.stream) }
            .map_err(|e| drv("cuEventRecord", e))
    }
    fn elapsed_ms(&self, end: &Event) -> Result<f64> {
        // SAFETY: both events are live and were recorded (and completed: the stream was synced).
        unsafe { result::event::elapsed(self.ev, end.ev) }
            .map(|v| v as f64)
            .map_err(|e| drv("cuEventElapsedTime", e))
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if self.dev.bind().is_ok() {
            // SAFETY: the event was created in `new` and is destroyed once, here.
            let _ = unsafe { result::event::destroy(self.ev) };
        }
    }
}

/// A cubin and its NVRTC log, from the cache or a fresh compile.
pub(crate) struct Artifact {
    /// A cubin, or with `jit` the PTX text (NUL-terminated) for the driver to compile.
    pub cubin: Vec<u8>,
    pub log: String,
    pub cache_hit: bool,
    pub compile_time: Duration,
    /// PTX the driver compiles at load ([`tl_nvrtc::needs_whole_program`]).
    pub jit: bool,
    /// For a cubin ptxas made of whole-program PTX: that PTX (NUL-terminated), which the
    /// driver's JIT compiles instead if the driver cannot load the cubin (a ptxas newer than
    /// the driver).
    pub ptx: Option<Vec<u8>>,
}

/// Take `<key>.cubin` (and its `<key>.log`) from the cache, or compile `source` with NVRTC for
/// `arch` and store both (atomically, so concurrent processes never read a torn file). The
/// source of a failed compile is kept as `<key>.cu` for the error message.
pub(crate) fn compile_cached(
    cache: &Cache,
    key: &str,
    kernel: &str,
    source: &str,
    arch: &str,
) -> Result<Artifact> {
    compile_cached_with(
        cache,
        key,
        kernel,
        source,
        arch,
        crate::whole_program::ptxas(),
    )
}

/// [`compile_cached`] with whole-program PTX assembled by `ptxas` (or, with `None`, left to
/// the driver's JIT).
fn compile_cached_with(
    cache: &Cache,
    key: &str,
    kernel: &str,
    source: &str,
    arch: &str,
    ptxas: Option<&tl_nvrtc::Ptxas>,
) -> Result<Artifact> {
    if tl_nvrtc::needs_whole_program(source) {
        if let Some(a) =
            ptxas.and_then(|ptxas| assemble_whole_program(cache, key, source, arch, ptxas))
        {
            return Ok(a);
        }
        // Compiled by the driver when loaded (`jit_load`), which keeps its own cache of JIT
        // results. Ours keeps the PTX (`<key>.ptx`: a later build or precompile of the same
        // key is a hit) and the ptxas report of the first load (`<key>.jitlog`).
        let image = nul_terminated(source);
        let hit = cache
            .read(key, "ptx")
            .is_some_and(|p| p == source.as_bytes());
        if !hit {
            cache.put_bytes(key, "ptx", source.as_bytes())?;
        }
        return Ok(Artifact {
            cubin: image,
            cache_hit: hit,
            log: cache.read_string(key, "jitlog").unwrap_or_default(),
            compile_time: Duration::ZERO,
            jit: true,
            ptx: None,
        });
    }
    let cached = || cached_cubin(cache, key, "cubin", "log");
    if let Some(a) = cached() {
        return Ok(a);
    }
    // Other processes compiling the same kernel wait here, then find it built.
    let _lock = cache.lock(key, "cubin");
    if let Some(a) = cached() {
        return Ok(a);
    }
    let t = Instant::now();
    let compiled = nvrtc::compile(source, arch).map_err(|e| match e {
        nvrtc::NvrtcError::Compile { log, .. } => {
            let src_path = cache.path(key, "cu");
            if let Some(d) = src_path.parent() {
                let _ = std::fs::create_dir_all(d);
            }
            let _ = std::fs::write(&src_path, source);
            let mut log = log;
            if log.len() > 16000 {
                let mut cut = 16000;
                while !log.is_char_boundary(cut) {
                    cut -= 1;
                }
                log.truncate(cut);
                log.push_str("\n[log truncated]");
            }
            RuntimeError::NvrtcFailed {
                kernel: kernel.to_string(),
                arch: arch.to_string(),
                source_path: src_path,
                log,
            }
        }
        other => RuntimeError::Nvrtc(other),
    })?;
    let compile_time = t.elapsed();
    cache.put_bytes(key, "log", compiled.log.as_bytes())?;
    cache.put_bytes(key, "cubin", &compiled.cubin)?;
    Ok(Artifact {
        cubin: compiled.cubin,
        log: compiled.log,
        cache_hit: false,
        compile_time,
        jit: false,
        ptx: None,
    })
}

/// Whole-program PTX assembled by ptxas (`<key>.<ptxas tag>.cubin` and `.log` in the cache),
/// or `None` when ptxas fails, and the driver's JIT is to compile it instead (a ptxas older
/// than the PTX, say: the driver then reports any error in the PTX itself).
fn assemble_whole_program(
    cache: &Cache,
    key: &str,
    source: &str,
    arch: &str,
    ptxas: &tl_nvrtc::Ptxas,
) -> Option<Artifact> {
    let (cubin_ext, log_ext) = (format!("{}.cubin", ptxas.tag), format!("{}.log", ptxas.tag));
    let ptx = nul_terminated(source);
    let cached = || {
        cached_cubin(cache, key, &cubin_ext, &log_ext).map(|a| Artifact {
            ptx: Some(ptx.clone()),
            ..a
        })
    };
    if let Some(a) = cached() {
        return Some(a);
    }
    let _lock = cache.lock(key, &cubin_ext);
    if let Some(a) = cached() {
        return Some(a);
    }
    let made = ptxas.assemble(source, arch).ok()?;
    // `Cache::put` already falls back to a scratch directory; should even that fail, the
    // cubin is loaded uncached rather than assembled again by the driver.
    let _ = cache.put_bytes(key, &log_ext, made.log.as_bytes());
    let _ = cache.put_bytes(key, &cubin_ext, &made.cubin);
    Some(Artifact {
        cubin: made.cubin,
        log: made.log,
        cache_hit: false,
        compile_time: made.time,
        jit: false,
        ptx: Some(ptx),
    })
}

/// A cubin and its log kept in the cache as `<key>.<cubin_ext>` and `<key>.<log_ext>`: a hit.
fn cached_cubin(cache: &Cache, key: &str, cubin_ext: &str, log_ext: &str) -> Option<Artifact> {
    let cubin = cache.read(key, cubin_ext).filter(|c| !c.is_empty())?;
    Some(Artifact {
        cubin,
        log: cache.read_string(key, log_ext).unwrap_or_default(),
        cache_hit: true,
        compile_time: Duration::ZERO,
        jit: false,
        ptx: None,
    })
}

/// PTX as the driver's JIT takes it: NUL-terminated.
fn nul_terminated(source: &str) -> Vec<u8> {
    let mut image = Vec::with_capacity(source.len() + 1);
    image.extend_from_slice(source.as_bytes());
    image.push(0);
    image
}

/// Load PTX through the driver's JIT (`cuModuleLoadDataEx`, verbose, so the info log holds
/// ptxas's report): the module, the info log, and how long the compile took. `ptx` is
/// NUL-terminated.
fn jit_load(ptx: &[u8], kernel: &str, ordinal: usize) -> Result<(sys::CUmodule, String, Duration)> {
    const LOG_BYTES: usize = 64 * 1024;
    let mut info = vec![0u8; LOG_BYTES];
    let mut error = vec![0u8; LOG_BYTES];
    use sys::CUjit_option as O;
    let mut opts = [
        O::CU_JIT_INFO_LOG_BUFFER,
        O::CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
        O::CU_JIT_ERROR_LOG_BUFFER,
        O::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        O::CU_JIT_LOG_VERBOSE,
    ];
    // The driver reads sizes and flags from the pointer-sized slots themselves.
    let mut values: [*mut c_void; 5] = [
        info.as_mut_ptr() as *mut c_void,
        std::ptr::without_provenance_mut::<c_void>(LOG_BYTES),
        error.as_mut_ptr() as *mut c_void,
        std::ptr::without_provenance_mut::<c_void>(LOG_BYTES),
        std::ptr::without_provenance_mut::<c_void>(1),
    ];
    let text = |b: &[u8]| {
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        String::from_utf8_lossy(&b[..end]).into_owned()
    };
    let mut module = std::ptr::null_mut();
    let t = Instant::now();
    // SAFETY: `ptx` is NUL-terminated PTX that outlives the call; the option arrays have the
    // same length, and the log buffers are as large as their size slots say.
    let r = unsafe {
        sys::cuModuleLoadDataEx(
            &mut module,
            ptx.as_ptr() as *const c_void,
            opts.len() as u32,
            opts.as_mut_ptr(),
            values.as_mut_ptr(),
        )
    };
    let took = t.elapsed();
    if r != sys::CUresult::CUDA_SUCCESS {
        let mut log = text(&error);
        if log.trim().is_empty() {
            log = text(&info);
        }
        return Err(RuntimeError::Launch(format!(
            "the CUDA driver could not compile the PTX of kernel `{kernel}` on cuda:{ordinal} ({r:?}): {}",
            log.trim()
        )));
    }
    Ok((module, text(&info), took))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETMAXNREG_PTX: &str = ".version 8.0\n.target sm_90a\n.address_size 64\n.visible .entry k()\n.maxntid 384, 1, 1\n.maxnreg 168\n{\n  setmaxnreg.inc.sync.aligned.u32 232;\n  ret;\n}\n";

    /// Without ptxas, PTX that moves registers between warpgroups is left to the driver's
    /// JIT: no assembler runs, the artifact is the NUL-terminated PTX, and the cache keeps
    /// the PTX so that the next build of the key is a hit.
    #[test]
    fn whole_program_ptx_without_ptxas_is_left_to_the_driver_and_cached() {
        let dir = std::env::temp_dir().join(format!("tl-jit-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cache = Cache::at(&dir);
        let ptx = SETMAXNREG_PTX;
        let first = compile_cached_with(&cache, "k1", "k", ptx, "sm_90a", None)
            .expect("no assembler needed");
        assert!(first.jit && !first.cache_hit);
        assert_eq!(first.cubin.last(), Some(&0));
        assert_eq!(&first.cubin[..first.cubin.len() - 1], ptx.as_bytes());
        let again = compile_cached_with(&cache, "k1", "k", ptx, "sm_90a", None).expect("cached");
        assert!(again.jit && again.cache_hit);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// With ptxas (the installer provides it; required where the toolchain is), such PTX is
    /// assembled ahead of time into a cubin that keeps the register moves (`USETMAXREG`),
    /// cached under ptxas's tag, with the PTX kept for the driver should it not load the
    /// cubin; the next build is a hit of the cubin. A failing assembly leaves it to the
    /// driver.
    #[test]
    fn whole_program_ptx_is_assembled_by_ptxas_and_cached() {
        let Some(ptxas) = tl_nvrtc::Ptxas::global() else {
            assert!(
                !tl_nvrtc::testing::nvrtc_required(),
                "TILELANG_REQUIRE_NVRTC is set but no ptxas was found (scripts/install-cuda-tools.sh \
                 installs it; or set TILELANG_PTXAS)"
            );
            eprintln!("SKIPPED whole_program_ptx_is_assembled_by_ptxas_and_cached: no ptxas");
            return;
        };
        let dir = std::env::temp_dir().join(format!("tl-ptxas-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cache = Cache::at(&dir);
        let first = compile_cached_with(&cache, "k1", "k", SETMAXNREG_PTX, "sm_90a", Some(ptxas))
            .expect("assembles");
        assert!(!first.jit && !first.cache_hit);
        assert_eq!(&first.cubin[..4], b"\x7fELF", "a cubin");
        assert!(first.log.contains("Used"), "ptxas's report: {}", first.log);
        assert_eq!(
            first.ptx.as_deref().map(|p| &p[..p.len() - 1]),
            Some(SETMAXNREG_PTX.as_bytes())
        );
        if let Ok(sass) = tl_nvrtc::sass(&first.cubin) {
            assert!(sass.contains("USETMAXREG"), "setmaxnreg dropped:\n{sass}");
        } else {
            assert!(!tl_nvrtc::testing::cuobjdump_required(), "no cuobjdump");
        }
        let again = compile_cached_with(&cache, "k1", "k", SETMAXNREG_PTX, "sm_90a", Some(ptxas))
            .expect("cached");
        assert!(!again.jit && again.cache_hit && again.cubin == first.cubin);
        // PTX ptxas refuses goes to the driver (which reports the error when it loads it).
        let bad = SETMAXNREG_PTX.replace("ret;", "bogus.instruction;");
        let left = compile_cached_with(&cache, "k2", "k", &bad, "sm_90a", Some(ptxas))
            .expect("left to the driver");
        assert!(left.jit && left.ptx.is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn ptxas_report_is_parsed() {
        let log = "ptxas info    : Compiling entry function 'k' for 'sm_90a'\n\
                   ptxas info    : Function properties for k\n\
                   ptxas         .     24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n\
                   ptxas info    : Used 255 registers, 380 bytes cmem[0]";
        assert_eq!(ptxas_usage(log, "k"), Some((24, 8, 12)));
        assert_eq!(ptxas_usage(log, "other"), None);
        assert_eq!(ptxas_usage("", "k"), None);
    }

    #[test]
    fn launch_shape_limits() {
        assert!(check_launch_shape("k", [1, 1, 1], 128, 1024).is_ok());
        assert!(check_launch_shape("k", [0, 1, 1], 128, 1024).is_ok());
        let e = check_launch_shape("k", [1, 70000, 1], 128, 1024)
            .unwrap_err()
            .to_string();
        assert!(e.contains("grid dimension y") && e.contains("`k`"), "{e}");
        let e = check_launch_shape("k", [1, 1, 1], 512, 384)
            .unwrap_err()
            .to_string();
        assert!(e.contains("at most 384"), "{e}");
        assert!(check_launch_shape("k", [1, 1, 1], 0, 1024).is_err());
    }

    /// The cache half of `build_cuda` needs NVRTC but no GPU: a miss compiles and stores the
    /// cubin and log, a hit reads them back; a compile error keeps the source and its log.
    #[test]
    fn compile_cache_miss_then_hit() {
        if tl_nvrtc::testing::nvrtc_or_skip("compile_cache_miss_then_hit").is_none() {
            return;
        }
        let dir = std::env::temp_dir().join(format!("tl-cuda-cache-{}", std::process::id()));
        let cache = Cache::at(&dir);
        let src = crate::selftest::AXPY_SOURCE;
        let key = Cache::key(&["test", src]);
        let a = compile_cached(&cache, &key, "axpy", src, "sm_90a").unwrap();
        assert!(!a.cache_hit);
        assert_eq!(&a.cubin[..4], b"\x7fELF");
        let (_, stores, loads) = ptxas_usage(&a.log, "tl_kernel_axpy").expect("a ptxas report");
        assert_eq!((stores, loads), (0, 0), "{}", a.log);
        let b = compile_cached(&cache, &key, "axpy", src, "sm_90a").unwrap();
        assert!(b.cache_hit);
        assert_eq!(a.cubin, b.cubin);
        assert_eq!(a.log, b.log);

        let bad = "extern \"C\" __global__ void k() { undeclared_thing(); }";
        let key = Cache::key(&["test", bad]);
        match compile_cached(&cache, &key, "k", bad, "sm_80") {
            Err(RuntimeError::NvrtcFailed {
                kernel,
                source_path,
                log,
                ..
            }) => {
                assert_eq!(kernel, "k");
                assert!(log.contains("undeclared_thing"), "{log}");
                assert_eq!(std::fs::read_to_string(source_path).unwrap(), bad);
            }
            other => panic!("expected NvrtcFailed, got {:?}", other.err()),
        }
        let _ = std::fs::remove_dir_all(dir);
    }

    /// The built-in random and staging kernels and the self-test kernels compile for Ampere and Hopper
    /// without spills (needs NVRTC, not a GPU).
    #[test]
    fn builtin_kernels_compile() {
        if tl_nvrtc::testing::nvrtc_or_skip("builtin_kernels_compile").is_none() {
            return;
        }
        for (src, entry) in [
            (crate::rng::CUDA_SOURCE, "tl_rand"),
            (crate::pitched::CUDA_SOURCE, crate::pitched::ENTRY),
            (crate::selftest::AXPY_SOURCE, "tl_kernel_axpy"),
            (crate::selftest::REVERSE_SOURCE, "tl_kernel_reverse"),
        ] {
            for arch in ["sm_80", "sm_90a"] {
                let c = nvrtc::compile(src, arch).unwrap_or_else(|e| panic!("{arch}: {e}"));
                let (_, stores, loads) = ptxas_usage(&c.log, entry).expect("a ptxas report");
                assert_eq!((stores, loads), (0, 0), "{arch}: {}", c.log);
            }
        }
    }

    #[test]
    fn no_device_is_an_error_not_a_panic() {
        if cuda_probe::device_count() == 0 {
            let e = device(0).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.contains("cuda:0"), "{e}");
        }
    }
}
