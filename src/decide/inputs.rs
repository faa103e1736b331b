//! What the decision engine is told: plain data, gathered by the shells.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::wal_inputs::WalHealth;
use crate::policy::Policy;

/// One filesystem measurement (statfs, or the kubelet's numbers as a fallback).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Measurement {
    pub capacity_bytes: u64,
    pub used_bytes: u64,
    /// Bytes available to unprivileged users (statfs f_bavail).
    pub available_bytes: u64,
    pub inodes_total: u64,
    pub inodes_used: u64,
}

impl Measurement {
    /// Percent used as `df` computes it: used / (used + available), so blocks reserved for
    /// root count as not available.
    pub fn used_percent(&self) -> f64 {
        let denom = self.used_bytes as f64 + self.available_bytes as f64;
        if denom <= 0.0 {
            0.0
        } else {
            self.used_bytes as f64 * 100.0 / denom
        }
    }

    /// Percent of inodes used; 0 when the filesystem has no inode limit (e.g. btrfs reports 0).
    pub fn inode_percent(&self) -> f64 {
        if self.inodes_total == 0 {
            0.0
        } else {
            self.inodes_used as f64 * 100.0 / self.inodes_total as f64
        }
    }

    /// At or past a line: `used_percent` used, under `min_available` bytes free (0: no such
    /// line), or `inode_percent` of inodes used (on filesystems with an inode limit). The
    /// engine's threshold and emergency lines, and the measurement loop's triggers.
    pub fn crosses(&self, used_percent: f64, min_available: u64, inode_percent: f64) -> bool {
        self.used_percent() >= used_percent
            || (min_available > 0 && self.available_bytes < min_available)
            || (self.inodes_total > 0 && self.inode_percent() >= inode_percent)
    }
}

/// Where the claim's last resize stands, as read from its spec and status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ResizeState {
    Idle,
    /// Requested size above status capacity, or a Resizing/FileSystemResizePending condition.
    InProgress {
        since: Option<Timestamp>,
    },
    /// ControllerResizeError/NodeResizeError, *Infeasible, or stuck past the resize timeout.
    Failed {
        cause: FailureCause,
        detail: String,
    },
}

/// Why a resize failed: what the Events, the status and the retry act on (the `detail` beside
/// it is for people).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureCause {
    /// The storage system refused the size (KEP-1790 `*Infeasible`): a lower request may recover.
    Infeasible,
    /// A resize error condition, or a resize in flight past the timeout.
    Stuck,
    /// The claim grew, but the filesystem the volume shows did not.
    FilesystemNotExpanded,
    /// The storage grew the volume, but the node holds `FileSystemResizePending` past the
    /// timeout while the pod runs: its CSI driver grows the filesystem only at the next mount,
    /// so a restart of the pod finishes it (`offlineExpansion: evict`).
    NeedsRemount,
    /// The controller side held past the timeout while the volume is in use, with no error: a
    /// driver that expands only a detached volume waits for the pod to be gone (or the resizer
    /// is stuck). A restart does not help: the pod comes back before the controller is done.
    NeedsDetach,
    /// Grown through the owning cluster, and the operator has not applied its size to this
    /// claim within the timeout (`resizeThrough: owner`).
    AwaitingOwner,
}

impl FailureCause {
    /// Waits for something outside the storage (a restart, a detach, the operator) rather than
    /// failed in it.
    pub fn waits_for_the_pod(self) -> bool {
        matches!(
            self,
            FailureCause::NeedsRemount | FailureCause::NeedsDetach | FailureCause::AwaitingOwner
        )
    }
}

/// The claim's sizes: what was asked for and what the storage system says it has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClaimState {
    /// `spec.resources.requests.storage`.
    pub request_bytes: u64,
    /// `status.capacity.storage` (0 when unknown).
    pub capacity_bytes: u64,
    pub resize: ResizeState,
}

