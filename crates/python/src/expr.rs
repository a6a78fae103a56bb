//! Symbolic values: `Expr` (an IR expression with Python operators), `Buffer` (a tensor or an
//! on-chip tile: indexing it gives a load, or with slices a `Region`), dtype names, and the
//! math functions of `T.*`.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PySlice, PyTuple};
use tl_ir::{BinOp, Buffer, CmpOp, DType, Expr, ExprKind, UnOp, Var};

use crate::error::type_error;

/// An expression of the kernel being traced (a symbolic size, a block or loop index, a load,
/// arithmetic on them). Python operators build bigger ones; it has no truth value, so
/// `if`/`and`/`or` on it are traced as branches and selects by the tracer.
#[pyclass(name = "Expr", module = "tilelang_rs._native", frozen)]
#[derive(Clone)]
pub struct PyExpr {
    pub e: Expr,
}

impl PyExpr {
    pub fn new(e: Expr) -> PyExpr {
        PyExpr { e }
    }
}

/// A dtype from its name: the IR's (`f16`, `bf16`, `e4m3`) or TileLang's and numpy's
/// (`float16`, `bfloat16`, `float`, `float8_e4m3`, `int32`, …).
pub fn parse_dtype(name: &str) -> Option<DType> {
    use DType::*;
    if let Some(d) = DType::from_name(name) {
        return Some(d);
    }
    Some(match name {
        "float" | "float32" | "fp32" => F32,
        "half" | "fp16" => F16,
        "bf16" | "bfloat" => BF16,
        "double" | "fp64" => F64,
        "int" | "int32" => I32,
        "int8" => I8,
        "int16" => I16,
        "uint8" => U8,
        "uint16" => U16,
        "uint32" => U32,
        "uint64" => U64,
        "boolean" => Bool,
        // The `fnuz` variants (MI300's) have another bias and no negative zero: not these.
        "float8_e4m3fn" | "e4m3_float8" | "fp8_e4m3fn" => F8E4M3,
        "e5m2_float8" => F8E5M2,
        _ => return None,
    })
}

pub fn dtype_arg(name: &str) -> PyResult<DType> {
    if name.contains("fnuz") {
        return Err(type_error(format!(
            "`{name}` is not supported: the fnuz float8 formats (AMD MI300's) differ from float8_e4m3 / float8_e5m2 (OCP's e4m3fn and e5m2) in bias and NaN, so their bits would be read as other values"
        )));
    }
    parse_dtype(name).ok_or_else(|| {
        type_error(format!(
            "unknown dtype `{name}`; use float16, bfloat16, float32 (float), float64, float8_e4m3, float8_e5m2, int8/16/32/64, uint8/16/32/64 or bool"
        ))
    })
}

/// The TileLang (and torch/numpy) name of a dtype.
pub fn dtype_name(d: DType) -> &'static str {
    use DType::*;
    match d {
        Bool => "bool",
        I8 => "int8",
        I16 => "int16",
        I32 => "int32",
        I64 => "int64",
        U8 => "uint8",
        U16 => "uint16",
        U32 => "uint32",
        U64 => "uint64",
        F16 => "float16",
        BF16 => "bfloat16",
        F32 => "float32",
        F64 => "float64",
        F8E4M3 => "float8_e4m3",
        F8E5M2 => "float8_e5m2",
    }
}

