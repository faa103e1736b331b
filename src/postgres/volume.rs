//! WAL facts read from the volume itself: no credentials, metadata only (no file is opened).
//!
//! The volume belongs to a tenant, who may plant symlinks (to another tenant's volume, to the
//! host), `..` tricks, FIFOs or millions of entries. So every directory below the mount is opened
//! relative to the mount's descriptor with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, or,
//! on kernels before 5.6, one `O_NOFOLLOW` component at a time; entries are only `fstatat`ed
//! without following (a FIFO is never opened), and no directory is read past [`MAX_ENTRIES`].

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use jiff::Timestamp;
use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat, readlinkat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstatat};

use super::lsn::is_segment_name;
use crate::probe::safe_open;

/// Entries read from one directory at most: a real `pg_wal` holds a few thousand even with
/// archiving broken for days; more is a tenant making the agent work, and an error.
pub const MAX_ENTRIES: usize = 50_000;

#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error(
        "{path}: no Postgres data directory (PG_VERSION within two levels) and no pg_wal directory"
    )]
    NotFound { path: PathBuf },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path}: more than {cap} entries; not read further")]
    TooManyEntries { path: PathBuf, cap: usize },
}

pub(super) fn io_err(path: &Path) -> impl FnOnce(Errno) -> VolumeError + '_ {
    move |e| VolumeError::Io {
        path: path.to_path_buf(),
        source: io::Error::from(e),
    }
}

/// Where a volume's WAL is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WalLocation {
    /// A `pg_wal` directory on this volume.
    Here(PathBuf),
    /// `pg_wal` is a symlink: WAL lives on another volume, measured through that volume's own
    /// mount. The link is read, never followed.
    Elsewhere { link: PathBuf, target: PathBuf },
}

/// What `pg_wal` holds, from directory metadata.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WalDirStats {
    pub pg_wal: PathBuf,
    /// `archive_status/*.ready`: segments waiting to be archived.
    pub ready_files: u64,
    /// `archive_status/*.done`: their presence shows archiving has been on.
    pub done_files: u64,
    /// Age of the oldest `.ready` (its mtime is when the segment was completed).
    pub oldest_ready_seconds: Option<u64>,
    pub segment_files: u64,
    pub segment_bytes: u64,
    /// The segment written last (newest mtime; recycled segments keep the mtime of their last
    /// use under a future name, so the highest name is not the current one).
    pub newest_segment: Option<String>,
}

/// What a volume says about WAL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumeWal {
    Here(WalDirStats),
    Elsewhere { link: PathBuf, target: PathBuf },
}

/// A path below an opened volume root: components, and how to show it.
#[derive(Debug, Clone)]
pub(super) struct Rel {
    pub(super) parts: Vec<OsString>,
    pub(super) shown: PathBuf,
}

impl Rel {
    pub(super) fn root(mount: &Path) -> Rel {
        Rel {
            parts: Vec::new(),
            shown: mount.to_path_buf(),
        }
    }

    pub(super) fn join(&self, name: &OsStr) -> Rel {
        let mut parts = self.parts.clone();
        parts.push(name.to_os_string());
        Rel {
            parts,
            shown: self.shown.join(name),
        }
    }
}

/// Opens directory `rel` below `root` for reading, refusing symlinks, `..` and anything that
/// resolves outside `root` (see [`safe_open::open_beneath`], which also holds the fallback for
/// kernels or seccomp profiles without `openat2`).
pub(super) fn open_dir(root: &OwnedFd, rel: &Rel) -> Result<OwnedFd, Errno> {
    let read = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    if rel.parts.is_empty() {
        return openat(root.as_fd(), ".", read, Mode::empty());
    }
    let parts: Vec<&OsStr> = rel.parts.iter().map(OsString::as_os_str).collect();
    safe_open::open_beneath(root, &parts, read)
}

/// Metadata of `name` in `dir`, the entry itself if it is a symlink.
pub(super) fn stat_at(dir: &impl AsFd, name: &OsStr) -> Result<FileStat, Errno> {
    fstatat(dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW)
}

