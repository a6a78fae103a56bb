//! Instruction selection for narrow-float stores: two adjacent f32 → bf16/f16 conversions into
//! a per-thread array become one `cvt.rn.{bf16,f16}x2.f32` and one 32-bit register write
//! instead of two conversions and a pack (the P fragment of attention and the epilogue's
//! staging pairs). The rounding is the same per element, so this is purely a printing choice.

use tl_ir::{Buffer, DType, Expr, ExprKind, For, ForKind, Scope, Stmt, StmtKind};

/// A store of a converted f32 value into a per-thread bf16/f16 array: (buffer, index, the f32
/// value).
pub fn narrow_store(s: &Stmt) -> Option<(&Buffer, &Expr, &Expr)> {
    let StmtKind::Store {
        buffer,
        indices,
        value,
    } = &s.kind
    else {
        return None;
    };
    if buffer.scope() != Scope::Local
        || !matches!(buffer.dtype(), DType::BF16 | DType::F16)
        || indices.len() != 1
    {
        return None;
    }
    match value.kind() {
        ExprKind::Cast(inner) if value.dtype() == buffer.dtype() && inner.dtype() == DType::F32 => {
            Some((buffer, &indices[0], inner))
        }
        _ => None,
    }
}

/// Two statements that store element `2k` and `2k + 1` (a constant, even `2k`) of the same
/// array: (buffer, index of the low element, low value, high value).
pub fn adjacent_pair<'a>(
    a: &'a Stmt,
    b: &'a Stmt,
) -> Option<(&'a Buffer, &'a Expr, &'a Expr, &'a Expr)> {
    let (ba, ia, va) = narrow_store(a)?;
    let (bb, ib, vb) = narrow_store(b)?;
    let (lo, hi) = (ia.as_int()?, ib.as_int()?);
    (ba == bb && lo % 2 == 0 && hi == lo + 1).then_some((ba, ia, va, vb))
}

/// An unrolled loop `for v in 0..2n { buf[v] = cvt(f(v)) }`: (buffer, f(v)); the loop can
/// run in steps of two storing `(f(v), f(v + 1))`.
pub fn pair_loop(l: &For) -> Option<(&Buffer, &Expr)> {
    if l.kind != ForKind::Unrolled || l.min.as_int() != Some(0) {
        return None;
    }
    let n = l.extent.as_int()?;
    if n < 2 || n % 2 != 0 {
        return None;
    }
    let body = match &l.body.kind {
        StmtKind::Seq(v) if v.len() == 1 => &v[0],
        _ => &l.body,
    };
    let (buf, idx, value) = narrow_store(body)?;
    (idx.as_var() == Some(&l.var)).then_some((buf, value))
}

/// The device helper that stores a converted pair.
pub fn pair_function(dt: DType) -> &'static str {
    if dt == DType::BF16 {
        "tl_store_bf16x2"
    } else {
        "tl_store_f16x2"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tl_ir::{Span, Var};

    fn buf(name: &str, dt: DType, scope: Scope) -> Buffer {
        Buffer::new(name, vec![Expr::int(8)], dt, scope, Span::UNKNOWN)
    }

    fn store(b: &Buffer, idx: Expr, v: Expr) -> Stmt {
        Stmt::new(
            StmtKind::Store {
                buffer: b.clone(),
                indices: vec![idx],
                value: v.cast(b.dtype()),
            },
            Span::UNKNOWN,
        )
    }

    #[test]
    fn pairs_only_even_adjacent_converted_stores_into_one_local_array() {
        let p = buf("p", DType::BF16, Scope::Local);
        let q = buf("q", DType::BF16, Scope::Local);
        let x = Var::new("x", DType::F32).expr();
        let s = |b: &Buffer, i: i64| store(b, Expr::int(i), x.clone());
        assert!(adjacent_pair(&s(&p, 2), &s(&p, 3)).is_some());
        assert!(
            adjacent_pair(&s(&p, 1), &s(&p, 2)).is_none(),
            "odd start: misaligned"
        );
        assert!(adjacent_pair(&s(&p, 2), &s(&q, 3)).is_none(), "two arrays");
        assert!(adjacent_pair(&s(&p, 3), &s(&p, 2)).is_none(), "descending");
        let g = buf("g", DType::BF16, Scope::Shared);
        assert!(
            adjacent_pair(&s(&g, 0), &s(&g, 1)).is_none(),
            "shared memory"
        );
        let f = buf("f", DType::F32, Scope::Local);
        assert!(
            adjacent_pair(&s(&f, 0), &s(&f, 1)).is_none(),
            "no conversion"
        );
    }

    #[test]
    fn pairs_loops_that_store_element_v() {
        let p = buf("p", DType::F16, Scope::Local);
        let v = Var::new("v", DType::I32);
        let lp = |idx: Expr, n: i64| For {
            var: v.clone(),
            min: Expr::int(0),
            extent: Expr::int(n),
            kind: ForKind::Unrolled,
            body: store(&p, idx, v.expr().cast(DType::F32)),
        };
        assert!(pair_loop(&lp(v.expr(), 8)).is_some());
        assert!(pair_loop(&lp(v.expr(), 7)).is_none(), "odd trip count");
        assert!(pair_loop(&lp(v.expr() + 1, 8)).is_none(), "shifted index");
    }
}
