//! Blocking filesystem calls with a deadline, at most one at a time per path.
//!
//! A hung mount (an NFS server gone, a FUSE daemon stopped) blocks `statfs`, `open` and `stat`
//! of anything under it, uninterruptibly. Such a thread cannot be cancelled, only abandoned: the
//! caller stops waiting at the deadline and the thread keeps the path marked busy until the
//! kernel lets it return. Until then no second call is started on that path, so a hung mount
//! costs one thread, not one per scan.
//!
//! Two uses share a path: measuring it (statfs, the agent's core job) and reading below it (the
//! WAL directories). A read may be slow where statfs is not (a directory listing waits for I/O
//! behind a busy disk's writeback; statfs reads counters in memory), so a read in progress never
//! refuses a measurement; a read starts only when neither is running, so a hung mount still
//! holds at most one thread of each.

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BoundedError {
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
    #[error("an earlier call on this path has not returned yet")]
    StillBusy,
    #[error("the blocking task failed: {0}")]
    Task(String),
}

impl BoundedError {
    /// The call did not answer in time, now or before: the path is presumed hung.
    pub fn is_timeout(&self) -> bool {
        matches!(self, BoundedError::TimedOut(_) | BoundedError::StillBusy)
    }
}

/// Entered and left once per volume per pass (several hundred times a second on a full node), so
/// hashed with foldhash rather than SipHash: the keys are the kubelet's paths on this node, which
/// no tenant chooses, and the hasher is still seeded per process.
type PathSet = HashSet<(Arc<Path>, Use), foldhash::fast::RandomState>;

/// What a blocking call on a path does; see the module's doc.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Use {
    Measure,
    Read,
}

/// The paths with a blocking call still running. Cheap to clone; clones share the set.
#[derive(Debug, Clone, Default)]
pub struct BusyPaths {
    busy: Arc<Mutex<PathSet>>,
}

/// A path marked busy; dropping it (when the blocking call returns, panics, or is dropped
/// unrun) frees the path.
#[derive(Debug)]
pub struct Busy {
    busy: Arc<Mutex<PathSet>>,
    key: (Arc<Path>, Use),
}

impl Drop for Busy {
    fn drop(&mut self) {
        let mut busy = self.busy.lock().unwrap_or_else(PoisonError::into_inner);
        busy.remove(&self.key);
    }
}

impl BusyPaths {
    pub fn new() -> Self {
        Self::default()
    }

