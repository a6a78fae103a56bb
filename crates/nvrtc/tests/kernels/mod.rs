//! Hand-built thread-level kernels (docs/design/thread-ir.md) for the CUDA compile checks.
//! They are built directly from tl_ir types, not lowered from tile IR, so they pin down what
//! the code generator must accept independently of the passes.

#![allow(dead_code)]

use tl_ir::ops::ceildiv;
use tl_ir::{
    Buffer, DType, Expr, For, ForKind, Intrinsic, Kernel, KernelAttrs, Param, Role, Scope, Span,
    Stmt, StmtKind, Var,
};

pub fn s(kind: StmtKind) -> Stmt {
    Stmt::new(kind, Span::UNKNOWN)
}
pub fn seq(v: Vec<Stmt>) -> Stmt {
    Stmt::seq(v, Span::UNKNOWN)
}
pub fn store(b: &Buffer, idx: Vec<Expr>, v: impl Into<Expr>) -> Stmt {
    s(StmtKind::Store {
        buffer: b.clone(),
        indices: idx,
        value: v.into(),
    })
}
pub fn call(op: Intrinsic, args: Vec<Expr>) -> Stmt {
    s(StmtKind::Eval(Expr::call(op, args, DType::Bool)))
}
pub fn addr(b: &Buffer, idx: Vec<Expr>) -> Expr {
    Expr::call(Intrinsic::AddressOf, vec![b.load(idx)], DType::U64)
}
pub fn tid() -> Expr {
    Expr::call(Intrinsic::ThreadIdx, vec![], DType::I32)
}
pub fn if_(c: Expr, then_: Stmt) -> Stmt {
    s(StmtKind::If {
        cond: c,
        then_: Box::new(then_),
        else_: None,
    })
}
pub fn if_else(c: Expr, then_: Stmt, else_: Stmt) -> Stmt {
    s(StmtKind::If {
        cond: c,
        then_: Box::new(then_),
        else_: Some(Box::new(else_)),
    })
}
pub fn for_(v: &Var, extent: impl Into<Expr>, kind: ForKind, body: Stmt) -> Stmt {
    s(StmtKind::For(Box::new(For {
        var: v.clone(),
        min: Expr::int(0),
        extent: extent.into(),
        kind,
        body,
    })))
}
pub fn let_(v: &Var, e: Expr) -> Stmt {
    s(StmtKind::Let {
        var: v.clone(),
        value: e,
    })
}
pub fn buf(name: &str, shape: Vec<Expr>, dt: DType, scope: Scope) -> Buffer {
    Buffer::new(name, shape, dt, scope, Span::UNKNOWN)
}
pub fn alloc(b: &Buffer) -> Stmt {
    s(StmtKind::Alloc(b.clone()))
}
pub fn shfl(op: Intrinsic, v: Expr, lane: impl Into<Expr>) -> Expr {
    let dt = v.dtype();
    Expr::call(op, vec![v, lane.into()], dt)
}
fn ints(v: &[i64]) -> Vec<Expr> {
    v.iter().map(|&x| Expr::int(x)).collect()
}

