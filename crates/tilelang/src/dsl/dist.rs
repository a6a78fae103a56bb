//! Multi-rank kernels (the TileScale model): symmetric buffers every rank allocates alike,
//! whose peers' copies a kernel reads and writes by rank; loads and stores with memory-model
//! semantics; signals, waits and fences. The same kernel runs on every rank, with its rank
//! and the number of ranks as scalar parameters.
//!
//! Every statement here runs on each thread that reaches it (guard it with
//! `t.if_(t.thread_idx().eq(0), ..)` where one thread should signal), except
//! [`put_block`](TileScope::put_block) and [`get_block`](TileScope::get_block), which the
//! whole block runs together.

use tl_ir::{
    CmpOp, DType, DiagKind, Diagnostic, DistAttrs, Expr, ExprKind, Intrinsic, MemScope, MemSem,
    Role, Scope, StmtKind, Var,
};

use super::args::IntoExprs;
use super::builder::KernelBuilder;
use super::scope::TileScope;

/// Chunks of 16 bytes (or the widest the sizes allow) each thread moves per round of a
/// `put_*`/`get_*` copy, all loaded before any is stored. A pull waits a round trip over
/// NVLink per load: with one load in flight per thread, 64 blocks per peer pulled 204 GB/s
/// between two H100s where pushes moved 335 (docs/performance.md, session 19).
const PEER_COPY_UNROLL: i64 = 4;

/// Make a multi-rank kernel address its peers through tables instead of the flat heap: every
/// symmetric tensor parameter `X` gets a companion `X_peers` (`[NR]` i64, each rank's address
/// of its `X`), after the other tensors and scalars and before `rank`, `num_ranks` and
/// `heap_stride` (which stays, unused), and `NR` must equal `num_ranks` at launch. The kernel's
/// body is unchanged: peer addressing is chosen when code is generated, from
/// [`DistAttrs::peer_tables`]. Kernels with tables already, or with no symmetric buffer, are
/// left as they are.
pub(crate) fn add_peer_tables(k: &mut tl_ir::Kernel) {
    let taken: std::collections::HashSet<String> = k
        .params
        .iter()
        .map(|p| match p {
            tl_ir::Param::Tensor { buffer, .. } => buffer.name().to_string(),
            tl_ir::Param::Scalar(v) => v.name().to_string(),
        })
        .chain(k.dims.iter().map(|v| v.name().to_string()))
        .collect();
    let unique = |base: &str| {
        (1..)
            .map(|i| match i {
                1 => base.to_string(),
                _ => format!("{base}_{i}"),
            })
            .find(|n| !taken.contains(n))
            .unwrap_or_else(|| base.to_string())
    };
    let Some(d) = k.attrs.dist.as_mut() else {
        return;
    };
    if !d.peer_tables.is_empty() || d.symmetric.is_empty() || d.nvshmem {
        return;
    }
    let nr = Var::new(unique("NR"), DType::I32);
    // The rank scalars close the parameter list; the tables go just before them.
    let at = k
        .params
        .iter()
        .position(|p| matches!(p, tl_ir::Param::Scalar(v) if v.id() == d.rank.id()))
        .unwrap_or(k.params.len());
    let tail = k.params.split_off(at);
    let symmetric: Vec<tl_ir::Buffer> = k
        .params
        .iter()
        .filter_map(|p| match p {
            tl_ir::Param::Tensor { buffer, .. } if d.symmetric.contains(&buffer.id()) => {
                Some(buffer.clone())
            }
            _ => None,
        })
        .collect();
    for b in symmetric {
        let t = tl_ir::Buffer::new(
            unique(&format!("{}_peers", b.name())),
            vec![nr.expr()],
            DType::I64,
            Scope::Global,
            b.span(),
        );
        k.params.push(tl_ir::Param::Tensor {
            buffer: t.clone(),
            role: Role::Input,
        });
        d.peer_tables.push((b.id(), t));
    }
    k.params.extend(tail);
    d.rank_dims.push(nr.clone());
    k.dims.push(nr);
}

