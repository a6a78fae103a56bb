//! Every example at small, odd sizes: it must pass its own reference check (exit code 0) and
//! print the summary line last. `cargo test` builds the examples next to this test binary.

use std::path::PathBuf;
use std::process::Command;

fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    // target/<profile>/deps/examples-<hash> → target/<profile>/examples/<name>
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target profile directory")
        .join("examples");
    dir.join(name)
}

fn run(name: &str, args: &[&str]) -> String {
    run_on(name, args, "cpu")
}

fn run_on(name: &str, args: &[&str], device: &str) -> String {
    let path = example(name);
    assert!(
        path.exists(),
        "{} was not built: run the whole `cargo test` (it builds the examples) or `cargo build --examples`",
        path.display()
    );
    let out = Command::new(&path)
        .args(args)
        .args(["--reps", "2", "--device", device])
        .output()
        .expect("example runs");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        out.status.success(),
        "{name} {args:?} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let last = stdout.lines().last().unwrap_or_default().to_string();
    assert!(
        last.starts_with(name) && last.contains(" err=") && last.contains(" ms="),
        "summary line: {last}"
    );
    last
}

#[test]
fn gemm_all_layouts_and_types() {
    for layout in ["nn", "nt", "tn"] {
        for dtype in ["f32", "bf16"] {
            run(
                "gemm",
                &[
                    "--m", "67", "--n", "45", "--k", "99", "--layout", layout, "--dtype", dtype,
                ],
            );
        }
    }
    // Tiles smaller than the problem, with tails in every dimension.
    run(
        "gemm",
        &[
            "--m", "130", "--n", "70", "--k", "50", "--bm", "64", "--bn", "32", "--bk", "16",
        ],
    );
}

/// K split over several blocks per tile and summed by a second kernel, checked against the
/// f64 reference: tails in every dim, a share with fewer k tiles than the others, and (K = 40
/// in 16-deep tiles over 4 splits: 3 tiles) a split with none, whose share is zeros. On the
/// CPU and, for the Hopper tiles the default picks for a small problem, in the simulator.
#[test]
fn gemm_split_k_sums_every_share() {
    for (layout, dtype, k, splits) in [("nt", "bf16", "99", "3"), ("nn", "f32", "40", "4")] {
        let last = run(
            "gemm",
            &[
                "--m",
                "67",
                "--n",
                "45",
                "--k",
                k,
                "--layout",
                layout,
                "--dtype",
                dtype,
                "--bm",
                "32",
                "--bn",
                "32",
                "--bk",
                "16",
                "--split-k",
                splits,
            ],
        );
        assert!(last.contains(&format!("split_k={splits}")), "{last}");
    }
    let last = run_on(
        "gemm",
        &[
            "--m",
            "70",
            "--n",
            "72",
            "--k",
            "200",
            "--layout",
            "tn",
            "--dtype",
            "bf16",
            "--split-k",
            "3",
        ],
        "sim:sm_90a",
    );
    assert!(last.contains("split_k=3"), "{last}");
    // The default's own refits (`GemmConfig::fit_to_gpu`), each over more k tiles than
    // stages, so every stage's barriers go round more than once:
    for (m, n, k, want) in [
        // M = 50 on one consumer warpgroup in a 64×64 tile, 129 k tiles split in 8;
        ("50", "64", "8256", "tiles=64x64x64 stages=12 split_k=8"),
        // 4 output tiles of 64×256 and K too shallow to split: 32 tiles of 64×32;
        ("64", "1024", "1152", "tiles=64x32x64 stages=16"),
        // 6 tiles of 128×64, each k step's wgmma running into the next.
        ("200", "136", "1152", "tiles=128x64x64 stages=8 overlap"),
    ] {
        let args = [
            "--m", m, "--n", n, "--k", k, "--layout", "nt", "--dtype", "bf16",
        ];
        let last = run_on("gemm", &args, "sim:sm_90a");
        assert!(last.contains(want), "{last}");
    }
    // Wider tiles from the command line over that 16-stage refit keep its shared memory,
    // not its stage count (which ran out of shared memory before: 64×128 in 16 stages).
    let args = [
        "--m", "64", "--n", "1024", "--k", "1152", "--layout", "nt", "--dtype", "bf16", "--bn",
        "128",
    ];
    let last = run_on("gemm", &args, "sim:sm_90a");
    assert!(last.contains("tiles=64x128x64 stages=8"), "{last}");
}

