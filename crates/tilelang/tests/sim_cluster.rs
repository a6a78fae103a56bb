//! Kernels whose blocks wait for each other at a cluster barrier (`cluster_sync`): the
//! one-kernel softmax and RMS norm of few long rows, run in the simulator (sm_90a) against
//! the f64 references, a removed barrier caught, and the refusals where clusters cannot be.

mod common;

use tilelang::ir::{Expr, Intrinsic};
use tilelang::kernels::softmax::ClusterConfig;
use tilelang::kernels::{reference, rmsnorm, softmax};
use tilelang::prelude::*;
use tilelang::runtime::rel_err;
use tilelang::Target;
use tl_sim::{SimArg, SimOptions};

/// Inputs that are not all of one scale, with a large value in one block's part of each row
/// (so the row's max comes from one block and the others must rescale to it).
fn input(rows: usize, cols: usize) -> Vec<f64> {
    (0..rows * cols)
        .map(|i| {
            let (r, c) = (i / cols, i % cols);
            let spike = if c == (r * 977 + 5) % cols { 6.0 } else { 0.0 };
            ((i * 37 % 101) as f64) / 40.0 - 1.2 + spike
        })
        .collect()
}

/// Run the lowered `kernel` in the simulator on X (`rows × cols`, `dtype`), with `scratch`
/// f32 `[rows, blocks]` exchange tensors poisoned with NaN, and return Y.
fn run_sim(
    lowered: &tilelang::ir::Kernel,
    dtype: DType,
    x: &[f64],
    (rows, cols): (usize, usize),
    (scratch, blocks): (usize, usize),
) -> Result<Vec<f64>, String> {
    let mut args = vec![SimArg::tensor(dtype, &[rows, cols], x)];
    for _ in 0..scratch {
        args.push(SimArg::tensor(
            F32,
            &[rows, blocks],
            &vec![f64::NAN; rows * blocks],
        ));
    }
    args.push(SimArg::tensor(
        dtype,
        &[rows, cols],
        &vec![f64::NAN; rows * cols],
    ));
    tl_sim::run(lowered, &mut args, &SimOptions::default()).map_err(|e| e.to_string())?;
    Ok(args[scratch + 1].to_f64(dtype))
}

/// The input as the kernel sees it (rounded to `dtype`).
fn rounded(x: &[f64], dtype: DType) -> Vec<f64> {
    x.iter()
        .map(|&v| tilelang::ir::dtype::round_to(dtype, v))
        .collect()
}

#[test]
fn cluster_softmax_and_rmsnorm_in_sim() {
    // Rows that end inside the last block's part, inside an earlier block's, and exactly on a
    // block boundary; f32, bf16 and f16 in registers.
    for (rows, cols) in [(3usize, 3001usize), (2, 1000), (1, 8192)] {
        for dtype in [F32, BF16, F16] {
            let cfg = ClusterConfig::for_shape(cols as i64, dtype).expect("fits");
            let blocks = cfg.blocks as usize;
            let x = rounded(&input(rows, cols), dtype);
            let tol = if dtype == F32 { 1e-5 } else { 1e-2 };
            let k = softmax::softmax_cluster(dtype, cols as i64, cfg);
            let lowered = k.lower(Target::SM90).expect("lowers for sm_90a");
            let y = run_sim(&lowered, dtype, &x, (rows, cols), (2, blocks))
                .unwrap_or_else(|e| panic!("softmax_cluster {rows}x{cols} {dtype}: {e}"));
            let e = rel_err(&y, &reference::softmax(&x, rows, cols)).expect("size");
            assert!(e < tol, "softmax_cluster {rows}x{cols} {dtype}: {e}");

            let k = rmsnorm::rmsnorm_cluster(dtype, cols as i64, cfg);
            let lowered = k.lower(Target::SM90).expect("lowers for sm_90a");
            let y = run_sim(&lowered, dtype, &x, (rows, cols), (1, blocks))
                .unwrap_or_else(|e| panic!("rmsnorm_cluster {rows}x{cols} {dtype}: {e}"));
            let want = reference::rmsnorm(&x, rows, cols, rmsnorm::EPS);
            let e = rel_err(&y, &want).expect("size");
            assert!(e < tol, "rmsnorm_cluster {rows}x{cols} {dtype}: {e}");
        }
    }
}

