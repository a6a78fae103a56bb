//! One thread's execution: evaluating expressions and running instructions until the thread
//! reaches a synchronization point (a block barrier or a warp collective) or the end.
//!
//! Arithmetic is `tl_ir::eval`'s (`apply_bin`, `apply_unary`, `apply_cast`, `apply_cmp`), with
//! narrow floats computed in f32 (see `compile::compute_dtype`). Per-thread intrinsics
//! (`cp.async`, commit/wait, vector copies, atomics) run here; collectives only record their
//! operands here and run in `sched` once the whole warp has arrived.

use tl_ir::eval::{
    apply_bin, apply_cast, apply_cmp, apply_unary, floordiv_i, floormod_i, wrap_int, EvalError,
    Value,
};
use tl_ir::{BinOp, DType, MemSem, Scope};

use crate::bytecode::{Instr, MemRef, Program, PureFn, E};
use crate::compile::compute_dtype;
use crate::cp_async::{AsyncGroups, Copy, CpState};
use crate::elem;
use crate::error::SimError;
use crate::memory::Mem;
use crate::race::{Kind, Rec};

/// Where a thread stands between scheduler rounds.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum State {
    /// Can run.
    Ready,
    /// Waits at the block barrier (`SyncThreads` or `BarrierLds`), or a named barrier, at its
    /// pc.
    Barrier,
    /// Waits at the warp collective (or `SyncWarp`) at its pc, operands in its stash.
    Warp,
    /// Waits (`mbarrier_wait` at its pc) for a phase of the mbarrier in its stash.
    MbarWait,
    /// Waits (`wait_until` at its pc) for the flag in its stash to compare true.
    FlagWait,
    /// Waits at the cluster barrier (`ClusterSync`) at its pc.
    ClusterWait,
    /// Waits (`setmaxnreg.inc` at its pc) for the block's pool to have its registers free.
    RegWait,
    Done,
}

/// A resolved element address: buffer and flat element index (not yet range-checked).
#[derive(Clone, Copy, Debug, Default)]
pub struct Loc {
    pub buf: u32,
    pub elem: i64,
}

/// The operands a thread brings to a collective.
#[derive(Clone, Copy, Debug)]
pub enum Stash {
    None,
    Shfl(Value, i64),
    Addrs([Loc; 4]),
    /// A wgmma's D, A, B, its `scale_d` and B's block distance in bytes.
    Wgmma([Loc; 3], i64, i64),
    /// A buffer load's operands (AMD `buffer_load … lds`).
    BufLds(BufLds),
    /// The mbarrier (index in `Mbars`) and parity an `mbarrier_wait` waits for.
    Mbar(u32, u32),
    /// The flag a `wait_until` waits for.
    Flag(FlagWait),
}

/// A flag a thread waits for: rank `rank`'s element at byte `off` of `buf` compared with
/// `value`.
#[derive(Clone, Copy, Debug)]
pub struct FlagWait {
    pub rank: i64,
    pub buf: u32,
    pub off: usize,
    pub cmp: tl_ir::CmpOp,
    pub value: Value,
    pub scope: tl_ir::MemScope,
    /// Compare `flag − value` with zero (serial-number arithmetic).
    pub wrapping: bool,
}

/// One lane's operands of an AMD `buffer_load … lds`.
#[derive(Clone, Copy, Debug)]
pub struct BufLds {
    pub base: Loc,
    pub tensor: Loc,
    pub voffset: i64,
    pub soffset: i64,
    pub pred: bool,
}

/// A thread's operands of an AMD `buffer_load` into registers.
#[derive(Clone, Copy, Debug)]
pub struct BufLoad {
    pub dst: Loc,
    pub tensor: Loc,
    pub voffset: i64,
    pub soffset: i64,
    pub pred: bool,
}

/// Accumulator bytes a wgmma will write when its group is waited for.
#[derive(Clone, Debug)]
pub struct PendingWrite {
    pub buf: u32,
    pub off: usize,
    pub bytes: Vec<u8>,
    /// The absolute shared bytes the wgmma read (held by one lane of the warp), free to be
    /// overwritten once this retires.
    pub shared_reads: Vec<usize>,
}

pub struct Thread {
    pub tid: u32,
    pub pc: u32,
    pub state: State,
    pub regs: Vec<Value>,
    pub local: Vec<u8>,
    pub stash: Stash,
    pub cp: CpState,
    /// wgmma results in flight (they land at `wgmma.wait_group`).
    pub wg: AsyncGroups<PendingWrite>,
    /// TMA stores in flight: the absolute shared bytes each still reads.
    pub bulk: AsyncGroups<Vec<usize>>,
    /// Registers the thread holds: the launch's count (`tl_ir::launch_registers`) until a
    /// `setmaxnreg` changes it.
    pub reg_count: u32,
}

/// Counters for the report.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    pub instructions: u64,
    pub barriers: u64,
    pub warp_syncs: u64,
    pub collectives: u64,
    pub cp_async: u64,
    pub cp_async_unwaited: u64,
    pub tma_copies: u64,
    pub tma_unlanded: u64,
}

pub struct Interp<'p, 'g> {
    pub prog: &'p Program,
    pub mem: Mem<'p, 'g>,
    pub stats: Stats,
    pub max_steps: u64,
    /// Concurrent runs: a thread stops right after a flag store or reduction, so that the
    /// blocks it may wake run before the signaller goes on (the earliest a GPU could run
    /// them, where premature reads show).
    pub yield_on_signal: bool,
    /// Set when a thread stopped for that reason.
    pub signalled: bool,
}

/// `apply_bin` for the index arithmetic that dominates kernels (i32/i64, no division by
/// zero), without its general path; the results are the same.
#[inline]
fn fast_int(op: BinOp, x: i64, y: i64, dt: DType) -> Option<i64> {
    let r = match op {
        BinOp::Add => x.wrapping_add(y),
        BinOp::Sub => x.wrapping_sub(y),
        BinOp::Mul => x.wrapping_mul(y),
        BinOp::Div if y != 0 => x.wrapping_div(y),
        BinOp::Mod if y != 0 => x.wrapping_rem(y),
        BinOp::FloorDiv if y != 0 => floordiv_i(x, y),
        BinOp::FloorMod if y != 0 => floormod_i(x, y),
        BinOp::Min => x.min(y),
        BinOp::Max => x.max(y),
        BinOp::BitAnd => x & y,
        BinOp::BitOr => x | y,
        BinOp::BitXor => x ^ y,
        _ => return None,
    };
    match dt {
        DType::I32 => Some(r as i32 as i64),
        DType::I64 => Some(r),
        _ => None,
    }
}

pub fn rec(tid: u32, kind: Kind, pc: u32) -> Rec {
    Rec {
        tid: tid as u16,
        kind,
        pc,
    }
}

