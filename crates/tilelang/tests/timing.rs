//! The profiler's timing windows on the CPU backend: every timed window runs the kernel as
//! many times as asked back to back (`BenchConfig::back_to_back`), after the untimed warm-up
//! runs, and reports one sample a window.

use tilelang::prelude::*;
use tilelang::runtime::profile::{bench_with, BenchConfig};

/// `X += 1` over 64 elements: how many times it ran is in X.
fn increment() -> Kernel {
    Kernel::build("increment", |k| {
        let x = k.inout("X", [64], F32);
        k.launch([1], 64, |t, [_bx]| {
            let f = t.alloc_fragment_named("f", [64], F32);
            t.copy(x.tile([0]), &f);
            t.parallel([64], |t, [i]| t.store(&f, [&i], f.at([&i]) + 1.0));
            t.copy(&f, x.tile([0]));
        });
    })
}

#[test]
fn each_window_runs_the_kernel_back_to_back() {
    let dev = Device::Cpu;
    let exe = increment().compile(&dev).unwrap();
    let x = Tensor::zeros(&[64], F32, &dev).unwrap();
    for (warmup, reps, back_to_back, runs) in [(2, 3, 1, 5.0), (2, 3, 4, 19.0), (0, 2, 0, 21.0)] {
        let cfg = BenchConfig {
            warmup,
            reps,
            flush_l2: false,
            back_to_back,
        };
        let t = bench_with(&exe, &[Arg::Tensor(&x)], &cfg).unwrap();
        assert_eq!(t.reps, reps, "{cfg:?}");
        assert!(t.median_ms.is_finite() && t.min_ms >= 0.0, "{t:?}");
        // The runs add up: 2 + 3, then 2 + 3 × 4 more, then 2 × 1 more (0 counts as 1).
        let got = x.to_f64_vec().unwrap();
        assert!(got.iter().all(|&v| v == runs), "{cfg:?}: {:?}", &got[..4]);
    }
}
