//! The `pipeline` stage: software pipelining of `t.pipelined(n, stages)` loops, as a rewrite of
//! tile IR into tile IR (the copies stay tile ops, marked asynchronous, for lowering to turn into
//! cp.async).
//!
//! The producers are the copies from global to shared memory at the top level of the loop
//! body; their destination buffers get `stages` versions. Copies for iteration `k + stages - 1`
//! are issued (as cp.async groups) while iteration `k` computes on version `k % stages`, with
//! one barrier per iteration:
//!
//! ```text
//! for s in 0..stages-1: if s < n { issue(s) }; commit
//! for k in 0..n:
//!     wait_group(stages - 2); barrier    // k's data has landed, and everyone is done with k-1
//!     if k + stages - 1 < n { issue(k + stages - 1) }; commit   // refills k-1's version
//!     compute(k)
//! wait_group(0); barrier
//! ```
//! Commits are unconditional so group counting is uniform; empty groups complete at once.
//!
//! The pipeline owns the ordering of its asynchronous copies (the `insert_barriers` stage
//! leaves them alone). When its consumers run on wgmma, which reads shared memory through the
//! async proxy, every thread fences before the barrier, and the gemms are told their operand
//! tiles need no fence of their own (`GemmSchedule::operands_fenced`); a wgmma gemm that asked
//! for overlap may leave its group in flight into the next iteration
//! (`GemmSchedule::in_flight`), which the pipeline drains after its loop.

use std::collections::{HashMap, HashSet};

use tl_ir::{
    Buffer, DType, DiagKind, Diagnostic, Diagnostics, Expr, ExprKind, For, ForKind,
    GemmInstruction, Intrinsic, Kernel, Region, Scope, Span, Stmt, StmtKind, TileOp, Var,
};
use tl_target::Target;

use crate::tile_util::{address_of, eval, for_loop, if_then, sync};

mod amd;
mod nvidia;
mod preload;
mod ws;

pub(crate) use ws::replicable_wait;

/// What differs between targets' asynchronous copies.
trait Issue {
    /// The copies for an iteration that may lie past the loop's end (`valid` says whether it
    /// does not).
    fn issue(&self, copies: Stmt, valid: Expr, span: Span) -> Stmt;
    /// One steady-state iteration from its parts: the refill, the wait for this iteration's
    /// tiles, the barriers, the computation.
    fn steady(&self, it: Steady) -> Vec<Stmt>;
    /// A buffer per stage and the loop unrolled by the stage count (see [`Staged::Split`]).
    fn split_stages(&self) -> bool {
        false
    }
}

/// The parts of a steady-state iteration.
struct Steady {
    /// Waits until all but the newest `n` groups have landed.
    wait: Box<dyn Fn(u32) -> Stmt>,
    /// Groups issued ahead of the one consumed.
    ahead_by: u32,
    /// Fences the landed tiles for the async proxy (or nothing).
    fence: Stmt,
    barrier: Stmt,
    /// Issues the copies of iteration `k + ahead_by` into the stage iteration `k - 1` read.
    fetch: Stmt,
    commit: Stmt,
    consume: Stmt,
}

fn issuer(target: &Target) -> Box<dyn Issue> {
    match target {
        Target::Hip { .. } => Box::new(amd::BufferLds),
        _ => Box::new(nvidia::CpAsync),
    }
}

/// A pipelined loop the lowering will software-pipeline: its producers (indices into the
/// flattened body) and the buffers they fill.
#[derive(Clone, Debug)]
pub struct PipelinePlan {
    pub producers: Vec<usize>,
}

impl PipelinePlan {
    /// The statements of the loop's (flattened) body that are not producers, in order.
    pub fn consumers(&self, body: &[&Stmt]) -> Vec<Stmt> {
        body.iter()
            .enumerate()
            .filter(|(i, _)| !self.producers.contains(i))
            .map(|(_, st)| (*st).clone())
            .collect()
    }
}

/// Shared buffers accessed anywhere outside the loop whose variable is `var`.
fn accessed_outside(root: &Stmt, var: &Var) -> HashSet<u64> {
    let mut out = HashSet::new();
    fn walk(s: &Stmt, var: &Var, out: &mut HashSet<u64>) {
        if let StmtKind::For(l) = &s.kind {
            if &l.var == var {
                return;
            }
        }
        let mut note = |b: &Buffer| {
            if b.scope() == Scope::Shared {
                out.insert(b.id());
            }
        };
        match &s.kind {
            StmtKind::Store { buffer, .. } => note(buffer),
            StmtKind::Op(op) => {
                let (r, w) = op.regions();
                r.into_iter().chain(w).for_each(|x| note(&x.buffer));
            }
            _ => {}
        }
        for e in s.exprs() {
            e.visit(&mut |x| {
                if let ExprKind::Load(b, _) = x.kind() {
                    if b.scope() == Scope::Shared {
                        out.insert(b.id());
                    }
                }
            });
        }
        match &s.kind {
            StmtKind::Seq(v) => v.iter().for_each(|x| walk(x, var, out)),
            StmtKind::If { then_, else_, .. } => {
                walk(then_, var, out);
                if let Some(e) = else_ {
                    walk(e, var, out);
                }
            }
            StmtKind::For(l) => walk(&l.body, var, out),
            _ => {}
        }
    }
    walk(root, var, &mut out);
    out
}

/// How the stages of a pipelined buffer are stored.
#[derive(Clone, Debug)]
pub enum Staged {
    /// One buffer with a leading stage dimension, indexed by the (run-time) version.
    Indexed(Buffer),
    /// A buffer per stage, each version known at compile time (the loop is unrolled by the
    /// stage count): separate objects, so a compiler tracking asynchronous writes per object
    /// (LLVM's LDS DMA waits) tells the stage being refilled from the one being read.
    Split(Vec<Buffer>),
}

