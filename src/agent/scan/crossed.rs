//! A scan of the volumes the fast loop saw cross their triggers (or change size), alone.
//!
//! The loop has just measured them through the mount the last full scan's walk reached
//! ([`crate::probe::anchor`]); the rest of what a decision needs (the claim, its pod, the policy,
//! the other volumes of the pod) is in the watch stores and the last full scan. Walking the
//! node again and deciding on every other volume first would put the whole node's work between
//! a fill and its PATCH: tens of milliseconds at a few hundred volumes, for numbers that have
//! not moved. The other volumes keep their last reports until the next full scan.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use jiff::Timestamp;

use super::{Scanner, Scope};
use crate::agent::VolumeReport;
use crate::agent::world::World;
use crate::decide::Measurement;
use crate::probe::Target;
use crate::probe::statfs::FsStats;

impl Scanner {
    /// Decides on the claims of `crossed` (each with the numbers that crossed) and returns
    /// every claim's last report, theirs fresh. `None` when none of them is a volume the last
    /// full scan found (it was gone by then): nothing was decided.
    pub async fn scan_crossed(
        &mut self,
        world: &mut World,
        crossed: Vec<(Target, FsStats)>,
    ) -> Option<Vec<VolumeReport>> {
        let now = Timestamp::now();
        let mut volumes = std::mem::take(&mut self.volumes);
        let only = refresh(&mut volumes, &crossed);
        if only.is_empty() {
            self.volumes = volumes;
            return None;
        }
        // The volumes decided on, with the numbers they are decided on.
        let measured: Vec<(&Path, Measurement)> = volumes
            .iter()
            .filter(|v| v.pv.as_ref().is_some_and(|pv| only.contains(pv)))
            .filter_map(|v| Some((v.path.as_path(), v.measurement?)))
            .collect();
        let at = tokio::time::Instant::now();
        let rates: HashMap<PathBuf, f64> = measured
            .iter()
            .filter_map(|(path, m)| {
                let rate = self.work.samples.record(path, m.used_bytes, at)?;
                Some((path.to_path_buf(), rate))
            })
            .collect();
        let scope = Scope {
            only: Some(&only),
            blind: false,
        };
        let decided = self.decide(world, &volumes, &rates, scope, now).await;
        {
            // The triggers the decisions just set: the fast loop watches these volumes with them.
            let triggers = self.work.triggers.lock();
            let triggers = triggers.unwrap_or_else(std::sync::PoisonError::into_inner);
            self.watchlist.rearm(&measured, &triggers, &rates);
        }
        self.volumes = volumes;
        Some(self.merge(decided.reports))
    }

    /// Every claim's last report (as the agent serves them), with `fresh` in place of their
    /// claims' own.
    fn merge(&self, fresh: Vec<VolumeReport>) -> Vec<VolumeReport> {
        let mut reports = (*self.work.admin.reports()).clone();
        for report in fresh {
            let same =
                |r: &&mut VolumeReport| r.namespace == report.namespace && r.pvc == report.pvc;
            match reports.iter_mut().find(same) {
                Some(old) => *old = report,
                None => reports.push(report),
            }
        }
        reports
    }
}

/// Puts each crossed volume's numbers on every volume of its PersistentVolume (one filesystem,
/// however many pods mount it here); returns those PersistentVolumes.
fn refresh(volumes: &mut [crate::probe::Volume], crossed: &[(Target, FsStats)]) -> HashSet<String> {
    let by_path: HashMap<&Path, &FsStats> = crossed.iter().map(|(t, s)| (&*t.path, s)).collect();
    let fresh: HashMap<String, FsStats> = volumes
        .iter()
        .filter_map(|v| Some((v.pv.clone()?, **by_path.get(v.path.as_path())?)))
        .collect();
    for v in volumes.iter_mut() {
        if let Some(s) = v.pv.as_ref().and_then(|pv| fresh.get(pv)) {
            v.set_stats(*s);
        }
    }
    fresh.into_keys().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::Prober;
    use std::time::Duration;

    /// Two pods mounting one PersistentVolume here: the numbers one look took go on both (one
    /// filesystem); a look at a volume the last scan did not find changes nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn fresh_numbers_go_on_every_mount_of_their_volume_and_on_no_other() {
        let dir = tempfile::tempdir().unwrap();
        for (pod, pv) in [("u1", "pv-a"), ("u2", "pv-a"), ("u3", "pv-b")] {
            let mount = format!("pods/{pod}/volumes/kubernetes.io~csi/{pv}/mount");
            std::fs::create_dir_all(dir.path().join(mount)).unwrap();
        }
        let prober = Prober::new(dir.path().to_path_buf(), Duration::from_secs(30));
        let mut vols = prober.probe().await.unwrap();
        assert_eq!(vols.len(), 3, "{vols:#?}");
        let a = vols
            .iter()
            .find(|v| v.pv.as_deref() == Some("pv-a"))
            .unwrap();
        let target = a.target().expect("measured through the walk");
        let mut stats = prober
            .remeasure(vec![target.clone()])
            .await
            .remove(0)
            .unwrap();
        stats.measurement.used_bytes = 12345;
        let only = refresh(&mut vols, &[(target, stats)]);
        assert_eq!(only, HashSet::from(["pv-a".to_string()]));
        for v in &vols {
            let used = v.measurement.unwrap().used_bytes;
            assert_eq!(used == 12345, v.pv.as_deref() == Some("pv-a"), "{v:#?}");
        }
        // Gone from the last scan's volumes: nothing to decide on.
        let gone: Vec<_> = vols
            .drain(..)
            .filter(|v| v.pv.as_deref() == Some("pv-b"))
            .collect();
        let other = gone[0].target().unwrap();
        assert!(refresh(&mut vols, &[(other, stats)]).is_empty());
    }
}
