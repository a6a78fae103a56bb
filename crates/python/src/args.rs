//! Arrays of other libraries as launch arguments, without copies: numpy arrays through
//! `__array_interface__`, torch tensors through their data pointer, shape, strides, dtype and
//! device, anything else with `__cuda_array_interface__` (CuPy, Numba) as CUDA memory. The
//! result is an [`ExternalTensor`] that the runtime's `bind_args` checks like its own tensors.
//! Outputs to allocate are made by the library of the inputs (`numpy.empty`, torch's `new_empty`).

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyTuple};
use tl_ir::{DType, Role};
use tl_runtime::{Device, ExternalTensor};

use crate::dlpack::{DlPlace, DlView};
use crate::error::{type_error, value_error};

/// What the executable knows of a parameter.
#[derive(Clone, Debug)]
pub struct ParamInfo {
    pub name: String,
    pub role: Role,
}

/// A converted argument, owned for the duration of a call.
pub enum Held {
    Ext(ExternalTensor),
    Int(i64),
    Float(f64),
}

/// Where the arrays came from: outputs are allocated by the same library.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lib {
    Numpy,
    /// torch, with the index of the first tensor argument (to allocate beside it).
    Torch(usize),
    Other,
}

pub struct Converted {
    pub held: Vec<Held>,
    pub lib: Option<Lib>,
    /// The CUDA (or ROCm) device index of torch GPU tensors, for torch's current stream.
    pub torch_gpu: Option<i64>,
}

struct Torch {
    tensor: Py<PyAny>,
    dtypes: Vec<(Py<PyAny>, DType)>,
    /// `torch._C._cuda_getCurrentRawStream(index)` (an int), when torch has CUDA.
    raw_stream: Option<Py<PyAny>>,
    /// `torch._C._to_dlpack`, which describes a tensor in one call ([`crate::dlpack`]).
    to_dlpack: Option<Py<PyAny>>,
}

static NUMPY: PyOnceLock<Option<(Py<PyAny>, Py<PyAny>)>> = PyOnceLock::new();
static TORCH: PyOnceLock<Torch> = PyOnceLock::new();

/// numpy's `ndarray` type and `empty`, when numpy can be imported.
fn numpy(py: Python<'_>) -> Option<&(Py<PyAny>, Py<PyAny>)> {
    NUMPY
        .get_or_init(py, || {
            let np = py.import("numpy").ok()?;
            Some((
                np.getattr("ndarray").ok()?.unbind(),
                np.getattr("empty").ok()?.unbind(),
            ))
        })
        .as_ref()
}

/// torch, once the program has imported it (it is never imported here: the package works
/// without it).
fn torch(py: Python<'_>) -> Option<&Torch> {
    if let Some(t) = TORCH.get(py) {
        return Some(t);
    }
    let modules = py.import("sys").ok()?.getattr("modules").ok()?;
    let torch = modules.get_item("torch").ok()?;
    let t = (|| -> PyResult<Torch> {
        let mut dtypes = vec![];
        for (name, d) in [
            ("float16", DType::F16),
            ("bfloat16", DType::BF16),
            ("float32", DType::F32),
            ("float64", DType::F64),
            ("int8", DType::I8),
            ("int16", DType::I16),
            ("int32", DType::I32),
            ("int64", DType::I64),
            ("uint8", DType::U8),
            ("uint16", DType::U16),
            ("uint32", DType::U32),
            ("uint64", DType::U64),
            ("bool", DType::Bool),
            ("float8_e4m3fn", DType::F8E4M3),
            ("float8_e5m2", DType::F8E5M2),
        ] {
            if let Ok(o) = torch.getattr(name) {
                dtypes.push((o.unbind(), d));
            }
        }
        let raw_stream = torch
            .getattr("_C")
            .and_then(|c| c.getattr("_cuda_getCurrentRawStream"))
            .ok()
            .map(Bound::unbind);
        let to_dlpack = torch
            .getattr("_C")
            .and_then(|c| c.getattr("_to_dlpack"))
            .ok()
            .map(Bound::unbind);
        Ok(Torch {
            to_dlpack,
            tensor: torch.getattr("Tensor")?.unbind(),
            dtypes,
            raw_stream,
        })
    })()
    .ok()?;
    let _ = TORCH.set(py, t);
    TORCH.get(py)
}

