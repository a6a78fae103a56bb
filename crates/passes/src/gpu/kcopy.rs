//! Global → shared copies into a K-interleaved operand tile (`mfma::k_interleaved_layout`).
//!
//! A `[K, X]` operand (NN's B, TN's A and B, attention's V) is stored in global memory with X
//! contiguous, but an MFMA lane needs 8 consecutive k of one x. Reading those from a
//! row-major tile takes 8 two-byte LDS reads per lane and atom; the tile is instead stored
//! K-interleaved, and the copy transposes on the way in: each thread loads 4 k-rows × 8 x
//! (four 16-byte global loads, coalesced along X across the block's threads), transposes
//! the 4 × 8 block in registers, and writes 8 runs of 4 k (8-byte LDS writes). The direct
//! `buffer_load … lds` path cannot do this (it fills LDS in storage order from one run of the
//! tensor per lane), so these copies go through registers and are synchronous. On AMD the
//! global loads are buffer loads (`Intrinsic::BufferLoad`): the range check zero-fills rows
//! past the tensor's end and a false predicate, so no branch separates the loads and the
//! compiler can issue them together; each costs a 32-bit offset register, not a 64-bit
//! address.

use tl_ir::{Buffer, DType, Expr, ForKind, Intrinsic, Region, Scope, Span, Stmt, StmtKind, Var};

use super::lower::Ctx;
use super::mfma::k_interleaved_run;
use crate::tile_util::{
    address_of, and_opt, eval, for_loop, if_else, if_then, in_bounds, nonunit_dims, region_index,
    store,
};

/// k rows per thread's unit.
const UNIT_K: i64 = 4;
/// x columns per thread's unit (one 16-byte global load of 16-bit elements).
const UNIT_X: i64 = 8;

