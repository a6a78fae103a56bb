//! The kernels the examples, tests and benches share, each with a plain-Rust f64 reference.

pub mod dist;
pub mod elementwise;
pub mod flash_attention;
pub mod fp8_gemm;
pub mod gemm;
pub mod gemm_realign;
pub mod gemm_residue;
pub mod reference;
pub mod rmsnorm;
pub mod softmax;
