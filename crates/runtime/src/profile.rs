//! Timing: warm up, run many times, report the median.

use std::time::{Duration, Instant};

/// Median wall time of `f` over `reps` runs after `warmup` runs (CPU work is synchronous).
pub fn median_time(warmup: usize, reps: usize, mut f: impl FnMut()) -> Duration {
    for _ in 0..warmup {
        f();
    }
    let mut times: Vec<Duration> = (0..reps.max(1))
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

/// Repetitions so a measurement lasts about `budget`, given one run's time.
pub fn reps_for(one: Duration, budget: Duration) -> usize {
    let n = budget.as_secs_f64() / one.as_secs_f64().max(1e-7);
    n.clamp(3.0, 1000.0) as usize
}

/// Timings of repeated launches, in milliseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Timing {
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
    /// Timed launches.
    pub reps: usize,
    /// Whether L2 was flushed before each timed launch.
    pub l2_flushed: bool,
    /// `cuda:0`, `hip:0` or `cpu`: what measured it (CUDA or HIP events, or the host clock).
    pub device: String,
}

impl Timing {
    /// Summary statistics of per-run times in milliseconds (not empty).
    pub fn from_samples(samples: &[f64], l2_flushed: bool, device: String) -> Timing {
        let mut s: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        s.sort_by(f64::total_cmp);
        let n = s.len();
        let (median, min, max, mean) = if n == 0 {
            (f64::NAN, f64::NAN, f64::NAN, f64::NAN)
        } else {
            let median = if n % 2 == 1 {
                s[n / 2]
            } else {
                0.5 * (s[n / 2 - 1] + s[n / 2])
            };
            (median, s[0], s[n - 1], s.iter().sum::<f64>() / n as f64)
        };
        Timing {
            median_ms: median,
            min_ms: min,
            max_ms: max,
            mean_ms: mean,
            reps: n,
            l2_flushed,
            device,
        }
    }

    /// TFLOP/s at the median time for `flops` floating-point operations per run.
    pub fn tflops(&self, flops: f64) -> f64 {
        flops / (self.median_ms * 1e-3) / 1e12
    }

    /// GB/s (10^9 bytes per second) at the median time for `bytes` moved per run.
    pub fn gbps(&self, bytes: f64) -> f64 {
        bytes / (self.median_ms * 1e-3) / 1e9
    }

    /// One line: the median (and spread), then TFLOP/s and/or GB/s when the work is given.
    pub fn summary(&self, flops: Option<f64>, bytes: Option<f64>) -> String {
        let mut s = format!(
            "{:.4} ms (min {:.4}, max {:.4}, {} runs{})",
            self.median_ms,
            self.min_ms,
            self.max_ms,
            self.reps,
            if self.l2_flushed { ", L2 flushed" } else { "" }
        );
        if let Some(f) = flops {
            s.push_str(&format!(", {}", format_rate(f, self.median_ms, "FLOP/s")));
        }
        if let Some(b) = bytes {
            s.push_str(&format!(", {}", format_rate(b, self.median_ms, "B/s")));
        }
        s
    }
}

/// `amount` per `ms` as a rate with an SI prefix: `format_rate(2e12, 1.0, "FLOP/s")` is
/// `2.00 PFLOP/s`; `format_rate(3e9, 1.0, "B/s")` is `3.00 TB/s`.
pub fn format_rate(amount: f64, ms: f64, unit: &str) -> String {
    let per_s = amount / (ms * 1e-3);
    if !per_s.is_finite() {
        return format!("- {unit}");
    }
    let prefixes = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")];
    for (scale, p) in prefixes {
        if per_s >= scale {
            return format!("{:.2} {p}{unit}", per_s / scale);
        }
    }
    format!("{per_s:.2} {unit}")
}

