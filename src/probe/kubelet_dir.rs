//! Walking the kubelet root for PVC volumes.
//!
//! Layout (kubelet's own): `pods/<uid>/volumes/<plugin>/<name>/` for filesystem volumes and
//! `pods/<uid>/volumeDevices/<plugin>/<name>` for block volumes. For CSI the mount point is
//! `<name>/mount` with `vol_data.json` beside it; for other plugins (local-volume, nfs, ...) the
//! `<name>` directory is the mount point. Block volumes' CSI metadata lives at
//! `plugins/kubernetes.io/csi/volumeDevices/<name>/data/vol_data.json`. Pod-local plugins
//! (secret, configmap, projected, empty-dir, downward-api, git-repo) never hold a PVC and are
//! skipped.

use std::ffi::{OsStr, OsString};
use std::fs::DirEntry;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use serde::Deserialize;

use nix::dir::{Dir, Type};
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{SFlag, fstatat};

use nix::errno::Errno;

use super::anchor::{Anchor, Parent, anchor_of};
use super::mounts::MountIndex;
use super::safe_open::{ReadError, open_beneath, open_dir_beneath, open_root, read_capped_beneath};
use super::statfs::{FsStats, statfs_fd};
use super::{MountEntry, ProbeError, Volume, VolumeMode};

pub const CSI_PLUGIN: &str = "kubernetes.io~csi";
const POD_LOCAL_PLUGINS: &[&str] = &[
    "kubernetes.io~secret",
    "kubernetes.io~configmap",
    "kubernetes.io~projected",
    "kubernetes.io~empty-dir",
    "kubernetes.io~downward-api",
    "kubernetes.io~git-repo",
];
/// What of the mount table the walk's findings (which volumes share a device) rest on: every
/// mount at or below `root` (the kubelet's) but those of the pod-local plugins the walk skips,
/// in table order. Equal prints mean no claim's volume was mounted, unmounted or mounted again
/// since; a pod's service-account token or secrets mounted, or a container started, do not
/// count.
pub fn mounts_fingerprint(mounts: &[MountEntry], root: &Path) -> u64 {
    use std::hash::{Hash, Hasher};
    let pod_local = |m: &MountEntry| {
        m.mount_point.components().any(|c| {
            POD_LOCAL_PLUGINS
                .iter()
                .any(|p| c.as_os_str() == OsStr::new(p))
        })
    };
    let mut h = std::hash::DefaultHasher::new();
    for m in mounts
        .iter()
        .filter(|m| m.mount_point.starts_with(root) && !pod_local(m))
    {
        m.hash(&mut h);
    }
    h.finish()
}

/// A kubelet directory opened to be listed (and to open files in), never through a symlink.
const LIST: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);
/// Far above any real vol_data.json (a few hundred bytes); a bigger file is not kubelet's.
const VOL_DATA_CAP: u64 = 64 * 1024;

/// CSI's `vol_data.json`, written by the kubelet beside each CSI mount.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct VolData {
    pub driver_name: Option<String>,
    #[serde(rename = "specVolID")]
    pub spec_vol_id: Option<String>,
    pub volume_handle: Option<String>,
    pub node_name: Option<String>,
    pub volume_lifecycle_mode: Option<String>,
}

/// Finds, locates and measures every PVC volume under `root` (classes are set by the caller):
/// [`super::Prober::probe`]'s walk in one call, without its deadlines. The tests' and the fuzz
/// target's entry (`fuzz/fuzz_targets/kubelet_root.rs`), not the agent's.
#[doc(hidden)]
pub fn discover(root: &Path, mounts: &[MountEntry]) -> Result<Vec<Volume>, ProbeError> {
    let found = find(root, mounts)?;
    let mut vols = found.volumes;
    for v in &mut vols {
        if let Some(rel) = v.mount_rel.clone() {
            measure(&found.root_fd, &rel, v);
        }
    }
    Ok(vols)
}

/// The kubelet root's volumes, located but not measured, and the root they were found under.
pub struct Found {
    pub root_fd: OwnedFd,
    /// The root as the walk resolved it (symlinks above it followed: they are the node's, and
    /// mountinfo names mounts by their resolved paths).
    pub root: std::path::PathBuf,
    /// [`mounts_fingerprint`] of the table the walk located the volumes in, below `root`.
    pub mounts_print: u64,
    /// Volumes to measure carry `mount_rel`: pass it to [`measure`].
    pub volumes: Vec<Volume>,
}