/// A kernel using every intrinsic of the thread-level IR, every narrow float type, every
/// math function and both loop forms codegen treats specially, with a swizzled 2-d grid.
/// It computes nothing meaningful; it must compile without spills on sm_80 and sm_90a.
pub fn all_intrinsics() -> Kernel {
    let (m, n, kd) = (
        Var::new("M", DType::I32),
        Var::new("N", DType::I32),
        Var::new("K", DType::I32),
    );
    let a = buf("A", vec![m.expr(), kd.expr()], DType::BF16, Scope::Global);
    let h = buf("H", vec![m.expr(), kd.expr()], DType::F16, Scope::Global);
    let out = buf("Out", vec![m.expr(), n.expr()], DType::F32, Scope::Global);
    let acc64 = buf("Acc64", ints(&[2]), DType::F64, Scope::Global);
    let cnt = buf("Cnt", ints(&[2]), DType::I32, Scope::Global);
    let cnt64 = buf("Cnt64", ints(&[2]), DType::I64, Scope::Global);
    let hb = buf("Hb", vec![n.expr()], DType::BF16, Scope::Global);
    let hh = buf("Hh", vec![n.expr()], DType::F16, Scope::Global);
    let e4 = buf("E4", vec![n.expr()], DType::F8E4M3, Scope::Global);
    let e5 = buf("E5", vec![n.expr()], DType::F8E5M2, Scope::Global);
    let alpha = Var::new("alpha", DType::F32);
    let flag = Var::new("flag", DType::Bool);
    let bx = Var::new("bx", DType::I32);
    let by = Var::new("by", DType::I32);

    // Shared: 1 KiB A tile (1024-aligned), smaller B and H tiles, a reduction scratch.
    let a_s = buf("A_s", ints(&[16, 32]), DType::BF16, Scope::Shared);
    let b_s = buf("B_s", ints(&[8 * 32]), DType::BF16, Scope::Shared);
    let h_s = buf("H_s", ints(&[16 * 16]), DType::F16, Scope::Shared);
    let red = buf("red", ints(&[4]), DType::F32, Scope::Shared);
    // Registers.
    let a_frag = buf("a_frag", ints(&[8]), DType::BF16, Scope::Local);
    let b_frag = buf("b_frag", ints(&[4]), DType::BF16, Scope::Local);
    let h_frag = buf("h_frag", ints(&[8]), DType::F16, Scope::Local);
    let hb_frag = buf("hb_frag", ints(&[4]), DType::F16, Scope::Local);
    let acc = buf("acc", ints(&[4]), DType::F32, Scope::Local);
    let v8 = buf("v8", ints(&[8]), DType::BF16, Scope::Local);
    let tmp = buf("tmp", ints(&[1]), DType::F32, Scope::Var);
    let z = || Expr::int(0);

    let t = Var::new("t", DType::I32);
    let lane = Var::new("lane", DType::I32);
    let warp = Var::new("warp", DType::I32);
    let ko = Var::new("ko", DType::I32);
    let kk = Var::new("kk", DType::I32);
    let i = Var::new("i", DType::I32);
    let row = Var::new("row", DType::I32);
    let col = Var::new("col", DType::I32);

    let mut body = vec![
        alloc(&a_s),
        alloc(&b_s),
        alloc(&h_s),
        alloc(&red),
        alloc(&a_frag),
        alloc(&b_frag),
        alloc(&h_frag),
        alloc(&hb_frag),
        alloc(&acc),
        alloc(&v8),
        alloc(&tmp),
        let_(&t, tid()),
        let_(&lane, t.expr() % 32),
        let_(&warp, t.expr() / 32),
        for_(
            &i,
            4,
            ForKind::Unrolled,
            store(&acc, vec![i.expr()], 0.0f32),
        ),
    ];

    // Main loop: cp.async of all three sizes, commit/wait, ldmatrix of every shape, mma.
    let a_row = by.expr() * 16 + t.expr() / 4;
    let a_col = ko.expr() * 32 + (t.expr() % 4) * 8;
    let b_row = bx.expr() * 8 + t.expr() / 8;
    let b_col = ko.expr() * 32 + (t.expr() % 8) * 4;
    let h_row = by.expr() * 16 + t.expr() / 8;
    let h_col = ko.expr() * 16 + (t.expr() % 8) * 2;
    let loads = seq(vec![
        if_(
            t.expr().lt(64),
            seq(vec![
                call(
                    Intrinsic::CpAsync { bytes: 16 },
                    vec![
                        addr(&a_s, vec![t.expr() / 4, (t.expr() % 4) * 8]),
                        addr(&a, vec![a_row.clone(), a_col.clone()]),
                        a_row.lt(m.expr()).and((a_col + 8).le(kd.expr())),
                    ],
                ),
                call(
                    Intrinsic::CpAsync { bytes: 8 },
                    vec![
                        addr(&b_s, vec![t.expr() * 4]),
                        addr(&a, vec![b_row.clone(), b_col.clone()]),
                        b_row.lt(m.expr()).and((b_col + 4).le(kd.expr())),
                    ],
                ),
            ]),
        ),
        call(
            Intrinsic::CpAsync { bytes: 4 },
            vec![
                addr(&h_s, vec![t.expr() * 2]),
                addr(&h, vec![h_row.clone(), h_col.clone()]),
                h_row.lt(m.expr()).and((h_col + 2).le(kd.expr())),
            ],
        ),
        call(Intrinsic::CpAsyncCommit, vec![]),
        call(Intrinsic::CpAsyncWait { n: 0 }, vec![]),
        call(Intrinsic::SyncThreads, vec![]),
    ]);
    let mma_bf16 = for_(
        &kk,
        2,
        ForKind::Unrolled,
        seq(vec![
            call(
                Intrinsic::Ldmatrix {
                    num: 4,
                    trans: false,
                },
                vec![
                    addr(
                        &a_s,
                        vec![lane.expr() % 16, kk.expr() * 16 + (lane.expr() / 16) * 8],
                    ),
                    addr(&a_frag, vec![z()]),
                ],
            ),
            call(
                Intrinsic::Ldmatrix {
                    num: 2,
                    trans: false,
                },
                vec![
                    addr(
                        &b_s,
                        vec![(lane.expr() % 8) * 32 + kk.expr() * 16 + ((lane.expr() / 8) % 2) * 8],
                    ),
                    addr(&b_frag, vec![z()]),
                ],
            ),
            call(
                Intrinsic::MmaSync { ab: DType::BF16 },
                vec![
                    addr(&acc, vec![z()]),
                    addr(&a_frag, vec![z()]),
                    addr(&b_frag, vec![z()]),
                    addr(&acc, vec![z()]),
                ],
            ),
        ]),
    );
    let mma_f16 = seq(vec![
        call(
            Intrinsic::Ldmatrix {
                num: 4,
                trans: true,
            },
            vec![
                addr(&h_s, vec![(lane.expr() % 16) * 16 + (lane.expr() / 16) * 8]),
                addr(&h_frag, vec![z()]),
            ],
        ),
        call(
            Intrinsic::Ldmatrix {
                num: 1,
                trans: false,
            },
            vec![
                addr(&h_s, vec![(lane.expr() % 8) * 16]),
                addr(&hb_frag, vec![z()]),
            ],
        ),
        call(
            Intrinsic::Ldmatrix {
                num: 1,
                trans: true,
            },
            vec![
                addr(&h_s, vec![(lane.expr() % 8) * 16 + 8]),
                addr(&hb_frag, vec![Expr::int(2)]),
            ],
        ),
        call(
            Intrinsic::MmaSync { ab: DType::F16 },
            vec![
                addr(&acc, vec![z()]),
                addr(&h_frag, vec![z()]),
                addr(&hb_frag, vec![z()]),
                addr(&acc, vec![z()]),
            ],
        ),
        call(
            Intrinsic::Ldmatrix {
                num: 2,
                trans: true,
            },
            vec![
                addr(&h_s, vec![(lane.expr() % 16) * 16]),
                addr(&hb_frag, vec![z()]),
            ],
        ),
        call(
            Intrinsic::MmaSync { ab: DType::F16 },
            vec![
                addr(&acc, vec![z()]),
                addr(&h_frag, vec![z()]),
                addr(&hb_frag, vec![z()]),
                addr(&acc, vec![z()]),
            ],
        ),
        call(Intrinsic::SyncThreads, vec![]),
    ]);
    body.push(for_(
        &ko,
        ceildiv(kd.expr(), 32),
        ForKind::Serial,
        seq(vec![loads, mma_bf16, mma_f16]),
    ));

    // Warp reduction with all three shuffles, then a block reduction through shared memory.
    let tv = || tmp.load(vec![z()]);
    body.extend([
        store(
            &tmp,
            vec![z()],
            acc.load(vec![z()])
                + acc.load(vec![Expr::int(1)])
                + acc.load(vec![Expr::int(2)])
                + acc.load(vec![Expr::int(3)]),
        ),
        store(
            &tmp,
            vec![z()],
            tv() + shfl(Intrinsic::ShflXor { width: 32 }, tv(), 16),
        ),
        store(
            &tmp,
            vec![z()],
            tv() + shfl(Intrinsic::ShflDown { width: 16 }, tv(), 8),
        ),
        store(
            &tmp,
            vec![z()],
            shfl(Intrinsic::ShflIdx { width: 32 }, tv(), 0),
        ),
        store(
            &tmp,
            vec![z()],
            tv() + shfl(Intrinsic::ShflXor { width: 8 }, lane.expr(), 1).cast(DType::F32)
                + shfl(
                    Intrinsic::ShflDown { width: 32 },
                    lane.expr().cast(DType::I64),
                    1,
                )
                .cast(DType::F32)
                + shfl(
                    Intrinsic::ShflIdx { width: 4 },
                    lane.expr().cast(DType::I8),
                    1,
                )
                .cast(DType::F32)
                + shfl(
                    Intrinsic::ShflXor { width: 2 },
                    acc.load(vec![z()]).cast(DType::F64),
                    1,
                )
                .cast(DType::F32),
        ),
        call(Intrinsic::SyncWarp, vec![]),
        if_(lane.expr().eq_(0), store(&red, vec![warp.expr()], tv())),
        call(Intrinsic::SyncThreads, vec![]),
        call(
            Intrinsic::AtomicAdd,
            vec![addr(&red, vec![z()]), Expr::float(1.0)],
        ),
        call(Intrinsic::SyncThreads, vec![]),
    ]);

    // Accumulator out with bounds checks (the mma C fragment layout).
    let g = lane.expr() / 4;
    let tq = lane.expr() % 4;
    body.push(for_(
        &i,
        4,
        ForKind::Unrolled,
        seq(vec![
            let_(&row, by.expr() * 16 + g + (i.expr() / 2) * 8),
            let_(&col, bx.expr() * 8 + tq * 2 + i.expr() % 2),
            if_(
                row.expr().lt(m.expr()).and(col.expr().lt(n.expr())),
                store(
                    &out,
                    vec![row.expr(), col.expr()],
                    acc.load(vec![i.expr()]) * alpha.expr() + red.load(vec![z()]),
                ),
            ),
        ]),
    ));

    // Atomics of every supported type, global and shared.
    let nb = bx.expr() * 8 + lane.expr() % 8;
    let in_n = nb.lt(n.expr());
    body.push(if_(
        in_n.clone(),
        seq(vec![
            call(Intrinsic::AtomicAdd, vec![addr(&out, vec![z(), z()]), tv()]),
            call(
                Intrinsic::AtomicAdd,
                vec![addr(&acc64, vec![z()]), tv().cast(DType::F64)],
            ),
            call(
                Intrinsic::AtomicAdd,
                vec![addr(&cnt, vec![z()]), Expr::int(1)],
            ),
            call(
                Intrinsic::AtomicAdd,
                vec![
                    addr(&cnt64, vec![Expr::int(1)]),
                    lane.expr().cast(DType::I64),
                ],
            ),
            call(
                Intrinsic::AtomicAdd,
                vec![addr(&hb, vec![nb.clone()]), tv().cast(DType::BF16)],
            ),
            call(
                Intrinsic::AtomicAdd,
                vec![addr(&hh, vec![nb.clone()]), tv().cast(DType::F16)],
            ),
        ]),
    ));

    // Vector copies of every size: shared -> local, local -> global, global -> global.
    let vi = Var::new("vi", DType::I32);
    body.extend([
        call(
            Intrinsic::VecCopy { lanes: 8 },
            vec![
                addr(&v8, vec![z()]),
                addr(&a_s, vec![lane.expr() % 16, (lane.expr() / 16) * 8]),
            ],
        ),
        call(
            Intrinsic::VecCopy { lanes: 4 },
            vec![
                addr(&v8, vec![Expr::int(4)]),
                addr(&b_s, vec![lane.expr() * 4]),
            ],
        ),
        call(
            Intrinsic::VecCopy { lanes: 2 },
            vec![
                addr(&v8, vec![Expr::int(2)]),
                addr(&b_s, vec![lane.expr() * 2]),
            ],
        ),
        call(
            Intrinsic::VecCopy { lanes: 1 },
            vec![addr(&v8, vec![Expr::int(1)]), addr(&b_s, vec![lane.expr()])],
        ),
        for_(
            &vi,
            8,
            ForKind::Vectorized,
            store(
                &v8,
                vec![vi.expr()],
                v8.load(vec![vi.expr()]) * alpha.expr(),
            ),
        ),
        if_(
            (nb.clone() + 8).le(n.expr()).and(t.expr().lt(32)),
            seq(vec![
                call(
                    Intrinsic::VecCopy { lanes: 8 },
                    vec![addr(&hb, vec![bx.expr() * 8]), addr(&v8, vec![z()])],
                ),
                call(
                    Intrinsic::VecCopy { lanes: 4 },
                    vec![
                        addr(&out, vec![z(), Expr::int(4)]),
                        addr(&out, vec![z(), Expr::int(8)]),
                    ],
                ),
            ]),
        ),
    ]);

    // Narrow floats, math on f32 and f64, integer and float floor division, Extern.
    let x = out.load(vec![z(), z()]);
    let d = acc64.load(vec![z()]);
    let f32_math = x.exp()
        + x.exp2()
        + x.abs().log()
        + x.abs().log2()
        + x.abs().sqrt()
        + x.abs().rsqrt()
        + x.tanh()
        + x.sigmoid()
        + x.floor()
        + x.ceil()
        + x.erf()
        + x.sin()
        + x.cos()
        + x.pow(2.0f32)
        + x.min(alpha.expr())
        + x.max(1.0f32)
        + x.floordiv(3.0f32)
        + x.floormod(3.0f32)
        + (x.clone() % 2.0f32)
        - x.clone() / alpha.expr();
    let f64_math = d.exp()
        + d.exp2()
        + d.abs().log()
        + d.abs().log2()
        + d.abs().sqrt()
        + d.abs().rsqrt()
        + d.tanh()
        + d.sigmoid()
        + d.floor()
        + d.ceil()
        + d.erf()
        + d.sin()
        + d.cos()
        + d.abs()
        + d.min(2.0)
        + d.max(1.0)
        + d.floormod(3.0);
    let ti = t.expr();
    let int_math = (ti.floordiv(3) + ti.floormod(5) + (ti.clone() % 7) + (ti.clone() & 3))
        | (((ti.clone() ^ 1) << 2) >> 1);
    let wide = cnt64.load(vec![z()]).floordiv(Expr::int_of(3, DType::I64))
        + cnt64.load(vec![z()]).floormod(Expr::int_of(5, DType::I64));
    let fma = Expr::call(
        Intrinsic::Extern {
            name: "__fmaf_rn".into(),
            pure: true,
        },
        vec![x.clone(), alpha.expr(), Expr::float(1.0)],
        DType::F32,
    );
    body.push(if_else(
        flag.expr().and(in_n.clone()),
        seq(vec![
            store(
                &e4,
                vec![nb.clone()],
                e4.load(vec![nb.clone()]) * alpha.expr() + e5.load(vec![nb.clone()]),
            ),
            store(
                &e5,
                vec![nb.clone()],
                e5.load(vec![nb.clone()]).cast(DType::F32) - tv(),
            ),
            store(
                &hh,
                vec![nb.clone()],
                (hh.load(vec![nb.clone()]) + hb.load(vec![nb.clone()]).cast(DType::F32))
                    .cast(DType::F16),
            ),
            store(
                &out,
                vec![z(), Expr::int(1)],
                f32_math
                    + f64_math.cast(DType::F32)
                    + int_math.cast(DType::F32)
                    + wide.cast(DType::F32)
                    + fma
                    + Expr::select(x.gt(0.0f32), x.clone(), -x.clone())
                    + Expr::if_then_else(in_n, x.clone(), Expr::float(f64::INFINITY))
                    + x.cast(DType::F8E4M3).cast(DType::F32),
            ),
            call(
                Intrinsic::Extern {
                    name: "__nanosleep".into(),
                    pure: false,
                },
                vec![Expr::int_of(32, DType::U32)],
            ),
        ]),
        store(&e4, vec![z()], Expr::float(f64::NAN)),
    ));

    Kernel {
        name: "all_intrinsics".into(),
        dims: vec![m.clone(), n.clone(), kd.clone()],
        params: vec![
            Param::Tensor {
                buffer: a,
                role: Role::Input,
            },
            Param::Tensor {
                buffer: h,
                role: Role::Input,
            },
            Param::Tensor {
                buffer: out,
                role: Role::Output,
            },
            Param::Tensor {
                buffer: acc64,
                role: Role::InOut,
            },
            Param::Tensor {
                buffer: cnt,
                role: Role::InOut,
            },
            Param::Tensor {
                buffer: cnt64,
                role: Role::InOut,
            },
            Param::Tensor {
                buffer: hb,
                role: Role::InOut,
            },
            Param::Tensor {
                buffer: hh,
                role: Role::InOut,
            },
            Param::Tensor {
                buffer: e4,
                role: Role::InOut,
            },
            Param::Tensor {
                buffer: e5,
                role: Role::InOut,
            },
            Param::Scalar(alpha),
            Param::Scalar(flag),
        ],
        grid: vec![ceildiv(n.expr(), 8), ceildiv(m.expr(), 16)],
        block_vars: vec![bx, by],
        threads: 128,
        body: seq(body),
        attrs: KernelAttrs {
            swizzle_panel: Some(4),
            ..Default::default()
        },
    }
}

