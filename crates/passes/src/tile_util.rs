//! Helpers shared by the tile-op lowerings: walking the elements of a region, bounds
//! predicates for global tiles, and loop nests.

use tl_ir::DType;
use tl_ir::{Buffer, Expr, For, ForKind, Intrinsic, Region, Scope, Span, Stmt, StmtKind, Var};

/// The dimensions of a region whose extent is not 1 (the ones a tile op iterates over).
pub fn nonunit_dims(r: &Region) -> Vec<usize> {
    (0..r.rank())
        .filter(|&d| r.extents[d].as_int() != Some(1))
        .collect()
}

/// Whether a copy between `a` and `b` reshapes: one is a fragment, the other global memory,
/// and their non-unit extents differ (both constant, with the same product, as the verifier
/// checks). Elements then pair up in row-major order ([`reshaped_vars`]). Copies the lowering
/// makes between other memories line tiles up by dims even where their shapes differ (an
/// epilogue staging part of a fragment's columns), and are not reshapes.
pub fn copy_reshapes(a: &Region, b: &Region) -> bool {
    let scopes = [a.buffer.scope(), b.buffer.scope()];
    scopes.contains(&Scope::Fragment) && scopes.contains(&Scope::Global) && shapes_differ(a, b)
}

/// Whether two regions' non-unit extents differ (both constant). The CPU lowering asks this of
/// the user's copies only, which the verifier has checked, and by then its fragments are
/// per-thread arrays: a difference there is a reshape ([`copy_reshapes`]).
pub fn shapes_differ(a: &Region, b: &Region) -> bool {
    match (squeezed_const_extents(a), squeezed_const_extents(b)) {
        (Some(x), Some(y)) => x != y,
        _ => false,
    }
}

/// The coordinates in a tile of extents `to` of the element at `vars` in a tile of extents
/// `from`, the two matched in row-major order (a reshape): linearize, then split.
pub fn reshaped_vars(from: &[i64], vars: &[Expr], to: &[i64]) -> Vec<Expr> {
    let mut linear = Expr::int(0);
    for (k, v) in vars.iter().enumerate() {
        let inner: i64 = from[k + 1..].iter().product();
        linear = linear + v.clone() * inner;
    }
    let linear = tl_ir::simplify::simplify(&linear);
    to.iter()
        .enumerate()
        .map(|(k, &e)| {
            let inner: i64 = to[k + 1..].iter().product();
            let q = if inner == 1 {
                linear.clone()
            } else {
                linear.clone().floordiv(inner)
            };
            tl_ir::simplify::simplify(&if k == 0 { q } else { q.floormod(e) })
        })
        .collect()
}

/// Constant extents of the non-unit dims.
pub fn squeezed_const_extents(r: &Region) -> Option<Vec<i64>> {
    nonunit_dims(r)
        .into_iter()
        .map(|d| r.extents[d].as_int())
        .collect()
}

/// Buffer indices of the element at `vars` (one per non-unit dim) of the region.
pub fn region_index(r: &Region, vars: &[Expr]) -> Vec<Expr> {
    let mut k = 0;
    (0..r.rank())
        .map(|d| {
            if r.extents[d].as_int() == Some(1) {
                r.offsets[d].clone()
            } else {
                let v = vars.get(k).cloned().unwrap_or_else(|| Expr::int(0));
                k += 1;
                r.offsets[d].clone() + v
            }
        })
        .collect()
}

/// `0 <= idx[d] < shape[d]` for every dim of a global buffer; None for on-chip buffers, whose
/// regions the verifier already checked.
pub fn in_bounds(buf: &Buffer, idx: &[Expr]) -> Option<Expr> {
    if buf.scope() != Scope::Global {
        return None;
    }
    let mut cond: Option<Expr> = None;
    for (i, s) in idx.iter().zip(buf.shape()) {
        let c = i.ge(0).and(i.lt(s.clone()));
        cond = Some(match cond {
            None => c,
            Some(p) => p.and(c),
        });
    }
    cond
}

/// Is the whole region inside its (global) buffer? None for on-chip buffers.
pub fn region_in_bounds(r: &Region) -> Option<Expr> {
    if r.buffer.scope() != Scope::Global {
        return None;
    }
    let mut cond: Option<Expr> = None;
    for d in 0..r.rank() {
        let c = r.offsets[d]
            .ge(0)
            .and((r.offsets[d].clone() + r.extents[d].clone()).le(r.buffer.shape()[d].clone()));
        cond = Some(match cond {
            None => c,
            Some(p) => p.and(c),
        });
    }
    cond
}

