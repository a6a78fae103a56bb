//! `--kernel moe`: the mixture-of-experts all-to-all — dispatch (each token's top-k rows to
//! the ranks that hold their experts), an identity expert, combine (the rows back to their
//! senders) and gather (each token's kept rows weighted) — checked against the tokens
//! themselves (the weights sum to one and the expert is the identity, so every token must come
//! back unchanged: a row sent to the wrong slot, lost or duplicated shows).
//!
//! Sizes: `--m` tokens per rank, `--k` the hidden size, `--topk` choices per token among
//! `--experts` experts, spread evenly over the ranks. Expert `e` lives on rank
//! `e / (experts / R)`; token `t` of rank `r` picks experts `(base + j·experts/topk) mod
//! experts` for `j < topk` (`base` a hash of `t` and `r`), so every destination receives the
//! same number of rows, `m·topk/R` — what NCCL's `all_to_all_single` with that many rows per
//! peer moves (bench/dist_peers.py `--op all-to-all`). The receive buffers hold `m·topk` rows
//! per source: nothing is dropped.
//!
//! `--dedup` sends each token once per destination rank with all its choices there
//! (`moe_dispatch_dedup`): the expert side weighs each row by its choices' weights (here the
//! identity expert: the row times their sum) and the gather sums one row per destination.

use std::time::{Duration, Instant};

use tilelang::kernels::dist::{
    moe_combine, moe_dispatch, moe_dispatch_dedup, moe_gather, moe_gather_dedup,
};
use tilelang::prelude::*;
use tl_sim::{SimArg, SimOptions};

use crate::{pattern, Args};

/// Tokens one dispatch block walks.
const TOKENS_PER_BLOCK: i64 = 32;

/// The routing of rank `r`'s tokens: (destination rank, expert) of each (token, choice).
pub struct Routing {
    pub dest: Vec<f64>,
    pub expert: Vec<f64>,
    pub weight: Vec<f64>,
}

fn check_sizes(a: &Args, world: usize) -> anyhow::Result<()> {
    if a.experts == 0
        || !a.experts.is_multiple_of(world)
        || !a.experts.is_multiple_of(a.topk.max(1))
    {
        anyhow::bail!(
            "--experts {} must be a multiple of the ranks ({world}) and of --topk ({})",
            a.experts,
            a.topk
        );
    }
    if !a.topk.is_power_of_two() {
        // The check weighs each choice 1/topk and expects every token back exactly.
        anyhow::bail!("--topk {}: a power of two (1, 2, 4, 8, …)", a.topk);
    }
    Ok(())
}

pub fn routing(a: &Args, r: usize, world: usize) -> Routing {
    let (t_n, kk, e) = (a.m, a.topk, a.experts);
    let per_rank = e / world;
    let (mut dest, mut expert, mut weight) = (vec![], vec![], vec![]);
    for t in 0..t_n {
        let base = (t * 7919 + r * 104_729) % e;
        for j in 0..kk {
            let x = (base + j * (e / kk)) % e;
            dest.push((x / per_rank) as f64);
            expert.push(x as f64);
            // Weights that sum to one exactly in f32 (a power of two per choice).
            weight.push(1.0 / kk as f64);
        }
    }
    Routing {
        dest,
        expert,
        weight,
    }
}

/// The relative error of rank `r`'s tokens after the round trip (zero when every token came
/// back unchanged, as it must); on a mismatch the count goes to stderr.
fn returned(got: &[f64], r: usize, len: usize) -> anyhow::Result<f64> {
    let want = pattern(r, len);
    let wrong = got.iter().zip(&want).filter(|(x, y)| x != y).count();
    if wrong > 0 {
        eprintln!("rank {r}: {wrong} of {len} elements did not come back unchanged");
    }
    tilelang::runtime::rel_err(got, &want).map_err(|e| anyhow::anyhow!(e))
}

/// Columns a gather block sums: 8 per thread of 256, so each thread loads 16 bytes of every
/// row. With 256 (and the rows read element by element) the round trip at 4096 tokens × 7168,
/// top-8, on one H100 took 3.05 ms, 0.92 now (gpu-notes run 20h).
const MOE_GATHER_COLUMNS: i64 = 2048;

