//! Row-wise softmax with an online max.
//!
//!     cargo run --release --example softmax -- --rows 1000 --cols 3000
//!
//! Few long rows (fewer rows than the GPU has multiprocessors, each wider than 16384) are
//! split over blocks, two kernels (`--split` forces it, `--no-split` keeps one block per row):
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
    softmax, softmax_row, softmax_split_apply, softmax_split_stats, SplitConfig,
};
use tilelang::prelude::*;

#[derive(Parser, Debug)]
#[command(
    about = "Row-wise softmax with a reference check",
    allow_negative_numbers = true
)]
struct Args {
    /// Split each row over blocks (two kernels), whatever the shape
    #[arg(long, conflicts_with = "no_split")]
    split: bool,
    /// Never split rows over blocks
    #[arg(long)]
    no_split: bool,
    /// With the split: columns per block (a multiple of 2048; default: about two blocks per
    /// multiprocessor)
    #[arg(long, value_parser = common::size::<i64>)]
    span: Option<i64>,
    #[command(flatten)]
    row: common::RowArgs,
}

fn main() -> ExitCode {
    common::exit_code(run())
}

fn run() -> anyhow::Result<ExitCode> {
    let args = Args::parse();
    let op = common::RowOp {
        name: "softmax",
        row: softmax_row,
        chunked: softmax,
        reference: reference::softmax,
    };
    let a = &args.row;
    if a.common.emit.is_some() || a.common.isa.is_some() || args.no_split {
        return common::run_row_example(&op, a);
    }
    let dev = a.common.device()?;
    // Few long rows leave one-block-per-row kernels with most multiprocessors idle.
    let sms = dev.cuda_props().map(|p| p.multiprocessors).ok();
    let few_long = sms.is_some_and(|s| a.rows < s as usize && a.cols > 16384);
    if !(args.split || few_long) {
        return common::run_row_example(&op, a);
    }
    let dt = common::parse_dtype(&a.dtype)?;
    let mut cfg = SplitConfig::for_shape(a.rows, a.cols, sms.unwrap_or(8));
    if let Some(span) = args.span {
        if span <= 0 || span % cfg.chunk != 0 {
            anyhow::bail!(
                "--span must be a positive multiple of {} (got {span})",
                cfg.chunk
            );
        }
        cfg.span = span;
    }
    let (r, c) = (a.rows, a.cols);
    let spans = cfg.spans(c);
    let stats = common::compile(&softmax_split_stats(dt, cfg), &dev)?;
    let apply = common::compile(&softmax_split_apply(dt, cfg), &dev)?;
    let x = Tensor::randn(&[r, c], dt, a.common.seed, &dev)?;
    let y = Tensor::zeros(&[r, c], dt, &dev)?;
    let pmax = Tensor::zeros(&[r, spans], F32, &dev)?;
    let psum = Tensor::zeros(&[r, spans], F32, &dev)?;
    y.fill(f64::NAN)?;
    stats.run(&[&x, &pmax, &psum])?;
    apply.run(&[&x, &pmax, &psum, &y])?;
    let want = reference::softmax(&x.to_f64_vec()?, r, c);
    let err = y.rel_err(&want)?;
    // Each kernel timed alone (L2 flushed before each): the sum counts X read cold twice.
    let ms = a.common.time_ms(
        &stats,
        &[Arg::Tensor(&x), Arg::Tensor(&pmax), Arg::Tensor(&psum)],
    )? + a.common.time_ms(
        &apply,
        &[
            Arg::Tensor(&x),
            Arg::Tensor(&pmax),
            Arg::Tensor(&psum),
            Arg::Tensor(&y),
        ],
    )?;
    let gbs = 2.0 * (r * c * dt.bytes()) as f64 / (ms * 1e-3) / 1e9;
    Ok(common::finish(
        "softmax",
        &format!("{r}x{c} {dt}"),
        err,
        ms,
        common::tolerance(dt),
        &format!(
            "gbps={gbs:.1} device={dev} split={spans}x{} {}",
            cfg.span,
            common::compile_note(&apply)
        ),
    ))
}
