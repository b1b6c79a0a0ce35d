//! Run blocking calls on one dedicated worker thread, each with a timeout.
//!
//! Driver calls (NVML) can hang inside the kernel driver; a hung call cannot be cancelled and its
//! thread cannot be killed. [`Watchdog::call`] hands the closure to a worker thread and waits at
//! most `timeout` for the answer:
//!
//! * the answer came in time → `Ok(value)`;
//! * it did not → [`CallError::TimedOut`] right away. The worker is **abandoned**: it is left to
//!   finish (or hang) on its own, its late answer is dropped, and the next call goes to a fresh
//!   worker thread;
//! * while [`Watchdog::max_hung`] abandoned workers are still stuck, further calls fail fast with
//!   [`CallError::TooManyHung`] instead of spawning more threads. An abandoned worker whose call
//!   eventually returns exits and no longer counts, so the watchdog recovers by itself when the
//!   driver does.
//!
//! Calls are serialised: there is one worker, and one call at a time is in flight on it.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::thread;
use std::time::Duration;

/// Default number of stuck workers after which calls fail fast.
pub const DEFAULT_MAX_HUNG: usize = 4;

/// Why [`Watchdog::call`] returned no value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// The call did not return within the timeout; its worker thread was abandoned.
    #[error("call did not return within {0:?}; its worker thread was abandoned")]
    TimedOut(Duration),
    /// Too many earlier calls are still stuck; no new thread is spawned until one returns.
    #[error(
        "{hung} worker threads are still stuck in earlier calls (limit {limit}): refusing new calls \
         until one of them returns"
    )]
    TooManyHung {
        /// Workers currently stuck.
        hung: usize,
        /// The limit.
        limit: usize,
    },
    /// The closure panicked (the worker survives).
    #[error("call panicked: {0}")]
    Panicked(String),
    /// The operating system refused to start a worker thread.
    #[error("cannot start a worker thread: {0}")]
    Spawn(String),
}

impl CallError {
    /// True when the call hung (timed out now, or refused because earlier calls still hang).
    pub fn is_hang(&self) -> bool {
        matches!(self, CallError::TimedOut(_) | CallError::TooManyHung { .. })
    }
}

type Job = Box<dyn FnOnce() + Send + 'static>;

#[derive(Debug)]
struct Worker {
    jobs: mpsc::Sender<Job>,
    abandoned: Arc<AtomicBool>,
}

/// Runs blocking closures on one dedicated worker thread with a per-call timeout.
#[derive(Debug)]
pub struct Watchdog {
    name: String,
    max_hung: usize,
    worker: Mutex<Option<Worker>>,
    /// Abandoned workers that have not returned yet (shared with them).
    hung: Arc<AtomicUsize>,
    abandoned_total: AtomicU64,
    spawned_total: AtomicU64,
}

impl Watchdog {
    /// A watchdog whose worker threads are named `name-N`; after `max_hung` stuck workers (at
    /// least 1) calls fail fast. The first worker starts on the first call.
    pub fn new(name: impl Into<String>, max_hung: usize) -> Self {
        Watchdog {
            name: name.into(),
            max_hung: max_hung.max(1),
            worker: Mutex::new(None),
            hung: Arc::new(AtomicUsize::new(0)),
            abandoned_total: AtomicU64::new(0),
            spawned_total: AtomicU64::new(0),
        }
    }

    /// The limit of stuck workers.
    pub fn max_hung(&self) -> usize {
        self.max_hung
    }

    /// Abandoned workers still stuck in their call right now.
    pub fn hung_workers(&self) -> usize {
        self.hung.load(Ordering::SeqCst)
    }

    /// Workers abandoned since creation (monotonic, for metrics).
    pub fn abandoned_total(&self) -> u64 {
        self.abandoned_total.load(Ordering::SeqCst)
    }

    /// Worker threads started since creation.
    pub fn spawned_total(&self) -> u64 {
        self.spawned_total.load(Ordering::SeqCst)
    }

    /// Runs `f` on the worker thread and waits at most `timeout` for its value.
    pub fn call<T, F>(&self, timeout: Duration, f: F) -> Result<T, CallError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        // One call at a time: the lock is held until the answer (or the timeout).
        let mut slot = self.worker.lock().unwrap_or_else(PoisonError::into_inner);
        let hung = self.hung_workers();
        if hung >= self.max_hung {
            return Err(CallError::TooManyHung { hung, limit: self.max_hung });
        }

        let (reply_tx, reply_rx) = mpsc::sync_channel::<thread::Result<T>>(1);
        let job: Job = Box::new(move || {
            let result = catch_unwind(AssertUnwindSafe(f));
            // The caller may have given up (timeout): then nobody listens, which is fine.
            let _ = reply_tx.send(result);
        });

        // Hand the job to the current worker; start one when there is none or it has gone.
        let mut pending = Some(job);
        for _ in 0..2 {
            let Some(job) = pending.take() else { break };
            let worker = match slot.take() {
                Some(worker) => worker,
                None => self.spawn_worker()?,
            };
            match worker.jobs.send(job) {
                Ok(()) => *slot = Some(worker),
                // The worker exited (cannot normally happen): retry once on a fresh one.
                Err(mpsc::SendError(job)) => pending = Some(job),
            }
        }
        if pending.is_some() {
            return Err(CallError::Spawn("worker thread exits immediately".into()));
        }

