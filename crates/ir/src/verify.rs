//! The verifier: rejects ill-formed IR with a diagnostic that names the user's line.

use std::collections::HashSet;

use crate::buffer::{Buffer, Region, Scope};
use crate::diag::{DiagKind, Diagnostic, Diagnostics};
use crate::dtype::DType;
use crate::expr::{Expr, ExprKind, Var};
use crate::kernel::{Kernel, Param};
use crate::printer::Printer;
use crate::simplify::Analyzer;
use crate::span::Span;
use crate::stmt::{ForKind, Stmt, StmtKind, TileOp};

/// Which level of IR is being checked.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Level {
    /// Tile IR, as the builder makes it: tile ops, parallel and pipelined loops, fragments.
    Tile,
    /// Thread-level IR, as lowering leaves it: no tile ops, no fragments, every statement run
    /// by every thread.
    Thread,
}

pub fn verify(k: &Kernel) -> Result<(), Diagnostics> {
    verify_level(k, Level::Tile)
}

pub fn verify_level(k: &Kernel, level: Level) -> Result<(), Diagnostics> {
    let mut v = Verifier {
        vars: HashSet::new(),
        var_stack: vec![],
        bufs: HashSet::new(),
        buf_stack: vec![],
        reported: HashSet::new(),
        diags: vec![],
        an: Analyzer::new(),
        level,
        parallel_depth: 0,
    };
    v.an.threads = Some(k.threads);
    v.kernel(k);
    if v.diags.is_empty() {
        Ok(())
    } else {
        Err(Diagnostics(v.diags))
    }
}

struct Verifier {
    vars: HashSet<u64>,
    var_stack: Vec<u64>,
    bufs: HashSet<u64>,
    buf_stack: Vec<u64>,
    reported: HashSet<u64>,
    diags: Vec<Diagnostic>,
    an: Analyzer,
    level: Level,
    parallel_depth: usize,
}

fn show(e: &Expr) -> String {
    Printer::raw().expr_string(e)
}

fn show_list(es: &[Expr]) -> String {
    format!("[{}]", es.iter().map(show).collect::<Vec<_>>().join(", "))
}

impl Verifier {
    fn err(&mut self, d: Diagnostic) {
        if self.diags.len() < 32 {
            self.diags.push(d);
        }
    }

    fn define_var(&mut self, v: &Var) {
        self.vars.insert(v.id());
        self.var_stack.push(v.id());
    }

    fn define_buf(&mut self, b: &Buffer) {
        self.bufs.insert(b.id());
        self.buf_stack.push(b.id());
    }

    fn kernel(&mut self, k: &Kernel) {
        let span = k.body.span;
        if k.grid.is_empty() || k.grid.len() > 3 {
            self.err(
                Diagnostic::new(
                    DiagKind::InvalidArgument,
                    span,
                    format!(
                        "kernel `{}` has a grid of {} dimensions",
                        k.name,
                        k.grid.len()
                    ),
                )
                .help("launch with 1, 2 or 3 grid dimensions"),
            );
        }
        if k.block_vars.len() != k.grid.len() {
            self.err(Diagnostic::new(
                DiagKind::InvalidArgument,
                span,
                "one block index variable is needed per grid dimension",
            ));
        }
        if k.threads == 0 || k.threads > 1024 {
            self.err(
                Diagnostic::new(
                    DiagKind::InvalidArgument,
                    span,
                    format!("{} threads per block", k.threads),
                )
                .help("use between 1 and 1024 threads per block (a multiple of 32 is best)"),
            );
        }
        for d in &k.dims {
            self.define_var(d);
            self.an.bind(d, 0, i32::MAX as i64);
        }
        let mut names = HashSet::new();
        for p in &k.params {
            if !names.insert(p.name().to_string()) {
                self.err(
                    Diagnostic::new(
                        DiagKind::InvalidArgument,
                        span,
                        format!(
                            "two parameters of kernel `{}` are named `{}`",
                            k.name,
                            p.name()
                        ),
                    )
                    .help("give every parameter a distinct name"),
                );
            }
            match p {
                Param::Scalar(v) => self.define_var(v),
                Param::Tensor { buffer, .. } => {
                    if buffer.scope() != Scope::Global {
                        self.err(Diagnostic::new(
                            DiagKind::ScopeMismatch,
                            buffer.span(),
                            format!("tensor parameter `{}` must be global", buffer.name()),
                        ));
                    }
                    self.define_buf(buffer);
                }
            }
        }
        // The buffers the runtime passes for a tensor the kernel stages itself.
        for st in &k.attrs.staged_rows {
            self.define_buf(&st.scratch);
            self.define_buf(&st.flags);
        }
        for p in &k.params {
            if let Param::Tensor { buffer, .. } = p {
                for s in buffer.shape() {
                    self.expr(s, buffer.span());
                    if !s.dtype().is_int() {
                        self.err(Diagnostic::new(
                            DiagKind::DTypeMismatch,
                            buffer.span(),
                            format!(
                                "shape of `{}` has a non-integer extent {}",
                                buffer.name(),
                                show(s)
                            ),
                        ));
                    }
                }
            }
        }
        for g in &k.grid {
            self.expr(g, span);
        }
        for (v, g) in k.block_vars.iter().zip(&k.grid) {
            self.define_var(v);
            let hi = self.an.bound(g).hi;
            self.an.bind(v, 0, hi.saturating_sub(1).max(0));
        }
        self.stmt(&k.body);
    }