/// Finds and locates every PVC volume under `root` without touching anything inside a mount:
/// only the kubelet's own directories are listed (and `vol_data.json` read beside each CSI
/// mount), so a hung volume cannot stall the walk. [`measure`] then visits each mount.
pub fn find(root: &Path, mounts: &[MountEntry]) -> Result<Found, ProbeError> {
    let io = |action| {
        move |source| ProbeError::Io {
            path: root.to_path_buf(),
            action,
            source,
        }
    };
    let root = std::fs::canonicalize(root).map_err(io("resolve the kubelet root"))?;
    if !root.is_dir() {
        return Err(ProbeError::NotADirectory { path: root });
    }
    let root_fd = open_root(&root).map_err(|e| ProbeError::Io {
        path: root.clone(),
        action: "open the kubelet root",
        source: e.into(),
    })?;
    let index = MountIndex::new(mounts);
    let mut out = Vec::new();
    for pod in list_dirs(&root.join("pods")) {
        let uid = pod.file_name();
        for (kind, mode) in [
            ("volumes", VolumeMode::Filesystem),
            ("volumeDevices", VolumeMode::Block),
        ] {
            for plugin in list_dirs(&pod.path().join(kind)) {
                let plugin_name = plugin.file_name();
                if POD_LOCAL_PLUGINS
                    .iter()
                    .any(|p| OsStr::new(p) == plugin_name)
                {
                    continue;
                }
                for entry in list_entries(&plugin.path()) {
                    let rel = [
                        OsStr::new("pods"),
                        &uid,
                        OsStr::new(kind),
                        &plugin_name,
                        &entry.file_name(),
                    ]
                    .map(OsString::from);
                    let mut v = match mode {
                        VolumeMode::Filesystem => {
                            filesystem_volume(&root, &root_fd, &rel, &entry, &index)
                        }
                        VolumeMode::Block => block_volume(&root, &root_fd, &rel, &entry),
                    };
                    v.pod_uid = Some(uid.to_string_lossy().into_owned());
                    v.plugin = Some(plugin_name.to_string_lossy().into_owned());
                    if v.driver.is_none() && plugin_name != CSI_PLUGIN {
                        v.driver = Some(plugin_name.to_string_lossy().replace('~', "/"));
                    }
                    if v.pv.is_none() {
                        v.pv = Some(entry.file_name().to_string_lossy().into_owned());
                    }
                    out.push(v);
                }
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(Found {
        root_fd,
        mounts_print: mounts_fingerprint(mounts, &root),
        root,
        volumes: out,
    })
}

/// Opens the volume's mount directory beneath the root (never through a symlink) and statfs'es
/// it. Both block on a hung mount: run this with a deadline.
pub fn measure(root_fd: &OwnedFd, rel: &[OsString], v: &mut Volume) {
    match measure_at(root_fd, rel) {
        Ok(found) => {
            v.set_stats(found.stats);
            v.anchor = found.anchor;
        }
        Err(finding) => v.findings.push(finding),
    }
}

/// What [`measure_at`] found at a mount point.
#[derive(Debug)]
pub struct Reached {
    pub stats: FsStats,
    /// The identity of what the walk reached (for [`super::anchor::remeasure`]); `None` on a
    /// kernel that reports no mount id.
    pub anchor: Option<Anchor>,
    /// The kubelet's directory holding the mount point, as the walk opened it (never on the
    /// volume), for [`super::anchor::Parent::remeasure`].
    pub parent: Option<Parent>,
}

/// [`measure`] without the volume: its statfs and what the walk reached, or the finding that
/// says why there is none. The mount point's descriptor is closed before returning (an open one
/// would keep the kubelet from unmounting).
pub fn measure_at(root_fd: &OwnedFd, rel: &[OsString]) -> Result<Reached, String> {
    let comps: Vec<&OsStr> = rel.iter().map(OsString::as_os_str).collect();
    let cannot = |e| format!("cannot open the mount directory (symlinks are never followed): {e}");
    let (name, dirs) = comps.split_last().ok_or_else(|| cannot(Errno::EINVAL))?;
    let parent = match dirs {
        [] => None,
        dirs => Some(open_dir_beneath(root_fd, dirs).map_err(cannot)?),
    };
    let fd = match &parent {
        Some(p) => open_dir_beneath(p, &[*name]),
        None => open_dir_beneath(root_fd, &[*name]),
    }
    .map_err(cannot)?;
    let stats = statfs_fd(&fd).map_err(|e| format!("statfs failed: {e}"))?;
    Ok(Reached {
        stats,
        anchor: anchor_of(&fd).ok(),
        parent: parent.map(|p| Parent::new(p, name)),
    })
}

fn filesystem_volume(
    root: &Path,
    root_fd: &OwnedFd,
    rel: &[OsString],
    entry: &DirEntry,
    mounts: &MountIndex,
) -> Volume {
    let is_csi = rel[3] == CSI_PLUGIN;
    let mut comps: Vec<&OsStr> = rel.iter().map(OsString::as_os_str).collect();
    if is_csi {
        comps.push(OsStr::new("mount"));
    }
    let path = comps.iter().fold(root.to_path_buf(), |p, c| p.join(c));
    let mut v = Volume::new(path, VolumeMode::Filesystem);
    if !is_real_dir(entry) {
        v.findings
            .push("volume entry is not a directory (a symlink is never followed)".to_owned());
        return v;
    }
    if is_csi {
        let dir = &comps[..comps.len() - 1];
        let mut data = dir.to_vec();
        data.push(OsStr::new("vol_data.json"));
        apply_vol_data(&mut v, read_capped_beneath(root_fd, &data, VOL_DATA_CAP));
        // A mount point in the table needs no listing: it is the directory the kubelet mounted
        // on (and the measurement refuses a symlink put there since, whatever the listing said).
        // Else the type comes from the kubelet directory's listing, not from a stat of the mount
        // point: that would ask the volume's filesystem, which may hang.
        let mount_type = if mounts.at(&v.path).is_some() {
            Some(Type::Directory)
        } else {
            open_beneath(root_fd, dir, LIST)
                .ok()
                .and_then(|d| child_type(d, OsStr::new("mount")))
        };
        match mount_type {
            None => {
                v.findings
                    .push("no mount directory: the volume is not mounted yet".to_owned());
                return v;
            }
            Some(Type::Symlink) => {
                let target = std::fs::read_link(&v.path)
                    .map(|t| t.display().to_string())
                    .unwrap_or_default();
                v.findings
                    .push(format!("mount is a symlink to {target}: not followed"));
                return v;
            }
            Some(_) => {}
        }
    }
    v.locate(mounts);
    v.mount_rel = Some(comps.iter().map(|c| c.to_os_string()).collect());
    v
}
fn block_volume(root: &Path, root_fd: &OwnedFd, rel: &[OsString], entry: &DirEntry) -> Volume {
    let path = rel.iter().fold(root.to_path_buf(), |p, c| p.join(c));
    let mut v = Volume::new(path, VolumeMode::Block);
    // The kubelet maps a block volume as a symlink to the device; reading the link is not
    // following it, and the device is never opened.
    if entry.file_type().is_ok_and(|t| t.is_symlink()) {
        v.source = std::fs::read_link(entry.path())
            .ok()
            .map(|t| t.to_string_lossy().into_owned());
    }
    v.findings
        .push("block-mode volume: not measured".to_owned());
    if rel[3] == CSI_PLUGIN {
        let meta = ["plugins", "kubernetes.io", "csi", "volumeDevices"].map(OsStr::new);
        let mut comps: Vec<&OsStr> = meta.to_vec();
        comps.push(&rel[4]);
        comps.push(OsStr::new("data"));
        comps.push(OsStr::new("vol_data.json"));
        apply_vol_data(&mut v, read_capped_beneath(root_fd, &comps, VOL_DATA_CAP));
    }
    v
}

fn apply_vol_data(v: &mut Volume, read: Result<Vec<u8>, ReadError>) {
    let bytes = match read {
        Ok(b) => b,
        Err(e) => {
            v.findings.push(format!("vol_data.json: {e}"));
            return;
        }
    };
    match serde_json::from_slice::<VolData>(&bytes) {
        Ok(d) => {
            if d.volume_lifecycle_mode.as_deref() == Some("Ephemeral") {
                v.findings
                    .push("CSI ephemeral inline volume, not a PVC".to_owned());
            }
            v.pv = d.spec_vol_id;
            v.driver = d.driver_name;
            v.volume_handle = d.volume_handle;
            v.lifecycle_mode = d.volume_lifecycle_mode;
        }
        Err(e) => v.findings.push(format!("vol_data.json: invalid: {e}")),
    }
}

/// The type of `dir/name` as its directory listing says (no stat of it when the filesystem
/// reports types, as tmpfs, ext4, xfs and btrfs do; else of the entry itself, never followed).
fn child_type(dir: OwnedFd, name: &OsStr) -> Option<Type> {
    let mut d = Dir::from_fd(dir).ok()?;
    let entry = d
        .iter()
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_bytes() == name.as_encoded_bytes())?;
    match entry.file_type() {
        Some(t) => Some(t),
        None => {
            let st = fstatat(d.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW).ok()?;
            Some(
                match SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) {
                    SFlag::S_IFLNK => Type::Symlink,
                    SFlag::S_IFDIR => Type::Directory,
                    _ => Type::File,
                },
            )
        }
    }
}

fn is_real_dir(e: &DirEntry) -> bool {
    e.file_type().is_ok_and(|t| t.is_dir())
}

/// Subdirectories of `dir` that are directories themselves (never symlinks to one).
fn list_dirs(dir: &Path) -> Vec<DirEntry> {
    list_entries(dir).into_iter().filter(is_real_dir).collect()
}

fn list_entries(dir: &Path) -> Vec<DirEntry> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot list kubelet directory; its volumes are skipped");
            return Vec::new();
        }
    };
    let mut v: Vec<DirEntry> = rd.filter_map(Result::ok).collect();
    v.sort_by_key(DirEntry::file_name);
    v
}

#[cfg(test)]
#[path = "kubelet_dir_tests.rs"]
mod tests;
