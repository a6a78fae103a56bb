//! Row-wise softmax with an online maximum: one pass finds each row's max and sum of
//! exponentials chunk by chunk (rescaling the running sum when the max grows), a second pass
//! writes exp(x - max) / sum. Rows of any length; tails masked.

use std::f64::consts::LOG2_E;

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

/// The shift that makes exp(x − max) = 2^(x·log₂e − shift): max·log₂e, or 0 where max is
/// −inf (every x is then −inf too, and 2^−inf = 0 where exp(−inf + inf) would be NaN).
fn exp2_shift(max: Expr) -> Expr {
    select(max.clone().eq_(f64::NEG_INFINITY), 0.0, max * LOG2_E)
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

/// Few long rows in one kernel, on GPUs with thread-block clusters (sm_90): each row is split
/// over the `blocks` blocks of one cluster, each block holds its part of the row in registers
/// (in the input's type), and the blocks exchange their partial statistics through global
/// memory across a cluster barrier. X is read once and Y written once — the minimum traffic,
/// in one launch (the split kernels read X twice in two launches).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClusterConfig {
    /// Blocks per row: the cluster's size (at most 8, the portable limit).
    pub blocks: u32,
    pub threads: u32,
    /// Resident blocks per multiprocessor to ask of the compiler (`min_blocks_per_sm`), which
    /// caps the registers; 1: no cap.
    pub blocks_per_sm: u32,
}

impl ClusterConfig {
    /// The most elements of the row one thread holds below 512 threads a block (16-bit
    /// types: 16 registers).
    pub const MAX_PER_THREAD: i64 = 32;
    /// The most it holds at all (rows too wide for 32 a thread): 64.
    pub const MAX_PER_THREAD_UNCAPPED: i64 = 64;
    /// The most blocks a row is split over: the portable cluster size.
    pub const MAX_BLOCKS: u32 = tl_passes::cluster::MAX_PORTABLE_CLUSTER;
    /// The most threads a block may have: at 1024 a thread has 64 registers, and NVRTC's
    /// build of the widest rows spilled there (512 threads with 64 columns each ran 5%
    /// faster on an H100 besides).
    const MAX_THREADS: i64 = 512;

    /// Eight blocks a row, with the fewest threads (a power of two from 128 to 512) that keep
    /// at most [`Self::MAX_PER_THREAD`] elements each, or 512 threads of up to
    /// [`Self::MAX_PER_THREAD_UNCAPPED`]; `None` where a row of `cols` is wider than that
    /// (262144 columns).
    ///
    /// Up to 32 a thread (or a row that fills the cluster exactly), the registers are capped to
    /// what a thread's share of the row takes (`blocks_per_sm`): left to itself ptxas gave the
    /// 512-thread bf16 softmax 64 registers, two blocks a multiprocessor, where 40 fit three
    /// and ran 12% faster at 64 × 128256 on an H100; at 262144 columns 64 registers (two
    /// blocks) against 80 (one) ran 14-29% faster (docs/performance.md, session 26).
    pub fn for_shape(cols: i64, dtype: DType) -> Option<ClusterConfig> {
        let blocks = Self::MAX_BLOCKS;
        let per_block = (cols.max(1) + blocks as i64 - 1) / blocks as i64;
        let mut threads = 128i64;
        while threads * Self::MAX_PER_THREAD < per_block && threads < Self::MAX_THREADS {
            threads *= 2;
        }
        if threads * Self::MAX_PER_THREAD_UNCAPPED < per_block {
            return None;
        }
        let cfg = ClusterConfig {
            blocks,
            threads: threads as u32,
            blocks_per_sm: 1,
        };
        // The row's share in registers (32-bit words), plus what addresses, the statistics
        // and the reductions take: about 24 at 512 threads, 32 below (ptxas needed them
        // there). A width that is not whole 16-byte vectors loads element by element and
        // needs far more: no cap. `cuda_compile::cluster_row_kernels_do_not_spill` checks.
        let vectors = cols % (16 / dtype.bytes().max(1) as i64) == 0;
        let per_thread = cfg.width(cols) / threads;
        let words = per_thread * dtype.bytes() as i64 / 4;
        let overhead = if threads >= 512 { 24 } else { 32 };
        let regs = (overhead + words + 7) / 8 * 8;
        let by_regs = 65536 / (threads * regs);
        let by_threads = 2048 / threads;
        // Wider shares (over 32 a thread, at 512 threads) spilled under such caps where the
        // last block's columns past the row are masked (`tilelang check-cuda`, bf16 at two
        // blocks: 200000 columns 24 bytes; 151936 or 200000 padded to 64 a thread, 98) but
        // not where the row fills the cluster exactly (262144: two blocks ran 14-29% faster
        // than one, gpu-notes run 24h).
        let exact = cols == cfg.width(cols) * i64::from(blocks);
        Some(ClusterConfig {
            blocks_per_sm: if vectors && (per_thread <= Self::MAX_PER_THREAD || exact) {
                by_regs.min(by_threads).max(1) as u32
            } else {
                1
            },
            ..cfg
        })
    }

