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
}

pub type Result<T> = std::result::Result<T, RuntimeError>;
