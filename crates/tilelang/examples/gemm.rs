//! GEMM on tiles: C[M,N] = A · B with f32 accumulation, checked against an f64 reference.
//!
//!     cargo run --release --example gemm -- --m 1000 --n 1000 --k 1000 --layout nt --dtype bf16
//!
//! `--isa ARCH` prints the AMD ISA report (registers, spills, occupancy, the main loop's
//! instruction mix) of the kernel clang compiles for gfx942 or gfx950, without an AMD GPU:
//!
//!     cargo run --release --example gemm -- --layout nt --dtype bf16 --isa gfx950

mod common;

use std::process::ExitCode;

use clap::Parser;
use tilelang::kernels::gemm::{gemm, GemmConfig, Layout};
use tilelang::kernels::gemm_realign::{
    gemm_nn_realigning_b, realign_config, realign_pays, realign_takes,
};
use tilelang::kernels::gemm_residue::{
    gemm_nn_by_residue, residue_config, residue_pays, residue_takes,
};
use tilelang::kernels::reference;
use tilelang::prelude::*;

#[derive(Parser, Debug)]
#[command(
    about = "Tile GEMM with a reference check",
    allow_negative_numbers = true
)]
struct Args {
    #[arg(long, default_value_t = 1000, value_parser = common::size::<usize>)]
    m: usize,
    #[arg(long, default_value_t = 1000, value_parser = common::size::<usize>)]
    n: usize,
    #[arg(long, default_value_t = 1000, value_parser = common::size::<usize>)]
    k: usize,
    /// nn (B is [K,N]), nt (B is [N,K]) or tn (A is [K,M])
    #[arg(long, default_value = "nn")]
    layout: String,
    /// Input type: f32, bf16 or f16 (accumulation is f32)
    #[arg(long, default_value = "f32")]
    dtype: String,
    /// Output type (default: f32 for f32 inputs, else the input type)
    #[arg(long)]
    out_dtype: Option<String>,
    /// Depth of the k tile
    #[arg(long, value_parser = common::size::<i64>)]
    bk: Option<i64>,
    /// Resident blocks per SM to ask the compiler for (caps registers per thread)
    #[arg(long, value_parser = common::size::<u32>)]
    min_blocks: Option<u32>,
    /// Use Hopper's warpgroup MMA (sm_90a; --bk a multiple of 64, --bm 64 per 128 threads).
    /// The default on sm_90 with 16-bit inputs
    #[arg(long, conflicts_with = "no_wgmma")]
    wgmma: bool,
    /// Stay on mma.sync even where wgmma applies (also keeps wgmma tiles out of --tune)
    #[arg(long)]
    no_wgmma: bool,
    /// With wgmma and 3+ stages: keep each k step's wgmma running while the next k step's tiles
    /// are awaited (measured slower with TMA loads and a producer warpgroup, gpu-notes run 19e,
    /// and with cp.async loads)
    #[arg(long)]
    overlap: bool,
    #[command(flatten)]
    persistence: common::PersistentArgs,
    /// Warp specialization on sm_90a: a producer warpgroup issues the TMA loads and C goes out
    /// by TMA store (the Hopper default)
    #[arg(long, conflicts_with = "no_ws")]
    ws: bool,
    /// Every warp loads and computes (C stored from the registers)
    #[arg(long)]
    no_ws: bool,
    /// Rasterize blocks in panels of this many block-rows (L2 reuse; 0: row-major order)
    #[arg(long, value_parser = common::size::<u32>)]
    panel: Option<u32>,
    /// Thread-block clusters of this many blocks along M sharing their B tile by TMA
    /// multicast (sm_90a, persistent and warp-specialized; 1: none)
    #[arg(long, value_parser = common::size::<u32>)]
    cluster: Option<u32>,
    /// Split each output tile's K over this many blocks, their f32 shares summed into C by a
    /// second kernel (1: none). Default: chosen from the problem's size on Hopper
    /// (`GemmConfig::fit_to_gpu`: only when the output tiles would leave most SMs idle), none
    /// elsewhere; --tune tunes unsplit tiles
    #[arg(long, value_parser = common::size::<u32>)]
    split_k: Option<u32>,
    /// NN only: read A in place by row residue instead of copying an A whose rows are not
    /// whole 16-byte units (odd K) into padded rows first (`kernels::gemm_residue`; 16-bit
    /// inputs, M and N multiples of 8; the tile options do not apply). The default on Hopper
    /// where it measured faster (`gemm_residue::residue_pays`: K ≥ 3072, tiles that fill the
    /// GPU) and no tile option is given
    #[arg(long, conflicts_with = "no_by_residue")]
    by_residue: bool,
    /// Copy an odd-K A into padded rows first even where `--by-residue` is the default
    #[arg(long)]
    no_by_residue: bool,
    /// NN only: read a B whose rows are not whole 16-byte units (N not a multiple of 8) in
    /// place by row residue, realigned in shared memory, instead of copying it into padded
    /// rows first (`kernels::gemm_realign`; 16-bit inputs, K a multiple of 8; the tile options
    /// do not apply). The default on Hopper where it measured faster
    /// (`gemm_realign::realign_pays`: M ≤ 128, an output tile per SM) and no tile option is
    /// given
    #[arg(long, conflicts_with_all = ["by_residue", "no_realign_b"])]
    realign_b: bool,
    /// Copy an odd-N B into padded rows first even where `--realign-b` is the default
    #[arg(long)]
    no_realign_b: bool,
    #[command(flatten)]
    tile: common::TileArgs,
    #[command(flatten)]
    common: common::CommonArgs,
}

