//! Lowering tile IR to thread-level IR for GPUs: the walker that visits the kernel body,
//! re-homes fragments into per-thread registers, lowers each tile op and parallel nest, and
//! inserts block barriers where one thread's shared-memory writes meet another's accesses.

use std::collections::{HashMap, HashSet};

use tl_ir::{
    Buffer, DType, DiagKind, Diagnostic, Diagnostics, Expr, ExprKind, ForKind, Fragment, Intrinsic,
    Kernel, Scope, Span, Stmt, StmtKind, TileOp,
};
use tl_target::Target;

use super::infer::{infer, Layouts};

/// Shared buffers accessed since the last barrier, and before the first one of the region
/// being lowered (for loop-carried hazards).
#[derive(Clone, Default, Debug)]
pub struct Hazards {
    pub reads: HashSet<u64>,
    pub writes: HashSet<u64>,
    pub seen_barrier: bool,
    pub first_reads: HashSet<u64>,
    pub first_writes: HashSet<u64>,
}

impl Hazards {
    fn conflicts(&self, r: &HashSet<u64>, w: &HashSet<u64>) -> bool {
        r.iter().any(|b| self.writes.contains(b))
            || w.iter()
                .any(|b| self.writes.contains(b) || self.reads.contains(b))
    }
    fn record(&mut self, r: &HashSet<u64>, w: &HashSet<u64>) {
        self.reads.extend(r);
        self.writes.extend(w);
        if !self.seen_barrier {
            self.first_reads.extend(r);
            self.first_writes.extend(w);
        }
    }
    fn barrier(&mut self) {
        self.reads.clear();
        self.writes.clear();
        self.seen_barrier = true;
    }
    fn merge(&mut self, o: &Hazards) {
        self.reads.extend(&o.reads);
        self.writes.extend(&o.writes);
        self.first_reads.extend(&o.first_reads);
        self.first_writes.extend(&o.first_writes);
        self.seen_barrier |= o.seen_barrier;
    }
}

/// The shared buffers a tile-level statement reads and writes.
pub fn shared_access(s: &Stmt) -> (HashSet<u64>, HashSet<u64>) {
    let mut r = HashSet::new();
    let mut w = HashSet::new();
    s.walk(&mut |st| {
        match &st.kind {
            StmtKind::Store { buffer, .. } if buffer.scope() == Scope::Shared => {
                w.insert(buffer.id());
            }
            StmtKind::Op(op) => {
                let (reads, writes) = op.regions();
                for x in reads {
                    if x.buffer.scope() == Scope::Shared {
                        r.insert(x.buffer.id());
                    }
                }
                for x in writes {
                    if x.buffer.scope() == Scope::Shared {
                        w.insert(x.buffer.id());
                    }
                }
            }
            _ => {}
        }
        for e in st.exprs() {
            e.visit(&mut |x| {
                if let ExprKind::Load(b, _) = x.kind() {
                    if b.scope() == Scope::Shared {
                        r.insert(b.id());
                    }
                }
            });
        }
    });
    (r, w)
}

pub struct Ctx<'a> {
    pub target: Target,
    pub threads: i64,
    /// `thread_idx()`.
    pub tid: Expr,
    pub layouts: &'a Layouts,
    /// Fragment buffer id → its per-thread register array.
    pub locals: HashMap<u64, Buffer>,
    /// Shared buffers the lowering needs (reduction and staging scratch), allocated at the
    /// top of the kernel.
    pub scratch: Vec<Buffer>,
    /// Shared buffers given pipeline stages: original id → multi-versioned buffer.
    pub versioned: HashMap<u64, Buffer>,
    pub errors: Vec<Diagnostic>,
    pub analyzer: tl_ir::Analyzer,
    /// Pipelined loops (by loop variable id) that get software-pipelined.
    pub pipelines: HashMap<u64, super::pipeline::PipelinePlan>,
    /// Shared bytes the kernel allocates so far (its buffers, their pipeline stages, scratch).
    pub smem_bytes: usize,
    /// Swizzled layouts of scratch tiles the lowering adds (epilogue staging).
    pub extra_smem: HashMap<u64, (Buffer, tl_layout::ComposedLayout)>,
    /// While a pipelined loop's consumers are lowered: the shared buffers they write. The
    /// pipeline fences every thread's earlier writes for the async proxy before its barrier
    /// (when the consumers issue wgmma), so a wgmma reading any other shared buffer needs no
    /// fence and barrier of its own: the staged tiles its cp.async producers filled, and tiles
    /// written before the loop (attention's Q).
    pub async_fence_unless_written: Option<std::collections::HashSet<u64>>,
    /// wgmma groups a gemm may leave in flight at its end (set by an enclosing pipeline that
    /// overlaps them with its next iteration; 0 elsewhere).
    pub wgmma_depth: u32,
    /// The register arrays of gemms that left wgmmas in flight, for the enclosing pipeline
    /// to wait for after its loop.
    pub wgmma_drain: Vec<Expr>,
    /// k16 steps per wgmma intrinsic (`KernelAttrs::wgmma_batch`, default 1).
    pub wgmma_batch: u32,
}

