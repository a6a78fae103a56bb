//! tilelang: write GPU kernels as operations on tiles, in Rust.
//!
//! ```no_run
//! use tilelang::prelude::*;
//!
//! // C[M,N] = A[M,K] · B[N,K]^T, f32.
//! let kernel = Kernel::build("gemm_nt", |k| {
//!     let (m, n, kd) = (k.dim("M"), k.dim("N"), k.dim("K"));
//!     let a = k.input("A", [&m, &kd], F32);
//!     let b = k.input("B", [&n, &kd], F32);
//!     let c = k.output("C", [&m, &n], F32);
//!     k.launch([ceildiv(&n, 64), ceildiv(&m, 64)], 128, |t, [bx, by]| {
//!         let a_s = t.alloc_shared([64, 32], F32);
//!         let b_s = t.alloc_shared([64, 32], F32);
//!         let acc = t.alloc_fragment([64, 64], F32);
//!         t.clear(&acc);
//!         t.pipelined(ceildiv(&kd, 32), 2, |t, ko| {
//!             t.copy(a.tile([&by * 64, &ko * 32]), &a_s);
//!             t.copy(b.tile([&bx * 64, &ko * 32]), &b_s);
//!             t.gemm(&a_s, &b_s, &acc).transpose_b();
//!         });
//!         t.copy(&acc, c.tile([&by * 64, &bx * 64]));
//!     });
//! });
//! let dev = Device::best();
//! let exe = kernel.compile(&dev)?;
//! # Ok::<(), tilelang::Error>(())
//! ```

pub mod autotune;
mod driver;
pub mod dsl;
pub mod kernels;
mod link;

/// Whether a kernel's variables and buffers have unique names (then its compiled code is linked
/// from its tile IR in the disk cache, and a cache hit skips lowering).
pub use link::names_are_unique as link_names_are_unique;

pub use driver::{
    amd_usage, nvidia_source, nvidia_source_explained, typical_multiprocessors, Backend,
    CompileOptions, Error, Kernel, Precompiled,
};
pub use tl_amdgpu as amdgpu;
pub use tl_ir as ir;
pub use tl_runtime as runtime;
pub use tl_target::Target;

/// Everything a kernel author needs in scope.
pub mod prelude {
    pub use crate::dsl::{BufferExt, IntoExprs, KernelBuilder, Tile, TileScope};
    pub use crate::{CompileOptions, Error, Kernel, Target};
    pub use tl_ir::dtype::DType::{
        Bool, BF16, F16, F32, F64, F8E4M3, F8E5M2, I16, I32, I64, I8, U16, U32, U64, U8,
    };
    pub use tl_ir::ops::{
        abs, ceil, ceildiv, cos, erf, exp, exp2, floor, floordiv, floormod, if_then_else, log,
        log2, max, min, pow, ranks_in_item_groups, rsqrt, select, sigmoid, sin, sqrt, tanh,
    };
    pub use tl_ir::{Buffer, DType, Expr, GemmInstruction, MfmaShape, Var, WarpPolicy};
    pub use tl_runtime::{Arg, Device, Executable, Tensor};
}
