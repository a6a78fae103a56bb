//! Multi-rank kernels in the simulator: several ranks in one process, each with its own
//! tensors, peers' copies of symmetric buffers reached by rank, signals and waits between
//! blocks of different ranks — and the errors a wrong protocol must produce (a wait nothing
//! satisfies, a rank that does not exist, a peer access to a buffer outside the symmetric
//! heap).

use tilelang::dsl::SignalOp;
use tilelang::ir::{MemScope, MemSem};
use tilelang::kernels::dist::{
    all_gather, all_gather_by, Transfer, ALL_GATHER_BLOCKS_PER_PEER as G, ARRIVALS_PER_CALL,
};
use tilelang::prelude::*;
use tilelang::Target;
use tl_sim::{SimArg, SimError, SimOptions};

const TARGETS: [Target; 2] = [Target::SM80, Target::SM90];

/// Blocks per peer for all-gathers whose every access the order check should see (it keeps
/// clocks for 4096 threads).
const G_SMALL: i64 = 16;

/// A flag's value after `calls` calls (each call counts `ARRIVALS_PER_CALL`, modulo 2^32), as
/// the i32 the flag buffers hold.
fn flag_after(calls: i64) -> f64 {
    (calls.wrapping_mul(ARRIVALS_PER_CALL) as u32 as i32) as f64
}

/// Rank `r`'s shard: values no other rank has.
fn shard(r: usize, n: usize) -> Vec<f64> {
    (0..n).map(|i| (r * 1000 + i) as f64 * 0.5).collect()
}

fn all_gather_args(r: usize, ranks: usize, n: usize, epoch: i64, flags: f64) -> Vec<SimArg> {
    vec![
        SimArg::tensor(F32, &[n], &shard(r, n)),
        SimArg::tensor(F32, &[ranks, n], &vec![f64::NAN; ranks * n]),
        SimArg::tensor(I32, &[ranks], &vec![flags; ranks]),
        SimArg::zeros(I32, &[ranks]),
        SimArg::Int(epoch),
        SimArg::Int(r as i64),
        SimArg::Int(ranks as i64),
        SimArg::Int(0),
    ]
}

#[test]
fn all_gather_on_1_2_and_4_ranks() {
    let k = all_gather(F32, 64);
    for target in TARGETS {
        let lowered = k.lower(target).unwrap_or_else(|d| panic!("{target}: {d}"));
        for ranks in [1usize, 2, 4] {
            // 37 elements: not a multiple of the vector, so the copy is element-wise.
            for n in [37usize, 64] {
                let mut args: Vec<Vec<SimArg>> = (0..ranks)
                    .map(|r| all_gather_args(r, ranks, n, 1, 0.0))
                    .collect();
                tl_sim::run_ranks(&lowered, &mut args, &SimOptions::default())
                    .unwrap_or_else(|e| panic!("{target}, {ranks} ranks, N={n}: {e}"));
                let want: Vec<f64> = (0..ranks).flat_map(|r| shard(r, n)).collect();
                for (r, a) in args.iter().enumerate() {
                    assert_eq!(
                        a[1].to_f64(F32),
                        want,
                        "rank {r} of {ranks}, N={n}, {target}"
                    );
                    // A peer's G parts together count one call.
                    assert_eq!(
                        a[2].to_f64(I32),
                        vec![flag_after(1); ranks],
                        "flags on rank {r}"
                    );
                }
            }
        }
    }
}

/// The all-gather's four transfers (push or pull, by blocks or by warps) gather the same rows,
/// two calls back to back on 1 and 3 ranks and one on 2 (where the order check keeps a clock
/// for every thread of one call: every access is checked); a pull's `X` is symmetric, so its
/// argument list is the push's.
#[test]
fn all_gather_by_every_transfer() {
    for how in [
        Transfer::PUT_BLOCK,
        Transfer::PUT_WARP,
        Transfer::GET_BLOCK,
        Transfer::GET_WARP,
    ] {
        // Two warps per block: a warp's run is half a block's.
        let lowered = all_gather_by(F32, 64, how, G_SMALL)
            .lower(Target::SM90)
            .unwrap_or_else(|d| panic!("{how:?}: {d}"));
        for ranks in [1usize, 2, 3] {
            // 37: element-wise tails; 200: more parts than 8-element units, so some are empty.
            let calls_n = if ranks == 2 { 1 } else { 2 };
            let calls: Vec<Vec<(&str, i64)>> = (1..=calls_n).map(|e| vec![("epoch", e)]).collect();
            for n in [37usize, 200] {
                let mut args: Vec<Vec<SimArg>> = (0..ranks)
                    .map(|r| all_gather_args(r, ranks, n, 1, 0.0))
                    .collect();
                let rep =
                    tl_sim::run_ranks_calls(&lowered, &mut args, &calls, &SimOptions::default())
                        .unwrap_or_else(|e| panic!("{how:?}, {ranks} ranks, N={n}: {e}"));
                assert!(rep.order_checked || ranks == 3, "{how:?}, {ranks} ranks");
                let want: Vec<f64> = (0..ranks).flat_map(|r| shard(r, n)).collect();
                for (r, a) in args.iter().enumerate() {
                    assert_eq!(
                        a[1].to_f64(F32),
                        want,
                        "{how:?}: rank {r} of {ranks}, N={n}"
                    );
                    assert_eq!(
                        a[2].to_f64(I32),
                        vec![flag_after(calls_n); ranks],
                        "{how:?}: flags on rank {r}"
                    );
                }
            }
        }
    }
}

/// A pull keeps four loads in flight per thread: the PTX of `get_block` issues four 16-byte
/// loads from the peer before the first of their stores (one load in flight pulled 204 GB/s
/// between two H100s, pushes 335), and the CUDA C++ calls the four-chunk copy.
#[test]
fn pulls_issue_four_loads_before_their_stores() {
    let k = all_gather_by(F32, 128, Transfer::GET_BLOCK, G_SMALL);
    let ptx = k.emit_ptx(Target::SM90).expect("ptx");
    let vec: Vec<&str> = ptx
        .lines()
        .map(str::trim)
        .filter(|l| l.contains("ld.global.v4.b32") || l.contains("st.global.v4.b32"))
        .collect();
    let first_store = vec
        .iter()
        .position(|l| l.contains("st.global"))
        .expect("16-byte stores");
    assert_eq!(
        first_store,
        4,
        "loads and stores interleave:\n{}",
        vec.join("\n")
    );
    assert!(vec[4..8].iter().all(|l| l.contains("st.global")), "{vec:?}");
    let src = k.emit_general(Target::SM90).expect("CUDA C++");
    assert!(src.contains("tl_vec_copy_x4_16("), "{src}");
}

/// A warp copy in a block that is not whole warps is refused at its line, not run with a
/// partial warp that would skip or repeat chunks.
#[test]
fn warp_copies_need_whole_warps() {
    let e = all_gather_by(F32, 48, Transfer::PUT_WARP, 4)
        .lower(Target::SM90)
        .expect_err("48 threads");
    assert!(e.to_string().contains("needs whole warps"), "{e}");
    assert!(all_gather_by(F32, 64, Transfer::GET_WARP, 4)
        .lower(Target::SM90)
        .is_ok());
}

/// The second call (epoch 2) works on flags the first left at one call's count, without a
/// reset.
#[test]
fn all_gather_epochs_need_no_reset() {
    let k = all_gather(F32, 32);
    let lowered = k.lower(Target::SM90).expect("lower");
    let mut args: Vec<Vec<SimArg>> = (0..2)
        .map(|r| all_gather_args(r, 2, 16, 2, flag_after(1)))
        .collect();
    tl_sim::run_ranks(&lowered, &mut args, &SimOptions::default()).expect("epoch 2");
    assert_eq!(args[0][1].to_f64(F32), args[1][1].to_f64(F32));
}

/// A rank that waits for an epoch no peer signals is a deadlock, reported with the flag, the
/// comparison and the flag's value — not a hang. Here rank 0 (call 2) waits for rank 1 to
/// enter call 2 before pushing to it, and rank 1 announces call 1.
#[test]
fn a_wait_nothing_satisfies_is_a_reported_deadlock() {
    let k = all_gather(F32, 32);
    let lowered = k.lower(Target::SM90).expect("lower");
    // Rank 1 signals epoch 1 while rank 0 waits for epoch 2.
    let mut args = vec![
        all_gather_args(0, 2, 8, 2, 0.0),
        all_gather_args(1, 2, 8, 1, 0.0),
    ];
    let e = tl_sim::run_ranks(&lowered, &mut args, &SimOptions::default())
        .expect_err("rank 0 cannot finish");
    let msg = e.to_string();
    assert!(matches!(e, SimError::SignalDeadlock { .. }), "{msg}");
    assert!(
        msg.contains("rank 0")
            && msg.contains("`READY`[1] on rank 0 >= 2 (it is 1)")
            && msg.contains(&format!(
                "`FLAGS`[0] on rank 0 >= {} (it is {})",
                flag_after(2),
                flag_after(1)
            )),
        "{msg}"
    );
    // Blocks stuck alike make one line: the G that push to rank 1 wait at the handshake.
    assert!(
        msg.contains(&format!(
            "rank 0 {G} blocks ([0, 1, 0], [1, 1, 0], [2, 1, 0], …):"
        )),
        "{msg}"
    );
    assert!(
        msg.matches("; ").count() < 4,
        "one line per kind of wait: {msg}"
    );
}

#[test]
fn rank_arguments_are_checked() {
    let k = all_gather(F32, 32);
    let lowered = k.lower(Target::SM90).expect("lower");
    let mut args = vec![
        all_gather_args(0, 2, 8, 1, 0.0),
        all_gather_args(0, 2, 8, 1, 0.0),
    ];
    let e =
        tl_sim::run_ranks(&lowered, &mut args, &SimOptions::default()).expect_err("two rank 0s");
    assert!(
        e.to_string()
            .contains("rank 1 of 2: its `rank` argument must be 1"),
        "{e}"
    );
    let mut bad = vec![
        all_gather_args(0, 2, 8, 1, 0.0),
        all_gather_args(1, 2, 9, 1, 0.0),
    ];
    let e =
        tl_sim::run_ranks(&lowered, &mut bad, &SimOptions::default()).expect_err("sizes differ");
    assert!(matches!(e, SimError::SymmetricMismatch { .. }), "{e}");
}

/// A store to a rank past the last is caught at the access.
#[test]
fn a_peer_that_does_not_exist_is_an_error() {
    let k = Kernel::build("bad_peer", |k| {
        let flags = k.symmetric("F", [4], I32);
        k.launch([1], 32, |t, [_]| {
            let r = t.rank();
            t.st(
                flags.at([0]),
                Some(r + 1),
                1,
                MemSem::Relaxed,
                MemScope::Sys,
            );
        });
    });
    let lowered = k.lower(Target::SM90).expect("lower");
    let mut args = vec![vec![
        SimArg::zeros(I32, &[4]),
        SimArg::Int(0),
        SimArg::Int(1),
        SimArg::Int(0),
    ]];
    let e =
        tl_sim::run_ranks(&lowered, &mut args, &SimOptions::default()).expect_err("rank 1 of 1");
    assert!(
        matches!(
            e,
            SimError::BadRank {
                rank: 1,
                ranks: 1,
                ..
            }
        ),
        "{e}"
    );
}

/// Naming a peer for a buffer outside the symmetric heap is refused when the kernel is built.
#[test]
fn a_peer_access_needs_a_symmetric_buffer() {
    let k = Kernel::build("not_symmetric", |k| {
        let x = k.inout("X", [4], I32);
        k.distributed();
        k.launch([1], 32, |t, [_]| {
            t.signal(x.at([0]), Expr::int(0), 1, SignalOp::Add);
        });
    });
    let e = k.verify().expect_err("X is not symmetric").to_string();
    assert!(
        e.contains("not a symmetric buffer") && e.contains("k.symmetric"),
        "{e}"
    );
}

/// The CPU backend has no peers: a distributed kernel is refused with a clear error.
#[test]
fn the_cpu_backend_refuses_distributed_kernels() {
    let k = all_gather(F32, 32);
    let e = k
        .lower(Target::Cpu)
        .expect_err("no peers on the CPU")
        .to_string();
    assert!(e.contains("multi-rank") || e.contains("distributed"), "{e}");
}

/// The all-gather's CUDA C++ compiles (NVRTC, sm_90a and sm_80) into the memory-model
/// instructions the protocol needs: the signal is a release reduction (add) at system scope
/// into the peer's flag, the wait an acquire load at system scope in a loop. (The PTX printer does not
/// cover multi-rank kernels yet; they take the CUDA C++ path, which says so.)
#[test]
fn all_gather_compiles_to_release_and_acquire_at_system_scope() {
    if tl_nvrtc::testing::nvrtc_or_skip("all_gather_compiles_to_release_and_acquire").is_none() {
        return;
    }
    // The push and, through the other side of the unrolled copy, the pull.
    for (k, target) in [
        all_gather(F32, 128),
        all_gather_by(F32, 128, Transfer::GET_WARP, G_SMALL),
    ]
    .iter()
    .flat_map(|k| TARGETS.map(|t| (k, t)))
    {
        let src = k
            .emit_general(target)
            .unwrap_or_else(|d| panic!("{target}: {d}"));
        assert!(src.contains("tl_peer("), "{src}");
        // The counters compare as serial numbers (wrap-safe).
        assert!(src.contains("tl_wait_counter_ge_sys_s32("), "{src}");
        let opts = tl_nvrtc::CompileOptions {
            resource_usage: true,
            ..Default::default()
        };
        let c = tl_nvrtc::compile(&src, &target.arch(), &opts)
            .unwrap_or_else(|e| panic!("{target}: {e}"));
        let ptx = c.ptx();
        for want in ["red.release.sys.global.add", "ld.acquire.sys.global.b32"] {
            assert!(ptx.contains(want), "{target}: no `{want}` in\n{ptx}");
        }
        assert!(c.warnings().is_empty(), "{target}: {:?}", c.warnings());
        println!("all_gather {target}: {:?}", c.functions);
    }
}

/// The AMD backend does not cover multi-rank kernels and says so instead of printing wrong
/// code.
#[test]
fn amd_targets_refuse_multi_rank_kernels() {
    let k = all_gather(F32, 64);
    let e = k.emit(Target::GFX950).expect_err("no AMD multi-rank path");
    assert!(e.to_string().contains("NVIDIA targets only"), "{e}");
}

