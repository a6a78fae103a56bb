//! Gemm on Hopper's warpgroup MMA (`wgmma.mma_async`, sm_90a), asked for with `.wgmma()`.
//!
//! Each warpgroup (128 threads) owns 64 accumulator rows and all `N` columns; per 16-wide step
//! of K it issues one `m64nNk16` reading A and B straight from shared memory through
//! descriptors (no ldmatrix). The operands must be K-major tiles with rows of a multiple of 64
//! elements (stored as 64-column blocks), under the 128-byte swizzle the shared-memory layout
//! pass gives such tiles — the canonical
//! layout a descriptor with swizzle mode 128B describes. The accumulator of warp `w` of a
//! warpgroup is rows `16w ..` in the mma.sync accumulator layout (`mma::c_layout` with every
//! warp along M), so everything downstream of the gemm is unchanged.
//!
//! The issue is asynchronous; this lowering waits for it at the end of the op
//! (`wgmma.wait_group 0`), so the shared tiles are free and the accumulator readable after it.

use tl_ir::{
    DType, DiagKind, Diagnostic, Expr, GemmOp, Intrinsic, Scope, Span, Stmt, StmtKind, Var,
};
use tl_target::Target;

use super::gemm::{extents2, index2};
use super::lower::Ctx;
use crate::tile_util::{address_of, for_loop};

/// Elements per row of a wgmma operand tile: 128 bytes of a 16-bit type.
pub const ROW_ELEMS: i64 = 64;

/// Why this gemm cannot use wgmma on `target` with `threads` per block, or `None` if it can.
pub fn unsupported_because(g: &GemmOp, target: &Target, threads: i64) -> Option<String> {
    if !target.has_wgmma() {
        return Some(format!("wgmma needs sm_90a; the target is {target}"));
    }
    let ab = g.a.buffer.dtype();
    if ab != g.b.buffer.dtype() || !matches!(ab, DType::F16 | DType::BF16) {
        return Some(format!(
            "wgmma here takes f16 or bf16 operands of one type (A is {ab}, B is {})",
            g.b.buffer.dtype()
        ));
    }
    if g.c.buffer.dtype() != DType::F32 {
        return Some("wgmma accumulates in f32".into());
    }
    if g.a.buffer.scope() != Scope::Shared || g.b.buffer.scope() != Scope::Shared {
        return Some("both operands must be shared-memory tiles".into());
    }
    if g.trans_a || !g.trans_b {
        return Some(
            "both operands must be K-major: A as [M, K] and B as [N, K] (transpose_b)".into(),
        );
    }
    for (name, r) in [("A", &g.a), ("B", &g.b)] {
        // Wider tiles are stored as 64-column blocks (`smem_swizzle_layout`), each block the
        // canonical layout; a 16-wide k slice never straddles two.
        let cols = r.buffer.const_shape().and_then(|s| s.last().copied());
        if !cols.is_some_and(|c| c > 0 && c % ROW_ELEMS == 0) {
            return Some(format!(
                "the {name} tile `{}` must have rows of a multiple of {ROW_ELEMS} elements (128 bytes)",
                r.buffer.name()
            ));
        }
        // The descriptor assumes the swizzle's 8-row phase starts at the slice: a sub-tile must
        // start on a multiple of 8 rows and 16 columns.
        let rank = r.rank();
        let aligned = rank >= 2
            && r.offsets[rank - 2].as_int().is_some_and(|o| o % 8 == 0)
            && r.offsets[rank - 1].as_int().is_some_and(|o| o % 16 == 0);
        if !aligned {
            return Some(format!(
                "the {name} region of `{}` must start at constant multiples of 8 rows and 16 columns",
                r.buffer.name()
            ));
        }
    }
    let (Some((m, n)), Some((_, k))) = (extents2(&g.c), extents2(&g.a)) else {
        return Some("wgmma needs constant tile shapes".into());
    };
    if threads % 128 != 0 || m != 64 * (threads / 128) {
        return Some(format!(
            "each warpgroup (128 threads) owns 64 rows: a {m}-row accumulator needs {} threads, the block has {threads}",
            (m / 64).max(1) * 128
        ));
    }
    if n % 8 != 0 || n > 256 || k % 16 != 0 {
        return Some(format!(
            "wgmma needs N a multiple of 8 up to 256 and K a multiple of 16 (N = {n}, K = {k})"
        ));
    }
    None
}

/// [`unsupported_because`] as the diagnostic both layout inference and lowering report.
pub fn check(g: &GemmOp, target: &Target, threads: i64, span: Span) -> Result<(), Diagnostic> {
    match unsupported_because(g, target, threads) {
        None => Ok(()),
        Some(why) => Err(Diagnostic::new(DiagKind::Unsupported, span, why)
            .help("drop `.wgmma()` to use the mma.sync path")),
    }
}

impl Ctx<'_> {
    pub fn lower_gemm_wgmma(&mut self, g: &GemmOp, span: Span) -> Result<Stmt, Diagnostic> {
        check(g, &self.target, self.threads, span)?;
        let acc = self.local_of(&g.c.buffer, span)?;
        let (_, n) = extents2(&g.c).ok_or_else(|| Diagnostic::internal("wgmma on a non-2-d C"))?;
        let (_, k) = extents2(&g.a).ok_or_else(|| Diagnostic::internal("wgmma on a non-2-d A"))?;
        let ab = g.a.buffer.dtype();
        let row0 = self.tid.floordiv(128) * 64;
        let ks = Var::new("ks", DType::I32);
        let k0 = ks.expr() * 16;
        let scale_d = if g.clear_accum {
            Expr::select(ks.expr().gt(0), Expr::int(1), Expr::int(0))
        } else {
            Expr::int(1)
        };
        let call = Expr::call(
            Intrinsic::Wgmma { n: n as u32, ab },
            vec![
                address_of(&acc, vec![Expr::int(0)]),
                address_of(&g.a.buffer, index2(&g.a, row0, k0.clone())),
                address_of(&g.b.buffer, index2(&g.b, Expr::int(0), k0)),
                scale_d,
            ],
            DType::Bool,
        );
        let step = Stmt::new(StmtKind::Eval(call), span);
        let acc0 = address_of(&acc, vec![Expr::int(0)]);
        // wgmma reads shared memory through the async proxy: every thread fences its own
        // earlier writes (plain stores or landed cp.async), then a barrier hands them to the
        // warpgroups — unless the enclosing pipeline already did both for these tiles.
        let fenced = self.async_fenced.contains(&g.a.buffer.id())
            && self.async_fenced.contains(&g.b.buffer.id());
        let mut out = vec![];
        if !fenced {
            out.push(self.eval(Intrinsic::FenceProxyAsync, vec![], span));
            out.push(self.sync(span));
        }
        out.extend([
            self.eval(Intrinsic::WgmmaFence, vec![acc0.clone()], span),
            for_loop(&ks, k / 16, tl_ir::ForKind::Unrolled, step, span),
            self.eval(Intrinsic::WgmmaCommit, vec![], span),
            self.eval(Intrinsic::WgmmaWait { n: 0 }, vec![acc0], span),
        ]);
        Ok(Stmt::seq(out, span))
    }
}
