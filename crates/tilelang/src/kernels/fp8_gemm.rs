//! FP8 GEMM: C[M,N] = (A[M,K] · B[N,K]ᵀ) scaled, e4m3/e5m2 inputs, f32 accumulation, bf16 (or
//! any) output. Both operands are K-major, as fp8 tensor cores read them and as fp8 weights are
//! stored. Two scalings:
//!
//! - per tensor: one f32 scale for A and one for B, applied once in the epilogue;
//! - per block (DeepSeek-V3's recipe): A scaled per row and 128 columns of K (`SA`, stored
//!   K-block-major as `[ceil(K/128), M]` so a block's scales for a tile's rows are contiguous),
//!   B per 128×128 block (`SB`, `[ceil(N/128), ceil(K/128)]`).
//!
//! Hopper's fp8 `wgmma` keeps fewer mantissa bits in its running sum than f32, so long K loses
//! accuracy; *promotion* (the two-level accumulation of DeepSeek-V3 and CUTLASS) lets each
//! k tile's product land in a cleared accumulator and adds it, scaled, into an f32 one. Block
//! scaling needs it anyway (the scale changes every 128 of K); per-tensor scaling may skip it
//! for speed (cuBLASLt's "fast accumulation"), which also frees the registers for 128×256 tiles.

use super::gemm::{launch_output_tiles, GemmConfig, Layout};
use crate::prelude::*;

/// How the fp8 inputs are scaled back to real values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fp8Scaling {
    /// `C = sa · sb · A·Bᵀ` with `SA`, `SB` one f32 each (shape [1]).
    Tensor,
    /// `C[i,j] = Σ_kb SA[kb, i] · SB[j/128, kb] · Σ_{k in block kb} A[i,k]·B[j,k]`.
    Blocks,
}

/// The scale block along K (and along N for B) of [`Fp8Scaling::Blocks`].
pub const SCALE_BLOCK: i64 = 128;

/// What an fp8 GEMM computes: operand and output types, scaling, and whether to promote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fp8Gemm {
    pub a: DType,
    pub b: DType,
    pub out: DType,
    pub scaling: Fp8Scaling,
    /// Two-level accumulation (always on for block scaling).
    pub promote: bool,
    /// Promoted per-tensor scaling only: try to hide each promotion under the next wgmma.
    /// Every pipeline stage holds two k tiles, multiplied into two partial accumulators in
    /// turn; each gemm leaves its wgmma running (`wg_wait(1)`) while the other partial,
    /// retired by that wait, is added into the f32 accumulator. Three accumulators of
    /// registers, and at least 3 stages. Off by default: correct, but ptxas serializes the
    /// wgmmas (C7514, a partial read while the other's wgmma runs), and it measured slower
    /// on an H100 (978.9 against 1181.8 TFLOP/s at 8192³; docs/performance.md).
    pub overlap_promotion: bool,
}

impl Fp8Gemm {
    /// e4m3 × e4m3 → bf16 with the given scaling, promoted.
    pub fn e4m3(scaling: Fp8Scaling) -> Fp8Gemm {
        Fp8Gemm {
            a: F8E4M3,
            b: F8E4M3,
            out: BF16,
            scaling,
            promote: true,
            overlap_promotion: false,
        }
    }

    /// Whether each k tile's product is added, scaled, into a separate f32 accumulator.
    pub fn promotes(&self) -> bool {
        self.promote || self.scaling == Fp8Scaling::Blocks
    }

    /// The shapes of `SA` and `SB` for an `m × n × k` problem.
    pub fn scale_shapes(&self, m: usize, n: usize, k: usize) -> ([usize; 2], [usize; 2]) {
        let b = SCALE_BLOCK as usize;
        match self.scaling {
            Fp8Scaling::Tensor => ([1, 1], [1, 1]),
            Fp8Scaling::Blocks => ([k.div_ceil(b), m], [n.div_ceil(b), k.div_ceil(b)]),
        }
    }

