//! Offsets as linear forms: `Σ coef·atom + c`, so that the address arithmetic of the many
//! copies of an unrolled tile shares all but its last term (see `Emitter::address`).

use tl_ir::{BinOp, DType, Expr, ExprKind};

/// `e` (a signed element offset) as `Σ coef·atom + c` with `scale` applied: additions,
/// subtractions, multiplications and shifts by constants are expanded, a product of a sum
/// and a run-time value is distributed over the sum, and widening casts are pushed inward.
/// The last two assume signed arithmetic does not overflow — the assumption the CUDA
/// printer's C (where signed overflow is undefined) gives NVVM for the same expressions —
/// and offsets of buffers under 2^31 elements per index keep it true.
pub(super) fn linearize(e: &Expr, scale: i64, terms: &mut Vec<(Expr, i64)>, c: &mut i64) {
    let dt = e.dtype();
    let signed = matches!(dt, DType::I32 | DType::I64);
    let push = |atom: Expr, k: i64, terms: &mut Vec<(Expr, i64)>| {
        if let Some(t) = terms.iter_mut().find(|(a, _)| *a == atom) {
            t.1 = t.1.wrapping_add(k);
        } else {
            terms.push((atom, k));
        }
    };
    if !signed {
        push(e.clone(), scale, terms);
        return;
    }
    match e.kind() {
        ExprKind::Int(v) => *c = c.wrapping_add(scale.wrapping_mul(*v)),
        ExprKind::Bin(BinOp::Add, a, b) => {
            linearize(a, scale, terms, c);
            linearize(b, scale, terms, c);
        }
        ExprKind::Bin(BinOp::Sub, a, b) => {
            linearize(a, scale, terms, c);
            linearize(b, scale.wrapping_neg(), terms, c);
        }
        ExprKind::Bin(BinOp::Mul, a, b) if b.as_int().is_some() || a.as_int().is_some() => {
            let (x, k) = match b.as_int() {
                Some(k) => (a, k),
                None => (b, a.as_int().unwrap_or(1)),
            };
            linearize(x, scale.wrapping_mul(k), terms, c);
        }
        ExprKind::Bin(BinOp::Shl, a, b) if b.as_int().is_some_and(|k| (0..31).contains(&k)) => {
            let k = b.as_int().unwrap_or(0);
            linearize(a, scale.wrapping_mul(1i64 << k), terms, c);
        }
        ExprKind::Cast(a) if dt == DType::I64 && a.dtype() == DType::I32 => {
            let mut inner = vec![];
            let mut ic = 0i64;
            linearize(a, 1, &mut inner, &mut ic);
            *c = c.wrapping_add(scale.wrapping_mul(ic));
            for (atom, k) in inner {
                push(atom.cast(DType::I64), scale.wrapping_mul(k), terms);
            }
        }
        ExprKind::Bin(BinOp::Mul, a, b) => {
            // (Σ kᵢ·xᵢ + c)·y = Σ kᵢ·(xᵢ·y) + c·y, with the sum on either side.
            let split = |sum: &Expr, y: &Expr, terms: &mut Vec<(Expr, i64)>| -> bool {
                let mut inner = vec![];
                let mut ic = 0i64;
                linearize(sum, 1, &mut inner, &mut ic);
                if inner.len() + usize::from(ic != 0) < 2 {
                    return false;
                }
                for (atom, k) in inner {
                    push(atom * y.clone(), scale.wrapping_mul(k), terms);
                }
                if ic != 0 {
                    push(y.clone(), scale.wrapping_mul(ic), terms);
                }
                true
            };
            if !split(a, b, terms) && !split(b, a, terms) {
                push(e.clone(), scale, terms);
            }
        }
        _ => push(e.clone(), scale, terms),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;
    use tl_ir::BinOp;
    use tl_ir::Var;

    /// The value of `e` with `a`, `b` bound (by substitution and constant folding).
    fn value(e: &Expr, a: &Var, b: &Var, va: i64, vb: i64) -> i64 {
        let m: HashMap<u64, Expr> = [
            (a.id(), Expr::int_of(va, a.dtype())),
            (b.id(), Expr::int_of(vb, b.dtype())),
        ]
        .into_iter()
        .collect();
        tl_ir::simplify(&e.substitute(&m))
            .as_int()
            .expect("closed expressions fold")
    }

    /// Offset-like i32 expressions: sums, differences, products, shifts and the odd
    /// non-linear leaf, small enough never to overflow.
    fn offsets(a: Var, b: Var) -> impl Strategy<Value = Expr> {
        let leaf = prop_oneof![
            (-8i64..8).prop_map(Expr::int),
            Just(a.expr()),
            Just(b.expr()),
            Just(Expr::binary(BinOp::BitAnd, a.expr(), Expr::int(7))),
        ];
        leaf.prop_recursive(4, 24, 2, |inner| {
            prop_oneof![
                (inner.clone(), inner.clone()).prop_map(|(x, y)| x + y),
                (inner.clone(), inner.clone()).prop_map(|(x, y)| x - y),
                (inner.clone(), -4i64..5).prop_map(|(x, k)| x * k),
                (inner.clone(), inner.clone()).prop_map(|(x, y)| x * y),
                (inner.clone(), 0i64..4).prop_map(|(x, k)| Expr::binary(
                    BinOp::Shl,
                    x,
                    Expr::int(k)
                )),
            ]
        })
    }

    proptest! {
        /// Σ coef·atom + c is the offset itself, in 32 and (through a widening cast) 64 bits.
        #[test]
        fn linear_form_preserves_the_offset(
            e in offsets(Var::new("a", DType::I32), Var::new("b", DType::I32)),
            va in -50i64..50,
            vb in -50i64..50,
        ) {
            let mut vars = vec![];
            e.visit(&mut |x| if let Some(v) = x.as_var() { vars.push(v.clone()) });
            let a = vars.iter().find(|v| v.name() == "a").cloned().unwrap_or_else(|| Var::new("a", DType::I32));
            let b = vars.iter().find(|v| v.name() == "b").cloned().unwrap_or_else(|| Var::new("b", DType::I32));
            for e in [e.clone(), e.cast(DType::I64) * Expr::int_of(3, DType::I64)] {
                let mut terms = vec![];
                let mut c = 0;
                linearize(&e, 1, &mut terms, &mut c);
                let sum: i64 = terms
                    .iter()
                    .map(|(atom, k)| k * value(atom, &a, &b, va, vb))
                    .sum::<i64>()
                    + c;
                prop_assert_eq!(sum, value(&e, &a, &b, va, vb), "{:?} -> {:?} + {}", e, terms, c);
            }
        }
    }

    #[test]
    fn copies_of_a_tile_share_everything_but_the_row_stride() {
        // ((r + 32·i)·K + col) for i = 0..4 → the same atoms, K's coefficient differing.
        let (r, k, col) = (
            Var::new("r", DType::I32),
            Var::new("K", DType::I32),
            Var::new("col", DType::I32),
        );
        let mut seen = vec![];
        for i in 0..4 {
            let e = (r.expr() + 32 * i).cast(DType::I64) * k.expr().cast(DType::I64)
                + col.expr().cast(DType::I64);
            let mut terms = vec![];
            let mut c = 0;
            linearize(&tl_ir::simplify(&e), 1, &mut terms, &mut c);
            assert_eq!(c, 0);
            let kk = terms
                .iter()
                .find(|(a, _)| *a == k.expr().cast(DType::I64))
                .map(|t| t.1);
            assert_eq!(kk, if i == 0 { None } else { Some(32 * i) }, "{terms:?}");
            seen.push(terms.len());
        }
        assert_eq!(seen, vec![2, 3, 3, 3]);
    }
}
