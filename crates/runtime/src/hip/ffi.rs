//! Loading ROCm's HIP runtime (`libamdhip64.so`) at run time, and the HIP calls the backend
//! makes. Every `unsafe` block of the HIP backend is in this file.
//!
//! The library is opened with `libloading` (nothing links against ROCm, so the crate builds and
//! runs on machines without it) and every entry point is resolved once, up front: a library
//! that lacks one is reported as unusable, naming the symbol, rather than failing later.
//!
//! The signatures below are those of ROCm 6.x/7.x's `hip/hip_runtime_api.h` (AMD platform);
//! they have not been exercised against a real ROCm install, only against the mock in
//! `tests/mock_hip/`. `hipError_t`, `hipMemcpyKind` and `hipDeviceAttribute_t` are C enums,
//! passed as `int`; `hipModule_t`, `hipFunction_t`, `hipEvent_t` and `hipStream_t` are opaque
//! pointers; `hipDeviceptr_t` is `void*`.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::path::PathBuf;
use std::sync::OnceLock;

use libloading::Library;

/// A `hipError_t` value (`hipSuccess` is 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Code(pub c_int);

/// `hipErrorNoDevice`: what `hipGetDeviceCount` returns on a machine without an AMD GPU.
pub(crate) const NO_DEVICE: c_int = 100;

type R = c_int;
type Handle = *mut c_void;

// `hipMemcpyKind` values.
const HOST_TO_DEVICE: c_int = 1;
const DEVICE_TO_HOST: c_int = 2;
const DEVICE_TO_DEVICE: c_int = 3;

/// `hipDeviceProp_tR0600`, the device-properties struct of ROCm 6.0 and later (the `R0600`
/// suffix freezes its layout: `hipGetDeviceProperties` is a macro for
/// `hipGetDevicePropertiesR0600`). Field for field as in `hip_runtime_api.h`; runs of fields the
/// runtime does not read are grouped into arrays of the same type, which keeps every offset.
/// The sizes and offsets asserted below (1472 bytes; `totalGlobalMem` at 288, `gcnArchName` at
/// 1160) are the ones ROCm's own header gives on x86-64 Linux.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct DevicePropR0600 {
    pub name: [c_char; 256],
    uuid: [c_char; 16],
    luid: [c_char; 8],
    luid_device_node_mask: c_uint,
    pub total_global_mem: usize,
    pub shared_mem_per_block: usize,
    regs_per_block: c_int,
    pub warp_size: c_int,
    mem_pitch: usize,
    pub max_threads_per_block: c_int,
    max_threads_dim: [c_int; 3],
    pub max_grid_size: [c_int; 3],
    clock_rate: c_int,
    total_const_mem: usize,
    major: c_int,
    minor: c_int,
    texture_alignment: usize,
    texture_pitch_alignment: usize,
    device_overlap: c_int,
    pub multi_processor_count: c_int,
    /// kernelExecTimeoutEnabled, integrated, canMapHostMemory, computeMode, then the texture
    /// and surface limits (maxTexture1D .. maxSurfaceCubemapLayered[2]): 44 ints.
    misc_and_texture_limits: [c_int; 44],
    surface_alignment: usize,
    /// concurrentKernels, ECCEnabled, pciBusID, pciDeviceID, pciDomainID, tccDriver,
    /// asyncEngineCount, unifiedAddressing, memoryClockRate, memoryBusWidth.
    misc2: [c_int; 10],
    pub l2_cache_size: c_int,
    /// persistingL2CacheMaxSize, maxThreadsPerMultiProcessor, streamPrioritiesSupported,
    /// globalL1CacheSupported, localL1CacheSupported.
    misc3: [c_int; 5],
    shared_mem_per_multiprocessor: usize,
    /// regsPerMultiprocessor .. cooperativeMultiDeviceLaunch.
    misc4: [c_int; 12],
    shared_mem_per_block_optin: usize,
    /// pageableMemoryAccessUsesHostPageTables .. accessPolicyMaxWindowSize.
    misc5: [c_int; 4],
    reserved_shared_mem_per_block: usize,
    /// hostRegisterSupported .. unifiedFunctionPointers (13 ints and unsigned ints).
    misc6: [c_int; 13],
    reserved: [c_int; 63],
    hip_reserved: [c_int; 32],
    pub gcn_arch_name: [c_char; 256],
    max_shared_memory_per_multiprocessor: usize,
    clock_instruction_rate: c_int,
    /// `hipDeviceArch_t`: 17 one-bit `unsigned` fields, one 32-bit word.
    arch: c_uint,
    hdp_mem_flush_cntl: usize,
    hdp_reg_flush_cntl: usize,
    /// cooperativeMultiDeviceUnmatched{Func,GridDim,BlockDim,SharedMem}, isLargeBar,
    /// asicRevision.
    tail: [c_int; 6],
}

