//! The shared-memory checker: races, reads of uninitialized bytes, and reads of bytes an
//! in-flight `cp.async` will overwrite.
//!
//! Every shared byte has a shadow cell. Two accesses are ordered when a block barrier lies
//! between them (their block epochs differ), when one thread made both, or when both threads are
//! lanes of one warp (32 threads, or an AMD wave's 64: [`Shadow::warp_size`]) and a `sync_warp`
//! lies between them (their warp epochs differ). The
//! simulator runs threads one at a time between synchronization points, so an earlier access in
//! simulation order is never in a later epoch than a later one, and it is enough to remember,
//! per byte and epoch, the last write and a summary of the reads:
//!
//! * which warps read (a bit each: a reader in another warp than a writer is always a race),
//! * for reads by one warp only, the latest warp epoch of a read and whether a thread other than
//!   one single reader read in it (a writer in that warp conflicts exactly with those),
//! * two reader records (threads that differ) so a report can name a reader other than the
//!   writer.
//!
//! Atomics are writes that do not conflict with each other.

use std::collections::HashMap;

use crate::error::AccessKind;

/// Who touched a byte: a thread, the instruction (its pc), and how.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Rec {
    pub tid: u16,
    pub kind: Kind,
    pub pc: u32,
}

/// An access's operation class (what a report calls it and how it orders).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    /// A load inside an expression.
    Load,
    /// The write of a store, vector copy or ldmatrix-free intrinsic (named by its site).
    Write,
    /// The read half of an intrinsic (vector copy, ldmatrix), named by its site.
    IntrinsicRead,
    Atomic,
    AsyncWrite,
}

impl Kind {
    pub fn access_kind(self) -> AccessKind {
        match self {
            Kind::Load | Kind::IntrinsicRead => AccessKind::Read,
            Kind::Write => AccessKind::Write,
            Kind::Atomic => AccessKind::Atomic,
            Kind::AsyncWrite => AccessKind::AsyncWrite,
        }
    }
}

const NOBODY: u16 = u16::MAX;
const MANY: u16 = u16::MAX - 1;

impl Rec {
    const NONE: Rec = Rec {
        tid: NOBODY,
        kind: Kind::Load,
        pc: 0,
    };
}

#[derive(Clone, Copy)]
struct Cell {
    w_epoch: u32,
    w_wep: u32,
    w: Rec,
    r_epoch: u32,
    r_warps: u32,
    r_max_wep: u32,
    r_at_max: u16,
    r_first: Rec,
    r_other: Rec,
    init: bool,
    /// How many `fence.proxy.async` the writer had executed when it wrote (see
    /// `Shadow::proxy_visible`).
    w_fences: u32,
}

impl Default for Cell {
    fn default() -> Cell {
        Cell {
            w_epoch: 0,
            w_wep: 0,
            w: Rec::NONE,
            r_epoch: 0,
            r_warps: 0,
            r_max_wep: 0,
            r_at_max: NOBODY,
            r_first: Rec::NONE,
            r_other: Rec::NONE,
            init: false,
            w_fences: 0,
        }
    }
}

/// What the checker found wrong with an access (the caller adds names and spans).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Conflict {
    Race {
        byte: usize,
        first: Rec,
    },
    Uninit {
        byte: usize,
        who: Rec,
    },
    Stale {
        byte: usize,
        issuer: Rec,
    },
    /// An async-proxy read (wgmma) of a byte whose writer did not fence the async proxy
    /// (`fence.proxy.async`) after writing it and before the barrier that orders the two.
    NoProxyFence {
        byte: usize,
        writer: Rec,
    },
}

/// The synchronization state an access happens in.
#[derive(Clone, Copy, Debug)]
pub struct When {
    /// Block barriers passed (what orders shared memory).
    pub epoch: u32,
    /// `sync_threads` passed (what orders global memory: an AMD LDS barrier does not).
    pub global_epoch: u32,
    pub warp_epoch: u32,
    /// `fence.proxy.async`s the accessing thread has executed.
    pub fences: u32,
}