impl Ctx<'_> {
    /// Is `dst` a whole K-interleaved shared tile (or one pipeline stage of one)?
    fn k_interleaved_dst(&self, dst: &Region) -> Option<(i64, i64)> {
        let b = &dst.buffer;
        if b.scope() != Scope::Shared {
            return None;
        }
        let shape = b.const_shape()?;
        let rank = shape.len();
        let (_, l) = self.layouts.smem.get(&b.id())?;
        k_interleaved_run(l, &shape)?;
        let (bk, bx) = (shape[rank - 2], shape[rank - 1]);
        let whole = (0..rank - 2).all(|d| dst.extents[d].as_int() == Some(1))
            && dst.offsets[rank - 2].as_int() == Some(0)
            && dst.offsets[rank - 1].as_int() == Some(0)
            && dst.extents[rank - 2].as_int() == Some(bk)
            && dst.extents[rank - 1].as_int() == Some(bx);
        whole.then_some((bk, bx))
    }

    /// The transposing copy, or `None` when `dst` is not a K-interleaved tile or the source
    /// is not a `[K, X]` tile of a tensor with X contiguous (then the copy goes element by
    /// element: the layout keeps no runs along X, so the blocked copy does not vectorize).
    ///
    /// A `guard` (set by the AMD pipeline on its refills) goes into the loads' predicates:
    /// where it fails the tile receives zeros, with no branch around the copy that would keep
    /// the compiler from moving the loads ahead.
    pub fn copy_k_interleaved(
        &mut self,
        src: &Region,
        dst: &Region,
        guard: Option<&Expr>,
        span: Span,
    ) -> Option<Stmt> {
        let (bk, bx) = self.k_interleaved_dst(dst)?;
        let sb = &src.buffer;
        if sb.scope() != Scope::Global
            || sb.dtype() != dst.buffer.dtype()
            || sb.dtype().bytes() != 2
        {
            return None;
        }
        let nonunit = nonunit_dims(src);
        let srank = sb.rank();
        let ext: Vec<Option<i64>> = nonunit.iter().map(|&d| src.extents[d].as_int()).collect();
        if nonunit.len() != 2 || nonunit[1] != srank - 1 || ext != [Some(bk), Some(bx)] {
            return None;
        }
        if bk % UNIT_K != 0 || bx % UNIT_X != 0 {
            return None;
        }
        let fast = self.k_interleaved_with(src, dst, (bk, bx), guard, true, span);
        Some(match self.vector_ok(src, UNIT_X) {
            Ok(None) => fast,
            Ok(Some(c)) => {
                let slow = self.k_interleaved_with(src, dst, (bk, bx), guard, false, span);
                if_else(c, fast, slow, span)
            }
            Err(()) => self.k_interleaved_with(src, dst, (bk, bx), guard, false, span),
        })
    }

    /// The copy with 16-byte global loads (`vector`) or element by element.
    fn k_interleaved_with(
        &mut self,
        src: &Region,
        dst: &Region,
        (bk, bx): (i64, i64),
        guard: Option<&Expr>,
        vector: bool,
        span: Span,
    ) -> Stmt {
        let (sb, db) = (&src.buffer, &dst.buffer);
        let dt = sb.dtype();
        let units = (bk / UNIT_K) * (bx / UNIT_X);
        let iters = (units + self.threads - 1) / self.threads;
        let it = Var::new("it", DType::I32);
        let unit = it.expr() * self.threads + self.tid.clone();
        // Consecutive threads take consecutive x groups: their global loads are one run.
        let x0 = unit.floormod(bx / UNIT_X) * UNIT_X;
        let k0 = unit.floordiv(bx / UNIT_X) * UNIT_K;
        let n = UNIT_K * UNIT_X;
        let rows = Buffer::new("kt_rows", vec![Expr::int(n)], dt, Scope::Local, span);
        let cols = Buffer::new("kt_cols", vec![Expr::int(n)], dt, Scope::Local, span);
        let mut body = vec![
            Stmt::new(StmtKind::Alloc(rows.clone()), span),
            Stmt::new(StmtKind::Alloc(cols.clone()), span),
        ];
        // rows[i·8 + j] = src[k0 + i, x0 + j], zero past the tensor's edges.
        for i in 0..UNIT_K {
            if vector && self.target.amd().is_some() {
                let dst = address_of(&rows, vec![Expr::int(i * UNIT_X)]);
                let coords = [k0.clone() + i, x0.clone()];
                body.push(buffer_load(dst, src, &coords, guard, UNIT_X, span));
            } else if vector {
                let sidx = region_index(src, &[k0.clone() + i, x0.clone()]);
                let mut args = vec![
                    address_of(&rows, vec![Expr::int(i * UNIT_X)]),
                    address_of(sb, sidx.clone()),
                ];
                args.extend(and_opt(in_bounds(sb, &sidx), guard.cloned()));
                body.push(self.eval(
                    Intrinsic::VecCopy {
                        lanes: UNIT_X as u32,
                    },
                    args,
                    span,
                ));
            } else {
                for j in 0..UNIT_X {
                    let sidx = region_index(src, &[k0.clone() + i, x0.clone() + j]);
                    let load = Expr::load(sb, sidx.clone());
                    let val = match and_opt(in_bounds(sb, &sidx), guard.cloned()) {
                        Some(p) => Expr::if_then_else(p, load, Expr::int_of(0, dt)),
                        None => load,
                    };
                    body.push(store(&rows, vec![Expr::int(i * UNIT_X + j)], val, span));
                }
            }
        }
        // cols[j·4 + i] = rows[i·8 + j]: a register transpose (no code once in registers).
        for j in 0..UNIT_X {
            for i in 0..UNIT_K {
                let v = Expr::load(&rows, vec![Expr::int(i * UNIT_X + j)]);
                body.push(store(&cols, vec![Expr::int(j * UNIT_K + i)], v, span));
            }
        }
        // dst[k0 .. k0 + 4, x0 + j] is 4 consecutive elements of the K-interleaved tile.
        for j in 0..UNIT_X {
            let didx = region_index(dst, &[k0.clone(), x0.clone() + j]);
            body.push(self.eval(
                Intrinsic::VecCopy {
                    lanes: UNIT_K as u32,
                },
                vec![
                    address_of(db, didx),
                    address_of(&cols, vec![Expr::int(j * UNIT_K)]),
                ],
                span,
            ));
        }
        let body = Stmt::seq(body, span);
        let body = if units % self.threads != 0 {
            if_then(Some(unit.lt(units)), body, span)
        } else {
            body
        };
        let kind = if iters <= 2 {
            ForKind::Unrolled
        } else {
            ForKind::Serial
        };
        for_loop(&it, iters, kind, body, span)
    }
}

/// `dst[0 .. v] = src[coords ..+ v]` as an AMD buffer load: the tile's position (block indices,
/// loop counters: the same across the wave) is the scalar offset, the thread's place in the
/// tile the vector offset. The tensor's first dim needs no check: with the others in range,
/// an index past either end of it is an offset past the buffer's range, which reads zeros.
fn buffer_load(
    dst: Expr,
    src: &Region,
    coords: &[Expr],
    guard: Option<&Expr>,
    v: i64,
    span: Span,
) -> Stmt {
    let sb = &src.buffer;
    let eb = sb.dtype().bytes() as i64;
    let strides = sb.row_major_strides();
    let soffset = src
        .offsets
        .iter()
        .zip(&strides)
        .fold(Expr::int(0), |acc, (o, s)| acc + o.clone() * s.clone())
        * eb;
    let voffset = nonunit_dims(src)
        .iter()
        .zip(coords)
        .fold(Expr::int(0), |acc, (&d, c)| {
            acc + c.clone() * strides[d].clone()
        })
        * eb;
    let sidx = region_index(src, coords);
    let pred = sidx
        .iter()
        .zip(sb.shape())
        .skip(1)
        .map(|(i, n)| i.ge(0).and(i.lt(n.clone())))
        .chain(guard.cloned())
        .reduce(|a, b| a.and(b))
        .unwrap_or(Expr::bool(true));
    let tensor = address_of(sb, vec![Expr::int(0); sb.rank()]);
    eval(
        Intrinsic::BufferLoad {
            bytes: (v * eb) as u32,
        },
        vec![dst, tensor, voffset, soffset, pred],
        span,
    )
}
