//! Combines the volume's and the server's view into the one [`WalHealth`] the engine reads.
//!
//! Sources (README "WAL health" documents the same): the volume holding `pg_wal` gives the
//! `.ready` backlog, its age and the WAL position's newest segment; the data directory gives the
//! role (signal files), `pg_control`, every slot's `restart_lsn` and the archiving settings; SQL,
//! where a credential is configured, gives the same facts live and wins where both answer (a
//! difference is listed in `disagreements`).
//!
//! Classification rules:
//! - configured: `archive_mode` is `always`, or `on` on a primary (a standby with `on` does not
//!   archive). With neither SQL nor readable settings: `.ready`/`.done` markers exist (Postgres
//!   writes them only when archiving), else unknown.
//! - `archive_mode` on with both `archive_command` and `archive_library` empty counts as
//!   configured and unhealthy: Postgres then keeps every segment until a command is set, which is
//!   exactly the pile-up growth must not hide.
//! - unhealthy: the last failure is newer than the last success, the backlog is over
//!   `maxPendingWALFiles`, or the oldest `.ready` has waited over `maxPendingWALAge` (an archive
//!   command that hangs never records a failure); a limit of 0 is off.
//! - not configured: `archive_healthy` is `None` (nothing to be healthy about).

use std::path::Path;

use jiff::Timestamp;

use super::datadir::{self, DataDir};
use super::lsn::Lsn;
use super::slots::Tracker;
use super::sql::{self, SqlFacts, SqlTarget};
use super::volume::{self, VolumeWal};
use crate::decide::{
    PositionSource, ReplicationSlot, ServerRole, SlotActivity, SlotRetention, WalHealth,
    WalPosition,
};

/// How long the volume's WAL directories may take to read.
pub const VOLUME_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The policy's limits on the archive backlog; 0 turns a check off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_pending: u64,
    pub max_pending_age_seconds: u64,
}

impl From<u64> for Limits {
    /// A backlog limit with the policy's default age limit.
    fn from(max_pending: u64) -> Limits {
        Limits {
            max_pending,
            max_pending_age_seconds: crate::policy::defaults::MAX_PENDING_WAL_AGE_SECONDS,
        }
    }
}

/// What the volumes showed: `pg_wal` (`None`: not asked) and the data directory.
#[derive(Debug, Clone, Default)]
pub struct VolumeRead {
    pub wal: Option<Result<VolumeWal, String>>,
    pub datadir: Option<Result<DataDir, String>>,
}

/// Reads `pg_wal` on `wal_mount` (a data volume holding it, or a WAL volume) and the data
/// directory on `data_mount` (the same volume, or the instance's data volume when WAL has one of
/// its own). `mounted_at` is `wal_mount`'s path in the pod, when known: a `pg_wal` link into it
/// is then read there (see [`volume::InPod`]). Blocking: the caller bounds it with a deadline.
pub fn read_volumes(
    wal_mount: &Path,
    data_mount: Option<&Path>,
    mounted_at: Option<&Path>,
    now: Timestamp,
) -> VolumeRead {
    let datadir = data_mount.and_then(|m| match datadir::read(m) {
        // A WAL volume given as its own data mount (`wal-health --pgdata` on a WAL volume) has
        // no data directory: nothing to say, not an error.
        Err(volume::VolumeError::NotFound { .. }) if m == wal_mount => None,
        r => Some(r.map_err(|e| e.to_string())),
    });
    // A WAL volume's directory is where the data directory's `pg_wal` link says.
    let wal_link = data_mount
        .filter(|m| *m != wal_mount && mounted_at.is_some())
        .and_then(|m| match volume::locate(m) {
            Ok(volume::WalLocation::Elsewhere { target, .. }) => Some(target),
            _ => None,
        });
    let pod = volume::InPod {
        mounted_at: mounted_at.map(Path::to_path_buf),
        wal_link,
    };
    VolumeRead {
        wal: Some(volume::inspect_in_pod(wal_mount, &pod, now).map_err(|e| e.to_string())),
        datadir,
    }
}

/// Reads `volume` (a data directory holding its `pg_wal`, on a blocking thread) and asks the
/// server, concurrently; never fails: what did not answer is `None` with its reason in
/// `detail.errors`. One read: a slot's activity on the volume's side stays unknown.
pub async fn gather(
    volume: Option<&Path>,
    sql: Option<&SqlTarget>,
    limits: impl Into<Limits>,
    now: Timestamp,
) -> WalHealth {
    let (v, s) = tokio::join!(read_bounded(volume, now), query(sql));
    combine(v, s, &mut Tracker::default(), limits.into(), now)
}

