//! Global memory, arguments, arithmetic, control flow, and the errors that are not about
//! synchronization.

mod common;
use common::*;

use tl_ir::{DType, Expr, Intrinsic, Var};

/// `out[i] = a[i] * 2 + 1` over a grid of 64-thread blocks, with a bounds guard.
fn axpb(n_var: &Var) -> tl_ir::Kernel {
    let n = n_var.expr();
    let a = global("a", vec![n.clone()], DType::F32);
    let out = global("out", vec![n.clone()], DType::F32);
    kernel(
        "axpb",
        vec![n_var.clone()],
        vec![input(&a), output(&out)],
        vec![tl_ir::ops::ceildiv(n.clone(), 64)],
        64,
        |b, bx| {
            let i = b.let_("i", bx[0].clone() * 64 + tid());
            b.if_(i.lt(n.clone()), |b| {
                b.store(&out, i.clone(), a.at([i.clone()]) * 2.0f32 + 1.0f32);
            });
        },
    )
}

#[test]
fn elementwise_over_a_grid_binds_dims_and_writes_in_place() {
    let n = Var::new("n", DType::I32);
    let k = axpb(&n);
    let xs: Vec<f64> = (0..150).map(|i| i as f64 * 0.25).collect();
    let mut args = vec![
        SimArg::tensor(DType::F32, &[150], &xs),
        SimArg::zeros(DType::F32, &[150]),
    ];
    let r = run(&k, &mut args, &opts()).expect("runs");
    assert_eq!(r.blocks, 3);
    assert_eq!(r.threads_per_block, 64);
    let out = args[1].to_f64(DType::F32);
    for (i, (&x, &y)) in xs.iter().zip(&out).enumerate() {
        assert_eq!(y, x * 2.0 + 1.0, "element {i}");
    }
    // Only some blocks.
    let mut args = vec![
        SimArg::tensor(DType::F32, &[150], &xs),
        SimArg::zeros(DType::F32, &[150]),
    ];
    let o = SimOptions {
        blocks: Some(vec![[1, 0, 0]]),
        ..opts()
    };
    let r = run(&k, &mut args, &o).expect("runs");
    assert_eq!(r.blocks, 1);
    let out = args[1].to_f64(DType::F32);
    assert_eq!(out[63], 0.0);
    assert_eq!(out[64], 64.0 * 0.25 * 2.0 + 1.0);
    assert_eq!(out[128], 0.0);
}

#[test]
fn bad_arguments_are_reported() {
    let n = Var::new("n", DType::I32);
    let k = axpb(&n);
    let mut args = vec![
        SimArg::zeros(DType::F32, &[10]),
        SimArg::zeros(DType::F32, &[11]),
    ];
    let e = run(&k, &mut args, &opts()).unwrap_err();
    assert!(
        matches!(&e, SimError::BadArgs(m) if m.contains("`n` is 10")),
        "{e}"
    );
    let mut args = vec![SimArg::zeros(DType::F32, &[10])];
    assert!(matches!(
        run(&k, &mut args, &opts()),
        Err(SimError::BadArgs(_))
    ));
    let mut args = vec![
        SimArg::Tensor {
            bytes: vec![0; 7],
            shape: vec![2],
        },
        SimArg::zeros(DType::F32, &[2]),
    ];
    assert!(matches!(
        run(&k, &mut args, &opts()),
        Err(SimError::BadArgs(_))
    ));
    let mut args = vec![
        SimArg::zeros(DType::F32, &[10]),
        SimArg::zeros(DType::F32, &[10]),
    ];
    let o = SimOptions {
        blocks: Some(vec![[5, 0, 0]]),
        ..opts()
    };
    assert!(matches!(run(&k, &mut args, &o), Err(SimError::BadArgs(_))));
}