pub fn run(k: Kernel, target: &Target) -> Result<Kernel, Diagnostics> {
    let layouts = infer(&k, target)?;
    let mut an = crate::simplify::kernel_analyzer(&k);
    an.threads = Some(k.threads);
    let (pipelines, versioned) = super::pipeline::plan(&k.body, target);
    let mut cx = Ctx {
        target: *target,
        threads: k.threads as i64,
        tid: Expr::call(Intrinsic::ThreadIdx, vec![], DType::I32),
        layouts: &layouts,
        locals: HashMap::new(),
        scratch: vec![],
        versioned,
        errors: vec![],
        analyzer: an,
        pipelines,
        smem_bytes: 0,
        extra_smem: HashMap::new(),
        async_fence_unless_written: None,
        wgmma_depth: 0,
        wgmma_drain: vec![],
        wgmma_batch: k.attrs.wgmma_batch.unwrap_or(1),
    };
    // What the kernel's own shared buffers take (pipelined ones with their stages).
    k.body.walk(&mut |s| {
        if let StmtKind::Alloc(b) = &s.kind {
            if b.scope() == Scope::Shared {
                let b = cx.versioned.get(&b.id()).unwrap_or(b);
                cx.smem_bytes += b.const_numel().unwrap_or(0) as usize * b.dtype().bytes();
            }
        }
    });
    for (b, f) in &layouts.fragments {
        let local = b.derive(b.name(), vec![Expr::int(f.local_size())], Scope::Local);
        cx.locals.insert(b.id(), local);
    }
    let mut hz = Hazards::default();
    let body = cx.block(&k.body, &mut hz);
    if !cx.errors.is_empty() {
        return Err(Diagnostics(cx.errors));
    }
    let span = k.body.span;
    let mut stmts: Vec<Stmt> = cx
        .scratch
        .iter()
        .map(|b| Stmt::new(StmtKind::Alloc(b.clone()), span))
        .collect();
    stmts.push(body);
    // Swizzled shared tiles: every access becomes a flat, swizzled index (pipeline versions
    // of a buffer keep its layout within each version).
    let mut smem = layouts.smem.clone();
    smem.extend(cx.extra_smem.clone());
    for (orig, v) in &cx.versioned {
        if let Some((_, l)) = layouts.smem.get(orig) {
            smem.insert(v.id(), (v.clone(), l.clone()));
        }
    }
    let body = super::smem::apply(&Stmt::seq(stmts, span), &smem);
    let mut out = k.with_body(body);
    out.attrs.fragments = layouts.fragments.clone();
    Ok(out)
}

impl<'a> Ctx<'a> {
    pub fn unsupported(&self, span: Span, what: &str) -> Diagnostic {
        Diagnostic::new(
            DiagKind::Unsupported,
            span,
            format!("{what} is not supported on {}", self.target),
        )
    }

    /// Whether an enclosing pipeline's fenced barrier has made `b` readable by wgmma.
    pub fn is_async_fenced(&self, b: &Buffer) -> bool {
        self.async_fence_unless_written
            .as_ref()
            .is_some_and(|w| !w.contains(&b.id()))
    }

    pub fn sync(&self, span: Span) -> Stmt {
        Stmt::new(
            StmtKind::Eval(Expr::call(Intrinsic::SyncThreads, vec![], DType::Bool)),
            span,
        )
    }

    pub fn eval(&self, op: Intrinsic, args: Vec<Expr>, span: Span) -> Stmt {
        Stmt::new(StmtKind::Eval(Expr::call(op, args, DType::Bool)), span)
    }

    pub fn fragment_of(&self, b: &Buffer, span: Span) -> Result<Fragment, Diagnostic> {
        self.layouts
            .fragments
            .iter()
            .find(|(x, _)| x == b)
            .map(|(_, f)| f.clone())
            .ok_or_else(|| {
                Diagnostic::new(
                    DiagKind::LayoutConflict,
                    span,
                    format!("no layout could be inferred for fragment `{}`", b.name()),
                )
                .note(b.span(), format!("`{}` declared here", b.name()))
                .help("use the fragment in a parallel loop, gemm or reduce, or annotate its layout")
            })
    }

