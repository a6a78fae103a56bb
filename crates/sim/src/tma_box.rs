//! What TMA loads and stores share: the operand checks of a box (a global tensor's first
//! element, a shared tile aligned for the swizzle, extents and strides the hardware takes)
//! and the walk over the box's rows that lie inside the tensor.

use tl_ir::Scope;

use crate::bytecode::{MemRef, E};
use crate::compile::shared_align;
use crate::error::SimError;
use crate::exec::{Interp, Loc, Thread};

/// A checked TMA box: the shared tile (`shared`, byte offset `soff` in its buffer), the
/// global tensor, the box's coordinates and its shape in bytes.
pub struct TmaBox {
    /// The tensor's row length in elements where the map's is shorter than its buffer's
    /// rows (a tensor staged into padded scratch): boxes read no further along the rows.
    pub width: Option<i64>,
    pub shared: Loc,
    pub soff: usize,
    pub tensor: Loc,
    pub at: Vec<i64>,
    pub rows: usize,
    pub row_bytes: usize,
    pub total: usize,
}

/// One row of a box that lies (at least partly) inside the tensor: the box row, the byte
/// offset of its first element inside the tensor, the byte offset of that element in the
/// box row, and the bytes inside.
pub struct BoxRow {
    pub row: usize,
    pub global: usize,
    pub in_row: usize,
    pub len: usize,
}

impl Interp<'_, '_> {
    /// Check a TMA copy's operands: `shared` is the copy's shared end (`side` names it in
    /// reports: "destination" or "source"), `tensor` the address of a global tensor's first
    /// element. `pitched`: the runtime stages the tensor with padded rows (no stride rule).
    #[allow(clippy::too_many_arguments)]
    pub fn tma_box(
        &mut self,
        th: &Thread,
        box_dims: &[u32],
        (swizzle, pitched): (u32, bool),
        (shared, tensor): (&MemRef, &MemRef),
        coords: &[E],
        side: &str,
        pc: u32,
    ) -> Result<TmaBox, SimError> {
        let name = self.prog.name(pc as usize).to_string();
        let span = self.prog.span(pc as usize);
        let invalid = |msg: String| SimError::InvalidIr(format!("{name} at {span}: {msg}"));
        let d = self.addr(th, shared, pc)?;
        let t = self.addr(th, tensor, pc)?;
        let mut at = Vec::with_capacity(coords.len());
        for c in coords {
            at.push(self.eval(th, c, pc)?.as_i64() as i32 as i64);
        }
        let (di, ti) = (self.mem.info(d.buf), self.mem.info(t.buf));
        if ti.scope != Scope::Global || t.elem != 0 {
            return Err(invalid(format!(
                "the tensor operand is {} `{}`[{}], not the address of a global tensor's first element",
                ti.scope, ti.name, t.elem
            )));
        }
        if di.scope != Scope::Shared {
            return Err(invalid(format!(
                "the {side} is {} `{}`, not shared memory",
                di.scope, di.name
            )));
        }
        let rank = box_dims.len();
        if ti.shape.len() != rank || at.len() != rank {
            return Err(invalid(format!(
                "a box of {rank} dims and {} coordinates for `{}` of shape {:?}",
                at.len(),
                ti.name,
                ti.shape
            )));
        }
        let esize = ti.dtype.bytes();
        if let Some(&bad) = box_dims.iter().find(|&&x| x == 0 || x > 256) {
            return Err(invalid(format!(
                "a box extent of {bad} (box {box_dims:?}; 1 to 256 per dim)"
            )));
        }
        // The hardware starts a box only on a 16-byte boundary of the tensor's rows (its
        // base is 16-byte aligned): boxes starting 2 bytes off stopped every kernel with an
        // illegal instruction on an H200 (gpu-notes run 25a), as Triton's TMA checks also say.
        // Applied to out-of-range (negative) coordinates too, which that run did not try.
        let start = at[rank - 1] * esize as i64;
        if start.rem_euclid(16) != 0 {
            return Err(invalid(format!(
                "a box starting at column {} of `{}` ({start} bytes into its rows): TMA starts a box only at a multiple of 16 bytes (on the GPU: an illegal instruction)",
                at[rank - 1], ti.name
            )));
        }
        let inner = box_dims[rank - 1] as usize;
        let row_bytes = inner * esize;
        if !row_bytes.is_multiple_of(16) {
            return Err(invalid(format!(
                "box rows of {row_bytes} bytes ({inner} × {}): TMA boxes need rows of a multiple of 16 bytes",
                ti.dtype
            )));
        }
        if swizzle >= 32 && row_bytes > swizzle as usize {
            return Err(invalid(format!(
                "box rows of {row_bytes} bytes with a {swizzle}-byte swizzle (rows may span the swizzle's width at most)"
            )));
        }
        // The descriptor (built at launch) needs every stride a multiple of 16 bytes.
        let tensor_row = ti.shape[rank - 1] as usize * esize;
        if rank > 1 && !pitched && !tensor_row.is_multiple_of(16) {
            return Err(invalid(format!(
                "`{}` of shape {:?} ({}) has rows of {tensor_row} bytes; a TMA descriptor needs its strides to be multiples of 16 bytes",
                ti.name, ti.shape, ti.dtype
            )));
        }
        // The shared tile: aligned (absolutely) for the swizzle, inside its buffer.
        let rows: usize = box_dims[..rank - 1].iter().map(|&x| x as usize).product();
        let total = rows * row_bytes;
        let dstart = d.elem as i128 * di.dtype.bytes() as i128;
        if d.elem < 0 || dstart + total as i128 > di.bytes() as i128 {
            let esz = di.dtype.bytes().max(1) as i128;
            let last = ((dstart + total as i128 - 1) / esz) as i64;
            return Err(self
                .mem
                .oob(d.buf, vec![d.elem, last], vec![di.numel], th.tid, pc));
        }
        let soff = dstart as usize;
        let align = if swizzle >= 32 {
            8 * swizzle as usize
        } else {
            128
        };
        if shared_align(di.bytes()) < align {
            return Err(invalid(format!(
                "the {side} `{}` is {} bytes: codegen places it on a {}-byte boundary only, and a TMA copy{} needs {align}-byte alignment (shared buffers of 128 bytes and more are 128-byte aligned, of 1 KiB and more 1024-byte aligned)",
                di.name,
                di.bytes(),
                shared_align(di.bytes()),
                if swizzle >= 32 {
                    format!(" with a {swizzle}-byte swizzle")
                } else {
                    String::new()
                }
            )));
        }
        self.mem.aligned(d.buf, soff, align, &name, th.tid, pc)?;
        Ok(TmaBox {
            width: None,
            shared: d,
            soff,
            tensor: t,
            at,
            rows,
            row_bytes,
            total,
        })
    }

