//! From a thread-level `Kernel` (and the launch's bound sizes) to a flat [`Program`].
//!
//! The compiler resolves every name once: symbolic sizes and scalar parameters become constants,
//! variables and `Var` buffers become registers, other buffers become indices into a table with
//! their shapes, and shared buffers get the offsets codegen gives them in the one dynamic
//! shared-memory block. Warp shuffles inside expressions are hoisted into their own
//! instructions, because a thread must be able to stop at a collective and resume after it.

use std::collections::HashMap;

use tl_ir::eval::{wrap_int, Value};
use tl_ir::{
    Buffer, DType, Expr, ExprKind, ForKind, Intrinsic, Kernel, Param, Scope, Span, Stmt, StmtKind,
    UnOp, Var,
};

use crate::bind::Bound;
use crate::bytecode::{BufInfo, Instr, MemRef, Program, PureFn, ShflKind, Site, E};
use crate::error::SimError;

/// The dtype arithmetic of a `dt`-typed expression happens in: narrow floats compute in f32 and
/// are rounded only by stores and explicit casts (as the generated C and CUDA do).
pub fn compute_dtype(dt: DType) -> DType {
    match dt {
        DType::F16 | DType::BF16 | DType::F8E4M3 | DType::F8E5M2 => DType::F32,
        d => d,
    }
}

/// The value a register or `Var` buffer holds before anything is stored: NaN for floats, a
/// recognizable garbage pattern for integers, so reading it shows up in results.
pub fn poison(dt: DType) -> Value {
    if dt.is_float() {
        Value::Float(f64::NAN)
    } else if dt.is_bool() {
        Value::Bool(true)
    } else {
        Value::Int(wrap_int(0x5EAD_BEEF_DEAD_BEEF_i64 as i128, dt))
    }
}

/// Codegen's placement of shared buffers: 16-byte aligned, 128-byte aligned from 128 bytes up,
/// 1024-byte aligned from 1 KiB up.
pub fn shared_align(bytes: usize) -> usize {
    match bytes {
        1024.. => 1024,
        128.. => 128,
        _ => 16,
    }
}

/// Limits that keep a malformed kernel from exhausting memory (GPUs allow 228 KiB of shared
/// memory per block and 512 KiB of local memory per thread; the simulator keeps a shadow cell
/// per shared byte and local memory for every thread of a block).
const MAX_SHARED_BYTES: usize = 1 << 20;
const MAX_LOCAL_BYTES: usize = 1 << 16;

fn align_up(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

struct Compiler<'a> {
    code: Vec<Instr>,
    sites: Vec<Site>,
    bufs: Vec<BufInfo>,
    buf_ids: HashMap<u64, u32>,
    regs: HashMap<u64, u32>,
    reg_init: Vec<Value>,
    consts: &'a HashMap<u64, Value>,
    span: Span,
    /// Depth of expression arms that are evaluated conditionally (a collective there cannot
    /// be hoisted).
    cond_depth: u32,
    local_bytes: usize,
    shared_bytes: usize,
    /// Threads per warp (wave) the kernel was lowered for.
    warp_size: u32,
    /// `KernelAttrs::tma_pitched_inputs`: TMA may read tensors whose rows are not whole
    /// 16-byte units (the runtime stages them pitched).
    tma_pitched: bool,
    /// The tensors the kernel stages itself: its TMA loads read their scratch.
    staged: Vec<tl_ir::StagedRows>,
    /// Some instruction waits on a flag.
    waits: bool,
    /// Global buffers in the symmetric heap.
    symmetric: Vec<u32>,
}

/// The kernel's warp (wave) size: `KernelAttrs::warp_size`, 32 when unset; 32 and 64 are
/// modelled.
pub fn warp_size(k: &Kernel) -> Result<u32, SimError> {
    match k.attrs.warp_size.unwrap_or(32) {
        ws @ (32 | 64) => Ok(ws),
        other => Err(SimError::Unsupported(format!(
            "kernel `{}` is lowered for warps of {other} threads (32 or 64)",
            k.name
        ))),
    }
}

pub fn compile(k: &Kernel, bound: &Bound) -> Result<Program, SimError> {
    let warp_size = warp_size(k)?;
    let mut c = Compiler {
        code: vec![],
        sites: vec![],
        bufs: vec![],
        buf_ids: HashMap::new(),
        regs: HashMap::new(),
        reg_init: vec![],
        consts: &bound.env,
        span: k.body.span,
        cond_depth: 0,
        local_bytes: 0,
        shared_bytes: 0,
        warp_size,
        tma_pitched: k.attrs.tma_pitched_inputs,
        staged: k.attrs.staged_rows.clone(),
        waits: false,
        symmetric: vec![],
    };
    let block_regs: Vec<u32> = k.block_vars.iter().map(|v| c.def_var(v)).collect();
    for (i, p) in k.params.iter().enumerate() {
        if let Param::Tensor { buffer, .. } = p {
            let shape = bound.shapes.get(i).cloned().flatten().ok_or_else(|| {
                SimError::BadArgs(format!("no shape for tensor `{}`", buffer.name()))
            })?;
            c.add_buf(buffer, shape, i)?;
        }
    }
    // The scratch and flags the runtime passes for each tensor the kernel stages itself
    // (`KernelAttrs::staged_rows`), after the parameters, two apiece (as `Abi::staged` has
    // them; `run_ranks_calls` allocates them).
    for (j, st) in k.attrs.staged_rows.iter().enumerate() {
        for (n, b) in [&st.scratch, &st.flags].into_iter().enumerate() {
            let shape = b
                .shape()
                .iter()
                .map(|e| {
                    tl_ir::eval::eval_int(e, &bound.env).map_err(|err| {
                        SimError::InvalidIr(format!("the extent {e} of `{}`: {err}", b.name()))
                    })
                })
                .collect::<Result<Vec<i64>, _>>()?;
            c.add_buf(b, shape, k.params.len() + 2 * j + n)?;
        }
    }
    if let Some(d) = &k.attrs.dist {
        for (b, _) in k.tensors() {
            if d.symmetric.contains(&b.id()) {
                let id = c.buf(b)?;
                c.symmetric.push(id);
            }
        }
    }
    c.allocs(&k.body)?;
    let mut written = vec![];
    {
        let mut ids = std::collections::HashSet::new();
        k.body.walk(&mut |s| {
            if let StmtKind::Store { buffer, .. } = &s.kind {
                ids.insert(buffer.id());
            }
            for e in s.exprs() {
                e.visit(&mut |x| {
                    if let ExprKind::Call(_, args) = x.kind() {
                        if let Some(ExprKind::Call(Intrinsic::AddressOf, a)) =
                            args.first().map(|a| a.kind())
                        {
                            if let Some(ExprKind::Load(b, _)) = a.first().map(|l| l.kind()) {
                                ids.insert(b.id());
                            }
                        }
                    }
                });
            }
        });
        let staged = k.attrs.staged_rows.iter().map(|st| &st.scratch);
        for b in k.tensors().map(|(b, _)| b).chain(staged) {
            if ids.contains(&b.id()) {
                written.push(c.buf(b)?);
            }
        }
    }
    c.stmt(&k.body)?;
    c.span = k.body.span;
    c.emit(Instr::Exit, "end of kernel".into());
    let grid_dependent = c
        .code
        .iter()
        .any(|i| matches!(i, Instr::GridDependencyWait));
    Ok(Program {
        code: c.code,
        sites: c.sites,
        bufs: c.bufs,
        nregs: c.reg_init.len(),
        reg_init: c.reg_init,
        block_regs,
        local_bytes: c.local_bytes,
        shared_bytes: c.shared_bytes,
        warp_size,
        waits: c.waits,
        symmetric: c.symmetric,
        cluster: k.attrs.cluster.map(|c| c.size),
        written,
        grid_dependent,
    })
}