/// [`read_volumes`] of a data directory holding its `pg_wal`, on a blocking thread within
/// [`VOLUME_READ_TIMEOUT`]; nothing read for `None`. A stuck filesystem must not hold the
/// command: the reader is left behind after the deadline.
pub async fn read_bounded(volume: Option<&Path>, now: Timestamp) -> VolumeRead {
    let Some(path) = volume.map(Path::to_path_buf) else {
        return VolumeRead::default();
    };
    let shown = path.display().to_string();
    let read = tokio::task::spawn_blocking(move || read_volumes(&path, Some(&path), None, now));
    match tokio::time::timeout(VOLUME_READ_TIMEOUT, read).await {
        Ok(Ok(read)) => read,
        Ok(Err(e)) => failed(format!("volume reader task: {e}")),
        Err(_) => failed(format!(
            "{shown}: no answer within {}s",
            VOLUME_READ_TIMEOUT.as_secs()
        )),
    }
}

/// A read that did not answer at all.
pub fn failed(why: String) -> VolumeRead {
    VolumeRead {
        wal: Some(Err(why)),
        datadir: None,
    }
}

/// Asks the server, when a target is configured.
pub async fn query(sql: Option<&SqlTarget>) -> Option<Result<SqlFacts, String>> {
    Some(sql::query(sql?).await.map_err(|e| e.to_string()))
}

/// The pure part of [`gather`]: `None` for a source not asked, `Err` for one that failed.
/// `slots` remembers each slot's `restart_lsn` across calls to judge whether it moves.
pub fn combine(
    read: VolumeRead,
    sql: Option<Result<SqlFacts, String>>,
    slots: &mut Tracker,
    limits: Limits,
    now: Timestamp,
) -> WalHealth {
    let mut h = WalHealth {
        observed_at: Some(now),
        ..Default::default()
    };
    let (markers, newest) = wal_dir(&mut h, read.wal);
    let disk = match read.datadir {
        Some(Ok(d)) => Some(disk_view(d, newest.as_deref(), slots, now)),
        Some(Err(e)) => {
            h.detail.errors.push(format!("data directory: {e}"));
            None
        }
        None => None,
    };
    let facts = match sql {
        Some(Ok(f)) => Some(f),
        Some(Err(e)) => {
            h.detail.errors.push(format!("sql: {e}"));
            None
        }
        None => None,
    };
    let mut problems = Vec::new();
    if let Some(d) = &disk {
        from_disk(&mut h, d, &mut problems);
    }
    if let Some(f) = &facts {
        if let Some(d) = &disk {
            h.detail.disagreements = disagreements(d, f);
        }
        problems = from_sql(&mut h, f, now);
    }
    if h.archive_configured.is_none() && markers.is_some_and(|m| m > 0) {
        h.archive_configured = Some(true);
    }
    if h.archive_configured == Some(true) {
        problems.extend(backlog_problems(&h, limits));
        h.archive_healthy = Some(problems.is_empty());
    }
    h.detail.problems = problems;
    h
}

/// The `pg_wal` directory's facts; returns the `.ready`+`.done` marker count and the segment
/// written last.
fn wal_dir(
    h: &mut WalHealth,
    wal: Option<Result<VolumeWal, String>>,
) -> (Option<u64>, Option<String>) {
    match wal {
        None => (None, None),
        Some(Ok(VolumeWal::Here(s))) => {
            h.sources.volume = true;
            h.pending_files = Some(s.ready_files);
            h.oldest_pending_seconds = s.oldest_ready_seconds;
            h.detail.wal_bytes = Some(s.segment_bytes);
            h.detail.wal_on_volume = Some(true);
            (Some(s.ready_files + s.done_files), s.newest_segment)
        }
        Some(Ok(VolumeWal::Elsewhere { link, target })) => {
            h.detail.wal_on_volume = Some(false);
            h.detail.errors.push(format!(
                "volume: {} is a symlink to {}: WAL lives on another volume",
                link.display(),
                target.display()
            ));
            (None, None)
        }
        Some(Err(e)) => {
            h.detail.errors.push(format!("volume: {e}"));
            (None, None)
        }
    }
}

