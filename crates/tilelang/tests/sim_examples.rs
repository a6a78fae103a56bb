//! The GPU lowering of every example, run in the simulator at small odd shapes, agrees with the
//! CPU backend on the same inputs — and the simulator finds no race, stale cp.async read or
//! uninitialized shared read on the way.

use tilelang::kernels::{elementwise, flash_attention, fp8_gemm, gemm, rmsnorm, softmax};
use tilelang::prelude::*;
use tilelang::runtime::rel_err;
use tilelang::Target;
use tl_sim::{SimArg, SimOptions};

/// Run `k` on the CPU backend and in the simulator (lowered for `target`) with the same
/// random inputs; return the largest relative difference over the outputs.
fn sim_vs_cpu(k: &Kernel, target: Target, shapes: &[Vec<usize>], seed: u64) -> f64 {
    let lowered = k
        .lower(target)
        .unwrap_or_else(|d| panic!("{} for {target}: {d}", k.name()));
    sim_lowered_vs_cpu(k, &lowered, target, shapes, seed)
}

/// As [`sim_vs_cpu`], for `lowered`, a variant of `k` lowered for `target`.
fn sim_lowered_vs_cpu(
    k: &Kernel,
    lowered: &tilelang::ir::Kernel,
    target: Target,
    shapes: &[Vec<usize>],
    seed: u64,
) -> f64 {
    let ir = k.ir();
    let dev = Device::Cpu;
    let tensors: Vec<Tensor> = ir
        .tensors()
        .zip(shapes)
        .enumerate()
        .map(|(i, ((b, _), s))| Tensor::randn(s, b.dtype(), seed + i as u64, &dev).expect("tensor"))
        .collect();
    let exe = k
        .compile(&dev)
        .unwrap_or_else(|e| panic!("{}: {e}", k.name()));
    let refs: Vec<&Tensor> = tensors.iter().collect();
    exe.run(&refs).expect("cpu run");
    let mut args: Vec<SimArg> = ir
        .tensors()
        .zip(shapes)
        .enumerate()
        .map(|(i, ((b, role), s))| {
            let fresh = Tensor::randn(s, b.dtype(), seed + i as u64, &dev).expect("tensor");
            let mut v = fresh.to_f64_vec().expect("values");
            if role != tilelang::ir::Role::Input {
                // Poison outputs: every element must be written.
                v.iter_mut().for_each(|x| *x = f64::NAN);
            }
            SimArg::tensor(b.dtype(), s, &v)
        })
        .collect();
    let report = tl_sim::run(lowered, &mut args, &SimOptions::default())
        .unwrap_or_else(|e| panic!("{} in the simulator ({target}): {e}\n{lowered}", k.name()));
    assert!(report.blocks > 0);
    let mut worst: f64 = 0.0;
    for (((b, role), arg), t) in ir.tensors().zip(&args).zip(&tensors) {
        if role == tilelang::ir::Role::Input {
            continue;
        }
        let got = arg.to_f64(b.dtype());
        let want = t.to_f64_vec().expect("cpu output");
        let e = rel_err(&got, &want).expect("same size");
        worst = worst.max(e);
    }
    worst
}

#[test]
fn elementwise_in_sim() {
    let k = elementwise::add_relu(BF16, 256, 128);
    let e = sim_vs_cpu(&k, Target::SM80, &[vec![1000], vec![1000], vec![1000]], 1);
    assert!(e < 1e-6, "{e}");
    let k = elementwise::add_relu_2d(BF16, 256, 128);
    for target in [Target::SM80, Target::SM90, Target::GFX950] {
        let e = sim_vs_cpu(
            &k,
            target,
            &[vec![3, 1001], vec![3, 1001], vec![3, 1001]],
            1,
        );
        assert!(e < 1e-6, "2-D on {target}: {e}");
    }
}

#[test]
fn softmax_and_rmsnorm_in_sim() {
    let cfg = softmax::RowConfig {
        rows: 2,
        cols: 256,
        threads: 64,
    };
    for k in [
        softmax::softmax(F32, cfg),
        rmsnorm::rmsnorm(F32, cfg),
        softmax::softmax(BF16, cfg),
    ] {
        // 600 columns: two full chunks and a tail; 5 rows: a partial block of rows.
        let e = sim_vs_cpu(&k, Target::SM80, &[vec![5, 600], vec![5, 600]], 2);
        assert!(e < 1e-5, "{}: {e}", k.name());
    }
}

#[test]
fn gemm_in_sim() {
    let cfg = gemm::GemmConfig::tiles(32, 32, 16, 2, 64);
    for (layout, dt) in [
        (gemm::Layout::NT, BF16),
        (gemm::Layout::NN, F32),
        (gemm::Layout::TN, F16),
    ] {
        let k = gemm::gemm(layout, dt, F32, cfg);
        let (m, n, kk) = (45, 37, 40);
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
        let e = sim_vs_cpu(&k, Target::SM80, &[a, b, vec![m, n]], 3);
        assert!(e < 1e-5, "{} {dt}: {e}", k.name());
    }
    // Blocks rasterized in panels of 2 block-rows over a 3 x 5 grid (the last panel is short).
    let k = gemm::gemm(
        gemm::Layout::NT,
        BF16,
        F32,
        gemm::GemmConfig { panel: 2, ..cfg },
    );
    let (m, n, kk) = (150, 90, 40);
    let e = sim_vs_cpu(&k, Target::SM80, &[vec![m, kk], vec![n, kk], vec![m, n]], 3);
    assert!(e < 1e-5, "rasterized gemm: {e}");
}

#[test]
fn tensor_core_gemm_in_sim() {
    // 4 warps (2x2 or 4x1), ldmatrix (plain and .trans) from swizzled shared tiles, mma.sync.
    let cfg = gemm::GemmConfig::tiles(64, 64, 32, 3, 128);
    for layout in [gemm::Layout::NT, gemm::Layout::NN, gemm::Layout::TN] {
        let k = gemm::gemm(layout, BF16, F32, cfg);
        let (m, n, kk) = (70, 66, 100);
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
        let e = sim_vs_cpu(&k, Target::SM80, &[a, b, vec![m, n]], 5);
        assert!(e < 1e-5, "{}: {e}", k.name());
    }
}

#[test]
fn tensor_core_flash_attention_in_sim() {
    // Both gemms on tensor cores, P·V with P from registers.
    let cfg = flash_attention::AttnConfig::tiles(64, 32, 2, 128);
    for causal in [false, true] {
        let k = flash_attention::flash_attention(BF16, 64, causal, cfg);
        let s = vec![1, 1, 70, 64];
        let e = sim_vs_cpu(
            &k,
            Target::SM80,
            &[s.clone(), s.clone(), s.clone(), s, vec![1, 1, 70]],
            6,
        );
        println!("tensor-core attention causal={causal}: rel err {e:.2e}");
        assert!(e < 1e-2, "causal={causal}: {e}");
    }
}

#[test]
fn flash_attention_in_sim() {
    let cfg = flash_attention::AttnConfig::tiles(16, 16, 2, 64);
    for causal in [false, true] {
        let k = flash_attention::flash_attention(F32, 32, causal, cfg);
        let s = vec![1, 2, 37, 32];
        let e = sim_vs_cpu(
            &k,
            Target::SM80,
            &[s.clone(), s.clone(), s.clone(), s, vec![1, 2, 37]],
            4,
        );
        assert!(e < 1e-5, "causal={causal}: {e}");
    }
}

// ----- planted bugs: the simulator must catch each one in real lowered kernels -----

use tilelang::ir::{Expr, ExprKind, Intrinsic, Stmt, StmtKind};

/// Drop every statement `drop` matches from a statement tree.
fn remove(s: &Stmt, drop: &dyn Fn(&Stmt) -> bool) -> Stmt {
    s.map_post(&mut |st| match st.kind {
        StmtKind::Seq(v) => Stmt::seq(v.into_iter().filter(|x| !drop(x)).collect(), st.span),
        k => Stmt::new(k, st.span),
    })
}

fn is_call(s: &Stmt, pred: &dyn Fn(&Intrinsic) -> bool) -> bool {
    matches!(&s.kind, StmtKind::Eval(e) if matches!(e.kind(), ExprKind::Call(op, _) if pred(op)))
}

