//! The block scheduler: runs every thread of a block until it stops at a synchronization
//! point, then releases what can be released — a warp whose lanes (32, or 64 in an AMD wave:
//! `Program::warp_size`) all wait at the same collective runs it, a block whose threads all
//! wait at the same barrier passes it — and repeats. When nothing can be released and not
//! every thread has finished, the block is stuck (a deadlock or undefined behaviour on a GPU)
//! and the scheduler says who waits where.
//!
//! Running threads one at a time between synchronization points is equivalent to lockstep
//! execution for every program without races, and the race checker reports the others.

use tl_ir::eval::Value;
use tl_ir::{DType, Scope};

use crate::bytecode::{Instr, Program, ShflKind};
use crate::cp_async::Copy;
use crate::error::SimError;
use crate::exec::{BufLds, Interp, Loc, Stash, State, Thread};
use crate::memory::POISON;
use crate::race::{Kind, Rec, Shadow};
use crate::{elem, tensor_core, warp};

/// Run one block to completion. `hw` is the hardware block index (reports use it); `vars` the
/// values of the kernel's block variables.
pub fn run_block(
    it: &mut Interp,
    threads: u32,
    hw: [i64; 3],
    vars: [i64; 3],
    checks: (bool, bool),
) -> Result<(), SimError> {
    let prog = it.prog;
    it.mem.block = hw;
    it.mem.shared = vec![POISON; prog.shared_bytes];
    it.mem.shadow = Shadow::new(prog.shared_bytes, checks.0, checks.1).warp_size(prog.warp_size);
    it.mem.global_writes.clear();
    it.mem.epoch = 1;
    it.mem.global_epoch = 1;
    it.mem.warp_epochs = vec![0; (threads as usize).div_ceil(prog.warp_size as usize)];
    it.mem.proxy_fences = vec![vec![]; threads as usize];
    it.mem.grid_waited = vec![false; threads as usize];
    it.mem.wgmma_reads.clear();
    it.mem.mbars.clear();
    it.mem.named_arrivals.clear();
    let mut ths = new_threads(prog, threads, vars);
    let r = schedule(it, &mut ths).and_then(|s| match s {
        Sched::Done => Ok(()),
        // Only programs that wait on flags block, and those run concurrently.
        Sched::Blocked => Err(stuck(it, &ths)),
    });
    finish_block(it, r)
}

fn new_threads(prog: &Program, threads: u32, vars: [i64; 3]) -> Vec<Thread> {
    (0..threads)
        .map(|tid| {
            let mut regs = prog.reg_init.clone();
            for (r, v) in prog.block_regs.iter().zip(vars) {
                regs[*r as usize] = Value::Int(v);
            }
            Thread {
                tid,
                pc: 0,
                state: State::Ready,
                regs,
                local: vec![POISON; prog.local_bytes],
                stash: Stash::None,
                cp: Default::default(),
                wg: Default::default(),
                bulk: Default::default(),
                reg_count: tl_ir::launch_registers(threads),
            }
        })
        .collect()
}

/// What a block that ran to its end (or failed) reports.
fn finish_block(it: &mut Interp, r: Result<(), SimError>) -> Result<(), SimError> {
    // A read of uninitialized shared memory happened before whatever else went wrong (a race
    // excepted, which explains it better), and is likely its cause.
    match r {
        Err(e @ (SimError::DataRace { .. } | SimError::StaleAsyncRead { .. })) => Err(e),
        Err(e) => Err(it.mem.take_uninit().unwrap_or(e)),
        Ok(()) => match it.mem.take_uninit() {
            Some(e) => Err(e),
            None => Ok(()),
        },
    }
}

/// How a scheduling round of a block ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Sched {
    Done,
    /// Some threads wait for flags that other blocks (or ranks) have yet to set, and nothing
    /// else in the block can go on until they do.
    Blocked,
}

/// A block in flight in a concurrent run (programs that wait on flags: their blocks, on
/// every rank, must all be resident at once, as a GPU that runs them needs them to be): its
/// threads and the per-block memory state, swapped into the interpreter while it runs.
pub struct BlockCtx {
    pub rank: usize,
    /// Which of the run's back-to-back launches this block belongs to, and the index of that
    /// launch's program for its rank.
    pub call: usize,
    pub prog: usize,
    hw: [i64; 3],
    ths: Vec<Thread>,
    shared: Vec<u8>,
    shadow: Shadow,
    global_writes: crate::race::GlobalWrites,
    epoch: u32,
    global_epoch: u32,
    warp_epochs: Vec<u32>,
    proxy_fences: Vec<Vec<u32>>,
    grid_waited: Vec<bool>,
    wgmma_reads: std::collections::HashMap<usize, (u32, u32, u32)>,
    mbars: crate::mbarrier::Mbars,
    done: bool,
    /// Resident: running or ready to run (blocks start in launch order, a limited number at
    /// once when the run models residency).
    started: bool,
    /// The memory-order checker's index of this block's thread 0.
    agent_base: u32,
    /// What other blocks of its cluster did to it since it last ran.
    inbox: Vec<crate::mbarrier::Remote>,
    cluster_gen: u32,
}

impl BlockCtx {
    pub fn new(
        prog: &Program,
        (rank, call, prog_index): (usize, usize, usize),
        threads: u32,
        hw: [i64; 3],
        vars: [i64; 3],
        checks: (bool, bool),
        agent_base: u32,
    ) -> BlockCtx {
        BlockCtx {
            rank,
            call,
            prog: prog_index,
            hw,
            ths: new_threads(prog, threads, vars),
            shared: vec![POISON; prog.shared_bytes],
            shadow: Shadow::new(prog.shared_bytes, checks.0, checks.1).warp_size(prog.warp_size),
            global_writes: crate::race::GlobalWrites::new(checks.0).warp_size(prog.warp_size),
            epoch: 1,
            global_epoch: 1,
            warp_epochs: vec![0; (threads as usize).div_ceil(prog.warp_size as usize)],
            proxy_fences: vec![vec![]; threads as usize],
            grid_waited: vec![false; threads as usize],
            wgmma_reads: Default::default(),
            mbars: Default::default(),
            done: false,
            started: false,
            agent_base,
            inbox: vec![],
            cluster_gen: 0,
        }
    }

    /// Exchange this block's state with the interpreter's.
    fn swap(&mut self, it: &mut Interp) {
        let m = &mut it.mem;
        std::mem::swap(&mut self.hw, &mut m.block);
        std::mem::swap(&mut self.shared, &mut m.shared);
        std::mem::swap(&mut self.shadow, &mut m.shadow);
        std::mem::swap(&mut self.global_writes, &mut m.global_writes);
        std::mem::swap(&mut self.epoch, &mut m.epoch);
        std::mem::swap(&mut self.global_epoch, &mut m.global_epoch);
        std::mem::swap(&mut self.warp_epochs, &mut m.warp_epochs);
        std::mem::swap(&mut self.proxy_fences, &mut m.proxy_fences);
        std::mem::swap(&mut self.grid_waited, &mut m.grid_waited);
        std::mem::swap(&mut self.wgmma_reads, &mut m.wgmma_reads);
        std::mem::swap(&mut self.mbars, &mut m.mbars);
        std::mem::swap(&mut self.cluster_gen, &mut m.cluster_gen);
        if let Some(o) = m.order.as_mut() {
            o.base = self.agent_base;
        }
    }
}

