//! A torch tensor's address, shape, strides and device in one call: `torch._C._to_dlpack`
//! returns a DLPack capsule whose C struct holds all four. Six attribute reads (`data_ptr()`,
//! `shape`, `stride()`, `is_cuda`, `get_device()`, …) cost about twice as much host time
//! (an H100 machine's host: 0.31 µs a capsule, made and freed, against 0.63 µs of reads a
//! tensor; `python/bench/call_breakdown.py`), and a launch converts every tensor it takes.
//!
//! Anything unexpected — no `_to_dlpack` in this torch, a call that raises, a capsule of
//! another name, a device other than the CPU, CUDA or ROCm — returns None, and the caller
//! reads the attributes instead (which also words the errors).

use std::ffi::{c_void, CStr};

use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use tl_ir::DType;

/// `DLDevice` (dlpack.h).
#[repr(C)]
struct DlDevice {
    device_type: i32,
    device_id: i32,
}

/// `DLDataType` (dlpack.h).
#[repr(C)]
struct DlDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

/// `DLTensor` (dlpack.h), the same in every DLPack version.
#[repr(C)]
struct DlTensor {
    data: *mut c_void,
    device: DlDevice,
    ndim: i32,
    dtype: DlDataType,
    shape: *const i64,
    strides: *const i64,
    byte_offset: u64,
}

/// `DLManagedTensor`, the struct of a capsule named `dltensor`: the tensor first.
#[repr(C)]
struct DlManagedTensor {
    dl_tensor: DlTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DlManagedTensor)>,
}

/// `DLManagedTensorVersioned` (DLPack ≥ 1.0), a capsule named `dltensor_versioned`: the
/// tensor last.
#[repr(C)]
struct DlManagedTensorVersioned {
    version: [u32; 2],
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DlManagedTensorVersioned)>,
    flags: u64,
    dl_tensor: DlTensor,
}

const KDL_CPU: i32 = 1;
const KDL_CUDA: i32 = 2;
const KDL_ROCM: i32 = 10;

/// Where a tensor lives, as DLPack names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DlPlace {
    Cpu,
    /// A CUDA device (or, in ROCm builds of torch, an AMD one), by index.
    Gpu(i64),
}

/// What a launch needs of a tensor.
#[derive(Debug)]
pub struct DlView {
    pub ptr: usize,
    pub shape: Vec<usize>,
    /// In elements, as torch counts them.
    pub strides: Vec<isize>,
    pub place: DlPlace,
    /// The element's width in bits as DLPack gives it (a check against the dtype read
    /// from torch).
    pub bits: u32,
    /// The element type where DLPack's code says it plainly ([`plain_dtype`]).
    pub dtype: Option<DType>,
}

/// The dtype of a DLPack (code, bits) that every DLPack version and torch release spells the
/// same way; None for the rest — 8-bit unsigned (torch releases before DLPack's bool code
/// gave bools that code), the float8 formats (whose codes came later), anything else — for
/// which the caller reads torch's `dtype`.
pub fn plain_dtype(code: u8, bits: u8) -> Option<DType> {
    const INT: u8 = 0;
    const UINT: u8 = 1;
    const FLOAT: u8 = 2;
    const BFLOAT: u8 = 4;
    const BOOL: u8 = 6;
    Some(match (code, bits) {
        (INT, 8) => DType::I8,
        (INT, 16) => DType::I16,
        (INT, 32) => DType::I32,
        (INT, 64) => DType::I64,
        (UINT, 16) => DType::U16,
        (UINT, 32) => DType::U32,
        (UINT, 64) => DType::U64,
        (FLOAT, 16) => DType::F16,
        (FLOAT, 32) => DType::F32,
        (FLOAT, 64) => DType::F64,
        (BFLOAT, 16) => DType::BF16,
        (BOOL, 8) => DType::Bool,
        _ => return None,
    })
}

/// Read `tensor` through `to_dlpack` (torch's `_C._to_dlpack`). The capsule is dropped
/// before returning, which frees it (torch's destructor calls the deleter of a capsule that
/// no one consumed); the tensor's memory stays with the tensor, which the caller holds.
pub fn view(to_dlpack: &Bound<'_, PyAny>, tensor: &Bound<'_, PyAny>) -> Option<DlView> {
    let capsule = to_dlpack.call1((tensor,)).ok()?;
    let capsule = capsule.cast::<PyCapsule>().ok()?;
    let name = capsule.name().ok()??;
    // SAFETY: the name pointer is the capsule's, alive as long as the capsule.
    let name: &CStr = unsafe { name.as_cstr() };
    let t: *const DlTensor = if name == c"dltensor" {
        let p = capsule.pointer_checked(Some(c"dltensor")).ok()?;
        // SAFETY: a `dltensor` capsule holds a `DLManagedTensor` (the DLPack contract).
        unsafe { &(*(p.as_ptr() as *const DlManagedTensor)).dl_tensor }
    } else if name == c"dltensor_versioned" {
        let p = capsule.pointer_checked(Some(c"dltensor_versioned")).ok()?;
        // SAFETY: a `dltensor_versioned` capsule holds a `DLManagedTensorVersioned`; its
        // major version 1 fixes the layout read here.
        let m = unsafe { &*(p.as_ptr() as *const DlManagedTensorVersioned) };
        if m.version[0] != 1 {
            return None;
        }
        &m.dl_tensor
    } else {
        return None;
    };
    // SAFETY: `t` points into the capsule, alive until `capsule` drops at the end of this
    // function; shape and strides hold `ndim` entries each (DLPack's contract; torch always
    // fills strides).
    unsafe {
        let t = &*t;
        let place = match t.device.device_type {
            KDL_CPU => DlPlace::Cpu,
            KDL_CUDA | KDL_ROCM => DlPlace::Gpu(t.device.device_id as i64),
            _ => return None,
        };
        if t.ndim < 0 || t.ndim > 64 || t.dtype.lanes != 1 {
            return None;
        }
        let nd = t.ndim as usize;
        let (shape, strides) = if nd == 0 {
            (vec![], vec![])
        } else {
            if t.shape.is_null() || t.strides.is_null() {
                return None;
            }
            let shape = std::slice::from_raw_parts(t.shape, nd);
            let strides = std::slice::from_raw_parts(t.strides, nd);
            (
                shape.iter().map(|&n| n.max(0) as usize).collect(),
                strides.iter().map(|&s| s as isize).collect(),
            )
        };
        Some(DlView {
            ptr: (t.data as usize).wrapping_add(t.byte_offset as usize),
            shape,
            strides,
            place,
            bits: t.dtype.bits as u32,
            dtype: plain_dtype(t.dtype.code, t.dtype.bits),
        })
    }
}
