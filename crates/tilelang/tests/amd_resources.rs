//! Registers and spills of AMD kernels through the driver: `Kernel::precompile_for` (by
//! target, no GPU) caches clang's code object with the usage its assembly reports and finds
//! both again; `Executable::resource_usage` has them for HIP executables, on a cache hit too;
//! and the autotuner rejects a candidate that spills. The HIP device is the mock
//! `libamdhip64.so` of crates/runtime/tests/mock_hip (it loads clang's real code objects and
//! records launches without running them), in a child process with its own environment. Needs
//! clang (LLVM 20+), not an AMD GPU.

use std::path::{Path, PathBuf};
use std::process::Command;

use tilelang::autotune::{autotune, Outcome, Space, TuneOptions};
use tilelang::kernels::gemm::{gemm, GemmConfig, Layout};
use tilelang::prelude::*;

/// 128×256×32 bf16 tiles on one wave: the 128 KiB accumulator does not fit a lane's 512
/// VGPRs, so clang spills (hundreds of VGPRs with clang 22).
fn spilling() -> GemmConfig {
    GemmConfig::tiles(128, 256, 32, 2, 64)
}

/// 64×64×32 bf16 tiles on four waves: 97 VGPRs, no spills.
fn fitting() -> GemmConfig {
    GemmConfig::tiles(64, 64, 32, 2, 256)
}

fn kernel(cfg: GemmConfig) -> Kernel {
    gemm(Layout::NT, BF16, BF16, cfg)
}

