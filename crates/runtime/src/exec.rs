//! Executables: a compiled kernel bound to a device, with argument checking.

use std::collections::HashMap;
use std::ffi::c_void;
use std::time::Duration;

use tl_codegen::{Abi, IntSlot};
use tl_ir::eval::{eval_int, Value};
use tl_ir::{Expr, ExprKind, Kernel, Param};

use crate::cpu::CpuModule;
use crate::cuda::{CudaKernel, ResourceUsage};
use crate::device::Device;
use crate::error::{Result, RuntimeError};
use crate::external::{ExternalTensor, Stream};
use crate::tensor::Tensor;

/// What the runtime knows of a kernel: its parameters, symbolic sizes and grid.
#[derive(Clone, Debug)]
pub struct Signature {
    pub name: String,
    pub params: Vec<Param>,
    pub dims: Vec<tl_ir::Var>,
    pub grid: Vec<Expr>,
    pub threads: u32,
    pub abi: Abi,
    /// A multi-rank kernel's rank, rank-count and heap-stride parameters (by index), and
    /// whether it addresses peers through tables: checked at each launch.
    pub dist: Option<DistParams>,
}

/// Where a multi-rank kernel's own scalars are among its parameters.
#[derive(Clone, Debug)]
pub struct DistParams {
    pub rank: usize,
    pub num_ranks: usize,
    pub heap_stride: usize,
    /// Peers are reached without `heap_stride`: through tables, or through NVSHMEM.
    pub tables: bool,
    /// The kernel's multi-rank attributes (its `rank_dims` must equal `num_ranks`).
    pub attrs: tl_ir::DistAttrs,
}

impl DistParams {
    fn of(k: &Kernel) -> Option<DistParams> {
        let d = k.attrs.dist.as_ref()?;
        let at = |v: &tl_ir::Var| {
            k.params
                .iter()
                .position(|p| matches!(p, Param::Scalar(s) if s == v))
        };
        Some(DistParams {
            rank: at(&d.rank)?,
            num_ranks: at(&d.num_ranks)?,
            heap_stride: at(&d.heap_stride)?,
            tables: !d.peer_tables.is_empty() || d.nvshmem,
            attrs: d.clone(),
        })
    }

    /// A launch on a rank whose heap is not set up (or with impossible rank arguments) would
    /// address garbage: refuse it with what to pass.
    fn check(&self, sig: &Signature, args: &[Arg]) -> Result<()> {
        let int = |i: usize| match args.get(i) {
            Some(Arg::Int(v)) => Some(*v),
            _ => None,
        };
        let (Some(rank), Some(ranks), Some(stride)) =
            (int(self.rank), int(self.num_ranks), int(self.heap_stride))
        else {
            return Ok(()); // bind_args reports the wrong kinds
        };
        let bad = |index: usize, reason: String| sig.bad_arg(index, reason);
        if ranks < 1 {
            return Err(bad(
                self.num_ranks,
                format!("{ranks} ranks: a job has at least one"),
            ));
        }
        if rank < 0 || rank >= ranks {
            return Err(bad(
                self.rank,
                format!("rank {rank} of {ranks}: ranks run from 0 to num_ranks - 1"),
            ));
        }
        if ranks > 1 && !self.tables && stride <= 0 {
            return Err(bad(
                self.heap_stride,
                format!(
                    "heap_stride {stride} with {ranks} ranks: this rank's symmetric heap is not set up (pass `SymmetricHeap::stride()` from tl_dist), or its ranks' copies are not one stride apart — a heap mapped by legacy CUDA IPC (TILELANG_DIST_IPC=legacy) or by another library: build the kernel with peer tables (`Kernel::with_peer_tables`) and pass `SymmetricHeap::peer_tables_for`"
                ),
            ));
        }
        Ok(())
    }

    /// Every size that counts the ranks must be the launch's `num_ranks`: a buffer with a row
    /// per rank sized for another job would be read past its end or half filled.
    fn check_rank_dims(
        &self,
        sig: &Signature,
        args: &[Arg],
        dims: &HashMap<String, i64>,
    ) -> Result<()> {
        let Some(Arg::Int(ranks)) = args.get(self.num_ranks) else {
            return Ok(());
        };
        let value_of = |v: &tl_ir::Var| dims.get(v.name()).copied();
        let Some((dim, v)) = self.attrs.rank_dim_mismatch(*ranks, value_of) else {
            return Ok(());
        };
        let name = dim.name();
        let holders: Vec<&str> = sig
            .params
            .iter()
            .filter(|p| match p {
                Param::Tensor { buffer, .. } => buffer
                    .shape()
                    .iter()
                    .any(|e| matches!(e.kind(), tl_ir::ExprKind::Var(x) if x.name() == name)),
                Param::Scalar(_) => false,
            })
            .map(|p| p.name())
            .collect();
        Err(sig.bad_arg(
            self.num_ranks,
            format!(
                "{ranks} ranks, but the tensors ({}) have {v} rows of ranks (`{name}`): size them for {ranks} ranks, or pass the job's rank count",
                holders.join(", ")
            ),
        ))
    }
}

impl Signature {
    /// The error for argument `index` of a launch, with the parameter's name.
    fn bad_arg(&self, index: usize, reason: String) -> RuntimeError {
        RuntimeError::BadArg {
            kernel: self.name.clone(),
            index,
            name: self
                .params
                .get(index)
                .map(|p| p.name().to_string())
                .unwrap_or_default(),
            reason,
        }
    }

    pub fn of(k: &Kernel) -> Signature {
        Signature {
            name: k.name.clone(),
            params: k.params.clone(),
            dims: k.dims.clone(),
            grid: k.grid.clone(),
            threads: k.threads,
            abi: Abi::of(k),
            dist: DistParams::of(k),
        }
    }
}

/// One launch argument.
#[derive(Clone, Copy, Debug)]
pub enum Arg<'a> {
    Tensor(&'a Tensor),
    /// Memory owned by another library (numpy, torch), passed by address.
    External(&'a ExternalTensor),
    Int(i64),
    Float(f64),
}

impl<'a> From<&'a ExternalTensor> for Arg<'a> {
    fn from(t: &'a ExternalTensor) -> Arg<'a> {
        Arg::External(t)
    }
}

/// What `bind_args` checks of a tensor argument, whoever owns its memory.
struct TensorView<'a> {
    dtype: tl_ir::DType,
    shape: &'a [usize],
    device: Device,
    usable: bool,
    contiguous: bool,
    ptr: *mut c_void,
}

impl<'a> TensorView<'a> {
    fn of(a: &Arg<'a>, device: Device) -> Option<TensorView<'a>> {
        match *a {
            Arg::Tensor(t) => Some(TensorView {
                dtype: t.dtype(),
                shape: t.shape(),
                device: t.device(),
                usable: t.device() == device,
                contiguous: t.is_contiguous(),
                ptr: t.raw_ptr(),
            }),
            Arg::External(t) => Some(TensorView {
                dtype: t.dtype(),
                shape: t.shape(),
                device: t.device(),
                usable: t.usable_on(device),
                contiguous: t.is_contiguous(),
                ptr: t.ptr(),
            }),
            Arg::Int(_) | Arg::Float(_) => None,
        }
    }
}

impl<'a> From<&'a Tensor> for Arg<'a> {
    fn from(t: &'a Tensor) -> Arg<'a> {
        Arg::Tensor(t)
    }
}

/// Where the time of `compile` went.
#[derive(Clone, Debug, Default)]
pub struct CompileStats {
    /// The compiled artifact came from the disk cache.
    pub cache_hit: bool,
    /// Verification and passes.
    pub lower: Duration,
    /// Source generation.
    pub codegen: Duration,
    /// The native compiler (C compiler, NVRTC, clang for HIP).
    pub compile: Duration,
    /// Loading the artifact.
    pub load: Duration,
    /// Everything, end to end.
    pub total: Duration,
    /// Why a CUDA kernel was built from CUDA C++ where PTX was asked for (by default or by
    /// `TILELANG_BACKEND=ptx`): nvJitLink missing, or a construct the PTX printer lacks.
    pub fallback: Option<String>,
    /// The CUDA driver assembled the kernel's PTX when it loaded it (whole-program PTX, which
    /// only ptxas assembles ahead of time, where no ptxas was found or its cubin would not
    /// load): its result lives in the driver's cache, not ours.
    pub driver_jit: bool,
}

pub(crate) enum Module {
    Cpu(CpuModule),
    Cuda(CudaKernel),
    /// Thread-level IR run by the simulator.
    Sim(Box<tl_ir::Kernel>),
    /// A code object loaded on an AMD GPU through HIP.
    Hip(crate::hip::HipKernel),
}

pub struct Executable {
    sig: Signature,
    device: Device,
    module: Module,
    stats: CompileStats,
    source: Option<String>,
    fallback: Option<Box<Fallback>>,
    pitch_scratch: PitchScratch,
    /// Which variant of its kernel this is, for reports (`aligned(K%8)`, `class(K%1)`…).
    variant: String,
    bind_memo: BindMemo,
}

/// A specialized executable's general twin: the kernel was compiled assuming some symbolic
/// sizes are multiples of a constant (so copies use full-width vectors and no run-time
/// alignment branches); launches whose sizes break that run this instead, built on first use.
/// Builds the variant of an executable for sizes that are multiples of (dim, multiple) pairs.
type BuildVariant = dyn Fn(&[(usize, i64)]) -> Result<Executable> + Send + Sync;

pub struct Fallback {
    /// (index into the signature's dims, the multiple the specialized variant assumes)
    pub requires: Vec<(usize, i64)>,
    /// Builds the variant for sizes that are multiples of the given (dim, multiple) pairs
    /// (each a power of two below the specialized one; 1: nothing assumed).
    build: Box<BuildVariant>,
    /// One slot per alignment class (see [`Fallback::class`]), built when first launched.
    built: Vec<std::sync::OnceLock<std::result::Result<Executable, String>>>,
}

impl Fallback {
    /// The levels a dim with multiple `m` can fall to: `m/2, m/4, …, 1` (and `m` itself when
    /// another dim is the one that broke the specialization).
    fn levels(m: i64) -> usize {
        (m.max(1).trailing_zeros() + 1) as usize
    }

