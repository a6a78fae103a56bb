//! NN GEMM whose B rows are not whole 16-byte units (an odd N, say), read in place by row
//! residue and realigned in shared memory: no copy into padded rows before the launch.
//!
//! TMA reads only tensors whose row stride is a multiple of 16 bytes, so the default Hopper
//! GEMM has the runtime copy such a B (`[K, N]`, N odd) into padded rows before every launch
//! (`+pitched-tma`). Where the GEMM is bound by reading B — few rows of A, a decode step's
//! GEMM — that copy triples B's traffic: 64×50257×4096 NN ran 0.33 ms against 0.12 for the
//! same problem in NT, whose B needs no copy (gpu-notes run 41e). But B's rows 8 apart are
//! `16·N` bytes apart: B viewed as `[K/8, 8·N]` (the same bytes) is a tensor TMA reads. Row
//! `k = 8q + r` of B sits in row `q` of the view from column `r·N`; a k step loads each
//! residue's 8 rows of the tile from the 16-byte boundary at or before that column, so the
//! tile's rows land shifted by `d_r = (r·N + n0) mod 8` elements (`n0` the tile's first
//! column). The consumers move them into the wgmma's B tile at their place, eight elements at
//! a time (`Intrinsic::ShiftedVecCopy`: 32-bit loads from the word holding the first, funnel
//! shifts, one 16-byte store) — work a B-bound GEMM has the time for, and one no wgmma
//! descriptor can do (it starts a row only on 16 bytes). Columns past the tile's end hold the
//! next row's elements (or the map's zeros); they feed only C's columns past N, which are
//! never written. On an H200, 64×50257×4096 NN now runs 0.176 ms (NT: 0.122); moved element
//! by element it ran 0.484 ([`realign_pays`] says where the gemm example takes it).
//!
//! Inputs as the kernel declares them: `A` as `[M, K]`, `B` as `[K/8, 8·N]` (the bytes of a
//! row-major `[K, N]`; K a multiple of 8: `b.reshape(&[k / 8, 8 * n])`, no copy), `C` as
//! `[M, N]`.

use super::gemm::{GemmConfig, Layout};
use crate::dsl::element_address;
use crate::prelude::*;
use tl_ir::Intrinsic;

/// B's residues: rows 8 apart are a whole number of 16-byte units apart whatever N is.
const RESIDUES: i64 = 8;

/// The tiles of [`gemm_nn_realigning_b`] for an `m`-row problem: 64 rows on one consumer
/// warpgroup where M ≤ 64, else [`GemmConfig::hopper`]'s 128 on two; 128 columns (each
/// residue's box is the tile's columns and the 8 before them: at most 256, TMA's longest box
/// row); 64-deep k steps (8 rows of each residue).
pub fn realign_config(m: usize) -> GemmConfig {
    let h = GemmConfig::hopper();
    let (bm, threads) = if m <= 64 { (64, 128) } else { (128, 256) };
    GemmConfig {
        bm,
        bn: 128,
        threads,
        ..h
    }
    .with_stages_filling(2)
}

/// Whether [`gemm_nn_realigning_b`] takes the problem: NN, 16-bit inputs (the realignment
/// moves 2-byte elements), K a multiple of 8 (B's view).
pub fn realign_takes(in_dtype: DType, layout: Layout, k: usize) -> bool {
    layout == Layout::NN && in_dtype.bytes() == 2 && k.is_multiple_of(RESIDUES as usize)
}

/// The most rows of A at which [`realign_pays`] takes the realigning kernel: past them the
/// GEMM is no longer bound by reading B, and the copy's faster tiles win (H200, gpu-notes run
/// 41h: 256×50257×4096 0.49 ms against the copy's 0.39).
pub const REALIGN_MAX_M: usize = 128;

/// Whether the NN GEMM of an `m × k` by `k × n` problem in `in_dtype` on `target` should read B
/// by row residue and realign it ([`gemm_nn_realigning_b`]) rather than copy it into padded
/// rows first: Hopper, a problem it takes ([`realign_takes`]), rows of B that are not whole
/// 16-byte units (else there is no copy to save), M ≤ [`REALIGN_MAX_M`] (a GEMM bound by
/// reading B), and at least one 128-column output tile per SM. On an H200 (gpu-notes run 41h,
/// ms, against the copy) 16×50257×4096 0.174 / 0.331, 64×50257×4096 0.176 / 0.331,
/// 128×32001×4096 0.167 / 0.222: it takes those, and not 256×50257×4096 (0.489 / 0.385) or
/// 64×4095×4096 (32 tiles: 0.063 / 0.037).
pub fn realign_pays(
    target: &tl_target::Target,
    in_dtype: DType,
    layout: Layout,
    (m, n, k): (usize, usize, usize),
    multiprocessors: u32,
) -> bool {
    let row_units = 16 / in_dtype.bytes().max(1);
    GemmConfig::hopper_applies(target, in_dtype)
        && realign_takes(in_dtype, layout, k)
        && !n.is_multiple_of(row_units)
        && m <= REALIGN_MAX_M
        && realign_config(m).output_tiles(m, n) >= multiprocessors as usize
}

