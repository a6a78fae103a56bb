//! PTX straight from thread-level IR, for ptxas (through nvJitLink).
//!
//! Why: NVRTC spends about half of a kernel's cold compile in NVVM, optimizing CUDA C++ that
//! is already straight-line register code after our passes (docs/design/ptx-backend.md).
//! Printing PTX ourselves leaves only ptxas. The printer covers what the tensor-core kernels
//! use (see [`emit`]); for anything else [`generate`] returns an `unsupported` diagnostic and
//! the driver compiles the CUDA C++ of [`crate::cuda`] instead, saying which path it took.
//!
//! The entry point has the same name, parameters, launch bounds and dynamic shared-memory
//! plan as the CUDA C++ kernel, so the runtime launches either the same way.

mod emit;
mod intrin;
mod linear;
mod regs;

use tl_ir::{
    DType, DiagKind, Diagnostic, Diagnostics, Expr, ExprKind, Intrinsic, Kernel, Param, Role,
    Scope, Span, StmtKind, Var,
};
use tl_target::Target;

use crate::cuda::{plan_shared, planned_scope, sanitize, written_buffers, CudaSource, Language};
use emit::Emitter;
use regs::{Class, Val};

/// The PTX ISA version the output declares: 8.0 (CUDA 12.0) is the first with wgmma and
/// `fence.proxy.async`; everything else used is older.
pub const PTX_ISA: &str = "8.0";

fn unsupported(what: impl std::fmt::Display) -> Diagnostics {
    Diagnostic::new(
        DiagKind::Unsupported,
        Span::UNKNOWN,
        format!("the PTX printer does not support {what}"),
    )
    .help("the kernel compiles through CUDA C++ (NVRTC) instead")
    .into()
}

/// Declare a global pointer parameter and bind buffer `id` to its global address
/// (`read_only`: loads may take the non-coherent path).
fn bind_global(em: &mut Emitter, params: &mut Vec<String>, kname: &str, id: u64, read_only: bool) {
    let name = format!("{kname}_param_{}", params.len());
    params.push(format!(".param .u64 {name}"));
    let r = em.fresh(Class::B64);
    em.ins(&format!("ld.param.u64 {r}, [{name}]"));
    let g = em.fresh(Class::B64);
    em.ins(&format!("cvta.to.global.u64 {g}, {r}"));
    em.globals.insert(id, (g, read_only));
}

