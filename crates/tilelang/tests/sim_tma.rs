//! The TMA pipeline (sm_90a: mbarriers, `tma_load` of swizzled tiles, phase-parity waits) in
//! the simulator: the GEMM variants that take it agree with the CPU backend, and bugs planted
//! in the lowered kernel — a wrong `expect_tx`, a dropped wait, a shifted coordinate, a wrong
//! swizzle, a dropped barrier initialization — are caught; so are those planted in the
//! warp-specialized pipeline (a producer that does not wait for a stage's release, consumers
//! that never release one, a consumer barrier counting the wrong threads).

mod common;

use common::{remove_calls, remove_calls_where};
use tilelang::ir::{Expr, ExprKind, Intrinsic, Stmt, StmtKind};
use tilelang::kernels::gemm;
use tilelang::prelude::*;
use tilelang::runtime::rel_err;
use tilelang::Target;
use tl_sim::{SimArg, SimOptions};

fn shapes(layout: gemm::Layout, m: usize, n: usize, kk: usize) -> Vec<Vec<usize>> {
    let a = if layout == gemm::Layout::TN {
        vec![kk, m]
    } else {
        vec![m, kk]
    };
    let b = if layout == gemm::Layout::NT {
        vec![n, kk]
    } else {
        vec![kk, n]
    };
    vec![a, b, vec![m, n]]
}

/// Run `lowered` (a variant of `k`) in the simulator and `k` on the CPU backend on the same
/// random inputs: Ok(the largest relative error over the outputs) or the simulator's error.
fn run_vs_cpu(
    k: &Kernel,
    lowered: &tilelang::ir::Kernel,
    shapes: &[Vec<usize>],
    seed: u64,
) -> Result<f64, String> {
    let ir = k.ir();
    let dev = Device::Cpu;
    let make = |i: usize, b: &tilelang::ir::Buffer, s: &Vec<usize>| {
        Tensor::randn(s, b.dtype(), seed + i as u64, &dev).expect("tensor")
    };
    let tensors: Vec<Tensor> = ir
        .tensors()
        .zip(shapes)
        .enumerate()
        .map(|(i, ((b, _), s))| make(i, b, s))
        .collect();
    k.compile(&dev)
        .expect("cpu")
        .run(&tensors.iter().collect::<Vec<_>>())
        .expect("cpu run");
    let mut args: Vec<SimArg> = ir
        .tensors()
        .zip(shapes)
        .enumerate()
        .map(|(i, ((b, role), s))| {
            let mut v = make(i, b, s).to_f64_vec().expect("values");
            if role != tilelang::ir::Role::Input {
                v.iter_mut().for_each(|x| *x = f64::NAN);
            }
            SimArg::tensor(b.dtype(), s, &v)
        })
        .collect();
    tl_sim::run(lowered, &mut args, &SimOptions::default()).map_err(|e| e.to_string())?;
    let mut worst: f64 = 0.0;
    for (((b, role), arg), t) in ir.tensors().zip(&args).zip(&tensors) {
        if role != tilelang::ir::Role::Input {
            let e = rel_err(&arg.to_f64(b.dtype()), &t.to_f64_vec().expect("out")).expect("size");
            worst = worst.max(e);
        }
    }
    Ok(worst)
}

/// The variant for 16-byte-aligned sizes, lowered for sm_90a: the one that copies by TMA.
fn tma_variant(k: &Kernel) -> tilelang::ir::Kernel {
    let low = k
        .lower_aligned(Target::SM90)
        .unwrap_or_else(|d| panic!("{}: {d}", k.name()));
    let text = low.to_string();
    if std::env::var("TILELANG_TMA").is_ok_and(|v| v == "0") {
        assert!(!text.contains("tma_load"), "{text}");
    } else {
        assert!(text.contains("tma_load<"), "no TMA in:\n{text}");
        assert!(text.contains("mbarrier_wait("), "{text}");
    }
    low
}

#[test]
fn tma_gemm_in_sim() {
    // wgmma tiles (one and two warpgroups, 128-deep k tiles), in flight across k steps or not,
    // 2 to 4 stages; tails in M, N and K (sizes multiples of 8 elements: the aligned variant).
    let configs = [
        (64, 64, 64, 3, 128, false),
        (128, 128, 64, 3, 256, false),
        (64, 64, 128, 2, 128, false),
        (64, 64, 64, 3, 128, true),
        (64, 64, 64, 4, 128, true),
    ];
    for (bm, bn, bk, stages, threads, overlap) in configs {
        let cfg = gemm::GemmConfig {
            instruction: Some(GemmInstruction::Wgmma),
            overlap,
            ..gemm::GemmConfig::tiles(bm, bn, bk, stages, threads)
        };
        for layout in [gemm::Layout::NT, gemm::Layout::NN, gemm::Layout::TN] {
            let k = gemm::gemm(layout, BF16, F32, cfg);
            let low = tma_variant(&k);
            for (m, n, kk) in [(104, 72, 200), (64, 64, 64)] {
                let what = format!(
                    "{} {bm}x{bn}x{bk}, {stages} stages, overlap {overlap}, {m}x{n}x{kk}",
                    layout.name()
                );
                let e = run_vs_cpu(&k, &low, &shapes(layout, m, n, kk), 3)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                assert!(e < 1e-5, "{what}: {e}");
            }
        }
    }
}

#[test]
fn tma_mma_sync_gemm_in_sim() {
    // mma.sync on sm_90a: ldmatrix reads what the TMA landed (when the pipeline takes TMA).
    let cfg = gemm::GemmConfig {
        instruction: Some(GemmInstruction::MmaSync),
        ..gemm::GemmConfig::tiles(64, 64, 32, 3, 128)
    };
    for layout in [gemm::Layout::NT, gemm::Layout::NN] {
        let k = gemm::gemm(layout, BF16, F32, cfg);
        let low = tma_variant(&k);
        let e = run_vs_cpu(&k, &low, &shapes(layout, 72, 80, 96), 4)
            .unwrap_or_else(|e| panic!("{}: {e}", layout.name()));
        assert!(e < 1e-5, "{}: {e}", layout.name());
    }
}

/// A call's new intrinsic and arguments, from the old ones.
type CallRewrite<'a> = &'a dyn Fn(&Intrinsic, &[Expr]) -> (Intrinsic, Vec<Expr>);

/// Rewrite every call `pick` matches with `f` (its arguments → new arguments and intrinsic).
fn rewrite_calls(s: &Stmt, pick: &dyn Fn(&Intrinsic) -> bool, f: CallRewrite) -> Stmt {
    s.map_post(&mut |st| match &st.kind {
        StmtKind::Eval(e) => match e.kind() {
            ExprKind::Call(op, args) if pick(op) => {
                let (op, args) = f(op, args);
                Stmt::new(StmtKind::Eval(Expr::call(op, args, e.dtype())), st.span)
            }
            _ => st,
        },
        _ => st,
    })
}

