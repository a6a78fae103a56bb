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

/// Block number `linear` of a grid of `items × tiles` blocks, dealt so that consecutive
/// blocks take the tiles of a group of `group` items in rank order: ranks 0 of the group's
/// items, then ranks 1, and so on; the last group may have fewer items. Returns `[rank, item]`.
///
/// For grids whose tiles cost unequal amounts (causal attention: a query tile's rank is how
/// few keys it sees), the hardware's in-order dispatch then starts every group's costly tiles
/// first and ends the grid on cheap ones, while the blocks running at once still share the
/// few items of one group (their operands stay in L2). Dealt item by item instead, the grid
/// ends on the last item's costliest tile. Pure integer arithmetic; all values non-negative.
pub fn ranks_in_item_groups(linear: Expr, tiles: Expr, items: Expr, group: Expr) -> [Expr; 2] {
    let per_group = tiles * group.clone();
    let which = Expr::binary(BinOp::Div, linear.clone(), per_group.clone());
    let w = Expr::binary(BinOp::Mod, linear, per_group);
    let first = which * group.clone();
    let in_group = min(items - first.clone(), group);
    [
        Expr::binary(BinOp::Div, w.clone(), in_group.clone()),
        first + Expr::binary(BinOp::Mod, w, in_group),
    ]
}

/// ⌈a / b⌉ for non-negative integers (the number of tiles of size b covering a).
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

    /// Every block gets a distinct (rank, item); inside each group of items the blocks walk
    /// the ranks in order, each rank over the group's items; a short last group too.
    #[test]
    fn ranks_in_item_groups_deal_every_tile_once_rank_by_rank() {
        use crate::eval::{eval_int, Value};
        use std::collections::HashMap;
        let (l, t, n, g) = (
            Var::new("l", I32),
            Var::new("t", I32),
            Var::new("n", I32),
            Var::new("g", I32),
        );
        let [rank, item] = ranks_in_item_groups(l.expr(), t.expr(), n.expr(), g.expr());
        for (tiles, items, group) in [(32, 64, 4), (5, 7, 3), (1, 3, 8), (6, 1, 1), (4, 10, 10)] {
            let mut env = HashMap::new();
            env.insert(t.id(), Value::Int(tiles));
            env.insert(n.id(), Value::Int(items));
            env.insert(g.id(), Value::Int(group));
            let mut seen = std::collections::HashSet::new();
            for linear in 0..tiles * items {
                env.insert(l.id(), Value::Int(linear));
                let (r, i) = (
                    eval_int(&rank, &env).unwrap(),
                    eval_int(&item, &env).unwrap(),
                );
                assert!(
                    (0..tiles).contains(&r) && (0..items).contains(&i),
                    "{r} {i}"
                );
                assert!(
                    seen.insert((r, i)),
                    "({r}, {i}) twice at {tiles}x{items}/{group}"
                );
                let first = linear / (tiles * group) * group;
                let in_group = (items - first).min(group);
                let w = linear % (tiles * group);
                assert_eq!(
                    (r, i),
                    (w / in_group, first + w % in_group),
                    "block {linear}"
                );
            }
        }
    }
}