/// `C[i] = A[i] + B[i] * alpha` over bf16 vectors, 256 threads, bounds-checked.
pub fn elementwise_bf16() -> Kernel {
    let n = Var::new("N", DType::I32);
    let a = buf("A", vec![n.expr()], DType::BF16, Scope::Global);
    let b = buf("B", vec![n.expr()], DType::BF16, Scope::Global);
    let c = buf("C", vec![n.expr()], DType::BF16, Scope::Global);
    let alpha = Var::new("alpha", DType::F32);
    let bx = Var::new("bx", DType::I32);
    let i = Var::new("i", DType::I32);
    let body = seq(vec![
        let_(&i, bx.expr() * 256 + tid()),
        if_(
            i.expr().lt(n.expr()),
            store(
                &c,
                vec![i.expr()],
                a.load(vec![i.expr()]) + b.load(vec![i.expr()]) * alpha.expr(),
            ),
        ),
    ]);
    Kernel {
        name: "elementwise_bf16".into(),
        dims: vec![n.clone()],
        params: vec![
            Param::Tensor {
                buffer: a,
                role: Role::Input,
            },
            Param::Tensor {
                buffer: b,
                role: Role::Input,
            },
            Param::Tensor {
                buffer: c,
                role: Role::Output,
            },
            Param::Scalar(alpha),
        ],
        grid: vec![ceildiv(n.expr(), 256)],
        block_vars: vec![bx],
        threads: 256,
        body,
        attrs: KernelAttrs::default(),
    }
}

