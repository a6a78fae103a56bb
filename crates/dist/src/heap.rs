//! The symmetric heap: every rank allocates one block of device memory of the same size, and
//! every rank maps all of them. Buffers are carved from it by a bump allocator that every rank
//! runs alike; the rendezvous checks that they did.
//!
//! Two mappings ([`HeapMapping`]):
//! - **VMM** (the default, [`crate::vmm`]): CUDA's virtual memory management puts rank `r`'s
//!   heap at `base + r·stride` in every process, so a kernel reaches rank `p`'s copy of any
//!   element by adding `(p − rank)·stride` to its address (`heap_stride`, the last scalar
//!   argument of every multi-rank kernel).
//! - **Legacy CUDA IPC** (`TILELANG_DIST_IPC=legacy`, [`crate::legacy_ipc`]): `cuMemAlloc`
//!   and `cuIpcOpenMemHandle`, for drivers, containers or devices without VMM's shareable
//!   handles. The peers' heaps land wherever the driver puts them, so kernels address them
//!   through tables: built with `Kernel::with_peer_tables`, launched with
//!   [`SymmetricHeap::peer_table`] for each symmetric buffer.
//!
//! Either way the heap keeps a device table of every rank's address of each buffer it carved
//! ([`SymmetricHeap::peer_table`]), so peer-table kernels also run on the flat heap.
//!
//! Run on 2, 3 and 4 H100s (NVLink) and as 2 and 4 processes sharing one GPU, by the
//! `distributed` example (docs/performance.md, "Multi-rank"). The copy-engine producer's
//! stream operations ([`SymmetricHeap::put_signal_async`], `signal_async`, `wait_async`) are
//! here; the all-gather built from them is in [`crate::copy_engine`].

use cudarc::driver::sys;

use crate::copy_engine::CopyStream;
use crate::error::{DistError, Result};
use crate::legacy_ipc::LegacyMapping;
use crate::rendezvous::Rendezvous;
use crate::vmm::VmmMapping;

/// Device memory for the peer tables of one heap: `PEER_TABLE_BYTES / (8·world)` buffers.
const PEER_TABLE_BYTES: u64 = 64 << 10;

/// How every rank maps its peers' heaps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeapMapping {
    /// CUDA virtual memory management, every rank's heap one stride from the next: the
    /// kernels' flat addressing (`heap_stride`).
    Vmm,
    /// Legacy CUDA IPC (`cuIpcGetMemHandle` / `cuIpcOpenMemHandle`): the fallback where VMM's
    /// file-descriptor handles are not available; kernels need peer tables.
    LegacyIpc,
    /// NVSHMEM's symmetric heap ([`crate::nvshmem`]): for kernels built with
    /// `Kernel::with_nvshmem` (peers on any transport NVSHMEM has), or with peer tables
    /// (peers NVLink or PCIe reaches).
    Nvshmem,
}

impl HeapMapping {
    /// `TILELANG_DIST_IPC`: unset or `vmm` for [`Vmm`](Self::Vmm), `legacy` for
    /// [`LegacyIpc`](Self::LegacyIpc).
    pub fn from_env() -> Result<HeapMapping> {
        match std::env::var("TILELANG_DIST_IPC") {
            Err(_) => Ok(HeapMapping::Vmm),
            Ok(v) => HeapMapping::parse(&v).ok_or_else(|| {
                DistError::Config(format!(
                    "TILELANG_DIST_IPC={v:?}: `vmm` (the default), `legacy` (CUDA IPC handles, for drivers or containers without VMM's shareable handles; kernels then need peer tables) or `nvshmem` (NVSHMEM's heap; kernels need peer tables or `with_nvshmem`)"
                ))
            }),
        }
    }

    /// `vmm` or `legacy`.
    pub fn parse(name: &str) -> Option<HeapMapping> {
        match name.trim() {
            "" | "vmm" => Some(HeapMapping::Vmm),
            "legacy" => Some(HeapMapping::LegacyIpc),
            "nvshmem" => Some(HeapMapping::Nvshmem),
            _ => None,
        }
    }

    const ALL: [HeapMapping; 3] = [
        HeapMapping::Vmm,
        HeapMapping::LegacyIpc,
        HeapMapping::Nvshmem,
    ];

    fn name(self) -> &'static str {
        match self {
            HeapMapping::Vmm => "vmm",
            HeapMapping::LegacyIpc => "legacy",
            HeapMapping::Nvshmem => "nvshmem",
        }
    }
}

