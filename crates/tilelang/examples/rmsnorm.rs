//! Row-wise RMS normalization.
//!
//!     cargo run --release --example rmsnorm -- --rows 1000 --cols 3000

mod common;

use std::process::ExitCode;

use clap::Parser;
use tilelang::kernels::reference;
use tilelang::kernels::rmsnorm::{rmsnorm, rmsnorm_row, EPS};

#[derive(Parser, Debug)]
#[command(about = "Row-wise RMS norm with a reference check")]
struct Args {
    #[command(flatten)]
    row: common::RowArgs,
}

fn main() -> ExitCode {
    let op = common::RowOp {
        name: "rmsnorm",
        row: rmsnorm_row,
        chunked: rmsnorm,
        reference: |x, rows, cols| reference::rmsnorm(x, rows, cols, EPS),
    };
    common::exit_code(common::run_row_example(&op, &Args::parse().row))
}
