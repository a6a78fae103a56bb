//! Multi-rank kernels built from the distributed tile primitives (`k.symmetric`, `put_block`,
//! signals and waits), each checked against a single-device reference.

use crate::dsl::SignalOp;
use crate::ir::{MemScope, MemSem};
use crate::prelude::*;

/// ⌈a/b⌉ of positive values by truncating division, which every backend prints for a
/// symbolic divisor (floor division by a value of unknown sign is not).
fn ceil_div_positive(a: Expr, b: Expr) -> Expr {
    Expr::binary(crate::ir::BinOp::Div, a + b.clone() - 1, b)
}

/// What every flag a kernel waits on counts per call, however many blocks arrive on it: each
/// of `parts` contributors adds 1 and the last adds the rest ([`arrival`]). A flag thus
/// reaches `epoch · ARRIVALS_PER_CALL` (mod 2^32) exactly when the call's contributors have
/// all arrived, whatever their number in this call or the earlier ones: calls that share the
/// flags may change their shapes (the tokens of a MoE dispatch, `N` of an all-gather GEMM),
/// and ranks may differ in theirs. At most 2^30 contributors; a flag is never more than one
/// call's count away from its waiter's target, so the wrap-safe waits (differences below
/// 2^31) hold.
pub const ARRIVALS_PER_CALL: i64 = 1 << 30;

/// The count a flag reaches after `epoch` calls, modulo 2^32 (an unsigned product: no signed
/// overflow once the counts wrap around, which the counter waits compare through).
fn calls_done(epoch: &Expr) -> Expr {
    epoch.cast(DType::U32) * Expr::int(ARRIVALS_PER_CALL).cast(DType::U32)
}

/// What contributor `part` of `parts` (`0 ≤ part < parts ≤ 2^30`) adds to a flag: 1, and the
/// last the rest of [`ARRIVALS_PER_CALL`].
fn arrival(part: &Expr, parts: &Expr) -> Expr {
    select(
        part.eq_(parts.clone() - 1),
        Expr::int(ARRIVALS_PER_CALL) - (parts.clone() - 1),
        1,
    )
}

/// `(a + b) mod n` for `a, b ≥ 0` with `a + b < 2n`, without a division (every backend prints
/// it).
fn add_mod(a: Expr, b: Expr, n: Expr) -> Expr {
    let sum = a + b;
    select(sum.ge(&n), sum.clone() - n, sum)
}

/// Back-to-back calls: a rank may start call `e + 1` while a peer still runs call `e`, so it
/// must not push into that peer's buffers before the peer has finished reading them (nor pull
/// from them before the peer has written them for this call: the pulling all-gather). Each
/// kernel that pushes therefore opens with an entry handshake on a symmetric `READY` (`[R]`
/// i32, zero before the first call): a rank that has entered call `e` — so everything it read
/// in earlier calls is done, by stream order — stores `e` into `READY[rank]` of each rank that
/// pushes to it (a release at system scope, by thread 0 of one block per source), and a block
/// waits for `READY[peer] ≥ e` here before it pushes to `peer`. A block announces before it
/// waits, so no wait depends on a block that waits first.
fn announce_entry(t: &mut TileScope, ready: &Buffer, rank: &Expr, src: &Expr, epoch: &Expr) {
    let tid = t.thread_idx();
    t.if_(tid.eq_(0), |t| {
        t.signal(
            ready.at([rank.clone()]),
            src.clone(),
            epoch.clone(),
            SignalOp::Set,
        );
    });
}

/// Wait (thread 0, then a block barrier) until rank `peer` has entered this call: see
/// [`announce_entry`].
fn await_entry(t: &mut TileScope, ready: &Buffer, peer: &Expr, epoch: &Expr) {
    let tid = t.thread_idx();
    t.if_(tid.eq_(0), |t| {
        t.wait_counter(ready.at([peer.clone()]), epoch.clone());
    });
    t.sync_threads();
}

/// Part `part` of `parts` of a run of `len` elements, `[lo, hi)`: parts of whole 16-byte
/// units (8 elements cover every element size), so every part's start stays aligned for
/// vector copies; the last parts may be empty.
fn vector_part(t: &mut TileScope, part: &Expr, parts: Expr, len: &Expr) -> (Expr, Expr) {
    let share = ceil_div_positive(len.clone(), parts * 8) * 8;
    let lo = t.let_("lo", min(part * &share, len.clone()));
    let hi = t.let_("hi", min(&lo + &share, len.clone()));
    (lo, hi)
}

/// After this block's pushes to rank `peer`: a block barrier, then one thread adds its
/// [`arrival`] (contributor `part` of `parts`) to `peer`'s `flags[rank]` (a release) and waits
/// until `flags[peer]` here has counted every call's arrivals from `peer` up to this one (a
/// wrap-safe counter), and a block barrier hands that on to every thread.
fn arrive_and_await(
    t: &mut TileScope,
    flags: &Buffer,
    (rank, peer): (&Expr, &Expr),
    epoch: &Expr,
    (part, parts): (&Expr, &Expr),
) {
    t.sync_threads();
    let tid = t.thread_idx();
    t.if_(tid.eq_(0), |t| {
        t.signal(
            flags.at([rank.clone()]),
            peer.clone(),
            arrival(part, parts),
            SignalOp::Add,
        );
        t.wait_counter(flags.at([peer.clone()]), calls_done(epoch));
    });
    t.sync_threads();
}

/// Blocks that push one rank's shard to one peer in [`all_gather`]: one block moves about
/// 5–9 GB/s over NVLink, so it takes dozens per peer to fill the links — on 4 H100s, 16 per
/// peer gathered 64 MiB per rank at 272 GB/s of bus bandwidth, 64 at 334 (NCCL 314); between
/// two, 16 reached 138 and 64 reached 299 (docs/performance.md). Every block of the grid must
/// be resident at once (each waits for a peer's blocks): `64 · R` blocks of 256 threads need
/// 2 per SM of an H100's 132 on 4 GPUs and 4 on 8 (not run: no 8-GPU machine was lent).
pub const ALL_GATHER_BLOCKS_PER_PEER: i64 = 64;

