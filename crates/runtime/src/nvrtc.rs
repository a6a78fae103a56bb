//! CUDA source → cubin through NVRTC, loaded at run time.
//!
//! This is a small internal stand-in with the shape of the `tl_nvrtc` crate's API
//! (`compile(source, arch, opts) -> Compiled { cubin, log, .. }`, `version()`), used until that
//! crate lands; the rest of the runtime only calls [`compile`] and [`version`], so switching is
//! local to this file. NVRTC is found through `TILELANG_NVRTC_LIB` (a path to `libnvrtc.so*`),
//! then `$CUDA_HOME`/`$CUDA_PATH`/`/usr/local/cuda` `lib64`, then the loader's search path.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::PathBuf;
use std::sync::OnceLock;

use libloading::Library;

/// Options every kernel is compiled with (part of the cache key, like the CPU backend's CFLAGS).
/// `-lineinfo` costs nothing at run time and lets profilers map SASS to source lines;
/// `--ptxas-options=-v` makes the log carry registers, stack frame and spills.
pub const OPTIONS: &[&str] = &["-std=c++17", "-lineinfo", "--ptxas-options=-v"];

/// Why NVRTC could not produce a cubin.
#[derive(Debug, thiserror::Error)]
pub enum NvrtcError {
    #[error("{0}")]
    NotFound(String),
    #[error("{call} failed: {message}")]
    Api { call: &'static str, message: String },
    #[error("compilation failed:\n{log}")]
    Compile { log: String },
}

/// A compiled program.
#[derive(Clone, Debug)]
pub struct Compiled {
    pub cubin: Vec<u8>,
    /// NVRTC's log (with `--ptxas-options=-v`, the resource report).
    pub log: String,
}

type Prog = *mut c_void;
type VersionFn = unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int;
type CreateFn = unsafe extern "C" fn(
    *mut Prog,
    *const c_char,
    *const c_char,
    c_int,
    *const *const c_char,
    *const *const c_char,
) -> c_int;
type CompileFn = unsafe extern "C" fn(Prog, c_int, *const *const c_char) -> c_int;
type SizeFn = unsafe extern "C" fn(Prog, *mut usize) -> c_int;
type BytesFn = unsafe extern "C" fn(Prog, *mut c_char) -> c_int;
type DestroyFn = unsafe extern "C" fn(*mut Prog) -> c_int;
type ErrStrFn = unsafe extern "C" fn(c_int) -> *const c_char;

struct Nvrtc {
    _lib: Library,
    path: String,
    version: VersionFn,
    create: CreateFn,
    compile: CompileFn,
    log_size: SizeFn,
    log: BytesFn,
    cubin_size: SizeFn,
    cubin: BytesFn,
    destroy: DestroyFn,
    err_str: ErrStrFn,
}

// SAFETY: a library handle and function pointers into it; NVRTC's API is thread-safe for
// distinct programs, and each compile here creates and destroys its own program.
unsafe impl Send for Nvrtc {}
// SAFETY: as above.
unsafe impl Sync for Nvrtc {}

fn candidates() -> Vec<String> {
    let mut c = vec![];
    if let Some(p) = std::env::var_os("TILELANG_NVRTC_LIB") {
        c.push(PathBuf::from(p).to_string_lossy().into_owned());
    }
    let names = [
        "libnvrtc.so.13",
        "libnvrtc.so.12",
        "libnvrtc.so.11.2",
        "libnvrtc.so",
    ];
    let mut dirs: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"]
        .iter()
        .filter_map(std::env::var_os)
        .map(|d| PathBuf::from(d).join("lib64"))
        .collect();
    dirs.push(PathBuf::from("/usr/local/cuda/lib64"));
    for d in &dirs {
        for n in names {
            let p = d.join(n);
            if p.is_file() {
                c.push(p.to_string_lossy().into_owned());
            }
        }
    }
    c.extend(names.iter().map(|s| s.to_string()));
    c
}

fn load() -> Result<Nvrtc, String> {
    let mut errors = vec![];
    for path in candidates() {
        // SAFETY: loading NVRTC runs its initializers, which have no preconditions.
        let lib = match unsafe { Library::new(&path) } {
            Ok(l) => l,
            Err(e) => {
                errors.push(format!("{path}: {e}"));
                continue;
            }
        };
        macro_rules! sym {
            ($t:ty, $n:literal) => {
                // SAFETY: the symbol has this C signature in every NVRTC since 11.1 (nvrtc.h).
                match unsafe { lib.get::<$t>($n) } {
                    Ok(f) => *f,
                    Err(e) => {
                        errors.push(format!("{path}: {e}"));
                        continue;
                    }
                }
            };
        }
        let n = Nvrtc {
            version: sym!(VersionFn, b"nvrtcVersion\0"),
            create: sym!(CreateFn, b"nvrtcCreateProgram\0"),
            compile: sym!(CompileFn, b"nvrtcCompileProgram\0"),
            log_size: sym!(SizeFn, b"nvrtcGetProgramLogSize\0"),
            log: sym!(BytesFn, b"nvrtcGetProgramLog\0"),
            cubin_size: sym!(SizeFn, b"nvrtcGetCUBINSize\0"),
            cubin: sym!(BytesFn, b"nvrtcGetCUBIN\0"),
            destroy: sym!(DestroyFn, b"nvrtcDestroyProgram\0"),
            err_str: sym!(ErrStrFn, b"nvrtcGetErrorString\0"),
            path: path.clone(),
            _lib: lib,
        };
        return Ok(n);
    }
    Err(format!(
        "libnvrtc could not be loaded (tried {})",
        errors.join("; ")
    ))
}

fn nvrtc() -> Result<&'static Nvrtc, NvrtcError> {
    static N: OnceLock<Result<Nvrtc, String>> = OnceLock::new();
    N.get_or_init(load)
        .as_ref()
        .map_err(|e| NvrtcError::NotFound(e.clone()))
}

