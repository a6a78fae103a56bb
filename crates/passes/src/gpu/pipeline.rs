//! Software pipelining of `t.pipelined(n, stages)` loops with cp.async.
//!
//! The producers are the copies from global to shared memory at the top level of the loop
//! body; their destination buffers get `stages` versions. Copies for iteration `k + stages - 1`
//! are issued (as cp.async groups) while iteration `k` computes on version `k % stages`, with
//! one barrier per iteration:
//!
//! ```text
//! for s in 0..stages-1: if s < n { issue(s) }; commit
//! for k in 0..n:
//!     wait_group(stages - 2); barrier    // k's data has landed, and everyone is done with k-1
//!     if k + stages - 1 < n { issue(k + stages - 1) }; commit   // refills k-1's version
//!     compute(k)
//! wait_group(0); barrier
//! ```
//! Commits are unconditional so group counting is uniform; empty groups complete at once.

use std::collections::{HashMap, HashSet};

use tl_ir::{
    Buffer, DType, DiagKind, Diagnostic, Expr, ExprKind, For, ForKind, Intrinsic, Region, Scope,
    Span, Stmt, StmtKind, TileOp, Var,
};
use tl_target::Target;

use super::lower::{Ctx, Hazards};
use crate::tile_util::{for_loop, if_then};

/// A pipelined loop the lowering will software-pipeline: its producers (indices into the
/// flattened body) and the buffers they fill.
#[derive(Clone, Debug)]
pub struct PipelinePlan {
    pub producers: Vec<usize>,
}

/// Shared buffers accessed anywhere outside the loop whose variable is `var`.
fn accessed_outside(root: &Stmt, var: &Var) -> HashSet<u64> {
    let mut out = HashSet::new();
    fn walk(s: &Stmt, var: &Var, out: &mut HashSet<u64>) {
        if let StmtKind::For(l) = &s.kind {
            if &l.var == var {
                return;
            }
        }
        let mut note = |b: &Buffer| {
            if b.scope() == Scope::Shared {
                out.insert(b.id());
            }
        };
        match &s.kind {
            StmtKind::Store { buffer, .. } => note(buffer),
            StmtKind::Op(op) => {
                let (r, w) = op.regions();
                r.into_iter().chain(w).for_each(|x| note(&x.buffer));
            }
            _ => {}
        }
        for e in s.exprs() {
            e.visit(&mut |x| {
                if let ExprKind::Load(b, _) = x.kind() {
                    if b.scope() == Scope::Shared {
                        out.insert(b.id());
                    }
                }
            });
        }
        match &s.kind {
            StmtKind::Seq(v) => v.iter().for_each(|x| walk(x, var, out)),
            StmtKind::If { then_, else_, .. } => {
                walk(then_, var, out);
                if let Some(e) = else_ {
                    walk(e, var, out);
                }
            }
            StmtKind::For(l) => walk(&l.body, var, out),
            _ => {}
        }
    }
    walk(root, var, &mut out);
    out
}

/// Find the loops to pipeline and the buffers that need stages.
pub fn plan(root: &Stmt, target: &Target) -> (HashMap<u64, PipelinePlan>, HashMap<u64, Buffer>) {
    let mut plans = HashMap::new();
    let mut versioned = HashMap::new();
    if !target.has_cp_async() {
        return (plans, versioned);
    }
    root.walk(&mut |s| {
        let StmtKind::For(l) = &s.kind else { return };
        let ForKind::Pipelined {
            stages, ref stage, ..
        } = l.kind
        else {
            return;
        };
        if stages < 2 {
            return;
        }
        let outside = accessed_outside(root, &l.var);
        let body = l.body.flattened();
        let mut producers = vec![];
        for (i, st) in body.iter().enumerate() {
            // With a `stage` annotation only the statements put in stage 0 run ahead.
            let may_run_ahead = stage.as_ref().is_none_or(|v| v.get(i) == Some(&0));
            if !may_run_ahead {
                continue;
            }
            if let StmtKind::Op(TileOp::Copy(c)) = &st.kind {
                let b = &c.dst.buffer;
                if c.src.buffer.scope() == Scope::Global
                    && b.scope() == Scope::Shared
                    && !outside.contains(&b.id())
                    && !versioned.contains_key(&b.id())
                    && !c.src.offsets.iter().any(uses_shared)
                {
                    let mut shape = vec![Expr::int(stages as i64)];
                    shape.extend(b.shape().iter().cloned());
                    versioned.insert(b.id(), b.derive(b.name(), shape, Scope::Shared));
                    producers.push(i);
                }
            }
        }
        if !producers.is_empty() {
            plans.insert(l.var.id(), PipelinePlan { producers });
        }
    });
    (plans, versioned)
}

fn uses_shared(e: &Expr) -> bool {
    e.any(&mut |x| matches!(x.kind(), ExprKind::Load(b, _) if b.scope() != Scope::Global))
}

