//! One blocking call per volume, each with its own deadline, without one thread hand-off each.
//!
//! A `spawn_blocking` call per volume costs two thread wake-ups (a pool thread, then the
//! runtime's worker for the result): more than the open and `statfs` it runs. So a pass starts
//! one blocking worker that takes volumes one at a time from a shared list and writes each
//! result in the volume's slot; the async side sleeps until the last slot is filled, or until
//! the earliest deadline of a volume being measured. While volumes wait and the pass has gone
//! [`RAMP`] without a new worker, it adds one (up to [`WORKERS`]): a local volume answers in
//! microseconds, so a pass of local volumes runs on one thread with two wake-ups in all, while
//! slow (network) volumes get up to [`WORKERS`] calls at once, and a volume that hangs holds up
//! the ones queued behind it for at most [`RAMP`]. A volume still running at its deadline is
//! reported timed out and its worker abandoned (it ends when the kernel lets the call return).
//! Its path stays busy in [`BusyPaths`] until the call returns, so later passes report it at once
//! without a thread.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::bounded::{BoundedError, BusyPaths};

/// Most blocking workers a pass runs at once (workers stuck past their deadline not counted): a
/// hung volume holds one until its deadline; more of them only matter for slow (network) volumes.
pub const WORKERS: usize = 16;

/// While volumes wait, a pass adds a worker after this long without adding one: far above a
/// local `statfs` (microseconds), far below the fast loop's shortest period (250 ms).
pub const RAMP: Duration = Duration::from_millis(10);

enum Slot<T> {
    Pending,
    Running(Instant),
    Done(Result<T, BoundedError>),
}

struct State<T> {
    slots: Vec<Slot<T>>,
    /// Slots before this one have been taken (or timed out unstarted).
    next: usize,
    left: usize,
    /// When a worker last took a job or was started: pending jobs that no worker takes within
    /// a deadline of it while none runs (the blocking pool exhausted by stuck calls) time out
    /// too, so a pass always ends.
    progress: Instant,
    /// Workers started and not yet gone, less those abandoned at a deadline.
    workers: usize,
    /// When the last worker was started.
    spawned: Instant,
}

struct Shared<T> {
    state: Mutex<State<T>>,
    done: Notify,
}

impl<T> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What a pass runs: `call` on each job, at most one call at a time per `key` (shared with every
/// other user of `busy_paths`).
pub struct Pass<J, F> {
    pub jobs: Vec<J>,
    pub key: fn(&J) -> &Path,
    pub call: F,
}

/// Runs the pass; one result per job, in their order.
pub async fn run<J, T, F>(
    busy_paths: &BusyPaths,
    deadline: Duration,
    pass: Pass<J, F>,
) -> Vec<Result<T, BoundedError>>
where
    J: Send + Sync + 'static,
    T: Send + 'static,
    F: Fn(&J) -> T + Send + Sync + 'static,
{
    let n = pass.jobs.len();
    if n == 0 {
        return Vec::new();
    }
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            slots: (0..n).map(|_| Slot::Pending).collect(),
            next: 0,
            left: n,
            progress: Instant::now(),
            workers: 0,
            spawned: Instant::now(),
        }),
        done: Notify::new(),
    });
    let worker = Arc::new(Worker {
        shared: Arc::clone(&shared),
        jobs: pass.jobs,
        key: pass.key,
        call: pass.call,
        busy_paths: busy_paths.clone(),
    });
    let spawn = || {
        let w = Arc::clone(&worker);
        // Detached: a worker stuck in the kernel is abandoned, not awaited.
        drop(tokio::task::spawn_blocking(move || w.work()));
    };
    loop {
        let (add, wake) = {
            let mut st = shared.lock();
            let now = Instant::now();
            let abandoned = expire(&mut st, now, deadline);
            st.workers = st.workers.saturating_sub(abandoned);
            if st.left == 0 {
                break;
            }
            let add = should_add(&st, now);
            if add {
                st.workers += 1;
                st.spawned = now;
                st.progress = now;
            }
            (add, wake_at(&st, now, deadline))
        };
        if add {
            spawn();
        }
        tokio::select! {
            () = shared.done.notified() => {}
            () = tokio::time::sleep_until(wake) => {}
        }
    }
    let mut st = shared.lock();
    std::mem::take(&mut st.slots)
        .into_iter()
        .map(|s| match s {
            Slot::Done(r) => r,
            // Unreachable once `left` is 0; a timeout is the safe answer.
            Slot::Pending | Slot::Running(_) => Err(BoundedError::TimedOut(deadline)),
        })
        .collect()
}