pub fn and_opt(a: Option<Expr>, b: Option<Expr>) -> Option<Expr> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.and(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

pub fn stmt(kind: StmtKind, span: Span) -> Stmt {
    Stmt::new(kind, span)
}

pub fn store(buf: &Buffer, idx: Vec<Expr>, value: Expr, span: Span) -> Stmt {
    stmt(
        StmtKind::Store {
            buffer: buf.clone(),
            indices: idx,
            value: value.cast(buf.dtype()),
        },
        span,
    )
}

pub fn if_then(cond: Option<Expr>, then: Stmt, span: Span) -> Stmt {
    match cond {
        None => then,
        Some(c) => stmt(
            StmtKind::If {
                cond: c,
                then_: Box::new(then),
                else_: None,
            },
            span,
        ),
    }
}

pub fn if_else(cond: Expr, then: Stmt, else_: Stmt, span: Span) -> Stmt {
    stmt(
        StmtKind::If {
            cond,
            then_: Box::new(then),
            else_: Some(Box::new(else_)),
        },
        span,
    )
}

pub fn for_loop(var: &Var, extent: i64, kind: ForKind, body: Stmt, span: Span) -> Stmt {
    stmt(
        StmtKind::For(Box::new(For {
            var: var.clone(),
            min: Expr::int(0),
            extent: Expr::int(extent),
            kind,
            body,
        })),
        span,
    )
}

/// Fresh loop variables, one per extent.
pub fn loop_vars(n: usize, prefix: &str) -> Vec<Var> {
    (0..n)
        .map(|d| Var::new(format!("{prefix}{d}"), DType::I32))
        .collect()
}

/// Wrap `body` in loops over `extents` (outermost first); the innermost gets `inner`, the rest
/// are serial.
pub fn loop_nest(vars: &[Var], extents: &[i64], inner: ForKind, body: Stmt, span: Span) -> Stmt {
    let mut s = body;
    for (d, (v, e)) in vars.iter().zip(extents).enumerate().rev() {
        let kind = if d + 1 == vars.len() {
            inner.clone()
        } else {
            ForKind::Serial
        };
        s = for_loop(v, *e, kind, s, span);
    }
    s
}

/// `Eval(op(args))`: an intrinsic evaluated for its effect.
pub fn eval(op: Intrinsic, args: Vec<Expr>, span: Span) -> Stmt {
    Stmt::new(StmtKind::Eval(Expr::call(op, args, DType::Bool)), span)
}

/// A block barrier.
pub fn sync(span: Span) -> Stmt {
    eval(Intrinsic::SyncThreads, vec![], span)
}

/// Whether `e` differs between the threads of a block: it reads `thread_idx`, a warp shuffle,
/// or a variable of `per_thread` (block-level `let`s computed from those, [`per_thread_lets`]).
pub fn varies_by_thread(e: &Expr, per_thread: &std::collections::HashSet<Var>) -> bool {
    e.any(&mut |x| match x.kind() {
        tl_ir::ExprKind::Call(
            Intrinsic::ThreadIdx
            | Intrinsic::ShflXor { .. }
            | Intrinsic::ShflDown { .. }
            | Intrinsic::ShflIdx { .. },
            _,
        ) => true,
        tl_ir::ExprKind::Var(v) => per_thread.contains(v),
        _ => false,
    })
}

/// The `let`s of `body` whose values differ between threads ([`varies_by_thread`]), a `let`
/// computed from an earlier one of them included (the walk is in program order).
pub fn per_thread_lets(body: &Stmt) -> std::collections::HashSet<Var> {
    let mut out = std::collections::HashSet::new();
    body.walk(&mut |s| {
        if let StmtKind::Let { var, value } = &s.kind {
            if varies_by_thread(value, &out) {
                out.insert(var.clone());
            }
        }
    });
    out
}

/// Whether `s` is `Eval(call)` of an intrinsic `pred` accepts.
pub fn is_call(s: &Stmt, pred: impl Fn(&Intrinsic) -> bool) -> bool {
    matches!(&s.kind, StmtKind::Eval(e) if matches!(e.kind(), tl_ir::ExprKind::Call(op, _) if pred(op)))
}

pub fn address_of(buf: &Buffer, idx: Vec<Expr>) -> Expr {
    Expr::call(Intrinsic::AddressOf, vec![Expr::load(buf, idx)], DType::U64)
}

/// The identity element of a reduction, and how to fold an element in.
pub fn reduce_identity(kind: tl_ir::ReduceKind, dt: DType) -> Expr {
    use tl_ir::ReduceKind::*;
    match kind {
        Sum | AbsSum | AbsMax => Expr::int_of(0, dt),
        Max => {
            if dt.is_float() {
                Expr::const_of(f64::NEG_INFINITY, dt)
            } else {
                Expr::int_of(dt.int_range().map(|r| r.0 as i64).unwrap_or(i64::MIN), dt)
            }
        }
        Min => {
            if dt.is_float() {
                Expr::const_of(f64::INFINITY, dt)
            } else {
                Expr::int_of(
                    dt.int_range()
                        .map(|r| r.1.min(i64::MAX as i128) as i64)
                        .unwrap_or(i64::MAX),
                    dt,
                )
            }
        }
    }
}

/// Fold one element `x` into the running value `acc`.
pub fn reduce_combine(kind: tl_ir::ReduceKind, acc: Expr, x: Expr) -> Expr {
    use tl_ir::ReduceKind::*;
    match kind {
        Sum => acc + x,
        AbsSum => acc + x.abs(),
        Max => acc.max(x),
        Min => acc.min(x),
        AbsMax => acc.max(x.abs()),
    }
}

/// Merge two partial results of a reduction.
pub fn reduce_merge(kind: tl_ir::ReduceKind, a: Expr, b: Expr) -> Expr {
    use tl_ir::ReduceKind::*;
    match kind {
        Sum | AbsSum => a + b,
        Max | AbsMax => a.max(b),
        Min => a.min(b),
    }
}

/// The type a reduction accumulates in: f32 for narrow floats, else the destination's type.
pub fn accum_dtype(dt: DType) -> DType {
    match dt {
        DType::F16 | DType::BF16 | DType::F8E4M3 | DType::F8E5M2 => DType::F32,
        d => d,
    }
}
