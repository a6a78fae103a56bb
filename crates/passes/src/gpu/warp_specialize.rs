//! The `warp_specialize` stage: finishes a pipeline the `pipeline` stage split into producer
//! and consumer halves (`pipeline::ws`), on the lowered kernel.
//!
//! The kernel's threads become the consumers and a producer warpgroup is added after them:
//!
//! ```text
//! shared allocations; if thread 0: init full[s] (1 arrival), empty[s] (1 per consumer warp)
//! sync_threads
//! if thread_idx >= consumers:  setmaxnreg.dec; thread `consumers` runs the producer half
//! else:                        setmaxnreg.inc; the kernel, its loop's consumer half, its
//!                              block barriers among the consumers only (`bar.sync 1, n`)
//! ```
//! The producer half is the kernel's control around the loop — the loops (a persistent
//! kernel's rounds), the `if`s and the `let`s that lead to it — with the loop's loads; every
//! other statement stays with the consumers. The barriers are initialized here, once per
//! block, since a persistent kernel's producer runs into the next round while the consumers
//! finish this one. Shared buffers are all declared at the top, live for the whole kernel:
//! the producer refills the pipeline's stages while the consumers may still use any other
//! buffer, so none may share bytes with them.

use std::collections::HashSet;

use tl_ir::{
    DType, Diagnostic, Diagnostics, Expr, ExprKind, Intrinsic, Kernel, Scope, Stmt, StmtKind,
    WarpSpecialized,
};
use tl_target::Target;

use crate::tile_util::{address_of, eval, if_then, is_call, sync};

/// The named barrier the consumer warps sync with (0 is `__syncthreads`').
const CONSUMER_BARRIER: u32 = 1;
const PRODUCER_THREADS: u32 = 128;

