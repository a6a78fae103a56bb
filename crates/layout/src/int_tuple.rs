//! Nested integer tuples: the shapes, strides and coordinates of CuTe layouts.
//!
//! An [`IntTuple`] is either an integer or a tuple of `IntTuple`s, e.g. `(3,(2,4))`. Shapes,
//! strides and coordinates are all `IntTuple`s; a layout pairs a shape with a congruent stride.
//! All arithmetic on them that can overflow is checked (see [`crate::LayoutError::Overflow`]).

use crate::error::{ceil_div, cmul, LayoutError, Result};
use std::fmt;

/// A nested tuple of integers (`i64`), printed in CuTe notation: `4`, `(2,3)`, `(3,(2,4))`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum IntTuple {
    /// A leaf integer.
    Int(i64),
    /// A tuple of sub-tuples. Layouts never hold an empty tuple.
    Tuple(Vec<IntTuple>),
}

impl From<i64> for IntTuple {
    fn from(v: i64) -> Self {
        IntTuple::Int(v)
    }
}

impl From<Vec<IntTuple>> for IntTuple {
    fn from(v: Vec<IntTuple>) -> Self {
        IntTuple::Tuple(v)
    }
}

impl From<&[i64]> for IntTuple {
    fn from(v: &[i64]) -> Self {
        IntTuple::Tuple(v.iter().map(|&x| IntTuple::Int(x)).collect())
    }
}

impl<const N: usize> From<[i64; N]> for IntTuple {
    fn from(v: [i64; N]) -> Self {
        IntTuple::from(&v[..])
    }
}

impl IntTuple {
    /// A flat tuple of integers.
    pub fn flat(v: &[i64]) -> Self {
        IntTuple::from(v)
    }

    /// True for a leaf integer.
    pub fn is_int(&self) -> bool {
        matches!(self, IntTuple::Int(_))
    }