/// Shadow state for one block's shared memory.
pub struct Shadow {
    cells: Vec<Cell>,
    pending: Vec<u16>,
    pending_by: Vec<Rec>,
    races: bool,
    uninit: bool,
    /// log2 of the threads per warp.
    warp_shift: u32,
    /// The first read of a byte nothing had written. Reported at the next barrier (or the end
    /// of the block) unless a write by another thread in the same epoch turns out to race
    /// with it first: then the race is the better explanation.
    deferred: Option<(usize, Rec)>,
    /// Per shared byte whose last write was a TMA copy landing: the mbarrier (index + 1) and
    /// the phase the copy completed; `(0, 0)` otherwise. Empty until a TMA copy lands. Such a
    /// write is ordered before an access by a thread that saw the phase complete
    /// (`mbarrier_wait`), or that passed a block barrier after some thread saw it.
    tma_tag: Vec<(u32, u32)>,
    /// Per mbarrier, per thread: how many of its phases the thread has seen complete.
    tma_seen: Vec<Vec<u32>>,
    /// Per mbarrier, per phase: the block epoch in which a thread first saw it complete.
    tma_acq: Vec<Vec<u32>>,
}

/// log2 of a warp size (32 or 64; anything else is taken as 32).
fn warp_shift(ws: u32) -> u32 {
    if ws.is_power_of_two() && ws > 1 {
        ws.trailing_zeros()
    } else {
        5
    }
}

/// The warp of thread `tid` with warps of `1 << shift` threads.
fn warp(tid: u16, shift: u32) -> u32 {
    (tid as u32) >> shift
}

impl Shadow {
    pub fn new(bytes: usize, races: bool, uninit: bool) -> Shadow {
        let on = races || uninit;
        Shadow {
            cells: if on {
                vec![Cell::default(); bytes]
            } else {
                vec![]
            },
            pending: if races { vec![0; bytes] } else { vec![] },
            pending_by: if races {
                vec![Rec::NONE; bytes]
            } else {
                vec![]
            },
            races,
            uninit,
            warp_shift: 5,
            deferred: None,
            tma_tag: vec![],
            tma_seen: vec![],
            tma_acq: vec![],
        }
    }

    /// Thread `tid` saw the first `phases` phases of mbarrier `bar` complete (its
    /// `mbarrier_wait` passed) in block epoch `epoch`: what those phases' TMA copies wrote is
    /// ordered before its later accesses, and before every thread's accesses after the next
    /// block barrier.
    pub fn tma_acquire(&mut self, tid: u16, bar: u32, phases: u32, epoch: u32) {
        if !self.races {
            return;
        }
        let b = bar as usize;
        if self.tma_seen.len() <= b {
            self.tma_seen.resize(b + 1, vec![]);
            self.tma_acq.resize(b + 1, vec![]);
        }
        let seen = &mut self.tma_seen[b];
        if seen.len() <= tid as usize {
            seen.resize(tid as usize + 1, 0);
        }
        seen[tid as usize] = seen[tid as usize].max(phases);
        let acq = &mut self.tma_acq[b];
        while (acq.len() as u32) < phases {
            acq.push(epoch);
        }
    }

    /// Whether a TMA landing tagged `tag` is ordered before an access by `tid` in `epoch`.
    fn tma_ordered(&self, tag: (u32, u32), tid: u16, epoch: u32) -> bool {
        let (b, phase) = ((tag.0 - 1) as usize, tag.1);
        let seen = self
            .tma_seen
            .get(b)
            .and_then(|v| v.get(tid as usize))
            .copied()
            .unwrap_or(0);
        seen > phase
            || self
                .tma_acq
                .get(b)
                .and_then(|v| v.get(phase as usize))
                .is_some_and(|&e| e < epoch)
    }

