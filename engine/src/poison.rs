//! Sentinel poisoning of fresh activation buffers, in test builds.
//!
//! With the cargo feature `poison` (which `fault-injection`, the build of
//! CI and `harness mutants`, turns on), every activation buffer a backend
//! allocates (the scratch of each device, the hidden-state buffers the
//! hand-off writes into, the host staging it goes through) starts filled
//! with a quiet NaN instead of zeros. A kernel or a hand-off that reads
//! what nothing wrote then shows NaN in the next tap, where zeros, or the
//! values an earlier pass left, could pass for right. Correct code never
//! reads a fresh buffer before writing it, so the poison changes no
//! result. KV caches stay zeroed (the attention kernels read only the cells
//! written so far; the KV tests check the rest).
//!
//! Without the feature, [`fill`] is a constant 0.0 and nothing else of
//! this module exists. With it, [`Unpoisoned`] turns the poison off for
//! the process while it lives: `harness mutants --no-poison` uses it to
//! show what the poison catches that zeros would not (nothing reads the
//! environment).

/// The quiet NaN fresh buffers hold (bits `0x7fc0_0000`).
#[cfg(feature = "poison")]
pub const POISON: f32 = f32::from_bits(0x7fc0_0000);

#[cfg(feature = "poison")]
mod imp {
    use std::sync::atomic::{AtomicBool, Ordering};

    static OFF: AtomicBool = AtomicBool::new(false);

    pub fn on() -> bool {
        !OFF.load(Ordering::Relaxed)
    }

    pub fn set_off(off: bool) {
        OFF.store(off, Ordering::Relaxed);
    }
}

/// What a fresh activation buffer is filled with: [`POISON`] in a build
/// with the feature `poison` (unless [`Unpoisoned`] lives), else 0.0.
#[cfg(feature = "poison")]
pub fn fill() -> f32 {
    if imp::on() {
        POISON
    } else {
        0.0
    }
}

/// What a fresh activation buffer is filled with: 0.0 (no feature `poison`).
#[cfg(not(feature = "poison"))]
#[inline(always)]
pub const fn fill() -> f32 {
    0.0
}

/// Fresh buffers zeroed, not poisoned, while this lives (process-wide).
#[cfg(feature = "poison")]
pub struct Unpoisoned(());

#[cfg(feature = "poison")]
impl Unpoisoned {
    pub fn new() -> Unpoisoned {
        imp::set_off(true);
        Unpoisoned(())
    }
}

#[cfg(feature = "poison")]
impl Default for Unpoisoned {
    fn default() -> Unpoisoned {
        Unpoisoned::new()
    }
}

#[cfg(feature = "poison")]
impl Drop for Unpoisoned {
    fn drop(&mut self) {
        imp::set_off(false);
    }
}

#[cfg(all(test, feature = "poison"))]
mod tests {
    use super::*;

    #[test]
    fn fresh_buffers_are_poisoned_unless_turned_off() {
        assert!(fill().is_nan());
        assert_eq!(fill().to_bits(), 0x7fc0_0000);
        {
            let _off = Unpoisoned::new();
            assert_eq!(fill(), 0.0);
        }
        assert!(fill().is_nan());
    }
}
