//! Kernels: parameters, launch grid, threads per block, body.

use crate::buffer::Buffer;
use crate::expr::{Expr, Var};
use crate::stmt::Stmt;

/// The largest value a symbolic size may take: 2^31 - 2^24. Sizes are 32-bit, and so is the
/// index arithmetic of a kernel's blocks (`bx * 1000 + i`, `(n + 999) / 1000`); the 2^24 of
/// headroom keeps the indices of a tile that overhangs the tensor's edge (before its bounds
/// check) and the rounded-up grid extents within 32 bits for tiles of up to 2^24 elements a
/// side. A tensor may still have any number of elements: global offsets are 64-bit.
pub const MAX_SYMBOLIC_DIM: usize = (1 << 31) - (1 << 24);

/// Why a symbolic size of `n` (dimension `d` of a tensor) is refused, if it is; for the launch
/// checks of the runtime and the simulator.
pub fn symbolic_dim_too_large(d: usize, n: usize) -> Option<String> {
    (n > MAX_SYMBOLIC_DIM).then(|| {
        format!(
            "dimension {d} is {n}, past the {MAX_SYMBOLIC_DIM} (2^31 - 2^24) a symbolic size may \
             have: block indices are 32-bit, with room for a tile overhanging the edge (split \
             the tensor along this dimension, or give it more dimensions)"
        )
    })
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Role {
    Input,
    Output,
    InOut,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Input => "in",
            Role::Output => "out",
            Role::InOut => "inout",
        }
    }
}

#[derive(Clone, PartialEq, Debug)]
pub enum Param {
    /// A global tensor (row-major, contiguous) whose shape may use symbolic dims.
    Tensor { buffer: Buffer, role: Role },
    /// A scalar argument.
    Scalar(Var),
}

impl Param {
    pub fn name(&self) -> &str {
        match self {
            Param::Tensor { buffer, .. } => buffer.name(),
            Param::Scalar(v) => v.name(),
        }
    }
}

/// See [`KernelAttrs::cluster`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ClusterAttr {
    /// The logical grid dim (0 = x) whose consecutive block indices share a cluster.
    pub dim: usize,
    /// Blocks per cluster (2 or 4).
    pub size: u32,
}

