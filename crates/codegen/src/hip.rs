//! HIP C++ from thread-level IR (docs/design/thread-ir.md), for clang's AMDGPU backend
//! (gfx942, gfx950).
//!
//! One `extern "C" __global__` function per kernel with the same ABI as CUDA's: tensor
//! parameters as device pointers, scalars by value, then the symbolic dims as `int32_t`. The
//! source includes no ROCm header: `include/tl_hip.h` (embedded below) supplies the types,
//! the narrow-float conversions, math on the hardware's instructions and the builtin wrappers
//! (MFMA, direct-to-LDS buffer loads, waits, LDS barriers, shuffles), so clang compiles it with
//! `-nogpulib -nogpuinc`.
//!
//! What differs from CUDA besides the intrinsics: every shared buffer is its own static
//! `__shared__` array (so LLVM's alias analysis tells them apart, and adds no wait for a
//! direct-to-LDS load into one buffer before reads of another); the buffer resource
//! descriptor of each tensor that direct-to-LDS loads read is built once at kernel entry; and
//! block indices are remapped over the XCDs when the kernel asks (`KernelAttrs::xcd_remap`).

use std::collections::HashSet;

use tl_ir::{
    BinOp, Buffer, DType, DiagKind, Diagnostic, Diagnostics, Expr, ExprKind, Intrinsic, Kernel,
    Param, Role, Scope, Span, Stmt, StmtKind, UnOp,
};
use tl_target::Target;

use crate::cfamily::{compute_type, storage_type, Dialect, Printer};
use crate::cuda::{address_target, sanitize, scalar_param_type, written_buffers};
use crate::names::Names;

/// The device header every generated HIP kernel starts with.
pub const HIP_HEADER: &str = include_str!("../include/tl_hip.h");

/// Generated HIP source and what the runtime needs to launch it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HipSource {
    pub code: String,
    /// The `extern "C" __global__` function: `tl_kernel_<name>`.
    pub entry: String,
    /// Threads per block (the flat workgroup size).
    pub threads: u32,
    /// `gfx942` or `gfx950`.
    pub arch: String,
    /// Bytes of LDS the kernel's static `__shared__` arrays take.
    pub lds_bytes: u64,
}

/// Names the generated code uses from the header and clang's built-ins.
const HIP_NAMES: &[&str] = &[
    "TL_DEVICE",
    "TL_LDS",
    "int8_t",
    "int16_t",
    "int32_t",
    "int64_t",
    "uint8_t",
    "uint16_t",
    "uint32_t",
    "uint64_t",
    "uintptr_t",
    "expf",
    "exp2f",
    "logf",
    "log2f",
    "sqrtf",
    "rsqrtf",
    "sinf",
    "cosf",
    "tanhf",
    "erff",
    "powf",
    "floorf",
    "ceilf",
    "fabsf",
    "fminf",
    "fmaxf",
    "fmodf",
    "floor",
    "ceil",
    "fabs",
    "fmin",
    "fmax",
    "sqrt",
];

