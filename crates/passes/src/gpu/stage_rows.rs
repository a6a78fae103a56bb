//! Odd rows staged by the kernel itself (Hopper, issue 14; opt-in, `TILELANG_STAGE_IN_KERNEL=1`).
//!
//! Where TMA cannot read an input (its rows are not whole 16-byte units: an odd K, or an odd
//! N where B's rows run along N), the runtime copies it into padded rows before the launch:
//! 22.7 µs for a 4096×4095 bf16 operand, all of it ahead of a 185 µs GEMM, which keeps odd
//! sizes under 0.85× of the aligned ones (docs/design/odd-rows-overlap.md). Here a
//! persistent warp-specialized kernel does the copy itself instead, spread over the first k
//! steps of its consumers while their wgmma groups run: a few elements per thread per k
//! step, on every SM at once.
//!
//! The copy goes chunk by chunk, a chunk being what one k step's TMA box covers along K (all
//! the rows of a K-major operand for `bk` columns, or `bk` rows of an MN-major one), the
//! chunks in k order, each dealt over every consumer thread of every block:
//!
//! ```text
//! consumers (every block)          publisher (a thread a block)     producer (a thread a block)
//!   copy chunks 0 .. lead            for each hand-over:              for each k step (chunk c):
//!   hand over (mbarrier)               wait for it; acknowledge         first time c: wait
//!   each k step, after the wgmma       fence.acq_rel.gpu                  flags[c] == blocks,
//!   issue: hand over the chunk         +1 to its chunks' flags            fence.proxy.async
//!   stored last step, store the                                          TMA loads (scratch)
//!   oldest chunk of the register                                       done: +1 to the count
//!   ring, load the next                                                  word; the last block
//!                                                                        zeroes the flags
//! ```
//! A consumer waits for the publisher's acknowledgement of its previous hand-over before the
//! next (the mbarrier then never runs a phase ahead of the publisher), and the fence is the
//! publisher's, off the consumers' path. Every block waits for every block's share of each
//! chunk, so all must be resident at once: a persistent grid of one block per SM is, and the
//! runtime checks it before launching (`CudaKernel::check_coresident`).
//!
//! Correct on the GPU and in the simulator (whose memory-order check follows the chain:
//! stores, mbarrier hand-over, fence, flag, acquire, proxy fence, TMA) — but slower than the
//! runtime's copy on an H200 (4096×4095×4096 NN 406 TFLOP/s from the PTX printer, 557 from
//! NVRTC, against 654; 4096×4096×4095 NT 282 and 514 against 626; docs/performance.md,
//! session 39): the instructions of the consumers' element-by-element copy, not the
//! synchronization, slow the first round's k steps. Hence off by default; what it builds
//! (runtime-provided buffers after the tensor maps, flag waits in the producer, the memory
//! order of the hand-over in the simulator) is what a leaner copy — or a copy kernel on a few
//! SMs beside the GEMM — needs too.

use tl_ir::ops::{ceildiv, min};
use tl_ir::{
    BinOp, Buffer, DType, Expr, ExprKind, For, ForKind, Intrinsic, Kernel, MemScope, MemSem, Scope,
    StagedRows, Stmt, StmtKind, Var,
};

use crate::tile_util::{address_of, eval, if_then, store};

/// Elements of each staged tensor a consumer thread copies per unit.
const PER_STEP: i64 = 8;
/// Units of a chunk a consumer thread keeps in registers from one k step to the next (the
/// loads of one step, the stores of the next); a chunk of more units (a tensor larger than
/// `PER_STEP · HELD_UNITS` elements per thread along its chunks) copies the rest at once.
const HELD_UNITS: i64 = 1;
/// Units (`PER_STEP` elements) a consumer thread has in flight at once while copying the
/// first chunks, before its first k step.
const PROLOGUE_BATCH: i64 = 4;
/// Chunks copied ahead of the producer's first loads, beyond the pipeline's stages: a chunk
/// loaded in consumer step s is stored and handed over in step s + 1, the publisher's fence
/// and flag and the producer's poll of it take a few steps more, and the producer runs
/// `stages` steps ahead of the consumers.
const LEAD_MARGIN: i64 = 6;
/// Chunks a hand-over covers after the first ones.
const GROUP: i64 = 1;
/// Chunks in the consumers' register ring (see `Plan::depth`).
const DEPTH: i64 = 2;

/// An integer from the environment (to measure other settings), else `default`.
fn knob(name: &str, default: i64) -> i64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|&v: &i64| (0..=64).contains(&v))
        .unwrap_or(default)
}

/// One tensor the kernel stages.
struct Tensor {
    staged: StagedRows,
    /// The chunks are row ranges (an MN-major operand: its rows run along K), else column
    /// ranges (a K-major one).
    along_rows: bool,
}

