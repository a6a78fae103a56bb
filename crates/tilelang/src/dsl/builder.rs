//! The kernel builder: traces the user's closures into tile IR.

use std::cell::RefCell;
use std::rc::Rc;

use tl_ir::{
    Buffer, DType, DiagKind, Diagnostic, Expr, KernelAttrs, Param, Role, Scope, Span, Stmt,
    StmtKind, Var,
};

use super::args::IntoExprs;
use super::scope::TileScope;

/// What the builder accumulates besides statements: diagnostics found while tracing, counters
/// for generated names, and kernel attributes set from inside the body.
#[derive(Default)]
pub(crate) struct BuildState {
    pub errors: Vec<Diagnostic>,
    pub counters: std::collections::HashMap<&'static str, usize>,
    /// Names given so far (variables and buffers).
    pub names: std::collections::HashSet<String>,
    pub attrs: KernelAttrs,
}

impl BuildState {
    pub fn fresh(&mut self, prefix: &'static str) -> String {
        let n = self.counters.entry(prefix).or_insert(0);
        let name = format!("{prefix}{n}");
        *n += 1;
        self.unique(&name)
    }

    /// `name` the first time, then `name_1`, `name_2`, …: every variable and buffer of a kernel
    /// gets its own name (two sibling loops both over `i` become `i` and `i_1`), so printed IR
    /// and generated code never shadow, and the IR's printed form identifies the program (the
    /// disk cache's links rely on it).
    pub fn unique(&mut self, name: &str) -> String {
        if self.names.insert(name.to_string()) {
            return name.to_string();
        }
        (1..)
            .map(|k| format!("{name}_{k}"))
            .find(|c| self.names.insert(c.clone()))
            .unwrap_or_default()
    }
}

pub(crate) type Shared = Rc<RefCell<BuildState>>;

/// The `k` in `Kernel::build("name", |k| ...)`: declares sizes and parameters, then the launch.
pub struct KernelBuilder {
    pub(crate) name: String,
    pub(crate) dims: Vec<Var>,
    pub(crate) params: Vec<Param>,
    pub(crate) launch: Option<Launch>,
    pub(crate) state: Shared,
    pub(crate) span: Span,
}

pub(crate) struct Launch {
    pub grid: Vec<Expr>,
    pub block_vars: Vec<Var>,
    pub threads: u32,
    pub body: Stmt,
}

impl KernelBuilder {
    pub(crate) fn new(name: &str, span: Span) -> KernelBuilder {
        KernelBuilder {
            name: name.to_string(),
            dims: vec![],
            params: vec![],
            launch: None,
            state: Rc::new(RefCell::new(BuildState::default())),
            span,
        }
    }

    fn error(&self, d: Diagnostic) {
        self.state.borrow_mut().errors.push(d);
    }

    /// A symbolic size, bound at launch from the shapes of the tensors that use it.
    #[track_caller]
    pub fn dim(&mut self, name: &str) -> Expr {
        if let Some(d) = self.dims.iter().find(|d| d.name() == name) {
            self.error(
                Diagnostic::new(
                    DiagKind::InvalidArgument,
                    Span::caller(),
                    format!("symbolic size `{name}` is declared twice"),
                )
                .help("declare each size once and reuse the expression"),
            );
            return d.expr();
        }
        let name = self.state.borrow_mut().unique(name);
        let v = Var::new(name, DType::I32);
        self.dims.push(v.clone());
        v.expr()
    }

    #[track_caller]
    fn tensor(&mut self, name: &str, shape: Vec<Expr>, dtype: DType, role: Role) -> Buffer {
        let name = self.state.borrow_mut().unique(name);
        let b = Buffer::new(name, shape, dtype, Scope::Global, Span::caller());
        self.params.push(Param::Tensor {
            buffer: b.clone(),
            role,
        });
        b
    }

