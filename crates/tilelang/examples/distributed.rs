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
//! (That path sets up the symmetric heap with CUDA's virtual memory API; it has not yet run on
//! a GPU.)

use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use tilelang::kernels::dist::{
    ag_gemm, all_gather, all_reduce, all_reduce_two_shot, gemm_rs, AgGemmConfig,
};
use tilelang::kernels::reference;
use tilelang::prelude::*;
use tilelang::runtime::external::ExternalTensor;
use tl_sim::{SimArg, SimOptions};

#[derive(Parser, Debug)]
#[command(about = "Multi-rank kernels with a single-device reference check")]
struct Args {
    /// all-gather, ag-gemm, gemm-rs, all-reduce or all-reduce-two-shot
    #[arg(long, default_value = "ag-gemm")]
    kernel: String,
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
    /// Timed calls on a GPU (after one checked call)
    #[arg(long, default_value_t = 20)]
    reps: usize,
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
/// result and what it must be, and the work done (flops) for the report.
struct Plan {
    bufs: Vec<Buf>,
    epoch: bool,
    out: usize,
    want: Vec<f64>,
    flops: f64,
}

/// Values exact in bf16 (and their products' sums in f32).
fn pattern(seed: usize, len: usize) -> Vec<f64> {
    (0..len)
        .map(|i| (((i * 7 + seed * 13) % 9) as f64 - 4.0) * 0.25)
        .collect()
}

fn tiles(sim: bool) -> AgGemmConfig {
    if sim {
        AgGemmConfig::tiles(64, 64, 32, 2, 128)
    } else {
        AgGemmConfig::tiles(128, 128, 64, 3, 256)
    }
}

fn kernel(name: &str, sim: bool) -> anyhow::Result<Kernel> {
    Ok(match name {
        "all-gather" => all_gather(F32, 256),
        "ag-gemm" => ag_gemm(BF16, tiles(sim)),
        "gemm-rs" => gemm_rs(BF16, tiles(sim)),
        "all-reduce" => all_reduce(256, 256),
        "all-reduce-two-shot" => all_reduce_two_shot(256, 256),
        other => anyhow::bail!(
            "--kernel {other:?}: all-gather, ag-gemm, gemm-rs, all-reduce or all-reduce-two-shot"
        ),
    })
}

fn plan(a: &Args, sim: bool, r: usize, world: usize) -> anyhow::Result<Plan> {
    let (m, n, k) = (a.m, a.n, a.k);
    let cfg = tiles(sim);
    let (bm, bn) = (cfg.bm as usize, cfg.bn as usize);
    use Buf::*;
    Ok(match a.kernel.as_str() {
        "all-gather" => Plan {
            bufs: vec![
                Local {
                    shape: vec![n],
                    dtype: F32,
                    init: pattern(r, n),
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
            ],
            epoch: true,
            out: 1,
            want: (0..world).flat_map(|s| pattern(s, n)).collect(),
            flops: 0.0,
        },
        "ag-gemm" => {
            let b = pattern(100 + r, n * k);
            let mut want = vec![];
            for s in 0..world {
                want.extend(reference::gemm(
                    &pattern(s, m * k),
                    &b,
                    m,
                    n,
                    k,
                    false,
                    true,
                ));
            }
            Plan {
                bufs: vec![
                    Local {
                        shape: vec![m, k],
                        dtype: BF16,
                        init: pattern(r, m * k),
                    },
                    Local {
                        shape: vec![n, k],
                        dtype: BF16,
                        init: b,
                    },
                    Symmetric {
                        shape: vec![world, m, k],
                        dtype: BF16,
                        init: vec![0.0; world * m * k],
                    },
                    Local {
                        shape: vec![world, m, n],
                        dtype: F32,
                        init: vec![f64::NAN; world * m * n],
                    },
                    Symmetric {
                        shape: vec![world, m.div_ceil(bm)],
                        dtype: I32,
                        init: vec![0.0; world * m.div_ceil(bm)],
                    },
                ],
                epoch: true,
                out: 3,
                want,
                flops: 2.0 * (world * m * n * k) as f64,
            }
        }
        "gemm-rs" => {
            let (tm, tn) = (m.div_ceil(bm), n.div_ceil(bn));
            let mut want = vec![0.0; m * n];
            for s in 0..world {
                let a_s = pattern(s, world * m * k);
                let p = reference::gemm(
                    &a_s[r * m * k..(r + 1) * m * k],
                    &pattern(50 + s, n * k),
                    m,
                    n,
                    k,
                    false,
                    true,
                );
                want.iter_mut().zip(p).for_each(|(w, x)| *w += x);
            }
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
                        shape: vec![world, m, n],
                        dtype: F32,
                        init: vec![0.0; world * m * n],
                    },
                    Symmetric {
                        shape: vec![world, m, n],
                        dtype: F32,
                        init: vec![0.0; world * m * n],
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
                ],
                epoch: true,
                out: 4,
                want,
                flops: 2.0 * (world * m * n * k) as f64,
            }
        }
        "all-reduce" => {
            let g = n.div_ceil(256);
            Plan {
                bufs: vec![
                    Symmetric {
                        shape: vec![n],
                        dtype: F32,
                        init: pattern(r, n),
                    },
                    Local {
                        shape: vec![n],
                        dtype: F32,
                        init: vec![f64::NAN; n],
                    },
                    Symmetric {
                        shape: vec![g, world],
                        dtype: I32,
                        init: vec![0.0; g * world],
                    },
                ],
                epoch: false,
                out: 1,
                want: (0..n)
                    .map(|i| (0..world).map(|s| pattern(s, n)[i]).sum())
                    .collect(),
                flops: 0.0,
            }
        }
        "all-reduce-two-shot" => {
            let g = n.div_ceil(world).div_ceil(256);
            Plan {
                bufs: vec![
                    Symmetric {
                        shape: vec![n],
                        dtype: F32,
                        init: pattern(r, n),
                    },
                    Symmetric {
                        shape: vec![n],
                        dtype: F32,
                        init: vec![0.0; n],
                    },
                    Local {
                        shape: vec![n],
                        dtype: F32,
                        init: vec![f64::NAN; n],
                    },
                    Symmetric {
                        shape: vec![g, world],
                        dtype: I32,
                        init: vec![0.0; g * world],
                    },
                ],
                epoch: false,
                out: 2,
                want: (0..n)
                    .map(|i| (0..world).map(|s| pattern(s, n)[i]).sum())
                    .collect(),
                flops: 0.0,
            }
        }
        other => anyhow::bail!("--kernel {other:?}"),
    })
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
    let gpu = match a.device.as_deref() {
        Some("sim") => false,
        Some(d) if d.starts_with("cuda") => true,
        Some(other) => anyhow::bail!("--device {other:?}: sim or cuda"),
        None => std::env::var("RANK").is_ok(),
    };
    if gpu {
        run_gpu(&a)
    } else {
        run_sim(&a)
    }
}

