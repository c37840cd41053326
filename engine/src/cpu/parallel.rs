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
        Some(threads) => {
            let len = data.len();
            let base = Chunks(data.as_mut_ptr());
            let base = &base;
            threads.run_init(len.div_ceil(chunk), &init, |s, i| {
                let start = i * chunk;
                let n = chunk.min(len - start);
                // SAFETY: `data` is borrowed mutably for this whole call;
                // task `i` gets elements `i * chunk .. + n`, inside `data`
                // (`i < len.div_ceil(chunk)`), and each task index is run
                // once, so no two tasks see the same element.
                let c = unsafe { std::slice::from_raw_parts_mut(base.0.add(start), n) };
                f(s, i, c)
            });
        }
    })
}

/// The start of the slice [`for_chunks_init`] splits.
struct Chunks<T>(*mut T);
// SAFETY: shared between the tasks only to make disjoint subslices of a
// slice of `Send` elements (see `for_chunks_init`).
unsafe impl<T: Send> Sync for Chunks<T> {}