/// The data directory with each slot's retention and activity judged.
#[derive(Debug, Clone)]
pub struct DiskView {
    pub dir: DataDir,
    pub position: Option<WalPosition>,
    pub slots: Vec<DiskSlot>,
    /// How long a slot must stand still to count as inactive.
    pub window: jiff::SignedDuration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskSlot {
    pub name: String,
    pub logical: bool,
    pub restart_lsn: Lsn,
    pub retained_bytes: Option<u64>,
    pub activity: SlotActivity,
}

pub fn disk_view(
    dir: DataDir,
    newest_segment: Option<&str>,
    tracker: &mut Tracker,
    now: Timestamp,
) -> DiskView {
    let position = dir.position_from(newest_segment);
    let lsn = position.map(|p| p.lsn);
    let files: Vec<_> = match &dir.slots {
        Ok(reads) => reads.iter().filter_map(|r| r.file.as_ref().ok()).collect(),
        Err(_) => Vec::new(),
    };
    let seen: Vec<(&str, Lsn)> = files
        .iter()
        .map(|f| (f.name.as_str(), f.restart_lsn))
        .collect();
    let window = tracker.window_for(dir.checkpoint_timeout);
    let activity = tracker.observe(&dir.path, &seen, lsn, window, now);
    let slots = files
        .iter()
        .zip(activity)
        .map(|(f, activity)| DiskSlot {
            name: f.name.clone(),
            logical: f.logical,
            restart_lsn: f.restart_lsn,
            retained_bytes: lsn.map(|p| f.retains(p)),
            activity,
        })
        .collect();
    DiskView {
        dir,
        position,
        slots,
        window,
    }
}

/// What the data directory says, before SQL (if it answers) overrides it.
fn from_disk(h: &mut WalHealth, d: &DiskView, problems: &mut Vec<String>) {
    h.sources.volume = true;
    h.detail.role = Some(d.dir.role);
    h.detail.in_recovery = Some(d.dir.role.in_recovery());
    h.detail.restoring_backup = d.dir.backup_label;
    if let Err(e) = &d.dir.control {
        h.detail.errors.push(format!("data directory: {e}"));
    }
    let a = &d.dir.archive;
    for u in &a.unread {
        h.detail.errors.push(format!("configuration not read: {u}"));
    }
    h.detail.archive_mode.clone_from(&a.mode);
    if let Some(mode) = &a.mode {
        h.archive_configured = Some(configured(mode, d.dir.role.in_recovery()));
    }
    // A primary with archiving off never marks a segment `.ready` (and drops leftovers at its
    // next checkpoint): segments waiting say archiving is on by a setting the volume does not
    // show. Not "off", then: the markers decide.
    let waiting = h.pending_files.unwrap_or(0);
    if h.archive_configured == Some(false) && d.dir.role == ServerRole::Primary && waiting > 0 {
        h.archive_configured = None;
        h.detail.errors.push(format!(
            "archive_mode reads off, yet {waiting} segments wait to be archived: a setting the volume does not show turns archiving on"
        ));
    }
    if h.archive_configured == Some(true)
        && let (Some(c), Some(l)) = (&a.command, &a.library)
        && let Some(p) = empty_command(a.mode.as_deref().unwrap_or(""), c, l)
    {
        problems.push(p);
    }
    match &d.dir.slots {
        Err(e) => h.detail.errors.push(format!("data directory: {e}")),
        Ok(reads) => {
            for r in reads {
                if let Err(e) = &r.file {
                    h.detail
                        .errors
                        .push(format!("replication slot {}: {e}", r.dir));
                }
            }
        }
    }
    h.detail.position = d.position;
    if d.dir.slots.is_ok() {
        h.detail.slots = Some(d.slots.iter().map(DiskSlot::listed).collect());
    }
    if d.position.is_some() && d.dir.slots.is_ok() {
        h.inactive_slots = Some(
            d.slots
                .iter()
                .filter(|s| s.activity != SlotActivity::Active)
                .map(|s| SlotRetention {
                    name: s.name.clone(),
                    retained_bytes: s.retained_bytes.unwrap_or(0),
                    activity: s.activity,
                    restart_lsn: s.shown_lsn(),
                })
                .collect(),
        );
    }
}

impl DiskSlot {
    /// `restart_lsn` as `pg_replication_slots` shows it: null when the slot reserves no WAL.
    fn shown_lsn(&self) -> Option<Lsn> {
        Some(self.restart_lsn).filter(|l| l.is_valid())
    }