const _: () = {
    assert!(std::mem::size_of::<DevicePropR0600>() == 1472);
    assert!(std::mem::align_of::<DevicePropR0600>() == 8);
    assert!(std::mem::offset_of!(DevicePropR0600, total_global_mem) == 288);
    assert!(std::mem::offset_of!(DevicePropR0600, multi_processor_count) == 388);
    assert!(std::mem::offset_of!(DevicePropR0600, l2_cache_size) == 616);
    assert!(std::mem::offset_of!(DevicePropR0600, gcn_arch_name) == 1160);
};

/// What `hipGetDevicePropertiesR0600` writes into, with slack after it: should a runtime ever
/// write more than the 1472 bytes of the R0600 layout, it lands in the slack, not past the
/// buffer.
#[repr(C)]
struct PropBuf {
    props: DevicePropR0600,
    _slack: [u8; 1024],
}

type FnInit = unsafe extern "C" fn(c_uint) -> R;
type FnIntOut = unsafe extern "C" fn(*mut c_int) -> R;
type FnSetDevice = unsafe extern "C" fn(c_int) -> R;
type FnGetProps = unsafe extern "C" fn(*mut DevicePropR0600, c_int) -> R;
type FnErrStr = unsafe extern "C" fn(R) -> *const c_char;
type FnMalloc = unsafe extern "C" fn(*mut *mut c_void, usize) -> R;
type FnFree = unsafe extern "C" fn(*mut c_void) -> R;
type FnMemcpy = unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int) -> R;
type FnMemset = unsafe extern "C" fn(*mut c_void, c_int, usize) -> R;
type FnMemsetD16 = unsafe extern "C" fn(*mut c_void, u16, usize) -> R;
type FnMemsetD32 = unsafe extern "C" fn(*mut c_void, c_int, usize) -> R;
type FnMemGetInfo = unsafe extern "C" fn(*mut usize, *mut usize) -> R;
type FnModuleLoadData = unsafe extern "C" fn(*mut Handle, *const c_void) -> R;
type FnModuleGetFunction = unsafe extern "C" fn(*mut Handle, Handle, *const c_char) -> R;
type FnModuleUnload = unsafe extern "C" fn(Handle) -> R;
type FnLaunch = unsafe extern "C" fn(
    Handle,           // hipFunction_t f
    c_uint,           // gridDimX
    c_uint,           // gridDimY
    c_uint,           // gridDimZ
    c_uint,           // blockDimX
    c_uint,           // blockDimY
    c_uint,           // blockDimZ
    c_uint,           // sharedMemBytes
    Handle,           // hipStream_t stream
    *mut *mut c_void, // void** kernelParams
    *mut *mut c_void, // void** extra
) -> R;
type FnEventCreate = unsafe extern "C" fn(*mut Handle) -> R;
type FnEventRecord = unsafe extern "C" fn(Handle, Handle) -> R;
type FnEventOne = unsafe extern "C" fn(Handle) -> R;
type FnEventElapsed = unsafe extern "C" fn(*mut f32, Handle, Handle) -> R;
type FnVoid = unsafe extern "C" fn() -> R;

