//! Device memory of a HIP GPU: allocation, copies, fills.

use super::HipDevice;
use crate::error::{Result, RuntimeError};

/// Device memory from `hipMalloc`, freed on drop. Copies are synchronous `hipMemcpy`s and
/// fills are `hipMemset*`s, all on the null stream, so they are ordered with launches.
pub(crate) struct HipBuf {
    ptr: u64,
    bytes: usize,
    dev: &'static HipDevice,
}

impl HipBuf {
    /// `bytes` of uninitialized device memory (at least one byte is allocated, so even an empty
    /// tensor has a distinct, valid address).
    pub(crate) fn alloc(dev: &'static HipDevice, bytes: usize) -> Result<HipBuf> {
        dev.bind()?;
        let ptr = dev.hip().malloc(bytes).map_err(|c| {
            let free = dev
                .hip()
                .mem_get_info()
                .map(|(f, t)| format!(" ({} MiB free of {} MiB)", f >> 20, t >> 20))
                .unwrap_or_default();
            dev.err(
                format!("allocating {bytes} bytes on hip:{}{free}", dev.ordinal()),
                c,
            )
        })?;
        Ok(HipBuf { ptr, bytes, dev })
    }

    pub(crate) fn ptr(&self) -> u64 {
        self.ptr
    }
    pub(crate) fn len(&self) -> usize {
        self.bytes
    }
    pub(crate) fn device(&self) -> &'static HipDevice {
        self.dev
    }

    /// Copy `host` (exactly `len()` bytes) to the device.
    pub(crate) fn upload(&self, host: &[u8]) -> Result<()> {
        if host.len() != self.bytes {
            return Err(RuntimeError::Tensor(format!(
                "uploading {} bytes into a device buffer of {}",
                host.len(),
                self.bytes
            )));
        }
        if host.is_empty() {
            return Ok(());
        }
        self.dev.bind()?;
        self.dev.hip().memcpy_htod(self.ptr, host).map_err(|c| {
            self.dev.err(
                format!("copying {} bytes to hip:{}", host.len(), self.dev.ordinal()),
                c,
            )
        })
    }

    /// Copy the whole buffer to `host`, after the work queued before it (which may fail, and
    /// then the error names the last kernel).
    pub(crate) fn download(&self, host: &mut [u8]) -> Result<()> {
        if host.len() != self.bytes {
            return Err(RuntimeError::Tensor(format!(
                "downloading a device buffer of {} bytes into {}",
                self.bytes,
                host.len()
            )));
        }
        // Synchronize first, so that a fault of an earlier kernel is reported as such rather
        // than as a failed copy.
        self.dev.synchronize()?;
        if host.is_empty() {
            return Ok(());
        }
        let n = host.len();
        self.dev.hip().memcpy_dtoh(host, self.ptr).map_err(|c| {
            self.dev.err(
                format!("copying {n} bytes from hip:{}", self.dev.ordinal()),
                c,
            )
        })
    }

    /// Copy from another buffer of the same size on the same device.
    pub(crate) fn copy_from(&self, src: &HipBuf) -> Result<()> {
        if src.bytes != self.bytes || src.dev.ordinal() != self.dev.ordinal() {
            return Err(RuntimeError::Tensor(
                "device copy between buffers of different sizes or devices".into(),
            ));
        }
        if self.bytes == 0 {
            return Ok(());
        }
        self.dev.bind()?;
        self.dev
            .hip()
            .memcpy_dtod(self.ptr, src.ptr, self.bytes)
            .map_err(|c| self.dev.err("hipMemcpy (device to device)", c))
    }

    pub(crate) fn memset_d32(&self, v: u32, count: usize) -> Result<()> {
        self.dev.bind()?;
        let count = count.min(self.bytes / 4);
        self.dev
            .hip()
            .memset_d32(self.ptr, v, count)
            .map_err(|c| self.dev.err("hipMemsetD32", c))
    }

    /// Set every element of `elem.len()` bytes to the pattern `elem`.
    pub(crate) fn fill_pattern(&self, elem: &[u8]) -> Result<()> {
        let n = elem.len();
        if n == 0 || self.bytes == 0 {
            return Ok(());
        }
        let count = self.bytes / n;
        self.dev.bind()?;
        let hip = self.dev.hip();
        let what = format!("filling {} bytes on hip:{}", self.bytes, self.dev.ordinal());
        let word = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let rc = match n {
            _ if elem.iter().all(|&b| b == elem[0]) => hip.memset_d8(self.ptr, elem[0], self.bytes),
            2 => hip.memset_d16(self.ptr, u16::from_le_bytes([elem[0], elem[1]]), count),
            4 => hip.memset_d32(self.ptr, word(elem), count),
            8 if word(&elem[..4]) == word(&elem[4..]) => {
                hip.memset_d32(self.ptr, word(elem), count * 2)
            }
            // A 64-bit pattern of two different words: HIP has no strided 32-bit memset that
            // all ROCm versions share, so write it from the host.
            8 => return self.upload(&elem.repeat(count)),
            _ => {
                return Err(RuntimeError::Tensor(format!(
                    "no fill for {n}-byte elements"
                )))
            }
        };
        rc.map_err(|c| self.dev.err(what, c))
    }

    /// Fill with the counter-based random stream of [`crate::rng`], generated on the host and
    /// uploaded: the values equal those of a CUDA tensor of the same seed (there is no
    /// built-in HIP kernel, which would need clang at run time).
    pub(crate) fn fill_random(
        &self,
        dtype: tl_ir::DType,
        seed: u64,
        dist: crate::rng::Dist,
    ) -> Result<()> {
        let mut host = vec![0u8; self.bytes];
        crate::rng::fill_host(&mut host, dtype, seed, dist);
        self.upload(&host)
    }
}

impl Drop for HipBuf {
    fn drop(&mut self) {
        if self.dev.bind().is_ok() {
            // hipFree waits for queued work that may still use the memory.
            let _ = self.dev.hip().free(self.ptr);
        }
    }
}
