//! `cp.async`: copies land at their group's wait, and the bugs around them — a dropped wait, a
//! too-weak wait count, a missing barrier after the wait or before re-filling a stage — are
//! caught.

mod common;
use common::*;

use tl_ir::{DType, Expr, Kernel};

const N: usize = 1024;

/// 128 threads copy `x` (1024 f32) into shared memory with 16-byte cp.async (two per thread),
/// then write it reversed to `out`. `wait` and `barrier` say whether the wait and the barrier
/// after it are there.
fn reverse_through_shared(wait: bool, barrier: bool) -> Kernel {
    let x = global("x", vec![Expr::int(N as i64)], DType::F32);
    let out = global("out", vec![Expr::int(N as i64)], DType::F32);
    kernel(
        "reverse",
        vec![],
        vec![input(&x), output(&out)],
        vec![Expr::int(1)],
        128,
        |b, _| {
            let s = b.shared("s", &[N as i64], DType::F32);
            b.for_("j", 2, |b, j| {
                let chunk = b.let_("chunk", j * 128 + tid());
                b.cp_async(
                    16,
                    addr(&s, chunk.clone() * 4),
                    addr(&x, chunk.clone() * 4),
                    true,
                );
            });
            b.commit();
            if wait {
                b.wait(0);
            }
            if barrier {
                b.sync();
            }
            b.for_("j", 8, |b, j| {
                let i = b.let_("i", j * 128 + tid());
                b.store(&out, i.clone(), s.at([(N as i64 - 1) - i]));
            });
        },
    )
}

fn xs() -> Vec<f64> {
    (0..N).map(|i| i as f64).collect()
}

#[test]
fn copies_land_at_the_wait() {
    let k = reverse_through_shared(true, true);
    let mut args = vec![
        SimArg::tensor(DType::F32, &[N], &xs()),
        SimArg::zeros(DType::F32, &[N]),
    ];
    let r = run(&k, &mut args, &opts()).expect("runs");
    let out = args[1].to_f64(DType::F32);
    assert!(out
        .iter()
        .enumerate()
        .all(|(i, &v)| v == (N - 1 - i) as f64));
    assert_eq!(r.cp_async_copies, 256);
    assert_eq!(r.cp_async_unwaited, 0);
    assert_eq!(r.barriers, 1);
}

#[test]
fn a_dropped_wait_reads_stale_data() {
    let k = reverse_through_shared(false, true);
    let mut args = vec![
        SimArg::tensor(DType::F32, &[N], &xs()),
        SimArg::zeros(DType::F32, &[N]),
    ];
    match run(&k, &mut args, &opts()) {
        Err(SimError::StaleAsyncRead {
            buffer,
            thread,
            issuer,
            offset,
            ..
        }) => {
            assert_eq!(buffer, "s");
            assert_eq!(thread, 0);
            // Thread 0 reads s[1023], copied by thread 127's second cp.async.
            assert_eq!(issuer, 127);
            assert_eq!(offset, 1023 * 4);
        }
        other => panic!("expected a stale read, got {other:?}"),
    }
    // Unchecked, the copies never land before the reads: every value is stale.
    let mut args = vec![
        SimArg::tensor(DType::F32, &[N], &xs()),
        SimArg::zeros(DType::F32, &[N]),
    ];
    let r = run(&k, &mut args, &unchecked()).expect("runs unchecked");
    assert!(args[1].to_f64(DType::F32).iter().all(|v| v.is_nan()));
    assert_eq!(r.cp_async_unwaited, 256);
}

