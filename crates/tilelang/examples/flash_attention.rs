//! FlashAttention forward (online softmax over K/V tiles), causal or not, with the
//! log-sum-exp saved.
//!
//!     cargo run --release --example flash_attention -- --batch 1 --heads 2 --seq 200 --dim 64 --causal
//!
//! `--isa ARCH` prints the AMD ISA report (registers, spills, occupancy, the main loop's
//! instruction mix) of the kernel clang compiles for gfx942 or gfx950, without an AMD GPU:
//!
//!     cargo run --release --example flash_attention -- --dim 128 --dtype bf16 --isa gfx942

mod common;

use std::process::ExitCode;

use clap::Parser;
use tilelang::kernels::flash_attention::{flash_attention, AttnConfig};
use tilelang::kernels::reference;
use tilelang::prelude::*;

#[derive(Parser, Debug)]
#[command(
    about = "FlashAttention forward with a reference check",
    allow_negative_numbers = true
)]
struct Args {
    #[arg(long, default_value_t = 1, value_parser = common::size::<usize>)]
    batch: usize,
    #[arg(long, default_value_t = 2, value_parser = common::size::<usize>)]
    heads: usize,
    #[arg(long, default_value_t = 200, value_parser = common::size::<usize>)]
    seq: usize,
    #[arg(long, default_value_t = 64, value_parser = common::size::<usize>)]
    dim: usize,
    #[arg(long)]
    causal: bool,
    #[arg(long, default_value = "f32")]
    dtype: String,
    /// Both gemms on Hopper's warpgroup MMA (sm_90a, bf16/f16; --bm 64 per 128 threads). The
    /// default on sm_90 with 16-bit inputs and a head dim of 64 or 128
    #[arg(long, conflicts_with = "no_wgmma")]
    wgmma: bool,
    /// Stay on mma.sync even where wgmma applies (also keeps wgmma tiles out of --tune)
    #[arg(long)]
    no_wgmma: bool,
    /// FlashAttention-3's overlap inside a warpgroup: P·V of the previous key tile runs on
    /// the tensor cores while the softmax of this one is computed (`AttnConfig::overlap_pv`)
    #[arg(long)]
    overlap_pv: bool,
    /// With --overlap-pv, keep the wait for the previous P·V below this step's softmax
    /// (`AttnConfig::pin_pv_wait`; the default for d128 on Hopper)
    #[arg(long, conflicts_with = "no_pin_pv_wait")]
    pin_pv_wait: bool,
    /// Leave the wait for the previous P·V where ptxas puts it
    #[arg(long)]
    no_pin_pv_wait: bool,
    /// `--persistent [N]`: one block per multiprocessor (or N blocks), each looping over
    /// query tiles (`AttnConfig::persistent`; the default for non-causal d128 on Hopper);
    /// `--no-persistent`: one block per query tile
    #[command(flatten)]
    persistence: common::PersistentArgs,
    /// Causal: deal the grid head by head (each head's query tiles heaviest first) instead of
    /// heaviest first over groups of heads (`AttnConfig::group_heads`)
    #[arg(long)]
    per_head_order: bool,
    #[command(flatten)]
    tile: common::TileArgs,
    #[command(flatten)]
    common: common::CommonArgs,
}

fn main() -> ExitCode {
    common::exit_code(run())
}

