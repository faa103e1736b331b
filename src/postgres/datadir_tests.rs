//! The data directory reader on real files: every fact from a CloudNativePG-like layout, and a
//! tenant's hostile files (truncated, oversized, bad checksum, FIFO, symlink) each an error of
//! its own slot, never a panic and never a block by itself.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use jiff::{SignedDuration, Timestamp};

use super::control;
use super::datadir;
use super::health::{self, VolumeRead};
use super::lsn::Lsn;
use super::slotfile;
use super::slots::Tracker;
use crate::decide::{PositionSource, ServerRole, SlotActivity};

const SEG: u64 = 16 << 20;

/// `<mount>/pgdata` as CloudNativePG lays it out, PostgreSQL `major`, checkpoint at `ckpt`.
fn cnpg(mount: &Path, major: u32, ckpt: u64) -> PathBuf {
    let d = mount.join("pgdata");
    fs::create_dir_all(d.join("global")).unwrap();
    fs::create_dir_all(d.join("pg_wal/archive_status")).unwrap();
    fs::create_dir_all(d.join("pg_replslot")).unwrap();
    fs::write(d.join("PG_VERSION"), format!("{major}\n")).unwrap();
    fs::write(
        d.join("global/pg_control"),
        control::test_file(major, 6, ckpt, SEG as u32),
    )
    .unwrap();
    fs::write(
        d.join("postgresql.conf"),
        "include 'custom.conf'\ninclude 'override.conf'\n",
    )
    .unwrap();
    fs::write(
        d.join("custom.conf"),
        "archive_mode = 'on'\narchive_command = '/controller/manager wal-archive %p'\n",
    )
    .unwrap();
    fs::write(d.join("override.conf"), "").unwrap();
    fs::write(d.join("pg_wal/000000010000000000000003"), b"").unwrap();
    d
}

fn slot(d: &Path, major: u32, name: &str, restart: u64) {
    fs::create_dir_all(d.join("pg_replslot").join(name)).unwrap();
    fs::write(
        d.join("pg_replslot").join(name).join("state"),
        slotfile::test_file(major, name, 0, restart),
    )
    .unwrap();
}

#[test]
fn reads_role_control_slots_and_archiving_of_every_major() {
    for major in 13..=18 {
        let t = tempfile::tempdir().unwrap();
        let d = cnpg(t.path(), major, 3 * SEG + 0x100);
        slot(&d, major, "standby_2", SEG);
        let r = datadir::read(t.path()).unwrap();
        assert_eq!(r.major.get(), major);
        assert_eq!(r.role, ServerRole::Primary);
        assert!(!r.backup_label);
        assert_eq!(r.control.as_ref().unwrap().checkpoint, Lsn(3 * SEG + 0x100));
        let slots = r.slots.as_ref().unwrap();
        assert_eq!(slots.len(), 1);
        assert_eq!(slots[0].file.as_ref().unwrap().restart_lsn, Lsn(SEG));
        assert_eq!(r.archive.mode.as_deref(), Some("on"));
        assert_eq!(r.archive.mode_file.as_deref(), Some("custom.conf"));
        assert_eq!(
            r.archive.command.as_deref(),
            Some("/controller/manager wal-archive %p")
        );
        assert_eq!(r.archive.library.as_deref(), Some(""));
        // Position: the later of the checkpoint and the newest segment's start.
        assert_eq!(r.position(None), Some(Lsn(3 * SEG + 0x100)));
        assert_eq!(
            r.position(Some("000000010000000000000005")),
            Some(Lsn(5 * SEG))
        );
        // And which of the two it is: the checkpoint wins a tie.
        let from = |newest| r.position_from(newest).map(|p| p.source);
        assert_eq!(from(None), Some(PositionSource::Checkpoint));
        assert_eq!(
            from(Some("000000010000000000000003")),
            Some(PositionSource::Checkpoint)
        );
        assert_eq!(
            from(Some("000000010000000000000005")),
            Some(PositionSource::NewestSegment)
        );
    }
}

