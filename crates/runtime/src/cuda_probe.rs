//! Finding CUDA GPUs without requiring CUDA.
//!
//! cudarc resolves every driver symbol the first time it touches `libcuda` and panics when the
//! library is missing, so nothing here goes through cudarc: the probe opens the driver with
//! `libloading`, calls `cuInit`, `cuDriverGetVersion` and `cuDeviceGetCount`, and answers device
//! queries (name, compute capability, attributes) the same way. Only when the probe has found a
//! usable driver and device does [`crate::cuda`] hand the driver to cudarc. The result is
//! computed once per process.

use std::ffi::{c_char, c_int, c_uint};
use std::sync::OnceLock;

use libloading::Library;
use tl_target::Target;

use crate::error::{Result, RuntimeError};

/// Oldest driver the CUDA backend accepts: cudarc is built at the CUDA 12.0 binding level and
/// resolves all of that level's symbols when it first loads the driver.
pub const MIN_DRIVER_VERSION: i32 = 12000;

/// Library names tried, in order. They are sonames (not paths) on purpose: cudarc loads the
/// driver by soname too, so a library found here is one cudarc will find.
#[cfg(not(windows))]
pub const LIBCUDA_NAMES: &[&str] = &["libcuda.so.1", "libcuda.so"];
#[cfg(windows)]
pub const LIBCUDA_NAMES: &[&str] = &["nvcuda.dll"];

type CuInit = unsafe extern "C" fn(c_uint) -> c_int;
type CuIntOut = unsafe extern "C" fn(*mut c_int) -> c_int;
type CuDeviceGet = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
type CuDeviceGetName = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;
type CuDeviceGetAttribute = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;
type CuDeviceTotalMem = unsafe extern "C" fn(*mut usize, c_int) -> c_int;

/// Device attributes the runtime reads (values of `CUdevice_attribute`).
pub mod attr {
    pub const MAX_THREADS_PER_BLOCK: i32 = 1;
    pub const MAX_SHARED_MEMORY_PER_BLOCK: i32 = 8;
    pub const MULTIPROCESSOR_COUNT: i32 = 16;
    pub const L2_CACHE_SIZE: i32 = 38;
    pub const COMPUTE_CAPABILITY_MAJOR: i32 = 75;
    pub const COMPUTE_CAPABILITY_MINOR: i32 = 76;
    pub const MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: i32 = 97;
    pub const CLOCK_RATE_KHZ: i32 = 13;
}

/// The loaded driver's entry points used for probing.
struct Driver {
    _lib: Library,
    device_get: CuDeviceGet,
    device_get_name: CuDeviceGetName,
    device_get_attribute: CuDeviceGetAttribute,
    device_total_mem: CuDeviceTotalMem,
}

/// What the probe found.
pub struct Probe {
    driver: Option<Driver>,
    /// `cuDriverGetVersion` (e.g. 12080 for 12.8), when the driver loaded.
    pub driver_version: Option<i32>,
    /// Usable devices (0 when the driver is missing, too old or reports none).
    pub device_count: usize,
    /// Why there are no usable devices, when there are none.
    pub reason: Option<String>,
}

// SAFETY: `Driver` holds a library handle and plain function pointers into it; the CUDA driver
// API functions used here are documented as thread-safe.
unsafe impl Send for Probe {}
// SAFETY: as above; the probe is immutable after construction.
unsafe impl Sync for Probe {}

fn load_driver() -> std::result::Result<(Library, &'static str), String> {
    let mut errors = vec![];
    for name in LIBCUDA_NAMES {
        // SAFETY: loading the CUDA driver runs its initializers, which have no preconditions.
        match unsafe { Library::new(name) } {
            Ok(lib) => return Ok((lib, name)),
            Err(e) => errors.push(e.to_string()),
        }
    }
    Err(format!(
        "the CUDA driver library could not be loaded ({})",
        errors.join("; ")
    ))
}

