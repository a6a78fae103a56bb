//! Layout inference: give every fragment buffer and every parallel loop nest a fragment
//! layout (which thread holds which element).
//!
//! As in TileLang: strict constraints first (gemm accumulators and operands, user
//! annotations), then propagation through a worklist (a parallel loop takes the layout of a
//! fragment it indexes with all its loop variables, and imposes projections of it on the
//! fragments it indexes with fewer; a reduction imposes the reduced layout on its
//! destination; a fragment-to-fragment copy keeps the layout), then free choices (a blocked
//! layout) for loops nothing constrains, continuing the propagation after each choice. Two
//! operations that need different layouts for one buffer are a diagnostic naming both.

use std::collections::HashMap;

use tl_ir::{
    Buffer, DiagKind, Diagnostic, Diagnostics, Expr, ExprKind, ForKind, Fragment, GemmInstruction,
    Kernel, Scope, Span, Stmt, StmtKind, TileOp, Var, WarpPolicy,
};
use tl_target::Target;

use super::gemm::simt_accumulator_layout;

/// One place that constrains layouts.
#[derive(Clone, Debug)]
enum Node {
    /// A nest of parallel loops over `shape`, reading or writing fragments; each access maps
    /// the fragment's dims to loop dims.
    Nest {
        key: Var,
        shape: Vec<i64>,
        accesses: Vec<(Buffer, Vec<Option<usize>>)>,
        dtype_bytes: usize,
        span: Span,
    },
    Reduce {
        src: Buffer,
        dst: Buffer,
        dim: usize,
        span: Span,
    },
    Same {
        a: Buffer,
        b: Buffer,
        span: Span,
        what: &'static str,
    },
}

/// What inference decided: a layout per fragment buffer and per parallel nest (keyed by the
/// outermost loop variable).
#[derive(Clone, Debug, Default)]
pub struct Layouts {
    pub fragments: Vec<(Buffer, Fragment)>,
    pub nests: HashMap<u64, Fragment>,
    /// Shared buffers with a swizzled layout (tensor-core operands), by buffer id.
    pub smem: HashMap<u64, (Buffer, tl_layout::ComposedLayout)>,
}

impl Layouts {
    /// The layouts the `infer_layouts` pass recorded in the kernel's attributes.
    pub fn of(k: &Kernel) -> Layouts {
        Layouts {
            fragments: k.attrs.fragments.clone(),
            nests: k
                .attrs
                .nest_layouts
                .iter()
                .map(|(v, f)| (v.id(), f.clone()))
                .collect(),
            smem: k
                .attrs
                .smem_layouts
                .iter()
                .map(|(b, l)| (b.id(), (b.clone(), l.clone())))
                .collect(),
        }
    }
}

/// The `infer_layouts` stage: a layout for every fragment and parallel loop nest, and the
/// shared tiles' swizzles, recorded in the kernel's attributes (in a stable order) for the
/// stages after it.
pub fn run(k: Kernel, target: &Target) -> Result<Kernel, Diagnostics> {
    let (layouts, nest_vars) = infer_with_vars(&k, target)?;
    let mut out = k;
    out.attrs.fragments = layouts.fragments;
    let mut smem: Vec<(Buffer, tl_layout::ComposedLayout)> = layouts.smem.into_values().collect();
    smem.sort_by_key(|(b, _)| b.id());
    out.attrs.smem_layouts = smem;
    let mut nests: Vec<(Var, Fragment)> = nest_vars
        .into_iter()
        .filter_map(|v| layouts.nests.get(&v.id()).map(|f| (v.clone(), f.clone())))
        .collect();
    nests.dedup_by_key(|(v, _)| v.id());
    out.attrs.nest_layouts = nests;
    Ok(out)
}

