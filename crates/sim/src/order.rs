//! The memory order of multi-rank kernels: which plain accesses of global buffers are
//! ordered after the writes they read, by the signals, waits, fences and barriers between.
//!
//! The simulator runs one thread at a time, so every write is at once visible to every later
//! read; a GPU gives no such guarantee across blocks and ranks. A consumer that reads a peer's
//! data without an acquire of the signal released after it (or a producer that signals before
//! the block barrier that orders the other threads' puts) works here by luck and fails there.
//! This module finds those reads with vector clocks (one clock per thread of every block of
//! every rank): a thread's clock says how much of each other thread's history it is ordered
//! after. A plain write records its writer and the writer's own clock; a release (store or
//! reduction with release semantics, or a relaxed one after a fence) publishes the writer's
//! clock on the flag, and an acquire (a load with acquire semantics, a satisfied wait, or a
//! relaxed load followed by a fence) joins it; `sync_threads` joins the clocks of a block.
//! A plain read (or write) of a byte whose last writer is not ordered before it is reported.
//!
//! Every global buffer is tracked: symmetric ones (where ranks communicate) and plain ones
//! (blocks of a multi-rank kernel run at once, so two blocks updating one output element race);
//! flag accesses themselves (memory-model operations) never race. Clocks take `threads²` words, so the check runs only
//! up to [`MAX_AGENTS`] threads in all; beyond that the report says it did not run.

use std::collections::HashMap;

use tl_ir::{MemScope, Span};

/// The largest number of threads (all blocks of all ranks) whose order is checked.
pub const MAX_AGENTS: usize = 4096;

/// Who an agent (thread) is, for reports.
#[derive(Clone, Copy, Debug)]
pub struct AgentInfo {
    pub rank: usize,
    pub block: [i64; 3],
    pub thread: u32,
    /// Which of a run's back-to-back launches (0 for the first).
    pub call: usize,
}

/// The last plain write of a byte: its writer, the writer's clock then, and where.
#[derive(Clone, Copy, Debug)]
struct LastWrite {
    agent: u32,
    clock: u32,
    pc: u32,
}

/// What has been released on a flag: the joined clocks, and the last release's thread and
/// scope.
type Released = (Vec<u32>, Option<(u32, MemScope)>);

/// A byte's last plain write and last plain read.
type ByteHistory = (Option<LastWrite>, Option<LastWrite>);

/// Two accesses of a byte that nothing orders.
#[derive(Clone, Debug)]
pub struct Unordered {
    /// The access being made.
    pub by: AgentInfo,
    /// The earlier access it is not ordered after, and where it was.
    pub other: AgentInfo,
    pub other_pc: u32,
    /// What the two are: a read after a write, a write after a write, a write after a read.
    pub kind: &'static str,
}

pub struct Order {
    pub agents: Vec<AgentInfo>,
    clocks: Vec<Vec<u32>>,
    /// Per agent, its clock at its last fence (what a relaxed store after it releases).
    fenced: Vec<Option<Vec<u32>>>,
    /// Per agent, what relaxed loads since its last fence observed (a fence acquires it).
    pending: Vec<Option<Vec<u32>>>,
    /// Per agent, its clock at its last `fence.proxy.async.global`: the writes its TMA loads
    /// may read.
    proxy_fenced: Vec<Option<Vec<u32>>>,
    /// The clock released on each flag: (rank, buffer, byte offset), and the last release's
    /// thread and scope.
    flags: HashMap<(usize, u32, usize), Released>,
    /// Last plain write and last plain read of global bytes: (rank, buffer) → per byte.
    writes: HashMap<(usize, u32), Vec<ByteHistory>>,
    /// The agent index of thread 0 of the running block.
    pub base: u32,
}

fn join(into: &mut [u32], from: &[u32]) {
    for (a, b) in into.iter_mut().zip(from) {
        *a = (*a).max(*b);
    }
}

