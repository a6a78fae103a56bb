//! Every example kernel lowers to well-formed thread-level IR for the GPU targets (the
//! simulator and the CUDA compile checks run what this produces).

mod common;

use common::example_kernels;
use tilelang::Target;

#[test]
fn examples_lower_for_gpu_targets() {
    for k in example_kernels() {
        for target in [Target::SM80, Target::SM90] {
            match k.lower(target) {
                Ok(low) => {
                    if std::env::var("TL_PRINT").is_ok() {
                        println!("{low}");
                    }
                }
                Err(d) => panic!("{} for {target}:\n{d}", k.name()),
            }
        }
    }
}

use tilelang::ir::DiagKind;
use tilelang::prelude::*;

/// y = 2·x on a [4, 64] tile whose fragment layout the user fixes.
fn scaled(layout: &str) -> Kernel {
    let layout = layout.to_string();
    Kernel::build("scaled", move |k| {
        let x = k.input("X", [4, 64], F32);
        let y = k.output("Y", [4, 64], F32);
        k.launch([1], 64, |t, [_bx]| {
            let f = t.alloc_fragment_named("f", [4, 64], F32);
            t.annotate_layout(&f, &layout);
            t.copy(&x, &f);
            t.parallel([4, 64], |t, [i, j]| {
                t.store(&f, [&i, &j], f.at([&i, &j]) * 2.0)
            });
            t.copy(&f, &y);
        });
    })
}

#[test]
fn annotated_fragment_layouts_are_used() {
    // 64 threads; each holds 4 elements of one column (rows vary in the value index).
    scaled_runs_with_layout("(64,4):(4,1)", "(64,4):(4,1)");
}

/// `scaled(annotation)` lowers with fragment layout `want` and doubles its input in the
/// simulator.
fn scaled_runs_with_layout(annotation: &str, want: &str) {
    let k = scaled(annotation);
    let low = k.lower(Target::SM80).expect("lowers");
    assert!(
        low.to_string().contains(&format!("layout f = {want}")),
        "{low}"
    );
    let dev = Device::SIM;
    let x = Tensor::randn(&[4, 64], F32, 1, &dev).expect("x");
    let y = Tensor::zeros(&[4, 64], F32, &dev).expect("y");
    k.compile(&dev)
        .expect("compiles")
        .run(&[&x, &y])
        .expect("runs in the simulator");
    let doubled: Vec<f64> = x.to_f64_vec().expect("x").iter().map(|v| v * 2.0).collect();
    assert_eq!(y.to_f64_vec().expect("y"), doubled);
}

/// A mode of size 1 in an annotation names no digit: `(64,(4,1)):(4,(1,7))` is `(64,4):(4,1)`
/// (it was taken for a replicated value mode and refused).
#[test]
fn size_one_modes_in_annotations_name_no_digit() {
    scaled_runs_with_layout("(64,(4,1)):(4,(1,7))", "(64,4):(4,1)");
}

#[test]
fn bad_annotations_are_diagnosed() {
    let e = scaled("(64,4:(4,1)")
        .lower(Target::SM80)
        .expect_err("parse error");
    assert!(e.has(DiagKind::InvalidArgument), "{e}");
    assert!(e.to_string().contains("gpu_lowering.rs"), "{e}");
    let e = scaled("(32,(4,2)):(8,(1,4))")
        .lower(Target::SM80)
        .expect_err("wrong thread count");
    assert!(e.to_string().contains("32 threads"), "{e}");
}

#[test]
fn conflicting_layouts_name_both_operations_and_layouts() {
    // The gemm needs its tensor-core layout for the accumulator; the annotation asks otherwise.
    let k = Kernel::build("conflict", |k| {
        let c = k.output("C", [64, 64], F32);
        k.launch([1], 128, |t, [_bx]| {
            let a = t.alloc_shared([64, 32], BF16);
            let b = t.alloc_shared([32, 64], BF16);
            let acc = t.alloc_fragment_named("acc", [64, 64], F32);
            t.annotate_layout(&acc, "((64,2),32):((1,2048),64)");
            t.clear(&a);
            t.clear(&b);
            t.gemm(&a, &b, &acc).clear_accum();
            t.copy(&acc, &c);
        });
    });
    let e = k.lower(Target::SM80).expect_err("conflict");
    let text = e.to_string();
    println!("{text}");
    assert!(e.has(DiagKind::LayoutConflict), "{text}");
    assert!(text.contains("`acc`"), "{text}");
    assert!(text.contains("((64,2),32):((1,2048),64)"), "{text}");
    assert!(text.contains("tensor-core gemm"), "{text}");
    assert!(
        text.matches("gpu_lowering.rs").count() >= 2,
        "both lines named: {text}"
    );
}

