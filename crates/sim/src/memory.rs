//! The memory a block sees: the kernel's global tensors (the caller's bytes, written in place),
//! the block's shared memory with its checker, and each thread's local memory; bounds and
//! alignment checks; and the translation of checker findings into errors that name buffers,
//! threads and source lines.

use crate::bytecode::{BufInfo, Instr, Program};
use crate::error::{Access, AsyncCopy, SimError};
use crate::race::{Conflict, GlobalWrites, Kind, Rec, Shadow, When};
use tl_ir::Scope;

/// The byte a fresh block's shared memory and a fresh thread's local memory hold: all-ones
/// reads as NaN in every float type and -1 in signed integers, so a read of memory nothing
/// wrote shows up in results even with the checks off.
pub const POISON: u8 = 0xff;

pub struct Mem<'p, 'g> {
    pub prog: &'p Program,
    /// Tensor bytes by parameter index (`None` for scalars).
    pub globals: Vec<Option<&'g mut [u8]>>,
    /// The rank whose block is running (its tensors are `globals`).
    pub rank: usize,
    /// The other ranks' tensors by rank (the running rank's entry is empty while it runs).
    pub peers: Vec<Vec<Option<&'g mut [u8]>>>,
    /// The memory-order checker of a multi-rank run (symmetric buffers only).
    pub order: Option<crate::order::Order>,
    pub shared: Vec<u8>,
    pub shadow: Shadow,
    pub global_writes: GlobalWrites,
    pub block: [i64; 3],
    /// Block barriers (`sync_threads` and LDS barriers) passed so far in this block, plus one:
    /// what orders shared memory.
    pub epoch: u32,
    /// `sync_threads` passed so far in this block, plus one: what orders global memory (an
    /// AMD LDS barrier does not).
    pub global_epoch: u32,
    /// `sync_warp`s passed per warp.
    pub warp_epochs: Vec<u32>,
    /// Per thread, the block epoch of each `fence.proxy.async` it executed.
    pub proxy_fences: Vec<Vec<u32>>,
    /// Per thread, whether it has passed `griddepcontrol.wait` (see
    /// [`Program::grid_dependent`](crate::bytecode::Program::grid_dependent)).
    pub grid_waited: Vec<bool>,
    /// Shared bytes (absolute) that issued, not yet retired wgmmas read: how many, and the
    /// warp and instruction of the latest (for reports).
    pub wgmma_reads: std::collections::HashMap<usize, (u32, u32, u32)>,
    /// The block's mbarriers and the TMA copies in flight on them.
    pub mbars: crate::mbarrier::Mbars,
    /// Named barriers' current phases that threads have arrived at without waiting
    /// (`bar.arrive`): id → (threads the barrier counts, threads arrived).
    pub named_arrivals: std::collections::HashMap<u32, (u32, u32)>,
    /// Global bytes TMA stores wrote whose issuing thread has not yet waited for them to land
    /// (`cp.async.bulk.wait_group 0` without `.read`), by (rank, buffer): (first byte, end,
    /// issuing block, thread, instruction). A generic read of them is reported: the model
    /// writes at issue, a GPU later.
    pub tma_writes: TmaWrites,
    /// What this block sent other blocks of its cluster (multicast copies, remote arrivals),
    /// for the scheduler to deliver when each runs next.
    pub outbox: Vec<crate::mbarrier::Remote>,
    /// Cluster barriers this block has passed.
    pub cluster_gen: u32,
}

/// See [`Mem::tma_writes`].
pub type TmaWrites =
    std::collections::HashMap<(usize, u32), Vec<(usize, usize, [i64; 3], u32, u32)>>;

impl<'p, 'g> Mem<'p, 'g> {
    /// A TMA store of the running block's thread `tid` wrote `[lo, hi)` of global `buf`.
    pub fn tma_write(&mut self, buf: u32, (lo, hi): (usize, usize), tid: u32, pc: u32) {
        let (rank, block) = (self.rank, self.block);
        self.tma_writes
            .entry((rank, buf))
            .or_default()
            .push((lo, hi, block, tid, pc));
    }

    /// Thread `tid` of the running block waited for all its TMA stores to land.
    pub fn tma_writes_land(&mut self, tid: u32) {
        let (rank, block) = (self.rank, self.block);
        for ((r, _), v) in self.tma_writes.iter_mut() {
            if *r == rank {
                v.retain(|&(_, _, b, t, _)| !(b == block && t == tid));
            }
        }
        self.tma_writes.retain(|_, v| !v.is_empty());
    }