pub fn run(k: Kernel, _target: &Target) -> Result<Kernel, Diagnostics> {
    let Some(ws) = k.attrs.warp_specialized.clone() else {
        return Ok(k);
    };
    let span = k.body.span;
    let consumers = ws.consumer_threads;
    // Set by the `persistent` stage for a clustered kernel (clusters along its grid's x).
    let cluster = k.attrs.cluster.map_or(1, |c| c.size);
    let mut ws = ws;
    let mut hoisted = vec![];
    let mut body = strip_allocs(&k.body, &ws, &mut hoisted);
    for slot in [&mut ws.counter, &mut ws.rounds] {
        if let Some(c) = slot.clone() {
            if let Some(b) = count_by_rounds(&body, &c) {
                body = b;
                hoisted.retain(|h| !matches!(&h.kind, StmtKind::Alloc(x) if x.id() == c.id()));
                *slot = None;
            }
        }
    }
    let producer = producer_half(&body, &mut HashSet::new()).ok_or_else(|| {
        Diagnostics::from(Diagnostic::internal(
            "warp specialization: the producer half cannot be separated from the kernel (its loop lies under a statement other than a loop, an `if` or a sequence, or its control reads memory)",
        ))
    })?;
    let mut producer = fresh_bindings(&producer);
    let turns = ping_pong_wanted(k.attrs.ping_pong);
    let mut consumer = ping_pong(&consumer_half(&body, consumers), consumers, turns);
    // Odd rows the kernel stages itself (`stage_rows`): its consumers copy them, the producer
    // waits for each chunk. Where it cannot, the runtime stages them before the launch.
    let mut staged_rows = vec![];
    let mut publisher = None;
    if !turns {
        if let Some(plan) = crate::gpu::stage_rows::plan(&k, &producer, consumers, ws.stages) {
            if let Some(c) = plan.consumer(&consumer) {
                consumer = c;
                producer = plan.producer(&producer);
                staged_rows = plan.staged_rows();
                publisher = Some((
                    plan.publisher(span),
                    plan.barrier_inits(span),
                    plan.barriers().clone(),
                ));
            }
        }
    }
    let tid = Expr::call(Intrinsic::ThreadIdx, vec![], DType::I32);
    let mut out = hoisted;
    // Each half counts iterations in a register of its own: one both halves assigned would
    // not be warp-uniform to ptxas, which then computes every stage address per thread.
    let mut counters = vec![];
    for c in ws.counter.iter().chain(&ws.rounds) {
        let own = c.derive(
            format!("{}_producer", c.name()),
            c.shape().to_vec(),
            c.scope(),
        );
        producer = rename_buffer(&producer, c, &own);
        out.push(Stmt::new(StmtKind::Alloc(own.clone()), span));
        counters.push(own);
        counters.push(c.clone());
    }
    for c in &counters {
        out.push(Stmt::new(
            StmtKind::Store {
                buffer: c.clone(),
                indices: vec![Expr::int(0)],
                value: Expr::int(0),
            },
            span,
        ));
    }
    let mut init = vec![];
    for st in 0..ws.stages as i64 {
        init.push(eval(
            Intrinsic::MbarrierInit { count: 1 },
            vec![address_of(&ws.full, vec![Expr::int(st)])],
            span,
        ));
        // Each consumer warp of every block of the cluster releases each stage.
        init.push(eval(
            Intrinsic::MbarrierInit {
                count: consumers / 32 * cluster,
            },
            vec![address_of(&ws.empty, vec![Expr::int(st)])],
            span,
        ));
    }
    // A preloaded tile: the producer's `expect_tx`; each consumer warp of this block releases
    // it (it is not multicast).
    for (full, empty) in &ws.preloads {
        init.push(eval(
            Intrinsic::MbarrierInit { count: 1 },
            vec![address_of(full, vec![Expr::int(0)])],
            span,
        ));
        if let Some(empty) = empty {
            init.push(eval(
                Intrinsic::MbarrierInit {
                    count: consumers / 32,
                },
                vec![address_of(empty, vec![Expr::int(0)])],
                span,
            ));
        }
    }
    if let Some((_, inits, bars)) = &publisher {
        out.push(Stmt::new(StmtKind::Alloc(bars.clone()), span));
        init.extend(inits.iter().cloned());
    }
    init.push(eval(Intrinsic::FenceMbarrierInit, vec![], span));
    out.push(if_then(Some(tid.eq_(0)), Stmt::seq(init, span), span));
    out.push(sync(span));
    // The cluster's blocks signal each other's barriers: all must be initialized first.
    if cluster > 1 {
        out.push(eval(Intrinsic::ClusterSync, vec![], span));
    }
    let (mut p, mut c) = (vec![], vec![]);
    if let Some((dec, inc)) = register_split_asked(consumers, k.attrs.producer_registers) {
        p.push(eval(
            Intrinsic::SetMaxNReg {
                inc: false,
                regs: dec,
            },
            vec![],
            span,
        ));
        c.push(eval(
            Intrinsic::SetMaxNReg {
                inc: true,
                regs: inc,
            },
            vec![],
            span,
        ));
    }
    // One thread of the producer warpgroup issues every load; one of its next warp publishes
    // the rows the consumers stage (`stage_rows`).
    p.push(if_then(Some(tid.eq_(consumers as i64)), producer, span));
    if let Some((publish, ..)) = publisher {
        p.push(if_then(Some(tid.eq_(consumers as i64 + 32)), publish, span));
    }
    c.push(consumer);
    out.push(Stmt::new(
        StmtKind::If {
            cond: tid.ge(consumers as i64),
            then_: Box::new(Stmt::seq(p, span)),
            else_: Some(Box::new(Stmt::seq(c, span))),
        },
        span,
    ));
    // No block may exit while a peer can still multicast into its shared memory or arrive on
    // its barriers.
    if cluster > 1 {
        out.push(eval(Intrinsic::ClusterSync, vec![], span));
    }
    let mut k = k.with_body(Stmt::seq(out, span));
    k.threads = consumers + PRODUCER_THREADS;
    k.attrs.staged_rows = staged_rows;
    Ok(k)
}

