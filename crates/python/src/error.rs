//! Rust errors as Python exceptions: diagnostics of kernels as `TileLangError` (whose message
//! is the rendered diagnostics, the same text the Rust DSL prints), argument problems as
//! `TypeError` (count, kinds, element types) or `ValueError` (shapes, devices, layouts).

use pyo3::exceptions::{PyException, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::PyErr;
use tl_runtime::RuntimeError;

pyo3::create_exception!(
    tilelang_rs,
    TileLangError,
    PyException,
    "A kernel is ill-formed or cannot be compiled; the message names the line to change."
);

pub fn diagnostics(d: impl std::fmt::Display) -> PyErr {
    TileLangError::new_err(d.to_string())
}

pub fn compile(e: tilelang::Error) -> PyErr {
    match e {
        tilelang::Error::Compile(d) => diagnostics(d),
        tilelang::Error::Runtime(r) => runtime(r),
        other => PyRuntimeError::new_err(other.to_string()),
    }
}

pub fn runtime(e: RuntimeError) -> PyErr {
    let text = e.to_string();
    match &e {
        RuntimeError::ArgCount { .. } => PyTypeError::new_err(text),
        RuntimeError::BadArg { reason, .. } if is_type_problem(reason) => {
            PyTypeError::new_err(text)
        }
        RuntimeError::BadArg { .. } | RuntimeError::BufferRange { .. } => {
            PyValueError::new_err(text)
        }
        _ => PyRuntimeError::new_err(text),
    }
}

/// Whether `bind_args` refused an argument for its kind or element type (a `TypeError` in
/// Python) rather than its shape, device or layout (a `ValueError`).
fn is_type_problem(reason: &str) -> bool {
    reason.starts_with("expected a tensor")
        || (reason.starts_with("expected ") && reason.contains(" scalar"))
        || (reason.starts_with("expected ") && reason.contains(" elements, got "))
}

pub fn type_error(msg: impl Into<String>) -> PyErr {
    PyTypeError::new_err(msg.into())
}

pub fn value_error(msg: impl Into<String>) -> PyErr {
    PyValueError::new_err(msg.into())
}
