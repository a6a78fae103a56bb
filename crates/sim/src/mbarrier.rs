//! Hopper's mbarriers and the tensor-memory accelerator (TMA).
//!
//! An mbarrier is a `u64` element of a shared buffer with, per phase, a count of arrivals still
//! expected and a count of transaction bytes still expected. `mbarrier_init<count>` starts phase
//! 0 with `count` arrivals pending; `mbarrier_arrive_expect_tx(bar, bytes)` announces `bytes`
//! then arrives; `mbarrier_arrive` arrives. A phase completes once all its arrivals are made and
//! the bytes of the TMA copies issued on it equal the bytes announced; then the parity flips
//! and the next phase expects `count` arrivals again. `mbarrier_wait(bar, parity)` blocks its
//! thread until the phase with that parity has completed (the current phase's parity differs).
//!
//! A TMA copy (`tma_load`) reads its box of the global tensor when issued (elements outside
//! the tensor read as zeros) and lands in shared memory — swizzled on absolute shared addresses,
//! as the hardware does — when its barrier's phase completes. Until then its destination bytes
//! are in flight: a read of them is a stale read. Once landed, they are visible to the threads
//! that saw the phase complete (their wait passed) and, after a block barrier, to everyone
//! (the race checker's `Shadow::tma_acquire`).

use std::collections::HashMap;

use tl_ir::Scope;

use crate::bytecode::{MemRef, E};
use crate::error::{MbarrierState, SimError};
use crate::exec::{rec, Interp, Loc, Thread};
use crate::race::{Kind, Rec};

/// One TMA copy in flight: the destination shared buffer and its 16-byte chunks (byte offset
/// in the buffer, already swizzled, and the bytes).
#[derive(Clone, Debug)]
pub struct TmaCopy {
    pub buf: u32,
    pub chunks: Vec<(usize, [u8; 16])>,
    pub tid: u32,
    pub pc: u32,
}

/// What a block of a cluster does to another's shared memory, delivered by the scheduler when
/// that block next runs (its state is swapped out meanwhile).
#[derive(Clone, Debug)]
pub struct Remote {
    /// The receiving block's rank in the cluster.
    pub to: u32,
    /// The barrier's absolute shared offset (the same in every block of the program).
    pub bar_abs: usize,
    pub op: RemoteOp,
    /// The x index of the cluster's first block (clusters run along x).
    pub cluster_base: i64,
    /// Cluster barriers the sender had passed when it sent: the receiver's barrier must have
    /// been initialized before one of them.
    pub gen: u32,
    /// The sending block and operation, for reports.
    pub from: [i64; 3],
    pub pc: u32,
}

#[derive(Clone, Debug)]
pub enum RemoteOp {
    /// `mbarrier.arrive` on the peer's barrier.
    Arrive,
    /// A multicast TMA copy landing in the peer's shared memory on its barrier.
    Tma { copy: TmaCopy, bytes: i64 },
}

impl RemoteOp {
    /// What the sender did to the barrier, for reports ("block … arrived on a barrier …").
    pub fn verb(&self) -> &'static str {
        match self {
            RemoteOp::Arrive => "arrived on",
            RemoteOp::Tma { .. } => "multicast a TMA copy onto",
        }
    }
}

/// One mbarrier's state.
#[derive(Clone, Debug)]
pub struct Mbar {
    /// Where it lives (for reports).
    pub buf: u32,
    pub off: usize,
    pub count: u32,
    /// Arrivals the current phase still needs.
    pub pending: u32,
    /// Transaction bytes announced (`expect_tx`) for the current phase.
    pub announced: i64,
    /// Bytes of the TMA copies issued on the current phase.
    pub delivered: i64,
    /// Phases completed so far (the current phase's parity is `phase % 2`).
    pub phase: u32,
    /// The current phase's copies, in issue order.
    pub copies: Vec<TmaCopy>,
    /// Whether the last completed phase was plain arrivals (no transaction bytes): a signal
    /// between threads (a consumer warp releasing a pipeline stage to the producer), which
    /// orders the arriving threads' accesses before the waiting thread's later ones.
    pub signalled: bool,
    /// Cluster barriers the block had passed when it initialized this one: another block of
    /// the cluster may signal it only after passing a later one.
    pub init_gen: u32,
    /// For the memory-order check (kernels whose blocks wait for each other): the clocks
    /// the current phase's plain arrivals released, and those of every completed phase,
    /// which a passed wait acquires.
    pub arrived_clock: Vec<u32>,
    pub released_clock: Vec<u32>,
}

