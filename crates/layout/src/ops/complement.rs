//! complement(A, M): the layout that fills in what A leaves out, up to cosize M.

use crate::error::{cmul, LayoutError, Result};
use crate::int_tuple::{ceil_div_tuple, IntTuple};
use crate::layout::Layout;
use crate::ops::coalesce::{coalesce, filter};

/// `complement(A, M)`: an ordered layout R (strictly increasing values) whose image meets
/// A's image only at 0, such that `(A, R)` is injective and `cosize((A, R)) >= M`.
///
/// Follows CuTe: filter A (drop stride-0 and size-1 modes), sort by stride, turn each gap
/// between strides into a mode, append a mode running up to M, coalesce. Stride-0 modes of A
/// are ignored (as in CuTe). Errors when A's strides overlap (A not injective, or strides
/// that do not nest like `(3,2):(2,3)`), when A has negative strides, or when M < 1.
pub fn complement(a: &Layout, cotarget: i64) -> Result<Layout> {
    complement_shape(a, &IntTuple::Int(cotarget))
}

/// [`complement`] with a shaped cotarget, as CuTe's logical_divide uses it
/// (`complement(B, shape(coalesce(A)))`): the rest mode is `ceil_div(cotarget, stride)`
/// computed leaf by leaf, which only differs from the integer form when nothing divides.
pub fn complement_shape(a: &Layout, cotarget: &IntTuple) -> Result<Layout> {
    let err = |reason: String| LayoutError::Complement {
        layout: a.to_string(),
        cotarget: cotarget.to_string(),
        reason,
    };
    if cotarget.leaves().iter().any(|&m| m < 1) {
        return Err(err("the cotarget must be >= 1".into()));
    }
    let total = cotarget.product()?;
    let f = filter(a);
    if f.stride() == &IntTuple::Int(0) {
        return Layout::col_major(IntTuple::Int(total));
    }
    let mut modes = f.flat_modes();
    if let Some(&(_, d)) = modes.iter().find(|m| m.1 < 0) {
        return Err(err(format!(
            "negative stride {d}; complement needs non-negative strides"
        )));
    }
    modes.sort_by_key(|m| m.1); // stable: ties keep their order, as CuTe's min-search does
    let mut shapes = Vec::with_capacity(modes.len() + 1);
    let mut strides = Vec::with_capacity(modes.len() + 1);
    let mut cur = 1i64;
    for &(s, d) in &modes {
        let gap = d / cur;
        if gap == 0 {
            return Err(err(format!(
                "the layout is not injective or its strides do not nest: stride {d} is smaller \
                 than {cur}, the extent already covered by the smaller strides"
            )));
        }
        shapes.push(gap);
        strides.push(cur);
        cur = cmul(d, s, "complement strides")?;
    }
    let rest = ceil_div_tuple(cotarget, cur).product()?;
    shapes.push(rest.max(1));
    strides.push(cur);
    let l = Layout::new(IntTuple::flat(&shapes), IntTuple::flat(&strides))?;
    Ok(coalesce(&l))
}

/// `ceil_div(target, tiler)` generalised to a layout tiler: the shape of the rest mode of
/// `logical_divide(target, tiler)` (CuTe's `ceil_div(Target, Layout)`, for grid sizes).
pub fn rest_shape(target: &IntTuple, tiler: &Layout) -> Result<IntTuple> {
    Ok(complement_shape(tiler, target)?.shape().clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::parse_layout;
    use crate::testutil::{arb_injective_layout, arb_layout};
    use proptest::prelude::*;

    fn comp(a: &str, m: i64) -> String {
        complement(&parse_layout(a).unwrap(), m)
            .map(|r| r.to_string())
            .unwrap_or_else(|e| e.to_string())
    }

    #[test]
    fn doc_examples() {
        assert_eq!(comp("4:1", 24), "6:4");
        assert_eq!(comp("6:4", 24), "4:1");
        assert_eq!(comp("(4,6):(1,4)", 24), "1:0");
        assert_eq!(comp("4:2", 24), "(2,3):(1,8)");
        assert_eq!(comp("(2,4):(1,6)", 24), "3:2");
        assert_eq!(comp("(2,2):(1,6)", 24), "(3,2):(2,12)");
    }

    #[test]
    fn errors() {
        let e = complement(&parse_layout("(4,2):(1,2)").unwrap(), 24).unwrap_err();
        assert!(e.to_string().contains("not injective"), "{e}");
        assert!(e.to_string().contains("(4,2):(1,2)"), "{e}");
        assert!(complement(&parse_layout("4:-1").unwrap(), 24).is_err());
        assert!(complement(&parse_layout("4:1").unwrap(), 0).is_err());
    }

    #[test]
    fn broadcast_and_shaped_cotargets() {
        assert_eq!(comp("4:0", 24), "24:1");
        let c = complement_shape(&parse_layout("4:2").unwrap(), &IntTuple::flat(&[4, 2, 3]));
        assert_eq!(c.unwrap().to_string(), "(2,3):(1,8)");
        assert_eq!(
            rest_shape(&IntTuple::flat(&[12, 8]), &parse_layout("4:1").unwrap()).unwrap(),
            IntTuple::Int(24)
        );
    }

    proptest! {
        #[test]
        fn complement_postconditions(a in arb_injective_layout(), extra in 1i64..4) {
            let m = a.cosize() * extra;
            let r = complement(&a, m).unwrap();
            // Ordered: strictly increasing.
            let v = r.values();
            prop_assert!(v.windows(2).all(|w| w[0] < w[1]), "{} -> {}", a, r);
            // (filter(A), R) is injective: images disjoint except at 0 and no aliasing.
            let ar = filter(&a).append(&r).unwrap();
            prop_assert!(ar.is_injective(), "({}, {}) not injective", a, r);
            // cosize((A, R)) >= M.
            prop_assert!(a.append(&r).unwrap().cosize() >= m, "{} {}", a, r);
        }

        #[test]
        fn complement_never_panics(a in arb_layout(), m in 1i64..100) {
            if let Ok(r) = complement(&a, m) {
                prop_assert!(r.values().windows(2).all(|w| w[0] < w[1]));
            }
        }
    }
}