/// How to time a kernel.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    /// Untimed runs first (module load, clocks ramping up, caches of the instruction stream).
    pub warmup: usize,
    /// Timed runs; the median is reported.
    pub reps: usize,
    /// On a GPU, write a buffer of twice the L2 size before each timed run (outside the timed
    /// region), so every run reads its inputs from device memory as a cold call would. On an
    /// AMD GPU the buffer is twice the larger of L2 and the Infinity Cache (256 MiB on MI300X
    /// and MI355X, which the runtime's L2 size leaves out): see `hip::flush_bytes`.
    pub flush_l2: bool,
    /// Launches (or sequences) timed together in each window, back to back, the L2 flushed
    /// once before the window; the time reported is the window's divided by this. 1 times
    /// each launch on its own, as a cold call; more shows a kernel's cost in a stream of
    /// launches, where one kernel's start overlaps the previous one's end (programmatic
    /// dependent launch) and inputs stay in L2 — on an H200 ten back to back ran 1% to 70%
    /// faster per GEMM than one alone (docs/performance.md, session 38). 0 counts as 1.
    pub back_to_back: usize,
}

impl BenchConfig {
    /// Launches in each timed window: [`BenchConfig::back_to_back`], 0 counting as 1.
    pub fn window_launches(&self) -> usize {
        self.back_to_back.max(1)
    }
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            warmup: 10,
            reps: 100,
            flush_l2: true,
            back_to_back: 1,
        }
    }
}

/// Time `exe` on `args`: on a GPU with CUDA or HIP events around each launch (after `warmup`
/// untimed launches, with a cache flush before each timed one); on the CPU with the host clock.
/// The arguments are checked once, as `run_args` would.
pub fn bench(
    exe: &crate::Executable,
    args: &[crate::Arg],
    warmup: usize,
    reps: usize,
) -> crate::Result<Timing> {
    bench_with(
        exe,
        args,
        &BenchConfig {
            warmup,
            reps,
            ..BenchConfig::default()
        },
    )
}

/// [`bench`] with every option.
pub fn bench_with(
    exe: &crate::Executable,
    args: &[crate::Arg],
    cfg: &BenchConfig,
) -> crate::Result<Timing> {
    let exe = exe.variant_for(args)?;
    let b = exe.bind(args)?;
    match exe.module() {
        crate::exec::Module::Cuda(_) => bench_cuda(&[(exe, b)], cfg),
        crate::exec::Module::Hip(k) => {
            crate::hip::check_buffer_ranges(exe.signature(), args)?;
            let mut p = crate::exec::pack_gpu_params(exe.signature(), &b)?;
            let samples = k.bench(
                &mut p,
                b.grid,
                exe.signature().threads,
                cfg.warmup,
                cfg.reps,
                cfg.flush_l2,
                cfg.window_launches(),
            )?;
            Ok(Timing::from_samples(
                &samples,
                cfg.flush_l2,
                exe.device().to_string(),
            ))
        }
        crate::exec::Module::Cpu(_) | crate::exec::Module::Sim(_) => {
            let mut err = None;
            let mut run = || {
                if err.is_none() {
                    if let Err(e) = exe.run_args(args) {
                        err = Some(e);
                    }
                }
            };
            for _ in 0..cfg.warmup {
                run();
            }
            let n = cfg.window_launches();
            let samples: Vec<f64> = (0..cfg.reps.max(1))
                .map(|_| {
                    let t = Instant::now();
                    for _ in 0..n {
                        run();
                    }
                    t.elapsed().as_secs_f64() * 1e3 / n as f64
                })
                .collect();
            if let Some(e) = err {
                return Err(e);
            }
            Ok(Timing::from_samples(&samples, false, "cpu".into()))
        }
    }
}

/// Time a sequence of launches (`(executable, arguments)` in order) as one piece of work: on a
/// GPU with CUDA events around the whole sequence (each after [`BenchConfig::warmup`]
/// untimed sequences, the L2 flushed before each timed one); elsewhere, or where the launches
/// are not all CUDA kernels of one device, with the host clock around the sequence and a
/// synchronization. For programs of several kernels, such as a split-K GEMM and the kernel
/// that sums its shares.
pub fn bench_sequence(
    steps: &[(&crate::Executable, &[crate::Arg])],
    cfg: &BenchConfig,
) -> crate::Result<Timing> {
    if steps.is_empty() {
        return Ok(Timing::from_samples(&[0.0], false, "none".into()));
    }
    let mut bound = vec![];
    for (exe, args) in steps {
        let exe = exe.variant_for(args)?;
        bound.push((exe, exe.bind(args)?));
    }
    if bound
        .iter()
        .all(|(e, _)| matches!(e.module(), crate::exec::Module::Cuda(_)))
    {
        return bench_cuda(&bound, cfg);
    }
    let run = || -> crate::Result<()> {
        for (exe, args) in steps {
            exe.run_args(args)?;
        }
        for (exe, _) in steps {
            exe.synchronize()?;
        }
        Ok(())
    };
    for _ in 0..cfg.warmup {
        run()?;
    }
    let n = cfg.window_launches();
    let mut samples = vec![];
    for _ in 0..cfg.reps.max(1) {
        let t = Instant::now();
        for _ in 0..n {
            run()?;
        }
        samples.push(t.elapsed().as_secs_f64() * 1e3 / n as f64);
    }
    Ok(Timing::from_samples(&samples, false, "host clock".into()))
}

