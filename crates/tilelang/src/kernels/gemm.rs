//! GEMM: C[M,N] = A[M,K] · B, B given as [K,N] (NN) or [N,K] (NT); f32 accumulate.

use crate::prelude::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// B is [K, N].
    NN,
    /// B is [N, K] (B transposed, the common weight layout).
    NT,
    /// A is [K, M], B is [K, N].
    TN,
}

impl Layout {
    pub fn parse(s: &str) -> Option<Layout> {
        match s.to_ascii_lowercase().as_str() {
            "nn" => Some(Layout::NN),
            "nt" => Some(Layout::NT),
            "tn" => Some(Layout::TN),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Layout::NN => "nn",
            Layout::NT => "nt",
            Layout::TN => "tn",
        }
    }
}

/// The fewest k tiles a split-K share takes ([`GemmConfig::split_to_fill`]): shorter shares
/// spend more of their time filling and draining the pipeline than multiplying (on an H200,
/// gpu-notes runs 33c and 33f: bf16 1024³ in 4 shares of 4 k tiles ran at 113 TFLOP/s, in
/// 128×128 tiles unsplit 178; block-scaled fp8 128×7168×2048 in 2 shares of 8 at 220, unsplit
/// 260).
pub const SPLIT_K_MIN_TILES: usize = 16;

/// The most blocks a tile's K is split over ([`GemmConfig::split_to_fill`]).
pub const SPLIT_K_MAX: u32 = 16;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GemmConfig {
    pub bm: i64,
    pub bn: i64,
    pub bk: i64,
    pub stages: u32,
    pub threads: u32,
    /// Resident blocks per SM to ask the compiler for (0: let it choose); see
    /// `TileScope::min_blocks_per_sm`.
    pub min_blocks: u32,
    /// Launch blocks in panels of this many block-rows, column by column inside a panel, so
    /// the blocks resident at once share A and B tiles in L2 (`TileScope::use_swizzle`;
    /// 0 or 1: row-major order).
    pub panel: u32,
    /// The matrix instruction, overriding the compiler's choice (`None`: wgmma on sm_90a where
    /// the tiles allow it, mma.sync elsewhere on NVIDIA, MFMA on AMD).
    pub instruction: Option<GemmInstruction>,
    /// On wgmma with at least 3 stages: keep each k step's wgmma running into the next
    /// (`GemmHandle::overlap`).
    pub overlap: bool,
    /// A persistent kernel (`TileScope::persistent`) of this many blocks (0: one per
    /// multiprocessor), each looping over output tiles in the rasterization order.
    pub persistent: Option<u32>,
    /// Warp specialization (`TileScope::warp_specialize`): `None` lets the compiler choose.
    pub warp_specialize: Option<bool>,
    /// Thread-block clusters of this many blocks consecutive along M (`TileScope::cluster`;
    /// 0 or 1: none): the blocks of a cluster share their B tile, loaded once by TMA
    /// multicast. Persistent, warp-specialized kernels on sm_90a only.
    pub cluster: u32,
    /// With warp specialization: the producer warpgroup's registers per thread
    /// (`TileScope::producer_registers`; `None`: the compiler's default).
    pub producer_registers: Option<u32>,
    /// Split K over this many blocks per output tile (1: none). Each block of a tile sums its
    /// share of the k tiles into an f32 workspace `W[split, M, N]`, and [`split_k_sum`] adds
    /// the shares into C: for problems with too few output tiles to fill the GPU
    /// ([`GemmConfig::split_to_fill`]). Plain stores, no atomics: the result does not depend on
    /// the order the blocks run in.
    pub split_k: u32,
}

impl GemmConfig {
    /// `bm × bn` output tiles, `bk`-deep k tiles, `stages` pipeline stages, `threads` per
    /// block; no occupancy request, row-major block order.
    pub fn tiles(bm: i64, bn: i64, bk: i64, stages: u32, threads: u32) -> GemmConfig {
        GemmConfig {
            bm,
            bn,
            bk,
            stages,
            threads,
            min_blocks: 0,
            panel: 0,
            instruction: None,
            overlap: false,
            persistent: None,
            warp_specialize: None,
            cluster: 1,
            producer_registers: None,
            split_k: 1,
        }
    }