    /// [`Self::for_shape`] for the cluster softmax, whose statistics take more registers than
    /// the RMS norm's: at 512 threads, three blocks an SM (40 registers) spilled it for f16
    /// rows (100 bytes: their conversions to f32) and for rows that fill the cluster at 32 a
    /// thread (8 bytes at 131072 columns); those take two (`cuda_compile::
    /// cluster_row_kernels_do_not_spill` checks every width it picks).
    pub fn for_softmax(cols: i64, dtype: DType) -> Option<ClusterConfig> {
        let cfg = Self::for_shape(cols, dtype)?;
        let exact = cols == cfg.width(cols) * i64::from(cfg.blocks);
        let tight = cfg.threads >= 512 && cfg.blocks_per_sm >= 3;
        Some(if tight && (dtype == DType::F16 || exact) {
            ClusterConfig {
                blocks_per_sm: 2,
                ..cfg
            }
        } else {
            cfg
        })
    }

    /// The block-level choices in a cluster kernel's launch: the cluster along the grid's
    /// first dim, and the register cap.
    pub fn schedule_blocks(&self, t: &mut TileScope) {
        t.cluster(0, self.blocks);
        if self.blocks_per_sm > 1 {
            t.min_blocks_per_sm(self.blocks_per_sm);
        }
    }

    /// The columns one block holds: its share of `cols`, rounded up to whole 16-byte vectors
    /// of a 16-bit type on every thread (columns past the row are masked).
    pub fn width(&self, cols: i64) -> i64 {
        let blocks = i64::from(self.blocks.max(1));
        padded((cols.max(1) + blocks - 1) / blocks, self.threads)
    }
}

/// How a cluster softmax holds exp(x − block max) between its two passes: in place of the row
/// (one exponential an element; the second pass only scales), in the row's own size (f32
/// would double a 16-bit row's registers, and spilled: 25f in docs/gpu-notes.md), with the
/// factor it is scaled by first.
/// - f32 rows: f32, exact.
/// - bf16 rows: bf16, which has f32's range: every probability stays nonzero where its bf16
///   output is, and the output rounds twice (within 2⁻⁷ of itself, not 2⁻⁸). f16 storage
///   would round more finely but from 2⁻²⁹ of the block's max down lose bits, and below 2⁻⁴⁰
///   (e⁻²⁷·⁷, a spread of logits common over a vocabulary) give exact zeros that bf16 keeps.
/// - f16 rows: f16 scaled by 2¹⁵, normal numbers down to 2⁻²⁹ of the block's max: finer than
///   the f16 output itself, whose own subnormals start at 2⁻¹⁴.
fn cluster_storage(dtype: DType) -> (DType, f64) {
    match dtype {
        DType::F16 => (DType::F16, 32768.0),
        DType::BF16 => (DType::BF16, 1.0),
        _ => (F32, 1.0),
    }
}

/// Whether the cluster softmax keeps exp(x − block max) ([`cluster_storage`]) rather than
/// computing the exponentials again: everywhere but at 512 threads capped to three blocks an
/// SM (40 registers: rows of 65537–131072 16-bit columns), where the second copy of the row
/// spilled (8 bytes at 128256 columns) and two blocks an SM ran 5% slower at 64 rows (gpu-notes
/// run 26g).
pub fn cluster_exp_once(cfg: &ClusterConfig) -> bool {
    !(cfg.threads >= 512 && cfg.blocks_per_sm >= 3)
}

