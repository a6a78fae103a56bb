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

use std::time::{Duration, Instant};

use tilelang::kernels::dist::{moe_combine, moe_dispatch, moe_gather};
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

/// The kernels: dispatch, combine, gather.
fn kernels(threads: u32) -> [Kernel; 3] {
    [
        moe_dispatch(BF16, threads, TOKENS_PER_BLOCK),
        moe_combine(BF16, threads),
        moe_gather(BF16, 256, 256),
    ]
}

/// Simulated ranks: dispatch, the identity expert, combine, gather; every token back.
pub fn run_sim(a: &Args) -> anyhow::Result<bool> {
    let world = a.ranks.max(1);
    check_sizes(a, world)?;
    let (t_n, h, kk) = (a.m, a.k, a.topk);
    let cap = t_n * kk;
    let [disp, comb, gath] = kernels(64).map(|k| k.lower(Target::SM90));
    let (disp, comb, gath) = (
        disp.map_err(|d| anyhow::anyhow!("{d}"))?,
        comb.map_err(|d| anyhow::anyhow!("{d}"))?,
        gath.map_err(|d| anyhow::anyhow!("{d}"))?,
    );
    let routes: Vec<Routing> = (0..world).map(|r| routing(a, r, world)).collect();
    let tail = |r: usize| {
        [
            SimArg::Int(1),
            SimArg::Int(r as i64),
            SimArg::Int(world as i64),
            SimArg::Int(0),
        ]
    };
    let mut dargs: Vec<Vec<SimArg>> = (0..world)
        .map(|r| {
            let mut v = vec![
                SimArg::tensor(BF16, &[t_n, h], &pattern(r, t_n * h)),
                SimArg::tensor(I32, &[t_n, kk], &routes[r].dest),
                SimArg::tensor(I32, &[t_n, kk], &routes[r].expert),
                SimArg::zeros(I32, &[t_n, kk]),
                SimArg::zeros(BF16, &[world, cap, h]),
                SimArg::zeros(I32, &[world, cap]),
                SimArg::zeros(I32, &[world]),
                SimArg::zeros(I32, &[world]),
                SimArg::zeros(I32, &[world]),
            ];
            v.extend(tail(r));
            v
        })
        .collect();
    let t0 = Instant::now();
    tl_sim::run_ranks(&disp, &mut dargs, &SimOptions::default())?;
    let mut cargs: Vec<Vec<SimArg>> = (0..world)
        .map(|r| {
            let mut v = vec![
                dargs[r][4].clone(),
                dargs[r][6].clone(),
                SimArg::zeros(BF16, &[world, cap, h]),
                SimArg::zeros(I32, &[world]),
                SimArg::zeros(I32, &[world]),
            ];
            v.extend(tail(r));
            v
        })
        .collect();
    tl_sim::run_ranks(&comb, &mut cargs, &SimOptions::default())?;
    let mut err: f64 = 0.0;
    for r in 0..world {
        let mut g = vec![
            cargs[r][2].clone(),
            dargs[r][1].clone(),
            dargs[r][3].clone(),
            SimArg::tensor(F32, &[t_n, kk], &routes[r].weight),
            SimArg::zeros(BF16, &[t_n, h]),
        ];
        tl_sim::run(&gath, &mut g, &SimOptions::default())?;
        err = err.max(returned(&g[4].to_f64(BF16), r, t_n * h)?);
    }
    let ok = err == 0.0;
    println!(
        "distributed kernel=moe ranks={world} tokens={t_n} hidden={h} topk={kk} experts={} err={err:.2e} ms={:.4} device=sim(sm_90a) {}",
        a.experts,
        t0.elapsed().as_secs_f64() * 1e3,
        if ok { "PASS" } else { "FAIL" }
    );
    Ok(ok)
}

/// GPUs, one process per rank: the round trip checked once, then dispatch and combine timed
/// each alone (a host barrier, CUDA events around the call; the median, the slowest rank's),
/// then `--reps` round trips (dispatch, combine, gather) back to back with no barrier.
pub fn run_gpu(a: &Args) -> anyhow::Result<bool> {
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
    let (t_n, h, kk) = (a.m, a.k, a.topk);
    let cap = t_n * kk;
    let rows_bytes = (world * cap * h * 2) as u64;
    let small = (world * cap * 4) as u64;
    let round = |b: u64| b.div_ceil(256) * 256;
    let need = 2 * round(rows_bytes) + round(small) + 5 * round((world * 4) as u64);
    let mut heap = SymmetricHeap::new(&rv, ordinal, need)?;
    let mut sym = |bytes: u64, dtype: DType, shape: &[usize]| -> anyhow::Result<ExternalTensor> {
        let b = heap.alloc(&rv, bytes)?;
        heap.write(b, &vec![0u8; bytes as usize])?;
        Ok(heap.tensor(b, dtype, shape)?)
    };
    let recv = sym(rows_bytes, BF16, &[world, cap, h])?;
    let recv_expert = sym(small, I32, &[world, cap])?;
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
    let [disp, comb, gath] = kernels(256).map(|k| k.compile(&dev));
    let (disp, comb, gath) = (
        disp.map_err(|e| anyhow::anyhow!("{e}"))?,
        comb.map_err(|e| anyhow::anyhow!("{e}"))?,
        gath.map_err(|e| anyhow::anyhow!("{e}"))?,
    );
    let tail = |epoch: i64| {
        [
            Arg::Int(epoch),
            Arg::Int(me as i64),
            Arg::Int(world as i64),
            Arg::Int(stride),
        ]
    };
    let disp_args = |epoch: i64| {
        let mut v = vec![
            Arg::Tensor(&x),
            Arg::Tensor(&dest),
            Arg::Tensor(&expert),
            Arg::Tensor(&slot),
            Arg::External(&recv),
            Arg::External(&recv_expert),
            Arg::External(&counts),
            Arg::External(&dflags),
            Arg::External(&dready),
        ];
        v.extend(tail(epoch));
        v
    };
    // The identity expert: combine sends back what dispatch delivered.
    let comb_args = |epoch: i64| {
        let mut v = vec![
            Arg::External(&recv),
            Arg::External(&counts),
            Arg::External(&back),
            Arg::External(&cflags),
            Arg::External(&cready),
        ];
        v.extend(tail(epoch));
        v
    };
    let gath_args = [
        Arg::External(&back),
        Arg::Tensor(&dest),
        Arg::Tensor(&slot),
        Arg::Tensor(&w),
        Arg::Tensor(&y),
    ];
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
    drop(heap);
    let all_ok = worst(3) == 0.0;
    let err = worst(3);
    if me == 0 {
        // Bus bytes as nccl-tests count an all-to-all: what each rank sends to its peers.
        let bus = ((world - 1) * t_n * kk / world * h * 2) as f64;
        let gbs = |ms: f64| bus / (ms * 1e-3) / 1e9;
        println!(
            "distributed kernel=moe ranks={world} tokens={t_n} hidden={h} topk={kk} experts={} rows_per_peer={} err={err:.2e} ms={:.4} dispatch_ms={:.4} dispatch_busbw_gbs={:.1} combine_ms={:.4} combine_busbw_gbs={:.1} round_trip_b2b_ms={:.4} device=cuda gpus={gpus} {}",
            a.experts,
            t_n * kk / world,
            worst(0) + worst(1),
            worst(0),
            gbs(worst(0)),
            worst(1),
            gbs(worst(1)),
            worst(2),
            if all_ok { "PASS" } else { "FAIL" }
        );
    }
    Ok(all_ok)
}