    fn expr(&mut self, e: &Expr, span: Span) {
        let mut problems = vec![];
        e.visit(&mut |x| match x.kind() {
            ExprKind::Var(v) if !self.vars.contains(&v.id()) => {
                problems.push(Problem::Var(v.clone()));
            }
            ExprKind::Load(b, idx) => {
                if !self.bufs.contains(&b.id()) {
                    problems.push(Problem::Buf(b.clone()));
                }
                if idx.len() != b.rank() && !(self.level == Level::Thread && idx.len() == 1) {
                    problems.push(Problem::Rank(b.clone(), idx.len()));
                }
                for i in idx {
                    if !i.dtype().is_int() {
                        problems.push(Problem::IndexType(b.clone(), i.clone()));
                    }
                }
            }
            _ => {}
        });
        for p in problems {
            match p {
                Problem::Var(v) => {
                    if self.reported.insert(v.id()) {
                        self.err(
                            Diagnostic::new(
                                DiagKind::UndefinedVariable,
                                span,
                                format!("variable `{}` is used outside the scope that defines it", v.name()),
                            )
                            .help("use loop and let variables only inside their loop or block, and symbolic sizes only of this kernel"),
                        );
                    }
                }
                Problem::Buf(b) => self.undefined_buf(&b, span),
                Problem::Rank(b, n) => self.err(
                    Diagnostic::new(
                        DiagKind::ShapeMismatch,
                        span,
                        format!(
                            "`{}` has {} dimensions but is indexed with {}",
                            b.name(),
                            b.rank(),
                            n
                        ),
                    )
                    .note(b.span(), format!("`{}` declared here", b.name())),
                ),
                Problem::IndexType(b, i) => self.err(Diagnostic::new(
                    DiagKind::DTypeMismatch,
                    span,
                    format!(
                        "index {} into `{}` is {}, not an integer",
                        show(&i),
                        b.name(),
                        i.dtype()
                    ),
                )),
            }
        }
    }

    fn undefined_buf(&mut self, b: &Buffer, span: Span) {
        if self.reported.insert(b.id()) {
            self.err(
                Diagnostic::new(
                    DiagKind::UndefinedBuffer,
                    span,
                    format!(
                        "buffer `{}` is used outside the scope that allocates it",
                        b.name()
                    ),
                )
                .note(b.span(), format!("`{}` allocated here", b.name()))
                .help("allocate the buffer in an enclosing block of this kernel"),
            );
        }
    }

