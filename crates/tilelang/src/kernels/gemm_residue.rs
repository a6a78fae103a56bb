//! NN GEMM whose A rows are not whole 16-byte units (an odd K, say), read in place: no copy
//! into padded rows before the launch.
//!
//! TMA reads only tensors whose row stride is a multiple of 16 bytes, and starts a box only
//! on a 16-byte boundary of a row, so the default Hopper GEMM has the runtime copy such an A
//! into padded rows first (`+pitched-tma`: 22.7 µs of 196 at 4096×4096×4095). But rows 8
//! apart are `16·K` bytes apart: A viewed as `[M/8, 8·K]` (the same bytes; row `q` of the
//! view holds A's rows `8q .. 8q + 8` one after another) is a tensor TMA reads. A block takes
//! 128 of A's rows of one residue `s` (rows `8q + s`), which sit in the view at column
//! `s·K`, and reads them from the first 16-byte boundary at or before it, `e_s`: row `s` from
//! its column `c_s = e_s − s·K` (between −8 and −1). So each residue steps through K with its
//! own shift, and B — `[K, N]`, MN-major in shared memory, one k a 128-byte row — follows it:
//! its stage holds k rows `[64t − 8, 64t + 64)` and the gemm reads the 64 of them from row
//! `c_s + 8` (a wgmma may start an MN-major operand at any row). Columns of A's tile outside
//! `[0, K)` belong to the neighbouring rows; the consumers zero them in the first and last
//! steps (B's rows there are zeros too, but an Inf there would make 0·Inf a NaN), and only
//! those steps pay a fence and a barrier for it (`fence_edge_writes` in the pipeline stage).
//! C leaves through its view `[M/8, 8, N]`. On an H200, 1.01–1.16× the copy-first GEMM where
//! the 128×256 tiles fill the GPU and K is 4095 or more, slower at few tiles or short K (one
//! k step more): [`residue_pays`] says where the gemm example takes it by default
//! (docs/performance.md, session 42).
//!
//! Inputs as the kernel declares them: `A` as `[M/8, 8·K]`, `B` as `[K, N]`, `C` as
//! `[M/8, 8, N]` — views of row-major `[M, K]` and `[M, N]` tensors (M a multiple of 8; N a
//! multiple of 8 for C's TMA stores), which `Tensor::reshape` makes without a copy.

use super::gemm::GemmConfig;
use crate::prelude::*;

/// Extra k rows of B a stage holds for the shift: a residue reads from up to 8 rows before
/// its k window's aligned start.
const SHIFT_ROWS: i64 = 8;

/// The Hopper tiles of [`gemm_nn_by_residue`]: [`GemmConfig::hopper`]'s, 128×256×64 in four
/// stages. B's stages are 72 rows, so the compiler sends C out through a quarter of the tile
/// (four 64-column chunks) rather than half: against three stages with the whole tile, 1.3–4%
/// faster on an H200 (4096×4096×4095 725 against 716 TFLOP/s, 2048×2048×4095 672 against
/// 645; gpu-notes run 40k).
pub fn residue_config() -> GemmConfig {
    GemmConfig::hopper()
}

/// The least K at which [`residue_pays`] takes the residue kernel: it runs one k step more
/// than the copy-first GEMM (`⌈(K + 8)/64⌉`), which short K does not pay back. Measured on an
/// H200 (gpu-notes run 40h) slower at K = 2047 (4096×8192: 680 TFLOP/s against the copy's 705)
/// and faster at 4095 and beyond; where between them it turns is not measured.
pub const RESIDUE_MIN_K: usize = 3072;

/// Whether [`gemm_nn_by_residue`] takes the problem at all: NN, 16-bit inputs (the 128-byte
/// swizzle rows its shift moves B by), M and N multiples of 8 (its views of A and C).
pub fn residue_takes(in_dtype: DType, layout: super::gemm::Layout, m: usize, n: usize) -> bool {
    layout == super::gemm::Layout::NN
        && in_dtype.bytes() == 2
        && m.is_multiple_of(8)
        && n.is_multiple_of(8)
}

/// Whether the NN GEMM of an `m × k` by `k × n` problem in `in_dtype` on `target` should read A
/// by row residue rather than copy it into padded rows first: Hopper, a problem it takes
/// ([`residue_takes`]), rows of A that are not whole 16-byte units (else there is no copy to
/// save), K ≥ [`RESIDUE_MIN_K`], and at least `multiprocessors` · 3/4 output tiles
/// of 128×256 (fewer, and the default refits to narrower tiles that this kernel does not
/// have). On an H200 (gpu-notes runs 40h, 40l, 40m) that takes every shape it ran faster at
/// (1.01–1.16×: 2048×2048×4095 with 128 tiles, 4096², 6144², 8192² with K one short of them,
/// 4096×4096×16383) and none it ran slower at (4096×8192×2047; 1024×1024×4095 and
/// 512×4096×8191 with 32 and 64 tiles).
pub fn residue_pays(
    target: &tl_target::Target,
    in_dtype: DType,
    layout: super::gemm::Layout,
    (m, n, k): (usize, usize, usize),
    multiprocessors: u32,
) -> bool {
    let row_units = 16 / in_dtype.bytes().max(1);
    let cfg = residue_config();
    GemmConfig::hopper_applies(target, in_dtype)
        && residue_takes(in_dtype, layout, m, n)
        && !k.is_multiple_of(row_units)
        && k >= RESIDUE_MIN_K
        && 4 * cfg.output_tiles(m, n) >= 3 * multiprocessors as usize
}