fn summary(a: &Args, world: usize, err: f64, ms: f64, flops: f64, extra: &str) -> ExitCode {
    let ok = err.is_finite() && err < 1e-6;
    if !ok {
        eprintln!("check FAILED: relative error {err:.3e}");
    }
    let tflops = if flops > 0.0 && ms > 0.0 {
        format!(" tflops_per_rank={:.1}", flops / (ms * 1e-3) / 1e12)
    } else {
        String::new()
    };
    println!(
        "distributed kernel={} ranks={world} m={} n={} k={} err={err:.2e} ms={ms:.4}{tflops} {extra} {}",
        a.kernel, a.m, a.n, a.k,
        if ok { "PASS" } else { "FAIL" }
    );
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn run_sim(a: &Args) -> anyhow::Result<ExitCode> {
    let world = a.ranks.max(1);
    let k = kernel(&a.kernel, true)?;
    let lowered = k.lower(Target::SM90).map_err(|d| anyhow::anyhow!("{d}"))?;
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
            v.extend([
                SimArg::Int(r as i64),
                SimArg::Int(world as i64),
                SimArg::Int(0),
            ]);
            v
        })
        .collect();
    let t = Instant::now();
    let rep = tl_sim::run_ranks(&lowered, &mut args, &SimOptions::default())?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let mut err: f64 = 0.0;
    for (p, v) in plans.iter().zip(&args) {
        let dt = match &p.bufs[p.out] {
            Buf::Local { dtype, .. } | Buf::Symmetric { dtype, .. } => *dtype,
        };
        let got = v[p.out].to_f64(dt);
        err = err.max(tilelang::runtime::rel_err(&got, &p.want).map_err(|e| anyhow::anyhow!(e))?);
    }
    Ok(summary(
        a,
        world,
        err,
        ms,
        0.0,
        &format!("device=sim(sm_90a) order_checked={}", rep.order_checked),
    ))
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
    let rv = Rendezvous::join(cfg)?;
    let (me, world) = (rv.rank(), rv.world());
    let dev = Device::Cuda(ordinal);
    let p = plan(a, false, me, world)?;
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
    let mut heap = SymmetricHeap::new(&rv, ordinal, need.max(1))?;
    let exe = kernel(&a.kernel, false)?
        .compile(&dev)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
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
    rv.barrier()?;
    let launch = |epoch: i64| -> anyhow::Result<()> {
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
        exe.run_args(&args)?;
        exe.synchronize()?;
        Ok(())
    };
    launch(1)?;
    let got = match (&locals[p.out], &syms[p.out], &p.bufs[p.out]) {
        (Some(t), _, _) => t.to_f64_vec()?,
        (None, Some((buf, _)), Buf::Symmetric { dtype, shape, .. }) => {
            let bytes = heap.read(*buf)?;
            let n = shape.iter().product::<usize>();
            (0..n)
                .map(|i| tilelang::runtime::dtype_io::read(&bytes, *dtype, i))
                .collect()
        }
        _ => anyhow::bail!("no output"),
    };
    let err = tilelang::runtime::rel_err(&got, &p.want).map_err(|e| anyhow::anyhow!(e))?;
    // Timed calls: every rank starts together; the slowest rank's time is the job's.
    rv.barrier()?;
    let t = Instant::now();
    // These kernels do not yet keep a rank from overwriting what a peer still reads from the
    // previous call (docs/distributed.md): a rank barrier between calls, counted in the time.
    for e in 0..a.reps {
        launch(2 + e as i64)?;
        rv.barrier()?;
    }
    let ms = t.elapsed().as_secs_f64() * 1e3 / a.reps.max(1) as f64;
    let all = rv.all_gather(&[ms.to_le_bytes(), err.to_le_bytes()].concat())?;
    let decode =
        |b: &[u8], i: usize| f64::from_le_bytes(b[8 * i..8 * i + 8].try_into().unwrap_or_default());
    let worst_ms = all.iter().map(|b| decode(b, 0)).fold(0.0, f64::max);
    let worst_err = all.iter().map(|b| decode(b, 1)).fold(0.0, f64::max);
    drop(heap);
    if me == 0 {
        Ok(summary(
            a,
            world,
            worst_err,
            worst_ms,
            p.flops,
            &format!("device=cuda gpus={gpus}"),
        ))
    } else if worst_err.is_finite() && worst_err < 1e-6 {
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::from(1))
    }
}