/// The configurations `--tune` tries: tiles that fit shared memory and keep the accumulator at
/// most 128 f32 registers per thread.
fn tune_space(
    dev: &Device,
    wgmma: bool,
    layout: Layout,
    m: usize,
) -> tilelang::autotune::Space<GemmConfig> {
    if dev.is_cpu() {
        return tilelang::autotune::Space::product3(
            &[64i64, 128],
            &[64i64, 128],
            &[32i64, 64],
            |&bm, &bn, &bk| GemmConfig::tiles(bm, bn, bk, 1, 128),
        );
    }
    let mut v = vec![];
    for bm in [64i64, 128, 256] {
        for bn in [64i64, 128, 256] {
            for bk in [32i64, 64] {
                for stages in [2u32, 3, 4] {
                    for threads in [128u32, 256] {
                        // Four-warp tiles may also ask for three blocks per SM (registers
                        // capped near 168; the tuner rejects the ones that then spill).
                        let occupancy: &[u32] = if threads == 128 { &[0, 3] } else { &[0] };
                        for &min_blocks in occupancy {
                            // Row-major block order, or panels of 8 block-rows (L2 reuse).
                            for panel in [0u32, 8] {
                                v.push(GemmConfig {
                                    min_blocks,
                                    panel,
                                    // Where the wgmma tiles are tried too, these stay on
                                    // mma.sync (some would take wgmma on their own).
                                    instruction: wgmma.then_some(GemmInstruction::MmaSync),
                                    ..GemmConfig::tiles(bm, bn, bk, stages, threads)
                                });
                            }
                        }
                    }
                }
            }
        }
    }
    // Hopper warpgroup-MMA tiles (docs/design/wgmma-plan.md): 64 rows per warpgroup, k tiles
    // of 64 or 128.
    if wgmma {
        for (bm, bn, threads) in [
            (128, 256, 256),
            (128, 128, 256),
            (64, 256, 128),
            (64, 128, 128),
        ] {
            for (bk, stages) in [(64i64, 3u32), (64, 4), (128, 2)] {
                // Overlapped wgmma wins with TMA loads (128x256, 4 stages: 748 against 656
                // TFLOP/s at 8192³, docs/performance.md run 12) and lost with cp.async.
                for (panel, overlap) in [(0u32, false), (8, false), (8, true)] {
                    if overlap && stages < 3 {
                        continue;
                    }
                    v.push(GemmConfig {
                        panel,
                        overlap,
                        instruction: Some(GemmInstruction::Wgmma),
                        ..GemmConfig::tiles(bm, bn, bk, stages, threads)
                    });
                }
            }
        }
    }
    v.retain(|c| {
        let smem = (c.bm + c.bn) * c.bk * 2 * c.stages as i64;
        let blocks = c.min_blocks.max(1) as i64;
        smem <= 200 * 1024
            && smem * blocks <= 220 * 1024
            && c.bm * c.bn / c.threads as i64 <= 128
            && c.bm * c.bn / (c.threads as i64) >= 32
    });
    // The warp-specialized persistent tiles the default's refit chooses from (128×256 down to
    // 64×32, their stages filling shared memory), as it would run them: they run as the
    // default path runs them (within 196 KiB of stages; the narrowest hold 16 accumulators a
    // thread, under the list's floor of 32).
    if wgmma {
        v.extend(GemmConfig::refit_candidates(layout, m));
    }
    tilelang::autotune::Space::list(v)
}