/// Row softmax, one warp per row (rows up to 32·8 = 256 wide), f16 in, f32 out: a local
/// array of 8 values per lane, max and sum by butterfly shuffles.
pub fn warp_softmax() -> Kernel {
    let (rows, cols) = (Var::new("R", DType::I32), Var::new("C", DType::I32));
    let x = buf(
        "X",
        vec![rows.expr(), cols.expr()],
        DType::F16,
        Scope::Global,
    );
    let y = buf(
        "Y",
        vec![rows.expr(), cols.expr()],
        DType::F32,
        Scope::Global,
    );
    let bx = Var::new("bx", DType::I32);
    let (row, lane, j, k) = (
        Var::new("row", DType::I32),
        Var::new("lane", DType::I32),
        Var::new("j", DType::I32),
        Var::new("k", DType::I32),
    );
    let v = buf("v", ints(&[8]), DType::F32, Scope::Local);
    let mx = buf("mx", ints(&[1]), DType::F32, Scope::Var);
    let sum = buf("sum", ints(&[1]), DType::F32, Scope::Var);
    let z = || Expr::int(0);
    let colj = || lane.expr() + j.expr() * 32;
    let body = seq(vec![
        let_(&row, bx.expr() * 4 + tid() / 32),
        let_(&lane, tid() % 32),
        alloc(&v),
        alloc(&mx),
        alloc(&sum),
        store(&mx, vec![z()], Expr::float(f64::NEG_INFINITY)),
        store(&sum, vec![z()], 0.0f32),
        for_(
            &j,
            8,
            ForKind::Unrolled,
            seq(vec![
                store(
                    &v,
                    vec![j.expr()],
                    Expr::if_then_else(
                        row.expr().lt(rows.expr()).and(colj().lt(cols.expr())),
                        x.load(vec![row.expr(), colj()]).cast(DType::F32),
                        Expr::float(f64::NEG_INFINITY),
                    ),
                ),
                store(
                    &mx,
                    vec![z()],
                    mx.load(vec![z()]).max(v.load(vec![j.expr()])),
                ),
            ]),
        ),
        for_(
            &k,
            5,
            ForKind::Unrolled,
            store(
                &mx,
                vec![z()],
                mx.load(vec![z()]).max(shfl(
                    Intrinsic::ShflXor { width: 32 },
                    mx.load(vec![z()]),
                    Expr::int(16) >> k.expr(),
                )),
            ),
        ),
        for_(
            &j,
            8,
            ForKind::Unrolled,
            seq(vec![
                store(
                    &v,
                    vec![j.expr()],
                    (v.load(vec![j.expr()]) - mx.load(vec![z()])).exp2(),
                ),
                store(
                    &sum,
                    vec![z()],
                    sum.load(vec![z()]) + v.load(vec![j.expr()]),
                ),
            ]),
        ),
        for_(
            &k,
            5,
            ForKind::Unrolled,
            store(
                &sum,
                vec![z()],
                sum.load(vec![z()])
                    + shfl(
                        Intrinsic::ShflXor { width: 32 },
                        sum.load(vec![z()]),
                        Expr::int(16) >> k.expr(),
                    ),
            ),
        ),
        for_(
            &j,
            8,
            ForKind::Unrolled,
            if_(
                row.expr().lt(rows.expr()).and(colj().lt(cols.expr())),
                store(
                    &y,
                    vec![row.expr(), colj()],
                    v.load(vec![j.expr()]) / sum.load(vec![z()]),
                ),
            ),
        ),
    ]);
    Kernel {
        name: "warp_softmax".into(),
        dims: vec![rows.clone(), cols],
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
        grid: vec![ceildiv(rows.expr(), 4)],
        block_vars: vec![bx],
        threads: 128,
        body,
        attrs: KernelAttrs::default(),
    }
}