    /// Paths whose call has not returned (the stuck ones, between scans).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A measurement of `key` is running (and would refuse another).
    pub fn is_busy(&self, key: &Path) -> bool {
        self.lock().contains(&(Arc::from(key), Use::Measure))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PathSet> {
        self.busy.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks `key` busy for as long as the returned guard lives, for a caller that runs the
    /// blocking call itself (on a thread it waits for with a deadline of its own). Refuses when
    /// a call on `key` is still running.
    pub fn enter(&self, key: &Path) -> Result<Busy, BoundedError> {
        let key = (Arc::from(key), Use::Measure);
        if !self.lock().insert(key.clone()) {
            return Err(BoundedError::StillBusy);
        }
        Ok(Busy {
            busy: Arc::clone(&self.busy),
            key,
        })
    }

    /// Marks a read below `key` running, when neither a read nor a measurement of it is.
    fn enter_read(&self, key: &Path) -> Result<Busy, BoundedError> {
        let path: Arc<Path> = Arc::from(key);
        let mut busy = self.lock();
        if busy.contains(&(Arc::clone(&path), Use::Measure))
            || !busy.insert((Arc::clone(&path), Use::Read))
        {
            return Err(BoundedError::StillBusy);
        }
        Ok(Busy {
            busy: Arc::clone(&self.busy),
            key: (path, Use::Read),
        })
    }

    /// Runs `f` on a blocking thread and waits at most `deadline` for it. Refuses at once when a
    /// call on `key` is still running.
    pub async fn run<T, F>(&self, key: &Path, deadline: Duration, f: F) -> Result<T, BoundedError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let release = self.enter(key)?;
        bounded(release, deadline, f).await
    }

    /// A read below `key` on a blocking thread, bounded by `deadline`, first waiting up to `wait`
    /// for a call already running on `key` to return: a read that must not be skipped (WAL
    /// health before a grow) is not refused because the fast loop happens to be measuring the
    /// same mount, and a hung one still refuses it after `wait`. Measurements of `key` go on
    /// while it runs.
    pub async fn run_when_free<T, F>(
        &self,
        key: &Path,
        wait: Duration,
        deadline: Duration,
        f: F,
    ) -> Result<T, BoundedError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let start = tokio::time::Instant::now();
        let release = loop {
            match self.enter_read(key) {
                Ok(r) => break r,
                Err(e) if start.elapsed() >= wait => return Err(e),
                Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        };
        bounded(release, deadline, f).await
    }
}

/// Runs `f` on a blocking thread holding `release`, waiting at most `deadline` for it.
async fn bounded<T, F>(release: Busy, deadline: Duration, f: F) -> Result<T, BoundedError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let task = tokio::task::spawn_blocking(move || {
        let _release = release;
        f()
    });
    match tokio::time::timeout(deadline, task).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(BoundedError::Task(e.to_string())),
        Err(_) => Err(BoundedError::TimedOut(deadline)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// A call that returns soon is waited for; one that does not is refused after the wait.
    #[tokio::test]
    async fn a_read_that_must_run_waits_for_a_quick_call_on_its_path_not_for_a_stuck_one() {
        let busy_paths = BusyPaths::new();
        let p = Path::new("/vol");
        let held = busy_paths.enter(p).unwrap();
        let later = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            drop(held);
        });
        let wait = Duration::from_secs(5);
        let r = busy_paths.run_when_free(p, wait, wait, || 7).await;
        assert_eq!(r, Ok(7));
        later.await.unwrap();
        let _stuck = busy_paths.enter(p).unwrap();
        let short = Duration::from_millis(30);
        let r = busy_paths.run_when_free(p, short, wait, || 7).await;
        assert_eq!(r, Err(BoundedError::StillBusy));
        // Refused at once by run, as before.
        assert_eq!(
            busy_paths.run(p, wait, || 7).await,
            Err(BoundedError::StillBusy)
        );
    }

    /// A slow read below a mount does not stop its measurement; a stuck read refuses the next
    /// read, and a stuck measurement refuses reads: at most one thread of each per hung path.
    #[tokio::test]
    async fn a_read_in_progress_never_refuses_a_measurement_of_its_path() {
        let busy_paths = BusyPaths::new();
        let p = Path::new("/vol");
        let (release, gate) = mpsc::channel::<()>();
        let short = Duration::from_millis(30);
        let read = busy_paths
            .run_when_free(p, short, short, move || gate.recv().is_ok())
            .await;
        assert_eq!(read, Err(BoundedError::TimedOut(short)));
        assert!(!busy_paths.is_busy(p), "a read is no measurement");
        assert_eq!(busy_paths.run(p, Duration::from_secs(5), || 7).await, Ok(7));
        let again = busy_paths.run_when_free(p, short, short, || 7).await;
        assert_eq!(
            again,
            Err(BoundedError::StillBusy),
            "a second read while one is stuck"
        );
        let _measuring = busy_paths.enter(p).unwrap();
        release.send(()).unwrap();
        while busy_paths.len() > 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let read = busy_paths.run_when_free(p, short, short, || 7).await;
        assert_eq!(read, Err(BoundedError::StillBusy), "a read while measuring");
    }

    #[tokio::test]
    async fn a_stuck_call_times_out_blocks_its_path_only_and_frees_it_when_it_returns() {
        let busy_paths = BusyPaths::new();
        let (release, gate) = mpsc::channel::<()>();
        let stuck = Path::new("/hung");
        let short = Duration::from_millis(50);
        let r = busy_paths
            .run(stuck, short, move || gate.recv().is_ok())
            .await;
        assert_eq!(r, Err(BoundedError::TimedOut(short)));
        assert!(busy_paths.is_busy(stuck));
        // No second call on the same path while the first is stuck: the closure must not run.
        let ran = Arc::new(Mutex::new(false));
        let flag = Arc::clone(&ran);
        let again = busy_paths
            .run(stuck, short, move || *flag.lock().unwrap() = true)
            .await;
        assert_eq!(again, Err(BoundedError::StillBusy));
        assert!(!*ran.lock().unwrap());
        // Another path is unaffected.
        let ok = busy_paths
            .run(Path::new("/fine"), Duration::from_secs(30), || 7)
            .await;
        assert_eq!(ok, Ok(7));
        // Once the stuck call returns, the path is usable again.
        release.send(()).unwrap();
        while busy_paths.is_busy(stuck) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(
            busy_paths.run(stuck, Duration::from_secs(30), || 1).await,
            Ok(1)
        );
        assert!(busy_paths.is_empty());
    }

    #[tokio::test]
    async fn a_panicking_call_is_an_error_and_frees_its_path() {
        let busy_paths = BusyPaths::new();
        let r: Result<(), _> = busy_paths
            .run(Path::new("/p"), Duration::from_secs(30), || panic!("boom"))
            .await;
        assert!(matches!(r, Err(BoundedError::Task(_))), "{r:?}");
        assert!(busy_paths.is_empty());
    }
}
