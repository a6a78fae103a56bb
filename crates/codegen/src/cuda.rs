//! CUDA C++ from thread-level IR (docs/design/thread-ir.md), for NVRTC.
//!
//! One `extern "C" __global__` function per kernel, with the ABI of the design doc: tensor
//! parameters as device pointers, scalars by value, then the symbolic dims as `int32_t`. The
//! generated source includes no CUDA toolkit header: `include/tl_cuda.h` (embedded below)
//! supplies the integer types, the narrow-float conversions and the inline-PTX wrappers of
//! cp.async, ldmatrix and mma.sync, so NVRTC compiles it with no include path.
//!
//! Expressions and statements are printed by the shared C-family printer ([`Printer`] with
//! [`Dialect::Cuda`]); this module adds what only CUDA has: the kernel signature, block indices
//! (with the optional block swizzle), shared memory placed in one dynamic block, and the
//! intrinsics.

use std::collections::{HashMap, HashSet};

use tl_ir::{
    Buffer, DType, DiagKind, Diagnostic, Diagnostics, Expr, ExprKind, Intrinsic, Kernel, Param,
    Role, Scope, Span, Stmt, StmtKind, WgmmaOp,
};
use tl_target::Target;

use crate::cfamily::{compute_type, storage_type, Dialect, Printer};
use crate::names::Names;

/// The device header every generated kernel starts with.
pub const CUDA_HEADER: &str = include_str!("../include/tl_cuda.h");

/// Generated CUDA source and what the runtime needs to launch it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaSource {
    pub code: String,
    /// The `extern "C" __global__` function: `tl_kernel_<name>`.
    pub entry: String,
    /// Bytes of dynamic shared memory to launch with (every shared buffer of the kernel).
    pub dynamic_smem_bytes: u32,
    /// Threads per block (`blockDim.x`); also the kernel's `__launch_bounds__`.
    pub threads: u32,
    /// The architecture the source was generated for (`sm_80`, `sm_90a`), as NVRTC takes it.
    pub arch: String,
    /// What `code` is: CUDA C++ for NVRTC, or PTX for ptxas (nvJitLink).
    pub language: Language,
}

/// The language of generated NVIDIA device code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Language {
    CudaCpp,
    Ptx,
}

/// Names the generated code uses from NVRTC's built-ins and the header; user variables must
/// not shadow them inside the kernel.
const CUDA_NAMES: &[&str] = &[
    "TL_DEVICE",
    "TL_DEFINE_MMA_16816",
    "int8_t",
    "int16_t",
    "int32_t",
    "int64_t",
    "uint8_t",
    "uint16_t",
    "uint32_t",
    "uint64_t",
    "uint2",
    "make_uint4",
    "atomicAdd",
    "atomicCAS",
    "memcpy",
    "expf",
    "exp2f",
    "logf",
    "log2f",
    "sqrtf",
    "rsqrtf",
    "rsqrt",
    "tanhf",
    "tanh",
    "erff",
    "erf",
    "sinf",
    "sin",
    "cosf",
    "cos",
    "floorf",
    "floor",
    "ceilf",
    "ceil",
    "fabsf",
    "fabs",
    "fminf",
    "fmin",
    "fmaxf",
    "fmax",
    "powf",
    "fmodf",
    "fmod",
    "exp2",
    "log2",
];

/// Generate CUDA C++ for a thread-level kernel. Errors are diagnostics (never panics): a
/// non-CUDA or pre-sm_80 target, shared memory past the target's limit, buffers without
/// constant sizes, malformed intrinsic calls, constructs that should have been lowered.
pub fn generate(k: &Kernel, target: Target) -> Result<CudaSource, Diagnostics> {
    let sm = match target {
        Target::Cuda { sm } if sm >= 80 => sm,
        other => {
            return Err(Diagnostic::new(
                DiagKind::Unsupported,
                Span::UNKNOWN,
                format!("CUDA code generation does not support the target `{other}`"),
            )
            .help("generate CUDA for sm_80 or newer (sm_80, sm_86, sm_89, sm_90a)")
            .into())
        }
    };
    if k.attrs.dist.as_ref().is_some_and(|d| d.nvshmem) {
        return Err(Diagnostic::new(
            DiagKind::Unsupported,
            Span::UNKNOWN,
            format!(
                "`{}` reaches its peers through NVSHMEM, which only the PTX printer lowers",
                k.name
            ),
        )
        .help("compile it with the PTX backend (leave TILELANG_BACKEND unset, or set it to `ptx`)")
        .into());
    }
    let mut errors = vec![];
    let span = k.body.span;
    if k.threads == 0 || k.threads > 1024 {
        errors.push(
            Diagnostic::new(
                DiagKind::InvalidArgument,
                span,
                format!("kernel `{}` has {} threads per block", k.name, k.threads),
            )
            .help("use between 1 and 1024 threads per block"),
        );
    }
    if k.grid.is_empty() || k.grid.len() > 3 || k.block_vars.len() != k.grid.len() {
        errors.push(Diagnostic::new(
            DiagKind::InvalidArgument,
            span,
            format!(
                "kernel `{}` has a {}-d grid and {} block index variables",
                k.name,
                k.grid.len(),
                k.block_vars.len()
            ),
        ));
    }

    let plan = plan_shared(
        planned_scope(k),
        k.attrs.persistent_blocks.is_some(),
        &mut errors,
    );
    let limit = target.max_shared_bytes() as u64;
    if plan.total > limit {
        errors.push(
            Diagnostic::new(
                DiagKind::OutOfRange,
                span,
                format!(
                    "kernel `{}` needs {} bytes of shared memory; {} allows {} bytes per block",
                    k.name, plan.total, target, limit
                ),
            )
            .help("use smaller tiles or fewer pipeline stages"),
        );
    }

    let mut names = Names::new();
    for n in CUDA_NAMES {
        names.reserve(n);
    }
    let kname = format!("tl_kernel_{}", sanitize(&k.name));
    let written = written_buffers(&k.body);

    let mut params = vec![];
    for p in &k.params {
        match p {
            Param::Tensor { buffer, role } => {
                let n = names.buf(buffer);
                let konst = if *role == Role::Input && !written.contains(&buffer.id()) {
                    "const "
                } else {
                    ""
                };
                // Peers write symmetric buffers while the kernel runs: no `__restrict__`,
                // which would let the compiler read them through the non-coherent path.
                let symmetric = k
                    .attrs
                    .dist
                    .as_ref()
                    .is_some_and(|d| d.symmetric.contains(&buffer.id()));
                let restrict = if symmetric { "" } else { " __restrict__" };
                params.push(format!(
                    "{konst}{}*{restrict} {n}",
                    storage_type(buffer.dtype())
                ));
            }
            Param::Scalar(v) => {
                let n = names.var(v);
                params.push(format!("const {} {n}", scalar_param_type(v.dtype())));
            }
        }
    }
    for d in &k.dims {
        let n = names.var(d);
        params.push(format!("const int32_t {n}"));
    }
    // Tensor maps go last (the ABI's order: `Abi::tmaps`).
    let mut tmaps = HashMap::new();
    for (i, t) in crate::abi::tma_specs(k).iter().enumerate() {
        let Some(Param::Tensor { buffer, .. }) = k.params.get(t.param) else {
            continue;
        };
        let n = format!("tl_tmap{i}");
        params.push(format!("const __grid_constant__ tl_tmap {n}"));
        tmaps.insert((buffer.id(), t.box_dims.clone(), t.swizzle), n);
    }
    let any_tma = !tmaps.is_empty();
    // Then, per tensor the kernel stages itself, its scratch and its flags (`Abi::staged`).
    for st in &k.attrs.staged_rows {
        let n = names.buf(&st.scratch);
        params.push(format!(
            "{}* __restrict__ {n}",
            storage_type(st.scratch.dtype())
        ));
        let n = names.buf(&st.flags);
        params.push(format!("{}* {n}", storage_type(st.flags.dtype())));
    }

    let mut p = Printer::new(&mut names, Dialect::Cuda);
    p.tmaps = tmaps;
    p.dist = k.attrs.dist.clone();
    let any_shared = !plan.offsets.is_empty();
    p.smem_offsets = plan.offsets;
    if any_shared {
        p.line("extern __shared__ __align__(1024) unsigned char tl_smem[];");
    }
    if any_tma {
        // The first copy of each tensor map would otherwise wait for the descriptor's fetch.
        let mut names: Vec<&String> = p.tmaps.values().collect();
        names.sort();
        let prefetches: Vec<String> = names
            .iter()
            .map(|n| format!("tl_prefetch_tmap(&{n});"))
            .collect();
        p.line(&format!(
            "if (threadIdx.x == 0) {{ {} }}",
            prefetches.join(" ")
        ));
    }
    block_indices(&mut p, k);
    p.stmt(&k.body);
    errors.append(&mut p.errors);
    let body = std::mem::take(&mut p.out);
    let wgmma_shapes = std::mem::take(&mut p.wgmma_shapes);
    if !errors.is_empty() {
        return Err(Diagnostics(errors));
    }

    let mut code = String::new();
    code.push_str(&format!(
        "/* generated by tilelang: CUDA C++ for {} (kernel `{}`) */\n",
        target.arch(),
        k.name
    ));
    code.push_str(CUDA_HEADER);
    code.push('\n');
    if any_tma || k.attrs.cluster.is_some() {
        code.push_str(TMA_HEADER);
        code.push('\n');
    }
    if !wgmma_shapes.is_empty() {
        code.push_str(WGMMA_HEADER);
        for shape in &wgmma_shapes {
            code.push_str(&wgmma_function(shape));
        }
        code.push('\n');
    }
    let bounds = match k.attrs.min_blocks_per_sm {
        Some(b) if b > 1 => format!("{}, {b}", k.threads.max(1)),
        _ => k.threads.max(1).to_string(),
    };
    // TMA stores still reading shared memory must finish reading before the block exits
    // (their writes complete with the grid; see the PTX printer).
    let drain = if uses_tma_store(&k.body) {
        "  tl_bulk_wait_read(0);\n"
    } else {
        ""
    };
    // A clustered kernel (after the `persistent` pass, clusters run along the grid's x).
    let cluster = match k.attrs.cluster {
        Some(c) => {
            let mut d = [1u32; 3];
            d[c.dim.min(2)] = c.size;
            format!("__cluster_dims__({}, {}, {}) ", d[0], d[1], d[2])
        }
        None => String::new(),
    };
    code.push_str(&format!(
        "extern \"C\" __global__ void {cluster}__launch_bounds__({bounds}) {kname}({}) {{\n{body}{drain}}}\n",
        params.join(", ")
    ));
    let _ = sm;
    Ok(CudaSource {
        code,
        entry: kname,
        dynamic_smem_bytes: plan.total as u32,
        threads: k.threads,
        arch: target.arch(),
        language: Language::CudaCpp,
    })
}

