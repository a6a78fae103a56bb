//! Tensors: a shape, a dtype, row-major strides and storage on a device.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::fmt;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tl_ir::DType;

use crate::cuda::DeviceBuf;
use crate::device::Device;
use crate::dtype_io;
use crate::error::{Result, RuntimeError};
use crate::hip::HipBuf;
use crate::rng::Dist;

/// Host memory aligned for wide vector loads. Kernels write it through shared references
/// (a launch takes `&Tensor` for outputs, as GPU buffers are handles), hence the `UnsafeCell`.
pub(crate) struct HostBuf {
    ptr: *mut u8,
    bytes: usize,
    _cell: UnsafeCell<()>,
}

// Access is coordinated by the runtime: a launch writes only the outputs the kernel declares,
// and host reads happen between launches.
unsafe impl Send for HostBuf {}
unsafe impl Sync for HostBuf {}

const ALIGN: usize = 64;

impl HostBuf {
    fn new(bytes: usize) -> Result<HostBuf> {
        let size = bytes.max(1);
        let layout = Layout::from_size_align(size, ALIGN)
            .map_err(|e| RuntimeError::Tensor(format!("cannot allocate {bytes} bytes: {e}")))?;
        // SAFETY: the layout has non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(RuntimeError::Tensor(format!(
                "out of host memory allocating {bytes} bytes"
            )));
        }
        Ok(HostBuf {
            ptr,
            bytes,
            _cell: UnsafeCell::new(()),
        })
    }
    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for `bytes` bytes for the life of self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.bytes) }
    }
    #[allow(clippy::mut_from_ref)]
    pub(crate) fn as_mut_slice(&self) -> &mut [u8] {
        // SAFETY: see the type's comment; callers do not hold other slices across this.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.bytes) }
    }
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }
}

impl Drop for HostBuf {
    fn drop(&mut self) {
        if let Ok(layout) = Layout::from_size_align(self.bytes.max(1), ALIGN) {
            // SAFETY: allocated in `new` with this layout.
            unsafe { dealloc(self.ptr, layout) }
        }
    }
}

pub(crate) enum Storage {
    Host(HostBuf),
    /// Device memory of a CUDA GPU. Reads download (after the work queued before them);
    /// writes upload or run on the device's stream.
    Cuda(DeviceBuf),
    /// Device memory of an AMD GPU (HIP). Reads download after the work queued before them;
    /// writes are copies or memsets on the device's null stream.
    Hip(HipBuf),
}

pub struct Tensor {
    shape: Vec<usize>,
    strides: Vec<usize>,
    dtype: DType,
    device: Device,
    pub(crate) storage: Storage,
}

