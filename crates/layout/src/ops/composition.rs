//! Functional composition of layouts: `R = A ∘ B` with `R(i) = A(B(i))`.

use crate::error::{ceil_div, cmul, LayoutError, Result};
use crate::int_tuple::IntTuple;
use crate::layout::Layout;
use crate::ops::coalesce::coalesce;
use crate::tiler::Tiler;

/// `A ∘ B`: a layout R compatible with B's shape (same modes as B; an integer mode of B may
/// become a tuple) such that `R(i) = A(B(i))` for every i in B's domain.
///
/// A tuple tiler composes mode by mode (modes of A past the tiler are dropped, as in CuTe's
/// `composition(Layout, Tile)`); a shape is a tiler of stride-1 layouts.
///
/// A is coalesced first (size-1 modes dropped, mergeable modes merged), as pycute's
/// `composition` does (`flat_A = coalesce(layoutA)`): where B leaves A's domain, A is extended
/// past its size by its *coalesced* last mode, so `(1,3,1):(4,4,2) ∘ 6:3` is `6:12` (A acts as
/// `3:4`) and `(2,1):(2,1) ∘ 8:2` is `8:4`. (C++ CuTe since CUTLASS 3.5 coalesces with
/// `detail::coalesce_x`, which keeps the stride of a *static* trailing size-1 mode and gives
/// `6:2` and `8:1` there; inside A's domain the two agree.)
///
/// B's strides must step through A's (coalesced) modes evenly: at each mode of extent `c`, a
/// stride `d >= c` must be a multiple of `c`, and a stride `d < c` that runs past the mode
/// must divide `c` with the remaining extent divisible by `c/d`. CuTe only checks these when
/// they are static; we always check and return [`LayoutError::Composition`] instead of a
/// layout that would not equal `A(B(i))`.
pub fn composition(a: &Layout, b: impl Into<Tiler>) -> Result<Layout> {
    let b = b.into();
    b.check_nonempty()?;
    compose_tiler(a, &b)
}

fn compose_tiler(a: &Layout, t: &Tiler) -> Result<Layout> {
    match t {
        Tiler::Layout(b) => compose_layout(a, b),
        Tiler::Tuple(ts) => {
            if ts.len() > a.rank() {
                return Err(LayoutError::TilerMismatch {
                    layout: a.to_string(),
                    tiler: t.to_string(),
                    reason: format!("{} tiler modes for a rank-{} layout", ts.len(), a.rank()),
                });
            }
            let modes = a.modes();
            let out = ts
                .iter()
                .zip(&modes)
                .map(|(t, m)| compose_tiler(m, t))
                .collect::<Result<Vec<_>>>()?;
            Layout::from_modes(out)
        }
    }
}

fn compose_layout(a: &Layout, b: &Layout) -> Result<Layout> {
    let flat = coalesce(a).flat_modes();
    let err = |reason: String| LayoutError::Composition {
        lhs: a.to_string(),
        rhs: b.to_string(),
        reason,
    };
    let mut usage = Usage {
        max_digit: vec![0; flat.len().saturating_sub(1)],
        pos: false,
        neg: false,
    };
    let (shape, stride) = compose_impl(&flat, b.shape(), b.stride(), &mut usage).map_err(err)?;
    // R distributes over B's modes: R(c) = sum_k A(B_k(c_k)). That equals A(sum_k B_k(c_k))
    // only if adding the B_k's never carries from one mode of A into the next, i.e. the
    // largest coordinate each B_k reaches in A's mode j sums to less than A's extent there.
    if usage.pos && usage.neg {
        return Err(err(
            "B mixes positive and negative strides, so its modes do not add up \
                        independently in A's coordinates"
                .into(),
        ));
    }
    for (j, (&used, &(c, _))) in usage.max_digit.iter().zip(&flat).enumerate() {
        if used > c - 1 {
            return Err(err(format!(
                "B's modes overlap in flat mode {j} of A (extent {c}): together they reach \
                 coordinate {used}, so their sum would carry into the next mode"
            )));
        }
    }
    Layout::new(shape, stride).map_err(|e| err(e.to_string()))
}

type Pair = (IntTuple, IntTuple);

/// Which coordinates of A's (coalesced, flat) modes the leaves of B reach.
struct Usage {
    /// Per non-last mode of A: the sum over B's leaves of the largest coordinate reached.
    max_digit: Vec<i64>,
    pos: bool,
    neg: bool,
}

