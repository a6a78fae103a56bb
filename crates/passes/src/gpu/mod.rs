//! The GPU stages, in the order [`crate::pipeline`] runs them: instruction selection
//! (`isel`, a module per GPU family), layout inference (`infer`), software pipelining
//! (`pipeline`), barrier insertion (`barriers`), tile-op lowering to thread-level IR (`lower`
//! and a module per op family), shared-memory layouts (`smem`), persistent kernels
//! (`persistent`), warp specialization (`warp_specialize`), programmatic dependent launch
//! (`grid_dependency`). See docs/design/thread-ir.md for what comes out.

pub mod barriers;
pub mod buffer_lds;
pub mod bulk_rows;
pub mod copy;
pub mod elementwise;
pub mod gemm;
pub mod grid_dependency;
pub mod infer;
pub mod isel;
pub mod kcopy;
pub mod lower;
pub mod mfma;
pub mod mma;
pub mod persistent;
pub mod pipeline;
pub mod reduce;
pub mod schedule;
pub mod smem;
pub mod stage_rows;
pub mod tma;
pub mod waitcnt;
pub mod warp_specialize;
pub mod wgmma;
