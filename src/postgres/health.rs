//! Combines the volume's and the server's view into the one [`WalHealth`] the engine reads.
//!
//! Classification rules (README "WAL health" documents the same):
//! - configured: `archive_mode` is `always`, or `on` on a primary (a standby with `on` does not
//!   archive). Without SQL: `.ready`/`.done` markers exist (Postgres writes them only when
//!   archiving), else unknown.
//! - `archive_mode` on with both `archive_command` and `archive_library` empty counts as
//!   configured and unhealthy: Postgres then keeps every segment until a command is set, which is
//!   exactly the pile-up growth must not hide.
//! - unhealthy: the last failure is newer than the last success, the backlog is over
//!   `max_pending`, or the oldest `.ready` has waited over [`STALE_READY_SECONDS`] (an archive
//!   command that hangs never records a failure).
//! - not configured: `archive_healthy` is `None` (nothing to be healthy about).

use std::path::Path;

use jiff::Timestamp;

use super::sql::{self, SqlFacts, SqlTarget};
use super::volume::{self, VolumeWal};
use crate::decide::{SlotRetention, WalHealth};

/// A segment waiting this long to be archived means the archiver is failing or hung.
pub const STALE_READY_SECONDS: u64 = 15 * 60;

/// How long the volume's WAL directories may take to read.
pub const VOLUME_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Reads the volume (on a blocking thread) and asks the server, concurrently; never fails:
/// what did not answer is `None` with its reason in `detail.errors`.
pub async fn gather(
    volume: Option<&Path>,
    sql: Option<&SqlTarget>,
    max_pending: u64,
    now: Timestamp,
) -> WalHealth {
    let from_volume = async {
        let path = volume?.to_path_buf();
        let shown = path.display().to_string();
        let read = tokio::task::spawn_blocking(move || volume::inspect(&path, now));
        // A stuck filesystem must not hold the scan: the reader is left behind after this.
        Some(
            match tokio::time::timeout(VOLUME_READ_TIMEOUT, read).await {
                Ok(Ok(result)) => result.map_err(|e| e.to_string()),
                Ok(Err(e)) => Err(format!("volume reader task: {e}")),
                Err(_) => Err(format!(
                    "{shown}: no answer within {}s",
                    VOLUME_READ_TIMEOUT.as_secs()
                )),
            },
        )
    };
    gather_with(from_volume, sql, max_pending, now).await
}

/// [`gather`] with the caller's volume reader (the agent bounds it with a deadline).
pub async fn gather_with(
    from_volume: impl std::future::Future<Output = Option<Result<VolumeWal, String>>>,
    sql: Option<&SqlTarget>,
    max_pending: u64,
    now: Timestamp,
) -> WalHealth {
    let from_sql = async { Some(sql::query(sql?).await.map_err(|e| e.to_string())) };
    let (v, s) = tokio::join!(from_volume, from_sql);
    combine(v, s, max_pending, now)
}

/// The pure part of [`gather`]: `None` for a source not asked, `Err` for one that failed.
pub fn combine(
    volume: Option<Result<VolumeWal, String>>,
    sql: Option<Result<SqlFacts, String>>,
    max_pending: u64,
    now: Timestamp,
) -> WalHealth {
    let mut h = WalHealth {
        observed_at: Some(now),
        ..Default::default()
    };
    let mut markers = None;
    match volume {
        None => {}
        Some(Ok(VolumeWal::Here(s))) => {
            h.sources.volume = true;
            h.pending_files = Some(s.ready_files);
            h.oldest_pending_seconds = s.oldest_ready_seconds;
            h.detail.wal_bytes = Some(s.segment_bytes);
            h.detail.wal_on_volume = Some(true);
            markers = Some(s.ready_files + s.done_files);
        }
        Some(Ok(VolumeWal::Elsewhere { link, target })) => {
            h.detail.wal_on_volume = Some(false);
            h.detail.errors.push(format!(
                "volume: {} is a symlink to {}: WAL lives on another volume",
                link.display(),
                target.display()
            ));
        }
        Some(Err(e)) => h.detail.errors.push(format!("volume: {e}")),
    }

    let facts = match sql {
        None => None,
        Some(Ok(f)) => Some(f),
        Some(Err(e)) => {
            h.detail.errors.push(format!("sql: {e}"));
            None
        }
    };
    let mut problems = Vec::new();
    if let Some(f) = &facts {
        h.sources.sql = true;
        h.detail.in_recovery = Some(f.in_recovery);
        h.detail.failed_count = Some(f.archiver.failed_count);
        h.detail.last_archived_time = f.archiver.last_archived_time;
        h.detail.last_failed_time = f.archiver.last_failed_time;
        if h.pending_files.is_none() {
            h.pending_files = Some(f.ready_files);
            h.oldest_pending_seconds = f.oldest_ready.map(|t| age_seconds(t, now));
        }
        h.detail.wal_bytes = h.detail.wal_bytes.or(Some(f.wal_bytes));
        h.inactive_slots = Some(
            f.slots
                .iter()
                .filter(|s| !s.active)
                .map(|s| SlotRetention {
                    name: s.name.clone(),
                    retained_bytes: s.retained_bytes.unwrap_or(0),
                })
                .collect(),
        );
        h.archive_configured = Some(sql_configured(f));
        if h.archive_configured == Some(true) {
            problems.extend(sql_problems(f));
        }
    } else if let Some(m) = markers {
        h.archive_configured = (m > 0).then_some(true);
    }

    if h.archive_configured == Some(true) {
        if let Some(p) = h.pending_files.filter(|&p| p > max_pending) {
            problems.push(format!(
                "{p} segments wait to be archived (over {max_pending})"
            ));
        }
        if let Some(age) = h
            .oldest_pending_seconds
            .filter(|&a| a > STALE_READY_SECONDS)
        {
            problems.push(format!(
                "the oldest segment has waited {age}s to be archived"
            ));
        }
        h.archive_healthy = Some(problems.is_empty());
    }
    h.detail.problems = problems;
    h
}

