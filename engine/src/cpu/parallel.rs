//! Splitting an op's output over the threads installed around it
//! ([`Threads::install`]).
//!
//! Work is split by output chunk only, and each chunk is computed the same
//! way whichever thread takes it, so results do not depend on the thread
//! count.

use crate::threads::Threads;

/// Below this much work (roughly, multiply-adds) an op runs on the calling
/// thread: starting the workers costs more than it saves.
const PAR_MIN_WORK: usize = 1 << 15;

/// Calls `f(i, chunk)` for each `chunk`-element piece of `data` (the last
/// may be shorter), in parallel when `work` is large enough and threads are
/// installed.
pub(crate) fn for_chunks<T, F>(data: &mut [T], chunk: usize, work: usize, f: F)
where
    T: Send,
    F: Fn(usize, &mut [T]) + Send + Sync,
{
    for_chunks_init(data, chunk, work, || (), |_, i, c| f(i, c));
}

/// As [`for_chunks`], with per-thread state made by `init` (a scratch row:
/// one per thread that takes a chunk, not one per chunk).
pub(crate) fn for_chunks_init<T, S, I, F>(data: &mut [T], chunk: usize, work: usize, init: I, f: F)
where
    T: Send,
    I: Fn() -> S + Send + Sync,
    F: Fn(&mut S, usize, &mut [T]) + Send + Sync,
{
    let chunk = chunk.max(1);
    let serial = |data: &mut [T]| {
        let mut s = init();
        data.chunks_mut(chunk)
            .enumerate()
            .for_each(|(i, c)| f(&mut s, i, c));
    };
    if work < PAR_MIN_WORK {
        return serial(data);
    }
    Threads::current(|threads| match threads {
        None => serial(data),
        Some(threads) => threads.for_chunks_init(data, chunk, &init, &f),
    })
}