/// The byte offset the generated CUDA gives a shared buffer.
fn smem_offset(src: &str, name: &str) -> u64 {
    let pat = format!("* const {name} = (");
    let line = src
        .lines()
        .find(|l| l.contains(&pat))
        .unwrap_or_else(|| panic!("no shared buffer `{name}` in:\n{src}"));
    let off = line.split("tl_smem + ").nth(1).expect("offset");
    off.trim_end_matches(");").trim().parse().expect("number")
}

#[test]
fn epilogue_staging_reuses_the_pipeline_tiles() {
    use tilelang::kernels::gemm::{gemm, GemmConfig, Layout};
    let k = gemm(Layout::NT, BF16, BF16, GemmConfig::gpu());
    let src = k.emit(Target::SM90).expect("emits");
    // The staging tile of C is written after the pipeline has drained (wait_group 0, barrier),
    // so it may start where the A tiles do; the A and B tiles themselves stay apart.
    assert_eq!(
        smem_offset(&src, "epilogue_scratch"),
        smem_offset(&src, "A_s")
    );
    assert_ne!(smem_offset(&src, "A_s"), smem_offset(&src, "B_s"));
}

#[test]
fn shared_tiles_without_a_barrier_between_stay_apart() {
    // Two tiles used one after the other with no barrier between the last read of the first
    // and the first write of the second: a fast thread could overwrite what a slow one reads.
    let k = Kernel::build("two_tiles", |k| {
        let x = k.input("X", [64, 64], F32);
        let y = k.output("Y", [64, 64], F32);
        k.launch([1], 128, |t, [_bx]| {
            let a = t.alloc_shared_named("a_tile", [32, 64], F32);
            let b = t.alloc_shared_named("b_tile", [32, 64], F32);
            t.copy(x.tile([0, 0]), &a);
            t.copy(&a, y.tile([0, 0]));
            t.copy(x.tile([32, 0]), &b);
            t.copy(&b, y.tile([32, 0]));
        });
    });
    let src = k.emit(Target::SM80).expect("emits");
    let (a, b) = (smem_offset(&src, "a_tile"), smem_offset(&src, "b_tile"));
    assert!(
        a + 32 * 64 * 4 <= b || b + 32 * 64 * 4 <= a,
        "{a} {b}:\n{src}"
    );
    // And it still computes the right thing in the simulator.
    let dev = Device::SIM;
    let xs = Tensor::randn(&[64, 64], F32, 3, &dev).expect("x");
    let ys = Tensor::zeros(&[64, 64], F32, &dev).expect("y");
    k.compile(&dev)
        .expect("compiles")
        .run(&[&xs, &ys])
        .expect("runs");
    assert_eq!(ys.to_f64_vec().expect("y"), xs.to_f64_vec().expect("x"));
}

/// A 64×64×(K) bf16 GEMM whose pipelined loop carries the given `order` / `stage` annotations
/// (its body is three statements: copy A, copy B, gemm).
fn annotated_gemm(order: Option<Vec<i32>>, stage: Option<Vec<i32>>) -> Kernel {
    Kernel::build("annotated_gemm", move |k| {
        let kd = k.dim("K");
        let a = k.input("A", [&Expr::from(64), &kd], BF16);
        let b = k.input("B", [&kd, &Expr::from(64)], BF16);
        let c = k.output("C", [64, 64], F32);
        k.launch([1], 128, |t, [_bx]| {
            let a_s = t.alloc_shared_named("A_s", [64, 32], BF16);
            let b_s = t.alloc_shared_named("B_s", [32, 64], BF16);
            let acc = t.alloc_fragment_named("acc", [64, 64], F32);
            t.clear(&acc);
            let mut p = t.pipelined(ceildiv(&kd, 32), 3, |t, ko| {
                t.copy(a.tile([Expr::from(0), &ko * 32]), &a_s);
                t.copy(b.tile([&ko * 32, Expr::from(0)]), &b_s);
                t.gemm(&a_s, &b_s, &acc);
            });
            if let Some(o) = order.clone() {
                p = p.order(o);
            }
            if let Some(s) = stage.clone() {
                p.stage(s);
            }
            t.copy(&acc, &c);
        });
    })
}

