//! The [`Layout`] type: a function from coordinates to indices given by a shape and a stride.
//!
//! A layout `shape:stride` maps a coordinate to the inner product of the coordinate and the
//! strides; a linear index is first split into a coordinate colexicographically (first mode
//! fastest). Construction validates the invariants once (congruent, positive extents, size and
//! extent fit in `i64`), so that evaluation inside the domain can never overflow.

use crate::error::{cmul, LayoutError, Result};
use crate::int_tuple::{compact_col_major, compact_row_major, IntTuple};
use std::fmt;

/// A CuTe layout `shape:stride` with congruent [`IntTuple`]s, e.g. `(3,(2,4)):(177,(13,2))`.
///
/// Fields are private so that every `Layout` in existence satisfies the invariants checked by
/// [`Layout::new`]; read them with [`Layout::shape`] and [`Layout::stride`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Layout {
    shape: IntTuple,
    stride: IntTuple,
}

impl Layout {
    /// Build a layout, checking that shape and stride are congruent, that no tuple is empty,
    /// that every extent is >= 1, and that the size and the span `sum (s-1)*|d|` fit in i64.
    pub fn new(shape: IntTuple, stride: IntTuple) -> Result<Layout> {
        shape.check_nonempty("shape")?;
        stride.check_nonempty("stride")?;
        if !shape.congruent(&stride) {
            return Err(LayoutError::NotCongruent {
                shape: shape.to_string(),
                stride: stride.to_string(),
            });
        }
        let mut span: i64 = 1;
        for (s, d) in shape.leaves().into_iter().zip(stride.leaves()) {
            if s < 1 {
                return Err(LayoutError::NonPositiveShape {
                    shape: shape.to_string(),
                    extent: s,
                });
            }
            // |d| must be representable so that sign and magnitude can be split everywhere.
            let ad = d.checked_abs().ok_or_else(|| LayoutError::Overflow {
                what: format!("|{d}| in layout {shape}:{stride}"),
            })?;
            let term = cmul(s - 1, ad, "the span of a layout")?;
            span = span
                .checked_add(term)
                .ok_or_else(|| LayoutError::Overflow {
                    what: format!("the span of layout {shape}:{stride}"),
                })?;
        }
        shape.product().map_err(|_| LayoutError::Overflow {
            what: format!("the size of shape {shape}"),
        })?;
        Ok(Layout { shape, stride })
    }

    /// Internal constructor for layouts whose invariants follow from how they were computed.
    /// Falls back to the checked path in debug builds to catch mistakes.
    pub(crate) fn raw(shape: IntTuple, stride: IntTuple) -> Layout {
        debug_assert!(
            Layout::new(shape.clone(), stride.clone()).is_ok(),
            "{shape}:{stride}"
        );
        Layout { shape, stride }
    }

    /// Build from flat shape and stride slices; a single mode gives a rank-1 integer layout.
    pub fn from_flat(shape: &[i64], stride: &[i64]) -> Result<Layout> {
        let wrap = |v: &[i64]| {
            if v.len() == 1 {
                IntTuple::Int(v[0])
            } else {
                IntTuple::flat(v)
            }
        };
        Layout::new(wrap(shape), wrap(stride))
    }

    /// `n:1`, the identity on `[0, n)`.
    pub fn identity(n: i64) -> Result<Layout> {
        Layout::new(IntTuple::Int(n), IntTuple::Int(1))
    }

    /// Compact column-major (first mode fastest) layout of `shape` (CuTe's `make_layout(shape)`).
    pub fn col_major(shape: IntTuple) -> Result<Layout> {
        let stride = compact_col_major(&shape, 1)?;
        Layout::new(shape, stride)
    }

    /// Compact row-major (last mode fastest) layout of `shape`.
    pub fn row_major(shape: IntTuple) -> Result<Layout> {
        let stride = compact_row_major(&shape, 1)?;
        Layout::new(shape, stride)
    }

    /// The shape.
    pub fn shape(&self) -> &IntTuple {
        &self.shape
    }

    /// The stride.
    pub fn stride(&self) -> &IntTuple {
        &self.stride
    }

    /// Number of coordinates (product of the shape).
    pub fn size(&self) -> i64 {
        fn prod(t: &IntTuple) -> i64 {
            match t {
                IntTuple::Int(v) => *v,
                // Cannot overflow: the product was checked at construction.
                IntTuple::Tuple(v) => v.iter().map(prod).product(),
            }
        }
        prod(&self.shape)
    }