/// Generate PTX for a thread-level kernel, or say what it does not support.
pub fn generate(k: &Kernel, target: Target) -> Result<CudaSource, Diagnostics> {
    let sm = match target {
        Target::Cuda { sm } if sm >= 80 => sm,
        other => return Err(unsupported(format_args!("the target `{other}`"))),
    };
    if k.threads == 0 || k.threads > 1024 {
        return Err(unsupported(format_args!("{} threads per block", k.threads)));
    }
    if k.grid.is_empty() || k.grid.len() > 3 || k.block_vars.len() != k.grid.len() {
        return Err(unsupported("this launch grid"));
    }
    let mut errors = vec![];
    let plan = plan_shared(
        planned_scope(k),
        k.attrs.persistent_blocks.is_some(),
        &mut errors,
    );
    if !errors.is_empty() {
        return Err(Diagnostics(errors));
    }
    if plan.total > target.max_shared_bytes() as u64 {
        return Err(unsupported("more shared memory than the target has"));
    }
    let kname = format!("tl_kernel_{}", sanitize(&k.name));
    let written = written_buffers(&k.body);

    let mut em = Emitter::new(sm);
    em.dist = k.attrs.dist.clone();
    k.body.walk(&mut |st| {
        for e in st.exprs() {
            em.inline_math |=
                e.any(&mut |x| matches!(x.kind(), ExprKind::Call(Intrinsic::Wgmma(_), _)));
        }
    });
    let mut params = vec![];
    em.tid = em.fresh(Class::B32);
    let tid = em.tid.clone();
    em.nonneg.insert(tid.clone());
    em.ins(&format!("mov.u32 {tid}, %tid.x"));
    let scalar = |dt: DType| -> Option<(&'static str, Class)> {
        Some(match dt {
            DType::Bool | DType::I32 => ("s32", Class::B32),
            DType::U32 => ("u32", Class::B32),
            DType::I64 => ("s64", Class::B64),
            DType::U64 => ("u64", Class::B64),
            DType::F32 | DType::F16 | DType::BF16 => ("f32", Class::F32),
            _ => return None,
        })
    };
    // `size`: the parameter is one of the kernel's symbolic sizes, bound from tensor shapes,
    // so never negative (divisions of counts built from it then take the unsigned fast path).
    let bind_scalar = |em: &mut Emitter, params: &mut Vec<String>, v: &Var, size: bool| {
        let Some((ty, class)) = scalar(v.dtype()) else {
            return Err(unsupported(format_args!(
                "a scalar parameter of {}",
                v.dtype()
            )));
        };
        let name = format!("{kname}_param_{}", params.len());
        params.push(format!(".param .{ty} {name}"));
        let r = em.fresh(class);
        em.ins(&format!("ld.param.{ty} {r}, [{name}]"));
        if size {
            em.nonneg.insert(r.clone());
        }
        let val = if v.dtype() == DType::Bool {
            em.pure(
                Class::Pred,
                "setp.ne.s32",
                &[&Val::Reg(r, class), &Val::Int(0)],
            )
        } else {
            Val::Reg(r, class)
        };
        em.env.insert(v.id(), val);
        Ok(())
    };
    for p in &k.params {
        match p {
            Param::Tensor { buffer, role } => {
                let read_only = *role == Role::Input && !written.contains(&buffer.id());
                bind_global(&mut em, &mut params, &kname, buffer.id(), read_only);
            }
            Param::Scalar(v) => bind_scalar(&mut em, &mut params, v, false)?,
        }
    }
    for d in &k.dims {
        bind_scalar(&mut em, &mut params, d, true)?;
    }
    // Tensor maps last (`Abi::tmaps`): 128-byte parameters whose generic address the TMA
    // instructions take.
    for t in crate::abi::tma_specs(k) {
        let Some(Param::Tensor { buffer, .. }) = k.params.get(t.param) else {
            continue;
        };
        let name = format!("{kname}_param_{}", params.len());
        params.push(format!(".param .align 64 .b8 {name}[128]"));
        em.tmaps.insert((buffer.id(), t.box_dims, t.swizzle), name);
    }
    // Then, per tensor the kernel stages itself, its scratch and its flags (`Abi::staged`).
    for st in &k.attrs.staged_rows {
        for b in [&st.scratch, &st.flags] {
            bind_global(&mut em, &mut params, &kname, b.id(), false);
        }
    }
    if !em.tmaps.is_empty() {
        // The first copy of each tensor map would otherwise wait for the descriptor's fetch.
        let mut names: Vec<String> = em.tmaps.values().cloned().collect();
        names.sort();
        let first = em.pure(
            Class::Pred,
            "setp.eq.s32",
            &[&Val::Reg(tid.clone(), Class::B32), &Val::Int(0)],
        );
        for n in names {
            let g = em.param_address(&n);
            em.ins(&format!("@{first} prefetch.tensormap [{g}]"));
        }
    }
    let any_shared = !plan.offsets.is_empty();
    if any_shared {
        let r = em.fresh(Class::B32);
        em.ins(&format!("mov.u32 {r}, tl_smem"));
        em.smem_base = Some(r);
    }
    em.smem_offsets = plan.offsets;
    block_indices(&mut em, k).map_err(unsupported)?;
    let blocks_bound = min_blocks(k, plan.total, target, em.inline_math);
    em.hoist_invariants = match blocks_bound {
        None => true,
        // Under a register bound, only when the per-thread arrays leave a quarter of it free
        // (the wgmma GEMM's 96 of 128 do; attention's do not, and hoisting there made ptxas
        // spill or serialize the wgmmas).
        Some(b) => {
            4 * array_registers(k) <= 3 * 65536 / (u64::from(k.threads.max(1)) * u64::from(b))
        }
    };
    em.stmt(&k.body).map_err(unsupported)?;

    let mut code = String::new();
    code.push_str(&format!(
        "//\n// generated by tilelang: PTX for {} (kernel `{}`)\n//\n\n",
        target.arch(),
        k.name
    ));
    code.push_str(&format!(
        ".version {PTX_ISA}\n.target {}\n.address_size 64\n\n",
        target.arch()
    ));
    if any_shared {
        code.push_str(".extern .shared .align 1024 .b8 tl_smem[];\n\n");
    }
    for decl in em.externs.values() {
        code.push_str(decl);
    }
    if !em.externs.is_empty() {
        code.push('\n');
    }
    code.push_str(&format!(".visible .entry {kname}(\n"));
    code.push_str(
        &params
            .iter()
            .map(|p| format!("  {p}"))
            .collect::<Vec<_>>()
            .join(",\n"),
    );
    code.push_str(&format!("\n)\n.maxntid {}, 1, 1\n", k.threads));
    if let Some(c) = k.attrs.cluster {
        let mut d = [1u32; 3];
        d[c.dim.min(2)] = c.size;
        code.push_str(&format!(
            ".reqnctapercluster {}, {}, {}\n",
            d[0], d[1], d[2]
        ));
    }
    if let Some(b) = blocks_bound {
        code.push_str(&format!(".minnctapersm {b}\n"));
    }
    // `setmaxnreg` moves registers within the block's allocation: the kernel must be
    // allocated every register its launch bound allows, or the consumers' `inc` waits for
    // registers the producer's `dec` never frees (PTX ISA, setmaxnreg).
    if uses_setmaxnreg(&k.body) {
        code.push_str(&format!(".maxnreg {}\n", launch_registers(k.threads)));
    }
    code.push_str("{\n");
    code.push_str(&em.regs.declarations());
    code.push('\n');
    code.push_str(&em.out);
    // TMA stores still reading shared memory must finish reading before the block exits
    // (and frees it); their writes to global memory complete with the grid. Waiting for the
    // writes too kept each block's multiprocessor from starting the next block for the
    // store's whole latency (as CUTLASS's epilogues, the exit waits for the reads only).
    if crate::cuda::uses_tma_store(&k.body) {
        code.push_str("  cp.async.bulk.wait_group.read 0;\n");
    }
    code.push_str("  ret;\n}\n");
    Ok(CudaSource {
        code,
        entry: kname,
        dynamic_smem_bytes: plan.total as u32,
        threads: k.threads,
        arch: target.arch(),
        language: Language::Ptx,
    })
}