fn run() -> anyhow::Result<ExitCode> {
    let args = Args::parse();
    let dt = common::parse_dtype(&args.dtype)?;
    let dev = args.common.device()?;
    let config_for = |target: Target| {
        let hopper = target.has_wgmma() && matches!(dt, BF16 | F16) && args.dim % 64 == 0;
        let mut cfg = if target.is_cuda() && hopper && args.no_wgmma {
            // the mma.sync tiles on sm_90a
            AttnConfig::gpu()
        } else {
            AttnConfig::for_target(&target, args.dim as i64, args.causal, dt)
        };
        cfg.bm = args.tile.bm.unwrap_or(cfg.bm);
        cfg.bn = args.tile.bn.unwrap_or(cfg.bn);
        cfg.stages = args.tile.stages.unwrap_or(cfg.stages);
        cfg.threads = args.tile.threads.unwrap_or(cfg.threads);
        cfg.overlap_pv |= args.overlap_pv;
        cfg.pin_pv_wait = (cfg.pin_pv_wait || args.pin_pv_wait) && !args.no_pin_pv_wait;
        cfg.persistent = args.persistence.apply(cfg.persistent);
        cfg.group_heads &= !args.per_head_order;
        cfg.instruction = if args.wgmma {
            Some(GemmInstruction::Wgmma)
        } else if args.no_wgmma {
            Some(GemmInstruction::MmaSync)
        } else {
            None
        };
        cfg
    };
    let kernel_for =
        |target: Target| flash_attention(dt, args.dim as i64, args.causal, config_for(target));
    if args.common.emit_only(&|t| vec![kernel_for(t)])? {
        return Ok(ExitCode::SUCCESS);
    }
    let target = dev.target()?;
    let wgmma = config_for(target).instruction == Some(GemmInstruction::Wgmma)
        || (target.has_wgmma() && !args.no_wgmma);
    let kernel = kernel_for(target);
    let (b, h, s, d) = (args.batch, args.heads, args.seq, args.dim);
    let shape = [b, h, s, d];
    let q = Tensor::randn(&shape, dt, args.common.seed, &dev)?;
    let k = Tensor::randn(&shape, dt, args.common.seed + 1, &dev)?;
    let v = Tensor::randn(&shape, dt, args.common.seed + 2, &dev)?;
    let o = Tensor::zeros(&shape, dt, &dev)?;
    let lse = Tensor::zeros(&[b, h, s], DType::F32, &dev)?;
    // The f64 reference over all query rows of a small problem, sampled rows of a large one.
    let rows = common::check_rows(b * h * s, 4.0 * (s * d) as f64, args.common.seed);
    let (want_o, want_lse) = reference::attention_rows(
        &q.to_f64_vec()?,
        &k.to_f64_vec()?,
        &v.to_f64_vec()?,
        (b, h, s, d),
        args.causal,
        1.0 / (d as f64).sqrt(),
        &rows,
    );
    let sampled = || -> anyhow::Result<f64> {
        let (ov, lv) = (o.to_f64_vec()?, lse.to_f64_vec()?);
        let got_o: Vec<f64> = rows
            .iter()
            .flat_map(|&r| ov[r * d..(r + 1) * d].iter().copied())
            .collect();
        let got_lse: Vec<f64> = rows.iter().map(|&r| lv[r]).collect();
        Ok(tilelang::runtime::rel_err(&got_o, &want_o)
            .map_err(anyhow::Error::msg)?
            .max(tilelang::runtime::rel_err(&got_lse, &want_lse).map_err(anyhow::Error::msg)?))
    };
    let launch = [
        Arg::Tensor(&q),
        Arg::Tensor(&k),
        Arg::Tensor(&v),
        Arg::Tensor(&o),
        Arg::Tensor(&lse),
    ];
    let kernel = if args.tile.tune {
        let tol = common::tolerance(dt);
        let check = || -> Result<(), String> {
            match sampled() {
                Ok(e) if e < tol => Ok(()),
                Ok(e) => Err(format!("relative error {e:.2e}")),
                Err(e) => Err(e.to_string()),
            }
        };
        let mut space = vec![];
        for bm in [64i64, 128] {
            for bn in [32i64, 64, 128] {
                for stages in [1u32, 2, 3] {
                    for threads in [128u32, 256] {
                        // Where the wgmma tiles are tried too, these stay on mma.sync.
                        space.push(AttnConfig {
                            instruction: wgmma.then_some(GemmInstruction::MmaSync),
                            ..AttnConfig::tiles(bm, bn, stages, threads)
                        });
                    }
                }
            }
        }
        if wgmma {
            // Warpgroup tiles: 64 query rows per 128 threads.
            for (bm, threads) in [(64i64, 128u32), (128, 256)] {
                for bn in [64i64, 128] {
                    for stages in [2u32, 3] {
                        space.push(AttnConfig {
                            instruction: Some(GemmInstruction::Wgmma),
                            ..AttnConfig::tiles(bm, bn, stages, threads)
                        });
                    }
                }
            }
        }
        let space = tilelang::autotune::Space::list(space).filter(|c| {
            let smem = (c.bm + 2 * c.bn * c.stages as i64) * d as i64 * 2;
            (c.bm % (16 * (c.threads as i64 / 32)) == 0 || dev.is_cpu()) && smem <= 227 * 1024
        });
        let (best, r) = tilelang::autotune::autotune(
            kernel.name(),
            &space,
            |c: &AttnConfig| flash_attention(dt, d as i64, args.causal, *c),
            &dev,
            &launch,
            &check,
            &Default::default(),
        )?;
        eprintln!("{r}");
        flash_attention(dt, d as i64, args.causal, best)
    } else {
        kernel
    };
    let exe = common::compile(&kernel, &dev)?;
    o.fill(f64::NAN)?;
    lse.fill(f64::NAN)?;
    exe.run(&[&q, &k, &v, &o, &lse])?;
    let err = sampled()?;
    let ms = args.common.time_ms(
        &exe,
        &[
            Arg::Tensor(&q),
            Arg::Tensor(&k),
            Arg::Tensor(&v),
            Arg::Tensor(&o),
            Arg::Tensor(&lse),
        ],
    )?;
    let flops = 4.0 * (b * h * s * s * d) as f64 / if args.causal { 2.0 } else { 1.0 };
    let tflops = flops / (ms * 1e-3) / 1e12;
    Ok(common::finish(
        "flash_attention",
        &format!("B{b} H{h} S{s} D{d} causal={} {dt}", args.causal),
        err,
        ms,
        common::tolerance(dt),
        &format!(
            "tflops={tflops:.4} device={dev} {} {}",
            common::compile_note(&exe),
            common::variant_note(&exe, &[&q, &k, &v, &o, &lse])
        ),
    ))
}
