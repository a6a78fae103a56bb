//! Shuffles, block reductions through shared memory, barriers, and the synchronization bugs the
//! simulator must catch: a missing barrier, a wrong thread index, divergent barriers and
//! collectives, uninitialized shared reads.

mod common;
use common::*;

use std::cell::Cell;
use tl_ir::{DType, Expr, Kernel};

const T: i64 = 256;

/// Sum of each block's 256 inputs: a warp reduction with `shfl_xor`, one partial per warp in
/// shared memory, a barrier (unless `barrier` is false), then warp 0 reduces the 8 partials
/// with `shfl_down` of width 8. `lines` receives the lines of the partial store and load.
fn block_sum(barrier: bool, lines: &Cell<(u32, u32)>) -> Kernel {
    let x = global("x", vec![Expr::int(4 * T)], DType::F32);
    let out = global("out", vec![Expr::int(4)], DType::F32);
    kernel(
        "block_sum",
        vec![],
        vec![input(&x), output(&out)],
        vec![Expr::int(4)],
        T as u32,
        |b, bx| {
            let v = b.var("v", DType::F32);
            b.store(&v, 0, x.at([bx[0].clone() * T + tid()]));
            for m in [16, 8, 4, 2, 1] {
                b.store(&v, 0, v.at([0]) + shfl_xor(v.at([0]), m, 32));
            }
            let partial = b.shared("partial", &[8], DType::F32);
            let store_line = Cell::new(0);
            b.if_((tid() % 32).eq_(0), |b| {
                b.store(&partial, tid() / 32, v.at([0]));
                store_line.set(b.last_line());
            });
            let store_line = store_line.get();
            if barrier {
                b.sync();
            }
            b.if_(tid().lt(32), |b| {
                let p = tl_ir::ops::if_then_else(tid().lt(8), partial.at([tid()]), 0.0f32);
                b.store(&v, 0, p);
                lines.set((store_line, b.last_line()));
                for m in [4, 2, 1] {
                    b.store(&v, 0, v.at([0]) + shfl_down(v.at([0]), m, 8));
                }
                b.if_(tid().eq_(0), |b| b.store(&out, bx[0].clone(), v.at([0])));
            });
        },
    )
}

#[test]
fn block_reduction_with_shuffles_and_shared_memory() {
    let lines = Cell::new((0, 0));
    let k = block_sum(true, &lines);
    let xs = noise(4 * T as usize, 1);
    let mut args = vec![
        SimArg::tensor(DType::F32, &[4 * T as usize], &xs),
        SimArg::zeros(DType::F32, &[4]),
    ];
    let r = run(&k, &mut args, &opts()).expect("runs");
    let out = args[1].to_f64(DType::F32);
    for blk in 0..4 {
        let want: f64 = xs[blk * 256..(blk + 1) * 256]
            .iter()
            .map(|&v| v as f32 as f64)
            .sum();
        assert!(
            (out[blk] - want).abs() < 1e-4,
            "block {blk}: {} vs {want}",
            out[blk]
        );
    }
    assert_eq!(r.barriers, 4);
    // 5 xor rounds in each of 8 warps, 3 down rounds in warp 0, per block.
    assert_eq!(r.warp_collectives, 4 * (5 * 8 + 3));
    assert_eq!(r.shared_bytes, 32);
}

