//! Multi-rank kernels (docs/distributed.md), each checked against a single-device reference.
//!
//! Without `RANK` in the environment (or with `--device sim`) the kernel runs on `--ranks`
//! simulated devices in this process — the lowered GPU code, with the simulator's memory-order
//! and deadlock checks:
//!
//!     cargo run --release --example distributed -- --kernel ag-gemm --ranks 2
//!
//! On GPUs, one process per rank (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`,
//! `MASTER_PORT`, as torchrun sets them); ranks share GPUs round-robin (`LOCAL_RANK % GPUs`),
//! so 2 or 4 processes on one GPU test the protocol anywhere:
//!
//!     bash scripts/dist-run.sh 2 target/release/examples/distributed --kernel ag-gemm
//!
//! That path sets up the symmetric heap with CUDA's virtual memory API; it has run on 2, 3
//! and 4 H100s and as 2 and 4 processes on one (docs/performance.md, "Multi-rank"). With
//! `TILELANG_DIST_IPC=legacy` it maps the heap by legacy CUDA IPC instead, and the kernels
//! take peer tables. One process may also drive every rank (`--local-ranks N`, no launcher):
//!
//!     target/release/examples/distributed --kernel ag-gemm --local-ranks 2

mod local;
mod moe;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use tilelang::kernels::dist::{
    ag_gemm_out, all_gather_by, all_reduce, all_reduce_two_shot, gemm_rs_partials, AgGemmConfig,
    Transfer, ALL_GATHER_BLOCKS_PER_PEER,
};
use tilelang::prelude::*;
use tilelang::runtime::external::ExternalTensor;
use tl_sim::{SimArg, SimOptions};

#[derive(Parser, Debug)]
#[command(about = "Multi-rank kernels with a single-device reference check")]
struct Args {
    /// all-gather, all-gather-ce (the same exchange moved by the copy engines, GPUs only),
    /// ag-gemm, gemm-rs, all-reduce, all-reduce-two-shot or moe (dispatch, identity expert,
    /// combine and gather: `--m` tokens per rank, `--k` hidden)
    #[arg(long, default_value = "ag-gemm")]
    kernel: String,
    /// all-gather: put-block, put-warp, get-block or get-warp (push into the peers or pull
    /// from them, by whole blocks or each warp on its own run)
    #[arg(long, default_value = "put-block")]
    transfer: String,
    /// all-gather: blocks per peer (every block of the grid must be resident at once)
    #[arg(long, default_value_t = ALL_GATHER_BLOCKS_PER_PEER)]
    blocks_per_peer: i64,
    /// moe: send each token once per destination rank with all its choices there (the
    /// expert side weighs the rows), instead of once per choice
    #[arg(long)]
    dedup: bool,
    /// moe: choices per token (a power of two)
    #[arg(long, default_value_t = 8)]
    topk: usize,
    /// moe: experts in all, spread evenly over the ranks
    #[arg(long, default_value_t = 256)]
    experts: usize,
    /// Rows per rank (M; MQ for gemm-rs; N for the vector kernels)
    #[arg(long, default_value_t = 64)]
    m: usize,
    #[arg(long, default_value_t = 64)]
    n: usize,
    #[arg(long, default_value_t = 64)]
    k: usize,
    /// Ranks to simulate (the simulator path)
    #[arg(long, default_value_t = 2)]
    ranks: usize,
    /// sim, or cuda (one process per rank, torchrun's variables); default: cuda when RANK is
    /// set
    #[arg(long)]
    device: Option<String>,
    /// Timed calls on a GPU (after one checked call and `--warmup` untimed ones); the median
    /// is reported, the slowest rank's
    #[arg(long, default_value_t = 20)]
    reps: usize,
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// Output rows compared with the CPU reference (spread evenly; 0 = all)
    #[arg(long, default_value_t = 64)]
    check_rows: usize,
    /// Check the output of every call on a GPU (outside the timed region), not only the first
    #[arg(long)]
    check_every: bool,
    /// Seconds a call may run on a GPU before this rank reports it hung (a kernel waiting on a
    /// peer that is gone never finishes)
    #[arg(long, default_value_t = 30.0)]
    call_timeout: f64,
    /// Fault test: this rank leaves (exits with status 9) just before its call number
    /// `--kill-at`, after the host barrier, so its peers' kernels wait on it
    #[arg(long)]
    kill_rank: Option<usize>,
    #[arg(long, default_value_t = 2)]
    kill_at: usize,
    /// GEMM tiles: small (64×64×32, 2 stages, 128 threads), large (128×256×64, 3 stages, 256
    /// threads) or BMxBNxBK:STAGES:THREADS; default small in the simulator, large on a GPU
    #[arg(long)]
    tiles: Option<String>,
    /// Simulate the variant for aligned sizes (every tensor's last extent a multiple of 16
    /// bytes, as GPU launches with such sizes run it: TMA loads on sm_90a) instead of the one
    /// for any sizes
    #[arg(long)]
    aligned: bool,
    /// Also time this many calls queued back to back on the stream, with no host barrier
    /// between them (the kernels' entry handshake orders each call against the peers' previous
    /// one); the host clock over the whole run, per call. The last call's output is checked.
    /// In the simulator: run this many calls back to back (the memory-order check spans them).
    #[arg(long, default_value_t = 0)]
    back_to_back: usize,
    /// ag-gemm: C's type, f32 or bf16 (rounded once at the store, as a bf16 GEMM's output is;
    /// checked to 1e-2 instead of exactly)
    #[arg(long, default_value = "f32")]
    out: String,
    /// gemm-rs: the partial tiles' type, f32 or bf16 (half the bytes pushed, each partial
    /// rounded to bf16 as a bf16 GEMM + NCCL reduce-scatter does; checked to 1e-2 instead of
    /// exactly)
    #[arg(long, default_value = "f32")]
    partials: String,
    /// ag-gemm, gemm-rs: without the producer warpgroup for the GEMM's TMA loads (on by
    /// default on a GPU: sm_90a, aligned sizes)
    #[arg(long)]
    no_ws: bool,
    /// ag-gemm, gemm-rs: with the producer warpgroup (the simulator's default is without)
    #[arg(long, conflicts_with = "no_ws")]
    ws: bool,
    /// ag-gemm, gemm-rs: rasterize the GEMM tiles in panels of this many row tiles (0: row by
    /// row); default 8 on a GPU (17% faster AG+GEMM at N = 28672 on 4 H100s), 0 in the
    /// simulator. Large tiles on a GPU: `AgGemmConfig::hopper`
    #[arg(long)]
    panel: Option<u32>,
    /// Build the kernels with peer tables (each symmetric buffer's per-rank addresses as
    /// arguments, `Kernel::with_peer_tables`) instead of the flat heap's stride; implied on a
    /// heap mapped by legacy CUDA IPC (`TILELANG_DIST_IPC=legacy`)
    #[arg(long)]
    peer_tables: bool,
    /// Build the kernels with NVSHMEM's device calls for every peer access
    /// (`Kernel::with_nvshmem`, the route to ranks on other hosts); on a GPU the heap must be
    /// NVSHMEM's (`TILELANG_DIST_IPC=nvshmem`)
    #[arg(long, conflicts_with = "peer_tables")]
    nvshmem: bool,
    /// Run every rank in this one process (`tl_dist::LocalJob`), rank r on GPU r mod the GPU
    /// count, each on a stream of its own (no launcher; ranks that share a GPU must fit on it
    /// together)
    #[arg(long, value_name = "N")]
    local_ranks: Option<usize>,
}