    /// Tiles for GPUs with tensor cores (sm_80+): 128x128x32, 3 stages, 4 warps.
    pub fn gpu() -> GemmConfig {
        GemmConfig::tiles(128, 128, 32, 3, 128)
    }

    /// Hopper (sm_90a) tiles, which the compiler runs on the warpgroup MMA with TMA loads, for
    /// 16-bit inputs: 128x256x64, 4 stages, two consumer warpgroups and a producer
    /// (warp-specialized), panels of 16 block-rows; C goes out by TMA store through a shared
    /// tile of half its columns, in two chunks (the whole tile no longer fits beside four
    /// stages): against 3 stages and the whole tile, +1–2% at 4096³ and 4096×8192×2048, even
    /// at 8192³ and 6144³ (H100, gpu-notes run 23c: 782.7 / 752.1 against 768.3 / 745.3
    /// TFLOP/s at `--reps 30`; with C stored from the registers instead, four stages lost
    /// 6–18%, run 23a). Persistent (one block per SM
    /// looping over tiles): the producer loads the next tile while the consumers finish this
    /// one. Each k step waits for its own wgmma and frees its stage at once: leaving the
    /// wgmma running into the next step (`overlap`) frees a stage only after the next one has
    /// arrived, so one late stage held up the refill of the other (on an H100, NT, 3 + 30
    /// launches, gpu-notes run 19e/19f: 764 / 789 / 782 / 741 TFLOP/s at 4096³ / 8192³ /
    /// 6144³ / 4096×8192×2048 against 730 / 756 / 757 / 721 overlapped; persistence itself
    /// added 1–2.5% once its k steps' stage index became an unsigned division, run 19b).
    pub fn hopper() -> GemmConfig {
        GemmConfig {
            panel: 16,
            overlap: false,
            warp_specialize: Some(true),
            persistent: Some(0),
            // At 40 NVRTC's build of the NN kernel spilled 48 bytes of the producer's tile
            // arithmetic; 56 leaves the consumers 224 (the PTX path measured the same either
            // way, gpu-notes run 23d/23e).
            producer_registers: Some(56),
            ..GemmConfig::tiles(128, 256, 64, 4, 256)
        }
    }

    /// Hopper tiles for problems whose tensor rows are 4 or 8 bytes aligned but not 16 (K =
    /// 4100 in NT, say): they load by cp.async of that width, where the earlier 128x128x64, 3
    /// stages runs faster than [`GemmConfig::hopper`]'s wider tile (docs/performance.md run 12).
    pub fn hopper_unaligned() -> GemmConfig {
        GemmConfig {
            panel: 8,
            ..GemmConfig::tiles(128, 128, 64, 3, 256)
        }
    }

    /// The default tiles for a target and a problem of known sizes: on Hopper, the TMA tiles
    /// when every tensor's rows (its contiguous dim) are multiples of 16 bytes or some are
    /// only element-aligned (an odd K: the runtime then stages pitched copies for TMA), else
    /// (rows of 4 or 8 bytes, loaded by cp.async of that width)
    /// [`GemmConfig::hopper_unaligned`]; elsewhere as [`GemmConfig::for_target`].
    pub fn for_problem(
        target: &tl_target::Target,
        in_dtype: DType,
        layout: Layout,
        m: usize,
        n: usize,
        k: usize,
    ) -> GemmConfig {
        if !GemmConfig::hopper_applies(target, in_dtype) {
            return GemmConfig::for_target(target, in_dtype);
        }
        let per_16_bytes = (16 / in_dtype.bytes().max(1)).max(1);
        let contiguous: [usize; 2] = match layout {
            Layout::NT => [k, k],
            Layout::NN => [k, n],
            Layout::TN => [m, n],
        };
        let aligned = contiguous.iter().all(|d| d % per_16_bytes == 0);
        let element_aligned = per_16_bytes > 1 && contiguous.iter().any(|d| d % 2 == 1);
        if aligned || element_aligned {
            GemmConfig::hopper()
        } else {
            GemmConfig::hopper_unaligned()
        }
    }