/// Which version of the staged buffers an access means.
#[derive(Clone, Debug)]
enum Ver {
    Dynamic(Expr),
    Static(usize),
}

/// Find the loops to pipeline and the buffers that need stages (`split`: a buffer per stage).
pub fn plan(
    root: &Stmt,
    target: &Target,
    split: bool,
) -> (HashMap<u64, PipelinePlan>, HashMap<u64, Staged>) {
    let mut plans = HashMap::new();
    let mut versioned = HashMap::new();
    if !target.has_async_copy() {
        return (plans, versioned);
    }
    root.walk(&mut |s| {
        let StmtKind::For(l) = &s.kind else { return };
        let ForKind::Pipelined {
            stages, ref stage, ..
        } = l.kind
        else {
            return;
        };
        if stages < 2 {
            return;
        }
        let outside = accessed_outside(root, &l.var);
        let body = l.body.flattened();
        let mut producers = vec![];
        for (i, st) in body.iter().enumerate() {
            // With a `stage` annotation only the statements put in stage 0 run ahead.
            let may_run_ahead = stage.as_ref().is_none_or(|v| v.get(i) == Some(&0));
            if !may_run_ahead {
                continue;
            }
            if let StmtKind::Op(TileOp::Copy(c)) = &st.kind {
                let b = &c.dst.buffer;
                if c.src.buffer.scope() == Scope::Global
                    && b.scope() == Scope::Shared
                    && !outside.contains(&b.id())
                    && !versioned.contains_key(&b.id())
                    && !c.src.offsets.iter().any(uses_shared)
                {
                    let staged = if split {
                        Staged::Split(
                            (0..stages)
                                .map(|s| {
                                    b.derive(
                                        format!("{}_{s}", b.name()),
                                        b.shape().to_vec(),
                                        Scope::Shared,
                                    )
                                })
                                .collect(),
                        )
                    } else {
                        let mut shape = vec![Expr::int(stages as i64)];
                        shape.extend(b.shape().iter().cloned());
                        Staged::Indexed(b.derive(b.name(), shape, Scope::Shared))
                    };
                    versioned.insert(b.id(), staged);
                    producers.push(i);
                }
            }
        }
        if !producers.is_empty() {
            plans.insert(l.var.id(), PipelinePlan { producers });
        }
    });
    (plans, versioned)
}

fn uses_shared(e: &Expr) -> bool {
    e.any(&mut |x| matches!(x.kind(), ExprKind::Load(b, _) if b.scope() != Scope::Global))
}

/// The buffer and leading indices an access of a staged buffer becomes at version `ver`.
fn staged_at(st: &Staged, ver: &Ver) -> (Buffer, Option<Expr>) {
    match (st, ver) {
        (Staged::Indexed(nb), Ver::Dynamic(e)) => (nb.clone(), Some(e.clone())),
        (Staged::Indexed(nb), Ver::Static(i)) => (nb.clone(), Some(Expr::int(*i as i64))),
        (Staged::Split(bufs), Ver::Static(i)) => (bufs[*i % bufs.len()].clone(), None),
        // A split pipeline only ever asks for static versions (its loop is unrolled by the
        // stage count); stage 0 keeps the program well-formed should that change.
        (Staged::Split(bufs), Ver::Dynamic(_)) => (bufs[0].clone(), None),
    }
}

/// Point every access of a staged buffer at version `ver`.
fn version_stmt(s: &Stmt, versioned: &HashMap<u64, Staged>, ver: &Ver) -> Stmt {
    fn ex(e: &Expr, m: &HashMap<u64, Staged>, ver: &Ver) -> Expr {
        let e2 = e.map_children(&mut |c| ex(c, m, ver));
        if let ExprKind::Load(b, idx) = e2.kind() {
            if let Some(st) = m.get(&b.id()) {
                let (nb, lead) = staged_at(st, ver);
                let i: Vec<Expr> = lead.into_iter().chain(idx.iter().cloned()).collect();
                return Expr::load(&nb, i);
            }
        }
        e2
    }
    let s = s.map_exprs(&mut |e| ex(e, versioned, ver));
    s.map_post(&mut |st| {
        let kind = match st.kind {
            StmtKind::Store {
                buffer,
                indices,
                value,
            } => match versioned.get(&buffer.id()) {
                Some(sb) => {
                    let (nb, lead) = staged_at(sb, ver);
                    StmtKind::Store {
                        buffer: nb,
                        indices: lead.into_iter().chain(indices).collect(),
                        value,
                    }
                }
                None => StmtKind::Store {
                    buffer,
                    indices,
                    value,
                },
            },
            StmtKind::Op(mut op) => {
                for r in op.regions_mut() {
                    if let Some(sb) = versioned.get(&r.buffer.id()) {
                        let (nb, lead) = staged_at(sb, ver);
                        *r = versioned_region(r, &nb, lead);
                    }
                }
                StmtKind::Op(op)
            }
            k => k,
        };
        Stmt::new(kind, st.span)
    })
}

fn versioned_region(r: &Region, nb: &Buffer, lead: Option<Expr>) -> Region {
    let Some(ver) = lead else {
        return Region::new(nb, r.offsets.clone(), r.extents.clone());
    };
    let mut offsets = vec![ver];
    offsets.extend(r.offsets.iter().cloned());
    let mut extents = vec![Expr::int(1)];
    extents.extend(r.extents.iter().cloned());
    Region::new(nb, offsets, extents)
}