    /// For a byte a TMA copy wrote last: whether that write is ordered before an access by
    /// `tid` in `epoch`. `None` for other bytes.
    fn tma_order(&self, byte: usize, tid: u16, epoch: u32) -> Option<bool> {
        match self.tma_tag.get(byte) {
            Some(&tag) if tag.0 != 0 => Some(self.tma_ordered(tag, tid, epoch)),
            _ => None,
        }
    }

    /// The same checker for warps (waves) of `ws` threads (32 unless set).
    pub fn warp_size(mut self, ws: u32) -> Shadow {
        self.warp_shift = warp_shift(ws);
        self
    }

    /// The uninitialized read waiting to be reported, if any (see `deferred`).
    pub fn take_uninit(&mut self) -> Option<Conflict> {
        self.deferred
            .take()
            .map(|(byte, who)| Conflict::Uninit { byte, who })
    }

    pub fn enabled(&self) -> bool {
        self.races || self.uninit
    }

    /// Is this earlier write/read by `a` (in barrier epoch `a_epoch`, warp epoch `a_wep`)
    /// ordered before an access by `b` in barrier epoch `epoch`, warp epoch `wep`?
    fn ordered(a: Rec, a_epoch: u32, a_wep: u32, b: u16, epoch: u32, wep: u32, shift: u32) -> bool {
        a_epoch != epoch || a.tid == b || (warp(a.tid, shift) == warp(b, shift) && a_wep < wep)
    }

    /// A read of `len` bytes at `start` (absolute shared offsets).
    pub fn read(&mut self, start: usize, len: usize, who: Rec, now: When) -> Result<(), Conflict> {
        if !self.enabled() {
            return Ok(());
        }
        let shift = self.warp_shift;
        let w = 1u32 << (warp(who.tid, shift) % 32);
        for byte in start..start + len {
            if self.races && self.pending.get(byte).is_some_and(|&p| p > 0) {
                return Err(Conflict::Stale {
                    byte,
                    issuer: self.pending_by[byte],
                });
            }
            let tma = self.tma_order(byte, who.tid, now.epoch);
            let Some(c) = self.cells.get_mut(byte) else {
                continue;
            };
            if self.uninit && !c.init && self.deferred.is_none() {
                self.deferred = Some((byte, who));
            }
            if !self.races {
                continue;
            }
            // What a TMA copy landed is visible only to threads that saw its phase complete:
            // to any other reader the copy may still be in flight.
            if tma == Some(false) {
                return Err(Conflict::Stale { byte, issuer: c.w });
            }
            if c.w.tid != NOBODY
                && tma.is_none()
                && !Self::ordered(
                    c.w,
                    c.w_epoch,
                    c.w_wep,
                    who.tid,
                    now.epoch,
                    now.warp_epoch,
                    shift,
                )
            {
                return Err(Conflict::Race { byte, first: c.w });
            }
            if c.r_epoch != now.epoch {
                c.r_epoch = now.epoch;
                c.r_warps = w;
                c.r_max_wep = now.warp_epoch;
                c.r_at_max = who.tid;
                c.r_first = who;
                c.r_other = Rec::NONE;
            } else {
                c.r_warps |= w;
                if now.warp_epoch > c.r_max_wep {
                    c.r_max_wep = now.warp_epoch;
                    c.r_at_max = who.tid;
                } else if now.warp_epoch == c.r_max_wep && c.r_at_max != who.tid {
                    c.r_at_max = MANY;
                }
                if who.tid != c.r_first.tid {
                    c.r_other = who;
                }
            }
        }
        Ok(())
    }

