//! Recasting layouts between element widths (CuTe's upcast / downcast / recast_layout).
//!
//! A layout over elements of `old_bits` becomes a layout over elements of `new_bits`.
//! Upcast by N (wider elements, N old per new): stride-±1 modes shrink by N, other strides
//! are divided by N. Downcast by N (narrower): the stride-1 mode grows by N, other strides
//! are multiplied by N. CuTe checks divisibility only for static values and otherwise rounds
//! up; we check always and return [`LayoutError::Recast`] when the result would not describe
//! the same bytes.

use crate::error::{ceil_div, cmul, LayoutError, Result};
use crate::int_tuple::IntTuple;
use crate::layout::Layout;
use crate::ops::coalesce::{coalesce, filter};

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a.abs()
    } else {
        gcd(b, a % b)
    }
}

/// Layout over elements N times wider. Requires every non-zero stride to be a multiple or a
/// divisor of N (CuTe's check), and the layout to touch whole new elements only: sorting the
/// non-broadcast modes by stride and coalescing must give a first mode of stride ±1 and an
/// extent divisible by N, and strides that are multiples of N after it. E.g. `(2,4):(1,2)`
/// upcast 4 is `(1,2):(1,1)`; `6:1` or `4:8` upcast 4 are errors (they would cover part of a
/// new element).
pub fn upcast(l: &Layout, n: i64) -> Result<Layout> {
    let err = |reason: String| LayoutError::Recast {
        layout: l.to_string(),
        reason,
    };
    if n < 1 {
        return Err(err(format!("upcast factor {n} must be >= 1")));
    }
    if n == 1 {
        return Ok(l.clone());
    }
    for (s, d) in l.flat_modes() {
        let ad = d.checked_abs().unwrap_or(i64::MAX);
        if d != 0 && ad % n != 0 && n % ad != 0 {
            return Err(err(format!(
                "stride {d} (extent {s}) is neither a multiple nor a divisor of {n}"
            )));
        }
    }
    // The non-broadcast part, sorted by |stride| and coalesced, must start with a stride-±1
    // mode covering whole new elements; everything else must step by whole new elements.
    let mut modes = filter(l).flat_modes();
    modes.retain(|m| m.1 != 0);
    modes.sort_by_key(|m| m.1.checked_abs().unwrap_or(i64::MAX));
    let (s, d): (Vec<i64>, Vec<i64>) = modes.into_iter().unzip();
    let sorted = if s.is_empty() {
        Vec::new()
    } else {
        coalesce(&Layout::new(IntTuple::flat(&s), IntTuple::flat(&d))?).flat_modes()
    };
    match sorted.first() {
        Some(&(s, d)) if d.abs() == 1 && s % n == 0 => {}
        Some(&(s, d)) => {
            return Err(err(format!(
                "its elements do not fill whole new elements: the finest mode (sorted by \
                 stride) is {s}:{d}, which needs stride 1 and an extent divisible by {n}"
            )))
        }
        None => {
            return Err(err(format!(
                "it touches a single element, not a whole element {n} times wider"
            )))
        }
    }
    if let Some(&(s, d)) = sorted.iter().skip(1).find(|m| m.1 % n != 0) {
        return Err(err(format!(
            "mode {s}:{d} does not step by whole new elements of {n}"
        )));
    }
    let mut shapes = Vec::new();
    let mut strides = Vec::new();
    for (s, d) in l.flat_modes() {
        if d == 0 {
            shapes.push(s);
            strides.push(0);
        } else {
            let ad = d.abs();
            shapes.push(ceil_div(s, ceil_div(n, ad)));
            strides.push(d.signum() * ceil_div(ad, n));
        }
    }
    let sh = l.shape().unflatten_like(&shapes);
    let st = l.stride().unflatten_like(&strides);
    match (sh, st) {
        (Some(sh), Some(st)) => Layout::new(sh, st),
        _ => Err(err("internal: leaf count mismatch".into())),
    }
}

/// Layout over elements N times narrower. Needs exactly one stride-1 leaf (the one that gets
/// N times longer, so that the sub-elements are adjacent); a stride -1 leaf is refused
/// (CuTe would place the sub-elements on the wrong side).
pub fn downcast(l: &Layout, n: i64) -> Result<Layout> {
    let err = |reason: String| LayoutError::Recast {
        layout: l.to_string(),
        reason,
    };
    if n < 1 {
        return Err(err(format!("downcast factor {n} must be >= 1")));
    }
    if n == 1 {
        return Ok(l.clone());
    }
    let strides = l.stride().leaves();
    if strides.contains(&-1) {
        return Err(err("downcast of a stride -1 mode is not supported".into()));
    }
    let ones = strides.iter().filter(|&&d| d == 1).count();
    if ones != 1 {
        return Err(err(format!(
            "downcast needs exactly one stride-1 mode (adjacent elements), found {ones}"
        )));
    }
    let mut it = strides.iter();
    let shape = l.shape().try_map(&mut |s| {
        if it.next() == Some(&1) {
            cmul(s, n, "downcast extents")
        } else {
            Ok(s)
        }
    })?;
    let stride = l.stride().try_map(&mut |d| {
        if d == 1 {
            Ok(1)
        } else {
            cmul(d, n, "downcast strides")
        }
    })?;
    Layout::new(shape, stride)
}