#[test]
fn a_missing_barrier_after_the_wait_is_a_race() {
    let k = reverse_through_shared(true, false);
    let mut args = vec![
        SimArg::tensor(DType::F32, &[N], &xs()),
        SimArg::zeros(DType::F32, &[N]),
    ];
    match run(&k, &mut args, &opts()) {
        Err(SimError::DataRace { first, second, .. }) => {
            // Thread 24 reads s[103] (its element 1023 - 24 - 7 * 128), which thread 25
            // copies: nothing orders thread 25's copy before thread 24's read.
            assert_eq!((first.thread, second.thread), (24, 25));
            assert_eq!(first.kind, tl_sim::AccessKind::Read);
            assert_eq!(second.kind, tl_sim::AccessKind::AsyncWrite);
            assert_eq!(second.op, "cp_async<16>");
        }
        other => panic!("expected a race, got {other:?}"),
    }
}

/// A two-stage pipeline over `tiles` tiles of 512 f32: prefetch tile k+1 while summing tile k
/// (each thread sums 4 elements copied by other threads). `wait_n` is the wait count (1 is
/// right), `trailing_barrier` the barrier that keeps the next prefetch from overwriting a stage
/// still being read.
fn pipeline(tiles: i64, wait_n: u32, trailing_barrier: bool) -> Kernel {
    let x = global("x", vec![Expr::int(tiles * 512)], DType::F32);
    let out = global("out", vec![Expr::int(128)], DType::F32);
    kernel(
        "pipeline",
        vec![],
        vec![input(&x), output(&out)],
        vec![Expr::int(1)],
        128,
        |b, _| {
            let s = b.shared("s", &[2 * 512], DType::F32);
            let acc = b.var("acc", DType::F32);
            b.store(&acc, 0, 0.0f32);
            let issue = |b: &mut B, tile: Expr| {
                let stage = tile.clone() % 2;
                b.cp_async(
                    16,
                    addr(&s, stage * 512 + tid() * 4),
                    addr(&x, tile * 512 + tid() * 4),
                    true,
                );
            };
            issue(b, Expr::int(0));
            b.commit();
            b.for_("k", tiles, |b, k| {
                b.if_((k.clone() + 1).lt(tiles), |b| issue(b, k.clone() + 1));
                b.commit();
                b.wait(wait_n);
                b.sync();
                b.for_("j", 4, |b, j| {
                    let e = (tid() * 4 + j + 64) % 512;
                    b.store(&acc, 0, acc.at([0]) + s.at([(k.clone() % 2) * 512 + e]));
                });
                if trailing_barrier {
                    b.sync();
                }
            });
            b.store(&out, tid(), acc.at([0]));
        },
    )
}

fn pipeline_reference(tiles: usize, x: &[f64]) -> Vec<f64> {
    (0..128)
        .map(|t| {
            let mut acc = 0f32;
            for k in 0..tiles {
                for j in 0..4 {
                    acc += x[k * 512 + (t * 4 + j + 64) % 512] as f32;
                }
            }
            acc as f64
        })
        .collect()
}

#[test]
fn a_two_stage_pipeline_is_correct_with_wait_1() {
    let tiles = 5;
    let x = noise(tiles * 512, 3);
    let k = pipeline(tiles as i64, 1, true);
    let mut args = vec![
        SimArg::tensor(DType::F32, &[tiles * 512], &x),
        SimArg::zeros(DType::F32, &[128]),
    ];
    let r = run(&k, &mut args, &opts()).expect("runs");
    assert_eq!(args[1].to_f64(DType::F32), pipeline_reference(tiles, &x));
    assert_eq!(r.cp_async_copies, 128 * tiles as u64);
    assert_eq!(r.barriers, 2 * tiles as u64);
}

#[test]
fn a_too_weak_wait_reads_a_stage_still_in_flight() {
    let tiles = 5;
    let x = noise(tiles * 512, 4);
    let k = pipeline(tiles as i64, 2, true);
    let mut args = vec![
        SimArg::tensor(DType::F32, &[tiles * 512], &x),
        SimArg::zeros(DType::F32, &[128]),
    ];
    assert!(matches!(
        run(&k, &mut args, &opts()),
        Err(SimError::StaleAsyncRead { .. })
    ));
    // Unchecked, the answer is wrong.
    let mut args = vec![
        SimArg::tensor(DType::F32, &[tiles * 512], &x),
        SimArg::zeros(DType::F32, &[128]),
    ];
    run(&k, &mut args, &unchecked()).expect("runs unchecked");
    assert_ne!(args[1].to_f64(DType::F32), pipeline_reference(tiles, &x));
}

