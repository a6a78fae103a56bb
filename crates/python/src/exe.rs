//! A compiled kernel, callable on numpy arrays and torch tensors: arguments are converted by
//! address ([`crate::args`]), outputs named by `out_idx` are allocated by the inputs' library,
//! and GPU launches go to torch's current stream.

use std::collections::HashMap;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use tl_ir::eval::{eval_int, Value};
use tl_ir::{ExprKind, Param};
use tl_runtime::profile::{bench_with, BenchConfig};
use tl_runtime::{Arg, Device, Executable, Stream};

use crate::args::{allocate, convert_one, torch_stream, Converted, Held, ParamInfo};
use crate::error::{runtime, type_error, value_error};

#[pyclass(name = "Executable", module = "tilelang_rs._native", frozen)]
pub struct PyExecutable {
    exe: Executable,
    params: Vec<ParamInfo>,
    source: Option<String>,
}

/// Arguments handed to a launch with the GIL released. The memory they point at belongs to
/// Python objects the calling frame holds, so it outlives the launch.
struct Launch<'a>(&'a Executable, &'a [Arg<'a>], Stream);
// SAFETY: see the type's comment; nothing in it is used from two threads at once.
unsafe impl Send for Launch<'_> {}

impl Launch<'_> {
    fn run(self) -> tl_runtime::Result<()> {
        self.0.run_args_on(self.1, self.2)
    }
}

fn args_of(held: &[Held]) -> Vec<Arg<'_>> {
    held.iter()
        .map(|h| match h {
            Held::Ext(t) => Arg::External(t),
            Held::Int(i) => Arg::Int(*i),
            Held::Float(f) => Arg::Float(*f),
        })
        .collect()
}

impl PyExecutable {
    pub fn new(exe: Executable, ir: &tl_ir::Kernel) -> PyExecutable {
        let params = ir
            .params
            .iter()
            .map(|p| match p {
                Param::Tensor { buffer, role } => ParamInfo {
                    name: buffer.name().to_string(),
                    role: *role,
                },
                Param::Scalar(v) => ParamInfo {
                    name: v.name().to_string(),
                    role: tl_ir::Role::Input,
                },
            })
            .collect();
        let source = exe.source().map(str::to_string);
        PyExecutable {
            exe,
            params,
            source,
        }
    }

    fn device(&self) -> Device {
        self.exe.device()
    }

    fn convert(&self, args: &Bound<'_, PyTuple>) -> PyResult<Converted> {
        let mut conv = Converted {
            held: Vec::with_capacity(args.len()),
            lib: None,
            torch_gpu: None,
        };
        for (i, a) in args.iter().enumerate() {
            convert_one(&a, self.params.get(i), i, self.device(), &mut conv)?;
        }
        Ok(conv)
    }

    fn stream(&self, py: Python<'_>, conv: &Converted, given: Option<usize>) -> PyResult<Stream> {
        if let Some(s) = given {
            return Ok(Stream::Raw(s));
        }
        let d = self.device();
        if d.is_cuda() || d.is_hip() {
            if let Some(idx) = conv.torch_gpu {
                if let Some(s) = torch_stream(py, idx)? {
                    return Ok(Stream::Raw(s));
                }
            }
        }
        Ok(Stream::Runtime)
    }

    fn launch(&self, py: Python<'_>, held: &[Held], stream: Stream) -> PyResult<()> {
        let args = args_of(held);
        let l = Launch(&self.exe, &args, stream);
        if self.device().is_host() {
            // CPU and simulator launches run to completion here: let other threads run.
            py.detach(|| l.run()).map_err(runtime)
        } else {
            l.run().map_err(runtime)
        }
    }

    /// The values of the symbolic sizes (and scalars) the given arguments fix.
    fn env(&self, held: &[Option<&Held>]) -> HashMap<u64, Value> {
        let mut env = HashMap::new();
        for (p, h) in self.exe.signature().params.iter().zip(held) {
            match (p, h) {
                (Param::Tensor { buffer, .. }, Some(Held::Ext(t))) => {
                    for (e, &n) in buffer.shape().iter().zip(t.shape()) {
                        if let ExprKind::Var(v) = e.kind() {
                            env.entry(v.id()).or_insert(Value::Int(n as i64));
                        }
                    }
                }
                (Param::Scalar(v), Some(Held::Int(x))) => {
                    env.insert(v.id(), Value::Int(*x));
                }
                (Param::Scalar(v), Some(Held::Float(x))) => {
                    env.insert(v.id(), Value::Float(*x));
                }
                _ => {}
            }
        }
        env
    }
}

