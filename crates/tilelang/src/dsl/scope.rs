//! The `t` in `k.launch(.., |t, [bx, by]| ..)`: allocations, tile ops, loops and control flow,
//! each recorded with the user's source line.

use tl_ir::{
    AtomicKind, AtomicOp, Buffer, CopyOp, CumsumOp, DType, DiagKind, Diagnostic, Expr, FillOp, For,
    ForKind, GemmInstruction, GemmOp, Intrinsic, ReduceKind, ReduceOp, Region, Scope, Span, Stmt,
    StmtKind, TileOp, Var, WarpPolicy,
};

use super::args::{IntoExprs, Tile};
use super::builder::Shared;

pub struct TileScope {
    stmts: Vec<Stmt>,
    pub(super) state: Shared,
    threads: u32,
}

/// Names for the dimensions of a parallel loop nest.
const PAR_NAMES: [&str; 6] = ["i", "j", "k", "l", "m", "n"];

impl TileScope {
    pub(crate) fn new(state: Shared, threads: u32) -> TileScope {
        TileScope {
            stmts: vec![],
            state,
            threads,
        }
    }

    pub(crate) fn finish(self) -> Vec<Stmt> {
        self.stmts
    }

    /// An empty scope of the same kernel: where the body of a loop or branch opened with
    /// [`open_loop`](Self::open_loop), [`open_parallel`](Self::open_parallel) or
    /// [`open_if`](Self::open_if) is built before it is closed.
    pub fn child(&self) -> TileScope {
        TileScope::new(self.state.clone(), self.threads)
    }

    /// The location to record (see `KernelBuilder::set_span`).
    #[track_caller]
    pub(super) fn here(&self) -> Span {
        super::builder::here(&self.state)
    }

    /// Record the calls that follow at `span` (`None`: the Rust caller's line); see
    /// `KernelBuilder::set_span`.
    pub fn set_span(&self, span: Option<Span>) {
        self.state.borrow_mut().span = span;
    }

    pub(super) fn push(&mut self, kind: StmtKind, span: Span) {
        self.stmts.push(Stmt::new(kind, span));
    }

    pub(super) fn error(&self, d: Diagnostic) {
        self.state.borrow_mut().errors.push(d);
    }

    /// Threads per block of this launch.
    pub fn threads(&self) -> u32 {
        self.threads
    }

    // ----- allocation -----

    #[track_caller]
    fn alloc(
        &mut self,
        name: Option<&str>,
        shape: Vec<Expr>,
        dtype: DType,
        scope: Scope,
    ) -> Buffer {
        let span = self.here();
        let name = match name {
            Some(n) => self.state.borrow_mut().unique(n),
            None => {
                let prefix = match scope {
                    Scope::Shared => "shared",
                    Scope::Fragment => "frag",
                    Scope::Local => "local",
                    Scope::Var => "var",
                    Scope::Global => "global",
                };
                self.state.borrow_mut().fresh(prefix)
            }
        };
        let shape: Vec<Expr> = shape.iter().map(tl_ir::simplify).collect();
        let b = Buffer::new(name, shape, dtype, scope, span);
        self.push(StmtKind::Alloc(b.clone()), span);
        b
    }

    /// A tile in shared memory, visible to every thread of the block.
    #[track_caller]
    pub fn alloc_shared(&mut self, shape: impl IntoExprs, dtype: DType) -> Buffer {
        self.alloc(None, shape.into_exprs(), dtype, Scope::Shared)
    }
    /// A tile held in registers, spread over the block's threads.
    #[track_caller]
    pub fn alloc_fragment(&mut self, shape: impl IntoExprs, dtype: DType) -> Buffer {
        self.alloc(None, shape.into_exprs(), dtype, Scope::Fragment)
    }
    /// A per-thread array.
    #[track_caller]
    pub fn alloc_local(&mut self, shape: impl IntoExprs, dtype: DType) -> Buffer {
        self.alloc(None, shape.into_exprs(), dtype, Scope::Local)
    }
    /// A per-thread scalar variable (read with `v.at([0])`, write with `t.store(&v, [0], x)`).
    #[track_caller]
    pub fn alloc_var(&mut self, dtype: DType) -> Buffer {
        self.alloc(None, vec![Expr::int(1)], dtype, Scope::Var)
    }
    /// Like [`alloc_shared`](Self::alloc_shared), with a name for printed IR and diagnostics.
    #[track_caller]
    pub fn alloc_shared_named(
        &mut self,
        name: &str,
        shape: impl IntoExprs,
        dtype: DType,
    ) -> Buffer {
        self.alloc(Some(name), shape.into_exprs(), dtype, Scope::Shared)
    }
    #[track_caller]
    pub fn alloc_fragment_named(
        &mut self,
        name: &str,
        shape: impl IntoExprs,
        dtype: DType,
    ) -> Buffer {
        self.alloc(Some(name), shape.into_exprs(), dtype, Scope::Fragment)
    }
    #[track_caller]
    pub fn alloc_local_named(&mut self, name: &str, shape: impl IntoExprs, dtype: DType) -> Buffer {
        self.alloc(Some(name), shape.into_exprs(), dtype, Scope::Local)
    }

