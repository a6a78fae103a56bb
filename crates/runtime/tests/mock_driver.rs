//! The CUDA backend against a mock driver (tests/mock_cuda/mock_cuda.c), so the whole GPU path
//! — probe, cudarc's loader, contexts, device memory, fills, the NVRTC cubin cache, module
//! load, shared-memory opt-in, parameter packing, launches, timing — runs in CI, where there
//! is no GPU. The mock runs C models of the self-test's kernels and rejects pointers outside
//! live allocations, so a packing mistake fails here. It cannot tell whether the real driver
//! agrees with the mock's reading of the API: that is what `examples/cuda_smoke.rs` on a GPU is
//! for.
//!
//! The parent test builds the mock into a temporary `libcuda.so.1` and re-runs this test binary
//! with `LD_LIBRARY_PATH` pointing at it (the loader reads that variable only at start-up), where
//! the `#[ignore]`d child test does the work.

use std::path::{Path, PathBuf};
use std::process::Command;

use tl_ir::DType;
use tl_runtime::{Arg, Cache, Device, RuntimeError, Tensor};

const CHILD_ENV: &str = "TILELANG_MOCK_CUDA_CHILD";

fn build_mock(dir: &Path) -> Result<PathBuf, String> {
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mock_cuda");
    let main = std::fs::read_to_string(here.join("mock_cuda.c")).map_err(|e| e.to_string())?;
    let symbols = std::fs::read_to_string(here.join("symbols.txt")).map_err(|e| e.to_string())?;
    // Every driver symbol cudarc resolves that the mock does not implement becomes a stub.
    let mut stubs = String::from("typedef int CUresult;\n");
    for s in symbols.lines().map(str::trim).filter(|s| !s.is_empty()) {
        if !main.contains(&format!("CUresult {s}(")) {
            stubs.push_str(&format!("CUresult {s}(void) {{ return 801; }}\n"));
        }
    }
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let stubs_path = dir.join("stubs.c");
    std::fs::write(&stubs_path, stubs).map_err(|e| e.to_string())?;
    let lib = dir.join("libcuda.so.1");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-O2", "-shared", "-fPIC", "-ffp-contract=off", "-w", "-o"])
        .arg(&lib)
        .arg(here.join("mock_cuda.c"))
        .arg(&stubs_path)
        .arg("-lm")
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

#[test]
fn cuda_backend_against_a_mock_driver() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    if Device::cuda_count() > 0 {
        println!("SKIPPED cuda_backend_against_a_mock_driver: a real GPU is present (tests/cuda.rs covers it)");
        return;
    }
    if let Err(e) = tl_nvrtc::Nvrtc::global() {
        // The self-test compiles its kernels with NVRTC even against the mock.
        tl_nvrtc::testing::skip_or_fail("cuda_backend_against_a_mock_driver", &e);
        return;
    }
    let dir = std::env::temp_dir().join(format!("tl-mock-cuda-{}", std::process::id()));
    let lib = match build_mock(&dir) {
        Ok(l) => l,
        Err(e) => {
            println!(
                "SKIPPED cuda_backend_against_a_mock_driver: cannot build the mock driver: {e}"
            );
            return;
        }
    };
    let mut path = lib
        .parent()
        .map(|p| p.to_path_buf())
        .unwrap_or_default()
        .into_os_string();
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
        path.push(":");
        path.push(old);
    }
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
        .env("LD_LIBRARY_PATH", path)
        .env("TILELANG_CACHE_DIR", dir.join("cache"))
        .output()
        .expect("re-running the test binary");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "the mock-driver run failed:\n{text}");
    assert!(
        text.contains("1 passed"),
        "the child test did not run:\n{text}"
    );
    println!(
        "{}",
        text.lines()
            .find(|l| l.contains("cuda smoke OK"))
            .unwrap_or("")
    );
}

