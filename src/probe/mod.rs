//! The node probe: finds the PVC volumes the kubelet mounted on this node, measures each with
//! statfs, and says which numbers are the volume's own and which are a shared filesystem's.
//!
//! The sync functions here do blocking I/O and are meant for `spawn_blocking` (see
//! [`probe_kubelet_root_async`]); `headroom scan` ([`crate::cmd::scan`]) calls them directly.
//!
//! Safety: under the kubelet root nothing is opened through a symlink ([`safe_open`]), and the
//! only file whose contents are read is CSI's `vol_data.json` (size-capped). Directory listings
//! use `read_dir` with `DirEntry::file_type`, which never follows a symlink; a component swapped
//! for a symlink after listing makes the later `O_NOFOLLOW` open fail, so it is never measured.

pub mod anchor;
pub mod bounded;
pub mod kubelet_dir;
pub mod mounts;
pub mod pass;
mod paths;
pub mod safe_open;
pub mod shared;
pub mod statfs;

use std::path::PathBuf;

use serde::Serialize;

pub use mounts::{MountEntry, read_mountinfo};
pub use shared::classify;

use crate::decide::Measurement;

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("cannot {action} {path}: {source}")]
    Io {
        path: PathBuf,
        action: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} line {line}: cannot parse mount entry: {message}")]
    MountInfo {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("kubelet root {path} is not a directory")]
    NotADirectory { path: PathBuf },
    #[error("the probe's blocking task failed: {0}")]
    Join(#[from] tokio::task::JoinError),
    #[error("reading the mount table and listing {path}: {source}")]
    Discovery {
        path: PathBuf,
        #[source]
        source: bounded::BoundedError,
    },
}

/// Why a volume the probe found has no measurement of its own, when that is the probe's fault
/// rather than the volume's nature (block mode, not mounted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unmeasured {
    /// statfs (or opening the mount) did not answer within the deadline, now or in an earlier
    /// scan whose call is still stuck.
    ProbeTimeout,
}

impl Unmeasured {
    pub fn as_str(self) -> &'static str {
        match self {
            Unmeasured::ProbeTimeout => "probe_timeout",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum VolumeMode {
    Filesystem,
    Block,
}

/// How far a volume's statfs numbers are its own. See [`shared`] for the rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VolumeClass {
    /// A local filesystem on its own device: the numbers are the claim's.
    OwnedBlock,
    /// A network or FUSE filesystem: the numbers are the server's export.
    SharedNetwork,
    /// A directory on a larger filesystem (bind of a subdirectory, a device other PVs use, or
    /// no mount at all): the numbers are the host's disk.
    Directory,
    /// Not enough known to say (block mode, unreadable, an unlisted filesystem type).
    Unknown,
}

impl VolumeClass {
    pub fn as_str(self) -> &'static str {
        match self {
            VolumeClass::OwnedBlock => "owned_block",
            VolumeClass::SharedNetwork => "shared_network",
            VolumeClass::Directory => "directory",
            VolumeClass::Unknown => "unknown",
        }
    }

    /// The numbers are a shared filesystem's, not the claim's: never grow on them.
    pub fn is_shared(self) -> bool {
        matches!(self, VolumeClass::SharedNetwork | VolumeClass::Directory)
    }
}

/// A volume the scan measured, as the fast loop re-measures it: its mount path and the identity
/// of the mount the scan's walk reached there ([`anchor`]). Cheap to clone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub path: std::sync::Arc<std::path::Path>,
    /// `path` below the kubelet root, when the scan walked there from it.
    rel: Option<std::sync::Arc<std::path::Path>>,
    /// The kubelet's directory holding the mount point, when the scan kept it open.
    parent: Option<anchor::Parent>,
    anchor: anchor::Anchor,
}

