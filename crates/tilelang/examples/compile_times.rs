//! Compile times on a device: IR → binary with a cold (empty) cache, and a cache hit, for the
//! softmax, GEMM and attention kernels. The first compile of a process also pays for loading
//! NVRTC and creating the device context; that is reported separately.
//!
//!     cargo run --release --example compile_times -- --device cuda
//!
//! `--amd` measures the same, instead, for the shipped AMD GEMM and attention kernels on gfx950
//! and gfx942, with no AMD GPU (`Kernel::precompile_for`; needs clang, LLVM 20+): cold is
//! lowering, HIP codegen and clang to a code object with its ISA report, into an empty cache;
//! the cache hit is what `Kernel::compile` does on a HIP device before loading the code object
//! (lowering, codegen, the key, reading the code object and its usage from the disk cache).
//!
//!     cargo run --release --example compile_times -- --amd

mod common;

use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use tilelang::kernels::{elementwise, flash_attention, gemm, softmax};
use tilelang::prelude::*;

#[derive(Parser, Debug)]
struct Args {
    #[arg(long)]
    device: Option<String>,
    /// Write the CUDA C++ and PTX of every kernel this run would compile for an H100 (sm_90a)
    /// into DIR, numbered in the table's order, and exit: ptxas's share of the time can then be
    /// measured off the GPU machine (`tilelang check-cuda`).
    #[arg(long, value_name = "DIR")]
    emit: Option<std::path::PathBuf>,
    /// Time the AMD kernels instead (gfx950 and gfx942 through clang; no GPU needed)
    #[arg(long)]
    amd: bool,
}

fn main() -> ExitCode {
    common::exit_code(run().map(|()| ExitCode::SUCCESS))
}

