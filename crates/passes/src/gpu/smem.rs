//! Shared-memory layouts: a tile the tensor cores read (through ldmatrix) is stored swizzled so
//! the eight 16-byte rows one ldmatrix phase reads fall in different banks. The layout comes
//! from the layout algebra (`tl_layout::smem_swizzle_layout`, a CuTe `Sw<B,M,S> ∘ Layout`) and
//! is applied here to every access of the buffer, after lowering, as index arithmetic.

use std::collections::HashMap;

use tl_ir::{Buffer, Expr, ExprKind, Scope, Stmt, StmtKind};
use tl_layout::{ComposedLayout, IntTuple, Layout};

/// `x`'s digits over a (nested) shape, colexicographically, dotted with the strides.
fn mode_expr(x: &Expr, shape: &IntTuple, stride: &IntTuple) -> Expr {
    let shapes = shape.leaves();
    let strides = stride.leaves();
    let mut acc = Expr::int(0);
    let mut prefix = 1i64;
    let n = shapes.len();
    for (k, (s, d)) in shapes.iter().zip(strides).enumerate() {
        if *s > 1 && d != 0 {
            let q = if prefix == 1 {
                x.clone()
            } else {
                x.floordiv(prefix)
            };
            // The last digit takes the rest of the coordinate (no modulo needed in range).
            let digit = if k + 1 == n { q } else { q.floormod(*s) };
            acc = acc + digit * d;
        }
        prefix *= s;
    }
    acc
}

/// The offset `layout(r, c)` of a rank-2 layout, as an expression.
pub fn layout_expr(l: &Layout, r: &Expr, c: &Expr) -> Expr {
    let modes = l.modes();
    match modes.as_slice() {
        [m0, m1] => mode_expr(r, m0.shape(), m0.stride()) + mode_expr(c, m1.shape(), m1.stride()),
        _ => mode_expr(r, l.shape(), l.stride()),
    }
}

/// `Sw<B,M,S>(offset + layout(r, c))` as an expression.
pub fn composed_expr(l: &ComposedLayout, r: &Expr, c: &Expr) -> Expr {
    swizzle_expr(&l.swizzle, layout_expr(&l.layout, r, c) + l.offset)
}

/// `Sw<B,M,S>(x)` as an expression.
pub fn swizzle_expr(sw: &tl_layout::Swizzle, x: Expr) -> Expr {
    if sw.is_identity() {
        return x;
    }
    let (b, m, s) = (sw.b() as i64, sw.m() as i64, sw.s() as i64);
    let yyy = ((1i64 << b) - 1) << (m + s.max(0));
    let moved = if s >= 0 {
        (x.clone() & yyy) >> s
    } else {
        (x.clone() & yyy) << (-s)
    };
    x ^ moved
}

/// Does `l` (over a `rows × cols` tile) store each run of `v` elements of a row that starts at
/// a multiple of `v` as `v` consecutive offsets? Checked on every run: tiles are small.
pub fn keeps_runs(l: &ComposedLayout, rows: i64, cols: i64, v: i64) -> bool {
    if v <= 1 {
        return true;
    }
    memo_layout_check(l, (rows, cols, v, 0), || walk_runs(l, rows, cols, v))
}

/// A per-thread memo of whole-tile layout checks (they evaluate the layout at every element,
/// and the same few layouts are checked for every copy and every kernel lowered).
pub fn memo_layout_check(
    l: &ComposedLayout,
    key: (i64, i64, i64, i64),
    check: impl FnOnce() -> bool,
) -> bool {
    use std::cell::RefCell;
    type Memo = HashMap<(ComposedLayout, (i64, i64, i64, i64)), bool>;
    thread_local! {
        static MEMO: RefCell<Memo> = RefCell::new(HashMap::new());
    }
    if let Some(v) = MEMO.with(|m| m.borrow().get(&(l.clone(), key)).copied()) {
        return v;
    }
    let v = check();
    MEMO.with(|m| m.borrow_mut().insert((l.clone(), key), v));
    v
}