/// One volume (or, for `scan` without a kubelet root, one filesystem) as measured on this node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Volume {
    pub pod_uid: Option<String>,
    /// The PersistentVolume name (CSI `specVolID`, else the volume directory's name).
    pub pv: Option<String>,
    /// The kubelet plugin directory, e.g. `kubernetes.io~csi`.
    pub plugin: Option<String>,
    pub driver: Option<String>,
    pub volume_handle: Option<String>,
    pub lifecycle_mode: Option<String>,
    /// The mount point (for block volumes, the device map path).
    pub path: PathBuf,
    pub mode: VolumeMode,
    /// `path` is itself a mount point in this mount namespace.
    pub mounted: bool,
    pub fs_type: Option<String>,
    pub source: Option<String>,
    /// `major:minor` of the filesystem holding `path`.
    pub device: Option<String>,
    /// The mount's root within its filesystem (`/` unless it binds a subdirectory).
    pub mount_root: Option<PathBuf>,
    pub block_size: Option<u64>,
    pub inodes_free: Option<u64>,
    pub measurement: Option<Measurement>,
    pub class: VolumeClass,
    /// Volumes of other PVs (or other given paths) on the same device.
    pub shared_with: Vec<PathBuf>,
    pub findings: Vec<String>,
    pub unmeasured: Option<Unmeasured>,
    /// Path components of the mount directory below the kubelet root, for [`kubelet_dir::measure`];
    /// `None` when there is nothing to measure.
    #[serde(skip)]
    pub(crate) mount_rel: Option<std::sync::Arc<[std::ffi::OsString]>>,
    /// What the measurement's symlink-refusing walk reached: what [`Prober::remeasure`] accepts.
    #[serde(skip)]
    pub(crate) anchor: Option<anchor::Anchor>,
    /// The directory holding the mount point, as that walk opened it, when kept.
    #[serde(skip)]
    pub(crate) parent: Option<anchor::Parent>,
}

impl Volume {
    pub fn new(path: PathBuf, mode: VolumeMode) -> Self {
        Volume {
            pod_uid: None,
            pv: None,
            plugin: None,
            driver: None,
            volume_handle: None,
            lifecycle_mode: None,
            path,
            mode,
            mounted: false,
            fs_type: None,
            source: None,
            device: None,
            mount_root: None,
            block_size: None,
            inodes_free: None,
            measurement: None,
            class: VolumeClass::Unknown,
            shared_with: Vec::new(),
            findings: Vec::new(),
            unmeasured: None,
            mount_rel: None,
            anchor: None,
            parent: None,
        }
    }

    /// How the fast loop re-measures this volume; `None` when the scan did not measure it
    /// through the kubelet walk (or the kernel reports no mount id).
    pub fn target(&self) -> Option<Target> {
        Some(Target {
            path: self.path.as_path().into(),
            rel: self
                .mount_rel
                .as_ref()
                .map(|c| c.iter().collect::<PathBuf>().into()),
            parent: self.parent.clone(),
            anchor: self.anchor?,
        })
    }

    /// Fills mount facts from the entry mounted exactly at `path`, or, when there is none, from
    /// the mount that holds it (the volume is then a plain directory on that filesystem).
    pub(crate) fn locate(&mut self, mounts: &mounts::MountIndex) {
        let (entry, exact) = match mounts.at(&self.path) {
            Some(m) => (Some(m), true),
            None => (mounts.containing(&self.path), false),
        };
        self.mounted = exact;
        if let Some(m) = entry {
            self.fs_type = Some(m.fs_type.clone());
            self.source = m.source.clone();
            self.device = Some(m.device.clone());
            if exact {
                self.mount_root = Some(m.root.clone());
                if m.is_subdir_bind() {
                    self.findings.push(format!(
                        "bind mount of directory {} of its filesystem",
                        m.root.display()
                    ));
                }
            } else {
                self.findings.push(format!(
                    "not a mount point: a directory on {} ({} {})",
                    m.mount_point.display(),
                    m.fs_type,
                    m.device
                ));
            }
        } else {
            self.findings
                .push("not a mount point and no mount holds it".to_owned());
        }
    }

    pub(crate) fn set_stats(&mut self, s: statfs::FsStats) {
        self.measurement = Some(s.measurement);
        self.block_size = Some(s.block_size);
        self.inodes_free = Some(s.inodes_free);
    }
}