/// Registers per thread for the producer and the consumers (`setmaxnreg`), when moving some
/// to the consumers helps: the producer keeps 40 (24 beside three consumer warpgroups), the
/// consumers share the rest, at most 240 each. `None` when the launch already gives the
/// consumers as many (two warpgroups in all get 255 each).
pub fn register_split(consumers: u32) -> Option<(u32, u32)> {
    let at_launch = tl_ir::launch_registers(consumers + PRODUCER_THREADS);
    let producer = if consumers >= 3 * PRODUCER_THREADS {
        24
    } else {
        40
    };
    let consumer = consumers_share(consumers, producer)?;
    (consumer > at_launch).then_some((producer, consumer))
}

/// Registers per consumer thread once the producer warpgroup keeps `producer` each: the rest
/// of the block's pool, in `setmaxnreg`'s steps of 8, at most 240. `None` when the producer
/// alone would take more than the pool.
///
/// The pool is what the launch allocated — every thread's registers at the kernel's bound
/// (168 for 384 threads: 64,512, not the 65,536 of the file) — and `setmaxnreg.inc` waits
/// until registers are free in it: a split whose total exceeds it hangs every block. With
/// the file's count, `TILELANG_WS_PRODUCER_REGS=96` gave two consumer warpgroups 208 each
/// and a GEMM hung on the H200 (gpu-notes run 27b); the shipped splits (56 → 224, 40 → 232) fit
/// either way.
fn consumers_share(consumers: u32, producer: u32) -> Option<u32> {
    let threads = consumers + PRODUCER_THREADS;
    let pool = tl_ir::launch_registers(threads) * threads;
    let rest = pool.checked_sub(PRODUCER_THREADS * producer)?;
    Some((rest / consumers / 8 * 8).min(240))
}

/// [`register_split`], with the producer's registers taken from `TILELANG_WS_PRODUCER_REGS`
/// where set (24 to 256, a multiple of 8: what `setmaxnreg` takes; to measure other
/// splits), else from the kernel's `producer_registers` attribute; the consumers get the
/// rest, at most 240. An attribute `setmaxnreg` cannot take is ignored.
fn register_split_asked(consumers: u32, attr: Option<u32>) -> Option<(u32, u32)> {
    let valid = |r: &u32| (24..=256).contains(r) && r.is_multiple_of(8);
    let asked = std::env::var("TILELANG_WS_PRODUCER_REGS")
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .filter(valid)
        .or(attr.filter(valid));
    match asked {
        Some(producer) => {
            // `setmaxnreg.dec` may only lower the launch's count and `.inc` only raise it.
            let at_launch = tl_ir::launch_registers(consumers + PRODUCER_THREADS);
            let consumer = consumers_share(consumers, producer)?;
            (producer <= at_launch && consumer >= at_launch).then_some((producer, consumer))
        }
        None => register_split(consumers),
    }
}

/// The body without the allocations of shared buffers and of the pipeline's counters, which
/// go into `hoisted` (each once).
fn strip_allocs(s: &Stmt, ws: &WarpSpecialized, hoisted: &mut Vec<Stmt>) -> Stmt {
    let counters: Vec<u64> = ws
        .counter
        .iter()
        .chain(&ws.rounds)
        .map(|c| c.id())
        .collect();
    let mut seen = HashSet::new();
    s.map_post(&mut |x| match x.kind {
        StmtKind::Alloc(b) if b.scope() == Scope::Shared || counters.contains(&b.id()) => {
            if seen.insert(b.id()) {
                hoisted.push(Stmt::new(StmtKind::Alloc(b), x.span));
            }
            Stmt::empty()
        }
        kind => Stmt::new(kind, x.span),
    })
}

fn is_marker(e: &Expr) -> bool {
    matches!(e.kind(), ExprKind::Call(Intrinsic::ProducerWarps, _))
}

fn contains_marker(s: &Stmt) -> bool {
    let mut found = false;
    s.walk(&mut |x| {
        if let StmtKind::If { cond, .. } = &x.kind {
            found |= is_marker(cond);
        }
    });
    found
}

