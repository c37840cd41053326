//! [`Threads`]: the worker threads the CPU ops run on, and the kernel level
//! they use. Shared by whatever runs host work (the CPU backend, the expert
//! cache's host products), so that [`crate::ops`] names no backend.

use crate::simd::SimdLevel;

/// Why a pool could not be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ThreadsError {
    #[error("this CPU cannot run the {0} kernels")]
    SimdUnsupported(SimdLevel),
    #[error("cannot start {threads} worker threads: {reason}")]
    ThreadPool { threads: usize, reason: String },
}

/// A pool of worker threads, sized once by the caller (the `-t` option),
/// and the SIMD level of the kernels the ops run (the best this CPU has,
/// unless chosen). Every op takes one; results do not depend on its size.
pub struct Threads {
    pool: rayon::ThreadPool,
    simd: SimdLevel,
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
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(n.max(1))
            .thread_name(|i| format!("sharpi-cpu-{i}"))
            .build()
            .map_err(|e| ThreadsError::ThreadPool {
                threads: n,
                reason: e.to_string(),
            })?;
        Ok(Threads { pool, simd })
    }

    pub fn count(&self) -> usize {
        self.pool.current_num_threads()
    }

    pub fn simd(&self) -> SimdLevel {
        self.simd
    }

    /// Runs `f` inside the pool: rayon's parallel iterators in `f` use these
    /// threads.
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.pool.install(f)
    }
}
