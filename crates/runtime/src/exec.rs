//! Executables: a compiled kernel bound to a device, with argument checking.

use std::collections::HashMap;
use std::ffi::c_void;
use std::time::Duration;

use tl_codegen::{Abi, IntSlot};
use tl_ir::eval::{eval_int, Value};
use tl_ir::{Expr, ExprKind, Kernel, Param};

use crate::cpu::CpuModule;
use crate::device::Device;
use crate::error::{Result, RuntimeError};
use crate::tensor::Tensor;

/// What the runtime knows of a kernel: its parameters, symbolic sizes and grid.
#[derive(Clone, Debug)]
pub struct Signature {
    pub name: String,
    pub params: Vec<Param>,
    pub dims: Vec<tl_ir::Var>,
    pub grid: Vec<Expr>,
    pub threads: u32,
    pub abi: Abi,
}

impl Signature {
    pub fn of(k: &Kernel) -> Signature {
        Signature {
            name: k.name.clone(),
            params: k.params.clone(),
            dims: k.dims.clone(),
            grid: k.grid.clone(),
            threads: k.threads,
            abi: Abi::of(k),
        }
    }
}

/// One launch argument.
#[derive(Clone, Copy, Debug)]
pub enum Arg<'a> {
    Tensor(&'a Tensor),
    Int(i64),
    Float(f64),
}

impl<'a> From<&'a Tensor> for Arg<'a> {
    fn from(t: &'a Tensor) -> Arg<'a> {
        Arg::Tensor(t)
    }
}

/// Where the time of `compile` went.
#[derive(Clone, Debug, Default)]
pub struct CompileStats {
    /// The compiled artifact came from the disk cache.
    pub cache_hit: bool,
    /// Verification and passes.
    pub lower: Duration,
    /// Source generation.
    pub codegen: Duration,
    /// The native compiler (C compiler, NVRTC).
    pub compile: Duration,
    /// Loading the artifact.
    pub load: Duration,
    /// Everything, end to end.
    pub total: Duration,
}

pub(crate) enum Module {
    Cpu(CpuModule),
}

pub struct Executable {
    sig: Signature,
    device: Device,
    module: Module,
    stats: CompileStats,
    source: Option<String>,
}

/// Launch arguments after checking: pointers, integer and float slots, and the grid.
pub struct Bound {
    pub ptrs: Vec<*mut c_void>,
    pub ints: Vec<i64>,
    pub floats: Vec<f64>,
    pub grid: [i64; 3],
    pub dims: HashMap<String, i64>,
}

impl Executable {
    pub(crate) fn new(
        sig: Signature,
        device: Device,
        module: Module,
        stats: CompileStats,
        source: Option<String>,
    ) -> Executable {
        Executable {
            sig,
            device,
            module,
            stats,
            source,
        }
    }

    pub fn signature(&self) -> &Signature {
        &self.sig
    }
    pub fn device(&self) -> Device {
        self.device
    }
    pub fn compile_stats(&self) -> &CompileStats {
        &self.stats
    }
    pub fn stats_mut(&mut self) -> &mut CompileStats {
        &mut self.stats
    }
    /// The generated source, when it was generated in this process (not on a cache hit).
    pub fn source(&self) -> Option<&str> {
        self.source.as_deref()
    }

    /// Run with tensors only (kernels without scalar parameters).
    pub fn run(&self, tensors: &[&Tensor]) -> Result<()> {
        let args: Vec<Arg> = tensors.iter().map(|t| Arg::Tensor(t)).collect();
        self.run_args(&args)
    }

    /// Run with tensors and scalars, in parameter order.
    pub fn run_args(&self, args: &[Arg]) -> Result<()> {
        let b = self.bind(args)?;
        match &self.module {
            Module::Cpu(m) => m.launch(b.ptrs, b.ints, b.floats, b.grid),
        }
        Ok(())
    }

    fn bad(&self, index: usize, reason: String) -> RuntimeError {
        RuntimeError::BadArg {
            kernel: self.sig.name.clone(),
            index,
            name: self
                .sig
                .params
                .get(index)
                .map(|p| p.name().to_string())
                .unwrap_or_default(),
            reason,
        }
    }