#[test]
fn planted_tma_bugs_are_caught() {
    if std::env::var("TILELANG_TMA").is_ok_and(|v| v == "0") {
        return;
    }
    // Every warp loading and computing (the warp-specialized pipeline has its own test).
    let cfg = gemm::GemmConfig {
        instruction: Some(GemmInstruction::Wgmma),
        warp_specialize: Some(false),
        ..gemm::GemmConfig::tiles(64, 64, 64, 3, 128)
    };
    let layout = gemm::Layout::NT;
    let k = gemm::gemm(layout, BF16, F32, cfg);
    let low = tma_variant(&k);
    assert!(!low.to_string().contains("setmaxnreg"), "{low}");
    let sh = shapes(layout, 64, 64, 256);
    assert!(run_vs_cpu(&k, &low, &sh, 5).expect("the kernel as lowered runs") < 1e-5);
    let broken = |body: Stmt| low.with_body(body);

    // expect_tx announces half the bytes: the phase completes with the first tile (A's) and
    // B's lands only in the next phase, after the wait has let the threads read it — or, when
    // one copy is more than half, it overshoots the phase.
    let half_tx = broken(rewrite_calls(
        &low.body,
        &|op| *op == Intrinsic::MbarrierArriveExpectTx,
        &|op, a| {
            let bytes = a[1].as_int().expect("constant bytes");
            (op.clone(), vec![a[0].clone(), Expr::int(bytes / 2)])
        },
    ));
    let e = run_vs_cpu(&k, &half_tx, &sh, 5).expect_err("a short expect_tx must be reported");
    assert!(
        e.contains("but expect_tx announced") || e.contains("TMA copy"),
        "{e}"
    );
    // ... or twice the bytes: the phase never completes.
    let double_tx = broken(rewrite_calls(
        &low.body,
        &|op| *op == Intrinsic::MbarrierArriveExpectTx,
        &|op, a| {
            let bytes = a[1].as_int().expect("constant bytes");
            (op.clone(), vec![a[0].clone(), Expr::int(bytes * 2)])
        },
    ));
    let e = run_vs_cpu(&k, &double_tx, &sh, 5).expect_err("a long expect_tx must be reported");
    assert!(
        e.contains("deadlock") && e.contains("but the copies delivered"),
        "{e}"
    );

    // No wait on the barrier: the tiles are read before they land.
    let no_wait = broken(remove_calls(&low.body, &|op| {
        *op == Intrinsic::MbarrierWait
    }));
    let e = run_vs_cpu(&k, &no_wait, &sh, 5).expect_err("a dropped wait must be reported");
    assert!(e.contains("TMA copy"), "{e}");

    // No initialization: the first expect_tx finds no barrier.
    let no_init = broken(remove_calls(&low.body, &|op| {
        matches!(op, Intrinsic::MbarrierInit { .. })
    }));
    let e = run_vs_cpu(&k, &no_init, &sh, 5).expect_err("a missing init must be reported");
    assert!(e.contains("not initialized"), "{e}");

    // The waits' parity flipped: the first wait waits for a phase nobody starts.
    let flipped = broken(rewrite_calls(
        &low.body,
        &|op| *op == Intrinsic::MbarrierWait,
        &|op, a| (op.clone(), vec![a[0].clone(), Expr::int(1) - a[1].clone()]),
    ));
    let e = run_vs_cpu(&k, &flipped, &sh, 5).expect_err("a wrong parity must be reported");
    assert!(e.contains("deadlock") && e.contains("parity"), "{e}");

    // A box one row down (the row coordinate is the second to last): wrong data.
    let shifted = broken(rewrite_calls(
        &low.body,
        &|op| matches!(op, Intrinsic::TmaLoad { .. }),
        &|op, a| {
            let mut a = a.to_vec();
            let row = a.len() - 2;
            a[row] = a[row].clone() + Expr::int(1).cast(a[row].dtype());
            (op.clone(), a)
        },
    ));
    let err = run_vs_cpu(&k, &shifted, &sh, 5).expect("runs");
    assert!(err > 1e-2, "a shifted TMA box went unnoticed ({err})");

    // No swizzle where the wgmma reads the 128-byte one: the tiles land unswizzled.
    let unswizzled = broken(rewrite_calls(
        &low.body,
        &|op| matches!(op, Intrinsic::TmaLoad { swizzle: 128, .. }),
        &|op, a| match op {
            Intrinsic::TmaLoad { box_dims, .. } => (
                Intrinsic::TmaLoad {
                    box_dims: box_dims.clone(),
                    swizzle: 0,
                    multicast: false,
                },
                a.to_vec(),
            ),
            _ => (op.clone(), a.to_vec()),
        },
    ));
    let err = run_vs_cpu(&k, &unswizzled, &sh, 5).expect("runs");
    assert!(err > 1e-2, "a wrong swizzle went unnoticed ({err})");
}

#[test]
fn persistent_tma_gemm_in_sim() {
    // Each block loops over output tiles: the pipeline (its barriers initialized again for
    // every tile) runs once per tile, the phases starting over.
    for (blocks, panel) in [(2, 2), (3, 0)] {
        let cfg = gemm::GemmConfig {
            persistent: Some(blocks),
            panel,
            instruction: Some(GemmInstruction::Wgmma),
            ..gemm::GemmConfig::tiles(64, 64, 64, 3, 128)
        };
        let k = gemm::gemm(gemm::Layout::NT, BF16, F32, cfg);
        let low = tma_variant(&k);
        let e = run_vs_cpu(&k, &low, &shapes(gemm::Layout::NT, 136, 152, 200), 9)
            .unwrap_or_else(|e| panic!("{blocks} blocks, panel {panel}: {e}"));
        assert!(e < 1e-5, "{blocks} blocks, panel {panel}: {e}");
    }
}

#[test]
fn refitted_narrow_tiles_in_sim() {
    if std::env::var("TILELANG_TMA").is_ok_and(|v| v == "0") {
        return;
    }
    // The tiles `GemmConfig::fit_to_gpu` picks for few-tile problems on 132 SMs — 128×96,
    // 128×64 with each k step's wgmma running into the next, 64×64 and 64×32 on one consumer
    // warpgroup, 6 to 16 stages — run persistent over 3 blocks at a small size whose 18 k
    // tiles take every stage's barriers round more than once.
    let h = gemm::GemmConfig::hopper();
    for (layout, m, n, k) in [
        (gemm::Layout::NT, 768, 2048, 4096),
        (gemm::Layout::NT, 1024, 1024, 4096),
        (gemm::Layout::NT, 128, 4096, 4096),
        (gemm::Layout::NT, 64, 4096, 4096),
        (gemm::Layout::NN, 128, 4096, 4096),
    ] {
        let fit = h.fit_to_gpu(layout, m, n, k, 132);
        assert_eq!(fit.split_k, 1, "{fit:?}");
        let what = format!(
            "{} {}x{} in {} stages",
            layout.name(),
            fit.bm,
            fit.bn,
            fit.stages
        );
        let cfg = gemm::GemmConfig {
            persistent: Some(3),
            ..fit
        };
        let kernel = gemm::gemm(layout, BF16, F32, cfg);
        let low = tma_variant(&kernel);
        let e = run_vs_cpu(&kernel, &low, &shapes(layout, 200, 200, 1152), 11)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(e < 1e-5, "{what}: {e}");
    }
}

#[test]
fn refitted_splits_of_narrow_tiles_in_sim() {
    if std::env::var("TILELANG_TMA").is_ok_and(|v| v == "0") {
        return;
    }
    // Where even the narrowest tiles leave half of 132 SMs idle, the refit splits them: NN
    // 64×4096×4096 in 64×64 tiles, 12 stages, 2 shares; NN 256×1024×4096 in 128×64 tiles
    // with each k step's wgmma running into the next, 8 stages, 4 shares. Each runs here with
    // shares deeper than its stages (13 and 9 k tiles), so every stage's barriers go round
    // more than once, against the CPU's run of the same kernel.
    let h = gemm::GemmConfig::hopper();
    for (m, n, k, split, stages, kk) in
        [(64, 4096, 4096, 2, 12, 1664), (256, 1024, 4096, 4, 8, 2304)]
    {
        let fit = h.fit_to_gpu(gemm::Layout::NN, m, n, k, 132);
        assert_eq!((fit.split_k, fit.stages), (split, stages), "{fit:?}");
        let what = format!(
            "{}x{} in {} stages, {split} shares",
            fit.bm, fit.bn, fit.stages
        );
        let kernel = gemm::gemm(gemm::Layout::NN, BF16, BF16, fit);
        let low = tma_variant(&kernel);
        let (sm, sn) = (fit.bm as usize, 2 * fit.bn as usize);
        let mut s = shapes(gemm::Layout::NN, sm, sn, kk);
        s[2] = vec![split as usize, sm, sn];
        let e = run_vs_cpu(&kernel, &low, &s, 13).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(e < 1e-5, "{what}: {e}");
    }
}