        match reply_rx.recv_timeout(timeout) {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(panic)) => Err(CallError::Panicked(panic_text(panic.as_ref()))),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if let Some(worker) = slot.take() {
                    // Count first, then flag: the worker decrements only when it sees the flag.
                    self.hung.fetch_add(1, Ordering::SeqCst);
                    self.abandoned_total.fetch_add(1, Ordering::SeqCst);
                    worker.abandoned.store(true, Ordering::SeqCst);
                    // Dropping `worker.jobs` makes the worker exit once its call returns.
                }
                Err(CallError::TimedOut(timeout))
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                // The job was dropped without answering: the worker thread died.
                *slot = None;
                Err(CallError::Panicked("worker thread ended during the call".into()))
            }
        }
    }

    fn spawn_worker(&self) -> Result<Worker, CallError> {
        let (jobs_tx, jobs_rx) = mpsc::channel::<Job>();
        let abandoned = Arc::new(AtomicBool::new(false));
        let n = self.spawned_total.fetch_add(1, Ordering::SeqCst) + 1;
        let flag = Arc::clone(&abandoned);
        let hung = Arc::clone(&self.hung);
        thread::Builder::new()
            .name(format!("{}-{n}", self.name))
            .spawn(move || {
                while let Ok(job) = jobs_rx.recv() {
                    job();
                    if flag.load(Ordering::SeqCst) {
                        break;
                    }
                }
                // Abandoned workers were counted as hung; this one has returned.
                if flag.load(Ordering::SeqCst) {
                    hung.fetch_sub(1, Ordering::SeqCst);
                }
            })
            .map_err(|e| CallError::Spawn(e.to_string()))?;
        Ok(Worker { jobs: jobs_tx, abandoned })
    }
}

fn panic_text(panic: &(dyn Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    const SHORT: Duration = Duration::from_millis(50);

    /// Waits until `cond` holds (bounded), for counters updated by other threads.
    fn eventually(cond: impl Fn() -> bool) -> bool {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) {
            if cond() {
                return true;
            }
            thread::sleep(Duration::from_millis(5));
        }
        false
    }

    #[test]
    fn successful_calls_reuse_one_worker() {
        let wd = Watchdog::new("test-ok", 4);
        for i in 0..100u32 {
            assert_eq!(wd.call(Duration::from_secs(5), move || i * 2), Ok(i * 2));
        }
        let names: Vec<String> = (0..3)
            .map(|_| wd.call(Duration::from_secs(5), || thread::current().name().map(str::to_owned)))
            .map(|r| r.unwrap().unwrap())
            .collect();
        assert!(names.iter().all(|n| n == "test-ok-1"), "{names:?}");
        assert_eq!(wd.spawned_total(), 1);
        assert_eq!(wd.hung_workers(), 0);
        assert_eq!(wd.abandoned_total(), 0);
    }

    #[test]
    fn hung_call_times_out_promptly_and_next_call_gets_a_fresh_worker() {
        let wd = Watchdog::new("test-hang", 4);
        let start = Instant::now();
        let r = wd.call(SHORT, || {
            thread::sleep(Duration::from_millis(600));
            1
        });
        let waited = start.elapsed();
        assert_eq!(r, Err(CallError::TimedOut(SHORT)));
        assert!(r.unwrap_err().is_hang());
        assert!(waited < Duration::from_millis(400), "caller waited {waited:?}");
        assert_eq!(wd.hung_workers(), 1);
        assert_eq!(wd.abandoned_total(), 1);

        // The next call runs at once on a new thread while the old one still sleeps.
        let name = wd.call(SHORT * 20, || thread::current().name().map(str::to_owned)).unwrap();
        assert_eq!(name.as_deref(), Some("test-hang-2"));
        assert_eq!(wd.spawned_total(), 2);

        // When the stuck call finally returns, its thread exits and no longer counts.
        assert!(eventually(|| wd.hung_workers() == 0));
        assert_eq!(wd.abandoned_total(), 1);
    }

    #[test]
    fn bound_on_hung_workers_fails_fast_and_recovers() {
        let wd = Watchdog::new("test-bound", 2);
        let release = Arc::new(AtomicBool::new(false));
        for _ in 0..2 {
            let release = Arc::clone(&release);
            let r = wd.call(SHORT, move || {
                while !release.load(Ordering::SeqCst) {
                    thread::sleep(Duration::from_millis(5));
                }
            });
            assert_eq!(r, Err(CallError::TimedOut(SHORT)));
        }
        assert_eq!(wd.hung_workers(), 2);

        let start = Instant::now();
        let r = wd.call(Duration::from_secs(10), || 7);
        assert_eq!(r, Err(CallError::TooManyHung { hung: 2, limit: 2 }));
        assert!(start.elapsed() < Duration::from_millis(100), "did not fail fast");
        assert!(r.unwrap_err().to_string().contains("still stuck"));
        assert_eq!(wd.spawned_total(), 2, "no thread spawned past the bound");

        // The driver "recovers": stuck calls return, workers exit, calls work again.
        release.store(true, Ordering::SeqCst);
        assert!(eventually(|| wd.hung_workers() == 0));
        assert_eq!(wd.call(Duration::from_secs(5), || 7), Ok(7));
        assert_eq!(wd.abandoned_total(), 2);
    }

    #[test]
    fn panicking_call_is_an_error_and_the_worker_survives() {
        let wd = Watchdog::new("test-panic", 4);
        let r: Result<(), _> = wd.call(Duration::from_secs(5), || panic!("driver exploded"));
        assert_eq!(r, Err(CallError::Panicked("driver exploded".into())));
        assert_eq!(wd.call(Duration::from_secs(5), || 3), Ok(3));
        assert_eq!(wd.spawned_total(), 1);
    }

    #[test]
    fn watchdog_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Watchdog>();
    }
}
