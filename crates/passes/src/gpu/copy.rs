//! Copies on the GPU. Between memories every thread sees (global, shared) the tile is split
//! evenly over the block's threads in vectors of up to 16 bytes; with a fragment on one side,
//! each thread moves its own elements (again in vectors when they are contiguous). Global
//! tails are predicated: loads past the edge read zeros, stores past it are skipped. When a
//! vector path needs a dynamic size to be a multiple of the vector, the choice is made at run
//! time (one uniform branch).

use tl_ir::{
    Buffer, DType, Diagnostic, Expr, ForKind, Fragment, Intrinsic, Region, Scope, Span, Stmt,
    StmtKind, Var,
};

use super::lower::Ctx;
use crate::tile_util::{and_opt, for_loop, if_then, in_bounds, nonunit_dims, region_index, store};

/// Coordinates of flat row-major index `flat` in a tile of `ext`.
pub fn unflatten(flat: &Expr, ext: &[i64]) -> Vec<Expr> {
    let mut out = vec![Expr::int(0); ext.len()];
    let mut stride = 1i64;
    for d in (0..ext.len()).rev() {
        let q = if stride == 1 {
            flat.clone()
        } else {
            flat.floordiv(stride)
        };
        out[d] = if d == 0 { q } else { q.floormod(ext[d]) };
        stride *= ext[d];
    }
    out
}

