//! An end-to-end check of the CUDA backend with hand-written kernels that follow the GPU ABI
//! (docs/design/thread-ir.md): device tensors, on-device random fill, memset fills, compiling
//! through NVRTC into the disk cache and loading from it, argument packing, launching (with
//! more than 48 KiB of dynamic shared memory too), checking results against the host, and
//! timing with the profiler. Used by `examples/cuda_smoke.rs` and the GPU tests; it needs no
//! part of the compiler, so a failure here is the runtime's.

use tl_ir::{Buffer, DType, Expr, Param, Role, Scope, Span, Var};

use crate::cache::Cache;
use crate::device::Device;
use crate::error::{Result, RuntimeError};
use crate::exec::{Arg, Signature};
use crate::profile;
use crate::rng;
use crate::tensor::Tensor;

/// `out[i] = alpha * x[i] + y[i]`: params (x, y, out, alpha), then the size N.
pub const AXPY_SOURCE: &str = r#"
// NVRTC has no C library headers: the fixed-width types are declared here.
typedef int int32_t;
typedef long long int64_t;
extern "C" __global__ void __launch_bounds__(256)
tl_kernel_axpy(const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ out,
               float alpha, int32_t N) {
  int64_t i = (int64_t)blockIdx.x * 256 + threadIdx.x;
  if (i < N) out[i] = alpha * x[i] + y[i];
}
"#;

/// Each block reverses a chunk of 16384 floats through 64 KiB of dynamic shared memory:
/// params (x, out), then N (a multiple of 16384).
pub const REVERSE_SOURCE: &str = r#"
// NVRTC has no C library headers: the fixed-width types are declared here.
typedef int int32_t;
typedef long long int64_t;
extern "C" __global__ void __launch_bounds__(1024)
tl_kernel_reverse(const float* __restrict__ x, float* __restrict__ out, int32_t N) {
  extern __shared__ __align__(16) float s[];
  const int C = 16384;
  int64_t base = (int64_t)blockIdx.x * C;
  for (int j = threadIdx.x; j < C; j += 1024) s[j] = x[base + j];
  __syncthreads();
  for (int j = threadIdx.x; j < C; j += 1024) out[base + j] = s[C - 1 - j];
}
"#;

/// The cache key of hand-written CUDA source, the way a driver should compute one.
pub fn cuda_key(source: &str, arch: &str) -> Result<String> {
    Ok(Cache::key(&[
        "cuda",
        source,
        arch,
        &crate::cuda_toolchain_id(arch)?,
        env!("CARGO_PKG_VERSION"),
    ]))
}

fn tensor_param(name: &str, shape: Vec<Expr>, dtype: DType, role: Role) -> Param {
    Param::Tensor {
        buffer: Buffer::new(name, shape, dtype, Scope::Global, Span::UNKNOWN),
        role,
    }
}

fn signature(
    name: &str,
    params: Vec<Param>,
    dims: Vec<Var>,
    grid: Expr,
    threads: u32,
) -> Signature {
    let mut abi = tl_codegen::Abi {
        tensors: vec![],
        ints: dims.iter().cloned().map(tl_codegen::IntSlot::Dim).collect(),
        floats: vec![],
        tmaps: vec![],
        staged: vec![],
    };
    for (i, p) in params.iter().enumerate() {
        match p {
            Param::Tensor { .. } => abi.tensors.push(i),
            Param::Scalar(v) if v.dtype().is_float() => abi.floats.push(v.clone()),
            Param::Scalar(v) => abi.ints.push(tl_codegen::IntSlot::Scalar(v.clone())),
        }
    }
    Signature {
        name: name.into(),
        params,
        dims,
        grid: vec![grid],
        threads,
        abi,
        dist: None,
    }
}

/// The signature of [`AXPY_SOURCE`].
pub fn axpy_signature() -> Signature {
    let n = Var::new("N", DType::I32);
    let shape = || vec![Expr::from(&n)];
    signature(
        "axpy",
        vec![
            tensor_param("x", shape(), DType::F32, Role::Input),
            tensor_param("y", shape(), DType::F32, Role::Input),
            tensor_param("out", shape(), DType::F32, Role::Output),
            Param::Scalar(Var::new("alpha", DType::F32)),
        ],
        vec![n.clone()],
        tl_ir::ops::ceildiv(&n, 256i64),
        256,
    )
}