/// Times out the jobs past their deadline; returns how many workers they held (now abandoned).
fn expire<T>(st: &mut State<T>, now: Instant, deadline: Duration) -> usize {
    let mut replace = 0;
    // Pending jobs and no worker running one: the workers started have not begun (the pool is
    // full of stuck calls). Live workers never idle while jobs are pending.
    let stalled = now.duration_since(st.progress) >= deadline
        && !st.slots.iter().any(|s| matches!(s, Slot::Running(_)));
    let State {
        slots, left, next, ..
    } = st;
    for (i, slot) in slots.iter_mut().enumerate() {
        let expired = match slot {
            Slot::Running(t) => now.duration_since(*t) >= deadline,
            Slot::Pending => stalled && i >= *next,
            Slot::Done(_) => false,
        };
        if expired {
            if matches!(slot, Slot::Running(_)) {
                replace += 1;
            }
            *slot = Slot::Done(Err(BoundedError::TimedOut(deadline)));
            *left -= 1;
        }
    }
    replace
}

/// Jobs no worker has taken yet.
fn unstarted<T>(st: &State<T>) -> bool {
    st.slots[st.next.min(st.slots.len())..]
        .iter()
        .any(|s| matches!(s, Slot::Pending))
}

/// Add a worker: jobs wait, and none is running or none was added for [`RAMP`].
fn should_add<T>(st: &State<T>, now: Instant) -> bool {
    unstarted(st)
        && st.workers < WORKERS
        && (st.workers == 0 || now.duration_since(st.spawned) >= RAMP)
}

/// The earliest moment a job can pass its deadline or a worker may be added: the pass sleeps
/// until then (or until done).
fn wake_at<T>(st: &State<T>, now: Instant, deadline: Duration) -> Instant {
    let running = st.slots.iter().filter_map(|s| match s {
        Slot::Running(t) => Some(*t + deadline),
        _ => None,
    });
    let ramp = (unstarted(st) && st.workers < WORKERS).then(|| st.spawned + RAMP);
    running
        .chain(std::iter::once(st.progress + deadline))
        .chain(ramp)
        .min()
        .unwrap_or(now + deadline)
}

struct Worker<J, F, T> {
    shared: Arc<Shared<T>>,
    jobs: Vec<J>,
    key: fn(&J) -> &Path,
    call: F,
    busy_paths: BusyPaths,
}

impl<J, F, T> Worker<J, F, T>
where
    F: Fn(&J) -> T,
{
    fn work(&self) {
        loop {
            let i = {
                let mut st = self.shared.lock();
                let Some(i) =
                    (st.next..st.slots.len()).find(|&i| matches!(st.slots[i], Slot::Pending))
                else {
                    st.workers = st.workers.saturating_sub(1);
                    return;
                };
                let now = Instant::now();
                st.next = i + 1;
                st.slots[i] = Slot::Running(now);
                st.progress = now;
                i
            };
            let Some(job) = self.jobs.get(i) else {
                return;
            };
            let out = self.busy_paths.enter((self.key)(job)).and_then(|_busy| {
                catch_unwind(AssertUnwindSafe(|| (self.call)(job)))
                    .map_err(|_| BoundedError::Task("the probe call panicked".to_owned()))
            });
            let mut st = self.shared.lock();
            match finish(&mut st, i, out) {
                Finished::Stored => {}
                Finished::Last => self.shared.done.notify_one(),
                Finished::Abandoned => return,
            }
        }
    }
}

#[derive(Debug, PartialEq)]
enum Finished {
    Stored,
    /// The pass's last result: wake it.
    Last,
    /// Timed out while it ran (another worker took this one's place), or the pass is over and
    /// its slots are gone: the result is dropped, and so is this worker.
    Abandoned,
}

