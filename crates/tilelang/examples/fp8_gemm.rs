//! FP8 GEMM: C[M,N] = scaled A[M,K] · B[N,K]ᵀ with e4m3/e5m2 inputs, f32 accumulation and a
//! bf16 output, per-tensor or per-block (DeepSeek-V3: 1×128 for A, 128×128 for B) scales,
//! checked against the definition in f64.
//!
//!     cargo run --release --example fp8_gemm -- --m 1000 --n 1000 --k 1000 --scaling blocks
//!
//! On Hopper (sm_90a) it runs on fp8 `wgmma` with TMA loads; elsewhere on the compiler's
//! other gemm paths (the CPU backend, or FMAs on older GPUs).

mod common;

use std::process::ExitCode;

use clap::Parser;
use tilelang::kernels::fp8_gemm::{fp8_gemm, Fp8Gemm, Fp8Scaling};
use tilelang::kernels::gemm::GemmConfig;
use tilelang::kernels::reference;
use tilelang::prelude::*;

#[derive(Parser, Debug)]
#[command(
    about = "FP8 GEMM (per-tensor or per-block scales) with a reference check",
    allow_negative_numbers = true
)]
struct Args {
    #[arg(long, default_value_t = 1000, value_parser = common::size::<usize>)]
    m: usize,
    #[arg(long, default_value_t = 1000, value_parser = common::size::<usize>)]
    n: usize,
    #[arg(long, default_value_t = 1000, value_parser = common::size::<usize>)]
    k: usize,
    /// tensor (one scale per operand) or blocks (A per row and 128 of K, B per 128×128)
    #[arg(long, default_value = "tensor")]
    scaling: String,
    /// A's type: e4m3 or e5m2
    #[arg(long, default_value = "e4m3")]
    a: String,
    /// B's type: e4m3 or e5m2
    #[arg(long, default_value = "e4m3")]
    b: String,
    /// Output type
    #[arg(long, default_value = "bf16")]
    out_dtype: String,
    /// Per-tensor scaling without two-level accumulation: the tensor cores' own (shorter)
    /// running sum over all of K, cuBLASLt's "fast accumulation"; 128×256 tiles
    #[arg(long)]
    fast_accum: bool,
    /// Promoted per-tensor scaling with each promotion hidden under the next k tile's wgmma
    /// (two partial accumulators; each stage holds two k tiles)
    #[arg(long)]
    overlap_promotion: bool,
    /// Depth of the k tile (a multiple of 128 for fp8 wgmma)
    #[arg(long, value_parser = common::size::<i64>)]
    bk: Option<i64>,
    /// Rasterize blocks in panels of this many block-rows (0: row-major order)
    #[arg(long, value_parser = common::size::<u32>)]
    panel: Option<u32>,
    /// Thread-block clusters of this many blocks along M sharing their B tile by TMA
    /// multicast (persistent, warp-specialized kernels; 1: none)
    #[arg(long, value_parser = common::size::<u32>)]
    cluster: Option<u32>,
    /// Keep each k step's wgmma running into the next (only without promotion)
    #[arg(long)]
    overlap: bool,
    /// Resident blocks per SM to ask the compiler for (caps registers per thread)
    #[arg(long, value_parser = common::size::<u32>)]
    min_blocks: Option<u32>,
    /// Split each output tile's K over this many blocks, their f32 shares summed into C by a
    /// second kernel (1: none). Default: with block scaling on Hopper, chosen from the
    /// problem's size (`Fp8Gemm::fit_to_gpu`: only when the output tiles would leave most SMs
    /// idle, and no --bm, --bn or --threads is given); none with per-tensor scaling, which
    /// takes 64-row tiles there instead
    #[arg(long, value_parser = common::size::<u32>)]
    split_k: Option<u32>,
    #[command(flatten)]
    persistence: common::PersistentArgs,
    #[command(flatten)]
    tile: common::TileArgs,
    #[command(flatten)]
    common: common::CommonArgs,
}

fn fp8_type(s: &str) -> anyhow::Result<DType> {
    match DType::from_name(s) {
        Some(t) if t.is_fp8() => Ok(t),
        _ => anyhow::bail!("`{s}` is not an fp8 type: use e4m3 or e5m2"),
    }
}

fn main() -> ExitCode {
    common::exit_code(run())
}