/// An expression the producer can compute: it reads no memory but global tensors, and no
/// variable whose `let` the producer dropped.
fn producer_computable(e: &Expr, dropped: &HashSet<u64>) -> bool {
    !e.any(&mut |x| match x.kind() {
        ExprKind::Load(b, _) => b.scope() != Scope::Global,
        ExprKind::Var(v) => dropped.contains(&v.id()),
        _ => false,
    })
}

/// The producer's half of `s`: the control leading to the marker, with the marker's
/// producer branch at its end. `None` when `s` holds no marker or the way to it cannot be
/// recomputed by the producer.
fn producer_half(s: &Stmt, dropped: &mut HashSet<u64>) -> Option<Stmt> {
    let span = s.span;
    match &s.kind {
        StmtKind::If { cond, then_, .. } if is_marker(cond) => Some((**then_).clone()),
        StmtKind::Seq(v) => {
            let at = v.iter().position(contains_marker)?;
            let mut out = vec![];
            for x in &v[..at] {
                if let StmtKind::Let { var, value } = &x.kind {
                    if producer_computable(value, dropped) {
                        out.push(x.clone());
                    } else {
                        dropped.insert(var.id());
                    }
                } else if let Some(waits) = crate::gpu::pipeline::replicable_wait(x) {
                    // A multi-rank kernel's waits for what its loads read (`pipeline::ws`
                    // allows no other acquire before the loop): the producer's thread waits
                    // too, before its first load.
                    out.extend(waits);
                }
            }
            out.push(producer_half(&v[at], dropped)?);
            Some(Stmt::seq(out, span))
        }
        StmtKind::For(l) if contains_marker(&l.body) => {
            if !producer_computable(&l.min, dropped) || !producer_computable(&l.extent, dropped) {
                return None;
            }
            let mut l2 = (**l).clone();
            l2.body = producer_half(&l.body, dropped)?;
            Some(Stmt::new(StmtKind::For(Box::new(l2)), span))
        }
        StmtKind::If { cond, then_, else_ } if producer_computable(cond, dropped) => {
            if contains_marker(then_) {
                Some(if_then(
                    Some(cond.clone()),
                    producer_half(then_, dropped)?,
                    span,
                ))
            } else {
                let e = else_.as_ref()?;
                Some(if_then(
                    Some(Expr::unary(tl_ir::UnOp::Not, cond.clone())),
                    producer_half(e, dropped)?,
                    span,
                ))
            }
        }
        _ => None,
    }
}

/// `s` with its own variables for every `let` and loop it binds: the producer half repeats
/// the consumers' bindings, and code generation may take a variable it has seen bound for
/// one bound everywhere after (the PTX printer's loop-invariant hoisting does).
fn fresh_bindings(s: &Stmt) -> Stmt {
    let mut map = std::collections::HashMap::new();
    s.walk(&mut |x| {
        let var = match &x.kind {
            StmtKind::Let { var, .. } => var,
            StmtKind::For(l) => &l.var,
            _ => return,
        };
        map.entry(var.id())
            .or_insert_with(|| tl_ir::Var::new(var.name(), var.dtype()));
    });
    let renamed = s.substitute(
        &map.iter()
            .map(|(id, v)| (*id, v.expr()))
            .collect::<std::collections::HashMap<_, _>>(),
    );
    renamed.map_post(&mut |x| {
        let kind = match x.kind {
            StmtKind::Let { var, value } => StmtKind::Let {
                var: map.get(&var.id()).cloned().unwrap_or(var),
                value,
            },
            StmtKind::For(mut l) => {
                if let Some(v) = map.get(&l.var.id()) {
                    l.var = v.clone();
                }
                StmtKind::For(l)
            }
            kind => kind,
        };
        Stmt::new(kind, x.span)
    })
}

