//! One process driving every rank of a job (issue 15's second mode, for tests and single-host
//! experiments without a launcher): rank `r` on GPU `ordinals[r]`, several ranks per GPU
//! allowed. The heaps are mapped as the VMM mapping does between processes — every rank's at
//! `base + r·stride` — but once, in this process's address space, with access granted to every
//! GPU of the job; no rendezvous, no descriptors. Kernels are the same (flat heap or peer
//! tables); each rank's launches go on a stream of its own ([`crate::CopyStream`]), since the
//! ranks' kernels wait on each other and must run at once. Ranks that share a GPU share it
//! within one context, so their kernels must fit on it together (small grids), which the
//! process-per-rank mode, time-sliced between contexts, does not need.

use std::sync::Arc;

use cudarc::driver::sys;

use crate::error::{DistError, Result};
use crate::heap::{check, open_context, Mapped, SymmetricBuffer, SymmetricHeap};
use crate::vmm::{granularity, properties};

/// Every rank's allocation, mapped in rank order into one reserved range of this process.
pub(crate) struct LocalMapping {
    base: u64,
    stride: u64,
    handles: Vec<sys::CUmemGenericAllocationHandle>,
    mapped: usize,
}

impl LocalMapping {
    pub(crate) fn base(&self, rank: usize) -> u64 {
        self.base + rank as u64 * self.stride
    }
}

impl Drop for LocalMapping {
    fn drop(&mut self) {
        // SAFETY: unmapping, freeing and releasing what `LocalJob::new` mapped, reserved and
        // created, once.
        unsafe {
            for r in 0..self.mapped {
                sys::cuMemUnmap(self.base(r), self.stride as usize);
            }
            if self.base != 0 {
                sys::cuMemAddressFree(self.base, self.stride as usize * self.handles.len());
            }
            for h in &self.handles {
                sys::cuMemRelease(*h);
            }
        }
    }
}

/// Every rank of a job in this process, each with its symmetric heap.
pub struct LocalJob {
    heaps: Vec<SymmetricHeap>,
}

impl LocalJob {
    /// `ordinals.len()` ranks, rank `r` on GPU `ordinals[r]`, each with a heap of at least
    /// `bytes`.
    pub fn new(ordinals: &[usize], bytes: u64) -> Result<LocalJob> {
        let world = ordinals.len();
        if world == 0 {
            return Err(DistError::Config(
                "a local job of no ranks: give each rank a GPU ordinal".into(),
            ));
        }
        let mut contexts: Vec<(usize, Arc<cudarc::driver::CudaContext>)> = vec![];
        let mut gran = 2u64 << 20;
        for (r, &o) in ordinals.iter().enumerate() {
            if contexts.iter().all(|(d, _)| *d != o) {
                contexts.push((o, open_context(r, o)?));
                gran = gran.max(granularity(r, o)?);
            }
        }
        let ctx_of = |o: usize| {
            contexts
                .iter()
                .find(|(d, _)| *d == o)
                .map(|(_, c)| c.clone())
                .ok_or_else(|| DistError::Heap(format!("no context for cuda:{o}")))
        };
        let stride = bytes.max(1).div_ceil(gran) * gran;
        let mut m = LocalMapping {
            base: 0,
            stride,
            handles: vec![],
            mapped: 0,
        };
        for (r, &o) in ordinals.iter().enumerate() {
            ctx_of(o)?
                .bind_to_thread()
                .map_err(crate::heap::driver_error(r, "making the context current"))?;
            let prop = properties(o);
            let mut h = 0 as sys::CUmemGenericAllocationHandle;
            // SAFETY: valid out-pointer and property struct.
            check(r, &format!("cuMemCreate on cuda:{o}"), unsafe {
                sys::cuMemCreate(&mut h, stride as usize, &prop, 0)
            })?;
            m.handles.push(h);
        }
        let total = stride * world as u64;
        // SAFETY: valid out-pointer; alignment = the granularity.
        check(0, "cuMemAddressReserve", unsafe {
            sys::cuMemAddressReserve(&mut m.base, total as usize, gran as usize, 0, 0)
        })?;
        for r in 0..world {
            // SAFETY: the range is reserved and the handle is a live allocation of `stride`.
            check(r, &format!("mapping rank {r}'s heap"), unsafe {
                sys::cuMemMap(m.base(r), stride as usize, 0, m.handles[r], 0)
            })?;
            m.mapped = r + 1;
        }
        let access: Vec<sys::CUmemAccessDesc> = contexts
            .iter()
            .map(|(o, _)| sys::CUmemAccessDesc {
                location: sys::CUmemLocation {
                    type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                    id: *o as i32,
                },
                flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
            })
            .collect();
        // SAFETY: the whole range is mapped; `access` holds one descriptor per GPU.
        check(
            0,
            "cuMemSetAccess for every GPU of the job (can they reach each other's memory? check `nvidia-smi topo -m`)",
            unsafe { sys::cuMemSetAccess(m.base, total as usize, access.as_ptr(), access.len()) },
        )?;
        let m = Arc::new(m);
        let heaps = ordinals
            .iter()
            .enumerate()
            .map(|(r, &o)| {
                SymmetricHeap::from_parts(
                    (r, world, o),
                    stride,
                    Mapped::Local(m.clone()),
                    ctx_of(o)?,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(LocalJob { heaps })
    }

    /// Carve `bytes` from every rank's heap alike.
    pub fn alloc(&mut self, bytes: u64) -> Result<SymmetricBuffer> {
        let mut first = None;
        for h in &mut self.heaps {
            let b = h.carve(bytes)?;
            if *first.get_or_insert(b) != b {
                return Err(DistError::Heap(format!(
                    "rank {}'s heap carved {b:?} where rank 0's carved {first:?}",
                    h.rank()
                )));
            }
        }
        first.ok_or_else(|| DistError::Heap("a local job of no ranks".into()))
    }

    pub fn world(&self) -> usize {
        self.heaps.len()
    }

    /// Rank `r`'s heap: its tensors, peer tables, copies and stride, as a process-per-rank
    /// job's heap.
    pub fn heap(&self, r: usize) -> &SymmetricHeap {
        &self.heaps[r]
    }
}
