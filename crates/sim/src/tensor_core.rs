//! The tensor-core collectives, as pure functions of the 32 lanes' data: `ldmatrix` (which lane
//! receives which element of which 8x8 matrix) and `mma.sync.m16n8k16` (which lane holds which
//! element of A, B, C and D). Layouts are PTX's, as `shared/design/layout-algebra.md` lists
//! them; g = lane >> 2, t = lane & 3.
//!
//! And AMD's matrix cores, as functions of a 64-lane wave's data: `v_mfma_f32_{m}x{n}x{k}`
//! (16x16x16, 16x16x32, 32x32x8, 32x32x16), with the lane layouts of `tl_ir::Intrinsic::Mfma`.

/// Row and column of A (16x16) in element `i` (0..8) of `lane`'s A fragment.
pub fn a_coord(lane: usize, i: usize) -> (usize, usize) {
    let (g, t) = (lane >> 2, lane & 3);
    (g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >> 2))
}

/// (k, n) of B (16x8) in element `i` (0..4) of `lane`'s B fragment.
pub fn b_coord(lane: usize, i: usize) -> (usize, usize) {
    let (g, t) = (lane >> 2, lane & 3);
    (2 * t + (i & 1) + 8 * (i >> 1), g)
}

/// Row and column of C/D (16x8) in element `i` (0..4) of `lane`'s accumulator fragment.
pub fn c_coord(lane: usize, i: usize) -> (usize, usize) {
    let (g, t) = (lane >> 2, lane & 3);
    (g + 8 * (i >> 1), 2 * t + (i & 1))
}

/// `mma.sync.aligned.m16n8k16.row.col.f32.{ab}.{ab}.f32`: every lane's D fragment from every
/// lane's A (8 values), B (4) and C (4) fragments. Products of 16-bit floats are exact in f64
/// and so is their sum over k, which is rounded to f32 once (the tensor core's wide
/// accumulation, up to its unspecified internal rounding).
pub fn mma_m16n8k16(a: &[[f32; 8]; 32], b: &[[f32; 4]; 32], c: &[[f32; 4]; 32]) -> [[f32; 4]; 32] {
    let mut am = [[0f64; 16]; 16];
    let mut bm = [[0f64; 8]; 16];
    let mut cm = [[0f64; 8]; 16];
    for (lane, ((al, bl), cl)) in a.iter().zip(b).zip(c).enumerate() {
        for (i, &x) in al.iter().enumerate() {
            let (r, k) = a_coord(lane, i);
            am[r][k] = x as f64;
        }
        for (i, (&xb, &xc)) in bl.iter().zip(cl).enumerate() {
            let (k, n) = b_coord(lane, i);
            bm[k][n] = xb as f64;
            let (r, n2) = c_coord(lane, i);
            cm[r][n2] = xc as f64;
        }
    }
    let mut d = [[0f32; 4]; 32];
    for (lane, dl) in d.iter_mut().enumerate() {
        for (i, x) in dl.iter_mut().enumerate() {
            let (r, n) = c_coord(lane, i);
            let mut s = cm[r][n];
            for (k, brow) in bm.iter().enumerate() {
                s += am[r][k] * brow[n];
            }
            *x = s as f32;
        }
    }
    d
}

/// `ldmatrix.sync.aligned.m8n8.x{num}[.trans].shared.b16`. `rows[8j + r]` is row `r` of matrix
/// `j` (the 16 bytes lane `8j + r` addressed); lane `l` receives, in elements `2j, 2j + 1`,
/// row `l / 4`, columns `2(l % 4)` and `2(l % 4) + 1` of matrix `j` (of its transpose with
/// `trans`).
pub fn ldmatrix(num: usize, trans: bool, rows: &[[u16; 8]; 32]) -> [[u16; 8]; 32] {
    let mut out = [[0u16; 8]; 32];
    for (l, o) in out.iter_mut().enumerate() {
        let (r, c) = (l / 4, 2 * (l % 4));
        for j in 0..num.min(4) {
            let m = &rows[8 * j..8 * j + 8];
            let (x, y) = if trans {
                (m[c][r], m[c + 1][r])
            } else {
                (m[r][c], m[r][c + 1])
            };
            o[2 * j] = x;
            o[2 * j + 1] = y;
        }
    }
    out
}

/// Lanes of an AMD wave.
pub const WAVE: usize = 64;

/// `(i, k)` of A (`m × k`) in element `v` of `lane`'s A registers of a
/// `v_mfma_f32_{m}x{n}x{k}` (`m` 16 or 32): `i = lane % m`, `k = (k·m/64)·(lane / m) + v`, `v`
/// in `0 .. k·m/64`.
pub fn mfma_a_coord(m: usize, k: usize, lane: usize, v: usize) -> (usize, usize) {
    let m = m.max(1);
    (lane % m, k * m / WAVE * (lane / m) + v)
}