/// A Python value as an expression: an `Expr`, a bool, an int (i32 when it fits, else i64) or
/// a float (f32, adapting to the other operand's type as in the Rust DSL).
pub fn to_expr(obj: &Bound<'_, PyAny>) -> PyResult<Expr> {
    if let Ok(e) = obj.cast::<PyExpr>() {
        return Ok(e.get().e.clone());
    }
    if obj.is_instance_of::<PyBool>() {
        return Ok(Expr::bool(obj.extract::<bool>()?));
    }
    if obj.is_instance_of::<PyInt>() {
        return match obj.extract::<i64>() {
            Ok(v) => Ok(Expr::int(v)),
            Err(_) => Err(type_error(format!(
                "the integer {obj} does not fit in 64 bits"
            ))),
        };
    }
    if obj.is_instance_of::<PyFloat>() {
        return Ok(Expr::float(obj.extract::<f64>()?));
    }
    if obj.cast::<PyBuffer>().is_ok() {
        return Err(type_error(format!(
            "a buffer (`{}`) is not a value; index it, e.g. `{}[i, j]`",
            obj.cast::<PyBuffer>()?.get().b.name(),
            obj.cast::<PyBuffer>()?.get().b.name()
        )));
    }
    // Numbers of other libraries (numpy scalars) convert through their Python value.
    if let Ok(v) = obj.call_method0("__index__") {
        if let Ok(v) = v.extract::<i64>() {
            return Ok(Expr::int(v));
        }
    }
    if let Ok(v) = obj.call_method0("__float__") {
        if let Ok(v) = v.extract::<f64>() {
            return Ok(Expr::float(v));
        }
    }
    Err(type_error(format!(
        "expected a number or a symbolic value, got {} `{}`",
        obj.get_type().name()?,
        obj.repr()?
    )))
}

/// A list of Python values (or one) as expressions.
pub fn to_exprs(obj: &Bound<'_, PyAny>) -> PyResult<Vec<Expr>> {
    if let Ok(t) = obj.cast::<PyTuple>() {
        return t.iter().map(|x| to_expr(&x)).collect();
    }
    if let Ok(l) = obj.cast::<pyo3::types::PyList>() {
        return l.iter().map(|x| to_expr(&x)).collect();
    }
    Ok(vec![to_expr(obj)?])
}

/// An expression as a Python value: constants become ints, floats and bools (so shapes and
/// folded sizes read naturally), everything else an `Expr`.
pub fn to_py<'py>(py: Python<'py>, e: Expr) -> PyResult<Bound<'py, PyAny>> {
    Ok(match e.kind() {
        ExprKind::Int(v) if !e.dtype().is_bool() => v.into_pyobject(py)?.into_any(),
        ExprKind::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        ExprKind::Float(f) => PyFloat::new(py, *f).into_any(),
        _ => Bound::new(py, PyExpr::new(e))?.into_any(),
    })
}

fn bin(op: BinOp, a: &Expr, b: &Bound<'_, PyAny>, reflected: bool) -> PyResult<PyExpr> {
    let b = to_expr(b)?;
    let (l, r) = if reflected {
        (b, a.clone())
    } else {
        (a.clone(), b)
    };
    Ok(PyExpr::new(Expr::binary(op, l, r)))
}

fn no_truth() -> PyErr {
    PyTypeError::new_err(
        "a symbolic value has no truth value while a kernel is traced: write `if` on it \
         directly in the kernel body (it becomes a branch), or use T.if_then_else(cond, a, b)",
    )
}