/// [`probe_kubelet_root`] with this process's mount table, off the async runtime, with the
/// default deadlines.
pub async fn probe_kubelet_root_async(root: PathBuf) -> Result<Vec<Volume>, ProbeError> {
    Prober::new(root, DEFAULT_DEADLINE).probe().await
}

/// Default bound on each blocking probe call.
pub const DEFAULT_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);

/// The agent's probe: discovery (mount table, kubelet directories, `vol_data.json`) in one
/// blocking call, then each volume's statfs with a deadline of its own, on a few blocking
/// workers ([`pass`]). A volume whose call is stuck is reported [`Unmeasured::ProbeTimeout`]
/// and not called again until that call returns; the others are measured as usual.
#[derive(Debug, Clone)]
pub struct Prober {
    root: PathBuf,
    deadline: std::time::Duration,
    busy_paths: bounded::BusyPaths,
    /// One pass at a time (a scan's probe or the fast loop's re-measurement): two passes would
    /// find each other's calls busy and report healthy volumes unmeasured.
    pass: std::sync::Arc<tokio::sync::Mutex<()>>,
    /// The kubelet root as the last scan's walk opened it. The fast loop opens mount points
    /// relative to it: a third of the path walk fewer (the kubelet root's own components) on
    /// every re-measurement. It is the kubelet's directory, never a tenant's volume.
    root_fd: std::sync::Arc<std::sync::Mutex<Option<std::sync::Arc<std::os::fd::OwnedFd>>>>,
    /// How many volumes' parent directories a scan keeps open ([`anchor::Parent`]): a share of
    /// the descriptor limit, so that the sockets and files the agent opens never run out. Two
    /// scans' worth may be open at once (the fast loop's and the new scan's), briefly.
    hold: usize,
    /// The kubelet root as the last scan resolved it, and its mounts as that scan read them
    /// ([`kubelet_dir::mounts_fingerprint`]).
    mounts_seen: std::sync::Arc<std::sync::Mutex<Option<(PathBuf, u64)>>>,
}

impl Prober {
    pub fn new(root: PathBuf, deadline: std::time::Duration) -> Self {
        Prober {
            root,
            deadline,
            busy_paths: bounded::BusyPaths::new(),
            pass: Default::default(),
            root_fd: Default::default(),
            hold: anchor::parents_to_hold(),
            mounts_seen: Default::default(),
        }
    }

    /// Keeps at most `n` volumes' parent directories open per scan ([`anchor::Parent`]); past
    /// that, a volume is re-measured from the kubelet root.
    pub fn keep_parents(mut self, n: usize) -> Self {
        self.hold = n;
        self
    }

    /// Blocking calls that passed their deadline and have not returned yet.
    pub fn stuck_calls(&self) -> usize {
        self.busy_paths.len()
    }

    /// Shared with other readers of the same volumes (the WAL reader), so no path gets a second
    /// call of the same use while one is stuck, and a slow read never refuses a measurement.
    pub fn busy_paths(&self) -> &bounded::BusyPaths {
        &self.busy_paths
    }

    pub fn deadline(&self) -> std::time::Duration {
        self.deadline
    }

    pub async fn probe(&self) -> Result<Vec<Volume>, ProbeError> {
        let _pass = self.pass.lock().await;
        let root = self.root.clone();
        let found = self
            .busy_paths
            .run(&self.root, self.deadline, move || {
                let mounts = read_mountinfo()?;
                kubelet_dir::find(&root, &mounts)
            })
            .await
            .map_err(|source| ProbeError::Discovery {
                path: self.root.clone(),
                source,
            })??;
        *self
            .mounts_seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some((found.root.clone(), found.mounts_print));
        let mut vols = found.volumes;
        self.measure(found.root_fd, &mut vols).await;
        classify(&mut vols);
        Ok(vols)
    }

