//! Lower tile IR for the CPU: the block is one thread, so every tile op becomes a loop nest
//! over its elements (innermost loops marked vectorizable), parallel loops become plain loops,
//! pipelined loops become serial ones, and gemm becomes a call of the register-blocked
//! micro-kernel in the C runtime header.

use tl_ir::{
    Buffer, DType, DiagKind, Diagnostic, Diagnostics, Expr, ExprKind, ForKind, GemmOp, Intrinsic,
    Kernel, ReduceOp, Region, Scope, Span, Stmt, StmtKind, TileOp,
};
use tl_target::Target;

use crate::tile_util::*;

pub fn run(k: Kernel, _target: &Target) -> Result<Kernel, Diagnostics> {
    if k.attrs.dist.is_some() {
        // Its ranks would need threads that run at once and wait for each other's signals;
        // the CPU backend runs a launch's blocks one by one.
        return Err(Diagnostic::new(
            DiagKind::Unsupported,
            k.body.span,
            format!(
                "kernel `{}` is a multi-rank (distributed) kernel, which the CPU backend cannot run",
                k.name
            ),
        )
        .help("lower it for a GPU target; without a GPU, run the lowered kernel on several simulated ranks with `tl_sim::run_ranks`, and check it against a single-device reference")
        .into());
    }
    let mut waits = None;
    k.body.walk(&mut |s| {
        for e in s.exprs() {
            if e.any(&mut |x| matches!(x.kind(), ExprKind::Call(Intrinsic::WaitUntil { .. }, _))) {
                waits.get_or_insert(s.span);
            }
        }
    });
    if let Some(span) = waits {
        // A wait for another block would spin forever: the CPU runs blocks one by one.
        return Err(Diagnostic::new(
            DiagKind::Unsupported,
            span,
            format!(
                "kernel `{}` waits for a flag another block sets (a wait or a block barrier), which the CPU backend cannot run: it runs a launch's blocks one by one",
                k.name
            ),
        )
        .help("lower it for a GPU target and check it in the simulator (`tl_sim::run`), which runs every block at once")
        .into());
    }
    let mut errors = vec![];
    // The block is one thread: its fragments are plain per-thread arrays.
    let mut map = crate::remap::BufferMap::new();
    k.body.walk(&mut |s| {
        if let StmtKind::Alloc(b) = &s.kind {
            if b.scope() == Scope::Fragment {
                map.insert(b.id(), b.derive(b.name(), b.shape().to_vec(), Scope::Local));
            }
        }
    });
    let body = crate::remap::remap_stmt(&k.body, &map);
    // Gemms finish within the op here: a kernel's `wait_wgmma` has nothing to wait for.
    let body = body.map_post(&mut |st| match &st.kind {
        StmtKind::Eval(e) if matches!(e.kind(), ExprKind::Call(Intrinsic::WgmmaWait { .. }, _)) => {
            Stmt::empty()
        }
        _ => st,
    });
    let body = lower_stmt(&body, &mut errors);
    if !errors.is_empty() {
        return Err(Diagnostics(errors));
    }
    Ok(k.with_body(body))
}

fn lower_stmt(s: &Stmt, errors: &mut Vec<Diagnostic>) -> Stmt {
    let span = s.span;
    match &s.kind {
        StmtKind::Seq(v) => Stmt::seq(v.iter().map(|x| lower_stmt(x, errors)).collect(), span),
        StmtKind::If { cond, then_, else_ } => {
            check_expr(cond, span, errors);
            Stmt::new(
                StmtKind::If {
                    cond: cond.clone(),
                    then_: Box::new(lower_stmt(then_, errors)),
                    else_: else_.as_ref().map(|e| Box::new(lower_stmt(e, errors))),
                },
                span,
            )
        }
        StmtKind::For(l) => {
            let body = lower_stmt(&l.body, errors);
            let kind = match &l.kind {
                ForKind::Parallel if !contains_loop(&body) => ForKind::Vectorized,
                ForKind::Parallel | ForKind::Pipelined { .. } => ForKind::Serial,
                k => k.clone(),
            };
            let mut l2 = (**l).clone();
            l2.kind = kind;
            l2.body = body;
            Stmt::new(StmtKind::For(Box::new(l2)), span)
        }
        StmtKind::Op(op) => match lower_op(op, span) {
            Ok(s) => s,
            Err(d) => {
                errors.push(d);
                Stmt::empty()
            }
        },
        StmtKind::AnnotateLayout { .. } => Stmt::empty(),
        _ => {
            for e in s.exprs() {
                check_expr(e, span, errors);
            }
            s.clone()
        }
    }
}

fn contains_loop(s: &Stmt) -> bool {
    let mut found = false;
    s.walk(&mut |x| {
        if matches!(x.kind, StmtKind::For(_)) {
            found = true;
        }
    });
    found
}