/// The `pipeline` stage.
pub fn run(k: Kernel, target: &Target) -> Result<Kernel, Diagnostics> {
    let (plans, versioned) = plan(&k.body, target, issuer(target).split_stages());
    let ws = ws::candidate(&k, &plans, target);
    // Only a kernel with a loop to specialize can preload.
    let access_counts = if ws.is_some() {
        preload::AccessCounts::of([&k.body])
    } else {
        Default::default()
    };
    let mut px = Pipeliner {
        ws,
        ws_out: None,
        threads: k.threads,
        persistent: k.attrs.persistent_blocks.is_some(),
        cluster: match k.attrs.cluster {
            Some(c) if c.size > 1 && k.attrs.persistent_blocks.is_some() => c.size,
            _ => 1,
        },
        target: *target,
        plans,
        versioned,
        errors: vec![],
        smem: k
            .attrs
            .smem_layouts
            .iter()
            .map(|(b, l)| (b.id(), l.clone()))
            .collect(),
        analyzer: crate::simplify::kernel_analyzer(&k),
        per_thread_lets: crate::tile_util::per_thread_lets(&k.body),
        pitchable: if k.attrs.tma_pitched_inputs {
            read_only_inputs(&k)
        } else {
            Default::default()
        },
        symmetric: k
            .attrs
            .dist
            .as_ref()
            .map(|d| d.symmetric.iter().copied().collect())
            .unwrap_or_default(),
        read_only: read_only_inputs(&k),
        access_counts,
        pending_preloads: vec![],
        placed_preloads: None,
    };
    let body = px.rewrite(&k.body);
    if !px.errors.is_empty() {
        return Err(Diagnostics(px.errors));
    }
    let mut out = k.with_body(body);
    out.attrs.warp_specialized = px.ws_out.take();
    // Every version of a buffer keeps its layout.
    let staged: Vec<(Buffer, tl_layout::ComposedLayout)> = out
        .attrs
        .smem_layouts
        .iter()
        .filter_map(|(b, l)| px.versioned.get(&b.id()).map(|v| (v, l)))
        .flat_map(|(v, l)| {
            let bufs = match v {
                Staged::Indexed(b) => vec![b.clone()],
                Staged::Split(bs) => bs.clone(),
            };
            bufs.into_iter().map(move |b| (b, l.clone()))
        })
        .collect();
    out.attrs.smem_layouts.extend(staged);
    Ok(out)
}

struct Pipeliner {
    /// The loop that may be warp-specialized (`ws::candidate`).
    ws: Option<ws::Candidate>,
    /// What the specialized loop left for the `warp_specialize` stage.
    ws_out: Option<tl_ir::WarpSpecialized>,
    /// The kernel's threads (the consumers, when a loop is specialized).
    threads: u32,
    /// A persistent kernel: a specialized pipeline counts its iterations across rounds.
    persistent: bool,
    /// Blocks per thread-block cluster (1: none): a specialized loop's consumers release each
    /// stage to every block of the cluster, whose producers multicast into it.
    cluster: u32,
    target: Target,
    plans: HashMap<u64, PipelinePlan>,
    /// Shared buffers given pipeline stages: original id → its stages.
    versioned: HashMap<u64, Staged>,
    errors: Vec<Diagnostic>,
    /// Shared layouts (tensor-core swizzles) by buffer id, before staging.
    smem: HashMap<u64, tl_layout::ComposedLayout>,
    /// What the kernel variant proves about its sizes (for TMA's stride rule).
    analyzer: tl_ir::Analyzer,
    /// The kernel's `let`s whose values differ between threads (`tile_util::per_thread_lets`).
    per_thread_lets: HashSet<Var>,
    /// Input tensors the runtime may stage into pitched copies for TMA
    /// (`KernelAttrs::tma_pitched_inputs`), by buffer id.
    pitchable: std::collections::HashSet<u64>,
    /// Symmetric buffers of a multi-rank kernel: peers write them with generic stores that an
    /// acquire orders for the generic proxy only, so a TMA pipeline loading one fences the
    /// proxies (`fence.proxy.async.global`) before its first load.
    symmetric: std::collections::HashSet<u64>,
    /// Input tensors nothing in the kernel writes: TMA may read them without a proxy fence.
    read_only: std::collections::HashSet<u64>,
    /// How many statements of the kernel write, and access, each buffer (for `preload`;
    /// empty where no loop may be specialized).
    access_counts: preload::AccessCounts,
    /// Copies the specialized loop's producer takes over (`preload`), found by the sequence
    /// that holds the loop and taken by `expand_ws`.
    pending_preloads: Vec<preload::Preload>,
    /// What `expand_ws` placed of them, for that sequence to finish.
    placed_preloads: Option<preload::Placement>,
}

/// The tensor parameters the kernel reads and never writes.
fn read_only_inputs(k: &Kernel) -> std::collections::HashSet<u64> {
    let written = k.body.written_buffers();
    k.params
        .iter()
        .filter_map(|p| match p {
            tl_ir::Param::Tensor { buffer, role }
                if *role == tl_ir::Role::Input && !written.contains(&buffer.id()) =>
            {
                Some(buffer.id())
            }
            _ => None,
        })
        .collect()
}

impl Pipeliner {
    /// Whether the loop's loads read a source written in this kernel: a symmetric one by
    /// peers' puts (acquired by a wait before the loop), any other by blocks handing it over
    /// through a flag. Those writes went through the generic proxy; TMA reads through the
    /// async proxy, which the acquire does not order, so the loading thread fences the
    /// proxies (`fence.proxy.async.global`) before its first load.
    fn loads_written_source(&self, plan: &PipelinePlan, body: &[&Stmt]) -> bool {
        plan.producers.iter().any(|&i| {
            matches!(&body[i].kind, StmtKind::Op(TileOp::Copy(c))
                if self.symmetric.contains(&c.src.buffer.id())
                    || !self.read_only.contains(&c.src.buffer.id()))
        })
    }