impl Nvrtc {
    fn check(&self, call: &'static str, rc: c_int) -> Result<(), NvrtcError> {
        if rc == 0 {
            return Ok(());
        }
        // SAFETY: nvrtcGetErrorString returns a static NUL-terminated string for any code.
        let p = unsafe { (self.err_str)(rc) };
        let message = if p.is_null() {
            format!("NVRTC error {rc}")
        } else {
            // SAFETY: non-null, static, NUL-terminated (see above).
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        };
        Err(NvrtcError::Api { call, message })
    }
}

/// `nvrtc MAJOR.MINOR (path)`, for cache keys and reports.
pub fn version() -> Result<String, NvrtcError> {
    let n = nvrtc()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: both out-pointers are valid ints.
    n.check("nvrtcVersion", unsafe {
        (n.version)(&mut major, &mut minor)
    })?;
    Ok(format!("nvrtc {major}.{minor}"))
}

/// Where NVRTC was loaded from.
pub fn library_path() -> Result<String, NvrtcError> {
    Ok(nvrtc()?.path.clone())
}

/// A program handle destroyed on drop, so every exit path frees it.
struct Program<'a> {
    n: &'a Nvrtc,
    prog: Prog,
}

impl Drop for Program<'_> {
    fn drop(&mut self) {
        // SAFETY: `prog` was created by nvrtcCreateProgram and is destroyed once, here.
        unsafe {
            (self.n.destroy)(&mut self.prog);
        }
    }
}

