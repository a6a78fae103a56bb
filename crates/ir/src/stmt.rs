//! Statements, loops and tile operations.

use crate::buffer::{Buffer, Region};
use crate::expr::{Expr, Var};
use crate::span::Span;

#[derive(Clone, PartialEq, Debug)]
pub struct Stmt {
    pub kind: StmtKind,
    pub span: Span,
}

#[derive(Clone, PartialEq, Debug)]
pub enum StmtKind {
    Seq(Vec<Stmt>),
    /// Binds `var` to `value` from here to the end of the enclosing sequence.
    Let {
        var: Var,
        value: Expr,
    },
    /// Declares a shared, fragment, local or var buffer, live to the end of the enclosing
    /// sequence.
    Alloc(Buffer),
    If {
        cond: Expr,
        then_: Box<Stmt>,
        else_: Option<Box<Stmt>>,
    },
    Store {
        buffer: Buffer,
        indices: Vec<Expr>,
        value: Expr,
    },
    For(Box<For>),
    Op(TileOp),
    /// An intrinsic called for its side effect.
    Eval(Expr),
    /// `t.annotate_layout(buf, layout)`: the user's choice of layout for a buffer, in CuTe
    /// notation; layout inference takes it as a strict constraint.
    AnnotateLayout {
        buffer: Buffer,
        layout: String,
    },
}

#[derive(Clone, PartialEq, Debug)]
pub struct For {
    pub var: Var,
    pub min: Expr,
    pub extent: Expr,
    pub kind: ForKind,
    pub body: Stmt,
}

#[derive(Clone, PartialEq, Debug)]
pub enum ForKind {
    Serial,
    /// Iterations are independent; the compiler spreads them over threads and vector lanes.
    Parallel,
    Unrolled,
    /// Iterations are independent and run by one thread; codegen may use vector instructions.
    /// What a parallel loop becomes once its iterations are assigned to threads.
    Vectorized,
    /// Software-pipelined: copies into shared memory run `stages - 1` iterations ahead.
    /// `order` and `stage` optionally place each statement of the body (TileLang's
    /// `T.Pipelined(order=, stage=)`); the GPU pipeliner follows `stage` 0 (run ahead) and
    /// `stages - 1` (consume) and rejects, with a diagnostic, what it cannot follow.
    Pipelined {
        stages: u32,
        order: Option<Vec<i32>>,
        stage: Option<Vec<i32>>,
    },
}

impl ForKind {
    pub fn name(&self) -> &'static str {
        match self {
            ForKind::Serial => "serial",
            ForKind::Parallel => "parallel",
            ForKind::Unrolled => "unroll",
            ForKind::Vectorized => "vectorized",
            ForKind::Pipelined { .. } => "pipelined",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum WarpPolicy {
    /// Let the compiler pick the partition of the output tile over warps.
    #[default]
    Auto,
    Square,
    FullRow,
    FullCol,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum ReduceKind {
    Sum,
    Max,
    Min,
    AbsSum,
    AbsMax,
}

impl ReduceKind {
    pub fn name(self) -> &'static str {
        match self {
            ReduceKind::Sum => "sum",
            ReduceKind::Max => "max",
            ReduceKind::Min => "min",
            ReduceKind::AbsSum => "abssum",
            ReduceKind::AbsMax => "absmax",
        }
    }
}

#[derive(Clone, PartialEq, Debug)]
pub struct CopyOp {
    pub src: Region,
    pub dst: Region,
    /// Set by the pipeline pass on the copies it runs ahead: the copy is issued asynchronously
    /// (cp.async, buffer_load…lds) and lands at the pipeline's wait, which owns its ordering.
    pub asynchronous: bool,
    /// Set by the pipeline pass where every thread must issue the same asynchronous copies (AMD
    /// counts outstanding loads, not groups): the copy moves data only where `guard` holds,
    /// and elsewhere its destination receives zeros.
    pub guard: Option<Expr>,
    /// Set by the pipeline pass on copies the tensor-memory accelerator makes (Hopper): the
    /// address of the mbarrier whose transactions the copy completes. The pipeline issues such
    /// copies from one thread and waits on the barrier.
    pub tma_barrier: Option<Expr>,
}

impl CopyOp {
    /// A synchronous copy of `src` into `dst`.
    pub fn new(src: Region, dst: Region) -> CopyOp {
        CopyOp {
            src,
            dst,
            asynchronous: false,
            guard: None,
            tma_barrier: None,
        }
    }
}

/// The matrix instruction a gemm runs on. Instruction selection picks one per gemm for the
/// target; a kernel may name one (`GemmOp::instruction`) to override the choice.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum GemmInstruction {
    /// Fused multiply-adds on the vector units (every target).
    Simt,
    /// `mma.sync.m16n8k16` (NVIDIA sm_80+).
    MmaSync,
    /// `wgmma.mma_async` (NVIDIA sm_90a).
    Wgmma,
    /// `v_mfma_f32_{m}x{n}x{k}_{f16|bf16}` (AMD CDNA3/CDNA4).
    Mfma(MfmaShape),
}

/// The M×N×K shape of an MFMA instruction.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct MfmaShape {
    pub m: u32,
    pub n: u32,
    pub k: u32,
}