    fn rewrite(&mut self, s: &Stmt) -> Stmt {
        let span = s.span;
        match &s.kind {
            StmtKind::Seq(v) => {
                let preloads = self.preload_candidates(v);
                let holds_loop = !preloads.is_empty();
                if holds_loop {
                    self.pending_preloads = preloads;
                }
                let mut parts: Vec<Vec<Stmt>> = Vec::with_capacity(v.len());
                for x in v {
                    parts.push(match &x.kind {
                        // A buffer per stage: all allocated in the scope the buffer was.
                        StmtKind::Alloc(b) => match self.versioned.get(&b.id()) {
                            Some(Staged::Split(bufs)) => bufs
                                .iter()
                                .map(|b| Stmt::new(StmtKind::Alloc(b.clone()), x.span))
                                .collect(),
                            _ => vec![self.rewrite(x)],
                        },
                        _ => vec![self.rewrite(x)],
                    });
                }
                if holds_loop {
                    // Not taken when the loop did not specialize: the copies stay.
                    self.pending_preloads.clear();
                    if let Some(placement) = self.placed_preloads.take() {
                        preload::place(&mut parts, &placement, span);
                    }
                }
                Stmt::seq(parts.concat(), span)
            }
            StmtKind::If { cond, then_, else_ } => Stmt::new(
                StmtKind::If {
                    cond: cond.clone(),
                    then_: Box::new(self.rewrite(then_)),
                    else_: else_.as_ref().map(|e| Box::new(self.rewrite(e))),
                },
                span,
            ),
            StmtKind::Alloc(b) if b.scope() == Scope::Shared => match self.versioned.get(&b.id()) {
                Some(Staged::Indexed(mv)) => Stmt::new(StmtKind::Alloc(mv.clone()), span),
                Some(Staged::Split(bufs)) => Stmt::seq(
                    bufs.iter()
                        .map(|b| Stmt::new(StmtKind::Alloc(b.clone()), span))
                        .collect(),
                    span,
                ),
                None => s.clone(),
            },
            StmtKind::For(l) => match &l.kind {
                ForKind::Pipelined { stages, .. }
                    if *stages > 1 && self.target.has_async_copy() =>
                {
                    match self.expand(l, *stages, span) {
                        Ok(x) => x,
                        Err(d) => {
                            self.errors.push(d);
                            Stmt::empty()
                        }
                    }
                }
                _ => self.serial(l, span),
            },
            _ => s.clone(),
        }
    }

    /// The loop with its body rewritten; a pipelined loop that is not expanded becomes serial.
    fn serial(&mut self, l: &For, span: Span) -> Stmt {
        let mut l2 = l.clone();
        l2.body = self.rewrite(&l.body);
        if matches!(l2.kind, ForKind::Pipelined { .. }) {
            l2.kind = ForKind::Serial;
        }
        Stmt::new(StmtKind::For(Box::new(l2)), span)
    }