#[derive(Clone)]
struct Infer {
    threads: i64,
    target: Target,
    gemms: Vec<(tl_ir::GemmOp, Span)>,
    smem: HashMap<u64, (Buffer, tl_layout::ComposedLayout)>,
    /// For each fragment, the narrowest element type it is copied from or to: loops over it
    /// then take vectors that make those copies 16 bytes wide.
    partner_bytes: HashMap<u64, usize>,
    known: HashMap<u64, (Buffer, Fragment, Span, String)>,
    order: Vec<Buffer>,
    nests: HashMap<u64, Fragment>,
    errors: Vec<Diagnostic>,
}

/// Which loop dim each index of a fragment access is, when every index is a plain loop var
/// (or the constant 0 into a dimension of extent 1: `None`).
fn index_map(b: &Buffer, idx: &[Expr], loop_vars: &[Var]) -> Option<Vec<Option<usize>>> {
    let shape = b.const_shape()?;
    idx.iter()
        .zip(shape)
        .map(|(e, ext)| match e.kind() {
            ExprKind::Var(v) => loop_vars.iter().position(|x| x == v).map(Some),
            _ if ext == 1 && e.as_int() == Some(0) => Some(None),
            _ => None,
        })
        .collect()
}

fn vec_for(bytes: usize) -> i64 {
    (16 / bytes.max(1)).clamp(1, 8) as i64
}

pub fn infer(k: &Kernel, target: &Target) -> Result<Layouts, Diagnostics> {
    Ok(infer_with_vars(k, target)?.0)
}

/// [`infer`], with the outermost variables of the parallel nests in program order.
fn infer_with_vars(k: &Kernel, target: &Target) -> Result<(Layouts, Vec<Var>), Diagnostics> {
    let mut inf = Infer {
        threads: k.threads as i64,
        target: *target,
        gemms: vec![],
        smem: HashMap::new(),
        partner_bytes: HashMap::new(),
        known: HashMap::new(),
        order: vec![],
        nests: HashMap::new(),
        errors: vec![],
    };
    let mut nodes = vec![];
    let mut frags: Vec<Buffer> = vec![];
    collect(&k.body, &mut nodes, &mut frags, &mut inf);
    inf.order = frags.clone();
    inf.gemm_layouts(&nodes);
    // Settle in program order; where that ends in a layout conflict, settle again choosing the
    // biggest open nest or fragment first. A small loop (a fold into a running result, say)
    // otherwise fixes a blocked layout that a reduction's output must contradict; the biggest
    // tile is the one whose layout the others derive from.
    let fresh = inf.clone();
    if let Err(first) = inf.settle(&nodes, &frags, false) {
        let conflict = first.0.iter().all(|d| d.kind == DiagKind::LayoutConflict);
        let mut retry = fresh;
        match retry.settle(&nodes, &frags, true) {
            Ok(()) if conflict => inf = retry,
            _ => return Err(first),
        }
    }
    let fragments = inf
        .order
        .iter()
        .filter_map(|b| {
            inf.known
                .get(&b.id())
                .map(|(b, f, _, _)| (b.clone(), f.clone()))
        })
        .collect();
    let nest_vars = nodes
        .iter()
        .filter_map(|n| match n {
            Node::Nest { key, .. } => Some(key.clone()),
            _ => None,
        })
        .collect();
    Ok((
        Layouts {
            fragments,
            nests: inf.nests,
            smem: inf.smem,
        },
        nest_vars,
    ))
}