    pub fn local_of(&self, b: &Buffer, span: Span) -> Result<Buffer, Diagnostic> {
        self.locals.get(&b.id()).cloned().ok_or_else(|| {
            Diagnostic::internal(format!(
                "fragment `{}` has no register array (at {span})",
                b.name()
            ))
        })
    }

    /// A shared buffer for the lowering's own use, allocated once at the kernel's top.
    pub fn scratch_shared(
        &mut self,
        name: &str,
        shape: Vec<Expr>,
        dtype: DType,
        span: Span,
    ) -> Buffer {
        let b = Buffer::new(format!("{name}_scratch"), shape, dtype, Scope::Shared, span);
        self.scratch.push(b.clone());
        b
    }

    /// Replace fragment accesses by register accesses: `frag[idx]` → `regs[local_index(idx)]`.
    pub fn translate_expr(&self, e: &Expr) -> Expr {
        let e2 = e.map_children(&mut |c| self.translate_expr(c));
        if let ExprKind::Load(b, idx) = e2.kind() {
            if b.scope() == Scope::Fragment {
                if let (Some(local), Some(f)) = (self.locals.get(&b.id()), self.frag(b)) {
                    return Expr::load(local, vec![f.local_index(idx)]);
                }
            }
        }
        e2
    }

    pub fn frag(&self, b: &Buffer) -> Option<&Fragment> {
        self.layouts
            .fragments
            .iter()
            .find(|(x, _)| x == b)
            .map(|(_, f)| f)
    }

    /// Translate fragment accesses in a statement tree (loads and stores).
    pub fn translate_stmt(&self, s: &Stmt) -> Stmt {
        let s = s.map_exprs(&mut |e| self.translate_expr(e));
        s.map_post(&mut |st| match st.kind {
            StmtKind::Store {
                buffer,
                indices,
                value,
            } if buffer.scope() == Scope::Fragment => {
                match (self.locals.get(&buffer.id()), self.frag(&buffer)) {
                    (Some(local), Some(f)) => Stmt::new(
                        StmtKind::Store {
                            buffer: local.clone(),
                            indices: vec![f.local_index(&indices)],
                            value,
                        },
                        st.span,
                    ),
                    _ => Stmt::new(
                        StmtKind::Store {
                            buffer,
                            indices,
                            value,
                        },
                        st.span,
                    ),
                }
            }
            k => Stmt::new(k, st.span),
        })
    }