    fn expand(&mut self, l: &For, stages: u32, span: Span) -> Result<Stmt, Diagnostic> {
        self.check_schedule(l, stages, span)?;
        // The loop loads later iterations' tiles ahead of this one's body: a wait in the body
        // would not order those loads after the signal it waits for.
        let mut wait = None;
        l.body.walk(&mut |s| {
            for e in s.exprs() {
                if e.any(&mut |x| {
                    matches!(
                        x.kind(),
                        tl_ir::ExprKind::Call(Intrinsic::WaitUntil { .. }, _)
                    )
                }) {
                    wait.get_or_insert(s.span);
                }
            }
        });
        if let Some(at) = wait {
            return Err(Diagnostic::new(
                DiagKind::InvalidArgument,
                at,
                "a wait inside a pipelined loop: the loop loads the tiles of later iterations before this iteration's wait, so those loads are not ordered after the signal".to_string(),
            )
            .help("wait before the loop (for everything it reads), or make the loop serial"));
        }
        let Some(plan) = self.plans.get(&l.var.id()).cloned() else {
            // Nothing to prefetch: an ordinary loop.
            return Ok(self.serial(l, span));
        };
        let s = stages as i64;
        let body = l.body.flattened();
        // How many wgmma groups stay in flight across iterations: 1 when the only consumer is
        // a wgmma gemm that asked for overlap, so tiles are refilled one iteration later (the
        // stage being refilled is then two iterations old, and its wgmma retired).
        let consumer_ids: Vec<usize> = (0..body.len())
            .filter(|i| !plan.producers.contains(i))
            .collect();
        let (depth, chosen) = loop_depth(&body, &consumer_ids, s, span)?;
        // `overlap` sets the gemm's wait to `depth`; waits the kernel chose stay as they are.
        let overlap_depth = if chosen { 0 } else { depth };
        let tma = self.tma_bytes(&body, &plan);
        // Specialized where the tiles all load by TMA and a wgmma gemm consumes them.
        if self.ws.as_ref().is_some_and(|c| c.loop_var == l.var.id()) {
            if let Some(bytes) = tma.filter(|_| ws::consumers_use_wgmma(&body, &plan)) {
                return Ok(self.expand_ws(ws::Loop {
                    l,
                    stages: s,
                    depth,
                    overlap_depth,
                    plan: &plan,
                    bytes,
                    span,
                }));
            }
        }
        if let Some(bytes) = tma {
            return Ok(self.expand_tma(l, s, depth, overlap_depth, &plan, bytes, span));
        }
        let ahead_by = s - 1 - depth;
        let n = l.extent.clone();
        let lo = l.min.clone();
        let commit = eval(Intrinsic::CpAsyncCommit, vec![], span);
        let engine = issuer(&self.target);
        let split = engine.split_stages();
        let versioned = self.versioned.clone();
        let issue = |it: Expr, ver: Ver| -> Stmt {
            let mut map = HashMap::new();
            map.insert(l.var.id(), lo.clone() + it.clone());
            let copies = plan
                .producers
                .iter()
                .map(|&i| {
                    let st = version_stmt(&body[i].substitute(&map), &versioned, &ver);
                    st.map_post(&mut |x| match x.kind {
                        StmtKind::Op(TileOp::Copy(mut c)) => {
                            c.asynchronous = true;
                            Stmt::new(StmtKind::Op(TileOp::Copy(c)), x.span)
                        }
                        kind => Stmt::new(kind, x.span),
                    })
                })
                .collect();
            Stmt::seq(copies, span)
        };
        let mut out = vec![];
        // Prologue.
        if split {
            for st in 0..ahead_by {
                let valid = Expr::int(st).lt(n.clone());
                out.push(engine.issue(issue(Expr::int(st), Ver::Static(st as usize)), valid, span));
                out.push(commit.clone());
            }
        } else {
            let sv = Var::new("stage", DType::I32);
            out.push(for_loop(
                &sv,
                ahead_by,
                ForKind::Unrolled,
                Stmt::seq(
                    vec![
                        engine.issue(
                            issue(sv.expr(), Ver::Dynamic(sv.expr().floormod(s))),
                            sv.expr().lt(n.clone()),
                            span,
                        ),
                        commit.clone(),
                    ],
                    span,
                ),
                span,
            ));
        }
        let consumers = plan.consumers(&body);
        let mut drain = vec![];
        // One steady-state iteration `k` (consuming version `cur`, refilling `next`).
        let mut iteration = |px: &mut Pipeliner, k: Expr, cur: Ver, next: Ver| -> Stmt {
            let ahead = k.clone() + ahead_by;
            let fetch = issue(ahead.clone(), next);
            let mut map = HashMap::new();
            map.insert(l.var.id(), lo.clone() + k);
            let consume = version_stmt(
                &Stmt::seq(consumers.clone(), span).substitute(&map),
                &versioned,
                &cur,
            );
            // The fence below covers every shared buffer the consumers do not write themselves.
            let (consume, wgmma) = schedule_wgmma(
                &consume,
                depth,
                overlap_depth,
                &mut drain,
                &px.per_thread_lets,
            );
            let consume = px.rewrite(&consume);
            // wgmma reads shared memory through the async proxy: every thread fences its
            // landed cp.async writes (and any earlier writes) before the barrier that hands
            // them to the warpgroups.
            let fence = if wgmma {
                eval(Intrinsic::FenceProxyAsync, vec![], span)
            } else {
                Stmt::empty()
            };
            Stmt::seq(
                engine.steady(Steady {
                    wait: Box::new(move |n| eval(Intrinsic::CpAsyncWait { n }, vec![], span)),
                    ahead_by: ahead_by as u32,
                    fence,
                    barrier: sync(span),
                    fetch: engine.issue(fetch, ahead.lt(n.clone()), span),
                    commit: commit.clone(),
                    consume,
                }),
                span,
            )
        };
        if split {
            // Unrolled by the stage count, so every version is known: copy `j` of the body
            // runs iteration `s·k + j`.
            let k = Var::new(l.var.name(), DType::I32);
            let copies: Vec<Stmt> = (0..s)
                .map(|j| {
                    let kj = k.expr() * s + j;
                    let it = iteration(
                        self,
                        kj.clone(),
                        Ver::Static(j as usize),
                        Ver::Static(((j + ahead_by) % s) as usize),
                    );
                    if_then(Some(kj.lt(n.clone())), it, span)
                })
                .collect();
            out.push(Stmt::new(
                StmtKind::For(Box::new(For {
                    var: k,
                    min: Expr::int(0),
                    extent: (n.clone() + (s - 1)).floordiv(s),
                    kind: ForKind::Serial,
                    body: Stmt::seq(copies, span),
                })),
                span,
            ));
        } else {
            let k = Var::new(l.var.name(), DType::I32);
            let steady = iteration(
                self,
                k.expr(),
                Ver::Dynamic(k.expr().floormod(s)),
                Ver::Dynamic((k.expr() + ahead_by).floormod(s)),
            );
            out.push(Stmt::new(
                StmtKind::For(Box::new(For {
                    var: k,
                    min: Expr::int(0),
                    extent: n,
                    kind: ForKind::Serial,
                    body: steady,
                })),
                span,
            ));
        }
        if !drain.is_empty() {
            out.push(eval(Intrinsic::WGMMA_WAIT_ALL, drain, span));
        }
        out.push(eval(Intrinsic::CpAsyncWait { n: 0 }, vec![], span));
        out.push(sync(span));
        Ok(Stmt::seq(out, span))
    }

    /// The bytes one iteration's copies bring, when every producer of the loop can be a TMA
    /// copy (Hopper, `TILELANG_TMA` not `0`); `None` keeps cp.async.
    fn tma_bytes(&self, body: &[&Stmt], plan: &PipelinePlan) -> Option<i64> {
        if !self.target.has_tma() || std::env::var("TILELANG_TMA").is_ok_and(|v| v == "0") {
            return None;
        }
        let mut bytes = 0;
        for &i in &plan.producers {
            let StmtKind::Op(TileOp::Copy(c)) = &body[i].kind else {
                return None;
            };
            if !super::tma::starts_on_16_bytes(&c.src, &self.analyzer) {
                return None;
            }
            let aligned = self.pitchable.contains(&c.src.buffer.id())
                || super::tma::row_bytes_aligned(&c.src.buffer, &self.analyzer);
            let t = super::tma::TmaTile::of(
                &c.src,
                &c.dst,
                self.smem.get(&c.dst.buffer.id()),
                &self.target,
                aligned,
            )?;
            bytes += t.bytes;
        }
        Some(bytes)
    }

