//! The server's side of [`super::combine`]: what SQL answers replaces the volume's answer for
//! every fact it gives, and where both answered and differ, the difference is listed.

use jiff::Timestamp;

use super::{DiskView, age_seconds, configured, empty_command};
use crate::decide::{
    PositionSource, ReplicationSlot, ServerRole, SlotActivity, SlotRetention, WalHealth,
    WalPosition,
};
use crate::postgres::sql::{self, SqlFacts};

/// What SQL says; it replaces the volume's answer for every fact it gives.
pub(super) fn from_sql(h: &mut WalHealth, f: &SqlFacts, now: Timestamp) -> Vec<String> {
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
pub(super) fn disagreements(d: &DiskView, f: &SqlFacts) -> Vec<String> {
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