#[test]
fn split_k_gemm_in_sim() {
    if std::env::var("TILELANG_TMA").is_ok_and(|v| v == "0") {
        return;
    }
    // The warp-specialized TMA GEMM over a grid with a split dim: one block a (tile, split)
    // pair (a split config drops the persistence it asks for: `GemmConfig::schedule_blocks`);
    // each writes its share of the k tiles to W[split]. K = 200 in 64-deep tiles (4) over 3
    // splits: shares of 2, 2 and 0 k tiles (the last writes zeros); K = 520 (9): 3 each.
    let cfg = gemm::GemmConfig {
        persistent: Some(3),
        warp_specialize: Some(true),
        instruction: Some(GemmInstruction::Wgmma),
        split_k: 3,
        ..gemm::GemmConfig::tiles(64, 64, 64, 3, 128)
    };
    for layout in [gemm::Layout::NT, gemm::Layout::NN] {
        let k = gemm::gemm(layout, BF16, BF16, cfg);
        let low = tma_variant(&k);
        for (m, n, kk) in [(136, 72, 200), (64, 64, 520)] {
            let mut s = shapes(layout, m, n, kk);
            s[2] = vec![3, m, n];
            let e = run_vs_cpu(&k, &low, &s, 5)
                .unwrap_or_else(|e| panic!("{} {m}x{n}x{kk}: {e}", layout.name()));
            assert!(e < 1e-5, "{} {m}x{n}x{kk}: {e}", layout.name());
        }
    }
    // The sum of the shares, in C's type.
    let sum = gemm::split_k_sum(BF16, 3, 256, 128);
    let low = sum.lower(Target::SM90).expect("lowers");
    let e = run_vs_cpu(&sum, &low, &[vec![3, 37, 300], vec![37, 300]], 2).expect("runs");
    assert!(e < 1e-6, "split sum: {e}");
}

#[test]
fn a_global_access_before_the_grid_dependency_wait_is_reported() {
    // sm_90 kernels may be launched while the kernel before them still runs (programmatic
    // dependent launch); `griddepcontrol.wait` must come before their first global access.
    let cfg = gemm::GemmConfig {
        persistent: Some(2),
        warp_specialize: Some(true),
        instruction: Some(GemmInstruction::Wgmma),
        ..gemm::GemmConfig::tiles(64, 64, 64, 3, 128)
    };
    let layout = gemm::Layout::NT;
    let k = gemm::gemm(layout, BF16, BF16, cfg);
    let low = k.lower(Target::SM90).expect("lowers");
    let sh = shapes(layout, 72, 64, 200);
    assert!(run_vs_cpu(&k, &low, &sh, 3).expect("the kernel as lowered runs") < 1e-5);
    let is_wait = |op: &Intrinsic| *op == Intrinsic::GridDependencyWait;
    // The wait moved to the end of the kernel: every load and store comes before it.
    let span = low.body.span;
    let late = Stmt::new(
        StmtKind::Seq(vec![
            remove_calls(&low.body, &is_wait),
            Stmt::new(
                StmtKind::Eval(Expr::call(
                    Intrinsic::GridDependencyWait,
                    vec![],
                    tilelang::ir::DType::Bool,
                )),
                span,
            ),
        ]),
        span,
    );
    let e = run_vs_cpu(&k, &low.with_body(late), &sh, 3)
        .expect_err("a global access before the wait must be reported");
    assert!(e.contains("before its griddepcontrol.wait"), "{e}");
}

/// Is `op` an `mbarrier_wait` on a barrier of the buffer named `name`?
fn waits_on(args: &[Expr], name: &str) -> bool {
    args.first().is_some_and(|a| a.to_string().contains(name))
}

#[test]
fn warp_specialized_gemm_in_sim() {
    if std::env::var("TILELANG_TMA").is_ok_and(|v| v == "0") {
        return;
    }
    // One and two consumer warpgroups, wgmma groups in flight across k steps or not, the
    // phases wrapping several times; persistent kernels whose producer runs into the next
    // tile while the consumers finish this one.
    let configs = [
        (64, 64, 64, 3, 128, false, None),
        (64, 64, 64, 4, 128, true, None),
        (128, 128, 64, 3, 256, true, None),
        (64, 64, 64, 3, 128, true, Some(2)),
        (128, 128, 64, 2, 256, false, Some(3)),
    ];
    for (bm, bn, bk, stages, threads, overlap, persistent) in configs {
        let cfg = gemm::GemmConfig {
            instruction: Some(GemmInstruction::Wgmma),
            overlap,
            persistent,
            warp_specialize: Some(true),
            ..gemm::GemmConfig::tiles(bm, bn, bk, stages, threads)
        };
        for layout in [gemm::Layout::NT, gemm::Layout::NN] {
            let k = gemm::gemm(layout, BF16, F32, cfg);
            let low = tma_variant(&k);
            assert_eq!(low.threads, threads + 128, "{low}");
            assert!(low.to_string().contains("named_barrier<1,"), "{low}");
            for (m, n, kk) in [(136, 152, 520), (64, 64, 64)] {
                let what = format!(
                    "{} {bm}x{bn}x{bk}, {stages} stages, overlap {overlap}, persistent {persistent:?}, {m}x{n}x{kk}",
                    layout.name()
                );
                let e = run_vs_cpu(&k, &low, &shapes(layout, m, n, kk), 7)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                assert!(e < 1e-5, "{what}: {e}");
            }
        }
    }
}

#[test]
fn planted_warp_specialization_bugs_are_caught() {
    if std::env::var("TILELANG_TMA").is_ok_and(|v| v == "0") {
        return;
    }
    let cfg = gemm::GemmConfig {
        instruction: Some(GemmInstruction::Wgmma),
        overlap: true,
        warp_specialize: Some(true),
        ..gemm::GemmConfig::tiles(64, 64, 64, 3, 128)
    };
    let layout = gemm::Layout::NT;
    let k = gemm::gemm(layout, BF16, F32, cfg);
    let low = tma_variant(&k);
    let sh = shapes(layout, 64, 64, 512);
    assert!(run_vs_cpu(&k, &low, &sh, 5).expect("the kernel as lowered runs") < 1e-5);
    let broken = |body: Stmt| low.with_body(body);

    // The producer refills a stage without waiting for its release: it overwrites tiles the
    // consumers have not read (or a wgmma still reads).
    let no_release_wait = broken(remove_calls_where(&low.body, &|op, a| {
        *op == Intrinsic::MbarrierWait && waits_on(a, "_empty")
    }));
    let e = run_vs_cpu(&k, &no_release_wait, &sh, 5)
        .expect_err("a producer that does not wait for the release must be reported");
    assert!(
        e.contains("race") || e.contains("wgmma") || e.contains("TMA"),
        "{e}"
    );

    // The consumers read a stage before its tiles land.
    let no_full_wait = broken(remove_calls_where(&low.body, &|op, a| {
        *op == Intrinsic::MbarrierWait && waits_on(a, "_full")
    }));
    let e = run_vs_cpu(&k, &no_full_wait, &sh, 5)
        .expect_err("consumers that do not wait for the tiles must be reported");
    assert!(e.contains("TMA copy"), "{e}");

    // The consumers never release a stage: the producer waits forever.
    let no_release = broken(rewrite_calls(
        &low.body,
        &|op| *op == Intrinsic::MbarrierArrive,
        &|_, _| (Intrinsic::FenceProxyAsync, vec![]),
    ));
    let e = run_vs_cpu(&k, &no_release, &sh, 5).expect_err("a missing release must be reported");
    assert!(e.contains("deadlock") && e.contains("mbarrier"), "{e}");

    // The consumers' barrier counts the producer warps too: it never completes.
    let wrong_count = broken(rewrite_calls(
        &low.body,
        &|op| matches!(op, Intrinsic::NamedBarrier { .. }),
        &|op, a| match op {
            Intrinsic::NamedBarrier { id, threads } => (
                Intrinsic::NamedBarrier {
                    id: *id,
                    threads: threads + 128,
                },
                a.to_vec(),
            ),
            _ => (op.clone(), a.to_vec()),
        },
    ));
    let e = run_vs_cpu(&k, &wrong_count, &sh, 5)
        .expect_err("a named barrier counting absent threads must be reported");
    assert!(e.contains("named barrier 1"), "{e}");
}