fn run() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(dir) = &args.emit {
        return emit(dir);
    }
    if args.amd {
        return amd_rows();
    }
    let dev = match &args.device {
        Some(d) => Device::parse(d)?,
        None => Device::best(),
    };
    let dir = std::env::temp_dir().join(format!("tl-compile-times-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let opts = CompileOptions {
        cache_dir: Some(dir.clone()),
        ..Default::default()
    };
    let warm = Instant::now();
    elementwise::add_relu(F32, 1024, 128)
        .compile_with(&dev, &opts)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    println!(
        "process start-up (first compile: compiler + device init): {:.1} ms",
        warm.elapsed().as_secs_f64() * 1e3
    );
    let gpu = !dev.is_cpu();
    let wgmma = gpu && dev.target().is_ok_and(|t| t.has_wgmma());
    let kernels = kernels(gpu, wgmma);
    // A second cold compile (into another empty cache) shows how much of the first was
    // one-time warm-up of the compiler rather than this kernel.
    let dir2 = dir.join("second");
    let opts2 = CompileOptions {
        cache_dir: Some(dir2.clone()),
        ..Default::default()
    };
    for (name, k) in &kernels {
        let exe = k
            .compile_with(&dev, &opts)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let st = exe.compile_stats().clone();
        let t = Instant::now();
        let again = k
            .compile_with(&dev, &opts)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let hit = t.elapsed();
        let second = k
            .compile_with(&dev, &opts2)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        println!(
            "{name:30} cold {:7.1} ms (lower {:.1}, codegen {:.1}, compile {:.1}, load {:.1}), again cold {:.1} ms | cache hit {:.2} ms (hit={}){}{}",
            st.total.as_secs_f64() * 1e3,
            st.lower.as_secs_f64() * 1e3,
            st.codegen.as_secs_f64() * 1e3,
            st.compile.as_secs_f64() * 1e3,
            st.load.as_secs_f64() * 1e3,
            second.compile_stats().total.as_secs_f64() * 1e3,
            hit.as_secs_f64() * 1e3,
            again.compile_stats().cache_hit,
            match exe.resource_usage() {
                Some(u) => format!(" | {} regs, spills {:?}/{:?} B", u.registers, u.spill_stores, u.spill_loads),
                None => String::new(),
            },
            match exe.source() {
                Some(src) if tl_nvrtc::is_ptx(src) => " | PTX".to_string(),
                Some(_) if gpu => match &st.fallback {
                    Some(why) => format!(" | CUDA C++ ({why})"),
                    None => " | CUDA C++".to_string(),
                },
                _ => String::new(),
            }
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// The shipped AMD kernels, for gfx950 and gfx942: the GEMM (bf16 NT, the tiles the target
/// gets by default) and attention (bf16, head dim 128, and 64 causal).
fn amd_kernels(t: Target) -> Vec<(String, Kernel)> {
    let g = gemm::GemmConfig::for_target(&t, BF16);
    let mut v = vec![(
        format!("gemm_nt bf16 {}x{}x{} {t}", g.bm, g.bn, g.bk),
        gemm::gemm(gemm::Layout::NT, BF16, BF16, g),
    )];
    for (d, causal) in [(128, false), (64, true)] {
        let cfg = flash_attention::AttnConfig::for_target(&t, d, causal, BF16);
        v.push((
            format!(
                "flash_attn d{d}{} bf16 {t}",
                if causal { " causal" } else { "" }
            ),
            flash_attention::flash_attention(BF16, d, causal, cfg),
        ));
    }
    v
}

/// `--amd`: cold compiles (lower + HIP codegen + clang to a code object) and cache hits (lower
/// + codegen + key + disk-cache lookup) of the AMD kernels, by target: no GPU.
fn amd_rows() -> anyhow::Result<()> {
    let clang = tilelang::amdgpu::Clang::find()?;
    let dir = std::env::temp_dir().join(format!("tl-compile-times-amd-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let opts = |sub: &str| CompileOptions {
        cache_dir: Some(dir.join(sub)),
        ..Default::default()
    };
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let warm = Instant::now();
    elementwise::add_relu(F32, 1024, 256)
        .precompile_for(Target::GFX950, &opts("warm"))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    println!(
        "AMD, no GPU ({}): process start-up (first compile: finding clang, first clang run) {:.1} ms",
        clang.version,
        ms(warm.elapsed())
    );
    for t in [Target::GFX950, Target::GFX942] {
        for (name, k) in amd_kernels(t) {
            let pre = |sub: &str| {
                k.precompile_for(t, &opts(sub))
                    .map_err(|e| anyhow::anyhow!("{name}: {e}"))
            };
            let cold = pre("cold")?;
            let again = pre("again")?;
            // The best of a few hits: the first may still pay for page-cache misses.
            let mut hits = vec![];
            for _ in 0..5 {
                hits.push(pre("cold")?);
            }
            let hit = hits
                .iter()
                .min_by_key(|h| h.stats.total)
                .ok_or_else(|| anyhow::anyhow!("no cache hit measured"))?;
            if cold.cache_hit || !hits.iter().all(|h| h.cache_hit && h.key == cold.key) {
                anyhow::bail!("{name}: the cold compile hit or a repeat missed the cache");
            }
            let c = &cold.stats;
            let h = &hit.stats;
            println!(
                "{name:34} cold {:7.1} ms (lower {:.1}, codegen {:.1}, clang {:.1}), again cold {:.1} ms | cache hit {:.2} ms (lower {:.2}, codegen+key {:.2}, lookup {:.2}){}",
                ms(c.total),
                ms(c.lower),
                ms(c.codegen),
                ms(c.compile),
                ms(again.stats.total),
                ms(h.total),
                ms(h.lower),
                ms(h.codegen),
                ms(h.load),
                match &cold.usage {
                    Some(u) => format!(
                        " | {} VGPRs, spills {}/{} (VGPR/SGPR)",
                        u.registers,
                        u.vgpr_spills.unwrap_or(0),
                        u.sgpr_spills.unwrap_or(0)
                    ),
                    None => String::new(),
                }
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// The kernels timed, with their names: the defaults for a GPU (and for Hopper when `wgmma`),
/// or the CPU tiles.
fn kernels(gpu: bool, wgmma: bool) -> Vec<(&'static str, Kernel)> {
    let mut kernels = vec![
        (
            "softmax_row 8192 bf16",
            softmax::softmax_row(BF16, 8192, 256),
        ),
        (
            "gemm_nt bf16",
            gemm::gemm(
                gemm::Layout::NT,
                BF16,
                BF16,
                if gpu {
                    gemm::GemmConfig::gpu()
                } else {
                    gemm::GemmConfig::cpu()
                },
            ),
        ),
        (
            "flash_attn d128 bf16",
            flash_attention::flash_attention(
                BF16,
                128,
                false,
                if gpu {
                    // The mma.sync kernel (on sm_90a these tiles would take wgmma).
                    flash_attention::AttnConfig {
                        instruction: Some(GemmInstruction::MmaSync),
                        ..flash_attention::AttnConfig::gpu()
                    }
                } else {
                    flash_attention::AttnConfig::cpu()
                },
            ),
        ),
    ];
    if wgmma {
        kernels.push((
            "gemm_nt bf16 wgmma",
            gemm::gemm(gemm::Layout::NT, BF16, BF16, gemm::GemmConfig::hopper()),
        ));
        // The tiles each head dim and masking gets by default on Hopper.
        for (d, causal, name) in [
            (64, false, "flash_attn d64 wgmma"),
            (64, true, "flash_attn d64 causal wgmma"),
            (128, false, "flash_attn d128 wgmma"),
            (128, true, "flash_attn d128 causal wgmma"),
        ] {
            kernels.push((
                name,
                flash_attention::flash_attention(
                    BF16,
                    d,
                    causal,
                    flash_attention::AttnConfig::hopper_for(d, causal),
                ),
            ));
        }
    }
    kernels
}

/// `--emit DIR`: every kernel's CUDA C++ and PTX for sm_90a, as `NN-name.sm_90a.{cu,ptx}`.
fn emit(dir: &std::path::Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (i, (name, k)) in kernels(true, true).iter().enumerate() {
        let stem = format!("{i:02}-{}", name.replace([' ', '.'], "_"));
        let target = Target::SM90;
        let cu = k.emit(target).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
        std::fs::write(dir.join(format!("{stem}.{target}.cu")), cu)?;
        match k.emit_ptx(target) {
            Ok(ptx) => std::fs::write(dir.join(format!("{stem}.{target}.ptx")), ptx)?,
            Err(e) => println!("{name}: no PTX ({e})"),
        }
        println!("wrote {}", dir.join(format!("{stem}.{target}.*")).display());
    }
    Ok(())
}
