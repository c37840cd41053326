//! What the hand-timed benches share: the timing rule and the common
//! flags (`--quick`, `--threads 1,2`).

use std::time::{Duration, Instant};

use engine::threads::Threads;

/// Seconds per call of `f(i)` over at least `budget`: the fastest call.
/// These machines are shared (other builds run beside the benchmark), so
/// the median measures the neighbours as much as the code; the fastest of
/// many calls is the closest to an undisturbed one.
pub fn time(budget: Duration, mut f: impl FnMut(usize)) -> f64 {
    for i in 0..3 {
        f(i);
    }
    let mut best = f64::MAX;
    let start = Instant::now();
    let mut i = 0;
    while start.elapsed() < budget || i < 5 {
        let t = Instant::now();
        f(i);
        best = best.min(t.elapsed().as_secs_f64());
        i += 1;
    }
    best
}

/// [`time`] with the threads installed, as a model's step runs
/// (`Threads::install` around a whole step): the ops that find their
/// threads that way (attention, norms) split their work over them.
pub fn in_pool(pool: &Threads, budget: Duration, f: impl FnMut(usize) + Send) -> f64 {
    pool.install(|| time(budget, f))
}

/// The command line's `--quick` (a short budget per measurement) and
/// `--threads` list (default 1,2).
pub struct Flags {
    /// The whole command line, for a bench's own flags (not every bench
    /// has some).
    #[allow(dead_code)]
    pub args: Vec<String>,
    pub budget: Duration,
    pub threads: Vec<usize>,
}

impl Flags {
    pub fn parse() -> Flags {
        let args: Vec<String> = std::env::args().collect();
        let quick = args.iter().any(|a| a == "--quick");
        let threads = args
            .iter()
            .position(|a| a == "--threads")
            .and_then(|i| args.get(i + 1))
            .map(|v| {
                v.split(',')
                    .map(|n| n.parse().expect("--threads 1,2"))
                    .collect()
            })
            .unwrap_or(vec![1, 2]);
        let budget = Duration::from_millis(if quick { 100 } else { 400 });
        Flags {
            args,
            budget,
            threads,
        }
    }
}