/// The check [`SymmetricHeap::with_mapping`] makes before it maps anything (collective): every
/// rank asked for a heap of `stride` bytes mapped by `mapping`, or the error names a rank that
/// did not.
pub fn agree(rv: &Rendezvous, stride: u64, mapping: HeapMapping) -> Result<()> {
    let me = rv.rank();
    let mut mine = stride.to_le_bytes().to_vec();
    mine.push(mapping as u8);
    let all = rv.all_gather(&mine)?;
    for (r, theirs) in all.iter().enumerate() {
        if theirs[..8] != mine[..8] {
            return Err(DistError::Mismatch {
                what: "the symmetric heap's size".into(),
                detail: format!("rank {r} asked for a different size than rank {me}"),
            });
        }
        if theirs.get(8) != mine.get(8) {
            let other = HeapMapping::ALL
                .into_iter()
                .find(|m| Some(&(*m as u8)) == theirs.get(8))
                .map_or("an unknown mapping", HeapMapping::name);
            return Err(DistError::Mismatch {
                what: "the symmetric heap's mapping".into(),
                detail: format!(
                    "rank {me} maps it by {} and rank {r} by {} (TILELANG_DIST_IPC must be the same on every rank)",
                    mapping.name(),
                    other
                ),
            });
        }
    }
    Ok(())
}

/// GPU `ordinal`'s primary context, current on this thread, for rank `me`'s heap; a missing
/// driver or device is an error that names both.
pub(crate) fn open_context(
    me: usize,
    ordinal: usize,
) -> Result<std::sync::Arc<cudarc::driver::CudaContext>> {
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
    Ok(ctx)
}

/// The peers' heaps, as mapped.
pub(crate) enum Mapped {
    Vmm(VmmMapping),
    Legacy(LegacyMapping),
    Nvshmem(crate::nvshmem::NvshmemMapping),
    /// Every rank in this process ([`crate::LocalJob`]): one VMM mapping that all its heaps
    /// share.
    Local(std::sync::Arc<crate::local::LocalMapping>),
}

