//! Epilogues whose rows no TMA store can take (not whole 16-byte units: an odd N in bf16), in
//! a warp-specialized kernel on a target with TMA: one bulk copy a row from a staging tile
//! shifted to each row's alignment, left in flight as a TMA store is (see
//! [`Ctx::copy_frag_bulk_rows`]).

use tl_ir::ops::{max, min};
use tl_ir::{DType, Diagnostic, Expr, ForKind, Intrinsic, Region, Span, Stmt, Var};

use super::copy::{column_part, StagePlan};
use super::lower::Ctx;
use crate::tile_util::{and_opt, for_loop, if_then, in_bounds, nonunit_dims, region_index, store};

impl Ctx<'_> {
    /// The bulk-row plan of a fragment → global copy whose rows no TMA store can take (not
    /// whole 16-byte units: an odd N), where TMA stores would otherwise be used (a
    /// warp-specialized kernel on a target with TMA, the tensor not read back): a staging
    /// tile of `rows × (width + v)` (v: the elements of 16 bytes), whole or in chunks of
    /// columns as the TMA store's.
    pub(super) fn bulk_rows_epilogue(&self, frag: &Region, dst: &Region) -> Option<StagePlan> {
        if !self.stores_in_flight(frag, dst)
            || super::tma::row_bytes_aligned(&dst.buffer, &self.analyzer)
            || nonunit_dims(dst).last() != Some(&(dst.rank() - 1))
        {
            return None;
        }
        let eb = dst.buffer.dtype().bytes() as i64;
        if !matches!(eb, 1 | 2 | 4) {
            return None;
        }
        let v = 16 / eb;
        let shape = frag.buffer.const_shape()?;
        let f = self.frag(&frag.buffer)?;
        let (rows, cols) = (*shape.first()?, *shape.get(1)?);
        if shape.len() != 2 || cols % v != 0 || rows > self.threads {
            return None;
        }
        let (width, windows) = self.fitting_chunks(f, (rows, cols), eb, &[1, 2, 4], (0, v))?;
        (width % v == 0).then_some(StagePlan {
            rows,
            width,
            windows,
        })
    }

    /// Fragment → a staging tile whose row r is shifted by s(r), the element offset of the
    /// row's first global element modulo 16 bytes → one bulk copy a row (`BulkStore`) of the
    /// row's whole aligned 16-byte units, from its first aligned element on, left in flight
    /// as a TMA store is; the few columns before and after them go in aligned pieces. The
    /// shift puts the first aligned element of every row at a 16-byte boundary of the tile.
    /// Rows of an odd N went out element by element from a swizzled tile, synchronously:
    /// 4096×4095×4096 bf16 720 TFLOP/s against 743 now and 792 aligned by TMA store (gpu-notes
    /// run 32h).
    ///
    /// ```text
    /// per chunk:
    ///   threads t < rows: bulk_wait_read 0; barrier   (the previous copies have read the tile)
    ///   fragment's chunk → tile, row r at column s(r) on; fence_proxy_async; barrier
    ///   threads t < rows: row t's bulk copy; bulk_commit
    ///   threads rows ≤ t < 2·rows (else the same ones): row t's edge columns
    /// ```
    pub(super) fn copy_frag_bulk_rows(
        &mut self,
        frag: &Region,
        dst: &Region,
        plan: StagePlan,
        span: Span,
    ) -> Result<Stmt, Diagnostic> {
        let db = dst.buffer.clone();
        let eb = db.dtype().bytes() as i64;
        let v = 16 / eb;
        let (rows, width) = (plan.rows, plan.width);
        let dims = vec![Expr::int(rows), Expr::int(width + v)];
        let stage = self.scratch_shared("epilogue", dims, db.dtype(), span);
        let full = Region::full(&stage);
        let i32c = |x: i64| Expr::int_of(x, DType::I32);
        let mask = v - 1;
        let strides = db.row_major_strides();
        // s(r): the offset of row r's first element of `part` modulo v, from the indices and
        // strides taken modulo v first (v is a power of two), so nothing overflows.
        let shift_of = |part: &Region, r: &Expr| -> Option<Expr> {
            region_index(part, &[r.clone(), i32c(0)])
                .iter()
                .zip(&strides)
                .map(|(i, st)| {
                    (i.clone().cast(DType::I32) & mask) * (st.clone().cast(DType::I32) & mask)
                })
                .reduce(|a, b| a + b)
                .map(|o| o & mask)
        };
        let tid = self.tid.clone();
        let row_var = Var::new("shifted_row", DType::I32);
        let mut steps = vec![];
        for (h, window) in plan.windows.into_iter().enumerate() {
            let part = column_part(dst, h as i64 * width, width);
            let Some(shift) = shift_of(&part, &row_var.expr()) else {
                return Err(self.unsupported(span, "a bulk-row epilogue of a 0-d tensor"));
            };
            self.frag_col_shift = Some((row_var.clone(), shift));
            let to_shared = self.copy_frag(&full, frag, false, window, span);
            self.frag_col_shift = None;
            let to_shared = to_shared?;
            let last_dim = db.rank() - 1;
            // Row `r` of the tile: its shift, its first aligned column, the columns of the
            // tensor it covers (fewer at the tensor's last columns), its whole aligned units,
            // and whether it is inside the tensor.
            let row_of = |r: &Expr| -> RowSpan {
                let shift = shift_of(&part, r).unwrap_or_else(|| i32c(0));
                let first = (i32c(v) - shift.clone()) & mask;
                let mut start = region_index(&part, &[r.clone(), i32c(0)]);
                let left = db.shape()[last_dim].clone().cast(DType::I32) - start[last_dim].clone();
                let ncols = min(max(left, i32c(0)), i32c(width));
                let units = max(ncols.clone() - first.clone(), i32c(0)) / v;
                start[last_dim] = i32c(0);
                RowSpan {
                    shift,
                    first,
                    ncols,
                    units,
                    inside: in_bounds(&db, &start),
                }
            };
            let r = tid.clone();
            let RowSpan {
                shift: s,
                first,
                units,
                inside: row_ok,
                ..
            } = row_of(&r);
            let copy = self.eval(
                Intrinsic::BulkStore,
                vec![
                    crate::tile_util::address_of(
                        &db,
                        region_index(&part, &[r.clone(), first.clone()]),
                    ),
                    crate::tile_util::address_of(
                        &stage,
                        vec![r.clone(), s.clone() + first.clone()],
                    ),
                    units.clone() * 16,
                ],
                span,
            );
            let issue = if_then(
                and_opt(row_ok.clone(), Some(units.clone().gt(0))),
                copy,
                span,
            );
            let is_copier = tid.clone().lt(rows);
            let wait = if_then(
                Some(is_copier.clone()),
                self.eval(Intrinsic::BulkWait { n: 0, read: true }, vec![], span),
                span,
            );
            let commit = self.eval(Intrinsic::BulkCommit, vec![], span);
            // The edge columns of row `er`: the `first` before its aligned units (they end on
            // a 16-byte boundary) and the rest after them (they start on one), each run in
            // pieces of v/2, v/4, …, 1 elements by the bits of its length, every piece aligned
            // to its size in both memories (the tile's shift keeps the tensor's alignment).
            let (er, edge_guard) = if self.threads >= 2 * rows {
                (
                    tid.clone() - rows,
                    tid.clone().ge(rows).and(tid.clone().lt(2 * rows)),
                )
            } else {
                (tid.clone(), is_copier.clone())
            };
            let RowSpan {
                shift: es,
                first: head,
                ncols: encols,
                units: eunits,
                inside: er_ok,
            } = row_of(&er);
            let short = encols.clone().lt(head.clone());
            let after = head.clone() + eunits * v;
            let tail = max(encols.clone() - after.clone(), i32c(0));
            let mut pieces = vec![];
            let mut p = v / 2;
            while p >= 1 {
                let low = 2 * p - 1;
                // Head: the piece ends where the bits below 2p of its length end; tail: it
                // starts after the bits above p.
                let head_col = (head.clone() & low) - p;
                let tail_col = after.clone() + (tail.clone() - (tail.clone() & low));
                for (len, col) in [(head.clone(), head_col), (tail.clone(), tail_col)] {
                    let didx = region_index(&part, &[er.clone(), col.clone()]);
                    let sidx = vec![er.clone(), es.clone() + col];
                    let piece = if p == 1 {
                        store(&db, didx, Expr::load(&stage, sidx), span)
                    } else {
                        self.eval(
                            Intrinsic::VecCopy { lanes: p as u32 },
                            vec![
                                crate::tile_util::address_of(&db, didx),
                                crate::tile_util::address_of(&stage, sidx),
                            ],
                            span,
                        )
                    };
                    pieces.push(if_then(Some((len & p).ne_(0)), piece, span));
                }
                p /= 2;
            }
            // A row with fewer columns than its first aligned element (the tensor's last few
            // columns): element by element.
            let e = Var::new("edge", DType::I32);
            let one = {
                let didx = region_index(&part, &[er.clone(), e.expr()]);
                let val = Expr::load(&stage, vec![er.clone(), es.clone() + e.expr()]);
                if_then(
                    Some(e.expr().lt(encols.clone())),
                    store(&db, didx, val, span),
                    span,
                )
            };
            let few = for_loop(&e, v - 1, ForKind::Serial, one, span);
            let edges = if_then(
                and_opt(Some(edge_guard), er_ok),
                crate::tile_util::if_else(short, few, Stmt::seq(pieces, span), span),
                span,
            );
            steps.extend([
                wait,
                self.sync(span),
                to_shared,
                self.eval(Intrinsic::FenceProxyAsync, vec![], span),
                self.sync(span),
                if_then(Some(is_copier), Stmt::seq(vec![issue, commit], span), span),
                edges,
            ]);
        }
        Ok(Stmt::seq(steps, span))
    }
}

/// Where a row of a bulk-row epilogue's tile goes ([`Ctx::copy_frag_bulk_rows`]).
struct RowSpan {
    /// The row's shift in the tile: its first element's offset in the tensor, modulo 16 bytes.
    shift: Expr,
    /// Its first column on a 16-byte boundary of the tensor.
    first: Expr,
    /// The columns of the tensor it covers.
    ncols: Expr,
    /// Its whole 16-byte units from `first` on.
    units: Expr,
    /// Whether the row is inside the tensor (`None`: always).
    inside: Option<Expr>,
}