impl GemmInstruction {
    pub fn name(self) -> String {
        match self {
            GemmInstruction::Simt => "simt".into(),
            GemmInstruction::MmaSync => "mma_sync".into(),
            GemmInstruction::Wgmma => "wgmma".into(),
            GemmInstruction::Mfma(s) => format!("mfma_{}x{}x{}", s.m, s.n, s.k),
        }
    }
}

/// How the pipeline pass schedules a gemm among its loop's iterations (defaults: the gemm
/// completes within its op and fences its own operands).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct GemmSchedule {
    /// Asynchronous MMA groups (wgmma) the gemm may leave in flight at its end; the pipeline
    /// waits for them after its loop.
    pub in_flight: u32,
    /// The enclosing pipeline fences and barriers the shared operand tiles for the async
    /// proxy before the gemm runs, so the gemm needs no fence of its own.
    pub operands_fenced: bool,
}

#[derive(Clone, PartialEq, Debug)]
pub struct GemmOp {
    /// `[M, K]`, or `[K, M]` when `trans_a`.
    pub a: Region,
    /// `[K, N]`, or `[N, K]` when `trans_b`.
    pub b: Region,
    /// `[M, N]` accumulator (a fragment).
    pub c: Region,
    pub trans_a: bool,
    pub trans_b: bool,
    /// Overwrite C instead of accumulating into it.
    pub clear_accum: bool,
    pub policy: WarpPolicy,
    /// The instruction the kernel asks for; `None` leaves the choice to instruction selection,
    /// which fills it in.
    pub instruction: Option<GemmInstruction>,
    /// On wgmma, as the only consumer of a software-pipelined loop: leave each iteration's
    /// wgmma in flight while the next iteration waits for its tiles (wait for all but the
    /// newest group); the pipeline refills stages one iteration later to match.
    pub overlap: bool,
    /// On wgmma: how many asynchronous groups may still be pending when the op ends
    /// (TileLang's `wg_wait`): `Some(n)` waits with `wgmma.wait_group n`, `Some(-1)` does not
    /// wait at all, leaving the accumulator to a later `wait_wgmma`; `None` lets the compiler
    /// decide (wait for everything, or what `overlap` keeps in flight). Other instructions
    /// finish within the op and ignore it.
    pub wg_wait: Option<i32>,
    /// Set by the pipeline pass.
    pub schedule: GemmSchedule,
}

#[derive(Clone, PartialEq, Debug)]
pub struct ReduceOp {
    pub src: Region,
    /// The source shape with `dim` removed.
    pub dst: Region,
    pub kind: ReduceKind,
    pub dim: usize,
    /// Overwrite dst (true) or combine the reduction into its current value (false).
    pub clear: bool,
}

#[derive(Clone, PartialEq, Debug)]
pub struct FillOp {
    pub dst: Region,
    pub value: Expr,
}

/// What an atomic tile op does to each destination element with its source element.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum AtomicKind {
    #[default]
    Add,
    Max,
    Min,
}