impl Args {
    fn transfer(&self) -> anyhow::Result<Transfer> {
        Transfer::parse(&self.transfer).ok_or_else(|| {
            anyhow::anyhow!(
                "--transfer {:?}: put-block, put-warp, get-block or get-warp",
                self.transfer
            )
        })
    }

    fn partial_dtype(&self) -> anyhow::Result<DType> {
        match self.partials.as_str() {
            "f32" => Ok(F32),
            "bf16" => Ok(BF16),
            other => anyhow::bail!("--partials {other:?}: f32 or bf16"),
        }
    }

    fn out_dtype(&self) -> anyhow::Result<DType> {
        match self.out.as_str() {
            "f32" => Ok(F32),
            "bf16" => Ok(BF16),
            other => anyhow::bail!("--out {other:?}: f32 or bf16"),
        }
    }

    /// The relative error a checked output may have.
    fn tolerance(&self) -> f64 {
        if (self.kernel == "gemm-rs" && self.partials == "bf16")
            || (self.kernel == "ag-gemm" && self.out == "bf16")
        {
            1e-2
        } else {
            1e-6
        }
    }
}

/// One argument of the kernel, in parameter order.
enum Buf {
    Local {
        shape: Vec<usize>,
        dtype: DType,
        init: Vec<f64>,
    },
    Symmetric {
        shape: Vec<usize>,
        dtype: DType,
        init: Vec<f64>,
    },
}

/// A rank's launch: its buffers, whether the kernel takes `epoch`, which buffer holds the
/// result (`rows` rows of `row_len` elements) and a reference for any row, and the work done
/// (flops; bytes for the bus bandwidth, nccl-tests' way) for the report.
struct Plan {
    bufs: Vec<Buf>,
    epoch: bool,
    out: usize,
    rows: usize,
    row_len: usize,
    want_row: Box<dyn Fn(usize) -> Vec<f64>>,
    flops: f64,
    bus_bytes: f64,
}

/// Element `i` of the test pattern `seed`: values exact in bf16 (and their products' sums in
/// f32 up to K = 2^17).
fn pat(seed: usize, i: usize) -> f64 {
    (((i * 7 + seed * 13) % 9) as f64 - 4.0) * 0.25
}

fn pattern(seed: usize, len: usize) -> Vec<f64> {
    (0..len).map(|i| pat(seed, i)).collect()
}

/// `Σ_k A[row, k] · B[col, k]` for every `col` of `B` (`[n, k]`), `A` and `B` patterns at
/// element offsets `a_off`/`b_off`.
fn ref_row_nt(a_seed: usize, a_off: usize, b_seed: usize, n: usize, k: usize) -> Vec<f64> {
    let a: Vec<f64> = (0..k).map(|kk| pat(a_seed, a_off + kk)).collect();
    (0..n)
        .map(|j| (0..k).map(|kk| a[kk] * pat(b_seed, j * k + kk)).sum())
        .collect()
}

