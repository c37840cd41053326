//! [`Team`]: worker threads that wait for the next parallel op by spinning,
//! then yielding, then sleeping.
//!
//! A decode step makes a few hundred parallel ops of 5-100 us each. A pool
//! whose idle workers sleep pays a wake-up (several microseconds per worker,
//! more under load) at every op; here an op starts with one store that the
//! spinning workers see, and ends when the last participant leaves it.
//!
//! An op is a job: a function every participant (the calling thread and
//! each worker that arrives in time) calls once, claiming task indices
//! from a shared counter until none is left. The caller closes the job once
//! it has run out of tasks, and a worker that arrives after that does not
//! enter it: so a worker that the OS has not scheduled never delays an op,
//! and a job never waits for more than the tasks still running.
//!
//! Which thread runs a task never changes what the task computes: the ops
//! give each task its own output, so results do not depend on the thread
//! count or on timing.

use std::any::Any;
use std::cell::{Cell, UnsafeCell};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use std::sync::atomic::Ordering::{Relaxed, SeqCst};

/// How long an idle worker spins before it starts yielding its core, and
/// how long it yields before it sleeps. Between the ops of a step the
/// workers wait well under the first; between steps (sampling, the
/// caller's own work) they may reach the second; an idle session's workers
/// sleep.
const SPIN_FOR: Duration = Duration::from_micros(100);
const YIELD_FOR: Duration = Duration::from_millis(2);

/// What a participant claims task indices from.
pub struct Claims<'a> {
    next: &'a AtomicUsize,
    tasks: usize,
}

impl Claims<'_> {
    /// The next unclaimed task, or `None` once every task is claimed.
    pub fn claim(&self) -> Option<usize> {
        let i = self.next.fetch_add(1, Relaxed);
        (i < self.tasks).then_some(i)
    }
}

/// A published job, type-erased: every participant calls it once.
type Job<'a> = dyn Fn(&Claims<'_>) + Sync + 'a;

/// The state the caller and the workers share.
struct Shared {
    /// Bumped to publish a job (and at shutdown).
    epoch: AtomicU64,
    /// The latest epoch whose job takes no new participant: the job of
    /// `epoch` is open while `closed < epoch`.
    closed: AtomicU64,
    /// Workers inside a job (or about to look at one).
    inflight: AtomicUsize,
    /// The open job's next unclaimed task.
    next: AtomicUsize,
    /// The open job: written only while no worker can read it (before its
    /// epoch is published, after the previous job closed with no worker
    /// inside), read only by workers that entered it.
    job: UnsafeCell<Option<(*const Job<'static>, usize)>>,
    /// The first panic of a worker in the current job.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    shutdown: AtomicBool,
    /// Sleeping workers, and what wakes them.
    sleepers: AtomicUsize,
    sleep: Mutex<()>,
    wake: Condvar,
}

// SAFETY: every field but `job` is Sync. `job` is written by the one thread
// that holds `Team::dispatch` (the caller), only while the protocol above
// keeps every worker out of it, and read by workers only between their
// entry (checked against `closed` after announcing themselves in
// `inflight`) and their exit, during which the caller waits for them.
unsafe impl Sync for Shared {}
// SAFETY: the raw pointer in `job` is only a borrow that the caller keeps
// alive for as long as any worker may use it; the rest is Send.
unsafe impl Send for Shared {}

thread_local! {
    /// Set on the workers, and on a caller while it runs its part of a job:
    /// an op started from inside a task runs on that thread alone.
    static IN_JOB: Cell<bool> = const { Cell::new(false) };
}

/// `n - 1` worker threads that, with the calling thread, run parallel ops.
pub struct Team {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// One caller at a time publishes a job.
    dispatch: Mutex<()>,
}

impl Team {
    /// A team of `n` threads (the caller and `n - 1` workers).
    pub fn new(n: usize) -> std::io::Result<Team> {
        let shared = Arc::new(Shared {
            epoch: AtomicU64::new(0),
            closed: AtomicU64::new(0),
            inflight: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            job: UnsafeCell::new(None),
            panic: Mutex::new(None),
            shutdown: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            sleep: Mutex::new(()),
            wake: Condvar::new(),
        });
        let mut team = Team {
            shared,
            workers: Vec::new(),
            dispatch: Mutex::new(()),
        };
        for i in 1..n.max(1) {
            let shared = Arc::clone(&team.shared);
            let h = std::thread::Builder::new()
                .name(format!("sharpi-cpu-{i}"))
                .spawn(move || worker(&shared))?;
            // On an error `team` drops here and stops the workers made so far.
            team.workers.push(h);
        }
        Ok(team)
    }

    /// Threads that run a job: the caller and the workers.
    pub fn count(&self) -> usize {
        self.workers.len() + 1
    }