/// Point every access of a versioned buffer at version `ver`.
fn version_stmt(s: &Stmt, versioned: &HashMap<u64, Buffer>, ver: &Expr) -> Stmt {
    fn ex(e: &Expr, m: &HashMap<u64, Buffer>, ver: &Expr) -> Expr {
        let e2 = e.map_children(&mut |c| ex(c, m, ver));
        if let ExprKind::Load(b, idx) = e2.kind() {
            if let Some(nb) = m.get(&b.id()) {
                let mut i = vec![ver.clone()];
                i.extend(idx.iter().cloned());
                return Expr::load(nb, i);
            }
        }
        e2
    }
    let s = s.map_exprs(&mut |e| ex(e, versioned, ver));
    s.map_post(&mut |st| {
        let kind = match st.kind {
            StmtKind::Store {
                buffer,
                indices,
                value,
            } => match versioned.get(&buffer.id()) {
                Some(nb) => {
                    let mut i = vec![ver.clone()];
                    i.extend(indices);
                    StmtKind::Store {
                        buffer: nb.clone(),
                        indices: i,
                        value,
                    }
                }
                None => StmtKind::Store {
                    buffer,
                    indices,
                    value,
                },
            },
            StmtKind::Op(mut op) => {
                for r in op.regions_mut() {
                    if let Some(nb) = versioned.get(&r.buffer.id()) {
                        *r = versioned_region(r, nb, ver);
                    }
                }
                StmtKind::Op(op)
            }
            k => k,
        };
        Stmt::new(kind, st.span)
    })
}

fn versioned_region(r: &Region, nb: &Buffer, ver: &Expr) -> Region {
    let mut offsets = vec![ver.clone()];
    offsets.extend(r.offsets.iter().cloned());
    let mut extents = vec![Expr::int(1)];
    extents.extend(r.extents.iter().cloned());
    Region::new(nb, offsets, extents)
}

