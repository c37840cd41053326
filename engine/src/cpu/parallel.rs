//! Splitting an op's output over the threads installed around it
//! ([`Threads::install`]).
//!
//! Work is split by output chunk only, and each chunk is computed the same
//! way whichever thread takes it, so results do not depend on the thread
//! count.

use crate::threads::{whole_pieces, Threads};

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

/// As [`for_chunks_init`] for `data` of `rows x cols` pieces of `chunk`
/// elements, taken column by column (piece `i` is row `i / cols`, column
/// `i % cols`; `f` gets `i`): consecutive tasks share a column, say the
/// rows of one attention head, which then meet the same cached keys.
///
/// # Panics
/// When `data` is not whole rows of `cols` pieces.
pub(crate) fn for_chunks_init_by_column<T, S, I, F>(
    data: &mut [T],
    chunk: usize,
    cols: usize,
    work: usize,
    init: I,
    f: F,
) where
    T: Send,
    I: Fn() -> S + Send + Sync,
    F: Fn(&mut S, usize, &mut [T]) + Send + Sync,
{
    let pieces = whole_pieces(data.len(), chunk, cols);
    let serial = |data: &mut [T]| {
        let mut s = init();
        let rows = pieces / cols;
        for k in 0..pieces {
            let i = (k % rows) * cols + k / rows;
            f(&mut s, i, &mut data[i * chunk..(i + 1) * chunk]);
        }
    };
    if work < PAR_MIN_WORK {
        return serial(data);
    }
    Threads::current(|threads| match threads {
        None => serial(data),
        Some(threads) => threads.for_chunks_init_by_column(data, chunk, cols, &init, &f),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// Every piece once, with its own index, column by column, on the
    /// calling thread and on a team.
    #[test]
    fn by_column_visits_each_piece_once_column_by_column() {
        let (rows, cols, chunk) = (5, 3, 4);
        let run = |work: usize| {
            let mut data = vec![0usize; rows * cols * chunk];
            let order = Mutex::new(Vec::new());
            for_chunks_init_by_column(
                &mut data,
                chunk,
                cols,
                work,
                || (),
                |_, i, c| {
                    c.fill(i + 1);
                    order.lock().unwrap().push(i);
                },
            );
            let want: Vec<usize> = (0..rows * cols).flat_map(|i| [i + 1; 4]).collect();
            assert_eq!(data, want);
            order.into_inner().unwrap()
        };
        let serial = run(0);
        let by_column: Vec<usize> = (0..cols)
            .flat_map(|c| (0..rows).map(move |r| r * cols + c))
            .collect();
        assert_eq!(serial, by_column);
        let threads = Threads::new(2).expect("two threads");
        let mut seen = threads.install(|| run(usize::MAX));
        seen.sort_unstable();
        assert_eq!(seen, (0..rows * cols).collect::<Vec<_>>());
    }

    #[test]
    #[should_panic(expected = "not rows of 3 pieces")]
    fn by_column_refuses_a_partial_row() {
        let mut data = vec![0u8; 4 * 4];
        for_chunks_init_by_column(&mut data, 4, 3, 0, || (), |_, _, _| {});
    }
}