fn bad(i: usize, p: Option<&ParamInfo>, msg: String) -> String {
    match p {
        Some(p) => format!("argument {i} (`{}`): {msg}", p.name),
        None => format!("argument {i}: {msg}"),
    }
}

/// The dtype of a numpy `typestr` (`<f4`), with the array for names numpy leaves to
/// extensions (ml_dtypes' bfloat16 and float8 types are `V2`/`V1`).
fn numpy_dtype(obj: &Bound<'_, PyAny>, typestr: &str) -> PyResult<Option<DType>> {
    let b = typestr.as_bytes();
    if b.len() < 3 {
        return Ok(None);
    }
    if b[0] == b'>' && typestr[2..] != *"1" {
        return Err(value_error("big-endian arrays are not supported"));
    }
    let size = &typestr[2..];
    Ok(match (b[1], size) {
        (b'f', "2") => Some(DType::F16),
        (b'f', "4") => Some(DType::F32),
        (b'f', "8") => Some(DType::F64),
        (b'i', "1") => Some(DType::I8),
        (b'i', "2") => Some(DType::I16),
        (b'i', "4") => Some(DType::I32),
        (b'i', "8") => Some(DType::I64),
        (b'u', "1") => Some(DType::U8),
        (b'u', "2") => Some(DType::U16),
        (b'u', "4") => Some(DType::U32),
        (b'u', "8") => Some(DType::U64),
        (b'b', "1") => Some(DType::Bool),
        // ml_dtypes' types: bfloat16 and float8_e4m3fn are `V2` / `V1`, float8_e5m2 is `f1`.
        (b'V', _) | (b'f', "1") => {
            let name: String = obj.getattr("dtype")?.getattr("name")?.extract()?;
            if name.contains("fnuz") {
                return Err(value_error(format!(
                    "arrays of {name} are not supported: the fnuz float8 formats differ from float8_e4m3fn / float8_e5m2 in bias and NaN"
                )));
            }
            crate::expr::parse_dtype(&name)
        }
        _ => None,
    })
}

/// The head of numpy's `PyArrayObject_fields` (`numpy/ndarraytypes.h`), the same in numpy 1.x
/// and 2.x: what `rust-numpy` reads too. Reading it costs nanoseconds where
/// `__array_interface__` builds a dict of tuples (about 2 µs an array).
#[repr(C)]
struct NpyArray {
    ob_refcnt: isize,
    ob_type: *mut std::ffi::c_void,
    data: *mut std::ffi::c_void,
    nd: std::ffi::c_int,
    dimensions: *const isize,
    strides: *const isize,
    base: *mut std::ffi::c_void,
    descr: *const NpyDescr,
    flags: std::ffi::c_int,
}

/// The head of `PyArray_Descr`, whose first fields numpy 2 kept where numpy 1 had them.
#[repr(C)]
struct NpyDescr {
    ob_refcnt: isize,
    ob_type: *mut std::ffi::c_void,
    typeobj: *mut std::ffi::c_void,
    kind: std::ffi::c_char,
    type_char: std::ffi::c_char,
    byteorder: std::ffi::c_char,
    flags: std::ffi::c_char,
    type_num: std::ffi::c_int,
}

const NPY_ARRAY_WRITEABLE: std::ffi::c_int = 0x0400;

/// numpy's built-in type numbers (`NPY_TYPES`); user types (ml_dtypes' bfloat16 and float8)
/// are not here and take the `__array_interface__` path.
fn npy_dtype(type_num: std::ffi::c_int) -> Option<DType> {
    let long = if std::mem::size_of::<std::ffi::c_long>() == 8 {
        (DType::I64, DType::U64)
    } else {
        (DType::I32, DType::U32)
    };
    Some(match type_num {
        0 => DType::Bool,
        1 => DType::I8,
        2 => DType::U8,
        3 => DType::I16,
        4 => DType::U16,
        5 => DType::I32,
        6 => DType::U32,
        7 => long.0,
        8 => long.1,
        9 => DType::I64,
        10 => DType::U64,
        11 => DType::F32,
        12 => DType::F64,
        23 => DType::F16,
        _ => return None,
    })
}