    /// The leaf value, if this is a leaf.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            IntTuple::Int(v) => Some(*v),
            IntTuple::Tuple(_) => None,
        }
    }

    /// Number of top-level modes; an integer has rank 1 (as in CuTe).
    pub fn rank(&self) -> usize {
        match self {
            IntTuple::Int(_) => 1,
            IntTuple::Tuple(v) => v.len(),
        }
    }

    /// Nesting depth: 0 for an integer, 1 for a flat tuple, and so on.
    pub fn depth(&self) -> usize {
        match self {
            IntTuple::Int(_) => 0,
            IntTuple::Tuple(v) => 1 + v.iter().map(IntTuple::depth).max().unwrap_or(0),
        }
    }

    /// Mode `i` (for an integer, mode 0 is itself, as CuTe's `get<0>(int)`).
    pub fn mode(&self, i: usize) -> Option<&IntTuple> {
        match self {
            IntTuple::Int(_) if i == 0 => Some(self),
            IntTuple::Int(_) => None,
            IntTuple::Tuple(v) => v.get(i),
        }
    }

    /// The top-level modes as a vector (an integer yields a single mode).
    pub fn modes(&self) -> Vec<IntTuple> {
        match self {
            IntTuple::Int(_) => vec![self.clone()],
            IntTuple::Tuple(v) => v.clone(),
        }
    }

    /// The leaves in left-to-right order.
    pub fn leaves(&self) -> Vec<i64> {
        let mut out = Vec::new();
        self.collect_leaves(&mut out);
        out
    }

    fn collect_leaves(&self, out: &mut Vec<i64>) {
        match self {
            IntTuple::Int(v) => out.push(*v),
            IntTuple::Tuple(v) => v.iter().for_each(|t| t.collect_leaves(out)),
        }
    }

    /// Flattened to depth <= 1: an integer stays an integer, a tuple becomes a flat tuple.
    pub fn flatten(&self) -> IntTuple {
        match self {
            IntTuple::Int(_) => self.clone(),
            IntTuple::Tuple(_) => IntTuple::flat(&self.leaves()),
        }
    }

    /// Product of the leaves (the size of a shape), checked.
    pub fn product(&self) -> Result<i64> {
        self.leaves()
            .iter()
            .try_fold(1i64, |acc, &x| cmul(acc, x, "the product of a shape"))
    }

    /// Sum of the leaves, checked.
    pub fn sum(&self) -> Result<i64> {
        self.leaves().iter().try_fold(0i64, |acc, &x| {
            acc.checked_add(x).ok_or_else(|| LayoutError::Overflow {
                what: "a sum".into(),
            })
        })
    }

    /// Same tree structure (leaves may differ). CuTe's `congruent`.
    pub fn congruent(&self, other: &IntTuple) -> bool {
        match (self, other) {
            (IntTuple::Int(_), IntTuple::Int(_)) => true,
            (IntTuple::Tuple(a), IntTuple::Tuple(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.congruent(y))
            }
            _ => false,
        }
    }

    /// `self`'s tree is a prefix of `other`'s: every leaf of `self` sits where `other` has a
    /// leaf or a subtree. CuTe's `weakly_congruent` (used for profiles and orders).
    pub fn weakly_congruent(&self, other: &IntTuple) -> bool {
        match (self, other) {
            (IntTuple::Int(_), _) => true,
            (IntTuple::Tuple(_), IntTuple::Int(_)) => false,
            (IntTuple::Tuple(a), IntTuple::Tuple(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.weakly_congruent(y))
            }
        }
    }

    /// A tuple with the same structure as `self` and every leaf replaced by `f(leaf)`.
    pub fn map(&self, f: &mut impl FnMut(i64) -> i64) -> IntTuple {
        match self {
            IntTuple::Int(v) => IntTuple::Int(f(*v)),
            IntTuple::Tuple(v) => IntTuple::Tuple(v.iter().map(|t| t.map(f)).collect()),
        }
    }

    /// Fallible leaf-wise map.
    pub fn try_map(&self, f: &mut impl FnMut(i64) -> Result<i64>) -> Result<IntTuple> {
        Ok(match self {
            IntTuple::Int(v) => IntTuple::Int(f(*v)?),
            IntTuple::Tuple(v) => {
                IntTuple::Tuple(v.iter().map(|t| t.try_map(f)).collect::<Result<_>>()?)
            }
        })
    }

    /// Rebuild a tuple with `self`'s structure from a flat list of leaves (in order).
    /// Returns `None` when the number of leaves does not match.
    pub fn unflatten_like(&self, leaves: &[i64]) -> Option<IntTuple> {
        if self.leaves().len() != leaves.len() {
            return None;
        }
        let mut it = leaves.iter();
        Some(self.map(&mut |_| it.next().copied().unwrap_or(0)))
    }

    /// Wrap an integer in a rank-1 tuple; leave tuples alone (CuTe's `wrap`).
    pub fn wrap(self) -> Vec<IntTuple> {
        match self {
            IntTuple::Int(_) => vec![self],
            IntTuple::Tuple(v) => v,
        }
    }

    /// Reject empty tuples anywhere in the tree.
    pub(crate) fn check_nonempty(&self, what: &str) -> Result<()> {
        match self {
            IntTuple::Int(_) => Ok(()),
            IntTuple::Tuple(v) if v.is_empty() => Err(LayoutError::EmptyTuple {
                what: what.to_string(),
            }),
            IntTuple::Tuple(v) => v.iter().try_for_each(|t| t.check_nonempty(what)),
        }
    }
}

/// Compact column-major (LayoutLeft) strides for `shape`, starting at `start`: the first leaf
/// gets `start`, each next leaf the running product. CuTe's `compact_major<LayoutLeft>`;
/// like CuTe with static shapes, an extent-1 leaf gets stride 0 (it is never stepped over).
pub fn compact_col_major(shape: &IntTuple, start: i64) -> Result<IntTuple> {
    let mut cur = start;
    shape.try_map(&mut |s| {
        if s == 1 {
            return Ok(0);
        }
        let d = cur;
        cur = cmul(cur, s, "compact column-major strides")?;
        Ok(d)
    })
}

