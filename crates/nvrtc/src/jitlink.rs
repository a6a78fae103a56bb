//! nvJitLink: PTX → cubin with the ptxas inside the library, for kernels the PTX printer
//! emits directly (no NVRTC, no NVVM). Loaded with `dlopen` like NVRTC, from the same places
//! (the PyPI wheel `nvidia-nvjitlink` that `scripts/install-cuda-tools.sh` unpacks, or a CUDA
//! install).

use std::ffi::{c_char, c_int, c_void, CString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Instant;

use crate::error::NvrtcError;
use crate::library::{load, search_library, symbol};
use crate::{c_options, parse_arch, parse_ptxas_log, Compiled};

type Handle = *mut c_void;
type Create = unsafe extern "C" fn(*mut Handle, u32, *const *const c_char) -> c_int;
type Destroy = unsafe extern "C" fn(*mut Handle) -> c_int;
type AddData = unsafe extern "C" fn(Handle, c_int, *const c_void, usize, *const c_char) -> c_int;
type Complete = unsafe extern "C" fn(Handle) -> c_int;
type GetSize = unsafe extern "C" fn(Handle, *mut usize) -> c_int;
type GetBytes = unsafe extern "C" fn(Handle, *mut c_void) -> c_int;
type Version = unsafe extern "C" fn(*mut u32, *mut u32) -> c_int;

/// `NVJITLINK_INPUT_PTX` of nvJitLink.h.
const INPUT_PTX: c_int = 2;
/// `NVJITLINK_INPUT_LIBRARY`: a static archive of device objects.
const INPUT_LIBRARY: c_int = 6;

/// One more input of a [`JitLink::link`].
#[derive(Clone, Debug)]
pub enum LinkInput {
    /// PTX text (assembled for linking).
    Ptx { name: String, text: String },
    /// A static library (`.a`) of relocatable device code.
    Library { name: String, bytes: Vec<u8> },
}

/// A loaded nvJitLink.
pub struct JitLink {
    create: Create,
    destroy: Destroy,
    add_data: AddData,
    complete: Complete,
    cubin_size: GetSize,
    cubin: GetBytes,
    error_log_size: GetSize,
    error_log: GetBytes,
    info_log_size: GetSize,
    info_log: GetBytes,
    version: (i32, i32),
    path: PathBuf,
    _lib: libloading::Library,
}

// SAFETY: nvJitLink handles are independent; the struct holds only function pointers and the
// library handle, which never change after loading.
unsafe impl Send for JitLink {}
unsafe impl Sync for JitLink {}

impl std::fmt::Debug for JitLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JitLink")
            .field("path", &self.path)
            .field("version", &self.version)
            .finish()
    }
}

static GLOBAL: OnceLock<Result<JitLink, NvrtcError>> = OnceLock::new();

/// A link handle, destroyed on drop.
struct Link<'a> {
    raw: Handle,
    lib: &'a JitLink,
}

impl Drop for Link<'_> {
    fn drop(&mut self) {
        if !self.raw.is_null() {
            // SAFETY: a handle nvJitLinkCreate returned, destroyed once.
            unsafe { (self.lib.destroy)(&mut self.raw) };
        }
    }
}

impl Link<'_> {
    fn bytes(&self, size: GetSize, get: GetBytes) -> Vec<u8> {
        let mut n = 0usize;
        // SAFETY: a live handle and a valid out-pointer.
        if unsafe { size(self.raw, &mut n) } != 0 || n == 0 {
            return vec![];
        }
        let mut v = vec![0u8; n];
        // SAFETY: `v` has the `n` bytes the library reported.
        if unsafe { get(self.raw, v.as_mut_ptr() as *mut c_void) } != 0 {
            return vec![];
        }
        v
    }

    /// A log: text without its terminating NUL.
    fn text(&self, size: GetSize, get: GetBytes) -> String {
        let mut v = self.bytes(size, get);
        while v.last() == Some(&0) {
            v.pop();
        }
        String::from_utf8_lossy(&v).into_owned()
    }
}