/// This rank and the number of ranks, as expressions of the kernel's scalar parameters.
#[derive(Clone, Debug)]
pub struct Dist {
    pub rank: Expr,
    pub num_ranks: Expr,
}

/// How a signal changes its flag.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SignalOp {
    Set,
    Add,
}

impl KernelBuilder {
    /// Make this a multi-rank kernel: adds the scalar parameters `rank` (i32), `num_ranks`
    /// (i32) and `heap_stride` (i64, the bytes between consecutive ranks' symmetric heaps,
    /// which the runtime maps into one address range), in that order after all the others.
    /// Idempotent.
    pub fn distributed(&mut self) -> Dist {
        if let Some(d) = &self.state.borrow().attrs.dist {
            return Dist {
                rank: d.rank.expr(),
                num_ranks: d.num_ranks.expr(),
            };
        }
        // `finish` appends them to the parameters, after the user's.
        let var = |name: &str, dt: DType| Var::new(self.state.borrow_mut().unique(name), dt);
        let (rank, num_ranks, heap_stride) = (
            var("rank", DType::I32),
            var("num_ranks", DType::I32),
            var("heap_stride", DType::I64),
        );
        let d = Dist {
            rank: rank.expr(),
            num_ranks: num_ranks.expr(),
        };
        self.state.borrow_mut().attrs.dist = Some(DistAttrs {
            rank,
            num_ranks,
            heap_stride,
            symmetric: vec![],
            peer_tables: vec![],
            rank_dims: vec![],
            nvshmem: false,
        });
        d
    }

    /// A symbolic size that counts the ranks (as `k.dim`), for buffers with a row per rank:
    /// a launch whose tensors make it differ from `num_ranks` is refused, naming both. Makes
    /// the kernel distributed.
    #[track_caller]
    pub fn ranks_dim(&mut self, name: &str) -> Expr {
        self.distributed();
        let e = self.dim(name);
        if let Some(v) = self.dims.iter().find(|d| d.expr() == e).cloned() {
            if let Some(d) = self.state.borrow_mut().attrs.dist.as_mut() {
                d.rank_dims.push(v);
            }
        }
        e
    }

    /// Address peers through tables instead of the flat heap: every symmetric buffer `X` gets
    /// a companion parameter `X_peers` (`[NR]` i64: each rank's address of its `X`, as torch's
    /// symmetric memory gives them in `buffer_ptrs_dev`), after the user's parameters and
    /// before `rank`, `num_ranks`, `heap_stride` (then unused). For memory another library
    /// allocated and mapped.
    pub fn peer_tables(&mut self) {
        self.distributed();
        self.state.borrow_mut().peer_tables = true;
    }

    /// A tensor in the symmetric heap: every rank has a copy of the same shape at the same
    /// heap offset, which peers may read and write (`put_block`, `st` on a peer, signals).
    /// Read and written by the kernel (its role is in-out). Makes the kernel distributed.
    #[track_caller]
    pub fn symmetric(&mut self, name: &str, shape: impl IntoExprs, dtype: DType) -> tl_ir::Buffer {
        self.distributed();
        let b = self.param(name, shape, dtype, Role::InOut);
        if let Some(d) = self.state.borrow_mut().attrs.dist.as_mut() {
            d.symmetric.push(b.id());
        }
        b
    }
}

/// The buffer and indices of an element argument (`buf.at([..])`).
fn element(e: &Expr) -> Option<(&tl_ir::Buffer, &[Expr])> {
    match e.kind() {
        ExprKind::Load(b, idx) => Some((b, idx.as_slice())),
        _ => None,
    }
}

/// Who copies in a `put_*` / `get_*`: the whole block, or one warp (its 32 lanes).
#[derive(Clone, Copy, PartialEq, Eq)]
enum CopyGroup {
    Block,
    Warp,
}

fn address_of(e: Expr) -> Expr {
    Expr::call(Intrinsic::AddressOf, vec![e], DType::U64)
}

/// The flat (row-major) element offset of `idx` in `b`.
fn flatten(b: &tl_ir::Buffer, idx: &[Expr]) -> Expr {
    let mut flat = Expr::int(0);
    for (i, ext) in idx.iter().zip(b.shape()) {
        flat = flat * ext.clone() + i.clone();
    }
    tl_ir::simplify(&flat)
}