/// The (numerator, denominator) of `new_bits / old_bits` in lowest terms.
pub(crate) fn ratio(old_bits: i64, new_bits: i64) -> Result<(i64, i64)> {
    if old_bits < 1 || new_bits < 1 {
        return Err(LayoutError::Unsupported(format!(
            "element widths must be >= 1 bit (got {old_bits} -> {new_bits})"
        )));
    }
    let g = gcd(old_bits, new_bits);
    Ok((new_bits / g, old_bits / g))
}

/// Recast a layout over `old_bits`-wide elements to `new_bits`-wide elements (CuTe's
/// `recast_layout<Old, New>`): upcast by the numerator of `new/old`, then downcast by the
/// denominator.
pub fn recast_layout(l: &Layout, old_bits: i64, new_bits: i64) -> Result<Layout> {
    let (num, den) = ratio(old_bits, new_bits)?;
    let up = upcast(l, num)?;
    downcast(&up, den)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::parse_layout;
    use crate::testutil::arb_layout;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    fn l(s: &str) -> Layout {
        parse_layout(s).unwrap()
    }

    #[test]
    fn examples() {
        assert_eq!(
            upcast(&l("(4,8):(1,4)"), 2).unwrap().to_string(),
            "(2,8):(1,2)"
        );
        assert_eq!(
            upcast(&l("(2,4):(1,2)"), 4).unwrap().to_string(),
            "(1,2):(1,1)"
        );
        assert_eq!(
            upcast(&l("(2,2,2):(1,4,2)"), 4).unwrap().to_string(),
            "(1,2,1):(1,1,1)"
        );
        assert_eq!(
            downcast(&l("(4,8):(1,4)"), 2).unwrap().to_string(),
            "(8,8):(1,8)"
        );
        assert_eq!(
            recast_layout(&l("(4,8):(1,4)"), 16, 32)
                .unwrap()
                .to_string(),
            "(2,8):(1,2)"
        );
        assert_eq!(
            recast_layout(&l("(4,8):(1,4)"), 32, 16)
                .unwrap()
                .to_string(),
            "(8,8):(1,8)"
        );
        // 3 x 16-bit -> 2 x 24-bit: up by 3, down by 2.
        assert_eq!(
            recast_layout(&l("(6,2):(1,6)"), 16, 24)
                .unwrap()
                .to_string(),
            "(4,2):(1,4)"
        );
        // Broadcast modes are kept.
        assert_eq!(
            upcast(&l("(8,4):(1,0)"), 4).unwrap().to_string(),
            "(2,4):(1,0)"
        );
    }

    #[test]
    fn failures() {
        assert!(upcast(&l("6:1"), 4).is_err());
        assert!(upcast(&l("3:2"), 4).is_err());
        assert!(upcast(&l("(2,2):(1,4)"), 4).is_err());
        assert!(upcast(&l("(3,4):(1,3)"), 4).is_err());
        assert!(upcast(&l("4:8"), 2).is_err());
        assert!(upcast(&l("1:0"), 2).is_err());
        assert!(downcast(&l("(4,8):(8,2)"), 2).is_err());
        assert!(downcast(&l("(2,2):(1,1)"), 2).is_err());
        assert!(downcast(&l("4:-1"), 2).is_err());
        assert!(recast_layout(&l("4:1"), 0, 8).is_err());
        assert!(downcast(&l("(2,2):(1,4611686018427387904)"), 4).is_err());
    }

    /// What an upcast means: the old offsets are exactly the whole new elements it lists.
    fn covers_whole_elements(old: &Layout, new: &Layout, n: i64) -> bool {
        let old_set: BTreeSet<i64> = old.values().into_iter().collect();
        let new_set: BTreeSet<i64> = new.values().into_iter().collect();
        let expect: BTreeSet<i64> = new_set
            .iter()
            .flat_map(|&e| (0..n).map(move |r| e * n + r))
            .collect();
        old_set == expect
    }

    proptest! {
        #[test]
        fn upcast_is_exact_when_ok(a in arb_layout(), k in 1u32..4) {
            let n = 1i64 << k;
            if let Ok(u) = upcast(&a, n) {
                prop_assert!(covers_whole_elements(&a, &u, n), "{} up {} = {}", a, n, u);
            }
        }

        #[test]
        fn recast_round_trips(a in arb_layout(), k in 1u32..4) {
            let n = 1i64 << k;
            if let Ok(d) = downcast(&a, n) {
                prop_assert!(covers_whole_elements(&d, &a, n), "{} down {} = {}", a, n, d);
                prop_assert_eq!(upcast(&d, n).unwrap(), a.clone());
                prop_assert_eq!(recast_layout(&recast_layout(&a, 32, 32 / n).unwrap(), 32 / n, 32).unwrap(), a);
            }
        }
    }
}