#[test]
fn signal_files_and_backup_label_give_the_role() {
    let t = tempfile::tempdir().unwrap();
    let d = cnpg(t.path(), 16, SEG);
    fs::write(d.join("recovery.signal"), "").unwrap();
    assert_eq!(datadir::read(t.path()).unwrap().role, ServerRole::Recovery);
    fs::write(d.join("standby.signal"), "").unwrap();
    fs::write(d.join("backup_label"), "START WAL LOCATION: 0/2000028").unwrap();
    let r = datadir::read(t.path()).unwrap();
    assert_eq!(r.role, ServerRole::Standby);
    assert!(r.backup_label);
    // A signal that is a symlink or a directory is not the server's: no role from it.
    let t = tempfile::tempdir().unwrap();
    let d = cnpg(t.path(), 16, SEG);
    symlink("/etc/hostname", d.join("standby.signal")).unwrap();
    fs::create_dir(d.join("recovery.signal")).unwrap();
    assert_eq!(datadir::read(t.path()).unwrap().role, ServerRole::Primary);
}

/// The one fact a data volume whose WAL lives elsewhere is read for: `backup_label`, a regular
/// file (a symlink to one is the tenant's pointer, not a restore); no data directory is an error.
#[test]
fn a_restore_is_read_alone_from_backup_label() {
    let t = tempfile::tempdir().unwrap();
    let d = cnpg(t.path(), 16, SEG);
    assert!(!datadir::restoring(t.path()).unwrap());
    symlink("/etc/hostname", d.join("backup_label")).unwrap();
    assert!(!datadir::restoring(t.path()).unwrap());
    fs::remove_file(d.join("backup_label")).unwrap();
    fs::write(d.join("backup_label"), "START WAL LOCATION: 0/2000028").unwrap();
    assert!(datadir::restoring(t.path()).unwrap());
    let empty = tempfile::tempdir().unwrap();
    assert!(datadir::restoring(empty.path()).is_err());
}

#[test]
fn unsupported_majors_are_refused_by_name() {
    let t = tempfile::tempdir().unwrap();
    let d = cnpg(t.path(), 16, SEG);
    fs::write(d.join("PG_VERSION"), "12\n").unwrap();
    let e = datadir::read(t.path()).unwrap_err().to_string();
    assert!(e.contains("PostgreSQL 12 is not supported"), "{e}");
}

