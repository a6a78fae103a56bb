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
