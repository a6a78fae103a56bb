//! Element-wise tile work on the GPU: parallel loop nests (each thread runs the iterations its
//! layout gives it, fully unrolled so register arrays are indexed by constants), fill, atomic
//! add and cumsum.

use std::collections::HashMap;

use tl_ir::{
    AtomicOp, CumsumOp, DType, Diagnostic, Expr, FillOp, ForKind, Scope, Span, Stmt, StmtKind, Var,
};

use super::copy::unflatten;
use super::lower::Ctx;
use crate::tile_util::{
    accum_dtype, address_of, for_loop, if_then, in_bounds, nonunit_dims, region_index, store,
};

/// Values per thread up to which a loop over them is unrolled (register arrays need constant
/// indices); past it the loop stays rolled.
const UNROLL_LIMIT: i64 = 256;

fn writes_memory(s: &Stmt) -> bool {
    let mut w = false;
    s.walk(&mut |st| match &st.kind {
        StmtKind::Store { buffer, .. }
            if matches!(buffer.scope(), Scope::Shared | Scope::Global) =>
        {
            w = true
        }
        StmtKind::Eval(_) => w = true,
        _ => {}
    });
    w
}

impl Ctx<'_> {
    pub fn lower_parallel(&mut self, s: &Stmt) -> Result<Stmt, Diagnostic> {
        let span = s.span;
        // Peel the perfect nest.
        let mut vars: Vec<Var> = vec![];
        let mut cur = s;
        let key = match &s.kind {
            StmtKind::For(l) => l.var.id(),
            _ => return Err(Diagnostic::internal("lower_parallel on a non-loop")),
        };
        let body = loop {
            match &cur.kind {
                StmtKind::For(l) if l.kind == ForKind::Parallel => {
                    vars.push(l.var.clone());
                    cur = &l.body;
                }
                StmtKind::Seq(v)
                    if v.len() == 1
                        && matches!(&v[0].kind, StmtKind::For(l) if l.kind == ForKind::Parallel) =>
                {
                    cur = &v[0];
                }
                _ => break cur,
            }
        };
        let mut nested = false;
        body.walk(&mut |st| {
            if let StmtKind::For(l) = &st.kind {
                if l.kind == ForKind::Parallel {
                    nested = true;
                }
            }
            if let StmtKind::Op(_) = &st.kind {
                nested = true;
            }
        });
        if nested {
            return Err(self
                .unsupported(
                    span,
                    "a parallel loop nested inside another loop of a parallel nest",
                )
                .help("write multi-dimensional parallel loops as one `t.parallel([a, b], ..)`"));
        }
        let layout = self.layouts.nests.get(&key).cloned().ok_or_else(|| {
            Diagnostic::internal(format!(
                "no layout was inferred for the parallel loop at {span}"
            ))
        })?;
        let v = Var::new("v", DType::I32);
        let coords = layout.coords(&self.tid, &v.expr());
        let mut map = HashMap::new();
        for (var, c) in vars.iter().zip(&coords) {
            map.insert(var.id(), c.clone());
        }
        let b = self.translate_stmt(&body.substitute(&map));
        let b = if layout.replication() > 1 && writes_memory(body) {
            // Replicas would repeat the writes; the first holder does them.
            if_then(Some(layout.replica_index(&self.tid).eq_(0)), b, span)
        } else {
            b
        };
        let kind = if layout.local_size() <= UNROLL_LIMIT {
            ForKind::Unrolled
        } else {
            ForKind::Serial
        };
        Ok(for_loop(&v, layout.local_size(), kind, b, span))
    }

    pub fn lower_fill(&mut self, f: &FillOp, span: Span) -> Result<Stmt, Diagnostic> {
        let b = &f.dst.buffer;
        if b.scope() == Scope::Fragment {
            if !f.dst.is_full() {
                return Err(self.unsupported(span, "filling part of a fragment"));
            }
            let layout = self.fragment_of(b, span)?;
            let local = self.local_of(b, span)?;
            let v = Var::new("v", DType::I32);
            return Ok(for_loop(
                &v,
                layout.local_size(),
                ForKind::Unrolled,
                store(&local, vec![v.expr()], f.value.clone(), span),
                span,
            ));
        }
        if matches!(b.scope(), Scope::Local | Scope::Var) {
            return Err(self.unsupported(span, "a tile fill of a per-thread local buffer"));
        }
        let ext: Vec<i64> = nonunit_dims(&f.dst)
            .iter()
            .map(|&d| f.dst.extents[d].as_int().unwrap_or(1))
            .collect();
        let numel: i64 = ext.iter().product();
        let it = Var::new("it", DType::I32);
        let flat = it.expr() * self.threads + self.tid.clone();
        let coords = unflatten(&flat, &ext);
        let idx = region_index(&f.dst, &coords);
        let body = if_then(
            in_bounds(b, &idx),
            store(b, idx, f.value.clone(), span),
            span,
        );
        let body = if numel % self.threads != 0 {
            if_then(Some(flat.lt(numel)), body, span)
        } else {
            body
        };
        Ok(for_loop(
            &it,
            (numel + self.threads - 1) / self.threads,
            ForKind::Unrolled,
            body,
            span,
        ))
    }

    pub fn lower_atomic(&mut self, a: &AtomicOp, span: Span) -> Result<Stmt, Diagnostic> {
        let db = &a.dst.buffer;
        let add = |sv: Expr, didx: Vec<Expr>| -> Stmt {
            let call = Expr::call(
                a.kind.intrinsic(),
                vec![address_of(db, didx.clone()), sv.cast(db.dtype())],
                DType::Bool,
            );
            if_then(
                in_bounds(db, &didx),
                Stmt::new(StmtKind::Eval(call), span),
                span,
            )
        };
        if a.src.buffer.scope() == Scope::Fragment {
            let f = self.fragment_of(&a.src.buffer, span)?;
            let local = self.local_of(&a.src.buffer, span)?;
            if !a.src.is_full() {
                return Err(self.unsupported(span, "an atomic add of part of a fragment"));
            }
            let v = Var::new("v", DType::I32);
            let coords = f.coords(&self.tid, &v.expr());
            let fdims = nonunit_dims(&a.src);
            let fc: Vec<Expr> = fdims.iter().map(|&d| coords[d].clone()).collect();
            let didx = region_index(&a.dst, &fc);
            let body = add(Expr::load(&local, vec![v.expr()]), didx);
            let guard = (f.replication() > 1).then(|| f.replica_index(&self.tid).eq_(0));
            return Ok(if_then(
                guard,
                for_loop(&v, f.local_size(), ForKind::Unrolled, body, span),
                span,
            ));
        }
        let ext: Vec<i64> = nonunit_dims(&a.dst)
            .iter()
            .map(|&d| a.dst.extents[d].as_int().unwrap_or(1))
            .collect();
        let numel: i64 = ext.iter().product();
        let it = Var::new("it", DType::I32);
        let flat = it.expr() * self.threads + self.tid.clone();
        let coords = unflatten(&flat, &ext);
        let sidx = region_index(&a.src, &coords);
        let didx = region_index(&a.dst, &coords);
        let sv = Expr::load(&a.src.buffer, sidx.clone());
        let body = if_then(in_bounds(&a.src.buffer, &sidx), add(sv, didx), span);
        let body = if numel % self.threads != 0 {
            if_then(Some(flat.lt(numel)), body, span)
        } else {
            body
        };
        Ok(for_loop(
            &it,
            (numel + self.threads - 1) / self.threads,
            ForKind::Unrolled,
            body,
            span,
        ))
    }

    /// Cumsum on shared memory: one thread scans each line (a fragment is staged through
    /// shared memory).
    pub fn lower_cumsum(&mut self, c: &CumsumOp, span: Span) -> Result<Stmt, Diagnostic> {
        let ext = c
            .src
            .const_extents()
            .ok_or_else(|| self.unsupported(span, "a cumsum with non-constant extents"))?;
        let mut out = vec![];
        let stage = |cx: &mut Ctx, r: &tl_ir::Region| -> tl_ir::Region {
            let shape: Vec<Expr> = ext.iter().map(|&e| Expr::int(e)).collect();
            let s = cx.scratch_shared("cumsum", shape, r.buffer.dtype(), span);
            tl_ir::Region::full(&s)
        };
        let src = if c.src.buffer.scope() == Scope::Fragment {
            let s = stage(self, &c.src);
            out.push(self.lower_copy(&c.src, &s, span, false)?);
            out.push(self.sync(span));
            s
        } else {
            c.src.clone()
        };
        let frag_dst = c.dst.buffer.scope() == Scope::Fragment;
        let dst = if frag_dst {
            stage(self, &c.dst)
        } else {
            c.dst.clone()
        };
        if !matches!(src.buffer.scope(), Scope::Shared)
            || !matches!(dst.buffer.scope(), Scope::Shared)
        {
            return Err(self
                .unsupported(span, "a cumsum outside shared memory and fragments")
                .help("scan a shared buffer or a fragment"));
        }
        let dim = c.dim;
        let n = ext[dim];
        let outer: Vec<i64> = (0..ext.len())
            .filter(|&d| d != dim)
            .map(|d| ext[d])
            .collect();
        let lines: i64 = outer.iter().product();
        let it = Var::new("it", DType::I32);
        let line = it.expr() * self.threads + self.tid.clone();
        let oc = unflatten(&line, &outer);
        let r = Var::new("r", DType::I32);
        let pos = if c.reverse {
            Expr::int(n - 1) - r.expr()
        } else {
            r.expr()
        };
        let mut coords = vec![];
        let mut k = 0;
        for d in 0..ext.len() {
            if d == dim {
                coords.push(pos.clone());
            } else {
                coords.push(oc[k].clone());
                k += 1;
            }
        }
        let sidx: Vec<Expr> = src
            .offsets
            .iter()
            .zip(&coords)
            .map(|(o, c)| o.clone() + c.clone())
            .collect();
        let didx: Vec<Expr> = dst
            .offsets
            .iter()
            .zip(&coords)
            .map(|(o, c)| o.clone() + c.clone())
            .collect();
        let acc_t = accum_dtype(dst.buffer.dtype());
        let run = tl_ir::Buffer::new("run", vec![Expr::int(1)], acc_t, Scope::Var, span);
        let z = vec![Expr::int(0)];
        let scan = for_loop(
            &r,
            n,
            ForKind::Serial,
            Stmt::seq(
                vec![
                    store(
                        &run,
                        z.clone(),
                        Expr::load(&run, z.clone()) + Expr::load(&src.buffer, sidx).cast(acc_t),
                        span,
                    ),
                    store(&dst.buffer, didx, Expr::load(&run, z.clone()), span),
                ],
                span,
            ),
            span,
        );
        let per_line = Stmt::seq(
            vec![
                Stmt::new(StmtKind::Alloc(run.clone()), span),
                store(&run, z, Expr::int_of(0, acc_t), span),
                scan,
            ],
            span,
        );
        let per_line = if lines % self.threads != 0 {
            if_then(Some(line.lt(lines)), per_line, span)
        } else {
            per_line
        };
        out.push(for_loop(
            &it,
            (lines + self.threads - 1) / self.threads,
            ForKind::Serial,
            per_line,
            span,
        ));
        if frag_dst {
            out.push(self.sync(span));
            out.push(self.lower_copy(&dst, &c.dst, span, false)?);
        }
        Ok(Stmt::seq(out, span))
    }
}