/// All-gather: every rank's `X` (`[N]`) lands in row `rank` of every rank's symmetric `OUT`
/// (`[R, N]`, `R` the number of ranks). The grid is `[G, R]` (`G` =
/// [`ALL_GATHER_BLOCKS_PER_PEER`]): block `(g, p)` pushes part `g` of this rank's shard to rank
/// `p`, then one thread adds its share of a call's count ([`ARRIVALS_PER_CALL`]) to rank `p`'s
/// `FLAGS[rank]` (a release) and waits until all `G` parts of rank `p`'s shard have arrived
/// here (`FLAGS[p] ≥ epoch · ARRIVALS_PER_CALL`): when the kernel ends, this rank's `OUT` is
/// complete. `epoch` grows by one per call, so the flags never need a reset. Before pushing,
/// block `(g, p)` waits until rank `p` has entered this call (the entry handshake of
/// [`announce_entry`]: block `(0, p)` announces to rank `p`), so back-to-back calls need no
/// barrier between them.
///
/// Arguments: `X`, `OUT`, `FLAGS` (`[R]` i32, symmetric, zero before the first call), `READY`
/// (`[R]` i32, symmetric, zero before the first call), `epoch`, then the scalars every
/// distributed kernel ends with: `rank`, `num_ranks`, `heap_stride`.
pub fn all_gather(dtype: DType, threads: u32) -> Kernel {
    all_gather_with(
        dtype,
        threads,
        false,
        Transfer::PUT_BLOCK,
        ALL_GATHER_BLOCKS_PER_PEER,
    )
}

/// [`all_gather`] addressing peers through tables (torch's symmetric memory, or any library
/// that maps the peers' buffers itself): after `epoch` come `OUT_peers`, `FLAGS_peers` and
/// `READY_peers` (`[NR]` i64, every rank's address of its `OUT`, `FLAGS` and `READY`), then
/// `rank`, `num_ranks`, `heap_stride` (unused).
pub fn all_gather_peer_tables(dtype: DType, threads: u32) -> Kernel {
    all_gather_with(
        dtype,
        threads,
        true,
        Transfer::PUT_BLOCK,
        ALL_GATHER_BLOCKS_PER_PEER,
    )
}

/// How the shards move in [`all_gather_by`]: pushed into the peers' buffers or pulled from
/// them, by whole blocks or by each warp on its own run. The four compare the distributed
/// copy primitives' bandwidth on the same exchange (docs/performance.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transfer {
    /// Pull (`get_*`) instead of push (`put_*`).
    pub get: bool,
    /// Each warp copies its own run (`*_warp`) instead of the whole block one (`*_block`).
    pub warp: bool,
}

impl Transfer {
    pub const PUT_BLOCK: Transfer = Transfer {
        get: false,
        warp: false,
    };
    pub const PUT_WARP: Transfer = Transfer {
        get: false,
        warp: true,
    };
    pub const GET_BLOCK: Transfer = Transfer {
        get: true,
        warp: false,
    };
    pub const GET_WARP: Transfer = Transfer {
        get: true,
        warp: true,
    };

    /// `put-block`, `put-warp`, `get-block` or `get-warp`.
    pub fn parse(name: &str) -> Option<Transfer> {
        Some(match name {
            "put-block" => Self::PUT_BLOCK,
            "put-warp" => Self::PUT_WARP,
            "get-block" => Self::GET_BLOCK,
            "get-warp" => Self::GET_WARP,
            _ => return None,
        })
    }
}

/// [`all_gather`] with the shards moved as `how` says, by `blocks_per_peer` blocks per peer. A
/// pull reads the peer's `X`, so with `how.get` the kernel's `X` is symmetric too, and each
/// block's arrival tells the peer that its shard has been read (the peer's kernel ends only
/// when every reader is done with its `X`), where a push's tells it that the shard has landed;
/// the arguments are the same.
pub fn all_gather_by(dtype: DType, threads: u32, how: Transfer, blocks_per_peer: i64) -> Kernel {
    all_gather_with(dtype, threads, false, how, blocks_per_peer.max(1))
}

fn all_gather_with(
    dtype: DType,
    threads: u32,
    tables: bool,
    how: Transfer,
    blocks_per_peer: i64,
) -> Kernel {
    let g = blocks_per_peer;
    // Parts per peer: one per block, or one per warp of each block.
    let warps = if how.warp {
        i64::from(threads / 32).max(1)
    } else {
        1
    };
    Kernel::build("all_gather", |k| {
        if tables {
            k.peer_tables();
        }
        let (r, n) = (k.ranks_dim("R"), k.dim("N"));
        let x = if how.get {
            k.symmetric("X", [&n], dtype)
        } else {
            k.input("X", [&n], dtype)
        };
        let out = k.symmetric("OUT", [&r, &n], dtype);
        let flags = k.symmetric("FLAGS", [&r], I32);
        let ready = k.symmetric("READY", [&r], I32);
        let d = k.distributed();
        let epoch = k.scalar("epoch", I32);
        k.launch(
            [Expr::int(g), d.num_ranks.clone()],
            threads,
            |t, [block, p]| {
                t.if_(block.eq_(0), |t| {
                    announce_entry(t, &ready, &d.rank, &p, &epoch)
                });
                await_entry(t, &ready, &p, &epoch);
                let part = if how.warp {
                    let lane_major = t.thread_idx() / 32;
                    let warp = t.let_("warp", lane_major);
                    &block * warps + warp
                } else {
                    block.clone()
                };
                let (lo, hi) = vector_part(t, &part, Expr::int(g * warps), &n);
                // A push writes this rank's row of the peer's OUT, a pull the peer's row of
                // this rank's.
                let row = if how.get { p.clone() } else { d.rank.clone() };
                let (src, dst, count) = (x.at([lo.clone()]), out.at([row, lo.clone()]), &hi - &lo);
                match (how.get, how.warp) {
                    (false, false) => t.put_block(src, dst, count, p.clone()),
                    (false, true) => t.put_warp(src, dst, count, p.clone()),
                    (true, false) => t.get_block(src, dst, count, p.clone()),
                    (true, true) => t.get_warp(src, dst, count, p.clone()),
                }
                arrive_and_await(t, &flags, (&d.rank, &p), &epoch, (&block, &Expr::int(g)));
            },
        );
    })
}

/// Tiles of the all-gather + GEMM.
#[derive(Clone, Copy, Debug)]
pub struct AgGemmConfig {
    pub bm: i64,
    pub bn: i64,
    pub bk: i64,
    pub stages: u32,
    pub threads: u32,
    /// A producer warpgroup for the GEMM's TMA loads (sm_90a, aligned sizes; it repeats the
    /// consumers' waits before its loads). On 4 H100s it made AG + GEMM at N = 28672 and
    /// GEMM + RS at K = 28672 15–23% slower with tiles walked row by row, and 4–14% faster
    /// with panel rasterization ([`AgGemmConfig::hopper`] has both; docs/performance.md).
    pub warp_specialize: bool,
    /// Rasterize the GEMM's tiles in panels of this many row tiles (`use_swizzle`, within
    /// each z of the grid), so the blocks resident at once share `B` tiles in L2; 0 or 1: row
    /// by row.
    pub panel: u32,
}