/// Probabilities far below the row's max are kept, each within two roundings of its own
/// value: the cluster softmax holds exp(x − block max) in the row's type (bf16 for bf16 rows:
/// f32's range), and with three blocks an SM at 512 threads it computes the exponentials again
/// instead (`cluster_exp_once`; one rounding). A spread of 34 in the logits: probabilities down
/// to e⁻³⁴ of the max, which f16 storage (even scaled by 2¹⁵) would flush to zero. Each
/// element against the f64 reference, relative to itself: two bf16 roundings, 2⁻⁸ each.
#[test]
fn cluster_softmax_keeps_small_probabilities() {
    use tilelang::kernels::softmax::cluster_exp_once;
    let cols = 32768usize;
    // One spike of 30, the rest spread over [−4, 4].
    let x: Vec<f64> = (0..cols)
        .map(|c| {
            if c == 5000 {
                30.0
            } else {
                ((c * 37 % 97) as f64 / 97.0 - 0.5) * 8.0
            }
        })
        .collect();
    let x = rounded(&x, BF16);
    let want = reference::softmax(&x, 1, cols);
    assert!(
        want.iter().any(|&p| p < 1e-14),
        "the test needs probabilities below 1e-14"
    );
    let once = ClusterConfig::for_shape(cols as i64, BF16).expect("fits");
    let again = ClusterConfig {
        threads: 512,
        blocks_per_sm: 3,
        ..once
    };
    assert!(cluster_exp_once(&once) && !cluster_exp_once(&again));
    for cfg in [once, again] {
        let k = softmax::softmax_cluster(BF16, cols as i64, cfg);
        let lowered = k.lower(Target::SM90).expect("lowers for sm_90a");
        let y = run_sim(&lowered, BF16, &x, (1, cols), (2, cfg.blocks as usize))
            .unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
        let worst = y
            .iter()
            .zip(&want)
            .map(|(a, b)| ((a - b) / b).abs())
            .fold(0.0f64, f64::max);
        assert!(worst < 2.0 * 2f64.powi(-8), "{cfg:?}: {worst:.3e}");
    }
}

#[test]
fn a_missing_cluster_barrier_is_caught() {
    // Without the barrier a block reads its peers' statistics before they are written: the
    // simulator must not pass it (it reports the race, or the poisoned statistics reach Y).
    let (rows, cols) = (2usize, 3001usize);
    let cfg = ClusterConfig::for_shape(cols as i64, F32).expect("fits");
    let x = input(rows, cols);
    let k = softmax::softmax_cluster(F32, cols as i64, cfg);
    let lowered = k.lower(Target::SM90).expect("lowers");
    let body = common::remove_calls(&lowered.body, &|op| matches!(op, Intrinsic::ClusterSync));
    assert_ne!(
        body.to_string(),
        lowered.body.to_string(),
        "no barrier removed"
    );
    let broken = lowered.with_body(body);
    let want = reference::softmax(&x, rows, cols);
    let blocks = (2, cfg.blocks as usize);
    // With the barrier this shape passes.
    let y = run_sim(&lowered, F32, &x, (rows, cols), blocks).expect("runs with the barrier");
    let e = rel_err(&y, &want).expect("size");
    assert!(e < 1e-5, "with the barrier: {e}");
    match run_sim(&broken, F32, &x, (rows, cols), blocks) {
        Err(e) => assert!(
            e.contains("race") && e.contains("PMAX"),
            "not the exchange's race: {e}"
        ),
        Ok(y) => {
            let e = rel_err(&y, &want).unwrap_or(f64::INFINITY);
            assert!(
                e.is_nan() || e >= 1e-3,
                "a softmax without its cluster barrier passed: {e}"
            );
        }
    }
}

fn refusal(k: &Kernel, target: Target) -> String {
    match k.lower(target) {
        Ok(_) => panic!("{} lowered for {target}", k.name()),
        Err(d) => d.to_string(),
    }
}

