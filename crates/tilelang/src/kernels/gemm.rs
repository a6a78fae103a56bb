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

/// Shared memory the pipeline stages of refitted Hopper tiles fill
/// ([`GemmConfig::with_stages_filling`]), leaving room for the epilogue's staging tile and the
/// barriers within 227 KiB. 196 KiB rather than the 192 of [`GemmConfig::hopper`]'s four
/// 128×256×64 stages: only 128×96×64 tiles change, from 6 stages of 28 KiB to 7 (225 KiB with
/// a bf16 C tile). On an H200, with each k step's wgmma running into the next, they ran level
/// or faster in three interleaved rounds (gpu-notes run 36g, TFLOP/s, 6 → 7 stages):
/// 384×4096×4096 459.6 → 474.2, 512×3072×4096 484.7 → 491.8, 768×2048×4096 493.2 → 493.7,
/// 640×2048×4096 417.4 → 416.9; in 7 stages without that overlap, faster again (see
/// [`GemmConfig::fit_to_gpu`]'s refit). Every other refitted tile keeps its stage count.
pub const HOPPER_STAGE_BYTES: i64 = 196 * 1024;

/// The most pipeline stages [`GemmConfig::with_stages_filling`] gives (64×32 tiles fill
/// [`HOPPER_STAGE_BYTES`] with 16).
pub const MAX_STAGES: u32 = 16;

/// The tile widths [`GemmConfig::fit_to_gpu`] tries under the Hopper tiles' 256. 96 columns
/// cut 768×2048 into 132 tiles, one for each SM of an H200 (cuBLAS's choice there, gpu-notes
/// run 35f): 487.8 TFLOP/s against 473.4 for 96 tiles of 128×128 (6 stages with each k
/// step's wgmma running into the next, run 35m), and in 7 stages without it 529–534 (run
/// 36n). Only where B is K-major (NT).
pub const NARROWER_WIDTHS: [i64; 4] = [128, 96, 64, 32];

