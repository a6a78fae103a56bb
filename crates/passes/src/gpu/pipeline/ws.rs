//! Warp specialization of a TMA pipeline (sm_90a): one warpgroup only loads, the kernel's own
//! warps only compute. The producer runs ahead as far as the stages allow, waiting for a
//! stage to be released instead of for the whole block, and in a persistent kernel it loads
//! the next tile's first stages while the consumers run this tile's epilogue.
//!
//! Each stage has two barriers: `full` completes when its tiles have landed (the producer's
//! `expect_tx` and the TMA bytes) and `empty` when every consumer warp is done reading it (one
//! arrival per warp, after the wgmma that read it has retired). Iteration `g` (counted across
//! a persistent kernel's rounds) uses stage `g % stages`, whose barriers are in their
//! `g / stages`-th phase:
//!
//! ```text
//! producer (one thread):              consumers:
//! for k in 0..n:                      for k in 0..n:
//!     wait(empty[g % s], parity ^ 1)      wait(full[g % s], parity)
//!     expect_tx(full[g % s], bytes)       compute(k)                  // leaves `depth` wgmma
//!     tma(k) → full[g % s]                release(g - depth)          //   groups in flight
//!                                     wgmma_wait 0; release the last `depth`
//! ```
//! A fresh barrier is in phase 0, so the producer's first wait on each stage (parity 1: the
//! phase before) passes at once. This stage builds both halves in tile IR under an `if` on
//! `Intrinsic::ProducerWarps`; the `warp_specialize` stage, after lowering, adds the producer
//! warpgroup and initializes the barriers once per block.

use std::collections::{HashMap, HashSet};

use tl_ir::{
    Buffer, DType, Expr, ExprKind, For, ForKind, GemmInstruction, Intrinsic, Kernel, Scope, Span,
    Stmt, StmtKind, TileOp, Var, WarpSpecialized,
};
use tl_target::Target;

use super::preload::{self, Placed};
use super::{schedule_wgmma, tma_copies, version_stmt, PipelinePlan, Pipeliner, Staged, Ver};
use crate::tile_util::{address_of, eval, if_then, sync};

/// Threads in a warpgroup (the producer's size, and the unit consumers come in).
const WARPGROUP: u32 = 128;

/// The loop a kernel may have specialized.
#[derive(Clone, Debug)]
pub struct Candidate {
    pub loop_var: u64,
}

/// The pipelined loop a kernel may have specialized, or why it cannot be.
fn obstacle(
    k: &Kernel,
    plans: &HashMap<u64, PipelinePlan>,
    target: &Target,
) -> Result<u64, String> {
    if !target.has_tma() {
        return Err(format!("{target} has no TMA"));
    }
    if !k.threads.is_multiple_of(WARPGROUP) || k.threads > 3 * WARPGROUP {
        return Err(format!(
            "the kernel has {} threads; consumers come as 1 to 3 warpgroups of 128",
            k.threads
        ));
    }
    if k.attrs.min_blocks_per_sm.is_some_and(|b| b > 1) {
        return Err("the kernel asks for several blocks per SM, which a producer warpgroup's registers would not leave room for".into());
    }
    if plans.len() != 1 {
        return Err(format!(
            "the kernel has {} pipelined loops that load shared tiles (one can be specialized)",
            plans.len()
        ));
    }
    find_loop(&k.body, plans, k.attrs.dist.is_some())?.ok_or_else(|| {
        "the pipelined loop is not at the kernel's top level or under `if`s from it".to_string()
    })
}

