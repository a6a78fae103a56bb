//! CUDA code generation, checked on the text (no NVRTC needed; crates/nvrtc/tests compiles the
//! output): the kernel ABI, shared-memory placement, block swizzle, intrinsic spellings, and
//! diagnostics instead of panics for what CUDA codegen cannot print.

use tl_codegen::cuda::{generate, CudaSource};
use tl_ir::{
    Buffer, DType, DiagKind, Diagnostics, Expr, For, ForKind, Intrinsic, Kernel, KernelAttrs,
    Param, Role, Scope, Span, Stmt, StmtKind, Var,
};
use tl_target::Target;

fn s(kind: StmtKind) -> Stmt {
    Stmt::new(kind, Span::UNKNOWN)
}
fn seq(v: Vec<Stmt>) -> Stmt {
    Stmt::seq(v, Span::UNKNOWN)
}
fn buf(name: &str, shape: &[i64], dt: DType, scope: Scope) -> Buffer {
    Buffer::new(
        name,
        shape.iter().map(|&x| Expr::int(x)).collect(),
        dt,
        scope,
        Span::UNKNOWN,
    )
}
fn call(op: Intrinsic, args: Vec<Expr>) -> Stmt {
    s(StmtKind::Eval(Expr::call(op, args, DType::Bool)))
}
fn addr(b: &Buffer, idx: Vec<Expr>) -> Expr {
    Expr::call(Intrinsic::AddressOf, vec![b.load(idx)], DType::U64)
}
fn tid() -> Expr {
    Expr::call(Intrinsic::ThreadIdx, vec![], DType::I32)
}
fn store(b: &Buffer, idx: Vec<Expr>, v: impl Into<Expr>) -> Stmt {
    s(StmtKind::Store {
        buffer: b.clone(),
        indices: idx,
        value: v.into(),
    })
}

/// A kernel `k(X: f32[N] in, Y: bf16[N] out, alpha: f32, flag: bool; dims N)` with `body`
/// (which may use the returned buffers and vars).
struct Fixture {
    n: Var,
    x: Buffer,
    y: Buffer,
    alpha: Var,
    flag: Var,
    bx: Var,
    by: Var,
}

impl Fixture {
    fn new() -> Fixture {
        let n = Var::new("N", DType::I32);
        Fixture {
            x: Buffer::new(
                "X",
                vec![n.expr()],
                DType::F32,
                Scope::Global,
                Span::UNKNOWN,
            ),
            y: Buffer::new(
                "Y",
                vec![n.expr()],
                DType::BF16,
                Scope::Global,
                Span::UNKNOWN,
            ),
            n,
            alpha: Var::new("alpha", DType::F32),
            flag: Var::new("flag", DType::Bool),
            bx: Var::new("bx", DType::I32),
            by: Var::new("by", DType::I32),
        }
    }
    fn kernel(&self, body: Vec<Stmt>, grid2d: bool, swizzle: Option<u32>) -> Kernel {
        let (grid, block_vars) = if grid2d {
            (
                vec![Expr::int(4), Expr::int(8)],
                vec![self.bx.clone(), self.by.clone()],
            )
        } else {
            (vec![self.n.expr()], vec![self.bx.clone()])
        };
        Kernel {
            name: "k".into(),
            dims: vec![self.n.clone()],
            params: vec![
                Param::Tensor {
                    buffer: self.x.clone(),
                    role: Role::Input,
                },
                Param::Tensor {
                    buffer: self.y.clone(),
                    role: Role::Output,
                },
                Param::Scalar(self.alpha.clone()),
                Param::Scalar(self.flag.clone()),
            ],
            grid,
            block_vars,
            threads: 128,
            body: seq(body),
            attrs: KernelAttrs {
                swizzle_panel: swizzle,
                ..Default::default()
            },
        }
    }
}

fn gen(k: &Kernel) -> CudaSource {
    generate(k, Target::SM80).unwrap_or_else(|d| panic!("{d}"))
}

fn gen_err(k: &Kernel, t: Target) -> Diagnostics {
    match generate(k, t) {
        Ok(s) => panic!("expected an error, got:\n{}", s.code),
        Err(d) => d,
    }
}

/// The kernel function (after the embedded header).
fn kernel_text(src: &CudaSource) -> &str {
    let i = src.code.find("extern \"C\"").unwrap_or(0);
    &src.code[i..]
}