impl TileScope {
    fn dist(&self, what: &str, span: tl_ir::Span) -> Option<DistAttrs> {
        let d = self.state.borrow().attrs.dist.clone();
        if d.is_none() {
            self.error(
                Diagnostic::new(
                    DiagKind::InvalidArgument,
                    span,
                    format!("`{what}` in a kernel that is not distributed"),
                )
                .help("call `k.distributed()` (or declare a `k.symmetric(..)` buffer) before the launch"),
            );
        }
        d
    }

    /// This rank (i32). An error outside a distributed kernel.
    #[track_caller]
    pub fn rank(&self) -> Expr {
        let span = self.here();
        self.dist("rank", span)
            .map_or(Expr::int(0), |d| d.rank.expr())
    }

    /// The number of ranks (i32). An error outside a distributed kernel.
    #[track_caller]
    pub fn num_ranks(&self) -> Expr {
        let span = self.here();
        self.dist("num_ranks", span)
            .map_or(Expr::int(1), |d| d.num_ranks.expr())
    }

    /// Check an element argument: a global buffer's element, and a symmetric one where a
    /// peer is named. Reports and returns false otherwise.
    fn check_element(&self, what: &str, e: &Expr, peer: bool, span: tl_ir::Span) -> bool {
        let Some((b, idx)) = element(e) else {
            self.error(
                Diagnostic::new(
                    DiagKind::InvalidArgument,
                    span,
                    format!(
                        "`{what}` takes an element of a global buffer (`buf.at([..])`), got `{e}`"
                    ),
                )
                .help("pass the element itself, e.g. `flags.at([peer])`"),
            );
            return false;
        };
        if b.scope() != Scope::Global || idx.len() != b.shape().len() {
            self.error(
                Diagnostic::new(
                    DiagKind::InvalidArgument,
                    span,
                    format!(
                        "`{what}` on `{}`, a {} buffer: memory-model accesses and peer copies are for global buffers",
                        b.name(),
                        b.scope()
                    ),
                )
                .note(b.span(), format!("`{}` declared here", b.name())),
            );
            return false;
        }
        if peer {
            let symmetric = self
                .state
                .borrow()
                .attrs
                .dist
                .as_ref()
                .is_some_and(|d| d.symmetric.contains(&b.id()));
            if !symmetric {
                self.error(
                    Diagnostic::new(
                        DiagKind::InvalidArgument,
                        span,
                        format!(
                            "`{what}` names a peer's copy of `{}`, which is not a symmetric buffer",
                            b.name()
                        ),
                    )
                    .note(b.span(), format!("`{}` declared here", b.name()))
                    .help("declare it with `k.symmetric(name, shape, dtype)` so every rank has a copy peers can address"),
                );
                return false;
            }
        }
        true
    }

    /// The arguments of a memory-model intrinsic: the element's address, `values`, then the
    /// peer (when one is named).
    fn mem_args(
        &self,
        what: &str,
        elem: Expr,
        values: Vec<Expr>,
        peer: Option<Expr>,
        span: tl_ir::Span,
    ) -> Vec<Expr> {
        self.check_element(what, &elem, peer.is_some(), span);
        let dt = elem.dtype();
        let mut args = vec![address_of(elem)];
        args.extend(values.into_iter().map(|v| v.cast(dt)));
        args.extend(peer.map(|p| p.cast(DType::I32)));
        args
    }

    fn bad_sem(&self, what: &str, sem: MemSem, allowed: &str, span: tl_ir::Span) {
        self.error(
            Diagnostic::new(
                DiagKind::InvalidArgument,
                span,
                format!("{what} with {} semantics", sem.name()),
            )
            .help(format!("{what}s are {allowed}")),
        );
    }

