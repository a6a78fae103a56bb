//! Hopper's TMA and mbarriers: boxes land swizzled (128-, 64-, 32-byte and no swizzle, checked
//! against the swizzle formula computed here), out-of-range elements land as zeros, a pipelined
//! loop over phases and parities lands every tile, and the protocol bugs — a missing or wrong
//! `expect_tx`, a read before the wait, an uninitialized barrier, a wrong parity, a misaligned
//! swizzled destination — are reported.

mod common;
use common::*;

use tl_ir::{BinOp, DType, Expr, Intrinsic, Kernel};
use tl_sim::{AsyncCopy, MbarrierState};

/// The tensor every test copies from: `A[i][j] = i·N + j + 1` (zero marks an element that came
/// from outside the tensor).
const M: usize = 20;
const N: usize = 40;

fn a_values(m: usize, n: usize) -> Vec<f64> {
    (0..m * n).map(|i| (i + 1) as f64).collect()
}

fn tensor(name: &str, m: usize, n: usize) -> tl_ir::Buffer {
    global(
        name,
        vec![Expr::int(m as i64), Expr::int(n as i64)],
        DType::F32,
    )
}

fn xor(a: Expr, b: Expr) -> Expr {
    Expr::binary(BinOp::BitXor, a, b)
}

/// How the issuing thread announces the copy.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Announce {
    /// `mbarrier_arrive_expect_tx(bar, bytes)`.
    ExpectTx(i64),
    /// A plain `mbarrier_arrive` before the copy.
    Arrive,
    /// A plain `mbarrier_arrive` after the copy.
    ArriveAfter,
    /// Nothing.
    Nothing,
}

/// One TMA copy of a `rows × cols` f32 box of `A` at `coords` into shared `s` at element
/// `dst`, announced as `announce`, waited for with `wait` (a parity) by every thread; then
/// every thread copies the box's bytes from `s` (as they lie, swizzled) to `out`.
#[derive(Clone, Copy, Debug)]
struct Shot {
    swizzle: u32,
    rows: i64,
    cols: i64,
    coords: (i64, i64),
    dst: i64,
    smem: i64,
    announce: Announce,
    init: bool,
    wait: Option<i64>,
    /// Threads below this wait (the others do not).
    waiters: i64,
    /// A block barrier after the wait.
    sync_after_wait: bool,
    /// The thread that announces and issues the copy.
    issuer: i64,
}

impl Shot {
    fn new(swizzle: u32, rows: i64, cols: i64, coords: (i64, i64)) -> Shot {
        Shot {
            swizzle,
            rows,
            cols,
            coords,
            dst: 0,
            smem: 1024,
            announce: Announce::ExpectTx(rows * cols * 4),
            init: true,
            wait: Some(0),
            waiters: 64,
            sync_after_wait: false,
            issuer: 0,
        }
    }

    fn kernel(self) -> Kernel {
        let a = tensor("A", M, N);
        let n = self.rows * self.cols;
        let out = global("out", vec![Expr::int(n)], DType::F32);
        kernel(
            "tma_shot",
            vec![],
            vec![input(&a), output(&out)],
            vec![Expr::int(1)],
            64,
            |b, _| {
                let s = b.shared("s", &[self.smem], DType::F32);
                let bar = b.shared("bar", &[2], DType::U64);
                if self.init {
                    b.if_(tid().eq_(0), |b| {
                        b.call(Intrinsic::MbarrierInit { count: 1 }, vec![addr(&bar, 0)]);
                        b.call(Intrinsic::FenceMbarrierInit, vec![]);
                    });
                }
                b.sync();
                b.if_(tid().eq_(self.issuer), |b| {
                    match self.announce {
                        Announce::ExpectTx(bytes) => b.call(
                            Intrinsic::MbarrierArriveExpectTx,
                            vec![addr(&bar, 0), Expr::int(bytes)],
                        ),
                        Announce::Arrive => b.call(Intrinsic::MbarrierArrive, vec![addr(&bar, 0)]),
                        Announce::Nothing | Announce::ArriveAfter => {}
                    }
                    b.call(
                        Intrinsic::TmaLoad {
                            box_dims: vec![self.rows as u32, self.cols as u32],
                            swizzle: self.swizzle,
                            multicast: false,
                        },
                        vec![
                            addr(&s, self.dst),
                            addr_nd(&a, vec![Expr::int(0), Expr::int(0)]),
                            addr(&bar, 0),
                            Expr::int(self.coords.0).cast(DType::I32),
                            Expr::int(self.coords.1).cast(DType::I32),
                        ],
                    );
                    if self.announce == Announce::ArriveAfter {
                        b.call(Intrinsic::MbarrierArrive, vec![addr(&bar, 0)]);
                    }
                });
                if let Some(p) = self.wait {
                    b.if_(tid().lt(self.waiters), |b| {
                        b.call(Intrinsic::MbarrierWait, vec![addr(&bar, 0), Expr::int(p)]);
                    });
                }
                if self.sync_after_wait {
                    b.sync();
                }
                b.for_("j", (n + 63) / 64, |b, j| {
                    let i = b.let_("i", j * 64 + tid());
                    b.if_(i.lt(n), |b| {
                        b.store(&out, i.clone(), s.at([i + self.dst]));
                    });
                });
            },
        )
    }