#[test]
#[ignore = "run by cuda_backend_against_a_mock_driver in a child process"]
fn mock_child() {
    let Some(dir) = std::env::var_os(CHILD_ENV).map(PathBuf::from) else {
        return;
    };
    assert_eq!(Device::cuda_count(), 1, "the mock driver was not loaded");
    let dev = Device::best();
    assert_eq!(dev, Device::Cuda(0));
    assert_eq!(dev.name().unwrap(), "tilelang mock GPU");
    assert_eq!(dev.target().unwrap().arch(), "sm_90a");
    let props = dev.cuda_props().unwrap();
    assert_eq!((props.multiprocessors, props.l2_bytes), (4, 1 << 20));

    let cache = Cache::at(dir.join("selftest"));
    let line = tl_runtime::selftest::run(&dev, &cache).unwrap();
    println!("{line}");

    // Random tensors: identical to the host generator (same libm here), for every dtype and
    // both paths (host below 65536 elements, the "device" kernel above).
    for n in [1000usize, 1 << 17] {
        for dt in [
            DType::F32,
            DType::F64,
            DType::F16,
            DType::BF16,
            DType::I32,
            DType::F8E5M2,
        ] {
            let t = Tensor::rand(&[n], dt, -3.0, 3.0, 9, &dev).unwrap();
            let mut twin = vec![0u8; t.nbytes()];
            tl_runtime::rng::fill_host(
                &mut twin,
                dt,
                9,
                tl_runtime::rng::Dist::Uniform { lo: -3.0, hi: 3.0 },
            );
            assert_eq!(t.to_bytes().unwrap(), twin, "rand {dt} n={n}");
            let t = Tensor::randn(&[n], dt, 9, &dev).unwrap();
            tl_runtime::rng::fill_host(
                &mut twin,
                dt,
                9,
                tl_runtime::rng::Dist::Normal {
                    mean: 0.0,
                    std: 1.0,
                },
            );
            assert_eq!(t.to_bytes().unwrap(), twin, "randn {dt} n={n}");
        }
    }

    // Launch errors name the kernel: the reverse kernel built with no dynamic shared memory
    // overruns it (the mock reports that at launch; a real GPU at the next synchronize).
    // The opt-in past 48 KiB itself is exercised by the self-test, whose launch the mock
    // refuses unless the function's limit was raised.
    let arch = "sm_90a";
    let src = tl_runtime::selftest::REVERSE_SOURCE;
    let key = tl_runtime::selftest::cuda_key(src, arch).unwrap();
    let exe = tl_runtime::build_cuda(
        &dev,
        tl_runtime::selftest::reverse_signature(),
        &cache,
        &key,
        src.into(),
        "tl_kernel_reverse",
        arch,
        0,
    )
    .unwrap();
    assert_eq!(exe.resource_usage().unwrap().registers, 32);
    let x = Tensor::zeros(&[16384], DType::F32, &dev).unwrap();
    let y = Tensor::zeros(&[16384], DType::F32, &dev).unwrap();
    let e = exe.run(&[&x, &x, &y]).unwrap_err();
    assert!(matches!(e, RuntimeError::ArgCount { .. }), "{e}");
    let e = exe.run(&[&x, &y]).unwrap_err().to_string();
    assert!(
        e.contains("`reverse`") && e.contains("ILLEGAL_ADDRESS"),
        "{e}"
    );

    // A cached cubin that no longer loads is recompiled.
    let axpy = tl_runtime::selftest::AXPY_SOURCE;
    let key = tl_runtime::selftest::cuda_key(axpy, arch).unwrap();
    let c2 = Cache::at(dir.join("corrupt"));
    c2.put(&key, "cubin", |tmp| {
        std::fs::write(tmp, b"not a cubin").map_err(|e| RuntimeError::Launch(e.to_string()))
    })
    .unwrap();
    let exe = tl_runtime::build_cuda(
        &dev,
        tl_runtime::selftest::axpy_signature(),
        &c2,
        &key,
        axpy.into(),
        "tl_kernel_axpy",
        arch,
        0,
    )
    .unwrap();
    assert!(!exe.compile_stats().cache_hit);
    let a = Tensor::from_f64(&[3], DType::F32, &[1.0, 2.0, 3.0], &dev).unwrap();
    let b = Tensor::from_f64(&[3], DType::F32, &[10.0, 20.0, 30.0], &dev).unwrap();
    let c = Tensor::zeros(&[3], DType::F32, &dev).unwrap();
    exe.run_args(&[
        Arg::Tensor(&a),
        Arg::Tensor(&b),
        Arg::Tensor(&c),
        Arg::Int(2),
    ])
    .unwrap();
    assert_eq!(c.to_f64_vec().unwrap(), vec![12.0, 24.0, 36.0]);
    let t = tl_runtime::profile::bench(
        &exe,
        &[
            Arg::Tensor(&a),
            Arg::Tensor(&b),
            Arg::Tensor(&c),
            Arg::Float(2.0),
        ],
        2,
        5,
    )
    .unwrap();
    assert_eq!(t.reps, 5);
    assert!(t.l2_flushed && t.device == "cuda:0");
    // Several launches back to back in each timed window: the same kernel's results, one
    // sample a window.
    let cfg = tl_runtime::profile::BenchConfig {
        warmup: 1,
        reps: 3,
        flush_l2: true,
        back_to_back: 4,
    };
    let args = [
        Arg::Tensor(&a),
        Arg::Tensor(&b),
        Arg::Tensor(&c),
        Arg::Float(2.0),
    ];
    let t = tl_runtime::profile::bench_with(&exe, &args, &cfg).unwrap();
    assert_eq!(t.reps, 3);
    assert!(t.median_ms.is_finite() && t.min_ms >= 0.0, "{t:?}");
    assert_eq!(c.to_f64_vec().unwrap(), vec![12.0, 24.0, 36.0]);
}