    /// `L(size-1) + 1`: one past the index of the last coordinate (CuTe's cosize). For layouts
    /// with negative strides this can be <= 0, as in CuTe.
    pub fn cosize(&self) -> i64 {
        self.call(self.size() - 1) + 1
    }

    /// Number of top-level modes (an integer shape has rank 1).
    pub fn rank(&self) -> usize {
        self.shape.rank()
    }

    /// Nesting depth of the shape (0 for an integer shape).
    pub fn depth(&self) -> usize {
        self.shape.depth()
    }

    /// Top-level mode `i` as a layout, or `None` past the rank.
    pub fn mode(&self, i: usize) -> Option<Layout> {
        Some(Layout {
            shape: self.shape.mode(i)?.clone(),
            stride: self.stride.mode(i)?.clone(),
        })
    }

    /// All top-level modes.
    pub fn modes(&self) -> Vec<Layout> {
        self.shape
            .modes()
            .into_iter()
            .zip(self.stride.modes())
            .map(|(shape, stride)| Layout { shape, stride })
            .collect()
    }

    /// The flat leaves as `(extent, stride)` pairs, left to right.
    pub fn flat_modes(&self) -> Vec<(i64, i64)> {
        self.shape
            .leaves()
            .into_iter()
            .zip(self.stride.leaves())
            .collect()
    }

    /// A layout whose modes are the given layouts: `make_layout(l0, l1, ...)`. Always a tuple
    /// (one layout gives a rank-1 tuple `(s):(d)`, as CuTe does).
    pub fn from_modes(modes: Vec<Layout>) -> Result<Layout> {
        let (shape, stride): (Vec<_>, Vec<_>) =
            modes.into_iter().map(|l| (l.shape, l.stride)).unzip();
        Layout::new(IntTuple::Tuple(shape), IntTuple::Tuple(stride))
    }

    /// Same function, shape and stride flattened to depth <= 1.
    pub fn flatten(&self) -> Layout {
        Layout {
            shape: self.shape.flatten(),
            stride: self.stride.flatten(),
        }
    }

    /// Append `x` as a new last mode (an integer-shaped layout first becomes a rank-1 tuple).
    pub fn append(&self, x: &Layout) -> Result<Layout> {
        let mut m = self.modes();
        m.push(x.clone());
        Layout::from_modes(m)
    }

    /// Prepend `x` as a new first mode.
    pub fn prepend(&self, x: &Layout) -> Result<Layout> {
        let mut m = vec![x.clone()];
        m.extend(self.modes());
        Layout::from_modes(m)
    }

    /// The modes of `self` followed by the modes of `other`.
    pub fn concat(&self, other: &Layout) -> Result<Layout> {
        let mut m = self.modes();
        m.extend(other.modes());
        Layout::from_modes(m)
    }

    /// Pad with `1:0` modes up to rank `r` (CuTe's `append<R>(layout)`); no-op if already there.
    pub fn pad_to_rank(&self, r: usize) -> Layout {
        if self.rank() >= r {
            return self.clone();
        }
        let mut m = self.modes();
        while m.len() < r {
            m.push(Layout {
                shape: IntTuple::Int(1),
                stride: IntTuple::Int(0),
            });
        }
        let (shape, stride): (Vec<_>, Vec<_>) = m.into_iter().map(|l| (l.shape, l.stride)).unzip();
        Layout {
            shape: IntTuple::Tuple(shape),
            stride: IntTuple::Tuple(stride),
        }
    }