    // ----- scalar statements -----

    /// `buf[idx] = value`; the value is cast to the buffer's element type.
    #[track_caller]
    pub fn store(&mut self, buf: &Buffer, idx: impl IntoExprs, value: impl Into<Expr>) {
        let value = value.into().cast(buf.dtype());
        self.push(
            StmtKind::Store {
                buffer: buf.clone(),
                indices: idx.into_exprs(),
                value,
            },
            self.here(),
        );
    }

    /// Bind a value to a new variable for the rest of this block.
    #[track_caller]
    pub fn let_(&mut self, name: &str, value: impl Into<Expr>) -> Expr {
        let value = value.into();
        let name = self.state.borrow_mut().unique(name);
        let v = Var::new(name, value.dtype());
        self.push(
            StmtKind::Let {
                var: v.clone(),
                value,
            },
            self.here(),
        );
        v.expr()
    }

    // ----- tile ops -----

    /// Resolve the extents of two tile arguments from each other.
    fn pair(&self, op: &str, src: Tile, dst: Tile, span: Span) -> Option<(Region, Region)> {
        let (se, de) = match (&src.extents, &dst.extents) {
            (Some(s), Some(d)) => (s.clone(), d.clone()),
            (None, Some(d)) => (
                self.align_extents(op, d, src.buffer.rank(), &src, span)?,
                d.clone(),
            ),
            (Some(s), None) => (
                s.clone(),
                self.align_extents(op, s, dst.buffer.rank(), &dst, span)?,
            ),
            (None, None) => {
                self.error(
                    Diagnostic::new(
                        DiagKind::ShapeMismatch,
                        span,
                        format!(
                            "{op}: neither `{}` nor `{}` says how large the tile is",
                            src.buffer.name(),
                            dst.buffer.name()
                        ),
                    )
                    .help("give one side explicit extents with `.region(offsets, extents)`, or use a whole buffer"),
                );
                return None;
            }
        };
        Some((
            self.region(op, &src, se, span)?,
            self.region(op, &dst, de, span)?,
        ))
    }

    /// Extents for a tile of a `rank`-d buffer that has the other side's `other` shape:
    /// leading unit dims are added or dropped as needed.
    fn align_extents(
        &self,
        op: &str,
        other: &[Expr],
        rank: usize,
        t: &Tile,
        span: Span,
    ) -> Option<Vec<Expr>> {
        if other.len() == rank {
            return Some(other.to_vec());
        }
        if other.len() < rank {
            let mut e = vec![Expr::int(1); rank - other.len()];
            e.extend(other.iter().cloned());
            return Some(e);
        }
        let drop = other.len() - rank;
        if other[..drop].iter().all(|e| e.as_int() == Some(1)) {
            return Some(other[drop..].to_vec());
        }
        self.error(
            Diagnostic::new(
                DiagKind::ShapeMismatch,
                span,
                format!(
                    "{op}: a {}-d tile cannot be taken from the {}-d buffer `{}`",
                    other.len(),
                    rank,
                    t.buffer.name()
                ),
            )
            .note(
                t.buffer.span(),
                format!("`{}` declared here", t.buffer.name()),
            )
            .help("give the tile explicit extents with `.region(offsets, extents)`"),
        );
        None
    }

    fn region(&self, op: &str, t: &Tile, extents: Vec<Expr>, span: Span) -> Option<Region> {
        if t.offsets.len() != t.buffer.rank() {
            self.error(
                Diagnostic::new(
                    DiagKind::ShapeMismatch,
                    if t.span.is_known() { t.span } else { span },
                    format!(
                        "{op}: `{}` has {} dimensions but the tile gives {} offsets",
                        t.buffer.name(),
                        t.buffer.rank(),
                        t.offsets.len()
                    ),
                )
                .note(
                    t.buffer.span(),
                    format!("`{}` declared here", t.buffer.name()),
                ),
            );
            return None;
        }
        Some(Region::new(&t.buffer, t.offsets.clone(), extents))
    }

    fn full(&self, op: &str, t: Tile, span: Span) -> Option<Region> {
        match t.extents.clone() {
            Some(e) => self.region(op, &t, e, span),
            None => {
                self.error(
                    Diagnostic::new(
                        DiagKind::ShapeMismatch,
                        span,
                        format!("{op}: the tile of `{}` has no extents", t.buffer.name()),
                    )
                    .help("use `.region(offsets, extents)` or the whole buffer"),
                );
                None
            }
        }
    }