impl JitLink {
    /// The process-wide nvJitLink, discovered once ([`discover_jitlink`]).
    pub fn global() -> Result<&'static JitLink, NvrtcError> {
        GLOBAL
            .get_or_init(discover_jitlink)
            .as_ref()
            .map_err(Clone::clone)
    }

    pub fn version(&self) -> (i32, i32) {
        self.version
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn open(path: &Path) -> Result<JitLink, NvrtcError> {
        let lib = load(path, "nvJitLink")?;
        let p = path.display().to_string();
        macro_rules! sym {
            ($ty:ty, $name:literal) => {
                // SAFETY: the symbol's type is the one nvJitLink.h declares.
                unsafe { symbol::<$ty>(&lib, $name, path)? }
            };
        }
        let version: Version = sym!(Version, "nvJitLinkVersion\0");
        let (mut major, mut minor) = (0u32, 0u32);
        // SAFETY: two valid out-pointers.
        let code = unsafe { version(&mut major, &mut minor) };
        if code != 0 {
            return Err(NvrtcError::Load {
                library: "nvJitLink",
                path: p,
                reason: format!("nvJitLinkVersion failed (nvJitLinkResult {code})"),
            });
        }
        Ok(JitLink {
            create: sym!(Create, "nvJitLinkCreate\0"),
            destroy: sym!(Destroy, "nvJitLinkDestroy\0"),
            add_data: sym!(AddData, "nvJitLinkAddData\0"),
            complete: sym!(Complete, "nvJitLinkComplete\0"),
            cubin_size: sym!(GetSize, "nvJitLinkGetLinkedCubinSize\0"),
            cubin: sym!(GetBytes, "nvJitLinkGetLinkedCubin\0"),
            error_log_size: sym!(GetSize, "nvJitLinkGetErrorLogSize\0"),
            error_log: sym!(GetBytes, "nvJitLinkGetErrorLog\0"),
            info_log_size: sym!(GetSize, "nvJitLinkGetInfoLogSize\0"),
            info_log: sym!(GetBytes, "nvJitLinkGetInfoLog\0"),
            version: (major as i32, minor as i32),
            path: path.to_path_buf(),
            _lib: lib,
        })
    }

    /// The options [`JitLink::assemble`] passes for `arch`: ptxas's resource report (`-v`),
    /// no cache of nvJitLink's own, and each option in `TILELANG_PTXAS_OPTIONS` (whitespace
    /// separated, as `-Xptxas=<option>`; for experiments such as `-O1`). A cache key for
    /// assembled PTX must include them.
    pub fn flags(&self, arch: &str) -> Vec<String> {
        let mut flags = vec![format!("-arch={arch}"), "-Xptxas=-v".to_string()];
        // Like NVRTC's, nvJitLink's own cache would turn a cold compile into a lookup without
        // the resource report; callers cache cubins themselves.
        if self.version >= (12, 8) {
            flags.push("-no-cache".into());
        }
        if let Ok(extra) = std::env::var("TILELANG_PTXAS_OPTIONS") {
            flags.extend(extra.split_whitespace().map(|o| format!("-Xptxas={o}")));
        }
        flags
    }

    /// Assemble PTX for exactly `arch` (`sm_80`, `sm_90a`) with [`JitLink::flags`] (ptxas's
    /// default `-O3` unless `TILELANG_PTXAS_OPTIONS` says otherwise).
    pub fn assemble(&self, ptx: &str, arch: &str) -> Result<Compiled, NvrtcError> {
        self.link(ptx, &[], arch)
    }

    /// [`assemble`](Self::assemble) `ptx` and link it with `more` (PTX of functions it
    /// calls, static libraries of device code): NVSHMEM's shim and archive.
    pub fn link(&self, ptx: &str, more: &[LinkInput], arch: &str) -> Result<Compiled, NvrtcError> {
        parse_arch(arch)?;
        let flags = self.flags(arch);
        let cflags = c_options(&flags)?;
        let ptrs: Vec<*const c_char> = cflags.iter().map(|c| c.as_ptr()).collect();
        let name = CString::new("tilelang.ptx").unwrap_or_default();
        let api_err = |call: &'static str, code: c_int| NvrtcError::Api {
            call,
            code,
            message: format!("nvJitLinkResult {code}"),
        };
        let mut link = Link {
            raw: std::ptr::null_mut(),
            lib: self,
        };
        // nvJitLink reads PTX as a C string: without the terminating NUL it may read past
        // the end and reject the input as not PTX.
        let text = CString::new(ptx)
            .map_err(|_| NvrtcError::InvalidSource("the PTX contains a NUL byte".into()))?;
        let start = Instant::now();
        // SAFETY: `ptrs` holds valid C strings that outlive the call.
        let code = unsafe { (self.create)(&mut link.raw, ptrs.len() as u32, ptrs.as_ptr()) };
        if code != 0 {
            return Err(api_err("nvJitLinkCreate", code));
        }
        // SAFETY: a live handle; the data pointer and size describe `text` with its NUL.
        let code = unsafe {
            (self.add_data)(
                link.raw,
                INPUT_PTX,
                text.as_ptr() as *const c_void,
                text.as_bytes_with_nul().len(),
                name.as_ptr(),
            )
        };
        let failed = |link: &Link, code: c_int| {
            let log = link.text(self.error_log_size, self.error_log);
            NvrtcError::Compile {
                arch: arch.into(),
                log: if log.trim().is_empty() {
                    format!("nvJitLink failed (nvJitLinkResult {code})")
                } else {
                    log
                },
            }
        };
        if code != 0 {
            return Err(failed(&link, code));
        }
        for input in more {
            let (kind, bytes, name) = match input {
                LinkInput::Ptx { name, text } => (
                    INPUT_PTX,
                    CString::new(text.as_str())
                        .map_err(|_| {
                            NvrtcError::InvalidSource(format!("{name} contains a NUL byte"))
                        })?
                        .into_bytes_with_nul(),
                    name,
                ),
                LinkInput::Library { name, bytes } => (INPUT_LIBRARY, bytes.clone(), name),
            };
            let cname = CString::new(name.replace('\0', "")).unwrap_or_default();
            // SAFETY: a live handle; the pointer and size describe `bytes`.
            let code = unsafe {
                (self.add_data)(
                    link.raw,
                    kind,
                    bytes.as_ptr() as *const c_void,
                    bytes.len(),
                    cname.as_ptr(),
                )
            };
            if code != 0 {
                return Err(failed(&link, code));
            }
        }
        // SAFETY: a live handle.
        let code = unsafe { (self.complete)(link.raw) };
        let compile_time = start.elapsed();
        if code != 0 {
            return Err(failed(&link, code));
        }
        let cubin = link.bytes(self.cubin_size, self.cubin);
        let log = link.text(self.info_log_size, self.info_log);
        let functions = parse_ptxas_log(&log);
        Ok(Compiled {
            arch: arch.into(),
            cubin,
            ptx: ptx.to_string(),
            log,
            functions,
            compile_time,
            nvrtc_version: self.version,
            assembler: "nvJitLink",
            flags,
        })
    }
}