fn run_probe() -> Probe {
    let none = |reason: String, version: Option<i32>| Probe {
        driver: None,
        driver_version: version,
        device_count: 0,
        reason: Some(reason),
    };
    if let Ok(v) = std::env::var("TILELANG_DISABLE_CUDA") {
        if !v.is_empty() && v != "0" {
            return none("TILELANG_DISABLE_CUDA is set".into(), None);
        }
    }
    let (lib, name) = match load_driver() {
        Ok(x) => x,
        Err(e) => return none(e, None),
    };
    macro_rules! sym {
        ($t:ty, $n:literal) => {
            // SAFETY: the symbol has this C signature in every CUDA driver (cuda.h).
            match unsafe { lib.get::<$t>($n) } {
                Ok(f) => *f,
                Err(e) => return none(format!("{name} lacks {}: {e}", stringify!($n)), None),
            }
        };
    }
    let init: CuInit = sym!(CuInit, b"cuInit\0");
    let get_version: CuIntOut = sym!(CuIntOut, b"cuDriverGetVersion\0");
    let get_count: CuIntOut = sym!(CuIntOut, b"cuDeviceGetCount\0");
    let device_get: CuDeviceGet = sym!(CuDeviceGet, b"cuDeviceGet\0");
    let device_get_name: CuDeviceGetName = sym!(CuDeviceGetName, b"cuDeviceGetName\0");
    let device_get_attribute: CuDeviceGetAttribute =
        sym!(CuDeviceGetAttribute, b"cuDeviceGetAttribute\0");
    let device_total_mem: CuDeviceTotalMem = sym!(CuDeviceTotalMem, b"cuDeviceTotalMem_v2\0");

    let mut version: c_int = 0;
    // SAFETY: the out-pointer is valid for one int.
    let rc = unsafe { get_version(&mut version) };
    if rc != 0 {
        return none(
            format!("cuDriverGetVersion failed with CUDA error {rc}"),
            None,
        );
    }
    if version < MIN_DRIVER_VERSION {
        return none(
            format!(
                "the CUDA driver supports CUDA {}.{}, older than the {}.{} this build needs; update the NVIDIA driver",
                version / 1000,
                (version % 1000) / 10,
                MIN_DRIVER_VERSION / 1000,
                (MIN_DRIVER_VERSION % 1000) / 10
            ),
            Some(version),
        );
    }
    // SAFETY: cuInit takes flags (must be 0) and may be called any number of times.
    let rc = unsafe { init(0) };
    if rc != 0 {
        return none(
            format!(
                "cuInit failed with CUDA error {rc} ({})",
                crate::cuda_probe::error_name(rc)
            ),
            Some(version),
        );
    }
    let mut count: c_int = 0;
    // SAFETY: the out-pointer is valid for one int.
    let rc = unsafe { get_count(&mut count) };
    if rc != 0 || count <= 0 {
        return none(
            if rc != 0 {
                format!("cuDeviceGetCount failed with CUDA error {rc}")
            } else {
                "the CUDA driver reports no devices".into()
            },
            Some(version),
        );
    }
    Probe {
        driver: Some(Driver {
            _lib: lib,
            device_get,
            device_get_name,
            device_get_attribute,
            device_total_mem,
        }),
        driver_version: Some(version),
        device_count: count as usize,
        reason: None,
    }
}

/// The probe's result (computed on first use, never panics).
pub fn probe() -> &'static Probe {
    static P: OnceLock<Probe> = OnceLock::new();
    P.get_or_init(run_probe)
}

/// Usable CUDA devices; 0 without a driver or GPU.
pub fn device_count() -> usize {
    probe().device_count
}

/// The error for `cuda:N` when it is not usable, or Ok when it is.
pub fn check(ordinal: usize) -> Result<()> {
    let p = probe();
    if ordinal < p.device_count {
        return Ok(());
    }
    Err(RuntimeError::DeviceUnavailable {
        device: format!("cuda:{ordinal}"),
        reason: match &p.reason {
            Some(r) => r.clone(),
            None => format!(
                "only {} CUDA device{} present",
                p.device_count,
                if p.device_count == 1 { " is" } else { "s are" }
            ),
        },
    })
}

fn driver_for(ordinal: usize) -> Result<(&'static Driver, c_int)> {
    check(ordinal)?;
    let d = probe()
        .driver
        .as_ref()
        .ok_or_else(|| RuntimeError::DeviceUnavailable {
            device: format!("cuda:{ordinal}"),
            reason: "the CUDA driver is not loaded".into(),
        })?;
    let mut dev: c_int = 0;
    // SAFETY: the ordinal is below the device count; the out-pointer is valid.
    let rc = unsafe { (d.device_get)(&mut dev, ordinal as c_int) };
    if rc != 0 {
        return Err(cuda_err(format!("cuDeviceGet({ordinal})"), rc));
    }
    Ok((d, dev))
}

fn cuda_err(what: String, rc: c_int) -> RuntimeError {
    RuntimeError::Cuda {
        what,
        error: format!("{} (code {rc})", error_name(rc)),
    }
}

/// One device attribute (`CUdevice_attribute` value, see [`attr`]).
pub fn attribute(ordinal: usize, attribute: i32) -> Result<i32> {
    let (d, dev) = driver_for(ordinal)?;
    let mut v: c_int = 0;
    // SAFETY: `dev` is a valid device handle; the out-pointer is valid.
    let rc = unsafe { (d.device_get_attribute)(&mut v, attribute, dev) };
    if rc != 0 {
        return Err(cuda_err(
            format!("cuDeviceGetAttribute({attribute}) on cuda:{ordinal}"),
            rc,
        ));
    }
    Ok(v)
}