    /// Copy a tile between any two scopes; element types are converted; the parts of a global
    /// tile past the tensor's edge are skipped (stores) or read as zero (loads). The two tiles
    /// have the same shape (unit dims aside), except between a fragment and global memory,
    /// where the shapes may differ with the same number of elements: they pair up in row-major
    /// order (a row of `V·T·8` into a `[V, T, 8]` fragment, say).
    #[track_caller]
    pub fn copy(&mut self, src: impl Into<Tile>, dst: impl Into<Tile>) {
        let span = self.here();
        if let Some((src, dst)) = self.pair("copy", src.into(), dst.into(), span) {
            self.push(StmtKind::Op(TileOp::Copy(CopyOp::new(src, dst))), span);
        }
    }

    /// `C += A · B` on tiles (see [`GemmHandle`] for transposes and policies).
    #[track_caller]
    pub fn gemm(
        &mut self,
        a: impl Into<Tile>,
        b: impl Into<Tile>,
        c: impl Into<Tile>,
    ) -> GemmHandle<'_> {
        let span = self.here();
        let regs = (
            self.full("gemm", a.into(), span),
            self.full("gemm", b.into(), span),
            self.full("gemm", c.into(), span),
        );
        if let (Some(a), Some(b), Some(c)) = regs {
            self.push(
                StmtKind::Op(TileOp::Gemm(GemmOp {
                    a,
                    b,
                    c,
                    trans_a: false,
                    trans_b: false,
                    clear_accum: false,
                    policy: WarpPolicy::Auto,
                    instruction: None,
                    overlap: false,
                    wg_wait: None,
                    schedule: Default::default(),
                })),
                span,
            );
            let idx = self.stmts.len() - 1;
            GemmHandle {
                stmt: self.stmts.get_mut(idx),
            }
        } else {
            GemmHandle { stmt: None }
        }
    }

    /// Wait until at most `n` asynchronous wgmma groups are pending (`wgmma.wait_group n`,
    /// TileLang's `T.wait_wgmma`): the accumulators of gemms issued with
    /// [`GemmHandle::wg_wait`] before the newest `n` are readable after it. Where gemms are
    /// synchronous (every target but sm_90a's wgmma) it does nothing.
    #[track_caller]
    pub fn wait_wgmma(&mut self, n: u32) {
        self.push_wgmma_wait(n, false);
    }

    /// [`TileScope::wait_wgmma`] for a wait placed after work meant to run while the groups
    /// are on the tensor cores (attention's exponentials of step j beside P·V of step j − 1):
    /// the wait stays where it is written. Without this ptxas is free to raise the wait above
    /// that work, and does (every exponential of the d128 attention ran after it). It costs
    /// a never-taken branch, and the code after the wait is scheduled apart from the code
    /// before it — which can lose where the wait should rather be early (a causal d128
    /// attention ran 0–1% slower pinned, gpu-notes runs 31b and 31c).
    #[track_caller]
    pub fn wait_wgmma_pinned(&mut self, n: u32) {
        self.push_wgmma_wait(n, true);
    }

    #[track_caller]
    fn push_wgmma_wait(&mut self, n: u32, pinned: bool) {
        let span = self.here();
        let call = Expr::call(Intrinsic::WgmmaWait { n, pinned }, vec![], DType::Bool);
        self.push(StmtKind::Eval(call), span);
    }

    #[track_caller]
    fn reduce(&mut self, kind: ReduceKind, src: Tile, dst: Tile, dim: usize) -> ReduceHandle<'_> {
        let span = self.here();
        let regs = (
            self.full("reduce", src, span),
            self.full("reduce", dst, span),
        );
        if let (Some(src), Some(dst)) = regs {
            self.push(
                StmtKind::Op(TileOp::Reduce(ReduceOp {
                    src,
                    dst,
                    kind,
                    dim,
                    clear: true,
                })),
                span,
            );
            let idx = self.stmts.len() - 1;
            ReduceHandle {
                stmt: self.stmts.get_mut(idx),
            }
        } else {
            ReduceHandle { stmt: None }
        }
    }

    /// `dst = sum(src, dim)`; `.accumulate()` adds into dst instead.
    #[track_caller]
    pub fn reduce_sum(
        &mut self,
        src: impl Into<Tile>,
        dst: impl Into<Tile>,
        dim: usize,
    ) -> ReduceHandle<'_> {
        self.reduce(ReduceKind::Sum, src.into(), dst.into(), dim)
    }
    #[track_caller]
    pub fn reduce_max(
        &mut self,
        src: impl Into<Tile>,
        dst: impl Into<Tile>,
        dim: usize,
    ) -> ReduceHandle<'_> {
        self.reduce(ReduceKind::Max, src.into(), dst.into(), dim)
    }
    #[track_caller]
    pub fn reduce_min(
        &mut self,
        src: impl Into<Tile>,
        dst: impl Into<Tile>,
        dim: usize,
    ) -> ReduceHandle<'_> {
        self.reduce(ReduceKind::Min, src.into(), dst.into(), dim)
    }
    #[track_caller]
    pub fn reduce_abssum(
        &mut self,
        src: impl Into<Tile>,
        dst: impl Into<Tile>,
        dim: usize,
    ) -> ReduceHandle<'_> {
        self.reduce(ReduceKind::AbsSum, src.into(), dst.into(), dim)
    }
    #[track_caller]
    pub fn reduce_absmax(
        &mut self,
        src: impl Into<Tile>,
        dst: impl Into<Tile>,
        dim: usize,
    ) -> ReduceHandle<'_> {
        self.reduce(ReduceKind::AbsMax, src.into(), dst.into(), dim)
    }

    /// Set every element of a tile to `value`.
    #[track_caller]
    pub fn fill(&mut self, dst: impl Into<Tile>, value: impl Into<Expr>) {
        let span = self.here();
        if let Some(dst) = self.full("fill", dst.into(), span) {
            let value = value.into().cast(dst.buffer.dtype());
            self.push(StmtKind::Op(TileOp::Fill(FillOp { dst, value })), span);
        }
    }
    /// Set every element of a tile to zero.
    #[track_caller]
    pub fn clear(&mut self, dst: impl Into<Tile>) {
        let span = self.here();
        if let Some(dst) = self.full("clear", dst.into(), span) {
            let value = Expr::int_of(0, dst.buffer.dtype());
            self.push(StmtKind::Op(TileOp::Fill(FillOp { dst, value })), span);
        }
    }

    /// `dst += src` element-wise with atomic adds (dst in global or shared memory).
    #[track_caller]
    pub fn atomic_add(&mut self, dst: impl Into<Tile>, src: impl Into<Tile>) {
        let span = self.here();
        self.atomic(AtomicKind::Add, dst.into(), src.into(), span);
    }

    /// `dst = max(dst, src)` element-wise, atomically (dst in global or shared memory; i32,
    /// u32 or f32): e.g. a tensor's absolute maximum gathered from every block for FP8 scales.
    #[track_caller]
    pub fn atomic_max(&mut self, dst: impl Into<Tile>, src: impl Into<Tile>) {
        let span = self.here();
        self.atomic(AtomicKind::Max, dst.into(), src.into(), span);
    }

    /// `dst = min(dst, src)` element-wise, atomically (as [`atomic_max`](Self::atomic_max)).
    #[track_caller]
    pub fn atomic_min(&mut self, dst: impl Into<Tile>, src: impl Into<Tile>) {
        let span = self.here();
        self.atomic(AtomicKind::Min, dst.into(), src.into(), span);
    }

    fn atomic(&mut self, kind: AtomicKind, dst: Tile, src: Tile, span: Span) {
        if let Some((src, dst)) = self.pair(kind.op_name(), src, dst, span) {
            self.push(
                StmtKind::Op(TileOp::Atomic(AtomicOp { src, dst, kind })),
                span,
            );
        }
    }

    /// Inclusive prefix sum of `src` along `dim` into `dst` (same shape; may be the same buffer).
    #[track_caller]
    pub fn cumsum(
        &mut self,
        src: impl Into<Tile>,
        dst: impl Into<Tile>,
        dim: usize,
    ) -> CumsumHandle<'_> {
        let span = self.here();
        let regs = (
            self.full("cumsum", src.into(), span),
            self.full("cumsum", dst.into(), span),
        );
        if let (Some(src), Some(dst)) = regs {
            self.push(
                StmtKind::Op(TileOp::Cumsum(CumsumOp {
                    src,
                    dst,
                    dim,
                    reverse: false,
                })),
                span,
            );
            let idx = self.stmts.len() - 1;
            CumsumHandle {
                stmt: self.stmts.get_mut(idx),
            }
        } else {
            CumsumHandle { stmt: None }
        }
    }

    // ----- loops and control flow -----

    #[track_caller]
    fn loop_(
        &mut self,
        name: &str,
        min: Expr,
        extent: Expr,
        kind: ForKind,
        f: impl FnOnce(&mut TileScope, Expr),
    ) -> usize {
        let open = self.open_loop(name, min, extent, kind);
        let mut body = self.child();
        f(&mut body, open.vars[0].expr());
        self.close_loop(open, body)
    }

    /// Start a loop `min .. min + extent` of `kind` over a new variable named after `name`
    /// (the imperative form of [`serial`](Self::serial), [`pipelined`](Self::pipelined) and
    /// the rest): build its body in a [`child`](Self::child) scope, then
    /// [`close_loop`](Self::close_loop).
    #[track_caller]
    pub fn open_loop(&mut self, name: &str, min: Expr, extent: Expr, kind: ForKind) -> OpenLoop {
        let span = self.here();
        let name = self.state.borrow_mut().unique(name);
        OpenLoop {
            vars: vec![Var::new(name, DType::I32)],
            mins: vec![min.cast(DType::I32)],
            extents: vec![extent.cast(DType::I32)],
            kind,
            span,
        }
    }

    /// Start an element-wise loop nest over `extents` with one index per name in `names`
    /// (the imperative form of [`parallel`](Self::parallel)); `None`, with the same diagnostic
    /// as `parallel`, when the counts differ.
    #[track_caller]
    pub fn open_parallel(&mut self, extents: impl IntoExprs, names: &[&str]) -> Option<OpenLoop> {
        let span = self.here();
        let extents = extents.into_exprs();
        if extents.len() != names.len() || names.is_empty() {
            self.error(
                Diagnostic::new(
                    DiagKind::InvalidArgument,
                    span,
                    format!(
                        "parallel over {} extents, but the body takes {} indices",
                        extents.len(),
                        names.len()
                    ),
                )
                .help("take one index per extent, e.g. `t.parallel([bm, bn], |t, [i, j]| ..)`"),
            );
            return None;
        }
        let vars: Vec<Var> = names
            .iter()
            .map(|n| Var::new(self.state.borrow_mut().unique(n), DType::I32))
            .collect();
        Some(OpenLoop {
            mins: vec![Expr::int(0); vars.len()],
            vars,
            extents: extents.iter().map(|e| e.cast(DType::I32)).collect(),
            kind: ForKind::Parallel,
            span,
        })
    }

    /// Finish a loop (or loop nest) opened here with its body; the index of the statement.
    pub fn close_loop(&mut self, open: OpenLoop, body: TileScope) -> usize {
        let OpenLoop {
            vars,
            mins,
            extents,
            kind,
            span,
        } = open;
        let mut stmt = Stmt::seq(body.finish(), span);
        for ((var, min), extent) in vars.into_iter().zip(mins).zip(extents).rev() {
            stmt = Stmt::new(
                StmtKind::For(Box::new(For {
                    var,
                    min,
                    extent,
                    kind: kind.clone(),
                    body: stmt,
                })),
                span,
            );
        }
        self.stmts.push(stmt);
        self.stmts.len() - 1
    }

    /// An element-wise loop nest over `extents`: iterations are independent, and the compiler
    /// spreads them over the block's threads (and vector lanes).
    #[track_caller]
    pub fn parallel<const N: usize>(
        &mut self,
        extents: impl IntoExprs,
        f: impl FnOnce(&mut TileScope, [Expr; N]),
    ) {
        let names: [&str; N] = std::array::from_fn(|d| *PAR_NAMES.get(d).unwrap_or(&"p"));
        let Some(open) = self.open_parallel(extents, &names) else {
            return;
        };
        let idx: [Expr; N] = std::array::from_fn(|d| open.vars[d].expr());
        let mut body = self.child();
        f(&mut body, idx);
        self.close_loop(open, body);
    }

    /// A sequential loop `0 .. extent`.
    #[track_caller]
    pub fn serial(&mut self, extent: impl Into<Expr>, f: impl FnOnce(&mut TileScope, Expr)) {
        self.loop_("s", Expr::int(0), extent.into(), ForKind::Serial, f);
    }
    /// A sequential loop `lo .. hi`.
    #[track_caller]
    pub fn serial_range(
        &mut self,
        lo: impl Into<Expr>,
        hi: impl Into<Expr>,
        f: impl FnOnce(&mut TileScope, Expr),
    ) {
        let lo = lo.into();
        let ext = tl_ir::simplify(&(hi.into() - lo.clone()));
        self.loop_("s", lo, ext, ForKind::Serial, f);
    }
    /// A loop the compiler unrolls completely (the extent must be a constant).
    #[track_caller]
    pub fn unroll(&mut self, extent: impl Into<Expr>, f: impl FnOnce(&mut TileScope, Expr)) {
        self.loop_("u", Expr::int(0), extent.into(), ForKind::Unrolled, f);
    }
    /// A software-pipelined loop: copies into shared memory are issued `stages - 1`
    /// iterations ahead of the compute that uses them.
    #[track_caller]
    pub fn pipelined(
        &mut self,
        extent: impl Into<Expr>,
        stages: u32,
        f: impl FnOnce(&mut TileScope, Expr),
    ) -> PipelineHandle<'_> {
        let kind = ForKind::Pipelined {
            stages,
            order: None,
            stage: None,
        };
        let idx = self.loop_("ko", Expr::int(0), extent.into(), kind, f);
        PipelineHandle {
            stmt: self.stmts.get_mut(idx),
        }
    }

    /// `if cond { then }`; chain `.else_(..)` for the other branch.
    #[track_caller]
    pub fn if_(
        &mut self,
        cond: impl Into<Expr>,
        then: impl FnOnce(&mut TileScope),
    ) -> IfHandle<'_> {
        let open = self.open_if(cond);
        let mut body = self.child();
        then(&mut body);
        let state = self.state.clone();
        let threads = self.threads;
        let idx = self.close_if(open, body, None);
        IfHandle {
            stmt: self.stmts.get_mut(idx),
            state,
            threads,
        }
    }

    /// Start `if cond` (the imperative form of [`if_`](Self::if_)): build the branches in
    /// [`child`](Self::child) scopes, then [`close_if`](Self::close_if).
    #[track_caller]
    pub fn open_if(&mut self, cond: impl Into<Expr>) -> OpenIf {
        OpenIf {
            cond: cond.into(),
            span: self.here(),
        }
    }

    /// Finish an `if` opened here with its branches; the index of the statement.
    pub fn close_if(&mut self, open: OpenIf, then: TileScope, else_: Option<TileScope>) -> usize {
        let span = open.span;
        self.push(
            StmtKind::If {
                cond: open.cond,
                then_: Box::new(Stmt::seq(then.finish(), span)),
                else_: else_.map(|e| Box::new(Stmt::seq(e.finish(), span))),
            },
            span,
        );
        self.stmts.len() - 1
    }

    // ----- annotations and escape hatches -----

    /// Rasterize blocks in panels of `panel` block-rows, so neighbouring blocks share L2 tiles.
    pub fn use_swizzle(&mut self, panel: u32) {
        self.state.borrow_mut().attrs.swizzle_panel = Some(panel.max(1));
    }

    /// Make the kernel persistent: launch `blocks` blocks (0: one per multiprocessor of the
    /// device it is compiled for) that loop over the grid's blocks in order (with the panel
    /// rasterization of `use_swizzle`), instead of one block per grid entry.
    pub fn persistent(&mut self, blocks: u32) {
        self.state.borrow_mut().attrs.persistent_blocks = Some(blocks);
    }

    /// Run blocks `size` at a time as thread-block clusters (sm_90), consecutive along the
    /// logical grid dim `dim`: the tiles a cluster's blocks share — pipelined TMA copies whose
    /// source does not depend on that dim's block index, as a GEMM's B tile for blocks
    /// consecutive along M — are loaded once per cluster, each block loading a slice that the
    /// TMA multicasts into every block's shared memory. For persistent, warp-specialized
    /// kernels (`persistent`, `warp_specialize`), and for kernels whose blocks synchronize
    /// with [`TileScope::cluster_sync`] (along dim 0 only, its extent a whole number of
    /// clusters; such kernels need sm_90 and are refused elsewhere); otherwise (other
    /// targets, kernels without a producer warpgroup) it is dropped and the kernel runs
    /// unclustered. `size` 1 turns it off.
    pub fn cluster(&mut self, dim: usize, size: u32) {
        self.state.borrow_mut().attrs.cluster =
            (size > 1).then_some(tl_ir::ClusterAttr { dim, size });
    }

    /// Wait until every thread of every block of this block's cluster (`cluster`) arrives
    /// here (`barrier.cluster`, release then acquire): what a block wrote before, to global
    /// or shared memory, is visible to the cluster's blocks after. The blocks of a cluster
    /// run at the same time, so a row split over a cluster's blocks can combine its partial
    /// results in one kernel (the cluster softmax). sm_90 only: other targets refuse the
    /// kernel, naming this call.
    pub fn cluster_sync(&mut self) {
        let span = self.here();
        self.push(
            StmtKind::Eval(Expr::call(Intrinsic::ClusterSync, vec![], DType::Bool)),
            span,
        );
    }

    /// Warp specialization on sm_90a: `true` asks for a producer warpgroup that only issues
    /// the pipelined loop's TMA loads while the kernel's own warps only compute (an error
    /// where the kernel cannot take one: see `tl_passes::gpu::pipeline`'s `ws` module);
    /// `false` keeps every warp loading and computing. Without a call the kernel is not
    /// specialized unless `TILELANG_WS=1` (then wherever it can be): on an H100 it has not
    /// yet measured faster (docs/performance.md).
    pub fn warp_specialize(&mut self, on: bool) {
        self.state.borrow_mut().attrs.warp_specialize = Some(on);
    }

    /// With warp specialization and two consumer warpgroups: make them take turns issuing
    /// their wgmma groups (FlashAttention-3's ping-pong), so one warpgroup's tensor-core work
    /// runs while the other computes. Off by default: on an H100 the turns helped the fp8
    /// GEMM that promotes its partial accumulator after every k tile (which asks for them),
    /// and slowed attention (without FA3's software-pipelined second GEMM) and the bf16 GEMM
    /// (docs/performance.md).
    pub fn ping_pong(&mut self, on: bool) {
        self.state.borrow_mut().attrs.ping_pong = on;
    }

    /// With warp specialization: the registers per thread the producer warpgroup keeps
    /// (`setmaxnreg`: a multiple of 8 from 24; the consumer warpgroups share the rest of the
    /// registers the launch holds). The compiler's default is 40 beside two consumer warpgroups; a
    /// producer that computes more (a persistent kernel's tile coordinates, many tensor
    /// maps) may spill there.
    pub fn producer_registers(&mut self, regs: u32) {
        self.state.borrow_mut().attrs.producer_registers = Some(regs);
    }

    /// Ask for `blocks` resident blocks per SM (CUDA's `__launch_bounds__(threads, blocks)`): the
    /// compiler caps registers to fit them. More blocks hide more latency; too few registers
    /// spill (check with `tilelang check-cuda`, or let the autotuner, which rejects spills, try).
    pub fn min_blocks_per_sm(&mut self, blocks: u32) {
        self.state.borrow_mut().attrs.min_blocks_per_sm = Some(blocks.max(1));
    }

    /// Issue up to `steps` k16 steps of each wgmma gemm in one `asm` statement (default 1): the
    /// kernel compiles faster (NVRTC binds the accumulator registers once per statement), but
    /// the descriptors of all its steps are computed before the first issues. On an H100 pairs
    /// cost the GEMM mainloop 2-12% and attention nothing (docs/performance.md, run 6f).
    pub fn wgmma_batch(&mut self, steps: u32) {
        self.state.borrow_mut().attrs.wgmma_batch = Some(steps.clamp(1, 8));
    }

    /// Give a buffer a layout (CuTe notation, e.g. `"(128,64):(64,1)"`), overriding inference.
    #[track_caller]
    pub fn annotate_layout(&mut self, buf: &Buffer, layout: &str) {
        self.push(
            StmtKind::AnnotateLayout {
                buffer: buf.clone(),
                layout: layout.to_string(),
            },
            self.here(),
        );
    }

    /// `threadIdx.x` (escape hatch for per-thread code in raw loops).
    pub fn thread_idx(&self) -> Expr {
        Expr::call(Intrinsic::ThreadIdx, vec![], DType::I32)
    }

    /// `value` as lane `lane ^ mask` of this warp holds it (CUDA's `__shfl_xor_sync` over the
    /// whole warp). A shuffle is collective: every lane of the warp must reach it, with the
    /// same `mask`. GPU targets and the simulator only (the CPU backend runs a block as one
    /// thread).
    pub fn shfl_xor(&self, value: Expr, mask: Expr) -> Expr {
        shuffle(Intrinsic::ShflXor { width: 32 }, value, mask)
    }

    /// `value` from the lane `delta` above this one; the lanes within `delta` of the warp's
    /// end keep their own (`__shfl_down_sync`). Collective, as [`shfl_xor`](Self::shfl_xor).
    pub fn shfl_down(&self, value: Expr, delta: Expr) -> Expr {
        shuffle(Intrinsic::ShflDown { width: 32 }, value, delta)
    }

    /// `value` as lane `lane` (0..32) of this warp holds it (`__shfl_sync`). Collective, as
    /// [`shfl_xor`](Self::shfl_xor).
    pub fn shfl_idx(&self, value: Expr, lane: Expr) -> Expr {
        shuffle(Intrinsic::ShflIdx { width: 32 }, value, lane)
    }

    /// Call a device function by name (escape hatch), as an expression.
    pub fn call_extern(&self, name: &str, args: impl IntoExprs, dtype: DType) -> Expr {
        Expr::call(
            Intrinsic::Extern {
                name: name.to_string(),
                pure: true,
            },
            args.into_exprs(),
            dtype,
        )
    }

    /// Evaluate an intrinsic for its side effect (escape hatch, e.g. a raw barrier).
    #[track_caller]
    pub fn evaluate(&mut self, e: Expr) {
        self.push(StmtKind::Eval(e), self.here());
    }
}

