//! AMD (gfx942/gfx950) thread-level IR: 64-lane waves (shuffles, `wave_idx`, the race checker's
//! waves), MFMA as a wave collective against plain matmuls, direct-to-LDS buffer loads (landing
//! at `wait_vmcnt`, zeros for predicated-off and out-of-range lanes, wave-uniform operands), the
//! LDS barrier that does not order global memory, and the XCD block remap.

mod common;
use common::*;

use tl_ir::{DType, Expr, Intrinsic, Kernel, MfmaOp};
use tl_sim::AsyncCopy;

fn op(m: u32, n: u32, k: u32, ab: DType) -> MfmaOp {
    MfmaOp { m, n, k, ab }
}

/// D = A·B + C for one MFMA with one wave: every lane loads its registers from global memory
/// with the documented lane layout (spelled out here, independently of the simulator's),
/// the wave issues the MFMA, and every lane stores its D registers.
fn mfma_tile(op: MfmaOp, a_dtype: DType) -> Kernel {
    let (m, n, k) = (op.m as i64, op.n as i64, op.k as i64);
    let a = global("A", vec![Expr::int(m), Expr::int(k)], op.ab);
    let bm = global("B", vec![Expr::int(k), Expr::int(n)], op.ab);
    let c = global("C", vec![Expr::int(m), Expr::int(n)], DType::F32);
    let d = global("D", vec![Expr::int(m), Expr::int(n)], DType::F32);
    wave64(kernel(
        "mfma_tile",
        vec![],
        vec![input(&a), input(&bm), input(&c), output(&d)],
        vec![Expr::int(1)],
        64,
        |b, _| {
            let lane = b.let_("lane", tid() % 64);
            let (na, nb, nd) = (m * k / 64, n * k / 64, m * n / 64);
            let fa = b.local("fa", &[na], a_dtype);
            let fb = b.local("fb", &[nb], op.ab);
            let acc = b.local("acc", &[nd], DType::F32);
            for v in 0..na {
                // A[i][kk]: i = lane % m, kk = (k·m/64)·(lane / m) + v.
                let kk = lane.clone() / m * na + v;
                b.store(&fa, v, a.at([lane.clone() % m, kk]));
            }
            for v in 0..nb {
                // B[kk][j]: j = lane % n, kk likewise.
                let kk = lane.clone() / n * nb + v;
                b.store(&fb, v, bm.at([kk, lane.clone() % n]));
            }
            // D[i][j]: j = lane % n; 16x16: i = 4·(lane / 16) + v; 32x32: i = 8·(v / 4) +
            // 4·(lane / 32) + v % 4.
            let row = |v: i64| lane.clone() / n * 4 + (4 * (64 / n) * (v / 4) + v % 4);
            for v in 0..nd {
                b.store(&acc, v, c.at([row(v), lane.clone() % n]));
            }
            // Scheduling hints compute nothing.
            b.call(Intrinsic::SchedBarrier { mask: 0 }, vec![]);
            b.call(Intrinsic::SetPrio { prio: 1 }, vec![addr(&acc, 0)]);
            b.mfma(op, addr(&acc, 0), addr(&fa, 0), addr(&fb, 0), addr(&acc, 0));
            b.call(Intrinsic::SetPrio { prio: 0 }, vec![]);
            for v in 0..nd {
                b.store_nd(&d, vec![row(v), lane.clone() % n], acc.at([v]));
            }
        },
    ))
}