    /// Check a write (plain, atomic or async) against earlier accesses of this epoch; record it
    /// when `record`.
    fn check_write(
        &mut self,
        byte: usize,
        who: Rec,
        now: When,
        record: bool,
    ) -> Result<(), Conflict> {
        let races = self.races;
        let shift = self.warp_shift;
        let tma = self.tma_order(byte, who.tid, now.epoch);
        if record && tma.is_some() {
            self.tma_tag[byte] = (0, 0);
        }
        let Some(c) = self.cells.get_mut(byte) else {
            return Ok(());
        };
        if races {
            if tma == Some(false) {
                return Err(Conflict::Race { byte, first: c.w });
            }
            let both_atomic = who.kind == Kind::Atomic && c.w.kind == Kind::Atomic;
            if c.w.tid != NOBODY
                && !both_atomic
                && tma.is_none()
                && !Self::ordered(
                    c.w,
                    c.w_epoch,
                    c.w_wep,
                    who.tid,
                    now.epoch,
                    now.warp_epoch,
                    shift,
                )
            {
                return Err(Conflict::Race { byte, first: c.w });
            }
            if c.r_epoch == now.epoch {
                let mine = 1u32 << (warp(who.tid, shift) % 32);
                let other_warp = c.r_warps & !mine != 0;
                let same_warp_now =
                    c.r_max_wep >= now.warp_epoch && c.r_at_max != who.tid && c.r_at_max != NOBODY;
                if other_warp || same_warp_now {
                    let first = if c.r_first.tid != who.tid {
                        c.r_first
                    } else {
                        c.r_other
                    };
                    if first.tid != NOBODY {
                        return Err(Conflict::Race { byte, first });
                    }
                }
            }
        }
        if record {
            c.w_epoch = now.epoch;
            c.w_wep = now.warp_epoch;
            c.w = who;
            c.init = true;
            c.w_fences = now.fences;
        }
        Ok(())
    }

    /// A write (plain or atomic) of `len` bytes at `start`.
    pub fn write(&mut self, start: usize, len: usize, who: Rec, now: When) -> Result<(), Conflict> {
        if !self.enabled() {
            return Ok(());
        }
        for byte in start..start + len {
            if self.races && self.pending.get(byte).is_some_and(|&p| p > 0) {
                return Err(Conflict::Race {
                    byte,
                    first: self.pending_by[byte],
                });
            }
            if self.uninit && who.kind == Kind::Atomic {
                if let Some(c) = self.cells.get(byte) {
                    if !c.init {
                        return Err(Conflict::Uninit { byte, who });
                    }
                }
            }
            self.check_write(byte, who, now, true)?;
        }
        Ok(())
    }

    /// An async-proxy read (wgmma) of `len` bytes at `start` in block epoch `epoch`: the last
    /// writer of each byte must have executed a `fence.proxy.async` after its write, in an
    /// earlier epoch (that is, before a barrier that orders it with this read).
    /// `nth_fence(tid, n)` is the epoch of thread `tid`'s fence number `n` (from 0), if it made
    /// that many.
    pub fn proxy_visible(
        &self,
        start: usize,
        len: usize,
        epoch: u32,
        nth_fence: &dyn Fn(u16, u32) -> Option<u32>,
    ) -> Result<(), Conflict> {
        if !self.races {
            return Ok(());
        }
        for byte in start..start + len {
            let Some(c) = self.cells.get(byte) else {
                continue;
            };
            // TMA copies write through the async proxy themselves.
            if c.w.tid == NOBODY
                || c.w.tid == MANY
                || self.tma_tag.get(byte).is_some_and(|t| t.0 != 0)
            {
                continue;
            }
            match nth_fence(c.w.tid, c.w_fences) {
                Some(e) if e < epoch => {}
                _ => return Err(Conflict::NoProxyFence { byte, writer: c.w }),
            }
        }
        Ok(())
    }