    /// `ld.{sem}.{scope}` of an element of a global buffer: this rank's copy, or (with `peer`)
    /// that rank's copy of a symmetric buffer.
    #[track_caller]
    pub fn ld(&mut self, elem: Expr, peer: Option<Expr>, sem: MemSem, scope: MemScope) -> Expr {
        let span = self.here();
        if sem.releases() {
            self.bad_sem("a load", sem, "weak, volatile, relaxed or acquire", span);
        }
        let dt = elem.dtype();
        let args = self.mem_args("ld", elem, vec![], peer, span);
        Expr::call(Intrinsic::MemLoad { sem, scope }, args, dt)
    }

    /// `st.{sem}.{scope}` of `value` into an element (of `peer`'s copy, when given).
    #[track_caller]
    pub fn st(
        &mut self,
        elem: Expr,
        peer: Option<Expr>,
        value: impl Into<Expr>,
        sem: MemSem,
        scope: MemScope,
    ) {
        let span = self.here();
        if sem.acquires() {
            self.bad_sem("a store", sem, "weak, volatile, relaxed or release", span);
        }
        let args = self.mem_args("st", elem, vec![value.into()], peer, span);
        let call = Expr::call(Intrinsic::MemStore { sem, scope }, args, DType::Bool);
        self.push(StmtKind::Eval(call), span);
    }

    /// `red.{sem}.{scope}.add` of `value` to an element (of `peer`'s copy, when given).
    #[track_caller]
    pub fn red_add(
        &mut self,
        elem: Expr,
        peer: Option<Expr>,
        value: impl Into<Expr>,
        sem: MemSem,
        scope: MemScope,
    ) {
        let span = self.here();
        // PTX's `red` takes .relaxed or .release only (an acquire needs the old value: `atom`).
        if !matches!(sem, MemSem::Relaxed | MemSem::Release) {
            self.bad_sem(
                "a reduction",
                sem,
                "relaxed or release (for acquire semantics use `atom_add`)",
                span,
            );
        }
        let args = self.mem_args("red_add", elem, vec![value.into()], peer, span);
        let call = Expr::call(Intrinsic::MemRedAdd { sem, scope }, args, DType::Bool);
        self.push(StmtKind::Eval(call), span);
    }

    /// `atom.{sem}.{scope}.add` of `value` to an integer element (of `peer`'s copy, when
    /// given); the element's old value.
    #[track_caller]
    pub fn atom_add(
        &mut self,
        elem: Expr,
        peer: Option<Expr>,
        value: impl Into<Expr>,
        sem: MemSem,
        scope: MemScope,
    ) -> Expr {
        let span = self.here();
        if matches!(sem, MemSem::Weak | MemSem::Volatile) {
            self.bad_sem(
                "an atomic add",
                sem,
                "relaxed, acquire, release or acq_rel",
                span,
            );
        }
        if !elem.dtype().is_int() {
            self.error(
                Diagnostic::new(
                    DiagKind::InvalidArgument,
                    span,
                    format!("an atomic add with a value on a {} element", elem.dtype()),
                )
                .help("use an i32, u32, i64 or u64 element (or `red_add` for f32)"),
            );
        }
        let dt = elem.dtype();
        let args = self.mem_args("atom_add", elem, vec![value.into()], peer, span);
        let v = Expr::call(Intrinsic::MemAtomAdd { sem, scope }, args, dt);
        self.let_("old", v)
    }

