//! The copy engines as producers: transfers that take no SM time, queued on streams with the
//! driver's stream memory operations as the signals (`cuStreamWriteValue32` into a peer's flag,
//! `cuStreamWaitValue32` on this rank's). Issue 15 asks for both producers of an all-gather,
//! SM stores and copy engines, measured side by side: [`CopyEngineAllGather`] is the second,
//! with the same buffers and the same entry handshake as the all-gather kernel
//! (`tilelang::kernels::dist::all_gather`), and its flags counting as the kernel's do
//! ([`GatherBuffers::flag_per_call`]), so calls of the two may alternate on one set of
//! buffers.
//!
//! Nothing here runs without a GPU; the `distributed` example drives it on GPUs
//! (`--kernel all-gather-ce`) and checks its output like the kernel's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{sys, CudaEvent, CudaStream};

use crate::error::Result;
use crate::heap::{check, driver_error, SymmetricBuffer, SymmetricHeap};

/// A CUDA stream of the heap's context (cudarc's), for copy-engine transfers beside the
/// kernels' stream; the stream memory operations take its raw handle.
pub struct CopyStream {
    stream: Arc<CudaStream>,
    me: usize,
}

impl CopyStream {
    pub fn new(heap: &SymmetricHeap) -> Result<CopyStream> {
        // A non-blocking stream: ordered against no other, the legacy default stream included.
        let stream = heap
            .context()
            .new_stream()
            .map_err(driver_error(heap.rank(), "cuStreamCreate"))?;
        Ok(CopyStream {
            stream,
            me: heap.rank(),
        })
    }

    pub(crate) fn raw(&self) -> sys::CUstream {
        self.stream.cu_stream()
    }

    /// The stream's handle, to launch kernels on it (`tl_runtime::Stream::Raw`): a local
    /// job's ranks each launch on a stream of their own.
    pub fn handle(&self) -> usize {
        self.raw() as usize
    }

    /// Wait for everything queued on the stream.
    pub fn synchronize(&self) -> Result<()> {
        self.stream
            .synchronize()
            .map_err(driver_error(self.me, "cuStreamSynchronize"))
    }

    /// Wait for everything queued on the stream so far, for at most `limit`: `Ok(false)` when
    /// it still runs then (a multi-rank kernel waiting on a peer that never comes would
    /// otherwise block the host forever).
    pub fn synchronize_within(&self, limit: Duration) -> Result<bool> {
        let done = self
            .stream
            .record_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING))
            .map_err(driver_error(self.me, "cuEventRecord"))?;
        let start = Instant::now();
        while !done.is_complete() {
            if start.elapsed() > limit {
                return Ok(false);
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        Ok(true)
    }

    /// Work queued on this stream from now on waits for the work `event` was last recorded
    /// after (on whichever stream).
    fn wait_for(&self, event: &CudaEvent) -> Result<()> {
        self.stream
            .wait(event)
            .map_err(driver_error(self.me, "cuStreamWaitEvent"))
    }

    /// Record in `event` the work queued on this stream so far.
    fn record(&self, event: &CudaEvent) -> Result<()> {
        event
            .record(&self.stream)
            .map_err(driver_error(self.me, "cuEventRecord"))
    }
}

/// A timed event, or with `!timed` one that only orders streams (cheaper to record).
fn event(heap: &SymmetricHeap, timed: bool) -> Result<CudaEvent> {
    let flags = timed.then_some(sys::CUevent_flags::CU_EVENT_DEFAULT);
    heap.context()
        .new_event(flags)
        .map_err(driver_error(heap.rank(), "cuEventCreate"))
}

/// Whether the work before `event`'s last record has finished (cudarc's `is_complete` would
/// take an error for "not yet").
fn finished(me: usize, event: &CudaEvent) -> Result<bool> {
    // SAFETY: a live event.
    match unsafe { sys::cuEventQuery(event.cu_event()) } {
        sys::CUresult::CUDA_SUCCESS => Ok(true),
        sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        r => check(me, "cuEventQuery", r).map(|_| false),
    }
}

/// The buffers of one all-gather: this rank's shard at device address `src` (`bytes` long),
/// and the symmetric `out` (`[R, bytes]`), `flags` and `ready` (`[R]` i32, zero before the
/// first call), as the all-gather kernel takes them.
#[derive(Clone, Copy, Debug)]
pub struct GatherBuffers {
    pub src: u64,
    pub bytes: u64,
    pub out: SymmetricBuffer,
    pub flags: SymmetricBuffer,
    pub ready: SymmetricBuffer,
    /// What a call adds to a peer's flag: the kernel's count per call
    /// (`tilelang::kernels::dist::ARRIVALS_PER_CALL`, whatever its blocks per peer), so a flag
    /// reads `epoch · flag_per_call` (mod 2^32) after call `epoch` whichever of the two made it.
    pub flag_per_call: u32,
}