impl Interp<'_, '_> {
    fn eval_err(&self, e: EvalError, tid: u32, pc: u32) -> SimError {
        match e {
            EvalError::DivByZero(detail) => SimError::DivisionByZero {
                block: self.mem.block,
                thread: tid,
                span: self.prog.span(pc as usize),
                detail,
            },
            other => SimError::InvalidIr(format!("{other} at {}", self.prog.span(pc as usize))),
        }
    }

    pub fn eval(&mut self, th: &Thread, e: &E, pc: u32) -> Result<Value, SimError> {
        Ok(match e {
            E::Const(v) => *v,
            E::Reg(r) => th.regs[*r as usize],
            E::ThreadIdx => Value::Int(th.tid as i64),
            E::WaveIdx => Value::Int((th.tid / self.prog.warp_size) as i64),
            E::ClusterCtaRank => Value::Int(self.cluster_rank() as i64),
            E::Bin(op, dt, ab) => {
                let a = self.eval(th, &ab.0, pc)?;
                let b = self.eval(th, &ab.1, pc)?;
                if let (Value::Int(x), Value::Int(y)) = (a, b) {
                    if let Some(v) = fast_int(*op, x, y, *dt) {
                        return Ok(Value::Int(v));
                    }
                }
                apply_bin(*op, a, b, *dt).map_err(|x| self.eval_err(x, th.tid, pc))?
            }
            E::Cmp(op, dt, ab) => {
                let a = self.eval(th, &ab.0, pc)?;
                let b = self.eval(th, &ab.1, pc)?;
                Value::Bool(apply_cmp(*op, a, b, *dt))
            }
            E::And(ab) => Value::Bool(
                self.eval(th, &ab.0, pc)?.truthy() && self.eval(th, &ab.1, pc)?.truthy(),
            ),
            E::Or(ab) => Value::Bool(
                self.eval(th, &ab.0, pc)?.truthy() || self.eval(th, &ab.1, pc)?.truthy(),
            ),
            E::Un(op, dt, a) => apply_unary(*op, self.eval(th, a, pc)?, *dt),
            E::Select(cab) => {
                let c = self.eval(th, &cab.0, pc)?;
                let a = self.eval(th, &cab.1, pc)?;
                let b = self.eval(th, &cab.2, pc)?;
                if c.truthy() {
                    a
                } else {
                    b
                }
            }
            E::IfThenElse(cab) => {
                if self.eval(th, &cab.0, pc)?.truthy() {
                    self.eval(th, &cab.1, pc)?
                } else {
                    self.eval(th, &cab.2, pc)?
                }
            }
            E::Cast(dt, a) => apply_cast(self.eval(th, a, pc)?, *dt),
            E::Load(m) => {
                let (buf, off) = self.index(th, m, pc)?;
                self.load(th, buf, off, pc)?
            }
            E::MemAtomAdd(mvp, sem, scope) => {
                let (m, value, peer) = &**mvp;
                let v = self.eval(th, value, pc)?;
                let (buf, off) = self.index(th, m, pc)?;
                let rank = match peer {
                    Some(p) => self.eval(th, p, pc)?.as_i64(),
                    None => self.mem.rank as i64,
                };
                self.atom_add(th, (rank, buf, off), v, (*sem, *scope), pc)?
            }
            E::MemLoad(m, peer, sem, scope) => {
                let (buf, off) = self.index(th, m, pc)?;
                let rank = match peer {
                    Some(p) => self.eval(th, p, pc)?.as_i64(),
                    None => self.mem.rank as i64,
                };
                let v = self.mem_load(th, rank, buf, off, pc)?;
                let n = self.mem.info(buf).dtype.bytes();
                if *sem == MemSem::Weak {
                    self.mem
                        .order_access(rank as usize, buf, off, n, th.tid, pc, false)?;
                } else {
                    let key = (rank as usize, buf, off);
                    self.order_load(key, th.tid, sem.acquires(), *scope, pc)?;
                }
                v
            }
            E::Pure(f, dt, args) => {
                let mut v = [Value::Int(0); 2];
                for (slot, a) in v.iter_mut().zip(args) {
                    *slot = self.eval(th, a, pc)?;
                }
                let dt = compute_dtype(*dt);
                match f {
                    PureFn::Unary(op) => apply_unary(*op, v[0], dt),
                    PureFn::Min | PureFn::Max | PureFn::Div => {
                        let op = match f {
                            PureFn::Min => BinOp::Min,
                            PureFn::Max => BinOp::Max,
                            _ => BinOp::Div,
                        };
                        apply_bin(op, v[0], v[1], dt).map_err(|x| self.eval_err(x, th.tid, pc))?
                    }
                }
            }
        })
    }

    /// The byte offset of a `Load`/`Store` element, with every index checked against its
    /// extent (one index: against the flat size).
    fn index(&mut self, th: &Thread, m: &MemRef, pc: u32) -> Result<(u32, usize), SimError> {
        let info = self.mem.info(m.buf);
        let esize = info.dtype.bytes();
        if let [i] = m.idx.as_slice() {
            let i = self.eval(th, i, pc)?.as_i64();
            if i < 0 || i >= info.numel {
                return Err(self.mem.oob(m.buf, vec![i], vec![info.numel], th.tid, pc));
            }
            return Ok((m.buf, i as usize * esize));
        }
        let mut flat: i64 = 0;
        let mut bad = false;
        let mut idx = Vec::with_capacity(m.idx.len());
        for (d, e) in m.idx.iter().enumerate() {
            let i = self.eval(th, e, pc)?.as_i64();
            let ext = info.shape.get(d).copied().unwrap_or(1);
            bad |= i < 0 || i >= ext;
            flat = flat.wrapping_mul(ext).wrapping_add(i);
            idx.push(i);
        }
        if bad {
            return Err(self.mem.oob(m.buf, idx, info.shape.clone(), th.tid, pc));
        }
        Ok((m.buf, flat as usize * esize))
    }

    /// An intrinsic's address: the flat element it names (range-checked at the access, since
    /// a predicated-off `cp.async` may name any address).
    pub fn addr(&mut self, th: &Thread, m: &MemRef, pc: u32) -> Result<Loc, SimError> {
        let info = self.mem.info(m.buf);
        if let [i] = m.idx.as_slice() {
            let elem = self.eval(th, i, pc)?.as_i64();
            return Ok(Loc { buf: m.buf, elem });
        }
        let mut flat: i64 = 0;
        for (d, e) in m.idx.iter().enumerate() {
            let i = self.eval(th, e, pc)?.as_i64();
            let ext = info.shape.get(d).copied().unwrap_or(1);
            flat = flat.wrapping_mul(ext).wrapping_add(i);
        }
        Ok(Loc {
            buf: m.buf,
            elem: flat,
        })
    }

