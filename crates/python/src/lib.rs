//! `tilelang_rs._native`: what the Python package needs from the compiler, and nothing that
//! Python does better. The tracer (python/tilelang_rs/_trace.py) walks a kernel's AST and
//! drives [`builder::Builder`], the imperative form of the Rust DSL, so every tile op gets the
//! same checks and diagnostics as from Rust, at the user's Python line. Expressions and
//! buffers are thin wrappers of the IR's; compiled kernels run on numpy and torch memory by
//! address ([`args`]), on torch's current CUDA stream.
//!
//! Nothing here panics on user input: every failure is a Python exception
//! (`TileLangError` for kernels, `TypeError`/`ValueError` for arguments).

use pyo3::prelude::*;

mod args;
mod builder;
mod dlpack;
mod error;
mod exe;
mod expr;
mod kernel;
mod layout;
mod span;
mod tune;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("TileLangError", py.get_type::<error::TileLangError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    expr::register(m)?;
    builder::register(m)?;
    kernel::register(m)?;
    exe::register(m)?;
    layout::register(m)?;
    tune::register(m)?;
    Ok(())
}