fn main() -> ExitCode {
    common::exit_code(run())
}

fn run() -> anyhow::Result<ExitCode> {
    let args = Args::parse();
    let layout = Layout::parse(&args.layout)
        .ok_or_else(|| anyhow::anyhow!("unknown layout `{}`: use nn, nt or tn", args.layout))?;
    let dt = common::parse_dtype(&args.dtype)?;
    let out_dt = match &args.out_dtype {
        Some(s) => common::parse_dtype(s)?,
        None => dt,
    };
    let dev = args.common.device()?;
    let config_for = |target: Target| {
        let mut cfg = if target.is_cuda()
            && (args.no_wgmma || !GemmConfig::hopper_applies(&target, dt))
            && !args.wgmma
        {
            // mma.sync tiles (also on sm_90a with --no-wgmma)
            GemmConfig::gpu()
        } else {
            // On Hopper: the TMA tiles where the rows allow TMA, else the cp.async ones.
            GemmConfig::for_problem(&target, dt, layout, args.m, args.n, args.k)
        };
        // Problems whose output tiles would leave most SMs idle get narrower tiles or a split
        // K on Hopper (not when tuning: the tuner times unsplit tiles).
        if target.is_cuda() && cfg == GemmConfig::hopper() && !args.tile.tune {
            let sms = common::multiprocessors(&dev, target);
            cfg = cfg.fit_to_gpu(layout, args.m, args.n, args.k, sms);
        }
        configure(&mut cfg, &args, dt.bytes() as i64);
        cfg.split_k = match args.split_k {
            _ if args.tile.tune => 1,
            Some(s) => s.max(1),
            None => cfg.split_k,
        };
        cfg
    };
    // The residue kernel where asked, or where it pays and the command line leaves the
    // Hopper tiles alone (only on Hopper: elsewhere `--emit` writes the default kernel).
    type PaysRule = fn(&Target, DType, Layout, (usize, usize, usize), u32) -> bool;
    let pays = |rule: PaysRule, target: Target| {
        let sms = common::multiprocessors(&dev, target);
        rule(&target, dt, layout, (args.m, args.n, args.k), sms)
    };
    let residue_for = |target: Target| {
        args.by_residue
            || (!args.no_by_residue
                && !args.tile.tune
                && config_for(target) == GemmConfig::hopper()
                && pays(residue_pays, target))
    };
    // Likewise the realigning kernel for an NN B whose rows are not whole 16-byte units.
    let realign_for = |target: Target| {
        args.realign_b
            || (!args.no_realign_b
                && !args.by_residue
                && !tile_options_given(&args)
                && GemmConfig::for_problem(&target, dt, layout, args.m, args.n, args.k)
                    == GemmConfig::hopper()
                && pays(realign_pays, target))
    };
    let kernels_for = |target: Target| {
        if residue_for(target) && GemmConfig::hopper_applies(&target, dt) {
            return vec![gemm_nn_by_residue(dt, out_dt, residue_config())];
        }
        if realign_for(target) && GemmConfig::hopper_applies(&target, dt) {
            return vec![gemm_nn_realigning_b(dt, out_dt, realign_config(args.m))];
        }
        let cfg = config_for(target);
        let mut ks = vec![gemm(layout, dt, out_dt, cfg)];
        if cfg.split_k > 1 {
            ks.push(common::SplitSum::kernel(out_dt, cfg.split_k));
        }
        ks
    };
    if args.by_residue {
        residue_shapes(layout, dt, args.m, args.n)?;
    }
    if args.realign_b && !realign_takes(dt, layout, args.k) {
        anyhow::bail!(
            "--realign-b takes --layout nn, 16-bit inputs, and K a multiple of 8 (got {} {dt}, K = {})",
            layout.name(),
            args.k
        );
    }
    if args.common.emit_only(&kernels_for)? {
        return Ok(ExitCode::SUCCESS);
    }
    let target = dev.target()?;
    if residue_for(target) {
        return run_by_residue(&args, dt, out_dt, &dev);
    }
    if realign_for(target) {
        return run_realigning_b(&args, dt, out_dt, &dev);
    }
    let cfg = config_for(target);
    let kernel = gemm(layout, dt, out_dt, cfg);
    let wgmma = args.wgmma || (!args.no_wgmma && GemmConfig::hopper_applies(&target, dt));
    let (m, n, k) = (args.m, args.n, args.k);
    let a_shape = if layout == Layout::TN { [k, m] } else { [m, k] };
    let b_shape = if layout == Layout::NT { [n, k] } else { [k, n] };
    let a = Tensor::randn(&a_shape, dt, args.common.seed, &dev)?;
    let b = Tensor::randn(&b_shape, dt, args.common.seed + 1, &dev)?;
    let c = Tensor::zeros(&[m, n], out_dt, &dev)?;
    // The f64 reference, over all rows of a small problem or sampled rows of a large one.
    let rows = common::check_rows(m, 2.0 * (n * k) as f64, args.common.seed);
    let (av, bv) = (a.to_f64_vec()?, b.to_f64_vec()?);
    let a_rows: Vec<f64> = rows
        .iter()
        .flat_map(|&r| {
            (0..k).map(move |kk| {
                if layout == Layout::TN {
                    kk * m + r
                } else {
                    r * k + kk
                }
            })
        })
        .map(|i| av[i])
        .collect();
    let want = reference::gemm(&a_rows, &bv, rows.len(), n, k, false, layout == Layout::NT);
    let sampled = |c: &Tensor| -> anyhow::Result<f64> {
        let cv = c.to_f64_vec()?;
        let got = common::gather_rows(&cv, &rows, n);
        tilelang::runtime::rel_err(&got, &want).map_err(anyhow::Error::msg)
    };
    let launch = [Arg::Tensor(&a), Arg::Tensor(&b), Arg::Tensor(&c)];
    let (kernel, cfg) = if args.tile.tune {
        let space = tune_space(&dev, wgmma, layout, m);
        let tol = common::tolerance(dt).max(common::tolerance(out_dt));
        let check = || -> Result<(), String> {
            match sampled(&c) {
                Ok(e) if e < tol => Ok(()),
                Ok(e) => Err(format!("relative error {e:.2e}")),
                Err(e) => Err(e.to_string()),
            }
        };
        let (best, r) = tilelang::autotune::autotune(
            kernel.name(),
            &space,
            |c: &GemmConfig| gemm(layout, dt, out_dt, *c),
            &dev,
            &launch,
            &check,
            &Default::default(),
        )?;
        eprintln!("{r}");
        (gemm(layout, dt, out_dt, best), best)
    } else {
        (kernel, cfg)
    };
    let exe = common::compile(&kernel, &dev)?;
    c.fill(f64::NAN)?;
    // Where K is split, the GEMM writes its shares and a second kernel sums them into C.
    let split = common::SplitSum::for_splits(out_dt, cfg.split_k, m, n, &dev)?;
    let out = common::SplitSum::target(&split, &c);
    common::SplitSum::run(&split, &exe, &[&a, &b, out], &c)?;
    let err = sampled(&c)?;
    let launch = [Arg::Tensor(&a), Arg::Tensor(&b), Arg::Tensor(out)];
    let ms = common::SplitSum::time_ms(&split, &args.common, &exe, &launch, &c)?;
    let notes = format!(
        "{}{}{} {}",
        common::compile_note(&exe),
        common::tiles_note(&cfg),
        common::SplitSum::note(&split),
        common::variant_note(&exe, &[&a, &b, out])
    );
    let tflops = 2.0 * (m * n * k) as f64 / (ms * 1e-3) / 1e12;
    Ok(common::finish(
        "gemm",
        &format!("{m}x{n}x{k} {} {}", layout.name(), dt),
        err,
        ms,
        common::tolerance(dt).max(common::tolerance(out_dt)),
        &format!("tflops={tflops:.3} device={dev} {notes}"),
    ))
}