#[test]
fn out_of_bounds_global_access_names_buffer_index_thread_and_line() {
    let a = global("a", vec![Expr::int(32)], DType::F32);
    let out = global("out", vec![Expr::int(32)], DType::F32);
    let line = std::cell::Cell::new(0);
    let k = kernel(
        "oob",
        vec![],
        vec![input(&a), output(&out)],
        vec![Expr::int(1)],
        32,
        |b, _| {
            b.store(&out, tid(), a.at([tid() + 1]));
            line.set(b.last_line());
        },
    );
    let mut args = vec![
        SimArg::zeros(DType::F32, &[32]),
        SimArg::zeros(DType::F32, &[32]),
    ];
    match run(&k, &mut args, &opts()) {
        Err(SimError::OutOfBounds {
            buffer,
            index,
            extent,
            thread,
            span,
            ..
        }) => {
            assert_eq!(buffer, "a");
            assert_eq!(index, vec![32]);
            assert_eq!(extent, vec![32]);
            assert_eq!(thread, 31);
            assert_eq!(span.line, line.get());
            assert!(span.file.ends_with("basics.rs"));
        }
        other => panic!("expected OutOfBounds, got {other:?}"),
    }
}

#[test]
fn multi_dimensional_indices_are_checked_per_dimension() {
    let a = global("a", vec![Expr::int(4), Expr::int(8)], DType::F32);
    let k = kernel(
        "oob2",
        vec![],
        vec![output(&a)],
        vec![Expr::int(1)],
        32,
        // Row 0, column tid: columns 8.. run past the row even though the flat index fits.
        |b, _| b.store_nd(&a, vec![Expr::int(0), tid()], 1.0f32),
    );
    let mut args = vec![SimArg::zeros(DType::F32, &[4, 8])];
    match run(&k, &mut args, &opts()) {
        Err(SimError::OutOfBounds {
            index,
            extent,
            thread,
            ..
        }) => {
            assert_eq!(index, vec![0, 8]);
            assert_eq!(extent, vec![4, 8]);
            assert_eq!(thread, 8);
        }
        other => panic!("expected OutOfBounds, got {other:?}"),
    }
}

#[test]
fn integer_division_by_zero_is_an_error() {
    let out = global("out", vec![Expr::int(32)], DType::I32);
    let k = kernel(
        "div0",
        vec![],
        vec![output(&out)],
        vec![Expr::int(1)],
        32,
        |b, _| b.store(&out, tid(), Expr::int(100) / (tid() - 5)),
    );
    let mut args = vec![SimArg::zeros(DType::I32, &[32])];
    assert!(matches!(
        run(&k, &mut args, &opts()),
        Err(SimError::DivisionByZero { thread: 5, .. })
    ));
}

#[test]
fn runaway_loops_hit_the_step_limit() {
    let out = global("out", vec![Expr::int(1)], DType::I32);
    let k = kernel(
        "long",
        vec![],
        vec![output(&out)],
        vec![Expr::int(1)],
        32,
        |b, _| {
            let acc = b.var("acc", DType::I32);
            b.store(&acc, 0, 0);
            b.for_("i", 1_000_000, |b, i| {
                b.store(&acc, 0, acc.at([0]) + i);
            });
            b.if_(tid().eq_(0), |b| b.store(&out, 0, acc.at([0])));
        },
    );
    let mut args = vec![SimArg::zeros(DType::I32, &[1])];
    let o = SimOptions {
        max_steps: 10_000,
        ..opts()
    };
    assert!(matches!(
        run(&k, &mut args, &o),
        Err(SimError::StepLimit { limit: 10_000, .. })
    ));
}