impl Tensor {
    fn rows(&self) -> Expr {
        self.staged.tensor.shape()[0].clone()
    }
    fn width(&self) -> Expr {
        self.staged.tensor.shape()[1].clone()
    }
}

/// What the kernel stages and how: found in the producer half by [`plan`].
pub(crate) struct Plan {
    tensors: Vec<Tensor>,
    /// The producer's k loop variable: chunk `c` is the loop's iteration `c`.
    k_var: Var,
    /// The k extent of one chunk (the TMA box along K).
    bk: i64,
    /// Chunks along K.
    chunks: Expr,
    /// Blocks launched (each adds one to every flag).
    blocks: Expr,
    /// The block's index in the launch.
    block: Expr,
    consumers: u32,
    /// Chunks copied before the consumers' first k step.
    lead: i64,
    /// Chunks the consumers hand over at a time after those (the publisher fences once a
    /// hand-over).
    group: i64,
    /// Chunks in the consumers' register ring: each is stored `depth - 1` k steps after
    /// its loads were issued, which hides their latency from the tensor cores.
    depth: i64,
    /// Two mbarriers in shared memory: the consumer warps' hand-over of what they stored
    /// (`[0]`, one arrival per warp), and the publisher's acknowledgement (`[1]`, one).
    bars: Buffer,
}

/// What the kernel stages itself, if it can: a persistent (one-dimensional grid),
/// unclustered kernel without ping-pong whose producer loads each asked-for tensor
/// (`KernelAttrs::stage_rows_in_kernel`, two-dimensional) with coordinates `k * box` along
/// one dim in its k loop. `None` leaves the staging to the runtime.
pub(crate) fn plan(k: &Kernel, producer: &Stmt, consumers: u32, stages: u32) -> Option<Plan> {
    if k.attrs.stage_rows_in_kernel.is_empty()
        || k.attrs.persistent_blocks.is_none()
        || k.grid.len() != 1
        || k.block_vars.len() != 1
        || k.attrs.cluster.is_some_and(|c| c.size > 1)
    {
        return None;
    }
    // Every TMA load of an asked-for tensor, with its innermost loop variable.
    let mut loads: Vec<TmaRead> = vec![];
    collect_loads(producer, &mut vec![], &mut |r| {
        if k.attrs.stage_rows_in_kernel.contains(&r.buf.id()) {
            loads.push(r);
        }
    });
    let mut tensors: Vec<Tensor> = vec![];
    let mut shared: Option<(Var, i64, Expr)> = None;
    let mut refused: Vec<u64> = vec![];
    for TmaRead {
        buf,
        var,
        coords,
        dims,
    } in &loads
    {
        let Some(var) = var else {
            refused.push(buf.id());
            continue;
        };
        let Some((along_rows, bk)) = chunking(buf, var, coords, dims) else {
            refused.push(buf.id());
            continue;
        };
        let extent = buf.shape()[if along_rows { 0 } else { 1 }].clone();
        match &shared {
            None => shared = Some((var.clone(), bk, extent.clone())),
            Some((v, b, e)) if v.id() == var.id() && *b == bk && *e == extent => {}
            Some(_) => {
                refused.push(buf.id());
                continue;
            }
        }
        match tensors.iter().find(|t| t.staged.tensor.id() == buf.id()) {
            Some(t) if t.along_rows != along_rows => refused.push(buf.id()),
            Some(_) => {}
            None => tensors.push(Tensor {
                staged: staged_rows(buf, &ceildiv(extent, bk)),
                along_rows,
            }),
        }
    }
    tensors.retain(|t| !refused.contains(&t.staged.tensor.id()));
    let (k_var, bk, extent) = shared?;
    if tensors.is_empty() || 128 % bk != 0 || bk < 16 || !consumers.is_multiple_of(128) {
        return None;
    }
    Some(Plan {
        tensors,
        k_var,
        bk,
        chunks: ceildiv(extent, bk),
        blocks: k.grid[0].cast(DType::I32),
        block: Expr::from(&k.block_vars[0]),
        consumers,
        lead: i64::from(stages) + knob("TILELANG_STAGE_LEAD", LEAD_MARGIN),
        group: knob("TILELANG_STAGE_GROUP", GROUP).max(1),
        depth: knob("TILELANG_STAGE_DEPTH", DEPTH).clamp(2, 6),
        bars: Buffer::new(
            "staged_bars",
            vec![Expr::int(2)],
            DType::U64,
            Scope::Shared,
            k.body.span,
        ),
    })
}

/// A TMA load of a global tensor: its coordinates (outermost first) and box, and the
/// innermost loop around it.
struct TmaRead {
    buf: Buffer,
    var: Option<Var>,
    coords: Vec<Expr>,
    dims: Vec<u32>,
}