fn run_mfma(op: MfmaOp) {
    let (m, n, k) = (op.m as usize, op.n as usize, op.k as usize);
    let round = |v: f64| match op.ab {
        DType::BF16 => half::bf16::from_f64(v).to_f64(),
        _ => half::f16::from_f64(v).to_f64(),
    };
    let a: Vec<f64> = noise(m * k, 1).into_iter().map(round).collect();
    let bv: Vec<f64> = noise(k * n, 2).into_iter().map(round).collect();
    let c: Vec<f64> = noise(m * n, 3)
        .into_iter()
        .map(|x| x as f32 as f64)
        .collect();
    let mut args = vec![
        SimArg::tensor(op.ab, &[m, k], &a),
        SimArg::tensor(op.ab, &[k, n], &bv),
        SimArg::tensor(DType::F32, &[m, n], &c),
        SimArg::zeros(DType::F32, &[m, n]),
    ];
    let r = run(&mfma_tile(op, op.ab), &mut args, &opts()).expect("runs");
    assert_eq!(r.warp_collectives, 1);
    let got = args[3].to_f64(DType::F32);
    for i in 0..m {
        for j in 0..n {
            let mut s = c[i * n + j];
            for kk in 0..k {
                s += a[i * k + kk] * bv[kk * n + j];
            }
            let want = s as f32 as f64;
            assert!(
                (got[i * n + j] - want).abs() <= 1e-6 * want.abs().max(1.0),
                "{} D[{i}][{j}] = {}, want {want}",
                op.name(),
                got[i * n + j]
            );
        }
    }
}

#[test]
fn mfma_16x16x32_bf16_is_a_matmul() {
    run_mfma(op(16, 16, 32, DType::BF16));
}

#[test]
fn mfma_32x32x16_bf16_is_a_matmul() {
    run_mfma(op(32, 32, 16, DType::BF16));
}

#[test]
fn mfma_f16_shapes_of_gfx942_are_matmuls() {
    run_mfma(op(16, 16, 16, DType::F16));
    run_mfma(op(32, 32, 8, DType::F16));
}

#[test]
fn mfma_operands_are_checked() {
    let o = op(16, 16, 32, DType::BF16);
    let args = || {
        vec![
            SimArg::zeros(DType::BF16, &[16, 32]),
            SimArg::zeros(DType::BF16, &[32, 16]),
            SimArg::zeros(DType::F32, &[16, 16]),
            SimArg::zeros(DType::F32, &[16, 16]),
        ]
    };
    // A in 32-bit registers.
    let e = run(&mfma_tile(o, DType::F32), &mut args(), &opts()).expect_err("f32 A");
    assert!(
        matches!(&e, SimError::InvalidIr(m) if m.contains("mfma_f32_16x16x32_bf16") && m.contains("A is local f32 `fa`")),
        "{e}"
    );
    // In a kernel lowered for 32-lane warps.
    let mut k = mfma_tile(o, DType::BF16);
    k.attrs.warp_size = None;
    let e = run(&k, &mut args(), &opts()).expect_err("32-lane warps");
    assert!(e.to_string().contains("needs 64-lane warps"), "{e}");
}

/// One wave copies `x` into shared memory with one 16-byte buffer load per lane (lane `l`'s
/// bytes from `x` at `16·l + soffset`, predicated off for lane 5), waits (`wait`: the
/// `wait_vmcnt` count, `None`: no wait), passes an LDS barrier and copies shared memory to
/// `out`, each thread the slot of the lane 7 ahead of it.
fn load_to_lds(n: i64, soffset: i64, wait: Option<u32>) -> Kernel {
    let x = global("x", vec![Expr::int(n)], DType::F32);
    let out = global("out", vec![Expr::int(256)], DType::F32);
    wave64(kernel(
        "load_to_lds",
        vec![],
        vec![input(&x), output(&out)],
        vec![Expr::int(1)],
        64,
        |b, _| {
            let s = b.shared("s", &[256], DType::F32);
            b.buffer_load_lds(
                16,
                addr(&s, 0),
                addr(&x, 0),
                tid() * 16,
                soffset,
                tid().ne_(5),
            );
            if let Some(w) = wait {
                b.wait_vmcnt(w);
            }
            b.barrier_lds();
            let src = b.let_("src", (tid() + 7) % 64);
            b.for_("j", 4, |b, j| {
                b.store(&out, tid() * 4 + j.clone(), s.at([src.clone() * 4 + j]));
            });
        },
    ))
}