fn collect(s: &Stmt, nodes: &mut Vec<Node>, frags: &mut Vec<Buffer>, inf: &mut Infer) {
    match &s.kind {
        StmtKind::Seq(v) => v.iter().for_each(|x| collect(x, nodes, frags, inf)),
        StmtKind::Alloc(b) if b.scope() == Scope::Fragment => frags.push(b.clone()),
        StmtKind::AnnotateLayout { buffer, layout } => inf.annotation(buffer, layout, s.span),
        StmtKind::If { then_, else_, .. } => {
            collect(then_, nodes, frags, inf);
            if let Some(e) = else_ {
                collect(e, nodes, frags, inf);
            }
        }
        StmtKind::For(l) if l.kind == ForKind::Parallel => {
            // A perfect nest of parallel loops.
            let mut vars = vec![l.var.clone()];
            let mut shape = vec![l.extent.as_int().unwrap_or(0)];
            let mut body = &l.body;
            loop {
                let inner = match &body.kind {
                    StmtKind::For(il) if il.kind == ForKind::Parallel => Some(il),
                    StmtKind::Seq(v) if v.len() == 1 => match &v[0].kind {
                        StmtKind::For(il) if il.kind == ForKind::Parallel => Some(il),
                        _ => None,
                    },
                    _ => None,
                };
                match inner {
                    Some(il) => {
                        vars.push(il.var.clone());
                        shape.push(il.extent.as_int().unwrap_or(0));
                        body = &il.body;
                    }
                    None => break,
                }
            }
            let mut accesses: Vec<(Buffer, Vec<Option<usize>>)> = vec![];
            let mut bytes = 16usize;
            let mut bad: Option<(Buffer, Vec<Expr>)> = None;
            body.walk(&mut |st| {
                let mut note = |b: &Buffer, idx: &[Expr]| {
                    bytes = bytes.min(b.dtype().bytes());
                    if b.scope() != Scope::Fragment {
                        return;
                    }
                    match index_map(b, idx, &vars) {
                        Some(m) => {
                            if !accesses.iter().any(|(x, mm)| x == b && *mm == m) {
                                accesses.push((b.clone(), m));
                            }
                        }
                        None => bad = Some((b.clone(), idx.to_vec())),
                    }
                };
                if let StmtKind::Store {
                    buffer, indices, ..
                } = &st.kind
                {
                    note(buffer, indices);
                }
                for e in st.exprs() {
                    e.visit(&mut |x| {
                        if let ExprKind::Load(b, idx) = x.kind() {
                            note(b, idx);
                        }
                    });
                }
            });
            if let Some((b, idx)) = bad {
                let shown: Vec<String> = idx.iter().map(|e| e.to_string()).collect();
                inf.errors.push(
                    Diagnostic::new(
                        DiagKind::LayoutConflict,
                        s.span,
                        format!(
                            "fragment `{}` is indexed as [{}] inside a parallel loop over {:?}; a fragment must be indexed by the loop's own variables",
                            b.name(),
                            shown.join(", "),
                            shape
                        ),
                    )
                    .note(b.span(), format!("`{}` declared here", b.name()))
                    .help("index fragments with the loop indices (e.g. `acc[i, j]`, `row[i]`), or use a shared buffer for other access patterns"),
                );
            }
            if shape.iter().any(|&e| e <= 0) {
                inf.errors.push(
                    Diagnostic::new(
                        DiagKind::Unsupported,
                        s.span,
                        "a parallel loop with a non-constant extent on a GPU target",
                    )
                    .help("give parallel loops constant extents (tile sizes); loop over a dynamic size with `t.serial`"),
                );
                return;
            }
            nodes.push(Node::Nest {
                key: l.var.clone(),
                shape,
                accesses,
                dtype_bytes: bytes,
                span: s.span,
            });
            collect(body, nodes, frags, inf);
        }
        StmtKind::For(l) => collect(&l.body, nodes, frags, inf),
        StmtKind::Op(op) => match op {
            TileOp::Gemm(g) if g.c.buffer.scope() == Scope::Fragment => {
                inf.gemms.push((g.clone(), s.span))
            }
            TileOp::Reduce(r)
                if r.src.buffer.scope() == Scope::Fragment
                    && r.dst.buffer.scope() == Scope::Fragment =>
            {
                nodes.push(Node::Reduce {
                    src: r.src.buffer.clone(),
                    dst: r.dst.buffer.clone(),
                    dim: r.dim,
                    span: s.span,
                })
            }
            TileOp::Copy(c)
                if (c.src.buffer.scope() == Scope::Fragment)
                    != (c.dst.buffer.scope() == Scope::Fragment) =>
            {
                let (f, o) = if c.src.buffer.scope() == Scope::Fragment {
                    (&c.src.buffer, &c.dst.buffer)
                } else {
                    (&c.dst.buffer, &c.src.buffer)
                };
                let e = inf.partner_bytes.entry(f.id()).or_insert(usize::MAX);
                *e = (*e).min(o.dtype().bytes());
            }
            TileOp::Copy(c)
                if c.src.buffer.scope() == Scope::Fragment
                    && c.dst.buffer.scope() == Scope::Fragment
                    && c.src.buffer.const_shape() == c.dst.buffer.const_shape() =>
            {
                nodes.push(Node::Same {
                    a: c.src.buffer.clone(),
                    b: c.dst.buffer.clone(),
                    span: s.span,
                    what: "copy",
                })
            }
            _ => {}
        },
        _ => {}
    }
}

