//! Property tests: the race checker against a direct statement of when a shared-memory exchange
//! races, mma against a CPU matmul on random tiles, and element rounding against `round_to`.

mod common;
use common::*;

use proptest::prelude::*;
use tl_ir::{DType, Expr};

/// Thread t writes `s[w[t]]`, then (with `barrier`) syncs, then reads `s[r[t]]` into out[t].
/// `w` and `r` come in as global index tables.
fn exchange(barrier: bool) -> tl_ir::Kernel {
    let w = global("w", vec![Expr::int(64)], DType::I32);
    let r = global("r", vec![Expr::int(64)], DType::I32);
    let out = global("out", vec![Expr::int(64)], DType::F32);
    kernel(
        "exchange",
        vec![],
        vec![input(&w), input(&r), output(&out)],
        vec![Expr::int(1)],
        64,
        |b, _| {
            let s = b.shared("s", &[64], DType::F32);
            b.store(&s, w.at([tid()]), tid().cast(DType::F32));
            if barrier {
                b.sync();
            }
            b.store(&out, tid(), s.at([r.at([tid()])]));
        },
    )
}

fn perm() -> impl Strategy<Value = Vec<usize>> {
    Just((0..64).collect::<Vec<usize>>()).prop_shuffle()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn exchanges_race_exactly_when_unordered(w in perm(), r in perm(), barrier in any::<bool>()) {
        let f = |v: &[usize]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
        let mut args = vec![
            SimArg::tensor(DType::I32, &[64], &f(&w)),
            SimArg::tensor(DType::I32, &[64], &f(&r)),
            SimArg::zeros(DType::F32, &[64]),
        ];
        let res = run(&exchange(barrier), &mut args, &opts());
        // Without a barrier, a thread reading an element another thread wrote races.
        let racy = !barrier && (0..64).any(|t| r[t] != w[t]);
        if racy {
            let is_race = matches!(res, Err(SimError::DataRace { .. }));
            prop_assert!(is_race, "{:?}", res);
        } else {
            prop_assert!(res.is_ok(), "{:?}", res);
            let mut writer = [0usize; 64];
            for (t, &e) in w.iter().enumerate() {
                writer[e] = t;
            }
            let out = args[2].to_f64(DType::F32);
            for t in 0..64 {
                prop_assert_eq!(out[t], writer[r[t]] as f64);
            }
        }
    }

    #[test]
    fn mma_matches_a_matmul(
        a in proptest::collection::vec(-8i32..8, 256),
        b in proptest::collection::vec(-8i32..8, 128),
        c in proptest::collection::vec(-100i32..100, 128),
    ) {
        use tl_sim::tensor_core::{a_coord, b_coord, c_coord, mma_m16n8k16};
        let (mut fa, mut fb, mut fc) = ([[0f32; 8]; 32], [[0f32; 4]; 32], [[0f32; 4]; 32]);
        for (lane, ((xa, xb), xc)) in fa.iter_mut().zip(&mut fb).zip(&mut fc).enumerate() {
            for (i, x) in xa.iter_mut().enumerate() {
                let (r, k) = a_coord(lane, i);
                *x = a[r * 16 + k] as f32 * 0.5;
            }
            for (i, (y, z)) in xb.iter_mut().zip(xc.iter_mut()).enumerate() {
                let (k, n) = b_coord(lane, i);
                *y = b[k * 8 + n] as f32 * 0.25;
                let (r, n) = c_coord(lane, i);
                *z = c[r * 8 + n] as f32;
            }
        }
        // Every lane's D element is the dot product of its row and column.
        let d = mma_m16n8k16(&fa, &fb, &fc);
        for (lane, dl) in d.iter().enumerate() {
            for (i, &x) in dl.iter().enumerate() {
                let (r, n) = c_coord(lane, i);
                let want: f32 = (0..16)
                    .map(|k| a[r * 16 + k] as f32 * 0.5 * b[k * 8 + n] as f32 * 0.25)
                    .sum::<f32>()
                    + c[r * 8 + n] as f32;
                prop_assert_eq!(x, want);
            }
        }
    }

    #[test]
    fn stores_round_like_round_to(v in -1.0e6f64..1.0e6) {
        for dt in [DType::F16, DType::BF16, DType::F8E4M3, DType::F8E5M2, DType::F32] {
            let arg = SimArg::tensor(dt, &[1], &[v]);
            let want = tl_ir::dtype::round_to(dt, v as f32 as f64);
            prop_assert_eq!(arg.to_f64(dt)[0], want, "{}", dt);
        }
    }
}
