//! When a recorded command needs a barrier before it: pure bookkeeping of the
//! byte ranges written and read since the last barrier, no Vulkan in sight.
//!
//! A command that reads a range written since the last barrier (read after
//! write), writes a range written since then (write after write) or writes a
//! range read since then (write after read) must wait for the earlier
//! command: the recorder then inserts one global compute/transfer memory
//! barrier, which orders everything before it against everything after, and
//! the tracker starts over. Commands touching disjoint ranges (or only
//! reading the same one) share a barrier-free stretch.

use std::collections::HashMap;
use std::ops::Range;

/// One buffer access of a command: bytes `range` of buffer `buf`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    pub buf: u32,
    pub range: Range<u64>,
    pub write: bool,
}

impl Access {
    /// The binding this access came from (a fusion records the command
    /// again with the same bindings).
    pub(super) fn bind(&self) -> super::Bind {
        super::Bind {
            buf: self.buf,
            bytes: self.range.clone(),
        }
    }
}

/// Ranges touched since the last barrier, per buffer.
#[derive(Default, Debug)]
pub struct HazardTracker {
    written: HashMap<u32, Vec<Range<u64>>>,
    read: HashMap<u32, Vec<Range<u64>>>,
    barriers: usize,
}

fn overlaps(list: Option<&Vec<Range<u64>>>, r: &Range<u64>) -> bool {
    list.is_some_and(|l| l.iter().any(|x| x.start < r.end && r.start < x.end))
}

impl HazardTracker {
    /// Whether a command with `accesses` must wait for what was recorded
    /// since the last barrier.
    pub fn needs_barrier(&self, accesses: &[Access]) -> bool {
        accesses.iter().any(|a| {
            overlaps(self.written.get(&a.buf), &a.range)
                || (a.write && overlaps(self.read.get(&a.buf), &a.range))
        })
    }

    /// Notes a command's accesses; returns whether a barrier goes before it
    /// (and if so, forgets everything recorded before that barrier).
    pub fn record(&mut self, accesses: &[Access]) -> bool {
        let barrier = self.needs_barrier(accesses);
        if barrier {
            self.reset();
            self.barriers += 1;
        }
        for a in accesses.iter().filter(|a| a.range.start < a.range.end) {
            let map = if a.write {
                &mut self.written
            } else {
                &mut self.read
            };
            map.entry(a.buf).or_default().push(a.range.clone());
        }
        barrier
    }

    /// Forgets every access (after an explicit barrier or a submission).
    pub fn reset(&mut self) {
        self.written.clear();
        self.read.clear();
    }

    /// Barriers [`HazardTracker::record`] asked for so far.
    pub fn barriers(&self) -> usize {
        self.barriers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(buf: u32, range: Range<u64>) -> Access {
        Access {
            buf,
            range,
            write: false,
        }
    }
    fn w(buf: u32, range: Range<u64>) -> Access {
        Access {
            buf,
            range,
            write: true,
        }
    }

    #[test]
    fn read_after_write_needs_a_barrier() {
        let mut t = HazardTracker::default();
        assert!(!t.record(&[r(0, 0..64), w(1, 0..64)]));
        assert!(t.record(&[r(1, 0..4), w(2, 0..64)]));
        assert_eq!(t.barriers(), 1);
    }

    #[test]
    fn disjoint_ranges_and_shared_reads_need_none() {
        let mut t = HazardTracker::default();
        assert!(!t.record(&[r(0, 0..64), w(1, 0..64)]));
        // Another slice of the same buffer, and a second reader of buffer 0.
        assert!(!t.record(&[r(0, 0..64), w(1, 64..128)]));
        // Adjacent, not overlapping.
        assert!(!t.record(&[r(1, 128..256), w(3, 0..4)]));
        assert_eq!(t.barriers(), 0);
    }

    #[test]
    fn write_after_read_and_write_after_write_need_one() {
        let mut t = HazardTracker::default();
        t.record(&[r(0, 0..64), w(1, 0..64)]);
        // Overwrites what the first command is still reading.
        assert!(t.record(&[w(0, 32..40)]));
        // Overwrites what the previous command wrote.
        assert!(t.record(&[w(0, 34..36)]));
        assert_eq!(t.barriers(), 2);
    }

    #[test]
    fn in_place_ops_chain_with_barriers() {
        // x = f(x) three times: each reads and writes what the previous wrote.
        let mut t = HazardTracker::default();
        let step = [r(5, 0..100), w(5, 0..100)];
        assert!(!t.record(&step));
        assert!(t.record(&step));
        assert!(t.record(&step));
        assert_eq!(t.barriers(), 2);
    }

    #[test]
    fn a_barrier_forgets_earlier_accesses() {
        let mut t = HazardTracker::default();
        t.record(&[w(1, 0..64)]);
        assert!(t.record(&[r(1, 0..64), w(2, 0..64)]));
        // Buffer 1's write is behind the barrier now; only buffer 2's counts.
        assert!(!t.record(&[r(1, 0..64), w(3, 0..64)]));
        assert!(t.record(&[r(2, 0..1)]));
    }

    #[test]
    fn empty_ranges_never_conflict() {
        let mut t = HazardTracker::default();
        t.record(&[w(1, 10..10)]);
        assert!(!t.needs_barrier(&[r(1, 0..64)]));
    }
}