/// The HIP entry points, copied out of the library (which [`Hip`] keeps loaded).
#[derive(Clone, Copy)]
struct Api {
    init: FnInit,
    get_device_count: FnIntOut,
    runtime_get_version: FnIntOut,
    set_device: FnSetDevice,
    get_device_properties: FnGetProps,
    get_error_name: FnErrStr,
    get_error_string: FnErrStr,
    malloc: FnMalloc,
    free: FnFree,
    memcpy: FnMemcpy,
    memset: FnMemset,
    memset_d16: FnMemsetD16,
    memset_d32: FnMemsetD32,
    mem_get_info: FnMemGetInfo,
    module_load_data: FnModuleLoadData,
    module_get_function: FnModuleGetFunction,
    module_unload: FnModuleUnload,
    module_launch_kernel: FnLaunch,
    event_create: FnEventCreate,
    event_record: FnEventRecord,
    event_synchronize: FnEventOne,
    event_elapsed_time: FnEventElapsed,
    event_destroy: FnEventOne,
    device_synchronize: FnVoid,
}

/// A loaded HIP runtime that initialized and reported at least one device.
pub(crate) struct Hip {
    api: Api,
    /// Where the library was loaded from (a path, or the soname the loader resolved).
    pub path: String,
    /// `hipRuntimeGetVersion` (e.g. 60443484 for ROCm 6.4), 0 when it failed.
    pub runtime_version: i32,
    pub device_count: usize,
    // Kept loaded for as long as `api` may be called: the probe is never dropped.
    _lib: Library,
}

// SAFETY: `Hip` holds plain function pointers into a library that stays loaded; the HIP runtime
// API is thread-safe (the current device is per host thread, and every call site sets it).
unsafe impl Send for Hip {}
// SAFETY: as above; nothing in `Hip` changes after loading.
unsafe impl Sync for Hip {}

/// A loaded module (`hipModule_t`).
pub(crate) struct ModuleHandle(Handle);
/// A kernel of a loaded module (`hipFunction_t`).
pub(crate) struct FunctionHandle(Handle);
/// A timing event (`hipEvent_t`).
pub(crate) struct EventHandle(Handle);

// SAFETY: the handles are opaque tokens of the HIP runtime, usable from any host thread.
unsafe impl Send for ModuleHandle {}
// SAFETY: as above; the runtime synchronizes its own use of them.
unsafe impl Sync for ModuleHandle {}
// SAFETY: as for ModuleHandle.
unsafe impl Send for FunctionHandle {}
// SAFETY: as for ModuleHandle.
unsafe impl Sync for FunctionHandle {}
// SAFETY: as for ModuleHandle.
unsafe impl Send for EventHandle {}

/// The environment variable naming the library to load.
pub const LIB_ENV: &str = "TILELANG_HIP_LIB";

/// Sonames the dynamic loader is asked for when no path is given: the development symlink,
/// then ROCm 7's and ROCm 6's runtime sonames.
const SONAMES: &[&str] = &["libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6"];

/// Where to look for the library, in order, with how each candidate was chosen: only
/// `TILELANG_HIP_LIB` when it is set (an explicit choice is never silently replaced); else
/// `$ROCM_PATH/lib` (the install the user pointed at), `/opt/rocm/lib` (the default install),
/// then the loader's search path (`LD_LIBRARY_PATH`, `ld.so.cache`).
pub(crate) fn candidates() -> Vec<(PathBuf, String)> {
    if let Some(p) = std::env::var_os(LIB_ENV).filter(|p| !p.is_empty()) {
        return vec![(PathBuf::from(p), LIB_ENV.to_string())];
    }
    let mut out = vec![];
    if let Some(root) = std::env::var_os("ROCM_PATH").filter(|p| !p.is_empty()) {
        out.push((
            PathBuf::from(root).join("lib/libamdhip64.so"),
            "$ROCM_PATH/lib".to_string(),
        ));
    }
    out.push((
        PathBuf::from("/opt/rocm/lib/libamdhip64.so"),
        "/opt/rocm/lib".to_string(),
    ));
    for s in SONAMES {
        out.push((PathBuf::from(s), "the loader path".to_string()));
    }
    out
}