/// The PTX printer (the default NVIDIA path) prints the memory-model instructions itself, and
/// nvJitLink assembles the result for sm_90a and sm_80 without spills.
#[test]
fn multi_rank_kernels_print_as_ptx_and_assemble() {
    if tl_nvrtc::testing::nvrtc_or_skip("multi_rank_kernels_print_as_ptx_and_assemble").is_none() {
        return;
    }
    for (k, wants) in [
        (
            all_gather(F32, 128),
            &[
                "red.release.sys.global.add.u32",
                "ld.acquire.sys.global.b32",
                // The counter waits: the wrapping difference against zero.
                "sub.s32",
                "setp.ge.s32",
            ][..],
        ),
        (
            gather_sum(true),
            &[
                "st.release.sys.global.b32",
                "ld.acquire.sys.global.b32",
                "setp.eq.s32",
            ][..],
        ),
        (
            tilelang::kernels::dist::ag_gemm(
                BF16,
                tilelang::kernels::dist::AgGemmConfig::tiles(128, 128, 64, 3, 256),
            ),
            &[
                "red.release.sys.global.add.u32",
                "ld.acquire.sys.global.b32",
                "setp.ge.s32",
            ][..],
        ),
        (
            tilelang::kernels::dist::gemm_rs(
                BF16,
                tilelang::kernels::dist::AgGemmConfig::tiles(128, 128, 64, 3, 256),
            ),
            &[
                "red.release.sys.global.add.u32",
                "ld.acquire.sys.global.b32",
            ][..],
        ),
        (
            tilelang::kernels::dist::all_gather_by(
                F32,
                128,
                tilelang::kernels::dist::Transfer::GET_WARP,
                64,
            ),
            &[
                "red.release.sys.global.add.u32",
                "ld.acquire.sys.global.b32",
                "setp.ge.s32",
            ][..],
        ),
        (
            tilelang::kernels::dist::all_reduce(256, 256),
            &["ld.relaxed.sys.global.b32", "st.release.sys.global.b32"][..],
        ),
        (
            tilelang::kernels::dist::moe_dispatch(BF16, 256, 32),
            &[
                "st.relaxed.sys.global.b32",
                "st.release.sys.global.b32",
                "ld.global.v4.b32",
            ][..],
        ),
        (
            tilelang::kernels::dist::moe_dispatch_dedup(BF16, 256, 32),
            &[
                "st.relaxed.sys.global.b32",
                "st.release.sys.global.b32",
                "ld.global.v4.b32",
            ][..],
        ),
        (
            tilelang::kernels::dist::moe_combine(BF16, 256),
            &["st.release.sys.global.b32", "ld.acquire.sys.global.b32"][..],
        ),
        (
            tilelang::kernels::dist::all_reduce_two_shot(256, 256),
            &["ld.relaxed.sys.global.b32", "st.release.sys.global.b32"][..],
        ),
        (
            block_exchange(),
            &[
                "atom.release.gpu.global.add.u32",
                "ld.acquire.gpu.global.b32",
            ][..],
        ),
    ] {
        for target in TARGETS {
            let ptx = k
                .emit_ptx(target)
                .unwrap_or_else(|e| panic!("{} {target}: {e}", k.name()));
            if k.name() == "ag_gemm" && target == Target::SM90 {
                // The consumer's GEMM takes the warpgroup MMAs and loads the gathered rows by
                // TMA, after a proxy fence: TMA reads through the async proxy, which the
                // acquire of the rows' signal does not order.
                assert!(ptx.contains("wgmma.mma_async"), "no wgmma in\n{ptx}");
                assert!(ptx.contains("cp.async.bulk.tensor"), "no TMA in\n{ptx}");
                let fence = ptx
                    .find("fence.proxy.async.global")
                    .expect("no proxy fence");
                let tma = ptx.find("cp.async.bulk.tensor").unwrap_or(0);
                let wait = ptx.find("ld.acquire.sys.global").unwrap_or(usize::MAX);
                assert!(
                    wait < fence && fence < tma,
                    "acquire, fence, TMA out of order"
                );
            }
            for want in wants {
                assert!(
                    ptx.contains(want),
                    "{} {target}: no `{want}` in\n{ptx}",
                    k.name()
                );
            }
            let opts = tl_nvrtc::CheckOptions::default();
            match tl_nvrtc::check_with(&ptx, &target.arch(), &opts) {
                Ok(r) => println!("{} {target}: {r}", k.name()),
                Err(e) => panic!("{} {target}: {e}\n{ptx}", k.name()),
            }
        }
    }
}

/// Gather every rank's `X` into the symmetric `OUT`, then sum its rows into `Y` — with the
/// barrier between the block's puts and its signal (`ordered`), or without it, when the signal
/// releases only the signalling thread's own puts.
const GATHER_N: i64 = 40;

fn gather_sum(ordered: bool) -> Kernel {
    Kernel::build("gather_sum", |k| {
        let (r, n) = (k.dim("R"), Expr::int(GATHER_N));
        let x = k.input("X", [&n], F32);
        let out = k.symmetric("OUT", [&r, &n], F32);
        let flags = k.symmetric("FLAGS", [&r], I32);
        let y = k.output("Y", [&n], F32);
        let d = k.distributed();
        let threads = 32;
        k.launch([1], threads, |t, [_]| {
            t.serial(&d.num_ranks, |t, p| {
                t.put_block(x.at([0]), out.at([d.rank.clone(), Expr::int(0)]), &n, p);
            });
            if ordered {
                t.sync_threads();
            }
            let tid = t.thread_idx();
            t.if_(tid.eq_(0), |t| {
                t.serial(&d.num_ranks, |t, p| {
                    t.signal(flags.at([d.rank.clone()]), p, 1, SignalOp::Set);
                });
                t.serial(&d.num_ranks, |t, p| {
                    t.wait(flags.at([p]), tilelang::ir::CmpOp::Eq, 1);
                });
            });
            t.sync_threads();
            // Each thread sums its elements over the ranks' rows.
            t.parallel([GATHER_N], |t, [e]| {
                t.store(&y, [e.clone()], Expr::float(0.0));
                t.serial(&d.num_ranks, |t, p| {
                    t.store(&y, [e.clone()], y.at([e.clone()]) + out.at([p, e.clone()]));
                });
            });
        });
    })
}

fn gather_sum_args(r: usize, ranks: usize, n: usize) -> Vec<SimArg> {
    vec![
        SimArg::tensor(F32, &[n], &shard(r, n)),
        SimArg::tensor(F32, &[ranks, n], &vec![f64::NAN; ranks * n]),
        SimArg::zeros(I32, &[ranks]),
        SimArg::tensor(F32, &[n], &vec![f64::NAN; n]),
        SimArg::Int(r as i64),
        SimArg::Int(ranks as i64),
        SimArg::Int(0),
    ]
}

/// With the barrier, every rank reads every peer's rows after acquiring their signals, and the
/// sums are right; the memory-order check ran.
#[test]
fn gathered_rows_read_after_the_signal_are_ordered() {
    let lowered = gather_sum(true).lower(Target::SM90).expect("lower");
    for ranks in [2usize, 3] {
        let n = GATHER_N as usize;
        let mut args: Vec<Vec<SimArg>> = (0..ranks).map(|r| gather_sum_args(r, ranks, n)).collect();
        let rep = tl_sim::run_ranks(&lowered, &mut args, &SimOptions::default())
            .unwrap_or_else(|e| panic!("{ranks} ranks: {e}"));
        assert!(rep.order_checked);
        let want: Vec<f64> = (0..n)
            .map(|i| (0..ranks).map(|r| shard(r, n)[i]).sum())
            .collect();
        for a in &args {
            assert_eq!(a[3].to_f64(F32), want);
        }
    }
}

/// Without the barrier, thread 0's release covers only its own puts: a peer that reads the
/// rows other threads put reads data nothing orders — on a GPU it may still be in flight. The
/// order check reports it.
#[test]
fn a_signal_before_the_block_barrier_is_an_unordered_read() {
    let lowered = gather_sum(false).lower(Target::SM90).expect("lower");
    let mut args: Vec<Vec<SimArg>> = (0..2).map(|r| gather_sum_args(r, 2, 40)).collect();
    let e =
        tl_sim::run_ranks(&lowered, &mut args, &SimOptions::default()).expect_err("unordered read");
    let msg = e.to_string();
    assert!(matches!(e, SimError::UnorderedAccess { .. }), "{msg}");
    // Which report comes first depends on the interleaving: a read of rows already put but
    // not ordered (read after a write), or a put landing after a read it is not ordered
    // after (write after a read).
    assert!(
        msg.contains("`OUT`") && msg.contains("unordered access"),
        "{msg}"
    );
    println!("{msg}");
}

/// A value pattern per (rank, tensor), small integers times a power of two so that bf16 and
/// f32 sums are exact.
fn pattern(seed: usize, len: usize) -> Vec<f64> {
    (0..len)
        .map(|i| (((i * 7 + seed * 13) % 9) as f64 - 4.0) * 0.25)
        .collect()
}

fn ag_gemm_args(
    r: usize,
    ranks: usize,
    (m, n, k): (usize, usize, usize),
    bm: usize,
    epoch: i64,
) -> Vec<SimArg> {
    let tm = m.div_ceil(bm);
    vec![
        SimArg::tensor(BF16, &[m, k], &pattern(r, m * k)),
        SimArg::tensor(BF16, &[n, k], &pattern(100 + r, n * k)),
        SimArg::tensor(BF16, &[ranks, m, k], &vec![f64::NAN; ranks * m * k]),
        SimArg::tensor(F32, &[ranks, m, n], &vec![f64::NAN; ranks * m * n]),
        SimArg::tensor(I32, &[ranks, tm], &vec![flag_after(epoch - 1); ranks * tm]),
        SimArg::zeros(I32, &[ranks]),
        SimArg::Int(epoch),
        SimArg::Int(r as i64),
        SimArg::Int(ranks as i64),
        SimArg::Int(0),
    ]
}

/// All-gather + GEMM on 1, 2 and 3 ranks at sizes that are not multiples of the tiles: every
/// rank's `C[s]` equals `A_s · B_rᵀ` computed on one device (the f64 reference), and the
/// memory-order check finds every tile's reads ordered after the shard's signals.
#[test]
fn ag_gemm_matches_the_single_device_gemm() {
    use tilelang::kernels::dist::{ag_gemm, AgGemmConfig};
    use tilelang::kernels::reference;
    let cfg = AgGemmConfig::tiles(64, 64, 32, 2, 128);
    let k = ag_gemm(BF16, cfg);
    for target in TARGETS {
        let lowered = k.lower(target).unwrap_or_else(|d| panic!("{target}: {d}"));
        for (ranks, (m, n, kk)) in [(1usize, (64, 64, 64)), (2, (70, 72, 40)), (3, (40, 64, 32))] {
            let mut args: Vec<Vec<SimArg>> = (0..ranks)
                .map(|r| ag_gemm_args(r, ranks, (m, n, kk), 64, 1))
                .collect();
            let rep = tl_sim::run_ranks(&lowered, &mut args, &SimOptions::default())
                .unwrap_or_else(|e| panic!("{target}, {ranks} ranks, {m}x{n}x{kk}: {e}"));
            for (r, a) in args.iter().enumerate() {
                let b = a[1].to_f64(BF16);
                let c = a[3].to_f64(F32);
                for s in 0..ranks {
                    let a_s = pattern(s, m * kk);
                    let want = reference::gemm(&a_s, &b, m, n, kk, false, true);
                    let got = &c[s * m * n..(s + 1) * m * n];
                    assert_eq!(got, &want[..], "{target}: rank {r}'s C[{s}], {ranks} ranks");
                }
            }
            println!(
                "ag_gemm {target} {ranks} ranks {m}x{n}x{kk}: order checked {}",
                rep.order_checked
            );
        }
    }
}

/// All-gather + GEMM calls of changing shapes on one `FLAGS` (three row tiles' worth) and
/// `READY`: `M` of two, three, then one row tile, `N` of two, four, then one column tile (so
/// two, four, then one producer per flag). Each call completes every flag's count — the
/// producers' shares add up to one call, and row tiles past the call's `M` get a whole call
/// from one block — so the next call, taller or wider, waits for its own rows only.
#[test]
fn ag_gemm_calls_may_change_shape_on_the_same_flags() {
    use tilelang::kernels::dist::{ag_gemm, AgGemmConfig};
    use tilelang::kernels::reference;
    let lowered = ag_gemm(BF16, AgGemmConfig::tiles(64, 64, 32, 2, 128))
        .lower(Target::SM90)
        .expect("lower");
    let ranks = 2usize;
    let mut flags: Vec<SimArg> = (0..ranks)
        .map(|_| SimArg::zeros(I32, &[ranks, 3]))
        .collect();
    let mut ready: Vec<SimArg> = (0..ranks).map(|_| SimArg::zeros(I32, &[ranks])).collect();
    for (epoch, (m, n, kk)) in [
        (1i64, (70usize, 72usize, 40usize)),
        (2, (150, 200, 32)),
        (3, (40, 64, 48)),
    ] {
        let mut args: Vec<Vec<SimArg>> = (0..ranks)
            .map(|r| {
                let mut a = ag_gemm_args(r, ranks, (m, n, kk), 64, epoch);
                a[4] = flags[r].clone();
                a[5] = ready[r].clone();
                a
            })
            .collect();
        let rep = tl_sim::run_ranks(&lowered, &mut args, &SimOptions::default())
            .unwrap_or_else(|e| panic!("call {epoch}, {m}x{n}x{kk}: {e}"));
        // Call 2's 48 blocks are more threads than the order check keeps clocks for.
        assert!(rep.order_checked || epoch == 2, "call {epoch}");
        for (r, a) in args.iter().enumerate() {
            let (b, c) = (a[1].to_f64(BF16), a[3].to_f64(F32));
            for s in 0..ranks {
                let want = reference::gemm(&pattern(s, m * kk), &b, m, n, kk, false, true);
                assert_eq!(
                    &c[s * m * n..(s + 1) * m * n],
                    &want[..],
                    "call {epoch}: rank {r}'s C[{s}]"
                );
            }
            assert_eq!(
                a[4].to_f64(I32),
                vec![flag_after(epoch); ranks * 3],
                "call {epoch}: every flag of rank {r} counts the call"
            );
        }
        for r in 0..ranks {
            flags[r] = args[r][4].clone();
            ready[r] = args[r][5].clone();
        }
    }
}

