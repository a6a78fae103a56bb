//! The HIP backend against a mock `libamdhip64.so` (tests/mock_hip/mock_hip.c), so the AMD path
//! — finding the library, device discovery and `gcnArchName`, device memory, fills, the code
//! object cache, module load, parameter packing, launches, event timing with the cache flush,
//! the 2 GiB buffer-range check — runs in CI, where there is neither ROCm nor an AMD GPU. The
//! mock records every launch's kernel-parameter bytes, grid and block, and rejects pointers
//! outside live allocations of the current device. It cannot tell whether real ROCm agrees
//! with its reading of the HIP API: the backend is untested on hardware.
//!
//! The library is found once per process, so each scenario runs in a child process (this test
//! binary re-run on one `#[ignore]`d test) with its own environment: one with `TILELANG_HIP_LIB`
//! pointing at the mock, one with it pointing at a file that does not exist.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::process::Command;

use tl_ir::DType;
use tl_runtime::{profile, Arg, Cache, Device, RuntimeError, Tensor};
use tl_target::Target;

const CHILD_ENV: &str = "TILELANG_MOCK_HIP_CHILD";

fn build_mock(dir: &Path) -> Result<PathBuf, String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mock_hip/mock_hip.c");
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

/// Re-run this binary on the ignored test `child` with `env`; assert that it passed.
fn run_child(child: &str, dir: &Path, env: &[(&str, &std::ffi::OsStr)]) -> String {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut cmd = Command::new(exe);
    cmd.args([
        "--exact",
        child,
        "--include-ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_ENV, dir)
    .env("TILELANG_DISABLE_CUDA", "1")
    .env("TILELANG_CACHE_DIR", dir.join("cache"))
    .env_remove("TILELANG_DEVICE")
    .env_remove("TILELANG_HIP_SYNC");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("re-running the test binary");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "the child run `{child}` failed:\n{text}"
    );
    assert!(
        text.contains("1 passed"),
        "the child test `{child}` did not run:\n{text}"
    );
    text
}

#[test]
fn hip_backend_against_a_mock_runtime() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("tl-mock-hip-{}", std::process::id()));
    let lib = match build_mock(&dir) {
        Ok(l) => l,
        Err(e) => {
            println!("SKIPPED hip_backend_against_a_mock_runtime: cannot build the mock: {e}");
            return;
        }
    };
    let text = run_child(
        "mock_child",
        &dir,
        &[
            ("TILELANG_HIP_LIB", lib.as_os_str()),
            (
                "MOCK_HIP_ARCHS",
                "gfx950:sramecc+:xnack-;gfx90a:sramecc-:xnack-".as_ref(),
            ),
        ],
    );
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "{}",
        text.lines()
            .find(|l| l.contains("hip mock OK"))
            .unwrap_or("")
    );
}

