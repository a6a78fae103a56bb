//! Tiles a warp-specialized kernel loads once per block (or per round of a persistent kernel)
//! beside its pipeline — attention's Q, and the last V tile it reads after its loop — taken
//! over by the producer as TMA loads on barriers of their own.
//!
//! Left to the consumers, such a copy ran as cp.async at the top of every round: in a
//! persistent kernel each round began with the consumers idle for a memory latency while the
//! producer's stages for that round had long landed. The producer instead issues the copy
//! where its program order first needs the tile (before its loop when the loop reads it, after
//! its loop otherwise) and the consumers wait on the tile's `full` barrier just before their
//! first read. In a persistent kernel the consumers also release the tile (`empty`, one arrival
//! per warp) after their last read of a round, and the producer waits for that before refilling
//! it, so the next round's Q loads while this round's epilogue runs. Phases count the rounds.
//!
//! A copy qualifies when it is a statement of the sequence that holds the specialized loop,
//! before the loop; reads a tensor nothing in the kernel writes; fills a shared tile that no
//! other statement writes, nothing touches between the copy and the loop, and nothing outside
//! that sequence touches; and can be one TMA box load. No reader after the loop may leave a
//! wgmma group in flight (the release would free the tile under it). Not in clusters: their
//! producers multicast into each other's tiles, which a block's own release does not cover.

use std::collections::HashMap;

use tl_ir::{Buffer, DType, Expr, ExprKind, Intrinsic, Scope, Span, Stmt, StmtKind, TileOp};

use super::Pipeliner;
use crate::tile_util::{address_of, eval, if_then};

/// A copy the producer takes over.
#[derive(Clone, Debug)]
pub struct Preload {
    /// Its index in the sequence that holds the loop.
    pub at: usize,
    pub copy: Stmt,
    /// The shared tile it fills (its id).
    pub tile: u64,
    /// What one load brings (the barrier's `expect_tx`).
    pub bytes: i64,
    /// Whether the loop reads the tile (the producer loads it before its loop, else after).
    pub in_loop: bool,
    /// The first statement after the loop that reads the tile.
    pub first_after: Option<usize>,
    /// The last statement that reads it (the loop's index when only the loop does).
    pub last_use: usize,
}

/// A preload with its barriers, as the specialized loop placed it.
#[derive(Clone, Debug)]
pub struct Placed {
    pub preload: Preload,
    pub full: Buffer,
    /// Only in a persistent kernel (a tile loaded once a block is never released).
    pub empty: Option<Buffer>,
}

/// What the sequence around the loop adds for the consumers: the placed preloads, and the
/// round counter of a persistent kernel (their phase).
#[derive(Clone, Debug, Default)]
pub struct Placement {
    pub placed: Vec<Placed>,
    pub rounds: Option<Buffer>,
}

/// Off with `TILELANG_WS_PRELOAD=0` (to compare): the consumers copy those tiles, and fence
/// and synchronize before their loop, as before.
pub fn enabled() -> bool {
    !std::env::var("TILELANG_WS_PRELOAD").is_ok_and(|x| x == "0")
}

/// How many statements of a tree write, and read or write, each buffer.
#[derive(Clone, Debug, Default)]
pub struct AccessCounts {
    /// Writers (a preloaded tile has one: its copy).
    pub writes: HashMap<u64, usize>,
    /// Statements that read or write it (a preloaded tile's all lie in the sequence that holds
    /// the loop).
    pub accesses: HashMap<u64, usize>,
}

impl AccessCounts {
    /// The counts over `roots`, in one walk.
    pub fn of<'a>(roots: impl IntoIterator<Item = &'a Stmt>) -> AccessCounts {
        let mut out = AccessCounts::default();
        for root in roots {
            root.walk(&mut |s| {
                for id in own_accesses(s) {
                    *out.accesses.entry(id).or_insert(0) += 1;
                }
                if !matches!(
                    s.kind,
                    StmtKind::Seq(_) | StmtKind::If { .. } | StmtKind::For(_)
                ) {
                    for id in s.written_buffers() {
                        *out.writes.entry(id).or_insert(0) += 1;
                    }
                }
            });
        }
        out
    }
}

fn touches(s: &Stmt, id: u64) -> bool {
    s.read_buffers().contains(&id) || s.written_buffers().contains(&id)
}

/// The buffers statement `s` itself reads or writes (its own expressions, stores and tile-op
/// regions, not its sub-statements').
fn own_accesses(s: &Stmt) -> std::collections::HashSet<u64> {
    let mut out = std::collections::HashSet::new();
    match &s.kind {
        StmtKind::Store { buffer, .. } => {
            out.insert(buffer.id());
        }
        StmtKind::Op(op) => {
            let (r, w) = op.regions();
            out.extend(r.into_iter().chain(w).map(|x| x.buffer.id()));
        }
        _ => {}
    }
    for e in s.exprs() {
        e.visit(&mut |x| {
            if let ExprKind::Load(b, _) = x.kind() {
                out.insert(b.id());
            }
        });
    }
    out
}

/// Whether `e` reads memory other than global tensors (which the producer cannot see).
fn reads_private(e: &Expr) -> bool {
    e.any(&mut |x| matches!(x.kind(), ExprKind::Load(b, _) if b.scope() != Scope::Global))
}

/// Whether `s` may leave a wgmma group in flight at its end.
fn leaves_wgmma_pending(s: &Stmt) -> bool {
    let mut pending = false;
    s.walk(&mut |x| {
        if let StmtKind::Op(TileOp::Gemm(g)) = &x.kind {
            pending |= g.overlap || g.wg_wait.is_some_and(|w| w != 0) || g.schedule.in_flight > 0;
        }
    });
    pending
}