impl AgGemmConfig {
    pub fn tiles(bm: i64, bn: i64, bk: i64, stages: u32, threads: u32) -> AgGemmConfig {
        AgGemmConfig {
            bm,
            bn,
            bk,
            stages,
            threads,
            warp_specialize: false,
            panel: 0,
        }
    }

    /// The same tiles rasterized in panels of `panel` row tiles (see `panel`).
    pub fn panels(self, panel: u32) -> AgGemmConfig {
        AgGemmConfig { panel, ..self }
    }

    /// The fastest found on 4 H100s at the tensor-parallel shapes: 128×256×64 tiles in 3
    /// stages, two consumer warpgroups and a producer one, rasterized in panels of 8 row tiles.
    pub fn hopper() -> AgGemmConfig {
        AgGemmConfig::tiles(128, 256, 64, 3, 256)
            .specialized()
            .panels(8)
    }

    /// The same tiles with a producer warpgroup (see `warp_specialize`).
    pub fn specialized(self) -> AgGemmConfig {
        AgGemmConfig {
            warp_specialize: true,
            ..self
        }
    }
}

/// All-gather + GEMM, overlapped in one kernel (tensor parallelism's column-parallel layer):
/// rank `r` holds `A` (`[M, K]`, its rows of the activations) and `B` (`[N, K]`, its columns of
/// the weights, NT); every rank computes `C[s] = A_s · Bᵀ` for every rank's shard `A_s`.
///
/// The grid is `[⌈N/bn⌉, ⌈M/bm⌉, 2R]`. Blocks with `z < R` produce: block `(x, y, p)` pushes
/// its share of row tile `y` of this rank's `A` — a contiguous run of whole rows — into row
/// tile `y` of rank `p`'s gathered copy `AG[rank]`, then adds its share of a call's count
/// ([`ARRIVALS_PER_CALL`]) to rank `p`'s `FLAGS[rank, y]` with a release at system scope.
/// Blocks with `z = R + s` consume: block `(x, y, R + s)` waits until `FLAGS[s, y]` has all
/// `⌈N/bn⌉` shares of this call (`epoch · ARRIVALS_PER_CALL`: the flags count up across calls
/// and need no reset), then computes output tile `(y, x)` of `C[s]` from `AG[s]` as a
/// pipelined GEMM. A consumer waits only for the rows its tile reads, so tiles of shards that
/// have arrived run while the rest is in flight. A producer pushes only once its peer has
/// entered this call (the entry handshake of [`announce_entry`]; producer block `(0, 0, z)`
/// announces to rank `rank − z`), since the peer's consumers of the previous call may still
/// read `AG`.
///
/// Arguments: `A`, `B`, `AG` (`[R, M, K]`, symmetric), `C` (`[R, M, N]`), `FLAGS` (`[R, TM]`
/// i32 with `TM ≥ ⌈M/bm⌉`, symmetric, zero before the first call), `READY` (`[R]` i32,
/// symmetric, zero before the first call), `epoch` (1, 2, … per call), then `rank`,
/// `num_ranks`, `heap_stride`.
///
/// Calls on one `FLAGS` and `READY` may change `M` (up to `TM` row tiles) and `N`: every call
/// completes every flag's count — the producers of a row tile add up to one call's count
/// whatever their number, and one block adds a whole call's to the row tiles past this
/// call's `M`.
pub fn ag_gemm(dtype: DType, cfg: AgGemmConfig) -> Kernel {
    ag_gemm_out(dtype, cfg, F32)
}

/// [`ag_gemm`] with `C` of type `out` (the f32 accumulators rounded once, at the store): bf16
/// halves the bytes the epilogue writes, and is what a bf16 GEMM after an all-gather returns.
pub fn ag_gemm_out(dtype: DType, cfg: AgGemmConfig, out: DType) -> Kernel {
    let AgGemmConfig {
        bm,
        bn,
        bk,
        stages,
        threads,
        warp_specialize: ws,
        panel,
    } = cfg;
    Kernel::build("ag_gemm", |k| {
        let (r, m, n, kd) = (k.ranks_dim("R"), k.dim("M"), k.dim("N"), k.dim("K"));
        let tiles_m = k.dim("TM");
        let a = k.input("A", [&m, &kd], dtype);
        let b = k.input("B", [&n, &kd], dtype);
        let ag = k.symmetric("AG", [&r, &m, &kd], dtype);
        let c = k.output("C", [&r, &m, &n], out);
        let flags = k.symmetric("FLAGS", [&r, &tiles_m], I32);
        let ready = k.symmetric("READY", [&r], I32);
        let epoch = k.scalar("epoch", I32);
        let d = k.distributed();
        let tiles_n = ceildiv(&n, bn);
        k.launch(
            [tiles_n.clone(), ceildiv(&m, bm), d.num_ranks.clone() * 2],
            threads,
            |t, [bx, by, bz]| {
                // With a producer warpgroup, it repeats the consumers' wait for the gathered
                // rows before its TMA loads.
                if ws {
                    t.warp_specialize(true);
                }
                if panel > 1 {
                    t.use_swizzle(panel);
                }
                let tid = t.thread_idx();
                t.if_(bz.lt(&d.num_ranks), |t| {
                    // Producer: rows [lo, hi) of row tile `by`, this block's share.
                    // ⌈bm / tiles_n⌉ by truncating division (both positive), which every
                    // backend prints for a symbolic divisor.
                    let share = ceil_div_positive(Expr::int(bm), tiles_n.clone());
                    let lo = t.let_("lo", min(&by * bm + &bx * &share, m.clone()));
                    let hi = t.let_(
                        "hi",
                        min(&by * bm + (&bx + 1) * &share, min(&by * bm + bm, m.clone())),
                    );
                    let rows = t.let_("rows", max(&hi - &lo, 0));
                    // Rank `rank + z` (mod R): the ranks push to different peers at once
                    // (no incast on one NVLink port), and z = 0 is the local copy.
                    let peer = t.let_(
                        "peer",
                        add_mod(d.rank.clone(), bz.clone(), d.num_ranks.clone()),
                    );
                    t.if_(bx.eq_(0).and(by.eq_(0)), |t| {
                        // Rank `rank − z` pushes here from its blocks of this z.
                        let src = add_mod(
                            d.rank.clone(),
                            d.num_ranks.clone() - &bz,
                            d.num_ranks.clone(),
                        );
                        announce_entry(t, &ready, &d.rank, &src, &epoch);
                    });
                    await_entry(t, &ready, &peer, &epoch);
                    t.put_block(
                        a.at([lo.clone(), Expr::int(0)]),
                        ag.at([d.rank.clone(), lo.clone(), Expr::int(0)]),
                        &rows * &kd,
                        peer.clone(),
                    );
                    t.sync_threads();
                    t.if_(tid.eq_(0), |t| {
                        t.signal(
                            flags.at([d.rank.clone(), by.clone()]),
                            peer.clone(),
                            arrival(&bx, &tiles_n),
                            SignalOp::Add,
                        );
                        // The row tiles of `FLAGS` past this call's `M` get a whole call's
                        // count from one block, so that a later, taller call finds them in
                        // step with the rest.
                        t.if_(bx.eq_(0).and(by.eq_(0)), |t| {
                            let used = ceildiv(&m, bm);
                            t.serial(max(&tiles_m - &used, 0), |t, i| {
                                t.signal(
                                    flags.at([d.rank.clone(), &used + &i]),
                                    peer.clone(),
                                    ARRIVALS_PER_CALL,
                                    SignalOp::Add,
                                );
                            });
                        });
                    });
                })
                .else_(|t| {
                    // Consumer: output tile (by, bx) of C[s], this rank's own shard first
                    // (it arrives first: a local copy), then the next ranks' in turn.
                    let s = t.let_(
                        "s",
                        add_mod(d.rank.clone(), &bz - &d.num_ranks, d.num_ranks.clone()),
                    );
                    t.if_(tid.eq_(0), |t| {
                        t.wait_counter(flags.at([s.clone(), by.clone()]), calls_done(&epoch));
                    });
                    t.sync_threads();
                    let a_s = t.alloc_shared_named("A_s", [bm, bk], dtype);
                    let b_s = t.alloc_shared_named("B_s", [bn, bk], dtype);
                    let acc = t.alloc_fragment_named("acc", [bm, bn], F32);
                    t.clear(&acc);
                    t.pipelined(ceildiv(&kd, bk), stages, |t, ko| {
                        t.copy(ag.tile([s.clone(), &by * bm, &ko * bk]), &a_s);
                        t.copy(b.tile([&bx * bn, &ko * bk]), &b_s);
                        t.gemm(&a_s, &b_s, &acc).transpose_b();
                    });
                    t.copy(&acc, c.tile([s.clone(), &by * bm, &bx * bn]));
                });
            },
        );
    })
}

