//! The builder DSL: closures traced into tile IR.

mod args;
mod builder;
mod scope;

pub use args::{BufferExt, IntoExprs, Tile};
pub use builder::KernelBuilder;
pub use scope::{CumsumHandle, GemmHandle, IfHandle, PipelineHandle, ReduceHandle, TileScope};