#[pymethods]
impl PyExpr {
    fn __add__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyExpr> {
        bin(BinOp::Add, &self.e, o, false)
    }
    fn __radd__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyExpr> {
        bin(BinOp::Add, &self.e, o, true)
    }
    fn __sub__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyExpr> {
        bin(BinOp::Sub, &self.e, o, false)
    }
    fn __rsub__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyExpr> {
        bin(BinOp::Sub, &self.e, o, true)
    }
    fn __mul__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyExpr> {
        bin(BinOp::Mul, &self.e, o, false)
    }
    fn __rmul__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyExpr> {
        bin(BinOp::Mul, &self.e, o, true)
    }
    /// `/`: true division on floats, truncating division on integers (as in C and TVM).
    fn __truediv__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyExpr> {
        bin(BinOp::Div, &self.e, o, false)
    }
    fn __rtruediv__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyExpr> {
        bin(BinOp::Div, &self.e, o, true)
    }
    /// `//` and `%`: floor division and modulo, as in Python.
    fn __floordiv__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyExpr> {
        bin(BinOp::FloorDiv, &self.e, o, false)
    }
    fn __rfloordiv__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyExpr> {
        bin(BinOp::FloorDiv, &self.e, o, true)
    }
    fn __mod__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyExpr> {
        bin(BinOp::FloorMod, &self.e, o, false)
    }
    fn __rmod__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyExpr> {
        bin(BinOp::FloorMod, &self.e, o, true)
    }
    fn __pow__(&self, o: &Bound<'_, PyAny>, _m: Option<&Bound<'_, PyAny>>) -> PyResult<PyExpr> {
        bin(BinOp::Pow, &self.e, o, false)
    }
    fn __rpow__(&self, o: &Bound<'_, PyAny>, _m: Option<&Bound<'_, PyAny>>) -> PyResult<PyExpr> {
        bin(BinOp::Pow, &self.e, o, true)
    }
    fn __lshift__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyExpr> {
        bin(BinOp::Shl, &self.e, o, false)
    }
    fn __rshift__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyExpr> {
        bin(BinOp::Shr, &self.e, o, false)
    }
    /// `&`, `|`, `^`: logical on conditions, bitwise on integers.
    fn __and__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyExpr> {
        logical(BinOp::BitAnd, &self.e, to_expr(o)?)
    }
    fn __rand__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyExpr> {
        logical(BinOp::BitAnd, &to_expr(o)?, self.e.clone())
    }
    fn __or__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyExpr> {
        logical(BinOp::BitOr, &self.e, to_expr(o)?)
    }
    fn __ror__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyExpr> {
        logical(BinOp::BitOr, &to_expr(o)?, self.e.clone())
    }
    fn __xor__(&self, o: &Bound<'_, PyAny>) -> PyResult<PyExpr> {
        bin(BinOp::BitXor, &self.e, o, false)
    }
    fn __neg__(&self) -> PyExpr {
        PyExpr::new(Expr::unary(UnOp::Neg, self.e.clone()))
    }
    fn __pos__(&self) -> PyExpr {
        self.clone()
    }
    fn __abs__(&self) -> PyExpr {
        PyExpr::new(self.e.abs())
    }
    /// `~c`: logical not of a condition; bitwise not of an integer.
    fn __invert__(&self) -> PyExpr {
        if self.e.dtype().is_bool() {
            PyExpr::new(Expr::unary(UnOp::Not, self.e.clone()))
        } else {
            let ones = Expr::int_of(-1, self.e.dtype());
            PyExpr::new(Expr::binary(BinOp::BitXor, self.e.clone(), ones))
        }
    }
    fn __richcmp__(&self, o: &Bound<'_, PyAny>, op: pyo3::basic::CompareOp) -> PyResult<PyExpr> {
        use pyo3::basic::CompareOp as C;
        let c = match op {
            C::Lt => CmpOp::Lt,
            C::Le => CmpOp::Le,
            C::Gt => CmpOp::Gt,
            C::Ge => CmpOp::Ge,
            C::Eq => CmpOp::Eq,
            C::Ne => CmpOp::Ne,
        };
        Ok(PyExpr::new(Expr::compare(c, self.e.clone(), to_expr(o)?)))
    }
    fn __bool__(&self) -> PyResult<bool> {
        match self.e.as_bool() {
            Some(b) => Ok(b),
            None => Err(no_truth()),
        }
    }
    fn __index__(&self) -> PyResult<i64> {
        match self.e.kind() {
            ExprKind::Int(v) => Ok(*v),
            _ => Err(PyTypeError::new_err(format!(
                "`{}` is symbolic, not a Python integer",
                self.e
            ))),
        }
    }
    fn __int__(&self) -> PyResult<i64> {
        self.__index__()
    }
    fn __float__(&self) -> PyResult<f64> {
        self.e.as_float().ok_or_else(|| {
            PyTypeError::new_err(format!("`{}` is symbolic, not a Python float", self.e))
        })
    }
    fn __repr__(&self) -> String {
        self.e.to_string()
    }
    fn __str__(&self) -> String {
        self.e.to_string()
    }
    /// The element type (`int32`, `float32`, …).
    #[getter]
    fn dtype(&self) -> &'static str {
        dtype_name(self.e.dtype())
    }
    /// The variable's name, when this is one variable (a symbolic size or an index).
    #[getter]
    fn name(&self) -> Option<String> {
        self.e.as_var().map(|v| v.name().to_string())
    }
    /// Whether it is a constant.
    #[getter]
    fn is_const(&self) -> bool {
        self.e.is_const()
    }
    /// The buffer and indices of a load (`A[i, j]`), else None.
    fn as_load<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<Option<(PyBuffer, Vec<Bound<'py, PyAny>>)>> {
        match self.e.kind() {
            ExprKind::Load(b, idx) => Ok(Some((
                PyBuffer { b: b.clone() },
                idx.iter()
                    .map(|i| to_py(py, i.clone()))
                    .collect::<PyResult<_>>()?,
            ))),
            _ => Ok(None),
        }
    }
    /// The same value, simplified (constants folded).
    fn simplify<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, tl_ir::simplify(&self.e))
    }
}

