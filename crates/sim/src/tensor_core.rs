//! The tensor-core collectives, as pure functions of the 32 lanes' data: `ldmatrix` (which lane
//! receives which element of which 8x8 matrix) and `mma.sync.m16n8k16` (which lane holds which
//! element of A, B, C and D). Layouts are PTX's, as `shared/design/layout-algebra.md` lists
//! them; g = lane >> 2, t = lane & 3.

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
}