pub(super) fn kind(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits())
}

/// Names in directory `dir` (`.` and `..` left out), at most [`MAX_ENTRIES`].
pub(super) fn list(dir: OwnedFd, shown: &Path) -> Result<(Dir, Vec<OsString>), VolumeError> {
    let mut d = Dir::from_fd(dir).map_err(io_err(shown))?;
    let mut names = Vec::new();
    for entry in d.iter() {
        let entry = entry.map_err(io_err(shown))?;
        let name = OsStr::from_bytes(entry.file_name().to_bytes());
        if name == "." || name == ".." {
            continue;
        }
        if names.len() == MAX_ENTRIES {
            return Err(VolumeError::TooManyEntries {
                path: shown.to_path_buf(),
                cap: MAX_ENTRIES,
            });
        }
        names.push(name.to_os_string());
    }
    Ok((d, names))
}

pub(super) fn is_file_at(root: &OwnedFd, dir: &Rel, name: &str) -> bool {
    open_dir(root, dir)
        .and_then(|d| stat_at(&d, OsStr::new(name)))
        .is_ok_and(|st| kind(&st) == SFlag::S_IFREG)
}

/// Finds the WAL directory of a data directory, a volume mount holding one (CloudNativePG's
/// `<mount>/pgdata`, or `PG_VERSION` within two levels), or a WAL volume mount (`<mount>/pg_wal`,
/// or the mount being `pg_wal` itself). Symlinks are never followed.
pub fn locate(mount: &Path) -> Result<WalLocation, VolumeError> {
    let root = safe_open::open_root(mount).map_err(io_err(mount))?;
    Ok(match locate_in(&root, mount)? {
        Found::Here(rel) => WalLocation::Here(rel.shown),
        Found::Elsewhere { link, target } => WalLocation::Elsewhere { link, target },
    })
}

enum Found {
    Here(Rel),
    Elsewhere { link: PathBuf, target: PathBuf },
}

/// The data directory on a volume: the mount itself, CloudNativePG's `<mount>/pgdata`, or the
/// shallowest directory within two levels holding `PG_VERSION`.
pub(super) fn find_datadir(root: &OwnedFd, mount: &Path) -> Result<Option<Rel>, VolumeError> {
    let top = Rel::root(mount);
    let pgdata = top.join(OsStr::new("pgdata"));
    if is_file_at(root, &top, "PG_VERSION") {
        Ok(Some(top))
    } else if is_file_at(root, &pgdata, "PG_VERSION") {
        Ok(Some(pgdata))
    } else {
        find_pg_version(root, &top, 2)
    }
}

fn locate_in(root: &OwnedFd, mount: &Path) -> Result<Found, VolumeError> {
    let top = Rel::root(mount);
    if let Some(datadir) = find_datadir(root, mount)? {
        return pg_wal_in(root, &datadir);
    }
    let top_fd = open_dir(root, &top).map_err(io_err(mount))?;
    if stat_at(&top_fd, OsStr::new("pg_wal")).is_ok() {
        return pg_wal_in(root, &top);
    }
    let status = stat_at(&top_fd, OsStr::new("archive_status"));
    if status.is_ok_and(|st| kind(&st) == SFlag::S_IFDIR) {
        return Ok(Found::Here(top));
    }
    Err(VolumeError::NotFound {
        path: mount.to_path_buf(),
    })
}

/// `pg_wal` in `parent`: here if a directory, elsewhere (the link read, not followed) if a
/// symlink.
fn pg_wal_in(root: &OwnedFd, parent: &Rel) -> Result<Found, VolumeError> {
    let wal = parent.join(OsStr::new("pg_wal"));
    let dir = open_dir(root, parent).map_err(io_err(&parent.shown))?;
    let st = stat_at(&dir, OsStr::new("pg_wal")).map_err(io_err(&wal.shown))?;
    match kind(&st) {
        SFlag::S_IFLNK => {
            let target = readlinkat(dir.as_fd(), "pg_wal").map_err(io_err(&wal.shown))?;
            Ok(Found::Elsewhere {
                link: wal.shown,
                target: PathBuf::from(target),
            })
        }
        SFlag::S_IFDIR => Ok(Found::Here(wal)),
        _ => Err(VolumeError::Io {
            path: wal.shown,
            source: io::Error::other("not a directory"),
        }),
    }
}