    /// Evaluate at linear index `i` (CuTe's `layout(i)`). Exact for `0 <= i < size`; beyond the
    /// domain it follows CuTe's extension (the last mode absorbs the quotient), saturating at
    /// the `i64` range instead of overflowing. Use [`Layout::try_call`] for a checked result.
    pub fn call(&self, i: i64) -> i64 {
        // Walk the tree without allocating: this is the hot path of pictures, tests and any
        // caller that enumerates a layout.
        fn walk(s: &IntTuple, d: &IntTuple, last: bool, rest: &mut i128, acc: &mut i128) {
            match (s, d) {
                (IntTuple::Int(s), IntTuple::Int(d)) => {
                    let c = if last {
                        *rest
                    } else {
                        let s = i128::from(*s);
                        let c = *rest % s;
                        *rest /= s;
                        c
                    };
                    *acc = acc.saturating_add(c.saturating_mul(i128::from(*d)));
                }
                (IntTuple::Tuple(ss), IntTuple::Tuple(ds)) => {
                    let n = ss.len();
                    for (k, (s, d)) in ss.iter().zip(ds).enumerate() {
                        walk(s, d, last && k + 1 == n, rest, acc);
                    }
                }
                _ => {} // unreachable: shape and stride are congruent by construction
            }
        }
        // 64-bit first (128-bit division is a library call, and tiles are enumerated
        // element by element); the 128-bit walk only where 64 bits could overflow.
        fn walk64(
            s: &IntTuple,
            d: &IntTuple,
            last: bool,
            rest: &mut i64,
            acc: &mut i64,
        ) -> Option<()> {
            match (s, d) {
                (IntTuple::Int(s), IntTuple::Int(d)) => {
                    let c = if last {
                        *rest
                    } else {
                        let c = rest.checked_rem(*s)?;
                        *rest = rest.checked_div(*s)?;
                        c
                    };
                    *acc = acc.checked_add(c.checked_mul(*d)?)?;
                    Some(())
                }
                (IntTuple::Tuple(ss), IntTuple::Tuple(ds)) => {
                    let n = ss.len();
                    for (k, (s, d)) in ss.iter().zip(ds).enumerate() {
                        walk64(s, d, last && k + 1 == n, rest, acc)?;
                    }
                    Some(())
                }
                _ => Some(()),
            }
        }
        let (mut rest64, mut acc64) = (i, 0i64);
        if walk64(&self.shape, &self.stride, true, &mut rest64, &mut acc64).is_some() {
            return acc64;
        }
        let mut rest = i128::from(i);
        let mut acc: i128 = 0;
        walk(&self.shape, &self.stride, true, &mut rest, &mut acc);
        acc.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }

    /// Evaluate at `i`, requiring `0 <= i < size`.
    pub fn try_call(&self, i: i64) -> Result<i64> {
        if i < 0 || i >= self.size() {
            return Err(LayoutError::IndexOutOfRange {
                layout: self.to_string(),
                index: i,
                size: self.size(),
            });
        }
        Ok(self.call(i))
    }

    /// Map a coordinate to an index. The coordinate may be hierarchical (congruent with the
    /// shape) or have an integer where the shape has a tuple; that integer is split
    /// colexicographically over the sub-shape. Every coordinate must lie inside its mode.
    pub fn crd2idx(&self, coord: &IntTuple) -> Result<i64> {
        let bad = || LayoutError::BadCoordinate {
            coord: coord.to_string(),
            shape: self.shape.to_string(),
        };
        fn go(
            c: &IntTuple,
            s: &IntTuple,
            d: &IntTuple,
            bad: &dyn Fn() -> LayoutError,
        ) -> Result<i128> {
            match (c, s, d) {
                (IntTuple::Int(c), IntTuple::Int(s), IntTuple::Int(d)) => {
                    if *c < 0 || *c >= *s {
                        return Err(bad());
                    }
                    Ok(i128::from(*c) * i128::from(*d))
                }
                (IntTuple::Int(c), IntTuple::Tuple(_), _) => {
                    let l = Layout {
                        shape: s.clone(),
                        stride: d.clone(),
                    };
                    if *c < 0 || *c >= l.size() {
                        return Err(bad());
                    }
                    Ok(i128::from(l.call(*c)))
                }
                (IntTuple::Tuple(cs), IntTuple::Tuple(ss), IntTuple::Tuple(ds)) => {
                    if cs.len() != ss.len() {
                        return Err(bad());
                    }
                    let mut acc = 0i128;
                    for ((c, s), d) in cs.iter().zip(ss).zip(ds) {
                        acc += go(c, s, d, bad)?;
                    }
                    Ok(acc)
                }
                _ => Err(bad()),
            }
        }
        let v = go(coord, &self.shape, &self.stride, &bad)?;
        i64::try_from(v).map_err(|_| LayoutError::Overflow {
            what: "crd2idx".into(),
        })
    }

    /// Split a linear index into a coordinate congruent with the shape, colexicographically
    /// (first mode fastest; the last mode takes whatever is left, as in CuTe).
    pub fn idx2crd(&self, idx: i64) -> IntTuple {
        let leaves = self.shape.leaves();
        let n = leaves.len();
        let mut rest = idx;
        let coords: Vec<i64> = leaves
            .iter()
            .enumerate()
            .map(|(k, &s)| {
                if k + 1 == n {
                    rest
                } else {
                    let c = rest % s;
                    rest /= s;
                    c
                }
            })
            .collect();
        let mut it = coords.into_iter();
        self.shape.map(&mut |_| it.next().unwrap_or(0))
    }