    /// A generic read of `[off, off + len)` of global `buf` on this rank must not see bytes a
    /// TMA store still has in flight.
    fn check_tma_landed(&self, buf: u32, off: usize, len: usize, who: Rec) -> Result<(), SimError> {
        let Some(v) = self.tma_writes.get(&(self.rank, buf)) else {
            return Ok(());
        };
        if let Some(&(lo, _, block, tid, pc)) =
            v.iter().find(|&&(lo, hi, ..)| lo < off + len && off < hi)
        {
            let info = self.info(buf);
            let at = |t: u32, b: [i64; 3], pc: u32| {
                format!(
                    "thread {t} of block [{}, {}, {}] at {}",
                    b[0],
                    b[1],
                    b[2],
                    self.prog.span(pc as usize)
                )
            };
            return Err(SimError::TmaStoreInFlight {
                buffer: info.name.clone(),
                offset: off.max(lo),
                reader: at(who.tid as u32, self.block, who.pc),
                writer: at(tid, block, pc),
            });
        }
        Ok(())
    }

    pub fn info(&self, buf: u32) -> &'p BufInfo {
        // The compiler only emits indices of buffers it put in the table.
        &self.prog.bufs[buf as usize]
    }

    pub fn when(&self, tid: u32) -> When {
        When {
            epoch: self.epoch,
            global_epoch: self.global_epoch,
            warp_epoch: self
                .warp_epochs
                .get((tid / self.prog.warp_size) as usize)
                .copied()
                .unwrap_or(0),
            fences: self
                .proxy_fences
                .get(tid as usize)
                .map_or(0, |f| f.len() as u32),
        }
    }

    /// Check that an async-proxy read (wgmma) of `len` bytes at byte `off` of shared `buf`
    /// sees writes that were fenced for the async proxy before a barrier.
    pub fn check_proxy_read(
        &self,
        buf: u32,
        off: usize,
        len: usize,
        who: Rec,
    ) -> Result<(), SimError> {
        let info = self.info(buf);
        let fences = &self.proxy_fences;
        let nth = |tid: u16, n: u32| -> Option<u32> {
            fences
                .get(tid as usize)
                .and_then(|f| f.get(n as usize))
                .copied()
        };
        self.shadow
            .proxy_visible(info.base + off, len, self.epoch, &nth)
            .map_err(|c| self.conflict(c, buf, who))
    }

    /// Describe an access record for a report.
    pub fn access(&self, r: Rec) -> Access {
        let site = self.prog.name(r.pc as usize);
        let op = match r.kind {
            Kind::Load => format!("load in `{site}`"),
            _ => site.to_string(),
        };
        Access {
            thread: r.tid as u32,
            op,
            kind: r.kind.access_kind(),
            span: self.prog.span(r.pc as usize),
        }
    }

    /// Turn a checker finding about an access to `buf` by `who` into an error.
    pub fn conflict(&self, c: Conflict, buf: u32, who: Rec) -> SimError {
        let info = self.info(buf);
        // Shared conflicts come as absolute shared offsets, global ones as tensor offsets.
        let base = if info.scope == Scope::Shared {
            info.base
        } else {
            0
        };
        let name = info.name.clone();
        match c {
            Conflict::Race { byte, first } => SimError::DataRace {
                buffer: name,
                offset: byte.saturating_sub(base),
                block: self.block,
                first: Box::new(self.access(first)),
                second: Box::new(self.access(who)),
            },
            Conflict::Uninit { byte, who } => SimError::UninitializedSharedRead {
                buffer: name,
                offset: byte.saturating_sub(base),
                block: self.block,
                thread: who.tid as u32,
                span: self.prog.span(who.pc as usize),
            },
            Conflict::NoProxyFence { byte, writer } => SimError::MissingProxyFence {
                buffer: name,
                offset: byte.saturating_sub(base),
                block: self.block,
                thread: who.tid as u32,
                span: self.prog.span(who.pc as usize),
                writer: Box::new(self.access(writer)),
            },
            Conflict::Stale { byte, issuer } => SimError::StaleAsyncRead {
                buffer: name,
                offset: byte.saturating_sub(base),
                block: self.block,
                thread: who.tid as u32,
                span: self.prog.span(who.pc as usize),
                issuer: issuer.tid as u32,
                issued_at: self.prog.span(issuer.pc as usize),
                copy: match self.prog.code.get(issuer.pc as usize) {
                    Some(Instr::BufferLoadLds { bytes, .. }) => {
                        AsyncCopy::BufferLoad { bytes: *bytes }
                    }
                    Some(Instr::TmaLoad { .. }) => AsyncCopy::Tma,
                    _ => AsyncCopy::CpAsync,
                },
            },
        }
    }

    /// The shared buffer holding absolute shared byte `byte`.
    pub fn shared_buf_at(&self, byte: usize) -> u32 {
        self.prog
            .bufs
            .iter()
            .position(|b| b.scope == Scope::Shared && b.base <= byte && byte < b.base + b.bytes())
            .unwrap_or(0) as u32
    }

    /// The uninitialized shared read waiting to be reported, as an error.
    pub fn take_uninit(&mut self) -> Option<SimError> {
        let c = self.shadow.take_uninit()?;
        let Conflict::Uninit { byte, who } = c else {
            return None;
        };
        let buf = self.shared_buf_at(byte);
        Some(self.conflict(c, buf, who))
    }

    /// A global access by a thread of a grid-dependent kernel that has not yet waited for the
    /// grid before it.
    fn check_grid_dependency(&self, buf: u32, who: Rec) -> Result<(), SimError> {
        let tid = who.tid as u32;
        if !self.prog.grid_dependent || self.grid_waited.get(tid as usize) == Some(&true) {
            return Ok(());
        }
        Err(SimError::BeforeGridDependencyWait {
            buffer: self.info(buf).name.clone(),
            block: self.block,
            thread: tid,
            span: self.prog.span(who.pc as usize),
        })
    }

    pub fn oob(&self, buf: u32, index: Vec<i64>, extent: Vec<i64>, tid: u32, pc: u32) -> SimError {
        SimError::OutOfBounds {
            buffer: self.info(buf).name.clone(),
            index,
            extent,
            block: self.block,
            thread: tid,
            span: self.prog.span(pc as usize),
        }
    }

    /// The byte offset of `len` bytes starting at flat element `elem` of `buf`, if they lie
    /// inside it.
    pub fn range(
        &self,
        buf: u32,
        elem: i64,
        len: usize,
        tid: u32,
        pc: u32,
    ) -> Result<usize, SimError> {
        let info = self.info(buf);
        let esize = info.dtype.bytes() as i128;
        let start = elem as i128 * esize;
        if elem < 0 || start + len as i128 > info.bytes() as i128 {
            let last = (start + len as i128 - 1).div_euclid(esize.max(1));
            let shown = if elem < 0 || last == elem as i128 {
                vec![elem]
            } else {
                vec![elem, last as i64]
            };
            return Err(self.oob(buf, shown, vec![info.numel], tid, pc));
        }
        Ok(start as usize)
    }

    /// Check that a `len`-byte access at byte `off` of `buf` is aligned to `align` (shared and
    /// local buffers are placed at 16-byte multiples, global tensors at 256).
    pub fn aligned(
        &self,
        buf: u32,
        off: usize,
        align: usize,
        op: &str,
        tid: u32,
        pc: u32,
    ) -> Result<(), SimError> {
        let info = self.info(buf);
        let abs = match info.scope {
            Scope::Shared | Scope::Local => info.base + off,
            _ => off,
        };
        if align > 1 && abs % align != 0 {
            return Err(SimError::Misaligned {
                buffer: info.name.clone(),
                offset: off,
                align,
                op: op.to_string(),
                block: self.block,
                thread: tid,
                span: self.prog.span(pc as usize),
            });
        }
        Ok(())
    }

    /// Check (and record) a write or atomic of `len` bytes at `off` of `buf`.
    pub fn check_write(
        &mut self,
        buf: u32,
        off: usize,
        len: usize,
        who: Rec,
    ) -> Result<(), SimError> {
        let info = self.info(buf);
        if info.scope == Scope::Global {
            self.check_grid_dependency(buf, who)?;
        }
        let when = self.when(who.tid as u32);
        let r = match info.scope {
            Scope::Shared => self.shadow.write(info.base + off, len, who, when),
            Scope::Global => self.global_writes.write(info.base, off, len, who, when),
            _ => Ok(()),
        };
        r.map_err(|c| self.conflict(c, buf, who))?;
        if info.scope == Scope::Global && who.kind != crate::race::Kind::Atomic {
            self.order_access(self.rank, buf, off, len, who.tid as u32, who.pc, true)?;
        }
        if info.scope == Scope::Shared {
            self.check_wgmma_reads(buf, off, len, who)?;
        }
        Ok(())
    }

    /// A TMA store issued by thread `tid` at `pc` reads the absolute shared bytes `bytes` until
    /// the thread's bulk wait retires it (kept with the wgmma reads, tagged [`BULK_READER`]).
    pub fn bulk_reads_begin(&mut self, bytes: &[usize], tid: u32, pc: u32) {
        self.wgmma_reads_begin(bytes, tid | BULK_READER, pc);
    }

    /// A wgmma issued by `warp` at `pc` reads the absolute shared bytes `bytes` until it is
    /// retired ([`Mem::wgmma_reads_end`]).
    pub fn wgmma_reads_begin(&mut self, bytes: &[usize], warp: u32, pc: u32) {
        for &b in bytes {
            let e = self.wgmma_reads.entry(b).or_insert((0, warp, pc));
            *e = (e.0 + 1, warp, pc);
        }
    }

    pub fn wgmma_reads_end(&mut self, bytes: &[usize]) {
        for b in bytes {
            if let Some(e) = self.wgmma_reads.get_mut(b) {
                e.0 = e.0.saturating_sub(1);
                if e.0 == 0 {
                    self.wgmma_reads.remove(b);
                }
            }
        }
    }

    /// Fails if bytes `off..off + len` of shared `buf` are still read by an in-flight wgmma.
    pub fn check_wgmma_reads(
        &self,
        buf: u32,
        off: usize,
        len: usize,
        who: Rec,
    ) -> Result<(), SimError> {
        if self.wgmma_reads.is_empty() {
            return Ok(());
        }
        let info = self.info(buf);
        for i in 0..len {
            if let Some(&(_, warp, pc)) = self.wgmma_reads.get(&(info.base + off + i)) {
                if warp & BULK_READER != 0 {
                    return Err(SimError::WriteDuringTmaStore {
                        buffer: info.name.clone(),
                        offset: off + i,
                        block: self.block,
                        thread: who.tid as u32,
                        span: self.prog.span(who.pc as usize),
                        issuer: warp & !BULK_READER,
                        read_at: self.prog.span(pc as usize),
                    });
                }
                return Err(SimError::WriteDuringWgmmaRead {
                    buffer: info.name.clone(),
                    offset: off + i,
                    block: self.block,
                    thread: who.tid as u32,
                    span: self.prog.span(who.pc as usize),
                    warp,
                    read_at: self.prog.span(pc as usize),
                });
            }
        }
        Ok(())
    }

    /// Check a plain access of rank `rank`'s copy of global buffer `buf` against the memory
    /// order (a no-op unless the run checks it). Every global buffer counts, not only the
    /// symmetric ones: blocks of a multi-rank kernel run at once, so two of them updating one
    /// element of a plain output without an order between them race as surely as ranks do.
    #[allow(clippy::too_many_arguments)]
    pub fn order_access(
        &mut self,
        rank: usize,
        buf: u32,
        off: usize,
        len: usize,
        tid: u32,
        pc: u32,
        write: bool,
    ) -> Result<(), SimError> {
        let prog = self.prog;
        let Some(o) = self.order.as_mut() else {
            return Ok(());
        };
        // A buffer nothing writes (an input) cannot race: no history for it.
        if !prog.written.contains(&buf) {
            return Ok(());
        }
        let info = &prog.bufs[buf as usize];
        o.access(rank, buf, info.bytes(), off, len, tid, pc, write)
            .map_err(|u| SimError::UnorderedAccess {
                buffer: info.name.clone(),
                rank,
                element: off / info.dtype.bytes().max(1),
                kind: u.kind,
                by: crate::order::describe(&u.by, prog.span(pc as usize)),
                other: crate::order::describe(&u.other, prog.span(u.other_pc as usize)),
            })
    }

    /// An async-proxy (TMA) read of `len` bytes at `off` of global `buf` by thread `tid`:
    /// bytes written in this kernel by the generic proxy need a `fence.proxy.async.global` by
    /// the reader after its acquire (a no-op unless the run checks the memory order).
    pub fn order_async_read(
        &mut self,
        buf: u32,
        off: usize,
        len: usize,
        tid: u32,
        pc: u32,
    ) -> Result<(), SimError> {
        let prog = self.prog;
        let rank = self.rank;
        let Some(o) = self.order.as_mut() else {
            return Ok(());
        };
        let info = &prog.bufs[buf as usize];
        o.async_read(rank, buf, off, len, tid)
            .map_err(|u| SimError::AsyncProxyUnfenced {
                buffer: info.name.clone(),
                rank,
                element: off / info.dtype.bytes().max(1),
                by: crate::order::describe(&u.by, prog.span(pc as usize)),
                other: crate::order::describe(&u.other, prog.span(u.other_pc as usize)),
            })
    }

    /// How many ranks run the kernel.
    pub fn ranks(&self) -> usize {
        self.peers.len().max(1)
    }

    /// The bytes `off..off + len` of rank `rank`'s copy of global buffer `buf` (range-checked
    /// by the caller), unchecked by the race checker: memory-model accesses and peer copies.
    pub fn rank_bytes(
        &mut self,
        rank: i64,
        buf: u32,
        off: usize,
        len: usize,
        tid: u32,
        pc: u32,
    ) -> Result<&mut [u8], SimError> {
        let info = self.info(buf);
        if rank < 0 || rank as usize >= self.ranks() {
            return Err(SimError::BadRank {
                rank,
                ranks: self.ranks(),
                on: self.rank,
                block: self.block,
                thread: tid,
                span: self.prog.span(pc as usize),
            });
        }
        let g = if rank as usize == self.rank {
            self.globals.get_mut(info.base)
        } else {
            self.peers
                .get_mut(rank as usize)
                .and_then(|p| p.get_mut(info.base))
        };
        match g {
            Some(Some(g)) => g.get_mut(off..off + len).ok_or_else(|| missing(info)),
            _ => Err(missing(info)),
        }
    }

    /// The bytes `off..off + len` of `buf`, unchecked by the race checker (callers check).
    pub fn bytes_mut<'a>(
        &'a mut self,
        local: &'a mut [u8],
        buf: u32,
        off: usize,
        len: usize,
    ) -> Result<&'a mut [u8], SimError> {
        let info = self.info(buf);
        let mem: &mut [u8] = match info.scope {
            Scope::Global => match self.globals.get_mut(info.base) {
                Some(Some(g)) => g,
                _ => return Err(missing(info)),
            },
            Scope::Shared => match self.shared.get_mut(info.base..) {
                Some(s) => s,
                None => return Err(missing(info)),
            },
            Scope::Local => match local.get_mut(info.base..) {
                Some(s) => s,
                None => return Err(missing(info)),
            },
            _ => return Err(missing(info)),
        };
        mem.get_mut(off..off + len).ok_or_else(|| missing(info))
    }

    /// Read `len` (at most 16) bytes at byte `off` of `buf` (already range-checked), checking
    /// shared accesses with `who`.
    pub fn read(
        &mut self,
        local: &[u8],
        buf: u32,
        off: usize,
        len: usize,
        who: Rec,
    ) -> Result<[u8; 16], SimError> {
        let info = self.info(buf);
        let len = len.min(16);
        let src: &[u8] = match info.scope {
            Scope::Global => {
                self.check_grid_dependency(buf, who)?;
                self.check_tma_landed(buf, off, len, who)?;
                let when = self.when(who.tid as u32);
                self.global_writes
                    .read(info.base, off, len, who, when)
                    .map_err(|c| self.conflict(c, buf, who))?;
                self.order_access(self.rank, buf, off, len, who.tid as u32, who.pc, false)?;
                match self.globals.get(info.base) {
                    Some(Some(g)) => g,
                    _ => return Err(missing(info)),
                }
            }
            Scope::Shared => {
                let when = self.when(who.tid as u32);
                self.shadow
                    .read(info.base + off, len, who, when)
                    .map_err(|c| self.conflict(c, buf, who))?;
                match self.shared.get(info.base..) {
                    Some(s) => s,
                    None => return Err(missing(info)),
                }
            }
            Scope::Local => match local.get(info.base..) {
                Some(s) => s,
                None => return Err(missing(info)),
            },
            _ => return Err(missing(info)),
        };
        let mut out = [0u8; 16];
        out[..len].copy_from_slice(src.get(off..off + len).ok_or_else(|| missing(info))?);
        Ok(out)
    }

    /// Write `data` at byte `off` of `buf` (already range-checked), checking shared accesses
    /// with `who`.
    pub fn write(
        &mut self,
        local: &mut [u8],
        buf: u32,
        off: usize,
        data: &[u8],
        who: Rec,
    ) -> Result<(), SimError> {
        self.check_write(buf, off, data.len(), who)?;
        self.bytes_mut(local, buf, off, data.len())?
            .copy_from_slice(data);
        Ok(())
    }
}

/// Marks a reader of shared bytes in `Mem::wgmma_reads` as a TMA store's issuing thread (the
/// rest is its id) rather than a wgmma's warp.
pub const BULK_READER: u32 = 1 << 31;

/// An access the compiler should never have produced (a buffer without backing memory, or a
/// range the caller did not check).
fn missing(info: &BufInfo) -> SimError {
    SimError::InvalidIr(format!(
        "no memory behind {} buffer `{}` for this access",
        info.scope, info.name
    ))
}