#[test]
fn narrow_floats_compute_in_f32_and_round_at_stores_and_casts() {
    let a = global("a", vec![Expr::int(2)], DType::BF16);
    let out = global("out", vec![Expr::int(3)], DType::BF16);
    let out32 = global("out32", vec![Expr::int(1)], DType::F32);
    let k = kernel(
        "narrow",
        vec![],
        vec![input(&a), output(&out), output(&out32)],
        vec![Expr::int(1)],
        1,
        |b, _| {
            // 1 + 2^-8 is not a bf16: kept in f32 inside the expression.
            let x = a.at([0]) + a.at([1]);
            b.store(&out32, 0, x.cast(DType::F32));
            b.store(&out, 0, x.clone());
            // (A cast of a bf16-typed expression to bf16 is no cast at all; go through f32.)
            let rounded = x.cast(DType::F32).cast(DType::BF16).cast(DType::F32);
            b.store(&out, 1, rounded * 3.0f32);
            b.store(&out, 2, a.at([0]) * 3.0f32 + a.at([1]) * 3.0f32);
        },
    );
    let mut args = vec![
        SimArg::tensor(DType::BF16, &[2], &[1.0, 1.0 / 256.0]),
        SimArg::zeros(DType::BF16, &[3]),
        SimArg::zeros(DType::F32, &[1]),
    ];
    run(&k, &mut args, &opts()).expect("runs");
    assert_eq!(args[2].to_f64(DType::F32), vec![1.0 + 1.0 / 256.0]);
    let o = args[1].to_f64(DType::BF16);
    assert_eq!(o[0], 1.0, "the store rounds (ties to even)");
    assert_eq!(o[1], 3.0, "the cast rounded before the multiply");
    // 3 + 3/256 in f32, rounded once at the store: 3.01171875 -> 3.015625.
    assert_eq!(o[2], 3.015625);
}

#[test]
fn sixty_four_bit_integers_are_exact() {
    let a = global("a", vec![Expr::int(1)], DType::I64);
    let out = global("out", vec![Expr::int(2)], DType::I64);
    let k = kernel(
        "i64",
        vec![],
        vec![input(&a), output(&out)],
        vec![Expr::int(1)],
        1,
        |b, _| {
            b.store(&out, 0, a.at([0]) + 1);
            b.store(&out, 1, a.at([0]) * 2);
        },
    );
    let big = (1i64 << 60) + 3;
    let mut args = vec![
        SimArg::Tensor {
            bytes: big.to_le_bytes().to_vec(),
            shape: vec![1],
        },
        SimArg::zeros(DType::I64, &[2]),
    ];
    run(&k, &mut args, &opts()).expect("runs");
    let SimArg::Tensor { bytes, .. } = &args[1] else {
        panic!()
    };
    let v0 = i64::from_le_bytes(bytes[0..8].try_into().unwrap());
    let v1 = i64::from_le_bytes(bytes[8..16].try_into().unwrap());
    assert_eq!(v0, big + 1);
    assert_eq!(v1, big.wrapping_mul(2));
}

#[test]
fn scalar_params_and_block_swizzle() {
    let out = global("out", vec![Expr::int(4), Expr::int(4)], DType::I32);
    let s = Var::new("s", DType::I32);
    let mut k = kernel(
        "swz",
        vec![],
        vec![output(&out), tl_ir::Param::Scalar(s.clone())],
        vec![Expr::int(4), Expr::int(4)],
        1,
        |b, bxy| {
            // Which hardware-linear block computed tile (by, bx)?
            b.store_nd(&out, vec![bxy[1].clone(), bxy[0].clone()], s.expr() + 0);
        },
    );
    k.attrs.swizzle_panel = Some(2);
    let mut args = vec![SimArg::zeros(DType::I32, &[4, 4]), SimArg::Int(7)];
    let r = run(&k, &mut args, &opts()).expect("runs");
    assert_eq!(r.blocks, 16);
    assert!(args[0].to_f64(DType::I32).iter().all(|&x| x == 7.0));
    // The first hardware block (0, 0) and the second (1, 0) cover tiles (0,0) and (1,0).
    let mut args = vec![SimArg::zeros(DType::I32, &[4, 4]), SimArg::Int(1)];
    let o = SimOptions {
        blocks: Some(vec![[1, 0, 0]]),
        ..opts()
    };
    run(&k, &mut args, &o).expect("runs");
    let v = args[0].to_f64(DType::I32);
    assert_eq!(v[4], 1.0, "hardware block x=1 computes row 1, column 0");
    assert_eq!(v.iter().sum::<f64>(), 1.0);
}

