//! Finding and loading NVRTC at run time (no link-time CUDA dependency, so the workspace builds
//! and tests on machines without CUDA), and the handful of NVRTC functions this crate calls.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::{Path, PathBuf};

use crate::error::NvrtcError;

pub(crate) type NvrtcResult = c_int;
pub(crate) type Program = *mut c_void;

type GetErrorString = unsafe extern "C" fn(NvrtcResult) -> *const c_char;
type Version = unsafe extern "C" fn(*mut c_int, *mut c_int) -> NvrtcResult;
type GetNumSupportedArchs = unsafe extern "C" fn(*mut c_int) -> NvrtcResult;
type GetSupportedArchs = unsafe extern "C" fn(*mut c_int) -> NvrtcResult;
type CreateProgram = unsafe extern "C" fn(
    *mut Program,
    *const c_char,
    *const c_char,
    c_int,
    *const *const c_char,
    *const *const c_char,
) -> NvrtcResult;
type DestroyProgram = unsafe extern "C" fn(*mut Program) -> NvrtcResult;
type CompileProgram = unsafe extern "C" fn(Program, c_int, *const *const c_char) -> NvrtcResult;
type GetSize = unsafe extern "C" fn(Program, *mut usize) -> NvrtcResult;
type GetBytes = unsafe extern "C" fn(Program, *mut c_char) -> NvrtcResult;

/// The NVRTC entry points, copied out of the library (which [`Library`] keeps loaded).
#[derive(Clone, Copy)]
pub(crate) struct Api {
    pub get_error_string: GetErrorString,
    pub version: Version,
    pub get_num_supported_archs: GetNumSupportedArchs,
    pub get_supported_archs: GetSupportedArchs,
    pub create_program: CreateProgram,
    pub destroy_program: DestroyProgram,
    pub compile_program: CompileProgram,
    pub get_ptx_size: GetSize,
    pub get_ptx: GetBytes,
    pub get_cubin_size: GetSize,
    pub get_cubin: GetBytes,
    pub get_program_log_size: GetSize,
    pub get_program_log: GetBytes,
}

/// A loaded NVRTC.
pub struct Library {
    pub(crate) api: Api,
    path: PathBuf,
    version: (i32, i32),
    // Dropped after `api` is last usable: the struct owns the libraries for its lifetime.
    _lib: libloading::Library,
    _builtins: Option<libloading::Library>,
}

impl std::fmt::Debug for Library {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nvrtc")
            .field("path", &self.path)
            .field("version", &self.version)
            .finish()
    }
}