#[test]
fn refilling_a_stage_before_everyone_read_it_is_a_race() {
    let tiles = 5;
    let k = pipeline(tiles as i64, 1, false);
    let mut args = vec![
        SimArg::tensor(DType::F32, &[tiles * 512], &noise(tiles * 512, 5)),
        SimArg::zeros(DType::F32, &[128]),
    ];
    match run(&k, &mut args, &opts()) {
        Err(SimError::DataRace { first, second, .. }) => {
            // Some thread read the stage in iteration k; another thread's prefetch in
            // iteration k + 1 targets the same bytes with no barrier between.
            assert_eq!(first.kind, tl_sim::AccessKind::Read);
            assert_eq!(second.kind, tl_sim::AccessKind::AsyncWrite);
        }
        other => panic!("expected a race, got {other:?}"),
    }
}

#[test]
fn predicated_off_copies_zero_fill_and_read_nothing() {
    let x = global("x", vec![Expr::int(256)], DType::F32);
    let out = global("out", vec![Expr::int(512)], DType::F32);
    let k = kernel(
        "zfill",
        vec![],
        vec![input(&x), output(&out)],
        vec![Expr::int(1)],
        128,
        |b, _| {
            let s = b.shared("s", &[512], DType::F32);
            // Threads 64.. name addresses past the end of x; their predicate is false.
            b.cp_async(16, addr(&s, tid() * 4), addr(&x, tid() * 4), tid().lt(64));
            b.commit();
            b.wait(0);
            b.sync();
            b.for_("j", 4, |b, j| {
                let i = b.let_("i", j * 128 + tid());
                b.store(&out, i.clone(), s.at([i]));
            });
        },
    );
    let xs: Vec<f64> = (0..256).map(|i| i as f64 + 1.0).collect();
    let mut args = vec![
        SimArg::tensor(DType::F32, &[256], &xs),
        SimArg::zeros(DType::F32, &[512]),
    ];
    run(&k, &mut args, &opts()).expect("runs");
    let o = args[1].to_f64(DType::F32);
    assert_eq!(&o[..256], &xs[..]);
    assert!(o[256..].iter().all(|&v| v == 0.0));
}

#[test]
fn misaligned_and_out_of_bounds_copies() {
    let x = global("x", vec![Expr::int(64)], DType::F32);
    let out = global("out", vec![Expr::int(1)], DType::F32);
    let mk = |src_off: i64| {
        let xb = x.clone();
        kernel(
            "bad_copy",
            vec![],
            vec![input(&x), output(&out)],
            vec![Expr::int(1)],
            32,
            move |b, _| {
                let s = b.shared("s", &[128], DType::F32);
                b.cp_async(
                    16,
                    addr(&s, tid() * 4),
                    addr(&xb, tid() * 4 + src_off),
                    true,
                );
                b.commit();
                b.wait(0);
            },
        )
    };
    let args = || {
        vec![
            SimArg::zeros(DType::F32, &[64]),
            SimArg::zeros(DType::F32, &[1]),
        ]
    };
    assert!(matches!(
        run(&mk(1), &mut args(), &opts()),
        Err(SimError::Misaligned {
            align: 16,
            thread: 0,
            ..
        })
    ));
    match run(&mk(0), &mut args(), &opts()) {
        Err(SimError::OutOfBounds {
            buffer,
            thread,
            extent,
            ..
        }) => {
            assert_eq!(buffer, "x");
            assert_eq!(thread, 16);
            assert_eq!(extent, vec![64]);
        }
        other => panic!("expected out of bounds, got {other:?}"),
    }
}
