//! Tensor maps (`CUtensorMap`) for Hopper's TMA loads, encoded by the CUDA driver at launch.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_void;

use cudarc::driver::sys;

use crate::exec::{TensorMapBlob, TensorMapRequest};

/// Maps already encoded on this thread, by request. A map is a function of the request alone
/// (the L2 promotion is read once per process), so the launches of a loop over the same
/// tensors reuse it instead of calling the driver each time. Bounded: cleared when full.
const ENCODED_MAX: usize = 1024;
thread_local! {
    static ENCODED: RefCell<HashMap<TensorMapRequest, TensorMapBlob>> = RefCell::new(HashMap::new());
}

/// The tensor map (`CUtensorMap`) a TMA load reads through ([`encode_uncached`]), from this
/// thread's cache when the same request was encoded before. Called at every launch of a TMA
/// kernel.
pub(crate) fn encode_tensor_map(
    r: &TensorMapRequest,
) -> std::result::Result<TensorMapBlob, String> {
    if let Some(b) = ENCODED.with(|c| c.borrow().get(r).copied()) {
        return Ok(b);
    }
    let b = encode_uncached(r)?;
    ENCODED.with(|c| {
        let mut m = c.borrow_mut();
        if m.len() >= ENCODED_MAX {
            m.clear();
        }
        m.insert(r.clone(), b);
    });
    Ok(b)
}

/// Build the tensor map a TMA load reads through: the tensor's sizes and strides, the box,
/// the swizzle; out-of-range elements of a box read as zeros (a host-side driver call of a few
/// microseconds). The hardware's rules are checked here with errors that say what to change:
/// a 16-byte aligned base address, strides that are multiples of 16 bytes, boxes of 1 to 256
/// elements per dim.
fn encode_uncached(r: &TensorMapRequest) -> std::result::Result<TensorMapBlob, String> {
    use sys::{
        CUtensorMapDataType as Dt, CUtensorMapFloatOOBfill as Oob, CUtensorMapInterleave as Il,
        CUtensorMapSwizzle as Sw,
    };
    let rank = r.dims.len();
    if !(1..=5).contains(&rank) || r.box_dims.len() != rank {
        return Err(format!(
            "a TMA descriptor of a {rank}-d tensor with a {}-d box (TMA takes 1 to 5 dims)",
            r.box_dims.len()
        ));
    }
    if !r.ptr.is_multiple_of(16) {
        return Err(format!(
            "the tensor's address {:#x} is not 16-byte aligned, which the kernel's TMA loads need; pass a tensor that starts at a 16-byte boundary (not a view at an odd offset), or compile with TILELANG_TMA=0",
            r.ptr
        ));
    }
    let dt = match r.elem_bytes {
        1 => Dt::CU_TENSOR_MAP_DATA_TYPE_UINT8,
        2 => Dt::CU_TENSOR_MAP_DATA_TYPE_UINT16,
        4 => Dt::CU_TENSOR_MAP_DATA_TYPE_UINT32,
        8 => Dt::CU_TENSOR_MAP_DATA_TYPE_UINT64,
        n => return Err(format!("TMA of {n}-byte elements")),
    };
    let swizzle = match r.swizzle {
        0 => Sw::CU_TENSOR_MAP_SWIZZLE_NONE,
        32 => Sw::CU_TENSOR_MAP_SWIZZLE_32B,
        64 => Sw::CU_TENSOR_MAP_SWIZZLE_64B,
        128 => Sw::CU_TENSOR_MAP_SWIZZLE_128B,
        n => return Err(format!("a TMA swizzle of {n} bytes")),
    };
    // The driver takes dims innermost first, and the strides of all but the innermost dim.
    let dims: Vec<u64> = r.dims.iter().rev().map(|&d| d.max(1) as u64).collect();
    let mut strides = vec![];
    let mut stride = r.elem_bytes as u64;
    for (i, &d) in dims[..rank - 1].iter().enumerate() {
        stride = match (i, r.row_pitch) {
            (0, Some(pitch)) => pitch as u64,
            _ => stride * d,
        };
        if !stride.is_multiple_of(16) {
            return Err(format!(
                "a row of the tensor (shape {:?}) is {stride} bytes, not a multiple of the 16 TMA needs; this variant should not have been chosen (compile with TILELANG_TMA=0 and report it)",
                r.dims
            ));
        }
        strides.push(stride);
    }
    let boxes: Vec<u32> = r.box_dims.iter().rev().copied().collect();
    if boxes.iter().any(|&b| b == 0 || b > 256) {
        return Err(format!("a TMA box of {:?} (1 to 256 per dim)", r.box_dims));
    }
    let elem_strides = vec![1u32; rank];
    let mut map = sys::CUtensorMap { opaque: [0; 16] };
    // SAFETY: every array holds `rank` (strides: rank - 1) entries, as the call's contract
    // asks; `map` is a valid 128-byte destination; the global address is only recorded.
    let res = unsafe {
        sys::cuTensorMapEncodeTiled(
            &mut map,
            dt,
            rank as u32,
            r.ptr as *mut c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            elem_strides.as_ptr(),
            Il::CU_TENSOR_MAP_INTERLEAVE_NONE,
            swizzle,
            l2_promotion(),
            Oob::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    if res != sys::CUresult::CUDA_SUCCESS {
        return Err(format!(
            "cuTensorMapEncodeTiled failed ({res:?}) for a tensor of shape {:?} ({} bytes per element) in boxes of {:?} with a {}-byte swizzle",
            r.dims, r.elem_bytes, r.box_dims, r.swizzle
        ));
    }
    Ok(TensorMapBlob(map.opaque))
}

/// The L2 promotion of every tensor map: 256 bytes, or `TILELANG_TMA_L2` (0, 64, 128, 256) to
/// measure the others (read once, which also keeps every encoded map a function of its request).
fn l2_promotion() -> sys::CUtensorMapL2promotion {
    use sys::CUtensorMapL2promotion as L2;
    static P: std::sync::OnceLock<L2> = std::sync::OnceLock::new();
    *P.get_or_init(|| match std::env::var("TILELANG_TMA_L2").ok().as_deref() {
        Some("0") => L2::CU_TENSOR_MAP_L2_PROMOTION_NONE,
        Some("64") => L2::CU_TENSOR_MAP_L2_PROMOTION_L2_64B,
        Some("128") => L2::CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        _ => L2::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
    })
}