impl Mapped {
    fn base(&self, rank: usize) -> u64 {
        match self {
            Mapped::Vmm(m) => m.base(rank),
            Mapped::Legacy(m) => m.base(rank),
            Mapped::Nvshmem(m) => m.base(rank),
            Mapped::Local(m) => m.base(rank),
        }
    }
}

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
    /// Bytes of each rank's heap.
    stride: u64,
    mapped: Mapped,
    /// This rank's peer tables: device memory of `PEER_TABLE_BYTES`, one `[world]` i64 table
    /// per carved buffer (by its offset), in carving order.
    tables_base: u64,
    tables: Vec<(u64, u64)>,
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
    /// calls it with the same size), mapped as `TILELANG_DIST_IPC` says ([`HeapMapping`]).
    pub fn new(rv: &Rendezvous, ordinal: usize, bytes: u64) -> Result<SymmetricHeap> {
        Self::with_mapping(rv, ordinal, bytes, HeapMapping::from_env()?)
    }

    /// [`new`](Self::new) with the mapping chosen here; every rank must choose the same.
    pub fn with_mapping(
        rv: &Rendezvous,
        ordinal: usize,
        bytes: u64,
        mapping: HeapMapping,
    ) -> Result<SymmetricHeap> {
        let me = rv.rank();
        let ctx = open_context(me, ordinal)?;
        let gran = match mapping {
            HeapMapping::Vmm => crate::vmm::granularity(me, ordinal)?,
            HeapMapping::LegacyIpc | HeapMapping::Nvshmem => 0,
        }
        .max(2 << 20);
        let stride = bytes.max(1).div_ceil(gran) * gran;
        agree(rv, stride, mapping)?;
        let world = rv.world();
        let mapped = match mapping {
            HeapMapping::Vmm => Mapped::Vmm(VmmMapping::new(rv, ordinal, stride, gran)?),
            HeapMapping::LegacyIpc => Mapped::Legacy(LegacyMapping::new(rv, stride)?),
            HeapMapping::Nvshmem => {
                Mapped::Nvshmem(crate::nvshmem::NvshmemMapping::new(rv, stride)?)
            }
        };
        let heap = SymmetricHeap::from_parts((me, world, ordinal), stride, mapped, ctx)?;
        rv.barrier()?;
        Ok(heap)
    }

    /// Rank `me` of `world`'s heap on GPU `ordinal`, once `mapped` (with `ctx` current):
    /// allocates its peer tables' memory.
    pub(crate) fn from_parts(
        (me, world, ordinal): (usize, usize, usize),
        stride: u64,
        mapped: Mapped,
        ctx: std::sync::Arc<cudarc::driver::CudaContext>,
    ) -> Result<SymmetricHeap> {
        ctx.bind_to_thread()
            .map_err(driver_error(me, "making the context current"))?;
        let mut tables = 0;
        // SAFETY: valid out-pointer; the context is current.
        check(me, "cuMemAlloc for the peer tables", unsafe {
            sys::cuMemAlloc_v2(&mut tables, PEER_TABLE_BYTES as usize)
        })?;
        Ok(SymmetricHeap {
            rank: me,
            world,
            ordinal,
            stride,
            mapped,
            tables_base: tables,
            tables: vec![],
            next: 0,
            _ctx: ctx,
        })
    }

    /// How the peers' heaps are mapped.
    pub fn mapping(&self) -> HeapMapping {
        match self.mapped {
            Mapped::Vmm(_) | Mapped::Local(_) => HeapMapping::Vmm,
            Mapped::Legacy(_) => HeapMapping::LegacyIpc,
            Mapped::Nvshmem(_) => HeapMapping::Nvshmem,
        }
    }

    /// Whether rank `r`'s heap lies at `base + r·stride` for every rank, so that kernels built
    /// for the flat heap (the default) run on it; otherwise they need peer tables
    /// (`Kernel::with_peer_tables` in `tilelang`, and [`peer_table`](Self::peer_table) for each
    /// symmetric buffer).
    pub fn is_flat(&self) -> bool {
        !matches!(self.mapped, Mapped::Legacy(_) | Mapped::Nvshmem(_))
    }

    /// The heap's `heap_stride` argument for a kernel launch: the bytes between consecutive
    /// ranks' heaps where they are mapped flat, 0 where they are not (a kernel built for the
    /// flat heap refuses to launch with 0; one with peer tables ignores it).
    pub fn stride(&self) -> u64 {
        if self.is_flat() {
            self.stride
        } else {
            0
        }
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
        let offset = self.next_offset(bytes)?;
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
        self.carve_at(offset, bytes)
    }

    /// Carve `bytes` with no agreement to check: for a job whose ranks share one process
    /// ([`crate::LocalJob`]), which carves every rank's alike itself.
    pub(crate) fn carve(&mut self, bytes: u64) -> Result<SymmetricBuffer> {
        let offset = self.next_offset(bytes)?;
        self.carve_at(offset, bytes)
    }

    /// Where the next buffer of `bytes` starts, if it fits.
    fn next_offset(&self, bytes: u64) -> Result<u64> {
        let offset = self.next.div_ceil(256) * 256;
        if offset + bytes > self.stride {
            return Err(DistError::Heap(format!(
                "the symmetric heap ({} bytes per rank) has {} bytes left, {bytes} asked for: make it larger",
                self.stride,
                self.stride - offset.min(self.stride)
            )));
        }
        Ok(offset)
    }

    /// Take `bytes` at `offset` and write the buffer's peer table.
    fn carve_at(&mut self, offset: u64, bytes: u64) -> Result<SymmetricBuffer> {
        let buf = SymmetricBuffer { offset, bytes };
        let table_bytes = 8 * self.world as u64;
        let at = self.tables.len() as u64 * table_bytes;
        if at + table_bytes > PEER_TABLE_BYTES {
            return Err(DistError::Heap(format!(
                "{} symmetric buffers at {} ranks: the heap keeps peer tables for at most {}; allocate fewer, larger buffers",
                self.tables.len() + 1,
                self.world,
                PEER_TABLE_BYTES / table_bytes
            )));
        }
        let entries: Vec<u8> = (0..self.world)
            .flat_map(|r| self.ptr(buf, r).to_le_bytes())
            .collect();
        self.bind()?;
        // SAFETY: `at + 8·world` bytes lie within the table memory (checked above).
        check(self.rank, "cuMemcpyHtoD of a peer table", unsafe {
            sys::cuMemcpyHtoD_v2(
                self.tables_base + at,
                entries.as_ptr() as *const std::ffi::c_void,
                entries.len(),
            )
        })?;
        self.next = offset + bytes;
        self.tables.push((offset, self.tables_base + at));
        Ok(buf)
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

    /// The device address of rank `rank`'s copy of `buf`; 0 where no load or store of this
    /// process reaches it (an NVSHMEM peer on another host: only NVSHMEM's calls reach it).
    pub fn ptr(&self, buf: SymmetricBuffer, rank: usize) -> u64 {
        match self.mapped.base(rank) {
            0 => 0,
            base => base + buf.offset,
        }
    }

    /// Every rank's address of `buf`, as the `[world]` i64 tensor a kernel with peer tables
    /// takes for it (`X_peers`; in this process's address space, on this rank's GPU).
    pub fn peer_table(&self, buf: SymmetricBuffer) -> Result<tl_runtime::external::ExternalTensor> {
        let Some(&(_, at)) = self.tables.iter().find(|(o, _)| *o == buf.offset) else {
            return Err(DistError::Heap(format!(
                "no buffer of this heap starts at offset {}: pass a buffer `alloc` returned",
                buf.offset
            )));
        };
        self.table_tensor(at)
    }

    /// The `[world]` i64 table at device address `at` of this heap's table memory.
    fn table_tensor(&self, at: u64) -> Result<tl_runtime::external::ExternalTensor> {
        // SAFETY: the table lies in this heap's table memory, which lives as long as `self`.
        unsafe {
            tl_runtime::external::ExternalTensor::new(
                at as *mut std::ffi::c_void,
                tl_ir::DType::I64,
                vec![self.world],
                vec![1],
                tl_runtime::Device::Cuda(self.ordinal),
            )
        }
        .map_err(|e| DistError::Heap(e.to_string()))
    }

    /// The peer tables a kernel built with peer tables takes (`X_peers`, one per symmetric
    /// tensor parameter, in parameter order) for a call whose other arguments are `args`
    /// (every parameter but the tables, in order): for each symmetric parameter, the table of
    /// the heap buffer its argument starts at. Insert them with [`with_tables`].
    pub fn peer_tables_for(
        &self,
        k: &tl_ir::Kernel,
        args: &[tl_runtime::Arg],
    ) -> Result<Vec<tl_runtime::external::ExternalTensor>> {
        let Some(d) = k.attrs.dist.as_ref() else {
            return Ok(vec![]);
        };
        let is_table = |b: &tl_ir::Buffer| d.peer_tables.iter().any(|(_, t)| t.id() == b.id());
        let params = k.params.iter().filter(|p| match p {
            tl_ir::Param::Tensor { buffer, .. } => !is_table(buffer),
            tl_ir::Param::Scalar(_) => true,
        });
        let mut tables = vec![];
        for (i, p) in params.enumerate() {
            let tl_ir::Param::Tensor { buffer, .. } = p else {
                continue;
            };
            if !d.symmetric.contains(&buffer.id()) {
                continue;
            }
            let addr = match args.get(i) {
                Some(tl_runtime::Arg::External(e)) => e.ptr() as u64,
                Some(tl_runtime::Arg::Tensor(t)) => t.cuda_ptr().unwrap_or(0),
                _ => 0,
            };
            let own = self.mapped.base(self.rank);
            let Some(&(_, at)) = self.tables.iter().find(|(o, _)| own + o == addr) else {
                return Err(DistError::Heap(format!(
                    "`{}` (argument {i}) does not start a buffer of this rank's symmetric heap: a kernel with peer tables needs each symmetric argument to be a buffer `alloc` returned, from its start",
                    buffer.name()
                )));
            };
            tables.push(self.table_tensor(at)?);
        }
        Ok(tables)
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
        // SAFETY: freeing what `with_mapping` allocated, once; the mapping unmaps itself.
        unsafe {
            sys::cuMemFree_v2(self.tables_base);
        }
    }
}

/// A call's arguments with `tables` ([`SymmetricHeap::peer_tables_for`]) inserted where a
/// kernel with peer tables takes them: before its last three, `rank`, `num_ranks` and
/// `heap_stride`.
pub fn with_tables<'a>(
    args: &[tl_runtime::Arg<'a>],
    tables: &'a [tl_runtime::external::ExternalTensor],
) -> Vec<tl_runtime::Arg<'a>> {
    let at = args.len().saturating_sub(3);
    let mut v: Vec<tl_runtime::Arg<'a>> = args[..at].to_vec();
    v.extend(tables.iter().map(tl_runtime::Arg::External));
    v.extend_from_slice(&args[at..]);
    v
}