#[test]
fn buffer_loads_land_zeros_for_predicated_and_out_of_range_lanes() {
    for (n, soffset) in [(200i64, 0i64), (200, 48), (256, -32), (103, 0)] {
        let xs: Vec<f64> = (0..n).map(|i| i as f64 + 1.0).collect();
        let mut args = vec![
            SimArg::tensor(DType::F32, &[n as usize], &xs),
            SimArg::zeros(DType::F32, &[256]),
        ];
        let r = run(&load_to_lds(n, soffset, Some(0)), &mut args, &opts()).expect("runs");
        assert_eq!(r.cp_async_copies, 64, "one copy per lane");
        assert_eq!(r.cp_async_unwaited, 0);
        assert_eq!(r.warp_collectives, 1);
        let out = args[1].to_f64(DType::F32);
        for t in 0..64i64 {
            let lane = (t + 7) % 64;
            // The hardware's range check: per dword inside the tensor, with the offsets
            // unsigned 32-bit registers (so a negative soffset is past the end).
            let at = 16 * lane + soffset;
            for j in 0..4 {
                let inside = soffset >= 0 && at + 4 * j + 4 <= 4 * n;
                let want = if lane != 5 && inside {
                    (at / 4 + j) as f64 + 1.0
                } else {
                    0.0
                };
                assert_eq!(
                    out[(4 * t + j) as usize],
                    want,
                    "n {n} soffset {soffset}: thread {t} element {j} (lane {lane})"
                );
            }
        }
    }
}

/// Each thread of one wave loads `bytes` of `x` into registers with a buffer load (at byte
/// `bytes·t + soffset`, predicated off for thread 5) and stores them to `out`.
fn load_to_registers(n: i64, bytes: u32, soffset: i64, tensor_elem: i64) -> Kernel {
    let x = global("x", vec![Expr::int(n)], DType::F32);
    let per = bytes as i64 / 4;
    let out = global("out", vec![Expr::int(64 * per)], DType::F32);
    wave64(kernel(
        "load_to_registers",
        vec![],
        vec![input(&x), output(&out)],
        vec![Expr::int(1)],
        64,
        |b, _| {
            let r = b.local("r", &[per], DType::F32);
            b.buffer_load(
                bytes,
                addr(&r, 0),
                addr(&x, tensor_elem),
                tid() * bytes as i64,
                soffset,
                tid().ne_(5),
            );
            b.for_("j", per, |b, j| {
                b.store(&out, tid() * per + j.clone(), r.at([j]));
            });
        },
    ))
}

#[test]
fn buffer_loads_into_registers_check_the_range_per_dword() {
    for bytes in [4u32, 8, 16] {
        let per = bytes as i64 / 4;
        for (n, soffset) in [(64 * per, 0i64), (103, 0), (200, 48), (256, -32)] {
            let xs: Vec<f64> = (0..n).map(|i| i as f64 + 1.0).collect();
            let mut args = vec![
                SimArg::tensor(DType::F32, &[n as usize], &xs),
                SimArg::zeros(DType::F32, &[(64 * per) as usize]),
            ];
            run(&load_to_registers(n, bytes, soffset, 0), &mut args, &opts()).expect("runs");
            let out = args[1].to_f64(DType::F32);
            for t in 0..64i64 {
                for j in 0..per {
                    let at = bytes as i64 * t + soffset + 4 * j;
                    let inside = soffset >= 0 && at + 4 <= 4 * n;
                    let want = if t != 5 && inside {
                        (at / 4) as f64 + 1.0
                    } else {
                        0.0
                    };
                    assert_eq!(
                        out[(t * per + j) as usize],
                        want,
                        "{bytes} bytes, n {n} soffset {soffset}: thread {t} dword {j}"
                    );
                }
            }
        }
    }
    // The tensor operand is the address of the tensor's first element.
    let mut args = vec![
        SimArg::tensor(DType::F32, &[256], &[0.0; 256]),
        SimArg::zeros(DType::F32, &[256]),
    ];
    let e = run(&load_to_registers(256, 16, 0, 4), &mut args, &opts()).expect_err("offset tensor");
    assert!(e.to_string().contains("first element"), "{e}");
}