/// Run a (possibly broken) lowered kernel on fresh inputs; Ok(max relative error vs the CPU
/// backend) or the simulator's error text.
fn run_broken(
    k: &Kernel,
    lowered: &tilelang::ir::Kernel,
    shapes: &[Vec<usize>],
) -> Result<f64, String> {
    let ir = k.ir();
    let dev = Device::Cpu;
    let tensors: Vec<Tensor> = ir
        .tensors()
        .zip(shapes)
        .enumerate()
        .map(|(i, ((b, _), s))| Tensor::randn(s, b.dtype(), 10 + i as u64, &dev).expect("tensor"))
        .collect();
    let refs: Vec<&Tensor> = tensors.iter().collect();
    k.compile(&dev).expect("cpu").run(&refs).expect("cpu run");
    let mut args: Vec<SimArg> = ir
        .tensors()
        .zip(shapes)
        .enumerate()
        .map(|(i, ((b, _), s))| {
            let t = Tensor::randn(s, b.dtype(), 10 + i as u64, &dev).expect("tensor");
            SimArg::tensor(b.dtype(), s, &t.to_f64_vec().expect("values"))
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

fn small_gemm() -> (Kernel, Vec<Vec<usize>>) {
    let cfg = gemm::GemmConfig::tiles(32, 32, 16, 3, 64);
    (
        gemm::gemm(gemm::Layout::NN, F32, F32, cfg),
        vec![vec![32, 64], vec![64, 32], vec![32, 32]],
    )
}

#[test]
fn planted_missing_cp_async_wait_is_caught() {
    let (k, shapes) = small_gemm();
    let low = k.lower(Target::SM80).expect("lowers");
    assert!(run_broken(&k, &low, &shapes).expect("correct kernel runs") < 1e-5);
    let broken = low.with_body(remove(&low.body, &|s| {
        is_call(s, &|op| matches!(op, Intrinsic::CpAsyncWait { .. }))
    }));
    match run_broken(&k, &broken, &shapes) {
        Err(e) => assert!(
            e.contains("cp.async") || e.contains("stale") || e.contains("race"),
            "{e}"
        ),
        Ok(err) => assert!(err > 1e-3, "a dropped wait went unnoticed (error {err})"),
    }
}

#[test]
fn planted_missing_barrier_is_caught() {
    let cfg = softmax::RowConfig {
        rows: 1,
        cols: 256,
        threads: 64,
    };
    let k = softmax::softmax(F32, cfg);
    let shapes = vec![vec![3, 300], vec![3, 300]];
    let low = k.lower(Target::SM80).expect("lowers");
    assert!(run_broken(&k, &low, &shapes).expect("correct kernel runs") < 1e-5);
    let broken = low.with_body(remove(&low.body, &|s| {
        is_call(s, &|op| *op == Intrinsic::SyncThreads)
    }));
    let e = run_broken(&k, &broken, &shapes).expect_err("a removed barrier must be reported");
    assert!(e.contains("race"), "{e}");
    assert!(
        e.contains("softmax.rs"),
        "the report names the kernel's source line: {e}"
    );
}

#[test]
fn planted_wrong_thread_index_is_caught() {
    let (k, shapes) = small_gemm();
    let low = k.lower(Target::SM80).expect("lowers");
    // Every thread computes with half its index: two threads write each element.
    fn halve(e: &Expr) -> Expr {
        let e2 = e.map_children(&mut |c| halve(c));
        if matches!(e2.kind(), ExprKind::Call(Intrinsic::ThreadIdx, _)) {
            e2.floordiv(2)
        } else {
            e2
        }
    }
    let broken = low.with_body(low.body.map_exprs(&mut |e| halve(e)));
    match run_broken(&k, &broken, &shapes) {
        Err(e) => assert!(e.contains("race") || e.contains("uninitialized"), "{e}"),
        Ok(err) => assert!(
            err > 1e-3,
            "a wrong thread index went unnoticed (error {err})"
        ),
    }
}

/// Column sums with atomics (every block adds its tile into one output row) and a row-wise
/// cumsum of a fragment: the GPU lowering of both matches the CPU backend in the simulator.
#[test]
fn cumsum_and_atomic_add_in_sim() {
    let k = Kernel::build("scan_and_sum", |k| {
        let m = k.dim("M");
        let x = k.input("X", (&m, 64), F32);
        let scan = k.output("SCAN", (&m, 64), F32);
        let colsum = k.inout("COLSUM", [1, 64], F32);
        k.launch([ceildiv(&m, 16)], 64, |t, [bx]| {
            let f = t.alloc_fragment([16, 64], F32);
            let c = t.alloc_fragment([16, 64], F32);
            let s = t.alloc_shared([16, 64], F32);
            t.copy(x.tile((&bx * 16, 0)), &f);
            t.cumsum(&f, &c, 1);
            t.copy(&c, scan.tile((&bx * 16, 0)));
            t.copy(&f, &s);
            t.serial(16, |t, r| {
                t.atomic_add(colsum.tile((0, 0)), s.region((&r, 0), (1, 64)));
            });
        });
    });
    // 40 rows: the last block is a partial tile (rows past the end read as zeros).
    let shapes = [vec![40, 64], vec![40, 64], vec![1, 64]];
    let dev = Device::Cpu;
    let x = Tensor::randn(&shapes[0], F32, 9, &dev).expect("x");
    let (s_cpu, c_cpu) = (
        Tensor::zeros(&shapes[1], F32, &dev).expect("s"),
        Tensor::zeros(&shapes[2], F32, &dev).expect("c"),
    );
    k.compile(&dev)
        .expect("cpu")
        .run(&[&x, &s_cpu, &c_cpu])
        .expect("cpu run");
    let sim = Device::SIM;
    let xs = Tensor::from_f64(&shapes[0], F32, &x.to_f64_vec().expect("x"), &sim).expect("x");
    let (s_sim, c_sim) = (
        Tensor::zeros(&shapes[1], F32, &sim).expect("s"),
        Tensor::zeros(&shapes[2], F32, &sim).expect("c"),
    );
    k.compile(&sim)
        .expect("lowers")
        .run(&[&xs, &s_sim, &c_sim])
        .expect("simulator run");
    let e1 = rel_err(
        &s_sim.to_f64_vec().expect("s"),
        &s_cpu.to_f64_vec().expect("s"),
    )
    .expect("size");
    let e2 = rel_err(
        &c_sim.to_f64_vec().expect("c"),
        &c_cpu.to_f64_vec().expect("c"),
    )
    .expect("size");
    assert!(
        e1 < 1e-6 && e2 < 1e-5,
        "scan {e1:.2e}, column sums {e2:.2e}"
    );
    // And against the definition.
    let xv = x.to_f64_vec().expect("x");
    let want: Vec<f64> = (0..64)
        .map(|j| (0..40).map(|i| xv[i * 64 + j]).sum())
        .collect();
    assert!(rel_err(&c_sim.to_f64_vec().expect("c"), &want).expect("size") < 1e-5);
}

#[test]
fn wgmma_gemm_in_sim() {
    // Hopper's warpgroup MMA: descriptors into 128-byte-swizzled K-major tiles, results held
    // until wgmma.wait_group; one and two warpgroups, tails in M, N and K, a 3-stage pipeline.
    for (bm, bn, bk, threads, (m, n, kk)) in [
        (64, 64, 64, 128, (100, 70, 150)),
        (128, 128, 64, 256, (130, 200, 90)),
        // 128-deep k tiles: two 64-column blocks per row of the operand tiles.
        (64, 64, 128, 128, (70, 90, 300)),
    ] {
        let cfg = gemm::GemmConfig {
            instruction: Some(GemmInstruction::Wgmma),
            ..gemm::GemmConfig::tiles(bm, bn, bk, 3, threads)
        };
        let k = gemm::gemm(gemm::Layout::NT, BF16, F32, cfg);
        let text = k.lower(Target::SM90).expect("lowers").to_string();
        assert!(text.contains("wgmma_m64n"), "{text}");
        let e = sim_vs_cpu(&k, Target::SM90, &[vec![m, kk], vec![n, kk], vec![m, n]], 5);
        assert!(e < 1e-5, "wgmma gemm {bm}x{bn}: {e}");
        // NN: B stored [K, N] is MN-major, read in 64-column blocks; TN: A ([K, M]) too.
        for (layout, a, b, tag) in [
            (gemm::Layout::NN, vec![m, kk], vec![kk, n], "k16_bf16_tb"),
            (gemm::Layout::TN, vec![kk, m], vec![kk, n], "k16_bf16_ta_tb"),
        ] {
            let k = gemm::gemm(layout, BF16, F32, cfg);
            let text = k.lower(Target::SM90).expect("lowers").to_string();
            assert!(text.contains(tag), "{text}");
            let e = sim_vs_cpu(&k, Target::SM90, &[a, b, vec![m, n]], 5);
            assert!(e < 1e-5, "wgmma {} gemm {bm}x{bn}: {e}", layout.name());
        }
    }
}

#[test]
fn fp8_wgmma_gemm_in_sim() {
    // fp8 on Hopper's warpgroup MMA: k32 steps over 128-byte rows of 128 elements, e4m3 and
    // e5m2 (and the mix), per-tensor scales with and without promotion, per-block scales
    // (one 128-column scale block per k tile); 128- and 256-deep k tiles; tails in M, N, K.
    use fp8_gemm::{Fp8Gemm, Fp8Scaling};
    let (m, n, kk) = (100, 200, 300);
    for (a, b, scaling, promote, bk, tag) in [
        // Promotion hidden under the next wgmma: two partials, wg_wait(1), wait_wgmma(0).
        (F8E4M3, F8E5M2, Fp8Scaling::Tensor, true, 0, "wgmma_wait<1>"),
        (F8E4M3, F8E4M3, Fp8Scaling::Tensor, false, 128, "k32_e4m3"),
        (F8E4M3, F8E4M3, Fp8Scaling::Tensor, true, 128, "k32_e4m3"),
        // 256-deep k tiles (two 128-byte column blocks per row), promoted every 256 of K.
        (F8E4M3, F8E4M3, Fp8Scaling::Tensor, true, 256, "k32_e4m3"),
        (
            F8E5M2,
            F8E4M3,
            Fp8Scaling::Tensor,
            true,
            128,
            "k32_e5m2_e4m3",
        ),
        (F8E4M3, F8E4M3, Fp8Scaling::Blocks, true, 128, "k32_e4m3"),
        (
            F8E4M3,
            F8E5M2,
            Fp8Scaling::Blocks,
            true,
            128,
            "k32_e4m3_e5m2",
        ),
    ] {
        let spec = Fp8Gemm {
            a,
            b,
            out: F32,
            scaling,
            promote,
            overlap_promotion: bk == 0,
        };
        let cfg = gemm::GemmConfig {
            instruction: Some(GemmInstruction::Wgmma),
            ..gemm::GemmConfig::tiles(64, 128, bk.max(128), 3, 128)
        };
        spec.check_tiles(&cfg).expect("tiles");
        let k = fp8_gemm::fp8_gemm(spec, cfg);
        let text = k.lower(Target::SM90).expect("lowers").to_string();
        assert!(text.contains(tag), "{tag}: {text}");
        let shapes = spec.tensor_shapes(m, n, kk);
        let e = sim_vs_cpu(&k, Target::SM90, &shapes, 13);
        assert!(
            e < 1e-5,
            "fp8 gemm {a}x{b} {scaling:?} promote={promote}: {e}"
        );
    }
}

#[test]
fn fp8_fast_accumulation_default_in_sim() {
    // Fast accumulation at K >= 4096 takes the bf16 GEMM's arrangement (a producer warpgroup
    // of 56 registers, a persistent grid, the chunked TMA-store epilogue beside 4 stages);
    // run with partial tiles in M and N and a grid of 3 blocks for 4 tiles, in the variant for
    // 16-byte rows (the one that copies by TMA and specializes).
    use fp8_gemm::{Fp8Gemm, Fp8Scaling};
    let spec = Fp8Gemm {
        a: F8E4M3,
        b: F8E4M3,
        out: BF16,
        scaling: Fp8Scaling::Tensor,
        promote: false,
        overlap_promotion: false,
    };
    let long = spec.hopper_tiles_for(4096);
    assert_eq!(
        (
            long.warp_specialize,
            long.persistent,
            long.producer_registers
        ),
        (Some(true), Some(0), Some(56))
    );
    for (m, n) in [(150usize, 264usize), (130, 392)] {
        let cfg = gemm::GemmConfig {
            persistent: Some(3),
            ..long
        };
        spec.check_tiles(&cfg).expect("tiles");
        let k = fp8_gemm::fp8_gemm(spec, cfg);
        let low = k.lower_aligned(Target::SM90).expect("lowers");
        assert!(low.attrs.warp_specialized.is_some(), "{low}");
        // The tiles are K = 4096's; the kernel runs the same at a shorter K.
        let shapes = spec.tensor_shapes(m, n, 640);
        let e = sim_lowered_vs_cpu(&k, &low, Target::SM90, &shapes, 23);
        assert!(e < 1e-3, "fp8 fast accumulation {m}x{n}x640: {e}");
    }
}

/// The fp8 per-tensor promoted GEMM as its long-K Hopper default runs it — a producer
/// warpgroup, 256-deep k tiles, persistent blocks looping over the tiles — with fewer blocks
/// than tiles (each block takes two rounds) and tails in M, N and K.
#[test]
fn fp8_promoted_gemm_warp_specialized_persistent_in_sim() {
    use fp8_gemm::{Fp8Gemm, Fp8Scaling};
    let spec = Fp8Gemm {
        a: F8E4M3,
        b: F8E4M3,
        out: BF16,
        scaling: Fp8Scaling::Tensor,
        promote: true,
        overlap_promotion: false,
    };
    let long = spec.hopper_tiles();
    assert_eq!(
        (long.warp_specialize, long.persistent),
        (Some(true), Some(0))
    );
    // Also in clusters of 2 along M (B multicast; 4 blocks: two clusters).
    for (blocks, cluster) in [(3, 1), (4, 2)] {
        let cfg = gemm::GemmConfig {
            persistent: Some(blocks),
            cluster,
            ..long
        };
        spec.check_tiles(&cfg).expect("tiles");
        let k = fp8_gemm::fp8_gemm(spec, cfg);
        let low = k.lower_aligned(Target::SM90).expect("lowers");
        assert!(low.attrs.warp_specialized.is_some(), "{low}");
        assert_eq!(
            low.attrs.cluster.map(|c| c.size),
            (cluster > 1).then_some(cluster)
        );
        // Rows of 16-byte multiples (K = 600), so the launch takes that (TMA) variant.
        let (m, n, kk) = (150, 300, 600);
        let e = sim_vs_cpu(&k, Target::SM90, &spec.tensor_shapes(m, n, kk), 21);
        // bf16 out: the two sums round apart where their order flips a last bit (a wrong tile
        // or round would be off by the values themselves).
        assert!(
            e < 1e-3,
            "fp8 promoted, specialized, persistent, cluster {cluster}: {e}"
        );
    }
}

/// A bf16 NT GEMM whose gemm leaves its wgmma pending (`wg_wait(w)`), in a pipelined or a
/// serial loop, optionally followed by `wait_wgmma(n)` in the body and after the loop.
fn wg_wait_gemm(pipelined: bool, w: i32, in_body: Option<u32>, after: bool) -> Kernel {
    let (bm, bn, bk) = (64, 64, 64);
    Kernel::build("wg_wait_gemm", |k| {
        let (m, n, kd) = (k.dim("M"), k.dim("N"), k.dim("K"));
        let a = k.input("A", [&m, &kd], BF16);
        let b = k.input("B", [&n, &kd], BF16);
        let c = k.output("C", [&m, &n], F32);
        k.launch([ceildiv(&n, bn), ceildiv(&m, bm)], 128, |t, [bx, by]| {
            let a_s = t.alloc_shared([bm, bk], BF16);
            let b_s = t.alloc_shared([bn, bk], BF16);
            let acc = t.alloc_fragment([bm, bn], F32);
            t.clear(&acc);
            let body = |t: &mut TileScope, ko: Expr| {
                t.copy(a.tile([&by * bm, &ko * bk]), &a_s);
                t.copy(b.tile([&bx * bn, &ko * bk]), &b_s);
                // wgmma on sm_90a (the compiler's choice for these tiles).
                t.gemm(&a_s, &b_s, &acc).transpose_b().wg_wait(w);
                if let Some(n) = in_body {
                    t.wait_wgmma(n);
                }
            };
            if pipelined {
                t.pipelined(ceildiv(&kd, bk), 3, body);
            } else {
                t.serial(ceildiv(&kd, bk), body);
            }
            if after {
                t.wait_wgmma(0);
            }
            t.copy(&acc, c.tile([&by * bm, &bx * bn]));
        });
    })
}

#[test]
fn wg_wait_and_wait_wgmma_in_sim() {
    // TileLang's asynchronous gemm: correct where the waits retire what is read, reported
    // where they do not.
    let shapes = [vec![70, 300], vec![90, 300], vec![70, 90]];
    // Left pending, retired at the end of each iteration, or one group across iterations
    // (the pipeline then refills stages a step later) and the rest after the loop.
    for (pipelined, w, in_body) in [(true, -1, Some(0)), (true, 1, None), (false, -1, Some(0))] {
        let k = wg_wait_gemm(pipelined, w, in_body, true);
        let e = sim_vs_cpu(&k, Target::SM90, &shapes, 21);
        assert!(e < 1e-5, "pipelined={pipelined} wg_wait={w}: {e}");
        // Synchronous elsewhere: the waits go.
        assert!(sim_vs_cpu(&k, Target::SM80, &shapes, 21) < 1e-5);
    }
    // Every group left pending in a pipelined loop: refused when lowering, with the fix.
    let k = wg_wait_gemm(true, -1, None, true);
    let err = k
        .lower(Target::SM90)
        .expect_err("too many groups in flight")
        .to_string();
    assert!(err.contains("wait_wgmma(1)"), "{err}");
    // A serial loop overwrites the tiles under the pending wgmma: the simulator says so.
    let k = wg_wait_gemm(false, -1, None, true);
    let lowered = k.lower(Target::SM90).expect("lowers");
    let err = run_broken(&k, &lowered, &shapes).expect_err("a race");
    assert!(err.contains("wgmma"), "{err}");
    // One group still pending at the loop's end, no wait of the kernel's own: the pipeline
    // drains it after the loop, before the accumulator is read.
    let k = wg_wait_gemm(true, 1, None, false);
    assert!(sim_vs_cpu(&k, Target::SM90, &shapes, 21) < 1e-5);
}

#[test]
fn conditional_pending_wgmma_in_a_pipeline_is_refused() {
    // A gemm under a condition may not issue in some iteration; the group left pending would
    // then be an older one, reading a stage being refilled (found by review: the simulator
    // reported the race). Refused when lowering, with the fix.
    let k = Kernel::build("cond_wg_wait", |k| {
        let (m, n, kd) = (k.dim("M"), k.dim("N"), k.dim("K"));
        let a = k.input("A", [&m, &kd], BF16);
        let b = k.input("B", [&n, &kd], BF16);
        let c = k.output("C", [&m, &n], F32);
        k.launch([ceildiv(&n, 64), ceildiv(&m, 64)], 128, |t, [bx, by]| {
            let a_s = t.alloc_shared([64, 64], BF16);
            let b_s = t.alloc_shared([64, 64], BF16);
            let acc = t.alloc_fragment([64, 64], F32);
            t.clear(&acc);
            t.pipelined(ceildiv(&kd, 64), 3, |t, ko| {
                t.copy(a.tile([&by * 64, &ko * 64]), &a_s);
                t.copy(b.tile([&bx * 64, &ko * 64]), &b_s);
                t.if_(ko.floormod(2).eq_(0), |t| {
                    t.gemm(&a_s, &b_s, &acc).transpose_b().wg_wait(-1);
                });
                t.wait_wgmma(1);
            });
            t.wait_wgmma(0);
            t.copy(&acc, c.tile([&by * 64, &bx * 64]));
        });
    });
    let err = k.lower(Target::SM90).expect_err("refused").to_string();
    assert!(err.contains("under a condition"), "{err}");
}

#[test]
fn softmax_with_fully_masked_spans_and_chunks() {
    // Masked logits (−inf) over a whole span of the split softmax, or the first chunk of the
    // chunked one, must add nothing, not turn the row into NaN (found by review).
    use softmax::SplitConfig;
    let (rows, cols) = (2, 6144);
    let mut x: Vec<f64> = (0..rows * cols)
        .map(|i| ((i * 37 % 101) as f64) / 50.0 - 1.0)
        .collect();
    for r in 0..rows {
        // Row 0: the middle span; row 1: the first span (and the chunked kernel's first chunk).
        let masked = if r == 0 { 2048..4096 } else { 0..2048 };
        for c in masked {
            x[r * cols + c] = f64::NEG_INFINITY;
        }
    }
    let want = tilelang::kernels::reference::softmax(&x, rows, cols);
    let dev = Device::Cpu;
    let xt = Tensor::from_f64(&[rows, cols], F32, &x, &dev).expect("x");
    let cfg = SplitConfig {
        span: 2048,
        chunk: 1024,
        threads: 128,
    };
    let spans = cfg.spans(cols);
    let pm = Tensor::zeros(&[rows, spans], F32, &dev).expect("pm");
    let ps = Tensor::zeros(&[rows, spans], F32, &dev).expect("ps");
    let y = Tensor::zeros(&[rows, cols], F32, &dev).expect("y");
    let stats = softmax::softmax_split_stats(F32, cfg);
    let apply = softmax::softmax_split_apply(F32, cfg);
    stats
        .compile(&dev)
        .expect("stats")
        .run(&[&xt, &pm, &ps])
        .expect("run");
    apply
        .compile(&dev)
        .expect("apply")
        .run(&[&xt, &pm, &ps, &y])
        .expect("run");
    let e = rel_err(&y.to_f64_vec().expect("y"), &want).expect("size");
    assert!(e < 1e-5, "split softmax with a masked span: {e}");
    let chunked = softmax::softmax(
        F32,
        softmax::RowConfig {
            rows: 1,
            cols: 2048,
            threads: 128,
        },
    );
    let y2 = Tensor::zeros(&[rows, cols], F32, &dev).expect("y");
    chunked
        .compile(&dev)
        .expect("chunked")
        .run(&[&xt, &y2])
        .expect("run");
    let e = rel_err(&y2.to_f64_vec().expect("y"), &want).expect("size");
    assert!(e < 1e-5, "chunked softmax with a masked first chunk: {e}");
    // The simulator (sm_90a) agrees.
    let mut args = vec![
        SimArg::tensor(F32, &[rows, cols], &x),
        SimArg::tensor(F32, &[rows, spans], &vec![0.0; rows * spans]),
        SimArg::tensor(F32, &[rows, spans], &vec![0.0; rows * spans]),
    ];
    tl_sim::run(
        &stats.lower(Target::SM90).expect("lowers"),
        &mut args,
        &SimOptions::default(),
    )
    .expect("sim stats");
    args.push(SimArg::tensor(
        F32,
        &[rows, cols],
        &vec![f64::NAN; rows * cols],
    ));
    tl_sim::run(
        &apply.lower(Target::SM90).expect("lowers"),
        &mut args,
        &SimOptions::default(),
    )
    .expect("sim apply");
    let e = rel_err(&args[3].to_f64(F32), &want).expect("size");
    assert!(
        e < 1e-5,
        "split softmax with a masked span in the simulator: {e}"
    );
}

#[test]
fn overlapped_wgmma_gemm_in_sim() {
    // Each k step's wgmma left in flight (wait_group 1) while the next step's tiles are awaited;
    // the pipeline refills a stage only once its wgmma has retired, which the simulator checks
    // (a shared write under an in-flight wgmma read is an error). 3 and 4 stages, all layouts.
    for stages in [3, 4] {
        let cfg = gemm::GemmConfig {
            instruction: Some(GemmInstruction::Wgmma),
            overlap: true,
            ..gemm::GemmConfig::tiles(64, 64, 64, stages, 128)
        };
        let (m, n, kk) = (70, 90, 330);
        for (layout, a, b) in [
            (gemm::Layout::NT, vec![m, kk], vec![n, kk]),
            (gemm::Layout::NN, vec![m, kk], vec![kk, n]),
            (gemm::Layout::TN, vec![kk, m], vec![kk, n]),
        ] {
            let k = gemm::gemm(layout, BF16, F32, cfg);
            let text = k.lower(Target::SM90).expect("lowers").to_string();
            assert!(text.contains("wgmma_wait<1>"), "{text}");
            let e = sim_vs_cpu(&k, Target::SM90, &[a, b, vec![m, n]], 9);
            assert!(
                e < 1e-5,
                "overlapped wgmma {} gemm, {stages} stages: {e}",
                layout.name()
            );
        }
    }
}

#[test]
fn wgmma_flash_attention_in_sim() {
    // Both attention gemms on wgmma: Q·Kᵀ from shared descriptors (K-major), P·V with P from
    // registers (the S accumulator cast to bf16) and V MN-major ([keys, d] in 64-column blocks,
    // so d = 128 exercises the leading-byte offset). Sequence tails and the causal diagonal.
    for (d, bn, threads, causal) in [
        (64, 64, 128, false),
        (64, 64, 128, true),
        (128, 32, 128, false),
        (128, 64, 256, true),
    ] {
        let cfg = flash_attention::AttnConfig {
            instruction: Some(GemmInstruction::Wgmma),
            ..flash_attention::AttnConfig::tiles(64 * (threads as i64 / 128), bn, 2, threads)
        };
        let k = flash_attention::flash_attention(BF16, d, causal, cfg);
        let text = k.lower(Target::SM90).expect("lowers").to_string();
        assert!(
            text.contains("_rs_tb"),
            "P·V is not a register-A, MN-major-B wgmma:\n{text}"
        );
        // The kernel asks for pairs of k steps per issue (`wgmma_batch 2`).
        assert!(text.contains("_tb_x2"), "{text}");
        let s = vec![1, 2, 83, d as usize];
        let e = sim_vs_cpu(
            &k,
            Target::SM90,
            &[s.clone(), s.clone(), s.clone(), s, vec![1, 2, 83]],
            7,
        );
        println!("wgmma attention d{d} bn{bn} causal={causal}: rel err {e:.2e}");
        assert!(e < 1e-2, "wgmma attention d{d} bn{bn} causal={causal}: {e}");
    }
}

/// The d128 Hopper attention (a producer warpgroup, 128-key tiles, FlashAttention-3's
/// overlap) on a persistent grid (`AttnConfig::persistent`): three blocks over the query tiles
/// of two heads, each taking several rounds; a sequence tail, causal and not. Q and the last
/// V tile are the producer's TMA loads (`pipeline::preload`): the consumers copy neither, wait
/// on each tile's barrier, and release both every round for the next round's loads (whose
/// phases the simulator checks); one block a tile likewise, without the releases.
#[test]
fn persistent_hopper_attention_in_sim() {
    for (causal, persistent) in [
        (false, Some(3)),
        (true, Some(3)),
        (false, None),
        (true, None),
    ] {
        let cfg = flash_attention::AttnConfig {
            persistent,
            ..flash_attention::AttnConfig::hopper_for(128, causal)
        };
        let k = flash_attention::flash_attention(BF16, 128, causal, cfg);
        let low = k.lower(Target::SM90).expect("lowers");
        assert_eq!(low.attrs.persistent_blocks, persistent, "{low}");
        let text = low.to_string();
        let lines = |a: &str, b: &str| {
            text.lines()
                .filter(|l| l.contains(a) && l.contains(b))
                .count()
        };
        for tile in ["Q_s[", "V_last["] {
            assert!(
                lines("tma_load", tile) >= 1,
                "{tile} is not loaded by TMA:\n{text}"
            );
            assert_eq!(
                lines("vec_copy", tile),
                0,
                "the consumers still copy {tile}:\n{text}"
            );
        }
        let releases = lines("mbarrier_arrive(", "_pre");
        assert_eq!(releases, if persistent.is_some() { 2 } else { 0 }, "{text}");
        let s = vec![1, 2, 300, 128];
        let e = sim_vs_cpu(
            &k,
            Target::SM90,
            &[s.clone(), s.clone(), s.clone(), s, vec![1, 2, 300]],
            17,
        );
        assert!(
            e < 1e-2,
            "attention causal={causal} persistent={persistent:?}: {e}"
        );
    }
}

/// FlashAttention-3's overlap inside a warpgroup (`AttnConfig::overlap_pv`): P·V of key tile
/// j − 1 left running while tile j's softmax is computed. Agrees with the CPU backend with one
/// key tile (the loop runs no step), with tails, causal or not; and the lowered loop really
/// leaves the gemms pending.
#[test]
fn wgmma_flash_attention_overlapping_pv_in_sim() {
    for (d, bn, threads, causal, seq) in [
        (64, 64, 128, false, 83),
        (64, 64, 128, true, 200),
        (128, 64, 256, false, 200),
        (128, 64, 256, true, 131),
        (64, 64, 128, false, 40),
    ] {
        let cfg = flash_attention::AttnConfig {
            instruction: Some(GemmInstruction::Wgmma),
            overlap_pv: true,
            ..flash_attention::AttnConfig::tiles(64 * (threads as i64 / 128), bn, 2, threads)
        };
        let k = flash_attention::flash_attention(BF16, d, causal, cfg);
        let text = k.lower(Target::SM90).expect("lowers").to_string();
        assert!(text.contains("wgmma_wait<1>"), "no pending P·V:\n{text}");
        let s = vec![1, 2, seq, d as usize];
        let e = sim_vs_cpu(
            &k,
            Target::SM90,
            &[s.clone(), s.clone(), s.clone(), s, vec![1, 2, seq]],
            7,
        );
        println!("overlapped attention d{d} bn{bn} causal={causal} S={seq}: rel err {e:.2e}");
        assert!(
            e < 1e-2,
            "overlapped attention d{d} bn{bn} causal={causal} S={seq}: {e}"
        );
    }
}

#[test]
fn planted_wgmma_bugs_are_caught() {
    let cfg = gemm::GemmConfig {
        instruction: Some(GemmInstruction::Wgmma),
        ..gemm::GemmConfig::tiles(64, 64, 64, 2, 128)
    };
    let k = gemm::gemm(gemm::Layout::NT, BF16, F32, cfg);
    let shapes = vec![vec![64, 128], vec![64, 128], vec![64, 64]];
    let low = k.lower(Target::SM90).expect("lowers");
    assert!(run_broken(&k, &low, &shapes).expect("correct kernel runs") < 1e-5);
    // No wait: the accumulator never receives the products.
    let no_wait = low.with_body(remove(&low.body, &|s| {
        is_call(s, &|op| matches!(op, Intrinsic::WgmmaWait { .. }))
    }));
    let err = run_broken(&k, &no_wait, &shapes).expect("runs");
    assert!(
        err > 0.5,
        "a dropped wgmma wait went unnoticed (error {err})"
    );
    // No barrier before the warpgroups read the tiles: a race with the copies into them.
    let no_barrier = low.with_body(remove(&low.body, &|s| {
        is_call(s, &|op| *op == Intrinsic::SyncThreads)
    }));
    let e = run_broken(&k, &no_barrier, &shapes).expect_err("a missing barrier must be reported");
    assert!(e.contains("race") || e.contains("stale"), "{e}");
    // No async-proxy fence: the wgmma may read what the generic proxy has not made visible.
    let no_fence = low.with_body(remove(&low.body, &|s| {
        is_call(s, &|op| *op == Intrinsic::FenceProxyAsync)
    }));
    let e = run_broken(&k, &no_fence, &shapes).expect_err("a missing proxy fence must be reported");
    assert!(e.contains("fence.proxy.async"), "{e}");
    // A wait that leaves the last wgmma in flight: the next iteration's cp.async refills the
    // stage it still reads.
    let loose_wait = low.with_body(low.body.map_post(&mut |st| match &st.kind {
        StmtKind::Eval(e) => match e.kind() {
            ExprKind::Call(Intrinsic::WgmmaWait { n: 0, pinned }, args) => Stmt::new(
                StmtKind::Eval(Expr::call(
                    Intrinsic::WgmmaWait {
                        n: 1,
                        pinned: *pinned,
                    },
                    args.clone(),
                    e.dtype(),
                )),
                st.span,
            ),
            _ => st,
        },
        _ => st,
    }));
    let long_k = vec![vec![64, 256], vec![64, 256], vec![64, 64]];
    let e = run_broken(&k, &loose_wait, &long_k)
        .expect_err("overwriting a stage an in-flight wgmma reads must be reported");
    assert!(e.contains("may still be reading it"), "{e}");
}

#[test]
fn persistent_gemm_in_sim() {
    // Fewer blocks than output tiles, each looping over tiles in rasterization order: 2 and 3
    // blocks over a 3 x 5 (mma.sync) or 2 x 3 (wgmma) tile grid, panels of 2 block-rows or
    // none, tails in M, N and K.
    for (blocks, panel) in [(2, 2), (3, 0)] {
        let cfg = gemm::GemmConfig {
            persistent: Some(blocks),
            panel,
            ..gemm::GemmConfig::tiles(32, 32, 32, 3, 128)
        };
        let k = gemm::gemm(gemm::Layout::NT, BF16, F32, cfg);
        let low = k.lower(Target::SM80).expect("lowers");
        assert_eq!(low.block_vars.len(), 1, "{low}");
        let (m, n, kk) = (150, 90, 70);
        let e = sim_vs_cpu(&k, Target::SM80, &[vec![m, kk], vec![n, kk], vec![m, n]], 9);
        assert!(
            e < 1e-5,
            "persistent gemm ({blocks} blocks, panel {panel}): {e}"
        );
        let wg = gemm::GemmConfig {
            persistent: Some(blocks),
            panel,
            instruction: Some(GemmInstruction::Wgmma),
            ..gemm::GemmConfig::tiles(64, 64, 64, 3, 128)
        };
        let k = gemm::gemm(gemm::Layout::NT, BF16, F32, wg);
        let (m, n, kk) = (130, 150, 90);
        let e = sim_vs_cpu(&k, Target::SM90, &[vec![m, kk], vec![n, kk], vec![m, n]], 9);
        assert!(
            e < 1e-5,
            "persistent wgmma gemm ({blocks} blocks, panel {panel}): {e}"
        );
    }
}

// ----- AMD (gfx950, gfx942): 64-lane waves, MFMA, direct-to-LDS buffer loads, vmcnt waits -----

const AMD: [Target; 2] = [Target::GFX950, Target::GFX942];

/// `sim_vs_cpu` for the variant specialized for aligned sizes (`lower_aligned`: on AMD the one
/// that copies global tiles to LDS with buffer loads).
fn sim_aligned_vs_cpu(k: &Kernel, target: Target, shapes: &[Vec<usize>], seed: u64) -> f64 {
    let lowered = k
        .lower_aligned(target)
        .unwrap_or_else(|d| panic!("{} (aligned) for {target}: {d}", k.name()));
    sim_lowered_vs_cpu(k, &lowered, target, shapes, seed)
}

fn gemm_shapes(layout: gemm::Layout, m: usize, n: usize, kk: usize) -> Vec<Vec<usize>> {
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

#[test]
fn amd_elementwise_in_sim() {
    for target in AMD {
        let k = elementwise::add_relu(BF16, 256, 256);
        let low = k.lower(target).expect("lowers");
        assert_eq!(low.attrs.warp_size, Some(64));
        let e = sim_vs_cpu(&k, target, &[vec![1000], vec![1000], vec![1000]], 1);
        assert!(e < 1e-6, "{target}: {e}");
        let e = sim_aligned_vs_cpu(&k, target, &[vec![1000], vec![1000], vec![1000]], 1);
        assert!(e < 1e-6, "{target} aligned: {e}");
    }
}

#[test]
fn amd_softmax_and_rmsnorm_in_sim() {
    for target in AMD {
        for threads in [128, 256] {
            let cfg = softmax::RowConfig {
                rows: 2,
                cols: 256,
                threads,
            };
            for k in [
                softmax::softmax(F32, cfg),
                rmsnorm::rmsnorm(F32, cfg),
                softmax::softmax(BF16, cfg),
            ] {
                let shapes = [vec![5, 600], vec![5, 600]];
                let e = sim_vs_cpu(&k, target, &shapes, 2);
                assert!(e < 1e-5, "{} {target} {threads} threads: {e}", k.name());
                let e = sim_aligned_vs_cpu(&k, target, &shapes, 2);
                assert!(
                    e < 1e-5,
                    "{} {target} {threads} threads aligned: {e}",
                    k.name()
                );
            }
        }
        // Whole rows in registers: reductions across 4 waves through LDS and LDS barriers.
        for (k, cols) in [
            (softmax::softmax_row(F32, 2000, 256), 2000),
            (rmsnorm::rmsnorm_row(BF16, 1000, 256), 1000),
        ] {
            let shapes = [vec![3, cols], vec![3, cols]];
            let text = k.lower(target).expect("lowers").to_string();
            assert!(text.contains("barrier_lds"), "{text}");
            let e = sim_vs_cpu(&k, target, &shapes, 2);
            assert!(e < 1e-5, "{} {target}: {e}", k.name());
            let e = sim_aligned_vs_cpu(&k, target, &shapes, 2);
            assert!(e < 1e-5, "{} {target} aligned: {e}", k.name());
        }
    }
}

#[test]
fn amd_gemm_in_sim() {
    for target in AMD {
        for (bm, bn) in [(64, 64), (128, 128)] {
            let cfg = gemm::GemmConfig::tiles(bm, bn, 64, 2, 256);
            for layout in [gemm::Layout::NT, gemm::Layout::NN, gemm::Layout::TN] {
                for out in [F32, BF16] {
                    let k = gemm::gemm(layout, BF16, out, cfg);
                    let tol = if out == F32 { 1e-5 } else { 1e-2 };
                    let what = format!("{} {target} {bm}x{bn} -> {out}", layout.name());
                    let e = sim_vs_cpu(&k, target, &gemm_shapes(layout, 70, 90, 200), 5);
                    assert!(e < tol, "{what}: {e}");
                    // The aligned variant: K and N (and, for TN, M) multiples of 8.
                    let m = if layout == gemm::Layout::TN { 72 } else { 70 };
                    let low = k.lower_aligned(target).expect("lowers");
                    let text = low.to_string();
                    assert!(text.contains("mfma_f32_"), "{what}:\n{text}");
                    // K-strided operands: read transposed from LDS on gfx950, stored
                    // K-interleaved by a transposing copy on gfx942.
                    if layout != gemm::Layout::NT {
                        let want = if target == Target::GFX950 {
                            "ds_read_tr16_b64"
                        } else {
                            "kt_rows"
                        };
                        assert!(text.contains(want), "{what}: no {want}");
                    }
                    let e = sim_aligned_vs_cpu(&k, target, &gemm_shapes(layout, m, 88, 200), 5);
                    assert!(e < tol, "{what} aligned: {e}");
                }
            }
        }
    }
    // The 32x32 MFMAs (their accumulator layout interleaves rows by 4 and 8).
    for (target, k) in [(Target::GFX950, 16), (Target::GFX942, 8)] {
        let shape = MfmaShape { m: 32, n: 32, k };
        let cfg = gemm::GemmConfig {
            instruction: Some(GemmInstruction::Mfma(shape)),
            ..gemm::GemmConfig::tiles(64, 64, 64, 2, 256)
        };
        for layout in [gemm::Layout::NT, gemm::Layout::NN] {
            let kern = gemm::gemm(layout, BF16, F32, cfg);
            let text = kern.lower(target).expect("lowers").to_string();
            assert!(text.contains(&format!("mfma_f32_32x32x{k}_bf16")), "{text}");
            let e = sim_vs_cpu(&kern, target, &gemm_shapes(layout, 70, 90, 200), 5);
            assert!(e < 1e-5, "{} {target} 32x32x{k}: {e}", layout.name());
            let e = sim_aligned_vs_cpu(&kern, target, &gemm_shapes(layout, 70, 88, 200), 5);
            assert!(
                e < 1e-5,
                "{} {target} 32x32x{k} aligned: {e}",
                layout.name()
            );
        }
    }
}

#[test]
fn amd_rasterized_gemm_in_sim() {
    // 6 x 5 blocks: the XCD remap over 8 dies (30 blocks, so dies get 4 or 3 of them), alone
    // and before a panel swizzle of 2 block-rows.
    for target in AMD {
        for panel in [0, 2] {
            let cfg = gemm::GemmConfig {
                panel,
                ..gemm::GemmConfig::tiles(64, 64, 64, 2, 256)
            };
            let k = gemm::gemm(gemm::Layout::NT, BF16, F32, cfg);
            let low = k.lower_aligned(target).expect("lowers");
            assert_eq!(low.attrs.xcd_remap, Some(8));
            assert_eq!(low.attrs.swizzle_panel, (panel > 0).then_some(panel));
            let shapes = gemm_shapes(gemm::Layout::NT, 330, 376, 64);
            let e = sim_aligned_vs_cpu(&k, target, &shapes, 8);
            assert!(e < 1e-5, "{target} panel {panel}: {e}");
        }
    }
}

#[test]
fn amd_flash_attention_in_sim() {
    let cfg = flash_attention::AttnConfig::tiles(64, 64, 2, 256);
    for target in AMD {
        for causal in [false, true] {
            let k = flash_attention::flash_attention(BF16, 64, causal, cfg);
            let s = vec![1, 1, 70, 64];
            let shapes = [s.clone(), s.clone(), s.clone(), s, vec![1, 1, 70]];
            let e = sim_vs_cpu(&k, target, &shapes, 6);
            assert!(e < 1e-2, "{target} causal={causal}: {e}");
            let s = vec![1, 1, 84, 64];
            let shapes = [s.clone(), s.clone(), s.clone(), s, vec![1, 1, 84]];
            let e = sim_aligned_vs_cpu(&k, target, &shapes, 6);
            assert!(e < 1e-2, "{target} causal={causal} aligned: {e}");
        }
    }
}

#[test]
fn amd_planted_bugs_are_caught() {
    let cfg = gemm::GemmConfig::tiles(64, 64, 64, 2, 256);
    let k = gemm::gemm(gemm::Layout::NT, BF16, F32, cfg);
    let shapes = gemm_shapes(gemm::Layout::NT, 64, 64, 256);
    let is_wait = |op: &Intrinsic| matches!(op, Intrinsic::WaitVmcnt { .. });
    for target in AMD {
        let low = k.lower_aligned(target).expect("lowers");
        let text = low.to_string();
        assert!(
            text.contains("buffer_load_lds") && text.contains("wait_vmcnt"),
            "{text}"
        );
        assert!(run_broken(&k, &low, &shapes).expect("correct kernel runs") < 1e-5);
        // No vmcnt waits: the MFMA operands are read from tiles still in flight.
        let no_wait = low.with_body(remove(&low.body, &|s| is_call(s, &is_wait)));
        let e = run_broken(&k, &no_wait, &shapes).expect_err("a dropped wait must be reported");
        assert!(
            e.contains("buffer load") && e.contains("wait_vmcnt"),
            "{target}: {e}"
        );
        // Waits that leave one more k step in flight than the pipeline allows.
        let loose = low.with_body(low.body.map_post(&mut |st| match &st.kind {
            StmtKind::Eval(e) => match e.kind() {
                ExprKind::Call(Intrinsic::WaitVmcnt { n }, args) if *n > 0 => Stmt::new(
                    StmtKind::Eval(Expr::call(
                        Intrinsic::WaitVmcnt { n: 2 * n },
                        args.clone(),
                        e.dtype(),
                    )),
                    st.span,
                ),
                _ => st,
            },
            _ => st,
        }));
        let e = run_broken(&k, &loose, &shapes).expect_err("a weak wait must be reported");
        assert!(e.contains("buffer load"), "{target}: {e}");
        // No LDS barrier before the refill: it overwrites the stage other waves still read.
        // (Each steady-state iteration starts with that barrier, then the refill's loads.)
        let is_load = |op: &Intrinsic| matches!(op, Intrinsic::BufferLoadLds { .. });
        let no_refill_barrier = low.with_body(low.body.map_post(&mut |st| {
            match st.kind {
                StmtKind::Seq(v)
                    if v.first()
                        .is_some_and(|x| is_call(x, &|op| *op == Intrinsic::BarrierLds))
                        && v.get(1).is_some_and(|x| {
                            let mut found = false;
                            x.walk(&mut |y| found |= is_call(y, &is_load));
                            found
                        }) =>
                {
                    Stmt::seq(v[1..].to_vec(), st.span)
                }
                kind => Stmt::new(kind, st.span),
            }
        }));
        let e = run_broken(&k, &no_refill_barrier, &shapes)
            .expect_err("a missing LDS barrier must be reported");
        assert!(
            e.contains("race") && e.contains("buffer_load_lds"),
            "{target}: {e}"
        );
        // The MFMA's A and B exchanged: the wrong product.
        let swapped = low.with_body(low.body.map_post(&mut |st| match &st.kind {
            StmtKind::Eval(e) => match e.kind() {
                ExprKind::Call(op @ Intrinsic::Mfma(_), a) if a.len() == 4 => Stmt::new(
                    StmtKind::Eval(Expr::call(
                        op.clone(),
                        vec![a[0].clone(), a[2].clone(), a[1].clone(), a[3].clone()],
                        e.dtype(),
                    )),
                    st.span,
                ),
                _ => st,
            },
            _ => st,
        }));
        let err = run_broken(&k, &swapped, &shapes).expect("runs");
        assert!(
            err > 0.1,
            "{target}: exchanged MFMA operands went unnoticed ({err})"
        );
    }
}

/// Sizes that break the 16-byte specialization run the variant of their alignment class: a
/// bf16 K of 204 is 8-byte aligned (8-byte cp.async on sm_90a), 202 4-byte, 201 element by
/// element; each matches the CPU backend, for every layout, on NVIDIA and AMD targets.
#[test]
fn alignment_class_variants_in_sim() {
    for target in [Target::Cuda { sm: 90 }, Target::GFX950] {
        let cfg = gemm::GemmConfig::tiles(64, 64, 64, 2, 256);
        for layout in [gemm::Layout::NT, gemm::Layout::NN, gemm::Layout::TN] {
            let k = gemm::gemm(layout, BF16, F32, cfg);
            let sim = Device::Sim(target);
            let exe = k.compile(&sim).unwrap_or_else(|e| panic!("{target}: {e}"));
            let cpu = k.compile(&Device::Cpu).expect("cpu");
            for kk in [200usize, 204, 202, 201] {
                let shapes = gemm_shapes(layout, 40, 72, kk);
                let mk = |dev: &Device| -> Vec<Tensor> {
                    shapes
                        .iter()
                        .enumerate()
                        .map(|(i, s)| {
                            let dt = if i == 2 { F32 } else { BF16 };
                            Tensor::randn(s, dt, 7 + i as u64, dev).expect("tensor")
                        })
                        .collect()
                };
                let (ts, tc) = (mk(&sim), mk(&Device::Cpu));
                exe.run(&ts.iter().collect::<Vec<_>>()).expect("sim run");
                cpu.run(&tc.iter().collect::<Vec<_>>()).expect("cpu run");
                let got = ts[2].to_f64_vec().expect("sim out");
                let want = tc[2].to_f64_vec().expect("cpu out");
                let err = got
                    .iter()
                    .zip(&want)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0, f64::max)
                    / want.iter().map(|b| b.abs()).fold(1e-30, f64::max);
                let what = format!("{} {target} K={kk}", layout.name());
                assert!(err < 1e-5, "{what}: {err}");
                // The variant that ran: vectors as wide as K's alignment allows.
                let args: Vec<_> = ts.iter().map(tilelang::runtime::Arg::Tensor).collect();
                let v = exe.variant_for(&args).expect("variant");
                let src = v.source().unwrap_or_default();
                // The variant names itself, and says when odd rows load from pitched copies.
                // (NT: K is the rows of both inputs.)
                if layout == gemm::Layout::NT {
                    let name = exe.variant(&args).expect("variant name");
                    let pitched = target.has_tma() && kk % 2 == 1;
                    assert_eq!(kk % 8 == 0, name.starts_with("aligned("), "{what}: {name}");
                    assert_eq!(pitched, name.ends_with("+pitched-tma"), "{what}: {name}");
                }
                if target.is_cuda() {
                    let want_copy = match kk % 8 {
                        // Hopper loads whole tiles by TMA: rows a multiple of 16 bytes
                        // directly, element-aligned ones (odd K) from pitched copies the
                        // runtime stages; 4- and 8-byte rows keep cp.async of that width.
                        0 | 1 | 3 | 5 | 7 if target.has_tma() => "tma_load<",
                        0 => "cp_async<16>",
                        4 => "cp_async<8>",
                        2 | 6 => "cp_async<4>",
                        _ => "",
                    };
                    if !want_copy.is_empty() && layout == gemm::Layout::NT {
                        assert!(src.contains(want_copy), "{what}: no {want_copy}");
                    }
                }
            }
        }
    }
}

/// `atomic_max` / `atomic_min`: every block folds its rows into one output row (float32 with
/// negative and positive values, int32), on the CPU backend and in the simulator (the GPU
/// lowering), against the definition; the PTX assembles (nvJitLink) with integer reductions on
/// the float bits, the CUDA C++ compiles (NVRTC), and the HIP source compiles for gfx942.
#[test]
fn atomic_max_and_min_fold_every_block_into_one_row() {
    let k = Kernel::build("col_extrema", |k| {
        let m = k.dim("M");
        let x = k.input("X", (&m, 64), F32);
        let xi = k.input("XI", (&m, 64), I32);
        let hi = k.inout("HI", [1, 64], F32);
        let lo = k.inout("LO", [1, 64], F32);
        let hi_i = k.inout("HI_I", [1, 64], I32);
        k.launch([ceildiv(&m, 16)], 64, |t, [bx]| {
            let s = t.alloc_shared([16, 64], F32);
            let si = t.alloc_shared([16, 64], I32);
            t.copy(x.tile((&bx * 16, 0)), &s);
            t.copy(xi.tile((&bx * 16, 0)), &si);
            t.serial(16, |t, r| {
                let row = &bx * 16 + &r;
                t.if_(row.lt(&m), |t| {
                    t.atomic_max(hi.tile((0, 0)), s.region((&r, 0), (1, 64)));
                    t.atomic_min(lo.tile((0, 0)), s.region((&r, 0), (1, 64)));
                    t.atomic_max(hi_i.tile((0, 0)), si.region((&r, 0), (1, 64)));
                });
            });
        });
    });
    let rows = 40;
    let xv: Vec<f64> = (0..rows * 64)
        .map(|i| (((i * 37 + 11) % 101) as f64 - 50.0) * 0.75)
        .collect();
    let xiv: Vec<f64> = (0..rows * 64)
        .map(|i| ((i * 53 + 7) % 211) as f64 - 105.0)
        .collect();
    let col = |v: &[f64], j: usize| (0..rows).map(move |i| v[i * 64 + j]).collect::<Vec<_>>();
    let fold = |v: &[f64], f: fn(f64, f64) -> f64, init: f64| -> Vec<f64> {
        (0..64)
            .map(|j| col(v, j).into_iter().fold(init, f))
            .collect()
    };
    let (want_hi, want_lo, want_hi_i) = (
        fold(&xv, f64::max, -1e30),
        fold(&xv, f64::min, 1e30),
        fold(&xiv, f64::max, -1e9),
    );
    for dev in [Device::Cpu, Device::SIM] {
        let x = Tensor::from_f64(&[rows, 64], F32, &xv, &dev).expect("x");
        let xi = Tensor::from_f64(&[rows, 64], I32, &xiv, &dev).expect("xi");
        let hi = Tensor::from_f64(&[1, 64], F32, &[-1e30; 64], &dev).expect("hi");
        let lo = Tensor::from_f64(&[1, 64], F32, &[1e30; 64], &dev).expect("lo");
        let hi_i = Tensor::from_f64(&[1, 64], I32, &[-1e9; 64], &dev).expect("hi_i");
        k.compile(&dev)
            .unwrap_or_else(|e| panic!("{dev}: {e}"))
            .run(&[&x, &xi, &hi, &lo, &hi_i])
            .unwrap_or_else(|e| panic!("{dev}: {e}"));
        assert_eq!(hi.to_f64_vec().expect("hi"), want_hi, "{dev}: max");
        assert_eq!(lo.to_f64_vec().expect("lo"), want_lo, "{dev}: min");
        assert_eq!(
            hi_i.to_f64_vec().expect("hi_i"),
            want_hi_i,
            "{dev}: int max"
        );
    }
    if tl_nvrtc::testing::nvrtc_or_skip("atomic_max_and_min_fold_every_block_into_one_row")
        .is_some()
    {
        for target in [Target::SM80, Target::SM90] {
            let ptx = k
                .emit_ptx(target)
                .unwrap_or_else(|e| panic!("{target}: {e}"));
            for want in ["max.s32", "min.u32", "min.s32", "max.u32"] {
                assert!(ptx.contains(want), "{target}: no `{want}` in\n{ptx}");
            }
            tl_nvrtc::check_with(&ptx, &target.arch(), &tl_nvrtc::CheckOptions::default())
                .unwrap_or_else(|e| panic!("{target}: {e}\n{ptx}"));
            let src = k
                .emit_general(target)
                .unwrap_or_else(|e| panic!("{target}: {e}"));
            assert!(src.contains("tl_atomic_max_f32(") && src.contains("tl_atomic_min_f32("));
            tl_nvrtc::compile(&src, &target.arch(), &tl_nvrtc::CompileOptions::default())
                .unwrap_or_else(|e| panic!("{target}: {e}"));
        }
    }
    if tilelang::amdgpu::toolchain::clang_or_skip("atomic_max_and_min (gfx942)").is_some() {
        k.compile_amd(Target::GFX942)
            .unwrap_or_else(|e| panic!("gfx942: {e}"));
    }
}

/// Element atomics inside a parallel loop (TileLang's `T.atomic_add(C[i, j], v)`): every
/// thread of every block adds its fragment values into one output row and folds them into a
/// maximum, on the CPU backend and in the simulator, against the definition; the PTX and the
/// CUDA C++ compile.
#[test]
fn element_atomics_in_a_parallel_loop() {
    let k = Kernel::build("col_atomics", |k| {
        let m = k.dim("M");
        let x = k.input("X", (&m, 32), F32);
        let sum = k.inout("SUM", [32], F32);
        let hi = k.inout("HI", [32], F32);
        k.launch([ceildiv(&m, 16)], 64, |t, [bx]| {
            let f = t.alloc_fragment([16, 32], F32);
            t.copy(x.tile((&bx * 16, 0)), &f);
            t.parallel([16, 32], |t, [i, j]| {
                t.if_((&bx * 16 + &i).lt(&m), |t| {
                    t.atomic_add_at(sum.at([j.clone()]), f.at([i.clone(), j.clone()]));
                    t.atomic_max_at(hi.at([j.clone()]), f.at([i.clone(), j.clone()]));
                });
            });
        });
    });
    let rows = 37;
    let xv: Vec<f64> = (0..rows * 32)
        .map(|i| (((i * 29 + 5) % 61) as f64 - 30.0) * 0.5)
        .collect();
    let want_sum: Vec<f64> = (0..32)
        .map(|j| (0..rows).map(|i| xv[i * 32 + j]).sum())
        .collect();
    let want_hi: Vec<f64> = (0..32)
        .map(|j| (0..rows).map(|i| xv[i * 32 + j]).fold(-1e30, f64::max))
        .collect();
    for dev in [Device::Cpu, Device::SIM] {
        let x = Tensor::from_f64(&[rows, 32], F32, &xv, &dev).expect("x");
        let sum = Tensor::zeros(&[32], F32, &dev).expect("sum");
        let hi = Tensor::from_f64(&[32], F32, &[-1e30; 32], &dev).expect("hi");
        k.compile(&dev)
            .unwrap_or_else(|e| panic!("{dev}: {e}"))
            .run(&[&x, &sum, &hi])
            .unwrap_or_else(|e| panic!("{dev}: {e}"));
        // Halves summed in any order are exact here (|sums| < 2^23 · 0.5).
        assert_eq!(sum.to_f64_vec().expect("sum"), want_sum, "{dev}: sums");
        assert_eq!(hi.to_f64_vec().expect("hi"), want_hi, "{dev}: max");
    }
    if tl_nvrtc::testing::nvrtc_or_skip("element_atomics_in_a_parallel_loop").is_some() {
        for target in [Target::SM80, Target::SM90] {
            let ptx = k
                .emit_ptx(target)
                .unwrap_or_else(|e| panic!("{target}: {e}"));
            assert!(ptx.contains("red.global.add.f32"), "{target}:\n{ptx}");
            tl_nvrtc::check_with(&ptx, &target.arch(), &tl_nvrtc::CheckOptions::default())
                .unwrap_or_else(|e| panic!("{target}: {e}\n{ptx}"));
            let src = k
                .emit_general(target)
                .unwrap_or_else(|e| panic!("{target}: {e}"));
            tl_nvrtc::compile(&src, &target.arch(), &tl_nvrtc::CompileOptions::default())
                .unwrap_or_else(|e| panic!("{target}: {e}"));
        }
    }
}

/// An element atomic on a fragment is refused where it is written, with the fix.
#[test]
fn an_element_atomic_on_a_fragment_is_refused() {
    let k = Kernel::build("frag_atomic", |k| {
        let x = k.input("X", [32], F32);
        k.launch([1], 32, |t, [_]| {
            let f = t.alloc_fragment([32], F32);
            t.copy(x.tile([0]), &f);
            t.parallel([32], |t, [i]| {
                t.atomic_add_at(f.at([i.clone()]), 1.0);
            });
        });
    });
    let e = k.verify().expect_err("a fragment").to_string();
    assert!(e.contains("atomics update global or shared memory"), "{e}");
    assert!(e.contains("sim_examples.rs"), "{e}");
}

/// `t.print`: the C backend prints through `printf`, the simulator prints with the block and
/// thread, the CUDA C++ (which the PTX path falls back to) compiles with NVRTC, and an AMD
/// target refuses it with the fix.
#[test]
fn print_reaches_every_backend_or_is_refused() {
    let k = Kernel::build("show", |k| {
        let x = k.input("X", [4], F32);
        let y = k.output("Y", [4], F32);
        k.launch([1], 32, |t, [bx]| {
            t.print("bx = ", bx.clone());
            let f = t.alloc_fragment([4], F32);
            t.copy(x.tile([0]), &f);
            t.parallel([4], |t, [i]| {
                t.print("x % \"i\" = ", f.at([i.clone()]));
            });
            t.copy(&f, y.tile([0]));
        });
    });
    let c = k.emit(Target::Cpu).expect("C source");
    assert!(c.contains(r#"(printf("bx = %lld\n""#), "{c}");
    assert!(c.contains(r#"printf("x %% \"i\" = %f\n""#), "{c}");
    for dev in [Device::Cpu, Device::SIM] {
        let x = Tensor::from_f64(&[4], F32, &[1.0, 2.0, 3.0, 4.0], &dev).expect("x");
        let y = Tensor::zeros(&[4], F32, &dev).expect("y");
        k.compile(&dev)
            .unwrap_or_else(|e| panic!("{dev}: {e}"))
            .run(&[&x, &y])
            .unwrap_or_else(|e| panic!("{dev}: {e}"));
        assert_eq!(y.to_f64_vec().expect("y"), vec![1.0, 2.0, 3.0, 4.0]);
    }
    let e = k
        .emit(Target::GFX942)
        .expect_err("no printf on AMD")
        .to_string();
    assert!(e.contains("print on an AMD target"), "{e}");
    // The PTX printer has no printf: the CUDA C++ source carries it.
    assert!(k.emit_ptx(Target::SM90).is_err());
    if tl_nvrtc::testing::nvrtc_or_skip("print_reaches_every_backend_or_is_refused").is_some() {
        let src = k.emit_general(Target::SM90).expect("CUDA C++");
        assert!(src.contains("threadIdx.x"), "{src}");
        tl_nvrtc::compile(&src, "sm_90a", &tl_nvrtc::CompileOptions::default())
            .unwrap_or_else(|e| panic!("{e}\n{src}"));
    }
}

/// Float atomic max/min order -0 below +0 (and NaN by its sign) on every backend, as the GPUs'
/// one integer atomic on the bits does: the CPU backend and the simulator agree bit for bit.
#[test]
fn float_atomic_extrema_order_signed_zeros_as_gpus_do() {
    let k = Kernel::build("zeros", |k| {
        let x = k.input("X", [2, 4], F32);
        let hi = k.inout("HI", [1, 4], F32);
        let lo = k.inout("LO", [1, 4], F32);
        k.launch([2], 32, |t, [bx]| {
            let s = t.alloc_shared([1, 4], F32);
            t.copy(x.tile((bx.clone(), 0)), &s);
            t.atomic_max(hi.tile((0, 0)), &s);
            t.atomic_min(lo.tile((0, 0)), &s);
        });
    });
    // Columns: (-0, +0), (+0, -0), (-1, -0), (+0, +1); outputs start at the first row's value.
    let xv = [-0.0, 0.0, -1.0, 0.0, 0.0, -0.0, -0.0, 1.0];
    let bits = |v: &[f64]| v.iter().map(|x| (*x as f32).to_bits()).collect::<Vec<_>>();
    for dev in [Device::Cpu, Device::SIM] {
        let x = Tensor::from_f64(&[2, 4], F32, &xv, &dev).expect("x");
        let hi = Tensor::from_f64(&[1, 4], F32, &xv[..4], &dev).expect("hi");
        let lo = Tensor::from_f64(&[1, 4], F32, &xv[..4], &dev).expect("lo");
        k.compile(&dev)
            .unwrap_or_else(|e| panic!("{dev}: {e}"))
            .run(&[&x, &hi, &lo])
            .unwrap_or_else(|e| panic!("{dev}: {e}"));
        assert_eq!(
            bits(&hi.to_f64_vec().expect("hi")),
            bits(&[0.0, 0.0, -0.0, 1.0]),
            "{dev}: max"
        );
        assert_eq!(
            bits(&lo.to_f64_vec().expect("lo")),
            bits(&[-0.0, -0.0, -1.0, 0.0]),
            "{dev}: min"
        );
    }
}

/// The producer's preloads (`pipeline::preload`) on a small warp-specialized kernel: Q·Kⱼᵀ
/// summed over key tiles, Q copied once before the loop. Q's copy becomes the producer's TMA
/// load (and agrees with the CPU in the simulator, with a key tail); it stays the consumers'
/// vector copy where the producer could not take it over: Q's tile written by another
/// statement; Q a tensor the kernel writes (TMA would read it without the proxy fence the
/// kernel's own writes need); a wgmma after the loop left reading Q past the point the tile
/// would be released; Q's tile read outside the sequence that holds the loop (where no release
/// would cover the read); and a persistent kernel in clusters (whose producers multicast into
/// each other's tiles, which one block's release does not cover). Persistent, it is released
/// every round.
#[test]
fn preloads_take_over_only_copies_they_can() {
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Variant {
        Plain,
        Persistent,
        TileWrittenTwice,
        SourceWritten,
        PendingAfterLoop,
        ReadOutsideItsSequence,
        Clustered,
    }
    let build = |v: Variant| {
        Kernel::build("preload_probe", move |k| {
            let n = k.dim("N");
            let q = match v {
                Variant::SourceWritten => k.output("Q", [64, 64], BF16),
                _ => k.input("Q", [64, 64], BF16),
            };
            let kk = k.input("K", (&n, 64), BF16);
            let o = k.output("O", [64, 64], F32);
            let q2 = (v == Variant::ReadOutsideItsSequence).then(|| k.output("Q2", [64, 64], BF16));
            // The persistent kernel's one block takes three rounds (each writes O alike).
            let blocks = match v {
                Variant::Persistent => 3,
                Variant::Clustered => 2,
                _ => 1,
            };
            k.launch([blocks], 128, |t, [_bx]| {
                t.warp_specialize(true);
                match v {
                    Variant::Persistent => t.persistent(1),
                    Variant::Clustered => {
                        t.persistent(2);
                        t.cluster(0, 2);
                    }
                    _ => {}
                }
                let q_s = t.alloc_shared_named("Q_s", [64, 64], BF16);
                let k_s = t.alloc_shared_named("K_s", [64, 64], BF16);
                let w_s = t.alloc_shared_named("W_s", [64, 64], BF16);
                let acc = t.alloc_fragment_named("acc", [64, 64], F32);
                let body = |t: &mut TileScope| {
                    t.copy(q.tile((0, 0)), &q_s);
                    t.clear(&acc);
                    t.pipelined(ceildiv(&n, 64), 2, |t, j| {
                        t.copy(kk.tile((&j * 64, 0)), &k_s);
                        t.gemm(&q_s, &k_s, &acc).transpose_b();
                    });
                    if v == Variant::PendingAfterLoop {
                        t.copy(kk.tile((0, 0)), &w_s);
                        t.gemm(&q_s, &w_s, &acc).transpose_b().wg_wait(-1);
                        t.wait_wgmma(0);
                    }
                    t.copy(&acc, o.tile((0, 0)));
                };
                if let Some(q2) = &q2 {
                    t.if_(n.gt(0), body);
                    t.copy(&q_s, q2.tile((0, 0)));
                } else {
                    body(t);
                }
                match v {
                    Variant::TileWrittenTwice => t.clear(&q_s),
                    Variant::SourceWritten => t.copy(&q_s, q.tile((0, 0))),
                    _ => {}
                }
            });
        })
    };
    for v in [
        Variant::Plain,
        Variant::Persistent,
        Variant::TileWrittenTwice,
        Variant::SourceWritten,
        Variant::PendingAfterLoop,
        Variant::ReadOutsideItsSequence,
        Variant::Clustered,
    ] {
        let k = build(v);
        let low = k.lower(Target::SM90).expect("lowers");
        assert!(low.attrs.warp_specialized.is_some(), "{v:?}: {low}");
        let text = low.to_string();
        let lines = |a: &str| {
            text.lines()
                .filter(|l| l.contains(a) && l.contains("Q_s["))
                .count()
        };
        let preloaded = matches!(v, Variant::Plain | Variant::Persistent);
        assert_eq!(lines("tma_load") > 0, preloaded, "{v:?}:\n{text}");
        assert_eq!(lines("vec_copy") > 0, !preloaded, "{v:?}:\n{text}");
        let released = text
            .lines()
            .any(|l| l.contains("mbarrier_arrive(") && l.contains("_pre0_empty"));
        assert_eq!(released, v == Variant::Persistent, "{v:?}:\n{text}");
        if preloaded {
            let shapes = [vec![64, 64], vec![150, 64], vec![64, 64]];
            let e = sim_vs_cpu(&k, Target::SM90, &shapes, 5);
            assert!(e < 1e-2, "{v:?}: {e}");
        }
    }
}

/// The simulator's arguments of a bf16 attention kernel: Q, K and V of shape `[b, h, s, d]`,
/// then O and the f32 LSE, poisoned (every element must be written).
fn attention_sim_args(q: &[f64], k: &[f64], v: &[f64], [b, h, s, d]: [usize; 4]) -> Vec<SimArg> {
    let shape = [b, h, s, d];
    vec![
        SimArg::tensor(BF16, &shape, q),
        SimArg::tensor(BF16, &shape, k),
        SimArg::tensor(BF16, &shape, v),
        SimArg::tensor(BF16, &shape, &vec![f64::NAN; b * h * s * d]),
        SimArg::tensor(F32, &[b, h, s], &vec![f64::NAN; b * h * s]),
    ]
}

/// FlashAttention-4's lazy rescale (`AttnConfig::rescale_threshold`): a row keeps its running
/// maximum until a key tile raises it by more than 2^threshold, and O is rescaled only in the
/// steps where some row of the thread moved it. Keys scaled up along the sequence make every
/// row's maximum grow from tile to tile, by more than 2^8 in some rows and steps and by less
/// in others, so both the kept maximum (exponentials above 1) and the skipped and taken
/// rescales of O are exercised; the simulator's result must match an f64 attention, with the
/// d128 Hopper kernel (FlashAttention-3's overlap, the rescale after P·V) and the plain
/// wgmma one (the rescale inside the softmax), causal and not, and with threshold 0 (rescale
/// whenever a maximum grows at all).
#[test]
fn lazy_rescale_attention_in_sim() {
    use tilelang::kernels::reference;
    let (b, h, s, d) = (1usize, 1usize, 300usize, 128usize);
    let sm_scale = 1.0 / (d as f64).sqrt();
    let dev = Device::Cpu;
    let input = |seed: u64, ramp: bool| -> Vec<f64> {
        let t = Tensor::randn(&[b, h, s, d], BF16, seed, &dev).expect("tensor");
        let mut v = t.to_f64_vec().expect("values");
        if ramp {
            // Key j scaled by 1 + j/24, rounded to bf16 so that the kernel and the reference
            // read the same keys.
            for (i, x) in v.iter_mut().enumerate() {
                let key = (i / d) % s;
                *x = f64::from(half::bf16::from_f64(*x * (1.0 + key as f64 / 24.0)));
            }
        }
        v
    };
    let (q, kk, v) = (input(31, false), input(32, true), input(33, false));
    for (causal, hopper, tau) in [
        (false, true, 8.0),
        (true, true, 8.0),
        (false, false, 8.0),
        (false, true, 0.0),
    ] {
        let base = if hopper {
            flash_attention::AttnConfig::hopper_for(128, causal)
        } else {
            flash_attention::AttnConfig {
                instruction: Some(GemmInstruction::Wgmma),
                ..flash_attention::AttnConfig::tiles(128, 64, 2, 256)
            }
        };
        let cfg = flash_attention::AttnConfig {
            rescale_threshold: Some(tau),
            ..base
        };
        let k = flash_attention::flash_attention(BF16, d as i64, causal, cfg);
        let low = k.lower(Target::SM90).expect("lowers");
        let mut args = attention_sim_args(&q, &kk, &v, [b, h, s, d]);
        tl_sim::run(&low, &mut args, &SimOptions::default())
            .unwrap_or_else(|e| panic!("lazy rescale causal={causal} hopper={hopper}: {e}"));
        let (want_o, want_lse) = reference::attention(&q, &kk, &v, (b, h, s, d), causal, sm_scale);
        let what = format!("causal={causal} hopper={hopper} threshold={tau}");
        let e = rel_err(&args[3].to_f64(BF16), &want_o).expect("same size");
        assert!(e < 1e-2, "{what}: O off by {e}");
        let e = rel_err(&args[4].to_f64(F32), &want_lse).expect("same size");
        assert!(e < 1e-3, "{what}: LSE off by {e}");
        println!("lazy rescale {what}: ok");
    }
}

/// The lazy rescale leaves O alone where no row's maximum moved: on random inputs, whose row
/// maxima settle within a few key tiles, the d128 Hopper kernel with threshold 8 executes
/// fewer instructions in the simulator than with the rescale every step — at least half of
/// the 64 multiplies a consumer thread and skipped step saves (the flag's own work is the
/// rest) — and both agree with an f64 attention.
#[test]
fn lazy_rescale_skips_the_rescale_of_o_in_sim() {
    use tilelang::kernels::reference;
    let (b, h, s, d) = (1usize, 1usize, 640usize, 128usize);
    let dev = Device::Cpu;
    let input = |seed: u64| {
        Tensor::randn(&[b, h, s, d], BF16, seed, &dev)
            .and_then(|t| t.to_f64_vec())
            .expect("tensor")
    };
    let (q, kk, v) = (input(41), input(42), input(43));
    let (want_o, _) =
        reference::attention(&q, &kk, &v, (b, h, s, d), false, 1.0 / (d as f64).sqrt());
    let mut executed = vec![];
    for tau in [None, Some(8.0)] {
        let cfg = flash_attention::AttnConfig {
            rescale_threshold: tau,
            ..flash_attention::AttnConfig::hopper_for(128, false)
        };
        let k = flash_attention::flash_attention(BF16, d as i64, false, cfg);
        let low = k.lower(Target::SM90).expect("lowers");
        let mut args = attention_sim_args(&q, &kk, &v, [b, h, s, d]);
        let report = tl_sim::run(&low, &mut args, &SimOptions::default())
            .unwrap_or_else(|e| panic!("threshold {tau:?}: {e}"));
        let e = rel_err(&args[3].to_f64(BF16), &want_o).expect("same size");
        assert!(e < 1e-2, "threshold {tau:?}: O off by {e}");
        executed.push((report.instructions, report.blocks));
    }
    let [(every, blocks), (lazy, _)] = [executed[0], executed[1]];
    // Key tiles after the first, a block: each one's rescale of O is 64 multiplies for each
    // of the 256 consumer threads.
    let skippable = (s.div_ceil(128) as u64 - 1) * 256 * 64 * blocks;
    println!("instructions: every step {every}, lazy {lazy}, skippable {skippable}");
    assert!(
        every > lazy && every - lazy >= skippable / 2,
        "the lazy rescale saved {} of {every} instructions, under half of the {skippable} \
         multiplies of the skipped rescales of O",
        every.saturating_sub(lazy)
    );
}