/// Breadth-first: the shallowest data directory wins; directories are visited in name order so
/// the answer does not depend on readdir order.
fn find_pg_version(root: &OwnedFd, top: &Rel, depth: u32) -> Result<Option<Rel>, VolumeError> {
    let mut level = vec![top.clone()];
    for _ in 0..depth {
        let mut next = Vec::new();
        for dir in &level {
            let Ok(fd) = open_dir(root, dir) else {
                continue;
            };
            let (d, names) = list(fd, &dir.shown)?;
            let mut subdirs: Vec<Rel> = names
                .iter()
                .filter(|n| stat_at(&d, n).is_ok_and(|st| kind(&st) == SFlag::S_IFDIR))
                .map(|n| dir.join(n))
                .collect();
            subdirs.sort_by(|a, b| a.parts.cmp(&b.parts));
            if let Some(found) = subdirs.iter().find(|s| is_file_at(root, s, "PG_VERSION")) {
                return Ok(Some(found.clone()));
            }
            next.extend(subdirs);
            if next.len() > MAX_ENTRIES {
                return Err(VolumeError::TooManyEntries {
                    path: top.shown.clone(),
                    cap: MAX_ENTRIES,
                });
            }
        }
        level = next;
    }
    Ok(None)
}

/// Counts `.ready`/`.done` markers and WAL segment bytes in `pg_wal`, from metadata only.
/// Files that vanish mid-walk (Postgres recycles segments) are skipped.
pub fn read_wal_dir(pg_wal: &Path, now: Timestamp) -> Result<WalDirStats, VolumeError> {
    let root = safe_open::open_root(pg_wal).map_err(io_err(pg_wal))?;
    read_wal_in(&root, &Rel::root(pg_wal), now)
}

fn read_wal_in(root: &OwnedFd, wal: &Rel, now: Timestamp) -> Result<WalDirStats, VolumeError> {
    let mut stats = WalDirStats {
        pg_wal: wal.shown.clone(),
        ..Default::default()
    };
    let fd = open_dir(root, wal).map_err(io_err(&wal.shown))?;
    let (d, names) = list(fd, &wal.shown)?;
    let mut newest: Option<((i64, i64), &str)> = None;
    for name in &names {
        let Some(text) = name.to_str().filter(|n| is_segment_name(n)) else {
            continue;
        };
        match stat_at(&d, name) {
            Ok(st) if kind(&st) == SFlag::S_IFREG => {
                stats.segment_files += 1;
                stats.segment_bytes += u64::try_from(st.st_size).unwrap_or(0);
                let key = ((st.st_mtime, st.st_mtime_nsec), text);
                if newest.is_none_or(|n| key > n) {
                    newest = Some(key);
                }
            }
            Ok(_) | Err(Errno::ENOENT) => {}
            Err(e) => return Err(io_err(&wal.shown.join(name))(e)),
        }
    }
    stats.newest_segment = newest.map(|(_, n)| n.to_string());
    let status = wal.join(OsStr::new("archive_status"));
    let fd = match open_dir(root, &status) {
        Ok(fd) => fd,
        // No archive_status: nothing was ever marked for archiving.
        Err(Errno::ENOENT) => return Ok(stats),
        Err(e) => return Err(io_err(&status.shown)(e)),
    };
    let (d, names) = list(fd, &status.shown)?;
    let now_secs = now.as_second();
    let mut oldest: Option<i64> = None;
    for name in &names {
        let Some(text) = name.to_str() else { continue };
        if text.ends_with(".done") {
            stats.done_files += 1;
            continue;
        }
        if !text.ends_with(".ready") {
            continue;
        }
        let mtime = match stat_at(&d, name) {
            Ok(st) => st.st_mtime,
            // Archived between readdir and stat: no longer pending.
            Err(Errno::ENOENT) => continue,
            Err(e) => return Err(io_err(&status.shown.join(name))(e)),
        };
        stats.ready_files += 1;
        oldest = Some(oldest.map_or(mtime, |o| o.min(mtime)));
    }
    stats.oldest_ready_seconds = oldest.map(|t| u64::try_from(now_secs - t).unwrap_or(0));
    Ok(stats)
}

