//! Memory the runtime does not own: arrays of numpy, tensors of torch or any other library,
//! passed to a launch by address without a copy. [`Arg::External`](crate::Arg::External)
//! carries one; `bind_args` checks it like a runtime [`Tensor`](crate::Tensor) (dtype, rank,
//! device, contiguity, sizes), so a front end that wraps foreign memory gets the same errors.

use std::ffi::c_void;

use tl_ir::DType;

use crate::device::Device;
use crate::error::{Result, RuntimeError};

/// A view of foreign memory: its address, element type, shape, strides (in elements) and the
/// device it lives on. It borrows nothing: the owner (the caller's array) must outlive every
/// launch that uses it, which [`ExternalTensor::new`]'s contract states.
#[derive(Clone, Debug, PartialEq)]
pub struct ExternalTensor {
    ptr: *mut c_void,
    dtype: DType,
    shape: Vec<usize>,
    strides: Vec<isize>,
    device: Device,
}

impl ExternalTensor {
    /// Describe `shape` elements of `dtype` at `ptr` on `device` (host memory for
    /// [`Device::Cpu`], a device address for a GPU), `strides[d]` elements apart along
    /// dimension `d`. The shape and strides are checked here (one stride per dimension, no
    /// overflow, a non-null address unless the tensor is empty); the address is not.
    ///
    /// # Safety
    /// `ptr` must address every element the shape and strides reach, readable and writable
    /// on `device`, for as long as this value is passed to launches (and, for GPU launches,
    /// until they have finished).
    pub unsafe fn new(
        ptr: *mut c_void,
        dtype: DType,
        shape: Vec<usize>,
        strides: Vec<isize>,
        device: Device,
    ) -> Result<ExternalTensor> {
        if shape.len() != strides.len() {
            return Err(RuntimeError::Tensor(format!(
                "an external tensor of shape {shape:?} has {} strides",
                strides.len()
            )));
        }
        let numel = shape
            .iter()
            .try_fold(1usize, |a, &b| a.checked_mul(b))
            .and_then(|n| n.checked_mul(dtype.bytes()))
            .ok_or_else(|| RuntimeError::Tensor(format!("shape {shape:?} overflows")))?;
        if ptr.is_null() && numel > 0 {
            return Err(RuntimeError::Tensor(format!(
                "an external tensor of shape {shape:?} has a null address"
            )));
        }
        Ok(ExternalTensor {
            ptr,
            dtype,
            shape,
            strides,
            device,
        })
    }

    pub fn ptr(&self) -> *mut c_void {
        self.ptr
    }
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    pub fn strides(&self) -> &[isize] {
        &self.strides
    }
    pub fn device(&self) -> Device {
        self.device
    }
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
    pub fn nbytes(&self) -> usize {
        self.numel() * self.dtype.bytes()
    }

    /// Row-major and dense: each stride is the product of the extents after it. Dimensions of
    /// extent 1 may have any stride (torch and numpy give them arbitrary ones), and an empty
    /// tensor is contiguous.
    pub fn is_contiguous(&self) -> bool {
        if self.numel() == 0 {
            return true;
        }
        let mut want: isize = 1;
        for (&n, &s) in self.shape.iter().zip(&self.strides).rev() {
            if n != 1 && s != want {
                return false;
            }
            want = want.saturating_mul(n as isize);
        }
        true
    }

    /// Whether a kernel bound to `device` can use this memory: the same device, or host
    /// memory for a host device (the CPU backend and the simulator both run on host memory).
    pub fn usable_on(&self, device: Device) -> bool {
        self.device == device || (self.device.is_host() && device.is_host())
    }

    /// The bytes of a contiguous host tensor (for the simulator, which runs on copies).
    ///
    /// # Safety
    /// As for [`new`](Self::new); the memory must be host memory and not be written while
    /// the slice lives.
    pub(crate) unsafe fn host_bytes(&self) -> &[u8] {
        if self.nbytes() == 0 {
            return &[];
        }
        std::slice::from_raw_parts(self.ptr as *const u8, self.nbytes())
    }

    /// Overwrite a contiguous host tensor with `bytes` (exactly `nbytes()` long).
    ///
    /// # Safety
    /// As for [`host_bytes`](Self::host_bytes), and no other reference to the memory may be
    /// in use.
    pub(crate) unsafe fn write_host_bytes(&self, bytes: &[u8]) {
        if bytes.len() == self.nbytes() && !bytes.is_empty() {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr as *mut u8, bytes.len());
        }
    }
}

/// A queue for GPU launches. The runtime has its own stream per device; a caller that orders
/// work on its own streams (torch's current stream) passes the raw handle instead, and the
/// launch joins that queue without any synchronization of ours.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Stream {
    /// The runtime's stream of the executable's device.
    #[default]
    Runtime,
    /// A `CUstream` (or `hipStream_t`) of the executable's device's primary context, as an
    /// address; 0 is the legacy default stream.
    Raw(usize),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext(shape: Vec<usize>, strides: Vec<isize>) -> Result<ExternalTensor> {
        let mut buf = vec![0u8; 64];
        // SAFETY: the tests only inspect shapes; the address is never dereferenced.
        unsafe {
            ExternalTensor::new(
                buf.as_mut_ptr() as *mut c_void,
                DType::F32,
                shape,
                strides,
                Device::Cpu,
            )
        }
    }

    #[test]
    fn contiguity_ignores_unit_dims() {
        assert!(ext(vec![2, 3], vec![3, 1]).unwrap().is_contiguous());
        assert!(!ext(vec![2, 3], vec![1, 2]).unwrap().is_contiguous());
        // torch gives size-1 dims strides of its choosing.
        assert!(ext(vec![1, 3], vec![99, 1]).unwrap().is_contiguous());
        assert!(ext(vec![2, 1, 3], vec![3, 7, 1]).unwrap().is_contiguous());
        assert!(!ext(vec![3, 2], vec![4, 2]).unwrap().is_contiguous());
        assert!(ext(vec![0, 3], vec![5, 9]).unwrap().is_contiguous());
    }

    #[test]
    fn bad_descriptions_are_errors() {
        assert!(ext(vec![2, 3], vec![3]).is_err());
        assert!(ext(vec![usize::MAX, 3], vec![3, 1]).is_err());
        // SAFETY: never dereferenced.
        let null = unsafe {
            ExternalTensor::new(
                std::ptr::null_mut(),
                DType::F32,
                vec![2],
                vec![1],
                Device::Cpu,
            )
        };
        assert!(null.is_err());
    }

    #[test]
    fn host_memory_serves_host_devices() {
        let t = ext(vec![2], vec![1]).unwrap();
        assert!(t.usable_on(Device::Cpu));
        assert!(t.usable_on(Device::SIM));
        assert!(!t.usable_on(Device::Cuda(0)));
    }
}
