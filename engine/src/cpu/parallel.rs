//! Splitting an op's output over the rayon pool it is installed in.
//!
//! Work is split by output chunk only, and each chunk is computed the same
//! way whichever thread takes it, so results do not depend on the thread
//! count.

use rayon::prelude::*;

/// Below this much work (roughly, multiply-adds) an op runs on the calling
/// thread: waking the pool costs more than it saves.
const PAR_MIN_WORK: usize = 1 << 15;

/// Calls `f(i, chunk)` for each `chunk`-element piece of `data` (the last
/// may be shorter), in parallel when `work` is large enough.
pub(crate) fn for_chunks<T, F>(data: &mut [T], chunk: usize, work: usize, f: F)
where
    T: Send,
    F: Fn(usize, &mut [T]) + Send + Sync,
{
    if work < PAR_MIN_WORK {
        data.chunks_mut(chunk)
            .enumerate()
            .for_each(|(i, c)| f(i, c));
    } else {
        data.par_chunks_mut(chunk)
            .enumerate()
            .for_each(|(i, c)| f(i, c));
    }
}

/// As [`for_chunks`], with per-job state made by `init` (a scratch row: one
/// per rayon job split, not one per chunk).
pub(crate) fn for_chunks_init<T, S, I, F>(data: &mut [T], chunk: usize, work: usize, init: I, f: F)
where
    T: Send,
    I: Fn() -> S + Send + Sync,
    F: Fn(&mut S, usize, &mut [T]) + Send + Sync,
{
    if work < PAR_MIN_WORK {
        let mut s = init();
        data.chunks_mut(chunk)
            .enumerate()
            .for_each(|(i, c)| f(&mut s, i, c));
    } else {
        data.par_chunks_mut(chunk)
            .enumerate()
            .for_each_init(init, |s, (i, c)| f(s, i, c));
    }
}
