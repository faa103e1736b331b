//! The policy users write: one schema for YAML files, the central ConfigMap and annotations.
//!
//! [`Policy`] is the validated, typed form the decision engine consumes. Parsing, the
//! annotation mapping, the hierarchy merge and validation produce it; nothing here does I/O.

pub mod annotations;
mod checker;
pub mod drivers;
pub mod fields;
mod floor;
pub mod json_schema;
pub mod manifest;
pub mod merge;
pub mod reclaim;
pub mod reclaim_global;
mod sections;
pub mod selector;
pub mod selector_usage;
pub mod spec;
pub mod topolvm;
pub mod validate;
mod value;
pub mod window;
pub(crate) mod yaml;

#[cfg(test)]
mod docs_tests;
#[cfg(test)]
pub(crate) mod hostile_tests;
#[cfg(test)]
mod reclaim_tests;
#[cfg(test)]
mod spec_tests;
#[cfg(test)]
mod validate_tests;

pub use merge::{CentralPolicy, Merged, Source};
pub use spec::PolicySpec;
pub use validate::{Context, Validation, parse_policy_yaml, validate};
pub use window::{MaintenanceWindow, WindowError};

/// Errors of the policy module that are not findings about a policy's content.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("YAML syntax: {0}")]
    Yaml(String),
}

use crate::quantity::GI;

/// One problem with a policy, from any layer of it. Here rather than in `validate.rs` because
/// every file of this folder reports findings, and validation reads most of them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    /// YAML path (`emergencyGrow.criticalThreshold`), or the key as written when it is unknown.
    pub field: String,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Threshold,
    Convergent,
}

/// `logicalVolume`: whether a claim's budget, history and size are its logical volume's (the
/// claims of one database cluster and role, one StatefulSet template, one `headroom.dev/group`)
/// or its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogicalVolume {
    /// On for Postgres operators' clusters (their members hold the same data) and explicit
    /// groups (the user asked for it); off for StatefulSets of unknown software, whose members
    /// may hold different data (Kafka, Elasticsearch).
    Auto,
    On,
    Off,
}

/// `offlineExpansion`: what headroom does about a resize the node can only finish when the
/// volume is mounted again (a CSI driver without online expansion: the claim holds
/// `FileSystemResizePending` while its pod runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OfflineExpansion {
    /// Report it and wait for a person to restart the pod.
    Off,
    /// Restart the pod through the Eviction API (its PodDisruptionBudget decides), inside the
    /// maintenance window, or at once past the emergency line when `emergencyGrow.enabled`.
    Evict,
}

/// `nodeExpansion`: how the claim's CSI driver grows the filesystem, as the platform team
/// declares it (Kubernetes 1.20 has no field that says it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeExpansion {
    /// While the volume is mounted: a resize the node holds is given `--resize-timeout`.
    Online,
    /// Only at the next mount: a resize the node holds while the pod runs is `awaiting_remount`
    /// at once.
    Offline,
}

/// `enforcement`: how much of a grow is delegated to headroom.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Enforcement {
    /// Grow as decided.
    Act,
    /// Decide as `act` would, patch nothing: the status annotation, an Event and a metric hold
    /// the recommendation.
    Recommend,
    /// Recommend, and grow only to a recommendation a person approved by its id
    /// (`headroom.dev/approve`); past the emergency line with `emergencyGrow.enabled`, grow
    /// without one.
    Approve,
}

/// `resizeThrough`: what a grow writes. A claim an operator's cluster owns (CloudNativePG
/// `Cluster`, Zalando `postgresql`, Crunchy `PostgresCluster`) can be grown through the size its owner declares, so the
/// operator resizes its claims and its declared size stays true.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ResizeThrough {
    /// Patch the claim's request (the default).
    Claim,
    /// Patch the owner's size field; a claim without a supported owner is grown as a claim.
    Owner,
}