#[test]
fn a_buffer_load_lands_only_at_its_wait() {
    let xs: Vec<f64> = (0..256).map(|i| i as f64).collect();
    let mut args = vec![
        SimArg::tensor(DType::F32, &[256], &xs),
        SimArg::zeros(DType::F32, &[256]),
    ];
    match run(&load_to_lds(256, 0, None), &mut args, &opts()) {
        Err(SimError::StaleAsyncRead {
            buffer,
            issuer,
            copy,
            ..
        }) => {
            assert_eq!(buffer, "s");
            assert_eq!(issuer, 7, "thread 0 reads the slot lane 7 loads");
            assert_eq!(copy, AsyncCopy::BufferLoad { bytes: 16 });
        }
        other => panic!("expected a stale read, got {other:?}"),
    }
    let e = run(&load_to_lds(256, 0, None), &mut args, &opts())
        .expect_err("stale")
        .to_string();
    assert!(e.contains("buffer load") && e.contains("wait_vmcnt"), "{e}");
    // Unchecked, the loads never land: shared memory still holds its poison.
    let mut args = vec![
        SimArg::tensor(DType::F32, &[256], &xs),
        SimArg::zeros(DType::F32, &[256]),
    ];
    let r = run(&load_to_lds(256, 0, None), &mut args, &unchecked()).expect("runs");
    assert_eq!(r.cp_async_unwaited, 64);
    assert!(args[1].to_f64(DType::F32).iter().all(|v| v.is_nan()));
}

/// Two buffer loads per lane (into `s0`, then `s1`), `wait_vmcnt<wait>`, an LDS barrier, and a
/// read of `read` (0: `s0`, 1: `s1`) by another lane. Each load is counted on its own.
fn two_loads(wait: u32, read: usize, barrier: bool) -> Kernel {
    let x = global("x", vec![Expr::int(512)], DType::F32);
    let out = global("out", vec![Expr::int(256)], DType::F32);
    wave64(kernel(
        "two_loads",
        vec![],
        vec![input(&x), output(&out)],
        vec![Expr::int(1)],
        64,
        |b, _| {
            let s0 = b.shared("s0", &[256], DType::F32);
            let s1 = b.shared("s1", &[256], DType::F32);
            for (i, s) in [&s0, &s1].into_iter().enumerate() {
                b.buffer_load_lds(
                    16,
                    addr(s, 0),
                    addr(&x, 0),
                    tid() * 16,
                    1024 * i as i64,
                    true,
                );
            }
            b.wait_vmcnt(wait);
            if barrier {
                b.barrier_lds();
            }
            let s = [&s0, &s1][read];
            b.for_("j", 4, |b, j| {
                b.store(
                    &out,
                    tid() * 4 + j.clone(),
                    s.at([(tid() + 1) % 64 * 4 + j]),
                );
            });
        },
    ))
}

#[test]
fn wait_vmcnt_counts_loads() {
    let xs: Vec<f64> = (0..512).map(|i| i as f64).collect();
    let go = |k: &Kernel| {
        let mut args = vec![
            SimArg::tensor(DType::F32, &[512], &xs),
            SimArg::zeros(DType::F32, &[256]),
        ];
        run(k, &mut args, &opts())
            .map(|_| args[1].to_f64(DType::F32))
            .map_err(Box::new)
    };
    // vmcnt(1): the older load (s0) has landed, the newer (s1) may not have.
    let out = go(&two_loads(1, 0, true)).expect("s0 has landed");
    assert!(out
        .iter()
        .enumerate()
        .all(|(i, &v)| v == ((i + 4) % 256) as f64));
    let e = go(&two_loads(1, 1, true)).expect_err("s1 is still in flight");
    assert!(
        matches!(&*e, SimError::StaleAsyncRead { buffer, .. } if buffer == "s1"),
        "{e}"
    );
    let out = go(&two_loads(0, 1, true)).expect("both have landed");
    assert!(out
        .iter()
        .enumerate()
        .all(|(i, &v)| v == 256.0 + ((i + 4) % 256) as f64));
    // Without the barrier, thread 0 reads lane 1's slot before thread 1's wait has landed it.
    let e = go(&two_loads(0, 0, false)).expect_err("no barrier");
    assert!(
        matches!(&*e, SimError::StaleAsyncRead { buffer, thread: 0, issuer: 1, .. } if buffer == "s0"),
        "{e}"
    );
}