    /// A barrier of all `blocks` blocks of this launch on this rank: every block's threads
    /// arrive, and none goes on before all have (and what each wrote before is visible to all
    /// after). `counter` is an i32 element of a global buffer, zero before the first launch.
    /// It holds a round number above bit 20 and the arrivals of the current round below:
    /// each block adds 1 (a release), the block that completes the round adds
    /// `2^20 − blocks` more — the count is back to zero and the round one higher — and every
    /// block waits until the counter has reached the next round (an acquire, compared as a
    /// wrapping counter). So the barrier needs no reset, keeps working when the round number
    /// wraps around, and launches with different block counts (below 2^20) may share the
    /// counter. Every block of the grid must call it the same number of times, and all blocks
    /// must be resident at once (a grid no larger than the device holds).
    #[track_caller]
    pub fn barrier_blocks(&mut self, counter: Expr, blocks: impl Into<Expr>) {
        const ROUND: i64 = 1 << 20;
        let span = self.here();
        let blocks = blocks.into().cast(DType::I32);
        self.check_element("barrier_blocks", &counter, false, span);
        self.sync_threads();
        let tid = self.thread_idx();
        self.if_(tid.eq_(0), |t| {
            let old = t.atom_add(counter.clone(), None, 1, MemSem::Release, MemScope::Gpu);
            // Unsigned arithmetic: the round number wraps around without a signed overflow.
            let old = old.cast(DType::U32);
            let arrived = t.let_(
                "arrived",
                Expr::binary(
                    tl_ir::BinOp::BitAnd,
                    old.clone(),
                    Expr::int_of(ROUND - 1, DType::U32),
                ),
            );
            let closes = (arrived.clone() + Expr::int_of(1, DType::U32))
                .eq_(blocks.clone().cast(DType::U32));
            t.if_(closes, |t| {
                t.red_add(
                    counter.clone(),
                    None,
                    Expr::int(ROUND) - blocks.clone(),
                    MemSem::Release,
                    MemScope::Gpu,
                );
            });
            let next = t.let_(
                "next_round",
                (old - arrived + Expr::int_of(ROUND, DType::U32)).cast(DType::I32),
            );
            let args = t.mem_args("barrier_blocks", counter.clone(), vec![next], None, span);
            let call = Expr::call(
                Intrinsic::WaitUntil {
                    cmp: CmpOp::Ge,
                    scope: MemScope::Gpu,
                    wrapping: true,
                },
                args,
                DType::Bool,
            );
            t.push(StmtKind::Eval(call), span);
        });
        self.sync_threads();
    }

    /// A barrier of this block with the blocks that pass the same `row` on every rank: none
    /// goes on before all have arrived, and what each wrote before (to any rank's memory) is
    /// visible to all after. `bar` is a symmetric i32 buffer `[rows, R]`, zero before the
    /// first use; row `row` of rank `q`'s copy holds, per rank, the last round that rank
    /// arrived at, so the barrier needs no reset (the NCCL inbox design).
    #[track_caller]
    pub fn barrier_ranks(&mut self, bar: &tl_ir::Buffer, row: impl Into<Expr>) {
        let span = self.here();
        let row = row.into();
        let Some(d) = self.dist("barrier_ranks", span) else {
            return;
        };
        let (rank, ranks) = (d.rank.expr(), d.num_ranks.expr());
        self.check_element(
            "barrier_ranks",
            &bar.at([row.clone(), rank.clone()]),
            true,
            span,
        );
        self.sync_threads();
        let tid = self.thread_idx();
        self.if_(tid.eq_(0), |t| {
            // This rank's own slot on its own copy: the round it last arrived at.
            let mine = t.ld(
                bar.at([row.clone(), rank.clone()]),
                None,
                MemSem::Relaxed,
                MemScope::Sys,
            );
            let round = t.let_("round", mine + 1);
            t.serial(ranks.clone(), |t, p| {
                t.st(
                    bar.at([row.clone(), rank.clone()]),
                    Some(p),
                    round.clone(),
                    MemSem::Release,
                    MemScope::Sys,
                );
            });
            t.serial(ranks.clone(), |t, p| {
                t.wait_counter(bar.at([row.clone(), p]), round.clone());
            });
        });
        self.sync_threads();
    }

    /// `fence.acq_rel.{scope}`: this thread's accesses before it are ordered before those
    /// after it, for every thread of `scope`.
    #[track_caller]
    pub fn fence(&mut self, scope: MemScope) {
        let span = self.here();
        let call = Expr::call(Intrinsic::Fence { scope, sc: false }, vec![], DType::Bool);
        self.push(StmtKind::Eval(call), span);
    }

    /// Signal `peer`: a release store (`Set`) or release add (`Add`) of `value` into `peer`'s
    /// copy of the flag, at system scope, so that everything this thread wrote before (and
    /// what its block wrote before a barrier it passed) is visible to whoever waits for it.
    #[track_caller]
    pub fn signal(&mut self, flag: Expr, peer: Expr, value: impl Into<Expr>, op: SignalOp) {
        let span = self.here();
        let args = self.mem_args("signal", flag, vec![value.into()], Some(peer), span);
        let intr = match op {
            SignalOp::Set => Intrinsic::MemStore {
                sem: MemSem::Release,
                scope: MemScope::Sys,
            },
            SignalOp::Add => Intrinsic::MemRedAdd {
                sem: MemSem::Release,
                scope: MemScope::Sys,
            },
        };
        self.push(StmtKind::Eval(Expr::call(intr, args, DType::Bool)), span);
    }