fn check_expr(e: &Expr, span: Span, errors: &mut Vec<Diagnostic>) {
    if e.any(&mut |x| matches!(x.kind(), ExprKind::Call(Intrinsic::ThreadIdx, _))) {
        errors.push(
            Diagnostic::new(
                DiagKind::Unsupported,
                span,
                "thread_idx() has no meaning on the CPU backend, which runs each block as one thread",
            )
            .help("write the per-element work as a `t.parallel` loop, which every backend maps to its threads"),
        );
    }
}

fn lower_op(op: &TileOp, span: Span) -> Result<Stmt, Diagnostic> {
    match op {
        TileOp::Copy(c) => Ok(elementwise(&c.src, &c.dst, span, |v| v)),
        TileOp::Fill(f) => {
            let ext = extents(&f.dst, span)?;
            let vars = loop_vars(ext.len(), "f");
            let ve: Vec<Expr> = vars.iter().map(|v| v.expr()).collect();
            let idx = region_index(&f.dst, &ve);
            let pred = in_bounds(&f.dst.buffer, &idx);
            let body = if_then(pred, store(&f.dst.buffer, idx, f.value.clone(), span), span);
            Ok(loop_nest(&vars, &ext, ForKind::Vectorized, body, span))
        }
        TileOp::Atomic(a) => {
            let ext = extents(&a.dst, span)?;
            let vars = loop_vars(ext.len(), "a");
            let ve: Vec<Expr> = vars.iter().map(|v| v.expr()).collect();
            let sidx = region_index(&a.src, &ve);
            let didx = region_index(&a.dst, &ve);
            let val = Expr::load(&a.src.buffer, sidx.clone()).cast(a.dst.buffer.dtype());
            let call = Expr::call(
                a.kind.intrinsic(),
                vec![address_of(&a.dst.buffer, didx.clone()), val],
                DType::Bool,
            );
            let pred = and_opt(
                in_bounds(&a.src.buffer, &sidx),
                in_bounds(&a.dst.buffer, &didx),
            );
            let body = if_then(pred, Stmt::new(StmtKind::Eval(call), span), span);
            Ok(loop_nest(&vars, &ext, ForKind::Serial, body, span))
        }
        TileOp::Reduce(r) => lower_reduce(r, span),
        TileOp::Cumsum(c) => {
            let ext = full_extents(&c.src, span)?;
            let n = ext[c.dim];
            let outer_dims: Vec<usize> = (0..ext.len()).filter(|&d| d != c.dim).collect();
            let vars = loop_vars(outer_dims.len(), "c");
            let r = tl_ir::Var::new("r", DType::I32);
            let acc_t = accum_dtype(c.dst.buffer.dtype());
            let acc = Buffer::new("run", vec![Expr::int(1)], acc_t, Scope::Var, span);
            let pos = if c.reverse {
                Expr::int(n - 1) - r.expr()
            } else {
                r.expr()
            };
            let idx_of = |reg: &Region| -> Vec<Expr> {
                let mut k = 0;
                (0..ext.len())
                    .map(|d| {
                        if d == c.dim {
                            reg.offsets[d].clone() + pos.clone()
                        } else {
                            let v = vars[k].expr();
                            k += 1;
                            reg.offsets[d].clone() + v
                        }
                    })
                    .collect()
            };
            let sidx = idx_of(&c.src);
            let didx = idx_of(&c.dst);
            let zero = vec![Expr::int(0)];
            let sum = Expr::load(&acc, zero.clone()) + Expr::load(&c.src.buffer, sidx).cast(acc_t);
            let inner = Stmt::seq(
                vec![
                    store(&acc, zero.clone(), sum, span),
                    store(&c.dst.buffer, didx, Expr::load(&acc, zero.clone()), span),
                ],
                span,
            );
            let scan = for_loop(&r, n, ForKind::Serial, inner, span);
            let body = Stmt::seq(
                vec![
                    Stmt::new(StmtKind::Alloc(acc.clone()), span),
                    store(&acc, zero, Expr::int_of(0, acc_t), span),
                    scan,
                ],
                span,
            );
            let oext: Vec<i64> = outer_dims.iter().map(|&d| ext[d]).collect();
            Ok(loop_nest(&vars, &oext, ForKind::Serial, body, span))
        }
        TileOp::Gemm(g) => lower_gemm(g, span),
    }
}

fn extents(r: &Region, span: Span) -> Result<Vec<i64>, Diagnostic> {
    squeezed_const_extents(r).ok_or_else(|| non_const(r, span))
}

fn full_extents(r: &Region, span: Span) -> Result<Vec<i64>, Diagnostic> {
    r.const_extents().ok_or_else(|| non_const(r, span))
}

