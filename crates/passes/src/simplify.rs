//! Statement-level simplification: simplify every expression knowing the ranges of loop,
//! block and size variables, drop branches that are decided, and remove empty loops. This is
//! where the tail checks of full tiles disappear.

use tl_ir::{Analyzer, Diagnostics, Expr, Kernel, Stmt, StmtKind};
use tl_target::Target;

pub fn run(k: Kernel, target: &Target) -> Result<Kernel, Diagnostics> {
    let _ = target;
    let mut an = kernel_analyzer(&k);
    let body = simplify_stmt(&resolve_transport(&k), &mut an);
    let mut out = k.with_body(body.flatten());
    out.grid = out.grid.iter().map(|g| an.simplify(g)).collect();
    Ok(out)
}

/// The body with `via_nvshmem()` replaced by whether the kernel reaches its peers through
/// NVSHMEM, so the branch that does not apply folds away (a block copy keeps either its
/// NVSHMEM call or its SM copy loop).
fn resolve_transport(k: &Kernel) -> tl_ir::Stmt {
    fn resolve(e: &Expr, nvshmem: bool) -> Expr {
        match e.kind() {
            tl_ir::ExprKind::Call(tl_ir::Intrinsic::ViaNvshmem, _) => Expr::bool(nvshmem),
            _ => e.map_children(&mut |c| resolve(c, nvshmem)),
        }
    }
    let nvshmem = k.attrs.dist.as_ref().is_some_and(|d| d.nvshmem);
    k.body.map_exprs(&mut |e| resolve(e, nvshmem))
}

/// An analyzer that knows the kernel's sizes are non-negative, the block indices lie inside
/// the grid, and how many threads a block has.
pub fn kernel_analyzer(k: &Kernel) -> Analyzer {
    let mut an = Analyzer::new();
    an.threads = Some(k.threads);
    for d in &k.dims {
        an.bind(d, 0, i32::MAX as i64);
    }
    for (d, m) in &k.attrs.dim_multiples {
        an.add_multiple(d, *m);
    }
    for v in k.scalars() {
        if v.dtype().is_unsigned_int() {
            an.bind(v, 0, i64::MAX);
        }
    }
    for (v, g) in k.block_vars.iter().zip(&k.grid) {
        let hi = an.bound(g).hi;
        an.bind(v, 0, hi.saturating_sub(1).max(0));
        an.add_fact_lt(v.expr(), g.clone());
    }
    an
}

pub fn simplify_stmt(s: &Stmt, an: &mut Analyzer) -> Stmt {
    rewrite_stmt(s, an, &|an, e| an.simplify(e))
}

/// Apply `rewrite` to every expression, knowing the ranges of the loop and `let` variables in
/// scope, and drop the branches, loops and self-copies the rewritten expressions decide. With
/// [`Analyzer::simplify`] this is the simplifier; other rewrites that need the same ranges
/// (the strength reduction) reuse the walk.
pub fn rewrite_stmt(
    s: &Stmt,
    an: &mut Analyzer,
    rewrite: &dyn Fn(&Analyzer, &Expr) -> Expr,
) -> Stmt {
    let span = s.span;
    let kind = match &s.kind {
        StmtKind::Seq(v) => StmtKind::Seq(v.iter().map(|x| rewrite_stmt(x, an, rewrite)).collect()),
        StmtKind::Let { var, value } => {
            let value = rewrite(an, value);
            let b = an.bound(&value);
            an.bind(var, b.lo, b.hi);
            StmtKind::Let {
                var: var.clone(),
                value,
            }
        }
        StmtKind::If { cond, then_, else_ } => {
            let cond = rewrite(an, cond);
            match cond.as_bool() {
                Some(true) => return rewrite_stmt(then_, an, rewrite),
                Some(false) => {
                    return match else_ {
                        Some(e) => rewrite_stmt(e, an, rewrite),
                        None => Stmt::empty(),
                    }
                }
                None => StmtKind::If {
                    cond,
                    then_: Box::new(rewrite_stmt(then_, an, rewrite)),
                    else_: else_
                        .as_ref()
                        .map(|e| Box::new(rewrite_stmt(e, an, rewrite))),
                },
            }
        }
        StmtKind::For(l) => {
            let min = rewrite(an, &l.min);
            let extent = rewrite(an, &l.extent);
            if let Some(e) = extent.as_int() {
                if e <= 0 {
                    return Stmt::empty();
                }
            }
            // Parallel loops keep their unit dims: fragments are indexed by loop variables.
            if extent.as_int() == Some(1)
                && !matches!(
                    l.kind,
                    tl_ir::ForKind::Pipelined { .. } | tl_ir::ForKind::Parallel
                )
            {
                // A single iteration: the body with the variable replaced by the start.
                let mut map = std::collections::HashMap::new();
                map.insert(l.var.id(), min.clone());
                let body = rewrite_stmt(&l.body.substitute(&map), an, rewrite);
                return Stmt::seq(vec![body], span);
            }
            an.bind_loop(&l.var, &min, &extent);
            let body = rewrite_stmt(&l.body, an, rewrite);
            an.forget(&l.var);
            if body.is_empty() {
                return Stmt::empty();
            }
            let mut l2 = (**l).clone();
            l2.min = min;
            l2.extent = extent;
            l2.body = body;
            StmtKind::For(Box::new(l2))
        }
        _ => {
            let one = Stmt::new(s.kind.clone(), span);
            let one = one.map_exprs(&mut |e: &Expr| rewrite(an, e));
            // `b[i] = b[i]` (a mask that masks nothing, once simplified) does nothing.
            if let StmtKind::Store {
                buffer,
                indices,
                value,
            } = &one.kind
            {
                if let tl_ir::ExprKind::Load(b, idx) = value.kind() {
                    if b == buffer && idx == indices {
                        return Stmt::empty();
                    }
                }
            }
            return one;
        }
    };
    Stmt::new(kind, span)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tl_ir::{Buffer, DType, For, ForKind, Scope, Span, Var};

    #[test]
    fn proves_tail_checks_away() {
        let i = Var::new("i", DType::I32);
        let buf = Buffer::new(
            "x",
            vec![Expr::int(64)],
            DType::F32,
            Scope::Shared,
            Span::UNKNOWN,
        );
        let store = Stmt::new(
            StmtKind::Store {
                buffer: buf.clone(),
                indices: vec![i.expr()],
                value: Expr::float(1.0),
            },
            Span::UNKNOWN,
        );
        let guarded = Stmt::new(
            StmtKind::If {
                cond: i.expr().lt(64),
                then_: Box::new(store),
                else_: None,
            },
            Span::UNKNOWN,
        );
        let l = Stmt::new(
            StmtKind::For(Box::new(For {
                var: i.clone(),
                min: Expr::int(0),
                extent: Expr::int(64),
                kind: ForKind::Serial,
                body: guarded,
            })),
            Span::UNKNOWN,
        );
        let mut an = Analyzer::new();
        let s = simplify_stmt(&l, &mut an);
        assert!(!s.to_string().contains("if"), "{s}");
    }
}