/// Locates and reads the WAL of a volume mount or data directory.
pub fn inspect(mount: &Path, now: Timestamp) -> Result<VolumeWal, VolumeError> {
    inspect_in_pod(mount, &InPod::default(), now)
}

/// Where the pod mounts the volume being read, so that a `pg_wal` link pointing back into it is
/// read there: Crunchy PGO keeps WAL in `/pgdata/pg<N>_wal` beside the data directory (on the
/// same volume), or in `/pgwal/pg<N>_wal` on a WAL volume (`internal/postgres/config.go`,
/// `WALDirectory`). The link's target is mapped onto the volume's own mount and opened below it,
/// never followed.
#[derive(Debug, Clone, Default)]
pub struct InPod {
    /// The volume's mount path in the pod's container.
    pub mounted_at: Option<PathBuf>,
    /// The data directory's `pg_wal` link target, when the volume read is a WAL volume.
    pub wal_link: Option<PathBuf>,
}

/// [`inspect`], with `pg_wal` links that lead into this volume read where they lead.
pub fn inspect_in_pod(mount: &Path, pod: &InPod, now: Timestamp) -> Result<VolumeWal, VolumeError> {
    let root = safe_open::open_root(mount).map_err(io_err(mount))?;
    let into_this = |target: &Path| mapped(&root, mount, pod.mounted_at.as_deref(), target);
    let found = match locate_in(&root, mount) {
        Ok(Found::Elsewhere { link, target }) => match into_this(&target) {
            Some(rel) => Found::Here(rel),
            None => Found::Elsewhere { link, target },
        },
        Err(VolumeError::NotFound { path }) => pod
            .wal_link
            .as_deref()
            .and_then(into_this)
            .map(Found::Here)
            .ok_or(VolumeError::NotFound { path })?,
        other => other?,
    };
    match found {
        Found::Here(wal) => Ok(VolumeWal::Here(read_wal_in(&root, &wal, now)?)),
        Found::Elsewhere { link, target } => Ok(VolumeWal::Elsewhere { link, target }),
    }
}

