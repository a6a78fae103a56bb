//! The PTX printer (`TILELANG_BACKEND=ptx`): it covers every example kernel, and its PTX
//! assembles with nvJitLink for sm_80 and sm_90a without spills, into the intended tensor-core
//! instructions, and without wgmma serialization. Runs without a GPU (CI installs nvJitLink
//! with the other compiler wheels and sets TILELANG_REQUIRE_NVRTC, so a missing library fails
//! instead of skipping). Correctness on a GPU is `bash bench/ptx-run.sh check`.

mod common;

use common::example_kernels;
use tilelang::Target;

#[test]
fn every_example_prints_ptx_that_assembles_without_spills() {
    if tl_nvrtc::testing::nvrtc_or_skip("every_example_prints_ptx_that_assembles_without_spills")
        .is_none()
    {
        return;
    }
    let mut failures = vec![];
    for k in example_kernels() {
        for target in [Target::SM80, Target::SM90] {
            // The variant for aligned sizes, and the general one that launches with other
            // sizes run (tails: bounds-checked loads).
            let general = k.lower(target).map_err(|d| d.to_string()).and_then(|low| {
                tl_codegen::ptx::generate(&low, target)
                    .map(|s| s.code)
                    .map_err(|d| d.to_string())
            });
            let aligned = k.emit_ptx(target).map_err(|e| e.to_string());
            for (variant, ptx) in [("aligned", aligned), ("general", general)] {
                let what = format!("{} ({variant} sizes) for {target}", k.name());
                let ptx = match ptx {
                    Ok(p) => p,
                    Err(e) => {
                        failures.push(format!("{what}: not printed as PTX: {e}"));
                        continue;
                    }
                };
                assert!(tl_nvrtc::is_ptx(&ptx), "{what}: not PTX");
                match tl_nvrtc::check(&ptx, &target.arch()) {
                    Ok(r) => println!("{what} (PTX) {r}"),
                    Err(e) => failures.push(format!("{what}: {e}")),
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The defaults the GPU runs use: warpgroup MMAs (HGMMA) that ptxas does not serialize for
/// an external call — an IEEE division's slow path, linked by nvJitLink, would be one (C7509)
/// — and the mma.sync kernels' HMMA and ldmatrix.
#[test]
fn default_kernels_in_ptx_use_the_tensor_cores_unserialized() {
    use tilelang::kernels::flash_attention::{flash_attention, AttnConfig};
    use tilelang::kernels::gemm::{gemm, GemmConfig, Layout};
    use tilelang::prelude::BF16;
    if tl_nvrtc::testing::nvrtc_or_skip("default_kernels_in_ptx_use_the_tensor_cores_unserialized")
        .is_none()
    {
        return;
    }
    // The GEMM default is warp-specialized (a producer warpgroup, the registers moved to
    // the consumers by `setmaxnreg`: checked under the consumers' 232, which
    // `tl_nvrtc::check_with` models since nvJitLink drops the instruction) and persistent.
    let hopper = vec![
        (
            "gemm NT hopper",
            gemm(Layout::NT, BF16, BF16, GemmConfig::hopper()),
        ),
        (
            "gemm NN hopper",
            gemm(Layout::NN, BF16, BF16, GemmConfig::hopper()),
        ),
        (
            "gemm NT hopper, one block per tile",
            gemm(
                Layout::NT,
                BF16,
                BF16,
                GemmConfig {
                    persistent: None,
                    ..GemmConfig::hopper()
                },
            ),
        ),
        (
            "attention d128",
            flash_attention(BF16, 128, false, AttnConfig::hopper_for(128, false)),
        ),
        (
            "attention d128 causal",
            flash_attention(BF16, 128, true, AttnConfig::hopper_for(128, true)),
        ),
        (
            "attention d64",
            flash_attention(BF16, 64, false, AttnConfig::hopper_for(64, false)),
        ),
        (
            "attention d64 causal",
            flash_attention(BF16, 64, true, AttnConfig::hopper_for(64, true)),
        ),
        // Attention with a producer warpgroup asked for (d128's default has one; d64's not).
        (
            "attention d128 warp-specialized",
            flash_attention(
                BF16,
                128,
                false,
                AttnConfig {
                    warp_specialize: Some(true),
                    ..AttnConfig::hopper_for(128, false)
                },
            ),
        ),
        (
            "attention d64 warp-specialized",
            flash_attention(
                BF16,
                64,
                false,
                AttnConfig {
                    warp_specialize: Some(true),
                    ..AttnConfig::hopper_for(64, false)
                },
            ),
        ),
    ];
    let mma = vec![
        (
            "gemm NT mma.sync",
            gemm(Layout::NT, BF16, BF16, GemmConfig::gpu()),
        ),
        (
            "attention d128 mma.sync",
            flash_attention(
                BF16,
                128,
                false,
                AttnConfig {
                    instruction: Some(tilelang::ir::GemmInstruction::MmaSync),
                    ..AttnConfig::gpu()
                },
            ),
        ),
    ];
    let mut failures = vec![];
    for (group, kernels, want) in [
        // sm_90a: pipelined tiles arrive by TMA (UTMALDG).
        ("hopper", hopper, vec!["HGMMA", "UTMALDG"]),
        ("mma.sync", mma, vec!["HMMA", "LDSM", "UTMALDG"]),
    ] {
        for (what, k) in kernels {
            let specialized = what.contains("warp-specialized");
            if specialized {
                match k.emit_ptx(Target::SM90) {
                    Ok(p)
                        if p.contains("setmaxnreg.inc.sync.aligned.u32 232")
                            && p.contains(".maxntid 384")
                            && !p.contains(".minnctapersm") => {}
                    Ok(p) => failures.push(format!(
                        "{group} {what}: no register split for 2 consumer warpgroups:\n{}",
                        &p[..p.len().min(3000)]
                    )),
                    Err(e) => failures.push(format!("{group} {what}: {e}")),
                }
            }
            // No spills at all: the d64 attention under its 128-register bound spilled 16-36
            // bytes and had its wgmmas serialized (C7512) until the printer deferred its
            // writes to register-held elements (each rewritten accumulator element then a
            // new value, not a reuse of the accumulator's register).
            let ptx = match k.emit_ptx(Target::SM90) {
                Ok(p) => p,
                Err(e) => {
                    failures.push(format!("{group} {what}: {e}"));
                    continue;
                }
            };
            // Assembled whole by ptxas (which the installer provides), a kernel that moves
            // registers between warpgroups keeps the moves (nvJitLink would drop them).
            let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
            if tl_nvrtc::needs_whole_program(&ptx) && tl_nvrtc::Ptxas::global().is_some() {
                want.push("USETMAXREG".into());
            }
            let opts = tl_nvrtc::CheckOptions {
                require_instructions: want,
                ..Default::default()
            };
            match tl_nvrtc::check_with(&ptx, "sm_90a", &opts) {
                // C7509: serialized for an external call (a division's slow path); C7512:
                // for registers.
                Ok(r) if r.log.contains("serialized") => {
                    failures.push(format!("{group} {what}: wgmma serialized:\n{}", r.log))
                }
                Ok(r) => println!("{group} {what} (PTX): {r}"),
                Err(e) => failures.push(format!("{group} {what}: {e}")),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A kernel the PTX printer does not cover (`tanh`) is built from CUDA C++, and says why;
/// one it covers is PTX when nvJitLink loads (and says why not when it does not).
#[test]
fn uncovered_kernels_fall_back_to_cuda_cpp_with_the_reason() {
    use tilelang::prelude::*;
    let unary = |name: &str, f: fn(Expr) -> Expr| {
        Kernel::build(name, |k| {
            // A fixed size: no tail, whose bounds checks would be a reason of their own.
            let x = k.input("X", [1024], F32);
            let y = k.output("Y", [1024], F32);
            k.launch([8], 128, |t, [bx]| {
                let f_x = t.alloc_fragment_named("x", [128], F32);
                t.copy(x.tile([&bx * 128]), &f_x);
                t.parallel([128], |t, [i]| t.store(&f_x, [&i], f(f_x.at([&i]))));
                t.copy(&f_x, y.tile([&bx * 128]));
            });
        })
    };
    if std::env::var_os("TILELANG_BACKEND").is_some() {
        eprintln!("skipped: TILELANG_BACKEND is set, and this test is about the default");
        return;
    }
    let low = unary("tanh_all", |e| e.tanh())
        .lower(Target::SM90)
        .expect("lowers");
    let (src, why) = tilelang::nvidia_source_explained(&low, Target::SM90).expect("source");
    assert_eq!(src.language, tl_codegen::Language::CudaCpp);
    let why = why.expect("a reason for CUDA C++");
    let nvjitlink = tl_nvrtc::JitLink::global().is_ok();
    assert!(
        if nvjitlink {
            why.contains("`tanh`")
        } else {
            why.contains("nvJitLink")
        },
        "{why}"
    );

    let low = unary("exp2_all", |e| e.exp2())
        .lower(Target::SM90)
        .expect("lowers");
    let (src, why) = tilelang::nvidia_source_explained(&low, Target::SM90).expect("source");
    match nvjitlink {
        true => assert_eq!((src.language, why), (tl_codegen::Language::Ptx, None)),
        false => {
            assert_eq!(src.language, tl_codegen::Language::CudaCpp);
            assert!(why.is_some_and(|w| w.contains("nvJitLink")));
        }
    }
}

/// On sm_90a the Hopper GEMMs' pipelined tiles arrive by the tensor-memory accelerator: one
/// thread issues bulk tensor copies that complete on a barrier per stage, everyone waits on
/// the stage's phase; the tensor maps are 64-byte aligned by-value parameters. Both printers,
/// and the PTX assembles (the CUDA C++ compiles in `cuda_compile`). sm_80 keeps cp.async.
#[test]
fn hopper_gemm_tiles_arrive_by_tma() {
    use tilelang::kernels::gemm::{gemm, GemmConfig, Layout};
    use tilelang::prelude::BF16;
    for layout in [Layout::NT, Layout::NN] {
        let k = gemm(layout, BF16, BF16, GemmConfig::hopper());
        let ptx = k.emit_ptx(Target::SM90).expect("PTX");
        for want in [
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes",
            "mbarrier.arrive.expect_tx.shared::cta.b64",
            "mbarrier.try_wait.parity.shared::cta.b64",
            "mbarrier.init.shared::cta.b64",
            ".param .align 64 .b8",
            "prefetch.tensormap",
        ] {
            assert!(ptx.contains(want), "{layout:?}: no `{want}` in\n{ptx}");
        }
        assert!(!ptx.contains("cp.async.cg"), "{layout:?}: cp.async left");
        let cpp = k.emit(Target::SM90).expect("CUDA C++");
        for want in [
            "tl_tma_load_2d(",
            "const __grid_constant__ tl_tmap",
            "tl_mbar_wait(",
            "tl_prefetch_tmap(&tl_tmap0);",
        ] {
            assert!(
                cpp.contains(want),
                "{layout:?}: no `{want}` in the CUDA C++"
            );
        }
        let sm80 = gemm(layout, BF16, BF16, GemmConfig::gpu())
            .emit(Target::SM80)
            .expect("sm_80");
        assert!(!sm80.contains("tl_tma_load"), "{layout:?}: TMA on sm_80");
        if tl_nvrtc::testing::nvrtc_or_skip("hopper_gemm_tiles_arrive_by_tma").is_some() {
            if let Err(e) = tl_nvrtc::check(&ptx, "sm_90a") {
                panic!("{layout:?}: the TMA PTX does not assemble: {e}");
            }
        }
    }
}

/// The persistent Hopper GEMM's k steps find their pipeline stage as `(round·n + k) mod 3`:
/// with the symbolic sizes known non-negative that is a multiply-high, not the signed
/// division (a reciprocal on the special-function unit and two corrections) that made every
/// k step 6% slower on an H100 (gpu-notes run 19).
#[test]
fn persistent_gemm_stage_index_is_an_unsigned_division() {
    use tilelang::kernels::gemm::{gemm, GemmConfig, Layout};
    use tilelang::prelude::BF16;
    // Three stages: a stage count that is not a power of two (the default's 4 is a mask).
    let cfg = GemmConfig {
        stages: 3,
        ..GemmConfig::hopper()
    };
    assert!(cfg.persistent.is_some());
    let ptx = gemm(Layout::NT, BF16, BF16, cfg)
        .emit_ptx(Target::SM90)
        .expect("PTX");
    for signed in ["rem.s32", "div.s32"] {
        let by_three: Vec<&str> = ptx
            .lines()
            .filter(|l| l.contains(signed) && l.trim_end().ends_with(", 3;"))
            .collect();
        assert!(by_three.is_empty(), "{by_three:?} in\n{ptx}");
    }
    assert!(ptx.contains("mul.hi.u32"), "{ptx}");
}

/// The Hopper GEMM in clusters of 2 along M (`GemmConfig::cluster`): both code paths declare
/// the cluster, multicast B with a 2-block mask, release stages with `mapa` + a cluster-scope
/// arrive, sync the cluster twice, and assemble (PTX by nvJitLink, CUDA C++ by NVRTC) without
/// spills under the register split the consumers get.
#[test]
fn clustered_gemm_assembles_in_both_code_paths() {
    use tilelang::kernels::gemm::{gemm, GemmConfig, Layout};
    use tilelang::prelude::BF16;
    for layout in [Layout::NT, Layout::NN] {
        let cfg = GemmConfig {
            cluster: 2,
            ..GemmConfig::hopper()
        };
        let k = gemm(layout, BF16, BF16, cfg);
        let ptx = k.emit_ptx(Target::SM90).expect("PTX");
        assert!(ptx.contains(".reqnctapercluster 2, 1, 1"), "{ptx}");
        // B's tile: 256 rows of one 128-byte panel in NT, 64 rows of four in NN.
        let panels = if layout == Layout::NT { 1 } else { 4 };
        assert_eq!(ptx.matches(".multicast::cluster").count(), panels, "{ptx}");
        assert!(ptx.contains("mapa.shared::cluster.u32"), "{ptx}");
        assert!(ptx.contains("mbarrier.arrive.shared::cluster.b64"), "{ptx}");
        assert_eq!(
            ptx.matches("barrier.cluster.arrive.release.aligned")
                .count(),
            2
        );
        let cuda = k.emit(Target::SM90).expect("CUDA C++");
        assert!(cuda.contains("__cluster_dims__(2, 1, 1)"), "{cuda}");
        assert!(cuda.contains("tl_tma_load_mc_2d("), "{cuda}");
        if tl_nvrtc::testing::nvrtc_or_skip("clustered_gemm_assembles_in_both_code_paths").is_none()
        {
            return;
        }
        let arch = Target::SM90.arch();
        // (Checked under the consumers' register budget: `check_with` models `setmaxnreg`.)
        tl_nvrtc::check_with(&ptx, &arch, &tl_nvrtc::CheckOptions::default())
            .unwrap_or_else(|e| panic!("{layout:?} PTX: {e}"));
        tl_nvrtc::check(&cuda, &arch).unwrap_or_else(|e| panic!("{layout:?} CUDA: {e}"));
    }
}

/// No register a wgmma names is written between its `wgmma.fence` and the wgmma (the PTX ISA
/// asks for the fence between the two): the printer defers writes to register-held elements,
/// and the d64 attention's rescaled accumulator was at first written after the fence.
#[test]
fn wgmma_registers_are_written_before_the_fence() {
    use tilelang::kernels::flash_attention::{flash_attention, AttnConfig};
    use tilelang::kernels::gemm::{gemm, GemmConfig, Layout};
    use tilelang::prelude::{BF16, F16};
    let kernels = [
        flash_attention(BF16, 64, false, AttnConfig::hopper_for(64, false)),
        flash_attention(F16, 64, true, AttnConfig::hopper_for(64, true)),
        flash_attention(BF16, 128, false, AttnConfig::hopper_for(128, false)),
        gemm(Layout::NT, BF16, BF16, GemmConfig::hopper()),
    ];
    for k in kernels {
        let ptx = k.emit_ptx(Target::SM90).expect("prints PTX");
        let lines: Vec<&str> = ptx.lines().map(str::trim).collect();
        let mut fences = 0;
        for (i, l) in lines.iter().enumerate() {
            if !l.starts_with("wgmma.fence") {
                continue;
            }
            fences += 1;
            let Some(end) = lines[i..]
                .iter()
                .position(|l| l.starts_with("wgmma.mma_async"))
            else {
                continue;
            };
            let mma = lines[i + end];
            // The accumulator and register-operand lists: the `{...}` groups.
            let named: Vec<&str> = mma
                .split('{')
                .skip(1)
                .filter_map(|g| g.split('}').next())
                .flat_map(|g| g.split(',').map(str::trim))
                .collect();
            for between in &lines[i + 1..i + end] {
                let written = between
                    .split_whitespace()
                    .nth(1)
                    .map(|d| d.trim_end_matches(','));
                if let Some(d) = written.filter(|d| named.contains(d)) {
                    panic!(
                        "{}: {d} written between the fence and `{}`: `{between}`",
                        k.name(),
                        &mma[..mma.len().min(60)]
                    );
                }
            }
        }
        assert!(fences > 0, "{}: no wgmma.fence", k.name());
    }
}

/// The d128 attention's main loop, as ptxas schedules it (SASS): Q·Kᵀ starts from a zero
/// accumulator inside the wgmma (`RZ, !UPT`: scale-d 0) rather than after zeroing
/// instructions (32 `CS2R` a step and thread), and in the defaults, causal and not, every
/// exponential of step j is issued before the wait for P·V of step j − 1 (the wait pinned
/// below the softmax; left to ptxas it rose above all but a row's max). The causal kernel
/// with the wait left to ptxas (`pin_pv_wait: false`, its default until gpu-notes run 39)
/// shows the wait first: the check sees the difference the pin makes.
#[test]
fn attention_softmax_runs_beside_the_previous_pv() {
    use tilelang::kernels::flash_attention::{flash_attention, AttnConfig};
    use tilelang::prelude::BF16;
    if tl_nvrtc::testing::nvrtc_or_skip("attention_softmax_runs_beside_the_previous_pv").is_none() {
        return;
    }
    let opts = tl_nvrtc::CheckOptions {
        sass: if tl_nvrtc::testing::cuobjdump_required() {
            tl_nvrtc::SassMode::Required
        } else {
            tl_nvrtc::SassMode::IfAvailable
        },
        ..Default::default()
    };
    for (causal, pinned, printer) in [
        (false, true, "PTX"),
        (true, true, "PTX"),
        (true, false, "PTX"),
        (false, true, "CUDA C++"),
    ] {
        let cfg = AttnConfig {
            pin_pv_wait: pinned,
            ..AttnConfig::hopper_for(128, causal)
        };
        let k = flash_attention(BF16, 128, causal, cfg);
        let source = match printer {
            "PTX" => k.emit_ptx(Target::SM90),
            _ => k.emit(Target::SM90),
        }
        .expect("source");
        let report = tl_nvrtc::check_with(&source, "sm_90a", &opts).expect("compiles");
        let Some(sass) = report.sass else {
            eprintln!("SKIPPED attention_softmax_runs_beside_the_previous_pv: no cuobjdump");
            return;
        };
        let lines: Vec<&str> = sass.lines().collect();
        let at = |pat: &str| lines.iter().position(|l| l.contains(pat));
        // The loop's Q·Kᵀ group comes first and starts from zero.
        let first_hgmma = lines
            .iter()
            .find(|l| l.contains("HGMMA"))
            .expect("wgmma in SASS");
        assert!(
            first_hgmma.contains("RZ, !UPT"),
            "{printer} causal={causal}: Q·Kᵀ does not start from a zero accumulator: {first_hgmma}"
        );
        let loop_top = at("WARPGROUP.DEPBAR.LE gsb0, 0x1").expect("the wait for Q·Kᵀ");
        let pv_wait = loop_top
            + lines[loop_top..]
                .iter()
                .position(|l| l.contains("WARPGROUP.DEPBAR.LE gsb0, 0x0"))
                .expect("P·V's wait");
        let exps_after_wait = lines[pv_wait..]
            .iter()
            .take_while(|l| !l.contains("HGMMA"))
            .filter(|l| l.contains("MUFU.EX2"))
            .count();
        let exps_before_wait = lines[loop_top..pv_wait]
            .iter()
            .filter(|l| l.contains("MUFU.EX2"))
            .count();
        println!(
            "{printer} causal={causal} pinned={pinned}: exponentials before P·V's wait \
             {exps_before_wait}, after {exps_after_wait}"
        );
        if pinned {
            assert!(
                exps_before_wait >= 64 && exps_after_wait == 0,
                "{printer} causal={causal}: the softmax's exponentials ({exps_before_wait} \
                 before, {exps_after_wait} after) do not all run before the wait for the \
                 previous P·V"
            );
        } else {
            assert!(
                exps_after_wait > exps_before_wait,
                "causal: the wait was left to ptxas, which raises it above the exponentials"
            );
        }
    }
}