impl Pipeliner {
    /// The copies of `v` the producer can take over, when `v` holds the loop this kernel
    /// may specialize as one of its statements.
    pub(super) fn preload_candidates(&self, v: &[Stmt]) -> Vec<Preload> {
        if !enabled() {
            return vec![];
        }
        let Some(cand) = &self.ws else {
            return vec![];
        };
        // A cluster's producers multicast their loads into every block of the cluster; a
        // preloaded tile's release is this block's alone.
        if self.cluster > 1 {
            return vec![];
        }
        let Some(loop_at) = v
            .iter()
            .position(|s| matches!(&s.kind, StmtKind::For(l) if l.var.id() == cand.loop_var))
        else {
            return vec![];
        };
        // Accesses within this sequence, against the kernel's.
        let here = AccessCounts::of(v);
        let mut out = vec![];
        for (i, st) in v[..loop_at].iter().enumerate() {
            let StmtKind::Op(TileOp::Copy(c)) = &st.kind else {
                continue;
            };
            let (src, dst) = (&c.src.buffer, &c.dst.buffer);
            let id = dst.id();
            if c.asynchronous
                || c.guard.is_some()
                || src.scope() != Scope::Global
                || dst.scope() != Scope::Shared
                || self.versioned.contains_key(&id)
                || self.access_counts.writes.get(&id) != Some(&1)
                || !self.read_only.contains(&src.id())
                || self.symmetric.contains(&src.id())
            {
                continue;
            }
            let region_exprs = c
                .src
                .offsets
                .iter()
                .chain(&c.src.extents)
                .chain(&c.dst.offsets)
                .chain(&c.dst.extents);
            if region_exprs.into_iter().any(reads_private) {
                continue;
            }
            if !crate::gpu::tma::starts_on_16_bytes(&c.src, &self.analyzer) {
                continue;
            }
            let aligned = self.pitchable.contains(&src.id())
                || crate::gpu::tma::row_bytes_aligned(src, &self.analyzer);
            let Some(tile) = crate::gpu::tma::TmaTile::of(
                &c.src,
                &c.dst,
                self.smem.get(&id),
                &self.target,
                aligned,
            ) else {
                continue;
            };
            // Nothing else touches the tile before the loop.
            let others = v[..loop_at]
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .any(|(_, s)| !matches!(s.kind, StmtKind::Alloc(_)) && touches(s, id));
            if others {
                continue;
            }
            // Every access of the tile is in this sequence (where the consumers' waits and
            // releases go), none under an enclosing statement's other branches.
            if self.access_counts.accesses.get(&id) != here.accesses.get(&id) {
                continue;
            }
            let in_loop = touches(&v[loop_at], id);
            let after: Vec<usize> = (loop_at + 1..v.len())
                .filter(|&j| touches(&v[j], id))
                .collect();
            if !in_loop && after.is_empty() {
                continue;
            }
            // The release follows the last reader: no reader may leave a wgmma on the tile
            // in flight past it.
            let last_use = after.last().copied().unwrap_or(loop_at);
            if after.iter().any(|&j| leaves_wgmma_pending(&v[j])) {
                continue;
            }
            out.push(Preload {
                at: i,
                copy: st.clone(),
                tile: id,
                bytes: tile.bytes,
                in_loop,
                first_after: after.first().copied(),
                last_use,
            });
        }
        out
    }
}

/// The phase a round's preloads are in: the round's parity (0 outside a persistent kernel).
pub fn phase(rounds: &Option<Buffer>) -> Expr {
    match rounds {
        Some(r) => Expr::load(r, vec![Expr::int(0)]).floormod(2),
        None => Expr::int(0),
    }
}

/// `counter += 1`.
pub fn advance(counter: &Buffer, span: Span) -> Stmt {
    Stmt::new(
        StmtKind::Store {
            buffer: counter.clone(),
            indices: vec![Expr::int(0)],
            value: Expr::load(counter, vec![Expr::int(0)]) + Expr::int(1),
        },
        span,
    )
}

/// One arrival per consumer warp on `bar` (lane 0, once the warp's lanes are all here).
pub fn warp_arrive(bar: &Buffer, span: Span) -> Stmt {
    let tid = Expr::call(Intrinsic::ThreadIdx, vec![], DType::I32);
    Stmt::seq(
        vec![
            eval(Intrinsic::SyncWarp, vec![], span),
            if_then(
                Some(tid.floormod(32).eq_(0)),
                eval(
                    Intrinsic::MbarrierArrive,
                    vec![address_of(bar, vec![Expr::int(0)])],
                    span,
                ),
                span,
            ),
        ],
        span,
    )
}

/// The consumers' side of the placed preloads in the sequence around the loop (`parts[i]` is
/// what statement `i` became): each copy removed; a wait before the first read after the
/// loop of a tile the loop does not read (the loop's own wait covers the others); in a
/// persistent kernel, a release after the last read and the round counted at the end.
pub fn place(parts: &mut [Vec<Stmt>], placement: &Placement, span: Span) {
    for p in &placement.placed {
        let pre = &p.preload;
        parts[pre.at].clear();
        if let (false, Some(j)) = (pre.in_loop, pre.first_after) {
            parts[j].insert(
                0,
                eval(
                    Intrinsic::MbarrierWait,
                    vec![
                        address_of(&p.full, vec![Expr::int(0)]),
                        phase(&placement.rounds),
                    ],
                    span,
                ),
            );
        }
        if let Some(empty) = &p.empty {
            parts[pre.last_use].push(warp_arrive(empty, span));
        }
    }
    if let (Some(r), Some(last)) = (&placement.rounds, parts.last_mut()) {
        last.push(advance(r, span));
    }
}