/// A loop (or parallel loop nest) whose body is being built; see [`TileScope::open_loop`].
pub struct OpenLoop {
    vars: Vec<Var>,
    mins: Vec<Expr>,
    extents: Vec<Expr>,
    kind: ForKind,
    span: Span,
}

impl OpenLoop {
    /// The loop indices, outermost first.
    pub fn indices(&self) -> Vec<Expr> {
        self.vars.iter().map(Var::expr).collect()
    }
}

/// An `if` whose branches are being built; see [`TileScope::open_if`].
pub struct OpenIf {
    cond: Expr,
    span: Span,
}

/// Options of a gemm, set after the call: `t.gemm(&a, &b, &c).transpose_b()`.
pub struct GemmHandle<'a> {
    stmt: Option<&'a mut Stmt>,
}

impl GemmHandle<'_> {
    fn with(mut self, f: impl FnOnce(&mut GemmOp)) -> Self {
        if let Some(Stmt {
            kind: StmtKind::Op(TileOp::Gemm(g)),
            ..
        }) = self.stmt.as_deref_mut()
        {
            f(g);
        }
        self
    }
    /// A is given as `[K, M]`.
    pub fn transpose_a(self) -> Self {
        self.with(|g| g.trans_a = true)
    }
    /// B is given as `[N, K]` (the "NT" gemm).
    pub fn transpose_b(self) -> Self {
        self.with(|g| g.trans_b = true)
    }
    /// `C = A · B` instead of `C += A · B`.
    pub fn clear_accum(self) -> Self {
        self.with(|g| g.clear_accum = true)
    }
    pub fn policy(self, p: WarpPolicy) -> Self {
        self.with(|g| g.policy = p)
    }
    /// Run on `inst` instead of the instruction the compiler would pick for the target (an
    /// override: one the target or the tile cannot take is a diagnostic saying why).
    pub fn instruction(self, inst: GemmInstruction) -> Self {
        self.with(|g| g.instruction = Some(inst))
    }
    /// `.instruction(GemmInstruction::Wgmma)`: Hopper's warpgroup MMA (sm_90a), both operands
    /// shared tiles of a 16-bit type with rows of a multiple of 64 elements (or A from the
    /// registers of an earlier gemm), or of fp8 (e4m3/e5m2, K-major: A [M, K], B [N, K] with
    /// `transpose_b`) with rows of a multiple of 128; 64 accumulator rows per 128 threads.
    pub fn wgmma(self) -> Self {
        self.instruction(GemmInstruction::Wgmma)
    }
    /// When this gemm is the only consumer of a pipelined loop with at least 3 stages and runs
    /// on wgmma, keep each iteration's wgmma running while the next iteration waits for its
    /// tiles (the pipeline then fetches one stage less far ahead). Elsewhere it changes
    /// nothing.
    pub fn overlap(self) -> Self {
        self.with(|g| g.overlap = true)
    }
    /// On wgmma, leave up to `n` asynchronous groups pending at the end of this gemm (`-1`:
    /// do not wait at all), as TileLang's `wg_wait`: the accumulator may not be read until a
    /// later [`TileScope::wait_wgmma`] retires it (the simulator reports a read before that).
    /// Lets a kernel overlap work on one accumulator with the wgmma of another. Other
    /// instructions complete within the gemm and ignore it.
    pub fn wg_wait(self, n: i32) -> Self {
        self.with(|g| g.wg_wait = Some(n))
    }
    /// [`wgmma`](Self::wgmma) and [`overlap`](Self::overlap).
    pub fn wgmma_overlap(self) -> Self {
        self.wgmma().overlap()
    }
}