    /// The issue of a `cp.async` into `len` bytes at `start`: it may land any time until its
    /// wait, so it conflicts with every unordered access of this epoch and every later access
    /// until it lands.
    pub fn async_issue(
        &mut self,
        start: usize,
        len: usize,
        who: Rec,
        now: When,
    ) -> Result<(), Conflict> {
        if !self.races {
            return Ok(());
        }
        for byte in start..start + len {
            if self.pending.get(byte).is_some_and(|&p| p > 0) {
                return Err(Conflict::Race {
                    byte,
                    first: self.pending_by[byte],
                });
            }
            self.check_write(byte, who, now, false)?;
        }
        for byte in start..start + len {
            if let Some(p) = self.pending.get_mut(byte) {
                *p += 1;
                self.pending_by[byte] = who;
            }
        }
        Ok(())
    }

    /// A `cp.async` lands (at its issuer's wait).
    pub fn async_land(
        &mut self,
        start: usize,
        len: usize,
        who: Rec,
        now: When,
    ) -> Result<(), Conflict> {
        if !self.enabled() {
            return Ok(());
        }
        for byte in start..start + len {
            if let Some(p) = self.pending.get_mut(byte) {
                *p = p.saturating_sub(1);
            }
            self.check_write(byte, who, now, true)?;
        }
        Ok(())
    }
}

impl Shadow {
    /// A TMA copy's `len` bytes at `start` land (its mbarrier phase `phase` completed): a write
    /// by the issuer `who`, ordered before the accesses of threads that see the phase complete.
    pub fn tma_land(
        &mut self,
        start: usize,
        len: usize,
        who: Rec,
        now: When,
        bar: u32,
        phase: u32,
    ) -> Result<(), Conflict> {
        if !self.enabled() {
            return Ok(());
        }
        for byte in start..start + len {
            if let Some(p) = self.pending.get_mut(byte) {
                *p = p.saturating_sub(1);
            }
            self.check_write(byte, who, now, true)?;
        }
        if self.races {
            if self.tma_tag.is_empty() {
                self.tma_tag = vec![(0, 0); self.cells.len()];
            }
            for t in self.tma_tag.iter_mut().skip(start).take(len) {
                *t = (bar + 1, phase);
            }
        }
        Ok(())
    }
}

/// Global-memory writes of the current block, for a lighter check than shared memory gets:
/// a write or read of a byte another thread of the block wrote, unordered with that write, is a
/// race (two threads storing one output element: a wrong thread index). Only `sync_threads`
/// (the global epoch) and `sync_warp` order global accesses; an AMD LDS barrier does not.
/// Reads are not recorded (most global bytes are inputs nobody writes), so a read that precedes
/// the racing write in simulation order goes unreported. Blocks run one at a time; races across
/// blocks are not looked for.
#[derive(Default)]
pub struct GlobalWrites {
    on: bool,
    /// log2 of the threads per warp.
    warp_shift: u32,
    map: HashMap<(usize, usize), (u32, u32, Rec)>,
}

impl GlobalWrites {
    pub fn new(on: bool) -> GlobalWrites {
        GlobalWrites {
            on,
            warp_shift: 5,
            map: HashMap::new(),
        }
    }

    /// The same checker for warps (waves) of `ws` threads (32 unless set).
    pub fn warp_size(mut self, ws: u32) -> GlobalWrites {
        self.warp_shift = warp_shift(ws);
        self
    }

    /// Forget the previous block's writes.
    pub fn clear(&mut self) {
        self.map.clear();
    }

    fn check(&self, tensor: usize, byte: usize, who: Rec, now: When) -> Result<(), Conflict> {
        if let Some(&(epoch, wep, w)) = self.map.get(&(tensor, byte)) {
            let both_atomic = who.kind == Kind::Atomic && w.kind == Kind::Atomic;
            if !both_atomic
                && !Shadow::ordered(
                    w,
                    epoch,
                    wep,
                    who.tid,
                    now.global_epoch,
                    now.warp_epoch,
                    self.warp_shift,
                )
            {
                return Err(Conflict::Race { byte, first: w });
            }
        }
        Ok(())
    }

