//! Division and remainder by a power of two become a shift and a mask where the dividend is
//! known to be non-negative.
//!
//! Thread-index arithmetic is full of `tid / 16` and `tid % 8`. As signed 32-bit C
//! operations they need a sign fix-up (four or five PTX instructions each) unless NVVM can
//! prove the dividend non-negative, which it often cannot once the index has been cast and
//! combined. The range analysis here can, so the kernel source says `tid >> 4` and `tid & 7`
//! directly: less code for NVRTC to optimize and for ptxas to schedule. Runs last, after every
//! simplification that reasons about `/` and `%`.

use tl_ir::{Analyzer, BinOp, Diagnostics, Expr, ExprKind, Kernel};
use tl_target::Target;

use crate::simplify::{kernel_analyzer, rewrite_stmt};

pub fn run(k: Kernel, target: &Target) -> Result<Kernel, Diagnostics> {
    let _ = target;
    let mut an = kernel_analyzer(&k);
    let body = rewrite_stmt(&k.body, &mut an, &|an, e| reduce(e, an));
    Ok(k.with_body(body))
}

/// Rewrite bottom-up, so a rewritten operand's range (the analyzer bounds shifts and masks)
/// lets the expression around it be rewritten too: `((tid % 16) / 8)` → `((tid & 15) >> 3)`.
pub fn reduce(e: &Expr, an: &Analyzer) -> Expr {
    let e = e.map_children(&mut |c| reduce(c, an));
    let dt = e.dtype();
    let ExprKind::Bin(op, a, b) = e.kind() else {
        return e;
    };
    let (Some(c), true) = (b.as_int(), dt.is_int()) else {
        return e;
    };
    if c < 2 || c.count_ones() != 1 || an.bound(a).lo < 0 {
        return e;
    }
    match op {
        BinOp::Div | BinOp::FloorDiv => Expr::new(
            ExprKind::Bin(
                BinOp::Shr,
                a.clone(),
                Expr::int_of(c.trailing_zeros() as i64, dt),
            ),
            dt,
        ),
        BinOp::Mod | BinOp::FloorMod => Expr::new(
            ExprKind::Bin(BinOp::BitAnd, a.clone(), Expr::int_of(c - 1, dt)),
            dt,
        ),
        _ => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;
    use tl_ir::{DType, Var};

    fn thread() -> Expr {
        Expr::new(
            ExprKind::Call(tl_ir::Intrinsic::ThreadIdx, vec![]),
            DType::I32,
        )
    }

    fn bin(op: BinOp, a: Expr, b: i64) -> Expr {
        Expr::new(ExprKind::Bin(op, a, Expr::int(b)), DType::I32)
    }

    #[test]
    fn thread_index_division_becomes_shifts_and_masks() {
        let mut an = Analyzer::new();
        an.threads = Some(256);
        let e = bin(BinOp::Div, bin(BinOp::Mod, thread(), 16), 8);
        let r = reduce(&e, &an).to_string();
        assert!(!r.contains('/') && !r.contains('%'), "{r}");
        assert!(r.contains(">>") && r.contains('&'), "{r}");
    }

    #[test]
    fn possibly_negative_or_odd_divisions_stay() {
        let an = Analyzer::new();
        let x = Var::new("x", DType::I32);
        // x may be negative: truncating division by 8 is not a shift.
        let e = bin(BinOp::Div, x.expr(), 8);
        assert_eq!(reduce(&e, &an), e);
        let mut an = Analyzer::new();
        an.bind(&x, 0, 1000);
        // 12 is not a power of two.
        let e = bin(BinOp::Mod, x.expr(), 12);
        assert_eq!(reduce(&e, &an), e);
    }

    proptest! {
        /// The rewrite preserves the value wherever the analyzer's range holds.
        #[test]
        fn same_value_on_the_known_range(x in 0i64..100_000, k in 1u32..12, div in any::<bool>()) {
            let v = Var::new("x", DType::I32);
            let mut an = Analyzer::new();
            an.bind(&v, 0, 100_000);
            let e = bin(if div { BinOp::Div } else { BinOp::Mod }, v.expr(), 1 << k);
            let r = reduce(&e, &an);
            let env: HashMap<u64, tl_ir::eval::Value> =
                [(v.id(), tl_ir::eval::Value::Int(x))].into_iter().collect();
            prop_assert_eq!(tl_ir::eval::eval(&e, &env).ok(), tl_ir::eval::eval(&r, &env).ok());
        }
    }
}