/// The GEMM tiles (`--tiles`), with a producer warpgroup and panels as the flags say: by
/// default `AgGemmConfig::hopper` on a GPU, small tiles row by row in the simulator.
fn tiles(a: &Args, sim: bool) -> anyhow::Result<AgGemmConfig> {
    let small = AgGemmConfig::tiles(64, 64, 32, 2, 128);
    // The fastest tried on 4 H100s for both GEMMs (docs/performance.md).
    let large = AgGemmConfig::hopper();
    let shape = match a.tiles.as_deref() {
        Some("small") => small,
        Some("large") => large,
        None if sim => small,
        None => large,
        Some(spec) => parse_tiles(spec).ok_or_else(|| {
            anyhow::anyhow!(
                "--tiles {spec:?}: small, large or BMxBNxBK:STAGES:THREADS (e.g. 128x256x64:3:256)"
            )
        })?,
    };
    Ok(AgGemmConfig {
        warp_specialize: a.ws || (!sim && !a.no_ws),
        panel: a.panel.unwrap_or(if sim { 0 } else { 8 }),
        ..shape
    })
}

/// `BMxBNxBK:STAGES:THREADS`.
fn parse_tiles(spec: &str) -> Option<AgGemmConfig> {
    let (dims, rest) = spec.split_once(':')?;
    let (stages, threads) = rest.split_once(':')?;
    let d: Vec<i64> = dims
        .split('x')
        .map(|v| v.parse().ok())
        .collect::<Option<_>>()?;
    match d[..] {
        [bm, bn, bk] => Some(AgGemmConfig::tiles(
            bm,
            bn,
            bk,
            stages.parse().ok()?,
            threads.parse().ok()?,
        )),
        _ => None,
    }
}

/// Options that apply to one kernel only are refused elsewhere, not ignored.
fn check_options(a: &Args) -> anyhow::Result<()> {
    let gather = a.kernel == "all-gather";
    if a.transfer != "put-block" && !gather {
        anyhow::bail!(
            "--transfer {} applies to --kernel all-gather only (the copy engines push)",
            a.transfer
        );
    }
    if a.blocks_per_peer != ALL_GATHER_BLOCKS_PER_PEER && !(gather || a.kernel == "all-gather-ce") {
        anyhow::bail!("--blocks-per-peer applies to --kernel all-gather and all-gather-ce only");
    }
    // Every block of the grid must be resident at once: R · blocks_per_peer of 256 threads.
    if !(1..=256).contains(&a.blocks_per_peer) {
        anyhow::bail!(
            "--blocks-per-peer {}: 1 to 256 (every block of the grid must be resident at once)",
            a.blocks_per_peer
        );
    }
    if a.dedup && a.kernel != "moe" {
        anyhow::bail!("--dedup applies to --kernel moe only");
    }
    if a.out != "f32" && a.kernel != "ag-gemm" {
        anyhow::bail!("--out {} applies to --kernel ag-gemm only", a.out);
    }
    Ok(())
}

fn kernel(a: &Args, sim: bool) -> anyhow::Result<Kernel> {
    Ok(match a.kernel.as_str() {
        "all-gather" => all_gather_by(F32, 256, a.transfer()?, a.blocks_per_peer),
        "all-gather-ce" => anyhow::bail!(
            "--kernel all-gather-ce: the copy engines move the bytes, so it runs on GPUs only (--device cuda, one process per rank); the simulator runs --kernel all-gather"
        ),
        "ag-gemm" => ag_gemm_out(BF16, tiles(a, sim)?, a.out_dtype()?),
        "gemm-rs" => gemm_rs_partials(BF16, tiles(a, sim)?, a.partial_dtype()?),
        "all-reduce" => all_reduce(256, 256),
        "all-reduce-two-shot" => all_reduce_two_shot(256, 256),
        other => anyhow::bail!(
            "--kernel {other:?}: all-gather, ag-gemm, gemm-rs, all-reduce or all-reduce-two-shot"
        ),
    })
}

/// The entry handshake's flags of the kernels that push (`READY`, docs/distributed.md).
fn ready(world: usize) -> Buf {
    Buf::Symmetric {
        shape: vec![world],
        dtype: I32,
        init: vec![0.0; world],
    }
}