/// The block's mbarriers: by absolute shared byte offset, the index of the barrier last
/// initialized there (a re-initialized barrier is a new one, so that what its old phases
/// ordered stays apart from its new ones).
#[derive(Clone, Debug, Default)]
pub struct Mbars {
    pub at: HashMap<usize, u32>,
    pub bars: Vec<Mbar>,
}

impl Mbars {
    pub fn clear(&mut self) {
        self.at.clear();
        self.bars.clear();
    }

    /// Whether a wait for the phase with `parity` of barrier `b` would pass now.
    pub fn passed(&self, b: u32, parity: u32) -> bool {
        self.bars
            .get(b as usize)
            .is_some_and(|m| m.phase % 2 != parity)
    }

    /// TMA copies still in flight (never landed).
    pub fn in_flight(&self) -> u64 {
        self.bars.iter().map(|m| m.copies.len() as u64).sum()
    }
}

/// The hardware swizzle of shared byte address `a` for a `swizzle`-byte mode: the 16-byte chunk
/// index within each `swizzle`-byte row (address bits 4 and up) XOR-ed with the row index
/// modulo `swizzle / 16` (address bits 7 and up).
pub fn swizzle_addr(a: usize, swizzle: u32) -> usize {
    if swizzle < 32 {
        return a;
    }
    let mask = (swizzle as usize / 16) - 1;
    a ^ (((a >> 7) & mask) << 4)
}

impl Interp<'_, '_> {
    fn mbar_err(&self, pc: u32, tid: u32, barrier: String, detail: String) -> SimError {
        SimError::Mbarrier {
            op: self.prog.name(pc as usize).to_string(),
            barrier,
            block: self.mem.block,
            thread: tid,
            span: self.prog.span(pc as usize),
            detail,
        }
    }

    /// `buf[elem]` as a report names a barrier.
    pub fn bar_name(&self, buf: u32, off: usize) -> String {
        let info = self.mem.info(buf);
        format!("`{}`[{}]", info.name, off / info.dtype.bytes().max(1))
    }

    /// The barrier operand: a `u64` element of a shared buffer, 8-byte aligned. Returns its
    /// buffer, byte offset and absolute shared offset.
    fn bar_operand(
        &mut self,
        th: &Thread,
        bar: &MemRef,
        pc: u32,
    ) -> Result<(Loc, usize, usize), SimError> {
        let loc = self.addr(th, bar, pc)?;
        let info = self.mem.info(loc.buf);
        if info.scope != Scope::Shared || info.dtype.bytes() != 8 {
            return Err(SimError::InvalidIr(format!(
                "{} at {}: the barrier is {} {} `{}`, not a 64-bit shared buffer",
                self.prog.name(pc as usize),
                self.prog.span(pc as usize),
                info.scope,
                info.dtype,
                info.name
            )));
        }
        let off = self.mem.range(loc.buf, loc.elem, 8, th.tid, pc)?;
        let name = self.prog.name(pc as usize);
        self.mem.aligned(loc.buf, off, 8, name, th.tid, pc)?;
        Ok((loc, off, info.base + off))
    }

    /// The initialized barrier an operation uses.
    fn live_bar(
        &mut self,
        th: &Thread,
        bar: &MemRef,
        pc: u32,
    ) -> Result<(u32, Loc, usize), SimError> {
        let (loc, off, abs) = self.bar_operand(th, bar, pc)?;
        match self.mem.mbars.at.get(&abs) {
            Some(&b) => Ok((b, loc, off)),
            None => Err(self.mbar_err(
                pc,
                th.tid,
                self.bar_name(loc.buf, off),
                "the barrier is not initialized (no mbarrier_init on it has run in this block)"
                    .into(),
            )),
        }
    }

    /// Arrivals, waits and completions are atomic operations on the barrier's word: they do not
    /// race with each other, but do with an initialization no barrier orders them after.
    fn bar_touch(&mut self, th: &Thread, loc: Loc, off: usize, pc: u32) -> Result<(), SimError> {
        self.mem
            .check_write(loc.buf, off, 8, rec(th.tid, Kind::Atomic, pc))
    }

