//! Products: repeat a block layout over a tiler.
//!
//! `logical_product(A, B) = (A, complement(A, size(A)*cosize(B)) ∘ B)`; zipped/tiled/flat only
//! regroup modes. blocked/raked products pad A and B to equal rank, take the logical product
//! and interleave the modes (A-modes first for blocked, B-modes first for raked). Since
//! CUTLASS 3.8 these are *not* coalesced by mode, and neither are ours.

use crate::error::{cmul, LayoutError, Result};
use crate::int_tuple::IntTuple;
use crate::layout::{make_ordered_layout, Layout};
use crate::ops::complement::complement;
use crate::ops::composition::composition;
use crate::ops::divide::{by_mode, splat, tile_unzip};
use crate::tiler::Tiler;

/// `A ⊗ B = (A, complement(A, size(A)*cosize(B)) ∘ B)`: mode 0 is the block, mode 1 enumerates
/// its copies as B orders them. A tuple tiler multiplies mode by mode (extra modes of A kept).
pub fn logical_product(a: &Layout, tiler: impl Into<Tiler>) -> Result<Layout> {
    let t = tiler.into();
    t.check_nonempty()?;
    lprod(a, &t)
}

fn lprod(a: &Layout, t: &Tiler) -> Result<Layout> {
    match t {
        Tiler::Layout(b) => {
            let cb = b.cosize();
            if cb < 1 {
                return Err(LayoutError::TilerMismatch {
                    layout: a.to_string(),
                    tiler: b.to_string(),
                    reason: format!("the tiler's cosize {cb} must be >= 1"),
                });
            }
            let m = cmul(a.size(), cb, "size(A)*cosize(B) in logical_product")?;
            let c = complement(a, m)?;
            let x = composition(&c, b)?;
            Layout::from_modes(vec![a.clone(), x])
        }
        Tiler::Tuple(ts) => by_mode(a, t, ts, lprod),
    }
}

/// `((blocks),(products))`.
pub fn zipped_product(a: &Layout, tiler: impl Into<Tiler>) -> Result<Layout> {
    let t = tiler.into();
    tile_unzip(&logical_product(a, &t)?, &t)
}

/// `((blocks),product0,product1,...)`.
pub fn tiled_product(a: &Layout, tiler: impl Into<Tiler>) -> Result<Layout> {
    splat(&zipped_product(a, tiler)?, false)
}

/// `(block0,block1,...,product0,product1,...)`.
pub fn flat_product(a: &Layout, tiler: impl Into<Tiler>) -> Result<Layout> {
    splat(&zipped_product(a, tiler)?, true)
}

fn rank_sensitive_product(a: &Layout, b: &Layout, block_first: bool) -> Result<Layout> {
    let r = a.rank().max(b.rank());
    let pa = a.pad_to_rank(r);
    let pb = b.pad_to_rank(r);
    let lp = lprod(&pa, &Tiler::Layout(pb.clone()))?;
    let x = lp
        .mode(1)
        .ok_or_else(|| LayoutError::Unsupported("logical_product rank".into()))?;
    let (first, second) = if block_first { (pa, x) } else { (x, pa) };
    zip_modes(&first, &second).map_err(|reason| LayoutError::TilerMismatch {
        layout: a.to_string(),
        tiler: b.to_string(),
        reason,
    })
}

/// CuTe's `zip(u, v)` of two layouts: if `u` is a tuple, transpose `((u0,u1,..),(v0,v1,..))`
/// into `((u0,v0),(u1,v1),..)`, which needs `v` to be a tuple of the same rank (CuTe rejects
/// anything else at compile time); if `u` is an integer, the result is the rank-1 `((u,v))`.
fn zip_modes(u: &Layout, v: &Layout) -> std::result::Result<Layout, String> {
    let pair = |x: Layout, y: Layout| Layout::from_modes(vec![x, y]).map_err(|e| e.to_string());
    if u.shape().is_int() {
        return Layout::from_modes(vec![pair(u.clone(), v.clone())?]).map_err(|e| e.to_string());
    }
    if v.shape().is_int() || v.rank() != u.rank() {
        return Err(format!(
            "cannot zip the modes of {u} with those of {v}: both must be tuples of the same rank"
        ));
    }
    let modes = u
        .modes()
        .into_iter()
        .zip(v.modes())
        .map(|(x, y)| pair(x, y))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Layout::from_modes(modes).map_err(|e| e.to_string())
}

/// Reproduce block `a` over `b`, each copy of `a` contiguous: mode i is `(a_i, b_i)`.
/// Result rank is `max(rank a, rank b)`.
pub fn blocked_product(a: &Layout, b: &Layout) -> Result<Layout> {
    rank_sensitive_product(a, b, true)
}

