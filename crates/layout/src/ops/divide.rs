//! Divides: split a layout into tiles (the tiler's image) and the rest.
//!
//! `logical_divide(A, B) = A ∘ (B, complement(B, size(A)))`, mode by mode for a tuple tiler.
//! The other forms only regroup its modes: zipped `((tiles),(rests))`, tiled
//! `((tiles),rest0,rest1,...)`, flat `(tile0,tile1,...,rest0,rest1,...)`.

use crate::error::{LayoutError, Result};
use crate::layout::Layout;
use crate::ops::coalesce::coalesce;
use crate::ops::complement::complement_shape;
use crate::ops::composition::composition;
use crate::tiler::Tiler;

/// `A ⊘ B = A ∘ (B, complement(B, size(A)))`: mode 0 of the result enumerates one tile, mode 1
/// the tiles. A tuple tiler divides mode by mode and keeps A's extra modes unchanged.
pub fn logical_divide(a: &Layout, tiler: impl Into<Tiler>) -> Result<Layout> {
    let t = tiler.into();
    t.check_nonempty()?;
    ldiv(a, &t)
}

fn ldiv(a: &Layout, t: &Tiler) -> Result<Layout> {
    match t {
        Tiler::Layout(b) => {
            let cotarget = coalesce(a).shape().clone();
            let rest = complement_shape(b, &cotarget)?;
            let bb = Layout::from_modes(vec![b.clone(), rest])?;
            composition(a, bb)
        }
        Tiler::Tuple(ts) => by_mode(a, t, ts, ldiv),
    }
}

/// Apply `f` to the first `ts.len()` modes of `a`, keeping the rest (CuTe's transform_layout).
pub(crate) fn by_mode(
    a: &Layout,
    t: &Tiler,
    ts: &[Tiler],
    f: fn(&Layout, &Tiler) -> Result<Layout>,
) -> Result<Layout> {
    if ts.len() > a.rank() {
        return Err(LayoutError::TilerMismatch {
            layout: a.to_string(),
            tiler: t.to_string(),
            reason: format!("{} tiler modes for a rank-{} layout", ts.len(), a.rank()),
        });
    }
    let mut out = Vec::with_capacity(a.rank());
    for (i, m) in a.modes().into_iter().enumerate() {
        out.push(match ts.get(i) {
            Some(ti) => f(&m, ti)?,
            None => m,
        });
    }
    Layout::from_modes(out)
}

/// Regroup a logical divide/product by the tiler's profile: every mode hit by a tiler leaf is
/// rank 2 `(tile, rest)`; gather the tiles into mode 0 and the rests (plus modes the tiler did
/// not touch) into mode 1. CuTe's `tile_unzip` / `zip2_by`.
pub(crate) fn tile_unzip(l: &Layout, t: &Tiler) -> Result<Layout> {
    let (first, second) = zip2_by(l, t)?;
    Layout::from_modes(vec![first, second])
}

fn zip2_by(l: &Layout, t: &Tiler) -> Result<(Layout, Layout)> {
    match t {
        Tiler::Layout(_) => match (l.mode(0), l.mode(1), l.rank()) {
            (Some(a), Some(b), 2) => Ok((a, b)),
            _ => Err(LayoutError::TilerMismatch {
                layout: l.to_string(),
                tiler: t.to_string(),
                reason: "expected a rank-2 (tile, rest) mode".into(),
            }),
        },
        Tiler::Tuple(ts) => {
            let modes = l.modes();
            if ts.len() > modes.len() {
                return Err(LayoutError::TilerMismatch {
                    layout: l.to_string(),
                    tiler: t.to_string(),
                    reason: "the tiler has more modes than the layout".into(),
                });
            }
            let mut firsts = Vec::new();
            let mut seconds = Vec::new();
            for (m, ti) in modes.iter().zip(ts) {
                let (f, s) = zip2_by(m, ti)?;
                firsts.push(f);
                seconds.push(s);
            }
            seconds.extend(modes[ts.len()..].iter().cloned());
            Ok((Layout::from_modes(firsts)?, Layout::from_modes(seconds)?))
        }
    }
}

/// Splat mode 1 (`tiled`) or both modes (`flat`) of a zipped result into top-level modes.
/// As CuTe's `result(_, repeat<R1>(_))`, a mode of rank 1 is kept whole (a rank-1 tuple stays
/// a tuple) and only modes of rank >= 2 are spread out.
pub(crate) fn splat(z: &Layout, both: bool) -> Result<Layout> {
    let (Some(m0), Some(m1)) = (z.mode(0), z.mode(1)) else {
        return Ok(z.clone());
    };
    let spread = |m: Layout| if m.rank() > 1 { m.modes() } else { vec![m] };
    let mut out = if both { spread(m0) } else { vec![m0] };
    out.extend(spread(m1));
    Layout::from_modes(out)
}

