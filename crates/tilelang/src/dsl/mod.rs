//! The builder DSL: closures traced into tile IR.

mod args;
mod atomic;
mod builder;
mod dist;
mod scope;

pub use args::{element_address, BufferExt, IntoExprs, Tile};
pub use builder::{KernelBuilder, OpenLaunch};
pub(crate) use dist::add_peer_tables;
pub use dist::{Dist, SignalOp};
pub use scope::{
    CumsumHandle, GemmHandle, IfHandle, OpenIf, OpenLoop, PipelineHandle, ReduceHandle, TileScope,
};