/// [`join`] into a clock that may be empty yet (an mbarrier's, before its first arrival).
pub(crate) fn join_grown(into: &mut Vec<u32>, from: &[u32]) {
    if into.len() < from.len() {
        into.resize(from.len(), 0);
    }
    join(into, from);
}

impl Order {
    /// `agents[i]`: who agent `i` is; every agent starts at clock 1 of its own history.
    pub fn new(agents: Vec<AgentInfo>) -> Order {
        let n = agents.len();
        let clocks = (0..n)
            .map(|i| {
                let mut c = vec![0u32; n];
                c[i] = 1;
                c
            })
            .collect();
        Order {
            agents,
            clocks,
            fenced: vec![None; n],
            pending: vec![None; n],
            proxy_fenced: vec![None; n],
            flags: HashMap::new(),
            writes: HashMap::new(),
            base: 0,
        }
    }

    fn agent(&self, tid: u32) -> usize {
        (self.base + tid) as usize
    }

    /// Check a plain access of `len` bytes at `off` of rank `rank`'s copy of `buf` (of `size`
    /// bytes) by thread `tid` of the running block; a write is then recorded.
    #[allow(clippy::too_many_arguments)]
    pub fn access(
        &mut self,
        rank: usize,
        buf: u32,
        size: usize,
        off: usize,
        len: usize,
        tid: u32,
        pc: u32,
        write: bool,
    ) -> Result<(), Unordered> {
        let a = self.agent(tid);
        let bytes = self
            .writes
            .entry((rank, buf))
            .or_insert_with(|| vec![(None, None); size]);
        let own = &self.clocks[a];
        let agents = &self.agents;
        let unordered = |x: &Option<LastWrite>, kind: &'static str| match *x {
            Some(w) if w.agent as usize != a && own[w.agent as usize] < w.clock => Err(Unordered {
                by: agents[a],
                other: agents[w.agent as usize],
                other_pc: w.pc,
                kind,
            }),
            _ => Ok(()),
        };
        let me = Some(LastWrite {
            agent: a as u32,
            clock: own[a],
            pc,
        });
        for (last_write, last_read) in bytes.iter_mut().skip(off).take(len) {
            if write {
                unordered(last_write, "write after a write")?;
                unordered(last_read, "write after a read")?;
                *last_write = me;
                *last_read = None;
            } else {
                unordered(last_write, "read after a write")?;
                *last_read = me;
            }
        }
        Ok(())
    }

    /// `fence.proxy.async.global` by thread `tid`: the writes it is ordered after so far
    /// become visible to its async-proxy reads.
    pub fn proxy_fence(&mut self, tid: u32) {
        let a = self.agent(tid);
        self.proxy_fenced[a] = Some(self.clocks[a].clone());
    }

    /// An async-proxy read (a TMA load issued by thread `tid`) of bytes the generic proxy
    /// wrote: besides the order a plain read needs ([`Order::access`], checked by the caller),
    /// the issuing thread must have fenced the proxies after it was ordered after the write.
    #[allow(clippy::too_many_arguments)]
    pub fn async_read(
        &mut self,
        rank: usize,
        buf: u32,
        off: usize,
        len: usize,
        tid: u32,
    ) -> Result<(), Unordered> {
        let a = self.agent(tid);
        let Some(bytes) = self.writes.get(&(rank, buf)) else {
            return Ok(());
        };
        for (last_write, _) in bytes.iter().skip(off).take(len) {
            let Some(w) = *last_write else { continue };
            let fenced = self.proxy_fenced[a]
                .as_ref()
                .is_some_and(|c| c[w.agent as usize] >= w.clock);
            if !fenced {
                return Err(Unordered {
                    by: self.agents[a],
                    other: self.agents[w.agent as usize],
                    other_pc: w.pc,
                    kind: "async-proxy read after a generic-proxy write",
                });
            }
        }
        Ok(())
    }

    /// A store or reduction on a flag at `scope`: with `release` it publishes this thread's
    /// clock (after a fence, a relaxed one publishes the clock at the fence).
    pub fn store(&mut self, key: (usize, u32, usize), tid: u32, release: bool, scope: MemScope) {
        let a = self.agent(tid);
        let published = if release {
            let c = self.clocks[a].clone();
            self.clocks[a][a] += 1;
            Some(c)
        } else {
            self.fenced[a].clone()
        };
        if let Some(c) = published {
            let f = self
                .flags
                .entry(key)
                .or_insert_with(|| (vec![0; c.len()], None));
            join(&mut f.0, &c);
            f.1 = Some((a as u32, scope));
        }
    }

    /// A load of a flag at `scope`: with `acquire` it joins what was released on it; a relaxed
    /// one keeps it for the next fence. A release and an acquire synchronize only when both
    /// scopes include the other thread: `.cta` within a block, `.gpu` within a rank, `.sys`
    /// across ranks; narrower ones are reported (they would not synchronize on a GPU).
    pub fn load(
        &mut self,
        key: (usize, u32, usize),
        tid: u32,
        acquire: bool,
        scope: MemScope,
    ) -> Result<(), ScopeTooNarrow> {
        let a = self.agent(tid);
        let Some((f, last)) = self.flags.get(&key) else {
            return Ok(());
        };
        if let Some((w, wscope)) = *last {
            let (me, them) = (self.agents[a], self.agents[w as usize]);
            let needed = if me.rank != them.rank {
                MemScope::Sys
            } else if me.block != them.block {
                MemScope::Gpu
            } else {
                MemScope::Cta
            };
            if w as usize != a && (wscope < needed || scope < needed) {
                return Err(ScopeTooNarrow {
                    releaser: them,
                    release_scope: wscope,
                    acquirer: me,
                    acquire_scope: scope,
                    needed,
                });
            }
        }
        if acquire {
            let f = f.clone();
            join(&mut self.clocks[a], &f);
        } else {
            let p = self.pending[a].get_or_insert_with(|| vec![0; f.len()]);
            join(p, f);
        }
        Ok(())
    }

    /// A fence: acquires what relaxed loads since the last one observed, and marks the point
    /// a later relaxed store releases.
    pub fn fence(&mut self, tid: u32) {
        let a = self.agent(tid);
        if let Some(p) = self.pending[a].take() {
            join(&mut self.clocks[a], &p);
        }
        self.fenced[a] = Some(self.clocks[a].clone());
        self.clocks[a][a] += 1;
    }

    /// A plain arrival of thread `tid` on an mbarrier (release at CTA scope): the clock it
    /// publishes, for the barrier to hand to the threads that wait for the phase.
    pub fn arrive(&mut self, tid: u32) -> Vec<u32> {
        let a = self.agent(tid);
        let c = self.clocks[a].clone();
        self.clocks[a][a] += 1;
        c
    }

    /// A passed mbarrier wait of thread `tid` (acquire at CTA scope): it is ordered after
    /// what the arrivals of the phases completed so far released (`released`).
    pub fn acquire_clock(&mut self, tid: u32, released: &[u32]) {
        let a = self.agent(tid);
        join(&mut self.clocks[a], released);
    }

    /// `sync_threads` in the running block of `threads` threads: each is ordered after what
    /// every other was ordered after, and after their accesses before the barrier.
    pub fn barrier(&mut self, threads: u32) {
        self.barrier_lanes(0, threads);
    }

    /// The end of one launch and the start of the next on a rank (stream order): every thread
    /// of `into` is ordered after everything the threads of `from` did (all finished).
    pub fn kernel_boundary(
        &mut self,
        into: std::ops::Range<usize>,
        from: &[std::ops::Range<usize>],
    ) {
        let n = self.clocks.first().map_or(0, |c| c.len());
        let mut all = vec![0u32; n];
        for r in from {
            for c in &self.clocks[r.clone()] {
                join(&mut all, c);
            }
        }
        for c in &mut self.clocks[into] {
            join(c, &all);
        }
    }

    /// A barrier of threads `first..first + count` of the running block (`sync_warp`: a warp's
    /// lanes), as [`Order::barrier`].
    pub fn barrier_lanes(&mut self, first: u32, count: u32) {
        let lo = (self.base + first) as usize;
        let hi = lo + count as usize;
        let n = self.clocks.first().map_or(0, |c| c.len());
        let mut all = vec![0u32; n];
        for c in &self.clocks[lo..hi] {
            join(&mut all, c);
        }
        for (i, c) in self.clocks[lo..hi].iter_mut().enumerate() {
            c.copy_from_slice(&all);
            c[lo + i] += 1;
        }
    }
}

