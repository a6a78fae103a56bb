//! Odd rows staged by the kernel itself (Hopper, issue 14; opt-in, `TILELANG_STAGE_IN_KERNEL=1`).
//!
//! Where TMA cannot read an input (its rows are not whole 16-byte units: an odd K, or an odd
//! N where B's rows run along N), the runtime copies it into padded rows before the launch:
//! 22.7 µs for a 4096×4095 bf16 operand, all of it ahead of a 185 µs GEMM, which keeps odd
//! sizes under 0.85× of the aligned ones (docs/design/odd-rows-overlap.md). Here a
//! persistent warp-specialized kernel does the copy itself instead, spread over the first k
//! steps of its consumers while their wgmma groups run: one 16-byte vector of the scratch per
//! thread and staged tensor per k step, on every SM at once. A vector is the 32 aligned bytes
//! around its source (`Intrinsic::LoadWindow`, two 16-byte loads) funnel-shifted into one
//! 16-byte store (`Intrinsic::StoreShifted`); its bytes past a row's end land in the
//! scratch's padding, which the tensor map leaves out.
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
//! runtime's copy on an H200 (docs/performance.md, sessions 39 and 40). The element-by-element
//! copy of session 39 ran 4096×4095×4096 NN at 406 TFLOP/s and 4096×4096×4095 NT at 282
//! against the runtime's 654 and 626; these vectors, with an L2 prefetch two chunks ahead of
//! their loads (see `PREFETCH`: a load still in flight holds up the next wgmma), run them at
//! about 628 and 598 against 663 and 632. Hence off by default; what it builds
//! (runtime-provided buffers after the tensor maps, flag waits in the producer, the memory
//! order of the hand-over in the simulator) is what a copy kernel on a few SMs beside the GEMM
//! needs too.

use tl_ir::ops::{ceildiv, min};
use tl_ir::{
    BinOp, Buffer, DType, Expr, ExprKind, For, ForKind, Intrinsic, Kernel, MemScope, MemSem, Scope,
    StagedRows, Stmt, StmtKind, Var,
};

use crate::tile_util::{address_of, eval, if_then, store};

/// 32-bit words of a window (`Intrinsic::LoadWindow`): the 32 bytes around a 16-byte vector.
const WINDOW: i64 = 8;
/// Units of a chunk a consumer thread keeps in registers from one k step to the next (the
/// loads of one step, the stores of the next), a unit being one 16-byte vector of every
/// staged tensor; a chunk of more units (more vectors than all consumer threads of the
/// launch) copies the rest at once.
const HELD_UNITS: i64 = 1;
/// Chunks a consumer thread has in flight at once while copying the first chunks, before its
/// first k step (`TILELANG_STAGE_BATCH`): 8 ran 4096×4095×4096 NN at 633 TFLOP/s against 623
/// with 4 on an H200 (run 38h).
const PROLOGUE_BATCH: i64 = 8;
/// Chunks copied before the consumers' first k step, beyond the pipeline's stages
/// (`TILELANG_STAGE_LEAD`): a chunk loaded in consumer step s is stored and handed over in
/// step s + 1, the publisher's fence and flag and the producer's poll of it take a few steps
/// more, and the producer runs `stages` steps ahead of the consumers. Without the L2
/// prefetch ([`PREFETCH`]) every chunk copied in the k loop cost its step a miss's latency,
/// and copying all of them first ran faster (run 38h); with it, few first runs fastest (run
/// 38n: 4096×4096×4095 NT 598 TFLOP/s with 10 chunks first against 550 with all 64; NN 628
/// against 623).
const LEAD_MARGIN: i64 = 6;
/// Chunks ahead of a k step's loads that the step prefetches into L2 (`TILELANG_STAGE_PREFETCH`;
/// the chunks before the first k step are prefetched before their loads too). ptxas makes
/// every k step's `WARPGROUP.ARRIVE` wait for the loads still writing registers (the window
/// loads of the step before: the SASS's wait masks, run 38), so a load that misses L2 stalls
/// the next wgmma whatever the register ring's depth; a prefetch writes no register.
/// Two chunks ahead ran as four (run 38n: 4096×4096×4095 NT 598 against 596; NN 628 both)
/// and ran NT 10% faster than none (38m: 545).
const PREFETCH: i64 = 2;
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