/// A fragment layout from the user's CuTe thread-value layout `(threads, values) → colex index
/// of the tile`: each leaf of each mode becomes a digit along the dimension its stride steps
/// through (stride 0 in the thread mode: a replica).
pub fn fragment_from_cute(l: &tl_layout::Layout, shape: &[i64]) -> Result<Fragment, String> {
    let modes = l.modes();
    if modes.len() != 2 {
        return Err(format!("`{l}` is not a (threads, values) layout of rank 2"));
    }
    let mut colex = vec![1i64; shape.len()];
    for d in 1..shape.len() {
        colex[d] = colex[d - 1] * shape[d - 1];
    }
    let digit = |size: i64, stride: i64, thread: bool| -> Result<tl_ir::Mode, String> {
        if stride == 0 {
            return if thread {
                Ok(tl_ir::Mode::replica(size))
            } else {
                Err("a value mode has stride 0".into())
            };
        }
        let d = (0..shape.len())
            .rev()
            .find(|&d| colex[d] <= stride && stride % colex[d] == 0)
            .ok_or_else(|| format!("stride {stride} does not step along any dimension"))?;
        Ok(tl_ir::Mode::along(size, d, stride / colex[d]))
    };
    // A mode of size 1 names no digit (`(T,(8,1))` is `(T,8)`): dropped, not a replica.
    let leaves = |m: &tl_layout::Layout, thread: bool| -> Result<Vec<tl_ir::Mode>, String> {
        m.shape()
            .leaves()
            .into_iter()
            .zip(m.stride().leaves())
            .filter(|&(sz, _)| sz != 1)
            .map(|(sz, st)| digit(sz, st, thread))
            .collect()
    };
    let f = Fragment {
        shape: shape.to_vec(),
        thread_modes: leaves(&modes[0], true)?,
        value_modes: leaves(&modes[1], false)?,
    };
    f.validate().map_err(|e| e.to_string())?;
    Ok(f)
}

