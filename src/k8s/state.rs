//! The durable state headroom keeps on the claim itself (history and status annotations), so an
//! agent restart, a node drain or the workload moving to another node loses nothing.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{KubeError, pvc_name};
use crate::decide::logical::LogicalView;
use crate::decide::pool::PoolView;
use crate::decide::quota::QuotaView;
use crate::decide::recommend::{ApprovalNote, Recommendation};
use crate::decide::{
    Action, BudgetView, Decision, Lsn, PositionSource, State, Verdict, WalHealth, WalPosition,
};
use crate::decide::{budget, deadline};
use crate::report::VolumeReport;

pub const HISTORY: &str = "headroom.dev/history";
pub const STATUS: &str = "headroom.dev/status";

/// History entries kept: the CloudNativePG auto-resize RFC's 50, an audit of what happened
/// (the budget needs only the last 24 h, at most 10 entries). An entry with every field (an
/// approval's included) is under 650 bytes, so 50 stay under 32 KiB of the 256 KiB annotations
/// share per object.
pub const MAX_ENTRIES: usize = 50;

fn annotation<'a>(pvc: &'a PersistentVolumeClaim, key: &str) -> Option<&'a str> {
    pvc.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
        // `kubectl annotate pvc x headroom.dev/history=` is how people clear it by hand.
        .filter(|s| !s.trim().is_empty())
}

/// The claim's past actions; none when the annotation is absent. Corrupt JSON is an error: the
/// agent then refuses to act on the claim instead of forgetting its budget.
pub fn read_history(pvc: &PersistentVolumeClaim) -> Result<Vec<Action>, KubeError> {
    let Some(text) = annotation(pvc, HISTORY) else {
        return Ok(Vec::new());
    };
    let mut history: Vec<Action> =
        serde_json::from_str(text).map_err(|source| KubeError::Annotation {
            object: pvc_name(pvc),
            annotation: HISTORY,
            source,
        })?;
    history.sort_by_key(|a| a.at);
    Ok(history)
}

/// `history` plus `action`, sorted by time, the [`MAX_ENTRIES`] newest kept: always the whole
/// 24 h budget window (at most 10 actions a day), then older entries for operators. Entries dated
/// beyond the clock-skew allowance are dropped: the budget ignores them, so keeping them would
/// only keep the warning about them alive.
pub fn append(history: &[Action], action: Action, now: Timestamp) -> Vec<Action> {
    let mut all: Vec<Action> = budget::counted(history, now)
        .cloned()
        .chain([action])
        .collect();
    all.sort_by_key(|a| a.at);
    let keep_from = all.len().saturating_sub(MAX_ENTRIES);
    all.split_off(keep_from)
}

/// What the status annotation says about the claim, for `headroom status` and for people reading
/// `kubectl get pvc -o yaml`. Its fields follow the CloudNativePG convergent-storage RFC's status
/// model (`effectiveSize`, `targetSize`, `state`, `budget`, `conditions`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusAnnotation {
    pub node: String,
    pub updated_at: Timestamp,
    /// This claim's size (the larger of request and capacity). Absent in annotations written
    /// before issue 24, whose `effectiveSizeBytes` was this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    /// The size a new claim of this volume should get (the RFC's `effectiveSize`).
    pub effective_size_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_size_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_bytes: Option<u64>,
    /// Balanced, NeedsGrow, NeedsShrink, Emergency, Resizing, Blocked or Growing.
    pub state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_reason: Option<String>,
    pub last_decision: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_percent: Option<f64>,
    /// Actions left in the rolling 24 h to any kind.
    pub budget_left: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_slot: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_window: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetStatus>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// A trigger not applied as written (an invalid or unreachable `minAvailable`) and what
    /// stands in for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<FallbackNote>,
    /// The namespace's tightest ResourceQuota line on the claim and what it leaves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<QuotaView>,
    /// The storage pool the claim is carved from, as last read, when its driver publishes one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<crate::decide::pool::PoolView>,
    /// The logical volume whose budget and history the claim shares: members, size, the
    /// distinct actions of the day, and members that cannot follow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logical_volume: Option<LogicalView>,
    /// What the WAL checks read, on a volume whose WAL health is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wal: Option<WalNote>,
    /// Seconds until full at the current fill rate, rounded down to a step of
    /// [`deadline::bucket`] so a filling volume rewrites it a handful of times, not every scan;
    /// absent while the rate is unknown or the volume is not filling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_in_seconds: Option<u64>,
    /// Seconds until the limit at the last week's growth, rounded down the same way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_in_seconds: Option<u64>,
    /// Its instance restores a base backup: what it is sized to instead of its fill rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restoring: Option<String>,
    /// A resize waiting for a remount: what headroom does about the pod, and why it waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<crate::decide::restart::Restart>,
    /// `enforcement: recommend | approve`: the grow waiting for a person, with its id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recommendation: Option<Recommendation>,
    /// The last approval given (`headroom.dev/approve`) and what became of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalNote>,
}