/// How a scalar parameter is passed: its compute type, bools as `int32_t`.
pub(crate) fn scalar_param_type(dt: DType) -> &'static str {
    match dt {
        DType::Bool => "int32_t",
        d => compute_type(d),
    }
}

/// `block_vars[d] = blockIdx.{x,y,z}`, or the panel swizzle of the design doc for a 2-d grid
/// with `attrs.swizzle_panel` (a panel of 1 row is the identity, so it is skipped); a 3-d
/// grid's (x, y) within each z alike.
fn block_indices(p: &mut Printer, k: &Kernel) {
    let axes = ["x", "y", "z"];
    let vars: Vec<String> = k.block_vars.iter().map(|v| p.names.var(v)).collect();
    match k.attrs.swizzle_panel {
        Some(panel) if panel > 1 && matches!(vars.len(), 2 | 3) => {
            // 32-bit unsigned arithmetic: exact for grids of fewer than 2^32 blocks.
            p.line("const uint32_t tl_gx = gridDim.x, tl_gy = gridDim.y;");
            p.line("const uint32_t tl_lin = blockIdx.y * tl_gx + blockIdx.x;");
            p.line(&format!("const uint32_t tl_pw = {panel}u * tl_gx;"));
            p.line("const uint32_t tl_panel = tl_lin / tl_pw, tl_r = tl_lin % tl_pw;");
            p.line(&format!(
                "const uint32_t tl_rows_left = tl_gy - tl_panel * {panel}u;"
            ));
            p.line(&format!(
                "const uint32_t tl_rows = tl_rows_left < {panel}u ? tl_rows_left : {panel}u;"
            ));
            p.line(&format!(
                "const int32_t {} = (int32_t)(tl_r / tl_rows);",
                vars[0]
            ));
            p.line(&format!(
                "const int32_t {} = (int32_t)(tl_panel * {panel}u + tl_r % tl_rows);",
                vars[1]
            ));
            if let Some(z) = vars.get(2) {
                p.line(&format!("const int32_t {z} = (int32_t)blockIdx.z;"));
            }
        }
        _ => {
            for (v, a) in vars.iter().zip(axes) {
                p.line(&format!("const int32_t {v} = (int32_t)blockIdx.{a};"));
            }
        }
    }
}

/// Hopper warpgroup-MMA helpers, included only in kernels that use them (sm_90a).
/// The memory scopes an intrinsic's address operand may name (`Printer::cuda_addr`).
const SHARED: &[Scope] = &[Scope::Shared];
const GLOBAL: &[Scope] = &[Scope::Global];
const LOCAL: &[Scope] = &[Scope::Local];
const ANY_MEM: &[Scope] = &[Scope::Global, Scope::Shared, Scope::Local];

const WGMMA_HEADER: &str = include_str!("../include/tl_wgmma.h");
const TMA_HEADER: &str = include_str!("../include/tl_tma.h");

/// The device function of a wgmma variant: `tl_` and the intrinsic's name.
fn wgmma_function_name(w: &WgmmaOp) -> String {
    format!("tl_{}", w.name())
}