impl Infer {
    /// Propagate; when stuck, choose a blocked layout for an unresolved nest, then for a
    /// fragment nothing constrains (each the first in program order), or, when
    /// `largest_first`, for whichever of them has the most elements; until all have one.
    fn settle(
        &mut self,
        nodes: &[Node],
        frags: &[Buffer],
        largest_first: bool,
    ) -> Result<(), Diagnostics> {
        let elems = |shape: &[i64]| shape.iter().product::<i64>();
        loop {
            while self.propagate(nodes) {}
            if !self.errors.is_empty() {
                return Err(Diagnostics(std::mem::take(&mut self.errors)));
            }
            let open_nests = nodes.iter().filter_map(|n| match n {
                Node::Nest {
                    key,
                    shape,
                    dtype_bytes,
                    ..
                } if !self.nests.contains_key(&key.id()) => {
                    Some((key.clone(), shape.clone(), *dtype_bytes))
                }
                _ => None,
            });
            let open_nests: Vec<_> = open_nests.collect();
            let open_frags: Vec<&Buffer> = frags
                .iter()
                .filter(|b| !self.known.contains_key(&b.id()))
                .collect();
            let frag_elems = |b: &Buffer| elems(&b.const_shape().unwrap_or_default());
            // Program order: nests first, then fragments. Biggest first: whichever of all the
            // open nests and fragments has the most elements (the first of equals, nests
            // before fragments).
            let nest_first = if largest_first {
                let nest = open_nests.iter().map(|(_, s, _)| elems(s)).max();
                let frag = open_frags.iter().map(|b| frag_elems(b)).max();
                match (nest, frag) {
                    (Some(n), Some(f)) => n >= f,
                    (n, _) => n.is_some(),
                }
            } else {
                !open_nests.is_empty()
            };
            let biggest = open_nests.iter().map(|(_, s, _)| elems(s)).max();
            let chosen_nest = open_nests
                .iter()
                .find(|(_, s, _)| nest_first && (!largest_first || Some(elems(s)) == biggest))
                .cloned();
            if let Some((key, shape, bytes)) = chosen_nest {
                let partner = nodes
                    .iter()
                    .find_map(|n| match n {
                        Node::Nest {
                            key: k2, accesses, ..
                        } if k2 == &key => Some(
                            accesses
                                .iter()
                                .filter_map(|(b, _)| self.partner_bytes.get(&b.id()).copied())
                                .min(),
                        ),
                        _ => None,
                    })
                    .flatten();
                let bytes = partner.map_or(bytes, |p| p.min(bytes));
                let f = Fragment::blocked(&shape, self.threads, vec_for(bytes));
                self.nests.insert(key.id(), f);
                continue;
            }
            let biggest = open_frags.iter().map(|b| frag_elems(b)).max();
            let open_frag = open_frags
                .iter()
                .find(|b| !largest_first || Some(frag_elems(b)) == biggest)
                .map(|b| (*b).clone());
            if let Some(b) = open_frag {
                let shape = b.const_shape().unwrap_or_default();
                let f = Fragment::blocked(&shape, self.threads, vec_for(b.dtype().bytes()));
                self.assign(
                    &b,
                    f,
                    b.span(),
                    "its allocation (no operation constrains it)".into(),
                );
                continue;
            }
            return Ok(());
        }
    }

    /// `t.annotate_layout(buf, "...")`: a strict constraint from the user.
    fn annotation(&mut self, b: &Buffer, text: &str, span: Span) {
        let bad = |msg: String| {
            Diagnostic::new(
                DiagKind::InvalidArgument,
                span,
                format!("layout annotation of `{}`: {msg}", b.name()),
            )
            .note(b.span(), format!("`{}` declared here", b.name()))
        };
        match b.scope() {
            Scope::Fragment => {
                let shape = b.const_shape().unwrap_or_default();
                match tl_layout::parse_layout(text) {
                    Err(e) => self.errors.push(bad(e.to_string()).help(
                        "write a thread-value layout in CuTe notation, e.g. `(128,8):(8,1)` for 128 threads holding 8 consecutive elements each",
                    )),
                    Ok(l) => match fragment_from_cute(&l, &shape) {
                        Ok(f) if f.threads() != self.threads => self.errors.push(bad(format!(
                            "`{text}` spreads the tile over {} threads, but the block has {}",
                            f.threads(),
                            self.threads
                        ))),
                        Ok(f) => {
                            self.assign(b, f, span, "the user's annotation".into());
                        }
                        Err(e) => self.errors.push(bad(format!("`{text}` is not a layout of the {shape:?} tile: {e}"))),
                    },
                }
            }
            Scope::Shared => {
                let shape = b.const_shape().unwrap_or_default();
                let parsed: Result<tl_layout::ComposedLayout, String> =
                    match tl_layout::parse_composed(text) {
                        Ok(c) => Ok(c),
                        Err(_) => match (
                            tl_layout::parse_layout(text),
                            tl_layout::Swizzle::new(0, 0, 0),
                        ) {
                            (Ok(l), Ok(id)) => Ok(tl_layout::ComposedLayout::new(id, 0, l)),
                            (Err(e), _) => Err(e.to_string()),
                            (_, Err(e)) => Err(e.to_string()),
                        },
                    };
                match parsed {
                    Ok(l) if shape.len() == 2 && l.size() == shape[0] * shape[1] => {
                        self.smem.insert(b.id(), (b.clone(), l));
                    }
                    Ok(l) => self.errors.push(bad(format!(
                        "`{l}` has {} elements but the buffer has shape {shape:?} (a rank-2 layout of (rows, cols) is expected)",
                        l.size()
                    ))),
                    Err(e) => self.errors.push(bad(e).help(
                        "write a (rows, cols) layout, optionally swizzled: `Sw<3,3,3> o 0 o (64,64):(64,1)`",
                    )),
                }
            }
            _ => self.errors.push(bad(format!(
                "layouts apply to fragments and shared buffers, not {} memory",
                b.scope()
            ))),
        }
    }