fn walk_runs(l: &ComposedLayout, rows: i64, cols: i64, v: i64) -> bool {
    if cols % v != 0 {
        return false;
    }
    (0..rows).all(|r| {
        (0..cols / v).all(|c| {
            let at = |c: i64| l.call(r + rows * c);
            let first = at(c * v);
            first % v == 0 && (1..v).all(|j| at(c * v + j) == first + j)
        })
    })
}

/// A layout over one (1-d) coordinate, as an expression.
pub fn layout_expr_1d(l: &Layout, x: &Expr) -> Expr {
    mode_expr(x, l.shape(), l.stride())
}

/// Rewrite every access of the buffers in `layouts` (keyed by buffer id; the buffers may carry
/// leading pipeline-stage dims before their two tile dims) into a flat, swizzled index into a
/// one-dimensional buffer of the same size.
pub fn apply(body: &Stmt, layouts: &HashMap<u64, (Buffer, ComposedLayout)>) -> Stmt {
    if layouts.is_empty() {
        return body.clone();
    }
    let flat: HashMap<u64, Buffer> = layouts
        .iter()
        .map(|(id, (b, _))| {
            let n = b.const_numel().unwrap_or(0);
            (*id, b.derive(b.name(), vec![Expr::int(n)], Scope::Shared))
        })
        .collect();
    let index = |b: &Buffer, idx: &[Expr]| -> Option<Expr> {
        let (_, l) = layouts.get(&b.id())?;
        // One index is already a physical element offset (a direct-to-LDS copy addresses the
        // slots it fills in storage order).
        if idx.len() == 1 {
            return Some(idx[0].clone());
        }
        let shape = b.const_shape()?;
        let rank = shape.len();
        if rank < 2 || idx.len() != rank {
            return None;
        }
        let (rows, cols) = (shape[rank - 2], shape[rank - 1]);
        let mut lead = Expr::int(0);
        for (d, i) in idx[..rank - 2].iter().enumerate() {
            lead = lead * shape[d] + i.clone();
        }
        Some(lead * (rows * cols) + composed_expr(l, &idx[rank - 2], &idx[rank - 1]))
    };
    fn ex(
        e: &Expr,
        flat: &HashMap<u64, Buffer>,
        index: &dyn Fn(&Buffer, &[Expr]) -> Option<Expr>,
    ) -> Expr {
        let e2 = e.map_children(&mut |c| ex(c, flat, index));
        if let ExprKind::Load(b, idx) = e2.kind() {
            if let (Some(nb), Some(i)) = (flat.get(&b.id()), index(b, idx)) {
                return Expr::load(nb, vec![i]);
            }
        }
        e2
    }
    let s = body.map_exprs(&mut |e| ex(e, &flat, &index));
    s.map_post(&mut |st| {
        let kind = match st.kind {
            StmtKind::Alloc(b) => StmtKind::Alloc(flat.get(&b.id()).cloned().unwrap_or(b)),
            StmtKind::Store {
                buffer,
                indices,
                value,
            } => match (flat.get(&buffer.id()), index(&buffer, &indices)) {
                (Some(nb), Some(i)) => StmtKind::Store {
                    buffer: nb.clone(),
                    indices: vec![i],
                    value,
                },
                _ => StmtKind::Store {
                    buffer,
                    indices,
                    value,
                },
            },
            k => k,
        };
        Stmt::new(kind, st.span)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap as Map;
    use tl_ir::eval::{eval_int, Value};
    use tl_ir::{DType, Var};

    #[test]
    fn expressions_match_the_algebra() {
        for (rows, cols) in [(64, 32), (128, 64), (64, 128), (32, 16)] {
            let sl = tl_layout::smem_swizzle_layout(rows, cols, 2).expect("layout");
            let r = Var::new("r", DType::I32);
            let c = Var::new("c", DType::I32);
            let e = composed_expr(&sl.layout, &r.expr(), &c.expr());
            for i in 0..rows {
                for j in 0..cols {
                    let mut env = Map::new();
                    env.insert(r.id(), Value::Int(i));
                    env.insert(c.id(), Value::Int(j));
                    let got = eval_int(&e, &env).expect("evaluates");
                    assert_eq!(
                        got,
                        sl.layout.call(i + rows * j),
                        "({i},{j}) of {rows}x{cols}"
                    );
                }
            }
        }
    }
}
