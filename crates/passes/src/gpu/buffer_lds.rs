//! Global → LDS copies as AMD `buffer_load … lds` (direct to LDS, no round trip through
//! registers): one instruction moves 64 lanes × 16 bytes (gfx950, dwordx4) or × 4 bytes (gfx942,
//! dword) into *consecutive* LDS bytes — lane `l` at `base + l·bytes`, with `base` set once
//! for the wave (M0).
//!
//! The LDS side is therefore fixed: each lane fills the next physical slot of the tile in
//! storage order. The tile's swizzle moves to the global side ("swizzle-swap"): the lane that
//! fills physical slot `p` loads the element the layout stores there, `layout⁻¹(p)`, which for
//! an XOR swizzle on 16-byte chunks is again 16 contiguous bytes of one row. The tensor's
//! address splits into a per-lane byte offset (`voffset`, from the thread's slot) and a
//! wave-uniform one (`soffset`, from the tile's position: block indices and the k step),
//! the buffer resource descriptor is the tensor's base. Past-the-edge lanes are predicated
//! (the load returns zeros) instead of branched around.

use tl_ir::{DType, Expr, Intrinsic, Region, Scope, Span, Stmt};
use tl_layout::ComposedLayout;

use super::lower::Ctx;
use super::mfma::WAVE;
use super::smem::{layout_expr_1d, swizzle_expr};
use crate::tile_util::{address_of, eval, if_then, nonunit_dims, region_index};

/// Physical element offset → logical `(row, col)` of a `rows × cols` tile under a layout.
struct Unlayout {
    rows: i64,
    cols: i64,
    layout: Option<ComposedLayout>,
    inverse: Option<tl_layout::Layout>,
}

impl Unlayout {
    /// The inverse of `layout` (row-major when `None`), if every run of `v` physical elements
    /// starting at a multiple of `v` is `v` consecutive elements of one row (checked on every
    /// slot: tiles are small).
    fn new(layout: Option<ComposedLayout>, rows: i64, cols: i64, v: i64) -> Option<Unlayout> {
        let n = rows * cols;
        let Some(l) = layout else {
            return Some(Unlayout {
                rows,
                cols,
                layout: None,
                inverse: None,
            });
        };
        if l.offset != 0 || l.size() != n {
            return None;
        }
        let inverse = tl_layout::right_inverse(&l.layout);
        if inverse.size() != n {
            return None;
        }
        // colex index (r + rows·c) of physical offset p
        let colex = |p: i64| inverse.call(l.swizzle.apply(p));
        let valid = super::smem::memo_layout_check(&l, (rows, cols, v, 1), || {
            (0..n).all(|p| l.call(colex(p)) == p)
                && (0..n / v).all(|slot| {
                    let first = colex(slot * v);
                    (first / rows) % v == 0
                        && (1..v).all(|j| colex(slot * v + j) == first + rows * j)
                })
        });
        if !valid {
            return None;
        }
        Some(Unlayout {
            rows,
            cols,
            layout: Some(l),
            inverse: Some(inverse),
        })
    }

    /// `(row, col)` of the element stored at physical offset `p`.
    fn coords(&self, p: &Expr) -> (Expr, Expr) {
        match (&self.layout, &self.inverse) {
            (Some(l), Some(inv)) => {
                let colex = layout_expr_1d(inv, &swizzle_expr(&l.swizzle, p.clone()));
                (colex.floormod(self.rows), colex.floordiv(self.rows))
            }
            _ => (p.floordiv(self.cols), p.floormod(self.cols)),
        }
    }
}