fn plan(a: &Args, sim: bool, r: usize, world: usize) -> anyhow::Result<Plan> {
    let (m, n, k) = (a.m, a.n, a.k);
    let cfg = tiles(a, sim)?;
    let (bm, bn) = (cfg.bm as usize, cfg.bn as usize);
    use Buf::*;
    Ok(match a.kernel.as_str() {
        "all-gather" | "all-gather-ce" => Plan {
            bufs: vec![
                // A pull reads the peers' shards, so theirs are symmetric.
                if a.transfer()?.get {
                    Symmetric {
                        shape: vec![n],
                        dtype: F32,
                        init: pattern(r, n),
                    }
                } else {
                    Local {
                        shape: vec![n],
                        dtype: F32,
                        init: pattern(r, n),
                    }
                },
                Symmetric {
                    shape: vec![world, n],
                    dtype: F32,
                    init: vec![0.0; world * n],
                },
                Symmetric {
                    shape: vec![world],
                    dtype: I32,
                    init: vec![0.0; world],
                },
                ready(world),
            ],
            epoch: true,
            out: 1,
            rows: world,
            row_len: n,
            want_row: Box::new(move |s| pattern(s, n)),
            flops: 0.0,
            bus_bytes: ((world - 1) * n * 4) as f64,
        },
        "ag-gemm" => Plan {
            bufs: vec![
                Local {
                    shape: vec![m, k],
                    dtype: BF16,
                    init: pattern(r, m * k),
                },
                Local {
                    shape: vec![n, k],
                    dtype: BF16,
                    init: pattern(100 + r, n * k),
                },
                Symmetric {
                    shape: vec![world, m, k],
                    dtype: BF16,
                    init: vec![0.0; world * m * k],
                },
                Local {
                    shape: vec![world, m, n],
                    dtype: a.out_dtype()?,
                    init: vec![f64::NAN; world * m * n],
                },
                Symmetric {
                    shape: vec![world, m.div_ceil(bm)],
                    dtype: I32,
                    init: vec![0.0; world * m.div_ceil(bm)],
                },
                ready(world),
            ],
            epoch: true,
            out: 3,
            rows: world * m,
            row_len: n,
            // Row `i` of C[s] is row `i` of rank s's A times this rank's B.
            want_row: Box::new(move |row| ref_row_nt(row / m, (row % m) * k, 100 + r, n, k)),
            flops: 2.0 * (world * m * n * k) as f64,
            bus_bytes: ((world - 1) * m * k * 2) as f64,
        },
        "gemm-rs" => {
            let (tm, tn) = (m.div_ceil(bm), n.div_ceil(bn));
            Plan {
                bufs: vec![
                    Local {
                        shape: vec![world, m, k],
                        dtype: BF16,
                        init: pattern(r, world * m * k),
                    },
                    Local {
                        shape: vec![n, k],
                        dtype: BF16,
                        init: pattern(50 + r, n * k),
                    },
                    Local {
                        shape: vec![world, tm, tn, bm, bn],
                        dtype: a.partial_dtype()?,
                        init: vec![0.0; world * tm * tn * bm * bn],
                    },
                    Symmetric {
                        shape: vec![world, tm, tn, bm, bn],
                        dtype: a.partial_dtype()?,
                        init: vec![0.0; world * tm * tn * bm * bn],
                    },
                    Local {
                        shape: vec![m, n],
                        dtype: F32,
                        init: vec![f64::NAN; m * n],
                    },
                    Symmetric {
                        shape: vec![tm, tn],
                        dtype: I32,
                        init: vec![0.0; tm * tn],
                    },
                    ready(world),
                ],
                epoch: true,
                out: 4,
                rows: m,
                row_len: n,
                // Row `i` of this rank's C: Σ over ranks s of (s's A, row block r, row i) · s's B.
                want_row: Box::new(move |i| {
                    let mut acc = vec![0.0; n];
                    for s in 0..world {
                        let p = ref_row_nt(s, (r * m + i) * k, 50 + s, n, k);
                        acc.iter_mut().zip(p).for_each(|(w, x)| *w += x);
                    }
                    acc
                }),
                flops: 2.0 * (world * m * n * k) as f64,
                bus_bytes: ((world - 1) * m * n * a.partial_dtype()?.bytes()) as f64,
            }
        }
        "all-reduce" | "all-reduce-two-shot" => {
            // The two-shot one reduces chunks of N/R into a symmetric scratch first, so it has
            // one more buffer and its barrier rows cover a chunk.
            let two_shot = a.kernel == "all-reduce-two-shot";
            let chunk = if two_shot { n.div_ceil(world) } else { n };
            let g = chunk.div_ceil(256);
            let mut bufs = vec![Symmetric {
                shape: vec![n],
                dtype: F32,
                init: pattern(r, n),
            }];
            if two_shot {
                bufs.push(Symmetric {
                    shape: vec![n],
                    dtype: F32,
                    init: vec![0.0; n],
                });
            }
            let out = bufs.len();
            bufs.push(Local {
                shape: vec![n],
                dtype: F32,
                init: vec![f64::NAN; n],
            });
            bufs.push(Symmetric {
                shape: vec![g, world],
                dtype: I32,
                init: vec![0.0; g * world],
            });
            Plan {
                bufs,
                epoch: false,
                out,
                rows: 1,
                row_len: n,
                want_row: Box::new(move |_| {
                    (0..n)
                        .map(|i| (0..world).map(|s| pat(s, i)).sum())
                        .collect()
                }),
                flops: 0.0,
                bus_bytes: 2.0 * (world - 1) as f64 / world as f64 * (n * 4) as f64,
            }
        }
        other => anyhow::bail!("--kernel {other:?}"),
    })
}

