//! The symmetric heap: every rank allocates one block of device memory of the same size, and
//! every rank maps all of them, in rank order, into one reserved address range — rank `r`'s at
//! `base + r·stride` — so that a kernel reaches rank `p`'s copy of any element by adding
//! `(p − rank)·stride` to its address (`heap_stride`, the last scalar argument of every
//! multi-rank kernel). Buffers are carved from it by a bump allocator that every rank runs
//! alike; the rendezvous checks that they did.
//!
//! CUDA's virtual memory management (driver API): `cuMemCreate` with a POSIX file-descriptor
//! handle, `cuMemExportToShareableHandle`, the descriptors passed between ranks
//! ([`crate::fdpass`]), `cuMemImportFromShareableHandle`, `cuMemAddressReserve`, `cuMemMap`
//! and `cuMemSetAccess` for this rank's GPU. No multicast (NVLS), which must stay off on the
//! machines here.
//!
//! Run on 2, 3 and 4 H100s (NVLink) and as 2 and 4 processes sharing one GPU, by the
//! `distributed` example (docs/performance.md, "Multi-rank"). The copy-engine producer's
//! stream operations ([`SymmetricHeap::put_signal_async`], `signal_async`, `wait_async`) are
//! here; the all-gather built from them is in [`crate::copy_engine`].

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use cudarc::driver::sys;

use crate::copy_engine::CopyStream;
use crate::error::{DistError, Result};
use crate::fdpass::exchange_fds;
use crate::rendezvous::Rendezvous;

/// A buffer in the symmetric heap: the same offset and size on every rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SymmetricBuffer {
    pub offset: u64,
    pub bytes: u64,
}

pub struct SymmetricHeap {
    rank: usize,
    world: usize,
    ordinal: usize,
    /// The reserved range: `world · stride` bytes from `base`.
    base: u64,
    stride: u64,
    /// Every rank's allocation handle (this rank's own first created, the rest imported),
    /// mapped at `base + r·stride`.
    handles: Vec<sys::CUmemGenericAllocationHandle>,
    next: u64,
    _ctx: std::sync::Arc<cudarc::driver::CudaContext>,
}

/// cudarc's error of `op` on rank `me`, as the heap's.
pub(crate) fn driver_error(
    me: usize,
    op: &str,
) -> impl FnOnce(cudarc::driver::DriverError) -> DistError {
    let op = op.to_string();
    move |e| DistError::Driver {
        me,
        op,
        detail: e.to_string(),
    }
}

pub(crate) fn check(me: usize, op: &str, r: sys::CUresult) -> Result<()> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(DistError::Driver {
            me,
            op: op.to_string(),
            detail: format!("{r:?}"),
        })
    }
}