/// A 3-d grid with a panel swizzle rasterizes (x, y) within each z: every (x, y, z) tile is
/// computed once, by a block of the same z, and hardware block (1, 0, z) takes tile (x 0,
/// y 1), as in a 2-d grid.
#[test]
fn block_swizzle_of_a_3d_grid_stays_within_each_z() {
    let out = global(
        "out",
        vec![Expr::int(2), Expr::int(4), Expr::int(4)],
        DType::I32,
    );
    let mut k = kernel(
        "swz3",
        vec![],
        vec![output(&out)],
        vec![Expr::int(4), Expr::int(4), Expr::int(2)],
        1,
        |b, v| {
            b.store_nd(
                &out,
                vec![v[2].clone(), v[1].clone(), v[0].clone()],
                v[2].clone() + 1,
            );
        },
    );
    k.attrs.swizzle_panel = Some(2);
    let mut args = vec![SimArg::zeros(DType::I32, &[2, 4, 4])];
    let r = run(&k, &mut args, &opts()).expect("runs");
    assert_eq!(r.blocks, 32);
    let want: Vec<f64> = (0..32).map(|i| (i / 16 + 1) as f64).collect();
    assert_eq!(
        args[0].to_f64(DType::I32),
        want,
        "every tile once, in its own z"
    );
    let mut args = vec![SimArg::zeros(DType::I32, &[2, 4, 4])];
    let o = SimOptions {
        blocks: Some(vec![[1, 0, 1]]),
        ..opts()
    };
    run(&k, &mut args, &o).expect("runs");
    let v = args[0].to_f64(DType::I32);
    assert_eq!(
        v[16 + 4],
        2.0,
        "hardware block (1, 0, 1) computes z 1, row 1, column 0"
    );
    assert_eq!(v.iter().sum::<f64>(), 2.0);
}

#[test]
fn vector_copies_and_alignment() {
    let a = global("a", vec![Expr::int(64)], DType::F16);
    let out = global("out", vec![Expr::int(64)], DType::F16);
    let k = kernel(
        "vcopy",
        vec![],
        vec![input(&a), output(&out)],
        vec![Expr::int(1)],
        8,
        |b, _| {
            let r = b.local("r", &[8], DType::F16);
            b.vec_copy(8, addr(&r, 0), addr(&a, tid() * 8));
            b.for_("j", 8, |b, j| {
                b.store(&r, j.clone(), r.at([j.clone()]) * 2.0f32);
            });
            b.vec_copy(8, addr(&out, tid() * 8), addr(&r, 0));
        },
    );
    let xs: Vec<f64> = (0..64).map(|i| i as f64).collect();
    let mut args = vec![
        SimArg::tensor(DType::F16, &[64], &xs),
        SimArg::zeros(DType::F16, &[64]),
    ];
    run(&k, &mut args, &opts()).expect("runs");
    let o = args[1].to_f64(DType::F16);
    assert!(o.iter().enumerate().all(|(i, &v)| v == 2.0 * i as f64));

    // A 16-byte copy from an element that is only 2-byte aligned.
    let k = kernel(
        "vcopy_mis",
        vec![],
        vec![input(&a), output(&out)],
        vec![Expr::int(1)],
        1,
        |b, _| b.vec_copy(8, addr(&out, 0), addr(&a, 1)),
    );
    let mut args = vec![
        SimArg::zeros(DType::F16, &[64]),
        SimArg::zeros(DType::F16, &[64]),
    ];
    assert!(matches!(
        run(&k, &mut args, &opts()),
        Err(SimError::Misaligned { align: 16, .. })
    ));
}

