//! Row-wise softmax with an online max.
//!
//!     cargo run --release --example softmax -- --rows 1000 --cols 3000

mod common;

use std::process::ExitCode;

use clap::Parser;
use tilelang::kernels::reference;
use tilelang::kernels::softmax::{softmax, softmax_row};

#[derive(Parser, Debug)]
#[command(about = "Row-wise softmax with a reference check")]
struct Args {
    #[command(flatten)]
    row: common::RowArgs,
}

fn main() -> ExitCode {
    let op = common::RowOp {
        name: "softmax",
        row: softmax_row,
        chunked: softmax,
        reference: reference::softmax,
    };
    common::exit_code(common::run_row_example(&op, &Args::parse().row))
}