#[test]
fn signature_follows_the_abi() {
    let f = Fixture::new();
    let k = f.kernel(
        vec![store(
            &f.y,
            vec![f.bx.expr()],
            f.x.load(vec![f.bx.expr()]) * f.alpha.expr(),
        )],
        false,
        None,
    );
    let src = gen(&k);
    assert_eq!(src.entry, "tl_kernel_k");
    assert_eq!(src.threads, 128);
    assert_eq!(src.arch, "sm_80");
    assert_eq!(src.dynamic_smem_bytes, 0);
    let text = kernel_text(&src);
    assert!(
        text.starts_with(
            "extern \"C\" __global__ void __launch_bounds__(128) tl_kernel_k(const float* __restrict__ X, uint16_t* __restrict__ Y, const float alpha, const int32_t flag, const int32_t N) {"
        ),
        "{text}"
    );
    assert!(
        text.contains("const int32_t bx = (int32_t)blockIdx.x;"),
        "{text}"
    );
    assert!(
        text.contains("Y[(int64_t)(bx)] = tl_f32_to_bf16((X[(int64_t)(bx)] * alpha));"),
        "{text}"
    );
    // No shared memory, so no shared declaration.
    assert!(!text.contains("tl_smem"), "{text}");
    // Self-contained: NVRTC gets no include path.
    assert!(!src.code.contains("#include"), "{}", src.code);
    assert_eq!(
        generate(&k, Target::SM90).map(|s| s.arch).ok().as_deref(),
        Some("sm_90a")
    );
}

#[test]
fn an_input_that_is_written_is_not_const() {
    let f = Fixture::new();
    let k = f.kernel(
        vec![call(
            Intrinsic::AtomicAdd,
            vec![addr(&f.x, vec![Expr::int(0)]), Expr::float(1.0)],
        )],
        false,
        None,
    );
    let text = gen(&k).code;
    assert!(text.contains("(float* __restrict__ X,"), "{text}");
    assert!(
        text.contains("tl_atomic_add_f32((&X[(int64_t)(0)]), 1.0f);")
            || text.contains("tl_atomic_add_f32((&X[0]), 1.0f);"),
        "{text}"
    );
}

#[test]
fn shared_buffers_share_one_aligned_dynamic_block() {
    let f = Fixture::new();
    let small = buf("small", &[3], DType::F32, Scope::Shared); // 12 bytes at 0
    let big = buf("big", &[32, 32], DType::BF16, Scope::Shared); // 2048 bytes at 1024
                                                                 // 10 bytes: first fit puts it in the gap after `small`, below `big`'s 1 KiB alignment.
    let tail = buf("tail", &[5], DType::F16, Scope::Shared);
    let local = buf("regs", &[4, 2], DType::BF16, Scope::Local);
    let var = buf("acc", &[1], DType::BF16, Scope::Var);
    let k = f.kernel(
        vec![
            s(StmtKind::Alloc(small.clone())),
            s(StmtKind::Alloc(big.clone())),
            s(StmtKind::Alloc(local.clone())),
            s(StmtKind::Alloc(var.clone())),
            s(StmtKind::If {
                cond: f.flag.expr().to_bool(),
                then_: Box::new(seq(vec![
                    s(StmtKind::Alloc(tail.clone())),
                    store(&tail, vec![tid()], 1.0f32),
                ])),
                else_: None,
            }),
            store(&small, vec![tid()], 1.0f32),
            store(&big, vec![Expr::int(1), tid()], 2.0f32),
            store(&local, vec![Expr::int(1), Expr::int(1)], 3.0f32),
            store(
                &var,
                vec![Expr::int(0)],
                var.load(vec![Expr::int(0)]) + 1.0f32,
            ),
            call(Intrinsic::SyncThreads, vec![]),
        ],
        false,
        None,
    );
    let src = gen(&k);
    let text = kernel_text(&src);
    assert_eq!(src.dynamic_smem_bytes, 3072, "{text}");
    for want in [
        "extern __shared__ __align__(1024) unsigned char tl_smem[];",
        "float* const small = (float*)(tl_smem + 0);",
        "uint16_t* const big = (uint16_t*)(tl_smem + 1024);",
        "uint16_t* const tail = (uint16_t*)(tl_smem + 16);",
        "__align__(16) uint16_t regs[8];",
        "float acc;",
        "acc = (acc + 1.0f);",
        "big[(((int32_t)threadIdx.x) + 32)] = tl_f32_to_bf16(2.0f);",
        "regs[3] = tl_f32_to_bf16(3.0f);",
        "__syncthreads();",
    ] {
        assert!(text.contains(want), "missing `{want}` in\n{text}");
    }
}