/// `gemm --by-residue`: NN with an odd-K A read in place by row residue, checked against the
/// f64 reference on the CPU and in the simulator (sm_90a, the TMA and wgmma kernel); the
/// shapes it does not take are refused with what it needs.
#[test]
fn gemm_by_residue_runs_and_refuses_what_it_cannot_take() {
    let args = [
        "--m",
        "72",
        "--n",
        "256",
        "--k",
        "101",
        "--layout",
        "nn",
        "--dtype",
        "bf16",
        "--by-residue",
    ];
    for dev in ["cpu", "sim:sm_90a"] {
        let last = run_on("gemm", &args, dev);
        assert!(last.contains("nn-by-residue"), "{last}");
    }
    for bad in [
        &["--m", "70", "--n", "256", "--layout", "nn"][..],
        &["--m", "72", "--n", "256", "--layout", "nt"],
        &["--m", "72", "--n", "250", "--layout", "nn"],
    ] {
        let out = Command::new(example("gemm"))
            .args(bad)
            .args([
                "--k",
                "101",
                "--dtype",
                "bf16",
                "--by-residue",
                "--device",
                "cpu",
            ])
            .output()
            .expect("runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad:?} ran");
        assert!(
            err.contains("--by-residue takes --layout nn"),
            "{bad:?}: {err}"
        );
    }
}