#[test]
fn hip_missing_runtime_is_a_clear_error() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("tl-no-hip-{}", std::process::id()));
    let missing = dir.join("nowhere/libamdhip64.so");
    run_child(
        "missing_child",
        &dir,
        &[("TILELANG_HIP_LIB", missing.as_os_str())],
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The mock's test hooks, from the same loaded library (dlopen of the same path shares its
/// state with the runtime's handle).
struct Hooks {
    lib: libloading::Library,
}

type CountFn = unsafe extern "C" fn(*const std::ffi::c_char) -> i64;
type LastLaunchFn = unsafe extern "C" fn(
    *mut std::ffi::c_char,
    i32,
    *mut u32,
    *mut u32,
    *mut u32,
    *mut i32,
    *mut u8,
    i32,
) -> i32;

#[derive(Debug, PartialEq)]
struct Launch {
    name: String,
    grid: [u32; 3],
    block: [u32; 3],
    shared: u32,
    null_stream: bool,
    params: Vec<u8>,
}

impl Hooks {
    fn open() -> Hooks {
        let path = std::env::var_os("TILELANG_HIP_LIB").expect("TILELANG_HIP_LIB");
        // SAFETY: the mock has no initializers.
        let lib = unsafe { libloading::Library::new(path) }.expect("the mock library");
        Hooks { lib }
    }
    fn count(&self, what: &str) -> i64 {
        let name = std::ffi::CString::new(what).unwrap();
        // SAFETY: the mock defines `long long mock_hip_count(const char*)`.
        unsafe {
            let f = self.lib.get::<CountFn>(b"mock_hip_count\0").unwrap();
            f(name.as_ptr())
        }
    }
    fn last_launch(&self) -> Launch {
        let mut name = [0 as std::ffi::c_char; 128];
        let (mut grid, mut block, mut shared, mut null_stream) = ([0u32; 3], [0u32; 3], 0u32, 0);
        let mut params = vec![0u8; 256];
        // SAFETY: the mock defines this function; every buffer is as large as passed.
        let n = unsafe {
            let f = self
                .lib
                .get::<LastLaunchFn>(b"mock_hip_last_launch\0")
                .unwrap();
            f(
                name.as_mut_ptr(),
                name.len() as i32,
                grid.as_mut_ptr(),
                block.as_mut_ptr(),
                &mut shared,
                &mut null_stream,
                params.as_mut_ptr(),
                params.len() as i32,
            )
        };
        assert!(n >= 0, "no launch was recorded");
        params.truncate(n as usize);
        let name: Vec<u8> = name
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        Launch {
            name: String::from_utf8_lossy(&name).into_owned(),
            grid,
            block,
            shared,
            null_stream: null_stream != 0,
            params,
        }
    }
}

/// `out[i] = alpha * x[i] + y[i]` in HIP, with the ABI of `selftest::axpy_signature` (x, y,
/// out, alpha, then N), for clang without ROCm's headers.
const HIP_AXPY: &str = r#"
extern "C" __attribute__((global)) __attribute__((amdgpu_flat_work_group_size(1, 256)))
void tl_kernel_axpy(const float* __restrict__ x, const float* __restrict__ y,
                    float* __restrict__ out, float alpha, int N) {
  long long i = (long long)__builtin_amdgcn_workgroup_id_x() * 256 + __builtin_amdgcn_workitem_id_x();
  if (i < N) out[i] = alpha * x[i] + y[i];
}
"#;

/// A code object the mock loads: an ELF magic and a manifest of kernels and parameter kinds.
fn code_object(kernels: &[(&str, &str)]) -> Vec<u8> {
    let mut s = String::from("\x7fELF\nmock-hip-code-object\n");
    for (name, sig) in kernels {
        s.push_str(&format!("kernel {name} {sig}\n"));
    }
    s.push_str("end\n");
    s.into_bytes()
}

fn axpy_args<'a>(x: &'a Tensor, y: &'a Tensor, out: &'a Tensor, alpha: f64) -> [Arg<'a>; 4] {
    [
        Arg::Tensor(x),
        Arg::Tensor(y),
        Arg::Tensor(out),
        Arg::Float(alpha),
    ]
}