    /// The shapes of the kernel's tensors, in parameter order (A, B, SA, SB, C), for an
    /// `m × n × k` problem.
    pub fn tensor_shapes(&self, m: usize, n: usize, k: usize) -> Vec<Vec<usize>> {
        let (sa, sb) = self.scale_shapes(m, n, k);
        vec![vec![m, k], vec![n, k], sa.to_vec(), sb.to_vec(), vec![m, n]]
    }

    /// Why `cfg`'s tiles cannot run this GEMM, if they cannot.
    pub fn check_tiles(&self, cfg: &GemmConfig) -> Result<(), String> {
        if self.scaling == Fp8Scaling::Blocks && (cfg.bk <= 0 || SCALE_BLOCK % cfg.bk != 0) {
            return Err(format!(
                "block scaling needs k tiles that divide the {SCALE_BLOCK}-wide scale blocks (bk = {})",
                cfg.bk
            ));
        }
        if self.overlap_promotion && (self.scaling != Fp8Scaling::Tensor || !self.promote) {
            return Err(
                "the overlapped promotion is for promoted per-tensor scaling (block scales change with every k tile)"
                    .into(),
            );
        }
        if self.overlap_promotion && cfg.stages < 3 {
            return Err(format!(
                "the overlapped promotion keeps a wgmma running into the next k stage: it needs at least 3 stages (got {})",
                cfg.stages
            ));
        }
        if self.overlap_promotion && cfg.split_k > 1 {
            return Err(
                "the overlapped promotion does not split K: drop the split or the overlap".into(),
            );
        }
        if self.promotes() && cfg.overlap {
            return Err(
                "promotion reads each k tile's product as soon as it is done: it cannot overlap the next k tile's wgmma (drop overlap)"
                    .into(),
            );
        }
        Ok(())
    }