#[test]
fn an_empty_shared_buffer_still_has_a_base() {
    let f = Fixture::new();
    let empty = buf("empty", &[0], DType::F32, Scope::Shared);
    let src = gen(&f.kernel(vec![s(StmtKind::Alloc(empty))], false, None));
    assert_eq!(src.dynamic_smem_bytes, 0);
    let text = kernel_text(&src);
    assert!(text.contains("unsigned char tl_smem[];"), "{text}");
    assert!(
        text.contains("float* const empty = (float*)(tl_smem + 0);"),
        "{text}"
    );
}

#[test]
fn block_swizzle_for_a_2d_grid() {
    let f = Fixture::new();
    let body = vec![store(&f.y, vec![f.by.expr() * 4 + f.bx.expr()], 0.0f32)];
    let text = gen(&f.kernel(body.clone(), true, Some(3))).code;
    for want in [
        "const uint32_t tl_lin = blockIdx.y * tl_gx + blockIdx.x;",
        "const uint32_t tl_pw = 3u * tl_gx;",
        "const int32_t bx = (int32_t)(tl_r / tl_rows);",
        "const int32_t by = (int32_t)(tl_panel * 3u + tl_r % tl_rows);",
    ] {
        assert!(text.contains(want), "missing `{want}` in\n{text}");
    }
    // Without the attribute (or with a 1-row panel) the indices are blockIdx itself.
    for sw in [None, Some(1)] {
        let text = gen(&f.kernel(body.clone(), true, sw)).code;
        assert!(
            text.contains("const int32_t by = (int32_t)blockIdx.y;"),
            "{text}"
        );
        assert!(!text.contains("tl_lin"), "{text}");
    }
}

/// The swizzle formula of the design doc, evaluated as the generated code does, is a
/// permutation of the blocks that walks panels of `p` rows.
#[test]
fn block_swizzle_is_a_permutation() {
    for (gx, gy, p) in [(4u32, 8u32, 3u32), (5, 7, 2), (1, 9, 4), (6, 2, 8)] {
        let mut seen = vec![false; (gx * gy) as usize];
        for lin in 0..gx * gy {
            let pw = p * gx;
            let (panel, r) = (lin / pw, lin % pw);
            let rows = (gy - panel * p).min(p);
            let (bx, by) = (r / rows, panel * p + r % rows);
            assert!(
                bx < gx && by < gy,
                "({gx},{gy},{p}) lin {lin} -> ({bx},{by})"
            );
            let i = (by * gx + bx) as usize;
            assert!(!seen[i], "({gx},{gy},{p}) visits ({bx},{by}) twice");
            seen[i] = true;
        }
    }
}