/// A numpy array (`obj` is an `ndarray`) read from its struct, or None when the interface
/// path should decide (a user dtype, a big-endian array).
fn from_ndarray(
    obj: &Bound<'_, PyAny>,
    p: Option<&ParamInfo>,
    i: usize,
) -> Option<PyResult<ExternalTensor>> {
    // SAFETY: the caller checked that `obj` is an ndarray (or a subclass), whose object
    // starts with these fields; `obj` is borrowed for the whole call, and with it its
    // descriptor, shape and strides.
    let (ptr, dtype, shape, bytes, writeable) = unsafe {
        let a = &*(obj.as_ptr() as *const NpyArray);
        if a.descr.is_null() || a.nd < 0 || a.nd > 64 {
            return None;
        }
        let d = &*a.descr;
        if d.byteorder as u8 == b'>' {
            return None;
        }
        let dtype = npy_dtype(d.type_num)?;
        let nd = a.nd as usize;
        let (shape, strides) = if nd == 0 {
            (vec![], vec![])
        } else {
            (
                std::slice::from_raw_parts(a.dimensions, nd).to_vec(),
                std::slice::from_raw_parts(a.strides, nd).to_vec(),
            )
        };
        (
            a.data,
            dtype,
            shape,
            strides,
            a.flags & NPY_ARRAY_WRITEABLE != 0,
        )
    };
    let esize = dtype.bytes() as isize;
    if bytes.iter().any(|b| b % esize != 0) {
        return Some(Err(value_error(bad(
            i,
            p,
            format!("strides {bytes:?} (bytes) are not whole elements; the tensor is not contiguous (row-major)"),
        ))));
    }
    if !writeable && p.is_some_and(|p| p.role != Role::Input) {
        return Some(Err(value_error(bad(
            i,
            p,
            "the array is read-only, but the kernel writes it".into(),
        ))));
    }
    let shape: Vec<usize> = shape.iter().map(|&n| n.max(0) as usize).collect();
    let strides: Vec<isize> = bytes.iter().map(|b| b / esize).collect();
    // SAFETY: numpy's own description of memory the array owns, kept alive by the caller.
    Some(
        unsafe { ExternalTensor::new(ptr, dtype, shape, strides, Device::Cpu) }
            .map_err(|e| value_error(bad(i, p, e.to_string()))),
    )
}

/// An `__array_interface__`/`__cuda_array_interface__` dict as a tensor on `device`.
fn from_interface(
    obj: &Bound<'_, PyAny>,
    iface: &Bound<'_, PyAny>,
    device: Device,
    p: Option<&ParamInfo>,
    i: usize,
) -> PyResult<ExternalTensor> {
    let py = obj.py();
    let d = iface.cast::<PyDict>()?;
    let get = |k: &str| -> PyResult<Bound<'_, PyAny>> {
        d.get_item(k)?
            .ok_or_else(|| type_error(bad(i, p, format!("the array interface has no `{k}`"))))
    };
    let (ptr, readonly): (usize, bool) = get("data")?.extract()?;
    let shape: Vec<usize> = get("shape")?.extract()?;
    let typestr: String = get("typestr")?.extract()?;
    let dtype = numpy_dtype(obj, &typestr)?.ok_or_else(|| {
        type_error(bad(
            i,
            p,
            format!("arrays of `{typestr}` are not supported"),
        ))
    })?;
    let esize = dtype.bytes() as isize;
    let strides: Vec<isize> = match d.get_item(intern!(py, "strides"))? {
        Some(s) if !s.is_none() => {
            let bytes: Vec<isize> = s.extract()?;
            if bytes.iter().any(|b| b % esize != 0) {
                return Err(value_error(bad(
                    i,
                    p,
                    format!("strides {bytes:?} (bytes) are not whole elements; the tensor is not contiguous (row-major)"),
                )));
            }
            bytes.iter().map(|b| b / esize).collect()
        }
        _ => {
            let mut s = vec![1isize; shape.len()];
            for k in (0..shape.len().saturating_sub(1)).rev() {
                s[k] = s[k + 1] * shape[k + 1] as isize;
            }
            s
        }
    };
    if readonly && p.is_some_and(|p| p.role != Role::Input) {
        return Err(value_error(bad(
            i,
            p,
            "the array is read-only, but the kernel writes it".into(),
        )));
    }
    // SAFETY: the interface describes memory the caller's object owns; the object is kept
    // alive by the caller for the duration of the call.
    unsafe { ExternalTensor::new(ptr as *mut std::ffi::c_void, dtype, shape, strides, device) }
        .map_err(|e| value_error(bad(i, p, e.to_string())))
}