/// Whether the command line sets any of the tiles, the instruction or the block schedule:
/// the kernels with their own tiles (`--realign-b`) are then not taken by default.
fn tile_options_given(args: &Args) -> bool {
    let t = &args.tile;
    t.bm.is_some()
        || t.bn.is_some()
        || t.stages.is_some()
        || t.threads.is_some()
        || t.tune
        || args.bk.is_some()
        || args.split_k.is_some()
        || args.min_blocks.is_some()
        || args.panel.is_some()
        || args.cluster.is_some()
        || args.overlap
        || args.wgmma
        || args.no_wgmma
        || args.ws
        || args.no_ws
}

/// The shapes `--by-residue` takes (`gemm_residue::residue_takes`).
fn residue_shapes(layout: Layout, dt: DType, m: usize, n: usize) -> anyhow::Result<()> {
    if !residue_takes(dt, layout, m, n) {
        anyhow::bail!(
            "--by-residue takes --layout nn, 16-bit inputs, and M and N multiples of 8 (got {} {dt}, M = {m}, N = {n})",
            layout.name()
        );
    }
    Ok(())
}

/// `--by-residue`: the NN GEMM that reads A in place by row residue, on A and C allocated as
/// the views it declares (`[M/8, 8·K]`, `[M/8, 8, N]`: the bytes of row-major `[M, K]` and
/// `[M, N]`).
fn run_by_residue(args: &Args, dt: DType, out_dt: DType, dev: &Device) -> anyhow::Result<ExitCode> {
    let (m, n, k) = (args.m, args.n, args.k);
    let cfg = residue_config();
    let kernel = gemm_nn_by_residue(dt, out_dt, cfg);
    let views = [&[m / 8, 8 * k][..], &[k, n], &[m / 8, 8, n]];
    run_on_views(
        args,
        (dt, out_dt),
        dev,
        (&kernel, &cfg),
        views,
        "nn-by-residue",
    )
}