fn row_major(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

impl Tensor {
    /// A zero-filled tensor.
    pub fn zeros(shape: &[usize], dtype: DType, device: &Device) -> Result<Tensor> {
        let t = Tensor::uninit(shape, dtype, device)?;
        match &t.storage {
            Storage::Cuda(b) => b.fill_pattern(&[0])?,
            Storage::Hip(b) => b.fill_pattern(&[0])?,
            Storage::Host(_) => {}
        }
        Ok(t)
    }

    /// A tensor whose device memory is not initialized (host memory is zeroed anyway).
    fn uninit(shape: &[usize], dtype: DType, device: &Device) -> Result<Tensor> {
        let numel = shape
            .iter()
            .try_fold(1usize, |a, &b| a.checked_mul(b))
            .ok_or_else(|| RuntimeError::Tensor(format!("shape {shape:?} overflows")))?;
        let bytes = numel
            .checked_mul(dtype.bytes())
            .ok_or_else(|| RuntimeError::Tensor(format!("shape {shape:?} overflows")))?;
        let storage = match device {
            Device::Cpu | Device::Sim(_) => Storage::Host(HostBuf::new(bytes)?),
            Device::Cuda(i) => Storage::Cuda(DeviceBuf::alloc(crate::cuda::device(*i)?, bytes)?),
            Device::Hip(i) => Storage::Hip(HipBuf::alloc(crate::hip::device(*i)?, bytes)?),
        };
        Ok(Tensor {
            shape: shape.to_vec(),
            strides: row_major(shape),
            dtype,
            device: *device,
            storage,
        })
    }

    /// A tensor holding `data` (row-major), converted to `dtype`.
    pub fn from_f64(
        shape: &[usize],
        dtype: DType,
        data: &[f64],
        device: &Device,
    ) -> Result<Tensor> {
        let t = Tensor::uninit(shape, dtype, device)?;
        if data.len() != t.numel() {
            return Err(RuntimeError::Tensor(format!(
                "{} values given for shape {shape:?} ({} elements)",
                data.len(),
                t.numel()
            )));
        }
        t.write_f64(data)?;
        Ok(t)
    }

    pub fn from_f32(
        shape: &[usize],
        dtype: DType,
        data: &[f32],
        device: &Device,
    ) -> Result<Tensor> {
        let d: Vec<f64> = data.iter().map(|&x| x as f64).collect();
        Tensor::from_f64(shape, dtype, &d, device)
    }

    /// Standard-normal values from a seeded generator: the same seed gives the same tensor on
    /// every run. CPU tensors use ChaCha8 with Box-Muller; CUDA tensors use the counter-based
    /// generator of [`crate::rng`], filled on the GPU (so the values differ from the CPU
    /// tensor of the same seed — copy with [`to_device`](Self::to_device) for identical inputs).
    /// HIP tensors use the same counter-based values as CUDA ones, generated on the host.
    pub fn randn(shape: &[usize], dtype: DType, seed: u64, device: &Device) -> Result<Tensor> {
        let dist = Dist::Normal {
            mean: 0.0,
            std: 1.0,
        };
        if device.is_hip() {
            let t = Tensor::uninit(shape, dtype, device)?;
            t.hip_buf()?.fill_random(dtype, seed, dist)?;
            return Ok(t);
        }
        if device.is_cuda() {
            let t = Tensor::uninit(shape, dtype, device)?;
            t.cuda_buf()?.fill_random(dtype, seed, dist)?;
            return Ok(t);
        }
        let t = Tensor::zeros(shape, dtype, device)?;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let data: Vec<f64> = (0..t.numel())
            .map(|_| {
                // Box-Muller: two uniforms give one normal.
                let u1: f64 = rng.gen_range(f64::MIN_POSITIVE..1.0);
                let u2: f64 = rng.gen();
                (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
            })
            .collect();
        t.write_f64(&data)?;
        Ok(t)
    }

    /// Uniform values in `[lo, hi)` from a seeded generator (per device kind, as
    /// [`randn`](Self::randn)).
    pub fn rand(
        shape: &[usize],
        dtype: DType,
        lo: f64,
        hi: f64,
        seed: u64,
        device: &Device,
    ) -> Result<Tensor> {
        if !(lo.is_finite() && hi.is_finite() && lo < hi) {
            return Err(RuntimeError::Tensor(format!(
                "uniform range [{lo}, {hi}) is empty or not finite"
            )));
        }
        if device.is_cuda() {
            let t = Tensor::uninit(shape, dtype, device)?;
            t.cuda_buf()?
                .fill_random(dtype, seed, Dist::Uniform { lo, hi })?;
            return Ok(t);
        }
        if device.is_hip() {
            let t = Tensor::uninit(shape, dtype, device)?;
            t.hip_buf()?
                .fill_random(dtype, seed, Dist::Uniform { lo, hi })?;
            return Ok(t);
        }
        let t = Tensor::zeros(shape, dtype, device)?;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let data: Vec<f64> = (0..t.numel()).map(|_| rng.gen_range(lo..hi)).collect();
        t.write_f64(&data)?;
        Ok(t)
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    pub fn strides(&self) -> &[usize] {
        &self.strides
    }
    pub fn dtype(&self) -> DType {
        self.dtype
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
    pub fn is_contiguous(&self) -> bool {
        self.strides == row_major(&self.shape)
    }

    /// The same elements, in the same row-major order and memory, under another shape of as
    /// many elements: how a caller hands a kernel the view it declares — the in-place GEMMs
    /// take a row-major `[K, N]` B as `[K/8, 8·N]` (`kernels::gemm_realign`), an `[M, K]` A as
    /// `[M/8, 8·K]` (`kernels::gemm_residue`) — and takes the tensor back after. Consumes the
    /// tensor (its memory has one owner); refuses a different element count and a tensor that
    /// is not contiguous.
    pub fn reshape(self, shape: &[usize]) -> Result<Tensor> {
        let numel: usize = shape.iter().product();
        if numel != self.numel() {
            return Err(RuntimeError::Tensor(format!(
                "cannot reshape a tensor of shape {:?} ({} elements) to {shape:?} ({numel} elements); give a shape of as many elements",
                self.shape,
                self.numel()
            )));
        }
        if !self.is_contiguous() {
            return Err(RuntimeError::Tensor(format!(
                "cannot reshape a tensor of shape {:?} with strides {:?} in place: its elements are not in row-major order; copy it into a contiguous tensor first",
                self.shape, self.strides
            )));
        }
        Ok(Tensor {
            strides: row_major(shape),
            shape: shape.to_vec(),
            ..self
        })
    }

    /// Every element, converted to f64. For a GPU tensor this waits for the work queued on
    /// the device (so it reports errors of earlier launches) and downloads.
    pub fn to_f64_vec(&self) -> Result<Vec<f64>> {
        let read = |b: &[u8]| {
            (0..self.numel())
                .map(|i| dtype_io::read(b, self.dtype, i))
                .collect()
        };
        match &self.storage {
            Storage::Host(h) => Ok(read(h.as_slice())),
            Storage::Cuda(_) | Storage::Hip(_) => Ok(read(&self.to_bytes()?)),
        }
    }

    /// The raw little-endian bytes of every element (downloaded for a GPU tensor).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        match &self.storage {
            Storage::Host(h) => Ok(h.as_slice().to_vec()),
            Storage::Cuda(b) => {
                let mut host = vec![0u8; self.nbytes()];
                b.download(&mut host)?;
                Ok(host)
            }
            Storage::Hip(b) => {
                let mut host = vec![0u8; self.nbytes()];
                b.download(&mut host)?;
                Ok(host)
            }
        }
    }

    /// A copy of this tensor on `device` (CPU ↔ GPU, or the same device).
    pub fn to_device(&self, device: &Device) -> Result<Tensor> {
        let t = Tensor::uninit(&self.shape, self.dtype, device)?;
        match (&self.storage, &t.storage) {
            (Storage::Cuda(src), Storage::Cuda(dst))
                if src.device().ordinal() == dst.device().ordinal() =>
            {
                dst.copy_from(src)?
            }
            (Storage::Hip(src), Storage::Hip(dst))
                if src.device().ordinal() == dst.device().ordinal() =>
            {
                dst.copy_from(src)?
            }
            _ => t.write_bytes(&self.to_bytes()?)?,
        }
        Ok(t)
    }

    /// Overwrite every element with raw little-endian bytes (`nbytes()` of them).
    pub fn write_bytes(&self, bytes: &[u8]) -> Result<()> {
        if bytes.len() != self.nbytes() {
            return Err(RuntimeError::Tensor(format!(
                "{} bytes written to a tensor of {} bytes",
                bytes.len(),
                self.nbytes()
            )));
        }
        match &self.storage {
            Storage::Host(h) => h.as_mut_slice().copy_from_slice(bytes),
            Storage::Cuda(b) => b.upload(bytes)?,
            Storage::Hip(b) => b.upload(bytes)?,
        }
        Ok(())
    }

    /// The device address of a GPU tensor (for interop with other CUDA libraries, which must
    /// use the device's stream, [`crate::cuda::CudaDevice::stream`]); `None` on the CPU.
    /// The bytes of a host tensor (empty for device memory).
    pub(crate) fn host_bytes(&self) -> &[u8] {
        match &self.storage {
            Storage::Host(h) => h.as_slice(),
            Storage::Cuda(_) | Storage::Hip(_) => &[],
        }
    }

    /// The bytes of a host tensor, writable (see `HostBuf`).
    #[allow(clippy::mut_from_ref)]
    pub(crate) fn host_bytes_mut(&self) -> &mut [u8] {
        match &self.storage {
            Storage::Host(h) => h.as_mut_slice(),
            Storage::Cuda(_) | Storage::Hip(_) => &mut [],
        }
    }

    pub fn cuda_ptr(&self) -> Option<u64> {
        match &self.storage {
            Storage::Cuda(b) => Some(b.ptr()),
            Storage::Host(_) | Storage::Hip(_) => None,
        }
    }

    /// The device address of a tensor on an AMD GPU (for interop with other HIP libraries,
    /// which must order their work with the runtime's null stream); `None` elsewhere.
    pub fn hip_ptr(&self) -> Option<u64> {
        match &self.storage {
            Storage::Hip(b) => Some(b.ptr()),
            Storage::Host(_) | Storage::Cuda(_) => None,
        }
    }

    fn cuda_buf(&self) -> Result<&DeviceBuf> {
        match &self.storage {
            Storage::Cuda(b) => Ok(b),
            Storage::Host(_) | Storage::Hip(_) => Err(RuntimeError::Tensor(format!(
                "tensor on {} is not on a CUDA GPU",
                self.device
            ))),
        }
    }

    fn hip_buf(&self) -> Result<&HipBuf> {
        match &self.storage {
            Storage::Hip(b) => Ok(b),
            Storage::Host(_) | Storage::Cuda(_) => Err(RuntimeError::Tensor(format!(
                "tensor on {} is not on an AMD GPU",
                self.device
            ))),
        }
    }

    pub fn to_f32_vec(&self) -> Result<Vec<f32>> {
        Ok(self.to_f64_vec()?.into_iter().map(|x| x as f32).collect())
    }

    /// Overwrite every element (values converted to the tensor's dtype).
    pub fn write_f64(&self, data: &[f64]) -> Result<()> {
        if data.len() != self.numel() {
            return Err(RuntimeError::Tensor(format!(
                "{} values written to a tensor of {} elements",
                data.len(),
                self.numel()
            )));
        }
        match &self.storage {
            Storage::Host(h) => {
                let b = h.as_mut_slice();
                for (i, &v) in data.iter().enumerate() {
                    dtype_io::write(b, self.dtype, i, v);
                }
            }
            Storage::Cuda(_) | Storage::Hip(_) => {
                let mut b = vec![0u8; self.nbytes()];
                for (i, &v) in data.iter().enumerate() {
                    dtype_io::write(&mut b, self.dtype, i, v);
                }
                self.write_bytes(&b)?;
            }
        }
        Ok(())
    }

    /// Set every element to `v` (NaN poisons an output, so unwritten elements show up). On a
    /// GPU this is a memset on the device's stream, with no host copy.
    pub fn fill(&self, v: f64) -> Result<()> {
        match &self.storage {
            Storage::Host(_) => self.write_f64(&vec![v; self.numel()]),
            Storage::Cuda(b) => {
                let mut elem = vec![0u8; self.dtype.bytes()];
                dtype_io::write(&mut elem, self.dtype, 0, v);
                b.fill_pattern(&elem)
            }
            Storage::Hip(b) => {
                let mut elem = vec![0u8; self.dtype.bytes()];
                dtype_io::write(&mut elem, self.dtype, 0, v);
                b.fill_pattern(&elem)
            }
        }
    }

    /// ‖self − reference‖₂ / ‖reference‖₂; infinite when anything is NaN.
    pub fn rel_err(&self, reference: &[f64]) -> Result<f64> {
        let out = self.to_f64_vec()?;
        rel_err(&out, reference).map_err(RuntimeError::Tensor)
    }

    /// `|out - ref| <= atol + rtol * |ref|` everywhere (NaN fails).
    pub fn allclose(&self, reference: &[f64], rtol: f64, atol: f64) -> Result<bool> {
        let out = self.to_f64_vec()?;
        if out.len() != reference.len() {
            return Err(RuntimeError::Tensor(format!(
                "comparing {} elements with a reference of {}",
                out.len(),
                reference.len()
            )));
        }
        Ok(out
            .iter()
            .zip(reference)
            .all(|(o, r)| (o - r).abs() <= atol + rtol * r.abs()))
    }

    /// What a kernel receives for this tensor: the host address on the CPU, the device address
    /// (as a pointer-sized value) on a GPU.
    pub(crate) fn raw_ptr(&self) -> *mut c_void {
        match &self.storage {
            Storage::Host(h) => h.ptr() as *mut c_void,
            Storage::Cuda(b) => b.ptr() as usize as *mut c_void,
            Storage::Hip(b) => b.ptr() as usize as *mut c_void,
        }
    }
}

/// ‖out − reference‖₂ / ‖reference‖₂ (‖out‖ when the reference is zero); infinite on NaN.
pub fn rel_err(out: &[f64], reference: &[f64]) -> std::result::Result<f64, String> {
    if out.len() != reference.len() {
        return Err(format!(
            "comparing {} elements with a reference of {}",
            out.len(),
            reference.len()
        ));
    }
    let mut num = 0.0;
    let mut den = 0.0;
    for (o, r) in out.iter().zip(reference) {
        if o.is_nan() || r.is_nan() {
            return Ok(f64::INFINITY);
        }
        num += (o - r) * (o - r);
        den += r * r;
    }
    Ok(if den == 0.0 {
        num.sqrt()
    } else {
        (num / den).sqrt()
    })
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Tensor({:?}, {}, {})",
            self.shape, self.dtype, self.device
        )
    }
}

