//! coalesce and filter: simplify a layout without changing it as a function.

use crate::error::{LayoutError, Result};
use crate::int_tuple::IntTuple;
use crate::layout::Layout;

/// Walk the flat modes from the back, merging `s0:d0` into a following `s1:s0*d0` and
/// dropping size-1 modes. `init` is the starting front mode (the last flat mode). Returns the
/// merged flat modes; `[(1, 0)]` when nothing is left.
fn bw_coalesce(modes: &[(i64, i64)], init: (i64, i64)) -> Vec<(i64, i64)> {
    // `acc` holds the result reversed: its last element is the current front.
    let mut acc: Vec<(i64, i64)> = vec![init];
    for &(s, d) in modes.iter().rev() {
        if s == 1 {
            continue;
        }
        let single = acc.len() == 1;
        let Some(front) = acc.last_mut() else { break };
        if single && front.0 == 1 {
            *front = (s, d);
        } else if s.checked_mul(d) == Some(front.1) {
            front.0 = front.0.saturating_mul(s);
            front.1 = d;
        } else {
            acc.push((s, d));
        }
    }
    if acc.len() == 1 && acc[0].0 == 1 {
        return vec![(1, 0)];
    }
    acc.reverse();
    acc
}

/// Same size and the same value at every index, depth <= 1, no size-1 modes, and adjacent
/// modes merged when `s0:d0, s1:s0*d0` (CuTe's `coalesce`). A layout of size 1 becomes `1:0`.
pub fn coalesce(l: &Layout) -> Layout {
    let modes = l.flat_modes();
    let Some((last, rest)) = modes.split_last() else {
        return Layout::raw(IntTuple::Int(1), IntTuple::Int(0));
    };
    // Same size and a span no larger than l's, so the result is a valid layout.
    let merged = bw_coalesce(rest, *last);
    if merged.len() == 1 {
        return Layout::raw(IntTuple::Int(merged[0].0), IntTuple::Int(merged[0].1));
    }
    let (s, d): (Vec<i64>, Vec<i64>) = merged.into_iter().unzip();
    Layout::raw(IntTuple::flat(&s), IntTuple::flat(&d))
}

/// Coalesce each mode according to `profile`: where the profile has a leaf, the
/// corresponding sub-layout is coalesced fully; where it has a tuple, recurse. Modes of `l`
/// past the profile's rank are kept unchanged. E.g. `(2,(1,6)):(1,(6,2))` with profile
/// `(1,1)` gives `(2,6):(1,2)`.
pub fn coalesce_by(l: &Layout, profile: &IntTuple) -> Result<Layout> {
    match profile {
        IntTuple::Int(_) => Ok(coalesce(l)),
        IntTuple::Tuple(ps) => {
            if ps.len() > l.rank() {
                return Err(LayoutError::ProfileMismatch {
                    layout: l.to_string(),
                    profile: profile.to_string(),
                    reason: format!(
                        "the profile has {} modes, the layout {}",
                        ps.len(),
                        l.rank()
                    ),
                });
            }
            if ps.is_empty() {
                return Err(LayoutError::EmptyTuple {
                    what: "profile".into(),
                });
            }
            let modes = l.modes();
            let mut out = Vec::with_capacity(modes.len());
            for (i, m) in modes.into_iter().enumerate() {
                out.push(match ps.get(i) {
                    Some(p) => coalesce_by(&m, p)?,
                    None => m,
                });
            }
            Layout::from_modes(out)
        }
    }
}

/// Replace the extent of every stride-0 mode by 1 (CuTe's `filter_zeros`).
pub fn filter_zeros(l: &Layout) -> Layout {
    let strides = l.stride().leaves();
    let mut it = strides.into_iter();
    let shape = l
        .shape()
        .map(&mut |s| if it.next() == Some(0) { 1 } else { s });
    Layout::raw(shape, l.stride().clone())
}

/// Remove stride-0 and size-1 modes and coalesce (CuTe's `filter`). `1:0` if nothing is left.
pub fn filter(l: &Layout) -> Layout {
    coalesce(&filter_zeros(l))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::{parse_int_tuple, parse_layout};
    use crate::testutil::arb_layout;
    use proptest::prelude::*;

    fn l(s: &str) -> Layout {
        parse_layout(s).unwrap()
    }

    #[test]
    fn doc_examples() {
        assert_eq!(coalesce(&l("(2,(1,6)):(1,(6,2))")).to_string(), "12:1");
        let p = parse_int_tuple("(1,1)").unwrap();
        assert_eq!(
            coalesce_by(&l("(2,(1,6)):(1,(6,2))"), &p)
                .unwrap()
                .to_string(),
            "(2,6):(1,2)"
        );
    }

    #[test]
    fn small_cases() {
        assert_eq!(coalesce(&l("(1,1):(3,5)")).to_string(), "1:0");
        assert_eq!(coalesce(&l("(4,1):(1,0)")).to_string(), "4:1");
        assert_eq!(coalesce(&l("(2,2):(0,0)")).to_string(), "4:0");
        assert_eq!(coalesce(&l("(2,3):(3,1)")).to_string(), "(2,3):(3,1)");
        assert_eq!(filter(&l("(2,3,4):(0,1,3)")).to_string(), "12:1");
        assert_eq!(filter(&l("(2,3):(0,0)")).to_string(), "1:0");
        assert!(coalesce_by(&l("4:1"), &parse_int_tuple("(1,1)").unwrap()).is_err());
    }

    proptest! {
        #[test]
        fn coalesce_preserves_function(a in arb_layout()) {
            let c = coalesce(&a);
            prop_assert_eq!(c.size(), a.size());
            prop_assert!(c.depth() <= 1);
            for i in 0..a.size() {
                prop_assert_eq!(c.call(i), a.call(i));
            }
        }

        #[test]
        fn coalesce_by_mode_preserves_function(a in arb_layout()) {
            let profile = IntTuple::Tuple(vec![IntTuple::Int(1); a.rank()]);
            let c = coalesce_by(&a, &profile).unwrap();
            prop_assert_eq!(c.rank(), a.rank());
            for i in 0..a.size() {
                prop_assert_eq!(c.call(i), a.call(i));
            }
            for (m, cm) in a.modes().iter().zip(c.modes()) {
                prop_assert_eq!(m.size(), cm.size());
            }
        }
    }
}
