//! Debug printing (`t.print`) and atomics on single elements (`t.atomic_add_at(c.at([i, j]), v)`), the form TileLang's
//! `T.atomic_add(C[i, j], v)` takes inside a parallel loop: split-K partial sums, histograms,
//! a maximum gathered across blocks. The tile form (`t.atomic_add(dst_tile, src_tile)`) is in
//! `scope.rs`.

use tl_ir::{AtomicKind, DType, DiagKind, Diagnostic, Expr, ExprKind, Intrinsic, Scope, StmtKind};

use super::scope::TileScope;

impl TileScope {
    /// `*elem += value` atomically; `elem` an element of a global or shared buffer.
    #[track_caller]
    pub fn atomic_add_at(&mut self, elem: Expr, value: impl Into<Expr>) {
        let span = self.here();
        self.atomic_at(AtomicKind::Add, elem, value.into(), span);
    }

    /// `*elem = max(*elem, value)` atomically (i32, u32 or f32 elements).
    #[track_caller]
    pub fn atomic_max_at(&mut self, elem: Expr, value: impl Into<Expr>) {
        let span = self.here();
        self.atomic_at(AtomicKind::Max, elem, value.into(), span);
    }

    /// `*elem = min(*elem, value)` atomically (i32, u32 or f32 elements).
    #[track_caller]
    pub fn atomic_min_at(&mut self, elem: Expr, value: impl Into<Expr>) {
        let span = self.here();
        self.atomic_at(AtomicKind::Min, elem, value.into(), span);
    }

    /// Debug output: every thread that runs this prints `msg` and `value` (on GPUs with its
    /// block and thread) — in a parallel loop, once per element. On the CPU backend, the
    /// simulator and NVIDIA GPUs (CUDA's `printf`; the kernel is built from CUDA C++); AMD
    /// targets refuse it.
    #[track_caller]
    pub fn print(&mut self, msg: &str, value: impl Into<Expr>) {
        let span = self.here();
        let call = Expr::call(
            Intrinsic::Print {
                msg: msg.to_string(),
            },
            vec![value.into()],
            DType::Bool,
        );
        self.push(StmtKind::Eval(call), span);
    }

    fn atomic_at(&mut self, kind: AtomicKind, elem: Expr, value: Expr, span: tl_ir::Span) {
        let name = kind.op_name();
        let ExprKind::Load(b, idx) = elem.kind() else {
            self.error(
                Diagnostic::new(
                    DiagKind::InvalidArgument,
                    span,
                    format!("`{name}` takes an element to update (`buf.at([..])`), got `{elem}`"),
                )
                .help("pass the element itself, e.g. `c.at([row, col])`"),
            );
            return;
        };
        if idx.len() != b.shape().len() {
            self.error(Diagnostic::new(
                DiagKind::InvalidArgument,
                span,
                format!(
                    "`{name}` on `{}` with {} indices; it has {} dimensions",
                    b.name(),
                    idx.len(),
                    b.shape().len()
                ),
            ));
            return;
        }
        if !matches!(b.scope(), Scope::Global | Scope::Shared) {
            self.error(
                Diagnostic::new(
                    DiagKind::InvalidArgument,
                    span,
                    format!(
                        "`{name}` on `{}`, a {} buffer: atomics update global or shared memory",
                        b.name(),
                        b.scope()
                    ),
                )
                .note(b.span(), format!("`{}` declared here", b.name()))
                .help("a fragment or local value needs no atomic: assign it"),
            );
            return;
        }
        let dt = b.dtype();
        if !kind.supports(dt) {
            self.error(
                Diagnostic::new(
                    DiagKind::InvalidArgument,
                    span,
                    format!("`{name}` on `{}` of {dt}", b.name()),
                )
                .help(if kind == AtomicKind::Add {
                    "atomic adds take f32, f64, f16, bf16, i32, u32, i64 or u64 elements"
                } else {
                    "atomic max and min take int32, uint32 or float32 elements"
                }),
            );
            return;
        }
        let addr = Expr::call(Intrinsic::AddressOf, vec![elem.clone()], DType::U64);
        let call = Expr::call(kind.intrinsic(), vec![addr, value.cast(dt)], DType::Bool);
        self.push(StmtKind::Eval(call), span);
    }
}
