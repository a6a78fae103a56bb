//! proptest strategies shared by the module tests: small layouts of depth <= 2.

use crate::int_tuple::IntTuple;
use crate::layout::Layout;
use proptest::prelude::*;

/// A shape of depth <= 2 with 1..=3 top modes, each an extent in 1..=4 or a tuple of 1..=2
/// such extents; total size kept small by the extents.
pub fn arb_shape() -> impl Strategy<Value = IntTuple> {
    let leaf = (1i64..=4).prop_map(IntTuple::Int);
    let mode = prop_oneof![
        3 => leaf.clone(),
        1 => prop::collection::vec(leaf, 1..=2).prop_map(IntTuple::Tuple),
    ];
    prop_oneof![
        1 => (1i64..=8).prop_map(IntTuple::Int),
        3 => prop::collection::vec(mode, 1..=3).prop_map(IntTuple::Tuple),
    ]
}

/// Any small layout: random shape, strides in 0..=12 (overlaps and gaps allowed).
pub fn arb_layout() -> impl Strategy<Value = Layout> {
    arb_shape()
        .prop_flat_map(|s| {
            let n = s.leaves().len();
            (Just(s), prop::collection::vec(0i64..=12, n))
        })
        .prop_filter_map("valid layout", |(s, d)| {
            let stride = s.unflatten_like(&d)?;
            Layout::new(s, stride).ok()
        })
}

/// A bijection onto `[0, size)`: the leaves laid out compactly in a random order.
pub fn arb_compact_layout() -> impl Strategy<Value = Layout> {
    arb_injective_with_gaps(false)
}

/// An injective layout whose strides nest (compact in a random order, with random gaps).
pub fn arb_injective_layout() -> impl Strategy<Value = Layout> {
    arb_injective_with_gaps(true)
}

fn arb_injective_with_gaps(gaps: bool) -> impl Strategy<Value = Layout> {
    arb_shape()
        .prop_flat_map(move |s| {
            let n = s.leaves().len();
            let perm = Just((0..n).collect::<Vec<usize>>()).prop_shuffle();
            let g = if gaps { 1i64..=3 } else { 1i64..=1 };
            (Just(s), perm, prop::collection::vec(g, n))
        })
        .prop_filter_map("valid layout", |(s, perm, gaps)| {
            let leaves = s.leaves();
            let mut strides = vec![0i64; leaves.len()];
            let mut cur = 1i64;
            for (&i, &g) in perm.iter().zip(&gaps) {
                cur *= g;
                strides[i] = cur;
                cur *= leaves[i];
            }
            let stride = s.unflatten_like(&strides)?;
            Layout::new(s, stride).ok()
        })
}

/// A bijection onto `[0, n)` with a random shape of depth <= 2: n's prime factors are
/// shuffled, cut into leaves, the leaves grouped into 1..=3 top modes, and laid out compactly
/// in a random order.
pub fn arb_compact_of_size(n: i64) -> impl Strategy<Value = Layout> {
    let mut primes = Vec::new();
    let mut m = n.max(1);
    let mut p = 2;
    while m > 1 {
        while m % p == 0 {
            primes.push(p);
            m /= p;
        }
        p += 1;
    }
    let k = primes.len();
    (
        Just(primes).prop_shuffle(),
        prop::collection::vec(any::<bool>(), k),
        prop::collection::vec(0usize..3, k + 1),
        any::<prop::sample::Index>(),
    )
        .prop_filter_map("valid layout", |(primes, cuts, groups, perm_seed)| {
            // Leaves: products of runs of primes.
            let mut leaves = vec![1i64];
            for (i, &p) in primes.iter().enumerate() {
                if i > 0 && cuts[i] {
                    leaves.push(1);
                }
                if let Some(last) = leaves.last_mut() {
                    *last *= p;
                }
            }
            // Group leaves into top-level modes.
            let mut modes: Vec<Vec<i64>> = vec![vec![]];
            for (i, &x) in leaves.iter().enumerate() {
                if i > 0 && groups[i] == 0 && modes.len() < 3 {
                    modes.push(vec![]);
                }
                if let Some(last) = modes.last_mut() {
                    last.push(x);
                }
            }
            let shape = if modes.len() == 1 && modes[0].len() == 1 {
                IntTuple::Int(modes[0][0])
            } else {
                IntTuple::Tuple(
                    modes
                        .iter()
                        .map(|m| {
                            if m.len() == 1 {
                                IntTuple::Int(m[0])
                            } else {
                                IntTuple::flat(m)
                            }
                        })
                        .collect(),
                )
            };
            // Compact strides in a rotated order of the leaves.
            let nl = leaves.len();
            let rot = perm_seed.index(nl.max(1));
            let mut strides = vec![0i64; nl];
            let mut cur = 1;
            for j in 0..nl {
                let i = (j + rot) % nl;
                strides[i] = cur;
                cur *= leaves[i];
            }
            let stride = shape.unflatten_like(&strides)?;
            Layout::new(shape, stride).ok()
        })
}

/// Layouts with extreme extents and strides (anything `Layout::new` accepts), for checking
/// that no operation panics or overflows silently.
pub fn arb_wild_layout() -> impl Strategy<Value = Layout> {
    let ext = prop_oneof![
        1i64..=4,
        1i64..=(1 << 20),
        Just(1i64 << 31),
        Just(3i64 << 40)
    ];
    let stride = prop_oneof![
        -3i64..=12,
        any::<i64>(),
        Just(1i64 << 62),
        Just(i64::MAX),
        Just(i64::MIN + 1),
    ];
    prop::collection::vec((ext, stride), 1..=4).prop_filter_map("valid layout", |m| {
        let (s, d): (Vec<i64>, Vec<i64>) = m.into_iter().unzip();
        Layout::from_flat(&s, &d).ok()
    })
}