fn sql_configured(f: &SqlFacts) -> bool {
    match f.archive_mode.as_str() {
        "always" => true,
        "on" => !f.in_recovery,
        _ => false,
    }
}

fn sql_problems(f: &SqlFacts) -> Vec<String> {
    let mut out = Vec::new();
    if f.archive_command.trim().is_empty() && f.archive_library.trim().is_empty() {
        out.push(format!(
            "archive_mode is {} but archive_command and archive_library are empty: WAL is kept until one is set",
            f.archive_mode
        ));
    }
    let a = &f.archiver;
    let failing = match (a.last_failed_time, a.last_archived_time) {
        (Some(failed), Some(archived)) => failed > archived,
        (Some(_), None) => true,
        (None, _) => false,
    };
    if failing {
        let wal = a.last_failed_wal.as_deref().unwrap_or("?");
        out.push(format!(
            "archiving fails: last failure (segment {wal}) is newer than the last success"
        ));
    }
    out
}

fn age_seconds(t: Timestamp, now: Timestamp) -> u64 {
    u64::try_from(now.as_second() - t.as_second()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postgres::sql::{ArchiverStats, SlotInfo};
    use crate::postgres::volume::WalDirStats;

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
        let h = combine(None, Some(Ok(f.clone())), 100, now());
        assert_eq!(
            (h.archive_configured, h.archive_healthy),
            (Some(true), Some(false))
        );
        assert_eq!(h.detail.failed_count, Some(3));
        f.archiver.last_archived_time = t(300);
        let h = combine(None, Some(Ok(f)), 100, now());
        assert_eq!(h.archive_healthy, Some(true), "{:?}", h.detail.problems);
    }

    #[test]
    fn empty_command_with_archive_mode_on_is_configured_and_unhealthy() {
        let h = combine(None, Some(Ok(primary("on", " "))), 100, now());
        assert_eq!(
            (h.archive_configured, h.archive_healthy),
            (Some(true), Some(false))
        );
        let mut f = primary("on", "");
        f.archive_library = "basic_archive".into();
        assert_eq!(
            combine(None, Some(Ok(f)), 100, now()).archive_healthy,
            Some(true)
        );
    }

    #[test]
    fn archive_off_or_standby_with_on_is_not_configured() {
        let h = combine(vol(0, None), Some(Ok(primary("off", ""))), 100, now());
        assert_eq!(
            (h.archive_configured, h.archive_healthy),
            (Some(false), None)
        );
        let mut f = primary("on", "cp");
        f.in_recovery = true;
        assert_eq!(
            combine(None, Some(Ok(f.clone())), 100, now()).archive_configured,
            Some(false)
        );
        f.archive_mode = "always".into();
        assert_eq!(
            combine(None, Some(Ok(f)), 100, now()).archive_configured,
            Some(true)
        );
    }

    #[test]
    fn volume_alone_judges_backlog_and_staleness() {
        let h = combine(vol(5, Some(10)), None, 4, now());
        assert_eq!(
            (h.archive_configured, h.archive_healthy, h.pending_files),
            (Some(true), Some(false), Some(5))
        );
        let h = combine(vol(5, Some(10)), None, 5, now());
        assert_eq!(h.archive_healthy, Some(true));
        let h = combine(vol(1, Some(STALE_READY_SECONDS + 1)), None, 100, now());
        assert_eq!(h.archive_healthy, Some(false));
        // No markers at all: archiving may be off; unknown, not healthy.
        let h = combine(vol(0, None), None, 100, now());
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
            },
            SlotInfo {
                name: "stuck".into(),
                slot_type: "physical".into(),
                active: false,
                wal_status: None,
                retained_bytes: Some(7),
            },
            SlotInfo {
                name: "fresh".into(),
                slot_type: "logical".into(),
                active: false,
                wal_status: None,
                retained_bytes: None,
            },
        ];
        let h = combine(vol(2, Some(1)), Some(Ok(f)), 100, now());
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
    }

    #[test]
    fn failures_are_unknown_with_reasons() {
        let h = combine(
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
        let h = combine(v, None, 100, now());
        assert_eq!(h.detail.wal_on_volume, Some(false));
        assert!(!h.sources.volume);
        assert!(h.detail.errors[0].contains("another volume"));
    }
}