impl ClaimState {
    /// The size decisions grow from: the larger of request and capacity.
    pub fn current_bytes(&self) -> u64 {
        self.request_bytes.max(self.capacity_bytes)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum GrowKind {
    Grow,
    ScheduledGrow,
    EmergencyGrow,
    /// A new member of a group (CloudNativePG cluster, StatefulSet) grown to its peers' size.
    GroupGrow,
    /// An infeasible request lowered again (KEP-1790); never a decision of the engine.
    Retry,
}

impl GrowKind {
    pub fn as_str(self) -> &'static str {
        match self {
            GrowKind::Grow => "Grow",
            GrowKind::ScheduledGrow => "ScheduledGrow",
            GrowKind::EmergencyGrow => "EmergencyGrow",
            GrowKind::GroupGrow => "GroupGrow",
            GrowKind::Retry => "Retry",
        }
    }
}

/// One past action, as kept in the claim's history annotation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Action {
    pub at: Timestamp,
    pub kind: GrowKind,
    pub from: u64,
    pub to: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node: String,
    /// The filesystem's size (statfs) when the action was decided: the resize is in flight until
    /// a later measurement shows the filesystem larger than this. Absent in older entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fs_before: Option<u64>,
    /// When a measurement first showed the filesystem grown by this action: `landed - at` is how
    /// long this claim's resizes take, which the predictive trigger learns its lead time from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub landed: Option<Timestamp>,
    /// No measurement watched it land (the agent measuring the volume started after the PATCH,
    /// after a restart or an upgrade): `landed` is when the growth was first seen, which may be
    /// hours after it happened, so it teaches no lead time.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub landed_unwatched: bool,
    /// What became of it (the RFC's `result`). Absent in older entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<ActionResult>,
    /// The instance (pod) the volume served when the action was taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// The volume's type (`data`, `wal`, `tablespace`, `other`), the RFC's `volumeType`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_type: Option<VolumeRole>,
    /// The tablespace the volume holds, for a tablespace volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tablespace: Option<String>,
    /// The logical action this entry belongs to (logical volumes, `decide::logical`); absent in
    /// entries written before them and on claims in none, each of which is its own action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<ActionId>,
    /// When headroom evicted the pod to finish this resize (`offlineExpansion: evict`): the
    /// durable record that it is never done twice for one resize.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evicted: Option<Timestamp>,
    /// This grow was written to the owner's size field instead of the claim (`resizeThrough:
    /// owner`): the operator applies it to the claims. One field per logical volume, so the
    /// flag alone says which; short, as fifty entries share the annotation's budget.
    #[serde(default, rename = "owner", skip_serializing_if = "std::ops::Not::not")]
    pub through_owner: bool,

    /// The grow was decided from the predicted fill (the predictive trigger), not from a line
    /// already crossed. Kept here because the status that also says so is rewritten every scan.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub predicted: bool,
    /// The filesystem's used percent the grow was decided on. Absent in older entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_percent: Option<Percent>,
    /// The fill rate (bytes per second, whole) the grow was decided on, when one was estimated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_per_second: Option<u64>,
    /// The person's approval this grow carried out (`enforcement: approve`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Approval>,
}

/// The longest field manager an [`Approval`] keeps (client-chosen text).
pub const APPROVER_CHARS: usize = 64;

/// An approval carried out, as its history entry records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Approval {
    /// The recommendation's id, as `headroom.dev/approve` named it.
    pub id: String,
    /// When the agent saw it and grew.
    pub at: Timestamp,
    /// The field manager that set `headroom.dev/approve` (the client, e.g. `kubectl-annotate`;
    /// the API server's audit log names the person), when the claim's managedFields say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// A percent as the history keeps it, with one decimal. Only finite values are made (and JSON
/// holds no others), so it compares like a number that is never NaN.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Percent(f64);

impl Eq for Percent {}

impl Percent {
    /// `value` rounded to one decimal; `None` when it is not a finite number.
    pub fn of(value: f64) -> Option<Self> {
        value
            .is_finite()
            .then(|| Percent((value * 10.0).round() / 10.0))
    }

    pub fn get(self) -> f64 {
        self.0
    }
}

/// Names the logical action a history entry belongs to: the acting claim's uid (its first
/// characters) and the action's time, so two agents never mint the same id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ActionId(pub(super) String);

/// Characters of the claim's uid kept in an id: enough to tell the members of one volume apart.
const UID_CHARS: usize = 8;

