//! Fused element-wise kernel: C = relu(A + B).
//!
//!     cargo run --release --example elementwise -- --n 1000003
//!
//! `--isa ARCH` prints the AMD ISA report (registers, spills, occupancy, the main loop's
//! instruction mix) of the kernel clang compiles for gfx942 or gfx950, without an AMD GPU:
//!
//!     cargo run --release --example elementwise -- --dtype bf16 --isa gfx950

mod common;

use std::process::ExitCode;

use clap::Parser;
use tilelang::kernels::elementwise::{add_relu, add_relu_2d};
use tilelang::prelude::*;

#[derive(Parser, Debug)]
#[command(
    about = "Fused add + relu with a reference check",
    allow_negative_numbers = true
)]
struct Args {
    #[arg(long, default_value_t = 1_000_003, value_parser = common::size::<usize>)]
    n: usize,
    #[arg(long, default_value = "f32")]
    dtype: String,
    /// Rows: the tensors are [rows, n] (a 2-D kernel; more than 2^31 elements in all is
    /// fine) instead of [n]
    #[arg(long, value_parser = common::size::<usize>)]
    rows: Option<usize>,
    /// Elements per block
    #[arg(long, default_value_t = 4096, value_parser = common::size::<i64>)]
    block: i64,
    #[command(flatten)]
    common: common::CommonArgs,
}

fn main() -> ExitCode {
    common::exit_code(run())
}

fn run() -> anyhow::Result<ExitCode> {
    let args = Args::parse();
    let dt = common::parse_dtype(&args.dtype)?;
    let kernel = match args.rows {
        Some(_) => add_relu_2d(dt, args.block, 256),
        None => add_relu(dt, args.block, 256),
    };
    if args.common.emit_only(&|_| vec![kernel.clone()])? {
        return Ok(ExitCode::SUCCESS);
    }
    let dev = args.common.device()?;
    let exe = common::compile(&kernel, &dev)?;
    let shape = match args.rows {
        Some(r) => vec![r, args.n],
        None => vec![args.n],
    };
    let n: usize = shape.iter().product();
    let a = Tensor::randn(&shape, dt, args.common.seed, &dev)?;
    let b = Tensor::randn(&shape, dt, args.common.seed + 1, &dev)?;
    let c = Tensor::zeros(&shape, dt, &dev)?;
    c.fill(f64::NAN)?;
    exe.run(&[&a, &b, &c])?;
    let (av, bv) = (a.to_f64_vec()?, b.to_f64_vec()?);
    let want: Vec<f64> = av.iter().zip(&bv).map(|(x, y)| (x + y).max(0.0)).collect();
    let err = c.rel_err(&want)?;
    let ms = args
        .common
        .time_ms(&exe, &[Arg::Tensor(&a), Arg::Tensor(&b), Arg::Tensor(&c)])?;
    let gbs = 3.0 * (n * dt.bytes()) as f64 / (ms * 1e-3) / 1e9;
    Ok(common::finish(
        "elementwise",
        &format!(
            "{} {dt}",
            shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join("x")
        ),
        err,
        ms,
        common::tolerance(dt),
        &format!(
            "gbps={gbs:.1} device={dev} {} {}",
            common::compile_note(&exe),
            common::variant_note(&exe, &[&a, &b, &c])
        ),
    ))
}