/// Calls `f` for each TMA load in `s`.
fn collect_loads(s: &Stmt, vars: &mut Vec<Var>, f: &mut dyn FnMut(TmaRead)) {
    match &s.kind {
        StmtKind::Seq(v) => v.iter().for_each(|x| collect_loads(x, vars, f)),
        StmtKind::For(l) => {
            vars.push(l.var.clone());
            collect_loads(&l.body, vars, f);
            vars.pop();
        }
        StmtKind::If { then_, else_, .. } => {
            collect_loads(then_, vars, f);
            if let Some(e) = else_ {
                collect_loads(e, vars, f);
            }
        }
        StmtKind::Eval(e) => {
            if let ExprKind::Call(op @ Intrinsic::TmaLoad { box_dims, .. }, args) = e.kind() {
                let Some(o) = op.tma_operands(args) else {
                    return;
                };
                if let Some(buf) = tensor_of(o.tensor) {
                    f(TmaRead {
                        buf,
                        var: vars.last().cloned(),
                        coords: o.coords.to_vec(),
                        dims: box_dims.clone(),
                    });
                }
            }
        }
        _ => {}
    }
}

/// The global tensor `address_of(t[..])` names.
fn tensor_of(addr: &Expr) -> Option<Buffer> {
    let ExprKind::Call(Intrinsic::AddressOf, a) = addr.kind() else {
        return None;
    };
    match a.first()?.kind() {
        ExprKind::Load(b, _) if b.scope() == Scope::Global => Some(b.clone()),
        _ => None,
    }
}

/// How a two-dimensional tensor loaded at `coords` (outermost first) in boxes of `dims` is
/// chunked by the k loop over `var`: along its rows (the outer coordinate is `var · box`) or
/// its columns (the inner one is), the other coordinate free of `var`; and the box's extent
/// along that dim.
fn chunking(buf: &Buffer, var: &Var, coords: &[Expr], dims: &[u32]) -> Option<(bool, i64)> {
    if buf.rank() != 2 || coords.len() != 2 || dims.len() != 2 || buf.dtype().bytes() > 4 {
        return None;
    }
    let is_step = |e: &Expr, bx: u32| {
        let (v, b) = (Expr::from(var), Expr::int(i64::from(bx)));
        *e == v.clone() * b.clone() || *e == b * v
    };
    for d in 0..2 {
        if is_step(&coords[d], dims[d]) && !coords[1 - d].uses_var(var) {
            return Some((d == 0, i64::from(dims[d])));
        }
    }
    None
}

/// The scratch and flags buffers of `t`, staged in `chunks` chunks.
fn staged_rows(t: &Buffer, chunks: &Expr) -> StagedRows {
    let eb = t.dtype().bytes() as i64;
    let (rows, width) = (t.shape()[0].clone(), t.shape()[1].clone());
    // The runtime's staging pitch: the row padded to whole 128-byte lines.
    let pitch = ceildiv(width * eb, 128) * (128 / eb);
    StagedRows {
        tensor: t.clone(),
        scratch: Buffer::new(
            format!("{}_staged", t.name()),
            vec![rows, pitch],
            t.dtype(),
            Scope::Global,
            t.span(),
        ),
        flags: Buffer::new(
            format!("{}_flags", t.name()),
            vec![chunks.clone() + 1],
            DType::U32,
            Scope::Global,
            t.span(),
        ),
    }
}

/// `for var in min .. min + extent` (serial), of run-time bounds.
fn serial_for(var: Var, min: Expr, extent: Expr, body: Stmt, span: tl_ir::Span) -> Stmt {
    Stmt::new(
        StmtKind::For(Box::new(For {
            var,
            min,
            extent,
            kind: ForKind::Serial,
            body,
        })),
        span,
    )
}

fn let_(var: &Var, value: Expr, span: tl_ir::Span) -> Stmt {
    Stmt::new(
        StmtKind::Let {
            var: var.clone(),
            value,
        },
        span,
    )
}

fn local(name: &str, n: i64, dt: DType, span: tl_ir::Span) -> Buffer {
    Buffer::new(name, vec![Expr::int(n)], dt, Scope::Local, span)
}

fn alloc(b: &Buffer, span: tl_ir::Span) -> Stmt {
    Stmt::new(StmtKind::Alloc(b.clone()), span)
}

fn div(a: Expr, b: Expr) -> Expr {
    Expr::binary(BinOp::Div, a, b)
}

/// ⌈a / b⌉ of non-negative `a` and positive `b` in truncating division (the PTX printer
/// takes no floor division by a value of unknown sign).
fn up_div(a: Expr, b: Expr) -> Expr {
    div(a + b.clone() - 1, b)
}

fn rem(a: Expr, b: Expr) -> Expr {
    Expr::binary(BinOp::Mod, a, b)
}