    /// The TMA pipeline (Hopper): a barrier per stage; one thread refills a stage with the
    /// tensor-memory accelerator, announcing the bytes it expects; everyone waits on the stage's
    /// barrier (phase parity: which use of the stage this is), then passes a block barrier
    /// (everyone is done with the stage about to be refilled) before the refill:
    ///
    /// ```text
    /// thread 0: init bar[0..stages] (1 arrival each); fence; barrier
    /// for s in 0..ahead: if s < n: thread 0: expect_tx(bar[s], bytes); tma(s) → bar[s]
    /// for k in 0..n:
    ///     wait(bar[k % stages], parity (k / stages) & 1); barrier
    ///     if k + ahead < n: thread 0: expect_tx(bar[(k + ahead) % stages]); tma(k + ahead)
    ///     compute(k)
    /// barrier
    /// ```
    /// TMA writes through the async proxy, which wgmma reads through: no proxy fence.
    #[allow(clippy::too_many_arguments)]
    fn expand_tma(
        &mut self,
        l: &For,
        s: i64,
        depth: i64,
        overlap_depth: i64,
        plan: &PipelinePlan,
        bytes: i64,
        span: Span,
    ) -> Stmt {
        let body = l.body.flattened();
        let ahead_by = s - 1 - depth;
        let n = l.extent.clone();
        let lo = l.min.clone();
        let bars = Buffer::new(
            format!("{}_bar", l.var.name()),
            vec![Expr::int(s)],
            DType::U64,
            Scope::Shared,
            span,
        );
        let bar = |ver: Expr| address_of(&bars, vec![ver]);
        let tid0 = Expr::call(Intrinsic::ThreadIdx, vec![], DType::I32).eq_(0);
        let versioned = self.versioned.clone();
        let issue = |it: Expr| -> Stmt {
            let ver = it.floormod(s);
            let mut map = HashMap::new();
            map.insert(l.var.id(), lo.clone() + it);
            let mut stmts = vec![eval(
                Intrinsic::MbarrierArriveExpectTx,
                vec![bar(ver.clone()), Expr::int(bytes)],
                span,
            )];
            for &i in &plan.producers {
                let st = version_stmt(
                    &body[i].substitute(&map),
                    &versioned,
                    &Ver::Dynamic(ver.clone()),
                );
                stmts.push(tma_copies(&st, &bar(ver.clone())));
            }
            Stmt::seq(stmts, span)
        };
        let mut out = vec![Stmt::new(StmtKind::Alloc(bars.clone()), span)];
        let mut init: Vec<Stmt> = (0..s)
            .map(|st| {
                eval(
                    Intrinsic::MbarrierInit { count: 1 },
                    vec![bar(Expr::int(st))],
                    span,
                )
            })
            .collect();
        init.push(eval(Intrinsic::FenceMbarrierInit, vec![], span));
        out.push(if_then(Some(tid0.clone()), Stmt::seq(init, span), span));
        // Operand tiles written before the loop by ordinary stores (attention's Q) are read
        // by wgmma through the async proxy: the loop has no fence of its own, so fence here,
        // before the barrier that hands them over.
        let mut reads_async = false;
        for st in &body {
            st.walk(&mut |x| {
                reads_async |= matches!(&x.kind, StmtKind::Op(TileOp::Gemm(g))
                    if g.instruction == Some(GemmInstruction::Wgmma));
            });
        }
        if reads_async {
            out.push(eval(Intrinsic::FenceProxyAsync, vec![], span));
        }
        out.push(sync(span));
        // The issuing thread fences the proxies after the barrier above (so after whichever
        // thread acquired), before its first load (`loads_written_source`).
        if self.loads_written_source(plan, &body) {
            out.push(if_then(
                Some(tid0.clone()),
                eval(Intrinsic::FenceProxyAsyncGlobal, vec![], span),
                span,
            ));
        }
        for st in 0..ahead_by {
            let valid = Expr::int(st).lt(n.clone()).and(tid0.clone());
            out.push(if_then(Some(valid), issue(Expr::int(st)), span));
        }
        let consumers = plan.consumers(&body);
        let k = Var::new(l.var.name(), DType::I32);
        let mut map = HashMap::new();
        map.insert(l.var.id(), lo.clone() + k.expr());
        let consume = version_stmt(
            &Stmt::seq(consumers, span).substitute(&map),
            &versioned,
            &Ver::Dynamic(k.expr().floormod(s)),
        );
        let mut drain = vec![];
        // The operands were written by TMA (the async proxy wgmma reads through).
        let (consume, _) = schedule_wgmma(
            &consume,
            depth,
            overlap_depth,
            &mut drain,
            &self.per_thread_lets,
        );
        let consume = self.rewrite(&consume);
        let ahead = k.expr() + ahead_by;
        let steady = vec![
            eval(
                Intrinsic::MbarrierWait,
                vec![bar(k.expr().floormod(s)), k.expr().floordiv(s).floormod(2)],
                span,
            ),
            sync(span),
            if_then(
                Some(ahead.clone().lt(n.clone()).and(tid0)),
                issue(ahead),
                span,
            ),
            consume,
        ];
        out.push(Stmt::new(
            StmtKind::For(Box::new(For {
                var: k,
                min: Expr::int(0),
                extent: n,
                kind: ForKind::Serial,
                body: Stmt::seq(steady, span),
            })),
            span,
        ));
        if !drain.is_empty() {
            out.push(eval(Intrinsic::WGMMA_WAIT_ALL, drain, span));
        }
        out.push(sync(span));
        Stmt::seq(out, span)
    }

