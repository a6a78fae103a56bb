//! Generated CUDA compiles with NVRTC for sm_80 and sm_90a, without register spills, and the
//! SASS has the instructions the intrinsics stand for.
//!
//! These tests need NVRTC. CI installs it (`scripts/install-cuda-tools.sh`, run by
//! `scripts/test.sh`), which also sets `TILELANG_REQUIRE_NVRTC=1` so they cannot be skipped
//! there; elsewhere, without NVRTC, each prints `SKIPPED <test>: <why>` and passes.

mod kernels;

use tl_codegen::cuda::{generate, CudaSource};
use tl_ir::Kernel;
use tl_nvrtc::testing::{nvrtc_or_skip, skip_or_fail};
use tl_nvrtc::{check_with, CheckOptions, NvrtcError, Report, SassMode};
use tl_target::Target;

const ARCHS: [Target; 2] = [Target::SM80, Target::SM90];

fn source(k: &Kernel, t: Target) -> CudaSource {
    match generate(k, t) {
        Ok(s) => s,
        Err(d) => panic!("codegen of `{}` for {t} failed:\n{d}", k.name),
    }
}

/// Compile `k` for `t`, fail on errors and spills, require the listed SASS opcodes (when
/// cuobjdump is installed; with TILELANG_REQUIRE_NVRTC it must be).
fn check_kernel(k: &Kernel, t: Target, instructions: &[&str]) -> Report {
    let src = source(k, t);
    let opts = CheckOptions {
        sass: if tl_nvrtc::testing::cuobjdump_required() {
            SassMode::Required
        } else {
            SassMode::IfAvailable
        },
        require_instructions: instructions.iter().map(|s| s.to_string()).collect(),
        entry: Some(src.entry.clone()),
        ..Default::default()
    };
    match check_with(&src.code, &src.arch, &opts) {
        Ok(r) => {
            eprintln!("{r}");
            dump(k, &src, &r);
            assert_eq!(r.entry, src.entry);
            assert!(
                r.usage.registers > 0,
                "no resource usage parsed:\n{}",
                r.log
            );
            r
        }
        Err(e) => panic!(
            "`{}` for {t}: {e}\n--- source ---\n{}",
            k.name,
            numbered(&src.code)
        ),
    }
}

/// With `TILELANG_DUMP_CUDA=dir`, keep each kernel's source, log and SASS for inspection.
fn dump(k: &Kernel, src: &CudaSource, r: &Report) {
    let Some(dir) = std::env::var_os("TILELANG_DUMP_CUDA") else {
        return;
    };
    let base = std::path::Path::new(&dir).join(format!("{}.{}", k.name, src.arch));
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(base.with_extension(format!("{}.cu", src.arch)), &src.code);
    let _ = std::fs::write(base.with_extension(format!("{}.log", src.arch)), &r.log);
    if let Some(s) = &r.sass {
        let _ = std::fs::write(base.with_extension(format!("{}.sass", src.arch)), s);
    }
}

/// The kernel (not the header) with the line numbers NVRTC's log uses.
fn numbered(code: &str) -> String {
    code.lines()
        .enumerate()
        .skip_while(|(_, l)| !l.starts_with("extern \"C\""))
        .map(|(i, l)| format!("{:5} {l}\n", i + 1))
        .collect()
}

#[test]
fn every_intrinsic_compiles_without_spills() {
    if nvrtc_or_skip("every_intrinsic_compiles_without_spills").is_none() {
        return;
    }
    let k = kernels::all_intrinsics();
    for t in ARCHS {
        let r = check_kernel(
            &k,
            t,
            &[
                "HMMA",
                "LDSM",
                "LDGSTS",
                "LDGDEPBAR",
                "DEPBAR",
                "SHFL",
                "BAR",
                "NANOSLEEP",
            ],
        );
        if r.sass.is_some() {
            let ops = r.opcodes();
            let has = |p: &str| ops.keys().any(|k| k.starts_with(p));
            // Atomics: f32/f64/i32/i64 as RED (no result used); f16/bf16 through CAS or RED.
            assert!(has("RED") || has("ATOM"), "no atomics: {ops:?}");
            // All six ldmatrix forms (x1/x2/x4, plain and transposed).
            for form in ["LDSM.16.M88", "LDSM.16.MT88"] {
                assert!(has(form), "{form} missing: {ops:?}");
            }
            // 16-byte async copies bypass L1; 4/8-byte ones cannot.
            assert!(has("LDGSTS.E.BYPASS.128"), "{ops:?}");
            if t == Target::SM90 {
                // Hardware fp8 conversion on sm_89+.
                assert!(has("F2FP.SATFINITE.E4M3"), "{ops:?}");
            }
        }
    }
}

