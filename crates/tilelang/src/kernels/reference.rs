//! Plain-Rust references in f64, multithreaded where the work is large.

use std::thread;

fn threads() -> usize {
    thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Split `0..rows` over threads, each filling its rows of `out` (`row_len` values a row).
pub fn par_rows(out: &mut [f64], row_len: usize, f: impl Fn(usize, &mut [f64]) + Sync) {
    if row_len == 0 || out.is_empty() {
        return;
    }
    let rows = out.len() / row_len;
    let per = rows.div_ceil(threads()).max(1);
    thread::scope(|s| {
        for (ci, chunk) in out.chunks_mut(per * row_len).enumerate() {
            let f = &f;
            s.spawn(move || {
                for (r, row) in chunk.chunks_mut(row_len).enumerate() {
                    f(ci * per + r, row);
                }
            });
        }
    });
}

/// C = op(A) · op(B) with A given row-major as [M,K] (or [K,M] when `trans_a`) and B as
/// [K,N] (or [N,K] when `trans_b`).
pub fn gemm(
    a: &[f64],
    b: &[f64],
    m: usize,
    n: usize,
    k: usize,
    trans_a: bool,
    trans_b: bool,
) -> Vec<f64> {
    // Bring B to [N][K] so the inner loop is contiguous.
    let mut bt = vec![0.0; n * k];
    for kk in 0..k {
        for j in 0..n {
            bt[j * k + kk] = if trans_b {
                b[j * k + kk]
            } else {
                b[kk * n + j]
            };
        }
    }
    let mut at = vec![0.0; m * k];
    for i in 0..m {
        for kk in 0..k {
            at[i * k + kk] = if trans_a {
                a[kk * m + i]
            } else {
                a[i * k + kk]
            };
        }
    }
    let mut c = vec![0.0; m * n];
    par_rows(&mut c, n, |i, row| {
        let ar = &at[i * k..(i + 1) * k];
        for (j, out) in row.iter_mut().enumerate() {
            let br = &bt[j * k..(j + 1) * k];
            *out = ar.iter().zip(br).map(|(x, y)| x * y).sum();
        }
    });
    c
}

/// Row-wise softmax of a [rows, cols] matrix.
pub fn softmax(x: &[f64], rows: usize, cols: usize) -> Vec<f64> {
    let mut y = vec![0.0; rows * cols];
    par_rows(&mut y, cols, |r, out| {
        let row = &x[r * cols..(r + 1) * cols];
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
        for (o, v) in out.iter_mut().zip(row) {
            *o = (v - m).exp() / s;
        }
    });
    y
}

/// Row-wise RMS normalization: x / sqrt(mean(x²) + eps).
pub fn rmsnorm(x: &[f64], rows: usize, cols: usize, eps: f64) -> Vec<f64> {
    let mut y = vec![0.0; rows * cols];
    par_rows(&mut y, cols, |r, out| {
        let row = &x[r * cols..(r + 1) * cols];
        let ms: f64 = row.iter().map(|v| v * v).sum::<f64>() / cols as f64;
        let inv = 1.0 / (ms + eps).sqrt();
        for (o, v) in out.iter_mut().zip(row) {
            *o = v * inv;
        }
    });
    y
}

/// Attention forward on [B, H, S, D] tensors: (O, LSE) with LSE[b,h,s] the natural-log
/// sum-exp of the scaled scores of row s.
pub fn attention(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    dims: (usize, usize, usize, usize),
    causal: bool,
    sm_scale: f64,
) -> (Vec<f64>, Vec<f64>) {
    let (b, h, s, _) = dims;
    let all: Vec<usize> = (0..b * h * s).collect();
    attention_rows(q, k, v, dims, causal, sm_scale, &all)
}

/// Attention for the given query rows only (row = (b·H + h)·S + s): their O rows, D values
/// each, and their LSE values.
pub fn attention_rows(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    dims: (usize, usize, usize, usize),
    causal: bool,
    sm_scale: f64,
    rows: &[usize],
) -> (Vec<f64>, Vec<f64>) {
    let (_, _, s, d) = dims;
    // Scaled scores of query row `row` against its visible keys.
    let scores = |row: usize| -> Vec<f64> {
        let base = (row / s) * s * d;
        let i = row % s;
        let qi = &q[base + i * d..base + (i + 1) * d];
        let last = if causal { i + 1 } else { s };
        (0..last)
            .map(|j| {
                let kj = &k[base + j * d..base + (j + 1) * d];
                qi.iter().zip(kj).map(|(x, y)| x * y).sum::<f64>() * sm_scale
            })
            .collect()
    };
    let mut o = vec![0.0; rows.len() * d];
    par_rows(&mut o, d, |idx, out| {
        let row = rows[idx];
        let base = (row / s) * s * d;
        let sc = scores(row);
        let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let p: Vec<f64> = sc.iter().map(|x| (x - m).exp()).collect();
        let sum: f64 = p.iter().sum();
        for (j, pj) in p.iter().enumerate() {
            let vj = &v[base + j * d..base + (j + 1) * d];
            for (o, vv) in out.iter_mut().zip(vj) {
                *o += pj * vv / sum;
            }
        }
    });
    let mut lse = vec![0.0; rows.len()];
    par_rows(&mut lse, 1, |idx, out| {
        let sc = scores(rows[idx]);
        let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        out[0] = m + sc.iter().map(|x| (x - m).exp()).sum::<f64>().ln();
    });
    (o, lse)
}

/// The fp8 GEMM of [`super::fp8_gemm`] by its definition, for the rows `rows` of C: `a_rows`
/// holds those rows of A ([rows, K]), `b` all of B ([N, K]), `sa` / `sb` the scales in the
/// kernel's shapes (one each per tensor; or `[ceil(K/128), M]` and `[ceil(N/128), ceil(K/128)]`
/// per block). Sums each 128-wide k block separately, then scales it.
#[allow(clippy::too_many_arguments)]
pub fn fp8_gemm(
    scaling: super::fp8_gemm::Fp8Scaling,
    a_rows: &[f64],
    b: &[f64],
    sa: &[f64],
    sb: &[f64],
    rows: &[usize],
    m: usize,
    n: usize,
    k: usize,
) -> Vec<f64> {
    let blk = super::fp8_gemm::SCALE_BLOCK as usize;
    let kb = k.div_ceil(blk);
    let mut out = vec![0.0; rows.len() * n];
    par_rows(&mut out, n, |ri, row| {
        let i = rows[ri];
        let a = &a_rows[ri * k..(ri + 1) * k];
        for (j, c) in row.iter_mut().enumerate() {
            let bj = &b[j * k..(j + 1) * k];
            let mut total = 0.0;
            for q in 0..kb {
                let (k0, k1) = (q * blk, ((q + 1) * blk).min(k));
                let part: f64 = (k0..k1).map(|x| a[x] * bj[x]).sum();
                total += match scaling {
                    super::fp8_gemm::Fp8Scaling::Tensor => part,
                    super::fp8_gemm::Fp8Scaling::Blocks => {
                        part * sa[q * m + i] * sb[(j / blk) * kb + q]
                    }
                };
            }
            *c = match scaling {
                super::fp8_gemm::Fp8Scaling::Tensor => total * sa[0] * sb[0],
                super::fp8_gemm::Fp8Scaling::Blocks => total,
            };
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemm_small() {
        // [[1,2],[3,4]] · [[5,6],[7,8]]
        let c = gemm(
            &[1.0, 2.0, 3.0, 4.0],
            &[5.0, 6.0, 7.0, 8.0],
            2,
            2,
            2,
            false,
            false,
        );
        assert_eq!(c, vec![19.0, 22.0, 43.0, 50.0]);
        let ct = gemm(
            &[1.0, 2.0, 3.0, 4.0],
            &[5.0, 7.0, 6.0, 8.0],
            2,
            2,
            2,
            false,
            true,
        );
        assert_eq!(ct, c);
    }

    #[test]
    fn softmax_rows_sum_to_one() {
        let y = softmax(&[1.0, 2.0, 3.0, 0.0, 0.0, 0.0], 2, 3);
        assert!((y[..3].iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert!((y[3] - 1.0 / 3.0).abs() < 1e-12);
    }
}