    /// Calls `f` once on each participant of a job of `tasks` tasks: the
    /// calling thread and the workers that arrive while tasks are left.
    /// Each claims tasks from its [`Claims`] until it gets `None`. Returns
    /// when every task has finished; a panic in a task is raised here,
    /// after the other participants have left. Started from inside a task
    /// (or with one task, or no worker) the job runs on the calling thread.
    pub fn run(&self, tasks: usize, f: &(dyn Fn(&Claims<'_>) + Sync)) {
        if tasks == 0 {
            return;
        }
        if tasks == 1 || self.workers.is_empty() || IN_JOB.with(Cell::get) {
            let next = AtomicUsize::new(0);
            f(&Claims { next: &next, tasks });
            return;
        }
        let _one = self.dispatch.lock().unwrap_or_else(PoisonError::into_inner);
        let s = &*self.shared;

        // Publish: no worker is inside a job (the previous one closed and
        // waited for `inflight` to reach 0), so `job` is ours to write.
        // SAFETY: the lifetime is erased only for the time of this call:
        // the pointer is cleared below before `f` goes out of scope, and
        // every worker that read it has left the job by then.
        let job: *const Job<'static> = unsafe { std::mem::transmute(f as *const Job<'_>) };
        // SAFETY: see `Shared`: no worker reads `job` now.
        unsafe { *s.job.get() = Some((job, tasks)) };
        s.next.store(0, Relaxed);
        let epoch = s.epoch.fetch_add(1, SeqCst) + 1;
        if s.sleepers.load(SeqCst) > 0 {
            let _g = s.sleep.lock().unwrap_or_else(PoisonError::into_inner);
            s.wake.notify_all();
        }

        // The caller's part.
        IN_JOB.with(|j| j.set(true));
        let mine = panic::catch_unwind(AssertUnwindSafe(|| {
            f(&Claims {
                next: &s.next,
                tasks,
            })
        }));
        IN_JOB.with(|j| j.set(false));

        // Close the job, then wait for the workers inside it.
        s.closed.store(epoch, SeqCst);
        let start = Instant::now();
        while s.inflight.load(SeqCst) != 0 {
            pause(start);
        }
        // SAFETY: no worker is inside the job any more.
        unsafe { *s.job.get() = None };

        let theirs = s
            .panic
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Err(p) = mine {
            panic::resume_unwind(p);
        }
        if let Some(p) = theirs {
            panic::resume_unwind(p);
        }
    }
}

impl Drop for Team {
    fn drop(&mut self) {
        let s = &*self.shared;
        s.shutdown.store(true, SeqCst);
        s.epoch.fetch_add(1, SeqCst);
        {
            let _g = s.sleep.lock().unwrap_or_else(PoisonError::into_inner);
            s.wake.notify_all();
        }
        for h in self.workers.drain(..) {
            // A worker's panic was caught inside its job; a join error here
            // could only come from the loop itself, and there is no one to
            // report it to while dropping.
            let _ = h.join();
        }
    }
}

/// A spin-wait step: a pause instruction at first, the core given up after
/// [`SPIN_FOR`].
fn pause(start: Instant) {
    if start.elapsed() < SPIN_FOR {
        for _ in 0..32 {
            std::hint::spin_loop();
        }
    } else {
        std::thread::yield_now();
    }
}

fn worker(s: &Shared) {
    IN_JOB.with(|j| j.set(true));
    let mut seen = 0u64;
    loop {
        seen = wait_for_work(s, seen);
        if s.shutdown.load(Ordering::Acquire) {
            return;
        }
        #[cfg(test)]
        tests::pause_before_entry();
        // Announce, then look: either the caller sees us in `inflight`
        // and waits, or we see the job closed and stay out.
        s.inflight.fetch_add(1, SeqCst);
        let epoch = s.epoch.load(SeqCst);
        if s.closed.load(SeqCst) < epoch {
            // SAFETY: the job of `epoch` is open and we are counted in
            // `inflight`, so the caller keeps `job` and what it points to
            // as they are until we leave.
            if let Some((job, tasks)) = unsafe { *s.job.get() } {
                // SAFETY: as above: the closure outlives our use of it.
                let f = unsafe { &*job };
                let r = panic::catch_unwind(AssertUnwindSafe(|| {
                    f(&Claims {
                        next: &s.next,
                        tasks,
                    })
                }));
                if let Err(p) = r {
                    let mut slot = s.panic.lock().unwrap_or_else(PoisonError::into_inner);
                    slot.get_or_insert(p);
                }
            }
        }
        seen = seen.max(epoch);
        s.inflight.fetch_sub(1, SeqCst);
    }
}

/// Waits until the epoch moves past `seen` or the team shuts down; returns
/// the epoch it saw. (Shutdown is checked on its own: a worker may have
/// taken the epoch bump of `Drop` for a job's, in the body of its loop.)
fn wait_for_work(s: &Shared, seen: u64) -> u64 {
    let start = Instant::now();
    loop {
        let e = s.epoch.load(SeqCst);
        if e != seen || s.shutdown.load(SeqCst) {
            return e;
        }
        if start.elapsed() < YIELD_FOR {
            pause(start);
        } else {
            let mut g = s.sleep.lock().unwrap_or_else(PoisonError::into_inner);
            s.sleepers.fetch_add(1, SeqCst);
            while s.epoch.load(SeqCst) == seen && !s.shutdown.load(SeqCst) {
                g = s.wake.wait(g).unwrap_or_else(PoisonError::into_inner);
            }
            s.sleepers.fetch_sub(1, SeqCst);
            drop(g);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Microseconds a worker waits between seeing a job and announcing
    /// itself (0: none), to open the window a preempted worker has.
    static PAUSE_US: AtomicU64 = AtomicU64::new(0);

    pub(super) fn pause_before_entry() {
        let us = PAUSE_US.load(Relaxed);
        if us > 0 {
            std::thread::sleep(Duration::from_micros(us));
        }
    }

    /// A worker held up between seeing a job and entering it, while the
    /// caller runs every task, returns, and drops the team: the worker
    /// sees the job closed or the team shutting down, and the drop
    /// returns. (An earlier version took the drop's epoch bump for a job
    /// in this window and slept for ever, hanging the drop.)
    #[test]
    fn a_late_worker_does_not_hang_the_drop() {
        PAUSE_US.store(3000, Relaxed);
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for _ in 0..20 {
                let team = Team::new(3).unwrap();
                let hits = AtomicUsize::new(0);
                team.run(2, &|c| {
                    while c.claim().is_some() {
                        hits.fetch_add(1, Relaxed);
                    }
                });
                assert_eq!(hits.load(Relaxed), 2);
                drop(team);
            }
            done.send(()).unwrap();
        });
        let r = finished.recv_timeout(Duration::from_secs(20));
        PAUSE_US.store(0, Relaxed);
        assert!(r.is_ok(), "dropping a team hung");
    }

    /// Every task of every job runs exactly once, for jobs of 1..40 tasks
    /// on teams of 1..5 threads, many jobs in a row (the workers spin,
    /// yield and sleep between them).
    #[test]
    fn every_task_runs_once() {
        for n in 1..=5 {
            let team = Team::new(n).unwrap();
            assert_eq!(team.count(), n);
            for round in 0..400 {
                let tasks = round % 40;
                let hits: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
                team.run(tasks, &|c| {
                    while let Some(i) = c.claim() {
                        hits[i].fetch_add(1, Relaxed);
                    }
                });
                assert!(
                    hits.iter().all(|h| h.load(Relaxed) == 1),
                    "n {n} round {round}"
                );
                if round % 100 == 99 {
                    // Long enough for the workers to fall asleep.
                    std::thread::sleep(YIELD_FOR * 2);
                }
            }
        }
    }

    /// Jobs run on several threads when there are several.
    #[test]
    fn workers_take_part() {
        let team = Team::new(3).unwrap();
        let ids = Mutex::new(std::collections::HashSet::new());
        for _ in 0..200 {
            team.run(64, &|c| {
                while c.claim().is_some() {
                    ids.lock().unwrap().insert(std::thread::current().id());
                    std::thread::sleep(Duration::from_micros(50));
                }
            });
        }
        assert!(ids.into_inner().unwrap().len() > 1);
    }

    /// A job started from inside a task runs on that thread, whole.
    #[test]
    fn nested_jobs_run_inline() {
        let team = Team::new(4).unwrap();
        let total = AtomicUsize::new(0);
        team.run(8, &|c| {
            while c.claim().is_some() {
                let me = std::thread::current().id();
                team.run(5, &|inner| {
                    while inner.claim().is_some() {
                        assert_eq!(std::thread::current().id(), me);
                        total.fetch_add(1, Relaxed);
                    }
                });
            }
        });
        assert_eq!(total.load(Relaxed), 40);
    }

    /// A panic in a task reaches the caller, and the team still works.
    #[test]
    fn a_panic_reaches_the_caller_and_the_team_goes_on() {
        let team = Team::new(3).unwrap();
        for bad in [0, 7, 15] {
            let r = panic::catch_unwind(AssertUnwindSafe(|| {
                team.run(16, &|c| {
                    while let Some(i) = c.claim() {
                        assert_ne!(i, bad, "task {i} fails");
                    }
                })
            }));
            assert!(r.is_err());
            let done = AtomicUsize::new(0);
            team.run(16, &|c| {
                while c.claim().is_some() {
                    done.fetch_add(1, Relaxed);
                }
            });
            assert_eq!(done.load(Relaxed), 16);
        }
    }

    /// Two threads sharing one team take turns: every task of both runs.
    #[test]
    fn two_callers_share_a_team() {
        let team = Team::new(3).unwrap();
        let total = AtomicUsize::new(0);
        std::thread::scope(|sc| {
            for _ in 0..2 {
                sc.spawn(|| {
                    for _ in 0..500 {
                        team.run(9, &|c| {
                            while c.claim().is_some() {
                                total.fetch_add(1, Relaxed);
                            }
                        });
                    }
                });
            }
        });
        assert_eq!(total.load(Relaxed), 2 * 500 * 9);
    }
}