/// The output rows the check compares: all of them, or `limit` spread evenly (the first and
/// the last included) when there are more.
fn rows_to_check(rows: usize, limit: usize) -> Vec<usize> {
    if limit == 0 || rows <= limit {
        return (0..rows).collect();
    }
    if limit == 1 {
        return vec![0];
    }
    let mut v: Vec<usize> = (0..limit).map(|i| i * (rows - 1) / (limit - 1)).collect();
    v.dedup();
    v
}

/// The relative error of the checked rows of `got` (the whole output, row-major); on a
/// mismatch, the count and the first few wrong elements go to stderr (`who` says whose).
fn check(p: &Plan, got: &[f64], limit: usize, tol: f64, who: &str) -> anyhow::Result<f64> {
    let (mut g, mut w) = (vec![], vec![]);
    let mut wrong = vec![];
    for row in rows_to_check(p.rows, limit) {
        let (have, want) = (
            &got[row * p.row_len..(row + 1) * p.row_len],
            (p.want_row)(row),
        );
        for (col, (x, y)) in have.iter().zip(&want).enumerate() {
            if x != y {
                wrong.push((row, col, *x, *y));
            }
        }
        g.extend_from_slice(have);
        w.extend(want);
    }
    let err = tilelang::runtime::rel_err(&g, &w).map_err(|e| anyhow::anyhow!(e))?;
    if !err.is_finite() || err >= tol {
        let first: Vec<String> = wrong
            .iter()
            .take(8)
            .map(|(r, c, x, y)| format!("[{r},{c}]={x} (want {y})"))
            .collect();
        eprintln!(
            "{who}: {} of {} checked elements differ; first: {}",
            wrong.len(),
            g.len(),
            first.join(", ")
        );
    }
    Ok(err)
}

fn main() -> ExitCode {
    match run() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn run() -> anyhow::Result<ExitCode> {
    let a = Args::parse();
    check_options(&a)?;
    let gpu = match a.device.as_deref() {
        Some("sim") => false,
        Some(d) if d.starts_with("cuda") => true,
        Some(other) => anyhow::bail!("--device {other:?}: sim or cuda"),
        None => std::env::var("RANK").is_ok(),
    };
    if let Some(n) = a.local_ranks {
        if a.kernel == "moe" {
            anyhow::bail!(
                "--kernel moe with --local-ranks: the MoE round trip runs one process per rank (scripts/dist-run.sh) or in the simulator"
            );
        }
        return local::run_local(&a, n.max(1));
    }
    if a.kernel == "moe" {
        let ok = if gpu {
            moe::run_gpu(&a)?
        } else {
            moe::run_sim(&a)?
        };
        return Ok(if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        });
    }
    if gpu {
        run_gpu(&a)
    } else {
        run_sim(&a)
    }
}

struct Measured {
    err: f64,
    ms: f64,
    flops: f64,
    bus_bytes: f64,
}