/// The kernels: dispatch, combine, gather (`--dedup`'s expert step is [`weighted_identity`]).
fn kernels(threads: u32, dedup: bool) -> [Kernel; 3] {
    let (dispatch, gather) = if dedup {
        (
            moe_dispatch_dedup(BF16, threads, TOKENS_PER_BLOCK),
            moe_gather_dedup(BF16, 256, MOE_GATHER_COLUMNS),
        )
    } else {
        (
            moe_dispatch(BF16, threads, TOKENS_PER_BLOCK),
            moe_gather(BF16, 256, MOE_GATHER_COLUMNS),
        )
    };
    [dispatch, moe_combine(BF16, threads), gather]
}

/// The identity expert after a deduplicating dispatch: each received row times the sum of its
/// choices' weights on this rank (`RECV_WEIGHT`), as an expert side weighs its outputs.
fn weighted_identity() -> Kernel {
    Kernel::build("moe_weighted_identity", |k| {
        let (r, cap, h, kk) = (k.dim("R"), k.dim("CAP"), k.dim("H"), k.dim("K"));
        let recv = k.input("RECV", [&r, &cap, &h], BF16);
        let rw = k.input("RECV_WEIGHT", [&r, &cap, &kk], F32);
        let yr = k.output("YR", [&r, &cap, &h], BF16);
        k.launch(
            [ceildiv(&h, 256), cap.clone(), r.clone()],
            256,
            |t, [bx, row, s]| {
                let sum = t.alloc_var(F32);
                t.store(&sum, [0], Expr::float(0.0));
                t.serial(&kk, |t, j| {
                    let v = sum.at([0]) + rw.at([s.clone(), row.clone(), j]);
                    t.store(&sum, [0], v);
                });
                t.parallel([256], |t, [i]| {
                    let col = &bx * 256 + &i;
                    t.if_(col.lt(&h), |t| {
                        let v =
                            recv.at([s.clone(), row.clone(), col.clone()]).cast(F32) * sum.at([0]);
                        t.store(&yr, [s.clone(), row.clone(), col.clone()], v.cast(BF16));
                    });
                });
            },
        );
    })
}

/// Rows rank `r` sends to each peer in one dispatch: (token, choice) pairs, or with `dedup`
/// tokens with a choice there; the mean over its peers.
fn rows_per_peer(route: &Routing, kk: usize, r: usize, world: usize, dedup: bool) -> f64 {
    if world < 2 {
        return 0.0;
    }
    let dest: Vec<usize> = route.dest.iter().map(|&d| d as usize).collect();
    let rows: usize = (0..world)
        .filter(|&p| p != r)
        .map(|p| {
            dest.chunks(kk)
                .map(|c| {
                    let n = c.iter().filter(|&&d| d == p).count();
                    if dedup {
                        n.min(1)
                    } else {
                        n
                    }
                })
                .sum::<usize>()
        })
        .sum();
    rows as f64 / (world - 1) as f64
}

/// `k` with peer tables when `tables`, and how many tables that added.
fn tabled(k: Kernel, tables: bool) -> (Kernel, usize) {
    if !tables {
        return (k, 0);
    }
    let before = k.ir().params.len();
    let k = k.with_peer_tables();
    let added = k.ir().params.len() - before;
    (k, added)
}

/// Simulated ranks: dispatch, the identity expert, combine, gather; every token back.
/// MoE's kernels are not built for NVSHMEM's calls (they take peer tables).
fn refuse_nvshmem(a: &Args) -> anyhow::Result<()> {
    if a.nvshmem {
        anyhow::bail!("--kernel moe with --nvshmem: the MoE kernels are not built for NVSHMEM's calls; run them on the VMM or legacy heap (their peer tables also run on NVSHMEM's heap: TILELANG_DIST_IPC=nvshmem without --nvshmem)");
    }
    Ok(())
}

