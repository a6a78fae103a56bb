//! TMA stores (`cp.async.bulk.tensor` shared → global): the model reads the box from shared
//! memory and writes the tensor at issue — the swizzle undone on absolute shared addresses,
//! elements outside the tensor not written — and keeps the shared bytes "being read" until
//! the issuing thread's bulk wait retires the store, so a write to them before then is
//! reported (`WriteDuringTmaStore`). The box's shared bytes must be visible to the async
//! proxy (each writer fenced, then a barrier), as for wgmma.

use tl_ir::Scope;

use crate::bytecode::{MemRef, E};
use crate::compile::shared_align;
use crate::error::SimError;
use crate::exec::{rec, Interp, Thread};
use crate::mbarrier::swizzle_addr;
use crate::race::Kind;

impl Interp<'_, '_> {
    pub fn tma_store(
        &mut self,
        th: &mut Thread,
        box_dims: &[u32],
        swizzle: u32,
        (src, tensor): (&MemRef, &MemRef),
        coords: &[E],
        pc: u32,
    ) -> Result<(), SimError> {
        let name = self.prog.name(pc as usize).to_string();
        let span = self.prog.span(pc as usize);
        let invalid = |msg: String| SimError::InvalidIr(format!("{name} at {span}: {msg}"));
        let s = self.addr(th, src, pc)?;
        let t = self.addr(th, tensor, pc)?;
        let mut at = Vec::with_capacity(coords.len());
        for c in coords {
            at.push(self.eval(th, c, pc)?.as_i64() as i32 as i64);
        }
        let (si, ti) = (self.mem.info(s.buf), self.mem.info(t.buf));
        if ti.scope != Scope::Global || t.elem != 0 {
            return Err(invalid(format!(
                "the tensor operand is {} `{}`[{}], not the address of a global tensor's first element",
                ti.scope, ti.name, t.elem
            )));
        }
        if si.scope != Scope::Shared {
            return Err(invalid(format!(
                "the source is {} `{}`, not shared memory",
                si.scope, si.name
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
        let inner = box_dims[rank - 1] as usize;
        let row_bytes = inner * esize;
        if !row_bytes.is_multiple_of(16) {
            return Err(invalid(format!(
                "box rows of {row_bytes} bytes: TMA boxes need rows of a multiple of 16 bytes"
            )));
        }
        if swizzle >= 32 && row_bytes > swizzle as usize {
            return Err(invalid(format!(
                "box rows of {row_bytes} bytes with a {swizzle}-byte swizzle"
            )));
        }
        let tensor_row = ti.shape[rank - 1] as usize * esize;
        if rank > 1 && !tensor_row.is_multiple_of(16) {
            return Err(invalid(format!(
                "`{}` of shape {:?} has rows of {tensor_row} bytes; a TMA descriptor needs its strides to be multiples of 16 bytes",
                ti.name, ti.shape
            )));
        }
        let rows: usize = box_dims[..rank - 1].iter().map(|&x| x as usize).product();
        let total = rows * row_bytes;
        let sstart = s.elem as i128 * si.dtype.bytes() as i128;
        if s.elem < 0 || sstart + total as i128 > si.bytes() as i128 {
            let esz = si.dtype.bytes().max(1) as i128;
            let last = ((sstart + total as i128 - 1) / esz) as i64;
            return Err(self
                .mem
                .oob(s.buf, vec![s.elem, last], vec![si.numel], th.tid, pc));
        }
        let soff = sstart as usize;
        let align = if swizzle >= 32 {
            8 * swizzle as usize
        } else {
            128
        };
        if shared_align(si.bytes()) < align {
            return Err(invalid(format!(
                "the source `{}` is {} bytes: codegen places it on a {}-byte boundary only, and a TMA store needs {align}",
                si.name,
                si.bytes(),
                shared_align(si.bytes())
            )));
        }
        self.mem.aligned(s.buf, soff, align, &name, th.tid, pc)?;
        // Read the box (16-byte chunks at their swizzled places).
        let base = si.base;
        let who = rec(th.tid, Kind::IntrinsicRead, pc);
        let mut data = vec![0u8; total];
        let mut reading = Vec::with_capacity(total);
        for j in 0..total / 16 {
            let off = swizzle_addr(base + soff + 16 * j, swizzle) - base;
            if off + 16 > si.bytes() {
                let esz = si.dtype.bytes().max(1);
                return Err(self.mem.oob(
                    s.buf,
                    vec![(off / esz) as i64],
                    vec![si.numel],
                    th.tid,
                    pc,
                ));
            }
            let bytes = self.mem.read(&th.local, s.buf, off, 16, who)?;
            self.mem.check_proxy_read(s.buf, off, 16, who)?;
            data[16 * j..16 * j + 16].copy_from_slice(&bytes[..16]);
            reading.extend((0..16).map(|i| base + off + i));
        }
        // Write the rows inside the tensor.
        let shape = &ti.shape;
        let wrote = rec(th.tid, Kind::Write, pc);
        for r in 0..rows {
            let mut rem = r;
            let mut inside = true;
            let mut idx = vec![0i64; rank - 1];
            for dd in (0..rank - 1).rev() {
                let n = box_dims[dd] as usize;
                idx[dd] = at[dd] + (rem % n) as i64;
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
            let c0 = at[rank - 1];
            let lo = c0.max(0);
            let hi = (c0 + inner as i64).min(shape[rank - 1]);
            if lo >= hi {
                continue;
            }
            let gstart = ((flat * shape[rank - 1] + lo) as usize) * esize;
            let from = r * row_bytes + (lo - c0) as usize * esize;
            let len = (hi - lo) as usize * esize;
            let bytes = data[from..from + len].to_vec();
            self.mem
                .write(&mut th.local, t.buf, gstart, &bytes, wrote)?;
        }
        self.mem.bulk_reads_begin(&reading, th.tid, pc);
        th.bulk.issue(reading);
        Ok(())
    }
}
