//! The tile IR: what a kernel means, independent of the target.
//!
//! A [`Kernel`] has parameters (global tensors with symbolic shapes, scalars), a launch grid, a
//! thread count and a body of [`Stmt`]s. Statements include tile operations ([`TileOp`]: copy,
//! gemm, reduce, fill, atomic add, cumsum) on [`Region`]s of [`Buffer`]s in a memory [`Scope`],
//! and loops that are serial, parallel (spread over threads), unrolled or software-pipelined.
//! Passes lower tile IR to thread-level IR in the same types (see [`verify::Level`]).

pub mod buffer;
pub mod diag;
pub mod dtype;
pub mod eval;
pub mod expr;
pub mod fp8;
pub mod fragment;
pub mod intrinsic;
pub mod kernel;
pub mod ops;
pub mod printer;
pub mod simplify;
pub mod span;
pub mod stmt;
pub mod verify;

pub use buffer::{Buffer, Region, Scope};
pub use diag::{DiagKind, Diagnostic, Diagnostics};
pub use dtype::DType;
pub use expr::{BinOp, CmpOp, Expr, ExprKind, UnOp, Var};
pub use fragment::{Fragment, Mode};
pub use intrinsic::{Intrinsic, MemScope, MemSem, MfmaOp, TmaOperands, WgmmaOp};
pub use kernel::{
    launch_registers, ClusterAttr, DistAttrs, Kernel, KernelAttrs, Param, Role, StagedRows,
    WarpSpecialized,
};
pub use simplify::{simplify, Analyzer};
pub use span::Span;
pub use stmt::{
    AtomicKind, AtomicOp, CopyOp, CumsumOp, FillOp, For, ForKind, GemmInstruction, GemmOp,
    GemmSchedule, MfmaShape, ReduceKind, ReduceOp, Stmt, StmtKind, TileOp, WarpPolicy,
};
