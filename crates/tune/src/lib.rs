//! The autotuner: given candidate configurations of a kernel, compile them in parallel, check
//! each against a reference on its first run, time the survivors on the device, and remember the
//! winner on disk per (kernel, symbolic-shape values, device, crate version).
//!
//! It knows kernels only through [`Candidate`] (prepare = the thread-safe, expensive part of
//! compiling; build = loading), so it sits below the DSL. `TILELANG_AUTOTUNE=0` turns tuning off:
//! the first candidate that builds is used.

use std::fmt;
use std::path::PathBuf;
use std::sync::Mutex;

use tl_runtime::{profile, Arg, Cache, Executable};

/// A configuration space: an explicit list, or a product of ranges, filtered by a validity
/// predicate.
#[derive(Clone, Debug)]
pub struct Space<C> {
    configs: Vec<C>,
}

impl<C: Clone> Space<C> {
    pub fn list(configs: Vec<C>) -> Space<C> {
        Space { configs }
    }
    /// Every combination of `a` and `b`, made into a config by `f`.
    pub fn product2<A, B>(a: &[A], b: &[B], f: impl Fn(&A, &B) -> C) -> Space<C> {
        Space {
            configs: a
                .iter()
                .flat_map(|x| b.iter().map(|y| f(x, y)).collect::<Vec<_>>())
                .collect(),
        }
    }
    pub fn product3<A, B, D>(a: &[A], b: &[B], d: &[D], f: impl Fn(&A, &B, &D) -> C) -> Space<C> {
        let mut configs = vec![];
        for x in a {
            for y in b {
                for z in d {
                    configs.push(f(x, y, z));
                }
            }
        }
        Space { configs }
    }
    pub fn product4<A, B, D, E>(
        a: &[A],
        b: &[B],
        d: &[D],
        e: &[E],
        f: impl Fn(&A, &B, &D, &E) -> C,
    ) -> Space<C> {
        let mut configs = vec![];
        for x in a {
            for y in b {
                for z in d {
                    for w in e {
                        configs.push(f(x, y, z, w));
                    }
                }
            }
        }
        Space { configs }
    }
    /// Keep the configs `valid` accepts.
    pub fn filter(mut self, valid: impl Fn(&C) -> bool) -> Space<C> {
        self.configs.retain(|c| valid(c));
        self
    }
    pub fn configs(&self) -> &[C] {
        &self.configs
    }
    pub fn len(&self) -> usize {
        self.configs.len()
    }
    pub fn is_empty(&self) -> bool {
        self.configs.is_empty()
    }
}

/// One candidate kernel.
pub trait Candidate: Send + Sync {
    /// A stable name of the configuration (stored as the cached winner).
    fn label(&self) -> String;
    /// The expensive, thread-safe part of compiling (code generation, the native compiler into
    /// the disk cache). Called on worker threads.
    fn prepare(&self) -> Result<(), String>;
    /// Build the executable (a cache hit after `prepare`). Called on the tuning thread.
    fn build(&self) -> Result<Executable, String>;
    /// Whether a built candidate may compete at all (before it is run): a reason to reject it
    /// otherwise, such as register spills.
    fn accept(&self, _exe: &Executable) -> Result<(), String> {
        Ok(())
    }
}

/// What a tuning result is stored under.
#[derive(Clone, Debug)]
pub struct TuneKey {
    pub kernel: String,
    /// The values of the symbolic sizes the tuning ran with (`M=4096 N=4096 K=4096`).
    pub shapes: String,
    /// The device's name (a GPU model or the host CPU).
    pub device: String,
}

impl TuneKey {
    fn hash(&self) -> String {
        Cache::key(&[
            "tune",
            &self.kernel,
            &self.shapes,
            &self.device,
            env!("CARGO_PKG_VERSION"),
        ])
    }
}

#[derive(Clone, Debug)]
pub struct TuneOptions {
    /// Where tuning results live (default: the kernel cache directory).
    pub cache_dir: Option<PathBuf>,
    pub warmup: usize,
    pub reps: usize,
    /// Worker threads for compiling (default: the machine's cores).
    pub threads: Option<usize>,
    /// Show a progress bar while compiling.
    pub progress: bool,
    /// Ignore a cached result and tune again.
    pub force: bool,
}

impl Default for TuneOptions {
    fn default() -> Self {
        TuneOptions {
            cache_dir: None,
            warmup: 5,
            reps: 30,
            threads: None,
            progress: true,
            force: false,
        }
    }
}

/// How one candidate fared.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Median time in milliseconds.
    Timed(f64),
    CompileFailed(String),
    WrongResult(String),
    RunFailed(String),
    /// Built, but not allowed to compete (`Candidate::accept` said why).
    Rejected(String),
    /// Not tried: tuning was off or the winner came from the cache.
    Skipped,
}

#[derive(Clone, Debug)]
pub struct Trial {
    pub label: String,
    pub outcome: Outcome,
}

#[derive(Clone, Debug)]
pub struct TuneResult {
    /// Index of the winner among the candidates.
    pub best: usize,
    pub best_label: String,
    /// Its median time, when it was timed in this call.
    pub best_ms: Option<f64>,
    pub trials: Vec<Trial>,
    pub from_cache: bool,
}