    fn load(&mut self, th: &Thread, buf: u32, off: usize, pc: u32) -> Result<Value, SimError> {
        let dt = self.mem.info(buf).dtype;
        let b = self
            .mem
            .read(&th.local, buf, off, dt.bytes(), rec(th.tid, Kind::Load, pc))?;
        Ok(elem::decode(&b, dt))
    }

    /// `bar.arrive`: count the thread into the barrier's current phase and go on; the
    /// scheduler completes the phase once the threads waiting at it and those arrived make
    /// its count (`sched::release_named_barriers`).
    fn named_arrive(&mut self, id: u32, threads: u32, tid: u32, pc: u32) -> Result<(), SimError> {
        let e = self.mem.named_arrivals.entry(id).or_insert((threads, 0));
        if e.0 != threads || e.1 >= threads {
            let (counts, arrived) = *e;
            return Err(SimError::NamedBarrier {
                block: self.mem.block,
                id,
                threads: counts,
                arrived,
                waiting: tid,
                barrier: self.prog.span(pc as usize),
                detail: if counts != threads {
                    format!("thread {tid} arrives at it counting {threads}")
                } else {
                    format!("thread {tid} arrives at a phase every counted thread has reached")
                },
            });
        }
        e.1 += 1;
        Ok(())
    }

