//! A traced kernel: its IR, generated source for any target, and compiling it for a device.

use std::path::PathBuf;

use pyo3::prelude::*;
use tilelang::ir::Param;
use tilelang::{CompileOptions, Kernel, Target};
use tl_runtime::Device;

use crate::error::{compile, type_error, value_error};
use crate::exe::PyExecutable;
use crate::expr::{dtype_name, to_py};

/// `(name, kind, dtype, shape, role)` of a parameter.
type ParamRow<'py> = (
    String,
    &'static str,
    &'static str,
    Vec<Bound<'py, PyAny>>,
    &'static str,
);

/// Each rank's tensor arguments' bytes after a simulated run (None for scalars).
type RankBytes = Vec<Vec<Option<Vec<u8>>>>;

#[pyclass(name = "Kernel", module = "tilelang_rs._native", frozen)]
pub struct PyKernel {
    pub k: Kernel,
}

impl PyKernel {
    pub fn new(k: Kernel) -> PyKernel {
        PyKernel { k }
    }
}

/// A device from a TileLang target name: `cpu`, `cuda`/`cuda:N`, `hip`/`hip:N`, `sim`,
/// `sim:gfx950` …; `auto` is the best one here (a CUDA GPU, an AMD GPU, else the CPU).
pub fn device_arg(name: &str) -> PyResult<Device> {
    if name == "auto" {
        return Ok(Device::best());
    }
    Device::parse(name).map_err(|e| value_error(e.to_string()))
}

fn target_arg(name: &str) -> PyResult<Target> {
    match name {
        "c" | "cpu" => Ok(Target::Cpu),
        _ => Target::parse(name).map_err(|e| value_error(e.to_string())),
    }
}

#[pymethods]
impl PyKernel {
    #[getter]
    fn name(&self) -> String {
        self.k.name().to_string()
    }

    /// This kernel with warp specialization asked for (`True`: a producer warpgroup issues
    /// the pipelined loop's TMA loads on sm_90a where the kernel can take one) or refused
    /// (`False`); TileLang's `tl.disable_warp_specialized` pass config sets it.
    fn with_warp_specialize(&self, on: bool) -> PyKernel {
        let mut ir = self.k.ir().clone();
        ir.attrs.warp_specialize = Some(on);
        PyKernel::new(Kernel::from_ir(ir))
    }

    /// The same kernel as a persistent one on GPUs: `blocks` blocks (0: one per
    /// multiprocessor of the device) loop over the grid's tiles; None: one block per tile.
    #[pyo3(signature = (blocks))]
    fn with_persistent(&self, blocks: Option<u32>) -> PyKernel {
        let mut ir = self.k.ir().clone();
        ir.attrs.persistent_blocks = blocks;
        PyKernel::new(Kernel::from_ir(ir))
    }

    /// The tile IR, printed.
    fn __str__(&self) -> String {
        self.k.to_string()
    }