impl Ctx<'_> {
    /// Is `e` provably a multiple of `v`?
    fn multiple_of(&self, e: &Expr, v: i64) -> bool {
        v <= 1 || self.analyzer.simplify(&e.floormod(v)).as_int() == Some(0)
    }

    /// Can region `r` be accessed in vectors of `v` elements along its last dim? Returns the
    /// run-time condition still needed (None: always), or Err if never.
    pub(crate) fn vector_ok(&self, r: &Region, v: i64) -> Result<Option<Expr>, ()> {
        if v <= 1 {
            return Ok(None);
        }
        let b = &r.buffer;
        let rank = b.rank();
        if rank == 0 {
            return Err(());
        }
        let nonunit = nonunit_dims(r);
        // The vector runs along the buffer's contiguous last dim.
        if nonunit.last().copied() != Some(rank - 1) && r.extents[rank - 1].as_int() != Some(1) {
            return Err(());
        }
        if nonunit.last().copied() != Some(rank - 1) {
            return Err(());
        }
        if !self.multiple_of(&r.offsets[rank - 1], v) {
            return Err(());
        }
        if !self.smem_keeps_runs(b, v) {
            return Err(());
        }
        // With the last dim a multiple of the vector, every vector is wholly inside the
        // tensor or wholly outside, so one predicate per vector is exact.
        let last = &b.shape()[rank - 1];
        match last.as_int() {
            Some(n) if n % v == 0 => Ok(None),
            Some(_) => Err(()),
            // Known from the variant's size assumptions (`dim_multiples`).
            None if self.multiple_of(last, v) => Ok(None),
            None => Ok(Some(last.floormod(v).eq_(0))),
        }
    }

    /// Does shared buffer `b`'s layout (if it has one) store every aligned run of `v`
    /// elements along the tile's last dim as `v` consecutive elements? A swizzle on 16-byte
    /// chunks does; a K-interleaved operand tile (`mfma::k_interleaved_layout`) does not, and
    /// a vector access would then read or write the wrong elements.
    fn smem_keeps_runs(&self, b: &Buffer, v: i64) -> bool {
        let Some((_, l)) = self
            .layouts
            .smem
            .get(&b.id())
            .or_else(|| self.extra_smem.get(&b.id()))
        else {
            return true;
        };
        let shape = b.const_shape().unwrap_or_default();
        let rank = shape.len();
        if rank < 2 {
            return true;
        }
        *self
            .run_cache
            .borrow_mut()
            .entry((b.id(), v))
            .or_insert_with(|| super::smem::keeps_runs(l, shape[rank - 2], shape[rank - 1], v))
    }

    /// The widest vector (elements) both regions allow, with the run-time condition.
    fn pick_vector(
        &self,
        a: &Region,
        b: &Region,
        last_extent: i64,
        max_elems: i64,
    ) -> (i64, Option<Expr>) {
        // The widest vector that needs no run-time check wins when there is one (a variant
        // for sizes that are multiples of 4 copies 4 elements at a time, with no branch);
        // otherwise the widest with a check, whose other side copies element by element.
        let mut checked: Option<(i64, Option<Expr>)> = None;
        let mut v = max_elems;
        while v > 1 {
            if last_extent % v == 0 {
                if let (Ok(ca), Ok(cb)) = (self.vector_ok(a, v), self.vector_ok(b, v)) {
                    match and_opt(ca, cb) {
                        None => return (v, None),
                        Some(c) => {
                            checked.get_or_insert((v, Some(c)));
                        }
                    }
                }
            }
            v /= 2;
        }
        checked.unwrap_or((1, None))
    }

    pub fn lower_copy(
        &mut self,
        src: &Region,
        dst: &Region,
        span: Span,
        async_ok: bool,
    ) -> Result<Stmt, Diagnostic> {
        self.lower_copy_guarded(src, dst, span, async_ok, None)
    }

    /// [`lower_copy`](Self::lower_copy) of a copy that moves data only where `guard` holds
    /// (`CopyOp::guard`).
    pub fn lower_copy_guarded(
        &mut self,
        src: &Region,
        dst: &Region,
        span: Span,
        async_ok: bool,
        guard: Option<&Expr>,
    ) -> Result<Stmt, Diagnostic> {
        if let Some(s) = self.copy_k_interleaved(src, dst, guard, span) {
            return Ok(s);
        }
        if guard.is_some() && !(async_ok && self.target.is_hip()) {
            let s = self.lower_copy(src, dst, span, async_ok)?;
            return Ok(if_then(guard.cloned(), s, span));
        }
        match (src.buffer.scope(), dst.buffer.scope()) {
            (Scope::Fragment, Scope::Fragment) => self.copy_frag_frag(src, dst, span),
            (Scope::Fragment, Scope::Global) => self.copy_frag_to_global(src, dst, span),
            (Scope::Fragment, _) => self.copy_frag(dst, src, false, None, span),
            (_, Scope::Fragment) => self.copy_frag(src, dst, true, None, span),
            (Scope::Local | Scope::Var, _) | (_, Scope::Local | Scope::Var) => Err(self
                .unsupported(span, "a tile copy to or from a per-thread local buffer")
                .help("copy through a fragment or shared buffer instead")),
            (Scope::Global, Scope::Shared) if async_ok && self.target.is_hip() => {
                match self.copy_buffer_lds(src, dst, guard, span) {
                    Some(s) => Ok(s),
                    // Through registers, synchronously (the guard still decides who copies),
                    // one vector at a time: this runs inside a mainloop that already holds
                    // the accumulators, where unrolled copies would keep their data in
                    // registers across the computation and spill.
                    None => {
                        let outer = std::mem::replace(&mut self.rolled_copies, true);
                        let s = self.copy_blocked(src, dst, span, false);
                        self.rolled_copies = outer;
                        Ok(if_then(guard.cloned(), s?, span))
                    }
                }
            }
            _ => self.copy_blocked(src, dst, span, async_ok),
        }
    }

    /// Global/shared ↔ global/shared: every thread takes every `T`-th vector of the tile.
    fn copy_blocked(
        &mut self,
        src: &Region,
        dst: &Region,
        span: Span,
        async_ok: bool,
    ) -> Result<Stmt, Diagnostic> {
        let ext: Vec<i64> = nonunit_dims(dst)
            .iter()
            .map(|&d| dst.extents[d].as_int().unwrap_or(1))
            .collect();
        let numel: i64 = ext.iter().product();
        let same = src.buffer.dtype() == dst.buffer.dtype();
        let bytes = src.buffer.dtype().bytes().max(dst.buffer.dtype().bytes()) as i64;
        let max_v = if same { (16 / bytes).max(1) } else { 1 };
        let last = ext.last().copied().unwrap_or(1);
        let (v, cond) = self.pick_vector(src, dst, last, max_v);
        let fast = self.copy_blocked_with(src, dst, &ext, numel, v, span, async_ok);
        match cond {
            None => Ok(fast),
            Some(c) => {
                let slow = self.copy_blocked_with(src, dst, &ext, numel, 1, span, async_ok);
                Ok(crate::tile_util::if_else(c, fast, slow, span))
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn copy_blocked_with(
        &mut self,
        src: &Region,
        dst: &Region,
        ext: &[i64],
        numel: i64,
        v: i64,
        span: Span,
        async_ok: bool,
    ) -> Stmt {
        let nvec = numel / v;
        let iters = (nvec + self.threads - 1) / self.threads;
        // The scalar path is the fallback for misaligned sizes: keep it rolled, so it costs
        // little code (it touches no register arrays, so it needs no constant indices), but
        // in steps of SCALAR_UNROLL unrolled iterations, whose loads and stores overlap: one
        // at a time, an epilogue storing a 128×256 tile into rows of an odd length waited on
        // each shared load in turn (4096×4095×4096 bf16: 620 TFLOP/s against 722 aligned).
        const SCALAR_UNROLL: i64 = 8;
        let stepped = v == 1 && !self.rolled_copies && iters > SCALAR_UNROLL;
        let it = Var::new("it", DType::I32);
        let (outer, inner) = (Var::new("io", DType::I32), Var::new("ii", DType::I32));
        let it_expr = if stepped {
            outer.expr() * SCALAR_UNROLL + inner.expr()
        } else {
            it.expr()
        };
        let flat_vec = it_expr * self.threads + self.tid.clone();
        let coords = unflatten(&(flat_vec.clone() * v), ext);
        let sidx = region_index(src, &coords);
        let didx = region_index(dst, &coords);
        let body = self.move_elements(src, dst, &sidx, &didx, v, span, async_ok);
        let covered = if stepped {
            (iters + SCALAR_UNROLL - 1) / SCALAR_UNROLL * SCALAR_UNROLL
        } else {
            iters
        };
        let body = if nvec != covered * self.threads {
            if_then(Some(flat_vec.lt(nvec)), body, span)
        } else {
            body
        };
        if stepped {
            let steps = (iters + SCALAR_UNROLL - 1) / SCALAR_UNROLL;
            let inner_loop = for_loop(&inner, SCALAR_UNROLL, ForKind::Unrolled, body, span);
            return for_loop(&outer, steps, ForKind::Serial, inner_loop, span);
        }
        let kind = if (v > 1 && !self.rolled_copies)
            || iters <= 1
            || (iters <= 4 && !self.rolled_copies)
        {
            ForKind::Unrolled
        } else {
            ForKind::Serial
        };
        for_loop(&it, iters, kind, body, span)
    }

    /// Move `v` consecutive elements from `src[sidx..]` to `dst[didx..]` with tail predicates.
    #[allow(clippy::too_many_arguments)]
    fn move_elements(
        &mut self,
        src: &Region,
        dst: &Region,
        sidx: &[Expr],
        didx: &[Expr],
        v: i64,
        span: Span,
        async_ok: bool,
    ) -> Stmt {
        let (sb, db) = (&src.buffer, &dst.buffer);
        let src_in = in_bounds(sb, sidx);
        let dst_in = in_bounds(db, didx);
        let bytes = v * sb.dtype().bytes() as i64;
        let use_async = async_ok
            && self.target.has_cp_async()
            && sb.scope() == Scope::Global
            && db.scope() == Scope::Shared
            && sb.dtype() == db.dtype()
            && matches!(bytes, 4 | 8 | 16)
            && dst_in.is_none();
        if use_async {
            let pred = src_in.unwrap_or_else(|| Expr::bool(true));
            return self.eval(
                Intrinsic::CpAsync {
                    bytes: bytes as u32,
                },
                vec![
                    crate::tile_util::address_of(db, didx.to_vec()),
                    crate::tile_util::address_of(sb, sidx.to_vec()),
                    pred,
                ],
                span,
            );
        }
        if v > 1 {
            // A source out of bounds zero-fills the destination: the predicate goes into the
            // copy rather than around it, so no branch separates the copies' addresses.
            let mut args = vec![
                crate::tile_util::address_of(db, didx.to_vec()),
                crate::tile_util::address_of(sb, sidx.to_vec()),
            ];
            args.extend(src_in);
            let copy = self.eval(Intrinsic::VecCopy { lanes: v as u32 }, args, span);
            return if_then(dst_in, copy, span);
        }
        let load = Expr::load(sb, sidx.to_vec()).cast(db.dtype());
        let val = match src_in {
            Some(p) => Expr::if_then_else(p, load, Expr::int_of(0, db.dtype())),
            None => load,
        };
        if_then(dst_in, store(db, didx.to_vec(), val, span), span)
    }

    /// A fragment on one side: each thread moves the elements its layout gives it.
    pub(super) fn copy_frag(
        &mut self,
        other: &Region,
        frag: &Region,
        load: bool,
        window: Option<FragWindow>,
        span: Span,
    ) -> Result<Stmt, Diagnostic> {
        let fb = &frag.buffer;
        let f = self.fragment_of(fb, span)?;
        let local = self.local_of(fb, span)?;
        if !frag.is_full() {
            return Err(self
                .unsupported(span, &format!("a copy of part of fragment `{}`", fb.name()))
                .help("copy whole fragments; slice the other side instead"));
        }
        // Fragment dims (non-unit) line up with the other side's non-unit dims, or, where the
        // copy reshapes, with its elements in row-major order.
        let fdims = nonunit_dims(frag);
        let fshape: Vec<i64> = fb.const_shape().unwrap_or_default();
        // (A window stages part of the fragment's columns into a narrower shared tile: lined
        // up by dims, not a reshape.)
        let reshaping = window.is_none() && crate::tile_util::copy_reshapes(frag, other);
        let reshape = reshaping.then(|| {
            (
                crate::tile_util::squeezed_const_extents(frag).unwrap_or_default(),
                crate::tile_util::squeezed_const_extents(other).unwrap_or_default(),
            )
        });
        let vec_mode = f.value_modes.first().copied();
        let last_dim = fshape.len().saturating_sub(1);
        // A vector stays within one row of the other side where that row is whole vectors.
        let other_row = reshape.as_ref().and_then(|(_, o)| o.last().copied());
        let contiguous = match vec_mode {
            Some(m) => m.target == Some((last_dim, 1)) && fdims.last() == Some(&last_dim),
            None => false,
        };
        let ob = &other.buffer;
        let same = ob.dtype() == fb.dtype();
        let max_v = (16 / ob.dtype().bytes().max(1) as i64).max(1);
        let (mut v, mut cond) = (1, None);
        if contiguous {
            let e = vec_mode.map(|m| m.extent).unwrap_or(1);
            // As `pick_vector`: the widest unchecked vector, else the widest checked one.
            let mut checked: Option<(i64, Option<Expr>)> = None;
            let mut cand = max_v.min(e);
            while cand > 1 {
                if e % cand == 0 && other_row.is_none_or(|r| r % cand == 0) {
                    match self.vector_ok(other, cand) {
                        Ok(None) => {
                            checked = Some((cand, None));
                            break;
                        }
                        Ok(Some(c)) => {
                            checked.get_or_insert((cand, Some(c)));
                        }
                        Err(()) => {}
                    }
                }
                cand /= 2;
            }
            if let Some((cv, c)) = checked {
                v = cv;
                cond = c;
            }
        }
        // A window's elements must start and end on whole vectors; shifted rows take
        // elements one at a time (a shift may split a pair).
        if window.is_some_and(|w| w.first % v != 0 || w.count % v != 0)
            || self.frag_col_shift.is_some()
        {
            (v, cond) = (1, None);
        }
        let (first, count, col_lo) = match window {
            Some(w) => (w.first, w.count, w.col_lo),
            None => (0, f.local_size(), 0),
        };
        let replica_guard = if !load && f.replication() > 1 {
            Some(f.replica_index(&self.tid).eq_(0))
        } else {
            None
        };
        let build = |cx: &mut Ctx, v: i64| -> Stmt {
            let w = Var::new("w", DType::I32);
            let v0 = (w.expr() + first / v) * v;
            let coords = f.coords(&cx.tid, &v0);
            let mut fcoords: Vec<Expr> = fdims.iter().map(|&d| coords[d].clone()).collect();
            if col_lo != 0 {
                if let Some(c) = fcoords.last_mut() {
                    *c = c.clone() - col_lo;
                }
            }
            if let Some((from, to)) = &reshape {
                fcoords = crate::tile_util::reshaped_vars(from, &fcoords, to);
            }
            let mut oidx = region_index(other, &fcoords);
            // A staging tile with shifted rows: each element `shift(row)` further along.
            if let (Some((row, shift)), [r, .., c]) = (&cx.frag_col_shift, oidx.as_mut_slice()) {
                let map = std::collections::HashMap::from([(row.id(), r.clone())]);
                *c = c.clone() + shift.substitute(&map);
            }
            let o_in = in_bounds(ob, &oidx);
            let body = if v == 1 {
                if load {
                    let val = Expr::load(ob, oidx.clone()).cast(fb.dtype());
                    let val = match o_in {
                        Some(p) => Expr::if_then_else(p, val, Expr::int_of(0, fb.dtype())),
                        None => val,
                    };
                    store(&local, vec![v0.clone()], val, span)
                } else {
                    let val = Expr::load(&local, vec![v0.clone()]).cast(ob.dtype());
                    if_then(o_in, store(ob, oidx.clone(), val, span), span)
                }
            } else if same {
                let (d, s) = if load {
                    (
                        crate::tile_util::address_of(&local, vec![v0.clone()]),
                        crate::tile_util::address_of(ob, oidx.clone()),
                    )
                } else {
                    (
                        crate::tile_util::address_of(ob, oidx.clone()),
                        crate::tile_util::address_of(&local, vec![v0.clone()]),
                    )
                };
                let copy = cx.eval(Intrinsic::VecCopy { lanes: v as u32 }, vec![d, s], span);
                match (o_in, load) {
                    (None, _) => copy,
                    (Some(p), true) => {
                        let zeros = (0..v)
                            .map(|e| {
                                store(
                                    &local,
                                    vec![v0.clone() + e],
                                    Expr::int_of(0, fb.dtype()),
                                    span,
                                )
                            })
                            .collect();
                        crate::tile_util::if_else(p, copy, Stmt::seq(zeros, span), span)
                    }
                    (Some(p), false) => if_then(Some(p), copy, span),
                }
            } else {
                // Different element types: move a vector through a staging register array.
                let tmp = Buffer::new("stage", vec![Expr::int(v)], ob.dtype(), Scope::Local, span);
                let mut st = vec![Stmt::new(StmtKind::Alloc(tmp.clone()), span)];
                if load {
                    let copy = cx.eval(
                        Intrinsic::VecCopy { lanes: v as u32 },
                        vec![
                            crate::tile_util::address_of(&tmp, vec![Expr::int(0)]),
                            crate::tile_util::address_of(ob, oidx.clone()),
                        ],
                        span,
                    );
                    let zeros = (0..v)
                        .map(|e| store(&tmp, vec![Expr::int(e)], Expr::int_of(0, ob.dtype()), span))
                        .collect();
                    st.push(match o_in {
                        None => copy,
                        Some(p) => crate::tile_util::if_else(p, copy, Stmt::seq(zeros, span), span),
                    });
                    for e in 0..v {
                        st.push(store(
                            &local,
                            vec![v0.clone() + e],
                            Expr::load(&tmp, vec![Expr::int(e)]),
                            span,
                        ));
                    }
                    Stmt::seq(st, span)
                } else {
                    for e in 0..v {
                        st.push(store(
                            &tmp,
                            vec![Expr::int(e)],
                            Expr::load(&local, vec![v0.clone() + e]),
                            span,
                        ));
                    }
                    let copy = cx.eval(
                        Intrinsic::VecCopy { lanes: v as u32 },
                        vec![
                            crate::tile_util::address_of(ob, oidx.clone()),
                            crate::tile_util::address_of(&tmp, vec![Expr::int(0)]),
                        ],
                        span,
                    );
                    st.push(if_then(o_in, copy, span));
                    Stmt::seq(st, span)
                }
            };
            for_loop(&w, count / v, ForKind::Unrolled, body, span)
        };
        let fast = build(self, v);
        let stmt = match cond {
            None => fast,
            Some(c) => {
                let slow = build(self, 1);
                crate::tile_util::if_else(c, fast, slow, span)
            }
        };
        Ok(if_then(replica_guard, stmt, span))
    }

    /// A fragment → global copy: by TMA store, through a staging tile, or straight from the
    /// registers, the first that applies (each plan made once, then carried out).
    fn copy_frag_to_global(
        &mut self,
        frag: &Region,
        dst: &Region,
        span: Span,
    ) -> Result<Stmt, Diagnostic> {
        // The epilogue plans line the fragment's dims up with the tile's.
        if crate::tile_util::copy_reshapes(frag, dst) {
            return self.copy_frag(dst, frag, false, None, span);
        }
        if let Some(plan) = self.tma_store_epilogue(frag, dst) {
            return self.copy_frag_tma_store(frag, dst, plan, span);
        }
        if let Some(plan) = self.bulk_rows_epilogue(frag, dst) {
            return self.copy_frag_bulk_rows(frag, dst, plan, span);
        }
        if let Some(plan) = self.stage_epilogue(frag, dst) {
            return self.copy_frag_staged(frag, dst, plan, span);
        }
        self.copy_frag(dst, frag, false, None, span)
    }

    /// Should a fragment → global copy go through shared memory, and through what? When each
    /// thread's contiguous run along a row is under 16 bytes (tensor-core accumulators hold
    /// pairs), a staging tile turns many narrow scattered stores into coalesced ones — if the
    /// tile fits next to the kernel's other shared buffers. Where the whole tile does not and
    /// the rows are not whole 16-byte units (an odd N: no TMA store, and no vector stores
    /// either), a tile of a half or a quarter of its columns, reused chunk by chunk, may (as
    /// for the TMA store: the Hopper GEMM's four stages leave 32 KB), on targets with TMA;
    /// otherwise such rows go out element by element straight from the registers, 2-byte
    /// stores scattered over 8 rows per warp instruction.
    fn stage_epilogue(&self, frag: &Region, dst: &Region) -> Option<StagePlan> {
        let f = self.frag(&frag.buffer)?;
        let shape = frag.buffer.const_shape()?;
        if shape.len() != 2
            || !frag.is_full()
            || nonunit_dims(dst).last() != Some(&(dst.rank() - 1))
        {
            return None;
        }
        let bytes = dst.buffer.dtype().bytes() as i64;
        let run = match f.value_modes.first() {
            Some(m) if m.target == Some((1, 1)) => m.extent * bytes,
            _ => bytes,
        };
        let (rows, cols) = (shape[0], shape[1]);
        if run >= 16 || cols * bytes < 64 || rows * cols * bytes < 4096 {
            return None;
        }
        // Chunks only where they were measured: rows that are not whole 16-byte units (odd
        // N, no TMA store) on a target with TMA (an H200, gpu-notes run 25b). Elsewhere a tile
        // that does not fit whole keeps the direct stores.
        let odd_rows = !super::tma::row_bytes_aligned(&dst.buffer, &self.analyzer);
        let splits: &[i64] = if self.target.has_tma() && odd_rows {
            &[1, 2, 4]
        } else {
            &[1]
        };
        let (width, windows) = self.fitting_chunks(f, (rows, cols), bytes, splits, (64, 0))?;
        Some(StagePlan {
            rows,
            width,
            windows,
        })
    }

    /// The first of `parts` (1: the whole tile, 2: halves, 4: quarters of its columns) whose
    /// `rows × (cols / parts + pad)` staging tile of `eb`-byte elements has rows of at least
    /// `min_row_bytes` and fits beside the kernel's other shared buffers: its width (without
    /// the pad), and the fragment's windows of columns, one per chunk (`None`: the whole
    /// fragment at once).
    pub(super) fn fitting_chunks(
        &self,
        f: &Fragment,
        (rows, cols): (i64, i64),
        eb: i64,
        parts: &[i64],
        (min_row_bytes, pad): (i64, i64),
    ) -> Option<(i64, Vec<Option<FragWindow>>)> {
        for &split in parts {
            if cols % split != 0 {
                return None;
            }
            let width = cols / split;
            if width * eb < min_row_bytes
                || self.smem_bytes + (rows * (width + pad) * eb) as usize
                    > self.target.max_shared_bytes()
            {
                continue;
            }
            let windows = match split {
                1 => vec![None],
                _ => match column_chunks(f, width) {
                    Some(w) => w.into_iter().map(Some).collect(),
                    None => continue,
                },
            };
            return Some((width, windows));
        }
        None
    }

    /// May a fragment → global copy leave its stores in flight while the kernel goes on (a TMA
    /// store, or the bulk copies of `bulk_rows`)? Where the kernel is warp-specialized, the
    /// target has TMA, the fragment is copied whole, and the kernel does not read the tensor
    /// back (GEMM + RS pushes its staged partials to a peer: its writes must be complete,
    /// which the epilogue's stores do not wait for).
    pub(super) fn stores_in_flight(&self, frag: &Region, dst: &Region) -> bool {
        self.tma_store
            && self.target.has_tma()
            && frag.is_full()
            && !self.read_back.contains(&dst.buffer.id())
    }

    /// The TMA plan of a fragment → global copy through a swizzled staging tile, where the
    /// kernel is warp-specialized (the store then runs while the consumers go on to the next
    /// tile of a persistent kernel), the target has TMA, the tensor's rows are whole 16-byte
    /// units and the staging tile fits beside the kernel's other shared buffers (none of
    /// which a warp-specialized kernel overlaps). Where the whole tile does not fit, a tile
    /// of a half or a quarter of its columns, reused chunk by chunk, may.
    fn tma_store_epilogue(&self, frag: &Region, dst: &Region) -> Option<StorePlan> {
        if !self.stores_in_flight(frag, dst) {
            return None;
        }
        let shape = frag.buffer.const_shape()?;
        if shape.len() != 2
            || !super::tma::row_bytes_aligned(&dst.buffer, &self.analyzer)
            || !super::tma::starts_on_16_bytes(dst, &self.analyzer)
        {
            return None;
        }
        let eb = dst.buffer.dtype().bytes() as i64;
        let f = self.frag(&frag.buffer)?;
        let (rows, cols) = (shape[0], shape[1]);
        // Halves and quarters only: a chunk stays a whole number of swizzle panels.
        let (width, windows) = self.fitting_chunks(f, (rows, cols), eb, &[1, 2, 4], (0, 0))?;
        let probe = Buffer::new(
            "probe",
            vec![Expr::int(rows), Expr::int(width)],
            dst.buffer.dtype(),
            Scope::Shared,
            Span::UNKNOWN,
        );
        let full = Region::full(&probe);
        let layout = super::mma::operand_smem_layout(&full)?;
        let part = column_part(dst, 0, width);
        let tma = super::tma::TmaTile::of(&part, &full, Some(&layout), &self.target, true)?;
        Some(StorePlan {
            tma,
            rows,
            width,
            windows,
        })
    }

    /// Fragment → swizzled shared tile → one thread's TMA store per swizzle panel, left in
    /// flight: the next such copy (or the kernel's end) waits for it to have read the tile.
    /// A tile of part of the columns takes them chunk by chunk, each store read before the
    /// next chunk overwrites the tile.
    ///
    /// ```text
    /// per chunk:
    ///   thread 0: bulk_wait_read 0; barrier   (the previous store has read the tile)
    ///   fragment's chunk → tile; fence_proxy_async; barrier
    ///   thread 0: tma_store per panel; bulk_commit
    /// ```
    fn copy_frag_tma_store(
        &mut self,
        frag: &Region,
        dst: &Region,
        plan: StorePlan,
        span: Span,
    ) -> Result<Stmt, Diagnostic> {
        let width = plan.width;
        let full = self.staging_tile(plan.rows, width, dst, span);
        let tid0 = self.tid.eq_(0);
        let rank = dst.buffer.rank();
        let tensor = crate::tile_util::address_of(&dst.buffer, vec![Expr::int(0); rank]);
        let mut steps = vec![];
        for (h, window) in plan.windows.into_iter().enumerate() {
            let to_shared = self.copy_frag(&full, frag, false, window, span)?;
            let part = column_part(dst, h as i64 * width, width);
            let (box_dims, panels) = plan.tma.boxes(&part, &full);
            let mut stores = vec![];
            for (shared, coords) in panels {
                let mut args = vec![shared, tensor.clone()];
                args.extend(coords);
                stores.push(self.eval(
                    Intrinsic::TmaStore {
                        box_dims: box_dims.clone(),
                        swizzle: plan.tma.swizzle,
                    },
                    args,
                    span,
                ));
            }
            stores.push(self.eval(Intrinsic::BulkCommit, vec![], span));
            steps.extend([
                if_then(
                    Some(tid0.clone()),
                    self.eval(Intrinsic::BulkWait { n: 0, read: true }, vec![], span),
                    span,
                ),
                self.sync(span),
                to_shared,
                self.eval(Intrinsic::FenceProxyAsync, vec![], span),
                self.sync(span),
                if_then(Some(tid0.clone()), Stmt::seq(stores, span), span),
            ]);
        }
        Ok(Stmt::seq(steps, span))
    }

    /// An epilogue's staging tile of `rows × cols` (a scratch shared tile of `dst`'s type in
    /// the tensor-core swizzle).
    fn staging_tile(&mut self, rows: i64, cols: i64, dst: &Region, span: Span) -> Region {
        let dims = vec![Expr::int(rows), Expr::int(cols)];
        let stage = self.scratch_shared("epilogue", dims, dst.buffer.dtype(), span);
        let full = Region::full(&stage);
        if let Some(l) = super::mma::operand_smem_layout(&full) {
            self.extra_smem.insert(stage.id(), (stage.clone(), l));
        }
        full
    }

    /// Fragment → swizzled shared tile → barrier → coalesced global stores (16 bytes wide
    /// where the rows allow), chunk by chunk of columns where the plan takes a part of the
    /// tile at a time:
    ///
    /// ```text
    /// per chunk: barrier (every thread is done reading the tile: the previous chunk's, or
    ///            whatever the block used it for); fragment's chunk → tile; barrier;
    ///            tile → global
    /// then:      barrier (the tile's last reads are done before anything reuses it)
    /// ```
    fn copy_frag_staged(
        &mut self,
        frag: &Region,
        dst: &Region,
        plan: StagePlan,
        span: Span,
    ) -> Result<Stmt, Diagnostic> {
        let full = self.staging_tile(plan.rows, plan.width, dst, span);
        let mut steps = vec![];
        for (h, window) in plan.windows.into_iter().enumerate() {
            let to_shared = self.copy_frag(&full, frag, false, window, span)?;
            let part = match window {
                Some(_) => column_part(dst, h as i64 * plan.width, plan.width),
                None => dst.clone(),
            };
            let to_global = self.copy_blocked(&full, &part, span, false)?;
            steps.extend([self.sync(span), to_shared, self.sync(span), to_global]);
        }
        steps.push(self.sync(span));
        Ok(Stmt::seq(steps, span))
    }

    fn copy_frag_frag(
        &mut self,
        src: &Region,
        dst: &Region,
        span: Span,
    ) -> Result<Stmt, Diagnostic> {
        let fs = self.fragment_of(&src.buffer, span)?;
        let fd = self.fragment_of(&dst.buffer, span)?;
        let ls = self.local_of(&src.buffer, span)?;
        let ld = self.local_of(&dst.buffer, span)?;
        if !src.is_full() || !dst.is_full() {
            return Err(self.unsupported(span, "a copy between parts of fragments"));
        }
        let v = Var::new("v", DType::I32);
        let body = if fs.equivalent(&fd) {
            store(&ld, vec![v.expr()], Expr::load(&ls, vec![v.expr()]), span)
        } else if same_threads(&fs, &fd) {
            let coords = fs.coords(&self.tid, &v.expr());
            store(
                &ld,
                vec![fd.local_index(&coords)],
                Expr::load(&ls, vec![v.expr()]),
                span,
            )
        } else {
            return Err(Diagnostic::new(
                tl_ir::DiagKind::LayoutConflict,
                span,
                format!(
                    "copy from fragment `{}` ({}) to `{}` ({}) would move elements between threads",
                    src.buffer.name(),
                    fs.to_cute(),
                    dst.buffer.name(),
                    fd.to_cute()
                ),
            )
            .help("copy through a shared buffer"));
        };
        Ok(for_loop(&v, fs.local_size(), ForKind::Unrolled, body, span))
    }
}

/// `dst` narrowed to `width` of its columns from `first` on: the chunk of an epilogue that
/// stores a part of the columns at a time.
pub(super) fn column_part(dst: &Region, first: i64, width: i64) -> Region {
    let mut part = dst.clone();
    if let (Some(o), Some(e)) = (part.offsets.last_mut(), part.extents.last_mut()) {
        if first != 0 {
            *o = o.clone() + first;
        }
        *e = Expr::int(width);
    }
    part
}

/// How a fragment goes out through shared memory ([`Ctx::stage_epilogue`]): a staging tile
/// of `rows × width`, one chunk of columns per window (`None`: the whole fragment).
pub(super) struct StagePlan {
    pub(super) rows: i64,
    pub(super) width: i64,
    pub(super) windows: Vec<Option<FragWindow>>,
}

/// How a fragment goes out by TMA store ([`Ctx::tma_store_epilogue`]): through a staging
/// tile of `rows × width`, one chunk of columns per window (`None`: the whole fragment).
struct StorePlan {
    tma: super::tma::TmaTile,
    rows: i64,
    width: i64,
    windows: Vec<Option<FragWindow>>,
}

/// The elements of a fragment that fall in one chunk of columns: the thread's local
/// elements `first .. first + count` hold exactly the columns `col_lo .. col_lo + width` of
/// the fragment's last dim (see [`column_chunks`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct FragWindow {
    pub first: i64,
    pub count: i64,
    pub col_lo: i64,
}

/// Split fragment `f`'s columns (its last dim) into chunks `width` wide, as windows of each
/// thread's local elements — where every local element lies in one chunk for every thread
/// and each chunk's elements are consecutive (a tensor-core accumulator's are: its column
/// groups are the outermost value mode). `None` where they are not, or where the fragment
/// is replicated. (An element's column is worked out as `Fragment::coords` does, in
/// integers: a thread's own modes add 0 up to `reach` to it.)
pub(super) fn column_chunks(f: &Fragment, width: i64) -> Option<Vec<FragWindow>> {
    let col = f.shape.len().checked_sub(1)?;
    let cols = *f.shape.get(col)?;
    if width <= 0 || cols % width != 0 || f.replication() > 1 {
        return None;
    }
    // The columns a thread adds to an element's: 0 up to `reach`.
    let reach: i64 = f
        .thread_modes
        .iter()
        .filter(|m| m.extent > 1 && m.target.map(|t| t.0) == Some(col))
        .map(|m| (m.extent - 1) * m.target.map_or(0, |t| t.1))
        .sum();
    let mut chunk_of = vec![];
    for e in 0..f.local_size() {
        let (mut stride, mut c) = (1i64, 0i64);
        for m in &f.value_modes {
            let d = (e / stride) % m.extent.max(1);
            if let Some((dd, s)) = m.target {
                if dd == col && m.extent > 1 {
                    c += d * s;
                }
            }
            stride *= m.extent.max(1);
        }
        if c / width != (c + reach) / width {
            return None;
        }
        chunk_of.push(c / width);
    }
    let mut out = vec![];
    for h in 0..cols / width {
        let first = chunk_of.iter().position(|&x| x == h)? as i64;
        let count = chunk_of.iter().filter(|&&x| x == h).count() as i64;
        if chunk_of[first as usize..(first + count) as usize]
            .iter()
            .any(|&x| x != h)
        {
            return None;
        }
        out.push(FragWindow {
            first,
            count,
            col_lo: h * width,
        });
    }
    Some(out)
}

/// Do both layouts place every element on the same thread?
fn same_threads(a: &Fragment, b: &Fragment) -> bool {
    let norm = |f: &Fragment| -> Vec<tl_ir::Mode> {
        f.thread_modes
            .iter()
            .copied()
            .filter(|m| m.extent > 1)
            .collect()
    };
    a.shape == b.shape && norm(a) == norm(b)
}