    /// These tiles refitted for an `m × n × k` problem on a GPU of `multiprocessors` SMs.
    /// First no wider than the problem: `bn` halved down to 64 while N fits in half of it,
    /// and 64-row tiles on one consumer warpgroup where M ≤ 64 (the 128×256 Hopper tiles
    /// otherwise multiply zeros: N = 64 ran at 116 TFLOP/s in them, 190 in 128×64). Then, if
    /// the output tiles would still leave more than half the SMs idle (a 1024×1024 C has 32
    /// of 128×256 for 132 SMs), in order of preference:
    /// - half-width tiles (`bn / 2`) where they keep at least 80% of the SMs busy (64×14336×4096
    ///   in 112 tiles of 64×128 for 132 SMs: 178.8 TFLOP/s against 162.7 split in two, gpu-notes
    ///   run 34f);
    /// - K split over blocks ([`GemmConfig::split_to_fill`]);
    /// - else half-width tiles where they are more blocks.
    ///
    /// On an H200 (gpu-notes runs 33e and 33h, bf16 NT, TFLOP/s): 1024×1024×16384 223 → 491
    /// (split 4), 512×4096×8192 419 → 619 (128×128), 1024³ 123 → 175 (128×128), 16384×64×4096
    /// 116 → 190 (128×64), 64×16384×4096 157 → 190 (64×128). A config that already splits is
    /// left alone.
    pub fn fit_to_gpu(self, m: usize, n: usize, k: usize, multiprocessors: u32) -> GemmConfig {
        if self.split_k > 1 || m == 0 || n == 0 {
            return self;
        }
        let mut cfg = self;
        while cfg.bn >= 128 && cfg.bn % 128 == 0 && n <= (cfg.bn / 2) as usize {
            cfg.bn /= 2;
        }
        if m <= 64 && cfg.bm == 128 && cfg.threads == 256 {
            cfg.bm = 64;
            cfg.threads = 128;
        }
        let sms = multiprocessors as usize;
        let wide = cfg.output_tiles(m, n);
        if 2 * wide >= sms {
            return cfg;
        }
        let half = cfg.bn / 2;
        let halved = GemmConfig { bn: half, ..cfg };
        let narrow = (half >= 64 && half % 64 == 0).then(|| halved.output_tiles(m, n));
        if narrow.is_some_and(|t| 5 * t >= 4 * sms) {
            return halved;
        }
        let split = cfg.split_to_fill(m, n, k, multiprocessors);
        if split.split_k > 1 {
            return split;
        }
        if narrow.is_some_and(|t| t > wide) {
            return halved;
        }
        cfg
    }

    /// These tiles with K split over as many blocks per output tile as fill the SMs once
    /// ([`GemmConfig::split_k`]), each share at least [`SPLIT_K_MIN_TILES`] k tiles, at most
    /// [`SPLIT_K_MAX`] shares; unchanged where the output tiles keep at least half the SMs
    /// busy, or K is too shallow to split, or the config already splits.
    pub fn split_to_fill(self, m: usize, n: usize, k: usize, multiprocessors: u32) -> GemmConfig {
        let sms = multiprocessors as usize;
        let tiles = self.output_tiles(m, n);
        if self.split_k > 1 || tiles == 0 || 2 * tiles > sms {
            return self;
        }
        let k_tiles = k.div_ceil(self.bk.max(1) as usize);
        let splits = (sms / tiles)
            .min(k_tiles / SPLIT_K_MIN_TILES)
            .min(SPLIT_K_MAX as usize);
        GemmConfig {
            split_k: splits.max(1) as u32,
            ..self
        }
    }

    /// Output tiles of an `m × n` C.
    pub(crate) fn output_tiles(&self, m: usize, n: usize) -> usize {
        m.div_ceil(self.bm.max(1) as usize) * n.div_ceil(self.bn.max(1) as usize)
    }