/// `step` where `value` is `counter + step` with the counter one term of a sum (the simplifier
/// writes `counter + ⌊(K + 7) / 64⌋ + 1` as `(counter + ⌊(K + 7) / 64⌋) + 1`), the other terms
/// free of the counter; `None` for any other value.
fn counter_increment(value: &Expr, is_counter: &dyn Fn(&Expr) -> bool) -> Option<Expr> {
    fn terms(e: &Expr, out: &mut Vec<Expr>) {
        match e.kind() {
            ExprKind::Bin(tl_ir::BinOp::Add, a, b) => {
                terms(a, out);
                terms(b, out);
            }
            _ => out.push(e.clone()),
        }
    }
    let mut all = vec![];
    terms(value, &mut all);
    let at = all.iter().position(is_counter)?;
    all.remove(at);
    if all.is_empty() || all.iter().any(|t| t.any(&mut |z| is_counter(z))) {
        return None;
    }
    let mut rest = all.into_iter();
    let first = rest.next()?;
    Some(rest.fold(first, |acc, t| acc + t))
}

/// Where every round of a persistent kernel runs the pipeline the same number of times `n`
/// (a GEMM's k steps; not causal attention's, which depend on the tile), the iterations
/// before round `r` are `r·n`: the body with the counter's loads replaced by that and its
/// stores dropped. ptxas keeps such a value in the warp-uniform datapath, where the
/// counter, a register each thread updates, cost the specialized persistent GEMM a fifth of
/// its speed in the PTX backend (every stage address computed per thread between the
/// wgmmas). `None` when the rounds do not all count alike.
fn count_by_rounds(body: &Stmt, counter: &tl_ir::Buffer) -> Option<Stmt> {
    let is_counter = |e: &Expr| matches!(e.kind(), ExprKind::Load(b, _) if b.id() == counter.id());
    let mut done = false;
    let out = body.map_post(&mut |x| {
        let StmtKind::For(l) = &x.kind else {
            return x;
        };
        if done {
            return x;
        }
        // The increments of the counter inside this loop, and the variables bound in it.
        let mut steps = vec![];
        let mut bound: HashSet<u64> = [l.var.id()].into_iter().collect();
        l.body.walk(&mut |y| match &y.kind {
            StmtKind::Store { buffer, value, .. } if buffer.id() == counter.id() => {
                steps.push(counter_increment(value, &is_counter));
            }
            StmtKind::Let { var, .. } => {
                bound.insert(var.id());
            }
            StmtKind::For(inner) => {
                bound.insert(inner.var.id());
            }
            _ => {}
        });
        let Some(Some(step)) = steps.first().cloned() else {
            return x;
        };
        let invariant = !step.any(&mut |e| {
            e.as_var().is_some_and(|v| bound.contains(&v.id()))
                || matches!(e.kind(), ExprKind::Load(..))
        });
        if !invariant
            || steps.iter().any(|s| s.as_ref() != Some(&step))
            || !stored_every_round(&l.body, counter)
        {
            return x;
        }
        done = true;
        let before = l.var.expr().cast(DType::I32) * step.cast(DType::I32);
        let inner = l
            .body
            .map_exprs(&mut |e| replace_counter(e, counter, &before));
        let inner = inner.map_post(&mut |y| match &y.kind {
            StmtKind::Store { buffer, .. } if buffer.id() == counter.id() => Stmt::empty(),
            _ => y,
        });
        let mut l2 = (**l).clone();
        l2.body = inner;
        Stmt::new(StmtKind::For(Box::new(l2)), x.span)
    });
    let mut left = false;
    out.walk(&mut |y| {
        if let StmtKind::Store { buffer, .. } = &y.kind {
            left |= buffer.id() == counter.id();
        }
        for e in y.exprs() {
            left |= e.any(&mut |z| is_counter(z));
        }
    });
    (done && !left).then_some(out)
}

