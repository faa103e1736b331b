//! What the engine answers.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::budget::BudgetView;
use super::inputs::GrowKind;

/// Why growth that is needed (or that the engine was asked about) does not happen. The names are
/// stable: they are metric label values and Event messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockReason {
    AtLimit,
    BudgetExhausted,
    OutsideWindow,
    Cooldown,
    WalArchiveUnhealthy,
    WalPendingFiles,
    WalSlotRetention,
    WalRiskNotAcknowledged,
    ResizeInProgress,
    ResizeFailed,
    SharedFilesystem,
    NotExpandable,
    BlockMode,
    /// The volume could not be measured (statfs failed and no other source answered).
    NotMeasured,
    NodeDraining,
    InvalidPolicy,
    Disabled,
    /// A bound claim without `status.capacity`: its size is unknown, so no resize is computed
    /// from it (the in-flight guard could not see a resize either).
    CapacityUnknown,
    /// Evaluating the claim panicked (a bug); the claim is left alone, the scan goes on.
    InternalError,
    /// The namespace's ResourceQuota leaves too little for a step that would still do (see
    /// [`super::quota`]): the API server would refuse the write.
    QuotaExhausted,
    /// The volume was grown less than `modificationInterval` ago (its CSI driver's storage
    /// accepts one resize per interval, e.g. AWS EBS 6 h): a grow now would be refused.
    ModificationInterval,
    /// The storage grew the volume; the node grows the filesystem only when the volume is
    /// mounted again (`FileSystemResizePending` past the resize timeout while the pod runs).
    AwaitingRemount,
    /// The controller has not finished while the volume is in use: a driver that expands only a
    /// detached volume waits for the pod to be gone.
    AwaitingDetach,
    /// The claim's VolumeAttributesClass is changing (KEP-3751): the storage is modifying the
    /// volume and would refuse a resize until that lands.
    VolumeAttributesChanging,
    /// Grown through its owning cluster (`resizeThrough: owner`), and the operator has not
    /// applied the owner's new size to this claim within the resize timeout.
    AwaitingOwner,
    /// The owning cluster declares less than headroom set it to (a GitOps sync reverted it):
    /// headroom stops instead of fighting it.
    OwnerReverted,
    /// The owning cluster could not be read, or has an unexpected shape: no action.
    OwnerInvalid,
    /// The storage pool the volume is carved from (its node's volume group, as
    /// `CSIStorageCapacity` or TopoLVM's node annotation says) has too little free for a step
    /// that would still do: the storage would refuse the resize.
    PoolExhausted,
}

impl BlockReason {
    pub const ALL: [BlockReason; 28] = [
        BlockReason::AtLimit,
        BlockReason::BudgetExhausted,
        BlockReason::OutsideWindow,
        BlockReason::Cooldown,
        BlockReason::WalArchiveUnhealthy,
        BlockReason::WalPendingFiles,
        BlockReason::WalSlotRetention,
        BlockReason::WalRiskNotAcknowledged,
        BlockReason::ResizeInProgress,
        BlockReason::ResizeFailed,
        BlockReason::SharedFilesystem,
        BlockReason::NotExpandable,
        BlockReason::BlockMode,
        BlockReason::NotMeasured,
        BlockReason::NodeDraining,
        BlockReason::InvalidPolicy,
        BlockReason::Disabled,
        BlockReason::CapacityUnknown,
        BlockReason::InternalError,
        BlockReason::QuotaExhausted,
        BlockReason::ModificationInterval,
        BlockReason::AwaitingRemount,
        BlockReason::AwaitingDetach,
        BlockReason::VolumeAttributesChanging,
        BlockReason::AwaitingOwner,
        BlockReason::OwnerReverted,
        BlockReason::OwnerInvalid,
        BlockReason::PoolExhausted,
    ];

    /// The reason `as_str` names (a status annotation's `blockedReason`).
    pub fn parse(text: &str) -> Option<BlockReason> {
        Self::ALL.into_iter().find(|r| r.as_str() == text)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            BlockReason::AtLimit => "at_limit",
            BlockReason::BudgetExhausted => "budget_exhausted",
            BlockReason::OutsideWindow => "outside_window",
            BlockReason::Cooldown => "cooldown",
            BlockReason::WalArchiveUnhealthy => "wal_archive_unhealthy",
            BlockReason::WalPendingFiles => "wal_pending_files",
            BlockReason::WalSlotRetention => "wal_slot_retention",
            BlockReason::WalRiskNotAcknowledged => "wal_risk_not_acknowledged",
            BlockReason::ResizeInProgress => "resize_in_progress",
            BlockReason::ResizeFailed => "resize_failed",
            BlockReason::SharedFilesystem => "shared_filesystem",
            BlockReason::NotExpandable => "not_expandable",
            BlockReason::BlockMode => "block_mode",
            BlockReason::NotMeasured => "not_measured",
            BlockReason::NodeDraining => "node_draining",
            BlockReason::InvalidPolicy => "invalid_policy",
            BlockReason::Disabled => "disabled",
            BlockReason::CapacityUnknown => "capacity_unknown",
            BlockReason::InternalError => "internal_error",
            BlockReason::QuotaExhausted => "quota_exhausted",
            BlockReason::ModificationInterval => "modification_interval",
            BlockReason::AwaitingRemount => "awaiting_remount",
            BlockReason::AwaitingDetach => "awaiting_detach",
            BlockReason::VolumeAttributesChanging => "volume_attributes_changing",
            BlockReason::AwaitingOwner => "awaiting_owner",
            BlockReason::OwnerReverted => "owner_reverted",
            BlockReason::OwnerInvalid => "owner_invalid",
            BlockReason::PoolExhausted => "pool_exhausted",
        }
    }
}