    /// What `out` must hold: the box's element `(r, c)` sits at the byte the swizzle formula
    /// gives for its row-major place (absolute shared addresses: `s` starts at 0): in each
    /// 128-byte line `L`, 16-byte chunk `j` moves to chunk `j ^ (L mod (swizzle / 16))`.
    fn expected(self) -> Vec<f64> {
        let n = (self.rows * self.cols) as usize;
        let mut want = vec![f64::NAN; n];
        let base = self.dst as usize * 4;
        for r in 0..self.rows {
            for c in 0..self.cols {
                let (i, j) = (self.coords.0 + r, self.coords.1 + c);
                let v = if (0..M as i64).contains(&i) && (0..N as i64).contains(&j) {
                    (i as usize * N + j as usize + 1) as f64
                } else {
                    0.0
                };
                let lin = base + ((r * self.cols + c) * 4) as usize;
                let phys = if self.swizzle == 0 {
                    lin
                } else {
                    let (line, chunk, byte) = (lin / 128, (lin % 128) / 16, lin % 16);
                    let rows_mod = self.swizzle as usize / 16;
                    line * 128 + (chunk ^ (line % rows_mod)) * 16 + byte
                };
                want[(phys - base) / 4] = v;
            }
        }
        want
    }
}

#[allow(clippy::result_large_err)]
fn run_shot(shot: Shot) -> Result<(Vec<f64>, tl_sim::SimReport), SimError> {
    let n = (shot.rows * shot.cols) as usize;
    let mut args = vec![
        SimArg::tensor(DType::F32, &[M, N], &a_values(M, N)),
        SimArg::zeros(DType::F32, &[n]),
    ];
    let r = run(&shot.kernel(), &mut args, &opts())?;
    Ok((args[1].to_f64(DType::F32), r))
}

#[test]
fn boxes_land_with_each_swizzle() {
    // f32 boxes whose rows are one swizzle row wide (and a 128-byte row unswizzled), inside
    // the tensor, at destinations aligned for the swizzle but not at the buffer's start.
    for (swizzle, rows, cols, dst) in [
        (128, 8, 32, 256),
        (128, 16, 32, 0),
        (64, 16, 16, 128),
        (32, 16, 8, 64),
        (0, 8, 32, 32),
        // A row narrower than the swizzle.
        (128, 8, 16, 256),
    ] {
        let shot = Shot {
            dst,
            smem: 2048,
            ..Shot::new(swizzle, rows, cols, (3, 4))
        };
        let (got, r) = run_shot(shot).unwrap_or_else(|e| panic!("{shot:?}: {e}"));
        assert_eq!(got, shot.expected(), "{shot:?}");
        assert_eq!(r.tma_copies, 1);
        assert_eq!(r.tma_unlanded, 0);
        if swizzle == 128 && cols == 32 {
            // The formula really moves data: row 1's first chunk holds its second 16 bytes.
            let w = got[cols as usize];
            assert_eq!(w, (4 * N + 4 + 4 + 1) as f64, "{shot:?}");
        }
    }
}

