//! No input a user can write makes the library panic: random small kernels (well-formed or
//! not) go through verification, lowering and code generation; random bad launch arguments go
//! to a real executable. Every outcome must be `Ok` or an error value.

use proptest::prelude::*;
use tilelang::kernels::gemm::{gemm, GemmConfig, Layout};
use tilelang::prelude::*;
use tilelang::Target;

#[derive(Clone, Debug)]
enum Op {
    Copy {
        src: usize,
        dst: usize,
        off: (i64, i64),
        ext: Option<(i64, i64)>,
    },
    CopyGlobal {
        dst: usize,
        row: i64,
    },
    Gemm {
        a: usize,
        b: usize,
        c: usize,
        ta: bool,
        tb: bool,
    },
    Reduce {
        src: usize,
        dst: usize,
        dim: usize,
        kind: u8,
        acc: bool,
    },
    Fill {
        dst: usize,
        v: f64,
    },
    Parallel {
        dst: usize,
        src: usize,
        scale: f64,
    },
    Cumsum {
        src: usize,
        dst: usize,
        dim: usize,
    },
    Atomic {
        src: usize,
    },
}

#[derive(Clone, Debug)]
struct Plan {
    bufs: Vec<(u8, i64, i64, u8)>, // scope, rows, cols, dtype
    ops: Vec<Op>,
    threads: u32,
    grid: i64,
}

const DTYPES: [DType; 4] = [DType::F32, DType::BF16, DType::F16, DType::I32];

fn op() -> impl Strategy<Value = Op> {
    let b = 0usize..5;
    prop_oneof![
        (
            b.clone(),
            b.clone(),
            (-2i64..20, -2i64..20),
            proptest::option::of((0i64..40, 0i64..40))
        )
            .prop_map(|(src, dst, off, ext)| Op::Copy { src, dst, off, ext }),
        (b.clone(), -3i64..70).prop_map(|(dst, row)| Op::CopyGlobal { dst, row }),
        (
            b.clone(),
            b.clone(),
            b.clone(),
            any::<bool>(),
            any::<bool>()
        )
            .prop_map(|(a, b, c, ta, tb)| Op::Gemm { a, b, c, ta, tb }),
        (b.clone(), b.clone(), 0usize..3, 0u8..5, any::<bool>()).prop_map(
            |(src, dst, dim, kind, acc)| Op::Reduce {
                src,
                dst,
                dim,
                kind,
                acc
            }
        ),
        (b.clone(), -4.0f64..4.0).prop_map(|(dst, v)| Op::Fill { dst, v }),
        (b.clone(), b.clone(), -2.0f64..2.0).prop_map(|(dst, src, scale)| Op::Parallel {
            dst,
            src,
            scale
        }),
        (b.clone(), b.clone(), 0usize..3).prop_map(|(src, dst, dim)| Op::Cumsum { src, dst, dim }),
        b.prop_map(|src| Op::Atomic { src }),
    ]
}

fn plan() -> impl Strategy<Value = Plan> {
    (
        proptest::collection::vec(
            (
                0u8..4,
                prop_oneof![Just(1i64), Just(8), Just(16), Just(32), 0i64..40],
                prop_oneof![Just(8i64), Just(16), Just(32), 0i64..40],
                0u8..4,
            ),
            5,
        ),
        proptest::collection::vec(op(), 1..6),
        prop_oneof![Just(128u32), Just(0), Just(2000), 1u32..300],
        -1i64..4,
    )
        .prop_map(|(bufs, ops, threads, grid)| Plan {
            bufs,
            ops,
            threads,
            grid,
        })
}