#[test]
fn a_missing_barrier_is_a_data_race_naming_both_lines() {
    let lines = Cell::new((0, 0));
    let k = block_sum(false, &lines);
    let (store_line, load_line) = lines.get();
    let mut args = vec![
        SimArg::tensor(DType::F32, &[4 * T as usize], &noise(4 * T as usize, 2)),
        SimArg::zeros(DType::F32, &[4]),
    ];
    let e = run(&k, &mut args, &opts()).unwrap_err();
    match &e {
        SimError::DataRace {
            buffer,
            first,
            second,
            block,
            ..
        } => {
            assert_eq!(buffer, "partial");
            assert_eq!(*block, [0, 0, 0]);
            // Thread 1 reads partial[1] before thread 32 writes it.
            assert_eq!(first.span.line, load_line, "{e}");
            assert_eq!(first.kind, tl_sim::AccessKind::Read);
            assert_eq!(second.span.line, store_line, "{e}");
            assert_eq!(second.kind, tl_sim::AccessKind::Write);
            assert_ne!(first.thread, second.thread);
            let msg = e.to_string();
            assert!(msg.contains("warp_and_block.rs"), "{msg}");
        }
        other => panic!("expected a race, got {other}"),
    }
    // Without the checks the answer is simply wrong (poisoned partials).
    let mut args = vec![
        SimArg::tensor(DType::F32, &[4 * T as usize], &noise(4 * T as usize, 2)),
        SimArg::zeros(DType::F32, &[4]),
    ];
    run(&k, &mut args, &unchecked()).expect("runs unchecked");
    assert!(args[1].to_f64(DType::F32).iter().any(|v| v.is_nan()));
}

#[test]
fn two_threads_writing_one_shared_element_is_a_race() {
    // A wrong thread index: s[tid / 2] instead of s[tid].
    let out = global("out", vec![Expr::int(64)], DType::F32);
    let k = kernel(
        "wrong_index",
        vec![],
        vec![output(&out)],
        vec![Expr::int(1)],
        64,
        |b, _| {
            let s = b.shared("s", &[64], DType::F32);
            b.store(&s, tid() / 2, tid().cast(DType::F32));
            b.sync();
            b.store(&out, tid(), s.at([63 - tid()]));
        },
    );
    let mut args = vec![SimArg::zeros(DType::F32, &[64])];
    match run(&k, &mut args, &opts()) {
        Err(SimError::DataRace {
            buffer,
            offset,
            first,
            second,
            ..
        }) => {
            assert_eq!(buffer, "s");
            assert_eq!(offset, 0);
            assert_eq!((first.thread, second.thread), (0, 1));
            assert_eq!(first.span.line, second.span.line);
        }
        other => panic!("expected a race, got {other:?}"),
    }
}

#[test]
fn write_after_read_without_a_barrier_is_a_race() {
    // Every thread reads its neighbour's element, then overwrites its own: the classic
    // in-place update that needs a barrier between the read and the write.
    let out = global("out", vec![Expr::int(64)], DType::F32);
    let k = kernel(
        "war",
        vec![],
        vec![output(&out)],
        vec![Expr::int(1)],
        64,
        |b, _| {
            let s = b.shared("s", &[64], DType::F32);
            b.store(&s, tid(), 1.0f32);
            b.sync();
            let v = b.let_("v", s.at([(tid() + 1) % 64]));
            b.store(&s, tid(), v + 1.0f32);
            b.sync();
            b.store(&out, tid(), s.at([tid()]));
        },
    );
    let mut args = vec![SimArg::zeros(DType::F32, &[64])];
    match run(&k, &mut args, &opts()) {
        Err(SimError::DataRace { first, second, .. }) => {
            assert_eq!(first.kind, tl_sim::AccessKind::Read);
            assert_eq!(second.kind, tl_sim::AccessKind::Write);
            assert_eq!((first.thread, second.thread), (0, 1));
        }
        other => panic!("expected a race, got {other:?}"),
    }
}