#[test]
fn waits_block_until_another_warp_completes_the_phase() {
    // Thread 63 runs last: every other thread blocks in its wait until thread 63's copy
    // completes the phase.
    let shot = Shot {
        issuer: 63,
        ..Shot::new(128, 8, 32, (5, 4))
    };
    let (got, r) = run_shot(shot).expect("runs");
    assert_eq!(got, shot.expected());
    assert_eq!(r.tma_copies, 1);
}

#[test]
fn elements_outside_the_tensor_land_as_zeros() {
    // Past the end in both dims (A is 20 × 40), and before the start (negative coordinates).
    for coords in [(16, 20), (-3, -8), (-7, 28), (19, 36), (40, 100)] {
        for swizzle in [128, 0] {
            let shot = Shot::new(swizzle, 8, 32, coords);
            let (got, _) = run_shot(shot).unwrap_or_else(|e| panic!("{shot:?}: {e}"));
            let want = shot.expected();
            assert_eq!(got, want, "{shot:?}");
            assert!(want.contains(&0.0), "{shot:?}");
        }
    }
}

/// A box whose first column is not 16 bytes into the tensor's rows (f32 columns 1, -5 and
/// 6): the GPU stops with an illegal instruction, the simulator with the reason.
#[test]
fn a_box_off_16_bytes_is_caught() {
    for coords in [(3, 1), (-3, -5), (0, 6)] {
        let shot = Shot::new(128, 8, 32, coords);
        match run_shot(shot) {
            Err(SimError::InvalidIr(m)) => assert!(m.contains("multiple of 16 bytes"), "{m}"),
            other => panic!("{coords:?}: {:?}", other.map(|r| r.0.len())),
        }
    }
}

#[test]
fn a_missing_expect_tx_deadlocks() {
    let shot = Shot {
        announce: Announce::Nothing,
        ..Shot::new(128, 8, 32, (0, 0))
    };
    match run_shot(shot) {
        Err(SimError::MbarrierDeadlock {
            barrier,
            parity,
            waiting,
            state,
            ..
        }) => {
            assert_eq!(barrier, "`bar`[0]");
            assert_eq!((parity, waiting), (0, 64));
            let MbarrierState {
                phase,
                pending,
                tx_expected,
                tx_delivered,
                detail,
                ..
            } = *state;
            assert_eq!((phase, pending, tx_expected, tx_delivered), (0, 1, 0, 1024));
            assert!(
                detail.contains("missing mbarrier_arrive_expect_tx"),
                "{detail}"
            );
        }
        other => panic!("expected a deadlock, got {other:?}"),
    }
    // An arrival without the announcement after the copy: the copy's bytes are more than the
    // phase expects.
    let shot = Shot {
        announce: Announce::ArriveAfter,
        ..Shot::new(128, 8, 32, (0, 0))
    };
    match run_shot(shot) {
        Err(e @ SimError::Mbarrier { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("deliver 1024 bytes, but expect_tx announced 0"),
                "{msg}"
            );
            assert!(msg.starts_with("mbarrier_arrive at"), "{msg}");
        }
        other => panic!("expected an mbarrier error, got {other:?}"),
    }
    // Before the copy, the arrival completes phase 0 at once (nothing announced), the copy
    // counts toward phase 1, and the wait for phase 0 lets the threads read what has not
    // landed.
    let shot = Shot {
        announce: Announce::Arrive,
        ..Shot::new(128, 8, 32, (0, 0))
    };
    match run_shot(shot) {
        Err(SimError::StaleAsyncRead { copy, .. }) => assert_eq!(copy, AsyncCopy::Tma),
        other => panic!("expected a stale read, got {other:?}"),
    }
}

