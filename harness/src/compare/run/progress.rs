//! `[k/N] ... ETA` lines on stderr, one per item done: N items of this run
//! (its shard's), the time left estimated from the items' measured costs
//! scaled by how fast this run has gone so far.

use std::collections::HashMap;
use std::time::Instant;

use crate::compare::plan::matrix::Item;

pub(super) struct Progress {
    /// Estimated seconds of each item of the run.
    cost: HashMap<Item, f64>,
    total: f64,
    /// Estimated seconds of the items done.
    done_cost: f64,
    done: usize,
    start: Instant,
    print: bool,
}

impl Progress {
    pub(super) fn new(items: Vec<(Item, f64)>, print: bool) -> Progress {
        let total = items.iter().map(|(_, c)| c).sum();
        Progress {
            cost: items.into_iter().collect(),
            total,
            done_cost: 0.0,
            done: 0,
            start: Instant::now(),
            print,
        }
    }

    /// Item `it` finished (`passed`, in `seconds`).
    pub(super) fn done(&mut self, it: &Item, passed: bool, seconds: f64) {
        self.done += 1;
        self.done_cost += self.cost.get(it).copied().unwrap_or(0.0);
        if !self.print {
            return;
        }
        let elapsed = self.start.elapsed().as_secs_f64();
        let left = if self.done_cost > 0.0 {
            (self.total - self.done_cost).max(0.0) * elapsed / self.done_cost
        } else {
            0.0
        };
        eprintln!(
            "[{}/{}] {it}: {} in {seconds:.1} s; {:.0} s elapsed, ETA {}",
            self.done,
            self.cost.len(),
            if passed { "pass" } else { "FAIL" },
            elapsed,
            clock(left)
        );
    }
}

/// `1h02m`, `3m05s`, `42s`.
fn clock(seconds: f64) -> String {
    let s = seconds.round() as u64;
    match (s / 3600, (s / 60) % 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s:02}s"),
        (h, m, _) => format!("{h}h{m:02}m"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn clock() {
        assert_eq!(super::clock(42.4), "42s");
        assert_eq!(super::clock(185.0), "3m05s");
        assert_eq!(super::clock(3720.0), "1h02m");
    }
}