impl std::fmt::Display for BlockReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The state of a volume when no action is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum State {
    Balanced,
    NeedsGrow,
    /// Report only: Kubernetes cannot shrink a claim.
    NeedsShrink,
    Resizing,
}

impl State {
    pub const ALL: [State; 4] = [
        State::Balanced,
        State::NeedsGrow,
        State::NeedsShrink,
        State::Resizing,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            State::Balanced => "Balanced",
            State::NeedsGrow => "NeedsGrow",
            State::NeedsShrink => "NeedsShrink",
            State::Resizing => "Resizing",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict")]
pub enum Verdict {
    Grow { to: u64, kind: GrowKind },
    Blocked { reason: BlockReason },
    NoAction { state: State },
}

/// The engine's answer, with what the shells need to report it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    /// Flattened in JSON: `{"verdict": "Blocked", "reason": "at_limit", ...}`.
    #[serde(flatten)]
    pub verdict: Verdict,
    /// Convergent mode: the size the volume converges to.
    pub target_bytes: Option<u64>,
    /// The size a new claim of this volume should get (the RFC's `effectiveSize`): the largest
    /// of this claim's size, a grow being made, its group's size and, in convergent mode,
    /// `request`. `None` when the policy is off or refused.
    pub effective_bytes: Option<u64>,
    /// Actions left in the rolling 24 h budget to any kind (emergency reserve included).
    pub budget_left: u32,
    /// The budget, planned and emergency apart.
    pub budget: BudgetView,
    /// When the oldest action in the window leaves it (the next budget slot), if any is used.
    pub next_slot: Option<Timestamp>,
    /// Convergent mode: when the maintenance window next opens (now, if open).
    pub next_window: Option<Timestamp>,
    /// At the estimated fill rate, seconds until the filesystem is full; `None` when the rate is
    /// unknown or the volume is not filling.
    pub seconds_to_full: Option<f64>,
    /// At the pace the claim (or its logical volume) was grown over the last week, seconds until
    /// it reaches its limit: 0 at it, `None` while unknown (no grow in the week, invalid policy).
    pub seconds_to_limit: Option<f64>,
    /// The grow (or the need to grow) comes from the predictive trigger: the threshold is not
    /// crossed yet, but will be before a resize could land.
    pub predicted: bool,
    /// When `modificationInterval` next allows a grow, while it does not (the last grow was
    /// less than the interval ago).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_grow: Option<Timestamp>,
    /// When the hold on a needed grow ends by time alone ([`super::held`]): the storage's rule,
    /// the maintenance window, the cooldown, the daily budget, a refused eviction's retry. The
    /// fast measurement loop decides on the claim again then, not at the next scan. `None` when
    /// nothing holds it or what does has no end in time (a drain, WAL health, a quota).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_until: Option<Timestamp>,
    /// Convergent mode: the volume is past the emergency line (the RFC's `Emergency` state),
    /// whatever the verdict.
    pub emergency: bool,
    /// Things an operator should know that do not change the verdict (e.g. WAL health unknown).
    pub notes: Vec<Note>,
    /// A trigger not applied as written (an invalid or unreachable `minAvailable`), and what
    /// stands in for it: the claim's status, an Event and a metric say it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<crate::policy::Fallback>,
    /// KEP-1790: the storage refused the claim's request; lower it to this size, once (the
    /// largest step history shows worked, else the capacity the volume has). The verdict stays
    /// `resize_failed` until the lowered request lands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lower_to: Option<u64>,
    /// A group raise that belongs to a logical action already counted (logical volumes): the
    /// entry it records names that action and spends no new slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub joins: Option<super::inputs::ActionId>,
    /// The resize waits for a remount: whether to evict the pod now, and if not, why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<super::restart::Restart>,
}

impl Decision {
    /// The verdict and nothing else: no budget, no notes, no sizes.
    pub fn bare(verdict: Verdict) -> Decision {
        Decision {
            verdict,
            target_bytes: None,
            budget_left: 0,
            next_slot: None,
            next_window: None,
            seconds_to_full: None,
            seconds_to_limit: None,
            predicted: false,
            emergency: false,
            next_grow: None,
            held_until: None,
            budget: Default::default(),
            effective_bytes: None,
            notes: Vec::new(),
            fallback: None,
            lower_to: None,
            joins: None,
            restart: None,
        }
    }

    /// What the decision says of a base backup being restored here, if one is.
    pub fn restoring(&self) -> Option<&Note> {
        self.notes
            .iter()
            .find(|n| matches!(n, Note::Restoring { .. }))
    }