/// A real tensor-core tile: each of 4 warps computes a 16x8 block of `C = A·Bᵀ` (A [M,K],
/// B [N,K] bf16, C f32) over K in steps of 16, staging through shared memory with 16-byte
/// cp.async (zero-filled past the edges), double-buffered, ldmatrix x4/x2 and mma.sync.
/// The block tile is 64x8; K must be a multiple of 8 for the 16-byte copies to be aligned.
pub fn mma_gemm_bf16() -> Kernel {
    let (m, n, kd) = (
        Var::new("M", DType::I32),
        Var::new("N", DType::I32),
        Var::new("K", DType::I32),
    );
    let a = buf("A", vec![m.expr(), kd.expr()], DType::BF16, Scope::Global);
    let b = buf("B", vec![n.expr(), kd.expr()], DType::BF16, Scope::Global);
    let c = buf("C", vec![m.expr(), n.expr()], DType::F32, Scope::Global);
    let (bx, by) = (Var::new("bx", DType::I32), Var::new("by", DType::I32));
    // Two stages of A (64x16) and B (8x16) tiles.
    let a_s = buf("A_s", ints(&[2, 64, 16]), DType::BF16, Scope::Shared);
    let b_s = buf("B_s", ints(&[2, 8, 16]), DType::BF16, Scope::Shared);
    let af = buf("af", ints(&[8]), DType::BF16, Scope::Local);
    let bf = buf("bf", ints(&[4]), DType::BF16, Scope::Local);
    let acc = buf("acc", ints(&[4]), DType::F32, Scope::Local);
    let (t, lane, warp, ko, i, r, cc) = (
        Var::new("t", DType::I32),
        Var::new("lane", DType::I32),
        Var::new("warp", DType::I32),
        Var::new("ko", DType::I32),
        Var::new("i", DType::I32),
        Var::new("r", DType::I32),
        Var::new("cc", DType::I32),
    );
    let z = || Expr::int(0);
    // Stage `st` of tile `kt`: thread t copies A row t/2, 8 columns at (t%2)*8; threads < 16
    // copy B row t/2 likewise.
    let issue = |st: Expr, kt: Expr| {
        let ar = by.expr() * 64 + t.expr() / 2;
        let ac = kt.clone() * 16 + (t.expr() % 2) * 8;
        let br = bx.expr() * 8 + t.expr() / 2;
        seq(vec![
            call(
                Intrinsic::CpAsync { bytes: 16 },
                vec![
                    addr(&a_s, vec![st.clone(), t.expr() / 2, (t.expr() % 2) * 8]),
                    addr(&a, vec![ar.clone(), ac.clone()]),
                    ar.lt(m.expr()).and(ac.clone().lt(kd.expr())),
                ],
            ),
            if_(
                t.expr().lt(16),
                call(
                    Intrinsic::CpAsync { bytes: 16 },
                    vec![
                        addr(&b_s, vec![st, t.expr() / 2, (t.expr() % 2) * 8]),
                        addr(&b, vec![br.clone(), ac.clone()]),
                        br.lt(n.expr()).and(ac.lt(kd.expr())),
                    ],
                ),
            ),
            call(Intrinsic::CpAsyncCommit, vec![]),
        ])
    };
    let nk = ceildiv(kd.expr(), 16);
    let body = seq(vec![
        alloc(&a_s),
        alloc(&b_s),
        alloc(&af),
        alloc(&bf),
        alloc(&acc),
        let_(&t, tid()),
        let_(&lane, t.expr() % 32),
        let_(&warp, t.expr() / 32),
        for_(
            &i,
            4,
            ForKind::Unrolled,
            store(&acc, vec![i.expr()], 0.0f32),
        ),
        issue(z(), z()),
        for_(
            &ko,
            nk.clone(),
            ForKind::Serial,
            seq(vec![
                if_else(
                    (ko.expr() + 1).lt(nk.clone()),
                    issue((ko.expr() + 1) % 2, ko.expr() + 1),
                    call(Intrinsic::CpAsyncCommit, vec![]),
                ),
                call(Intrinsic::CpAsyncWait { n: 1 }, vec![]),
                call(Intrinsic::SyncThreads, vec![]),
                call(
                    Intrinsic::Ldmatrix {
                        num: 4,
                        trans: false,
                    },
                    vec![
                        addr(
                            &a_s,
                            vec![
                                ko.expr() % 2,
                                warp.expr() * 16 + lane.expr() % 16,
                                (lane.expr() / 16) * 8,
                            ],
                        ),
                        addr(&af, vec![z()]),
                    ],
                ),
                call(
                    Intrinsic::Ldmatrix {
                        num: 2,
                        trans: false,
                    },
                    vec![
                        addr(
                            &b_s,
                            vec![ko.expr() % 2, lane.expr() % 8, ((lane.expr() / 8) % 2) * 8],
                        ),
                        addr(&bf, vec![z()]),
                    ],
                ),
                call(
                    Intrinsic::MmaSync { ab: DType::BF16 },
                    vec![
                        addr(&acc, vec![z()]),
                        addr(&af, vec![z()]),
                        addr(&bf, vec![z()]),
                        addr(&acc, vec![z()]),
                    ],
                ),
                call(Intrinsic::SyncThreads, vec![]),
            ]),
        ),
        for_(
            &i,
            4,
            ForKind::Unrolled,
            seq(vec![
                let_(
                    &r,
                    by.expr() * 64 + warp.expr() * 16 + lane.expr() / 4 + (i.expr() / 2) * 8,
                ),
                let_(&cc, bx.expr() * 8 + (lane.expr() % 4) * 2 + i.expr() % 2),
                if_(
                    r.expr().lt(m.expr()).and(cc.expr().lt(n.expr())),
                    store(&c, vec![r.expr(), cc.expr()], acc.load(vec![i.expr()])),
                ),
            ]),
        ),
    ]);
    Kernel {
        name: "mma_gemm_bf16".into(),
        dims: vec![m.clone(), n.clone(), kd],
        params: vec![
            Param::Tensor {
                buffer: a,
                role: Role::Input,
            },
            Param::Tensor {
                buffer: b,
                role: Role::Input,
            },
            Param::Tensor {
                buffer: c,
                role: Role::Output,
            },
        ],
        grid: vec![ceildiv(n.expr(), 8), ceildiv(m.expr(), 64)],
        block_vars: vec![bx, by],
        threads: 128,
        body,
        attrs: KernelAttrs::default(),
    }
}

