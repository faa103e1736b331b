//! Re-measuring a volume the scan found, cheaply and without trusting the path twice.
//!
//! The scan reaches each mount through a walk that refuses every symlink ([`super::safe_open`])
//! and records the identity of what it reached: the mount's id (`statx` `STATX_MNT_ID_UNIQUE`,
//! never reused; `STATX_MNT_ID` before Linux 6.8) and the directory's device and inode. Between
//! scans the fast loop opens the same path with `O_PATH | O_NOFOLLOW` (one plain open on every
//! kernel and seccomp profile), relative to the kubelet root descriptor that walk started from
//! (absolute when there is none), and takes the numbers only when that descriptor has the
//! recorded identity; `fstatfs` then reads the same descriptor, so the identity and the numbers
//! cannot belong to two different mounts. The descriptor is closed before returning: one held
//! on a tenant volume would keep the kubelet from unmounting it.
//!
//! Why that is enough: nothing below the mount point is ever resolved, so what a tenant can
//! write (its volume) cannot redirect the open, and `O_NOFOLLOW` refuses a symlink at the mount
//! point itself. The components above it are the kubelet's; whatever happens to them (a symlink
//! swapped in, a bind mount over a parent, the volume unmounted so that the path now answers for
//! the host's filesystem, another filesystem mounted in its place), the open reaches some
//! other mount or directory and is refused as [`RemeasureError::Moved`]. A legacy (reusable)
//! mount id cannot match the host's filesystem either: that mount was alive beside the volume's
//! when the identity was recorded, so its id differs, and it never changes. Only a mount made
//! after the volume's was gone, at the kubelet's own mount point, could take a recycled id.
//!
//! The scan also keeps the directory that holds the mount point open ([`Parent`]; in
//! `pods/<uid>/volumes/kubernetes.io~csi/<pv>/`, the kubelet's `<pv>` directory, beside its
//! `vol_data.json`), as its walk reached it, and the loop opens the mount point's one name from
//! there: the path walk is what a re-measurement spends most of its kernel time on, a dentry
//! lookup and a permission check per component. That descriptor is on the kubelet's filesystem,
//! never on a volume, so it keeps nothing mounted; the kubelet removes the directory after an
//! unmount all the same (the descriptor then finds no mount point and the volume waits for the
//! next scan). It goes with the next scan's targets. Anything mounted or swapped in above it
//! since the scan cannot redirect it: the open starts below, at the directory the scan's
//! symlink-refusing walk reached, and the identity check still applies.

use std::ffi::OsStr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;

use nix::errno::Errno;
use nix::fcntl::{open, openat};
use nix::sys::resource::{Resource, getrlimit, setrlimit};
use nix::sys::stat::Mode;

use super::bounded::BoundedError;
use super::safe_open::WALK;
use super::statfs::{FsStats, statfs_fd};

/// What the scan's walk reached for a volume: re-measurement accepts only this.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Anchor {
    mount_id: u64,
    /// `mount_id` is the never-reused 64-bit id (Linux 6.8+), else the legacy one.
    unique: bool,
    dev_major: u32,
    dev_minor: u32,
    ino: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RemeasureError {
    #[error("cannot open the mount point (a symlink is never followed): {0}")]
    Open(Errno),
    #[error("cannot read the mount point's identity: {0}")]
    Identity(Errno),
    #[error(
        "the path no longer leads to the mount the scan found (unmounted, replaced or \
         over-mounted): not measured until the next scan"
    )]
    Moved,
    #[error("statfs failed: {0}")]
    Statfs(Errno),
    #[error("statfs: {0}")]
    Bounded(BoundedError),
}

impl RemeasureError {
    /// The call did not answer in time, now or in an earlier pass whose call is still stuck.
    pub fn is_timeout(&self) -> bool {
        matches!(self, RemeasureError::Bounded(e) if e.is_timeout())
    }
}

/// The identity of what `fd` refers to; `ENOSYS` when the kernel reports no mount id (before
/// Linux 5.8): such a volume is measured by scans only.
pub fn anchor_of<Fd: AsFd>(fd: Fd) -> Result<Anchor, Errno> {
    // SAFETY: statx fills the zeroed plain-data struct; the path is a valid empty C string and
    // the descriptor is borrowed for the call.
    let (r, stx) = unsafe {
        let mut stx: libc::statx = std::mem::zeroed();
        let r = libc::statx(
            fd.as_fd().as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
            libc::STATX_INO | libc::STATX_MNT_ID | libc::STATX_MNT_ID_UNIQUE,
            &mut stx,
        );
        (r, stx)
    };
    if r != 0 {
        return Err(Errno::last());
    }
    let unique = stx.stx_mask & libc::STATX_MNT_ID_UNIQUE != 0;
    if !unique && stx.stx_mask & libc::STATX_MNT_ID == 0 {
        return Err(Errno::ENOSYS);
    }
    Ok(Anchor {
        mount_id: stx.stx_mnt_id,
        unique,
        dev_major: stx.stx_dev_major,
        dev_minor: stx.stx_dev_minor,
        ino: stx.stx_ino,
    })
}

/// statfs of the mount at `path`, only when it is still the one `anchor` names.
pub fn remeasure(path: &Path, anchor: &Anchor) -> Result<FsStats, RemeasureError> {
    let fd = open(path, WALK, Mode::empty()).map_err(RemeasureError::Open)?;
    checked_statfs(&fd, anchor)
}

fn checked_statfs<Fd: AsFd>(fd: Fd, anchor: &Anchor) -> Result<FsStats, RemeasureError> {
    let now = anchor_of(fd.as_fd()).map_err(RemeasureError::Identity)?;
    if now != *anchor {
        return Err(RemeasureError::Moved);
    }
    statfs_fd(fd.as_fd()).map_err(RemeasureError::Statfs)
}