/// How much one threshold-mode action adds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Percent of the current size, clamped to [minStep, maxStep].
    Percent(u32),
    /// A fixed number of bytes (minStep/maxStep do not apply).
    Bytes(u64),
}

/// `minAvailable`: threshold mode grows when free space falls below it.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum MinAvailable {
    /// A size; 0 is no floor.
    Bytes(u64),
    /// A percent of the filesystem's size (statfs total, root-reserved blocks included): what
    /// pvc-autoresizer's `threshold: 10%` means, so its claims grow where they used to.
    Percent(f64),
}

/// `poolReserve`: what a grow leaves free in the storage pool it is carved from (the node's
/// volume group as `CSIStorageCapacity` or TopoLVM's node annotation publishes it).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum PoolReserve {
    /// A size; 0 leaves nothing aside.
    Bytes(u64),
    /// A percent of what the pool has free: the pool never publishes its total, only its room.
    Percent(f64),
}

impl PoolReserve {
    /// The bytes kept aside of a pool with `free` bytes free.
    pub fn bytes(self, free: u64) -> u64 {
        match self {
            PoolReserve::Bytes(b) => b,
            // 0 < p < 100, so the product is within u64.
            PoolReserve::Percent(p) => (free as f64 * p / 100.0).ceil() as u64,
        }
    }
}

impl MinAvailable {
    pub const OFF: MinAvailable = MinAvailable::Bytes(0);

    /// The floor in bytes on a filesystem of `capacity` bytes (a percent rounds down, as
    /// pvc-autoresizer's does); 0 when there is none.
    pub fn bytes(self, capacity: u64) -> u64 {
        match self {
            MinAvailable::Bytes(b) => b,
            // 0 < p < 100, so the product is within u64.
            MinAvailable::Percent(p) => (capacity as f64 * p / 100.0) as u64,
        }
    }

    pub fn is_off(self) -> bool {
        self.bytes(u64::MAX) == 0
    }
}

/// A trigger not applied as written, and what stands in for it: said on the claim (status,
/// Event, metric) as well as by `headroom validate`, never silent.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(tag = "reason", rename_all = "camelCase")]
pub enum Fallback {
    /// `minAvailable` could not be read: it is ignored and the percent trigger decides, at
    /// `usage_threshold` (the CloudNativePG auto-resize RFC's fallback).
    #[serde(rename_all = "camelCase")]
    MinAvailableInvalid { usage_threshold: u8 },
    /// `minAvailable` is at least all the volume could have free (`usable`, used + available):
    /// it could only be met with nothing stored, so applying it would grow an empty claim action
    /// after action. Not applied at this size; the percent trigger decides meanwhile.
    #[serde(rename_all = "camelCase")]
    MinAvailableUnreachable {
        min_available: u64,
        usable: u64,
        usage_threshold: u8,
    },
}