    /// Run `th` until it blocks or finishes.
    pub fn run_thread(&mut self, th: &mut Thread) -> Result<(), SimError> {
        let prog = self.prog;
        loop {
            self.stats.instructions += 1;
            let pc = th.pc;
            if self.stats.instructions > self.max_steps {
                return Err(SimError::StepLimit {
                    limit: self.max_steps,
                    block: self.mem.block,
                    thread: th.tid,
                    span: prog.span(pc as usize),
                });
            }
            let Some(ins) = prog.code.get(pc as usize) else {
                th.state = State::Done;
                return Ok(());
            };
            th.pc += 1;
            match ins {
                Instr::Set { reg, value } => {
                    let v = self.eval(th, value, pc)?;
                    th.regs[*reg as usize] = v;
                }
                Instr::Store { dst, value } => {
                    let v = self.eval(th, value, pc)?;
                    let (buf, off) = self.index(th, dst, pc)?;
                    let dt = self.mem.info(buf).dtype;
                    let bytes = elem::encode_array(v, dt);
                    self.mem.write(
                        &mut th.local,
                        buf,
                        off,
                        &bytes[..dt.bytes()],
                        rec(th.tid, Kind::Write, pc),
                    )?;
                }
                Instr::Eval(e) => {
                    self.eval(th, e, pc)?;
                }
                Instr::Jump(t) => th.pc = *t,
                Instr::BranchIfNot { cond, target } => {
                    if !self.eval(th, cond, pc)?.truthy() {
                        th.pc = *target;
                    }
                }
                Instr::ForInit {
                    var,
                    end,
                    min,
                    extent,
                } => {
                    let lo = self.eval(th, min, pc)?.as_i64();
                    let n = self.eval(th, extent, pc)?.as_i64();
                    th.regs[*var as usize] = Value::Int(lo);
                    th.regs[*end as usize] = Value::Int(lo.saturating_add(n));
                }
                Instr::ForTest { var, end, exit } => {
                    if th.regs[*var as usize].as_i64() >= th.regs[*end as usize].as_i64() {
                        th.pc = *exit;
                    }
                }
                Instr::ForStep { var, dtype, test } => {
                    let v = th.regs[*var as usize].as_i64();
                    th.regs[*var as usize] = Value::Int(wrap_int(v as i128 + 1, *dtype));
                    th.pc = *test;
                }
                Instr::SyncThreads | Instr::BarrierLds | Instr::NamedBarrier { .. } => {
                    th.pc = pc;
                    th.state = State::Barrier;
                    return Ok(());
                }
                Instr::SyncWarp => {
                    th.pc = pc;
                    th.stash = Stash::None;
                    th.state = State::Warp;
                    return Ok(());
                }
                Instr::Shfl { value, arg, .. } => {
                    let v = self.eval(th, value, pc)?;
                    let a = self.eval(th, arg, pc)?.as_i64();
                    th.pc = pc;
                    th.stash = Stash::Shfl(v, a);
                    th.state = State::Warp;
                    return Ok(());
                }
                Instr::Ldmatrix { src, dst, .. } | Instr::LdsReadTr16 { src, dst } => {
                    let s = self.addr(th, src, pc)?;
                    let d = self.addr(th, dst, pc)?;
                    th.pc = pc;
                    th.stash = Stash::Addrs([s, d, Loc::default(), Loc::default()]);
                    th.state = State::Warp;
                    return Ok(());
                }
                Instr::Mma { d, a, b, c, .. } | Instr::Mfma { d, a, b, c, .. } => {
                    let locs = [
                        self.addr(th, d, pc)?,
                        self.addr(th, a, pc)?,
                        self.addr(th, b, pc)?,
                        self.addr(th, c, pc)?,
                    ];
                    th.pc = pc;
                    th.stash = Stash::Addrs(locs);
                    th.state = State::Warp;
                    return Ok(());
                }
                Instr::CpAsync {
                    bytes,
                    dst,
                    src,
                    pred,
                } => self.cp_async(th, *bytes as usize, dst, src, pred, pc)?,
                Instr::BufferLoadLds {
                    base,
                    tensor,
                    voffset,
                    soffset,
                    pred,
                    ..
                } => {
                    let ops = BufLds {
                        base: self.addr(th, base, pc)?,
                        tensor: self.addr(th, tensor, pc)?,
                        voffset: self.eval(th, voffset, pc)?.as_i64(),
                        soffset: self.eval(th, soffset, pc)?.as_i64(),
                        pred: self.eval(th, pred, pc)?.truthy(),
                    };
                    th.pc = pc;
                    th.stash = Stash::BufLds(ops);
                    th.state = State::Warp;
                    return Ok(());
                }
                Instr::Wgmma {
                    d,
                    a,
                    b,
                    scale,
                    b_lbo,
                    ..
                } => {
                    let locs = [
                        self.addr(th, d, pc)?,
                        self.addr(th, a, pc)?,
                        self.addr(th, b, pc)?,
                    ];
                    let s = self.eval(th, scale, pc)?.as_i64();
                    let lbo = self.eval(th, b_lbo, pc)?.as_i64();
                    th.pc = pc;
                    th.stash = Stash::Wgmma(locs, s, lbo);
                    th.state = State::Warp;
                    return Ok(());
                }
                Instr::FenceProxyAsync => {
                    let epoch = self.mem.epoch;
                    if let Some(f) = self.mem.proxy_fences.get_mut(th.tid as usize) {
                        f.push(epoch);
                    }
                }
                Instr::Print { msg, value } => {
                    let v = match self.eval(th, value, pc)? {
                        Value::Int(i) => i.to_string(),
                        Value::Float(f) => format!("{f:.6}"),
                        Value::Bool(b) => (b as i32).to_string(),
                    };
                    let b = self.mem.block;
                    println!(
                        "{msg}{v} [block ({}, {}, {}), thread {}]",
                        b[0], b[1], b[2], th.tid
                    );
                }
                Instr::LaunchDependents => {}
                Instr::GridDependencyWait => {
                    if let Some(w) = self.mem.grid_waited.get_mut(th.tid as usize) {
                        *w = true;
                    }
                }
                Instr::FenceProxyAsyncGlobal => {
                    if let Some(o) = self.mem.order.as_mut() {
                        o.proxy_fence(th.tid);
                    }
                }
                Instr::WgmmaCommit => th.wg.commit(),
                Instr::WgmmaWait(n) => {
                    for w in th.wg.wait(*n) {
                        self.mem.wgmma_reads_end(&w.shared_reads);
                        let who = Rec {
                            tid: th.tid as u16,
                            kind: Kind::Write,
                            pc,
                        };
                        self.mem.write(&mut th.local, w.buf, w.off, &w.bytes, who)?;
                    }
                }
                Instr::BulkCommit => th.bulk.commit(),
                Instr::BulkWait { n, read } => {
                    for g in th.bulk.wait(*n) {
                        self.mem.wgmma_reads_end(&g);
                    }
                    // A full wait for every group: this thread's stores have landed.
                    if !*read && *n == 0 {
                        self.mem.tma_writes_land(th.tid);
                    }
                }
                Instr::TmaStore {
                    box_dims,
                    swizzle,
                    src,
                    tensor,
                    coords,
                } => self.tma_store(th, box_dims, *swizzle, (src, tensor), coords, pc)?,
                Instr::BulkStore { dst, src, bytes } => {
                    self.bulk_store(th, (dst, src), bytes, pc)?
                }
                Instr::CpCommit => th.cp.commit(),
                Instr::NamedArrive { id, threads } => {
                    self.named_arrive(*id, *threads, th.tid, pc)?
                }
                Instr::CpWait(n) => {
                    for c in th.cp.wait(*n) {
                        self.land(th.tid, c)?;
                    }
                }
                Instr::VecCopy {
                    lanes,
                    dst,
                    src,
                    pred,
                } => self.vec_copy(th, *lanes, dst, src, pred.as_ref(), pc)?,
                Instr::LoadWindow {
                    window,
                    tensor,
                    off,
                    count,
                } => {
                    let off = self.eval(th, off, pc)?.as_i64();
                    let count = self.eval(th, count, pc)?.as_i64();
                    self.load_window(th, (window, tensor), off, count, pc)?
                }
                Instr::ShiftedVecCopy { dst, src } => self.shifted_vec_copy(th, (dst, src), pc)?,
                Instr::StoreShifted {
                    dst,
                    window,
                    tensor,
                    off,
                } => {
                    let off = self.eval(th, off, pc)?.as_i64();
                    self.store_shifted(th, (dst, window, tensor), off, pc)?
                }
                Instr::BufferLoad {
                    bytes,
                    dst,
                    tensor,
                    voffset,
                    soffset,
                    pred,
                } => {
                    let op = BufLoad {
                        dst: self.addr(th, dst, pc)?,
                        tensor: self.addr(th, tensor, pc)?,
                        voffset: self.eval(th, voffset, pc)?.as_i64(),
                        soffset: self.eval(th, soffset, pc)?.as_i64(),
                        pred: self.eval(th, pred, pc)?.truthy(),
                    };
                    self.buffer_load(th, *bytes as usize, op, pc)?
                }
                Instr::AtomicAdd { addr, value, kind } => {
                    self.atomic(th, addr, value, *kind, pc)?
                }
                Instr::MemStore {
                    addr,
                    value,
                    peer,
                    add,
                    sem,
                    scope,
                } => {
                    self.mem_store(th, addr, value, peer.as_ref(), (*add, *sem, *scope), pc)?;
                    if self.yield_on_signal && *sem != MemSem::Weak {
                        self.signalled = true;
                        return Ok(());
                    }
                }
                // Threads run one at a time and every access is immediately visible to all; the
                // order checker follows what the fence would order on a GPU.
                Instr::Fence => {
                    if let Some(o) = self.mem.order.as_mut() {
                        o.fence(th.tid);
                    }
                }
                Instr::WaitUntil {
                    addr,
                    cmp,
                    value,
                    peer,
                    scope,
                    wrapping,
                } => {
                    let (buf, off) = self.index(th, addr, pc)?;
                    let rank = match peer {
                        Some(p) => self.eval(th, p, pc)?.as_i64(),
                        None => self.mem.rank as i64,
                    };
                    let w = FlagWait {
                        rank,
                        buf,
                        off,
                        cmp: *cmp,
                        value: self.eval(th, value, pc)?,
                        scope: *scope,
                        wrapping: *wrapping,
                    };
                    if !self.flag_holds(&w, th.tid, pc)? {
                        th.pc = pc;
                        th.stash = Stash::Flag(w);
                        th.state = State::FlagWait;
                        return Ok(());
                    }
                    self.order_load((w.rank as usize, w.buf, w.off), th.tid, true, w.scope, pc)?;
                }
                Instr::PeerCopy {
                    lanes,
                    put,
                    dst,
                    src,
                    peer,
                    offset,
                    batch,
                } => {
                    let p = self.eval(th, peer, pc)?.as_i64();
                    let off = self.eval(th, offset, pc)?.as_i64();
                    let own = self.mem.rank as i64;
                    let (dr, sr) = if *put { (p, own) } else { (own, p) };
                    // An unrolled copy's chunks are disjoint, so copying them one after
                    // another is what loading all first and storing after does.
                    let (n, stride) = match batch {
                        Some((u, stride, valid)) => {
                            let valid = self.eval(th, valid, pc)?.as_i64();
                            if !(1..=i64::from(*u)).contains(&valid) {
                                return Err(SimError::InvalidIr(format!(
                                    "an unrolled peer copy of {u} chunks with {valid} valid"
                                )));
                            }
                            (valid, self.eval(th, stride, pc)?.as_i64())
                        }
                        None => (1, 0),
                    };
                    for u in 0..n {
                        self.peer_copy(th, *lanes, (dst, dr), (src, sr), off + u * stride, pc)?;
                    }
                }
                Instr::PeerCopyWarp {
                    put,
                    warp,
                    dst,
                    src,
                    peer,
                    offset,
                    count,
                } => {
                    let p = self.eval(th, peer, pc)?.as_i64();
                    let off = self.eval(th, offset, pc)?.as_i64();
                    let n = self.eval(th, count, pc)?.as_i64();
                    let own = self.mem.rank as i64;
                    let (dr, sr) = if *put { (p, own) } else { (own, p) };
                    let w = i64::from((*warp).max(1));
                    let mut i = th.tid as i64 % w;
                    while i < n {
                        self.peer_copy(th, 1, (dst, dr), (src, sr), off + i, pc)?;
                        i += w;
                    }
                }
                Instr::MbarInit { bar, count } => self.mbar_init(th, bar, *count, pc)?,
                Instr::MbarArrive { bar, tx } => self.mbar_arrive(th, bar, tx.as_ref(), pc)?,
                Instr::MbarWait { bar, parity } => {
                    if !self.mbar_wait(th, bar, parity, pc)? {
                        th.pc = pc;
                        th.state = State::MbarWait;
                        return Ok(());
                    }
                }
                Instr::TmaLoad {
                    box_dims,
                    swizzle,
                    pitched,
                    dst,
                    tensor,
                    bar,
                    coords,
                    mask,
                    width,
                } => self.tma_load(
                    th,
                    box_dims,
                    (*swizzle, *pitched),
                    (dst, tensor, bar),
                    (coords, mask.as_ref(), width.as_ref()),
                    pc,
                )?,
                Instr::MbarArriveCluster { bar, rank } => {
                    self.mbar_arrive_cluster(th, bar, rank, pc)?
                }
                Instr::ClusterSync => {
                    th.pc = pc;
                    th.state = State::ClusterWait;
                    return Ok(());
                }
                Instr::SetMaxNReg { inc, regs } => {
                    let bad = |detail: String| SimError::SetMaxNReg {
                        block: self.mem.block,
                        thread: th.tid,
                        span: prog.span(pc as usize),
                        detail,
                    };
                    if !(24..=256).contains(regs) || regs % 8 != 0 {
                        return Err(bad(format!(
                            "{regs} registers: the count must be a multiple of 8 from 24 to 256"
                        )));
                    }
                    if *inc && *regs < th.reg_count {
                        return Err(bad(format!(
                            ".inc to {regs} registers below the {} the thread holds (use .dec)",
                            th.reg_count
                        )));
                    }
                    if !*inc && *regs > th.reg_count {
                        return Err(bad(format!(
                            ".dec to {regs} registers above the {} the thread holds (use .inc)",
                            th.reg_count
                        )));
                    }
                    if *inc {
                        // The scheduler grants it once the block's pool has the registers.
                        th.pc = pc;
                        th.state = State::RegWait;
                        return Ok(());
                    }
                    th.reg_count = *regs;
                }
                Instr::Exit => {
                    // Code generation waits for the thread's TMA stores to have read shared
                    // memory before it exits.
                    for g in th.bulk.wait(0) {
                        self.mem.wgmma_reads_end(&g);
                    }
                    th.pc = pc;
                    th.state = State::Done;
                    return Ok(());
                }
            }
        }
    }