#[test]
fn small_kernels_compile_without_spills() {
    if nvrtc_or_skip("small_kernels_compile_without_spills").is_none() {
        return;
    }
    for t in ARCHS {
        check_kernel(&kernels::elementwise_bf16(), t, &["LDG", "STG"]);
        check_kernel(&kernels::warp_softmax(), t, &["SHFL.BFLY", "MUFU.EX2"]);
        check_kernel(&kernels::fp8_convert(), t, &["STG"]);
    }
    // sm_89 converts fp8 in hardware; sm_86 takes the software path.
    let r = check_kernel(&kernels::fp8_convert(), Target::Cuda { sm: 89 }, &["STG"]);
    if r.sass.is_some() {
        assert!(
            tl_nvrtc::has_instruction(
                r.sass.as_deref().unwrap_or(""),
                "F2FP.SATFINITE.E4M3.F32.PACK_AB_MERGE_C"
            ),
            "{r}"
        );
    }
    let r = check_kernel(&kernels::fp8_convert(), Target::Cuda { sm: 86 }, &["STG"]);
    assert!(!r.opcodes().keys().any(|k| k.contains("E4M3")), "{r}");
}

#[test]
fn mma_gemm_uses_tensor_cores_and_async_copies() {
    if nvrtc_or_skip("mma_gemm_uses_tensor_cores_and_async_copies").is_none() {
        return;
    }
    for t in ARCHS {
        let r = check_kernel(
            &kernels::mma_gemm_bf16(),
            t,
            &["HMMA", "LDSM", "LDGSTS", "BAR"],
        );
        // A small tile: far below the register file; a jump here means codegen regressed.
        assert!(r.usage.registers <= 64, "{r}");
        assert_eq!(r.usage.stack_frame, 0, "local memory used: {r}");
    }
}

#[test]
fn compile_errors_carry_the_log_and_source_line() {
    if nvrtc_or_skip("compile_errors_carry_the_log_and_source_line").is_none() {
        return;
    }
    let src = "extern \"C\" __global__ void k(float* x) {\n  x[0] = undefined_thing;\n}\n";
    match tl_nvrtc::compile(src, "sm_80", &Default::default()) {
        Err(NvrtcError::Compile { arch, log }) => {
            assert_eq!(arch, "sm_80");
            assert!(log.contains("undefined_thing"), "{log}");
            assert!(log.contains("tilelang.cu:2:"), "{log}");
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
}

#[test]
fn spills_fail_the_check() {
    if nvrtc_or_skip("spills_fail_the_check").is_none() {
        return;
    }
    // 64 live accumulators under a 32-register cap must spill.
    let src = r#"
extern "C" __global__ void spill(const float* __restrict__ x, float* __restrict__ y, int n) {
  float acc[64];
  #pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = x[i * 7 + threadIdx.x];
  for (int j = 0; j < n; ++j) {
    #pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = acc[i] * acc[(i + 1) % 64] + x[j + i];
  }
  float s = 0.0f;
  #pragma unroll
  for (int i = 0; i < 64; ++i) s += acc[i];
  y[threadIdx.x] = s;
}
"#;
    let mut opts = CheckOptions {
        sass: SassMode::Skip,
        ..Default::default()
    };
    opts.compile.max_registers = Some(32);
    match check_with(src, "sm_80", &opts) {
        Err(NvrtcError::Spills {
            function, usage, ..
        }) => {
            assert_eq!(function, "spill");
            assert!(usage.spill_stores > 0 && usage.registers <= 32, "{usage}");
        }
        other => panic!("expected a spill error, got {other:?}"),
    }
    opts.allow_spills = true;
    let r = check_with(src, "sm_80", &opts).unwrap_or_else(|e| panic!("{e}"));
    assert!(r.usage.spills());
}

#[test]
fn nvrtc_reports_version_archs_and_ptx() {
    let Some(nv) = nvrtc_or_skip("nvrtc_reports_version_archs_and_ptx") else {
        return;
    };
    let (major, _) = nv.version();
    assert!(major >= 12, "NVRTC {:?}", nv.version());
    let archs = nv.supported_archs().unwrap_or_else(|e| panic!("{e}"));
    assert!(archs.contains(&80) && archs.contains(&90), "{archs:?}");
    let c = tl_nvrtc::compile(
        r#"extern "C" __global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }"#,
        "sm_90a",
        &Default::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(c.ptx().contains(".target sm_90a"), "{}", c.ptx());
    assert!(c.ptx().contains(".entry k"), "{}", c.ptx());
    assert_eq!(&c.cubin[..4], b"\x7fELF");
    assert!(c.usage("k").is_some(), "{}", c.log);
    match tl_nvrtc::compile("", "sm_1000", &Default::default()) {
        Err(NvrtcError::InvalidArch { .. }) => {}
        other => panic!("expected an arch error, got {other:?}"),
    }
}

#[test]
fn sass_listing_names_the_kernel() {
    if nvrtc_or_skip("sass_listing_names_the_kernel").is_none() {
        return;
    }
    let c = match tl_nvrtc::compile(
        r#"extern "C" __global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }"#,
        "sm_80",
        &Default::default(),
    ) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    };
    match tl_nvrtc::sass(&c.cubin) {
        Ok(s) => {
            assert!(s.contains("Function : k"), "{s}");
            assert!(tl_nvrtc::has_instruction(&s, "EXIT"), "{s}");
        }
        Err(e @ NvrtcError::ToolNotFound { .. }) => {
            skip_or_fail("sass_listing_names_the_kernel", &e)
        }
        Err(e) => panic!("{e}"),
    }
}