impl Library {
    pub fn path(&self) -> &Path {
        &self.path
    }
    pub fn version(&self) -> (i32, i32) {
        self.version
    }
    pub(crate) fn error_string(&self, code: NvrtcResult) -> String {
        // SAFETY: nvrtcGetErrorString returns a static NUL-terminated string for any code.
        unsafe {
            let p = (self.api.get_error_string)(code);
            if p.is_null() {
                format!("error {code}")
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        }
    }
    pub(crate) fn check(&self, call: &'static str, code: NvrtcResult) -> Result<(), NvrtcError> {
        if code == 0 {
            Ok(())
        } else {
            Err(NvrtcError::Api {
                call,
                code,
                message: self.error_string(code),
            })
        }
    }

    /// Load NVRTC from a file path or a bare library name (searched by the dynamic loader).
    ///
    /// The PyPI wheels' libnvrtc finds its builtins library (`libnvrtc-builtins.so.*`) only when
    /// it is already loaded or on the loader's path, so a builtins library next to `path` is
    /// loaded first, globally.
    pub fn open(path: &Path) -> Result<Library, NvrtcError> {
        let builtins = match path.parent() {
            Some(dir) if path.is_absolute() => find_builtins(dir)
                .map(|b| open_global(&b))
                .transpose()
                .map_err(|reason| NvrtcError::Load {
                    library: "NVRTC",
                    path: path.display().to_string(),
                    reason: format!("its builtins library did not load: {reason}"),
                })?,
            _ => None,
        };
        let lib = load(path, "NVRTC")?;
        macro_rules! sym {
            ($ty:ty, $name:literal) => {
                // SAFETY: the symbol's type is the one NVRTC's header declares.
                unsafe { symbol::<$ty>(&lib, $name, path)? }
            };
        }
        let api = Api {
            get_error_string: sym!(GetErrorString, "nvrtcGetErrorString\0"),
            version: sym!(Version, "nvrtcVersion\0"),
            get_num_supported_archs: sym!(GetNumSupportedArchs, "nvrtcGetNumSupportedArchs\0"),
            get_supported_archs: sym!(GetSupportedArchs, "nvrtcGetSupportedArchs\0"),
            create_program: sym!(CreateProgram, "nvrtcCreateProgram\0"),
            destroy_program: sym!(DestroyProgram, "nvrtcDestroyProgram\0"),
            compile_program: sym!(CompileProgram, "nvrtcCompileProgram\0"),
            get_ptx_size: sym!(GetSize, "nvrtcGetPTXSize\0"),
            get_ptx: sym!(GetBytes, "nvrtcGetPTX\0"),
            get_cubin_size: sym!(GetSize, "nvrtcGetCUBINSize\0"),
            get_cubin: sym!(GetBytes, "nvrtcGetCUBIN\0"),
            get_program_log_size: sym!(GetSize, "nvrtcGetProgramLogSize\0"),
            get_program_log: sym!(GetBytes, "nvrtcGetProgramLog\0"),
        };
        let (mut major, mut minor) = (0, 0);
        // SAFETY: two valid out-pointers.
        let code = unsafe { (api.version)(&mut major, &mut minor) };
        let mut out = Library {
            api,
            path: path.to_path_buf(),
            version: (0, 0),
            _lib: lib,
            _builtins: builtins,
        };
        out.check("nvrtcVersion", code)?;
        out.version = (major, minor);
        Ok(out)
    }

    /// The SM numbers this NVRTC compiles for (`90` covers `sm_90a`).
    pub fn supported_archs(&self) -> Result<Vec<u32>, NvrtcError> {
        let mut n: c_int = 0;
        // SAFETY: valid out-pointer.
        self.check("nvrtcGetNumSupportedArchs", unsafe {
            (self.api.get_num_supported_archs)(&mut n)
        })?;
        let mut v = vec![0 as c_int; n.max(0) as usize];
        // SAFETY: `v` has room for the `n` entries NVRTC writes.
        self.check("nvrtcGetSupportedArchs", unsafe {
            (self.api.get_supported_archs)(v.as_mut_ptr())
        })?;
        Ok(v.into_iter().map(|x| x.max(0) as u32).collect())
    }
}

/// Load the shared library at `path` (a file, or a bare name the dynamic loader searches).
pub(crate) fn load(path: &Path, library: &'static str) -> Result<libloading::Library, NvrtcError> {
    // SAFETY: loading NVRTC or nvJitLink runs its initializers, which have no preconditions.
    unsafe { libloading::Library::new(path.as_os_str()) }.map_err(|e| NvrtcError::Load {
        library,
        path: path.display().to_string(),
        reason: e.to_string(),
    })
}

/// The function `name` (NUL-terminated) of `lib`, loaded from `path`.
///
/// # Safety
/// `F` must be the function-pointer type the library's header declares for `name`.
pub(crate) unsafe fn symbol<F: Copy>(
    lib: &libloading::Library,
    name: &str,
    path: &Path,
) -> Result<F, NvrtcError> {
    // SAFETY: the caller vouches for the signature.
    let s = unsafe { lib.get::<F>(name.as_bytes()) }.map_err(|_| NvrtcError::MissingSymbol {
        path: path.display().to_string(),
        symbol: name.trim_end_matches('\0').to_string(),
    })?;
    Ok(*s)
}

// SAFETY: NVRTC's API is thread-safe for distinct programs, and `Library` only holds function
// pointers and library handles that never change after loading.
unsafe impl Send for Library {}
unsafe impl Sync for Library {}

#[cfg(unix)]
fn open_global(path: &Path) -> Result<libloading::Library, String> {
    use libloading::os::unix::{Library as UnixLib, RTLD_GLOBAL, RTLD_NOW};
    // SAFETY: the builtins library has no initializer preconditions.
    unsafe { UnixLib::open(Some(path), RTLD_NOW | RTLD_GLOBAL) }
        .map(Into::into)
        .map_err(|e| e.to_string())
}

#[cfg(not(unix))]
fn open_global(path: &Path) -> Result<libloading::Library, String> {
    // SAFETY: as above.
    unsafe { libloading::Library::new(path) }.map_err(|e| e.to_string())
}

/// `libnvrtc-builtins.so.X.Y` in `dir` (not the `.alt.` variant).
fn find_builtins(dir: &Path) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libnvrtc-builtins.so") || n == "nvrtc-builtins64")
        })
        .collect();
    found.sort();
    found.pop()
}