#[test]
fn intrinsics_print_as_the_header_helpers() {
    let f = Fixture::new();
    let sm = buf("sm", &[256], DType::BF16, Scope::Shared);
    let a = buf("a", &[8], DType::BF16, Scope::Local);
    let b = buf("b", &[4], DType::BF16, Scope::Local);
    let c = buf("c", &[4], DType::F32, Scope::Local);
    let v = buf("v", &[1], DType::F32, Scope::Var);
    let z = || Expr::int(0);
    let g = Buffer::new(
        "G",
        vec![f.n.expr()],
        DType::BF16,
        Scope::Global,
        Span::UNKNOWN,
    );
    let mut k = f.kernel(
        vec![
            s(StmtKind::Alloc(sm.clone())),
            s(StmtKind::Alloc(a.clone())),
            s(StmtKind::Alloc(b.clone())),
            s(StmtKind::Alloc(c.clone())),
            s(StmtKind::Alloc(v.clone())),
            call(
                Intrinsic::CpAsync { bytes: 16 },
                vec![
                    addr(&sm, vec![tid() * 8]),
                    addr(&g, vec![tid() * 8]),
                    tid().lt(f.n.expr()),
                ],
            ),
            call(
                Intrinsic::CpAsync { bytes: 4 },
                vec![
                    addr(&sm, vec![tid() * 2]),
                    addr(&g, vec![z()]),
                    Expr::bool(true),
                ],
            ),
            call(Intrinsic::CpAsyncCommit, vec![]),
            call(Intrinsic::CpAsyncWait { n: 2 }, vec![]),
            call(
                Intrinsic::Ldmatrix {
                    num: 4,
                    trans: false,
                },
                vec![addr(&sm, vec![tid() * 8]), addr(&a, vec![z()])],
            ),
            call(
                Intrinsic::Ldmatrix {
                    num: 2,
                    trans: true,
                },
                vec![addr(&sm, vec![tid() * 8]), addr(&b, vec![z()])],
            ),
            call(
                Intrinsic::MmaSync { ab: DType::BF16 },
                vec![
                    addr(&c, vec![z()]),
                    addr(&a, vec![z()]),
                    addr(&b, vec![z()]),
                    addr(&c, vec![z()]),
                ],
            ),
            call(
                Intrinsic::VecCopy { lanes: 8 },
                vec![addr(&a, vec![z()]), addr(&sm, vec![z()])],
            ),
            call(
                Intrinsic::VecCopy { lanes: 2 },
                vec![addr(&a, vec![z()]), addr(&sm, vec![z()])],
            ),
            store(
                &v,
                vec![z()],
                Expr::call(
                    Intrinsic::ShflXor { width: 16 },
                    vec![c.load(vec![z()]), Expr::int(1)],
                    DType::F32,
                ),
            ),
            store(
                &v,
                vec![z()],
                Expr::call(
                    Intrinsic::ShflDown { width: 32 },
                    vec![v.load(vec![z()]), Expr::int(2)],
                    DType::F32,
                ),
            ),
            store(
                &v,
                vec![z()],
                Expr::call(
                    Intrinsic::ShflIdx { width: 8 },
                    vec![Expr::int_of(3, DType::I16), Expr::int(0)],
                    DType::I16,
                )
                .cast(DType::F32),
            ),
            call(Intrinsic::SyncWarp, vec![]),
            call(
                Intrinsic::AtomicAdd,
                vec![addr(&g, vec![z()]), v.load(vec![z()]).cast(DType::BF16)],
            ),
            call(
                Intrinsic::Extern {
                    name: "__nanosleep".into(),
                    pure: false,
                },
                vec![Expr::int_of(8, DType::U32)],
            ),
        ],
        false,
        None,
    );
    k.params.push(Param::Tensor {
        buffer: g,
        role: Role::InOut,
    });
    let text = gen(&k).code;
    for want in [
        "tl_cp_async_16((&sm[(((int32_t)threadIdx.x) * 8)]), (&G[(int64_t)((((int32_t)threadIdx.x) * 8))]), (((int32_t)threadIdx.x) < N));",
        "tl_cp_async_4(",
        "tl_cp_async_commit();",
        "tl_cp_async_wait<2>();",
        "tl_ldmatrix_x4((&sm[(((int32_t)threadIdx.x) * 8)]), (uint16_t*)(&a[0]));",
        "tl_ldmatrix_x2_trans(",
        "tl_mma_m16n8k16_bf16((float*)(&c[0]), (const uint16_t*)(&a[0]), (const uint16_t*)(&b[0]), (const float*)(&c[0]));",
        "tl_vec_copy_16((&a[0]), (&sm[0]));",
        "tl_vec_copy_4((&a[0]), (&sm[0]));",
        "v = __shfl_xor_sync(0xffffffffu, c[0], 1, 16);",
        "v = __shfl_down_sync(0xffffffffu, v, 2, 32);",
        "((int16_t)__shfl_sync(0xffffffffu, (int)(((int16_t)3)), 0, 8))",
        "__syncwarp();",
        "tl_atomic_add_bf16((&G[(int64_t)(0)]), tl_round_bf16((float)(v)));",
        "__nanosleep(8u);",
    ] {
        assert!(text.contains(want), "missing `{want}` in\n{text}");
    }
}