#[test]
fn a_wrong_byte_count_is_caught() {
    // Announcing more than the copies bring: the phase never completes.
    let shot = Shot {
        announce: Announce::ExpectTx(2048),
        ..Shot::new(128, 8, 32, (0, 0))
    };
    match run_shot(shot) {
        Err(e @ SimError::MbarrierDeadlock { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("expect_tx announced 2048 bytes but the copies delivered 1024"),
                "{msg}"
            );
        }
        other => panic!("expected a deadlock, got {other:?}"),
    }
    // Announcing less: the copy overshoots the phase.
    let shot = Shot {
        announce: Announce::ExpectTx(512),
        ..Shot::new(128, 8, 32, (0, 0))
    };
    match run_shot(shot) {
        Err(e @ SimError::Mbarrier { .. }) => {
            assert!(
                e.to_string()
                    .contains("deliver 1024 bytes, but expect_tx announced 512"),
                "{e}"
            );
        }
        other => panic!("expected an mbarrier error, got {other:?}"),
    }
}

#[test]
fn reading_before_the_wait_is_caught() {
    let shot = Shot {
        wait: None,
        ..Shot::new(128, 8, 32, (0, 0))
    };
    match run_shot(shot) {
        Err(SimError::StaleAsyncRead {
            buffer,
            copy,
            issuer,
            ..
        }) => {
            assert_eq!(buffer, "s");
            assert_eq!(copy, AsyncCopy::Tma);
            assert_eq!(issuer, 0);
        }
        other => panic!("expected a stale read, got {other:?}"),
    }
}

#[test]
fn reading_an_incomplete_phase_is_caught() {
    // The phase waits for bytes that never come: the copy has not landed when the threads,
    // not waiting, read its destination.
    let shot = Shot {
        wait: None,
        announce: Announce::ExpectTx(2048),
        ..Shot::new(128, 8, 32, (0, 0))
    };
    match run_shot(shot) {
        Err(SimError::StaleAsyncRead { copy, issuer, .. }) => {
            assert_eq!((copy, issuer), (AsyncCopy::Tma, 0));
        }
        other => panic!("expected a stale read, got {other:?}"),
    }
}

#[test]
fn a_wait_orders_the_landing_for_its_thread_and_after_a_barrier_for_all() {
    // Only warp 0 waits; with a block barrier after its wait, warp 1 sees the data too.
    let shot = Shot {
        waiters: 32,
        sync_after_wait: true,
        ..Shot::new(128, 8, 32, (2, 4))
    };
    let (got, _) = run_shot(shot).expect("warp 1 reads after the barrier");
    assert_eq!(got, shot.expected());
    // Without the barrier, warp 1 reads what, for all it knows, has not landed.
    let shot = Shot {
        waiters: 32,
        ..Shot::new(128, 8, 32, (2, 4))
    };
    match run_shot(shot) {
        Err(SimError::StaleAsyncRead {
            thread, copy, span, ..
        }) => {
            assert_eq!((thread, copy), (32, AsyncCopy::Tma));
            assert_eq!(span.file, file!());
        }
        other => panic!("expected a stale read, got {other:?}"),
    }
    // Nobody waits, but there is a barrier: still not ordered.
    let shot = Shot {
        waiters: 0,
        sync_after_wait: true,
        ..Shot::new(128, 8, 32, (2, 4))
    };
    assert!(matches!(
        run_shot(shot),
        Err(SimError::StaleAsyncRead { thread: 0, .. })
    ));
}

#[test]
fn an_uninitialized_barrier_is_caught() {
    let shot = Shot {
        init: false,
        ..Shot::new(128, 8, 32, (0, 0))
    };
    match run_shot(shot) {
        Err(e @ SimError::Mbarrier { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("not initialized"), "{msg}");
            assert!(msg.contains("mbarrier_arrive_expect_tx"), "{msg}");
            assert!(msg.contains("`bar`[0]"), "{msg}");
        }
        other => panic!("expected an mbarrier error, got {other:?}"),
    }
}

