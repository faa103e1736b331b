//! The fast measurement loop: between scans, re-`statfs` the volumes the last scan found (no
//! kubelet walk, no API, no policy) and wake the reconcile loop the moment one crosses its
//! trigger, instead of at the next `--interval`. A statfs costs microseconds; a scan's discovery,
//! mapping and API calls cost far more, and waiting for the next one is what made reaction
//! uniform over the interval.
//!
//! Adaptive: a volume within [`NEAR_POINTS`] of its trigger is measured four times as often as a
//! quiet one. A volume is measured until it crosses once; the scan that follows decides, and
//! sets its triggers afresh.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::decide::Measurement;
use crate::policy::{Mode, Policy};
use crate::probe::{Prober, Volume};

/// Percentage points under a trigger at which a volume counts as near it.
pub const NEAR_POINTS: f64 = 5.0;

/// When a volume's numbers call for a decision now: the lines the engine grows at, from its
/// effective policy. Convergent mode plans its growth for windows; only its emergency line
/// cannot wait for the next scan.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Trigger {
    used_percent: f64,
    min_available: u64,
    inode_percent: f64,
}

impl Trigger {
    pub fn for_policy(p: &Policy) -> Option<Trigger> {
        if !p.enabled {
            return None;
        }
        match p.mode {
            Mode::Threshold => Some(Trigger {
                used_percent: f64::from(p.usage_threshold),
                min_available: p.min_available,
                inode_percent: f64::from(p.inode_threshold),
            }),
            Mode::Convergent if p.emergency_grow.enabled => Some(Trigger {
                used_percent: f64::from(p.emergency_grow.critical_threshold),
                min_available: p.emergency_grow.critical_minimum_free,
                inode_percent: 100.0,
            }),
            Mode::Convergent => None,
        }
    }

    pub fn crossed(&self, m: &Measurement) -> bool {
        m.used_percent() >= self.used_percent
            || (self.min_available > 0 && m.available_bytes < self.min_available)
            || (m.inodes_total > 0 && m.inode_percent() >= self.inode_percent)
    }

    fn near(&self, m: &Measurement) -> bool {
        m.used_percent() >= self.used_percent - NEAR_POINTS
            || m.available_bytes < self.min_available.saturating_mul(2)
            || (m.inodes_total > 0 && m.inode_percent() >= self.inode_percent - NEAR_POINTS)
    }
}

struct Watched {
    volume: Volume,
    trigger: Trigger,
    due: Instant,
}

/// The volumes the fast loop watches, set by each scan.
#[derive(Default)]
pub struct Watchlist {
    volumes: Mutex<HashMap<PathBuf, Watched>>,
    wake: Notify,
}

impl Watchlist {
    /// After a scan: watch each measured volume whose policy has a trigger it has not crossed
    /// (a crossed one was just decided on; the scan loop looks at it again on its own).
    pub fn set(&self, volumes: &[Volume], triggers: &HashMap<PathBuf, Trigger>) {
        let now = Instant::now();
        let mut current = self.lock();
        // A volume already watched keeps its turn: the scan just measured it, and measuring every
        // volume again right after each scan would be work done twice. A new one is due at once.
        let due = |path: &PathBuf| current.get(path).map_or(now, |w| w.due);
        let watched: HashMap<PathBuf, Watched> = volumes
            .iter()
            .filter_map(|v| {
                let trigger = *triggers.get(&v.path)?;
                let m = v.measurement?;
                (!trigger.crossed(&m)).then(|| {
                    let w = Watched {
                        volume: v.clone(),
                        trigger,
                        due: due(&v.path),
                    };
                    (v.path.clone(), w)
                })
            })
            .collect();
        *current = watched;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, Watched>> {
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

    /// One pass: measures the volumes that are due; returns how many were measured.
    pub async fn pass(&self, prober: &Prober, every: Duration) -> usize {
        let now = Instant::now();
        let due: Vec<Volume> = self
            .lock()
            .values()
            .filter(|w| w.due <= now)
            .map(|w| w.volume.clone())
            .collect();
        if due.is_empty() {
            return 0;
        }
        let measured = prober.remeasure(due).await;
        let n = measured.len();
        let mut crossed = false;
        let mut watched = self.lock();
        for v in measured {
            let Some(m) = v.measurement else { continue };
            let Some(w) = watched.get_mut(&v.path) else {
                continue;
            };
            if w.trigger.crossed(&m) {
                crossed = true;
                watched.remove(&v.path);
                continue;
            }
            let wait = if w.trigger.near(&m) { every / 4 } else { every };
            w.due = Instant::now() + wait;
        }
        drop(watched);
        if crossed {
            self.wake.notify_one();
        }
        n
    }

    /// Runs passes until the task is dropped; `every` is the quiet volumes' period.
    pub async fn run(self: Arc<Self>, prober: Prober, every: Duration) {
        let mut tick = tokio::time::interval((every / 4).max(Duration::from_millis(50)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.pass(&prober, every).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(used_pct: u64, avail: u64) -> Measurement {
        Measurement {
            capacity_bytes: 100,
            used_bytes: used_pct,
            available_bytes: avail,
            inodes_total: 0,
            inodes_used: 0,
        }
    }

    #[test]
    fn threshold_trigger_is_the_engines_lines() {
        let mut p = Policy::with_limit(1 << 30);
        p.enabled = true;
        p.usage_threshold = 80;
        p.min_available = 10;
        let t = Trigger::for_policy(&p).expect("trigger");
        assert!(!t.crossed(&m(70, 30)));
        assert!(t.crossed(&m(80, 20)));
        assert!(t.crossed(&m(10, 5)), "min available");
        assert!(t.near(&m(76, 24)) && !t.near(&m(70, 30)));
        p.enabled = false;
        assert_eq!(Trigger::for_policy(&p), None);
    }

    #[test]
    fn convergent_mode_wakes_only_for_emergencies() {
        let mut p = Policy::with_limit(1 << 30);
        p.enabled = true;
        p.mode = Mode::Convergent;
        p.emergency_grow.critical_threshold = 95;
        p.emergency_grow.critical_minimum_free = 0;
        let t = Trigger::for_policy(&p).expect("trigger");
        assert!(!t.crossed(&m(90, 10)));
        assert!(t.crossed(&m(96, 4)));
        p.emergency_grow.enabled = false;
        assert_eq!(Trigger::for_policy(&p), None);
    }
}