fn run() -> anyhow::Result<ExitCode> {
    let args = Args::parse();
    let scaling = match args.scaling.as_str() {
        "tensor" => Fp8Scaling::Tensor,
        "blocks" => Fp8Scaling::Blocks,
        s => anyhow::bail!("unknown scaling `{s}`: use tensor or blocks"),
    };
    if args.fast_accum && scaling == Fp8Scaling::Blocks {
        anyhow::bail!("--fast-accum applies to per-tensor scaling only: block scales are applied per 128 of K, which needs the two-level accumulation");
    }
    let spec = Fp8Gemm {
        a: fp8_type(&args.a)?,
        b: fp8_type(&args.b)?,
        out: common::parse_dtype(&args.out_dtype)?,
        scaling,
        promote: !args.fast_accum,
        overlap_promotion: args.overlap_promotion,
    };
    let dev = args.common.device()?;
    let config_for = |target: Target| -> anyhow::Result<GemmConfig> {
        let mut cfg = if target.has_wgmma() {
            spec.hopper_tiles_for(args.k)
        } else {
            GemmConfig::for_target(&target, spec.a)
        };
        // Problems whose output tiles would leave most SMs idle: block-scaled ones split K,
        // promoted per-tensor ones take 64-row tiles (`Fp8Gemm::fit_to_gpu`). Tiles given on
        // the command line are taken as given.
        let tiles_given =
            args.tile.bm.is_some() || args.tile.bn.is_some() || args.tile.threads.is_some();
        if target.has_wgmma() && !tiles_given {
            let sms = common::multiprocessors(&dev, target);
            cfg = spec.fit_to_gpu(cfg, args.m, args.n, args.k, sms);
        }
        if let Some(s) = args.split_k {
            cfg.split_k = s.max(1);
        }
        cfg.bm = args.tile.bm.unwrap_or(cfg.bm);
        cfg.bn = args.tile.bn.unwrap_or(cfg.bn);
        cfg.bk = args.bk.unwrap_or(cfg.bk);
        cfg.stages = args.tile.stages.unwrap_or(cfg.stages);
        cfg.threads = args.tile.threads.unwrap_or(cfg.threads);
        cfg.panel = args.panel.unwrap_or(cfg.panel);
        cfg.min_blocks = args.min_blocks.unwrap_or(cfg.min_blocks);
        cfg.persistent = args.persistence.apply(cfg.persistent);
        cfg.cluster = args.cluster.unwrap_or(cfg.cluster);
        cfg.overlap = (cfg.overlap || args.overlap) && !spec.promotes();
        if args.overlap && spec.promotes() {
            anyhow::bail!("--overlap needs --fast-accum: promotion reads each k tile's product before the next k tile's wgmma");
        }
        spec.check_tiles(&cfg).map_err(anyhow::Error::msg)?;
        Ok(cfg)
    };
    let kernels_for = |target: Target| match config_for(target) {
        Ok(cfg) if cfg.split_k > 1 => vec![
            fp8_gemm(spec, cfg),
            common::SplitSum::kernel(spec.out, cfg.split_k),
        ],
        Ok(cfg) => vec![fp8_gemm(spec, cfg)],
        Err(_) => vec![],
    };
    if args.common.emit_only(&kernels_for)? {
        return Ok(ExitCode::SUCCESS);
    }
    let cfg = config_for(dev.target()?)?;
    let kernel = fp8_gemm(spec, cfg);
    let (m, n, k) = (args.m, args.n, args.k);
    let a = Tensor::randn(&[m, k], spec.a, args.common.seed, &dev)?;
    let b = Tensor::randn(&[n, k], spec.b, args.common.seed + 1, &dev)?;
    // Positive scales between 1/4 and 4, as a quantizer's amax / 448 would give.
    let (sa_shape, sb_shape) = spec.scale_shapes(m, n, k);
    let scales = |shape: [usize; 2], seed: u64| -> anyhow::Result<(Tensor, Vec<f64>)> {
        let r = Tensor::randn(&shape, F32, seed, &Device::Cpu)?.to_f64_vec()?;
        let v: Vec<f64> = r.iter().map(|x| 2f64.powf(x.clamp(-2.0, 2.0))).collect();
        Ok((Tensor::from_f64(&shape, F32, &v, &dev)?, v))
    };
    let (sa, sav) = scales(sa_shape, args.common.seed + 2)?;
    let (sb, sbv) = scales(sb_shape, args.common.seed + 3)?;
    let c = Tensor::zeros(&[m, n], spec.out, &dev)?;
    // The f64 reference by the definition, over all rows of a small problem or sampled rows.
    let rows = common::check_rows(m, 2.0 * (n * k) as f64, args.common.seed);
    let (av, bv) = (a.to_f64_vec()?, b.to_f64_vec()?);
    let a_rows = common::gather_rows(&av, &rows, k);
    let want = reference::fp8_gemm(scaling, &a_rows, &bv, &sav, &sbv, &rows, m, n, k);
    let exe = common::compile(&kernel, &dev)?;
    c.fill(f64::NAN)?;
    // Where K is split, the GEMM writes its shares and a second kernel sums them into C.
    let split = common::SplitSum::for_splits(spec.out, cfg.split_k, m, n, &dev)?;
    let tensors = [&a, &b, &sa, &sb, common::SplitSum::target(&split, &c)];
    common::SplitSum::run(&split, &exe, &tensors, &c)?;
    let cv = c.to_f64_vec()?;
    let got = common::gather_rows(&cv, &rows, n);
    let err = tilelang::runtime::rel_err(&got, &want).map_err(anyhow::Error::msg)?;
    let launch: Vec<Arg> = tensors.iter().map(|t| Arg::Tensor(t)).collect();
    let ms = common::SplitSum::time_ms(&split, &args.common, &exe, &launch, &c)?;
    let split_note = common::SplitSum::note(&split);
    let tflops = 2.0 * (m * n * k) as f64 / (ms * 1e-3) / 1e12;
    Ok(common::finish(
        "fp8_gemm",
        &format!(
            "{m}x{n}x{k} {}x{} {} {}",
            spec.a,
            spec.b,
            args.scaling,
            if spec.overlap_promotion {
                "promoted-overlapped"
            } else if spec.promotes() {
                "promoted"
            } else {
                "fast-accum"
            }
        ),
        err,
        ms,
        common::tolerance(spec.out).max(1e-2),
        &format!(
            "tflops={tflops:.3} device={dev} {}{}{split_note} {}",
            common::compile_note(&exe),
            common::tiles_note(&cfg),
            common::variant_note(&exe, &tensors)
        ),
    ))
}