    /// The rows of box `b` (of `box_dims`) that lie inside its tensor, and their parts inside.
    pub fn box_rows(&self, b: &TmaBox, box_dims: &[u32]) -> Vec<BoxRow> {
        let ti = self.mem.info(b.tensor.buf);
        let (shape, esize) = (&ti.shape, ti.dtype.bytes());
        let rank = box_dims.len();
        let inner = box_dims[rank - 1] as i64;
        let mut out = vec![];
        for r in 0..b.rows {
            let mut rem = r;
            let mut inside = true;
            let mut idx = vec![0i64; rank - 1];
            for dd in (0..rank - 1).rev() {
                let n = box_dims[dd] as usize;
                idx[dd] = b.at[dd] + (rem % n) as i64;
                rem /= n;
                inside &= (0..shape[dd]).contains(&idx[dd]);
            }
            if !inside {
                continue;
            }
            let flat = idx
                .iter()
                .enumerate()
                .fold(0i64, |acc, (dd, &i)| acc * shape[dd] + i);
            let c0 = b.at[rank - 1];
            let lo = c0.max(0);
            let row_len = b.width.unwrap_or(shape[rank - 1]).min(shape[rank - 1]);
            let hi = (c0 + inner).min(row_len);
            if lo >= hi {
                continue;
            }
            out.push(BoxRow {
                row: r,
                global: ((flat * shape[rank - 1] + lo) as usize) * esize,
                in_row: (lo - c0) as usize * esize,
                len: (hi - lo) as usize * esize,
            });
        }
        out
    }
}