    pub fn mbar_init(
        &mut self,
        th: &mut Thread,
        bar: &MemRef,
        count: u32,
        pc: u32,
    ) -> Result<(), SimError> {
        let (loc, off, abs) = self.bar_operand(th, bar, pc)?;
        let name = self.bar_name(loc.buf, off);
        if count == 0 || count >= 1 << 20 {
            return Err(self.mbar_err(
                pc,
                th.tid,
                name,
                format!("an arrival count of {count} (1 to 2^20 - 1)"),
            ));
        }
        if let Some(&old) = self.mem.mbars.at.get(&abs) {
            let m = &self.mem.mbars.bars[old as usize];
            if !m.copies.is_empty() {
                let detail = format!(
                    "re-initialized while {} TMA copies ({} bytes) are in flight on its phase {}",
                    m.copies.len(),
                    m.delivered,
                    m.phase
                );
                return Err(self.mbar_err(pc, th.tid, name, detail));
            }
        }
        self.mem.write(
            &mut th.local,
            loc.buf,
            off,
            &[0u8; 8],
            rec(th.tid, Kind::Write, pc),
        )?;
        let idx = self.mem.mbars.bars.len() as u32;
        self.mem.mbars.bars.push(Mbar {
            buf: loc.buf,
            off,
            count,
            pending: count,
            announced: 0,
            delivered: 0,
            phase: 0,
            copies: vec![],
            signalled: false,
            init_gen: self.mem.cluster_gen,
            arrived_clock: vec![],
            released_clock: vec![],
        });
        self.mem.mbars.at.insert(abs, idx);
        Ok(())
    }

    pub fn mbar_arrive(
        &mut self,
        th: &mut Thread,
        bar: &MemRef,
        tx: Option<&E>,
        pc: u32,
    ) -> Result<(), SimError> {
        let (b, loc, off) = self.live_bar(th, bar, pc)?;
        self.bar_touch(th, loc, off, pc)?;
        let tx = match tx {
            Some(e) => self.eval(th, e, pc)?.as_i64(),
            None => 0,
        };
        let name = self.bar_name(loc.buf, off);
        if !(0..1 << 20).contains(&tx) {
            return Err(self.mbar_err(
                pc,
                th.tid,
                name,
                format!("expect_tx of {tx} bytes (0 to 2^20 - 1)"),
            ));
        }
        let m = &mut self.mem.mbars.bars[b as usize];
        if m.pending == 0 {
            let detail = format!(
                "more arrivals than its count of {} in phase {} (all arrived; the phase waits for {} more transaction bytes: expect_tx announced {}, the copies delivered {})",
                m.count,
                m.phase,
                m.announced - m.delivered,
                m.announced,
                m.delivered
            );
            return Err(self.mbar_err(pc, th.tid, name, detail));
        }
        m.announced += tx;
        m.pending -= 1;
        if tx == 0 {
            if let Some(o) = self.mem.order.as_mut() {
                let c = o.arrive(th.tid);
                crate::order::join_grown(&mut self.mem.mbars.bars[b as usize].arrived_clock, &c);
            }
        }
        self.mbar_complete(b, th.tid, pc)
    }

    /// Whether `mbarrier_wait` passes now (else the thread blocks, its stash naming the barrier
    /// and parity). A wait that passes sees every phase completed so far.
    pub fn mbar_wait(
        &mut self,
        th: &mut Thread,
        bar: &MemRef,
        parity: &E,
        pc: u32,
    ) -> Result<bool, SimError> {
        let (b, loc, off) = self.live_bar(th, bar, pc)?;
        self.bar_touch(th, loc, off, pc)?;
        let p = self.eval(th, parity, pc)?.as_i64();
        if !(0..=1).contains(&p) {
            let name = self.bar_name(loc.buf, off);
            return Err(self.mbar_err(pc, th.tid, name, format!("parity {p} (0 or 1)")));
        }
        if self.mem.mbars.passed(b, p as u32) {
            let m = &self.mem.mbars.bars[b as usize];
            let phases = m.phase;
            // A signal (plain arrivals) orders what the arriving threads did before it before
            // what this thread does next. The checker's epochs are block-wide, so it counts
            // as a block barrier: it then also orders accesses of threads that took no part
            // (a race between two consumer warps across the producer's wait goes unseen).
            if m.signalled && phases > 0 {
                self.mem.epoch += 1;
                self.mem.global_epoch += 1;
            }
            let epoch = self.mem.epoch;
            self.mem.shadow.tma_acquire(th.tid as u16, b, phases, epoch);
            if let Some(o) = self.mem.order.as_mut() {
                o.acquire_clock(th.tid, &self.mem.mbars.bars[b as usize].released_clock);
            }
            th.stash = crate::exec::Stash::None;
            Ok(true)
        } else {
            th.stash = crate::exec::Stash::Mbar(b, p as u32);
            Ok(false)
        }
    }