/// Whether to ask torch for a DLPack capsule before reading `dtype` (whose code gives most
/// dtypes: one attribute read less a tensor). Cleared the first time a capsule cannot be had
/// (a torch whose `_to_dlpack` refuses some dtype, float8 in older releases): from then on
/// `dtype` is read first, and float8 tensors take the attribute reads, so no call pays for a
/// raised exception twice.
static DLPACK_FIRST: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

fn torch_dtype(
    t: &Torch,
    obj: &Bound<'_, PyAny>,
    p: Option<&ParamInfo>,
    i: usize,
) -> PyResult<DType> {
    let py = obj.py();
    let dt = obj.getattr(intern!(py, "dtype"))?;
    t.dtypes
        .iter()
        .find(|(o, _)| o.bind(py).is(&dt))
        .map(|(_, d)| *d)
        .ok_or_else(|| type_error(bad(i, p, format!("tensors of {dt} are not supported"))))
}

fn from_torch(
    t: &Torch,
    obj: &Bound<'_, PyAny>,
    exe_device: Device,
    p: Option<&ParamInfo>,
    i: usize,
) -> PyResult<(ExternalTensor, Option<i64>)> {
    use std::sync::atomic::Ordering::Relaxed;
    let py = obj.py();
    let (dtype, view) = if DLPACK_FIRST.load(Relaxed) {
        match t
            .to_dlpack
            .as_ref()
            .and_then(|f| crate::dlpack::view(f.bind(py), obj))
        {
            Some(v) => (
                match v.dtype {
                    Some(d) => d,
                    None => torch_dtype(t, obj, p, i)?,
                },
                Some(v),
            ),
            None => {
                DLPACK_FIRST.store(false, Relaxed);
                (torch_dtype(t, obj, p, i)?, None)
            }
        }
    } else {
        let dtype = torch_dtype(t, obj, p, i)?;
        (dtype, dlpack_view(t, obj, dtype))
    };
    // A capsule whose element width disagrees with the dtype is not trusted.
    let view = view.filter(|v| v.bits as usize == dtype.bytes() * 8);
    if let Some(v) = view {
        let (device, gpu) = match v.place {
            DlPlace::Cpu => (Device::Cpu, None),
            // ROCm builds of torch call AMD GPUs `cuda` too.
            DlPlace::Gpu(idx) if exe_device.is_hip() => {
                (Device::Hip(idx.max(0) as usize), Some(idx))
            }
            DlPlace::Gpu(idx) => (Device::Cuda(idx.max(0) as usize), Some(idx)),
        };
        // SAFETY: as below, from torch's DLPack description of the same tensor.
        let ext = unsafe {
            ExternalTensor::new(
                v.ptr as *mut std::ffi::c_void,
                dtype,
                v.shape,
                v.strides,
                device,
            )
        }
        .map_err(|e| value_error(bad(i, p, e.to_string())))?;
        return Ok((ext, gpu));
    }
    let ptr: usize = obj.call_method0(intern!(py, "data_ptr"))?.extract()?;
    let shape: Vec<usize> = ints_of(&obj.getattr(intern!(py, "shape"))?)?
        .into_iter()
        .map(|n| n.max(0) as usize)
        .collect();
    let strides: Vec<isize> = ints_of(&obj.call_method0(intern!(py, "stride"))?)?
        .into_iter()
        .map(|n| n as isize)
        .collect();
    // A CPU kernel asks `is_cpu` first: one attribute read for the tensors it takes.
    if exe_device.is_host() && obj.getattr(intern!(py, "is_cpu"))?.is_truthy()? {
        // SAFETY: as below.
        let ext = unsafe {
            ExternalTensor::new(
                ptr as *mut std::ffi::c_void,
                dtype,
                shape,
                strides,
                Device::Cpu,
            )
        }
        .map_err(|e| value_error(bad(i, p, e.to_string())))?;
        return Ok((ext, None));
    }
    let (device, gpu) = if obj.getattr(intern!(py, "is_cuda"))?.is_truthy()? {
        let idx: i64 = obj.call_method0(intern!(py, "get_device"))?.extract()?;
        let ord = idx.max(0) as usize;
        // ROCm builds of torch call AMD GPUs `cuda` too.
        let dev = if exe_device.is_hip() {
            Device::Hip(ord)
        } else {
            Device::Cuda(ord)
        };
        (dev, Some(idx))
    } else if obj.getattr(intern!(py, "is_cpu"))?.extract::<bool>()? {
        (Device::Cpu, None)
    } else {
        let d = obj.getattr(intern!(py, "device"))?;
        return Err(value_error(bad(
            i,
            p,
            format!("tensors on `{d}` are not supported; use CPU or CUDA tensors"),
        )));
    };
    // SAFETY: torch owns the storage, which the caller keeps alive during the call; the
    // address, shape and strides are torch's own description of it.
    let ext =
        unsafe { ExternalTensor::new(ptr as *mut std::ffi::c_void, dtype, shape, strides, device) }
            .map_err(|e| value_error(bad(i, p, e.to_string())))?;
    Ok((ext, gpu))
}