impl Ctx<'_> {
    pub fn lower_pipeline(&mut self, l: &For, stages: u32, span: Span) -> Result<Stmt, Diagnostic> {
        self.check_schedule(l, stages, span)?;
        let Some(plan) = self.pipelines.get(&l.var.id()).cloned() else {
            // Nothing to prefetch: an ordinary loop.
            let mut l2 = l.clone();
            l2.kind = ForKind::Serial;
            let s = Stmt::new(StmtKind::For(Box::new(l2)), span);
            let mut hz = Hazards::default();
            return Ok(self.block(&s, &mut hz));
        };
        let s = stages as i64;
        let body = l.body.flattened();
        // How many wgmma groups stay in flight across iterations: 1 when the only consumer is
        // a wgmma gemm that asked for overlap, so tiles are refilled one iteration later (the
        // stage being refilled is then two iterations old, and its wgmma retired).
        let consumer_ids: Vec<usize> = (0..body.len())
            .filter(|i| !plan.producers.contains(i))
            .collect();
        let depth: i64 = match consumer_ids.as_slice() {
            [i] if s >= 3 => match &body[*i].kind {
                StmtKind::Op(TileOp::Gemm(g))
                    if g.wgmma_overlap
                        && super::wgmma::unsupported_because(g, &self.target, self.threads)
                            .is_none() =>
                {
                    1
                }
                _ => 0,
            },
            _ => 0,
        };
        let ahead_by = s - 1 - depth;
        let n = l.extent.clone();
        let lo = l.min.clone();
        let commit = self.eval(Intrinsic::CpAsyncCommit, vec![], span);
        let versioned = self.versioned.clone();
        let issue = |cx: &mut Ctx, it: Expr| -> Result<Stmt, Diagnostic> {
            let mut map = HashMap::new();
            map.insert(l.var.id(), lo.clone() + it.clone());
            let ver = it.floormod(s);
            let mut out = vec![];
            for &i in &plan.producers {
                let st = version_stmt(&body[i].substitute(&map), &versioned, &ver);
                if let StmtKind::Op(TileOp::Copy(c)) = &st.kind {
                    out.push(cx.lower_copy(&c.src, &c.dst, st.span, true)?);
                }
            }
            Ok(Stmt::seq(out, span))
        };
        let mut out = vec![];
        // Prologue.
        let sv = Var::new("stage", DType::I32);
        let pro = issue(self, sv.expr())?;
        out.push(for_loop(
            &sv,
            ahead_by,
            ForKind::Unrolled,
            Stmt::seq(
                vec![
                    if_then(Some(sv.expr().lt(n.clone())), pro, span),
                    commit.clone(),
                ],
                span,
            ),
            span,
        ));
        // Steady state.
        let k = Var::new(l.var.name(), DType::I32);
        let ahead = k.expr() + ahead_by;
        let fetch = issue(self, ahead.clone())?;
        let consumers: Vec<Stmt> = body
            .iter()
            .enumerate()
            .filter(|(i, _)| !plan.producers.contains(i))
            .map(|(_, st)| (*st).clone())
            .collect();
        let mut map = HashMap::new();
        map.insert(l.var.id(), lo.clone() + k.expr());
        let consume = version_stmt(
            &Stmt::seq(consumers, span).substitute(&map),
            &versioned,
            &k.expr().floormod(s),
        );
        // The fence below covers every shared buffer the consumers do not write themselves.
        let written = written_shared(&consume);
        let outer = self.async_fence_unless_written.replace(written);
        let outer_depth = std::mem::replace(&mut self.wgmma_depth, depth as u32);
        let outer_drain = std::mem::take(&mut self.wgmma_drain);
        let mut hz = Hazards::default();
        let consume = self.block(&consume, &mut hz);
        self.async_fence_unless_written = outer;
        self.wgmma_depth = outer_depth;
        let drain = std::mem::replace(&mut self.wgmma_drain, outer_drain);
        // wgmma reads shared memory through the async proxy: every thread fences its landed
        // cp.async writes (and any earlier writes) before the barrier that hands them to the
        // warpgroups.
        let fence = if issues_wgmma(&consume) {
            self.eval(Intrinsic::FenceProxyAsync, vec![], span)
        } else {
            Stmt::empty()
        };
        let steady = Stmt::seq(
            vec![
                self.eval(
                    Intrinsic::CpAsyncWait {
                        n: (ahead_by - 1) as u32,
                    },
                    vec![],
                    span,
                ),
                fence,
                self.sync(span),
                if_then(Some(ahead.lt(n.clone())), fetch, span),
                commit,
                consume,
            ],
            span,
        );
        out.push(Stmt::new(
            StmtKind::For(Box::new(For {
                var: k,
                min: Expr::int(0),
                extent: n,
                kind: ForKind::Serial,
                body: steady,
            })),
            span,
        ));
        if !drain.is_empty() {
            out.push(self.eval(Intrinsic::WgmmaWait { n: 0 }, drain, span));
        }
        out.push(self.eval(Intrinsic::CpAsyncWait { n: 0 }, vec![], span));
        out.push(self.sync(span));
        Ok(Stmt::seq(out, span))
    }

    /// The `order` / `stage` annotations this pipeliner can honour: the issue order is the
    /// body's order, and there are two stages — copies from global to shared memory that run
    /// `stages - 1` iterations ahead (stage 0) and everything else (stage `stages - 1`). The
    /// verifier has already checked the annotations' shape; this rejects, with the fix, the
    /// schedules it would otherwise silently not follow.
    fn check_schedule(&self, l: &For, stages: u32, span: Span) -> Result<(), Diagnostic> {
        let ForKind::Pipelined { order, stage, .. } = &l.kind else {
            return Ok(());
        };
        if let Some(o) = order {
            if o.iter().enumerate().any(|(i, &x)| x != i as i32) {
                return Err(Diagnostic::new(
                    DiagKind::Unsupported,
                    span,
                    format!(
                        "pipelined loop: reordering the body (`order` {o:?}) is not supported on {}",
                        self.target
                    ),
                )
                .help("write the statements in the order they should be issued and drop `order`"));
            }
        }
        let Some(st) = stage else { return Ok(()) };
        let last = stages.saturating_sub(1) as i32;
        let producers: &[usize] = self
            .pipelines
            .get(&l.var.id())
            .map_or(&[], |p| &p.producers);
        for (i, &x) in st.iter().enumerate() {
            if x > 0 && x < last {
                return Err(Diagnostic::new(
                    DiagKind::Unsupported,
                    span,
                    format!("pipelined loop: statement {i} is put in stage {x}, but this pipeliner has two stages"),
                )
                .help(format!("use stage 0 for copies that run ahead and {last} for the rest")));
            }
            if x == 0 && last > 0 && !producers.contains(&i) {
                return Err(Diagnostic::new(
                    DiagKind::Unsupported,
                    span,
                    format!("pipelined loop: statement {i} is put in stage 0, but only a copy from global to shared memory (into a tile used only inside this loop) can run ahead"),
                )
                .help(format!("give statement {i} stage {last}")));
            }
        }
        Ok(())
    }
}

/// Shared buffers a (tile-level) statement writes: stores and tile-op destinations.
fn written_shared(s: &Stmt) -> HashSet<u64> {
    let mut out = HashSet::new();
    s.walk(&mut |st| match &st.kind {
        StmtKind::Store { buffer, .. } if buffer.scope() == Scope::Shared => {
            out.insert(buffer.id());
        }
        StmtKind::Op(op) => {
            for r in op.regions().1 {
                if r.buffer.scope() == Scope::Shared {
                    out.insert(r.buffer.id());
                }
            }
        }
        _ => {}
    });
    out
}

/// Whether lowered code issues a wgmma anywhere.
fn issues_wgmma(s: &Stmt) -> bool {
    let mut found = false;
    s.walk(&mut |st| {
        if let StmtKind::Eval(e) = &st.kind {
            found |= matches!(e.kind(), ExprKind::Call(Intrinsic::Wgmma(_), _));
        }
    });
    found
}