#[test]
fn tma_store_epilogue_bugs_are_caught() {
    if std::env::var("TILELANG_TMA").is_ok_and(|v| v == "0") {
        return;
    }
    // A warp-specialized persistent GEMM stores C by TMA from a staging tile, and leaves the
    // store in flight while the next tile runs: two blocks over six tiles, so each stages C
    // again while its previous store may still read the tile.
    let cfg = gemm::GemmConfig {
        instruction: Some(GemmInstruction::Wgmma),
        persistent: Some(2),
        warp_specialize: Some(true),
        ..gemm::GemmConfig::tiles(64, 64, 64, 3, 128)
    };
    let layout = gemm::Layout::NT;
    let k = gemm::gemm(layout, BF16, F32, cfg);
    let low = tma_variant(&k);
    let text = low.to_string();
    assert!(text.contains("tma_store<"), "{text}");
    // Tails in M and N: the store clips them.
    let sh = shapes(layout, 136, 184, 128);
    assert!(run_vs_cpu(&k, &low, &sh, 6).expect("the kernel as lowered runs") < 1e-5);
    let broken = |body: Stmt| low.with_body(body);

    // The staging tile is rewritten before the previous store has read it.
    let no_read_wait = broken(rewrite_calls(
        &low.body,
        &|op| matches!(op, Intrinsic::BulkWait { .. }),
        &|_, _| (Intrinsic::FenceProxyAsync, vec![]),
    ));
    let e = run_vs_cpu(&k, &no_read_wait, &sh, 6)
        .expect_err("rewriting a tile a TMA store reads must be reported");
    assert!(e.contains("TMA store"), "{e}");

    // The fragment's writes are not fenced for the async proxy before the store reads them.
    let no_fence = broken(remove_calls(&low.body, &|op| {
        *op == Intrinsic::FenceProxyAsync
    }));
    let e =
        run_vs_cpu(&k, &no_fence, &sh, 6).expect_err("an unfenced staging tile must be reported");
    assert!(e.contains("fence"), "{e}");

    // A box one column over: wrong output.
    let shifted = broken(rewrite_calls(
        &low.body,
        &|op| matches!(op, Intrinsic::TmaStore { .. }),
        &|op, a| {
            let mut a = a.to_vec();
            let col = a.len() - 1;
            a[col] = a[col].clone() + Expr::int(8).cast(a[col].dtype());
            (op.clone(), a)
        },
    ));
    match run_vs_cpu(&k, &shifted, &sh, 6) {
        Ok(err) => assert!(err > 1e-2, "a shifted TMA store went unnoticed ({err})"),
        Err(e) => assert!(!e.is_empty()),
    }
}

/// Four 48 KB stages of 128×256×64 tiles leave no room for the epilogue's whole staging
/// tile, so C goes out in column chunks through a tile of half (bf16) or a quarter (f32) of
/// its columns, each chunk's store read before the next chunk overwrites it: correct with
/// tails in M and N on a persistent grid, and a missing read wait is reported.
#[test]
fn chunked_tma_store_epilogue_in_sim() {
    if std::env::var("TILELANG_TMA").is_ok_and(|v| v == "0") {
        return;
    }
    for (out, scratch) in [(BF16, "bf16[16384]"), (F32, "f32[8192]")] {
        let cfg = gemm::GemmConfig {
            instruction: Some(GemmInstruction::Wgmma),
            persistent: Some(2),
            warp_specialize: Some(true),
            ..gemm::GemmConfig::tiles(128, 256, 64, 4, 256)
        };
        let layout = gemm::Layout::NT;
        let k = gemm::gemm(layout, BF16, out, cfg);
        let low = tma_variant(&k);
        let text = low.to_string();
        assert!(text.contains("tma_store<"), "{text}");
        assert!(
            text.contains(&format!("alloc shared epilogue_scratch: {scratch}")),
            "{out}: {text}"
        );
        let sh = shapes(layout, 136, 520, 200);
        let e = run_vs_cpu(&k, &low, &sh, 6).expect("the kernel as lowered runs");
        assert!(e < 1e-2, "{out}: {e}");
        let no_read_wait = low.with_body(rewrite_calls(
            &low.body,
            &|op| matches!(op, Intrinsic::BulkWait { .. }),
            &|_, _| (Intrinsic::FenceProxyAsync, vec![]),
        ));
        let e = run_vs_cpu(&k, &no_read_wait, &sh, 6)
            .expect_err("rewriting a chunk a TMA store reads must be reported");
        assert!(e.contains("TMA store"), "{e}");
    }
}

/// A TMA store's global writes land after the store is issued (the epilogue waits only
/// until the store has read its tile): reading them back in the kernel before the issuing
/// thread's full wait (`cp.async.bulk.wait_group 0`, not `.read`) is reported; after it,
/// the read is fine. (GEMM + RS on 4 H100s pushed its TMA-stored partials too early and came
/// out wrong; the compiler no longer TMA-stores buffers the kernel reads back.)
#[test]
fn reading_back_a_tma_store_in_flight_is_reported() {
    if std::env::var("TILELANG_TMA").is_ok_and(|v| v == "0") {
        return;
    }
    let cfg = gemm::GemmConfig {
        instruction: Some(GemmInstruction::Wgmma),
        warp_specialize: Some(true),
        ..gemm::GemmConfig::tiles(64, 64, 64, 3, 128)
    };
    let k = gemm::gemm(gemm::Layout::NT, BF16, F32, cfg);
    let low = tma_variant(&k);
    assert!(low.to_string().contains("tma_store<"));
    let c = low
        .params
        .iter()
        .find_map(|p| match p {
            tilelang::ir::Param::Tensor { buffer, .. } if buffer.name() == "C" => {
                Some(buffer.clone())
            }
            _ => None,
        })
        .expect("C");
    let sh = shapes(gemm::Layout::NT, 64, 64, 128);
    // Thread 0 (the one that issued the store) reads C back at the kernel's end, after a
    // wait for the stores: full or `.read`.
    let read_back = |read: bool| {
        let tid = Expr::call(Intrinsic::ThreadIdx, vec![], DType::I32);
        let zero = || vec![Expr::int(0), Expr::int(0)];
        let tail = Stmt::new(
            StmtKind::If {
                cond: tid.eq_(0),
                then_: Box::new(Stmt::seq(
                    vec![
                        Stmt::new(
                            StmtKind::Eval(Expr::call(
                                Intrinsic::BulkWait { n: 0, read },
                                vec![],
                                DType::Bool,
                            )),
                            low.body.span,
                        ),
                        Stmt::new(
                            StmtKind::Store {
                                buffer: c.clone(),
                                indices: zero(),
                                value: Expr::load(&c, zero()),
                            },
                            low.body.span,
                        ),
                    ],
                    low.body.span,
                )),
                else_: None,
            },
            low.body.span,
        );
        low.with_body(Stmt::seq(vec![low.body.clone(), tail], low.body.span))
    };
    let e =
        run_vs_cpu(&k, &read_back(true), &sh, 3).expect_err("a read of C before the store landed");
    assert!(e.contains("may not have written yet"), "{e}");
    let err = run_vs_cpu(&k, &read_back(false), &sh, 3).expect("after a full wait");
    assert!(err < 1e-5, "{err}");
}

