//! The `scan` command's probes of operator-named paths and of the host's filesystems: the same
//! bounded pass as the kubelet volumes', one call with a deadline per path.

use std::path::PathBuf;

use super::mounts::{self, MountEntry};
use super::{Prober, Volume, VolumeMode, bounded, classify, pass, statfs};

impl Prober {
    /// Measures given paths (following symlinks, as `df PATH` does: the operator chose them), in
    /// one bounded pass: resolving a path on a hung mount blocks like its statfs, so both run in
    /// the volume's call, and a stuck path is reported not measured while the rest are measured.
    pub async fn probe_paths(&self, paths: &[PathBuf], mounts: &[MountEntry]) -> Vec<Volume> {
        let index = mounts::MountIndex::new(mounts);
        let results = self.statfs_pass(paths.to_vec(), true).await;
        let mut vols: Vec<Volume> = paths
            .iter()
            .zip(results)
            .map(|(p, r)| {
                let mut v = Volume::new(p.clone(), VolumeMode::Filesystem);
                match r {
                    Ok(Ok((path, s))) => {
                        v.path = path;
                        v.locate(&index);
                        v.set_stats(s);
                    }
                    Ok(Err(e)) => v.findings.push(e),
                    Err(e) if e.is_timeout() => v.timed_out(&e),
                    Err(e) => v.findings.push(format!("statfs: {e}")),
                }
                v
            })
            .collect();
        classify(&mut vols);
        vols
    }

    /// This host's real filesystems, chosen like `df` with no arguments, measured in one
    /// bounded pass; a hung one is listed not measured instead of holding the command.
    pub async fn probe_host(&self, mounts: &[MountEntry]) -> Vec<Volume> {
        let index = mounts::MountIndex::new(mounts);
        let points: Vec<PathBuf> = mounts::host_filesystems(mounts)
            .into_iter()
            .map(|m| m.mount_point.clone())
            .collect();
        let results = self.statfs_pass(points.clone(), false).await;
        let mut vols = Vec::new();
        for (point, r) in points.into_iter().zip(results) {
            let mut v = Volume::new(point, VolumeMode::Filesystem);
            match r {
                Ok(Ok((_, s))) if !s.is_empty() => v.set_stats(s),
                // Zero-block filesystems and ones we may not stat are not shown, as with `df`.
                Ok(_) => continue,
                Err(e) if e.is_timeout() => v.timed_out(&e),
                Err(e) => v.findings.push(format!("statfs: {e}")),
            }
            v.locate(&index);
            vols.push(v);
        }
        classify(&mut vols);
        vols
    }

    /// One `statfs` per path (after resolving it, when `resolve`), each with the deadline.
    async fn statfs_pass(
        &self,
        paths: Vec<PathBuf>,
        resolve: bool,
    ) -> Vec<Result<Result<(PathBuf, statfs::FsStats), String>, bounded::BoundedError>> {
        let _pass = self.pass.lock().await;
        let call = move |p: &PathBuf| {
            let path = if resolve {
                std::fs::canonicalize(p).map_err(|e| format!("cannot resolve path: {e}"))?
            } else {
                p.clone()
            };
            let stats = statfs::statfs_path(&path).map_err(|e| format!("statfs failed: {e}"))?;
            Ok((path, stats))
        };
        let pass = pass::Pass {
            jobs: paths,
            key: PathBuf::as_path,
            call,
        };
        pass::run(&self.busy_paths, self.deadline, pass).await
    }
}