/// [`remeasure`] of the mount at `rel` below `dir` (the kubelet root the scan walked from): the
/// same open and the same identity check, with fewer components to resolve.
pub fn remeasure_at<Fd: AsFd>(
    dir: Fd,
    rel: &Path,
    anchor: &Anchor,
) -> Result<FsStats, RemeasureError> {
    let fd = openat(dir, rel, WALK, Mode::empty()).map_err(RemeasureError::Open)?;
    checked_statfs(&fd, anchor)
}

/// The directory holding a volume's mount point, kept open by the scan for the fast loop, and the
/// mount point's name in it. Equal only to itself (the same descriptor).
#[derive(Debug, Clone)]
pub struct Parent {
    dir: Arc<OwnedFd>,
    name: Arc<OsStr>,
}

impl PartialEq for Parent {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.dir, &other.dir) && self.name == other.name
    }
}

impl Eq for Parent {}

impl Parent {
    pub fn new(dir: OwnedFd, name: &OsStr) -> Self {
        Parent {
            dir: Arc::new(dir),
            name: name.into(),
        }
    }

    /// [`remeasure`] of the mount point named in this directory: one component to resolve.
    pub fn remeasure(&self, anchor: &Anchor) -> Result<FsStats, RemeasureError> {
        remeasure_at(&*self.dir, Path::new(&*self.name), anchor)
    }
}

/// How many [`Parent`] descriptors a scan may keep: an eighth of the soft descriptor limit
/// (raised to the hard one at start, [`raise_descriptor_limit`]), so a scan's and the one
/// before it stay under a quarter and the agent's sockets and files never run out.
pub fn parents_to_hold() -> usize {
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, _)) => usize::try_from(soft / 8).unwrap_or(usize::MAX),
        Err(_) => 0,
    }
}

/// Raises the soft descriptor limit to the hard one, as Go's runtime does for every Go daemon:
/// container runtimes (containerd 2) start containers at a soft 1024, which 500 volumes'
/// [`Parent`] descriptors would crowd. A failure leaves the limit, and [`parents_to_hold`]
/// follows whatever it is.
pub fn raise_descriptor_limit() {
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE)
        && soft < hard
        && let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard)
    {
        tracing::debug!(error = %e, soft, hard, "descriptor limit not raised");
    }
}

/// The anchor of `path` as a plain open finds it: for tests that compare it with the walk's.
pub fn anchor_at(path: &Path) -> Result<Anchor, Errno> {
    let fd = open(path, WALK, Mode::empty())?;
    anchor_of(&fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_keeps_its_anchor_and_another_has_its_own() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("a")).unwrap();
        std::fs::create_dir(dir.path().join("b")).unwrap();
        let a = anchor_at(&dir.path().join("a")).unwrap();
        assert_eq!(anchor_at(&dir.path().join("a")).unwrap(), a);
        let b = anchor_at(&dir.path().join("b")).unwrap();
        assert_ne!(a, b, "same mount, another inode");
        let s = remeasure(&dir.path().join("a"), &a).unwrap();
        assert!(s.blocks > 0);
        assert_eq!(
            remeasure(&dir.path().join("b"), &a),
            Err(RemeasureError::Moved)
        );
        // Swapped for a symlink to the very directory it was: refused, not followed.
        std::fs::rename(dir.path().join("a"), dir.path().join("a.real")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("a.real"), dir.path().join("a")).unwrap();
        assert!(matches!(
            remeasure(&dir.path().join("a"), &a),
            Err(RemeasureError::Open(Errno::ENOTDIR | Errno::ELOOP))
        ));
    }

    /// A scan keeps the directories of at most its budget of volumes open; the rest are looked
    /// at from the kubelet root, and every one is measured alike.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_scan_keeps_directories_up_to_its_budget_and_looks_at_the_rest_from_the_root() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..3 {
            let mount = format!("pods/u{i}/volumes/kubernetes.io~csi/pv-{i}/mount");
            std::fs::create_dir_all(dir.path().join(mount)).unwrap();
        }
        let root = dir.path().to_path_buf();
        let prober =
            crate::probe::Prober::new(root, std::time::Duration::from_secs(30)).keep_parents(2);
        let vols = prober.probe().await.unwrap();
        assert_eq!(vols.len(), 3, "{vols:#?}");
        assert_eq!(vols.iter().filter(|v| v.parent.is_some()).count(), 2);
        let targets: Vec<_> = vols.iter().filter_map(|v| v.target()).collect();
        assert_eq!(targets.len(), 3);
        for (v, r) in vols.iter().zip(prober.remeasure(targets).await) {
            let m = r
                .unwrap_or_else(|e| panic!("{}: {e}", v.path.display()))
                .measurement;
            assert_eq!(m.capacity_bytes, v.measurement.unwrap().capacity_bytes);
        }
    }

    /// Raised to the hard limit, whatever the soft one was (here: one below it).
    #[test]
    fn the_soft_descriptor_limit_is_raised_to_the_hard_one() {
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        if soft == hard && hard > 1024 {
            // Never below what the other tests of this process may hold open.
            setrlimit(Resource::RLIMIT_NOFILE, hard - 1, hard).unwrap();
        }
        raise_descriptor_limit();
        assert_eq!(getrlimit(Resource::RLIMIT_NOFILE).unwrap(), (hard, hard));
        assert_eq!(
            parents_to_hold(),
            usize::try_from(hard / 8).unwrap_or(usize::MAX)
        );
    }
}