/// `<prefix>*` files in `dir`, best first (`libnvrtc.so` leaves out `libnvrtc-builtins.so*`
/// and `libnvrtc.alt.so*`).
fn libs_in(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return vec![];
    };
    let mut v: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix))
        })
        .collect();
    // Longest name first: libnvrtc.so.13.0.88 > libnvrtc.so.13 > libnvrtc.so (all the same
    // library when they coexist; the versioned file exists even without the dev symlink).
    v.sort_by(|a, b| b.as_os_str().len().cmp(&a.as_os_str().len()).then(b.cmp(a)));
    v
}

/// Where the installer unpacks the wheels, most specific first: `$TILELANG_CUDA_TOOLS`, then
/// `cuda-tools` under `$CARGO_TARGET_DIR`, the workspace's `target/` and any ancestor of the
/// running executable (test binaries live in `target/<profile>/deps/`).
pub fn tools_dirs() -> Vec<PathBuf> {
    let mut v = vec![];
    if let Some(d) = std::env::var_os("TILELANG_CUDA_TOOLS") {
        v.push(PathBuf::from(d));
    }
    if let Some(d) = std::env::var_os("CARGO_TARGET_DIR") {
        v.push(PathBuf::from(d).join("cuda-tools"));
    }
    let ws = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/cuda-tools");
    v.push(ws);
    if let Ok(exe) = std::env::current_exe() {
        for a in exe.ancestors().skip(1).take(4) {
            v.push(a.join("cuda-tools"));
        }
    }
    let mut seen = std::collections::HashSet::new();
    v.retain(|p| seen.insert(p.clone()));
    v
}

/// Library and binary folders inside a tools dir: the wheels unpack to `nvidia/cu13/lib`
/// (CUDA 13), `nvidia/cuda_nvrtc/lib` (CUDA 12); a hand-made dir may use `lib`/`lib64`.
pub fn subdirs(tools: &Path, kind: &str) -> Vec<PathBuf> {
    let mut v = vec![tools.join(kind)];
    if kind == "lib" {
        v.push(tools.join("lib64"));
    }
    if let Ok(rd) = std::fs::read_dir(tools.join("nvidia")) {
        let mut subs: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
        // cu13 before cu12 before cuda_nvrtc: newest toolkit first.
        subs.sort();
        subs.reverse();
        for s in subs {
            v.push(s.join(kind));
        }
    }
    v
}

