//! Intrinsics as PTX: each is one instruction (or a few) of the ISA, the same ones the CUDA
//! header wraps in inline assembly.

use tl_ir::{Buffer, DType, Expr, ExprKind, Intrinsic, Scope, WgmmaOp};

use super::emit::{Addr, Emitter, R};
use super::regs::{Class, Val};

pub(crate) mod shmem;
mod window;

/// The memory scopes an intrinsic's address operand may name (`Emitter::mem_arg`).
const SHARED: &[Scope] = &[Scope::Shared];
const GLOBAL: &[Scope] = &[Scope::Global];

/// The buffer and indices of an `address_of(buf[idx])` argument.
fn target(e: Option<&Expr>) -> R<(&Buffer, &[Expr])> {
    match e.map(|e| e.kind()) {
        Some(ExprKind::Call(Intrinsic::AddressOf, a)) => match a.first().map(|l| l.kind()) {
            Some(ExprKind::Load(b, idx)) => Ok((b, idx.as_slice())),
            _ => Err("address_of of something other than an element".into()),
        },
        _ => Err("an intrinsic argument that is not `address_of(buffer[index])`".into()),
    }
}

/// One side of a vector copy: memory, or registers of a per-thread array.
enum Side {
    Mem(Addr),
    Regs(Vec<String>),
}

impl Emitter {
    /// `wgmma.wait_group n`. ptxas's scheduler raises a wait as early as its basic block
    /// allows (nothing it can see ties the wait to the code before it), so a wait the program
    /// placed after work meant to run beside the wgmmas — attention's exponentials and row
    /// sums of step j while P·V of step j − 1 is on the tensor cores — ended up before most of
    /// that work, and the warps sat at the wait with the work still to do (ncu, d128
    /// attention: every `MUFU.EX2` after the `WARPGROUP.DEPBAR`). A `pinned` wait starts a
    /// basic block of its own, which ptxas does not move it out of: a branch that is never
    /// taken (a launch's dynamic shared memory is never 4 GiB; ptxas cannot know that) over a
    /// `nanosleep`. A label alone, or a fence, does not hold it (tried).
    fn wgmma_wait(&mut self, n: u32, pinned: bool) {
        if pinned {
            let size = self.fresh(Class::B32);
            let taken = self.fresh(Class::Pred);
            let join = self.label();
            self.ins(&format!("mov.u32 {size}, %dynamic_smem_size"));
            self.ins(&format!("setp.ne.u32 {taken}, {size}, -1"));
            self.ins(&format!("@{taken} bra.uni {join}"));
            self.ins("nanosleep.u32 0");
            self.place(&join);
        }
        self.ins(&format!("wgmma.wait_group.sync.aligned {n}"));
    }

    fn nargs(op: &Intrinsic, args: &[Expr], n: usize) -> R<()> {
        if args.len() == n {
            Ok(())
        } else {
            Err(format!("{op} with {} arguments (expected {n})", args.len()))
        }
    }

