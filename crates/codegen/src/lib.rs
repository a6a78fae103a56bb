//! Source generation from thread-level IR. Codegen never decides anything a pass should: it
//! prints what the IR says, in C for the CPU, CUDA C++ or HIP C++.

pub mod abi;
pub mod c;
pub mod cfamily;
pub mod cuda;
pub mod hip;
pub mod names;
pub mod pack;
pub mod ptx;

pub use abi::{Abi, IntSlot, TmaSpec};
pub use cuda::{CudaSource, Language};
pub use hip::HipSource;
