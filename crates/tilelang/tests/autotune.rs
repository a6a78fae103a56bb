//! The autotuner on the CPU backend: failing and wrong candidates are skipped, the fastest
//! correct one wins, the winner is cached, and TILELANG_AUTOTUNE=0 turns tuning off.

use tilelang::autotune::{autotune, Outcome, Space, TuneOptions};
use tilelang::kernels::gemm::{gemm, GemmConfig, Layout};
use tilelang::kernels::reference;
use tilelang::prelude::*;

#[derive(Clone, Debug)]
struct Cfg {
    bm: i64,
    bn: i64,
    bk: i64,
    /// Builds the wrong kernel (B taken as [K, N] instead of [N, K]).
    wrong: bool,
}

#[test]
fn tunes_skips_bad_candidates_and_caches_the_winner() {
    let dev = Device::Cpu;
    let n = 96;
    let a = Tensor::randn(&[n, n], F32, 1, &dev).expect("a");
    let b = Tensor::randn(&[n, n], F32, 2, &dev).expect("b");
    let c = Tensor::zeros(&[n, n], F32, &dev).expect("c");
    let want = reference::gemm(
        &a.to_f64_vec().expect("a"),
        &b.to_f64_vec().expect("b"),
        n,
        n,
        n,
        false,
        true,
    );
    let check = || -> Result<(), String> {
        let e = c.rel_err(&want).map_err(|e| e.to_string())?;
        if e < 1e-5 {
            Ok(())
        } else {
            Err(format!("relative error {e:.2e}"))
        }
    };
    let space = Space::list(vec![
        Cfg {
            bm: 32,
            bn: 32,
            bk: 16,
            wrong: true,
        },
        // bk = 0 is not a valid tile: it must fail to compile, not crash the tuner.
        Cfg {
            bm: 32,
            bn: 32,
            bk: 0,
            wrong: false,
        },
        Cfg {
            bm: 32,
            bn: 32,
            bk: 16,
            wrong: false,
        },
        Cfg {
            bm: 64,
            bn: 64,
            bk: 32,
            wrong: false,
        },
    ]);
    let build = |c: &Cfg| {
        let cfg = GemmConfig::tiles(c.bm, c.bn, c.bk, 1, 128);
        gemm(if c.wrong { Layout::NN } else { Layout::NT }, F32, F32, cfg)
    };
    let cache = std::env::temp_dir().join(format!("tl-tune-test-{}", std::process::id()));
    let opts = TuneOptions {
        cache_dir: Some(cache.clone()),
        reps: 3,
        warmup: 1,
        progress: false,
        ..Default::default()
    };
    let args = [Arg::Tensor(&a), Arg::Tensor(&b), Arg::Tensor(&c)];
    let (best, r) = autotune("gemm_nt", &space, build, &dev, &args, &check, &opts).expect("tunes");
    println!("{r}");
    assert!(
        matches!(r.trials[0].outcome, Outcome::WrongResult(_)),
        "{r}"
    );
    assert!(
        matches!(r.trials[1].outcome, Outcome::CompileFailed(_)),
        "{r}"
    );
    assert!(matches!(r.trials[2].outcome, Outcome::Timed(_)), "{r}");
    assert!(matches!(r.trials[3].outcome, Outcome::Timed(_)), "{r}");
    assert!(!best.wrong && best.bk > 0);
    assert!(!r.from_cache);
    // A second call finds the winner in the cache without trying anything.
    let (again, r2) =
        autotune("gemm_nt", &space, build, &dev, &args, &check, &opts).expect("tunes");
    assert!(r2.from_cache);
    assert_eq!(format!("{again:?}"), format!("{best:?}"));
    let _ = std::fs::remove_dir_all(cache);
}

/// A candidate whose `accept` refuses it, standing in for a kernel that spills registers
/// (which only a GPU compile reports).
struct Refused {
    kernel: Kernel,
    refuse: bool,
}

impl tilelang::autotune::Candidate for Refused {
    fn label(&self) -> String {
        format!("refuse={}", self.refuse)
    }
    fn prepare(&self) -> Result<(), String> {
        Ok(())
    }
    fn build(&self) -> Result<tilelang::runtime::Executable, String> {
        self.kernel.compile(&Device::Cpu).map_err(|e| e.to_string())
    }
    fn accept(&self, _exe: &tilelang::runtime::Executable) -> Result<(), String> {
        if self.refuse {
            Err("spills registers (stand-in)".into())
        } else {
            Ok(())
        }
    }
}

#[test]
fn rejected_candidates_never_win() {
    use tilelang::autotune::{tune, Candidate, TuneKey};
    let dev = Device::Cpu;
    let n = 64;
    let a = Tensor::randn(&[n, n], F32, 1, &dev).expect("a");
    let b = Tensor::randn(&[n, n], F32, 2, &dev).expect("b");
    let c = Tensor::zeros(&[n, n], F32, &dev).expect("c");
    let k = gemm(Layout::NT, F32, F32, GemmConfig::cpu());
    let cands: Vec<Box<dyn Candidate>> = vec![
        Box::new(Refused {
            kernel: k.clone(),
            refuse: true,
        }),
        Box::new(Refused {
            kernel: k,
            refuse: false,
        }),
    ];
    let key = TuneKey {
        kernel: "refused".into(),
        shapes: format!("{}", std::process::id()),
        device: "cpu".into(),
    };
    let opts = TuneOptions {
        cache_dir: Some(std::env::temp_dir().join(format!("tl-refuse-{}", std::process::id()))),
        reps: 2,
        warmup: 1,
        progress: false,
        ..Default::default()
    };
    let args = [Arg::Tensor(&a), Arg::Tensor(&b), Arg::Tensor(&c)];
    let r = tune(&key, &cands, &args, &|| Ok(()), &opts).expect("tunes");
    assert_eq!(r.best, 1, "{r}");
    assert!(
        matches!(&r.trials[0].outcome, Outcome::Rejected(m) if m.contains("spills")),
        "{r}"
    );
    assert!(r.to_string().contains("rejected: spills registers"), "{r}");
    if let Some(d) = opts.cache_dir {
        let _ = std::fs::remove_dir_all(d);
    }
}