/// The pipelined loop, reached from `s` through sequences and `if`s (the control the
/// producer half repeats). On the way, a `let` that reads memory the producer cannot see is
/// an obstacle; so, in a multi-rank kernel, is anything that acquires (a wait, an acquire
/// load or atomic, a fence) other than a wait the producer can repeat itself
/// ([`replicable_wait`]): the producer's loads must be ordered after the same acquires as the
/// consumers' reads would have been.
fn find_loop(
    s: &Stmt,
    plans: &HashMap<u64, PipelinePlan>,
    dist: bool,
) -> Result<Option<u64>, String> {
    for st in s.flattened() {
        match &st.kind {
            StmtKind::For(l) if plans.contains_key(&l.var.id()) => return Ok(Some(l.var.id())),
            StmtKind::If { cond, then_, else_ } if holds_loop(st, plans) => {
                if reads_memory(cond) {
                    return Err("the pipelined loop lies under an `if` whose condition reads shared or local memory; the producer warps would not see it".into());
                }
                let inner = if holds_loop(then_, plans) {
                    find_loop(then_, plans, dist)?
                } else {
                    match else_ {
                        Some(e) => find_loop(e, plans, dist)?,
                        None => None,
                    }
                };
                return Ok(inner);
            }
            // The producer recomputes the lets it needs: they must not read what the
            // consumers wrote.
            StmtKind::Let { var, value } if reads_memory(value) => {
                return Err(format!(
                    "`{}` is computed from memory before the pipelined loop; the producer warps would not see it",
                    var.name()
                ));
            }
            _ if dist && acquires(st) && replicable_wait(st).is_none() => {
                return Err("a multi-rank kernel acquires before its pipelined loop other than by waits the producer warps can repeat (their loads must see what the acquire orders)".into());
            }
            _ => {}
        }
    }
    Ok(None)
}

fn holds_loop(s: &Stmt, plans: &HashMap<u64, PipelinePlan>) -> bool {
    let mut found = false;
    s.walk(&mut |x| {
        if let StmtKind::For(l) = &x.kind {
            found |= plans.contains_key(&l.var.id());
        }
    });
    found
}

/// Whether `s` orders later reads after other threads' writes: a wait, an acquire load or
/// atomic, a fence.
fn acquires(s: &Stmt) -> bool {
    let mut any = false;
    s.walk(&mut |st| {
        for e in st.exprs() {
            any |= e.any(&mut |x| {
                matches!(x.kind(), ExprKind::Call(op, _) if match op {
                    Intrinsic::WaitUntil { .. } | Intrinsic::Fence { .. } => true,
                    Intrinsic::MemLoad { sem, .. } | Intrinsic::MemAtomAdd { sem, .. } => {
                        sem.acquires()
                    }
                    _ => false,
                })
            });
        }
    });
    any
}

/// The waits of `s` as the producer thread repeats them: `s` a wait, or an `if` on the
/// thread (thread 0 waits for the block) holding only waits — the producer's one thread
/// waits itself, unguarded.
pub fn replicable_wait(s: &Stmt) -> Option<Vec<Stmt>> {
    let is_wait = |x: &Stmt| {
        matches!(&x.kind, StmtKind::Eval(e)
            if matches!(e.kind(), ExprKind::Call(Intrinsic::WaitUntil { .. }, _)))
    };
    match &s.kind {
        _ if is_wait(s) => Some(vec![s.clone()]),
        StmtKind::If {
            cond,
            then_,
            else_: None,
        } if cond.any(&mut |x| matches!(x.kind(), ExprKind::Call(Intrinsic::ThreadIdx, _))) => {
            let waits = then_.flattened();
            (!waits.is_empty() && waits.iter().all(|w| is_wait(w)))
                .then(|| waits.into_iter().cloned().collect())
        }
        _ => None,
    }
}

fn reads_memory(e: &Expr) -> bool {
    e.any(&mut |x| matches!(x.kind(), ExprKind::Load(b, _) if b.scope() != Scope::Global))
}

/// The loop to specialize: by the kernel's attribute (`KernelAttrs::warp_specialize`:
/// `Some(true)` specializes where the kernel can take it, `Some(false)` never) and, where the
/// kernel does not say, `TILELANG_WS=1`; `TILELANG_WS=0` turns it off for every kernel (to
/// compare). A kernel that cannot take it compiles unspecialized.
pub fn candidate(
    k: &Kernel,
    plans: &HashMap<u64, PipelinePlan>,
    target: &Target,
) -> Option<Candidate> {
    let env = std::env::var("TILELANG_WS").ok();
    if env.as_deref() == Some("0") {
        return None;
    }
    let wanted = k
        .attrs
        .warp_specialize
        .unwrap_or(env.as_deref() == Some("1"));
    // A kernel whose blocks wait for each other at a cluster barrier keeps every warp in that
    // barrier (a producer warpgroup would not reach it; `cluster::check` refuses asking).
    if !wanted || crate::cluster::synchronizes_cluster(&k.body) {
        return None;
    }
    obstacle(k, plans, target)
        .ok()
        .map(|loop_var| Candidate { loop_var })
}

