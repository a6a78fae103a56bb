//! right_inverse, left_inverse and max_common_vector / max_common_layout.

use crate::error::{LayoutError, Result};
use crate::int_tuple::IntTuple;
use crate::layout::Layout;
use crate::ops::coalesce::coalesce;
use crate::ops::composition::composition;

/// The order in which CuTe visits modes sorted by stride. CuTe uses an exchange sort, which
/// is not stable: equal strides can come out in a different order than a stable sort gives,
/// and that changes which of two equally valid inverses is returned. Reproduce it exactly.
fn cute_sort_by_stride(modes: &[(i64, i64)]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..modes.len()).collect();
    for i in 0..order.len() {
        for j in i + 1..order.len() {
            if modes[order[j]].1 < modes[order[i]].1 {
                order.swap(i, j);
            }
        }
    }
    order
}

/// Flat modes of `coalesce(l)` with the exclusive prefix products of their extents.
fn coalesced_with_prefix(l: &Layout) -> (Vec<(i64, i64)>, Vec<i64>) {
    let modes = coalesce(l).flat_modes();
    let mut pre = Vec::with_capacity(modes.len());
    let mut p = 1i64;
    for &(s, _) in &modes {
        pre.push(p);
        p = p.saturating_mul(s); // bounded by size(l)
    }
    (modes, pre)
}

/// `right_inverse(L)`: the largest compact R with `L(R(i)) = i` for all `i < size(R)`.
///
/// CuTe's algorithm: coalesce, sort modes by stride, and chain the modes whose stride equals
/// the extent covered so far. Modes that do not fit the chain (stride 0, gaps) are skipped
/// and later modes may still extend it, which is where C++ and pycute differ.
pub fn right_inverse(l: &Layout) -> Layout {
    let (modes, pre) = coalesced_with_prefix(l);
    let order = cute_sort_by_stride(&modes);
    let mut shapes = vec![1i64];
    let mut strides = vec![0i64];
    let mut curr = 1i64;
    for i in order {
        let (s, d) = modes[i];
        if d == curr {
            shapes.push(s);
            strides.push(pre[i]);
            match s.checked_mul(d) {
                Some(c) => curr = c,
                None => break,
            }
        }
    }
    coalesce(&Layout::raw(
        IntTuple::flat(&shapes),
        IntTuple::flat(&strides),
    ))
}

/// `left_inverse(L)`: R with `R(L(i)) = i` for every i when L is injective, and
/// `L(R(L(i))) = L(i)` (a quasi-inverse) when L is injective apart from stride-0 (broadcast)
/// modes. CuTe's algorithm: coalesce, sort by stride, and each non-zero stride must be
/// divisible by the previous one. Errors when that fails (e.g. `(2,2):(3,2)`) and when
/// non-zero strides overlap (e.g. `(4,2):(1,2)`), where CuTe's result is no quasi-inverse.
pub fn left_inverse(l: &Layout) -> Result<Layout> {
    let (modes, pre) = coalesced_with_prefix(l);
    if let Some(&(_, d)) = modes.iter().find(|m| m.1 < 0) {
        return Err(LayoutError::LeftInverse {
            layout: l.to_string(),
            reason: format!("negative stride {d}; left_inverse needs non-negative strides"),
        });
    }
    let order = cute_sort_by_stride(&modes);
    let mut shapes = Vec::new();
    let mut strides = vec![0i64];
    let mut covered = 1i64;
    let mut reach = 1i64; // one past the largest index the smaller strides reach
    for &i in &order {
        let (s, d) = modes[i];
        if d == 0 {
            continue;
        }
        if d < reach {
            // CuTe returns a layout here that is not even a quasi-inverse.
            return Err(LayoutError::LeftInverse {
                layout: l.to_string(),
                reason: format!(
                    "it is not injective apart from its stride-0 modes: stride {d} falls inside \
                     the {reach} indices already reached by smaller strides"
                ),
            });
        }
        reach = d.saturating_mul(s);
        if d % covered != 0 {
            return Err(LayoutError::LeftInverse {
                layout: l.to_string(),
                reason: format!(
                    "stride {d} is not divisible by {covered}, the extent covered by the \
                     smaller strides"
                ),
            });
        }
        shapes.push(d / covered);
        strides.push(pre[i]);
        covered = d;
    }
    let last = order.last().map_or(1, |&i| modes[i].0);
    shapes.push(last);
    Layout::new(IntTuple::flat(&shapes), IntTuple::flat(&strides)).map(|r| coalesce(&r))
}

/// The largest N such that `a(R(n)) = b(R(n)) = n` for all `n < N`, where R is b's right
/// inverse: how many contiguous elements a and b agree on (the vector width for a copy
/// between two tensors laid out by a and b). Always >= 1. When `a ∘ right_inverse(b)` cannot
/// be expressed (divisibility fails), answers the always-safe 1.
pub fn max_common_vector(a: &Layout, b: &Layout) -> i64 {
    match composition(a, right_inverse(b)) {
        Ok(c) => {
            let c = coalesce(&c);
            match c.flat_modes().first() {
                Some(&(s, 1)) => s,
                _ => 1,
            }
        }
        Err(_) => 1,
    }
}