/// Launch-time options that change code generation but not semantics.
#[derive(Clone, PartialEq, Debug, Default)]
pub struct KernelAttrs {
    /// Rasterize blocks in panels of this many block-rows for L2 reuse (TileLang's
    /// `T.use_swizzle`).
    pub swizzle_panel: Option<u32>,
    /// Ask the compiler to fit this many blocks on one SM (the second argument of CUDA's
    /// `__launch_bounds__`): it then caps registers per thread, trading spills for occupancy.
    pub min_blocks_per_sm: Option<u32>,
    /// Issue up to this many k16 steps of a wgmma gemm per `asm` statement (default 1). Fewer
    /// statements compile faster; measured on an H100, pairs cost the GEMM mainloop 2-12% and
    /// attention nothing.
    pub wgmma_batch: Option<u32>,
    /// Launch at most this many blocks, each looping over the logical grid's blocks (a
    /// persistent kernel); 0 asks the driver for one block per multiprocessor of the device.
    /// Lowered by the `persistent` pass (GPU targets); the CPU runs the logical grid.
    pub persistent_blocks: Option<u32>,
    /// Thread-block clusters (sm_90): consecutive blocks along a logical grid dim run as one
    /// cluster, and the pipeline multicasts the tiles they share (copies whose source does
    /// not depend on that dim's block index) — each block loads its slice into every block's
    /// shared memory. For persistent kernels (the `persistent` pass deals out clusters of
    /// tiles); the CPU and other targets run the logical grid as if unclustered.
    pub cluster: Option<ClusterAttr>,
    /// Symbolic sizes the launch guarantees to be multiples of a constant (the runtime checks
    /// them and falls back to a general variant of the kernel when they are not).
    pub dim_multiples: Vec<(Var, i64)>,
    /// Threads per warp (wave) the kernel was lowered for: 64 on AMD; `None` means 32.
    pub warp_size: Option<u32>,
    /// Remap block indices so that consecutive logical blocks run on the same one of this many
    /// accelerator dies (AMD's XCDs, each with its own L2; the hardware deals workgroups out
    /// to them round-robin). Applied before `swizzle_panel`.
    pub xcd_remap: Option<u32>,
    /// Hopper: input tensors the kernel only reads may be loaded by TMA even where their rows
    /// are not a multiple of 16 bytes; the runtime then stages each into a pitched copy (rows
    /// padded to 128-byte lines) before the launch and describes that copy to the TMA. Set on the
    /// variants built for sizes that break the 16-byte alignment (odd K).
    pub tma_pitched_inputs: bool,
    /// Fragment layouts chosen by layout inference (GPU targets), one per fragment buffer.
    pub fragments: Vec<(Buffer, crate::fragment::Fragment)>,
    /// Shared buffers with a chosen layout (swizzled tensor-core operand tiles, annotations),
    /// from layout inference; pipeline stages of a buffer keep its layout per stage.
    pub smem_layouts: Vec<(Buffer, tl_layout::ComposedLayout)>,
    /// The layouts of parallel loop nests, keyed by each nest's outermost loop variable, from
    /// layout inference.
    pub nest_layouts: Vec<(Var, crate::fragment::Fragment)>,
    /// A kernel that runs on several ranks (one per GPU) and addresses peers' copies of its
    /// symmetric buffers.
    pub dist: Option<DistAttrs>,
    /// Warp specialization (sm_90a TMA pipelines): `None` lets the compiler choose, `Some(false)`
    /// keeps every warp both loading and computing, `Some(true)` asks for a producer
    /// warpgroup (an error where the kernel cannot take one).
    pub warp_specialize: Option<bool>,
    /// A warp-specialized kernel's two consumer warpgroups take turns issuing their wgmma
    /// groups (the `warp_specialize` stage's ping-pong; `TILELANG_PINGPONG=1`/`=0` overrides
    /// it for every kernel). Asked for by the specialized fp8 GEMM with per-tensor promotion
    /// only: it measured faster there and slower for attention and the bf16 GEMM on an H100
    /// (docs/performance.md, session 17).
    pub ping_pong: bool,
    /// Registers per thread a warp-specialized kernel's producer warpgroup keeps
    /// (`setmaxnreg`, a multiple of 8 from 24; the consumers share the rest). `None`: the
    /// `warp_specialize` stage's default (`register_split`). `TILELANG_WS_PRODUCER_REGS`
    /// overrides it for every kernel.
    pub producer_registers: Option<u32>,
    /// Set by the `pipeline` stage when it split a loop into producer and consumer halves
    /// (marked by `Intrinsic::ProducerWarps`); the `warp_specialize` stage finishes the job.
    pub warp_specialized: Option<WarpSpecialized>,
    /// Hopper: input tensors (by buffer id) whose rows the runtime would stage for TMA (an
    /// odd row length) and which the kernel may copy into their pitched scratch itself,
    /// spread over its consumers' first k steps, instead of the runtime copying them before
    /// the launch. Set by the driver on the variants for odd sizes; the `warp_specialize`
    /// stage takes those it can (see `staged_rows`), the runtime stages the rest as before.
    pub stage_rows_in_kernel: Vec<u64>,
    /// The tensors the kernel stages itself (`stage_rows_in_kernel`), with the two global
    /// buffers the runtime passes for each after the tensor maps (`Abi::staged`).
    pub staged_rows: Vec<StagedRows>,
}

/// A tensor whose pitched copy the kernel writes itself: its consumers copy the tensor's
/// rows into `scratch` chunk by chunk (the k-extent of one pipeline stage each), and each
/// block adds one to `flags[c]` once its share of chunk `c` is written (a release at GPU
/// scope); the producer waits for every block's share before its TMA reads the chunk from
/// `scratch`. `flags[chunks]` counts the producers done with the flags: the last one zeroes
/// them all for the next launch. The runtime passes both (zeroed once when allocated) and
/// points the tensor's maps at `scratch`.
#[derive(Clone, PartialEq, Debug)]
pub struct StagedRows {
    /// The input tensor parameter.
    pub tensor: Buffer,
    /// `[rows, pitch]` of the tensor's dtype, `pitch` the row padded to 128-byte lines (what
    /// the runtime's staging pitch is).
    pub scratch: Buffer,
    /// `u32[chunks + 1]`.
    pub flags: Buffer,
}

/// A warp-specialized pipeline, as the `pipeline` stage leaves it for the `warp_specialize`
/// stage: the producer warpgroup is added after the kernel's own threads (which become the
/// consumers), and the barriers are initialized once per block (a persistent kernel's rounds
/// keep their phases running).
#[derive(Clone, PartialEq, Debug)]
pub struct WarpSpecialized {
    /// The kernel's threads before specialization: the consumer warps.
    pub consumer_threads: u32,
    /// Per stage: completes when the stage's tiles have landed (one arrival: the producer's
    /// `expect_tx`).
    pub full: Buffer,
    /// Per stage: completes when every consumer warp is done with the stage (one arrival per
    /// consumer warp).
    pub empty: Buffer,
    pub stages: u32,
    /// The iteration count carried across a persistent kernel's rounds (a local `i32[1]` each
    /// side keeps, starting at 0), so stage and phase keep counting; `None` when the pipeline
    /// runs once per block.
    pub counter: Option<Buffer>,
    /// Tiles the producer loads beside the stages, once a round (attention's Q): each one's
    /// `full` barrier (one arrival: the producer's `expect_tx`) and, in a persistent kernel,
    /// its `empty` barrier (one arrival per consumer warp).
    pub preloads: Vec<(Buffer, Option<Buffer>)>,
    /// A persistent kernel's round count, the preloads' phase (kept like `counter`).
    pub rounds: Option<Buffer>,
}