#[test]
fn stage_annotation_chooses_what_runs_ahead() {
    // Default: both copies are prefetched into 3-version buffers.
    let low = annotated_gemm(None, None)
        .lower(Target::SM80)
        .expect("lowers");
    let text = low.to_string();
    assert!(
        text.contains("A_s: bf16[6144]") && text.contains("B_s: bf16[6144]"),
        "{text}"
    );
    // B in the consumer stage: loaded in its own iteration, one version.
    let k = annotated_gemm(Some(vec![0, 1, 2]), Some(vec![0, 2, 2]));
    let text = k.lower(Target::SM80).expect("lowers").to_string();
    assert!(
        text.contains("A_s: bf16[6144]") && text.contains("B_s: bf16[2048]"),
        "{text}"
    );
    // And the schedule still computes the product (simulator against the CPU backend).
    let dev = Device::SIM;
    let kd = 100;
    let a = Tensor::randn(&[64, kd], BF16, 1, &dev).expect("a");
    let b = Tensor::randn(&[kd, 64], BF16, 2, &dev).expect("b");
    let c = Tensor::zeros(&[64, 64], F32, &dev).expect("c");
    k.compile(&dev)
        .expect("compiles")
        .run(&[&a, &b, &c])
        .expect("runs");
    let cpu = Device::Cpu;
    let (a2, b2) = (
        Tensor::from_f64(&[64, kd], BF16, &a.to_f64_vec().expect("a"), &cpu).expect("a"),
        Tensor::from_f64(&[kd, 64], BF16, &b.to_f64_vec().expect("b"), &cpu).expect("b"),
    );
    let c2 = Tensor::zeros(&[64, 64], F32, &cpu).expect("c");
    k.compile(&cpu)
        .expect("compiles")
        .run(&[&a2, &b2, &c2])
        .expect("runs");
    let err = c.rel_err(&c2.to_f64_vec().expect("c")).expect("err");
    assert!(err < 1e-5, "relative error {err}");
}

#[test]
fn schedules_the_pipeliner_cannot_follow_are_diagnosed() {
    let e = annotated_gemm(Some(vec![1, 0, 2]), None)
        .lower(Target::SM80)
        .expect_err("reordering");
    assert!(e.has(DiagKind::Unsupported), "{e}");
    assert!(e.to_string().contains("drop `order`"), "{e}");
    let e = annotated_gemm(None, Some(vec![0, 0, 0]))
        .lower(Target::SM80)
        .expect_err("gemm in stage 0");
    assert!(
        e.to_string().contains("statement 2 is put in stage 0"),
        "{e}"
    );
    assert!(e.to_string().contains("give statement 2 stage 2"), "{e}");
    let e = annotated_gemm(None, Some(vec![0, 1, 2]))
        .lower(Target::SM80)
        .expect_err("middle stage");
    assert!(e.to_string().contains("two stages"), "{e}");
    // Malformed annotations fail verification, on every target, at the loop's line.
    let e = annotated_gemm(None, Some(vec![0, 2]))
        .verify()
        .expect_err("wrong length");
    assert!(e.has(DiagKind::InvalidArgument), "{e}");
    assert!(
        e.to_string()
            .contains("`stage` has 2 entries but the loop body has 3"),
        "{e}"
    );
    assert!(e.to_string().contains("gpu_lowering.rs"), "{e}");
    let e = annotated_gemm(Some(vec![0, 0, 1]), None)
        .verify()
        .expect_err("not a permutation");
    assert!(e.to_string().contains("not a permutation of 0..3"), "{e}");
    let e = annotated_gemm(None, Some(vec![0, 3, 2]))
        .verify()
        .expect_err("out of range");
    assert!(e.to_string().contains("stage 3 is outside 0..3"), "{e}");
}

