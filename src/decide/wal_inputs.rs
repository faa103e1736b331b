//! What the engine is told of a Postgres volume's WAL: archiving, replication slots and the
//! server's role, from the volume and over SQL (gathered by the postgres shell).

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::lsn::{Lsn, WalPosition};

/// A replication slot not known to be in use, and the WAL it holds back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotRetention {
    pub name: String,
    pub retained_bytes: u64,
    #[serde(default)]
    pub activity: SlotActivity,
    /// Where it holds WAL from, as `pg_replication_slots.restart_lsn` says it; `None` when it
    /// reserves none (or an older status did not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_lsn: Option<Lsn>,
}

/// One replication slot, in the columns of `pg_replication_slots` headroom reads: every slot,
/// in use or not, for people (the engine reads [`WalHealth::inactive_slots`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicationSlot {
    pub slot_name: String,
    /// `physical` or `logical`.
    pub slot_type: String,
    /// `None` (null) when the slot reserves no WAL, as in `pg_replication_slots`.
    pub restart_lsn: Option<Lsn>,
    /// WAL held back: the position ([`WalDetail::position`]) minus `restart_lsn`.
    pub retained_bytes: Option<u64>,
    pub activity: SlotActivity,
}

/// Whether a slot is in use: SQL's `pg_replication_slots.active`, or, from the volume, whether
/// its `restart_lsn` moves (see `postgres::slots`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SlotActivity {
    Active,
    /// SQL says no process holds it, or the volume saw it stand still while WAL advanced.
    #[default]
    Inactive,
    /// Not yet seen long enough to tell (the volume's view only).
    Unknown,
}

impl SlotActivity {
    pub fn as_str(self) -> &'static str {
        match self {
            SlotActivity::Active => "active",
            SlotActivity::Inactive => "inactive",
            SlotActivity::Unknown => "unknown",
        }
    }
}

/// The server's role, from `pg_is_in_recovery()` or the data directory's signal files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerRole {
    Primary,
    Standby,
    /// `recovery.signal`: a point-in-time restore not yet promoted.
    Recovery,
}

impl ServerRole {
    /// A standby, or a server replaying archived WAL.
    pub fn in_recovery(self) -> bool {
        self != ServerRole::Primary
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ServerRole::Primary => "primary",
            ServerRole::Standby => "standby",
            ServerRole::Recovery => "recovery",
        }
    }
}

/// What answered when WAL health was gathered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct WalSources {
    pub volume: bool,
    pub sql: bool,
}

/// WAL health of one Postgres instance; `None` is unknown, a real state the engine fails open on.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct WalHealth {
    pub archive_configured: Option<bool>,
    /// False when the last failure is newer than the last success, or the backlog is over
    /// `maxPendingWALFiles`.
    pub archive_healthy: Option<bool>,
    pub pending_files: Option<u64>,
    pub oldest_pending_seconds: Option<u64>,
    /// Replication slots not known to be in use and the WAL they hold back; `None` when slots
    /// are unknown.
    pub inactive_slots: Option<Vec<SlotRetention>>,
    pub sources: WalSources,
    pub observed_at: Option<Timestamp>,
    /// What operators debugging a blocked resize want to see; the engine does not read it.
    #[serde(flatten, default)]
    pub detail: WalDetail,
}

/// Operator-facing extras of [`WalHealth`] (flattened into its JSON); `None` is unknown.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct WalDetail {
    #[serde(default)]
    pub in_recovery: Option<bool>,
    #[serde(default)]
    pub role: Option<ServerRole>,
    /// `backup_label` in the data directory: a restored base backup that has not finished
    /// recovery.
    #[serde(default)]
    pub restoring_backup: bool,
    #[serde(default)]
    pub archive_mode: Option<String>,
    #[serde(default)]
    pub failed_count: Option<u64>,
    #[serde(default)]
    pub last_archived_time: Option<Timestamp>,
    #[serde(default)]
    pub last_failed_time: Option<Timestamp>,
    /// Bytes of WAL segments in `pg_wal`.
    #[serde(default)]
    pub wal_bytes: Option<u64>,
    /// False when the volume's `pg_wal` is a symlink: WAL lives on another volume.
    #[serde(default)]
    pub wal_on_volume: Option<bool>,
    /// The WAL position slots' retention is measured from, and where it came from.
    #[serde(default)]
    pub position: Option<WalPosition>,
    /// Every replication slot, as `pg_replication_slots` lists them (by name); `None` unknown.
    #[serde(default)]
    pub slots: Option<Vec<ReplicationSlot>>,
    /// Why archiving counts as unhealthy.
    #[serde(default)]
    pub problems: Vec<String>,
    /// Why a source did not answer.
    #[serde(default)]
    pub errors: Vec<String>,
    /// Where the volume and SQL both answered and said different things (SQL was used).
    #[serde(default)]
    pub disagreements: Vec<String>,
}