/// fp8 round trips: `Y8[i] = e4m3(X[i])`, `Z8[i] = e5m2(X[i])`, `W[i] = e4m3→f32 + e5m2→f32`.
pub fn fp8_convert() -> Kernel {
    let n = Var::new("N", DType::I32);
    let x = buf("X", vec![n.expr()], DType::F32, Scope::Global);
    let y8 = buf("Y8", vec![n.expr()], DType::F8E4M3, Scope::Global);
    let z8 = buf("Z8", vec![n.expr()], DType::F8E5M2, Scope::Global);
    let w = buf("W", vec![n.expr()], DType::F32, Scope::Global);
    let bx = Var::new("bx", DType::I32);
    let i = Var::new("i", DType::I32);
    let body = seq(vec![
        let_(&i, bx.expr() * 128 + tid()),
        if_(
            i.expr().lt(n.expr()),
            seq(vec![
                store(&y8, vec![i.expr()], x.load(vec![i.expr()])),
                store(&z8, vec![i.expr()], x.load(vec![i.expr()])),
                store(
                    &w,
                    vec![i.expr()],
                    y8.load(vec![i.expr()]) + z8.load(vec![i.expr()]),
                ),
            ]),
        ),
    ]);
    Kernel {
        name: "fp8_convert".into(),
        dims: vec![n.clone()],
        params: vec![
            Param::Tensor {
                buffer: x,
                role: Role::Input,
            },
            Param::Tensor {
                buffer: y8,
                role: Role::Output,
            },
            Param::Tensor {
                buffer: z8,
                role: Role::Output,
            },
            Param::Tensor {
                buffer: w,
                role: Role::Output,
            },
        ],
        grid: vec![ceildiv(n.expr(), 128)],
        block_vars: vec![bx],
        threads: 128,
        body,
        attrs: KernelAttrs::default(),
    }
}
