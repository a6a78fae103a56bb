//! Row-wise softmax with an online max.
//!
//!     cargo run --release --example softmax -- --rows 1000 --cols 3000
//!
//! `--isa ARCH` prints the AMD ISA report (registers, spills, occupancy, the main loop's
//! instruction mix) of the kernel clang compiles for gfx942 or gfx950, without an AMD GPU:
//!
//!     cargo run --release --example softmax -- --cols 4096 --dtype bf16 --isa gfx950

mod common;

use std::process::ExitCode;

use clap::Parser;
use tilelang::kernels::reference;
use tilelang::kernels::softmax::{softmax, softmax_row};

#[derive(Parser, Debug)]
#[command(
    about = "Row-wise softmax with a reference check",
    allow_negative_numbers = true
)]
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