/// A buffer load whose base or soffset depends on the lane, or whose offsets are misaligned.
fn bad_load(kind: &str) -> Kernel {
    let x = global("x", vec![Expr::int(512)], DType::F32);
    let out = global("out", vec![Expr::int(1)], DType::F32);
    let kind = kind.to_string();
    wave64(kernel(
        "bad_load",
        vec![],
        vec![input(&x), output(&out)],
        vec![Expr::int(1)],
        128,
        |b, _| {
            let s = b.shared("s", &[1024], DType::F32);
            let lane = tid() % 64;
            let base = wave_idx() * 256;
            let (base, voffset, soffset) = match kind.as_str() {
                "base" => (base + (lane.clone() / 32) * 4, lane * 16, Expr::int(0)),
                "soffset" => (base, lane.clone() * 16, (lane % 2) * 16),
                _ => (base, lane * 16 + 4, Expr::int(0)),
            };
            b.buffer_load_lds(16, addr(&s, base), addr(&x, 0), voffset, soffset, true);
            b.wait_vmcnt(0);
        },
    ))
}

#[test]
fn buffer_load_operands_must_be_wave_uniform_and_aligned() {
    let args = || {
        vec![
            SimArg::zeros(DType::F32, &[512]),
            SimArg::zeros(DType::F32, &[1]),
        ]
    };
    match run(&bad_load("base"), &mut args(), &opts()) {
        Err(SimError::NonUniformOperand {
            wave,
            op,
            what,
            lanes,
            values,
            ..
        }) => {
            assert_eq!((wave, op.as_str()), (0, "buffer_load_lds<16>"));
            assert!(what.contains("base"), "{what}");
            assert_eq!(lanes, [0, 32]);
            assert_eq!(*values, ["`s`[0]".to_string(), "`s`[4]".to_string()]);
        }
        other => panic!("expected a non-uniform base, got {other:?}"),
    }
    let e = run(&bad_load("soffset"), &mut args(), &opts()).expect_err("soffset");
    assert!(
        matches!(&e, SimError::NonUniformOperand { what, lanes, .. } if *what == "soffset" && *lanes == [0, 1]),
        "{e}"
    );
    assert!(e.to_string().contains("lane 1 (16)"), "{e}");
    let e = run(&bad_load("misaligned"), &mut args(), &opts()).expect_err("misaligned");
    assert!(
        matches!(&e, SimError::Misaligned { buffer, offset: 4, align: 16, .. } if buffer == "x"),
        "{e}"
    );
}

/// Thread 0 writes `g[0]` (global) and `s[0]` (shared); after a barrier (an LDS barrier unless
/// `sync`), thread 64 — another wave — reads both.
fn publish(sync: bool) -> Kernel {
    let g = global("g", vec![Expr::int(1)], DType::F32);
    let out = global("out", vec![Expr::int(2)], DType::F32);
    wave64(kernel(
        "publish",
        vec![],
        vec![output(&g), output(&out)],
        vec![Expr::int(1)],
        128,
        |b, _| {
            let s = b.shared("s", &[1], DType::F32);
            b.if_(tid().eq_(0), |b| {
                b.store(&g, 0, Expr::float(3.0));
                b.store(&s, 0, Expr::float(4.0));
            });
            if sync {
                b.sync();
            } else {
                b.barrier_lds();
            }
            b.if_(tid().eq_(64), |b| {
                b.store(&out, 1, s.at([0]));
                b.store(&out, 0, g.at([0]));
            });
        },
    ))
}