    /// Complete barrier `b`'s current phase if its arrivals are all made and its copies
    /// deliver exactly the bytes announced: the copies land, the parity flips. `tid` and `pc`:
    /// the operation that made it complete.
    fn mbar_complete(&mut self, b: u32, tid: u32, pc: u32) -> Result<(), SimError> {
        let m = &self.mem.mbars.bars[b as usize];
        if m.pending > 0 || m.delivered < m.announced {
            return Ok(());
        }
        if m.delivered > m.announced {
            let detail = format!(
                "the TMA copies issued on phase {} deliver {} bytes, but expect_tx announced {} (and all {} arrivals are made)",
                m.phase, m.delivered, m.announced, m.count
            );
            let name = self.bar_name(m.buf, m.off);
            return Err(self.mbar_err(pc, tid, name, detail));
        }
        let m = &mut self.mem.mbars.bars[b as usize];
        m.signalled = m.announced == 0 && m.copies.is_empty();
        let arrived = std::mem::take(&mut m.arrived_clock);
        crate::order::join_grown(&mut m.released_clock, &arrived);
        let copies = std::mem::take(&mut m.copies);
        let phase = m.phase;
        m.phase += 1;
        m.pending = m.count;
        m.announced = 0;
        m.delivered = 0;
        let when = self.mem.when(tid);
        for c in copies {
            let info = self.mem.info(c.buf);
            let who = Rec {
                tid: c.tid as u16,
                kind: Kind::AsyncWrite,
                pc: c.pc,
            };
            for (off, data) in &c.chunks {
                self.mem.check_wgmma_reads(c.buf, *off, 16, who)?;
                self.mem
                    .shadow
                    .tma_land(info.base + off, 16, who, when, b, phase)
                    .map_err(|x| self.mem.conflict(x, c.buf, who))?;
                let at = info.base + off;
                let dst = self.mem.shared.get_mut(at..at + 16).ok_or_else(|| {
                    SimError::InvalidIr("a TMA copy landing outside shared memory".into())
                })?;
                dst.copy_from_slice(data);
            }
        }
        Ok(())
    }

    /// Issue a TMA copy: check its operands, read the box now, swizzle its destination, and
    /// put it in flight on its barrier's current phase.
    pub fn tma_load(
        &mut self,
        th: &mut Thread,
        box_dims: &[u32],
        (swizzle, pitched): (u32, bool),
        (dst, tensor, bar): (&MemRef, &MemRef, &MemRef),
        (coords, mask, width): (&[E], Option<&E>, Option<&E>),
        pc: u32,
    ) -> Result<(), SimError> {
        let width = match width {
            Some(w) => Some(self.eval(th, w, pc)?.as_i64()),
            None => None,
        };
        let (b, bloc, boff) = self.live_bar(th, bar, pc)?;
        let bar_abs = self.mem.info(bloc.buf).base + boff;
        // The blocks of the cluster it lands in (multicast), this one alone otherwise.
        let targets: Vec<u32> = match mask {
            None => vec![self.cluster_rank()],
            Some(m) => {
                let m = self.eval(th, m, pc)?.as_i64();
                let size = self.prog.cluster.unwrap_or(1);
                if m <= 0 || m >= 1 << size {
                    return Err(self.mbar_err(
                        pc,
                        th.tid,
                        self.bar_name(bloc.buf, boff),
                        format!(
                            "a multicast mask of {m:#x} in a cluster of {size} block(s): bits 0 to {} only, at least one",
                            size - 1
                        ),
                    ));
                }
                (0..size).filter(|r| m >> r & 1 == 1).collect()
            }
        };
        let mut bx = self.tma_box(
            th,
            box_dims,
            (swizzle, pitched),
            (dst, tensor),
            coords,
            "destination",
            pc,
        )?;
        bx.width = width;
        let (d, t, doff, total) = (bx.shared, bx.tensor, bx.soff, bx.total);
        let di = self.mem.info(d.buf);
        // Read the box now (out-of-range elements are zeros), row by row.
        let mut data = vec![0u8; total];
        for row in self.box_rows(&bx, box_dims) {
            let out = row.row * bx.row_bytes + row.in_row;
            let mut done = 0;
            while done < row.len {
                let n = (row.len - done).min(16);
                let bytes = self.mem.read(
                    &th.local,
                    t.buf,
                    row.global + done,
                    n,
                    rec(th.tid, Kind::IntrinsicRead, pc),
                )?;
                self.mem
                    .order_async_read(t.buf, row.global + done, n, th.tid, pc)?;
                data[out + done..out + done + n].copy_from_slice(&bytes[..n]);
                done += n;
            }
        }
        // Its 16-byte chunks, at their swizzled places; in flight from now on.
        let base = di.base;
        let mut chunks = Vec::with_capacity(total / 16);
        for (j, chunk) in data.chunks_exact(16).enumerate() {
            let a = swizzle_addr(base + doff + 16 * j, swizzle);
            let off = a - base;
            if off + 16 > di.bytes() {
                let esz = di.dtype.bytes().max(1);
                return Err(self.mem.oob(
                    d.buf,
                    vec![(off / esz) as i64],
                    vec![di.numel],
                    th.tid,
                    pc,
                ));
            }
            let mut bytes = [0u8; 16];
            bytes.copy_from_slice(chunk);
            chunks.push((off, bytes));
        }
        self.stats.tma_copies += 1;
        let copy = TmaCopy {
            buf: d.buf,
            chunks,
            tid: th.tid,
            pc,
        };
        let own = self.cluster_rank();
        for to in targets {
            if to == own {
                self.deliver_tma(b, copy.clone(), total as i64)?;
            } else {
                self.mem.outbox.push(Remote {
                    to,
                    bar_abs,
                    op: RemoteOp::Tma {
                        copy: copy.clone(),
                        bytes: total as i64,
                    },
                    cluster_base: self.mem.block[0] - i64::from(own),
                    gen: self.mem.cluster_gen,
                    from: self.mem.block,
                    pc,
                });
            }
        }
        Ok(())
    }