fn open_library() -> Result<(Library, String), String> {
    let explicit = std::env::var_os(LIB_ENV).is_some_and(|p| !p.is_empty());
    let mut tried = vec![];
    for (path, how) in candidates() {
        if path.is_absolute() && !path.exists() {
            tried.push(format!("{} ({how}): no such file", path.display()));
            continue;
        }
        // SAFETY: loading libamdhip64 runs its initializers, which have no preconditions.
        match unsafe { Library::new(path.as_os_str()) } {
            Ok(lib) => return Ok((lib, path.display().to_string())),
            Err(e) => tried.push(format!("{} ({how}): {e}", path.display())),
        }
    }
    Err(if explicit {
        format!(
            "ROCm's HIP runtime (libamdhip64.so) could not be loaded from {LIB_ENV}: {}. Point \
             {LIB_ENV} at ROCm's libamdhip64.so (ROCm 6.0 or newer), or unset it to search \
             $ROCM_PATH/lib, /opt/rocm/lib and the loader path",
            tried.join("; ")
        )
    } else {
        format!(
            "ROCm's HIP runtime (libamdhip64.so) was not found; tried {}. Install ROCm 6.0 or \
             newer, or set {LIB_ENV} to the path of libamdhip64.so (or ROCM_PATH to ROCm's root)",
            tried.join("; ")
        )
    })
}

/// Resolve the entry point `name` (NUL-terminated) as a function of type `F`.
///
/// # Safety
/// `F` must be the function-pointer type `hip_runtime_api.h` declares for `name`.
unsafe fn symbol<F: Copy>(lib: &Library, name: &str, path: &str) -> Result<F, String> {
    // SAFETY: the caller vouches for the signature.
    match unsafe { lib.get::<F>(name.as_bytes()) } {
        Ok(s) => Ok(*s),
        Err(_) => Err(format!(
            "{path} lacks {}: it is not ROCm's HIP runtime (libamdhip64.so) of ROCm 6.0 or newer, which exports it; point {LIB_ENV} at that library or unset it",
            name.trim_end_matches('\0')
        )),
    }
}

/// What loading and initializing HIP gave: the runtime, or why there is none.
pub(crate) fn load() -> Result<Hip, String> {
    if let Ok(v) = std::env::var("TILELANG_DISABLE_HIP") {
        if !v.is_empty() && v != "0" {
            return Err("TILELANG_DISABLE_HIP is set".into());
        }
    }
    let (lib, path) = open_library()?;
    macro_rules! sym {
        ($name:literal) => {
            // SAFETY: each field's type is the signature hip_runtime_api.h declares for the
            // symbol (see the type aliases above).
            unsafe { symbol(&lib, concat!($name, "\0"), &path)? }
        };
    }
    let api = Api {
        init: sym!("hipInit"),
        get_device_count: sym!("hipGetDeviceCount"),
        runtime_get_version: sym!("hipRuntimeGetVersion"),
        set_device: sym!("hipSetDevice"),
        get_device_properties: sym!("hipGetDevicePropertiesR0600"),
        get_error_name: sym!("hipGetErrorName"),
        get_error_string: sym!("hipGetErrorString"),
        malloc: sym!("hipMalloc"),
        free: sym!("hipFree"),
        memcpy: sym!("hipMemcpy"),
        memset: sym!("hipMemset"),
        memset_d16: sym!("hipMemsetD16"),
        memset_d32: sym!("hipMemsetD32"),
        mem_get_info: sym!("hipMemGetInfo"),
        module_load_data: sym!("hipModuleLoadData"),
        module_get_function: sym!("hipModuleGetFunction"),
        module_unload: sym!("hipModuleUnload"),
        module_launch_kernel: sym!("hipModuleLaunchKernel"),
        event_create: sym!("hipEventCreate"),
        event_record: sym!("hipEventRecord"),
        event_synchronize: sym!("hipEventSynchronize"),
        event_elapsed_time: sym!("hipEventElapsedTime"),
        event_destroy: sym!("hipEventDestroy"),
        device_synchronize: sym!("hipDeviceSynchronize"),
    };
    let mut hip = Hip {
        api,
        path,
        runtime_version: 0,
        device_count: 0,
        _lib: lib,
    };
    // SAFETY: hipInit takes flags (must be 0) and may be called any number of times.
    let rc = unsafe { (hip.api.init)(0) };
    if rc == NO_DEVICE {
        return Err(format!("{}: hipInit reports no AMD GPU", hip.path));
    }
    if rc != 0 {
        return Err(format!(
            "{}: hipInit failed: {}",
            hip.path,
            hip.describe(Code(rc))
        ));
    }
    let mut v: c_int = 0;
    // SAFETY: a valid out-pointer for one int.
    if unsafe { (hip.api.runtime_get_version)(&mut v) } == 0 {
        hip.runtime_version = v;
    }
    let mut n: c_int = 0;
    // SAFETY: a valid out-pointer for one int.
    let rc = unsafe { (hip.api.get_device_count)(&mut n) };
    if rc == NO_DEVICE || (rc == 0 && n <= 0) {
        return Err(format!("{}: the HIP runtime reports no AMD GPU", hip.path));
    }
    if rc != 0 {
        return Err(format!(
            "{}: hipGetDeviceCount failed: {}",
            hip.path,
            hip.describe(Code(rc))
        ));
    }
    hip.device_count = n as usize;
    Ok(hip)
}

