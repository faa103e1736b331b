//! The fast measurement loop: between scans, re-`statfs` the volumes the last scan found (no
//! kubelet walk, no API, no policy), keep each one's usage samples for its fill rate, and wake
//! the reconcile loop the moment one crosses its trigger (or, with `trigger.predictive`, will
//! cross it before a resize could land), instead of at the next `--interval`. A statfs costs
//! microseconds; a scan's discovery, mapping and API calls cost far more, and waiting for the
//! next one is what made reaction uniform over the interval.
//!
//! Which lines fire, and how soon each volume is looked at again (near a line or moving fast,
//! four times as often; every other volume, idle or not, once a period: a re-measurement costs a
//! few microseconds, [`crate::probe::anchor`]), is [`crate::resolve::trigger`]. Turns fall on the
//! loop's ticks (a quarter period apart) and count from the tick, so a period is what it says,
//! not a tick more. A volume wakes the loop once per crossing of each level ([`Level`]: its line,
//! then the emergency line, which a claim held past its line is still watched for), and once when
//! its size changes (a resize landed: the scan that follows records how long it took); the scan
//! that follows decides and arms its trigger afresh. A claim whose grow is held until a time
//! (the storage's rule, the window, the budget: `Decision::held_until`) wakes the loop once
//! when that time comes, whatever its numbers, so it is decided on then and not at the next
//! scan; so does one whose filesystem has grown while its `status.capacity` has not yet (its
//! landing is stamped once both show it), a moment later.
//!
//! The loop also says which volumes woke it ([`Watchlist::take_crossed`]): the reconcile loop
//! decides on those at once, without walking the node, and leaves the rest to the next scan.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use jiff::Timestamp;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::samples::Samples;
use crate::probe::anchor::RemeasureError;
use crate::probe::statfs::FsStats;
use crate::probe::{Prober, Target, Volume};
use crate::resolve::trigger::{Level, Trigger};

/// What a volume's last decision leaves the fast loop to watch for: its trigger's lines, and
/// when to decide on it again whatever its numbers (its hold's end, `Decision::held_until`, or
/// soon while its landing waits for `status.capacity`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Armed {
    pub trigger: Trigger,
    pub wake_at: Option<Timestamp>,
}

impl Armed {
    /// Lines alone, no hold.
    pub fn lines(trigger: Trigger) -> Armed {
        Armed {
            trigger,
            wake_at: None,
        }
    }

    /// The loop's instant for `wake_at`; `None` without one, or past the clock's range.
    fn hold_ends(&self) -> Option<Instant> {
        let wait = self.wake_at?.duration_since(Timestamp::now());
        // Already over (a negative wait): due at once.
        let wait = Duration::try_from(wait).unwrap_or(Duration::ZERO);
        Instant::now().checked_add(wait)
    }
}

struct Watched {
    target: Target,
    trigger: Trigger,
    due: Instant,
    /// When to decide on it again whatever its numbers (`Armed::wake_at`): once, until re-armed.
    hold_ends: Option<Instant>,
    /// The level the last decision (or the last wake) saw: the loop wakes when the numbers
    /// reach a higher one, once (until the next scan re-arms it).
    decided: Level,
    /// The last measurement's size and usage (a size change is a resize landing).
    capacity: u64,
    used: u64,
}

impl Watched {
    fn hold_ended(&self, now: Instant) -> bool {
        self.hold_ends.is_some_and(|t| t <= now)
    }
}

/// Looked up once per volume per pass; see [`crate::probe::bounded`] for the hasher.
type WatchMap = HashMap<PathBuf, Watched, foldhash::fast::RandomState>;

/// The volumes the fast loop watches, set by each scan, and their samples.
pub struct Watchlist {
    volumes: Mutex<WatchMap>,
    wake: Notify,
    samples: Arc<Samples>,
    /// The volumes that woke the loop since the reconcile loop last took them, with the
    /// numbers that did.
    crossed: Mutex<Vec<(Target, FsStats)>>,
}

impl Watchlist {
    pub fn new(samples: Arc<Samples>) -> Self {
        Watchlist {
            volumes: Mutex::default(),
            wake: Notify::new(),
            samples,
            crossed: Mutex::default(),
        }
    }

