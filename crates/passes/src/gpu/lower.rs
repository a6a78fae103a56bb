//! The `lower_tile_ops` stage: tile IR (after layout inference, pipelining and barrier
//! insertion) to thread-level IR. The walker visits the kernel body, re-homes fragments into
//! per-thread registers, and lowers each tile op and parallel nest with the instruction
//! selection chose (its own module per instruction family).

use std::collections::HashMap;

use tl_ir::{
    Buffer, DType, DiagKind, Diagnostic, Diagnostics, Expr, ExprKind, ForKind, Fragment, Intrinsic,
    Kernel, Scope, Span, Stmt, StmtKind, TileOp,
};
use tl_target::Target;

use super::infer::Layouts;

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
    pub errors: Vec<Diagnostic>,
    pub analyzer: tl_ir::Analyzer,
    /// Shared bytes the kernel allocates so far (its buffers, their pipeline stages, scratch).
    pub smem_bytes: usize,
    /// Swizzled layouts of scratch tiles the lowering adds (epilogue staging).
    pub extra_smem: HashMap<u64, (Buffer, tl_layout::ComposedLayout)>,
    /// k16 steps per wgmma intrinsic (`KernelAttrs::wgmma_batch`, default 1).
    pub wgmma_batch: u32,
    /// Emit block-wide copies as rolled loops (one vector in flight per thread).
    pub rolled_copies: bool,
    /// Fragment → global copies may go out by TMA store (a warp-specialized kernel).
    pub tma_store: bool,
    /// Buffers the kernel reads (`Stmt::read_buffers`): a TMA store into one would leave its
    /// writes in flight (the epilogue waits only for the store to have read shared memory)
    /// while the kernel reads them back.
    pub read_back: std::collections::HashSet<u64>,
    /// `smem_keeps_runs` answers by (buffer id, vector), as they take a walk over the tile.
    pub run_cache: std::cell::RefCell<HashMap<(u64, i64), bool>>,
    /// Block-level `let`s whose values differ between threads (see [`Ctx::per_thread`]).
    pub per_thread_lets: std::collections::HashSet<tl_ir::Var>,
    /// A warp-specialized kernel in thread-block clusters: the blocks per cluster, and the
    /// variables whose values differ between the blocks of one cluster (the clustered grid
    /// dim's block index and the `let`s computed from it). A pipelined TMA copy whose source
    /// reads none of them is the same for the whole cluster and is multicast.
    pub cluster: Option<(u32, std::collections::HashSet<u64>)>,
    /// Inside branches whose conditions differ between threads (`if thread_idx() == 0`): the
    /// stores there are made by the threads that take the branch.
    pub per_thread_branches: u32,
    /// While a fragment is copied into a staging tile whose rows are shifted (the bulk-row
    /// epilogue, `copy_frag_bulk_rows`): the shift of a row's columns, an expression in the
    /// variable (the row index) it names.
    pub frag_col_shift: Option<(tl_ir::Var, Expr)>,
}

/// The `lower_tile_ops` stage.
pub fn run(k: Kernel, target: &Target) -> Result<Kernel, Diagnostics> {
    let layouts = Layouts::of(&k);
    let mut an = crate::simplify::kernel_analyzer(&k);
    an.threads = Some(k.threads);
    let mut cx = Ctx {
        target: *target,
        threads: k.threads as i64,
        tid: Expr::call(Intrinsic::ThreadIdx, vec![], DType::I32),
        layouts: &layouts,
        locals: HashMap::new(),
        scratch: vec![],
        errors: vec![],
        analyzer: an,
        smem_bytes: 0,
        extra_smem: HashMap::new(),
        wgmma_batch: k.attrs.wgmma_batch.unwrap_or(1),
        rolled_copies: false,
        tma_store: k.attrs.warp_specialized.is_some(),
        read_back: k.body.read_buffers(),
        run_cache: Default::default(),
        per_thread_lets: Default::default(),
        per_thread_branches: 0,
        frag_col_shift: None,
        cluster: cluster_varying(&k),
    };
    // What the kernel's own shared buffers take (pipelined ones with their stages).
    k.body.walk(&mut |s| {
        if let StmtKind::Alloc(b) = &s.kind {
            if b.scope() == Scope::Shared {
                cx.smem_bytes += b.const_numel().unwrap_or(0) as usize * b.dtype().bytes();
            }
        }
    });
    for (b, f) in &layouts.fragments {
        let local = b.derive(b.name(), vec![Expr::int(f.local_size())], Scope::Local);
        cx.locals.insert(b.id(), local);
    }
    let body = cx.block(&k.body);
    // Checked here too (codegen checks the laid-out size), so that the simulator refuses what
    // the GPU would.
    let limit = target.max_shared_bytes();
    if cx.errors.is_empty() && cx.smem_bytes > limit {
        let (what, per) = if target.is_hip() {
            ("LDS", "workgroup")
        } else {
            ("shared memory", "block")
        };
        cx.errors.push(
            Diagnostic::new(
                DiagKind::OutOfRange,
                k.body.span,
                format!(
                    "kernel `{}` needs {} bytes of {what}; {target} allows {limit} bytes per {per}",
                    k.name, cx.smem_bytes
                ),
            )
            .help("use smaller tiles or fewer pipeline stages"),
        );
    }
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
    let mut extra: Vec<(Buffer, tl_layout::ComposedLayout)> = cx.extra_smem.into_values().collect();
    extra.sort_by_key(|(b, _)| b.id());
    let mut out = k.with_body(Stmt::seq(stmts, span));
    out.attrs.smem_layouts.extend(extra);
    let ws = target.warp_size();
    out.attrs.warp_size = (ws != 32).then_some(ws);
    Ok(out)
}

