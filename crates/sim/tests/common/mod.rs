//! A tiny builder for thread-level kernels in tests: statements remember the test's source line
//! (so tests can check that reports name it), and intrinsics have short helpers.
#![allow(dead_code)]

use tl_ir::{
    Buffer, DType, Expr, For, ForKind, Intrinsic, Kernel, KernelAttrs, Param, Role, Scope, Span,
    Stmt, StmtKind, Var,
};

pub use tl_sim::{run, SimArg, SimError, SimOptions};

pub fn tid() -> Expr {
    Expr::call(Intrinsic::ThreadIdx, vec![], DType::I32)
}

/// `wave_idx()`: the calling thread's warp (wave) in the block.
pub fn wave_idx() -> Expr {
    Expr::call(Intrinsic::WaveIdx, vec![], DType::I32)
}

pub fn addr(buf: &Buffer, idx: impl Into<Expr>) -> Expr {
    Expr::call(
        Intrinsic::AddressOf,
        vec![buf.load(vec![idx.into()])],
        buf.dtype(),
    )
}

/// The address of a multi-dimensional element.
#[allow(dead_code)]
pub fn addr_nd(buf: &Buffer, idx: Vec<Expr>) -> Expr {
    Expr::call(Intrinsic::AddressOf, vec![buf.load(idx)], buf.dtype())
}

pub fn shfl_xor(v: impl Into<Expr>, mask: impl Into<Expr>, width: u32) -> Expr {
    let v = v.into();
    let dt = v.dtype();
    Expr::call(Intrinsic::ShflXor { width }, vec![v, mask.into()], dt)
}
pub fn shfl_down(v: impl Into<Expr>, delta: impl Into<Expr>, width: u32) -> Expr {
    let v = v.into();
    let dt = v.dtype();
    Expr::call(Intrinsic::ShflDown { width }, vec![v, delta.into()], dt)
}
pub fn shfl_idx(v: impl Into<Expr>, src: impl Into<Expr>, width: u32) -> Expr {
    let v = v.into();
    let dt = v.dtype();
    Expr::call(Intrinsic::ShflIdx { width }, vec![v, src.into()], dt)
}

/// A global tensor parameter.
pub fn global(name: &str, shape: Vec<Expr>, dtype: DType) -> Buffer {
    Buffer::new(name, shape, dtype, Scope::Global, Span::UNKNOWN)
}

/// Collects statements; every method records the caller's line as the statement's span.
pub struct B {
    stack: Vec<Vec<Stmt>>,
}

impl Default for B {
    fn default() -> Self {
        B {
            stack: vec![vec![]],
        }
    }
}

impl B {
    fn push(&mut self, kind: StmtKind, span: Span) {
        if let Some(top) = self.stack.last_mut() {
            top.push(Stmt::new(kind, span));
        }
    }

    fn block(&mut self, f: impl FnOnce(&mut B)) -> Stmt {
        self.stack.push(vec![]);
        f(self);
        Stmt::seq(self.stack.pop().unwrap_or_default(), Span::UNKNOWN)
    }

    /// The source line of the statement pushed last (for tests that check reports name it).
    pub fn last_line(&self) -> u32 {
        self.stack
            .last()
            .and_then(|v| v.last())
            .map(|s| s.span.line)
            .unwrap_or(0)
    }

    pub fn finish(mut self) -> Stmt {
        Stmt::seq(self.stack.pop().unwrap_or_default(), Span::UNKNOWN)
    }

    #[track_caller]
    pub fn alloc(&mut self, name: &str, shape: &[i64], dtype: DType, scope: Scope) -> Buffer {
        let span = Span::caller();
        let b = Buffer::new(
            name,
            shape.iter().map(|&d| Expr::int(d)).collect(),
            dtype,
            scope,
            span,
        );
        self.push(StmtKind::Alloc(b.clone()), span);
        b
    }

    #[track_caller]
    pub fn shared(&mut self, name: &str, shape: &[i64], dtype: DType) -> Buffer {
        self.alloc(name, shape, dtype, Scope::Shared)
    }

    #[track_caller]
    pub fn local(&mut self, name: &str, shape: &[i64], dtype: DType) -> Buffer {
        self.alloc(name, shape, dtype, Scope::Local)
    }