    /// Strict constraints from gemms: the accumulator layout (tensor-core atoms when the
    /// target and types allow, else the SIMT layout) and swizzled shared operands. With the
    /// automatic warp policy, an accumulator whose rows are reduced or that feeds another gemm
    /// as A gets whole rows per warp (FullRow), so row vectors and the A operand line up;
    /// otherwise warp tiles are as square as possible.
    fn gemm_layouts(&mut self, nodes: &[Node]) {
        let reduced: Vec<u64> = nodes
            .iter()
            .filter_map(|n| match n {
                Node::Reduce { src, .. } => Some(src.id()),
                _ => None,
            })
            .collect();
        let a_frags: Vec<u64> = self
            .gemms
            .iter()
            .filter(|(g, _)| g.a.buffer.scope() == Scope::Fragment)
            .map(|(g, _)| g.a.buffer.id())
            .collect();
        // Accumulators scaled by row vectors in a loop (attention's O *= rescale[i]).
        let row_coupled: Vec<u64> = nodes
            .iter()
            .filter_map(|n| match n {
                Node::Nest { accesses, .. }
                    if accesses
                        .iter()
                        .any(|(b, m)| m.len() < b.rank() || b.rank() == 1) =>
                {
                    Some(
                        accesses
                            .iter()
                            .filter(|(b, _)| b.rank() == 2)
                            .map(|(b, _)| b.id()),
                    )
                }
                _ => None,
            })
            .flatten()
            .collect();
        let feeds_a = |c: &Buffer| {
            a_frags.contains(&c.id())
                || nodes.iter().any(|n| match n {
                    Node::Same { a, b, .. } => a == c && a_frags.contains(&b.id()),
                    _ => false,
                })
        };
        let warps = self.threads / self.target.warp_size() as i64;
        for (g, span) in self.gemms.clone() {
            let shape = g.c.buffer.const_shape().unwrap_or_default();
            if shape.len() != 2 {
                continue;
            }
            let (m, n) = (shape[0], shape[1]);
            match g.instruction {
                Some(inst @ (GemmInstruction::MmaSync | GemmInstruction::Wgmma)) => {
                    let policy = match g.policy {
                        // One warpgroup per 64 rows: every warp along M.
                        _ if inst == GemmInstruction::Wgmma => WarpPolicy::FullRow,
                        WarpPolicy::Auto
                            if reduced.contains(&g.c.buffer.id())
                                || feeds_a(&g.c.buffer)
                                || row_coupled.contains(&g.c.buffer.id()) =>
                        {
                            WarpPolicy::FullRow
                        }
                        p => p,
                    };
                    match super::mma::partition(m, n, warps, policy) {
                        Ok((wm, wn)) => {
                            let f = super::mma::c_layout(m, n, wm, wn);
                            self.assign(&g.c.buffer, f, span, "the tensor-core gemm that accumulates into it".into());
                            for r in [&g.a, &g.b] {
                                if r.buffer.scope() == Scope::Shared {
                                    if let Some(l) = super::mma::operand_smem_layout(r) {
                                        self.smem.insert(r.buffer.id(), (r.buffer.clone(), l));
                                    }
                                }
                            }
                        }
                        Err(msg) => self.errors.push(
                            Diagnostic::new(DiagKind::InvalidArgument, span, msg)
                                .help("change the block tile sizes or the threads per block, or pick another warp policy"),
                        ),
                    }
                }
                Some(GemmInstruction::Mfma(shape)) => {
                    let policy = match g.policy {
                        WarpPolicy::Auto
                            if reduced.contains(&g.c.buffer.id())
                                || feeds_a(&g.c.buffer)
                                || row_coupled.contains(&g.c.buffer.id()) =>
                        {
                            WarpPolicy::FullRow
                        }
                        p => p,
                    };
                    match super::mfma::partition(m, n, warps, shape, policy) {
                        Ok((wm, wn)) => {
                            let f = super::mfma::c_layout(m, n, wm, wn, shape);
                            self.assign(&g.c.buffer, f, span, "the MFMA gemm that accumulates into it".into());
                            for (r, k_first) in [(&g.a, g.trans_a), (&g.b, !g.trans_b)] {
                                if r.buffer.scope() == Scope::Shared {
                                    // A tile stored [K, rows] is kept K-interleaved, so each
                                    // lane reads its k run in one 16-byte read instead of
                                    // element by element — unless the arch reads it
                                    // transposed (gfx950), when it stays as it is in memory
                                    // and is loaded direct to LDS.
                                    let tr = self.target.amd().is_some_and(|a| a.lds_transpose_reads)
                                        && r.buffer.dtype().bytes() == 2;
                                    let kl = (k_first && !tr)
                                        .then(|| super::mfma::k_interleaved_operand_layout(r))
                                        .flatten();
                                    if let Some(l) = kl.or_else(|| super::mma::operand_smem_layout(r)) {
                                        self.smem.insert(r.buffer.id(), (r.buffer.clone(), l));
                                    }
                                }
                            }
                        }
                        Err(msg) => self.errors.push(
                            Diagnostic::new(DiagKind::InvalidArgument, span, msg)
                                .help("change the block tile sizes or the threads per block, or pick another warp policy"),
                        ),
                    }
                }
                _ => {
                    let f = simt_accumulator_layout(m, n, self.threads);
                    self.assign(
                        &g.c.buffer,
                        f,
                        span,
                        "the gemm that accumulates into it".into(),
                    );
                }
            }
        }
    }