/// The WAL block: the position slots' retention was measured from, and each slot not known to
/// be in use (the ones `walSafety.maxSlotRetentionBytes` can block on) with its `restart_lsn`,
/// so a blocked claim reads against `pg_replication_slots`. Slots in use are left out: the
/// annotation lives on every claim and should stay small.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WalNote {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<WalPosition>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slots: Vec<SlotNote>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlotNote {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_lsn: Option<Lsn>,
    pub retained_bytes: u64,
}

impl WalNote {
    /// `None` where there is nothing to say (no Postgres, or nothing known of its WAL).
    fn of(wal: &WalHealth) -> Option<WalNote> {
        let slots: Vec<SlotNote> = wal
            .inactive_slots
            .iter()
            .flatten()
            .map(|s| SlotNote {
                name: s.name.clone(),
                restart_lsn: s.restart_lsn,
                retained_bytes: s.retained_bytes,
            })
            .collect();
        let position = wal.detail.position;
        (position.is_some() || !slots.is_empty()).then_some(WalNote { position, slots })
    }

    /// What a change worth a write is: another source or another set of slots. Positions and
    /// retained bytes move with every write to the database; alone they are not (`/volumes`
    /// and `headroom wal-health` have the live numbers).
    fn key(&self) -> (Option<PositionSource>, Vec<&str>) {
        let names = self.slots.iter().map(|s| s.name.as_str()).collect();
        (self.position.map(|p| p.source), names)
    }
}

/// The RFC's `BudgetStatus`: the rolling 24 h budget, planned and emergency apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetStatus {
    pub actions_last_24h: u32,
    pub reserved_for_emergency: u32,
    pub available_for_planned: u32,
    pub available_for_emergency: u32,
    /// When the oldest action in the window leaves it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_resets_at: Option<Timestamp>,
}

impl From<BudgetView> for BudgetStatus {
    fn from(b: BudgetView) -> Self {
        BudgetStatus {
            actions_last_24h: b.actions_last_24h,
            reserved_for_emergency: b.reserved_for_emergency,
            available_for_planned: b.available_for_planned,
            available_for_emergency: b.available_for_emergency,
            budget_resets_at: b.resets_at,
        }
    }
}

/// One condition, shaped like Kubernetes' (without a transition time: the annotation is
/// rewritten only when something changes, and `updatedAt` says when).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Condition {
    #[serde(rename = "type")]
    pub kind: String,
    /// `True` or `False`.
    pub status: String,
    pub reason: String,
}

fn condition(kind: &str, status: bool, reason: &str) -> Condition {
    Condition {
        kind: kind.to_string(),
        status: if status { "True" } else { "False" }.to_string(),
        reason: reason.to_string(),
    }
}

/// The state of a claim whose grow waits for a person (`enforcement: recommend | approve`).
pub const RECOMMENDED: &str = "Recommended";

/// The state the annotation shows: the engine's, `Growing` while a grow is made, `Blocked`, and
/// the RFC's `Emergency` for a convergent volume past the critical line that is not growing
/// this instant (its `blockedReason` says why).
pub fn state_of(d: &Decision) -> &'static str {
    match d.verdict {
        Verdict::Grow { .. } => "Growing",
        _ if d.emergency => "Emergency",
        Verdict::Blocked { .. } => "Blocked",
        Verdict::NoAction { state } => state.as_str(),
    }
}