/// One-shot all-reduce (sum) for small messages: every rank's `X` (`[N]`, symmetric) summed
/// into every rank's `Y`. Block `b` handles elements `[b·block, (b+1)·block)`: a barrier with
/// block `b` of every rank (their `X` is ready), each thread reads its element from every
/// rank's `X` and adds them, and a second barrier keeps any rank from changing its `X` while a
/// peer may still read it.
///
/// Arguments: `X`, `Y`, `BAR` (`[G, R]` i32, symmetric, zero before the first call, `G` the
/// number of blocks `⌈N/block⌉`), then `rank`, `num_ranks`, `heap_stride`.
pub fn all_reduce(block: i64, threads: u32) -> Kernel {
    Kernel::build("all_reduce", |k| {
        let (r, n, g) = (k.ranks_dim("R"), k.dim("N"), k.dim("G"));
        let x = k.symmetric("X", [&n], F32);
        let y = k.output("Y", [&n], F32);
        let bar = k.symmetric("BAR", [&g, &r], I32);
        let d = k.distributed();
        k.launch([ceildiv(&n, block)], threads, |t, [bx]| {
            t.barrier_ranks(&bar, bx.clone());
            t.parallel([block], |t, [i]| {
                let e = &bx * block + &i;
                t.if_(e.lt(&n), |t| {
                    t.store(&y, [e.clone()], Expr::float(0.0));
                    t.serial(&d.num_ranks, |t, p| {
                        let v = t.ld(x.at([e.clone()]), Some(p), MemSem::Weak, MemScope::Sys);
                        t.store(&y, [e.clone()], y.at([e.clone()]) + v);
                    });
                });
            });
            t.barrier_ranks(&bar, bx.clone());
        });
    })
}

/// GEMM + reduce-scatter, overlapped in one kernel (tensor parallelism's row-parallel layer):
/// rank `r` holds its slice of the reduction dim, `A` (`[R, MQ, K]`: row block `q` is the rows
/// rank `q` keeps) and `B` (`[N, K]`, NT); rank `q` receives `C = Σ_r A_r[q] · B_rᵀ`
/// (`[MQ, N]`).
///
/// The grid is `[TN, TM, R + 1]` (`TM = ⌈MQ/bm⌉`, `TN = ⌈N/bn⌉`). Blocks with `z < R`
/// compute output tile `(y, x)` of this rank's partial product for rank `q = rank + 1 + z`
/// (mod R: the ranks push to different peers at once, and each computes its own partials
/// last), stage it in this rank's `STAGE[q, y, x]`, push the whole tile — one contiguous run
/// of `bm·bn` values, so every thread of the block copies — into rank `q`'s
/// `PART[rank, y, x]`, and add its share of a call's count ([`ARRIVALS_PER_CALL`]: the ranks
/// are the contributors) to rank `q`'s `FLAGS[y, x]` (a release at system scope). Blocks with
/// `z = R` reduce: block `(x, y, R)` waits until its tile has all `R` shares of this call
/// (`epoch · ARRIVALS_PER_CALL`), sums the partials in registers and stores the tile of `C`
/// — one reducer per tile. Reducers of tiles whose partials have arrived run while other
/// tiles are still being computed. A tile is pushed only once rank `q` has entered this call
/// (the entry handshake of [`announce_entry`]: block `(0, 0, z)` announces to rank
/// `rank − 1 − z`), since `q`'s reducers of the previous call may still read `PART`.
///
/// Arguments: `A`, `B`, `STAGE` (`[R, TM, TN, bm, bn]` f32, scratch), `PART` (`[R, TM, TN,
/// bm, bn]` f32, symmetric), `C` (`[MQ, N]` f32), `FLAGS` (`[TM, TN]` i32, symmetric, zero
/// before the first call), `READY` (`[R]` i32, symmetric, zero before the first call),
/// `epoch`, then `rank`, `num_ranks`, `heap_stride`.
///
/// The grid covers all of `FLAGS` (`PART`'s tiles), so every call completes every flag's
/// count and calls on one `FLAGS` may change `MQ` and `N` within those tiles.
pub fn gemm_rs(dtype: DType, cfg: AgGemmConfig) -> Kernel {
    gemm_rs_partials(dtype, cfg, F32)
}