/// Whether every store of `counter` in a round's body `s` runs exactly once a round: reached
/// through sequences and the producer / consumer split only. A store under another `if` (a
/// round that skips the pipeline) or in a loop does not count rounds, and the counter must
/// stay a counter.
fn stored_every_round(s: &Stmt, counter: &tl_ir::Buffer) -> bool {
    match &s.kind {
        StmtKind::Seq(v) => v.iter().all(|x| stored_every_round(x, counter)),
        StmtKind::If { cond, then_, else_ } if is_marker(cond) => {
            stored_every_round(then_, counter)
                && else_
                    .as_ref()
                    .is_none_or(|e| stored_every_round(e, counter))
        }
        StmtKind::Store { .. } => true,
        _ => {
            let mut stores = false;
            s.walk(&mut |y| {
                stores |= matches!(&y.kind, StmtKind::Store { buffer, .. } if buffer.id() == counter.id());
            });
            !stores
        }
    }
}

fn replace_counter(e: &Expr, counter: &tl_ir::Buffer, with: &Expr) -> Expr {
    if matches!(e.kind(), ExprKind::Load(b, _) if b.id() == counter.id()) {
        return with.clone();
    }
    e.map_children(&mut |c| replace_counter(c, counter, with))
}

/// `s` with every access of `old` made to `new` (a buffer of the same shape).
fn rename_buffer(s: &Stmt, old: &tl_ir::Buffer, new: &tl_ir::Buffer) -> Stmt {
    fn ex(e: &Expr, old: &tl_ir::Buffer, new: &tl_ir::Buffer) -> Expr {
        let e2 = e.map_children(&mut |c| ex(c, old, new));
        match e2.kind() {
            ExprKind::Load(b, idx) if b.id() == old.id() => Expr::load(new, idx.clone()),
            _ => e2,
        }
    }
    s.map_exprs(&mut |e| ex(e, old, new))
        .map_post(&mut |x| match x.kind {
            StmtKind::Store {
                buffer,
                indices,
                value,
            } if buffer.id() == old.id() => Stmt::new(
                StmtKind::Store {
                    buffer: new.clone(),
                    indices,
                    value,
                },
                x.span,
            ),
            kind => Stmt::new(kind, x.span),
        })
}

/// The consumers' half: the kernel with the marker's consumer branch, its block barriers
/// among the consumer warps only.
fn consumer_half(s: &Stmt, consumers: u32) -> Stmt {
    s.map_post(&mut |x| match x.kind {
        StmtKind::If { cond, else_, .. } if is_marker(&cond) => match else_ {
            Some(e) => *e,
            None => Stmt::empty(),
        },
        StmtKind::Eval(e) if matches!(e.kind(), ExprKind::Call(Intrinsic::SyncThreads, _)) => eval(
            Intrinsic::NamedBarrier {
                id: CONSUMER_BARRIER,
                threads: consumers,
            },
            vec![],
            x.span,
        ),
        kind => Stmt::new(kind, x.span),
    })
}

/// Named barriers through which the two consumer warpgroups take turns (ping-pong).
const TURN_BARRIERS: [u32; 2] = [2, 3];

/// Whether the consumers take turns issuing their tensor-core work: as the kernel asks
/// (`KernelAttrs::ping_pong`), unless `TILELANG_PINGPONG=1` (every kernel that can) or `=0`
/// (none) says otherwise, to measure.
fn ping_pong_wanted(asked: bool) -> bool {
    match std::env::var("TILELANG_PINGPONG").ok().as_deref() {
        Some("1") => true,
        Some("0") => false,
        _ => asked,
    }
}