/// The core of composition, after A has been coalesced to flat `(extent, stride)` modes.
/// Errors are reasons (strings) that the caller wraps with the layouts' names.
fn compose_impl(
    lhs: &[(i64, i64)],
    rs: &IntTuple,
    rd: &IntTuple,
    usage: &mut Usage,
) -> std::result::Result<Pair, String> {
    let mul = |x: i64, y: i64| cmul(x, y, "composed strides").map_err(|e| e.to_string());
    match (rs, rd) {
        (IntTuple::Tuple(ss), IntTuple::Tuple(ds)) => {
            // Right-distributivity: compose each mode of B separately.
            let mut shapes = Vec::with_capacity(ss.len());
            let mut strides = Vec::with_capacity(ss.len());
            for (s, d) in ss.iter().zip(ds) {
                let (s2, d2) = compose_impl(lhs, s, d, usage)?;
                shapes.push(s2);
                strides.push(d2);
            }
            Ok((IntTuple::Tuple(shapes), IntTuple::Tuple(strides)))
        }
        (IntTuple::Int(_), IntTuple::Int(0)) => Ok((rs.clone(), rd.clone())),
        (IntTuple::Int(rshape), IntTuple::Int(rstride)) => {
            let (rshape, rstride) = (*rshape, *rstride);
            if rshape > 1 {
                if rstride < 0 {
                    usage.neg = true;
                } else {
                    usage.pos = true;
                }
            }
            let Some((&(_, last_stride), init)) = lhs.split_last() else {
                return Err("empty left layout".into());
            };
            if init.is_empty() {
                return Ok((
                    IntTuple::Int(rshape),
                    IntTuple::Int(mul(rstride, last_stride)?),
                ));
            }
            let mut out_s = Vec::new();
            let mut out_d = Vec::new();
            let mut rest_shape = rshape;
            let mut rest_stride = rstride;
            for (i, &(c, cd)) in init.iter().enumerate() {
                let ad = rest_stride.checked_abs().ok_or("stride overflow")?;
                let sign = rest_stride.signum();
                let next_shape = ceil_div(c, ad);
                let next_stride = ceil_div(ad, c) * sign;
                if next_shape == 1 || rest_shape == 1 {
                    // B steps over this whole mode: its stride must be a multiple of it.
                    if rest_shape > 1 && ad % c != 0 {
                        return Err(format!(
                            "stride divisibility: stride {ad} is neither a multiple of nor \
                             smaller than extent {c} of flat mode {i}"
                        ));
                    }
                    rest_stride = next_stride;
                } else {
                    let new_shape = next_shape.min(rest_shape);
                    if rest_shape > next_shape {
                        // B runs past this mode into the next ones.
                        if c % ad != 0 {
                            return Err(format!(
                                "stride divisibility: stride {ad} does not divide extent {c} \
                                 of flat mode {i}, and {rest_shape} elements run past it"
                            ));
                        }
                        if rest_shape % new_shape != 0 {
                            return Err(format!(
                                "shape divisibility: {rest_shape} elements do not split into \
                                 groups of {new_shape} (flat mode {i} of extent {c})"
                            ));
                        }
                    }
                    if let Some(u) = usage.max_digit.get_mut(i) {
                        *u = u.saturating_add((new_shape - 1).saturating_mul(ad));
                    }
                    out_s.push(new_shape);
                    out_d.push(mul(rest_stride, cd)?);
                    rest_shape /= new_shape;
                    rest_stride = next_stride;
                }
            }
            if out_s.is_empty() {
                return Ok((
                    IntTuple::Int(rest_shape),
                    IntTuple::Int(mul(rest_stride, last_stride)?),
                ));
            }
            if rest_shape != 1 {
                out_s.push(rest_shape);
                out_d.push(mul(rest_stride, last_stride)?);
            }
            let wrap = |v: Vec<i64>| {
                if v.len() == 1 {
                    IntTuple::Int(v[0])
                } else {
                    IntTuple::flat(&v)
                }
            };
            Ok((wrap(out_s), wrap(out_d)))
        }
        _ => Err("shape and stride of the right layout are not congruent".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::{parse_layout, parse_tiler};
    use crate::testutil::{arb_compact_layout, arb_compact_of_size, arb_layout};
    use proptest::prelude::*;

    fn l(s: &str) -> Layout {
        parse_layout(s).unwrap()
    }
    fn c(a: &str, b: &str) -> String {
        composition(&l(a), parse_tiler(b).unwrap())
            .map(|r| r.to_string())
            .unwrap_or_else(|e| e.to_string())
    }

    #[test]
    fn doc_examples() {
        assert_eq!(c("(6,2):(8,2)", "(4,3):(3,1)"), "((2,2),3):((24,2),8)");
        assert_eq!(c("20:2", "(5,4):(4,1)"), "(5,4):(8,2)");
        assert_eq!(c("(10,2):(16,4)", "(5,4):(1,5)"), "(5,(2,2)):(16,(80,4))");
        assert_eq!(
            c("(12,(4,8)):(59,(13,1))", "<3:4,8:2>"),
            "(3,(2,4)):(236,(26,1))"
        );
    }

    /// A is coalesced before composing, so B leaving A's domain through a size-1 mode of A sees
    /// A's coalesced extension. The expected values are pycute's (nvidia-cutlass 4.2.0,
    /// `pycute/layout.py`, `composition`: `flat_A = coalesce(layoutA)`), checked against
    /// pycute itself by `tests/pycute.rs` where it is installed.
    #[test]
    fn left_operand_is_coalesced_first() {
        assert_eq!(c("(1,3,1):(4,4,2)", "6:3"), "6:12");
        assert_eq!(c("(2,1):(2,1)", "8:2"), "8:4");
        assert_eq!(c("(4,1):(1,7)", "8:1"), "8:1");
        assert_eq!(c("(1,1):(3,5)", "4:2"), "4:0");
        // Inside A's domain nothing changes.
        assert_eq!(c("(1,3,1):(4,4,2)", "3:1"), "3:4");
    }

    #[test]
    fn more_cases() {
        assert_eq!(c("4:1", "2:2"), "2:2");
        assert_eq!(c("(4,4):(4,1)", "(2,2):(1,4)"), "(2,2):(4,1)");
        assert_eq!(c("(4,2):(1,10)", "8:-1"), "(4,2):(-1,-10)");
        assert_eq!(c("(4,4):(4,1)", "3:0"), "3:0");
        // A shape as a tiler: stride-1 layouts per mode.
        assert_eq!(c("(4,8):(8,1)", "(2,4)"), "(2,4):(8,1)");
        // A tiler with fewer modes drops the remaining modes (CuTe's composition).
        assert_eq!(c("(4,8):(8,1)", "<2:1>"), "(2):(8)");
    }

    #[test]
    fn divisibility_failures_are_errors() {
        // Weak-divisibility passes but the result would be wrong: (3,2):(1,10) o 4:2.
        let e = composition(&l("(3,2):(1,10)"), l("4:2")).unwrap_err();
        assert!(matches!(e, LayoutError::Composition { .. }), "{e}");
        assert!(e.to_string().contains("(3,2):(1,10)"), "{e}");
        assert!(composition(&l("(3,2):(1,10)"), l("2:5")).is_err());
        assert!(composition(&l("(4,3):(1,10)"), l("6:1")).is_err());
        // ... but staying inside a mode is fine even when the stride does not divide it.
        assert_eq!(c("(3,2):(1,10)", "2:2"), "2:2");
        assert!(composition(&l("(4,8):(8,1)"), parse_tiler("<2:1,2:1,2:1>").unwrap()).is_err());
        // Modes of B that would carry into each other in A's coordinates.
        let e = composition(&l("(3,2):(1,10)"), l("(2,2):(2,1)")).unwrap_err();
        assert!(e.to_string().contains("overlap"), "{e}");
        assert!(composition(&l("(4,4):(1,10)"), l("(2,2):(1,-4)")).is_err());
    }

    #[test]
    fn overflow_is_an_error() {
        let a = l("(2,2):(1,4611686018427387904)");
        let e = composition(&a, l("2:4611686018427387904")).unwrap_err();
        assert!(e.to_string().contains("overflow"), "{e}");
    }

    proptest! {
        #[test]
        fn composition_is_functional(
            (a, b) in arb_layout().prop_flat_map(|a| (Just(a.clone()), arb_compact_of_size(a.size())))
        ) {
            // B is a bijection onto A's domain.
            if let Ok(r) = composition(&a, &b) {
                prop_assert_eq!(r.size(), b.size());
                if !b.shape().is_int() {
                    prop_assert_eq!(r.rank(), b.rank());
                }
                for i in 0..b.size() {
                    prop_assert_eq!(r.call(i), a.call(b.call(i)), "{} o {} = {}", a, b, r);
                }
            }
        }

        #[test]
        fn composition_with_compact_rhs_usually_succeeds(a in arb_compact_layout()) {
            // Composing with a coalesced-compatible divisor tile always works.
            let b = Layout::identity(a.size()).unwrap();
            let r = composition(&a, &b).unwrap();
            for i in 0..a.size() {
                prop_assert_eq!(r.call(i), a.call(i));
            }
        }

        #[test]
        fn composition_any_rhs(a in arb_layout(), b in arb_layout()) {
            // Any B (strides may leave A's domain: the extension of coalesce(A) applies).
            let ca = coalesce(&a);
            if let Ok(r) = composition(&a, &b) {
                prop_assert_eq!(r.size(), b.size());
                for i in 0..b.size() {
                    prop_assert_eq!(r.call(i), ca.call(b.call(i)), "{} o {} = {}", a, b, r);
                }
            }
        }
    }
}