/// The blocks per multiprocessor to ask ptxas for: the kernel's own request, or two when
/// shared memory and threads allow two. Our PTX leaves ptxas more live values than NVVM's
/// (addresses are hoisted rather than strength-reduced), and without a bound ptxas spends them
/// on registers: the 256-thread attention kernels went from 126 registers and two blocks per
/// multiprocessor (through NVRTC) to 140–200 and one. Two blocks cap a 256-thread kernel at
/// 128 registers, which these kernels fit without spilling (the CI assembly test checks
/// every example for spills). Only for wgmma kernels: the 256-thread mma.sync attention
/// spills under the same cap.
fn min_blocks(k: &Kernel, smem: u64, target: Target, wgmma: bool) -> Option<u32> {
    if let Some(b) = k.attrs.min_blocks_per_sm {
        return (b > 1).then_some(b);
    }
    // A warp-specialized kernel's register split (`setmaxnreg`) shares out the registers
    // its launch holds, and one with a single consumer warpgroup keeps the registers of the
    // kernel it came from: one block per multiprocessor either way.
    if k.attrs.warp_specialized.is_some() {
        return None;
    }
    let by_smem = (target.max_shared_bytes() as u64)
        .checked_div(smem)
        .unwrap_or(u64::MAX);
    let by_threads = 2048 / u64::from(k.threads.max(1));
    (wgmma && by_smem.min(by_threads) >= 2 && k.threads >= 256).then_some(2)
}