#[test]
fn an_lds_barrier_does_not_order_global_memory() {
    let mut args = vec![
        SimArg::zeros(DType::F32, &[1]),
        SimArg::zeros(DType::F32, &[2]),
    ];
    match run(&publish(false), &mut args, &opts()) {
        Err(SimError::DataRace {
            buffer,
            first,
            second,
            ..
        }) => {
            // The shared read passed (the barrier orders LDS); the global read did not.
            assert_eq!(buffer, "g");
            assert_eq!((first.thread, second.thread), (0, 64));
        }
        other => panic!("expected a global race, got {other:?}"),
    }
    let mut args = vec![
        SimArg::zeros(DType::F32, &[1]),
        SimArg::zeros(DType::F32, &[2]),
    ];
    let r = run(&publish(true), &mut args, &opts()).expect("sync_threads orders both");
    assert_eq!(r.barriers, 1);
    assert_eq!(args[1].to_f64(DType::F32), vec![3.0, 4.0]);
}

/// Per 64-lane wave: the sum of `tid` over the wave (a butterfly of width 64), over each
/// half-wave (width 32), and the wave index.
fn wave_sums(threads: u32) -> Kernel {
    let out = global("out", vec![Expr::int(3 * threads as i64)], DType::F32);
    let t = threads as i64;
    wave64(kernel(
        "wave_sums",
        vec![],
        vec![output(&out)],
        vec![Expr::int(1)],
        threads,
        |b, _| {
            for (slot, width) in [(0i64, 64u32), (1, 32)] {
                let v = b.var("v", DType::F32);
                b.store(&v, 0, tid().cast(DType::F32));
                let mut m = width as i64 / 2;
                while m >= 1 {
                    b.store(&v, 0, v.at([0]) + shfl_xor(v.at([0]), m, width));
                    m /= 2;
                }
                b.store(&out, tid() + slot * t, v.at([0]));
            }
            b.store(&out, tid() + 2 * t, wave_idx().cast(DType::F32));
        },
    ))
}

#[test]
fn sixty_four_lane_shuffle_reductions() {
    let mut args = vec![SimArg::zeros(DType::F32, &[3 * 192])];
    let r = run(&wave_sums(192), &mut args, &opts()).expect("runs");
    assert_eq!(r.warp_collectives, 3 * (6 + 5), "3 waves, 6 + 5 shuffles");
    let out = args[0].to_f64(DType::F32);
    for t in 0..192usize {
        let sum = |lo: usize, len: usize| (lo..lo + len).sum::<usize>() as f64;
        assert_eq!(out[t], sum(t / 64 * 64, 64), "wave sum, thread {t}");
        assert_eq!(
            out[192 + t],
            sum(t / 32 * 32, 32),
            "half-wave sum, thread {t}"
        );
        assert_eq!(out[384 + t], (t / 64) as f64, "wave_idx, thread {t}");
    }
    // 96 threads: the second wave is partial.
    let mut args = vec![SimArg::zeros(DType::F32, &[3 * 96])];
    let e = run(&wave_sums(96), &mut args, &opts()).expect_err("a partial wave");
    assert!(e.to_string().contains("not a multiple of 64"), "{e}");
}

/// Thread 0 of every block records the order blocks run in (the hardware's linear block id:
/// the simulator runs blocks x fastest, one at a time) at the output element of its block
/// indices, which the XCD remap (and the panel swizzle) derived from that id.
fn launch_order(gx: i64, gy: i64, xcd: Option<u32>, panel: Option<u32>) -> Kernel {
    let counter = global("counter", vec![Expr::int(1)], DType::I32);
    let out = global("out", vec![Expr::int(gy), Expr::int(gx)], DType::I32);
    let mut k = kernel(
        "launch_order",
        vec![],
        vec![output(&counter), output(&out)],
        vec![Expr::int(gx), Expr::int(gy)],
        64,
        |b, bv| {
            b.if_(tid().eq_(0), |b| {
                b.store_nd(&out, vec![bv[1].clone(), bv[0].clone()], counter.at([0]));
                b.store(&counter, 0, counter.at([0]) + 1);
            });
        },
    );
    k.attrs.xcd_remap = xcd;
    k.attrs.swizzle_panel = panel;
    wave64(k)
}

