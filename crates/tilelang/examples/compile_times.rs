//! Compile times on a device: IR → binary with a cold (empty) cache, and a cache hit, for the
//! softmax, GEMM and attention kernels. The first compile of a process also pays for loading
//! NVRTC and creating the device context; that is reported separately.
//!
//!     cargo run --release --example compile_times -- --device cuda

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
}

fn main() -> ExitCode {
    common::exit_code(run().map(|()| ExitCode::SUCCESS))
}

fn run() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(dir) = &args.emit {
        return emit(dir);
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