fn summary(a: &Args, world: usize, r: &Measured, extra: &str) -> ExitCode {
    let ok = r.err.is_finite() && r.err < a.tolerance();
    if !ok {
        eprintln!("check FAILED: relative error {:.3e}", r.err);
    }
    let mut rates = String::new();
    if r.ms > 0.0 && r.flops > 0.0 {
        rates += &format!(" tflops_per_rank={:.1}", r.flops / (r.ms * 1e-3) / 1e12);
    }
    if r.ms > 0.0 && r.bus_bytes > 0.0 {
        rates += &format!(" busbw_gbs={:.1}", r.bus_bytes / (r.ms * 1e-3) / 1e9);
    }
    let transfer = if a.kernel == "all-gather" {
        format!(" transfer={}", a.transfer)
    } else {
        String::new()
    };
    println!(
        "distributed kernel={}{transfer} ranks={world} m={} n={} k={} err={:.2e} ms={:.4}{rates} {extra} {}",
        a.kernel,
        a.m,
        a.n,
        a.k,
        r.err,
        r.ms,
        if ok { "PASS" } else { "FAIL" }
    );
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// The symmetric heap a rank needs for `p`'s symmetric buffers (each carved at 256 bytes).
fn heap_bytes(p: &Plan) -> u64 {
    let need: u64 = p
        .bufs
        .iter()
        .map(|b| match b {
            Buf::Symmetric { shape, dtype, .. } => {
                (shape.iter().product::<usize>() * dtype.bytes()).div_ceil(256) as u64 * 256
            }
            Buf::Local { .. } => 0,
        })
        .sum();
    need.max(1)
}

fn run_sim(a: &Args) -> anyhow::Result<ExitCode> {
    let world = a.ranks.max(1);
    let mut k = kernel(a, true)?;
    if a.peer_tables {
        k = k.with_peer_tables();
    }
    if a.nvshmem {
        k = k.with_nvshmem().map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    // The variant a GPU launch runs: the one for aligned sizes (TMA where it applies) with
    // --aligned, else the one for any sizes.
    let lowered = if a.aligned {
        k.lower_aligned(Target::SM90)
    } else {
        k.lower(Target::SM90)
    }
    .map_err(|d| anyhow::anyhow!("{d}"))?;
    let plans: Vec<Plan> = (0..world)
        .map(|r| plan(a, true, r, world))
        .collect::<anyhow::Result<_>>()?;
    let mut args: Vec<Vec<SimArg>> = plans
        .iter()
        .enumerate()
        .map(|(r, p)| {
            let mut v: Vec<SimArg> = p
                .bufs
                .iter()
                .map(|b| match b {
                    Buf::Local { shape, dtype, init } | Buf::Symmetric { shape, dtype, init } => {
                        SimArg::tensor(*dtype, shape, init)
                    }
                })
                .collect();
            if p.epoch {
                v.push(SimArg::Int(1));
            }
            // The simulator reaches each rank's copy itself: the tables' entries are unread.
            if a.peer_tables {
                let symmetric = p.bufs.iter().filter(|b| matches!(b, Buf::Symmetric { .. }));
                v.extend(symmetric.map(|_| SimArg::tensor(I64, &[world], &vec![0.0; world])));
            }
            v.extend([
                SimArg::Int(r as i64),
                SimArg::Int(world as i64),
                SimArg::Int(0),
            ]);
            v
        })
        .collect();
    let t = Instant::now();
    let calls: Vec<Vec<(&str, i64)>> = match (a.back_to_back, plans[0].epoch) {
        (n, true) if n > 1 => (1..=n as i64).map(|e| vec![("epoch", e)]).collect(),
        _ => vec![vec![]],
    };
    let rep = tl_sim::run_ranks_calls(&lowered, &mut args, &calls, &SimOptions::default())?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let mut err: f64 = 0.0;
    for (p, v) in plans.iter().zip(&args) {
        let dt = match &p.bufs[p.out] {
            Buf::Local { dtype, .. } | Buf::Symmetric { dtype, .. } => *dtype,
        };
        err = err.max(check(
            p,
            &v[p.out].to_f64(dt),
            a.check_rows,
            a.tolerance(),
            "sim",
        )?);
    }
    Ok(summary(
        a,
        world,
        &Measured {
            err,
            ms,
            flops: 0.0,
            bus_bytes: 0.0,
        },
        &format!(
            "device=sim(sm_90a) calls={} order_checked={}",
            calls.len(),
            rep.order_checked
        ),
    ))
}

/// What runs a call on a GPU: the compiled kernel, or the copy engines' all-gather (no
/// kernel: streams, with the kernel's buffers).
enum Runner<'h> {
    Kernel(Box<Executable>),
    CopyEngines(tl_dist::CopyEngineAllGather<'h>, tl_dist::GatherBuffers),
}

impl Runner<'_> {
    /// Queue call `epoch` (the kernel's arguments `args`) without waiting for it.
    fn queue(&self, args: &[Arg], epoch: i64) -> anyhow::Result<()> {
        match self {
            Runner::Kernel(exe) => exe.run_args(args)?,
            Runner::CopyEngines(ce, bufs) => ce.queue(bufs, epoch as u32)?,
        }
        Ok(())
    }

    /// Call `epoch` timed alone: its milliseconds, or `None` if it still runs after `limit`.
    fn timed(&self, args: &[Arg], epoch: i64, limit: Duration) -> anyhow::Result<Option<f64>> {
        Ok(match self {
            Runner::Kernel(exe) => exe.run_timed(args, limit)?,
            Runner::CopyEngines(ce, bufs) => {
                ce.queue(bufs, epoch as u32)?;
                ce.wait(limit)?
            }
        })
    }

    /// Wait for the kernel's earlier launches (the copy engines' calls were each waited for).
    fn synchronize(&self) -> anyhow::Result<()> {
        if let Runner::Kernel(exe) = self {
            exe.synchronize()?;
        }
        Ok(())
    }

    /// Whether everything queued finished within `limit`.
    fn finished_within(&self, limit: Duration) -> anyhow::Result<bool> {
        Ok(match self {
            Runner::Kernel(exe) => exe.synchronize_within(limit)?,
            Runner::CopyEngines(ce, _) => ce.wait(limit)?.is_some(),
        })
    }
}

fn run_gpu(a: &Args) -> anyhow::Result<ExitCode> {
    use tl_dist::{JobConfig, Rendezvous, SymmetricHeap};
    let cfg = JobConfig::from_env()?;
    let gpus = Device::cuda_count();
    if gpus == 0 {
        anyhow::bail!(
            "rank {}: no CUDA device ({}); without a GPU run the simulator: --device sim --ranks {}",
            cfg.rank,
            Device::cuda_unavailable_reason().unwrap_or_default(),
            cfg.world
        );
    }
    let ordinal = cfg.local_rank % gpus;
    if a.kill_rank.is_some() && !(2..=1 + a.warmup + a.reps).contains(&a.kill_at) {
        anyhow::bail!(
            "--kill-at {}: the timed calls are 2..={} (call 1 is the checked one)",
            a.kill_at,
            1 + a.warmup + a.reps
        );
    }
    let rv = Rendezvous::join(cfg)?;
    let (me, world) = (rv.rank(), rv.world());
    let dev = Device::Cuda(ordinal);
    let p = plan(a, false, me, world)?;
    let mut heap = SymmetricHeap::new(&rv, ordinal, heap_bytes(&p))?;
    // The copy engines' all-gather has no kernel: it is queued on streams.
    let copy_engines = a.kernel == "all-gather-ce";
    if a.nvshmem && heap.mapping() != tl_dist::HeapMapping::Nvshmem {
        anyhow::bail!(
            "--nvshmem: the kernels' NVSHMEM calls need NVSHMEM's heap; set TILELANG_DIST_IPC=nvshmem on every rank"
        );
    }
    // A heap whose ranks' copies are not one stride apart takes kernels with peer tables
    // (or NVSHMEM's calls).
    let tables = !a.nvshmem && (a.peer_tables || !heap.is_flat());
    let built = if copy_engines {
        None
    } else {
        let k = kernel(a, false)?;
        Some(if a.nvshmem {
            k.with_nvshmem().map_err(|e| anyhow::anyhow!("{e}"))?
        } else if tables {
            k.with_peer_tables()
        } else {
            k
        })
    };
    let exe = match &built {
        Some(k) => Some(k.compile(&dev).map_err(|e| anyhow::anyhow!("{e}"))?),
        None => None,
    };
    // Buffers: local tensors, and this rank's copies of the symmetric ones.
    let mut locals: Vec<Option<Tensor>> = vec![];
    let mut syms: Vec<Option<(tl_dist::SymmetricBuffer, ExternalTensor)>> = vec![];
    for b in &p.bufs {
        match b {
            Buf::Local { shape, dtype, init } => {
                locals.push(Some(Tensor::from_f64(shape, *dtype, init, &dev)?));
                syms.push(None);
            }
            Buf::Symmetric { shape, dtype, init } => {
                let n = shape.iter().product::<usize>();
                let buf = heap.alloc(&rv, (n * dtype.bytes()) as u64)?;
                let mut bytes = vec![0u8; n * dtype.bytes()];
                for (i, v) in init.iter().enumerate() {
                    tilelang::runtime::dtype_io::write(&mut bytes, *dtype, i, *v);
                }
                heap.write(buf, &bytes)?;
                syms.push(Some((buf, heap.tensor(buf, *dtype, shape)?)));
                locals.push(None);
            }
        }
    }
    let runner = match exe {
        Some(exe) => Runner::Kernel(Box::new(exe)),
        None => {
            let [Some(x), None, None, None] = &locals[..] else {
                anyhow::bail!("all-gather-ce: the all-gather's buffers");
            };
            let sym = |i: usize| syms[i].as_ref().map(|(b, _)| *b);
            let (Some(out), Some(flags), Some(ready)) = (sym(1), sym(2), sym(3)) else {
                anyhow::bail!("all-gather-ce: the all-gather's buffers");
            };
            let bufs = tl_dist::GatherBuffers {
                src: x
                    .cuda_ptr()
                    .ok_or_else(|| anyhow::anyhow!("all-gather-ce: X is not on a CUDA device"))?,
                bytes: x.nbytes() as u64,
                out,
                flags,
                ready,
                // The kernel's count per call, so the two may share the flags.
                flag_per_call: tilelang::kernels::dist::ARRIVALS_PER_CALL as u32,
            };
            Runner::CopyEngines(tl_dist::CopyEngineAllGather::new(&heap)?, bufs)
        }
    };
    // The copy engines' streams are ordered against no other: the uploads of the inputs (on
    // the runtime's stream) must have finished before the first call.
    dev.synchronize()?;
    rv.barrier()?;
    let limit = Duration::from_secs_f64(a.call_timeout.max(0.001));
    // One call, timed alone; a call still running after `limit` waits on a peer that is not
    // coming: say so (naming the rank the rendezvous finds missing) instead of hanging.
    // A call's arguments: the buffers, `epoch` where the kernel takes it, then this rank's.
    let call_args = |epoch: i64| -> anyhow::Result<Vec<Arg>> {
        let mut args: Vec<Arg> = vec![];
        for (l, s) in locals.iter().zip(&syms) {
            match (l, s) {
                (Some(t), _) => args.push(Arg::Tensor(t)),
                (None, Some((_, e))) => args.push(Arg::External(e)),
                _ => anyhow::bail!("a buffer with no memory"),
            }
        }
        if p.epoch {
            args.push(Arg::Int(epoch));
        }
        args.extend([
            Arg::Int(me as i64),
            Arg::Int(world as i64),
            Arg::Int(heap.stride() as i64),
        ]);
        Ok(args)
    };
    // The peer tables, where the kernel takes them: the same buffers every call.
    let peer_tables = match (&built, tables) {
        (Some(k), true) => heap.peer_tables_for(k.ir(), &call_args(1)?)?,
        _ => vec![],
    };
    let call_args = |epoch: i64| -> anyhow::Result<Vec<Arg>> {
        Ok(tl_dist::with_tables(&call_args(epoch)?, &peer_tables))
    };
    let launch = |epoch: i64| -> anyhow::Result<f64> {
        match runner.timed(&call_args(epoch)?, epoch, limit)? {
            Some(ms) => Ok(ms),
            None => {
                let peers = match rv.barrier() {
                    Ok(()) => "every rank still answers the rendezvous".to_string(),
                    Err(e) => e.to_string(),
                };
                eprintln!(
                    "error: rank {me}: call {epoch} of `{}` still runs after {:.1} s: it waits for a peer's signal that has not come ({peers}); stopping (set --call-timeout to wait longer)",
                    a.kernel, a.call_timeout
                );
                // Exit now: unwinding would unmap the symmetric heap under the running kernel,
                // which waits for it to finish — forever. Exiting tears the context down.
                std::process::exit(3)
            }
        }
    };
    launch(1)?;
    let output = || -> anyhow::Result<Vec<f64>> {
        Ok(match (&locals[p.out], &syms[p.out], &p.bufs[p.out]) {
            (Some(t), _, _) => t.to_f64_vec()?,
            (None, Some((buf, _)), Buf::Symmetric { dtype, shape, .. }) => {
                let bytes = heap.read(*buf)?;
                let n = shape.iter().product::<usize>();
                (0..n)
                    .map(|i| tilelang::runtime::dtype_io::read(&bytes, *dtype, i))
                    .collect()
            }
            _ => anyhow::bail!("no output"),
        })
    };
    let mut err = check(
        &p,
        &output()?,
        a.check_rows,
        a.tolerance(),
        &format!("rank {me}, call 1"),
    )?;
    // Timed calls, as bench/dist_peers.py times its peers: a barrier (here the host
    // rendezvous; the kernels themselves need none between calls), then CUDA events around the
    // one call; the median per rank, the slowest rank's.
    let mut times = vec![];
    for e in 0..a.warmup + a.reps {
        rv.barrier()?;
        let call = 2 + e;
        if a.kill_rank == Some(me) && call >= a.kill_at {
            eprintln!("rank {me}: leaving before call {call} (--kill-rank)");
            std::process::exit(9);
        }
        let ms = launch(call as i64)?;
        if e >= a.warmup {
            times.push(ms);
        }
        if a.check_every {
            let who = format!("rank {me}, call {call}");
            err = err.max(check(&p, &output()?, a.check_rows, a.tolerance(), &who)?);
        }
    }
    times.sort_by(f64::total_cmp);
    let ms = times.get(times.len() / 2).copied().unwrap_or(0.0);
    // Back to back: every rank queues its calls with no barrier between (one before the
    // first), then waits for all; the host clock per call, the slowest rank's.
    let mut b2b_ms = 0.0;
    if a.back_to_back > 0 && p.epoch {
        rv.barrier()?;
        runner.synchronize()?;
        let first = 2 + (a.warmup + a.reps) as i64;
        let t = Instant::now();
        for e in 0..a.back_to_back as i64 {
            runner.queue(&call_args(first + e)?, first + e)?;
        }
        if !runner.finished_within(limit * a.back_to_back as u32)? {
            eprintln!(
                "error: rank {me}: {} back-to-back calls of `{}` still run after {:.1} s; stopping",
                a.back_to_back,
                a.kernel,
                a.call_timeout * a.back_to_back as f64
            );
            std::process::exit(3)
        }
        b2b_ms = t.elapsed().as_secs_f64() * 1e3 / a.back_to_back as f64;
        let who = format!("rank {me}, last back-to-back call");
        err = err.max(check(&p, &output()?, a.check_rows, a.tolerance(), &who)?);
    }
    let all =
        rv.all_gather(&[ms.to_le_bytes(), err.to_le_bytes(), b2b_ms.to_le_bytes()].concat())?;
    let decode =
        |b: &[u8], i: usize| f64::from_le_bytes(b[8 * i..8 * i + 8].try_into().unwrap_or_default());
    let worst_ms = all.iter().map(|b| decode(b, 0)).fold(0.0, f64::max);
    let worst_err = all.iter().map(|b| decode(b, 1)).fold(0.0, f64::max);
    let worst_b2b = all.iter().map(|b| decode(b, 2)).fold(0.0, f64::max);
    let mapping = match heap.mapping() {
        tl_dist::HeapMapping::Vmm => "vmm",
        tl_dist::HeapMapping::LegacyIpc => "legacy-ipc",
        tl_dist::HeapMapping::Nvshmem => "nvshmem",
    };
    drop(runner);
    drop(heap);
    if me == 0 {
        Ok(summary(
            a,
            world,
            &Measured {
                err: worst_err,
                ms: worst_ms,
                flops: p.flops,
                bus_bytes: p.bus_bytes,
            },
            &format!(
                "device=cuda gpus={gpus} heap={mapping} peers={} checked_rows={}{}",
                if a.nvshmem {
                    "nvshmem-calls"
                } else if tables {
                    "tables"
                } else {
                    "stride"
                },
                rows_to_check(p.rows, a.check_rows).len(),
                if worst_b2b > 0.0 {
                    format!(" back_to_back={} b2b_ms={worst_b2b:.4}", a.back_to_back)
                } else {
                    String::new()
                }
            ),
        ))
    } else if worst_err.is_finite() && worst_err < a.tolerance() {
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::from(1))
    }
}