    /// The alignment class of bound sizes `ints` whose tensors start at addresses that are
    /// multiples of `ptr_align` bytes (16 or a smaller power of two): per required dim, the
    /// largest power of two up to its multiple that divides it and that the addresses allow
    /// (a dim's multiple is the elements of 16 bytes); as a slot index and the (dim, multiple)
    /// pairs the class's variant may assume.
    fn class(&self, ints: &[i64], ptr_align: i64) -> (usize, Vec<(usize, i64)>) {
        let mut index = 0usize;
        let mut assumed = vec![];
        for &(d, m) in &self.requires {
            let v = ints.get(d).copied().unwrap_or(0);
            let cap = (ptr_align * m / 16).max(1);
            let mut a = m.max(1);
            while a > 1 && (v % a != 0 || a > cap) {
                a /= 2;
            }
            index = index * Fallback::levels(m) + a.trailing_zeros() as usize;
            assumed.push((d, a));
        }
        (index, assumed)
    }
}

/// Whether every tensor parameter's row length (its last dim) is one of the sizes `requires`
/// names (by index into the signature's dims).
fn rows_vary_with(sig: &Signature, requires: &[(usize, i64)]) -> bool {
    sig.params.iter().all(|p| match p {
        Param::Tensor { buffer, .. } => buffer.shape().last().is_none_or(|last| {
            last.as_var()
                .and_then(|v| sig.dims.iter().position(|d| d == v))
                .is_some_and(|i| requires.iter().any(|&(d, _)| d == i))
        }),
        _ => true,
    })
}

/// The largest power of two up to 16 that divides the address of every tensor argument.
fn pointer_alignment(args: &[BoundArg]) -> i64 {
    let mut p = 16i64;
    for a in args {
        if let BoundArg::Ptr(x) = a {
            let addr = *x as usize as u64;
            while p > 1 && !addr.is_multiple_of(p as u64) {
                p /= 2;
            }
        }
    }
    p
}

/// One checked argument, in parameter order.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BoundArg {
    /// A tensor's data: a host pointer on the CPU, a device address on a GPU.
    Ptr(*mut c_void),
    /// An integer or bool scalar.
    Int(i64),
    /// A float scalar.
    Float(f64),
}

/// Launch arguments after checking: pointers, integer and float slots (the CPU ABI), the
/// arguments in parameter order and the symbolic sizes in declaration order (the GPU ABI),
/// and the grid.
#[derive(Clone, Debug)]
pub struct Bound {
    pub ptrs: Vec<*mut c_void>,
    pub ints: Vec<i64>,
    pub floats: Vec<f64>,
    pub grid: [i64; 3],
    /// The symbolic sizes by name, for multi-rank kernels (empty otherwise).
    pub dims: HashMap<String, i64>,
    pub args: Vec<BoundArg>,
    pub dim_values: Vec<i64>,
    /// Each parameter's shape (empty for scalars): tensor maps describe the tensors.
    pub shapes: Vec<Vec<i64>>,
}

/// The stages of a launch, in order, as `Executable::run_args_marked` reports them done.
#[derive(Clone, Copy)]
enum LaunchStage {
    Bound = 0,
    Packed = 1,
    Launched = 2,
}

/// Where a launch's host time goes ([`Executable::host_launch_profile`]), microseconds per
/// launch.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HostLaunchProfile {
    /// Checking and binding the arguments, and choosing the variant.
    pub bind_us: f64,
    /// Packing the parameter block (tensor maps included).
    pub pack_us: f64,
    /// The launch call (the driver's on a GPU; the run on the CPU and in the simulator).
    pub driver_us: f64,
}

/// Kind of value in a [`ParamBlock`] slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// A device pointer (8 bytes).
    Ptr,
    /// An integer, stored sign-extended to 8 bytes so that a kernel parameter of any integer
    /// width (int8_t .. int64_t, read from the start of the slot on a little-endian host)
    /// sees the same value.
    Int,
    /// A `float`, in the slot's low 4 bytes.
    F32,
    /// A `double`.
    F64,
    /// A 128-byte tensor map (`CUtensorMap`); the slot holds its index in the block's maps.
    TensorMap,
}

/// A `CUtensorMap` as the driver builds it and a kernel takes it by value: 128 bytes, 64-byte
/// aligned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct TensorMapBlob(pub [u64; 16]);

/// What a tensor map describes: a row-major tensor (`dims` outermost first) of `elem_bytes`
/// elements at `ptr`, read in boxes of `box_dims` with a shared-memory swizzle of `swizzle`
/// bytes; its rows `row_pitch` bytes apart when staged pitched (else packed).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorMapRequest {
    pub ptr: u64,
    pub elem_bytes: usize,
    pub dims: Vec<i64>,
    pub box_dims: Vec<u32>,
    pub swizzle: u32,
    pub row_pitch: Option<usize>,
}

/// A pitched copy made on the launch's stream before every launch: `height` rows of `width`
/// bytes from `src` (rows `src_pitch` apart) to `dst` (rows `dst_pitch` apart). TMA needs
/// tensor rows that are whole 16-byte units; an input whose rows are not (an odd K) is
/// staged into a copy whose rows are padded to whole 128-byte lines, and the tensor map reads
/// that (see [`staging_pitch`] for the other inputs staged, and `crate::pitched` for the copy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Staging {
    pub src: u64,
    pub dst: u64,
    pub src_pitch: usize,
    pub dst_pitch: usize,
    pub width: usize,
    pub height: usize,
}

/// Scratch device memory for pitched stagings, one slot per tensor map of an executable and
/// per stream it is launched on; held locked from packing through the launch, so launches
/// from several threads cannot interleave their copies into one slot. Launches on one stream
/// run in order, so they may share a slot; launches on two streams may run at once (the ranks
/// of a multi-rank job in one process, a caller's streams beside the runtime's), so each
/// stream has its own — a shared slot let one launch's staging overwrite the operand the
/// other's kernel was reading (found with two ranks on one GPU, docs/gpu-notes.md run 21d).
#[derive(Default)]
pub(crate) struct PitchScratch(
    std::sync::Mutex<std::collections::HashMap<Option<usize>, Vec<Option<crate::cuda::DeviceBuf>>>>,
);

/// One stream's scratch slots, with the lock on all of them held.
pub(crate) struct StreamScratch<'a> {
    all: std::sync::MutexGuard<
        'a,
        std::collections::HashMap<Option<usize>, Vec<Option<crate::cuda::DeviceBuf>>>,
    >,
    key: Option<usize>,
}

impl StreamScratch<'_> {
    pub(crate) fn slots(&mut self) -> &mut Vec<Option<crate::cuda::DeviceBuf>> {
        self.all.entry(self.key).or_default()
    }
}

/// Which stream's slots a launch on `stream` stages into (`None`: the runtime's).
pub(crate) fn scratch_key(stream: Stream) -> Option<usize> {
    match stream {
        Stream::Runtime => None,
        Stream::Raw(s) => Some(s),
    }
}

/// Kernel parameters for `cuLaunchKernel`: one 8-byte slot per parameter, in the kernel's
/// order. The driver copies from each slot as many bytes as the kernel's parameter has, so
/// each slot holds its value in its low bytes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ParamBlock {
    slots: Vec<u64>,
    kinds: Vec<ParamKind>,
    maps: Vec<TensorMapBlob>,
    stagings: Vec<Staging>,
    zeroings: Vec<(u64, usize)>,
    coresident: bool,
}

impl ParamBlock {
    pub fn push_u64(&mut self, v: u64) {
        self.slots.push(v);
        self.kinds.push(ParamKind::Ptr);
    }
    pub fn push_i64(&mut self, v: i64) {
        self.slots.push(v as u64);
        self.kinds.push(ParamKind::Int);
    }
    pub fn push_f32(&mut self, v: f32) {
        self.slots.push(v.to_bits() as u64);
        self.kinds.push(ParamKind::F32);
    }
    pub fn push_f64(&mut self, v: f64) {
        self.slots.push(v.to_bits());
        self.kinds.push(ParamKind::F64);
    }
    pub fn push_tensor_map(&mut self, m: TensorMapBlob) {
        self.slots.push(self.maps.len() as u64);
        self.kinds.push(ParamKind::TensorMap);
        self.maps.push(m);
    }
    /// The pitched copies to make before each launch.
    pub fn stagings(&self) -> &[Staging] {
        &self.stagings
    }
    /// Device buffers (address, 32-bit words) to zero on the launch's stream before it: the
    /// flags of a kernel that stages rows itself, freshly allocated (the kernel zeroes them
    /// again for the next launch).
    pub fn zeroings(&self) -> &[(u64, usize)] {
        &self.zeroings
    }
    /// Whether every block of the launch must be resident at once (a kernel that stages
    /// rows itself: each block waits for every block's share of the copy).
    pub fn needs_coresident_blocks(&self) -> bool {
        self.coresident
    }
    pub fn slots(&self) -> &[u64] {
        &self.slots
    }
    pub fn kinds(&self) -> &[ParamKind] {
        &self.kinds
    }
    pub fn len(&self) -> usize {
        self.slots.len()
    }
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
    /// The `void**` array `cuLaunchKernel` takes: a pointer to each slot. Valid while `self`
    /// is neither moved nor modified.
    pub(crate) fn pointers(&mut self) -> Vec<*mut c_void> {
        let maps: Vec<*mut c_void> = self
            .maps
            .iter_mut()
            .map(|m| m as *mut TensorMapBlob as *mut c_void)
            .collect();
        self.slots
            .iter_mut()
            .zip(&self.kinds)
            .map(|(s, k)| match k {
                ParamKind::TensorMap => maps[*s as usize],
                _ => s as *mut u64 as *mut c_void,
            })
            .collect()
    }
}