/// Warp-specialized attention with two consumer warpgroups takes turns issuing its GEMMs
/// (FlashAttention-3's ping-pong: `bar.sync` on its own named barrier before each wgmma group,
/// `bar.arrive` on the other's after the commit), agrees with the CPU backend causal and not,
/// and a broken hand-over is reported as the deadlock it is.
#[test]
fn ping_pong_attention_in_sim() {
    if std::env::var("TILELANG_TMA").is_ok_and(|v| v == "0")
        || std::env::var("TILELANG_PINGPONG").is_ok_and(|v| v == "0")
    {
        return;
    }
    // Without the attribute there are no turns.
    let plain = tma_variant(&flash_attention(
        BF16,
        64,
        false,
        AttnConfig {
            ping_pong: false,
            ..turn_taking_attention(false)
        },
    ));
    if std::env::var_os("TILELANG_PINGPONG").is_none() {
        assert!(
            !plain.to_string().contains("named_barrier_arrive"),
            "{plain}"
        );
    }
    use tilelang::kernels::flash_attention::{flash_attention, AttnConfig};
    let cfg = turn_taking_attention(false);
    for causal in [false, true] {
        let k = flash_attention(BF16, 64, causal, cfg);
        let low = tma_variant(&k);
        let text = low.to_string();
        assert!(text.contains("named_barrier_arrive<2, 256>"), "{text}");
        assert!(text.contains("named_barrier<3, 256>"), "{text}");
        let s = vec![1, 2, 200, 64];
        let shapes = [s.clone(), s.clone(), s.clone(), s, vec![1, 2, 200]];
        let e =
            run_vs_cpu(&k, &low, &shapes, 11).unwrap_or_else(|e| panic!("causal {causal}: {e}"));
        assert!(e < 1e-2, "causal {causal}: {e}");
        if causal {
            continue;
        }
        // Warpgroup 0 never hands over: warpgroup 1 waits at its barrier forever.
        let no_hand_over = low.with_body(rewrite_calls(
            &low.body,
            &|op| matches!(op, Intrinsic::NamedBarrierArrive { id: 3, .. }),
            &|_, _| (Intrinsic::FenceProxyAsync, vec![]),
        ));
        let e = run_vs_cpu(&k, &no_hand_over, &shapes, 11)
            .expect_err("a turn that is never handed over must be reported");
        // Reported as the first wait that can never complete: the consumers' barrier, or
        // the producer's wait for a stage the stuck warpgroup never releases.
        assert!(
            e.contains("named barrier 3") || e.contains("deadlock"),
            "{e}"
        );
    }
}

/// Attention tiles whose two consumer warpgroups take turns at the tensor cores (a producer
/// warpgroup, 128 query rows), with P·V overlapped under the next softmax or not.
fn turn_taking_attention(overlap_pv: bool) -> tilelang::kernels::flash_attention::AttnConfig {
    tilelang::kernels::flash_attention::AttnConfig {
        instruction: Some(GemmInstruction::Wgmma),
        warp_specialize: Some(true),
        overlap_pv,
        ping_pong: true,
        ..tilelang::kernels::flash_attention::AttnConfig::tiles(128, 64, 2, 256)
    }
}

/// Ping-pong on the overlapped attention (Q·Kⱼᵀ and P·V of step j − 1 issued back to back):
/// the two groups share one turn — a single `bar.sync` before them and a single hand-over
/// after — and the result agrees with the CPU backend, causal and not.
#[test]
fn ping_pong_overlapped_attention_takes_one_turn_for_both_gemms_in_sim() {
    if std::env::var("TILELANG_TMA").is_ok_and(|v| v == "0")
        || std::env::var("TILELANG_PINGPONG").is_ok_and(|v| v == "0")
    {
        return;
    }
    use tilelang::kernels::flash_attention::flash_attention;
    let cfg = turn_taking_attention(true);
    for causal in [false, true] {
        let k = flash_attention(BF16, 64, causal, cfg);
        let low = tma_variant(&k);
        let text = low.to_string();
        // One turn per step: one wait on warpgroup 0's barrier in the loop, and the one after
        // it that takes warpgroup 1's last hand-over (two turns a step would make three).
        assert_eq!(
            text.matches("named_barrier<2, 256>").count(),
            2,
            "causal {causal}: {text}"
        );
        let s = vec![1, 2, 200, 64];
        let shapes = [s.clone(), s.clone(), s.clone(), s, vec![1, 2, 200]];
        let e = run_vs_cpu(&k, &low, &shapes, 5).unwrap_or_else(|e| panic!("causal {causal}: {e}"));
        assert!(e < 1e-2, "causal {causal}: {e}");
    }
}

/// The specialized fp8 GEMM with per-tensor promotion takes turns by default (one consumer
/// warpgroup promotes its partial while the other's wgmma runs); with tails in M, N and K it
/// agrees with the CPU backend.
#[test]
fn fp8_promotion_turns_in_sim() {
    if std::env::var("TILELANG_TMA").is_ok_and(|v| v == "0")
        || std::env::var("TILELANG_PINGPONG").is_ok_and(|v| v == "0")
    {
        return;
    }
    use tilelang::kernels::fp8_gemm::{fp8_gemm, Fp8Gemm, Fp8Scaling};
    let spec = Fp8Gemm::e4m3(Fp8Scaling::Tensor);
    let cfg = gemm::GemmConfig {
        instruction: Some(GemmInstruction::Wgmma),
        warp_specialize: Some(true),
        ..gemm::GemmConfig::tiles(128, 128, 128, 3, 256)
    };
    let k = fp8_gemm(spec, cfg);
    let low = tma_variant(&k);
    assert!(low.to_string().contains("named_barrier_arrive<"), "{low}");
    let (m, n, kk) = (200, 136, 640);
    let shapes = spec.tensor_shapes(m, n, kk);
    let e = run_vs_cpu(&k, &low, &shapes, 3).unwrap_or_else(|e| panic!("{e}"));
    assert!(e < 1e-2, "{e}");
}

/// Attention with P·V left running under the next softmax (`AttnConfig::overlap_pv`) on the
/// aligned (TMA) variant, unspecialized and with a producer warpgroup: agrees with the CPU
/// backend causal and not, with a sequence tail.
#[test]
fn attention_overlapping_pv_with_tma_in_sim() {
    use tilelang::kernels::flash_attention::{flash_attention, AttnConfig};
    // (head dim, key tile, producer warpgroup): the last is the Hopper default for d128.
    for (d, bn, ws) in [(64, 64, false), (64, 64, true), (128, 128, true)] {
        for causal in [false, true] {
            let cfg = AttnConfig {
                instruction: Some(GemmInstruction::Wgmma),
                warp_specialize: Some(ws),
                overlap_pv: true,
                ..AttnConfig::tiles(128, bn, 2, 256)
            };
            let k = flash_attention(BF16, d, causal, cfg);
            let low = tma_variant(&k);
            if ws {
                assert!(low.to_string().contains("setmaxnreg_inc<"), "{low}");
            }
            let s = vec![1, 2, 200, d as usize];
            let shapes = [s.clone(), s.clone(), s.clone(), s, vec![1, 2, 200]];
            let e = run_vs_cpu(&k, &low, &shapes, 5)
                .unwrap_or_else(|e| panic!("ws {ws} causal {causal}: {e}"));
            assert!(e < 1e-2, "ws {ws} causal {causal}: {e}");
        }
    }
}

