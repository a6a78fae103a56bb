//! `ldmatrix` and `mma.sync.m16n8k16` against plain CPU matmuls: a single 16x16x8 tile (with
//! and without `.trans`), a wrong fragment layout being caught by the comparison, and a
//! pipelined 64x64 GEMM tile with 128 threads (cp.async, ldmatrix, mma).

mod common;
use common::*;

use std::time::Instant;
use tl_ir::{DType, Expr, ForKind, Kernel};

fn bf16(v: f64) -> f64 {
    half::bf16::from_f64(v).to_f64()
}

/// D[16, 8] = A[16, 16] · B + C with one warp. B is `[8, 16]` (N x K, loaded with plain
/// ldmatrix) unless `b_kn`, where it is `[16, 8]` (K x N, loaded with ldmatrix.trans).
/// `wrong_layout` stores D with rows and columns of the accumulator fragment mixed up.
fn one_tile(b_kn: bool, wrong_layout: bool) -> Kernel {
    let a = global("A", vec![Expr::int(16), Expr::int(16)], DType::BF16);
    let bshape = if b_kn { [16, 8] } else { [8, 16] };
    let bm = global(
        "B",
        bshape.iter().map(|&d| Expr::int(d)).collect(),
        DType::BF16,
    );
    let c = global("C", vec![Expr::int(16), Expr::int(8)], DType::F32);
    let d = global("D", vec![Expr::int(16), Expr::int(8)], DType::F32);
    kernel(
        "mma_tile",
        vec![],
        vec![input(&a), input(&bm), input(&c), output(&d)],
        vec![Expr::int(1)],
        32,
        |b, _| {
            let a_s = b.shared("a_s", &[256], DType::BF16);
            let b_s = b.shared("b_s", &[128], DType::BF16);
            b.for_("j", 8, |b, j| {
                let i = b.let_("i", j * 32 + tid());
                b.store(&a_s, i.clone(), a.at([i.clone() / 16, i % 16]));
            });
            b.for_("j", 4, |b, j| {
                let i = b.let_("i", j * 32 + tid());
                let v = if b_kn {
                    bm.at([i.clone() / 8, i.clone() % 8])
                } else {
                    bm.at([i.clone() / 16, i.clone() % 16])
                };
                b.store(&b_s, i, v);
            });
            b.sync();
            let lane = b.let_("lane", tid() % 32);
            let g = b.let_("g", lane.clone() / 4);
            let t = b.let_("t", lane.clone() % 4);
            let fa = b.local("fa", &[8], DType::BF16);
            let fb = b.local("fb", &[4], DType::BF16);
            let acc = b.local("acc", &[4], DType::F32);
            for i in 0..4i64 {
                let row = g.clone() + 8 * (i >> 1);
                let col = t.clone() * 2 + (i & 1);
                b.store(&acc, i, c.at([row, col]));
            }
            // A: lanes 8j..8j+7 address rows of matrix j = (rows 8*(j%2).., cols 8*(j/2)..).
            let arow = lane.clone() % 8 + (lane.clone() / 8 % 2) * 8;
            let acol = lane.clone() / 16 * 8;
            b.ldmatrix(4, false, addr(&a_s, arow * 16 + acol), addr(&fa, 0));
            if b_kn {
                // B^T in shared is K x N: rows are k, transposed on load.
                let k = lane.clone() % 16;
                b.ldmatrix(2, true, addr(&b_s, k * 8), addr(&fb, 0));
            } else {
                // Rows are n; matrix 0 holds k 0..7, matrix 1 k 8..15.
                let n = lane.clone() % 8;
                let k = (lane.clone() / 8 % 2) * 8;
                b.ldmatrix(2, false, addr(&b_s, n * 16 + k), addr(&fb, 0));
            }
            b.mma(
                DType::BF16,
                addr(&acc, 0),
                addr(&fa, 0),
                addr(&fb, 0),
                addr(&acc, 0),
            );
            for i in 0..4i64 {
                let (row, col) = if wrong_layout {
                    (g.clone() + 8 * (i & 1), t.clone() * 2 + (i >> 1))
                } else {
                    (g.clone() + 8 * (i >> 1), t.clone() * 2 + (i & 1))
                };
                b.store_nd(&d, vec![row, col], acc.at([i]));
            }
        },
    )
}