/// `tensor` through DLPack when torch offers it and the dtype is one DLPack describes
/// plainly (not the float8 formats, whose DLPack codes torch versions disagree on).
fn dlpack_view(t: &Torch, tensor: &Bound<'_, PyAny>, dtype: DType) -> Option<DlView> {
    if matches!(dtype, DType::F8E4M3 | DType::F8E5M2) {
        return None;
    }
    let f = t.to_dlpack.as_ref()?;
    crate::dlpack::view(f.bind(tensor.py()), tensor)
}

/// A tuple of ints (torch's `Size` is a tuple subclass, `stride()` a tuple) read item by
/// item; other sequences through the generic conversion.
fn ints_of(obj: &Bound<'_, PyAny>) -> PyResult<Vec<i64>> {
    match obj.cast::<PyTuple>() {
        Ok(t) => {
            let mut v = Vec::with_capacity(t.len());
            for x in t.iter_borrowed() {
                v.push(x.extract::<i64>()?);
            }
            Ok(v)
        }
        Err(_) => obj.extract(),
    }
}

/// Convert one argument for parameter `p` (None when there are more arguments than
/// parameters: `bind_args` then reports the count).
pub fn convert_one(
    obj: &Bound<'_, PyAny>,
    p: Option<&ParamInfo>,
    i: usize,
    device: Device,
    conv: &mut Converted,
) -> PyResult<()> {
    let py = obj.py();
    if obj.is_instance_of::<PyBool>() {
        conv.held.push(Held::Int(obj.extract::<bool>()? as i64));
        return Ok(());
    }
    if obj.is_instance_of::<PyInt>() {
        let v: i64 = obj
            .extract()
            .map_err(|_| value_error(bad(i, p, format!("{obj} does not fit in 64 bits"))))?;
        conv.held.push(Held::Int(v));
        return Ok(());
    }
    if obj.is_instance_of::<PyFloat>() {
        conv.held.push(Held::Float(obj.extract()?));
        return Ok(());
    }
    let ty = obj.get_type();
    // A plain torch tensor is recognized by its type before numpy's subclass test runs (once
    // a torch tensor has been seen: before, looking torch up would cost numpy's callers).
    let exact_tensor = TORCH.get(py).is_some_and(|t| ty.is(t.tensor.bind(py)));
    if let Some((ndarray, _)) = numpy(py).filter(|_| !exact_tensor) {
        if ty.is(ndarray.bind(py)) || obj.is_instance(ndarray.bind(py))? {
            if let Some(t) = from_ndarray(obj, p, i) {
                conv.held.push(Held::Ext(t?));
                conv.lib.get_or_insert(Lib::Numpy);
                return Ok(());
            }
            let iface = obj.getattr(intern!(py, "__array_interface__"))?;
            conv.held
                .push(Held::Ext(from_interface(obj, &iface, Device::Cpu, p, i)?));
            conv.lib.get_or_insert(Lib::Numpy);
            return Ok(());
        }
    }
    if let Some(t) = torch(py) {
        if exact_tensor || obj.is_instance(t.tensor.bind(py))? {
            let (ext, gpu) = from_torch(t, obj, device, p, i)?;
            conv.held.push(Held::Ext(ext));
            conv.lib.get_or_insert(Lib::Torch(i));
            if conv.torch_gpu.is_none() {
                conv.torch_gpu = gpu;
            }
            return Ok(());
        }
    }
    if let Ok(iface) = obj.getattr(intern!(py, "__cuda_array_interface__")) {
        if !(device.is_cuda() || device.is_hip()) {
            return Err(value_error(bad(
                i,
                p,
                format!("GPU memory given to a kernel compiled for {device}"),
            )));
        }
        conv.held
            .push(Held::Ext(from_interface(obj, &iface, device, p, i)?));
        conv.lib.get_or_insert(Lib::Other);
        return Ok(());
    }
    if let Ok(iface) = obj.getattr(intern!(py, "__array_interface__")) {
        conv.held
            .push(Held::Ext(from_interface(obj, &iface, Device::Cpu, p, i)?));
        conv.lib.get_or_insert(Lib::Other);
        return Ok(());
    }
    Err(type_error(bad(
        i,
        p,
        format!(
            "expected a numpy array, a torch tensor or a number, got {}",
            obj.get_type().name()?
        ),
    )))
}