/// Thread-block clusters of 2 along M (`GemmConfig::cluster`): each block loads its A tile and
/// half of the B tile the pair shares, multicast into both; consumers release every stage to
/// both producers. Correct against the CPU at sizes with a tail cluster (an odd number of
/// row tiles: its second block repeats the last tile) and in both layouts; the lowered kernel
/// is clustered along x, syncs the cluster after the barriers' init and before exiting, and
/// multicasts only B.
#[test]
fn clustered_gemm_multicasts_b_in_sim() {
    if std::env::var("TILELANG_TMA").is_ok_and(|v| v == "0") {
        return;
    }
    for (layout, blocks) in [(gemm::Layout::NT, 4), (gemm::Layout::NN, 2)] {
        let cfg = gemm::GemmConfig {
            instruction: Some(GemmInstruction::Wgmma),
            warp_specialize: Some(true),
            persistent: Some(blocks),
            cluster: 2,
            ..gemm::GemmConfig::tiles(64, 64, 64, 3, 128)
        };
        let k = gemm::gemm(layout, BF16, F32, cfg);
        let low = tma_variant(&k);
        let text = low.to_string();
        assert_eq!(
            low.attrs.cluster,
            Some(tilelang::ir::ClusterAttr { dim: 0, size: 2 }),
            "{text}"
        );
        assert_eq!(text.matches("cluster_sync").count(), 2, "{text}");
        assert_eq!(text.matches("multicast").count(), 1, "only B: {text}");
        assert!(text.contains("mbarrier_arrive_cluster"), "{text}");
        for (m, n, kk) in [(136, 152, 520), (64, 64, 64), (200, 72, 136)] {
            let what = format!("{} {blocks} blocks, {m}x{n}x{kk}", layout.name());
            let e = run_vs_cpu(&k, &low, &shapes(layout, m, n, kk), 11)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(e < 1e-5, "{what}: {e}");
        }
    }
}

/// The cluster protocol's planted bugs are reported: without the cluster sync after the
/// barriers' init a peer may signal a barrier whose initialization nothing ordered before the
/// signal; without the one before exiting a block may exit while its peer still arrives on its
/// barriers; with consumers releasing a stage to one block of the pair only, that block's
/// producer refills the stage in its peer before the peer consumed it.
#[test]
fn planted_cluster_bugs_are_caught() {
    if std::env::var("TILELANG_TMA").is_ok_and(|v| v == "0") {
        return;
    }
    let cfg = gemm::GemmConfig {
        instruction: Some(GemmInstruction::Wgmma),
        warp_specialize: Some(true),
        persistent: Some(2),
        cluster: 2,
        ..gemm::GemmConfig::tiles(64, 64, 64, 2, 128)
    };
    let layout = gemm::Layout::NT;
    let k = gemm::gemm(layout, BF16, F32, cfg);
    let low = tma_variant(&k);
    let sh = shapes(layout, 128, 64, 512);
    assert!(run_vs_cpu(&k, &low, &sh, 5).expect("as lowered") < 1e-5);
    // Without the sync after the barriers' init, or without the one before exiting.
    let without_sync = |which: usize| {
        let mut n = 0;
        low.with_body(low.body.map_post(&mut |st| {
            match st.kind {
                StmtKind::Seq(v) => Stmt::seq(
                    v.into_iter()
                        .filter(|x| {
                            let sync = matches!(&x.kind, StmtKind::Eval(e)
                            if matches!(e.kind(), ExprKind::Call(Intrinsic::ClusterSync, _)));
                            n += usize::from(sync);
                            !(sync && n == which)
                        })
                        .collect(),
                    st.span,
                ),
                k => Stmt::new(k, st.span),
            }
        }))
    };
    let e = run_vs_cpu(&k, &without_sync(1), &sh, 5).expect_err("no sync after the init");
    assert!(e.contains("cluster") && e.contains("initialization"), "{e}");
    let e = run_vs_cpu(&k, &without_sync(2), &sh, 5).expect_err("no sync before exiting");
    assert!(e.contains("cluster") && e.contains("exited"), "{e}");
    // Each warp releases the stage to its own block only (the arrival for the other rank
    // removed): the peer's producer waits for arrivals that never come.
    let own_only = low.with_body(remove_calls_where(&low.body, &|op, a| {
        *op == Intrinsic::MbarrierArriveCluster && a.get(1).is_some_and(|r| r.as_int() == Some(1))
    }));
    // Rank 0's producer refills a stage its peer has not consumed: two copies in flight on
    // the same bytes.
    let e = run_vs_cpu(&k, &own_only, &sh, 5).expect_err("releases to one block only");
    assert!(e.contains("race") || e.contains("deadlock"), "{e}");
}

/// Odd N under the Hopper default (four 48 KB stages): C's rows are not whole 16-byte units
/// (no TMA store) and its whole 64 KB staging tile does not fit beside the stages, so it goes
/// out through a tile of half its columns, chunk by chunk. Agrees with the CPU backend (the
/// simulator's race and barrier checks included) with tails in every dim.
#[test]
fn chunked_staged_epilogue_in_sim() {
    for layout in [gemm::Layout::NT, gemm::Layout::NN] {
        let k = gemm::gemm(layout, BF16, BF16, gemm::GemmConfig::hopper());
        let low = lowered_for_sm90(&k, &k);
        let text = low.to_string();
        assert!(
            text.contains("epilogue_scratch: bf16[16384]"),
            "{}: no half-width staging tile",
            k.name()
        );
        for (m, n, kk) in [(131, 259, 96), (200, 7, 72)] {
            let what = format!("{} {m}x{n}x{kk}", layout.name());
            let e = run_vs_cpu(&k, &low, &shapes(layout, m, n, kk), 8)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(e < 1e-2, "{what}: {e}");
        }
    }
}

/// A tile whose columns start off 16 bytes (`ko·64 + 3` in bf16): TMA starts no box there (an
/// illegal instruction on the GPU, which the simulator reports), so the pipeline loads the
/// loop's tiles by cp.async, and the kernel agrees with the CPU backend; the same kernel with
/// the offset a multiple of 8 elements keeps TMA.
#[test]
fn tiles_off_16_bytes_are_not_loaded_by_tma() {
    let shifted_gemm = |shift: i64| {
        let (bm, bn, bk) = (64, 64, 64);
        Kernel::build("shifted_gemm", |k| {
            let (m, n, kd) = (k.dim("M"), k.dim("N"), k.dim("K"));
            let a = k.input("A", [&m, &kd], BF16);
            let b = k.input("B", [&n, &kd], BF16);
            let c = k.output("C", [&m, &n], F32);
            k.launch([ceildiv(&n, bn), ceildiv(&m, bm)], 128, |t, [bx, by]| {
                let a_s = t.alloc_shared([bm, bk], BF16);
                let b_s = t.alloc_shared([bn, bk], BF16);
                let acc = t.alloc_fragment([bm, bn], F32);
                t.clear(&acc);
                t.pipelined(ceildiv(&kd, bk), 3, |t, ko| {
                    t.copy(a.tile([&by * bm, &ko * bk + shift]), &a_s);
                    t.copy(b.tile([&bx * bn, &ko * bk]), &b_s);
                    t.gemm(&a_s, &b_s, &acc).transpose_b();
                });
                t.copy(&acc, c.tile([&by * bm, &bx * bn]));
            });
        })
    };
    for (shift, tma) in [(3, false), (8, true)] {
        let k = shifted_gemm(shift);
        let low = k
            .lower_aligned(Target::SM90)
            .unwrap_or_else(|d| panic!("shift {shift}: {d}"));
        assert_eq!(low.to_string().contains("tma_load<"), tma, "shift {shift}");
        let e = run_vs_cpu(&k, &low, &shapes(gemm::Layout::NT, 72, 80, 192), 9)
            .unwrap_or_else(|e| panic!("shift {shift}: {e}"));
        assert!(e < 1e-5, "shift {shift}: {e}");
    }
}

/// The variant the runtime compiles for a launch whose N is odd and whose K and M are whole
/// 16-byte units (`class(K%8,N%1)`), lowered for sm_90a.
fn odd_n_variant(k: &Kernel) -> tilelang::ir::Kernel {
    lowered_for_sm90(k, &common::class_variant(k, &["M", "K"], 8))
}