    /// After a scan: watch each measured volume whose policy has a trigger, armed for the levels
    /// above the one its numbers reach now (that one was just decided on).
    /// `rates`: each volume's fill rate from the samples the scan just recorded.
    pub fn set(
        &self,
        volumes: &[Volume],
        triggers: &HashMap<PathBuf, Armed>,
        rates: &HashMap<PathBuf, f64>,
    ) {
        let now = Instant::now();
        let mut current = self.lock();
        // A volume already watched keeps its turn: the scan just measured it, and measuring every
        // volume again right after each scan would be work done twice. A new one is due at once.
        let due = |path: &PathBuf| current.get(path).map_or(now, |w| w.due);
        let watched: WatchMap = volumes
            .iter()
            .filter_map(|v| {
                let armed = triggers.get(&v.path)?;
                let trigger = armed.trigger;
                let m = v.measurement?;
                let rate = rates.get(v.path.as_path()).copied();
                let w = Watched {
                    target: v.target()?,
                    trigger,
                    due: due(&v.path),
                    hold_ends: armed.hold_ends(),
                    decided: trigger.level(&m, rate),
                    capacity: m.capacity_bytes,
                    used: m.used_bytes,
                };
                Some((v.path.clone(), w))
            })
            .collect();
        *current = watched;
        // The scan just decided on every volume with numbers at least as fresh as theirs.
        self.lock_crossed().clear();
    }

    /// After a scan of some volumes alone: each of `measured` is watched again with the trigger
    /// and hold its decision set, armed for the levels above the one the numbers that scan
    /// decided on reach.
    pub fn rearm(
        &self,
        measured: &[(&Path, crate::decide::Measurement)],
        triggers: &HashMap<PathBuf, Armed>,
        rates: &HashMap<PathBuf, f64>,
    ) {
        let mut watched = self.lock();
        for (path, m) in measured {
            let (Some(w), Some(armed)) = (watched.get_mut(*path), triggers.get(*path)) else {
                continue;
            };
            w.trigger = armed.trigger;
            w.hold_ends = armed.hold_ends();
            w.decided = armed.trigger.level(m, rates.get(*path).copied());
            (w.capacity, w.used) = (m.capacity_bytes, m.used_bytes);
        }
    }

    /// The volumes that woke the loop since the last call (or the last scan of every volume),
    /// each once, with its latest numbers.
    pub fn take_crossed(&self) -> Vec<(Target, FsStats)> {
        let mut crossed = std::mem::take(&mut *self.lock_crossed());
        // Newest first within each path (the sort is stable), and dedup keeps the first.
        crossed.reverse();
        crossed.sort_by(|a, b| a.0.path.cmp(&b.0.path));
        crossed.dedup_by(|a, b| a.0.path == b.0.path);
        crossed
    }