impl Compiler<'_> {
    fn emit(&mut self, i: Instr, name: String) -> u32 {
        self.code.push(i);
        self.sites.push(Site {
            span: self.span,
            name,
        });
        (self.code.len() - 1) as u32
    }

    fn here(&self) -> u32 {
        self.code.len() as u32
    }

    fn patch(&mut self, at: u32, to: u32) {
        match self.code.get_mut(at as usize) {
            Some(Instr::Jump(t))
            | Some(Instr::BranchIfNot { target: t, .. })
            | Some(Instr::ForTest { exit: t, .. }) => *t = to,
            _ => {}
        }
    }

    fn new_reg(&mut self, init: Value) -> u32 {
        self.reg_init.push(init);
        (self.reg_init.len() - 1) as u32
    }

    /// The register of a variable (one per variable for the whole program: a `let` inside a
    /// loop reassigns it each iteration).
    fn def_var(&mut self, v: &Var) -> u32 {
        if let Some(&r) = self.regs.get(&v.id()) {
            return r;
        }
        let r = self.new_reg(Value::Int(0));
        self.regs.insert(v.id(), r);
        r
    }

    fn add_buf(&mut self, b: &Buffer, shape: Vec<i64>, base: usize) -> Result<u32, SimError> {
        let numel = shape
            .iter()
            .try_fold(1i64, |a, &d| a.checked_mul(d))
            .filter(|&n| n >= 0)
            .ok_or_else(|| SimError::InvalidIr(format!("`{}` has shape {shape:?}", b.name())))?;
        self.bufs.push(BufInfo {
            name: b.name().to_string(),
            dtype: b.dtype(),
            scope: b.scope(),
            shape,
            numel,
            base,
        });
        let id = (self.bufs.len() - 1) as u32;
        self.buf_ids.insert(b.id(), id);
        Ok(id)
    }

    /// Give every `Alloc` of the kernel its storage, in program order (codegen's order).
    fn allocs(&mut self, body: &Stmt) -> Result<(), SimError> {
        let mut found = vec![];
        body.walk(&mut |s| {
            if let StmtKind::Alloc(b) = &s.kind {
                found.push((b.clone(), s.span));
            }
        });
        for (b, span) in found {
            if self.buf_ids.contains_key(&b.id()) {
                continue;
            }
            let shape = b.const_shape().ok_or_else(|| {
                SimError::InvalidIr(format!(
                    "{} buffer `{}` at {span} has a non-constant shape",
                    b.scope(),
                    b.name()
                ))
            })?;
            if shape.iter().any(|&d| d <= 0) {
                return Err(SimError::InvalidIr(format!(
                    "`{}` at {span} has shape {shape:?}",
                    b.name()
                )));
            }
            let bytes = shape
                .iter()
                .try_fold(b.dtype().bytes() as i64, |a, &d| a.checked_mul(d))
                .filter(|&n| n <= MAX_SHARED_BYTES as i64)
                .ok_or_else(|| {
                    SimError::Unsupported(format!(
                        "{} buffer `{}` at {span} of shape {shape:?} is larger than the simulator allows",
                        b.scope(),
                        b.name()
                    ))
                })? as usize;
            match b.scope() {
                Scope::Shared => {
                    let off = align_up(self.shared_bytes, shared_align(bytes));
                    self.shared_bytes = off + bytes;
                    self.add_buf(&b, shape, off)?;
                }
                Scope::Local => {
                    let off = align_up(self.local_bytes, 16);
                    self.local_bytes = off + bytes;
                    self.add_buf(&b, shape, off)?;
                }
                Scope::Var => {
                    let r = self.new_reg(poison(b.dtype()));
                    self.add_buf(&b, shape, r as usize)?;
                }
                Scope::Fragment => {
                    return Err(SimError::InvalidIr(format!(
                        "fragment `{}` at {span} survived lowering to thread-level IR",
                        b.name()
                    )))
                }
                Scope::Global => {
                    return Err(SimError::InvalidIr(format!(
                        "global buffer `{}` allocated inside the kernel at {span}",
                        b.name()
                    )))
                }
            }
        }
        if self.shared_bytes > MAX_SHARED_BYTES {
            return Err(SimError::Unsupported(format!(
                "{} bytes of shared memory per block (the simulator allows {MAX_SHARED_BYTES})",
                self.shared_bytes
            )));
        }
        if self.local_bytes > MAX_LOCAL_BYTES {
            return Err(SimError::Unsupported(format!(
                "{} bytes of local memory per thread (the simulator allows {MAX_LOCAL_BYTES})",
                self.local_bytes
            )));
        }
        Ok(())
    }

    fn buf(&self, b: &Buffer) -> Result<u32, SimError> {
        self.buf_ids.get(&b.id()).copied().ok_or_else(|| {
            SimError::InvalidIr(format!(
                "buffer `{}` used at {} is neither a parameter nor allocated",
                b.name(),
                self.span
            ))
        })
    }

    fn memref(&mut self, b: &Buffer, idx: &[Expr]) -> Result<MemRef, SimError> {
        let buf = self.buf(b)?;
        let rank = self.bufs[buf as usize].shape.len();
        if idx.len() != 1 && idx.len() != rank {
            return Err(SimError::InvalidIr(format!(
                "`{}` has {rank} dimensions but is indexed with {} at {}",
                b.name(),
                idx.len(),
                self.span
            )));
        }
        let idx = idx.iter().map(|e| self.expr(e)).collect::<Result<_, _>>()?;
        Ok(MemRef { buf, idx })
    }

    /// A TMA copy's box (1 to 5 dims) and swizzle (0, 32, 64 or 128 bytes), loads and stores
    /// alike.
    fn tma_shape(&self, name: &str, box_dims: &[u32], swizzle: u32) -> Result<(), SimError> {
        if box_dims.is_empty() || box_dims.len() > 5 {
            return Err(SimError::InvalidIr(format!(
                "{name} at {} has a box of {} dims (1 to 5)",
                self.span,
                box_dims.len()
            )));
        }
        if !matches!(swizzle, 0 | 32 | 64 | 128) {
            return Err(SimError::InvalidIr(format!(
                "{name} at {}: swizzle {swizzle} (0, 32, 64 or 128 bytes)",
                self.span
            )));
        }
        Ok(())
    }

    /// `address_of(scratch[idx])` where `addr` is `address_of(t[idx])` of a tensor the kernel
    /// stages itself, and the tensor's row length.
    fn staged_scratch(&self, addr: &Expr) -> Option<(Expr, Expr)> {
        let ExprKind::Call(Intrinsic::AddressOf, a) = addr.kind() else {
            return None;
        };
        let ExprKind::Load(b, idx) = a.first()?.kind() else {
            return None;
        };
        let st = self.staged.iter().find(|st| st.tensor.id() == b.id())?;
        Some((
            Expr::call(
                Intrinsic::AddressOf,
                vec![Expr::load(&st.scratch, idx.clone())],
                addr.dtype(),
            ),
            st.tensor.shape().last()?.clone(),
        ))
    }

    /// `Call(AddressOf, [Load(buf, idx)])` as the element it names.
    fn address(&mut self, e: Option<&Expr>, what: &str) -> Result<MemRef, SimError> {
        if let Some(ExprKind::Call(Intrinsic::AddressOf, a)) = e.map(|e| e.kind()) {
            if let Some(ExprKind::Load(b, idx)) = a.first().map(|x| x.kind()) {
                if b.scope() == Scope::Var {
                    return Err(SimError::Unsupported(format!(
                        "the address of var `{}` ({what} at {})",
                        b.name(),
                        self.span
                    )));
                }
                return self.memref(b, idx);
            }
        }
        Err(SimError::InvalidIr(format!(
            "{what} at {} needs `address_of(buffer[index])`, got {}",
            self.span,
            e.map(|e| e.to_string()).unwrap_or_else(|| "nothing".into())
        )))
    }

    /// A memory-model or peer operand must be an element of a global buffer.
    fn global_operand(&self, m: &MemRef, what: &str) -> Result<(), SimError> {
        let info = &self.bufs[m.buf as usize];
        if info.scope != Scope::Global {
            return Err(SimError::InvalidIr(format!(
                "{what} at {} on {} buffer `{}` (global buffers only)",
                self.span, info.scope, info.name
            )));
        }
        Ok(())
    }

    /// A TMA copy's operands, or the arity error `need` gives.
    fn tma_operands<'e>(
        &self,
        op: &Intrinsic,
        args: &'e [Expr],
        name: &str,
    ) -> Result<tl_ir::TmaOperands<'e>, SimError> {
        op.tma_operands(args).ok_or_else(|| {
            SimError::InvalidIr(format!(
                "{name} takes {} arguments, got {} at {}",
                op.tma_arg_count().unwrap_or_default(),
                args.len(),
                self.span
            ))
        })
    }

    /// The destination, source and peer of a peer copy (`args`: the destination and source
    /// elements of global buffers, then the rank; with `put` the destination is the peer's).
    fn peer_copy_operands(
        &mut self,
        args: &[Expr],
        put: bool,
        name: &str,
    ) -> Result<(MemRef, MemRef, E), SimError> {
        let dst = self.address(args.first(), name)?;
        let src = self.address(args.get(1), name)?;
        self.global_operand(&dst, name)?;
        self.global_operand(&src, name)?;
        let remote = if put { dst.clone() } else { src.clone() };
        let rank = args
            .get(2)
            .ok_or_else(|| SimError::InvalidIr(format!("{name} without the peer's rank")))?;
        let peer = self.peer_operand(&remote, rank, name)?;
        Ok((dst, src, peer))
    }

    /// The rank operand of an access to `m`: `m` must be a symmetric buffer (its peers'
    /// copies exist only in the symmetric heap).
    fn peer_operand(&mut self, m: &MemRef, rank: &Expr, what: &str) -> Result<E, SimError> {
        if !self.symmetric.contains(&m.buf) {
            let info = &self.bufs[m.buf as usize];
            return Err(SimError::InvalidIr(format!(
                "{what} at {} names a rank for `{}`, which is not a symmetric buffer",
                self.span, info.name
            )));
        }
        self.expr(rank)
    }

    fn var_reg(&self, b: &Buffer) -> Result<u32, SimError> {
        let id = self.buf(b)?;
        Ok(self.bufs[id as usize].base as u32)
    }

    fn stmt(&mut self, s: &Stmt) -> Result<(), SimError> {
        self.span = s.span;
        match &s.kind {
            StmtKind::Seq(v) => {
                for x in v {
                    self.stmt(x)?;
                }
            }
            StmtKind::Let { var, value } => {
                let e = self.expr(value)?;
                let reg = self.def_var(var);
                self.emit(Instr::Set { reg, value: e }, format!("let {}", var.name()));
            }
            StmtKind::Alloc(_) => {}
            StmtKind::If { cond, then_, else_ } => {
                let c = self.expr(cond)?;
                let br = self.emit(Instr::BranchIfNot { cond: c, target: 0 }, "if".into());
                self.stmt(then_)?;
                match else_ {
                    Some(e) => {
                        self.span = s.span;
                        let j = self.emit(Instr::Jump(0), "else".into());
                        let h = self.here();
                        self.patch(br, h);
                        self.stmt(e)?;
                        let h = self.here();
                        self.patch(j, h);
                    }
                    None => {
                        let h = self.here();
                        self.patch(br, h);
                    }
                }
            }
            StmtKind::Store {
                buffer,
                indices,
                value,
            } => {
                let v = self.expr(value)?;
                if buffer.scope() == Scope::Var {
                    let reg = self.var_reg(buffer)?;
                    self.emit(
                        Instr::Set { reg, value: v },
                        format!("store `{}`", buffer.name()),
                    );
                } else {
                    let dst = self.memref(buffer, indices)?;
                    self.emit(
                        Instr::Store { dst, value: v },
                        format!("store `{}`", buffer.name()),
                    );
                }
            }
            StmtKind::For(l) => {
                if matches!(l.kind, ForKind::Parallel | ForKind::Pipelined { .. }) {
                    return Err(SimError::InvalidIr(format!(
                        "a {} loop at {} survived lowering to thread-level IR",
                        l.kind.name(),
                        s.span
                    )));
                }
                let min = self.expr(&l.min)?;
                let extent = self.expr(&l.extent)?;
                let var = self.def_var(&l.var);
                let end = self.new_reg(Value::Int(0));
                let name = format!("for {}", l.var.name());
                self.emit(
                    Instr::ForInit {
                        var,
                        end,
                        min,
                        extent,
                    },
                    name.clone(),
                );
                let test = self.emit(Instr::ForTest { var, end, exit: 0 }, name.clone());
                self.stmt(&l.body)?;
                self.span = s.span;
                self.emit(
                    Instr::ForStep {
                        var,
                        dtype: l.var.dtype(),
                        test,
                    },
                    name,
                );
                let h = self.here();
                self.patch(test, h);
            }
            StmtKind::Eval(e) => self.eval_stmt(e)?,
            StmtKind::Op(op) => {
                return Err(SimError::InvalidIr(format!(
                    "tile op `{}` at {} survived lowering to thread-level IR",
                    op.name(),
                    s.span
                )))
            }
            StmtKind::AnnotateLayout { buffer, .. } => {
                return Err(SimError::InvalidIr(format!(
                    "layout annotation of `{}` at {} survived lowering",
                    buffer.name(),
                    s.span
                )))
            }
        }
        Ok(())
    }

    fn eval_stmt(&mut self, e: &Expr) -> Result<(), SimError> {
        let ExprKind::Call(op, args) = e.kind() else {
            let x = self.expr(e)?;
            self.emit(Instr::Eval(x), "eval".into());
            return Ok(());
        };
        let name = op.name();
        let need = |n: usize| -> Result<(), SimError> {
            if args.len() == n {
                Ok(())
            } else {
                Err(SimError::InvalidIr(format!(
                    "{name} takes {n} arguments, got {} at {}",
                    args.len(),
                    self.span
                )))
            }
        };
        // The warp size an instruction's lane layout is defined for.
        let need_warp = |ws: u32| -> Result<(), SimError> {
            if self.warp_size == ws {
                Ok(())
            } else {
                Err(SimError::Unsupported(format!(
                    "{name} at {} needs {ws}-lane warps, but the kernel is lowered for {}-lane warps (KernelAttrs::warp_size)",
                    self.span, self.warp_size
                )))
            }
        };
        if matches!(
            op,
            Intrinsic::Ldmatrix { .. } | Intrinsic::MmaSync { .. } | Intrinsic::Wgmma(_)
        ) {
            need_warp(32)?;
        }
        if matches!(
            op,
            Intrinsic::Mfma(_)
                | Intrinsic::BufferLoadLds { .. }
                | Intrinsic::BufferLoad { .. }
                | Intrinsic::LdsReadTr16
        ) {
            need_warp(64)?;
        }
        let instr = match op {
            Intrinsic::SyncThreads => Instr::SyncThreads,
            Intrinsic::BarrierLds => Instr::BarrierLds,
            // With one commit group per buffer load (see `BufferLoadLds`), retiring all but
            // the newest `n` loads is retiring all but the newest `n` groups.
            Intrinsic::WaitVmcnt { n } => Instr::CpWait(*n),
            // Scheduling hints: no effect on what the program computes.
            Intrinsic::SchedBarrier { .. } => return Ok(()),
            Intrinsic::SetPrio { .. } => {
                for a in args {
                    self.address(Some(a), &name)?;
                }
                return Ok(());
            }
            Intrinsic::Mfma(m) => {
                need(4)?;
                let shape_ok = matches!((m.m, m.n, m.k), (16, 16, 16 | 32) | (32, 32, 8 | 16));
                if !shape_ok || !matches!(m.ab, DType::F16 | DType::BF16) {
                    return Err(SimError::Unsupported(format!(
                        "{name} at {} (16x16x16, 16x16x32, 32x32x8 or 32x32x16 with f16 or bf16 operands)",
                        self.span
                    )));
                }
                let d = self.address(args.first(), &name)?;
                let a = self.address(args.get(1), &name)?;
                let b = self.address(args.get(2), &name)?;
                let c = self.address(args.get(3), &name)?;
                Instr::Mfma { op: *m, d, a, b, c }
            }
            Intrinsic::BufferLoadLds { bytes } => {
                need(5)?;
                if !matches!(bytes, 4 | 8 | 16) {
                    return Err(SimError::Unsupported(format!(
                        "{name} of {bytes} bytes at {} (4, 8 or 16)",
                        self.span
                    )));
                }
                let base = self.address(args.first(), &name)?;
                let tensor = self.address(args.get(1), &name)?;
                let mut e = |i: usize| match args.get(i) {
                    Some(x) => self.expr(x),
                    None => Ok(E::Const(Value::Int(0))),
                };
                let voffset = e(2)?;
                let soffset = e(3)?;
                let pred = e(4)?;
                Instr::BufferLoadLds {
                    bytes: *bytes,
                    base,
                    tensor,
                    voffset,
                    soffset,
                    pred,
                }
            }
            Intrinsic::BufferLoad { bytes } => {
                need(5)?;
                if !matches!(bytes, 4 | 8 | 16) {
                    return Err(SimError::Unsupported(format!(
                        "{name} of {bytes} bytes at {} (4, 8 or 16)",
                        self.span
                    )));
                }
                let dst = self.address(args.first(), &name)?;
                let tensor = self.address(args.get(1), &name)?;
                let mut e = |i: usize| match args.get(i) {
                    Some(x) => self.expr(x),
                    None => Ok(E::Const(Value::Int(0))),
                };
                let voffset = e(2)?;
                let soffset = e(3)?;
                let pred = e(4)?;
                Instr::BufferLoad {
                    bytes: *bytes,
                    dst,
                    tensor,
                    voffset,
                    soffset,
                    pred,
                }
            }
            Intrinsic::SyncWarp => Instr::SyncWarp,
            Intrinsic::NamedBarrier { id, threads }
            | Intrinsic::NamedBarrierArrive { id, threads } => {
                if !(1..16).contains(id) || *threads == 0 || !threads.is_multiple_of(32) {
                    return Err(SimError::InvalidIr(format!(
                        "{name} at {}: a named barrier takes an id from 1 to 15 and a nonzero multiple of 32 threads",
                        self.span
                    )));
                }
                if matches!(op, Intrinsic::NamedBarrierArrive { .. }) {
                    Instr::NamedArrive {
                        id: *id,
                        threads: *threads,
                    }
                } else {
                    Instr::NamedBarrier {
                        id: *id,
                        threads: *threads,
                    }
                }
            }
            // Register allocation: no value changes, but `.inc` waits for the block's pool.
            Intrinsic::SetMaxNReg { inc, regs } => Instr::SetMaxNReg {
                inc: *inc,
                regs: *regs,
            },
            Intrinsic::CpAsyncCommit => Instr::CpCommit,
            Intrinsic::CpAsyncWait { n } => Instr::CpWait(*n),
            Intrinsic::CpAsync { bytes } => {
                need(3)?;
                if !matches!(bytes, 4 | 8 | 16) {
                    return Err(SimError::Unsupported(format!(
                        "cp.async of {bytes} bytes at {} (4, 8 or 16)",
                        self.span
                    )));
                }
                let dst = self.address(args.first(), &name)?;
                let src = self.address(args.get(1), &name)?;
                let pred = match args.get(2) {
                    Some(p) => self.expr(p)?,
                    None => E::Const(Value::Bool(true)),
                };
                Instr::CpAsync {
                    bytes: *bytes,
                    dst,
                    src,
                    pred,
                }
            }
            Intrinsic::VecCopy { lanes } => {
                if args.len() != 3 {
                    need(2)?;
                }
                let dst = self.address(args.first(), &name)?;
                let src = self.address(args.get(1), &name)?;
                let pred = match args.get(2) {
                    Some(p) => Some(self.expr(p)?),
                    None => None,
                };
                Instr::VecCopy {
                    lanes: *lanes,
                    dst,
                    src,
                    pred,
                }
            }
            Intrinsic::LoadWindow => {
                need(4)?;
                Instr::LoadWindow {
                    window: self.address(args.first(), &name)?,
                    tensor: self.address(args.get(1), &name)?,
                    off: self.expr(&args[2])?,
                    count: self.expr(&args[3])?,
                }
            }
            Intrinsic::ShiftedVecCopy => {
                need(2)?;
                Instr::ShiftedVecCopy {
                    dst: self.address(args.first(), &name)?,
                    src: self.address(args.get(1), &name)?,
                }
            }
            Intrinsic::StoreShifted => {
                need(4)?;
                Instr::StoreShifted {
                    dst: self.address(args.first(), &name)?,
                    window: self.address(args.get(1), &name)?,
                    tensor: self.address(args.get(2), &name)?,
                    off: self.expr(&args[3])?,
                }
            }
            Intrinsic::MemStore { sem, scope } | Intrinsic::MemRedAdd { sem, scope } => {
                if matches!(op, Intrinsic::MemRedAdd { .. }) && sem.acquires() {
                    return Err(SimError::InvalidIr(format!(
                        "{name} at {}: a reduction with acquire semantics (PTX `red` has none; use an atomic)",
                        self.span
                    )));
                }
                if args.len() != 2 && args.len() != 3 {
                    need(2)?;
                }
                let addr = self.address(args.first(), &name)?;
                self.global_operand(&addr, &name)?;
                let value = self.expr(&args[1])?;
                let peer = match args.get(2) {
                    Some(p) => Some(self.peer_operand(&addr, p, &name)?),
                    None => None,
                };
                Instr::MemStore {
                    addr,
                    value,
                    peer,
                    add: matches!(op, Intrinsic::MemRedAdd { .. }),
                    sem: *sem,
                    scope: *scope,
                }
            }
            Intrinsic::Fence { .. } => {
                need(0)?;
                Instr::Fence
            }
            Intrinsic::WaitUntil {
                cmp,
                scope,
                wrapping,
            } => {
                if args.len() != 2 && args.len() != 3 {
                    need(2)?;
                }
                let addr = self.address(args.first(), &name)?;
                self.global_operand(&addr, &name)?;
                let value = self.expr(&args[1])?;
                let peer = match args.get(2) {
                    Some(p) => Some(self.peer_operand(&addr, p, &name)?),
                    None => None,
                };
                self.waits = true;
                Instr::WaitUntil {
                    addr,
                    cmp: *cmp,
                    value,
                    peer,
                    scope: *scope,
                    wrapping: *wrapping,
                }
            }
            Intrinsic::PeerCopyWarp { put } => {
                need(5)?;
                let (dst, src, peer) = self.peer_copy_operands(args, *put, &name)?;
                Instr::PeerCopyWarp {
                    put: *put,
                    warp: self.warp_size,
                    dst,
                    src,
                    peer,
                    offset: self.expr(&args[3])?,
                    count: self.expr(&args[4])?,
                }
            }
            Intrinsic::PeerCopy { lanes, put, unroll } => {
                need(if *unroll > 1 { 6 } else { 4 })?;
                let (dst, src, peer) = self.peer_copy_operands(args, *put, &name)?;
                let offset = self.expr(&args[3])?;
                let batch = if *unroll > 1 {
                    Some((*unroll, self.expr(&args[4])?, self.expr(&args[5])?))
                } else {
                    None
                };
                Instr::PeerCopy {
                    lanes: *lanes,
                    put: *put,
                    dst,
                    src,
                    peer,
                    offset,
                    batch,
                }
            }
            Intrinsic::AtomicAdd | Intrinsic::AtomicMax | Intrinsic::AtomicMin => {
                need(2)?;
                let addr = self.address(args.first(), &name)?;
                let value = match args.get(1) {
                    Some(v) => self.expr(v)?,
                    None => E::Const(Value::Int(0)),
                };
                let kind = tl_ir::AtomicKind::of_intrinsic(op).unwrap_or_default();
                Instr::AtomicAdd { addr, value, kind }
            }
            Intrinsic::Ldmatrix { num, trans } => {
                need(2)?;
                if !matches!(num, 1 | 2 | 4) {
                    return Err(SimError::InvalidIr(format!(
                        "ldmatrix .x{num} at {} (x1, x2 or x4)",
                        self.span
                    )));
                }
                let src = self.address(args.first(), &name)?;
                let dst = self.address(args.get(1), &name)?;
                Instr::Ldmatrix {
                    num: *num,
                    trans: *trans,
                    src,
                    dst,
                }
            }
            Intrinsic::LdsReadTr16 => {
                need(2)?;
                let dst = self.address(args.first(), &name)?;
                let src = self.address(args.get(1), &name)?;
                Instr::LdsReadTr16 { src, dst }
            }
            Intrinsic::MmaSync { ab } => {
                need(4)?;
                if !matches!(ab, DType::F16 | DType::BF16) {
                    return Err(SimError::Unsupported(format!(
                        "mma.sync with {ab} operands at {} (f16 or bf16)",
                        self.span
                    )));
                }
                let d = self.address(args.first(), &name)?;
                let a = self.address(args.get(1), &name)?;
                let b = self.address(args.get(2), &name)?;
                let c = self.address(args.get(3), &name)?;
                Instr::Mma {
                    ab: *ab,
                    d,
                    a,
                    b,
                    c,
                }
            }
            Intrinsic::Wgmma(w) => {
                let (n, ab, bt) = (w.n, w.ab, w.b);
                let steps = w.steps.max(1) as usize;
                need(5 + 2 * (steps - 1))?;
                let sixteen = ab == bt && matches!(ab, DType::F16 | DType::BF16);
                let fp8 = ab.is_fp8() && bt.is_fp8() && !w.a_regs && !w.a_mn_major && !w.b_mn_major;
                if !(sixteen || fp8) || n == 0 || n % 8 != 0 || n > 256 {
                    return Err(SimError::Unsupported(format!(
                        "wgmma m64n{n}k{} with {ab} × {bt} operands at {} (f16 or bf16, or K-major fp8 from shared memory; N a multiple of 8 up to 256)",
                        w.k(),
                        self.span
                    )));
                }
                let d = self.address(args.first(), &name)?;
                let a = self.address(args.get(1), &name)?;
                let b = self.address(args.get(2), &name)?;
                let scale = match args.get(3) {
                    Some(e) => self.expr(e)?,
                    None => E::Const(Value::Int(1)),
                };
                let b_lbo = match args.get(4) {
                    Some(e) => self.expr(e)?,
                    None => E::Const(Value::Int(16)),
                };
                // Back-to-back steps are separate warp collectives here: the same arithmetic,
                // in the same order, with nothing in between. Later steps always accumulate.
                let mut slices = vec![(a, b, scale)];
                for s in 1..steps {
                    let a_s = self.address(args.get(3 + 2 * s), &name)?;
                    let b_s = self.address(args.get(4 + 2 * s), &name)?;
                    slices.push((a_s, b_s, E::Const(Value::Int(1))));
                }
                let step = |(a, b, scale): (MemRef, MemRef, E)| Instr::Wgmma {
                    op: w.single(),
                    d: d.clone(),
                    a,
                    b,
                    scale,
                    b_lbo: b_lbo.clone(),
                };
                let last = slices.pop().map(step);
                for sl in slices {
                    let i = step(sl);
                    self.emit(i, name.clone());
                }
                last.ok_or_else(|| SimError::InvalidIr(format!("{name} with no k steps")))?
            }
            Intrinsic::MbarrierInit { count } => {
                need(1)?;
                let bar = self.address(args.first(), &name)?;
                Instr::MbarInit { bar, count: *count }
            }
            // Orders the initialization for the async proxy: the simulator's TMA sees barrier
            // state directly (an uninitialized barrier is reported wherever it is used).
            Intrinsic::FenceMbarrierInit => return Ok(()),
            Intrinsic::MbarrierArriveExpectTx => {
                need(2)?;
                let bar = self.address(args.first(), &name)?;
                let tx = match args.get(1) {
                    Some(e) => self.expr(e)?,
                    None => E::Const(Value::Int(0)),
                };
                Instr::MbarArrive { bar, tx: Some(tx) }
            }
            Intrinsic::MbarrierArrive => {
                need(1)?;
                let bar = self.address(args.first(), &name)?;
                Instr::MbarArrive { bar, tx: None }
            }
            Intrinsic::MbarrierWait => {
                need(2)?;
                let bar = self.address(args.first(), &name)?;
                let parity = match args.get(1) {
                    Some(e) => self.expr(e)?,
                    None => E::Const(Value::Int(0)),
                };
                Instr::MbarWait { bar, parity }
            }
            Intrinsic::TmaLoad {
                box_dims, swizzle, ..
            } => {
                let o = self.tma_operands(op, args, &name)?;
                self.tma_shape(&name, box_dims, *swizzle)?;
                let dst = self.address(Some(o.shared), &name)?;
                // A tensor the kernel stages itself is read from its scratch, as the runtime's
                // tensor map does.
                let staged = self.staged_scratch(o.tensor);
                let tensor = match &staged {
                    Some((scratch, _)) => self.address(Some(scratch), &name)?,
                    None => self.address(Some(o.tensor), &name)?,
                };
                let width = match &staged {
                    Some((_, w)) => Some(self.expr(w)?),
                    None => None,
                };
                let bar = self.address(o.barrier, &name)?;
                let coords = o
                    .coords
                    .iter()
                    .map(|x| self.expr(x))
                    .collect::<Result<_, _>>()?;
                let mask = o.mask.map(|m| self.expr(m)).transpose()?;
                Instr::TmaLoad {
                    box_dims: box_dims.clone(),
                    swizzle: *swizzle,
                    pitched: self.tma_pitched,
                    dst,
                    tensor,
                    bar,
                    coords,
                    mask,
                    width,
                }
            }
            Intrinsic::MbarrierArriveCluster => {
                need(2)?;
                let bar = self.address(args.first(), &name)?;
                let rank = self.expr(&args[1])?;
                Instr::MbarArriveCluster { bar, rank }
            }
            Intrinsic::ClusterSync => Instr::ClusterSync,
            Intrinsic::TmaStore { box_dims, swizzle } => {
                let o = self.tma_operands(op, args, &name)?;
                self.tma_shape(&name, box_dims, *swizzle)?;
                let src = self.address(Some(o.shared), &name)?;
                let tensor = self.address(Some(o.tensor), &name)?;
                let coords = o
                    .coords
                    .iter()
                    .map(|x| self.expr(x))
                    .collect::<Result<_, _>>()?;
                Instr::TmaStore {
                    box_dims: box_dims.clone(),
                    swizzle: *swizzle,
                    src,
                    tensor,
                    coords,
                }
            }
            Intrinsic::BulkStore => {
                need(3)?;
                let dst = self.address(args.first(), &name)?;
                let src = self.address(args.get(1), &name)?;
                let bytes = self.expr(&args[2])?;
                Instr::BulkStore { dst, src, bytes }
            }
            Intrinsic::BulkCommit => Instr::BulkCommit,
            // A hint with no effect on memory; its operand must still name a global element.
            Intrinsic::PrefetchL2 => {
                need(1)?;
                let a = self.address(args.first(), &name)?;
                self.global_operand(&a, &name)?;
                Instr::Eval(E::Const(Value::Int(0)))
            }
            // The model writes global memory at issue, but keeps the bytes "in flight" until
            // the issuing thread's full wait (`Mem::tma_writes`).
            Intrinsic::BulkWait { n, read } => Instr::BulkWait { n: *n, read: *read },
            Intrinsic::WgmmaCommit => Instr::WgmmaCommit,
            Intrinsic::WgmmaWait { n, .. } => Instr::WgmmaWait(*n),
            Intrinsic::FenceProxyAsync => Instr::FenceProxyAsync,
            Intrinsic::FenceProxyAsyncGlobal => Instr::FenceProxyAsyncGlobal,
            Intrinsic::LaunchDependents => Instr::LaunchDependents,
            Intrinsic::GridDependencyWait => Instr::GridDependencyWait,
            Intrinsic::Print { msg } => {
                need(1)?;
                Instr::Print {
                    msg: msg.clone(),
                    value: self.expr(&args[0])?,
                }
            }
            // Register ordering around wgmma: nothing to model in an interpreter that keeps
            // every register access in program order (results land at the wait instead).
            Intrinsic::WgmmaFence => return Ok(()),
            Intrinsic::ShflXor { .. } | Intrinsic::ShflDown { .. } | Intrinsic::ShflIdx { .. } => {
                // A shuffle whose result is dropped still takes part in the collective.
                let _ = self.expr(e)?;
                return Ok(());
            }
            Intrinsic::Extern { name, pure: false } => {
                return Err(SimError::Unsupported(format!(
                    "the device function `{name}` with side effects at {}",
                    self.span
                )))
            }
            _ => Instr::Eval(self.expr(e)?),
        };
        self.emit(instr, name);
        Ok(())
    }

    fn expr(&mut self, e: &Expr) -> Result<E, SimError> {
        let dt = e.dtype();
        Ok(match e.kind() {
            ExprKind::Int(v) => E::Const(if dt.is_float() {
                Value::Float(*v as f64)
            } else if dt.is_bool() {
                Value::Bool(*v != 0)
            } else {
                Value::Int(*v)
            }),
            ExprKind::Float(v) => E::Const(if dt.is_float() {
                Value::Float(*v)
            } else {
                tl_ir::eval::apply_cast(Value::Float(*v), dt)
            }),
            ExprKind::Bool(b) => E::Const(Value::Bool(*b)),
            ExprKind::Var(v) => {
                if let Some(c) = self.consts.get(&v.id()) {
                    E::Const(*c)
                } else if let Some(&r) = self.regs.get(&v.id()) {
                    E::Reg(r)
                } else {
                    return Err(SimError::InvalidIr(format!(
                        "variable `{}` at {} has no definition before its use",
                        v.name(),
                        self.span
                    )));
                }
            }
            ExprKind::Bin(op, a, b) => {
                let t = compute_dtype(a.dtype());
                if t.is_float() && op.is_bitwise() {
                    return Err(SimError::InvalidIr(format!(
                        "bitwise {} on {} at {}",
                        op.symbol(),
                        a.dtype(),
                        self.span
                    )));
                }
                E::Bin(*op, t, Box::new((self.expr(a)?, self.expr(b)?)))
            }
            ExprKind::Cmp(op, a, b) => E::Cmp(
                *op,
                compute_dtype(a.dtype()),
                Box::new((self.expr(a)?, self.expr(b)?)),
            ),
            ExprKind::And(a, b) => {
                let x = self.expr(a)?;
                let y = self.conditional(b)?;
                E::And(Box::new((x, y)))
            }
            ExprKind::Or(a, b) => {
                let x = self.expr(a)?;
                let y = self.conditional(b)?;
                E::Or(Box::new((x, y)))
            }
            ExprKind::Unary(op, a) => E::Un(*op, compute_dtype(dt), Box::new(self.expr(a)?)),
            ExprKind::Select(c, a, b) => {
                E::Select(Box::new((self.expr(c)?, self.expr(a)?, self.expr(b)?)))
            }
            ExprKind::IfThenElse(c, a, b) => {
                let c = self.expr(c)?;
                let a = self.conditional(a)?;
                let b = self.conditional(b)?;
                E::IfThenElse(Box::new((c, a, b)))
            }
            ExprKind::Cast(a) => E::Cast(dt, Box::new(self.expr(a)?)),
            ExprKind::Load(b, idx) => {
                if b.scope() == Scope::Var {
                    E::Reg(self.var_reg(b)?)
                } else {
                    E::Load(Box::new(self.memref(b, idx)?))
                }
            }
            ExprKind::Call(op, args) => self.call(op, args, dt)?,
        })
    }

    fn conditional(&mut self, e: &Expr) -> Result<E, SimError> {
        self.cond_depth += 1;
        let r = self.expr(e);
        self.cond_depth -= 1;
        r
    }

    fn call(&mut self, op: &Intrinsic, args: &[Expr], dt: DType) -> Result<E, SimError> {
        let shfl = match op {
            Intrinsic::ThreadIdx => return Ok(E::ThreadIdx),
            Intrinsic::WaveIdx => return Ok(E::WaveIdx),
            Intrinsic::ClusterCtaRank => return Ok(E::ClusterCtaRank),
            Intrinsic::MemAtomAdd { sem, scope } => {
                let name = op.name();
                if args.len() != 2 && args.len() != 3 {
                    return Err(SimError::InvalidIr(format!(
                        "{name} takes 2 or 3 arguments, got {} at {}",
                        args.len(),
                        self.span
                    )));
                }
                let m = self.address(args.first(), &name)?;
                self.global_operand(&m, &name)?;
                let v = self.expr(&args[1])?;
                let peer = match args.get(2) {
                    Some(p) => Some(self.peer_operand(&m, p, &name)?),
                    None => None,
                };
                return Ok(E::MemAtomAdd(Box::new((m, v, peer)), *sem, *scope));
            }
            Intrinsic::MemLoad { sem, scope } => {
                let name = op.name();
                let m = self.address(args.first(), &name)?;
                self.global_operand(&m, &name)?;
                let peer = match args.get(1) {
                    Some(p) => Some(Box::new(self.peer_operand(&m, p, &name)?)),
                    None => None,
                };
                return Ok(E::MemLoad(Box::new(m), peer, *sem, *scope));
            }
            Intrinsic::ShflXor { width } => (ShflKind::Xor, *width),
            Intrinsic::ShflDown { width } => (ShflKind::Down, *width),
            Intrinsic::ShflIdx { width } => (ShflKind::Idx, *width),
            Intrinsic::Extern { name, pure: true } => {
                let f = pure_fn(name, args.len()).ok_or_else(|| {
                    SimError::Unsupported(format!(
                        "the device function `{name}` at {} (the simulator knows a few math functions only)",
                        self.span
                    ))
                })?;
                let a = args
                    .iter()
                    .map(|x| self.expr(x))
                    .collect::<Result<_, _>>()?;
                return Ok(E::Pure(f, compute_dtype(dt), a));
            }
            other => {
                return Err(SimError::Unsupported(format!(
                    "`{}` inside an expression at {}",
                    other.name(),
                    self.span
                )))
            }
        };
        let (kind, width) = shfl;
        if !width.is_power_of_two() || width > self.warp_size {
            return Err(SimError::InvalidIr(format!(
                "shuffle width {width} at {} (a power of two up to the warp size, {})",
                self.span, self.warp_size
            )));
        }
        if self.cond_depth > 0 {
            return Err(SimError::Unsupported(format!(
                "a warp shuffle inside a conditionally evaluated operand at {}",
                self.span
            )));
        }
        if args.len() != 2 {
            return Err(SimError::InvalidIr(format!(
                "{} takes 2 arguments at {}",
                op.name(),
                self.span
            )));
        }
        let value = self.expr(&args[0])?;
        let arg = self.expr(&args[1])?;
        let dst = self.new_reg(Value::Int(0));
        self.emit(
            Instr::Shfl {
                kind,
                width,
                dst,
                value,
                arg,
            },
            op.name(),
        );
        Ok(E::Reg(dst))
    }
}