#[test]
fn cluster_barriers_are_refused_where_clusters_cannot_be() {
    let cfg = ClusterConfig::for_shape(5000, F32).expect("fits");
    let k = softmax::softmax_cluster(F32, 5000, cfg);
    for target in [Target::Cpu, Target::SM80, Target::GFX942] {
        let msg = refusal(&k, target);
        assert!(
            msg.contains("cluster_sync") && msg.contains("sm_90"),
            "{target}: {msg}"
        );
    }
    let cpu = k.compile(&Device::Cpu).err().expect("refused on the CPU");
    assert!(cpu.to_string().contains("cluster_sync"), "{cpu}");

    // A barrier with no cluster declared, clusters along dim 1, too large, a grid that is not
    // whole clusters, a persistent kernel, and warp specialization asked for.
    let build = |dim: usize, size: u32, grid0: i64, persistent: bool, ws: bool| {
        Kernel::build("cluster_misuse", |k| {
            let m = k.dim("M");
            let x = k.output("X", (&m, 64), F32);
            k.launch([Expr::int(grid0), m.clone()], 128, |t, [bx, by]| {
                if size > 0 {
                    t.cluster(dim, size);
                }
                if persistent {
                    t.persistent(4);
                }
                if ws {
                    t.warp_specialize(true);
                }
                let f = t.alloc_fragment_named("f", [1, 8], F32);
                t.fill(&f, 1.0);
                t.cluster_sync();
                t.copy(&f, x.tile((&by, &bx * 8)));
            });
        })
    };
    for (k, want) in [
        (build(0, 0, 8, false, false), "runs no clusters"),
        (build(1, 2, 8, false, false), "grid dim 1"),
        (build(0, 16, 16, false, false), "at most 8"),
        (build(0, 4, 6, false, false), "multiple of the cluster size"),
        (build(0, 4, 8, true, false), "persistent"),
        (build(0, 4, 8, false, true), "warp specialization"),
    ] {
        let msg = refusal(&k, Target::SM90);
        assert!(msg.contains(want), "expected `{want}` in: {msg}");
    }
}

#[test]
fn cluster_configs_cover_the_row() {
    for cols in [1i64, 1000, 4096, 32000, 128256, 200_000, 262_144] {
        let cfg = ClusterConfig::for_shape(cols, BF16).expect("fits");
        let w = cfg.width(cols);
        assert!(w * i64::from(cfg.blocks) >= cols, "{cols}");
        assert!(
            w / i64::from(cfg.threads) <= ClusterConfig::MAX_PER_THREAD_UNCAPPED,
            "{cols}"
        );
        assert_eq!(w % (i64::from(cfg.threads) * 8), 0, "{cols}");
    }
    assert_eq!(ClusterConfig::for_shape(262_145, BF16), None);
    // The measured choice (H100): 512 threads capped at 40 registers, three blocks an SM.
    assert_eq!(
        ClusterConfig::for_shape(128256, BF16),
        Some(ClusterConfig {
            blocks: 8,
            threads: 512,
            blocks_per_sm: 3,
        })
    );
    // f32 rows take twice the registers: two blocks.
    assert_eq!(
        ClusterConfig::for_shape(128256, F32).map(|c| c.blocks_per_sm),
        Some(2)
    );
    // 64 a thread: two blocks where the row fills the cluster, none where the last block masks.
    let caps = |cols| ClusterConfig::for_shape(cols, BF16).map(|c| c.blocks_per_sm);
    assert_eq!(caps(262_144), Some(2));
    assert_eq!(caps(200_000), Some(1));
    // The softmax's statistics need more: two blocks for f16 rows and for rows that fill
    // the cluster at 32 a thread, where three spilled; bf16 128256 keeps three.
    let softmax_caps = |cols, dt| ClusterConfig::for_softmax(cols, dt).map(|c| c.blocks_per_sm);
    assert_eq!(softmax_caps(128_256, BF16), Some(3));
    assert_eq!(softmax_caps(128_256, F16), Some(2));
    assert_eq!(softmax_caps(131_072, BF16), Some(2));
    assert_eq!(caps(131_072), Some(3));
}