    /// Lower a tile-level statement tree, tracking shared-memory hazards in `hz`.
    pub fn block(&mut self, s: &Stmt, hz: &mut Hazards) -> Stmt {
        let span = s.span;
        match &s.kind {
            StmtKind::Seq(v) => Stmt::seq(v.iter().map(|x| self.block(x, hz)).collect(), span),
            StmtKind::Alloc(b) => match b.scope() {
                Scope::Fragment => match self.locals.get(&b.id()) {
                    Some(l) => Stmt::new(StmtKind::Alloc(l.clone()), span),
                    None => {
                        self.errors.push(
                            Diagnostic::new(
                                DiagKind::LayoutConflict,
                                span,
                                format!("no layout could be inferred for fragment `{}`", b.name()),
                            )
                            .help("use the fragment in a parallel loop, gemm, reduce or copy"),
                        );
                        Stmt::empty()
                    }
                },
                Scope::Shared => match self.versioned.get(&b.id()) {
                    Some(mv) => Stmt::new(StmtKind::Alloc(mv.clone()), span),
                    None => s.clone(),
                },
                _ => s.clone(),
            },
            StmtKind::AnnotateLayout { .. } => Stmt::empty(),
            StmtKind::Let { value, .. } => {
                self.check_block_level_frag_read(value, span);
                s.clone()
            }
            StmtKind::Eval(_) => s.clone(),
            StmtKind::If { cond, then_, else_ } => {
                self.check_block_level_frag_read(cond, span);
                let mut h1 = hz.clone();
                let t = self.block(then_, &mut h1);
                let e = else_.as_ref().map(|e| {
                    let mut h2 = hz.clone();
                    let x = self.block(e, &mut h2);
                    h1.merge(&h2);
                    Box::new(x)
                });
                hz.merge(&h1);
                Stmt::new(
                    StmtKind::If {
                        cond: cond.clone(),
                        then_: Box::new(t),
                        else_: e,
                    },
                    span,
                )
            }
            StmtKind::For(l) => match &l.kind {
                ForKind::Parallel => {
                    let (r, w) = shared_access(s);
                    let mut out = vec![];
                    if hz.conflicts(&r, &w) {
                        out.push(self.sync(span));
                        hz.barrier();
                    }
                    match self.lower_parallel(s) {
                        Ok(x) => out.push(x),
                        Err(d) => self.errors.push(d),
                    }
                    hz.record(&r, &w);
                    Stmt::seq(out, span)
                }
                ForKind::Pipelined { stages, .. } if *stages > 1 && self.target.has_cp_async() => {
                    let (r, w) = shared_access(s);
                    let mut out = vec![];
                    if hz.conflicts(&r, &w) {
                        out.push(self.sync(span));
                        hz.barrier();
                    }
                    match self.lower_pipeline(l, *stages, span) {
                        Ok(x) => out.push(x),
                        Err(d) => self.errors.push(d),
                    }
                    // The pipeline ends with a barrier.
                    hz.barrier();
                    Stmt::seq(out, span)
                }
                _ => {
                    let entry = hz.clone();
                    let mut inner = Hazards {
                        reads: hz.reads.clone(),
                        writes: hz.writes.clone(),
                        ..Default::default()
                    };
                    let mut body = self.block(&l.body, &mut inner);
                    // A hazard from the end of one iteration to the start of the next.
                    if inner.conflicts(&inner.first_reads.clone(), &inner.first_writes.clone()) {
                        body = Stmt::seq(vec![body, self.sync(span)], span);
                        inner.barrier();
                    }
                    *hz = entry;
                    hz.merge(&Hazards {
                        reads: inner.reads,
                        writes: inner.writes,
                        ..Default::default()
                    });
                    if inner.seen_barrier {
                        hz.seen_barrier = true;
                    }
                    let mut l2 = (**l).clone();
                    l2.body = body;
                    if matches!(l2.kind, ForKind::Pipelined { .. }) {
                        l2.kind = ForKind::Serial;
                    }
                    Stmt::new(StmtKind::For(Box::new(l2)), span)
                }
            },
            StmtKind::Store { buffer, .. } => {
                let (r, w) = shared_access(s);
                let mut out = vec![];
                if hz.conflicts(&r, &w) {
                    out.push(self.sync(span));
                    hz.barrier();
                }
                for e in s.exprs() {
                    self.check_block_level_frag_read(e, span);
                }
                let st = match buffer.scope() {
                    // Memory every thread sees: one thread writes.
                    Scope::Shared | Scope::Global => {
                        crate::tile_util::if_then(Some(self.tid.eq_(0)), s.clone(), span)
                    }
                    Scope::Fragment => {
                        self.errors.push(
                            Diagnostic::new(
                                DiagKind::Unsupported,
                                span,
                                format!(
                                    "a store to fragment `{}` outside a parallel loop",
                                    buffer.name()
                                ),
                            )
                            .help("write fragments inside `t.parallel` (or with fill/copy), so each thread writes its own elements"),
                        );
                        Stmt::empty()
                    }
                    _ => s.clone(),
                };
                out.push(st);
                hz.record(&r, &w);
                Stmt::seq(out, span)
            }
            StmtKind::Op(op) => {
                let (r, w) = shared_access(s);
                let mut out = vec![];
                if hz.conflicts(&r, &w) {
                    out.push(self.sync(span));
                    hz.barrier();
                }
                match self.lower_op(op, span) {
                    Ok(x) => out.push(x),
                    Err(d) => self.errors.push(d),
                }
                hz.record(&r, &w);
                Stmt::seq(out, span)
            }
        }
    }

    fn check_block_level_frag_read(&mut self, e: &Expr, span: Span) {
        let mut found = None;
        e.visit(&mut |x| {
            if let ExprKind::Load(b, _) = x.kind() {
                if b.scope() == Scope::Fragment {
                    found = Some(b.clone());
                }
            }
        });
        if let Some(b) = found {
            self.errors.push(
                Diagnostic::new(
                    DiagKind::Unsupported,
                    span,
                    format!(
                        "fragment `{}` is read outside a parallel loop; its elements live in different threads",
                        b.name()
                    ),
                )
                .note(b.span(), format!("`{}` declared here", b.name()))
                .help("read fragments inside `t.parallel`, or copy the value to shared memory first"),
            );
        }
    }

    pub fn lower_op(&mut self, op: &TileOp, span: Span) -> Result<Stmt, Diagnostic> {
        match op {
            TileOp::Copy(c) => self.lower_copy(&c.src, &c.dst, span, false),
            TileOp::Fill(f) => self.lower_fill(f, span),
            TileOp::Gemm(g) => self.lower_gemm(g, span),
            TileOp::Reduce(r) => self.lower_reduce(r, span),
            TileOp::AtomicAdd(a) => self.lower_atomic(a, span),
            TileOp::Cumsum(c) => self.lower_cumsum(c, span),
        }
    }
}