#[test]
fn wgmma_where_it_cannot_run_is_diagnosed() {
    use tilelang::kernels::gemm::{gemm, GemmConfig, Layout};
    let wg = |bm, bk, threads, layout| {
        gemm(
            layout,
            BF16,
            F32,
            GemmConfig {
                instruction: Some(GemmInstruction::Wgmma),
                ..GemmConfig::tiles(bm, 64, bk, 2, threads)
            },
        )
    };
    let e = wg(64, 64, 128, Layout::NT)
        .lower(Target::SM80)
        .expect_err("sm_80");
    assert!(e.to_string().contains("wgmma needs sm_90a"), "{e}");
    assert!(e.to_string().contains("drop `.wgmma()`"), "{e}");
    // MN-major operands (A as [K, M], B as [K, N]) are read in 64-column blocks.
    assert!(wg(64, 64, 128, Layout::NN).lower(Target::SM90).is_ok());
    assert!(wg(64, 64, 128, Layout::TN).lower(Target::SM90).is_ok());
    let narrow = gemm(
        Layout::NN,
        BF16,
        F32,
        GemmConfig {
            instruction: Some(GemmInstruction::Wgmma),
            ..GemmConfig::tiles(64, 32, 64, 2, 128)
        },
    );
    let e = narrow.lower(Target::SM90).expect_err("narrow MN-major B");
    assert!(
        e.to_string()
            .contains("`B_s` must have rows of a multiple of 64"),
        "{e}"
    );
    let e = wg(64, 32, 128, Layout::NT)
        .lower(Target::SM90)
        .expect_err("short rows");
    assert!(
        e.to_string().contains("rows of a multiple of 64 elements"),
        "{e}"
    );
    let e = wg(128, 64, 128, Layout::NT)
        .lower(Target::SM90)
        .expect_err("rows per warpgroup");
    assert!(e.to_string().contains("64 rows"), "{e}");
    assert!(wg(64, 64, 128, Layout::NT).lower(Target::SM90).is_ok());
}

/// The generated CUDA says what the range analysis knows and keeps tile copies branch-free:
/// thread-index division by powers of two is a shift or mask, and a copy whose rows may run
/// past the tensor zero-fills through a predicated vector copy instead of a branch with one
/// scalar store per element (NVVM shares the copies' addresses only without the branch) —
/// Q's copy in the attention without a producer warpgroup; the default's producer loads Q by
/// TMA, which zero-fills the tail itself (`pipeline::preload`).
#[test]
fn thread_arithmetic_and_row_tails_stay_compact() {
    use tilelang::kernels::flash_attention::{flash_attention, AttnConfig};
    let unspecialized = flash_attention(BF16, 128, true, AttnConfig::hopper())
        .emit(Target::SM90)
        .expect("emits");
    assert!(
        unspecialized.contains("tl_vec_copy_16_zfill((&Q_s["),
        "Q's row tail: {unspecialized}"
    );
    let k = flash_attention(BF16, 128, true, AttnConfig::hopper_for(128, true));
    let src = k.emit(Target::SM90).expect("emits");
    let body = &src[src.find("__global__").expect("a kernel")..];
    assert!(
        body.lines()
            .any(|l| l.contains("tl_tma_load_4d((&Q_s[") && l.contains("pre0_full")),
        "Q by the producer's TMA: {body}"
    );
    assert!(!body.contains("tl_vec_copy_16_zfill((&Q_s["), "{body}");
    // P, a register fragment, is cleared once before the loop (the overlapped kernel's step 0
    // multiplies it): its stores are the only zero stores, and the only single conversions,
    // allowed.
    let clearing_p = |l: &str| l.trim_start().starts_with("probs[");
    assert!(
        body.lines()
            .filter(|l| l.contains("= tl_f32_to_bf16(0.0f);"))
            .all(clearing_p),
        "no element-wise zero stores for tails: {body}"
    );
    for op in ["/ 16)", "% 16)", "/ 4)", "% 8)"] {
        for text in [body, unspecialized.as_str()] {
            assert!(
                !text.contains(&format!("threadIdx.x) {op}")),
                "`threadIdx.x {op}` should be a shift or mask"
            );
        }
    }
    // Q's copy: 16 threads a row.
    assert!(
        unspecialized.contains("threadIdx.x) >> 4)"),
        "{unspecialized}"
    );
    // P (f32 scores → bf16 A fragment) and the epilogue's staging pairs convert two at a time.
    assert!(body.contains("tl_store_bf16x2(&probs["), "{body}");
    assert!(body.contains("tl_store_bf16x2(&stage["), "{body}");
    assert!(
        body.lines()
            .filter(|l| l.contains("tl_f32_to_bf16("))
            .all(|l| clearing_p(l) && l.contains("tl_f32_to_bf16(0.0f)")),
        "no single conversions left: {body}"
    );
}