/// Make `rank` the running rank: its program and its tensors.
fn enter_rank<'p>(it: &mut Interp<'p, '_>, progs: &'p [Program], c: &BlockCtx) {
    let rank = c.rank;
    if it.mem.rank != rank {
        let old = it.mem.rank;
        std::mem::swap(&mut it.mem.globals, &mut it.mem.peers[old]);
        std::mem::swap(&mut it.mem.globals, &mut it.mem.peers[rank]);
        it.mem.rank = rank;
    }
    it.prog = &progs[c.prog];
    it.mem.prog = &progs[c.prog];
}

/// Run every block of every rank concurrently: each block runs until it finishes or blocks
/// on a flag, in turn, until all have finished — or until none can go on, a deadlock, which
/// is reported with what every stuck thread waits for.
pub fn run_concurrent<'p>(
    it: &mut Interp<'p, '_>,
    progs: &'p [Program],
    mut ctxs: Vec<BlockCtx>,
    resident: Option<usize>,
) -> Result<(), SimError> {
    it.yield_on_signal = true;
    let ranks = ctxs.iter().map(|c| c.rank + 1).max().unwrap_or(1);
    loop {
        // Blocks start in launch order, at most `resident` per rank at once (a GPU's limit);
        // a block that finishes frees its slot.
        let mut active = vec![0usize; ranks];
        for c in ctxs.iter().filter(|c| c.started && !c.done) {
            active[c.rank] += 1;
        }
        // A rank's next launch starts when all its blocks of the one before have finished
        // (stream order; the other ranks may be a launch behind): from then on its threads are
        // ordered after everything that launch did.
        let mut current_call = vec![usize::MAX; ranks];
        for c in ctxs.iter().filter(|c| !c.done) {
            current_call[c.rank] = current_call[c.rank].min(c.call);
        }
        let mut boundaries = vec![];
        for c in ctxs.iter_mut().filter(|c| !c.started) {
            let earlier_running = current_call[c.rank] < c.call;
            if !earlier_running && resident.is_none_or(|n| active[c.rank] < n) {
                c.started = true;
                active[c.rank] += 1;
                if c.call > 0 {
                    boundaries.push((c.rank, c.call, c.agent_base, c.ths.len()));
                }
            }
        }
        if let Some(order) = it.mem.order.as_mut() {
            for (rank, call, base, threads) in boundaries {
                let from: Vec<std::ops::Range<usize>> = ctxs
                    .iter()
                    .filter(|o| o.rank == rank && o.call + 1 == call)
                    .map(|o| o.agent_base as usize..o.agent_base as usize + o.ths.len())
                    .collect();
                order.kernel_boundary(base as usize..base as usize + threads, &from);
            }
        }
        let mut progressed = false;
        let mut outbox: Vec<(usize, usize, crate::mbarrier::Remote)> = vec![];
        for c in ctxs.iter_mut().filter(|c| c.started && !c.done) {
            enter_rank(it, progs, c);
            c.swap(it);
            let inbox = std::mem::take(&mut c.inbox);
            progressed |= !inbox.is_empty();
            for r in inbox {
                if let Err(e) = it.apply_remote(r) {
                    c.swap(it);
                    return Err(e);
                }
            }
            let before = (
                it.stats.instructions,
                it.stats.barriers,
                it.stats.collectives,
            );
            let r = schedule(it, &mut c.ths);
            let after = (
                it.stats.instructions,
                it.stats.barriers,
                it.stats.collectives,
            );
            let r = match r {
                Ok(Sched::Done) => {
                    c.done = true;
                    progressed = true;
                    finish_block(it, Ok(()))
                }
                Ok(Sched::Blocked) => {
                    progressed |= before != after;
                    Ok(())
                }
                Err(e) => finish_block(it, Err(e)),
            };
            for m in it.mem.outbox.drain(..) {
                outbox.push((c.rank, c.call, m));
            }
            c.swap(it);
            r?;
            if std::mem::take(&mut it.signalled) {
                // Start the next pass from the first block: a waiter before this one may
                // go on now.
                progressed = true;
                break;
            }
        }
        progressed |= !outbox.is_empty();
        deliver_remote(&mut ctxs, outbox)?;
        progressed |= release_cluster_barriers(it, progs, &mut ctxs);
        if ctxs.iter().all(|c| c.done) {
            return Ok(());
        }
        if !progressed {
            // Blocks stuck alike (same rank, call and waits) make one line.
            let mut groups: Vec<(String, String, Vec<[i64; 3]>)> = vec![];
            for c in ctxs.iter_mut().filter(|c| c.started && !c.done) {
                enter_rank(it, progs, c);
                c.swap(it);
                let (who, what) = describe_blocked(it, c.rank, c.call, &c.ths);
                let block = it.mem.block;
                c.swap(it);
                match groups.iter_mut().find(|g| g.0 == who && g.1 == what) {
                    Some(g) => g.2.push(block),
                    None => groups.push((who, what, vec![block])),
                }
            }
            let mut waits: Vec<String> = groups
                .into_iter()
                .map(|(who, what, blocks)| format!("{who} {}: {what}", fmt_blocks(&blocks)))
                .collect();
            for r in 0..ranks {
                let waiting = ctxs.iter().filter(|c| c.rank == r && !c.started).count();
                if let (true, Some(n)) = (waiting > 0, resident) {
                    waits.push(format!(
                        "rank {r}: {waiting} block(s) never started, with {n} resident per rank (the most a GPU holds at once here): the blocks that run wait for ones that cannot start — launch fewer blocks, or put the producers first or in another kernel"
                    ));
                }
            }
            return Err(SimError::SignalDeadlock { waits });
        }
    }
}

/// Hand what blocks sent their cluster's other blocks to those blocks (applied when each next
/// runs). A block that has exited can receive nothing: its shared memory is gone.
fn deliver_remote(
    ctxs: &mut [BlockCtx],
    outbox: Vec<(usize, usize, crate::mbarrier::Remote)>,
) -> Result<(), SimError> {
    for (rank, call, m) in outbox {
        let from = m.from;
        let x = m.cluster_base + i64::from(m.to);
        let target = ctxs
            .iter_mut()
            .find(|t| t.rank == rank && t.call == call && t.hw == [x, from[1], from[2]]);
        let Some(t) = target else {
            return Err(SimError::Cluster(format!(
                "block {from:?} sent to rank {} of its cluster, which has no such block (a grid that is not a whole number of clusters?)",
                m.to
            )));
        };
        if t.done {
            return Err(SimError::Cluster(format!(
                "block {from:?} {} a barrier of block {:?} of its cluster after that block exited: sync the cluster (ClusterSync) before any block exits",
                m.op.verb(),
                t.hw
            )));
        }
        t.inbox.push(m);
    }
    Ok(())
}

/// Let every cluster whose blocks' threads all wait at the cluster barrier (or have exited)
/// through it. Like a block barrier, it orders each block's shared-memory accesses before it
/// against those after.
fn release_cluster_barriers<'p>(
    it: &mut Interp<'p, '_>,
    progs: &'p [Program],
    ctxs: &mut [BlockCtx],
) -> bool {
    let key = |c: &BlockCtx| -> Option<(usize, usize, i64, i64, i64)> {
        let size = i64::from(progs[c.prog].cluster?);
        Some((c.rank, c.call, c.hw[0].div_euclid(size), c.hw[1], c.hw[2]))
    };
    let waiting = |c: &BlockCtx| {
        c.started
            && c.ths.iter().any(|t| t.state == State::ClusterWait)
            && c.ths
                .iter()
                .all(|t| matches!(t.state, State::ClusterWait | State::Done))
    };
    let mut ready: Vec<(usize, usize, i64, i64, i64)> = vec![];
    for c in ctxs.iter().filter(|c| waiting(c)) {
        let Some(k) = key(c) else { continue };
        if ready.contains(&k) {
            continue;
        }
        let all = ctxs
            .iter()
            .filter(|o| key(o) == Some(k))
            .all(|o| o.done || waiting(o));
        if all {
            ready.push(k);
        }
    }
    let mut released = false;
    for c in ctxs.iter_mut().filter(|c| !c.done) {
        if key(c).is_some_and(|k| ready.contains(&k)) {
            enter_rank(it, progs, c);
            c.swap(it);
            it.mem.epoch += 1;
            it.mem.global_epoch += 1;
            it.mem.cluster_gen += 1;
            it.stats.barriers += 1;
            c.swap(it);
            for t in c.ths.iter_mut().filter(|t| t.state == State::ClusterWait) {
                t.pc += 1;
                t.state = State::Ready;
            }
            released = true;
        }
    }
    released
}

