//! The flat mapping of the symmetric heap: CUDA's virtual memory management (driver API).
//! `cuMemCreate` with a POSIX file-descriptor handle, `cuMemExportToShareableHandle`, the
//! descriptors passed between ranks ([`crate::fdpass`]), `cuMemImportFromShareableHandle`,
//! `cuMemAddressReserve`, `cuMemMap` and `cuMemSetAccess` for this rank's GPU: every rank's
//! heap at `base + r·stride` in every process. No multicast (NVLS), which must stay off on the
//! machines here.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use cudarc::driver::sys;

use crate::error::{DistError, Result};
use crate::fdpass::exchange_fds;
use crate::heap::check;
use crate::rendezvous::Rendezvous;

/// Where every rank's heap is mapped, and the handles that keep the memory alive.
pub(crate) struct VmmMapping {
    /// The reserved range: `world · stride` bytes from `base`.
    base: u64,
    stride: u64,
    /// Every rank's allocation handle (this rank's own first created, the rest imported),
    /// mapped at `base + r·stride`.
    handles: Vec<sys::CUmemGenericAllocationHandle>,
}

pub(crate) fn properties(ordinal: usize) -> sys::CUmemAllocationProp {
    sys::CUmemAllocationProp {
        type_: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes:
            sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
        location: sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: ordinal as i32,
        },
        win32HandleMetaData: std::ptr::null_mut(),
        allocFlags: Default::default(),
    }
}

/// The allocation granularity VMM recommends on GPU `ordinal` — after checking that the
/// device can share its memory by file descriptors at all (where it cannot, the error names
/// the fallback).
pub(crate) fn granularity(me: usize, ordinal: usize) -> Result<u64> {
    let mut dev: sys::CUdevice = 0;
    // SAFETY: valid out-pointer.
    check(me, "cuDeviceGet", unsafe {
        sys::cuDeviceGet(&mut dev, ordinal as i32)
    })?;
    let mut fd_handles = 0i32;
    // SAFETY: valid out-pointer and device.
    check(me, "cuDeviceGetAttribute", unsafe {
        sys::cuDeviceGetAttribute(
            &mut fd_handles,
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
            dev,
        )
    })?;
    if fd_handles == 0 {
        return Err(DistError::Driver {
            me,
            op: format!("mapping the symmetric heap of cuda:{ordinal} by CUDA virtual memory"),
            detail: "the device or driver cannot share memory by file descriptors; set TILELANG_DIST_IPC=legacy on every rank (legacy CUDA IPC), and build the kernels with peer tables (`Kernel::with_peer_tables`)".into(),
        });
    }
    let prop = properties(ordinal);
    let mut gran = 0usize;
    // SAFETY: `prop` is a valid property struct and `gran` a valid out-pointer.
    check(me, "cuMemGetAllocationGranularity", unsafe {
        sys::cuMemGetAllocationGranularity(
            &mut gran,
            &prop,
            sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED,
        )
    })?;
    Ok(gran as u64)
}

impl VmmMapping {
    /// Create this rank's `stride` bytes on GPU `ordinal`, exchange handles with every rank and
    /// map all the heaps in rank order (collective; `stride` a multiple of `gran`, the same on
    /// every rank).
    pub(crate) fn new(rv: &Rendezvous, ordinal: usize, stride: u64, gran: u64) -> Result<Self> {
        let me = rv.rank();
        let prop = properties(ordinal);
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
        Ok(VmmMapping {
            base,
            stride,
            handles,
        })
    }

    /// Where rank `rank`'s heap starts.
    pub(crate) fn base(&self, rank: usize) -> u64 {
        self.base + rank as u64 * self.stride
    }
}

impl Drop for VmmMapping {
    fn drop(&mut self) {
        let total = self.stride as usize * self.handles.len();
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
