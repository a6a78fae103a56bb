//! Errors of the CUDA toolchain: a missing library says where it looked and how to install it;
//! a failed compile carries NVRTC's log.

use crate::usage::ResourceUsage;

/// What the installer is and how to use it; every "not found" message ends with this.
pub const INSTALL_HINT: &str = "install the CUDA compiler libraries from PyPI wheels with \
`eval \"$(bash scripts/install-cuda-tools.sh)\"` (unpacks them under target/cuda-tools and exports \
TILELANG_NVRTC, TILELANG_NVJITLINK and TILELANG_CUOBJDUMP), or point TILELANG_NVRTC at a libnvrtc.so \
(TILELANG_NVJITLINK at a libnvJitLink.so)";

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NvrtcError {
    /// No NVRTC library could be loaded from any of the places searched.
    #[error("NVRTC not found; searched:\n{}\n{INSTALL_HINT}", list(.searched))]
    NotFound { searched: Vec<String> },

    /// A library that was explicitly named (TILELANG_NVRTC, TILELANG_NVJITLINK) exists but
    /// could not be loaded; `library` says which (NVRTC, nvJitLink).
    #[error("cannot load {library} from {path}: {reason}\n{INSTALL_HINT}")]
    Load {
        library: &'static str,
        path: String,
        reason: String,
    },

    /// The library loaded but lacks a function this crate needs (not an NVRTC, or too old).
    #[error("{path} has no symbol `{symbol}` (is it NVRTC 12 or newer?)")]
    MissingSymbol { path: String, symbol: String },

    /// The architecture string is malformed or not one NVRTC can compile for.
    #[error("cannot compile for `{arch}`: {reason}")]
    InvalidArch { arch: String, reason: String },

    /// The source cannot be passed to NVRTC (it contains a NUL byte).
    #[error("invalid CUDA source: {0}")]
    InvalidSource(String),

    /// An NVRTC call other than the compile itself failed.
    #[error("{call} failed: {message} (nvrtcResult {code})")]
    Api {
        call: &'static str,
        code: i32,
        message: String,
    },

    /// NVRTC (or ptxas inside it) rejected the program; `log` is NVRTC's log with the
    /// offending source lines appended.
    #[error("CUDA compilation for {arch} failed:\n{log}")]
    Compile { arch: String, log: String },

    /// ptxas reported register spills in a function (checks treat any spill as a failure).
    #[error("`{function}` spills registers on {arch}: {usage}")]
    Spills {
        arch: String,
        function: String,
        usage: ResourceUsage,
    },

    /// An external tool (cuobjdump) is not installed.
    #[error("{tool} not found; searched:\n{}\n{INSTALL_HINT}", list(.searched))]
    ToolNotFound {
        tool: &'static str,
        searched: Vec<String>,
    },

    /// An external tool ran and failed.
    #[error("{tool} failed: {message}")]
    Tool { tool: &'static str, message: String },

    /// The SASS lacks an instruction a check asked for.
    #[error("the SASS for {arch} has no `{instruction}` instruction; it has: {found}")]
    MissingInstruction {
        arch: String,
        instruction: String,
        found: String,
    },
}

fn list(v: &[String]) -> String {
    v.iter()
        .map(|s| format!("  - {s}"))
        .collect::<Vec<_>>()
        .join("\n")
}
