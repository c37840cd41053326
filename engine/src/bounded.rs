//! Running untrusted work (a chat template from a model file) within a
//! memory and time budget, and turning "out of budget" into an error
//! instead of an aborted process.
//!
//! Rust aborts when an allocation fails, and an interpreter such as
//! minijinja has operations (string concatenation, list repetition,
//! `with_capacity(n)` from a template's argument) whose size no argument
//! check sees. So the budget is kept by the allocator itself:
//!
//! - [`BudgetAlloc`] is a global allocator over the system's. A thread that
//!   [`run`] started counts the bytes it holds (allocated less freed) and
//!   the bytes it has acquired in all (allocations and reallocation growth,
//!   frees not subtracted: a bound on the copying it can do).
//! - An allocation that would pass either budget is never made: the thread
//!   marks its budget exceeded, stops counting, and parks for good inside
//!   the allocator (allocators may block). The caller, polling, returns
//!   [`Exceeded::Bytes`]. The parked thread keeps what it held (at most
//!   the budget) and the stack it had touched until the process exits: a
//!   cost paid once per render that failed (a [`crate::chat::ChatTemplate`]
//!   whose render ran out of budget refuses to render again), which is why
//!   the chat-template fuzz target runs in libFuzzer's fork mode
//!   (scripts/fuzz).
//! - After the time limit the caller returns [`Exceeded::Time`] and marks
//!   the budget cancelled: the thread parks at its next allocation.
//! - A panic in the thread becomes [`Exceeded::Panicked`], with its message
//!   on one line; the panic hook stays silent for these threads (the
//!   process's hook is wrapped once, for every other thread it does what it
//!   did).
//!
//! A parked thread keeps the locks it held. The work must not take locks
//! that other threads need while it allocates (a chat render touches only
//! its own values); a panicking thread is never parked (see [`charge`]).
//!
//! Binaries declare `#[global_allocator] static A: BudgetAlloc =
//! BudgetAlloc;` (sharpi and harness do). Without it, [`run`] still bounds
//! time and catches panics, but not bytes: [`installed`] tells which.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::sync::{mpsc, Arc, Once};
use std::time::{Duration, Instant};

/// The system allocator with per-thread budgets for [`run`].
pub struct BudgetAlloc;

/// Set by the first allocation through [`BudgetAlloc`].
static INSTALLED: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Whether [`run`] started this thread: its panics are reported as
    /// [`Exceeded::Panicked`], not printed by the panic hook.
    static QUIET: Cell<bool> = const { Cell::new(false) };
    /// The budget of the thread, when [`run`] started it. A const
    /// initialiser without a destructor: reading it never allocates.
    static BUDGET: Cell<*const Budget> = const { Cell::new(std::ptr::null()) };
}

const RUNNING: u8 = 0;
const OVER: u8 = 1;
const CANCELLED: u8 = 2;

struct Budget {
    /// Bytes held: allocated less freed on the thread (frees of what
    /// another thread allocated can take it below zero).
    held: AtomicI64,
    /// Bytes acquired in all.
    acquired: AtomicU64,
    limits: Limits,
    state: AtomicU8,
}

