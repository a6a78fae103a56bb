//! The layout algebra proper: every operation is a free function, as in CuTe.
//!
//! One module per family; all are re-exported at the crate root.

pub mod coalesce;
pub mod complement;
pub mod composition;
pub mod divide;
pub mod inverse;
pub mod product;
pub mod recast;

#[cfg(test)]
mod tests {
    //! Robustness: every operation on extreme layouts returns (Ok or Err) without panicking,
    //! and whatever it returns is a valid layout.
    use crate::testutil::arb_wild_layout;
    use crate::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn operations_never_panic(a in arb_wild_layout(), b in arb_wild_layout(), m in any::<i64>()) {
            let _ = a.cosize();
            let _ = a.call(a.size() - 1);
            let _ = a.call(i64::MAX);
            let _ = a.call(i64::MIN);
            let _ = a.try_call(m);
            let _ = a.idx2crd(m);
            let _ = coalesce(&a);
            let _ = filter(&a);
            let _ = composition(&a, &b);
            let _ = composition(&a, Tiler::tuple(vec![b.clone()]));
            let _ = complement(&a, m);
            let _ = complement(&a, a.cosize().max(1));
            let _ = right_inverse(&a);
            let _ = left_inverse(&a);
            let _ = max_common_vector(&a, &b);
            let _ = max_common_layout(&a, &b);
            let _ = logical_divide(&a, &b);
            let _ = zipped_divide(&a, &b);
            let _ = logical_product(&a, &b);
            let _ = blocked_product(&a, &b);
            let _ = raked_product(&a, &b);
            let _ = upcast(&a, m.rem_euclid(1 << 20) + 1);
            let _ = downcast(&a, m.rem_euclid(1 << 40) + 1);
            let _ = recast_layout(&a, 16, m.rem_euclid(1 << 10) + 1);
            let _ = tile_to_shape(&a, b.shape(), None);
            let _ = make_ordered_layout(a.shape(), b.shape());
        }
    }
}