/// Reproduce block `a` over `b` with the copies interleaved: mode i is `(b_i, a_i)`.
pub fn raked_product(a: &Layout, b: &Layout) -> Result<Layout> {
    rank_sensitive_product(a, b, false)
}

/// Repeat `block` until it covers `target` (a shape of rank >= rank(block)): a blocked product
/// with an ordered layout of `target / block` copies. `order` ranks the modes to repeat along
/// first (default column-major: mode 0 first). Each block extent must divide the target's.
pub fn tile_to_shape(
    block: &Layout,
    target: &IntTuple,
    order: Option<&IntTuple>,
) -> Result<Layout> {
    let err = |reason: String| LayoutError::TileToShape {
        block: block.to_string(),
        target: target.to_string(),
        reason,
    };
    target.check_nonempty("target shape")?;
    let r = target.rank();
    if block.rank() > r {
        return Err(err(format!(
            "the block has rank {}, the target {}",
            block.rank(),
            r
        )));
    }
    let padded = block.pad_to_rank(r);
    let mut counts = Vec::with_capacity(r);
    for (i, (bm, tm)) in padded.modes().iter().zip(target.modes()).enumerate() {
        let (bs, ts) = (bm.size(), tm.product()?);
        if ts < 1 || ts % bs != 0 {
            return Err(err(format!(
                "block extent {bs} does not divide target extent {ts} in mode {i}"
            )));
        }
        counts.push(ts / bs);
    }
    let product_shape = if target.is_int() {
        IntTuple::Int(counts[0])
    } else {
        IntTuple::flat(&counts)
    };
    let reps = match order {
        Some(o) => make_ordered_layout(&product_shape, o)?,
        None => Layout::col_major(product_shape)?,
    };
    blocked_product(&padded, &reps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::{parse_int_tuple, parse_layout, parse_tiler};
    use crate::testutil::{arb_compact_layout, arb_injective_layout};
    use crate::tiler::Tiler;
    use proptest::prelude::*;

    fn l(s: &str) -> Layout {
        parse_layout(s).unwrap()
    }

    #[test]
    fn doc_examples() {
        assert_eq!(
            logical_product(&l("(2,2):(4,1)"), l("6:1"))
                .unwrap()
                .to_string(),
            "((2,2),(2,3)):((4,1),(2,8))"
        );
        assert_eq!(
            logical_product(&l("(2,2):(4,1)"), l("(4,2):(2,1)"))
                .unwrap()
                .to_string(),
            "((2,2),(4,2)):((4,1),(8,2))"
        );
        assert_eq!(
            logical_product(&l("(2,5):(5,1)"), parse_tiler("<3:5,4:6>").unwrap())
                .unwrap()
                .to_string(),
            "((2,3),(5,4)):((5,10),(1,30))"
        );
    }

    #[test]
    fn blocked_and_raked() {
        // CuTe's tutorial example: a 2x5 block over a 3x4 grid.
        let a = l("(2,5):(5,1)");
        let b = l("(3,4):(1,3)");
        assert_eq!(
            blocked_product(&a, &b).unwrap().to_string(),
            "((2,3),(5,4)):((5,10),(1,30))"
        );
        assert_eq!(
            raked_product(&a, &b).unwrap().to_string(),
            "((3,2),(4,5)):((10,5),(30,1))"
        );
        // Rank 1: a rank-1 tuple holding the pair, not coalesced.
        assert_eq!(
            blocked_product(&l("4:1"), &l("3:1")).unwrap().to_string(),
            "((4,3)):((1,4))"
        );
        assert_eq!(
            blocked_product(&l("7:1"), &l("(3):(1)"))
                .unwrap()
                .to_string(),
            "((7,(3))):((1,(7)))"
        );
        // A rank-1 tuple cannot be zipped with an integer (CuTe does not compile it either).
        assert!(raked_product(&l("7:1"), &l("(3):(1)")).is_err());
        assert!(blocked_product(&l("(3):(1)"), &l("1:1")).is_err());
        // Unequal ranks are padded with 1:0.
        assert_eq!(
            blocked_product(&l("(2,2):(1,2)"), &l("3:1"))
                .unwrap()
                .to_string(),
            "((2,3),(2,1)):((1,4),(2,0))"
        );
    }

    #[test]
    fn zipped_tiled_flat() {
        let a = l("(2,5):(5,1)");
        let t = parse_tiler("<3:5,4:6>").unwrap();
        assert_eq!(
            zipped_product(&a, &t).unwrap().to_string(),
            "((2,5),(3,4)):((5,1),(10,30))"
        );
        assert_eq!(
            tiled_product(&a, &t).unwrap().to_string(),
            "((2,5),3,4):((5,1),10,30)"
        );
        assert_eq!(
            flat_product(&a, &t).unwrap().to_string(),
            "(2,5,3,4):(5,1,10,30)"
        );
        // By-mode products are independent: with stride-1 tilers the modes interleave.
        let t1 = parse_tiler("<3:1,4:1>").unwrap();
        assert_eq!(
            logical_product(&a, &t1).unwrap().to_string(),
            "((2,3),(5,4)):((5,1),(1,5))"
        );
    }

    #[test]
    fn tile_to_shape_examples() {
        let atom = l("(8,64):(64,1)");
        let s = parse_int_tuple("(128,128)").unwrap();
        assert_eq!(
            tile_to_shape(&atom, &s, None).unwrap().to_string(),
            "((8,16),(64,2)):((64,512),(1,8192))"
        );
        let o = parse_int_tuple("(1,0)").unwrap();
        assert_eq!(
            tile_to_shape(&atom, &s, Some(&o)).unwrap().to_string(),
            "((8,16),(64,2)):((64,1024),(1,512))"
        );
        assert!(tile_to_shape(&atom, &parse_int_tuple("(12,128)").unwrap(), None).is_err());
        assert!(tile_to_shape(&atom, &parse_int_tuple("128").unwrap(), None).is_err());
    }

    proptest! {
        #[test]
        fn logical_product_matches_definition(a in arb_injective_layout(), b in arb_compact_layout()) {
            prop_assume!(a.size() * b.size() <= 512);
            if let Ok(p) = logical_product(&a, &b) {
                prop_assert_eq!(p.rank(), 2);
                prop_assert_eq!(p.mode(0).unwrap(), a.clone());
                prop_assert_eq!(p.size(), a.size() * b.size());
                let c = complement(&a, a.size() * b.cosize()).unwrap();
                let m1 = p.mode(1).unwrap();
                for i in 0..b.size() {
                    prop_assert_eq!(m1.call(i), c.call(b.call(i)));
                }
                // The copies of A never overlap.
                prop_assert!(p.is_injective(), "{} x {} = {}", a, b, p);
            }
        }

        #[test]
        fn zipped_tiled_flat_product_structure(
            a in arb_compact_layout(),
            ts in prop::collection::vec(arb_compact_layout(), 1..=2),
        ) {
            prop_assume!(ts.len() <= a.rank());
            let t = Tiler::tuple(ts.clone());
            if let Ok(lp) = logical_product(&a, &t) {
                let z = zipped_product(&a, &t).unwrap();
                let tp = tiled_product(&a, &t).unwrap();
                let fp = flat_product(&a, &t).unwrap();
                // Same image, regrouped: ((blocks),(products, untouched modes)); tiled and
                // flat only splat the modes, so they keep zipped's index order.
                let sorted = |l: &Layout| {
                    let mut v = l.values();
                    v.sort_unstable();
                    v
                };
                prop_assert_eq!(sorted(&z), sorted(&lp));
                prop_assert_eq!(tp.values(), z.values());
                prop_assert_eq!(fp.values(), z.values());
                prop_assert_eq!(z.rank(), 2);
                let blocks = z.mode(0).unwrap();
                prop_assert_eq!(blocks.rank(), ts.len());
                for (i, bm) in blocks.modes().iter().enumerate() {
                    prop_assert_eq!(bm, &a.modes()[i]);
                }
                let rests = z.mode(1).unwrap();
                prop_assert_eq!(rests.rank(), a.rank());
                for (i, t) in ts.iter().enumerate() {
                    prop_assert_eq!(rests.modes()[i].size(), t.size());
                }
                prop_assert_eq!(tp.rank(), 1 + a.rank());
                prop_assert_eq!(fp.rank(), ts.len() + a.rank());
            }
        }

        #[test]
        fn blocked_raked_structure(a in arb_injective_layout(), b in arb_compact_layout()) {
            prop_assume!(a.size() * b.size() <= 512);
            // Rank 1 mixes of tuples and integers cannot be zipped (CuTe rejects them too).
            if let (Ok(bp), Ok(rp)) = (blocked_product(&a, &b), raked_product(&a, &b)) {
                let r = a.rank().max(b.rank());
                prop_assert_eq!(bp.rank(), r);
                prop_assert_eq!(rp.rank(), r);
                prop_assert_eq!(bp.size(), rp.size());
                if r >= 2 {
                    for (bm, rm) in bp.modes().iter().zip(rp.modes()) {
                        prop_assert_eq!(bm.mode(0).unwrap(), rm.mode(1).unwrap());
                        prop_assert_eq!(bm.mode(1).unwrap(), rm.mode(0).unwrap());
                    }
                }
                let mut v1 = bp.values();
                let mut v2 = rp.values();
                v1.sort_unstable();
                v2.sort_unstable();
                prop_assert_eq!(v1, v2);
            }
        }
    }
}