/// The `apply_smem_layouts` stage: every access of a shared tile with a layout becomes a flat,
/// swizzled index (pipeline versions of a buffer keep its layout within each version).
pub fn apply_smem_layouts(k: Kernel, _target: &Target) -> Result<Kernel, Diagnostics> {
    let smem = Layouts::of(&k).smem;
    let body = super::smem::apply(&k.body, &smem);
    let mut out = k.with_body(body);
    out.attrs.smem_layouts.clear();
    out.attrs.nest_layouts.clear();
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
        self.smem_bytes += b.const_numel().unwrap_or(0) as usize * b.dtype().bytes();
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

    /// Lower a tile-level statement tree.
    pub fn block(&mut self, s: &Stmt) -> Stmt {
        let span = s.span;
        match &s.kind {
            StmtKind::Seq(v) => Stmt::seq(v.iter().map(|x| self.block(x)).collect(), span),
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
                _ => s.clone(),
            },
            StmtKind::AnnotateLayout { .. } => Stmt::empty(),
            StmtKind::Let { var, value } => {
                self.check_block_level_frag_read(value, span);
                if self.per_thread(value) {
                    self.per_thread_lets.insert(var.clone());
                }
                s.clone()
            }
            // Register operands of intrinsics the pipeline placed (a wgmma wait after its
            // loop) name fragments: they become the fragments' register arrays.
            StmtKind::Eval(e) if reads_fragment(e) => self.translate_stmt(s),
            StmtKind::Eval(_) => s.clone(),
            StmtKind::If { cond, then_, else_ } => {
                self.check_block_level_frag_read(cond, span);
                let split = self.per_thread(cond) as u32;
                self.per_thread_branches += split;
                let t = self.block(then_);
                let e = else_.as_ref().map(|e| Box::new(self.block(e)));
                self.per_thread_branches -= split;
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
                ForKind::Parallel => match self.lower_parallel(s) {
                    Ok(x) => x,
                    Err(d) => {
                        self.errors.push(d);
                        Stmt::empty()
                    }
                },
                _ => {
                    let mut l2 = (**l).clone();
                    l2.body = self.block(&l.body);
                    if matches!(l2.kind, ForKind::Pipelined { .. }) {
                        l2.kind = ForKind::Serial;
                    }
                    Stmt::new(StmtKind::For(Box::new(l2)), span)
                }
            },
            StmtKind::Store { buffer, .. } => {
                for e in s.exprs() {
                    self.check_block_level_frag_read(e, span);
                }
                let per_thread = self.per_thread_branches > 0
                    || s.exprs().into_iter().any(|e| self.per_thread(e));
                match buffer.scope() {
                    // Thread-level code (an index or value from `thread_idx` or a shuffle):
                    // every thread makes its own store, as in CUDA.
                    Scope::Shared | Scope::Global if per_thread => s.clone(),
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
                }
            }
            StmtKind::Op(op) => match self.lower_op(op, span) {
                Ok(x) => x,
                Err(d) => {
                    self.errors.push(d);
                    Stmt::empty()
                }
            },
        }
    }

    /// Does `e` differ between the threads of a block: does it read `thread_idx`, a warp
    /// shuffle, or a block-level `let` that does?
    fn per_thread(&self, e: &Expr) -> bool {
        crate::tile_util::varies_by_thread(e, &self.per_thread_lets)
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
            TileOp::Copy(c) => match &c.tma_barrier {
                Some(bar) => self
                    .lower_tma_copy(&c.src, &c.dst, bar, span)
                    .ok_or_else(|| {
                        Diagnostic::internal(format!(
                            "copy {} -> {} was marked for TMA but cannot be made by it",
                            c.src.buffer.name(),
                            c.dst.buffer.name()
                        ))
                    }),
                None => {
                    self.lower_copy_guarded(&c.src, &c.dst, span, c.asynchronous, c.guard.as_ref())
                }
            },
            TileOp::Fill(f) => self.lower_fill(f, span),
            TileOp::Gemm(g) => self.lower_gemm(g, span),
            TileOp::Reduce(r) => self.lower_reduce(r, span),
            TileOp::Atomic(a) => self.lower_atomic(a, span),
            TileOp::Cumsum(c) => self.lower_cumsum(c, span),
        }
    }
}

fn reads_fragment(e: &Expr) -> bool {
    e.any(&mut |x| matches!(x.kind(), ExprKind::Load(b, _) if b.scope() == Scope::Fragment))
}

/// [`Ctx::cluster`] of a kernel: the clustered dim's block variable and every `let` whose
/// value depends on it (transitively), when the kernel runs in clusters and is
/// warp-specialized (only the specialized pipeline releases a stage to the whole cluster).
fn cluster_varying(k: &Kernel) -> Option<(u32, std::collections::HashSet<u64>)> {
    let c = k.attrs.cluster.filter(|c| c.size > 1)?;
    k.attrs.warp_specialized.as_ref()?;
    k.attrs.persistent_blocks?;
    let var = k.block_vars.get(c.dim)?;
    let mut varying: std::collections::HashSet<u64> = [var.id()].into_iter().collect();
    loop {
        let before = varying.len();
        k.body.walk(&mut |s| {
            if let StmtKind::Let { var, value } = &s.kind {
                if value.any(&mut |x| x.as_var().is_some_and(|v| varying.contains(&v.id()))) {
                    varying.insert(var.id());
                }
            }
        });
        if varying.len() == before {
            return Some((c.size, varying));
        }
    }
}
