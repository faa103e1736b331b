//! [`super::health::combine`]: the volume's and the server's views merged into one `WalHealth`.

use jiff::Timestamp;

use super::health::*;
use super::lsn::Lsn;
use super::slots::Tracker;
use super::sql::{ArchiverStats, SlotInfo, SqlFacts};
use super::volume::{VolumeWal, WalDirStats};
use crate::decide::{PositionSource, SlotActivity, WalHealth, WalPosition};

/// The volume's `pg_wal` and SQL, no data directory.
fn c(
    wal: Option<Result<VolumeWal, String>>,
    sql: Option<Result<SqlFacts, String>>,
    max_pending: u64,
    now: Timestamp,
) -> WalHealth {
    let read = VolumeRead { wal, datadir: None };
    combine(read, sql, &mut Tracker::default(), max_pending.into(), now)
}

fn now() -> Timestamp {
    Timestamp::from_second(2_000_000_000).unwrap()
}

fn primary(mode: &str, command: &str) -> SqlFacts {
    SqlFacts {
        archive_mode: mode.into(),
        archive_command: command.into(),
        ..Default::default()
    }
}

fn vol(ready: u64, oldest: Option<u64>) -> Option<Result<VolumeWal, String>> {
    Some(Ok(VolumeWal::Here(WalDirStats {
        ready_files: ready,
        oldest_ready_seconds: oldest,
        ..Default::default()
    })))
}

#[test]
fn failure_newer_than_success_is_unhealthy_older_is_healthy() {
    let t = |s| Some(Timestamp::from_second(s).unwrap());
    let mut f = primary("on", "cp %p /a/%f");
    f.archiver = ArchiverStats {
        last_archived_time: t(100),
        last_failed_time: t(200),
        failed_count: 3,
        ..Default::default()
    };
    let h = c(None, Some(Ok(f.clone())), 100, now());
    assert_eq!(
        (h.archive_configured, h.archive_healthy),
        (Some(true), Some(false))
    );
    assert_eq!(h.detail.failed_count, Some(3));
    f.archiver.last_archived_time = t(300);
    let h = c(None, Some(Ok(f)), 100, now());
    assert_eq!(h.archive_healthy, Some(true), "{:?}", h.detail.problems);
}

#[test]
fn empty_command_with_archive_mode_on_is_configured_and_unhealthy() {
    let h = c(None, Some(Ok(primary("on", " "))), 100, now());
    assert_eq!(
        (h.archive_configured, h.archive_healthy),
        (Some(true), Some(false))
    );
    let mut f = primary("on", "");
    f.archive_library = "basic_archive".into();
    assert_eq!(c(None, Some(Ok(f)), 100, now()).archive_healthy, Some(true));
}

#[test]
fn archive_off_or_standby_with_on_is_not_configured() {
    let h = c(vol(0, None), Some(Ok(primary("off", ""))), 100, now());
    assert_eq!(
        (h.archive_configured, h.archive_healthy),
        (Some(false), None)
    );
    let mut f = primary("on", "cp");
    f.in_recovery = true;
    assert_eq!(
        c(None, Some(Ok(f.clone())), 100, now()).archive_configured,
        Some(false)
    );
    f.archive_mode = "always".into();
    assert_eq!(
        c(None, Some(Ok(f)), 100, now()).archive_configured,
        Some(true)
    );
}

#[test]
fn volume_alone_judges_backlog_and_staleness() {
    let h = c(vol(5, Some(10)), None, 4, now());
    assert_eq!(
        (h.archive_configured, h.archive_healthy, h.pending_files),
        (Some(true), Some(false), Some(5))
    );
    let h = c(vol(5, Some(10)), None, 5, now());
    assert_eq!(h.archive_healthy, Some(true));
    let h = c(
        vol(
            1,
            Some(crate::policy::defaults::MAX_PENDING_WAL_AGE_SECONDS + 1),
        ),
        None,
        100,
        now(),
    );
    assert_eq!(h.archive_healthy, Some(false));
    // No markers at all: archiving may be off; unknown, not healthy.
    let h = c(vol(0, None), None, 100, now());
    assert_eq!((h.archive_configured, h.archive_healthy), (None, None));
    assert_eq!(h.inactive_slots, None);
    assert!(h.sources.volume && !h.sources.sql);
}

#[test]
fn volume_count_wins_over_sql_and_slots_are_inactive_only() {
    let mut f = primary("on", "cp");
    f.ready_files = 99;
    f.slots = vec![
        SlotInfo {
            name: "live".into(),
            slot_type: "physical".into(),
            active: true,
            wal_status: None,
            retained_bytes: Some(5),
            restart_lsn: Some(Lsn(0x300 - 5)),
        },
        SlotInfo {
            name: "stuck".into(),
            slot_type: "physical".into(),
            active: false,
            wal_status: None,
            retained_bytes: Some(7),
            restart_lsn: Some(Lsn(0x300 - 7)),
        },
        SlotInfo {
            name: "fresh".into(),
            slot_type: "logical".into(),
            active: false,
            wal_status: None,
            retained_bytes: None,
            restart_lsn: None,
        },
    ];
    f.position = Some(Lsn(0x300));
    let h = c(vol(2, Some(1)), Some(Ok(f)), 100, now());
    assert_eq!(h.pending_files, Some(2));
    let names: Vec<_> = h
        .inactive_slots
        .unwrap()
        .into_iter()
        .map(|s| (s.name, s.retained_bytes))
        .collect();
    assert_eq!(
        names,
        vec![("stuck".to_string(), 7), ("fresh".to_string(), 0)]
    );
    assert!(h.sources.volume && h.sources.sql);
    // Every slot as pg_replication_slots lists it, and the position they are measured from.
    assert_eq!(
        h.detail.position,
        Some(WalPosition {
            lsn: Lsn(0x300),
            source: PositionSource::Sql
        })
    );
    let listed: Vec<_> = h
        .detail
        .slots
        .unwrap()
        .into_iter()
        .map(|s| {
            (
                s.slot_name,
                s.restart_lsn.map(|l| l.to_string()),
                s.activity,
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            ("live".into(), Some("0/2FB".into()), SlotActivity::Active),
            ("stuck".into(), Some("0/2F9".into()), SlotActivity::Inactive),
            ("fresh".into(), None, SlotActivity::Inactive),
        ]
    );
}

#[test]
fn failures_are_unknown_with_reasons() {
    let h = c(
        Some(Err("/x: gone".into())),
        Some(Err("refused".into())),
        100,
        now(),
    );
    assert_eq!(h.archive_configured, None);
    assert_eq!(h.archive_healthy, None);
    assert_eq!(h.pending_files, None);
    assert_eq!(
        h.detail.errors,
        vec!["volume: /x: gone".to_string(), "sql: refused".to_string()]
    );
    assert_eq!(h.observed_at, Some(now()));
}

#[test]
fn symlinked_wal_says_so() {
    let v = Some(Ok(VolumeWal::Elsewhere {
        link: "/d/pg_wal".into(),
        target: "/w/pg_wal".into(),
    }));
    let h = c(v, None, 100, now());
    assert_eq!(h.detail.wal_on_volume, Some(false));
    assert!(!h.sources.volume);
    assert!(h.detail.errors[0].contains("another volume"));
}