    #[track_caller]
    pub fn var(&mut self, name: &str, dtype: DType) -> Buffer {
        self.alloc(name, &[1], dtype, Scope::Var)
    }

    #[track_caller]
    pub fn let_(&mut self, name: &str, value: impl Into<Expr>) -> Expr {
        let value = value.into();
        let v = Var::new(name, value.dtype());
        self.push(
            StmtKind::Let {
                var: v.clone(),
                value,
            },
            Span::caller(),
        );
        v.expr()
    }

    /// `buf[idx] = value` (value cast to the buffer's dtype).
    #[track_caller]
    pub fn store(&mut self, buf: &Buffer, idx: impl Into<Expr>, value: impl Into<Expr>) {
        self.store_nd(buf, vec![idx.into()], value)
    }

    #[track_caller]
    pub fn store_nd(&mut self, buf: &Buffer, indices: Vec<Expr>, value: impl Into<Expr>) {
        let value = value.into().cast(buf.dtype());
        self.push(
            StmtKind::Store {
                buffer: buf.clone(),
                indices,
                value,
            },
            Span::caller(),
        );
    }

    #[track_caller]
    pub fn for_kind(
        &mut self,
        name: &str,
        min: impl Into<Expr>,
        extent: impl Into<Expr>,
        kind: ForKind,
        f: impl FnOnce(&mut B, Expr),
    ) {
        let span = Span::caller();
        let var = Var::new(name, DType::I32);
        let e = var.expr();
        let body = self.block(|b| f(b, e));
        self.push(
            StmtKind::For(Box::new(For {
                var,
                min: min.into(),
                extent: extent.into(),
                kind,
                body,
            })),
            span,
        );
    }

    #[track_caller]
    pub fn for_(&mut self, name: &str, extent: impl Into<Expr>, f: impl FnOnce(&mut B, Expr)) {
        self.for_kind(name, 0, extent, ForKind::Serial, f)
    }

    #[track_caller]
    pub fn if_(&mut self, cond: Expr, f: impl FnOnce(&mut B)) {
        let span = Span::caller();
        let then_ = self.block(f);
        self.push(
            StmtKind::If {
                cond,
                then_: Box::new(then_),
                else_: None,
            },
            span,
        );
    }

    #[track_caller]
    pub fn if_else(&mut self, cond: Expr, f: impl FnOnce(&mut B), g: impl FnOnce(&mut B)) {
        let span = Span::caller();
        let then_ = self.block(f);
        let else_ = self.block(g);
        self.push(
            StmtKind::If {
                cond,
                then_: Box::new(then_),
                else_: Some(Box::new(else_)),
            },
            span,
        );
    }

    #[track_caller]
    pub fn call(&mut self, op: Intrinsic, args: Vec<Expr>) {
        self.push(
            StmtKind::Eval(Expr::call(op, args, DType::I32)),
            Span::caller(),
        );
    }