    /// `cfg` (this GEMM's Hopper tiles) refitted for an `m × n × k` problem on a GPU of
    /// `multiprocessors` SMs, where its output tiles would leave more than half the SMs idle:
    /// - block scaling splits K ([`GemmConfig::split_to_fill`]): 1.1–1.7× at 256×4096×7168,
    ///   1024×1024×16384, 512×2048×7168, 128×2112×7168 on an H200 (gpu-notes run 33f);
    /// - promoted per-tensor scaling takes 64-row tiles on one consumer warpgroup, twice the
    ///   blocks: +10–18% at 64×4096×4096, 1024×1024×16384, 128×8192×8192, 128×7168×2048,
    ///   256×4096×7168, 512×2048×7168 (gpu-notes run 34c); and where M ≤ 128 (decode-sized
    ///   activations) 64 columns wide as well, if those tiles still run at once (one block an
    ///   SM, two for the short-K tiles): +4–12% more at 64×4096×4096, 128×7168×2048,
    ///   128×2112×7168, 64×8192×8192, 128×4096×4096 (runs 34e, 34g), where at 128×8192×8192
    ///   and 96×8192×8192, in two waves, they were 20–26% slower. Splitting K was slower at
    ///   every size but one (1–30%): these tiles already fetch their operands at the rate a
    ///   doubled grid shares (ncu: 128 split blocks took 53 µs where 64 unsplit took 56), and
    ///   clusters sharing B by multicast were 5–9% slower (34e). These tiles then take as many
    ///   stages as fit ([`GemmConfig::with_stages_filling`]): 6 of 64×64×256 (two blocks an SM
    ///   of 64×64×128 short-K ones, 6 each), 4 of 64×128×256, where they had 3. On an H200
    ///   (gpu-notes run 35d, TFLOP/s): 64×4096×4096 155.0 → 173.2, 128×7168×2048 267.5 →
    ///   307.8, 128×2112×7168 226.0 → 264.4, 1024×1024×16384 872.3 → 970.4, 128×8192×8192
    ///   548.1 → 577.9, 512×2048×7168 722.2 → 768.8.
    ///
    /// Anything else, and a config that already splits, is left alone.
    pub fn fit_to_gpu(
        &self,
        cfg: GemmConfig,
        m: usize,
        n: usize,
        k: usize,
        multiprocessors: u32,
    ) -> GemmConfig {
        match self.scaling {
            Fp8Scaling::Blocks => cfg.split_to_fill(m, n, k, multiprocessors),
            Fp8Scaling::Tensor
                if self.promote
                    && !self.overlap_promotion
                    && cfg.split_k <= 1
                    && cfg.bm == 128
                    && cfg.threads == 256
                    && 2 * cfg.output_tiles(m, n) <= multiprocessors as usize =>
            {
                let rows64 = GemmConfig {
                    bm: 64,
                    threads: 128,
                    ..cfg
                };
                let square = GemmConfig { bn: 64, ..rows64 };
                let resident = multiprocessors as usize * cfg.min_blocks.max(1) as usize;
                let tiles = if m <= 128 && square.output_tiles(m, n) <= resident {
                    square
                } else {
                    rows64
                };
                tiles.with_stages_filling(1)
            }
            // Fast accumulation is the bf16 GEMM's kernel on fp8 operands: its refit, on the
            // warp-specialized long-K tiles, which short K takes too where its tiles are few
            // (gpu-notes runs 35e, 35f, TFLOP/s: 64×4096×4096 81.9 in 128×256 tiles → 172.1
            // in 64×32, 128×8192×8192 370.5 → 582.0 in 128×64, 1024×1024×16384 422.1 →
            // 967.3; short K, 128×7168×2048, 177.1 → 321.3 in 64×64 tiles unspecialized).
            // Its split of narrow tiles too (run 41d: 64×1024×8192 70.3 → 99.3 in 64×32
            // split 4, 128×1024×4096 100.9 → 110.2 split 2).
            Fp8Scaling::Tensor
                if !self.promote
                    && !self.overlap_promotion
                    && cfg.split_k <= 1
                    && cfg.bm == 128
                    && cfg.threads == 256 =>
            {
                let few = 2 * cfg.output_tiles(m, n) < multiprocessors as usize;
                let base = if few && cfg == self.hopper_tiles_for(0) {
                    self.hopper_tiles()
                } else {
                    cfg
                };
                if base.warp_specialize == Some(true) {
                    base.fit_to_gpu_for(Layout::NT, 1, m, n, k, multiprocessors)
                } else {
                    cfg
                }
            }
            Fp8Scaling::Tensor => cfg,
        }
    }

    /// Hopper tiles for long K (see [`Fp8Gemm::hopper_tiles_for`]).
    pub fn hopper_tiles(&self) -> GemmConfig {
        self.hopper_tiles_for(usize::MAX)
    }

