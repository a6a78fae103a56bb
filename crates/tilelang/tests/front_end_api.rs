//! What other front ends (the Python package) build on: the imperative open/close form of the
//! DSL gives the same IR as the closure form, spans set by the front end land in diagnostics,
//! and executables run on memory the runtime does not own (`Arg::External`).

use std::ffi::c_void;

use tilelang::ir::{ForKind, Role, Span};
use tilelang::prelude::*;
use tilelang::runtime::{ExternalTensor, Stream};

/// `C = relu(A + B)` over `N`, with a serial loop, a parallel nest and an if/else: the closure
/// form.
fn closures() -> Kernel {
    Kernel::build("k", |k| {
        let n = k.dim("N");
        let a = k.input("A", [&n], F32);
        let b = k.input("B", [&n], F32);
        let c = k.output("C", [&n], F32);
        k.launch([ceildiv(&n, 64)], 128, |t, [bx]| {
            let af = t.alloc_fragment_named("a", [64], F32);
            let bf = t.alloc_fragment_named("b", [64], F32);
            t.copy(a.tile([&bx * 64]), &af);
            t.copy(b.tile([&bx * 64]), &bf);
            t.serial(2, |t, s| {
                t.if_(s.eq_(0), |t| {
                    t.parallel([64], |t, [i]| {
                        t.store(&af, [&i], af.at([&i]) + bf.at([&i]));
                    });
                })
                .else_(|t| {
                    t.parallel([64], |t, [i]| t.store(&af, [&i], max(af.at([&i]), 0.0)));
                });
            });
            t.copy(&af, c.tile([&bx * 64]));
        });
    })
}

/// The same kernel through the imperative API.
fn imperative(span: Option<Span>) -> Kernel {
    let mut k = Kernel::builder("k", Span::UNKNOWN);
    k.set_span(span);
    let n = k.dim("N");
    let a = k.param("A", [&n], F32, Role::Input);
    let b = k.param("B", [&n], F32, Role::Input);
    let c = k.param("C", [&n], F32, Role::Output);
    let (launch, mut t) = k.open_launch([ceildiv(&n, 64)], 128, &["bx"]).unwrap();
    let bx = launch.block_indices()[0].clone();
    let af = t.alloc_fragment_named("a", [64], F32);
    let bf = t.alloc_fragment_named("b", [64], F32);
    t.copy(a.tile([&bx * 64]), &af);
    t.copy(b.tile([&bx * 64]), &bf);
    let lp = t.open_loop("s", Expr::int(0), Expr::int(2), ForKind::Serial);
    let s = lp.indices()[0].clone();
    let mut body = t.child();
    let cond = body.open_if(s.eq_(0));
    let mut then = body.child();
    let par = then.open_parallel([64], &["i"]).unwrap();
    let i = par.indices()[0].clone();
    let mut inner = then.child();
    inner.store(&af, [&i], af.at([&i]) + bf.at([&i]));
    then.close_loop(par, inner);
    let mut else_ = body.child();
    let par = else_.open_parallel([64], &["i"]).unwrap();
    let i = par.indices()[0].clone();
    let mut inner = else_.child();
    inner.store(&af, [&i], max(af.at([&i]), 0.0));
    else_.close_loop(par, inner);
    body.close_if(cond, then, Some(else_));
    t.close_loop(lp, body);
    t.copy(&af, c.tile([&bx * 64]));
    k.close_launch(launch, t);
    Kernel::from_builder(k)
}

#[test]
fn imperative_and_closure_forms_agree() {
    let a = closures();
    let b = imperative(None);
    assert_eq!(a.to_string(), b.to_string());
    b.verify().unwrap();
}

#[test]
fn front_end_spans_reach_diagnostics() {
    let span = Span {
        file: "kernel.py",
        line: 12,
        col: 5,
    };
    let mut k = Kernel::builder("bad", span);
    k.set_span(Some(span));
    let n = k.dim("N");
    let a = k.param("A", [&n], F32, Role::Input);
    let (launch, mut t) = k.open_launch([1], 32, &["bx"]).unwrap();
    let s1 = t.alloc_shared_named("s", [16, 16], F32);
    let f = t.alloc_fragment_named("f", [16, 8], F32);
    t.set_span(Some(Span { line: 14, ..span }));
    t.gemm(&s1, &s1, &f);
    t.copy(a.tile([0]), &s1);
    // A parallel nest with the wrong number of names is refused as `parallel` refuses it.
    assert!(t.open_parallel([4, 4], &["i"]).is_none());
    k.close_launch(launch, t);
    let e = Kernel::from_builder(k).verify().unwrap_err().to_string();
    assert!(e.contains("kernel.py:14:5"), "{e}");
    assert!(
        e.contains("parallel over 2 extents, but the body takes 1 indices"),
        "{e}"
    );
}

#[test]
fn dims_made_outside_are_adopted_once() {
    let m = Var::new("m", tilelang::ir::DType::I32);
    let mut k = Kernel::builder("k", Span::UNKNOWN);
    let e1 = k.dim_var(&m);
    let e2 = k.dim_var(&m);
    assert_eq!(e1.to_string(), e2.to_string());
    // Another variable of the same name is a second declaration.
    k.dim_var(&Var::new("m", tilelang::ir::DType::I32));
    let a = k.param("A", [&e1], F32, Role::InOut);
    let (l, mut t) = k.open_launch([1], 32, &["bx"]).unwrap();
    t.fill(&a, 1.0);
    k.close_launch(l, t);
    let e = Kernel::from_builder(k).verify().unwrap_err().to_string();
    assert!(e.contains("`m` is declared twice"), "{e}");
}

fn ext(v: &mut [f32], device: Device) -> ExternalTensor {
    // SAFETY: the vectors outlive every launch in these tests and hold `len` f32s.
    unsafe {
        ExternalTensor::new(
            v.as_mut_ptr() as *mut c_void,
            F32,
            vec![v.len()],
            vec![1],
            device,
        )
    }
    .unwrap()
}

#[test]
fn kernels_run_on_external_memory() {
    let n = 1000;
    let a: Vec<f32> = (0..n).map(|i| (i as f32) * 0.5 - 100.0).collect();
    let b: Vec<f32> = (0..n).map(|i| ((i * 7) % 13) as f32 - 6.0).collect();
    let want: Vec<f32> = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x + y).max(0.0) + 0.0)
        .collect();
    let kernel = closures();
    for dev in [Device::Cpu, Device::SIM] {
        let exe = kernel.compile(&dev).unwrap();
        let (mut a, mut b, mut c) = (a.clone(), b.clone(), vec![-1f32; n]);
        let (ea, eb, ec) = (
            ext(&mut a, Device::Cpu),
            ext(&mut b, Device::Cpu),
            ext(&mut c, Device::Cpu),
        );
        exe.run_args(&[Arg::External(&ea), Arg::External(&eb), Arg::External(&ec)])
            .unwrap();
        assert_eq!(c, want, "on {dev}");
        // The inputs are untouched (the simulator writes back outputs only).
        assert_eq!(a[3], 3.0 * 0.5 - 100.0);
        // Host devices have no streams.
        let e = exe
            .run_args_on(
                &[Arg::External(&ea), Arg::External(&eb), Arg::External(&ec)],
                Stream::Raw(0),
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("no streams"), "{e}");
    }
}