/// Softmax of few long rows in one kernel ([`ClusterConfig`]): X `[M, cols]` in; each block's
/// max and sum of exp(x − max) out to `PMAX`, `PSUM` (`[M, blocks]`, f32: the exchange), then
/// Y `[M, cols]`. Grid: blocks × rows, the blocks of a row one cluster.
///
/// One exponential an element where the registers allow ([`cluster_exp_once`]): few long
/// rows spread over few multiprocessors, whose special-function units then take a share of
/// the time (64 exponentials a thread at 262144 columns); keeping them ran 4–6% faster there
/// (gpu-notes run 26g). Each block keeps exp(x − its max) and scales it by exp(its max − row
/// max) / row sum once the blocks have exchanged their statistics.
pub fn softmax_cluster(dtype: DType, cols: i64, cfg: ClusterConfig) -> Kernel {
    let (c, width) = (i64::from(cfg.blocks), cfg.width(cols));
    let (stored, pre) = cluster_storage(dtype);
    let once = cluster_exp_once(&cfg);
    Kernel::build("softmax_cluster", |k| {
        let m = k.dim("M");
        let x = k.input("X", (&m, cols), dtype);
        let pmax = k.output("PMAX", (&m, c), F32);
        let psum = k.output("PSUM", (&m, c), F32);
        let y = k.output("Y", (&m, cols), dtype);
        k.launch([Expr::int(c), m.clone()], cfg.threads, |t, [bx, by]| {
            cfg.schedule_blocks(t);
            let c0 = &bx * width;
            let xs = t.alloc_fragment_named("x", [1, width], dtype);
            let e = t.alloc_fragment_named("e", [1, width], F32);
            let part_max = t.alloc_fragment_named("part_max", [1], F32);
            let part_sum = t.alloc_fragment_named("part_sum", [1], F32);
            t.copy(x.tile((&by, &c0)), &xs);
            // Columns past the row become −inf once (they then add nothing to the max or the
            // sums), so no later pass keeps a mask per element live.
            t.parallel([1, width], |t, [i, j]| {
                let v = select((&c0 + &j).lt(cols), xs.at([&i, &j]), f64::NEG_INFINITY);
                t.store(&xs, [&i, &j], v);
            });
            t.parallel([1, width], |t, [i, j]| {
                t.store(&e, [&i, &j], xs.at([&i, &j]).cast(F32));
            });
            t.reduce_max(&e, &part_max, 1);
            let es = once.then(|| {
                let es = t.alloc_fragment_named("exp", [1, width], stored);
                // exp(x − max) as 2^(x·log₂e − shift): one fused multiply-add and the
                // exponential an element, the −inf guard decided once for the block
                // (`exp2_shift`) rather than selected element by element. A block whose
                // columns are all past the row has max −inf and shift 0: its exp2(−inf) is 0.
                let shift = t.alloc_fragment_named("shift", [1], F32);
                t.parallel([1], |t, [i]| {
                    t.store(&shift, [&i], exp2_shift(part_max.at([&i])));
                });
                t.parallel([1, width], |t, [i, j]| {
                    let v = (xs.at([&i, &j]).cast(F32) * LOG2_E - shift.at([&i])).exp2();
                    t.store(&es, [&i, &j], (v * pre).cast(stored));
                });
                // The sum of what is stored, as stored: the output is normalized over the
                // very values it scales.
                t.parallel([1, width], |t, [i, j]| {
                    t.store(&e, [&i, &j], es.at([&i, &j]).cast(F32) * (1.0 / pre));
                });
                es
            });
            if !once {
                // From X again, not from `e`: `e` need not stay live across the reduction.
                t.parallel([1, width], |t, [i, j]| {
                    let v = exp_below(xs.at([&i, &j]).cast(F32), part_max.at([&i]));
                    t.store(&e, [&i, &j], v);
                });
            }
            t.reduce_sum(&e, &part_sum, 1);
            t.copy(&part_max, pmax.tile([&by, &bx]));
            t.copy(&part_sum, psum.tile([&by, &bx]));
            t.cluster_sync();
            let pm = t.alloc_fragment_named("pm", [1, c], F32);
            let ps = t.alloc_fragment_named("ps", [1, c], F32);
            let row_max = t.alloc_fragment_named("row_max", [1], F32);
            let row_sum = t.alloc_fragment_named("row_sum", [1], F32);
            t.copy(pmax.tile([by.clone(), Expr::int(0)]), &pm);
            t.copy(psum.tile([by.clone(), Expr::int(0)]), &ps);
            t.reduce_max(&pm, &row_max, 1);
            t.parallel([1, c], |t, [i, b]| {
                let w = exp_below(pm.at([&i, &b]), row_max.at([&i]));
                t.store(&ps, [&i, &b], ps.at([&i, &b]) * w);
            });
            t.reduce_sum(&ps, &row_sum, 1);
            match &es {
                // This block's factor: exp(its max − the row's) / the row's sum, over `pre`.
                Some(es) => {
                    t.parallel([1], |t, [i]| {
                        let w = exp_below(part_max.at([&i]), row_max.at([&i])) / row_sum.at([&i]);
                        t.store(&row_sum, [&i], w * (1.0 / pre));
                    });
                    t.parallel([1, width], |t, [i, j]| {
                        let v = es.at([&i, &j]).cast(F32) * row_sum.at([&i]);
                        t.store(&xs, [&i, &j], v.cast(dtype));
                    });
                }
                None => {
                    t.parallel([1], |t, [i]| {
                        t.store(&row_sum, [&i], 1.0 / row_sum.at([&i]));
                    });
                    t.parallel([1, width], |t, [i, j]| {
                        let v =
                            exp(xs.at([&i, &j]).cast(F32) - row_max.at([&i])) * row_sum.at([&i]);
                        t.store(&xs, [&i, &j], v.cast(dtype));
                    });
                }
            }
            t.copy(&xs, y.tile((&by, &c0)));
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