/// FlashAttention-3's ping-pong between the two consumer warpgroups: where a consumer loop
/// issues wgmma groups with other work after them (attention's two GEMMs around the softmax,
/// an fp8 GEMM's promotion of its partial accumulator), each group's issue becomes a turn: a
/// warpgroup waits for its turn (`bar.sync` on its barrier) before the group's first wgmma
/// and hands the turn over (`bar.arrive` on the other's) after its commit. The tensor cores
/// then run one warpgroup's GEMM while the other computes, instead of both computing at once
/// and both waiting at once. Warpgroup 1 hands warpgroup 0 the first turn before the loop and
/// warpgroup 0 takes the last hand-over after it, so every phase of both barriers completes
/// within the loop's run (a persistent kernel runs it again). The loop's trip count must be the
/// same for both warpgroups (it may not depend on the thread index); loops whose groups sit
/// under branches are left alone.
fn ping_pong(s: &Stmt, consumers: u32, wanted: bool) -> Stmt {
    if consumers != 2 * 128 || !wanted {
        return s.clone();
    }
    s.map_post(&mut |x| match x.kind {
        StmtKind::For(l) if turns_apply(&l) => {
            let span = x.span;
            let tid = Expr::call(Intrinsic::ThreadIdx, vec![], DType::I32);
            let first = tid.clone().lt(128);
            let mut body = vec![];
            // Groups issued back to back (attention's Q·Kⱼᵀ and, overlapped, P·V of step
            // j − 1) share one turn: the warpgroup hands over only after the last of them.
            let stmts = flatten(&l.body);
            let mut holding = false;
            for (i, st) in stmts.iter().enumerate() {
                if starts_group(st) && !holding {
                    body.push(turn(&first, true, span));
                    holding = true;
                }
                let commit = is_call(st, |op| matches!(op, Intrinsic::WgmmaCommit));
                body.push(st.clone());
                if commit && !stmts.get(i + 1).is_some_and(starts_group) {
                    body.push(turn(&first, false, span));
                    holding = false;
                }
            }
            let mut l2 = *l;
            l2.body = Stmt::seq(body, span);
            Stmt::seq(
                vec![
                    // Warpgroup 1 hands warpgroup 0 its first turn ...
                    if_then(
                        Some(tid.clone().ge(128)),
                        arrive(TURN_BARRIERS[0], span),
                        span,
                    ),
                    Stmt::new(StmtKind::For(Box::new(l2)), span),
                    // ... and warpgroup 0 takes warpgroup 1's last hand-over.
                    if_then(Some(first), sync_on(TURN_BARRIERS[0], span), span),
                ],
                span,
            )
        }
        kind => Stmt::new(kind, x.span),
    })
}

/// Does loop `l` issue wgmma groups, each at the top of its body,
/// with a trip count every consumer thread agrees on?
fn turns_apply(l: &tl_ir::For) -> bool {
    let top = flatten(&l.body);
    let commits = top
        .iter()
        .filter(|s| is_call(s, |op| matches!(op, Intrinsic::WgmmaCommit)))
        .count();
    let mut nested = 0;
    l.body.walk(&mut |s| {
        if is_call(s, |op| matches!(op, Intrinsic::WgmmaCommit)) {
            nested += 1;
        }
    });
    commits >= 1 && nested == commits && !reads_thread_idx(&l.min) && !reads_thread_idx(&l.extent)
}

/// The statements of a loop body, its nested sequences that declare no names merged in (a
/// sequence with a `let` or an allocation is a scope and stays whole: `Stmt::flatten`).
fn flatten(s: &Stmt) -> Vec<Stmt> {
    match s.clone().flatten() {
        Stmt {
            kind: StmtKind::Seq(v),
            ..
        } => v,
        one => vec![one],
    }
}

/// The first statement of a wgmma group: its register fence.
fn starts_group(s: &Stmt) -> bool {
    is_call(s, |op| matches!(op, Intrinsic::WgmmaFence))
}

/// Wait for this warpgroup's turn (`take`), or hand the turn to the other warpgroup.
fn turn(first: &Expr, take: bool, span: tl_ir::Span) -> Stmt {
    let [a, b] = TURN_BARRIERS;
    let (mine, other) = if take { (a, b) } else { (b, a) };
    let op = |id| {
        if take {
            sync_on(id, span)
        } else {
            arrive(id, span)
        }
    };
    Stmt::new(
        StmtKind::If {
            cond: first.clone(),
            then_: Box::new(op(mine)),
            else_: Some(Box::new(op(other))),
        },
        span,
    )
}

fn sync_on(id: u32, span: tl_ir::Span) -> Stmt {
    eval(Intrinsic::NamedBarrier { id, threads: 256 }, vec![], span)
}

fn arrive(id: u32, span: tl_ir::Span) -> Stmt {
    eval(
        Intrinsic::NamedBarrierArrive { id, threads: 256 },
        vec![],
        span,
    )
}

