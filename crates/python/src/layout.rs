//! The layout algebra in Python: CuTe-style `Layout`s (shape:stride), `Swizzle`s and swizzled
//! (`ComposedLayout`) layouts, their algebra (compose, divides, products, complement,
//! inverses), and pictures (a text table or SVG). `T.annotate_layout` takes any of them.

use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use tl_layout::{ComposedLayout, IntTuple, Layout, Swizzle, Tiler};

use crate::error::value_error;

fn lerr(e: impl std::fmt::Display) -> PyErr {
    value_error(e.to_string())
}

fn int_tuple(obj: &Bound<'_, PyAny>) -> PyResult<IntTuple> {
    if let Ok(v) = obj.extract::<i64>() {
        return Ok(IntTuple::Int(v));
    }
    let items: Vec<Bound<'_, PyAny>> = if let Ok(t) = obj.cast::<PyTuple>() {
        t.iter().collect()
    } else if let Ok(l) = obj.cast::<PyList>() {
        l.iter().collect()
    } else {
        return Err(value_error(format!(
            "expected an int or a (nested) tuple of ints, got `{}`",
            obj.repr()?
        )));
    };
    Ok(IntTuple::Tuple(
        items.iter().map(int_tuple).collect::<PyResult<_>>()?,
    ))
}

/// A layout: a function from coordinates to offsets, `shape:stride` in CuTe's notation.
#[pyclass(name = "Layout", module = "tilelang_rs._native", frozen)]
#[derive(Clone)]
pub struct PyLayout {
    l: Layout,
}

/// `Sw<B,M,S>`: XOR bits [M+S, M+S+B) of an offset into bits [M, M+B).
#[pyclass(name = "Swizzle", module = "tilelang_rs._native", frozen)]
#[derive(Clone)]
pub struct PySwizzle {
    s: Swizzle,
}

/// A swizzle applied after a layout (and an offset): `Sw<3,4,3> o 0 o (8,64):(64,1)`.
#[pyclass(name = "ComposedLayout", module = "tilelang_rs._native", frozen)]
#[derive(Clone)]
pub struct PyComposed {
    c: ComposedLayout,
}

/// The second operand of compose/divide/product: a layout, or its text (a layout, a tiler
/// `<3:4,8:2>` or a shape `(2,4)`).
fn tiler(obj: &Bound<'_, PyAny>) -> PyResult<Tiler> {
    if let Ok(l) = obj.cast::<PyLayout>() {
        return Ok(Tiler::from(&l.get().l));
    }
    if let Ok(s) = obj.extract::<String>() {
        return tl_layout::parse_tiler(&s).map_err(lerr);
    }
    Tiler::from_shape(&int_tuple(obj)?).map_err(lerr)
}

fn layout_of(obj: &Bound<'_, PyAny>) -> PyResult<Layout> {
    if let Ok(l) = obj.cast::<PyLayout>() {
        return Ok(l.get().l.clone());
    }
    if let Ok(s) = obj.extract::<String>() {
        return tl_layout::parse_layout(&s).map_err(lerr);
    }
    Err(value_error(format!(
        "expected a Layout or its text, got `{}`",
        obj.repr()?
    )))
}

fn wrap(l: tl_layout::Result<Layout>) -> PyResult<PyLayout> {
    l.map(|l| PyLayout { l }).map_err(lerr)
}

fn show(text: &str) -> PyResult<String> {
    tl_layout::cli::run_strs(&["show", text]).map_err(lerr)
}