    /// Issue a `cp.async`: check both ends now, read the source now, land at the wait.
    fn cp_async(
        &mut self,
        th: &mut Thread,
        bytes: usize,
        dst: &MemRef,
        src: &MemRef,
        pred: &E,
        pc: u32,
    ) -> Result<(), SimError> {
        let name = self.prog.name(pc as usize);
        let p = self.eval(th, pred, pc)?.truthy();
        let d = self.addr(th, dst, pc)?;
        let s = self.addr(th, src, pc)?;
        let (di, si) = (self.mem.info(d.buf), self.mem.info(s.buf));
        if di.scope != Scope::Shared || si.scope != Scope::Global {
            return Err(SimError::Unsupported(format!(
                "{name} from {} `{}` to {} `{}` at {} (global to shared only)",
                si.scope,
                si.name,
                di.scope,
                di.name,
                self.prog.span(pc as usize)
            )));
        }
        let doff = self.mem.range(d.buf, d.elem, bytes, th.tid, pc)?;
        self.mem.aligned(d.buf, doff, bytes, name, th.tid, pc)?;
        let mut data = [0u8; 16];
        if p {
            let soff = self.mem.range(s.buf, s.elem, bytes, th.tid, pc)?;
            self.mem.aligned(s.buf, soff, bytes, name, th.tid, pc)?;
            data = self.mem.read(
                &th.local,
                s.buf,
                soff,
                bytes,
                rec(th.tid, Kind::IntrinsicRead, pc),
            )?;
        }
        let base = self.mem.info(d.buf).base;
        let who = rec(th.tid, Kind::AsyncWrite, pc);
        let when = self.mem.when(th.tid);
        // The copy may land any time from now on.
        self.mem.check_wgmma_reads(d.buf, doff, bytes, who)?;
        self.mem
            .shadow
            .async_issue(base + doff, bytes, who, when)
            .map_err(|c| self.mem.conflict(c, d.buf, who))?;
        th.cp.issue(Copy {
            buf: d.buf,
            off: doff,
            len: bytes,
            data,
            pc,
        });
        self.stats.cp_async += 1;
        Ok(())
    }

    /// A retired `cp.async` lands in shared memory.
    pub fn land(&mut self, tid: u32, c: Copy) -> Result<(), SimError> {
        let base = self.mem.info(c.buf).base;
        let who = rec(tid, Kind::AsyncWrite, c.pc);
        self.mem.check_wgmma_reads(c.buf, c.off, c.len, who)?;
        let when = self.mem.when(tid);
        self.mem
            .shadow
            .async_land(base + c.off, c.len, who, when)
            .map_err(|x| self.mem.conflict(x, c.buf, who))?;
        let dst = self
            .mem
            .shared
            .get_mut(base + c.off..base + c.off + c.len)
            .ok_or_else(|| SimError::InvalidIr("cp.async landing outside shared memory".into()))?;
        dst.copy_from_slice(&c.data[..c.len]);
        Ok(())
    }