    /// Wait until `flag cmp value` holds on this rank's copy of the flag (an acquire at system
    /// scope: what the signaller wrote before its signal is visible after the wait).
    #[track_caller]
    pub fn wait(&mut self, flag: Expr, cmp: CmpOp, value: impl Into<Expr>) {
        let span = self.here();
        self.push_wait(("wait", "flag"), flag, (cmp, false), value.into(), span);
    }

    /// Wait until the counter `flag` (on this rank's copy) has reached `value`: `flag − value`,
    /// taken modulo 2^bits and read as signed, is at least zero (an acquire at system scope).
    /// Unlike `wait(flag, Ge, value)` this keeps working when the counter wraps around past
    /// 2^31 — a flag that counts arrivals across calls does after 2^31 of them — as long as
    /// the flag never runs more than 2^(bits−1) ahead of or behind the value.
    #[track_caller]
    pub fn wait_counter(&mut self, flag: Expr, value: impl Into<Expr>) {
        let span = self.here();
        self.push_wait(
            ("wait_counter", "counter"),
            flag,
            (CmpOp::Ge, true),
            value.into(),
            span,
        );
    }

    /// A `WaitUntil` at system scope on an integer element of this rank (`op` and `what`
    /// name the call and the element in errors).
    fn push_wait(
        &mut self,
        (op, what): (&str, &str),
        flag: Expr,
        (cmp, wrapping): (CmpOp, bool),
        value: Expr,
        span: tl_ir::Span,
    ) {
        if !flag.dtype().is_int() {
            self.error(
                Diagnostic::new(
                    DiagKind::InvalidArgument,
                    span,
                    format!("a wait on a {} {what}", flag.dtype()),
                )
                .help(format!("{what}s are integers (i32, u32, i64 or u64)")),
            );
        }
        let args = self.mem_args(op, flag, vec![value], None, span);
        let call = Expr::call(
            Intrinsic::WaitUntil {
                cmp,
                scope: MemScope::Sys,
                wrapping,
            },
            args,
            DType::Bool,
        );
        self.push(StmtKind::Eval(call), span);
    }

    /// `__syncthreads()`: every thread of the block arrives before any goes on, and what each
    /// wrote before is visible to all after (the step between a block's puts and the one
    /// thread that signals them).
    #[track_caller]
    pub fn sync_threads(&mut self) {
        let span = self.here();
        let call = Expr::call(Intrinsic::SyncThreads, vec![], DType::Bool);
        self.push(StmtKind::Eval(call), span);
    }

    /// The whole block copies `count` consecutive elements (row-major) starting at `src` on
    /// this rank into `peer`'s copy of the symmetric buffer of `dst`, 16 bytes per access where
    /// the sizes allow. Not ordered for the peer until a signal after a block barrier.
    #[track_caller]
    pub fn put_block(&mut self, src: Expr, dst: Expr, count: impl Into<Expr>, peer: Expr) {
        let span = self.here();
        self.dist("put_block", span);
        self.block_copy(CopyGroup::Block, true, src, dst, peer, count.into(), span);
    }

    /// The whole block copies `count` consecutive elements from `peer`'s copy of the symmetric
    /// buffer of `src` into this rank's `dst`.
    #[track_caller]
    pub fn get_block(&mut self, src: Expr, dst: Expr, count: impl Into<Expr>, peer: Expr) {
        let span = self.here();
        self.dist("get_block", span);
        self.block_copy(CopyGroup::Block, false, src, dst, peer, count.into(), span);
    }

