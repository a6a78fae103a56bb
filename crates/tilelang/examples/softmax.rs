//! Row-wise softmax with an online max.
//!
//!     cargo run --release --example softmax -- --rows 1000 --cols 3000
//!
//! Few long rows (fewer rows than the GPU has multiprocessors, each wider than 16384) are
//! split over blocks (`--split` forces it, `--no-split` keeps one block per row): on sm_90 in
//! one kernel over a thread-block cluster of 8 blocks, the row held in registers (rows of up
//! to 262144 columns; `--cluster` forces it, `--no-cluster` takes the two kernels below),
//! elsewhere in two kernels (statistics per span, then the output):
//!
//!     cargo run --release --example softmax -- --rows 4 --cols 128256 --dtype bf16
//!
//! `--isa ARCH` prints the AMD ISA report (registers, spills, occupancy, the main loop's
//! instruction mix) of the kernel clang compiles for gfx942 or gfx950, without an AMD GPU:
//!
//!     cargo run --release --example softmax -- --cols 4096 --dtype bf16 --isa gfx950

mod common;

use std::process::ExitCode;

use clap::Parser;
use tilelang::kernels::reference;
use tilelang::kernels::softmax::{
    softmax, softmax_cluster, softmax_row, softmax_split_apply, softmax_split_stats, ClusterConfig,
};

#[derive(Parser, Debug)]
#[command(
    about = "Row-wise softmax with a reference check",
    allow_negative_numbers = true
)]
struct Args {
    #[command(flatten)]
    args: common::SplitArgs,
}

fn main() -> ExitCode {
    let op = common::RowOp {
        name: "softmax",
        row: softmax_row,
        chunked: softmax,
        reference: reference::softmax,
    };
    let split = common::SplitOp {
        stats: softmax_split_stats,
        apply: softmax_split_apply,
        outputs: 2,
        cluster: softmax_cluster,
        cluster_config: ClusterConfig::for_softmax,
    };
    common::exit_code(common::run_split_example(&op, &split, &Args::parse().args))
}
