//! The fallback mapping of the symmetric heap: legacy CUDA IPC. Each rank allocates its heap
//! with `cuMemAlloc`, exports a `cuIpcGetMemHandle` handle (64 bytes, passed through the
//! rendezvous — no file descriptors), and opens its peers' with `cuIpcOpenMemHandle`. It needs
//! no virtual-memory support, but the driver chooses where each peer's heap lands, so the
//! ranks' heaps are not one stride apart: kernels reach them through peer tables
//! (`SymmetricHeap::peer_table`). Ranks must be separate processes (CUDA does not open a
//! handle in the process that made it); processes sharing one GPU may.

use cudarc::driver::sys;

use crate::error::{DistError, Result};
use crate::heap::check;
use crate::rendezvous::Rendezvous;

/// Every rank's heap as this process sees it: its own allocation and the peers' opened
/// handles.
pub(crate) struct LegacyMapping {
    me: usize,
    /// Where each rank's heap lies in this process; 0 where not (yet) opened.
    bases: Vec<u64>,
}

impl LegacyMapping {
    /// Allocate this rank's `stride` bytes, exchange IPC handles and open every peer's
    /// (collective).
    pub(crate) fn new(rv: &Rendezvous, stride: u64) -> Result<Self> {
        let me = rv.rank();
        let mut m = LegacyMapping {
            me,
            bases: vec![0; rv.world()],
        };
        let mut own: sys::CUdeviceptr = 0;
        // SAFETY: valid out-pointer; the caller made the heap's context current.
        check(me, "cuMemAlloc of the symmetric heap", unsafe {
            sys::cuMemAlloc_v2(&mut own, stride as usize)
        })?;
        m.bases[me] = own;
        let mut handle = sys::CUipcMemHandle_st { reserved: [0; 64] };
        // SAFETY: valid out-pointer; `own` is a live allocation of this context.
        check(me, "cuIpcGetMemHandle", unsafe {
            sys::cuIpcGetMemHandle(&mut handle, own)
        })?;
        let mine: Vec<u8> = handle.reserved.iter().map(|&c| c as u8).collect();
        let all = rv.all_gather(&mine)?;
        for (r, theirs) in all.iter().enumerate() {
            if r == me {
                continue;
            }
            let Ok(bytes) = <[u8; 64]>::try_from(theirs.as_slice()) else {
                return Err(DistError::Protocol {
                    me,
                    detail: format!(
                        "rank {r} sent a {}-byte CUDA IPC handle (64 expected)",
                        theirs.len()
                    ),
                });
            };
            let h = sys::CUipcMemHandle_st {
                reserved: bytes.map(|b| b as std::ffi::c_char),
            };
            let mut p: sys::CUdeviceptr = 0;
            // SAFETY: valid out-pointer; `h` is the handle rank `r` exported.
            check(
                me,
                &format!("opening rank {r}'s heap by CUDA IPC (cuIpcOpenMemHandle; can this GPU reach rank {r}'s? check `nvidia-smi topo -m`)"),
                unsafe {
                    sys::cuIpcOpenMemHandle_v2(
                        &mut p,
                        h,
                        sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32,
                    )
                },
            )?;
            m.bases[r] = p;
        }
        Ok(m)
    }

    /// Where rank `rank`'s heap starts in this process.
    pub(crate) fn base(&self, rank: usize) -> u64 {
        self.bases[rank]
    }
}

impl Drop for LegacyMapping {
    fn drop(&mut self) {
        for (r, &b) in self.bases.iter().enumerate() {
            if b == 0 {
                continue;
            }
            // SAFETY: closing each handle `new` opened and freeing its own allocation, once.
            unsafe {
                if r == self.me {
                    sys::cuMemFree_v2(b);
                } else {
                    sys::cuIpcCloseMemHandle(b);
                }
            }
        }
    }
}
