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
    ReplicationSlot, ServerRole, SlotActivity, SlotRetention, WalHealth, WalPosition,
};
use sql_view::{disagreements, from_sql};

mod sql_view;

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