/// Compact row-major (LayoutRight) strides: the last leaf is fastest (extent-1 leaves get 0).
pub fn compact_row_major(shape: &IntTuple, start: i64) -> Result<IntTuple> {
    let leaves = shape.leaves();
    let mut strides = vec![0; leaves.len()];
    let mut cur = start;
    for (i, &s) in leaves.iter().enumerate().rev() {
        if s != 1 {
            strides[i] = cur;
            cur = cmul(cur, s, "compact row-major strides")?;
        }
    }
    let mut it = strides.into_iter();
    Ok(shape.map(&mut |_| it.next().unwrap_or(0)))
}

/// CuTe's `ceil_div(IntTuple, int)`: divide the leaves left to right, carrying what is left
/// of the divisor, e.g. `(4,5,6) / 40 -> (1,1,3)` (ceilings at every step).
pub fn ceil_div_tuple(a: &IntTuple, b: i64) -> IntTuple {
    let mut rest = b;
    a.map(&mut |x| {
        let q = ceil_div(x, rest.max(1));
        rest = ceil_div(rest, x.max(1));
        q
    })
}

impl fmt::Display for IntTuple {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IntTuple::Int(v) => write!(f, "{v}"),
            IntTuple::Tuple(v) => {
                write!(f, "(")?;
                for (i, t) in v.iter().enumerate() {
                    if i > 0 {
                        write!(f, ",")?;
                    }
                    write!(f, "{t}")?;
                }
                write!(f, ")")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(v: Vec<IntTuple>) -> IntTuple {
        IntTuple::Tuple(v)
    }
    fn i(v: i64) -> IntTuple {
        IntTuple::Int(v)
    }

    #[test]
    fn display_and_basics() {
        let x = t(vec![i(3), t(vec![i(2), i(4)])]);
        assert_eq!(x.to_string(), "(3,(2,4))");
        assert_eq!(x.rank(), 2);
        assert_eq!(x.depth(), 2);
        assert_eq!(x.product(), Ok(24));
        assert_eq!(x.leaves(), vec![3, 2, 4]);
        assert_eq!(x.flatten().to_string(), "(3,2,4)");
        assert_eq!(i(5).rank(), 1);
        assert_eq!(i(5).depth(), 0);
        assert_eq!(t(vec![i(5)]).to_string(), "(5)");
    }

    #[test]
    fn congruence() {
        let a = t(vec![i(3), t(vec![i(2), i(4)])]);
        let b = t(vec![i(1), t(vec![i(7), i(9)])]);
        assert!(a.congruent(&b));
        assert!(!a.congruent(&i(3)));
        assert!(t(vec![i(1), i(1)]).weakly_congruent(&a));
        assert!(i(1).weakly_congruent(&a));
        assert!(!a.weakly_congruent(&t(vec![i(1), i(1)])));
    }

    #[test]
    fn compact_strides() {
        let s = t(vec![i(3), t(vec![i(2), i(4)])]);
        assert_eq!(compact_col_major(&s, 1).unwrap().to_string(), "(1,(3,6))");
        assert_eq!(compact_row_major(&s, 1).unwrap().to_string(), "(8,(4,1))");
        assert!(compact_col_major(&IntTuple::flat(&[i64::MAX, 2, 2]), 1).is_err());
        let s = IntTuple::flat(&[2, 1, 3]);
        assert_eq!(compact_col_major(&s, 1).unwrap().to_string(), "(1,0,2)");
        assert_eq!(compact_row_major(&s, 1).unwrap().to_string(), "(3,0,1)");
    }

    #[test]
    fn ceil_div_like_cute() {
        let a = IntTuple::flat(&[4, 5, 6]);
        assert_eq!(ceil_div_tuple(&a, 40).to_string(), "(1,1,3)");
        assert_eq!(
            ceil_div_tuple(&IntTuple::flat(&[3, 4]), 2).to_string(),
            "(2,4)"
        );
        assert_eq!(ceil_div_tuple(&i(24), 8).to_string(), "3");
    }

    #[test]
    fn unflatten() {
        let s = t(vec![i(3), t(vec![i(2), i(4)])]);
        assert_eq!(
            s.unflatten_like(&[7, 8, 9]).unwrap().to_string(),
            "(7,(8,9))"
        );
        assert!(s.unflatten_like(&[7, 8]).is_none());
        assert!(s.unflatten_like(&[7, 8, 9, 10]).is_none());
    }
}