    /// Hopper tiles for a problem of depth `k`, from sweeps on an H100 (docs/performance.md,
    /// "FP8 GEMM"). Without promotion: 128×256×128 (one accumulator of 128 registers per
    /// thread), overlapped, 4 stages at K ≥ 4096 (1369 TFLOP/s at 8192³ against 1269 with 3;
    /// since session 26 warp-specialized and persistent there) and 3 below (1010 against 849
    /// at 4096×7168×2048). Promoted per-tensor: 128×128 tiles
    /// (two accumulators); at K ≥ 4096 256-deep k tiles in 3 stages, which halve the
    /// promotions (each drains the tensor cores): 1184 against 1066 for 128-deep ones at
    /// 8192³, 1075 against 948 at 4096³, the error unchanged (1.67e-3), now with a producer
    /// warpgroup on a persistent grid (1402 / 1321, gpu-notes run 19i); below, two 3-stage
    /// blocks per SM (953 against 823 for the 256-deep tiles at 4096×7168×2048). Block scaling
    /// promotes every 128 of K by definition: 128-deep tiles in 4 stages (1040 and 813, two
    /// blocks per SM 836 and 745).
    pub fn hopper_tiles_for(&self, k: usize) -> GemmConfig {
        let long = k >= 4096;
        if self.overlap_promotion {
            // 128×128 partials (three accumulators), stages of two 128-deep k tiles.
            return GemmConfig {
                panel: 8,
                ..GemmConfig::tiles(128, 128, 128, 3, 256)
            };
        }
        match (self.promotes(), self.scaling) {
            // The bf16 GEMM's arrangement: a producer warpgroup keeping 56 registers, a
            // persistent grid, C out through the chunked TMA-store epilogue beside four
            // stages. 1544 against 1391 TFLOP/s one block per tile at 8192³ and 1423 against
            // 1127 at 4096³ (cuBLASLt's fast accumulation 1533 and 1411 in the same call,
            // gpu-notes run 24h); not measured below K = 4096.
            (false, _) if long => GemmConfig {
                panel: 8,
                overlap: true,
                warp_specialize: Some(true),
                persistent: Some(0),
                producer_registers: Some(56),
                ..GemmConfig::tiles(128, 256, 128, 4, 256)
            },
            (false, _) => GemmConfig {
                panel: 8,
                overlap: true,
                ..GemmConfig::tiles(128, 256, 128, 3, 256)
            },
            // Warp-specialized (a producer warpgroup; C out by TMA store): 1227 against 1199
            // at 8192³, 1099 against 1081 at 4096³ (docs/performance.md, issue 14).
            // Persistent (the producer loads the next tile while the consumers promote and
            // store this one): 1402 against 1248 at 8192³, 1321 against 1119 at 4096³ (3 + 30
            // launches; 1242 / 1197 and 1319 / 1118 over 200; gpu-notes run 19i).
            (true, Fp8Scaling::Tensor) if long => GemmConfig {
                panel: 8,
                warp_specialize: Some(true),
                persistent: Some(0),
                ..GemmConfig::tiles(128, 128, 256, 3, 256)
            },
            (true, Fp8Scaling::Tensor) => GemmConfig {
                panel: 8,
                min_blocks: 2,
                ..GemmConfig::tiles(128, 128, 128, 3, 256)
            },
            // Warp-specialized: 1134 against 1037 at 8192³, 1018 against 942 at 4096³. (Not
            // persistent: 977 against 1092 at 8192³, gpu-notes run 19i.)
            (true, Fp8Scaling::Blocks) => GemmConfig {
                panel: 8,
                warp_specialize: Some(true),
                ..GemmConfig::tiles(128, 128, 128, 4, 256)
            },
        }
    }
}

/// The tile program: one block per `bm × bn` tile of C, a pipelined loop over K. Inputs A
/// `[M, K]`, B `[N, K]`, SA and SB ([`Fp8Gemm::scale_shapes`]); output C `[M, N]`. With
/// [`GemmConfig::split_k`] > 1, as [`super::gemm::gemm`]: the grid gains a dim of that many
/// blocks per tile, each taking its share of the k tiles, and the kernel writes the scaled
/// shares (f32) to `W[split, M, N]` in place of C, for [`super::gemm::split_k_sum`] to add.
pub fn fp8_gemm(spec: Fp8Gemm, cfg: GemmConfig) -> Kernel {
    let bk = cfg.bk;
    let blocks = spec.scaling == Fp8Scaling::Blocks;
    let promote = spec.promotes();
    if spec.overlap_promotion && !blocks && promote {
        return overlapped_promotion(spec, cfg);
    }
    let splits = i64::from(cfg.split_k.max(1));
    let base = match (blocks, promote) {
        (true, _) => "fp8_gemm_blocks",
        (false, true) => "fp8_gemm_promoted",
        (false, false) => "fp8_gemm",
    };
    let name = match splits {
        1 => base.to_string(),
        s => format!("{base}_split{s}"),
    };
    Kernel::build(&name, |k| {
        let (m, n, kd) = (k.dim("M"), k.dim("N"), k.dim("K"));
        let a = k.input("A", [&m, &kd], spec.a);
        let b = k.input("B", [&n, &kd], spec.b);
        let (sa, sb) = if blocks {
            let kb = ceildiv(&kd, SCALE_BLOCK);
            (
                k.input("SA", [&kb, &m], F32),
                k.input("SB", [&ceildiv(&n, SCALE_BLOCK), &kb], F32),
            )
        } else {
            (k.input("SA", [1, 1], F32), k.input("SB", [1, 1], F32))
        };
        let tile = Fp8Tile {
            spec,
            cfg,
            a,
            b,
            sa,
            sb,
            n: n.clone(),
        };
        let k_tiles = ceildiv(&kd, bk);
        launch_output_tiles(
            k,
            cfg,
            (&m, &n),
            k_tiles,
            spec.out,
            |t, bx, by, first, count| tile.scaled(t, bx, by, first, count),
        );
    })
}