/// With a bf16 `C` every element is the f32 sum rounded once to bf16, at the store.
#[test]
fn ag_gemm_with_a_bf16_output_rounds_each_element_once() {
    use tilelang::kernels::dist::{ag_gemm_out, AgGemmConfig};
    use tilelang::kernels::reference;
    let k = ag_gemm_out(BF16, AgGemmConfig::tiles(64, 64, 32, 2, 128), BF16);
    let (ranks, m, n, kk) = (2usize, 70usize, 72usize, 40usize);
    let lowered = k.lower(Target::SM90).expect("lower");
    let mut args: Vec<Vec<SimArg>> = (0..ranks)
        .map(|r| {
            let mut a = ag_gemm_args(r, ranks, (m, n, kk), 64, 1);
            a[3] = SimArg::tensor(BF16, &[ranks, m, n], &vec![f64::NAN; ranks * m * n]);
            a
        })
        .collect();
    tl_sim::run_ranks(&lowered, &mut args, &SimOptions::default()).expect("run");
    for (r, a) in args.iter().enumerate() {
        let b = a[1].to_f64(BF16);
        let c = a[3].to_f64(BF16);
        for s in 0..ranks {
            let want: Vec<f64> = reference::gemm(&pattern(s, m * kk), &b, m, n, kk, false, true)
                .into_iter()
                .map(|v| half::bf16::from_f64(v).to_f64())
                .collect();
            assert_eq!(
                &c[s * m * n..(s + 1) * m * n],
                &want[..],
                "rank {r}'s C[{s}]"
            );
        }
    }
}

/// The variant GPU launches with aligned sizes run: the consumer loads the gathered rows of
/// `AG` by TMA, so besides the acquire of their signal it needs a proxy fence; the compiler
/// puts one before the pipelined loop, and the simulator (which checks TMA loads of bytes
/// written in the kernel for it) finds every load fenced.
#[test]
fn ag_gemm_aligned_variant_fences_its_tma_loads_of_gathered_rows() {
    use tilelang::kernels::dist::{ag_gemm, AgGemmConfig};
    use tilelang::kernels::reference;
    let k = ag_gemm(BF16, AgGemmConfig::tiles(64, 64, 32, 2, 128));
    let lowered = k.lower_aligned(Target::SM90).expect("lower");
    let dump = format!("{lowered:?}");
    assert!(
        dump.contains("fence_proxy_async_global") && dump.contains("tma_load"),
        "no TMA or proxy fence"
    );
    // M = 256: four row tiles, so FLAGS' rows are whole 16-byte units (an aligned size).
    let (ranks, m, n, kk) = (2usize, 256usize, 64usize, 64usize);
    let mut args: Vec<Vec<SimArg>> = (0..ranks)
        .map(|r| ag_gemm_args(r, ranks, (m, n, kk), 64, 1))
        .collect();
    let rep = tl_sim::run_ranks(&lowered, &mut args, &SimOptions::default()).expect("run");
    assert!(rep.order_checked);
    // The CUDA C++ of this variant (TMA with mma.sync, no wgmma header) declares the fence.
    if tl_nvrtc::testing::nvrtc_or_skip("ag_gemm_aligned_variant_fences_its_tma_loads").is_some() {
        let src = k.emit(Target::SM90).expect("CUDA C++");
        assert!(src.contains("tl_fence_proxy_async_global()"), "{src}");
        tl_nvrtc::compile(&src, "sm_90a", &tl_nvrtc::CompileOptions::default())
            .unwrap_or_else(|e| panic!("{e}"));
    }
    for a in &args {
        let (b, c) = (a[1].to_f64(BF16), a[3].to_f64(F32));
        for s in 0..ranks {
            let want = reference::gemm(&pattern(s, m * kk), &b, m, n, kk, false, true);
            assert_eq!(&c[s * m * n..(s + 1) * m * n], &want[..]);
        }
    }
}

/// Flags left one contributor's share ahead (a stale epoch): each consumer passes its wait one
/// producer early and reads rows nothing ordered after their writes. The simulator reports
/// the first such read, on both targets.
#[test]
fn ag_gemm_with_stale_flags_reads_unordered_rows() {
    use tilelang::kernels::dist::{ag_gemm, AgGemmConfig};
    let k = ag_gemm(BF16, AgGemmConfig::tiles(64, 64, 32, 2, 128));
    for target in TARGETS {
        let lowered = k.lower(target).expect("lower");
        let mut args: Vec<Vec<SimArg>> = (0..2)
            .map(|r| {
                let mut a = ag_gemm_args(r, 2, (70, 72, 40), 64, 1);
                // Two producers per row tile: whichever arrives first completes the count.
                let stale = (ARRIVALS_PER_CALL - 1) as f64;
                a[4] = SimArg::tensor(I32, &[2, 2], &[stale; 4]);
                a
            })
            .collect();
        let e = tl_sim::run_ranks(&lowered, &mut args, &SimOptions::default())
            .expect_err("unordered rows");
        assert!(
            matches!(e, SimError::UnorderedAccess { .. }),
            "{target}: {e}"
        );
        assert!(e.to_string().contains("`AG`"), "{target}: {e}");
    }
}

/// One-shot all-reduce on 1, 2 and 4 ranks, twice in a row on the same barrier slots (the
/// second call's rounds follow the first's): every rank's `Y` is the sum of all ranks' `X`.
#[test]
fn all_reduce_sums_every_rank() {
    use tilelang::kernels::dist::all_reduce;
    let (block, threads) = (64, 64);
    let k = all_reduce(block, threads);
    for target in TARGETS {
        let lowered = k.lower(target).unwrap_or_else(|d| panic!("{target}: {d}"));
        for ranks in [1usize, 2, 4] {
            let n: usize = 150;
            let g = n.div_ceil(block as usize);
            let mut args: Vec<Vec<SimArg>> = (0..ranks)
                .map(|r| {
                    vec![
                        SimArg::tensor(F32, &[n], &shard(r, n)),
                        SimArg::tensor(F32, &[n], &vec![f64::NAN; n]),
                        SimArg::zeros(I32, &[g, ranks]),
                        SimArg::Int(r as i64),
                        SimArg::Int(ranks as i64),
                        SimArg::Int(0),
                    ]
                })
                .collect();
            let want: Vec<f64> = (0..n)
                .map(|i| (0..ranks).map(|r| shard(r, n)[i]).sum())
                .collect();
            for call in 0..2 {
                tl_sim::run_ranks(&lowered, &mut args, &SimOptions::default())
                    .unwrap_or_else(|e| panic!("{target}, {ranks} ranks, call {call}: {e}"));
                for (r, a) in args.iter().enumerate() {
                    assert_eq!(
                        a[1].to_f64(F32),
                        want,
                        "{target}: rank {r} of {ranks}, call {call}"
                    );
                }
            }
            // Both barriers of both calls: every slot holds round 4.
            assert_eq!(args[0][2].to_f64(I32), vec![4.0; g * ranks]);
        }
    }
}

/// GEMM + reduce-scatter on 1, 2 and 3 ranks, row blocks not a multiple of the tile: rank
/// `q`'s `C` equals `Σ_r A_r[q] · B_rᵀ` computed on one device, with the order checked.
#[test]
fn gemm_rs_matches_the_single_device_sum() {
    use tilelang::kernels::dist::{gemm_rs, AgGemmConfig};
    use tilelang::kernels::reference;
    let (bm, bn) = (64usize, 64usize);
    let k = gemm_rs(BF16, AgGemmConfig::tiles(bm as i64, bn as i64, 32, 2, 128));
    for target in TARGETS {
        let lowered = k.lower(target).unwrap_or_else(|d| panic!("{target}: {d}"));
        for (ranks, (mq, n, kk)) in [
            (1usize, (64usize, 64usize, 32usize)),
            (2, (70, 72, 48)),
            (3, (40, 64, 32)),
        ] {
            let mut args: Vec<Vec<SimArg>> = (0..ranks)
                .map(|r| gemm_rs_args(r, ranks, (mq, n, kk), (bm, bn)))
                .collect();
            let rep = tl_sim::run_ranks(&lowered, &mut args, &SimOptions::default())
                .unwrap_or_else(|e| panic!("{target}, {ranks} ranks, {mq}x{n}x{kk}: {e}"));
            assert!(rep.order_checked);
            for (q, a) in args.iter().enumerate() {
                let mut want = vec![0.0; mq * n];
                for r in 0..ranks {
                    let a_r = pattern(r, ranks * mq * kk);
                    let b_r = pattern(50 + r, n * kk);
                    let p = reference::gemm(
                        &a_r[q * mq * kk..(q + 1) * mq * kk],
                        &b_r,
                        mq,
                        n,
                        kk,
                        false,
                        true,
                    );
                    want.iter_mut().zip(p).for_each(|(w, x)| *w += x);
                }
                assert_eq!(
                    a[4].to_f64(F32),
                    want,
                    "{target}: rank {q}'s C, {ranks} ranks"
                );
            }
        }
    }
}

/// Each block writes a value, passes a barrier of all blocks, and reads its neighbour's.
fn block_exchange() -> Kernel {
    Kernel::build("block_exchange", |k| {
        let g = k.dim("G");
        let w = k.inout("W", [&g], I32);
        let y = k.output("Y", [&g], I32);
        let counter = k.inout("COUNTER", [1], I32);
        k.launch([g.clone()], 64, |t, [bx]| {
            t.store(&w, [bx.clone()], &bx * 10 + 1);
            t.barrier_blocks(counter.at([0]), g.clone());
            t.store(&y, [bx.clone()], w.at([floormod(&bx + 1, &g)]));
        });
    })
}

/// A barrier of all blocks of a launch (the simulator runs them at once): every block reads
/// its neighbour's value, on two launches over the same counter. The CPU backend, which runs
/// blocks one by one, refuses the kernel instead of spinning forever.
#[test]
fn barrier_blocks_orders_every_block() {
    let k = block_exchange();
    let e = k
        .lower(Target::Cpu)
        .expect_err("the CPU cannot wait for other blocks");
    assert!(
        e.to_string().contains("runs a launch's blocks one by one"),
        "{e}"
    );
    for target in TARGETS {
        let lowered = k.lower(target).unwrap_or_else(|d| panic!("{target}: {d}"));
        let g = 5usize;
        let mut args = vec![
            SimArg::zeros(I32, &[g]),
            SimArg::zeros(I32, &[g]),
            SimArg::zeros(I32, &[1]),
        ];
        for call in 1..=2 {
            tl_sim::run(&lowered, &mut args, &SimOptions::default())
                .unwrap_or_else(|e| panic!("{target}, call {call}: {e}"));
            let want: Vec<f64> = (0..g).map(|b| (((b + 1) % g) * 10 + 1) as f64).collect();
            assert_eq!(args[1].to_f64(I32), want, "{target}, call {call}");
            // The round number above bit 20, no arrivals left over.
            assert_eq!(args[2].to_f64(I32), vec![(call << 20) as f64]);
        }
    }
}

/// The block barrier's counter needs no reset and survives wrap-around: launches of 5, then
/// 3, then 7 blocks share one counter that starts two rounds below 2^31 and crosses it (as
/// an i32 it goes negative); every launch still orders every block.
#[test]
fn barrier_blocks_wraps_around_and_takes_any_grid() {
    let k = block_exchange();
    for target in TARGETS {
        let lowered = k.lower(target).unwrap_or_else(|d| panic!("{target}: {d}"));
        let start = i32::MAX as i64 + 1 - (2 << 20);
        let mut counter = SimArg::tensor(I32, &[1], &[start as f64]);
        for (call, g) in [5usize, 3, 7, 4].into_iter().enumerate() {
            let mut args = vec![SimArg::zeros(I32, &[g]), SimArg::zeros(I32, &[g]), counter];
            tl_sim::run(&lowered, &mut args, &SimOptions::default())
                .unwrap_or_else(|e| panic!("{target}, call {call} of {g} blocks: {e}"));
            let want: Vec<f64> = (0..g).map(|b| (((b + 1) % g) * 10 + 1) as f64).collect();
            assert_eq!(args[1].to_f64(I32), want, "{target}, call {call}");
            let rounds = start + ((call as i64 + 1) << 20);
            assert_eq!(
                args[2].to_f64(I32),
                vec![rounds as i32 as f64],
                "{target}, call {call}"
            );
            counter = args.remove(2);
        }
    }
}

/// The flags of the all-gather + GEMM wrap around: 2^30 per call, so call 2 passes 2^31 and
/// call 4 wraps to 0, and the consumers still wait for their rows (a plain signed comparison
/// lets the waits of call 2 through at once, before the rows arrive, which the order check
/// reports — tested by running the same calls with the comparison plain).
#[test]
fn ag_gemm_counters_wrap_around() {
    use tilelang::kernels::dist::{ag_gemm, AgGemmConfig};
    let k = ag_gemm(BF16, AgGemmConfig::tiles(64, 64, 32, 2, 128));
    let lowered = k.lower(Target::SM90).expect("lower");
    let epoch = 2i64;
    let make = || -> Vec<Vec<SimArg>> {
        (0..2)
            .map(|r| ag_gemm_args(r, 2, (40, 128, 32), 64, epoch))
            .collect()
    };
    let calls = [vec![("epoch", epoch)], vec![("epoch", epoch + 1)]];
    let mut once = make();
    tl_sim::run_ranks(&lowered, &mut once, &SimOptions::default()).expect("one call");
    let mut args = make();
    let rep = tl_sim::run_ranks_calls(&lowered, &mut args, &calls, &SimOptions::default())
        .expect("calls 2 and 3");
    assert!(rep.order_checked);
    for (a, b) in args.iter().zip(&once) {
        assert_eq!(a[3], b[3], "C");
        let past = flag_after(epoch + 1);
        assert_eq!(a[4].to_f64(I32), vec![past; 2], "the flags wrapped");
    }
    // The same waits compared as plain signed values.
    let plain = {
        use tilelang::ir::{ExprKind, Intrinsic, Stmt, StmtKind};
        let body = lowered.body.map_post(&mut |s: Stmt| {
            if let StmtKind::Eval(e) = &s.kind {
                if let ExprKind::Call(Intrinsic::WaitUntil { cmp, scope, .. }, a) = e.kind() {
                    let op = Intrinsic::WaitUntil {
                        cmp: *cmp,
                        scope: *scope,
                        wrapping: false,
                    };
                    return Stmt::new(StmtKind::Eval(Expr::call(op, a.clone(), e.dtype())), s.span);
                }
            }
            s
        });
        lowered.with_body(body)
    };
    let e = tl_sim::run_ranks_calls(&plain, &mut make(), &calls, &SimOptions::default())
        .expect_err("plain comparisons pass before the rows arrive");
    assert!(matches!(e, SimError::UnorderedAccess { .. }), "{e}");
}