    /// The `order` / `stage` annotations this pipeliner can honour: the issue order is the
    /// body's order, and there are two stages — copies from global to shared memory that run
    /// `stages - 1` iterations ahead (stage 0) and everything else (stage `stages - 1`). The
    /// verifier has already checked the annotations' shape; this rejects, with the fix, the
    /// schedules it would otherwise silently not follow.
    fn check_schedule(&self, l: &For, stages: u32, span: Span) -> Result<(), Diagnostic> {
        let ForKind::Pipelined { order, stage, .. } = &l.kind else {
            return Ok(());
        };
        if let Some(o) = order {
            if o.iter().enumerate().any(|(i, &x)| x != i as i32) {
                return Err(Diagnostic::new(
                    DiagKind::Unsupported,
                    span,
                    format!(
                        "pipelined loop: reordering the body (`order` {o:?}) is not supported on {}",
                        self.target
                    ),
                )
                .help("write the statements in the order they should be issued and drop `order`"));
            }
        }
        let Some(st) = stage else { return Ok(()) };
        let last = stages.saturating_sub(1) as i32;
        let producers: &[usize] = self.plans.get(&l.var.id()).map_or(&[], |p| &p.producers);
        for (i, &x) in st.iter().enumerate() {
            if x > 0 && x < last {
                return Err(Diagnostic::new(
                    DiagKind::Unsupported,
                    span,
                    format!("pipelined loop: statement {i} is put in stage {x}, but this pipeliner has two stages"),
                )
                .help(format!("use stage 0 for copies that run ahead and {last} for the rest")));
            }
            if x == 0 && last > 0 && !producers.contains(&i) {
                return Err(Diagnostic::new(
                    DiagKind::Unsupported,
                    span,
                    format!("pipelined loop: statement {i} is put in stage 0, but only a copy from global to shared memory (into a tile used only inside this loop) can run ahead"),
                )
                .help(format!("give statement {i} stage {last}")));
            }
        }
        Ok(())
    }
}

/// How many wgmma groups stay in flight across iterations (see `Pipeliner::expand`).
fn wgmma_depth(body: &[&Stmt], consumer_ids: &[usize], s: i64) -> i64 {
    match consumer_ids {
        [i] if s >= 3 => match &body[*i].kind {
            StmtKind::Op(TileOp::Gemm(g))
                if g.overlap && g.instruction == Some(GemmInstruction::Wgmma) =>
            {
                1
            }
            _ => 0,
        },
        _ => 0,
    }
}

/// How many wgmma groups one iteration leaves in flight into the next (0 or 1), so that
/// stages are refilled that many iterations later, and whether the kernel chose its waits. Without a kernel-chosen wait it is
/// [`wgmma_depth`] (`overlap`). With one (`wg_wait`, `wait_wgmma`), the consumers are played
/// twice (the second time from the first's end, the steady state): each wgmma gemm adds a
/// group and its own wait, or a `wait_wgmma` at the top level, bounds the count. More than
/// one group crossing, or one with fewer than 3 stages, is refused: a stage could be
/// refilled under a wgmma still reading it.
fn loop_depth(
    body: &[&Stmt],
    consumer_ids: &[usize],
    s: i64,
    span: tl_ir::Span,
) -> Result<(i64, bool), Diagnostic> {
    let wgmma = |g: &tl_ir::GemmOp| g.instruction == Some(GemmInstruction::Wgmma);
    let mut explicit = false;
    for &i in consumer_ids {
        body[i].walk(&mut |x| match &x.kind {
            StmtKind::Op(TileOp::Gemm(g)) if wgmma(g) && g.wg_wait.is_some() => explicit = true,
            StmtKind::Eval(e)
                if matches!(e.kind(), ExprKind::Call(Intrinsic::WgmmaWait { .. }, _)) =>
            {
                explicit = true
            }
            _ => {}
        });
    }
    if !explicit {
        return Ok((wgmma_depth(body, consumer_ids, s), false));
    }
    let after = |pending: u32, g: &tl_ir::GemmOp| -> u32 {
        match g.wg_wait {
            None => 0,
            Some(n) => u32::try_from(n).map_or(pending, |n| pending.min(n)),
        }
    };
    // A pending group crossing into the next iteration is that iteration's only if every
    // iteration issues one: a gemm at the top of the body, not under a condition or in an
    // inner loop that may not run.
    let issues_every_iteration = consumer_ids
        .iter()
        .any(|&i| matches!(&body[i].kind, StmtKind::Op(TileOp::Gemm(g)) if wgmma(g)));
    let mut pending = 0u32;
    for _ in 0..2 {
        for &i in consumer_ids {
            match &body[i].kind {
                StmtKind::Op(TileOp::Gemm(g)) if wgmma(g) => pending = after(pending + 1, g),
                StmtKind::Eval(e) => {
                    if let ExprKind::Call(Intrinsic::WgmmaWait { n, .. }, _) = e.kind() {
                        pending = pending.min(*n);
                    }
                }
                // Nested gemms may or may not run; nested waits are not counted on.
                _ => body[i].walk(&mut |x| {
                    if let StmtKind::Op(TileOp::Gemm(g)) = &x.kind {
                        if wgmma(g) && g.wg_wait != Some(0) && g.wg_wait.is_some() {
                            pending += 1;
                        }
                    }
                }),
            }
        }
    }
    match pending {
        0 => Ok((0, true)),
        1 if !issues_every_iteration => Err(Diagnostic::new(
            DiagKind::Unsupported,
            span,
            "a wgmma group may stay in flight from one iteration of this pipelined loop into the next, issued by a gemm under a condition or in an inner loop: in an iteration where it does not run, an older group would still read a stage being refilled".to_string(),
        )
        .help("wait_wgmma(0) at the end of the loop body, or issue the gemm unconditionally")),
        1 if s >= 3 => Ok((1, true)),
        1 => Err(Diagnostic::new(
            DiagKind::Unsupported,
            span,
            format!("a wgmma group stays in flight from one iteration of this pipelined loop into the next (a gemm's wg_wait), which needs at least 3 stages; it has {s}"),
        )
        .help("use 3 or more stages, or wait_wgmma(0) at the end of the loop body")),
        n => Err(Diagnostic::new(
            DiagKind::Unsupported,
            span,
            format!("{n} wgmma groups may stay in flight from one iteration of this pipelined loop into the next; at most one can (the stage it reads is refilled two iterations later)"),
        )
        .help("wait_wgmma(1) at the end of the loop body")),
    }
}