impl AtomicKind {
    /// The DSL's name of the op (`atomic_add`, `atomic_max`, `atomic_min`).
    pub fn op_name(self) -> &'static str {
        match self {
            AtomicKind::Add => "atomic_add",
            AtomicKind::Max => "atomic_max",
            AtomicKind::Min => "atomic_min",
        }
    }
    /// Whether elements of `dt` can be updated this way (every backend: add takes the float
    /// and 32/64-bit integer types, max and min 32-bit integers and f32).
    pub fn supports(self, dt: crate::DType) -> bool {
        use crate::DType::*;
        match self {
            AtomicKind::Add => matches!(dt, F32 | F64 | F16 | BF16 | I32 | U32 | I64 | U64),
            AtomicKind::Max | AtomicKind::Min => matches!(dt, F32 | I32 | U32),
        }
    }

    /// What [`supports`](Self::supports) allows, for messages.
    pub fn supported_types(self) -> &'static str {
        match self {
            AtomicKind::Add => "f32, f64, f16, bf16, i32, u32, i64 or u64",
            AtomicKind::Max | AtomicKind::Min => "f32, i32 or u32",
        }
    }

    /// The kind of a per-element atomic intrinsic.
    pub fn of_intrinsic(op: &crate::Intrinsic) -> Option<AtomicKind> {
        match op {
            crate::Intrinsic::AtomicAdd => Some(AtomicKind::Add),
            crate::Intrinsic::AtomicMax => Some(AtomicKind::Max),
            crate::Intrinsic::AtomicMin => Some(AtomicKind::Min),
            _ => None,
        }
    }

    /// The per-element intrinsic: args `(address_of(dst element), value)`.
    pub fn intrinsic(self) -> crate::Intrinsic {
        match self {
            AtomicKind::Add => crate::Intrinsic::AtomicAdd,
            AtomicKind::Max => crate::Intrinsic::AtomicMax,
            AtomicKind::Min => crate::Intrinsic::AtomicMin,
        }
    }
}

#[derive(Clone, PartialEq, Debug)]
pub struct AtomicOp {
    pub src: Region,
    pub dst: Region,
    pub kind: AtomicKind,
}

#[derive(Clone, PartialEq, Debug)]
pub struct CumsumOp {
    pub src: Region,
    pub dst: Region,
    pub dim: usize,
    pub reverse: bool,
}

#[derive(Clone, PartialEq, Debug)]
pub enum TileOp {
    Copy(CopyOp),
    Gemm(GemmOp),
    Reduce(ReduceOp),
    Fill(FillOp),
    Atomic(AtomicOp),
    Cumsum(CumsumOp),
}

impl TileOp {
    pub fn name(&self) -> &'static str {
        match self {
            TileOp::Copy(_) => "copy",
            TileOp::Gemm(_) => "gemm",
            TileOp::Reduce(_) => "reduce",
            TileOp::Fill(_) => "fill",
            TileOp::Atomic(a) => a.kind.op_name(),
            TileOp::Cumsum(_) => "cumsum",
        }
    }
    /// The regions the op reads, then the regions it writes.
    pub fn regions(&self) -> (Vec<&Region>, Vec<&Region>) {
        match self {
            TileOp::Copy(c) => (vec![&c.src], vec![&c.dst]),
            TileOp::Gemm(g) => {
                if g.clear_accum {
                    (vec![&g.a, &g.b], vec![&g.c])
                } else {
                    (vec![&g.a, &g.b, &g.c], vec![&g.c])
                }
            }
            TileOp::Reduce(r) => {
                if r.clear {
                    (vec![&r.src], vec![&r.dst])
                } else {
                    (vec![&r.src, &r.dst], vec![&r.dst])
                }
            }
            TileOp::Fill(f) => (vec![], vec![&f.dst]),
            TileOp::Atomic(a) => (vec![&a.src, &a.dst], vec![&a.dst]),
            TileOp::Cumsum(c) => (vec![&c.src], vec![&c.dst]),
        }
    }
    pub fn regions_mut(&mut self) -> Vec<&mut Region> {
        match self {
            TileOp::Copy(c) => vec![&mut c.src, &mut c.dst],
            TileOp::Gemm(g) => vec![&mut g.a, &mut g.b, &mut g.c],
            TileOp::Reduce(r) => vec![&mut r.src, &mut r.dst],
            TileOp::Fill(f) => vec![&mut f.dst],
            TileOp::Atomic(a) => vec![&mut a.src, &mut a.dst],
            TileOp::Cumsum(c) => vec![&mut c.src, &mut c.dst],
        }
    }
}

impl Stmt {
    pub fn new(kind: StmtKind, span: Span) -> Stmt {
        Stmt { kind, span }
    }
    pub fn seq(stmts: Vec<Stmt>, span: Span) -> Stmt {
        Stmt::new(StmtKind::Seq(stmts), span)
    }
    pub fn empty() -> Stmt {
        Stmt::seq(vec![], Span::UNKNOWN)
    }
    pub fn is_empty(&self) -> bool {
        matches!(&self.kind, StmtKind::Seq(v) if v.iter().all(|s| s.is_empty()))
    }