fn finish<T>(st: &mut State<T>, i: usize, out: Result<T, BoundedError>) -> Finished {
    let Some(slot @ Slot::Running(_)) = st.slots.get_mut(i) else {
        return Finished::Abandoned;
    };
    *slot = Slot::Done(out);
    st.left -= 1;
    if st.left == 0 {
        Finished::Last
    } else {
        Finished::Stored
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn paths(n: usize) -> Vec<PathBuf> {
        (0..n).map(|i| PathBuf::from(format!("/v{i}"))).collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_job_runs_once_in_order() {
        let busy_paths = BusyPaths::new();
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = Arc::clone(&calls);
        let pass = Pass {
            jobs: paths(100),
            key: |p: &PathBuf| p.as_path(),
            call: move |p: &PathBuf| {
                counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                p.display().to_string()
            },
        };
        let out = run(&busy_paths, Duration::from_secs(30), pass).await;
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 100);
        let want: Vec<_> = (0..100).map(|i| Ok(format!("/v{i}"))).collect();
        assert_eq!(out, want);
        assert!(busy_paths.is_empty());
    }

    #[test]
    fn a_call_that_returns_after_its_pass_ended_is_dropped_quietly() {
        let mut st: State<u8> = State {
            slots: vec![Slot::Running(Instant::now()), Slot::Running(Instant::now())],
            next: 2,
            left: 2,
            progress: Instant::now(),
            workers: 2,
            spawned: Instant::now(),
        };
        assert_eq!(finish(&mut st, 0, Ok(1)), Finished::Stored);
        assert_eq!(
            finish(&mut st, 0, Ok(1)),
            Finished::Abandoned,
            "already done"
        );
        assert_eq!(finish(&mut st, 1, Ok(2)), Finished::Last);
        // The pass took its results and ended; a hung call returns much later.
        std::mem::take(&mut st.slots);
        assert_eq!(finish(&mut st, 1, Ok(3)), Finished::Abandoned);
    }

    /// Blocks hung calls until opened.
    #[derive(Default)]
    struct Gate(Mutex<bool>, std::sync::Condvar);

    impl Gate {
        fn wait(&self) {
            let mut open = self.0.lock().unwrap();
            while !*open {
                open = self.1.wait(open).unwrap();
            }
        }
        fn open(&self) {
            *self.0.lock().unwrap() = true;
            self.1.notify_all();
        }
    }

    fn gated(n: usize, hung: usize, gate: Arc<Gate>) -> Pass<PathBuf, impl Fn(&PathBuf) -> String> {
        let hung: Vec<PathBuf> = paths(hung);
        Pass {
            jobs: paths(n),
            key: |p: &PathBuf| p.as_path(),
            call: move |p: &PathBuf| {
                if hung.contains(p) {
                    gate.wait();
                }
                p.display().to_string()
            },
        }
    }

    /// Two jobs hang; every other job answers while they are still blocked (so they were not
    /// held), the two time out, and their paths stay busy until they return, so the next pass
    /// refuses them at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn hung_jobs_time_out_alone_and_stay_busy_until_they_return() {
        let busy_paths = BusyPaths::new();
        let gate = Arc::new(Gate::default());
        let short = Duration::from_millis(300);
        let n = 3 * WORKERS;
        let out = run(&busy_paths, short, gated(n, 2, Arc::clone(&gate))).await;
        assert_eq!(out[0], Err(BoundedError::TimedOut(short)));
        assert_eq!(out[1], Err(BoundedError::TimedOut(short)));
        for (i, r) in out.iter().enumerate().skip(2) {
            assert_eq!(r, &Ok(format!("/v{i}")));
        }
        assert_eq!(busy_paths.len(), 2);
        let again = run(&busy_paths, short, gated(n, 2, Arc::clone(&gate))).await;
        assert_eq!(again[0], Err(BoundedError::StillBusy));
        assert_eq!(again[1], Err(BoundedError::StillBusy));
        assert_eq!(again[2], Ok("/v2".to_owned()));
        gate.open();
        while !busy_paths.is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// A pass starts one worker; the first job hangs with a deadline far away, and the jobs
    /// queued behind it still run while it is blocked (a worker was added for them).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hung_first_job_does_not_hold_the_jobs_behind_it() {
        let busy_paths = BusyPaths::new();
        let gate = Arc::new(Gate::default());
        let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let n = 50;
        let pass = {
            let (gate, done) = (Arc::clone(&gate), Arc::clone(&done));
            Pass {
                jobs: paths(n),
                key: |p: &PathBuf| p.as_path(),
                call: move |p: &PathBuf| {
                    if p == Path::new("/v0") {
                        gate.wait();
                    } else {
                        done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                    p.display().to_string()
                },
            }
        };
        let running = tokio::spawn({
            let busy_paths = busy_paths.clone();
            async move { run(&busy_paths, Duration::from_secs(600), pass).await }
        });
        // A liveness bound, not a speed claim: without a second worker they never run at all.
        let others = tokio::time::timeout(Duration::from_secs(60), async {
            while done.load(std::sync::atomic::Ordering::SeqCst) < n - 1 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        gate.open();
        assert!(others.is_ok(), "the jobs behind the hung one did not run");
        let out = running.await.unwrap();
        let want: Vec<_> = (0..n).map(|i| Ok(format!("/v{i}"))).collect();
        assert_eq!(out, want);
    }

    /// More hung jobs than workers: each one's worker is replaced at its deadline, so the jobs
    /// queued behind them still run, and the pass ends.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn more_hung_jobs_than_workers_still_leave_the_rest_measured() {
        let busy_paths = BusyPaths::new();
        let gate = Arc::new(Gate::default());
        let short = Duration::from_millis(200);
        let hung = WORKERS + 3;
        let out = run(
            &busy_paths,
            short,
            gated(3 * WORKERS, hung, Arc::clone(&gate)),
        )
        .await;
        for (i, r) in out.iter().enumerate() {
            if i < hung {
                assert_eq!(r, &Err(BoundedError::TimedOut(short)), "job {i}");
            } else {
                assert_eq!(r, &Ok(format!("/v{i}")), "job {i}");
            }
        }
        assert_eq!(busy_paths.len(), hung);
        gate.open();
        while !busy_paths.is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panicking_job_is_an_error_of_its_own() {
        let busy_paths = BusyPaths::new();
        let pass = Pass {
            jobs: paths(5),
            key: |p: &PathBuf| p.as_path(),
            call: |p: &PathBuf| {
                assert_ne!(p, Path::new("/v2"), "boom");
                1
            },
        };
        let out = run(&busy_paths, Duration::from_secs(30), pass).await;
        assert!(matches!(out[2], Err(BoundedError::Task(_))), "{out:?}");
        assert_eq!(out.iter().filter(|r| r == &&Ok(1)).count(), 4);
        assert!(busy_paths.is_empty());
    }
}