/// The signature of [`REVERSE_SOURCE`].
pub fn reverse_signature() -> Signature {
    let n = Var::new("N", DType::I32);
    let shape = || vec![Expr::from(&n)];
    signature(
        "reverse",
        vec![
            tensor_param("x", shape(), DType::F32, Role::Input),
            tensor_param("out", shape(), DType::F32, Role::Output),
        ],
        vec![n.clone()],
        tl_ir::ops::ceildiv(&n, 16384i64),
        1024,
    )
}

fn fail(what: String) -> RuntimeError {
    RuntimeError::Launch(format!("CUDA self-test: {what}"))
}

/// Run every check on `device` with kernels cached under `cache`; the one-line summary on
/// success, the first failure otherwise.
pub fn run(device: &Device, cache: &Cache) -> Result<String> {
    let props = device.cuda_props()?;
    let arch = props.target().arch();
    let nv = crate::nvrtc_version().unwrap_or_else(|e| format!("no NVRTC ({e})"));

    // 1. Tensors: upload/download round trip, fill through memsets (8-byte patterns too).
    let host: Vec<f64> = (0..1000).map(|i| i as f64 * 0.5 - 7.0).collect();
    for dt in [DType::F32, DType::F64, DType::BF16, DType::I32, DType::U8] {
        // The same values through a CPU tensor give the expected conversions.
        let want = Tensor::from_f64(&[10, 100], dt, &host, &Device::Cpu)?.to_f64_vec()?;
        let t = Tensor::from_f64(&[10, 100], dt, &host, device)?;
        if t.to_f64_vec()? != want {
            return Err(fail(format!("{dt} upload/download round trip differs")));
        }
    }
    for (dt, v) in [
        (DType::F64, 1.5),
        (DType::F64, f64::NAN),
        (DType::F32, -2.25),
        (DType::F16, 3.0),
        (DType::I64, -5.0),
        (DType::U8, 7.0),
    ] {
        let t = Tensor::zeros(&[3, 333], dt, device)?;
        t.fill(v)?;
        let got = t.to_f64_vec()?;
        let ok = got.iter().all(|&g| (g.is_nan() && v.is_nan()) || g == v);
        if !ok {
            return Err(fail(format!(
                "fill({v}) of a {dt} tensor wrote other values"
            )));
        }
    }

    // 2. Random fill on the device equals the host twin.
    let n: usize = 1 << 22;
    let x = Tensor::randn(&[n], DType::F32, 11, device)?;
    let y = Tensor::rand(&[n], DType::F32, -1.0, 1.0, 12, device)?;
    let xh = x.to_f64_vec()?;
    let yh = y.to_f64_vec()?;
    let mut twin = vec![0u8; n * 4];
    rng::fill_host(
        &mut twin,
        DType::F32,
        12,
        rng::Dist::Uniform { lo: -1.0, hi: 1.0 },
    );
    if y.to_bytes()? != twin {
        return Err(fail(
            "uniform values from the device differ from the host generator".into(),
        ));
    }
    rng::fill_host(
        &mut twin,
        DType::F32,
        11,
        rng::Dist::Normal {
            mean: 0.0,
            std: 1.0,
        },
    );
    let max_diff = (0..n)
        .map(|i| (crate::dtype_io::read(&twin, DType::F32, i) - xh[i]).abs())
        .fold(0.0, f64::max);
    if max_diff > 1e-5 {
        return Err(fail(format!(
            "normal values from the device differ from the host generator by {max_diff}"
        )));
    }
    let mean = xh.iter().sum::<f64>() / n as f64;
    if mean.abs() > 0.01 {
        return Err(fail(format!("randn mean is {mean}")));
    }

    // 3. Compile (a cache miss), launch, check; poisoned output shows unwritten elements.
    let key = cuda_key(AXPY_SOURCE, &arch)?;
    let exe = crate::build_cuda(
        device,
        axpy_signature(),
        cache,
        &key,
        AXPY_SOURCE.to_string(),
        "tl_kernel_axpy",
        &arch,
        0,
    )?;
    let miss = exe.compile_stats().clone();
    let out = Tensor::zeros(&[n], DType::F32, device)?;
    out.fill(f64::NAN)?;
    let alpha = 0.75;
    exe.run_args(&[
        Arg::Tensor(&x),
        Arg::Tensor(&y),
        Arg::Tensor(&out),
        Arg::Float(alpha),
    ])?;
    let want: Vec<f64> = xh
        .iter()
        .zip(&yh)
        .map(|(a, b)| (alpha as f32 * *a as f32 + *b as f32) as f64)
        .collect();
    let err = out.rel_err(&want)?;
    if err > 1e-6 {
        return Err(fail(format!("axpy result has relative error {err}")));
    }
    let usage = exe
        .resource_usage()
        .cloned()
        .ok_or_else(|| fail("no resource usage on a CUDA executable".into()))?;

    // 4. The same key again is a cache hit.
    let exe2 = crate::build_cuda(
        device,
        axpy_signature(),
        cache,
        &key,
        AXPY_SOURCE.to_string(),
        "tl_kernel_axpy",
        &arch,
        0,
    )?;
    let hit = exe2.compile_stats().clone();
    if !hit.cache_hit || miss.cache_hit {
        return Err(fail(format!(
            "cache: first build hit={}, second hit={}",
            miss.cache_hit, hit.cache_hit
        )));
    }

    // 5. Argument errors are caught before launch; an empty problem is a no-op.
    let wrong = Tensor::zeros(&[n], DType::F16, device)?;
    let e = exe.run_args(&[
        Arg::Tensor(&x),
        Arg::Tensor(&wrong),
        Arg::Tensor(&out),
        Arg::Float(alpha),
    ]);
    if !matches!(e, Err(RuntimeError::BadArg { index: 1, .. })) {
        return Err(fail(format!("a wrong dtype gave {e:?}")));
    }
    let empty = Tensor::zeros(&[0], DType::F32, device)?;
    exe.run_args(&[
        Arg::Tensor(&empty),
        Arg::Tensor(&empty),
        Arg::Tensor(&empty),
        Arg::Float(alpha),
    ])?;

    // 6. 64 KiB of dynamic shared memory (past the 48 KiB default).
    let smem = 16384 * 4;
    let key = cuda_key(REVERSE_SOURCE, &arch)?;
    let rev = crate::build_cuda(
        device,
        reverse_signature(),
        cache,
        &key,
        REVERSE_SOURCE.to_string(),
        "tl_kernel_reverse",
        &arch,
        smem,
    )?;
    let m = 16384 * 64;
    let src = Tensor::rand(&[m], DType::F32, 0.0, 1.0, 5, device)?;
    let dst = Tensor::zeros(&[m], DType::F32, device)?;
    dst.fill(f64::NAN)?;
    rev.run(&[&src, &dst])?;
    let s = src.to_f64_vec()?;
    let want: Vec<f64> = (0..m)
        .map(|i| {
            let (b, j) = (i / 16384, i % 16384);
            s[b * 16384 + 16383 - j]
        })
        .collect();
    if dst.to_f64_vec()? != want {
        return Err(fail(
            "the 64 KiB shared-memory kernel gave a wrong result".into(),
        ));
    }

    // 7. Timing: events, warm-up, L2 flush, median.
    let t = profile::bench(
        &exe,
        &[
            Arg::Tensor(&x),
            Arg::Tensor(&y),
            Arg::Tensor(&out),
            Arg::Float(alpha),
        ],
        10,
        100,
    )?;
    if t.median_ms.is_nan() || t.median_ms <= 0.0 {
        return Err(fail(format!("timing gave {t:?}")));
    }
    let bytes = 3.0 * n as f64 * 4.0;
    Ok(format!(
        "cuda smoke OK on {} ({}, {} SMs, {} MiB L2, driver {}.{}, {nv}): axpy {}M f32 {}; {} regs, {} B local; compile {:.0} ms, cached load {:.1} ms",
        props.name,
        arch,
        props.multiprocessors,
        props.l2_bytes >> 20,
        props.driver_version / 1000,
        (props.driver_version % 1000) / 10,
        n >> 20,
        t.summary(None, Some(bytes)),
        usage.registers,
        usage.local_bytes,
        miss.compile.as_secs_f64() * 1e3,
        hit.load.as_secs_f64() * 1e3,
    ))
}
