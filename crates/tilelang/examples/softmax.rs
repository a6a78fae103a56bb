//! Row-wise softmax with an online max.
//!
//!     cargo run --release --example softmax -- --rows 1000 --cols 3000

mod common;

use std::process::ExitCode;

use clap::Parser;
use tilelang::kernels::reference;
use tilelang::kernels::softmax::{row_threads, softmax, softmax_row, RowConfig};
use tilelang::prelude::*;

#[derive(Parser, Debug)]
#[command(about = "Row-wise softmax with a reference check")]
struct Args {
    #[arg(long, default_value_t = 1000)]
    rows: usize,
    #[arg(long, default_value_t = 3000)]
    cols: usize,
    #[arg(long, default_value = "f32")]
    dtype: String,
    /// Columns per chunk
    #[arg(long)]
    chunk: Option<i64>,
    /// Rows per block
    #[arg(long)]
    block_rows: Option<i64>,
    #[command(flatten)]
    common: common::CommonArgs,
}

fn main() -> ExitCode {
    match run() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn run() -> anyhow::Result<ExitCode> {
    let args = Args::parse();
    let dt = common::parse_dtype(&args.dtype)?;
    let mut cfg = RowConfig::cpu();
    cfg.cols = args.chunk.unwrap_or(cfg.cols);
    cfg.rows = args.block_rows.unwrap_or(cfg.rows);
    let dev = args.common.device()?;
    // A row up to 16384 wide fits on chip (registers on a GPU): one read and one write per
    // element.
    let kernel = if args.chunk.is_none() && args.cols <= 16384 {
        softmax_row(dt, args.cols as i64, row_threads(args.cols as i64))
    } else {
        softmax(dt, cfg)
    };
    if args.common.emit(&[&kernel])? {
        return Ok(ExitCode::SUCCESS);
    }
    let exe = common::compile(&kernel, &dev)?;
    let (r, c) = (args.rows, args.cols);
    let x = Tensor::randn(&[r, c], dt, args.common.seed, &dev)?;
    let y = Tensor::zeros(&[r, c], dt, &dev)?;
    y.fill(f64::NAN)?;
    exe.run(&[&x, &y])?;
    let want = reference::softmax(&x.to_f64_vec()?, r, c);
    let err = y.rel_err(&want)?;
    let ms = args
        .common
        .time_ms(&exe, &[Arg::Tensor(&x), Arg::Tensor(&y)])?;
    let gbs = 2.0 * (r * c * dt.bytes()) as f64 / (ms * 1e-3) / 1e9;
    Ok(common::finish(
        "softmax",
        &format!("{r}x{c} {dt}"),
        err,
        ms,
        common::tolerance(dt),
        &format!("gbps={gbs:.1} device={dev} {}", common::compile_note(&exe)),
    ))
}