#[test]
fn hostile_slot_files_are_errors_of_their_own_slot() {
    let t = tempfile::tempdir().unwrap();
    let d = cnpg(t.path(), 15, 4 * SEG);
    slot(&d, 15, "good", 3 * SEG);
    let good = slotfile::test_file(15, "x", 0, 1);
    type Make<'a> = Box<dyn Fn(&Path) + 'a>;
    let hostile: [(&str, Make<'_>); 6] = [
        (
            "truncated",
            Box::new(|p| fs::write(p, &good[..40]).unwrap()),
        ),
        (
            "oversized",
            Box::new(|p| fs::write(p, vec![0u8; 1 << 20]).unwrap()),
        ),
        (
            "badsum",
            Box::new(|p| {
                let mut b = slotfile::test_file(15, "badsum", 0, 1);
                b[100] ^= 0xFF;
                fs::write(p, b).unwrap()
            }),
        ),
        (
            "fifo",
            Box::new(|p| nix::unistd::mkfifo(p, nix::sys::stat::Mode::S_IRWXU).unwrap()),
        ),
        ("symlink", Box::new(|p| symlink("/etc/passwd", p).unwrap())),
        ("directory", Box::new(|p| fs::create_dir(p).unwrap())),
    ];
    for (name, make) in &hostile {
        let dir = d.join("pg_replslot").join(name);
        fs::create_dir(&dir).unwrap();
        make(&dir.join("state"));
    }
    // Not slots at all: a file where a slot directory goes, a slot being dropped.
    fs::write(d.join("pg_replslot/stray"), "x").unwrap();
    fs::create_dir(d.join("pg_replslot/gone.tmp")).unwrap();
    symlink("/", d.join("pg_replslot/escape")).unwrap();

    let r = datadir::read(t.path()).unwrap();
    let slots = r.slots.as_ref().unwrap();
    let names: Vec<&str> = slots.iter().map(|s| s.dir.as_str()).collect();
    assert_eq!(
        names,
        [
            "badsum",
            "directory",
            "fifo",
            "good",
            "oversized",
            "symlink",
            "truncated"
        ]
    );
    for s in slots {
        assert_eq!(s.file.is_ok(), s.dir == "good", "{}: {:?}", s.dir, s.file);
    }
    // Combined: each bad slot is an error naming it; the good one is judged; nothing blocks on
    // the bad ones by themselves (they are not listed as retaining anything).
    let read = VolumeRead {
        wal: None,
        datadir: Some(Ok(r)),
    };
    let now = Timestamp::from_second(1_900_000_000).unwrap();
    let h = health::combine(read, None, &mut Tracker::default(), 100.into(), now);
    let listed: Vec<&str> = h
        .inactive_slots
        .as_ref()
        .unwrap()
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(listed, ["good"]);
    for bad in ["badsum", "fifo", "symlink", "truncated", "oversized"] {
        assert!(
            h.detail
                .errors
                .iter()
                .any(|e| e.starts_with(&format!("replication slot {bad}: "))),
            "{bad}: {:?}",
            h.detail.errors
        );
    }
}

#[test]
fn a_still_slot_turns_inactive_and_a_standby_with_archive_on_is_not_archiving() {
    let t = tempfile::tempdir().unwrap();
    let d = cnpg(t.path(), 17, 2 * SEG);
    slot(&d, 17, "stuck", SEG);
    let mut tracker = Tracker::default();
    let t0 = Timestamp::from_second(1_900_000_000).unwrap();
    let read = |newest: &str| {
        fs::write(d.join("pg_wal").join(newest), b"").unwrap();
        VolumeRead {
            wal: Some(super::volume::inspect(t.path(), t0).map_err(|e| e.to_string())),
            datadir: Some(datadir::read(t.path()).map_err(|e| e.to_string())),
        }
    };
    let first = health::combine(
        read("000000010000000000000004"),
        None,
        &mut tracker,
        100.into(),
        t0,
    );
    let s = &first.inactive_slots.as_ref().unwrap()[0];
    assert_eq!(
        (s.activity, s.retained_bytes),
        (SlotActivity::Unknown, 3 * SEG)
    );
    // Readable like pg_replication_slots: the slot's restart_lsn, and the position its
    // retention was measured from (segment 4 is newer than the checkpoint at segment 2).
    assert_eq!(s.restart_lsn, Some(Lsn(SEG)));
    let p = first.detail.position.expect("position");
    assert_eq!(
        (p.lsn, p.source),
        (Lsn(4 * SEG), PositionSource::NewestSegment)
    );
    let all = first.detail.slots.as_ref().expect("slots");
    assert_eq!(all.len(), 1);
    assert_eq!(
        (all[0].slot_name.as_str(), all[0].slot_type.as_str()),
        ("stuck", "physical")
    );
    assert_eq!(
        (all[0].restart_lsn, all[0].retained_bytes),
        (Some(Lsn(SEG)), Some(3 * SEG))
    );
    let later = t0 + SignedDuration::from_mins(16);
    let second = health::combine(
        read("000000010000000000000009"),
        None,
        &mut tracker,
        100.into(),
        later,
    );
    let s = &second.inactive_slots.as_ref().unwrap()[0];
    assert_eq!(s.activity, SlotActivity::Inactive);
    assert!(s.retained_bytes >= 8 * SEG, "{}", s.retained_bytes);
    assert_eq!(second.archive_configured, Some(true));

    // The same directory as a standby: archive_mode on does not archive there, so a backlog of
    // leftover .ready files is not a fault.
    fs::write(d.join("standby.signal"), "").unwrap();
    for i in 0..5 {
        fs::write(
            d.join(format!(
                "pg_wal/archive_status/00000001000000000000000{i}.ready"
            )),
            "",
        )
        .unwrap();
    }
    let h = health::combine(
        read("00000001000000000000000A"),
        None,
        &mut tracker,
        2.into(),
        later,
    );
    assert_eq!(h.detail.role, Some(ServerRole::Standby));
    assert_eq!(h.archive_configured, Some(false));
    assert_eq!(h.archive_healthy, None);
    fs::write(
        d.join("custom.conf"),
        "archive_mode = always\narchive_command = 'x'\n",
    )
    .unwrap();
    let h = health::combine(
        read("00000001000000000000000A"),
        None,
        &mut tracker,
        2.into(),
        later,
    );
    assert_eq!(h.archive_configured, Some(true));
    assert_eq!(h.archive_healthy, Some(false), "{:?}", h.detail.problems);
}

#[test]
fn a_wal_volume_alone_has_no_data_directory_and_no_error() {
    let t = tempfile::tempdir().unwrap();
    fs::create_dir_all(t.path().join("pg_wal/archive_status")).unwrap();
    let now = Timestamp::from_second(1_900_000_000).unwrap();
    let read = health::read_volumes(t.path(), Some(t.path()), None, now);
    assert!(read.datadir.is_none(), "{:?}", read.datadir);
    assert!(matches!(read.wal, Some(Ok(_))), "{:?}", read.wal);
    // Another mount named as the data volume that holds none is an error naming it.
    let other = tempfile::tempdir().unwrap();
    let read = health::read_volumes(t.path(), Some(other.path()), None, now);
    let e = read.datadir.unwrap().unwrap_err();
    assert!(e.contains(&other.path().display().to_string()), "{e}");
}

/// `postgres -c archive_mode=on` (Patroni and hand-run servers pass settings this way): the
/// command line the server recorded in `postmaster.opts` wins over the files, which say off.
#[test]
fn the_recorded_command_line_wins_over_the_configuration_files() {
    let t = tempfile::tempdir().unwrap();
    let d = cnpg(t.path(), 15, SEG);
    fs::write(d.join("custom.conf"), "archive_mode = off\n").unwrap();
    assert_eq!(
        datadir::read(t.path()).unwrap().archive.mode.as_deref(),
        Some("off")
    );
    fs::write(
        d.join("postmaster.opts"),
        "/usr/lib/postgresql/15/bin/postgres \"-D\" \"/pgdata\" \"-c\" \"archive_mode=on\" \"-c\" \"archive_command=true\"\n",
    )
    .unwrap();
    let a = datadir::read(t.path()).unwrap().archive;
    assert_eq!(a.mode.as_deref(), Some("on"));
    assert_eq!(a.mode_file.as_deref(), Some("postmaster.opts"));
    assert_eq!(a.command.as_deref(), Some("true"));
    // Unreadable (a FIFO): nothing from the files is certain any more.
    fs::remove_file(d.join("postmaster.opts")).unwrap();
    nix::unistd::mkfifo(&d.join("postmaster.opts"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let a = datadir::read(t.path()).unwrap().archive;
    assert_eq!(a.mode, None, "{a:?}");
    assert!(a.unread[0].contains("postmaster.opts"), "{a:?}");
}

/// Files that say off on a primary while segments wait with `.ready` (archiving set where the
/// volume does not show it): not "off", the markers decide, and the backlog counts.
#[test]
fn ready_segments_on_a_primary_overrule_an_off_in_the_files() {
    let t = tempfile::tempdir().unwrap();
    let d = cnpg(t.path(), 16, SEG);
    fs::write(d.join("custom.conf"), "archive_mode = off\n").unwrap();
    for i in 0..3 {
        fs::write(
            d.join(format!(
                "pg_wal/archive_status/00000001000000000000000{i}.ready"
            )),
            "",
        )
        .unwrap();
    }
    let now = Timestamp::from_second(1_900_000_000).unwrap();
    let read = health::read_volumes(t.path(), Some(t.path()), None, now);
    let h = health::combine(read, None, &mut Tracker::default(), 2.into(), now);
    assert_eq!(h.archive_configured, Some(true), "{h:?}");
    assert_eq!(h.archive_healthy, Some(false));
    assert!(
        h.detail
            .errors
            .iter()
            .any(|e| e.contains("reads off, yet 3 segments")),
        "{h:?}"
    );
}
