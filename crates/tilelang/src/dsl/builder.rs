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
    /// The source location of the next calls, set by front ends that are not Rust (the Python
    /// one traces a function's AST and knows the user's line before each call); `None` means
    /// the Rust caller's location (`#[track_caller]`).
    pub span: Option<Span>,
    /// `peer_tables()` was asked for: `finish` adds a table parameter per symmetric buffer.
    pub peer_tables: bool,
}

/// The location to record: the front end's, when it set one, else the Rust caller's. Must be
/// called from a `#[track_caller]` function for the latter to be the user's line.
#[track_caller]
pub(crate) fn here(state: &Shared) -> Span {
    match state.borrow().span {
        Some(s) => s,
        None => Span::caller(),
    }
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

/// A launch whose body is being built: made by [`KernelBuilder::open_launch`], filled through
/// the [`TileScope`] it returns, finished by [`KernelBuilder::close_launch`].
pub struct OpenLaunch {
    grid: Vec<Expr>,
    block_vars: Vec<Var>,
    threads: u32,
    span: Span,
}

impl OpenLaunch {
    /// The block indices, x first.
    pub fn block_indices(&self) -> Vec<Expr> {
        self.block_vars.iter().map(Var::expr).collect()
    }
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
                    self.here(),
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
        let b = Buffer::new(name, shape, dtype, Scope::Global, self.here());
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
        let names = ["bx", "by", "bz"];
        let Some((open, mut t)) = self.open_launch(grid, threads, &names[..N.min(3)]) else {
            return;
        };
        let vars = open.block_indices();
        let idx: [Expr; N] =
            std::array::from_fn(|i| vars.get(i).cloned().unwrap_or_else(|| Expr::int(0)));
        body(&mut t, idx);
        self.close_launch(open, t);
    }

    /// Start the launch (the imperative form of [`launch`](Self::launch)): `grid` blocks of
    /// `threads` threads, with one block index per name in `names` (which must match the
    /// grid's rank, 1 to 3). Returns the launch and the scope its body is built in; `None`
    /// (with a diagnostic recorded) when the kernel already has a launch.
    #[track_caller]
    pub fn open_launch(
        &mut self,
        grid: impl IntoExprs,
        threads: u32,
        names: &[&str],
    ) -> Option<(OpenLaunch, TileScope)> {
        let span = self.here();
        if self.launch.is_some() {
            self.error(
                Diagnostic::new(DiagKind::InvalidArgument, span, "a kernel has one launch")
                    .help("write one `k.launch(..)` per kernel"),
            );
            return None;
        }
        let grid = grid.into_exprs();
        let n = names.len();
        if grid.len() != n || n == 0 || n > 3 {
            self.error(
                Diagnostic::new(
                    DiagKind::InvalidArgument,
                    span,
                    format!(
                        "the grid has {} dimensions but the body takes {} block indices",
                        grid.len(),
                        n
                    ),
                )
                .help(
                    "pass 1 to 3 grid extents and take as many block indices, e.g. `|t, [bx, by]|`",
                ),
            );
        }
        let block_vars: Vec<Var> = names
            .iter()
            .map(|name| Var::new(self.state.borrow_mut().unique(name), DType::I32))
            .collect();
        let open = OpenLaunch {
            grid: grid.into_iter().take(n).collect(),
            block_vars,
            threads,
            span,
        };
        Some((open, TileScope::new(self.state.clone(), threads)))
    }

    /// Finish a launch started with [`open_launch`](Self::open_launch) with its body.
    pub fn close_launch(&mut self, open: OpenLaunch, body: TileScope) {
        let body = Stmt::seq(body.finish(), open.span);
        self.launch = Some(Launch {
            grid: open.grid,
            block_vars: open.block_vars,
            threads: open.threads,
            body,
        });
    }

    /// Record the calls that follow at `span` instead of at the Rust caller's line (`None`
    /// goes back to that): for front ends in other languages, whose users' lines are not Rust
    /// locations. Applies to this builder and every scope made from it.
    pub fn set_span(&self, span: Option<Span>) {
        self.state.borrow_mut().span = span;
    }

    #[track_caller]
    fn here(&self) -> Span {
        here(&self.state)
    }

    /// Adopt a symbolic size made outside the builder (a front end that declares sizes before
    /// the kernel, as Python's `T.symbolic("m")` does). Adopting the same variable twice is a
    /// no-op; a different variable with an existing size's name is a diagnostic, as in
    /// [`dim`](Self::dim).
    #[track_caller]
    pub fn dim_var(&mut self, v: &Var) -> Expr {
        if self.dims.iter().any(|d| d == v) {
            return v.expr();
        }
        if self.dims.iter().any(|d| d.name() == v.name())
            || !self.state.borrow_mut().names.insert(v.name().to_string())
        {
            let span = self.here();
            self.error(
                Diagnostic::new(
                    DiagKind::InvalidArgument,
                    span,
                    format!("symbolic size `{}` is declared twice", v.name()),
                )
                .help("declare each size once and reuse the expression"),
            );
            return v.expr();
        }
        if v.dtype() != DType::I32 {
            let span = self.here();
            self.error(
                Diagnostic::new(
                    DiagKind::DTypeMismatch,
                    span,
                    format!("symbolic size `{}` is {}, not i32", v.name(), v.dtype()),
                )
                .help("symbolic sizes are 32-bit integers"),
            );
        }
        self.dims.push(v.clone());
        v.expr()
    }

    /// A tensor parameter with a role, for front ends that pick the role at run time.
    #[track_caller]
    pub fn param(&mut self, name: &str, shape: impl IntoExprs, dtype: DType, role: Role) -> Buffer {
        self.tensor(name, shape.into_exprs(), dtype, role)
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
        let mut params = self.params;
        let dims = self.dims;
        let tables = self.state.borrow().peer_tables;
        if let Some(d) = attrs.dist.as_ref() {
            for v in [&d.rank, &d.num_ranks, &d.heap_stride] {
                params.push(Param::Scalar(v.clone()));
            }
        }
        let mut k = tl_ir::Kernel {
            name: self.name,
            dims,
            params,
            grid: launch.grid,
            block_vars: launch.block_vars,
            threads: launch.threads,
            body: launch.body,
            attrs,
        };
        if tables {
            super::dist::add_peer_tables(&mut k);
        }
        (k, errors)
    }
}