/// Pack checked arguments per the GPU kernel ABI (docs/design/thread-ir.md, "Kernel ABI on the
/// GPU"): each parameter in order — a tensor as its device pointer, a scalar as its compute
/// type (integers of any width, bools as 0/1, `float` for f32 and narrower floats, `double`
/// for f64) — then each symbolic size as `int32_t`. Integer scalars outside their dtype's range
/// are rejected rather than silently wrapped.
pub fn pack_gpu_params(sig: &Signature, b: &Bound) -> Result<ParamBlock> {
    pack_gpu_params_staged(sig, b, None)
}

/// Where a TMA-read input goes through a pitched copy, and that copy's row pitch.
///
/// TMA needs rows of whole 16-byte units: other rows (an odd K) are always staged. Rows that
/// are 16-byte units but do not start on 128-byte lines cost TMA about three L2 requests per
/// box row instead of one; with one such operand a GEMM keeps its speed (4096×4096×4104 NN on
/// an H100: 698 TFLOP/s, 629 staged), with two it is bound by the requests (NT: 451, 559
/// staged), so those are staged when `line_misaligned` (how many inputs of the launch are so)
/// is at least two. Staged rows are padded to whole lines. `TILELANG_TMA_PITCH_ALIGN=16`
/// stages only what TMA needs, `=128` every input whose rows miss the lines.
pub(crate) fn staging_pitch(row: usize, ptr: u64, line_misaligned: usize) -> Option<usize> {
    let staged = padded_row(row);
    // TMA takes only 16-byte aligned tensors (a view at an offset may start anywhere).
    if !row.is_multiple_of(16) || !ptr.is_multiple_of(16) {
        return Some(staged);
    }
    if !misses_lines(row, ptr) {
        return None;
    }
    let wanted = match line_pitch_knob() {
        Some(all) => all,
        None => line_misaligned >= 2,
    };
    wanted.then_some(staged)
}

/// A staged row's pitch: `row` bytes padded to whole 128-byte lines (what the `stage_rows`
/// stage assumes for the scratch of a kernel that stages its rows itself, too).
fn padded_row(row: usize) -> usize {
    row.next_multiple_of(128)
}

/// `TILELANG_TMA_PITCH_ALIGN`, read once: `Some(false)` for 16 (stage only what TMA needs),
/// `Some(true)` for 128 (every input whose rows miss the lines), `None` for the rule.
fn line_pitch_knob() -> Option<bool> {
    static K: std::sync::OnceLock<Option<bool>> = std::sync::OnceLock::new();
    *K.get_or_init(
        || match std::env::var("TILELANG_TMA_PITCH_ALIGN").ok().as_deref() {
            Some("16") => Some(false),
            Some("128") => Some(true),
            _ => None,
        },
    )
}

/// Whether a tensor map reads a 16-byte-unit tensor whose rows miss 128-byte lines.
fn misses_lines(row: usize, ptr: u64) -> bool {
    row.is_multiple_of(16) && !(row.is_multiple_of(128) && ptr.is_multiple_of(128))
}

/// What packing needs of the tensor behind a tensor map: its address, element size, shape,
/// row bytes, and whether the kernel only reads it.
#[derive(Clone, Copy)]
struct MapTensor<'a> {
    ptr: u64,
    elem_bytes: usize,
    dims: &'a Vec<i64>,
    row: usize,
    is_input: bool,
}

/// Scratch slots for pitched stagings and the device they live on.
pub(crate) type ScratchSlots<'a> = (
    &'a mut Vec<Option<crate::cuda::DeviceBuf>>,
    &'static crate::cuda::CudaDevice,
);