    /// Whether [`GemmConfig::hopper`] applies: a target with wgmma and f16 or bf16 inputs (any
    /// layout: K-major and MN-major operands both have descriptors).
    pub fn hopper_applies(target: &tl_target::Target, in_dtype: DType) -> bool {
        target.has_wgmma() && matches!(in_dtype, DType::F16 | DType::BF16)
    }

    /// AMD tiles for 16-bit inputs on MFMA: on gfx950 (160 KiB of LDS) 256×256×64, 2 stages,
    /// 8 waves (the tile of the seed notes: 64 MFMAs and 24 `ds_read_b128` per wave and k tile);
    /// on gfx942 (64 KiB) 128×128×64, 2 stages, 4 waves. Other inputs run on FMAs in 64×64×32
    /// tiles.
    pub fn amd(target: &tl_target::Target, in_dtype: DType) -> GemmConfig {
        match (target.amd().map(|a| a.lds_bytes), in_dtype) {
            (Some(lds), DType::F16 | DType::BF16) if lds >= 160 * 1024 => {
                GemmConfig::tiles(256, 256, 64, 2, 512)
            }
            (Some(_), DType::F16 | DType::BF16) => GemmConfig::tiles(128, 128, 64, 2, 256),
            _ => GemmConfig::tiles(64, 64, 32, 2, 256),
        }
    }

    /// The default tiles for a target and input type.
    pub fn for_target(target: &tl_target::Target, in_dtype: DType) -> GemmConfig {
        match target {
            tl_target::Target::Cpu => GemmConfig::cpu(),
            tl_target::Target::Hip { .. } => GemmConfig::amd(target, in_dtype),
            _ if GemmConfig::hopper_applies(target, in_dtype) => GemmConfig::hopper(),
            _ => GemmConfig::gpu(),
        }
    }

    /// The block-level choices of these tiles, in a GEMM kernel's launch: resident blocks per
    /// SM, panel rasterization, a persistent grid.
    pub fn schedule_blocks(&self, t: &mut TileScope) {
        if self.min_blocks > 0 {
            t.min_blocks_per_sm(self.min_blocks);
        }
        if self.panel > 1 {
            t.use_swizzle(self.panel);
        }
        if let Some(blocks) = self.persistent {
            t.persistent(blocks);
        }
        if let Some(on) = self.warp_specialize {
            t.warp_specialize(on);
        }
        if let Some(r) = self.producer_registers {
            t.producer_registers(r);
        }
        if self.cluster > 1 {
            // The GEMM grids are [N tiles, M tiles]: clusters along M share B.
            t.cluster(1, self.cluster);
        }
    }

    /// Tiles that suit the CPU backend (big tiles amortize packing).
    pub fn cpu() -> GemmConfig {
        GemmConfig::tiles(128, 128, 64, 1, 128)
    }
}

/// The tile program: one block per `bm × bn` tile of C, a pipelined loop over K. With
/// [`GemmConfig::split_k`] > 1 the grid gains a dim of that many blocks per tile, each taking
/// its share of the k tiles, and the kernel writes the shares (f32) to its output
/// `W[split, M, N]` in place of C; [`split_k_sum`] adds them into C.
pub fn gemm(layout: Layout, in_dtype: DType, out_dtype: DType, cfg: GemmConfig) -> Kernel {
    let splits = i64::from(cfg.split_k.max(1));
    let name = match splits {
        1 => format!("gemm_{}", layout.name()),
        s => format!("gemm_{}_split{s}", layout.name()),
    };
    Kernel::build(&name, |k| {
        let (m, n, kd) = (k.dim("M"), k.dim("N"), k.dim("K"));
        let a = match layout {
            Layout::TN => k.input("A", [&kd, &m], in_dtype),
            _ => k.input("A", [&m, &kd], in_dtype),
        };
        let b = match layout {
            Layout::NT => k.input("B", [&n, &kd], in_dtype),
            _ => k.input("B", [&kd, &n], in_dtype),
        };
        let operands = Operands { layout, a, b, cfg };
        let k_tiles = ceildiv(&kd, cfg.bk);
        launch_output_tiles(
            k,
            cfg,
            (&m, &n),
            k_tiles,
            out_dtype,
            |t, bx, by, first, count| operands.tile(t, bx, by, first, count),
        );
    })
}