    fn stmt(&mut self, s: &Stmt) {
        match &s.kind {
            StmtKind::Seq(v) => {
                let (nv, nb) = (self.var_stack.len(), self.buf_stack.len());
                for st in v {
                    self.stmt(st);
                }
                for id in self.var_stack.drain(nv..) {
                    self.vars.remove(&id);
                }
                for id in self.buf_stack.drain(nb..) {
                    self.bufs.remove(&id);
                }
            }
            StmtKind::Let { var, value } => {
                self.expr(value, s.span);
                if var.dtype() != value.dtype() {
                    self.err(Diagnostic::new(
                        DiagKind::DTypeMismatch,
                        s.span,
                        format!(
                            "let `{}`: {} is bound to a {} value",
                            var.name(),
                            var.dtype(),
                            value.dtype()
                        ),
                    ));
                }
                self.define_var(var);
                let b = self.an.bound(value);
                self.an.bind(var, b.lo, b.hi);
            }
            StmtKind::Alloc(b) => self.alloc(b, s.span),
            StmtKind::If { cond, then_, else_ } => {
                self.expr(cond, s.span);
                if !cond.dtype().is_bool() {
                    self.err(
                        Diagnostic::new(
                            DiagKind::DTypeMismatch,
                            s.span,
                            format!(
                                "`if` condition {} is {}, not bool",
                                show(cond),
                                cond.dtype()
                            ),
                        )
                        .help("compare it, e.g. `x.ne_(0)`"),
                    );
                }
                self.stmt(then_);
                if let Some(e) = else_ {
                    self.stmt(e);
                }
            }
            StmtKind::Store {
                buffer,
                indices,
                value,
            } => {
                if !self.bufs.contains(&buffer.id()) {
                    self.undefined_buf(buffer, s.span);
                }
                for i in indices {
                    self.expr(i, s.span);
                }
                self.expr(value, s.span);
                if indices.len() != buffer.rank()
                    && !(self.level == Level::Thread && indices.len() == 1)
                {
                    self.err(
                        Diagnostic::new(
                            DiagKind::ShapeMismatch,
                            s.span,
                            format!(
                                "store to `{}` with {} indices; it has {} dimensions",
                                buffer.name(),
                                indices.len(),
                                buffer.rank()
                            ),
                        )
                        .note(buffer.span(), format!("`{}` declared here", buffer.name())),
                    );
                }
                if value.dtype() != buffer.dtype() {
                    self.err(
                        Diagnostic::new(
                            DiagKind::DTypeMismatch,
                            s.span,
                            format!(
                                "store of a {} value into `{}`, a {} buffer",
                                value.dtype(),
                                buffer.name(),
                                buffer.dtype()
                            ),
                        )
                        .help(format!(
                            "cast the value: `.cast({})`",
                            buffer.dtype().name().to_uppercase()
                        )),
                    );
                }
            }
            StmtKind::For(l) => {
                self.expr(&l.min, s.span);
                self.expr(&l.extent, s.span);
                if !l.extent.dtype().is_int() || !l.min.dtype().is_int() {
                    self.err(Diagnostic::new(
                        DiagKind::DTypeMismatch,
                        s.span,
                        format!("loop `{}` has a non-integer range", l.var.name()),
                    ));
                }
                match (&l.kind, self.level) {
                    (ForKind::Parallel | ForKind::Pipelined { .. }, Level::Thread) => {
                        self.err(Diagnostic::internal(format!(
                            "a {} loop survived lowering to thread-level IR",
                            l.kind.name()
                        )))
                    }
                    (ForKind::Pipelined { stages, .. }, _) if *stages == 0 => self.err(
                        Diagnostic::new(
                            DiagKind::InvalidArgument,
                            s.span,
                            "a pipelined loop with 0 stages",
                        )
                        .help("use stages >= 1 (1 means no overlap)"),
                    ),
                    (
                        ForKind::Pipelined {
                            stages,
                            order,
                            stage,
                        },
                        _,
                    ) => {
                        let n = l.body.flattened().len();
                        if let Some(d) = schedule_problem(*stages, n, order, stage) {
                            self.err(
                                Diagnostic::new(DiagKind::InvalidArgument, s.span, d.0).help(d.1),
                            );
                        }
                    }
                    _ => {}
                }
                let nv = self.var_stack.len();
                self.define_var(&l.var);
                self.an.bind_loop(&l.var, &l.min, &l.extent);
                let par = l.kind == ForKind::Parallel;
                if par {
                    self.parallel_depth += 1;
                }
                self.stmt(&l.body);
                if par {
                    self.parallel_depth -= 1;
                }
                for id in self.var_stack.drain(nv..) {
                    self.vars.remove(&id);
                }
            }
            StmtKind::Op(op) => self.tile_op(op, s.span),
            StmtKind::Eval(e) => self.expr(e, s.span),
            StmtKind::AnnotateLayout { buffer, .. } => {
                if !self.bufs.contains(&buffer.id()) {
                    self.undefined_buf(buffer, s.span);
                }
            }
        }
    }