#[cfg(test)]
mod reshape_tests {
    use super::*;

    /// A reshape keeps the elements and their order, and says what is wrong with a shape of
    /// another element count.
    #[test]
    fn reshape_keeps_the_elements() {
        let t = Tensor::randn(&[16, 5], DType::BF16, 7, &Device::Cpu).expect("tensor");
        let before = t.to_f64_vec().expect("values");
        let v = t
            .reshape(&[2, 40])
            .expect("the [K/8, 8·N] view of a [16, 5]");
        assert_eq!((v.shape(), v.strides()), (&[2, 40][..], &[40, 1][..]));
        assert_eq!(v.to_f64_vec().expect("values"), before);
        let back = v.reshape(&[16, 5]).expect("back");
        assert_eq!(back.to_f64_vec().expect("values"), before);
        let err = back.reshape(&[3, 27]).expect_err("81 elements from 80");
        assert!(err.to_string().contains("80 elements"), "{err}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_and_read() {
        let t = Tensor::from_f64(
            &[2, 3],
            DType::BF16,
            &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
            &Device::Cpu,
        )
        .unwrap();
        assert_eq!(t.to_f64_vec().unwrap(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert!(t.is_contiguous());
        assert_eq!(t.strides(), &[3, 1]);
        assert!(Tensor::from_f64(&[2], DType::F32, &[1.0], &Device::Cpu).is_err());
    }

    #[test]
    fn seeded_random_is_reproducible() {
        let a = Tensor::randn(&[100], DType::F32, 7, &Device::Cpu).unwrap();
        let b = Tensor::randn(&[100], DType::F32, 7, &Device::Cpu).unwrap();
        assert_eq!(a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap());
        let v = a.to_f64_vec().unwrap();
        let mean: f64 = v.iter().sum::<f64>() / 100.0;
        assert!(mean.abs() < 0.5);
    }

    #[test]
    fn errors() {
        let t = Tensor::from_f64(&[2], DType::F32, &[1.0, 2.0], &Device::Cpu).unwrap();
        assert!(t.rel_err(&[1.0, 2.0]).unwrap() == 0.0);
        t.fill(f64::NAN).unwrap();
        assert!(t.rel_err(&[1.0, 2.0]).unwrap().is_infinite());
        assert!(!t.allclose(&[1.0, 2.0], 1e-3, 1e-3).unwrap());
    }
}