    pub fn read(
        &self,
        tensor: usize,
        start: usize,
        len: usize,
        who: Rec,
        now: When,
    ) -> Result<(), Conflict> {
        if !self.on || self.map.is_empty() {
            return Ok(());
        }
        (start..start + len).try_for_each(|b| self.check(tensor, b, who, now))
    }

    pub fn write(
        &mut self,
        tensor: usize,
        start: usize,
        len: usize,
        who: Rec,
        now: When,
    ) -> Result<(), Conflict> {
        if !self.on {
            return Ok(());
        }
        for b in start..start + len {
            self.check(tensor, b, who, now)?;
            self.map
                .insert((tensor, b), (now.global_epoch, now.warp_epoch, who));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(tid: u16, kind: Kind) -> Rec {
        Rec { tid, kind, pc: 0 }
    }
    const E1: When = When {
        epoch: 1,
        global_epoch: 1,
        warp_epoch: 0,
        fences: 0,
    };
    const E2: When = When {
        epoch: 2,
        global_epoch: 2,
        warp_epoch: 0,
        fences: 0,
    };

    #[test]
    fn write_then_read_by_another_thread_races_until_a_barrier() {
        let mut s = Shadow::new(8, true, true);
        s.write(0, 4, rec(0, Kind::Write), E1).unwrap();
        assert!(matches!(
            s.read(0, 4, rec(1, Kind::Load), E1),
            Err(Conflict::Race { byte: 0, .. })
        ));
        let mut s = Shadow::new(8, true, true);
        s.write(0, 4, rec(0, Kind::Write), E1).unwrap();
        s.read(0, 4, rec(0, Kind::Load), E1).unwrap();
        s.read(0, 4, rec(1, Kind::Load), E2).unwrap();
        s.read(0, 4, rec(40, Kind::Load), E2).unwrap();
    }

    #[test]
    fn read_then_write_by_another_thread_races() {
        let mut s = Shadow::new(8, true, true);
        s.write(0, 8, rec(0, Kind::Write), E1).unwrap();
        s.read(0, 4, rec(1, Kind::Load), E2).unwrap();
        s.read(0, 4, rec(2, Kind::Load), E2).unwrap();
        let r = s.write(0, 4, rec(2, Kind::Write), E2);
        assert_eq!(
            r,
            Err(Conflict::Race {
                byte: 0,
                first: rec(1, Kind::Load)
            })
        );
        // Reading and then writing one's own bytes is fine.
        s.read(4, 4, rec(3, Kind::Load), E2).unwrap();
        s.write(4, 4, rec(3, Kind::Write), E2).unwrap();
    }

    #[test]
    fn sync_warp_orders_lanes_of_one_warp_only() {
        let w0 = When {
            warp_epoch: 0,
            ..E1
        };
        let w1 = When {
            warp_epoch: 1,
            ..E1
        };
        let mut s = Shadow::new(8, true, true);
        s.write(0, 4, rec(0, Kind::Write), w0).unwrap();
        s.read(0, 4, rec(5, Kind::Load), w1).unwrap();
        // Lane 5 reads at warp epoch 1; lane 0 writes again after another sync_warp: fine.
        let w2 = When {
            warp_epoch: 2,
            ..E1
        };
        s.write(0, 4, rec(0, Kind::Write), w2).unwrap();
        // But thread 33 (another warp) is not ordered by warp 0's sync_warp.
        assert!(s.read(0, 4, rec(33, Kind::Load), w2).is_err());
    }

    #[test]
    fn a_write_after_an_uninitialized_read_by_another_thread_is_a_race() {
        let mut s = Shadow::new(4, true, true);
        s.read(0, 4, rec(1, Kind::Load), E1).unwrap();
        assert!(matches!(
            s.write(0, 4, rec(32, Kind::Write), E1),
            Err(Conflict::Race { byte: 0, first }) if first.tid == 1
        ));
    }

    #[test]
    fn global_writes_by_two_threads_race() {
        let mut g = GlobalWrites::new(true);
        g.write(0, 0, 4, rec(0, Kind::Write), E1).unwrap();
        g.read(0, 0, 4, rec(0, Kind::Load), E1).unwrap();
        assert!(g.read(0, 0, 4, rec(1, Kind::Load), E1).is_err());
        g.read(0, 0, 4, rec(1, Kind::Load), E2).unwrap();
        g.read(1, 0, 4, rec(1, Kind::Load), E1).unwrap();
        assert!(g.write(0, 2, 4, rec(3, Kind::Write), E1).is_err());
        g.write(0, 8, 4, rec(3, Kind::Atomic), E1).unwrap();
        g.write(0, 8, 4, rec(4, Kind::Atomic), E1).unwrap();
        g.clear();
        g.write(0, 0, 4, rec(5, Kind::Write), E1).unwrap();
    }

    #[test]
    fn an_lds_barrier_orders_shared_but_not_global_memory() {
        // After an LDS barrier the block epoch has moved on, the global one has not.
        let lds = When { epoch: 2, ..E1 };
        let mut s = Shadow::new(4, true, true);
        s.write(0, 4, rec(0, Kind::Write), E1).unwrap();
        s.read(0, 4, rec(100, Kind::Load), lds).unwrap();
        let mut g = GlobalWrites::new(true);
        g.write(0, 0, 4, rec(0, Kind::Write), E1).unwrap();
        assert!(matches!(
            g.read(0, 0, 4, rec(100, Kind::Load), lds),
            Err(Conflict::Race { byte: 0, first }) if first.tid == 0
        ));
        g.read(0, 0, 4, rec(100, Kind::Load), E2).unwrap();
    }

    #[test]
    fn sync_warp_orders_the_lanes_of_a_64_lane_wave() {
        let w1 = When {
            warp_epoch: 1,
            ..E1
        };
        let mut s = Shadow::new(8, true, true).warp_size(64);
        s.write(0, 4, rec(0, Kind::Write), E1).unwrap();
        // Thread 40 is in wave 0 with thread 0 (it would be in another 32-lane warp).
        s.read(0, 4, rec(40, Kind::Load), w1).unwrap();
        assert!(s.read(0, 4, rec(64, Kind::Load), w1).is_err());
        let mut s = Shadow::new(8, true, true);
        s.write(0, 4, rec(0, Kind::Write), E1).unwrap();
        assert!(s.read(0, 4, rec(40, Kind::Load), w1).is_err());
    }

    #[test]
    fn atomics_do_not_race_with_each_other() {
        let mut s = Shadow::new(4, true, true);
        s.write(0, 4, rec(0, Kind::Write), E1).unwrap();
        s.write(0, 4, rec(1, Kind::Atomic), E2).unwrap();
        s.write(0, 4, rec(2, Kind::Atomic), E2).unwrap();
        assert!(s.read(0, 4, rec(3, Kind::Load), E2).is_err());
    }

    #[test]
    fn uninitialized_and_in_flight_bytes() {
        let mut s = Shadow::new(16, true, true);
        s.read(2, 1, rec(0, Kind::Load), E1).unwrap();
        assert_eq!(
            s.take_uninit(),
            Some(Conflict::Uninit {
                byte: 2,
                who: rec(0, Kind::Load)
            })
        );
        assert_eq!(s.take_uninit(), None);
        s.async_issue(0, 16, rec(0, Kind::AsyncWrite), E1).unwrap();
        assert!(matches!(
            s.read(0, 4, rec(0, Kind::Load), E1),
            Err(Conflict::Stale { byte: 0, .. })
        ));
        s.async_land(0, 16, rec(0, Kind::AsyncWrite), E1).unwrap();
        s.read(0, 4, rec(0, Kind::Load), E1).unwrap();
        s.read(0, 4, rec(7, Kind::Load), E2).unwrap();
    }
}