/// `C = A · B` (NN) with A read in place by row residue (see the module doc). `cfg.bk` must
/// be 64 (one 128-byte swizzle row of a 16-bit type): the shift moves B by whole rows.
pub fn gemm_nn_by_residue(in_dtype: DType, out_dtype: DType, cfg: GemmConfig) -> Kernel {
    Kernel::build("gemm_nn_residue", |k| {
        let (m8, n, kd) = (k.dim("M8"), k.dim("N"), k.dim("K"));
        let a = k.input("A", [m8.clone(), &kd * 8], in_dtype);
        let b = k.input("B", [&kd, &n], in_dtype);
        let c = k.output("C", [m8.clone(), Expr::int(8), n.clone()], out_dtype);
        let (bm, bn, bk) = (cfg.bm, cfg.bn, cfg.bk);
        // Block rows: the 8 residues of each `bm` rows of the view.
        k.launch(
            [ceildiv(&n, bn), ceildiv(&m8, bm) * 8],
            cfg.threads,
            |t, [bx, by]| {
                cfg.schedule_blocks(t);
                // Bound once a tile: written out, ptxas recomputed the shift's chain (a division
                // included) in every k step to spare registers beside the accumulator — 657
                // against 719 TFLOP/s at 4096×4096×4095 (gpu-notes run 40f, 40g).
                let s = t.let_("residue", by.floormod(8));
                let q0 = by.floordiv(8) * bm;
                // Row s's first 16-byte boundary at or before its column 0, and the shift.
                let elems_per_16 = 16 / in_dtype.bytes() as i64;
                // (Written out where the TMA copy reads it, so that the compiler sees it is a
                // whole number of 16-byte units.)
                let e_s = (&s * &kd + (elems_per_16 - 1)).floordiv(elems_per_16) * elems_per_16
                    - SHIFT_ROWS;
                let c_s = t.let_("shift", &e_s - &s * &kd);
                let a_s = t.alloc_shared_named("A_s", [bm, bk], in_dtype);
                let b_s = t.alloc_shared_named("B_s", [bk + SHIFT_ROWS, bn], in_dtype);
                let acc = t.alloc_fragment_named("acc", [bm, bn], F32);
                t.clear(&acc);
                let steps = ceildiv(&kd + SHIFT_ROWS, bk);
                t.pipelined(steps, cfg.stages, |t, step| {
                    let col0 = &c_s + &step * bk;
                    t.copy(a.tile([q0.clone(), &e_s + &step * bk]), &a_s);
                    t.copy(b.tile([&step * bk - SHIFT_ROWS, &bx * bn]), &b_s);
                    // The neighbouring rows' columns, where the window leaves [0, K).
                    let edge = col0.lt(0).or((&col0 + bk).gt(&kd));
                    t.if_(edge, |t| {
                        t.parallel([bm, bk], |t, [i, j]| {
                            let col = &col0 + &j;
                            t.if_(col.lt(0).or(col.ge(&kd)), |t| {
                                t.store(&a_s, [i.clone(), j.clone()], Expr::float(0.0));
                            });
                        });
                    });
                    let b_rows = b_s.region([&c_s + SHIFT_ROWS, Expr::int(0)], [bk, bn]);
                    t.gemm(&a_s, b_rows, &acc);
                });
                t.copy(&acc, c.region([q0, s, &bx * bn], [bm, 1, bn]));
            },
        );
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::gemm::Layout;

    /// The rule takes every shape the residue kernel ran faster at on an H200 (132 SMs) and
    /// none it ran slower at (gpu-notes run 40h), and nothing it cannot run.
    #[test]
    fn residue_pays_where_it_measured_faster() {
        let h200 = tl_target::Target::SM90;
        let pays = |m, n, k| residue_pays(&h200, BF16, Layout::NN, (m, n, k), 132);
        for (m, n, k) in [
            (2048, 2048, 4095),
            (4096, 4096, 4095),
            (6144, 6144, 6143),
            (8192, 8192, 8191),
            (4096, 4096, 16383),
        ] {
            assert!(pays(m, n, k), "{m}x{n}x{k} ran faster by residue");
        }
        for (m, n, k) in [(4096, 8192, 2047), (1024, 1024, 4095), (512, 4096, 8191)] {
            assert!(!pays(m, n, k), "{m}x{n}x{k} ran slower by residue");
        }
        // Aligned rows (no copy to save), views it cannot take, layouts and targets it is not.
        assert!(!pays(4096, 4096, 4096));
        assert!(!pays(4095, 4096, 4095));
        assert!(!pays(4096, 4095, 4095));
        assert!(!residue_pays(
            &h200,
            BF16,
            Layout::NT,
            (4096, 4096, 4095),
            132
        ));
        assert!(!residue_pays(
            &h200,
            F32,
            Layout::NN,
            (4096, 4096, 4095),
            132
        ));
        let a100 = tl_target::Target::SM80;
        assert!(!residue_pays(
            &a100,
            BF16,
            Layout::NN,
            (4096, 4096, 4095),
            108
        ));
    }
}