/// CUDA events around launches of bound CUDA variants in order ([`crate::cuda::bench_sequence`]).
/// Pitched stagings (TMA inputs with rows that are not whole 16-byte units) are made before
/// every launch, so the timings include them.
fn bench_cuda(
    steps: &[(&crate::Executable, crate::exec::Bound)],
    cfg: &BenchConfig,
) -> crate::Result<Timing> {
    // Each step holds its executable's staging scratch locked until the sequence is timed: the
    // same executable twice would wait on itself.
    for (i, (exe, _)) in steps.iter().enumerate() {
        if steps[..i].iter().any(|(e, _)| std::ptr::eq(*e, *exe)) {
            return Err(crate::RuntimeError::Launch(format!(
                "kernel `{}` appears twice in a timed sequence; time it once per sequence (or compile it twice)",
                exe.signature().name
            )));
        }
    }
    let mut guards = vec![];
    let mut packed = vec![];
    for (exe, b) in steps {
        let crate::exec::Module::Cuda(k) = exe.module() else {
            return Err(crate::RuntimeError::Launch(format!(
                "kernel `{}` of a timed sequence is not a CUDA kernel",
                exe.signature().name
            )));
        };
        let (mut scratch, dev) = exe.scratch_slots(k, crate::external::Stream::Runtime);
        let params =
            crate::exec::pack_gpu_params_staged(exe.signature(), b, Some((scratch.slots(), dev)))?;
        guards.push(scratch);
        packed.push(crate::cuda::SequenceStep {
            kernel: k,
            params,
            grid: b.grid,
            threads: exe.signature().threads,
        });
    }
    let samples = crate::cuda::bench_sequence(
        &mut packed,
        cfg.warmup,
        cfg.reps,
        cfg.flush_l2,
        cfg.window_launches(),
    )?;
    drop(guards);
    let device = steps
        .first()
        .map_or_else(|| "none".into(), |(e, _)| e.device().to_string());
    Ok(Timing::from_samples(&samples, cfg.flush_l2, device))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics() {
        let t = Timing::from_samples(&[3.0, 1.0, 2.0, 10.0], true, "cuda:0".into());
        assert_eq!(t.median_ms, 2.5);
        assert_eq!(t.min_ms, 1.0);
        assert_eq!(t.max_ms, 10.0);
        assert_eq!(t.mean_ms, 4.0);
        assert_eq!(t.reps, 4);
        let t = Timing::from_samples(&[2.0, 1.0, 3.0], false, "cpu".into());
        assert_eq!(t.median_ms, 2.0);
        // 2 ms for 2e12 flops is 1 PFLOP/s = 1000 TFLOP/s.
        assert!((t.tflops(2e12) - 1000.0).abs() < 1e-9);
        assert!((t.gbps(2e9) - 1000.0).abs() < 1e-9);
        let s = t.summary(Some(2e12), Some(8e9));
        assert!(s.contains("1.00 PFLOP/s") && s.contains("4.00 TB/s"), "{s}");
    }

    #[test]
    fn rates() {
        assert_eq!(format_rate(3e9, 1.0, "B/s"), "3.00 TB/s");
        assert_eq!(format_rate(5.0, 1000.0, "B/s"), "5.00 B/s");
        assert_eq!(format_rate(1.0, 0.0, "B/s"), "- B/s");
    }
}