impl SymmetricHeap {
    /// Set up a heap of at least `bytes` per rank on GPU `ordinal` (collective: every rank
    /// calls it with the same size).
    pub fn new(rv: &Rendezvous, ordinal: usize, bytes: u64) -> Result<SymmetricHeap> {
        let me = rv.rank();
        tl_runtime::cuda_probe::check(ordinal).map_err(|e| DistError::Driver {
            me,
            op: format!("opening cuda:{ordinal} for the symmetric heap"),
            detail: e.to_string(),
        })?;
        let ctx = std::panic::catch_unwind(|| cudarc::driver::CudaContext::new(ordinal))
            .map_err(|_| DistError::Driver {
                me,
                op: "loading the CUDA driver".into(),
                detail: "cudarc's loader failed".into(),
            })?
            .map_err(|e| DistError::Driver {
                me,
                op: format!("creating the context of cuda:{ordinal}"),
                detail: e.to_string(),
            })?;
        ctx.bind_to_thread()
            .map_err(driver_error(me, "making the context current"))?;
        let prop = sys::CUmemAllocationProp {
            type_: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
            requestedHandleTypes:
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            location: sys::CUmemLocation {
                type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                id: ordinal as i32,
            },
            win32HandleMetaData: std::ptr::null_mut(),
            allocFlags: Default::default(),
        };
        let mut gran = 0usize;
        // SAFETY: `prop` is a valid property struct and `gran` a valid out-pointer.
        check(me, "cuMemGetAllocationGranularity", unsafe {
            sys::cuMemGetAllocationGranularity(
                &mut gran,
                &prop,
                sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED,
            )
        })?;
        let gran = (gran as u64).max(2 << 20);
        let stride = bytes.max(1).div_ceil(gran) * gran;
        // The ranks must agree on the size (and so on the stride).
        let sizes = rv.all_gather(&stride.to_le_bytes())?;
        for (r, s) in sizes.iter().enumerate() {
            if s.as_slice() != stride.to_le_bytes() {
                return Err(DistError::Mismatch {
                    what: "the symmetric heap's size".into(),
                    detail: format!("rank {r} asked for a different size than rank {me}"),
                });
            }
        }
        let mut own = 0 as sys::CUmemGenericAllocationHandle;
        // SAFETY: valid out-pointer and property struct.
        check(me, "cuMemCreate", unsafe {
            sys::cuMemCreate(&mut own, stride as usize, &prop, 0)
        })?;
        let mut fd: i32 = -1;
        // SAFETY: the out-pointer receives an int descriptor for a POSIX FD handle type.
        check(me, "cuMemExportToShareableHandle", unsafe {
            sys::cuMemExportToShareableHandle(
                &mut fd as *mut i32 as *mut std::ffi::c_void,
                own,
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                0,
            )
        })?;
        // SAFETY: the driver returned a fresh descriptor that we now own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let job = rv.config().addr.replace([':', '.'], "_");
        let fds = exchange_fds(rv, &job, fd.as_fd())?;
        let world = rv.world();
        let mut handles = Vec::with_capacity(world);
        for (r, f) in fds.iter().enumerate() {
            if r == me {
                handles.push(own);
                continue;
            }
            let mut h = 0 as sys::CUmemGenericAllocationHandle;
            let raw = f.as_raw_fd() as usize;
            // SAFETY: for POSIX FD handles the OS handle argument is the descriptor itself.
            check(me, &format!("importing rank {r}'s heap"), unsafe {
                sys::cuMemImportFromShareableHandle(
                    &mut h,
                    raw as *mut std::ffi::c_void,
                    sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                )
            })?;
            handles.push(h);
        }
        let total = stride * world as u64;
        let mut base: sys::CUdeviceptr = 0;
        // SAFETY: valid out-pointer; alignment = the granularity.
        check(me, "cuMemAddressReserve", unsafe {
            sys::cuMemAddressReserve(&mut base, total as usize, gran as usize, 0, 0)
        })?;
        for (r, h) in handles.iter().enumerate() {
            // SAFETY: the range is reserved above and `h` is a live handle of `stride` bytes.
            check(me, &format!("mapping rank {r}'s heap"), unsafe {
                sys::cuMemMap(base + r as u64 * stride, stride as usize, 0, *h, 0)
            })?;
        }
        let access = sys::CUmemAccessDesc {
            location: sys::CUmemLocation {
                type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                id: ordinal as i32,
            },
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // SAFETY: the whole range is mapped.
        check(
            me,
            "cuMemSetAccess (can this GPU reach its peers' memory? check `nvidia-smi topo -m`)",
            unsafe { sys::cuMemSetAccess(base, total as usize, &access, 1) },
        )?;
        rv.barrier()?;
        Ok(SymmetricHeap {
            rank: me,
            world,
            ordinal,
            base,
            stride,
            handles,
            next: 0,
            _ctx: ctx,
        })
    }

    /// `heap_stride`: bytes between consecutive ranks' heaps.
    pub fn stride(&self) -> u64 {
        self.stride
    }
    pub fn rank(&self) -> usize {
        self.rank
    }
    pub fn world(&self) -> usize {
        self.world
    }
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// Carve `bytes` (aligned to 256) from the heap (collective: every rank makes the same
    /// allocations in the same order; the rendezvous checks it).
    pub fn alloc(&mut self, rv: &Rendezvous, bytes: u64) -> Result<SymmetricBuffer> {
        let offset = self.next.div_ceil(256) * 256;
        if offset + bytes > self.stride {
            return Err(DistError::Heap(format!(
                "the symmetric heap ({} bytes per rank) has {} bytes left, {bytes} asked for: make it larger",
                self.stride,
                self.stride - offset.min(self.stride)
            )));
        }
        let mine = [offset.to_le_bytes(), bytes.to_le_bytes()].concat();
        let all = rv.all_gather(&mine)?;
        if let Some((r, _)) = all.iter().enumerate().find(|(_, a)| a.as_slice() != mine) {
            return Err(DistError::Mismatch {
                what: "a symmetric allocation".into(),
                detail: format!(
                    "rank {} asked for {bytes} bytes at offset {offset}; rank {r} for something else",
                    self.rank
                ),
            });
        }
        self.next = offset + bytes;
        Ok(SymmetricBuffer { offset, bytes })
    }

    /// Make the heap's context current on this thread.
    pub(crate) fn bind(&self) -> Result<()> {
        self._ctx
            .bind_to_thread()
            .map_err(driver_error(self.rank, "making the context current"))
    }

    /// The heap's context (streams and events are created in it).
    pub(crate) fn context(&self) -> &std::sync::Arc<cudarc::driver::CudaContext> {
        &self._ctx
    }

    /// The device address of rank `rank`'s copy of `buf`.
    pub fn ptr(&self, buf: SymmetricBuffer, rank: usize) -> u64 {
        self.base + rank as u64 * self.stride + buf.offset
    }

    /// Copy `data` into this rank's copy of `buf` (from its start; synchronous).
    pub fn write(&self, buf: SymmetricBuffer, data: &[u8]) -> Result<()> {
        if data.len() as u64 > buf.bytes {
            return Err(DistError::Heap(format!(
                "{} bytes written into a {}-byte symmetric buffer",
                data.len(),
                buf.bytes
            )));
        }
        self.bind()?;
        // SAFETY: the destination lies in this rank's mapped heap (checked size).
        check(self.rank, "cuMemcpyHtoD into the symmetric heap", unsafe {
            sys::cuMemcpyHtoD_v2(
                self.ptr(buf, self.rank),
                data.as_ptr() as *const std::ffi::c_void,
                data.len(),
            )
        })
    }

    /// This rank's copy of `buf`, copied to the host (synchronous).
    pub fn read(&self, buf: SymmetricBuffer) -> Result<Vec<u8>> {
        let mut out = vec![0u8; buf.bytes as usize];
        self.bind()?;
        // SAFETY: the source lies in this rank's mapped heap; `out` has `bytes` bytes.
        check(self.rank, "cuMemcpyDtoH from the symmetric heap", unsafe {
            sys::cuMemcpyDtoH_v2(
                out.as_mut_ptr() as *mut std::ffi::c_void,
                self.ptr(buf, self.rank),
                out.len(),
            )
        })?;
        Ok(out)
    }

    /// The copy engine as producer (no SM time): copy `bytes` from device address `src` (this
    /// GPU) into rank `peer`'s copy of `buf` at byte `offset`, then write `value` into rank
    /// `peer`'s 32-bit flag at byte `flag_offset` of `flags` — both queued on `stream`, in
    /// that order (the driver issues a system-wide fence before a stream write). A consumer
    /// kernel on the peer waits for the flag (`t.wait`), or its stream does
    /// ([`wait_async`](Self::wait_async)); [`crate::copy_engine::CopyEngineAllGather`] is built
    /// from these.
    #[allow(clippy::too_many_arguments)]
    pub fn put_signal_async(
        &self,
        stream: &CopyStream,
        src: u64,
        peer: usize,
        (buf, offset): (SymmetricBuffer, u64),
        bytes: u64,
        (flags, flag_offset): (SymmetricBuffer, u64),
        value: u32,
    ) -> Result<()> {
        if offset + bytes > buf.bytes || flag_offset + 4 > flags.bytes || peer >= self.world {
            return Err(DistError::Heap(format!(
                "put_signal_async: {bytes} bytes at {offset} of a {}-byte buffer, flag at {flag_offset} of {} bytes, to rank {peer} of {}",
                buf.bytes, flags.bytes, self.world
            )));
        }
        // SAFETY: both ranges lie in mapped heap memory (checked above); `src` is the caller's
        // device memory of at least `bytes` bytes, alive until the stream passes this copy.
        check(self.rank, "cuMemcpyDtoDAsync to a peer", unsafe {
            sys::cuMemcpyDtoDAsync_v2(
                self.ptr(buf, peer) + offset,
                src,
                bytes as usize,
                stream.raw(),
            )
        })?;
        self.signal_async(stream, peer, (flags, flag_offset), value)
    }

    /// Queue on `stream` a write of `value` into rank `peer`'s 32-bit flag at byte
    /// `flag_offset` of `flags`, after everything queued on `stream` before it (the driver
    /// issues a system-wide fence before a stream write).
    pub fn signal_async(
        &self,
        stream: &CopyStream,
        peer: usize,
        (flags, flag_offset): (SymmetricBuffer, u64),
        value: u32,
    ) -> Result<()> {
        if flag_offset + 4 > flags.bytes || peer >= self.world {
            return Err(DistError::Heap(format!(
                "signal_async: a flag at byte {flag_offset} of a {}-byte buffer, to rank {peer} of {}",
                flags.bytes, self.world
            )));
        }
        // SAFETY: a mapped 4-byte flag.
        check(self.rank, "cuStreamWriteValue32 to a peer's flag", unsafe {
            sys::cuStreamWriteValue32_v2(
                stream.raw(),
                self.ptr(flags, peer) + flag_offset,
                value,
                0,
            )
        })
    }

    /// Queue on `stream` a wait until this rank's 32-bit flag at byte `flag_offset` of `flags`
    /// has reached `value` (`cuStreamWaitValue32`, GEQ: `(i32)(flag − value) ≥ 0`, a counter
    /// comparison that survives wrap-around).
    pub fn wait_async(
        &self,
        stream: &CopyStream,
        (flags, flag_offset): (SymmetricBuffer, u64),
        value: u32,
    ) -> Result<()> {
        if flag_offset + 4 > flags.bytes {
            return Err(DistError::Heap(format!(
                "wait_async: a flag at byte {flag_offset} of a {}-byte buffer",
                flags.bytes
            )));
        }
        // SAFETY: a mapped 4-byte flag of this rank.
        check(self.rank, "cuStreamWaitValue32", unsafe {
            sys::cuStreamWaitValue32_v2(
                stream.raw(),
                self.ptr(flags, self.rank) + flag_offset,
                value,
                0,
            )
        })
    }

    /// This rank's copy of `buf` as a tensor argument of `shape` elements of `dtype`.
    pub fn tensor(
        &self,
        buf: SymmetricBuffer,
        dtype: tl_ir::DType,
        shape: &[usize],
    ) -> Result<tl_runtime::external::ExternalTensor> {
        let n: usize = shape.iter().product();
        if (n * dtype.bytes()) as u64 > buf.bytes {
            return Err(DistError::Heap(format!(
                "a {shape:?} {dtype} tensor needs {} bytes; the buffer has {}",
                n * dtype.bytes(),
                buf.bytes
            )));
        }
        let mut strides = vec![1isize; shape.len()];
        for d in (0..shape.len().saturating_sub(1)).rev() {
            strides[d] = strides[d + 1] * shape[d + 1] as isize;
        }
        // SAFETY: the buffer lies in this rank's mapped heap, which lives as long as `self`;
        // callers keep the heap alive across the launches that use the tensor.
        unsafe {
            tl_runtime::external::ExternalTensor::new(
                self.ptr(buf, self.rank) as *mut std::ffi::c_void,
                dtype,
                shape.to_vec(),
                strides,
                tl_runtime::Device::Cuda(self.ordinal),
            )
        }
        .map_err(|e| DistError::Heap(e.to_string()))
    }
}

impl Drop for SymmetricHeap {
    fn drop(&mut self) {
        let total = self.stride as usize * self.world;
        // SAFETY: unmapping and releasing what `new` mapped and created/imported, once.
        unsafe {
            sys::cuMemUnmap(self.base, total);
            sys::cuMemAddressFree(self.base, total);
            for h in &self.handles {
                sys::cuMemRelease(*h);
            }
        }
    }
}