/// A predicated vector copy (what a tile copy's row tail lowers to) zero-fills where the
/// predicate is false and does not read the source there, even past the end of the tensor.
#[test]
fn predicated_vector_copies_zero_fill_without_reading() {
    let a = global("a", vec![Expr::int(24)], DType::F16);
    let out = global("out", vec![Expr::int(64)], DType::F16);
    let k = kernel(
        "vcopy_pred",
        vec![],
        vec![input(&a), output(&out)],
        vec![Expr::int(1)],
        8,
        |b, _| {
            // Threads 3..7 would read a[24..64): out of bounds, so their copies are off.
            b.vec_copy_pred(8, addr(&out, tid() * 8), addr(&a, tid() * 8), tid().lt(3));
        },
    );
    let xs: Vec<f64> = (1..=24).map(|i| i as f64).collect();
    let mut args = vec![
        SimArg::tensor(DType::F16, &[24], &xs),
        SimArg::tensor(DType::F16, &[64], &[7.0; 64]),
    ];
    run(&k, &mut args, &opts()).expect("runs: the skipped copies read nothing");
    let o = args[1].to_f64(DType::F16);
    assert!(o[..24]
        .iter()
        .enumerate()
        .all(|(i, &v)| v == (i + 1) as f64));
    assert!(o[24..].iter().all(|&v| v == 0.0), "{:?}", &o[24..]);
}

#[test]
fn ill_formed_ir_is_rejected_not_run() {
    let out = global("out", vec![Expr::int(4)], DType::F32);
    let k = kernel(
        "bad",
        vec![],
        vec![output(&out)],
        vec![Expr::int(1)],
        4,
        |b, _| {
            b.for_kind("i", 0, 4, tl_ir::ForKind::Parallel, |b, i| {
                b.store(&out, i, 1.0f32)
            })
        },
    );
    let mut args = vec![SimArg::zeros(DType::F32, &[4])];
    assert!(matches!(
        run(&k, &mut args, &opts()),
        Err(SimError::InvalidIr(_))
    ));
}

#[test]
fn known_pure_device_functions_run_and_others_are_unsupported() {
    let a = global("a", vec![Expr::int(4)], DType::F32);
    let out = global("out", vec![Expr::int(4)], DType::F32);
    let call = |name: &str, args: Vec<Expr>| {
        Expr::call(
            tl_ir::Intrinsic::Extern {
                name: name.into(),
                pure: true,
            },
            args,
            DType::F32,
        )
    };
    let k = kernel(
        "ext",
        vec![],
        vec![input(&a), output(&out)],
        vec![Expr::int(1)],
        4,
        |b, _| {
            let x = a.at([tid()]);
            b.store(
                &out,
                tid(),
                call("fmaxf", vec![call("expf", vec![x.clone()]), x]),
            );
        },
    );
    let mut args = vec![
        SimArg::tensor(DType::F32, &[4], &[0.0, 1.0, -1.0, 2.0]),
        SimArg::zeros(DType::F32, &[4]),
    ];
    run(&k, &mut args, &opts()).expect("runs");
    let o = args[1].to_f64(DType::F32);
    assert_eq!(o[0], 1.0);
    assert_eq!(o[1], 1f32.exp() as f64);

    let k = kernel(
        "ext2",
        vec![],
        vec![input(&a), output(&out)],
        vec![Expr::int(1)],
        4,
        |b, _| b.store(&out, tid(), call("my_device_fn", vec![a.at([tid()])])),
    );
    let mut args = vec![
        SimArg::zeros(DType::F32, &[4]),
        SimArg::zeros(DType::F32, &[4]),
    ];
    assert!(matches!(
        run(&k, &mut args, &opts()),
        Err(SimError::Unsupported(m)) if m.contains("my_device_fn")
    ));
}

#[test]
fn two_threads_of_a_block_storing_one_global_element_race() {
    let out = global("out", vec![Expr::int(64)], DType::F32);
    let build = |shift: bool| {
        let o = out.clone();
        kernel(
            "global_race",
            vec![],
            vec![output(&out)],
            vec![Expr::int(2)],
            64,
            move |b, bx| {
                let i = if shift { tid() / 2 } else { tid() };
                b.if_(bx[0].eq_(0), |b| b.store(&o, i, 1.0f32));
            },
        )
    };
    let mut args = vec![SimArg::zeros(DType::F32, &[64])];
    run(&build(false), &mut args, &opts()).expect("distinct elements");
    let mut args = vec![SimArg::zeros(DType::F32, &[64])];
    match run(&build(true), &mut args, &opts()) {
        Err(SimError::DataRace {
            buffer,
            offset,
            first,
            second,
            ..
        }) => {
            assert_eq!(buffer, "out");
            assert_eq!(offset, 0);
            assert_eq!((first.thread, second.thread), (0, 1));
        }
        other => panic!("expected a race, got {other:?}"),
    }
}