    /// The statements of a sequence with nested sequences flattened, in order: a loop body's
    /// statements as the `order` / `stage` annotations of a pipelined loop index them, or a
    /// kernel body's top-level statements.
    pub fn flattened(&self) -> Vec<&Stmt> {
        fn go<'a>(s: &'a Stmt, out: &mut Vec<&'a Stmt>) {
            match &s.kind {
                StmtKind::Seq(v) => v.iter().for_each(|x| go(x, out)),
                _ => out.push(s),
            }
        }
        let mut out = vec![];
        go(self, &mut out);
        out
    }

    /// The ids of the buffers this statement may read: tile ops' sources and every loaded
    /// element (also under an intrinsic's address operand, as a peer copy's source is, or
    /// an atomic's element).
    pub fn read_buffers(&self) -> std::collections::HashSet<u64> {
        let mut out = std::collections::HashSet::new();
        self.walk(&mut |s| {
            if let StmtKind::Op(op) = &s.kind {
                for r in op.regions().0 {
                    out.insert(r.buffer.id());
                }
            }
            for e in s.exprs() {
                e.visit(&mut |x| {
                    if let crate::ExprKind::Load(b, _) = x.kind() {
                        out.insert(b.id());
                    }
                });
            }
        });
        out
    }

    /// The ids of the buffers this statement may write: stores, tile ops' destinations, and
    /// elements updated through their address (atomics, memory-model stores, peer copies).
    pub fn written_buffers(&self) -> std::collections::HashSet<u64> {
        let mut out = std::collections::HashSet::new();
        self.walk(&mut |s| {
            match &s.kind {
                StmtKind::Store { buffer, .. } => {
                    out.insert(buffer.id());
                }
                StmtKind::Op(op) => {
                    for r in op.regions().1 {
                        out.insert(r.buffer.id());
                    }
                }
                _ => {}
            }
            for e in s.exprs() {
                e.visit(&mut |x| {
                    if let Some(b) = written_through_address(x) {
                        out.insert(b.id());
                    }
                });
            }
        });
        out
    }

    /// Visit every statement, pre-order.
    pub fn walk(&self, f: &mut dyn FnMut(&Stmt)) {
        f(self);
        match &self.kind {
            StmtKind::Seq(v) => v.iter().for_each(|s| s.walk(f)),
            StmtKind::If { then_, else_, .. } => {
                then_.walk(f);
                if let Some(e) = else_ {
                    e.walk(f);
                }
            }
            StmtKind::For(l) => l.body.walk(f),
            _ => {}
        }
    }

    /// Visit every expression that appears directly in a statement (not recursing into
    /// sub-statements; combine with `walk` for everything).
    pub fn exprs(&self) -> Vec<&Expr> {
        match &self.kind {
            StmtKind::Seq(_) | StmtKind::Alloc(_) | StmtKind::AnnotateLayout { .. } => vec![],
            StmtKind::Let { value, .. } => vec![value],
            StmtKind::If { cond, .. } => vec![cond],
            StmtKind::Store { indices, value, .. } => {
                indices.iter().chain(std::iter::once(value)).collect()
            }
            StmtKind::For(l) => vec![&l.min, &l.extent],
            StmtKind::Op(op) => {
                let mut v = vec![];
                let (r, w) = op.regions();
                for reg in r.into_iter().chain(w) {
                    v.extend(reg.offsets.iter());
                    v.extend(reg.extents.iter());
                }
                if let TileOp::Fill(f) = op {
                    v.push(&f.value);
                }
                if let TileOp::Copy(c) = op {
                    v.extend(c.guard.iter());
                    v.extend(c.tma_barrier.iter());
                }
                v
            }
            StmtKind::Eval(e) => vec![e],
        }
    }

    /// Rebuild the statement tree bottom-up: `f` sees each statement after its children were
    /// rebuilt and returns the replacement.
    pub fn map_post(&self, f: &mut dyn FnMut(Stmt) -> Stmt) -> Stmt {
        let kind = match &self.kind {
            StmtKind::Seq(v) => StmtKind::Seq(v.iter().map(|s| s.map_post(f)).collect()),
            StmtKind::If { cond, then_, else_ } => StmtKind::If {
                cond: cond.clone(),
                then_: Box::new(then_.map_post(f)),
                else_: else_.as_ref().map(|e| Box::new(e.map_post(f))),
            },
            StmtKind::For(l) => StmtKind::For(Box::new(For {
                var: l.var.clone(),
                min: l.min.clone(),
                extent: l.extent.clone(),
                kind: l.kind.clone(),
                body: l.body.map_post(f),
            })),
            k => k.clone(),
        };
        f(Stmt::new(kind, self.span))
    }

    /// Apply `f` to every expression in the tree (statement expressions and region bounds).
    pub fn map_exprs(&self, f: &mut dyn FnMut(&Expr) -> Expr) -> Stmt {
        self.map_post(&mut |s| {
            let kind = match s.kind {
                StmtKind::Let { var, value } => StmtKind::Let {
                    var,
                    value: f(&value),
                },
                StmtKind::If { cond, then_, else_ } => StmtKind::If {
                    cond: f(&cond),
                    then_,
                    else_,
                },
                StmtKind::Store {
                    buffer,
                    indices,
                    value,
                } => StmtKind::Store {
                    buffer,
                    indices: indices.iter().map(&mut *f).collect(),
                    value: f(&value),
                },
                StmtKind::For(mut l) => {
                    l.min = f(&l.min);
                    l.extent = f(&l.extent);
                    StmtKind::For(l)
                }
                StmtKind::Op(mut op) => {
                    for r in op.regions_mut() {
                        r.offsets = r.offsets.iter().map(&mut *f).collect();
                        r.extents = r.extents.iter().map(&mut *f).collect();
                    }
                    if let TileOp::Fill(fl) = &mut op {
                        fl.value = f(&fl.value);
                    }
                    if let TileOp::Copy(c) = &mut op {
                        c.guard = c.guard.as_ref().map(&mut *f);
                        c.tma_barrier = c.tma_barrier.as_ref().map(&mut *f);
                    }
                    StmtKind::Op(op)
                }
                StmtKind::Eval(e) => StmtKind::Eval(f(&e)),
                k => k,
            };
            Stmt::new(kind, s.span)
        })
    }

    /// Flatten nested sequences and drop empty ones.
    pub fn flatten(self) -> Stmt {
        self.map_post(&mut |s| match s.kind {
            StmtKind::Seq(v) => {
                let mut out = Vec::with_capacity(v.len());
                for st in v {
                    match st.kind {
                        StmtKind::Seq(inner) if !declares(&inner) => out.extend(inner),
                        _ => out.push(st),
                    }
                }
                if out.len() == 1 && !declares(&out) {
                    out.pop().unwrap_or_else(Stmt::empty)
                } else {
                    Stmt::seq(out, s.span)
                }
            }
            _ => s,
        })
    }
}