/// The launch of a GEMM-shaped kernel: one block per `bm × bn` tile of an `m × n` output,
/// whose accumulator `tile(t, bx, by, first, count)` computes over `count` of the `k_tiles` k
/// tiles from `first`. Unsplit, the output is `C[M, N]` in `out_dtype` and each block takes
/// every k tile. With [`GemmConfig::split_k`] = S > 1 the grid gains a dim of S blocks per
/// tile: block z takes k tiles `[z·per, z·per + per)` (the last ones fewer, none where K has
/// fewer tiles than splits: its share is then zeros) and the output is the f32 shares
/// `W[S, M, N]`, for [`split_k_sum`] to add.
pub(crate) fn launch_output_tiles(
    k: &mut KernelBuilder,
    cfg: GemmConfig,
    (m, n): (&Expr, &Expr),
    k_tiles: Expr,
    out_dtype: DType,
    tile: impl Fn(&mut TileScope, &Expr, &Expr, Expr, Expr) -> Buffer,
) {
    let (bm, bn) = (cfg.bm, cfg.bn);
    let splits = i64::from(cfg.split_k.max(1));
    if splits == 1 {
        let c = k.output("C", [m, n], out_dtype);
        k.launch(
            [ceildiv(n, bn), ceildiv(m, bm)],
            cfg.threads,
            |t, [bx, by]| {
                let acc = tile(t, &bx, &by, Expr::int(0), k_tiles);
                t.copy(&acc, c.tile([&by * bm, &bx * bn]));
            },
        );
    } else {
        let w = k.output("W", [Expr::int(splits), m.clone(), n.clone()], F32);
        k.launch(
            [ceildiv(n, bn), ceildiv(m, bm), Expr::int(splits)],
            cfg.threads,
            |t, [bx, by, bz]| {
                let per = ceildiv(&k_tiles, splits);
                let first = &bz * &per;
                let count = max(min(per, &k_tiles - &first), 0);
                let acc = tile(t, &bx, &by, first, count);
                t.copy(&acc, w.tile([bz.clone(), &by * bm, &bx * bn]));
            },
        );
    }
}

/// A GEMM's inputs and tiles: what one block's loop over its k tiles needs.
struct Operands {
    layout: Layout,
    a: Buffer,
    b: Buffer,
    cfg: GemmConfig,
}

impl Operands {
    /// The `bm × bn` accumulator of block (`bx`, `by`) over `count` k tiles from `first`.
    fn tile(&self, t: &mut TileScope, bx: &Expr, by: &Expr, first: Expr, count: Expr) -> Buffer {
        let Operands { layout, a, b, cfg } = self;
        let GemmConfig {
            bm,
            bn,
            bk,
            stages,
            instruction,
            overlap,
            ..
        } = *cfg;
        let in_dtype = a.dtype();
        cfg.schedule_blocks(t);
        let a_s = match layout {
            Layout::TN => t.alloc_shared_named("A_s", [bk, bm], in_dtype),
            _ => t.alloc_shared_named("A_s", [bm, bk], in_dtype),
        };
        let b_s = match layout {
            Layout::NT => t.alloc_shared_named("B_s", [bn, bk], in_dtype),
            _ => t.alloc_shared_named("B_s", [bk, bn], in_dtype),
        };
        let acc = t.alloc_fragment_named("acc", [bm, bn], F32);
        t.clear(&acc);
        t.pipelined(count, stages, |t, step| {
            let ko = &first + &step;
            match layout {
                Layout::TN => t.copy(a.tile([&ko * bk, by * bm]), &a_s),
                _ => t.copy(a.tile([by * bm, &ko * bk]), &a_s),
            }
            match layout {
                Layout::NT => t.copy(b.tile([bx * bn, &ko * bk]), &b_s),
                _ => t.copy(b.tile([&ko * bk, bx * bn]), &b_s),
            }
            let mut g = t.gemm(&a_s, &b_s, &acc);
            if let Some(inst) = instruction {
                g = g.instruction(inst);
            }
            if overlap {
                g = g.overlap();
            }
            match layout {
                Layout::NT => {
                    g.transpose_b();
                }
                Layout::TN => {
                    g.transpose_a();
                }
                Layout::NN => {}
            }
        });
        acc
    }
}