/// `values[t]` in thread `t` (of as many threads as values).
fn per_thread(values: &[i64]) -> Expr {
    values
        .iter()
        .enumerate()
        .rev()
        .fold(Expr::int(0), |acc, (t, &v)| {
            Expr::select(tid().eq_(t as i64), Expr::int(v), acc)
        })
}

/// `LoadWindow` + `StoreShifted` copy 16 bytes from any element to an aligned destination
/// (what a kernel staging odd rows itself lowers to): at every 2-byte misalignment, at the
/// tensor's end (the window's bytes past it read as zeros, and nothing past it is read), and
/// from a tensor whose first element is not 16-byte aligned (nothing before it is read). A
/// destination that is not 16-byte aligned is reported. The L2 prefetch beside them changes
/// nothing and must name a global element.
#[test]
fn shifted_vector_copies_realign_any_element() {
    let n = 61i64;
    let a = global("a", vec![Expr::int(n)], DType::F16);
    let out = global("out", vec![Expr::int(128)], DType::F16);
    let starts = [0i64, 9, 18, 27, 36, 45, 54, 57];
    let copy = |b: &mut B, first: i64, count: i64, dst: Expr| {
        let w = b.local("w", &[8], DType::U32);
        let off = b.let_("off", per_thread(&starts).cast(DType::I64));
        b.call(
            Intrinsic::LoadWindow,
            vec![
                addr(&w, 0),
                addr(&a, first),
                off.clone(),
                Expr::int_of(count, DType::I64),
            ],
        );
        b.call(
            Intrinsic::StoreShifted,
            vec![dst, addr(&w, 0), addr(&a, first), off],
        );
    };
    let k = kernel(
        "shifted",
        vec![],
        vec![input(&a), output(&out)],
        vec![Expr::int(1)],
        8,
        |b, _| {
            copy(b, 0, n, addr(&out, tid() * 8));
            copy(b, 1, n - 1, addr(&out, tid() * 8 + 64));
        },
    );
    let xs: Vec<f64> = (0..n).map(|i| (i + 1) as f64).collect();
    let mut args = vec![
        SimArg::tensor(DType::F16, &[n as usize], &xs),
        SimArg::zeros(DType::F16, &[128]),
    ];
    run(&k, &mut args, &opts()).expect("runs");
    let o = args[1].to_f64(DType::F16);
    for (t, &s) in starts.iter().enumerate() {
        for j in 0..8 {
            let whole = if s + j < n { (s + j + 1) as f64 } else { 0.0 };
            assert_eq!(o[t * 8 + j as usize], whole, "thread {t}, element {j}");
            let view = if s + j < n - 1 {
                (s + j + 2) as f64
            } else {
                0.0
            };
            assert_eq!(
                o[64 + t * 8 + j as usize],
                view,
                "from a[1]: thread {t}, element {j}"
            );
        }
    }

    let k = kernel(
        "shifted_mis",
        vec![],
        vec![input(&a), output(&out)],
        vec![Expr::int(1)],
        1,
        |b, _| copy(b, 0, n, addr(&out, 1)),
    );
    let mut args = vec![
        SimArg::zeros(DType::F16, &[n as usize]),
        SimArg::zeros(DType::F16, &[128]),
    ];
    assert!(matches!(
        run(&k, &mut args, &opts()),
        Err(SimError::Misaligned { align: 16, .. })
    ));

    // An L2 prefetch is a hint with no effect on memory; it must name a global element.
    let k = kernel(
        "prefetch",
        vec![],
        vec![input(&a), output(&out)],
        vec![Expr::int(1)],
        1,
        |b, _| {
            b.call(Intrinsic::PrefetchL2, vec![addr(&a, 3)]);
            b.store(&out, 0, a.at([Expr::int(3)]));
        },
    );
    let mut args = vec![
        SimArg::tensor(DType::F16, &[n as usize], &xs),
        SimArg::zeros(DType::F16, &[128]),
    ];
    run(&k, &mut args, &opts()).expect("a prefetch runs");
    assert_eq!(args[1].to_f64(DType::F16)[0], 4.0);
    let k = kernel(
        "prefetch_local",
        vec![],
        vec![input(&a), output(&out)],
        vec![Expr::int(1)],
        1,
        |b, _| {
            let w = b.local("w", &[8], DType::U32);
            b.call(Intrinsic::PrefetchL2, vec![addr(&w, 0)]);
        },
    );
    assert!(
        run(&k, &mut args, &opts()).is_err(),
        "a prefetch of a register array"
    );
}

