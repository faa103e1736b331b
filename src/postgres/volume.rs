//! WAL facts read from the volume itself: no credentials, metadata only (no file is opened).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use jiff::Timestamp;

#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error(
        "{path}: no Postgres data directory (PG_VERSION within two levels) and no pg_wal directory"
    )]
    NotFound { path: PathBuf },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> VolumeError + '_ {
    move |source| VolumeError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Where a volume's WAL is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WalLocation {
    /// A `pg_wal` directory on this volume.
    Here(PathBuf),
    /// `pg_wal` is a symlink: WAL lives on another volume, measured through that volume's own mount.
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
}

/// What a volume says about WAL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumeWal {
    Here(WalDirStats),
    Elsewhere { link: PathBuf, target: PathBuf },
}

/// Finds the WAL directory of a data directory, a volume mount holding one (CloudNativePG's
/// `<mount>/pgdata`, or `PG_VERSION` within two levels), or a WAL volume mount (`<mount>/pg_wal`,
/// or the mount being `pg_wal` itself). Symlinks are never followed.
pub fn locate(mount: &Path) -> Result<WalLocation, VolumeError> {
    let candidates = [mount.to_path_buf(), mount.join("pgdata")];
    let datadir = match candidates.iter().find(|d| is_file(&d.join("PG_VERSION"))) {
        Some(d) => Some(d.clone()),
        None => find_pg_version(mount, 2)?,
    };
    if let Some(datadir) = datadir {
        return pg_wal_in(&datadir.join("pg_wal"));
    }
    let wal = mount.join("pg_wal");
    if fs::symlink_metadata(&wal).is_ok() {
        return pg_wal_in(&wal);
    }
    if is_dir(&mount.join("archive_status")) {
        return Ok(WalLocation::Here(mount.to_path_buf()));
    }
    Err(VolumeError::NotFound {
        path: mount.to_path_buf(),
    })
}

fn pg_wal_in(pg_wal: &Path) -> Result<WalLocation, VolumeError> {
    let meta = fs::symlink_metadata(pg_wal).map_err(io_err(pg_wal))?;
    if meta.file_type().is_symlink() {
        let target = fs::read_link(pg_wal).map_err(io_err(pg_wal))?;
        return Ok(WalLocation::Elsewhere {
            link: pg_wal.to_path_buf(),
            target,
        });
    }
    Ok(WalLocation::Here(pg_wal.to_path_buf()))
}

fn is_file(p: &Path) -> bool {
    fs::symlink_metadata(p).is_ok_and(|m| m.is_file())
}

fn is_dir(p: &Path) -> bool {
    fs::symlink_metadata(p).is_ok_and(|m| m.is_dir())
}

/// Breadth-first: the shallowest data directory wins; directories are visited in name order so
/// the answer does not depend on readdir order.
fn find_pg_version(root: &Path, depth: u32) -> Result<Option<PathBuf>, VolumeError> {
    let mut level = vec![root.to_path_buf()];
    for _ in 0..depth {
        let mut next = Vec::new();
        for dir in &level {
            let Ok(entries) = fs::read_dir(dir) else {
                continue;
            };
            let mut subdirs: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect();
            subdirs.sort();
            if let Some(found) = subdirs.iter().find(|d| is_file(&d.join("PG_VERSION"))) {
                return Ok(Some(found.clone()));
            }
            next.extend(subdirs);
        }
        level = next;
    }
    Ok(None)
}

/// WAL segment file names are 24 hex digits (timeline, log, segment).
pub fn is_segment_name(name: &str) -> bool {
    name.len() == 24 && name.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Counts `.ready`/`.done` markers and WAL segment bytes in `pg_wal`, from metadata only.
/// Files that vanish mid-walk (Postgres recycles segments) are skipped.
pub fn read_wal_dir(pg_wal: &Path, now: Timestamp) -> Result<WalDirStats, VolumeError> {
    let mut stats = WalDirStats {
        pg_wal: pg_wal.to_path_buf(),
        ..Default::default()
    };
    for entry in fs::read_dir(pg_wal).map_err(io_err(pg_wal))? {
        let entry = entry.map_err(io_err(pg_wal))?;
        let name = entry.file_name();
        if !name.to_str().is_some_and(is_segment_name) {
            continue;
        }
        match entry.metadata() {
            Ok(m) if m.is_file() => {
                stats.segment_files += 1;
                stats.segment_bytes += m.len();
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(&entry.path())(e)),
        }
    }
    let status = pg_wal.join("archive_status");
    let entries = match fs::read_dir(&status) {
        Ok(entries) => entries,
        // No archive_status: nothing was ever marked for archiving.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(stats),
        Err(e) => return Err(io_err(&status)(e)),
    };
    let now_system = SystemTime::from(now);
    let mut oldest: Option<SystemTime> = None;
    for entry in entries {
        let entry = entry.map_err(io_err(&status))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.ends_with(".done") {
            stats.done_files += 1;
            continue;
        }
        if !name.ends_with(".ready") {
            continue;
        }
        let mtime = match entry.metadata().and_then(|m| m.modified()) {
            Ok(t) => t,
            // Archived between readdir and stat: no longer pending.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io_err(&entry.path())(e)),
        };
        stats.ready_files += 1;
        oldest = Some(oldest.map_or(mtime, |o| o.min(mtime)));
    }
    stats.oldest_ready_seconds =
        oldest.map(|t| now_system.duration_since(t).map_or(0, |d| d.as_secs()));
    Ok(stats)
}

/// Locates and reads the WAL of a volume mount or data directory.
pub fn inspect(mount: &Path, now: Timestamp) -> Result<VolumeWal, VolumeError> {
    match locate(mount)? {
        WalLocation::Here(pg_wal) => Ok(VolumeWal::Here(read_wal_dir(&pg_wal, now)?)),
        WalLocation::Elsewhere { link, target } => Ok(VolumeWal::Elsewhere { link, target }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::os::unix::fs::symlink;

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