fn check(rc: R) -> Result<(), Code> {
    if rc == 0 {
        Ok(())
    } else {
        Err(Code(rc))
    }
}

fn c_str(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: hipGetErrorName/hipGetErrorString return static NUL-terminated strings.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// A fixed-size C string field, up to its first NUL.
fn field_str(f: &[c_char]) -> String {
    let bytes: Vec<u8> = f
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

impl DevicePropR0600 {
    pub fn name_str(&self) -> String {
        field_str(&self.name)
    }
    pub fn gcn_arch_name_str(&self) -> String {
        field_str(&self.gcn_arch_name)
    }
}

impl Hip {
    /// `hipErrorOutOfMemory: out of memory (code 2)`, from the runtime's own tables.
    pub fn describe(&self, code: Code) -> String {
        // SAFETY: both functions accept any hipError_t value and return a static string.
        let name = c_str(unsafe { (self.api.get_error_name)(code.0) });
        // SAFETY: as above.
        let text = c_str(unsafe { (self.api.get_error_string)(code.0) });
        match (name, text) {
            (Some(n), Some(t)) if n != t => format!("{n}: {t} (code {})", code.0),
            (Some(n), _) | (None, Some(n)) => format!("{n} (code {})", code.0),
            (None, None) => format!("hipError_t {}", code.0),
        }
    }

    /// Make `ordinal` the calling thread's current device (HIP calls act on it).
    pub fn set_device(&self, ordinal: usize) -> Result<(), Code> {
        // SAFETY: takes a device index by value; an invalid one is an error return.
        check(unsafe { (self.api.set_device)(ordinal as c_int) })
    }

    pub fn properties(&self, ordinal: usize) -> Result<DevicePropR0600, Code> {
        // SAFETY: all-zero bytes are a valid value of this plain-old-data struct (integers and
        // arrays of them).
        let mut buf: Box<PropBuf> = Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: the pointer is valid for the R0600 struct and 1 KiB beyond it.
        check(unsafe { (self.api.get_device_properties)(&mut buf.props, ordinal as c_int) })?;
        Ok(buf.props)
    }

    /// Free and total memory of the current device, in bytes.
    pub fn mem_get_info(&self) -> Result<(usize, usize), Code> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: two valid out-pointers.
        check(unsafe { (self.api.mem_get_info)(&mut free, &mut total) })?;
        Ok((free, total))
    }

    /// `bytes` (at least 1) of device memory on the current device; its address.
    pub fn malloc(&self, bytes: usize) -> Result<u64, Code> {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; the memory belongs to the caller until `free`.
        check(unsafe { (self.api.malloc)(&mut p, bytes.max(1)) })?;
        Ok(p as usize as u64)
    }

    /// Free memory from [`malloc`](Self::malloc). Callers (`HipBuf`'s drop) free each address
    /// once.
    pub fn free(&self, ptr: u64) -> Result<(), Code> {
        // SAFETY: `ptr` came from hipMalloc and is not used after this (the caller's
        // invariant); hipFree waits for work that still uses it.
        check(unsafe { (self.api.free)(ptr as usize as *mut c_void) })
    }

    /// Copy `src` to device address `dst`. Callers check that the allocation at `dst` holds
    /// `src.len()` bytes.
    pub fn memcpy_htod(&self, dst: u64, src: &[u8]) -> Result<(), Code> {
        // SAFETY: `src` is valid for its length; hipMemcpy from pageable host memory returns
        // once the data has been read.
        check(unsafe {
            (self.api.memcpy)(
                dst as usize as *mut c_void,
                src.as_ptr() as *const c_void,
                src.len(),
                HOST_TO_DEVICE,
            )
        })
    }

    /// Copy `dst.len()` bytes from device address `src` into `dst` (blocking: ordered after the
    /// work queued on the null stream before it). Callers check the allocation's size.
    pub fn memcpy_dtoh(&self, dst: &mut [u8], src: u64) -> Result<(), Code> {
        // SAFETY: `dst` is valid and exclusively borrowed for its length; hipMemcpy to host
        // memory completes before it returns.
        check(unsafe {
            (self.api.memcpy)(
                dst.as_mut_ptr() as *mut c_void,
                src as usize as *const c_void,
                dst.len(),
                DEVICE_TO_HOST,
            )
        })
    }

    /// Copy `bytes` between device allocations of at least that size.
    pub fn memcpy_dtod(&self, dst: u64, src: u64, bytes: usize) -> Result<(), Code> {
        // SAFETY: device addresses only; the runtime validates them against its allocations.
        check(unsafe {
            (self.api.memcpy)(
                dst as usize as *mut c_void,
                src as usize as *const c_void,
                bytes,
                DEVICE_TO_DEVICE,
            )
        })
    }

    /// Set `bytes` bytes at device address `dst` to `value`.
    pub fn memset_d8(&self, dst: u64, value: u8, bytes: usize) -> Result<(), Code> {
        // SAFETY: device address only; callers keep `bytes` within the allocation.
        check(unsafe { (self.api.memset)(dst as usize as *mut c_void, value as c_int, bytes) })
    }

    /// Set `count` 16-bit words at device address `dst` to `value`.
    pub fn memset_d16(&self, dst: u64, value: u16, count: usize) -> Result<(), Code> {
        // SAFETY: device address only; callers keep `2 * count` within the allocation.
        check(unsafe { (self.api.memset_d16)(dst as usize as *mut c_void, value, count) })
    }

    /// Set `count` 32-bit words at device address `dst` to `value`.
    pub fn memset_d32(&self, dst: u64, value: u32, count: usize) -> Result<(), Code> {
        // SAFETY: device address only; callers keep `4 * count` within the allocation. The
        // `int` parameter takes the word's bits.
        check(unsafe { (self.api.memset_d32)(dst as usize as *mut c_void, value as c_int, count) })
    }

    /// Load a code object (an AMDGPU ELF, as clang links it) on the current device.
    pub fn module_load_data(&self, image: &[u8]) -> Result<ModuleHandle, Code> {
        // The runtime parses the image in place; give it an 8-byte-aligned copy, as ELF wants.
        let mut aligned: Vec<u64> = vec![0; image.len().div_ceil(8) + 1];
        for (dst, src) in aligned.iter_mut().zip(image.chunks(8)) {
            let mut w = [0u8; 8];
            w[..src.len()].copy_from_slice(src);
            *dst = u64::from_le_bytes(w);
        }
        let mut m: Handle = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; `aligned` holds the whole image (little-endian words
        // reproduce its bytes on this little-endian host) and outlives the call, and the runtime
        // copies what it keeps.
        check(unsafe { (self.api.module_load_data)(&mut m, aligned.as_ptr() as *const c_void) })?;
        Ok(ModuleHandle(m))
    }

    pub fn module_get_function(
        &self,
        module: &ModuleHandle,
        name: &CStr,
    ) -> Result<FunctionHandle, Code> {
        let mut f: Handle = std::ptr::null_mut();
        // SAFETY: a valid out-pointer, a loaded module and a NUL-terminated name.
        check(unsafe { (self.api.module_get_function)(&mut f, module.0, name.as_ptr()) })?;
        Ok(FunctionHandle(f))
    }

    /// Unload a module; its functions must not be launched afterwards (`HipKernel` owns both
    /// and unloads on drop).
    pub fn module_unload(&self, module: &ModuleHandle) -> Result<(), Code> {
        // SAFETY: a module from module_load_data, unloaded once by its owner.
        check(unsafe { (self.api.module_unload)(module.0) })
    }

    /// `hipModuleLaunchKernel` on `stream` (null: the null stream) with no dynamic LDS and no
    /// `extra`:
    /// `params` holds one pointer per kernel parameter, to a value of the parameter's type
    /// (the runtime copies the values at launch, taking each one's size from the code
    /// object's metadata).
    pub fn launch(
        &self,
        f: &FunctionHandle,
        grid: [u32; 3],
        block: [u32; 3],
        stream: *mut c_void,
        params: &mut [*mut c_void],
    ) -> Result<(), Code> {
        // SAFETY: `f` belongs to a loaded module; `params` points at live slots laid out per
        // the kernel ABI (`exec::ParamBlock`) that outlive the call; a null `extra` is valid,
        // and `stream` is null or a stream of this device (the caller's contract).
        check(unsafe {
            (self.api.module_launch_kernel)(
                f.0,
                grid[0],
                grid[1],
                grid[2],
                block[0],
                block[1],
                block[2],
                0,
                stream,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        })
    }

    pub fn event_create(&self) -> Result<EventHandle, Code> {
        let mut e: Handle = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        check(unsafe { (self.api.event_create)(&mut e) })?;
        Ok(EventHandle(e))
    }

    /// Record `e` on the null stream.
    pub fn event_record(&self, e: &EventHandle) -> Result<(), Code> {
        // SAFETY: a live event; the null stream is valid.
        check(unsafe { (self.api.event_record)(e.0, std::ptr::null_mut()) })
    }

    pub fn event_synchronize(&self, e: &EventHandle) -> Result<(), Code> {
        // SAFETY: a live, recorded event.
        check(unsafe { (self.api.event_synchronize)(e.0) })
    }

    /// Milliseconds between two completed events.
    pub fn event_elapsed_ms(&self, start: &EventHandle, end: &EventHandle) -> Result<f32, Code> {
        let mut ms: f32 = 0.0;
        // SAFETY: a valid out-pointer and two live events.
        check(unsafe { (self.api.event_elapsed_time)(&mut ms, start.0, end.0) })?;
        Ok(ms)
    }

    /// Destroy an event (its owner does, once).
    pub fn event_destroy(&self, e: &EventHandle) -> Result<(), Code> {
        // SAFETY: a live event, destroyed once by its owner.
        check(unsafe { (self.api.event_destroy)(e.0) })
    }

    /// Wait for all work on the current device.
    pub fn device_synchronize(&self) -> Result<(), Code> {
        // SAFETY: no arguments.
        check(unsafe { (self.api.device_synchronize)() })
    }
}

/// The loaded runtime, or why there is none: computed once per process, never panics.
pub(crate) fn get() -> &'static Result<Hip, String> {
    static HIP: OnceLock<Result<Hip, String>> = OnceLock::new();
    HIP.get_or_init(load)
}