/// C = the sum of a split-K GEMM's shares `W[split, M, N]` (f32), in C's type: one block per
/// `block` columns of a row, the shares added in split order (the same sum at every launch).
pub fn split_k_sum(out_dtype: DType, splits: u32, block: i64, threads: u32) -> Kernel {
    let splits = i64::from(splits.max(1));
    Kernel::build("gemm_split_sum", |k| {
        let (m, n) = (k.dim("M"), k.dim("N"));
        let w = k.input("W", [Expr::int(splits), m.clone(), n.clone()], F32);
        let c = k.output("C", [&m, &n], out_dtype);
        k.launch([m.clone(), ceildiv(&n, block)], threads, |t, [row, bx]| {
            let c0 = &bx * block;
            let acc = t.alloc_fragment_named("acc", [1, block], F32);
            let share = t.alloc_fragment_named("share", [1, block], F32);
            let out = t.alloc_fragment_named("out", [1, block], out_dtype);
            t.copy(w.tile([Expr::int(0), row.clone(), c0.clone()]), &acc);
            for z in 1..splits {
                t.copy(w.tile([Expr::int(z), row.clone(), c0.clone()]), &share);
                t.parallel([1, block], |t, [i, j]| {
                    t.store(&acc, [&i, &j], acc.at([&i, &j]) + share.at([&i, &j]));
                });
            }
            t.parallel([1, block], |t, [i, j]| {
                t.store(&out, [&i, &j], acc.at([&i, &j]).cast(out_dtype));
            });
            t.copy(&out, c.tile([row.clone(), c0.clone()]));
        });
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tl_target::Target;

    /// Hopper takes the TMA tiles only where every tensor's rows are whole 16-byte units.
    #[test]
    fn hopper_tiles_follow_the_rows_alignment() {
        let t = Target::SM90;
        let pick = |l, m, n, k| GemmConfig::for_problem(&t, DType::BF16, l, m, n, k);
        assert_eq!(pick(Layout::NT, 4097, 4095, 4096), GemmConfig::hopper());
        // Rows of 8 or 4 bytes: cp.async of that width, in the 128x128 tiles.
        let unaligned = GemmConfig::hopper_unaligned();
        assert_eq!(pick(Layout::NT, 4096, 4096, 4100), unaligned);
        assert_eq!(pick(Layout::NN, 4096, 4098, 4096), unaligned);
        assert_eq!(pick(Layout::TN, 4100, 4096, 4096), unaligned);
        // Element-aligned rows (odd sizes): TMA from pitched copies, in the TMA tiles.
        assert_eq!(pick(Layout::NT, 4096, 4096, 4095), GemmConfig::hopper());
        assert_eq!(pick(Layout::NN, 4096, 4095, 4100), GemmConfig::hopper());
        assert_eq!(pick(Layout::TN, 4096, 4096, 4095), GemmConfig::hopper());
        // Persistent at any k.
        assert_eq!(pick(Layout::NT, 4096, 8192, 2048).persistent, Some(0));
        assert_eq!(pick(Layout::NN, 4096, 8192, 8192).persistent, Some(0));
        // Other targets and types keep their defaults.
        let sm80 = GemmConfig::for_problem(&Target::SM80, DType::BF16, Layout::NT, 5, 5, 5);
        assert_eq!(sm80, GemmConfig::gpu());
        let f32 = GemmConfig::for_problem(&t, DType::F32, Layout::NT, 5, 5, 5);
        assert_eq!(f32, GemmConfig::for_target(&t, DType::F32));
    }

    /// Problems with few output tiles get half-width tiles where those fill the GPU, else a
    /// split K where K is deep enough, else half-width tiles; big problems keep their tiles.
    #[test]
    fn few_tiles_refit_to_fill_the_gpu() {
        let h = GemmConfig::hopper();
        let fit = |m, n, k| h.fit_to_gpu(m, n, k, 132);
        // 4 × 32 half-width tiles: 128 of 132 SMs.
        assert_eq!(fit(512, 4096, 8192), GemmConfig { bn: 128, ..h });
        // 32 tiles, 256 k tiles: 4 splits of 64.
        assert_eq!(fit(1024, 1024, 16384).split_k, 4);
        assert_eq!(fit(1024, 1024, 16384).bn, 256);
        // 16 tiles: 8 splits would fill the SMs, but 64 k tiles make only 4 shares of 16.
        assert_eq!(fit(64, 4096, 4096).split_k, 4);
        assert_eq!(fit(64, 4096, 4096).bm, 64);
        // 56 tiles of 64 rows: 112 half-width ones keep 85% of the SMs busy (less a hair).
        assert_eq!(
            fit(64, 14336, 4096),
            GemmConfig {
                bm: 64,
                bn: 128,
                threads: 128,
                ..h
            }
        );
        // 32 tiles, 16 k tiles: too shallow to split; 64 half-width tiles instead.
        assert_eq!(fit(1024, 1024, 1024), GemmConfig { bn: 128, ..h });
        // At most SPLIT_K_MAX shares.
        assert_eq!(fit(128, 256, 1 << 20).split_k, SPLIT_K_MAX);
        // Enough tiles: unchanged.
        for (m, n, k) in [(4096, 4096, 4096), (256, 14336, 4096), (2048, 2048, 8192)] {
            assert_eq!(fit(m, n, k), h, "{m}x{n}x{k}");
        }
        // No wider than the problem: N = 64 in 64-wide tiles, N = 96 in 128-wide ones, and
        // M = 64 on one consumer warpgroup (then 64 tiles: half-width ones fill the GPU).
        assert_eq!(fit(16384, 64, 4096), GemmConfig { bn: 64, ..h });
        assert_eq!(fit(16384, 128, 4096), GemmConfig { bn: 128, ..h });
        let one_warpgroup = GemmConfig {
            bm: 64,
            threads: 128,
            ..h
        };
        assert_eq!(
            fit(64, 16384, 4096),
            GemmConfig {
                bn: 128,
                ..one_warpgroup
            }
        );
        assert_eq!(
            fit(32, 8192, 8192),
            GemmConfig {
                split_k: 4,
                ..one_warpgroup
            }
        );
        // M = 128 keeps two warpgroups; its 64 tiles become 128 half-width ones.
        assert_eq!(fit(128, 16384, 4096), GemmConfig { bn: 128, ..h });
        // An empty problem, and a config that already splits, are left alone.
        assert_eq!(fit(0, 4096, 4096), h);
        let split = GemmConfig { split_k: 2, ..h };
        assert_eq!(split.fit_to_gpu(64, 64, 1 << 16, 132), split);
    }

    #[test]
    fn split_kernels_name_their_splits_and_output() {
        let cfg = GemmConfig {
            split_k: 3,
            ..GemmConfig::hopper()
        };
        let k = gemm(Layout::NT, DType::BF16, DType::BF16, cfg);
        assert_eq!(k.name(), "gemm_nt_split3");
        let names: Vec<String> = k
            .ir()
            .tensors()
            .map(|(b, _)| b.name().to_string())
            .collect();
        assert_eq!(names, ["A", "B", "W"]);
        let sum = split_k_sum(DType::BF16, 3, 1024, 128);
        let names: Vec<String> = sum
            .ir()
            .tensors()
            .map(|(b, _)| b.name().to_string())
            .collect();
        assert_eq!(names, ["W", "C"]);
    }
}