fn run_tile(b_kn: bool, wrong_layout: bool) -> (Vec<f64>, Vec<f64>) {
    let a: Vec<f64> = noise(256, 10).into_iter().map(bf16).collect();
    let bv: Vec<f64> = noise(128, 11).into_iter().map(bf16).collect();
    let c = noise(128, 12);
    let bshape = if b_kn { [16, 8] } else { [8, 16] };
    let mut args = vec![
        SimArg::tensor(DType::BF16, &[16, 16], &a),
        SimArg::tensor(DType::BF16, &bshape, &bv),
        SimArg::tensor(DType::F32, &[16, 8], &c),
        SimArg::zeros(DType::F32, &[16, 8]),
    ];
    let r = run(&one_tile(b_kn, wrong_layout), &mut args, &opts()).expect("runs");
    assert_eq!(r.warp_collectives, 3);
    let mut want = vec![0.0; 128];
    for m in 0..16 {
        for n in 0..8 {
            let mut s = c[m * 8 + n] as f32 as f64;
            for k in 0..16 {
                let bk = if b_kn { bv[k * 8 + n] } else { bv[n * 16 + k] };
                s += a[m * 16 + k] * bk;
            }
            want[m * 8 + n] = s;
        }
    }
    (args[3].to_f64(DType::F32), want)
}

fn close(got: &[f64], want: &[f64]) -> bool {
    got.iter()
        .zip(want)
        .all(|(g, w)| (g - w).abs() <= 1e-5 * (1.0 + w.abs()))
}

#[test]
fn ldmatrix_and_mma_compute_a_tile_product() {
    let (got, want) = run_tile(false, false);
    assert!(close(&got, &want), "{got:?}\n{want:?}");
}

#[test]
fn ldmatrix_trans_loads_a_k_major_b() {
    let (got, want) = run_tile(true, false);
    assert!(close(&got, &want), "{got:?}\n{want:?}");
}

#[test]
fn a_wrong_accumulator_layout_is_caught_by_the_reference() {
    let (got, want) = run_tile(false, true);
    assert!(!close(&got, &want));
}

const BM: i64 = 64;
const BK: i64 = 64;

/// C[M, N] = A[M, K] · B[N, K]^T in 64x64 tiles, 128 threads (2x2 warps of 32x32), a two-stage
/// cp.async pipeline over 64-wide k-tiles, ldmatrix.x4 for both operands, mma.m16n8k16.
/// `trailing_barrier = false` drops the barrier that protects a stage from the next prefetch.
fn gemm(m: i64, n: i64, k: i64, trailing_barrier: bool) -> Kernel {
    let a = global("A", vec![Expr::int(m), Expr::int(k)], DType::BF16);
    let bm = global("B", vec![Expr::int(n), Expr::int(k)], DType::BF16);
    let c = global("C", vec![Expr::int(m), Expr::int(n)], DType::F32);
    let kt = k / BK;
    kernel(
        "gemm_nt",
        vec![],
        vec![input(&a), input(&bm), output(&c)],
        vec![Expr::int(n / BM), Expr::int(m / BM)],
        128,
        |b, bxy| {
            let (bx, by) = (bxy[0].clone(), bxy[1].clone());
            let tile = BM * BK;
            let a_s = b.shared("a_s", &[2 * tile], DType::BF16);
            let b_s = b.shared("b_s", &[2 * tile], DType::BF16);
            let lane = b.let_("lane", tid() % 32);
            let warp = b.let_("warp", tid() / 32);
            let wm = b.let_("wm", warp.clone() / 2);
            let wn = b.let_("wn", warp.clone() % 2);
            let acc = b.local("acc", &[32], DType::F32);
            let fa = b.local("fa", &[16], DType::BF16);
            let fb = b.local("fb", &[16], DType::BF16);
            b.for_kind("z", 0, 32, ForKind::Unrolled, |b, z| {
                b.store(&acc, z, 0.0f32)
            });
            let load = |b: &mut B, ko: Expr, stage: Expr| {
                b.for_kind("ci", 0, 4, ForKind::Unrolled, |b, ci| {
                    let ch = b.let_("ch", tid() + ci * 128);
                    let row = b.let_("row", ch.clone() / 8);
                    let cc = b.let_("cc", (ch % 8) * 8);
                    let soff = stage.clone() * tile + row.clone() * BK + cc.clone();
                    let gk = ko.clone() * BK + cc;
                    b.cp_async(
                        16,
                        addr(&a_s, soff.clone()),
                        addr(&a, (by.clone() * BM + row.clone()) * k + gk.clone()),
                        true,
                    );
                    b.cp_async(
                        16,
                        addr(&b_s, soff),
                        addr(&bm, (bx.clone() * BM + row) * k + gk),
                        true,
                    );
                });
            };
            load(b, Expr::int(0), Expr::int(0));
            b.commit();
            b.for_("ko", kt, |b, ko| {
                b.if_((ko.clone() + 1).lt(kt), |b| {
                    load(b, ko.clone() + 1, (ko.clone() + 1) % 2)
                });
                b.commit();
                b.wait(1);
                b.sync();
                let st = b.let_("st", (ko % 2) * tile);
                b.for_kind("kk", 0, BK / 16, ForKind::Unrolled, |b, kk| {
                    b.for_kind("mi", 0, 2, ForKind::Unrolled, |b, mi| {
                        let row = wm.clone() * 32
                            + mi.clone() * 16
                            + lane.clone() % 8
                            + (lane.clone() / 8 % 2) * 8;
                        let col = kk.clone() * 16 + lane.clone() / 16 * 8;
                        b.ldmatrix(
                            4,
                            false,
                            addr(&a_s, st.clone() + row * BK + col),
                            addr(&fa, mi * 8),
                        );
                    });
                    b.for_kind("nj", 0, 2, ForKind::Unrolled, |b, nj| {
                        let nrow = wn.clone() * 32
                            + nj.clone() * 16
                            + lane.clone() % 8
                            + lane.clone() / 16 * 8;
                        let col = kk.clone() * 16 + (lane.clone() / 8 % 2) * 8;
                        b.ldmatrix(
                            4,
                            false,
                            addr(&b_s, st.clone() + nrow * BK + col),
                            addr(&fb, nj * 8),
                        );
                    });
                    b.for_kind("mi", 0, 2, ForKind::Unrolled, |b, mi| {
                        b.for_kind("ni", 0, 4, ForKind::Unrolled, |b, ni| {
                            let at = (mi.clone() * 4 + ni.clone()) * 4;
                            b.mma(
                                DType::BF16,
                                addr(&acc, at.clone()),
                                addr(&fa, mi.clone() * 8),
                                addr(&fb, ni * 4),
                                addr(&acc, at),
                            );
                        });
                    });
                });
                if trailing_barrier {
                    b.sync();
                }
            });
            let g = b.let_("g", lane.clone() / 4);
            let t = b.let_("t", lane % 4);
            b.for_kind("mi", 0, 2, ForKind::Unrolled, |b, mi| {
                b.for_kind("ni", 0, 4, ForKind::Unrolled, |b, ni| {
                    for i in 0..4i64 {
                        let row = by.clone() * BM
                            + wm.clone() * 32
                            + mi.clone() * 16
                            + g.clone()
                            + 8 * (i >> 1);
                        let col = bx.clone() * BM
                            + wn.clone() * 32
                            + ni.clone() * 8
                            + t.clone() * 2
                            + (i & 1);
                        let v = acc.at([(mi.clone() * 4 + ni.clone()) * 4 + i]);
                        b.store_nd(&c, vec![row, col], v);
                    }
                });
            });
        },
    )
}