    /// [`put_block`](Self::put_block) by one warp: each warp copies its own run (the
    /// arguments may differ between warps, e.g. by `thread_idx() / 32`), its 32 lanes
    /// striding through it. Not ordered for the peer until a signal after a `sync_warp`.
    #[track_caller]
    pub fn put_warp(&mut self, src: Expr, dst: Expr, count: impl Into<Expr>, peer: Expr) {
        let span = self.here();
        self.dist("put_warp", span);
        self.block_copy(CopyGroup::Warp, true, src, dst, peer, count.into(), span);
    }

    /// [`get_block`](Self::get_block) by one warp, as [`put_warp`](Self::put_warp).
    #[track_caller]
    pub fn get_warp(&mut self, src: Expr, dst: Expr, count: impl Into<Expr>, peer: Expr) {
        let span = self.here();
        self.dist("get_warp", span);
        self.block_copy(CopyGroup::Warp, false, src, dst, peer, count.into(), span);
    }

    /// `__syncwarp()`: the lanes of this warp arrive before any goes on, and what each wrote
    /// before is visible to the others after (between a warp's puts and the lane that signals
    /// them).
    #[track_caller]
    pub fn sync_warp(&mut self) {
        let span = self.here();
        let call = Expr::call(Intrinsic::SyncWarp, vec![], DType::Bool);
        self.push(StmtKind::Eval(call), span);
    }