/// A release and an acquire of one flag whose scopes do not include each other's thread.
#[derive(Clone, Debug)]
pub struct ScopeTooNarrow {
    pub releaser: AgentInfo,
    pub release_scope: MemScope,
    pub acquirer: AgentInfo,
    pub acquire_scope: MemScope,
    pub needed: MemScope,
}

/// Where a report's thread is.
pub fn describe(a: &AgentInfo, span: Span) -> String {
    let call = if a.call > 0 {
        format!(" in call {}", a.call + 1)
    } else {
        String::new()
    };
    format!(
        "thread {} of block [{}, {}, {}] on rank {}{call} at {span}",
        a.thread, a.block[0], a.block[1], a.block[2], a.rank
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_threads() -> Order {
        Order::new(
            (0..2)
                .map(|thread| AgentInfo {
                    rank: 0,
                    block: [0, 0, 0],
                    thread,
                    call: 0,
                })
                .collect(),
        )
    }

    /// An mbarrier signal orders like a release and an acquire: a thread that passes the
    /// wait for a phase is ordered after what the arriving thread did before its arrival, and
    /// not after what it did later.
    #[test]
    fn mbarrier_arrivals_release_what_came_before() {
        let mut o = two_threads();
        o.access(0, 7, 16, 0, 4, 0, 1, true)
            .expect("write before the arrival");
        let released = o.arrive(0);
        o.access(0, 7, 16, 4, 4, 0, 2, true)
            .expect("write after the arrival");
        assert!(
            o.access(0, 7, 16, 0, 4, 1, 3, false).is_err(),
            "a read before the wait is unordered"
        );
        o.acquire_clock(1, &released);
        assert!(
            o.access(0, 7, 16, 0, 4, 1, 3, false).is_ok(),
            "the write before the arrival is ordered before the wait"
        );
        assert!(
            o.access(0, 7, 16, 4, 4, 1, 4, false).is_err(),
            "the write after the arrival is not"
        );
    }

    /// A TMA load of bytes another thread wrote needs the loader's proxy fence after the
    /// barrier (or acquire) that ordered the write; a fence before it does not count.
    #[test]
    fn async_reads_need_a_proxy_fence_after_the_order() {
        let mut o = two_threads();
        o.access(0, 7, 16, 0, 4, 0, 1, true).expect("first write");
        o.proxy_fence(1);
        o.barrier(2);
        assert!(
            o.access(0, 7, 16, 0, 4, 1, 2, false).is_ok(),
            "ordered plain read"
        );
        let early = o
            .async_read(0, 7, 0, 4, 1)
            .expect_err("fence before the barrier");
        assert_eq!(early.other.thread, 0);
        o.proxy_fence(1);
        assert!(
            o.async_read(0, 7, 0, 4, 1).is_ok(),
            "fenced after the barrier"
        );
        // Bytes nobody wrote in the kernel (inputs) need no fence.
        let mut fresh = two_threads();
        assert!(fresh.async_read(0, 7, 0, 4, 1).is_ok());
    }
}