/// The most k tiles at which [`GemmConfig::fit_to_gpu`] takes tiles narrower than half width
/// over a split K: at 128 (128×8192×8192) 128×64 tiles ran 354.8 TFLOP/s against 320.4 for 4
/// shares of 128×256; at 256 (1024×1024×16384) 409.4 against 620.7 (H200, gpu-notes runs
/// 35b, 35j).
pub const NARROW_TILES_MAX_K_TILES: usize = 128;

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
    /// - half-area tiles (128×128, or 64-row ones where M ≤ 128) where they keep at least 80%
    ///   of the SMs busy (512×4096×8192 in 128 tiles of 128×128);
    /// - where K is long (more than [`NARROW_TILES_MAX_K_TILES`] k tiles), K split over blocks
    ///   ([`GemmConfig::split_to_fill`]): at 1024×1024×16384, 4 shares of 128×256 tiles ran
    ///   620.7 TFLOP/s against 409.4 for 128 unsplit tiles of 128×64 (gpu-notes runs 35b,
    ///   35j);
    /// - the widest narrower tiles that keep 80% of their waves' SM slots busy: down to
    ///   128×64 (through 128×96: 768×2048×4096 in 132 tiles), and where M ≤ 128 down to
    ///   64×32 (cuBLAS's choice at these shapes, run 35a).
    ///   Against session 35's splits (runs 35b–35d, bf16 NT, TFLOP/s): 1024×1024×4096 300.6
    ///   → 363.5 (128×64), 256×4096×4096 289.7 → 358.6 (128×64), 128×8192×8192 314.0 →
    ///   359.2 (128×64), 128×4096×4096 156.6 → 214.7 (64×64), 64×4096×4096 98.6 → 115.1
    ///   (64×32);
    /// - else whichever of these tiles, the narrower ones and the split fills the most of the
    ///   SM slots its waves take (the widest tiles of equal fill, and tiles over a split of
    ///   equal fill): at 768×2048×4096 in NN (no 96-wide tiles), 96 tiles of 128×128 fill
    ///   73% of one wave, as 192 of 128×64 fill 73% of two and the split of 48 tiles in 2
    ///   fills 73% of one (in NT, 473.4 TFLOP/s against 317.9 for that split, gpu-notes runs
    ///   35f, 35g); and the best of the narrower tiles split in turn, where their split fills
    ///   at least half the SMs (fewer blocks do not pay for the sum kernel). On an H200
    ///   (gpu-notes run 41c, bf16, TFLOP/s, one launch / ten back to back, before → after):
    ///   NN 64×4096×4096 in 64×64 tiles split 2 108 / 142 → 108 / 189 (cuBLAS 125 / 205),
    ///   NN 64×2048×4096 split 4 57 / 75 → 79 / 146 (78 / 62), NN 128×2048×4096 116 / 149 →
    ///   149 / 215 (150 / 194), NN 256×1024×4096 in 128×64 split 4 116 / 145 → 151 / 213
    ///   (173 / 201), NT 64×2048×4096 in 64×32 split 2 65 / 88 → 77 / 125 (77 / 90), NT
    ///   64×1024×8192 split 4 42 / 49 → 75 / 120 (77 / 46); faster or level at every shape
    ///   tried.
    ///
    /// Whatever the tiles (but 64-row half-area ones), they then take as many pipeline stages
    /// as [`HOPPER_STAGE_BYTES`] holds ([`GemmConfig::with_stages_filling`]). A config that
    /// already splits is left alone.
    pub fn fit_to_gpu(
        self,
        layout: Layout,
        m: usize,
        n: usize,
        k: usize,
        multiprocessors: u32,
    ) -> GemmConfig {
        self.fit_to_gpu_for(layout, 2, m, n, k, multiprocessors)
    }

    /// [`GemmConfig::fit_to_gpu`] for operands of `elem_bytes` (the stages it fills).
    pub(crate) fn fit_to_gpu_for(
        self,
        layout: Layout,
        elem_bytes: i64,
        m: usize,
        n: usize,
        k: usize,
        multiprocessors: u32,
    ) -> GemmConfig {
        if self.split_k > 1 || m == 0 || n == 0 || multiprocessors == 0 {
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
            return cfg.refitted(elem_bytes);
        }
        // Blocks over the SM slots their waves take: 192 tiles on 132 SMs fill 73% of two
        // waves, no better than 96 tiles fill one.
        let slots = |blocks: usize| blocks.div_ceil(sms).max(1) * sms;
        let fills = |c: &GemmConfig| {
            let tiles = c.output_tiles(m, n);
            5 * tiles >= 4 * slots(tiles)
        };
        let narrower = cfg.narrower_tiles(layout, m);
        let half_area = cfg.bm * cfg.bn / 2;
        if let Some(c) = narrower
            .iter()
            .find(|c| c.bm * c.bn >= half_area && fills(c))
        {
            // 64-row tiles of one consumer warpgroup here keep their stages: 64×128 in 8
            // stages ran 1.7–2.9% slower than in 4 at 64×14336×4096, where each block streams
            // its own B rows from DRAM (gpu-notes runs 35d, 35e, 35g).
            if c.bm == 64 {
                return *c;
            }
            return c.refitted(elem_bytes);
        }
        let split = cfg.split_to_fill(m, n, k, multiprocessors);
        let long_k = k.div_ceil(cfg.bk.max(1) as usize) > NARROW_TILES_MAX_K_TILES;
        if long_k && split.split_k > 1 {
            return split.refitted(elem_bytes);
        }
        if let Some(c) = narrower.iter().find(|c| fills(c)) {
            return c.refitted(elem_bytes);
        }
        // Nothing fills the SMs: the tiles, or the split, that fill the most of their waves
        // (the widest tiles of equal fill; unsplit tiles over a split of equal fill).
        let fill = |blocks: usize| (blocks, slots(blocks));
        let better =
            |(a, a_slots): (usize, usize), (b, b_slots): (usize, usize)| a * b_slots > b * a_slots;
        let mut best = (cfg, fill(wide));
        for c in &narrower {
            let f = fill(c.output_tiles(m, n));
            if better(f, best.1) {
                best = (*c, f);
            }
        }
        let mut choice = best;
        let wide_split = fill(wide * split.split_k as usize);
        if split.split_k > 1 && better(wide_split, best.1) {
            choice = (split, wide_split);
        }
        // The narrower tiles split in turn, where they leave half the SMs idle and their
        // split fills at least half: 64×64 tiles in 2 shares at 64×4096×4096 NN, whose B
        // cannot be read in 32-column tiles. Fewer blocks than that do not pay for the sum
        // kernel.
        let narrow_split = best.0.split_to_fill(m, n, k, multiprocessors);
        if best.0 != cfg && narrow_split.split_k > 1 {
            let blocks = best.0.output_tiles(m, n) * narrow_split.split_k as usize;
            let f = fill(blocks);
            if 2 * blocks >= sms && better(f, choice.1) {
                choice = (narrow_split, f);
            }
        }
        choice.0.refitted(elem_bytes)
    }

    /// Tiles [`GemmConfig::fit_to_gpu`] chose, made ready to run: their stages filled
    /// ([`GemmConfig::with_stages_filling`]), and 128×64 ones (two consumer warpgroups of
    /// 64×64) keep each k step's wgmma running into the next ([`GemmConfig::overlap`]): their
    /// k steps are short enough that waiting for each one idles the tensor cores (H200,
    /// gpu-notes runs 35k, 36m, TFLOP/s: 1024×1024×4096 360.6 → 430.9, 1024³ 200.3 → 207.4,
    /// 128×8192×8192 356.4 → 365.8; ten launches back to back at 1024×1024×4096 423 → 493).
    /// 128×96 tiles took it in 6 stages (458.9 → 487.8 at 768×2048×4096, run 35m) but run
    /// faster without it in the 7 they have now (run 36n, one launch / ten back to back:
    /// 768×2048×4096 491.8 / 502.5 with it against 531.8 / 592.5, 384×4096×4096 471.7 /
    /// 561.8 against 490.7 / 618.2, 512×3072×4096 492.7 / 565.5 against 518.1 / 635.4). Other
    /// refitted tiles measured level or slower with it (64×64 −3%, 128×128 −5 to −6%).
    fn refitted(self, elem_bytes: i64) -> GemmConfig {
        let cfg = self.with_stages_filling(elem_bytes);
        GemmConfig {
            overlap: cfg.overlap || (cfg.bm == 128 && cfg.bn <= 64 && cfg.stages >= 3),
            ..cfg
        }
    }

    /// The Hopper tiles and every narrower tile [`GemmConfig::fit_to_gpu`] may choose for a
    /// problem of `m` rows in `layout`, each as the refit would run it (stages filled, the
    /// overlap where it takes it), unsplit: what an autotuner should try beside its own list.
    pub fn refit_candidates(layout: Layout, m: usize) -> Vec<GemmConfig> {
        let h = GemmConfig::hopper();
        std::iter::once(h)
            .chain(
                h.narrower_tiles(layout, m)
                    .into_iter()
                    .map(|c| c.refitted(2)),
            )
            .collect()
    }

    /// The narrower warpgroup-MMA tiles [`GemmConfig::fit_to_gpu`] may take instead of these,
    /// widest first: [`NARROWER_WIDTHS`] under `bn` down to 64, and where M ≤ 128 64-row
    /// tiles on one consumer warpgroup down to 32 columns. Where B is MN-major (NN, TN) only
    /// multiples of 64 columns: wgmma reads a [K, N] B tile in 64-column blocks, and other
    /// widths would fall back to mma.sync.
    fn narrower_tiles(&self, layout: Layout, m: usize) -> Vec<GemmConfig> {
        let k_major_b = layout == Layout::NT;
        let widths = |from: GemmConfig, below: i64, min_bn: i64| {
            NARROWER_WIDTHS
                .iter()
                .copied()
                .filter(move |&w| w < below && w >= min_bn && (k_major_b || w % 64 == 0))
                .map(move |bn| GemmConfig { bn, ..from })
        };
        let mut tiles: Vec<GemmConfig> = widths(*self, self.bn, 64).collect();
        if self.bm == 64 {
            tiles.extend(widths(*self, 64, 32));
        } else if m <= 128 && self.bm == 128 && self.threads == 256 {
            let rows64 = GemmConfig {
                bm: 64,
                threads: 128,
                ..*self
            };
            tiles.extend(widths(rows64, self.bn + 1, 32));
        }
        // Widest first; of equal areas, the 128-row tiles (two consumer warpgroups).
        tiles.sort_by_key(|c| std::cmp::Reverse(c.bm * c.bn));
        tiles
    }

    /// These tiles with as many pipeline stages as [`HOPPER_STAGE_BYTES`] holds for
    /// operands of `elem_bytes` (shared among the blocks [`GemmConfig::min_blocks`] asks to
    /// keep on an SM; at most [`MAX_STAGES`], never fewer than they have). Narrow tiles
    /// stream their operands at a higher rate per multiply, and cuBLAS runs them 6–16 stages
    /// deep (gpu-notes run 35a). On an H200 (runs 35b–35d, TFLOP/s): bf16 128×128 tiles in
    /// 6 stages against 4, 684.6 against 617.4 at 512×4096×8192 and 570.2 against 538.2 at
    /// 2048×1024×4096; 128×64 in 8 against 4, 363.5 against 336.2 at 1024×1024×4096; 64×32
    /// in 16 against 8, 115.1 against 105.4 at 64×4096×4096; promoted fp8 64×64×256 in 6
    /// against 3, 173.2 against 155.0 at 64×4096×4096.
    pub fn with_stages_filling(self, elem_bytes: i64) -> GemmConfig {
        let stage_bytes = (self.bm + self.bn) * self.bk * elem_bytes;
        if stage_bytes <= 0 {
            return self;
        }
        let budget = HOPPER_STAGE_BYTES / i64::from(self.min_blocks.max(1));
        let fit = (budget / stage_bytes).clamp(1, i64::from(MAX_STAGES)) as u32;
        GemmConfig {
            stages: self.stages.max(fit),
            ..self
        }
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
    pub fn output_tiles(&self, m: usize, n: usize) -> usize {
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
        // A split grid runs one block a tile and share: persistent, the same split kernel
        // ran at half the speed (H200, 1024×1024×16384 in 128×128 tiles split in 2: 350.7
        // against 629.0 TFLOP/s; 128×256 split in 4: 504.3 against 611.6; gpu-notes runs 35h,
        // 35i). Its SMs stay busy twice as long for the same k steps in the same code, and the
        // cause is not found; the refit's splits fill the SMs once, where persistence has
        // nothing to overlap.
        if let Some(blocks) = self.persistent.filter(|_| self.split_k <= 1) {
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

    /// Problems with few output tiles get half-area tiles where those fill the GPU, else a
    /// split K where K is long, else the widest narrower tiles that fill it, else the tiles or
    /// split that fill the most of their waves; every refitted tile fills shared memory with
    /// stages; big problems keep their tiles.
    #[test]
    fn few_tiles_refit_to_fill_the_gpu() {
        let h = GemmConfig::hopper();
        let fit = |m, n, k| h.fit_to_gpu(Layout::NT, m, n, k, 132);
        // 128×64 tiles also keep each k step's wgmma running into the next.
        let tiles = |bm, bn, threads, stages| GemmConfig {
            bm,
            bn,
            threads,
            stages,
            overlap: bm == 128 && bn <= 64,
            ..h
        };
        let split = |split_k, c: GemmConfig| GemmConfig { split_k, ..c };
        // 4 × 32 half-width tiles: 128 of 132 SMs, in 6 stages of 32 KiB.
        assert_eq!(fit(512, 4096, 8192), tiles(128, 128, 256, 6));
        assert_eq!(fit(2048, 1024, 4096), tiles(128, 128, 256, 6));
        // 32 tiles, 256 k tiles (long): 4 splits of 64 rather than 128 tiles of 128×64.
        assert_eq!(fit(1024, 1024, 16384), GemmConfig { split_k: 4, ..h });
        // 128 k tiles or fewer: quarter-width tiles fill the GPU, 8 stages of 24 KiB.
        assert_eq!(fit(1024, 1024, 4096), tiles(128, 64, 256, 8));
        assert_eq!(fit(256, 4096, 4096), tiles(128, 64, 256, 8));
        assert_eq!(fit(128, 8192, 8192), tiles(128, 64, 256, 8));
        // 96 columns: 6 × 22 tiles, one for each SM (and 3 × 43 of 4096 columns).
        assert_eq!(fit(768, 2048, 4096), tiles(128, 96, 256, 7));
        assert_eq!(fit(384, 4096, 4096), tiles(128, 96, 256, 7));
        // An MN-major B takes multiples of 64 columns, and nothing fills a wave: 96 tiles of
        // 128×128 over 192 of 128×64 (two waves, no fuller) and over a split in 2 (as full).
        for layout in [Layout::NN, Layout::TN] {
            let want = tiles(128, 128, 256, 6);
            assert_eq!(h.fit_to_gpu(layout, 768, 2048, 4096, 132), want);
            assert_eq!(h.fit_to_gpu(layout, 384, 4096, 4096, 132), want);
        }
        // One tile, shallow K: 7 tiles of 64×32 over a split in 2 (14 blocks, too few to
        // pay for the sum).
        assert_eq!(fit(50, 200, 2048), tiles(64, 32, 128, 16));
        // 16 k tiles, too shallow to split: 128 tiles of 128×64 as well.
        assert_eq!(fit(1024, 1024, 1024), tiles(128, 64, 256, 8));
        // M ≤ 128: 64-row tiles on one warpgroup, down to 64×32 (16 stages of 12 KiB).
        assert_eq!(fit(128, 4096, 4096), tiles(64, 64, 128, 12));
        assert_eq!(fit(64, 4096, 4096), tiles(64, 32, 128, 16));
        // Where B is MN-major, 64 columns at the least: 64 tiles of 64×64 fill half the SMs,
        // as a split of 16 wide tiles in 4 would; the narrow tiles split in 2 fill 128.
        for layout in [Layout::NN, Layout::TN] {
            let fit = h.fit_to_gpu(layout, 64, 4096, 4096, 132);
            assert_eq!(fit, split(2, tiles(64, 64, 128, 12)), "{layout:?}");
            // Not the wide tiles in 8 shares (64 blocks): the narrow ones in 4 (128).
            let fit = h.fit_to_gpu(layout, 64, 2048, 8192, 132);
            assert_eq!(fit, split(4, tiles(64, 64, 128, 12)), "{layout:?}");
            // 32 tiles of 128×64 in 4 shares.
            let fit = h.fit_to_gpu(layout, 256, 1024, 4096, 132);
            assert_eq!(fit, split(4, tiles(128, 64, 256, 8)), "{layout:?}");
        }
        // K-major B too, where even 64×32 tiles leave half the SMs idle.
        assert_eq!(fit(64, 2048, 4096), split(2, tiles(64, 32, 128, 16)));
        assert_eq!(fit(64, 1024, 8192), split(4, tiles(64, 32, 128, 16)));
        assert_eq!(fit(32, 8192, 8192), tiles(64, 64, 128, 12));
        // 56 tiles of 64 rows: 112 half-width ones keep 85% of the SMs busy (less a hair), in
        // the stages they had.
        assert_eq!(fit(64, 14336, 4096), tiles(64, 128, 128, 4));
        // One tile and a very long K: at most SPLIT_K_MAX shares of the wide tiles.
        assert_eq!(
            fit(128, 256, 1 << 20),
            GemmConfig {
                split_k: SPLIT_K_MAX,
                ..h
            }
        );
        // Enough tiles: unchanged (the 128×256 tiles' 4 stages already fill the stage budget).
        for (m, n, k) in [(4096, 4096, 4096), (256, 14336, 4096), (2048, 2048, 8192)] {
            assert_eq!(fit(m, n, k), h, "{m}x{n}x{k}");
        }
        // No wider than the problem: N = 64 in 64-wide tiles, N = 96 in 128-wide ones, and
        // M = 64 on one consumer warpgroup (then 64 tiles: half-width ones fill the GPU).
        assert_eq!(fit(16384, 64, 4096), tiles(128, 64, 256, 8));
        assert_eq!(fit(16384, 128, 4096), tiles(128, 128, 256, 6));
        assert_eq!(fit(64, 16384, 4096), tiles(64, 128, 128, 4));
        // M = 128 keeps two warpgroups; its 64 tiles become 128 half-width ones.
        assert_eq!(fit(128, 16384, 4096), tiles(128, 128, 256, 6));
        // Nothing fills the GPU and K is too shallow to split: the most blocks.
        assert_eq!(fit(256, 256, 1024), tiles(128, 64, 256, 8));
        // An empty problem, a GPU said to have no SMs, and a config that already splits are
        // left alone.
        assert_eq!(fit(0, 4096, 4096), h);
        assert_eq!(h.fit_to_gpu(Layout::NT, 64, 4096, 4096, 0), h);
        let split = GemmConfig { split_k: 2, ..h };
        assert_eq!(split.fit_to_gpu(Layout::NT, 64, 64, 1 << 16, 132), split);
    }

    proptest::proptest! {
        /// At any size and SM count the refit gives tiles wgmma can run (64 or 128 rows on one
        /// or two consumer warpgroups, 32 to 256 columns, at least 64 where B is MN-major),
        /// stages within the shared-memory budget or as they were, at most `SPLIT_K_MAX`
        /// shares each of some k tiles, and no more output tiles' rows than the problem needs.
        #[test]
        fn refits_stay_runnable(
            m in 1usize..20_000,
            n in 1usize..20_000,
            k in 1usize..70_000,
            sms in 0u32..200,
            layout in proptest::sample::select(vec![Layout::NT, Layout::NN, Layout::TN]),
        ) {
            let h = GemmConfig::hopper();
            let fit = h.fit_to_gpu(layout, m, n, k, sms);
            proptest::prop_assert!(matches!((fit.bm, fit.threads), (128, 256) | (64, 128)));
            proptest::prop_assert!((32..=256).contains(&fit.bn) && fit.bn % 32 == 0);
            if layout != Layout::NT {
                proptest::prop_assert!(fit.bn % 64 == 0, "{fit:?}");
            }
            let stage_bytes = (fit.bm + fit.bn) * fit.bk * 2;
            proptest::prop_assert!(
                fit.stages == h.stages || stage_bytes * i64::from(fit.stages) <= HOPPER_STAGE_BYTES,
                "{fit:?}"
            );
            proptest::prop_assert!((1..=SPLIT_K_MAX).contains(&fit.split_k));
            let k_tiles = k.div_ceil(fit.bk as usize);
            proptest::prop_assert!(fit.split_k == 1 || k_tiles >= SPLIT_K_MIN_TILES * fit.split_k as usize);
            proptest::prop_assert!(fit.bm == 128 || m <= 128, "{fit:?}");
        }
    }

    /// The tuner's candidates are the refit's own tiles, widest first, unsplit.
    #[test]
    fn refit_candidates_are_the_refits_tiles() {
        let tiles = |layout, m| {
            GemmConfig::refit_candidates(layout, m)
                .iter()
                .map(|c| (c.bm, c.bn, c.stages, c.overlap, c.split_k))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            tiles(Layout::NT, 4096),
            [
                (128, 256, 4, false, 1),
                (128, 128, 6, false, 1),
                (128, 96, 7, false, 1),
                (128, 64, 8, true, 1)
            ]
        );
        let nn = tiles(Layout::NN, 64);
        assert!(nn.contains(&(64, 64, 12, false, 1)), "{nn:?}");
        assert!(nn.iter().all(|t| t.1 % 64 == 0), "{nn:?}");
        assert!(tiles(Layout::NT, 64).contains(&(64, 32, 16, false, 1)));
    }

    /// Stages fill 196 KiB (shared by the blocks asked to share an SM), up to 16, and never
    /// drop below what was asked.
    #[test]
    fn stages_fill_the_shared_memory_budget() {
        let stages = |bm, bn, from| {
            GemmConfig::tiles(bm, bn, 64, from, 256)
                .with_stages_filling(2)
                .stages
        };
        // fp8: 64×64×256 and 64×128×256 tiles; 64×64×128 two blocks an SM.
        let fp8 = |bn, bk, min_blocks| {
            GemmConfig {
                min_blocks,
                ..GemmConfig::tiles(64, bn, bk, 3, 128)
            }
            .with_stages_filling(1)
            .stages
        };
        assert_eq!(fp8(64, 256, 0), 6);
        assert_eq!(fp8(128, 256, 0), 4);
        assert_eq!(fp8(64, 128, 2), 6);
        assert_eq!(stages(128, 256, 4), 4);
        assert_eq!(stages(128, 128, 4), 6);
        assert_eq!(stages(128, 96, 4), 7);
        assert_eq!(stages(128, 64, 4), 8);
        assert_eq!(stages(64, 32, 4), 16);
        assert_eq!(stages(16, 16, 4), MAX_STAGES);
        assert_eq!(stages(128, 128, 7), 7);
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