    fn alloc(&mut self, b: &Buffer, span: Span) {
        match (b.scope(), self.level) {
            (Scope::Global, _) => self.err(
                Diagnostic::new(
                    DiagKind::ScopeMismatch,
                    span,
                    format!("`{}` is allocated in global memory inside a kernel", b.name()),
                )
                .help("pass global tensors as kernel parameters; allocate shared, fragment or local buffers"),
            ),
            (Scope::Fragment, Level::Thread) => self.err(Diagnostic::internal(format!(
                "fragment `{}` survived lowering to thread-level IR",
                b.name()
            ))),
            _ => {}
        }
        match b.const_shape() {
            None => self.err(
                Diagnostic::new(
                    DiagKind::ShapeMismatch,
                    span,
                    format!(
                        "{} buffer `{}` has a shape {} that is not a compile-time constant",
                        b.scope(),
                        b.name(),
                        show_list(b.shape())
                    ),
                )
                .help("on-chip buffers need constant shapes; tile a dynamic size with a constant block size"),
            ),
            Some(shape) if shape.iter().any(|&d| d <= 0) => self.err(Diagnostic::new(
                DiagKind::ShapeMismatch,
                span,
                format!("`{}` has a non-positive extent in shape {:?}", b.name(), shape),
            )),
            _ => {}
        }
        if b.dtype().is_bool() && b.scope() == Scope::Shared {
            // fine: stored as bytes
        }
        self.define_buf(b);
    }

    /// Check a region: defined buffer, one offset and extent per dim, constant extents that
    /// fit a constant-shaped buffer.
    fn region(&mut self, r: &Region, span: Span, op: &str) -> Option<Vec<i64>> {
        if !self.bufs.contains(&r.buffer.id()) {
            self.undefined_buf(&r.buffer, span);
            return None;
        }
        for e in r.offsets.iter().chain(&r.extents) {
            self.expr(e, span);
        }
        if r.offsets.len() != r.buffer.rank() || r.extents.len() != r.buffer.rank() {
            self.err(
                Diagnostic::new(
                    DiagKind::ShapeMismatch,
                    span,
                    format!(
                        "{op}: region of `{}` has {} offsets and {} extents for a {}-d buffer",
                        r.buffer.name(),
                        r.offsets.len(),
                        r.extents.len(),
                        r.buffer.rank()
                    ),
                )
                .note(
                    r.buffer.span(),
                    format!("`{}` declared here", r.buffer.name()),
                ),
            );
            return None;
        }
        let extents: Option<Vec<i64>> = r
            .extents
            .iter()
            .map(|e| self.an.simplify(e).as_int())
            .collect();
        let Some(extents) = extents else {
            self.err(
                Diagnostic::new(
                    DiagKind::ShapeMismatch,
                    span,
                    format!(
                        "{op}: the tile of `{}` has extents {} that are not compile-time constants",
                        r.buffer.name(),
                        show_list(&r.extents)
                    ),
                )
                .help("tile sizes must be constants; index the tile's position with symbolic offsets instead"),
            );
            return None;
        };
        if extents.iter().any(|&e| e <= 0) {
            self.err(Diagnostic::new(
                DiagKind::ShapeMismatch,
                span,
                format!(
                    "{op}: region of `{}` has an empty extent {:?}",
                    r.buffer.name(),
                    extents
                ),
            ));
            return None;
        }
        if r.buffer.scope() != Scope::Global {
            if let Some(shape) = r.buffer.const_shape() {
                for d in 0..shape.len() {
                    let off = self.an.simplify(&r.offsets[d]);
                    let lo = self.an.bound(&off).lo;
                    let out = match off.as_int() {
                        Some(o) => o < 0 || o + extents[d] > shape[d],
                        None => lo != i64::MIN && lo + extents[d] > shape[d],
                    };
                    if out || extents[d] > shape[d] {
                        self.err(
                            Diagnostic::new(
                                DiagKind::OutOfRange,
                                span,
                                format!(
                                    "{op}: region {} of `{}` reaches past its shape {:?} in dimension {d}",
                                    Printer::raw().region(r),
                                    r.buffer.name(),
                                    shape
                                ),
                            )
                            .note(r.buffer.span(), format!("`{}` declared here", r.buffer.name())),
                        );
                        return None;
                    }
                }
            }
        }
        Some(extents)
    }