    fn lock_crossed(&self) -> std::sync::MutexGuard<'_, Vec<(Target, FsStats)>> {
        self.crossed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, WatchMap> {
        self.volumes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Resolves when a watched volume has crossed its trigger.
    pub async fn crossed(&self) {
        self.wake.notified().await
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// One pass at the loop's tick `now`: measures the volumes that are due; returns how many
    /// were measured. The next turns count from `now`, the tick, not from when the pass ended:
    /// a period a whole number of ticks long then lands on a tick, not one tick after it.
    pub async fn pass(&self, prober: &Prober, every: Duration, now: Instant) -> usize {
        let due: Vec<Target> = self
            .lock()
            .values()
            .filter(|w| w.due <= now || w.hold_ended(now))
            .map(|w| w.target.clone())
            .collect();
        if due.is_empty() {
            return 0;
        }
        // One reference per look kept here; the targets themselves go to the pass.
        let paths: Vec<Arc<Path>> = due.iter().map(|t| Arc::clone(&t.path)).collect();
        let results = prober.remeasure(due).await;
        let at = Instant::now();
        let mut n = 0;
        let mut crossed = Vec::new();
        let mut watched = self.lock();
        for (path, r) in paths.iter().zip(results) {
            let stats = match r {
                Ok(s) => s,
                // Not this volume's numbers: left to the next scan, which finds what is there
                // now and watches it afresh.
                Err(RemeasureError::Moved) => {
                    tracing::debug!(path = %path.display(), "mount changed since the scan; not re-measured until the next scan");
                    watched.remove(&**path);
                    continue;
                }
                Err(e) => {
                    tracing::debug!(path = %path.display(), error = %e, "re-measurement failed");
                    if let Some(w) = watched.get_mut(&**path) {
                        w.due = now + every;
                        // Not measured, not decided on: the next scan decides on its hold.
                        w.hold_ends = None;
                    }
                    continue;
                }
            };
            let Some(w) = watched.get_mut(&**path) else {
                continue;
            };
            let m = stats.measurement;
            n += 1;
            let rate = self.samples.record(path, m.used_bytes, at);
            let level = w.trigger.level(&m, rate);
            let fired = level > w.decided;
            w.decided = w.decided.max(level);
            w.due = now + w.trigger.period(&m, w.used, rate, every);
            let resized = m.capacity_bytes != w.capacity;
            (w.capacity, w.used) = (m.capacity_bytes, m.used_bytes);
            let released = w.hold_ended(now);
            if released {
                w.hold_ends = None;
            }
            if fired || resized || released {
                crossed.push((w.target.clone(), stats));
            }
        }
        drop(watched);
        if !crossed.is_empty() {
            self.lock_crossed().append(&mut crossed);
            self.wake.notify_one();
        }
        n
    }

    /// Runs passes until the task is dropped; `every` is the quiet volumes' period.
    pub async fn run(self: Arc<Self>, prober: Prober, every: Duration) {
        let mut tick = tokio::time::interval((every / 4).max(Duration::from_millis(50)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let at = tick.tick().await;
            self.pass(&prober, every, at).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;

    /// A tempdir with a tmpfs of its own mounted on it, unmounted on drop.
    struct OwnTmpfs(tempfile::TempDir);

    impl OwnTmpfs {
        /// None (the test skipped, and says so) only off CI without root.
        fn new() -> Option<Self> {
            if !nix::unistd::geteuid().is_root() {
                assert!(
                    std::env::var_os("CI").is_none(),
                    "CI is set: this test needs root to mount a tmpfs"
                );
                eprintln!("skipped: needs root to mount a tmpfs (runs in CI)");
                return None;
            }
            let dir = tempfile::tempdir().unwrap();
            nix::mount::mount(
                Some("tmpfs"),
                dir.path(),
                Some("tmpfs"),
                nix::mount::MsFlags::empty(),
                Some("size=16m"),
            )
            .unwrap();
            Some(Self(dir))
        }

        fn path(&self) -> &Path {
            self.0.path()
        }
    }

    /// The volume directory of one claim on `dir`, the prober that found it, what the walk
    /// found, and a trigger at 99 % used.
    async fn one_volume(dir: &OwnTmpfs) -> (PathBuf, Prober, Vec<Volume>, Trigger) {
        let vol = dir.path().join("pods/u1/volumes/kubernetes.io~csi/pv-a");
        std::fs::create_dir_all(vol.join("mount")).unwrap();
        let prober = Prober::new(dir.path().to_path_buf(), Duration::from_secs(30));
        let vols = prober.probe().await.unwrap();
        assert_eq!(vols.len(), 1, "{vols:#?}");
        let mut p = Policy::with_limit(1 << 30);
        p.enabled = true;
        p.usage_threshold = Some(99);
        (vol, prober, vols, Trigger::for_policy(&p, None).unwrap())
    }

    impl Drop for OwnTmpfs {
        fn drop(&mut self) {
            let _ = nix::mount::umount2(self.0.path(), nix::mount::MntFlags::MNT_DETACH);
        }
    }

    /// A volume is measured again on the tick a period after the one that measured it, not a
    /// tick later; one whose path no longer leads to the scan's mount is dropped until the next
    /// scan.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn turns_land_on_the_tick_a_period_later_and_a_moved_volume_is_dropped() {
        // The period follows the volume's numbers (a fast move or a near line quarters it), so
        // the volume is a tmpfs of the test's own: on the host's /tmp, other tests' writes moved
        // it by more than 1 % within a period and CI saw the 3/4 tick due.
        let Some(dir) = OwnTmpfs::new() else {
            return;
        };
        let (vol, prober, vols, trigger) = one_volume(&dir).await;
        let triggers = HashMap::from([(vols[0].path.clone(), Armed::lines(trigger))]);
        let list = Watchlist::new(Arc::new(Samples::default()));
        list.set(&vols, &triggers, &HashMap::new());
        let every = Duration::from_secs(1);
        let t0 = Instant::now();
        assert_eq!(list.pass(&prober, every, t0).await, 1, "new: due at once");
        assert_eq!(list.pass(&prober, every, t0 + every * 3 / 4).await, 0);
        assert_eq!(list.pass(&prober, every, t0 + every).await, 1);
        // The mount directory replaced: another inode at the same path.
        std::fs::rename(vol.join("mount"), vol.join("old")).unwrap();
        std::fs::create_dir(vol.join("mount")).unwrap();
        assert_eq!(list.pass(&prober, every, t0 + every * 2).await, 0);
        assert!(list.is_empty());
    }

    /// A volume whose size changed wakes the loop and is handed over with its numbers, once
    /// however often it woke before being taken; a scan of every volume drops what it has not
    /// taken (that scan decided on fresher numbers).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn crossed_volumes_are_taken_once_with_their_newest_numbers() {
        let Some(dir) = OwnTmpfs::new() else {
            return;
        };
        let (_, prober, mut vols, trigger) = one_volume(&dir).await;
        let real = vols[0].measurement.unwrap();
        let path = vols[0].path.clone();
        let triggers = HashMap::from([(path.clone(), Armed::lines(trigger))]);
        // As if the scan had seen the volume one byte smaller: the next look is a resize.
        let mut smaller = real;
        smaller.capacity_bytes -= 1;
        vols[0].measurement = Some(smaller);
        let list = Watchlist::new(Arc::new(Samples::default()));
        list.set(&vols, &triggers, &HashMap::new());
        let every = Duration::from_secs(1);
        let t0 = Instant::now();
        assert!(list.take_crossed().is_empty());
        assert_eq!(list.pass(&prober, every, t0).await, 1);
        // Woken again before the reconcile loop took it: still one entry, the newest.
        list.rearm(&[(path.as_path(), smaller)], &triggers, &HashMap::new());
        assert_eq!(list.pass(&prober, every, t0 + every).await, 1);
        let crossed = list.take_crossed();
        assert_eq!(crossed.len(), 1, "{crossed:?}");
        assert_eq!(&*crossed[0].0.path, path.as_path());
        assert_eq!(crossed[0].1.measurement.capacity_bytes, real.capacity_bytes);
        assert!(list.take_crossed().is_empty(), "taken once");
        // Re-armed with the numbers decided on: the same size is no longer news.
        list.rearm(&[(path.as_path(), real)], &triggers, &HashMap::new());
        assert_eq!(list.pass(&prober, every, t0 + every * 2).await, 1);
        assert!(list.take_crossed().is_empty());
        // Woken, then a scan of every volume before the loop took it: nothing left to take.
        list.rearm(&[(path.as_path(), smaller)], &triggers, &HashMap::new());
        assert_eq!(list.pass(&prober, every, t0 + every * 3).await, 1);
        list.set(&vols, &triggers, &HashMap::new());
        assert!(list.take_crossed().is_empty());
    }

    /// A volume held until a time wakes the loop on the first tick after that time, once,
    /// though its numbers have not moved; re-armed by its decision with a new end, it wakes
    /// again then.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hold_that_ends_wakes_the_loop_once_at_its_end() {
        let Some(dir) = OwnTmpfs::new() else {
            return;
        };
        let (_, prober, vols, trigger) = one_volume(&dir).await;
        let m = vols[0].measurement.unwrap();
        let path = vols[0].path.clone();
        let held = |secs: i64| Armed {
            trigger,
            wake_at: Some(Timestamp::now() + jiff::SignedDuration::from_secs(secs)),
        };
        let list = Watchlist::new(Arc::new(Samples::default()));
        // Due for its period only in an hour: only the hold's end makes it measured sooner.
        let every = Duration::from_secs(3600);
        list.set(
            &vols,
            &HashMap::from([(path.clone(), held(2))]),
            &HashMap::new(),
        );
        let t0 = Instant::now();
        assert_eq!(list.pass(&prober, every, t0).await, 1, "new: due at once");
        assert!(
            list.take_crossed().is_empty(),
            "nothing moved, the hold not over"
        );
        assert_eq!(
            list.pass(&prober, every, t0 + Duration::from_secs(1)).await,
            0
        );
        assert_eq!(
            list.pass(&prober, every, t0 + Duration::from_secs(3)).await,
            1
        );
        let crossed = list.take_crossed();
        assert_eq!(crossed.len(), 1, "{crossed:?}");
        assert_eq!(&*crossed[0].0.path, path.as_path());
        // Once: not again on the next tick.
        assert_eq!(
            list.pass(&prober, every, t0 + Duration::from_secs(4)).await,
            0
        );
        assert!(list.take_crossed().is_empty());
        // Its decision holds it again, for longer: the loop wakes at the new end, not before.
        list.rearm(
            &[(path.as_path(), m)],
            &HashMap::from([(path.clone(), held(10))]),
            &HashMap::new(),
        );
        assert_eq!(
            list.pass(&prober, every, t0 + Duration::from_secs(8)).await,
            0
        );
        assert_eq!(
            list.pass(&prober, every, t0 + Duration::from_secs(12))
                .await,
            1
        );
        assert_eq!(list.take_crossed().len(), 1);
        // No hold: nothing to wake for.
        list.rearm(
            &[(path.as_path(), m)],
            &HashMap::from([(path.clone(), Armed::lines(trigger))]),
            &HashMap::new(),
        );
        assert_eq!(
            list.pass(&prober, every, t0 + Duration::from_secs(30))
                .await,
            0
        );
    }
}
