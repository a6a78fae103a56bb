//! The `tilelang` command: layout algebra at the shell, and facts about this machine's
//! devices, targets and kernel cache.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tilelang::prelude::*;
use tilelang::runtime::Cache;

#[derive(Parser)]
#[command(name = "tilelang", version, about = "Tile-level GPU kernel compiler")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// CuTe layout algebra: coalesce, compose, complement, divide, product, inverse, swizzle,
    /// eval, show, atom (run `tilelang layout help`)
    Layout {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Devices, compile targets and the kernel cache on this machine
    Info,
    /// Compile a CUDA source file with NVRTC and print registers, spills, compile time and the
    /// SASS instruction counts (no GPU needed)
    CheckCuda {
        file: std::path::PathBuf,
        #[arg(long, default_value = "sm_90a")]
        arch: String,
        /// Print the opcode histogram of the SASS
        #[arg(long)]
        sass: bool,
        /// Print the whole SASS listing
        #[arg(long)]
        listing: bool,
        /// Report register spills instead of failing on them
        #[arg(long)]
        allow_spills: bool,
        /// Write the PTX NVRTC made of a CUDA C++ file to this path (to set it beside the PTX
        /// backend's for the same kernel)
        #[arg(long, value_name = "PATH")]
        write_ptx: Option<std::path::PathBuf>,
    },
    /// Static report of an AMDGPU assembly file (clang's `-S` output, or `--emit`'s `.s`):
    /// registers, spills, LDS, occupancy, and the main loop's instruction mix (MFMAs, LDS reads,
    /// direct-to-LDS loads, waits, barriers, priorities, the longest runs between MFMAs and
    /// between loads)
    IsaReport {
        file: std::path::PathBuf,
        /// Print JSON instead of the table
        #[arg(long)]
        json: bool,
    },
    /// Compile a HIP source file with clang for gfx942/gfx950 and print its ISA report (no GPU
    /// needed)
    CheckHip {
        file: std::path::PathBuf,
        #[arg(long, default_value = "gfx950")]
        arch: String,
    },
    /// The kernel cache: print its directory, or clear it
    Cache {
        #[arg(value_parser = ["path", "clear"], default_value = "path")]
        action: String,
    },
}

fn main() -> ExitCode {
    // Output piped into `head` and closed early ends the program quietly, as for other Unix
    // tools, instead of panicking on the failed write.
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Layout { args } => match tl_layout::cli::run(&args) {
            Ok(out) => {
                print!("{out}");
                if !out.is_empty() && !out.ends_with('\n') {
                    println!();
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        },
        Cmd::Info => {
            let best = Device::best();
            println!("best device: {best}");
            match best.target() {
                Ok(t) => println!("target: {t}"),
                Err(e) => println!("target: unavailable ({e})"),
            }
            match tilelang::runtime::hip::runtime_info() {
                Ok((path, version)) => println!(
                    "HIP: {} AMD device(s), runtime {version} from {path} (tilelang's HIP backend is untested on hardware)",
                    Device::hip_count()
                ),
                Err(e) => println!("HIP: unavailable ({e})"),
            }
            println!("kernel cache: {}", Cache::from_env().dir().display());
            match tilelang::runtime::cpu::compiler_version() {
                Ok(v) => println!("C compiler: {} ({v})", tilelang::runtime::cpu::c_compiler()),
                Err(e) => println!("C compiler: missing ({e})"),
            }
            ExitCode::SUCCESS
        }
        Cmd::IsaReport { file, json } => {
            let text = match std::fs::read_to_string(&file) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("error: cannot read {}: {e}", file.display());
                    return ExitCode::from(2);
                }
            };
            match tilelang::amdgpu::isa::report(&text) {
                Ok(r) if json => {
                    println!("{}", r.json());
                    ExitCode::SUCCESS
                }
                Ok(r) => {
                    print!("{}", r.table());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {}: {e}", file.display());
                    ExitCode::from(2)
                }
            }
        }
        Cmd::CheckHip { file, arch } => {
            let src = match std::fs::read_to_string(&file) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("error: cannot read {}: {e}", file.display());
                    return ExitCode::from(2);
                }
            };
            match tilelang::amdgpu::compile(&src, &arch) {
                Ok(co) => {
                    println!(
                        "{}: {} byte code object, clang {:.0} ms, assemble+link {:.0} ms",
                        file.display(),
                        co.elf.len(),
                        co.compile_time.as_secs_f64() * 1e3,
                        co.link_time.as_secs_f64() * 1e3
                    );
                    match tilelang::amdgpu::isa::report(&co.asm) {
                        Ok(r) => print!("{}", r.table()),
                        Err(e) => eprintln!("no ISA report: {e}"),
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(1)
                }
            }
        }
        Cmd::CheckCuda {
            file,
            arch,
            sass,
            listing,
            allow_spills,
            write_ptx,
        } => {
            let src = match std::fs::read_to_string(&file) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("error: cannot read {}: {e}", file.display());
                    return ExitCode::from(2);
                }
            };
            if let Some(path) = write_ptx {
                if tl_nvrtc::is_ptx(&src) {
                    eprintln!(
                        "error: --write-ptx needs a CUDA C++ file; {} is PTX",
                        file.display()
                    );
                    return ExitCode::from(2);
                }
                let written = tl_nvrtc::compile(&src, &arch, &Default::default())
                    .map_err(|e| e.to_string())
                    .and_then(|c| std::fs::write(&path, c.ptx()).map_err(|e| e.to_string()));
                if let Err(e) = written {
                    eprintln!(
                        "error: cannot write the PTX of {} to {}: {e}",
                        file.display(),
                        path.display()
                    );
                    return ExitCode::from(2);
                }
            }
            let opts = tl_nvrtc::CheckOptions {
                allow_spills,
                ..Default::default()
            };
            match tl_nvrtc::check_with(&src, &arch, &opts) {
                Ok(r) => {
                    println!("{r}");
                    for w in &r.warnings {
                        println!("warning: {w}");
                    }
                    if sass {
                        for (op, n) in r.opcodes() {
                            println!("{n:6} {op}");
                        }
                    }
                    if listing {
                        println!(
                            "{}",
                            r.sass.as_deref().unwrap_or("(no SASS: cuobjdump missing)")
                        );
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Cmd::Cache { action } => {
            let cache = Cache::from_env();
            if action == "clear" {
                if let Err(e) = std::fs::remove_dir_all(cache.dir()) {
                    if e.kind() != std::io::ErrorKind::NotFound {
                        eprintln!("error: cannot clear {}: {e}", cache.dir().display());
                        return ExitCode::from(2);
                    }
                }
                println!("cleared {}", cache.dir().display());
            } else {
                println!("{}", cache.dir().display());
            }
            ExitCode::SUCCESS
        }
    }
}