/// The MoE tests' routing: choice `j` of rank `r`'s token `t` goes to rank `(7t + 3r + 5j) mod
/// R` for expert `4·dest + (t + j) mod 4`, weighted `(j + 1)/4`; tokens are `pattern(r, ·)`.
struct MoeRoute {
    ranks: usize,
    tokens: usize,
    h: usize,
    k: usize,
}

impl MoeRoute {
    fn x(&self, r: usize) -> Vec<f64> {
        pattern(r, self.tokens * self.h)
    }
    fn dest(&self, r: usize, t: usize, j: usize) -> usize {
        (t * 7 + r * 3 + j * 5) % self.ranks
    }
    fn expert(&self, r: usize, t: usize, j: usize) -> f64 {
        (self.dest(r, t, j) * 4 + (t + j) % 4) as f64
    }
    fn w(j: usize) -> f64 {
        0.25 * (j + 1) as f64
    }
    /// `DEST` and `EXPERT` of rank `r` (`[T, K]`).
    fn dests(&self, r: usize) -> Vec<f64> {
        let k = self.k;
        (0..self.tokens * k)
            .map(|i| self.dest(r, i / k, i % k) as f64)
            .collect()
    }
    fn experts(&self, r: usize) -> Vec<f64> {
        let k = self.k;
        (0..self.tokens * k)
            .map(|i| self.expert(r, i / k, i % k))
            .collect()
    }
    /// `moe_dispatch`'s arguments on rank `r` (capacity `cap`): this route's tokens, `SLOT`
    /// and the receive buffers poisoned, `COUNTS` zero, the given `FLAGS` and `READY`.
    fn dispatch_args(
        &self,
        r: usize,
        cap: usize,
        (flags, ready): (SimArg, SimArg),
        epoch: i64,
    ) -> Vec<SimArg> {
        let (ranks, t, h, k) = (self.ranks, self.tokens, self.h, self.k);
        vec![
            SimArg::tensor(F32, &[t, h], &self.x(r)),
            SimArg::tensor(I32, &[t, k], &self.dests(r)),
            SimArg::tensor(I32, &[t, k], &self.experts(r)),
            SimArg::tensor(I32, &[t, k], &vec![-7.0; t * k]),
            SimArg::zeros(F32, &[ranks, cap, h]),
            SimArg::tensor(I32, &[ranks, cap], &vec![-1.0; ranks * cap]),
            SimArg::zeros(I32, &[ranks]),
            flags,
            ready,
            SimArg::Int(epoch),
            SimArg::Int(r as i64),
            SimArg::Int(ranks as i64),
            SimArg::Int(0),
        ]
    }
    /// Every token `t` of rank `r`'s gathered `y` is `Σ_j w_j·(2x + e_j)` over the choices
    /// whose row was kept (`slots[t, j] ≥ 0`): the tests' expert maps x to 2x + e.
    fn check_gathered(&self, r: usize, y: &[f64], slots: &[f64]) {
        let (k, h, x) = (self.k, self.h, self.x(r));
        for t in 0..self.tokens {
            let mut want = vec![0.0; h];
            for j in (0..k).filter(|&j| slots[t * k + j] >= 0.0) {
                for (c, wv) in want.iter_mut().enumerate() {
                    *wv += Self::w(j) * (2.0 * x[t * h + c] + self.expert(r, t, j));
                }
            }
            assert_eq!(&y[t * h..(t + 1) * h], &want[..], "rank {r} token {t}");
        }
    }
}

/// Combine's arguments on rank `r` of `ranks`: the expert's output rows `yr` (`[R, CAP, H]`)
/// and dispatch's `counts`, the call's first epoch.
fn moe_combine_args(
    yr: &[f64],
    counts: SimArg,
    r: usize,
    ranks: usize,
    (cap, h): (usize, usize),
) -> Vec<SimArg> {
    vec![
        SimArg::tensor(F32, &[ranks, cap, h], yr),
        counts,
        SimArg::tensor(F32, &[ranks, cap, h], &vec![f64::NAN; ranks * cap * h]),
        SimArg::zeros(I32, &[ranks]),
        SimArg::zeros(I32, &[ranks]),
        SimArg::Int(1),
        SimArg::Int(r as i64),
        SimArg::Int(ranks as i64),
        SimArg::Int(0),
    ]
}

/// Run the (single-rank) gather on `args`, its output last: that output.
fn moe_gathered(gath: &tilelang::ir::Kernel, mut args: Vec<SimArg>) -> Vec<f64> {
    tl_sim::run(gath, &mut args, &SimOptions::default()).expect("gather");
    args.last().map(|y| y.to_f64(F32)).unwrap_or_default()
}

/// Mixture-of-experts dispatch, expert, combine and gather on 2 and 3 ranks, top-2 routing
/// that overflows a destination's capacity: every rank receives exactly the rows routed to it
/// (in the sender's order, with their experts, counted, the overflow dropped); after an
/// "expert" that maps a row x of expert e to 2x + e, combine and gather give every token
/// Σ_j w_j·(2x + e_j) over its kept choices.
#[test]
fn moe_dispatch_and_combine_round_trip() {
    use tilelang::kernels::dist::{moe_combine, moe_dispatch, moe_gather};
    let disp = moe_dispatch(F32, 64, 4)
        .lower(Target::SM90)
        .expect("dispatch");
    let comb = moe_combine(F32, 32).lower(Target::SM90).expect("combine");
    let gath = moe_gather(F32, 64, 32).lower(Target::SM90).expect("gather");
    let k = 2usize;
    for (ranks, tokens, h, cap) in [(2usize, 9usize, 24usize, 6usize), (3, 10, 20, 5)] {
        let route = MoeRoute {
            ranks,
            tokens,
            h,
            k,
        };
        let (x, dest, expert, w) = (
            |r| route.x(r),
            |r, t, j| route.dest(r, t, j),
            |r, t, j| route.expert(r, t, j),
            MoeRoute::w,
        );
        let mut args: Vec<Vec<SimArg>> = (0..ranks)
            .map(|r| {
                let zeros = || SimArg::zeros(I32, &[ranks]);
                route.dispatch_args(r, cap, (zeros(), zeros()), 1)
            })
            .collect();
        // Chunks of 4 tokens: 3 blocks per destination, each starting after the rows the
        // earlier chunks routed there.
        let rep = tl_sim::run_ranks(&disp, &mut args, &SimOptions::default())
            .unwrap_or_else(|e| panic!("dispatch, {ranks} ranks: {e}"));
        assert!(rep.order_checked);
        for p in 0..ranks {
            let (recv, experts) = (args[p][4].to_f64(F32), args[p][5].to_f64(I32));
            let counts = args[p][6].to_f64(I32);
            for q in 0..ranks {
                let routed: Vec<(usize, usize)> = (0..tokens)
                    .flat_map(|t| (0..k).map(move |j| (t, j)))
                    .filter(|&(t, j)| dest(q, t, j) == p)
                    .collect();
                let kept = routed.len().min(cap);
                assert_eq!(counts[q], kept as f64, "rank {p}'s count from rank {q}");
                for (row, &(t, j)) in routed.iter().take(kept).enumerate() {
                    let got = &recv[(q * cap + row) * h..(q * cap + row + 1) * h];
                    assert_eq!(
                        got,
                        &x(q)[t * h..(t + 1) * h],
                        "rank {p} row {row} from {q}"
                    );
                    assert_eq!(experts[q * cap + row], expert(q, t, j));
                }
            }
        }
        // The expert, then combine.
        let mut cargs: Vec<Vec<SimArg>> = (0..ranks)
            .map(|r| {
                let recv = args[r][4].to_f64(F32);
                let experts = args[r][5].to_f64(I32);
                let yr: Vec<f64> = recv
                    .iter()
                    .enumerate()
                    .map(|(i, v)| 2.0 * v + experts[i / h].max(0.0))
                    .collect();
                moe_combine_args(&yr, args[r][6].clone(), r, ranks, (cap, h))
            })
            .collect();
        let rep = tl_sim::run_ranks(&comb, &mut cargs, &SimOptions::default())
            .unwrap_or_else(|e| panic!("combine, {ranks} ranks: {e}"));
        // 16 blocks per peer on 3 ranks are more threads than the order check keeps (the
        // combine's minimum).
        assert!(rep.order_checked || ranks == 3);
        for r in 0..ranks {
            let weights: Vec<f64> = (0..tokens * k).map(|i| w(i % k)).collect();
            let y = moe_gathered(
                &gath,
                vec![
                    cargs[r][2].clone(),
                    args[r][1].clone(),
                    args[r][3].clone(),
                    SimArg::tensor(F32, &[tokens, k], &weights),
                    SimArg::tensor(F32, &[tokens, h], &vec![f64::NAN; tokens * h]),
                ],
            );
            route.check_gathered(r, &y, &args[r][3].to_f64(I32));
        }
    }
}

/// MoE dispatch where the ranks hold different numbers of tokens, and the next call on the
/// same `FLAGS` and `READY` holds others again (as a batch's tokens do): each call's flags
/// count one call whatever the chunks behind them (`ARRIVALS_PER_CALL`), so every rank
/// receives exactly the rows routed to it in both calls, and no wait hangs.
#[test]
fn moe_dispatch_takes_any_token_count_per_rank_and_call() {
    use tilelang::kernels::dist::moe_dispatch;
    let disp = moe_dispatch(F32, 64, 4)
        .lower(Target::SM90)
        .expect("dispatch");
    let (ranks, h, k, cap) = (2usize, 8usize, 2usize, 32usize);
    let mut flags: Vec<SimArg> = (0..ranks).map(|_| SimArg::zeros(I32, &[ranks])).collect();
    let mut ready: Vec<SimArg> = (0..ranks).map(|_| SimArg::zeros(I32, &[ranks])).collect();
    // Tokens per rank, call by call: 3 and 1 chunks, then 1 and 4.
    for (epoch, tokens) in [(1i64, [9usize, 3]), (2, [2, 13])] {
        let routes: Vec<MoeRoute> = tokens
            .iter()
            .map(|&t| MoeRoute {
                ranks,
                tokens: t,
                h,
                k,
            })
            .collect();
        let mut args: Vec<Vec<SimArg>> = (0..ranks)
            .map(|r| routes[r].dispatch_args(r, cap, (flags[r].clone(), ready[r].clone()), epoch))
            .collect();
        tl_sim::run_ranks(&disp, &mut args, &SimOptions::default())
            .unwrap_or_else(|e| panic!("call {epoch} with {tokens:?} tokens: {e}"));
        for p in 0..ranks {
            let (recv, counts) = (args[p][4].to_f64(F32), args[p][6].to_f64(I32));
            for q in 0..ranks {
                let route = &routes[q];
                let routed: Vec<(usize, usize)> = (0..tokens[q])
                    .flat_map(|t| (0..k).map(move |j| (t, j)))
                    .filter(|&(t, j)| route.dest(q, t, j) == p)
                    .collect();
                assert_eq!(counts[q], routed.len() as f64, "call {epoch}: {p} from {q}");
                for (row, &(t, _)) in routed.iter().enumerate() {
                    assert_eq!(
                        &recv[(q * cap + row) * h..(q * cap + row + 1) * h],
                        &route.x(q)[t * h..(t + 1) * h],
                        "call {epoch}: rank {p} row {row} from {q}"
                    );
                }
            }
            assert_eq!(
                args[p][7].to_f64(I32),
                vec![flag_after(epoch); ranks],
                "call {epoch}: flags of rank {p}"
            );
        }
        for r in 0..ranks {
            flags[r] = args[r][7].clone();
            ready[r] = args[r][8].clone();
        }
    }
}