    fn vec_copy(
        &mut self,
        th: &mut Thread,
        lanes: u32,
        dst: &MemRef,
        src: &MemRef,
        pred: Option<&E>,
        pc: u32,
    ) -> Result<(), SimError> {
        let name = self.prog.name(pc as usize);
        let read = match pred {
            Some(p) => self.eval(th, p, pc)?.truthy(),
            None => true,
        };
        let d = self.addr(th, dst, pc)?;
        let bytes = lanes as usize * self.mem.info(d.buf).dtype.bytes();
        if !matches!(bytes, 2 | 4 | 8 | 16) {
            return Err(SimError::InvalidIr(format!(
                "{name} of {bytes} bytes at {} (2, 4, 8 or 16)",
                self.prog.span(pc as usize)
            )));
        }
        let doff = self.mem.range(d.buf, d.elem, bytes, th.tid, pc)?;
        self.mem.aligned(d.buf, doff, bytes, name, th.tid, pc)?;
        let data = if read {
            let s = self.addr(th, src, pc)?;
            let soff = self.mem.range(s.buf, s.elem, bytes, th.tid, pc)?;
            self.mem.aligned(s.buf, soff, bytes, name, th.tid, pc)?;
            self.mem.read(
                &th.local,
                s.buf,
                soff,
                bytes,
                rec(th.tid, Kind::IntrinsicRead, pc),
            )?
        } else {
            [0u8; 16]
        };
        self.mem.write(
            &mut th.local,
            d.buf,
            doff,
            &data[..bytes],
            rec(th.tid, Kind::Write, pc),
        )
    }

    /// `Intrinsic::LoadWindow`: the tensor's bytes in `[a0, a0 + 32)` (`a0` element `off`'s
    /// byte rounded down to 16, from the tensor's first element `tensor`, which the
    /// simulator places 256-aligned) into the 32-bit window, the bytes outside its first
    /// `count` elements zero. Reads only bytes inside the tensor, as the GPU forms do.
    fn load_window(
        &mut self,
        th: &mut Thread,
        (window, tensor): (&MemRef, &MemRef),
        off: i64,
        count: i64,
        pc: u32,
    ) -> Result<(), SimError> {
        let w = self.addr(th, window, pc)?;
        let t = self.addr(th, tensor, pc)?;
        let eb = self.mem.info(t.buf).dtype.bytes() as i64;
        if self.mem.info(w.buf).scope != Scope::Local || self.mem.info(w.buf).dtype.bytes() != 4 {
            return Err(SimError::InvalidIr(format!(
                "load_window at {}: the window is not a per-thread array of 32-bit words",
                self.prog.span(pc as usize)
            )));
        }
        let woff = self.mem.range(w.buf, w.elem, 32, th.tid, pc)?;
        // The tensor's bytes, relative to its buffer, and the window's.
        let (lo, hi) = (t.elem * eb, (t.elem + count) * eb);
        let a0 = ((t.elem + off) * eb) & !15;
        let mut data = [0u8; 32];
        // Up to each 16-byte boundary, inside the tensor's bytes (whole elements: its bounds
        // are element bounds).
        let mut at = a0.max(lo);
        while at < (a0 + 32).min(hi) {
            let n = (16 - (at & 15)).min((a0 + 32).min(hi) - at) as usize;
            let soff = self.mem.range(t.buf, at / eb, n, th.tid, pc)?;
            let b = self.mem.read(
                &th.local,
                t.buf,
                soff,
                n,
                rec(th.tid, Kind::IntrinsicRead, pc),
            )?;
            let d = (at - a0) as usize;
            data[d..d + n].copy_from_slice(&b[..n]);
            at += n as i64;
        }
        for half in 0..2 {
            self.mem.write(
                &mut th.local,
                w.buf,
                woff + 16 * half,
                &data[16 * half..16 * half + 16],
                rec(th.tid, Kind::Write, pc),
            )?;
        }
        Ok(())
    }

    /// `Intrinsic::ShiftedVecCopy`: eight 2-byte elements from any element of a shared buffer
    /// to a 16-byte-aligned one. Where the source starts mid-word the GPU forms read the whole
    /// words around it, the element before and the one after the eight: so does this, so that
    /// a read past the buffer or of an element not yet written is reported.
    fn shifted_vec_copy(
        &mut self,
        th: &mut Thread,
        (dst, src): (&MemRef, &MemRef),
        pc: u32,
    ) -> Result<(), SimError> {
        let name = self.prog.name(pc as usize);
        let d = self.addr(th, dst, pc)?;
        let s = self.addr(th, src, pc)?;
        for (what, b) in [("destination", d.buf), ("source", s.buf)] {
            let info = self.mem.info(b);
            if info.scope != Scope::Shared || info.dtype.bytes() != 2 {
                return Err(SimError::InvalidIr(format!(
                    "{name} at {}: the {what} is not a shared buffer of 2-byte elements",
                    self.prog.span(pc as usize)
                )));
            }
        }
        let soff = self.mem.range(s.buf, s.elem, 16, th.tid, pc)?;
        let data = self.mem.read(
            &th.local,
            s.buf,
            soff,
            16,
            rec(th.tid, Kind::IntrinsicRead, pc),
        )?;
        if soff % 4 == 2 {
            for elem in [s.elem - 1, s.elem + 8] {
                let off = self.mem.range(s.buf, elem, 2, th.tid, pc)?;
                self.mem.read(
                    &th.local,
                    s.buf,
                    off,
                    2,
                    rec(th.tid, Kind::IntrinsicRead, pc),
                )?;
            }
        }
        self.store_16_aligned(th, &d, &data[..16], name, pc)
    }

    /// 16 bytes stored as one vector at `d`, which must be 16-byte aligned (the shifted
    /// copies' destinations).
    fn store_16_aligned(
        &mut self,
        th: &mut Thread,
        d: &Loc,
        data: &[u8],
        name: &str,
        pc: u32,
    ) -> Result<(), SimError> {
        let doff = self.mem.range(d.buf, d.elem, 16, th.tid, pc)?;
        self.mem.aligned(d.buf, doff, 16, name, th.tid, pc)?;
        self.mem.write(
            &mut th.local,
            d.buf,
            doff,
            data,
            rec(th.tid, Kind::Write, pc),
        )
    }

    /// `Intrinsic::StoreShifted`: the window's 16 bytes from element `off`'s byte within its
    /// 16-byte unit, stored as one 16-byte-aligned vector.
    fn store_shifted(
        &mut self,
        th: &mut Thread,
        (dst, window, tensor): (&MemRef, &MemRef, &MemRef),
        off: i64,
        pc: u32,
    ) -> Result<(), SimError> {
        let name = self.prog.name(pc as usize);
        let d = self.addr(th, dst, pc)?;
        let w = self.addr(th, window, pc)?;
        let t = self.addr(th, tensor, pc)?;
        let eb = self.mem.info(t.buf).dtype.bytes() as i64;
        let woff = self.mem.range(w.buf, w.elem, 32, th.tid, pc)?;
        let mut win = [0u8; 32];
        for half in 0..2 {
            let b = self.mem.read(
                &th.local,
                w.buf,
                woff + 16 * half,
                16,
                rec(th.tid, Kind::Load, pc),
            )?;
            win[16 * half..16 * half + 16].copy_from_slice(&b);
        }
        let shift = (((t.elem + off) * eb) & 15) as usize;
        self.store_16_aligned(th, &d, &win[shift..shift + 16], name, pc)
    }

