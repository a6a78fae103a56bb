//! Reductions along a dimension of a fragment: in-thread over the value digits along the
//! dimension, then warp shuffles (xor butterflies) over the lane digits along it, then shared
//! memory across warps — so every thread holding a row ends up with the row's result, the
//! replicated layout `Fragment::reduce` describes.

use tl_ir::{
    DType, Diagnostic, Expr, ForKind, Fragment, Intrinsic, ReduceOp, Scope, Span, Stmt, StmtKind,
    Var,
};

use super::lower::Ctx;
use crate::tile_util::{
    accum_dtype, for_loop, if_then, reduce_combine, reduce_identity, reduce_merge, store,
};

/// Value index of the source element whose kept digits are `u` (over `kept`) and reduced
/// digits are `w` (over `red`), both colexicographic.
fn compose(f: &Fragment, dim: usize, u: &Expr, w: &Expr) -> Expr {
    let mut acc = Expr::int(0);
    let mut stride = 1i64;
    let (mut ku, mut kw) = (1i64, 1i64);
    for m in &f.value_modes {
        let along = matches!(m.target, Some((d, _)) if d == dim);
        if m.extent > 1 {
            let (src, s) = if along { (w, &mut kw) } else { (u, &mut ku) };
            let digit = if *s == 1 {
                src.clone()
            } else {
                src.floordiv(*s)
            }
            .floormod(m.extent);
            *s *= m.extent;
            acc = acc + digit * stride;
        }
        stride *= m.extent;
    }
    acc
}