impl Ctx<'_> {
    /// The copy as direct-to-LDS buffer loads, or `None` when it cannot go that way (then it
    /// goes through registers): the destination must be a whole LDS tile (one pipeline stage
    /// of it), the source a tile whose rows run along the tensor's contiguous dim in whole
    /// vectors, the tile a multiple of one wave's 64 slots, and the layout one that keeps each
    /// slot one run of a row.
    pub fn copy_buffer_lds(
        &mut self,
        src: &Region,
        dst: &Region,
        guard: Option<&Expr>,
        span: Span,
    ) -> Option<Stmt> {
        let arch = self.target.amd()?;
        let (sb, db) = (&src.buffer, &dst.buffer);
        if sb.scope() != Scope::Global || db.scope() != Scope::Shared || sb.dtype() != db.dtype() {
            return None;
        }
        let eb = sb.dtype().bytes() as i64;
        let bytes = arch.buffer_lds_bytes as i64;
        if bytes % eb != 0 {
            return None;
        }
        let v = bytes / eb;
        let shape = db.const_shape()?;
        let rank = shape.len();
        if rank < 2 {
            return None;
        }
        let (rows, cols) = (shape[rank - 2], shape[rank - 1]);
        let whole = (0..rank - 2).all(|d| dst.extents[d].as_int() == Some(1))
            && dst.offsets[rank - 2].as_int() == Some(0)
            && dst.offsets[rank - 1].as_int() == Some(0)
            && dst.extents[rank - 2].as_int() == Some(rows)
            && dst.extents[rank - 1].as_int() == Some(cols);
        let sdims = nonunit_dims(src);
        let src_ext: Vec<Option<i64>> = sdims.iter().map(|&d| src.extents[d].as_int()).collect();
        if !whole || src_ext != [Some(rows), Some(cols)] || cols % v != 0 {
            return None;
        }
        // Whole vectors along the tensor's contiguous dim, each wholly in or out of bounds.
        let whole_vectors = match self.vector_ok(src, v) {
            Ok(None) => true,
            // Known at compile time in the variant for aligned sizes.
            Ok(Some(c)) => self.analyzer.simplify(&c).as_bool() == Some(true),
            Err(()) => false,
        };
        if !whole_vectors {
            return None;
        }
        let slots = rows * cols / v;
        if slots % WAVE != 0 {
            return None;
        }
        let layout = self.layouts.smem.get(&db.id()).map(|(_, l)| l.clone());
        let un = Unlayout::new(layout, rows, cols, v)?;
        // The stage of a pipelined tile: the leading indices, row-major.
        let mut lead = Expr::int(0);
        for (ext, off) in shape.iter().zip(&dst.offsets).take(rank - 2) {
            lead = lead * *ext + off.clone();
        }
        let stage_base = lead * (rows * cols);
        let strides = sb.row_major_strides();
        let soffset = src
            .offsets
            .iter()
            .zip(&strides)
            .fold(Expr::int(0), |acc, (o, s)| acc + o.clone() * s.clone())
            * eb;

        let tensor = address_of(sb, vec![Expr::int(0); sb.rank()]);
        let wave = Expr::call(Intrinsic::WaveIdx, vec![], DType::I32);
        let threads = self.threads;
        let iters = (slots + threads - 1) / threads;
        let mut out = vec![];
        for it in 0..iters {
            let slot = Expr::int(it * threads) + self.tid.clone();
            let (r, c) = un.coords(&(slot * v));
            let sidx = region_index(src, &[r.clone(), c.clone()]);
            // The tensor's first dim needs no check: with the others in range, an index past
            // either end of it is an offset past the buffer's range, which loads zeros.
            let pred = sidx
                .iter()
                .zip(sb.shape())
                .skip(1)
                .map(|(i, n)| i.ge(0).and(i.lt(n.clone())))
                .chain(guard.cloned())
                .reduce(|a, b| a.and(b))
                .unwrap_or(Expr::bool(true));
            let voffset = (r * strides[sdims[0]].clone() + c * strides[sdims[1]].clone()) * eb;
            let wave_slot = Expr::int(it * threads) + wave.clone() * WAVE;
            let base = address_of(db, vec![stage_base.clone() + wave_slot.clone() * v]);
            let load = eval(
                Intrinsic::BufferLoadLds {
                    bytes: bytes as u32,
                },
                vec![base, tensor.clone(), voffset, soffset.clone(), pred],
                span,
            );
            // Waves past the tile's end (its last slots) skip the load together.
            let partial = (it + 1) * threads > slots;
            out.push(if_then(partial.then(|| wave_slot.lt(slots)), load, span));
        }
        Some(Stmt::seq(out, span))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swizzled_operand_tiles_invert_into_whole_row_runs() {
        for (rows, cols) in [(64, 64), (256, 64), (64, 128), (128, 32)] {
            let l = tl_layout::smem_swizzle_layout(rows, cols, 2).expect("layout");
            let u = Unlayout::new(Some(l.layout.clone()), rows, cols, 8);
            assert!(u.is_some(), "{rows}x{cols}: {}", l.layout);
            // dword loads (gfx942): runs of 2 elements.
            assert!(Unlayout::new(Some(l.layout), rows, cols, 2).is_some());
        }
    }
}