fn build(p: &Plan) -> Kernel {
    Kernel::build("random", |k| {
        let m = k.dim("M");
        let g = k.input("G", [&m, &Expr::from(32)], F32);
        let out = k.output("O", [&m, &Expr::from(32)], F32);
        k.launch([Expr::from(p.grid)], p.threads, |t, [bx]| {
            let bufs: Vec<Buffer> = p
                .bufs
                .iter()
                .map(|&(scope, r, c, dt)| {
                    let dt = DTYPES[dt as usize % 4];
                    match scope {
                        0 => t.alloc_shared([r, c], dt),
                        1 => t.alloc_fragment([r, c], dt),
                        2 => t.alloc_local([r, c], dt),
                        _ => t.alloc_fragment([r], dt),
                    }
                })
                .collect();
            for o in &p.ops {
                match o {
                    Op::Copy { src, dst, off, ext } => match ext {
                        Some(e) => {
                            t.copy(bufs[*src].region([off.0, off.1], [e.0, e.1]), &bufs[*dst])
                        }
                        None => t.copy(bufs[*src].tile([off.0, off.1]), &bufs[*dst]),
                    },
                    Op::CopyGlobal { dst, row } => {
                        t.copy(g.tile([&bx * 16 + *row, Expr::from(0)]), &bufs[*dst])
                    }
                    Op::Gemm { a, b, c, ta, tb } => {
                        let mut h = t.gemm(&bufs[*a], &bufs[*b], &bufs[*c]);
                        if *ta {
                            h = h.transpose_a();
                        }
                        if *tb {
                            h.transpose_b();
                        }
                    }
                    Op::Reduce {
                        src,
                        dst,
                        dim,
                        kind,
                        acc,
                    } => {
                        let h = match kind {
                            0 => t.reduce_sum(&bufs[*src], &bufs[*dst], *dim),
                            1 => t.reduce_max(&bufs[*src], &bufs[*dst], *dim),
                            2 => t.reduce_min(&bufs[*src], &bufs[*dst], *dim),
                            3 => t.reduce_abssum(&bufs[*src], &bufs[*dst], *dim),
                            _ => t.reduce_absmax(&bufs[*src], &bufs[*dst], *dim),
                        };
                        if *acc {
                            h.accumulate();
                        }
                    }
                    Op::Fill { dst, v } => t.fill(&bufs[*dst], *v),
                    Op::Parallel { dst, src, scale } => {
                        let (d, s) = (&bufs[*dst], &bufs[*src]);
                        if d.rank() == 2 && s.rank() == 2 {
                            let (r, c) = (d.shape()[0].clone(), d.shape()[1].clone());
                            t.parallel([r, c], |t, [i, j]| {
                                t.store(d, [&i, &j], s.at([&i, &j]) * *scale + 1);
                            });
                        }
                    }
                    Op::Cumsum { src, dst, dim } => {
                        t.cumsum(&bufs[*src], &bufs[*dst], *dim);
                    }
                    Op::Atomic { src } => {
                        t.atomic_add(out.tile([&bx * 16, Expr::from(0)]), &bufs[*src])
                    }
                }
            }
        });
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

    /// Verification, lowering and code generation return values, never panic.
    #[test]
    fn random_kernels_never_panic(p in plan()) {
        let k = build(&p);
        let _ = k.to_string();
        if k.verify().is_ok() {
            let _ = k.lower(Target::Cpu);
            let _ = k.emit(Target::Cpu);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, failure_persistence: None, ..ProptestConfig::default() })]

    /// Kernels that verify also lower and compile: the C compiler accepts what codegen writes.
    #[test]
    fn verified_kernels_compile(p in plan().prop_filter("kernel verifies", |p| build(p).verify().is_ok())) {
        let k = build(&p);
        {
            match k.compile(&Device::Cpu) {
                Ok(_) => {}
                Err(tilelang::Error::Compile(d)) => {
                    // A clear refusal is fine; an internal error is a compiler bug.
                    prop_assert!(!d.has(tilelang::ir::DiagKind::Internal), "internal error for a verified kernel:\n{d}\n{k}");
                }
                Err(e) => prop_assert!(false, "compile failed:\n{e}\n{k}"),
            }
        }
    }
}

#[derive(Clone, Debug)]
enum BadArg {
    Tensor(Vec<usize>, u8),
    Int(i64),
    Float(f64),
}

fn bad_arg() -> impl Strategy<Value = BadArg> {
    prop_oneof![
        (proptest::collection::vec(0usize..40, 0..4), 0u8..4)
            .prop_map(|(s, d)| BadArg::Tensor(s, d)),
        any::<i64>().prop_map(BadArg::Int),
        any::<f64>().prop_map(BadArg::Float),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]

    /// Random (mostly wrong) arguments to a real executable: errors, never a panic or a crash.
    #[test]
    fn random_launch_arguments_never_panic(args in proptest::collection::vec(bad_arg(), 0..5)) {
        use std::sync::OnceLock;
        static EXE: OnceLock<Executable> = OnceLock::new();
        let exe = EXE.get_or_init(|| {
            let mut cfg = GemmConfig::cpu();
            cfg.bm = 32;
            cfg.bn = 32;
            cfg.bk = 16;
            gemm(Layout::NT, F32, F32, cfg).compile(&Device::Cpu).expect("gemm compiles")
        });
        let tensors: Vec<Option<Tensor>> = args
            .iter()
            .map(|a| match a {
                BadArg::Tensor(s, d) => Tensor::zeros(s, DTYPES[*d as usize % 4], &Device::Cpu).ok(),
                _ => None,
            })
            .collect();
        let launch: Vec<Arg> = args
            .iter()
            .zip(&tensors)
            .filter_map(|(a, t)| match (a, t) {
                (BadArg::Tensor(..), Some(t)) => Some(Arg::Tensor(t)),
                (BadArg::Int(i), _) => Some(Arg::Int(*i)),
                (BadArg::Float(f), _) => Some(Arg::Float(*f)),
                _ => None,
            })
            .collect();
        let _ = exe.run_args(&launch);
    }
}

#[test]
fn valid_launch_with_empty_tensors_is_a_no_op() {
    let mut cfg = GemmConfig::cpu();
    cfg.bm = 32;
    cfg.bn = 32;
    cfg.bk = 16;
    let exe = gemm(Layout::NN, F32, F32, cfg)
        .compile(&Device::Cpu)
        .expect("compiles");
    let a = Tensor::zeros(&[0, 5], F32, &Device::Cpu).expect("alloc");
    let b = Tensor::zeros(&[5, 3], F32, &Device::Cpu).expect("alloc");
    let c = Tensor::zeros(&[0, 3], F32, &Device::Cpu).expect("alloc");
    exe.run(&[&a, &b, &c]).expect("zero-size launch");
    let wrong = Tensor::zeros(&[4, 3], F32, &Device::Cpu).expect("alloc");
    let e = exe.run(&[&a, &b, &wrong]).expect_err("M mismatch");
    assert!(e.to_string().contains("`M` is 0"), "{e}");
}

/// The generator must produce enough well-formed kernels for the tests above to mean something.
#[test]
fn generator_makes_some_valid_kernels() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strat = plan();
    let mut valid = 0;
    for _ in 0..400 {
        let p = strat.new_tree(&mut runner).expect("value").current();
        if build(&p).verify().is_ok() {
            valid += 1;
        }
    }
    assert!(valid >= 20, "only {valid} of 400 random kernels verify");
}