impl Ctx<'_> {
    pub fn lower_reduce(&mut self, r: &ReduceOp, span: Span) -> Result<Stmt, Diagnostic> {
        match (r.src.buffer.scope(), r.dst.buffer.scope()) {
            (Scope::Fragment, Scope::Fragment | Scope::Shared) => self.reduce_fragment(r, span),
            (Scope::Shared, Scope::Fragment | Scope::Shared) => self.reduce_shared(r, span),
            _ => Err(self
                .unsupported(span, "a reduction between these memories")
                .help(
                    "reduce from a fragment or a shared buffer into a fragment or a shared buffer",
                )),
        }
    }

    fn reduce_fragment(&mut self, r: &ReduceOp, span: Span) -> Result<Stmt, Diagnostic> {
        if !r.src.is_full() {
            return Err(self.unsupported(span, "a reduction of part of a fragment"));
        }
        let f = self.fragment_of(&r.src.buffer, span)?;
        let src = self.local_of(&r.src.buffer, span)?;
        let dim = r.dim;
        let red = f.reduce_into(dim, r.dst.buffer.rank());
        let acc_t = accum_dtype(r.dst.buffer.dtype());
        let n_kept = red.local_size();
        let n_red: i64 = f
            .value_modes
            .iter()
            .filter(|m| matches!(m.target, Some((d, _)) if d == dim))
            .map(|m| m.extent)
            .product();
        let tmp = tl_ir::Buffer::new("red", vec![Expr::int(n_kept)], acc_t, Scope::Local, span);
        let mut out = vec![Stmt::new(StmtKind::Alloc(tmp.clone()), span)];
        let u = Var::new("u", DType::I32);
        let w = Var::new("w", DType::I32);
        // 1. In-thread.
        let x = Expr::load(&src, vec![compose(&f, dim, &u.expr(), &w.expr())]).cast(acc_t);
        let step = store(
            &tmp,
            vec![u.expr()],
            reduce_combine(r.kind, Expr::load(&tmp, vec![u.expr()]), x),
            span,
        );
        let per_u = Stmt::seq(
            vec![
                store(&tmp, vec![u.expr()], reduce_identity(r.kind, acc_t), span),
                for_loop(&w, n_red, ForKind::Unrolled, step, span),
            ],
            span,
        );
        out.push(for_loop(&u, n_kept, ForKind::Unrolled, per_u, span));
        // 2. Across lanes of a warp.
        // Digits that straddle a warp boundary split into a lane part and a warp part.
        let ws = self.target.warp_size() as i64;
        let mut digits = vec![];
        for (ts, e) in f.thread_digits_along(dim) {
            if ts < ws && ts * e > ws && ws % ts == 0 && (ts * e) % ws == 0 {
                digits.push((ts, ws / ts));
                digits.push((ws, ts * e / ws));
            } else {
                digits.push((ts, e));
            }
        }
        let mut cross_warp = vec![];
        for (ts, e) in &digits {
            if ts * e <= ws && (e & (e - 1)) == 0 {
                let mut mask = *ts;
                while mask < ts * e {
                    let sh = Expr::call(
                        Intrinsic::ShflXor { width: ws as u32 },
                        vec![Expr::load(&tmp, vec![u.expr()]), Expr::int(mask)],
                        acc_t,
                    );
                    let merged = reduce_merge(r.kind, Expr::load(&tmp, vec![u.expr()]), sh);
                    out.push(for_loop(
                        &u,
                        n_kept,
                        ForKind::Unrolled,
                        store(&tmp, vec![u.expr()], merged, span),
                        span,
                    ));
                    mask *= 2;
                }
            } else if *ts >= ws {
                cross_warp.push((*ts, *e));
            } else {
                return Err(self
                    .unsupported(
                        span,
                        &format!(
                            "reducing fragment `{}` ({}): its threads along dim {dim} do not form power-of-two groups within warps",
                            r.src.buffer.name(),
                            f.to_cute()
                        ),
                    )
                    .help("use tile sizes and thread counts that are powers of two"));
            }
        }
        // 3. Across warps, through shared memory: one writer per (warp group, element).
        if !cross_warp.is_empty() {
            let groups: i64 = cross_warp.iter().map(|(_, e)| e).product();
            let numel: i64 = red.shape.iter().product();
            let scratch =
                self.scratch_shared("reduce", vec![Expr::int(groups * numel)], acc_t, span);
            // Slot of this thread among the cross-warp digits, and whether it is the first
            // holder of its elements within its group.
            let mut slot = Expr::int(0);
            let mut sstride = 1;
            for (ts, e) in &cross_warp {
                slot = slot + self.tid.floordiv(*ts).floormod(*e) * sstride;
                sstride *= e;
            }
            let mut writer = f.replica_index(&self.tid).eq_(0);
            for (ts, e) in &digits {
                if *ts < ws {
                    writer = writer.and(self.tid.floordiv(*ts).floormod(*e).eq_(0));
                }
            }
            let coords = red.coords(&self.tid, &u.expr());
            let mut flat = Expr::int(0);
            for (d, c) in coords.iter().enumerate() {
                flat = flat * red.shape[d] + c.clone();
            }
            let write = store(
                &scratch,
                vec![slot * numel + flat.clone()],
                Expr::load(&tmp, vec![u.expr()]),
                span,
            );
            out.push(if_then(
                Some(writer),
                for_loop(&u, n_kept, ForKind::Unrolled, write, span),
                span,
            ));
            out.push(self.sync(span));
            let sv = Var::new("g", DType::I32);
            let part = Expr::load(&scratch, vec![sv.expr() * numel + flat]);
            let combine = Stmt::seq(
                vec![
                    store(&tmp, vec![u.expr()], reduce_identity(r.kind, acc_t), span),
                    for_loop(
                        &sv,
                        groups,
                        ForKind::Unrolled,
                        store(
                            &tmp,
                            vec![u.expr()],
                            reduce_merge(r.kind, Expr::load(&tmp, vec![u.expr()]), part),
                            span,
                        ),
                        span,
                    ),
                ],
                span,
            );
            out.push(for_loop(&u, n_kept, ForKind::Unrolled, combine, span));
            // The scratch is reused by the next reduction.
            out.push(self.sync(span));
        }
        // 4. Into the destination.
        match r.dst.buffer.scope() {
            Scope::Fragment => {
                let fd = self.fragment_of(&r.dst.buffer, span)?;
                let dst = self.local_of(&r.dst.buffer, span)?;
                if !fd.equivalent(&red) {
                    return Err(Diagnostic::new(
                        tl_ir::DiagKind::LayoutConflict,
                        span,
                        format!(
                            "reduction result `{}` has layout {} but the reduction of `{}` gives {}",
                            r.dst.buffer.name(),
                            fd.to_cute_beside(&red),
                            r.src.buffer.name(),
                            red.to_cute_beside(&fd)
                        ),
                    ));
                }
                let val = if r.clear {
                    Expr::load(&tmp, vec![u.expr()])
                } else {
                    reduce_merge(
                        r.kind,
                        Expr::load(&dst, vec![u.expr()]).cast(acc_t),
                        Expr::load(&tmp, vec![u.expr()]),
                    )
                };
                out.push(for_loop(
                    &u,
                    n_kept,
                    ForKind::Unrolled,
                    store(&dst, vec![u.expr()], val, span),
                    span,
                ));
            }
            _ => {
                let coords = red.coords(&self.tid, &u.expr());
                let didx = crate::tile_util::region_index(&r.dst, &coords);
                let val = if r.clear {
                    Expr::load(&tmp, vec![u.expr()])
                } else {
                    reduce_merge(
                        r.kind,
                        Expr::load(&r.dst.buffer, didx.clone()).cast(acc_t),
                        Expr::load(&tmp, vec![u.expr()]),
                    )
                };
                let st = store(&r.dst.buffer, didx, val, span);
                out.push(if_then(
                    Some(red.replica_index(&self.tid).eq_(0)),
                    for_loop(&u, n_kept, ForKind::Unrolled, st, span),
                    span,
                ));
            }
        }
        Ok(Stmt::seq(out, span))
    }

    /// From shared memory: each destination element is folded serially by the thread(s) that
    /// own it (a fragment destination) or by one thread (a shared destination).
    fn reduce_shared(&mut self, r: &ReduceOp, span: Span) -> Result<Stmt, Diagnostic> {
        let ext = r
            .src
            .const_extents()
            .ok_or_else(|| self.unsupported(span, "a reduction with non-constant extents"))?;
        let dim = r.dim;
        let n = ext[dim];
        let kept: Vec<usize> = (0..ext.len()).filter(|&d| d != dim).collect();
        let out_shape: Vec<i64> = kept.iter().map(|&d| ext[d]).collect();
        let acc_t = accum_dtype(r.dst.buffer.dtype());
        let layout = match r.dst.buffer.scope() {
            Scope::Fragment => self.fragment_of(&r.dst.buffer, span)?,
            _ => Fragment::blocked(&out_shape, self.threads, 1),
        };
        let u = Var::new("u", DType::I32);
        let rv = Var::new("r", DType::I32);
        let coords = layout.coords(&self.tid, &u.expr());
        let mut sidx = r.src.offsets.clone();
        for (k, &d) in kept.iter().enumerate() {
            sidx[d] = sidx[d].clone() + coords.get(k).cloned().unwrap_or_else(|| Expr::int(0));
        }
        sidx[dim] = sidx[dim].clone() + rv.expr();
        let acc = tl_ir::Buffer::new("acc", vec![Expr::int(1)], acc_t, Scope::Var, span);
        let zero = vec![Expr::int(0)];
        let (dst_buf, didx, guard) = match r.dst.buffer.scope() {
            Scope::Fragment => (self.local_of(&r.dst.buffer, span)?, vec![u.expr()], None),
            _ => {
                let didx = crate::tile_util::region_index(&r.dst, &coords);
                (
                    r.dst.buffer.clone(),
                    didx,
                    Some(layout.replica_index(&self.tid).eq_(0)),
                )
            }
        };
        let init = if r.clear {
            reduce_identity(r.kind, acc_t)
        } else {
            Expr::load(&dst_buf, didx.clone()).cast(acc_t)
        };
        let x = Expr::load(&r.src.buffer, sidx).cast(acc_t);
        let body = Stmt::seq(
            vec![
                Stmt::new(StmtKind::Alloc(acc.clone()), span),
                store(&acc, zero.clone(), init, span),
                for_loop(
                    &rv,
                    n,
                    ForKind::Serial,
                    store(
                        &acc,
                        zero.clone(),
                        reduce_combine(r.kind, Expr::load(&acc, zero.clone()), x),
                        span,
                    ),
                    span,
                ),
                if_then(
                    guard,
                    store(&dst_buf, didx, Expr::load(&acc, zero), span),
                    span,
                ),
            ],
            span,
        );
        Ok(for_loop(
            &u,
            layout.local_size(),
            ForKind::Unrolled,
            body,
            span,
        ))
    }
}