fn gemm_args(m: usize, n: usize, k: usize) -> (Vec<SimArg>, Vec<f64>) {
    let a: Vec<f64> = noise(m * k, 20).into_iter().map(bf16).collect();
    let bv: Vec<f64> = noise(n * k, 21).into_iter().map(bf16).collect();
    let mut want = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            want[i * n + j] = (0..k).map(|x| a[i * k + x] * bv[j * k + x]).sum();
        }
    }
    let args = vec![
        SimArg::tensor(DType::BF16, &[m, k], &a),
        SimArg::tensor(DType::BF16, &[n, k], &bv),
        SimArg::zeros(DType::F32, &[m, n]),
    ];
    (args, want)
}

#[test]
fn a_pipelined_gemm_tile_matches_the_cpu() {
    let (m, n, k) = (128usize, 64usize, 256usize);
    let kern = gemm(m as i64, n as i64, k as i64, true);
    let (mut args, want) = gemm_args(m, n, k);
    let t0 = Instant::now();
    let r = run(&kern, &mut args, &opts()).expect("runs");
    let dt = t0.elapsed();
    eprintln!(
        "gemm {m}x{n}x{k}: {} blocks of 128 threads in {:.3} s ({:.1} ms per block), {r:?}",
        r.blocks,
        dt.as_secs_f64(),
        dt.as_secs_f64() * 1e3 / r.blocks as f64
    );
    let got = args[2].to_f64(DType::F32);
    let worst = got
        .iter()
        .zip(&want)
        .map(|(g, w)| (g - w).abs())
        .fold(0.0, f64::max);
    assert!(worst < 1e-4, "worst error {worst}");
    assert_eq!(r.blocks, 2);
    // Per block: 4 k-tiles x 4 k16-steps x (4 ldmatrix + 8 mma) per warp, 4 warps.
    assert_eq!(r.warp_collectives, 2 * 4 * 4 * 12 * 4);
    assert_eq!(r.shared_bytes, 2 * 2 * 64 * 64 * 2);
    assert_eq!(r.cp_async_copies, 2 * 128 * 8 * 4);
}

#[test]
fn a_gemm_without_the_trailing_barrier_races() {
    let (m, n, k) = (64usize, 64usize, 192usize);
    let kern = gemm(m as i64, n as i64, k as i64, false);
    let (mut args, _) = gemm_args(m, n, k);
    match run(&kern, &mut args, &opts()) {
        Err(SimError::DataRace { first, second, .. }) => {
            assert_eq!(first.op, "ldmatrix_x4");
            assert_eq!(second.op, "cp_async<16>");
        }
        other => panic!("expected a race, got {other:?}"),
    }
}