/// The registers the per-thread arrays of `k` take, as the emitter allocates them.
fn array_registers(k: &Kernel) -> u64 {
    let mut words = 0u64;
    k.body.walk(&mut |st| {
        if let StmtKind::Alloc(b) = &st.kind {
            if b.scope() == Scope::Local {
                let n = b.const_numel().unwrap_or(0).max(0) as usize;
                if let Ok((_, count, _)) = emit::local_registers(b.dtype(), n) {
                    words += count as u64;
                }
            }
        }
    });
    words
}

/// Bind the block index variables: `%ctaid`, or for a 2-d grid with a panel swizzle the
/// rasterized indices of [`tl_ir::ops::panel_block_indices`] over the linear block number (a
/// 3-d grid: the same for (x, y) within each z).
fn block_indices(em: &mut Emitter, k: &Kernel) -> emit::R<()> {
    let axes = ["x", "y", "z"];
    let mut ctaid = vec![];
    for a in axes.iter().take(k.block_vars.len()) {
        let r = em.fresh(Class::B32);
        em.ins(&format!("mov.u32 {r}, %ctaid.{a}"));
        em.nonneg.insert(r.clone());
        ctaid.push(r);
    }
    match k.attrs.swizzle_panel {
        Some(panel) if panel > 1 && matches!(k.block_vars.len(), 2 | 3) => {
            fn var(em: &mut Emitter, name: &str, reg: String) -> Expr {
                let v = Var::new(name, DType::I32);
                em.env.insert(v.id(), Val::Reg(reg, Class::B32));
                v.expr()
            }
            let x = var(em, "ctaid_x", ctaid[0].clone());
            let y = var(em, "ctaid_y", ctaid[1].clone());
            let mut dims = vec![];
            for a in ["x", "y"] {
                let r = em.fresh(Class::B32);
                em.ins(&format!("mov.u32 {r}, %nctaid.{a}"));
                em.nonneg.insert(r.clone());
                dims.push(r);
            }
            let gx = var(em, "nctaid_x", dims[0].clone());
            let gy = var(em, "nctaid_y", dims[1].clone());
            let tile = y * gx.clone() + x;
            let logical: [Expr; 2] = tl_ir::ops::panel_block_indices(tile, gx, gy, panel);
            for (v, e) in k.block_vars.iter().zip(logical) {
                let val = em.expr(&e)?;
                em.env.insert(v.id(), val);
            }
            if let (Some(z), Some(r)) = (k.block_vars.get(2), ctaid.get(2)) {
                em.env.insert(z.id(), Val::Reg(r.clone(), Class::B32));
            }
        }
        _ => {
            for (v, r) in k.block_vars.iter().zip(ctaid) {
                em.env.insert(v.id(), Val::Reg(r, Class::B32));
            }
        }
    }
    Ok(())
}

fn uses_setmaxnreg(body: &tl_ir::Stmt) -> bool {
    let mut found = false;
    body.walk(&mut |s| {
        if let tl_ir::StmtKind::Eval(e) = &s.kind {
            found |= matches!(
                e.kind(),
                tl_ir::ExprKind::Call(tl_ir::Intrinsic::SetMaxNReg { .. }, _)
            );
        }
    });
    found
}