    /// All values `L(0), ..., L(size-1)`. Allocates `size` elements: meant for small layouts
    /// (tests, printing); check [`Layout::size`] first when the layout comes from a user.
    pub fn values(&self) -> Vec<i64> {
        (0..self.size()).map(|i| self.call(i)).collect()
    }

    /// True when no two coordinates map to the same index. Enumerates the layout, so the same
    /// size caveat as [`Layout::values`] applies.
    pub fn is_injective(&self) -> bool {
        let mut v = self.values();
        v.sort_unstable();
        v.windows(2).all(|w| w[0] != w[1])
    }
}

/// A compact layout of `shape` whose strides follow `order`: the mode with the smallest order
/// value gets stride 1, the next the product of the shapes before it, and so on (CuTe's
/// `make_ordered_layout`, e.g. `(2,3,4,5)` with order `(2,0,3,1)` gives strides `(6,1,30,3)`).
/// `order` must be weakly congruent to `shape` (a leaf of `order` may cover a sub-tuple,
/// which is then laid out column-major) and its leaves must be distinct: CuTe silently gives
/// overlapping strides for repeated orders, which is never what a caller wants.
pub fn make_ordered_layout(shape: &IntTuple, order: &IntTuple) -> Result<Layout> {
    let err = |reason: &str| LayoutError::Order {
        shape: shape.to_string(),
        order: order.to_string(),
        reason: reason.to_string(),
    };
    if !order.weakly_congruent(shape) {
        return Err(err(
            "the order must have the shape's nesting (or be coarser)",
        ));
    }
    // product_like(shape, order): the size of the sub-shape under each order leaf.
    fn product_like(s: &IntTuple, o: &IntTuple, out: &mut Vec<Result<i64>>) {
        match (o, s) {
            (IntTuple::Int(_), _) => out.push(s.product()),
            (IntTuple::Tuple(os), IntTuple::Tuple(ss)) => {
                os.iter().zip(ss).for_each(|(o, s)| product_like(s, o, out))
            }
            (IntTuple::Tuple(_), IntTuple::Int(_)) => {}
        }
    }
    let mut sizes = Vec::new();
    product_like(shape, order, &mut sizes);
    let sizes: Vec<i64> = sizes.into_iter().collect::<Result<_>>()?;
    let orders = order.leaves();
    let mut sorted = orders.clone();
    sorted.sort_unstable();
    if sorted.windows(2).any(|w| w[0] == w[1]) {
        return Err(err("order values must be distinct"));
    }
    let mut starts = Vec::with_capacity(orders.len());
    for &o in &orders {
        let mut start = 1i64;
        for (&s, &o2) in sizes.iter().zip(&orders) {
            if o2 < o {
                start = cmul(start, s, "ordered strides")?;
            }
        }
        starts.push(start);
    }
    fn build(s: &IntTuple, o: &IntTuple, starts: &mut std::slice::Iter<i64>) -> Result<IntTuple> {
        match (o, s) {
            (IntTuple::Int(_), _) => compact_col_major(s, *starts.next().unwrap_or(&1)),
            (IntTuple::Tuple(os), IntTuple::Tuple(ss)) => Ok(IntTuple::Tuple(
                os.iter()
                    .zip(ss)
                    .map(|(o, s)| build(s, o, starts))
                    .collect::<Result<_>>()?,
            )),
            (IntTuple::Tuple(_), IntTuple::Int(_)) => Ok(s.clone()),
        }
    }
    let stride = build(shape, order, &mut starts.iter())?;
    Layout::new(shape.clone(), stride)
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.shape, self.stride)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::parse_layout;

    fn l(s: &str) -> Layout {
        parse_layout(s).unwrap()
    }

    #[test]
    fn doc_basics_example() {
        // layout-algebra.md: for (3,(2,3)):(3,(12,1)), idx2crd(16) = (1,(1,2)) and L(16) = 17.
        let a = l("(3,(2,3)):(3,(12,1))");
        assert_eq!(a.idx2crd(16).to_string(), "(1,(1,2))");
        assert_eq!(a.call(16), 17);
        assert_eq!(a.size(), 18);
        assert_eq!(a.cosize(), a.call(17) + 1);
        assert_eq!(a.crd2idx(&a.idx2crd(16)).unwrap(), 17);
        assert_eq!(a.crd2idx(&IntTuple::from([1, 5])).unwrap(), 17);
    }

    #[test]
    fn queries() {
        let a = l("(3,(2,4)):(177,(13,2))");
        assert_eq!(a.rank(), 2);
        assert_eq!(a.depth(), 2);
        assert_eq!(a.size(), 24);
        assert_eq!(a.mode(1).unwrap().to_string(), "(2,4):(13,2)");
        assert!(a.mode(2).is_none());
        assert_eq!(a.flatten().to_string(), "(3,2,4):(177,13,2)");
        assert_eq!(l("4:2").rank(), 1);
        assert_eq!(l("4:2").depth(), 0);
        assert_eq!(l("4:2").cosize(), 7);
    }

    #[test]
    fn append_prepend_concat() {
        let a = l("4:2");
        let b = l("(2,3):(1,8)");
        assert_eq!(a.append(&b).unwrap().to_string(), "(4,(2,3)):(2,(1,8))");
        assert_eq!(a.prepend(&b).unwrap().to_string(), "((2,3),4):((1,8),2)");
        assert_eq!(b.concat(&a).unwrap().to_string(), "(2,3,4):(1,8,2)");
        assert_eq!(a.pad_to_rank(3).to_string(), "(4,1,1):(2,0,0)");
        assert_eq!(
            Layout::from_modes(vec![a.clone()]).unwrap().to_string(),
            "(4):(2)"
        );
    }

    #[test]
    fn validation() {
        assert!(Layout::new(IntTuple::from([2, 3]), IntTuple::Int(1)).is_err());
        assert!(Layout::new(IntTuple::Int(0), IntTuple::Int(1)).is_err());
        assert!(Layout::new(IntTuple::Tuple(vec![]), IntTuple::Tuple(vec![])).is_err());
        assert!(Layout::new(IntTuple::from([1 << 40, 1 << 40]), IntTuple::from([1, 1])).is_err());
        assert!(Layout::new(IntTuple::Int(3), IntTuple::Int(i64::MAX)).is_err());
        assert!(Layout::new(IntTuple::Int(3), IntTuple::Int(i64::MIN)).is_err());
        assert!(Layout::new(IntTuple::Int(1), IntTuple::Int(i64::MIN)).is_err());
    }

    #[test]
    fn crd2idx_rejects_out_of_range() {
        let a = l("(3,(2,3)):(3,(12,1))");
        assert!(a.crd2idx(&IntTuple::from([3, 0])).is_err());
        assert!(a.crd2idx(&IntTuple::from([0, 6])).is_err());
        assert!(a.crd2idx(&IntTuple::from([0, 0, 0])).is_err());
        assert!(a.try_call(18).is_err());
        assert_eq!(a.try_call(17), Ok(a.call(17)));
        // Far outside the domain: saturates, never panics.
        let _ = l("(2,2):(1,4611686018427387904)").call(i64::MAX);
    }

    #[test]
    fn constructors() {
        assert_eq!(
            Layout::col_major(IntTuple::from([2, 3, 4]))
                .unwrap()
                .to_string(),
            "(2,3,4):(1,2,6)"
        );
        assert_eq!(
            Layout::row_major(IntTuple::from([2, 3, 4]))
                .unwrap()
                .to_string(),
            "(2,3,4):(12,4,1)"
        );
        assert_eq!(Layout::identity(8).unwrap().to_string(), "8:1");
        assert_eq!(Layout::from_flat(&[4], &[2]).unwrap().to_string(), "4:2");
    }

    #[test]
    fn ordered_layouts() {
        // The examples in CuTe's make_ordered_layout comment (static orders).
        let o = |s: &str, ord: &str| {
            let sh = crate::parse::parse_int_tuple(s).unwrap();
            let or = crate::parse::parse_int_tuple(ord).unwrap();
            make_ordered_layout(&sh, &or).map(|x| x.to_string())
        };
        assert_eq!(o("(2,2,2,2)", "(0,2,3,1)").unwrap(), "(2,2,2,2):(1,4,8,2)");
        assert_eq!(
            o("(2,3,4,5)", "(2,0,3,1)").unwrap(),
            "(2,3,4,5):(15,1,30,3)"
        );
        assert_eq!(o("((2,3),4)", "(1,0)").unwrap(), "((2,3),4):((4,8),1)");
        assert!(o("(2,3)", "(0,0)").is_err());
        assert!(o("(2,3)", "(0,1,2)").is_err());
    }
}