    fn listed(&self) -> ReplicationSlot {
        ReplicationSlot {
            slot_name: self.name.clone(),
            slot_type: if self.logical { "logical" } else { "physical" }.into(),
            restart_lsn: self.shown_lsn(),
            retained_bytes: self.retained_bytes,
            activity: self.activity,
        }
    }
}

/// What SQL says; it replaces the volume's answer for every fact it gives.
fn from_sql(h: &mut WalHealth, f: &SqlFacts, now: Timestamp) -> Vec<String> {
    h.sources.sql = true;
    h.detail.in_recovery = Some(f.in_recovery);
    h.detail.role = Some(match (f.in_recovery, h.detail.role) {
        (false, _) => ServerRole::Primary,
        (true, Some(ServerRole::Recovery)) => ServerRole::Recovery,
        (true, _) => ServerRole::Standby,
    });
    h.detail.archive_mode = Some(f.archive_mode.clone());
    h.detail.failed_count = Some(f.archiver.failed_count);
    h.detail.last_archived_time = f.archiver.last_archived_time;
    h.detail.last_failed_time = f.archiver.last_failed_time;
    if h.pending_files.is_none() {
        h.pending_files = Some(f.ready_files);
        h.oldest_pending_seconds = f.oldest_ready.map(|t| age_seconds(t, now));
    }
    h.detail.wal_bytes = h.detail.wal_bytes.or(Some(f.wal_bytes));
    if let Some(lsn) = f.position {
        h.detail.position = Some(WalPosition {
            lsn,
            source: PositionSource::Sql,
        });
    }
    h.detail.slots = Some(f.slots.iter().map(sql_slot).collect());
    h.inactive_slots = Some(
        f.slots
            .iter()
            .filter(|s| !s.active)
            .map(|s| SlotRetention {
                name: s.name.clone(),
                retained_bytes: s.retained_bytes.unwrap_or(0),
                activity: SlotActivity::Inactive,
                restart_lsn: s.restart_lsn,
            })
            .collect(),
    );
    h.archive_configured = Some(configured(&f.archive_mode, f.in_recovery));
    if h.archive_configured == Some(true) {
        sql_problems(f)
    } else {
        Vec::new()
    }
}

fn sql_slot(s: &sql::SlotInfo) -> ReplicationSlot {
    ReplicationSlot {
        slot_name: s.name.clone(),
        slot_type: s.slot_type.clone(),
        restart_lsn: s.restart_lsn,
        retained_bytes: s.retained_bytes,
        activity: if s.active {
            SlotActivity::Active
        } else {
            SlotActivity::Inactive
        },
    }
}

/// Where the volume and SQL both answered and differ.
fn disagreements(d: &DiskView, f: &SqlFacts) -> Vec<String> {
    let mut out = Vec::new();
    if d.dir.role.in_recovery() != f.in_recovery {
        out.push(format!(
            "role: the data directory's signal files say {}, SQL says {}",
            if d.dir.role.in_recovery() {
                "in recovery"
            } else {
                "primary"
            },
            if f.in_recovery {
                "in recovery"
            } else {
                "primary"
            },
        ));
    }
    if let Some(mode) = &d.dir.archive.mode
        && !mode.eq_ignore_ascii_case(&f.archive_mode)
    {
        out.push(format!(
            "archive_mode: the configuration files say {mode}, SQL says {} (not reloaded or restarted since the change?)",
            f.archive_mode
        ));
    }
    for s in &d.slots {
        match f.slots.iter().find(|q| q.name == s.name) {
            None => out.push(format!(
                "replication slot {}: on the volume, not in pg_replication_slots",
                s.name
            )),
            Some(q) if q.active && s.activity == SlotActivity::Inactive => out.push(format!(
                "replication slot {}: SQL says active, but its restart_lsn ({}) has not moved for {} while WAL advanced (a stuck consumer?)",
                s.name,
                s.restart_lsn,
                d.window
            )),
            Some(_) => {}
        }
    }
    for q in &f.slots {
        if !d.slots.iter().any(|s| s.name == q.name) {
            out.push(format!(
                "replication slot {}: in pg_replication_slots, not on the volume (temporary, or not yet checkpointed)",
                q.name
            ));
        }
    }
    out
}

fn configured(mode: &str, in_recovery: bool) -> bool {
    match mode.to_ascii_lowercase().as_str() {
        "always" => true,
        "on" => !in_recovery,
        _ => false,
    }
}

fn empty_command(mode: &str, command: &str, library: &str) -> Option<String> {
    (command.trim().is_empty() && library.trim().is_empty()).then(|| {
        format!(
            "archive_mode is {mode} but archive_command and archive_library are empty: WAL is kept until one is set"
        )
    })
}

fn sql_problems(f: &SqlFacts) -> Vec<String> {
    let mut out = Vec::new();
    out.extend(empty_command(
        &f.archive_mode,
        &f.archive_command,
        &f.archive_library,
    ));
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

fn backlog_problems(h: &WalHealth, limits: Limits) -> Vec<String> {
    let mut out = Vec::new();
    let max = limits.max_pending;
    if let Some(p) = h.pending_files.filter(|&p| max > 0 && p > max) {
        out.push(format!("{p} segments wait to be archived (over {max})"));
    }
    let max_age = limits.max_pending_age_seconds;
    if let Some(age) = h
        .oldest_pending_seconds
        .filter(|&a| max_age > 0 && a > max_age)
    {
        out.push(format!(
            "the oldest segment has waited {age}s to be archived (over {max_age}s)"
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
}