/// The deduplicating dispatch sends a token once per destination rank with all its choices
/// there (experts and weights), top-4 routing where two choices share a rank, on 2 and 3
/// ranks, overflowing a capacity: every rank receives exactly one row per (token, rank) in
/// the sender's order; after an expert side that returns Σ_j w_j·(2x + e_j) per row, combine
/// and the deduplicating gather give every token Σ_j w_j·(2x + e_j) over its kept choices.
#[test]
fn moe_dispatch_dedup_sends_a_token_once_per_rank() {
    use tilelang::kernels::dist::{moe_combine, moe_dispatch_dedup, moe_gather_dedup};
    let disp = moe_dispatch_dedup(F32, 64, 4)
        .lower(Target::SM90)
        .expect("dispatch");
    let comb = moe_combine(F32, 32).lower(Target::SM90).expect("combine");
    let gath = moe_gather_dedup(F32, 64, 32)
        .lower(Target::SM90)
        .expect("gather");
    let k = 4usize;
    for (ranks, tokens, h, cap) in [(2usize, 9usize, 24usize, 7usize), (3, 10, 20, 5)] {
        let route = MoeRoute {
            ranks,
            tokens,
            h,
            k,
        };
        let (x, dest, expert, w) = (
            |r| route.x(r),
            |r, t, j| route.dest(r, t, j),
            |r, t, j| route.expert(r, t, j),
            MoeRoute::w,
        );
        let mut args: Vec<Vec<SimArg>> = (0..ranks)
            .map(|r| {
                let (d, e) = (route.dests(r), route.experts(r));
                let wv: Vec<f64> = (0..tokens * k).map(|i| w(i % k)).collect();
                vec![
                    SimArg::tensor(F32, &[tokens, h], &x(r)),
                    SimArg::tensor(I32, &[tokens, k], &d),
                    SimArg::tensor(I32, &[tokens, k], &e),
                    SimArg::tensor(F32, &[tokens, k], &wv),
                    SimArg::tensor(I32, &[tokens, k], &vec![-7.0; tokens * k]),
                    SimArg::zeros(F32, &[ranks, cap, h]),
                    SimArg::tensor(I32, &[ranks, cap, k], &vec![-9.0; ranks * cap * k]),
                    SimArg::tensor(F32, &[ranks, cap, k], &vec![f64::NAN; ranks * cap * k]),
                    SimArg::zeros(I32, &[ranks]),
                    SimArg::zeros(I32, &[ranks]),
                    SimArg::zeros(I32, &[ranks]),
                    SimArg::Int(1),
                    SimArg::Int(r as i64),
                    SimArg::Int(ranks as i64),
                    SimArg::Int(0),
                ]
            })
            .collect();
        let rep = tl_sim::run_ranks(&disp, &mut args, &SimOptions::default())
            .unwrap_or_else(|e| panic!("dispatch, {ranks} ranks: {e}"));
        assert!(rep.order_checked || ranks == 3);
        let mut dropped_any = false;
        for p in 0..ranks {
            let recv = args[p][5].to_f64(F32);
            let (experts, weights) = (args[p][6].to_f64(I32), args[p][7].to_f64(F32));
            let counts = args[p][8].to_f64(I32);
            for q in 0..ranks {
                let routed: Vec<usize> = (0..tokens)
                    .filter(|&t| (0..k).any(|j| dest(q, t, j) == p))
                    .collect();
                let kept = routed.len().min(cap);
                dropped_any |= kept < routed.len();
                assert_eq!(counts[q], kept as f64, "rank {p}'s count from rank {q}");
                for (row, &t) in routed.iter().enumerate() {
                    let slots = args[q][4].to_f64(I32);
                    for j in (0..k).filter(|&j| dest(q, t, j) == p) {
                        let want = if row < kept { row as f64 } else { -1.0 };
                        assert_eq!(slots[t * k + j], want, "rank {q} token {t} choice {j}");
                    }
                    if row >= kept {
                        continue;
                    }
                    let at = (q * cap + row) * h;
                    assert_eq!(
                        &recv[at..at + h],
                        &x(q)[t * h..(t + 1) * h],
                        "rank {p} row {row} from {q}"
                    );
                    for j in 0..k {
                        let here = dest(q, t, j) == p;
                        let i = (q * cap + row) * k + j;
                        assert_eq!(experts[i], if here { expert(q, t, j) } else { -1.0 });
                        assert_eq!(weights[i], if here { w(j) } else { 0.0 });
                    }
                }
            }
        }
        assert!(dropped_any, "{ranks} ranks: the capacity should drop rows");
        // The expert side: one output row per received row, its choices weighted.
        let mut cargs: Vec<Vec<SimArg>> = (0..ranks)
            .map(|r| {
                let recv = args[r][5].to_f64(F32);
                let (experts, weights) = (args[r][6].to_f64(I32), args[r][7].to_f64(F32));
                let yr: Vec<f64> = recv
                    .iter()
                    .enumerate()
                    .map(|(i, v)| {
                        let row = i / h;
                        (0..k)
                            .filter(|&j| experts[row * k + j] >= 0.0)
                            .map(|j| weights[row * k + j] * (2.0 * v + experts[row * k + j]))
                            .sum()
                    })
                    .collect();
                moe_combine_args(&yr, args[r][8].clone(), r, ranks, (cap, h))
            })
            .collect();
        tl_sim::run_ranks(&comb, &mut cargs, &SimOptions::default())
            .unwrap_or_else(|e| panic!("combine, {ranks} ranks: {e}"));
        for r in 0..ranks {
            let y = moe_gathered(
                &gath,
                vec![
                    cargs[r][2].clone(),
                    args[r][1].clone(),
                    args[r][4].clone(),
                    SimArg::tensor(F32, &[tokens, h], &vec![f64::NAN; tokens * h]),
                ],
            );
            route.check_gathered(r, &y, &args[r][4].to_f64(I32));
        }
    }
}

/// A signal to another rank released at `.gpu` scope does not synchronize with its waiter on a
/// GPU: the simulator reports the pair instead of letting the data through.
#[test]
fn a_release_too_narrow_for_its_waiter_is_reported() {
    for (scope, ok) in [
        (MemScope::Gpu, false),
        (MemScope::Cta, false),
        (MemScope::Sys, true),
    ] {
        let k = Kernel::build("narrow", |k| {
            let data = k.symmetric("DATA", [4], F32);
            let flag = k.symmetric("FLAG", [1], I32);
            let d = k.distributed();
            k.launch([1], 32, |t, [_]| {
                let tid = t.thread_idx();
                let other = Expr::int(1) - d.rank.clone();
                t.if_(tid.eq_(0), |t| {
                    t.st(
                        data.at([0]),
                        Some(other.clone()),
                        5.0f64,
                        MemSem::Weak,
                        MemScope::Sys,
                    );
                    t.st(flag.at([0]), Some(other.clone()), 1, MemSem::Release, scope);
                    t.wait(flag.at([0]), tilelang::ir::CmpOp::Eq, 1);
                    let v = t.ld(data.at([0]), None, MemSem::Weak, MemScope::Sys);
                    t.st(data.at([1]), None, v, MemSem::Weak, MemScope::Sys);
                });
            });
        });
        let lowered = k.lower(Target::SM90).expect("lower");
        let mut args: Vec<Vec<SimArg>> = (0..2)
            .map(|r| {
                vec![
                    SimArg::zeros(F32, &[4]),
                    SimArg::zeros(I32, &[1]),
                    SimArg::Int(r),
                    SimArg::Int(2),
                    SimArg::Int(0),
                ]
            })
            .collect();
        let r = tl_sim::run_ranks(&lowered, &mut args, &SimOptions::default());
        match (ok, r) {
            (true, Ok(_)) => assert_eq!(args[0][0].to_f64(F32)[1], 5.0),
            (false, Err(e @ SimError::ScopeTooNarrow { .. })) => {
                assert!(e.to_string().contains("both need .sys scope"), "{e}");
            }
            (_, other) => panic!("{scope:?}: {other:?}"),
        }
    }
}

/// A barrier of all blocks needs them all resident: with room for one block fewer than the
/// grid, the simulator reports the blocks that never started instead of hanging; the
/// all-gather + GEMM, whose producers come first in launch order, finishes even with two
/// blocks resident per rank.
#[test]
fn residency_limits_are_modelled() {
    let lowered = block_exchange().lower(Target::SM90).expect("lower");
    let g = 5usize;
    let args = || {
        vec![
            SimArg::zeros(I32, &[g]),
            SimArg::zeros(I32, &[g]),
            SimArg::zeros(I32, &[1]),
        ]
    };
    let few = SimOptions {
        resident_blocks: Some(g - 1),
        ..SimOptions::default()
    };
    let e = tl_sim::run(&lowered, &mut args(), &few).expect_err("one block cannot start");
    assert!(e.to_string().contains("1 block(s) never started"), "{e}");
    let enough = SimOptions {
        resident_blocks: Some(g),
        ..SimOptions::default()
    };
    tl_sim::run(&lowered, &mut args(), &enough).expect("all resident");

    use tilelang::kernels::dist::{ag_gemm, AgGemmConfig};
    let k = ag_gemm(BF16, AgGemmConfig::tiles(64, 64, 32, 2, 128));
    let lowered = k.lower(Target::SM90).expect("lower");
    let mut ranks: Vec<Vec<SimArg>> = (0..2)
        .map(|r| ag_gemm_args(r, 2, (70, 72, 40), 64, 1))
        .collect();
    let two = SimOptions {
        resident_blocks: Some(2),
        ..SimOptions::default()
    };
    tl_sim::run_ranks(&lowered, &mut ranks, &two).expect("producers first");
}

/// Peer tables (for symmetric memory another library mapped, like torch's): the kernel takes
/// each symmetric buffer's per-rank addresses; the PTX and CUDA C++ compute a peer's address
/// from the table (no heap stride), both compile, and the simulator (which keeps each rank's
/// copy itself) agrees with the reference.
#[test]
fn peer_tables_replace_the_flat_heap() {
    use tilelang::kernels::dist::all_gather_peer_tables;
    let k = all_gather_peer_tables(F32, 64);
    let names: Vec<String> = k
        .ir()
        .params
        .iter()
        .map(|p| match p {
            tilelang::ir::Param::Tensor { buffer, .. } => buffer.name().to_string(),
            tilelang::ir::Param::Scalar(v) => v.name().to_string(),
        })
        .collect();
    assert_eq!(
        names,
        [
            "X",
            "OUT",
            "FLAGS",
            "READY",
            "epoch",
            "OUT_peers",
            "FLAGS_peers",
            "READY_peers",
            "rank",
            "num_ranks",
            "heap_stride"
        ]
    );
    let lowered = k.lower(Target::SM90).expect("lower");
    let ranks = 3;
    let mut args: Vec<Vec<SimArg>> = (0..ranks)
        .map(|r| {
            let mut a = all_gather_args(r, ranks, 20, 1, 0.0);
            let tail = a.split_off(5);
            for _ in 0..3 {
                a.push(SimArg::tensor(I64, &[ranks], &[0.0; 3]));
            }
            a.extend(tail);
            a
        })
        .collect();
    tl_sim::run_ranks(&lowered, &mut args, &SimOptions::default()).expect("sim");
    let want: Vec<f64> = (0..ranks).flat_map(|r| shard(r, 20)).collect();
    for a in &args {
        assert_eq!(a[1].to_f64(F32), want);
    }
    if tl_nvrtc::testing::nvrtc_or_skip("peer_tables_replace_the_flat_heap").is_none() {
        return;
    }
    for target in TARGETS {
        let ptx = k.emit_ptx(target).expect("ptx");
        assert!(ptx.contains("sub.s64"), "{ptx}");
        tl_nvrtc::check_with(&ptx, &target.arch(), &tl_nvrtc::CheckOptions::default())
            .unwrap_or_else(|e| panic!("{target}: {e}"));
        let cuda = k.emit_general(target).expect("cuda");
        assert!(cuda.contains("tl_peer_table("), "{cuda}");
        tl_nvrtc::check(&cuda, &target.arch()).unwrap_or_else(|e| panic!("{target}: {e}"));
    }
}

/// Two-shot all-reduce on 1-4 ranks, lengths not a multiple of the ranks or the block, twice
/// over the same barrier slots.
#[test]
fn two_shot_all_reduce_sums_every_rank() {
    use tilelang::kernels::dist::all_reduce_two_shot;
    let block = 32usize;
    let lowered = all_reduce_two_shot(block as i64, 64)
        .lower(Target::SM90)
        .expect("lower");
    for ranks in [1usize, 2, 3, 4] {
        let n = 101usize;
        let g = n.div_ceil(ranks).div_ceil(block);
        let mut args: Vec<Vec<SimArg>> = (0..ranks)
            .map(|r| {
                vec![
                    SimArg::tensor(F32, &[n], &shard(r, n)),
                    SimArg::tensor(F32, &[n], &vec![f64::NAN; n]),
                    SimArg::tensor(F32, &[n], &vec![f64::NAN; n]),
                    SimArg::zeros(I32, &[g, ranks]),
                    SimArg::Int(r as i64),
                    SimArg::Int(ranks as i64),
                    SimArg::Int(0),
                ]
            })
            .collect();
        let want: Vec<f64> = (0..n)
            .map(|i| (0..ranks).map(|r| shard(r, n)[i]).sum())
            .collect();
        for call in 0..2 {
            let rep = tl_sim::run_ranks(&lowered, &mut args, &SimOptions::default())
                .unwrap_or_else(|e| panic!("{ranks} ranks, call {call}: {e}"));
            assert!(rep.order_checked);
            for (r, a) in args.iter().enumerate() {
                assert_eq!(a[2].to_f64(F32), want, "rank {r} of {ranks}, call {call}");
            }
        }
    }
}

/// A fence makes a relaxed flag store a release (`fence.sys; st.relaxed.sys`), as the PTX
/// memory model says: the waiter's read of the data is ordered. Without the fence the relaxed
/// store releases nothing, and the read is reported.
#[test]
fn a_fence_turns_a_relaxed_store_into_a_release() {
    for producer_fence in [true, false] {
        let k = Kernel::build("fenced", |k| {
            let data = k.symmetric("DATA", [4], F32);
            let flag = k.symmetric("FLAG", [1], I32);
            let out = k.output("OUT", [1], F32);
            let d = k.distributed();
            k.launch([1], 32, |t, [_]| {
                let tid = t.thread_idx();
                let other = Expr::int(1) - d.rank.clone();
                t.if_(tid.eq_(0), |t| {
                    t.st(
                        data.at([0]),
                        Some(other.clone()),
                        5.0f64,
                        MemSem::Weak,
                        MemScope::Sys,
                    );
                    if producer_fence {
                        t.fence(MemScope::Sys);
                    }
                    t.st(
                        flag.at([0]),
                        Some(other.clone()),
                        1,
                        MemSem::Relaxed,
                        MemScope::Sys,
                    );
                    t.wait(flag.at([0]), tilelang::ir::CmpOp::Eq, 1);
                    let v = t.ld(data.at([0]), None, MemSem::Weak, MemScope::Sys);
                    t.store(&out, [0], v);
                });
            });
        });
        let lowered = k.lower(Target::SM90).expect("lower");
        let mut args: Vec<Vec<SimArg>> = (0..2)
            .map(|r| {
                vec![
                    SimArg::zeros(F32, &[4]),
                    SimArg::zeros(I32, &[1]),
                    SimArg::zeros(F32, &[1]),
                    SimArg::Int(r),
                    SimArg::Int(2),
                    SimArg::Int(0),
                ]
            })
            .collect();
        let r = tl_sim::run_ranks(&lowered, &mut args, &SimOptions::default());
        match (producer_fence, r) {
            (true, Ok(_)) => {
                assert_eq!(args[0][2].to_f64(F32), vec![5.0]);
                assert_eq!(args[1][2].to_f64(F32), vec![5.0]);
            }
            (false, Err(e @ SimError::UnorderedAccess { .. })) => {
                assert!(e.to_string().contains("`DATA`[0]"), "{e}");
            }
            (f, other) => panic!("producer fence {f}: {other:?}"),
        }
    }
}