/// `red.relaxed.gpu.add(flags[i], 1)`.
fn add_one(flags: &Buffer, i: Expr, span: tl_ir::Span) -> Stmt {
    eval(
        Intrinsic::MemRedAdd {
            sem: MemSem::Relaxed,
            scope: MemScope::Gpu,
        },
        vec![address_of(flags, vec![i]), Expr::int_of(1, DType::U32)],
        span,
    )
}

/// A consumer thread's share of one tensor's chunks: where element `e` of chunk `c` lies.
struct Share {
    /// Rows (or columns) apart between a thread's elements `e` and `e + 1`.
    stride: Var,
    /// The thread's first row and column within a chunk.
    row0: Var,
    col0: Var,
    /// How many of its elements a chunk has (along the dim its elements are `stride` apart).
    count: Var,
}

impl Plan {
    /// The runtime's part: the tensors staged, with their scratch and flags.
    pub(crate) fn staged_rows(&self) -> Vec<StagedRows> {
        self.tensors.iter().map(|t| t.staged.clone()).collect()
    }

    /// The hand-over barriers (a shared buffer the kernel allocates).
    pub(crate) fn barriers(&self) -> &Buffer {
        &self.bars
    }

    /// Their initialization (by the thread that initializes the pipeline's).
    pub(crate) fn barrier_inits(&self, span: tl_ir::Span) -> Vec<Stmt> {
        vec![
            eval(
                Intrinsic::MbarrierInit {
                    count: self.consumers / 32,
                },
                vec![address_of(&self.bars, vec![Expr::int(0)])],
                span,
            ),
            eval(
                Intrinsic::MbarrierInit { count: 1 },
                vec![address_of(&self.bars, vec![Expr::int(1)])],
                span,
            ),
        ]
    }

    /// The publisher (one thread of the producer warpgroup): for each hand-over of the
    /// consumers, acknowledge it, fence (what they stored, ordered before the hand-over, is
    /// then ordered before the flags for every block) and add one to the flags of the
    /// chunks it completes — the first hand-over the chunks before the first k step, each
    /// later one a chunk.
    pub(crate) fn publisher(&self, span: tl_ir::Span) -> Stmt {
        let i32_ = DType::I32;
        let lead = Var::new("staged_lead", i32_);
        let q = Var::new("staged_handover", i32_);
        let j = Var::new("staged_chunk", i32_);
        let reds = |chunk: Expr| -> Stmt {
            Stmt::seq(
                self.tensors
                    .iter()
                    .map(|t| add_one(&t.staged.flags, chunk.clone(), span))
                    .collect(),
                span,
            )
        };
        let (qe, le) = (Expr::from(&q), Expr::from(&lead));
        let first = serial_for(
            j.clone(),
            Expr::int(0),
            le.clone(),
            reds(Expr::from(&j)),
            span,
        );
        // Hand-over q > 0 covers chunks lead + (q - 1)·group up to the next group's (or the
        // last chunk).
        let g = Var::new("staged_in_group", i32_);
        let from = le.clone() + (qe.clone() - 1) * self.group;
        let group_reds = serial_for(
            g.clone(),
            Expr::int(0),
            min(Expr::int(self.group), self.chunks.clone() - from.clone()),
            reds(from + Expr::from(&g)),
            span,
        );
        let body = Stmt::seq(
            vec![
                eval(
                    Intrinsic::MbarrierWait,
                    vec![
                        address_of(&self.bars, vec![Expr::int(0)]),
                        rem(qe.clone(), Expr::int(2)),
                    ],
                    span,
                ),
                eval(
                    Intrinsic::MbarrierArrive,
                    vec![address_of(&self.bars, vec![Expr::int(1)])],
                    span,
                ),
                eval(
                    Intrinsic::Fence {
                        scope: MemScope::Gpu,
                        sc: false,
                    },
                    vec![],
                    span,
                ),
                Stmt::new(
                    StmtKind::If {
                        cond: qe.clone().eq_(0),
                        then_: Box::new(first),
                        else_: Some(Box::new(group_reds)),
                    },
                    span,
                ),
            ],
            span,
        );
        Stmt::seq(
            vec![
                let_(&lead, min(self.chunks.clone(), self.lead), span),
                serial_for(
                    q,
                    Expr::int(0),
                    ceildiv(self.chunks.clone() - le, self.group) + 1,
                    body,
                    span,
                ),
            ],
            span,
        )
    }