/// Load nvJitLink from `$TILELANG_NVJITLINK` (a file or a folder), the installer's tools
/// dirs, `$CUDA_PATH`/`$CUDA_HOME`, `/usr/local/cuda`, then the dynamic loader.
pub fn discover_jitlink() -> Result<JitLink, NvrtcError> {
    search_library(
        "nvJitLink",
        "TILELANG_NVJITLINK",
        "libnvJitLink.so",
        JitLink::open,
        |searched| NvrtcError::ToolNotFound {
            tool: "nvJitLink",
            searched,
        },
    )
}

/// Whether PTX must be compiled as a whole program to run as written: it moves registers
/// between warpgroups (`setmaxnreg`). nvJitLink compiles its PTX inputs for linking
/// (ptxas `--compile-only`), and there ptxas drops every `setmaxnreg` ("ignored to maintain
/// compatibility across compilation units", C7504), so each warp keeps the launch's even
/// share and a consumer needing more spills. Such PTX is JIT-compiled by the CUDA driver
/// instead (`cuModuleLoadDataEx`), which compiles a whole program and keeps them.
///
/// PTX that calls NVSHMEM ([`crate::nvshmem::uses_nvshmem`]) is linked instead, whatever it
/// holds: its `setmaxnreg` is dropped.
pub fn needs_whole_program(ptx: &str) -> bool {
    is_ptx(ptx) && ptx.contains("setmaxnreg.") && !crate::nvshmem::uses_nvshmem(ptx)
}

/// Whether `source` is PTX (a `.version` directive before any other code) rather than CUDA
/// C++.
pub fn is_ptx(source: &str) -> bool {
    source
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with("//"))
        .is_some_and(|l| l.starts_with(".version "))
}