/// The pure device functions the simulator evaluates (a small table; anything else is
/// reported as unsupported rather than guessed).
fn pure_fn(name: &str, nargs: usize) -> Option<PureFn> {
    let un = |op| Some(PureFn::Unary(op));
    match (name, nargs) {
        ("expf" | "__expf" | "exp", 1) => un(UnOp::Exp),
        ("exp2f" | "exp2", 1) => un(UnOp::Exp2),
        ("logf" | "__logf" | "log", 1) => un(UnOp::Log),
        ("log2f" | "__log2f" | "log2", 1) => un(UnOp::Log2),
        ("sqrtf" | "sqrt", 1) => un(UnOp::Sqrt),
        ("rsqrtf" | "rsqrt", 1) => un(UnOp::Rsqrt),
        ("tanhf" | "tanh", 1) => un(UnOp::Tanh),
        ("fabsf" | "fabs", 1) => un(UnOp::Abs),
        ("floorf" | "floor", 1) => un(UnOp::Floor),
        ("ceilf" | "ceil", 1) => un(UnOp::Ceil),
        ("erff" | "erf", 1) => un(UnOp::Erf),
        ("sinf" | "__sinf" | "sin", 1) => un(UnOp::Sin),
        ("cosf" | "__cosf" | "cos", 1) => un(UnOp::Cos),
        ("fminf" | "fmin", 2) => Some(PureFn::Min),
        ("fmaxf" | "fmax", 2) => Some(PureFn::Max),
        ("__fdividef", 2) => Some(PureFn::Div),
        _ => None,
    }
}