/// Where reading A by row residue pays (`gemm_residue::residue_pays`), `--emit` writes it as
/// the sm_90a kernel — the one a Hopper run takes by default — and the copy-first GEMM where
/// it does not pay or `--no-by-residue` asks; the CPU target keeps the plain GEMM.
#[test]
fn gemm_emits_the_residue_kernel_where_it_pays() {
    for (extra, sm90a) in [
        (&["--k", "4095"][..], "gemm_nn_residue.sm_90a.ptx"),
        (&["--k", "4095", "--no-by-residue"], "gemm_nn.sm_90a.ptx"),
        (&["--k", "2047"], "gemm_nn.sm_90a.ptx"),
        (&["--k", "4096"], "gemm_nn.sm_90a.ptx"),
    ] {
        let dir = std::env::temp_dir().join(format!(
            "tl-emit-res-{}-{}",
            std::process::id(),
            extra.len()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let out = Command::new(example("gemm"))
            .args([
                "--m", "4096", "--n", "4096", "--layout", "nn", "--dtype", "bf16",
            ])
            .args(extra)
            .args(["--emit", dir.to_str().unwrap_or("/tmp/tl-emit-res")])
            .output()
            .expect("runs");
        let listing: Vec<String> = std::fs::read_dir(&dir)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        assert!(
            out.status.success(),
            "{extra:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(dir.join(sm90a).exists(), "{extra:?}: {listing:?}");
        assert!(dir.join("gemm_nn.cpu.c").exists(), "{extra:?}: {listing:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// `gemm --realign-b`: NN with a B whose rows are not whole 16-byte units read in place by
/// row residue and realigned in shared memory, checked against the f64 reference on the CPU
/// and in the simulator (sm_90a, the TMA and wgmma kernel); the shapes it does not take are
/// refused with what it needs.
#[test]
fn gemm_realigning_b_runs_and_refuses_what_it_cannot_take() {
    let args = [
        "--m",
        "70",
        "--n",
        "133",
        "--k",
        "72",
        "--layout",
        "nn",
        "--dtype",
        "bf16",
        "--realign-b",
    ];
    for dev in ["cpu", "sim:sm_90a"] {
        let last = run_on("gemm", &args, dev);
        assert!(last.contains("nn-realign-b"), "{last}");
    }
    for bad in [
        &["--k", "72", "--layout", "nt"][..],
        &["--k", "70", "--layout", "nn"],
    ] {
        let out = Command::new(example("gemm"))
            .args(bad)
            .args(["--m", "70", "--n", "133", "--dtype", "bf16", "--realign-b"])
            .args(["--device", "cpu"])
            .output()
            .expect("runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad:?} ran");
        assert!(
            err.contains("--realign-b takes --layout nn"),
            "{bad:?}: {err}"
        );
    }
}

/// Where realigning B pays (`gemm_realign::realign_pays`: decode-sized M, an odd N), `--emit`
/// writes it as the sm_90a kernel — the one a Hopper run takes by default — and the copy-first
/// GEMM where it does not pay, where tile options are given or `--no-realign-b` asks.
#[test]
fn gemm_emits_the_realigning_kernel_where_it_pays() {
    for (i, (extra, sm90a)) in [
        (&["--m", "64"][..], "gemm_nn_realign_b.sm_90a.ptx"),
        (&["--m", "64", "--no-realign-b"], "gemm_nn.sm_90a.ptx"),
        (&["--m", "64", "--bn", "64"], "gemm_nn.sm_90a.ptx"),
        (&["--m", "256"], "gemm_nn.sm_90a.ptx"),
    ]
    .into_iter()
    .enumerate()
    {
        let dir = std::env::temp_dir().join(format!("tl-emit-ra-{}-{i}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let out = Command::new(example("gemm"))
            .args([
                "--n", "50257", "--k", "4096", "--layout", "nn", "--dtype", "bf16",
            ])
            .args(extra)
            .args(["--emit", dir.to_str().unwrap_or("/tmp/tl-emit-ra")])
            .output()
            .expect("runs");
        assert!(
            out.status.success(),
            "{extra:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(dir.join(sm90a).exists(), "{extra:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn elementwise_odd_length() {
    run("elementwise", &["--n", "10007"]);
    run(
        "elementwise",
        &["--rows", "3", "--n", "1001", "--block", "256"],
    );
    run(
        "elementwise",
        &["--n", "333", "--dtype", "bf16", "--block", "128"],
    );
    // Timed back to back (the profiler's count of runs is tests/timing.rs's); 0 is refused.
    run("elementwise", &["--n", "1001", "--back-to-back", "3"]);
    let out = Command::new(example("elementwise"))
        .args(["--n", "1001", "--back-to-back", "0"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--back-to-back"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn softmax_and_rmsnorm_odd_rows() {
    for ex in ["softmax", "rmsnorm"] {
        run(ex, &["--rows", "37", "--cols", "1003", "--chunk", "256"]);
        run(
            ex,
            &[
                "--rows",
                "5",
                "--cols",
                "77",
                "--dtype",
                "bf16",
                "--chunk",
                "32",
                "--block-rows",
                "2",
            ],
        );
    }
}

#[test]
fn flash_attention_causal_and_not() {
    run(
        "flash_attention",
        &[
            "--batch", "1", "--heads", "2", "--seq", "77", "--dim", "32", "--bm", "32", "--bn",
            "16",
        ],
    );
    run(
        "flash_attention",
        &[
            "--batch", "2", "--heads", "1", "--seq", "45", "--dim", "64", "--causal", "--bm", "16",
            "--bn", "32",
        ],
    );
    run(
        "flash_attention",
        &[
            "--seq", "50", "--dim", "64", "--causal", "--dtype", "bf16", "--bm", "32", "--bn", "32",
        ],
    );
    // Causal grids are dealt heaviest first over groups of heads (`AttnConfig::group_heads`):
    // 38 query tiles make groups of 3 of the 4 heads, the last group short.
    run(
        "flash_attention",
        &[
            "--batch", "2", "--heads", "2", "--seq", "600", "--dim", "16", "--causal", "--bm",
            "16", "--bn", "16",
        ],
    );
}

#[test]
fn softmax_and_rmsnorm_split_over_blocks() {
    // Few long rows split over blocks (two kernels): on the CPU (one and two groups of span
    // statistics to combine) and in the simulator for sm_80 and sm_90a.
    for name in ["softmax", "rmsnorm"] {
        let small = [
            "--rows", "3", "--cols", "10001", "--split", "--span", "4096",
        ];
        run(name, &small);
        let wide = [
            "--rows", "2", "--cols", "600001", "--split", "--span", "2048", "--dtype", "bf16",
        ];
        run(name, &wide);
        for dev in ["sim", "sim:sm_90a"] {
            let args: Vec<&str> = small.iter().chain(&["--dtype", "bf16"]).copied().collect();
            let last = run_on(name, &args, dev);
            assert!(last.contains("split=3x4096"), "{last}");
        }
        let out = Command::new(example(name))
            .args(["--split", "--span", "1000", "--device", "cpu"])
            .output()
            .expect("runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("multiple of 2048"),
            "{err}"
        );
    }
}

#[test]
fn fp8_gemm_scalings_and_types() {
    // Against the definition in f64: per-tensor (promoted and not) and per-block scales, both
    // fp8 formats and their mix, odd sizes; on the CPU backend and, in the Hopper tiles' small
    // form, the simulator for sm_90a (fp8 wgmma, TMA loads).
    let size = ["--m", "70", "--n", "200", "--k", "301"];
    for (dev, tiles) in [
        ("cpu", &[][..]),
        (
            "sim:sm_90a",
            &[
                "--bm",
                "64",
                "--bn",
                "128",
                "--threads",
                "128",
                "--stages",
                "3",
            ][..],
        ),
    ] {
        for extra in [
            &["--scaling", "tensor"][..],
            &["--scaling", "tensor", "--fast-accum", "--a", "e5m2"],
            &["--scaling", "blocks", "--b", "e5m2"],
            // K split in 3 (shares of the 3 k tiles of 128: one each; in 64-deep tiles on
            // the CPU, 2, 2 and 1), summed by a second kernel.
            &["--scaling", "blocks", "--split-k", "3"],
            &["--scaling", "tensor", "--split-k", "3"],
        ] {
            let args: Vec<&str> = size.iter().chain(tiles).chain(extra).copied().collect();
            let last = run_on("fp8_gemm", &args, dev);
            assert!(last.contains("err="), "{last}");
            if extra.contains(&"--split-k") {
                assert!(last.contains("split_k=3"), "{last}");
            }
        }
    }
    // The default's refit of a one-tile problem (`Fp8Gemm::fit_to_gpu`): 64×64 tiles of
    // 128-deep k, two blocks an SM, 6 stages over 8 k tiles (the barriers go round twice).
    let last = run_on(
        "fp8_gemm",
        &["--m", "64", "--n", "72", "--k", "1024"],
        "sim:sm_90a",
    );
    assert!(last.contains("tiles=64x64x128 stages=6"), "{last}");
    // Fast accumulation takes the bf16 refit: 3 tiles of 64×32 over 32 k tiles of 128 in 16
    // stages.
    let last = run_on(
        "fp8_gemm",
        &["--m", "64", "--n", "72", "--k", "4096", "--fast-accum"],
        "sim:sm_90a",
    );
    assert!(last.contains("tiles=64x32x128 stages=16"), "{last}");
    // And its 128×64 tiles, which leave each k step's wgmma running into the next: the
    // summary says so, as the bf16 example's does.
    let last = run_on(
        "fp8_gemm",
        &["--m", "200", "--n", "136", "--k", "1152", "--fast-accum"],
        "sim:sm_90a",
    );
    assert!(last.contains("tiles=128x64x128 stages=8 overlap"), "{last}");
    // Nonsense is refused with the reason.
    for (bad, why) in [
        (&["--a", "bf16"][..], "not an fp8 type"),
        (
            &["--scaling", "blocks", "--fast-accum"],
            "per-tensor scaling only",
        ),
        (
            &["--scaling", "blocks", "--bk", "256"],
            "divide the 128-wide scale blocks",
        ),
        (
            &["--overlap-promotion", "--split-k", "2", "--stages", "3"],
            "does not split K",
        ),
    ] {
        let out = Command::new(example("fp8_gemm"))
            .args(bad)
            .args(["--device", "cpu"])
            .output()
            .expect("runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(why), "{bad:?}: {err}");
    }
}

#[test]
fn emit_writes_sources_without_running() {
    let dir = std::env::temp_dir().join(format!("tl-emit-{}", std::process::id()));
    let out = Command::new(example("gemm"))
        .args(["--emit", dir.to_str().unwrap_or("/tmp/tl-emit")])
        .output()
        .expect("runs");
    assert!(out.status.success());
    assert!(dir.join("gemm_nn.cpu.c").exists());
    let _ = std::fs::remove_dir_all(dir);
}

/// `--emit` of a row-wise example writes what each target's defaults would launch: few long
/// rows take the cluster kernel on sm_90a and the two-kernel split on sm_80 (an A100's 108
/// multiprocessors, an H100's 132); many short rows one block a row everywhere.
#[test]
fn row_examples_emit_each_targets_default_kernels() {
    for name in ["softmax", "rmsnorm"] {
        let dir = std::env::temp_dir().join(format!("tl-emit-{name}-{}", std::process::id()));
        let emit = |rows: &str, cols: &str| {
            let _ = std::fs::remove_dir_all(&dir);
            let out = Command::new(example(name))
                .args(["--rows", rows, "--cols", cols, "--dtype", "bf16"])
                .args(["--emit", dir.to_str().unwrap_or("/tmp/tl-emit-rows")])
                .output()
                .expect("runs");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let mut files: Vec<String> = std::fs::read_dir(&dir)
                .expect("emitted")
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect();
            files.sort();
            files
        };
        let few_long = emit("32", "262144");
        for want in [
            format!("{name}_cluster.sm_90a.ptx"),
            format!("{name}_split_stats.sm_80.ptx"),
            format!("{name}_split_apply.sm_80.ptx"),
            format!("{name}.cpu.c"),
        ] {
            assert!(few_long.contains(&want), "{want} not in {few_long:?}");
        }
        assert!(
            !few_long
                .iter()
                .any(|f| f.starts_with(&format!("{name}.sm_"))),
            "{few_long:?}"
        );
        let many_short = emit("1000", "3000");
        assert!(
            many_short
                .iter()
                .all(|f| !f.contains("cluster") && !f.contains("split")),
            "{many_short:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn bad_arguments_fail_cleanly() {
    let out = Command::new(example("gemm"))
        .args(["--layout", "xx"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown layout"));
}

/// A negative size is answered with what is wrong (exit 2), not with bare usage: clap would
/// otherwise take `-5` for an unknown option.
#[test]
fn negative_sizes_say_sizes_must_be_non_negative() {
    for (name, args) in [
        ("gemm", &["--m", "-5"][..]),
        ("gemm", &["--k", "-1", "--layout", "nt"]),
        ("gemm", &["--bm", "-64"]),
        ("elementwise", &["--n", "-3"]),
        ("softmax", &["--rows", "-1"]),
        ("rmsnorm", &["--cols", "-7"]),
        ("flash_attention", &["--seq", "-100"]),
    ] {
        let out = Command::new(example(name))
            .args(args)
            .args(["--device", "cpu"])
            .output()
            .expect("runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name} {args:?}: {err}");
        assert!(err.contains("sizes must be ≥ 0"), "{name} {args:?}: {err}");
        assert!(err.contains(args[1]), "names the value: {err}");
    }
    // Not a number at all: still a clear error; zero is a valid size.
    let out = Command::new(example("gemm"))
        .args(["--m", "ten"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a size"));
}

/// `--isa ARCH`: the kernel compiled for an AMD architecture by clang and its ISA report, with
/// no AMD GPU; for each example. Without clang only the argument errors are checked.
#[test]
fn isa_prints_the_amd_report_without_a_gpu() {
    let isa = |name: &str, args: &[&str]| {
        Command::new(example(name))
            .args(args)
            .env_remove("TILELANG_DEVICE")
            .output()
            .expect("runs")
    };
    // Not an AMD target: exit code 2 and what to pass instead, before clang is needed.
    for (args, words) in [
        (
            &["--isa", "sm_90a"][..],
            &["target is sm_90a", "--isa gfx950"][..],
        ),
        (
            &["--isa", "--device", "cpu"],
            &["target is cpu", "--isa gfx942"],
        ),
        (&["--isa", "gfx90a"], &["gfx90a", "gfx942", "gfx950"]),
    ] {
        let out = isa("gemm", args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        for w in words {
            assert!(err.contains(w), "{args:?}: `{w}` missing from: {err}");
        }
    }
    if tilelang::amdgpu::toolchain::clang_or_skip("isa_prints_the_amd_report_without_a_gpu")
        .is_none()
    {
        return;
    }
    for (name, args, kernel) in [
        (
            "gemm",
            &["--layout", "nt", "--dtype", "bf16", "--isa", "gfx950"][..],
            "tl_kernel_gemm_nt (gfx950)",
        ),
        (
            "flash_attention",
            &["--dim", "64", "--dtype", "bf16", "--isa", "gfx942"],
            "tl_kernel_flash_attn_fwd (gfx942)",
        ),
        (
            "softmax",
            &["--cols", "4096", "--dtype", "bf16", "--isa", "gfx950"],
            "tl_kernel_softmax_row (gfx950)",
        ),
        (
            "rmsnorm",
            &["--isa", "gfx942"],
            "tl_kernel_rmsnorm_row (gfx942)",
        ),
        (
            "elementwise",
            &["--dtype", "bf16", "--isa", "gfx950"],
            "tl_kernel_add_relu (gfx950)",
        ),
        // Without an architecture: the simulator device's.
        (
            "gemm",
            &["--dtype", "bf16", "--device", "sim:gfx942", "--isa"],
            "tl_kernel_gemm_nn (gfx942)",
        ),
    ] {
        let out = isa(name, args);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{name} {args:?}: {}\n{text}",
            String::from_utf8_lossy(&out.stderr)
        );
        for w in [
            &format!("kernel {kernel}") as &str,
            "registers",
            "spills      0 VGPR, 0 SGPR; scratch 0 B",
            "occupancy",
            "clang version",
        ] {
            assert!(
                text.contains(w),
                "{name} {args:?}: `{w}` missing from:\n{text}"
            );
        }
        // Nothing ran: no summary line.
        assert!(!text.contains(" err="), "{name} {args:?} ran:\n{text}");
        if name == "gemm" {
            assert!(text.contains("MFMA"), "{name} {args:?}:\n{text}");
        }
    }
}

/// Every example on the AMD lowering, in the simulator (64-lane waves, MFMA, direct-to-LDS
/// loads, LDS transposed reads on gfx950), at odd sizes, with the default AMD tiles: each checks
/// itself against its f64 reference.
#[test]
fn every_example_in_the_simulator_for_gfx950_and_gfx942() {
    for dev in ["sim:gfx950", "sim:gfx942"] {
        for layout in ["nt", "nn", "tn"] {
            let args = [
                "--m", "70", "--n", "90", "--k", "200", "--dtype", "bf16", "--layout", layout,
            ];
            run_on("gemm", &args, dev);
        }
        run_on("elementwise", &["--n", "1001", "--dtype", "bf16"], dev);
        run_on(
            "softmax",
            &["--rows", "3", "--cols", "1001", "--dtype", "bf16"],
            dev,
        );
        run_on(
            "rmsnorm",
            &["--rows", "3", "--cols", "1001", "--dtype", "bf16"],
            dev,
        );
        for causal in [&[][..], &["--causal"][..]] {
            let mut args = vec![
                "--batch", "1", "--heads", "1", "--seq", "70", "--dim", "64", "--dtype", "bf16",
            ];
            args.extend_from_slice(causal);
            run_on("flash_attention", &args, dev);
        }
    }
}

/// The multi-rank example on simulated ranks: every kernel agrees with its single-device
/// reference on 1, 2 and 3 ranks (the simulator's memory-order check on).
#[test]
fn distributed_kernels_on_simulated_ranks() {
    for kernel in [
        "all-gather",
        "ag-gemm",
        "gemm-rs",
        "all-reduce",
        "all-reduce-two-shot",
    ] {
        for ranks in ["1", "3"] {
            let last = run_on(
                "distributed",
                &[
                    "--kernel", kernel, "--ranks", ranks, "--m", "70", "--n", "40", "--k", "48",
                ],
                "sim",
            );
            assert!(last.ends_with("PASS"), "{last}");
        }
    }
    // GEMM + RS pushing bf16 partials.
    let last = run_on(
        "distributed",
        &[
            "--kernel",
            "gemm-rs",
            "--ranks",
            "2",
            "--m",
            "70",
            "--n",
            "40",
            "--k",
            "48",
            "--partials",
            "bf16",
        ],
        "sim",
    );
    assert!(last.ends_with("PASS"), "{last}");
    // The MoE round trip (dispatch, identity expert, combine, gather): every token back, a
    // token sent once per choice or (`--dedup`) once per destination rank.
    for (ranks, dedup) in [("1", false), ("3", false), ("2", true)] {
        let mut args = vec![
            "--kernel",
            "moe",
            "--ranks",
            ranks,
            "--m",
            "70",
            "--k",
            "40",
            "--topk",
            "4",
            "--experts",
            "12",
        ];
        if dedup {
            args.push("--dedup");
        }
        let last = run_on("distributed", &args, "sim");
        assert!(last.ends_with("PASS"), "{last}");
    }
    // Through NVSHMEM's calls (each warp's run of a copy one call), with the producer
    // warpgroup too: there only the consumer warps copy, which NVSHMEM's block calls (a
    // first form) got wrong on the GPU.
    for kernel in ["ag-gemm", "gemm-rs"] {
        for ws in ["--ws", "--no-ws"] {
            let last = run_on(
                "distributed",
                &[
                    "--kernel",
                    kernel,
                    "--ranks",
                    "2",
                    "--m",
                    "256",
                    "--n",
                    "256",
                    "--k",
                    "128",
                    "--aligned",
                    ws,
                    "--nvshmem",
                ],
                "sim",
            );
            assert!(last.ends_with("PASS"), "{kernel} {ws}: {last}");
        }
    }
    // Back to back: the memory-order check spans the calls.
    let last = run_on(
        "distributed",
        &[
            "--kernel",
            "ag-gemm",
            "--ranks",
            "2",
            "--m",
            "40",
            "--n",
            "64",
            "--k",
            "32",
            "--back-to-back",
            "2",
        ],
        "sim",
    );
    assert!(
        last.contains("calls=2 order_checked=true") && last.ends_with("PASS"),
        "{last}"
    );
}
