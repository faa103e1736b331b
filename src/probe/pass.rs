//! One blocking call per volume, each with its own deadline, without one thread hand-off each.
//!
//! A `spawn_blocking` call per volume costs two thread wake-ups (a pool thread, then the
//! runtime's worker for the result): more than the `openat2` and `statfs` it runs. So a pass
//! starts a few blocking workers that take volumes one at a time from a shared list and write
//! each result in the volume's slot; the async side sleeps until the last slot is filled, or
//! until the earliest deadline of a volume being measured. A volume still running at its
//! deadline is reported timed out and its worker abandoned (it ends when the kernel lets the call
//! return); a new worker takes its place, so a stuck volume holds only itself and never the
//! volumes after it. Its path stays busy in [`InFlight`] until the call returns, so later
//! passes report it at once without a thread.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::bounded::{BoundedError, InFlight};

/// Blocking workers per pass: a hung volume holds one until its deadline, when a new one
/// replaces it; more of them only matter for slow (network) volumes.
pub const WORKERS: usize = 16;

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
/// other user of `in_flight`).
pub struct Pass<J, F> {
    pub jobs: Vec<J>,
    pub key: fn(&J) -> &Path,
    pub call: F,
}

/// Runs the pass; one result per job, in their order.
pub async fn run<J, T, F>(
    in_flight: &InFlight,
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
        }),
        done: Notify::new(),
    });
    let worker = Arc::new(Worker {
        shared: Arc::clone(&shared),
        jobs: pass.jobs,
        key: pass.key,
        call: pass.call,
        in_flight: in_flight.clone(),
    });
    let spawn = |count: usize| {
        for _ in 0..count {
            let w = Arc::clone(&worker);
            // Detached: a worker stuck in the kernel is abandoned, not awaited.
            drop(tokio::task::spawn_blocking(move || w.work()));
        }
    };
    spawn(WORKERS.min(n));
    loop {
        let (replace, wake) = {
            let mut st = shared.lock();
            let now = Instant::now();
            let replace = expire(&mut st, now, deadline);
            if st.left == 0 {
                break;
            }
            if replace > 0 {
                st.progress = now;
            }
            (replace, wake_at(&st, now, deadline))
        };
        spawn(replace);
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

/// Times out the jobs past their deadline; returns how many workers they held (to replace).
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
    // No more workers than jobs still to start.
    let unstarted = slots[(*next).min(slots.len())..]
        .iter()
        .filter(|s| matches!(s, Slot::Pending))
        .count();
    replace.min(unstarted)
}

/// The earliest moment a job can pass its deadline: the pass sleeps until then (or until done).
fn wake_at<T>(st: &State<T>, now: Instant, deadline: Duration) -> Instant {
    let running = st.slots.iter().filter_map(|s| match s {
        Slot::Running(t) => Some(*t + deadline),
        _ => None,
    });
    running
        .chain(std::iter::once(st.progress + deadline))
        .min()
        .unwrap_or(now + deadline)
}

struct Worker<J, F, T> {
    shared: Arc<Shared<T>>,
    jobs: Vec<J>,
    key: fn(&J) -> &Path,
    call: F,
    in_flight: InFlight,
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
            let out = self.in_flight.enter((self.key)(job)).and_then(|_busy| {
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
        let inflight = InFlight::new();
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
        let out = run(&inflight, Duration::from_secs(30), pass).await;
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 100);
        let want: Vec<_> = (0..100).map(|i| Ok(format!("/v{i}"))).collect();
        assert_eq!(out, want);
        assert!(inflight.is_empty());
    }

    #[test]
    fn a_call_that_returns_after_its_pass_ended_is_dropped_quietly() {
        let mut st: State<u8> = State {
            slots: vec![Slot::Running(Instant::now()), Slot::Running(Instant::now())],
            next: 2,
            left: 2,
            progress: Instant::now(),
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
        let inflight = InFlight::new();
        let gate = Arc::new(Gate::default());
        let short = Duration::from_millis(300);
        let n = 3 * WORKERS;
        let out = run(&inflight, short, gated(n, 2, Arc::clone(&gate))).await;
        assert_eq!(out[0], Err(BoundedError::TimedOut(short)));
        assert_eq!(out[1], Err(BoundedError::TimedOut(short)));
        for (i, r) in out.iter().enumerate().skip(2) {
            assert_eq!(r, &Ok(format!("/v{i}")));
        }
        assert_eq!(inflight.len(), 2);
        let again = run(&inflight, short, gated(n, 2, Arc::clone(&gate))).await;
        assert_eq!(again[0], Err(BoundedError::StillBusy));
        assert_eq!(again[1], Err(BoundedError::StillBusy));
        assert_eq!(again[2], Ok("/v2".to_owned()));
        gate.open();
        while !inflight.is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// More hung jobs than workers: each one's worker is replaced at its deadline, so the jobs
    /// queued behind them still run, and the pass ends.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn more_hung_jobs_than_workers_still_leave_the_rest_measured() {
        let inflight = InFlight::new();
        let gate = Arc::new(Gate::default());
        let short = Duration::from_millis(200);
        let hung = WORKERS + 3;
        let out = run(
            &inflight,
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
        assert_eq!(inflight.len(), hung);
        gate.open();
        while !inflight.is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panicking_job_is_an_error_of_its_own() {
        let inflight = InFlight::new();
        let pass = Pass {
            jobs: paths(5),
            key: |p: &PathBuf| p.as_path(),
            call: |p: &PathBuf| {
                assert_ne!(p, Path::new("/v2"), "boom");
                1
            },
        };
        let out = run(&inflight, Duration::from_secs(30), pass).await;
        assert!(matches!(out[2], Err(BoundedError::Task(_))), "{out:?}");
        assert_eq!(out.iter().filter(|r| r == &&Ok(1)).count(), 4);
        assert!(inflight.is_empty());
    }
}