/// `ShiftedVecCopy` moves eight 2-byte elements from any element of a shared buffer to a
/// 16-byte-aligned one (what the realigning GEMM's consumers do with rows that landed at a
/// shift): right at every start, even or odd. Where the source starts mid-word the GPU forms
/// read the element before and the one after the eight, and so does the simulator: a source
/// whose next element lies past its buffer, or was never written, is reported.
#[test]
fn shifted_vec_copy_moves_any_element() {
    let out = global("out", vec![Expr::int(64)], DType::F16);
    let starts = [0i64, 1, 2, 3, 5, 11, 27, 39];
    // `len` elements of the source, the first `written` of them written.
    let build = |len: i64, written: i64, starts: &[i64]| {
        let starts = starts.to_vec();
        let out = out.clone();
        kernel(
            "shifted_vec_copy",
            vec![],
            vec![output(&out.clone())],
            vec![Expr::int(1)],
            8,
            move |b, _| {
                let src = b.shared("src", &[len], DType::F16);
                let dst = b.shared("dst", &[64], DType::F16);
                b.for_("i", 6, |b, i| {
                    let e = tid() * 6 + i;
                    let inside = e.clone().lt(written);
                    let (src2, e2) = (src.clone(), e.clone());
                    b.if_(inside, move |b| {
                        b.store(&src2, e2.clone(), (e2 + 1).cast(DType::F16))
                    });
                });
                b.sync();
                let start = per_thread(&starts);
                b.call(
                    Intrinsic::ShiftedVecCopy,
                    vec![addr(&dst, tid() * 8), addr(&src, start)],
                );
                b.for_("j", 8, |b, j| {
                    let at = tid() * 8 + j;
                    b.store(&out, at.clone(), Expr::load(&dst, vec![at]));
                });
            },
        )
    };
    let mut args = vec![SimArg::zeros(DType::F16, &[64])];
    run(&build(48, 48, &starts), &mut args, &opts()).expect("runs");
    let o = args[0].to_f64(DType::F16);
    for (t, &s) in starts.iter().enumerate() {
        for j in 0..8 {
            assert_eq!(
                o[t * 8 + j],
                (s + j as i64 + 1) as f64,
                "start {s}, element {j}"
            );
        }
    }
    // From element 39 of 47: the word holding the last one runs past the buffer.
    let past = run(&build(47, 47, &starts), &mut args, &opts());
    assert!(past.is_err(), "a read past the source buffer: {past:?}");
    // Element 47 never written: read by the copy from 39 (odd), not by the one from 40.
    let unwritten = run(&build(48, 47, &starts), &mut args, &opts());
    assert!(
        matches!(unwritten, Err(SimError::UninitializedSharedRead { .. })),
        "{unwritten:?}"
    );
    let even = [0i64, 2, 4, 8, 16, 24, 32, 40];
    run(&build(48, 48, &even), &mut args, &opts()).expect("even starts read only their eight");
}
