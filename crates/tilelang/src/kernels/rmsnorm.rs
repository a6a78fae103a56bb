//! Row-wise RMS normalization: y = x / sqrt(mean(x²) + eps). One pass accumulates the sum of
//! squares chunk by chunk (the zeros read past a row's end add nothing), a second scales.

use super::softmax::RowConfig;
use crate::prelude::*;

pub const EPS: f64 = 1e-6;

pub fn rmsnorm(dtype: DType, cfg: RowConfig) -> Kernel {
    let (br, bc) = (cfg.rows, cfg.cols);
    Kernel::build("rmsnorm", |k| {
        let (m, n) = (k.dim("M"), k.dim("N"));
        let x = k.input("X", [&m, &n], dtype);
        let y = k.output("Y", [&m, &n], dtype);
        k.launch([ceildiv(&m, br)], cfg.threads, |t, [bx]| {
            let xf = t.alloc_fragment_named("x", [br, bc], F32);
            let sq = t.alloc_fragment_named("sq", [br, bc], F32);
            let ss = t.alloc_fragment_named("sum_sq", [br], F32);
            t.clear(&ss);
            let chunks = ceildiv(&n, bc);
            t.serial(&chunks, |t, j| {
                t.copy(x.tile([&bx * br, &j * bc]), &xf);
                t.parallel([br, bc], |t, [i, c]| {
                    let v = xf.at([&i, &c]);
                    t.store(&sq, [&i, &c], &v * &v);
                });
                t.reduce_sum(&sq, &ss, 1).accumulate();
            });
            t.parallel([br], |t, [i]| {
                t.store(&ss, [&i], rsqrt(ss.at([&i]) / n.cast(F32) + EPS));
            });
            t.serial(&chunks, |t, j| {
                t.copy(x.tile([&bx * br, &j * bc]), &xf);
                t.parallel([br, bc], |t, [i, c]| {
                    t.store(&xf, [&i, &c], xf.at([&i, &c]) * ss.at([&i]));
                });
                t.copy(&xf, y.tile([&bx * br, &j * bc]));
            });
        });
    })
}

/// RMS norm of rows of a fixed width that fit in registers (GPU): one read, one write.
pub fn rmsnorm_row(dtype: DType, cols: i64, threads: u32) -> Kernel {
    // Padding past the row reads as zeros, which add nothing to the sum of squares.
    let width = super::softmax::row_width(cols, threads);
    Kernel::build("rmsnorm_row", |k| {
        let m = k.dim("M");
        let x = k.input("X", (&m, cols), dtype);
        let y = k.output("Y", (&m, cols), dtype);
        k.launch([m.clone()], threads, |t, [bx]| {
            let xf = t.alloc_fragment_named("x", [1, width], F32);
            let sq = t.alloc_fragment_named("sq", [1, width], F32);
            let ss = t.alloc_fragment_named("sum_sq", [1], F32);
            t.copy(x.tile((&bx, 0)), &xf);
            t.parallel([1, width], |t, [i, j]| {
                let v = xf.at([&i, &j]);
                t.store(&sq, [&i, &j], &v * &v);
            });
            t.reduce_sum(&sq, &ss, 1);
            t.parallel([1], |t, [i]| {
                t.store(&ss, [&i], rsqrt(ss.at([&i]) * (1.0 / cols as f64) + EPS));
            });
            t.parallel([1, width], |t, [i, j]| {
                t.store(&xf, [&i, &j], xf.at([&i, &j]) * ss.at([&i]));
            });
            t.copy(&xf, y.tile((&bx, 0)));
        });
    })
}

/// The first kernel of an RMS norm of few long rows split over blocks (see
/// [`super::softmax::SplitConfig`]): X `[M, N]` in, each span's sum of squares out (`PSS`,
/// `[M, ceil(N / span)]`, f32; zeros read past the row's end add nothing). Grid: spans × rows.
pub fn rmsnorm_split_stats(dtype: DType, cfg: super::softmax::SplitConfig) -> Kernel {
    let (span, bc) = (cfg.span_cols(), cfg.chunk.max(1));
    Kernel::build("rmsnorm_split_stats", |k| {
        let (m, n) = (k.dim("M"), k.dim("N"));
        let spans = ceildiv(&n, span);
        let x = k.input("X", [&m, &n], dtype);
        let pss = k.output("PSS", [&m, &spans], F32);
        k.launch([spans.clone(), m.clone()], cfg.threads, |t, [bx, by]| {
            let xf = t.alloc_fragment_named("x", [1, bc], F32);
            let part = t.alloc_fragment_named("part", [1], F32);
            let ss = t.alloc_fragment_named("span_sum_sq", [1], F32);
            t.clear(&ss);
            t.serial(span / bc, |t, j| {
                t.copy(x.tile([by.clone(), &bx * span + &j * bc]), &xf);
                t.parallel([1, bc], |t, [i, c]| {
                    let v = xf.at([&i, &c]);
                    t.store(&xf, [&i, &c], &v * &v);
                });
                t.reduce_sum(&xf, &part, 1);
                t.parallel([1], |t, [i]| {
                    t.store(&ss, [&i], ss.at([&i]) + part.at([&i]));
                });
            });
            t.copy(&ss, pss.tile([&by, &bx]));
        });
    })
}