#[pymethods]
impl PyExecutable {
    /// Run on `args` (every parameter, in order). `stream`: a raw CUDA stream to launch on;
    /// by default torch's current stream for torch GPU tensors, else the runtime's.
    #[pyo3(signature = (args, stream=None))]
    fn run(
        &self,
        py: Python<'_>,
        args: &Bound<'_, PyTuple>,
        stream: Option<usize>,
    ) -> PyResult<()> {
        let conv = self.convert(args)?;
        let s = self.stream(py, &conv, stream)?;
        self.launch(py, &conv.held, s)
    }

    /// Run with the parameters at `out_idx` (sorted, non-negative) allocated: `args` holds the
    /// others, in order. Returns the new outputs, in `out_idx` order.
    #[pyo3(signature = (args, out_idx, stream=None))]
    fn call<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
        out_idx: Vec<usize>,
        stream: Option<usize>,
    ) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.call_outs(py, args, &out_idx, stream)?)
    }

    /// Time launches on `args`: on a GPU with events around each timed window on the
    /// runtime's stream (after `warmup` untimed launches; L2 flushed before each window when
    /// `flush_l2`), on the CPU with the host clock. Each window holds `back_to_back` launches
    /// (at least 1) and its time is divided by them. Times in milliseconds.
    #[pyo3(signature = (args, warmup=10, reps=100, flush_l2=true, back_to_back=1))]
    fn bench<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
        warmup: usize,
        reps: usize,
        flush_l2: bool,
        back_to_back: usize,
    ) -> PyResult<Bound<'py, PyDict>> {
        if back_to_back == 0 {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "back_to_back must be at least 1 (launches in each timed window)",
            ));
        }
        let conv = self.convert(args)?;
        let a = args_of(&conv.held);
        let cfg = BenchConfig {
            warmup,
            reps,
            flush_l2,
            back_to_back,
        };
        let t = bench_with(&self.exe, &a, &cfg).map_err(runtime)?;
        let d = PyDict::new(py);
        d.set_item("median_ms", t.median_ms)?;
        d.set_item("min_ms", t.min_ms)?;
        d.set_item("max_ms", t.max_ms)?;
        d.set_item("mean_ms", t.mean_ms)?;
        d.set_item("reps", t.reps)?;
        d.set_item("l2_flushed", t.l2_flushed)?;
        d.set_item("device", t.device)?;
        Ok(d)
    }

    /// Host time of the stages of a call, in microseconds per call over `n` calls: converting
    /// `args` (every parameter), choosing the stream, and launching already converted
    /// arguments (binding, packing and the driver's launch call; on CUDA also each of the
    /// three alone). For finding where a call's host time goes
    /// (`python/bench/call_breakdown.py`).
    #[pyo3(signature = (args, n=10000))]
    fn host_stages<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
        n: usize,
    ) -> PyResult<Bound<'py, PyDict>> {
        let n = n.max(1);
        let per_call = |t: std::time::Instant| t.elapsed().as_secs_f64() * 1e6 / n as f64;
        let t = std::time::Instant::now();
        for _ in 0..n {
            std::hint::black_box(self.convert(args)?);
        }
        let convert_us = per_call(t);
        let conv = self.convert(args)?;
        let t = std::time::Instant::now();
        for _ in 0..n {
            std::hint::black_box(self.stream(py, &conv, None)?);
        }
        let stream_us = per_call(t);
        // The launch of converted arguments, stage by stage (`host_launch_profile`).
        let p = self
            .exe
            .host_launch_profile(&args_of(&conv.held), n)
            .map_err(runtime)?;
        let d = PyDict::new(py);
        d.set_item("convert_us", convert_us)?;
        d.set_item("stream_us", stream_us)?;
        d.set_item("launch_us", p.bind_us + p.pack_us + p.driver_us)?;
        if self.device().is_cuda() {
            // The launch stage split: binding, packing, the driver's call.
            d.set_item("bind_us", p.bind_us)?;
            d.set_item("pack_us", p.pack_us)?;
            d.set_item("driver_us", p.driver_us)?;
        }
        Ok(d)
    }

    /// Wait for the device's queued launches (the runtime's stream).
    fn synchronize(&self) -> PyResult<()> {
        self.exe.synchronize().map_err(runtime)
    }

    /// The generated source (C, CUDA C++/PTX or HIP), when it was generated in this process.
    #[getter]
    fn source(&self) -> Option<String> {
        self.source.clone()
    }

    #[getter]
    fn device_name(&self) -> String {
        self.device().to_string()
    }

    /// Parameter names, in order.
    #[getter]
    fn param_names(&self) -> Vec<String> {
        self.params.iter().map(|p| p.name.clone()).collect()
    }

    /// Where compile time went, in milliseconds (`lower`, `codegen`, `compile`, `load`,
    /// `total`) and whether the binary came from the disk cache.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.exe.compile_stats();
        let d = PyDict::new(py);
        d.set_item("cache_hit", s.cache_hit)?;
        d.set_item("lower_ms", s.lower.as_secs_f64() * 1e3)?;
        d.set_item("codegen_ms", s.codegen.as_secs_f64() * 1e3)?;
        d.set_item("compile_ms", s.compile.as_secs_f64() * 1e3)?;
        d.set_item("load_ms", s.load.as_secs_f64() * 1e3)?;
        d.set_item("total_ms", s.total.as_secs_f64() * 1e3)?;
        d.set_item("fallback", s.fallback.clone())?;
        Ok(d)
    }
}