/// A persistent GEMM launches the resolved block count and loops over tiles; its staging tile
/// still shares bytes with the pipeline tiles (a wait and a barrier end every round, so the
/// next round's copies cannot overtake this round's epilogue).
#[test]
fn persistent_gemm_loops_over_tiles_and_keeps_the_shared_plan() {
    use tilelang::kernels::gemm::{gemm, GemmConfig, Layout};
    // The 128x128 Hopper tiles, whose C goes out through a staging tile in shared memory.
    let cfg = GemmConfig {
        persistent: Some(0),
        warp_specialize: Some(false),
        ..GemmConfig::hopper_unaligned()
    };
    let k = gemm(Layout::NT, BF16, BF16, cfg);
    let low = k.lower(Target::SM90).expect("lowers");
    assert_eq!(low.block_vars.len(), 1);
    assert!(low.grid[0].to_string().contains("132"), "{}", low.grid[0]);
    let src = k.emit(Target::SM90).expect("emits");
    assert!(src.contains("for (int32_t round = 0;"), "{src}");
    assert_eq!(
        smem_offset(&src, "epilogue_scratch"),
        smem_offset(&src, "A_s")
    );
    // Warp-specialized, the producer refills A_s for the next round while the consumers
    // stage this round's C: the two get bytes of their own.
    let k = gemm(
        Layout::NT,
        BF16,
        BF16,
        GemmConfig {
            warp_specialize: Some(true),
            ..cfg
        },
    );
    let src = k.emit(Target::SM90).expect("emits");
    assert!(src.contains("setmaxnreg"), "{src}");
    let (scratch, a) = (
        smem_offset(&src, "epilogue_scratch"),
        smem_offset(&src, "A_s"),
    );
    // A_s: 3 stages of 128x64 bf16; the scratch: a 128x128 bf16 tile.
    let (a_bytes, scratch_bytes) = (3 * 128 * 64 * 2, 128 * 128 * 2);
    assert!(
        scratch >= a + a_bytes || a >= scratch + scratch_bytes,
        "A_s at {a}, the scratch at {scratch}"
    );
}

/// A warp-specialized persistent GEMM: the producer half repeats the rounds loop and the tile
/// coordinates' lets with variables of its own (every variable is bound once in the lowered
/// kernel; the PTX printer hoists what depends only on variables it has seen bound, and a
/// shared one sent a consumer's epilogue addresses ahead of their definition).
#[test]
fn warp_specialized_halves_bind_variables_of_their_own() {
    use std::collections::HashSet;
    use tilelang::ir::StmtKind;
    use tilelang::kernels::gemm::{gemm, GemmConfig, Layout};
    let cfg = GemmConfig {
        persistent: Some(4),
        warp_specialize: Some(true),
        ..GemmConfig::hopper()
    };
    let low = gemm(Layout::NT, BF16, BF16, cfg)
        .lower_aligned(Target::SM90)
        .expect("lowers");
    assert!(low.attrs.warp_specialized.is_some(), "{low}");
    let mut seen = HashSet::new();
    low.body.walk(&mut |s| {
        let var = match &s.kind {
            StmtKind::Let { var, .. } => var,
            StmtKind::For(l) => &l.var,
            _ => return,
        };
        assert!(
            seen.insert(var.id()),
            "`{}` bound twice in:\n{low}",
            var.name()
        );
    });
}