    /// `(name, kind, dtype, shape, role)` per parameter, in order: kind is `tensor` or
    /// `scalar`; the shape holds ints and `Expr`s (empty for scalars).
    fn params<'py>(&self, py: Python<'py>) -> PyResult<Vec<ParamRow<'py>>> {
        self.k
            .ir()
            .params
            .iter()
            .map(|p| {
                Ok(match p {
                    Param::Tensor { buffer, role } => (
                        buffer.name().to_string(),
                        "tensor",
                        dtype_name(buffer.dtype()),
                        buffer
                            .shape()
                            .iter()
                            .map(|e| to_py(py, e.clone()))
                            .collect::<PyResult<_>>()?,
                        role.name(),
                    ),
                    Param::Scalar(v) => (
                        v.name().to_string(),
                        "scalar",
                        dtype_name(v.dtype()),
                        vec![],
                        "in",
                    ),
                })
            })
            .collect()
    }

    /// The generated source for a target (`cpu` C, `sm_80`/`sm_90a` CUDA, `gfx942`/`gfx950`
    /// HIP; `ptx` with an NVIDIA target for the PTX); needs no device.
    #[pyo3(signature = (target, ptx=false))]
    fn source(&self, py: Python<'_>, target: &str, ptx: bool) -> PyResult<String> {
        let t = target_arg(target)?;
        let k = &self.k;
        if ptx {
            if !matches!(t, Target::Cuda { .. }) {
                return Err(type_error(format!("PTX is for NVIDIA targets, not {t}")));
            }
            return py.detach(|| k.emit_ptx(t)).map_err(compile);
        }
        py.detach(|| k.emit(t)).map_err(compile)
    }

    /// Run the kernel, lowered for `target`, on `len(ranks)` simulated devices in one process
    /// (`tl_sim::run_ranks`): `ranks[r]` is rank `r`'s arguments in parameter order — a tensor
    /// as `(bytes, shape)` (its row-major storage), a scalar as an int or float. Returns each
    /// rank's tensors' bytes after the run (None for scalars) and whether the memory order was
    /// checked; a deadlock, an unordered access or a too-narrow scope is an error that says so.
    fn sim_ranks(
        &self,
        py: Python<'_>,
        target: &str,
        ranks: Vec<Vec<Bound<'_, PyAny>>>,
    ) -> PyResult<(RankBytes, bool)> {
        use tl_sim::SimArg;
        let t = target_arg(target)?;
        let mut args: Vec<Vec<SimArg>> = vec![];
        for rank in &ranks {
            let mut v = vec![];
            for a in rank {
                if let Ok((bytes, shape)) = a.extract::<(Vec<u8>, Vec<usize>)>() {
                    v.push(SimArg::Tensor { bytes, shape });
                } else if let Ok(i) = a.extract::<i64>() {
                    v.push(SimArg::Int(i));
                } else if let Ok(f) = a.extract::<f64>() {
                    v.push(SimArg::Float(f));
                } else {
                    return Err(type_error(format!(
                        "a simulator argument must be (bytes, shape), an int or a float, got {}",
                        a.repr()?
                    )));
                }
            }
            args.push(v);
        }
        let k = &self.k;
        let lowered = py
            .detach(|| k.lower(t))
            .map_err(crate::error::diagnostics)?;
        let report = py
            .detach(|| {
                tl_sim::run_ranks(&lowered, &mut args, &tl_sim::SimOptions::default())
                    .map_err(|e| e.to_string())
            })
            .map_err(|e| value_error(format!("in the simulator ({t}): {e}")))?;
        let out = args
            .into_iter()
            .map(|v| {
                v.into_iter()
                    .map(|a| match a {
                        SimArg::Tensor { bytes, .. } => Some(bytes),
                        _ => None,
                    })
                    .collect()
            })
            .collect();
        Ok((out, report.order_checked))
    }

    /// The thread-level IR after the target's passes.
    fn lower(&self, py: Python<'_>, target: &str) -> PyResult<String> {
        let t = target_arg(target)?;
        let k = &self.k;
        py.detach(|| k.lower(t))
            .map(|l| l.to_string())
            .map_err(crate::error::diagnostics)
    }

    /// Compile for a GPU target (`sm_80`, `sm_90a`, `gfx942`, …) without a GPU, into the disk
    /// cache that a later `compile` on a device of that architecture finds: lower, generate
    /// the source, and run NVRTC (CUDA) or clang (AMD) unless the cache has the binary.
    /// Returns where the time went (ms), `cache_hit` and the cache `key`.
    #[pyo3(signature = (target, cache_dir=None))]
    fn precompile<'py>(
        &self,
        py: Python<'py>,
        target: &str,
        cache_dir: Option<PathBuf>,
    ) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        let t = target_arg(target)?;
        let opts = CompileOptions {
            dump_ir: None,
            cache_dir,
        };
        let k = &self.k;
        let p = py.detach(|| k.precompile_for(t, &opts)).map_err(compile)?;
        let s = &p.stats;
        let d = pyo3::types::PyDict::new(py);
        d.set_item("target", p.target.to_string())?;
        d.set_item("key", p.key)?;
        d.set_item("cache_hit", p.cache_hit)?;
        d.set_item("lower_ms", s.lower.as_secs_f64() * 1e3)?;
        d.set_item("codegen_ms", s.codegen.as_secs_f64() * 1e3)?;
        d.set_item("compile_ms", s.compile.as_secs_f64() * 1e3)?;
        d.set_item("load_ms", s.load.as_secs_f64() * 1e3)?;
        d.set_item("total_ms", s.total.as_secs_f64() * 1e3)?;
        Ok(d)
    }

    /// Compile for a device (`auto`, `cpu`, `cuda[:N]`, `hip[:N]`, `sim[:TARGET]`), with the
    /// disk cache (`cache_dir`, default `TILELANG_CACHE_DIR` or the user cache) and optional
    /// IR dumps.
    #[pyo3(signature = (device, cache_dir=None, dump_ir=None))]
    fn compile(
        &self,
        py: Python<'_>,
        device: &str,
        cache_dir: Option<PathBuf>,
        dump_ir: Option<PathBuf>,
    ) -> PyResult<PyExecutable> {
        let dev = device_arg(device)?;
        let opts = CompileOptions { dump_ir, cache_dir };
        let k = &self.k;
        let exe = py.detach(|| k.compile_with(&dev, &opts)).map_err(compile)?;
        Ok(PyExecutable::new(exe, self.k.ir()))
    }
}

/// The device `auto` (or any name) resolves to, as text (`cuda:0`, `cpu`, …).
#[pyfunction]
fn resolve_device(name: &str) -> PyResult<String> {
    Ok(device_arg(name)?.to_string())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyKernel>()?;
    m.add_function(wrap_pyfunction!(resolve_device, m)?)?;
    Ok(())
}