#[pymethods]
impl PyLayout {
    /// `Layout(shape, stride)`; without a stride, column-major (CuTe's default).
    #[new]
    #[pyo3(signature = (shape, stride=None))]
    fn new(shape: &Bound<'_, PyAny>, stride: Option<&Bound<'_, PyAny>>) -> PyResult<PyLayout> {
        let shape = int_tuple(shape)?;
        match stride {
            Some(s) => wrap(Layout::new(shape, int_tuple(s)?)),
            None => wrap(Layout::col_major(shape)),
        }
    }
    /// Parse CuTe notation, `(4,8):(8,1)`.
    #[staticmethod]
    fn parse(text: &str) -> PyResult<PyLayout> {
        tl_layout::parse_layout(text)
            .map(|l| PyLayout { l })
            .map_err(lerr)
    }
    #[staticmethod]
    fn row_major(shape: &Bound<'_, PyAny>) -> PyResult<PyLayout> {
        wrap(Layout::row_major(int_tuple(shape)?))
    }
    fn __str__(&self) -> String {
        self.l.to_string()
    }
    fn __repr__(&self) -> String {
        format!("Layout({})", self.l)
    }
    fn __eq__(&self, o: &Bound<'_, PyAny>) -> bool {
        o.cast::<PyLayout>()
            .map(|o| o.get().l == self.l)
            .unwrap_or(false)
    }
    fn __hash__(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.l.to_string().hash(&mut h);
        h.finish()
    }
    /// The offset of linear coordinate `i` (or of a coordinate tuple).
    fn __call__(&self, i: &Bound<'_, PyAny>) -> PyResult<i64> {
        if let Ok(i) = i.extract::<i64>() {
            return self.l.try_call(i).map_err(lerr);
        }
        self.l.crd2idx(&int_tuple(i)?).map_err(lerr)
    }
    #[getter]
    fn size(&self) -> i64 {
        self.l.size()
    }
    #[getter]
    fn cosize(&self) -> i64 {
        self.l.cosize()
    }
    #[getter]
    fn rank(&self) -> usize {
        self.l.rank()
    }
    #[getter]
    fn shape(&self) -> String {
        self.l.shape().to_string()
    }
    #[getter]
    fn stride(&self) -> String {
        self.l.stride().to_string()
    }
    fn coalesce(&self) -> PyLayout {
        PyLayout {
            l: tl_layout::coalesce(&self.l),
        }
    }
    /// `self ∘ other`.
    fn compose(&self, other: &Bound<'_, PyAny>) -> PyResult<PyLayout> {
        wrap(tl_layout::composition(&self.l, tiler(other)?))
    }
    fn complement(&self, cotarget: i64) -> PyResult<PyLayout> {
        wrap(tl_layout::complement(&self.l, cotarget))
    }
    fn right_inverse(&self) -> PyLayout {
        PyLayout {
            l: tl_layout::right_inverse(&self.l),
        }
    }
    fn left_inverse(&self) -> PyResult<PyLayout> {
        wrap(tl_layout::left_inverse(&self.l))
    }
    /// `kind`: logical (default), zipped, tiled or flat.
    #[pyo3(signature = (tiler_, kind="logical"))]
    fn divide(&self, tiler_: &Bound<'_, PyAny>, kind: &str) -> PyResult<PyLayout> {
        let t = tiler(tiler_)?;
        wrap(match kind {
            "logical" => tl_layout::logical_divide(&self.l, t),
            "zipped" => tl_layout::zipped_divide(&self.l, t),
            "tiled" => tl_layout::tiled_divide(&self.l, t),
            "flat" => tl_layout::flat_divide(&self.l, t),
            other => return Err(value_error(format!("unknown divide `{other}`"))),
        })
    }
    /// `kind`: logical (default), zipped, tiled, flat, blocked or raked.
    #[pyo3(signature = (other, kind="logical"))]
    fn product(&self, other: &Bound<'_, PyAny>, kind: &str) -> PyResult<PyLayout> {
        match kind {
            "blocked" => wrap(tl_layout::blocked_product(&self.l, &layout_of(other)?)),
            "raked" => wrap(tl_layout::raked_product(&self.l, &layout_of(other)?)),
            _ => {
                let t = tiler(other)?;
                wrap(match kind {
                    "logical" => tl_layout::logical_product(&self.l, t),
                    "zipped" => tl_layout::zipped_product(&self.l, t),
                    "tiled" => tl_layout::tiled_product(&self.l, t),
                    "flat" => tl_layout::flat_product(&self.l, t),
                    other => return Err(value_error(format!("unknown product `{other}`"))),
                })
            }
        }
    }
    /// The offsets of a rank-2 layout as a text table (rows: mode 0).
    fn show(&self) -> PyResult<String> {
        show(&self.l.to_string())
    }
    /// An SVG picture of the layout.
    fn svg(&self) -> PyResult<String> {
        tl_layout::layout_svg(&self.l).map_err(lerr)
    }
}

#[pymethods]
impl PySwizzle {
    #[new]
    fn new(b: i32, m: i32, s: i32) -> PyResult<PySwizzle> {
        Swizzle::new(b, m, s).map(|s| PySwizzle { s }).map_err(lerr)
    }
    fn __call__(&self, x: i64) -> i64 {
        self.s.apply(x)
    }
    fn __str__(&self) -> String {
        self.s.to_string()
    }
    fn __repr__(&self) -> String {
        format!("Swizzle({})", self.s)
    }
}

#[pymethods]
impl PyComposed {
    #[new]
    #[pyo3(signature = (swizzle, layout, offset=0))]
    fn new(
        swizzle: &Bound<'_, PySwizzle>,
        layout: &Bound<'_, PyAny>,
        offset: i64,
    ) -> PyResult<PyComposed> {
        Ok(PyComposed {
            c: ComposedLayout::new(swizzle.get().s, offset, layout_of(layout)?),
        })
    }
    #[staticmethod]
    fn parse(text: &str) -> PyResult<PyComposed> {
        tl_layout::parse_composed(text)
            .map(|c| PyComposed { c })
            .map_err(lerr)
    }
    fn __call__(&self, i: i64) -> i64 {
        self.c.call(i)
    }
    #[getter]
    fn size(&self) -> i64 {
        self.c.size()
    }
    fn __str__(&self) -> String {
        self.c.to_string()
    }
    fn __repr__(&self) -> String {
        format!("ComposedLayout({})", self.c)
    }
    fn show(&self) -> PyResult<String> {
        show(&self.c.to_string())
    }
    fn svg(&self) -> PyResult<String> {
        tl_layout::composed_layout_svg(&self.c).map_err(lerr)
    }
}

/// The swizzled shared-memory layout the compiler gives a row-major `rows × cols` tile of
/// `elem_bytes`-byte elements (conflict-free for ldmatrix and wgmma).
#[pyfunction]
fn smem_swizzle_layout(rows: i64, cols: i64, elem_bytes: i64) -> PyResult<PyComposed> {
    tl_layout::smem_swizzle_layout(rows, cols, elem_bytes)
        .map(|s| PyComposed { c: s.layout })
        .map_err(lerr)
}

/// The thread-value layout of a tensor-core atom (`mma_m16n8k16_a`, `wgmma_m64n128k16_c`, …)
/// as text, as `tilelang layout atom` prints it.
#[pyfunction]
fn atom(name: &str) -> PyResult<String> {
    tl_layout::cli::run_strs(&["atom", name]).map_err(lerr)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyLayout>()?;
    m.add_class::<PySwizzle>()?;
    m.add_class::<PyComposed>()?;
    m.add_function(wrap_pyfunction!(smem_swizzle_layout, m)?)?;
    m.add_function(wrap_pyfunction!(atom, m)?)?;
    Ok(())
}