/// Thread-level code: a store whose index or value comes from `thread_idx` or a shuffle is
/// made by every thread (block-level stores of one value stay with one thread), and so is a
/// store under a branch on the thread index. A butterfly sum over each warp by `shfl_xor`,
/// `shfl_down` and `shfl_idx`, against the host, in the simulator.
#[test]
fn thread_level_stores_and_warp_shuffles_in_the_simulator() {
    let k = Kernel::build("shuffles", |k| {
        let x = k.input("X", [64], F32);
        let s = k.output("S", [64], F32);
        let d = k.output("D", [64], F32);
        let b = k.output("B", [64], F32);
        let one = k.output("ONE", [2], F32);
        k.launch([1], 64, |t, [_bx]| {
            let tid = t.thread_idx();
            let v = t.let_("v", x.at([tid.clone()]));
            let mut sum = v.clone();
            for m in [16, 8, 4, 2, 1] {
                let sh = t.shfl_xor(sum.clone(), Expr::int(m));
                sum = t.let_("sum", sum + sh);
            }
            t.store(&s, [tid.clone()], sum);
            t.store(&d, [tid.clone()], t.shfl_down(v.clone(), Expr::int(3)));
            t.store(&b, [tid.clone()], t.shfl_idx(v.clone(), Expr::int(7)));
            // One value for the block: one thread writes it; under a branch on the thread
            // index, the thread that takes it.
            t.store(&one, [Expr::int(0)], Expr::float(1.0));
            t.if_(tid.clone().eq_(37), |t| {
                t.store(&one, [Expr::int(1)], Expr::float(37.0))
            });
        });
    });
    let low = k.lower(Target::SM80).expect("lowers");
    let text = low.to_string();
    assert!(
        text.contains("shfl_xor") && text.contains("shfl_down"),
        "{text}"
    );
    let dev = Device::SIM;
    let xs: Vec<f64> = (0..64).map(|i| ((i * 7) % 13) as f64 - 6.0).collect();
    let x = Tensor::from_f64(&[64], F32, &xs, &dev).expect("x");
    let outs: Vec<Tensor> = [64, 64, 64, 2]
        .iter()
        .map(|&n| Tensor::from_f64(&[n], F32, &vec![f64::NAN; n], &dev).expect("out"))
        .collect();
    k.compile(&dev)
        .expect("compiles")
        .run(&[&x, &outs[0], &outs[1], &outs[2], &outs[3]])
        .expect("runs in the simulator");
    let got: Vec<Vec<f64>> = outs.iter().map(|t| t.to_f64_vec().expect("out")).collect();
    for i in 0..64 {
        let (warp, lane) = (i / 32 * 32, i % 32);
        let sum: f64 = xs[warp..warp + 32].iter().sum();
        assert_eq!(got[0][i], sum, "S[{i}]");
        let down = if lane + 3 < 32 { xs[i + 3] } else { xs[i] };
        assert_eq!(got[1][i], down, "D[{i}]");
        assert_eq!(got[2][i], xs[warp + 7], "B[{i}]");
    }
    assert_eq!(got[3], vec![1.0, 37.0]);
}

/// A 1-d fragment reduced whole lands in a `[1]` fragment that a parallel loop then reads:
/// the reduction's layout (no dims left) and the loop's (one of extent 1) are the same layout,
/// which inference took for a conflict ("(64,1):(0,0) … but … (64,1):(0,0)").
#[test]
fn a_1d_fragment_reduces_into_a_unit_fragment() {
    let k = Kernel::build("reduce_1d", |k| {
        let x = k.input("X", [2, 64], F32);
        let y = k.output("Y", [2, 64], F32);
        k.launch([2], 64, |t, [bx]| {
            let f = t.alloc_fragment_named("f", [64], F32);
            t.copy(x.tile([bx.clone(), Expr::int(0)]), &f);
            let m = t.alloc_fragment_named("m", [1], F32);
            t.reduce_max(&f, &m, 0);
            let shifted = t.alloc_fragment_named("shifted", [1], F32);
            t.parallel([1], |t, [i]| t.store(&shifted, [&i], m.at([&i]) + 1.0));
            t.parallel([64], |t, [j]| {
                t.store(&f, [&j], f.at([&j]) - shifted.at([Expr::int(0)]))
            });
            t.copy(&f, y.tile([bx, Expr::int(0)]));
        });
    });
    let xs: Vec<f64> = (0..128).map(|i| ((i * 37) % 101) as f64 - 50.0).collect();
    for dev in [Device::Cpu, Device::SIM] {
        let x = Tensor::from_f64(&[2, 64], F32, &xs, &dev).expect("x");
        let y = Tensor::from_f64(&[2, 64], F32, &[f64::NAN; 128], &dev).expect("y");
        k.compile(&dev)
            .unwrap_or_else(|e| panic!("compiles for {dev}: {e}"))
            .run(&[&x, &y])
            .expect("runs");
        let got = y.to_f64_vec().expect("y");
        for r in 0..2 {
            let row = &xs[r * 64..(r + 1) * 64];
            let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            for j in 0..64 {
                assert_eq!(got[r * 64 + j], row[j] - max - 1.0, "{dev} Y[{r}, {j}]");
            }
        }
    }
}