/// Generate HIP C++ for a thread-level kernel. Errors are diagnostics: a non-AMD target, LDS
/// past the target's limit, buffers without constant sizes, double-precision transcendental
/// math (no device library), intrinsics that belong to NVIDIA, constructs that should have
/// been lowered.
pub fn generate(k: &Kernel, target: Target) -> Result<HipSource, Diagnostics> {
    let Some(arch) = target.amd() else {
        return Err(Diagnostic::new(
            DiagKind::Unsupported,
            Span::UNKNOWN,
            format!("HIP code generation does not support the target `{target}`"),
        )
        .help("generate HIP for gfx942 (MI300X) or gfx950 (MI355X)")
        .into());
    };
    let mut errors = vec![];
    let span = k.body.span;
    if k.threads == 0 || k.threads > 1024 {
        errors.push(
            Diagnostic::new(
                DiagKind::InvalidArgument,
                span,
                format!("kernel `{}` has {} threads per block", k.name, k.threads),
            )
            .help("use between 1 and 1024 threads per block (a multiple of 64 fills whole waves)"),
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
    errors.extend(f64_math(&k.body, target));
    let lds_bytes = lds_total(&k.body, &mut errors);
    if lds_bytes > arch.lds_bytes as u64 {
        errors.push(
            Diagnostic::new(
                DiagKind::OutOfRange,
                span,
                format!(
                    "kernel `{}` needs {lds_bytes} bytes of LDS; {target} allows {} bytes per workgroup",
                    k.name, arch.lds_bytes
                ),
            )
            .help("use smaller tiles or fewer pipeline stages"),
        );
    }

    let mut names = Names::new();
    for n in HIP_NAMES {
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
                params.push(format!(
                    "{konst}{}* __restrict__ {n}",
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

    names.reserve("tl_wave");
    let mut p = Printer::new(&mut names, Dialect::Hip);
    // The wave's index once, in a scalar register.
    p.line("const int32_t tl_wave = tl_wave_idx();");
    resource_descriptors(&mut p, k);
    block_indices(&mut p, k);
    p.stmt(&k.body);
    errors.append(&mut p.errors);
    let body = std::mem::take(&mut p.out);
    if !errors.is_empty() {
        return Err(Diagnostics(errors));
    }
    let mut code = String::new();
    code.push_str(&format!(
        "/* generated by tilelang: HIP C++ for {} (kernel `{}`) */\n",
        target.arch(),
        k.name
    ));
    code.push_str(HIP_HEADER);
    code.push('\n');
    code.push_str(&format!(
        "extern \"C\" __global__ void TL_LAUNCH_BOUNDS({}) {kname}({}) {{\n{body}}}\n",
        k.threads.max(1),
        params.join(", ")
    ));
    Ok(HipSource {
        code,
        entry: kname,
        threads: k.threads,
        arch: target.arch(),
        lds_bytes,
    })
}

/// Double-precision transcendental functions have no instruction and no library here.
fn f64_math(body: &Stmt, target: Target) -> Vec<Diagnostic> {
    let mut out = vec![];
    body.walk(&mut |s| {
        for e in s.exprs() {
            e.visit(&mut |x| {
                let name = match x.kind() {
                    ExprKind::Unary(op, a) if a.dtype() == DType::F64 => {
                        let plain = matches!(
                            op,
                            UnOp::Neg
                                | UnOp::Not
                                | UnOp::Abs
                                | UnOp::Floor
                                | UnOp::Ceil
                                | UnOp::Sqrt
                        );
                        (!plain).then(|| op.name())
                    }
                    ExprKind::Bin(BinOp::Pow, a, _) if a.dtype() == DType::F64 => Some("pow"),
                    _ => None,
                };
                if let (Some(name), true) = (name, out.is_empty()) {
                    out.push(
                        Diagnostic::new(
                            DiagKind::Unsupported,
                            s.span,
                            format!(
                                "`{name}` on f64 on {target}: AMD GPUs have no double-precision {name} instruction and kernels here link no device math library"
                            ),
                        )
                        .help("compute it in f32 (cast the operand), or run the kernel on another target"),
                    );
                }
            });
        }
    });
    out
}

/// Bytes of the kernel's static LDS arrays, as the compiler lays them out (each aligned like
/// its declaration).
fn lds_total(body: &Stmt, errors: &mut Vec<Diagnostic>) -> u64 {
    let mut total = 0u64;
    let mut seen = HashSet::new();
    body.walk(&mut |s| {
        let StmtKind::Alloc(b) = &s.kind else { return };
        if b.scope() != Scope::Shared || !seen.insert(b.id()) {
            return;
        }
        match b.const_numel().filter(|&n| n >= 0) {
            Some(n) => {
                let bytes = (n as u64).saturating_mul(b.dtype().bytes() as u64);
                let align = lds_align(bytes);
                total = total.div_ceil(align).saturating_mul(align) + bytes;
            }
            None => errors.push(
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
            ),
        }
    });
    total
}

/// 1024-byte alignment from 1 KiB up (swizzled tiles repeat every 1024 bytes), 16 below.
fn lds_align(bytes: u64) -> u64 {
    if bytes >= 1024 {
        1024
    } else {
        16
    }
}

/// `tl_rsrc A_srd = tl_make_rsrc(A, bytes)` for every tensor a buffer load reads.
fn resource_descriptors(p: &mut Printer, k: &Kernel) {
    let mut tensors: Vec<Buffer> = vec![];
    k.body.walk(&mut |s| {
        if let StmtKind::Eval(e) = &s.kind {
            if let ExprKind::Call(
                Intrinsic::BufferLoadLds { .. } | Intrinsic::BufferLoad { .. },
                args,
            ) = e.kind()
            {
                if let Some((b, _)) = args.get(1).and_then(address_target) {
                    if !tensors.iter().any(|t| t.id() == b.id()) {
                        tensors.push(b.clone());
                    }
                }
            }
        }
    });
    for t in tensors {
        let name = p.names.buf(&t);
        let srd = format!("{name}_srd");
        p.names.reserve(&srd);
        // The range check is 32-bit: tensors of 2 GiB and more are refused at launch.
        let numel = t
            .shape()
            .iter()
            .fold(Expr::int(1).cast(DType::I64), |acc, d| {
                acc * d.clone().cast(DType::I64)
            });
        let bytes = tl_ir::simplify(&(numel * t.dtype().bytes() as i64));
        let b = p.expr(&bytes);
        p.line(&format!(
            "const tl_rsrc {srd} = tl_make_rsrc({name}, (uint32_t)({b} < 0x7fffffffLL ? {b} : 0x7fffffffLL));"
        ));
        p.srds.insert(t.id(), srd);
    }
}

/// Block indices: `blockIdx`, remapped over the XCDs (`xcd_remap`) and then in panels
/// (`swizzle_panel`) for a 2-d grid, exactly as docs/design/thread-ir.md and the simulator
/// define them.
fn block_indices(p: &mut Printer, k: &Kernel) {
    let axes = ["x", "y", "z"];
    let vars: Vec<String> = k.block_vars.iter().map(|v| p.names.var(v)).collect();
    let panel = k.attrs.swizzle_panel.filter(|&x| x > 1);
    // A 3-d grid rasterizes (x, y) within each z in panels; the XCD remap is 2-d only.
    let xcd = k.attrs.xcd_remap.filter(|&x| x > 1 && vars.len() == 2);
    let planar = vars.len() == 2 || (vars.len() == 3 && panel.is_some());
    if !planar || (xcd.is_none() && panel.is_none()) {
        for (v, a) in vars.iter().zip(axes) {
            p.line(&format!(
                "const int32_t {v} = (int32_t)__builtin_amdgcn_workgroup_id_{a}();"
            ));
        }
        return;
    }
    let gx = p.expr(&k.grid[0]);
    let gy = p.expr(&k.grid[1]);
    p.line(&format!(
        "const uint32_t tl_gx = (uint32_t)({gx}), tl_gy = (uint32_t)({gy});"
    ));
    p.line("uint32_t tl_lin = __builtin_amdgcn_workgroup_id_y() * tl_gx + __builtin_amdgcn_workgroup_id_x();");
    if let Some(x) = xcd {
        // Workgroups go to the XCDs round-robin: give each XCD a contiguous run of tiles.
        p.line("{");
        p.indent += 1;
        p.line("const uint32_t tl_n = tl_gx * tl_gy;");
        p.line(&format!(
            "const uint32_t tl_per = (tl_n + {x}u - 1u) / {x}u;"
        ));
        p.line(&format!(
            "const uint32_t tl_tall = tl_n % {x}u == 0u ? {x}u : tl_n % {x}u;"
        ));
        p.line(&format!(
            "const uint32_t tl_xcd = tl_lin % {x}u, tl_local = tl_lin / {x}u;"
        ));
        p.line("tl_lin = tl_xcd < tl_tall ? tl_xcd * tl_per + tl_local : tl_tall * tl_per + (tl_xcd - tl_tall) * (tl_per - 1u) + tl_local;");
        p.indent -= 1;
        p.line("}");
    }
    match panel {
        Some(panel) => {
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
        }
        None => {
            p.line(&format!(
                "const int32_t {} = (int32_t)(tl_lin % tl_gx);",
                vars[0]
            ));
            p.line(&format!(
                "const int32_t {} = (int32_t)(tl_lin / tl_gx);",
                vars[1]
            ));
        }
    }
    if let Some(z) = vars.get(2) {
        p.line(&format!(
            "const int32_t {z} = (int32_t)__builtin_amdgcn_workgroup_id_z();"
        ));
    }
}

/// The HIP-only parts of the shared printer.
impl Printer<'_> {
    pub(crate) fn hip_call(&mut self, op: &Intrinsic, args: &[Expr], dt: DType) -> String {
        const SHARED: &[Scope] = &[Scope::Shared];
        const GLOBAL: &[Scope] = &[Scope::Global];
        const LOCAL: &[Scope] = &[Scope::Local];
        const ANY_MEM: &[Scope] = &[Scope::Global, Scope::Shared, Scope::Local];
        match op {
            Intrinsic::ThreadIdx => "tl_thread_idx()".into(),
            Intrinsic::WaveIdx => "tl_wave".into(),
            Intrinsic::SyncThreads => "tl_syncthreads()".into(),
            Intrinsic::BarrierLds => "tl_barrier_lds()".into(),
            Intrinsic::SyncWarp => "__builtin_amdgcn_wave_barrier()".into(),
            Intrinsic::WaitVmcnt { n } => format!("tl_wait_vmcnt({n})"),
            Intrinsic::SchedBarrier { mask } => {
                format!("__builtin_amdgcn_sched_barrier({mask})")
            }
            Intrinsic::SetPrio { prio } => {
                if *prio > 3 {
                    return self.cuda_error(
                        DiagKind::Internal,
                        format!("{op}: s_setprio takes 0 to 3"),
                        "this is a compiler bug in the scheduling stage",
                    );
                }
                if args.is_empty() {
                    return format!("__builtin_amdgcn_s_setprio({prio})");
                }
                // Pinned to the registers it names: the compiler moves no access of them
                // across it (the builtin alone may be moved or dropped).
                let mut pins = vec![];
                for a in args {
                    let Some((p, _)) = self.cuda_addr(op, Some(a), "register", LOCAL, Some(4))
                    else {
                        return "0".into();
                    };
                    pins.push(format!("\"+v\"(*(tl_f32x4*){p})"));
                }
                format!("asm volatile(\"s_setprio {prio}\" : {})", pins.join(", "))
            }
            Intrinsic::ShflXor { width }
            | Intrinsic::ShflDown { width }
            | Intrinsic::ShflIdx { width } => {
                if !self.cuda_nargs(op, args, 2) {
                    return "0".into();
                }
                if !width.is_power_of_two() || *width > 64 {
                    return self.cuda_error(
                        DiagKind::InvalidArgument,
                        format!("{op}: the width must be a power of two up to 64"),
                        "use a width of 1 to 64 lanes",
                    );
                }
                let kind = match op {
                    Intrinsic::ShflXor { .. } => 0,
                    Intrinsic::ShflDown { .. } => 1,
                    _ => 2,
                };
                let v = self.expr(&args[0]);
                let lane = self.expr(&args[1]);
                match compute_type(args[0].dtype()) {
                    "float" => format!("tl_shfl_f32({v}, {kind}, {lane}, {width})"),
                    "double" => format!("tl_shfl_f64({v}, {kind}, {lane}, {width})"),
                    "int64_t" | "uint64_t" => {
                        let rt = compute_type(dt);
                        format!("(({rt})tl_shfl_i64((int64_t)({v}), {kind}, {lane}, {width}))")
                    }
                    _ => {
                        let rt = compute_type(dt);
                        format!("(({rt})tl_shfl_i32((int)({v}), {kind}, {lane}, {width}))")
                    }
                }
            }
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
                        format!("{op} of {} elements moves {bytes} bytes; vector copies move 1, 2, 4, 8 or 16", db.dtype()),
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
            Intrinsic::AtomicAdd | Intrinsic::AtomicMax | Intrinsic::AtomicMin => {
                self.atomic_call(op, args)
            }
            Intrinsic::Mfma(m) => {
                if !self.cuda_nargs(op, args, 4) {
                    return "0".into();
                }
                if !matches!(m.ab, DType::BF16 | DType::F16) {
                    return self.cuda_error(
                        DiagKind::Unsupported,
                        format!("MFMA with {} operands", m.ab),
                        "MFMA here takes bf16 or f16 operands",
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
                    "tl_{}((float*){d}, (const uint16_t*){a}, (const uint16_t*){b}, (const float*){c})",
                    m.name()
                )
            }
            Intrinsic::LdsReadTr16 => {
                if !self.cuda_nargs(op, args, 2) {
                    return "0".into();
                }
                let d = self.cuda_addr(op, args.first(), "destination", LOCAL, Some(2));
                let s = self.cuda_addr(op, args.get(1), "source", SHARED, Some(2));
                let (Some((d, _)), Some((s, _))) = (d, s) else {
                    return "0".into();
                };
                format!("tl_ds_read_tr16_b64({d}, {s})")
            }
            Intrinsic::BufferLoadLds { bytes } => {
                if !self.cuda_nargs(op, args, 5) {
                    return "0".into();
                }
                if !matches!(bytes, 4 | 16) {
                    return self.cuda_error(
                        DiagKind::Internal,
                        format!("{op}: direct-to-LDS loads move 4 or 16 bytes per lane here"),
                        "this is a compiler bug in the direct-to-LDS copy lowering",
                    );
                }
                let Some((lds, _)) = self.cuda_addr(op, args.first(), "LDS base", SHARED, None)
                else {
                    return "0".into();
                };
                let Some((_, tensor)) = self.cuda_addr(op, args.get(1), "tensor", GLOBAL, None)
                else {
                    return "0".into();
                };
                let Some(srd) = self.srds.get(&tensor.id()).cloned() else {
                    return self.cuda_error(
                        DiagKind::Internal,
                        format!("{op}: no resource descriptor for `{}`", tensor.name()),
                        "this is a compiler bug in HIP code generation",
                    );
                };
                let voff = self.expr(&args[2]);
                let soff = self.expr(&args[3]);
                let pred = self.expr(&args[4]);
                format!(
                    "tl_buffer_load_lds_{bytes}({lds}, {srd}, (uint32_t)({voff}), (uint32_t)({soff}), {pred})"
                )
            }
            Intrinsic::BufferLoad { bytes } => {
                if !self.cuda_nargs(op, args, 5) {
                    return "0".into();
                }
                if !matches!(bytes, 4 | 8 | 16) {
                    return self.cuda_error(
                        DiagKind::Internal,
                        format!("{op}: buffer loads move 4, 8 or 16 bytes per lane here"),
                        "this is a compiler bug in the copy lowering",
                    );
                }
                let Some((dst, _)) = self.cuda_addr(op, args.first(), "destination", LOCAL, None)
                else {
                    return "0".into();
                };
                let Some((_, tensor)) = self.cuda_addr(op, args.get(1), "tensor", GLOBAL, None)
                else {
                    return "0".into();
                };
                let Some(srd) = self.srds.get(&tensor.id()).cloned() else {
                    return self.cuda_error(
                        DiagKind::Internal,
                        format!("{op}: no resource descriptor for `{}`", tensor.name()),
                        "this is a compiler bug in HIP code generation",
                    );
                };
                let voff = self.expr(&args[2]);
                let soff = self.expr(&args[3]);
                let pred = self.expr(&args[4]);
                format!(
                    "tl_buffer_load_{bytes}({dst}, {srd}, (uint32_t)({voff}), (uint32_t)({soff}), {pred})"
                )
            }
            Intrinsic::Print { .. } => self.cuda_error(
                DiagKind::Unsupported,
                "print on an AMD target".to_string(),
                "print from the CPU backend, the simulator or an NVIDIA GPU (device printf on AMD needs ROCm's device libraries, which this compiler does not link)",
            ),
            other => self.cuda_error(
                DiagKind::Unsupported,
                format!("the intrinsic {} on an AMD target", other.name()),
                "this is a compiler bug: lowering for AMD emitted an NVIDIA intrinsic",
            ),
        }
    }

    /// Declarations: shared buffers are static `__shared__` arrays of their own, local buffers
    /// per-thread arrays (16-byte aligned for vector accesses), vars scalars.
    pub(crate) fn hip_alloc(&mut self, b: &Buffer) {
        let name = self.names.buf(b);
        match b.scope() {
            Scope::Var => {
                let ty = compute_type(b.dtype());
                self.line(&format!("{ty} {name};"));
            }
            Scope::Local | Scope::Shared => {
                let ty = storage_type(b.dtype());
                let Some(n) = b.const_numel().filter(|&n| n >= 0) else {
                    let _ = self.cuda_error(
                        DiagKind::Unsupported,
                        format!(
                            "{} buffer `{}` has no constant size ({:?})",
                            b.scope(),
                            b.name(),
                            b.shape()
                        ),
                        "give shared and per-thread buffers constant shapes",
                    );
                    return;
                };
                let n = n.max(1);
                if b.scope() == Scope::Shared {
                    let align = lds_align(n as u64 * b.dtype().bytes() as u64);
                    self.line(&format!(
                        "__shared__ __attribute__((aligned({align}))) {ty} {name}[{n}];"
                    ));
                } else {
                    self.line(&format!("__attribute__((aligned(16))) {ty} {name}[{n}];"));
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