#[test]
fn misaligned_swizzled_destinations_are_caught() {
    // 128-byte swizzle: 1024-byte alignment; 32-byte swizzle: 256.
    for (swizzle, cols, dst, align) in [(128, 32, 32, 1024), (32, 8, 32, 256), (0, 32, 4, 128)] {
        let shot = Shot {
            dst,
            smem: 2048,
            ..Shot::new(swizzle, 8, cols, (0, 0))
        };
        match run_shot(shot) {
            Err(SimError::Misaligned {
                buffer, align: a, ..
            }) => {
                assert_eq!(buffer, "s");
                assert_eq!(a, align);
            }
            other => panic!("expected a misaligned copy for {shot:?}, got {other:?}"),
        }
    }
    // Under 1 KiB, codegen only aligns the buffer to 16 bytes.
    let shot = Shot {
        smem: 128,
        ..Shot::new(64, 8, 16, (0, 0))
    };
    match run_shot(shot) {
        Err(SimError::InvalidIr(msg)) => assert!(msg.contains("1024-byte aligned"), "{msg}"),
        other => panic!("expected an error, got {other:?}"),
    }
    // Past the buffer's end.
    let shot = Shot {
        dst: 768,
        ..Shot::new(128, 16, 32, (0, 0))
    };
    assert!(matches!(
        run_shot(shot),
        Err(SimError::OutOfBounds { buffer, .. }) if buffer == "s"
    ));
}

#[test]
fn more_arrivals_than_the_count_are_caught() {
    // Two expect_tx arrivals on a barrier of count 1 before its copy: the second has no phase
    // to arrive on (the first phase still waits for its bytes).
    let a = tensor("A", M, N);
    let out = global("out", vec![Expr::int(1)], DType::F32);
    let k = kernel(
        "too_many",
        vec![],
        vec![input(&a), output(&out)],
        vec![Expr::int(1)],
        32,
        |b, _| {
            let bar = b.shared("bar", &[1], DType::U64);
            b.if_(tid().eq_(0), |b| {
                b.call(Intrinsic::MbarrierInit { count: 1 }, vec![addr(&bar, 0)]);
                b.call(
                    Intrinsic::MbarrierArriveExpectTx,
                    vec![addr(&bar, 0), Expr::int(1024)],
                );
                b.call(Intrinsic::MbarrierArrive, vec![addr(&bar, 0)]);
            });
        },
    );
    let mut args = vec![
        SimArg::tensor(DType::F32, &[M, N], &a_values(M, N)),
        SimArg::zeros(DType::F32, &[1]),
    ];
    match run(&k, &mut args, &opts()) {
        Err(e @ SimError::Mbarrier { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("more arrivals than its count of 1"), "{msg}");
            assert!(msg.starts_with("mbarrier_arrive at"), "{msg}");
        }
        other => panic!("expected an mbarrier error, got {other:?}"),
    }
}