/// [`gemm_rs`] with partial tiles of type `partial` in `STAGE` and `PART` (the reducer still
/// sums in f32): bf16 halves the bytes every rank pushes, as a bf16 GEMM followed by NCCL's
/// bf16 reduce-scatter does — with the same rounding of each partial to bf16.
pub fn gemm_rs_partials(dtype: DType, cfg: AgGemmConfig, partial: DType) -> Kernel {
    let AgGemmConfig {
        bm,
        bn,
        bk,
        stages,
        threads,
        warp_specialize: ws,
        panel,
    } = cfg;
    Kernel::build("gemm_rs", |k| {
        let (r, mq, n, kd) = (k.ranks_dim("R"), k.dim("MQ"), k.dim("N"), k.dim("K"));
        let (tm, tn) = (k.dim("TM"), k.dim("TN"));
        let a = k.input("A", [&r, &mq, &kd], dtype);
        let b = k.input("B", [&n, &kd], dtype);
        let tiled = [
            r.clone(),
            tm.clone(),
            tn.clone(),
            Expr::int(bm),
            Expr::int(bn),
        ];
        let stage = k.inout("STAGE", tiled.clone(), partial);
        let part = k.symmetric("PART", tiled, partial);
        let c = k.output("C", [&mq, &n], F32);
        let flags = k.symmetric("FLAGS", [&tm, &tn], I32);
        let ready = k.symmetric("READY", [&r], I32);
        let epoch = k.scalar("epoch", I32);
        let d = k.distributed();
        k.launch(
            [tn.clone(), tm.clone(), d.num_ranks.clone() + 1],
            threads,
            |t, [bx, by, bz]| {
                if ws {
                    t.warp_specialize(true);
                }
                if panel > 1 {
                    t.use_swizzle(panel);
                }
                let tid = t.thread_idx();
                let zero = Expr::int(0);
                t.if_(bz.lt(&d.num_ranks), |t| {
                    let q = t.let_(
                        "q",
                        add_mod(d.rank.clone() + 1, bz.clone(), d.num_ranks.clone()),
                    );
                    t.if_(bx.eq_(0).and(by.eq_(0)), |t| {
                        // Rank `rank − 1 − z` pushes here from its blocks of this z.
                        let src = add_mod(
                            d.rank.clone(),
                            d.num_ranks.clone() - 1 - &bz,
                            d.num_ranks.clone(),
                        );
                        announce_entry(t, &ready, &d.rank, &src, &epoch);
                    });
                    let a_s = t.alloc_shared_named("A_s", [bm, bk], dtype);
                    let b_s = t.alloc_shared_named("B_s", [bn, bk], dtype);
                    let acc = t.alloc_fragment_named("acc", [bm, bn], F32);
                    t.clear(&acc);
                    t.pipelined(ceildiv(&kd, bk), stages, |t, ko| {
                        t.copy(a.tile([q.clone(), &by * bm, &ko * bk]), &a_s);
                        t.copy(b.tile([&bx * bn, &ko * bk]), &b_s);
                        t.gemm(&a_s, &b_s, &acc).transpose_b();
                    });
                    let tile = |buf: &Buffer, s: Expr| {
                        buf.at([s, by.clone(), bx.clone(), zero.clone(), zero.clone()])
                    };
                    t.copy(
                        &acc,
                        stage.tile([
                            q.clone(),
                            by.clone(),
                            bx.clone(),
                            zero.clone(),
                            zero.clone(),
                        ]),
                    );
                    await_entry(t, &ready, &q, &epoch);
                    t.put_block(
                        tile(&stage, q.clone()),
                        tile(&part, d.rank.clone()),
                        Expr::int(bm * bn),
                        q.clone(),
                    );
                    t.sync_threads();
                    t.if_(tid.eq_(0), |t| {
                        // Ranks are the contributors: this one is number `z` of `R`.
                        t.signal(
                            flags.at([by.clone(), bx.clone()]),
                            q.clone(),
                            arrival(&bz, &d.num_ranks),
                            SignalOp::Add,
                        );
                    });
                })
                .else_(|t| {
                    t.if_(tid.eq_(0), |t| {
                        t.wait_counter(flags.at([by.clone(), bx.clone()]), calls_done(&epoch));
                    });
                    t.sync_threads();
                    let sum = t.alloc_fragment_named("sum", [bm, bn], F32);
                    t.clear(&sum);
                    t.serial(&d.num_ranks, |t, s| {
                        t.parallel([bm, bn], |t, [i, j]| {
                            t.store(
                                &sum,
                                [i.clone(), j.clone()],
                                sum.at([i.clone(), j.clone()])
                                    + part.at([s.clone(), by.clone(), bx.clone(), i, j]).cast(F32),
                            );
                        });
                    });
                    t.copy(&sum, c.tile([&by * bm, &bx * bn]));
                });
            },
        );
    })
}

/// Blocks in all that push one rank's rows in [`moe_combine`], spread over the peers (at
/// least [`MOE_COMBINE_MIN_BLOCKS_PER_PEER`] each): one block alone cannot keep an NVLink port
/// busy, and with few peers each needs more (16 per peer between two H100s moved 138 GB/s,
/// against 310 at 16 per peer among four).
pub const MOE_COMBINE_BLOCKS: i64 = 64;
pub const MOE_COMBINE_MIN_BLOCKS_PER_PEER: i64 = 16;

/// Mixture-of-experts dispatch (all-to-all with a count per destination, top-`K` routing):
/// choice `j` of rank `r`'s token `t` (a row of `X`, `[T, H]`) goes to rank `DEST[t, j]` for
/// expert `EXPERT[t, j]`. The rows routed to rank `p` land in rank `p`'s `RECV[rank]` (`[R,
/// CAP, H]`, symmetric) in (token, choice) order, with their experts in `RECV_EXPERT[rank,
/// row]`; `SLOT[t, j]` records the row. When the kernel ends, `RECV[s]` holds the
/// `COUNTS[s]` rows rank `s` routed to this rank. A row past `CAP` is dropped (its `SLOT` is
/// -1), as capacity-limited MoE layers do.
///
/// The grid is `[⌈T/tokens_per_block⌉, R]`: block `(g, p)` takes the tokens of chunk `g` for
/// rank `p`. Its first row is the number of pairs routed to `p` by the earlier chunks — every
/// thread counts a strided share of them, summed in shared memory — and it walks its own
/// chunk's (token, choice) pairs in order, the whole block pushing each row routed to `p`.
/// Then it adds its share of a call's count ([`ARRIVALS_PER_CALL`]) to rank `p`'s
/// `FLAGS[rank]` (a release; the last chunk's block first stores the count into rank `p`'s
/// `COUNTS[rank]`) and waits until all chunks of rank `p` have arrived here (`FLAGS[p]`
/// reaches `epoch · ARRIVALS_PER_CALL`, a wrap-safe counter). A block pushes only once rank
/// `p` has entered this call (the entry handshake of [`announce_entry`]), since rank `p` may
/// still read what the previous call delivered. The ranks' `T` may differ, and change from
/// call to call: a rank's chunks add up to one call's count, however many there are.
///
/// Arguments: `X`, `DEST` (`[T, K]` i32), `EXPERT` (`[T, K]` i32), `SLOT` (`[T, K]` i32, out),
/// `RECV`, `RECV_EXPERT` (`[R, CAP]` i32, symmetric), `COUNTS` (`[R]` i32, symmetric), `FLAGS`
/// (`[R]` i32, symmetric, zero before the first call), `READY` (`[R]` i32, symmetric, zero
/// before the first call), `epoch`, then `rank`, `num_ranks`, `heap_stride`.
pub fn moe_dispatch(dtype: DType, threads: u32, tokens_per_block: i64) -> Kernel {
    moe_dispatch_with(dtype, threads, tokens_per_block, false)
}