    /// Record a layout for a fragment; report a conflict if it already has another.
    fn assign(&mut self, b: &Buffer, f: Fragment, span: Span, why: String) -> bool {
        match self.known.get(&b.id()) {
            Some((_, old, old_span, old_why)) => {
                if !old.equivalent(&f) {
                    let d = Diagnostic::new(
                        DiagKind::LayoutConflict,
                        span,
                        format!(
                            "fragment `{}` needs two different layouts: {} (from {why}) and {} (from {old_why})",
                            b.name(),
                            f.to_cute_beside(old),
                            old.to_cute_beside(&f)
                        ),
                    )
                    .note(*old_span, format!("the layout {} comes from {old_why}", old.to_cute_beside(&f)))
                    .note(b.span(), format!("`{}` declared here", b.name()))
                    .help("copy the fragment into a new fragment (or through shared memory) where the other layout is needed, or annotate the layout you want with `t.annotate_layout`");
                    if !self.errors.iter().any(|e| e.message == d.message) {
                        self.errors.push(d);
                    }
                }
                false
            }
            None => {
                if let Err(e) = f.validate() {
                    self.errors.push(Diagnostic::internal(format!(
                        "inferred an ill-formed layout {} for `{}`: {e}",
                        f.to_cute(),
                        b.name()
                    )));
                    return false;
                }
                self.known.insert(b.id(), (b.clone(), f, span, why));
                true
            }
        }
    }

    fn get(&self, b: &Buffer) -> Option<Fragment> {
        self.known.get(&b.id()).map(|(_, f, _, _)| f.clone())
    }