/// One device function per wgmma shape: `steps` wgmma instructions in one `asm` statement, with
/// the `n/2` accumulator registers of this thread bound once as `"+f"` operands (PTX wants
/// them listed one by one) and, for A from registers, four 32-bit registers per step. The
/// parameters follow the intrinsic's arguments: D, A₀, B₀, scale_d, B's LBO, then A/B of the
/// later steps (which always accumulate).
fn wgmma_function(w: &WgmmaOp) -> String {
    let regs = w.n / 2;
    let steps = w.steps.max(1);
    let list: Vec<String> = (0..regs).map(|i| format!("%{i}")).collect();
    let list = list.join(", ");
    let outs: Vec<String> = (0..regs).map(|i| format!("\"+f\"(d[{i}])")).collect();
    let a_type = if w.a_regs {
        "const uint32_t*"
    } else {
        "const void*"
    };
    let mut params = format!("float* d, {a_type} a0, const void* b0, int scale_d, uint32_t b_lbo");
    for s in 1..steps {
        params.push_str(&format!(", {a_type} a{s}, const void* b{s}"));
    }
    let mut body = String::new();
    let mut inputs = vec![];
    let mut next = regs;
    // A operands: four registers per step, or one descriptor per step.
    let mut a_ops = vec![];
    for s in 0..steps {
        if w.a_regs {
            a_ops.push(format!(
                "{{%{}, %{}, %{}, %{}}}",
                next,
                next + 1,
                next + 2,
                next + 3
            ));
            next += 4;
            inputs.extend((0..4).map(|i| format!("\"r\"(a{s}[{i}])")));
        } else {
            body.push_str(&format!(
                "    const uint64_t da{s} = tl_wgmma_desc_sw128(a{s}, 16);\n"
            ));
            a_ops.push(format!("%{next}"));
            next += 1;
            inputs.push(format!("\"l\"(da{s})"));
        }
    }
    let mut b_ops = vec![];
    for s in 0..steps {
        body.push_str(&format!(
            "    const uint64_t db{s} = tl_wgmma_desc_sw128(b{s}, b_lbo);\n"
        ));
        b_ops.push(format!("%{next}"));
        next += 1;
        inputs.push(format!("\"l\"(db{s})"));
    }
    let (scale, one) = (next, next + 1);
    inputs.push("\"r\"(scale_d)".into());
    inputs.push("\"r\"(1)".into());
    // `bf16` / `f16` / `e4m3` / `e5m2`: the dtype names are PTX's type names.
    let (ab, bt) = (w.ab.name(), w.b.name());
    let tb = u32::from(w.b_mn_major);
    // 8-bit types take no transpose immediates (they are K-major only).
    let imms = if w.is_fp8() {
        "1, 1".to_string()
    } else if w.a_regs {
        format!("1, 1, {tb}")
    } else {
        format!("1, 1, {}, {tb}", u32::from(w.a_mn_major))
    };
    let mut asm = format!(
        "\"{{\\n.reg .pred p, q;\\nsetp.ne.b32 p, %{scale}, 0;\\nsetp.ne.b32 q, %{one}, 0;\\n\"\n"
    );
    for s in 0..steps as usize {
        let pred = if s == 0 { "p" } else { "q" };
        asm.push_str(&format!(
            "                 \"wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{ab}.{bt} {{{list}}}, {a}, {b}, {pred}, {imms};\\n\"\n",
            n = w.n,
            k = w.k(),
            a = a_ops[s],
            b = b_ops[s],
        ));
    }
    asm.push_str("                 \"}\\n\"");
    format!(
        "TL_DEVICE void {name}({params}) {{\n{body}    asm volatile({asm}\n                 : {outs}\n                 : {inputs});\n}}\n",
        name = wgmma_function_name(w),
        outs = outs.join(", "),
        inputs = inputs.join(", "),
    )
}

/// Where each shared buffer lives in the dynamic shared-memory block.
pub(crate) struct SharedPlan {
    pub(crate) offsets: HashMap<u64, u64>,
    pub(crate) total: u64,
}

/// A shared buffer to place: its size and the top-level statements that touch it.
struct SharedSlot {
    id: u64,
    bytes: u64,
    align: u64,
    first: usize,
    last: usize,
}

/// Whether statement `s` (or anything inside it) reads or writes buffer `id`.
fn touches(s: &Stmt, id: u64) -> bool {
    let mut hit = false;
    s.walk(&mut |st| {
        if hit {
            return;
        }
        if let StmtKind::Store { buffer, .. } = &st.kind {
            hit |= buffer.id() == id;
        }
        for e in st.exprs() {
            hit |= e.any(&mut |x| matches!(x.kind(), ExprKind::Load(b, _) if b.id() == id));
        }
    });
    hit
}

fn is_call(s: &Stmt, pred: impl Fn(&Intrinsic) -> bool) -> bool {
    matches!(&s.kind, StmtKind::Eval(e) if matches!(e.kind(), ExprKind::Call(op, _) if pred(op)))
}

/// Place every shared `Alloc` of the kernel: 16-byte aligned, 128-byte aligned from 128 bytes
/// up (a TMA destination without a swizzle needs 128: a row of per-row scales, say), and
/// 1024-byte aligned from 1 KiB up (128-byte-swizzled tiles repeat every 1024 bytes). Two buffers share bytes only when every
/// use of the earlier one is over before the later one's first use with a `cp.async.wait_group
/// 0` and then a block barrier in between, at the top level of the kernel: the pipeline's
/// operand tiles and the epilogue's staging tile are the case that matters (the staging tile
/// otherwise costs a block per SM on the GEMM). The simulator keeps buffers apart, so this
/// proof is the only thing that makes the overlap safe; it is deliberately that narrow.
/// The statements whose sequence the shared-memory plan follows: the kernel body, or for a
/// persistent kernel (one loop over rounds, beside the launch-control calls of programmatic
/// dependent launch) the body of a round.
pub(crate) fn planned_scope(k: &Kernel) -> &Stmt {
    if k.attrs.persistent_blocks.is_some() {
        let launch_control = |s: &Stmt| {
            is_call(s, |op| {
                matches!(
                    op,
                    Intrinsic::LaunchDependents | Intrinsic::GridDependencyWait
                )
            })
        };
        let mut items = k.body.flattened();
        items.retain(|s| !launch_control(s));
        if let [one] = items.as_slice() {
            if let StmtKind::For(l) = &one.kind {
                return &l.body;
            }
        }
    }
    &k.body
}

/// With `rounds`, `body` repeats (a persistent kernel's round): two buffers share bytes only if
/// a wait and a barrier separate them both within a round and across the loop's back edge.
/// Whether the kernel issues TMA stores (it then waits for them before it exits).
pub(crate) fn uses_tma_store(body: &Stmt) -> bool {
    let mut found = false;
    body.walk(&mut |s| {
        found |= is_call(s, |op| {
            matches!(op, Intrinsic::TmaStore { .. } | Intrinsic::BulkStore)
        });
    });
    found
}

pub(crate) fn plan_shared(body: &Stmt, rounds: bool, errors: &mut Vec<Diagnostic>) -> SharedPlan {
    let items = body.flattened();
    let mut slots: Vec<SharedSlot> = vec![];
    let mut seen = HashSet::new();
    body.walk(&mut |s| {
        let StmtKind::Alloc(b) = &s.kind else { return };
        if b.scope() != Scope::Shared || !seen.insert(b.id()) {
            return;
        }
        let Some(n) = b.const_numel().filter(|&n| n >= 0) else {
            errors.push(
                Diagnostic::new(
                    DiagKind::Unsupported,
                    b.span(),
                    format!(
                        "shared buffer `{}` has no constant size ({:?})",
                        b.name(),
                        b.shape()
                    ),
                )
                .help("give shared buffers constant shapes"),
            );
            return;
        };
        let bytes = (n as u64).saturating_mul(b.dtype().bytes() as u64);
        let align = match bytes {
            1024.. => 1024,
            128.. => 128,
            _ => 16,
        };
        let at_top = items
            .iter()
            .any(|s| matches!(&s.kind, StmtKind::Alloc(x) if x.id() == b.id()));
        let first = items.iter().position(|s| touches(s, b.id()));
        let last = items.iter().rposition(|s| touches(s, b.id()));
        // A buffer allocated below the top level (or never used) is live throughout.
        let (first, last) = match (at_top, first, last) {
            (true, Some(f), Some(l)) => (f, l),
            _ => (0, items.len()),
        };
        slots.push(SharedSlot {
            id: b.id(),
            bytes,
            align,
            first,
            last,
        });
    });
    // A wait_group 0 (needed only when the kernel issues cp.async at all) and then a barrier,
    // strictly between top-level statements a and b.
    let mut any_cp_async = false;
    body.walk(&mut |s| {
        any_cp_async |= is_call(s, |op| matches!(op, Intrinsic::CpAsync { .. }));
    });
    let fence_between = |a: usize, b: usize| -> bool {
        let mut waited = !any_cp_async;
        for s in items.iter().take(b).skip(a + 1) {
            if is_call(s, |op| matches!(op, Intrinsic::CpAsyncWait { n: 0 })) {
                waited = true;
            } else if waited && is_call(s, |op| matches!(op, Intrinsic::SyncThreads)) {
                return true;
            }
        }
        false
    };
    // Across the back edge: from the later buffer's last use to the end of the round.
    let wraps = |later: &SharedSlot| !rounds || fence_between(later.last, items.len());
    let apart = |x: &SharedSlot, y: &SharedSlot| -> bool {
        (x.last < y.first && fence_between(x.last, y.first) && wraps(y))
            || (y.last < x.first && fence_between(y.last, x.first) && wraps(x))
    };
    let mut offsets = HashMap::new();
    let mut placed: Vec<(usize, u64)> = vec![];
    let mut total: u64 = 0;
    for (i, slot) in slots.iter().enumerate() {
        let mut candidates: Vec<u64> = std::iter::once(0)
            .chain(
                placed
                    .iter()
                    .map(|&(j, off)| off.saturating_add(slots[j].bytes)),
            )
            .map(|o| o.div_ceil(slot.align).saturating_mul(slot.align))
            .collect();
        candidates.sort_unstable();
        let fits = |off: u64| {
            placed.iter().all(|&(j, o)| {
                let other = &slots[j];
                let disjoint_bytes =
                    off.saturating_add(slot.bytes) <= o || o.saturating_add(other.bytes) <= off;
                disjoint_bytes || apart(slot, other)
            })
        };
        let off = candidates
            .into_iter()
            .find(|&o| fits(o))
            .unwrap_or_else(|| total.div_ceil(slot.align).saturating_mul(slot.align));
        offsets.insert(slot.id, off);
        placed.push((i, off));
        total = total.max(off.saturating_add(slot.bytes));
    }
    SharedPlan {
        offsets,
        total: total.div_ceil(16).saturating_mul(16),
    }
}

