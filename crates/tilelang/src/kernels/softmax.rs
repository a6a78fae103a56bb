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

/// The factor that rescales a running sum taken under max `old` to max `new` (≥ `old`): 1 when
/// they are equal, which also covers a run of columns that were all −inf so far (where
/// exp(old − new) would be exp(−inf + inf) = NaN).
fn rescale(old: Expr, new: Expr) -> Expr {
    select(old.clone().eq_(new.clone()), 1.0, exp(old - new))
}

/// exp(x − max) for x ≤ max, 0 while every value so far was −inf (max −inf): a fully masked
/// run of columns adds nothing instead of NaN.
fn exp_below(x: Expr, max: Expr) -> Expr {
    select(max.clone().eq_(f64::NEG_INFINITY), 0.0, exp(x - max))
}

/// Each row's running max and sum of exp(x − max) (fragments of the block's rows), with a
/// scratch fragment `part` for a chunk's reductions: the online softmax state that the chunked
/// and the split kernels fold chunks (or spans' statistics) into.
struct Running<'a> {
    max: &'a Buffer,
    sum: &'a Buffer,
    part: &'a Buffer,
}

impl Running<'_> {
    fn rows(&self) -> i64 {
        self.max.const_shape().map_or(1, |s| s[0])
    }

    /// Raise each row's max to cover `part` (a chunk's maxima), rescaling its sum to match.
    fn raise_max(&self, t: &mut TileScope) {
        let (max_, sum, part) = (self.max, self.sum, self.part);
        t.parallel([self.rows()], |t, [i]| {
            let new_max = max(max_.at([&i]), part.at([&i]));
            t.store(
                sum,
                [&i],
                sum.at([&i]) * rescale(max_.at([&i]), new_max.clone()),
            );
            t.store(max_, [&i], new_max);
        });
    }

    /// Add `part` (a chunk's sums, under the current max) to each row's sum.
    fn add_part(&self, t: &mut TileScope) {
        let (sum, part) = (self.sum, self.part);
        t.parallel([self.rows()], |t, [i]| {
            t.store(sum, [&i], sum.at([&i]) + part.at([&i]));
        });
    }

    /// Fold chunk `xf` (`[rows, cols]`, its columns starting at `c0` of rows `n` long) into the
    /// running max and sum. Columns past the end take no part; `xf` is left as exp(x − max).
    fn fold_chunk(&self, t: &mut TileScope, xf: &Buffer, c0: Expr, n: &Expr) {
        let shape = xf.const_shape().unwrap_or_default();
        let (rows, cols) = (
            shape.first().copied().unwrap_or(1),
            shape.get(1).copied().unwrap_or(1),
        );
        t.parallel([rows, cols], |t, [i, c]| {
            let valid = (&c0 + &c).lt(n);
            t.store(
                xf,
                [&i, &c],
                select(valid, xf.at([&i, &c]), f64::NEG_INFINITY),
            );
        });
        t.reduce_max(xf, self.part, 1);
        self.raise_max(t);
        let max_ = self.max;
        t.parallel([rows, cols], |t, [i, c]| {
            t.store(xf, [&i, &c], exp_below(xf.at([&i, &c]), max_.at([&i])));
        });
        t.reduce_sum(xf, self.part, 1);
        self.add_part(t);
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
            let running = Running {
                max: &row_max,
                sum: &row_sum,
                part: &chunk,
            };
            t.serial(&chunks, |t, j| {
                t.copy(x.tile([&bx * br, &j * bc]), &xf);
                running.fold_chunk(t, &xf, &j * bc, &n);
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

/// Softmax of few long rows (a vocabulary-sized softmax at a small batch), which one block per
/// row leaves most of a GPU idle: each row is split into spans of `span` columns, one block
/// per span, in two kernels — [`softmax_split_stats`] writes each span's max and sum of
/// exponentials, [`softmax_split_apply`] combines its row's spans and writes its own span.
/// X is read twice (three passes over memory instead of two), at the whole GPU's bandwidth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitConfig {
    /// Columns per block: a multiple of `chunk`.
    pub span: i64,
    /// Columns per pass through registers.
    pub chunk: i64,
    pub threads: u32,
}

impl SplitConfig {
    /// Spans that give about `8 × multiprocessors` blocks for `rows × cols`, in 2048-column
    /// chunks of 256 threads (one 16-byte vector of a 16-bit type per thread and pass). A
    /// block keeps one vector a thread in flight, so it takes several blocks a multiprocessor
    /// to cover the memory's latency: on an H100, bf16 64 × 128256 took 31 µs in 1024 blocks
    /// against 41 in 320 (two a multiprocessor, the earlier choice), 16 × 128256 16 µs against
    /// 18; fewer rows end at the one-chunk span either way (gpu-notes run 20k).
    pub fn for_shape(rows: usize, cols: usize, multiprocessors: u32) -> SplitConfig {
        let chunk = 2048i64;
        let want_blocks = (8 * multiprocessors as usize).max(1);
        let per_row = want_blocks.div_ceil(rows.max(1)).max(1);
        let span = (cols.div_ceil(per_row) as i64).max(1);
        SplitConfig {
            span: (span + chunk - 1) / chunk * chunk,
            chunk,
            threads: 256,
        }
    }

    /// The columns a block covers: `span` rounded up to whole chunks (the kernels pass over a
    /// span chunk by chunk; a part chunk would be skipped).
    pub fn span_cols(&self) -> i64 {
        let chunk = self.chunk.max(1);
        (self.span.max(1) + chunk - 1) / chunk * chunk
    }

    /// Spans per row of `cols` columns.
    pub fn spans(&self, cols: usize) -> usize {
        cols.div_ceil(self.span_cols() as usize)
    }
}

/// The first kernel of a split softmax ([`SplitConfig`]): X `[M, N]` in, the max and the sum
/// of exp(x − max) of every span out (`PMAX`, `PSUM`, `[M, ceil(N / span)]`, f32). Grid: spans
/// × rows.
pub fn softmax_split_stats(dtype: DType, cfg: SplitConfig) -> Kernel {
    let (span, bc) = (cfg.span_cols(), cfg.chunk.max(1));
    Kernel::build("softmax_split_stats", |k| {
        let (m, n) = (k.dim("M"), k.dim("N"));
        let spans = ceildiv(&n, span);
        let x = k.input("X", [&m, &n], dtype);
        let pmax = k.output("PMAX", [&m, &spans], F32);
        let psum = k.output("PSUM", [&m, &spans], F32);
        k.launch([spans.clone(), m.clone()], cfg.threads, |t, [bx, by]| {
            let xf = t.alloc_fragment_named("x", [1, bc], F32);
            let row_max = t.alloc_fragment_named("span_max", [1], F32);
            let chunk = t.alloc_fragment_named("chunk", [1], F32);
            let row_sum = t.alloc_fragment_named("span_sum", [1], F32);
            t.fill(&row_max, f64::NEG_INFINITY);
            t.clear(&row_sum);
            // The span's first chunk always holds a column of the row (bx < ceil(N / span)),
            // so the running max is finite from then on.
            let running = Running {
                max: &row_max,
                sum: &row_sum,
                part: &chunk,
            };
            t.serial(span / bc, |t, j| {
                let c0 = &bx * span + &j * bc;
                t.copy(x.tile([by.clone(), c0.clone()]), &xf);
                running.fold_chunk(t, &xf, c0, &n);
            });
            t.copy(&row_max, pmax.tile([&by, &bx]));
            t.copy(&row_sum, psum.tile([&by, &bx]));
        });
    })
}

/// The second kernel of a split softmax: each block combines its row's span statistics
/// (`threads` at a time) into the row's max and sum, then writes exp(x − max) / sum over its
/// own span. Inputs X, PMAX, PSUM; output Y `[M, N]`.
pub fn softmax_split_apply(dtype: DType, cfg: SplitConfig) -> Kernel {
    let (span, bc) = (cfg.span_cols(), cfg.chunk.max(1));
    let sc = cfg.threads as i64;
    Kernel::build("softmax_split_apply", |k| {
        let (m, n) = (k.dim("M"), k.dim("N"));
        let spans = ceildiv(&n, span);
        let x = k.input("X", [&m, &n], dtype);
        let pmax = k.input("PMAX", [&m, &spans], F32);
        let psum = k.input("PSUM", [&m, &spans], F32);
        let y = k.output("Y", [&m, &n], dtype);
        k.launch([spans.clone(), m.clone()], cfg.threads, |t, [bx, by]| {
            let pm = t.alloc_fragment_named("pm", [1, sc], F32);
            let ps = t.alloc_fragment_named("ps", [1, sc], F32);
            let part = t.alloc_fragment_named("part", [1], F32);
            let row_max = t.alloc_fragment_named("row_max", [1], F32);
            let row_sum = t.alloc_fragment_named("row_sum", [1], F32);
            t.fill(&row_max, f64::NEG_INFINITY);
            t.clear(&row_sum);
            // The same online combination over the spans' statistics, `sc` at a time (the
            // first group always holds span 0).
            let running = Running {
                max: &row_max,
                sum: &row_sum,
                part: &part,
            };
            t.serial(ceildiv(&spans, sc), |t, g| {
                t.copy(pmax.tile([by.clone(), &g * sc]), &pm);
                t.copy(psum.tile([by.clone(), &g * sc]), &ps);
                t.parallel([1, sc], |t, [i, c]| {
                    let valid = (&g * sc + &c).lt(&spans);
                    t.store(
                        &pm,
                        [&i, &c],
                        select(valid.clone(), pm.at([&i, &c]), f64::NEG_INFINITY),
                    );
                    t.store(&ps, [&i, &c], select(valid, ps.at([&i, &c]), 0.0));
                });
                t.reduce_max(&pm, &part, 1);
                running.raise_max(t);
                t.parallel([1, sc], |t, [i, c]| {
                    t.store(
                        &ps,
                        [&i, &c],
                        ps.at([&i, &c]) * exp_below(pm.at([&i, &c]), row_max.at([&i])),
                    );
                });
                t.reduce_sum(&ps, &part, 1);
                running.add_part(t);
            });
            t.parallel([1], |t, [i]| {
                t.store(&row_sum, [&i], 1.0 / row_sum.at([&i]));
            });
            let xf = t.alloc_fragment_named("x", [1, bc], F32);
            t.serial(span / bc, |t, j| {
                let c0 = &bx * span + &j * bc;
                t.copy(x.tile([by.clone(), c0.clone()]), &xf);
                t.parallel([1, bc], |t, [i, c]| {
                    let e = exp(xf.at([&i, &c]) - row_max.at([&i])) * row_sum.at([&i]);
                    t.store(&xf, [&i, &c], e);
                });
                t.copy(&xf, y.tile([by.clone(), c0]));
            });
        });
    })
}

#[cfg(test)]
mod tests {
    use super::SplitConfig;

    /// About eight blocks a multiprocessor (132 here), never less than one chunk a block.
    #[test]
    fn split_spans_aim_at_eight_blocks_a_multiprocessor() {
        for (rows, cols, span) in [
            (64, 128256, 8192),
            (16, 128256, 2048),
            (4, 128256, 2048),
            (1, 1048576, 2048),
        ] {
            let cfg = SplitConfig::for_shape(rows, cols, 132);
            assert_eq!(cfg.span, span, "{rows} x {cols}");
            assert_eq!(cfg.span % cfg.chunk, 0);
        }
    }
}