    pub fn blocked_reason(&self) -> Option<BlockReason> {
        match self.verdict {
            Verdict::Blocked { reason } => Some(reason),
            _ => None,
        }
    }

    pub fn grow_to(&self) -> Option<(u64, GrowKind)> {
        match self.verdict {
            Verdict::Grow { to, kind } => Some((to, kind)),
            _ => None,
        }
    }
}

/// One thing a decision says beside its verdict. Events, metrics and status render it; a layer
/// that acts on one matches its variant, never its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// No WAL health at all for a volume holding WAL: grown anyway (fail open).
    WalHealthUnknown,
    /// Archiving's health unknown: grown anyway (fail open).
    ArchiveHealthUnknown,
    /// Replication slots unknown: grown anyway (fail open).
    SlotsUnknown,
    ArchiveNotConfigured,
    PendingOverLimit {
        pending: u64,
        max: u64,
    },
    /// Why archiving counts as unhealthy, as the WAL reader said it.
    ArchiveProblem(String),
    SlotOverLimit {
        name: String,
        /// Not yet seen in use (rather than seen inactive).
        unknown: bool,
        retained: u64,
        limit: u64,
    },
    /// statfs could not measure the volume: the kubelet's numbers (of that time) were used.
    KubeletNumbers {
        at: Timestamp,
    },
    /// statfs could not measure the volume, and the kubelet's numbers are older than the last
    /// resize.
    KubeletNumbersStale,
    /// Evaluating the claim panicked (a bug): what the panic said.
    InternalError(String),
    /// The step was cut to what the namespace's ResourceQuota leaves.
    QuotaReduced {
        wanted: u64,
        to: u64,
    },
    /// The step was cut to what the storage pool can still give.
    PoolReduced {
        wanted: u64,
        to: u64,
    },
    /// No step that would do fits in the storage pool: `needed` is the increase the policy's
    /// step asks (before widening for the fill rate), `room` what the pool (less the reserve)
    /// still gives.
    PoolShort {
        needed: u64,
        room: u64,
    },
    /// The instance restores a base backup: sized to its group's size (`source`, its source's)
    /// while below it, else (outside a group too) grown by its step; its fill rate is the
    /// copy's and not extrapolated.
    Restoring {
        source: Option<u64>,
    },
    /// What the owning cluster showed (`resizeThrough: owner`): its field, and why it stops growth.
    Owner(String),
}

impl Note {
    /// A WAL fact that could not be read, so growth went ahead without it.
    pub fn is_wal_unknown(&self) -> bool {
        matches!(
            self,
            Note::WalHealthUnknown | Note::ArchiveHealthUnknown | Note::SlotsUnknown
        )
    }
}

impl std::fmt::Display for Note {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use crate::quantity::human;
        match self {
            Note::WalHealthUnknown => f.write_str("WAL health unknown: growing anyway (fail open)"),
            Note::ArchiveHealthUnknown => {
                f.write_str("WAL archive health unknown: growing anyway (fail open)")
            }
            Note::SlotsUnknown => {
                f.write_str("replication slots unknown: growing anyway (fail open)")
            }
            Note::ArchiveNotConfigured => f.write_str(
                "WAL archiving is not configured: requireArchiveHealthy does not block",
            ),
            Note::PendingOverLimit { pending, max } => write!(
                f,
                "{pending} WAL segments wait to be archived, over maxPendingWALFiles ({max})"
            ),
            Note::ArchiveProblem(p) => f.write_str(p),
            Note::SlotOverLimit {
                name,
                unknown,
                retained,
                limit,
            } => write!(
                f,
                "replication slot {name} ({}) retains {} of WAL, over maxSlotRetentionBytes ({})",
                if *unknown {
                    "not yet seen in use"
                } else {
                    "inactive"
                },
                human(*retained),
                human(*limit)
            ),
            Note::KubeletNumbers { at } => write!(
                f,
                "statfs could not measure the volume: using the kubelet's numbers from {at}"
            ),
            Note::InternalError(m) => write!(f, "internal error: {m}"),
            Note::QuotaReduced { wanted, to } => write!(
                f,
                "step reduced from {} to {} to fit the namespace's ResourceQuota",
                human(*wanted),
                human(*to)
            ),
            Note::PoolReduced { wanted, to } => write!(
                f,
                "step reduced from {} to {} to fit the storage pool",
                human(*wanted),
                human(*to)
            ),
            Note::PoolShort { needed, room } => write!(
                f,
                "the grow needs {} from the storage pool, which gives {}",
                human(*needed),
                human(*room)
            ),
            Note::KubeletNumbersStale => f.write_str(
                "statfs could not measure the volume; the kubelet's numbers predate headroom's last resize",
            ),
            Note::Restoring { source: Some(s) } => write!(
                f,
                "restoring a base backup: sized to its source ({}), not from the copy's fill rate",
                crate::quantity::format(*s)
            ),
            Note::Restoring { source: None } => f.write_str(
                "restoring a base backup: grown by its step, not from the copy's fill rate",
            ),
            Note::Owner(m) => f.write_str(m),
        }
    }
}

impl Serialize for Note {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}