/// A small campaign over random multi-rank launches (kernel, ranks 1-4, sizes, target): each
/// must agree with its single-device reference, with the simulator's deadlock, order and scope
/// checks on. Deterministic (splitmix64 from a fixed seed).
#[test]
fn random_multi_rank_launches_agree_with_their_references() {
    use tilelang::kernels::dist::{
        ag_gemm, all_reduce, all_reduce_two_shot, gemm_rs, AgGemmConfig,
    };
    use tilelang::kernels::reference;
    let mut state = 0x15_d157u64;
    let mut next = |n: usize| {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) % n as u64) as usize
    };
    let cfg = AgGemmConfig::tiles(64, 64, 32, 2, 128);
    let kernels = [
        all_gather_by(F32, 64, Transfer::PUT_BLOCK, G_SMALL),
        all_reduce(64, 64),
        all_reduce_two_shot(64, 64),
        ag_gemm(BF16, cfg),
        gemm_rs(BF16, cfg),
    ];
    let lowered: Vec<Vec<tilelang::ir::Kernel>> = kernels
        .iter()
        .map(|k| {
            TARGETS
                .iter()
                .map(|&t| k.lower(t).expect("lower"))
                .collect()
        })
        .collect();
    for case in 0..20 {
        let (which, t) = (next(kernels.len()), next(TARGETS.len()));
        let ranks = 1 + next(4);
        let (n, m, kk) = (1 + next(150), 1 + next(80), 8 * (1 + next(6)));
        let (mut args, want, out): (Vec<Vec<SimArg>>, Vec<Vec<f64>>, usize) = match which {
            0 => (
                (0..ranks)
                    .map(|r| all_gather_args(r, ranks, n, 1, 0.0))
                    .collect(),
                vec![(0..ranks).flat_map(|s| shard(s, n)).collect(); ranks],
                1,
            ),
            1 | 2 => {
                let two = which == 2;
                let g = if two {
                    n.div_ceil(ranks).div_ceil(64)
                } else {
                    n.div_ceil(64)
                };
                let sum: Vec<f64> = (0..n)
                    .map(|i| (0..ranks).map(|s| shard(s, n)[i]).sum())
                    .collect();
                let a = (0..ranks)
                    .map(|r| {
                        let mut v = vec![SimArg::tensor(F32, &[n], &shard(r, n))];
                        if two {
                            v.push(SimArg::zeros(F32, &[n]));
                        }
                        v.push(SimArg::tensor(F32, &[n], &vec![f64::NAN; n]));
                        v.push(SimArg::zeros(I32, &[g, ranks]));
                        v.extend([
                            SimArg::Int(r as i64),
                            SimArg::Int(ranks as i64),
                            SimArg::Int(0),
                        ]);
                        v
                    })
                    .collect();
                (a, vec![sum; ranks], if two { 2 } else { 1 })
            }
            3 => {
                let nn = 1 + next(100);
                let a = (0..ranks)
                    .map(|r| ag_gemm_args(r, ranks, (m, nn, kk), 64, 1))
                    .collect();
                let want = (0..ranks)
                    .map(|r| {
                        let b = pattern(100 + r, nn * kk);
                        (0..ranks)
                            .flat_map(|s| {
                                reference::gemm(&pattern(s, m * kk), &b, m, nn, kk, false, true)
                            })
                            .collect()
                    })
                    .collect();
                (a, want, 3)
            }
            _ => {
                let nn = 1 + next(100);
                let a = (0..ranks)
                    .map(|r| gemm_rs_args(r, ranks, (m, nn, kk), (64, 64)))
                    .collect();
                let want = (0..ranks)
                    .map(|q| {
                        let mut w = vec![0.0; m * nn];
                        for s in 0..ranks {
                            let a_s = pattern(s, ranks * m * kk);
                            let p = reference::gemm(
                                &a_s[q * m * kk..(q + 1) * m * kk],
                                &pattern(50 + s, nn * kk),
                                m,
                                nn,
                                kk,
                                false,
                                true,
                            );
                            w.iter_mut().zip(p).for_each(|(x, y)| *x += y);
                        }
                        w
                    })
                    .collect();
                (a, want, 4)
            }
        };
        let name = kernels[which].name();
        tl_sim::run_ranks(&lowered[which][t], &mut args, &SimOptions::default()).unwrap_or_else(
            |e| {
                panic!(
                    "case {case}: {name} on {} ranks, {}: {e}",
                    ranks, TARGETS[t]
                )
            },
        );
        for (r, (a, w)) in args.iter().zip(&want).enumerate() {
            // Every output here is f32.
            assert_eq!(
                &a[out].to_f64(F32),
                w,
                "case {case}: {name}, rank {r} of {ranks}"
            );
        }
    }
}

/// Launching a multi-rank kernel through the runtime checks its rank arguments: a rank past
/// the count, and several ranks with no heap (`heap_stride` 0), are refused with what to pass.
#[test]
fn launches_on_a_rank_without_a_heap_are_refused() {
    let k = all_gather(F32, 32);
    let dev = Device::parse("sim").expect("sim device");
    let exe = k.compile(&dev).expect("compile for the simulator");
    let x = Tensor::zeros(&[8], F32, &dev).expect("x");
    let out = Tensor::zeros(&[2, 8], F32, &dev).expect("out");
    let flags = Tensor::zeros(&[2], I32, &dev).expect("flags");
    let run = |rank: i64, ranks: i64, stride: i64| {
        exe.run_args(&[
            Arg::Tensor(&x),
            Arg::Tensor(&out),
            Arg::Tensor(&flags),
            Arg::Tensor(&flags),
            Arg::Int(1),
            Arg::Int(rank),
            Arg::Int(ranks),
            Arg::Int(stride),
        ])
        .expect_err("refused")
        .to_string()
    };
    let e = run(0, 2, 0);
    assert!(
        e.contains("symmetric heap is not set up") && e.contains("heap_stride"),
        "{e}"
    );
    let e = run(2, 2, 1 << 30);
    assert!(e.contains("rank 2 of 2"), "{e}");
    // Buffers with a row per rank, sized for 2 ranks, launched as one of 3.
    let e = run(0, 3, 1 << 30);
    assert!(
        e.contains("3 ranks, but the tensors (OUT, FLAGS, READY) have 2 rows of ranks (`R`)"),
        "{e}"
    );
}

/// The simulator refuses ranks whose buffers count another number of ranks.
#[test]
fn buffers_sized_for_another_rank_count_are_refused() {
    let lowered = all_gather(F32, 32).lower(Target::SM90).expect("lower");
    let mut args: Vec<Vec<SimArg>> = (0..2).map(|r| all_gather_args(r, 3, 8, 1, 0.0)).collect();
    for (r, a) in args.iter_mut().enumerate() {
        a[5] = SimArg::Int(r as i64);
        a[6] = SimArg::Int(2);
    }
    let e = tl_sim::run_ranks(&lowered, &mut args, &SimOptions::default())
        .expect_err("R = 3 on 2 ranks");
    assert!(
        e.to_string()
            .contains("the tensors size `R` (the number of ranks) as 3, not 2"),
        "{e}"
    );
}

/// What a mutant of a lowered kernel lost.
#[derive(Clone, Copy, Debug)]
enum Mutation {
    /// A `sync_threads` removed.
    DropBarrier,
    /// A fence removed.
    DropFence,
    /// A release store or reduction made relaxed.
    RelaxRelease,
    /// A wait removed.
    DropWait,
}

/// `k` with its `index`-th synchronization statement (in post-order) mutated, or None when it
/// has fewer.
fn mutant(k: &tilelang::ir::Kernel, index: usize) -> Option<(tilelang::ir::Kernel, Mutation)> {
    use tilelang::ir::{ExprKind, Intrinsic, Stmt, StmtKind};
    let mut seen = 0usize;
    let mut done = None;
    let body = k.body.map_post(&mut |s: Stmt| {
        let StmtKind::Eval(e) = &s.kind else {
            return s;
        };
        let ExprKind::Call(op, args) = e.kind() else {
            return s;
        };
        let m = match op {
            Intrinsic::SyncThreads => Mutation::DropBarrier,
            Intrinsic::Fence { .. } => Mutation::DropFence,
            Intrinsic::WaitUntil { .. } => Mutation::DropWait,
            Intrinsic::MemStore { sem, .. } | Intrinsic::MemRedAdd { sem, .. }
                if sem.releases() =>
            {
                Mutation::RelaxRelease
            }
            _ => return s,
        };
        seen += 1;
        if seen - 1 != index {
            return s;
        }
        done = Some(m);
        match (m, op) {
            (Mutation::RelaxRelease, Intrinsic::MemStore { scope, .. }) => Stmt::new(
                StmtKind::Eval(tilelang::ir::Expr::call(
                    Intrinsic::MemStore {
                        sem: MemSem::Relaxed,
                        scope: *scope,
                    },
                    args.clone(),
                    e.dtype(),
                )),
                s.span,
            ),
            (Mutation::RelaxRelease, Intrinsic::MemRedAdd { scope, .. }) => Stmt::new(
                StmtKind::Eval(tilelang::ir::Expr::call(
                    Intrinsic::MemRedAdd {
                        sem: MemSem::Relaxed,
                        scope: *scope,
                    },
                    args.clone(),
                    e.dtype(),
                )),
                s.span,
            ),
            _ => Stmt::empty(),
        }
    });
    done.map(|m| (k.with_body(body), m))
}

/// Mutation testing of the simulator's protocol checks: every barrier, fence, release and
/// wait of the multi-rank kernels is removed (or relaxed) in turn. A mutant must either be
/// reported (a deadlock, an unordered access, a scope or a race error) or still compute what
/// the kernel computes — never a silently different answer — with one known exception below.
/// Mutants whose only effect would be after the kernel (a host reading an all-gather's output
/// before a peer's put lands) are beyond any in-kernel check and count as equal here.
///
/// The known miss: the two-shot all-reduce without the wait of its middle barrier. Rank 0
/// runs ahead and reads rank 1's chunk of `RED` before rank 1 has written it (the initial
/// value); rank 1's later write is then ordered after that read by rank 0's release at the
/// final barrier, so no access is unordered — the answer is wrong without a race. Catching it
/// needs intent (which reads must see this launch's writes), which the checker does not have:
/// a read of a never-written value that another thread overwrites later is also how an
/// in-place algorithm legitimately reads its inputs.
#[test]
fn removing_any_synchronization_is_caught_or_harmless() {
    use tilelang::kernels::dist::{
        ag_gemm, all_reduce, all_reduce_two_shot, gemm_rs, AgGemmConfig,
    };
    let cfg = AgGemmConfig::tiles(64, 64, 32, 2, 128);
    let n = 40usize;
    type Args = Box<dyn Fn() -> Vec<Vec<SimArg>>>;
    let cases: Vec<(Kernel, Args)> = vec![
        (
            all_gather_by(F32, 32, Transfer::PUT_BLOCK, G_SMALL),
            Box::new(|| (0..2).map(|r| all_gather_args(r, 2, 24, 1, 0.0)).collect()),
        ),
        (
            gather_sum(true),
            Box::new(|| (0..2).map(|r| gather_sum_args(r, 2, 40)).collect()),
        ),
        (
            all_reduce(64, 64),
            Box::new(move || {
                (0..2)
                    .map(|r| {
                        vec![
                            SimArg::tensor(F32, &[n], &shard(r, n)),
                            SimArg::tensor(F32, &[n], &vec![f64::NAN; n]),
                            SimArg::zeros(I32, &[1, 2]),
                            SimArg::Int(r as i64),
                            SimArg::Int(2),
                            SimArg::Int(0),
                        ]
                    })
                    .collect()
            }),
        ),
        (
            all_reduce_two_shot(32, 64),
            Box::new(move || {
                (0..2)
                    .map(|r| {
                        vec![
                            SimArg::tensor(F32, &[n], &shard(r, n)),
                            SimArg::zeros(F32, &[n]),
                            SimArg::tensor(F32, &[n], &vec![f64::NAN; n]),
                            SimArg::zeros(I32, &[1, 2]),
                            SimArg::Int(r as i64),
                            SimArg::Int(2),
                            SimArg::Int(0),
                        ]
                    })
                    .collect()
            }),
        ),
        (
            ag_gemm(BF16, cfg),
            Box::new(|| {
                (0..2)
                    .map(|r| ag_gemm_args(r, 2, (40, 64, 32), 64, 1))
                    .collect()
            }),
        ),
        (
            gemm_rs(BF16, cfg),
            Box::new(|| {
                (0..2)
                    .map(|r| {
                        vec![
                            SimArg::tensor(BF16, &[2, 40, 32], &pattern(r, 2 * 40 * 32)),
                            SimArg::tensor(BF16, &[64, 32], &pattern(50 + r, 64 * 32)),
                            SimArg::zeros(F32, &[2, 1, 1, 64, 64]),
                            SimArg::zeros(F32, &[2, 1, 1, 64, 64]),
                            SimArg::tensor(F32, &[40, 64], &vec![f64::NAN; 40 * 64]),
                            SimArg::zeros(I32, &[1, 1]),
                            SimArg::zeros(I32, &[2]),
                            SimArg::Int(1),
                            SimArg::Int(r as i64),
                            SimArg::Int(2),
                            SimArg::Int(0),
                        ]
                    })
                    .collect()
            }),
        ),
    ];
    let mut silent = vec![];
    for (k, make) in &cases {
        let lowered = k.lower(Target::SM90).expect("lower");
        // Kernels that count calls run two back to back, so that what orders one call
        // against the next (the entry handshake) is mutated too.
        let takes_epoch = lowered
            .params
            .iter()
            .any(|p| matches!(p, tilelang::ir::Param::Scalar(v) if v.name() == "epoch"));
        let calls: Vec<Vec<(&str, i64)>> = if takes_epoch {
            vec![vec![("epoch", 1)], vec![("epoch", 2)]]
        } else {
            vec![vec![]]
        };
        let mut base = make();
        tl_sim::run_ranks_calls(&lowered, &mut base, &calls, &SimOptions::default())
            .expect("the kernel itself");
        let (mut caught, mut harmless) = (0, 0);
        for i in 0.. {
            let Some((m, what)) = mutant(&lowered, i) else {
                break;
            };
            let mut args = make();
            let opts = SimOptions {
                max_steps: 1 << 26,
                ..SimOptions::default()
            };
            match tl_sim::run_ranks_calls(&m, &mut args, &calls, &opts) {
                Err(_) => caught += 1,
                Ok(_) if args == base => harmless += 1,
                Ok(_) => {
                    let differs: Vec<String> = (0..args.len())
                        .flat_map(|r| (0..args[r].len()).map(move |j| (r, j)))
                        .filter(|&(r, j)| args[r][j] != base[r][j])
                        .map(|(r, j)| format!("rank {r} arg {j}"))
                        .collect();
                    silent.push(format!(
                        "{}: {what:?} #{i} ({})",
                        k.name(),
                        differs.join(", ")
                    ))
                }
            }
        }
        println!("{}: {caught} mutants caught, {harmless} harmless", k.name());
        // The all-gather reads nothing it gathered, and the one-shot all-reduce only what the
        // host wrote before the launch: their barriers order what happens around the kernel
        // (the host's next read or write), which no in-kernel check sees.
        if !matches!(k.name(), "all_gather" | "all_reduce") {
            assert!(caught > 0, "{}: no mutant was caught", k.name());
        }
    }
    let known = ["all_reduce_two_shot: DropWait #6"];
    silent.retain(|m| !known.iter().any(|k| m.starts_with(k)));
    assert!(
        silent.is_empty(),
        "mutants that silently changed the answer: {silent:?}"
    );
}