/// `&`/`|` of two conditions are logical (`and`/`or` of the IR); of integers, bitwise.
fn logical(op: BinOp, a: &Expr, b: Expr) -> PyResult<PyExpr> {
    if a.dtype().is_bool() && b.dtype().is_bool() {
        return Ok(PyExpr::new(match op {
            BinOp::BitAnd => a.and(b),
            _ => a.or(b),
        }));
    }
    Ok(PyExpr::new(Expr::binary(op, a.clone(), b)))
}

/// A tensor parameter or an on-chip tile of the kernel being traced. `buf[i, j]` is the
/// element (a load); with slices, `buf[i, a:b]`, a `Region` for tile ops.
#[pyclass(name = "Buffer", module = "tilelang_rs._native", frozen)]
#[derive(Clone)]
pub struct PyBuffer {
    pub b: Buffer,
}

/// A rectangular part of a buffer, `Q[bz, by, bx*bm:(bx+1)*bm, :]`: offsets, and extents
/// (1 for each dimension given by an index).
#[pyclass(name = "Region", module = "tilelang_rs._native", frozen)]
#[derive(Clone)]
pub struct PyRegion {
    pub buffer: Buffer,
    pub offsets: Vec<Expr>,
    pub extents: Vec<Expr>,
}

#[pymethods]
impl PyRegion {
    #[getter]
    fn buffer(&self) -> PyBuffer {
        PyBuffer {
            b: self.buffer.clone(),
        }
    }
    fn __repr__(&self) -> String {
        let parts: Vec<String> = self
            .offsets
            .iter()
            .zip(&self.extents)
            .map(|(o, e)| format!("{o}:{o}+{e}"))
            .collect();
        format!("{}[{}]", self.buffer.name(), parts.join(", "))
    }
}