fn scratch_dir(what: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tl-amd-res-{what}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// By target, without a device: a miss runs clang and stores the usage; a hit finds the same
/// usage without clang, also when the entry was made by another process; an entry without its
/// usage file (made by an older version) is compiled again.
#[test]
fn precompile_for_caches_the_usage_clang_reports() {
    if tilelang::amdgpu::toolchain::clang_or_skip("precompile_for_caches_the_usage").is_none() {
        return;
    }
    let dir = scratch_dir("pre");
    let opts = CompileOptions {
        cache_dir: Some(dir.clone()),
        ..Default::default()
    };
    let k = kernel(spilling());
    let cold = k.precompile_for(Target::GFX950, &opts).expect("cold");
    assert!(!cold.cache_hit && cold.stats.compile > std::time::Duration::ZERO);
    let u = cold.usage.clone().expect("clang's usage");
    assert!(u.spills(), "{u:?}");
    assert!(u.vgpr_spills.is_some_and(|n| n > 0), "{u:?}");
    assert_eq!((u.registers, u.binary_version), (512, 950), "{u:?}");
    assert_eq!(u.max_threads_per_block, 64);
    assert!(u.local_bytes > 0, "spills need scratch: {u:?}");
    assert!(u.static_smem_bytes >= 2 * (128 + 256) * 32 * 2, "{u:?}");
    assert!(
        u.log.contains("kernel tl_kernel_gemm_nt (gfx950)") && u.log.contains("spills"),
        "{}",
        u.log
    );
    assert!(tilelang::autotune::spill_check(Some(&u))
        .unwrap_err()
        .contains("VGPRs and 0 SGPRs spilled"));

    let hit = k.precompile_for(Target::GFX950, &opts).expect("hit");
    assert!(hit.cache_hit && hit.stats.compile.is_zero());
    assert_eq!(hit.key, cold.key);
    assert_eq!(
        hit.usage.as_ref(),
        Some(&u),
        "the same usage from the cache"
    );

    let ok = kernel(fitting())
        .precompile_for(Target::GFX950, &opts)
        .expect("fits");
    let ou = ok.usage.clone().expect("usage");
    assert!(!ou.spills() && ou.vgpr_spills == Some(0), "{ou:?}");
    assert!(tilelang::autotune::spill_check(Some(&ou)).is_ok());
    assert_ne!(ok.key, cold.key);

    // An entry without `<key>.usage` (made before usage was cached) is compiled again, and
    // then has one.
    let usage_file = tilelang::runtime::Cache::at(&dir).path(&ok.key, "usage");
    std::fs::remove_file(&usage_file).expect("the usage file exists");
    let again = kernel(fitting())
        .precompile_for(Target::GFX950, &opts)
        .expect("again");
    assert!(!again.cache_hit, "an entry without usage is a miss");
    assert_eq!(
        again.usage.as_ref().map(|u| u.registers),
        Some(ou.registers)
    );
    assert!(usage_file.is_file());

    // gfx942 is a separate entry; an LDS overflow is the compile diagnostic, not a cache error.
    let g942 = kernel(fitting())
        .precompile_for(Target::GFX942, &opts)
        .expect("gfx942");
    assert!(!g942.cache_hit && g942.key != ok.key);
    assert_eq!(g942.usage.map(|u| u.binary_version), Some(942));
    let big = kernel(GemmConfig::tiles(256, 256, 64, 2, 512));
    match big.precompile_for(Target::GFX942, &opts) {
        Err(Error::Compile(d)) => assert!(d.to_string().contains("bytes of LDS"), "{d}"),
        other => panic!("128 KiB of LDS on gfx942: {other:?}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The CPU is not a `precompile_for` target: an error that says what to use.
#[test]
fn precompile_for_the_cpu_is_an_error() {
    let dir = scratch_dir("cpu");
    let opts = CompileOptions {
        cache_dir: Some(dir.clone()),
        ..Default::default()
    };
    let e = kernel(fitting())
        .precompile_for(Target::Cpu, &opts)
        .expect_err("the CPU")
        .to_string();
    assert!(
        e.contains("not a GPU target") && e.contains("gfx950") && e.contains("Kernel::compile"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

const CHILD_ENV: &str = "TILELANG_AMD_RES_CHILD";

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

fn build_mock(dir: &Path) -> Result<PathBuf, String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../runtime/tests/mock_hip/mock_hip.c");
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let lib = dir.join("libamdhip64.so");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-O2", "-shared", "-fPIC", "-ffp-contract=off", "-w", "-o"])
        .arg(&lib)
        .arg(&src)
        .output()
        .map_err(|e| format!("{cc}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cc} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(lib)
}

/// HIP executables report clang's registers and spills (also on a cache hit), and the
/// autotuner rejects the candidate that spills, on the mock HIP runtime.
#[test]
fn hip_executables_report_spills_and_the_tuner_rejects_them() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    if tilelang::amdgpu::toolchain::clang_or_skip("hip_executables_report_spills").is_none() {
        return;
    }
    let dir = scratch_dir("mock");
    let lib = match build_mock(&dir) {
        Ok(l) => l,
        Err(e) => {
            println!("SKIPPED hip_executables_report_spills: cannot build the mock: {e}");
            return;
        }
    };
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = Command::new(exe)
        .args([
            "--exact",
            "mock_child",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &dir)
        .env("TILELANG_HIP_LIB", &lib)
        .env("MOCK_HIP_ARCHS", "gfx950:sramecc+:xnack-")
        .env("TILELANG_DISABLE_CUDA", "1")
        .env("TILELANG_CACHE_DIR", dir.join("cache"))
        .env_remove("TILELANG_DEVICE")
        .env_remove("TILELANG_AUTOTUNE")
        .env_remove("TILELANG_DISABLE_HIP")
        .output()
        .expect("re-running the test binary");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "the child run failed:\n{text}");
    assert!(
        text.contains("1 passed"),
        "the child test did not run:\n{text}"
    );
}

#[test]
#[ignore = "run by hip_executables_report_spills_and_the_tuner_rejects_them in a child process"]
fn mock_child() {
    let Some(dir) = std::env::var_os(CHILD_ENV).map(PathBuf::from) else {
        return;
    };
    let dev = Device::parse("hip:0").expect("hip:0");
    assert_eq!(
        dev.target().expect("the mock's gfx950"),
        Target::GFX950,
        "{:?}",
        Device::hip_unavailable_reason()
    );
    let opts = CompileOptions {
        cache_dir: Some(dir.join("kernels")),
        ..Default::default()
    };

    // A miss, then a hit: the same usage both times, the spill count from clang's assembly.
    let k = kernel(spilling());
    let cold = k.compile_with(&dev, &opts).expect("compiles");
    assert!(!cold.compile_stats().cache_hit);
    let u = cold
        .resource_usage()
        .expect("a HIP executable's usage")
        .clone();
    assert!(u.spills() && u.vgpr_spills.is_some_and(|n| n > 0), "{u:?}");
    assert_eq!(cold.compile_log(), Some(u.log.as_str()));
    let hit = k.compile_with(&dev, &opts).expect("a cache hit");
    assert!(hit.compile_stats().cache_hit);
    assert_eq!(hit.resource_usage(), Some(&u));
    // The hit followed the link from the tile IR: no lowering, the same source.
    assert!(
        hit.compile_stats().lower.is_zero(),
        "{:?}",
        hit.compile_stats()
    );
    assert_eq!(hit.source(), cold.source());
    // With the code object gone, the link's stored source is compiled again (still without
    // lowering), and the result is the same.
    let cache = tilelang::runtime::Cache::at(dir.join("kernels"));
    let mut removed = 0;
    for e in walk(&dir.join("kernels")) {
        if e.extension().is_some_and(|x| x == "hsaco") {
            std::fs::remove_file(&e).expect("remove the code object");
            removed += 1;
        }
    }
    assert!(
        removed > 0,
        "code objects in {}",
        cache.path("x", "hsaco").display()
    );
    let rebuilt = k.compile_with(&dev, &opts).expect("rebuilt from the link");
    assert!(!rebuilt.compile_stats().cache_hit && rebuilt.compile_stats().lower.is_zero());
    assert_eq!(rebuilt.resource_usage(), Some(&u));
    // `precompile_for` by target finds what `compile` on the gfx950 device stored.
    let pre = k.precompile_for(Target::GFX950, &opts).expect("by target");
    assert!(pre.cache_hit && pre.usage.as_ref() == Some(&u));
    let fits = kernel(fitting()).compile_with(&dev, &opts).expect("fits");
    assert!(!fits.resource_usage().expect("usage").spills());

    // The tuner compiles both, rejects the one that spills before running it, times the
    // other.
    let n = 256;
    let a = Tensor::zeros(&[n, n], BF16, &dev).expect("a");
    let b = Tensor::zeros(&[n, n], BF16, &dev).expect("b");
    let c = Tensor::zeros(&[n, n], BF16, &dev).expect("c");
    let space = Space::list(vec![spilling(), fitting()]);
    let tune_opts = TuneOptions {
        cache_dir: Some(dir.join("tune")),
        warmup: 1,
        reps: 2,
        progress: false,
        force: true,
        ..Default::default()
    };
    let (best, r) = autotune(
        "amd_spill_test",
        &space,
        |cfg: &GemmConfig| kernel(*cfg),
        &dev,
        &[Arg::Tensor(&a), Arg::Tensor(&b), Arg::Tensor(&c)],
        // The mock does not run kernels: nothing to check.
        &|| Ok(()),
        &tune_opts,
    )
    .expect("tunes");
    println!("{r}");
    assert_eq!((best.bm, best.bn, best.threads), (64, 64, 256));
    assert_eq!(r.best, 1);
    match &r.trials[0].outcome {
        Outcome::Rejected(why) => assert!(
            why.contains("spills registers") && why.contains("VGPRs and 0 SGPRs spilled"),
            "{why}"
        ),
        other => panic!("the spilling candidate was not rejected: {other:?}"),
    }
    assert!(matches!(r.trials[1].outcome, Outcome::Timed(_)), "{r}");
}