/// [`moe_dispatch`] that sends a token once per destination rank, however many of its
/// choices that rank holds (as DeepEP does): with top-8 of 256 experts over 4 ranks a token
/// picks 3.6 ranks on average, so 8 rows shrink to 3.6. Each row carries its choices on the
/// destination: `RECV_EXPERT[rank, row, j]` and `RECV_WEIGHT[rank, row, j]` hold choice `j`'s
/// expert and weight where it went there, -1 and 0 where it did not. The expert side returns
/// one row per received row, `Σ_j RECV_WEIGHT · expert_j(row)`, and [`moe_gather_dedup`]
/// sums those rows over the token's destinations. `SLOT[t, j]` is the row of choice `j`'s
/// destination (the same for choices that share it; -1 where that row was dropped past
/// `CAP`); `COUNTS` counts rows, i.e. tokens.
///
/// Arguments: `X`, `DEST`, `EXPERT` (`[T, K]` i32), `W` (`[T, K]` f32), `SLOT` (`[T, K]` i32,
/// out), `RECV`, `RECV_EXPERT` (`[R, CAP, K]` i32, symmetric), `RECV_WEIGHT` (`[R, CAP, K]`
/// f32, symmetric), `COUNTS`, `FLAGS`, `READY` (as [`moe_dispatch`]'s), `epoch`, then `rank`,
/// `num_ranks`, `heap_stride`.
pub fn moe_dispatch_dedup(dtype: DType, threads: u32, tokens_per_block: i64) -> Kernel {
    moe_dispatch_with(dtype, threads, tokens_per_block, true)
}

fn moe_dispatch_with(dtype: DType, threads: u32, tokens_per_block: i64, dedup: bool) -> Kernel {
    let tc = tokens_per_block.max(1);
    let name = if dedup {
        "moe_dispatch_dedup"
    } else {
        "moe_dispatch"
    };
    Kernel::build(name, |k| {
        let (r, t_n, kk, h, cap) = (
            k.ranks_dim("R"),
            k.dim("T"),
            k.dim("K"),
            k.dim("H"),
            k.dim("CAP"),
        );
        let x = k.input("X", [&t_n, &h], dtype);
        let dest = k.input("DEST", [&t_n, &kk], I32);
        let expert = k.input("EXPERT", [&t_n, &kk], I32);
        let w = dedup.then(|| k.input("W", [&t_n, &kk], F32));
        let slot = k.output("SLOT", [&t_n, &kk], I32);
        let recv = k.symmetric("RECV", [&r, &cap, &h], dtype);
        // Per row: its expert, or with `dedup` its choices' experts and weights.
        let recv_expert = if dedup {
            k.symmetric("RECV_EXPERT", [&r, &cap, &kk], I32)
        } else {
            k.symmetric("RECV_EXPERT", [&r, &cap], I32)
        };
        let recv_weight = dedup.then(|| k.symmetric("RECV_WEIGHT", [&r, &cap, &kk], F32));
        let counts = k.symmetric("COUNTS", [&r], I32);
        let flags = k.symmetric("FLAGS", [&r], I32);
        let ready = k.symmetric("READY", [&r], I32);
        let epoch = k.scalar("epoch", I32);
        let d = k.distributed();
        let chunks = ceildiv(&t_n, tc);
        k.launch(
            [chunks.clone(), d.num_ranks.clone()],
            threads,
            |t, [g, p]| {
                t.if_(g.eq_(0), |t| announce_entry(t, &ready, &d.rank, &p, &epoch));
                await_entry(t, &ready, &p, &epoch);
                let tid = t.thread_idx();
                let to_p = |tok: &Expr, j: &Expr| dest.at([tok.clone(), j.clone()]).eq_(p.clone());
                // `cell` := how many of `tok`'s choices go to `p`.
                let count_to_p = |t: &mut TileScope, tok: &Expr, (cell, at): (&Buffer, &Expr)| {
                    t.store(cell, [at.clone()], 0);
                    t.serial(&kk, |t, j| {
                        let v = cell.at([at.clone()]) + select(to_p(tok, &j), 1, 0);
                        t.store(cell, [at.clone()], v);
                    });
                };
                // Rows routed to `p` by the chunks before this one: (token, choice) pairs, or
                // with `dedup` tokens with a choice there.
                let before = t.alloc_shared_named("before", [1], I32);
                let mine = t.alloc_shared_named("mine", [threads as i64], I32);
                let hits = dedup.then(|| t.alloc_shared_named("hits", [threads as i64], I32));
                t.if_(tid.eq_(0), |t| t.store(&before, [0], 0));
                t.sync_threads();
                let items = if dedup { &g * tc } else { &g * tc * &kk };
                let items = t.let_("items_before", items);
                let per = ceil_div_positive(items.clone(), Expr::int(threads as i64));
                t.parallel([threads as i64], |t, [i]| {
                    t.store(&mine, [i.clone()], 0);
                    t.serial(per.clone(), |t, s| {
                        let at = &s * threads as i64 + &i;
                        t.if_(at.lt(&items), |t| {
                            if let Some(hits) = &hits {
                                count_to_p(t, &at, (hits, &i));
                                t.store(
                                    &mine,
                                    [i.clone()],
                                    mine.at([i.clone()]) + select(hits.at([i.clone()]).gt(0), 1, 0),
                                );
                            } else {
                                let routed = to_p(
                                    &Expr::binary(crate::ir::BinOp::Div, at.clone(), kk.clone()),
                                    &Expr::binary(crate::ir::BinOp::Mod, at.clone(), kk.clone()),
                                );
                                t.store(
                                    &mine,
                                    [i.clone()],
                                    mine.at([i.clone()]) + select(routed, 1, 0),
                                );
                            }
                        });
                    });
                    t.atomic_add_at(before.at([0]), mine.at([i.clone()]));
                });
                t.sync_threads();
                let n = t.alloc_var(I32);
                t.store(&n, [0], before.at([0]));
                // Push `tok` as the next row to `p` (or drop it past CAP): for choice `j`, or
                // with `dedup` (`None`) for all its choices there.
                let push = |t: &mut TileScope, tok: &Expr, choice: Option<&Expr>| {
                    let row = t.let_("row", n.at([0]));
                    t.if_(row.lt(&cap), |t| {
                        t.put_block(
                            x.at([tok.clone(), Expr::int(0)]),
                            recv.at([d.rank.clone(), row.clone(), Expr::int(0)]),
                            &h,
                            p.clone(),
                        );
                        t.if_(tid.eq_(0), |t| {
                            let peer = Some(p.clone());
                            match (choice, &recv_weight, &w) {
                                (Some(j), _, _) => t.st(
                                    recv_expert.at([d.rank.clone(), row.clone()]),
                                    peer,
                                    expert.at([tok.clone(), j.clone()]),
                                    MemSem::Weak,
                                    MemScope::Sys,
                                ),
                                (None, Some(rw), Some(w)) => t.serial(&kk, |t, j| {
                                    let here = to_p(tok, &j);
                                    let at = [d.rank.clone(), row.clone(), j.clone()];
                                    let e = expert.at([tok.clone(), j.clone()]);
                                    let wt = w.at([tok.clone(), j.clone()]);
                                    t.st(
                                        recv_expert.at(at.clone()),
                                        peer.clone(),
                                        select(here.clone(), e, -1),
                                        MemSem::Weak,
                                        MemScope::Sys,
                                    );
                                    t.st(
                                        rw.at(at),
                                        peer.clone(),
                                        select(here, wt, Expr::float(0.0)),
                                        MemSem::Weak,
                                        MemScope::Sys,
                                    );
                                }),
                                _ => {}
                            }
                        });
                    });
                    let kept = select(row.lt(&cap), row.clone(), -1);
                    match choice {
                        Some(j) => t.store(&slot, [tok.clone(), j.clone()], kept),
                        None => t.serial(&kk, |t, j| {
                            t.if_(to_p(tok, &j), |t| {
                                t.store(&slot, [tok.clone(), j.clone()], kept.clone())
                            });
                        }),
                    }
                    t.store(&n, [0], row + 1);
                };
                t.serial(tc, |t, tt| {
                    let tok = t.let_("tok", &g * tc + &tt);
                    t.if_(tok.lt(&t_n), |t| {
                        if dedup {
                            let c = t.alloc_var(I32);
                            count_to_p(t, &tok, (&c, &Expr::int(0)));
                            t.if_(c.at([0]).gt(0), |t| push(t, &tok, None));
                        } else {
                            t.serial(&kk, |t, j| {
                                t.if_(to_p(&tok, &j), |t| push(t, &tok, Some(&j)));
                            });
                        }
                    });
                });
                // The last chunk's block has seen every row routed to `p`; thread 0 stores the
                // count before its release arrival.
                t.if_(tid.eq_(0).and(g.eq_(chunks.clone() - 1)), |t| {
                    t.st(
                        counts.at([d.rank.clone()]),
                        Some(p.clone()),
                        min(n.at([0]), cap.clone()),
                        MemSem::Relaxed,
                        MemScope::Sys,
                    );
                });
                arrive_and_await(t, &flags, (&d.rank, &p), &epoch, (&g, &chunks));
            },
        );
    })
}

