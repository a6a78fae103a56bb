//! On a machine with a GPU and NVRTC: compile hand-written CUDA kernels that follow the GPU
//! ABI, launch them on device tensors, check the results, time one with the profiler, and
//! print one line. Without a GPU it says why and exits cleanly (status 0).
//!
//!     cargo run --release -p tilelang-runtime --example cuda_smoke [-- cuda:N]

use tl_runtime::{Cache, Device};

fn main() {
    let device = match std::env::args().nth(1) {
        Some(name) => match Device::parse(&name) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(2);
            }
        },
        None => Device::Cuda(0),
    };
    if !device.is_available() {
        println!(
            "SKIPPED cuda smoke test: {device} is not available ({})",
            Device::cuda_unavailable_reason().unwrap_or_else(|| "no such device".into())
        );
        return;
    }
    // A fresh cache directory, so the first build is a real NVRTC compile.
    let dir = std::env::temp_dir().join(format!("tilelang-cuda-smoke-{}", std::process::id()));
    let cache = Cache::at(&dir);
    let result = tl_runtime::selftest::run(&device, &cache);
    let _ = std::fs::remove_dir_all(&dir);
    match result {
        Ok(line) => println!("{line}"),
        Err(e) => {
            eprintln!("cuda smoke FAILED on {device}: {e}");
            std::process::exit(1);
        }
    }
}