    fn scope_err(&mut self, span: Span, op: &str, r: &Region, want: &str) {
        self.err(
            Diagnostic::new(
                DiagKind::ScopeMismatch,
                span,
                format!(
                    "{op}: `{}` is in {} memory; {op} needs {want}",
                    r.buffer.name(),
                    r.buffer.scope()
                ),
            )
            .note(
                r.buffer.span(),
                format!("`{}` declared here", r.buffer.name()),
            ),
        );
    }

    fn tile_op(&mut self, op: &TileOp, span: Span) {
        if self.level == Level::Thread {
            self.err(Diagnostic::internal(format!(
                "tile op {} survived lowering",
                op.name()
            )));
            return;
        }
        if self.parallel_depth > 0 {
            self.err(
                Diagnostic::new(
                    DiagKind::Unsupported,
                    span,
                    format!("tile op `{}` inside a parallel loop", op.name()),
                )
                .help("tile ops already run on the whole block; move it out of `t.parallel`, or write the element-wise form"),
            );
            return;
        }
        let squeeze = |v: &[i64]| v.iter().copied().filter(|&e| e != 1).collect::<Vec<_>>();
        match op {
            TileOp::Copy(c) => {
                let (s, d) = (
                    self.region(&c.src, span, "copy"),
                    self.region(&c.dst, span, "copy"),
                );
                if let (Some(s), Some(d)) = (s, d) {
                    // Between registers and global memory a copy may reshape: the elements pair
                    // up in row-major order.
                    let scopes = [c.src.buffer.scope(), c.dst.buffer.scope()];
                    let reshape_ok = scopes.contains(&Scope::Fragment)
                        && scopes.contains(&Scope::Global)
                        && s.iter().product::<i64>() == d.iter().product::<i64>();
                    if squeeze(&s) != squeeze(&d) && !reshape_ok {
                        self.err(
                            Diagnostic::new(
                                DiagKind::ShapeMismatch,
                                span,
                                format!(
                                    "copy from `{}` (tile {:?}) to `{}` (tile {:?}): the shapes differ",
                                    c.src.buffer.name(),
                                    s,
                                    c.dst.buffer.name(),
                                    d
                                ),
                            )
                            .help("copy regions of the same shape (unit dimensions are ignored); give explicit extents with `.region(offsets, extents)`"),
                        );
                    }
                }
            }
            TileOp::Gemm(g) => {
                let a = self.region(&g.a, span, "gemm");
                let b = self.region(&g.b, span, "gemm");
                let c = self.region(&g.c, span, "gemm");
                for (r, name) in [(&g.a, "A"), (&g.b, "B")] {
                    if !matches!(
                        r.buffer.scope(),
                        Scope::Shared | Scope::Fragment | Scope::Local
                    ) {
                        self.scope_err(
                            span,
                            "gemm",
                            r,
                            &format!("operand {name} in shared memory or a fragment"),
                        );
                    }
                }
                if !matches!(g.c.buffer.scope(), Scope::Fragment | Scope::Local) {
                    self.scope_err(span, "gemm", &g.c, "the accumulator C in a fragment");
                }
                // fp8 tensor cores take either format on either side (e4m3 × e5m2).
                let (at, bt) = (g.a.buffer.dtype(), g.b.buffer.dtype());
                if at != bt && !(at.is_fp8() && bt.is_fp8()) {
                    self.err(
                        Diagnostic::new(
                            DiagKind::DTypeMismatch,
                            span,
                            format!(
                                "gemm operands differ in type: `{}` is {}, `{}` is {}",
                                g.a.buffer.name(),
                                g.a.buffer.dtype(),
                                g.b.buffer.name(),
                                g.b.buffer.dtype()
                            ),
                        )
                        .help("give A and B the same element type (copy one into a buffer of the other's type); only the two fp8 formats mix"),
                    );
                }
                let cd = g.c.buffer.dtype();
                if !(cd.is_float() && !cd.is_storage_only() || cd == DType::I32) {
                    self.err(Diagnostic::new(
                        DiagKind::DTypeMismatch,
                        span,
                        format!(
                            "gemm accumulator `{}` is {}; use f32, f16 or i32",
                            g.c.buffer.name(),
                            cd
                        ),
                    ));
                }
                if let (Some(a), Some(b), Some(c)) = (a, b, c) {
                    let (a, b, c) = (squeeze_to_2d(&a), squeeze_to_2d(&b), squeeze_to_2d(&c));
                    match (a, b, c) {
                        (Some(a), Some(b), Some(c)) => {
                            let (m, ka) = if g.trans_a {
                                (a[1], a[0])
                            } else {
                                (a[0], a[1])
                            };
                            let (kb, n) = if g.trans_b {
                                (b[1], b[0])
                            } else {
                                (b[0], b[1])
                            };
                            if ka != kb || c != [m, n] {
                                self.err(
                                    Diagnostic::new(
                                        DiagKind::ShapeMismatch,
                                        span,
                                        format!(
                                            "gemm shapes do not agree: A{} {:?}, B{} {:?}, C {:?} (M={m}, K={ka} from A; K={kb}, N={n} from B)",
                                            if g.trans_a { "^T" } else { "" },
                                            a,
                                            if g.trans_b { "^T" } else { "" },
                                            b,
                                            c
                                        ),
                                    )
                                    .help("A is [M, K] ([K, M] with transpose_a), B is [K, N] ([N, K] with transpose_b), C is [M, N]"),
                                );
                            }
                        }
                        _ => self.err(Diagnostic::new(
                            DiagKind::ShapeMismatch,
                            span,
                            "gemm operands must be 2-d tiles",
                        )),
                    }
                }
            }
            TileOp::Reduce(r) => {
                let s = self.region(&r.src, span, "reduce");
                let d = self.region(&r.dst, span, "reduce");
                for reg in [&r.src, &r.dst] {
                    if reg.buffer.scope() == Scope::Global {
                        self.scope_err(span, "reduce", reg, "a fragment or shared buffer");
                    }
                }
                if let (Some(s), Some(d)) = (s, d) {
                    if r.dim >= s.len() {
                        self.err(Diagnostic::new(
                            DiagKind::InvalidArgument,
                            span,
                            format!("reduce along dim {} of a {}-d tile", r.dim, s.len()),
                        ));
                    } else {
                        let mut want = s.clone();
                        want.remove(r.dim);
                        if squeeze(&want) != squeeze(&d) {
                            self.err(
                                Diagnostic::new(
                                    DiagKind::ShapeMismatch,
                                    span,
                                    format!(
                                        "reduce of `{}` {:?} along dim {} gives {:?}, but `{}` is {:?}",
                                        r.src.buffer.name(),
                                        s,
                                        r.dim,
                                        want,
                                        r.dst.buffer.name(),
                                        d
                                    ),
                                )
                                .help("the destination has the source's shape with the reduced dimension removed"),
                            );
                        }
                    }
                }
            }
            TileOp::Fill(f) => {
                self.region(&f.dst, span, "fill");
                self.expr(&f.value, span);
            }
            TileOp::Atomic(a) => {
                let name = a.kind.op_name();
                let s = self.region(&a.src, span, name);
                let d = self.region(&a.dst, span, name);
                if !matches!(a.dst.buffer.scope(), Scope::Global | Scope::Shared) {
                    self.scope_err(span, name, &a.dst, "a global or shared destination");
                }
                let dt = a.dst.buffer.dtype();
                if a.kind != crate::AtomicKind::Add && !a.kind.supports(dt) {
                    self.err(
                        Diagnostic::new(
                            DiagKind::InvalidArgument,
                            span,
                            format!("{name} into `{}` of {dt}", a.dst.buffer.name()),
                        )
                        .help("atomic max and min take int32, uint32 or float32 destinations: keep the result in a float32 (or int32) buffer and cast after"),
                    );
                }
                if let (Some(s), Some(d)) = (s, d) {
                    if squeeze(&s) != squeeze(&d) {
                        self.err(Diagnostic::new(
                            DiagKind::ShapeMismatch,
                            span,
                            format!("{name} from tile {s:?} into tile {d:?}: the shapes differ"),
                        ));
                    }
                }
            }
            TileOp::Cumsum(c) => {
                let s = self.region(&c.src, span, "cumsum");
                let d = self.region(&c.dst, span, "cumsum");
                for reg in [&c.src, &c.dst] {
                    if reg.buffer.scope() == Scope::Global {
                        self.scope_err(span, "cumsum", reg, "a fragment or shared buffer");
                    }
                }
                if let (Some(s), Some(d)) = (s, d) {
                    if s != d {
                        self.err(Diagnostic::new(
                            DiagKind::ShapeMismatch,
                            span,
                            format!(
                                "cumsum from tile {:?} into tile {:?}: the shapes differ",
                                s, d
                            ),
                        ));
                    } else if c.dim >= s.len() {
                        self.err(Diagnostic::new(
                            DiagKind::InvalidArgument,
                            span,
                            format!("cumsum along dim {} of a {}-d tile", c.dim, s.len()),
                        ));
                    }
                }
            }
        }
    }
}