/// Load NVRTC from the first place that has it:
/// 1. `$TILELANG_NVRTC` (a libnvrtc file, or a folder holding one) — an error if it fails;
/// 2. the installer's tools dirs ([`tools_dirs`]);
/// 3. `$CUDA_PATH`/`$CUDA_HOME`, `/usr/local/cuda`;
/// 4. the dynamic loader's own search (`libnvrtc.so`, `.so.13`, `.so.12`).
pub fn discover() -> Result<Library, NvrtcError> {
    search_library(
        "NVRTC",
        "TILELANG_NVRTC",
        "libnvrtc.so",
        Library::open,
        |searched| NvrtcError::NotFound { searched },
    )
}

/// Load the CUDA compiler library `library` (file names starting `prefix`) with `open` from
/// the first place that has it, in [`discover`]'s order with `$<env>` first; `not_found`
/// makes the error from the list of places searched.
pub(crate) fn search_library<T>(
    library: &'static str,
    env: &str,
    prefix: &str,
    open: impl Fn(&Path) -> Result<T, NvrtcError>,
    not_found: impl FnOnce(Vec<String>) -> NvrtcError,
) -> Result<T, NvrtcError> {
    let mut searched = vec![];
    if let Some(p) = std::env::var_os(env) {
        let p = PathBuf::from(p);
        let files = if p.is_dir() {
            libs_in(&p, prefix)
        } else {
            vec![p.clone()]
        };
        return match files.first() {
            Some(f) => open(f),
            None => Err(NvrtcError::Load {
                library,
                path: p.display().to_string(),
                reason: format!("{env} names a folder with no {prefix}* in it"),
            }),
        };
    }
    searched.push(format!("${env} (not set)"));

    let mut dirs = vec![];
    for t in tools_dirs() {
        dirs.extend(subdirs(&t, "lib"));
    }
    for var in ["CUDA_PATH", "CUDA_HOME"] {
        if let Some(d) = std::env::var_os(var) {
            dirs.push(PathBuf::from(&d).join("lib64"));
            dirs.push(PathBuf::from(&d).join("lib"));
        }
    }
    dirs.push(PathBuf::from("/usr/local/cuda/lib64"));
    for d in dirs {
        let files = libs_in(&d, prefix);
        let Some(f) = files.first() else {
            searched.push(format!("{} (no {prefix}*)", d.display()));
            continue;
        };
        match open(f) {
            Ok(l) => return Ok(l),
            Err(e) => searched.push(format!("{}: {e}", f.display())),
        }
    }
    for name in [
        prefix.to_string(),
        format!("{prefix}.13"),
        format!("{prefix}.12"),
    ] {
        match open(Path::new(&name)) {
            Ok(l) => return Ok(l),
            Err(e) => {
                let why = match e {
                    NvrtcError::Load { reason, .. } => reason,
                    other => other.to_string(),
                };
                searched.push(format!("{name} via the dynamic loader: {why}"));
            }
        }
    }
    Err(not_found(searched))
}

/// Find an executable of the CUDA toolkit (`cuobjdump`): `$<env>`, the tools dirs, the CUDA
/// install, then `PATH`.
pub fn find_tool(tool: &'static str, env: &str) -> Result<PathBuf, NvrtcError> {
    let mut searched = vec![];
    if let Some(p) = std::env::var_os(env) {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        searched.push(format!("${env} = {} (not a file)", p.display()));
    } else {
        searched.push(format!("${env} (not set)"));
    }
    let mut dirs = vec![];
    for t in tools_dirs() {
        dirs.extend(subdirs(&t, "bin"));
    }
    for var in ["CUDA_PATH", "CUDA_HOME"] {
        if let Some(d) = std::env::var_os(var) {
            dirs.push(PathBuf::from(d).join("bin"));
        }
    }
    dirs.push(PathBuf::from("/usr/local/cuda/bin"));
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    for d in dirs {
        let f = d.join(tool);
        if f.is_file() {
            return Ok(f);
        }
        searched.push(f.display().to_string());
    }
    // Keep the message readable: PATH can be long.
    searched.truncate(24);
    Err(NvrtcError::ToolNotFound { tool, searched })
}