/// `target` (an absolute path in the pod) as a directory below this volume's root, when it lies
/// below the volume's mount path in the pod: plain names only (no `..`), opened without
/// following a symlink.
fn mapped(root: &OwnedFd, mount: &Path, at: Option<&Path>, target: &Path) -> Option<Rel> {
    let rest = target.strip_prefix(at.filter(|a| a.is_absolute())?).ok()?;
    let mut rel = Rel::root(mount);
    for c in rest.components() {
        match c {
            std::path::Component::Normal(name) => rel = rel.join(name),
            _ => return None,
        }
    }
    if rel.parts.is_empty() {
        return None;
    }
    open_dir(root, &rel).ok().map(|_| rel)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::{self, File};
    use std::os::unix::fs::symlink;
    use std::time::SystemTime;

    fn touch(p: &Path, age_secs: u64, now: Timestamp) {
        let f = File::create(p).unwrap();
        let t = SystemTime::from(now) - std::time::Duration::from_secs(age_secs);
        f.set_modified(t).unwrap();
    }

    fn datadir(root: &Path) -> PathBuf {
        fs::create_dir_all(root.join("pg_wal/archive_status")).unwrap();
        fs::write(root.join("PG_VERSION"), "15\n").unwrap();
        root.join("pg_wal")
    }

    #[test]
    fn locates_cnpg_nested_wal_volume_and_bare_pg_wal() {
        let t = tempfile::tempdir().unwrap();
        let cnpg = t.path().join("cnpg");
        let wal = datadir(&cnpg.join("pgdata"));
        assert_eq!(locate(&cnpg).unwrap(), WalLocation::Here(wal));

        let zalando = t.path().join("zalando");
        let wal = datadir(&zalando.join("pgroot/data"));
        fs::create_dir_all(zalando.join("aaa/bbb/ccc")).unwrap();
        assert_eq!(locate(&zalando).unwrap(), WalLocation::Here(wal));

        let walvol = t.path().join("walvol");
        fs::create_dir_all(walvol.join("pg_wal/archive_status")).unwrap();
        assert_eq!(
            locate(&walvol).unwrap(),
            WalLocation::Here(walvol.join("pg_wal"))
        );
        let inner = walvol.join("pg_wal");
        assert_eq!(locate(&inner).unwrap(), WalLocation::Here(inner.clone()));

        let deep = t.path().join("deep");
        datadir(&deep.join("a/b/c"));
        assert!(matches!(locate(&deep), Err(VolumeError::NotFound { .. })));
    }

    #[test]
    fn symlinked_pg_wal_is_not_followed() {
        let t = tempfile::tempdir().unwrap();
        let data = t.path().join("data");
        fs::create_dir_all(&data).unwrap();
        fs::write(data.join("PG_VERSION"), "15\n").unwrap();
        let other = t.path().join("walvol/pg_wal");
        fs::create_dir_all(other.join("archive_status")).unwrap();
        File::create(other.join("archive_status/000000010000000000000001.ready")).unwrap();
        symlink(&other, data.join("pg_wal")).unwrap();
        let got = inspect(&data, Timestamp::now()).unwrap();
        assert_eq!(
            got,
            VolumeWal::Elsewhere {
                link: data.join("pg_wal"),
                target: other
            }
        );
    }

    #[test]
    fn counts_ready_oldest_age_and_segment_bytes() {
        let t = tempfile::tempdir().unwrap();
        let wal = datadir(t.path());
        let now = Timestamp::from_second(2_000_000_000).unwrap();
        for (i, age) in [(1, 900), (2, 30), (3, 5)] {
            let seg = format!("00000001000000000000000{i}");
            fs::write(wal.join(&seg), vec![0u8; 1000 * i]).unwrap();
            touch(&wal.join(format!("archive_status/{seg}.ready")), age, now);
        }
        fs::write(wal.join("00000001000000000000000A"), vec![0u8; 10]).unwrap();
        File::create(wal.join("archive_status/00000001000000000000000A.done")).unwrap();
        // Not segments: history files, partial segments, temp files, a symlink.
        fs::write(wal.join("00000002.history"), "x").unwrap();
        fs::write(wal.join("00000001000000000000000B.partial"), vec![0u8; 99]).unwrap();
        symlink(
            wal.join("000000010000000000000001"),
            wal.join("0000000100000000000000FF"),
        )
        .unwrap();
        let s = read_wal_dir(&wal, now).unwrap();
        assert_eq!(s.ready_files, 3);
        assert_eq!(s.done_files, 1);
        assert_eq!(s.oldest_ready_seconds, Some(900));
        assert_eq!(s.segment_files, 4);
        assert_eq!(s.segment_bytes, 6010);
    }

    #[test]
    fn future_mtime_is_age_zero_and_empty_status_is_none() {
        let t = tempfile::tempdir().unwrap();
        let wal = datadir(t.path());
        let now = Timestamp::from_second(2_000_000_000).unwrap();
        assert_eq!(read_wal_dir(&wal, now).unwrap().oldest_ready_seconds, None);
        let f = File::create(wal.join("archive_status/000000010000000000000001.ready")).unwrap();
        f.set_modified(SystemTime::from(now) + std::time::Duration::from_secs(60))
            .unwrap();
        assert_eq!(
            read_wal_dir(&wal, now).unwrap().oldest_ready_seconds,
            Some(0)
        );
    }

    #[test]
    fn missing_directory_is_an_error_naming_it() {
        let err = read_wal_dir(Path::new("/nonexistent/pg_wal"), Timestamp::now()).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/pg_wal"), "{err}");
    }
}