/// `variant` (of `k`) lowered for sm_90a; a lowering error fails the test, naming `k`.
fn lowered_for_sm90(k: &Kernel, variant: &Kernel) -> tilelang::ir::Kernel {
    variant
        .lower(Target::SM90)
        .unwrap_or_else(|d| panic!("{}: {d}", k.name()))
}

/// Odd N on the Hopper default: C leaves by one bulk copy a row (`bulk_store`) of the row's
/// whole aligned 16-byte units from a staging tile whose rows are shifted to the row's
/// alignment, the few columns around them in aligned pieces, left in flight while the next
/// tile runs (persistent: two blocks over several tiles). Agrees with the CPU backend at sizes
/// that give rows every alignment, a last column tile narrower than a row's first aligned
/// element (133 = 128 + 5), and a tile past M; in bf16 (8 elements a vector) and f32 out (4).
/// Planted bugs are reported: a tile rewritten while a copy still reads it, a tile not fenced
/// for the async proxy, and a copy of a length that is not whole 16-byte units.
#[test]
fn odd_n_rows_leave_by_bulk_copies_in_sim() {
    if std::env::var("TILELANG_TMA").is_ok_and(|v| v == "0") {
        return;
    }
    let cfg = gemm::GemmConfig {
        persistent: Some(2),
        ..gemm::GemmConfig::hopper()
    };
    // NT: B's rows are K long, so only C's are odd (in NN the runtime stages B pitched for
    // its TMA loads, which `run_vs_cpu` does not do).
    for (layout, out) in [(gemm::Layout::NT, BF16), (gemm::Layout::NT, F32)] {
        let k = gemm::gemm(layout, BF16, out, cfg);
        let low = odd_n_variant(&k);
        let text = low.to_string();
        assert!(
            text.contains("bulk_store("),
            "{}: no bulk copies\n{text}",
            k.name()
        );
        assert!(!text.contains("tma_store<"), "{}", k.name());
        for (m, n, kk) in [(131, 259, 64), (70, 133, 64), (40, 1029, 64)] {
            let what = format!("{} -> {out} {m}x{n}x{kk}", layout.name());
            let e = run_vs_cpu(&k, &low, &shapes(layout, m, n, kk), 9)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(e < 1e-2, "{what}: {e}");
        }
    }
    let k = gemm::gemm(gemm::Layout::NT, BF16, BF16, cfg);
    let low = odd_n_variant(&k);
    let sh = shapes(gemm::Layout::NT, 131, 259, 64);
    let broken = |body: Stmt| low.with_body(body);
    let no_read_wait = broken(rewrite_calls(
        &low.body,
        &|op| matches!(op, Intrinsic::BulkWait { .. }),
        &|_, _| (Intrinsic::FenceProxyAsync, vec![]),
    ));
    let e = run_vs_cpu(&k, &no_read_wait, &sh, 9)
        .expect_err("rewriting a tile a bulk copy reads must be reported");
    assert!(e.contains("TMA store"), "{e}");
    let no_fence = broken(remove_calls(&low.body, &|op| {
        *op == Intrinsic::FenceProxyAsync
    }));
    let e = run_vs_cpu(&k, &no_fence, &sh, 9).expect_err("an unfenced tile must be reported");
    assert!(e.contains("fence"), "{e}");
    let off_by_one = broken(rewrite_calls(
        &low.body,
        &|op| *op == Intrinsic::BulkStore,
        &|op, a| {
            let mut a = a.to_vec();
            a[2] = a[2].clone() - Expr::int(2).cast(a[2].dtype());
            (op.clone(), a)
        },
    ));
    let e = run_vs_cpu(&k, &off_by_one, &sh, 9)
        .expect_err("a bulk copy of a length that is not whole 16-byte units must be reported");
    assert!(e.contains("16 bytes"), "{e}");
}

/// The variant of `k` for sizes where only `aligned` are multiples of 8, its odd-row inputs
/// `staged` (by parameter name) copied by the kernel itself (`stage_rows`), lowered for sm_90a.
fn staged_rows_variant(k: &Kernel, aligned: &[&str], staged: &[&str]) -> tilelang::ir::Kernel {
    lowered_for_sm90(k, &common::staged_rows_variant(k, aligned, staged))
}

/// Odd rows the kernel stages itself (`TILELANG_STAGE_IN_KERNEL=1`): its consumers copy them
/// as 16-byte vectors into the scratch the TMA reads, a publisher releases each chunk by its
/// flags, and the producer acquires them before its loads — the simulator reads TMA boxes of a
/// staged tensor from its scratch, bounded by the tensor's row length as the runtime's tensor
/// maps are (the vectors that end a row leave the next row's first elements in the padding).
/// Agrees with the CPU backend where B's rows are odd (NN, odd N), where both operands' are
/// (odd K), and where both are and every chunk is copied before the first k step (K of three
/// chunks); the first two with chunks copied in the k loop (L2 prefetches ahead of them), and
/// a thread's share of a chunk spanning several units (two persistent blocks over wide rows:
/// the units past those the registers hold are copied at once). Planted bugs are reported by
/// the memory-order check: no proxy fence before the TMA loads, no fence before the flags, no
/// wait for the flags.
#[test]
fn odd_rows_staged_in_kernel_in_sim() {
    if std::env::var("TILELANG_TMA").is_ok_and(|v| v == "0") {
        return;
    }
    let cfg = gemm::GemmConfig {
        persistent: Some(2),
        ..gemm::GemmConfig::hopper()
    };
    let cases = [
        (
            gemm::Layout::NN,
            &["M", "K"][..],
            &["B"][..],
            [131, 259, 960],
        ),
        (
            gemm::Layout::NT,
            &["M", "N"][..],
            &["A", "B"][..],
            [70, 136, 1001],
        ),
        (
            gemm::Layout::NN,
            &["M"][..],
            &["A", "B"][..],
            [64, 133, 197],
        ),
    ];
    for (layout, aligned, staged, [m, n, kk]) in cases {
        let k = gemm::gemm(layout, BF16, BF16, cfg);
        let low = staged_rows_variant(&k, aligned, staged);
        let names: Vec<&str> = low
            .attrs
            .staged_rows
            .iter()
            .map(|s| s.tensor.name())
            .collect();
        assert_eq!(names, staged, "{}: staged {names:?}", k.name());
        let what = format!("{} {m}x{n}x{kk}", layout.name());
        let e = run_vs_cpu(&k, &low, &shapes(layout, m, n, kk), 5)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(e < 1e-2, "{what}: {e}");
    }
    let k = gemm::gemm(gemm::Layout::NN, BF16, BF16, cfg);
    let low = staged_rows_variant(&k, &["M", "K"], &["B"]);
    let sh = shapes(gemm::Layout::NN, 131, 259, 960);
    let broken = |body: Stmt| low.with_body(body);
    let no_proxy_fence = broken(remove_calls(&low.body, &|op| {
        *op == Intrinsic::FenceProxyAsyncGlobal
    }));
    let e = run_vs_cpu(&k, &no_proxy_fence, &sh, 5).expect_err("an unfenced TMA read");
    assert!(e.contains("fence.proxy.async.global"), "{e}");
    let no_release = broken(remove_calls(&low.body, &|op| {
        matches!(op, Intrinsic::Fence { .. })
    }));
    let e = run_vs_cpu(&k, &no_release, &sh, 5).expect_err("flags raised before a fence");
    assert!(e.contains("unordered access"), "{e}");
    let no_wait = broken(remove_calls(&low.body, &|op| {
        matches!(op, Intrinsic::WaitUntil { .. })
    }));
    match run_vs_cpu(&k, &no_wait, &sh, 5) {
        Ok(e) => assert!(
            e > 1e-2,
            "loads that do not wait for the copy read stale rows: {e}"
        ),
        Err(e) => assert!(e.contains("unordered access"), "{e}"),
    }
}