#[test]
fn sync_warp_orders_lanes_of_a_warp_and_atomics_do_not_race() {
    let out = global("out", vec![Expr::int(2)], DType::F32);
    let k = kernel(
        "warp_sync",
        vec![],
        vec![output(&out)],
        vec![Expr::int(1)],
        64,
        |b, _| {
            let s = b.shared("s", &[64], DType::F32);
            let total = b.shared("total", &[1], DType::F32);
            b.if_(tid().eq_(0), |b| b.store(&total, 0, 0.0f32));
            b.store(&s, tid(), tid().cast(DType::F32));
            b.sync_warp();
            // A lane reads another lane of its own warp: ordered by sync_warp.
            let v = b.let_("v", s.at([(tid() / 32) * 32 + (tid() + 1) % 32]));
            b.sync();
            b.atomic_add(addr(&total, 0), v);
            b.sync();
            b.if_(tid().eq_(0), |b| b.store(&out, 0, total.at([0])));
        },
    );
    let mut args = vec![SimArg::zeros(DType::F32, &[2])];
    let r = run(&k, &mut args, &opts()).expect("runs");
    assert_eq!(args[0].to_f64(DType::F32)[0], (0..64).sum::<i32>() as f64);
    assert_eq!(r.warp_syncs, 2);

    // Reading across warps after only a sync_warp is a race.
    let k = kernel(
        "warp_sync_bad",
        vec![],
        vec![output(&out)],
        vec![Expr::int(1)],
        64,
        |b, _| {
            let s = b.shared("s", &[64], DType::F32);
            b.store(&s, tid(), 1.0f32);
            b.sync_warp();
            b.if_(tid().eq_(0), |b| b.store(&out, 0, s.at([32])));
        },
    );
    let mut args = vec![SimArg::zeros(DType::F32, &[2])];
    assert!(matches!(
        run(&k, &mut args, &opts()),
        Err(SimError::DataRace { .. })
    ));
}

#[test]
fn shuffles_for_widths_32_16_8_and_64_bit_values() {
    // out[tid][j] for j = (kind, width) pairs, with a lane-dependent argument.
    let widths = [32u32, 16, 8];
    let n_per = widths.len() * 3;
    for dt in [DType::F32, DType::I64, DType::F64, DType::I32] {
        let out = global("out", vec![Expr::int(64 * n_per as i64)], dt);
        let k = kernel(
            "shfl",
            vec![],
            vec![output(&out)],
            vec![Expr::int(1)],
            64,
            |b, _| {
                // Values that need all 64 bits for the 64-bit types.
                let val = if dt == DType::I64 {
                    (tid().cast(DType::I64) * 1_000_000_007i64) * 1_000_000_007i64 + 5
                } else if dt == DType::F64 {
                    // (Expr::from(f64) is an f32 literal; an f64 one needs const_of.)
                    tid().cast(DType::F64) * Expr::const_of(1.0000000001, DType::F64)
                        + Expr::const_of(0.5, DType::F64)
                } else {
                    (tid() * 3 + 1).cast(dt)
                };
                let v = b.let_("v", val);
                let mut j = 0i64;
                for w in widths {
                    let arg_xor = (tid() % 5 + 1) % 32;
                    let arg_down = tid() % 7;
                    let arg_idx = tid() * 7 + 3;
                    for e in [
                        shfl_xor(v.clone(), arg_xor, w),
                        shfl_down(v.clone(), arg_down, w),
                        shfl_idx(v.clone(), arg_idx, w),
                    ] {
                        b.store(&out, tid() * n_per as i64 + j, e);
                        j += 1;
                    }
                }
            },
        );
        let mut args = vec![SimArg::zeros(dt, &[64 * n_per])];
        run(&k, &mut args, &opts()).expect("runs");
        let got = match &args[0] {
            SimArg::Tensor { bytes, .. } => bytes.clone(),
            _ => unreachable!(),
        };
        let value = |t: i64| -> Vec<u8> {
            match dt {
                DType::I64 => (t.wrapping_mul(1_000_000_007).wrapping_mul(1_000_000_007) + 5)
                    .to_le_bytes()
                    .to_vec(),
                DType::F64 => (t as f64 * 1.0000000001 + 0.5).to_le_bytes().to_vec(),
                DType::F32 => ((t * 3 + 1) as f32).to_le_bytes().to_vec(),
                _ => ((t * 3 + 1) as i32).to_le_bytes().to_vec(),
            }
        };
        let es = dt.bytes();
        for t in 0..64i64 {
            let lane = t % 32;
            let warp0 = t - lane;
            let mut j = 0;
            for w in widths {
                let w = w as i64;
                let seg = lane / w * w;
                // Reference semantics, written independently of the simulator's PTX model.
                let x = lane ^ ((t % 5 + 1) % 32);
                let src_xor = if x / w == lane / w || x < seg {
                    x
                } else {
                    lane
                };
                let d = lane + t % 7;
                let src_down = if d < seg + w { d } else { lane };
                let src_idx = seg + (t * 7 + 3) % w;
                for src in [src_xor, src_down, src_idx] {
                    let at = ((t as usize) * n_per + j) * es;
                    assert_eq!(
                        got[at..at + es],
                        value(warp0 + src)[..],
                        "{dt} thread {t} width {w} case {j}"
                    );
                    j += 1;
                }
            }
        }
    }
}