#[pymethods]
impl PyBuffer {
    #[getter]
    fn name(&self) -> String {
        self.b.name().to_string()
    }
    /// The shape: ints, and `Expr`s for symbolic sizes.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        self.b
            .shape()
            .iter()
            .map(|e| to_py(py, e.clone()))
            .collect()
    }
    #[getter]
    fn dtype(&self) -> &'static str {
        dtype_name(self.b.dtype())
    }
    /// `global`, `shared`, `fragment`, `local` or `var`.
    #[getter]
    fn scope(&self) -> &'static str {
        self.b.scope().name()
    }
    #[getter]
    fn ndim(&self) -> usize {
        self.b.rank()
    }
    fn __len__(&self) -> PyResult<usize> {
        match self.b.shape().first().and_then(|e| e.as_int()) {
            Some(n) => Ok(n.max(0) as usize),
            None => Err(type_error(format!(
                "`{}` has no constant length",
                self.b.name()
            ))),
        }
    }
    fn __repr__(&self) -> String {
        let shape: Vec<String> = self.b.shape().iter().map(|e| e.to_string()).collect();
        format!(
            "Buffer({}, [{}], {}, {})",
            self.b.name(),
            shape.join(", "),
            dtype_name(self.b.dtype()),
            self.b.scope().name()
        )
    }
    fn __hash__(&self) -> u64 {
        self.b.id()
    }
    fn __eq__(&self, o: &Bound<'_, PyAny>) -> bool {
        o.cast::<PyBuffer>()
            .map(|o| o.get().b.id() == self.b.id())
            .unwrap_or(false)
    }
    fn __bool__(&self) -> bool {
        true
    }
    /// `buf[i, j]`: the element, as a load; any slice makes a `Region` instead.
    fn __getitem__<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let items: Vec<Bound<'py, PyAny>> = match key.cast::<PyTuple>() {
            Ok(t) => t.iter().collect(),
            Err(_) => vec![key.clone()],
        };
        let rank = self.b.rank();
        let sliced = items.iter().any(|i| i.is_instance_of::<PySlice>());
        if !sliced {
            if items.len() != rank {
                return Err(pyo3::exceptions::PyIndexError::new_err(format!(
                    "`{}` has {rank} dimensions, but {} indices were given",
                    self.b.name(),
                    items.len()
                )));
            }
            let idx = items.iter().map(to_expr).collect::<PyResult<Vec<_>>>()?;
            return Ok(Bound::new(py, PyExpr::new(Expr::load(&self.b, idx)))?.into_any());
        }
        if items.len() > rank {
            return Err(pyo3::exceptions::PyIndexError::new_err(format!(
                "`{}` has {rank} dimensions, but {} indices were given",
                self.b.name(),
                items.len()
            )));
        }
        let mut offsets = vec![];
        let mut extents = vec![];
        for d in 0..rank {
            let dim = self.b.shape()[d].clone();
            match items.get(d) {
                // Missing trailing dimensions are whole.
                None => {
                    offsets.push(Expr::int(0));
                    extents.push(dim);
                }
                Some(i) if i.is_instance_of::<PySlice>() => {
                    let start = i.getattr("start")?;
                    let stop = i.getattr("stop")?;
                    let step = i.getattr("step")?;
                    if !step.is_none() && to_expr(&step)?.as_int() != Some(1) {
                        return Err(type_error(format!(
                            "slices of `{}` take no step (got {})",
                            self.b.name(),
                            step.repr()?
                        )));
                    }
                    let lo = if start.is_none() {
                        Expr::int(0)
                    } else {
                        to_expr(&start)?
                    };
                    let hi = if stop.is_none() { dim } else { to_expr(&stop)? };
                    extents.push(tl_ir::simplify(&(hi - lo.clone())));
                    offsets.push(lo);
                }
                Some(i) => {
                    offsets.push(to_expr(i)?);
                    extents.push(Expr::int(1));
                }
            }
        }
        Ok(Bound::new(
            py,
            PyRegion {
                buffer: self.b.clone(),
                offsets,
                extents,
            },
        )?
        .into_any())
    }
}

// ----- functions of `T.*` -----

#[pyfunction]
fn var(name: &str, dtype: &str) -> PyResult<PyExpr> {
    Ok(PyExpr::new(Var::new(name, dtype_arg(dtype)?).expr()))
}

/// A constant of a dtype (`T.float32(0)`, `T.infinity`).
#[pyfunction]
fn constant(value: f64, dtype: &str) -> PyResult<PyExpr> {
    Ok(PyExpr::new(Expr::const_of(value, dtype_arg(dtype)?)))
}

#[pyfunction]
fn cast(x: &Bound<'_, PyAny>, dtype: &str) -> PyResult<PyExpr> {
    Ok(PyExpr::new(to_expr(x)?.cast(dtype_arg(dtype)?)))
}