#[test]
#[ignore = "run by hip_backend_against_a_mock_runtime in a child process"]
fn mock_child() {
    let Some(dir) = std::env::var_os(CHILD_ENV).map(PathBuf::from) else {
        return;
    };
    let hooks = Hooks::open();

    // Discovery: two devices, the first preferred; TILELANG_DEVICE is honoured when usable.
    assert_eq!(
        Device::hip_count(),
        2,
        "{:?}",
        Device::hip_unavailable_reason()
    );
    assert_eq!(Device::best(), Device::Hip(0));
    std::env::set_var("TILELANG_DEVICE", "hip:1");
    assert_eq!(Device::best(), Device::Hip(1));
    std::env::set_var("TILELANG_DEVICE", "amd:9"); // no such device: the default choice
    assert_eq!(Device::best(), Device::Hip(0));
    std::env::remove_var("TILELANG_DEVICE");
    let dev = Device::parse("rocm").unwrap();
    assert_eq!(dev, Device::Hip(0));
    assert!(dev.is_available() && Device::Hip(1).is_available());
    assert!(!Device::Hip(2).is_available());
    let e = Device::Hip(2).name().unwrap_err().to_string();
    assert!(e.contains("hip:2") && e.contains("2 HIP devices"), "{e}");

    // gcnArchName "gfx950:sramecc+:xnack-" is gfx950; gfx90a is a clear error.
    assert_eq!(dev.target().unwrap(), Target::GFX950);
    let name = dev.name().unwrap();
    assert!(
        name.contains("MI355X")
            && name.contains("gfx950:sramecc+:xnack-")
            && name.contains("untested"),
        "{name}"
    );
    let props = dev.hip_props().unwrap();
    assert_eq!(props.arch(), "gfx950");
    assert_eq!(
        (props.compute_units, props.l2_bytes, props.lds_per_block),
        (256, 4 << 20, 163840)
    );
    assert_eq!(props.max_grid, [i32::MAX as u32, 65536, 65536]);
    assert_eq!(props.wave_size, 64);
    let e = Device::Hip(1).target().unwrap_err().to_string();
    assert!(
        e.contains("hip:1") && e.contains("gfx90a") && e.contains("gfx942") && e.contains("gfx950"),
        "{e}"
    );
    assert!(dev.cuda_props().is_err() && Device::Cpu.hip_props().is_err());
    dev.synchronize().unwrap();
    let (path, version) = tl_runtime::hip::runtime_info().unwrap();
    assert!(
        path.ends_with("libamdhip64.so") && version == 60443484,
        "{path} {version}"
    );

    // Tensors: round trips through device memory, fills (8-byte patterns too), random values
    // equal to the counter-based host stream, copies between devices.
    let host: Vec<f64> = (0..1000).map(|i| i as f64 * 0.5 - 7.0).collect();
    for dt in [
        DType::F32,
        DType::F64,
        DType::BF16,
        DType::F16,
        DType::I32,
        DType::U8,
    ] {
        let want = Tensor::from_f64(&[10, 100], dt, &host, &Device::Cpu)
            .unwrap()
            .to_f64_vec()
            .unwrap();
        let t = Tensor::from_f64(&[10, 100], dt, &host, &dev).unwrap();
        assert_eq!(t.device(), dev);
        assert_eq!(t.to_f64_vec().unwrap(), want, "{dt} round trip");
        assert_eq!(t.rel_err(&want).unwrap(), 0.0);
        let back = t.to_device(&Device::Cpu).unwrap();
        assert_eq!(back.to_f64_vec().unwrap(), want, "{dt} to the CPU");
        let again = back.to_device(&dev).unwrap().to_device(&dev).unwrap();
        assert_eq!(again.to_f64_vec().unwrap(), want, "{dt} CPU -> hip -> hip");
        let other = t.to_device(&Device::Hip(1)).unwrap();
        assert_eq!(other.to_f64_vec().unwrap(), want, "{dt} hip:0 -> hip:1");
    }
    for (dt, v) in [
        (DType::F64, 1.5),
        (DType::F64, f64::NAN),
        (DType::F32, -2.25),
        (DType::F16, 3.0),
        (DType::BF16, 0.0),
        (DType::I64, -5.0),
        (DType::U8, 7.0),
    ] {
        let t = Tensor::zeros(&[3, 333], dt, &dev).unwrap();
        assert!(t.to_f64_vec().unwrap().iter().all(|&x| x == 0.0));
        t.fill(v).unwrap();
        let got = t.to_f64_vec().unwrap();
        assert!(
            got.iter().all(|&g| (g.is_nan() && v.is_nan()) || g == v),
            "fill({v}) of {dt}"
        );
    }
    for dt in [DType::F32, DType::BF16, DType::F8E5M2] {
        let t = Tensor::randn(&[5000], dt, 9, &dev).unwrap();
        let mut twin = vec![0u8; t.nbytes()];
        tl_runtime::rng::fill_host(
            &mut twin,
            dt,
            9,
            tl_runtime::rng::Dist::Normal {
                mean: 0.0,
                std: 1.0,
            },
        );
        assert_eq!(t.to_bytes().unwrap(), twin, "randn {dt}");
        let t = Tensor::rand(&[5000], dt, -3.0, 3.0, 9, &dev).unwrap();
        tl_runtime::rng::fill_host(
            &mut twin,
            dt,
            9,
            tl_runtime::rng::Dist::Uniform { lo: -3.0, hi: 3.0 },
        );
        assert_eq!(t.to_bytes().unwrap(), twin, "rand {dt}");
    }
    let empty = Tensor::zeros(&[0], DType::F32, &dev).unwrap();
    assert!(empty.to_f64_vec().unwrap().is_empty());
    assert!(Tensor::zeros(&[4], DType::F32, &dev)
        .unwrap()
        .hip_ptr()
        .is_some());

    // Build: a miss compiles (once) and caches `<key>.hsaco`; a hit does not compile.
    let sig = tl_runtime::selftest::axpy_signature();
    let code = code_object(&[("tl_kernel_axpy", "pppfi")]);
    let cache = Cache::at(dir.join("cache"));
    let key = Cache::key(&["hip-mock-test", "axpy"]);
    let calls = Cell::new(0);
    let compile = |src: &str| {
        calls.set(calls.get() + 1);
        assert_eq!(src, "// the HIP source");
        Ok::<_, RuntimeError>(code.clone())
    };
    let build = |cache: &Cache, key: &str, entry: &str| {
        tl_runtime::build_hip(
            &dev,
            sig.clone(),
            cache,
            key,
            "// the HIP source".into(),
            entry,
            compile,
        )
    };
    let exe = build(&cache, &key, "tl_kernel_axpy").unwrap();
    assert!(!exe.compile_stats().cache_hit);
    assert_eq!(calls.get(), 1);
    assert_eq!(cache.read(&key, "hsaco").expect("<key>.hsaco"), code);
    let exe = build(&cache, &key, "tl_kernel_axpy").unwrap();
    assert!(exe.compile_stats().cache_hit);
    assert_eq!(calls.get(), 1, "a cache hit must not compile");
    assert_eq!(exe.device(), dev);
    assert!(exe.resource_usage().is_none());

    // Launch: the kernel-parameter bytes follow the GPU ABI (pointers, alpha as float, then N
    // as int32), the grid comes from the signature, the block is (threads, 1, 1), no LDS.
    let n = 1000usize;
    let xs: Vec<f64> = (0..n).map(|i| i as f64).collect();
    let ys: Vec<f64> = (0..n).map(|i| 0.25 * i as f64 - 3.0).collect();
    let x = Tensor::from_f64(&[n], DType::F32, &xs, &dev).unwrap();
    let y = Tensor::from_f64(&[n], DType::F32, &ys, &dev).unwrap();
    let out = Tensor::zeros(&[n], DType::F32, &dev).unwrap();
    out.fill(f64::NAN).unwrap();
    exe.run_args(&axpy_args(&x, &y, &out, 2.0)).unwrap();
    exe.synchronize().unwrap();
    let want: Vec<f64> = xs.iter().zip(&ys).map(|(a, b)| 2.0 * a + b).collect();
    assert_eq!(out.to_f64_vec().unwrap(), want);
    let mut params = vec![];
    for t in [&x, &y, &out] {
        params.extend_from_slice(&t.hip_ptr().unwrap().to_le_bytes());
    }
    params.extend_from_slice(&2.0f32.to_le_bytes());
    params.extend_from_slice(&(n as i32).to_le_bytes());
    assert_eq!(
        hooks.last_launch(),
        Launch {
            name: "tl_kernel_axpy".into(),
            grid: [4, 1, 1],
            block: [256, 1, 1],
            shared: 0,
            null_stream: true,
            params,
        }
    );
    // An integer for the float scalar is converted; a CPU tensor is refused before launching.
    exe.run_args(&axpy_args(&x, &y, &out, 1.0)).unwrap();
    exe.run_args(&[
        Arg::Tensor(&x),
        Arg::Tensor(&y),
        Arg::Tensor(&out),
        Arg::Int(3),
    ])
    .unwrap();
    assert_eq!(hooks.last_launch().params[24..28], 3.0f32.to_le_bytes());
    let launches = hooks.count("launch");
    let cpu = Tensor::zeros(&[n], DType::F32, &Device::Cpu).unwrap();
    let e = exe
        .run_args(&axpy_args(&x, &cpu, &out, 1.0))
        .unwrap_err()
        .to_string();
    assert!(e.contains("on cpu, the kernel on hip:0"), "{e}");
    let on1 = Tensor::zeros(&[n], DType::F32, &Device::Hip(1)).unwrap();
    let e = exe
        .run_args(&axpy_args(&x, &on1, &out, 1.0))
        .unwrap_err()
        .to_string();
    assert!(e.contains("on hip:1, the kernel on hip:0"), "{e}");
    assert_eq!(hooks.count("launch"), launches);

    // A stale cache entry is rebuilt once; a missing entry point and a failed compile are
    // errors that say what happened.
    let c2 = Cache::at(dir.join("stale"));
    c2.put(&key, "hsaco", |tmp| {
        std::fs::write(tmp, b"not a code object").map_err(|e| RuntimeError::Launch(e.to_string()))
    })
    .unwrap();
    c2.put(&key, "usage", |tmp| {
        std::fs::write(tmp, tl_runtime::hip::usage_to_text(None))
            .map_err(|e| RuntimeError::Launch(e.to_string()))
    })
    .unwrap();
    let before = calls.get();
    let stale = build(&c2, &key, "tl_kernel_axpy").unwrap();
    assert!(!stale.compile_stats().cache_hit);
    assert_eq!(calls.get(), before + 1);
    assert_eq!(c2.read(&key, "hsaco").unwrap(), code);
    let e = build(&cache, &key, "tl_kernel_nope")
        .err()
        .expect("a missing entry point")
        .to_string();
    assert!(
        e.contains("tl_kernel_nope")
            && e.contains("hipErrorNotFound")
            && e.contains("not been tested"),
        "{e}"
    );
    let fresh = Cache::key(&["hip-mock-test", "compile error"]);
    let e = tl_runtime::build_hip(&dev, sig.clone(), &cache, &fresh, "bad".into(), "k", |_| {
        Err::<Vec<u8>, _>(RuntimeError::Launch("clang: error: no such thing".into()))
    })
    .err()
    .expect("a compile error")
    .to_string();
    assert!(e.contains("no such thing"), "{e}");
    assert!(cache.get(&fresh, "hsaco").is_none());
    let pre = Cache::key(&["hip-mock-test", "precompile"]);
    let compiled = Cell::new(0);
    for want_hit in [false, true] {
        let hit = tl_runtime::precompile_hip(&cache, &pre, "src", |_| {
            compiled.set(compiled.get() + 1);
            Ok::<_, RuntimeError>(code.clone())
        })
        .unwrap();
        assert_eq!(hit, want_hit);
    }
    assert_eq!(compiled.get(), 1);

    // What the compile callback reports about the kernel's resources (the driver: registers
    // and spills from clang's assembly) is cached as `<key>.usage` beside the code object, so
    // the executable has it on a miss and on a hit; an entry without it (made by an older
    // version) is compiled again.
    let ukey = Cache::key(&["hip-mock-test", "usage"]);
    let usage = tl_runtime::ResourceUsage {
        registers: 96,
        local_bytes: 24,
        static_smem_bytes: 8192,
        max_threads_per_block: 256,
        binary_version: 950,
        vgpr_spills: Some(2),
        sgpr_spills: Some(0),
        log: "kernel tl_kernel_axpy (gfx950)\n  spills      2 VGPR".into(),
        ..Default::default()
    };
    let ucalls = Cell::new(0);
    let with_usage = |src: &str| {
        ucalls.set(ucalls.get() + 1);
        assert_eq!(src, "// the HIP source");
        Ok::<_, RuntimeError>(tl_runtime::HipCode {
            code: code.clone(),
            usage: Some(usage.clone()),
        })
    };
    let build_u = |cache: &Cache| {
        tl_runtime::build_hip(
            &dev,
            sig.clone(),
            cache,
            &ukey,
            "// the HIP source".into(),
            "tl_kernel_axpy",
            with_usage,
        )
        .unwrap()
    };
    for want_hit in [false, true] {
        let exe = build_u(&cache);
        assert_eq!(exe.compile_stats().cache_hit, want_hit);
        assert_eq!(exe.resource_usage(), Some(&usage), "hit: {want_hit}");
        assert!(exe.resource_usage().is_some_and(|u| u.spills()));
        assert_eq!(exe.compile_log(), Some(usage.log.as_str()));
    }
    assert_eq!(ucalls.get(), 1, "a cache hit must not compile");
    let usage_file = cache.get(&ukey, "usage").expect("<key>.usage");
    std::fs::remove_file(&usage_file).unwrap();
    let again = build_u(&cache);
    assert!(
        !again.compile_stats().cache_hit,
        "no usage file: compiled again"
    );
    assert_eq!(ucalls.get(), 2);
    assert!(usage_file.is_file() && again.resource_usage() == Some(&usage));
    let (hit, got, _) = tl_runtime::lookup_or_compile_hip(&cache, &ukey, "src", |_| {
        Err::<Vec<u8>, _>(RuntimeError::Launch("a hit must not compile".into()))
    })
    .unwrap();
    assert!(hit && got == Some(usage.clone()));
    drop(again);

    let wrong = tl_runtime::build_hip(
        &Device::Cpu,
        sig.clone(),
        &cache,
        &key,
        "".into(),
        "k",
        compile,
    )
    .err()
    .expect("build_hip on the CPU")
    .to_string();
    assert!(wrong.contains("build_hip needs a HIP"), "{wrong}");

    // A code object clang really made (when clang is installed) loads through the same path,
    // and its entry point is found by its symbol; the mock cannot read its parameter layout.
    if tl_amdgpu::toolchain::clang_or_skip("hip mock: a real code object").is_some() {
        let key = Cache::key(&["hip-mock-test", "real", HIP_AXPY]);
        let real = tl_runtime::build_hip(
            &dev,
            sig.clone(),
            &cache,
            &key,
            HIP_AXPY.into(),
            "tl_kernel_axpy",
            |src: &str| {
                tl_amdgpu::compile(src, "gfx950")
                    .map(|c| c.elf)
                    .map_err(|e| RuntimeError::Launch(e.to_string()))
            },
        )
        .unwrap();
        real.run_args(&axpy_args(&x, &y, &out, 2.0)).unwrap();
        let l = hooks.last_launch();
        assert_eq!(
            (l.name.as_str(), l.grid, l.block, l.shared),
            ("tl_kernel_axpy", [4, 1, 1], [256, 1, 1], 0)
        );
    }

    // The profiler: HIP events around each timed launch, the cache flush (twice the 256 MiB
    // Infinity Cache) before each.
    let (launches, records, big) = (
        hooks.count("launch"),
        hooks.count("event_record"),
        hooks.count("big_fill"),
    );
    let t = profile::bench(&exe, &axpy_args(&x, &y, &out, 2.0), 2, 5).unwrap();
    assert_eq!(t.reps, 5);
    assert!(t.l2_flushed && t.device == "hip:0", "{t:?}");
    assert!(t.median_ms.is_finite() && t.min_ms >= 0.0, "{t:?}");
    assert_eq!(hooks.count("launch"), launches + 7);
    assert_eq!(hooks.count("event_record"), records + 10);
    assert_eq!(hooks.count("big_fill"), big + 5);
    assert!(hooks.count("max_fill_bytes") >= 512 << 20);
    assert_eq!(hooks.count("event_create"), hooks.count("event_destroy"));
    let cfg = profile::BenchConfig {
        warmup: 0,
        reps: 3,
        flush_l2: false,
        back_to_back: 1,
    };
    let t = profile::bench_with(&exe, &axpy_args(&x, &y, &out, 2.0), &cfg).unwrap();
    assert!(!t.l2_flushed && t.reps == 3);
    assert_eq!(hooks.count("big_fill"), big + 5);
    assert_eq!(out.to_f64_vec().unwrap(), want);
    // Back to back: each timed window holds 4 launches between its two events, after one
    // flush; the samples are per launch.
    let (launches, records, big) = (
        hooks.count("launch"),
        hooks.count("event_record"),
        hooks.count("big_fill"),
    );
    let cfg = profile::BenchConfig {
        warmup: 1,
        reps: 3,
        flush_l2: true,
        back_to_back: 4,
    };
    let t = profile::bench_with(&exe, &axpy_args(&x, &y, &out, 2.0), &cfg).unwrap();
    assert_eq!(t.reps, 3);
    assert_eq!(hooks.count("launch"), launches + 1 + 3 * 4);
    assert_eq!(hooks.count("event_record"), records + 2 * 3);
    assert_eq!(hooks.count("big_fill"), big + 3);
    assert_eq!(out.to_f64_vec().unwrap(), want);

    // Tensors of 2 GiB or more are refused before anything is launched: buffer loads use
    // 32-bit offsets and a range of at most 2^31 - 1 bytes.
    let launches = hooks.count("launch");
    {
        let big_n = 1usize << 29; // 2^29 f32 = 2 GiB
        let bx = Tensor::zeros(&[big_n], DType::F32, &dev).unwrap();
        let by = Tensor::zeros(&[big_n], DType::F32, &dev).unwrap();
        let bo = Tensor::zeros(&[big_n], DType::F32, &dev).unwrap();
        let args = axpy_args(&bx, &by, &bo, 1.0);
        let e = exe.run_args(&args).unwrap_err();
        assert!(matches!(e, RuntimeError::BufferRange { .. }), "{e}");
        let e = e.to_string();
        assert!(
            e.contains("`axpy`")
                && e.contains("`x`")
                && e.contains("2147483648")
                && e.contains("2147483647"),
            "{e}"
        );
        let e = profile::bench(&exe, &args, 1, 1).unwrap_err();
        assert!(matches!(e, RuntimeError::BufferRange { .. }), "{e}");
    }
    assert_eq!(hooks.count("launch"), launches);

    // Everything is released: modules on drop, device memory with its tensors (the cache flush
    // buffer lives as long as the device).
    let unloads = hooks.count("module_unload");
    drop(exe);
    drop(stale);
    assert_eq!(hooks.count("module_unload"), unloads + 2);
    drop((x, y, out, cpu, on1, empty));
    assert_eq!(hooks.count("alloc") - hooks.count("free"), 1);
    println!("hip mock OK: {name}, {} launches", hooks.count("launch"));
}

