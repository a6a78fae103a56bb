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
    },
    /// The kernel cache: print its directory, or clear it
    Cache {
        #[arg(value_parser = ["path", "clear"], default_value = "path")]
        action: String,
    },
}

fn main() -> ExitCode {
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
            println!("kernel cache: {}", Cache::from_env().dir().display());
            match tilelang::runtime::cpu::compiler_version() {
                Ok(v) => println!("C compiler: {} ({v})", tilelang::runtime::cpu::c_compiler()),
                Err(e) => println!("C compiler: missing ({e})"),
            }
            ExitCode::SUCCESS
        }
        Cmd::CheckCuda {
            file,
            arch,
            sass,
            listing,
            allow_spills,
        } => {
            let src = match std::fs::read_to_string(&file) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("error: cannot read {}: {e}", file.display());
                    return ExitCode::from(2);
                }
            };
            let opts = tl_nvrtc::CheckOptions {
                allow_spills,
                ..Default::default()
            };
            match tl_nvrtc::check_with(&src, &arch, &opts) {
                Ok(r) => {
                    println!("{r}");
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