#[test]
fn a_barrier_only_some_threads_reach_is_divergence() {
    let out = global("out", vec![Expr::int(1)], DType::F32);
    let k = kernel(
        "diverge",
        vec![],
        vec![output(&out)],
        vec![Expr::int(1)],
        64,
        |b, _| {
            b.if_(tid().lt(32), |b| b.sync());
        },
    );
    let mut args = vec![SimArg::zeros(DType::F32, &[1])];
    match run(&k, &mut args, &opts()) {
        Err(SimError::BarrierDivergence {
            waiting,
            other,
            other_state,
            ..
        }) => {
            assert_eq!((waiting, other), (0, 32));
            assert_eq!(other_state, "has exited");
        }
        other => panic!("expected divergence, got {other:?}"),
    }
    // Two different barriers.
    let k = kernel(
        "diverge2",
        vec![],
        vec![output(&out)],
        vec![Expr::int(1)],
        64,
        |b, _| {
            b.if_else(tid().lt(32), |b| b.sync(), |b| b.sync());
        },
    );
    let mut args = vec![SimArg::zeros(DType::F32, &[1])];
    assert!(matches!(
        run(&k, &mut args, &opts()),
        Err(SimError::BarrierDivergence { .. })
    ));
}

#[test]
fn a_shuffle_only_some_lanes_reach_is_warp_divergence() {
    let out = global("out", vec![Expr::int(32)], DType::F32);
    let k = kernel(
        "wdiverge",
        vec![],
        vec![output(&out)],
        vec![Expr::int(1)],
        32,
        |b, _| {
            b.if_(tid().lt(16), |b| {
                b.store(&out, tid(), shfl_xor(tid().cast(DType::F32), 1, 32));
            });
        },
    );
    let mut args = vec![SimArg::zeros(DType::F32, &[32])];
    match run(&k, &mut args, &opts()) {
        Err(SimError::WarpDivergence {
            warp,
            waiting,
            other,
            op,
            ..
        }) => {
            assert_eq!((warp, waiting, other), (0, 0, 16));
            assert_eq!(op, "shfl_xor<32>");
        }
        other => panic!("expected warp divergence, got {other:?}"),
    }
    // A partial warp (48 threads) cannot shuffle.
    let k = kernel(
        "partial",
        vec![],
        vec![output(&out)],
        vec![Expr::int(1)],
        48,
        |b, _| {
            b.if_(tid().lt(32), |b| {
                b.store(&out, tid(), shfl_xor(tid().cast(DType::F32), 1, 32))
            });
            b.if_(tid().ge(32), |b| {
                b.store(&out, tid() - 32, shfl_xor(tid().cast(DType::F32), 1, 32))
            });
        },
    );
    let mut args = vec![SimArg::zeros(DType::F32, &[32])];
    assert!(matches!(
        run(&k, &mut args, &opts()),
        Err(SimError::Unsupported(_))
    ));
}

#[test]
fn reading_shared_memory_nothing_wrote_is_reported() {
    let out = global("out", vec![Expr::int(32)], DType::F32);
    let k = kernel(
        "uninit",
        vec![],
        vec![output(&out)],
        vec![Expr::int(1)],
        32,
        |b, _| {
            let s = b.shared("s", &[64], DType::F32);
            b.store(&s, tid(), 1.0f32);
            b.sync();
            // Elements 32..63 were never written.
            b.store(&out, tid(), s.at([tid() + 16]));
        },
    );
    let mut args = vec![SimArg::zeros(DType::F32, &[32])];
    match run(&k, &mut args, &opts()) {
        Err(SimError::UninitializedSharedRead {
            buffer,
            offset,
            thread,
            ..
        }) => {
            assert_eq!(buffer, "s");
            assert_eq!(offset, 128);
            assert_eq!(thread, 16);
        }
        other => panic!("expected an uninitialized read, got {other:?}"),
    }
    let o = SimOptions {
        check_uninit: false,
        ..opts()
    };
    let mut args = vec![SimArg::zeros(DType::F32, &[32])];
    run(&k, &mut args, &o).expect("runs without the check");
    assert!(args[0].to_f64(DType::F32)[20].is_nan());
}

