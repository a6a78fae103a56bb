//! The GPU lowering: layout inference, then tile ops, parallel loops and pipelines to
//! thread-level IR (see docs/design/thread-ir.md).

pub mod copy;
pub mod elementwise;
pub mod gemm;
pub mod infer;
pub mod lower;
pub mod mma;
pub mod persistent;
pub mod pipeline;
pub mod reduce;
pub mod smem;
pub mod wgmma;

pub use lower::run;