/// Whether the loop's consumers run on wgmma (what a producer warpgroup pays off for, and
/// what the stage release after a retired wgmma group is written for).
pub fn consumers_use_wgmma(body: &[&Stmt], plan: &PipelinePlan) -> bool {
    let mut any = false;
    for (i, st) in body.iter().enumerate() {
        if plan.producers.contains(&i) {
            continue;
        }
        st.walk(&mut |x| {
            any |= matches!(&x.kind, StmtKind::Op(TileOp::Gemm(g))
                if g.instruction == Some(GemmInstruction::Wgmma));
        });
    }
    any
}

/// The pieces `expand_ws` takes from `Pipeliner::expand`.
pub struct Loop<'a> {
    pub l: &'a For,
    pub stages: i64,
    pub depth: i64,
    pub overlap_depth: i64,
    pub plan: &'a PipelinePlan,
    pub bytes: i64,
    pub span: Span,
}

impl Pipeliner {
    /// The specialized loop: the barriers' allocations, then `if producer_warps() { producer
    /// } else { consumers }` (see the module docs).
    pub(super) fn expand_ws(&mut self, lp: Loop) -> Stmt {
        let Loop {
            l,
            stages: s,
            depth,
            overlap_depth,
            plan,
            bytes,
            span,
        } = lp;
        let body = l.body.flattened();
        let n = l.extent.clone();
        let lo = l.min.clone();
        let consumers_threads = self.threads;
        let name = l.var.name();
        let barriers = |what: &str| {
            Buffer::new(
                format!("{name}_{what}"),
                vec![Expr::int(s)],
                DType::U64,
                Scope::Shared,
                span,
            )
        };
        let (full, empty) = (barriers("full"), barriers("empty"));
        let counter = self.persistent.then(|| {
            Buffer::new(
                format!("{name}_count"),
                vec![Expr::int(1)],
                DType::I32,
                Scope::Local,
                span,
            )
        });
        let base = counter.as_ref().map(|c| Expr::load(c, vec![Expr::int(0)]));
        let global = |k: Expr| match &base {
            Some(b) => b.clone() + k,
            None => k,
        };
        let stage = |g: &Expr| g.floormod(s);
        let parity = |g: &Expr| g.floordiv(s).floormod(2);
        let tid = Expr::call(Intrinsic::ThreadIdx, vec![], DType::I32);
        let advance = |c: &Option<Buffer>| -> Stmt {
            match c {
                Some(c) => Stmt::new(
                    StmtKind::Store {
                        buffer: c.clone(),
                        indices: vec![Expr::int(0)],
                        value: Expr::load(c, vec![Expr::int(0)]) + n.clone(),
                    },
                    span,
                ),
                None => Stmt::empty(),
            }
        };
        // Tiles the producer loads beside the stages (`preload`), each on its own barriers,
        // their phases counted by rounds in a persistent kernel.
        let preloads = std::mem::take(&mut self.pending_preloads);
        let rounds = (self.persistent && !preloads.is_empty()).then(|| {
            Buffer::new(
                format!("{name}_round"),
                vec![Expr::int(1)],
                DType::I32,
                Scope::Local,
                span,
            )
        });
        let placed: Vec<Placed> = preloads
            .into_iter()
            .enumerate()
            .map(|(p, preload)| {
                let bar = |what: &str| {
                    Buffer::new(
                        format!("{name}_pre{p}_{what}"),
                        vec![Expr::int(1)],
                        DType::U64,
                        Scope::Shared,
                        span,
                    )
                };
                Placed {
                    full: bar("full"),
                    // Released and waited for only across a persistent kernel's rounds.
                    empty: rounds.as_ref().map(|_| bar("empty")),
                    preload,
                }
            })
            .collect();
        let preload_phase = preload::phase(&rounds);
        let load_preload = |p: &Placed| -> Stmt {
            let mut v = vec![];
            if let Some(empty) = &p.empty {
                // The consumers released the tile's previous round.
                v.push(eval(
                    Intrinsic::MbarrierWait,
                    vec![
                        address_of(empty, vec![Expr::int(0)]),
                        (preload_phase.clone() + 1).floormod(2),
                    ],
                    span,
                ));
            }
            let bar = address_of(&p.full, vec![Expr::int(0)]);
            v.push(eval(
                Intrinsic::MbarrierArriveExpectTx,
                vec![bar.clone(), Expr::int(p.preload.bytes)],
                span,
            ));
            v.push(tma_copies(&p.preload.copy, &bar));
            Stmt::seq(v, span)
        };
        let versioned = self.versioned.clone();
        let k = Var::new(name, DType::I32);
        let mut map = HashMap::new();
        map.insert(l.var.id(), lo.clone() + k.expr());
        let g = global(k.expr());

        // The producer: one thread waits for each stage to be released and refills it.
        let mut load = vec![
            eval(
                Intrinsic::MbarrierWait,
                vec![
                    address_of(&empty, vec![stage(&g)]),
                    (g.floordiv(s) + 1).floormod(2),
                ],
                span,
            ),
            eval(
                Intrinsic::MbarrierArriveExpectTx,
                vec![address_of(&full, vec![stage(&g)]), Expr::int(bytes)],
                span,
            ),
        ];
        for &i in &plan.producers {
            let st = version_stmt(
                &body[i].substitute(&map),
                &versioned,
                &Ver::Dynamic(stage(&g)),
            );
            load.push(tma_copies(&st, &address_of(&full, vec![stage(&g)])));
        }
        // (The `warp_specialize` stage elects its thread: here the kernel's threads are all
        // consumers, and a test for a thread past them would simplify away.)
        let mut producer = vec![];
        // After the waits the producer repeats before this loop (`replicable_wait`).
        if self.loads_written_source(plan, &body) {
            producer.push(eval(Intrinsic::FenceProxyAsyncGlobal, vec![], span));
        }
        producer.extend(
            placed
                .iter()
                .filter(|p| p.preload.in_loop)
                .map(load_preload),
        );
        producer.push(serial(&k, n.clone(), Stmt::seq(load, span), span));
        producer.extend(
            placed
                .iter()
                .filter(|p| !p.preload.in_loop)
                .map(load_preload),
        );
        producer.push(advance(&counter));
        if let Some(r) = &rounds {
            producer.push(preload::advance(r, span));
        }
        let producer = Stmt::seq(producer, span);

        // The consumers.
        let consumers = plan.consumers(&body);
        let consume = version_stmt(
            &Stmt::seq(consumers, span).substitute(&map),
            &versioned,
            &Ver::Dynamic(stage(&g)),
        );
        let mut drain = vec![];
        let (consume, reads_async) = schedule_wgmma(
            &consume,
            depth,
            overlap_depth,
            &mut drain,
            &self.per_thread_lets,
        );
        let consume = self.rewrite(&consume);
        // Stages and preloaded tiles came by TMA, through the async proxy already. (Only where
        // something was preloaded: the GEMMs keep their fence and barrier, which measured
        // level or faster with them, gpu-notes run 30c.)
        let all_by_tma = !placed.is_empty() && {
            let by_tma: HashSet<u64> = self
                .versioned
                .values()
                .flat_map(|v| match v {
                    Staged::Indexed(b) => vec![b.id()],
                    Staged::Split(bs) => bs.iter().map(|b| b.id()).collect(),
                })
                .chain(placed.iter().map(|p| p.preload.tile))
                .collect();
            wgmma_shared_operands(&consume).is_subset(&by_tma)
        };
        // A warp is done with a stage once the wgmma groups that read it have retired: lane
        // 0 arrives for the warp (its lanes passed the wgmma wait together).
        // In a cluster, every block's producer may multicast into this block's stage: the
        // warp releases it to each of them.
        let cluster = self.cluster;
        let release = |g: Expr| -> Stmt {
            let arrive = if cluster > 1 {
                Stmt::seq(
                    (0..cluster as i64)
                        .map(|r| {
                            eval(
                                Intrinsic::MbarrierArriveCluster,
                                vec![address_of(&empty, vec![stage(&g)]), Expr::int(r)],
                                span,
                            )
                        })
                        .collect(),
                    span,
                )
            } else {
                eval(
                    Intrinsic::MbarrierArrive,
                    vec![address_of(&empty, vec![stage(&g)])],
                    span,
                )
            };
            Stmt::seq(
                vec![
                    eval(Intrinsic::SyncWarp, vec![], span),
                    if_then(Some(tid.floormod(32).eq_(0)), arrive, span),
                ],
                span,
            )
        };
        let steady = vec![
            eval(
                Intrinsic::MbarrierWait,
                vec![address_of(&full, vec![stage(&g)]), parity(&g)],
                span,
            ),
            consume,
            if depth == 0 {
                release(g.clone())
            } else {
                if_then(Some(k.expr().ge(depth)), release(g.clone() - depth), span)
            },
        ];
        let mut compute = vec![];
        // Operand tiles written before the loop by ordinary stores (attention's Q) are read
        // by wgmma through the async proxy: fence, and hand them over.
        if reads_async && !all_by_tma {
            compute.push(eval(Intrinsic::FenceProxyAsync, vec![], span));
            compute.push(sync(span));
        }
        // The preloaded tiles the loop reads have landed.
        for p in placed.iter().filter(|p| p.preload.in_loop) {
            compute.push(eval(
                Intrinsic::MbarrierWait,
                vec![
                    address_of(&p.full, vec![Expr::int(0)]),
                    preload_phase.clone(),
                ],
                span,
            ));
        }
        compute.push(serial(&k, n.clone(), Stmt::seq(steady, span), span));
        if !drain.is_empty() {
            compute.push(eval(Intrinsic::WGMMA_WAIT_ALL, drain, span));
        }
        // The last `depth` iterations' stages, released once their groups retired.
        for j in 0..depth {
            let it = n.clone() - (depth - j);
            compute.push(if_then(Some(it.ge(0)), release(global(it.clone())), span));
        }
        compute.push(advance(&counter));
        compute.push(sync(span));

        self.ws_out = Some(WarpSpecialized {
            consumer_threads: consumers_threads,
            full: full.clone(),
            empty: empty.clone(),
            stages: s as u32,
            counter: counter.clone(),
            preloads: placed
                .iter()
                .map(|p| (p.full.clone(), p.empty.clone()))
                .collect(),
            rounds: rounds.clone(),
        });
        let mut out = vec![
            Stmt::new(StmtKind::Alloc(full), span),
            Stmt::new(StmtKind::Alloc(empty), span),
        ];
        for p in &placed {
            out.push(Stmt::new(StmtKind::Alloc(p.full.clone()), span));
            if let Some(e) = &p.empty {
                out.push(Stmt::new(StmtKind::Alloc(e.clone()), span));
            }
        }
        if let Some(c) = counter {
            out.push(Stmt::new(StmtKind::Alloc(c), span));
        }
        if let Some(r) = &rounds {
            out.push(Stmt::new(StmtKind::Alloc(r.clone()), span));
        }
        if !placed.is_empty() {
            self.placed_preloads = Some(preload::Placement { placed, rounds });
        }
        out.push(Stmt::new(
            StmtKind::If {
                cond: Expr::call(Intrinsic::ProducerWarps, vec![], DType::Bool),
                then_: Box::new(producer),
                else_: Some(Box::new(Stmt::seq(compute, span))),
            },
            span,
        ));
        Stmt::seq(out, span)
    }
}

/// The shared buffers wgmma gemms in `s` read.
fn wgmma_shared_operands(s: &Stmt) -> HashSet<u64> {
    let mut out = HashSet::new();
    s.walk(&mut |x| {
        if let StmtKind::Op(TileOp::Gemm(g)) = &x.kind {
            if g.instruction == Some(GemmInstruction::Wgmma) {
                for r in [&g.a, &g.b] {
                    if r.buffer.scope() == Scope::Shared {
                        out.insert(r.buffer.id());
                    }
                }
            }
        }
    });
    out
}

fn serial(var: &Var, extent: Expr, body: Stmt, span: Span) -> Stmt {
    Stmt::new(
        StmtKind::For(Box::new(For {
            var: var.clone(),
            min: Expr::int(0),
            extent,
            kind: ForKind::Serial,
            body,
        })),
        span,
    )
}