/// [`pack_gpu_params`], staging TMA inputs whose rows are not whole 16-byte units into
/// pitched copies in `scratch` (see [`Staging`]).
pub(crate) fn pack_gpu_params_staged(
    sig: &Signature,
    b: &Bound,
    mut scratch: Option<ScratchSlots>,
) -> Result<ParamBlock> {
    let mut p = ParamBlock::default();
    let bad = |index: usize, reason: String| sig.bad_arg(index, reason);
    if b.args.len() != sig.params.len() {
        return Err(RuntimeError::ArgCount {
            kernel: sig.name.clone(),
            expected: sig.params.len(),
            got: b.args.len(),
            names: sig
                .params
                .iter()
                .map(|p| p.name())
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    for (i, (param, arg)) in sig.params.iter().zip(&b.args).enumerate() {
        match (param, *arg) {
            (Param::Tensor { .. }, BoundArg::Ptr(ptr)) => p.push_u64(ptr as usize as u64),
            (Param::Scalar(v), a) => {
                let dt = v.dtype();
                let x = match a {
                    BoundArg::Int(x) => x as f64,
                    BoundArg::Float(x) => x,
                    BoundArg::Ptr(_) => return Err(bad(i, format!("expected a {dt} scalar"))),
                };
                if dt == tl_ir::DType::F64 {
                    p.push_f64(x);
                } else if dt.is_float() {
                    p.push_f32(x as f32);
                } else if dt.is_bool() {
                    p.push_i64((x != 0.0) as i64);
                } else {
                    let BoundArg::Int(n) = a else {
                        return Err(bad(i, format!("expected an integer for a {dt} scalar")));
                    };
                    if let Some((lo, hi)) = dt.int_range() {
                        if (n as i128) < lo || (n as i128) > hi {
                            return Err(bad(
                                i,
                                format!("{n} does not fit in {dt} (range {lo}..={hi})"),
                            ));
                        }
                    }
                    p.push_i64(n);
                }
            }
            (Param::Tensor { .. }, _) => return Err(bad(i, "expected a tensor".into())),
        }
    }
    for (d, &n) in sig.dims.iter().zip(&b.dim_values) {
        if n < i32::MIN as i64 || n > i32::MAX as i64 {
            return Err(RuntimeError::Launch(format!(
                "kernel `{}`: the size `{}` is {n}, which does not fit the int32_t the GPU ABI passes sizes as",
                sig.name,
                d.name()
            )));
        }
        p.push_i64(n);
    }
    let mut tensors = Vec::with_capacity(sig.abi.tmaps.len());
    for t in &sig.abi.tmaps {
        let (Some(BoundArg::Ptr(ptr)), Some(Param::Tensor { buffer, role }), Some(dims)) = (
            b.args.get(t.param),
            sig.params.get(t.param),
            b.shapes.get(t.param),
        ) else {
            return Err(bad(
                t.param,
                "expected a tensor (for its TMA descriptor)".into(),
            ));
        };
        let elem_bytes = buffer.dtype().bytes();
        tensors.push(MapTensor {
            ptr: *ptr as usize as u64,
            elem_bytes,
            dims,
            row: dims.last().copied().unwrap_or(1).max(0) as usize * elem_bytes,
            is_input: *role == tl_ir::Role::Input,
        });
    }
    // The tensors the kernel stages itself (`Abi::staged`): their pitched scratch (which
    // their maps describe) and flags, in slots after the maps', by parameter index.
    let mut in_kernel: Vec<InKernelStaging> = vec![];
    for (j, &param) in sig.abi.staged.iter().enumerate() {
        let (Some(BoundArg::Ptr(_)), Some(Param::Tensor { buffer, .. }), Some(dims)) = (
            b.args.get(param),
            sig.params.get(param),
            b.shapes.get(param),
        ) else {
            return Err(bad(
                param,
                "expected a tensor (for its in-kernel staging)".into(),
            ));
        };
        let Some((slots, dev)) = scratch.as_mut() else {
            return Err(bad(
                param,
                "the kernel stages its rows itself and this launch path cannot give it scratch memory".into(),
            ));
        };
        let eb = buffer.dtype().bytes();
        let (rows, width) = match dims.as_slice() {
            [r, w] => ((*r).max(0) as usize, (*w).max(0) as usize),
            _ => {
                return Err(bad(
                    param,
                    "expected a two-dimensional tensor (for its in-kernel staging)".into(),
                ))
            }
        };
        let pitch = padded_row(width * eb);
        let words = in_kernel_flag_words(rows, width);
        let base = sig.abi.tmaps.len() + 2 * j;
        if slots.len() < base + 2 {
            slots.resize_with(base + 2, || None);
        }
        if slots[base]
            .as_ref()
            .is_none_or(|s| s.bytes() < pitch * rows.max(1))
        {
            slots[base] = Some(crate::cuda::DeviceBuf::alloc(dev, pitch * rows.max(1))?);
        }
        if slots[base + 1]
            .as_ref()
            .is_none_or(|s| s.bytes() < 4 * words)
        {
            let f = crate::cuda::DeviceBuf::alloc(dev, 4 * words)?;
            p.zeroings.push((f.ptr(), words));
            slots[base + 1] = Some(f);
        }
        let ptr = |i: usize| slots[i].as_ref().map(|s| s.ptr()).unwrap_or_default();
        in_kernel.push(InKernelStaging {
            param,
            scratch: ptr(base),
            flags: ptr(base + 1),
            pitch,
        });
    }
    // The launch's TMA-read inputs whose rows miss 128-byte lines (see `staging_pitch`).
    let line_misaligned = tensors
        .iter()
        .filter(|m| m.is_input && m.dims.len() >= 2 && misses_lines(m.row, m.ptr))
        .count();
    for (i_map, (t, m)) in sig.abi.tmaps.iter().zip(&tensors).enumerate() {
        let MapTensor {
            mut ptr,
            elem_bytes,
            dims,
            row,
            is_input,
        } = *m;
        let mut row_pitch = None;
        let pitch = if let Some(s) = in_kernel.iter().find(|s| s.param == t.param) {
            // The kernel copies the rows into its scratch itself; its maps read them there.
            ptr = s.scratch;
            row_pitch = Some(s.pitch);
            None
        } else {
            match (dims.len() >= 2, is_input) {
                (true, true) => staging_pitch(row, ptr, line_misaligned),
                (true, false) if !row.is_multiple_of(16) => {
                    return Err(bad(
                    t.param,
                    format!("its rows are {row} bytes and TMA needs whole 16-byte units; the kernel writes it, so no pitched copy can stand in for it (compile with TILELANG_TMA=0 and report it)"),
                ));
                }
                _ => None,
            }
        };
        // A copy only for speed is skipped where the launch path cannot stage.
        let pitch = pitch
            .filter(|_| scratch.is_some() || !row.is_multiple_of(16) || !ptr.is_multiple_of(16));
        if let Some(pitch) = pitch {
            let Some((slots, dev)) = scratch.as_mut() else {
                return Err(bad(
                    t.param,
                    format!("its rows are {row} bytes and TMA needs whole 16-byte units; this launch path cannot stage a pitched copy"),
                ));
            };
            let height: usize = dims[..dims.len() - 1]
                .iter()
                .map(|&d| d.max(0) as usize)
                .product();
            let need = pitch * height.max(1);
            if slots.len() <= i_map {
                slots.resize_with(i_map + 1, || None);
            }
            if slots[i_map].as_ref().is_none_or(|s| s.bytes() < need) {
                slots[i_map] = Some(crate::cuda::DeviceBuf::alloc(dev, need)?);
            }
            let dst = slots[i_map].as_ref().map(|s| s.ptr()).unwrap_or_default();
            p.stagings.push(Staging {
                src: ptr,
                dst,
                src_pitch: row,
                dst_pitch: pitch,
                width: row,
                height,
            });
            ptr = dst;
            row_pitch = Some(pitch);
        }
        let req = TensorMapRequest {
            ptr,
            elem_bytes,
            dims: dims.clone(),
            box_dims: t.box_dims.clone(),
            swizzle: t.swizzle,
            row_pitch,
        };
        let m = crate::tensor_map::encode_tensor_map(&req).map_err(|e| bad(t.param, e))?;
        p.push_tensor_map(m);
    }
    p.coresident = !in_kernel.is_empty();
    for s in &in_kernel {
        p.push_u64(s.scratch);
        p.push_u64(s.flags);
    }
    Ok(p)
}

/// A tensor the kernel stages itself, as a launch passes it: its parameter index, its
/// scratch and flags, and the scratch's row pitch in bytes.
struct InKernelStaging {
    param: usize,
    scratch: u64,
    flags: u64,
    pitch: usize,
}

/// Words of flags a tensor of `rows × width` staged in the kernel needs: one per chunk (a
/// pipeline stage's k extent along its larger dim, at least 16 elements: the `stage_rows`
/// stage refuses narrower boxes) and one more for the count of blocks done.
pub(crate) fn in_kernel_flag_words(rows: usize, width: usize) -> usize {
    rows.max(width) / 16 + 2
}

impl Executable {
    pub(crate) fn new(
        sig: Signature,
        device: Device,
        module: Module,
        stats: CompileStats,
        source: Option<String>,
    ) -> Executable {
        Executable {
            sig,
            device,
            module,
            stats,
            source,
            fallback: None,
            pitch_scratch: PitchScratch::default(),
            variant: String::new(),
            bind_memo: BindMemo::default(),
        }
    }

    /// Name the variant this executable is (see [`variant`](Self::variant)).
    pub fn with_variant_note(mut self, note: String) -> Executable {
        self.variant = note;
        self
    }

    /// Which variant of the kernel runs these arguments, and why: `aligned(…)` (the sizes
    /// are the multiples the kernel was specialized for), `class(…)` (the variant for the
    /// sizes' alignment class, with `+pitched-tma` where odd rows load by TMA from pitched
    /// copies), or `general` (a kernel with no specialization).
    pub fn variant(&self, args: &[Arg]) -> Result<String> {
        let v = self.variant_for(args)?;
        Ok(if v.variant.is_empty() {
            "general".to_string()
        } else {
            v.variant.clone()
        })
    }

    /// Attach the general variant used when a launch's sizes are not the multiples this
    /// executable was specialized for.
    ///
    /// A launch whose sizes break the specialization runs a variant for its *alignment class*:
    /// per required dim, the largest power of two up to the multiple that divides the size
    /// (a bf16 row of 4100 elements is 8-byte aligned: 8-byte vector copies, not element by
    /// element). `build` makes the variant for a class, given the (dim, multiple) pairs it may
    /// assume; each class is built once, when first launched.
    pub fn with_fallback(
        mut self,
        requires: Vec<(usize, i64)>,
        build: impl Fn(&[(usize, i64)]) -> Result<Executable> + Send + Sync + 'static,
    ) -> Executable {
        let slots: usize = requires.iter().map(|&(_, m)| Fallback::levels(m)).product();
        self.fallback = Some(Box::new(Fallback {
            requires,
            build: Box::new(build),
            built: (0..slots).map(|_| std::sync::OnceLock::new()).collect(),
        }));
        self
    }

    /// The executable that runs these arguments: this one, or its general fallback when the
    /// sizes break the specialization (built now if it was not yet).
    pub fn variant_for(&self, args: &[Arg]) -> Result<&Executable> {
        if self.fallback.is_none() {
            return Ok(self);
        }
        self.variant_for_bound(&self.bind(args)?)
    }

    /// [`variant_for`](Self::variant_for) of arguments this executable has bound already.
    fn variant_for_bound(&self, b: &Bound) -> Result<&Executable> {
        // A GPU variant's vectors and tensor maps also assume 16-byte aligned tensors; a view
        // that starts elsewhere (a torch slice at an offset) takes the class its address
        // allows instead of faulting — where every tensor's rows run along a size the classes
        // vary; a static row length is assumed aligned, so such a launch is refused instead,
        // as is a multi-rank kernel's (`put_block` and friends choose 16-byte accesses at run
        // time from the offsets and the count only).
        let ptr_align = match self.module {
            Module::Cuda(_) | Module::Hip(_) => pointer_alignment(&b.args),
            _ => 16,
        };
        if ptr_align < 16 && (self.sig.dist.is_some() || !self.classes_cover_every_row()) {
            if let Some(i) = b
                .args
                .iter()
                .position(|a| matches!(a, BoundArg::Ptr(x) if !(*x as usize).is_multiple_of(16)))
            {
                return Err(self.sig.bad_arg(
                    i,
                    if self.sig.dist.is_some() {
                        "it starts at an address that is not a multiple of 16 bytes (a view at an offset?), and a multi-rank kernel's copies assume 16-byte aligned tensors: pass an aligned copy (`x.clone()` in torch)".into()
                    } else {
                        "it starts at an address that is not a multiple of 16 bytes (a view at an offset?), and this kernel's static row lengths let it assume 16-byte aligned rows: pass an aligned copy (`x.clone()` in torch), or make the row length a symbolic size".into()
                    },
                ));
            }
        }
        let Some(fb) = &self.fallback else {
            return Ok(self);
        };
        let fits = ptr_align == 16
            && fb
                .requires
                .iter()
                .all(|&(d, m)| b.ints.get(d).is_some_and(|v| v % m == 0));
        if fits {
            return Ok(self);
        }
        let (index, assumed) = fb.class(&b.ints, ptr_align);
        let Some(slot) = fb.built.get(index) else {
            return Err(RuntimeError::Launch(format!(
                "kernel `{}`: no variant slot for alignment class {index}",
                self.sig.name
            )));
        };
        match slot.get_or_init(|| (fb.build)(&assumed).map_err(|e| e.to_string())) {
            Ok(e) => Ok(e),
            Err(msg) => Err(RuntimeError::Launch(format!(
                "kernel `{}`: building the variant for these sizes failed: {msg}",
                self.sig.name
            ))),
        }
    }

    /// Whether each tensor parameter's row length (its last dim) is a size the alignment
    /// classes vary, so that a class for a smaller alignment exists for every tensor.
    fn classes_cover_every_row(&self) -> bool {
        self.fallback
            .as_ref()
            .is_some_and(|fb| rows_vary_with(&self.sig, &fb.requires))
    }

    pub fn signature(&self) -> &Signature {
        &self.sig
    }
    pub fn device(&self) -> Device {
        self.device
    }
    pub fn compile_stats(&self) -> &CompileStats {
        &self.stats
    }
    pub fn stats_mut(&mut self) -> &mut CompileStats {
        &mut self.stats
    }
    /// The generated source, when it was generated in this process (not on a cache hit).
    pub fn source(&self) -> Option<&str> {
        self.source.as_deref()
    }

    /// Registers, local memory (spills), shared memory and the NVRTC log of a CUDA kernel;
    /// for a HIP kernel, registers, spills, scratch, LDS and the ISA report from clang's
    /// assembly, when the compile callback reported them (the driver's does, also on a cache
    /// hit); `None` on the CPU and the simulator.
    pub fn resource_usage(&self) -> Option<&ResourceUsage> {
        match &self.module {
            Module::Cpu(_) | Module::Sim(_) => None,
            Module::Cuda(k) => Some(k.usage()),
            Module::Hip(k) => k.usage(),
        }
    }

    /// The compiler's log (NVRTC, with ptxas's resource report; for HIP, the ISA report), when
    /// there is one.
    pub fn compile_log(&self) -> Option<&str> {
        self.resource_usage().map(|u| u.log.as_str())
    }

    /// Wait until launches of this executable's device have finished (GPU launches are
    /// asynchronous; CPU ones are not). Errors from earlier launches surface here.
    pub fn synchronize(&self) -> Result<()> {
        match &self.module {
            Module::Cpu(_) | Module::Sim(_) => Ok(()),
            Module::Cuda(k) => k.device().synchronize(),
            Module::Hip(k) => k.device().synchronize(),
        }
    }

    /// [`synchronize`](Self::synchronize), giving up after `limit`: `Ok(false)` while the
    /// device still runs (e.g. a multi-rank kernel waiting on a peer that died). The CPU and
    /// the simulator run synchronously: always `Ok(true)`.
    pub fn synchronize_within(&self, limit: std::time::Duration) -> Result<bool> {
        match &self.module {
            Module::Cpu(_) | Module::Sim(_) => Ok(true),
            Module::Cuda(k) => k.device().synchronize_within(limit),
            Module::Hip(k) => k.device().synchronize().map(|_| true),
        }
    }

    /// Run once and time the launch alone (CUDA events around it, no cache flush), waiting at
    /// most `limit` for it: `Ok(Some(ms))`, or `Ok(None)` when it still runs after `limit`.
    /// For kernels that must be timed one call at a time, e.g. multi-rank kernels with a host
    /// barrier between calls. Elsewhere than on a CUDA GPU the host clock times the call.
    pub fn run_timed(&self, args: &[Arg], limit: std::time::Duration) -> Result<Option<f64>> {
        let b = self.bind(args)?;
        let exe = self.variant_for_bound(&b)?;
        if !std::ptr::eq(exe, self) {
            return exe.run_timed(args, limit);
        }
        match &self.module {
            Module::Cuda(k) => {
                let (mut scratch, dev) = self.scratch_slots(k, Stream::Runtime);
                let mut p = pack_gpu_params_staged(&self.sig, &b, Some((scratch.slots(), dev)))?;
                k.launch_timed(&mut p, b.grid, self.sig.threads, limit)
            }
            _ => {
                let t = std::time::Instant::now();
                self.run_args(args)?;
                self.synchronize()?;
                Ok(Some(t.elapsed().as_secs_f64() * 1e3))
            }
        }
    }

    pub(crate) fn module(&self) -> &Module {
        &self.module
    }

    /// Run with tensors only (kernels without scalar parameters).
    pub fn run(&self, tensors: &[&Tensor]) -> Result<()> {
        let args: Vec<Arg> = tensors.iter().map(|t| Arg::Tensor(t)).collect();
        self.run_args(&args)
    }

    /// Run with tensors and scalars, in parameter order. On the CPU this returns when the
    /// kernel has finished; on a GPU the launch is queued on the device's stream (reading a
    /// result, e.g. `to_f64_vec`, waits for it, and [`synchronize`](Self::synchronize) does
    /// explicitly).
    pub fn run_args(&self, args: &[Arg]) -> Result<()> {
        self.run_args_on(args, Stream::Runtime)
    }

    /// [`run_args`](Self::run_args) on a stream of the caller's: a GPU launch is queued on
    /// `stream` (e.g. torch's current stream, so it is ordered with the caller's other work
    /// without a synchronization), which must belong to the executable's device. The CPU and
    /// the simulator run synchronously and take only [`Stream::Runtime`].
    pub fn run_args_on(&self, args: &[Arg], stream: Stream) -> Result<()> {
        self.run_args_marked(args, stream, &mut |_| {})
    }

    /// [`run_args_on`](Self::run_args_on), telling `mark` when each stage of the launch is
    /// done ([`host_launch_profile`](Self::host_launch_profile) times them).
    fn run_args_marked(
        &self,
        args: &[Arg],
        stream: Stream,
        mark: &mut dyn FnMut(LaunchStage),
    ) -> Result<()> {
        // One bind serves both the choice of variant and the launch (a variant binds again:
        // its signature's ABI may differ).
        let b = self.bind(args)?;
        let exe = self.variant_for_bound(&b)?;
        if !std::ptr::eq(exe, self) {
            return exe.run_args_marked(args, stream, mark);
        }
        mark(LaunchStage::Bound);
        if stream != Stream::Runtime && !(self.device.is_cuda() || self.device.is_hip()) {
            return Err(RuntimeError::Launch(format!(
                "kernel `{}` runs on {}, which has no streams; launch it without one",
                self.sig.name, self.device
            )));
        }
        match &self.module {
            Module::Cpu(m) => {
                mark(LaunchStage::Packed);
                m.launch(b.ptrs, b.ints, b.floats, b.grid)
            }
            Module::Cuda(k) => {
                let (mut scratch, dev) = self.scratch_slots(k, stream);
                let mut p = pack_gpu_params_staged(&self.sig, &b, Some((scratch.slots(), dev)))?;
                mark(LaunchStage::Packed);
                k.launch_on(&mut p, b.grid, self.sig.threads, stream)?;
            }
            Module::Hip(k) => {
                crate::hip::check_buffer_ranges(&self.sig, args)?;
                let mut p = pack_gpu_params(&self.sig, &b)?;
                mark(LaunchStage::Packed);
                k.launch_on(&mut p, b.grid, self.sig.threads, stream)?;
            }
            Module::Sim(k) => {
                mark(LaunchStage::Packed);
                self.run_sim(k, args)?
            }
        }
        mark(LaunchStage::Launched);
        Ok(())
    }

    /// The executable's pitched-staging scratch for launches on `stream`, locked (keep it
    /// until the launch is queued).
    pub(crate) fn scratch_slots(
        &self,
        k: &crate::cuda::CudaKernel,
        stream: Stream,
    ) -> (StreamScratch<'_>, &'static crate::cuda::CudaDevice) {
        let all = match self.pitch_scratch.0.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        (
            StreamScratch {
                all,
                key: scratch_key(stream),
            },
            k.device(),
        )
    }

    /// Host time per launch of `args`, split into its stages, in microseconds over `n`
    /// launches on the runtime's stream: checking and binding the arguments (with the choice
    /// of variant), packing the parameter block, and the launch itself (on CUDA the driver's
    /// `cuLaunchKernel`, with making the context current; on the CPU and in the simulator the
    /// run). Launches go in batches of 64, drained between batches outside the timing (a full
    /// launch queue would time the GPU). For finding where a call's host time goes.
    pub fn host_launch_profile(&self, args: &[Arg], n: usize) -> Result<HostLaunchProfile> {
        let n = n.max(1);
        let mut spent = [std::time::Duration::ZERO; 3];
        let mut left = n;
        while left > 0 {
            let batch = left.min(64);
            for _ in 0..batch {
                let mut at = [std::time::Instant::now(); 4];
                self.run_args_marked(args, Stream::Runtime, &mut |stage| {
                    at[stage as usize + 1] = std::time::Instant::now();
                })?;
                for (s, w) in spent.iter_mut().zip(at.windows(2)) {
                    *s += w[1] - w[0];
                }
            }
            self.synchronize()?;
            left -= batch;
        }
        let us = |d: std::time::Duration| d.as_secs_f64() * 1e6 / n as f64;
        Ok(HostLaunchProfile {
            bind_us: us(spent[0]),
            pack_us: us(spent[1]),
            driver_us: us(spent[2]),
        })
    }

    /// Copy the arguments into the simulator, run, copy outputs back.
    fn run_sim(&self, k: &tl_ir::Kernel, args: &[Arg]) -> Result<()> {
        let mut sargs: Vec<tl_sim::SimArg> = args
            .iter()
            .map(|a| match a {
                Arg::Tensor(t) => tl_sim::SimArg::Tensor {
                    bytes: t.host_bytes().to_vec(),
                    shape: t.shape().to_vec(),
                },
                Arg::External(t) => tl_sim::SimArg::Tensor {
                    // SAFETY: `bind` accepted it: host memory, contiguous, of `nbytes` bytes
                    // (ExternalTensor::new's contract), read before the kernel runs.
                    bytes: unsafe { t.host_bytes() }.to_vec(),
                    shape: t.shape().to_vec(),
                },
                Arg::Int(i) => tl_sim::SimArg::Int(*i),
                Arg::Float(f) => tl_sim::SimArg::Float(*f),
            })
            .collect();
        tl_sim::run(k, &mut sargs, &tl_sim::SimOptions::default()).map_err(|e| {
            RuntimeError::Launch(format!("kernel `{}` in the simulator: {e}", self.sig.name))
        })?;
        for ((a, s), p) in args.iter().zip(&sargs).zip(&self.sig.params) {
            match (a, s) {
                (Arg::Tensor(t), tl_sim::SimArg::Tensor { bytes, .. }) => {
                    t.host_bytes_mut().copy_from_slice(bytes);
                }
                // Foreign memory is written back only where the kernel may write: an input
                // may be read-only (a numpy array with `writeable=False`).
                (Arg::External(t), tl_sim::SimArg::Tensor { bytes, .. })
                    if !matches!(
                        p,
                        Param::Tensor {
                            role: tl_ir::Role::Input,
                            ..
                        }
                    ) =>
                {
                    // SAFETY: as above; nothing else references the memory during the call.
                    unsafe { t.write_host_bytes(bytes) };
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Check arguments against the signature, bind the symbolic sizes, compute the grid. A
    /// call with the same shapes, dtypes, devices and scalars as this executable's last
    /// successful one (only the addresses differ: the usual loop of calls) takes that
    /// binding with the new addresses instead of checking and evaluating again.
    pub fn bind(&self, args: &[Arg]) -> Result<Bound> {
        let lock = || {
            self.bind_memo
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        if let Some(m) = lock().as_ref() {
            if m.matches(args, self.device) {
                let mut b = m.bound.0.clone();
                b.readdress(args);
                return Ok(b);
            }
        }
        // A miss binds without the lock held (other threads' calls need not wait for it).
        let b = bind_args(&self.sig, self.device, args)?;
        *lock() = Some(MemoEntry {
            keys: args.iter().map(|a| ArgKey::of(a, self.device)).collect(),
            bound: MemoBound(b.clone()),
        });
        Ok(b)
    }
}

/// The last successful binding of an executable ([`Executable::bind`]).
#[derive(Default)]
struct BindMemo(std::sync::Mutex<Option<MemoEntry>>);

struct MemoEntry {
    keys: Vec<ArgKey>,
    bound: MemoBound,
}

/// A binding kept for reuse. The addresses in it are never dereferenced here, only replaced
/// by the next matching call's (`Bound::readdress`), so holding them across threads is sound.
struct MemoBound(Bound);
// SAFETY: see the type's comment.
unsafe impl Send for MemoBound {}

/// Everything `bind_args` reads of an argument but its address.
#[derive(PartialEq, Debug)]
enum ArgKey {
    Tensor {
        facts: TensorFacts,
        shape: Vec<usize>,
    },
    Int(i64),
    /// The bits: a NaN matches itself, -0.0 does not match 0.0.
    Float(u64),
}

/// What `bind_args` checks of a tensor besides its shape: dtype, device, whether the
/// executable's device can use it, contiguity.
type TensorFacts = (tl_ir::DType, Device, bool, bool);

impl TensorView<'_> {
    fn facts(&self) -> TensorFacts {
        (self.dtype, self.device, self.usable, self.contiguous)
    }
}

impl ArgKey {
    fn of(a: &Arg, device: Device) -> ArgKey {
        match a {
            Arg::Float(x) => ArgKey::Float(x.to_bits()),
            Arg::Int(x) => ArgKey::Int(*x),
            Arg::Tensor(_) | Arg::External(_) => match TensorView::of(a, device) {
                Some(t) => ArgKey::Tensor {
                    facts: t.facts(),
                    shape: t.shape.to_vec(),
                },
                None => unreachable!("a tensor argument always has a view"),
            },
        }
    }

    /// Whether `a` has this key (compared in place: no allocation on the hot path).
    fn matches(&self, a: &Arg, device: Device) -> bool {
        match (self, a, TensorView::of(a, device)) {
            (ArgKey::Tensor { facts, shape }, _, Some(t)) => {
                *facts == t.facts() && shape.as_slice() == t.shape
            }
            (ArgKey::Int(x), Arg::Int(y), None) => x == y,
            (ArgKey::Float(x), Arg::Float(y), None) => *x == y.to_bits(),
            _ => false,
        }
    }
}

impl MemoEntry {
    fn matches(&self, args: &[Arg], device: Device) -> bool {
        self.keys.len() == args.len()
            && self
                .keys
                .iter()
                .zip(args)
                .all(|(k, a)| k.matches(a, device))
    }
}

impl Bound {
    /// Put `args`' addresses in place of the ones this binding was made with.
    fn readdress(&mut self, args: &[Arg]) {
        self.ptrs.clear();
        for (slot, a) in self.args.iter_mut().zip(args) {
            let ptr = match a {
                Arg::Tensor(t) => t.raw_ptr(),
                Arg::External(t) => t.ptr(),
                Arg::Int(_) | Arg::Float(_) => continue,
            };
            if let BoundArg::Ptr(p) = slot {
                *p = ptr;
                self.ptrs.push(ptr);
            }
        }
    }
}

/// Check `args` for a kernel with signature `sig` running on `device`: count, kinds, dtypes,
/// ranks, devices, contiguity and sizes; bind the symbolic sizes and compute the grid.
pub fn bind_args(sig: &Signature, device: Device, args: &[Arg]) -> Result<Bound> {
    let bad = |index: usize, reason: String| sig.bad_arg(index, reason);
    if args.len() != sig.params.len() {
        return Err(RuntimeError::ArgCount {
            kernel: sig.name.clone(),
            expected: sig.params.len(),
            got: args.len(),
            names: sig
                .params
                .iter()
                .map(|p| p.name())
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    if let Some(d) = &sig.dist {
        d.check(sig, args)?;
    }
    let mut env: HashMap<u64, Value> = HashMap::new();
    // Pass 1: kinds, dtypes, ranks, devices; bind sizes from bare-variable extents.
    for (i, (p, a)) in sig.params.iter().zip(args).enumerate() {
        match (p, a) {
            (Param::Tensor { buffer, .. }, Arg::Tensor(_) | Arg::External(_)) => {
                let Some(t) = TensorView::of(a, device) else {
                    return Err(bad(i, "expected a tensor".into()));
                };
                if t.dtype != buffer.dtype() {
                    return Err(bad(
                        i,
                        format!("expected {} elements, got {}", buffer.dtype(), t.dtype),
                    ));
                }
                if t.shape.len() != buffer.rank() {
                    return Err(bad(
                        i,
                        format!(
                            "expected a {}-d tensor, got shape {:?}",
                            buffer.rank(),
                            t.shape
                        ),
                    ));
                }
                if !t.usable {
                    return Err(bad(
                        i,
                        format!("the tensor is on {}, the kernel on {}", t.device, device),
                    ));
                }
                if !t.contiguous {
                    return Err(bad(i, "the tensor is not contiguous (row-major)".into()));
                }
                for (d, (e, &n)) in buffer.shape().iter().zip(t.shape).enumerate() {
                    if let ExprKind::Var(v) = e.kind() {
                        if let Some(why) = tl_ir::kernel::symbolic_dim_too_large(d, n) {
                            return Err(bad(i, why));
                        }
                        match env.get(&v.id()) {
                            Some(prev) if prev.as_i64() != n as i64 => {
                                return Err(bad(
                                    i,
                                    format!(
                                    "dimension {d} is {n}, but `{}` is {} from an earlier argument",
                                    v.name(),
                                    prev.as_i64()
                                ),
                                ))
                            }
                            _ => {
                                env.insert(v.id(), Value::Int(n as i64));
                            }
                        }
                    }
                }
            }
            (Param::Scalar(v), Arg::Int(x)) if !v.dtype().is_float() => {
                env.insert(v.id(), Value::Int(*x));
            }
            (Param::Scalar(v), Arg::Float(x)) if v.dtype().is_float() => {
                env.insert(v.id(), Value::Float(*x));
            }
            (Param::Scalar(v), Arg::Int(x)) => {
                env.insert(v.id(), Value::Float(*x as f64));
            }
            (Param::Tensor { .. }, _) => return Err(bad(i, "expected a tensor".into())),
            (Param::Scalar(v), _) => {
                return Err(bad(i, format!("expected a {} scalar", v.dtype())))
            }
        }
    }
    for d in &sig.dims {
        if !env.contains_key(&d.id()) {
            return Err(RuntimeError::Launch(format!(
                    "kernel `{}`: the symbolic size `{}` is not the extent of any tensor dimension, so no argument defines it",
                    sig.name,
                    d.name()
                )));
        }
    }
    // Pass 2: extents that are expressions must match.
    let mut ptrs = vec![];
    let mut bound_args = Vec::with_capacity(args.len());
    let mut shapes: Vec<Vec<i64>> = Vec::with_capacity(args.len());
    for (i, (p, a)) in sig.params.iter().zip(args).enumerate() {
        let view = TensorView::of(a, device);
        shapes.push(match &view {
            Some(t) => t.shape.iter().map(|&n| n as i64).collect(),
            None => vec![],
        });
        match (p, view) {
            (Param::Tensor { buffer, .. }, Some(t)) => {
                for (d, (e, &n)) in buffer.shape().iter().zip(t.shape).enumerate() {
                    let want = eval_int(e, &env).map_err(|x| bad(i, x.to_string()))?;
                    if want != n as i64 {
                        return Err(bad(
                            i,
                            format!(
                                "dimension {d} is {n}, but the kernel expects {} = {want}",
                                e
                            ),
                        ));
                    }
                }
                ptrs.push(t.ptr);
                bound_args.push(BoundArg::Ptr(t.ptr));
            }
            (Param::Tensor { .. }, None) => bound_args.push(BoundArg::Ptr(std::ptr::null_mut())),
            (Param::Scalar(v), _) if v.dtype().is_float() => bound_args.push(BoundArg::Float(
                env.get(&v.id()).map(|x| x.as_f64()).unwrap_or(0.0),
            )),
            (Param::Scalar(v), _) => bound_args.push(BoundArg::Int(
                env.get(&v.id()).map(|x| x.as_i64()).unwrap_or(0),
            )),
        }
    }
    let dim_values = sig
        .dims
        .iter()
        .map(|d| env.get(&d.id()).map(|x| x.as_i64()).unwrap_or(0))
        .collect();
    let mut ints = vec![];
    for s in &sig.abi.ints {
        let v = match s {
            IntSlot::Dim(v) | IntSlot::Scalar(v) => {
                env.get(&v.id()).map(|x| x.as_i64()).unwrap_or(0)
            }
        };
        ints.push(v);
    }
    let floats = sig
        .abi
        .floats
        .iter()
        .map(|v| env.get(&v.id()).map(|x| x.as_f64()).unwrap_or(0.0))
        .collect();
    let mut grid = [1i64; 3];
    for (g, e) in grid.iter_mut().zip(&sig.grid) {
        let n = eval_int(e, &env)
            .map_err(|x| RuntimeError::Launch(format!("grid of `{}`: {x}", sig.name)))?;
        if n < 0 {
            return Err(RuntimeError::Launch(format!(
                "kernel `{}`: grid extent {e} is {n} for these arguments",
                sig.name
            )));
        }
        *g = n;
    }
    // By name, for the multi-rank checks only (a map of owned names costs every launch).
    let mut dims = HashMap::new();
    if let Some(d) = &sig.dist {
        dims = sig
            .dims
            .iter()
            .map(|d| {
                (
                    d.name().to_string(),
                    env.get(&d.id()).map(|x| x.as_i64()).unwrap_or(0),
                )
            })
            .collect();
        d.check_rank_dims(sig, args, &dims)?;
    }
    Ok(Bound {
        ptrs,
        ints,
        floats,
        grid,
        dims,
        args: bound_args,
        dim_values,
        shapes,
    })
}

#[cfg(test)]
mod tests {

    /// Launches on different streams stage into different slots (one stream's staging may run
    /// while another stream's kernel reads its own); launches on one stream share them.
    #[test]
    fn each_stream_stages_into_slots_of_its_own() {
        let scratch = PitchScratch::default();
        let lock = || scratch.0.lock().expect("unpoisoned");
        let take = |stream: Stream| {
            let mut s = StreamScratch {
                all: lock(),
                key: scratch_key(stream),
            };
            let n = s.slots().len();
            s.slots().push(None);
            n
        };
        assert_eq!(take(Stream::Runtime), 0);
        assert_eq!(take(Stream::Raw(0x10)), 0);
        assert_eq!(take(Stream::Raw(0x20)), 0);
        assert_eq!(take(Stream::Raw(0x10)), 1);
        assert_eq!(take(Stream::Runtime), 1);
        assert_eq!(lock().len(), 3);
    }
    use super::*;
    use tl_ir::{Buffer, DType, Role, Scope, Span, Var};

    /// `k(x: f32[N, 4], y: bf16[N*2], alpha: f32, beta: f64, steps: i8, flag: bool)`, grid
    /// `ceil(N / 64)`, 128 threads.
    fn sig() -> Signature {
        let n = Var::new("N", DType::I32);
        let x = Buffer::new(
            "x",
            vec![Expr::from(&n), Expr::int(4)],
            DType::F32,
            Scope::Global,
            Span::UNKNOWN,
        );
        let y = Buffer::new(
            "y",
            vec![Expr::from(&n) * Expr::int(2)],
            DType::BF16,
            Scope::Global,
            Span::UNKNOWN,
        );
        let alpha = Var::new("alpha", DType::F32);
        let beta = Var::new("beta", DType::F64);
        let steps = Var::new("steps", DType::I8);
        let flag = Var::new("flag", DType::Bool);
        let params = vec![
            Param::Tensor {
                buffer: x,
                role: Role::Input,
            },
            Param::Scalar(alpha.clone()),
            Param::Tensor {
                buffer: y,
                role: Role::Output,
            },
            Param::Scalar(beta.clone()),
            Param::Scalar(steps.clone()),
            Param::Scalar(flag.clone()),
        ];
        let abi = Abi {
            tensors: vec![0, 2],
            ints: vec![
                IntSlot::Dim(n.clone()),
                IntSlot::Scalar(steps),
                IntSlot::Scalar(flag),
            ],
            floats: vec![alpha, beta],
            tmaps: vec![],
            staged: vec![],
        };
        Signature {
            name: "k".into(),
            params,
            dims: vec![n.clone()],
            grid: vec![tl_ir::ops::ceildiv(&n, 64i64)],
            threads: 128,
            abi,
            dist: None,
        }
    }

    /// An executable of `sig()` whose launches nobody makes: for `Executable::bind`.
    fn exe_of_sig() -> Executable {
        let s = sig();
        let k = tl_ir::Kernel {
            name: s.name.clone(),
            dims: s.dims.clone(),
            params: s.params.clone(),
            grid: s.grid.clone(),
            block_vars: vec![],
            threads: s.threads,
            body: tl_ir::Stmt::seq(vec![], Span::UNKNOWN),
            attrs: Default::default(),
        };
        Executable::new(
            s,
            Device::Cpu,
            Module::Sim(Box::new(k)),
            CompileStats::default(),
            None,
        )
    }

    /// A second call with the same shapes and scalars reuses the first binding with its own
    /// addresses; other shapes bind again, and a call the first binding would not cover is
    /// still checked (and refused).
    #[test]
    fn bind_reuses_the_last_binding_with_new_addresses() {
        let exe = exe_of_sig();
        let cpu = Device::Cpu;
        let x = Tensor::zeros(&[100, 4], DType::F32, &cpu).unwrap();
        let y = Tensor::zeros(&[200], DType::BF16, &cpu).unwrap();
        let x2 = Tensor::zeros(&[100, 4], DType::F32, &cpu).unwrap();
        let y2 = Tensor::zeros(&[200], DType::BF16, &cpu).unwrap();
        let args = |x, y, steps| {
            [
                Arg::Tensor(x),
                Arg::Float(1.5),
                Arg::Tensor(y),
                Arg::Int(3),
                Arg::Int(steps),
                Arg::Int(5),
            ]
        };
        let first = exe.bind(&args(&x, &y, -7)).unwrap();
        let again = exe.bind(&args(&x2, &y2, -7)).unwrap();
        assert_eq!(again.ptrs, vec![x2.raw_ptr(), y2.raw_ptr()]);
        assert_eq!(again.args[0], BoundArg::Ptr(x2.raw_ptr()));
        assert_eq!(again.args[2], BoundArg::Ptr(y2.raw_ptr()));
        assert_eq!(
            (again.grid, again.ints.clone()),
            (first.grid, first.ints.clone())
        );
        // A scalar changed: its new value, not the remembered one.
        let other = exe.bind(&args(&x, &y, 9)).unwrap();
        assert_eq!(other.args[4], BoundArg::Int(9));
        // Another size: bound afresh (N = 300: five blocks of 64 rows).
        let x3 = Tensor::zeros(&[300, 4], DType::F32, &cpu).unwrap();
        let y3 = Tensor::zeros(&[600], DType::BF16, &cpu).unwrap();
        let b3 = exe.bind(&args(&x3, &y3, 9)).unwrap();
        assert_eq!((b3.grid, b3.dim_values.clone()), ([5, 1, 1], vec![300]));
        // A wrong dtype after a good call is still refused.
        let bad = Tensor::zeros(&[300, 4], DType::F16, &cpu).unwrap();
        let e = exe.bind(&args(&bad, &y3, 9)).unwrap_err().to_string();
        assert!(e.contains("expected f32"), "{e}");
        // And a shape that breaks the N * 2 relation of y.
        let short = Tensor::zeros(&[599], DType::BF16, &cpu).unwrap();
        let e = exe.bind(&args(&x3, &short, 9)).unwrap_err().to_string();
        assert!(e.contains("dimension 0"), "{e}");
        // The same shape, not contiguous (a transposed view of other memory): refused.
        exe.bind(&args(&x3, &y3, 9)).unwrap();
        // SAFETY: x3's 1200 floats, described column by column; only bound, never read.
        let view = unsafe {
            ExternalTensor::new(x3.raw_ptr(), DType::F32, vec![300, 4], vec![1, 300], cpu)
        }
        .unwrap();
        let with_view = [
            Arg::External(&view),
            Arg::Float(1.5),
            Arg::Tensor(&y3),
            Arg::Int(3),
            Arg::Int(9),
            Arg::Int(5),
        ];
        let e = exe.bind(&with_view).unwrap_err().to_string();
        assert!(e.contains("not contiguous"), "{e}");
    }

    /// A hit is what it claims: a matching call gets the remembered binding (marked here),
    /// scalars match by their bits and kind (-0.0 is not 0.0; an int for a float parameter is
    /// not the float), and anything else binds afresh.
    #[test]
    fn bind_memo_hits_only_on_the_same_key() {
        let exe = exe_of_sig();
        let cpu = Device::Cpu;
        let x = Tensor::zeros(&[100, 4], DType::F32, &cpu).unwrap();
        let y = Tensor::zeros(&[200], DType::BF16, &cpu).unwrap();
        let args = |alpha: Arg<'static>, beta: Arg<'static>| {
            [
                Arg::Tensor(&x),
                alpha,
                Arg::Tensor(&y),
                beta,
                Arg::Int(-7),
                Arg::Int(5),
            ]
        };
        let mark = |exe: &Executable| {
            let mut m = exe.bind_memo.0.lock().unwrap();
            m.as_mut().expect("a binding is remembered").bound.0.grid = [99, 1, 1];
        };
        exe.bind(&args(Arg::Float(0.0), Arg::Int(3))).unwrap();
        mark(&exe);
        let hit = exe.bind(&args(Arg::Float(0.0), Arg::Int(3))).unwrap();
        assert_eq!(hit.grid, [99, 1, 1], "the same key: the remembered binding");
        for (alpha, beta) in [
            (Arg::Float(-0.0), Arg::Int(3)),
            (Arg::Int(0), Arg::Int(3)),
            (Arg::Float(0.0), Arg::Float(3.0)),
        ] {
            exe.bind(&args(Arg::Float(0.0), Arg::Int(3))).unwrap();
            mark(&exe);
            let b = exe.bind(&args(alpha, beta)).unwrap();
            assert_eq!(b.grid, [2, 1, 1], "another key binds afresh");
        }
    }

    #[test]
    fn gpu_params_follow_the_abi() {
        let s = sig();
        let cpu = Device::Cpu;
        let x = Tensor::zeros(&[100, 4], DType::F32, &cpu).unwrap();
        let y = Tensor::zeros(&[200], DType::BF16, &cpu).unwrap();
        let args = [
            Arg::Tensor(&x),
            Arg::Float(1.5),
            Arg::Tensor(&y),
            Arg::Int(3), // an int for a float scalar is converted
            Arg::Int(-7),
            Arg::Int(5),
        ];
        let b = bind_args(&s, cpu, &args).unwrap();
        assert_eq!(b.grid, [2, 1, 1]);
        assert_eq!(b.dim_values, vec![100]);
        assert_eq!(b.args[0], BoundArg::Ptr(x.raw_ptr()));
        assert_eq!(b.args[3], BoundArg::Float(3.0));
        let p = pack_gpu_params(&s, &b).unwrap();
        use ParamKind::*;
        assert_eq!(p.kinds(), &[Ptr, F32, Ptr, F64, Int, Int, Int]);
        let slots = p.slots();
        assert_eq!(slots[0], x.raw_ptr() as usize as u64);
        assert_eq!(slots[1], 1.5f32.to_bits() as u64);
        assert_eq!(slots[2], y.raw_ptr() as usize as u64);
        assert_eq!(slots[3], 3.0f64.to_bits());
        // -7 sign-extended: an int8_t, int32_t or int64_t parameter reads -7 from the slot.
        assert_eq!(slots[4], (-7i64) as u64);
        assert_eq!((slots[4] as u8) as i8, -7);
        assert_eq!((slots[4] as u32) as i32, -7);
        // bool as 0/1
        assert_eq!(slots[5], 1);
        // the symbolic size, last
        assert_eq!(slots[6], 100);
        // The CPU slots are unchanged: dims then int scalars; floats.
        assert_eq!(b.ints, vec![100, -7, 5]);
        assert_eq!(b.floats, vec![1.5, 3.0]);

        // Pointers point at the slots, in order.
        let mut p2 = p.clone();
        let ptrs = p2.pointers();
        assert_eq!(ptrs.len(), 7);
        // SAFETY: each pointer points at a live u64 slot of p2.
        let back: Vec<u64> = ptrs
            .iter()
            .map(|&q| unsafe { *(q as *const u64) })
            .collect();
        assert_eq!(back, p.slots());
        // SAFETY: the low 4 bytes of the f32 slot hold the float (little-endian).
        let alpha = unsafe { *(ptrs[1] as *const f32) };
        assert_eq!(alpha, 1.5);
    }

    /// A tensor map of a tensor whose rows are not whole 16-byte units needs a pitched
    /// staging copy; where no scratch is given (a launch path that cannot stage) the argument
    /// is refused by name, before the driver is asked for anything.
    #[test]
    fn unaligned_tma_rows_need_a_staging_path() {
        let mut s = sig();
        // A map of x (f32[N, 4]) as the launch would describe it had x 3 columns: 12-byte
        // rows (the map takes its shape from the bound arguments).
        s.abi.tmaps = vec![tl_codegen::TmaSpec {
            param: 0,
            box_dims: vec![8, 3],
            swizzle: 0,
        }];
        let cpu = Device::Cpu;
        let x = Tensor::zeros(&[100, 4], DType::F32, &cpu).unwrap();
        let y = Tensor::zeros(&[200], DType::BF16, &cpu).unwrap();
        let args = [
            Arg::Tensor(&x),
            Arg::Float(1.5),
            Arg::Tensor(&y),
            Arg::Int(3),
            Arg::Int(-7),
            Arg::Int(5),
        ];
        let mut b = bind_args(&s, cpu, &args).unwrap();
        b.shapes[0] = vec![100, 3];
        let e = pack_gpu_params(&s, &b).unwrap_err().to_string();
        assert!(e.contains("`x`"), "{e}");
        assert!(e.contains("12 bytes") && e.contains("16-byte"), "{e}");
    }

    /// Odd rows are always staged, onto whole 128-byte lines; rows of 16-byte units that miss
    /// the lines (by their length or the tensor's address) only when two inputs do.
    #[test]
    fn staging_pitch_pads_odd_rows_and_line_misses_of_two_inputs() {
        if std::env::var_os("TILELANG_TMA_PITCH_ALIGN").is_some() {
            return;
        }
        assert_eq!(staging_pitch(8190, 0, 0), Some(8192));
        assert_eq!(staging_pitch(14, 256, 0), Some(128));
        assert_eq!(staging_pitch(8192, 0, 3), None);
        assert_eq!(staging_pitch(8208, 0, 1), None);
        assert_eq!(staging_pitch(8208, 0, 2), Some(8320));
        assert_eq!(staging_pitch(8192, 16, 2), Some(8192));
        assert_eq!(staging_pitch(8192, 8, 0), Some(8192));
        assert!(misses_lines(8208, 0) && misses_lines(256, 64) && !misses_lines(256, 128));
        assert!(!misses_lines(8190, 0));
    }

    /// Tensors at addresses off 16 bytes (views at an offset) lower the class: a bf16 dim of
    /// multiple 8 falls to 4 elements at an 8-byte aligned address, to 1 at a 2-byte one,
    /// whatever its size; 16-byte aligned addresses leave the sizes alone.
    #[test]
    fn misaligned_tensor_addresses_lower_the_alignment_class() {
        let fb = Fallback {
            requires: vec![(0, 8), (1, 4)],
            build: Box::new(|_| Err(RuntimeError::Launch("unused".into()))),
            built: vec![],
        };
        assert_eq!(fb.class(&[4096, 4096], 16).1, vec![(0, 8), (1, 4)]);
        assert_eq!(fb.class(&[4096, 4096], 8).1, vec![(0, 4), (1, 2)]);
        assert_eq!(fb.class(&[4096, 4096], 2).1, vec![(0, 1), (1, 1)]);
        assert_eq!(fb.class(&[4095, 4096], 16).1, vec![(0, 1), (1, 4)]);
        // `sig()`'s x is [N, 4] (a static row), y [2·N]: no class varies their rows.
        assert!(!rows_vary_with(&sig(), &[(0, 4)]));
        let mut s = sig();
        let n = s.dims[0].clone();
        s.params = vec![Param::Tensor {
            buffer: Buffer::new(
                "z",
                vec![Expr::int(3), Expr::from(&n)],
                DType::BF16,
                Scope::Global,
                Span::UNKNOWN,
            ),
            role: Role::Input,
        }];
        assert!(rows_vary_with(&s, &[(0, 8)]));
        assert!(!rows_vary_with(&s, &[]));
        let at = |a: usize| BoundArg::Ptr(a as *mut c_void);
        assert_eq!(
            pointer_alignment(&[at(256), BoundArg::Int(3), at(4096)]),
            16
        );
        assert_eq!(pointer_alignment(&[at(256), at(4098)]), 2);
        assert_eq!(pointer_alignment(&[at(24)]), 8);
    }

    /// A tensor map travels as a 64-byte aligned 128-byte blob that the launch's pointer
    /// array points at, between the 8-byte slots around it.
    #[test]
    fn tensor_maps_are_passed_by_value_aligned() {
        let mut p = ParamBlock::default();
        p.push_u64(7);
        let words: [u64; 16] = std::array::from_fn(|i| i as u64 * 3);
        p.push_tensor_map(TensorMapBlob(words));
        p.push_i64(-1);
        assert_eq!(p.kinds()[1], ParamKind::TensorMap);
        let ptrs = p.pointers();
        assert_eq!(ptrs.len(), 3);
        assert_eq!(ptrs[1] as usize % 64, 0);
        // SAFETY: the pointer is to the block's blob, alive while `p` is.
        let blob = unsafe { &*(ptrs[1] as *const TensorMapBlob) };
        assert_eq!(blob.0, words);
        // SAFETY: slots 0 and 2 hold 8-byte values.
        unsafe {
            assert_eq!(*(ptrs[0] as *const u64), 7);
            assert_eq!(*(ptrs[2] as *const i64), -1);
        }
    }

    #[test]
    fn out_of_range_scalars_are_rejected() {
        let s = sig();
        let cpu = Device::Cpu;
        let x = Tensor::zeros(&[1, 4], DType::F32, &cpu).unwrap();
        let y = Tensor::zeros(&[2], DType::BF16, &cpu).unwrap();
        let args = [
            Arg::Tensor(&x),
            Arg::Float(1.0),
            Arg::Tensor(&y),
            Arg::Float(1.0),
            Arg::Int(300), // does not fit i8
            Arg::Int(0),
        ];
        let b = bind_args(&s, cpu, &args).unwrap();
        let e = pack_gpu_params(&s, &b).unwrap_err().to_string();
        assert!(e.contains("`steps`") && e.contains("i8"), "{e}");
    }

    #[test]
    fn argument_errors_name_the_argument() {
        let s = sig();
        let cpu = Device::Cpu;
        let x = Tensor::zeros(&[10, 4], DType::F32, &cpu).unwrap();
        let y = Tensor::zeros(&[21], DType::BF16, &cpu).unwrap();
        let args = [
            Arg::Tensor(&x),
            Arg::Float(1.0),
            Arg::Tensor(&y),
            Arg::Float(1.0),
            Arg::Int(1),
            Arg::Int(0),
        ];
        let e = bind_args(&s, cpu, &args).err().unwrap().to_string();
        assert!(e.contains("`y`") && e.contains("= 20"), "{e}");
        let e = bind_args(&s, cpu, &args[..2]).err().unwrap().to_string();
        assert!(e.contains("takes 6 arguments"), "{e}");
        // A kernel on a GPU rejects CPU tensors (and vice versa) before anything is launched.
        let y = Tensor::zeros(&[20], DType::BF16, &cpu).unwrap();
        let args = [
            Arg::Tensor(&x),
            Arg::Float(1.0),
            Arg::Tensor(&y),
            Arg::Float(1.0),
            Arg::Int(1),
            Arg::Int(0),
        ];
        let e = bind_args(&s, Device::Cuda(0), &args)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("on cpu, the kernel on cuda:0"), "{e}");
    }

    #[test]
    fn external_tensors_are_checked_like_tensors() {
        let s = sig();
        let cpu = Device::Cpu;
        let mut xs = vec![0f32; 100 * 4];
        let mut ys = vec![0u16; 200];
        let ext = |p: *mut c_void, dt, shape: Vec<usize>, strides: Vec<isize>, dev| {
            // SAFETY: the buffers above outlive every use, and cover the shapes given.
            unsafe { ExternalTensor::new(p, dt, shape, strides, dev) }.unwrap()
        };
        let x = ext(
            xs.as_mut_ptr() as *mut c_void,
            DType::F32,
            vec![100, 4],
            vec![4, 1],
            cpu,
        );
        let y = ext(
            ys.as_mut_ptr() as *mut c_void,
            DType::BF16,
            vec![200],
            vec![1],
            cpu,
        );
        let args = |x, y| {
            [
                Arg::External(x),
                Arg::Float(1.5),
                Arg::External(y),
                Arg::Float(2.0),
                Arg::Int(3),
                Arg::Int(1),
            ]
        };
        let b = bind_args(&s, cpu, &args(&x, &y)).unwrap();
        assert_eq!(b.dim_values, vec![100]);
        assert_eq!(b.grid, [2, 1, 1]);
        assert_eq!(b.args[0], BoundArg::Ptr(xs.as_mut_ptr() as *mut c_void));
        assert_eq!(b.ptrs.len(), 2);
        // Host memory serves the simulator too, but not a GPU.
        assert!(bind_args(&s, Device::SIM, &args(&x, &y)).is_ok());
        let e = bind_args(&s, Device::Cuda(0), &args(&x, &y))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("on cpu, the kernel on cuda:0"), "{e}");
        // Wrong dtype, a transposed (non-contiguous) view, inconsistent sizes.
        let y32 = ext(
            ys.as_mut_ptr() as *mut c_void,
            DType::F32,
            vec![100],
            vec![1],
            cpu,
        );
        let e = bind_args(&s, cpu, &args(&x, &y32))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("`y`") && e.contains("expected bf16"), "{e}");
        let xt = ext(
            xs.as_mut_ptr() as *mut c_void,
            DType::F32,
            vec![100, 4],
            vec![1, 100],
            cpu,
        );
        let e = bind_args(&s, cpu, &args(&xt, &y))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("not contiguous"), "{e}");
        let y_short = ext(
            ys.as_mut_ptr() as *mut c_void,
            DType::BF16,
            vec![199],
            vec![1],
            cpu,
        );
        let e = bind_args(&s, cpu, &args(&x, &y_short))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("= 200"), "{e}");
    }
}