    /// A TMA copy's operands, or the arity error `nargs` gives.
    fn tma_operands<'e>(op: &Intrinsic, args: &'e [Expr]) -> R<tl_ir::TmaOperands<'e>> {
        Self::nargs(op, args, op.tma_arg_count().unwrap_or_default())?;
        op.tma_operands(args)
            .ok_or_else(|| format!("{op}: not a TMA copy"))
    }

    /// A memory operand in one of `scopes`.
    fn mem_arg(&mut self, arg: Option<&Expr>, scopes: &[Scope]) -> R<(Addr, Buffer)> {
        let (b, idx) = target(arg)?;
        if !scopes.contains(&b.scope()) {
            return Err(format!("an intrinsic operand in {} memory", b.scope()));
        }
        Ok((self.address(b, idx)?, b.clone()))
    }

    /// `words` consecutive 32-bit registers of a per-thread array, starting at the element
    /// `arg` names (for 16-bit arrays the element must start a register).
    fn reg_words(&mut self, arg: Option<&Expr>, words: usize) -> R<(Vec<String>, DType)> {
        let (b, idx) = target(arg)?;
        if b.scope() != Scope::Local {
            return Err(format!("a register operand in {} memory", b.scope()));
        }
        let i = self.local_index(b, idx)?;
        let Some(l) = self.locals.get(&b.id()) else {
            return Err(format!(
                "the buffer `{}` used before its allocation",
                b.name()
            ));
        };
        let start = if l.packed {
            if i % 2 != 0 {
                return Err(format!(
                    "an odd element of `{}` as a register operand",
                    b.name()
                ));
            }
            i / 2
        } else {
            i
        };
        if start + words > l.regs.len() {
            return Err(format!(
                "{words} registers from element {i} of `{}` run past its end",
                b.name()
            ));
        }
        let (regs, dtype) = (l.regs[start..start + words].to_vec(), l.dtype);
        // The instruction names the registers: they must hold their elements' values.
        self.flush_registers(&regs);
        Ok((regs, dtype))
    }

    fn side(&mut self, arg: Option<&Expr>, bytes: usize) -> R<Side> {
        let (b, idx) = target(arg)?;
        match b.scope() {
            Scope::Global | Scope::Shared => Ok(Side::Mem(self.address(b, idx)?)),
            Scope::Local if bytes >= 4 => Ok(Side::Regs(self.reg_words(arg, bytes / 4)?.0)),
            other => Err(format!("a {bytes}-byte vector copy in {other} memory")),
        }
    }

    /// `a` moved by the byte count in register `bytes`.
    fn offset_addr(&mut self, a: Addr, bytes: &str) -> Addr {
        let base = self.fresh(Class::B64);
        self.ins(&format!("add.s64 {base}, {}, {bytes}", a.base));
        Addr { base, ..a }
    }

    /// Rank `peer`'s copy of the element at `a`: every rank's symmetric heap is mapped at
    /// `base + r·heap_stride`, so it is `a + (peer − rank)·heap_stride`.
    fn peer_addr(&mut self, a: Addr, buf: &Buffer, peer: &Expr) -> R<Addr> {
        let Some(d) = self.dist.clone() else {
            return Err("a peer address in a kernel that is not distributed".into());
        };
        if let Some((_, table)) = d.peer_tables.iter().find(|(id, _)| *id == buf.id()) {
            // Peer tables: rank `peer`'s copy is at `table[peer]`, this one at the parameter.
            let entry = self.expr(&Expr::load(table, vec![peer.clone()]))?;
            let entry = self.reg(&entry, Class::B64);
            let Some((own, _)) = self.globals.get(&buf.id()).cloned() else {
                return Err(format!("the tensor `{}` is not a parameter", buf.name()));
            };
            let delta = self.fresh(Class::B64);
            self.ins(&format!("sub.s64 {delta}, {entry}, {own}"));
            return Ok(self.offset_addr(a, &delta));
        }
        let delta = (peer.clone() - d.rank.expr()).cast(DType::I64) * d.heap_stride.expr();
        let v = self.expr(&delta)?;
        let v = self.reg(&v, Class::B64);
        Ok(self.offset_addr(a, &v))
    }

    /// Whether the global tensor behind a source address is read-only in this kernel.
    fn read_only(&self, arg: Option<&Expr>) -> bool {
        target(arg)
            .ok()
            .filter(|(b, _)| b.scope() == Scope::Global)
            .and_then(|(b, _)| self.globals.get(&b.id()))
            .is_some_and(|g| g.1)
    }

    /// Intrinsics with a value: thread index and shuffles.
    pub fn value_call(&mut self, op: &Intrinsic, args: &[Expr]) -> R<Val> {
        match op {
            Intrinsic::ThreadIdx => Ok(Val::Reg(self.tid.clone(), Class::B32)),
            Intrinsic::ClusterCtaRank => {
                let r = self.fresh(Class::B32);
                self.ins(&format!("mov.u32 {r}, %cluster_ctarank"));
                Ok(Val::Reg(r, Class::B32))
            }
            Intrinsic::ShflXor { width }
            | Intrinsic::ShflDown { width }
            | Intrinsic::ShflIdx { width } => {
                Self::nargs(op, args, 2)?;
                if !width.is_power_of_two() || *width > 32 {
                    return Err(format!("{op}: a width that is not a power of two up to 32"));
                }
                let class = match args[0].dtype().compute_type() {
                    DType::F32 => Class::F32,
                    DType::I32 | DType::U32 => Class::B32,
                    other => return Err(format!("a shuffle of {other}")),
                };
                let v = self.expr(&args[0])?;
                let v = self.reg(&v, class);
                let lane = self.expr(&args[1])?;
                let mode = match op {
                    Intrinsic::ShflXor { .. } => "bfly",
                    Intrinsic::ShflDown { .. } => "down",
                    _ => "idx",
                };
                // The segment mask and clamp CUDA's __shfl_*_sync pass for `width`.
                let c = ((32 - width) << 8) | 0x1f;
                let d = self.fresh(class);
                self.ins(&format!("shfl.sync.{mode}.b32 {d}, {v}, {lane}, {c}, -1"));
                Ok(Val::Reg(d, class))
            }
            Intrinsic::MemAtomAdd { sem, scope } => {
                if args.len() != 2 && args.len() != 3 {
                    return Err(format!("{op} with {} arguments", args.len()));
                }
                let (a, b) = self.mem_arg(args.first(), &[Scope::Global])?;
                if let (Some(peer), true) = (args.get(2), self.nvshmem()) {
                    return self.shmem_fetch_add(&a, b.dtype(), &args[1], *sem, peer);
                }
                let a = match args.get(2) {
                    Some(peer) => self.peer_addr(a, &b, peer)?,
                    None => a,
                };
                let (ty, class) = match b.dtype() {
                    DType::I32 | DType::U32 => ("u32", Class::B32),
                    DType::I64 | DType::U64 => ("u64", Class::B64),
                    other => return Err(format!("{op} on {other}")),
                };
                let v = self.expr(&args[1])?;
                let v = self.reg(&v, class);
                let d = self.fresh(class);
                let q = mem_qualifier(*sem, *scope);
                self.ins(&format!(
                    "atom{q}.global.add.{ty} {d}, {}, {v}",
                    a.operand()
                ));
                Ok(Val::Reg(d, class))
            }
            Intrinsic::MemLoad { sem, scope } => {
                if args.len() != 1 && args.len() != 2 {
                    return Err(format!("{op} with {} arguments", args.len()));
                }
                let (a, b) = self.mem_arg(args.first(), &[Scope::Global])?;
                if let (Some(peer), true) = (args.get(1), self.nvshmem()) {
                    return self.shmem_load(&a, b.dtype(), *sem, peer);
                }
                let a = match args.get(1) {
                    Some(peer) => self.peer_addr(a, &b, peer)?,
                    None => a,
                };
                let (ty, class) = flag_type(b.dtype())?;
                let d = self.fresh(class);
                let q = mem_qualifier(*sem, *scope);
                self.ins(&format!("ld{q}.global.{ty} {d}, {}", a.operand()));
                if self.nvshmem() && sem.acquires() {
                    self.shmem_waited(&a)?;
                }
                Ok(Val::Reg(d, class))
            }
            other => Err(format!("the intrinsic {other} in an expression")),
        }
    }

    /// The generic address of the tensor map a TMA copy of `tensor` (`address_of` its first
    /// element) in boxes of `box_dims` with `swizzle` uses, made where it is used (one thread
    /// issues the copies): held across the kernel it costs two registers, which pushed
    /// attention under its 128-register bound into spills.
    fn tma_map(
        &mut self,
        op: &Intrinsic,
        tensor: Option<&Expr>,
        box_dims: &[u32],
        swizzle: u32,
    ) -> R<String> {
        let (tensor, _) = target(tensor)?;
        let Some(map) = self
            .tmaps
            .get(&(tensor.id(), box_dims.to_vec(), swizzle))
            .cloned()
        else {
            return Err(format!("{op}: no tensor map for `{}`", tensor.name()));
        };
        Ok(self.param_address(&map))
    }

    /// The generic address of kernel parameter `name` (a tensor map), in a fresh register.
    pub(crate) fn param_address(&mut self, name: &str) -> String {
        let r = self.fresh(Class::B64);
        self.ins(&format!("mov.b64 {r}, {name}"));
        let generic = self.fresh(Class::B64);
        self.ins(&format!("cvta.param.u64 {generic}, {r}"));
        generic
    }

    /// A TMA copy's coordinates (outermost first in the IR) as registers, innermost first as
    /// the instruction takes them.
    fn tma_coords(&mut self, coords: &[Expr]) -> R<Vec<String>> {
        let mut out = vec![];
        for c in coords.iter().rev() {
            let v = self.expr(c)?;
            out.push(self.reg(&v, Class::B32));
        }
        Ok(out)
    }

    /// Intrinsics called for their effect.
    pub fn effect_call(&mut self, op: &Intrinsic, args: &[Expr]) -> R<()> {
        match op {
            Intrinsic::SyncThreads => self.ins("bar.sync 0"),
            Intrinsic::SyncWarp => self.ins("bar.warp.sync -1"),
            Intrinsic::NamedBarrier { id, threads } => {
                self.ins(&format!("bar.sync {id}, {threads}"))
            }
            Intrinsic::NamedBarrierArrive { id, threads } => {
                self.ins(&format!("bar.arrive {id}, {threads}"))
            }
            Intrinsic::SetMaxNReg { inc, regs } => self.ins(&format!(
                "setmaxnreg.{}.sync.aligned.u32 {regs}",
                if *inc { "inc" } else { "dec" }
            )),
            Intrinsic::CpAsyncCommit => self.ins("cp.async.commit_group"),
            Intrinsic::CpAsyncWait { n } => self.ins(&format!("cp.async.wait_group {n}")),
            Intrinsic::WgmmaCommit => self.ins("wgmma.commit_group.sync.aligned"),
            // The register arrays named by the fence and the wait are for NVVM's benefit:
            // ptxas tracks wgmma's registers itself.
            Intrinsic::WgmmaFence => {
                // The fence orders earlier register accesses before the wgmmas after it:
                // deferred writes (an accumulator rescaled in place) must be emitted before
                // it, not where the wgmma names its registers.
                self.flush_writes();
                self.ins("wgmma.fence.sync.aligned")
            }
            Intrinsic::WgmmaWait { n, pinned } => self.wgmma_wait(*n, *pinned),
            Intrinsic::FenceProxyAsync => self.ins("fence.proxy.async.shared::cta"),
            Intrinsic::FenceProxyAsyncGlobal => self.ins("fence.proxy.async.global"),
            Intrinsic::LaunchDependents => self.ins("griddepcontrol.launch_dependents"),
            Intrinsic::GridDependencyWait => self.ins("griddepcontrol.wait"),
            Intrinsic::Fence { scope, sc } => {
                let kind = if *sc { "sc" } else { "acq_rel" };
                self.ins(&format!("fence.{kind}.{}", scope.name()));
                // A system fence also orders this thread's NVSHMEM operations before what
                // follows: they complete first.
                if *scope == tl_ir::MemScope::Sys && self.nvshmem() {
                    self.shmem_release()?;
                }
            }
            Intrinsic::MemStore { sem, scope } | Intrinsic::MemRedAdd { sem, scope } => {
                if args.len() != 2 && args.len() != 3 {
                    return Err(format!("{op} with {} arguments", args.len()));
                }
                if matches!(op, Intrinsic::MemRedAdd { .. }) && sem.acquires() {
                    return Err(format!(
                        "{op}: PTX reductions have no acquire (use an atomic)"
                    ));
                }
                let (a, b) = self.mem_arg(args.first(), GLOBAL)?;
                if let (Some(peer), true) = (args.get(2), self.nvshmem()) {
                    let add = matches!(op, Intrinsic::MemRedAdd { .. });
                    return self.shmem_store(&a, b.dtype(), &args[1], (*sem, add), peer);
                }
                let a = match args.get(2) {
                    Some(peer) => self.peer_addr(a, &b, peer)?,
                    None => a,
                };
                let (ty, class) = flag_type(b.dtype())?;
                let v = self.expr(&args[1])?;
                let v = self.reg(&v, class);
                let q = mem_qualifier(*sem, *scope);
                if matches!(op, Intrinsic::MemStore { .. }) {
                    self.ins(&format!("st{q}.global.{ty} {}, {v}", a.operand()));
                } else {
                    let ty = match b.dtype() {
                        DType::F32 => "f32",
                        DType::I32 | DType::U32 => "u32",
                        DType::I64 | DType::U64 => "u64",
                        other => return Err(format!("{op} on {other}")),
                    };
                    self.ins(&format!("red{q}.global.add.{ty} {}, {v}", a.operand()));
                }
            }
            Intrinsic::WaitUntil {
                cmp,
                scope,
                wrapping,
            } => {
                if args.len() != 2 && args.len() != 3 {
                    return Err(format!("{op} with {} arguments", args.len()));
                }
                let (a, b) = self.mem_arg(args.first(), GLOBAL)?;
                let remote = args.get(2).filter(|_| self.nvshmem()).cloned();
                let a = match (args.get(2), &remote) {
                    (Some(peer), None) => self.peer_addr(a, &b, peer)?,
                    _ => a,
                };
                let (ty, class, cmp_ty) = match b.dtype() {
                    DType::I32 => ("b32", Class::B32, "s32"),
                    DType::U32 => ("b32", Class::B32, "u32"),
                    DType::I64 => ("b64", Class::B64, "s64"),
                    DType::U64 => ("b64", Class::B64, "u64"),
                    other => return Err(format!("{op} on a {other} flag")),
                };
                let v = self.expr(&args[1])?;
                let v = self.reg(&v, class);
                let (r, p) = (self.fresh(class), self.fresh(Class::Pred));
                let top = self.label();
                self.place(&top);
                match &remote {
                    // A peer's flag through NVSHMEM: fetched each turn, acquired after.
                    Some(peer) => {
                        let got = self.shmem_poll(&a, b.dtype(), peer)?;
                        self.ins(&format!("mov.{ty} {r}, {got}"));
                    }
                    None => self.ins(&format!(
                        "ld.acquire.{}.global.{ty} {r}, {}",
                        scope.name(),
                        a.operand()
                    )),
                }
                if *wrapping {
                    // Serial-number arithmetic: the signed difference against zero.
                    let (sub_ty, signed) = match class {
                        Class::B64 => ("s64", "s64"),
                        _ => ("s32", "s32"),
                    };
                    let d = self.fresh(class);
                    self.ins(&format!("sub.{sub_ty} {d}, {r}, {v}"));
                    self.ins(&format!("setp.{}.{signed} {p}, {d}, 0", cmp.name()));
                } else {
                    self.ins(&format!("setp.{}.{cmp_ty} {p}, {r}, {v}", cmp.name()));
                }
                self.ins(&format!("@!{p} bra {top}"));
                if remote.is_some() {
                    self.ins("fence.acq_rel.sys");
                } else if self.nvshmem() {
                    self.shmem_waited(&a)?;
                }
            }
            Intrinsic::PeerCopyWarp { put } => {
                Self::nargs(op, args, 5)?;
                if !self.nvshmem() {
                    return Err(format!(
                        "{op} in a kernel that does not reach its peers through NVSHMEM"
                    ));
                }
                let (d, db) = self.mem_arg(args.first(), GLOBAL)?;
                let (s, _) = self.mem_arg(args.get(1), GLOBAL)?;
                let elem = Expr::int_of(db.dtype().bytes() as i64, DType::I64);
                let off = self.expr(&(args[3].cast(DType::I64) * elem.clone()))?;
                let off = self.reg(&off, Class::B64);
                let (d, s) = (self.offset_addr(d, &off), self.offset_addr(s, &off));
                let bytes = self.expr(&(args[4].cast(DType::I64) * elem))?;
                let bytes = self.reg(&bytes, Class::B64);
                self.shmem_copy_warp((&d, &s), *put, bytes, &args[2])?;
            }
            Intrinsic::PeerCopy { lanes, put, unroll } => {
                let u = (*unroll).max(1) as usize;
                Self::nargs(op, args, if u > 1 { 6 } else { 4 })?;
                let (d0, db) = self.mem_arg(args.first(), GLOBAL)?;
                let (s0, sb) = self.mem_arg(args.get(1), GLOBAL)?;
                let bytes = *lanes as usize * db.dtype().bytes();
                let (ty, words) = match bytes {
                    16 => (".v4.b32", 4),
                    8 => (".v2.b32", 2),
                    4 => (".b32", 1),
                    2 => (".u16", 1),
                    1 => (".u8", 1),
                    _ => return Err(format!("a {bytes}-byte peer copy")),
                };
                let elem = Expr::int_of(db.dtype().bytes() as i64, DType::I64);
                // The first chunk's addresses, one side on the peer; chunk `i` lies `i` strides
                // further on both sides.
                let v = self.expr(&(args[3].cast(DType::I64) * elem.clone()))?;
                let v = self.reg(&v, Class::B64);
                let (d, s) = (self.offset_addr(d0, &v), self.offset_addr(s0, &v));
                if self.nvshmem() {
                    let (stride, count) = if u > 1 {
                        let st = self.expr(&(args[4].cast(DType::I64) * elem))?;
                        let n = self.expr(&args[5].cast(DType::I32))?;
                        (self.reg(&st, Class::B64), self.reg(&n, Class::B32))
                    } else {
                        ("0".to_string(), "1".to_string())
                    };
                    return self.shmem_copy((&d, &s), *put, (bytes, stride, count), &args[2]);
                }
                let (d, s) = if *put {
                    (self.peer_addr(d, &db, &args[2])?, s)
                } else {
                    let s = self.peer_addr(s, &sb, &args[2])?;
                    (d, s)
                };
                // The predicate that chunk `i` is one of the first `valid` (none for a single
                // chunk, which its loop already guards).
                let valid = if u > 1 {
                    let v = self.expr(&args[5].cast(DType::I32))?;
                    Some(self.reg(&v, Class::B32))
                } else {
                    None
                };
                let mut chunks = vec![];
                for i in 0..u {
                    let (d, s, guard) = match &valid {
                        Some(valid) if i > 0 => {
                            let step = args[4].cast(DType::I64)
                                * Expr::int_of(i as i64 * db.dtype().bytes() as i64, DType::I64);
                            let v = self.expr(&step)?;
                            let v = self.reg(&v, Class::B64);
                            let p = self.fresh(Class::Pred);
                            self.ins(&format!("setp.gt.s32 {p}, {valid}, {i}"));
                            (
                                self.offset_addr(d.clone(), &v),
                                self.offset_addr(s.clone(), &v),
                                format!("@{p} "),
                            )
                        }
                        _ => (d.clone(), s.clone(), String::new()),
                    };
                    let regs: Vec<String> = (0..words).map(|_| self.fresh(Class::B32)).collect();
                    let list = if words == 1 {
                        regs[0].clone()
                    } else {
                        format!("{{{}}}", regs.join(", "))
                    };
                    chunks.push((d, s, guard, list));
                }
                // Every load before any store: `u` loads in flight at once.
                for (_, s, guard, list) in &chunks {
                    self.ins(&format!("{guard}ld.global{ty} {list}, {}", s.operand()));
                }
                for (d, _, guard, list) in &chunks {
                    self.ins(&format!("{guard}st.global{ty} {}, {list}", d.operand()));
                }
            }
            Intrinsic::MbarrierInit { count } => {
                Self::nargs(op, args, 1)?;
                let (b, _) = self.mem_arg(args.first(), SHARED)?;
                self.ins(&format!(
                    "mbarrier.init.shared::cta.b64 {}, {count}",
                    b.operand()
                ));
            }
            Intrinsic::FenceMbarrierInit => self.ins("fence.mbarrier_init.release.cluster"),
            Intrinsic::MbarrierArrive => {
                Self::nargs(op, args, 1)?;
                let (b, _) = self.mem_arg(args.first(), SHARED)?;
                self.ins(&format!(
                    "mbarrier.arrive.shared::cta.b64 _, {}",
                    b.operand()
                ));
            }
            Intrinsic::MbarrierArriveExpectTx => {
                Self::nargs(op, args, 2)?;
                let (b, _) = self.mem_arg(args.first(), SHARED)?;
                let v = self.expr(&args[1])?;
                let v = self.reg(&v, Class::B32);
                self.ins(&format!(
                    "mbarrier.arrive.expect_tx.shared::cta.b64 _, {}, {v}",
                    b.operand()
                ));
            }
            Intrinsic::MbarrierWait => {
                Self::nargs(op, args, 2)?;
                let (b, _) = self.mem_arg(args.first(), SHARED)?;
                let v = self.expr(&args[1])?;
                let v = self.reg(&v, Class::B32);
                let p = self.fresh(Class::Pred);
                let top = self.label();
                self.place(&top);
                self.ins(&format!(
                    "mbarrier.try_wait.parity.shared::cta.b64 {p}, {}, {v}",
                    b.operand()
                ));
                self.ins(&format!("@!{p} bra {top}"));
            }
            Intrinsic::TmaLoad {
                box_dims, swizzle, ..
            } => {
                let rank = box_dims.len();
                if !(1..=5).contains(&rank) {
                    return Err(format!("{op}: a {rank}-d box"));
                }
                let o = Self::tma_operands(op, args)?;
                let (d, _) = self.mem_arg(Some(o.shared), SHARED)?;
                let map = self.tma_map(op, Some(o.tensor), box_dims, *swizzle)?;
                let (b, _) = self.mem_arg(o.barrier, SHARED)?;
                let coords = self.tma_coords(o.coords)?;
                let (suffix, mask) = if let Some(m) = o.mask {
                    // The mask is a 16-bit operand.
                    let m = self.expr(m)?;
                    let m = self.reg(&m, Class::B32);
                    let h = self.fresh(Class::B16);
                    self.ins(&format!("cvt.u16.u32 {h}, {m}"));
                    (".multicast::cluster", format!(", {h}"))
                } else {
                    ("", String::new())
                };
                self.ins(&format!(
                    "cp.async.bulk.tensor.{rank}d.shared::cluster.global.mbarrier::complete_tx::bytes{suffix} {}, [{map}, {{{}}}], {}{mask}",
                    d.operand(),
                    coords.join(", "),
                    b.operand()
                ));
            }
            Intrinsic::ClusterSync => {
                self.ins("barrier.cluster.arrive.release.aligned");
                self.ins("barrier.cluster.wait.acquire.aligned");
            }
            Intrinsic::MbarrierArriveCluster => {
                Self::nargs(op, args, 2)?;
                let (b, _) = self.mem_arg(args.first(), SHARED)?;
                let local = if b.off == 0 {
                    b.base.clone()
                } else {
                    let r = self.fresh(Class::B32);
                    self.ins(&format!("add.u32 {r}, {}, {}", b.base, b.off));
                    r
                };
                let rank = self.expr(&args[1])?;
                let rank = self.reg(&rank, Class::B32);
                let remote = self.fresh(Class::B32);
                self.ins(&format!(
                    "mapa.shared::cluster.u32 {remote}, {local}, {rank}"
                ));
                // Release at CTA scope (the default), as CUTLASS arrives on a peer's barrier:
                // what the arrival releases — the stage's reads by wgmma — has retired at the
                // wgmma wait before it. `.release.cluster` made every arrival wait on a fence
                // (ERRBAR): the clustered GEMM ran at 40% (gpu-notes run 21i).
                self.ins(&format!(
                    "mbarrier.arrive.shared::cluster.b64 _, [{remote}]"
                ));
            }
            Intrinsic::TmaStore { box_dims, swizzle } => {
                let rank = box_dims.len();
                if !(1..=5).contains(&rank) {
                    return Err(format!("{op}: a {rank}-d box"));
                }
                let o = Self::tma_operands(op, args)?;
                let (src, _) = self.mem_arg(Some(o.shared), SHARED)?;
                let map = self.tma_map(op, Some(o.tensor), box_dims, *swizzle)?;
                let coords = self.tma_coords(o.coords)?;
                self.ins(&format!(
                    "cp.async.bulk.tensor.{rank}d.global.shared::cta.bulk_group [{map}, {{{}}}], {}",
                    coords.join(", "),
                    src.operand()
                ));
            }
            Intrinsic::BulkStore => {
                Self::nargs(op, args, 3)?;
                let (d, _) = self.mem_arg(args.first(), GLOBAL)?;
                let (src, _) = self.mem_arg(args.get(1), SHARED)?;
                let n = self.expr(&args[2])?;
                let n = self.reg(&n, Class::B32);
                self.ins(&format!(
                    "cp.async.bulk.global.shared::cta.bulk_group {}, {}, {n}",
                    d.operand(),
                    src.operand()
                ));
            }
            Intrinsic::BulkCommit => self.ins("cp.async.bulk.commit_group"),
            Intrinsic::BulkWait { n, read } => self.ins(&format!(
                "cp.async.bulk.wait_group{} {n}",
                if *read { ".read" } else { "" }
            )),
            Intrinsic::CpAsync { bytes } => {
                Self::nargs(op, args, 3)?;
                if !matches!(bytes, 4 | 8 | 16) {
                    return Err(format!("cp.async of {bytes} bytes"));
                }
                let (d, _) = self.mem_arg(args.first(), SHARED)?;
                let (s, _) = self.mem_arg(args.get(1), GLOBAL)?;
                let cache = if *bytes == 16 { "cg" } else { "ca" };
                let p = self.expr(&args[2])?;
                let (dst, src) = (d.operand(), s.operand());
                match p.as_int() {
                    Some(0) => {
                        self.ins(&format!(
                            "cp.async.{cache}.shared.global {dst}, {src}, {bytes}, 0"
                        ));
                    }
                    Some(_) => {
                        self.ins(&format!(
                            "cp.async.{cache}.shared.global {dst}, {src}, {bytes}"
                        ));
                    }
                    None => {
                        // A false predicate copies 0 source bytes: the destination is zeroed.
                        let n = self.pure(
                            Class::B32,
                            "selp.b32",
                            &[&Val::Int(*bytes as i64), &Val::Int(0), &p],
                        );
                        self.ins(&format!(
                            "cp.async.{cache}.shared.global {dst}, {src}, {bytes}, {n}"
                        ));
                    }
                }
            }
            Intrinsic::VecCopy { lanes } => self.vec_copy(op, *lanes, args)?,
            Intrinsic::LoadWindow => {
                Self::nargs(op, args, 4)?;
                self.load_window(args)?
            }
            Intrinsic::StoreShifted => {
                Self::nargs(op, args, 4)?;
                self.store_shifted(args)?
            }
            Intrinsic::ShiftedVecCopy => {
                Self::nargs(op, args, 2)?;
                self.shifted_vec_copy(args)?
            }
            Intrinsic::PrefetchL2 => {
                Self::nargs(op, args, 1)?;
                let (a, _) = self.mem_arg(args.first(), GLOBAL)?;
                self.ins(&format!("prefetch.global.L2 {}", a.operand()));
            }
            Intrinsic::AtomicAdd => {
                Self::nargs(op, args, 2)?;
                let (a, b) = self.mem_arg(args.first(), &[Scope::Global, Scope::Shared])?;
                let (ty, class) = match b.dtype() {
                    DType::F32 => ("f32", Class::F32),
                    DType::I32 => ("s32", Class::B32),
                    DType::U32 => ("u32", Class::B32),
                    other => return Err(format!("an atomic add on {other}")),
                };
                let v = self.expr(&args[1])?;
                let v = self.reg(&v, class);
                self.ins(&format!("red.{}.add.{ty} {}, {v}", a.space, a.operand()));
            }
            Intrinsic::AtomicMax | Intrinsic::AtomicMin => {
                Self::nargs(op, args, 2)?;
                let (a, b) = self.mem_arg(args.first(), &[Scope::Global, Scope::Shared])?;
                let (max, min) = if matches!(op, Intrinsic::AtomicMax) {
                    ("max", "min")
                } else {
                    ("min", "max")
                };
                let v = self.expr(&args[1])?;
                match b.dtype() {
                    DType::I32 | DType::U32 => {
                        let ty = if b.dtype() == DType::I32 {
                            "s32"
                        } else {
                            "u32"
                        };
                        let v = self.reg(&v, Class::B32);
                        self.ins(&format!("red.{}.{max}.{ty} {}, {v}", a.space, a.operand()));
                    }
                    DType::F32 => {
                        // No float max/min reduction: on the bits, a non-negative float orders
                        // as a signed int and a negative one reversed as an unsigned int.
                        let v = self.reg(&v, Class::F32);
                        let (bits, neg) = (self.fresh(Class::B32), self.fresh(Class::Pred));
                        self.ins(&format!("mov.b32 {bits}, {v}"));
                        self.ins(&format!("setp.lt.s32 {neg}, {bits}, 0"));
                        let at = a.operand();
                        self.ins(&format!("@!{neg} red.{}.{max}.s32 {at}, {bits}", a.space));
                        self.ins(&format!("@{neg} red.{}.{min}.u32 {at}, {bits}", a.space));
                    }
                    other => return Err(format!("an atomic {max} on {other}")),
                }
            }
            Intrinsic::Ldmatrix { num, trans } => {
                Self::nargs(op, args, 2)?;
                if !matches!(num, 1 | 2 | 4) {
                    return Err(format!("ldmatrix of {num} matrices"));
                }
                let (s, sb) = self.mem_arg(args.first(), SHARED)?;
                let (regs, dt) = self.reg_words(args.get(1), *num as usize)?;
                if sb.dtype().bytes() != 2 || dt.bytes() != 2 {
                    return Err("ldmatrix of elements that are not 16-bit".into());
                }
                let t = if *trans { ".trans" } else { "" };
                self.ins(&format!(
                    "ldmatrix.sync.aligned.m8n8.x{num}{t}.shared.b16 {{{}}}, {}",
                    regs.join(", "),
                    s.operand()
                ));
            }
            Intrinsic::MmaSync { ab } => {
                Self::nargs(op, args, 4)?;
                if !matches!(ab, DType::BF16 | DType::F16) {
                    return Err(format!("mma.sync with {ab} operands"));
                }
                let (d, _) = self.reg_words(args.first(), 4)?;
                let (a, _) = self.reg_words(args.get(1), 4)?;
                let (b, _) = self.reg_words(args.get(2), 2)?;
                let (c, _) = self.reg_words(args.get(3), 4)?;
                let ab = ab.name();
                self.ins(&format!(
                    "mma.sync.aligned.m16n8k16.row.col.f32.{ab}.{ab}.f32 {{{}}}, {{{}}}, {{{}}}, {{{}}}",
                    d.join(", "),
                    a.join(", "),
                    b.join(", "),
                    c.join(", ")
                ));
            }
            Intrinsic::Wgmma(w) => self.wgmma(op, w, args)?,
            other => return Err(format!("the intrinsic {other}")),
        }
        Ok(())
    }

    fn vec_copy(&mut self, op: &Intrinsic, lanes: u32, args: &[Expr]) -> R<()> {
        if args.len() != 2 && args.len() != 3 {
            return Err(format!("{op} with {} arguments", args.len()));
        }
        let (db, _) = target(args.first())?;
        let bytes = lanes as usize * db.dtype().bytes();
        let (vec, words) = match bytes {
            16 => (".v4", 4),
            8 => (".v2", 2),
            4 => ("", 1),
            _ => return Err(format!("a {bytes}-byte vector copy")),
        };
        let dst = self.side(args.first(), bytes)?;
        let src = self.side(args.get(1), bytes)?;
        let nc = self.read_only(args.get(1));
        let pred = match args.get(2) {
            Some(p) => Some(self.expr(p)?),
            None => None,
        };
        let pred = match pred {
            Some(v) if v.as_int().is_some_and(|k| k != 0) => None,
            other => other,
        };
        let list = |r: &[String]| {
            if r.len() == 1 {
                r[0].clone()
            } else {
                format!("{{{}}}", r.join(", "))
            }
        };
        // The words in flight: the destination's registers when it is a register array.
        let words_regs: Vec<String> = match &dst {
            Side::Regs(r) => r.clone(),
            Side::Mem(_) => (0..words).map(|_| self.fresh(Class::B32)).collect(),
        };
        match (&src, pred) {
            (_, Some(Val::Int(0))) => {
                for r in &words_regs {
                    self.ins(&format!("mov.b32 {r}, 0"));
                }
            }
            (Side::Mem(a), p) => {
                let guard = match p {
                    Some(p) => {
                        for r in &words_regs {
                            self.ins(&format!("mov.b32 {r}, 0"));
                        }
                        let pr = self.reg(&p, Class::Pred);
                        format!("@{pr} ")
                    }
                    None => String::new(),
                };
                let ld = format!(
                    "ld.{}{}",
                    a.space,
                    if nc && a.space == "global" { ".nc" } else { "" }
                );
                self.ins(&format!(
                    "{guard}{ld}{vec}.b32 {}, {}",
                    list(&words_regs),
                    a.operand()
                ));
            }
            (Side::Regs(r), p) => {
                for (d, s) in words_regs.iter().zip(r) {
                    if d != s {
                        self.ins(&format!("mov.b32 {d}, {s}"));
                    }
                }
                if let Some(p) = p {
                    let pr = self.reg(&p, Class::Pred);
                    for d in &words_regs {
                        self.ins(&format!("selp.b32 {d}, {d}, 0, {pr}"));
                    }
                }
            }
        }
        if let Side::Mem(a) = &dst {
            self.ins(&format!(
                "st.{}{vec}.b32 {}, {}",
                a.space,
                a.operand(),
                list(&words_regs)
            ));
        }
        Ok(())
    }

    /// The 64-bit wgmma descriptor of a 128-byte-swizzled operand tile (start address,
    /// leading offset `lbo`, 8-row groups 1024 bytes apart), as `tl_wgmma_desc_sw128` builds
    /// it. The descriptor of `base + off` is the base's plus `off >> 4`: shared addresses stay
    /// below 2^18, so the 14-bit address field never carries.
    fn descriptor(&mut self, a: &Addr, lbo: &Val) -> R<Val> {
        let base = Val::Reg(a.base.clone(), Class::B32);
        let field = self.pure(Class::B32, "and.b32", &[&base, &Val::Int(0x3FFFF)]);
        let field = self.pure(Class::B32, "shr.u32", &[&field, &Val::Int(4)]);
        let wide = self.pure(Class::B64, "cvt.u64.u32", &[&field]);
        let fixed: i64 = (1i64 << 62) | ((1024 >> 4) << 32);
        let lbo_field = match lbo.as_int() {
            Some(l) => Val::Int(((l >> 4) & 0x3FFF) << 16),
            None => {
                let l = Val::Reg(self.reg(lbo, Class::B32), Class::B32);
                let s = self.pure(Class::B32, "shr.u32", &[&l, &Val::Int(4)]);
                let m = self.pure(Class::B32, "and.b32", &[&s, &Val::Int(0x3FFF)]);
                let w = self.pure(Class::B64, "cvt.u64.u32", &[&m]);
                self.pure(Class::B64, "shl.b64", &[&w, &Val::Int(16)])
            }
        };
        let d = self.pure(Class::B64, "or.b64", &[&wide, &Val::Int(fixed)]);
        let d = match lbo_field {
            Val::Int(0) => d,
            f => self.pure(Class::B64, "or.b64", &[&d, &f]),
        };
        if a.off % 16 != 0 || a.off < 0 {
            return Err(format!("a wgmma operand at byte offset {}", a.off));
        }
        Ok(match a.off >> 4 {
            0 => d,
            k => self.pure(Class::B64, "add.s64", &[&d, &Val::Int(k)]),
        })
    }

    fn wgmma(&mut self, op: &Intrinsic, w: &WgmmaOp, args: &[Expr]) -> R<()> {
        let WgmmaOp {
            n,
            ab,
            b: bt,
            a_regs,
            ..
        } = *w;
        let steps = w.steps.max(1) as usize;
        Self::nargs(op, args, 5 + 2 * (steps - 1))?;
        let fp8 = ab.is_fp8() && bt.is_fp8();
        if !fp8 && (ab != bt || !matches!(ab, DType::BF16 | DType::F16)) {
            return Err(format!("wgmma with {ab} × {bt} operands"));
        }
        if fp8 && (a_regs || w.a_mn_major || w.b_mn_major) {
            return Err("an fp8 wgmma with an MN-major or register operand".into());
        }
        if n == 0 || n % 8 != 0 || n > 256 {
            return Err(format!("wgmma with N = {n}"));
        }
        if self.sm < 90 {
            return Err("wgmma below sm_90a".into());
        }
        let (d, _) = self.reg_words(args.first(), n as usize / 2)?;
        let scale = self.expr(&args[3])?;
        let lbo = self.expr(&args[4])?;
        let first = self.reg(&scale, Class::Pred);
        let d = d.join(", ");
        // 8-bit types take no transpose immediates (they are K-major only).
        let tb = u32::from(w.b_mn_major);
        let imms = if fp8 {
            "1, 1".to_string()
        } else if a_regs {
            format!("1, 1, {tb}")
        } else {
            format!("1, 1, {}, {tb}", u32::from(w.a_mn_major))
        };
        for s in 0..steps {
            let (ai, bi) = if s == 0 {
                (1, 2)
            } else {
                (3 + 2 * s, 4 + 2 * s)
            };
            let a = if a_regs {
                let (r, _) = self.reg_words(args.get(ai), 4)?;
                format!("{{{}}}", r.join(", "))
            } else {
                let (a, _) = self.mem_arg(args.get(ai), &[Scope::Shared])?;
                self.descriptor(&a, &Val::Int(16))?.to_string()
            };
            let (b, _) = self.mem_arg(args.get(bi), &[Scope::Shared])?;
            let b = self.descriptor(&b, &lbo)?;
            // Later steps always accumulate.
            let p = if s == 0 {
                first.clone()
            } else {
                self.reg(&Val::Int(1), Class::Pred)
            };
            self.ins(&format!(
                "wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{an}.{bn} {{{d}}}, {a}, {b}, {p}, {imms}",
                k = w.k(),
                an = ab.name(),
                bn = bt.name()
            ));
        }
        Ok(())
    }
}

/// The PTX type and register class of a memory-model access to a `dt` element.
fn flag_type(dt: DType) -> R<(&'static str, Class)> {
    Ok(match dt {
        DType::F32 => ("f32", Class::F32),
        DType::I32 | DType::U32 => ("b32", Class::B32),
        DType::I64 | DType::U64 => ("b64", Class::B64),
        other => return Err(format!("a memory-model access of a {other} element")),
    })
}

/// `.sem.scope` of a load, store or reduction (`.volatile` has no scope; weak is plain).
fn mem_qualifier(sem: tl_ir::MemSem, scope: tl_ir::MemScope) -> String {
    match sem {
        tl_ir::MemSem::Weak => String::new(),
        tl_ir::MemSem::Volatile => ".volatile".into(),
        s => format!(".{}.{}", s.name(), scope.name()),
    }
}
