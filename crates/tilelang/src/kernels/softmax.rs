//! Row-wise softmax with an online maximum: one pass finds each row's max and sum of
//! exponentials chunk by chunk (rescaling the running sum when the max grows), a second pass
//! writes exp(x - max) / sum. Rows of any length; tails masked.

use crate::prelude::*;

#[derive(Clone, Copy, Debug)]
pub struct RowConfig {
    /// Rows per block.
    pub rows: i64,
    /// Columns per chunk.
    pub cols: i64,
    pub threads: u32,
}

impl RowConfig {
    pub fn cpu() -> RowConfig {
        RowConfig {
            rows: 1,
            cols: 2048,
            threads: 128,
        }
    }
}

pub fn softmax(dtype: DType, cfg: RowConfig) -> Kernel {
    let (br, bc) = (cfg.rows, cfg.cols);
    Kernel::build("softmax", |k| {
        let (m, n) = (k.dim("M"), k.dim("N"));
        let x = k.input("X", [&m, &n], dtype);
        let y = k.output("Y", [&m, &n], dtype);
        k.launch([ceildiv(&m, br)], cfg.threads, |t, [bx]| {
            let xf = t.alloc_fragment_named("x", [br, bc], F32);
            let row_max = t.alloc_fragment_named("row_max", [br], F32);
            let chunk = t.alloc_fragment_named("chunk", [br], F32);
            let row_sum = t.alloc_fragment_named("row_sum", [br], F32);
            t.fill(&row_max, f64::NEG_INFINITY);
            t.clear(&row_sum);
            let chunks = ceildiv(&n, bc);
            t.serial(&chunks, |t, j| {
                t.copy(x.tile([&bx * br, &j * bc]), &xf);
                // Columns past the end must not take part in the max or the sum.
                t.parallel([br, bc], |t, [i, c]| {
                    let valid = (&j * bc + &c).lt(&n);
                    t.store(
                        &xf,
                        [&i, &c],
                        select(valid, xf.at([&i, &c]), f64::NEG_INFINITY),
                    );
                });
                t.reduce_max(&xf, &chunk, 1);
                t.parallel([br], |t, [i]| {
                    let new_max = max(row_max.at([&i]), chunk.at([&i]));
                    t.store(
                        &row_sum,
                        [&i],
                        row_sum.at([&i]) * exp(row_max.at([&i]) - &new_max),
                    );
                    t.store(&row_max, [&i], new_max);
                });
                t.parallel([br, bc], |t, [i, c]| {
                    t.store(&xf, [&i, &c], exp(xf.at([&i, &c]) - row_max.at([&i])));
                });
                t.reduce_sum(&xf, &chunk, 1);
                t.parallel([br], |t, [i]| {
                    t.store(&row_sum, [&i], row_sum.at([&i]) + chunk.at([&i]));
                });
            });
            t.parallel([br], |t, [i]| {
                t.store(&row_sum, [&i], 1.0 / row_sum.at([&i]));
            });
            t.serial(&chunks, |t, j| {
                t.copy(x.tile([&bx * br, &j * bc]), &xf);
                t.parallel([br, bc], |t, [i, c]| {
                    let e = exp(xf.at([&i, &c]) - row_max.at([&i])) * row_sum.at([&i]);
                    t.store(&xf, [&i, &c], e);
                });
                t.copy(&xf, y.tile([&bx * br, &j * bc]));
            });
        });
    })
}

/// Threads for a block that holds one row of `cols` elements in registers: a power of two,
/// about 16 elements per thread, between one warp and 256 threads.
/// [`row_threads`] for a target: at least one whole wave on AMD (64 lanes).
pub fn row_threads_for(target: &tl_target::Target, cols: i64) -> u32 {
    let t = row_threads(cols);
    t.max(target.warp_size())
}

pub fn row_threads(cols: i64) -> u32 {
    let mut t = 32;
    while t < 256 && t * 2 * 16 <= cols {
        t *= 2;
    }
    t as u32
}

/// The register tile for a row of `cols`: rounded up to whole 16-byte vectors per thread, so
/// every thread holds the same number of elements (the padding is masked).
fn padded(cols: i64, threads: u32) -> i64 {
    let step = threads as i64 * 8;
    (cols + step - 1) / step * step
}

/// Softmax of rows of a fixed width that fit in registers (GPU): each block loads one row
/// once, reduces the max and the sum across its threads, and writes the row once — the
/// minimum memory traffic.
pub fn softmax_row(dtype: DType, cols: i64, threads: u32) -> Kernel {
    let width = padded(cols, threads);
    Kernel::build("softmax_row", |k| {
        let m = k.dim("M");
        let x = k.input("X", (&m, cols), dtype);
        let y = k.output("Y", (&m, cols), dtype);
        k.launch([m.clone()], threads, |t, [bx]| {
            let xf = t.alloc_fragment_named("x", [1, width], F32);
            let row_max = t.alloc_fragment_named("row_max", [1], F32);
            let row_sum = t.alloc_fragment_named("row_sum", [1], F32);
            t.copy(x.tile((&bx, 0)), &xf);
            // Padding past the row must not count (the simplifier drops this when there is none).
            t.parallel([1, width], |t, [i, j]| {
                t.store(
                    &xf,
                    [&i, &j],
                    select(j.lt(cols), xf.at([&i, &j]), f64::NEG_INFINITY),
                );
            });
            t.reduce_max(&xf, &row_max, 1);
            t.parallel([1, width], |t, [i, j]| {
                t.store(&xf, [&i, &j], exp(xf.at([&i, &j]) - row_max.at([&i])));
            });
            t.reduce_sum(&xf, &row_sum, 1);
            t.parallel([1, width], |t, [i, j]| {
                t.store(&xf, [&i, &j], xf.at([&i, &j]) * (1.0 / row_sum.at([&i])));
            });
            t.copy(&xf, y.tile((&bx, 0)));
        });
    })
}

/// The padded register tile of [`softmax_row`], for other row kernels.
pub fn row_width(cols: i64, threads: u32) -> i64 {
    padded(cols, threads)
}