    /// Check arguments against the signature, bind the symbolic sizes, compute the grid.
    pub fn bind(&self, args: &[Arg]) -> Result<Bound> {
        let sig = &self.sig;
        if args.len() != sig.params.len() {
            return Err(RuntimeError::ArgCount {
                kernel: sig.name.clone(),
                expected: sig.params.len(),
                got: args.len(),
                names: sig
                    .params
                    .iter()
                    .map(|p| p.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        let mut env: HashMap<u64, Value> = HashMap::new();
        let mut scalars: HashMap<u64, Arg> = HashMap::new();
        // Pass 1: kinds, dtypes, ranks, devices; bind sizes from bare-variable extents.
        for (i, (p, a)) in sig.params.iter().zip(args).enumerate() {
            match (p, a) {
                (Param::Tensor { buffer, .. }, Arg::Tensor(t)) => {
                    if t.dtype() != buffer.dtype() {
                        return Err(self.bad(
                            i,
                            format!("expected {} elements, got {}", buffer.dtype(), t.dtype()),
                        ));
                    }
                    if t.shape().len() != buffer.rank() {
                        return Err(self.bad(
                            i,
                            format!(
                                "expected a {}-d tensor, got shape {:?}",
                                buffer.rank(),
                                t.shape()
                            ),
                        ));
                    }
                    if t.device() != self.device {
                        return Err(self.bad(
                            i,
                            format!(
                                "the tensor is on {}, the kernel on {}",
                                t.device(),
                                self.device
                            ),
                        ));
                    }
                    if !t.is_contiguous() {
                        return Err(self.bad(i, "the tensor is not contiguous (row-major)".into()));
                    }
                    for (d, (e, &n)) in buffer.shape().iter().zip(t.shape()).enumerate() {
                        if let ExprKind::Var(v) = e.kind() {
                            if n > i32::MAX as usize {
                                return Err(self.bad(
                                    i,
                                    format!(
                                        "dimension {d} is {n}, past the 2^31-1 a size may have"
                                    ),
                                ));
                            }
                            match env.get(&v.id()) {
                                Some(prev) if prev.as_i64() != n as i64 => {
                                    return Err(self.bad(
                                        i,
                                        format!(
                                            "dimension {d} is {n}, but `{}` is {} from an earlier argument",
                                            v.name(),
                                            prev.as_i64()
                                        ),
                                    ))
                                }
                                _ => {
                                    env.insert(v.id(), Value::Int(n as i64));
                                }
                            }
                        }
                    }
                }
                (Param::Scalar(v), Arg::Int(x)) if !v.dtype().is_float() => {
                    env.insert(v.id(), Value::Int(*x));
                    scalars.insert(v.id(), *a);
                }
                (Param::Scalar(v), Arg::Float(x)) if v.dtype().is_float() => {
                    env.insert(v.id(), Value::Float(*x));
                    scalars.insert(v.id(), *a);
                }
                (Param::Scalar(v), Arg::Int(x)) => {
                    env.insert(v.id(), Value::Float(*x as f64));
                    scalars.insert(v.id(), Arg::Float(*x as f64));
                }
                (Param::Tensor { .. }, _) => return Err(self.bad(i, "expected a tensor".into())),
                (Param::Scalar(v), _) => {
                    return Err(self.bad(i, format!("expected a {} scalar", v.dtype())))
                }
            }
        }
        for d in &sig.dims {
            if !env.contains_key(&d.id()) {
                return Err(RuntimeError::Launch(format!(
                    "kernel `{}`: the symbolic size `{}` is not the extent of any tensor dimension, so no argument defines it",
                    sig.name,
                    d.name()
                )));
            }
        }
        // Pass 2: extents that are expressions must match.
        let mut ptrs = vec![];
        for (i, (p, a)) in sig.params.iter().zip(args).enumerate() {
            if let (Param::Tensor { buffer, .. }, Arg::Tensor(t)) = (p, a) {
                for (d, (e, &n)) in buffer.shape().iter().zip(t.shape()).enumerate() {
                    let want = eval_int(e, &env).map_err(|x| self.bad(i, x.to_string()))?;
                    if want != n as i64 {
                        return Err(self.bad(
                            i,
                            format!(
                                "dimension {d} is {n}, but the kernel expects {} = {want}",
                                e
                            ),
                        ));
                    }
                }
                ptrs.push(t.host_ptr() as *mut c_void);
            }
        }
        let mut ints = vec![];
        for s in &sig.abi.ints {
            let v = match s {
                IntSlot::Dim(v) | IntSlot::Scalar(v) => {
                    env.get(&v.id()).map(|x| x.as_i64()).unwrap_or(0)
                }
            };
            ints.push(v);
        }
        let floats = sig
            .abi
            .floats
            .iter()
            .map(|v| env.get(&v.id()).map(|x| x.as_f64()).unwrap_or(0.0))
            .collect();
        let mut grid = [1i64; 3];
        for (g, e) in grid.iter_mut().zip(&sig.grid) {
            let n = eval_int(e, &env)
                .map_err(|x| RuntimeError::Launch(format!("grid of `{}`: {x}", sig.name)))?;
            if n < 0 {
                return Err(RuntimeError::Launch(format!(
                    "kernel `{}`: grid extent {e} is {n} for these arguments",
                    sig.name
                )));
            }
            *g = n;
        }
        let dims = sig
            .dims
            .iter()
            .map(|d| {
                (
                    d.name().to_string(),
                    env.get(&d.id()).map(|x| x.as_i64()).unwrap_or(0),
                )
            })
            .collect();
        Ok(Bound {
            ptrs,
            ints,
            floats,
            grid,
            dims,
        })
    }
}