pub fn run_sim(a: &Args) -> anyhow::Result<bool> {
    refuse_nvshmem(a)?;
    let world = a.ranks.max(1);
    check_sizes(a, world)?;
    let (t_n, h, kk, dedup) = (a.m, a.k, a.topk, a.dedup);
    // Room for every row from each source: a token per choice, or once per destination.
    let cap = if dedup { t_n } else { t_n * kk };
    let lower = |k: Kernel| k.lower(Target::SM90).map_err(|d| anyhow::anyhow!("{d}"));
    let [disp, comb, gath] = kernels(64, dedup);
    // With --peer-tables, a table per symmetric buffer before the rank scalars (the
    // simulator reaches each rank's copy itself: the entries are unread).
    let (disp, disp_tables) = tabled(disp, a.peer_tables);
    let (comb, comb_tables) = tabled(comb, a.peer_tables);
    let tables = |args: Vec<SimArg>, n: usize| -> Vec<SimArg> {
        let mut v = args;
        let tail = v.split_off(v.len() - 3);
        v.extend((0..n).map(|_| SimArg::tensor(I64, &[world], &vec![0.0; world])));
        v.extend(tail);
        v
    };
    let (disp, comb, gath) = (lower(disp)?, lower(comb)?, lower(gath)?);
    let expert = dedup.then(|| lower(weighted_identity())).transpose()?;
    let routes: Vec<Routing> = (0..world).map(|r| routing(a, r, world)).collect();
    let tail = |r: usize| {
        [
            SimArg::Int(1),
            SimArg::Int(r as i64),
            SimArg::Int(world as i64),
            SimArg::Int(0),
        ]
    };
    // Where dispatch's arguments sit: with `dedup` the weights come after the experts and the
    // received weights after the received experts.
    let (slot, recv, counts) = if dedup { (4, 5, 8) } else { (3, 4, 6) };
    let mut dargs: Vec<Vec<SimArg>> = (0..world)
        .map(|r| {
            let mut v = vec![
                SimArg::tensor(BF16, &[t_n, h], &pattern(r, t_n * h)),
                SimArg::tensor(I32, &[t_n, kk], &routes[r].dest),
                SimArg::tensor(I32, &[t_n, kk], &routes[r].expert),
            ];
            if dedup {
                v.push(SimArg::tensor(F32, &[t_n, kk], &routes[r].weight));
            }
            v.extend([
                SimArg::zeros(I32, &[t_n, kk]),
                SimArg::zeros(BF16, &[world, cap, h]),
            ]);
            if dedup {
                v.extend([
                    SimArg::zeros(I32, &[world, cap, kk]),
                    SimArg::zeros(F32, &[world, cap, kk]),
                ]);
            } else {
                v.push(SimArg::zeros(I32, &[world, cap]));
            }
            v.extend([
                SimArg::zeros(I32, &[world]),
                SimArg::zeros(I32, &[world]),
                SimArg::zeros(I32, &[world]),
            ]);
            v.extend(tail(r));
            tables(v, disp_tables)
        })
        .collect();
    let t0 = Instant::now();
    tl_sim::run_ranks(&disp, &mut dargs, &SimOptions::default())?;
    let mut cargs: Vec<Vec<SimArg>> = (0..world)
        .map(|r| -> anyhow::Result<Vec<SimArg>> {
            // The expert: the identity, each row weighted on this side with `dedup`.
            let yr = if let Some(expert) = &expert {
                let mut e = vec![
                    dargs[r][recv].clone(),
                    dargs[r][recv + 2].clone(),
                    SimArg::zeros(BF16, &[world, cap, h]),
                ];
                tl_sim::run(expert, &mut e, &SimOptions::default())?;
                e[2].clone()
            } else {
                dargs[r][recv].clone()
            };
            let mut v = vec![
                yr,
                dargs[r][counts].clone(),
                SimArg::zeros(BF16, &[world, cap, h]),
                SimArg::zeros(I32, &[world]),
                SimArg::zeros(I32, &[world]),
            ];
            v.extend(tail(r));
            Ok(tables(v, comb_tables))
        })
        .collect::<anyhow::Result<_>>()?;
    tl_sim::run_ranks(&comb, &mut cargs, &SimOptions::default())?;
    let mut err: f64 = 0.0;
    for r in 0..world {
        let mut g = vec![
            cargs[r][2].clone(),
            dargs[r][1].clone(),
            dargs[r][slot].clone(),
        ];
        if !dedup {
            g.push(SimArg::tensor(F32, &[t_n, kk], &routes[r].weight));
        }
        g.push(SimArg::zeros(BF16, &[t_n, h]));
        tl_sim::run(&gath, &mut g, &SimOptions::default())?;
        let y = g.last().map(|y| y.to_f64(BF16)).unwrap_or_default();
        err = err.max(returned(&y, r, t_n * h)?);
    }
    let ok = err == 0.0;
    println!(
        "distributed kernel=moe{} ranks={world} tokens={t_n} hidden={h} topk={kk} experts={} rows_per_peer={:.1} err={err:.2e} ms={:.4} device=sim(sm_90a) {}",
        if dedup { " dedup" } else { "" },
        a.experts,
        rows_per_peer(&routes[0], kk, 0, world, dedup),
        t0.elapsed().as_secs_f64() * 1e3,
        if ok { "PASS" } else { "FAIL" }
    );
    Ok(ok)
}