/// The layout R of [`max_common_vector`]: `a(R(i)) = b(R(i)) = i` for `i < size(R)`
/// (`1:0` when nothing beyond element 0 is shared).
pub fn max_common_layout(a: &Layout, b: &Layout) -> Layout {
    let inv_b = right_inverse(b);
    let trivial = Layout::raw(IntTuple::Int(1), IntTuple::Int(0));
    let Ok(common) = composition(a, &inv_b) else {
        return trivial;
    };
    let common = coalesce(&common);
    match common.flat_modes().first() {
        Some(&(s, 1)) => match Layout::identity(s).and_then(|id| composition(&inv_b, id)) {
            Ok(r) => r,
            Err(_) => trivial,
        },
        _ => trivial,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::parse_layout;
    use crate::testutil::{arb_compact_layout, arb_injective_layout, arb_layout};
    use proptest::prelude::*;

    fn l(s: &str) -> Layout {
        parse_layout(s).unwrap()
    }

    #[test]
    fn right_inverse_examples() {
        assert_eq!(right_inverse(&l("(4,8):(8,1)")).to_string(), "(8,4):(4,1)");
        assert_eq!(right_inverse(&l("4:2")).to_string(), "1:0");
        // Past a stride-0 mode (pycute stops there; C++ keeps going).
        assert_eq!(right_inverse(&l("(2,4):(0,1)")).to_string(), "4:2");
        assert_eq!(right_inverse(&l("(3,7):(1,4)")).to_string(), "3:1");
        // Equal strides: CuTe's (unstable) exchange sort visits the 3 before the 2.
        assert_eq!(right_inverse(&l("(2,3,4):(1,1,0)")).to_string(), "3:2");
    }

    #[test]
    fn left_inverse_examples() {
        assert_eq!(left_inverse(&l("4:2")).unwrap().to_string(), "(2,4):(0,1)");
        assert_eq!(
            left_inverse(&l("(2,4):(4,1)")).unwrap().to_string(),
            "(4,2):(2,1)"
        );
        assert_eq!(
            left_inverse(&l("(4,8):(8,1)")).unwrap().to_string(),
            "(8,4):(4,1)"
        );
        assert!(left_inverse(&l("(2,2):(3,2)")).is_err());
        assert!(left_inverse(&l("(2,4):(2,1)")).is_err());
        assert_eq!(left_inverse(&l("(2,4):(0,1)")).unwrap().to_string(), "4:2");
        assert!(left_inverse(&l("4:-1")).is_err());
    }

    #[test]
    fn common_vectors() {
        assert_eq!(max_common_vector(&l("(4,8):(1,4)"), &l("32:1")), 32);
        assert_eq!(max_common_vector(&l("(4,8):(8,1)"), &l("(4,8):(1,4)")), 1);
        assert_eq!(max_common_vector(&l("(4,8):(1,8)"), &l("(4,8):(1,4)")), 4);
        assert_eq!(
            max_common_layout(&l("(4,8):(1,8)"), &l("(4,8):(1,4)")).to_string(),
            "4:1"
        );
    }

    proptest! {
        #[test]
        fn right_inverse_inverts(a in arb_layout()) {
            let r = right_inverse(&a);
            for i in 0..r.size() {
                prop_assert_eq!(a.call(r.call(i)), i, "{} rinv {}", a, r);
            }
        }

        #[test]
        fn left_inverse_inverts(a in arb_injective_layout()) {
            let r = left_inverse(&a).unwrap();
            for i in 0..a.size() {
                prop_assert_eq!(r.call(a.call(i)), i, "{} linv {}", a, r);
            }
        }

        #[test]
        fn left_inverse_is_quasi_inverse(a in arb_layout()) {
            if let Ok(r) = left_inverse(&a) {
                for i in 0..a.size() {
                    prop_assert_eq!(a.call(r.call(a.call(i))), a.call(i), "{} linv {}", a, r);
                }
            }
        }

        #[test]
        fn max_common_vector_agrees(
            (a, b) in arb_compact_layout().prop_flat_map(|b| {
                let n = b.size();
                let shape = b.shape().clone();
                let cands = vec![
                    b.clone(),
                    Layout::identity(n).unwrap(),
                    Layout::col_major(shape.clone()).unwrap(),
                    Layout::row_major(shape).unwrap(),
                ];
                (prop::sample::select(cands), Just(b))
            })
        ) {
            let n = max_common_vector(&a, &b);
            prop_assert!(n >= 1);
            let r = right_inverse(&b);
            for i in 0..n.min(r.size()) {
                prop_assert_eq!(a.call(r.call(i)), i);
                prop_assert_eq!(b.call(r.call(i)), i);
            }
            if a == b {
                prop_assert_eq!(n, b.size());
            }
            let m = max_common_layout(&a, &b);
            prop_assert_eq!(m.size(), n);
        }
    }
}