/// `C = A · B` (NN) with B read in place by row residue and realigned in shared memory (see
/// the module doc). `cfg.bk` must be a multiple of 8.
pub fn gemm_nn_realigning_b(in_dtype: DType, out_dtype: DType, cfg: GemmConfig) -> Kernel {
    Kernel::build("gemm_nn_realign_b", |k| {
        let (m, n, k8) = (k.dim("M"), k.dim("N"), k.dim("K8"));
        let a = k.input("A", [m.clone(), &k8 * RESIDUES], in_dtype);
        let b = k.input("B", [k8.clone(), &n * RESIDUES], in_dtype);
        let c = k.output("C", [m.clone(), n.clone()], out_dtype);
        let (bm, bn, bk) = (cfg.bm, cfg.bn, cfg.bk);
        let rows = bk / RESIDUES;
        // A residue's box: the tile's columns and the up to 7 before them, in whole 16-byte
        // units.
        let per_16 = 16 / in_dtype.bytes() as i64;
        let land_cols = bn + per_16;
        k.launch(
            [ceildiv(&n, bn), ceildiv(&m, bm)],
            cfg.threads,
            |t, [bx, by]| {
                cfg.schedule_blocks(t);
                let n0 = &bx * bn;
                let a_s = t.alloc_shared_named("A_s", [bm, bk], in_dtype);
                // One landing tile a residue (the pipeline stages each copy's own buffer).
                let land: Vec<_> = (0..RESIDUES)
                    .map(|r| {
                        t.alloc_shared_named(&format!("B_land{r}"), [rows, land_cols], in_dtype)
                    })
                    .collect();
                let b_s = t.alloc_shared_named("B_s", [bk, bn], in_dtype);
                let acc = t.alloc_fragment_named("acc", [bm, bn], F32);
                t.clear(&acc);
                t.pipelined(ceildiv(&k8 * RESIDUES, bk), cfg.stages, |t, step| {
                    t.copy(a.tile([&by * bm, &step * bk]), &a_s);
                    for (r, land_r) in (0..RESIDUES).zip(&land) {
                        // Residue r's rows of this k step, from the 16-byte boundary at or before
                        // their column n0 (written out so the compiler sees whole units).
                        let col = (&n * r + &n0).floordiv(per_16) * per_16;
                        t.copy(b.tile([&step * rows, col]), land_r);
                    }
                    // Row i of residue r is the k step's row 8i + r, shifted by its d_r: eight
                    // elements at a time from wherever they landed (`ShiftedVecCopy`).
                    for (r, land_r) in (0..RESIDUES).zip(&land) {
                        let shift = t.let_(&format!("shift{r}"), (&n * r + &n0).floormod(per_16));
                        t.parallel([rows, bn / per_16], |t, [i, c]| {
                            let dst = element_address(&b_s, [&i * RESIDUES + r, &c * per_16]);
                            let src = element_address(land_r, [i.clone(), &c * per_16 + &shift]);
                            t.evaluate(Expr::call(Intrinsic::ShiftedVecCopy, vec![dst, src], Bool));
                        });
                    }
                    t.gemm(&a_s, &b_s, &acc);
                });
                t.copy(&acc, c.tile([&by * bm, n0.clone()]));
            },
        );
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule takes the shapes the realigning kernel ran faster at on an H200 (132 SMs) and
    /// none it ran slower at (gpu-notes run 41h), and nothing it cannot run.
    #[test]
    fn realign_pays_where_it_measured_faster() {
        let h200 = tl_target::Target::SM90;
        let pays = |m, n, k| realign_pays(&h200, BF16, Layout::NN, (m, n, k), 132);
        for (m, n, k) in [(16, 50257, 4096), (64, 50257, 4096), (128, 32001, 4096)] {
            assert!(pays(m, n, k), "{m}x{n}x{k} ran faster realigned");
        }
        for (m, n, k) in [(256, 50257, 4096), (1024, 50257, 4096), (64, 4095, 4096)] {
            assert!(!pays(m, n, k), "{m}x{n}x{k} ran slower realigned");
        }
        // Aligned rows (no copy to save), K it cannot view, other layouts, types, targets.
        assert!(!pays(64, 50256, 4096));
        assert!(!pays(64, 50257, 4095));
        assert!(!realign_pays(
            &h200,
            BF16,
            Layout::NT,
            (64, 50257, 4096),
            132
        ));
        assert!(!realign_pays(
            &h200,
            F32,
            Layout::NN,
            (64, 50257, 4096),
            132
        ));
        let a100 = tl_target::Target::SM80;
        assert!(!realign_pays(
            &a100,
            BF16,
            Layout::NN,
            (64, 50257, 4096),
            108
        ));
    }

    /// 64-row tiles on one warpgroup for decode-sized M, 128 columns (each residue's box is
    /// 136 columns, under TMA's 256), stages filling the shared memory.
    #[test]
    fn realign_tiles() {
        let c = realign_config(64);
        assert_eq!((c.bm, c.bn, c.bk, c.threads), (64, 128, 64, 128));
        let c = realign_config(128);
        assert_eq!((c.bm, c.bn, c.bk, c.threads), (128, 128, 64, 256));
        assert!(c.stages >= 4, "{c:?}");
    }
}