    /// One sweep over the nodes; true if anything new was learned.
    fn propagate(&mut self, nodes: &[Node]) -> bool {
        let mut changed = false;
        for n in nodes {
            match n {
                Node::Nest {
                    key,
                    shape,
                    accesses,
                    span,
                    ..
                } => {
                    if !self.nests.contains_key(&key.id()) {
                        // A fragment indexed by every loop var (in some order) fixes the nest.
                        // (Unit loop dims need not be indexed.)
                        let full = accesses.iter().find_map(|(b, m)| {
                            let mut sorted: Vec<usize> = m.iter().flatten().copied().collect();
                            sorted.sort();
                            let needed: Vec<usize> =
                                (0..shape.len()).filter(|&d| shape[d] != 1).collect();
                            let covered = needed.iter().all(|d| sorted.contains(d));
                            if covered && sorted.windows(2).all(|w| w[0] != w[1]) {
                                self.get(b).map(|f| permute_to_loop(&f, m, shape))
                            } else {
                                None
                            }
                        });
                        if let Some(f) = full {
                            self.nests.insert(key.id(), f);
                            changed = true;
                        }
                    }
                    if let Some(nest) = self.nests.get(&key.id()).cloned() {
                        for (b, m) in accesses {
                            let want = project(&nest, m);
                            if self.assign(b, want, *span, "a parallel loop that indexes it".into())
                            {
                                changed = true;
                            }
                        }
                    }
                }
                Node::Reduce {
                    src,
                    dst,
                    dim,
                    span,
                } => {
                    if let Some(f) = self.get(src) {
                        if self.assign(
                            dst,
                            f.reduce_into(*dim, dst.rank()),
                            *span,
                            format!("a reduction of `{}`", src.name()),
                        ) {
                            changed = true;
                        }
                    }
                }
                Node::Same { a, b, span, what } => match (self.get(a), self.get(b)) {
                    (Some(f), None) => {
                        changed |=
                            self.assign(b, f, *span, format!("a {what} from `{}`", a.name()));
                    }
                    (None, Some(f)) => {
                        changed |= self.assign(a, f, *span, format!("a {what} to `{}`", b.name()));
                    }
                    (Some(f), Some(_)) => {
                        self.assign(b, f, *span, format!("a {what} from `{}`", a.name()));
                    }
                    _ => {}
                },
            }
        }
        changed
    }
}

/// A fragment's layout seen from a loop nest (of `shape`) whose dim `m[d]` is the fragment's
/// dim `d`.
fn permute_to_loop(f: &Fragment, m: &[Option<usize>], shape: &[i64]) -> Fragment {
    let remap = |mode: &tl_ir::Mode| match mode.target {
        Some((d, s)) => match m.get(d).copied().flatten() {
            Some(ld) => tl_ir::Mode::along(mode.extent, ld, s),
            None => *mode,
        },
        None => *mode,
    };
    Fragment {
        shape: shape.to_vec(),
        thread_modes: f.thread_modes.iter().map(remap).collect(),
        value_modes: f.value_modes.iter().map(remap).collect(),
    }
}

/// The layout a fragment indexed by `m` (loop dims, or `None` for a unit dim) must have.
fn project(nest: &Fragment, m: &[Option<usize>]) -> Fragment {
    let kept: Vec<usize> = m.iter().flatten().copied().collect();
    let p = nest.project(&kept);
    // Put unit dims back where the fragment has them.
    let mut shape = vec![];
    let mut pos = vec![];
    let mut k = 0;
    for x in m {
        match x {
            Some(_) => {
                pos.push(shape.len());
                shape.push(p.shape[k]);
                k += 1;
            }
            None => shape.push(1),
        }
    }
    let re = |mode: &tl_ir::Mode| match mode.target {
        Some((d, s)) => tl_ir::Mode::along(mode.extent, pos[d], s),
        None => *mode,
    };
    Fragment {
        shape,
        thread_modes: p.thread_modes.iter().map(re).collect(),
        value_modes: p.value_modes.iter().map(re).collect(),
    }
}