impl ActionId {
    pub fn new(claim_uid: &str, at: Timestamp) -> Self {
        let uid: String = claim_uid.chars().take(UID_CHARS).collect();
        ActionId(format!("{uid}-{}", at.as_second()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ActionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What the engine is told about the claim's logical volume.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Logical {
    /// One entry per distinct logical action across every member's history (the action's
    /// first entry, whose time is the action's). The budget and cooldown count these.
    pub actions: Vec<Action>,
    /// The largest request among the members, this claim included.
    pub size: u64,
    /// The action that set `size`: the newest grow to it in the history of a member at it.
    /// `None` when no member's history shows one (a request edited by hand, an entry written
    /// before logical volumes): a raise to it is then an action of its own.
    pub source: Option<ActionId>,
    /// This claim's own history already has an entry of `source`: it followed that action once
    /// and does not follow it again.
    pub joined: bool,
}

impl Logical {
    /// The action a group raise of this claim belongs to, when it joins one already counted.
    pub fn joins(&self) -> Option<&ActionId> {
        self.source.as_ref().filter(|_| !self.joined)
    }
}

/// What became of a resize request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ActionResult {
    /// Sent and accepted; the filesystem does not show it yet.
    Requested,
    /// A measurement showed the filesystem grown (`landed`).
    Succeeded,
    /// The storage refused it, or the filesystem did not grow within the resize timeout.
    Failed,
}

impl Action {
    /// A resize of `kind` from `from` to `to` bytes decided at `at`, and nothing else known yet:
    /// the caller sets what it knows beside (`Action { node, ..Action::new(..) }`).
    pub fn new(at: Timestamp, kind: GrowKind, from: u64, to: u64) -> Self {
        Action {
            at,
            kind,
            from,
            to,
            node: String::new(),
            fs_before: None,
            landed: None,
            landed_unwatched: false,
            result: None,
            instance: None,
            volume_type: None,
            tablespace: None,
            action: None,
            evicted: None,
            through_owner: false,

            predicted: false,
            used_percent: None,
            bytes_per_second: None,
            approval: None,
        }
    }

    /// How long this resize took to reach the filesystem, once that has been seen land.
    pub fn took(&self) -> Option<jiff::SignedDuration> {
        self.landed
            .filter(|_| !self.landed_unwatched)
            .map(|l| l.duration_since(self.at))
    }
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
#[serde(rename_all = "lowercase")]
pub enum VolumeRole {
    Data,
    Wal,
    Tablespace,
    #[default]
    Other,
}

impl VolumeRole {
    pub fn as_str(self) -> &'static str {
        match self {
            VolumeRole::Data => "data",
            VolumeRole::Wal => "wal",
            VolumeRole::Tablespace => "tablespace",
            VolumeRole::Other => "other",
        }
    }
}

/// Facts about the volume that are not measurements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct VolumeFacts {
    pub role: VolumeRole,
    /// A Postgres data volume that also holds WAL (no separate WAL volume).
    pub wal_on_data: bool,
    /// The numbers are a shared filesystem's, not the claim's own.
    pub shared: bool,
    /// The StorageClass allows expansion.
    pub expandable: bool,
    pub block_mode: bool,
    /// No measurement is available (the numbers passed in are zeros).
    pub unmeasured: bool,
    /// The claim is bound but its `status.capacity` is absent: its size is not known.
    pub capacity_unknown: bool,
    /// This node is cordoned or being drained.
    pub node_draining: bool,
    /// Its Postgres instance restores a base backup (`backup_label` in the data directory, e.g.
    /// `pg_basebackup` building a replica): the fill is the copy's, not the database's. Its rate
    /// is not extrapolated; the claim is sized to its group's size (its source's), and outside a
    /// group grows by its step.
    pub restoring: bool,
    /// The claim's VolumeAttributesClass is changing (`k8s::claim::attributes_changing`): the
    /// storage is modifying the volume, and a resize now would be refused.
    pub attributes_changing: bool,
    /// The group's effective size: the largest request among the volumes of its logical group.
    pub group_size: Option<u64>,
    /// The largest request the namespace's ResourceQuotas admit for this claim (see
    /// [`super::quota::ceiling`]); `None` when no quota limits it.
    pub quota_ceiling: Option<u64>,
    /// What the storage pool the volume is carved from can still give (see [`super::pool`]);
    /// `None` when its driver publishes nothing for this node.
    pub pool: Option<super::pool::PoolRoom>,
    /// The pod's role, its peers and past refusals, for a restart that finishes a resize.
    pub restart: super::restart_facts::RestartFacts,
    /// What the owning cluster showed that stops growth (`resizeThrough: owner`), when it was
    /// read.
    pub owner: Option<OwnerProblem>,
}

/// Why the owning cluster a claim is grown through stops its growth.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OwnerProblem {
    /// It declares less than headroom set it to: someone lowered it (a GitOps sync).
    Reverted,
    /// It could not be read or has an unexpected shape.
    Invalid,
}

impl VolumeFacts {
    /// Does WAL live on this volume?
    pub fn holds_wal(&self) -> bool {
        self.role == VolumeRole::Wal || (self.role == VolumeRole::Data && self.wal_on_data)
    }
}

/// The policy as the engine sees it: valid, or refused at some level.
#[derive(Debug, Clone, Copy)]
pub enum PolicyInput<'a> {
    Valid(&'a Policy),
    Invalid,
}

/// Everything one decision depends on. `now` is passed in: the engine never reads a clock.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    pub policy: PolicyInput<'a>,
    pub measurement: Measurement,
    pub claim: &'a ClaimState,
    pub history: &'a [Action],
    pub wal: Option<&'a WalHealth>,
    pub facts: VolumeFacts,
    pub now: Timestamp,
    /// The volume's recent fill rate (see [`super::rate`]); `None` when not (yet) known. Only
    /// `trigger.predictive` acts on it; `seconds_to_full` reports it.
    pub fill_rate: Option<super::rate::FillRate>,
    /// The claim's logical volume, when it shares budget and history with one; `None`: the
    /// claim's own history alone, as for a claim in no logical volume.
    pub logical: Option<&'a Logical>,
}