fn reads_thread_idx(e: &Expr) -> bool {
    e.any(&mut |x| matches!(x.kind(), ExprKind::Call(Intrinsic::ThreadIdx, _)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A counter stored in every round (through the producer / consumer split) counts rounds;
    /// one stored under another `if` — a round that may skip the pipeline — must stay a
    /// counter: its phase would otherwise run ahead of the barriers' in the skipped rounds.
    #[test]
    fn counters_stored_in_some_rounds_only_stay_counters() {
        use tl_ir::{Buffer, For, ForKind, Span, Var};
        let span = Span::UNKNOWN;
        let c = Buffer::new("c", vec![Expr::int(1)], DType::I32, Scope::Local, span);
        let inc = Stmt::new(
            StmtKind::Store {
                buffer: c.clone(),
                indices: vec![Expr::int(0)],
                value: Expr::load(&c, vec![Expr::int(0)]) + Expr::int(1),
            },
            span,
        );
        let split = Stmt::new(
            StmtKind::If {
                cond: Expr::call(Intrinsic::ProducerWarps, vec![], DType::Bool),
                then_: Box::new(inc.clone()),
                else_: Some(Box::new(inc)),
            },
            span,
        );
        let rounds = |body: Stmt| {
            Stmt::new(
                StmtKind::For(Box::new(For {
                    var: Var::new("round", DType::I32),
                    min: Expr::int(0),
                    extent: Expr::int(4),
                    kind: ForKind::Serial,
                    body,
                })),
                span,
            )
        };
        assert!(count_by_rounds(&rounds(split.clone()), &c).is_some());
        let guarded = Stmt::new(
            StmtKind::If {
                cond: Var::new("x", DType::I32).expr().lt(3),
                then_: Box::new(split),
                else_: None,
            },
            span,
        );
        assert!(count_by_rounds(&rounds(guarded), &c).is_none());
    }

    /// Registers per SM: the file every block's registers come from.
    const REGISTER_FILE: u32 = 65536;

    #[test]
    fn registers_fit_the_file() {
        for wgs in 1..=3u32 {
            let c = wgs * 128;
            match register_split(c) {
                Some((p, q)) => {
                    assert!(p % 8 == 0 && q % 8 == 0 && (24..=256).contains(&p) && q <= 256);
                    assert!(128 * p + c * q <= REGISTER_FILE, "{c}: {p} {q}");
                    assert!(q > REGISTER_FILE / (c + 128));
                }
                None => assert_eq!(wgs, 1),
            }
        }
        assert_eq!(register_split(256), Some((40, 232)));
    }

    /// Every split a kernel may ask for fits the registers its launch allocated (each
    /// thread's at the kernel's bound), where `setmaxnreg.inc` takes them from: 96 for the
    /// producer beside two consumer warpgroups gives those 200, not the 208 the whole file
    /// would (that split hung on the GPU).
    #[test]
    fn asked_splits_fit_the_launch_pool() {
        // Two consumer warpgroups and the producer: 168 registers each at launch.
        assert_eq!(tl_ir::launch_registers(384) * 384, 64_512);
        for wgs in 1..=3u32 {
            let c = wgs * 128;
            let at_launch = tl_ir::launch_registers(c + PRODUCER_THREADS);
            let pool = at_launch * (c + PRODUCER_THREADS);
            for p in (24..=256).step_by(8) {
                if let Some((dec, inc)) = register_split_asked(c, Some(p)) {
                    assert!(128 * dec + c * inc <= pool, "{c} consumers: {dec} + {inc}");
                    assert!(dec <= at_launch && inc >= at_launch, "{c}: {dec} / {inc}");
                }
            }
        }
        if std::env::var_os("TILELANG_WS_PRODUCER_REGS").is_none() {
            assert_eq!(register_split_asked(256, Some(96)), Some((96, 200)));
            assert_eq!(register_split_asked(256, Some(56)), Some((56, 224)));
        }
    }
}