/// `block [x, y, z]`, or for several `4 blocks ([x, y, z], …)` (the first three named).
fn fmt_blocks(blocks: &[[i64; 3]]) -> String {
    let one = |b: &[i64; 3]| format!("[{}, {}, {}]", b[0], b[1], b[2]);
    match blocks {
        [b] => format!("block {}", one(b)),
        _ => {
            let mut named: Vec<String> = blocks.iter().take(3).map(one).collect();
            if blocks.len() > 3 {
                named.push("…".into());
            }
            format!("{} blocks ({})", blocks.len(), named.join(", "))
        }
    }
}

/// Where the threads of a blocked block wait, for the deadlock report: whose (rank and call)
/// and what they wait for.
fn describe_blocked(it: &mut Interp, rank: usize, call: usize, ths: &[Thread]) -> (String, String) {
    let mut parts: Vec<String> = vec![];
    let mut seen: Vec<(u32, &'static str)> = vec![];
    for t in ths.iter().filter(|t| t.state != State::Done) {
        let what = match t.state {
            State::FlagWait => "flag",
            State::Barrier => "barrier",
            _ => "other",
        };
        if seen.contains(&(t.pc, what)) {
            continue;
        }
        seen.push((t.pc, what));
        let n = ths
            .iter()
            .filter(|u| u.pc == t.pc && u.state == t.state)
            .count();
        let span = it.prog.span(t.pc as usize);
        let text = match (t.state, t.stash) {
            (State::FlagWait, Stash::Flag(w)) => {
                let info = it.mem.info(w.buf);
                let (name, dt) = (info.name.clone(), info.dtype);
                let elem = w.off / dt.bytes().max(1);
                let now = it
                    .mem
                    .rank_bytes(w.rank, w.buf, w.off, dt.bytes(), t.tid, t.pc)
                    .map(|c| crate::elem::decode(c, dt).as_i64().to_string())
                    .unwrap_or_else(|_| "?".into());
                format!(
                    "{n} thread(s) (first: {}) wait at {span} until `{name}`[{elem}] on rank {} {} {} (it is {now})",
                    t.tid,
                    w.rank,
                    w.cmp.symbol(),
                    w.value.as_i64()
                )
            }
            _ => format!("{n} thread(s) (first: {}) {}", t.tid, describe(it, t)),
        };
        parts.push(text);
    }
    let call = if call > 0 {
        format!(" (call {})", call + 1)
    } else {
        String::new()
    };
    (format!("rank {rank}{call}"), parts.join(", "))
}

fn schedule(it: &mut Interp, ths: &mut [Thread]) -> Result<Sched, SimError> {
    let ws = it.prog.warp_size as usize;
    loop {
        for th in ths.iter_mut() {
            if th.state == State::Ready {
                it.run_thread(th)?;
                if it.signalled {
                    // The thread stays ready; blocks it may have woken run first.
                    return Ok(Sched::Blocked);
                }
            }
        }
        let mut progressed = false;
        for (w, lanes) in ths.chunks_mut(ws).enumerate() {
            let pc = lanes[0].pc;
            if lanes.iter().all(|t| t.state == State::Warp && t.pc == pc) {
                // `sync_warp` orders the warp's lanes after each other's accesses before it.
                if matches!(it.prog.code.get(pc as usize), Some(Instr::SyncWarp)) {
                    if let Some(o) = it.mem.order.as_mut() {
                        o.barrier_lanes(lanes[0].tid, lanes.len() as u32);
                    }
                }
                collective(it, lanes, w)?;
                progressed = true;
            }
        }
        // Threads waiting for a flag that now compares true go on past the wait.
        for th in ths.iter_mut() {
            if th.state == State::FlagWait {
                if let Stash::Flag(w) = th.stash {
                    if it.flag_holds(&w, th.tid, th.pc)? {
                        it.order_load(
                            (w.rank as usize, w.buf, w.off),
                            th.tid,
                            true,
                            w.scope,
                            th.pc,
                        )?;
                        th.state = State::Ready;
                        th.stash = Stash::None;
                        th.pc += 1;
                        progressed = true;
                    }
                }
            }
        }
        // Threads waiting on an mbarrier whose phase has completed go on (they run the wait
        // again, which now passes).
        for th in ths.iter_mut() {
            if th.state == State::MbarWait {
                if let Stash::Mbar(b, parity) = th.stash {
                    if it.mem.mbars.passed(b, parity) {
                        th.state = State::Ready;
                        th.stash = Stash::None;
                        progressed = true;
                    }
                }
            }
        }
        progressed |= release_named_barriers(it, ths)?;
        progressed |= grant_registers(it, ths);
        if progressed {
            continue;
        }
        if ths.iter().all(|t| t.state == State::Done) {
            // Copies nobody waited for would still land, but nothing can observe them now.
            it.stats.cp_async_unwaited += ths.iter().map(|t| t.cp.in_flight() as u64).sum::<u64>();
            it.stats.tma_unlanded += it.mem.mbars.in_flight();
            return Ok(Sched::Done);
        }
        // A thread waiting for a flag another block or rank will set may be what the rest
        // waits for: let the others run first.
        if ths.iter().any(|t| t.state == State::FlagWait) {
            return Ok(Sched::Blocked);
        }
        // In a cluster, another block may complete a phase (a multicast copy, a remote
        // arrival) or be what the cluster barrier waits for.
        if it.prog.cluster.is_some()
            && ths
                .iter()
                .any(|t| matches!(t.state, State::MbarWait | State::ClusterWait))
        {
            return Ok(Sched::Blocked);
        }
        // Registers only this block's threads can free, and none of them can go on.
        if let Some(e) = register_deadlock(it, ths) {
            return Err(e);
        }
        // A named barrier counting more threads than are still running can never complete,
        // whatever else waits.
        let running = ths.iter().filter(|t| t.state != State::Done).count();
        if ths.iter().any(|t| {
            t.state == State::Barrier
                && named_at(it, t.pc).is_some_and(|(_, n)| n as usize > running)
        }) {
            return Err(stuck(it, ths));
        }
        // A thread waiting for an mbarrier phase nothing can complete is the likely cause of
        // whatever else is stuck.
        if let Some(t) = ths.iter().find(|t| t.state == State::MbarWait) {
            if let Stash::Mbar(b, parity) = t.stash {
                let waiting = ths
                    .iter()
                    .filter(|u| {
                        u.state == State::MbarWait && matches!(u.stash, Stash::Mbar(c, _) if c == b)
                    })
                    .count() as u32;
                return Err(it.mbar_deadlock(b, parity, t.tid, t.pc, waiting));
            }
        }
        let pc = ths[0].pc;
        if ths.iter().all(|t| t.state == State::Barrier && t.pc == pc) {
            if let Some(e) = it.mem.take_uninit() {
                return Err(e);
            }
            it.mem.epoch += 1;
            // An LDS barrier orders shared memory only; `sync_threads` orders global memory too.
            if !matches!(it.prog.code.get(pc as usize), Some(Instr::BarrierLds)) {
                it.mem.global_epoch += 1;
                if let Some(o) = it.mem.order.as_mut() {
                    o.barrier(ths.len() as u32);
                }
            }
            it.stats.barriers += 1;
            for t in ths.iter_mut() {
                t.pc += 1;
                t.state = State::Ready;
            }
            continue;
        }
        return Err(stuck(it, ths));
    }
}

/// The block's register pool: what its launch allocated, every thread's share at the launch's
/// bound (`setmaxnreg` moves registers between threads within it).
fn register_pool(ths: &[Thread]) -> u64 {
    u64::from(tl_ir::launch_registers(ths.len() as u32)) * ths.len() as u64
}

/// Registers the block's threads hold, those that have exited included (an exited thread's
/// registers return to the pool only when the whole block does).
fn registers_held(ths: &[Thread]) -> u64 {
    ths.iter().map(|t| u64::from(t.reg_count)).sum()
}

/// The count a thread waiting at `setmaxnreg.inc` asks for.
fn asked_registers(it: &Interp, t: &Thread) -> Option<u32> {
    match it.prog.code.get(t.pc as usize) {
        Some(Instr::SetMaxNReg { inc: true, regs }) => Some(*regs),
        _ => None,
    }
}

/// Lets through, warp by warp in order, each `setmaxnreg.inc` the pool now has room for: the
/// instruction is `.sync.aligned`, so a warp takes its registers once all its lanes wait at it.
fn grant_registers(it: &Interp, ths: &mut [Thread]) -> bool {
    // Every pass of the scheduler comes here; most kernels never wait for registers.
    if !ths.iter().any(|t| t.state == State::RegWait) {
        return false;
    }
    let pool = register_pool(ths);
    let mut held = registers_held(ths);
    let mut progressed = false;
    for lanes in ths.chunks_mut(it.prog.warp_size as usize) {
        let pc = lanes[0].pc;
        if !lanes
            .iter()
            .all(|t| t.state == State::RegWait && t.pc == pc)
        {
            continue;
        }
        let Some(regs) = asked_registers(it, &lanes[0]) else {
            continue;
        };
        let more: u64 = lanes
            .iter()
            .map(|t| u64::from(regs.saturating_sub(t.reg_count)))
            .sum();
        if held + more <= pool {
            held += more;
            for t in lanes.iter_mut() {
                t.reg_count = regs;
                t.pc += 1;
                t.state = State::Ready;
            }
            progressed = true;
        }
    }
    progressed
}

/// The deadlock of threads waiting at `setmaxnreg.inc` for registers nothing can free (called
/// when no thread of the block can go on). `None` when the pool could grant them: then some
/// lanes of their warp never reached the instruction, which the general report describes.
fn register_deadlock(it: &Interp, ths: &[Thread]) -> Option<SimError> {
    let waiting: Vec<&Thread> = ths.iter().filter(|t| t.state == State::RegWait).collect();
    let t = *waiting.first()?;
    let asked = waiting
        .iter()
        .map(|u| {
            u64::from(
                asked_registers(it, u)
                    .unwrap_or(0)
                    .saturating_sub(u.reg_count),
            )
        })
        .sum();
    let (pool, held) = (register_pool(ths), registers_held(ths));
    if held + asked <= pool {
        return None;
    }
    Some(SimError::RegisterDeadlock {
        block: it.mem.block,
        thread: t.tid,
        waiting: waiting.len() as u32,
        span: it.prog.span(t.pc as usize),
        regs: asked_registers(it, t).unwrap_or(0),
        threads: ths.len() as u32,
        pool,
        held,
        asked,
    })
}

/// The named barrier (`bar.sync id, threads`) a thread waiting at `pc` waits at, if any.
fn named_at(it: &Interp, pc: u32) -> Option<(u32, u32)> {
    match it.prog.code.get(pc as usize) {
        Some(Instr::NamedBarrier { id, threads }) => Some((*id, *threads)),
        _ => None,
    }
}

/// Lets through every named barrier at which as many threads wait as it counts. Completing
/// one orders its threads' accesses before it against theirs after it — and, since shared
/// memory has one barrier epoch per block, everyone's: the warps a named barrier leaves out
/// are producer warps, whose shared-memory writes are TMA copies that the mbarrier tags
/// order (`race::Shadow::tma_acquire`).
fn release_named_barriers(it: &mut Interp, ths: &mut [Thread]) -> Result<bool, SimError> {
    let mut waiting: Vec<(u32, u32, Vec<usize>)> = vec![];
    for (i, t) in ths.iter().enumerate() {
        if t.state != State::Barrier {
            continue;
        }
        let Some((id, threads)) = named_at(it, t.pc) else {
            continue;
        };
        match waiting.iter_mut().find(|w| w.0 == id) {
            Some(w) if w.1 != threads => {
                return Err(SimError::NamedBarrier {
                    block: it.mem.block,
                    id,
                    threads: w.1,
                    arrived: w.2.len() as u32,
                    waiting: ths[w.2[0]].tid,
                    barrier: it.prog.span(ths[w.2[0]].pc as usize),
                    detail: format!(
                        "thread {} waits at it counting {threads} ({})",
                        t.tid,
                        it.prog.span(t.pc as usize)
                    ),
                })
            }
            Some(w) => w.2.push(i),
            None => waiting.push((id, threads, vec![i])),
        }
    }
    let mut released = false;
    // A phase that threads only arrived at (none waits) completes too.
    let arrived_only: Vec<u32> = it
        .mem
        .named_arrivals
        .iter()
        .filter(|(id, (threads, n))| n == threads && !waiting.iter().any(|w| w.0 == **id))
        .map(|(id, _)| *id)
        .collect();
    for id in arrived_only {
        it.mem.named_arrivals.remove(&id);
        released = true;
    }
    for (id, threads, who) in waiting {
        let arrived = match it.mem.named_arrivals.get(&id) {
            Some(&(counts, n)) if counts != threads => {
                let t = &ths[who[0]];
                return Err(SimError::NamedBarrier {
                    block: it.mem.block,
                    id,
                    threads: counts,
                    arrived: n,
                    waiting: t.tid,
                    barrier: it.prog.span(t.pc as usize),
                    detail: format!("thread {} waits at it counting {threads}", t.tid),
                });
            }
            Some(&(_, n)) => n,
            None => 0,
        };
        let n = who.len() as u32 + arrived;
        if n > threads {
            let t = &ths[who[0]];
            return Err(SimError::NamedBarrier {
                block: it.mem.block,
                id,
                threads,
                arrived: n,
                waiting: t.tid,
                barrier: it.prog.span(t.pc as usize),
                detail: "more threads than it counts".into(),
            });
        }
        if n < threads {
            continue;
        }
        if let Some(e) = it.mem.take_uninit() {
            return Err(e);
        }
        if arrived > 0 {
            // Completed with threads that arrived and went on (a ping-pong turn): it
            // schedules, and is taken to order no memory.
            it.mem.named_arrivals.remove(&id);
        } else {
            it.mem.epoch += 1;
            it.mem.global_epoch += 1;
            let first = ths[who[0]].tid;
            let contiguous = who.windows(2).all(|w| w[1] == w[0] + 1);
            if let Some(o) = it.mem.order.as_mut() {
                if contiguous {
                    o.barrier_lanes(first, n);
                }
            }
        }
        it.stats.barriers += 1;
        for i in who {
            ths[i].pc += 1;
            ths[i].state = State::Ready;
        }
        released = true;
    }
    Ok(released)
}

fn describe(it: &Interp, t: &Thread) -> String {
    let span = it.prog.span(t.pc as usize);
    match t.state {
        State::Done => "has exited".into(),
        State::Barrier => format!("waits at the barrier at {span}"),
        State::Warp => format!("is at {} ({span})", it.prog.name(t.pc as usize)),
        State::MbarWait => format!("waits on an mbarrier at {span}"),
        State::FlagWait => format!("waits for a flag at {span}"),
        State::ClusterWait => format!("waits at the cluster barrier at {span}"),
        State::RegWait => format!("waits for registers (setmaxnreg.inc) at {span}"),
        State::Ready => "is still running".into(),
    }
}

/// Explain why no thread can go on.
fn stuck(it: &Interp, ths: &[Thread]) -> SimError {
    for (w, lanes) in ths.chunks(it.prog.warp_size as usize).enumerate() {
        // Warp collectives and `setmaxnreg` (`.sync.aligned`) need every lane of the warp.
        if let Some(a) = lanes
            .iter()
            .find(|t| matches!(t.state, State::Warp | State::RegWait))
        {
            if let Some(b) = lanes.iter().find(|t| t.state != a.state || t.pc != a.pc) {
                return SimError::WarpDivergence {
                    block: it.mem.block,
                    warp: w as u32,
                    op: it.prog.name(a.pc as usize).to_string(),
                    span: it.prog.span(a.pc as usize),
                    waiting: a.tid,
                    other: b.tid,
                    other_state: describe(it, b),
                };
            }
        }
    }
    if let Some(t) = ths
        .iter()
        .find(|t| t.state == State::Barrier && named_at(it, t.pc).is_some())
    {
        if let Some((id, threads)) = named_at(it, t.pc) {
            let arrived = ths
                .iter()
                .filter(|u| {
                    u.state == State::Barrier && named_at(it, u.pc).is_some_and(|x| x.0 == id)
                })
                .count() as u32
                + it.mem.named_arrivals.get(&id).map_or(0, |a| a.1);
            let others: Vec<String> = ths
                .iter()
                .filter(|u| !(u.state == State::Barrier && named_at(it, u.pc).is_some()))
                .take(1)
                .map(|u| format!("thread {} {}", u.tid, describe(it, u)))
                .collect();
            return SimError::NamedBarrier {
                block: it.mem.block,
                id,
                threads,
                arrived,
                waiting: t.tid,
                barrier: it.prog.span(t.pc as usize),
                detail: if others.is_empty() {
                    "no other thread is left to arrive".into()
                } else {
                    others.join(", ")
                },
            };
        }
    }
    let a = ths.iter().find(|t| t.state == State::Barrier);
    let b = a.and_then(|a| {
        ths.iter()
            .find(|t| t.state != State::Barrier || t.pc != a.pc)
    });
    match (a, b) {
        (Some(a), Some(b)) => SimError::BarrierDivergence {
            block: it.mem.block,
            waiting: a.tid,
            barrier: it.prog.span(a.pc as usize),
            other: b.tid,
            other_state: describe(it, b),
        },
        _ => SimError::InvalidIr("the block scheduler found no thread to run".into()),
    }
}

fn no_stash(it: &Interp, pc: u32) -> SimError {
    SimError::InvalidIr(format!(
        "internal: a lane reached {} without its operands",
        it.prog.name(pc as usize)
    ))
}

/// Run the collective all lanes of warp `w` wait at.
fn collective(it: &mut Interp, lanes: &mut [Thread], w: usize) -> Result<(), SimError> {
    let prog = it.prog;
    let pc = lanes[0].pc;
    let ins = prog.code.get(pc as usize).ok_or_else(|| no_stash(it, pc))?;
    let ws = prog.warp_size as usize;
    if lanes.len() < ws && !matches!(ins, Instr::SyncWarp) {
        return Err(SimError::Unsupported(format!(
            "{} in warp {w}, which has only {} threads (the block's thread count is not a multiple of {ws}), at {}",
            prog.name(pc as usize),
            lanes.len(),
            prog.span(pc as usize)
        )));
    }
    match ins {
        Instr::SyncWarp => {
            if let Some(e) = it.mem.warp_epochs.get_mut(w) {
                *e += 1;
            }
            it.stats.warp_syncs += 1;
        }
        Instr::Shfl {
            kind, width, dst, ..
        } => shuffle(it, lanes, *kind, *width, *dst as usize, pc)?,
        Instr::Ldmatrix { num, trans, .. } => ldmatrix(it, lanes, *num as usize, *trans, pc)?,
        Instr::LdsReadTr16 { .. } => lds_read_tr16(it, lanes, pc)?,
        Instr::Mma { ab, .. } => mma(it, lanes, *ab, pc)?,
        Instr::Wgmma { op, .. } => wgmma(it, lanes, *op, pc)?,
        Instr::Mfma { op, .. } => mfma(it, lanes, *op, pc)?,
        Instr::BufferLoadLds { bytes, .. } => buffer_load_lds(it, lanes, *bytes as usize, w, pc)?,
        _ => return Err(no_stash(it, pc)),
    }
    if !matches!(ins, Instr::SyncWarp) {
        it.stats.collectives += 1;
    }
    for l in lanes.iter_mut() {
        l.pc = pc + 1;
        l.state = State::Ready;
        l.stash = Stash::None;
    }
    Ok(())
}

fn shuffle(
    it: &Interp,
    lanes: &mut [Thread],
    kind: ShflKind,
    width: u32,
    dst: usize,
    pc: u32,
) -> Result<(), SimError> {
    let mut vals = [Value::Int(0); 64];
    let mut args = [0i64; 64];
    let ws = it.prog.warp_size;
    for (i, l) in lanes.iter().enumerate() {
        match l.stash {
            Stash::Shfl(v, a) => {
                vals[i] = v;
                args[i] = a;
            }
            _ => return Err(no_stash(it, pc)),
        }
    }
    for (i, l) in lanes.iter_mut().enumerate() {
        let src = warp::source_lane(ws, kind, width, i as u32, args[i]) as usize;
        l.regs[dst] = vals[src];
    }
    Ok(())
}

fn addrs(it: &Interp, l: &Thread, pc: u32) -> Result<[Loc; 4], SimError> {
    match l.stash {
        Stash::Addrs(a) => Ok(a),
        _ => Err(no_stash(it, pc)),
    }
}

/// What a tensor-core collective needs an operand address to name.
struct Need {
    len: usize,
    scope: Scope,
    /// The element size the buffer must have, when it matters.
    elem_bytes: Option<usize>,
    what: &'static str,
}

/// Check that `loc` names what `need` says, returning its byte offset.
fn operand(it: &Interp, l: &Thread, loc: Loc, need: Need, pc: u32) -> Result<usize, SimError> {
    let info = it.mem.info(loc.buf);
    let name = it.prog.name(pc as usize);
    if info.scope != need.scope || need.elem_bytes.is_some_and(|b| b != info.dtype.bytes()) {
        return Err(SimError::InvalidIr(format!(
            "{name} at {}: {} is {} {} `{}`, not a {}{} buffer",
            it.prog.span(pc as usize),
            need.what,
            info.scope,
            info.dtype,
            info.name,
            match need.elem_bytes {
                Some(b) => format!("{}-bit ", b * 8),
                None => String::new(),
            },
            need.scope
        )));
    }
    it.mem.range(loc.buf, loc.elem, need.len, l.tid, pc)
}

fn need(len: usize, scope: Scope, elem_bytes: Option<usize>, what: &'static str) -> Need {
    Need {
        len,
        scope,
        elem_bytes,
        what,
    }
}

fn ldmatrix(
    it: &mut Interp,
    lanes: &mut [Thread],
    num: usize,
    trans: bool,
    pc: u32,
) -> Result<(), SimError> {
    let name = it.prog.name(pc as usize);
    let mut rows = [[0u16; 8]; 32];
    for (i, l) in lanes.iter().enumerate().take(8 * num) {
        let [s, ..] = addrs(it, l, pc)?;
        let off = operand(
            it,
            l,
            s,
            need(16, Scope::Shared, None, "the row address"),
            pc,
        )?;
        it.mem.aligned(s.buf, off, 16, name, l.tid, pc)?;
        let who = Rec {
            tid: l.tid as u16,
            kind: Kind::IntrinsicRead,
            pc,
        };
        let b = it.mem.read(&l.local, s.buf, off, 16, who)?;
        for (c, x) in rows[i].iter_mut().enumerate() {
            *x = u16::from_le_bytes([b[2 * c], b[2 * c + 1]]);
        }
    }
    let out = tensor_core::ldmatrix(num, trans, &rows);
    for (i, l) in lanes.iter_mut().enumerate() {
        let [_, d, ..] = addrs(it, l, pc)?;
        let dst = need(4 * num, Scope::Local, Some(2), "the destination");
        let off = operand(it, l, d, dst, pc)?;
        let mut bytes = [0u8; 16];
        for (j, x) in out[i].iter().take(2 * num).enumerate() {
            bytes[2 * j..2 * j + 2].copy_from_slice(&x.to_le_bytes());
        }
        let who = Rec {
            tid: l.tid as u16,
            kind: Kind::Write,
            pc,
        };
        it.mem
            .write(&mut l.local, d.buf, off, &bytes[..4 * num], who)?;
    }
    Ok(())
}

/// AMD `ds_read_b64_tr_b16` over a 64-lane wave: every lane reads the 8 bytes (four 16-bit
/// elements, 8-byte aligned) its source address names; within each group of 16 lanes, lane
/// `l`'s element `n` is then element `l % 4` of lane `(l / 4) % 4 + 4·n`'s bytes (the CDNA4
/// ISA's 4 × 16 transpose, as Triton's linear layouts and ROCm's simulator describe it).
fn lds_read_tr16(it: &mut Interp, lanes: &mut [Thread], pc: u32) -> Result<(), SimError> {
    let name = it.prog.name(pc as usize);
    let mut read = [[0u16; 4]; 64];
    for (i, l) in lanes.iter().enumerate() {
        let [s, ..] = addrs(it, l, pc)?;
        let off = operand(
            it,
            l,
            s,
            need(8, Scope::Shared, Some(2), "the source address"),
            pc,
        )?;
        it.mem.aligned(s.buf, off, 8, name, l.tid, pc)?;
        let who = Rec {
            tid: l.tid as u16,
            kind: Kind::IntrinsicRead,
            pc,
        };
        let b = it.mem.read(&l.local, s.buf, off, 8, who)?;
        for (c, x) in read[i].iter_mut().enumerate() {
            *x = u16::from_le_bytes([b[2 * c], b[2 * c + 1]]);
        }
    }
    for (i, l) in lanes.iter_mut().enumerate() {
        let group = i & !15;
        let mut bytes = [0u8; 8];
        for n in 0..4 {
            let src = group + ((i >> 2) & 3) + 4 * n;
            bytes[2 * n..2 * n + 2].copy_from_slice(&read[src][i & 3].to_le_bytes());
        }
        let [_, d, ..] = addrs(it, l, pc)?;
        let off = operand(
            it,
            l,
            d,
            need(8, Scope::Local, Some(2), "the destination"),
            pc,
        )?;
        let who = Rec {
            tid: l.tid as u16,
            kind: Kind::Write,
            pc,
        };
        it.mem.write(&mut l.local, d.buf, off, &bytes, who)?;
    }
    Ok(())
}

fn mma(it: &mut Interp, lanes: &mut [Thread], ab: DType, pc: u32) -> Result<(), SimError> {
    let mut a = [[0f32; 8]; 32];
    let mut b = [[0f32; 4]; 32];
    let mut c = [[0f32; 4]; 32];
    let read = |it: &mut Interp,
                l: &Thread,
                loc: Loc,
                len: usize,
                eb: usize,
                what: &'static str|
     -> Result<[u8; 16], SimError> {
        let off = operand(it, l, loc, need(len, Scope::Local, Some(eb), what), pc)?;
        let who = Rec {
            tid: l.tid as u16,
            kind: Kind::IntrinsicRead,
            pc,
        };
        it.mem.read(&l.local, loc.buf, off, len, who)
    };
    for (i, l) in lanes.iter().enumerate() {
        let [_, la, lb, lc] = addrs(it, l, pc)?;
        let ba = read(it, l, la, 16, 2, "A")?;
        let bb = read(it, l, lb, 8, 2, "B")?;
        let bc = read(it, l, lc, 16, 4, "C")?;
        for (k, x) in a[i].iter_mut().enumerate() {
            *x = elem::decode(&ba[2 * k..], ab).as_f64() as f32;
        }
        for (k, x) in b[i].iter_mut().enumerate() {
            *x = elem::decode(&bb[2 * k..], ab).as_f64() as f32;
        }
        for (k, x) in c[i].iter_mut().enumerate() {
            *x = elem::decode(&bc[4 * k..], DType::F32).as_f64() as f32;
        }
    }
    let d = tensor_core::mma_m16n8k16(&a, &b, &c);
    for (i, l) in lanes.iter_mut().enumerate() {
        let [ld, ..] = addrs(it, l, pc)?;
        let off = operand(it, l, ld, need(16, Scope::Local, Some(4), "D"), pc)?;
        let mut bytes = [0u8; 16];
        for (k, x) in d[i].iter().enumerate() {
            bytes[4 * k..4 * k + 4].copy_from_slice(&x.to_le_bytes());
        }
        let who = Rec {
            tid: l.tid as u16,
            kind: Kind::Write,
            pc,
        };
        it.mem.write(&mut l.local, ld.buf, off, &bytes, who)?;
    }
    Ok(())
}

/// Read `need.len` bytes of a local operand (checked as `operand` does).
fn read_local(
    it: &mut Interp,
    l: &Thread,
    loc: Loc,
    n: Need,
    pc: u32,
) -> Result<Vec<u8>, SimError> {
    let len = n.len;
    let off = operand(it, l, loc, n, pc)?;
    let who = Rec {
        tid: l.tid as u16,
        kind: Kind::IntrinsicRead,
        pc,
    };
    let mut out = Vec::with_capacity(len);
    for start in (0..len).step_by(16) {
        let c = (len - start).min(16);
        let b = it.mem.read(&l.local, loc.buf, off + start, c, who)?;
        out.extend_from_slice(&b[..c]);
    }
    Ok(out)
}

/// AMD `v_mfma_f32_{m}x{n}x{k}` over a 64-lane wave: every lane's A, B and C registers are read
/// (C may alias D), then every lane's D is written.
fn mfma(it: &mut Interp, lanes: &mut [Thread], op: tl_ir::MfmaOp, pc: u32) -> Result<(), SimError> {
    let (m, n, k) = (op.m as usize, op.n as usize, op.k as usize);
    let (na, nb, nd) = (m * k / 64, n * k / 64, m * n / 64);
    let mut a = [[0f32; 8]; 64];
    let mut b = [[0f32; 8]; 64];
    let mut c = [[0f32; 16]; 64];
    for (i, l) in lanes.iter().enumerate() {
        let [_, la, lb, lc] = addrs(it, l, pc)?;
        let ba = read_local(it, l, la, need(2 * na, Scope::Local, Some(2), "A"), pc)?;
        let bb = read_local(it, l, lb, need(2 * nb, Scope::Local, Some(2), "B"), pc)?;
        let bc = read_local(it, l, lc, need(4 * nd, Scope::Local, Some(4), "C"), pc)?;
        for (v, x) in a[i].iter_mut().enumerate().take(na) {
            *x = elem::decode(&ba[2 * v..], op.ab).as_f64() as f32;
        }
        for (v, x) in b[i].iter_mut().enumerate().take(nb) {
            *x = elem::decode(&bb[2 * v..], op.ab).as_f64() as f32;
        }
        for (v, x) in c[i].iter_mut().enumerate().take(nd) {
            *x = elem::decode(&bc[4 * v..], DType::F32).as_f64() as f32;
        }
    }
    let d = tensor_core::mfma(m, n, k, &a, &b, &c);
    for (i, l) in lanes.iter_mut().enumerate() {
        let [ld, ..] = addrs(it, l, pc)?;
        let off = operand(it, l, ld, need(4 * nd, Scope::Local, Some(4), "D"), pc)?;
        let bytes: Vec<u8> = d[i].iter().take(nd).flat_map(|x| x.to_le_bytes()).collect();
        let who = Rec {
            tid: l.tid as u16,
            kind: Kind::Write,
            pc,
        };
        it.mem.write(&mut l.local, ld.buf, off, &bytes, who)?;
    }
    Ok(())
}

/// AMD `buffer_load_{dword,dwordx2,dwordx4} … lds` over a 64-lane wave: lane `l` reads `bytes`
/// at byte `voffset + soffset` of the tensor (now, as a `cp.async` does) and they land at
/// `base + l·bytes` in shared memory when the lane's thread retires the load (`WaitVmcnt`):
/// each lane's load is a `cp.async` of its thread committed as a group of its own. A false
/// predicate or a range not wholly inside the tensor (the hardware's range check, with both
/// offsets unsigned 32-bit values: a negative one is out of range) lands zeros and reads
/// nothing. The LDS base and `soffset` must be the same in every lane (scalar registers).
fn buffer_load_lds(
    it: &mut Interp,
    lanes: &mut [Thread],
    bytes: usize,
    wave: usize,
    pc: u32,
) -> Result<(), SimError> {
    let prog = it.prog;
    let name = prog.name(pc as usize);
    let span = prog.span(pc as usize);
    let mut ops: Vec<BufLds> = Vec::with_capacity(lanes.len());
    for l in lanes.iter() {
        match l.stash {
            Stash::BufLds(o) => ops.push(o),
            _ => return Err(no_stash(it, pc)),
        }
    }
    let Some(&first) = ops.first() else {
        return Err(no_stash(it, pc));
    };
    // The LDS base (M0) and soffset are scalar registers: one value for the wave.
    let non_uniform =
        |what: &'static str, lane: usize, a: String, b: String| SimError::NonUniformOperand {
            block: it.mem.block,
            wave: wave as u32,
            op: name.to_string(),
            span,
            what,
            lanes: [0, lane as u32],
            values: Box::new([a, b]),
        };
    let (di, ti) = (it.mem.info(first.base.buf), it.mem.info(first.tensor.buf));
    let show = |loc: Loc| format!("`{}`[{}]", it.mem.info(loc.buf).name, loc.elem);
    for (lane, o) in ops.iter().enumerate() {
        if o.base.buf != first.base.buf || o.base.elem != first.base.elem {
            return Err(non_uniform(
                "the LDS base address",
                lane,
                show(first.base),
                show(o.base),
            ));
        }
        if o.soffset != first.soffset {
            return Err(non_uniform(
                "soffset",
                lane,
                first.soffset.to_string(),
                o.soffset.to_string(),
            ));
        }
        if o.tensor.elem != 0 {
            return Err(SimError::InvalidIr(format!(
                "{name} at {span}: lane {lane} of wave {wave} passes {} as the tensor, not the address of its first element",
                show(o.tensor)
            )));
        }
    }
    if di.scope != Scope::Shared || ti.scope != Scope::Global {
        return Err(SimError::InvalidIr(format!(
            "{name} at {span}: loads from a global tensor into shared memory, not from {} `{}` into {} `{}`",
            ti.scope, ti.name, di.scope, di.name
        )));
    }
    let base_off = it
        .mem
        .range(first.base.buf, first.base.elem, bytes, lanes[0].tid, pc)?;
    // The range the buffer resource allows (codegen caps its record count at 2^31 - 1).
    let tensor_bytes = (ti.bytes() as u64).min(0x7fff_ffff);
    for (lane, (l, o)) in lanes.iter_mut().zip(&ops).enumerate() {
        let doff = base_off + lane * bytes;
        if doff + bytes > di.bytes() {
            let esize = di.dtype.bytes().max(1);
            return Err(it.mem.oob(
                first.base.buf,
                vec![(doff / esize) as i64],
                vec![di.numel],
                l.tid,
                pc,
            ));
        }
        it.mem
            .aligned(first.base.buf, doff, bytes, name, l.tid, pc)?;
        // Both offsets are 32-bit unsigned registers, added without wrapping: a negative one
        // is past any tensor's end.
        let at = u64::from(o.voffset as u32) + u64::from(o.soffset as u32);
        let mut data = [0u8; 16];
        if o.pred {
            if at < tensor_bytes {
                it.mem
                    .aligned(first.tensor.buf, at as usize, bytes, name, l.tid, pc)?;
            }
            // The range check is per dword: a multi-dword load that straddles the end
            // reads its in-range dwords.
            for dw in 0..bytes.div_ceil(4) {
                let (a, len) = (at + 4 * dw as u64, bytes.min(4));
                if a + len as u64 <= tensor_bytes {
                    let who = Rec {
                        tid: l.tid as u16,
                        kind: Kind::IntrinsicRead,
                        pc,
                    };
                    let d = it
                        .mem
                        .read(&l.local, first.tensor.buf, a as usize, len, who)?;
                    data[4 * dw..4 * dw + len].copy_from_slice(&d[..len]);
                }
            }
        }
        let who = Rec {
            tid: l.tid as u16,
            kind: Kind::AsyncWrite,
            pc,
        };
        let when = it.mem.when(l.tid);
        it.mem.check_wgmma_reads(first.base.buf, doff, bytes, who)?;
        it.mem
            .shadow
            .async_issue(di.base + doff, bytes, who, when)
            .map_err(|c| it.mem.conflict(c, first.base.buf, who))?;
        l.cp.issue_alone(Copy {
            buf: first.base.buf,
            off: doff,
            len: bytes,
            data,
            pc,
        });
        it.stats.cp_async += 1;
    }
    Ok(())
}