    #[track_caller]
    pub fn sync(&mut self) {
        self.call(Intrinsic::SyncThreads, vec![]);
    }
    #[track_caller]
    pub fn sync_warp(&mut self) {
        self.call(Intrinsic::SyncWarp, vec![]);
    }
    #[track_caller]
    pub fn cp_async(&mut self, bytes: u32, dst: Expr, src: Expr, pred: impl Into<Expr>) {
        self.call(Intrinsic::CpAsync { bytes }, vec![dst, src, pred.into()]);
    }
    #[track_caller]
    pub fn commit(&mut self) {
        self.call(Intrinsic::CpAsyncCommit, vec![]);
    }
    #[track_caller]
    pub fn wait(&mut self, n: u32) {
        self.call(Intrinsic::CpAsyncWait { n }, vec![]);
    }
    #[track_caller]
    pub fn ldmatrix(&mut self, num: u32, trans: bool, smem: Expr, dst: Expr) {
        self.call(Intrinsic::Ldmatrix { num, trans }, vec![smem, dst]);
    }
    #[track_caller]
    pub fn mma(&mut self, ab: DType, d: Expr, a: Expr, b: Expr, c: Expr) {
        self.call(Intrinsic::MmaSync { ab }, vec![d, a, b, c]);
    }
    #[track_caller]
    pub fn vec_copy(&mut self, lanes: u32, dst: Expr, src: Expr) {
        self.call(Intrinsic::VecCopy { lanes }, vec![dst, src]);
    }
    /// A vector copy that zero-fills the destination instead of reading when `pred` is false.
    #[track_caller]
    pub fn vec_copy_pred(&mut self, lanes: u32, dst: Expr, src: Expr, pred: Expr) {
        self.call(Intrinsic::VecCopy { lanes }, vec![dst, src, pred]);
    }
    #[track_caller]
    pub fn atomic_add(&mut self, dst: Expr, value: impl Into<Expr>) {
        self.call(Intrinsic::AtomicAdd, vec![dst, value.into()]);
    }
    /// AMD `v_mfma_f32_{m}x{n}x{k}_{ab}` (D, A, B, C addresses).
    #[track_caller]
    pub fn mfma(&mut self, op: tl_ir::MfmaOp, d: Expr, a: Expr, b: Expr, c: Expr) {
        self.call(Intrinsic::Mfma(op), vec![d, a, b, c]);
    }
    /// AMD `buffer_load … lds` of `bytes` per lane.
    #[track_caller]
    pub fn buffer_load_lds(
        &mut self,
        bytes: u32,
        base: Expr,
        tensor: Expr,
        voffset: impl Into<Expr>,
        soffset: impl Into<Expr>,
        pred: impl Into<Expr>,
    ) {
        self.call(
            Intrinsic::BufferLoadLds { bytes },
            vec![base, tensor, voffset.into(), soffset.into(), pred.into()],
        );
    }
    #[track_caller]
    pub fn buffer_load(
        &mut self,
        bytes: u32,
        dst: Expr,
        tensor: Expr,
        voffset: impl Into<Expr>,
        soffset: impl Into<Expr>,
        pred: impl Into<Expr>,
    ) {
        self.call(
            Intrinsic::BufferLoad { bytes },
            vec![dst, tensor, voffset.into(), soffset.into(), pred.into()],
        );
    }
    #[track_caller]
    pub fn wait_vmcnt(&mut self, n: u32) {
        self.call(Intrinsic::WaitVmcnt { n }, vec![]);
    }
    #[track_caller]
    pub fn barrier_lds(&mut self) {
        self.call(Intrinsic::BarrierLds, vec![]);
    }
}

/// The kernel lowered for 64-lane AMD waves.
pub fn wave64(mut k: Kernel) -> Kernel {
    k.attrs.warp_size = Some(64);
    k
}

/// A kernel with the given parameters, grid and threads; `f` builds the body from the block
/// index expressions.
pub fn kernel(
    name: &str,
    dims: Vec<Var>,
    params: Vec<Param>,
    grid: Vec<Expr>,
    threads: u32,
    f: impl FnOnce(&mut B, &[Expr]),
) -> Kernel {
    let block_vars: Vec<Var> = ["bx", "by", "bz"]
        .iter()
        .take(grid.len())
        .map(|n| Var::new(*n, DType::I32))
        .collect();
    let idx: Vec<Expr> = block_vars.iter().map(|v| v.expr()).collect();
    let mut b = B::default();
    f(&mut b, &idx);
    Kernel {
        name: name.into(),
        dims,
        params,
        grid,
        block_vars,
        threads,
        body: b.finish(),
        attrs: KernelAttrs::default(),
    }
}

pub fn input(buf: &Buffer) -> Param {
    Param::Tensor {
        buffer: buf.clone(),
        role: Role::Input,
    }
}
pub fn output(buf: &Buffer) -> Param {
    Param::Tensor {
        buffer: buf.clone(),
        role: Role::Output,
    }
}

pub fn opts() -> SimOptions {
    SimOptions::default()
}

pub fn unchecked() -> SimOptions {
    SimOptions {
        check_races: false,
        check_uninit: false,
        ..SimOptions::default()
    }
}

/// A deterministic pseudo-random sequence in [-1, 1) (no rand dependency needed).
pub fn noise(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) as f64 / (1u64 << 31) as f64) * 2.0 - 1.0
        })
        .collect()
}