fn non_const(r: &Region, span: Span) -> Diagnostic {
    Diagnostic::new(
        DiagKind::ShapeMismatch,
        span,
        format!(
            "the tile of `{}` has extents that are not constants",
            r.buffer.name()
        ),
    )
}

/// `dst[i] = f(src[i])` over two regions of the same (squeezed) shape, with tail predicates
/// on global sides and a fast path without them when the whole tile is in bounds.
pub fn elementwise(src: &Region, dst: &Region, span: Span, f: impl Fn(Expr) -> Expr) -> Stmt {
    let ext = squeezed_const_extents(dst).unwrap_or_default();
    let vars = loop_vars(ext.len(), "e");
    let ve: Vec<Expr> = vars.iter().map(|v| v.expr()).collect();
    let reshapes = shapes_differ(src, dst);
    let sidx = if reshapes {
        let from = squeezed_const_extents(src).unwrap_or_default();
        region_index(src, &reshaped_vars(&ext, &ve, &from))
    } else {
        region_index(src, &ve)
    };
    let didx = region_index(dst, &ve);
    let build = |checked: bool| {
        let load = Expr::load(&src.buffer, sidx.clone());
        let val = f(load).cast(dst.buffer.dtype());
        let val = match (checked, in_bounds(&src.buffer, &sidx)) {
            (true, Some(p)) => Expr::if_then_else(p, val, Expr::int_of(0, dst.buffer.dtype())),
            _ => val,
        };
        let st = store(&dst.buffer, didx.clone(), val, span);
        let st = if checked {
            if_then(in_bounds(&dst.buffer, &didx), st, span)
        } else {
            st
        };
        loop_nest(&vars, &ext, ForKind::Vectorized, st, span)
    };
    let streamed = if reshapes {
        None
    } else {
        stream_rows(src, dst, span)
    };
    let fast = streamed.unwrap_or_else(|| build(false));
    match and_opt(region_in_bounds(src), region_in_bounds(dst)) {
        None => fast,
        Some(all_in) => if_else(all_in, fast, build(true), span),
    }
}

/// Bytes of a contiguous row from which an on-chip tile is streamed to a tensor.
const STREAM_BYTES: i64 = 4096;

/// An on-chip tile copied unchanged to a global tensor, row by row, with streaming stores
/// (`tl_stream_store`): long contiguous rows, same element type, no tail.
fn stream_rows(src: &Region, dst: &Region, span: Span) -> Option<Stmt> {
    if dst.buffer.scope() != Scope::Global
        || src.buffer.scope() == Scope::Global
        || src.buffer.dtype() != dst.buffer.dtype()
    {
        return None;
    }
    let ext = squeezed_const_extents(dst)?;
    let (&row, outer) = ext.split_last()?;
    let bytes = row * dst.buffer.dtype().bytes() as i64;
    let (sd, dd) = (nonunit_dims(src), nonunit_dims(dst));
    if bytes < STREAM_BYTES
        || sd.last() != Some(&(src.rank() - 1))
        || dd.last() != Some(&(dst.rank() - 1))
    {
        return None;
    }
    let vars = loop_vars(outer.len(), "r");
    let mut ve: Vec<Expr> = vars.iter().map(|v| v.expr()).collect();
    ve.push(Expr::int(0));
    let call = Expr::call(
        Intrinsic::Extern {
            name: "tl_stream_store".into(),
            pure: false,
        },
        vec![
            address_of(&dst.buffer, region_index(dst, &ve)),
            address_of(&src.buffer, region_index(src, &ve)),
            Expr::int_of(bytes, DType::I64),
        ],
        DType::Bool,
    );
    Some(loop_nest(
        &vars,
        outer,
        ForKind::Serial,
        Stmt::new(StmtKind::Eval(call), span),
        span,
    ))
}

fn lower_reduce(r: &ReduceOp, span: Span) -> Result<Stmt, Diagnostic> {
    let ext = full_extents(&r.src, span)?;
    let n = ext[r.dim];
    let kept: Vec<usize> = (0..ext.len())
        .filter(|&d| d != r.dim && ext[d] != 1)
        .collect();
    let vars = loop_vars(kept.len(), "o");
    let rv = tl_ir::Var::new("r", DType::I32);
    let mut src_idx = r.src.offsets.clone();
    for (v, &d) in vars.iter().zip(&kept) {
        src_idx[d] = src_idx[d].clone() + v.expr();
    }
    src_idx[r.dim] = src_idx[r.dim].clone() + rv.expr();
    let ve: Vec<Expr> = vars.iter().map(|v| v.expr()).collect();
    let dst_idx = region_index(&r.dst, &ve);
    let acc_t = accum_dtype(r.dst.buffer.dtype());
    let acc = Buffer::new("acc", vec![Expr::int(1)], acc_t, Scope::Var, span);
    let zero = vec![Expr::int(0)];
    let init = if r.clear {
        reduce_identity(r.kind, acc_t)
    } else {
        Expr::load(&r.dst.buffer, dst_idx.clone()).cast(acc_t)
    };
    let x = Expr::load(&r.src.buffer, src_idx).cast(acc_t);
    let step = store(
        &acc,
        zero.clone(),
        reduce_combine(r.kind, Expr::load(&acc, zero.clone()), x),
        span,
    );
    let body = Stmt::seq(
        vec![
            Stmt::new(StmtKind::Alloc(acc.clone()), span),
            store(&acc, zero.clone(), init, span),
            for_loop(&rv, n, ForKind::Vectorized, step, span),
            store(&r.dst.buffer, dst_idx, Expr::load(&acc, zero), span),
        ],
        span,
    );
    let oext: Vec<i64> = kept.iter().map(|&d| ext[d]).collect();
    Ok(loop_nest(&vars, &oext, ForKind::Serial, body, span))
}

