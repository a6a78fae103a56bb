//! What the GPU test files share: every example at GPU-sized tiles, and the edits of lowered IR
//! that plant bugs for the simulator to catch.
#![allow(dead_code)]

use tilelang::ir::{ExprKind, Intrinsic, Stmt, StmtKind};
use tilelang::kernels::{elementwise, flash_attention, gemm, rmsnorm, softmax};
use tilelang::prelude::*;

/// `s` without the evaluated calls that `pick` selects by intrinsic and arguments (a wait, a
/// fence, a barrier removed).
pub fn remove_calls_where(s: &Stmt, pick: &dyn Fn(&Intrinsic, &[Expr]) -> bool) -> Stmt {
    s.map_post(&mut |st| match st.kind {
        StmtKind::Seq(v) => Stmt::seq(
            v.into_iter()
                .filter(|x| {
                    !matches!(&x.kind, StmtKind::Eval(e)
                        if matches!(e.kind(), ExprKind::Call(op, a) if pick(op, a)))
                })
                .collect(),
            st.span,
        ),
        k => Stmt::new(k, st.span),
    })
}

/// [`remove_calls_where`] by intrinsic alone.
pub fn remove_calls(s: &Stmt, pick: &dyn Fn(&Intrinsic) -> bool) -> Stmt {
    remove_calls_where(s, &|op, _| pick(op))
}

pub fn example_kernels() -> Vec<Kernel> {
    let row = softmax::RowConfig {
        rows: 1,
        cols: 1024,
        threads: 128,
    };
    let g = gemm::GemmConfig::tiles(64, 64, 32, 2, 128);
    let fa = flash_attention::AttnConfig::tiles(64, 64, 2, 128);
    let split = softmax::SplitConfig {
        span: 4096,
        chunk: 2048,
        threads: 256,
    };
    vec![
        gemm::gemm(gemm::Layout::NT, BF16, BF16, g),
        gemm::gemm(gemm::Layout::NN, F32, F32, g),
        elementwise::add_relu(BF16, 1024, 256),
        softmax::softmax(BF16, row),
        rmsnorm::rmsnorm(BF16, row),
        flash_attention::flash_attention(BF16, 64, true, fa),
        flash_attention::flash_attention(BF16, 128, false, fa),
        softmax::softmax_split_stats(BF16, split),
        softmax::softmax_split_apply(BF16, split),
        rmsnorm::rmsnorm_split_stats(BF16, split),
        rmsnorm::rmsnorm_split_apply(BF16, split),
    ]
}

/// `k` as the runtime compiles it for launches whose `dims` are multiples of `m` elements and
/// whose other sizes may be anything (a class variant: with M and K multiples of 8 and an odd
/// N, the Hopper GEMM stays warp-specialized with TMA loads, but C's rows take no TMA store).
pub fn class_variant(k: &Kernel, dims: &[&str], m: i64) -> Kernel {
    let mut ir = k.ir().clone();
    ir.attrs.dim_multiples = ir
        .dims
        .iter()
        .filter(|d| dims.contains(&d.name()))
        .map(|d| (d.clone(), m))
        .collect();
    Kernel::from_ir(ir)
}

/// `class_variant(k, aligned, 8)` whose odd-row inputs `staged` (by parameter name) the kernel
/// copies itself (`TILELANG_STAGE_IN_KERNEL=1`, `tl_passes::gpu::stage_rows`).
pub fn staged_rows_variant(k: &Kernel, aligned: &[&str], staged: &[&str]) -> Kernel {
    let mut ir = class_variant(k, aligned, 8).ir().clone();
    ir.attrs.tma_pitched_inputs = true;
    ir.attrs.stage_rows_in_kernel = ir
        .tensors()
        .filter(|(b, _)| staged.contains(&b.name()))
        .map(|(b, _)| b.id())
        .collect();
    Kernel::from_ir(ir)
}