/// An fp8 GEMM's inputs and tiles: what one block's loop over its k tiles needs.
struct Fp8Tile {
    spec: Fp8Gemm,
    cfg: GemmConfig,
    a: Buffer,
    b: Buffer,
    sa: Buffer,
    sb: Buffer,
    /// N, for the last scale block of B.
    n: Expr,
}

impl Fp8Tile {
    /// The scaled `bm × bn` product of block (`bx`, `by`) over `count` k tiles from `first`.
    fn scaled(&self, t: &mut TileScope, bx: &Expr, by: &Expr, first: Expr, count: Expr) -> Buffer {
        let Fp8Tile {
            spec,
            cfg,
            a,
            b,
            sa,
            sb,
            n,
        } = self;
        let (bm, bn, bk) = (cfg.bm, cfg.bn, cfg.bk);
        let (instruction, overlap) = (cfg.instruction, cfg.overlap);
        let blocks = spec.scaling == Fp8Scaling::Blocks;
        let promote = spec.promotes();
        cfg.schedule_blocks(t);
        // Specialized per-tensor promotion: the two consumer warpgroups take turns at the
        // tensor cores, so one promotes its partial while the other's wgmma runs (8192³ on an
        // H100: 1257 against 1224 TFLOP/s, 4096³ 1115 against 1108; the block-scaled kernel
        // measured slower with turns: docs/performance.md).
        if promote && !blocks && cfg.warp_specialize == Some(true) {
            t.ping_pong(true);
        }
        let a_s = t.alloc_shared_named("A_s", [bm, bk], spec.a);
        let b_s = t.alloc_shared_named("B_s", [bn, bk], spec.b);
        let sa_s = blocks.then(|| t.alloc_shared_named("SA_s", [1, bm], F32));
        let acc = t.alloc_fragment_named("acc", [bm, bn], F32);
        let part = promote.then(|| t.alloc_fragment_named("part", [bm, bn], F32));
        t.clear(&acc);
        t.pipelined(count, cfg.stages, |t, step| {
            let ko = &first + &step;
            t.copy(a.tile([by * bm, &ko * bk]), &a_s);
            t.copy(b.tile([bx * bn, &ko * bk]), &b_s);
            // The scale block of this k tile.
            let kb = (&ko * bk) / SCALE_BLOCK;
            if let Some(sa_s) = &sa_s {
                t.copy(sa.tile([kb.clone(), by * bm]), sa_s);
            }
            let mut g = t.gemm(&a_s, &b_s, part.as_ref().unwrap_or(&acc));
            if let Some(inst) = instruction {
                g = g.instruction(inst);
            }
            if overlap {
                g = g.overlap();
            }
            let g = g.transpose_b();
            if promote {
                g.clear_accum();
            }
            let Some(part) = &part else { return };
            match &sa_s {
                Some(sa_s) => {
                    // B's scale block of column j: clamped, since a tile may reach past the
                    // last block (its columns are not stored).
                    let last = ceildiv(n, SCALE_BLOCK) - 1;
                    t.parallel([bm, bn], |t, [i, j]| {
                        let nb = min((bx * bn + &j) / SCALE_BLOCK, last.clone());
                        let s = sa_s.at([Expr::from(0), i.clone()]) * sb.at([nb, kb.clone()]);
                        t.store(&acc, [&i, &j], acc.at([&i, &j]) + part.at([&i, &j]) * s);
                    });
                }
                None => t.parallel([bm, bn], |t, [i, j]| {
                    t.store(&acc, [&i, &j], acc.at([&i, &j]) + part.at([&i, &j]));
                }),
            }
        });
        if !blocks {
            t.parallel([bm, bn], |t, [i, j]| {
                let s = sa.at([0, 0]) * sb.at([0, 0]);
                t.store(&acc, [&i, &j], acc.at([&i, &j]) * s);
            });
        }
        acc
    }
}