    /// A buffer load into registers: the range check is per dword (`dwordx2`/`x4` loads that
    /// straddle the tensor's end read their in-range dwords), as on CDNA hardware.
    fn buffer_load(
        &mut self,
        th: &mut Thread,
        bytes: usize,
        op: BufLoad,
        pc: u32,
    ) -> Result<(), SimError> {
        let name = self.prog.name(pc as usize);
        let span = self.prog.span(pc as usize);
        let (di, ti) = (self.mem.info(op.dst.buf), self.mem.info(op.tensor.buf));
        if di.scope != Scope::Local || ti.scope != Scope::Global {
            return Err(SimError::InvalidIr(format!(
                "{name} at {span}: loads from a global tensor into registers, not from {} `{}` into {} `{}`",
                ti.scope, ti.name, di.scope, di.name
            )));
        }
        if op.tensor.elem != 0 {
            return Err(SimError::InvalidIr(format!(
                "{name} at {span}: passes `{}`[{}] as the tensor, not the address of its first element",
                ti.name, op.tensor.elem
            )));
        }
        let doff = self.mem.range(op.dst.buf, op.dst.elem, bytes, th.tid, pc)?;
        self.mem
            .aligned(op.dst.buf, doff, bytes, name, th.tid, pc)?;
        // The range the buffer resource allows (codegen caps its record count at 2^31 - 1);
        // both offsets are 32-bit unsigned registers: a negative one is past any tensor's end.
        let tensor_bytes = (ti.bytes() as u64).min(0x7fff_ffff);
        let at = u64::from(op.voffset as u32) + u64::from(op.soffset as u32);
        let mut data = [0u8; 16];
        if op.pred {
            if at < tensor_bytes {
                self.mem
                    .aligned(op.tensor.buf, at as usize, bytes, name, th.tid, pc)?;
            }
            for dw in 0..bytes / 4 {
                let a = at + 4 * dw as u64;
                if a + 4 <= tensor_bytes {
                    let d = self.mem.read(
                        &th.local,
                        op.tensor.buf,
                        a as usize,
                        4,
                        rec(th.tid, Kind::IntrinsicRead, pc),
                    )?;
                    data[4 * dw..4 * dw + 4].copy_from_slice(&d[..4]);
                }
            }
        }
        self.mem.write(
            &mut th.local,
            op.dst.buf,
            doff,
            &data[..bytes],
            rec(th.tid, Kind::Write, pc),
        )
    }

    /// An atomic add, max or min (`kind`) of `value` into `addr`.
    fn atomic(
        &mut self,
        th: &mut Thread,
        addr: &MemRef,
        value: &E,
        kind: tl_ir::AtomicKind,
        pc: u32,
    ) -> Result<(), SimError> {
        let v = self.eval(th, value, pc)?;
        let a = self.addr(th, addr, pc)?;
        let info = self.mem.info(a.buf);
        let dt = info.dtype;
        let op = match kind {
            tl_ir::AtomicKind::Add => BinOp::Add,
            tl_ir::AtomicKind::Max => BinOp::Max,
            tl_ir::AtomicKind::Min => BinOp::Min,
        };
        let what = kind.op_name();
        if !kind.supports(dt) {
            return Err(SimError::Unsupported(format!(
                "{what} on {dt} `{}` at {}",
                info.name,
                self.prog.span(pc as usize)
            )));
        }
        let n = dt.bytes();
        let off = self.mem.range(a.buf, a.elem, n, th.tid, pc)?;
        self.mem.aligned(a.buf, off, n, what, th.tid, pc)?;
        self.mem
            .check_write(a.buf, off, n, rec(th.tid, Kind::Atomic, pc))?;
        let cell = self.mem.bytes_mut(&mut th.local, a.buf, off, n)?;
        let old = elem::decode(cell, dt);
        if dt == DType::F32 && matches!(op, BinOp::Max | BinOp::Min) {
            // As GPUs do it (one integer atomic on the bits): IEEE total order, so -0 < +0,
            // and a NaN orders by its sign bit.
            let key = |f: f32| {
                let b = f.to_bits();
                if b & 0x8000_0000 != 0 {
                    !b
                } else {
                    b | 0x8000_0000
                }
            };
            let (a, b) = (old.as_f64() as f32, v.as_f64() as f32);
            let take_new = if op == BinOp::Max {
                key(b) > key(a)
            } else {
                key(b) < key(a)
            };
            if take_new {
                cell.copy_from_slice(&b.to_le_bytes());
            }
            return Ok(());
        }
        let new = apply_bin(op, old, v, compute_dtype(dt))
            .map_err(|x| SimError::InvalidIr(x.to_string()))?;
        elem::encode(new, dt, cell);
        Ok(())
    }

    /// A memory-model load of rank `rank`'s element at byte `off` of `buf`.
    fn mem_load(
        &mut self,
        th: &Thread,
        rank: i64,
        buf: u32,
        off: usize,
        pc: u32,
    ) -> Result<Value, SimError> {
        let dt = self.mem.info(buf).dtype;
        let n = dt.bytes();
        self.mem
            .aligned(buf, off, n, self.prog.name(pc as usize), th.tid, pc)?;
        let b = self.mem.rank_bytes(rank, buf, off, n, th.tid, pc)?;
        Ok(elem::decode(b, dt))
    }

    /// Whether the flag `w` waits for compares true now.
    pub fn flag_holds(&mut self, w: &FlagWait, tid: u32, pc: u32) -> Result<bool, SimError> {
        let dt = self.mem.info(w.buf).dtype;
        let n = dt.bytes();
        let b = self.mem.rank_bytes(w.rank, w.buf, w.off, n, tid, pc)?;
        let v = elem::decode(b, dt);
        let (a, c) = (v.as_i64(), w.value.as_i64());
        if w.wrapping {
            // Serial-number arithmetic: the difference in the flag's width, as a signed value.
            let bits = 8 * n.min(8) as u32;
            let diff = (a.wrapping_sub(c) as u64) << (64 - bits);
            return Ok(w.cmp.eval((diff as i64) >> (64 - bits), 0));
        }
        Ok(if dt.is_signed_int() {
            w.cmp.eval(a, c)
        } else {
            // Unsigned flags compare as unsigned values of their width.
            let mask = if n >= 8 {
                u64::MAX
            } else {
                (1u64 << (8 * n)) - 1
            };
            w.cmp.eval(a as u64 & mask, c as u64 & mask)
        })
    }