/// `--realign-b`: the NN GEMM that reads B in place by row residue and realigns it in shared
/// memory, on B allocated as the view it declares (`[K/8, 8·N]`: the bytes of a row-major
/// `[K, N]`).
fn run_realigning_b(
    args: &Args,
    dt: DType,
    out_dt: DType,
    dev: &Device,
) -> anyhow::Result<ExitCode> {
    let (m, n, k) = (args.m, args.n, args.k);
    let cfg = realign_config(m);
    let kernel = gemm_nn_realigning_b(dt, out_dt, cfg);
    let views = [&[m, k][..], &[k / 8, 8 * n], &[m, n]];
    run_on_views(
        args,
        (dt, out_dt),
        dev,
        (&kernel, &cfg),
        views,
        "nn-realign-b",
    )
}

/// An NN GEMM kernel that declares its operands as views of row-major `[M, K]`, `[K, N]` and
/// `[M, N]` tensors (the same bytes in other shapes): the tensors made row-major and handed
/// to it reshaped to `views` (`Tensor::reshape`, no copy), checked against the f64 reference,
/// timed, and summed up under `label`.
fn run_on_views(
    args: &Args,
    (dt, out_dt): (DType, DType),
    dev: &Device,
    (kernel, cfg): (&Kernel, &GemmConfig),
    views: [&[usize]; 3],
    label: &str,
) -> anyhow::Result<ExitCode> {
    let (m, n, k) = (args.m, args.n, args.k);
    let a = Tensor::randn(&[m, k], dt, args.common.seed, dev)?;
    let b = Tensor::randn(&[k, n], dt, args.common.seed + 1, dev)?;
    let c = Tensor::zeros(&[m, n], out_dt, dev)?;
    let rows = common::check_rows(m, 2.0 * (n * k) as f64, args.common.seed);
    let (av, bv) = (a.to_f64_vec()?, b.to_f64_vec()?);
    let a_rows = common::gather_rows(&av, &rows, k);
    let want = reference::gemm(&a_rows, &bv, rows.len(), n, k, false, false);
    let exe = common::compile(kernel, dev)?;
    c.fill(f64::NAN)?;
    let (a, b, c) = (
        a.reshape(views[0])?,
        b.reshape(views[1])?,
        c.reshape(views[2])?,
    );
    let launch = [Arg::Tensor(&a), Arg::Tensor(&b), Arg::Tensor(&c)];
    exe.run_args(&launch)?;
    let cv = c.to_f64_vec()?;
    let got = common::gather_rows(&cv, &rows, n);
    let err = tilelang::runtime::rel_err(&got, &want).map_err(anyhow::Error::msg)?;
    let ms = args.common.time_ms(&exe, &launch)?;
    let tflops = 2.0 * (m * n * k) as f64 / (ms * 1e-3) / 1e12;
    let notes = format!(
        "{}{} {}",
        common::compile_note(&exe),
        common::tiles_note(cfg),
        common::variant_note(&exe, &[&a, &b, &c])
    );
    Ok(common::finish(
        "gemm",
        &format!("{m}x{n}x{k} {label} {dt}"),
        err,
        ms,
        common::tolerance(dt).max(common::tolerance(out_dt)),
        &format!("tflops={tflops:.3} device={dev} {notes}"),
    ))
}