pub struct ReduceHandle<'a> {
    stmt: Option<&'a mut Stmt>,
}

impl ReduceHandle<'_> {
    /// Combine the reduction into the destination's current values instead of overwriting.
    pub fn accumulate(mut self) -> Self {
        if let Some(Stmt {
            kind: StmtKind::Op(TileOp::Reduce(r)),
            ..
        }) = self.stmt.as_deref_mut()
        {
            r.clear = false;
        }
        self
    }
    /// `clear(false)` is `accumulate()`, as TileLang spells it.
    pub fn clear(self, clear: bool) -> Self {
        if clear {
            self
        } else {
            self.accumulate()
        }
    }
}

pub struct CumsumHandle<'a> {
    stmt: Option<&'a mut Stmt>,
}

impl CumsumHandle<'_> {
    /// Sum from the end instead of the start.
    pub fn reverse(mut self) -> Self {
        if let Some(Stmt {
            kind: StmtKind::Op(TileOp::Cumsum(c)),
            ..
        }) = self.stmt.as_deref_mut()
        {
            c.reverse = true;
        }
        self
    }
}

pub struct PipelineHandle<'a> {
    stmt: Option<&'a mut Stmt>,
}

impl PipelineHandle<'_> {
    fn with(mut self, f: impl FnOnce(&mut Option<Vec<i32>>, &mut Option<Vec<i32>>)) -> Self {
        if let Some(Stmt {
            kind: StmtKind::For(l),
            ..
        }) = self.stmt.as_deref_mut()
        {
            if let ForKind::Pipelined { order, stage, .. } = &mut l.kind {
                f(order, stage);
            }
        }
        self
    }
    /// The order statements of the body are issued in (TileLang's `order=`): one entry per
    /// statement. The GPU pipeliner issues in body order, so only the identity is accepted
    /// there; anything else is a diagnostic asking to reorder the body instead.
    pub fn order(self, o: Vec<i32>) -> Self {
        self.with(|order, _| *order = Some(o))
    }
    /// The pipeline stage of each statement of the body (TileLang's `stage=`): 0 for the
    /// global→shared copies that run `stages - 1` iterations ahead, `stages - 1` for the rest
    /// (a copy given the last stage is loaded in its own iteration instead). Without it, every
    /// eligible global→shared copy runs ahead.
    pub fn stage(self, s: Vec<i32>) -> Self {
        self.with(|_, stage| *stage = Some(s))
    }
}

pub struct IfHandle<'a> {
    stmt: Option<&'a mut Stmt>,
    state: Shared,
    threads: u32,
}

impl IfHandle<'_> {
    /// The branch taken when the condition is false.
    pub fn else_(self, f: impl FnOnce(&mut TileScope)) {
        let mut body = TileScope::new(self.state.clone(), self.threads);
        f(&mut body);
        if let Some(Stmt {
            kind: StmtKind::If { else_, .. },
            span,
        }) = self.stmt
        {
            *else_ = Some(Box::new(Stmt::seq(body.finish(), *span)));
        }
    }
}

/// A shuffle of `value` (kept in its type) by a lane argument taken as `int32`.
fn shuffle(op: Intrinsic, value: Expr, arg: Expr) -> Expr {
    let dt = value.dtype();
    Expr::call(op, vec![value, arg.cast(DType::I32)], dt)
}