/// The second kernel: each block adds its row's span sums (`threads` at a time) and scales
/// its own span by rsqrt(sum / N + eps). Inputs X, PSS; output Y `[M, N]`.
pub fn rmsnorm_split_apply(dtype: DType, cfg: super::softmax::SplitConfig) -> Kernel {
    let (span, bc) = (cfg.span_cols(), cfg.chunk.max(1));
    let sc = cfg.threads as i64;
    Kernel::build("rmsnorm_split_apply", |k| {
        let (m, n) = (k.dim("M"), k.dim("N"));
        let spans = ceildiv(&n, span);
        let x = k.input("X", [&m, &n], dtype);
        let pss = k.input("PSS", [&m, &spans], F32);
        let y = k.output("Y", [&m, &n], dtype);
        k.launch([spans.clone(), m.clone()], cfg.threads, |t, [bx, by]| {
            let ps = t.alloc_fragment_named("ps", [1, sc], F32);
            let part = t.alloc_fragment_named("part", [1], F32);
            let ss = t.alloc_fragment_named("sum_sq", [1], F32);
            t.clear(&ss);
            // Zeros past the last span (the copy's padding) add nothing.
            t.serial(ceildiv(&spans, sc), |t, g| {
                t.copy(pss.tile([by.clone(), &g * sc]), &ps);
                t.reduce_sum(&ps, &part, 1);
                t.parallel([1], |t, [i]| {
                    t.store(&ss, [&i], ss.at([&i]) + part.at([&i]));
                });
            });
            t.parallel([1], |t, [i]| {
                t.store(&ss, [&i], rsqrt(ss.at([&i]) / n.cast(F32) + EPS));
            });
            let xf = t.alloc_fragment_named("x", [1, bc], F32);
            t.serial(span / bc, |t, j| {
                let c0 = &bx * span + &j * bc;
                t.copy(x.tile([by.clone(), c0.clone()]), &xf);
                t.parallel([1, bc], |t, [i, c]| {
                    t.store(&xf, [&i, &c], xf.at([&i, &c]) * ss.at([&i]));
                });
                t.copy(&xf, y.tile([by.clone(), c0]));
            });
        });
    })
}

/// RMS norm of few long rows in one kernel (see [`super::softmax::ClusterConfig`]): each
/// block of a row's cluster holds its part of the row in registers, writes its sum of squares
/// to `PSS` (`[M, blocks]`, f32), and after the cluster barrier scales its part by the row's
/// rsqrt(sum / cols + eps). X read once, Y written once, one launch.
pub fn rmsnorm_cluster(dtype: DType, cols: i64, cfg: super::softmax::ClusterConfig) -> Kernel {
    let (c, width) = (i64::from(cfg.blocks), cfg.width(cols));
    Kernel::build("rmsnorm_cluster", |k| {
        let m = k.dim("M");
        let x = k.input("X", (&m, cols), dtype);
        let pss = k.output("PSS", (&m, c), F32);
        let y = k.output("Y", (&m, cols), dtype);
        k.launch([Expr::int(c), m.clone()], cfg.threads, |t, [bx, by]| {
            cfg.schedule_blocks(t);
            let c0 = &bx * width;
            let xs = t.alloc_fragment_named("x", [1, width], dtype);
            let sq = t.alloc_fragment_named("sq", [1, width], F32);
            let part = t.alloc_fragment_named("part_sum_sq", [1], F32);
            t.copy(x.tile((&by, &c0)), &xs);
            // Columns past the row read as zeros, which add nothing.
            t.parallel([1, width], |t, [i, j]| {
                let v = xs.at([&i, &j]).cast(F32);
                t.store(&sq, [&i, &j], &v * &v);
            });
            t.reduce_sum(&sq, &part, 1);
            t.copy(&part, pss.tile([&by, &bx]));
            t.cluster_sync();
            let ps = t.alloc_fragment_named("ps", [1, c], F32);
            let ss = t.alloc_fragment_named("sum_sq", [1], F32);
            t.copy(pss.tile([by.clone(), Expr::int(0)]), &ps);
            t.reduce_sum(&ps, &ss, 1);
            t.parallel([1], |t, [i]| {
                t.store(&ss, [&i], rsqrt(ss.at([&i]) * (1.0 / cols as f64) + EPS));
            });
            t.parallel([1, width], |t, [i, j]| {
                let v = xs.at([&i, &j]).cast(F32) * ss.at([&i]);
                t.store(&xs, [&i, &j], v.cast(dtype));
            });
            t.copy(&xs, y.tile((&by, &c0)));
        });
    })
}