/// The buffer and indices of an `AddressOf(Load(buf, idx))` argument.
pub(crate) fn address_target(e: &Expr) -> Option<(&Buffer, &[Expr])> {
    match e.kind() {
        ExprKind::Call(Intrinsic::AddressOf, a) => match a.first().map(|l| l.kind()) {
            Some(ExprKind::Load(b, idx)) => Some((b, idx.as_slice())),
            _ => None,
        },
        _ => None,
    }
}

/// Argument positions of intrinsics that only read through the address they are given.
fn reads_only(op: &Intrinsic, i: usize) -> bool {
    match op {
        Intrinsic::Mfma(_) => i == 1 || i == 2,
        Intrinsic::LdsReadTr16 => i == 1,
        Intrinsic::BufferLoadLds { .. } | Intrinsic::BufferLoad { .. } => i == 1,
        Intrinsic::CpAsync { .. } | Intrinsic::VecCopy { .. } => i == 1,
        Intrinsic::Ldmatrix { .. } => i == 0,
        Intrinsic::LoadWindow => i == 1,
        Intrinsic::StoreShifted => i == 1 || i == 2,
        Intrinsic::ShiftedVecCopy => i == 1,
        Intrinsic::PrefetchL2 => i == 0,
        Intrinsic::MmaSync { .. } => i >= 1,
        Intrinsic::Wgmma { .. } => i == 1 || i == 2 || i >= 5,
        _ => false,
    }
}

/// Buffers the kernel may write: stored to, or passed by address to an intrinsic that writes
/// (or to an `Extern`, which might). Input tensors outside this set are declared `const`.
pub(crate) fn written_buffers(body: &Stmt) -> HashSet<u64> {
    let mut out = HashSet::new();
    body.walk(&mut |s| {
        if let StmtKind::Store { buffer, .. } = &s.kind {
            out.insert(buffer.id());
        }
        for e in s.exprs() {
            e.visit(&mut |x| {
                if let ExprKind::Call(op, args) = x.kind() {
                    if *op == Intrinsic::AddressOf {
                        return;
                    }
                    for (i, a) in args.iter().enumerate() {
                        if let Some((b, _)) = address_target(a) {
                            if !reads_only(op, i) {
                                out.insert(b.id());
                            }
                        }
                    }
                }
            });
        }
    });
    out
}