    /// `st` (or `red.add`) of `value` into `addr` on rank `peer`.
    fn mem_store(
        &mut self,
        th: &mut Thread,
        addr: &MemRef,
        value: &E,
        peer: Option<&E>,
        (add, sem, scope): (bool, MemSem, tl_ir::MemScope),
        pc: u32,
    ) -> Result<(), SimError> {
        let v = self.eval(th, value, pc)?;
        let (buf, off) = self.index(th, addr, pc)?;
        let rank = match peer {
            Some(p) => self.eval(th, p, pc)?.as_i64(),
            None => self.mem.rank as i64,
        };
        let dt = self.mem.info(buf).dtype;
        let n = dt.bytes();
        self.mem
            .aligned(buf, off, n, self.prog.name(pc as usize), th.tid, pc)?;
        if add
            && !matches!(
                dt,
                DType::F32 | DType::I32 | DType::U32 | DType::I64 | DType::U64
            )
        {
            return Err(SimError::Unsupported(format!(
                "a reduction on {dt} `{}` at {}",
                self.mem.info(buf).name,
                self.prog.span(pc as usize)
            )));
        }
        if sem == MemSem::Weak {
            self.mem
                .order_access(rank as usize, buf, off, n, th.tid, pc, true)?;
        } else {
            // (A reduction with acquire semantics never compiles: PTX `red` has none.)
            let key = (rank as usize, buf, off);
            if let Some(o) = self.mem.order.as_mut() {
                o.store(key, th.tid, sem.releases(), scope);
            }
        }
        let cell = self.mem.rank_bytes(rank, buf, off, n, th.tid, pc)?;
        let new = if add {
            let old = elem::decode(cell, dt);
            apply_bin(BinOp::Add, old, v, compute_dtype(dt))
                .map_err(|x| SimError::InvalidIr(x.to_string()))?
        } else {
            v
        };
        elem::encode(new, dt, cell);
        Ok(())
    }

    /// Copy `lanes` elements between global buffers on (possibly) different ranks. An access
    /// of this rank's own copy goes through the race checker; a peer's does not.
    fn peer_copy(
        &mut self,
        th: &mut Thread,
        lanes: u32,
        (dst, dr): (&MemRef, i64),
        (src, sr): (&MemRef, i64),
        offset: i64,
        pc: u32,
    ) -> Result<(), SimError> {
        let name = self.prog.name(pc as usize);
        let mut d = self.addr(th, dst, pc)?;
        let mut s = self.addr(th, src, pc)?;
        d.elem += offset;
        s.elem += offset;
        let bytes = lanes as usize * self.mem.info(d.buf).dtype.bytes();
        if !matches!(bytes, 1 | 2 | 4 | 8 | 16) {
            return Err(SimError::InvalidIr(format!(
                "{name} of {bytes} bytes at {} (1, 2, 4, 8 or 16)",
                self.prog.span(pc as usize)
            )));
        }
        let doff = self.mem.range(d.buf, d.elem, bytes, th.tid, pc)?;
        self.mem.aligned(d.buf, doff, bytes, name, th.tid, pc)?;
        let soff = self.mem.range(s.buf, s.elem, bytes, th.tid, pc)?;
        self.mem.aligned(s.buf, soff, bytes, name, th.tid, pc)?;
        let own = self.mem.rank as i64;
        let mut data = [0u8; 16];
        if sr == own {
            data = self.mem.read(
                &th.local,
                s.buf,
                soff,
                bytes,
                rec(th.tid, Kind::IntrinsicRead, pc),
            )?;
        } else {
            self.mem
                .order_access(sr as usize, s.buf, soff, bytes, th.tid, pc, false)?;
            data[..bytes].copy_from_slice(self.mem.rank_bytes(sr, s.buf, soff, bytes, th.tid, pc)?);
        }
        if dr == own {
            self.mem.write(
                &mut th.local,
                d.buf,
                doff,
                &data[..bytes],
                rec(th.tid, Kind::Write, pc),
            )
        } else {
            self.mem
                .order_access(dr as usize, d.buf, doff, bytes, th.tid, pc, true)?;
            self.mem
                .rank_bytes(dr, d.buf, doff, bytes, th.tid, pc)?
                .copy_from_slice(&data[..bytes]);
            Ok(())
        }
    }

    /// `atom.add` on rank `rank`'s element at byte `off` of `buf`: the old value.
    fn atom_add(
        &mut self,
        th: &Thread,
        (rank, buf, off): (i64, u32, usize),
        v: Value,
        (sem, scope): (MemSem, tl_ir::MemScope),
        pc: u32,
    ) -> Result<Value, SimError> {
        let dt = self.mem.info(buf).dtype;
        let n = dt.bytes();
        if !matches!(dt, DType::I32 | DType::U32 | DType::I64 | DType::U64) {
            return Err(SimError::Unsupported(format!(
                "an atomic add on {dt} `{}` at {} (integers only)",
                self.mem.info(buf).name,
                self.prog.span(pc as usize)
            )));
        }
        self.mem
            .aligned(buf, off, n, self.prog.name(pc as usize), th.tid, pc)?;
        let key = (rank as usize, buf, off);
        self.order_load(key, th.tid, sem.acquires(), scope, pc)?;
        if let Some(o) = self.mem.order.as_mut() {
            o.store(key, th.tid, sem.releases(), scope);
        }
        let cell = self.mem.rank_bytes(rank, buf, off, n, th.tid, pc)?;
        let old = elem::decode(cell, dt);
        let new = apply_bin(BinOp::Add, old, v, compute_dtype(dt))
            .map_err(|x| SimError::InvalidIr(x.to_string()))?;
        elem::encode(new, dt, cell);
        Ok(old)
    }

    /// The order checker's view of a flag load (acquire or relaxed) at `scope`.
    pub fn order_load(
        &mut self,
        key: (usize, u32, usize),
        tid: u32,
        acquire: bool,
        scope: tl_ir::MemScope,
        pc: u32,
    ) -> Result<(), SimError> {
        let Some(o) = self.mem.order.as_mut() else {
            return Ok(());
        };
        o.load(key, tid, acquire, scope).map_err(|n| {
            let info = self.mem.info(key.1);
            SimError::ScopeTooNarrow {
                flag: info.name.clone(),
                detail: format!(
                    "the acquire of `{}`[{}] on rank {} by {} (.{}) reads a release by thread {} of block [{}, {}, {}] on rank {} (.{}); between these threads both need .{} scope (.cta orders a block, .gpu one GPU, .sys every rank)",
                    info.name,
                    key.2 / info.dtype.bytes().max(1),
                    key.0,
                    crate::order::describe(&n.acquirer, self.prog.span(pc as usize)),
                    n.acquire_scope.name(),
                    n.releaser.thread,
                    n.releaser.block[0],
                    n.releaser.block[1],
                    n.releaser.block[2],
                    n.releaser.rank,
                    n.release_scope.name(),
                    n.needed.name()
                ),
            }
        })
    }
}