/// Does a sequence introduce names (a `Let` or `Alloc`)? Such a sequence is a scope and must not
/// be merged into its parent.
fn declares(v: &[Stmt]) -> bool {
    v.iter()
        .any(|s| matches!(s.kind, StmtKind::Let { .. } | StmtKind::Alloc(_)))
}

impl Stmt {
    /// Replace variables by expressions everywhere in the tree.
    pub fn substitute(&self, map: &std::collections::HashMap<u64, Expr>) -> Stmt {
        self.map_exprs(&mut |e| e.substitute(map))
    }
}

/// The buffer an intrinsic call writes through the address it takes first (atomics,
/// memory-model stores, peer copies, the shifted copies' destinations), if `e` is one.
pub fn written_through_address(e: &crate::Expr) -> Option<&crate::Buffer> {
    use crate::{ExprKind, Intrinsic};
    let ExprKind::Call(
        Intrinsic::AtomicAdd
        | Intrinsic::AtomicMax
        | Intrinsic::AtomicMin
        | Intrinsic::MemStore { .. }
        | Intrinsic::MemRedAdd { .. }
        | Intrinsic::MemAtomAdd { .. }
        | Intrinsic::PeerCopy { .. }
        | Intrinsic::PeerCopyWarp { .. }
        | Intrinsic::LoadWindow
        | Intrinsic::StoreShifted
        | Intrinsic::ShiftedVecCopy,
        args,
    ) = e.kind()
    else {
        return None;
    };
    let ExprKind::Call(Intrinsic::AddressOf, a) = args.first()?.kind() else {
        return None;
    };
    match a.first()?.kind() {
        ExprKind::Load(b, _) => Some(b),
        _ => None,
    }
}
