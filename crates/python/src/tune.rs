//! `@tilelang.autotune` over the Rust autotuner: the Python side traces one kernel per
//! configuration; here they are compiled (in parallel where the target allows), checked by an
//! optional Python callback after their first run, timed on the device, and the winner is
//! cached on disk per (kernel, argument shapes, device).

use pyo3::prelude::*;
use pyo3::types::PyTuple;
use tilelang::autotune::{autotune, Space, TuneOptions};
use tilelang::Kernel;
use tl_runtime::Arg;

use crate::args::{convert_one, Converted, Held};
use crate::kernel::{device_arg, PyKernel};

/// A configuration as the tuner sees it: its index, and its label (what the disk cache
/// stores as the winner, so it must describe the configuration).
#[derive(Clone)]
struct Config {
    index: usize,
    label: String,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.label)
    }
}

/// Tune `kernels` (one per configuration, labelled) on `args` (every parameter, outputs
/// included). `check()` may raise to reject a candidate's results. Returns the winner's
/// index, the table of trials, and whether the winner came from the cache.
#[pyfunction]
#[pyo3(signature = (name, kernels, labels, device, args, check=None, warmup=5, reps=30, progress=true, force=false, cache_dir=None))]
#[allow(clippy::too_many_arguments)] // the tuner's options, as keywords
fn tune(
    py: Python<'_>,
    name: &str,
    kernels: Vec<PyRef<'_, PyKernel>>,
    labels: Vec<String>,
    device: &str,
    args: &Bound<'_, PyTuple>,
    check: Option<Bound<'_, PyAny>>,
    warmup: usize,
    reps: usize,
    progress: bool,
    force: bool,
    cache_dir: Option<std::path::PathBuf>,
) -> PyResult<(usize, String, bool)> {
    if kernels.len() != labels.len() {
        return Err(crate::error::value_error("one label per kernel is needed"));
    }
    let dev = device_arg(device)?;
    let ks: Vec<Kernel> = kernels.iter().map(|k| k.k.clone()).collect();
    let configs: Vec<Config> = labels
        .into_iter()
        .enumerate()
        .map(|(index, label)| Config { index, label })
        .collect();
    let mut conv = Converted {
        held: vec![],
        lib: None,
        torch_gpu: None,
    };
    for (i, a) in args.iter().enumerate() {
        convert_one(&a, None, i, dev, &mut conv)?;
    }
    let a: Vec<Arg> = conv
        .held
        .iter()
        .map(|h| match h {
            Held::Ext(t) => Arg::External(t),
            Held::Int(i) => Arg::Int(*i),
            Held::Float(f) => Arg::Float(*f),
        })
        .collect();
    let check_fn = |/* after a candidate's first run */| -> Result<(), String> {
        match &check {
            None => Ok(()),
            Some(f) => f.call0().map(|_| ()).map_err(|e| e.value(py).to_string()),
        }
    };
    let opts = TuneOptions {
        cache_dir,
        warmup,
        reps,
        progress,
        force,
        ..TuneOptions::default()
    };
    let (best, result) = autotune(
        name,
        &Space::list(configs),
        |c| ks[c.index].clone(),
        &dev,
        &a,
        &check_fn,
        &opts,
    )
    .map_err(|e| crate::error::diagnostics(e.to_string()))?;
    Ok((best.index, result.to_string(), result.from_cache))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(tune, m)?)?;
    Ok(())
}