#[pyfunction]
fn unary(op: &str, x: &Bound<'_, PyAny>) -> PyResult<PyExpr> {
    let x = to_expr(x)?;
    let op = match op {
        "exp" => UnOp::Exp,
        "exp2" => UnOp::Exp2,
        "log" => UnOp::Log,
        "log2" => UnOp::Log2,
        "sqrt" => UnOp::Sqrt,
        "rsqrt" => UnOp::Rsqrt,
        "tanh" => UnOp::Tanh,
        "sigmoid" => UnOp::Sigmoid,
        "abs" => UnOp::Abs,
        "floor" => UnOp::Floor,
        "ceil" => UnOp::Ceil,
        "erf" => UnOp::Erf,
        "sin" => UnOp::Sin,
        "cos" => UnOp::Cos,
        "neg" => UnOp::Neg,
        "not" => UnOp::Not,
        other => return Err(type_error(format!("unknown function `{other}`"))),
    };
    Ok(PyExpr::new(Expr::unary(op, x)))
}

#[pyfunction]
fn binary(op: &str, a: &Bound<'_, PyAny>, b: &Bound<'_, PyAny>) -> PyResult<PyExpr> {
    let (a, b) = (to_expr(a)?, to_expr(b)?);
    Ok(PyExpr::new(match op {
        "min" => tl_ir::ops::min(a, b),
        "max" => tl_ir::ops::max(a, b),
        "pow" => a.pow(b),
        "ceildiv" => tl_ir::ops::ceildiv(a, b),
        "floordiv" => tl_ir::ops::floordiv(a, b),
        "floormod" => tl_ir::ops::floormod(a, b),
        "truncdiv" => Expr::binary(BinOp::Div, a, b),
        "truncmod" => Expr::binary(BinOp::Mod, a, b),
        "and" => a.to_bool().and(b.to_bool()),
        "or" => a.to_bool().or(b.to_bool()),
        other => return Err(type_error(format!("unknown function `{other}`"))),
    }))
}

/// `cond ? a : b` where only the taken arm is evaluated (safe for loads past an edge).
#[pyfunction]
fn if_then_else(
    c: &Bound<'_, PyAny>,
    a: &Bound<'_, PyAny>,
    b: &Bound<'_, PyAny>,
) -> PyResult<PyExpr> {
    Ok(PyExpr::new(Expr::if_then_else(
        to_expr(c)?,
        to_expr(a)?,
        to_expr(b)?,
    )))
}

/// `cond ? a : b` with both arms evaluated (cheap, always-safe arms).
#[pyfunction]
fn select(c: &Bound<'_, PyAny>, a: &Bound<'_, PyAny>, b: &Bound<'_, PyAny>) -> PyResult<PyExpr> {
    Ok(PyExpr::new(Expr::select(
        to_expr(c)?,
        to_expr(a)?,
        to_expr(b)?,
    )))
}

/// The value of an expression (`x` simplified), as a Python number when it is constant.
#[pyfunction]
fn simplify<'py>(py: Python<'py>, x: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    to_py(py, tl_ir::simplify(&to_expr(x)?))
}

/// The IR name of a dtype (`bfloat16` → `bf16`), or a TypeError naming the known ones.
#[pyfunction]
fn canonical_dtype(name: &str) -> PyResult<&'static str> {
    Ok(dtype_name(dtype_arg(name)?))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyExpr>()?;
    m.add_class::<PyBuffer>()?;
    m.add_class::<PyRegion>()?;
    m.add_function(wrap_pyfunction!(var, m)?)?;
    m.add_function(wrap_pyfunction!(constant, m)?)?;
    m.add_function(wrap_pyfunction!(cast, m)?)?;
    m.add_function(wrap_pyfunction!(unary, m)?)?;
    m.add_function(wrap_pyfunction!(binary, m)?)?;
    m.add_function(wrap_pyfunction!(if_then_else, m)?)?;
    m.add_function(wrap_pyfunction!(select, m)?)?;
    m.add_function(wrap_pyfunction!(simplify, m)?)?;
    m.add_function(wrap_pyfunction!(canonical_dtype, m)?)?;
    Ok(())
}
