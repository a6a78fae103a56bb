//! GPU tests of the CUDA backend. Each one prints `SKIPPED` and passes when no CUDA device is
//! usable (no driver, no GPU), so the suite runs anywhere; on a GPU machine they check the
//! real thing.

use tl_ir::DType;
use tl_runtime::{Cache, Device, RuntimeError, Tensor};

fn gpu(test: &str) -> Option<Device> {
    let d = Device::Cuda(0);
    if d.is_available() {
        Some(d)
    } else {
        println!(
            "SKIPPED {test}: no CUDA device ({})",
            Device::cuda_unavailable_reason().unwrap_or_default()
        );
        None
    }
}

fn temp_cache(tag: &str) -> (Cache, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("tl-rt-test-{tag}-{}", std::process::id()));
    (Cache::at(&dir), dir)
}

#[test]
fn best_device_never_panics() {
    let d = Device::best();
    if Device::cuda_count() == 0 {
        // TILELANG_DEVICE may name the CPU explicitly; either way no GPU can be chosen.
        assert_eq!(d, Device::Cpu);
        assert!(Device::cuda_unavailable_reason().is_some());
        let e = Tensor::zeros(&[4], DType::F32, &Device::Cuda(0)).unwrap_err();
        assert!(matches!(e, RuntimeError::DeviceUnavailable { .. }), "{e:?}");
        assert!(Device::Cuda(0).target().is_err());
        assert!(Device::Cuda(0).name().is_err());
        println!("SKIPPED the GPU half of best_device_never_panics: no CUDA device");
    } else {
        let t = Device::Cuda(0).target().unwrap();
        assert!(t.is_cuda());
        println!("cuda:0 is {} ({t})", Device::Cuda(0).name().unwrap());
    }
}

#[test]
fn build_cuda_without_a_gpu_is_an_error() {
    if Device::cuda_count() > 0 {
        return;
    }
    let (cache, dir) = temp_cache("nogpu");
    let e = tl_runtime::build_cuda(
        &Device::Cuda(0),
        tl_runtime::selftest::axpy_signature(),
        &cache,
        "0000",
        tl_runtime::selftest::AXPY_SOURCE.into(),
        "tl_kernel_axpy",
        "sm_90a",
        0,
    )
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(e.contains("cuda:0"), "{e}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn selftest_on_the_gpu() {
    let Some(dev) = gpu("selftest_on_the_gpu") else {
        return;
    };
    let (cache, dir) = temp_cache("selftest");
    let r = tl_runtime::selftest::run(&dev, &cache);
    let _ = std::fs::remove_dir_all(dir);
    println!("{}", r.unwrap());
}

#[test]
fn copies_between_devices() {
    let Some(dev) = gpu("copies_between_devices") else {
        return;
    };
    let a = Tensor::randn(&[3, 5, 7], DType::BF16, 1, &Device::Cpu).unwrap();
    let g = a.to_device(&dev).unwrap();
    let g2 = g.to_device(&dev).unwrap();
    let back = g2.to_device(&Device::Cpu).unwrap();
    assert_eq!(a.to_f64_vec().unwrap(), back.to_f64_vec().unwrap());
    assert_eq!(g.shape(), &[3, 5, 7]);
    assert!(g.cuda_ptr().is_some() && a.cuda_ptr().is_none());
}

#[test]
fn random_tensors_are_deterministic_on_the_gpu() {
    let Some(dev) = gpu("random_tensors_are_deterministic_on_the_gpu") else {
        return;
    };
    for n in [1000usize, 1 << 20] {
        for dt in [
            DType::F32,
            DType::BF16,
            DType::F16,
            DType::F64,
            DType::F8E4M3,
        ] {
            let a = Tensor::randn(&[n], dt, 42, &dev)
                .unwrap()
                .to_bytes()
                .unwrap();
            let b = Tensor::randn(&[n], dt, 42, &dev)
                .unwrap()
                .to_bytes()
                .unwrap();
            assert_eq!(a, b, "{dt} n={n}");
            let mut twin = vec![0u8; a.len()];
            tl_runtime::rng::fill_host(
                &mut twin,
                dt,
                42,
                tl_runtime::rng::Dist::Normal {
                    mean: 0.0,
                    std: 1.0,
                },
            );
            let differ = a.iter().zip(&twin).filter(|(x, y)| x != y).count();
            // log/cos may differ in the last bit between the GPU and the host.
            assert!(
                differ * 10_000 <= a.len(),
                "{dt} n={n}: {differ} bytes differ"
            );
        }
    }
}

#[test]
fn launch_errors_name_the_kernel() {
    let Some(dev) = gpu("launch_errors_name_the_kernel") else {
        return;
    };
    let (cache, dir) = temp_cache("errors");
    let arch = dev.target().unwrap().arch();
    // A source error is reported with the log and the kept source.
    let bad = "extern \"C\" __global__ void tl_kernel_axpy() { this is not cuda; }";
    let key = tl_runtime::selftest::cuda_key(bad, &arch).unwrap();
    let e = tl_runtime::build_cuda(
        &dev,
        tl_runtime::selftest::axpy_signature(),
        &cache,
        &key,
        bad.into(),
        "tl_kernel_axpy",
        &arch,
        0,
    )
    .err()
    .unwrap();
    assert!(matches!(e, RuntimeError::NvrtcFailed { .. }), "{e}");
    // A missing entry point names the kernel.
    let src = tl_runtime::selftest::AXPY_SOURCE;
    let key = tl_runtime::selftest::cuda_key(src, &arch).unwrap();
    let e = tl_runtime::build_cuda(
        &dev,
        tl_runtime::selftest::axpy_signature(),
        &cache,
        &key,
        src.into(),
        "no_such_entry",
        &arch,
        0,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("no_such_entry") && e.contains("`axpy`"), "{e}");
    // Asking for more shared memory than a block may have is refused before any launch.
    let e = tl_runtime::build_cuda(
        &dev,
        tl_runtime::selftest::axpy_signature(),
        &cache,
        &key,
        src.into(),
        "tl_kernel_axpy",
        &arch,
        1 << 20,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("shared memory"), "{e}");
    let _ = std::fs::remove_dir_all(dir);
}