#[test]
fn xcd_remap_gives_each_die_consecutive_blocks() {
    for (gx, gy, xcd, panel) in [
        (5i64, 3i64, 8u32, None),
        (4, 4, 8, None),
        (3, 2, 8, None),
        (7, 5, 4, Some(2u32)),
    ] {
        let n = (gx * gy) as usize;
        let mut args = vec![
            SimArg::zeros(DType::I32, &[1]),
            SimArg::tensor(DType::I32, &[gy as usize, gx as usize], &vec![-1.0; n]),
        ];
        run(&launch_order(gx, gy, Some(xcd), panel), &mut args, &opts()).expect("runs");
        let order = args[1].to_f64(DType::I32);
        // Every block index is taken exactly once.
        let mut ids: Vec<i64> = order.iter().map(|&v| v as i64).collect();
        ids.sort();
        assert_eq!(ids, (0..n as i64).collect::<Vec<_>>(), "{gx}x{gy}/{xcd}");
        if panel.is_some() {
            continue;
        }
        // Hardware block `l` runs on die `l % xcd`; the dies' blocks, in launch order, cover
        // consecutive block ids (row-major over (by, bx)), die 0 first.
        let mut by_die: Vec<Vec<usize>> = vec![vec![]; xcd as usize];
        for l in 0..n {
            let logical = order.iter().position(|&v| v as usize == l).expect("ran");
            by_die[l % xcd as usize].push(logical);
        }
        let flat: Vec<usize> = by_die.concat();
        assert_eq!(flat, (0..n).collect::<Vec<_>>(), "{gx}x{gy}/{xcd}");
    }
}

/// `ds_read_b64_tr_b16` used as lowering uses it: a `[4·4, 16]` row-major f16 block in shared
/// memory per 16-lane group (here the same block for every group, shifted by the group's
/// index), each lane naming the 8 bytes at row `l % 16 / 4`, columns `4·(l % 4) ..`; every lane
/// must receive column `l % 16` of the group's 4 rows. The expectation is written from the
/// transposed read's purpose, independently of the simulator's formula.
#[test]
fn lds_transpose_read_gives_each_lane_a_column() {
    let out = global("out", vec![Expr::int(64), Expr::int(4)], DType::F32);
    let k = wave64(kernel(
        "lds_tr",
        vec![],
        vec![output(&out)],
        vec![Expr::int(1)],
        64,
        |b, _| {
            // s[g][r][c] = 100·g + 16·r + c for 4 groups g, rows r < 4, columns c < 16.
            let s = b.shared("s", &[4, 4, 16], DType::F16);
            b.for_("e", 4, |b, e| {
                let flat = tid() * 4 + e.clone();
                let (g, r, c) = (flat.clone() / 64, flat.clone() / 16 % 4, flat.clone() % 16);
                b.store_nd(
                    &s,
                    vec![g.clone(), r.clone(), c.clone()],
                    (g * 100 + r * 16 + c).cast(DType::F16),
                );
            });
            b.barrier_lds();
            let d = b.local("d", &[4], DType::F16);
            let l16 = b.let_("l16", tid() % 16);
            let src = addr_nd(&s, vec![tid() / 16, l16.clone() / 4, l16.clone() % 4 * 4]);
            b.call(Intrinsic::LdsReadTr16, vec![addr(&d, 0), src]);
            b.for_("n", 4, |b, n| {
                b.store_nd(&out, vec![tid(), n.clone()], d.at([n]).cast(DType::F32));
            });
        },
    ));
    let mut args = vec![SimArg::zeros(DType::F32, &[64, 4])];
    run(&k, &mut args, &opts()).expect("runs");
    let got = args[0].to_f64(DType::F32);
    for l in 0..64usize {
        for n in 0..4usize {
            let want = (100 * (l / 16) + 16 * n + l % 16) as f64;
            assert_eq!(got[4 * l + n], want, "lane {l} element {n}");
        }
    }
}