/// The registers per thread a block of `threads` threads may each hold: the 64K register
/// file shared out in the allocation unit of 8, at most 255. What the launch allocates to a
/// block (times `threads`), and so the pool a warp-specialized kernel's `setmaxnreg.inc`
/// draws from: 168 each for 384 threads, 64,512 in all.
pub fn launch_registers(threads: u32) -> u32 {
    (65536 / threads.max(1)).min(255) / 8 * 8
}

/// What a multi-rank kernel's code needs to address peers: every rank's symmetric heap is
/// mapped into one range at `base + r·heap_stride`, so rank `p`'s copy of an element is the
/// element's address plus `(p − rank)·heap_stride` bytes.
#[derive(Clone, PartialEq, Debug)]
pub struct DistAttrs {
    /// This rank (an i32 scalar parameter).
    pub rank: Var,
    /// How many ranks run the kernel (an i32 scalar parameter).
    pub num_ranks: Var,
    /// Bytes between consecutive ranks' heaps (an i64 scalar parameter).
    pub heap_stride: Var,
    /// The tensor parameters that live in the symmetric heap (by buffer id): the only ones a
    /// peer may be named for.
    pub symmetric: Vec<u64>,
    /// Peer tables instead of the flat heap (for symmetric memory that another library
    /// allocated, e.g. torch's `buffer_ptrs_dev`): per symmetric buffer (by id), an i64 tensor
    /// parameter of every rank's address of that buffer; rank `p`'s copy of an element is its
    /// address plus `table[p]` minus the parameter's own address. Empty: the flat heap
    /// (`heap_stride`).
    pub peer_tables: Vec<(u64, crate::buffer::Buffer)>,
    /// Symbolic sizes that count the ranks (a `[R, …]` buffer with a row per rank): a launch
    /// binds each to the same value as `num_ranks`, or is refused.
    pub rank_dims: Vec<Var>,
    /// Every access of a peer's copy goes through NVSHMEM's device library instead of an
    /// address (`put`/`get` chunks as `nvshmem_putmem`/`getmem`, flags as NVSHMEM atomics,
    /// a release as `nvshmem_quiet` first): the route for ranks whose memory no load or store
    /// reaches (other hosts). The symmetric buffers must then come from NVSHMEM's heap; the
    /// kernel links NVSHMEM's device archive and is printed as PTX only. The simulator runs
    /// it as the same kernel on addresses.
    pub nvshmem: bool,
}

impl DistAttrs {
    /// The first size that counts the ranks whose bound value (`value_of`) is not `ranks`,
    /// with that value: the launch check of the runtime and of the simulator.
    pub fn rank_dim_mismatch(
        &self,
        ranks: i64,
        value_of: impl Fn(&Var) -> Option<i64>,
    ) -> Option<(&Var, i64)> {
        self.rank_dims
            .iter()
            .find_map(|v| value_of(v).filter(|&got| got != ranks).map(|got| (v, got)))
    }
}

#[derive(Clone, PartialEq, Debug)]
pub struct Kernel {
    pub name: String,
    /// Symbolic sizes, bound at launch from the tensors' shapes.
    pub dims: Vec<Var>,
    pub params: Vec<Param>,
    /// Blocks along x, y, z (1 to 3 entries), expressions over dims and scalar params.
    pub grid: Vec<Expr>,
    /// The block index variables, one per grid entry.
    pub block_vars: Vec<Var>,
    pub threads: u32,
    pub body: Stmt,
    pub attrs: KernelAttrs,
}

impl Kernel {
    pub fn tensors(&self) -> impl Iterator<Item = (&Buffer, Role)> {
        self.params.iter().filter_map(|p| match p {
            Param::Tensor { buffer, role } => Some((buffer, *role)),
            Param::Scalar(_) => None,
        })
    }
    pub fn scalars(&self) -> impl Iterator<Item = &Var> {
        self.params.iter().filter_map(|p| match p {
            Param::Scalar(v) => Some(v),
            Param::Tensor { .. } => None,
        })
    }
    /// The same kernel with a new body.
    /// The inferred layout of a fragment buffer.
    pub fn fragment_layout(&self, b: &Buffer) -> Option<&crate::fragment::Fragment> {
        self.attrs
            .fragments
            .iter()
            .find(|(x, _)| x == b)
            .map(|(_, f)| f)
    }

    pub fn with_body(&self, body: Stmt) -> Kernel {
        Kernel {
            body,
            ..self.clone()
        }
    }
}