/// The command line's tile options over a target's defaults (`elem_bytes`: the inputs').
fn configure(cfg: &mut GemmConfig, args: &Args, elem_bytes: i64) {
    let default_stage = (cfg.bm + cfg.bn) * cfg.bk * elem_bytes;
    cfg.bm = args.tile.bm.unwrap_or(cfg.bm);
    cfg.bn = args.tile.bn.unwrap_or(cfg.bn);
    cfg.bk = args.bk.unwrap_or(cfg.bk);
    cfg.stages = args.tile.stages.unwrap_or(cfg.stages);
    // Tiles given without a stage count keep the default's count only as far as its shared
    // memory goes: the refit runs narrow tiles many stages deep (64×32 in 16), which wider
    // tiles from the command line would overflow.
    let stage = (cfg.bm + cfg.bn) * cfg.bk * elem_bytes;
    if args.tile.stages.is_none() && stage > default_stage && default_stage > 0 {
        let budget = default_stage * i64::from(cfg.stages);
        cfg.stages = (budget / stage).clamp(2, i64::from(cfg.stages)) as u32;
    }
    cfg.threads = args.tile.threads.unwrap_or(cfg.threads);
    cfg.min_blocks = args.min_blocks.unwrap_or(cfg.min_blocks);
    cfg.panel = args.panel.unwrap_or(cfg.panel);
    cfg.instruction = if args.wgmma {
        Some(GemmInstruction::Wgmma)
    } else if args.no_wgmma {
        Some(GemmInstruction::MmaSync)
    } else {
        None
    };
    // The flag turns the overlap on; the refit's own (its 128×64 tiles) goes with its tiles
    // when the command line gives others.
    let tiles_given =
        args.tile.bm.is_some() || args.tile.bn.is_some() || args.tile.stages.is_some();
    cfg.overlap = args.overlap || (cfg.overlap && !tiles_given);
    cfg.persistent = args.persistence.apply(cfg.persistent);
    cfg.cluster = args.cluster.unwrap_or(cfg.cluster);
    if args.ws {
        cfg.warp_specialize = Some(true);
    } else if args.no_ws {
        cfg.warp_specialize = Some(false);
    }
}
