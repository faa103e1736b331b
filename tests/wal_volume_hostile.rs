//! The WAL reader on a volume a tenant prepared: symlinks anywhere (to another volume, the host,
//! through `..`), FIFOs and huge directories. Nothing outside the volume is read, nothing hangs,
//! and no directory is read past the cap.

use std::fs::{self, File};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use headroom::postgres::VolumeWal;
use headroom::postgres::volume::{MAX_ENTRIES, VolumeError, inspect};
use jiff::Timestamp;
use nix::sys::stat::Mode;

/// Another tenant's `pg_wal` with three segments waiting: any count of 3 means it was read.
fn victim(dir: &Path) -> PathBuf {
    let wal = dir.join("victim/pgdata/pg_wal");
    fs::create_dir_all(wal.join("archive_status")).unwrap();
    fs::write(dir.join("victim/pgdata/PG_VERSION"), "17\n").unwrap();
    for i in 1..=3 {
        let seg = format!("00000001000000000000000{i}");
        fs::write(wal.join(&seg), vec![0u8; 4096]).unwrap();
        File::create(wal.join(format!("archive_status/{seg}.ready"))).unwrap();
    }
    wal
}

/// Runs `f` on another thread: a hang (a FIFO opened for reading) fails instead of blocking the
/// test run forever.
fn no_hang<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the WAL reader hung")
}

fn read(mount: &Path) -> Result<VolumeWal, VolumeError> {
    let mount = mount.to_path_buf();
    no_hang(move || inspect(&mount, Timestamp::now()))
}

fn ready(v: &Result<VolumeWal, VolumeError>) -> Option<u64> {
    match v {
        Ok(VolumeWal::Here(s)) => Some(s.ready_files),
        _ => None,
    }
}

#[test]
fn symlinked_archive_status_is_not_followed() {
    let t = tempfile::tempdir().unwrap();
    let other = victim(t.path());
    let mount = t.path().join("tenant");
    fs::create_dir_all(mount.join("pgdata/pg_wal")).unwrap();
    fs::write(mount.join("pgdata/PG_VERSION"), "17\n").unwrap();
    symlink(
        other.join("archive_status"),
        mount.join("pgdata/pg_wal/archive_status"),
    )
    .unwrap();
    let got = read(&mount);
    assert!(ready(&got) != Some(3), "read the victim's markers: {got:?}");
    let err = got.expect_err("a symlinked archive_status is an error");
    assert!(err.to_string().contains("archive_status"), "{err}");
}

#[test]
fn symlinked_data_directories_are_not_entered() {
    let t = tempfile::tempdir().unwrap();
    victim(t.path());
    // CloudNativePG's layout, pgdata pointing at the victim's.
    let cnpg = t.path().join("cnpg");
    fs::create_dir_all(&cnpg).unwrap();
    symlink(t.path().join("victim/pgdata"), cnpg.join("pgdata")).unwrap();
    let got = read(&cnpg);
    assert!(matches!(got, Err(VolumeError::NotFound { .. })), "{got:?}");
    // Zalando's layout, two levels down, the first level a symlink (absolute and through `..`).
    for target in [t.path().join("victim"), PathBuf::from("../victim")] {
        let zalando = t.path().join("zalando");
        let _ = fs::remove_dir_all(&zalando);
        fs::create_dir_all(&zalando).unwrap();
        symlink(&target, zalando.join("pgroot")).unwrap();
        let got = read(&zalando);
        assert!(
            matches!(got, Err(VolumeError::NotFound { .. })),
            "{target:?}: {got:?}"
        );
    }
}

#[test]
fn a_pg_wal_link_through_dotdot_is_elsewhere_and_not_read() {
    let t = tempfile::tempdir().unwrap();
    victim(t.path());
    let mount = t.path().join("tenant");
    fs::create_dir_all(mount.join("pgdata")).unwrap();
    fs::write(mount.join("pgdata/PG_VERSION"), "17\n").unwrap();
    let target = PathBuf::from("../../victim/pgdata/pg_wal");
    symlink(&target, mount.join("pgdata/pg_wal")).unwrap();
    assert_eq!(
        read(&mount).expect("located"),
        VolumeWal::Elsewhere {
            link: mount.join("pgdata/pg_wal"),
            target
        }
    );
}

#[test]
fn fifos_and_links_named_like_wal_are_never_opened() {
    let t = tempfile::tempdir().unwrap();
    let other = victim(t.path());
    let mount = t.path().join("tenant");
    let wal = mount.join("pg_wal");
    fs::create_dir_all(wal.join("archive_status")).unwrap();
    // A FIFO as a segment and as a marker: opening either for reading would block forever.
    nix::unistd::mkfifo(&wal.join("000000010000000000000009"), Mode::S_IRWXU).unwrap();
    nix::unistd::mkfifo(
        &wal.join("archive_status/000000010000000000000009.ready"),
        Mode::S_IRWXU,
    )
    .unwrap();
    // A segment that is a link to the victim's: not counted, not followed.
    symlink(
        other.join("000000010000000000000001"),
        wal.join("00000001000000000000000A"),
    )
    .unwrap();
    let got = read(&mount).expect("read");
    let VolumeWal::Here(s) = got else {
        panic!("{got:?}")
    };
    assert_eq!((s.segment_files, s.segment_bytes), (0, 0), "{s:?}");
    assert_eq!(s.ready_files, 1, "{s:?}");
}

#[test]
fn a_huge_directory_is_read_up_to_the_cap_only() {
    let t = tempfile::tempdir().unwrap();
    let status = t.path().join("pg_wal/archive_status");
    fs::create_dir_all(&status).unwrap();
    // 10^5 markers, twice the cap.
    for i in 0..100_000u32 {
        File::create(status.join(format!("{i:024X}.ready"))).unwrap();
    }
    const { assert!(100_000 > MAX_ENTRIES) };
    let err = read(t.path()).expect_err("over the cap");
    assert!(
        matches!(err, VolumeError::TooManyEntries { cap, .. } if cap == MAX_ENTRIES),
        "{err}"
    );
    assert!(err.to_string().contains("archive_status"), "{err}");
}