#[test]
#[ignore = "run by hip_missing_runtime_is_a_clear_error in a child process"]
fn missing_child() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let missing = std::env::var("TILELANG_HIP_LIB").unwrap();
    assert_eq!(Device::hip_count(), 0);
    let reason = Device::hip_unavailable_reason().expect("a reason");
    for part in [
        "libamdhip64.so",
        "TILELANG_HIP_LIB",
        "/opt/rocm/lib",
        "ROCM_PATH",
        missing.as_str(),
    ] {
        assert!(reason.contains(part), "`{part}` missing from: {reason}");
    }
    let dev = Device::parse("hip").unwrap();
    assert!(!dev.is_available());
    // TILELANG_CUDA is disabled in this child: with no HIP either, the CPU.
    std::env::set_var("TILELANG_DEVICE", "hip");
    assert_eq!(Device::best(), Device::Cpu);
    std::env::remove_var("TILELANG_DEVICE");

    let clear = |what: &str, e: RuntimeError| {
        assert!(
            matches!(e, RuntimeError::DeviceUnavailable { .. }),
            "{what}: {e:?}"
        );
        let s = e.to_string();
        assert!(
            s.contains("hip:0") && s.contains("TILELANG_HIP_LIB") && s.contains("libamdhip64.so"),
            "{what}: {s}"
        );
    };
    clear("target", dev.target().unwrap_err());
    clear("name", dev.name().unwrap_err());
    clear("synchronize", dev.synchronize().unwrap_err());
    clear("hip_props", dev.hip_props().unwrap_err());
    clear("zeros", Tensor::zeros(&[4], DType::F32, &dev).unwrap_err());
    clear(
        "randn",
        Tensor::randn(&[4], DType::F32, 0, &dev).unwrap_err(),
    );
    clear(
        "rand",
        Tensor::rand(&[4], DType::F32, 0.0, 1.0, 0, &dev).unwrap_err(),
    );
    clear(
        "from_f64",
        Tensor::from_f64(&[1], DType::F32, &[1.0], &dev).unwrap_err(),
    );
    let cpu = Tensor::zeros(&[4], DType::F32, &Device::Cpu).unwrap();
    clear("to_device", cpu.to_device(&dev).unwrap_err());
    clear("runtime_info", tl_runtime::hip::runtime_info().unwrap_err());
    clear("device", tl_runtime::hip::device(0).err().unwrap());
    let compiled = Cell::new(false);
    let dir = PathBuf::from(std::env::var_os(CHILD_ENV).unwrap());
    let e = tl_runtime::build_hip(
        &dev,
        tl_runtime::selftest::axpy_signature(),
        &Cache::at(dir.join("cache")),
        "0123456789abcdef",
        "src".into(),
        "tl_kernel_axpy",
        |_| {
            compiled.set(true);
            Ok::<_, RuntimeError>(vec![1])
        },
    )
    .err()
    .expect("build_hip without HIP");
    clear("build_hip", e);
    assert!(
        !compiled.get(),
        "clang must not run when there is no device"
    );
    assert_eq!(Device::Hip(3).to_string(), "hip:3");
}