    /// Put a TMA copy in flight on this block's barrier `b`: its destination bytes are in
    /// flight from now until the phase completes.
    fn deliver_tma(&mut self, b: u32, copy: TmaCopy, bytes: i64) -> Result<(), SimError> {
        let base = self.mem.info(copy.buf).base;
        let who = rec(copy.tid, Kind::AsyncWrite, copy.pc);
        let when = self.mem.when(copy.tid);
        for (off, _) in &copy.chunks {
            self.mem.check_wgmma_reads(copy.buf, *off, 16, who)?;
            self.mem
                .shadow
                .async_issue(base + off, 16, who, when)
                .map_err(|c| self.mem.conflict(c, copy.buf, who))?;
        }
        let (tid, pc) = (copy.tid, copy.pc);
        let m = &mut self.mem.mbars.bars[b as usize];
        m.delivered += bytes;
        m.copies.push(copy);
        self.mbar_complete(b, tid, pc)
    }

    /// This block's rank in its cluster (0 without clusters): clusters run along x.
    pub fn cluster_rank(&self) -> u32 {
        match self.prog.cluster {
            Some(size) if size > 1 => (self.mem.block[0].rem_euclid(size as i64)) as u32,
            _ => 0,
        }
    }

    /// `mbarrier.arrive.release.cluster` on the barrier at `bar`'s offset in the block of
    /// cluster rank `rank`: this block's own at once, another's when it next runs.
    pub fn mbar_arrive_cluster(
        &mut self,
        th: &mut Thread,
        bar: &MemRef,
        rank: &E,
        pc: u32,
    ) -> Result<(), SimError> {
        let r = self.eval(th, rank, pc)?.as_i64();
        let size = self.prog.cluster.unwrap_or(1);
        if !(0..size as i64).contains(&r) {
            let (loc, off, _) = self.bar_operand(th, bar, pc)?;
            return Err(self.mbar_err(
                pc,
                th.tid,
                self.bar_name(loc.buf, off),
                format!("an arrival for cluster rank {r} in a cluster of {size} block(s)"),
            ));
        }
        if r as u32 == self.cluster_rank() {
            return self.mbar_arrive(th, bar, None, pc);
        }
        let (_, _, abs) = self.bar_operand(th, bar, pc)?;
        self.mem.outbox.push(Remote {
            to: r as u32,
            bar_abs: abs,
            op: RemoteOp::Arrive,
            cluster_base: self.mem.block[0] - i64::from(self.cluster_rank()),
            gen: self.mem.cluster_gen,
            from: self.mem.block,
            pc,
        });
        Ok(())
    }