/// Promoted per-tensor scaling with each promotion under the next wgmma
/// ([`Fp8Gemm::overlap_promotion`]): stage `ko` holds k tiles `2ko` and `2ko + 1`; the first
/// goes into partial `p0` while `p1` (the previous stage's second tile, retired by the first
/// gemm's `wg_wait(1)`) is added into `acc`, then the second into `p1` while `p0` is added.
fn overlapped_promotion(spec: Fp8Gemm, cfg: GemmConfig) -> Kernel {
    let GemmConfig {
        bm,
        bn,
        bk,
        stages,
        threads,
        instruction,
        ..
    } = cfg;
    Kernel::build("fp8_gemm_promoted_overlapped", |k| {
        let (m, n, kd) = (k.dim("M"), k.dim("N"), k.dim("K"));
        let a = k.input("A", [&m, &kd], spec.a);
        let b = k.input("B", [&n, &kd], spec.b);
        let sa = k.input("SA", [1, 1], F32);
        let sb = k.input("SB", [1, 1], F32);
        let c = k.output("C", [&m, &n], spec.out);
        k.launch(
            [ceildiv(&n, bn), ceildiv(&m, bm)],
            threads,
            |t, [bx, by]| {
                cfg.schedule_blocks(t);
                let a_s = t.alloc_shared_named("A_s", [bm, 2 * bk], spec.a);
                let b_s = t.alloc_shared_named("B_s", [bn, 2 * bk], spec.b);
                let acc = t.alloc_fragment_named("acc", [bm, bn], F32);
                let p0 = t.alloc_fragment_named("p0", [bm, bn], F32);
                let p1 = t.alloc_fragment_named("p1", [bm, bn], F32);
                t.clear(&acc);
                // The first stage adds the "previous" p1: nothing.
                t.clear(&p1);
                let add = |t: &mut TileScope, p: &Buffer| {
                    t.parallel([bm, bn], |t, [i, j]| {
                        t.store(&acc, [&i, &j], acc.at([&i, &j]) + p.at([&i, &j]));
                    });
                };
                t.pipelined(ceildiv(&kd, 2 * bk), stages, |t, ko| {
                    t.copy(a.tile([&by * bm, &ko * (2 * bk)]), &a_s);
                    t.copy(b.tile([&bx * bn, &ko * (2 * bk)]), &b_s);
                    for (half, p, other) in [(0, &p0, &p1), (1, &p1, &p0)] {
                        let mut g = t.gemm(
                            a_s.region([0, half * bk], [bm, bk]),
                            b_s.region([0, half * bk], [bn, bk]),
                            p,
                        );
                        if let Some(inst) = instruction {
                            g = g.instruction(inst);
                        }
                        g.transpose_b().clear_accum().wg_wait(1);
                        add(t, other);
                    }
                });
                t.wait_wgmma(0);
                add(t, &p1);
                t.parallel([bm, bn], |t, [i, j]| {
                    let s = sa.at([0, 0]) * sb.at([0, 0]);
                    t.store(&acc, [&i, &j], acc.at([&i, &j]) * s);
                });
                t.copy(&acc, c.tile([&by * bm, &bx * bn]));
            },
        );
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn few_tiles_refit_by_scaling() {
        let tensor = Fp8Gemm::e4m3(Fp8Scaling::Tensor);
        let one_warpgroup = |c: GemmConfig| GemmConfig {
            bm: 64,
            threads: 128,
            ..c
        };
        // Promoted per-tensor: 64-row tiles where twice the 128-row tiles fit the SMs once,
        // 64 wide as well for at most 128 rows if they run at once (one block an SM, two for
        // the short-K tiles); then as many stages as fill 196 KiB (98 a block for the
        // short-K tiles, two an SM).
        for (m, n, k, bn, stages) in [
            (64, 4096, 4096, 64, 6),
            (1024, 1024, 16384, 128, 4),
            (128, 4096, 4096, 64, 6),
            (128, 8192, 8192, 128, 4),
            (96, 8192, 8192, 128, 4),
            (128, 7168, 2048, 64, 6),
            (128, 2112, 7168, 64, 6),
            (512, 2048, 7168, 128, 4),
            (129, 2048, 7168, 128, 4),
        ] {
            let cfg = tensor.hopper_tiles_for(k);
            let fit = tensor.fit_to_gpu(cfg, m, n, k, 132);
            assert_eq!(
                fit,
                GemmConfig {
                    bn,
                    stages,
                    ..one_warpgroup(cfg)
                },
                "{m}x{n}x{k}"
            );
            assert_eq!(fit.split_k, 1);
        }
        // 72 tiles of 128 rows: 144 of 64 would not fit 132 SMs once.
        let cfg = tensor.hopper_tiles_for(4096);
        assert_eq!(tensor.fit_to_gpu(cfg, 1152, 1024, 4096, 132), cfg);
        // Enough tiles, a split asked for, the overlapped promotion: unchanged.
        assert_eq!(tensor.fit_to_gpu(cfg, 8192, 8192, 8192, 132), cfg);
        let split = GemmConfig { split_k: 2, ..cfg };
        assert_eq!(tensor.fit_to_gpu(split, 64, 4096, 4096, 132), split);
        let fast = Fp8Gemm {
            promote: false,
            ..tensor
        };
        // Fast accumulation takes the bf16 refit on its warp-specialized long-K tiles (stages
        // of 1-byte operands), short K too where the tiles are few.
        let fcfg = fast.hopper_tiles_for(4096);
        assert_eq!(
            fast.fit_to_gpu(fcfg, 64, 4096, 4096, 132),
            fcfg.fit_to_gpu_for(Layout::NT, 1, 64, 4096, 4096, 132)
        );
        let fast_fit = fast.fit_to_gpu(fcfg, 64, 4096, 4096, 132);
        assert_eq!((fast_fit.bm, fast_fit.bn, fast_fit.stages), (64, 32, 16));
        let short = fast.hopper_tiles_for(2048);
        assert_eq!(
            fast.fit_to_gpu(short, 128, 7168, 2048, 132),
            fcfg.fit_to_gpu_for(Layout::NT, 1, 128, 7168, 2048, 132)
        );
        assert_eq!(fast.fit_to_gpu(short, 4096, 4096, 2048, 132), short);
        let overlapped = Fp8Gemm {
            overlap_promotion: true,
            ..tensor
        };
        let ocfg = overlapped.hopper_tiles_for(4096);
        assert_eq!(overlapped.fit_to_gpu(ocfg, 64, 4096, 4096, 132), ocfg);
        // Block scaling splits K instead.
        let blocks = Fp8Gemm::e4m3(Fp8Scaling::Blocks);
        let bcfg = blocks.hopper_tiles_for(16384);
        let fit = blocks.fit_to_gpu(bcfg, 1024, 1024, 16384, 132);
        assert_eq!((fit.bm, fit.threads), (bcfg.bm, bcfg.threads));
        assert!(fit.split_k > 1, "{fit:?}");
    }
}