impl PyExecutable {
    /// The call of a kernel with outputs `out_idx`: the new outputs, in `out_idx`'s order.
    fn call_outs<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
        out_idx: &[usize],
        stream: Option<usize>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let n = self.params.len();
        if args.len() + out_idx.len() != n {
            let names: Vec<&str> = self
                .params
                .iter()
                .enumerate()
                .filter(|(i, _)| !out_idx.contains(i))
                .map(|(_, p)| p.name.as_str())
                .collect();
            return Err(type_error(format!(
                "kernel `{}` takes {} arguments ({}), {} given{}",
                self.exe.signature().name,
                names.len(),
                names.join(", "),
                args.len(),
                if out_idx.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; its outputs ({}) are allocated and returned",
                        out_idx
                            .iter()
                            .filter_map(|&i| self.params.get(i).map(|p| p.name.as_str()))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                }
            )));
        }
        // Inputs first, in parameter order.
        let mut slots: Vec<Option<Held>> = (0..n).map(|_| None).collect();
        let mut conv = Converted {
            held: vec![],
            lib: None,
            torch_gpu: None,
        };
        let mut given = args.iter();
        for (i, slot) in slots.iter_mut().enumerate() {
            if out_idx.contains(&i) {
                continue;
            }
            let Some(a) = given.next() else { break };
            convert_one(&a, self.params.get(i), i, self.device(), &mut conv)?;
            *slot = conv.held.pop();
        }
        let env = self.env(&slots.iter().map(Option::as_ref).collect::<Vec<_>>());
        let mut outs = Vec::with_capacity(out_idx.len());
        for &i in out_idx {
            let p = &self.exe.signature().params[i];
            let Param::Tensor { buffer, .. } = p else {
                return Err(type_error(format!(
                    "out_idx names `{}`, a scalar; only tensors can be outputs",
                    p.name()
                )));
            };
            let mut shape = vec![];
            for e in buffer.shape() {
                let v = eval_int(e, &env).map_err(|err| {
                    value_error(format!(
                        "cannot size output `{}` ({e}) from the inputs: {err}; pass it as an argument instead",
                        buffer.name()
                    ))
                })?;
                shape.push(v.max(0) as usize);
            }
            let arr = allocate(py, conv.lib, args, &shape, buffer.dtype())?;
            convert_one(&arr, self.params.get(i), i, self.device(), &mut conv)?;
            slots[i] = conv.held.pop();
            outs.push(arr);
        }
        let held: Vec<Held> = slots
            .into_iter()
            .map(|h| h.unwrap_or(Held::Int(0)))
            .collect();
        let s = self.stream(py, &conv, stream)?;
        self.launch(py, &held, s)?;
        Ok(outs)
    }
}

/// A compiled kernel's call: `launcher(*args, stream=None)` with the outputs to allocate
/// fixed once, returning None, the one output, or a list of them. `JITKernel` is a Python
/// subclass, so that calling a kernel goes straight here (no Python frame in between: a
/// quarter of a microsecond a call).
#[pyclass(name = "Launcher", module = "tilelang_rs._native", frozen, subclass)]
pub struct Launcher {
    exe: Py<PyExecutable>,
    out_idx: Vec<usize>,
}

#[pymethods]
impl Launcher {
    #[new]
    fn new(exe: Py<PyExecutable>, out_idx: Vec<usize>) -> Launcher {
        Launcher { exe, out_idx }
    }

    #[pyo3(signature = (*args, stream=None))]
    fn __call__<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
        stream: Option<usize>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let exe = self.exe.get();
        if self.out_idx.is_empty() {
            exe.run(py, args, stream)?;
            return Ok(py.None().into_bound(py));
        }
        let mut outs = exe.call_outs(py, args, &self.out_idx, stream)?;
        if outs.len() == 1 {
            return Ok(outs.pop().expect("one output"));
        }
        Ok(PyList::new(py, outs)?.into_any())
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyExecutable>()?;
    m.add_class::<Launcher>()?;
    Ok(())
}