/// An all-gather whose bytes the copy engines move: one stream per peer, so the transfers to
/// different peers run at once (a stream runs its copies one after another). Call `epoch`
/// (1, 2, …) of rank `me`, with `n = epoch · flag_per_call`:
/// 1. on the lead stream: write `epoch` into every peer's `READY[me]` (this rank has entered
///    the call, so it no longer reads what earlier calls gathered), and copy the own row;
/// 2. on each peer `p`'s stream: wait until `READY[p]` here reaches `epoch`, copy the shard
///    into `p`'s `OUT[me]`, then write `n` into `p`'s `FLAGS[me]` (the driver fences before
///    the write, so the flag follows the bytes);
/// 3. on the lead stream, once every peer stream is done: wait until each `FLAGS[p]` here
///    reaches `n` — every peer's shard has landed.
///
/// No signal is queued behind a wait on the same stream except a peer stream's flag behind
/// its `READY` wait, which every peer's step 1 satisfies without waiting on anything of this
/// call; so streams that share a hardware queue (more than `CUDA_DEVICE_MAX_CONNECTIONS`) cannot
/// wait on each other in a ring. The call is timed between two events on the lead stream.
///
/// The streams are this heap's own, ordered against no other stream: whatever writes `src`
/// and reads `OUT` on other streams must be finished (synchronized) around the calls, as for
/// any second stream.
pub struct CopyEngineAllGather<'h> {
    heap: &'h SymmetricHeap,
    lead: CopyStream,
    /// Stream `i` serves peer `(me + 1 + i) mod R`.
    lanes: Vec<CopyStream>,
    start: CudaEvent,
    /// Recorded after the lead stream's `READY` signals: the peer streams start from it.
    fork: CudaEvent,
    end: CudaEvent,
    lane_done: Vec<CudaEvent>,
}

impl<'h> CopyEngineAllGather<'h> {
    pub fn new(heap: &'h SymmetricHeap) -> Result<CopyEngineAllGather<'h>> {
        let peers = heap.world() - 1;
        Ok(CopyEngineAllGather {
            heap,
            lead: CopyStream::new(heap)?,
            lanes: (0..peers)
                .map(|_| CopyStream::new(heap))
                .collect::<Result<_>>()?,
            start: event(heap, true)?,
            fork: event(heap, false)?,
            end: event(heap, true)?,
            lane_done: (0..peers)
                .map(|_| event(heap, false))
                .collect::<Result<_>>()?,
        })
    }

    /// Queue call `epoch` (see the type's description); [`wait`](Self::wait) for it.
    pub fn queue(&self, b: &GatherBuffers, epoch: u32) -> Result<()> {
        let h = self.heap;
        let (me, world) = (h.rank(), h.world());
        let flags_bytes = 4 * world as u64;
        if b.bytes * world as u64 > b.out.bytes
            || b.flags.bytes < flags_bytes
            || b.ready.bytes < flags_bytes
        {
            return Err(crate::DistError::Heap(format!(
                "all-gather by copy engines: {world} ranks × {} bytes do not fit OUT's {} bytes, or {world} flags FLAGS' {} or READY's {}",
                b.bytes, b.out.bytes, b.flags.bytes, b.ready.bytes
            )));
        }
        h.bind()?;
        let slot = |buf: SymmetricBuffer, r: usize| (buf, 4 * r as u64);
        let n = epoch.wrapping_mul(b.flag_per_call.max(1));
        let peers = |i: usize| (me + 1 + i) % world;
        self.lead.record(&self.start)?;
        for i in 0..self.lanes.len() {
            h.signal_async(&self.lead, peers(i), slot(b.ready, me), epoch)?;
        }
        // SAFETY: `src` holds `bytes` bytes (the caller's shard); the destination is row `me`
        // of this rank's `out`, checked to fit above.
        check(me, "cuMemcpyDtoDAsync (own row)", unsafe {
            sys::cuMemcpyDtoDAsync_v2(
                h.ptr(b.out, me) + me as u64 * b.bytes,
                b.src,
                b.bytes as usize,
                self.lead.raw(),
            )
        })?;
        self.lead.record(&self.fork)?;
        for (i, (lane, done)) in self.lanes.iter().zip(&self.lane_done).enumerate() {
            let p = peers(i);
            lane.wait_for(&self.fork)?;
            h.wait_async(lane, slot(b.ready, p), epoch)?;
            h.put_signal_async(
                lane,
                b.src,
                p,
                (b.out, me as u64 * b.bytes),
                b.bytes,
                slot(b.flags, me),
                n,
            )?;
            lane.record(done)?;
            self.lead.wait_for(done)?;
        }
        for i in 0..self.lanes.len() {
            h.wait_async(&self.lead, slot(b.flags, peers(i)), n)?;
        }
        self.lead.record(&self.end)
    }

    /// Wait up to `limit` for the last queued call: the milliseconds from its start to its
    /// end, or `None` if it still runs (a peer that never signals). After `None` the streams
    /// still wait on the heap's memory: dropping the heap then unmaps it under them, so a
    /// caller that gives up should exit the process (as the `distributed` example does).
    pub fn wait(&self, limit: Duration) -> Result<Option<f64>> {
        let (t, me) = (Instant::now(), self.heap.rank());
        while !finished(me, &self.end)? {
            if t.elapsed() > limit {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_micros(20));
        }
        self.start
            .elapsed_ms(&self.end)
            .map(|ms| Some(f64::from(ms)))
            .map_err(driver_error(me, "cuEventElapsedTime"))
    }
}