impl Fallback {
    /// The metric label and status reason.
    pub fn as_str(self) -> &'static str {
        match self {
            Fallback::MinAvailableInvalid { .. } => "min_available_invalid",
            Fallback::MinAvailableUnreachable { .. } => "min_available_unreachable",
        }
    }

    /// Every reason, for metrics that export one series each.
    pub const REASONS: [&'static str; 2] = ["min_available_invalid", "min_available_unreachable"];

    /// What happened, for people (status annotation, Event, `simulate`).
    pub fn message(self) -> String {
        use crate::quantity::format as q;
        match self {
            Fallback::MinAvailableInvalid { usage_threshold } => format!(
                "minAvailable is not valid and is ignored: growing at usageThreshold {usage_threshold} % instead"
            ),
            // Without the usable bytes, which move with usage: the text is the same every scan,
            // so the status and the Event are written once.
            Fallback::MinAvailableUnreachable {
                min_available,
                usage_threshold,
                ..
            } => format!(
                "minAvailable {} can never be met at this size (the volume has less free even empty): not applied until the claim is larger; growing at usageThreshold {usage_threshold} % meanwhile (a size floor written on the claim itself is applied as written)",
                q(min_available)
            ),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct EmergencyGrow {
    pub enabled: bool,
    /// Percent used at or above which growth is an emergency, 80-99.
    pub critical_threshold: u8,
    /// Free bytes below which growth is an emergency.
    pub critical_minimum_free: u64,
    pub exceed_limit_on_emergency: bool,
    /// Convergent mode: the most actions of any kind in a rolling 24 h (the CloudNativePG RFC's
    /// `emergencyGrow.maxActionsPerDay`); an emergency may use every one of them.
    pub max_actions_per_day: u32,
    /// Convergent mode: of `max_actions_per_day`, how many planned growth leaves to emergencies.
    pub reserved_actions_for_emergency: u32,
}

/// `trigger`: grow before the threshold when the fill rate says it will be crossed before a
/// resize could land.
#[derive(Debug, Clone, PartialEq)]
pub struct Predictive {
    pub enabled: bool,
    /// How long a resize takes to reach the filesystem when the claim's own history does not say.
    pub resize_lead_time: jiff::SignedDuration,
    /// Added to the lead time: the prediction's error and the time to notice the crossing.
    pub margin: jiff::SignedDuration,
}

#[derive(Debug, Clone, PartialEq)]
pub struct WalSafety {
    pub acknowledge_wal_risk: bool,
    pub require_archive_healthy: bool,
    /// 0 turns the check off (the CloudNativePG RFC's meaning).
    pub max_pending_wal_files: u64,
    /// `None` (unset) or 0: off.
    pub max_slot_retention_bytes: Option<u64>,
    /// How long the oldest segment may wait to be archived; 0 turns the check off.
    pub max_pending_wal_age_seconds: u64,
    /// A Warning Event whenever a volume holding WAL is grown.
    pub alert_on_resize: bool,
}

/// A complete, validated policy.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub enabled: bool,
    pub mode: Mode,
    pub limit: u64,
    /// Shares budget, history and size with the claim's logical volume (see [`LogicalVolume`]).
    pub logical_volume: LogicalVolume,
    /// Whether a resize waiting for a remount is finished by evicting the pod (see
    /// [`OfflineExpansion`]).
    pub offline_expansion: OfflineExpansion,
    /// Whether the node grows the filesystem only at the next mount (see [`NodeExpansion`]).
    pub node_expansion: NodeExpansion,
    /// Whether a grow is made, recommended, or made once approved (see [`Enforcement`]).
    pub enforcement: Enforcement,
    /// Whether a grow patches the claim or its owning cluster (see [`ResizeThrough`]).
    pub resize_through: ResizeThrough,
    /// Grow when this percent is used; `None`: no percent trigger (`minAvailable` alone, or
    /// `usageThreshold: 0`).
    pub usage_threshold: Option<u8>,
    /// Grow when free space falls below this.
    pub min_available: MinAvailable,
    pub inode_threshold: u8,
    pub step: Step,
    pub min_step: u64,
    pub max_step: u64,
    pub max_actions_per_day: u32,
    /// Convergent floor; `None` means no floor beyond the current size.
    pub request: Option<u64>,
    pub target_buffer: u8,
    pub predictive: Predictive,
    /// The least time between two grows of this volume (`modificationInterval`, else its CSI
    /// driver's documented gap, see [`drivers`]); `None`: no gap.
    pub modification_interval: Option<jiff::SignedDuration>,
    /// So many grows per rolling window (its CSI driver's documented budget under
    /// `modificationInterval: auto`); `None`: no budget. A written `modificationInterval`
    /// replaces the driver's whole rule, so it has none.
    pub modification_budget: Option<drivers::Budget>,
    pub maintenance_window: Option<MaintenanceWindow>,
    pub emergency_grow: EmergencyGrow,
    pub wal_safety: WalSafety,
    /// A trigger validation could not apply as written (an invalid `minAvailable`).
    pub fallback: Option<Fallback>,
    /// `minAvailable` was written on the claim itself (its `headroom.dev/*` or
    /// `resize.topolvm.io/*` annotations): applied as written even where the claim could not
    /// meet it empty, since its owner asked for that much free, and the claim grows step by
    /// step until it does. A floor inherited from the StorageClass or the ConfigMap is written
    /// for claims of every size, so there it is not applied until the claim is larger.
    pub floor_on_claim: bool,
    /// Kept free in the storage pool the volume is carved from (see [`PoolReserve`]).
    pub pool_reserve: PoolReserve,
}

/// Defaults, in one place; docs/policy.md's table documents the same values.
pub mod defaults {
    use super::*;
    pub const ENABLED: bool = false;
    pub const MODE: Mode = Mode::Threshold;
    pub const LOGICAL_VOLUME: LogicalVolume = LogicalVolume::Auto;
    /// Opt-in: a pod is restarted only when its claim's policy says so.
    pub const OFFLINE_EXPANSION: OfflineExpansion = OfflineExpansion::Off;
    /// What CSI drivers do today; only a declaration makes a claim wait for a remount at once.
    pub const NODE_EXPANSION: NodeExpansion = NodeExpansion::Online;
    pub const ENFORCEMENT: Enforcement = Enforcement::Act;
    /// Opt-in: an owner is written only when its claim's policy says so.
    pub const RESIZE_THROUGH: ResizeThrough = ResizeThrough::Claim;
    pub const USAGE_THRESHOLD: u8 = 80;
    pub const MIN_AVAILABLE: MinAvailable = MinAvailable::OFF;
    pub const INODE_THRESHOLD: u8 = 90;
    pub const STEP: Step = Step::Percent(20);
    pub const MIN_STEP: u64 = GI;
    pub const MAX_STEP: u64 = 500 * GI;
    pub const MAX_ACTIONS_PER_DAY: u32 = 3;
    pub const TARGET_BUFFER: u8 = 20;
    /// On since issue 27: a fill that would outrun the resize is grown ahead of it.
    pub const PREDICTIVE: bool = true;
    pub const RESIZE_LEAD_TIME: &str = "2m";
    pub const PREDICTIVE_MARGIN: &str = "30s";
    /// `modificationInterval` when not written: the CSI driver's known limit ([`super::drivers`]).
    pub const MODIFICATION_INTERVAL: &str = "auto";
    /// Convergent mode's window when none is written: daily 03:00-05:00 UTC, as in the
    /// CloudNativePG convergent-storage RFC.
    pub const WINDOW_SCHEDULE: &str = "0 3 * * *";
    pub const WINDOW_DURATION: &str = "2h";
    pub const WINDOW_TIMEZONE: &str = "UTC";
    pub const EMERGENCY_ENABLED: bool = true;
    pub const CRITICAL_THRESHOLD: u8 = 95;
    pub const CRITICAL_MINIMUM_FREE: u64 = GI;
    pub const EXCEED_LIMIT_ON_EMERGENCY: bool = false;
    pub const EMERGENCY_MAX_ACTIONS_PER_DAY: u32 = 4;
    pub const RESERVED_ACTIONS_FOR_EMERGENCY: u32 = 1;
    pub const ACKNOWLEDGE_WAL_RISK: bool = false;
    pub const REQUIRE_ARCHIVE_HEALTHY: bool = true;
    pub const MAX_PENDING_WAL_FILES: u64 = 100;
    /// `maxSlotRetentionBytes` is unset (off) unless given, as in the RFC.
    pub const MAX_SLOT_RETENTION_BYTES: Option<u64> = None;
    pub const MAX_PENDING_WAL_AGE: &str = "15m";
    pub const MAX_PENDING_WAL_AGE_SECONDS: u64 = 15 * 60;
    pub const ALERT_ON_RESIZE: bool = true;
    pub const RECLAIM_ENABLED: bool = false;
    pub const RECLAIM_SCHEDULE: &str = "@weekly";
    pub const RECLAIM_TIMEZONE: &str = "UTC";
    /// The pool's published free space is what the storage admits: nothing is kept aside
    /// unless written.
    pub const POOL_RESERVE: PoolReserve = PoolReserve::Bytes(0);
}

impl Policy {
    /// Every key at its default, with the one required key given. `enabled` defaults to false:
    /// headroom is opt-in.
    pub fn with_limit(limit: u64) -> Self {
        use defaults::*;
        Self {
            enabled: ENABLED,
            mode: MODE,
            limit,
            logical_volume: LOGICAL_VOLUME,
            offline_expansion: OFFLINE_EXPANSION,
            node_expansion: NODE_EXPANSION,
            enforcement: ENFORCEMENT,
            resize_through: RESIZE_THROUGH,
            usage_threshold: Some(USAGE_THRESHOLD),
            min_available: MIN_AVAILABLE,
            inode_threshold: INODE_THRESHOLD,
            step: STEP,
            min_step: MIN_STEP,
            max_step: MAX_STEP,
            max_actions_per_day: MAX_ACTIONS_PER_DAY,
            request: None,
            target_buffer: TARGET_BUFFER,
            predictive: Predictive {
                enabled: PREDICTIVE,
                resize_lead_time: jiff::SignedDuration::from_secs(120),
                margin: jiff::SignedDuration::from_secs(30),
            },
            modification_interval: None,
            modification_budget: None,
            maintenance_window: None,
            emergency_grow: EmergencyGrow {
                enabled: EMERGENCY_ENABLED,
                critical_threshold: CRITICAL_THRESHOLD,
                critical_minimum_free: CRITICAL_MINIMUM_FREE,
                exceed_limit_on_emergency: EXCEED_LIMIT_ON_EMERGENCY,
                max_actions_per_day: EMERGENCY_MAX_ACTIONS_PER_DAY,
                reserved_actions_for_emergency: RESERVED_ACTIONS_FOR_EMERGENCY,
            },
            wal_safety: WalSafety {
                acknowledge_wal_risk: ACKNOWLEDGE_WAL_RISK,
                require_archive_healthy: REQUIRE_ARCHIVE_HEALTHY,
                max_pending_wal_files: MAX_PENDING_WAL_FILES,
                max_slot_retention_bytes: MAX_SLOT_RETENTION_BYTES,
                max_pending_wal_age_seconds: MAX_PENDING_WAL_AGE_SECONDS,
                alert_on_resize: ALERT_ON_RESIZE,
            },
            fallback: None,
            floor_on_claim: false,
            pool_reserve: POOL_RESERVE,
        }
    }

    /// Threshold mode's step from a claim of `current` bytes, before the engine widens it for
    /// a fill rate: a percent of it within `[minStep, maxStep]`, or a fixed size.
    pub fn threshold_step(&self, current: u64) -> u64 {
        match self.step {
            Step::Percent(p) => {
                let pct =
                    (u128::from(current) * u128::from(p) / 100).min(u128::from(u64::MAX)) as u64;
                pct.clamp(self.min_step, self.max_step.max(self.min_step))
            }
            Step::Bytes(b) => b,
        }
    }

    /// Whether a grow is written to the claim's owning cluster (`resizeThrough: owner`), which
    /// the agent then reads for it. `recommend` writes nothing, so reads no owner either;
    /// `approve` grows (what a person approved, or past the emergency line), and such a grow
    /// must not bypass the owner.
    pub fn grows_through_owner(&self) -> bool {
        self.resize_through == ResizeThrough::Owner && self.enforcement != Enforcement::Recommend
    }

    /// The size a claim of `current` bytes grows to by `step`: rounded as claims are sized
    /// (whole Gi from 1Gi, whole Mi below), never past the limit.
    pub fn grown_by(&self, current: u64, step: u64) -> u64 {
        crate::quantity::round_size(current.saturating_add(step.max(1)), current).min(self.limit)
    }
}

/// An annotation or ConfigMap data map from pairs, for the policy tests.
#[cfg(test)]
pub(crate) fn test_map(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