/// GPUs, one process per rank: the round trip checked once, then dispatch and combine timed
/// each alone (a host barrier, CUDA events around the call; the median, the slowest rank's),
/// then `--reps` round trips (dispatch, combine, gather) back to back with no barrier.
pub fn run_gpu(a: &Args) -> anyhow::Result<bool> {
    refuse_nvshmem(a)?;
    use tilelang::runtime::external::ExternalTensor;
    use tl_dist::{JobConfig, Rendezvous, SymmetricHeap};
    let cfg = JobConfig::from_env()?;
    let gpus = Device::cuda_count();
    if gpus == 0 {
        anyhow::bail!("rank {}: no CUDA device; run --device sim", cfg.rank);
    }
    let ordinal = cfg.local_rank % gpus;
    let rv = Rendezvous::join(cfg)?;
    let (me, world) = (rv.rank(), rv.world());
    check_sizes(a, world)?;
    let dev = Device::Cuda(ordinal);
    let (t_n, h, kk, dedup) = (a.m, a.k, a.topk, a.dedup);
    let cap = if dedup { t_n } else { t_n * kk };
    let rows_bytes = (world * cap * h * 2) as u64;
    // Per received row its expert, or with `dedup` its choices' experts (and weights).
    let per_row = if dedup { kk } else { 1 };
    let small = (world * cap * per_row * 4) as u64;
    let round = |b: u64| b.div_ceil(256) * 256;
    let need = 2 * round(rows_bytes)
        + round(small) * if dedup { 2 } else { 1 }
        + 5 * round((world * 4) as u64);
    let mut heap = SymmetricHeap::new(&rv, ordinal, need)?;
    let mut sym = |bytes: u64, dtype: DType, shape: &[usize]| -> anyhow::Result<ExternalTensor> {
        let b = heap.alloc(&rv, bytes)?;
        heap.write(b, &vec![0u8; bytes as usize])?;
        Ok(heap.tensor(b, dtype, shape)?)
    };
    let recv = sym(rows_bytes, BF16, &[world, cap, h])?;
    let recv_expert = if dedup {
        sym(small, I32, &[world, cap, kk])?
    } else {
        sym(small, I32, &[world, cap])?
    };
    let recv_weight = if dedup {
        Some(sym(small, F32, &[world, cap, kk])?)
    } else {
        None
    };
    let counts = sym((world * 4) as u64, I32, &[world])?;
    let dflags = sym((world * 4) as u64, I32, &[world])?;
    let dready = sym((world * 4) as u64, I32, &[world])?;
    let back = sym(rows_bytes, BF16, &[world, cap, h])?;
    let cflags = sym((world * 4) as u64, I32, &[world])?;
    let cready = sym((world * 4) as u64, I32, &[world])?;
    let stride = heap.stride() as i64;
    let route = routing(a, me, world);
    let x = Tensor::from_f64(&[t_n, h], BF16, &pattern(me, t_n * h), &dev)?;
    let dest = Tensor::from_f64(&[t_n, kk], I32, &route.dest, &dev)?;
    let expert = Tensor::from_f64(&[t_n, kk], I32, &route.expert, &dev)?;
    let slot = Tensor::zeros(&[t_n, kk], I32, &dev)?;
    let w = Tensor::from_f64(&[t_n, kk], F32, &route.weight, &dev)?;
    let y = Tensor::zeros(&[t_n, h], BF16, &dev)?;
    // The expert's output rows with `dedup` (weighted here); else combine sends RECV back.
    let yr = if dedup {
        Some(Tensor::zeros(&[world, cap, h], BF16, &dev)?)
    } else {
        None
    };
    let compile = |k: &Kernel| k.compile(&dev).map_err(|e| anyhow::anyhow!("{e}"));
    let [disp_k, comb_k, gath] = kernels(256, dedup);
    // A heap whose ranks' copies are not one stride apart takes kernels with peer tables.
    let use_tables = a.peer_tables || !heap.is_flat();
    let (disp_k, _) = tabled(disp_k, use_tables);
    let (comb_k, _) = tabled(comb_k, use_tables);
    let (disp, comb, gath) = (compile(&disp_k)?, compile(&comb_k)?, compile(&gath)?);
    let expert_k = dedup.then(|| compile(&weighted_identity())).transpose()?;
    let tail = |epoch: i64| {
        [
            Arg::Int(epoch),
            Arg::Int(me as i64),
            Arg::Int(world as i64),
            Arg::Int(stride),
        ]
    };
    let disp_flat = |epoch: i64| {
        let mut v = vec![Arg::Tensor(&x), Arg::Tensor(&dest), Arg::Tensor(&expert)];
        if dedup {
            v.push(Arg::Tensor(&w));
        }
        v.extend([
            Arg::Tensor(&slot),
            Arg::External(&recv),
            Arg::External(&recv_expert),
        ]);
        if let Some(rw) = &recv_weight {
            v.push(Arg::External(rw));
        }
        v.extend([
            Arg::External(&counts),
            Arg::External(&dflags),
            Arg::External(&dready),
        ]);
        v.extend(tail(epoch));
        v
    };
    // The identity expert: combine sends back what dispatch delivered (weighted first with
    // `dedup`).
    let expert_args: Vec<Arg> = match (&recv_weight, &yr) {
        (Some(rw), Some(yr)) => vec![Arg::External(&recv), Arg::External(rw), Arg::Tensor(yr)],
        _ => vec![],
    };
    let run_expert = || -> anyhow::Result<()> {
        if let Some(e) = &expert_k {
            e.run_args(&expert_args)?;
        }
        Ok(())
    };
    let comb_flat = |epoch: i64| {
        let mut v = vec![
            match &yr {
                Some(yr) => Arg::Tensor(yr),
                None => Arg::External(&recv),
            },
            Arg::External(&counts),
            Arg::External(&back),
            Arg::External(&cflags),
            Arg::External(&cready),
        ];
        v.extend(tail(epoch));
        v
    };
    let tables_of = |k: &Kernel, args: &[Arg]| -> anyhow::Result<Vec<ExternalTensor>> {
        Ok(if use_tables {
            heap.peer_tables_for(k.ir(), args)?
        } else {
            vec![]
        })
    };
    let disp_tables = tables_of(&disp_k, &disp_flat(1))?;
    let comb_tables = tables_of(&comb_k, &comb_flat(1))?;
    let disp_args = |epoch: i64| tl_dist::with_tables(&disp_flat(epoch), &disp_tables);
    let comb_args = |epoch: i64| tl_dist::with_tables(&comb_flat(epoch), &comb_tables);
    let mut gath_args = vec![Arg::External(&back), Arg::Tensor(&dest), Arg::Tensor(&slot)];
    if !dedup {
        gath_args.push(Arg::Tensor(&w));
    }
    gath_args.push(Arg::Tensor(&y));
    let limit = Duration::from_secs_f64(a.call_timeout.max(0.001));
    let stuck = |what: &str| -> ! {
        eprintln!(
            "error: rank {me}: `{what}` still runs after {:.1} s: it waits for a peer that has not come; stopping",
            a.call_timeout
        );
        std::process::exit(3)
    };
    rv.barrier()?;
    // Call 1, checked.
    disp.run_args(&disp_args(1))?;
    run_expert()?;
    comb.run_args(&comb_args(1))?;
    gath.run_args(&gath_args)?;
    if !gath.synchronize_within(limit)? {
        stuck("the first round trip");
    }
    let mut err = returned(&y.to_f64_vec()?, me, t_n * h)?;
    // Dispatch and combine, each timed alone.
    let (mut td, mut tc) = (vec![], vec![]);
    let mut epoch = 1i64;
    for rep in 0..a.warmup + a.reps {
        epoch += 1;
        rv.barrier()?;
        let d = disp
            .run_timed(&disp_args(epoch), limit)?
            .unwrap_or_else(|| stuck("dispatch"));
        run_expert()?;
        rv.barrier()?;
        let c = comb
            .run_timed(&comb_args(epoch), limit)?
            .unwrap_or_else(|| stuck("combine"));
        if rep >= a.warmup {
            td.push(d);
            tc.push(c);
        }
    }
    // Round trips back to back.
    rv.barrier()?;
    let t0 = Instant::now();
    let trips = a.reps.max(1);
    for _ in 0..trips {
        epoch += 1;
        disp.run_args(&disp_args(epoch))?;
        run_expert()?;
        comb.run_args(&comb_args(epoch))?;
        gath.run_args(&gath_args)?;
    }
    if !gath.synchronize_within(limit * trips as u32)? {
        stuck("the back-to-back round trips");
    }
    let trip_ms = t0.elapsed().as_secs_f64() * 1e3 / trips as f64;
    err = err.max(returned(&y.to_f64_vec()?, me, t_n * h)?);
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    // A NaN would vanish in the ranks' maximum below.
    let err = if err.is_nan() { f64::INFINITY } else { err };
    let mine = [median(&mut td), median(&mut tc), trip_ms, err];
    let bytes: Vec<u8> = mine.iter().flat_map(|v| v.to_le_bytes()).collect();
    let all = rv.all_gather(&bytes)?;
    let worst = |i: usize| {
        all.iter()
            .map(|b| f64::from_le_bytes(b[8 * i..8 * i + 8].try_into().unwrap_or_default()))
            .fold(0.0, f64::max)
    };
    let mapping = match heap.mapping() {
        tl_dist::HeapMapping::Vmm => "vmm",
        tl_dist::HeapMapping::LegacyIpc => "legacy-ipc",
        tl_dist::HeapMapping::Nvshmem => "nvshmem",
    };
    drop(heap);
    let all_ok = worst(3) == 0.0;
    let err = worst(3);
    if me == 0 {
        // Bus bytes as nccl-tests count an all-to-all: what each rank sends to its peers.
        let rows = rows_per_peer(&route, kk, me, world, dedup);
        let bus = (world - 1) as f64 * rows * (h * 2) as f64;
        let gbs = |ms: f64| bus / (ms * 1e-3) / 1e9;
        println!(
            "distributed kernel=moe{} ranks={world} tokens={t_n} hidden={h} topk={kk} experts={} rows_per_peer={rows:.1} err={err:.2e} ms={:.4} dispatch_ms={:.4} dispatch_busbw_gbs={:.1} combine_ms={:.4} combine_busbw_gbs={:.1} round_trip_b2b_ms={:.4} device=cuda gpus={gpus} heap={mapping} peers={} {}",
            if dedup { " dedup" } else { "" },
            a.experts,
            worst(0) + worst(1),
            worst(0),
            gbs(worst(0)),
            worst(1),
            gbs(worst(1)),
            worst(2),
            if use_tables { "tables" } else { "stride" },
            if all_ok { "PASS" } else { "FAIL" }
        );
    }
    Ok(all_ok)
}