/// Where a vector of a staged tensor lies in every chunk: its row within the chunk's rows
/// and its column (a tensor chunked by rows), or its row and its column within the chunk's
/// columns; and its first element's offset in the tensor in chunk 0 (the chunk adds
/// [`Plan::chunk_stride`] elements a chunk).
struct Vector {
    a: Expr,
    b: Expr,
    offset: Expr,
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
    /// Units a consumer thread has in flight while copying the first chunks.
    batch: i64,
    /// Chunks ahead of its loads a k step prefetches into L2 (0: none).
    prefetch: i64,
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
        batch: knob("TILELANG_STAGE_BATCH", PROLOGUE_BATCH).clamp(1, 16),
        prefetch: knob("TILELANG_STAGE_PREFETCH", PREFETCH),
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

    /// 16-byte vectors of `t`'s scratch a chunk covers: `bk` rows of whole vectors (the
    /// last one reaches into the row's padding), or `bk` columns of every row.
    fn chunk_vectors(&self, t: &Tensor) -> Expr {
        let v = 16 / t.staged.tensor.dtype().bytes() as i64;
        if t.along_rows {
            up_div(t.width(), Expr::int(v)) * self.bk
        } else {
            t.rows() * (self.bk / v)
        }
    }

    /// Where a chunk's vector `i` of `t` lies, apart from the chunk.
    fn vector_parts(&self, t: &Tensor, i: Expr) -> Vector {
        let v = 16 / t.staged.tensor.dtype().bytes() as i64;
        let per_row = if t.along_rows {
            up_div(t.width(), Expr::int(v))
        } else {
            Expr::int(self.bk / v)
        };
        let (a, b) = (div(i.clone(), per_row.clone()), rem(i, per_row) * v);
        let i64_ = DType::I64;
        let offset = a.clone().cast(i64_) * t.width().cast(i64_) + b.clone().cast(i64_);
        Vector { a, b, offset }
    }

    /// Elements between a vector's first element in one chunk and in the next.
    fn chunk_stride(&self, t: &Tensor) -> Expr {
        let bk = Expr::int_of(self.bk, DType::I64);
        if t.along_rows {
            t.width().cast(DType::I64) * bk
        } else {
            bk
        }
    }

    /// The row and column of a vector of chunk `chunk` of `t` from its chunk-free parts
    /// ([`Plan::vector_parts`]), and whether the chunk has it: its first element inside the
    /// tensor (the vector's bytes past a row's end land in the scratch's padding, which the
    /// tensor map leaves out).
    fn place(&self, t: &Tensor, chunk: &Expr, v: &Vector) -> (Expr, Expr, Expr) {
        let (a, b) = (v.a.clone(), v.b.clone());
        let bk = Expr::int(self.bk);
        if t.along_rows {
            let row = chunk.clone() * self.bk + a.clone();
            let ok = a.lt(bk).and(row.clone().lt(t.rows()));
            (row, b, ok)
        } else {
            let col = chunk.clone() * self.bk + b;
            let ok = a.clone().lt(t.rows()).and(col.clone().lt(t.width()));
            (a, col, ok)
        }
    }

    /// One vector of `t` at (`row`, `col`), element `offset` of the tensor: loaded into the
    /// window at word `word` of `win`, or stored from there into the scratch.
    fn copy_vector(
        &self,
        t: &Tensor,
        (row, col, offset): (Expr, Expr, Expr),
        win: &Buffer,
        word: i64,
        load: bool,
        span: tl_ir::Span,
    ) -> Stmt {
        let i64_ = DType::I64;
        let tensor = &t.staged.tensor;
        let first = address_of(tensor, vec![Expr::int(0), Expr::int(0)]);
        let window = address_of(win, vec![Expr::int(word)]);
        if load {
            let count = t.rows().cast(i64_) * t.width().cast(i64_);
            eval(
                Intrinsic::LoadWindow,
                vec![window, first, offset, count],
                span,
            )
        } else {
            let dst = address_of(&t.staged.scratch, vec![row, col]);
            eval(
                Intrinsic::StoreShifted,
                vec![dst, window, first, offset],
                span,
            )
        }
    }