/// Compile `source` to a cubin for `arch` (`sm_90a`, `sm_80`) with [`OPTIONS`] plus `extra`.
pub fn compile(source: &str, arch: &str, extra: &[String]) -> Result<Compiled, NvrtcError> {
    let n = nvrtc()?;
    let src = CString::new(source).map_err(|_| NvrtcError::Compile {
        log: "the source contains a NUL byte".into(),
    })?;
    let name = CString::new("tilelang.cu").unwrap_or_default();
    let mut opts: Vec<CString> = vec![];
    for o in OPTIONS
        .iter()
        .map(|s| s.to_string())
        .chain(std::iter::once(format!("--gpu-architecture={arch}")))
        .chain(extra.iter().cloned())
    {
        opts.push(CString::new(o).map_err(|_| NvrtcError::Compile {
            log: "an option contains a NUL byte".into(),
        })?);
    }
    let opt_ptrs: Vec<*const c_char> = opts.iter().map(|c| c.as_ptr()).collect();

    let mut prog: Prog = std::ptr::null_mut();
    // SAFETY: source and name are NUL-terminated and outlive the call; no headers are passed.
    let rc = unsafe {
        (n.create)(
            &mut prog,
            src.as_ptr(),
            name.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    n.check("nvrtcCreateProgram", rc)?;
    let p = Program { n, prog };
    // SAFETY: `opt_ptrs` points at `opts`' NUL-terminated strings, alive for the call.
    let rc = unsafe { (n.compile)(p.prog, opt_ptrs.len() as c_int, opt_ptrs.as_ptr()) };
    let log = program_log(&p)?;
    if rc != 0 {
        n.check("nvrtcCompileProgram", rc).map_err(|e| match e {
            NvrtcError::Api { message, .. } => NvrtcError::Compile {
                log: format!("{message}\n{log}"),
            },
            other => other,
        })?;
    }
    let mut size = 0usize;
    // SAFETY: valid program, valid out-pointer.
    n.check("nvrtcGetCUBINSize", unsafe {
        (n.cubin_size)(p.prog, &mut size)
    })?;
    if size == 0 {
        return Err(NvrtcError::Api {
            call: "nvrtcGetCUBIN",
            message: format!("no cubin was produced; is `{arch}` a real GPU architecture (sm_XY), not a virtual one (compute_XY)?"),
        });
    }
    let mut cubin = vec![0u8; size];
    // SAFETY: the buffer holds exactly the size NVRTC reported.
    n.check("nvrtcGetCUBIN", unsafe {
        (n.cubin)(p.prog, cubin.as_mut_ptr() as *mut c_char)
    })?;
    Ok(Compiled { cubin, log })
}

fn program_log(p: &Program) -> Result<String, NvrtcError> {
    let mut size = 0usize;
    // SAFETY: valid program, valid out-pointer.
    p.n.check("nvrtcGetProgramLogSize", unsafe {
        (p.n.log_size)(p.prog, &mut size)
    })?;
    if size <= 1 {
        return Ok(String::new());
    }
    let mut buf = vec![0u8; size];
    // SAFETY: the buffer holds the size NVRTC reported (including the NUL).
    p.n.check("nvrtcGetProgramLog", unsafe {
        (p.n.log)(p.prog, buf.as_mut_ptr() as *mut c_char)
    })?;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(&buf[..end]).trim_end().to_string())
}

/// Whether NVRTC can be loaded here.
pub fn available() -> bool {
    nvrtc().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With NVRTC present (the toolkit, or the wheel through TILELANG_NVRTC_LIB) a trivial
    /// kernel compiles to a non-empty cubin for sm_80 and sm_90a; without it, the error says so.
    #[test]
    fn compiles_or_explains() {
        match version() {
            Err(e) => {
                eprintln!("SKIPPED nvrtc compile test: {e}");
                assert!(!available());
            }
            Ok(v) => {
                assert!(v.starts_with("nvrtc "));
                let src = "extern \"C\" __global__ void k(float* x) { x[threadIdx.x] = 1.0f; }";
                for arch in ["sm_80", "sm_90a"] {
                    let c = compile(src, arch, &[]).unwrap();
                    // A cubin is an ELF file.
                    assert_eq!(&c.cubin[..4], b"\x7fELF", "{arch}");
                    assert!(c.log.contains("registers"), "{}", c.log);
                }
                let e = compile("this is not CUDA", "sm_80", &[]).unwrap_err();
                assert!(matches!(e, NvrtcError::Compile { .. }), "{e}");
            }
        }
    }
}