/// `((tiles),(rests))`: logical_divide with tile modes gathered into mode 0.
pub fn zipped_divide(a: &Layout, tiler: impl Into<Tiler>) -> Result<Layout> {
    let t = tiler.into();
    tile_unzip(&logical_divide(a, &t)?, &t)
}

/// `((tiles),rest0,rest1,...)`.
pub fn tiled_divide(a: &Layout, tiler: impl Into<Tiler>) -> Result<Layout> {
    splat(&zipped_divide(a, tiler)?, false)
}

/// `(tile0,tile1,...,rest0,rest1,...)`.
pub fn flat_divide(a: &Layout, tiler: impl Into<Tiler>) -> Result<Layout> {
    splat(&zipped_divide(a, tiler)?, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::complement::complement;
    use crate::parse::{parse_layout, parse_tiler};
    use crate::testutil::{arb_compact_layout, arb_compact_of_size, arb_injective_layout};
    use proptest::prelude::*;

    fn l(s: &str) -> Layout {
        parse_layout(s).unwrap()
    }
    fn t(s: &str) -> Tiler {
        parse_tiler(s).unwrap()
    }

    #[test]
    fn doc_examples() {
        assert_eq!(
            logical_divide(&l("(4,2,3):(2,1,8)"), t("4:2"))
                .unwrap()
                .to_string(),
            "((2,2),(2,3)):((4,1),(2,8))"
        );
        let a = l("(9,(4,8)):(59,(13,1))");
        let b = t("<3:3,(2,4):(1,8)>");
        assert_eq!(
            logical_divide(&a, &b).unwrap().to_string(),
            "((3,3),((2,4),(2,2))):((177,59),((13,2),(26,1)))"
        );
        assert_eq!(
            zipped_divide(&a, &b).unwrap().to_string(),
            "((3,(2,4)),(3,(2,2))):((177,(13,2)),(59,(26,1)))"
        );
        assert_eq!(
            tiled_divide(&a, &b).unwrap().to_string(),
            "((3,(2,4)),3,(2,2)):((177,(13,2)),59,(26,1))"
        );
        assert_eq!(
            flat_divide(&a, &b).unwrap().to_string(),
            "(3,(2,4),3,(2,2)):(177,(13,2),59,(26,1))"
        );
    }

    #[test]
    fn shapes_and_extra_modes() {
        // A shape tiler (stride-1 tiles) on a row-major 8x8.
        let a = l("(8,8):(8,1)");
        assert_eq!(
            zipped_divide(&a, t("(2,4)")).unwrap().to_string(),
            "((2,4),(4,2)):((8,1),(16,4))"
        );
        // Extra modes of A are kept and end up among the rests.
        assert_eq!(
            zipped_divide(&l("(8,8,3):(1,8,64)"), t("<2:1>"))
                .unwrap()
                .to_string(),
            "((2),(4,8,3)):((1),(2,8,64))"
        );
        assert!(logical_divide(&l("8:1"), t("<2:1,2:1>")).is_err());
        // Non-dividing tiles are an error, not a wrong layout.
        assert!(logical_divide(&l("(3,4):(1,10)"), t("2:1")).is_err());
    }

    proptest! {
        #[test]
        fn logical_divide_matches_definition(
            (a, b) in (arb_injective_layout(), 1i64..4).prop_flat_map(|(b, k)| {
                (arb_compact_of_size(b.cosize() * k), Just(b))
            })
        ) {
            let d = logical_divide(&a, &b);
            let c = complement(&b, a.size()).unwrap();
            let bb = Layout::from_modes(vec![b.clone(), c]).unwrap();
            if let Ok(d) = d {
                prop_assert_eq!(d.rank(), 2);
                prop_assert_eq!(d.mode(0).unwrap().size(), b.size());
                for i in 0..d.size() {
                    prop_assert_eq!(d.call(i), a.call(bb.call(i)), "{} / {} = {}", a, b, d);
                }
                let z = zipped_divide(&a, &b).unwrap();
                let f = flat_divide(&a, &b).unwrap();
                prop_assert_eq!(z.values(), d.values());
                prop_assert_eq!(f.values(), d.values());
            }
        }

        #[test]
        fn by_mode_divide_structure(a in arb_compact_layout(), n in 1i64..3) {
            let m0 = a.mode(0).unwrap().size();
            prop_assume!(m0 % n == 0 && a.rank() <= 3);
            let tiler = Tiler::tuple(vec![Layout::identity(n).unwrap()]);
            if let Ok(z) = zipped_divide(&a, &tiler) {
                prop_assert_eq!(z.rank(), 2);
                prop_assert_eq!(z.mode(0).unwrap().size(), n);
                prop_assert_eq!(z.size(), a.size());
                let td = tiled_divide(&a, &tiler).unwrap();
                prop_assert_eq!(td.rank(), 1 + a.rank());
                let fd = flat_divide(&a, &tiler).unwrap();
                prop_assert_eq!(fd.rank(), 1 + a.rank());
                prop_assert_eq!(td.values(), z.values());
                prop_assert_eq!(fd.values(), z.values());
            }
        }
    }
}