    /// The producer with a wait for each chunk's flags before its first load of the chunk,
    /// and, at its end, its count on the flags' last word (the last block zeroes them).
    pub(crate) fn producer(&self, p: &Stmt) -> Stmt {
        let span = p.span;
        let seen = local("staged_seen", 1, DType::I32, span);
        let body = self.with_waits(p, &seen);
        let mut out = vec![
            alloc(&seen, span),
            store(&seen, vec![Expr::int(0)], Expr::int(0), span),
            body,
        ];
        for t in &self.tensors {
            let flags = &t.staged.flags;
            let old = Var::new("staged_done", DType::U32);
            out.push(let_(
                &old,
                Expr::call(
                    Intrinsic::MemAtomAdd {
                        sem: MemSem::Relaxed,
                        scope: MemScope::Gpu,
                    },
                    vec![
                        address_of(flags, vec![self.chunks.clone()]),
                        Expr::int_of(1, DType::U32),
                    ],
                    DType::U32,
                ),
                span,
            ));
            let j = Var::new("staged_flag", DType::I32);
            let zero = eval(
                Intrinsic::MemStore {
                    sem: MemSem::Relaxed,
                    scope: MemScope::Gpu,
                },
                vec![
                    address_of(flags, vec![Expr::from(&j)]),
                    Expr::int_of(0, DType::U32),
                ],
                span,
            );
            let reset = serial_for(j, Expr::int(0), self.chunks.clone() + 1, zero, span);
            let last = (self.blocks.clone() - 1).cast(DType::U32);
            out.push(if_then(Some(Expr::from(&old).eq_(last)), reset, span));
        }
        Stmt::seq(out, span)
    }

    fn with_waits(&self, s: &Stmt, seen: &Buffer) -> Stmt {
        let span = s.span;
        match &s.kind {
            StmtKind::For(l) if l.var.id() == self.k_var.id() => {
                let mut l2 = (**l).clone();
                l2.body = self.insert_wait(&l.body, seen);
                Stmt::new(StmtKind::For(Box::new(l2)), span)
            }
            StmtKind::For(l) => {
                let mut l2 = (**l).clone();
                l2.body = self.with_waits(&l.body, seen);
                Stmt::new(StmtKind::For(Box::new(l2)), span)
            }
            StmtKind::Seq(v) => {
                Stmt::seq(v.iter().map(|x| self.with_waits(x, seen)).collect(), span)
            }
            StmtKind::If { cond, then_, else_ } => Stmt::new(
                StmtKind::If {
                    cond: cond.clone(),
                    then_: Box::new(self.with_waits(then_, seen)),
                    else_: else_.as_ref().map(|e| Box::new(self.with_waits(e, seen))),
                },
                span,
            ),
            _ => s.clone(),
        }
    }

    /// The k loop's body with the wait before its first load of a staged tensor.
    fn insert_wait(&self, body: &Stmt, seen: &Buffer) -> Stmt {
        let span = body.span;
        let ids: Vec<u64> = self.tensors.iter().map(|t| t.staged.tensor.id()).collect();
        let loads_staged = |x: &Stmt| {
            let mut found = false;
            collect_loads(x, &mut vec![], &mut |r| found |= ids.contains(&r.buf.id()));
            found
        };
        let k = Expr::from(&self.k_var);
        let mut wait = vec![];
        for t in &self.tensors {
            wait.push(eval(
                Intrinsic::WaitUntil {
                    cmp: tl_ir::CmpOp::Ge,
                    scope: MemScope::Gpu,
                    wrapping: false,
                },
                vec![
                    address_of(&t.staged.flags, vec![k.clone()]),
                    self.blocks.cast(DType::U32),
                ],
                span,
            ));
        }
        // The consumers wrote the chunk with generic stores; TMA reads through the async proxy.
        wait.push(eval(Intrinsic::FenceProxyAsyncGlobal, vec![], span));
        wait.push(store(seen, vec![Expr::int(0)], k.clone() + 1, span));
        let guarded = if_then(
            Some(k.ge(Expr::load(seen, vec![Expr::int(0)]))),
            Stmt::seq(wait, span),
            span,
        );
        let items = match &body.kind {
            StmtKind::Seq(v) => v.clone(),
            _ => vec![body.clone()],
        };
        let mut out = vec![];
        let mut placed = false;
        for x in items {
            if !placed && loads_staged(&x) {
                out.push(guarded.clone());
                placed = true;
            }
            out.push(x);
        }
        if !placed {
            out.insert(0, guarded);
        }
        Stmt::seq(out, span)
    }