/// The copies of `st` made asynchronous TMA copies completing on the mbarrier at `bar`.
fn tma_copies(st: &Stmt, bar: &Expr) -> Stmt {
    st.map_post(&mut |x| match x.kind {
        StmtKind::Op(TileOp::Copy(mut c)) => {
            c.asynchronous = true;
            c.tma_barrier = Some(bar.clone());
            Stmt::new(StmtKind::Op(TileOp::Copy(c)), x.span)
        }
        kind => Stmt::new(kind, x.span),
    })
}

/// The wgmma gemms of a pipelined loop's consumers `consume`, scheduled: operand tiles the
/// consumers do not write themselves need no fence of their own (the pipeline fences them, or
/// TMA wrote them through the async proxy); with `depth` groups left in flight across
/// iterations, the gemms leave `overlap_depth` of them (0: the kernel's own waits stay), and
/// the registers those groups use go into `drain` (waited for after the loop). Also whether
/// there was any wgmma gemm.
fn schedule_wgmma(
    consume: &Stmt,
    depth: i64,
    overlap_depth: i64,
    drain: &mut Vec<Expr>,
    per_thread: &HashSet<Var>,
) -> (Stmt, bool) {
    let fenced_here = fence_edge_writes(consume, per_thread);
    let consume = fenced_here.as_ref().unwrap_or(consume);
    let written = match fenced_here {
        // The operand writes fence and hand over themselves, inside their branches.
        Some(_) => HashSet::new(),
        None => written_shared(consume),
    };
    let mut any = false;
    let out = consume.map_post(&mut |x| match x.kind {
        StmtKind::Op(TileOp::Gemm(mut g)) if g.instruction == Some(GemmInstruction::Wgmma) => {
            any = true;
            let a_regs = g.a.buffer.scope() == Scope::Fragment;
            g.schedule.operands_fenced = !written.contains(&g.b.buffer.id())
                && (a_regs || !written.contains(&g.a.buffer.id()));
            if depth > 0 {
                if overlap_depth > 0 {
                    g.schedule.in_flight = overlap_depth as u32;
                }
                super::wgmma::add_register_pins(drain, &g);
            }
            Stmt::new(StmtKind::Op(TileOp::Gemm(g)), x.span)
        }
        kind => Stmt::new(kind, x.span),
    });
    (out, any)
}

/// Consumers that write a wgmma gemm's shared operands only in some iterations — a kernel
/// zeroing the columns of a tile that lie past a tensor's edge in the first and last k steps
/// (`kernels::gemm_residue`) — fence and hand over those writes where they make them: every
/// write to an operand inside a top-level `if` before the first gemm, whose condition is the
/// same for every thread, gets a barrier before it (other warps may still read the stage) and
/// a proxy fence and a barrier after it, so the gemms read their operands as the pipeline
/// handed them over and need no fence and barrier of their own in every iteration. The
/// rewritten consumers, or `None` where the writes are not all of that shape. `per_thread`:
/// the kernel's `let`s whose values differ between threads (a condition on one of them would
/// leave some threads out of the barriers).
fn fence_edge_writes(consume: &Stmt, per_thread: &HashSet<Var>) -> Option<Stmt> {
    let StmtKind::Seq(body) = &consume.kind else {
        return None;
    };
    let mut operands = HashSet::new();
    consume.walk(&mut |st| {
        if let StmtKind::Op(TileOp::Gemm(g)) = &st.kind {
            if g.instruction == Some(GemmInstruction::Wgmma) {
                operands.insert(g.b.buffer.id());
                if g.a.buffer.scope() == Scope::Shared {
                    operands.insert(g.a.buffer.id());
                }
            }
        }
    });
    let is_gemm = |st: &Stmt| {
        let mut any = false;
        st.walk(&mut |x| any |= matches!(x.kind, StmtKind::Op(TileOp::Gemm(_))));
        any
    };
    let uniform = |c: &Expr| {
        !crate::tile_util::varies_by_thread(c, per_thread)
            && !c.any(&mut |x| matches!(x.kind(), ExprKind::Load(..)))
    };
    let mut seen_gemm = false;
    let mut rewrote = false;
    let mut out = Vec::with_capacity(body.len());
    for st in body {
        let writes_operand = written_shared(st).iter().any(|b| operands.contains(b));
        if !writes_operand {
            seen_gemm |= is_gemm(st);
            out.push(st.clone());
            continue;
        }
        match &st.kind {
            StmtKind::If {
                cond,
                then_,
                else_: None,
            } if !seen_gemm && !is_gemm(then_) && uniform(cond) => {
                let span = st.span;
                let then = Stmt::seq(
                    vec![
                        sync(span),
                        (**then_).clone(),
                        eval(Intrinsic::FenceProxyAsync, vec![], span),
                        sync(span),
                    ],
                    span,
                );
                out.push(if_then(Some(cond.clone()), then, span));
                rewrote = true;
            }
            _ => return None,
        }
    }
    rewrote.then(|| Stmt::seq(out, consume.span))
}

/// Shared buffers a (tile-level) statement writes: stores, tile-op destinations, and
/// intrinsics writing through an address (the barrier stage's own account of writes).
fn written_shared(s: &Stmt) -> HashSet<u64> {
    super::barriers::shared_access(s).1
}
