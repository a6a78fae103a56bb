//! The AMD toolchain: generated HIP C++ → assembly → code object, with clang and lld (LLVM 20 or
//! newer: gfx950 needs it), and a static report of the assembly ([`isa`]).
//!
//! There is no ROCm here: clang compiles device code only (`-nogpulib -nogpuinc
//! --cuda-device-only`), the assembly it prints is assembled and linked into the code object
//! that `hipModuleLoadData` takes, so the report describes exactly the code that would run.

pub mod isa;
pub mod toolchain;

pub use toolchain::{compile, Clang, CodeObject, ToolchainError};