#[test]
fn loops_unroll_and_vectorize() {
    let f = Fixture::new();
    let i = Var::new("i", DType::I32);
    let j = Var::new("j", DType::I32);
    let l = |v: &Var, kind: ForKind| {
        s(StmtKind::For(Box::new(For {
            var: v.clone(),
            min: Expr::int(0),
            extent: Expr::int(4),
            kind,
            body: store(&f.y, vec![v.expr()], 1.0f32),
        })))
    };
    let src = gen(&f.kernel(
        vec![l(&i, ForKind::Unrolled), l(&j, ForKind::Vectorized)],
        false,
        None,
    ));
    let text = kernel_text(&src);
    assert!(
        text.contains("  #pragma unroll\n  for (int32_t i = 0; i < 4; ++i) {"),
        "{text}"
    );
    assert!(
        text.contains("\n  for (int32_t j = 0; j < 4; ++j) {"),
        "{text}"
    );
    assert!(!text.contains("#pragma omp"), "{text}");
    assert!(!text.contains("\n  \n"), "blank pragma line:\n{text}");
}

#[test]
fn user_names_do_not_shadow_builtins() {
    let f = Fixture::new();
    let e = Var::new("expf", DType::F32);
    let k = f.kernel(
        vec![
            s(StmtKind::Let {
                var: e.clone(),
                value: f.alpha.expr().exp(),
            }),
            store(&f.y, vec![Expr::int(0)], e.expr()),
        ],
        false,
        None,
    );
    let text = gen(&k).code;
    assert!(
        text.contains("const float expf_1 = tl_expf(alpha);"),
        "{text}"
    );
}

#[test]
fn what_cuda_cannot_print_is_a_diagnostic() {
    let f = Fixture::new();
    let ok = f.kernel(vec![], false, None);
    // Targets.
    assert!(gen_err(&ok, Target::Cpu).has(DiagKind::Unsupported));
    assert!(gen_err(&ok, Target::Cuda { sm: 75 }).has(DiagKind::Unsupported));
    assert!(gen_err(&ok, Target::Hip { gfx: 942 }).has(DiagKind::Unsupported));

    let z = || Expr::int(0);
    let sm = buf("sm", &[64], DType::BF16, Scope::Shared);
    let l = buf("l", &[8], DType::BF16, Scope::Local);
    let cases: Vec<(Vec<Stmt>, DiagKind)> = vec![
        // A fragment that survived lowering.
        (
            vec![s(StmtKind::Alloc(buf(
                "frag",
                &[16, 16],
                DType::F32,
                Scope::Fragment,
            )))],
            DiagKind::Internal,
        ),
        // More shared memory than sm_80 has.
        (
            vec![s(StmtKind::Alloc(buf(
                "huge",
                &[200 * 1024],
                DType::U8,
                Scope::Shared,
            )))],
            DiagKind::OutOfRange,
        ),
        // Shared buffers need constant sizes.
        (
            vec![s(StmtKind::Alloc(Buffer::new(
                "dyn",
                vec![f.n.expr()],
                DType::F32,
                Scope::Shared,
                Span::UNKNOWN,
            )))],
            DiagKind::Unsupported,
        ),
        (
            vec![s(StmtKind::Alloc(Buffer::new(
                "dynl",
                vec![f.n.expr()],
                DType::F32,
                Scope::Local,
                Span::UNKNOWN,
            )))],
            DiagKind::Unsupported,
        ),
        // ldmatrix from global memory.
        (
            vec![
                s(StmtKind::Alloc(l.clone())),
                call(
                    Intrinsic::Ldmatrix {
                        num: 1,
                        trans: false,
                    },
                    vec![addr(&f.y, vec![z()]), addr(&l, vec![z()])],
                ),
            ],
            DiagKind::ScopeMismatch,
        ),
        // ldmatrix of 3 matrices.
        (
            vec![
                s(StmtKind::Alloc(sm.clone())),
                s(StmtKind::Alloc(l.clone())),
                call(
                    Intrinsic::Ldmatrix {
                        num: 3,
                        trans: false,
                    },
                    vec![addr(&sm, vec![z()]), addr(&l, vec![z()])],
                ),
            ],
            DiagKind::InvalidArgument,
        ),
        // A 12-byte cp.async.
        (
            vec![
                s(StmtKind::Alloc(sm.clone())),
                call(
                    Intrinsic::CpAsync { bytes: 12 },
                    vec![
                        addr(&sm, vec![z()]),
                        addr(&f.y, vec![z()]),
                        Expr::bool(true),
                    ],
                ),
            ],
            DiagKind::InvalidArgument,
        ),
        // cp.async with the wrong number of arguments, or a non-address.
        (
            vec![call(
                Intrinsic::CpAsync { bytes: 16 },
                vec![addr(&f.y, vec![z()])],
            )],
            DiagKind::Internal,
        ),
        (
            vec![
                s(StmtKind::Alloc(sm.clone())),
                call(
                    Intrinsic::CpAsync { bytes: 16 },
                    vec![Expr::int(0), addr(&f.y, vec![z()]), Expr::bool(true)],
                ),
            ],
            DiagKind::Internal,
        ),
        // An atomic add on bytes.
        (
            vec![{
                let b = buf("bytes", &[4], DType::I8, Scope::Shared);
                seq(vec![
                    s(StmtKind::Alloc(b.clone())),
                    call(
                        Intrinsic::AtomicAdd,
                        vec![addr(&b, vec![z()]), Expr::int_of(1, DType::I8)],
                    ),
                ])
            }],
            DiagKind::Unsupported,
        ),
        // An mma on f32 operands, and one with an f16 accumulator.
        (
            vec![
                s(StmtKind::Alloc(l.clone())),
                call(
                    Intrinsic::MmaSync { ab: DType::F32 },
                    vec![addr(&l, vec![z()]); 4],
                ),
            ],
            DiagKind::Unsupported,
        ),
        (
            vec![
                s(StmtKind::Alloc(l.clone())),
                call(
                    Intrinsic::MmaSync { ab: DType::BF16 },
                    vec![addr(&l, vec![z()]); 4],
                ),
            ],
            DiagKind::DTypeMismatch,
        ),
        // A shuffle over 48 lanes.
        (
            vec![store(
                &f.y,
                vec![z()],
                Expr::call(
                    Intrinsic::ShflXor { width: 48 },
                    vec![Expr::float(1.0), Expr::int(1)],
                    DType::F32,
                ),
            )],
            DiagKind::InvalidArgument,
        ),
        // A 3-byte vector copy.
        (
            vec![
                s(StmtKind::Alloc(sm.clone())),
                call(
                    Intrinsic::VecCopy { lanes: 3 },
                    vec![addr(&sm, vec![z()]), addr(&sm, vec![Expr::int(8)])],
                ),
            ],
            DiagKind::InvalidArgument,
        ),
    ];
    for (i, (body, kind)) in cases.into_iter().enumerate() {
        let d = gen_err(&f.kernel(body, false, None), Target::SM80);
        assert!(d.has(kind), "case {i}: expected {kind:?}, got {d}");
    }
    // A bad launch shape.
    let mut k = f.kernel(vec![], false, None);
    k.threads = 2048;
    assert!(gen_err(&k, Target::SM80).has(DiagKind::InvalidArgument));
    k.threads = 128;
    k.block_vars.clear();
    assert!(gen_err(&k, Target::SM80).has(DiagKind::InvalidArgument));
}