    /// Apply what another block of the cluster did to this one (the scheduler calls it with
    /// this block swapped in).
    pub fn apply_remote(&mut self, r: Remote) -> Result<(), SimError> {
        let Some(&b) = self.mem.mbars.at.get(&r.bar_abs) else {
            return Err(SimError::Cluster(format!(
                "block {:?} {} the barrier at shared byte {} of block {:?} (at {}) before that block initialized it: sync the cluster (ClusterSync) after initializing the barriers and before any block signals a peer's",
                r.from,
                r.op.verb(),
                r.bar_abs,
                self.mem.block,
                self.prog.span(r.pc as usize)
            )));
        };
        let init_gen = self.mem.mbars.bars[b as usize].init_gen;
        if r.gen <= init_gen {
            return Err(SimError::Cluster(format!(
                "block {:?} {} a barrier of block {:?} (at {}) with no cluster barrier between that block's initialization of it and the signal: sync the cluster (ClusterSync) after initializing the barriers and before any block signals a peer's",
                r.from,
                r.op.verb(),
                self.mem.block,
                self.prog.span(r.pc as usize)
            )));
        }
        match r.op {
            RemoteOp::Arrive => {
                let m = &self.mem.mbars.bars[b as usize];
                if m.pending == 0 {
                    let detail = format!(
                        "more arrivals than its count of {} in phase {} (one from block {:?} of the cluster)",
                        m.count, m.phase, r.from
                    );
                    let name = self.bar_name(m.buf, m.off);
                    return Err(self.mbar_err(r.pc, 0, name, detail));
                }
                self.mem.mbars.bars[b as usize].pending -= 1;
                self.mbar_complete(b, 0, r.pc)
            }
            RemoteOp::Tma { copy, bytes } => self.deliver_tma(b, copy, bytes),
        }
    }

    /// Why the phase a thread waits for cannot complete (for the deadlock report).
    pub fn mbar_deadlock(&self, b: u32, parity: u32, tid: u32, pc: u32, waiting: u32) -> SimError {
        let m = &self.mem.mbars.bars[b as usize];
        let mut why = vec![];
        if m.pending > 0 {
            why.push(format!(
                "{} of its {} arrival(s) for phase {} never came",
                m.pending, m.count, m.phase
            ));
        }
        if m.delivered < m.announced {
            why.push(format!(
                "expect_tx announced {} bytes but the copies delivered {}",
                m.announced, m.delivered
            ));
        } else if m.delivered > m.announced {
            why.push(format!(
                "TMA copies of {} bytes are in flight on it, but expect_tx announced only {} (a missing mbarrier_arrive_expect_tx?)",
                m.delivered, m.announced
            ));
        }
        if m.pending == m.count && m.announced == 0 && m.delivered == 0 {
            why.push(format!(
                "nothing arrived on it since its phase {} began; {} phase(s) have completed, so a wait for parity {parity} waits for phase {} (a wrong parity, or a missing arrive?)",
                m.phase, m.phase, m.phase
            ));
        }
        SimError::MbarrierDeadlock {
            barrier: self.bar_name(m.buf, m.off),
            parity,
            block: self.mem.block,
            thread: tid,
            waiting,
            span: self.prog.span(pc as usize),
            state: Box::new(MbarrierState {
                phase: m.phase,
                pending: m.pending,
                count: m.count,
                tx_expected: m.announced,
                tx_delivered: m.delivered,
                detail: why.join("; "),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::swizzle_addr;

    #[test]
    fn swizzle_is_the_hardware_address_xor() {
        // 128B: bits 4-6 ^= bits 7-9; row 1 of a 1024-aligned tile swaps chunks 0 and 1.
        assert_eq!(swizzle_addr(128, 128), 128 + 16);
        assert_eq!(
            swizzle_addr(1024 + 7 * 128 + 16, 128),
            1024 + 7 * 128 + 6 * 16
        );
        // 64B: bits 4-5 ^= bits 7-8: row 5 → XOR 1.
        assert_eq!(swizzle_addr(5 * 128, 64), 5 * 128 + 16);
        // 32B: bit 4 ^= bit 7.
        assert_eq!(swizzle_addr(128 + 16, 32), 128);
        assert_eq!(swizzle_addr(3 * 128 + 48, 0), 3 * 128 + 48);
        for a in (0..4096).step_by(16) {
            for s in [32, 64, 128] {
                let b = swizzle_addr(a, s);
                assert_eq!(swizzle_addr(b, s), a, "an involution");
                assert_eq!(b / s as usize, a / s as usize, "within one swizzle row");
            }
        }
    }
}