    /// Whether the kubelet's mounts changed since the last [`Prober::probe`] read them: a claim
    /// mounted or unmounted, a device mounted for a second claim. Which volumes share a device
    /// is that scan's finding; a decision leaning on it must wait for a new scan then. Not
    /// knowing (no scan yet, the table not read within the deadline) counts as changed.
    pub async fn mounts_changed(&self) -> bool {
        let seen = self
            .mounts_seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let Some((root, seen)) = seen else {
            return true;
        };
        let now = self
            .busy_paths
            .run(&self.root, self.deadline, move || {
                read_mountinfo().map(|m| kubelet_dir::mounts_fingerprint(&m, &root))
            })
            .await;
        !matches!(now, Ok(Ok(print)) if print == seen)
    }

    /// Measures again volumes an earlier [`Prober::probe`] found, without walking the kubelet
    /// root: one open of the mount point, refused unless it is still the mount the scan's walk
    /// reached ([`anchor`]), its statfs, with the same deadlines. One result per target, in order.
    pub async fn remeasure(
        &self,
        targets: Vec<Target>,
    ) -> Vec<Result<statfs::FsStats, anchor::RemeasureError>> {
        let _pass = self.pass.lock().await;
        let root = self.last_root();
        let pass = pass::Pass {
            jobs: targets,
            key: |t: &Target| &*t.path,
            call: move |t: &Target| match (&t.parent, &root, &t.rel) {
                (Some(parent), _, _) => parent.remeasure(&t.anchor),
                (None, Some(root), Some(rel)) => anchor::remeasure_at(root, rel, &t.anchor),
                _ => anchor::remeasure(&t.path, &t.anchor),
            },
        };
        pass::run(&self.busy_paths, self.deadline, pass)
            .await
            .into_iter()
            .map(|r| r.unwrap_or_else(|e| Err(anchor::RemeasureError::Bounded(e))))
            .collect()
    }

    /// Each volume's statfs, in one [`pass`]: its own deadline per volume, a few threads for all.
    fn last_root(&self) -> Option<std::sync::Arc<std::os::fd::OwnedFd>> {
        let root = self.root_fd.lock();
        root.unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    async fn measure(&self, root_fd: std::os::fd::OwnedFd, vols: &mut [Volume]) {
        let root_fd = std::sync::Arc::new(root_fd);
        *self
            .root_fd
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(root_fd.clone());
        let (at, jobs): (Vec<usize>, Vec<_>) = vols
            .iter()
            .enumerate()
            .filter_map(|(i, v)| Some((i, (v.path.clone(), v.mount_rel.clone()?))))
            .unzip();
        let call = move |(_, rel): &(PathBuf, std::sync::Arc<[std::ffi::OsString]>)| {
            kubelet_dir::measure_at(&root_fd, rel)
        };
        let mut keep = self.hold;
        let pass = pass::Pass {
            jobs,
            key: |(path, _)| path.as_path(),
            call,
        };
        let results = pass::run(&self.busy_paths, self.deadline, pass).await;
        for (i, r) in at.into_iter().zip(results) {
            let Some(v) = vols.get_mut(i) else { continue };
            match r {
                Ok(Ok(found)) => {
                    v.set_stats(found.stats);
                    v.anchor = found.anchor;
                    // Within the descriptor budget; a volume past it is opened from the root.
                    if keep > 0 && v.anchor.is_some() {
                        v.parent = found.parent;
                        keep -= usize::from(v.parent.is_some());
                    }
                }
                Ok(Err(finding)) => v.findings.push(finding),
                Err(e) if e.is_timeout() => {
                    tracing::warn!(path = %v.path.display(), error = %e, "volume probe timed out");
                    v.timed_out(&e);
                }
                Err(e) => v.findings.push(format!("statfs: {e}")),
            }
        }
    }
}

impl Volume {
    /// A call that did not return within its deadline: not measured, and said so.
    pub(crate) fn timed_out(&mut self, e: &bounded::BoundedError) {
        self.unmeasured = Some(Unmeasured::ProbeTimeout);
        self.findings.push(format!(
            "statfs: {e} ({})",
            Unmeasured::ProbeTimeout.as_str()
        ));
    }
}
