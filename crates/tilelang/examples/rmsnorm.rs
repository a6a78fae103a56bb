//! Row-wise RMS normalization.
//!
//!     cargo run --release --example rmsnorm -- --rows 1000 --cols 3000
//!
//! Few long rows (fewer rows than the GPU has multiprocessors, each wider than 16384) are
//! split over blocks (`--split` forces it, `--no-split` keeps one block per row): on sm_90 in
//! one kernel over a thread-block cluster (`--cluster` forces it, `--no-cluster` takes the two
//! kernels), elsewhere in two kernels.
//!
//! `--isa ARCH` prints the AMD ISA report (registers, spills, occupancy, the main loop's
//! instruction mix) of the kernel clang compiles for gfx942 or gfx950, without an AMD GPU:
//!
//!     cargo run --release --example rmsnorm -- --cols 4096 --dtype bf16 --isa gfx950

mod common;

use std::process::ExitCode;

use clap::Parser;
use tilelang::kernels::reference;
use tilelang::kernels::rmsnorm::{
    rmsnorm, rmsnorm_cluster, rmsnorm_row, rmsnorm_split_apply, rmsnorm_split_stats, EPS,
};

#[derive(Parser, Debug)]
#[command(
    about = "Row-wise RMS norm with a reference check",
    allow_negative_numbers = true
)]
struct Args {
    #[command(flatten)]
    args: common::SplitArgs,
}

fn main() -> ExitCode {
    let op = common::RowOp {
        name: "rmsnorm",
        row: rmsnorm_row,
        chunked: rmsnorm,
        reference: |x, rows, cols| reference::rmsnorm(x, rows, cols, EPS),
    };
    let split = common::SplitOp {
        stats: rmsnorm_split_stats,
        apply: rmsnorm_split_apply,
        outputs: 1,
        cluster: rmsnorm_cluster,
        cluster_config: tilelang::kernels::softmax::ClusterConfig::for_shape,
    };
    common::exit_code(common::run_split_example(&op, &split, &Args::parse().args))
}