/// `Emergency` and `Converged` (convergent mode, which alone has a target), `GrowthBlocked` and
/// `BudgetAvailable`. Reasons are stable words; nothing that moves every scan.
fn conditions(d: &Decision, state: &str) -> Vec<Condition> {
    let mut out = Vec::new();
    if d.target_bytes.is_some() {
        let reason = if d.emergency {
            "PastCriticalLine"
        } else {
            "BelowCriticalLine"
        };
        out.push(condition("Emergency", d.emergency, reason));
        let converged = [State::Balanced, State::NeedsShrink]
            .iter()
            .any(|s| s.as_str() == state);
        out.push(condition("Converged", converged, state));
    }
    out.push(match d.blocked_reason() {
        Some(r) => condition("GrowthBlocked", true, r.as_str()),
        None => condition("GrowthBlocked", false, "NotBlocked"),
    });
    let b = &d.budget;
    out.push(match (b.available_for_planned, b.available_for_emergency) {
        (0, 0) => condition("BudgetAvailable", false, "Exhausted"),
        (0, _) => condition("BudgetAvailable", false, "EmergencyOnly"),
        _ => condition("BudgetAvailable", true, "ActionsLeft"),
    });
    out
}

/// `{"reason":"min_available_unreachable","message":"..."}` in the status annotation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FallbackNote {
    pub reason: String,
    pub message: String,
}

impl From<crate::policy::Fallback> for FallbackNote {
    fn from(f: crate::policy::Fallback) -> Self {
        FallbackNote {
            reason: f.as_str().to_string(),
            message: f.message(),
        }
    }
}

/// Moves of used percent below this do not count as a change worth an API write.
const USED_PERCENT_EPSILON: f64 = 1.0;

/// A convergent target that moves by less than this fraction of itself is not a change worth
/// an API write (it follows usage byte by byte; the engine acts only on 5 % moves anyway).
const TARGET_TOLERANCE: f64 = 0.01;

fn target_moved(a: Option<u64>, b: Option<u64>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => {
            let (lo, hi) = (a.min(b) as f64, a.max(b) as f64);
            hi - lo > hi * TARGET_TOLERANCE
        }
        (a, b) => a.is_some() != b.is_some(),
    }
}

impl StatusAnnotation {
    pub fn from_report(report: &VolumeReport, now: Timestamp) -> Self {
        let d = &report.decision;
        let size = crate::quantity::format;
        let enforced = report.enforced.as_ref();
        let held = enforced.filter(|e| e.hold);
        let state = if held.is_some() {
            RECOMMENDED
        } else {
            state_of(d)
        };
        let last_decision = match d.verdict {
            Verdict::Grow { to, kind } if held.is_some() => format!(
                "recommended: {}{} {} -> {}",
                kind.as_str(),
                if d.predicted { " (predicted)" } else { "" },
                size(report.claim.current_bytes()),
                size(to)
            ),
            Verdict::Grow { to, kind } => format!(
                "{}{} {} -> {}",
                kind.as_str(),
                if d.predicted { " (predicted)" } else { "" },
                size(report.claim.current_bytes()),
                size(to)
            ),
            Verdict::Blocked { reason } => format!("blocked: {reason}"),
            Verdict::NoAction { state } => format!("no action: {}", state.as_str()),
        };
        let current = report.claim.current_bytes();
        StatusAnnotation {
            node: report.node.clone(),
            updated_at: now,
            size_bytes: Some(current),
            effective_size_bytes: d.effective_bytes.unwrap_or(current),
            target_size_bytes: d.target_bytes,
            limit_bytes: report.limit_bytes,
            state: state.to_string(),
            blocked_reason: d.blocked_reason().map(|r| r.as_str().to_string()),
            last_decision,
            // One decimal is what a table shows; more digits would only churn the annotation.
            used_percent: report
                .measurement
                .map(|m| (m.used_percent() * 10.0).round() / 10.0),
            budget_left: d.budget_left,
            next_slot: d.next_slot,
            next_window: d.next_window,
            budget: Some(d.budget.into()),
            conditions: conditions(d, state),
            fallback: d.fallback.map(FallbackNote::from),
            quota: report.quota.clone(),
            pool: report.pool.clone(),
            logical_volume: report.logical.clone(),
            wal: report.wal.as_ref().and_then(WalNote::of),
            full_in_seconds: d.seconds_to_full.and_then(deadline::bucket),
            limit_in_seconds: d.seconds_to_limit.and_then(deadline::bucket),
            restoring: d.restoring().map(ToString::to_string),
            restart: d.restart,
            recommendation: enforced.and_then(|e| e.recommendation.clone()),
            approval: enforced.and_then(|e| e.approval.clone()),
        }
    }