/// A copy between global memory and a fragment of another shape pairs the elements in
/// row-major order: here a row of 512 loads into `[V, T, 8]` (each of 32 threads holding 8
/// consecutive columns of every 256-column stretch) and goes back out doubled, in 16-byte
/// vectors on the GPU, with a row length that is not whole stretches (the tail masked).
#[test]
fn copies_between_global_and_a_fragment_may_reshape() {
    let k = Kernel::build("reshaped", |k| {
        let x = k.input("X", [3, 504], BF16);
        let y = k.output("Y", [3, 504], BF16);
        k.launch([3], 32, |t, [bx]| {
            let f = t.alloc_fragment_named("f", [2, 32, 8], BF16);
            // Thread t holds (v, t, e) for every v and e: colex strides (1, 2, 64).
            t.annotate_layout(&f, "(32,(8,2)):(2,(64,1))");
            t.copy(x.region([bx.clone(), Expr::int(0)], [1, 512]), &f);
            t.parallel([2, 32, 8], |t, [v, th, e]| {
                t.store(
                    &f,
                    [&v, &th, &e],
                    (f.at([&v, &th, &e]).cast(F32) * 2.0).cast(BF16),
                )
            });
            t.copy(&f, y.region([bx, Expr::int(0)], [1, 512]));
        });
    });
    let ptx = k.emit_ptx(Target::SM90).expect("emits PTX");
    assert!(
        ptx.contains("ld.global.nc.v4") && ptx.contains("st.global.v4"),
        "{ptx}"
    );
    let xs: Vec<f64> = (0..1512).map(|i| ((i * 37) % 101) as f64 - 50.0).collect();
    for dev in [Device::Cpu, Device::SIM] {
        let x = Tensor::from_f64(&[3, 504], BF16, &xs, &dev).expect("x");
        let y = Tensor::from_f64(&[3, 504], BF16, &[f64::NAN; 1512], &dev).expect("y");
        k.compile(&dev)
            .unwrap_or_else(|e| panic!("compiles for {dev}: {e}"))
            .run(&[&x, &y])
            .expect("runs");
        let got = y.to_f64_vec().expect("y");
        for i in 0..1512 {
            assert_eq!(got[i], 2.0 * xs[i], "{dev} Y[{}, {}]", i / 504, i % 504);
        }
    }
}

/// Only a copy between registers and global memory reshapes; elsewhere the shapes must agree.
#[test]
fn copies_reshape_only_between_registers_and_global_memory() {
    let k = Kernel::build("reshaped_shared", |k| {
        let x = k.input("X", [1, 512], BF16);
        k.launch([1], 32, |t, [_bx]| {
            let s = t.alloc_shared([2, 256], BF16);
            t.copy(x.region([0, 0], [1, 512]), &s);
        });
    });
    let err = k.compile(&Device::Cpu).err().expect("refused").to_string();
    assert!(err.contains("the shapes differ"), "{err}");
}

/// The call `s` evaluates, if it is one.
fn call_of(s: &tilelang::ir::Stmt) -> Option<tilelang::ir::Intrinsic> {
    match &s.kind {
        tilelang::ir::StmtKind::Eval(e) => match e.kind() {
            tilelang::ir::ExprKind::Call(op, _) => Some(op.clone()),
            _ => None,
        },
        _ => None,
    }
}

/// The top-level statements of each loop in `body` that issues a wgmma at its top level (a
/// pipeline's k loop, after lowering).
fn wgmma_k_loops(body: &tilelang::ir::Stmt) -> Vec<Vec<tilelang::ir::Stmt>> {
    let mut out = vec![];
    body.walk(&mut |s| {
        if let tilelang::ir::StmtKind::For(l) = &s.kind {
            let top = l.body.flattened();
            if top
                .iter()
                .any(|x| matches!(call_of(x), Some(tilelang::ir::Intrinsic::Wgmma(_))))
            {
                out.push(top.into_iter().cloned().collect());
            }
        }
    });
    out
}