/// A PTX module for `arch` whose one kernel calls every function of the NVSHMEM shim the
/// printer may call, with zero arguments: linked with the shim and NVSHMEM's archive, it
/// proves every declaration matches a definition (the kernels exercise only some).
pub fn nvshmem_shim_probe(arch: &str) -> String {
    let funcs = intrin::shmem::ALL.iter();
    let mut code = format!(".version {PTX_ISA}\n.target {arch}\n.address_size 64\n\n");
    for f in funcs.clone() {
        code.push_str(&f.declaration());
    }
    code.push_str("\n.visible .entry tl_shmem_probe()\n{\n  .reg .b32 %r<2>;\n  .reg .b64 %rd<2>;\n  mov.u32 %r1, 0;\n  mov.u64 %rd1, 0;\n");
    for f in funcs {
        code.push_str("  {\n");
        let mut names = vec![];
        for (i, t) in f.params.iter().enumerate() {
            let reg = if *t == "b64" { "%rd1" } else { "%r1" };
            code.push_str(&format!(
                "  .param .{t} a{i};\n  st.param.{t} [a{i}], {reg};\n"
            ));
            names.push(format!("a{i}"));
        }
        match f.ret {
            Some(t) => code.push_str(&format!(
                "  .param .{t} r;\n  call (r), {}, ({});\n",
                f.name,
                names.join(", ")
            )),
            None => code.push_str(&format!("  call {}, ({});\n", f.name, names.join(", "))),
        }
        code.push_str("  }\n");
    }
    code.push_str("  ret;\n}\n");
    code
}

pub use tl_ir::launch_registers;

#[cfg(test)]
mod tests {
    use super::*;
    use tl_ir::{Buffer, Scope, Stmt, StmtKind, UnOp};

    /// `Y[tid] = f(X[tid])` as thread-level IR.
    fn unary_kernel(op: UnOp) -> Kernel {
        let x = Buffer::new(
            "X",
            vec![Expr::int(32)],
            DType::F32,
            Scope::Global,
            Span::UNKNOWN,
        );
        let y = Buffer::new(
            "Y",
            vec![Expr::int(32)],
            DType::F32,
            Scope::Global,
            Span::UNKNOWN,
        );
        let tid = Expr::call(Intrinsic::ThreadIdx, vec![], DType::I32);
        let body = Stmt::new(
            StmtKind::Store {
                buffer: y.clone(),
                indices: vec![tid.clone()],
                value: Expr::unary(op, x.load(vec![tid])),
            },
            Span::UNKNOWN,
        );
        Kernel {
            name: "unary".into(),
            dims: vec![],
            params: vec![
                Param::Tensor {
                    buffer: x,
                    role: Role::Input,
                },
                Param::Tensor {
                    buffer: y,
                    role: Role::Output,
                },
            ],
            grid: vec![Expr::int(1)],
            block_vars: vec![Var::new("bx", DType::I32)],
            threads: 32,
            body,
            attrs: Default::default(),
        }
    }

    #[test]
    fn covered_kernels_print_an_entry_with_the_cuda_abi() {
        let src = generate(&unary_kernel(UnOp::Exp2), Target::SM90).expect("covered");
        assert_eq!(src.language, Language::Ptx);
        assert_eq!(src.entry, "tl_kernel_unary");
        assert!(
            src.code.contains(".visible .entry tl_kernel_unary("),
            "{}",
            src.code
        );
        assert!(src.code.contains("ld.global.nc.f32"), "{}", src.code);
        assert!(src.code.contains("ex2.approx.ftz.f32"), "{}", src.code);
        assert!(src.code.contains("st.global.f32"), "{}", src.code);
        assert!(src.code.contains(".maxntid 32, 1, 1"), "{}", src.code);
    }

    #[test]
    fn uncovered_constructs_are_reported_for_the_cuda_fallback() {
        let err = generate(&unary_kernel(UnOp::Tanh), Target::SM90).expect_err("tanh");
        let text = err.to_string();
        assert!(
            text.contains("does not support the function `tanh`"),
            "{text}"
        );
        assert!(text.contains("CUDA C++"), "{text}");
        assert!(generate(&unary_kernel(UnOp::Exp2), Target::Cpu).is_err());
    }
}
