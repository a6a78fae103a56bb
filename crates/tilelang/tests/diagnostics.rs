//! One test per class of verifier diagnostic: each asserts the class, that the message says
//! what is wrong, and that the location is the user's line in this file.

use tilelang::ir::{DiagKind, Diagnostic};
use tilelang::prelude::*;

/// Build, verify, and return the first diagnostic (the test fails if the kernel verifies).
fn first_error(k: &Kernel) -> Diagnostic {
    match k.verify() {
        Ok(()) => panic!("kernel `{}` verified but should not have:\n{k}", k.name()),
        Err(d) => d.0[0].clone(),
    }
}

fn assert_at(d: &Diagnostic, kind: DiagKind, line: u32, words: &[&str]) {
    assert_eq!(d.kind, kind, "{d}");
    assert!(
        d.span.file.ends_with("diagnostics.rs"),
        "span {} is not the user's file\n{d}",
        d.span
    );
    assert_eq!(d.span.line, line, "wrong line\n{d}");
    let text = d.to_string();
    for w in words {
        assert!(text.contains(w), "`{w}` missing from:\n{text}");
    }
    assert!(text.contains(&format!("diagnostics.rs:{line}")), "{text}");
}

#[test]
fn shape_mismatch_in_copy() {
    let mut line = 0;
    let k = Kernel::build("bad_copy", |k| {
        let n = k.dim("N");
        let a = k.input("A", [&n], F32);
        k.launch([1], 32, |t, [_bx]| {
            let s = t.alloc_shared([64], F32);
            let f = t.alloc_fragment([32], F32);
            t.copy(a.tile([0]), &s);
            line = line!() + 1;
            t.copy(&s, &f);
        });
    });
    assert_at(
        &first_error(&k),
        DiagKind::ShapeMismatch,
        line,
        &["copy", "[64]", "[32]"],
    );
}

#[test]
fn dtype_mismatch_in_gemm() {
    let mut line = 0;
    let k = Kernel::build("bad_gemm_types", |k| {
        k.launch([1], 128, |t, [_bx]| {
            let a = t.alloc_shared([64, 32], BF16);
            let b = t.alloc_shared([32, 64], F16);
            let c = t.alloc_fragment([64, 64], F32);
            line = line!() + 1;
            t.gemm(&a, &b, &c);
        });
    });
    assert_at(
        &first_error(&k),
        DiagKind::DTypeMismatch,
        line,
        &["bf16", "f16"],
    );
}

#[test]
fn scope_mismatch_for_gemm_accumulator() {
    let mut line = 0;
    let k = Kernel::build("bad_gemm_scope", |k| {
        k.launch([1], 128, |t, [_bx]| {
            let a = t.alloc_shared([64, 32], BF16);
            let b = t.alloc_shared([32, 64], BF16);
            let c = t.alloc_shared([64, 64], F32);
            line = line!() + 1;
            t.gemm(&a, &b, &c);
        });
    });
    assert_at(
        &first_error(&k),
        DiagKind::ScopeMismatch,
        line,
        &["shared", "fragment"],
    );
}

#[test]
fn gemm_shape_mismatch_says_which_dims() {
    let mut line = 0;
    let k = Kernel::build("bad_gemm_shape", |k| {
        k.launch([1], 128, |t, [_bx]| {
            let a = t.alloc_shared([64, 32], BF16);
            let b = t.alloc_shared([64, 64], BF16);
            let c = t.alloc_fragment([64, 64], F32);
            line = line!() + 1;
            t.gemm(&a, &b, &c);
        });
    });
    assert_at(
        &first_error(&k),
        DiagKind::ShapeMismatch,
        line,
        &["K=32", "K=64", "transpose_b"],
    );
}

#[test]
fn out_of_range_constant_region() {
    let mut line = 0;
    let k = Kernel::build("bad_region", |k| {
        k.launch([1], 32, |t, [_bx]| {
            let s = t.alloc_shared([64, 64], F32);
            line = line!() + 1;
            t.fill(s.region([32, 0], [64, 64]), 0.0);
        });
    });
    assert_at(
        &first_error(&k),
        DiagKind::OutOfRange,
        line,
        &["past its shape", "[64, 64]"],
    );
}

#[test]
fn undefined_variable_outside_its_loop() {
    let mut line = 0;
    let k = Kernel::build("bad_scope_var", |k| {
        let n = k.dim("N");
        let out = k.output("O", [&n], F32);
        k.launch([1], 32, |t, [_bx]| {
            let mut leaked = Expr::from(0);
            t.serial(4, |_t, i| leaked = i);
            line = line!() + 1;
            t.store(&out, [&leaked], 1.0);
        });
    });
    assert_at(
        &first_error(&k),
        DiagKind::UndefinedVariable,
        line,
        &["`s`", "scope"],
    );
}

#[test]
fn undefined_buffer_outside_its_block() {
    let mut line = 0;
    let k = Kernel::build("bad_scope_buf", |k| {
        k.launch([1], 32, |t, [_bx]| {
            let mut inner = None;
            t.serial(2, |t, _i| inner = Some(t.alloc_fragment([8], F32)));
            let f = inner.expect("allocated");
            line = line!() + 1;
            t.clear(&f);
        });
    });
    assert_at(
        &first_error(&k),
        DiagKind::UndefinedBuffer,
        line,
        &["frag0", "allocated here"],
    );
}

#[test]
fn invalid_launch_arguments() {
    let line = line!() + 3;
    let k = Kernel::build("bad_launch", |k| {
        let n = k.dim("N");
        k.launch([ceildiv(&n, 64), Expr::from(1)], 32, |_t, [_bx]| {});
    });
    assert_at(
        &first_error(&k),
        DiagKind::InvalidArgument,
        line,
        &["2 dimensions", "1 block indices"],
    );
}

#[test]
fn tile_op_inside_parallel_loop_is_unsupported() {
    let mut line = 0;
    let k = Kernel::build("bad_nesting", |k| {
        k.launch([1], 32, |t, [_bx]| {
            let f = t.alloc_fragment([8, 8], F32);
            t.parallel([8], |t, [_i]| {
                line = line!() + 1;
                t.clear(&f);
            });
        });
    });
    assert_at(&first_error(&k), DiagKind::Unsupported, line, &["parallel"]);
}

#[test]
fn if_condition_must_be_bool() {
    let mut line = 0;
    let k = Kernel::build("bad_cond", |k| {
        let n = k.dim("N");
        let out = k.output("O", [&n], F32);
        k.launch([1], 32, |t, [bx]| {
            line = line!() + 1;
            t.if_(&bx + 1, |t| t.store(&out, [0], 1.0));
        });
    });
    assert_at(
        &first_error(&k),
        DiagKind::DTypeMismatch,
        line,
        &["not bool"],
    );
}

#[test]
fn good_kernel_verifies() {
    let k = tilelang::kernels::gemm::gemm(
        tilelang::kernels::gemm::Layout::NT,
        BF16,
        BF16,
        tilelang::kernels::gemm::GemmConfig::cpu(),
    );
    k.verify().expect("the gemm kernel is well-formed");
}