/// The marketing name, e.g. `NVIDIA H100 80GB HBM3`.
pub fn name(ordinal: usize) -> Result<String> {
    let (d, dev) = driver_for(ordinal)?;
    let mut buf = [0 as c_char; 256];
    // SAFETY: the buffer holds 256 bytes and its length is passed; the driver NUL-terminates.
    let rc = unsafe { (d.device_get_name)(buf.as_mut_ptr(), buf.len() as c_int, dev) };
    if rc != 0 {
        return Err(cuda_err(format!("cuDeviceGetName on cuda:{ordinal}"), rc));
    }
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Device memory in bytes.
pub fn total_memory(ordinal: usize) -> Result<usize> {
    let (d, dev) = driver_for(ordinal)?;
    let mut v: usize = 0;
    // SAFETY: `dev` is a valid device handle; the out-pointer is valid.
    let rc = unsafe { (d.device_total_mem)(&mut v, dev) };
    if rc != 0 {
        return Err(cuda_err(format!("cuDeviceTotalMem on cuda:{ordinal}"), rc));
    }
    Ok(v)
}

/// Compute capability as `major * 10 + minor` (90 for Hopper).
pub fn compute_capability(ordinal: usize) -> Result<u32> {
    let major = attribute(ordinal, attr::COMPUTE_CAPABILITY_MAJOR)?;
    let minor = attribute(ordinal, attr::COMPUTE_CAPABILITY_MINOR)?;
    Ok((major * 10 + minor) as u32)
}

/// The compile target of `cuda:N`, from its compute capability (sm 90 → `sm_90a`).
pub fn target_of(ordinal: usize) -> Result<Target> {
    Ok(Target::Cuda {
        sm: compute_capability(ordinal)?,
    })
}

/// The symbolic name of a `CUresult`, for messages (without asking the driver, which may be
/// absent or in a failed state).
pub fn error_name(code: i32) -> &'static str {
    match code {
        0 => "CUDA_SUCCESS",
        1 => "CUDA_ERROR_INVALID_VALUE",
        2 => "CUDA_ERROR_OUT_OF_MEMORY",
        3 => "CUDA_ERROR_NOT_INITIALIZED",
        4 => "CUDA_ERROR_DEINITIALIZED",
        100 => "CUDA_ERROR_NO_DEVICE",
        101 => "CUDA_ERROR_INVALID_DEVICE",
        200 => "CUDA_ERROR_INVALID_IMAGE",
        201 => "CUDA_ERROR_INVALID_CONTEXT",
        209 => "CUDA_ERROR_NO_BINARY_FOR_GPU",
        218 => "CUDA_ERROR_INVALID_PTX",
        222 => "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
        300 => "CUDA_ERROR_INVALID_SOURCE",
        400 => "CUDA_ERROR_INVALID_HANDLE",
        500 => "CUDA_ERROR_NOT_FOUND",
        600 => "CUDA_ERROR_NOT_READY",
        700 => "CUDA_ERROR_ILLEGAL_ADDRESS",
        701 => "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
        702 => "CUDA_ERROR_LAUNCH_TIMEOUT",
        710 => "CUDA_ERROR_ASSERT",
        715 => "CUDA_ERROR_ILLEGAL_INSTRUCTION",
        716 => "CUDA_ERROR_MISALIGNED_ADDRESS",
        719 => "CUDA_ERROR_LAUNCH_FAILED",
        803 => "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
        804 => "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
        999 => "CUDA_ERROR_UNKNOWN",
        _ => "CUDA error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a machine without a driver or GPU the probe answers "none" with a reason, and every
    /// query is an error rather than a panic. With a GPU, the queries answer.
    #[test]
    fn probe_never_panics() {
        let p = probe();
        if p.device_count == 0 {
            eprintln!(
                "no CUDA device ({}); checking the no-device answers",
                p.reason.as_deref().unwrap_or("?")
            );
            assert!(p.reason.is_some());
            let e = target_of(0).unwrap_err().to_string();
            assert!(e.contains("cuda:0"), "{e}");
            assert!(name(0).is_err());
            assert!(check(0).is_err());
        } else {
            let t = target_of(0).unwrap();
            assert!(t.is_cuda());
            assert!(!name(0).unwrap().is_empty());
        }
        // An ordinal past the count is an error either way.
        assert!(check(1 << 20).is_err());
    }

    #[test]
    fn error_names() {
        assert_eq!(error_name(700), "CUDA_ERROR_ILLEGAL_ADDRESS");
        assert_eq!(error_name(12345), "CUDA error");
    }
}