impl fmt::Display for TuneResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for t in &self.trials {
            let o = match &t.outcome {
                Outcome::Timed(ms) => format!("{ms:.4} ms"),
                Outcome::CompileFailed(m) => format!("compile failed: {}", first_line(m)),
                Outcome::WrongResult(m) => format!("wrong result: {}", first_line(m)),
                Outcome::RunFailed(m) => format!("run failed: {}", first_line(m)),
                Outcome::Rejected(m) => format!("rejected: {}", first_line(m)),
                Outcome::Skipped => "skipped".into(),
            };
            writeln!(f, "  {:40} {o}", t.label)?;
        }
        write!(
            f,
            "best: {}{}",
            self.best_label,
            if self.from_cache { " (cached)" } else { "" }
        )
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    #[error("no candidates to tune `{0}`")]
    Empty(String),
    #[error("every candidate of `{kernel}` failed:\n{trials}")]
    AllFailed { kernel: String, trials: String },
}

/// Is tuning turned off (`TILELANG_AUTOTUNE=0`)?
pub fn disabled() -> bool {
    std::env::var("TILELANG_AUTOTUNE").is_ok_and(|v| v == "0" || v.eq_ignore_ascii_case("off"))
}

fn result_path(opts: &TuneOptions, key: &TuneKey) -> PathBuf {
    let cache = match &opts.cache_dir {
        Some(d) => Cache::at(d),
        None => Cache::from_env(),
    };
    cache.path(&key.hash(), "tune")
}

/// Tune: returns the winner's index. `args` are the launch arguments (outputs included);
/// `check` inspects the outputs after a candidate's first run and says what is wrong.
pub fn tune(
    key: &TuneKey,
    candidates: &[Box<dyn Candidate>],
    args: &[Arg],
    check: &dyn Fn() -> Result<(), String>,
    opts: &TuneOptions,
) -> Result<TuneResult, TuneError> {
    if candidates.is_empty() {
        return Err(TuneError::Empty(key.kernel.clone()));
    }
    let labels: Vec<String> = candidates.iter().map(|c| c.label()).collect();
    let skipped = |best: usize, from_cache: bool| TuneResult {
        best,
        best_label: labels[best].clone(),
        best_ms: None,
        trials: labels
            .iter()
            .map(|l| Trial {
                label: l.clone(),
                outcome: Outcome::Skipped,
            })
            .collect(),
        from_cache,
    };
    if disabled() {
        return Ok(skipped(0, false));
    }
    let path = result_path(opts, key);
    if !opts.force {
        if let Ok(saved) = std::fs::read_to_string(&path) {
            if let Some(i) = labels.iter().position(|l| l == saved.trim()) {
                return Ok(skipped(i, true));
            }
        }
    }
    // 1. Compile everything in parallel.
    let threads = opts
        .threads
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        })
        .max(1);
    let bar = if opts.progress {
        let b = indicatif::ProgressBar::new(candidates.len() as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template("compiling {pos}/{len} {bar:30} {elapsed}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b.set_message(key.kernel.clone());
        Some(b)
    } else {
        None
    };
    let next = Mutex::new(0usize);
    let prepared: Vec<Mutex<Option<Result<(), String>>>> =
        candidates.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..threads.min(candidates.len()) {
            s.spawn(|| loop {
                let i = {
                    let mut n = next.lock().unwrap_or_else(|e| e.into_inner());
                    let i = *n;
                    *n += 1;
                    i
                };
                if i >= candidates.len() {
                    break;
                }
                let r = candidates[i].prepare();
                *prepared[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
                if let Some(b) = &bar {
                    b.inc(1);
                }
            });
        }
    });
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    // 2. Build, check and time each in turn.
    let mut trials = vec![];
    let mut best: Option<(usize, f64)> = None;
    for (i, c) in candidates.iter().enumerate() {
        let prep = prepared[i]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .unwrap_or(Ok(()));
        let outcome = match prep.and_then(|_| c.build()) {
            Err(e) => Outcome::CompileFailed(e),
            Ok(exe) => match c.accept(&exe) {
                Err(why) => Outcome::Rejected(why),
                Ok(()) => match exe.run_args(args).and_then(|_| exe.synchronize()) {
                    Err(e) => Outcome::RunFailed(e.to_string()),
                    Ok(()) => match check() {
                        Err(e) => Outcome::WrongResult(e),
                        Ok(()) => match profile::bench(&exe, args, opts.warmup, opts.reps) {
                            Ok(t) => Outcome::Timed(t.median_ms),
                            Err(e) => Outcome::RunFailed(e.to_string()),
                        },
                    },
                },
            },
        };
        if let Outcome::Timed(ms) = outcome {
            if best.is_none_or(|(_, b)| ms < b) {
                best = Some((i, ms));
            }
        }
        trials.push(Trial {
            label: labels[i].clone(),
            outcome,
        });
    }
    let Some((bi, bms)) = best else {
        let r = TuneResult {
            best: 0,
            best_label: String::new(),
            best_ms: None,
            trials,
            from_cache: false,
        };
        return Err(TuneError::AllFailed {
            kernel: key.kernel.clone(),
            trials: r.to_string(),
        });
    };
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    if std::fs::write(&tmp, &labels[bi]).is_ok() {
        let _ = std::fs::rename(&tmp, &path);
    }
    Ok(TuneResult {
        best: bi,
        best_label: labels[bi].clone(),
        best_ms: Some(bms),
        trials,
        from_cache: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spaces() {
        let s =
            Space::product2(&[64, 128], &[2, 3, 4], |a, b| (*a, *b)).filter(|(a, b)| a * b <= 384);
        assert_eq!(
            s.configs(),
            &[(64, 2), (64, 3), (64, 4), (128, 2), (128, 3)]
        );
        let t = Space::product3(&[1, 2], &[3], &[4, 5], |a, b, c| a + b + c);
        assert_eq!(t.len(), 4);
    }
}