pub(crate) fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The CUDA-only parts of the shared printer.
impl Printer<'_> {
    /// `tl_load_window` / `tl_store_shifted` (`Intrinsic::LoadWindow`, `StoreShifted`): the
    /// window a `u32` array of the thread's, the tensor a global one's first element.
    fn shifted_copy_call(&mut self, op: &Intrinsic, args: &[Expr]) -> String {
        if !self.cuda_nargs(op, args, 4) {
            return "0".into();
        }
        let load = matches!(op, Intrinsic::LoadWindow);
        let (win, tensor) = if load { (0, 1) } else { (1, 2) };
        let Some((w, _)) = self.cuda_addr(op, args.get(win), "window", LOCAL, Some(4)) else {
            return "0".into();
        };
        let Some((t, _)) = self.cuda_addr(op, args.get(tensor), "tensor", GLOBAL, None) else {
            return "0".into();
        };
        if load {
            let (off, count) = (self.expr(&args[2]), self.expr(&args[3]));
            format!("tl_load_window((uint32_t*){w}, {t}, (long long)({off}), (long long)({count}))")
        } else {
            let Some((d, _)) = self.cuda_addr(op, args.first(), "destination", GLOBAL, None) else {
                return "0".into();
            };
            let off = self.expr(&args[3]);
            format!("tl_store_shifted({d}, (const uint32_t*){w}, {t}, (long long)({off}))")
        }
    }

    pub(crate) fn cuda_error(&mut self, kind: DiagKind, message: String, help: &str) -> String {
        self.errors
            .push(Diagnostic::new(kind, Span::UNKNOWN, message).help(help));
        "0".into()
    }

    /// Print an address argument, checking it is `address_of(load)` of a buffer in one of
    /// `scopes` (and, when given, with elements of `bytes` bytes).
    pub(crate) fn cuda_addr(
        &mut self,
        op: &Intrinsic,
        arg: Option<&Expr>,
        what: &str,
        scopes: &[Scope],
        bytes: Option<usize>,
    ) -> Option<(String, Buffer)> {
        let Some((buf, idx)) = arg.and_then(address_target) else {
            self.cuda_error(
                DiagKind::Internal,
                format!("{op}: the {what} argument is not `address_of(buffer[index])`"),
                "this is a compiler bug; lowering must pass element addresses",
            );
            return None;
        };
        if !scopes.contains(&buf.scope()) {
            let want: Vec<&str> = scopes.iter().map(|s| s.name()).collect();
            self.cuda_error(
                DiagKind::ScopeMismatch,
                format!(
                    "{op}: the {what} `{}` is in {} memory; it must be in {}",
                    buf.name(),
                    buf.scope(),
                    want.join(" or ")
                ),
                "this is a compiler bug in lowering",
            );
            return None;
        }
        if let Some(n) = bytes {
            if buf.dtype().bytes() != n {
                self.cuda_error(
                    DiagKind::DTypeMismatch,
                    format!(
                        "{op}: the {what} `{}` has {}-byte elements ({}); it needs {n}-byte ones",
                        buf.name(),
                        buf.dtype().bytes(),
                        buf.dtype()
                    ),
                    "this is a compiler bug in lowering",
                );
                return None;
            }
        }
        let lv = self.lvalue(buf, idx);
        Some((format!("(&{lv})"), buf.clone()))
    }

    pub(crate) fn cuda_nargs(&mut self, op: &Intrinsic, args: &[Expr], n: usize) -> bool {
        if args.len() == n {
            return true;
        }
        self.cuda_error(
            DiagKind::Internal,
            format!("{op} takes {n} arguments, got {}", args.len()),
            "this is a compiler bug; lowering built a malformed intrinsic call",
        );
        false
    }

    /// `tl_tma_load_<rank>d(dst, &map, bar, coords…)` or `tl_tma_store_<rank>d(&map, src,
    /// coords…)`, coordinates innermost first: the map is the kernel's tensor-map parameter for
    /// this (tensor, box, swizzle).
    fn cuda_tma(
        &mut self,
        op: &Intrinsic,
        args: &[Expr],
        box_dims: &[u32],
        swizzle: u32,
    ) -> String {
        let load = matches!(op, Intrinsic::TmaLoad { .. });
        let rank = box_dims.len();
        if !(2..=5).contains(&rank) {
            return self.cuda_error(
                DiagKind::Internal,
                format!("{op}: a {rank}-d box (TMA takes 2 to 5 dims here)"),
                "this is a compiler bug in TMA lowering",
            );
        }
        if !self.cuda_nargs(op, args, op.tma_arg_count().unwrap_or_default()) {
            return "0".into();
        }
        let Some(o) = op.tma_operands(args) else {
            return self.cuda_error(
                DiagKind::Internal,
                format!("{op}: not a TMA copy"),
                "this is a compiler bug in TMA lowering",
            );
        };
        let side = if load { "destination" } else { "source" };
        let Some((smem, _)) = self.cuda_addr(op, Some(o.shared), side, SHARED, None) else {
            return "0".into();
        };
        let Some((_, tensor)) = self.cuda_addr(op, Some(o.tensor), "tensor", GLOBAL, None) else {
            return "0".into();
        };
        let bar = match o.barrier {
            Some(b) => match self.cuda_addr(op, Some(b), "barrier", SHARED, None) {
                Some((b, _)) => Some(b),
                None => return "0".into(),
            },
            None => None,
        };
        let Some(map) = self
            .tmaps
            .get(&(tensor.id(), box_dims.to_vec(), swizzle))
            .cloned()
        else {
            return self.cuda_error(
                DiagKind::Internal,
                format!("{op}: no tensor map for `{}`", tensor.name()),
                "this is a compiler bug: the ABI's tensor maps miss a TMA copy",
            );
        };
        let coords: Vec<String> = o.coords.iter().rev().map(|c| self.expr(c)).collect();
        match (bar, o.mask) {
            (Some(b), Some(mask)) => {
                let mask = self.expr(mask);
                format!(
                    "tl_tma_load_mc_{rank}d({smem}, &{map}, {b}, {mask}, {})",
                    coords.join(", ")
                )
            }
            (Some(b), None) => format!(
                "tl_tma_load_{rank}d({smem}, &{map}, {b}, {})",
                coords.join(", ")
            ),
            (None, _) => format!(
                "tl_tma_store_{rank}d(&{map}, {smem}, {})",
                coords.join(", ")
            ),
        }
    }

    /// The address of rank `peer`'s copy of the element `ptr` points to.
    fn cuda_peer(&mut self, op: &Intrinsic, ptr: String, buf: &Buffer, peer: &Expr) -> String {
        let Some(d) = self.dist.clone() else {
            return self.cuda_error(
                DiagKind::InvalidArgument,
                format!("{op}: names a peer in a kernel that is not distributed"),
                "declare the kernel distributed (`k.distributed()`)",
            );
        };
        if let Some((_, table)) = d.peer_tables.iter().find(|(id, _)| *id == buf.id()) {
            // Peer tables: rank `peer`'s copy is at `table[peer]`, this one at the parameter.
            let entry = self.expr(&Expr::load(table, vec![peer.clone()]));
            let zero = vec![Expr::int(0); buf.rank()];
            let base_elem = Expr::call(
                Intrinsic::AddressOf,
                vec![Expr::load(buf, zero)],
                DType::U64,
            );
            let Some((own, _)) = self.cuda_addr(op, Some(&base_elem), "tensor", GLOBAL, None)
            else {
                return "0".into();
            };
            return format!("tl_peer_table({ptr}, {entry}, {own})");
        }
        let (peer, rank, stride) = (
            self.expr(peer),
            self.expr(&d.rank.expr()),
            self.expr(&d.heap_stride.expr()),
        );
        format!("tl_peer({ptr}, {peer}, {rank}, {stride})")
    }

    /// Memory-model accesses, waits, fences and peer copies (multi-rank kernels).
    fn cuda_dist_call(&mut self, op: &Intrinsic, args: &[Expr], dt: DType) -> String {
        if let Intrinsic::Fence { scope, sc } = op {
            let kind = if *sc { "sc" } else { "acq_rel" };
            return format!("tl_fence_{kind}_{}()", scope.name());
        }
        if let Intrinsic::PeerCopy { lanes, put, unroll } = op {
            let u = (*unroll).max(1) as usize;
            if !self.cuda_nargs(op, args, if u > 1 { 6 } else { 4 }) {
                return "0".into();
            }
            let Some((d, db)) = self.cuda_addr(op, args.first(), "destination", GLOBAL, None)
            else {
                return "0".into();
            };
            let Some((s, sb)) = self.cuda_addr(op, args.get(1), "source", GLOBAL, None) else {
                return "0".into();
            };
            let bytes = *lanes as usize * db.dtype().bytes();
            // Both advance by the same number of elements, one side on the peer; chunk `i` of
            // an unrolled copy lies `i` strides further on both sides.
            let off = self.expr(&args[3]);
            let (d, s) = (format!("({d} + {off})"), format!("({s} + {off})"));
            let (d, s) = if *put {
                (self.cuda_peer(op, d, &db, &args[2]), s)
            } else {
                let s = self.cuda_peer(op, s, &sb, &args[2]);
                (d, s)
            };
            let stride = if u > 1 {
                self.expr(&args[4])
            } else {
                String::new()
            };
            let pairs: Vec<String> = (0..u)
                .map(|i| match i {
                    0 => format!("{d}, {s}"),
                    _ => {
                        format!("{d} + (int64_t){i} * ({stride}), {s} + (int64_t){i} * ({stride})")
                    }
                })
                .collect();
            if u == 1 {
                return format!("tl_vec_copy_{bytes}({})", pairs[0]);
            }
            // The DSL unrolls by 4 (`PEER_COPY_UNROLL`); the PTX printer and the simulator take
            // any count, the header only this one.
            if u != 4 {
                self.cuda_error(
                    DiagKind::Internal,
                    format!("an unrolled peer copy of {u} chunks"),
                    "this is a compiler bug; the CUDA C++ header copies 1 or 4 chunks",
                );
                return "0".into();
            }
            let valid = self.expr(&args[5]);
            return format!("tl_vec_copy_x4_{bytes}({}, {valid})", pairs.join(", "));
        }
        let Some((p, b)) = self.cuda_addr(op, args.first(), "element", GLOBAL, None) else {
            return "0".into();
        };
        let ty = b.dtype();
        let nvals = usize::from(!matches!(op, Intrinsic::MemLoad { .. }));
        if let Intrinsic::MemAtomAdd { sem, scope } = op {
            let p = match args.get(2) {
                Some(peer) => self.cuda_peer(op, p, &b, peer),
                None => p,
            };
            let v = args.get(1).map(|v| self.expr(v)).unwrap_or_default();
            let (suffix, cast) = match ty {
                DType::I32 | DType::U32 => ("u32", "uint32_t"),
                DType::I64 | DType::U64 => ("u64", "uint64_t"),
                other => {
                    return self.cuda_error(
                        DiagKind::Unsupported,
                        format!("{op} on `{}` of type {other}", b.name()),
                        "atomic adds with a value are on i32, u32, i64 or u64 elements",
                    )
                }
            };
            return format!(
                "(({})tl_atom_add_{}_{}_{suffix}({p}, ({cast})({v})))",
                crate::cfamily::storage_type(dt),
                sem.name(),
                scope.name()
            );
        }
        let p = match args.get(1 + nvals) {
            Some(peer) => self.cuda_peer(op, p, &b, peer),
            None => p,
        };
        let bits = match ty {
            DType::I32 | DType::U32 | DType::F32 => "b32",
            DType::I64 | DType::U64 | DType::F64 => "b64",
            other => {
                return self.cuda_error(
                    DiagKind::Unsupported,
                    format!("{op} on `{}` of type {other}", b.name()),
                    "memory-model accesses are on 4- and 8-byte elements (flags are i32, u32, i64 or u64)",
                )
            }
        };
        let value = |pr: &mut Self| args.get(1).map(|v| pr.expr(v)).unwrap_or_default();
        match op {
            Intrinsic::MemLoad { sem, scope } => {
                let raw = format!("tl_ld_{}_{}_{bits}({p})", sem.name(), scope.name());
                match dt {
                    DType::F32 => format!("__uint_as_float({raw})"),
                    DType::F64 => format!("__longlong_as_double((long long){raw})"),
                    other => format!("(({}){raw})", crate::cfamily::storage_type(other)),
                }
            }
            Intrinsic::MemStore { sem, scope } => {
                let v = value(self);
                let v = match ty {
                    DType::F32 => format!("__float_as_uint({v})"),
                    DType::F64 => format!("(uint64_t)__double_as_longlong({v})"),
                    DType::I32 | DType::U32 => format!("(uint32_t)({v})"),
                    _ => format!("(uint64_t)({v})"),
                };
                format!("tl_st_{}_{}_{bits}({p}, {v})", sem.name(), scope.name())
            }
            Intrinsic::MemRedAdd { sem, .. } if sem.acquires() => self.cuda_error(
                DiagKind::Unsupported,
                format!("{op}: PTX reductions have no acquire semantics"),
                "use an atomic add (`atom_add`) for acquire or acq_rel",
            ),
            Intrinsic::MemRedAdd { sem, scope } => {
                let v = value(self);
                let (suffix, v) = match ty {
                    DType::F32 => ("f32", v),
                    DType::I32 | DType::U32 => ("u32", format!("(uint32_t)({v})")),
                    DType::I64 | DType::U64 => ("u64", format!("(uint64_t)({v})")),
                    other => {
                        return self.cuda_error(
                            DiagKind::Unsupported,
                            format!("{op} on `{}` of type {other}", b.name()),
                            "reductions add to f32, i32, u32, i64 or u64 elements",
                        )
                    }
                };
                format!(
                    "tl_red_add_{}_{}_{suffix}({p}, {v})",
                    sem.name(),
                    scope.name()
                )
            }
            Intrinsic::WaitUntil {
                cmp,
                scope,
                wrapping,
            } => {
                let v = value(self);
                let suffix = match ty {
                    DType::I32 => "s32",
                    DType::U32 => "u32",
                    DType::I64 => "s64",
                    DType::U64 => "u64",
                    other => {
                        return self.cuda_error(
                            DiagKind::Unsupported,
                            format!("{op} on `{}` of type {other}", b.name()),
                            "wait on integer flags (i32, u32, i64 or u64)",
                        )
                    }
                };
                // Equality is the same either way.
                let ordered = !matches!(cmp, tl_ir::CmpOp::Eq | tl_ir::CmpOp::Ne);
                let kind = if *wrapping && ordered { "counter_" } else { "" };
                format!(
                    "tl_wait_{kind}{}_{}_{suffix}({p}, {v})",
                    cmp.name(),
                    scope.name()
                )
            }
            other => self.cuda_error(
                DiagKind::Internal,
                format!("{other} reached the multi-rank code generator"),
                "this is a compiler bug",
            ),
        }
    }

    /// `tl_atomic_{add,max,min}_T(addr, v)` (CUDA and HIP headers alike) for an element in
    /// global or shared memory of a type the kind supports ([`AtomicKind::supports`]).
    pub(crate) fn atomic_call(&mut self, op: &Intrinsic, args: &[Expr]) -> String {
        let Some(kind) = tl_ir::AtomicKind::of_intrinsic(op) else {
            return self.unsupported(format!("{op} is not an atomic"));
        };
        if !self.cuda_nargs(op, args, 2) {
            return "0".into();
        }
        let Some((a, b)) = self.cuda_addr(
            op,
            args.first(),
            "target",
            &[Scope::Global, Scope::Shared],
            None,
        ) else {
            return "0".into();
        };
        let ty = b.dtype();
        if !kind.supports(ty) {
            return self.cuda_error(
                DiagKind::Unsupported,
                format!("{} on `{}` of type {ty}", op.name(), b.name()),
                &format!("{} takes {} elements", op.name(), kind.supported_types()),
            );
        }
        let v = self.expr(&args[1]);
        format!("tl_{}_{}({a}, {v})", op.name(), ty.name())
    }

    pub(crate) fn cuda_call(&mut self, op: &Intrinsic, args: &[Expr], dt: DType) -> String {
        match op {
            Intrinsic::ThreadIdx => "((int32_t)threadIdx.x)".into(),
            Intrinsic::ClusterCtaRank => "tl_cluster_ctarank()".into(),
            Intrinsic::MemLoad { .. }
            | Intrinsic::MemStore { .. }
            | Intrinsic::MemRedAdd { .. }
            | Intrinsic::MemAtomAdd { .. }
            | Intrinsic::WaitUntil { .. }
            | Intrinsic::Fence { .. }
            | Intrinsic::PeerCopy { .. } => self.cuda_dist_call(op, args, dt),
            Intrinsic::SyncThreads => "__syncthreads()".into(),
            Intrinsic::SyncWarp => "__syncwarp()".into(),
            Intrinsic::NamedBarrier { id, threads } => {
                format!("asm volatile(\"bar.sync {id}, {threads};\" ::: \"memory\")")
            }
            Intrinsic::NamedBarrierArrive { id, threads } => {
                format!("asm volatile(\"bar.arrive {id}, {threads};\" ::: \"memory\")")
            }
            Intrinsic::SetMaxNReg { inc, regs } => format!(
                "asm volatile(\"setmaxnreg.{}.sync.aligned.u32 {regs};\")",
                if *inc { "inc" } else { "dec" }
            ),
            Intrinsic::ShflXor { width }
            | Intrinsic::ShflDown { width }
            | Intrinsic::ShflIdx { width } => {
                if !self.cuda_nargs(op, args, 2) {
                    return "0".into();
                }
                if !width.is_power_of_two() || *width > 32 {
                    return self.cuda_error(
                        DiagKind::InvalidArgument,
                        format!("{op}: the width must be a power of two up to 32"),
                        "use a width of 1, 2, 4, 8, 16 or 32 lanes",
                    );
                }
                let f = match op {
                    Intrinsic::ShflXor { .. } => "__shfl_xor_sync",
                    Intrinsic::ShflDown { .. } => "__shfl_down_sync",
                    _ => "__shfl_sync",
                };
                let v = self.expr(&args[0]);
                let lane = self.expr(&args[1]);
                let ct = compute_type(args[0].dtype());
                // NVRTC's overloads take 32- and 64-bit ints and floats; narrower ints travel as
                // int (f16/bf16 are already f32 in expressions).
                if matches!(
                    ct,
                    "float" | "double" | "int32_t" | "uint32_t" | "int64_t" | "uint64_t" | "int"
                ) {
                    format!("{f}(0xffffffffu, {v}, {lane}, {width})")
                } else {
                    let rt = compute_type(dt);
                    format!("(({rt}){f}(0xffffffffu, (int)({v}), {lane}, {width}))")
                }
            }
            Intrinsic::CpAsync { bytes } => {
                if !self.cuda_nargs(op, args, 3) {
                    return "0".into();
                }
                if !matches!(bytes, 4 | 8 | 16) {
                    return self.cuda_error(
                        DiagKind::InvalidArgument,
                        format!("{op}: cp.async copies 4, 8 or 16 bytes"),
                        "this is a compiler bug in async-copy lowering",
                    );
                }
                let Some((d, _)) = self.cuda_addr(op, args.first(), "destination", SHARED, None)
                else {
                    return "0".into();
                };
                let Some((s, _)) = self.cuda_addr(op, args.get(1), "source", GLOBAL, None) else {
                    return "0".into();
                };
                let pred = self.expr(&args[2]);
                format!("tl_cp_async_{bytes}({d}, {s}, {pred})")
            }
            Intrinsic::CpAsyncCommit => "tl_cp_async_commit()".into(),
            Intrinsic::CpAsyncWait { n } => format!("tl_cp_async_wait<{n}>()"),
            Intrinsic::VecCopy { lanes } => {
                if args.len() != 3 && !self.cuda_nargs(op, args, 2) {
                    return "0".into();
                }
                let Some((d, db)) = self.cuda_addr(op, args.first(), "destination", ANY_MEM, None)
                else {
                    return "0".into();
                };
                let Some((s, _)) = self.cuda_addr(op, args.get(1), "source", ANY_MEM, None) else {
                    return "0".into();
                };
                let bytes = *lanes as usize * db.dtype().bytes();
                if !matches!(bytes, 1 | 2 | 4 | 8 | 16) {
                    return self.cuda_error(
                        DiagKind::InvalidArgument,
                        format!(
                            "{op} of {} elements moves {bytes} bytes; vector copies move 1, 2, 4, 8 or 16",
                            db.dtype()
                        ),
                        "this is a compiler bug in vectorization",
                    );
                }
                match args.get(2) {
                    Some(p) => {
                        let p = self.expr(p);
                        format!("tl_vec_copy_{bytes}_zfill({d}, {s}, {p})")
                    }
                    None => format!("tl_vec_copy_{bytes}({d}, {s})"),
                }
            }
            Intrinsic::LoadWindow | Intrinsic::StoreShifted => self.shifted_copy_call(op, args),
            Intrinsic::ShiftedVecCopy => {
                if !self.cuda_nargs(op, args, 2) {
                    return "0".into();
                }
                let Some((d, db)) = self.cuda_addr(op, args.first(), "destination", SHARED, None)
                else {
                    return "0".into();
                };
                let Some((s, sb)) = self.cuda_addr(op, args.get(1), "source", SHARED, None) else {
                    return "0".into();
                };
                if db.dtype().bytes() != 2 || sb.dtype().bytes() != 2 {
                    return self.cuda_error(
                        DiagKind::InvalidArgument,
                        format!(
                            "{op} moves 2-byte elements, not {} to {}",
                            sb.dtype(),
                            db.dtype()
                        ),
                        "shift rows of a 16-bit type",
                    );
                }
                format!("tl_shifted_vec_copy({d}, {s})")
            }
            Intrinsic::AtomicAdd | Intrinsic::AtomicMax | Intrinsic::AtomicMin => {
                self.atomic_call(op, args)
            }
            Intrinsic::Ldmatrix { num, trans } => {
                if !self.cuda_nargs(op, args, 2) {
                    return "0".into();
                }
                if !matches!(num, 1 | 2 | 4) {
                    return self.cuda_error(
                        DiagKind::InvalidArgument,
                        format!("{op}: ldmatrix loads 1, 2 or 4 matrices"),
                        "this is a compiler bug in gemm lowering",
                    );
                }
                let Some((s, _)) = self.cuda_addr(op, args.first(), "source", SHARED, Some(2))
                else {
                    return "0".into();
                };
                let Some((d, _)) = self.cuda_addr(op, args.get(1), "destination", LOCAL, Some(2))
                else {
                    return "0".into();
                };
                let t = if *trans { "_trans" } else { "" };
                format!("tl_ldmatrix_x{num}{t}({s}, (uint16_t*){d})")
            }
            Intrinsic::MmaSync { ab } => {
                if !self.cuda_nargs(op, args, 4) {
                    return "0".into();
                }
                if !matches!(ab, DType::BF16 | DType::F16) {
                    return self.cuda_error(
                        DiagKind::Unsupported,
                        format!("mma.sync m16n8k16 with {ab} operands"),
                        "mma.sync m16n8k16 takes bf16 or f16 operands",
                    );
                }
                let d = self.cuda_addr(op, args.first(), "D", LOCAL, Some(4));
                let a = self.cuda_addr(op, args.get(1), "A", LOCAL, Some(2));
                let b = self.cuda_addr(op, args.get(2), "B", LOCAL, Some(2));
                let c = self.cuda_addr(op, args.get(3), "C", LOCAL, Some(4));
                let (Some((d, _)), Some((a, _)), Some((b, _)), Some((c, _))) = (d, a, b, c) else {
                    return "0".into();
                };
                format!(
                    "tl_mma_m16n8k16_{}((float*){d}, (const uint16_t*){a}, (const uint16_t*){b}, (const float*){c})",
                    ab.name()
                )
            }
            Intrinsic::Wgmma(w) => {
                let WgmmaOp {
                    n,
                    ab,
                    b: bt,
                    a_regs,
                    ..
                } = w;
                let steps = w.steps.max(1);
                if !self.cuda_nargs(op, args, 5 + 2 * (steps as usize - 1)) {
                    return "0".into();
                }
                let fp8 = w.is_fp8() && bt.is_fp8();
                if !fp8 && (ab != bt || !matches!(ab, DType::BF16 | DType::F16)) {
                    return self.cuda_error(
                        DiagKind::Unsupported,
                        format!("wgmma with {ab} × {bt} operands"),
                        "wgmma takes bf16 or f16 operands of one type, or fp8 ones",
                    );
                }
                if fp8 && (*a_regs || w.a_mn_major || w.b_mn_major) {
                    return self.cuda_error(
                        DiagKind::Internal,
                        "an fp8 wgmma with an MN-major or register operand".into(),
                        "this is a compiler bug in wgmma lowering (fp8 operands are K-major shared tiles)",
                    );
                }
                let (a_bytes, b_bytes) = (ab.bytes(), bt.bytes());
                if *n == 0 || n % 8 != 0 || *n > 256 {
                    return self.cuda_error(
                        DiagKind::Internal,
                        format!("wgmma with N = {n}"),
                        "this is a compiler bug in wgmma lowering (N is a multiple of 8 up to 256)",
                    );
                }
                let Some((d, _)) = self.cuda_addr(op, args.first(), "D", LOCAL, Some(4)) else {
                    return "0".into();
                };
                let scale = args.get(3).map_or_else(|| "1".into(), |e| self.expr(e));
                let lbo = args.get(4).map_or_else(|| "16".into(), |e| self.expr(e));
                let mut call = vec![format!("(float*){d}")];
                for s in 0..steps as usize {
                    let (ai, bi) = if s == 0 {
                        (1, 2)
                    } else {
                        (3 + 2 * s, 4 + 2 * s)
                    };
                    let a = if *a_regs {
                        self.cuda_addr(op, args.get(ai), "A", LOCAL, Some(a_bytes))
                            .map(|(a, b)| (format!("(const uint32_t*){a}"), b))
                    } else {
                        self.cuda_addr(op, args.get(ai), "A", SHARED, Some(a_bytes))
                    };
                    let b = self.cuda_addr(op, args.get(bi), "B", SHARED, Some(b_bytes));
                    let (Some((a, _)), Some((b, _))) = (a, b) else {
                        return "0".into();
                    };
                    call.push(a);
                    call.push(b);
                    if s == 0 {
                        call.push(format!("(int)({scale})"));
                        call.push(format!("(uint32_t)({lbo})"));
                    }
                }
                let shape = WgmmaOp { steps, ..*w };
                self.wgmma_shapes.insert(shape);
                format!("{}({})", wgmma_function_name(&shape), call.join(", "))
            }
            Intrinsic::WgmmaFence | Intrinsic::WgmmaWait { .. } => {
                // The register arrays are pinned on both sides so the compiler moves no access
                // of them across the asynchronous region (and keeps A's registers allocated).
                let mut pins = vec![];
                for (i, arg) in args.iter().enumerate() {
                    let what = if i == 0 { "accumulator" } else { "A registers" };
                    let Some((p, buf)) = self.cuda_addr(op, Some(arg), what, LOCAL, None) else {
                        return "0".into();
                    };
                    let bytes =
                        buf.const_numel().unwrap_or(0).max(0) as usize * buf.dtype().bytes();
                    pins.push(if buf.dtype() == DType::F32 {
                        format!("tl_wgmma_pin<{}>((float*){p})", bytes / 4)
                    } else {
                        format!("tl_wgmma_pin_u32<{}>((uint32_t*){p})", bytes / 4)
                    });
                }
                let sync = match op {
                    Intrinsic::WgmmaWait { n, pinned: false } => format!("tl_wgmma_wait<{n}>()"),
                    Intrinsic::WgmmaWait { n, pinned: true } => {
                        format!("tl_wgmma_wait_pinned<{n}>()")
                    }
                    _ => "tl_wgmma_fence()".into(),
                };
                if matches!(op, Intrinsic::WgmmaWait { .. }) {
                    pins.insert(0, sync);
                } else {
                    pins.push(sync);
                }
                format!("({})", pins.join(", "))
            }
            Intrinsic::WgmmaCommit => "tl_wgmma_commit()".into(),
            Intrinsic::FenceProxyAsync => "tl_fence_proxy_async()".into(),
            Intrinsic::FenceProxyAsyncGlobal => "tl_fence_proxy_async_global()".into(),
            Intrinsic::LaunchDependents => {
                "asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\")".into()
            }
            Intrinsic::GridDependencyWait => {
                "asm volatile(\"griddepcontrol.wait;\" ::: \"memory\")".into()
            }
            Intrinsic::MbarrierInit { count } => {
                if !self.cuda_nargs(op, args, 1) {
                    return "0".into();
                }
                match self.cuda_addr(op, args.first(), "barrier", SHARED, None) {
                    Some((b, _)) => format!("tl_mbar_init({b}, {count})"),
                    None => "0".into(),
                }
            }
            Intrinsic::FenceMbarrierInit => "tl_fence_mbar_init()".into(),
            Intrinsic::MbarrierArrive => {
                if !self.cuda_nargs(op, args, 1) {
                    return "0".into();
                }
                match self.cuda_addr(op, args.first(), "barrier", SHARED, None) {
                    Some((b, _)) => format!("tl_mbar_arrive({b})"),
                    None => "0".into(),
                }
            }
            Intrinsic::MbarrierArriveExpectTx | Intrinsic::MbarrierWait => {
                if !self.cuda_nargs(op, args, 2) {
                    return "0".into();
                }
                let Some((b, _)) = self.cuda_addr(op, args.first(), "barrier", SHARED, None) else {
                    return "0".into();
                };
                let v = self.expr(&args[1]);
                match op {
                    Intrinsic::MbarrierWait => format!("tl_mbar_wait({b}, {v})"),
                    _ => format!("tl_mbar_expect_tx({b}, {v})"),
                }
            }
            Intrinsic::TmaLoad {
                box_dims, swizzle, ..
            }
            | Intrinsic::TmaStore { box_dims, swizzle } => {
                self.cuda_tma(op, args, box_dims, *swizzle)
            }
            Intrinsic::ClusterSync => "tl_cluster_sync()".into(),
            Intrinsic::MbarrierArriveCluster => {
                if !self.cuda_nargs(op, args, 2) {
                    return "0".into();
                }
                let Some((b, _)) = self.cuda_addr(op, args.first(), "barrier", SHARED, None) else {
                    return "0".into();
                };
                let r = self.expr(&args[1]);
                format!("tl_mbar_arrive_cluster({b}, {r})")
            }
            Intrinsic::BulkStore => {
                if !self.cuda_nargs(op, args, 3) {
                    return "0".into();
                }
                let Some((d, _)) = self.cuda_addr(op, args.first(), "destination", GLOBAL, None)
                else {
                    return "0".into();
                };
                let Some((s, _)) = self.cuda_addr(op, args.get(1), "source", SHARED, None) else {
                    return "0".into();
                };
                let n = self.expr(&args[2]);
                format!("tl_bulk_store({d}, {s}, {n})")
            }
            Intrinsic::BulkCommit => "tl_bulk_commit()".into(),
            Intrinsic::PrefetchL2 => {
                if !self.cuda_nargs(op, args, 1) {
                    return "0".into();
                }
                let Some((a, _)) = self.cuda_addr(op, args.first(), "address", GLOBAL, None) else {
                    return "0".into();
                };
                format!("tl_prefetch_l2({a})")
            }
            Intrinsic::BulkWait { n, read } => {
                format!("tl_bulk_wait{}({n})", if *read { "_read" } else { "" })
            }
            other => self.unsupported(format!("the intrinsic {}", other.name())),
        }
    }

    /// Declarations: shared buffers are pointers into the dynamic block (planned beforehand),
    /// local buffers per-thread arrays (16-byte aligned for vector copies), vars scalars.
    pub(crate) fn cuda_alloc(&mut self, b: &Buffer) {
        let name = self.names.buf(b);
        match b.scope() {
            Scope::Var => {
                let ty = compute_type(b.dtype());
                self.line(&format!("{ty} {name};"));
            }
            Scope::Local => {
                let ty = storage_type(b.dtype());
                match b.const_numel().filter(|&n| n >= 0) {
                    Some(n) => self.line(&format!("__align__(16) {ty} {name}[{}];", n.max(1))),
                    None => {
                        self.cuda_error(
                            DiagKind::Unsupported,
                            format!(
                                "local buffer `{}` has no constant size ({:?})",
                                b.name(),
                                b.shape()
                            ),
                            "give per-thread buffers constant shapes",
                        );
                    }
                }
            }
            Scope::Shared => {
                let ty = storage_type(b.dtype());
                match self.smem_offsets.get(&b.id()).copied() {
                    Some(off) => {
                        self.line(&format!("{ty}* const {name} = ({ty}*)(tl_smem + {off});"))
                    }
                    // plan_shared already reported why this buffer has no place.
                    None if self.errors.is_empty() => {
                        let _ = self.unsupported(format!(
                            "shared buffer `{}` that was not planned",
                            b.name()
                        ));
                    }
                    None => {}
                }
            }
            Scope::Fragment | Scope::Global => {
                let _ = self.cuda_error(
                    DiagKind::Internal,
                    format!(
                        "an allocation of {} buffer `{}` in thread-level IR",
                        b.scope(),
                        b.name()
                    ),
                    "fragments must be lowered to local buffers before code generation",
                );
            }
        }
    }
}