/// A GEMM-style TMA pipeline: each block copies its 8 rows of `A` ([m, kk] f32) in 8 × 32
/// tiles (128-byte swizzle) through `stages` stages, `stages - 1` tiles ahead, and writes every
/// tile back (un-swizzling its reads) to `out` ([8·blocks, 32·tiles]). `parity_shift` flips
/// the waits' parity (a bug).
fn tma_pipeline(m: usize, kk: usize, stages: i64, parity_shift: i64) -> Kernel {
    let a = tensor("A", m, kk);
    let tiles = kk.div_ceil(32) as i64;
    let blocks = m.div_ceil(8) as i64;
    let out = global(
        "out",
        vec![Expr::int(8 * blocks), Expr::int(32 * tiles)],
        DType::F32,
    );
    let ahead = stages - 1;
    kernel(
        "tma_pipeline",
        vec![],
        vec![input(&a), output(&out)],
        vec![Expr::int(blocks)],
        64,
        |b, bx| {
            let bx = bx[0].clone();
            let s = b.shared("s", &[stages * 256], DType::F32);
            let bar = b.shared("bar", &[stages], DType::U64);
            let issue = |b: &mut B, t: Expr| {
                let st = b.let_("st", t.floormod(stages));
                b.call(
                    Intrinsic::MbarrierArriveExpectTx,
                    vec![addr(&bar, st.clone()), Expr::int(1024)],
                );
                b.call(
                    Intrinsic::TmaLoad {
                        box_dims: vec![8, 32],
                        swizzle: 128,
                        multicast: false,
                    },
                    vec![
                        addr(&s, st.clone() * 256),
                        addr_nd(&a, vec![Expr::int(0), Expr::int(0)]),
                        addr(&bar, st),
                        (bx.clone() * 8).cast(DType::I32),
                        (t * 32).cast(DType::I32),
                    ],
                );
            };
            b.if_(tid().eq_(0), |b| {
                for st in 0..stages {
                    b.call(Intrinsic::MbarrierInit { count: 1 }, vec![addr(&bar, st)]);
                }
                b.call(Intrinsic::FenceMbarrierInit, vec![]);
            });
            b.sync();
            for t in 0..ahead {
                b.if_(tid().eq_(0).and(Expr::int(t).lt(tiles)), |b| {
                    issue(b, Expr::int(t))
                });
            }
            b.for_("k", tiles, |b, k| {
                b.call(
                    Intrinsic::MbarrierWait,
                    vec![
                        addr(&bar, k.floormod(stages)),
                        (k.floordiv(stages) + parity_shift).floormod(2),
                    ],
                );
                b.sync();
                let next = k.clone() + ahead;
                b.if_(tid().eq_(0).and(next.lt(tiles)), |b| issue(b, next.clone()));
                b.for_("j", 4, |b, j| {
                    let e = b.let_("e", j * 64 + tid());
                    let r = b.let_("r", e.floordiv(32));
                    let c = b.let_("c", e.floormod(32));
                    // Row r of the tile is 128-byte line r of a 1024-aligned stage.
                    let phys =
                        r.clone() * 32 + xor(c.floordiv(4), r.floormod(8)) * 4 + c.floormod(4);
                    let v = s.at([k.floormod(stages) * 256 + phys]);
                    b.store_nd(&out, vec![bx.clone() * 8 + r, k.clone() * 32 + c], v);
                });
            });
            b.sync();
        },
    )
}

#[test]
fn a_tma_pipeline_lands_every_tile() {
    for (m, kk, stages) in [(20, 100, 3), (16, 256, 2), (9, 40, 4)] {
        let k = tma_pipeline(m, kk, stages, 0);
        let tiles = kk.div_ceil(32);
        let rows = 8 * m.div_ceil(8);
        let mut args = vec![
            SimArg::tensor(DType::F32, &[m, kk], &a_values(m, kk)),
            SimArg::zeros(DType::F32, &[rows, 32 * tiles]),
        ];
        let r = run(&k, &mut args, &opts()).unwrap_or_else(|e| panic!("{m}x{kk}: {e}"));
        let got = args[1].to_f64(DType::F32);
        for i in 0..rows {
            for j in 0..32 * tiles {
                let want = if i < m && j < kk {
                    (i * kk + j + 1) as f64
                } else {
                    0.0
                };
                assert_eq!(
                    got[i * 32 * tiles + j],
                    want,
                    "{m}x{kk}, {stages} stages: ({i}, {j})"
                );
            }
        }
        assert_eq!(r.tma_copies, (tiles * m.div_ceil(8)) as u64);
        assert_eq!(r.tma_unlanded, 0);
    }
}

#[test]
fn a_wrong_parity_deadlocks() {
    let k = tma_pipeline(20, 100, 3, 1);
    let mut args = vec![
        SimArg::tensor(DType::F32, &[20, 100], &a_values(20, 100)),
        SimArg::zeros(DType::F32, &[24, 128]),
    ];
    match run(&k, &mut args, &opts()) {
        Err(e @ SimError::MbarrierDeadlock { .. }) => {
            let SimError::MbarrierDeadlock {
                ref barrier,
                parity,
                ref state,
                ..
            } = e
            else {
                unreachable!()
            };
            // Tile 0 has landed (phase 0 of bar[0] completed); the wait for parity 1 waits
            // for phase 1, which nobody will start.
            assert_eq!((barrier.as_str(), parity), ("`bar`[0]", 1));
            assert_eq!((state.phase, state.pending), (1, 1));
            assert!(e.to_string().contains("wrong parity"), "{e}");
        }
        other => panic!("expected a deadlock, got {other:?}"),
    }
}
