use std::path::PathBuf;

/// Everything that can go wrong between generated source and a finished launch.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("no C compiler found (tried `{cc}`: {reason}); install gcc or clang, or set CC to a C compiler")]
    NoCompiler { cc: String, reason: String },
    #[error("the C compiler failed on kernel `{kernel}` (source kept at {source_path}):\n{log}")]
    CompileFailed {
        kernel: String,
        source_path: PathBuf,
        log: String,
    },
    #[error("cannot load the compiled kernel {path}: {reason}")]
    Load { path: PathBuf, reason: String },
    #[error("kernel cache at {path}: {reason}; set TILELANG_CACHE_DIR to a writable directory")]
    Cache { path: PathBuf, reason: String },
    #[error("kernel `{kernel}` takes {expected} arguments ({names}), but {got} were given")]
    ArgCount {
        kernel: String,
        expected: usize,
        got: usize,
        names: String,
    },
    #[error("argument {index} (`{name}`) of kernel `{kernel}`: {reason}")]
    BadArg {
        kernel: String,
        index: usize,
        name: String,
        reason: String,
    },
    #[error("tensor: {0}")]
    Tensor(String),
    #[error("device `{device}` is not available: {reason}")]
    DeviceUnavailable { device: String, reason: String },
    #[error("{0}")]
    Launch(String),
    /// A module linked with NVSHMEM could not be initialised (no NVSHMEM heap in the process,
    /// or `nvshmemx_cumodule_init` failed): the cubin itself is fine.
    #[error("{0}")]
    NvshmemModule(String),
    /// A CUDA driver call failed; `what` names the call and, for launches, the kernel.
    #[error("CUDA error in {what}: {error}")]
    Cuda { what: String, error: String },
    /// A HIP runtime call failed; `what` names the call and, for launches, the kernel. The
    /// message notes that the HIP backend is untested on AMD hardware.
    #[error("HIP error in {what}: {error}")]
    Hip { what: String, error: String },
    /// A HIP kernel was given a tensor too large for the 32-bit offsets and buffer range of
    /// AMD buffer loads; launching it would read zeros past the range.
    #[error("kernel `{kernel}`: tensor `{tensor}` is {bytes} bytes, but AMD buffer loads address at most {limit} bytes (2 GiB - 1: 32-bit offsets and buffer range); launch on tensors under 2 GiB, e.g. split the work along the outermost dimension")]
    BufferRange {
        kernel: String,
        tensor: String,
        bytes: usize,
        limit: usize,
    },
    /// NVRTC could not be used: not installed (the message says where it looked and how to
    /// install it), an architecture it cannot compile for, or a failed call.
    #[error(transparent)]
    Nvrtc(#[from] tl_nvrtc::NvrtcError),
    /// NVRTC rejected generated CUDA source.
    #[error("NVRTC failed on kernel `{kernel}` for {arch} (source kept at {source_path}):\n{log}")]
    NvrtcFailed {
        kernel: String,
        arch: String,
        source_path: PathBuf,
        log: String,
    },
}

pub type Result<T> = std::result::Result<T, RuntimeError>;