    /// A tensor the kernel reads.
    #[track_caller]
    pub fn input(&mut self, name: &str, shape: impl IntoExprs, dtype: DType) -> Buffer {
        self.tensor(name, shape.into_exprs(), dtype, Role::Input)
    }
    /// A tensor the kernel writes.
    #[track_caller]
    pub fn output(&mut self, name: &str, shape: impl IntoExprs, dtype: DType) -> Buffer {
        self.tensor(name, shape.into_exprs(), dtype, Role::Output)
    }
    /// A tensor the kernel reads and writes.
    #[track_caller]
    pub fn inout(&mut self, name: &str, shape: impl IntoExprs, dtype: DType) -> Buffer {
        self.tensor(name, shape.into_exprs(), dtype, Role::InOut)
    }
    /// A scalar argument.
    #[track_caller]
    pub fn scalar(&mut self, name: &str, dtype: DType) -> Expr {
        let name = self.state.borrow_mut().unique(name);
        let v = Var::new(name, dtype);
        self.params.push(Param::Scalar(v.clone()));
        v.expr()
    }

    /// The launch: `grid` blocks (1 to 3 dims, x first) of `threads` threads each; `body`
    /// receives the tile scope and the block indices.
    #[track_caller]
    pub fn launch<const N: usize>(
        &mut self,
        grid: impl IntoExprs,
        threads: u32,
        body: impl FnOnce(&mut TileScope, [Expr; N]),
    ) {
        let span = Span::caller();
        if self.launch.is_some() {
            self.error(
                Diagnostic::new(DiagKind::InvalidArgument, span, "a kernel has one launch")
                    .help("write one `k.launch(..)` per kernel"),
            );
            return;
        }
        let grid = grid.into_exprs();
        if grid.len() != N || N == 0 || N > 3 {
            self.error(
                Diagnostic::new(
                    DiagKind::InvalidArgument,
                    span,
                    format!(
                        "the grid has {} dimensions but the body takes {} block indices",
                        grid.len(),
                        N
                    ),
                )
                .help(
                    "pass 1 to 3 grid extents and take as many block indices, e.g. `|t, [bx, by]|`",
                ),
            );
        }
        let names = ["bx", "by", "bz"];
        let block_vars: Vec<Var> = (0..N)
            .map(|i| {
                let name = self.state.borrow_mut().unique(names.get(i).unwrap_or(&"b"));
                Var::new(name, DType::I32)
            })
            .collect();
        let idx: [Expr; N] = std::array::from_fn(|i| block_vars[i].expr());
        let mut t = TileScope::new(self.state.clone(), threads);
        body(&mut t, idx);
        let body = Stmt::seq(t.finish(), span);
        self.launch = Some(Launch {
            grid: grid.into_iter().take(N).collect(),
            block_vars,
            threads,
            body,
        });
    }

    pub(crate) fn finish(self) -> (tl_ir::Kernel, Vec<Diagnostic>) {
        let mut errors = std::mem::take(&mut self.state.borrow_mut().errors);
        let attrs = self.state.borrow().attrs.clone();
        let launch = match self.launch {
            Some(l) => l,
            None => {
                errors.push(
                    Diagnostic::new(
                        DiagKind::InvalidArgument,
                        self.span,
                        format!("kernel `{}` has no launch", self.name),
                    )
                    .help("call `k.launch(grid, threads, |t, [bx]| { .. })` in the builder"),
                );
                Launch {
                    grid: vec![Expr::int(1)],
                    block_vars: vec![Var::new("bx", DType::I32)],
                    threads: 1,
                    body: Stmt::new(StmtKind::Seq(vec![]), self.span),
                }
            }
        };
        let k = tl_ir::Kernel {
            name: self.name,
            dims: self.dims,
            params: self.params,
            grid: launch.grid,
            block_vars: launch.block_vars,
            threads: launch.threads,
            body: launch.body,
            attrs,
        };
        (k, errors)
    }
}