    /// The consumers with the copy: the first chunks before everything, a chunk a k step in
    /// the k loop (after its first wgmma commit), and what is left after the rounds.
    /// `None` where the consumers have no k loop with a wgmma commit.
    pub(crate) fn consumer(&self, c: &Stmt) -> Option<Stmt> {
        let span = c.span;
        let i32_ = DType::I32;
        let tid = Expr::call(Intrinsic::ThreadIdx, vec![], i32_);
        let threads = Expr::int(i64::from(self.consumers));
        let bk = Expr::int(self.bk);
        let mut pre = vec![];
        // This thread's index among all consumer threads of the launch, and their count.
        let me = Var::new("staged_me", i32_);
        let all = Var::new("staged_threads", i32_);
        pre.push(let_(
            &me,
            self.block.clone() * threads.clone() + tid.clone(),
            span,
        ));
        pre.push(let_(&all, self.blocks.clone() * threads.clone(), span));
        let (me, all) = (Expr::from(&me), Expr::from(&all));
        // Per tensor: its share's layout and how many elements a thread copies per chunk.
        let mut shares = vec![];
        let mut units: Option<Expr> = None;
        for t in &self.tensors {
            let stride = Var::new("staged_stride", i32_);
            let row0 = Var::new("staged_row0", i32_);
            let col0 = Var::new("staged_col0", i32_);
            let count = Var::new("staged_count", i32_);
            let per_chunk;
            if t.along_rows {
                // `bk` rows a chunk, each row's columns dealt over `all / bk` threads.
                pre.push(let_(&stride, div(all.clone(), bk.clone()), span));
                pre.push(let_(&row0, div(me.clone(), Expr::from(&stride)), span));
                pre.push(let_(&col0, rem(me.clone(), Expr::from(&stride)), span));
                per_chunk = up_div(t.width(), Expr::from(&stride));
                let mine = tl_ir::ops::max(t.width() - Expr::from(&col0), Expr::int(0));
                pre.push(let_(&count, up_div(mine, Expr::from(&stride)), span));
            } else {
                // `bk` columns a chunk, each thread one column of every `all / bk`-th row.
                pre.push(let_(&stride, div(all.clone(), bk.clone()), span));
                pre.push(let_(&row0, div(me.clone(), bk.clone()), span));
                pre.push(let_(&col0, rem(me.clone(), bk.clone()), span));
                per_chunk = up_div(t.rows(), Expr::from(&stride));
                let mine = tl_ir::ops::max(t.rows() - Expr::from(&row0), Expr::int(0));
                pre.push(let_(&count, up_div(mine, Expr::from(&stride)), span));
            }
            let u = ceildiv(per_chunk, PER_STEP);
            units = Some(match units {
                None => u,
                Some(x) => tl_ir::ops::max(x, u),
            });
            shares.push(Share {
                stride,
                row0,
                col0,
                count,
            });
        }
        // Units a chunk (each `PER_STEP` elements of every tensor), all units, and those copied
        // before the first k step.
        let per = Var::new("staged_units", i32_);
        let lead_chunks = Var::new("staged_lead", i32_);
        pre.push(let_(&per, units?, span));
        pre.push(let_(
            &lead_chunks,
            min(self.chunks.clone(), self.lead),
            span,
        ));
        let (per, lead_chunks) = (Expr::from(&per), Expr::from(&lead_chunks));
        let lead_units = lead_chunks.clone() * per.clone();
        let next = local("staged_next", 1, i32_, span);
        let held = local("staged_held", 1, i32_, span);
        let topub = local("staged_publish", 1, i32_, span);
        for b in [&next, &held, &topub] {
            pre.push(alloc(b, span));
        }
        let at0 = |b: &Buffer| Expr::load(b, vec![Expr::int(0)]);
        pre.push(store(&next, vec![Expr::int(0)], lead_chunks.clone(), span));
        pre.push(store(&held, vec![Expr::int(0)], lead_chunks.clone(), span));
        pre.push(store(&topub, vec![Expr::int(0)], Expr::int(-1), span));
        let regs: Vec<Buffer> = self
            .tensors
            .iter()
            .map(|t| {
                local(
                    "staged_regs",
                    PER_STEP * HELD_UNITS * self.depth,
                    t.staged.tensor.dtype(),
                    span,
                )
            })
            .collect();
        let spare: Vec<Buffer> = self
            .tensors
            .iter()
            .map(|t| local("staged_spare", PER_STEP, t.staged.tensor.dtype(), span))
            .collect();
        for r in regs.iter().chain(&spare) {
            pre.push(alloc(r, span));
        }

        // Where element `e` of chunk `chunk`'s share of tensor `ti` lies: (row, col, in
        // bounds). Along the chunk's rows (or columns) the bound is one compare a unit; along
        // the other dim, `e` against this thread's element count (`Share::count`).
        let place = |ti: usize, chunk: &Expr, e: Expr| -> (Expr, Expr, Expr) {
            let t = &self.tensors[ti];
            let s = &shares[ti];
            let count = Expr::from(&s.count);
            if t.along_rows {
                let row = chunk.clone() * self.bk + Expr::from(&s.row0);
                let col = Expr::from(&s.col0) + e.clone() * Expr::from(&s.stride);
                let ok = row.lt(t.rows()).and(e.lt(count));
                (row, col, ok)
            } else {
                let row = Expr::from(&s.row0) + e.clone() * Expr::from(&s.stride);
                let col = chunk.clone() * self.bk + Expr::from(&s.col0);
                let ok = col.lt(t.width()).and(e.lt(count));
                (row, col, ok)
            }
        };
        // Load (or store) unit `sub` of chunk `chunk` of every tensor: `PER_STEP` elements
        // each, from the tensor into `regs` from `slot0` on (or from there into the scratch).
        let unit_copy =
            |chunk: Expr, sub: Expr, slot0: Expr, load: bool, regs: &[Buffer]| -> Stmt {
                let c = Var::new("staged_chunk", i32_);
                let e0 = Var::new("staged_first", i32_);
                let mut body = vec![let_(&c, chunk, span), let_(&e0, sub * PER_STEP, span)];
                for (ti, t) in self.tensors.iter().enumerate() {
                    for i in 0..PER_STEP {
                        let e = Expr::from(&e0) + i;
                        let (row, col, ok) = place(ti, &Expr::from(&c), e);
                        let slot = slot0.clone() + i;
                        let st = if load {
                            store(
                                &regs[ti],
                                vec![slot],
                                Expr::load(&t.staged.tensor, vec![row, col]),
                                span,
                            )
                        } else {
                            store(
                                &t.staged.scratch,
                                vec![row, col],
                                Expr::load(&regs[ti], vec![slot]),
                                span,
                            )
                        };
                        body.push(if_then(Some(ok), st, span));
                    }
                }
                Stmt::seq(body, span)
            };
        // Hand what this thread stored so far to the block's publisher: wait until it took
        // the last hand-over (so the barrier is never a phase ahead of it), then each warp
        // arrives (a release at CTA scope; the publisher fences for the GPU).
        let pubq = local("staged_handed", 1, i32_, span);
        pre.push(alloc(&pubq, span));
        pre.push(store(&pubq, vec![Expr::int(0)], Expr::int(0), span));
        let signal = || -> Stmt {
            let q = at0(&pubq);
            Stmt::seq(
                vec![
                    if_then(
                        Some(q.gt(0)),
                        eval(
                            Intrinsic::MbarrierWait,
                            vec![
                                address_of(&self.bars, vec![Expr::int(1)]),
                                rem(q.clone() - 1, Expr::int(2)),
                            ],
                            span,
                        ),
                        span,
                    ),
                    eval(Intrinsic::SyncWarp, vec![], span),
                    if_then(
                        Some(rem(tid.clone(), Expr::int(32)).eq_(0)),
                        eval(
                            Intrinsic::MbarrierArrive,
                            vec![address_of(&self.bars, vec![Expr::int(0)])],
                            span,
                        ),
                        span,
                    ),
                    store(&pubq, vec![Expr::int(0)], q + 1, span),
                ],
                span,
            )
        };

        // The first chunks, `PROLOGUE_BATCH` units in flight at a time.
        let prologue_regs: Vec<Buffer> = self
            .tensors
            .iter()
            .map(|t| {
                local(
                    "staged_first",
                    PER_STEP * PROLOGUE_BATCH,
                    t.staged.tensor.dtype(),
                    span,
                )
            })
            .collect();
        for r in &prologue_regs {
            pre.push(alloc(r, span));
        }
        let batch = Var::new("staged_batch", i32_);
        let mut batch_body = vec![];
        for load in [true, false] {
            for q in 0..PROLOGUE_BATCH {
                let unit = Expr::from(&batch) * PROLOGUE_BATCH + q;
                let copy = unit_copy(
                    div(unit.clone(), per.clone()),
                    rem(unit.clone(), per.clone()),
                    Expr::int(q * PER_STEP),
                    load,
                    &prologue_regs,
                );
                batch_body.push(if_then(Some(unit.lt(lead_units.clone())), copy, span));
            }
        }
        pre.push(serial_for(
            batch,
            Expr::int(0),
            ceildiv(lead_units.clone(), PROLOGUE_BATCH),
            Stmt::seq(batch_body, span),
            span,
        ));
        pre.push(signal());

        // One step copies one chunk: hand over what was stored (when it ends a group), store
        // the chunk loaded last step, load the next. A chunk of more units than the registers
        // hold copies the rest at once, in the step that stores it (large tensors only).
        let (group, depth) = (self.group, self.depth);
        // Load chunk `chunk` into its slot of the register ring (`chunk % depth`), or store it
        // from there: a branch a slot, so that every register index is a constant.
        let ring = |chunk: &Expr, load: bool| -> Vec<Stmt> {
            (0..depth)
                .map(|slot| {
                    let units = (0..HELD_UNITS)
                        .map(|sub| {
                            let at = Expr::int((slot * HELD_UNITS + sub) * PER_STEP);
                            let copy = unit_copy(chunk.clone(), Expr::int(sub), at, load, &regs);
                            if_then(Some(per.clone().gt(sub)), copy, span)
                        })
                        .collect();
                    if_then(
                        Some(rem(chunk.clone(), Expr::int(depth)).eq_(slot)),
                        Stmt::seq(units, span),
                        span,
                    )
                })
                .collect()
        };
        let step = || -> Stmt {
            let release = if_then(
                Some(at0(&topub).ge(0)),
                Stmt::seq(
                    vec![
                        signal(),
                        store(&topub, vec![Expr::int(0)], Expr::int(-1), span),
                    ],
                    span,
                ),
                span,
            );
            // Store the oldest chunk loaded once `depth - 1` newer ones are in flight (or
            // nothing is left to load), from its slot of the register ring.
            let chunk = at0(&held);
            let nextc = at0(&next);
            let mut store_all = ring(&chunk, false);
            let extra = Var::new("staged_extra", i32_);
            let extra_sub = Expr::from(&extra);
            store_all.push(serial_for(
                extra,
                Expr::int(HELD_UNITS),
                tl_ir::ops::max(per.clone() - HELD_UNITS, Expr::int(0)),
                Stmt::seq(
                    vec![
                        unit_copy(chunk.clone(), extra_sub.clone(), Expr::int(0), true, &spare),
                        unit_copy(chunk.clone(), extra_sub, Expr::int(0), false, &spare),
                    ],
                    span,
                ),
                span,
            ));
            // Hand over at the end of each group of chunks after the first ones, and at the
            // last chunk.
            let after_lead = chunk.clone() - lead_chunks.clone() + 1;
            store_all.push(if_then(
                Some(
                    rem(after_lead, Expr::int(group))
                        .eq_(0)
                        .or(chunk.clone().eq_(self.chunks.clone() - 1)),
                ),
                store(&topub, vec![Expr::int(0)], chunk.clone(), span),
                span,
            ));
            store_all.push(store(&held, vec![Expr::int(0)], chunk.clone() + 1, span));
            let due = chunk.lt(nextc.clone()).and(
                (nextc.clone() - chunk.clone())
                    .ge(depth - 1)
                    .or(nextc.clone().ge(self.chunks.clone())),
            );
            let stored = if_then(Some(due), Stmt::seq(store_all, span), span);
            let mut load_all = ring(&nextc, true);
            load_all.push(store(&next, vec![Expr::int(0)], nextc.clone() + 1, span));
            let loaded = if_then(
                Some(nextc.lt(self.chunks.clone())),
                Stmt::seq(load_all, span),
                span,
            );
            Stmt::seq(vec![release, stored, loaded], span)
        };
        let body = self.with_steps(c, &step)?;
        // What the k steps left: the same steps until every chunk is stored and handed over.
        let rest = Var::new("staged_rest", i32_);
        let drain = serial_for(
            rest,
            Expr::int(0),
            self.chunks.clone() - at0(&held) + depth + 1,
            step(),
            span,
        );
        let mut out = pre;
        out.push(body);
        out.push(drain);
        Some(Stmt::seq(out, span))
    }