/// The NN GEMM reading an odd-K A by row residue zeroes the columns of A's tile that lie
/// outside its row in the first and last k steps. Those writes fence and hand over the tile
/// inside their own `if` (the pipeline's `fence_edge_writes`): the consumers' k loop issues
/// its wgmmas with no fence or barrier of its own in every other step — with them it ran at
/// 443 TFLOP/s instead of 521 at 4096×4096×4095 (gpu-notes run 40). Its stages are counted by
/// rounds (`round · steps + k`), not by a counter in memory that every step reloads after the
/// wgmmas' `asm` (521 → 657 TFLOP/s). Warp-specialized, A loaded by TMA.
#[test]
fn residue_gemm_fences_only_its_edge_steps() {
    use tilelang::ir::{Intrinsic, StmtKind};
    use tilelang::kernels::gemm_residue::{gemm_nn_by_residue, residue_config};
    use tilelang::prelude::BF16;
    let k = gemm_nn_by_residue(BF16, BF16, residue_config());
    let low = common::class_variant(&k, &["N"], 8)
        .lower(Target::SM90)
        .expect("lowers");
    let text = low.to_string();
    assert!(
        text.contains("setmaxnreg_inc"),
        "not warp-specialized:\n{text}"
    );
    assert!(
        text.contains("tma_load<[128, 64]"),
        "A not loaded by TMA:\n{text}"
    );
    assert!(
        !text.contains("ko_count"),
        "stages counted in memory:\n{text}"
    );
    let loops = wgmma_k_loops(&low.body);
    assert_eq!(loops.len(), 1, "one consumer k loop expected:\n{text}");
    for top in &loops {
        for x in top {
            let op = call_of(x);
            assert!(
                !matches!(
                    op,
                    Some(
                        Intrinsic::FenceProxyAsync
                            | Intrinsic::NamedBarrier { .. }
                            | Intrinsic::SyncThreads
                    )
                ),
                "the k loop fences or syncs in every step ({op:?}):\n{text}"
            );
        }
        let mut fenced_edges = 0;
        for x in top {
            if let StmtKind::If { then_, .. } = &x.kind {
                let inner = then_.flattened();
                if inner
                    .iter()
                    .any(|y| matches!(call_of(y), Some(Intrinsic::FenceProxyAsync)))
                {
                    fenced_edges += 1;
                }
            }
        }
        assert_eq!(
            fenced_edges, 1,
            "the edge steps' writes are not fenced in their `if`:\n{text}"
        );
    }
}

/// Operand writes under a condition that differs between threads keep the gemm's own fence
/// and barrier: the pipeline hands edge writes over inside their `if` only where every thread
/// takes the same branch (a barrier in a branch some threads skip would hang them). The
/// condition here reads a `let` of the thread index, which the pipeline must see through.
#[test]
fn per_thread_operand_writes_keep_the_gemms_own_fence() {
    use tilelang::ir::{Intrinsic, StmtKind};
    use tilelang::prelude::*;
    let k = Kernel::build("per_thread_writes", |k| {
        let (m, n, kd) = (k.dim("M"), k.dim("N"), k.dim("K"));
        let a = k.input("A", [&m, &kd], BF16);
        let b = k.input("B", [&kd, &n], BF16);
        let c = k.output("C", [&m, &n], F32);
        k.launch([ceildiv(&n, 64), ceildiv(&m, 64)], 128, |t, [bx, by]| {
            let a_s = t.alloc_shared_named("A_s", [64, 64], BF16);
            let b_s = t.alloc_shared_named("B_s", [64, 64], BF16);
            let acc = t.alloc_fragment_named("acc", [64, 64], F32);
            t.clear(&acc);
            let lane = t.let_("lane", t.thread_idx().floormod(32));
            t.pipelined(ceildiv(&kd, 64), 3, |t, step| {
                t.copy(a.tile([&by * 64, &step * 64]), &a_s);
                t.copy(b.tile([&step * 64, &bx * 64]), &b_s);
                t.if_(lane.lt(1), |t| {
                    t.store(&a_s, [Expr::int(0), Expr::int(0)], Expr::float(0.0));
                });
                t.gemm(&a_s, &b_s, &acc).instruction(GemmInstruction::Wgmma);
            });
            t.copy(&acc, c.tile([&by * 64, &bx * 64]));
        });
    });
    let low = k.lower_aligned(Target::SM90).expect("lowers");
    let text = low.to_string();
    let loops = wgmma_k_loops(&low.body);
    assert_eq!(loops.len(), 1, "one consumer k loop expected:\n{text}");
    for top in &loops {
        assert!(
            top.iter()
                .any(|x| matches!(call_of(x), Some(Intrinsic::FenceProxyAsync))),
            "the gemm lost its own fence:\n{text}"
        );
        for x in top {
            if let StmtKind::If { then_, .. } = &x.kind {
                let mut barrier = false;
                then_.walk(&mut |y| {
                    barrier |= matches!(
                        call_of(y),
                        Some(Intrinsic::SyncThreads | Intrinsic::NamedBarrier { .. })
                    );
                });
                assert!(!barrier, "a barrier inside a per-thread branch:\n{text}");
            }
        }
    }
}
