//! Every example kernel lowers to well-formed thread-level IR for the GPU targets (the
//! simulator and the CUDA compile checks run what this produces).

mod common;

use common::example_kernels;
use tilelang::Target;

#[test]
fn examples_lower_for_gpu_targets() {
    for k in example_kernels() {
        for target in [Target::SM80, Target::SM90] {
            match k.lower(target) {
                Ok(low) => {
                    if std::env::var("TL_PRINT").is_ok() {
                        println!("{low}");
                    }
                }
                Err(d) => panic!("{} for {target}:\n{d}", k.name()),
            }
        }
    }
}

use tilelang::ir::DiagKind;
use tilelang::prelude::*;

/// y = 2·x on a [4, 64] tile whose fragment layout the user fixes.
fn scaled(layout: &str) -> Kernel {
    let layout = layout.to_string();
    Kernel::build("scaled", move |k| {
        let x = k.input("X", [4, 64], F32);
        let y = k.output("Y", [4, 64], F32);
        k.launch([1], 64, |t, [_bx]| {
            let f = t.alloc_fragment_named("f", [4, 64], F32);
            t.annotate_layout(&f, &layout);
            t.copy(&x, &f);
            t.parallel([4, 64], |t, [i, j]| {
                t.store(&f, [&i, &j], f.at([&i, &j]) * 2.0)
            });
            t.copy(&f, &y);
        });
    })
}

#[test]
fn annotated_fragment_layouts_are_used() {
    // 64 threads; each holds 4 elements of one column (rows vary in the value index).
    let k = scaled("(64,4):(4,1)");
    let low = k.lower(Target::SM80).expect("lowers");
    assert!(low.to_string().contains("layout f = (64,4):(4,1)"), "{low}");
    let dev = Device::Sim;
    let x = Tensor::randn(&[4, 64], F32, 1, &dev).expect("x");
    let y = Tensor::zeros(&[4, 64], F32, &dev).expect("y");
    k.compile(&dev)
        .expect("compiles")
        .run(&[&x, &y])
        .expect("runs in the simulator");
    let want: Vec<f64> = x.to_f64_vec().expect("x").iter().map(|v| v * 2.0).collect();
    assert_eq!(y.to_f64_vec().expect("y"), want);
}

#[test]
fn bad_annotations_are_diagnosed() {
    let e = scaled("(64,4:(4,1)")
        .lower(Target::SM80)
        .expect_err("parse error");
    assert!(e.has(DiagKind::InvalidArgument), "{e}");
    assert!(e.to_string().contains("gpu_lowering.rs"), "{e}");
    let e = scaled("(32,(4,2)):(8,(1,4))")
        .lower(Target::SM80)
        .expect_err("wrong thread count");
    assert!(e.to_string().contains("32 threads"), "{e}");
}

#[test]
fn conflicting_layouts_name_both_operations_and_layouts() {
    // The gemm needs its tensor-core layout for the accumulator; the annotation asks otherwise.
    let k = Kernel::build("conflict", |k| {
        let c = k.output("C", [64, 64], F32);
        k.launch([1], 128, |t, [_bx]| {
            let a = t.alloc_shared([64, 32], BF16);
            let b = t.alloc_shared([32, 64], BF16);
            let acc = t.alloc_fragment_named("acc", [64, 64], F32);
            t.annotate_layout(&acc, "((64,2),32):((1,2048),64)");
            t.clear(&a);
            t.clear(&b);
            t.gemm(&a, &b, &acc).clear_accum();
            t.copy(&acc, &c);
        });
    });
    let e = k.lower(Target::SM80).expect_err("conflict");
    let text = e.to_string();
    println!("{text}");
    assert!(e.has(DiagKind::LayoutConflict), "{text}");
    assert!(text.contains("`acc`"), "{text}");
    assert!(text.contains("((64,2),32):((1,2048),64)"), "{text}");
    assert!(text.contains("tensor-core gemm"), "{text}");
    assert!(
        text.matches("gpu_lowering.rs").count() >= 2,
        "both lines named: {text}"
    );
}