    /// The consumers' k loop (the innermost loop with a wgmma commit in its body) with a
    /// step after its first commit.
    fn with_steps(&self, s: &Stmt, step: &dyn Fn() -> Stmt) -> Option<Stmt> {
        let span = s.span;
        let commit = |x: &Stmt| matches!(&x.kind, StmtKind::Eval(e) if matches!(e.kind(), ExprKind::Call(Intrinsic::WgmmaCommit, _)));
        match &s.kind {
            StmtKind::For(l) => {
                let mut l2 = (**l).clone();
                if let Some(b) = self.with_steps(&l.body, step) {
                    l2.body = b;
                    return Some(Stmt::new(StmtKind::For(Box::new(l2)), span));
                }
                let StmtKind::Seq(v) = &l.body.kind else {
                    return None;
                };
                let at = v.iter().position(commit)?;
                let mut items = v.clone();
                items.insert(at + 1, step());
                l2.body = Stmt::seq(items, l.body.span);
                Some(Stmt::new(StmtKind::For(Box::new(l2)), span))
            }
            StmtKind::Seq(v) => {
                let mut items = v.clone();
                for (i, x) in v.iter().enumerate() {
                    if let Some(y) = self.with_steps(x, step) {
                        items[i] = y;
                        return Some(Stmt::seq(items, span));
                    }
                }
                None
            }
            StmtKind::If { cond, then_, else_ } => {
                if let Some(t) = self.with_steps(then_, step) {
                    return Some(Stmt::new(
                        StmtKind::If {
                            cond: cond.clone(),
                            then_: Box::new(t),
                            else_: else_.clone(),
                        },
                        span,
                    ));
                }
                let e = self.with_steps(else_.as_ref()?, step)?;
                Some(Stmt::new(
                    StmtKind::If {
                        cond: cond.clone(),
                        then_: then_.clone(),
                        else_: Some(Box::new(e)),
                    },
                    span,
                ))
            }
            _ => None,
        }
    }
}