/// A wgmma may read an MN-major B from any row of a shared tile, even one known only at run
/// time (`B_s[off .. off + 64, :]`, `off = KB − 64` here, 0 to 8): the descriptor starts at
/// the row's plain address, and the 128-byte swizzle goes by the address bits, as on the
/// H200 (gpu-notes run 40: the probe's base-offset field set instead gave errors of 1.0–1.3).
#[test]
fn wgmma_reads_b_from_any_row_in_sim() {
    let k = Kernel::build("shifted_b", |k| {
        let (m, n, kb) = (k.dim("M"), k.dim("N"), k.dim("KB"));
        let a = k.input("A", [m.clone(), Expr::int(64)], BF16);
        let b = k.input("B", [&kb, &n], BF16);
        let c = k.output("C", [&m, &n], F32);
        k.launch([ceildiv(&n, 64), ceildiv(&m, 64)], 128, |t, [bx, by]| {
            let a_s = t.alloc_shared_named("A_s", [64, 64], BF16);
            let b_s = t.alloc_shared_named("B_s", [72, 64], BF16);
            let acc = t.alloc_fragment_named("acc", [64, 64], F32);
            t.clear(&acc);
            t.copy(a.tile([&by * 64, Expr::int(0)]), &a_s);
            t.copy(b.tile([Expr::int(0), &bx * 64]), &b_s);
            let rows = b_s.region([&kb - 64, Expr::int(0)], [64, 64]);
            t.gemm(&a_s, rows, &acc).instruction(GemmInstruction::Wgmma);
            t.copy(&acc, c.tile([&by * 64, &bx * 64]));
        });
    });
    let low = k
        .lower_aligned(Target::SM90)
        .unwrap_or_else(|d| panic!("{d}"));
    for kb in 64..=72usize {
        let e = run_vs_cpu(&k, &low, &[vec![64, 64], vec![kb, 128], vec![64, 128]], 5)
            .unwrap_or_else(|e| panic!("KB {kb}: {e}"));
        assert!(e < 1e-5, "KB {kb}: {e}");
    }
}

/// `C = A·B` of row-major `[M, K]` A and `[K, N]` B (f64), as `[M, N]`.
fn matmul_f64(a: &[f64], b: &[f64], m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for r in 0..m {
        for x in 0..k {
            let av = a[r * k + x];
            for (cv, bv) in c[r * n..(r + 1) * n].iter_mut().zip(&b[x * n..(x + 1) * n]) {
                *cv += av * bv;
            }
        }
    }
    c
}

/// Run the residue GEMM on the simulator through the runtime (the variant a launch picks)
/// with `a` as row-major `[m, k]`: the output as row-major `[m, n]`.
fn residue_gemm_sim(a: &[f64], m: usize, n: usize, k: usize, seed: u64) -> (Vec<f64>, Vec<f64>) {
    use tilelang::kernels::gemm_residue::{gemm_nn_by_residue, residue_config};
    let dev = Device::Sim(Target::SM90);
    let exe = gemm_nn_by_residue(BF16, F32, residue_config())
        .compile(&dev)
        .expect("compiles for the simulator");
    let at = Tensor::zeros(&[m / 8, 8 * k], BF16, &dev).expect("A");
    at.write_f64(a).expect("A values");
    let bt = Tensor::randn(&[k, n], BF16, seed, &dev).expect("B");
    let ct = Tensor::zeros(&[m / 8, 8, n], F32, &dev).expect("C");
    ct.fill(f64::NAN).expect("C");
    exe.run(&[&at, &bt, &ct])
        .unwrap_or_else(|e| panic!("{m}x{n}x{k}: {e}"));
    (ct.to_f64_vec().expect("C"), bt.to_f64_vec().expect("B"))
}

/// The NN GEMM that reads an odd-K A in place by row residue (`kernels::gemm_residue`) in the
/// simulator, through the runtime as a launch runs it, against an f64 GEMM: every K mod 8
/// (each residue's own shift into B's stage), a last block of rows past M (M/8 = 17), columns
/// past N; and A's values as bf16 rounds them.
#[test]
fn gemm_by_residue_in_sim() {
    let (m, n) = (136usize, 264usize);
    for k in 97..=104usize {
        let at = Tensor::randn(&[m * k], BF16, 40 + k as u64, &Device::Cpu).expect("A");
        let a = at.to_f64_vec().expect("A");
        let (c, b) = residue_gemm_sim(&a, m, n, k, 9);
        let want = matmul_f64(&a, &b, m, n, k);
        let e = rel_err(&c, &want).expect("size");
        assert!(e < 1e-5, "{m}x{n}x{k}: {e}");
    }
}

/// The columns of A's tile outside its row (the previous row's tail in the first k step, the
/// next row's head in the last) meet zero rows of B, but 0·Inf is NaN: the kernel zeroes them
/// first. An Inf at the end of row 9 and at the start of row 12 leave every other row finite
/// and exact (rows 10 and 11 read them as their neighbours).
#[test]
fn gemm_by_residue_keeps_other_rows_finite_in_sim() {
    let (m, n, k) = (64usize, 256usize, 99usize);
    let at = Tensor::randn(&[m * k], BF16, 3, &Device::Cpu).expect("A");
    let mut a = at.to_f64_vec().expect("A");
    a[9 * k + k - 1] = f64::INFINITY;
    a[12 * k] = f64::INFINITY;
    let (c, b) = residue_gemm_sim(&a, m, n, k, 4);
    let want = matmul_f64(&a, &b, m, n, k);
    for r in (0..m).filter(|&r| r != 9 && r != 12) {
        let row = &c[r * n..(r + 1) * n];
        assert!(
            row.iter().all(|x| x.is_finite()),
            "row {r} is not finite: {:?}",
            &row[..4]
        );
        let e = rel_err(row, &want[r * n..(r + 1) * n]).expect("size");
        assert!(e < 1e-5, "row {r}: {e}");
    }
    assert!(c[9 * n..10 * n].iter().all(|x| !x.is_finite()), "row 9");
}

/// The NN GEMM that reads a B whose rows are not whole 16-byte units in place by row residue
/// and realigns it in shared memory (`kernels::gemm_realign`), in the simulator through the
/// runtime, against an f64 GEMM: N = 129 … 136 (every shift of every residue's rows), one and
/// two consumer warpgroups (8 and 6 stages), 11 k steps (K/8 = 81 rows of the view: every
/// stage's barriers round more than once, the last step one row deep), a last block of rows
/// past M. The simulator checks the shifted copies' reads (the element before and after, where
/// a copy starts mid-word) and the barrier and proxy fence before the wgmma reads what they
/// wrote.
#[test]
fn gemm_realigning_b_in_sim() {
    use tilelang::kernels::gemm_realign::{gemm_nn_realigning_b, realign_config};
    let dev = Device::Sim(Target::SM90);
    let k = 648usize;
    for m in [40usize, 130] {
        let exe = gemm_nn_realigning_b(BF16, F32, realign_config(m))
            .compile(&dev)
            .expect("compiles for the simulator");
        let ns: Vec<usize> = if m == 70 {
            (129..=136).collect()
        } else {
            vec![131]
        };
        for n in ns {
            let at = Tensor::randn(&[m, k], BF16, 50 + n as u64, &dev).expect("A");
            let bt = Tensor::randn(&[k / 8, 8 * n], BF16, 60 + n as u64, &dev).expect("B");
            let ct = Tensor::zeros(&[m, n], F32, &dev).expect("C");
            ct.fill(f64::NAN).expect("C");
            exe.run(&[&at, &bt, &ct])
                .unwrap_or_else(|e| panic!("{m}x{n}x{k}: {e}"));
            let (a, b) = (at.to_f64_vec().expect("A"), bt.to_f64_vec().expect("B"));
            let want = matmul_f64(&a, &b, m, n, k);
            let e = rel_err(&ct.to_f64_vec().expect("C"), &want).expect("size");
            assert!(e < 1e-5, "{m}x{n}x{k}: {e}");
        }
    }
}