/// PTX's `red` has no acquire form: the DSL refuses it at the call and points to `atom_add`.
#[test]
fn a_reduction_with_acquire_semantics_is_refused() {
    let k = Kernel::build("red_acquire", |k| {
        let f = k.symmetric("F", [1], I32);
        k.launch([1], 32, |t, [_]| {
            t.red_add(f.at([0]), None, 1, MemSem::Acquire, MemScope::Gpu);
        });
    });
    let e = k.verify().expect_err("no red.acquire").to_string();
    assert!(
        e.contains("relaxed or release") && e.contains("atom_add"),
        "{e}"
    );
}

/// Symmetric buffers are not `__restrict__` in CUDA C++ (peers write them during the kernel);
/// the others still are.
#[test]
fn symmetric_parameters_are_not_restrict() {
    let src = all_gather(F32, 64)
        .emit_general(Target::SM90)
        .expect("cuda");
    let sig = src
        .lines()
        .find(|l| l.contains("tl_kernel_all_gather("))
        .unwrap_or_default()
        .to_string();
    let params = src[src.find("tl_kernel_all_gather(").unwrap_or(0)..]
        .split(')')
        .next()
        .unwrap_or_default()
        .to_string();
    assert!(params.contains("__restrict__"), "{sig}\n{params}");
    let symmetric: Vec<&str> = params
        .split(',')
        .filter(|p| p.contains("OUT") || p.contains("FLAGS"))
        .collect();
    assert_eq!(symmetric.len(), 2, "{params}");
    for p in symmetric {
        assert!(!p.contains("__restrict__"), "{p}");
    }
}

/// Two blocks of a multi-rank kernel adding into one element of a plain (not symmetric)
/// output race on a GPU — they run at once — so the order checker reports it, as it does for
/// symmetric buffers. (GEMM+RS once had a reducer per rank for every tile; on two H100s the
/// read-modify-writes of `C` interleaved and some sums came out doubled.)
#[test]
fn two_blocks_updating_one_plain_element_are_an_unordered_access() {
    let k = Kernel::build("double_reducer", |k| {
        let y = k.inout("Y", [4], F32);
        k.distributed();
        k.launch([2], 32, |t, [_]| {
            let tid = t.thread_idx();
            t.if_(tid.eq_(0), |t| {
                t.store(&y, [Expr::int(0)], y.at([Expr::int(0)]) + 1.0);
            });
        });
    });
    let lowered = k.lower(Target::SM90).expect("lower");
    let mut args = vec![vec![
        SimArg::zeros(F32, &[4]),
        SimArg::Int(0),
        SimArg::Int(1),
        SimArg::Int(0),
    ]];
    let e = tl_sim::run_ranks(&lowered, &mut args, &SimOptions::default())
        .expect_err("two blocks update Y[0]");
    assert!(matches!(e, SimError::UnorderedAccess { .. }), "{e}");
    assert!(e.to_string().contains("`Y`"), "{e}");
}

/// A wait inside a pipelined loop is refused: the loop loads later iterations' tiles before
/// the wait of this one, so those loads would not be ordered after the signal.
#[test]
fn a_wait_inside_a_pipelined_loop_is_refused() {
    let k = Kernel::build("wait_in_loop", |k| {
        let a = k.symmetric("A", [256, 64], BF16);
        let flags = k.symmetric("F", [4], I32);
        let out = k.output("O", [64, 64], F32);
        k.distributed();
        k.launch([1], 128, |t, [_]| {
            let a_s = t.alloc_shared([64, 64], BF16);
            let acc = t.alloc_fragment([64, 64], F32);
            t.clear(&acc);
            t.pipelined(4, 2, |t, ko| {
                t.wait(flags.at([ko.clone()]), tilelang::ir::CmpOp::Ge, 1);
                t.copy(a.tile([&ko * 64, Expr::int(0)]), &a_s);
                t.gemm(&a_s, &a_s, &acc).transpose_b();
            });
            t.copy(&acc, out.tile([0, 0]));
        });
    });
    let e = k
        .lower(Target::SM90)
        .expect_err("a wait in the loop")
        .to_string();
    assert!(e.contains("a wait inside a pipelined loop"), "{e}");
}

/// Warp-scope puts: each of a block's four warps pushes its own quarter of `X` to the next
/// rank, passes `sync_warp`, and its lane 0 adds 1 to the peer's flag; the receiver waits for
/// four arrivals and copies what came into `Y`. Without the `sync_warp` the other lanes' puts
/// are not ordered before lane 0's signal, and the simulator says so.
fn warp_ring(sync: bool) -> Kernel {
    Kernel::build("warp_ring", |k| {
        let (r, n) = (k.dim("R"), k.dim("N"));
        let x = k.input("X", [&n], F32);
        let out = k.symmetric("OUT", [&r, &n], F32);
        let flags = k.symmetric("FLAGS", [&r], I32);
        let y = k.output("Y", [&n], F32);
        let d = k.distributed();
        k.launch([1], 128, |t, [_]| {
            let tid = t.thread_idx();
            let warp = t.let_(
                "warp",
                Expr::binary(tilelang::ir::BinOp::Div, tid.clone(), Expr::int(32)),
            );
            let quarter = Expr::binary(tilelang::ir::BinOp::Div, n.clone() + 3, Expr::int(4));
            let lo = t.let_("lo", min(&warp * &quarter, n.clone()));
            let hi = t.let_("hi", min(&lo + &quarter, n.clone()));
            let next = t.let_(
                "next",
                select(
                    (d.rank.clone() + 1).lt(&d.num_ranks),
                    d.rank.clone() + 1,
                    Expr::int(0),
                ),
            );
            let prev = t.let_(
                "prev",
                select(
                    d.rank.clone().gt(Expr::int(0)),
                    d.rank.clone() - 1,
                    d.num_ranks.clone() - 1,
                ),
            );
            t.put_warp(
                x.at([lo.clone()]),
                out.at([d.rank.clone(), lo.clone()]),
                &hi - &lo,
                next.clone(),
            );
            if sync {
                t.sync_warp();
            }
            t.if_(
                Expr::binary(tilelang::ir::BinOp::Mod, tid.clone(), Expr::int(32)).eq_(0),
                |t| {
                    t.signal(flags.at([d.rank.clone()]), next.clone(), 1, SignalOp::Add);
                },
            );
            t.if_(tid.eq_(0), |t| {
                t.wait(flags.at([prev.clone()]), tilelang::ir::CmpOp::Ge, 4);
            });
            t.sync_threads();
            // (N ≤ 128 in the test.)
            t.parallel([128], |t, [i]| {
                t.if_(i.lt(&n), |t| {
                    t.store(&y, [i.clone()], out.at([prev.clone(), i.clone()]));
                });
            });
        });
    })
}