enum Problem {
    Var(Var),
    Buf(Buffer),
    Rank(Buffer, usize),
    IndexType(Buffer, Expr),
}

/// Drop unit dimensions; a 2-d result is what a gemm operand must be.
fn squeeze_to_2d(e: &[i64]) -> Option<[i64; 2]> {
    let v: Vec<i64> = e.iter().copied().filter(|&x| x != 1).collect();
    match (v.len(), e.len()) {
        (2, _) => Some([v[0], v[1]]),
        // A tile with a unit dimension (e.g. M = 1): keep the last two dims as given.
        (0 | 1, n) if n >= 2 => Some([e[n - 2], e[n - 1]]),
        _ => None,
    }
}

/// What is wrong with a pipelined loop's `order` / `stage` annotations, if anything: each must
/// name every statement of the body once (the body flattened, as the user wrote it), and a
/// stage lies in `0..stages`.
fn schedule_problem(
    stages: u32,
    n: usize,
    order: &Option<Vec<i32>>,
    stage: &Option<Vec<i32>>,
) -> Option<(String, String)> {
    if let Some(o) = order {
        if o.len() != n {
            return Some((
                format!(
                    "pipelined loop: `order` has {} entries but the loop body has {n} statements",
                    o.len()
                ),
                "give one entry per statement of the body".into(),
            ));
        }
        let mut seen = vec![false; n];
        for &i in o {
            match usize::try_from(i).ok().filter(|&i| i < n) {
                Some(i) if !seen[i] => seen[i] = true,
                _ => {
                    return Some((
                        format!("pipelined loop: `order` {o:?} is not a permutation of 0..{n}"),
                        "list each statement's position in the issue order exactly once".into(),
                    ))
                }
            }
        }
    }
    if let Some(st) = stage {
        if st.len() != n {
            return Some((
                format!(
                    "pipelined loop: `stage` has {} entries but the loop body has {n} statements",
                    st.len()
                ),
                "give one entry per statement of the body".into(),
            ));
        }
        if let Some(bad) = st.iter().find(|&&x| x < 0 || x >= stages as i32) {
            return Some((
                format!("pipelined loop: stage {bad} is outside 0..{stages}"),
                format!(
                    "stages run from 0 (issued first) to {}",
                    stages.saturating_sub(1)
                ),
            ));
        }
    }
    None
}