/// Mixture-of-experts combine, the return half of the all-to-all: this rank's expert outputs
/// for the rows rank `s` sent (`YR[s]`, `[R, CAP, H]`, in the order they arrived, `COUNTS[s]`
/// rows) go back to rank `s`'s `BACK[rank]` (`[R, CAP, H]`, symmetric). The grid is `[G, R]`
/// (`G` = max([`MOE_COMBINE_BLOCKS`] / R, [`MOE_COMBINE_MIN_BLOCKS_PER_PEER`])): block
/// `(part, s)` pushes part `part` of the
/// contiguous run to rank `s` and adds 1 to rank `s`'s `FLAGS[rank]` (a release), then waits
/// until all `G` parts of rank `s`'s run have arrived here: when the kernel ends, `BACK[q]`
/// holds the outputs of the rows this rank sent to rank `q`. [`moe_gather`] then weighs them
/// into each token's output. A block pushes only once rank `s` has entered this call (the
/// entry handshake of [`announce_entry`]).
///
/// Arguments: `YR`, `COUNTS` (`[R]` i32, as dispatch left them), `BACK`, `FLAGS` (`[R]` i32,
/// symmetric, zero before the first call), `READY` (`[R]` i32, symmetric, zero before the
/// first call), `epoch`, then `rank`, `num_ranks`, `heap_stride`.
pub fn moe_combine(dtype: DType, threads: u32) -> Kernel {
    Kernel::build("moe_combine", |k| {
        let (r, h, cap) = (k.ranks_dim("R"), k.dim("H"), k.dim("CAP"));
        let yr = k.input("YR", [&r, &cap, &h], dtype);
        let counts = k.input("COUNTS", [&r], I32);
        let back = k.symmetric("BACK", [&r, &cap, &h], dtype);
        let flags = k.symmetric("FLAGS", [&r], I32);
        let ready = k.symmetric("READY", [&r], I32);
        let epoch = k.scalar("epoch", I32);
        let d = k.distributed();
        let g = max(
            Expr::binary(
                crate::ir::BinOp::Div,
                Expr::int(MOE_COMBINE_BLOCKS),
                d.num_ranks.clone(),
            ),
            MOE_COMBINE_MIN_BLOCKS_PER_PEER,
        );
        k.launch([g.clone(), d.num_ranks.clone()], threads, |t, [part, s]| {
            t.if_(part.eq_(0), |t| {
                announce_entry(t, &ready, &d.rank, &s, &epoch)
            });
            await_entry(t, &ready, &s, &epoch);
            let len = t.let_("len", counts.at([s.clone()]) * h.clone());
            let (lo, hi) = vector_part(t, &part, g.clone(), &len);
            // Element `lo` of the run as (row, column): every index stays within its extent.
            let (row, col) = (
                Expr::binary(crate::ir::BinOp::Div, lo.clone(), h.clone()),
                Expr::binary(crate::ir::BinOp::Mod, lo.clone(), h.clone()),
            );
            t.if_(hi.gt(&lo), |t| {
                t.put_block(
                    yr.at([s.clone(), row.clone(), col.clone()]),
                    back.at([d.rank.clone(), row, col]),
                    &hi - &lo,
                    s.clone(),
                );
            });
            arrive_and_await(t, &flags, (&d.rank, &s), &epoch, (&part, &g));
        });
    })
}