#[test]
fn warp_puts_are_ordered_by_sync_warp() {
    let n = 70usize;
    for ranks in [1usize, 2, 3] {
        let lowered = warp_ring(true).lower(Target::SM90).expect("lower");
        let mut args: Vec<Vec<SimArg>> = (0..ranks)
            .map(|r| {
                vec![
                    SimArg::tensor(F32, &[n], &shard(r, n)),
                    SimArg::tensor(F32, &[ranks, n], &vec![f64::NAN; ranks * n]),
                    SimArg::zeros(I32, &[ranks]),
                    SimArg::tensor(F32, &[n], &vec![f64::NAN; n]),
                    SimArg::Int(r as i64),
                    SimArg::Int(ranks as i64),
                    SimArg::Int(0),
                ]
            })
            .collect();
        let rep = tl_sim::run_ranks(&lowered, &mut args, &SimOptions::default())
            .unwrap_or_else(|e| panic!("{ranks} ranks: {e}"));
        assert!(rep.order_checked);
        for (r, a) in args.iter().enumerate() {
            let prev = (r + ranks - 1) % ranks;
            assert_eq!(a[3].to_f64(F32), shard(prev, n), "rank {r} of {ranks}");
        }
    }
    let lowered = warp_ring(false).lower(Target::SM90).expect("lower");
    let mut args: Vec<Vec<SimArg>> = (0..2)
        .map(|r| {
            vec![
                SimArg::tensor(F32, &[n], &shard(r, n)),
                SimArg::zeros(F32, &[2, n]),
                SimArg::zeros(I32, &[2]),
                SimArg::zeros(F32, &[n]),
                SimArg::Int(r as i64),
                SimArg::Int(2),
                SimArg::Int(0),
            ]
        })
        .collect();
    let e =
        tl_sim::run_ranks(&lowered, &mut args, &SimOptions::default()).expect_err("no sync_warp");
    assert!(matches!(e, SimError::UnorderedAccess { .. }), "{e}");
    if tl_nvrtc::testing::nvrtc_or_skip("warp_puts_are_ordered_by_sync_warp").is_some() {
        let ptx = warp_ring(true).emit_ptx(Target::SM90).expect("ptx");
        tl_nvrtc::check_with(&ptx, "sm_90a", &tl_nvrtc::CheckOptions::default())
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

fn gemm_rs_args(
    r: usize,
    ranks: usize,
    (mq, n, kk): (usize, usize, usize),
    (bm, bn): (usize, usize),
) -> Vec<SimArg> {
    let (tm, tn) = (mq.div_ceil(bm), n.div_ceil(bn));
    vec![
        SimArg::tensor(BF16, &[ranks, mq, kk], &pattern(r, ranks * mq * kk)),
        SimArg::tensor(BF16, &[n, kk], &pattern(50 + r, n * kk)),
        SimArg::zeros(F32, &[ranks, tm, tn, bm, bn]),
        // Partials nobody has pushed read as NaN.
        SimArg::tensor(
            F32,
            &[ranks, tm, tn, bm, bn],
            &vec![f64::NAN; ranks * tm * tn * bm * bn],
        ),
        SimArg::tensor(F32, &[mq, n], &vec![f64::NAN; mq * n]),
        SimArg::zeros(I32, &[tm, tn]),
        SimArg::zeros(I32, &[ranks]),
        SimArg::Int(1),
        SimArg::Int(r as i64),
        SimArg::Int(ranks as i64),
        SimArg::Int(0),
    ]
}

/// `k` without its waits on `READY` (the entry handshake of the kernels that push).
fn without_entry_wait(k: &tilelang::ir::Kernel) -> tilelang::ir::Kernel {
    use tilelang::ir::{ExprKind, Intrinsic, Stmt, StmtKind};
    let body = k.body.map_post(&mut |s: Stmt| {
        if let StmtKind::Eval(e) = &s.kind {
            if let ExprKind::Call(Intrinsic::WaitUntil { .. }, args) = e.kind() {
                // The element is passed by address: `AddressOf(READY[peer])`.
                let flag = match args[0].kind() {
                    ExprKind::Call(Intrinsic::AddressOf, inner) => inner[0].kind(),
                    other => other,
                };
                if matches!(flag, ExprKind::Load(b, _) if b.name() == "READY") {
                    return Stmt::empty();
                }
            }
        }
        s
    });
    k.with_body(body)
}

/// Back-to-back calls, as one stream per rank launches them, with no barrier between: a rank
/// may start call `e + 1` while a peer still runs call `e`. Every kernel that pushes into
/// peers' buffers gives the same answer on every call (the flags and the entry handshake
/// count up across calls), and the memory-order check, which now spans the calls, finds every
/// access ordered.
#[test]
fn back_to_back_calls_need_no_barrier_between() {
    use tilelang::kernels::dist::{ag_gemm, gemm_rs, AgGemmConfig};
    let cfg = AgGemmConfig::tiles(64, 64, 32, 2, 128);
    let calls: Vec<Vec<(&str, i64)>> = (1..=2).map(|e| vec![("epoch", e)]).collect();
    for ranks in [2usize, 3] {
        type Make = Box<dyn Fn(usize) -> Vec<SimArg>>;
        let cases: Vec<(Kernel, Make)> = vec![
            (
                all_gather_by(F32, 32, Transfer::PUT_BLOCK, G_SMALL),
                Box::new(move |r| all_gather_args(r, ranks, 24, 1, 0.0)),
            ),
            (
                ag_gemm(BF16, cfg),
                Box::new(move |r| ag_gemm_args(r, ranks, (40, 64, 32), 64, 1)),
            ),
            (
                gemm_rs(BF16, cfg),
                Box::new(move |r| gemm_rs_args(r, ranks, (40, 64, 32), (64, 64))),
            ),
        ];
        for (k, make) in &cases {
            let lowered = k.lower(Target::SM90).expect("lower");
            let mut once: Vec<Vec<SimArg>> = (0..ranks).map(make).collect();
            tl_sim::run_ranks(&lowered, &mut once, &SimOptions::default()).expect("one call");
            let mut args: Vec<Vec<SimArg>> = (0..ranks).map(make).collect();
            let rep = tl_sim::run_ranks_calls(&lowered, &mut args, &calls, &SimOptions::default())
                .unwrap_or_else(|e| panic!("{}, {ranks} ranks, 3 calls: {e}", k.name()));
            // Two calls on 3 ranks are more threads than the order check keeps clocks for
            // (the answers are still checked); on 2 ranks every access is.
            assert!(
                rep.order_checked || ranks == 3,
                "{}, {ranks} ranks",
                k.name()
            );
            // The outputs equal one call's; the flag and handshake buffers count further.
            let out = match k.name() {
                "all_gather" => 1,
                "ag_gemm" => 3,
                _ => 4,
            };
            for r in 0..ranks {
                assert_eq!(args[r][out], once[r][out], "{}: rank {r}", k.name());
                let ready = args[r]
                    .iter()
                    .rev()
                    .find_map(|a| match a {
                        SimArg::Tensor { .. } => Some(a.to_f64(I32)),
                        _ => None,
                    })
                    .expect("READY");
                assert_eq!(ready, vec![2.0; ranks], "{}: READY on rank {r}", k.name());
            }
        }
    }
}

/// Without the entry handshake, a rank that runs a call ahead pushes into a peer's buffer
/// while the peer's previous call still reads it: reported as a write after an unordered
/// read, naming the call.
#[test]
fn pushing_before_the_peer_entered_the_call_is_reported() {
    use tilelang::kernels::dist::{ag_gemm, gemm_rs, AgGemmConfig};
    let cfg = AgGemmConfig::tiles(64, 64, 32, 2, 128);
    let calls = [vec![("epoch", 1)], vec![("epoch", 2)]];
    let cases = [
        (
            ag_gemm(BF16, cfg),
            (0..2)
                .map(|r| ag_gemm_args(r, 2, (40, 64, 32), 64, 1))
                .collect::<Vec<_>>(),
            "AG",
        ),
        (
            gemm_rs(BF16, cfg),
            (0..2)
                .map(|r| gemm_rs_args(r, 2, (40, 64, 32), (64, 64)))
                .collect(),
            "PART",
        ),
    ];
    for (k, args, buffer) in cases {
        let lowered = without_entry_wait(&k.lower(Target::SM90).expect("lower"));
        let mut one = args.clone();
        tl_sim::run_ranks(&lowered, &mut one, &SimOptions::default())
            .unwrap_or_else(|e| panic!("{}: one call is fine without it: {e}", k.name()));
        let mut two = args;
        let e = tl_sim::run_ranks_calls(&lowered, &mut two, &calls, &SimOptions::default())
            .expect_err("a push into a buffer the peer still reads");
        let msg = e.to_string();
        assert!(
            matches!(e, SimError::UnorderedAccess { .. })
                && msg.contains(&format!("`{buffer}`"))
                && msg.contains("in call 2"),
            "{}: {msg}",
            k.name()
        );
    }
}

/// The warp-specialized AG + GEMM (the aligned variant on sm_90a): its producer warpgroup
/// loads the gathered rows by TMA, so it repeats the consumers' wait for them and fences the
/// proxies. Removing any synchronization of the lowered kernel (the producer's wait and fence
/// among them) is reported or leaves the answer unchanged, over two calls back to back; the
/// producer's wait and its proxy fence are each reported.
#[test]
fn warp_specialized_ag_gemm_needs_its_producers_wait() {
    use tilelang::ir::{ExprKind, Intrinsic, Stmt, StmtKind};
    use tilelang::kernels::dist::{ag_gemm, AgGemmConfig};
    // 64-wide k steps: the TMA boxes warp specialization takes.
    let lowered = ag_gemm(BF16, AgGemmConfig::tiles(64, 64, 64, 2, 128).specialized())
        .lower_aligned(Target::SM90)
        .expect("lower");
    assert!(lowered.attrs.warp_specialized.is_some(), "not specialized");
    let make = || -> Vec<Vec<SimArg>> {
        (0..2)
            .map(|r| ag_gemm_args(r, 2, (64, 64, 128), 64, 1))
            .collect()
    };
    let calls = [vec![("epoch", 1)], vec![("epoch", 2)]];
    let mut base = make();
    tl_sim::run_ranks_calls(&lowered, &mut base, &calls, &SimOptions::default())
        .expect("the kernel itself");
    // The producer's own statements: remove each of its waits, then its proxy fence.
    let in_producer = |k: &tilelang::ir::Kernel, drop: &dyn Fn(&Expr) -> bool| {
        let mut dropped = 0;
        let body = k.body.map_post(&mut |st: Stmt| {
            if let StmtKind::Eval(e) = &st.kind {
                if drop(e) {
                    dropped += 1;
                    return Stmt::empty();
                }
            }
            st
        });
        (k.with_body(body), dropped)
    };
    let fence = |e: &Expr| {
        matches!(
            e.kind(),
            ExprKind::Call(Intrinsic::FenceProxyAsyncGlobal, _)
        )
    };
    let (no_fence, n) = in_producer(&lowered, &fence);
    assert!(n >= 1, "no proxy fence");
    let e = tl_sim::run_ranks_calls(&no_fence, &mut make(), &calls, &SimOptions::default())
        .expect_err("TMA loads of peers' rows without the proxy fence");
    assert!(matches!(e, SimError::AsyncProxyUnfenced { .. }), "{e}");
    let (mut caught, mut harmless, mut silent) = (0, 0, vec![]);
    for i in 0.. {
        let Some((m, what)) = mutant(&lowered, i) else {
            break;
        };
        let mut args = make();
        match tl_sim::run_ranks_calls(&m, &mut args, &calls, &SimOptions::default()) {
            Err(_) => caught += 1,
            Ok(_) if args == base => harmless += 1,
            Ok(_) => silent.push(format!("{what:?} #{i}")),
        }
    }
    println!("warp-specialized ag_gemm: {caught} mutants caught, {harmless} harmless");
    assert!(silent.is_empty(), "silently wrong: {silent:?}");
    assert!(caught >= 3, "{caught} caught");
}

/// GEMM + RS warp-specialized (the aligned variant on sm_90a: its GEMM reads only local
/// inputs, so the producer needs no wait), two calls back to back: the same sums as the
/// general variant, every access ordered.
#[test]
fn warp_specialized_gemm_rs_matches_the_general_variant() {
    use tilelang::kernels::dist::{gemm_rs, AgGemmConfig};
    let k = gemm_rs(BF16, AgGemmConfig::tiles(64, 64, 64, 2, 128).specialized());
    let ws = k.lower_aligned(Target::SM90).expect("lower");
    assert!(ws.attrs.warp_specialized.is_some(), "not specialized");
    let general = k.lower(Target::SM90).expect("lower");
    let calls = [vec![("epoch", 1)], vec![("epoch", 2)]];
    let make = || -> Vec<Vec<SimArg>> {
        (0..2)
            .map(|r| gemm_rs_args(r, 2, (64, 64, 128), (64, 64)))
            .collect()
    };
    let (mut a, mut b) = (make(), make());
    let rep = tl_sim::run_ranks_calls(&ws, &mut a, &calls, &SimOptions::default()).expect("ws");
    assert!(rep.order_checked);
    tl_sim::run_ranks_calls(&general, &mut b, &calls, &SimOptions::default()).expect("general");
    for r in 0..2 {
        assert_eq!(a[r][4], b[r][4], "rank {r}'s C");
    }
}

/// The AG + GEMM and GEMM + RS tiles rasterized in panels (`use_swizzle` within each z of
/// their 3-d grids): the same outputs as row by row, every access ordered.
#[test]
fn panel_rasterized_gemms_match_row_by_row() {
    use tilelang::kernels::dist::{ag_gemm, gemm_rs, AgGemmConfig};
    let cfg = AgGemmConfig::tiles(64, 64, 32, 2, 128);
    let ag = |c: AgGemmConfig| ag_gemm(BF16, c).lower(Target::SM90).expect("lower");
    let (mut a, mut b): (Vec<Vec<SimArg>>, Vec<Vec<SimArg>>) = (
        (0..2)
            .map(|r| ag_gemm_args(r, 2, (128, 120, 32), 64, 1))
            .collect(),
        (0..2)
            .map(|r| ag_gemm_args(r, 2, (128, 120, 32), 64, 1))
            .collect(),
    );
    let rep = tl_sim::run_ranks(&ag(cfg.panels(2)), &mut a, &SimOptions::default()).expect("ag");
    assert!(rep.order_checked);
    tl_sim::run_ranks(&ag(cfg), &mut b, &SimOptions::default()).expect("ag");
    assert_eq!(a[0][3], b[0][3]);
    assert_eq!(a[1][3], b[1][3]);
    let rs = |c: AgGemmConfig| gemm_rs(BF16, c).lower(Target::SM90).expect("lower");
    let (mut a, mut b): (Vec<Vec<SimArg>>, Vec<Vec<SimArg>>) = (
        (0..2)
            .map(|r| gemm_rs_args(r, 2, (128, 120, 32), (64, 64)))
            .collect(),
        (0..2)
            .map(|r| gemm_rs_args(r, 2, (128, 120, 32), (64, 64)))
            .collect(),
    );
    tl_sim::run_ranks(&rs(cfg.panels(2)), &mut a, &SimOptions::default()).expect("rs");
    tl_sim::run_ranks(&rs(cfg), &mut b, &SimOptions::default()).expect("rs");
    assert_eq!(a[0][4], b[0][4]);
    assert_eq!(a[1][4], b[1][4]);
}

/// A TMA store leaves its global writes in flight (the epilogue waits only until the store
/// has read its shared tile), so a buffer the kernel reads back takes the ordinary stores:
/// GEMM + RS's staged bf16 partials, which its blocks push to peers right after. (On 4 H100s
/// the TMA-stored partials came out wrong, relative error 0.21; the simulator writes a TMA
/// store's bytes at issue and cannot see that.) A plain warp-specialized GEMM's output still
/// goes out by TMA store.
#[test]
fn a_buffer_read_back_in_the_kernel_is_not_tma_stored() {
    use tilelang::kernels::dist::{gemm_rs_partials, AgGemmConfig};
    let cfg = AgGemmConfig::tiles(128, 256, 64, 3, 256).specialized();
    let rs = gemm_rs_partials(BF16, cfg, BF16)
        .lower_aligned(Target::SM90)
        .expect("lower");
    assert!(rs.attrs.warp_specialized.is_some());
    assert!(
        !format!("{rs:?}").contains("tma_store"),
        "STAGE went out by TMA store"
    );
    let gemm = tilelang::kernels::gemm::gemm(
        tilelang::kernels::gemm::Layout::NT,
        BF16,
        BF16,
        tilelang::kernels::gemm::GemmConfig::hopper(),
    )
    .lower_aligned(Target::SM90)
    .expect("lower");
    assert!(format!("{gemm:?}").contains("tma_store"), "the control");
}

/// Insert a peer table (`[ranks]` i64; the simulator reaches each rank's copy itself, so the
/// addresses are not read) for each of `symmetric` buffers before the three rank scalars.
fn with_tables(mut args: Vec<SimArg>, symmetric: usize, ranks: usize) -> Vec<SimArg> {
    let tail = args.split_off(args.len() - 3);
    for _ in 0..symmetric {
        args.push(SimArg::tensor(I64, &[ranks], &vec![0.0; ranks]));
    }
    args.extend(tail);
    args
}

/// Kernels written for the flat heap take peer tables after the fact
/// (`Kernel::with_peer_tables`, the route of a heap mapped by legacy CUDA IPC): a table per
/// symmetric buffer, in parameter order, before the rank scalars; the converted AG + GEMM and
/// GEMM + RS give the flat kernels' results bit for bit; a table that counts another number of
/// ranks is refused; the PTX of both code paths reads the tables and assembles.
#[test]
fn flat_kernels_take_peer_tables_after_the_fact() {
    use tilelang::kernels::dist::{ag_gemm, gemm_rs, AgGemmConfig};
    let names = |k: &Kernel| -> Vec<String> {
        k.ir()
            .params
            .iter()
            .map(|p| match p {
                tilelang::ir::Param::Tensor { buffer, .. } => buffer.name().to_string(),
                tilelang::ir::Param::Scalar(v) => v.name().to_string(),
            })
            .collect()
    };
    let cfg = AgGemmConfig::tiles(64, 64, 32, 2, 128);
    let flat = ag_gemm(BF16, cfg);
    let tabled = ag_gemm(BF16, cfg).with_peer_tables();
    let mut want = names(&flat);
    want.splice(
        want.len() - 3..want.len() - 3,
        ["AG_peers", "FLAGS_peers", "READY_peers"].map(String::from),
    );
    assert_eq!(names(&tabled), want);
    // Converting twice changes nothing.
    assert_eq!(names(&tabled.clone().with_peer_tables()), want);
    let (ranks, shape) = (2usize, (70usize, 72usize, 40usize));
    let run = |k: &Kernel, tables: bool| -> Vec<Vec<SimArg>> {
        let lowered = k.lower(Target::SM90).expect("lower");
        let mut args: Vec<Vec<SimArg>> = (0..ranks)
            .map(|r| {
                let a = ag_gemm_args(r, ranks, shape, 64, 1);
                if tables {
                    with_tables(a, 3, ranks)
                } else {
                    a
                }
            })
            .collect();
        tl_sim::run_ranks(&lowered, &mut args, &SimOptions::default()).expect("sim");
        args
    };
    let (a, b) = (run(&flat, false), run(&tabled, true));
    for r in 0..ranks {
        assert_eq!(a[r][3].to_f64(F32), b[r][3].to_f64(F32), "rank {r}'s C");
    }
    // A table of the wrong length.
    let lowered = tabled.lower(Target::SM90).expect("lower");
    let mut bad: Vec<Vec<SimArg>> = (0..ranks)
        .map(|r| with_tables(ag_gemm_args(r, ranks, shape, 64, 1), 3, ranks + 1))
        .collect();
    let e = tl_sim::run_ranks(&lowered, &mut bad, &SimOptions::default())
        .expect_err("a 3-entry table on 2 ranks")
        .to_string();
    assert!(e.contains("NR"), "{e}");

    let (bm, bn) = (64usize, 64usize);
    let rs = gemm_rs(BF16, AgGemmConfig::tiles(bm as i64, bn as i64, 32, 2, 128));
    let rs_tabled =
        gemm_rs(BF16, AgGemmConfig::tiles(bm as i64, bn as i64, 32, 2, 128)).with_peer_tables();
    let symmetric = names(&rs_tabled).len() - names(&rs).len();
    let outs: Vec<Vec<f64>> = [(&rs, false), (&rs_tabled, true)]
        .into_iter()
        .map(|(k, tables)| {
            let lowered = k.lower(Target::SM90).expect("lower");
            let mut args: Vec<Vec<SimArg>> = (0..ranks)
                .map(|r| {
                    let a = gemm_rs_args(r, ranks, (70, 72, 48), (bm, bn));
                    if tables {
                        with_tables(a, symmetric, ranks)
                    } else {
                        a
                    }
                })
                .collect();
            tl_sim::run_ranks(&lowered, &mut args, &SimOptions::default()).expect("sim");
            args.iter().flat_map(|a| a[4].to_f64(F32)).collect()
        })
        .collect();
    assert!(symmetric >= 2, "{:?}", names(&rs_tabled));
    assert_eq!(outs[0], outs[1]);

    if tl_nvrtc::testing::nvrtc_or_skip("flat_kernels_take_peer_tables_after_the_fact").is_none() {
        return;
    }
    for target in TARGETS {
        // A peer's address: the table's entry less this rank's own address (`sub.s64`).
        let ptx = tabled.emit_ptx(target).expect("ptx");
        let subs = |p: &str| p.matches("sub.s64").count();
        assert!(
            subs(&ptx) > subs(&flat.emit_ptx(target).expect("ptx")),
            "{ptx}"
        );
        tl_nvrtc::check_with(&ptx, &target.arch(), &tl_nvrtc::CheckOptions::default())
            .unwrap_or_else(|e| panic!("{target}: {e}"));
        let cuda = tabled.emit_general(target).expect("cuda");
        assert!(cuda.contains("tl_peer_table("), "{cuda}");
        tl_nvrtc::check(&cuda, &target.arch()).unwrap_or_else(|e| panic!("{target}: {e}"));
    }
}