/// The 128-byte swizzle a wgmma descriptor (mode 128B) reads through, on element offsets of
/// `eb`-byte elements from a 1024-byte-aligned tile: byte bits 4-6 ^= bits 7-9.
fn sw128(e: i64, eb: i64) -> i64 {
    let x = e * eb;
    (x ^ (((x >> 7) & 7) << 4)) / eb
}

/// One warp's share of a warpgroup `wgmma.m64n{n}k{k}` (k: 32 bytes of the operand type):
/// rows `16·(warp % 4) ..` of the 64-row A slice (K-major, or MN-major: k rows of one 64-column
/// block; or the warp's A register fragments) times the B slice (K-major: `n` rows of k;
/// MN-major: k rows of `n`, in 64-column blocks), added to (or, with `scale_d` 0, replacing)
/// the lanes' accumulators in the mma.sync C layout. The results are queued on each lane and
/// written at its `wgmma.wait_group`, so an accumulator read before the wait sees the old
/// values, as on the GPU where it is undefined.
fn wgmma(
    it: &mut Interp,
    lanes: &mut [Thread],
    w: tl_ir::WgmmaOp,
    pc: u32,
) -> Result<(), SimError> {
    let tl_ir::WgmmaOp {
        n,
        ab,
        b: bt,
        a_regs,
        a_mn_major,
        b_mn_major,
        ..
    } = w;
    let n = n as usize;
    let kk = w.k() as usize;
    let name = it.prog.name(pc as usize);
    let (first, scale, lbo) = match lanes[0].stash {
        Stash::Wgmma(l, s, lbo) => (l, s, lbo),
        _ => return Err(no_stash(it, pc)),
    };
    for l in lanes.iter() {
        match l.stash {
            // Register A is per lane (its own registers); the descriptors must agree.
            Stash::Wgmma(x, s, lb)
                if (a_regs || (x[1].buf == first[1].buf && x[1].elem == first[1].elem))
                    && x[2].buf == first[2].buf
                    && x[2].elem == first[2].elem
                    && s == scale
                    && lb == lbo => {}
            Stash::Wgmma(..) => {
                return Err(SimError::InvalidIr(format!(
                "{name} at {}: the lanes of warp {} pass different operand descriptors or scale_d",
                it.prog.span(pc as usize),
                lanes[0].tid / 32
            )))
            }
            _ => return Err(no_stash(it, pc)),
        }
    }
    let (la, lb) = (first[1], first[2]);
    let mut slices = vec![(lb, "B", bt)];
    if !a_regs {
        slices.push((la, "A", ab));
    }
    for &(loc, what, dt) in &slices {
        if (loc.elem * dt.bytes() as i64) % 16 != 0 {
            return Err(SimError::InvalidIr(format!(
                "{name} at {}: the {what} slice starts at element {}, not on a 16-byte boundary",
                it.prog.span(pc as usize),
                loc.elem
            )));
        }
    }
    if b_mn_major && (lbo <= 0 || lbo % 1024 != 0) {
        return Err(SimError::InvalidIr(format!(
            "{name} at {}: an MN-major B needs its 64-column blocks a positive multiple of 1024 bytes apart (got {lbo})",
            it.prog.span(pc as usize)
        )));
    }
    let who = Rec {
        tid: lanes[0].tid as u16,
        kind: Kind::IntrinsicRead,
        pc,
    };
    // Every element read is checked for races as it is read, and for the async-proxy fence
    // afterwards (a missing barrier is the better explanation when both are wrong).
    let mut read_at: Vec<(u32, usize, usize)> = Vec::with_capacity(kk * (16 + n));
    let mut load = |it: &mut Interp,
                    loc: Loc,
                    e: i64,
                    dt: DType,
                    what: &'static str|
     -> Result<f64, SimError> {
        let eb = dt.bytes();
        let at = Loc {
            buf: loc.buf,
            elem: sw128(loc.elem + e, eb as i64),
        };
        let off = operand(
            it,
            &lanes[0],
            at,
            need(1, Scope::Shared, Some(eb), what),
            pc,
        )?;
        let b = it.mem.read(&lanes[0].local, at.buf, off, eb, who)?;
        read_at.push((at.buf, off, eb));
        Ok(elem::decode(&b[..eb], dt).as_f64())
    };
    let w4 = ((lanes[0].tid / 32) % 4) as i64;
    // Elements per 128-byte row of a K-major operand tile.
    let row_a = 128 / ab.bytes() as i64;
    let row_b = 128 / bt.bytes() as i64;
    let mut a = vec![vec![0f64; kk]; 16];
    if !a_regs {
        for (r, row) in a.iter_mut().enumerate() {
            for (k, x) in row.iter_mut().enumerate() {
                let m = 16 * w4 + r as i64;
                let e = if a_mn_major {
                    k as i64 * 64 + m
                } else {
                    m * row_a + k as i64
                };
                *x = load(it, la, e, ab, "A")?;
            }
        }
    }
    let block = lbo / bt.bytes() as i64;
    let mut b = vec![vec![0f64; kk]; n];
    for (nn, row) in b.iter_mut().enumerate() {
        for (k, x) in row.iter_mut().enumerate() {
            let e = if b_mn_major {
                (nn as i64 / 64) * block + k as i64 * 64 + nn as i64 % 64
            } else {
                nn as i64 * row_b + k as i64
            };
            *x = load(it, lb, e, bt, "B")?;
        }
    }
    let mut read_bytes = Vec::with_capacity(2 * read_at.len());
    for (buf, off, eb) in read_at {
        it.mem.check_proxy_read(buf, off, eb, who)?;
        let base = it.mem.info(buf).base;
        read_bytes.extend((0..eb).map(|i| base + off + i));
    }
    // The shared bytes stay "being read" until lane 0's result is retired by its wait.
    it.mem.wgmma_reads_begin(&read_bytes, lanes[0].tid / 32, pc);
    let mut reads = Some(read_bytes);
    if a_regs {
        // The mma.sync A fragment of the warp's 16 rows, read from each lane's registers.
        for (lane, l) in lanes.iter().enumerate() {
            let Stash::Wgmma([_, la, _], ..) = l.stash else {
                return Err(no_stash(it, pc));
            };
            let off = operand(it, l, la, need(8, Scope::Local, Some(2), "A"), pc)?;
            let rd = Rec {
                tid: l.tid as u16,
                kind: Kind::IntrinsicRead,
                pc,
            };
            let bytes = it.mem.read(&l.local, la.buf, off, 16, rd)?;
            for i in 0..8 {
                let (r, k) = tensor_core::a_coord(lane, i);
                a[r][k] = elem::decode(&bytes[2 * i..2 * i + 2], ab).as_f64();
            }
        }
    }
    let regs = n / 2;
    for (lane, l) in lanes.iter_mut().enumerate() {
        let Stash::Wgmma([ld, ..], ..) = l.stash else {
            return Err(no_stash(it, pc));
        };
        let off = operand(it, l, ld, need(4 * regs, Scope::Local, Some(4), "D"), pc)?;
        let mut out = Vec::with_capacity(4 * regs);
        for i in 0..regs {
            // n8 atom i/4 of the mma.sync accumulator layout, element i%4 of it.
            let (row, c) = tensor_core::c_coord(lane, i % 4);
            let col = 8 * (i / 4) + c;
            // Back-to-back wgmmas on one accumulator chain in hardware: an earlier one's
            // result, still in flight, is what this one adds to.
            let mut s = if scale != 0 {
                match in_flight(&l.wg, ld.buf, off + 4 * i) {
                    Some(v) => v as f64,
                    None => {
                        let rd = Rec {
                            tid: l.tid as u16,
                            kind: Kind::IntrinsicRead,
                            pc,
                        };
                        let bytes = it.mem.read(&l.local, ld.buf, off + 4 * i, 4, rd)?;
                        elem::decode(&bytes[..4], DType::F32).as_f64()
                    }
                }
            } else {
                0.0
            };
            for k in 0..kk {
                s += a[row][k] * b[col][k];
            }
            out.extend_from_slice(&(s as f32).to_le_bytes());
        }
        l.wg.issue(crate::exec::PendingWrite {
            buf: ld.buf,
            off,
            bytes: out,
            shared_reads: reads.take().unwrap_or_default(),
        });
    }
    Ok(())
}

/// The newest in-flight wgmma result for the f32 at byte `off` of local buffer `buf`.
fn in_flight(
    wg: &crate::cp_async::AsyncGroups<crate::exec::PendingWrite>,
    buf: u32,
    off: usize,
) -> Option<f32> {
    for w in wg.newest_first() {
        if w.buf == buf && off >= w.off && off + 4 <= w.off + w.bytes.len() {
            let at = off - w.off;
            let b = w.bytes.get(at..at + 4)?;
            return Some(f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        }
    }
    None
}