    /// The consumers with the copy: the first chunks before everything, a chunk a k step in
    /// the k loop (after its first wgmma commit), and what is left after the rounds.
    /// `None` where the consumers have no k loop with a wgmma commit.
    pub(crate) fn consumer(&self, c: &Stmt) -> Option<Stmt> {
        let span = c.span;
        let i32_ = DType::I32;
        let tid = Expr::call(Intrinsic::ThreadIdx, vec![], i32_);
        let threads = Expr::int(i64::from(self.consumers));
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
        // Per tensor: how many 16-byte vectors of the scratch a chunk has; a thread copies
        // vectors `me`, `me + all`, … of each chunk (a unit: one vector of every tensor).
        let mut units: Option<Expr> = None;
        for t in &self.tensors {
            let u = up_div(self.chunk_vectors(t), all.clone());
            units = Some(match units {
                None => u,
                Some(x) => tl_ir::ops::max(x, u),
            });
        }
        // The chunk-free parts of where this thread's vectors of the first `HELD_UNITS`
        // units lie (the ring's), worked out once.
        let mut held_parts: Vec<Vec<Vector>> = vec![];
        for sub in 0..HELD_UNITS {
            let mut per_tensor = vec![];
            for t in &self.tensors {
                let v = self.vector_parts(t, me.clone() + all.clone() * sub);
                let (va, vb) = (Var::new("staged_at", i32_), Var::new("staged_at", i32_));
                let vo = Var::new("staged_offset", DType::I64);
                pre.push(let_(&va, v.a, span));
                pre.push(let_(&vb, v.b, span));
                pre.push(let_(&vo, v.offset, span));
                per_tensor.push(Vector {
                    a: Expr::from(&va),
                    b: Expr::from(&vb),
                    offset: Expr::from(&vo),
                });
            }
            held_parts.push(per_tensor);
        }
        // Units a chunk, and the chunks copied before the first k step.
        let per = Var::new("staged_units", i32_);
        let lead_chunks = Var::new("staged_lead", i32_);
        pre.push(let_(&per, units?, span));
        pre.push(let_(
            &lead_chunks,
            min(self.chunks.clone(), self.lead),
            span,
        ));
        let (per, lead_chunks) = (Expr::from(&per), Expr::from(&lead_chunks));
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
        // The register ring: a window (`WINDOW` words) a tensor, unit held and slot.
        let windows = |name: &str, n: i64| -> Vec<Buffer> {
            self.tensors
                .iter()
                .map(|_| local(name, WINDOW * n, DType::U32, span))
                .collect()
        };
        let regs = windows("staged_ring", HELD_UNITS * self.depth);
        let spare = windows("staged_spare", 1);
        for r in regs.iter().chain(&spare) {
            pre.push(alloc(r, span));
        }
        // Load (or store) one vector of chunk `chunk` of every tensor, the one whose
        // chunk-free parts `parts` gives, from the tensor into the window at word `word` (or
        // from there into the scratch).
        let vector_copy =
            |chunk: Expr, parts: &[Vector], word: i64, load: bool, wins: &[Buffer]| {
                let c = Var::new("staged_chunk", i32_);
                let mut body = vec![let_(&c, chunk, span)];
                for (ti, t) in self.tensors.iter().enumerate() {
                    let v = &parts[ti];
                    let (row, col, ok) = self.place(t, &Expr::from(&c), v);
                    let offset =
                        v.offset.clone() + Expr::from(&c).cast(DType::I64) * self.chunk_stride(t);
                    body.push(if_then(
                        Some(ok),
                        self.copy_vector(t, (row, col, offset), &wins[ti], word, load, span),
                        span,
                    ));
                }
                Stmt::seq(body, span)
            };
        // The chunk-free parts of unit `sub` (any, worked out here).
        let parts_of = |sub: Expr| -> Vec<Vector> {
            self.tensors
                .iter()
                .map(|t| self.vector_parts(t, me.clone() + all.clone() * sub.clone()))
                .collect()
        };

        // Prefetch into L2 this thread's held vectors of chunk `chunk`, if there is one.
        let prefetch = |chunk: Expr| -> Stmt {
            let c = Var::new("staged_ahead", i32_);
            let mut body = vec![];
            for parts in &held_parts {
                for (ti, t) in self.tensors.iter().enumerate() {
                    let (row, col, ok) = self.place(t, &Expr::from(&c), &parts[ti]);
                    let at = address_of(&t.staged.tensor, vec![row, col]);
                    body.push(if_then(
                        Some(ok),
                        eval(Intrinsic::PrefetchL2, vec![at], span),
                        span,
                    ));
                }
            }
            Stmt::seq(
                vec![
                    let_(&c, chunk, span),
                    if_then(
                        Some(Expr::from(&c).lt(self.chunks.clone())),
                        Stmt::seq(body, span),
                        span,
                    ),
                ],
                span,
            )
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

        // The first chunks, `Plan::batch` chunks in flight at a time: the held units of each
        // (whose places were worked out once), then any further units chunk by chunk. Their
        // prefetches go first (`TILELANG_STAGE_PREFETCH=0`: none): they hold no register, so
        // every chunk is in flight at once and the loads after them hit L2.
        if self.prefetch > 0 {
            let ahead = Var::new("staged_ahead", i32_);
            pre.push(serial_for(
                ahead.clone(),
                Expr::int(0),
                lead_chunks.clone(),
                prefetch(Expr::from(&ahead)),
                span,
            ));
        }
        let first = windows("staged_first", self.batch * HELD_UNITS);
        for r in &first {
            pre.push(alloc(r, span));
        }
        let batch = Var::new("staged_batch", i32_);
        let mut batch_body = vec![];
        for load in [true, false] {
            for q in 0..self.batch {
                let chunk = Expr::from(&batch) * self.batch + q;
                for (sub, parts) in held_parts.iter().enumerate() {
                    let word = (q * HELD_UNITS + sub as i64) * WINDOW;
                    let copy = vector_copy(chunk.clone(), parts, word, load, &first);
                    let due = chunk
                        .clone()
                        .lt(lead_chunks.clone())
                        .and(per.clone().gt(sub as i64));
                    batch_body.push(if_then(Some(due), copy, span));
                }
            }
        }
        pre.push(serial_for(
            batch,
            Expr::int(0),
            up_div(lead_chunks.clone(), Expr::int(self.batch)),
            Stmt::seq(batch_body, span),
            span,
        ));
        let (chunk, sub) = (
            Var::new("staged_chunk", i32_),
            Var::new("staged_unit", i32_),
        );
        let (ce, se) = (Expr::from(&chunk), Expr::from(&sub));
        let further = Stmt::seq(
            vec![
                vector_copy(ce.clone(), &parts_of(se.clone()), 0, true, &spare),
                vector_copy(ce, &parts_of(se), 0, false, &spare),
            ],
            span,
        );
        pre.push(serial_for(
            chunk,
            Expr::int(0),
            lead_chunks.clone(),
            serial_for(
                sub,
                Expr::int(HELD_UNITS),
                tl_ir::ops::max(per.clone() - HELD_UNITS, Expr::int(0)),
                further,
                span,
            ),
            span,
        ));
        if self.prefetch > 0 {
            let ahead = Var::new("staged_ahead", i32_);
            pre.push(serial_for(
                ahead.clone(),
                lead_chunks.clone(),
                Expr::int(self.prefetch),
                prefetch(Expr::from(&ahead)),
                span,
            ));
        }
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
                            let at = (slot * HELD_UNITS + sub) * WINDOW;
                            let parts = &held_parts[sub as usize];
                            let copy = vector_copy(chunk.clone(), parts, at, load, &regs);
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
                        vector_copy(chunk.clone(), &parts_of(extra_sub.clone()), 0, true, &spare),
                        vector_copy(chunk.clone(), &parts_of(extra_sub), 0, false, &spare),
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
            if self.prefetch > 0 {
                load_all.push(prefetch(nextc.clone() + self.prefetch));
            }
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
                // After the commit, while the step's wgmma runs (at the step's end, after the
                // stage's release, ran slower: run 38i).
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
