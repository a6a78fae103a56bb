//! The copy engines as producers: transfers that take no SM time, queued on streams with the
//! driver's stream memory operations as the signals (`cuStreamWriteValue32` into a peer's flag,
//! `cuStreamWaitValue32` on this rank's). Issue 15 asks for both producers of an all-gather,
//! SM stores and copy engines, measured side by side: [`CopyEngineAllGather`] is the second,
//! with the same buffers and the same entry handshake as the all-gather kernel
//! (`tilelang::kernels::dist::all_gather`), so the two are interchangeable call for call.
//!
//! Nothing here runs without a GPU; the `distributed` example drives it on GPUs
//! (`--kernel all-gather-ce`) and checks its output like the kernel's.

use std::time::{Duration, Instant};

use cudarc::driver::sys;

use crate::error::Result;
use crate::heap::{check, SymmetricBuffer, SymmetricHeap};

/// A CUDA stream of the heap's context, for copy-engine transfers beside the kernels' stream.
pub struct CopyStream {
    pub(crate) raw: sys::CUstream,
    me: usize,
}

impl CopyStream {
    pub fn new(heap: &SymmetricHeap) -> Result<CopyStream> {
        heap.bind()?;
        let mut raw: sys::CUstream = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; flag 1 = CU_STREAM_NON_BLOCKING.
        check(heap.rank(), "cuStreamCreate", unsafe {
            sys::cuStreamCreate(&mut raw, 1)
        })?;
        Ok(CopyStream {
            raw,
            me: heap.rank(),
        })
    }

    /// Wait for everything queued on the stream.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: a live stream.
        check(self.me, "cuStreamSynchronize", unsafe {
            sys::cuStreamSynchronize(self.raw)
        })
    }

    /// Work queued on this stream from now on waits for the work `event` was last recorded
    /// after (on whichever stream).
    fn wait_for(&self, event: &Event) -> Result<()> {
        // SAFETY: a live stream and event.
        check(self.me, "cuStreamWaitEvent", unsafe {
            sys::cuStreamWaitEvent(self.raw, event.raw, 0)
        })
    }
}

impl Drop for CopyStream {
    fn drop(&mut self) {
        // SAFETY: destroying the stream created in `new`, once.
        unsafe {
            sys::cuStreamDestroy_v2(self.raw);
        }
    }
}

/// A CUDA event with timing.
struct Event {
    raw: sys::CUevent,
    me: usize,
}

impl Event {
    fn new(heap: &SymmetricHeap) -> Result<Event> {
        heap.bind()?;
        let mut raw: sys::CUevent = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; flag 0 = CU_EVENT_DEFAULT (timed).
        check(heap.rank(), "cuEventCreate", unsafe {
            sys::cuEventCreate(&mut raw, 0)
        })?;
        Ok(Event {
            raw,
            me: heap.rank(),
        })
    }

    fn record(&self, stream: &CopyStream) -> Result<()> {
        // SAFETY: a live event and stream of one context.
        check(self.me, "cuEventRecord", unsafe {
            sys::cuEventRecord(self.raw, stream.raw)
        })
    }

    /// Whether the work before the event's last record has finished.
    fn done(&self) -> Result<bool> {
        // SAFETY: a live event.
        match unsafe { sys::cuEventQuery(self.raw) } {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            r => check(self.me, "cuEventQuery", r).map(|_| false),
        }
    }

    /// Milliseconds from `start` to this event (both done).
    fn since(&self, start: &Event) -> Result<f64> {
        let mut ms = 0f32;
        // SAFETY: two live, recorded, finished events.
        check(self.me, "cuEventElapsedTime", unsafe {
            sys::cuEventElapsedTime(&mut ms, start.raw, self.raw)
        })?;
        Ok(f64::from(ms))
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: destroying the event created in `new`, once.
        unsafe {
            sys::cuEventDestroy_v2(self.raw);
        }
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
}

/// An all-gather whose bytes the copy engines move: one stream per peer, so the transfers to
/// different peers run at once (a stream runs its copies one after another). Call `epoch`
/// (1, 2, …) of rank `me`, on each peer `p`'s stream:
/// 1. write `epoch` into `p`'s `READY[me]` (this rank has entered the call, so it no longer
///    reads what earlier calls gathered), and wait until `READY[p]` here reaches `epoch`;
/// 2. copy the shard into `p`'s `OUT[me]`, then write `epoch` into `p`'s `FLAGS[me]` (the
///    driver fences before the write, so the flag follows the bytes);
/// 3. wait until `FLAGS[p]` here reaches `epoch`: `p`'s shard has landed.
///
/// A lead stream starts the peers' streams and ends when all have: the call is timed between
/// its two events. The own row is a local copy on the lead stream.
pub struct CopyEngineAllGather<'h> {
    heap: &'h SymmetricHeap,
    lead: CopyStream,
    /// Stream `i` serves peer `(me + 1 + i) mod R`.
    lanes: Vec<CopyStream>,
    start: Event,
    end: Event,
    lane_done: Vec<Event>,
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
            start: Event::new(heap)?,
            end: Event::new(heap)?,
            lane_done: (0..peers)
                .map(|_| Event::new(heap))
                .collect::<Result<_>>()?,
        })
    }

    /// Queue call `epoch` (see the type's description); [`wait`](Self::wait) for it.
    pub fn queue(&self, b: &GatherBuffers, epoch: u32) -> Result<()> {
        let h = self.heap;
        let (me, world) = (h.rank(), h.world());
        let slot = |buf: SymmetricBuffer, r: usize| (buf, 4 * r as u64);
        if b.bytes * world as u64 > b.out.bytes || b.flags.bytes < 4 * world as u64 {
            return Err(crate::DistError::Heap(format!(
                "all-gather by copy engines: {world} ranks × {} bytes do not fit OUT's {} bytes, or {world} flags FLAGS' {}",
                b.bytes, b.out.bytes, b.flags.bytes
            )));
        }
        self.start.record(&self.lead)?;
        // The own row.
        // SAFETY: `src` holds `bytes` bytes (the caller's shard); the destination is row `me`
        // of this rank's `out`, checked to fit above.
        check(me, "cuMemcpyDtoDAsync (own row)", unsafe {
            sys::cuMemcpyDtoDAsync_v2(
                h.ptr(b.out, me) + me as u64 * b.bytes,
                b.src,
                b.bytes as usize,
                self.lead.raw,
            )
        })?;
        for (i, (lane, done)) in self.lanes.iter().zip(&self.lane_done).enumerate() {
            let p = (me + 1 + i) % world;
            lane.wait_for(&self.start)?;
            h.signal_async(lane, p, slot(b.ready, me), epoch)?;
            h.wait_async(lane, slot(b.ready, p), epoch)?;
            h.put_signal_async(
                lane,
                b.src,
                p,
                (b.out, me as u64 * b.bytes),
                b.bytes,
                slot(b.flags, me),
                epoch,
            )?;
            h.wait_async(lane, slot(b.flags, p), epoch)?;
            done.record(lane)?;
            self.lead.wait_for(done)?;
        }
        self.end.record(&self.lead)
    }

    /// Wait up to `limit` for the last queued call: the milliseconds from its start to its
    /// end, or `None` if it still runs (a peer that never signals).
    pub fn wait(&self, limit: Duration) -> Result<Option<f64>> {
        let t = Instant::now();
        while !self.end.done()? {
            if t.elapsed() > limit {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_micros(20));
        }
        self.end.since(&self.start).map(Some)
    }
}
