//! Instruction selection: the matrix instruction of every gemm, chosen per target (a module
//! per GPU family), or checked where the kernel asked for one. Later stages read the choice
//! from `GemmOp::instruction` and never pick again: layout inference takes the accumulator
//! layout of the chosen instruction, lowering emits it.

use tl_ir::{Diagnostic, Diagnostics, GemmOp, Kernel, Span, Stmt, StmtKind, TileOp};
use tl_target::Target;

pub mod amd;
pub mod nvidia;

/// What the selection of one target family decides.
pub trait Selector {
    /// The instruction for `g` (`g.instruction`, when set, is the kernel's request: check it
    /// and keep it, or say why it cannot run).
    fn gemm(&self, g: &GemmOp, span: Span) -> Result<tl_ir::GemmInstruction, Diagnostic>;
    /// Kernel-wide choices that follow from the gemms' instructions.
    fn finish(&self, _k: &mut Kernel) {}
}

/// The `select_instructions` stage.
pub fn run(k: Kernel, target: &Target) -> Result<Kernel, Diagnostics> {
    let threads = k.threads as i64;
    match target {
        Target::Cuda { .. } => select(k, &nvidia::Nvidia::new(*target, threads)),
        Target::Hip { .. } if k.attrs.dist.is_some() => Err(Diagnostic::new(
            tl_ir::DiagKind::Unsupported,
            k.body.span,
            format!(
                "kernel `{}` is a multi-rank (distributed) kernel; multi-rank kernels lower for NVIDIA targets only so far",
                k.name
            ),
        )
        .help("lower it for sm_80 or sm_90a (docs/distributed.md says what exists)")
        .into()),
        Target::Hip { .. } => select(k, &amd::Amd::new(*target, threads)),
        // Targets without a selector keep what the kernel asked for; lowering checks it.
        _ => Ok(k),
    }
}

fn select(k: Kernel, sel: &dyn Selector) -> Result<Kernel, Diagnostics> {
    let mut errors = vec![];
    let body = k.body.map_post(&mut |st| match st.kind {
        StmtKind::Op(TileOp::Gemm(mut g)) => {
            match sel.gemm(&g, st.span) {
                Ok(i) => g.instruction = Some(i),
                Err(d) => errors.push(d),
            }
            Stmt::new(StmtKind::Op(TileOp::Gemm(g)), st.span)
        }
        kind => Stmt::new(kind, st.span),
    });
    if !errors.is_empty() {
        return Err(Diagnostics(errors));
    }
    let mut out = k.with_body(body);
    sel.finish(&mut out);
    bind_wgmma_waits(&mut out);
    Ok(out)
}

/// A kernel's own `wait_wgmma` (an operand-less `WgmmaWait`), and a gemm's own `wg_wait(n)`,
/// wait for every asynchronous gemm: they take the register arrays of every wgmma gemm
/// (accumulators, and A fragments) as operands, which CUDA C++ pins across the wait. Where no
/// gemm runs on wgmma the gemms are synchronous and a kernel's waits go.
fn bind_wgmma_waits(k: &mut Kernel) {
    let mut regs: Vec<tl_ir::Expr> = vec![];
    k.body.walk(&mut |s| {
        if let StmtKind::Op(TileOp::Gemm(g)) = &s.kind {
            if g.instruction == Some(tl_ir::GemmInstruction::Wgmma) {
                crate::gpu::wgmma::add_register_pins(&mut regs, g);
            }
        }
    });
    let body = k.body.map_post(&mut |st| match &st.kind {
        // A gemm's own wait (`wg_wait(n)`, n ≥ 0) retires other gemms' groups too: it becomes
        // a wait right after the gemm that pins every wgmma register array, so that CUDA C++
        // moves no read of another accumulator above it.
        StmtKind::Op(TileOp::Gemm(g))
            if g.instruction == Some(tl_ir::GemmInstruction::Wgmma)
                && g.wg_wait.is_some_and(|n| n >= 0) =>
        {
            let n = g.wg_wait.map_or(0, |n| n as u32);
            let mut g = g.clone();
            g.wg_wait = Some(-1);
            Stmt::seq(
                vec![
                    Stmt::new(StmtKind::Op(TileOp::Gemm(g)), st.span),
                    Stmt::new(
                        StmtKind::Eval(tl_ir::Expr::call(
                            tl_ir::Intrinsic::WgmmaWait { n, pinned: false },
                            regs.clone(),
                            tl_ir::DType::Bool,
                        )),
                        st.span,
                    ),
                ],
                st.span,
            )
        }
        StmtKind::Eval(e) => match e.kind() {
            tl_ir::ExprKind::Call(op @ tl_ir::Intrinsic::WgmmaWait { .. }, args)
                if args.is_empty() =>
            {
                if regs.is_empty() {
                    return Stmt::empty();
                }
                Stmt::new(
                    StmtKind::Eval(tl_ir::Expr::call(
                        op.clone(),
                        regs.clone(),
                        tl_ir::DType::Bool,
                    )),
                    st.span,
                )
            }
            _ => st,
        },
        _ => st,
    });
    *k = k.clone().with_body(body);
}