/// Runs a 384-thread kernel whose threads where `consumers` holds take `setmaxnreg.inc inc`
/// and the others `setmaxnreg.dec dec`, then each store one value: the simulator's error, if
/// any.
fn run_register_split(consumers: Expr, dec: u32, inc: u32) -> Result<(), String> {
    let out = global("out", vec![Expr::int(384)], DType::F32);
    let k = kernel(
        "split",
        vec![],
        vec![output(&out)],
        vec![Expr::int(1)],
        384,
        |b, _| {
            let set = |b: &mut B, inc: bool, regs: u32| {
                b.call(tl_ir::Intrinsic::SetMaxNReg { inc, regs }, vec![])
            };
            b.if_else(consumers, |b| set(b, true, inc), |b| set(b, false, dec));
            b.store(&out, tid(), 1.0f32);
        },
    );
    let mut args = vec![SimArg::tensor(DType::F32, &[384], &[0.0; 384])];
    tl_sim::run(&k, &mut args, &SimOptions::default())
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// A `setmaxnreg` split is checked against the registers the launch allocated: 384 threads
/// hold 168 each (64,512), so a producer warpgroup at 96 beside consumers at 208 (65,536)
/// would leave `setmaxnreg.inc` waiting forever on a GPU (it hung there: gpu-notes run 27b);
/// the same producer beside consumers at 200 fits. The consumers are the first 256 threads,
/// as the compiler's warp specialization has them.
#[test]
fn register_splits_must_fit_the_launch() {
    let split = |dec, inc| run_register_split(tid().lt(256), dec, inc);
    let err = split(96, 208).expect_err("65,536 registers from a pool of 64,512");
    assert!(
        err.contains("deadlock") && err.contains("setmaxnreg.inc to 208") && err.contains("64512"),
        "{err}"
    );
    split(96, 200).expect("64,000 registers fit");
    split(56, 224).expect("64,512 registers fit");
}

/// The simulator keeps each thread's register count and makes `setmaxnreg.inc` wait for the
/// block's pool, so a split of any shape that cannot be met deadlocks, as on a GPU: here the
/// consumers are picked by warpgroup index, a shape the earlier check (a pattern of the
/// compiler's own split) did not recognise.
#[test]
fn any_register_split_that_cannot_be_met_deadlocks() {
    let split = |dec, inc| run_register_split((tid() / 128).lt(2), dec, inc);
    let err = split(40, 240).expect_err("40·128 + 240·256 = 66,560 > 64,512");
    assert!(
        err.contains("deadlock") && err.contains("setmaxnreg.inc to 240"),
        "{err}"
    );
    split(40, 232).expect("64,512 registers fit");
    // What the PTX ISA does not allow at all.
    let err = split(40, 100).expect_err("100 is not a multiple of 8");
    assert!(err.contains("multiple of 8"), "{err}");
    let err = split(200, 232).expect_err("a .dec above the launch's 168");
    assert!(err.contains(".dec to 200"), "{err}");
    let err = split(40, 160).expect_err("an .inc below the launch's 168");
    assert!(err.contains(".inc to 160"), "{err}");
}

/// `setmaxnreg` is `.sync.aligned`: a warp takes its registers only once all its lanes wait at
/// the instruction. Half a warp there, with registers to spare, is reported as the warp's
/// divergence, not as a shortage of registers.
#[test]
fn half_a_warp_at_setmaxnreg_is_stuck_not_short() {
    let err = run_register_split(tid().lt(16), 160, 176).expect_err("lanes 16.. never arrive");
    assert!(
        err.contains("warp divergence") && err.contains("setmaxnreg_inc<176>"),
        "{err}"
    );
}
