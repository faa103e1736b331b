//! `pg_wal` links that lead back into a volume the agent reads, mapped through the pod's mount
//! path: Crunchy PGO's layouts (`internal/postgres/config.go`, `WALDirectory`), with and
//! without a WAL volume, and links that must not be followed.

use std::fs::{self, File};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use jiff::Timestamp;

use super::health::read_volumes;
use super::volume::{InPod, VolumeError, VolumeWal, inspect, inspect_in_pod};

const READY: &str = "000000010000000000000001.ready";

/// `<mount>/<dir>` holding one segment waiting for the archiver.
fn wal_dir(mount: &Path, dir: &str) -> PathBuf {
    let w = mount.join(dir);
    fs::create_dir_all(w.join("archive_status")).unwrap();
    File::create(w.join("archive_status").join(READY)).unwrap();
    w
}

/// Crunchy's data directory `<mount>/pg15` with `pg_wal` a link to `target`.
fn crunchy_data(mount: &Path, target: &str) {
    fs::create_dir_all(mount.join("pg15")).unwrap();
    fs::write(mount.join("pg15/PG_VERSION"), "15\n").unwrap();
    symlink(target, mount.join("pg15/pg_wal")).unwrap();
}

fn pending(v: Result<VolumeWal, VolumeError>) -> Option<u64> {
    match v {
        Ok(VolumeWal::Here(s)) => Some(s.ready_files),
        _ => None,
    }
}

fn at(p: &str) -> InPod {
    InPod {
        mounted_at: Some(p.into()),
        wal_link: None,
    }
}

#[test]
fn wal_beside_the_data_directory_on_the_same_volume_is_read_there() {
    let t = tempfile::tempdir().unwrap();
    crunchy_data(t.path(), "/pgdata/pg15_wal");
    wal_dir(t.path(), "pg15_wal");
    let now = Timestamp::now();
    assert_eq!(
        pending(inspect_in_pod(t.path(), &at("/pgdata"), now)),
        Some(1)
    );
    // Without the pod's mount path the link is only read, as before.
    assert!(matches!(
        inspect(t.path(), now),
        Ok(VolumeWal::Elsewhere { .. })
    ));
    // Mounted elsewhere in the pod: the link leads off this volume.
    assert!(matches!(
        inspect_in_pod(t.path(), &at("/other"), now),
        Ok(VolumeWal::Elsewhere { .. })
    ));
}

#[test]
fn a_wal_volume_is_read_where_the_data_directorys_link_points() {
    let t = tempfile::tempdir().unwrap();
    let (data, wal) = (t.path().join("data"), t.path().join("wal"));
    crunchy_data(&data, "/pgwal/pg15_wal");
    wal_dir(&wal, "pg15_wal");
    let now = Timestamp::now();
    let read = read_volumes(&wal, Some(&data), Some(Path::new("/pgwal")), now);
    assert!(
        matches!(&read.wal, Some(Ok(VolumeWal::Here(s))) if s.ready_files == 1),
        "{:?}",
        read.wal
    );
    assert!(matches!(read.datadir, Some(Ok(_))), "{:?}", read.datadir);
    // Not knowing where the pod mounts it, the WAL volume is not found.
    let read = read_volumes(&wal, Some(&data), None, now);
    assert!(matches!(read.wal, Some(Err(_))), "{:?}", read.wal);
}

#[test]
fn links_out_of_the_volume_or_through_a_symlink_are_not_followed() {
    let now = Timestamp::now();
    let outside = tempfile::tempdir().unwrap();
    wal_dir(outside.path(), "pg15_wal");
    for target in [
        "/pgdata/../pgdata/pg15_wal",
        "/pgdata",
        "pg15_wal",
        "/pgdata/escape/pg15_wal",
    ] {
        let t = tempfile::tempdir().unwrap();
        crunchy_data(t.path(), target);
        // A symlink on the tenant's volume pointing at a WAL directory off it.
        symlink(outside.path(), t.path().join("escape")).unwrap();
        assert!(
            pending(inspect_in_pod(t.path(), &at("/pgdata"), now)).is_none(),
            "{target}"
        );
    }
    // A WAL volume whose data directory's link climbs out of it.
    let t = tempfile::tempdir().unwrap();
    let wal = t.path().join("wal");
    fs::create_dir_all(&wal).unwrap();
    symlink(outside.path().join("pg15_wal"), wal.join("pg15_wal")).unwrap();
    let pod = InPod {
        mounted_at: Some("/pgwal".into()),
        wal_link: Some("/pgwal/pg15_wal".into()),
    };
    assert!(pending(inspect_in_pod(&wal, &pod, now)).is_none());
}
