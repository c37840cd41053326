//! [`Threads`]: the worker threads the CPU ops run on, and the kernel level
//! they use. A CPU device owns one (shared with a sibling device on the
//! same host, [`crate::ops::Ops::host_sibling`]); the op interface sees it
//! only as its [`crate::ops::Workers`].

use std::cell::Cell;

use crate::simd::SimdLevel;

mod team;

pub use team::Claims;
use team::Team;

/// Why a pool could not be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ThreadsError {
    #[error("this CPU cannot run the {0} kernels")]
    SimdUnsupported(SimdLevel),
    #[error("cannot start {threads} worker threads: {reason}")]
    ThreadPool { threads: usize, reason: String },
}

/// A team of worker threads, sized once by the caller (the `-t` option),
/// and the SIMD level of the kernels the ops run (the best this CPU has,
/// unless chosen). Every op takes one; results do not depend on its size.
///
/// The workers wait for the next op spinning (see [`team`]), so an op
/// costs no wake-up: a decode step's few hundred ops each start with a
/// store and end when their last task does.
pub struct Threads {
    team: Team,
    simd: SimdLevel,
}

thread_local! {
    /// The team that [`Threads::install`] made current on this thread.
    static CURRENT: Cell<*const Threads> = const { Cell::new(std::ptr::null()) };
}

impl std::fmt::Debug for Threads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Threads")
            .field("count", &self.count())
            .field("simd", &self.simd)
            .finish()
    }
}

impl Threads {
    /// `n` worker threads (at least 1) running the best kernels this CPU has.
    pub fn new(n: usize) -> Result<Threads, ThreadsError> {
        Threads::with_simd(n, SimdLevel::detected())
    }

    /// `n` worker threads running the kernels of `simd`, refused when this
    /// CPU cannot run them.
    pub fn with_simd(n: usize, simd: SimdLevel) -> Result<Threads, ThreadsError> {
        if !simd.is_supported() {
            return Err(ThreadsError::SimdUnsupported(simd));
        }
        let team = Team::new(n).map_err(|e| ThreadsError::ThreadPool {
            threads: n,
            reason: e.to_string(),
        })?;
        Ok(Threads { team, simd })
    }

    pub fn count(&self) -> usize {
        self.team.count()
    }

    pub fn simd(&self) -> SimdLevel {
        self.simd
    }