/// `(k, j)` of B (`k × n`) in element `v` of `lane`'s B registers: `j = lane % n`, `k` as for A.
pub fn mfma_b_coord(n: usize, k: usize, lane: usize, v: usize) -> (usize, usize) {
    let n = n.max(1);
    (k * n / WAVE * (lane / n) + v, lane % n)
}

/// `(i, j)` of C/D (`m × n`) in accumulator `v` (`0 .. m·n/64`) of `lane`: `j = lane % n`;
/// 16x16: `i = 4·(lane / 16) + v`; 32x32: `i = 8·(v / 4) + 4·(lane / 32) + v % 4`.
pub fn mfma_d_coord(n: usize, lane: usize, v: usize) -> (usize, usize) {
    let n = n.max(1);
    let groups = WAVE / n;
    (4 * groups * (v / 4) + 4 * (lane / n) + v % 4, lane % n)
}

/// `v_mfma_f32_{m}x{n}x{k}_{bf16|f16}` over a wave: every lane's D registers (`m·n/64` used)
/// from every lane's A (`m·k/64`), B (`n·k/64`) and C (as D). The shape must be one of
/// 16x16x16, 16x16x32, 32x32x8, 32x32x16 (others give zeros). As for
/// [`mma_m16n8k16`], products of 16-bit floats are exact in f64, the sum over k (started from
/// C) is taken in f64 and rounded to f32 once.
pub fn mfma(
    m: usize,
    n: usize,
    k: usize,
    a: &[[f32; 8]; WAVE],
    b: &[[f32; 8]; WAVE],
    c: &[[f32; 16]; WAVE],
) -> [[f32; 16]; WAVE] {
    let mut d = [[0f32; 16]; WAVE];
    if !matches!((m, n, k), (16, 16, 16 | 32) | (32, 32, 8 | 16)) {
        return d;
    }
    let (na, nb, nc) = (m * k / WAVE, n * k / WAVE, m * n / WAVE);
    let mut am = [[0f64; 32]; 32];
    let mut bm = [[0f64; 32]; 32];
    let mut cm = [[0f64; 32]; 32];
    for (lane, ((al, bl), cl)) in a.iter().zip(b).zip(c).enumerate() {
        for (v, &x) in al.iter().enumerate().take(na) {
            let (i, kk) = mfma_a_coord(m, k, lane, v);
            am[i][kk] = x as f64;
        }
        for (v, &x) in bl.iter().enumerate().take(nb) {
            let (kk, j) = mfma_b_coord(n, k, lane, v);
            bm[kk][j] = x as f64;
        }
        for (v, &x) in cl.iter().enumerate().take(nc) {
            let (i, j) = mfma_d_coord(n, lane, v);
            cm[i][j] = x as f64;
        }
    }
    for (lane, dl) in d.iter_mut().enumerate() {
        for (v, x) in dl.iter_mut().enumerate().take(nc) {
            let (i, j) = mfma_d_coord(n, lane, v);
            let mut s = cm[i][j];
            for (kk, brow) in bm.iter().enumerate().take(k) {
                s += am[i][kk] * brow[j];
            }
            *x = s as f32;
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragment_layouts_cover_each_element_once() {
        let mut a = [[0; 16]; 16];
        let mut b = [[0; 8]; 16];
        let mut c = [[0; 8]; 16];
        for lane in 0..32 {
            for i in 0..8 {
                let (r, k) = a_coord(lane, i);
                a[r][k] += 1;
            }
            for i in 0..4 {
                let (k, n) = b_coord(lane, i);
                b[k][n] += 1;
                let (r, n) = c_coord(lane, i);
                c[r][n] += 1;
            }
        }
        assert!(a.iter().flatten().all(|&x| x == 1));
        assert!(b.iter().flatten().all(|&x| x == 1));
        assert!(c.iter().flatten().all(|&x| x == 1));
    }

    #[test]
    fn mma_matches_a_plain_matmul() {
        let av = |r: usize, k: usize| ((r * 3 + k * 5) % 7) as f32 - 3.0;
        let bv = |k: usize, n: usize| ((k * 2 + n * 3) % 5) as f32 * 0.5;
        let cv = |r: usize, n: usize| (r * 8 + n) as f32;
        let (mut a, mut b, mut c) = ([[0f32; 8]; 32], [[0f32; 4]; 32], [[0f32; 4]; 32]);
        for (lane, ((al, bl), cl)) in a.iter_mut().zip(&mut b).zip(&mut c).enumerate() {
            for (i, x) in al.iter_mut().enumerate() {
                let (r, k) = a_coord(lane, i);
                *x = av(r, k);
            }
            for (i, (xb, xc)) in bl.iter_mut().zip(cl.iter_mut()).enumerate() {
                let (k, n) = b_coord(lane, i);
                *xb = bv(k, n);
                let (r, n) = c_coord(lane, i);
                *xc = cv(r, n);
            }
        }
        let d = mma_m16n8k16(&a, &b, &c);
        for (lane, dl) in d.iter().enumerate() {
            for (i, &x) in dl.iter().enumerate() {
                let (r, n) = c_coord(lane, i);
                let want: f32 = (0..16).map(|k| av(r, k) * bv(k, n)).sum::<f32>() + cv(r, n);
                assert_eq!(x, want);
            }
        }
    }

    #[test]
    fn ldmatrix_x4_and_trans() {
        // Element (matrix j, row r, col c) = j*64 + r*8 + c.
        let mut rows = [[0u16; 8]; 32];
        for (l, row) in rows.iter_mut().enumerate() {
            for (c, x) in row.iter_mut().enumerate() {
                *x = ((l / 8) * 64 + (l % 8) * 8 + c) as u16;
            }
        }
        let out = ldmatrix(4, false, &rows);
        let t = ldmatrix(4, true, &rows);
        for l in 0..32 {
            for j in 0..4 {
                let (r, c) = (l / 4, 2 * (l % 4));
                assert_eq!(out[l][2 * j], (j * 64 + r * 8 + c) as u16);
                assert_eq!(out[l][2 * j + 1], (j * 64 + r * 8 + c + 1) as u16);
                assert_eq!(t[l][2 * j], (j * 64 + c * 8 + r) as u16);
                assert_eq!(t[l][2 * j + 1], (j * 64 + (c + 1) * 8 + r) as u16);
            }
        }
        // x1 fills only the first register.
        let one = ldmatrix(1, false, &rows);
        assert!(one.iter().all(|o| o[2..].iter().all(|&x| x == 0)));
    }

    const MFMA_SHAPES: [(usize, usize, usize); 4] =
        [(16, 16, 16), (16, 16, 32), (32, 32, 8), (32, 32, 16)];

    #[test]
    fn mfma_layouts_cover_each_element_once() {
        for (m, n, k) in MFMA_SHAPES {
            let mut a = vec![vec![0; k]; m];
            let mut b = vec![vec![0; n]; k];
            let mut d = vec![vec![0; n]; m];
            for lane in 0..WAVE {
                for v in 0..m * k / WAVE {
                    let (i, kk) = mfma_a_coord(m, k, lane, v);
                    a[i][kk] += 1;
                }
                for v in 0..n * k / WAVE {
                    let (kk, j) = mfma_b_coord(n, k, lane, v);
                    b[kk][j] += 1;
                }
                for v in 0..m * n / WAVE {
                    let (i, j) = mfma_d_coord(n, lane, v);
                    d[i][j] += 1;
                }
            }
            for x in [a, b, d] {
                assert!(x.iter().flatten().all(|&c| c == 1), "{m}x{n}x{k}");
            }
        }
        // The documented formulas, spelled out.
        assert_eq!(mfma_a_coord(16, 32, 37, 5), (5, 8 * 2 + 5));
        assert_eq!(mfma_b_coord(16, 16, 63, 3), (4 * 3 + 3, 15));
        assert_eq!(mfma_d_coord(16, 37, 2), (4 * 2 + 2, 5));
        assert_eq!(mfma_a_coord(32, 16, 40, 7), (8, 8 + 7));
        assert_eq!(mfma_d_coord(32, 40, 13), (8 * 3 + 4 + 1, 8));
    }

    #[test]
    fn mfma_matches_a_plain_matmul() {
        for (m, n, k) in MFMA_SHAPES {
            let av = |i: usize, kk: usize| ((i * 3 + kk * 5) % 7) as f32 - 3.0;
            let bv = |kk: usize, j: usize| ((kk * 2 + j * 3) % 5) as f32 * 0.5;
            let cv = |i: usize, j: usize| (i * 32 + j) as f32 * 0.25;
            let (mut a, mut b, mut c) = ([[0f32; 8]; WAVE], [[0f32; 8]; WAVE], [[0f32; 16]; WAVE]);
            for (lane, ((al, bl), cl)) in a.iter_mut().zip(&mut b).zip(&mut c).enumerate() {
                for (v, (xa, xb)) in al.iter_mut().zip(bl.iter_mut()).enumerate() {
                    if v < m * k / WAVE {
                        let (i, kk) = mfma_a_coord(m, k, lane, v);
                        *xa = av(i, kk);
                        let (kk, j) = mfma_b_coord(n, k, lane, v);
                        *xb = bv(kk, j);
                    }
                }
                for (v, xc) in cl.iter_mut().enumerate().take(m * n / WAVE) {
                    let (i, j) = mfma_d_coord(n, lane, v);
                    *xc = cv(i, j);
                }
            }
            let d = mfma(m, n, k, &a, &b, &c);
            for (lane, dl) in d.iter().enumerate() {
                for (v, &x) in dl.iter().enumerate().take(m * n / WAVE) {
                    let (i, j) = mfma_d_coord(n, lane, v);
                    let want: f32 = (0..k).map(|kk| av(i, kk) * bv(kk, j)).sum::<f32>() + cv(i, j);
                    assert_eq!(x, want, "{m}x{n}x{k} lane {lane} v {v}");
                }
                assert!(dl[m * n / WAVE..].iter().all(|&x| x == 0.0));
            }
        }
    }
}
