//! Operator overloading so kernels read like math: `by * bm + i`, `x * 0.5`, `-x`, `!c`.
//! Also the free functions the DSL re-exports (`ceildiv`, `select`, `exp`, …).

use std::ops::{Add, BitAnd, BitOr, BitXor, Div, Mul, Neg, Not, Rem, Shl, Shr, Sub};

use crate::expr::{BinOp, Expr, UnOp, Var};

macro_rules! binop {
    ($trait:ident, $method:ident, $op:expr) => {
        impl<R: Into<Expr>> $trait<R> for Expr {
            type Output = Expr;
            fn $method(self, r: R) -> Expr {
                Expr::binary($op, self, r.into())
            }
        }
        impl<R: Into<Expr>> $trait<R> for &Expr {
            type Output = Expr;
            fn $method(self, r: R) -> Expr {
                Expr::binary($op, self.clone(), r.into())
            }
        }
        impl<R: Into<Expr>> $trait<R> for &Var {
            type Output = Expr;
            fn $method(self, r: R) -> Expr {
                Expr::binary($op, self.expr(), r.into())
            }
        }
        binop!(@lhs $trait, $method, $op, i64, f64);
    };
    (@lhs $trait:ident, $method:ident, $op:expr, $($t:ty),*) => {
        $(
            impl $trait<Expr> for $t {
                type Output = Expr;
                fn $method(self, r: Expr) -> Expr {
                    Expr::binary($op, Expr::from(self), r)
                }
            }
            impl $trait<&Expr> for $t {
                type Output = Expr;
                fn $method(self, r: &Expr) -> Expr {
                    Expr::binary($op, Expr::from(self), r.clone())
                }
            }
        )*
    };
}

binop!(Add, add, BinOp::Add);
binop!(Sub, sub, BinOp::Sub);
binop!(Mul, mul, BinOp::Mul);
binop!(Div, div, BinOp::Div);
binop!(Rem, rem, BinOp::Mod);
binop!(BitAnd, bitand, BinOp::BitAnd);
binop!(BitOr, bitor, BinOp::BitOr);
binop!(BitXor, bitxor, BinOp::BitXor);
binop!(Shl, shl, BinOp::Shl);
binop!(Shr, shr, BinOp::Shr);

impl Neg for Expr {
    type Output = Expr;
    fn neg(self) -> Expr {
        Expr::unary(UnOp::Neg, self)
    }
}
impl Neg for &Expr {
    type Output = Expr;
    fn neg(self) -> Expr {
        Expr::unary(UnOp::Neg, self.clone())
    }
}
impl Not for Expr {
    type Output = Expr;
    fn not(self) -> Expr {
        Expr::unary(UnOp::Not, self)
    }
}
impl Not for &Expr {
    type Output = Expr;
    fn not(self) -> Expr {
        Expr::unary(UnOp::Not, self.clone())
    }
}

/// ⌈a / b⌉ for non-negative integers (the number of tiles of size b covering a).
/// The logical (x, y) block indices of block number `tile` (x fastest) under the panel
/// rasterization of `use_swizzle(panel)`: the grid is walked in panels of `panel` rows of
/// blocks, column by column inside a panel, so consecutive blocks share operand tiles in L2.
/// The last panel may have fewer rows. Pure integer arithmetic in `tile`'s type; every value
/// is non-negative, so C's `/` and `%` are floor division.
pub fn panel_block_indices(tile: Expr, gx: Expr, gy: Expr, panel: u32) -> [Expr; 2] {
    let dt = tile.dtype();
    let panel = Expr::int_of(panel as i64, dt);
    let pw = panel.clone() * gx;
    let which = Expr::binary(BinOp::Div, tile.clone(), pw.clone());
    let r = Expr::binary(BinOp::Mod, tile, pw);
    let rows = min(gy - which.clone() * panel.clone(), panel.clone());
    [
        Expr::binary(BinOp::Div, r.clone(), rows.clone()),
        which * panel + Expr::binary(BinOp::Mod, r, rows),
    ]
}

pub fn ceildiv(a: impl Into<Expr>, b: impl Into<Expr>) -> Expr {
    let (a, b) = (a.into(), b.into());
    match b.as_int() {
        Some(c) => Expr::binary(BinOp::FloorDiv, a + (c - 1), b),
        None => Expr::binary(BinOp::FloorDiv, a + b.clone() - 1, b),
    }
}
pub fn floordiv(a: impl Into<Expr>, b: impl Into<Expr>) -> Expr {
    Expr::binary(BinOp::FloorDiv, a.into(), b.into())
}
pub fn floormod(a: impl Into<Expr>, b: impl Into<Expr>) -> Expr {
    Expr::binary(BinOp::FloorMod, a.into(), b.into())
}
pub fn min(a: impl Into<Expr>, b: impl Into<Expr>) -> Expr {
    Expr::binary(BinOp::Min, a.into(), b.into())
}
pub fn max(a: impl Into<Expr>, b: impl Into<Expr>) -> Expr {
    Expr::binary(BinOp::Max, a.into(), b.into())
}
pub fn select(c: impl Into<Expr>, a: impl Into<Expr>, b: impl Into<Expr>) -> Expr {
    Expr::select(c.into(), a.into(), b.into())
}
pub fn if_then_else(c: impl Into<Expr>, a: impl Into<Expr>, b: impl Into<Expr>) -> Expr {
    Expr::if_then_else(c.into(), a.into(), b.into())
}
pub fn pow(a: impl Into<Expr>, b: impl Into<Expr>) -> Expr {
    a.into().pow(b)
}

macro_rules! math_fn {
    ($($name:ident),*) => {
        $(
            pub fn $name(a: impl Into<Expr>) -> Expr {
                a.into().$name()
            }
        )*
    };
}
math_fn!(exp, exp2, log, log2, sqrt, rsqrt, tanh, sigmoid, abs, floor, ceil, erf, sin, cos);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType::*;

    #[test]
    fn operators_build_typed_trees() {
        let i = Var::new("i", I32);
        let e = &i * 4 + 2;
        assert_eq!(e.dtype(), I32);
        let f = 2.0 * Expr::from(&i);
        assert_eq!(f.dtype(), F32);
        let c = ceildiv(Var::new("n", I32), 128);
        assert_eq!(c.to_string(), "(n + 127) // 128");
        assert_eq!((-Expr::from(3)).dtype(), I32);
        assert_eq!((!i.expr().lt(3)).dtype(), Bool);
    }
}