    /// Runs `f` on the calling thread with these threads current: the ops
    /// in `f` that split their work without being handed a pool
    /// ([`Threads::current`]) split it over these.
    pub fn install<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Restore(*const Threads);
        impl Drop for Restore {
            fn drop(&mut self) {
                CURRENT.with(|c| c.set(self.0));
            }
        }
        let _restore = Restore(CURRENT.with(|c| c.replace(self)));
        f()
    }

    /// Calls `f` for each of `tasks` task indices, each exactly once,
    /// spread over the threads; returns when all are done. Called from
    /// inside a task, the tasks run on the calling thread.
    pub fn run(&self, tasks: usize, f: impl Fn(usize) + Sync) {
        self.team.run(tasks, &|c: &Claims<'_>| {
            while let Some(i) = c.claim() {
                f(i);
            }
        });
    }

    /// As [`Threads::run`], with state made by `init` once per thread that
    /// takes a task (a scratch row), not once per task.
    pub fn run_init<S>(
        &self,
        tasks: usize,
        init: impl Fn() -> S + Sync,
        f: impl Fn(&mut S, usize) + Sync,
    ) {
        self.team.run(tasks, &|c: &Claims<'_>| {
            let mut state = None;
            while let Some(i) = c.claim() {
                f(state.get_or_insert_with(&init), i);
            }
        });
    }

    /// Calls `f(i, piece)` for each `chunk`-element piece `i` of `data` (the
    /// last may be shorter), spread over the threads.
    pub fn for_chunks<T: Send>(
        &self,
        data: &mut [T],
        chunk: usize,
        f: impl Fn(usize, &mut [T]) + Sync,
    ) {
        self.for_chunks_init(data, chunk, || (), |_, i, c| f(i, c));
    }

    /// As [`Threads::for_chunks`], with state made by `init` once per thread
    /// that takes a piece.
    pub fn for_chunks_init<T: Send, S>(
        &self,
        data: &mut [T],
        chunk: usize,
        init: impl Fn() -> S + Sync,
        f: impl Fn(&mut S, usize, &mut [T]) + Sync,
    ) {
        let chunk = chunk.max(1);
        let len = data.len();
        let base = Pieces(data.as_mut_ptr());
        let base = &base;
        self.run_init(len.div_ceil(chunk), init, |s, i| {
            let start = i * chunk;
            // SAFETY: `data` is borrowed mutably for this whole call; task
            // `i < len.div_ceil(chunk)` gets elements `start .. start + n`,
            // inside `data`, and each task index runs once, so no two
            // tasks see the same element.
            let c = unsafe {
                std::slice::from_raw_parts_mut(base.0.add(start), chunk.min(len - start))
            };
            f(s, i, c)
        });
    }

    /// As [`Threads::for_chunks_init`] for `data` of `rows x cols` pieces
    /// of `chunk` elements (piece `i` at row `i / cols`, column `i % cols`),
    /// taken column by column: the tasks that run together (and one after
    /// the other on a thread) share a column. `f` gets the piece's index
    /// `i`.
    ///
    /// # Panics
    /// When `data` is not `rows · cols` whole pieces for any `rows`.
    pub fn for_chunks_init_by_column<T: Send, S>(
        &self,
        data: &mut [T],
        chunk: usize,
        cols: usize,
        init: impl Fn() -> S + Sync,
        f: impl Fn(&mut S, usize, &mut [T]) + Sync,
    ) {
        let pieces = whole_pieces(data.len(), chunk, cols);
        let rows = pieces / cols.max(1);
        let base = Pieces(data.as_mut_ptr());
        let base = &base;
        self.run_init(pieces, init, |s, k| {
            // Task k is piece (k % rows, k / rows): a bijection of 0..pieces.
            let i = (k % rows) * cols + k / rows;
            // SAFETY: `data` is borrowed mutably for this whole call; piece
            // `i < pieces` is elements `i · chunk .. (i + 1) · chunk`, inside
            // `data` (checked by `whole_pieces`), and each task index maps
            // to a different piece and runs once, so no two tasks see the
            // same element.
            let c = unsafe { std::slice::from_raw_parts_mut(base.0.add(i * chunk), chunk) };
            f(s, i, c)
        });
    }

    /// Calls `f` with the threads that [`Threads::install`] made current on
    /// this thread, if any.
    pub fn current<R>(f: impl FnOnce(Option<&Threads>) -> R) -> R {
        let p = CURRENT.with(Cell::get);
        // SAFETY: `CURRENT` holds a pointer only while the `install` call
        // that set it runs on this thread, and that call borrows the
        // `Threads` for its whole length; it is reset when it returns or
        // unwinds.
        f(unsafe { p.as_ref() })
    }
}

/// The number of `chunk`-element pieces of a slice of `len` elements that
/// [`Threads::for_chunks_init_by_column`] splits into rows of `cols`.
///
/// # Panics
/// When they are not whole pieces filling whole rows.
pub(crate) fn whole_pieces(len: usize, chunk: usize, cols: usize) -> usize {
    assert!(
        chunk > 0 && cols > 0 && len.is_multiple_of(chunk * cols),
        "{len} elements are not rows of {cols} pieces of {chunk}"
    );
    len / chunk
}

/// The start of the slice [`Threads::for_chunks_init`] splits.
struct Pieces<T>(*mut T);
// SAFETY: shared between the tasks only to make disjoint subslices of a
// slice of `Send` elements (see `for_chunks_init`).
unsafe impl<T: Send> Sync for Pieces<T> {}
