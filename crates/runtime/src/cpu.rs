//! The CPU backend: compile generated C with the system compiler into a shared object, load it,
//! and run blocks on a thread pool.

use std::ffi::c_void;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use libloading::Library;
use rayon::prelude::*;

use crate::cache::Cache;
use crate::error::{Result, RuntimeError};

type EntryFn =
    unsafe extern "C" fn(*const *mut c_void, *const i64, *const f64, *const i64, i64, i64);

/// Flags every CPU kernel is compiled with. `-fopenmp-simd` enables `#pragma omp simd` (and its
/// reduction clauses) without needing the OpenMP runtime.
pub const CFLAGS: &[&str] = &[
    "-O3",
    "-march=native",
    "-fPIC",
    "-shared",
    "-std=gnu11",
    "-fopenmp-simd",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-mprefer-vector-width=512",
    "-ffp-contract=fast",
    "-w",
];

pub fn c_compiler() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".to_string())
}

/// What identifies the host CPU for caching (code is built with -march=native).
pub fn host_cpu_id() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name") || l.starts_with("flags"))
                .map(|l| l.to_string())
        })
        .unwrap_or_default();
    format!("{}-{}", std::env::consts::ARCH, model)
}

/// The compiler's version line, part of the cache key.
pub fn compiler_version() -> Result<String> {
    let cc = c_compiler();
    let out =
        Command::new(&cc)
            .arg("--version")
            .output()
            .map_err(|e| RuntimeError::NoCompiler {
                cc: cc.clone(),
                reason: e.to_string(),
            })?;
    if !out.status.success() {
        return Err(RuntimeError::NoCompiler {
            cc,
            reason: "`--version` failed".into(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or("")
        .to_string())
}

pub struct CpuModule {
    _lib: Library,
    entry: EntryFn,
    pub path: PathBuf,
}

/// Compile `source` into the cache under `key` (unless it is there) and load it.
pub fn build(
    cache: &Cache,
    key: &str,
    kernel: &str,
    source: &str,
    entry: &str,
) -> Result<(CpuModule, bool)> {
    let cached = || cache.get(key, "so").and_then(|p| load(&p, entry).ok());
    if let Some(m) = cached() {
        return Ok((m, true));
    }
    // Other processes compiling the same kernel wait here, then find it built.
    let _lock = cache.lock(key, "so");
    if let Some(m) = cached() {
        return Ok((m, true));
    }
    let path = cache.put(key, "so", |tmp| {
        // The source is written beside the temporary output under a name of this builder's
        // own (another process may be compiling the same kernel), then renamed to `<key>.c`.
        let tmp_src = tmp.with_extension("c");
        let kept = tmp.with_file_name(
            cache
                .path(key, "c")
                .file_name()
                .map(|n| n.to_os_string())
                .unwrap_or_default(),
        );
        std::fs::write(&tmp_src, source).map_err(|e| RuntimeError::Cache {
            path: tmp_src.clone(),
            reason: e.to_string(),
        })?;
        let cc = c_compiler();
        let out = Command::new(&cc)
            .args(CFLAGS)
            .arg("-o")
            .arg(tmp)
            .arg(&tmp_src)
            .arg("-lm")
            .output();
        let source_path = match std::fs::rename(&tmp_src, &kept) {
            Ok(()) => kept,
            Err(_) => tmp_src,
        };
        let out = out.map_err(|e| RuntimeError::NoCompiler {
            cc: cc.clone(),
            reason: e.to_string(),
        })?;
        if !out.status.success() {
            let mut log = String::from_utf8_lossy(&out.stderr).to_string();
            log.truncate(8000);
            return Err(RuntimeError::CompileFailed {
                kernel: kernel.to_string(),
                source_path,
                log,
            });
        }
        Ok(())
    })?;
    Ok((load(&path, entry)?, false))
}

pub fn load(path: &Path, entry: &str) -> Result<CpuModule> {
    let err = |reason: String| RuntimeError::Load {
        path: path.to_path_buf(),
        reason,
    };
    // SAFETY: the library is one we generated; its initializers are the C runtime's.
    let lib = unsafe { Library::new(path) }.map_err(|e| err(e.to_string()))?;
    // SAFETY: the symbol has the EntryFn signature by construction (codegen::c).
    let f: EntryFn = unsafe {
        *lib.get::<EntryFn>(entry.as_bytes())
            .map_err(|e| err(e.to_string()))?
    };
    Ok(CpuModule {
        _lib: lib,
        entry: f,
        path: path.to_path_buf(),
    })
}

fn pool() -> &'static rayon::ThreadPool {
    static POOL: OnceLock<rayon::ThreadPool> = OnceLock::new();
    POOL.get_or_init(|| {
        let n = std::env::var("TILELANG_CPU_THREADS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::thread::available_parallelism()
                    .map(|n| n.get())
                    .unwrap_or(1)
            });
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            // Blocks keep their shared and fragment tiles on the stack.
            .stack_size(64 << 20)
            .thread_name(|i| format!("tilelang-cpu-{i}"))
            .build()
            .unwrap_or_else(|_| {
                rayon::ThreadPoolBuilder::new()
                    .build()
                    .expect("a default rayon pool can always be built")
            })
    })
}

struct Args {
    ptrs: Vec<*mut c_void>,
    ints: Vec<i64>,
    floats: Vec<f64>,
    grid: [i64; 3],
}
// The pointers are tensors the caller keeps alive for the launch.
unsafe impl Sync for Args {}
unsafe impl Send for Args {}

impl Args {
    fn call(&self, f: EntryFn, begin: i64, end: i64) {
        // SAFETY: arguments were checked against the kernel's signature by the caller.
        unsafe {
            f(
                self.ptrs.as_ptr(),
                self.ints.as_ptr(),
                self.floats.as_ptr(),
                self.grid.as_ptr(),
                begin,
                end,
            )
        }
    }
}

impl CpuModule {
    /// Run every block of the grid.
    pub fn launch(&self, ptrs: Vec<*mut c_void>, ints: Vec<i64>, floats: Vec<f64>, grid: [i64; 3]) {
        let total = grid[0] * grid[1] * grid[2];
        if total <= 0 {
            return;
        }
        let args = Args {
            ptrs,
            ints,
            floats,
            grid,
        };
        let f = self.entry;
        let run = |b: i64, e: i64| args.call(f, b, e);
        let threads = pool().current_num_threads() as i64;
        if total == 1 || threads <= 1 {
            run(0, total);
            return;
        }
        // A few chunks per thread balance uneven blocks (causal attention) at low overhead.
        let chunks = (threads * 8).min(total);
        pool().install(|| {
            (0..chunks).into_par_iter().for_each(|c| {
                let b = total * c / chunks;
                let e = total * (c + 1) / chunks;
                run(b, e);
            })
        });
    }
}