    /// A change worth writing: anything but `updatedAt`, the writing `node` (agents on every
    /// node of an RWX claim would otherwise take turns rewriting it), used-percent moves under
    /// one point, target moves under one percent and WAL positions moving. Steady state writes
    /// nothing.
    pub fn differs(&self, other: &StatusAnnotation) -> bool {
        let used_moved = match (self.used_percent, other.used_percent) {
            (Some(a), Some(b)) => (a - b).abs() >= USED_PERCENT_EPSILON,
            (a, b) => a.is_some() != b.is_some(),
        };
        let target = target_moved(self.target_size_bytes, other.target_size_bytes);
        let quota = quota_moved(self.quota.as_ref(), other.quota.as_ref());
        let pool = pool_moved(self.pool.as_ref(), other.pool.as_ref());
        let wal = self.wal.as_ref().map(WalNote::key) != other.wal.as_ref().map(WalNote::key);
        let mut a = self.clone();
        a.wal.clone_from(&other.wal);
        a.updated_at = other.updated_at;
        a.used_percent = other.used_percent;
        a.node = other.node.clone();
        a.target_size_bytes = other.target_size_bytes;
        a.quota = other.quota.clone();
        a.pool = other.pool.clone();
        used_moved || target || quota || pool || wal || a != *other
    }
}

/// A quota change worth a write: another quota or limit, or room appearing or running out. Usage
/// moving within the room is not: every claim of a namespace shares its quota, and one claim's
/// grow would otherwise rewrite the status of all of them (the metric and `/volumes` have the
/// live numbers).
fn quota_moved(a: Option<&QuotaView>, b: Option<&QuotaView>) -> bool {
    let key = |q: &QuotaView| {
        (
            q.line.quota.clone(),
            q.line.resource.clone(),
            q.line.hard_bytes,
            q.left_bytes == 0,
            q.refused,
        )
    };
    a.map(key) != b.map(key)
}

/// A pool change worth a write: another pool, or its free space moving by a tenth or more (or
/// to or from nothing). Every claim carved from a node's pool shares it, and each grow would
/// otherwise rewrite the status of all of them (the metric has the live number).
fn pool_moved(a: Option<&PoolView>, b: Option<&PoolView>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => {
            let key = |p: &PoolView| (p.class.clone(), p.segment.clone(), p.source.clone());
            let (lo, hi) = (
                a.free_bytes.min(b.free_bytes) as f64,
                a.free_bytes.max(b.free_bytes) as f64,
            );
            key(a) != key(b)
                || a.max_volume_bytes != b.max_volume_bytes
                || (lo == 0.0) != (hi == 0.0)
                || hi - lo >= hi / 10.0
        }
        (a, b) => a.is_some() != b.is_some(),
    }
}

/// The status annotation; `None` when absent, an error naming the claim when corrupt.
pub fn read_status(pvc: &PersistentVolumeClaim) -> Result<Option<StatusAnnotation>, KubeError> {
    annotation(pvc, STATUS)
        .map(|text| {
            serde_json::from_str(text).map_err(|source| KubeError::Annotation {
                object: pvc_name(pvc),
                annotation: STATUS,
                source,
            })
        })
        .transpose()
}

/// The single merge patch of a Grow: new storage request and both annotations, with the
/// resourceVersion the decision was made on as precondition (a 409 means decide again).
pub fn grow_patch(
    resource_version: &str,
    to_bytes: u64,
    history: &[Action],
    status: &StatusAnnotation,
) -> Result<Value, KubeError> {
    Ok(json!({
        "metadata": {
            "resourceVersion": resource_version,
            "annotations": {
                HISTORY: serde_json::to_string(history)?,
                STATUS: serde_json::to_string(status)?,
            },
        },
        "spec": { "resources": { "requests": { "storage": crate::quantity::format(to_bytes) } } },
    }))
}

/// A status merge patch, with the history when it changed without a grow (a resize's landing
/// time); with a resourceVersion it is conditional like [`grow_patch`].
pub fn status_patch(
    resource_version: Option<&str>,
    status: &StatusAnnotation,
    history: Option<&[Action]>,
) -> Result<Value, KubeError> {
    let mut metadata = json!({ "annotations": { STATUS: serde_json::to_string(status)? } });
    if let Some(h) = history {
        metadata["annotations"][HISTORY] = json!(serde_json::to_string(h)?);
    }
    if let Some(rv) = resource_version {
        metadata["resourceVersion"] = json!(rv);
    }
    Ok(json!({ "metadata": metadata }))
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