/// Strides of the two non-unit (or last two) dims of a 2-d tile of an on-chip buffer.
fn tile_strides(r: &Region) -> Option<(i64, i64)> {
    let strides: Vec<i64> = r
        .buffer
        .row_major_strides()
        .iter()
        .map(|s| s.as_int())
        .collect::<Option<_>>()?;
    let mut dims = nonunit_dims(r);
    if dims.len() < 2 {
        let n = r.rank();
        if n < 2 {
            return None;
        }
        dims = vec![n - 2, n - 1];
    }
    Some((strides[dims[0]], strides[dims[1]]))
}

fn lower_gemm(g: &GemmOp, span: Span) -> Result<Stmt, Diagnostic> {
    let unsupported = |why: String| {
        Diagnostic::new(DiagKind::Unsupported, span, why)
            .help("on the CPU backend, gemm takes f32, f16, bf16 or float8 operands and an f32 accumulator")
    };
    let ct = g.c.buffer.dtype();
    if ct != DType::F32 {
        return Err(unsupported(format!("gemm with a {ct} accumulator")));
    }
    let at = g.a.buffer.dtype();
    if !matches!(
        at,
        DType::F32 | DType::F16 | DType::BF16 | DType::F8E4M3 | DType::F8E5M2
    ) {
        return Err(unsupported(format!("gemm with {at} operands")));
    }
    let (a0, a1) = tile_strides(&g.a).ok_or_else(|| non_const(&g.a, span))?;
    let (b0, b1) = tile_strides(&g.b).ok_or_else(|| non_const(&g.b, span))?;
    let (c0, c1) = tile_strides(&g.c).ok_or_else(|| non_const(&g.c, span))?;
    let cext = g.c.const_extents().ok_or_else(|| non_const(&g.c, span))?;
    let aext = g.a.const_extents().ok_or_else(|| non_const(&g.a, span))?;
    let csq: Vec<i64> = cext.iter().copied().filter(|&e| e != 1).collect();
    let (m, n) = match csq.len() {
        2 => (csq[0], csq[1]),
        _ => (cext[cext.len() - 2], cext[cext.len() - 1]),
    };
    let asq: Vec<i64> = aext.iter().copied().filter(|&e| e != 1).collect();
    let (ar, ac) = match asq.len() {
        2 => (asq[0], asq[1]),
        _ => (aext[aext.len() - 2], aext[aext.len() - 1]),
    };
    let k = if g.trans_a { ar } else { ac };
    // Logical A[m][k] and B[k][n] strides.
    let (a_ms, a_ks) = if g.trans_a { (a1, a0) } else { (a0, a1) };
    let (b_ks, b_ns) = if g.trans_b { (b1, b0) } else { (b0, b1) };
    let bt = g.b.buffer.dtype();
    let name = if bt == at {
        format!("tl_cpu_gemm_{}", at.name())
    } else if at.is_fp8() && bt.is_fp8() {
        format!("tl_cpu_gemm_{}_{}", at.name(), bt.name())
    } else {
        return Err(unsupported(format!("gemm with {at} × {bt} operands")));
    };
    let args = vec![
        address_of(&g.a.buffer, g.a.offsets.clone()),
        Expr::int_of(a_ms, DType::I64),
        Expr::int_of(a_ks, DType::I64),
        address_of(&g.b.buffer, g.b.offsets.clone()),
        Expr::int_of(b_ks, DType::I64),
        Expr::int_of(b_ns, DType::I64),
        address_of(&g.c.buffer, g.c.offsets.clone()),
        Expr::int_of(c0, DType::I64),
        Expr::int_of(c1, DType::I64),
        Expr::int(m),
        Expr::int(n),
        Expr::int(k),
        Expr::int(g.clear_accum as i64),
    ];
    let call = Expr::call(Intrinsic::Extern { name, pure: false }, args, DType::Bool);
    Ok(Stmt::new(StmtKind::Eval(call), span))
}