    #[allow(clippy::too_many_arguments)]
    fn block_copy(
        &mut self,
        group: CopyGroup,
        put: bool,
        src: Expr,
        dst: Expr,
        peer: Expr,
        count: Expr,
        span: tl_ir::Span,
    ) {
        let what = match (group, put) {
            (CopyGroup::Block, true) => "put_block",
            (CopyGroup::Block, false) => "get_block",
            (CopyGroup::Warp, true) => "put_warp",
            (CopyGroup::Warp, false) => "get_warp",
        };
        if !self.check_element(what, &src, !put, span) || !self.check_element(what, &dst, put, span)
        {
            return;
        }
        let (Some((sb, sidx)), Some((db, didx))) = (element(&src), element(&dst)) else {
            return;
        };
        if sb.dtype() != db.dtype() {
            self.error(
                Diagnostic::new(
                    DiagKind::InvalidArgument,
                    span,
                    format!(
                        "`{what}` from {} `{}` to {} `{}`",
                        sb.dtype(),
                        sb.name(),
                        db.dtype(),
                        db.name()
                    ),
                )
                .help("copy between buffers of the same element type"),
            );
            return;
        }
        if group == CopyGroup::Warp && !self.threads().is_multiple_of(32) {
            self.error(
                Diagnostic::new(
                    DiagKind::InvalidArgument,
                    span,
                    format!(
                        "`{what}` in a block of {} threads: a warp copy needs whole warps",
                        self.threads()
                    ),
                )
                .help("launch a multiple of 32 threads, or copy with the block (`*_block`)"),
            );
            return;
        }
        let (sflat, dflat) = (flatten(sb, sidx), flatten(db, didx));
        // 16 bytes per access where the count and both start offsets are multiples of the
        // vector: proved here when the sizes say so, else tested at run time (a block-uniform
        // branch between the vector loop and the widest provable one).
        let divides = |e: &Expr, n: i64| {
            tl_ir::simplify(&tl_ir::ops::floormod(e.clone(), Expr::int(n))).as_int() == Some(0)
        };
        let widest = (16 / sb.dtype().bytes().max(1)) as i64;
        let mut proved = widest;
        while proved > 1
            && !(divides(&count, proved) && divides(&sflat, proved) && divides(&dflat, proved))
        {
            proved /= 2;
        }
        let (sb, db) = (sb.clone(), db.clone());
        let (s0, d0) = (
            address_of(Expr::load(&sb, sidx.to_vec())),
            address_of(Expr::load(&db, didx.to_vec())),
        );
        let copy_loop = |t: &mut TileScope, lanes: i64| {
            let chunks = tl_ir::simplify(&tl_ir::ops::ceildiv(count.clone(), Expr::int(lanes)));
            // The threads that share the copy and this one's place among them.
            let (threads, tid) = match group {
                CopyGroup::Block => (t.threads() as i64, t.thread_idx()),
                CopyGroup::Warp => (32, tl_ir::ops::floormod(t.thread_idx(), Expr::int(32))),
            };
            // Each thread takes PEER_COPY_UNROLL chunks a round, `threads` chunks apart (each
            // of them coalesced across the threads), all loaded before any is stored.
            let per_round = threads * PEER_COPY_UNROLL;
            t.serial(
                tl_ir::ops::ceildiv(chunks.clone(), Expr::int(per_round)),
                |t, i| {
                    let c = t.let_("chunk", i * per_round + tid.clone());
                    t.if_(c.lt(chunks.clone()), |t| {
                        // This thread's chunks of the round that exist: ⌈(chunks − c) /
                        // threads⌉ (at least 1), at most the unroll.
                        let valid = tl_ir::ops::min(
                            tl_ir::ops::ceildiv(chunks.clone() - &c, Expr::int(threads)),
                            Expr::int(PEER_COPY_UNROLL),
                        );
                        let call = Expr::call(
                            Intrinsic::PeerCopy {
                                lanes: lanes as u32,
                                put,
                                unroll: PEER_COPY_UNROLL as u32,
                            },
                            vec![
                                d0.clone(),
                                s0.clone(),
                                peer.clone().cast(DType::I32),
                                (c.clone() * lanes).cast(DType::I64),
                                Expr::int_of(threads * lanes, DType::I64),
                                valid.cast(DType::I32),
                            ],
                            DType::Bool,
                        );
                        t.push(StmtKind::Eval(call), span);
                    });
                },
            );
        };
        let sm_copy = |t: &mut TileScope| {
            if proved == widest {
                copy_loop(t, widest);
            } else {
                let m = |e: &Expr| tl_ir::ops::floormod(e.clone(), Expr::int(widest)).eq_(0);
                let aligned = m(&count).and(m(&sflat)).and(m(&dflat));
                t.if_(aligned, |t| copy_loop(t, widest))
                    .else_(|t| copy_loop(t, proved));
            }
        };
        // Through NVSHMEM (`Kernel::with_nvshmem`) each warp makes one call for its run of
        // the transfer (a warp copy: the whole of it; a block copy: a slice per warp, in
        // 16-byte units); the first pass keeps whichever form the kernel's transport takes.
        // A block of a partial warp keeps the SM loop (then one NVSHMEM call per chunk).
        let warp_call = |t: &mut TileScope, offset: Expr, n: Expr| {
            let call = Expr::call(
                Intrinsic::PeerCopyWarp { put },
                vec![
                    d0.clone(),
                    s0.clone(),
                    peer.clone().cast(DType::I32),
                    offset.cast(DType::I64),
                    n.cast(DType::I64),
                ],
                DType::Bool,
            );
            t.push(StmtKind::Eval(call), span);
        };
        let via_nvshmem = Expr::call(Intrinsic::ViaNvshmem, vec![], DType::Bool);
        match group {
            CopyGroup::Warp => {
                self.if_(via_nvshmem, |t| warp_call(t, Expr::int(0), count.clone()))
                    .else_(sm_copy);
            }
            CopyGroup::Block if self.threads().is_multiple_of(32) => {
                let warps = i64::from(self.threads() / 32);
                let slice = tl_ir::simplify(
                    &(tl_ir::ops::ceildiv(
                        tl_ir::ops::ceildiv(count.clone(), Expr::int(warps)),
                        Expr::int(widest),
                    ) * widest),
                );
                self.if_(via_nvshmem, |t| {
                    let warp = tl_ir::ops::floordiv(t.thread_idx(), Expr::int(32));
                    // In i64: a run may start past 2^31 elements.
                    let start = t.let_(
                        "run_start",
                        warp.cast(DType::I64) * slice.clone().cast(DType::I64),
                    );
                    let n = tl_ir::ops::min(
                        slice.clone().cast(DType::I64),
                        count.clone().cast(DType::I64) - &start,
                    );
                    t.if_(n.clone().gt(0), |t| warp_call(t, start.clone(), n));
                })
                .else_(sm_copy);
            }
            CopyGroup::Block => sm_copy(self),
        }
    }
}