impl Budget {
    /// Counts `bytes` more; false when the thread must stop (over a limit
    /// or cancelled).
    fn take(&self, bytes: usize) -> bool {
        if self.state.load(Ordering::Relaxed) != RUNNING {
            return false;
        }
        let b = bytes as u64;
        let held = self.held.fetch_add(b as i64, Ordering::Relaxed) + b as i64;
        let acquired = self.acquired.fetch_add(b, Ordering::Relaxed) + b;
        if held > self.limits.bytes as i64 || acquired > self.limits.acquired {
            let _ = self
                .state
                .compare_exchange(RUNNING, OVER, Ordering::AcqRel, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Counts `bytes` more without stopping the thread.
    fn count(&self, bytes: usize) {
        self.held.fetch_add(bytes as i64, Ordering::Relaxed);
        self.acquired.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    fn give(&self, bytes: usize) {
        self.held.fetch_sub(bytes as i64, Ordering::Relaxed);
    }
}

/// Parks the calling thread for good, uncounted from here on.
fn stop_here() -> ! {
    BUDGET.with(|b| b.set(std::ptr::null()));
    loop {
        std::thread::park();
    }
}

/// The thread's budget, if [`run`] gave it one.
fn budget() -> Option<&'static Budget> {
    let budget = BUDGET.with(|b| b.get());
    // SAFETY: `run` sets the pointer to an `Arc<Budget>` that the thread's
    // closure owns a clone of, and clears it before that clone is dropped;
    // `stop_here` clears it before parking. So while it is set it points
    // to a live Budget, and this thread only uses the reference for the
    // length of one allocator call.
    (!budget.is_null()).then(|| unsafe { &*budget })
}

/// Counts `bytes` freed on the thread.
fn credit(bytes: usize) {
    if let Some(b) = budget() {
        b.give(bytes);
    }
}

/// Counts `bytes` against the thread's budget, if it has one; parks the
/// thread when the budget is spent. Never while the thread panics: the
/// panic hook holds the stderr lock (or a test's output capture) while it
/// allocates, and a thread parked there would stop every other thread
/// that prints. The panic ends the work anyway.
fn charge(bytes: usize) {
    if let Some(b) = budget() {
        if std::thread::panicking() {
            b.count(bytes);
        } else if !b.take(bytes) {
            stop_here();
        }
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged; the bookkeeping around the calls allocates nothing.
unsafe impl GlobalAlloc for BudgetAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !INSTALLED.load(Ordering::Relaxed) {
            INSTALLED.store(true, Ordering::Relaxed);
        }
        charge(layout.size());
        // SAFETY: the caller's contract for `alloc`, forwarded.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        charge(layout.size());
        // SAFETY: the caller's contract for `alloc_zeroed`, forwarded.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        credit(layout.size());
        // SAFETY: the caller's contract for `dealloc`, forwarded.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size >= layout.size() {
            charge(new_size - layout.size());
        } else {
            credit(layout.size() - new_size);
        }
        // SAFETY: the caller's contract for `realloc`, forwarded.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Whether the process allocates through [`BudgetAlloc`] (so [`run`]
/// bounds bytes as well as time).
pub fn installed() -> bool {
    // Make sure at least one allocation has gone through the allocator.
    drop(std::hint::black_box(Box::new(0u8)));
    INSTALLED.load(Ordering::Relaxed)
}

/// What [`run`] allows the work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes the work may hold at once (allocated less freed).
    pub bytes: u64,
    /// Bytes the work may acquire in all (allocations and reallocation
    /// growth, frees not subtracted): bounds the copying it can do.
    pub acquired: u64,
    /// Wall-clock time.
    pub time: Duration,
    /// Stack of the thread the work runs on.
    pub stack: usize,
}

/// Why [`run`] returned no result.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Exceeded {
    #[error("it needed more than {limit} bytes of memory")]
    Bytes { limit: u64 },
    #[error("it allocated more than {limit} bytes in all")]
    Acquired { limit: u64 },
    #[error("it ran longer than {0:?}")]
    Time(Duration),
    #[error("it panicked: {0}")]
    Panicked(String),
    #[error("its thread could not start: {0}")]
    Spawn(String),
}

/// Wraps the process's panic hook, once, so that it stays silent for the
/// threads [`run`] starts (their panic becomes a one-line error) and does
/// what it did before for every other thread.
fn quiet_panics_of_bounded_threads() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(|q| q.get()) {
                previous(info);
            }
        }));
    });
}

/// How often the caller looks at the budget while it waits.
const POLL: Duration = Duration::from_millis(5);

/// Runs `work` on a new thread within `limits` and returns its result, or
/// why there is none. On [`Exceeded`] the thread is left parked (or, after
/// a time-out, runs on until its next allocation, then parks).
pub fn run<T, F>(name: &str, limits: Limits, work: F) -> Result<T, Exceeded>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let budget = Arc::new(Budget {
        held: AtomicI64::new(0),
        acquired: AtomicU64::new(0),
        limits,
        state: AtomicU8::new(RUNNING),
    });
    quiet_panics_of_bounded_threads();
    let (tx, rx) = mpsc::sync_channel::<std::thread::Result<T>>(1);
    let theirs = Arc::clone(&budget);
    let spawned = std::thread::Builder::new()
        .name(name.to_string())
        .stack_size(limits.stack)
        .spawn(move || {
            QUIET.with(|q| q.set(true));
            BUDGET.with(|b| b.set(Arc::as_ptr(&theirs)));
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
            BUDGET.with(|b| b.set(std::ptr::null()));
            let _ = tx.send(result);
            drop(theirs);
        });
    if let Err(e) = spawned {
        return Err(Exceeded::Spawn(crate::tokenizer::one_line(&e.to_string())));
    }
    let start = Instant::now();
    loop {
        match rx.recv_timeout(POLL) {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(payload)) => return Err(Exceeded::Panicked(panic_text(&*payload))),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(Exceeded::Panicked(
                    "the thread ended without a result".into(),
                ))
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if budget.state.load(Ordering::Acquire) == OVER {
            return Err(
                if budget.held.load(Ordering::Relaxed) > limits.bytes as i64 {
                    Exceeded::Bytes {
                        limit: limits.bytes,
                    }
                } else {
                    Exceeded::Acquired {
                        limit: limits.acquired,
                    }
                },
            );
        }
        if start.elapsed() >= limits.time {
            budget.state.store(CANCELLED, Ordering::Release);
            return Err(Exceeded::Time(limits.time));
        }
    }
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into());
    crate::tokenizer::one_line(&text)
}
