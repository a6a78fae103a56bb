//! TMA stores (`cp.async.bulk.tensor` shared → global): the model reads the box from shared
//! memory and writes the tensor at issue — the swizzle undone on absolute shared addresses,
//! elements outside the tensor not written — and keeps the shared bytes "being read" until
//! the issuing thread's bulk wait retires the store, so a write to them before then is
//! reported (`WriteDuringTmaStore`). The box's shared bytes must be visible to the async
//! proxy (each writer fenced, then a barrier), as for wgmma. The global bytes count as in
//! flight until the issuing thread's full bulk wait (not `.read`): a generic read of them
//! before then is reported (`TmaStoreInFlight`), since a GPU may not have written them yet.
//! Plain bulk stores (`cp.async.bulk` of contiguous bytes, `BulkStore`) are kept the same way.

use crate::bytecode::{MemRef, E};
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
        let bx = self.tma_box(
            th,
            box_dims,
            (swizzle, false),
            (src, tensor),
            coords,
            "source",
            pc,
        )?;
        let (s, t, soff, total) = (bx.shared, bx.tensor, bx.soff, bx.total);
        // Read the box (16-byte chunks at their swizzled places).
        let base = self.mem.info(s.buf).base;
        let chunks = (0..total / 16).map(|j| swizzle_addr(base + soff + 16 * j, swizzle) - base);
        let (mut data, reading) = self.bulk_read(th, s.buf, chunks, pc)?;
        data.resize(total, 0);
        // Write the rows inside the tensor.
        let wrote = rec(th.tid, Kind::Write, pc);
        for row in self.box_rows(&bx, box_dims) {
            let from = row.row * bx.row_bytes + row.in_row;
            let bytes = data[from..from + row.len].to_vec();
            self.mem
                .write(&mut th.local, t.buf, row.global, &bytes, wrote)?;
            self.mem
                .tma_write(t.buf, (row.global, row.global + row.len), th.tid, pc);
        }
        self.mem.bulk_reads_begin(&reading, th.tid, pc);
        th.bulk.issue(reading);
        Ok(())
    }

    /// A plain bulk store: `bytes` contiguous bytes of shared memory at `src` to global
    /// memory at `dst`, both 16-byte aligned, `bytes` a positive multiple of 16 (the PTX ISA's
    /// rules for `cp.async.bulk`); kept in flight as a TMA store is.
    pub fn bulk_store(
        &mut self,
        th: &mut Thread,
        (dst, src): (&MemRef, &MemRef),
        bytes: &E,
        pc: u32,
    ) -> Result<(), SimError> {
        let name = self.prog.name(pc as usize);
        let n = self.eval(th, bytes, pc)?.as_i64();
        if n <= 0 || n % 16 != 0 {
            return Err(SimError::InvalidIr(format!(
                "{name} of {n} bytes at {}: a bulk copy moves a positive multiple of 16 bytes",
                self.prog.span(pc as usize)
            )));
        }
        let n = n as usize;
        let d = self.addr(th, dst, pc)?;
        let s = self.addr(th, src, pc)?;
        let (di, si) = (self.mem.info(d.buf), self.mem.info(s.buf));
        if di.scope != tl_ir::Scope::Global || si.scope != tl_ir::Scope::Shared {
            return Err(SimError::InvalidIr(format!(
                "{name} at {}: from shared to global memory, not {} to {}",
                self.prog.span(pc as usize),
                si.scope,
                di.scope
            )));
        }
        let doff = self.mem.range(d.buf, d.elem, n, th.tid, pc)?;
        self.mem.aligned(d.buf, doff, 16, name, th.tid, pc)?;
        let soff = self.mem.range(s.buf, s.elem, n, th.tid, pc)?;
        self.mem.aligned(s.buf, soff, 16, name, th.tid, pc)?;
        let (data, reading) = self.bulk_read(th, s.buf, (0..n / 16).map(|j| soff + 16 * j), pc)?;
        self.mem.write(
            &mut th.local,
            d.buf,
            doff,
            &data,
            rec(th.tid, Kind::Write, pc),
        )?;
        self.mem.tma_write(d.buf, (doff, doff + n), th.tid, pc);
        self.mem.bulk_reads_begin(&reading, th.tid, pc);
        th.bulk.issue(reading);
        Ok(())
    }

    /// The 16-byte chunks at byte offsets `chunks` of shared buffer `buf`, read by the
    /// bulk-copy engine (so fenced for the async proxy) for thread `th`: their bytes in order,
    /// and the absolute shared bytes the copy reads until the thread's bulk wait.
    fn bulk_read(
        &mut self,
        th: &Thread,
        buf: u32,
        chunks: impl Iterator<Item = usize>,
        pc: u32,
    ) -> Result<(Vec<u8>, Vec<usize>), SimError> {
        let info = self.mem.info(buf);
        let (base, bytes, esz, numel) = (
            info.base,
            info.bytes(),
            info.dtype.bytes().max(1),
            info.numel,
        );
        let who = rec(th.tid, Kind::IntrinsicRead, pc);
        let (mut data, mut reading) = (vec![], vec![]);
        for off in chunks {
            if off + 16 > bytes {
                let at = vec![(off / esz) as i64];
                return Err(self.mem.oob(buf, at, vec![numel], th.tid, pc));
            }
            let chunk = self.mem.read(&th.local, buf, off, 16, who)?;
            self.mem.check_proxy_read(buf, off, 16, who)?;
            data.extend_from_slice(&chunk[..16]);
            reading.extend((0..16).map(|i| base + off + i));
        }
        Ok((data, reading))
    }
}