/// The last step of the MoE layer, on one rank (no peers): `Y[t] = Σ_j W[t, j] · BACK[DEST[t,
/// j], SLOT[t, j]]` in f32, a dropped choice (`SLOT` -1) adding nothing.
///
/// Arguments: `BACK` (`[R, CAP, H]`), `DEST`, `SLOT` (`[T, K]` i32), `W` (`[T, K]` f32), `Y`
/// (`[T, H]`).
pub fn moe_gather(dtype: DType, threads: u32, block_h: i64) -> Kernel {
    moe_gather_with(dtype, threads, block_h, false)
}

/// The gather after [`moe_dispatch_dedup`]: the expert side has weighted each row already, so
/// `Y[t]` sums the token's rows once per destination — `BACK[DEST[t, j], SLOT[t, j]]` over the
/// choices `j` whose destination no earlier choice had (a dropped row, `SLOT` -1, adding
/// nothing).
///
/// Arguments: `BACK` (`[R, CAP, H]`), `DEST`, `SLOT` (`[T, K]` i32), `Y` (`[T, H]`).
pub fn moe_gather_dedup(dtype: DType, threads: u32, block_h: i64) -> Kernel {
    moe_gather_with(dtype, threads, block_h, true)
}

fn moe_gather_with(dtype: DType, threads: u32, block_h: i64, dedup: bool) -> Kernel {
    let name = if dedup {
        "moe_gather_dedup"
    } else {
        "moe_gather"
    };
    Kernel::build(name, |k| {
        let (r, t_n, kk, h, cap) = (k.dim("R"), k.dim("T"), k.dim("K"), k.dim("H"), k.dim("CAP"));
        let back = k.input("BACK", [&r, &cap, &h], dtype);
        let dest = k.input("DEST", [&t_n, &kk], I32);
        let slot = k.input("SLOT", [&t_n, &kk], I32);
        let w = (!dedup).then(|| k.input("W", [&t_n, &kk], F32));
        let y = k.output("Y", [&t_n, &h], dtype);
        k.launch(
            [ceildiv(&h, block_h), t_n.clone()],
            threads,
            |t, [bx, tok]| {
                // Each thread's elements are contiguous columns: the rows come in by tile copies
                // (vector loads where the variant's alignment allows, the edge predicated).
                let acc = t.alloc_fragment_named("acc", [block_h], F32);
                let vals = t.alloc_fragment_named("vals", [block_h], dtype);
                t.clear(&acc);
                t.serial(&kk, |t, j| {
                    // The choice's row, read once for the block, and nothing to add for a
                    // dropped one.
                    let p = t.let_("p", dest.at([tok.clone(), j.clone()]));
                    let row = t.let_("row", slot.at([tok.clone(), j.clone()]));
                    // The choice's weight, or with the rows weighted already 1 for the first
                    // choice of each destination and 0 for the others.
                    let wt = match &w {
                        Some(w) => t.let_("wt", w.at([tok.clone(), j.clone()])),
                        None => {
                            let seen = t.alloc_var(I32);
                            t.store(&seen, [0], 0);
                            t.serial(j.clone(), |t, i| {
                                let same = dest.at([tok.clone(), i]).eq_(p.clone());
                                t.store(&seen, [0], seen.at([0]) + select(same, 1, 0));
                            });
                            select(seen.at([0]).eq_(0), Expr::float(1.0), Expr::float(0.0))
                        }
                    };
                    t.if_(row.ge(0), |t| {
                        t.copy(back.tile((p.clone(), row.clone(), &bx * block_h)), &vals);
                        t.parallel([block_h], |t, [i]| {
                            let v =
                                acc.at([i.clone()]) + wt.clone() * vals.at([i.clone()]).cast(F32);
                            t.store(&acc, [i.clone()], v);
                        });
                    });
                });
                t.parallel([block_h], |t, [i]| {
                    t.store(&vals, [i.clone()], acc.at([i.clone()]).cast(dtype));
                });
                t.copy(&vals, y.tile((tok.clone(), &bx * block_h)));
            },
        );
    })
}

/// Two-shot all-reduce (sum), for messages too large for [`all_reduce`]'s every-rank-reads-
/// everything: rank `r` owns chunk `r` (`C = ⌈N/R⌉` elements). First each rank sums its chunk
/// over all ranks' `X` into its `RED` (a reduce-scatter), then each rank reads every chunk
/// from its owner's `RED` into `Y` (an all-gather): every element crosses the links twice
/// instead of `R` times. Block `b` handles offsets `[b·block, (b+1)·block)` of every chunk; a
/// barrier with block `b` of every rank precedes each phase and follows the last.
///
/// Arguments: `X` (`[N]`, symmetric), `RED` (`[N]`, symmetric scratch), `Y` (`[N]`), `BAR`
/// (`[G, R]` i32, symmetric, zero before the first call; `G = ⌈C/block⌉` blocks), then `rank`,
/// `num_ranks`, `heap_stride`.
pub fn all_reduce_two_shot(block: i64, threads: u32) -> Kernel {
    Kernel::build("all_reduce_two_shot", |k| {
        let (r, n, g) = (k.ranks_dim("R"), k.dim("N"), k.dim("G"));
        let x = k.symmetric("X", [&n], F32);
        let red = k.symmetric("RED", [&n], F32);
        let y = k.output("Y", [&n], F32);
        let bar = k.symmetric("BAR", [&g, &r], I32);
        let d = k.distributed();
        let chunk = ceil_div_positive(n.clone(), d.num_ranks.clone());
        k.launch([ceildiv(chunk.clone(), block)], threads, |t, [bx]| {
            let c = t.let_("chunk_len", chunk.clone());
            t.barrier_ranks(&bar, bx.clone());
            // Reduce-scatter: this rank's chunk, summed over every rank's X.
            t.parallel([block], |t, [i]| {
                let e = &bx * block + &i;
                let at = d.rank.clone() * c.clone() + e.clone();
                t.if_(e.lt(&c).and(at.lt(&n)), |t| {
                    t.store(&red, [at.clone()], Expr::float(0.0));
                    t.serial(&d.num_ranks, |t, p| {
                        let v = t.ld(x.at([at.clone()]), Some(p), MemSem::Weak, MemScope::Sys);
                        t.store(&red, [at.clone()], red.at([at.clone()]) + v);
                    });
                });
            });
            t.barrier_ranks(&bar, bx.clone());
            // All-gather: every chunk from its owner.
            t.parallel([block], |t, [i]| {
                let e = &bx * block + &i;
                t.serial(&d.num_ranks, |t, q| {
                    let at = q.clone() * c.clone() + e.clone();
                    t.if_(e.lt(&c).and(at.lt(&n)), |t| {
                        let v = t.ld(red.at([at.clone()]), Some(q), MemSem::Weak, MemScope::Sys);
                        t.store(&y, [at.clone()], v);
                    });
                });
            });
            t.barrier_ranks(&bar, bx.clone());
        });
    })
}