#[test]
fn c_output_keeps_its_simd_pragma() {
    // The shared printer's CUDA hooks must leave the C backend's output alone.
    let f = Fixture::new();
    let j = Var::new("j", DType::I32);
    let k = f.kernel(
        vec![s(StmtKind::For(Box::new(For {
            var: j.clone(),
            min: Expr::int(0),
            extent: Expr::int(4),
            kind: ForKind::Vectorized,
            body: store(&f.y, vec![j.expr()], 1.0f32),
        })))],
        false,
        None,
    );
    let c = tl_codegen::c::generate(&k).unwrap_or_else(|d| panic!("{d}"));
    assert!(
        c.code
            .contains("    #pragma omp simd\n    for (int32_t j = 0; j < 4; ++j) {")
            || c.code
                .contains("  #pragma omp simd\n  for (int32_t j = 0; j < 4; ++j) {"),
        "{}",
        c.code
    );
}

#[test]
fn min_blocks_per_sm_becomes_the_second_launch_bound() {
    let f = Fixture::new();
    let body = vec![store(&f.y, vec![Expr::int(0)], 1.0f32)];
    let mut k = f.kernel(body, false, None);
    assert!(gen(&k).code.contains("__launch_bounds__(128) tl_kernel_k("));
    k.attrs.min_blocks_per_sm = Some(3);
    assert!(gen(&k)
        .code
        .contains("__launch_bounds__(128, 3) tl_kernel_k("));
    assert!(k.to_string().contains("min_blocks_per_sm 3"), "{k}");
}