/// torch's current stream on device `index`, as a raw handle.
pub fn torch_stream(py: Python<'_>, index: i64) -> PyResult<Option<usize>> {
    let Some(t) = torch(py) else { return Ok(None) };
    match &t.raw_stream {
        Some(f) => Ok(Some(f.bind(py).call1((index,))?.extract()?)),
        None => Ok(None),
    }
}

/// A new array for an output of `shape` and `dtype`, from the inputs' library (numpy when
/// there are no array inputs).
pub fn allocate<'py>(
    py: Python<'py>,
    lib: Option<Lib>,
    args: &Bound<'py, PyTuple>,
    shape: &[usize],
    dtype: DType,
) -> PyResult<Bound<'py, PyAny>> {
    let shape = PyTuple::new(py, shape)?;
    match lib {
        Some(Lib::Torch(i)) => {
            let t = torch(py).ok_or_else(|| type_error("torch is not imported"))?;
            let dt = t
                .dtypes
                .iter()
                .find(|(_, d)| *d == dtype)
                .map(|(o, _)| o.bind(py).clone())
                .ok_or_else(|| type_error(format!("torch has no {}", crate::expr::dtype_name(dtype))))?;
            // `new_empty` on the first torch argument takes its device (and, when the dtypes
            // agree, its dtype) from the tensor: no `device` read and no keyword dict. The
            // allocation itself, torch's argument parsing from Python, still costs 3–4 µs
            // (run 20b: as much as `torch.empty(shape, dtype=, device=)`).
            let like = args.get_item(i)?;
            if like.getattr(intern!(py, "dtype"))?.is(&dt) {
                return like.call_method1(intern!(py, "new_empty"), (shape,));
            }
            let kw = PyDict::new(py);
            kw.set_item(intern!(py, "dtype"), dt)?;
            like.call_method(intern!(py, "new_empty"), (shape,), Some(&kw))
        }
        Some(Lib::Other) => Err(type_error(
            "outputs are allocated with numpy or torch; pass every tensor of other libraries explicitly",
        )),
        Some(Lib::Numpy) | None => {
            let (_, empty) =
                numpy(py).ok_or_else(|| type_error("numpy is needed to allocate outputs"))?;
            let name = crate::expr::dtype_name(dtype);
            let dt: Bound<'py, PyAny> = match dtype {
                DType::BF16 | DType::F8E4M3 | DType::F8E5M2 => {
                    let ml = py.import("ml_dtypes").map_err(|_| {
                        type_error(format!(
                            "numpy has no {name}: install ml_dtypes, or pass torch tensors"
                        ))
                    })?;
                    let attr = match dtype {
                        DType::BF16 => "bfloat16",
                        DType::F8E4M3 => "float8_e4m3fn",
                        _ => "float8_e5m2",
                    };
                    ml.getattr(attr)?
                }
                _ => pyo3::types::PyString::new(py, name).into_any(),
            };
            empty.bind(py).call1((shape, dt))
        }
    }
}
